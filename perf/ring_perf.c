/*
 * ring_perf: bandwidth/latency sweep of the ringcomm collectives, in the style of nccl-tests.
 *
 *   ringrun -n 4 build/perf/ring_perf -C allreduce -b 4 -e 256M -f 2 -d float -o sum
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
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_common.h"
#include "ringcomm.h"

typedef enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST, COLL_BARRIER } coll_t;

static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};

/* perf_common's dtypes and ops, as the library's. */
static const ring_dtype_t ring_dtypes[PC_DTYPE_COUNT] = {RING_INT8,    RING_UINT8,    RING_INT32,   RING_UINT32,
                                                         RING_INT64,   RING_UINT64,   RING_FLOAT16, RING_BFLOAT16,
                                                         RING_FLOAT32, RING_FLOAT64};
static const ring_op_t ring_ops[PC_OP_COUNT] = {RING_SUM, RING_PROD, RING_MIN, RING_MAX, RING_AVG};

typedef struct {
    pc_opts_t pc; /* sizes, iterations, check, in-place, csv, dtype, op */
    coll_t coll;
    int root, async;
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

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]   (run under ringrun: every rank runs it)\n"
            "  -C coll    allreduce|reduce_scatter|allgather|broadcast|barrier (default allreduce)\n"
            PC_USAGE_SWEEP
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16 float|float32\n"
            "             double|float64 (default float)\n"
            "  -o op      sum prod min max avg (default sum)\n"
            "  -r root    broadcast root (default 0)\n"
            "  -I 0|1     in-place (default 0)\n"
            "  -a 0|1     use the _async API followed by ring_wait (default 0)\n"
            "  --csv      machine-readable rows on stdout (the # lines go to stderr)\n"
            "  -h         this help\n",
            argv0);
}

static void bad_arg(const char *argv0, const char *msg, const char *val)
{
    /* Before init the rank is only known from the launcher: let one rank print the usage. */
    const char *r = getenv("RING_RANK");
    if (!r || strcmp(r, "0") == 0) {
        fprintf(stderr, "ring_perf: %s: '%s'\n", msg, val);
        usage(stderr, argv0);
    }
    exit(2);
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
    coll_t coll;
    size_t count; /* the count argument */
    ring_dtype_t dtype;
    ring_op_t op;
    int root, async;
    const void *send;
    void *recv;
} call_t;

static void run_once(const call_t *c)
{
    ring_request_t *req = NULL;
    ring_result_t r = RING_OK;
    const char *what = coll_names[c->coll];
    if (c->async) {
        switch (c->coll) {
        case COLL_ALLREDUCE: r = ring_allreduce_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req); break;
        case COLL_REDUCE_SCATTER:
            r = ring_reduce_scatter_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req);
            break;
        case COLL_ALLGATHER: r = ring_allgather_async(g_comm, c->send, c->recv, c->count, c->dtype, &req); break;
        case COLL_BROADCAST: r = ring_broadcast_async(g_comm, c->recv, c->count, c->dtype, c->root, &req); break;
        case COLL_BARRIER: r = ring_barrier_async(g_comm, &req); break;
        }
        if (r != RING_OK) die_call(what, r);
        r = ring_wait(req);
        if (r != RING_OK) die_call("ring_wait", r);
        return;
    }
    switch (c->coll) {
    case COLL_ALLREDUCE: r = ring_allreduce(g_comm, c->send, c->recv, c->count, c->dtype, c->op); break;
    case COLL_REDUCE_SCATTER: r = ring_reduce_scatter(g_comm, c->send, c->recv, c->count, c->dtype, c->op); break;
    case COLL_ALLGATHER: r = ring_allgather(g_comm, c->send, c->recv, c->count, c->dtype); break;
    case COLL_BROADCAST: r = ring_broadcast(g_comm, c->recv, c->count, c->dtype, c->root); break;
    case COLL_BARRIER: r = ring_barrier(g_comm); break;
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

/* ---------------------------------------------------------------------------------------- */

static FILE *g_info; /* where the # lines go: stdout, or stderr with --csv */

static void print_header(int argc, char **argv, const opts_t *o)
{
    FILE *f = g_info;
    pc_print_cmdline(f, "ring_perf", argc, argv);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fprintf(f, "# nranks %d  host %s  collective %s  dtype %s  op %s  root %d  in-place %d  async %d  check %d\n",
            g_nranks, host, coll_names[o->coll], pc_dtype_name(o->pc.dtype), pc_op_name(o->pc.op), o->root,
            o->pc.inplace, o->async, o->pc.check);
    pc_print_sweep(f, &o->pc);
    int v = ring_version();
    fprintf(f, "# ringcomm %d.%d.%d (header %d.%d.%d)\n", v / 10000, v / 100 % 100, v % 100, RING_VERSION_MAJOR,
            RING_VERSION_MINOR, RING_VERSION_PATCH);
    static const char *const knobs[] = {"RING_NSOCKS", "RING_CHUNK_BYTES", "RING_PIPELINE_DEPTH",
                                        "RING_SOCKBUF_BYTES", "RING_SOCKET_IFNAME"};
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
    pc_print_date(f);
    fprintf(f, "# time: median over iterations of the max over ranks; bytes = full buffer; busbw factor ");
    switch (o->coll) {
    case COLL_ALLREDUCE: fprintf(f, "2(n-1)/n\n"); break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: fprintf(f, "(n-1)/n\n"); break;
    case COLL_BROADCAST: fprintf(f, "1\n"); break;
    case COLL_BARRIER: fprintf(f, "0 (barrier)\n"); break;
    }
    pc_print_columns(o->pc.csv);
    fflush(f);
}

static void print_row(const opts_t *o, size_t bytes, size_t count, const char *type, const char *redop, int root,
                      double us, double algbw, double busbw, long long wrong)
{
    pc_print_row(o->pc.csv, coll_names[o->coll], g_nranks, bytes, count, type, redop, root, o->pc.inplace, us,
                 algbw, busbw, wrong);
}

int main(int argc, char **argv)
{
    opts_t o = {.coll = COLL_ALLREDUCE, .root = 0, .async = 0};
    pc_opts_init(&o.pc, 1, PC_OP_COUNT);
    static const struct option longopts[] = {{"csv", no_argument, NULL, PC_OPT_CSV},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "C:b:e:f:i:n:w:c:d:o:r:I:a:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'C': {
            size_t k;
            for (k = 0; k < sizeof coll_names / sizeof *coll_names; k++)
                if (strcmp(optarg, coll_names[k]) == 0) break;
            if (k == sizeof coll_names / sizeof *coll_names) {
                if (strcmp(optarg, "reducescatter") == 0) k = COLL_REDUCE_SCATTER;
                else if (strcmp(optarg, "all_reduce") == 0) k = COLL_ALLREDUCE;
                else if (strcmp(optarg, "all_gather") == 0) k = COLL_ALLGATHER;
                else bad_arg(argv[0], "unknown collective", optarg);
            }
            o.coll = (coll_t)k;
            break;
        }
        case 'a': if (pc_parse_int(optarg, 0, 1, &o.async)) bad_arg(argv[0], "-a needs 0 or 1", optarg); break;
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
    if (o.coll == COLL_BROADCAST && o.root >= n) {
        if (g_rank == 0) fprintf(stderr, "ring_perf: -r %d: root must be < nranks (%d)\n", o.root, n);
        ring_comm_destroy(g_comm);
        return 2;
    }
    const pc_dtype_t dt = o.pc.dtype;
    const ring_dtype_t rdt = ring_dtypes[dt];
    const ring_op_t rop = ring_ops[o.pc.op];
    /* allgather/broadcast only copy: their data is the [-100, 100] range. */
    const int kind = (o.coll == COLL_ALLGATHER || o.coll == COLL_BROADCAST) ? PC_GEN_RANGE : pc_gen_kind(o.pc.op);
    const pc_gen_t gen = pc_gen(kind, dt, n);

    const int is_root = g_rank == 0;
    g_info = o.pc.csv ? stderr : stdout;
    const size_t sz = pc_dtype_size(dt);
    const int has_op = o.coll == COLL_ALLREDUCE || o.coll == COLL_REDUCE_SCATTER;
    const char *type_s = o.coll == COLL_BARRIER ? "none" : pc_dtype_name(dt);
    const char *redop_s = has_op ? pc_op_name(o.pc.op) : "none";
    const int root_col = o.coll == COLL_BROADCAST ? o.root : -1;
    const int inplace = o.pc.inplace;
    double busfac = 0;
    switch (o.coll) {
    case COLL_ALLREDUCE: busfac = 2.0 * (n - 1) / n; break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: busfac = (double)(n - 1) / n; break;
    case COLL_BROADCAST: busfac = 1; break;
    case COLL_BARRIER: busfac = 0; break;
    }

    if (is_root) print_header(argc, argv, &o);
    if (is_root && pc_gen_inexact(&gen, dt, n))
        fprintf(g_info, "# warning: %d ranks are too many for exact %s sums; checks may report errors\n", n,
                pc_dtype_name(dt));

    /* Buffers, once, at the largest size. */
    size_t maxcount = o.pc.maxb / sz;          /* elements in the full buffer */
    size_t maxper = maxcount / (size_t)n;      /* per-rank elements (reduce_scatter/allgather) */
    size_t send_bytes = 0, recv_bytes = 0;
    switch (o.coll) {
    case COLL_ALLREDUCE: send_bytes = maxcount * sz; recv_bytes = inplace ? 0 : maxcount * sz; break;
    case COLL_REDUCE_SCATTER: send_bytes = maxper * n * sz; recv_bytes = inplace ? 0 : maxper * sz; break;
    case COLL_ALLGATHER: send_bytes = inplace ? 0 : maxper * sz; recv_bytes = maxper * n * sz; break;
    case COLL_BROADCAST: recv_bytes = maxcount * sz; break;
    case COLL_BARRIER: break;
    }
    unsigned char *sbuf = alloc_buf(send_bytes), *rbuf = alloc_buf(recv_bytes);
    double *times = malloc(sizeof(double) * (size_t)o.pc.iters);
    if (!times) {
        fprintf(stderr, "ring_perf: out of memory\n");
        ring_comm_abort(g_comm);
        return 2;
    }
    /* Initial data: the check pattern (valid for out-of-place allreduce/reduce_scatter at any size). */
    if (o.coll == COLL_ALLREDUCE || o.coll == COLL_REDUCE_SCATTER) pc_fill(sbuf, send_bytes / sz, dt, &gen, g_rank, 0);
    else if (o.coll == COLL_BROADCAST) pc_fill(rbuf, maxcount, dt, &gen, g_rank, 0);
    else if (o.coll == COLL_ALLGATHER) {
        if (inplace) pc_fill(rbuf, maxper * n, dt, &gen, g_rank, 0);
        else pc_fill(sbuf, maxper, dt, &gen, g_rank, 0);
    }

    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;

    if (o.coll == COLL_BARRIER) {
        call_t c = {COLL_BARRIER, 0, rdt, rop, 0, o.async, NULL, NULL};
        CALL("ring_barrier", ring_barrier(g_comm));
        double us = timed_loop(&c, o.pc.warmup, o.pc.iters, times);
        if (is_root) print_row(&o, 0, 0, type_s, redop_s, -1, us, 0, 0, -1);
        rows = 1;
    } else {
        for (size_t size = o.pc.minb; size <= o.pc.maxb;) {
            /* Round down to what the count can express. */
            size_t count, bytes;
            if (o.coll == COLL_REDUCE_SCATTER || o.coll == COLL_ALLGATHER) {
                count = size / sz / (size_t)n;
                bytes = count * (size_t)n * sz;
            } else {
                count = size / sz;
                bytes = count * sz;
            }
            if (count > 0 && bytes != last_bytes) {
                last_bytes = bytes;
                call_t c = {o.coll, count, rdt, rop, o.root, o.async, NULL, NULL};
                switch (o.coll) {
                case COLL_ALLREDUCE: c.send = sbuf; c.recv = inplace ? sbuf : rbuf; break;
                case COLL_REDUCE_SCATTER:
                    c.send = sbuf;
                    c.recv = inplace ? sbuf + (size_t)g_rank * count * sz : rbuf;
                    break;
                case COLL_ALLGATHER:
                    c.recv = rbuf;
                    c.send = inplace ? rbuf + (size_t)g_rank * count * sz : sbuf;
                    break;
                case COLL_BROADCAST: c.recv = rbuf; break;
                case COLL_BARRIER: break;
                }
                CALL("ring_barrier", ring_barrier(g_comm));
                double us = timed_loop(&c, o.pc.warmup, o.pc.iters, times);
                double algbw = (double)bytes / (us * 1e3);
                double busbw = algbw * busfac;

                long long wrong = -1;
                if (o.pc.check) {
                    long long w = 0;
                    size_t reported = 0;
                    expect_t e = {dt, o.pc.op, &gen, 1, 0};
                    /* Fresh inputs; outputs preset to 0xff bytes (NaN for floating types). */
                    switch (o.coll) {
                    case COLL_ALLREDUCE:
                        pc_fill(sbuf, count, dt, &gen, g_rank, 0);
                        if (!inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, 0, &e, &reported, coll_names[o.coll], bytes);
                        break;
                    case COLL_REDUCE_SCATTER:
                        pc_fill(sbuf, count * n, dt, &gen, g_rank, 0);
                        if (!inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, (uint64_t)g_rank * count, &e, &reported, coll_names[o.coll],
                                        bytes);
                        break;
                    case COLL_ALLGATHER:
                        /* Rank q contributes val(q, q*count + j). */
                        memset(rbuf, 0xff, count * n * sz);
                        pc_fill((void *)c.send, count, dt, &gen, g_rank, (uint64_t)g_rank * count);
                        run_once(&c);
                        e.reduce = 0;
                        for (int q = 0; q < n; q++) {
                            e.src = q;
                            w += check_range(rbuf + (size_t)q * count * sz, count, (uint64_t)q * count, &e,
                                             &reported, coll_names[o.coll], bytes);
                        }
                        break;
                    case COLL_BROADCAST:
                        if (g_rank == o.root) pc_fill(rbuf, count, dt, &gen, g_rank, 0);
                        else memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        e.reduce = 0;
                        e.src = o.root;
                        w = check_range(rbuf, count, 0, &e, &reported, coll_names[o.coll], bytes);
                        break;
                    case COLL_BARRIER: break;
                    }
                    int64_t w64 = w;
                    CALL("ring_allreduce (#wrong)", ring_allreduce(g_comm, &w64, &w64, 1, RING_INT64, RING_SUM));
                    wrong = (long long)w64;
                    wrong_total += wrong;
                }
                if (is_root) print_row(&o, bytes, count, type_s, redop_s, root_col, us, algbw, busbw, wrong);
                bw_sum += busbw;
                rows++;
            }
            if (!pc_next_size(&size, o.pc.factor, o.pc.incr)) break;
        }
    }

    if (is_root) pc_print_footer(g_info, wrong_total, bw_sum, rows);
    free(times);
    free(sbuf);
    free(rbuf);
    r = ring_comm_destroy(g_comm);
    if (r != RING_OK) {
        fprintf(stderr, "ring_perf: rank %d: ring_comm_destroy failed: %s (%s)\n", g_rank, ring_strerror(r),
                ring_result_name(r));
        return 2;
    }
    return wrong_total ? 1 : 0;
}
