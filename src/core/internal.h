/*
 * Internal definitions shared by every module of the library: the communicator, requests,
 * operation descriptors, and the CHECK/goto-fail idiom.
 */
#ifndef RING_INTERNAL_H
#define RING_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "ring_config.h"
#include "ringcomm.h"

#define RING__ERRMSG_MAX 1024
#define RING__HOST_MAX 64
#define RING__BOOTID_MAX 40

/* Evaluate an expression returning ring_result_t; on failure jump to the cleanup tail. */
#define RING_CHECK_GOTO(expr, rc, label)                                                           \
    do {                                                                                           \
        (rc) = (expr);                                                                             \
        if ((rc) != RING_OK) goto label;                                                           \
    } while (0)
#define RING_CHECK(expr) RING_CHECK_GOTO(expr, rc, fail)

#define RING__MIN(a, b) ((a) < (b) ? (a) : (b))
#define RING__MAX(a, b) ((a) > (b) ? (a) : (b))

typedef enum {
    RING__COLL_ALLREDUCE = 1,
    RING__COLL_REDUCE_SCATTER,
    RING__COLL_ALLGATHER,
    RING__COLL_BROADCAST,
    RING__COLL_BARRIER,
} ring__coll_t;

const char *ring__coll_name(ring__coll_t c);
/* The public function's name without "ring_": "allreduce", or "allreduce_async". */
const char *ring__call_name(ring__coll_t c, int async);
const char *ring__dtype_name(ring_dtype_t d);
const char *ring__op_name(ring_op_t o);

/* One collective call as issued by the user, validated. */
typedef struct ring__opdesc {
    ring__coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* allreduce/broadcast: elements; reduce_scatter/allgather: per rank */
    ring_dtype_t dtype;
    ring_op_t op;
    int root;
    uint64_t seq; /* per-communicator sequence number, assigned at issue time */
    /* CUDA (src/cuda/mem.h): 1 when sendbuf/recvbuf are device memory of CUDA device `device`
     * and the call runs on the device path (src/cuda/coll.c); 0 (host-accessible) otherwise. */
    int mem_device;
    int device;
} ring__opdesc_t;

struct ring_request {
    ring_comm_t *comm;
    ring__opdesc_t op;
    ring_result_t result;
    atomic_int done;
    int on_stack; /* blocking slow path: owned by the caller's frame, never freed here */
    struct ring_request *qnext;          /* run queue */
    struct ring_request *live_prev, *live_next; /* every heap request not yet waited for */
};

struct ring__transport;
struct ring__bootstrap;

/* Algorithm choice (RING_ALGO): by size, or forced. RD stands for the latency algorithms:
 * recursive doubling (all-reduce, barrier) and the binomial tree (broadcast, RING__ALGO_TREE
 * in descriptors and perf output). */
enum { RING__ALGO_AUTO, RING__ALGO_RING, RING__ALGO_RD, RING__ALGO_TREE, RING__ALGO_RH, RING__ALGO_SM };
/* Transport (RING_TRANSPORT): auto = shared memory inside a host, verbs between hosts where
 * both have a port, TCP otherwise. */
enum { RING__TP_AUTO, RING__TP_TCP, RING__TP_SHM, RING__TP_RDMA };

typedef struct ring__params {
    int timeout_ms;
    size_t chunk_bytes;
    int nsocks; /* RING_NSOCKS: 1..16, or 0 for auto (ring__tcp_pair_nsocks) */
    int pipeline_depth;
    size_t sockbuf_bytes;
    int spin_us; /* busy-poll this long after the last progress before sleeping in poll() */
    int spin_yield; /* RING_SPIN_YIELD: -1 auto, 0 never, 1 always (yield the CPU between tries) */
    int tcp_duplex; /* RING_TCP_DUPLEX: a pair that stays TCP sends both ways on one socket bundle */
    char tcp_cc[16]; /* RING_TCP_CONGESTION: "auto", "system" or a kernel algorithm's name */
    int tcp_rto_max_ms; /* RING_TCP_RTO_MAX_MS: cap of the data sockets' backoff; 0 keeps the kernel's */
    int tcp_rto_max_set; /* RING_TCP_RTO_MAX_MS was given (a kernel without the option is then a warning) */
    int port_lo, port_hi; /* data listen port range; 0,0 = ephemeral */
    int algo;             /* RING__ALGO_*: RING_ALGO */
    size_t rd_max_bytes;  /* auto: recursive doubling up to this many bytes (RING_RD_MAX_BYTES) */
    int rd_max_set;       /* RING_RD_MAX_BYTES was given; else the default depends on the transport */
    size_t tree_max_bytes; /* auto: binomial-tree broadcast up to this many bytes (RING_TREE_MAX_BYTES) */
    size_t rh_max_bytes;   /* auto: recursive halving above rd_max up to this many bytes (RING_RH_MAX_BYTES) */
    int rh_max_set;
    size_t sm_max_bytes;   /* auto: shared-memory all-reduce up to this many bytes; 0: no page (RING_SM_MAX_BYTES) */
    int sm_max_set;        /* RING_SM_MAX_BYTES was given; else the default depends on the host's NUMA nodes */
    int transport;        /* RING__TP_*: RING_TRANSPORT */
    int ib_qps;           /* RING_IB_QPS_PER_PEER: queue pairs per verbs connection */
    int ib_timeout;       /* RING_IB_TIMEOUT: QP local ACK timeout exponent, 4.096 us x 2^t per try */
    int ib_retry_cnt;     /* RING_IB_RETRY_CNT: retransmissions before a QP gives up */
    int ib_tc;            /* RING_IB_TC: traffic class of the queue pairs' GRH (RoCE: the IP DSCP and ECN bits) */
    int ib_sl;            /* RING_IB_SL: service level (InfiniBand: the virtual lane; RoCE: the VLAN priority) */
    int ib_roce_version;  /* RING_IB_ROCE_VERSION: GIDs of this RoCE version only (1, 2; 0: any) */
    int ib_addr_family;   /* RING_IB_ADDR_FAMILY: GIDs of this family only (4, 6; 0: any) */
    int ib_range_prefix;  /* RING_IB_ADDR_RANGE: GIDs sharing this many leading bits with ib_range_net (-1: any) */
    uint8_t ib_range_net[16];
    char ib_range[64];    /* RING_IB_ADDR_RANGE as given */
    char shm_dir[256];    /* where shared-memory segments are created (RING_SHM_DIR) */
    char host_id[64];     /* RING_HOST_ID: stands in for host name and boot id, "" = the real ones */
    uint8_t secret[16];
    int secret_set;
    char ifname[128];
    int cuda_ipc; /* RING_CUDA_IPC: RING__CUDA_IPC_* (src/cuda/direct.h): direct collectives, ring links */
    int cuda_direct_work; /* RING_CUDA_DIRECT_WORK: RING__DIRECT_WORK_* (src/cuda/direct.h): who queues a direct call's GPU work */
    int ib_gdr;   /* RING_IB_GDR: GPUDirect RDMA for device buffers over verbs; -1 auto, 0 off, 1 required */
} ring__params_t;

struct ring_comm {
    int rank, nranks;
    struct ring_comm *live_next; /* registry of live communicators (comm.c) */
    ring__params_t params;

    /* Error state. fail_code is set once, by the first failure of a collective; later calls
     * return it at once. errmsg holds the detail of the most recent failure of any call. */
    pthread_mutex_t err_mu;
    atomic_int fail_code;
    char fail_msg[RING__ERRMSG_MAX];
    char errmsg[RING__ERRMSG_MAX];

    atomic_int aborted;
    atomic_int aborting;      /* ring_comm_abort calls still inside: destroy waits for them */
    atomic_int remote_failed; /* another rank failed or died (watch.c); fail_code/msg say how */
    atomic_int relaying;      /* root: failures it is relaying to the ranks (watch.c); abort waits */
    int wake_fd; /* eventfd: abort() and the watcher write it so that a poll() in progress returns */

    /* Watcher thread on the bootstrap star (watch.c). star_mu serialises writes on the star
     * and guards watch_left (ranks that said goodbye) and the root's stuck_desc. */
    pthread_mutex_t star_mu;
    pthread_t watch_thread;
    int watch_started;
    int watch_stop_fd;
    int *watch_left;
    void *watch_mem; /* the watcher's poll set and buffers (watch.c) */
    /* Stuck reports (watch.c). The call this rank runs and the algorithm its descriptor names
     * (set by ring__run_op once the algorithm is known, cleared when it returns; only the
     * thread running the call reads them), and seq + 1 of the last call reported (0: none).
     * Root: every rank's last report, RING__DESC_LEN bytes each (all zero: none), under star_mu. */
    const ring__opdesc_t *stuck_op;
    int stuck_algo;
    uint64_t stuck_said;
    unsigned char *stuck_desc;
    int64_t *stuck_at; /* the root: when each rank's last stuck report came (ring__now_ns) */

    /* Run queue and progress thread. */
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* progress thread: work queued or shutdown */
    pthread_cond_t cv_done; /* waiters: a request finished or the engine went idle */
    struct ring_request *qhead, *qtail;
    struct ring_request *live;
    int busy;     /* an operation is running (inline in a caller, or on the thread) */
    int waiters;  /* blocking calls waiting in the queue for their turn, threads in ring_wait: destroy waits for them */
    int shutdown; /* destroy in progress */
    int thread_started;
    pthread_t thread;
    uint64_t next_seq;

    /* Address (IP, port 0) chosen for data connections, and a per-job nonce from the root
     * that every data connection must present along with the secret. */
    struct sockaddr_storage data_addr;
    unsigned data_addr_len;
    uint64_t job_nonce;

    /* Bootstrap star and rank table, the data listener and the connections, all kept for the
     * communicator's lifetime (so point-to-point connections can be added later, p2p.h). */
    struct ring__bootstrap *bs;
    struct ring__peer_info *peers; /* every rank's data address and host identity */
    const struct ring__transport *tp; /* TCP: the listener, and every connection to start with */
    void *tp_ctx;
    void *lcomm;
    void *shm_ctx; /* shared-memory transport (shm.c); connections to same-host peers upgrade to it */
    void *rdma_ctx; /* verbs transport (rdma.c), NULL without a usable port; other-host peers upgrade to it */
    /* CUDA IPC links to the ring neighbours (src/cuda/ipc.c), made by the first device
     * collective with RING_CUDA_IPC=1, freed by ring_comm_destroy; cuda_ipc_device is the
     * device they are bound to (-1: none yet), claimed when that call is accepted. */
    void *cuda_ipc;
    atomic_int cuda_ipc_device;
    /* Direct collectives over CUDA IPC when every rank is on this host (src/cuda/direct.c):
     * the shared page and the mappings of peers' buffers; NULL where they do not apply. */
    void *cuda_direct;
    /* The shared-memory all-reduce's page (src/collectives/sm.c) when every rank is on this
     * host; NULL otherwise. */
    void *sm;
    /* Device staging sets of failed calls (src/cuda/coll.c): transport requests may still
     * point into them, so they are freed only after the connections are closed. */
    void *cuda_dead;
    /* GPUDirect RDMA slots (src/cuda/gdr.c), made by the first device collective with a verbs
     * neighbour; their registrations go with rdma_ctx, the memory with ring_comm_destroy. */
    void *cuda_gdr;
    struct ring_reg *regs; /* ring_comm_register handles not yet deregistered (guarded by mu) */
    /* Topology (src/topo): the process's view of the machine (NULL if unreadable) and this
     * communicator's placement (NULL with one rank): NIC, NUMA node of buffers, progress
     * thread CPUs. */
    const struct ring__topo *topo;
    struct ring__topo_plan *plan;
    /* A waiting rank polls without giving its CPU away (ring__spin_once): no other rank of this
     * communicator needs that CPU (ring__spin_busy_pick). Otherwise every try yields. */
    int spin_busy;
    int all_shm;   /* every ring edge is shared memory: the same answer on every rank (algorithm defaults) */
    void **conn_send, **conn_recv; /* by rank, NULL where not connected */
    void *send_right; /* = conn_send[right] */
    void *recv_left;  /* = conn_recv[left] */
    /* The ring visits ranks in order[0..n): ranks of one host next to each other (topology),
     * the same on every rank. pos = this rank's place; left/right are order[pos -/+ 1]. The
     * ring algorithms work on positions; rank-owned data (reduce-scatter results, all-gather
     * blocks, the broadcast root) is mapped through order[] and pos_of[]. */
    int *order, *pos_of;
    int pos;
    int left, right;
    char peer_desc[2][160]; /* "rank 3 (10.0.0.4:40123)" for left [0] and right [1] */

    /* Scratch for the engine: pipeline_depth chunks, allocated lazily, reused; and the
     * engine's per-call bookkeeping (windows, slot lists), sized by depth, likewise. */
    void *scratch;
    size_t scratch_bytes;
    void *engine_mem;
};

/* Error reporting. All set the comm's last error (if comm != NULL, else thread-local). */
ring_result_t ring__seterr(ring_comm_t *comm, ring_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, appending ": <strerror(errnum)>". */
ring_result_t ring__seterr_errno(ring_comm_t *comm, ring_result_t code, int errnum,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Mark the communicator failed (first failure wins), with text, or with the current error
 * where text is NULL (only where no other thread can have set one since: the caller's own). */
void ring__comm_fail(ring_comm_t *comm, ring_result_t code, const char *text);
/* If comm has failed: set "<what>: communicator failed earlier: <first error>" and return
 * the first error's code; else RING_OK. */
ring_result_t ring__failed_result(ring_comm_t *comm, const char *what);
/* fork(): a stream socket of the library, closed in a forked child (comm.c); whether comm was
 * live when this process was forked from its parent (then unusable here); the text for a
 * handle that is not live here. */
void ring__fd_own(int fd);
/* Around calls into libraries that hold a process-wide lock of their own while they run (hwloc's
 * topology load, libibverbs' device list and opening): fork() waits for every such call to end
 * (comm.c's atfork handler), or a child could find that lock held for good and hang in its own
 * first ring_comm_init. */
void ring__fork_guard_enter(void);
void ring__fork_guard_leave(void);
int ring__comm_inherited(const ring_comm_t *comm);
const char *ring__not_live_text(const ring_comm_t *comm);
/* The hex field of a file name in RING_SHM_DIR, ringcomm-<uid>-<pid>-<field>-<rest>: a hash keyed
 * with the secret of the job nonce and rest. Every rank of the job computes the same one, and no
 * name tells another user the next (the shared page's name is made after the segments' names
 * are listed in /dev/shm for all to see) or the job nonce that the data handshakes carry. */
uint64_t ring__shm_name_tag(const ring_comm_t *comm, const char *rest);
/* Thread-local message buffer for failures without a communicator. */
char *ring__tls_errbuf(void);
/* Around a collective run on this thread (run_one): the errors this thread sets on comm
 * meanwhile are also kept for it, and ring__op_error gives the last of them (else
 * comm->errmsg), whatever other threads' calls wrote into comm->errmsg since. */
void ring__op_begin(const ring_comm_t *comm);
void ring__op_end(void);
void ring__op_error(ring_comm_t *comm, char *out, size_t len);
/* Set comm's last error to text (and this thread's collective's, as ring__seterr does). */
void ring__errmsg_put(ring_comm_t *comm, const char *text);

/* Queue (reqp != NULL) or run (reqp == NULL) a validated operation; assigns op->seq. */
ring_result_t ring__submit(ring_comm_t *comm, ring__opdesc_t *op, ring_request_t **reqp);

static inline int ring__mod_int(int a, int n) { return ((a % n) + n) % n; }

/* Is comm a communicator that was created and not yet destroyed? */
int ring__comm_live(const ring_comm_t *comm);

/* Monotonic clock in nanoseconds. */
int64_t ring__now_ns(void);
/* Sleep ns nanoseconds (< 1 s), for the waits that have nothing to poll. */
/* Set on the progress thread, which runs the _async calls while the caller's own threads
 * compute: it always yields, as they may need its CPU. */
extern _Thread_local int ring__on_progress_thread;

/* One try of an active wait that has been idle for idle_ns: one pause instruction when this
 * rank has a CPU to itself and the wait is within RING_SPIN_US, else sched_yield, which
 * is a system call (0.2-0.5 us, longer than a shared-memory hand-off takes) but lets another
 * thread of this process, or the rank that will answer, run on this CPU. Waits on a shared
 * page go on trying longer than RING_SPIN_US (they have no descriptor to sleep on): past it
 * they yield, so that a CPU the launcher gave this rank alone still serves its other threads. */
static inline void ring__spin_once(const ring_comm_t *comm, int64_t idle_ns)
{
    if (comm->spin_busy && !ring__on_progress_thread && idle_ns < (int64_t)comm->params.spin_us * 1000) {
        /* One, not a few: a pause takes 61 cycles on AMD Zen 3 (measured) and about 140 on
         * Intel since Skylake, so eight made each try 0.2-0.5 us and a message waited half of
         * that on average before it was seen (2 ranks, 8 B all-reduce 5-6% faster with one,
         * docs/performance.md 2026-11-27 (2)). */
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
        return;
    }
    sched_yield();
}

static inline void ring__nap_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

#endif
