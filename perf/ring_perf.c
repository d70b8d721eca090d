/*
 * ring_perf: bandwidth/latency sweep of the ringcomm collectives, in the style of nccl-tests,
 * with an alpha-beta model of each row and a parameter-server baseline for allreduce.
 *
 *   ringrun -n 4 build/perf/ring_perf -C allreduce -b 4 -e 256M -f 2 -d float -o sum -A both
 *
 * Every rank runs this program; ringrun sets RING_RANK/RING_NRANKS/RING_ROOT/RING_SECRET and the
 * communicator comes from ring_comm_init_env(). Rank 0 prints; other ranks only print errors.
 *
 * Per size: one ring_barrier, -w warm-up calls, then -n timed calls, each timed on its own with
 * CLOCK_MONOTONIC. The per-iteration times are reduced with RING_MAX over ranks (outside the
 * timed region) and the reported time is the median over iterations of that maximum.
 * With -c 1 the buffers are then refilled with check data, the collective runs once more and
 * every rank compares its output element by element with an independently computed value;
 * #wrong is the number of mismatching elements summed over ranks.
 *
 * Sizes are full-buffer bytes as in nccl-tests: allreduce/broadcast send count*size bytes,
 * reduce_scatter's size is the full send buffer (nranks*recvcount*size), allgather's the full
 * receive buffer (nranks*sendcount*size). The count column is the count argument of the call
 * (per rank for reduce_scatter and allgather). Sizes are rounded down to what the count can
 * express; sizes that round to zero elements (or repeat the previous row) are skipped.
 *
 * Model columns. Before the sweep the tool measures the two parameters of the alpha-beta model
 * with the library's internal point-to-point layer (src/core/p2p.h) over the ring connections
 * (send to the right, receive from the left), which exist without any ring__p2p_connect:
 *  - alpha: an 8-byte token goes once around the ring (rank 0 sends to rank 1, every rank
 *    forwards what it receives from its left to its right, rank 0 receives it from rank n-1);
 *    alpha = median over ALPHA_REPS trips (after ALPHA_WARMUP) of rank 0's trip time / n, the
 *    cost of one dependent hop as the collectives pay it;
 *  - B: every rank at once streams --probe-bytes (default 64 MiB) to its right while receiving
 *    as much from its left, in 4 MiB messages, LINK_PIECES per ring__p2p_run call; the time of
 *    a repetition is the max over ranks, B = bytes / time, the best of LINK_REPS repetitions
 *    (after one warm-up): the rate each link sustains while all of them carry traffic, which is
 *    what a ring collective asks of them. The received bytes are compared with the sent ones.
 * --alpha-us / --link-gbps give either parameter instead (no probe for it); --no-probe leaves
 * the ones not given unknown and their model columns "-". model(us) is the time the formula
 * predicts for the row's size (perf_common.h, pc_model_us); eff = model / measured, so 1 means
 * the call ran as fast as the links allow and smaller is slower. The broadcast model treats the
 * ring broadcast as a chain of n-1 hops pipelined in chunks: (n-1) alpha + S/B, without the
 * pipeline fill; the barrier's is one token pass of n-1 dependent empty steps, (n-1) alpha.
 * The library runs allreduces of at most RING_RD_MAX_BYTES, and the barrier, by recursive
 * doubling unless RING_ALGO says otherwise (src/core/api.c): those rows say "rd" in the algo
 * column and use its model, (log2 p + 2 [n > p]) (alpha + S/B) with p the largest power of
 * two <= n (alpha only for the barrier).
 *
 * Parameter-server baseline (-A ps, or -A both for the ring table then the ps table on the same
 * sizes; allreduce only): every rank != 0 sends its whole buffer to rank 0 and then receives
 * the result from it; rank 0 receives the n-1 buffers (posted together, in batches of at most
 * RING__P2P_MAX_OPS ranks and PS_SCRATCH_MAX bytes of receive buffers), reduces them into its
 * result in rank order with the library's own loops (ring__reduce, and ring__reduce_final for
 * the last one, which divides for avg), then sends the result to every rank at once. Its
 * connections are opened once before the sweep (ring__p2p_connect). Timing and checks are the
 * ring's; busbw uses the allreduce factor 2(n-1)/n so the two tables compare at equal bytes;
 * its model is 2(n-1) (alpha + S/B), since rank 0's link carries 2(n-1) S one message after the
 * other: the model of a network where rank 0's NIC is the bottleneck. On one host (loopback)
 * there is no such NIC and rank 0's n-1 receives overlap, so the baseline runs faster than that
 * model (eff > 1) and, for a few KiB, faster than the ring (2 dependent messages against
 * 2(n-1)). Rows carry the algorithm in the algo column ("ring", "rd" or "ps"); the collective
 * column stays "allreduce".
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "p2p.h"
#include "perf_common.h"
#include "reduce.h"
#include "transport.h"
#include "ringcomm.h"

/* alpha probe: enough trips for a stable median on a loaded machine, a few ms in all on loopback. */
#define ALPHA_REPS 100
#define ALPHA_WARMUP 10
/* link probe: 4 MiB messages, 8 in flight per call, like a deep pipeline of large chunks. */
#define LINK_PIECE ((size_t)4 << 20)
#define LINK_PIECES 8
#define LINK_REPS 3
/* ps baseline: rank 0's receive buffers stay under this together (there is always at least one). */
#define PS_SCRATCH_MAX ((size_t)1 << 30)

/* perf_common's dtypes and ops, as the library's. */
static const ring_dtype_t ring_dtypes[PC_DTYPE_COUNT] = {RING_INT8,    RING_UINT8,    RING_INT32,   RING_UINT32,
                                                         RING_INT64,   RING_UINT64,   RING_FLOAT16, RING_BFLOAT16,
                                                         RING_FLOAT32, RING_FLOAT64};
static const ring_op_t ring_ops[PC_OP_COUNT] = {RING_SUM, RING_PROD, RING_MIN, RING_MAX, RING_AVG};

typedef struct {
    pc_opts_t pc; /* sizes, iterations, check, in-place, output, dtype, op, model, -A, -G */
    pc_coll_t coll;
    int root, async;
    int reg; /* -R 1: ring_comm_register the sweep's buffers */
} opts_t;

static ring_comm_t *g_comm;
static int g_rank, g_nranks;

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                    */

static void die_call(const char *what, ring_result_t r)
{
    fprintf(stderr, "ring_perf: rank %d: %s failed: %s (%s): %s\n", g_rank, what, ring_strerror(r),
            ring_result_name(r), ring_comm_last_error(g_comm));
    fflush(stderr);
    /* Make the other ranks fail fast instead of waiting for the timeout. */
    ring_comm_abort(g_comm);
    exit(2);
}

#define CALL(what, expr)                                                                           \
    do {                                                                                           \
        ring_result_t rc_ = (expr);                                                                \
        if (rc_ != RING_OK) die_call(what, rc_);                                                   \
    } while (0)

static void die_msg(const char *msg)
{
    fprintf(stderr, "ring_perf: rank %d: %s\n", g_rank, msg);
    fflush(stderr);
    ring_comm_abort(g_comm);
    exit(2);
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]   (run under ringrun: every rank runs it)\n"
            "  -C coll    allreduce|reduce_scatter|allgather|broadcast|barrier (default allreduce)\n"
            "  -A algo    ring|ps|both: the library (the ring, or recursive doubling where it picks that;\n"
            "             the algo column says which), the parameter-server baseline (allreduce only),\n"
            "             or both tables on the same sizes (default ring)\n"
            "  -G mem     host|cuda: where the buffers live (default host)\n"
            PC_USAGE_SWEEP
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16 float|float32\n"
            "             double|float64 (default float)\n"
            "  -o op      sum prod min max avg (default sum)\n"
            "  -r root    broadcast root (default 0)\n"
            "  -I 0|1     in-place (default 0)\n"
            "  -a 0|1     use the _async API followed by ring_wait (default 0; the ps baseline is\n"
            "             always blocking)\n"
            "  -R 0|1     register the buffers with ring_comm_register (default 0; over verbs,\n"
            "             registered buffers are written straight into each other)\n"
            PC_USAGE_OUTPUT
            "  --no-probe        do not measure alpha and the link bandwidth before the sweep; the\n"
            "                    model columns then need --alpha-us and --link-gbps (the barrier: alpha)\n"
            "  --probe-bytes N   bytes each rank streams in the link probe (default 64M)\n"
            "  -h         this help\n",
            argv0);
}

static void bad_arg(const char *argv0, const char *msg, const char *val)
{
    /* Before init the rank is only known from the launcher: let one rank print the usage. */
    const char *r = getenv("RING_RANK");
    if (!r || strcmp(r, "0") == 0) {
        if (val) fprintf(stderr, "ring_perf: %s: '%s'\n", msg, val);
        else fprintf(stderr, "ring_perf: %s\n", msg);
        usage(stderr, argv0);
    }
    exit(2);
}

/* A usage error without the usage text (the options were understood, the combination not). */
static void bad_combination(const char *msg)
{
    const char *r = getenv("RING_RANK");
    if (!r || strcmp(r, "0") == 0) fprintf(stderr, "ring_perf: %s\n", msg);
    exit(2);
}

static void *alloc_buf(size_t bytes)
{
    size_t n;
    void *p = pc_alloc_buf(bytes, &n);
    if (!p) {
        fprintf(stderr, "ring_perf: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        ring_comm_abort(g_comm);
        exit(2);
    }
    return p;
}

static void p2p(ring__p2p_op_t *ops, int nops, const char *what)
{
    CALL(what, ring__p2p_run(g_comm, ops, nops));
}

/* The algorithm the library runs for a call of this collective and size: the rule of
 * ring__run_op (src/core/api.c) on the communicator's RING_ALGO / RING_RD_MAX_BYTES. */
static pc_algo_t lib_algo(pc_coll_t c, size_t bytes)
{
    ring__coll_t lc = c == PC_COLL_ALLREDUCE   ? RING__COLL_ALLREDUCE
                      : c == PC_COLL_BARRIER   ? RING__COLL_BARRIER
                      : c == PC_COLL_BROADCAST ? RING__COLL_BROADCAST
                                               : RING__COLL_ALLGATHER;
    int a = ring__algo_for(g_comm, lc, bytes);
    return a == RING__ALGO_RD ? PC_ALGO_RD : a == RING__ALGO_TREE ? PC_ALGO_TREE : a == RING__ALGO_RH ? PC_ALGO_RH : PC_ALGO_RING;
}

/* ---------------------------------------------------------------------------------------- */
/* Model parameters                                                                          */

/* Per-hop latency in seconds: median ring trip of an 8-byte token / n (rank 0 measures). */
static double probe_alpha(void)
{
    const int n = g_nranks, right = (g_rank + 1) % n, left = (g_rank + n - 1) % n;
    double t[ALPHA_REPS];
    CALL("ring_barrier", ring_barrier(g_comm));
    for (int k = -ALPHA_WARMUP; k < ALPHA_REPS; k++) {
        uint64_t token = (uint64_t)(k + ALPHA_WARMUP), back = ~(uint64_t)0;
        if (g_rank == 0) {
            /* Both in one call: the receive is posted while the send goes out. */
            ring__p2p_op_t ops[2] = {{.peer = right, .is_send = 1, .buf = &token, .len = sizeof token},
                                      {.peer = left, .is_send = 0, .buf = &back, .len = sizeof back}};
            double t0 = pc_now_us();
            p2p(ops, 2, "ring__p2p_run (alpha probe)");
            double dt = pc_now_us() - t0;
            if (back != token) die_msg("alpha probe: the token came back changed");
            if (k >= 0) t[k] = dt;
        } else {
            ring__p2p_op_t rx = {.peer = left, .is_send = 0, .buf = &back, .len = sizeof back};
            p2p(&rx, 1, "ring__p2p_run (alpha probe)");
            ring__p2p_op_t tx = {.peer = right, .is_send = 1, .buf = &back, .len = sizeof back};
            p2p(&tx, 1, "ring__p2p_run (alpha probe)");
        }
    }
    double alpha = g_rank == 0 ? pc_median(t, ALPHA_REPS) * 1e-6 / n : 0;
    /* Every rank uses the same value (only rank 0 prints, but keep the state identical). */
    CALL("ring_broadcast (alpha)", ring_broadcast(g_comm, &alpha, 1, RING_FLOAT64, 0));
    return alpha;
}

/* Link bandwidth in bytes/s: all ranks stream `total` bytes to the right at once. */
static double probe_link(size_t total)
{
    const int n = g_nranks, right = (g_rank + 1) % n, left = (g_rank + n - 1) % n;
    const size_t piece = total < LINK_PIECE ? total : LINK_PIECE;
    const size_t per_call = total < piece * LINK_PIECES ? total : piece * LINK_PIECES;
    unsigned char *sb = alloc_buf(per_call), *rb = alloc_buf(per_call);
    /* The same pattern on every rank, so what arrives from the left must equal what is sent. */
    for (size_t k = 0; k < per_call; k++) sb[k] = (unsigned char)(k * 131u + (k >> 12));
    double t[LINK_REPS];
    for (int rep = -1; rep < LINK_REPS; rep++) {
        CALL("ring_barrier", ring_barrier(g_comm));
        double t0 = pc_now_us();
        for (size_t off = 0; off < total; off += per_call) {
            size_t len = total - off < per_call ? total - off : per_call;
            ring__p2p_op_t ops[2 * LINK_PIECES];
            int nops = 0;
            for (size_t p = 0; p < len; p += piece) {
                size_t m = len - p < piece ? len - p : piece;
                ops[nops++] = (ring__p2p_op_t){.peer = right, .is_send = 1, .buf = sb + p, .len = m};
                ops[nops++] = (ring__p2p_op_t){.peer = left, .is_send = 0, .buf = rb + p, .len = m};
            }
            p2p(ops, nops, "ring__p2p_run (link probe)");
        }
        if (rep >= 0) t[rep] = pc_now_us() - t0;
    }
    /* The last call filled rb from its start; compare what it covered. */
    size_t last = total % per_call ? total % per_call : per_call;
    if (memcmp(sb, rb, last) != 0) die_msg("link probe: the bytes received differ from the bytes sent");
    free(sb);
    free(rb);
    CALL("ring_allreduce (probe max)", ring_allreduce(g_comm, t, t, LINK_REPS, RING_FLOAT64, RING_MAX));
    double best = t[0];
    for (int k = 1; k < LINK_REPS; k++)
        if (t[k] < best) best = t[k];
    return (double)total / (best * 1e-6);
}

static void format_bytes(char *s, size_t n, size_t b)
{
    if (b >= ((size_t)1 << 30) && b % ((size_t)1 << 30) == 0) snprintf(s, n, "%zu GiB", b >> 30);
    else if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) snprintf(s, n, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(s, n, "%zu KiB", b >> 10);
    else snprintf(s, n, "%zu B", b);
}

/* alpha and B from the options, else from the probes, else unknown. Collective (all ranks). */
static pc_link_t model_params(const pc_opts_t *o)
{
    pc_link_t l = {-1, -1, "", ""};
    if (o->alpha_us >= 0) {
        l.alpha_s = o->alpha_us * 1e-6;
        snprintf(l.alpha_src, sizeof l.alpha_src, "--alpha-us");
    } else if (g_nranks == 1) {
        snprintf(l.alpha_src, sizeof l.alpha_src, "1 rank: no hop to measure");
    } else if (!o->probe) {
        snprintf(l.alpha_src, sizeof l.alpha_src, "--no-probe");
    } else {
        l.alpha_s = probe_alpha();
        snprintf(l.alpha_src, sizeof l.alpha_src, "ring token pass, median of %d", ALPHA_REPS);
    }
    if (o->link_gbps > 0) {
        l.bw_Bps = pc_gbps_to_Bps(o->link_gbps);
        snprintf(l.bw_src, sizeof l.bw_src, "--link-gbps");
    } else if (g_nranks == 1) {
        snprintf(l.bw_src, sizeof l.bw_src, "1 rank: no link to measure");
    } else if (!o->probe) {
        snprintf(l.bw_src, sizeof l.bw_src, "--no-probe");
    } else {
        char b[32];
        format_bytes(b, sizeof b, o->probe_bytes);
        l.bw_Bps = probe_link(o->probe_bytes);
        snprintf(l.bw_src, sizeof l.bw_src, "ring streaming, %s, best of %d", b, LINK_REPS);
    }
    return l;
}

/* ---------------------------------------------------------------------------------------- */
/* Parameter-server baseline                                                                 */

static struct {
    unsigned char **slot; /* rank 0: receive buffers for nslots ranks at a time */
    int nslots;
} g_ps;

static void ps_setup(size_t maxbytes)
{
    const int n = g_nranks;
    if (n == 1) return;
    int npeers = g_rank == 0 ? n - 1 : 1;
    int *peers = malloc(sizeof(int) * (size_t)npeers);
    if (!peers) die_msg("out of memory");
    for (int k = 0; k < npeers; k++) peers[k] = g_rank == 0 ? k + 1 : 0;
    CALL("ring__p2p_connect (ps)", ring__p2p_connect(g_comm, peers, npeers));
    free(peers);
    if (g_rank != 0) return;
    size_t fit = maxbytes ? PS_SCRATCH_MAX / maxbytes : (size_t)n;
    int ns = n - 1 < RING__P2P_MAX_OPS ? n - 1 : RING__P2P_MAX_OPS;
    if ((size_t)ns > fit) ns = fit ? (int)fit : 1;
    g_ps.nslots = ns;
    g_ps.slot = calloc((size_t)ns, sizeof *g_ps.slot);
    if (!g_ps.slot) die_msg("out of memory");
    for (int k = 0; k < ns; k++) g_ps.slot[k] = alloc_buf(maxbytes);
}

static void ps_free(void)
{
    for (int k = 0; k < g_ps.nslots; k++) free(g_ps.slot[k]);
    free(g_ps.slot);
}

static void ps_allreduce(const void *send, void *recv, size_t count, ring_dtype_t dt, ring_op_t op, size_t esize)
{
    const int n = g_nranks;
    const size_t bytes = count * esize;
    if (n == 1) {
        if (recv != send) memcpy(recv, send, bytes);
        return;
    }
    if (g_rank != 0) {
        /* Two calls: in place, the result must not land in the buffer while it is being sent. */
        ring__p2p_op_t tx = {.peer = 0, .is_send = 1, .buf = (void *)send, .len = bytes};
        p2p(&tx, 1, "ring__p2p_run (ps send)");
        ring__p2p_op_t rx = {.peer = 0, .is_send = 0, .buf = recv, .len = bytes};
        p2p(&rx, 1, "ring__p2p_run (ps result)");
        return;
    }
    ring__p2p_op_t ops[RING__P2P_MAX_OPS];
    const void *acc = send; /* rank 0's own contribution comes first */
    for (int q0 = 1; q0 < n; q0 += g_ps.nslots) {
        int nb = n - q0 < g_ps.nslots ? n - q0 : g_ps.nslots;
        for (int k = 0; k < nb; k++) ops[k] = (ring__p2p_op_t){.peer = q0 + k, .is_send = 0, .buf = g_ps.slot[k], .len = bytes};
        p2p(ops, nb, "ring__p2p_run (ps gather)");
        for (int k = 0; k < nb; k++) {
            if (q0 + k == n - 1) ring__reduce_final(recv, acc, g_ps.slot[k], count, dt, op, n);
            else ring__reduce(recv, acc, g_ps.slot[k], count, dt, op);
            acc = recv;
        }
    }
    for (int q0 = 1; q0 < n; q0 += RING__P2P_MAX_OPS) {
        int nb = n - q0 < RING__P2P_MAX_OPS ? n - q0 : RING__P2P_MAX_OPS;
        for (int k = 0; k < nb; k++) ops[k] = (ring__p2p_op_t){.peer = q0 + k, .is_send = 1, .buf = recv, .len = bytes};
        p2p(ops, nb, "ring__p2p_run (ps scatter)");
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Check data (generator and expected values: perf_common)                                   */

/* Count mismatches of got[k] against the expectation; print the first few to stderr. */
typedef struct {
    pc_dtype_t dtype;
    pc_op_t op;
    const pc_gen_t *gen;
    int reduce;       /* 1: reduction over ranks of val(r, base + k); 0: copy of val(src, base + k) */
    int src;          /* copy source rank */
} expect_t;

static long long check_range(const void *got, size_t n, uint64_t base, const expect_t *e, size_t *reported,
                             const char *what, size_t bytes)
{
    size_t sz = pc_dtype_size(e->dtype);
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        const unsigned char *g = (const unsigned char *)got + k * sz;
        if (e->reduce) pc_expect_reduce(exp, e->dtype, e->op, e->gen, g_nranks, base + k);
        else pc_put(exp, 0, e->dtype, pc_val(e->gen, e->src, base + k));
        if (!pc_same(g, exp, e->dtype)) {
            if (*reported < 5) {
                char a[64], b[64];
                pc_describe(a, sizeof a, g, e->dtype);
                pc_describe(b, sizeof b, exp, e->dtype);
                fprintf(stderr, "ring_perf: rank %d: %s %zu B: wrong element %zu = %s, expected %s\n", g_rank,
                        what, bytes, (size_t)(base + k), a, b);
                (*reported)++;
            }
            wrong++;
        }
    }
    return wrong;
}

/* ---------------------------------------------------------------------------------------- */
/* Running one collective                                                                    */

typedef struct {
    pc_coll_t coll;
    pc_algo_t algo;
    size_t count; /* the count argument */
    ring_dtype_t dtype;
    ring_op_t op;
    size_t esize;
    int root, async;
    const void *send;
    void *recv;
} call_t;

static void run_once(const call_t *c)
{
    ring_request_t *req = NULL;
    ring_result_t r = RING_OK;
    const char *what = pc_coll_name(c->coll);
    if (c->algo == PC_ALGO_PS) {
        ps_allreduce(c->send, c->recv, c->count, c->dtype, c->op, c->esize);
        return;
    }
    if (c->async) {
        switch (c->coll) {
        case PC_COLL_ALLREDUCE:
            r = ring_allreduce_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req);
            break;
        case PC_COLL_REDUCE_SCATTER:
            r = ring_reduce_scatter_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req);
            break;
        case PC_COLL_ALLGATHER: r = ring_allgather_async(g_comm, c->send, c->recv, c->count, c->dtype, &req); break;
        case PC_COLL_BROADCAST: r = ring_broadcast_async(g_comm, c->recv, c->count, c->dtype, c->root, &req); break;
        case PC_COLL_BARRIER: r = ring_barrier_async(g_comm, &req); break;
        default: break;
        }
        if (r != RING_OK) die_call(what, r);
        r = ring_wait(req);
        if (r != RING_OK) die_call("ring_wait", r);
        return;
    }
    switch (c->coll) {
    case PC_COLL_ALLREDUCE: r = ring_allreduce(g_comm, c->send, c->recv, c->count, c->dtype, c->op); break;
    case PC_COLL_REDUCE_SCATTER:
        r = ring_reduce_scatter(g_comm, c->send, c->recv, c->count, c->dtype, c->op);
        break;
    case PC_COLL_ALLGATHER: r = ring_allgather(g_comm, c->send, c->recv, c->count, c->dtype); break;
    case PC_COLL_BROADCAST: r = ring_broadcast(g_comm, c->recv, c->count, c->dtype, c->root); break;
    case PC_COLL_BARRIER: r = ring_barrier(g_comm); break;
    default: break;
    }
    if (r != RING_OK) die_call(what, r);
}

/* Median over iterations of the max over ranks of each iteration's time (us). */
static double timed_loop(const call_t *c, int warmup, int iters, double *t)
{
    for (int k = 0; k < warmup; k++) run_once(c);
    CALL("ring_barrier", ring_barrier(g_comm));
    for (int k = 0; k < iters; k++) {
        double t0 = pc_now_us();
        run_once(c);
        t[k] = pc_now_us() - t0;
    }
    CALL("ring_allreduce (timing max)", ring_allreduce(g_comm, t, t, (size_t)iters, RING_FLOAT64, RING_MAX));
    return pc_median(t, iters);
}

/* ---------------------------------------------------------------------------------------- */

static FILE *g_info; /* where the # lines go: stdout, or stderr with --csv/--json */

static const char *algos_name(unsigned algos)
{
    if (algos == (PC_ALGO_BIT(PC_ALGO_RING) | PC_ALGO_BIT(PC_ALGO_PS))) return "both";
    return algos == PC_ALGO_BIT(PC_ALGO_PS) ? "ps" : "ring";
}

static void library_string(char *s, size_t n)
{
    int v = ring_version();
    snprintf(s, n, "ringcomm %d.%d.%d (header %d.%d.%d)", v / 10000, v / 100 % 100, v % 100, RING_VERSION_MAJOR,
             RING_VERSION_MINOR, RING_VERSION_PATCH);
}

static void print_header(int argc, char **argv, const opts_t *o, const pc_link_t *link)
{
    FILE *f = g_info;
    pc_print_cmdline(f, "ring_perf", argc, argv);
    char host[256] = "?", lib[128];
    gethostname(host, sizeof host - 1);
    fprintf(f,
            "# nranks %d  host %s  collective %s  algo %s  dtype %s  op %s  root %d  in-place %d  async %d  "
            "check %d  memory host%s\n",
            g_nranks, host, pc_coll_name(o->coll), algos_name(o->pc.algos), pc_dtype_name(o->pc.dtype),
            pc_op_name(o->pc.op), o->root, o->pc.inplace, o->async, o->pc.check, o->reg ? " (registered)" : "");
    pc_print_sweep(f, &o->pc);
    library_string(lib, sizeof lib);
    fprintf(f, "# %s\n", lib);
    static const char *const knobs[] = {"RING_NSOCKS",        "RING_CHUNK_BYTES",   "RING_PIPELINE_DEPTH",
                                        "RING_SOCKBUF_BYTES", "RING_SOCKET_IFNAME", "RING_ALGO",
                                        "RING_RD_MAX_BYTES",  "RING_TREE_MAX_BYTES", "RING_TRANSPORT",
                                        "RING_SHM_DIR"};
    int any = 0;
    fprintf(f, "# env:");
    for (size_t k = 0; k < sizeof knobs / sizeof *knobs; k++) {
        const char *s = getenv(knobs[k]);
        if (s) {
            fprintf(f, " %s=%s", knobs[k], s);
            any = 1;
        }
    }
    fprintf(f, "%s\n", any ? "" : " (RING_NSOCKS, RING_CHUNK_BYTES, RING_PIPELINE_DEPTH unset: library defaults)");
    if (g_nranks > 1)
        fprintf(f, "# transport (rank 0's ring edges): from the left %s, to the right %s%s\n",
                ring__tp_of(g_comm->recv_left)->name, ring__tp_of(g_comm->send_right)->name,
                g_comm->all_shm ? " (every ring edge within one host)" : "");
    pc_print_date(f);
    pc_print_link(f, link);
    fprintf(f, "# time: median over iterations of the max over ranks; bytes = full buffer; busbw factor ");
    switch (o->coll) {
    case PC_COLL_ALLREDUCE: fprintf(f, "2(n-1)/n\n"); break;
    case PC_COLL_REDUCE_SCATTER:
    case PC_COLL_ALLGATHER: fprintf(f, "(n-1)/n\n"); break;
    case PC_COLL_BROADCAST: fprintf(f, "1\n"); break;
    default: fprintf(f, "0 (barrier)\n"); break;
    }
    if (o->pc.algos & PC_ALGO_BIT(PC_ALGO_RING)) {
        /* Which of the library's algorithms the rows can show, and each one's model. */
        const ring__params_t *p = &g_comm->params;
        int ring = 1, rd = 0, tree = 0, rh = 0;
        if (o->coll == PC_COLL_ALLREDUCE) {
            ring = p->algo == RING__ALGO_AUTO || p->algo == RING__ALGO_RING;
            rd = p->algo == RING__ALGO_AUTO || p->algo == RING__ALGO_RD;
            rh = p->algo == RING__ALGO_AUTO || p->algo == RING__ALGO_RH;
        } else if (o->coll == PC_COLL_BARRIER) {
            ring = p->algo == RING__ALGO_RING;
            rd = !ring;
        } else if (o->coll == PC_COLL_BROADCAST) {
            tree = p->algo != RING__ALGO_RING && (p->algo == RING__ALGO_RD || g_comm->nranks >= 4);
            ring = p->algo != RING__ALGO_RD;
        }
        if (o->coll == PC_COLL_ALLREDUCE && p->algo == RING__ALGO_AUTO)
            fprintf(f, "# library algorithm: rd (recursive doubling) up to %zu B, rh (recursive halving) up to %zu B, ring above "
                       "(RING_ALGO, RING_RD_MAX_BYTES%s, RING_RH_MAX_BYTES%s)\n",
                    ring__rd_max_bytes(g_comm), ring__rh_max_bytes(g_comm),
                    p->rd_max_set ? "" : g_comm->nranks <= 2 ? ": default for 2 ranks" : ": default for 3+ ranks",
                    p->rh_max_set ? "" : g_comm->all_shm ? ": shared-memory default" : ": TCP default");
        if (o->coll == PC_COLL_BROADCAST && p->algo == RING__ALGO_AUTO && tree)
            fprintf(f, "# library algorithm: tree (binomial) up to %zu B, ring above (RING_ALGO, RING_TREE_MAX_BYTES)\n",
                    p->tree_max_bytes);
        if (ring)
            fprintf(f, "# model (ring): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_RING));
        if (rd) fprintf(f, "# model (rd): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_RD));
        if (rh) fprintf(f, "# model (rh): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_RH));
        if (tree) fprintf(f, "# model (tree): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_TREE));
    }
    if (o->pc.algos & PC_ALGO_BIT(PC_ALGO_PS))
        fprintf(f, "# model (ps): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_PS));
    if (o->pc.fmt == PC_FMT_JSON) {
        pc_meta_t m = {.program = "ring_perf",
                       .collective = pc_coll_name(o->coll),
                       .algos = algos_name(o->pc.algos),
                       .dtype = o->coll == PC_COLL_BARRIER ? "none" : pc_dtype_name(o->pc.dtype),
                       .op = (o->coll == PC_COLL_ALLREDUCE || o->coll == PC_COLL_REDUCE_SCATTER)
                                 ? pc_op_name(o->pc.op)
                                 : "none",
                       .mem = "host",
                       .host = host,
                       .library = lib,
                       .nranks = g_nranks,
                       .root = o->coll == PC_COLL_BROADCAST ? o->root : -1,
                       .inplace = o->pc.inplace,
                       .async = o->async,
                       .check = o->pc.check,
                       .opts = &o->pc,
                       .link = link,
                       .argc = argc,
                       .argv = argv};
        pc_json_begin(&m);
    } else if (o->pc.fmt == PC_FMT_CSV) {
        pc_print_columns(PC_FMT_CSV);
    }
    fflush(f);
}

/* The state of one sweep that every table shares. */
typedef struct {
    const opts_t *o;
    const pc_link_t *link;
    pc_out_t *out;
    const pc_gen_t *gen;
    unsigned char *sbuf, *rbuf;
    double *times;
} sweep_t;

/* One table: every size for one algorithm. Returns the number of wrong elements. */
static long long sweep(const sweep_t *sw, pc_algo_t algo)
{
    const opts_t *o = sw->o;
    const int n = g_nranks, is_root = g_rank == 0;
    const pc_dtype_t dt = o->pc.dtype;
    const size_t sz = pc_dtype_size(dt);
    const ring_dtype_t rdt = ring_dtypes[dt];
    const ring_op_t rop = ring_ops[o->pc.op];
    const int has_op = o->coll == PC_COLL_ALLREDUCE || o->coll == PC_COLL_REDUCE_SCATTER;
    const int inplace = o->pc.inplace;
    const double busfac = pc_busbw_factor(o->coll, n);
    const pc_gen_t *gen = sw->gen;
    unsigned char *sbuf = sw->sbuf, *rbuf = sw->rbuf;
    pc_row_t row = {.coll = pc_coll_name(o->coll),
                    .algo = pc_algo_name(algo),
                    .type = o->coll == PC_COLL_BARRIER ? "none" : pc_dtype_name(dt),
                    .redop = has_op ? pc_op_name(o->pc.op) : "none",
                    .nranks = n,
                    .root = o->coll == PC_COLL_BROADCAST ? o->root : -1,
                    .inplace = inplace,
                    .link = sw->link};
    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;

    if (is_root && o->pc.fmt == PC_FMT_TABLE) {
        if (algo == PC_ALGO_PS)
            fprintf(stdout, "#\n# %s, parameter-server baseline: all to rank 0, reduce there, result back to all\n",
                    row.coll);
        else fprintf(stdout, "#\n# %s, ringcomm\n", row.coll);
        pc_print_columns(PC_FMT_TABLE);
    }

    if (o->coll == PC_COLL_BARRIER) {
        call_t c = {PC_COLL_BARRIER, algo, 0, rdt, rop, sz, 0, o->async, NULL, NULL};
        const pc_algo_t ran = lib_algo(o->coll, 0);
        CALL("ring_barrier", ring_barrier(g_comm));
        row.us = timed_loop(&c, o->pc.warmup, o->pc.iters, sw->times);
        row.algo = pc_algo_name(ran);
        row.model_us = pc_model_us(o->coll, ran, n, 0, sw->link->alpha_s, sw->link->bw_Bps);
        row.wrong = -1;
        if (is_root) pc_print_row(sw->out, &row);
        rows = 1;
    } else {
        for (size_t size = o->pc.minb; size <= o->pc.maxb;) {
            /* Round down to what the count can express. */
            size_t count, bytes;
            if (o->coll == PC_COLL_REDUCE_SCATTER || o->coll == PC_COLL_ALLGATHER) {
                count = size / sz / (size_t)n;
                bytes = count * (size_t)n * sz;
            } else {
                count = size / sz;
                bytes = count * sz;
            }
            if (count > 0 && bytes != last_bytes) {
                last_bytes = bytes;
                call_t c = {o->coll, algo, count, rdt, rop, sz, o->root, o->async, NULL, NULL};
                switch (o->coll) {
                case PC_COLL_ALLREDUCE: c.send = sbuf; c.recv = inplace ? sbuf : rbuf; break;
                case PC_COLL_REDUCE_SCATTER:
                    c.send = sbuf;
                    c.recv = inplace ? sbuf + (size_t)g_rank * count * sz : rbuf;
                    break;
                case PC_COLL_ALLGATHER:
                    c.recv = rbuf;
                    c.send = inplace ? rbuf + (size_t)g_rank * count * sz : sbuf;
                    break;
                case PC_COLL_BROADCAST: c.recv = rbuf; break;
                default: break;
                }
                /* The library's rows: the algorithm it picks for this size, and that one's model. */
                const pc_algo_t ran = algo == PC_ALGO_PS ? PC_ALGO_PS : lib_algo(o->coll, bytes);
                CALL("ring_barrier", ring_barrier(g_comm));
                double us = timed_loop(&c, o->pc.warmup, o->pc.iters, sw->times);
                double algbw = (double)bytes / (us * 1e3);
                double busbw = algbw * busfac;

                long long wrong = -1;
                if (o->pc.check) {
                    long long w = 0;
                    size_t reported = 0;
                    expect_t e = {dt, o->pc.op, gen, 1, 0};
                    char what[64];
                    snprintf(what, sizeof what, "%s (%s)", row.coll, pc_algo_name(ran));
                    /* Fresh inputs; outputs preset to 0xff bytes (NaN for floating types). */
                    switch (o->coll) {
                    case PC_COLL_ALLREDUCE:
                        pc_fill(sbuf, count, dt, gen, g_rank, 0);
                        if (!inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, 0, &e, &reported, what, bytes);
                        break;
                    case PC_COLL_REDUCE_SCATTER:
                        pc_fill(sbuf, count * n, dt, gen, g_rank, 0);
                        if (!inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, (uint64_t)g_rank * count, &e, &reported, what, bytes);
                        break;
                    case PC_COLL_ALLGATHER:
                        /* Rank q contributes val(q, q*count + j). */
                        memset(rbuf, 0xff, count * n * sz);
                        pc_fill((void *)c.send, count, dt, gen, g_rank, (uint64_t)g_rank * count);
                        run_once(&c);
                        e.reduce = 0;
                        for (int q = 0; q < n; q++) {
                            e.src = q;
                            w += check_range(rbuf + (size_t)q * count * sz, count, (uint64_t)q * count, &e,
                                             &reported, what, bytes);
                        }
                        break;
                    case PC_COLL_BROADCAST:
                        if (g_rank == o->root) pc_fill(rbuf, count, dt, gen, g_rank, 0);
                        else memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        e.reduce = 0;
                        e.src = o->root;
                        w = check_range(rbuf, count, 0, &e, &reported, what, bytes);
                        break;
                    default: break;
                    }
                    int64_t w64 = w;
                    CALL("ring_allreduce (#wrong)", ring_allreduce(g_comm, &w64, &w64, 1, RING_INT64, RING_SUM));
                    wrong = (long long)w64;
                    wrong_total += wrong;
                }
                row.bytes = bytes;
                row.count = count;
                row.us = us;
                row.algbw = algbw;
                row.busbw = busbw;
                row.wrong = wrong;
                row.algo = pc_algo_name(ran);
                row.model_us = pc_model_us(o->coll, ran, n, bytes, sw->link->alpha_s, sw->link->bw_Bps);
                if (is_root) pc_print_row(sw->out, &row);
                bw_sum += busbw;
                rows++;
            }
            if (!pc_next_size(&size, o->pc.factor, o->pc.incr)) break;
        }
    }
    if (is_root) {
        const char *label = o->pc.algos == PC_ALGO_BIT(algo) ? NULL : pc_algo_name(algo);
        pc_print_footer(g_info, label, wrong_total, bw_sum, rows);
    }
    return wrong_total;
}

int main(int argc, char **argv)
{
    opts_t o = {.coll = PC_COLL_ALLREDUCE, .root = 0, .async = 0};
    pc_opts_init(&o.pc, 1, PC_OP_COUNT);
    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT, PC_LONGOPTS_PROBE,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "C:A:G:b:e:f:i:n:w:c:d:o:r:I:a:R:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'C':
            if (pc_parse_coll(optarg, &o.coll)) bad_arg(argv[0], "unknown collective", optarg);
            break;
        case 'a': if (pc_parse_int(optarg, 0, 1, &o.async)) bad_arg(argv[0], "-a needs 0 or 1", optarg); break;
        case 'R': if (pc_parse_int(optarg, 0, 1, &o.reg)) bad_arg(argv[0], "-R needs 0 or 1", optarg); break;
        case 'r': if (pc_parse_int(optarg, 0, 1 << 20, &o.root)) bad_arg(argv[0], "bad root for -r", optarg); break;
        case 'h': usage(stdout, argv[0]); return 0;
        default:
            switch (pc_parse_opt(&o.pc, ch, optarg, &err)) {
            case 1: break;
            case -1: bad_arg(argv[0], err, optarg); break;
            default: usage(stderr, argv[0]); return 2;
            }
        }
    }
    if (optind < argc) bad_arg(argv[0], "unexpected argument", argv[optind]);
    if (o.pc.minb > o.pc.maxb) {
        fprintf(stderr, "ring_perf: -b %zu is larger than -e %zu\n", o.pc.minb, o.pc.maxb);
        return 2;
    }
    /* The library takes device buffers in allreduce (docs/cuda.md), but this tool does not
     * allocate them yet: say so instead of measuring host memory. */
    if (o.pc.mem == PC_MEM_CUDA)
        bad_combination("-G cuda: ring_perf does not allocate device buffers yet (docs/cuda.md)");
    if ((o.pc.algos & PC_ALGO_BIT(PC_ALGO_PS)) && o.coll != PC_COLL_ALLREDUCE)
        bad_combination("-A ps/both: the parameter-server baseline is an allreduce (use -C allreduce)");

    ring_result_t r = ring_comm_init_env(&g_comm);
    if (r != RING_OK) {
        fprintf(stderr, "ring_perf: ring_comm_init_env failed: %s (%s): %s\n", ring_strerror(r), ring_result_name(r),
                ring_comm_last_error(g_comm ? g_comm : NULL));
        ring_comm_destroy(g_comm);
        return 2;
    }
    g_rank = ring_comm_rank(g_comm);
    g_nranks = ring_comm_nranks(g_comm);
    const int n = g_nranks;
    if (o.coll == PC_COLL_BROADCAST && o.root >= n) {
        if (g_rank == 0) fprintf(stderr, "ring_perf: -r %d: root must be < nranks (%d)\n", o.root, n);
        ring_comm_destroy(g_comm);
        return 2;
    }
    const pc_dtype_t dt = o.pc.dtype;
    /* allgather/broadcast only copy: their data is the [-100, 100] range. */
    const int kind = (o.coll == PC_COLL_ALLGATHER || o.coll == PC_COLL_BROADCAST) ? PC_GEN_RANGE : pc_gen_kind(o.pc.op);
    const pc_gen_t gen = pc_gen(kind, dt, n);

    const int is_root = g_rank == 0;
    g_info = o.pc.fmt == PC_FMT_TABLE ? stdout : stderr;
    const size_t sz = pc_dtype_size(dt);
    const int inplace = o.pc.inplace;

    /* Buffers, once, at the largest size. */
    size_t maxcount = o.pc.maxb / sz;          /* elements in the full buffer */
    size_t maxper = maxcount / (size_t)n;      /* per-rank elements (reduce_scatter/allgather) */
    size_t send_bytes = 0, recv_bytes = 0;
    switch (o.coll) {
    case PC_COLL_ALLREDUCE: send_bytes = maxcount * sz; recv_bytes = inplace ? 0 : maxcount * sz; break;
    case PC_COLL_REDUCE_SCATTER: send_bytes = maxper * n * sz; recv_bytes = inplace ? 0 : maxper * sz; break;
    case PC_COLL_ALLGATHER: send_bytes = inplace ? 0 : maxper * sz; recv_bytes = maxper * n * sz; break;
    case PC_COLL_BROADCAST: recv_bytes = maxcount * sz; break;
    default: break;
    }

    /* Probes and connections before any buffer of the sweep exists: they use memory of their own. */
    const pc_link_t link = model_params(&o.pc);
    if (o.pc.algos & PC_ALGO_BIT(PC_ALGO_PS)) ps_setup(maxcount * sz);

    if (is_root) print_header(argc, argv, &o, &link);
    if (is_root && pc_gen_inexact(&gen, dt, n))
        fprintf(g_info, "# warning: %d ranks are too many for exact %s sums; checks may report errors\n", n,
                pc_dtype_name(dt));

    unsigned char *sbuf = alloc_buf(send_bytes), *rbuf = alloc_buf(recv_bytes);
    double *times = malloc(sizeof(double) * (size_t)o.pc.iters);
    if (!times) die_msg("out of memory");
    ring_reg_t *regs[2] = {NULL, NULL};
    for (int i = 0; i < 2 && o.reg; i++) {
        void *b = i ? (void *)rbuf : (void *)sbuf;
        size_t nb = i ? recv_bytes : send_bytes;
        if (!b || !nb) continue;
        r = ring_comm_register(g_comm, b, nb, &regs[i]);
        if (r != RING_OK) {
            fprintf(stderr, "ring_perf: rank %d: ring_comm_register failed: %s (%s): %s\n", g_rank, ring_strerror(r),
                    ring_result_name(r), ring_comm_last_error(g_comm));
            return 2;
        }
    }
    /* Initial data: the check pattern (valid for out-of-place allreduce/reduce_scatter at any size). */
    if (o.coll == PC_COLL_ALLREDUCE || o.coll == PC_COLL_REDUCE_SCATTER)
        pc_fill(sbuf, send_bytes / sz, dt, &gen, g_rank, 0);
    else if (o.coll == PC_COLL_BROADCAST) pc_fill(rbuf, maxcount, dt, &gen, g_rank, 0);
    else if (o.coll == PC_COLL_ALLGATHER) {
        if (inplace) pc_fill(rbuf, maxper * n, dt, &gen, g_rank, 0);
        else pc_fill(sbuf, maxper, dt, &gen, g_rank, 0);
    }

    pc_out_t out = {o.pc.fmt, 0};
    sweep_t sw = {&o, &link, &out, &gen, sbuf, rbuf, times};
    long long wrong_total = 0;
    for (int a = 0; a < PC_ALGO_COUNT; a++)
        if (o.pc.algos & PC_ALGO_BIT(a)) wrong_total += sweep(&sw, (pc_algo_t)a);
    if (is_root && o.pc.fmt == PC_FMT_JSON) pc_json_end(wrong_total);

    for (int i = 0; i < 2; i++)
        if (regs[i] && ring_comm_deregister(g_comm, regs[i]) != RING_OK)
            fprintf(stderr, "ring_perf: rank %d: ring_comm_deregister: %s\n", g_rank, ring_comm_last_error(g_comm));
    free(times);
    free(sbuf);
    free(rbuf);
    ps_free();
    r = ring_comm_destroy(g_comm);
    if (r != RING_OK) {
        fprintf(stderr, "ring_perf: rank %d: ring_comm_destroy failed: %s (%s)\n", g_rank, ring_strerror(r),
                ring_result_name(r));
        return 2;
    }
    return wrong_total ? 1 : 0;
}
