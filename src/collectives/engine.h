/*
 * The ring engine: runs one collective as two ordered message streams, sends to the right
 * neighbour and receives from the left, through the transport table. Algorithms (one file
 * each) describe their messages with three callbacks; the engine owns windows, scratch slots,
 * dependencies, progress, timeouts and abort.
 */
#ifndef RING_ENGINE_H
#define RING_ENGINE_H

#include <stddef.h>

#include "internal.h"
#include "partition.h"
#include "transport.h"

#define RING__NONE ((size_t)-1)

typedef struct ring__sched ring__sched_t;

struct ring__sched {
    ring_comm_t *comm;
    const ring__opdesc_t *op;
    size_t esize;
    size_t nsend, nrecv; /* data messages to the right / from the left */
    ring__layout_t layout;
    int nsteps;

    /*
     * Send i: data at *buf (or, if *slot_of != RING__NONE, in the scratch slot that receive
     * *slot_of filled), *len bytes. *dep: receive that must be processed first, or RING__NONE.
     */
    void (*send_msg)(ring__sched_t *s, size_t i, const void **buf, size_t *len, size_t *dep, size_t *slot_of);
    /*
     * Receive i: into *buf, or into a scratch slot if *buf is NULL (then *keep says a later
     * send forwards the slot). *guard: send that must have completed before *buf may be
     * written (it reads the same bytes), or RING__NONE.
     */
    void (*recv_msg)(ring__sched_t *s, size_t i, void **buf, size_t *len, size_t *guard, int *keep);
    /* Receive i landed (slot is its scratch slot or NULL): reduce or copy it. In order. Its
     * reductions go through ring__sched_reduce. */
    void (*recv_done)(ring__sched_t *s, size_t i, void *slot);

    /*
     * Where recv_done's reductions run: NULL (ring__sched_init) is the host loops, in place.
     * The device engine (src/cuda/coll.c) drives the same schedules over device buffers; its
     * hook queues the copy of the slot to the GPU and a kernel instead. dev is its state.
     */
    void (*reduce)(ring__sched_t *s, void *dst, const void *slot, const void *own, size_t n, int final);
    void *dev;
};

/* dst = slot op own, n elements of the op's dtype (final: the last combining step, where
 * RING_AVG divides by N): through s->reduce, or on the host. */
void ring__sched_reduce(ring__sched_t *s, void *dst, const void *slot, const void *own, size_t n, int final);

/* Run the schedule to completion. Exchanges and checks the collective descriptor with the
 * neighbours first. Returns with the comm's error message set on failure. */
ring_result_t ring__engine_run(ring__sched_t *s);

/*
 * Common set-up of a ring schedule: element size, chunk geometry (E = RING_CHUNK_BYTES / size
 * elements per chunk, L = depth - 1 chunks per step, or 1 if single_lane), the layout of
 * `nseg` segments (balanced over op->count, or op->count each) and nsend = nrecv = the number
 * of messages of `nsteps` steps per round. Callbacks are left to the algorithm.
 */
void ring__sched_init(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op, int nseg, int balanced,
                      int nsteps, int single_lane);

/*
 * The collective descriptor every algorithm exchanges before data: sequence number,
 * collective, count, dtype, op, root and algorithm (RING__ALGO_RING / RING__ALGO_RD), with
 * fields that do not apply zeroed. check() returns RING_ERR_MISMATCH with both sides spelled
 * out ("its <relation> <who> called ..."), RING_ERR_PROTOCOL for garbage. Its length,
 * RING__DESC_LEN, is in transport.h.
 */
/* Or-ed into a descriptor's algorithm: the ring call of a rank with RING_CUDA_IPC=1 and device
 * buffers, whose link messages (src/cuda/ipc.c) follow the descriptor. */
#define RING__ALGO_CUDA_IPC 0x100
/* A hint, not compared by check(): this rank sends the call's messages from registered device
 * memory by the read-in-place path (GPUDirect RDMA, src/cuda/gdr.c), so its right neighbour
 * may receive them straight into device memory. */
#define RING__DESC_GDR 0x200
#define RING__DESC_HINTS RING__DESC_GDR
/* The hint bits of a descriptor. */
uint32_t ring__desc_hints(const unsigned char *desc);
/* The call's sequence number in a descriptor. */
uint64_t ring__desc_seq(const unsigned char *desc);
void ring__desc_build(unsigned char *b, const ring__opdesc_t *op, int algo);
ring_result_t ring__desc_check(ring_comm_t *comm, const unsigned char *mine, const unsigned char *theirs,
                               const char *relation, const char *who);
/* Two ranks' descriptors of the same call, compared as check() does: 0 if they agree, else 1
 * with out = "collective mismatch: rank ra called <a> but rank rb called <b> ..." (the root's
 * stuck reports, watch.c). */
int ring__desc_conflict(const unsigned char *a, int ra, const unsigned char *b, int rb, char *out, size_t len);
/* After a receive failed with *rc = RING_ERR_MISMATCH: 1 if theirs (zeroed before the receive)
 * holds a descriptor that differs from mine, which then is the error set on comm (*rc stays
 * RING_ERR_MISMATCH); else 0 and nothing changes. */
int ring__desc_salvage(ring_comm_t *comm, ring_result_t *rc, const unsigned char *mine, const unsigned char *theirs,
                       const char *relation, const char *who);
/*
 * One step of the descriptor exchange of a ring pass (mine to the right on sconn, theirs from
 * the left on rconn, both posted): test the two requests, clear them when done, check theirs
 * against mine once it arrived (*got = 1, *busy = 1). The ring engines call it every turn.
 */
struct ring__transport;
ring_result_t ring__desc_step(ring_comm_t *comm, const struct ring__transport *stp, const struct ring__transport *rtp,
                              void **dsend, void **drecv, int *sent, int *got, const unsigned char *mine,
                              const unsigned char *theirs, int *busy);

/* The point-to-point algorithms' failure tail: prefix the detail (which names the peer) with
 * the operation and the algorithm, as the ring engine does; a mismatch message already names
 * both calls and is left alone. Returns rc. */
ring_result_t ring__algo_failed(ring_comm_t *comm, ring_result_t rc, const ring__opdesc_t *op, const char *algo);

/* comm->scratch of at least `bytes` (page-aligned, kept and reused). */
ring_result_t ring__scratch_ensure(ring_comm_t *comm, size_t bytes);

/* Algorithms (one file each). The _sched functions fill in a ring schedule without running
 * it: the host runs it with ring__engine_run, the device engine (src/cuda/coll.c) with its
 * own staging, so both send the same messages in the same order. */
void ring__allreduce_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op);
void ring__reduce_scatter_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op);
/* The all-gather's schedule leaves the own segment to the caller (sendbuf -> recvbuf). */
void ring__allgather_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op);
void ring__broadcast_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op);
/* The ring schedule of op->coll (all-reduce, reduce-scatter, all-gather, broadcast). */
ring_result_t ring__ring_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op);
/* op->coll by its ring on host buffers (all-gather: the own segment copied first). */
ring_result_t ring__ring_run(ring_comm_t *comm, const ring__opdesc_t *op);
/* A ring engine with nothing to do: wait on both neighbours' connections (ring__wait_idle;
 * idle_ns = time since the last progress, 0 to only yield). RING_OK to go on; otherwise the
 * abort, peer failure or timeout, named by what the engine waited for: the left neighbour's
 * descriptor, receive nr_done + 1 (and send ns_done + 1 when it was posted, ns_posted >
 * ns_done) or send ns_done + 1. */
ring_result_t ring__engine_idle(const ring__sched_t *s, int64_t idle_ns, size_t ns_done, size_t ns_posted, size_t nr_done,
                                int got_desc);
ring_result_t ring__barrier_ring(ring_comm_t *comm, const ring__opdesc_t *op);
/* Recursive doubling (rd.c): allreduce of small buffers, and barrier (count 0). */
ring_result_t ring__allreduce_rd(ring_comm_t *comm, const ring__opdesc_t *op);
/* Recursive halving and doubling (Rabenseifner, rd.c): allreduce of medium buffers. */
ring_result_t ring__allreduce_rh(ring_comm_t *comm, const ring__opdesc_t *op);
ring_result_t ring__barrier_rd(ring_comm_t *comm, const ring__opdesc_t *op);
/* The shared-memory all-reduce (sm.c), for communicators whose ranks are all on one host:
 * setup at init (a no-op elsewhere, or with RING_SM_MAX_BYTES=0), fini at destroy, a record
 * of every call on every rank (note, before it runs; it waits while a rank is HIST calls
 * behind), and the all-reduce itself (*ran = 0:
 * some rank has device buffers, run the ring instead). */
ring_result_t ring__sm_setup(ring_comm_t *comm);
void ring__sm_fini(ring_comm_t *comm);
int ring__sm_available(const ring_comm_t *comm);
ring_result_t ring__sm_note(ring_comm_t *comm, const ring__opdesc_t *op, int algo);
/* After every call, whatever its result: this rank will not read the records of op->seq any
 * more (the writers' room check, ring__callrec_room). */
void ring__sm_done(ring_comm_t *comm, const ring__opdesc_t *op);
ring_result_t ring__allreduce_sm(ring_comm_t *comm, const ring__opdesc_t *op, int *ran);
/* How many calls ran by it on this communicator (tests, perf tools). */
uint64_t ring__sm_count(const ring_comm_t *comm);
/* Tests only: fn runs in every idle try of the all-reduce's waits, between the look at the
 * other ranks and the checks that end a wait (NULL: none), so a test can hold a rank there. */
void ring__sm_set_wait_hook_for_tests(void (*fn)(const ring_comm_t *comm, uint64_t seq));
/* Binomial tree (tree.c) on recursive doubling's connections: broadcast of small buffers. */
ring_result_t ring__broadcast_tree(ring_comm_t *comm, const ring__opdesc_t *op);
/* Recursive doubling's fold (rd.c), shared with the tree: the largest power of two <= n, and
 * the rank that stands for virtual rank v when rem = n - p ranks are folded out. */
int ring__pow2_floor(int n);
int ring__rd_real_rank(int v, int rem);
/* The peers recursive doubling exchanges with (fold partner and hypercube partners);
 * returns how many were written to out (at most 2 + log2(nranks)). */
int ring__rd_partners(int rank, int nranks, int *out);

/* The algorithm (RING__ALGO_RING, _RD or _TREE) a collective of `bytes` per rank runs with
 * (RING_ALGO, RING_RD_MAX_BYTES, RING_TREE_MAX_BYTES); perf tools label their rows with it. */
int ring__algo_for(const ring_comm_t *comm, ring__coll_t coll, size_t bytes);
/* The all-reduce threshold in effect: RING_RD_MAX_BYTES, else the default of the transport
 * every ring edge uses (the same on every rank). */
size_t ring__rd_max_bytes(const ring_comm_t *comm);
size_t ring__rh_max_bytes(const ring_comm_t *comm);
/* The largest all-reduce auto gives the shared-memory all-reduce: RING_SM_MAX_BYTES, else
 * SIZE_MAX (every size) where rank 0's host has one NUMA node, 1 MiB where it has several.
 * *why (if why is not NULL) names the default that applies, or is "" when the setting does. */
size_t ring__sm_max_bytes(const ring_comm_t *comm, const char **why);

/* Run one validated operation (dispatch by collective; handles nranks == 1). */
ring_result_t ring__run_op(ring_comm_t *comm, const ring__opdesc_t *op);

#endif
