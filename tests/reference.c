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

static void special_fill(void *buf, size_t count, ring_dtype_t dt, ring_op_t op, int nranks, uint64_t seed,
                         uint64_t opidx, int rank, size_t first);

void ref_fill(void *buf, size_t count, ring_dtype_t dt, ring_op_t op, ref_kind_t kind, int nranks,
              uint64_t seed, uint64_t opidx, int rank, size_t first)
{
    if (kind == REF_SPECIAL) {
        special_fill(buf, count, dt, op, nranks, seed, opidx, rank, first);
        return;
    }
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

/* ---- IEEE special values (REF_SPECIAL) ---- */

/*
 * What one rank contributes: the kind of value, its sign, and bits that pick among values of
 * that kind. Magnitudes keep the cases order-independent (see the cases below):
 *   SUBS  a subnormal below 1/8 of the smallest normal, so that any sum of 8 stays exact;
 *   SUBA  any subnormal (often the smallest or the largest);
 *   ORD   k/2 for k in 1..16: every partial sum of 8 ranks is exact even in bfloat16;
 *   SMALL 0.5, 1 or 2: 7 of them stay under half an ulp of the largest float16 (16);
 *   ONE, TWO  for PROD: products of powers of two are exact until they overflow.
 */
enum { V_NAN, V_INF, V_MAX, V_ZERO, V_SUBS, V_SUBA, V_ORD, V_SMALL, V_ONE, V_TWO };

static uint64_t sub_pick(uint64_t u, uint64_t max)
{
    switch (u & 3) {
    case 0: return 1;
    case 1: return max;
    default: return 1 + (u >> 2) % max;
    }
}

/* Bit patterns per format: sign, quiet NaN, its payload mask, Inf, the largest finite value,
 * and the largest subnormal of the "small" and of the "any" subnormal cases. */
typedef struct {
    uint64_t sign, qnan, payload, inf, max, subs, suba;
} sp_bits_t;

static const sp_bits_t *sp_bits(ring_dtype_t dt)
{
    static const sp_bits_t f16 = {0x8000u, 0x7e00u, 0x1ffu, 0x7c00u, 0x7bffu, 127, 0x3ff};
    static const sp_bits_t b16 = {0x8000u, 0x7fc0u, 0x3fu, 0x7f80u, 0x7f7fu, 15, 0x7f};
    static const sp_bits_t f32 = {0x80000000u, 0x7fc00000u, 0x3fffffu, 0x7f800000u, 0x7f7fffffu,
                                  ((uint64_t)1 << 20) - 1, 0x7fffffu};
    static const sp_bits_t f64 = {0x8000000000000000ULL, 0x7ff8000000000000ULL, 0x7ffffffffffffULL,
                                  0x7ff0000000000000ULL, 0x7fefffffffffffffULL, ((uint64_t)1 << 49) - 1,
                                  ((uint64_t)1 << 52) - 1};
    return dt == RING_FLOAT16 ? &f16 : dt == RING_BFLOAT16 ? &b16 : dt == RING_FLOAT32 ? &f32 : &f64;
}

static uint64_t sp_encode(ring_dtype_t dt, int kind, int neg, uint64_t u)
{
    const sp_bits_t *b = sp_bits(dt);
    uint64_t sg = neg ? b->sign : 0;
    switch (kind) {
    case V_NAN: return sg | b->qnan | (u & b->payload);
    case V_INF: return sg | b->inf;
    case V_MAX: return sg | b->max;
    case V_ZERO: return sg;
    case V_SUBS: return sg | sub_pick(u, b->subs);
    case V_SUBA: return sg | sub_pick(u, b->suba);
    default: break;
    }
    float v = 1.0f;
    if (kind == V_ORD) v = (float)(1 + (int)(u % 16)) * 0.5f;
    else if (kind == V_SMALL) v = (float)(1u << (u % 3)) * 0.5f;
    else if (kind == V_TWO) v = 2.0f;
    if (neg) v = -v;
    switch (dt) {
    case RING_FLOAT16: return ref_float_to_half(v);
    case RING_BFLOAT16: return ref_float_to_bf16(v);
    case RING_FLOAT32: return f2u(v);
    default: return d2u((double)v);
    }
}

/*
 * The cases. r1, r2 (and r3) are distinct ranks picked per element; "others" are the
 * remaining ranks, each drawing from the list given. Why each result is the same in every
 * order of combination:
 *  NAN1, NAN2   NaN on r1 (and r2), others any non-NaN: NaN absorbs everything.
 *  INFS         +Inf on r1, -Inf on r2, others any non-NaN: the partial holding +Inf is +Inf
 *               or NaN, the one holding -Inf is -Inf or NaN; combined, NaN. MIN/MAX: -Inf, +Inf.
 *  INF          Inf (sign s) on r1; SUM: others Inf s, MAX s, zeros, any subnormal, ORD: no
 *               partial can reach -s Inf. PROD: others Inf, MAX, 1, 2, and r2 maybe a subnormal:
 *               no zero, no underflow to zero (one subnormal times >= 1), so +-Inf.
 *  OVERFLOW     MAX (sign s) on r1 and r2 (and r3: float16 AVG), others MAX s, zeros, SUBS,
 *               SMALL: every partial holding a MAX stays within 16 of it, two give Inf s.
 *  MAX1         MAX on r1, others zeros, SUBS, SMALL (float16 AVG: zeros only, chosen when the
 *               library divided AVG's last sum unrounded, until 2026-11-29): MAX absorbs the rest.
 *  MAXCANCEL    +MAX on r1, -MAX on r2, others zeros: an exact cancellation, +0.
 *  NEGZERO      -0 on every rank.  ZEROMIX: -0 on r1, +0 on r2, others zeros (MIN/MAX: also
 *               values beyond zero, so that a zero of either sign is the result).
 *  SUBN         SUBS (any subnormal for MIN/MAX) and zeros: exact sums (no flush to zero).
 *  ORD          ORD and zeros: exact sums.
 *  ZEROINF      PROD: zero on r1, Inf on r2, others zeros, Inf, 1, 2, any subnormal: NaN.
 *  ZERO         PROD: zero on r1, others zeros, 1, 2, any subnormal: a zero of the sign of
 *               the product of the signs (underflow keeps the sign too).
 *  PMAX         PROD: MAX on r1, others mostly 1, some 2 and MAX: MAX, or Inf as soon as a 2
 *               or a second MAX joins.
 *  PSUB         PROD: one subnormal on r1, others 1 and 2: exact.  PORD: 1 and 2.
 *  ANY          MIN/MAX: any non-NaN values.
 */
enum { C_NAN1, C_NAN2, C_INFS, C_INF, C_OVERFLOW, C_MAX1, C_MAXCANCEL, C_NEGZERO, C_ZEROMIX, C_SUBN, C_ORD,
       C_ZEROINF, C_ZERO, C_PMAX, C_PSUB, C_PORD, C_ANY };
static const char *const case_names[] = {"NaN on one rank", "NaN on two ranks", "+Inf and -Inf", "Inf",
                                         "MAX on two or more ranks", "MAX on one rank", "+MAX and -MAX among zeros",
                                         "-0 on every rank", "-0 and +0", "subnormals", "ordinary values",
                                         "zero and Inf", "zero", "MAX", "one subnormal", "powers of two",
                                         "any non-NaN"};

static const unsigned char sum_cases[] = {C_NAN1, C_NAN2, C_INFS, C_INF, C_OVERFLOW, C_MAX1,
                                          C_MAXCANCEL, C_NEGZERO, C_ZEROMIX, C_SUBN, C_ORD};
static const unsigned char prod_cases[] = {C_NAN1, C_NAN2, C_ZEROINF, C_INF, C_ZERO, C_PMAX,
                                           C_PSUB, C_PORD, C_NEGZERO, C_ZEROMIX};
static const unsigned char minmax_cases[] = {C_NAN1, C_NAN2, C_INFS, C_ZEROMIX, C_NEGZERO, C_SUBN, C_ANY, C_ANY};

typedef struct {
    int c;
    int r1, r2, r3;
    int neg;
    uint64_t ph;
} sp_pos_t;

static sp_pos_t sp_pos(ring_dtype_t dt, ring_op_t op, int n, uint64_t seed, uint64_t opidx, size_t idx)
{
    sp_pos_t p;
    p.ph = ref_hash4(seed, opidx, (uint64_t)idx, 0x5bec1a1);
    uint64_t h = p.ph;
    const unsigned char *list = op == RING_PROD ? prod_cases : op == RING_MIN || op == RING_MAX ? minmax_cases : sum_cases;
    size_t len = op == RING_PROD ? sizeof prod_cases : op == RING_MIN || op == RING_MAX ? sizeof minmax_cases : sizeof sum_cases;
    p.c = list[h % len];
    uint64_t un = (uint64_t)n;
    p.r1 = (int)((h >> 8) % un);
    p.r2 = n > 1 ? (int)(((uint64_t)p.r1 + 1 + (h >> 24) % (un - 1)) % un) : p.r1;
    p.r3 = p.r2;
    if (n > 2) {
        int k = (int)((h >> 40) % (un - 2));
        for (int r = 0; r < n; r++) {
            if (r == p.r1 || r == p.r2) continue;
            if (k-- == 0) {
                p.r3 = r;
                break;
            }
        }
    }
    p.neg = (int)((h >> 63) & 1);
    /* Chosen when float16 AVG divided its last sum unrounded (until 2026-11-29: two MAX there
     * gave MAX*2/n, not Inf); kept, so that the data stay what they were. */
    if (p.c == C_OVERFLOW && dt == RING_FLOAT16 && op == RING_AVG && n < 3) p.c = C_MAX1;
    return p;
}

static uint64_t sp_value(ring_dtype_t dt, ring_op_t op, int n, const sp_pos_t *p, int r)
{
    uint64_t h = ref_mix64(p->ph ^ ((uint64_t)(r + 1) * 0x9e3779b97f4a7c15ULL));
    int sg = (int)(h & 1);        /* a random sign */
    uint64_t u = h >> 16;         /* which value of the kind */
    uint64_t pick = (h >> 4) & 0xfff;
    int fp16_avg = dt == RING_FLOAT16 && op == RING_AVG;
#define ANY_NONNAN()                                                                               \
    do {                                                                                           \
        static const int k_[] = {V_INF, V_MAX, V_ZERO, V_SUBA, V_ORD, V_SMALL};                    \
        return sp_encode(dt, k_[pick % 6], sg, u);                                                 \
    } while (0)
#define FROM(...)                                                                                  \
    do {                                                                                           \
        static const int k_[] = {__VA_ARGS__};                                                     \
        return sp_encode(dt, k_[pick % (sizeof k_ / sizeof k_[0])], sg, u);                       \
    } while (0)
    (void)n;
    switch (p->c) {
    case C_NAN1:
        if (r == p->r1) return sp_encode(dt, V_NAN, sg, u);
        ANY_NONNAN();
    case C_NAN2:
        if (r == p->r1 || r == p->r2) return sp_encode(dt, V_NAN, sg, u);
        ANY_NONNAN();
    case C_INFS:
        if (r == p->r1) return sp_encode(dt, V_INF, 0, u);
        if (r == p->r2) return sp_encode(dt, V_INF, 1, u);
        ANY_NONNAN();
    case C_INF:
        if (op == RING_PROD) {
            if (r == p->r1) return sp_encode(dt, V_INF, sg, u);
            if (r == p->r2 && (pick & 0x100)) return sp_encode(dt, V_SUBA, sg, u);
            FROM(V_INF, V_MAX, V_ONE, V_TWO, V_ONE);
        }
        if (r == p->r1) return sp_encode(dt, V_INF, p->neg, u);
        switch (pick % 5) {
        case 0: return sp_encode(dt, V_INF, p->neg, u);
        case 1: return sp_encode(dt, V_MAX, p->neg, u);
        default: FROM(V_ZERO, V_SUBA, V_ORD);
        }
    case C_OVERFLOW:
        if (r == p->r1 || r == p->r2 || (fp16_avg && r == p->r3)) return sp_encode(dt, V_MAX, p->neg, u);
        if (pick % 4 == 0) return sp_encode(dt, V_MAX, p->neg, u);
        FROM(V_ZERO, V_SUBS, V_SMALL);
    case C_MAX1:
        if (r == p->r1) return sp_encode(dt, V_MAX, p->neg, u);
        if (fp16_avg) return sp_encode(dt, V_ZERO, sg, u);
        FROM(V_ZERO, V_SUBS, V_SMALL);
    case C_MAXCANCEL:
        if (r == p->r1) return sp_encode(dt, V_MAX, 0, u);
        if (r == p->r2) return sp_encode(dt, V_MAX, 1, u);
        return sp_encode(dt, V_ZERO, sg, u);
    case C_NEGZERO: return sp_encode(dt, V_ZERO, 1, u);
    case C_ZEROMIX:
        if (r == p->r1) return sp_encode(dt, V_ZERO, 1, u);
        if (r == p->r2) return sp_encode(dt, V_ZERO, 0, u);
        if ((op == RING_MIN || op == RING_MAX) && (pick & 0x800)) {
            /* beyond the zeros (positive for MIN), so that they are the result */
            static const int k_[] = {V_INF, V_MAX, V_SUBA, V_ORD, V_SMALL};
            return sp_encode(dt, k_[pick % 5], op == RING_MAX, u);
        }
        return sp_encode(dt, V_ZERO, sg, u);
    case C_SUBN: {
        int sub = op == RING_MIN || op == RING_MAX ? V_SUBA : V_SUBS;
        if (r == p->r1 || pick % 3) return sp_encode(dt, sub, sg, u);
        return sp_encode(dt, V_ZERO, sg, u);
    }
    case C_ORD:
        if (r == p->r1 || pick % 4) return sp_encode(dt, V_ORD, sg, u);
        return sp_encode(dt, V_ZERO, sg, u);
    case C_ZEROINF:
        if (r == p->r1) return sp_encode(dt, V_ZERO, sg, u);
        if (r == p->r2) return sp_encode(dt, V_INF, sg, u);
        FROM(V_ZERO, V_INF, V_ONE, V_TWO, V_SUBA);
    case C_ZERO:
        if (r == p->r1) return sp_encode(dt, V_ZERO, sg, u);
        FROM(V_ZERO, V_ONE, V_TWO, V_SUBA, V_ONE);
    case C_PMAX:
        if (r == p->r1) return sp_encode(dt, V_MAX, sg, u);
        FROM(V_ONE, V_ONE, V_ONE, V_ONE, V_TWO, V_MAX);
    case C_PSUB:
        if (r == p->r1) return sp_encode(dt, V_SUBA, sg, u);
        FROM(V_ONE, V_TWO);
    case C_PORD: FROM(V_ONE, V_TWO);
    default: ANY_NONNAN();
    }
#undef ANY_NONNAN
#undef FROM
}

static void special_fill(void *buf, size_t count, ring_dtype_t dt, ring_op_t op, int nranks, uint64_t seed,
                         uint64_t opidx, int rank, size_t first)
{
    size_t sz = ref_dtype_size(dt);
    unsigned char *out = buf;
    for (size_t i = 0; i < count; i++) {
        sp_pos_t p = sp_pos(dt, op, nranks, seed, opidx, first + i);
        store_bits(out + i * sz, sz, sp_value(dt, op, nranks, &p, rank));
    }
}

static int bits_nan(uint64_t b, ring_dtype_t dt)
{
    switch (dt) {
    case RING_FLOAT16: return (b & 0x7fffu) > 0x7c00u;
    case RING_BFLOAT16: return (b & 0x7fffu) > 0x7f80u;
    case RING_FLOAT32: return (b & 0x7fffffffu) > 0x7f800000u;
    default: return (b & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
    }
}

static uint64_t sign_bit(ring_dtype_t dt)
{
    return (uint64_t)1 << (ref_dtype_size(dt) * 8 - 1);
}

/* Values in the type the library computes in: float for the 16-bit types and float32. */
static double sp_wide(uint64_t b, ring_dtype_t dt)
{
    switch (dt) {
    case RING_FLOAT16: return ref_half_to_float((uint16_t)b);
    case RING_BFLOAT16: return ref_bf16_to_float((uint16_t)b);
    case RING_FLOAT32: return u2f((uint32_t)b);
    default: return u2d(b);
    }
}

/* Rounds a result of float arithmetic (held exactly in a double) to the element type. */
static uint64_t sp_narrow(double v, ring_dtype_t dt)
{
    switch (dt) {
    case RING_FLOAT16: return ref_float_to_half((float)v);
    case RING_BFLOAT16: return ref_float_to_bf16((float)v);
    case RING_FLOAT32: return f2u((float)v);
    default: return d2u(v);
    }
}

/*
 * a op b as documented: IEEE arithmetic in float (double for float64) rounded to the element
 * type; MIN/MAX return a NaN from either side, and a when the two compare equal. AVG adds (its
 * division is sp_avg's, on the rounded sum).
 */
static uint64_t sp_step(uint64_t a, uint64_t b, ring_dtype_t dt, ring_op_t op)
{
    double x = sp_wide(a, dt), y = sp_wide(b, dt), r;
    int dbl = dt == RING_FLOAT64;
    switch (op) {
    case RING_MIN:
    case RING_MAX:
        if (x != x) return a;
        if (y != y) return b;
        return (op == RING_MIN ? y < x : y > x) ? b : a;
    case RING_PROD: r = dbl ? x * y : (double)((float)x * (float)y); break;
    default:
        r = dbl ? x + y : (double)((float)x + (float)y);
        break;
    }
    return sp_narrow(r, dt);
}

/* AVG as documented: the sum (rounded at every step) divided once by nranks. */
static uint64_t sp_avg(uint64_t sum, ring_dtype_t dt, int n)
{
    double x = sp_wide(sum, dt);
    return sp_narrow(dt == RING_FLOAT64 ? x / (double)n : (double)((float)x / (float)n), dt);
}

static uint64_t sp_tree(const uint64_t *v, int lo, int hi, ring_dtype_t dt, ring_op_t op)
{
    if (hi - lo == 1) return v[lo];
    int mid = lo + (hi - lo) / 2;
    return sp_step(sp_tree(v, lo, mid, dt, op), sp_tree(v, mid, hi, dt, op), dt, op);
}

/*
 * The reduction of v[0..n) in one order: ord = 0 ranks 0, 1, ..., 1 reversed, 2 starting at
 * rank `rot` (as a ring segment is), 3 a balanced tree (as recursive doubling).
 */
static uint64_t sp_fold(const uint64_t *v, int n, int rot, int ord, ring_dtype_t dt, ring_op_t op)
{
    uint64_t acc;
    if (ord == 3 && n > 1) {
        acc = sp_tree(v, 0, n, dt, op);
    } else {
        int at = ord == 1 ? n - 1 : ord == 2 ? rot : 0;
        acc = v[at];
        for (int k = 1; k < n; k++) {
            int r = ord == 1 ? n - 1 - k : ord == 2 ? (rot + k) % n : k;
            acc = sp_step(acc, v[r], dt, op);
        }
    }
    if (op == RING_AVG) acc = sp_avg(acc, dt, n);
    return acc;
}

size_t ref_special_expect(void *out, unsigned char *how, size_t count, ring_dtype_t dt, ring_op_t op, int nranks,
                          uint64_t seed, uint64_t opidx, size_t first, char *why, size_t whylen)
{
    enum { MAXR = 64 };
    uint64_t v[MAXR];
    size_t sz = ref_dtype_size(dt), ambiguous = 0;
    uint64_t sb = sign_bit(dt);
    int minmax = op == RING_MIN || op == RING_MAX;
    unsigned char *o = out;
    if (nranks < 1 || nranks > MAXR || !ref_dtype_is_float(dt)) {
        snprintf(why, whylen, "ref_special_expect: nranks %d or dtype %s unsupported", nranks, ref_dtype_name(dt));
        return count ? count : 1;
    }
    for (size_t i = 0; i < count; i++) {
        sp_pos_t p = sp_pos(dt, op, nranks, seed, opidx, first + i);
        int pos0 = 0, neg0 = 0;
        for (int r = 0; r < nranks; r++) {
            v[r] = sp_value(dt, op, nranks, &p, r);
            if ((v[r] & ~sb) == 0) {
                if (v[r]) neg0 = 1;
                else pos0 = 1;
            }
        }
        uint64_t want = sp_fold(v, nranks, p.r1, 0, dt, op);
        int m = bits_nan(want, dt) ? REF_MATCH_NAN
                : minmax && (want & ~sb) == 0 && pos0 && neg0 ? REF_MATCH_ZERO
                                                              : REF_MATCH_BITS;
        /* Every order must agree: else the case is ill-chosen. The first 4096 elements of each
         * call are enough to catch that (the cases repeat). */
        for (int ord = i < 4096 ? 1 : 4; ord < 4; ord++) {
            uint64_t alt = sp_fold(v, nranks, p.r1, ord, dt, op);
            int same = m == REF_MATCH_NAN ? bits_nan(alt, dt) : m == REF_MATCH_ZERO ? (alt & ~sb) == 0 : alt == want;
            if (same) continue;
            if (!ambiguous++) {
                char a[96], b[96];
                unsigned char ea[8], eb[8];
                store_bits(ea, sz, want);
                store_bits(eb, sz, alt);
                ref_format_elem(a, sizeof a, ea, dt);
                ref_format_elem(b, sizeof b, eb, dt);
                snprintf(why, whylen, "element %zu (%s): %s in rank order, %s in order %d", first + i,
                         case_names[p.c], a, b, ord);
            }
            break;
        }
        store_bits(o + i * sz, sz, want);
        how[i] = (unsigned char)m;
    }
    return ambiguous;
}

int ref_special_match(const void *got, const void *exp, int how, ring_dtype_t dt)
{
    size_t sz = ref_dtype_size(dt);
    uint64_t g = load_bits(got, sz), e = load_bits(exp, sz);
    switch (how) {
    case REF_MATCH_NAN: {
        /* quiet: the inputs are, and so is every NaN that arithmetic makes */
        uint64_t quiet = dt == RING_FLOAT16    ? 0x200u
                         : dt == RING_BFLOAT16 ? 0x40u
                         : dt == RING_FLOAT32  ? 0x400000u
                                               : 0x8000000000000ULL;
        return bits_nan(g, dt) && (g & quiet);
    }
    case REF_MATCH_ZERO: return (g & ~sign_bit(dt)) == 0;
    default: return g == e;
    }
}

uint64_t ref_canonical_bits(const void *p, ring_dtype_t dt)
{
    uint64_t b = load_bits(p, ref_dtype_size(dt));
    if (!bits_nan(b, dt)) return b;
    switch (dt) {
    case RING_FLOAT16: return 0x7e00u;
    case RING_BFLOAT16: return 0x7fc0u;
    case RING_FLOAT32: return 0x7fc00000u;
    default: return 0x7ff8000000000000ULL;
    }
}

void ref_special_describe(char *out, size_t outlen, ring_dtype_t dt, ring_op_t op, int nranks, uint64_t seed,
                          uint64_t opidx, size_t idx)
{
    sp_pos_t p = sp_pos(dt, op, nranks, seed, opidx, idx);
    size_t sz = ref_dtype_size(dt);
    int w = snprintf(out, outlen, "case \"%s\", inputs by rank:", case_names[p.c]);
    for (int r = 0; r < nranks && w >= 0 && (size_t)w < outlen; r++) {
        unsigned char e[8];
        char s[96];
        store_bits(e, sz, sp_value(dt, op, nranks, &p, r));
        ref_format_elem(s, sizeof s, e, dt);
        w += snprintf(out + w, outlen - (size_t)w, " %s", s);
    }
}
