/*
 * Recursive doubling: the latency-optimal all-reduce for small buffers, and the barrier.
 *
 * N ranks, p = the largest power of two <= N, rem = N - p.
 *  1. Fold: ranks r < 2·rem pair up, r even with r+1. The even rank sends its buffer to r+1
 *     and waits for the result; r+1 combines (the even rank's data as the first operand). The
 *     p ranks left take virtual ranks v = r/2 (odd r < 2·rem) or r - rem.
 *  2. log2(p) rounds: in round k, v swaps its whole current buffer with v ^ 2^k and both
 *     compute lower ⊕ higher (ordered by v), so partners hold identical bits after every
 *     round and all p ranks do after the last; AVG divides in the last round, once.
 *  3. Unfold: r+1 sends the result to the even rank r.
 * Every data message is preceded by the 40-byte collective descriptor (engine.h), checked by
 * the receiver before it accepts the data, so a mismatched call fails with both sides named.
 * Over shared memory, data of at most PACK_DATA bytes travels in the descriptor's message
 * instead. Where the first messages' lengths differ (another count, another algorithm), the
 * shared-memory transport still delivers the other side's first 40 bytes, its descriptor
 * (shm.c), so calls that differ are still told apart by their descriptors.
 * The barrier is the same exchange pattern with descriptors only.
 *
 * Bytes on the wire per rank for S bytes: S·log2(p) each way (plus S once each way on fold
 * pairs), in log2(p) (+2 on fold pairs) messages of 16 + S bytes and as many descriptors;
 * time ~ (log2(p) + 2·[rem > 0])·(α + S/B), against the ring's 2(N-1)·α + 2(N-1)/N·S/B: a win
 * while α dominates (small S), a loss for large S, hence RING_RD_MAX_BYTES. Packed over shared
 * memory: one message of 40 + S bytes each way per round.
 */
#include <string.h>

#include "engine.h"
#include "p2p.h"
#include "reduce.h"
#include "transport.h"

/* Data up to this size rides in the descriptor's message over shared memory. Per message the
 * engine posts, tests and retires a request and the transport publishes and reads a slot: with
 * 2 ranks that was about 0.15 us of a 0.6 us 8-byte all-reduce (a barrier, one message each
 * way, took 0.45). 40 + 64 bytes fill the two cache lines of a slot header, 40 + 8 its first
 * (shm.c). The message is exactly descriptor and data, not padded: where counts differ, so do
 * the lengths, and the transport still hands over the descriptor (mismatch_prefix). */
#define PACK_DATA 64
#define PACK_MAX (RING__DESC_LEN + PACK_DATA)

/* Only where a length mismatch still delivers the other side's descriptor (shared memory).
 * Both ends of a connection see the same transport, so both decide alike for one message. */
static int packs(void *conn, size_t bytes)
{
    return bytes && bytes <= PACK_DATA && ring__tp_of(conn)->mismatch_prefix >= RING__DESC_LEN;
}

int ring__pow2_floor(int n)
{
    int p = 1;
    while (p <= n / 2) p *= 2;
    return p;
}

int ring__rd_real_rank(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }

int ring__rd_partners(int rank, int nranks, int *out)
{
    int p = ring__pow2_floor(nranks), rem = nranks - p, k = 0;
    if (rank < 2 * rem) {
        out[k++] = rank ^ 1;
        if (rank % 2 == 0) return k;
    }
    int v = rank < 2 * rem ? rank / 2 : rank - rem;
    for (int mask = 1; mask < p; mask <<= 1) out[k++] = ring__rd_real_rank(v ^ mask, rem);
    return k;
}

/*
 * One exchange with peer: send (descriptor, then data unless empty) if do_send, receive
 * (descriptor, then data) if do_recv, all posted at once so that both messages travel in one
 * write and are read back to back. If the peer's call differs, the descriptor arrives first
 * (messages on a connection are in order), so a data length error from the transport is
 * reported as the mismatch it is; with equal lengths the data lands in rbuf, which is either
 * scratch or a result the caller gets an error for.
 */
static ring_result_t exchange(ring_comm_t *comm, const unsigned char *mydesc, int peer, int do_send, const void *sbuf,
                              size_t sbytes, int do_recv, void *rbuf, size_t rbytes, const char *relation)
{
    ring_result_t rc = RING_OK;
    unsigned char tdesc[RING__DESC_LEN], pout[PACK_MAX], pin[PACK_MAX];
    ring__p2p_op_t ops[4];
    int n = 0;
    char who[160];
    const int pack_send = do_send && packs(comm->conn_send[peer], sbytes);
    const int pack_recv = do_recv && packs(comm->conn_recv[peer], rbytes);
    if (pack_send) {
        memcpy(pout, mydesc, RING__DESC_LEN);
        memcpy(pout + RING__DESC_LEN, sbuf, sbytes);
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 1, .buf = pout, .len = RING__DESC_LEN + sbytes};
    } else if (do_send) {
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 1, .buf = (void *)mydesc, .len = RING__DESC_LEN};
        if (sbytes) ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 1, .buf = (void *)sbuf, .len = sbytes};
    }
    /* Zeroed: a failed receive may leave it as it was (ring__desc_salvage). */
    unsigned char *theirs = pack_recv ? pin : tdesc;
    memset(theirs, 0, RING__DESC_LEN);
    if (pack_recv) {
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 0, .buf = pin, .len = RING__DESC_LEN + rbytes};
    } else if (do_recv) {
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 0, .buf = tdesc, .len = RING__DESC_LEN};
        if (rbytes) ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 0, .buf = rbuf, .len = rbytes};
    }
    rc = ring__p2p_run_locked(comm, ops, n);
    if (do_recv && (rc == RING_OK || rc == RING_ERR_PROTOCOL) && memcmp(theirs, mydesc, RING__DESC_LEN) != 0) {
        ring__peer_desc(comm, peer, who, sizeof who);
        ring_result_t dc = ring__desc_check(comm, mydesc, theirs, relation, who);
        if (rc == RING_OK || dc == RING_ERR_MISMATCH) rc = dc;
    } else if (do_recv && rc == RING_ERR_MISMATCH) {
        /* A length that differs: the descriptor, if it came (or was salvaged), says more. */
        ring__peer_desc(comm, peer, who, sizeof who);
        ring__desc_salvage(comm, &rc, mydesc, theirs, relation, who);
    }
    if (rc == RING_OK && pack_recv) memcpy(rbuf, pin + RING__DESC_LEN, rbytes);
    return rc;
}

static ring_result_t xchg(ring_comm_t *comm, const unsigned char *mydesc, int peer, int do_send, const void *sbuf,
                          int do_recv, void *rbuf, size_t bytes)
{
    return exchange(comm, mydesc, peer, do_send, sbuf, bytes, do_recv, rbuf, bytes, "recursive-doubling partner");
}

static ring_result_t rd_run(ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring_result_t rc = RING_OK;
    const int n = comm->nranks, r = comm->rank;
    const int p = ring__pow2_floor(n), rem = n - p;
    const int reduce = op->coll == RING__COLL_ALLREDUCE;
    const size_t count = reduce ? op->count : 0;
    const size_t bytes = count * ring_dtype_size(op->dtype);
    unsigned char mydesc[RING__DESC_LEN];
    char *acc = reduce ? op->recvbuf : NULL;
    const char *cur = reduce ? op->sendbuf : NULL;
    char *tmp = NULL;

    ring__desc_build(mydesc, op, RING__ALGO_RD);
    if (bytes) {
        RING_CHECK(ring__scratch_ensure(comm, bytes));
        tmp = comm->scratch;
    }
    if (r < 2 * rem && r % 2 == 0) {
        RING_CHECK(xchg(comm, mydesc, r + 1, 1, cur, 0, NULL, bytes));
        RING_CHECK(xchg(comm, mydesc, r + 1, 0, NULL, 1, acc, bytes));
        goto fail;
    }
    int v = r - rem;
    if (r < 2 * rem) {
        RING_CHECK(xchg(comm, mydesc, r - 1, 0, NULL, 1, tmp, bytes));
        if (count) ring__reduce(acc, tmp, cur, count, op->dtype, op->op);
        cur = acc;
        v = r / 2;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int pv = v ^ mask;
        RING_CHECK(xchg(comm, mydesc, ring__rd_real_rank(pv, rem), 1, cur, 1, tmp, bytes));
        if (count) {
            const void *a = pv < v ? tmp : cur, *b = pv < v ? cur : tmp;
            if (mask * 2 == p) ring__reduce_final(acc, a, b, count, op->dtype, op->op, n);
            else ring__reduce(acc, a, b, count, op->dtype, op->op);
        }
        cur = acc;
    }
    if (r < 2 * rem) RING_CHECK(xchg(comm, mydesc, r - 1, 1, acc, 0, NULL, bytes));
fail:
    return ring__algo_failed(comm, rc, op, "recursive doubling");
}

ring_result_t ring__allreduce_rd(ring_comm_t *comm, const ring__opdesc_t *op) { return rd_run(comm, op); }

/*
 * Recursive halving and doubling (Rabenseifner): the all-reduce for medium buffers, on the same
 * connections and with the same fold as recursive doubling.
 *  1. Fold as above; the p remaining ranks work on recvbuf (sendbuf copied in first).
 *  2. Reduce-scatter by recursive halving, distance p/2 first: the range a rank is responsible
 *     for is halved every round, the lower virtual rank keeping the lower half. Partners swap
 *     the halves the other keeps and reduce lower ⊕ higher (by virtual rank) into their own;
 *     AVG divides in the last round. Each element is reduced by exactly one rank.
 *  3. All-gather by recursive doubling, distance 1 first: partners swap the ranges they own,
 *     which grow back to the whole buffer.
 *  4. Unfold as above.
 * Bytes per rank: 2·S·(p-1)/p each way (+S on fold pairs) in 2·log2(p) messages, against
 * recursive doubling's S·log2(p): time ~ 2·log2(p)·α + 2·(p-1)/p·S/B, the ring's bandwidth
 * with log2 instead of N-1 latencies, hence the default between RING_RD_MAX_BYTES and
 * RING_RH_MAX_BYTES.
 */
ring_result_t ring__allreduce_rh(ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring_result_t rc = RING_OK;
    const int n = comm->nranks, r = comm->rank;
    const int p = ring__pow2_floor(n), rem = n - p;
    const size_t es = ring_dtype_size(op->dtype), count = op->count, bytes = count * es;
    unsigned char mydesc[RING__DESC_LEN];
    char *acc = op->recvbuf, *tmp = NULL;
    size_t lo[32], hi[32]; /* the range before each halving round, for the way back */
    int kept_low[32];      /* ... and which half of it this rank kept */
    int rounds = 0;

    ring__desc_build(mydesc, op, RING__ALGO_RH);
    if (bytes) {
        RING_CHECK(ring__scratch_ensure(comm, bytes));
        tmp = comm->scratch;
    }
    if (r < 2 * rem && r % 2 == 0) {
        RING_CHECK(xchg(comm, mydesc, r + 1, 1, op->sendbuf, 0, NULL, bytes));
        RING_CHECK(xchg(comm, mydesc, r + 1, 0, NULL, 1, acc, bytes));
        goto fail;
    }
    int v = r - rem;
    if (r < 2 * rem) {
        RING_CHECK(xchg(comm, mydesc, r - 1, 0, NULL, 1, tmp, bytes));
        if (count) ring__reduce(acc, tmp, op->sendbuf, count, op->dtype, op->op);
        v = r / 2;
    } else if (bytes && acc != (const char *)op->sendbuf) {
        memmove(acc, op->sendbuf, bytes);
    }
    size_t l = 0, h = count;
    for (int mask = p / 2; mask >= 1; mask /= 2) {
        int pv = v ^ mask, low = v < pv;
        size_t mid = l + (h - l) / 2;
        size_t kl = low ? l : mid, kh = low ? mid : h; /* kept */
        size_t sl = low ? mid : l, sh = low ? h : mid; /* given away */
        lo[rounds] = l, hi[rounds] = h, kept_low[rounds] = low, rounds++;
        size_t kb = (kh - kl) * es, sb = (sh - sl) * es;
        /* The halves of an odd range differ by one element: each side sends what the other
         * keeps and receives what it keeps, so the lengths still match pairwise. */
        RING_CHECK(exchange(comm, mydesc, ring__rd_real_rank(pv, rem), 1, acc + sl * es, sb, 1, tmp, kb, "recursive-halving partner"));
        if (kh > kl) {
            const char *a = low ? acc + kl * es : tmp, *b = low ? tmp : acc + kl * es;
            if (mask == 1) ring__reduce_final(acc + kl * es, a, b, kh - kl, op->dtype, op->op, n);
            else ring__reduce(acc + kl * es, a, b, kh - kl, op->dtype, op->op);
        }
        l = kl, h = kh;
    }
    for (int k = rounds - 1, mask = 1; k >= 0; k--, mask *= 2) {
        int pv = v ^ mask;
        size_t ol = kept_low[k] ? h : lo[k], oh = kept_low[k] ? hi[k] : l; /* the partner's range */
        RING_CHECK(exchange(comm, mydesc, ring__rd_real_rank(pv, rem), 1, acc + l * es, (h - l) * es, 1, acc + ol * es, (oh - ol) * es,
                            "recursive-halving partner"));
        l = lo[k], h = hi[k];
    }
    if (r < 2 * rem) RING_CHECK(xchg(comm, mydesc, r - 1, 1, acc, 0, NULL, bytes));
fail:
    return ring__algo_failed(comm, rc, op, "recursive halving");
}
ring_result_t ring__barrier_rd(ring_comm_t *comm, const ring__opdesc_t *op) { return rd_run(comm, op); }
