/*
 * Point-to-point messages between any two ranks, below the collectives. Used by the latency
 * algorithms (recursive doubling, binomial trees) and by perf tools (link probes, the
 * parameter-server baseline). Internal: not exported from the shared library; programs that
 * need it link the static internal library.
 *
 * Every rank keeps its data listener open for the communicator's lifetime, so connections to
 * peers other than the ring neighbours can be added after init without another address
 * exchange. Connections are one-way and shared with the ring: the ring's send connection to
 * rank+1 is the same object as the point-to-point send connection to rank+1.
 */
#ifndef RING_P2P_H
#define RING_P2P_H

#include <stddef.h>

#include "internal.h"

typedef struct ring__p2p_op {
    int peer;    /* rank, != own rank */
    int is_send; /* 1: send buf to peer, 0: receive from peer into buf */
    void *buf;   /* not written for sends */
    size_t len;  /* bytes; must equal the length of the matching op on the peer (0 is allowed) */
    /* Optional: called as soon as this op completes, before the others have; an error ends
     * the run. Lets a check on a descriptor fail a run that would otherwise wait forever. */
    ring_result_t (*on_done)(ring_comm_t *comm, void *arg);
    void *arg;
} ring__p2p_op_t;

/*
 * Collective over every rank of comm: open a send and a receive connection with each of
 * peers[0..npeers) that does not have them yet. The relation must be symmetric (if rank a lists
 * b, rank b lists a); duplicates and the own rank are ignored. Bounded by RING_TIMEOUT_MS and
 * ring_comm_abort. Must not run while a collective is in flight on comm.
 */
ring_result_t ring__p2p_connect(ring_comm_t *comm, const int *peers, int npeers);

/*
 * Post every op and drive them until all are complete. Ops to the same peer in the same
 * direction are matched, in order, with the peer's ops in the opposite direction (the n-th
 * send to p matches p's n-th receive from us), so both sides must list them in the same order.
 * Sends and receives progress concurrently: {send to p, recv from p} on both sides is a
 * deadlock-free exchange. Fails with RING_ERR_TIMEOUT after RING_TIMEOUT_MS without progress,
 * RING_ERR_ABORTED after ring_comm_abort, RING_ERR_INVALID_ARG for a peer without a connection
 * (call ring__p2p_connect first; the ring neighbours are always connected in the direction of
 * the ring). At most 64 ops per call.
 *
 * Callable from the thread that owns comm when no _async operation is outstanding (it takes
 * the communicator's engine like a blocking collective does); the library's own algorithms
 * use ring__p2p_run_locked, which assumes the engine is already held.
 */
ring_result_t ring__p2p_run(ring_comm_t *comm, ring__p2p_op_t *ops, int nops);
ring_result_t ring__p2p_run_locked(ring_comm_t *comm, ring__p2p_op_t *ops, int nops);

#define RING__P2P_MAX_OPS 64

/* Open send connections to to[0..nto) and accept receive connections from from[0..nfrom),
 * skipping those that exist; until deadline_ns. Used by init (the ring) and p2p_connect. */
ring_result_t ring__conn_establish(ring_comm_t *comm, const int *to, int nto, const int *from, int nfrom,
                                   int64_t deadline_ns);
/*
 * What a wait loop does when nothing moved for idle_ns: checks abort, a failure reported by
 * another rank (watch.c) and RING_TIMEOUT_MS, in that order, and reports the first that holds
 * in *stop (the caller writes the message, since only it knows what it waited for); otherwise
 * spins (RING_SPIN_US) or sleeps in poll() on the connections and the wake eventfd, and
 * returns an error if poll() says one of them is dead. Shared by the ring engine and p2p.
 */
enum { RING__WAIT_GO_ON, RING__WAIT_ABORTED, RING__WAIT_REMOTE, RING__WAIT_TIMEOUT, RING__WAIT_LEFT };
ring_result_t ring__wait_idle(ring_comm_t *comm, void *const *conns, int nconns, int64_t idle_ns, int *stop);
/* Those checks alone, for waits that have no connection to poll (waits on a shared page:
 * sm.c, src/cuda/direct.c), which also stop when a rank said goodbye (relooked non-NULL: a
 * rank that left by ring_comm_destroy, RING__WAIT_LEFT). The first goodbye seen only sets
 * *relooked and goes on, for one more look; the caller clears it whenever it sees progress. */
int ring__wait_stop(ring_comm_t *comm, int64_t idle_ns, int *relooked);
/* The error of such a stop: the remote failure as reported, else "<collective> #<seq> (<how>)
 * <aborted | timed out | failed> while waiting for <who> to <doing>". */
ring_result_t ring__wait_stop_error(ring_comm_t *comm, const ring__opdesc_t *op, int stop, const char *how,
                                    const char *who, const char *doing);

/*
 * How long a wait loop has gone without progress, for ring__wait_idle / ring__wait_stop. The
 * clock costs about as much as one look at every connection (30 ns on the 2-core VM), so
 * while the loop spins (idle < spin_ns) it is read on the first idle try after progress and
 * then on every 16th (a spin ends at most 15 tries late); past spin_ns, where the loop sleeps
 * between tries, on every try, so that timeouts are on time.
 */
typedef struct ring__idle {
    int64_t last, now, spin_ns;
    unsigned tries;
    int fresh;
} ring__idle_t;

static inline void ring__idle_start(ring__idle_t *k, int64_t spin_ns)
{
    *k = (ring__idle_t){.spin_ns = spin_ns, .fresh = 1};
}
static inline void ring__idle_progress(ring__idle_t *k) { k->fresh = 1; }
/* An abort or another rank's failure is pending: a loop that keeps moving data goes to its
 * idle wait anyway, which returns the error (it used to notice only once the data stopped,
 * up to the whole call later). Two relaxed loads per pass. */
static inline int ring__stop_pending(ring_comm_t *comm)
{
    return atomic_load_explicit(&comm->aborted, memory_order_relaxed) ||
           atomic_load_explicit(&comm->remote_failed, memory_order_relaxed);
}
static inline int64_t ring__idle_ns(ring__idle_t *k)
{
    if (k->fresh || k->now - k->last >= k->spin_ns || !(++k->tries & 15)) k->now = ring__now_ns();
    if (k->fresh) k->last = k->now, k->fresh = 0;
    return k->now - k->last;
}

/* "rank 3 (10.0.0.4:40123 on host)" from the bootstrap table. */
void ring__peer_desc(const ring_comm_t *comm, int rank, char *out, size_t len);

#endif
