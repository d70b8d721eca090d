/*
 * Independent reference model for the collective tests; see reference.h.
 *
 * Arithmetic on integer elements is done on uint64_t masked to the element width, so wrap is
 * defined behaviour and signedness only matters where the contract says it does (MIN, MAX and
 * the truncating division of RING_AVG).
 */
#include "reference.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

uint64_t ref_mix64(uint64_t x)
{
    /* splitmix64 finaliser: cheap and every input bit reaches every output bit. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t ref_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = ref_mix64(a ^ 0x243f6a8885a308d3ULL);
    h = ref_mix64(h ^ b);
    h = ref_mix64(h ^ c);
    return ref_mix64(h ^ d);
}

/* Per-(seed, op, rank) stream; element i is the i-th splitmix64 output of that stream, so a
 * rank's buffer can be regenerated piecewise (any `first`) at one multiply-mix per element. */
static uint64_t stream_base(uint64_t seed, uint64_t opidx, int rank)
{
    return ref_hash4(seed, opidx, (uint64_t)(int64_t)rank, 0x5151);
}

static inline uint64_t stream_elem(uint64_t base, size_t i)
{
    return ref_mix64(base + ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ULL);
}

size_t ref_dtype_size(ring_dtype_t dt)
{
    switch (dt) {
    case RING_INT8:
    case RING_UINT8: return 1;
    case RING_FLOAT16:
    case RING_BFLOAT16: return 2;
    case RING_INT32:
    case RING_UINT32:
    case RING_FLOAT32: return 4;
    case RING_INT64:
    case RING_UINT64:
    case RING_FLOAT64: return 8;
    default: return 0;
    }
}

int ref_dtype_is_float(ring_dtype_t dt)
{
    return dt == RING_FLOAT16 || dt == RING_BFLOAT16 || dt == RING_FLOAT32 || dt == RING_FLOAT64;
}

static int dtype_is_signed(ring_dtype_t dt)
{
    return dt == RING_INT8 || dt == RING_INT32 || dt == RING_INT64;
}

const char *ref_dtype_name(ring_dtype_t dt)
{
    static const char *const names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                        "uint64",  "float16", "bfloat16", "float32", "float64"};
    return (unsigned)dt < sizeof names / sizeof names[0] ? names[dt] : "invalid-dtype";
}

const char *ref_op_name(ring_op_t op)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "invalid-op";
}

/* ---- fp16 / bf16, bit by bit ---- */

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ref_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t ref_float_to_half(float f)
{
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* >= 2^16: inf */
    if (ax < 0x38800000u) {
        /* Below the smallest normal half (2^-14): the result is a multiple of 2^-24. */
        uint32_t e = ax >> 23;
        if (e == 0) return sign; /* float subnormals are far below 2^-25 */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u; /* value = mant * 2^(e-150) */
        uint32_t shift = 126u - e;                    /* value / 2^-24 = mant >> shift */
        if (shift > 24) return sign;                  /* < 2^-25: rounds to zero */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (q & 1u))) q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: still right */
    }
    uint32_t e = (ax >> 23) - 127u + 15u;
    uint32_t m = ax & 0x7fffffu;
    uint32_t q = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    /* A carry out of the mantissa bumps the exponent, up to inf: the encoding makes that right. */
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float ref_bf16_to_float(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t ref_float_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- element storage ---- */

static uint64_t load_bits(const void *p, size_t sz)
{
    switch (sz) {
    case 1: { uint8_t v; memcpy(&v, p, 1); return v; }
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_bits(void *p, size_t sz, uint64_t bits)
{
    switch (sz) {
    case 1: { uint8_t v = (uint8_t)bits; memcpy(p, &v, 1); break; }
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

static uint64_t d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static double u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Symmetric integer in [-bound, bound]. */
static int64_t sym(uint64_t h, uint64_t bound)
{
    return (int64_t)(h % (2 * bound + 1)) - (int64_t)bound;
}

static uint64_t width_mask(size_t sz)
{
    return sz == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (sz * 8)) - 1);
}

/* Element bits for one contribution, before masking to the element width. */
static uint64_t gen_raw(ring_dtype_t dt, ring_op_t op, ref_kind_t kind, int nranks, uint64_t h)
{
    uint64_t n = nranks > 0 ? (uint64_t)nranks : 1;
    if (kind == REF_BITS || !ref_dtype_is_float(dt)) return h; /* integers: full range */
    if (kind == REF_NOISE) {
        double u = (double)(h >> 11) * 0x1p-53;
        double x = ldexp(2.0 * u - 1.0, (int)(h & 7u) - 3);
        switch (dt) {
        case RING_FLOAT16: return ref_float_to_half((float)x);
        case RING_BFLOAT16: return ref_float_to_bf16((float)x);
        case RING_FLOAT32: return f2u((float)x);
        default: return d2u(x);
        }
    }
    if (op == RING_PROD) {
        static const float pv[4] = {-2.0f, -1.0f, 1.0f, 2.0f};
        float v = pv[h & 3u];
        switch (dt) {
        case RING_FLOAT16: return ref_float_to_half(v);
        case RING_BFLOAT16: return ref_float_to_bf16(v);
        case RING_FLOAT32: return f2u(v);
        default: return d2u((double)v);
        }
    }
    if (op == RING_MIN || op == RING_MAX) {
        /* Any finite value but -0: +0 and -0 compare equal, so which one wins would depend
         * on the order of combination. Clearing the top exponent bit makes inf/NaN finite. */
        switch (dt) {
        case RING_FLOAT16: {
            uint64_t b = h & 0xffffu;
            if ((b & 0x7c00u) == 0x7c00u) b &= ~(uint64_t)0x4000u;
            return b == 0x8000u ? 0 : b;
        }
        case RING_BFLOAT16: {
            uint64_t b = h & 0xffffu;
            if ((b & 0x7f80u) == 0x7f80u) b &= ~(uint64_t)0x4000u;
            return b == 0x8000u ? 0 : b;
        }
        case RING_FLOAT32: {
            uint64_t b = h & 0xffffffffu;
            if ((b & 0x7f800000u) == 0x7f800000u) b &= ~(uint64_t)0x40000000u;
            return b == 0x80000000u ? 0 : b;
        }
        default: {
            uint64_t b = h;
            if ((b & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL) b &= ~0x4000000000000000ULL;
            return b == 0x8000000000000000ULL ? 0 : b;
        }
        }
    }
    /* SUM / AVG: every partial sum of any subset of ranks must be exactly representable. */
    switch (dt) {
    case RING_FLOAT16: return ref_float_to_half((float)sym(h, 2048 / n));
    case RING_BFLOAT16: return ref_float_to_bf16((float)sym(h, 256 / n));
    case RING_FLOAT32: return f2u((float)sym(h, ((uint64_t)1 << 23) / n) * 0x1p-8f);
    default: return d2u((double)sym(h, ((uint64_t)1 << 52) / n) * 0x1p-16);
    }
}

/* Element bits for one contribution: exactly what is stored, as the reductions compare them. */
static uint64_t gen_bits(ring_dtype_t dt, ring_op_t op, ref_kind_t kind, int nranks, uint64_t h)
{
    return gen_raw(dt, op, kind, nranks, h) & width_mask(ref_dtype_size(dt));
}

void ref_fill(void *buf, size_t count, ring_dtype_t dt, ring_op_t op, ref_kind_t kind, int nranks,
              uint64_t seed, uint64_t opidx, int rank, size_t first)
{
    size_t sz = ref_dtype_size(dt);
    uint64_t base = stream_base(seed, opidx, rank);
    unsigned char *p = buf;
    for (size_t i = 0; i < count; i++)
        store_bits(p + i * sz, sz, gen_bits(dt, op, kind, nranks, stream_elem(base, first + i)));
}

void ref_fill_garbage(void *buf, size_t nbytes, uint64_t salt)
{
    unsigned char *p = buf;
    uint64_t base = ref_mix64(salt ^ 0x6a09e667f3bcc909ULL);
    size_t i = 0;
    for (; i + 8 <= nbytes; i += 8) {
        uint64_t h = stream_elem(base, i);
        memcpy(p + i, &h, 8);
    }
    if (i < nbytes) {
        uint64_t h = stream_elem(base, i);
        memcpy(p + i, &h, nbytes - i);
    }
}

/* ---- reductions ---- */

static uint64_t int_combine(uint64_t a, uint64_t b, ring_op_t op, size_t sz, int is_signed)
{
    uint64_t mask = width_mask(sz);
    /* Flipping the sign bit maps two's-complement order onto unsigned order. */
    uint64_t flip = is_signed ? (uint64_t)1 << (sz * 8 - 1) : 0;
    switch (op) {
    case RING_SUM:
    case RING_AVG: return (a + b) & mask;
    case RING_PROD: return (a * b) & mask;
    case RING_MIN: return ((a ^ flip) < (b ^ flip)) ? a : b;
    default: return ((a ^ flip) > (b ^ flip)) ? a : b;
    }
}

static uint64_t int_avg(uint64_t sum, int nranks, size_t sz, int is_signed)
{
    uint64_t mask = width_mask(sz);
    uint64_t n = (uint64_t)nranks;
    if (!is_signed) return sum / n;
    uint64_t signbit = (uint64_t)1 << (sz * 8 - 1);
    if (!(sum & signbit)) return sum / n;
    uint64_t mag = (~sum + 1) & mask; /* |sum|; 2^(w-1) for the most negative value */
    return (~(mag / n) + 1) & mask;   /* truncation towards zero */
}

static float float_combine(float a, float b, ring_op_t op)
{
    switch (op) {
    case RING_SUM:
    case RING_AVG: return a + b;
    case RING_PROD: return a * b;
    case RING_MIN: return a < b ? a : b;
    default: return a > b ? a : b;
    }
}

static double double_combine(double a, double b, ring_op_t op)
{
    switch (op) {
    case RING_SUM:
    case RING_AVG: return a + b;
    case RING_PROD: return a * b;
    case RING_MIN: return a < b ? a : b;
    default: return a > b ? a : b;
    }
}

/* acc = acc op x on raw element bits, rounding 16-bit floats back after the step. */
static uint64_t combine_bits(uint64_t acc, uint64_t x, ring_dtype_t dt, ring_op_t op)
{
    switch (dt) {
    case RING_FLOAT16:
        return ref_float_to_half(float_combine(ref_half_to_float((uint16_t)acc), ref_half_to_float((uint16_t)x), op));
    case RING_BFLOAT16:
        return ref_float_to_bf16(float_combine(ref_bf16_to_float((uint16_t)acc), ref_bf16_to_float((uint16_t)x), op));
    case RING_FLOAT32: return f2u(float_combine(u2f((uint32_t)acc), u2f((uint32_t)x), op));
    case RING_FLOAT64: return d2u(double_combine(u2d(acc), u2d(x), op));
    default: return int_combine(acc, x, op, ref_dtype_size(dt), dtype_is_signed(dt));
    }
}

static uint64_t avg_bits(uint64_t sum, ring_dtype_t dt, int nranks)
{
    switch (dt) {
    case RING_FLOAT16: return ref_float_to_half(ref_half_to_float((uint16_t)sum) / (float)nranks);
    case RING_BFLOAT16: return ref_float_to_bf16(ref_bf16_to_float((uint16_t)sum) / (float)nranks);
    case RING_FLOAT32: return f2u(u2f((uint32_t)sum) / (float)nranks);
    case RING_FLOAT64: return d2u(u2d(sum) / (double)nranks);
    default: return int_avg(sum, nranks, ref_dtype_size(dt), dtype_is_signed(dt));
    }
}

void ref_expect_reduce(void *out, size_t count, ring_dtype_t dt, ring_op_t op, int nranks,
                       uint64_t seed, uint64_t opidx, size_t first)
{
    enum { MAXR = 64 };
    uint64_t base[MAXR];
    size_t sz = ref_dtype_size(dt);
    if (nranks < 1 || nranks > MAXR) {
        fprintf(stderr, "ref_expect_reduce: nranks %d unsupported\n", nranks);
        return;
    }
    for (int r = 0; r < nranks; r++) base[r] = stream_base(seed, opidx, r);
    unsigned char *p = out;
    for (size_t i = 0; i < count; i++) {
        uint64_t acc = gen_bits(dt, op, REF_EXACT, nranks, stream_elem(base[0], first + i));
        for (int r = 1; r < nranks; r++)
            acc = combine_bits(acc, gen_bits(dt, op, REF_EXACT, nranks, stream_elem(base[r], first + i)), dt, op);
        if (op == RING_AVG) acc = avg_bits(acc, dt, nranks);
        store_bits(p + i * sz, sz, acc);
    }
}

double ref_elem_to_double(const void *p, ring_dtype_t dt)
{
    size_t sz = ref_dtype_size(dt);
    uint64_t b = load_bits(p, sz);
    switch (dt) {
    case RING_INT8: return (double)(int8_t)(uint8_t)b;
    case RING_UINT8:
    case RING_UINT32:
    case RING_UINT64: return (double)b;
    case RING_INT32: return (double)(int32_t)(uint32_t)b;
    case RING_INT64: return (double)(int64_t)b;
    case RING_FLOAT16: return ref_half_to_float((uint16_t)b);
    case RING_BFLOAT16: return ref_bf16_to_float((uint16_t)b);
    case RING_FLOAT32: return u2f((uint32_t)b);
    case RING_FLOAT64: return u2d(b);
    default: return NAN;
    }
}

void ref_noise_sum(ring_dtype_t dt, int nranks, uint64_t seed, uint64_t opidx, size_t idx,
                   double *sum, double *abssum)
{
    size_t sz = ref_dtype_size(dt);
    double s = 0, a = 0;
    for (int r = 0; r < nranks; r++) {
        unsigned char e[8];
        store_bits(e, sz, gen_bits(dt, RING_SUM, REF_NOISE, nranks, stream_elem(stream_base(seed, opidx, r), idx)));
        double v = ref_elem_to_double(e, dt);
        s += v; /* off by <= nranks*2^-53*abssum: inside the tolerance it feeds */
        a += fabs(v);
    }
    *sum = s;
    *abssum = a;
}

double ref_unit_roundoff(ring_dtype_t dt)
{
    switch (dt) {
    case RING_FLOAT16: return 0x1p-11;
    case RING_BFLOAT16: return 0x1p-8;
    case RING_FLOAT32: return 0x1p-24;
    default: return 0x1p-53;
    }
}

void ref_format_elem(char *out, size_t outlen, const void *p, ring_dtype_t dt)
{
    size_t sz = ref_dtype_size(dt);
    uint64_t b = load_bits(p, sz);
    int hexw = (int)(sz * 2);
    if (ref_dtype_is_float(dt))
        snprintf(out, outlen, "%.17g (0x%0*" PRIx64 ")", ref_elem_to_double(p, dt), hexw, b);
    else if (dtype_is_signed(dt) && (b >> (sz * 8 - 1)))
        snprintf(out, outlen, "-%" PRIu64 " (0x%0*" PRIx64 ")", (~b + 1) & width_mask(sz), hexw, b);
    else
        snprintf(out, outlen, "%" PRIu64 " (0x%0*" PRIx64 ")", b, hexw, b);
}

uint64_t ref_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}
