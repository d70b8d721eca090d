/*
 * Ring engine: drives one collective's two message streams (to the right, from the left).
 *
 * Per operation:
 *  0. Descriptor: each rank sends a 40-byte descriptor (sequence number, collective, count,
 *     dtype, op, root) to its right neighbour and checks the one from its left before it
 *     posts any data receive, so a mismatched call fails with both sides named instead of
 *     corrupting memory.
 *  1. Loop until every message is done:
 *     - post receives in stream order while fewer than `depth` are outstanding (and a
 *       scratch slot is free when the algorithm wants one, and the guarding send finished);
 *     - post sends in stream order while fewer than `depth` are outstanding and the receive
 *       each one depends on has been processed;
 *     - let the transport move bytes on both connections;
 *     - retire completed sends and receives in order; a completed receive is reduced or
 *       copied at once (recv_done), which frees its slot or hands it to the send forwarding it;
 *     - when nothing moved, sleep in poll() on the sockets and the abort eventfd.
 *  Scratch is `depth` slots of RING_CHUNK_BYTES per communicator, reused by every call.
 *  A call fails with RING_ERR_TIMEOUT after RING_TIMEOUT_MS without any progress, naming the
 *  peer it was waiting for; with RING_ERR_ABORTED within one poll wake-up of ring_comm_abort.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "log.h"
#include "p2p.h"
#include "reduce.h"
#include "wire.h"
#include "topo.h"
#include "transport.h"
#include "watch.h"

#define DESC_LEN RING__DESC_LEN
#define DESC_MAGIC 0x5247504fu /* "RGOP"; a change of the descriptor changes BS_VERSION (bootstrap.c) */

/* Fields that do not apply to a collective are zeroed so that they never cause a mismatch. */
void ring__desc_build(unsigned char *b, const ring__opdesc_t *op, int algo)
{
    int red = op->coll == RING__COLL_ALLREDUCE || op->coll == RING__COLL_REDUCE_SCATTER;
    ring__put32(b, DESC_MAGIC);
    ring__put32(b + 4, (uint32_t)op->coll);
    ring__put64(b + 8, op->seq);
    ring__put64(b + 16, op->coll == RING__COLL_BARRIER ? 0 : op->count);
    ring__put32(b + 24, op->coll == RING__COLL_BARRIER ? 0 : (uint32_t)op->dtype);
    ring__put32(b + 28, red ? (uint32_t)op->op : 0);
    ring__put32(b + 32, op->coll == RING__COLL_BROADCAST ? (uint32_t)op->root : 0);
    ring__put32(b + 36, (uint32_t)algo); /* last: ring__desc_check masks its hint bits */
}

static void desc_str(const unsigned char *b, char *out, size_t len)
{
    ring__coll_t c = (ring__coll_t)ring__get32(b + 4);
    unsigned long long seq = (unsigned long long)ring__desc_seq(b), count = (unsigned long long)ring__get64(b + 16);
    const char *dt = ring__dtype_name((ring_dtype_t)ring__get32(b + 24));
    uint32_t algo = ring__get32(b + 36);
    size_t n;
    switch (c) {
    case RING__COLL_ALLREDUCE:
    case RING__COLL_REDUCE_SCATTER:
        snprintf(out, len, "#%llu %s(count=%llu, %s, %s)", seq, ring__coll_name(c), count, dt,
                 ring__op_name((ring_op_t)ring__get32(b + 28)));
        break;
    case RING__COLL_ALLGATHER:
        snprintf(out, len, "#%llu %s(count=%llu, %s)", seq, ring__coll_name(c), count, dt);
        break;
    case RING__COLL_BROADCAST:
        snprintf(out, len, "#%llu %s(count=%llu, %s, root=%d)", seq, ring__coll_name(c), count, dt, (int)ring__get32(b + 32));
        break;
    default:
        snprintf(out, len, "#%llu %s", seq, ring__coll_name(c));
        break;
    }
    n = strlen(out);
    const char *ipc = algo & RING__ALGO_CUDA_IPC ? ", device buffers with RING_CUDA_IPC=1" : "";
    algo &= ~(uint32_t)(RING__ALGO_CUDA_IPC | RING__DESC_HINTS);
    if (n < len)
        snprintf(out + n, len - n, " [%s%s]",
                 algo == RING__ALGO_RD     ? "recursive doubling"
                 : algo == RING__ALGO_TREE ? "binomial tree"
                 : algo == RING__ALGO_RH   ? "recursive halving"
                                           : "ring", ipc);
}

uint64_t ring__desc_seq(const unsigned char *desc) { return ring__get64(desc + 8); }

uint32_t ring__desc_hints(const unsigned char *desc)
{
    return ring__get32(desc + DESC_LEN - 4) & RING__DESC_HINTS;
}

/* Hints (in the last word, the algorithm) say how a rank moves its bytes, which its
 * neighbours need not share. */
static int desc_same(const unsigned char *a, const unsigned char *b)
{
    return !memcmp(a, b, DESC_LEN - 4) &&
           !((ring__get32(a + DESC_LEN - 4) ^ ring__get32(b + DESC_LEN - 4)) & ~(uint32_t)RING__DESC_HINTS);
}

int ring__desc_conflict(const unsigned char *a, int ra, const unsigned char *b, int rb, char *out, size_t len)
{
    if (desc_same(a, b)) return 0;
    char sa[160], sb[160];
    desc_str(a, sa, sizeof sa);
    desc_str(b, sb, sizeof sb);
    snprintf(out, len, "collective mismatch: rank %d called %s but rank %d called %s (both reported the call stuck to rank 0)",
             ra, sa, rb, sb);
    return 1;
}

/* Which field of a descriptor no rank builds (ring__desc_build), or NULL: such a descriptor is
 * garbage, not another call. */
static const char *desc_bad_field(const unsigned char *b, int nranks)
{
    const uint32_t coll = ring__get32(b + 4), dtype = ring__get32(b + 24), op = ring__get32(b + 28);
    const uint32_t root = ring__get32(b + 32), algo = ring__get32(b + 36) & ~(uint32_t)RING__DESC_HINTS;
    const int red = coll == RING__COLL_ALLREDUCE || coll == RING__COLL_REDUCE_SCATTER;
    if (coll < RING__COLL_ALLREDUCE || coll > RING__COLL_BARRIER) return "collective";
    if (coll == RING__COLL_BARRIER ? ring__get64(b + 16) != 0 : ring__get64(b + 16) > (uint64_t)PTRDIFF_MAX) return "count";
    if (coll == RING__COLL_BARRIER ? dtype != 0 : dtype >= RING_DTYPE_COUNT) return "dtype";
    if (red ? op >= RING_OP_COUNT : op != 0) return "op";
    if (coll == RING__COLL_BROADCAST ? root >= (uint32_t)nranks : root != 0) return "root";
    const uint32_t a = algo & ~(uint32_t)RING__ALGO_CUDA_IPC;
    if (a < RING__ALGO_RING || a > RING__ALGO_RH || (algo != a && a != RING__ALGO_RING)) return "algorithm";
    return NULL;
}

ring_result_t ring__desc_check(ring_comm_t *comm, const unsigned char *mine, const unsigned char *theirs,
                               const char *relation, const char *who)
{
    if (ring__get32(theirs) != DESC_MAGIC)
        return ring__seterr(comm, RING_ERR_PROTOCOL, "garbage from %s where a collective descriptor was expected", who);
    if (desc_same(mine, theirs)) return RING_OK;
    /* A corrupted descriptor printed like this rank's own call: "called #4 barrier but ...
     * called #4 barrier", as a mismatch. */
    const char *bad = desc_bad_field(theirs, comm->nranks);
    if (bad)
        return ring__seterr(comm, RING_ERR_PROTOCOL,
                            "garbage from %s: a collective descriptor that no rank builds (its %s field)", who, bad);
    /* Every field a valid descriptor carries is printed, so two that differ read differently. */
    char a[160], b[160];
    desc_str(mine, a, sizeof a);
    desc_str(theirs, b, sizeof b);
    return ring__seterr(comm, RING_ERR_MISMATCH,
                        "collective mismatch: this rank (%d) called %s but its %s %s called %s", comm->rank, a,
                        relation, who, b);
}

void ring__sched_init(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op, int nseg, int balanced,
                      int nsteps, int single_lane)
{
    s->comm = comm;
    s->op = op;
    s->esize = ring_dtype_size(op->dtype);
    size_t e = comm->params.chunk_bytes / s->esize;
    /* One lane fewer than slots: see partition.h for why this keeps forwarding deadlock-free. */
    int lanes = single_lane || comm->params.pipeline_depth < 2 ? 1 : comm->params.pipeline_depth - 1;
    /* Every rank must cut the same way, so the choice rests on all_shm, which all ranks share. */
    ring__layout_init(&s->layout, op->count, nseg, balanced, e ? e : 1, lanes, !comm->all_shm);
    s->nsteps = nsteps;
    s->nsend = s->nrecv = ring__layout_nmsgs(&s->layout, nsteps);
    s->send_msg = NULL;
    s->recv_msg = NULL;
    s->recv_done = NULL;
    s->reduce = NULL;
    s->dev = NULL;
}

void ring__sched_reduce(ring__sched_t *s, void *dst, const void *slot, const void *own, size_t n, int final)
{
    if (s->reduce) s->reduce(s, dst, slot, own, n, final);
    else if (final) ring__reduce_final(dst, slot, own, n, s->op->dtype, s->op->op, s->comm->nranks);
    else ring__reduce(dst, slot, own, n, s->op->dtype, s->op->op);
}

#define SLOT_ZC (-2) /* received in place, in the transport's memory (zero-copy) */

typedef struct ent {
    void *req;
    int slot; /* scratch slot, -1: none, SLOT_ZC */
    int keep;
    int fwd_slot; /* sends: slot to free when done, -1: none */
} ent;

typedef struct held {
    size_t recv_idx;
    int slot;
} held;

/* Windows and slot lists: four arrays of `depth` entries in one block, made once per comm. */
static ring_result_t ensure_state(ring_comm_t *comm, int depth)
{
    if (comm->engine_mem) return RING_OK;
    size_t d = (size_t)depth;
    comm->engine_mem = calloc(1, 2 * d * sizeof(ent) + d * sizeof(held) + d * sizeof(int));
    if (!comm->engine_mem) return ring__seterr(comm, RING_ERR_NOMEM, "engine: out of memory");
    return RING_OK;
}

ring_result_t ring__algo_failed(ring_comm_t *comm, ring_result_t rc, const ring__opdesc_t *op, const char *algo)
{
    if (rc == RING_OK || rc == RING_ERR_MISMATCH) return rc;
    char detail[RING__ERRMSG_MAX];
    ring__op_error(comm, detail, sizeof detail);
    return ring__seterr(comm, rc, "%s #%llu (%s): %s", ring__coll_name(op->coll), (unsigned long long)op->seq, algo, detail);
}

ring_result_t ring__scratch_ensure(ring_comm_t *comm, size_t bytes)
{
    if (comm->scratch_bytes >= bytes) return RING_OK;
    ring__topo_free_mem(comm->scratch, comm->scratch_bytes);
    comm->scratch = NULL;
    comm->scratch_bytes = 0;
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    char why[256];
    /* On the NUMA node of the device in use (the plan), before the first touch. */
    comm->scratch = ring__topo_alloc(comm->topo, comm->plan, rounded, why, sizeof why);
    if (!comm->scratch)
        return ring__seterr(comm, RING_ERR_NOMEM, "cannot allocate %zu bytes of scratch for the ring pipeline: %s", rounded, why);
    comm->scratch_bytes = rounded;
    RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank, "scratch: %zu bytes, %s", rounded, why);
    return RING_OK;
}

static ring_result_t waiting_error(const ring__sched_t *s, ring_result_t code, const char *what, size_t ns,
                                   size_t ns_posted, size_t nr, int got_desc)
{
    ring_comm_t *comm = s->comm;
    const char *name = ring__coll_name(s->op->coll);
    unsigned long long seq = (unsigned long long)s->op->seq;
    /* On a timeout, what the transports see of both connections: a neighbour that does not
     * read, a path that drops everything and one that crawls look alike from here otherwise. */
    char st[600] = "";
    void *conns[2] = {comm->send_right, comm->recv_left};
    if (code == RING_ERR_TIMEOUT) ring__conns_diag(conns, 2, st, sizeof st);
    /* A send the right neighbour has not taken is named too: a right neighbour that stopped
     * receiving stalls this rank's receives as well (their slots wait on the sends), and
     * naming only the left one would point at the wrong rank. That holds before the left
     * neighbour's descriptor, too: this rank's own segments go out before it, and a rank one
     * call ahead of its left neighbour (which waits on the stopped rank through the ring) saw
     * only its left neighbour named (cuda-coll-emulated-stalled-receiver, once). */
    const int right_owes = ns_posted > ns && comm->right != comm->left;
    if (!got_desc && right_owes)
        return ring__seterr(comm, code, "%s #%llu %s while waiting for %s to enter the collective and for %s to take message %zu of %zu%s",
                            name, seq, what, comm->peer_desc[0], comm->peer_desc[1], ns + 1, s->nsend, st);
    if (!got_desc)
        return ring__seterr(comm, code, "%s #%llu %s while waiting for %s to enter the collective%s", name, seq, what,
                            comm->peer_desc[0], st);
    if (nr < s->nrecv && ns_posted > ns)
        return ring__seterr(comm, code,
                            "%s #%llu %s while waiting for message %zu of %zu from %s and for %s to take message %zu of %zu%s",
                            name, seq, what, nr + 1, s->nrecv, comm->peer_desc[0], comm->peer_desc[1], ns + 1, s->nsend, st);
    if (nr < s->nrecv)
        return ring__seterr(comm, code, "%s #%llu %s while waiting for message %zu of %zu from %s%s", name, seq, what,
                            nr + 1, s->nrecv, comm->peer_desc[0], st);
    return ring__seterr(comm, code, "%s #%llu %s while sending message %zu of %zu to %s%s", name, seq, what, ns + 1,
                        s->nsend, comm->peer_desc[1], st);
}

ring_result_t ring__engine_idle(const ring__sched_t *s, int64_t idle_ns, size_t ns_done, size_t ns_posted, size_t nr_done,
                                int got_desc)
{
    ring_comm_t *comm = s->comm;
    void *conns[2] = {comm->send_right, comm->recv_left};
    int stop;
    ring_result_t rc = ring__wait_idle(comm, conns, 2, idle_ns, &stop);
    if (rc != RING_OK) return rc;
    if (stop == RING__WAIT_ABORTED)
        return waiting_error(s, RING_ERR_ABORTED, "aborted by ring_comm_abort", ns_done, ns_posted, nr_done, got_desc);
    if (stop == RING__WAIT_REMOTE) return ring__remote_result(comm, ring__coll_name(s->op->coll));
    if (stop == RING__WAIT_TIMEOUT) {
        char what[96];
        snprintf(what, sizeof what, "timed out: no progress for %d ms (RING_TIMEOUT_MS)", comm->params.timeout_ms);
        return waiting_error(s, RING_ERR_TIMEOUT, what, ns_done, ns_posted, nr_done, got_desc);
    }
    return RING_OK;
}

/* A receive that failed on its length keeps, over shared memory, the first 40 bytes of what
 * came: the peer's descriptor when the first messages differ in length (rd.c packs small data
 * with its descriptor). If that descriptor differs from this rank's, it says more than two
 * lengths do. theirs must start zeroed. */
int ring__desc_salvage(ring_comm_t *comm, ring_result_t *rc, const unsigned char *mine, const unsigned char *theirs,
                       const char *relation, const char *who)
{
    if (*rc != RING_ERR_MISMATCH || ring__get32(theirs) != DESC_MAGIC) return 0;
    return ring__desc_check(comm, mine, theirs, relation, who) == RING_ERR_MISMATCH;
}

ring_result_t ring__desc_step(ring_comm_t *comm, const ring__transport_t *stp, const ring__transport_t *rtp,
                              void **dsend, void **drecv, int *sent, int *got, const unsigned char *mine,
                              const unsigned char *theirs, int *busy)
{
    ring_result_t rc = RING_OK;
    int done = 0;
    if (!*sent && *dsend) {
        RING_CHECK(stp->test(*dsend, &done));
        if (done) {
            *sent = 1;
            *dsend = NULL;
        }
    }
    if (!*got) {
        done = 0;
        RING_CHECK(rtp->test(*drecv, &done));
        if (done) {
            *drecv = NULL;
            RING_CHECK(ring__desc_check(comm, mine, theirs, "left neighbour", comm->peer_desc[0]));
            *got = 1;
            *busy = 1;
        }
    }
fail:
    return rc;
}

ring_result_t ring__ring_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op)
{
    switch (op->coll) {
    case RING__COLL_ALLREDUCE: ring__allreduce_sched(s, comm, op); return RING_OK;
    case RING__COLL_REDUCE_SCATTER: ring__reduce_scatter_sched(s, comm, op); return RING_OK;
    case RING__COLL_ALLGATHER: ring__allgather_sched(s, comm, op); return RING_OK;
    case RING__COLL_BROADCAST: ring__broadcast_sched(s, comm, op); return RING_OK;
    default: return ring__seterr(comm, RING_ERR_INTERNAL, "%s has no ring schedule", ring__coll_name(op->coll));
    }
}

ring_result_t ring__ring_run(ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring__sched_t s;
    ring_result_t rc = ring__ring_sched(&s, comm, op);
    if (rc != RING_OK) return rc;
    if (op->coll == RING__COLL_ALLGATHER) {
        char *own = (char *)op->recvbuf + (size_t)comm->rank * op->count * s.esize;
        if (own != (const char *)op->sendbuf && op->count) memmove(own, op->sendbuf, op->count * s.esize);
    }
    return ring__engine_run(&s);
}

ring_result_t ring__engine_run(ring__sched_t *s)
{
    ring_comm_t *comm = s->comm;
    void *sc = comm->send_right, *rc_ = comm->recv_left;
    const ring__transport_t *stp = ring__tp_of(sc), *rtp = ring__tp_of(rc_);
    /* Receives that would land in scratch to be reduced are taken in place instead where the
     * transport can (shared memory): the reduction reads the segment, one copy less. */
    const size_t zc_max = rtp->zc_max ? rtp->zc_max(rc_) : 0;
    ring_result_t rc = RING_OK;
    const int depth = comm->params.pipeline_depth;
    /* Slots start on cache lines: RING_CHUNK_BYTES need not be a multiple of any element size. */
    const size_t slot_bytes = (comm->params.chunk_bytes + 63) & ~(size_t)63;
    ent *sent = NULL, *recvd = NULL;
    held *hold = NULL;
    int *freeslots = NULL;
    int nfree = 0, nheld = 0;
    unsigned char mydesc[DESC_LEN], theirdesc[DESC_LEN];
    void *dsend = NULL, *drecv = NULL;
    int got_desc = 0, sent_desc = 0;
    size_t ns_posted = 0, ns_done = 0, nr_posted = 0, nr_done = 0;
    ring__idle_t idle;
    ring__idle_start(&idle, (int64_t)comm->params.spin_us * 1000);
    memset(theirdesc, 0, sizeof theirdesc);

    RING_CHECK(ring__scratch_ensure(comm, (size_t)depth * slot_bytes));
    RING_CHECK(ensure_state(comm, depth));
    sent = comm->engine_mem;
    recvd = sent + depth;
    hold = (held *)(recvd + depth);
    freeslots = (int *)(hold + depth);
    for (int i = depth - 1; i >= 0; i--) freeslots[nfree++] = i;

    ring__desc_build(mydesc, s->op, RING__ALGO_RING);
    RING_CHECK(stp->isend(sc, mydesc, DESC_LEN, NULL, &dsend));
    RING_CHECK(rtp->irecv(rc_, theirdesc, DESC_LEN, NULL, &drecv));
    if (!dsend || !drecv) {
        rc = ring__seterr(comm, RING_ERR_INTERNAL, "engine: transport refused the descriptor message");
        goto fail;
    }
    RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank, "%s #%llu: count %zu, %zu sends, %zu receives",
             ring__coll_name(s->op->coll), (unsigned long long)s->op->seq, s->op->count, s->nsend, s->nrecv);

    for (;;) {
        int busy = 0;
        /* Post receives. */
        while (got_desc && nr_posted < s->nrecv && nr_posted - nr_done < (size_t)depth) {
            void *buf = NULL;
            size_t len = 0, guard = RING__NONE;
            int keep = 0;
            s->recv_msg(s, nr_posted, &buf, &len, &guard, &keep);
            if (guard != RING__NONE && guard >= ns_done) break;
            int slot = -1;
            if (!buf && !keep && zc_max && len <= zc_max) {
                slot = SLOT_ZC;
            } else if (!buf) {
                if (!nfree) break;
                slot = freeslots[nfree - 1];
                buf = (char *)comm->scratch + (size_t)slot * slot_bytes;
            }
            void *req = NULL;
            RING_CHECK(rtp->irecv(rc_, buf, len, NULL, &req));
            if (!req) break;
            if (slot >= 0) nfree--;
            recvd[nr_posted % (size_t)depth] = (ent){.req = req, .slot = slot, .keep = keep, .fwd_slot = -1};
            nr_posted++;
            busy = 1;
        }
        /* Post sends. */
        while (ns_posted < s->nsend && ns_posted - ns_done < (size_t)depth) {
            const void *buf = NULL;
            size_t len = 0, dep = RING__NONE, slot_of = RING__NONE;
            s->send_msg(s, ns_posted, &buf, &len, &dep, &slot_of);
            if (dep != RING__NONE && dep >= nr_done) break;
            int fwd = -1;
            if (slot_of != RING__NONE) {
                for (int h = 0; h < nheld; h++)
                    if (hold[h].recv_idx == slot_of) fwd = hold[h].slot;
                if (fwd < 0) {
                    rc = ring__seterr(comm, RING_ERR_INTERNAL, "engine: send %zu forwards slot of receive %zu, not held",
                                      ns_posted, slot_of);
                    goto fail;
                }
                buf = (char *)comm->scratch + (size_t)fwd * slot_bytes;
            }
            void *req = NULL;
            RING_CHECK(stp->isend(sc, buf, len, NULL, &req));
            if (!req) break;
            sent[ns_posted % (size_t)depth] = (ent){.req = req, .slot = -1, .fwd_slot = fwd};
            ns_posted++;
            busy = 1;
        }

        int moved = 0;
        RING_CHECK(stp->progress(sc, &moved));
        RING_CHECK(rtp->progress(rc_, &moved));

        RING_CHECK(ring__desc_step(comm, stp, rtp, &dsend, &drecv, &sent_desc, &got_desc, mydesc, theirdesc, &busy));
        while (ns_done < ns_posted) {
            ent *e = &sent[ns_done % (size_t)depth];
            int done = 0;
            RING_CHECK(stp->test(e->req, &done));
            if (!done) break;
            if (e->fwd_slot >= 0) {
                for (int h = 0; h < nheld; h++)
                    if (hold[h].slot == e->fwd_slot) {
                        hold[h] = hold[--nheld];
                        break;
                    }
                freeslots[nfree++] = e->fwd_slot;
            }
            ns_done++;
            busy = 1;
        }
        while (nr_done < nr_posted) {
            ent *e = &recvd[nr_done % (size_t)depth];
            int done = 0;
            RING_CHECK(rtp->test(e->req, &done));
            if (!done) break;
            if (e->slot == SLOT_ZC) {
                s->recv_done(s, nr_done, (void *)rtp->zc_data(e->req));
                rtp->zc_release(e->req);
                e->slot = -1;
                nr_done++;
                busy = 1;
                continue;
            }
            void *slot = e->slot >= 0 ? (char *)comm->scratch + (size_t)e->slot * slot_bytes : NULL;
            s->recv_done(s, nr_done, slot);
            if (e->slot >= 0) {
                if (e->keep) hold[nheld++] = (held){.recv_idx = nr_done, .slot = e->slot};
                else freeslots[nfree++] = e->slot;
            }
            nr_done++;
            busy = 1;
        }

        if (got_desc && sent_desc && ns_done == s->nsend && nr_done == s->nrecv) break;

        if ((busy || moved) && !ring__stop_pending(comm)) {
            ring__idle_progress(&idle);
            continue;
        }
        RING_CHECK(ring__engine_idle(s, ring__idle_ns(&idle), ns_done, ns_posted, nr_done, got_desc));
    }

fail:
    if (!got_desc) ring__desc_salvage(comm, &rc, mydesc, theirdesc, "left neighbour", comm->peer_desc[0]);
    if (rc != RING_OK) {
        char why[RING__ERRMSG_MAX];
        ring__op_error(comm, why, sizeof why);
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank, "%s #%llu failed: %s", ring__coll_name(s->op->coll),
                 (unsigned long long)s->op->seq, why);
    }
    return rc;
}
