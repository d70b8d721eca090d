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
 */
#include <mpi.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum { T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_FLOAT, T_DOUBLE, T_COUNT } dtype_t;

static const struct {
    const char *name;
    dtype_t t;
} dtype_names[] = {
    {"int8", T_INT8},     {"uint8", T_UINT8},   {"int32", T_INT32},   {"uint32", T_UINT32}, {"int64", T_INT64},
    {"uint64", T_UINT64}, {"float", T_FLOAT},   {"float32", T_FLOAT}, {"double", T_DOUBLE}, {"float64", T_DOUBLE},
};
static const char *const dtype_disp[T_COUNT] = {"int8", "uint8", "int32", "uint32",
                                                "int64", "uint64", "float", "double"};
static const size_t dtype_size[T_COUNT] = {1, 1, 4, 4, 8, 8, 4, 8};

typedef enum { O_SUM, O_PROD, O_MIN, O_MAX, O_COUNT } op_t;
static const char *const op_names[O_COUNT] = {"sum", "prod", "min", "max"};

static int g_rank, g_nranks;

static MPI_Datatype mpi_type(dtype_t t)
{
    switch (t) {
    case T_INT8: return MPI_INT8_T;
    case T_UINT8: return MPI_UINT8_T;
    case T_INT32: return MPI_INT32_T;
    case T_UINT32: return MPI_UINT32_T;
    case T_INT64: return MPI_INT64_T;
    case T_UINT64: return MPI_UINT64_T;
    case T_FLOAT: return MPI_FLOAT;
    default: return MPI_DOUBLE;
    }
}

static MPI_Op mpi_op(op_t o)
{
    switch (o) {
    case O_SUM: return MPI_SUM;
    case O_PROD: return MPI_PROD;
    case O_MIN: return MPI_MIN;
    default: return MPI_MAX;
    }
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: mpirun -np N %s [options]\n"
            "  -b bytes   minimum size (default 4); K/M/G suffixes are powers of 1024\n"
            "  -e bytes   maximum size (default 256M)\n"
            "  -f factor  multiply the size by this between rows (default 2)\n"
            "  -i bytes   add this to the size between rows (instead of -f)\n"
            "  -n iters   timed iterations per size (default 20)\n"
            "  -w iters   warm-up iterations per size (default 5)\n"
            "  -c 0|1     check results (default 1)\n"
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 float|float32 double|float64 (default float)\n"
            "  -o op      sum prod min max (default sum)\n"
            "  -I 0|1     in-place (MPI_IN_PLACE, default 0)\n"
            "  --csv      machine-readable rows on stdout (the # lines go to stderr)\n"
            "  -h         this help\n",
            argv0);
}

static void bad_arg(const char *argv0, const char *msg, const char *val)
{
    if (g_rank == 0) {
        fprintf(stderr, "mpi_allreduce: %s: '%s'\n", msg, val);
        usage(stderr, argv0);
    }
    MPI_Finalize();
    exit(2);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    if (!s || !*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    case 't': case 'T': mul = 1ULL << 40; end++; break;
    default: break;
    }
    if (*end == 'i') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0' || end == s) return -1;
    if (v > SIZE_MAX / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    if (!s || !*s) return -1;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Check data: the same generator as ring_perf (small integers, exact in every type). */
static inline uint32_t hash2(uint64_t i, int r)
{
    uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) * 0x7FEB352Du ^ ((uint32_t)r + 1u) * 0x85EBCA77u;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

static inline int val(op_t op, int r, uint64_t i)
{
    uint32_t h = hash2(i, r);
    switch (op) {
    case O_SUM: return (int)(h % 9u) - 4;
    case O_PROD:
        if ((uint64_t)(r % 8) == i % 8) return 2;
        return (h % 3u == 0) ? -1 : 1;
    default: return (int)(h % 201u) - 100;
    }
}

static inline void put(void *buf, size_t k, dtype_t t, int v)
{
    switch (t) {
    case T_INT8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case T_UINT8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case T_INT32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case T_UINT32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    case T_INT64: ((int64_t *)buf)[k] = (int64_t)v; break;
    case T_UINT64: ((uint64_t *)buf)[k] = (uint64_t)(int64_t)v; break;
    case T_FLOAT: ((float *)buf)[k] = (float)v; break;
    case T_DOUBLE: ((double *)buf)[k] = (double)v; break;
    default: break;
    }
}

static void fill(void *buf, size_t n, dtype_t t, op_t op, int r)
{
    for (size_t k = 0; k < n; k++) put(buf, k, t, val(op, r, k));
}

/* Wrapping integer arithmetic through uint64 (MPI leaves integer overflow undefined; the
 * generator keeps int8 sums in range for up to 31 ranks). Note: Open MPI 4.1.4's op/avx
 * component saturates uint8 sums for longer vectors, so "-d uint8 -o sum" reports wrong
 * elements there unless run with "--mca op ^avx". */
#define EXPECT(T, W)                                                                               \
    do {                                                                                           \
        T acc_ = (T)val(op, 0, i);                                                                 \
        for (int r_ = 1; r_ < nranks; r_++) {                                                      \
            T x_ = (T)val(op, r_, i);                                                              \
            switch (op) {                                                                          \
            case O_SUM: acc_ = (T)((W)acc_ + (W)x_); break;                                        \
            case O_PROD: acc_ = (T)((W)acc_ * (W)x_); break;                                       \
            case O_MIN: if (x_ < acc_) acc_ = x_; break;                                           \
            case O_MAX: if (x_ > acc_) acc_ = x_; break;                                           \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
        memcpy(out, &acc_, sizeof acc_);                                                           \
    } while (0)

static void expect_reduce(void *out, dtype_t t, op_t op, int nranks, uint64_t i)
{
    switch (t) {
    case T_INT8: EXPECT(int8_t, uint64_t); break;
    case T_UINT8: EXPECT(uint8_t, uint64_t); break;
    case T_INT32: EXPECT(int32_t, uint64_t); break;
    case T_UINT32: EXPECT(uint32_t, uint64_t); break;
    case T_INT64: EXPECT(int64_t, uint64_t); break;
    case T_UINT64: EXPECT(uint64_t, uint64_t); break;
    case T_FLOAT: EXPECT(float, float); break;
    case T_DOUBLE: EXPECT(double, double); break;
    default: break;
    }
}

static int same(const void *a, const void *b, dtype_t t)
{
    if (t == T_FLOAT) {
        float x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return x == y;
    }
    if (t == T_DOUBLE) {
        double x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return x == y;
    }
    return memcmp(a, b, dtype_size[t]) == 0;
}

static long long check(const void *got, size_t n, dtype_t t, op_t op)
{
    size_t sz = dtype_size[t];
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        expect_reduce(exp, t, op, g_nranks, k);
        if (!same((const unsigned char *)got + k * sz, exp, t)) {
            if (wrong < 5)
                fprintf(stderr, "mpi_allreduce: rank %d: %zu elements: wrong element %zu\n", g_rank, n, k);
            wrong++;
        }
    }
    return wrong;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *alloc_buf(size_t bytes)
{
    size_t align = 4096, n = (bytes + align - 1) / align * align;
    if (n == 0) n = align;
    void *p = aligned_alloc(align, n);
    if (!p) {
        fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, 0, n);
    return p;
}

static void call(const void *s, void *r, size_t count, dtype_t t, op_t op)
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
    size_t minb = 4, maxb = (size_t)256 << 20, factor = 2, incr = 0;
    int iters = 20, warmup = 5, do_check = 1, inplace = 0, csv = 0, f;
    dtype_t t = T_FLOAT;
    op_t op = O_SUM;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    static const struct option longopts[] = {{"csv", no_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:I:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'b': if (parse_size(optarg, &minb)) bad_arg(argv[0], "bad size for -b", optarg); break;
        case 'e': if (parse_size(optarg, &maxb)) bad_arg(argv[0], "bad size for -e", optarg); break;
        case 'f':
            if (parse_int(optarg, 2, 1 << 20, &f)) bad_arg(argv[0], "-f needs an integer >= 2", optarg);
            factor = (size_t)f;
            break;
        case 'i':
            if (parse_size(optarg, &incr) || incr == 0) bad_arg(argv[0], "bad increment for -i", optarg);
            factor = 0;
            break;
        case 'n': if (parse_int(optarg, 1, 1 << 24, &iters)) bad_arg(argv[0], "-n needs an integer >= 1", optarg); break;
        case 'w': if (parse_int(optarg, 0, 1 << 24, &warmup)) bad_arg(argv[0], "-w needs an integer >= 0", optarg); break;
        case 'c': if (parse_int(optarg, 0, 1, &do_check)) bad_arg(argv[0], "-c needs 0 or 1", optarg); break;
        case 'I': if (parse_int(optarg, 0, 1, &inplace)) bad_arg(argv[0], "-I needs 0 or 1", optarg); break;
        case 'd': {
            size_t k;
            for (k = 0; k < sizeof dtype_names / sizeof *dtype_names; k++)
                if (strcmp(optarg, dtype_names[k].name) == 0) break;
            if (k == sizeof dtype_names / sizeof *dtype_names) bad_arg(argv[0], "unknown dtype", optarg);
            t = dtype_names[k].t;
            break;
        }
        case 'o': {
            int k;
            for (k = 0; k < O_COUNT; k++)
                if (strcmp(optarg, op_names[k]) == 0) break;
            if (k == O_COUNT) bad_arg(argv[0], "unknown op", optarg);
            op = (op_t)k;
            break;
        }
        case 'S': csv = 1; break;
        case 'h':
            if (g_rank == 0) usage(stdout, argv[0]);
            MPI_Finalize();
            return 0;
        default:
            if (g_rank == 0) usage(stderr, argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (optind < argc) bad_arg(argv[0], "unexpected argument", argv[optind]);
    if (minb > maxb) bad_arg(argv[0], "-b is larger than -e", "");

    const size_t sz = dtype_size[t];
    const int n = g_nranks, is_root = g_rank == 0;
    if (maxb / sz > (size_t)INT32_MAX) bad_arg(argv[0], "-e too large for an int count", "");
    FILE *info = csv ? stderr : stdout;
    const double busfac = 2.0 * (n - 1) / n;

    if (is_root) {
        fprintf(info, "# mpi_allreduce:");
        for (int k = 0; k < argc; k++) fprintf(info, " %s", argv[k]);
        fprintf(info, "\n");
        char host[256] = "?", lib[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
        int len = 0;
        gethostname(host, sizeof host - 1);
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = '\0';
        fprintf(info, "# nranks %d  host %s  collective allreduce  dtype %s  op %s  in-place %d  check %d\n", n, host,
                dtype_disp[t], op_names[op], inplace, do_check);
        if (factor)
            fprintf(info, "# minBytes %zu  maxBytes %zu  step: %zu(factor)  warmup iters: %d  iters: %d\n", minb, maxb,
                    factor, warmup, iters);
        else
            fprintf(info, "# minBytes %zu  maxBytes %zu  step: %zu(bytes)  warmup iters: %d  iters: %d\n", minb, maxb,
                    incr, warmup, iters);
        fprintf(info, "# %s\n", lib);
        static const char *const knobs[] = {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include",
                                            "OMPI_MCA_coll_tuned_allreduce_algorithm", "OMPI_MCA_mpi_yield_when_idle"};
        for (size_t k = 0; k < sizeof knobs / sizeof *knobs; k++) {
            const char *s = getenv(knobs[k]);
            if (s) fprintf(info, "# env: %s=%s\n", knobs[k], s);
        }
        char date[64];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&now));
        fprintf(info, "# date %s\n", date);
        fprintf(info, "# time: median over iterations of the max over ranks; busbw factor 2(n-1)/n\n");
        if (csv) {
            printf("collective,nranks,size,count,type,redop,root,inplace,time_us,algbw_GBps,busbw_GBps,wrong\n");
        } else {
            printf("#\n");
            printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop", "root",
                   "time", "algbw", "busbw", "#wrong");
            printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                   "(GB/s)", "(GB/s)", "");
        }
        fflush(stdout);
        fflush(info);
    }

    size_t maxcount = maxb / sz;
    unsigned char *sbuf = alloc_buf(maxcount * sz), *rbuf = alloc_buf(inplace ? 0 : maxcount * sz);
    double *times = malloc(sizeof(double) * (size_t)iters);
    if (!times) MPI_Abort(MPI_COMM_WORLD, 2);
    fill(sbuf, maxcount, t, op, g_rank);

    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;
    for (size_t size = minb; size <= maxb;) {
        size_t count = size / sz, bytes = count * sz;
        if (count > 0 && bytes != last_bytes) {
            last_bytes = bytes;
            const void *s = inplace ? MPI_IN_PLACE : (const void *)sbuf;
            void *r = inplace ? sbuf : rbuf;
            MPI_Barrier(MPI_COMM_WORLD);
            for (int k = 0; k < warmup; k++) call(s, r, count, t, op);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int k = 0; k < iters; k++) {
                double t0 = now_us();
                call(s, r, count, t, op);
                times[k] = now_us() - t0;
            }
            MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            qsort(times, (size_t)iters, sizeof *times, cmp_double);
            double us = (iters % 2) ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
            double algbw = (double)bytes / (us * 1e3), busbw = algbw * busfac;
            long long wrong = -1;
            if (do_check) {
                fill(sbuf, count, t, op, g_rank);
                if (!inplace) memset(rbuf, 0xff, count * sz);
                call(s, r, count, t, op);
                long long w = check(r, count, t, op);
                MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                wrong = w;
                wrong_total += w;
            }
            if (is_root) {
                if (csv)
                    printf("allreduce,%d,%zu,%zu,%s,%s,%d,%d,%.3f,%.6f,%.6f,%lld\n", n, bytes, count, dtype_disp[t],
                           op_names[op], -1, inplace, us, algbw, busbw, wrong);
                else
                    printf("  %10zu  %12zu  %8s  %6s  %6d  %10.2f  %8.3f  %8.3f  %6lld\n", bytes, count, dtype_disp[t],
                           op_names[op], -1, us, algbw, busbw, wrong);
                fflush(stdout);
            }
            bw_sum += busbw;
            rows++;
        }
        if (factor) {
            if (size == 0) size = 1;
            if (size > SIZE_MAX / factor) break;
            size *= factor;
        } else {
            if (size > SIZE_MAX - incr) break;
            size += incr;
        }
    }
    if (is_root) {
        fprintf(info, "# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        fprintf(info, "# Avg bus bandwidth    : %g\n", rows ? bw_sum / rows : 0.0);
        fprintf(info, "#\n");
        fflush(info);
    }
    free(times);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return wrong_total ? 1 : 0;
}
