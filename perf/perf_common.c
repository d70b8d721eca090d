/* perf_common: see perf_common.h. Plain C11, no ringcomm and no MPI. */

#include "perf_common.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const dtype_disp[PC_DTYPE_COUNT] = {"int8",   "uint8", "int32",    "uint32", "int64",
                                                       "uint64", "half",  "bfloat16", "float",  "double"};
static const size_t dtype_sizes[PC_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const op_names[PC_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

static const struct {
    const char *name;
    pc_dtype_t dtype;
} dtype_names[] = {
    {"int8", PC_INT8},         {"uint8", PC_UINT8},       {"int32", PC_INT32},
    {"uint32", PC_UINT32},     {"int64", PC_INT64},       {"uint64", PC_UINT64},
    {"half", PC_FLOAT16},      {"float16", PC_FLOAT16},   {"fp16", PC_FLOAT16},
    {"bfloat16", PC_BFLOAT16}, {"bf16", PC_BFLOAT16},     {"float", PC_FLOAT32},
    {"float32", PC_FLOAT32},   {"double", PC_FLOAT64},    {"float64", PC_FLOAT64},
};

const char *pc_dtype_name(pc_dtype_t dt) { return dtype_disp[dt]; }
size_t pc_dtype_size(pc_dtype_t dt) { return dtype_sizes[dt]; }
const char *pc_op_name(pc_op_t op) { return op_names[op]; }

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                   */

int pc_parse_size(const char *s, size_t *out)
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

int pc_parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    if (!s || !*s) return -1;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

void pc_opts_init(pc_opts_t *o, int allow_16bit, int nops)
{
    memset(o, 0, sizeof *o);
    o->minb = 4;
    o->maxb = (size_t)256 << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->dtype = PC_FLOAT32;
    o->op = PC_SUM;
    o->allow_16bit = allow_16bit;
    o->nops = nops;
}

int pc_parse_opt(pc_opts_t *o, int ch, const char *arg, const char **err)
{
    int v;
    *err = NULL;
    switch (ch) {
    case 'b': if (pc_parse_size(arg, &o->minb)) *err = "bad size for -b"; break;
    case 'e': if (pc_parse_size(arg, &o->maxb)) *err = "bad size for -e"; break;
    case 'f':
        if (pc_parse_int(arg, 2, 1 << 20, &v)) *err = "-f needs an integer >= 2";
        else o->factor = (size_t)v;
        break;
    case 'i':
        if (pc_parse_size(arg, &o->incr) || o->incr == 0) *err = "bad increment for -i";
        else o->factor = 0;
        break;
    case 'n': if (pc_parse_int(arg, 1, 1 << 24, &o->iters)) *err = "-n needs an integer >= 1"; break;
    case 'w': if (pc_parse_int(arg, 0, 1 << 24, &o->warmup)) *err = "-w needs an integer >= 0"; break;
    case 'c': if (pc_parse_int(arg, 0, 1, &o->check)) *err = "-c needs 0 or 1"; break;
    case 'I': if (pc_parse_int(arg, 0, 1, &o->inplace)) *err = "-I needs 0 or 1"; break;
    case 'd': {
        size_t k, nk = sizeof dtype_names / sizeof *dtype_names;
        for (k = 0; k < nk; k++) {
            pc_dtype_t t = dtype_names[k].dtype;
            if (!o->allow_16bit && (t == PC_FLOAT16 || t == PC_BFLOAT16)) continue;
            if (strcmp(arg, dtype_names[k].name) == 0) break;
        }
        if (k == nk) *err = "unknown dtype";
        else o->dtype = dtype_names[k].dtype;
        break;
    }
    case 'o': {
        int k;
        for (k = 0; k < o->nops; k++)
            if (strcmp(arg, op_names[k]) == 0) break;
        if (k == o->nops) *err = "unknown op";
        else o->op = (pc_op_t)k;
        break;
    }
    case PC_OPT_CSV: o->csv = 1; break;
    default: return 0;
    }
    return *err ? -1 : 1;
}

int pc_next_size(size_t *size, size_t factor, size_t incr)
{
    if (factor) {
        if (*size == 0) *size = 1; /* -b 0 */
        if (*size > SIZE_MAX / factor) return 0;
        *size *= factor;
    } else {
        if (*size > SIZE_MAX - incr) return 0;
        *size += incr;
    }
    return 1;
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

int pc_gen_kind(pc_op_t op)
{
    switch (op) {
    case PC_SUM:
    case PC_AVG: return PC_GEN_SUM;
    case PC_PROD: return PC_GEN_PROD;
    default: return PC_GEN_RANGE;
    }
}

pc_gen_t pc_gen(int kind, pc_dtype_t dt, int nranks)
{
    pc_gen_t g = {kind, 4};
    if (dt == PC_BFLOAT16) g.amp = nranks * 4 <= 256 ? 4 : (256 / nranks > 0 ? 256 / nranks : 1);
    if (dt == PC_FLOAT16) g.amp = nranks * 4 <= 2048 ? 4 : (2048 / nranks > 0 ? 2048 / nranks : 1);
    return g;
}

int pc_gen_inexact(const pc_gen_t *g, pc_dtype_t dt, int nranks)
{
    return (dt == PC_BFLOAT16 && (long)nranks * g->amp > 256) || (dt == PC_FLOAT16 && (long)nranks * g->amp > 2048);
}

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

static inline int val(const pc_gen_t *g, int r, uint64_t i)
{
    uint32_t h = hash2(i, r);
    switch (g->kind) {
    case PC_GEN_SUM: return (int)(h % (uint32_t)(2 * g->amp + 1)) - g->amp;
    case PC_GEN_PROD:
        if ((uint64_t)(r % 8) == i % 8) return 2;
        return (h % 3u == 0) ? -1 : 1;
    default: return (int)(h % 201u) - 100;
    }
}

int pc_val(const pc_gen_t *g, int r, uint64_t i) { return val(g, r, i); }

static inline void put(void *buf, size_t k, pc_dtype_t dt, int v)
{
    switch (dt) {
    case PC_INT8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case PC_UINT8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case PC_INT32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case PC_UINT32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    case PC_INT64: ((int64_t *)buf)[k] = (int64_t)v; break;
    case PC_UINT64: ((uint64_t *)buf)[k] = (uint64_t)(int64_t)v; break;
    case PC_FLOAT16: ((uint16_t *)buf)[k] = f2h((float)v); break;
    case PC_BFLOAT16: ((uint16_t *)buf)[k] = f2bf((float)v); break;
    case PC_FLOAT32: ((float *)buf)[k] = (float)v; break;
    case PC_FLOAT64: ((double *)buf)[k] = (double)v; break;
    default: break;
    }
}

void pc_put(void *buf, size_t k, pc_dtype_t dt, int v) { put(buf, k, dt, v); }

void pc_fill(void *buf, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base)
{
    for (size_t k = 0; k < n; k++) put(buf, k, dt, val(g, r, base + k));
}

/* Integer reduction in type T: wrap through uint64 (defined), AVG truncates after the wrap. */
#define INT_EXPECT(T)                                                                              \
    do {                                                                                           \
        T acc_ = (T)val(g, 0, i);                                                                  \
        for (int r_ = 1; r_ < nranks; r_++) {                                                      \
            T x_ = (T)val(g, r_, i);                                                               \
            switch (op) {                                                                          \
            case PC_SUM:                                                                           \
            case PC_AVG: acc_ = (T)((uint64_t)acc_ + (uint64_t)x_); break;                         \
            case PC_PROD: acc_ = (T)((uint64_t)acc_ * (uint64_t)x_); break;                        \
            case PC_MIN: if (x_ < acc_) acc_ = x_; break;                                           \
            case PC_MAX: if (x_ > acc_) acc_ = x_; break;                                           \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
        if (op == PC_AVG) acc_ = (T)(acc_ / nranks);                                               \
        memcpy(out, &acc_, sizeof acc_);                                                           \
    } while (0)

/* Floating reduction in W; the inputs are small integers so every partial result is exact. */
#define FP_EXPECT(W, result)                                                                       \
    do {                                                                                           \
        W acc_ = (W)val(g, 0, i);                                                                  \
        for (int r_ = 1; r_ < nranks; r_++) {                                                      \
            W x_ = (W)val(g, r_, i);                                                               \
            switch (op) {                                                                          \
            case PC_SUM:                                                                           \
            case PC_AVG: acc_ = acc_ + x_; break;                                                  \
            case PC_PROD: acc_ = acc_ * x_; break;                                                 \
            case PC_MIN: if (x_ < acc_) acc_ = x_; break;                                           \
            case PC_MAX: if (x_ > acc_) acc_ = x_; break;                                           \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
        if (op == PC_AVG) acc_ = acc_ / (W)nranks;                                                 \
        result = acc_;                                                                             \
    } while (0)

void pc_expect_reduce(void *out, pc_dtype_t dt, pc_op_t op, const pc_gen_t *g, int nranks, uint64_t i)
{
    float f;
    double d;
    uint16_t h;
    switch (dt) {
    case PC_INT8: INT_EXPECT(int8_t); break;
    case PC_UINT8: INT_EXPECT(uint8_t); break;
    case PC_INT32: INT_EXPECT(int32_t); break;
    case PC_UINT32: INT_EXPECT(uint32_t); break;
    case PC_INT64: INT_EXPECT(int64_t); break;
    case PC_UINT64: INT_EXPECT(uint64_t); break;
    case PC_FLOAT16: FP_EXPECT(float, f); h = f2h(f); memcpy(out, &h, 2); break;
    case PC_BFLOAT16: FP_EXPECT(float, f); h = f2bf(f); memcpy(out, &h, 2); break;
    case PC_FLOAT32: FP_EXPECT(float, f); memcpy(out, &f, 4); break;
    case PC_FLOAT64: FP_EXPECT(double, d); memcpy(out, &d, 8); break;
    default: break;
    }
}

int pc_same(const void *a, const void *b, pc_dtype_t dt)
{
    switch (dt) {
    case PC_FLOAT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return h2f(x) == h2f(y);
    }
    case PC_BFLOAT16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        return bf2f(x) == bf2f(y);
    }
    case PC_FLOAT32: {
        float x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return x == y;
    }
    case PC_FLOAT64: {
        double x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        return x == y;
    }
    default: return memcmp(a, b, dtype_sizes[dt]) == 0;
    }
}

void pc_describe(char *s, size_t n, const void *p, pc_dtype_t dt)
{
    switch (dt) {
    case PC_INT8: snprintf(s, n, "%d", *(const int8_t *)p); break;
    case PC_UINT8: snprintf(s, n, "%u", *(const uint8_t *)p); break;
    case PC_INT32: snprintf(s, n, "%" PRId32, *(const int32_t *)p); break;
    case PC_UINT32: snprintf(s, n, "%" PRIu32, *(const uint32_t *)p); break;
    case PC_INT64: snprintf(s, n, "%" PRId64, *(const int64_t *)p); break;
    case PC_UINT64: snprintf(s, n, "%" PRIu64, *(const uint64_t *)p); break;
    case PC_FLOAT16: snprintf(s, n, "%g (0x%04x)", (double)h2f(*(const uint16_t *)p), *(const uint16_t *)p); break;
    case PC_BFLOAT16: snprintf(s, n, "%g (0x%04x)", (double)bf2f(*(const uint16_t *)p), *(const uint16_t *)p); break;
    case PC_FLOAT32: snprintf(s, n, "%.9g", (double)*(const float *)p); break;
    case PC_FLOAT64: snprintf(s, n, "%.17g", *(const double *)p); break;
    default: snprintf(s, n, "?"); break;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Timing and buffers                                                                        */

double pc_now_us(void)
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

double pc_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return (n % 2) ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

void *pc_alloc_buf(size_t bytes, size_t *alloc)
{
    size_t align = 4096, n = (bytes + align - 1) / align * align;
    if (n == 0) n = align;
    *alloc = n;
    void *p = aligned_alloc(align, n);
    if (p) memset(p, 0, n); /* touch every page before timing */
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* Output                                                                                    */

void pc_print_cmdline(FILE *f, const char *prog, int argc, char **argv)
{
    fprintf(f, "# %s:", prog);
    for (int k = 0; k < argc; k++) fprintf(f, " %s", argv[k]);
    fprintf(f, "\n");
}

void pc_print_sweep(FILE *f, const pc_opts_t *o)
{
    if (o->factor)
        fprintf(f, "# minBytes %zu  maxBytes %zu  step: %zu(factor)  warmup iters: %d  iters: %d\n", o->minb,
                o->maxb, o->factor, o->warmup, o->iters);
    else
        fprintf(f, "# minBytes %zu  maxBytes %zu  step: %zu(bytes)  warmup iters: %d  iters: %d\n", o->minb,
                o->maxb, o->incr, o->warmup, o->iters);
}

void pc_print_date(FILE *f)
{
    char date[64];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&t));
    fprintf(f, "# date %s\n", date);
}

void pc_print_columns(int csv)
{
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
}

void pc_print_row(int csv, const char *coll, int nranks, size_t bytes, size_t count, const char *type,
                  const char *redop, int root, int inplace, double us, double algbw, double busbw, long long wrong)
{
    if (csv)
        printf("%s,%d,%zu,%zu,%s,%s,%d,%d,%.3f,%.6f,%.6f,%lld\n", coll, nranks, bytes, count, type, redop, root,
               inplace, us, algbw, busbw, wrong);
    else
        printf("  %10zu  %12zu  %8s  %6s  %6d  %10.2f  %8.3f  %8.3f  %6lld\n", bytes, count, type, redop, root, us,
               algbw, busbw, wrong);
    fflush(stdout);
}

void pc_print_footer(FILE *f, long long wrong_total, double bw_sum, int rows)
{
    fprintf(f, "# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    fprintf(f, "# Avg bus bandwidth    : %g\n", rows ? bw_sum / rows : 0.0);
    fprintf(f, "#\n");
    fflush(f);
}
