/*
 * Bootstrap: rank 0 listens on the root address; every other rank connects, authenticates
 * with the job secret and publishes its transport address; rank 0 answers with the table of
 * all ranks. The star of connections stays open for the communicator's lifetime (later used
 * for error propagation and liveness).
 */
#ifndef RING_BOOTSTRAP_H
#define RING_BOOTSTRAP_H

#include <string.h>

#include "internal.h"
#include "net.h"
#include "transport.h"

typedef struct ring__peer_info {
    ring__tp_addr_t addr;
    char host[RING__HOST_MAX];
    char bootid[RING__BOOTID_MAX];
    uint32_t pid;
    uint32_t flags; /* RING__PEER_* */
    uint32_t layout; /* ring__layout_key(RING_CHUNK_BYTES, RING_PIPELINE_DEPTH): the same on every rank */
    /* The machine's kernel (a hash of the real boot id, kept under RING_HOST_ID; 0 unknown)
     * and the CPUs this rank may run on (first, count; count 0 unknown): who competes for
     * which CPUs, for the choice of how to wait (comm.c). */
    uint32_t kernel;
    uint16_t cpu_first, cpu_count;
    /* NUMA nodes of the rank's machine (0 unknown, at most 255): where rank 0's host has
     * several, the shared-memory all-reduce keeps to 1 MiB (ring__sm_max_bytes). On the wire
     * in the top byte of the flags word. */
    uint8_t numa_nodes;
    /* What makes two ranks of one host share memory in RING_SHM_DIR, hashed (comm.c's
     * shm_identity; never 0): they see one directory there (the same file system and inode),
     * run as one user (euid and user namespace) and can both write it. Host name and boot id
     * alone do not: a container's private /dev/shm, another user, a read-only mount or another
     * RING_SHM_DIR do not share, and such ranks waited out RING_TIMEOUT_MS for the
     * shared-memory all-reduce's page (each made or looked for it in its own view). Pairs whose
     * identities differ use TCP (ring__topo_shm_pair). 64 bits: with 8 (BS_VERSION 9) a pair
     * that does not share went unseen 1 time in 256, which for 8 ranks in 8 containers of one
     * host with their own /dev/shm is one job in 32 (8 ring edges) hanging at init. */
    uint64_t shm_id;
} ring__peer_info_t;

/* A fingerprint of the parameters that decide how ring collectives cut buffers into messages
 * (chunk size and chunks per round). Ranks that differ there would exchange messages of the
 * same lengths in a different order, which no length check catches. */
static inline uint32_t ring__layout_key(size_t chunk_bytes, int depth)
{
    uint64_t h = 1469598103934665603ull;
    h = (h ^ (uint64_t)chunk_bytes) * 1099511628211ull;
    h = (h ^ (uint64_t)(uint32_t)depth) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32)) | 1u; /* never 0 */
}

/* This rank takes shared memory from same-host peers (RING_TRANSPORT is not tcp). */
#define RING__PEER_SHM 1u
/* This rank has a verbs port and takes RDMA from peers on other hosts (or from all peers with
 * RING_TRANSPORT=rdma). */
#define RING__PEER_RDMA 2u
/* This rank takes part in direct collectives over CUDA IPC (src/cuda/direct.c): a CUDA build
 * with RING_CUDA_IPC=auto or 1. */
#define RING__PEER_CUDA_DIRECT 4u
/* Bits 8-13: this rank's TCP socket settings, which every rank must share: RING_NSOCKS (0 for
 * auto, or 1-16; 5 bits) and RING_TCP_DUPLEX. In the table, so that a rank that differs fails
 * init on every rank at once, naming the setting, instead of having its sockets dropped at a
 * peer's listener (RING_NSOCKS: the peer waited out its timeout). */
#define RING__PEER_NSOCKS_SHIFT 8
#define RING__PEER_NSOCKS_MASK (0x1fu << RING__PEER_NSOCKS_SHIFT)
#define RING__PEER_DUPLEX_SHIFT 13
#define RING__PEER_DUPLEX (1u << RING__PEER_DUPLEX_SHIFT)
/* Those bits for RING_NSOCKS (params.nsocks, 0 auto) and RING_TCP_DUPLEX. */
static inline uint32_t ring__peer_tcp_flags(int nsocks, int duplex)
{
    return ((uint32_t)nsocks << RING__PEER_NSOCKS_SHIFT & RING__PEER_NSOCKS_MASK) |
           (uint32_t)!!duplex << RING__PEER_DUPLEX_SHIFT;
}

/* Bit 14: RING_SM_MAX_BYTES is not 0 (the rank opens the shared-memory all-reduce's page when
 * every pair shares memory, shm_id above); ranks that share memory but differ in the bit fail
 * init on every rank, naming RING_SM_MAX_BYTES. */
#define RING__PEER_SM_PAGE (1u << 14)
/* Why two ranks of one host with different identities do not share memory (log and errors). */
#define RING__SHM_UNSHARED_WHY                                                                      \
    "another directory, a container's own /dev/shm, another user, or one of them cannot write it"

typedef struct ring__bootstrap {
    int root_fd;   /* non-root: connection to rank 0 */
    int *rank_fds; /* rank 0: connection to every rank (index 0 unused) */
    int nranks;
} ring__bootstrap_t;

/*
 * Join the job. `mine` is this rank's info; on success all[0..nranks-1] holds everyone's and
 * comm->job_nonce is set. Rank 0 listens on roots[0], and on the others of
 * roots[0..nroots-1] it can bind; the other ranks try them in turn. Fails with a message naming the root address, and (on the root) the ranks that never
 * arrived. Bounded by deadline_ns; comm->wake_fd aborts it.
 */
ring_result_t ring__bootstrap_init(ring_comm_t *comm, const ring__sockaddr_t *roots, int nroots,
                                   const ring__peer_info_t *mine, ring__peer_info_t *all,
                                   int64_t deadline_ns);
void ring__bootstrap_close(ring__bootstrap_t *bs);

/* Fill host name and boot id (same host = same name and boot id). */
void ring__host_identity(ring__peer_info_t *info);
/* ring__peer_info_t.kernel of a boot id: never 0. */
uint32_t ring__kernel_hash(const char *bootid);
/* FNV-1a of n bytes: for identities that are only compared, never trusted. */
uint32_t ring__fnv1a(const void *p, size_t n);
uint64_t ring__fnv1a64(const void *p, size_t n);

/* A rank's data address (its TCP transport address) as a socket address. */
static inline void ring__peer_sockaddr(const ring__peer_info_t *p, ring__sockaddr_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(&out->ss, p->addr.data, RING__MIN(p->addr.len, sizeof out->ss));
    out->len = (socklen_t)RING__MIN(p->addr.len, sizeof out->ss);
}

/*
 * RING_SPIN_YIELD=auto: may rank `me` wait without yielding its CPU? Yes when the ranks on its
 * machine (same kernel) are no more than its `online` CPUs and do not share CPUs: each bound to
 * one CPU of its own, or each free to run on at least as many CPUs as there are such ranks
 * (the kernel spreads them). Anything else (bound to shared CPUs, unknown) yields.
 */
int ring__spin_busy_pick(const ring__peer_info_t *peers, int n, int me, long online);

/*
 * A rank whose data address is a loopback one (RING_SOCKET_IFNAME selected only lo, or its
 * route to the root runs over lo) in a job that spans machines (another rank's kernel differs):
 * the other machine's ranks can never connect to it. Returns that rank and puts such a rank of
 * another machine in *far; -1 when there is none. Ranks of one kernel (one machine, its
 * containers and network namespaces) are never flagged: loopback may be all they need.
 */
int ring__loopback_far(const ring__peer_info_t *peers, int n, int *far);

/*
 * The CPU limit of this process's cgroup and its ancestors (a container's or a Kubernetes
 * pod's "cpus"), rounded up to whole CPUs; 0 when there is none or it cannot be read. v2:
 * cpu.max under root + the "0::" path; v1: cpu.cfs_quota_us / cpu.cfs_period_us under
 * root/cpu (or root/cpu,cpuacct) + the "cpu" controller's path. `proc_cgroup` is
 * /proc/self/cgroup and `root` /sys/fs/cgroup except in tests.
 */
long ring__cgroup_cpu_limit(const char *proc_cgroup, const char *root);

/* Wire sizes, exposed for tests. */
#define RING__HELLO_LEN 296
#define RING__TABLE_HDR_LEN 24
#define RING__TABLE_ENTRY_LEN 264
/* The HELLO's first 32 bytes (magic, version, secret, nranks, rank) have kept their places in
 * every version: the root settles a HELLO of another version from them (a rank of an older
 * build sends fewer bytes, and the root must not wait for the rest). */
#define RING__HELLO_HDR_LEN 32
/* 480: a root's own failure (tell_joined) goes out whole, errno text and hint included. */
#define RING__REJECT_MSG_LEN 480

/* Parse and validate a HELLO (used by the root and by tests). Returns a short reason for the
 * rejection (NULL if valid) and fills rank/nranks/info. */
const char *ring__hello_parse(const unsigned char *buf, const uint8_t secret[16], uint32_t *rank,
                              uint32_t *nranks, ring__peer_info_t *info, ring_result_t *code);
/* One rank-table entry of RING__TABLE_ENTRY_LEN bytes (also the address block of a HELLO): 0 if valid. */
int ring__peer_info_parse(const unsigned char *p, ring__peer_info_t *info);
void ring__hello_build(unsigned char *buf, const uint8_t secret[16], uint32_t rank,
                       uint32_t nranks, const ring__peer_info_t *info);

#endif
