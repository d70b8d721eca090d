/*
 * mpi_allreduce: the ring_perf allreduce measurement, done with MPI_Allreduce, so that the two
 * tables compare line by line (same sizes, same rounding, same timing rule, same row format,
 * same busbw = algbw * 2(n-1)/n).
 *
 *   mpirun -np 4 build/perf/mpi_allreduce -b 4 -e 64M -f 2 -d float
 *
 * Per size: MPI_Barrier, -w warm-up calls, -n timed calls each timed with CLOCK_MONOTONIC; the
 * reported time is the median over iterations of the max over ranks (MPI_Allreduce MAX, outside
 * the timed region). With -c 1 the result of one more call on fresh check data is compared with
 * an independently computed exact value on every rank. Rank 0 prints.
 *
 * The rows have ring_perf's columns; algo is "mpi". Given --alpha-us and --link-gbps, model(us)
 * and eff compare each row with the ring allreduce model 2(n-1) alpha + 2(n-1)/n S/B (the
 * bandwidth optimum, whatever algorithm Open MPI picks); this program does not probe the links
 * itself (use the values ring_perf measured on the same machines).
 */
#include <mpi.h>

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../perf_common.h"

static int g_rank, g_nranks;

static MPI_Datatype mpi_type(pc_dtype_t t)
{
    switch (t) {
    case PC_INT8: return MPI_INT8_T;
    case PC_UINT8: return MPI_UINT8_T;
    case PC_INT32: return MPI_INT32_T;
    case PC_UINT32: return MPI_UINT32_T;
    case PC_INT64: return MPI_INT64_T;
    case PC_UINT64: return MPI_UINT64_T;
    case PC_FLOAT32: return MPI_FLOAT;
    default: return MPI_DOUBLE;
    }
}

static MPI_Op mpi_op(pc_op_t o)
{
    switch (o) {
    case PC_SUM: return MPI_SUM;
    case PC_PROD: return MPI_PROD;
    case PC_MIN: return MPI_MIN;
    default: return MPI_MAX;
    }
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: mpirun -np N %s [options]\n"
            PC_USAGE_SWEEP
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 float|float32 double|float64 (default float)\n"
            "  -o op      sum prod min max (default sum)\n"
            "  -I 0|1     in-place (MPI_IN_PLACE, default 0)\n"
            PC_USAGE_OUTPUT
            "  -h         this help\n",
            argv0);
}

static void bad_arg(const char *argv0, const char *msg, const char *val)
{
    if (g_rank == 0) {
        if (val) fprintf(stderr, "mpi_allreduce: %s: '%s'\n", msg, val);
        else fprintf(stderr, "mpi_allreduce: %s\n", msg);
        usage(stderr, argv0);
    }
    MPI_Finalize();
    exit(2);
}

/* Check data: the same generator and expected values as ring_perf (perf_common).
 * Integer arithmetic wraps through uint64 (MPI leaves integer overflow undefined; the
 * generator keeps int8 sums in range for up to 31 ranks). Note: Open MPI 4.1.4's op/avx
 * component saturates uint8 sums for longer vectors, so "-d uint8 -o sum" reports wrong
 * elements there unless run with "--mca op ^avx". */
static long long check(const void *got, size_t n, pc_dtype_t t, pc_op_t op, const pc_gen_t *gen)
{
    size_t sz = pc_dtype_size(t);
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        pc_expect_reduce(exp, t, op, gen, g_nranks, k);
        if (!pc_same((const unsigned char *)got + k * sz, exp, t)) {
            if (wrong < 5)
                fprintf(stderr, "mpi_allreduce: rank %d: %zu elements: wrong element %zu\n", g_rank, n, k);
            wrong++;
        }
    }
    return wrong;
}

static void *alloc_buf(size_t bytes)
{
    size_t n;
    void *p = pc_alloc_buf(bytes, &n);
    if (!p) {
        fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void call(const void *s, void *r, size_t count, pc_dtype_t t, pc_op_t op)
{
    int rc = MPI_Allreduce(s, r, (int)count, mpi_type(t), mpi_op(op), MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpi_allreduce: rank %d: MPI_Allreduce failed: %s\n", g_rank, msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv)
{
    pc_opts_t o;
    pc_opts_init(&o, 0, PC_AVG); /* no fp16/bf16, no avg */

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:I:h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            if (g_rank == 0) usage(stdout, argv[0]);
            MPI_Finalize();
            return 0;
        }
        switch (pc_parse_opt(&o, ch, optarg, &err)) {
        case 1: break;
        case -1: bad_arg(argv[0], err, optarg); break;
        default:
            if (g_rank == 0) usage(stderr, argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (optind < argc) bad_arg(argv[0], "unexpected argument", argv[optind]);
    if (o.minb > o.maxb) bad_arg(argv[0], "-b is larger than -e", NULL);

    const pc_dtype_t t = o.dtype;
    const pc_op_t op = o.op;
    const int inplace = o.inplace, iters = o.iters, warmup = o.warmup;
    const size_t sz = pc_dtype_size(t);
    const int n = g_nranks, is_root = g_rank == 0;
    if (o.maxb / sz > (size_t)INT32_MAX) bad_arg(argv[0], "-e too large for an int count", NULL);
    if (pc_sweep_rows(&o, sz) == 0) {
        /* An empty table would pass: a usage error, as in ring_perf. */
        if (is_root)
            fprintf(stderr,
                    "mpi_allreduce: no size in -b %zu .. -e %zu holds one %s element (%zu B); no row to measure\n",
                    o.minb, o.maxb, pc_dtype_name(t), sz);
        MPI_Finalize();
        return 2;
    }
    FILE *info = o.fmt == PC_FMT_TABLE ? stdout : stderr;
    const double busfac = pc_busbw_factor(PC_COLL_ALLREDUCE, n);
    /* Model parameters only as given: no probe here. */
    pc_link_t link = {-1, -1, "not given (--alpha-us)", "not given (--link-gbps)"};
    if (o.alpha_us >= 0) {
        link.alpha_s = o.alpha_us * 1e-6;
        snprintf(link.alpha_src, sizeof link.alpha_src, "--alpha-us");
    }
    if (o.link_gbps > 0) {
        link.bw_Bps = pc_gbps_to_Bps(o.link_gbps);
        snprintf(link.bw_src, sizeof link.bw_src, "--link-gbps");
    }
    const pc_gen_t gen = pc_gen(pc_gen_kind(op), t, n);

    if (is_root) {
        pc_print_cmdline(info, "mpi_allreduce", argc, argv);
        char host[256] = "?", lib[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
        int len = 0;
        gethostname(host, sizeof host - 1);
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = '\0';
        fprintf(info, "# nranks %d  host %s  collective allreduce  dtype %s  op %s  in-place %d  check %d\n", n, host,
                pc_dtype_name(t), pc_op_name(op), inplace, o.check);
        pc_print_sweep(info, &o);
        fprintf(info, "# %s\n", lib);
        pc_print_link(info, &link);
        static const char *const knobs[] = {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include",
                                            "OMPI_MCA_coll_tuned_allreduce_algorithm", "OMPI_MCA_mpi_yield_when_idle"};
        for (size_t k = 0; k < sizeof knobs / sizeof *knobs; k++) {
            const char *s = getenv(knobs[k]);
            if (s) fprintf(info, "# env: %s=%s\n", knobs[k], s);
        }
        pc_print_date(info);
        fprintf(info, "# time: median over iterations of the max over ranks; busbw factor 2(n-1)/n\n");
        fprintf(info, "# model (ring allreduce, the bandwidth optimum): T = %s; eff = model/time\n",
                pc_model_formula(PC_COLL_ALLREDUCE, PC_ALGO_RING));
        if (o.fmt == PC_FMT_JSON) {
            pc_meta_t m = {.program = "mpi_allreduce",
                           .collective = "allreduce",
                           .algos = "mpi",
                           .dtype = pc_dtype_name(t),
                           .op = pc_op_name(op),
                           .mem = "host",
                           .host = host,
                           .library = lib,
                           .nranks = n,
                           .root = -1,
                           .inplace = inplace,
                           .async = 0,
                           .check = o.check,
                           .opts = &o,
                           .link = &link,
                           .argc = argc,
                           .argv = argv};
            pc_json_begin(&m);
        } else {
            if (o.fmt == PC_FMT_TABLE) printf("#\n# allreduce, %s\n", "MPI_Allreduce");
            pc_print_columns(o.fmt);
        }
        fflush(info);
    }

    size_t maxcount = o.maxb / sz;
    unsigned char *sbuf = alloc_buf(maxcount * sz), *rbuf = alloc_buf(inplace ? 0 : maxcount * sz);
    double *times = malloc(sizeof(double) * (size_t)iters);
    if (!times) MPI_Abort(MPI_COMM_WORLD, 2);
    pc_fill(sbuf, maxcount, t, &gen, g_rank, 0);

    pc_out_t out = {o.fmt, 0};
    pc_row_t row = {.coll = "allreduce",
                    .algo = "mpi",
                    .type = pc_dtype_name(t),
                    .redop = pc_op_name(op),
                    .nranks = n,
                    .root = -1,
                    .inplace = inplace,
                    .link = &link};
    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;
    for (size_t size = o.minb; size <= o.maxb;) {
        size_t count = size / sz, bytes = count * sz;
        if (count > 0 && bytes != last_bytes) {
            last_bytes = bytes;
            const void *s = inplace ? MPI_IN_PLACE : (const void *)sbuf;
            void *r = inplace ? sbuf : rbuf;
            MPI_Barrier(MPI_COMM_WORLD);
            for (int k = 0; k < warmup; k++) call(s, r, count, t, op);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int k = 0; k < iters; k++) {
                double t0 = pc_now_us();
                call(s, r, count, t, op);
                times[k] = pc_now_us() - t0;
            }
            MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            double us = pc_median(times, iters);
            double algbw = (double)bytes / (us * 1e3), busbw = algbw * busfac;
            long long wrong = -1;
            if (o.check) {
                pc_fill(sbuf, count, t, &gen, g_rank, 0);
                /* The complement of the expected values: an element MPI never writes fails the
                 * check (0xff bytes let every integer element whose result is -1 pass). */
                if (!inplace) pc_preset_unlike_reduce(rbuf, count, t, op, &gen, n, 0);
                call(s, r, count, t, op);
                long long w = check(r, count, t, op, &gen);
                MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                wrong = w;
                wrong_total += w;
            }
            row.bytes = bytes;
            row.count = count;
            row.us = us;
            row.algbw = algbw;
            row.busbw = busbw;
            row.wrong = wrong;
            row.model_us = pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, n, bytes, link.alpha_s, link.bw_Bps);
            if (is_root) pc_print_row(&out, &row);
            bw_sum += busbw;
            rows++;
        }
        if (!pc_next_size(&size, o.factor, o.incr)) break;
    }
    if (is_root) pc_print_footer(info, NULL, o.check, wrong_total, bw_sum, rows);
    if (is_root && o.fmt == PC_FMT_JSON) pc_json_end(wrong_total, o.check);
    free(times);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return wrong_total ? 1 : 0;
}
