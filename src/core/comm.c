/*
 * Communicator lifecycle, the run queue and the progress thread.
 *
 * Threads: every communicator has one progress thread that runs queued (_async) operations
 * in issue order. A blocking call runs inline in the caller's thread when nothing is queued
 * or running (no thread hand-off on the common path, which matters for small-message
 * latency); otherwise it queues behind the others and waits. `busy` serialises the two, so
 * exactly one operation drives the connections at any time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "engine.h"
#include "log.h"
#include "net.h"
#include "p2p.h"
#include "param.h"
#include "rdma.h"
#include "reduce.h"
#include "topo.h"
#include "transport.h"
#if RING_HAVE_CUDA
#include "cuda/coll.h"
#include "cuda/direct.h"
#include "cuda/gdr.h"
#include "cuda/ipc.h"
#endif
#include "watch.h"

/* How long a call that lost a connection waits for the star to say why (watch.c): the rank
 * next to a dead one sees its socket close first, ranks further away see their neighbour's
 * socket close when that neighbour gives up, and the cause ("rank 5 died") is the useful
 * message for all of them. The cause normally arrives within milliseconds, and a closed
 * connection (RING_ERR_PEER) always has one coming: the peer died (the root sees its star
 * connection close), failed (its FAIL) or left (its BYE, which ends the wait at once). So
 * that wait can be long without costing anything: it was 300 ms, then 1 s, and CI's ASan
 * ranks in the soft-RoCE guest still once had no cause after 1 s and named a survivor that
 * had given up instead of the killed rank. Garbage on a connection (RING_ERR_PROTOCOL) may
 * come from a healthy peer that has nothing to say, so it waits less. */
#define CAUSE_GRACE_PEER_NS (4000LL * 1000000LL)
#define CAUSE_GRACE_PROTOCOL_NS (1000LL * 1000000LL)

static ring_result_t run_one(ring_comm_t *comm, const ring__opdesc_t *op)
{
    if (atomic_load(&comm->fail_code) != RING_OK) {
        /* Named with its number, as every other failure of a call is (queued calls behind a
         * failure said "allreduce: communicator failed earlier"). */
        char what[64];
        snprintf(what, sizeof what, "%s #%llu", ring__coll_name(op->coll), (unsigned long long)op->seq);
        ring_result_t fc = ring__failed_result(comm, what);
        if (fc != RING_OK) return fc;
    }
    ring__op_begin(comm);
    ring_result_t rc = ring__run_op(comm, op);
    int left = -1;
    /* The failure's own text, as this thread set it: another thread's call (an argument
     * error, say) may have overwritten the communicator's last error since, and may during
     * the wait below. */
    char cause[RING__ERRMSG_MAX] = "";
    if (rc != RING_OK) ring__op_error(comm, cause, sizeof cause);
    ring__op_end();
    if (rc == RING_ERR_PEER || rc == RING_ERR_PROTOCOL) {
        /* A rank that left (its goodbye came over the star) explains a closed connection, and
         * no FAIL will follow it. */
        int64_t until = ring__now_ns() + (rc == RING_ERR_PEER ? CAUSE_GRACE_PEER_NS : CAUSE_GRACE_PROTOCOL_NS);
        while (!atomic_load(&comm->remote_failed) && !atomic_load(&comm->aborted) &&
               (left = ring__watch_someone_left(comm)) < 0 && ring__now_ns() < until) {
            struct timespec ts = {0, 5 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (rc == RING_OK) return rc;
    char what[64];
    snprintf(what, sizeof what, "%s #%llu", ring__coll_name(op->coll), (unsigned long long)op->seq);
    /* An abort during the grace above is the call's result, as for a call that saw it itself. */
    if (atomic_load(&comm->aborted)) return ring__seterr(comm, RING_ERR_ABORTED, "%s: aborted by ring_comm_abort", what);
    if (atomic_load(&comm->remote_failed)) return ring__remote_result(comm, what);
    if (left >= 0) {
        ring__watch_note_left(comm, left, what, cause, sizeof cause);
    } else if (rc == RING_ERR_TIMEOUT) {
        ring__watch_stuck_hint(comm, 0, cause, sizeof cause);
    } else if (rc == RING_ERR_PEER) {
        /* The whole grace passed: the usual reason is a partition that cut off rank 0, which
         * relays every failure, while the peer that closed had timed out (the netns-faults
         * test does it). Say so, or the reader takes the healthy peer for the culprit. */
        size_t n = strlen(cause);
        snprintf(cause + n, sizeof cause - n, "%s",
                 comm->rank == 0 ? " (no rank said why within 4 s: the peer may have timed out waiting for a rank that is cut off)"
                                 : " (no cause came from rank 0, which relays every failure, within 4 s: the peer may have timed "
                                   "out, and rank 0 may be unreachable)");
    }
    ring__errmsg_put(comm, cause);
    ring__comm_fail(comm, rc, cause);
    return rc;
}

_Thread_local int ring__on_progress_thread;

static void *progress_main(void *arg)
{
    ring_comm_t *comm = arg;
    ring__on_progress_thread = 1;
    /* This thread is the library's: the default mode for good (it started with the mode of
     * ring_comm_init's thread). */
    (void)ring__fp_default_begin();
    if (comm->plan) {
        char why[320];
        int b = ring__topo_bind_thread(comm->topo, comm->plan, NULL, why, sizeof why);
        if (b != 0 || comm->plan->bind)
            RING_LOG(b < 0 ? RING_LOG_WARN : RING_LOG_INFO, RING_SUB_INIT, comm->rank, "progress thread: %s", why);
    }
    pthread_mutex_lock(&comm->mu);
    for (;;) {
        /* Busy (a blocking call inline on another thread) waits even at shutdown: spinning here
         * would hold mu, which that call needs to finish. */
        while (comm->busy || (!comm->shutdown && !comm->qhead)) pthread_cond_wait(&comm->cv_work, &comm->mu);
        if (!comm->qhead) break; /* shutdown with an empty queue */
        struct ring_request *r = comm->qhead;
        comm->qhead = r->qnext;
        if (!comm->qhead) comm->qtail = NULL;
        comm->busy = 1;
        pthread_mutex_unlock(&comm->mu);
        ring_result_t rc = run_one(comm, &r->op);
        pthread_mutex_lock(&comm->mu);
        r->result = rc;
        atomic_store(&r->done, 1);
        comm->busy = 0;
        pthread_cond_broadcast(&comm->cv_done);
    }
    pthread_mutex_unlock(&comm->mu);
    return NULL;
}

static void enqueue(ring_comm_t *comm, struct ring_request *r)
{
    r->qnext = NULL;
    if (comm->qtail) comm->qtail->qnext = r;
    else comm->qhead = r;
    comm->qtail = r;
    pthread_cond_signal(&comm->cv_work);
}

ring_result_t ring__submit(ring_comm_t *comm, ring__opdesc_t *op, ring_request_t **reqp)
{
    pthread_mutex_lock(&comm->mu);
    if (comm->shutdown) {
        pthread_mutex_unlock(&comm->mu);
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s called during ring_comm_destroy", ring__coll_name(op->coll));
    }
    op->seq = comm->next_seq++;
    if (!reqp) {
        if (!comm->busy && !comm->qhead) {
            comm->busy = 1;
            pthread_mutex_unlock(&comm->mu);
            const unsigned fp = ring__fp_default_begin();
            ring_result_t rc = run_one(comm, op);
            ring__fp_default_end(fp);
            pthread_mutex_lock(&comm->mu);
            comm->busy = 0;
            if (comm->qhead || comm->shutdown) pthread_cond_signal(&comm->cv_work);
            pthread_cond_broadcast(&comm->cv_done);
            pthread_mutex_unlock(&comm->mu);
            return rc;
        }
        struct ring_request r = {.comm = comm, .op = *op, .on_stack = 1};
        atomic_init(&r.done, 0);
        enqueue(comm, &r);
        comm->waiters++;
        while (!atomic_load(&r.done)) pthread_cond_wait(&comm->cv_done, &comm->mu);
        comm->waiters--;
        pthread_cond_broadcast(&comm->cv_done); /* destroy may wait for the last waiter */
        pthread_mutex_unlock(&comm->mu);
        return r.result;
    }
    struct ring_request *r = calloc(1, sizeof *r);
    if (!r) {
        comm->next_seq--; /* nothing was issued: keep sequence numbers aligned across ranks */
        pthread_mutex_unlock(&comm->mu);
        return ring__seterr(comm, RING_ERR_NOMEM, "out of memory for a request");
    }
    r->comm = comm;
    r->op = *op;
    atomic_init(&r->done, 0);
    r->live_next = comm->live;
    if (comm->live) comm->live->live_prev = r;
    comm->live = r;
    enqueue(comm, r);
    pthread_mutex_unlock(&comm->mu);
    *reqp = r;
    return RING_OK;
}

/* Tests: a thread in ring_wait that takes the lock back this long after its request is done
 * (RING_TEST_WAIT_WAKE_HOLD_MS), as a thread of a busy program may. Read once. */
static int wait_wake_hold_ms(void)
{
    static atomic_int ms = -1;
    int v = atomic_load_explicit(&ms, memory_order_relaxed);
    if (v < 0) {
        const char *s = getenv("RING_TEST_WAIT_WAKE_HOLD_MS");
        v = s && *s ? atoi(s) : 0;
        atomic_store_explicit(&ms, v < 0 ? 0 : v, memory_order_relaxed);
    }
    return v;
}

ring_result_t ring_wait(ring_request_t *req)
{
    if (!req) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_wait: request is NULL");
    ring_comm_t *comm = req->comm;
    if (ring__comm_inherited(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_wait: %s", ring__not_live_text(comm));
    pthread_mutex_lock(&comm->mu);
    /* Counted as a blocking call waiting is: ring_comm_destroy from another thread (a watchdog
     * after ring_comm_abort) waits for this thread to take its request off the list instead of
     * freeing the request, and the communicator, under it. */
    comm->waiters++;
    while (!atomic_load(&req->done)) pthread_cond_wait(&comm->cv_done, &comm->mu);
    const int hold = wait_wake_hold_ms();
    if (hold > 0) {
        pthread_mutex_unlock(&comm->mu);
        ring__nap_ns((int64_t)hold * 1000000LL);
        pthread_mutex_lock(&comm->mu);
    }
    if (req->live_prev) req->live_prev->live_next = req->live_next;
    else comm->live = req->live_next;
    if (req->live_next) req->live_next->live_prev = req->live_prev;
    comm->waiters--;
    pthread_cond_broadcast(&comm->cv_done); /* destroy may wait for the last waiter */
    pthread_mutex_unlock(&comm->mu);
    ring_result_t rc = req->result;
    free(req);
    return rc;
}

ring_result_t ring_test(ring_request_t *req, int *done)
{
    if (!req || !done) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_test: NULL request or done pointer");
    if (ring__comm_inherited(req->comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_test: %s", ring__not_live_text(req->comm));
    *done = atomic_load(&req->done);
    return *done ? req->result : RING_OK;
}

/* A ring_comm_register handle: the transport's registration, kept on the communicator's list
 * so that deregister can tell a handle of its own and destroy can free what is left. */
struct ring_reg {
    void *mh; /* the verbs registration, NULL where no transport needs one */
    struct ring_reg *next;
};

static void release_network(ring_comm_t *comm)
{
    if (comm->tp) {
        for (int r = 0; comm->conn_send && r < comm->nranks; r++)
            if (comm->conn_send[r]) ring__tp_of(comm->conn_send[r])->close(comm->conn_send[r]);
        for (int r = 0; comm->conn_recv && r < comm->nranks; r++)
            if (comm->conn_recv[r]) ring__tp_of(comm->conn_recv[r])->close(comm->conn_recv[r]);
        if (comm->lcomm) comm->tp->close_listen(comm->lcomm);
        comm->tp->fini(comm->tp_ctx);
    }
    ring__shm_transport.fini(comm->shm_ctx);
    comm->shm_ctx = NULL;
#if RING_HAVE_RDMA
    /* After the connections: their queue pairs and registrations belong to its device. */
    if (comm->rdma_ctx) ring__rdma_transport.fini(comm->rdma_ctx);
#endif
    comm->rdma_ctx = NULL;
    free(comm->conn_send);
    free(comm->conn_recv);
    free(comm->peers);
    free(comm->order);
    free(comm->pos_of);
    comm->order = comm->pos_of = NULL;
    comm->conn_send = comm->conn_recv = NULL;
    comm->peers = NULL;
    comm->send_right = comm->recv_left = comm->tp_ctx = comm->lcomm = NULL;
    ring__bootstrap_close(comm->bs);
    comm->bs = NULL;
}

/* Every communicator between creation and destroy, so that a call on a destroyed (or never
 * created) handle is an error instead of a use after free. A freed address can be reused by a
 * new communicator; then the old handle aliases the new one, which no registry can tell. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static ring_comm_t *live_head;
/* Every call checks its handle, and a small all-reduce takes 0.4-0.5 us: a thread remembers the
 * last handle it found and the count of removals then, and skips the lock and the walk while no
 * communicator has been destroyed since. */
static _Atomic uint64_t live_removals;
static _Thread_local const ring_comm_t *live_seen;
static _Thread_local uint64_t live_seen_at;

/* comm is on the list (live_mu held). */
static int listed(const ring_comm_t *comm)
{
    for (ring_comm_t *c = live_head; c; c = c->live_next)
        if (c == comm) return 1;
    return 0;
}

int ring__comm_live(const ring_comm_t *comm)
{
    if (comm && comm == live_seen && atomic_load_explicit(&live_removals, memory_order_acquire) == live_seen_at) return 1;
    pthread_mutex_lock(&live_mu);
    uint64_t at = atomic_load_explicit(&live_removals, memory_order_relaxed);
    int found = listed(comm);
    pthread_mutex_unlock(&live_mu);
    if (found) {
        live_seen = comm;
        live_seen_at = at;
    }
    return found;
}

static void live_add(ring_comm_t *comm)
{
    pthread_mutex_lock(&live_mu);
    comm->live_next = live_head;
    live_head = comm;
    pthread_mutex_unlock(&live_mu);
}

/*
 * fork(). A child made after init (PyTorch's DataLoader workers, a subprocess that does not
 * exec) inherits every socket of every communicator: while it lives, a rank that dies is not
 * seen to die (its peers' connections stay open) and they wait out RING_TIMEOUT_MS. And its
 * calls would speak for the parent's rank. So the child closes the library's stream sockets
 * at once (each recorded with its inode, so a number the parent reused for something else is
 * left alone) and forgets its communicators: every call on one says why it cannot be used.
 */
static pthread_mutex_t owned_mu = PTHREAD_MUTEX_INITIALIZER;
/* Grown by ring__fd_own (the child may not allocate): rank 0's star alone holds a socket per
 * rank, so no fixed count fits every job, and a socket left out stayed open in the child. */
static struct owned {
    int fd;
    dev_t dev;
    ino_t ino;
} *owned;
static int nowned, owned_cap;
/* The communicators the parent had, chained through live_next as live_head was (the child
 * only reads them); they used to be copied into 64 slots, and a 65th was "destroyed twice?"
 * in the child, its queued requests waited for forever. */
static const ring_comm_t *inherited_head;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int still(const struct owned *o)
{
    struct stat st;
    return fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

void ring__fd_own(int fd)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&owned_mu);
    if (nowned == owned_cap) { /* drop the ones closed since, then grow if that was not enough */
        int k = 0;
        for (int i = 0; i < nowned; i++)
            if (still(&owned[i])) owned[k++] = owned[i];
        nowned = k;
    }
    if (nowned == owned_cap && owned_cap < INT_MAX / 2) {
        int cap = owned_cap ? owned_cap * 2 : 256;
        struct owned *o = realloc(owned, (size_t)cap * sizeof *o);
        if (o) owned = o, owned_cap = cap;
    }
    /* Out of memory: this one is left open in a child (a peer's death may then be seen late). */
    if (nowned < owned_cap) owned[nowned++] = (struct owned){.fd = fd, .dev = st.st_dev, .ino = st.st_ino};
    pthread_mutex_unlock(&owned_mu);
}

/* Readers: threads inside such calls; the writer: fork_prepare. glibc's default prefers
 * readers, so a guarded call inside another never waits for a fork that waits for it. */
static pthread_rwlock_t fork_guard = PTHREAD_RWLOCK_INITIALIZER;

void ring__fork_guard_enter(void) { pthread_rwlock_rdlock(&fork_guard); }
void ring__fork_guard_leave(void) { pthread_rwlock_unlock(&fork_guard); }

static void fork_prepare(void)
{
    /* First: a guarded call may take the locks below (a socket it records), never the reverse. */
    pthread_rwlock_wrlock(&fork_guard);
    pthread_mutex_lock(&live_mu);
    pthread_mutex_lock(&owned_mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&owned_mu);
    pthread_mutex_unlock(&live_mu);
    pthread_rwlock_unlock(&fork_guard);
}

/* Only async-signal-safe calls (fstat, close): the child of a threaded process. */
static void fork_child(void)
{
    for (int i = 0; i < nowned; i++)
        if (still(&owned[i])) close(owned[i].fd);
    nowned = 0;
    /* The parent's live list goes in front of what an earlier fork left (a grandchild). */
    if (live_head) {
        ring_comm_t *last = live_head;
        while (last->live_next) last = last->live_next;
        last->live_next = (ring_comm_t *)inherited_head;
        inherited_head = live_head;
    }
    live_head = NULL;
    atomic_fetch_add_explicit(&live_removals, 1, memory_order_relaxed);
    pthread_mutex_unlock(&owned_mu);
    pthread_mutex_unlock(&live_mu);
    /* Not unlocked: glibc knows the writer by its thread id, which is another one in the child,
     * and took the unlock for a reader's (the child's next guarded call hung). The child has no
     * other thread to hold it. */
    static const pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
    fork_guard = fresh;
}

static void atfork_install(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* At load, not at the first ring_comm_init: handlers registered by that init while another
 * thread's fork() ran its prepare handlers (a slow one of another library) were left out of
 * that fork, and its child could find the topology's lock held. In comm.o, which every program
 * that uses the library links, the static archive included. */
__attribute__((constructor)) static void atfork_at_load(void) { pthread_once(&atfork_once, atfork_install); }

int ring__comm_inherited(const ring_comm_t *comm)
{
    for (const ring_comm_t *c = inherited_head; comm && c; c = c->live_next)
        if (c == comm) return 1;
    return 0;
}

const char *ring__not_live_text(const ring_comm_t *comm)
{
    return ring__comm_inherited(comm)
               ? "not usable in this process: the communicator was created before fork() made it (create a new one here)"
               : "not a live communicator (destroyed, or never created)";
}

/* ring_comm_abort's hold: comm is live and stays allocated until abort_done, because destroy
 * waits for every hold taken before live_remove took comm off the list. */
static int abort_hold(ring_comm_t *comm)
{
    pthread_mutex_lock(&live_mu);
    int found = listed(comm);
    if (found) atomic_fetch_add(&comm->aborting, 1);
    pthread_mutex_unlock(&live_mu);
    return found;
}

/* Returns 0 if comm was not live. */
static int live_remove(ring_comm_t *comm)
{
    int found = 0;
    pthread_mutex_lock(&live_mu);
    for (ring_comm_t **pp = &live_head; *pp; pp = &(*pp)->live_next)
        if (*pp == comm) {
            *pp = comm->live_next;
            atomic_fetch_add_explicit(&live_removals, 1, memory_order_release);
            found = 1;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    return found;
}

/* RING_SPIN_YIELD: whether waits poll without yielding the CPU (comm->spin_busy), logged. */
static void pick_wait(ring_comm_t *comm)
{
    const char *soft = NULL; /* a verbs device that needs this host's CPUs to move anything */
#if RING_HAVE_RDMA
    if (comm->rdma_ctx && ring__rdma_soft_device(ring__rdma_dev_name(comm->rdma_ctx)))
        soft = ring__rdma_dev_name(comm->rdma_ctx);
#endif
    /* A container's CPU limit, not the host's CPU count, is what its ranks share. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), limit = 0;
    if (comm->params.spin_yield < 0 && !soft) limit = ring__cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    if (limit > 0 && limit < cpus) cpus = limit;
    comm->spin_busy = comm->params.spin_yield >= 0 ? !comm->params.spin_yield
                      : !soft && ring__spin_busy_pick(comm->peers, comm->nranks, comm->rank, cpus);
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "waits poll for %d us %s before sleeping (RING_SPIN_YIELD=%s%s%s)",
             comm->params.spin_us, comm->spin_busy ? "without yielding the CPU" : "yielding the CPU between tries",
             comm->params.spin_yield < 0 ? "auto" : comm->params.spin_yield ? "1" : "0",
             soft && comm->params.spin_yield < 0 ? "; software verbs device " : "", soft && comm->params.spin_yield < 0 ? soft : "");
}

/* Every ring edge joins two ranks of one host that both take shared memory. Computed from
 * the rank table alone, so every rank gets the same answer (algorithm thresholds depend on it
 * and must agree). */
static int all_shm(const ring_comm_t *comm)
{
    for (int p = 0; p < comm->nranks; p++) {
        const ring__peer_info_t *a = &comm->peers[comm->order[p]], *b = &comm->peers[comm->order[(p + 1) % comm->nranks]];
        if (!ring__topo_shm_pair(a, b)) return 0;
    }
    return 1;
}

/* The interface the plan chose (the NIC closest to the rank's GPU or cores) if it can carry
 * the job: an address of the root's family on a subnet that holds the root. Otherwise (a
 * management NIC, another rail) the route to the root stays, and the log says why. */
static int planned_if(const char *name, const ring__sockaddr_t *root, ring__sockaddr_t *out, char *why, size_t len)
{
    struct ifaddrs *ifa = NULL;
    int ok = 0;
    if (root->ss.ss_family != AF_INET || getifaddrs(&ifa) != 0) {
        snprintf(why, len, "only IPv4 roots are matched to an interface's subnet");
        return 0;
    }
    uint32_t r = ntohl(((const struct sockaddr_in *)&root->ss)->sin_addr.s_addr);
    snprintf(why, len, "%s has no IPv4 address on the root's subnet", name);
    for (struct ifaddrs *i = ifa; i && !ok; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            strcmp(i->ifa_name, name))
            continue;
        uint32_t a = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
        uint32_t m = ntohl(((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
        if ((a & m) != (r & m)) continue;
        memset(out, 0, sizeof *out);
        memcpy(&out->ss, i->ifa_addr, sizeof(struct sockaddr_in));
        out->len = sizeof(struct sockaddr_in);
        ring__addr_set_port(out, 0);
        ok = 1;
    }
    freeifaddrs(ifa);
    return ok;
}

/* Read the machine (once per process) and decide where this rank's buffers, progress thread
 * and traffic go; every decision is logged with its reason. A RING_TOPO_FILE that cannot be
 * read is the user's error; a machine hwloc cannot read only costs the placement. */
static ring_result_t plan_placement(ring_comm_t *comm)
{
    ring_result_t rc;
    ring__topo_req_t req;
    const ring__topo_t *topo = NULL;
    rc = ring__topo_get(comm, &topo);
    if (rc != RING_OK) {
        const char *f = getenv("RING_TOPO_FILE");
        if (f && *f) return rc;
        RING_LOG(RING_LOG_WARN, RING_SUB_INIT, comm->rank, "topology: %s; no placement", comm->errmsg);
        topo = NULL;
    }
    comm->topo = topo;
    comm->plan = calloc(1, sizeof *comm->plan);
    if (!comm->plan) return ring__seterr(comm, RING_ERR_NOMEM, "out of memory");
    const char *src = NULL;
    char gpu[32];
    RING_CHECK(ring__placement_req(comm, &req, gpu, sizeof gpu, &src));
    RING_CHECK(ring__topo_plan(comm, topo, &req, comm->plan));
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "topology: local rank %d of %d (%s)%s%s", req.local_rank,
             req.nlocal, src ? src : "no launcher variables", req.gpu_busid ? ", GPU " : "",
             req.gpu_busid ? req.gpu_busid : "");
    for (const char *l = comm->plan->text; *l;) {
        size_t n = strcspn(l, "\n");
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "topology: %.*s", (int)n, l);
        l += n + (l[n] == '\n');
    }
fail:
    return rc;
}

/* What makes two ranks of one host share memory in dir (bootstrap.h, shm_id): equal only
 * where they see one directory (device and inode), run as one user and can both write it. */
static uint64_t shm_identity(const char *dir)
{
    struct stat st;
    /* The user as the kernel knows it: one euid in two user namespaces is two users. */
    uint64_t v[5] = {0, 0, (uint64_t)geteuid(), (uint64_t)(access(dir, W_OK | X_OK) == 0), 0};
    if (stat(dir, &st) == 0) v[0] = (uint64_t)st.st_dev, v[1] = (uint64_t)st.st_ino;
    if (stat("/proc/self/ns/user", &st) == 0) v[4] = (uint64_t)st.st_ino;
    /* Only equality matters (a difference goes unseen 1 time in 2^64). */
    return ring__fnv1a64(v, sizeof v) | 1u;
}

static ring_result_t connect_ring(ring_comm_t *comm, const char *root_addr)
{
    ring_result_t rc;
    const ring__transport_t *tp = &ring__tcp_transport;
    ring__sockaddr_t roots[RING__ROOT_ADDRS_MAX], local;
    ring__peer_info_t mine;
    char ifname[64], b[80], b2[80];
    int64_t deadline = ring__now_ns() + (int64_t)comm->params.timeout_ms * 1000000LL;
    int n = comm->nranks, nroots = 0;

    RING_CHECK(ring__addr_resolve_all(comm, root_addr, roots, RING__ROOT_ADDRS_MAX, &nroots));
    {
        /* A name may stand for several addresses, and this host may not be able to use the
         * first: the root listens on the first it can bind, the others start from the first
         * they have a route to (and the bootstrap tries them all). That one leads the list. */
        int pick = 0;
        while (pick < nroots && !(comm->rank == 0 ? ring__addr_bindable(&roots[pick]) : ring__addr_routable(&roots[pick])))
            pick++;
        if (pick == nroots) pick = 0; /* the listen or the connect says what is wrong with it */
        ring__sockaddr_t first = roots[pick];
        memmove(&roots[1], &roots[0], (size_t)pick * sizeof *roots);
        roots[0] = first;
    }
    const ring__sockaddr_t root = roots[0];
    RING_CHECK(plan_placement(comm));
    {
        const ring__topo_plan_t *pl = comm->plan;
        char why[160];
        int use = !comm->params.ifname[0] && pl->nic >= 0 && !pl->nic_forced && comm->topo && !comm->topo->from_file &&
                  comm->topo->devs[pl->nic].kind == RING__TOPO_NET;
        if (use && planned_if(pl->nic_name, &root, &local, why, sizeof why)) {
            snprintf(ifname, sizeof ifname, "%s", pl->nic_name);
        } else {
            if (use) RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "topology: keeping the route to the root: %s", why);
            RING_CHECK(ring__local_addr(comm, comm->params.ifname, &root, &local, ifname, sizeof ifname));
        }
    }
    memcpy(&comm->data_addr, &local.ss, local.len);
    comm->data_addr_len = local.len;
    comm->tp = tp;
    RING_CHECK(tp->init(comm, &comm->tp_ctx));
    memset(&mine, 0, sizeof mine);
    RING_CHECK(tp->listen(comm->tp_ctx, &mine.addr, &comm->lcomm));
    ring__host_identity(&mine);
    if (comm->params.host_id[0]) {
        /* Stand-in host identity (RING_HOST_ID): tests of ring order, and containers that
         * share a kernel (so a boot id) and a host name but not their shared memory. */
        snprintf(mine.host, sizeof mine.host, "%s", comm->params.host_id);
        snprintf(mine.bootid, sizeof mine.bootid, "RING_HOST_ID");
    }
    {
        /* Tests: a rank that says it runs on another machine (its kernel's boot id). */
        const char *k = getenv("RING_TEST_KERNEL");
        if (k && *k) mine.kernel = ring__kernel_hash(k);
    }
#if RING_HAVE_RDMA
    if (comm->params.transport == RING__TP_AUTO || comm->params.transport == RING__TP_RDMA) {
        RING_CHECK(ring__rdma_transport.init(comm, &comm->rdma_ctx));
        if (comm->rdma_ctx) mine.flags |= RING__PEER_RDMA;
    }
#endif
    if (comm->params.transport == RING__TP_AUTO || comm->params.transport == RING__TP_SHM) {
        RING_CHECK(ring__shm_transport.init(comm, &comm->shm_ctx));
        mine.flags |= RING__PEER_SHM;
#if RING_HAVE_CUDA
        /* The direct path's page lives in RING_SHM_DIR, which the shared-memory transport may
         * do without (it falls back to TCP): offer the path only where the page can be made. */
        if (ring__cuda_ipc_direct(comm->params.cuda_ipc) && access(comm->params.shm_dir, W_OK | X_OK) == 0)
            mine.flags |= RING__PEER_CUDA_DIRECT;
#endif
        int swept = ring__shm_sweep(comm->params.shm_dir);
        if (swept)
            RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "removed %d shared-memory segment(s) of dead processes from %s",
                     swept, comm->params.shm_dir);
    }
    {
        ring__sockaddr_t la;
        ring__peer_sockaddr(&mine, &la);
        char ns[16] = "auto";
        if (comm->params.nsocks) snprintf(ns, sizeof ns, "%d", comm->params.nsocks);
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank,
                 "rank %d/%d: root %s, data address %s on interface %s%s, %s transport, %s socket(s), chunk %zu B, depth %d",
                 comm->rank, n, ring__addr_str(&root, b, sizeof b), ring__addr_str(&la, b2, sizeof b2), ifname,
                 comm->params.ifname[0] ? " (RING_SOCKET_IFNAME)" : " (route to the root)", tp->name, ns,
                 comm->params.chunk_bytes, comm->params.pipeline_depth);
    }
    if (!comm->params.secret_set)
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank,
                 "RING_SECRET is not set: connections are checked against a built-in default secret only");
    comm->peers = calloc((size_t)n, sizeof *comm->peers);
    comm->conn_send = calloc((size_t)n, sizeof *comm->conn_send);
    comm->conn_recv = calloc((size_t)n, sizeof *comm->conn_recv);
    if (!comm->peers || !comm->conn_send || !comm->conn_recv) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "out of memory");
        goto fail;
    }
    mine.layout = ring__layout_key(comm->params.chunk_bytes, comm->params.pipeline_depth);
    /* The settings every rank must share, in the flags word (bootstrap.h). */
    static const struct {
        const char *name;
        uint32_t mask;
        int shift;
        const char *zero; /* how the setting says 0, if not "0" */
    } shared[] = {{"RING_NSOCKS", RING__PEER_NSOCKS_MASK, RING__PEER_NSOCKS_SHIFT, "auto"},
                  {"RING_TCP_DUPLEX", RING__PEER_DUPLEX, RING__PEER_DUPLEX_SHIFT, NULL}};
    mine.flags |= ring__peer_tcp_flags(comm->params.nsocks, comm->params.tcp_duplex);
    mine.flags |= comm->params.sm_max_bytes ? RING__PEER_SM_PAGE : 0u;
    mine.shm_id = shm_identity(comm->params.shm_dir);
    RING_CHECK(ring__bootstrap_init(comm, roots, nroots, &mine, comm->peers, deadline));
    RING_CHECK(ring__watch_open(comm));
    /* Every rank shares memory with this one: where the shared-memory all-reduce's page is
     * made (sm.c). Ranks of this host that do not: TCP, said once. */
    int all_share = 1, unshared = -1, nunshared = 0;
    for (int r = 0; r < n; r++) {
        int share = ring__topo_shm_pair(&comm->peers[r], &mine);
        all_share &= share;
        if (!share && r != comm->rank && ring__topo_same_host(&comm->peers[r], &mine) &&
            (comm->peers[r].flags & mine.flags & RING__PEER_SHM))
            unshared = unshared < 0 ? r : unshared, nunshared++;
    }
    if (unshared >= 0)
        RING_LOG(RING_LOG_WARN, RING_SUB_INIT, comm->rank,
                 "rank %d%s on this host does not share RING_SHM_DIR (\"%s\" here) with this rank: " RING__SHM_UNSHARED_WHY
                 "; TCP (or verbs) between them",
                 unshared, nunshared > 1 ? " and others" : "", comm->params.shm_dir);
    /* Every rank sees the whole table, so every rank fails here, before any collective could
     * pair messages that were cut differently, or any socket is made that a peer would drop. */
    for (int r = 0; r < n; r++) {
        const ring__peer_info_t *p = &comm->peers[r];
        if (p->layout != mine.layout) {
            rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                              "rank %d (%s, pid %u) runs with a different RING_CHUNK_BYTES or RING_PIPELINE_DEPTH "
                              "than this rank (%zu bytes, depth %d): ring collectives need the same on every rank",
                              r, p->host, p->pid, comm->params.chunk_bytes, comm->params.pipeline_depth);
            goto fail;
        }
        for (size_t k = 0; k < sizeof shared / sizeof *shared; k++) {
            uint32_t theirs = (p->flags & shared[k].mask) >> shared[k].shift;
            uint32_t ours = (mine.flags & shared[k].mask) >> shared[k].shift;
            if (theirs != ours) {
                char t[16], o[16];
                snprintf(t, sizeof t, "%u", theirs);
                snprintf(o, sizeof o, "%u", ours);
                rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                                  "rank %d (%s, pid %u) runs with %s=%s, this rank with %s: %s differs between ranks "
                                  "(it must be equal on all ranks)",
                                  r, p->host, p->pid, shared[k].name, !theirs && shared[k].zero ? shared[k].zero : t,
                                  !ours && shared[k].zero ? shared[k].zero : o, shared[k].name);
                goto fail;
            }
        }
        if (all_share && ((p->flags ^ mine.flags) & RING__PEER_SM_PAGE)) {
            rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                              "rank %d (%s, pid %u) runs with RING_SM_MAX_BYTES %s0, this rank %s0 (%zu): it must be "
                              "equal on all ranks (0 on some would leave the others waiting for the shared page)",
                              r, p->host, p->pid, p->flags & RING__PEER_SM_PAGE ? "above " : "= ",
                              mine.flags & RING__PEER_SM_PAGE ? "above " : "= ", comm->params.sm_max_bytes);
            goto fail;
        }
    }

    {
        /* Its peers on other machines would retry its address until the timeout. */
        int far, lo = ring__loopback_far(comm->peers, n, &far);
        if (lo >= 0) {
            const ring__peer_info_t *p = &comm->peers[lo];
            ring__sockaddr_t la;
            ring__peer_sockaddr(p, &la);
            rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                              "rank %d (%s, pid %u) has the loopback data address %s, which rank %d on another machine "
                              "(%s) cannot reach: on rank %d, RING_SOCKET_IFNAME selects only the loopback interface, or "
                              "the route to the root runs over it; name the interface of the network between the hosts",
                              lo, p->host, p->pid, ring__addr_str(&la, b, sizeof b), far, comm->peers[far].host, lo);
            goto fail;
        }
    }

    /* Ranks of one host side by side: the ring crosses the network once per host. */
    comm->order = malloc((size_t)n * sizeof *comm->order);
    comm->pos_of = malloc((size_t)n * sizeof *comm->pos_of);
    if (!comm->order || !comm->pos_of) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "out of memory");
        goto fail;
    }
    {
        int nhosts = 0;
        char line[512];
        RING_CHECK(ring__topo_ring_order(comm, comm->peers, n, comm->order, &nhosts));
        for (int p = 0; p < n; p++) comm->pos_of[comm->order[p]] = p;
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "ring order: %s",
                 ring__topo_order_str(comm->peers, comm->order, n, line, sizeof line));
    }
    comm->pos = comm->pos_of[comm->rank];
    comm->left = comm->order[ring__mod_int(comm->pos - 1, n)];
    comm->right = comm->order[ring__mod_int(comm->pos + 1, n)];
    comm->all_shm = all_shm(comm);
    pick_wait(comm);
    ring__peer_desc(comm, comm->left, comm->peer_desc[0], sizeof comm->peer_desc[0]);
    ring__peer_desc(comm, comm->right, comm->peer_desc[1], sizeof comm->peer_desc[1]);
    RING_CHECK(ring__conn_establish(comm, &comm->right, 1, &comm->left, 1, deadline));
    comm->send_right = comm->conn_send[comm->right];
    comm->recv_left = comm->conn_recv[comm->left];
    /* Recursive doubling's partners, whatever RING_ALGO says on this rank, so that ranks with
     * different settings still finish init (the descriptor check then names the difference). */
    {
        int partners[34];
        int np = ring__rd_partners(comm->rank, n, partners);
        RING_CHECK(ring__conn_establish(comm, partners, np, partners, np, deadline));
    }
#if RING_HAVE_CUDA
    RING_CHECK(ring__direct_setup(comm));
#endif
    RING_CHECK(ring__sm_setup(comm));
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "ring ready: left %s over %s, right %s over %s%s",
             comm->peer_desc[0], ring__tp_of(comm->recv_left)->name, comm->peer_desc[1], ring__tp_of(comm->send_right)->name,
             comm->all_shm ? " (every ring edge on one host: shared-memory defaults)" : "");
fail:
    return rc;
}

ring_result_t ring_comm_init_config(ring_comm_t **out, int nranks, int rank, const char *root_addr,
                                    const ring_config_t *cfg)
{
    ring_result_t rc = RING_OK;
    /* The log takes its copy of stderr now, as api.md says: set up at its first line instead, a
     * program that closed fd 2 after init would have the log written into whatever took it. */
    ring__log_init();
    if (!out) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init: comm pointer is NULL");
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init: rank %d / nranks %d out of range", rank, nranks);
    if (nranks > 1 && (!root_addr || !*root_addr))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init: root_addr is required when nranks > 1");
    if (root_addr && *root_addr) {
        /* One rank connects nothing, but a typo that passes there must not wait to fail the
         * same program at two ranks. */
        char h[256], pt[16];
        if (ring__parse_hostport(root_addr, h, sizeof h, pt, sizeof pt) != 0)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init: bad root address \"%s\": expected host:port or [ipv6]:port",
                                root_addr);
    }
    pthread_once(&atfork_once, atfork_install);
    ring_comm_t *comm = calloc(1, sizeof *comm);
    if (!comm) return ring__seterr(NULL, RING_ERR_NOMEM, "ring_comm_init: out of memory");
    comm->rank = rank;
    comm->nranks = nranks;
    comm->wake_fd = -1;
    atomic_init(&comm->fail_code, RING_OK);
    atomic_init(&comm->aborted, 0);
    atomic_init(&comm->aborting, 0);
    atomic_init(&comm->remote_failed, 0);
    atomic_init(&comm->cuda_ipc_device, -1);
    comm->watch_stop_fd = -1;
    pthread_mutex_init(&comm->err_mu, NULL);
    pthread_mutex_init(&comm->star_mu, NULL);
    pthread_mutex_init(&comm->mu, NULL);
    pthread_cond_init(&comm->cv_work, NULL);
    pthread_cond_init(&comm->cv_done, NULL);
    live_add(comm);
    *out = comm;

    /* Its code as ring_config_init gives it: RING_ERR_UNSUPPORTED for RING_TRANSPORT=rdma in a
     * build without verbs, RING_ERR_INVALID_ARG for a malformed value. */
    rc = ring__params_resolve(&comm->params, cfg);
    if (rc != RING_OK) {
        snprintf(comm->errmsg, sizeof comm->errmsg, "%s", ring__tls_errbuf());
        goto fail;
    }
    comm->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (comm->wake_fd < 0) {
        rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "eventfd");
        goto fail;
    }
    if (nranks > 1) {
        RING_CHECK(connect_ring(comm, root_addr));
    } else {
        /* One rank places nothing, but a RING_BIND typo must not pass here and fail the same
         * job at two ranks: its value is checked as every other RING_* variable is. */
        ring__topo_req_t req;
        RING_CHECK(ring__topo_req_init(comm, NULL, &req));
    }
    RING_CHECK(ring__watch_start(comm));

    sigset_t all, old;
    sigfillset(&all);
    /* The progress thread must not take the application's signals (Ctrl-C handlers etc.). */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&comm->thread, NULL, progress_main, comm);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, e, "cannot start the progress thread");
        goto fail;
    }
    comm->thread_started = 1;
    return RING_OK;
fail:
    /* Keep the shell (for ring_comm_last_error) but give back sockets and memory now. The
     * failure goes out before the watcher's goodbye: ranks that finished init must hear why,
     * not that this rank left. */
    ring__comm_fail(comm, rc, NULL);
    ring__watch_stop(comm);
    ring__sm_fini(comm);
    release_network(comm);
    snprintf(ring__tls_errbuf(), RING__ERRMSG_MAX, "%s", comm->errmsg);
    return rc;
}

ring_result_t ring_comm_init(ring_comm_t **comm, int nranks, int rank, const char *root_addr)
{
    return ring_comm_init_config(comm, nranks, rank, root_addr, NULL);
}

ring_result_t ring_comm_init_env(ring_comm_t **comm)
{
    if (!comm) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init_env: comm pointer is NULL");
    *comm = NULL;
    ring__env_bootstrap_t eb;
    ring_result_t rc = ring__env_bootstrap(&eb);
    if (rc != RING_OK) return rc;
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, eb.rank, "init from %s environment: rank %d of %d, root %s", eb.source,
             eb.rank, eb.nranks, eb.root);
    return ring_comm_init(comm, eb.nranks, eb.rank, eb.root);
}

ring_result_t ring_comm_abort(ring_comm_t *comm)
{
    if (!comm) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_abort: comm is NULL");
    /* The call it wakes returns at once, and its thread may destroy comm while this one still
     * tells the other ranks (a watchdog's abort, then the main thread's destroy). */
    if (!abort_hold(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_abort: %s", ring__not_live_text(comm));
    atomic_store_explicit(&comm->aborted, 1, memory_order_release);
    uint64_t one = 1;
    if (comm->wake_fd >= 0 && write(comm->wake_fd, &one, sizeof one) < 0) { /* already signalled */ }
    /* Outside mu: telling the other ranks may wait briefly on a full star socket, and the
     * queue below must be released without that wait. */
    ring__seterr(comm, RING_ERR_ABORTED, "communicator aborted by ring_comm_abort");
    ring__comm_fail(comm, RING_ERR_ABORTED, "communicator aborted by ring_comm_abort");
    pthread_mutex_lock(&comm->mu);
    while (comm->qhead) {
        struct ring_request *r = comm->qhead;
        comm->qhead = r->qnext;
        r->result = RING_ERR_ABORTED;
        atomic_store(&r->done, 1);
    }
    comm->qtail = NULL;
    pthread_cond_broadcast(&comm->cv_done);
    pthread_mutex_unlock(&comm->mu);
    /* A program aborts and exits at its first error: on rank 0 that error may be one the
     * watcher is still telling the ranks about, and they would see rank 0 die instead. */
    if (comm->rank == 0) ring__watch_relay_wait(comm);
    atomic_fetch_sub_explicit(&comm->aborting, 1, memory_order_release); /* comm may be freed from here */
    return RING_OK;
}

ring_result_t ring_comm_destroy(ring_comm_t *comm)
{
    if (!comm) return RING_OK;
    /* A forked process's copy: its sockets were closed at the fork, and its threads, locks and
     * memory are the parent's state frozen mid-flight; leave them alone. */
    if (ring__comm_inherited(comm)) return RING_OK;
    if (!live_remove(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_destroy: not a live communicator (destroyed twice?)");
    pthread_mutex_lock(&comm->mu);
    comm->shutdown = 1;
    pthread_cond_broadcast(&comm->cv_work);
    pthread_mutex_unlock(&comm->mu);
    if (comm->thread_started) pthread_join(comm->thread, NULL);
    /* A blocking call still running inline in another thread, or waiting in the queue for its
     * turn, or a ring_wait in another thread, would be a caller bug; wait for it rather than
     * free memory under it. */
    pthread_mutex_lock(&comm->mu);
    while (comm->busy || comm->waiters) pthread_cond_wait(&comm->cv_done, &comm->mu);
    pthread_mutex_unlock(&comm->mu);
    /* An abort from another thread (a watchdog) may still be telling the other ranks after the
     * call it woke returned; each send is bounded (200 ms), so is this. */
    while (atomic_load_explicit(&comm->aborting, memory_order_acquire)) ring__nap_ns(1000000);
    ring__watch_stop(comm);
#if RING_HAVE_CUDA
    /* A call whose GPU work timed out and has not finished since: the memory that work uses
     * is not freed, nor unmapped (src/cuda/coll.c gpu_timeout). */
    const int gpu_busy = ring__cuda_dead_busy(comm);
    ring__cuda_ipc_fini(comm, gpu_busy); /* before the network: it waits for the receiver's last reads */
    ring__direct_fini(comm, gpu_busy);
#endif
    ring__sm_fini(comm);
    release_network(comm); /* drops the verbs registrations with their device */
#if RING_HAVE_CUDA
    ring__cuda_free_dead(comm); /* nothing can write into them any more */
    ring__cuda_gdr_fini(comm, gpu_busy); /* its registrations went with the verbs context */
#endif
    while (comm->regs) {
        struct ring_reg *n = comm->regs->next;
        free(comm->regs);
        comm->regs = n;
    }
    while (comm->live) {
        struct ring_request *n = comm->live->live_next;
        free(comm->live);
        comm->live = n;
    }
    ring__topo_free_mem(comm->scratch, comm->scratch_bytes);
    free(comm->engine_mem);
    free(comm->plan);
    if (comm->wake_fd >= 0) close(comm->wake_fd);
    pthread_cond_destroy(&comm->cv_work);
    pthread_cond_destroy(&comm->cv_done);
    pthread_mutex_destroy(&comm->mu);
    pthread_mutex_destroy(&comm->err_mu);
    pthread_mutex_destroy(&comm->star_mu);
    free(comm);
    return RING_OK;
}

ring_result_t ring_comm_register(ring_comm_t *comm, void *buf, size_t bytes, ring_reg_t **handle)
{
    ring_result_t rc = RING_OK;
    struct ring_reg *r = NULL;
    if (!comm || !handle) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_register: comm or handle is NULL");
    *handle = NULL;
    if (!ring__comm_live(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_register: %s", ring__not_live_text(comm));
    if (!buf || !bytes) return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_comm_register: NULL buffer or 0 bytes");
    if (!(r = calloc(1, sizeof *r))) return ring__seterr(comm, RING_ERR_NOMEM, "ring_comm_register: out of memory");
#if RING_HAVE_RDMA
    if (comm->rdma_ctx) rc = ring__rdma_transport.reg_mem(comm->rdma_ctx, buf, bytes, &r->mh);
#endif
    if (rc != RING_OK) {
        free(r);
        return rc;
    }
    pthread_mutex_lock(&comm->mu);
    r->next = comm->regs;
    comm->regs = r;
    pthread_mutex_unlock(&comm->mu);
    *handle = r;
    return RING_OK;
}

ring_result_t ring_comm_deregister(ring_comm_t *comm, ring_reg_t *handle)
{
    if (!comm || !handle) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_deregister: comm or handle is NULL");
    if (!ring__comm_live(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_deregister: %s", ring__not_live_text(comm));
    pthread_mutex_lock(&comm->mu);
    struct ring_reg **pp = &comm->regs;
    while (*pp && *pp != handle) pp = &(*pp)->next;
    int found = *pp != NULL;
    if (found) *pp = handle->next;
    pthread_mutex_unlock(&comm->mu);
    if (!found)
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "ring_comm_deregister: not a registration of this communicator (deregistered twice?)");
#if RING_HAVE_RDMA
    if (handle->mh) ring__rdma_transport.dereg_mem(comm->rdma_ctx, handle->mh);
#endif
    free(handle);
    return RING_OK;
}

int ring_comm_rank(const ring_comm_t *comm) { return comm && ring__comm_live(comm) ? comm->rank : -1; }
int ring_comm_nranks(const ring_comm_t *comm) { return comm && ring__comm_live(comm) ? comm->nranks : -1; }
