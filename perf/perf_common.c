/* perf_common: see perf_common.h. Plain C11, no ringcomm and no MPI. */

#include "perf_common.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
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
    /* strtoull alone would take " 12", "+12", "-1" (wrapped) and a bare suffix ("K" = 0). */
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1;
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

int pc_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    if (!s || !*s) return -1;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod takes "nan" and "inf"; the range test below rejects them (NaN compares false). */
    if (*end != '\0' || errno == ERANGE || !(v >= lo && v <= hi)) return -1;
    *out = v;
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
    o->fmt = PC_FMT_TABLE;
    o->alpha_us = -1;
    o->link_gbps = -1;
    o->probe = 1;
    o->probe_bytes = (size_t)64 << 20;
    o->algos = PC_ALGO_BIT(PC_ALGO_RING);
    o->mem = PC_MEM_HOST;
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
    case PC_OPT_CSV:
    case PC_OPT_JSON: {
        pc_fmt_t f = ch == PC_OPT_CSV ? PC_FMT_CSV : PC_FMT_JSON;
        if (o->fmt != PC_FMT_TABLE && o->fmt != f) *err = "--csv and --json exclude each other";
        else o->fmt = f;
        break;
    }
    /* 1e6 us and 1e6 Gbit/s: far beyond any real link, small enough that the model stays finite. */
    case PC_OPT_ALPHA_US:
        if (pc_parse_double(arg, 0, 1e6, &o->alpha_us)) *err = "--alpha-us needs microseconds >= 0";
        break;
    case PC_OPT_LINK_GBPS:
        if (pc_parse_double(arg, 1e-6, 1e6, &o->link_gbps)) *err = "--link-gbps needs Gbit/s > 0";
        break;
    case PC_OPT_NO_PROBE: o->probe = 0; break;
    case PC_OPT_PROBE_BYTES:
        if (pc_parse_size(arg, &o->probe_bytes) || o->probe_bytes == 0) *err = "bad size for --probe-bytes";
        break;
    case 'A':
        if (strcmp(arg, "ring") == 0) o->algos = PC_ALGO_BIT(PC_ALGO_RING);
        else if (strcmp(arg, "ps") == 0) o->algos = PC_ALGO_BIT(PC_ALGO_PS);
        else if (strcmp(arg, "both") == 0) o->algos = PC_ALGO_BIT(PC_ALGO_RING) | PC_ALGO_BIT(PC_ALGO_PS);
        else *err = "-A needs ring, ps or both";
        break;
    case 'G':
        if (strcmp(arg, "host") == 0) o->mem = PC_MEM_HOST;
        else if (strcmp(arg, "cuda") == 0) o->mem = PC_MEM_CUDA;
        else if (strcmp(arg, "both") == 0) o->mem = PC_MEM_BOTH;
        else *err = "-G needs host, cuda or both";
        break;
    default: return 0;
    }
    return *err ? -1 : 1;
}

int pc_next_size(size_t *size, size_t factor, size_t incr)
{
    if (factor) {
        if (*size == 0) { /* -b 0: the next row is 1 B, then the factor applies */
            *size = 1;
            return 1;
        }
        if (*size > SIZE_MAX / factor) return 0;
        *size *= factor;
    } else {
        if (*size > SIZE_MAX - incr) return 0;
        *size += incr;
    }
    return 1;
}

size_t pc_sweep_rows(const pc_opts_t *o, size_t unit)
{
    size_t rows = 0, last = (size_t)-1;
    if (unit == 0) return 0;
    for (size_t size = o->minb; size <= o->maxb;) {
        size_t bytes = size / unit * unit;
        if (bytes > 0 && bytes != last) {
            last = bytes;
            rows++;
        }
        if (!pc_next_size(&size, o->factor, o->incr)) break;
    }
    return rows;
}

/* ---------------------------------------------------------------------------------------- */
/* Collectives, bus bandwidth, the alpha-beta model                                          */

static const char *const coll_names[PC_COLL_COUNT] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                                      "barrier"};
static const char *const algo_names[PC_ALGO_COUNT] = {"ring", "ps", "rd", "tree", "rh", "sm"};

const char *pc_coll_name(pc_coll_t c) { return coll_names[c]; }
const char *pc_algo_name(pc_algo_t a) { return algo_names[a]; }

int pc_parse_coll(const char *s, pc_coll_t *out)
{
    static const struct {
        const char *name;
        pc_coll_t coll;
    } alias[] = {{"reducescatter", PC_COLL_REDUCE_SCATTER}, {"all_reduce", PC_COLL_ALLREDUCE},
                 {"all_gather", PC_COLL_ALLGATHER}};
    if (!s) return -1;
    for (int k = 0; k < PC_COLL_COUNT; k++)
        if (strcmp(s, coll_names[k]) == 0) {
            *out = (pc_coll_t)k;
            return 0;
        }
    for (size_t k = 0; k < sizeof alias / sizeof *alias; k++)
        if (strcmp(s, alias[k].name) == 0) {
            *out = alias[k].coll;
            return 0;
        }
    return -1;
}

double pc_busbw_factor(pc_coll_t c, int nranks)
{
    double n = nranks < 1 ? 1 : nranks;
    switch (c) {
    case PC_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PC_COLL_REDUCE_SCATTER:
    case PC_COLL_ALLGATHER: return (n - 1) / n;
    case PC_COLL_BROADCAST: return 1;
    default: return 0;
    }
}

/* Dependent exchanges of recursive doubling: log2 p rounds, and the fold and unfold when p < n. */
static int rd_steps(int nranks)
{
    int p = 1, lg = 0;
    while (p <= nranks / 2) {
        p *= 2;
        lg++;
    }
    return lg + (nranks > p ? 2 : 0);
}

/* The shared-memory all-reduce (PC_ALGO_SM) has no link of its own: its rows get the
 * collective's formula (the ring's), with the alpha and B measured between ring neighbours
 * over the same shared memory, so eff says how it compares with that bound. */
double pc_model_us(pc_coll_t c, pc_algo_t a, int nranks, size_t bytes, double alpha_s, double bw_Bps)
{
    if (a == PC_ALGO_PS && c != PC_COLL_ALLREDUCE) return -1;
    if (a == PC_ALGO_RD && c != PC_COLL_ALLREDUCE && c != PC_COLL_BARRIER) return -1;
    if (a == PC_ALGO_TREE && c != PC_COLL_BROADCAST) return -1;
    if (a == PC_ALGO_RH && c != PC_COLL_ALLREDUCE) return -1;
    if (nranks <= 1) return 0; /* nothing crosses a link */
    const double n = nranks, s = (double)bytes;
    if (alpha_s < 0 || (c != PC_COLL_BARRIER && !(bw_Bps > 0))) return -1;
    double t;
    if (a == PC_ALGO_PS) {
        t = 2 * (n - 1) * (alpha_s + s / bw_Bps);
    } else if (a == PC_ALGO_RH) {
        /* 2 log2 p halving/doubling steps moving 2(p-1)/p of S, plus the fold and unfold of
         * the whole buffer when p < n. */
        int steps = rd_steps(nranks), fold = nranks & (nranks - 1) ? 2 : 0, lg = steps - fold;
        double p = 1 << lg;
        t = 2 * lg * alpha_s + 2 * (p - 1) / p * s / bw_Bps + fold * (alpha_s + s / bw_Bps);
    } else if (a == PC_ALGO_RD || a == PC_ALGO_TREE) {
        /* The tree's depth from a root in a fold pair (rank 0 is one when n > p) equals
         * recursive doubling's step count: fold, log2 p levels, unfold. */
        t = rd_steps(nranks) * (alpha_s + (c == PC_COLL_BARRIER ? 0 : s / bw_Bps));
    } else {
        switch (c) {
        case PC_COLL_ALLREDUCE: t = 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * s / bw_Bps; break;
        case PC_COLL_REDUCE_SCATTER:
        case PC_COLL_ALLGATHER: t = (n - 1) * alpha_s + (n - 1) / n * s / bw_Bps; break;
        case PC_COLL_BROADCAST: t = (n - 1) * alpha_s + s / bw_Bps; break;
        case PC_COLL_BARRIER: t = (n - 1) * alpha_s; break;
        default: return -1;
        }
    }
    return t * 1e6;
}

const char *pc_model_formula(pc_coll_t c, pc_algo_t a)
{
    if (a == PC_ALGO_PS) return c == PC_COLL_ALLREDUCE ? "2(n-1)*(alpha + S/B)" : "-";
    if (a == PC_ALGO_RH)
        return c == PC_COLL_ALLREDUCE ? "2log2(p)*alpha + 2(p-1)/p*S/B + 2[n>p]*(alpha + S/B), p = largest power of 2 <= n" : "-";
    if (a == PC_ALGO_TREE)
        return c == PC_COLL_BROADCAST ? "(log2(p) + 2[n>p])*(alpha + S/B), p = largest power of 2 <= n (root in a fold pair)"
                                      : "-";
    if (a == PC_ALGO_RD) {
        if (c == PC_COLL_ALLREDUCE) return "(log2(p) + 2[n>p])*(alpha + S/B), p = largest power of 2 <= n";
        return c == PC_COLL_BARRIER ? "(log2(p) + 2[n>p])*alpha, p = largest power of 2 <= n" : "-";
    }
    switch (c) {
    case PC_COLL_ALLREDUCE: return "2(n-1)*alpha + 2(n-1)/n*S/B";
    case PC_COLL_REDUCE_SCATTER:
    case PC_COLL_ALLGATHER: return "(n-1)*alpha + (n-1)/n*S/B";
    case PC_COLL_BROADCAST: return "(n-1)*alpha + S/B (pipelined chain, fill left out)";
    case PC_COLL_BARRIER: return "(n-1)*alpha (one token pass)";
    default: return "-";
    }
}

double pc_eff(double model_us, double us)
{
    if (!(model_us > 0) || !(us > 0)) return -1;
    return model_us / us;
}

double pc_gbps_to_Bps(double gbit_per_s) { return gbit_per_s * 1e9 / 8; }

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

static void complement(unsigned char *o, const unsigned char *exp, size_t sz)
{
    for (size_t b = 0; b < sz; b++) o[b] = (unsigned char)~exp[b];
}

void pc_preset_unlike_reduce(void *out, size_t n, pc_dtype_t dt, pc_op_t op, const pc_gen_t *g, int nranks,
                             uint64_t base)
{
    const size_t sz = dtype_sizes[dt];
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        pc_expect_reduce(exp, dt, op, g, nranks, base + k);
        complement((unsigned char *)out + k * sz, exp, sz);
    }
}

void pc_preset_unlike_copy(void *out, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base)
{
    const size_t sz = dtype_sizes[dt];
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        put(exp, 0, dt, val(g, r, base + k));
        complement((unsigned char *)out + k * sz, exp, sz);
    }
}

size_t pc_count_changed(const void *buf, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base,
                        size_t *first)
{
    const size_t sz = dtype_sizes[dt];
    unsigned char exp[8];
    size_t bad = 0;
    *first = n;
    for (size_t k = 0; k < n; k++) {
        put(exp, 0, dt, val(g, r, base + k));
        if (memcmp((const unsigned char *)buf + k * sz, exp, sz) != 0) {
            if (!bad) *first = k;
            bad++;
        }
    }
    return bad;
}

/* Byte k of the guard pattern: 0x80..0x9a, int8 -128..-102 and uint8 128..154, outside the
 * check data's [-100, 100]; wider elements made of such bytes are large negative integers or
 * tiny negative floats, never the small integers of the check data. So an element of the
 * call's data written over the pattern differs from it. */
static unsigned char guard_byte(size_t k) { return (unsigned char)(0x80 + k * 7 % 27); }

void pc_guard_fill(void *p, size_t n)
{
    for (size_t k = 0; k < n; k++) ((unsigned char *)p)[k] = guard_byte(k);
}

size_t pc_guard_count(const void *p, size_t n, size_t esize, size_t *first)
{
    const unsigned char *q = p;
    size_t bad = 0;
    *first = n;
    if (esize == 0) esize = 1;
    for (size_t e = 0; e < n; e += esize) {
        int differs = 0;
        for (size_t k = e; k < e + esize && k < n; k++)
            if (q[k] != guard_byte(k)) {
                if (*first == n) *first = k;
                differs = 1;
            }
        bad += (size_t)differs;
    }
    return bad;
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
    size_t align = 4096;
    if (bytes > SIZE_MAX - align) { /* rounding up would wrap to a tiny buffer */
        *alloc = bytes;
        return NULL;
    }
    size_t n = (bytes + align - 1) / align * align;
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

void pc_date_string(char *s, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(s, n, "%Y-%m-%d %H:%M:%S %z", &tm)) snprintf(s, n, "?");
}

void pc_print_date(FILE *f)
{
    char date[64];
    pc_date_string(date, sizeof date);
    fprintf(f, "# date %s\n", date);
}

void pc_print_link(FILE *f, const pc_link_t *l)
{
    if (l->alpha_s >= 0) fprintf(f, "# alpha %.3g us (%s)", l->alpha_s * 1e6, l->alpha_src);
    else fprintf(f, "# alpha - (%s)", l->alpha_src);
    if (l->bw_Bps > 0)
        fprintf(f, "  link %.3g GB/s = %.3g Gbit/s (%s)\n", l->bw_Bps / 1e9, l->bw_Bps * 8 / 1e9, l->bw_src);
    else fprintf(f, "  link - (%s)\n", l->bw_src);
}

static void print_columns(pc_fmt_t fmt, int mem)
{
    if (fmt == PC_FMT_CSV) {
        /* New columns go at the end: scripts read the first twelve by position. */
        printf("collective,nranks,size,count,type,redop,root,inplace,time_us,algbw_GBps,busbw_GBps,wrong,"
               "model_us,eff,algo,alpha_us,link_GBps%s\n",
               mem ? ",mem" : "");
    } else if (fmt == PC_FMT_TABLE) {
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s  %10s  %5s  %4s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "model", "eff", "algo");
        printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s  %10s  %5s  %4s\n", "(B)", "(elements)", "", "", "",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "", "");
    }
    fflush(stdout);
}

void pc_print_columns(pc_fmt_t fmt) { print_columns(fmt, 0); }
void pc_print_columns_mem(pc_fmt_t fmt) { print_columns(fmt, 1); }

/* A JSON string literal; the names printed here are ASCII, but argv may hold anything. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* A JSON number, or null where the value is unknown (JSON has no NaN). */
static void json_num(FILE *f, const char *fmt, double v, int known)
{
    if (known && isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

void pc_row_measured(pc_row_t *r, pc_coll_t c, pc_algo_t a, size_t bytes, size_t count, double us, long long wrong)
{
    r->bytes = bytes;
    r->count = count;
    r->us = us;
    r->algbw = (double)bytes / (us * 1e3);
    r->busbw = r->algbw * pc_busbw_factor(c, r->nranks);
    r->wrong = wrong;
    r->model_us = pc_model_us(c, a, r->nranks, bytes, r->link->alpha_s, r->link->bw_Bps);
}

void pc_print_row(pc_out_t *out, const pc_row_t *r)
{
    const double eff = pc_eff(r->model_us, r->us);
    const int has_alpha = r->link && r->link->alpha_s >= 0, has_bw = r->link && r->link->bw_Bps > 0;
    switch (out->fmt) {
    case PC_FMT_CSV:
        printf("%s,%d,%zu,%zu,%s,%s,%d,%d,%.3f,%.6f,%.6f,%lld,", r->coll, r->nranks, r->bytes, r->count, r->type,
               r->redop, r->root, r->inplace, r->us, r->algbw, r->busbw, r->wrong);
        /* Unknown values are empty fields. */
        if (r->model_us >= 0) printf("%.3f", r->model_us);
        printf(",");
        if (eff >= 0) printf("%.4f", eff);
        printf(",%s,", r->algo);
        if (has_alpha) printf("%.3f", r->link->alpha_s * 1e6);
        printf(",");
        if (has_bw) printf("%.6f", r->link->bw_Bps / 1e9);
        if (r->mem) printf(",%s", r->mem);
        printf("\n");
        break;
    case PC_FMT_JSON:
        printf("%s\n    {\"collective\": ", out->rows ? "," : "");
        json_str(stdout, r->coll);
        printf(", \"algo\": ");
        json_str(stdout, r->algo);
        printf(", \"nranks\": %d, \"size\": %zu, \"count\": %zu, \"type\": ", r->nranks, r->bytes, r->count);
        json_str(stdout, r->type);
        printf(", \"redop\": ");
        json_str(stdout, r->redop);
        printf(", \"root\": %d, \"inplace\": %d, \"time_us\": %.3f, \"algbw_GBps\": %.6f, \"busbw_GBps\": %.6f, "
               "\"wrong\": ",
               r->root, r->inplace, r->us, r->algbw, r->busbw);
        json_num(stdout, "%.0f", (double)r->wrong, r->wrong >= 0);
        printf(", \"model_us\": ");
        json_num(stdout, "%.3f", r->model_us, r->model_us >= 0);
        printf(", \"eff\": ");
        json_num(stdout, "%.4f", eff, eff >= 0);
        if (r->mem) {
            printf(", \"mem\": ");
            json_str(stdout, r->mem);
        }
        printf("}");
        break;
    default: {
        char model[32] = "-", effs[32] = "-";
        if (r->model_us >= 0) snprintf(model, sizeof model, "%.2f", r->model_us);
        if (eff >= 0) snprintf(effs, sizeof effs, "%.2f", eff);
        printf("  %10zu  %12zu  %8s  %6s  %6d  %10.2f  %8.3f  %8.3f  %6lld  %10s  %5s  %4s\n", r->bytes, r->count,
               r->type, r->redop, r->root, r->us, r->algbw, r->busbw, r->wrong, model, effs, r->algo);
        break;
    }
    }
    out->rows++;
    fflush(stdout);
}

void pc_json_begin(const pc_meta_t *m)
{
    FILE *f = stdout;
    char date[64];
    pc_date_string(date, sizeof date);
    const pc_opts_t *o = m->opts;
    const pc_link_t *l = m->link;
    fprintf(f, "{\n  \"program\": ");
    json_str(f, m->program);
    fprintf(f, ",\n  \"library\": ");
    json_str(f, m->library);
    fprintf(f, ",\n  \"host\": ");
    json_str(f, m->host);
    fprintf(f, ",\n  \"date\": ");
    json_str(f, date);
    fprintf(f, ",\n  \"command\": [");
    for (int k = 0; k < m->argc; k++) {
        if (k) fprintf(f, ", ");
        json_str(f, m->argv[k]);
    }
    fprintf(f, "],\n  \"collective\": ");
    json_str(f, m->collective);
    fprintf(f, ", \"algorithms\": ");
    json_str(f, m->algos);
    fprintf(f, ", \"nranks\": %d, \"dtype\": ", m->nranks);
    json_str(f, m->dtype);
    fprintf(f, ", \"op\": ");
    json_str(f, m->op);
    fprintf(f, ", \"memory\": ");
    json_str(f, m->mem);
    if (m->gpu) {
        fprintf(f, ", \"gpu\": ");
        json_str(f, m->gpu);
    }
    fprintf(f, ",\n  \"root\": %d, \"inplace\": %d, \"async\": %d, \"check\": %d, \"min_bytes\": %zu, "
               "\"max_bytes\": %zu, \"step_factor\": %zu, \"step_bytes\": %zu, \"warmup\": %d, \"iters\": %d",
            m->root, m->inplace, m->async, m->check, o->minb, o->maxb, o->factor, o->factor ? 0 : o->incr, o->warmup,
            o->iters);
    fprintf(f, ",\n  \"alpha_us\": ");
    json_num(f, "%.4f", l->alpha_s * 1e6, l->alpha_s >= 0);
    fprintf(f, ", \"alpha_source\": ");
    json_str(f, l->alpha_src);
    fprintf(f, ",\n  \"link_GBps\": ");
    json_num(f, "%.6f", l->bw_Bps / 1e9, l->bw_Bps > 0);
    fprintf(f, ", \"link_Gbps\": ");
    json_num(f, "%.6f", l->bw_Bps * 8 / 1e9, l->bw_Bps > 0);
    fprintf(f, ", \"link_source\": ");
    json_str(f, l->bw_src);
    fprintf(f, ",\n  \"rows\": [");
    fflush(f);
}

void pc_json_end(long long wrong_total, int checked)
{
    /* Unchecked results are neither right nor wrong: null, as the rows' "wrong". */
    if (!checked) printf("\n  ],\n  \"wrong_total\": null, \"ok\": null\n}\n");
    else printf("\n  ],\n  \"wrong_total\": %lld, \"ok\": %s\n}\n", wrong_total, wrong_total ? "false" : "true");
    fflush(stdout);
}

void pc_print_footer(FILE *f, const char *label, int checked, long long wrong_total, double bw_sum, int rows)
{
    char sfx[64] = "";
    if (label) snprintf(sfx, sizeof sfx, " (%s)", label);
    if (!checked) fprintf(f, "# Out of bounds values : N/A (not checked, -c 0)%s\n", sfx);
    else fprintf(f, "# Out of bounds values : %lld %s%s\n", wrong_total, wrong_total ? "FAILED" : "OK", sfx);
    fprintf(f, "# Avg bus bandwidth    : %g%s\n", rows ? bw_sum / rows : 0.0, sfx);
    fprintf(f, "#\n");
    fflush(f);
}
