/*
 * mpi_allreduce: the ring_perf allreduce measurement, done with MPI_Allreduce, so that the two
 * tables compare line by line (same sizes, same rounding, same timing rule, same row format,
 * same busbw = algbw * 2(n-1)/n).
 *
 *   mpirun -np 4 build/perf/mpi_allreduce -b 4 -e 64M -f 2 -d float
 *
 * The measurement, the check and the output are baseline.c's, shared with gloo_allreduce: per
 * size, -w warm-up calls and -n timed calls; the time is the median over iterations of the max
 * over ranks; -c 1 checks one more call on fresh data against exact values on every rank.
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

#include "baseline.h"

/* What every all-reduce of the sweep needs, behind pc_baseline_t.ctx. */
typedef struct {
    int rank;
    MPI_Datatype type;
    MPI_Op op;
} sweep_t;

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

static void bad_arg(int rank, const char *argv0, const char *msg, const char *val)
{
    if (rank == 0) {
        if (val) fprintf(stderr, "mpi_allreduce: %s: '%s'\n", msg, val);
        else fprintf(stderr, "mpi_allreduce: %s\n", msg);
        usage(stderr, argv0);
    }
    MPI_Finalize();
    exit(2);
}

/* Check data and expected values: perf_common, through baseline.c. Integer arithmetic wraps
 * through uint64 there (MPI leaves integer overflow undefined; the generator keeps int8 sums in
 * range for up to 31 ranks). Note: Open MPI 4.1.4's op/avx component saturates uint8 sums for
 * longer vectors, so "-d uint8 -o sum" reports wrong elements there unless run with
 * "--mca op ^avx". */
static void call(void *ctx, const void *s, void *r, size_t count)
{
    const sweep_t *w = ctx;
    int rc = MPI_Allreduce(s ? s : MPI_IN_PLACE, r, (int)count, w->type, w->op, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpi_allreduce: rank %d: MPI_Allreduce failed: %s\n", w->rank, msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void barrier(void *ctx)
{
    (void)ctx;
    MPI_Barrier(MPI_COMM_WORLD);
}

static void max_doubles(void *ctx, double *v, int n)
{
    (void)ctx;
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

static long long sum_ll(void *ctx, long long v)
{
    (void)ctx;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return v;
}

static void die(void *ctx)
{
    (void)ctx;
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    pc_opts_t o;
    pc_opts_init(&o, 0, PC_AVG); /* no fp16/bf16, no avg */

    int rank = 0, nranks = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:I:h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            if (rank == 0) usage(stdout, argv[0]);
            MPI_Finalize();
            return 0;
        }
        switch (pc_parse_opt(&o, ch, optarg, &err)) {
        case 1: break;
        case -1: bad_arg(rank, argv[0], err, optarg); break;
        default:
            if (rank == 0) usage(stderr, argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (optind < argc) bad_arg(rank, argv[0], "unexpected argument", argv[optind]);
    if (o.minb > o.maxb) bad_arg(rank, argv[0], "-b is larger than -e", NULL);

    sweep_t w = {.rank = rank, .type = mpi_type(o.dtype), .op = mpi_op(o.op)};
    if (o.maxb / pc_dtype_size(o.dtype) > (size_t)INT32_MAX) bad_arg(rank, argv[0], "-e too large for an int count", NULL);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl) *nl = '\0';
    static const char *const knobs[] = {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include",
                                        "OMPI_MCA_coll_tuned_allreduce_algorithm", "OMPI_MCA_mpi_yield_when_idle",
                                        NULL};
    const pc_baseline_t b = {.program = "mpi_allreduce",
                             .library = lib,
                             .title = "MPI_Allreduce",
                             .algo = "mpi",
                             .env = knobs,
                             .rank = rank,
                             .nranks = nranks,
                             .ctx = &w,
                             .allreduce = call,
                             .barrier = barrier,
                             .max_doubles = max_doubles,
                             .sum_ll = sum_ll,
                             .die = die};
    int rc = pc_baseline_run(&b, &o, argc, argv);
    MPI_Finalize();
    return rc;
}
