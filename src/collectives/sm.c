/*
 * Shared-memory all-reduce (RING_ALGO=sm; by default for medium sizes when every rank of the
 * communicator is on one host): the ranks meet in one shared page (src/core/shpage.c) made
 * at init, instead of passing chunks around the ring.
 *
 * The page: a row per rank (a progress counter on its own cache line, and records of the
 * last HIST calls), then two sets of N input windows and one result window of W bytes each
 * (W = 2 MiB / N, within 64-256 KiB). A buffer of S bytes goes in rounds of at most W bytes;
 * round t uses set t mod 2. Per round, rank r:
 *  1. copies its input into its window of the set, publishes progress 3t+1 and waits until
 *     every rank has (the first round of a call also checks every rank's record: see below);
 *  2. reduces block r (the r-th of N equal parts, 64-byte aligned) of all N windows, in rank
 *     order, into the result window, publishes 3t+2 and waits until every rank has;
 *  3. copies the whole result window into its recvbuf and publishes 3t+3.
 * A round whose N inputs together are at most SMALL_ROUND bytes has no step 2 wait: after step
 * 1 every rank reduces all of it, in the same order, straight into its recvbuf. A barrier is
 * such a round with no data.
 * Bytes moved per rank and round: S copied in, S read and S/N written by the reduction, S
 * copied out (no wire: the ring moves 2(N-1)/N S through its segments, with a copy in and a
 * copy or a reduction out at each of 2(N-1) steps). What it saves is the steps: two waits for
 * all ranks per round instead of 2(N-1) waits, each for one neighbour, which is what costs
 * when there are more ranks than cores (each wait may need the scheduler to run the right
 * process next). Every block is reduced by one rank and copied by all, so every rank gets the
 * same bits.
 *
 * Why two sets suffice: a rank writes set t mod 2 again in round t+2 only after its wait in
 * step 2 of round t+1, which needs every rank past step 1 of round t+1, hence done with round
 * t (its step 3 included). In-place calls work unchanged: the input is copied in before the
 * result is copied out.
 *
 * Agreement: every rank writes a record for every collective it runs (what the call is and
 * how it runs it: this algorithm, another one, or device buffers). Before its first round a
 * rank on this path reads everyone's record of the call: all on this path and the same call,
 * go on; a rank with device buffers for the same call sends every host rank to the ring (they
 * all read every record while they wait, so they all go); anything else is a mismatch,
 * reported naming the rank.
 *
 * Waiting: the page has no file descriptor to poll, so a waiting rank yields for 2 ms, then
 * naps 20 us between looks, and 1 ms after 100 ms. A dead rank is reported by the watcher
 * (the bootstrap star), a rank that left by ring_comm_destroy by its goodbye, anything else
 * by RING_TIMEOUT_MS; ring_comm_abort within one look.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "log.h"
#include "p2p.h"
#include "reduce.h"
#include "shpage.h"
#include "watch.h"

#define HIST 16 /* records per rank: a rank waits before it gets that many calls ahead (note) */
#define TILE ((size_t)32 * 1024)
/* Rounds whose N inputs together are at most this many bytes take one wait, not two: every
 * rank reduces the whole round itself. On the 2-core VM (medians of 6 runs, N = 4 | 8 ranks,
 * 1 KiB / 4 KiB / 16 KiB): two waits 9.2 / 10.7 / 14.7 | 25.8 / 28.2 / 36.6 us, one up to
 * 16 KiB 6.0 / 7.6 / 14.8 | 14.9 / 22.9 / 34.7, one up to 64 KiB 8.1 / 10.1 / 18.8 | 16.3 /
 * 22.6 / 36.4 (docs/performance.md). */
#define SMALL_ROUND ((size_t)16 * 1024)
/* Waits on the page have no descriptor to sleep on: they spin (yielding when oversubscribed)
 * this long, then nap, 20 us at a time up to 100 ms of waiting and 1 ms after that. */
#define SPIN_NS 2000000

enum { KIND_SM = 1, KIND_OTHER = 2, KIND_DEVICE = 3 };

static _Atomic(void (*)(const ring_comm_t *, uint64_t)) wait_hook;

void ring__sm_set_wait_hook_for_tests(void (*fn)(const ring_comm_t *comm, uint64_t seq))
{
    atomic_store_explicit(&wait_hook, fn, memory_order_release);
}

typedef struct rec {
    ring__callrec_t c;
    uint32_t kind;
    int32_t algo;
} rec_t;

typedef struct row {
    _Atomic uint64_t progress; /* 3 t + step, for round t */
    unsigned char pad[56];
    /* Calls of this rank that returned: it reads no record of them. Not on progress's line,
     * which the other ranks spin on: a store here would take it from them once more per call. */
    _Atomic uint64_t done;
    unsigned char pad2[56];
    rec_t rec[HIST];
} row_t;

typedef struct sm {
    ring__shpage_t page;
    row_t *row;
    unsigned char *data; /* 2 sets of N + 1 windows */
    size_t win;
    uint64_t rounds; /* this rank's rounds so far: the same count on every rank */
    uint64_t ncalls;
    uint64_t room; /* every rank's done has reached this (ring__callrec_room) */
} sm_t;

static size_t rows_bytes(int n) { return ((size_t)n * sizeof(row_t) + 4095) & ~(size_t)4095; }

/* A round's N input windows together at most 2 MiB (each 64-256 KiB), so that what step 2
 * reads is still in cache: on the 2-core VM with 8 ranks, 256 KiB windows took a 1 MiB
 * all-reduce in 620-640 us and 1 MiB windows in 1510-1750 (docs/performance.md). */
static size_t win_bytes(const ring_comm_t *comm)
{
    size_t w = ((size_t)2 << 20) / (size_t)comm->nranks;
    w = RING__MAX(RING__MIN(w, (size_t)256 << 10), (size_t)64 << 10);
    return w & ~(size_t)4095;
}

ring_result_t ring__sm_setup(ring_comm_t *comm)
{
    ring_result_t rc = RING_OK;
    sm_t *m = NULL;
    /* Not on RING_ALGO, so that ranks with different settings still finish init (their first
     * call then names the difference). */
    if (!comm->all_shm || comm->nranks < 2 || !comm->params.sm_max_bytes) return RING_OK;
    const size_t n = (size_t)comm->nranks, win = win_bytes(comm);
    m = calloc(1, sizeof *m);
    if (!m) return ring__seterr(comm, RING_ERR_NOMEM, "shared-memory all-reduce: out of memory");
    RING_CHECK(ring__shpage_open(comm, "sm", "shared-memory all-reduce", rows_bytes(comm->nranks) + 2 * (n + 1) * win, 1,
                                 &m->page));
    if (!m->page.map) { /* no room in RING_SHM_DIR: every rank got the same answer and logged it */
        free(m);
        return RING_OK;
    }
    m->row = m->page.body;
    m->data = (unsigned char *)m->page.body + rows_bytes(comm->nranks);
    m->win = win;
    comm->sm = m;
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank,
             "shared-memory all-reduce: every rank is on this host; %zu bytes of RING_SHM_DIR for windows of %zu bytes",
             m->page.bytes, win);
    return RING_OK;
fail:
    ring__shpage_close(&m->page);
    free(m);
    return rc;
}

void ring__sm_fini(ring_comm_t *comm)
{
    sm_t *m = comm->sm;
    if (!m) return;
    comm->sm = NULL;
    ring__shpage_close(&m->page);
    free(m);
}

int ring__sm_available(const ring_comm_t *comm) { return comm->sm != NULL; }

uint64_t ring__sm_count(const ring_comm_t *comm)
{
    const sm_t *m = comm->sm;
    return m ? m->ncalls : 0;
}

static rec_t *rec_of(sm_t *m, int rank, uint64_t q) { return &m->row[rank].rec[q % HIST]; }

ring_result_t ring__sm_note(ring_comm_t *comm, const ring__opdesc_t *op, int algo)
{
    sm_t *m = comm->sm;
    if (!m) return RING_OK;
    /* The slot held call q - HIST: wait until every rank is done with it. A rank can run ahead
     * of one slow to look (calls that do not need it, like broadcasts from a root, finish
     * without it), and 16 calls ahead it used to overwrite a record the slow rank had still
     * to read, which failed a correct call as a mismatch. Readers look at the fields only
     * after they see seq = q + 1. */
    ring_result_t rc = ring__callrec_room(comm, op, &m->row[0].done, sizeof(row_t), HIST, &m->room,
                                          "shared-memory all-reduce records");
    if (rc != RING_OK) return rc;
    rec_t *r = rec_of(m, comm->rank, op->seq);
    ring__callrec_set(&r->c, op);
    r->algo = algo;
    r->kind = op->mem_device ? KIND_DEVICE : algo == RING__ALGO_SM ? KIND_SM : KIND_OTHER;
    ring__callrec_publish(&r->c, op->seq);
    return RING_OK;
}

void ring__sm_done(ring_comm_t *comm, const ring__opdesc_t *op)
{
    sm_t *m = comm->sm;
    if (m) atomic_store_explicit(&m->row[comm->rank].done, op->seq + 1, memory_order_release);
}

/* Peer p's record of call q: 1 copied, 0 not there yet, -1 overwritten by a later call (a
 * rank that did not wait for room in note: a bug, reported). */
static int rec_read(sm_t *m, int p, uint64_t q, rec_t *out)
{
    const rec_t *r = rec_of(m, p, q);
    int st = ring__callrec_state(&r->c, q);
    if (st == 1) {
        ring__callrec_copy(&out->c, &r->c);
        out->kind = r->kind;
        out->algo = r->algo;
    }
    return st;
}

static const char *algo_text(const rec_t *r)
{
    if (r->kind == KIND_DEVICE) return "device buffers";
    switch (r->algo) {
    case RING__ALGO_SM: return "shared-memory all-reduce";
    case RING__ALGO_RD: return "recursive doubling";
    case RING__ALGO_RH: return "recursive halving";
    case RING__ALGO_TREE: return "binomial tree";
    default: return "ring";
    }
}

/* "allreduce(count=5, float32, sum)", as the ring's descriptors show a call. */
static void call_str(char *out, size_t len, uint32_t coll, uint64_t count, uint32_t dtype, uint32_t op)
{
    const char *name = ring__coll_name((ring__coll_t)coll);
    if (coll == RING__COLL_BARRIER) snprintf(out, len, "%s", name);
    else if (coll == RING__COLL_ALLREDUCE || coll == RING__COLL_REDUCE_SCATTER)
        snprintf(out, len, "%s(count=%llu, %s, %s)", name, (unsigned long long)count,
                 ring__dtype_name((ring_dtype_t)dtype), ring__op_name((ring_op_t)op));
    else snprintf(out, len, "%s(count=%llu, %s)", name, (unsigned long long)count, ring__dtype_name((ring_dtype_t)dtype));
}

/* The first round's check of rank p's record: RING_OK to go on, *ring = 1 to take the ring. */
static ring_result_t check_rec(ring_comm_t *comm, const ring__opdesc_t *op, int p, const rec_t *theirs, int *ring)
{
    ring__callrec_t mine;
    ring__callrec_set(&mine, op);
    const int same = ring__callrec_same(&mine, &theirs->c);
    /* The same all-reduce on device buffers: the host ranks meet it in the ring. A different
     * call is a mismatch whatever the buffers (a barrier has no ring to take). */
    if (theirs->kind == KIND_DEVICE && same) {
        *ring = 1;
        return RING_OK;
    }
    if (theirs->kind == KIND_SM && same) return RING_OK;
    char who[160], a[128], b[128];
    ring__peer_desc(comm, p, who, sizeof who);
    call_str(a, sizeof a, (uint32_t)op->coll, op->count, (uint32_t)op->dtype, (uint32_t)op->op);
    call_str(b, sizeof b, theirs->c.coll, theirs->c.count, theirs->c.dtype, theirs->c.op);
    return ring__seterr(comm, RING_ERR_MISMATCH,
                        "collective mismatch: this rank (%d) called #%llu %s [shared-memory all-reduce] but %s called #%llu "
                        "%s [%s] (do the ranks have the same RING_ALGO and RING_*_MAX_BYTES?)",
                        comm->rank, (unsigned long long)op->seq, a, who, (unsigned long long)op->seq, b, algo_text(theirs));
}

/*
 * Publish step `target` of this rank and wait until every rank reached it. first: the
 * call's first round, where every rank's record is checked too (*ring = 1: every host rank
 * takes the ring instead).
 */
static ring_result_t step(ring_comm_t *comm, sm_t *m, const ring__opdesc_t *op, uint64_t target, int first, int *ring)
{
    const int n = comm->nranks;
    ring__idle_t waited;
    ring__idle_start(&waited, SPIN_NS);
    ring_result_t rc = RING_OK;
    int p = 0, checked = first ? 0 : n; /* ranks 0..checked-1 have a good record */
    int relooked = 0;
    atomic_store_explicit(&m->row[comm->rank].progress, target, memory_order_release);
    while (p < n) {
        /* Records are read ahead of the progress counters: a rank that found a device record
         * takes the ring and puts its counter back, so a rank still waiting for that counter
         * would wait out the timeout unless it reads the record too. */
        while (checked < n) {
            rec_t r;
            int got = rec_read(m, checked, op->seq, &r);
            if (got < 0) {
                char who[160];
                ring__peer_desc(comm, checked, who, sizeof who);
                rc = ring__seterr(comm, RING_ERR_INTERNAL,
                                  "internal error: %s rewrote its record of #%llu %s before this rank (%d) read it "
                                  "(records are kept for %d calls)",
                                  who, (unsigned long long)op->seq, ring__coll_name(op->coll), comm->rank, HIST);
                goto fail;
            }
            if (got == 0) break;
            RING_CHECK(check_rec(comm, op, checked, &r, ring));
            if (*ring) goto fail;
            checked++;
            relooked = 0;
            ring__idle_progress(&waited);
        }
        if (p < checked && atomic_load_explicit(&m->row[p].progress, memory_order_acquire) >= target) {
            p++;
            relooked = 0;
            ring__idle_progress(&waited);
            continue;
        }
        int64_t idle = ring__idle_ns(&waited);
        void (*hook)(const ring_comm_t *, uint64_t) = atomic_load_explicit(&wait_hook, memory_order_acquire);
        if (hook) hook(comm, op->seq);
        int stop = ring__wait_stop(comm, idle, &relooked);
        if (stop != RING__WAIT_GO_ON) {
            char who[160];
            ring__peer_desc(comm, p, who, sizeof who);
            const char *doing = p >= checked ? "enter the collective"
                                : target % 3 == 1 ? "copy its input in"
                                                  : "reduce its block";
            rc = ring__wait_stop_error(comm, op, stop, "shared-memory all-reduce", who, doing);
            goto fail;
        }
        if (idle < SPIN_NS) ring__spin_once(comm, idle);
        else ring__nap_ns(idle < 100000000 ? 20000 : 1000000);
    }
fail:
    return rc;
}

/* dst = elements [lo, hi) of the N windows of a set combined in rank order, in tiles so that
 * the partial result stays in cache across the N - 1 passes. */
static void reduce_range(const sm_t *m, int n, const unsigned char *set, const ring__opdesc_t *op, size_t lo, size_t hi,
                         void *dst)
{
    const size_t es = ring_dtype_size(op->dtype), tile = TILE / es;
    for (size_t i = lo; i < hi; i += tile) {
        const size_t k = RING__MIN(tile, hi - i);
        char *d = (char *)dst + (i - lo) * es;
        for (int p = 1; p < n; p++) {
            const void *a = p == 1 ? (const void *)(set + i * es) : d, *b = set + (size_t)p * m->win + i * es;
            if (p == n - 1) ring__reduce_final(d, a, b, k, op->dtype, op->op, n);
            else ring__reduce(d, a, b, k, op->dtype, op->op);
        }
    }
}

ring_result_t ring__allreduce_sm(ring_comm_t *comm, const ring__opdesc_t *op, int *ran)
{
    sm_t *m = comm->sm;
    ring_result_t rc = RING_OK;
    const int n = comm->nranks, me = comm->rank;
    const size_t es = ring_dtype_size(op->dtype);
    const size_t per_round = m->win / es, align = 64 / es;
    int ring = 0;
    *ran = 0;
    for (size_t off = 0, first = 1; off < op->count || first; off += per_round, first = 0) {
        const size_t cnt = RING__MIN(per_round, op->count - off);
        const uint64_t t = m->rounds;
        unsigned char *set = m->data + (t & 1) * ((size_t)n + 1) * m->win;
        unsigned char *out = set + (size_t)n * m->win;
        if (cnt) memcpy(set + (size_t)me * m->win, (const char *)op->sendbuf + off * es, cnt * es);
        RING_CHECK(step(comm, m, op, 3 * t + 1, (int)first, &ring));
        if (ring) {
            /* Nobody got past this round's first step: it is not spent. */
            atomic_store_explicit(&m->row[me].progress, 3 * t, memory_order_release);
            return RING_OK;
        }
        m->rounds++;
        char *dst = cnt ? (char *)op->recvbuf + off * es : NULL; /* a barrier has no buffers */
        if (cnt * es * (size_t)n <= SMALL_ROUND) {
            /* Small: every rank reduces all of it, in the same order, straight into its recvbuf;
             * no second wait (nobody writes this set again before every rank is past the next
             * round's first step, hence done here). */
            reduce_range(m, n, set, op, 0, cnt, dst);
        } else {
            size_t blk = (cnt + (size_t)n - 1) / (size_t)n;
            blk = (blk + align - 1) / align * align;
            const size_t lo = RING__MIN(cnt, (size_t)me * blk), hi = RING__MIN(cnt, lo + blk);
            reduce_range(m, n, set, op, lo, hi, out + lo * es);
            RING_CHECK(step(comm, m, op, 3 * t + 2, 0, &ring));
            if (cnt) memcpy(dst, out, cnt * es);
        }
        atomic_store_explicit(&m->row[me].progress, 3 * t + 3, memory_order_release);
    }
    m->ncalls++;
    *ran = 1;
fail:
    if (rc != RING_OK) *ran = 1;
    return rc;
}
