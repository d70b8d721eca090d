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
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcomm.h"

typedef enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_BROADCAST, COLL_BARRIER } coll_t;

static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};

static const struct {
    const char *name;
    ring_dtype_t dtype;
} dtype_names[] = {
    {"int8", RING_INT8},       {"uint8", RING_UINT8},     {"int32", RING_INT32},
    {"uint32", RING_UINT32},   {"int64", RING_INT64},     {"uint64", RING_UINT64},
    {"half", RING_FLOAT16},    {"float16", RING_FLOAT16}, {"fp16", RING_FLOAT16},
    {"bfloat16", RING_BFLOAT16}, {"bf16", RING_BFLOAT16}, {"float", RING_FLOAT32},
    {"float32", RING_FLOAT32}, {"double", RING_FLOAT64},  {"float64", RING_FLOAT64},
};

/* Display names, indexed by ring_dtype_t / ring_op_t. */
static const char *const dtype_disp[RING_DTYPE_COUNT] = {"int8",   "uint8",  "int32", "uint32", "int64",
                                                         "uint64", "half",   "bfloat16", "float", "double"};
static const char *const op_names[RING_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

typedef struct {
    coll_t coll;
    size_t minb, maxb;
    size_t factor; /* 0: use incr */
    size_t incr;
    int iters, warmup, check;
    ring_dtype_t dtype;
    ring_op_t op;
    int root, inplace, async, csv;
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
            "  -b bytes   minimum size (default 4); K/M/G suffixes are powers of 1024\n"
            "  -e bytes   maximum size (default 256M)\n"
            "  -f factor  multiply the size by this between rows (default 2)\n"
            "  -i bytes   add this to the size between rows (instead of -f)\n"
            "  -n iters   timed iterations per size (default 20)\n"
            "  -w iters   warm-up iterations per size (default 5)\n"
            "  -c 0|1     check results (default 1)\n"
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

/* ---------------------------------------------------------------------------------------- */
/* fp16 / bf16 conversions (round to nearest-even), independent of the library               */

static uint16_t f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  /* NaN */
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7C00u); /* >= 65536 (or inf): inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;          /* <= 2^-25 rounds to zero */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - e; /* value / 2^-24 = m >> shift; shift in [14, 24] */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (a - (112u << 23)) >> 13;
    uint32_t rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry may reach inf: correct */
    return (uint16_t)(sign | h);
}

static float h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, x;
    float f;
    if (e == 0) {
        f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    if (e == 31) x = sign | 0x7F800000u | (m << 13);
    else x = sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t f2bf(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf2f(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------------------- */
/* Check data                                                                                */

/*
 * Input element i of rank r is a small integer val(kind, r, i), exactly representable in every
 * dtype, chosen so the reduction over ranks is exact in every dtype:
 *   GEN_SUM   (sum, avg):   [-amp, amp]; amp = 4 (less for bf16/fp16 with many ranks so that
 *                           |sum| <= 256 for bf16 and <= 2048 for fp16);
 *   GEN_PROD  (prod):       -1 or 1, and 2 on ranks r == i (mod 8) (at most ceil(n/8) factors 2);
 *   GEN_RANGE (min, max, and the data of allgather/broadcast): [-100, 100].
 * Integers wrap in every case exactly as the library specifies, so unsigned types are fine.
 */
enum { GEN_SUM, GEN_PROD, GEN_RANGE };

static int g_amp = 4;

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

static inline int val(int kind, int r, uint64_t i)
{
    uint32_t h = hash2(i, r);
    switch (kind) {
    case GEN_SUM: return (int)(h % (uint32_t)(2 * g_amp + 1)) - g_amp;
    case GEN_PROD:
        if ((uint64_t)(r % 8) == i % 8) return 2;
        return (h % 3u == 0) ? -1 : 1;
    default: return (int)(h % 201u) - 100;
    }
}

static int gen_kind(coll_t coll, ring_op_t op)
{
    if (coll == COLL_ALLGATHER || coll == COLL_BROADCAST) return GEN_RANGE;
    switch (op) {
    case RING_SUM:
    case RING_AVG: return GEN_SUM;
    case RING_PROD: return GEN_PROD;
    default: return GEN_RANGE;
    }
}

/* Store v (a small integer) as element k of buf. */
static inline void put(void *buf, size_t k, ring_dtype_t dt, int v)
{
    switch (dt) {
    case RING_INT8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case RING_UINT8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case RING_INT32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case RING_UINT32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    case RING_INT64: ((int64_t *)buf)[k] = (int64_t)v; break;
    case RING_UINT64: ((uint64_t *)buf)[k] = (uint64_t)(int64_t)v; break;
    case RING_FLOAT16: ((uint16_t *)buf)[k] = f2h((float)v); break;
    case RING_BFLOAT16: ((uint16_t *)buf)[k] = f2bf((float)v); break;
    case RING_FLOAT32: ((float *)buf)[k] = (float)v; break;
    case RING_FLOAT64: ((double *)buf)[k] = (double)v; break;
    default: break;
    }
}

/* buf[k] = val(kind, r, base + k) for k in [0, n). */
static void fill(void *buf, size_t n, ring_dtype_t dt, int kind, int r, uint64_t base)
{
    for (size_t k = 0; k < n; k++) put(buf, k, dt, val(kind, r, base + k));
}

/* Integer reduction in type T: wrap through uint64 (defined), AVG truncates after the wrap. */
#define INT_EXPECT(T)                                                                              \
    do {                                                                                           \
        T acc_ = (T)val(kind, 0, i);                                                               \
        for (int r_ = 1; r_ < nranks; r_++) {                                                      \
            T x_ = (T)val(kind, r_, i);                                                            \
            switch (op) {                                                                          \
            case RING_SUM:                                                                         \
            case RING_AVG: acc_ = (T)((uint64_t)acc_ + (uint64_t)x_); break;                       \
            case RING_PROD: acc_ = (T)((uint64_t)acc_ * (uint64_t)x_); break;                      \
            case RING_MIN: if (x_ < acc_) acc_ = x_; break;                                         \
            case RING_MAX: if (x_ > acc_) acc_ = x_; break;                                         \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
        if (op == RING_AVG) acc_ = (T)(acc_ / nranks);                                             \
        memcpy(out, &acc_, sizeof acc_);                                                           \
    } while (0)

/* Floating reduction in W; the inputs are small integers so every partial result is exact. */
#define FP_EXPECT(W, result)                                                                       \
    do {                                                                                           \
        W acc_ = (W)val(kind, 0, i);                                                               \
        for (int r_ = 1; r_ < nranks; r_++) {                                                      \
            W x_ = (W)val(kind, r_, i);                                                            \
            switch (op) {                                                                          \
            case RING_SUM:                                                                         \
            case RING_AVG: acc_ = acc_ + x_; break;                                                \
            case RING_PROD: acc_ = acc_ * x_; break;                                               \
            case RING_MIN: if (x_ < acc_) acc_ = x_; break;                                         \
            case RING_MAX: if (x_ > acc_) acc_ = x_; break;                                         \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
        if (op == RING_AVG) acc_ = acc_ / (W)nranks;                                               \
        result = acc_;                                                                             \
    } while (0)

/* Expected element i of the reduction over nranks ranks, in dt's representation. */
static void expect_reduce(void *out, ring_dtype_t dt, ring_op_t op, int kind, int nranks, uint64_t i)
{
    float f;
    double d;
    uint16_t h;
    switch (dt) {
    case RING_INT8: INT_EXPECT(int8_t); break;
    case RING_UINT8: INT_EXPECT(uint8_t); break;
    case RING_INT32: INT_EXPECT(int32_t); break;
    case RING_UINT32: INT_EXPECT(uint32_t); break;
    case RING_INT64: INT_EXPECT(int64_t); break;
    case RING_UINT64: INT_EXPECT(uint64_t); break;
    case RING_FLOAT16: FP_EXPECT(float, f); h = f2h(f); memcpy(out, &h, 2); break;
    case RING_BFLOAT16: FP_EXPECT(float, f); h = f2bf(f); memcpy(out, &h, 2); break;
    case RING_FLOAT32: FP_EXPECT(float, f); memcpy(out, &f, 4); break;
    case RING_FLOAT64: FP_EXPECT(double, d); memcpy(out, &d, 8); break;
    default: break;
    }
}

/* Element equality: bitwise for integers, numeric for floating types (NaN is never equal). */
static int same(const void *a, const void *b, ring_dtype_t dt)
{
    switch (dt) {
    case RING_FLOAT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return h2f(x) == h2f(y);
    }
    case RING_BFLOAT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return bf2f(x) == bf2f(y);
    }
    case RING_FLOAT32: {
        float x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return x == y;
    }
    case RING_FLOAT64: {
        double x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return x == y;
    }
    default: return memcmp(a, b, ring_dtype_size(dt)) == 0;
    }
}

static void describe(char *s, size_t n, const void *p, ring_dtype_t dt)
{
    switch (dt) {
    case RING_INT8: snprintf(s, n, "%d", *(const int8_t *)p); break;
    case RING_UINT8: snprintf(s, n, "%u", *(const uint8_t *)p); break;
    case RING_INT32: snprintf(s, n, "%" PRId32, *(const int32_t *)p); break;
    case RING_UINT32: snprintf(s, n, "%" PRIu32, *(const uint32_t *)p); break;
    case RING_INT64: snprintf(s, n, "%" PRId64, *(const int64_t *)p); break;
    case RING_UINT64: snprintf(s, n, "%" PRIu64, *(const uint64_t *)p); break;
    case RING_FLOAT16: snprintf(s, n, "%g (0x%04x)", (double)h2f(*(const uint16_t *)p), *(const uint16_t *)p); break;
    case RING_BFLOAT16: snprintf(s, n, "%g (0x%04x)", (double)bf2f(*(const uint16_t *)p), *(const uint16_t *)p); break;
    case RING_FLOAT32: snprintf(s, n, "%.9g", (double)*(const float *)p); break;
    case RING_FLOAT64: snprintf(s, n, "%.17g", *(const double *)p); break;
    default: snprintf(s, n, "?"); break;
    }
}

/* Count mismatches of got[k] against the expectation; print the first few to stderr. */
typedef struct {
    ring_dtype_t dtype;
    ring_op_t op;
    int kind;
    int reduce;       /* 1: reduction over ranks of val(kind, r, base + k); 0: copy of val(kind, src, base + k) */
    int src;          /* copy source rank */
} expect_t;

static long long check_range(const void *got, size_t n, uint64_t base, const expect_t *e, size_t *reported,
                             const char *what, size_t bytes)
{
    size_t sz = ring_dtype_size(e->dtype);
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        const unsigned char *g = (const unsigned char *)got + k * sz;
        if (e->reduce) expect_reduce(exp, e->dtype, e->op, e->kind, g_nranks, base + k);
        else put(exp, 0, e->dtype, val(e->kind, e->src, base + k));
        if (!same(g, exp, e->dtype)) {
            if (*reported < 5) {
                char a[64], b[64];
                describe(a, sizeof a, g, e->dtype);
                describe(b, sizeof b, exp, e->dtype);
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

/* Median over iterations of the max over ranks of each iteration's time (us). */
static double timed_loop(const call_t *c, int warmup, int iters, double *t)
{
    for (int k = 0; k < warmup; k++) run_once(c);
    CALL("ring_barrier", ring_barrier(g_comm));
    for (int k = 0; k < iters; k++) {
        double t0 = now_us();
        run_once(c);
        t[k] = now_us() - t0;
    }
    CALL("ring_allreduce (timing max)", ring_allreduce(g_comm, t, t, (size_t)iters, RING_FLOAT64, RING_MAX));
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    return (iters % 2) ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
}

static void *alloc_buf(size_t bytes)
{
    size_t align = 4096, n = (bytes + align - 1) / align * align;
    if (n == 0) n = align;
    void *p = aligned_alloc(align, n);
    if (!p) {
        fprintf(stderr, "ring_perf: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        ring_comm_abort(g_comm);
        exit(2);
    }
    memset(p, 0, n); /* touch every page before timing */
    return p;
}

/* ---------------------------------------------------------------------------------------- */

static FILE *g_info; /* where the # lines go: stdout, or stderr with --csv */

static void print_header(int argc, char **argv, const opts_t *o)
{
    FILE *f = g_info;
    fprintf(f, "# ring_perf:");
    for (int k = 0; k < argc; k++) fprintf(f, " %s", argv[k]);
    fprintf(f, "\n");
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fprintf(f, "# nranks %d  host %s  collective %s  dtype %s  op %s  root %d  in-place %d  async %d  check %d\n",
            g_nranks, host, coll_names[o->coll], dtype_disp[o->dtype], op_names[o->op], o->root, o->inplace,
            o->async, o->check);
    if (o->factor)
        fprintf(f, "# minBytes %zu  maxBytes %zu  step: %zu(factor)  warmup iters: %d  iters: %d\n", o->minb,
                o->maxb, o->factor, o->warmup, o->iters);
    else
        fprintf(f, "# minBytes %zu  maxBytes %zu  step: %zu(bytes)  warmup iters: %d  iters: %d\n", o->minb,
                o->maxb, o->incr, o->warmup, o->iters);
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
    char date[64];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&t));
    fprintf(f, "# date %s\n", date);
    fprintf(f, "# time: median over iterations of the max over ranks; bytes = full buffer; busbw factor ");
    switch (o->coll) {
    case COLL_ALLREDUCE: fprintf(f, "2(n-1)/n\n"); break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: fprintf(f, "(n-1)/n\n"); break;
    case COLL_BROADCAST: fprintf(f, "1\n"); break;
    case COLL_BARRIER: fprintf(f, "0 (barrier)\n"); break;
    }
    if (o->csv) {
        printf("collective,nranks,size,count,type,redop,root,inplace,time_us,algbw_GBps,busbw_GBps,wrong\n");
    } else {
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
    }
    fflush(stdout);
    fflush(f);
}

static void print_row(const opts_t *o, size_t bytes, size_t count, const char *type, const char *redop, int root,
                      double us, double algbw, double busbw, long long wrong)
{
    if (o->csv)
        printf("%s,%d,%zu,%zu,%s,%s,%d,%d,%.3f,%.6f,%.6f,%lld\n", coll_names[o->coll], g_nranks, bytes, count, type,
               redop, root, o->inplace, us, algbw, busbw, wrong);
    else
        printf("  %10zu  %12zu  %8s  %6s  %6d  %10.2f  %8.3f  %8.3f  %6lld\n", bytes, count, type, redop, root, us,
               algbw, busbw, wrong);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    opts_t o = {COLL_ALLREDUCE, 4, (size_t)256 << 20, 2, 0, 20, 5, 1, RING_FLOAT32, RING_SUM, 0, 0, 0, 0};
    static const struct option longopts[] = {{"csv", no_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ch, factor_i;
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
        case 'b': if (parse_size(optarg, &o.minb)) bad_arg(argv[0], "bad size for -b", optarg); break;
        case 'e': if (parse_size(optarg, &o.maxb)) bad_arg(argv[0], "bad size for -e", optarg); break;
        case 'f':
            if (parse_int(optarg, 2, 1 << 20, &factor_i)) bad_arg(argv[0], "-f needs an integer >= 2", optarg);
            o.factor = (size_t)factor_i;
            break;
        case 'i':
            if (parse_size(optarg, &o.incr) || o.incr == 0) bad_arg(argv[0], "bad increment for -i", optarg);
            o.factor = 0;
            break;
        case 'n': if (parse_int(optarg, 1, 1 << 24, &o.iters)) bad_arg(argv[0], "-n needs an integer >= 1", optarg); break;
        case 'w': if (parse_int(optarg, 0, 1 << 24, &o.warmup)) bad_arg(argv[0], "-w needs an integer >= 0", optarg); break;
        case 'c': if (parse_int(optarg, 0, 1, &o.check)) bad_arg(argv[0], "-c needs 0 or 1", optarg); break;
        case 'I': if (parse_int(optarg, 0, 1, &o.inplace)) bad_arg(argv[0], "-I needs 0 or 1", optarg); break;
        case 'a': if (parse_int(optarg, 0, 1, &o.async)) bad_arg(argv[0], "-a needs 0 or 1", optarg); break;
        case 'r': if (parse_int(optarg, 0, 1 << 20, &o.root)) bad_arg(argv[0], "bad root for -r", optarg); break;
        case 'd': {
            size_t k;
            for (k = 0; k < sizeof dtype_names / sizeof *dtype_names; k++)
                if (strcmp(optarg, dtype_names[k].name) == 0) break;
            if (k == sizeof dtype_names / sizeof *dtype_names) bad_arg(argv[0], "unknown dtype", optarg);
            o.dtype = dtype_names[k].dtype;
            break;
        }
        case 'o': {
            int k;
            for (k = 0; k < RING_OP_COUNT; k++)
                if (strcmp(optarg, op_names[k]) == 0) break;
            if (k == RING_OP_COUNT) bad_arg(argv[0], "unknown op", optarg);
            o.op = (ring_op_t)k;
            break;
        }
        case 'S': o.csv = 1; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (optind < argc) bad_arg(argv[0], "unexpected argument", argv[optind]);
    if (o.minb > o.maxb) {
        fprintf(stderr, "ring_perf: -b %zu is larger than -e %zu\n", o.minb, o.maxb);
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
    if (o.dtype == RING_BFLOAT16) g_amp = n * 4 <= 256 ? 4 : (256 / n > 0 ? 256 / n : 1);
    if (o.dtype == RING_FLOAT16) g_amp = n * 4 <= 2048 ? 4 : (2048 / n > 0 ? 2048 / n : 1);

    const int is_root = g_rank == 0;
    g_info = o.csv ? stderr : stdout;
    const size_t sz = ring_dtype_size(o.dtype);
    const int kind = gen_kind(o.coll, o.op);
    const int has_op = o.coll == COLL_ALLREDUCE || o.coll == COLL_REDUCE_SCATTER;
    const char *type_s = o.coll == COLL_BARRIER ? "none" : dtype_disp[o.dtype];
    const char *redop_s = has_op ? op_names[o.op] : "none";
    const int root_col = o.coll == COLL_BROADCAST ? o.root : -1;
    double busfac = 0;
    switch (o.coll) {
    case COLL_ALLREDUCE: busfac = 2.0 * (n - 1) / n; break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: busfac = (double)(n - 1) / n; break;
    case COLL_BROADCAST: busfac = 1; break;
    case COLL_BARRIER: busfac = 0; break;
    }

    if (is_root) print_header(argc, argv, &o);
    if (is_root && ((o.dtype == RING_BFLOAT16 && (long)n * g_amp > 256) ||
                    (o.dtype == RING_FLOAT16 && (long)n * g_amp > 2048)))
        fprintf(g_info, "# warning: %d ranks are too many for exact %s sums; checks may report errors\n", n,
                dtype_disp[o.dtype]);

    /* Buffers, once, at the largest size. */
    size_t maxcount = o.maxb / sz;             /* elements in the full buffer */
    size_t maxper = maxcount / (size_t)n;      /* per-rank elements (reduce_scatter/allgather) */
    size_t send_bytes = 0, recv_bytes = 0;
    switch (o.coll) {
    case COLL_ALLREDUCE: send_bytes = maxcount * sz; recv_bytes = o.inplace ? 0 : maxcount * sz; break;
    case COLL_REDUCE_SCATTER: send_bytes = maxper * n * sz; recv_bytes = o.inplace ? 0 : maxper * sz; break;
    case COLL_ALLGATHER: send_bytes = o.inplace ? 0 : maxper * sz; recv_bytes = maxper * n * sz; break;
    case COLL_BROADCAST: recv_bytes = maxcount * sz; break;
    case COLL_BARRIER: break;
    }
    unsigned char *sbuf = alloc_buf(send_bytes), *rbuf = alloc_buf(recv_bytes);
    double *times = malloc(sizeof(double) * (size_t)o.iters);
    if (!times) {
        fprintf(stderr, "ring_perf: out of memory\n");
        ring_comm_abort(g_comm);
        return 2;
    }
    /* Initial data: the check pattern (valid for out-of-place allreduce/reduce_scatter at any size). */
    if (o.coll == COLL_ALLREDUCE || o.coll == COLL_REDUCE_SCATTER) fill(sbuf, send_bytes / sz, o.dtype, kind, g_rank, 0);
    else if (o.coll == COLL_BROADCAST) fill(rbuf, maxcount, o.dtype, kind, g_rank, 0);
    else if (o.coll == COLL_ALLGATHER) {
        if (o.inplace) fill(rbuf, maxper * n, o.dtype, kind, g_rank, 0);
        else fill(sbuf, maxper, o.dtype, kind, g_rank, 0);
    }

    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;

    if (o.coll == COLL_BARRIER) {
        call_t c = {COLL_BARRIER, 0, o.dtype, o.op, 0, o.async, NULL, NULL};
        CALL("ring_barrier", ring_barrier(g_comm));
        double us = timed_loop(&c, o.warmup, o.iters, times);
        if (is_root) print_row(&o, 0, 0, type_s, redop_s, -1, us, 0, 0, -1);
        rows = 1;
    } else {
        for (size_t size = o.minb; size <= o.maxb;) {
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
                call_t c = {o.coll, count, o.dtype, o.op, o.root, o.async, NULL, NULL};
                switch (o.coll) {
                case COLL_ALLREDUCE: c.send = sbuf; c.recv = o.inplace ? sbuf : rbuf; break;
                case COLL_REDUCE_SCATTER:
                    c.send = sbuf;
                    c.recv = o.inplace ? sbuf + (size_t)g_rank * count * sz : rbuf;
                    break;
                case COLL_ALLGATHER:
                    c.recv = rbuf;
                    c.send = o.inplace ? rbuf + (size_t)g_rank * count * sz : sbuf;
                    break;
                case COLL_BROADCAST: c.recv = rbuf; break;
                case COLL_BARRIER: break;
                }
                CALL("ring_barrier", ring_barrier(g_comm));
                double us = timed_loop(&c, o.warmup, o.iters, times);
                double algbw = (double)bytes / (us * 1e3);
                double busbw = algbw * busfac;

                long long wrong = -1;
                if (o.check) {
                    long long w = 0;
                    size_t reported = 0;
                    expect_t e = {o.dtype, o.op, kind, 1, 0};
                    /* Fresh inputs; outputs preset to 0xff bytes (NaN for floating types). */
                    switch (o.coll) {
                    case COLL_ALLREDUCE:
                        fill(sbuf, count, o.dtype, kind, g_rank, 0);
                        if (!o.inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, 0, &e, &reported, coll_names[o.coll], bytes);
                        break;
                    case COLL_REDUCE_SCATTER:
                        fill(sbuf, count * n, o.dtype, kind, g_rank, 0);
                        if (!o.inplace) memset(rbuf, 0xff, count * sz);
                        run_once(&c);
                        w = check_range(c.recv, count, (uint64_t)g_rank * count, &e, &reported, coll_names[o.coll],
                                        bytes);
                        break;
                    case COLL_ALLGATHER:
                        /* Rank q contributes val(kind, q, q*count + j). */
                        memset(rbuf, 0xff, count * n * sz);
                        fill((void *)c.send, count, o.dtype, kind, g_rank, (uint64_t)g_rank * count);
                        run_once(&c);
                        e.reduce = 0;
                        for (int q = 0; q < n; q++) {
                            e.src = q;
                            w += check_range(rbuf + (size_t)q * count * sz, count, (uint64_t)q * count, &e,
                                             &reported, coll_names[o.coll], bytes);
                        }
                        break;
                    case COLL_BROADCAST:
                        if (g_rank == o.root) fill(rbuf, count, o.dtype, kind, g_rank, 0);
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
            size_t next;
            if (o.factor) {
                if (size == 0) size = 1; /* -b 0 */
                if (size > SIZE_MAX / o.factor) break;
                next = size * o.factor;
            } else {
                if (size > SIZE_MAX - o.incr) break;
                next = size + o.incr;
            }
            size = next;
        }
    }

    if (is_root) {
        fprintf(g_info, "# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        fprintf(g_info, "# Avg bus bandwidth    : %g\n", rows ? bw_sum / rows : 0.0);
        fprintf(g_info, "#\n");
        fflush(g_info);
    }
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
