/*
 * Unit tests for the host reduction loops (src/collectives/reduce.c).
 *
 * Every result is checked against a scalar reference written here from the definitions, not
 * from reduce.c's tricks: integers are combined in 64 bits and masked, floats are combined in
 * double and rounded once to float (exact or innocuous double rounding for +, *, /), and the
 * fp16/bf16 conversions are done with frexp/ldexp/rint and explicit tie tests.
 * The sweep covers every dtype x op on odd lengths, unaligned starts and all aliasings; the
 * named tests pin down the edge cases one by one.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "ring_config.h"
#include "ringcomm.h"

/* RING_TEST_REDUCE_PATH: every case below runs on that compiled path of the loops (the
 * dispatch picks the widest the CPU has, so the others would never be checked here). Before
 * Criterion forks the test processes, which inherit it. */
__attribute__((constructor)) static void reduce_path_from_env(void)
{
    const char *p = getenv("RING_TEST_REDUCE_PATH");
    if (!p || !*p) return;
    if (ring__reduce_force(p) != 0) {
        fprintf(stderr, "SKIP: this CPU or build has no %s path for the reduction loops\n", p);
        exit(77);
    }
}

static const char *const dtype_names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                          "uint64",  "float16", "bfloat16", "float32", "float64"};
static const size_t dtype_sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};

/* ---------- reference conversions ---------- */

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static double f64_of(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static uint64_t bits_f64(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* NaNs come out quiet with the payload kept, as vcvtph2ps does. */
static float ref_h2f(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 31) {
        if (m == 0) return sign ? -INFINITY : INFINITY;
        return f32_of((uint32_t)sign << 31 | 0x7fc00000u | (uint32_t)m << 13);
    }
    double v = e == 0 ? ldexp(m, -24) : ldexp(m + 1024, e - 25);
    return (float)(sign ? -v : v);
}

static uint16_t ref_f2h(float f)
{
    uint32_t u = bits_f32(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(f)) return sign | 0x7e00 | ((u >> 13) & 0x3ff);
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00; /* 65520 is the tie between 65504 and 2^16 */
    if (a < ldexp(1, -14)) return sign | (uint16_t)rint(ldexp(a, 24)); /* 0x400 if it rounds up */
    int ex;
    frexp(a, &ex); /* a = m * 2^ex, m in [0.5, 1) */
    double q = rint(ldexp(a, 11 - ex)); /* 11 significant bits: [1024, 2048] */
    if (q == 2048) {
        q = 1024;
        ex++;
    }
    return sign | (uint16_t)((ex - 1 + 15) << 10) | (uint16_t)(q - 1024);
}

static float ref_b2f(uint16_t h) { return f32_of((uint32_t)h << 16); }

static uint16_t ref_f2b(float f)
{
    uint32_t u = bits_f32(f);
    uint16_t hi = (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff;
    if (isnan(f)) return hi | 0x40;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
    return hi;
}

/* ---------- reference combine on raw element bits ---------- */

static int is_float(ring_dtype_t t) { return t >= RING_FLOAT16; }
static int is_signed_int(ring_dtype_t t)
{
    return t == RING_INT8 || t == RING_INT32 || t == RING_INT64;
}

static uint64_t load_raw(ring_dtype_t t, const void *p, size_t i)
{
    const unsigned char *c = (const unsigned char *)p + i * dtype_sizes[t];
    uint8_t v8;
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (dtype_sizes[t]) {
    case 1: memcpy(&v8, c, 1); return v8;
    case 2: memcpy(&v16, c, 2); return v16;
    case 4: memcpy(&v32, c, 4); return v32;
    default: memcpy(&v64, c, 8); return v64;
    }
}

static void store_raw(ring_dtype_t t, void *p, size_t i, uint64_t v)
{
    unsigned char *c = (unsigned char *)p + i * dtype_sizes[t];
    uint8_t v8 = (uint8_t)v;
    uint16_t v16 = (uint16_t)v;
    uint32_t v32 = (uint32_t)v;
    switch (dtype_sizes[t]) {
    case 1: memcpy(c, &v8, 1); break;
    case 2: memcpy(c, &v16, 2); break;
    case 4: memcpy(c, &v32, 4); break;
    default: memcpy(c, &v, 8); break;
    }
}

static int64_t sext(uint64_t v, int bits)
{
    if (bits == 64) return (int64_t)v;
    uint64_t sb = 1ull << (bits - 1);
    return (int64_t)((v ^ sb) - sb); /* wraps in uint64, then a value in int64 range */
}

/* nranks == 0: ring__reduce (AVG is SUM); otherwise ring__reduce_final. */
static uint64_t ref_int(ring_dtype_t t, ring_op_t op, int nranks, uint64_t a, uint64_t b)
{
    int bits = (int)dtype_sizes[t] * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    int sg = is_signed_int(t);
    switch (op) {
    case RING_SUM: return (a + b) & mask;
    case RING_PROD: return (a * b) & mask;
    case RING_MIN:
        if (sg) return sext(b, bits) < sext(a, bits) ? b : a;
        return b < a ? b : a;
    case RING_MAX:
        if (sg) return sext(b, bits) > sext(a, bits) ? b : a;
        return b > a ? b : a;
    case RING_AVG: {
        uint64_t s = (a + b) & mask;
        if (nranks == 0) return s;
        if (sg) return (uint64_t)(sext(s, bits) / (int64_t)nranks) & mask;
        return s / (uint64_t)nranks;
    }
    default: return 0;
    }
}

static double decode(ring_dtype_t t, uint64_t v)
{
    switch (t) {
    case RING_FLOAT16: return ref_h2f((uint16_t)v);
    case RING_BFLOAT16: return ref_b2f((uint16_t)v);
    case RING_FLOAT32: return f32_of((uint32_t)v);
    default: return f64_of(v);
    }
}

/* The value is already rounded to float for the 32-bit-and-narrower types. */
static uint64_t encode(ring_dtype_t t, double v)
{
    switch (t) {
    case RING_FLOAT16: return ref_f2h((float)v);
    case RING_BFLOAT16: return ref_f2b((float)v);
    case RING_FLOAT32: return bits_f32((float)v);
    default: return bits_f64(v);
    }
}

static uint64_t ref_float(ring_dtype_t t, ring_op_t op, int nranks, uint64_t a, uint64_t b)
{
    double x = decode(t, a), y = decode(t, b);
    int wide = t == RING_FLOAT64;
    double r;
    switch (op) {
    case RING_SUM: r = wide ? x + y : (float)(x + y); break;
    case RING_PROD: r = wide ? x * y : (float)(x * y); break;
    case RING_MIN:
    case RING_MAX: {
        /* NaN in either operand propagates: a NaN a fails every comparison and is kept; a
         * NaN b is taken explicitly. */
        int take_b = (op == RING_MIN ? y < x : y > x) || isnan(y);
        if (t == RING_FLOAT32 || t == RING_FLOAT64) return take_b ? b : a; /* a pure select */
        r = take_b ? y : x;
        break;
    }
    case RING_AVG:
        r = wide ? x + y : (float)(x + y);
        /* fp16/bf16: the sum is rounded to the type before the division, as every partial sum */
        if (nranks != 0 && (t == RING_FLOAT16 || t == RING_BFLOAT16)) r = decode(t, encode(t, r));
        if (nranks != 0) r = wide ? r / nranks : (float)(r / (float)nranks);
        break;
    default: return 0;
    }
    return encode(t, r);
}

static uint64_t ref_elem(ring_dtype_t t, ring_op_t op, int nranks, uint64_t a, uint64_t b)
{
    return is_float(t) ? ref_float(t, op, nranks, a, b) : ref_int(t, op, nranks, a, b);
}

static int raw_isnan(ring_dtype_t t, uint64_t v)
{
    switch (t) {
    case RING_FLOAT16: return (v & 0x7fff) > 0x7c00;
    case RING_BFLOAT16: return (v & 0x7fff) > 0x7f80;
    case RING_FLOAT32: return (v & 0x7fffffff) > 0x7f800000;
    case RING_FLOAT64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

/*
 * Bitwise, except that when an arithmetic op gets two NaNs either payload may survive (the
 * operand order is the compiler's); then any NaN will do, quiet for the 16-bit types.
 */
static int same_result(ring_dtype_t t, ring_op_t op, uint64_t a, uint64_t b, uint64_t got,
                       uint64_t want)
{
    if (got == want) return 1;
    if (op == RING_MIN || op == RING_MAX) return 0;
    if (!(raw_isnan(t, a) && raw_isnan(t, b)) || !raw_isnan(t, got)) return 0;
    if (t == RING_FLOAT16) return (got & 0x0200) != 0;
    if (t == RING_BFLOAT16) return (got & 0x0040) != 0;
    return 1;
}

/* ---------- random data ---------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random bits, but floats mostly near 1 (so sums and products really round) plus specials. */
static uint64_t rnd_elem(ring_dtype_t t)
{
    uint64_t r = rnd();
    int kind = (int)(r >> 58); /* 0..63 */
    switch (t) {
    case RING_FLOAT16:
    case RING_BFLOAT16: {
        static const uint16_t special_h[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
                                             0x0001, 0x83ff, 0x7bff, 0xfbff, 0x0400, 0x3c00};
        static const uint16_t special_b[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81,
                                             0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0080, 0x3f80};
        const uint16_t *sp = t == RING_FLOAT16 ? special_h : special_b;
        if (kind < 4) return sp[r % 12];
        if (kind < 24) return (uint16_t)r; /* every pattern, NaNs and subnormals included */
        uint16_t near1 = t == RING_FLOAT16 ? 0x3c00 : 0x3f80;
        int span = t == RING_FLOAT16 ? 0x1000 : 0x200;
        return (uint16_t)((near1 - span / 2 + (int)(r % (uint64_t)span)) | ((r >> 20) & 1) << 15);
    }
    case RING_FLOAT32: {
        static const uint32_t sp[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                      0x7fc00000, 0x7f800001, 0x00000001, 0x807fffff,
                                      0x7f7fffff, 0xff7fffff, 0x00800000, 0x3f800000};
        if (kind < 4) return sp[r % 12];
        if (kind < 12) return (uint32_t)r;
        uint32_t sign = (uint32_t)(r >> 32 & 1) << 31;
        return (0x3f800000u - 0x00400000u + (uint32_t)(r % 0x00800000u)) | sign;
    }
    case RING_FLOAT64: {
        static const uint64_t sp[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                      0xfff0000000000000ull, 0x7ff8000000000000ull,
                                      0x7ff0000000000001ull, 1, 0x7fefffffffffffffull};
        if (kind < 4) return sp[r % 8];
        if (kind < 12) return r;
        return (0x3ff0000000000000ull - (1ull << 51) + (r % (1ull << 52))) | (r >> 10 & 1) << 63;
    }
    default: return r;
    }
}

/* ---------- the sweep ---------- */

static const size_t lengths[] = {0, 1, 7, 31, 33, 1000, 4099};
enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL, ALIAS_COUNT };
static const char *const alias_names[] = {"dst!=a,b", "dst==a", "dst==b", "dst==a==b"};
#define GUARD 16 /* elements on both sides of dst that must stay untouched */

/* skew: bytes added to each of a, b and dst, so that they need not be aligned to the element
 * (three values, one per buffer, each below 8). */
static void check_case_skewed(ring_dtype_t t, ring_op_t op, int nranks, size_t n, size_t off, int alias,
                              const size_t skew[3])
{
    size_t es = dtype_sizes[t], span = n + off + 2 * GUARD + 1; /* + 1: room for the skew */
    unsigned char *ma = malloc(span * es), *mb = malloc(span * es), *md = malloc(span * es);
    uint64_t *ra = malloc((n + 1) * 8), *rb = malloc((n + 1) * 8);
    cr_assert(ma && mb && md && ra && rb);
    for (size_t i = 0; i < span * es; i++) {
        ma[i] = (unsigned char)rnd();
        mb[i] = (unsigned char)rnd();
        md[i] = 0xa5;
    }
    unsigned char *a = ma + (GUARD + off) * es + skew[0] % es, *b = mb + (GUARD + off) * es + skew[1] % es;
    unsigned char *d = md + (GUARD + off) * es + skew[2] % es;
    for (size_t i = 0; i < n; i++) {
        store_raw(t, a, i, rnd_elem(t));
        store_raw(t, b, i, rnd_elem(t));
    }
    /* With aliasing, dst's guard zone is the source buffer's. */
    unsigned char *dbuf = md;
    if (alias == ALIAS_DST_A || alias == ALIAS_ALL) d = a, dbuf = ma;
    if (alias == ALIAS_DST_B) d = b, dbuf = mb;
    if (alias == ALIAS_ALL) b = a;
    unsigned char *before = malloc(span * es);
    cr_assert(before);
    memcpy(before, dbuf, span * es);
    for (size_t i = 0; i < n; i++) {
        ra[i] = load_raw(t, a, i);
        rb[i] = load_raw(t, b, i);
    }

    if (nranks == 0)
        ring__reduce(d, a, b, n, t, op);
    else
        ring__reduce_final(d, a, b, n, t, op, nranks);

    for (size_t i = 0; i < n; i++) {
        uint64_t got = load_raw(t, d, i), want = ref_elem(t, op, nranks, ra[i], rb[i]);
        if (!same_result(t, op, ra[i], rb[i], got, want))
            cr_assert_fail("%s %s nranks=%d n=%zu off=%zu %s: [%zu] %#llx op %#llx = %#llx, want "
                           "%#llx",
                           dtype_names[t], op_names[op], nranks, n, off, alias_names[alias], i,
                           (unsigned long long)ra[i], (unsigned long long)rb[i],
                           (unsigned long long)got, (unsigned long long)want);
    }
    size_t dstart = (size_t)(d - dbuf);
    for (size_t i = 0; i < span * es; i++)
        if (i < dstart || i >= dstart + n * es)
            cr_assert_eq(dbuf[i], before[i], "%s %s n=%zu off=%zu %s: byte %zu outside dst changed",
                         dtype_names[t], op_names[op], n, off, alias_names[alias], i);
    free(ma);
    free(mb);
    free(md);
    free(ra);
    free(rb);
    free(before);
}

static void check_case(ring_dtype_t t, ring_op_t op, int nranks, size_t n, size_t off, int alias)
{
    static const size_t none[3] = {0, 0, 0};
    check_case_skewed(t, op, nranks, n, off, alias, none);
}

static void sweep(ring_dtype_t t)
{
    static const int final_nranks[] = {0, 1, 2, 3, 7};
    for (int op = 0; op < RING_OP_COUNT; op++)
        for (size_t k = 0; k < sizeof final_nranks / sizeof *final_nranks; k++) {
            int nr = final_nranks[k];
            if (op != RING_AVG && nr > 1) continue; /* nranks only matters to AVG */
            for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
                for (size_t off = 0; off < 2; off++)
                    for (int al = 0; al < ALIAS_COUNT; al++)
                        check_case(t, (ring_op_t)op, nr, lengths[li], off, al);
        }
}

Test(reduce_sweep, int8) { sweep(RING_INT8); }
Test(reduce_sweep, uint8) { sweep(RING_UINT8); }
Test(reduce_sweep, int32) { sweep(RING_INT32); }
Test(reduce_sweep, uint32) { sweep(RING_UINT32); }
Test(reduce_sweep, int64) { sweep(RING_INT64); }
Test(reduce_sweep, uint64) { sweep(RING_UINT64); }
Test(reduce_sweep, float16) { sweep(RING_FLOAT16); }
Test(reduce_sweep, bfloat16) { sweep(RING_BFLOAT16); }
Test(reduce_sweep, float32) { sweep(RING_FLOAT32); }
Test(reduce_sweep, float64) { sweep(RING_FLOAT64); }

/* A long buffer, so that the main vector loops run many iterations, checked in place. */
Test(reduce_sweep, long_buffers)
{
    for (int t = 0; t < RING_DTYPE_COUNT; t++) {
        check_case((ring_dtype_t)t, RING_SUM, 0, 100003, 1, ALIAS_NONE);
        check_case((ring_dtype_t)t, RING_MAX, 0, 100003, 0, ALIAS_DST_B);
    }
}

/* Host buffers at any byte address (a float array inside a packed record): every dtype and op,
 * each buffer skewed its own way, in place too. The loops read them through typed pointers,
 * which UBSan reported as misaligned loads and stores (the sanitizer build halts on it). */
Test(reduce_sweep, buffers_not_aligned_to_the_element)
{
    static const size_t skews[][3] = {{1, 1, 1}, {1, 3, 2}, {3, 0, 5}, {0, 2, 7}, {6, 5, 0}};
    static const size_t ns[] = {1, 7, 33, 1000};
    for (int t = 0; t < RING_DTYPE_COUNT; t++) {
        if (dtype_sizes[t] == 1) continue;
        for (int op = 0; op < RING_OP_COUNT; op++)
            for (size_t k = 0; k < sizeof skews / sizeof *skews; k++)
                for (size_t li = 0; li < sizeof ns / sizeof *ns; li++) {
                    check_case_skewed((ring_dtype_t)t, (ring_op_t)op, op == RING_AVG ? 3 : 0, ns[li], 0, ALIAS_NONE,
                                      skews[k]);
                    check_case_skewed((ring_dtype_t)t, (ring_op_t)op, 0, ns[li], 0, ALIAS_DST_A, skews[k]);
                }
    }
}

/* ---------- named edge cases ---------- */

/* One-element reduce of raw values; returns the raw result. */
static uint64_t one(ring_dtype_t t, ring_op_t op, int nranks, uint64_t a, uint64_t b)
{
    uint64_t va = 0, vb = 0, vd = 0;
    store_raw(t, &va, 0, a);
    store_raw(t, &vb, 0, b);
    if (nranks == 0)
        ring__reduce(&vd, &va, &vb, 1, t, op);
    else
        ring__reduce_final(&vd, &va, &vb, 1, t, op, nranks);
    return load_raw(t, &vd, 0);
}

#define EXPECT(t, op, nr, a, b, want)                                                              \
    do {                                                                                           \
        uint64_t got_ = one(t, op, nr, (uint64_t)(a), (uint64_t)(b));                              \
        uint64_t want_ = (uint64_t)(want);                                                         \
        if (dtype_sizes[t] < 8) want_ &= (1ull << (8 * dtype_sizes[t])) - 1;                       \
        cr_expect_eq(got_, want_, "%s %s(%#llx, %#llx) nranks=%d = %#llx, want %#llx",             \
                     dtype_names[t], op_names[op], (unsigned long long)(uint64_t)(a),              \
                     (unsigned long long)(uint64_t)(b), nr, (unsigned long long)got_,              \
                     (unsigned long long)want_);                                                   \
    } while (0)

Test(reduce_int, wraparound)
{
    EXPECT(RING_INT8, RING_SUM, 0, 127, 1, -128);
    EXPECT(RING_INT8, RING_SUM, 0, -128, -1, 127);
    EXPECT(RING_UINT8, RING_SUM, 0, 255, 1, 0);
    EXPECT(RING_INT8, RING_PROD, 0, -128, -1, -128);
    EXPECT(RING_UINT8, RING_PROD, 0, 255, 255, 1);
    EXPECT(RING_INT32, RING_SUM, 0, INT32_MAX, 1, INT32_MIN);
    EXPECT(RING_INT32, RING_PROD, 0, INT32_MIN, -1, INT32_MIN);
    EXPECT(RING_UINT32, RING_SUM, 0, UINT32_MAX, 2, 1);
    EXPECT(RING_UINT32, RING_PROD, 0, 0x10000, 0x10000, 0);
    EXPECT(RING_INT64, RING_SUM, 0, INT64_MAX, 1, INT64_MIN);
    EXPECT(RING_INT64, RING_PROD, 0, INT64_MAX, 2, -2);
    EXPECT(RING_INT64, RING_PROD, 0, INT64_MIN, -1, INT64_MIN);
    EXPECT(RING_INT64, RING_PROD, 0, 0x100000001ll, 0x100000001ll, 0x200000001ll);
    EXPECT(RING_UINT64, RING_SUM, 0, UINT64_MAX, 1, 0);
    EXPECT(RING_UINT64, RING_PROD, 0, UINT64_MAX, UINT64_MAX, 1);
}

Test(reduce_int, min_max_signedness)
{
    EXPECT(RING_INT8, RING_MIN, 0, -128, 127, -128);
    EXPECT(RING_INT8, RING_MAX, 0, -128, 127, 127);
    EXPECT(RING_INT8, RING_MAX, 0, -1, -2, -1);
    EXPECT(RING_UINT8, RING_MIN, 0, 0xff, 1, 1);
    EXPECT(RING_UINT8, RING_MAX, 0, 0xff, 1, 0xff);
    EXPECT(RING_INT32, RING_MIN, 0, -5, 3, -5);
    EXPECT(RING_UINT32, RING_MIN, 0, 0xfffffffbu, 3, 3);
    EXPECT(RING_INT64, RING_MIN, 0, INT64_MIN, 0, INT64_MIN);
    EXPECT(RING_INT64, RING_MAX, 0, -7, -3, -3);
    EXPECT(RING_UINT64, RING_MAX, 0, 0x8000000000000000ull, 1, 0x8000000000000000ull);
}

Test(reduce_int, avg_final_truncates_toward_zero)
{
    EXPECT(RING_INT8, RING_AVG, 2, -7, 0, -3);
    EXPECT(RING_INT8, RING_AVG, 2, 7, 0, 3);
    EXPECT(RING_INT8, RING_AVG, 2, -128, -1, 63); /* the sum wraps to 127 first */
    EXPECT(RING_INT8, RING_AVG, 1000, -128, 0, 0);
    EXPECT(RING_UINT8, RING_AVG, 2, 255, 1, 0);
    EXPECT(RING_UINT8, RING_AVG, 3, 200, 50, 83);
    EXPECT(RING_INT32, RING_AVG, 4, -5, -4, -2);
    EXPECT(RING_INT32, RING_AVG, 3, INT32_MIN, 0, -715827882);
    EXPECT(RING_INT32, RING_AVG, 7, INT32_MAX, 0, 306783378);
    EXPECT(RING_INT32, RING_AVG, 2147483647, INT32_MIN, 0, -1);
    EXPECT(RING_UINT32, RING_AVG, 2, UINT32_MAX, 1, 0);
    EXPECT(RING_UINT32, RING_AVG, 3, UINT32_MAX, 0, 1431655765);
    EXPECT(RING_UINT32, RING_AVG, 2147483647, UINT32_MAX, 0, 2);
    EXPECT(RING_INT64, RING_AVG, 3, -10, 0, -3);
    EXPECT(RING_INT64, RING_AVG, 3, INT64_MIN, 0, INT64_MIN / 3);
    EXPECT(RING_UINT64, RING_AVG, 3, UINT64_MAX, 0, UINT64_MAX / 3);
    /* ring__reduce never divides: AVG combines like SUM */
    EXPECT(RING_INT32, RING_AVG, 0, 5, 6, 11);
}

#define H(x) ((uint64_t)(x))
Test(reduce_fp16, round_to_nearest_even)
{
    /* 1 + 2^-11 is the tie between 1 and 1+2^-10: goes to the even 1 */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x3c00), H(0x1000), H(0x3c00));
    /* (1+2^-10) + 2^-11 ties between 0x3c01 and 0x3c02: even is 0x3c02 */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x3c01), H(0x1000), H(0x3c02));
    /* just above the tie rounds up */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x3c00), H(0x1001), H(0x3c01));
    /* 65504 + 8 stays finite, 65504 + 16 = 65520 ties to 2^16, which is Inf */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x7bff), H(0x4800), H(0x7bff));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x7bff), H(0x4c00), H(0x7c00));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0xfbff), H(0xcc00), H(0xfc00));
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0x7bff), H(0x4000), H(0x7c00));
    /* subnormals: exact sums, carry into the normal range, ties at the bottom */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x0001), H(0x0001), H(0x0002));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x03ff), H(0x0001), H(0x0400));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x8001), H(0x0001), H(0x0000));
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0x0001), H(0x3800), H(0x0000)); /* 2^-25: tie to 0 */
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0x0003), H(0x3800), H(0x0002)); /* 1.5 ulp -> 2 */
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0x0001), H(0x3a00), H(0x0001)); /* 0.75 ulp -> 1 */
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0x0400), H(0x3800), H(0x0200)); /* into subnormals */
    /* signed zero */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x8000), H(0x8000), H(0x8000));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x8000), H(0x0000), H(0x0000));
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0xbc00), H(0x0000), H(0x8000));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x3c00), H(0xbc00), H(0x0000));
    /* NaN stays NaN, quiet, payload kept; Inf - Inf is NaN */
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x7e00), H(0x3c00), H(0x7e00));
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x3c00), H(0x7c01), H(0x7e01));
    EXPECT(RING_FLOAT16, RING_PROD, 0, H(0xfd55), H(0x0000), H(0xff55));
    cr_expect((one(RING_FLOAT16, RING_SUM, 0, 0x7c00, 0xfc00) & 0x7fff) > 0x7c00);
    EXPECT(RING_FLOAT16, RING_SUM, 0, H(0x7c00), H(0x7bff), H(0x7c00));
}

Test(reduce_fp16, min_max_nan_and_zero)
{
    EXPECT(RING_FLOAT16, RING_MIN, 0, H(0xc000), H(0x3c00), H(0xc000)); /* -2 vs 1 */
    EXPECT(RING_FLOAT16, RING_MAX, 0, H(0xc000), H(0x3c00), H(0x3c00));
    EXPECT(RING_FLOAT16, RING_MIN, 0, H(0x7e00), H(0x3c00), H(0x7e00)); /* NaN in a wins */
    EXPECT(RING_FLOAT16, RING_MIN, 0, H(0x3c00), H(0x7e00), H(0x7e00)); /* NaN in b too */
    EXPECT(RING_FLOAT16, RING_MAX, 0, H(0x7c01), H(0x3c00), H(0x7e01)); /* comes back quiet */
    EXPECT(RING_FLOAT16, RING_MIN, 0, H(0x0000), H(0x8000), H(0x0000)); /* zeros: a's */
    EXPECT(RING_FLOAT16, RING_MAX, 0, H(0x8000), H(0x0000), H(0x8000));
    EXPECT(RING_FLOAT16, RING_MIN, 0, H(0xfc00), H(0x7c00), H(0xfc00));
}

Test(reduce_fp16, avg_final)
{
    EXPECT(RING_FLOAT16, RING_AVG, 2, H(0x3c00), H(0x4000), H(0x3e00)); /* (1+2)/2 = 1.5 */
    EXPECT(RING_FLOAT16, RING_AVG, 3, H(0x3c00), H(0x0000), H(0x3555)); /* 1/3 */
    /* the sum is rounded to fp16 before the division, as every partial sum is: 65504 + 65504
     * overflows (it did not when the last sum stayed in float) */
    EXPECT(RING_FLOAT16, RING_AVG, 2, H(0x7bff), H(0x7bff), H(0x7c00));
    EXPECT(RING_FLOAT16, RING_AVG, 3, H(0x7bff), H(0x0000), H(0x7555)); /* 65504 / 3: 21840 */
    /* the sum's rounding shows: 2048 + 1 is 2048 in fp16, so 682.5 (683 when kept in float) */
    EXPECT(RING_FLOAT16, RING_AVG, 3, H(0x6800), H(0x3c00), H(0x6155));
    EXPECT(RING_FLOAT16, RING_AVG, 4, H(0x0001), H(0x0001), H(0x0000)); /* 2^-25: tie to 0 */
    EXPECT(RING_FLOAT16, RING_AVG, 0, H(0x3c00), H(0x4000), H(0x4200)); /* not final: a sum */
}

Test(reduce_bf16, round_to_nearest_even)
{
    /* ulp(1) = 2^-7; 1 + 2^-8 ties to even 1, (1+2^-7) + 2^-8 ties to 1+2^-6 */
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x3f80), H(0x3b80), H(0x3f80));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x3f81), H(0x3b80), H(0x3f82));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x3f80), H(0x3b81), H(0x3f81));
    /* overflow to Inf, in both signs */
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x7f7f), H(0x7f7f), H(0x7f80));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0xff7f), H(0xff7f), H(0xff80));
    EXPECT(RING_BFLOAT16, RING_PROD, 0, H(0x7f7f), H(0x3f81), H(0x7f80));
    /* subnormals (bf16 shares float's range) */
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x0001), H(0x0001), H(0x0002));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x007f), H(0x0001), H(0x0080));
    EXPECT(RING_BFLOAT16, RING_PROD, 0, H(0x0001), H(0x3f00), H(0x0000)); /* tie to 0 */
    EXPECT(RING_BFLOAT16, RING_PROD, 0, H(0x0003), H(0x3f00), H(0x0002));
    /* signed zero */
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x8000), H(0x8000), H(0x8000));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x8000), H(0x0000), H(0x0000));
    EXPECT(RING_BFLOAT16, RING_PROD, 0, H(0xbf80), H(0x0000), H(0x8000));
    /* NaN stays NaN and quiet */
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x7fc0), H(0x3f80), H(0x7fc0));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0x7f81), H(0x3f80), H(0x7fc1));
    EXPECT(RING_BFLOAT16, RING_SUM, 0, H(0xffff), H(0x3f80), H(0xffff));
    EXPECT(RING_BFLOAT16, RING_MIN, 0, H(0x7f81), H(0x3f80), H(0x7fc1));
    EXPECT(RING_BFLOAT16, RING_MIN, 0, H(0x3f80), H(0x7f81), H(0x7fc1)); /* NaN in b, quieted */
    EXPECT(RING_BFLOAT16, RING_MAX, 0, H(0xc000), H(0x3f80), H(0x3f80));
    EXPECT(RING_BFLOAT16, RING_AVG, 2, H(0x3f80), H(0x4000), H(0x3fc0));
    EXPECT(RING_BFLOAT16, RING_AVG, 3, H(0x3f80), H(0x0000), H(0x3eab)); /* 1/3 rounds up */
}

static uint64_t F(float f) { return bits_f32(f); }
static uint64_t D(double d) { return bits_f64(d); }

Test(reduce_float, ieee_cases)
{
    EXPECT(RING_FLOAT32, RING_SUM, 0, F(1.0f), F(0x1p-24f), F(1.0f)); /* tie to even */
    EXPECT(RING_FLOAT32, RING_SUM, 0, F(0x1.000002p0f), F(0x1p-24f), F(0x1.000004p0f));
    EXPECT(RING_FLOAT32, RING_SUM, 0, F(3.0e38f), F(3.0e38f), F(INFINITY));
    EXPECT(RING_FLOAT32, RING_SUM, 0, F(-0.0f), F(-0.0f), F(-0.0f));
    EXPECT(RING_FLOAT32, RING_PROD, 0, F(0x1p-149f), F(0.5f), F(0.0f));
    EXPECT(RING_FLOAT32, RING_MIN, 0, F(-3.0f), F(2.0f), F(-3.0f));
    EXPECT(RING_FLOAT32, RING_MAX, 0, F(-3.0f), F(-2.0f), F(-2.0f));
    EXPECT(RING_FLOAT32, RING_MIN, 0, 0x7fc00001u, F(2.0f), 0x7fc00001u); /* NaN in a wins */
    EXPECT(RING_FLOAT32, RING_MIN, 0, 0x7f800001u, F(2.0f), 0x7f800001u); /* a pure select */
    EXPECT(RING_FLOAT32, RING_MAX, 0, F(2.0f), 0x7fc00000u, 0x7fc00000u); /* NaN in b too */
    EXPECT(RING_FLOAT32, RING_MIN, 0, F(0.0f), F(-0.0f), F(0.0f));
    EXPECT(RING_FLOAT32, RING_AVG, 3, F(1.0f), F(0.0f), F(1.0f / 3.0f));
    EXPECT(RING_FLOAT32, RING_AVG, 2, F(3.0e38f), F(3.0e38f), F(INFINITY)); /* sum in float */
    EXPECT(RING_FLOAT32, RING_AVG, 0, F(1.0f), F(2.0f), F(3.0f));
    EXPECT(RING_FLOAT64, RING_SUM, 0, D(1.0), D(0x1p-53), D(1.0));
    EXPECT(RING_FLOAT64, RING_PROD, 0, D(-2.0), D(0.0), D(-0.0));
    EXPECT(RING_FLOAT64, RING_MIN, 0, D(-1e300), D(1e300), D(-1e300));
    EXPECT(RING_FLOAT64, RING_MAX, 0, D(NAN), D(1.0), D(NAN));
    EXPECT(RING_FLOAT64, RING_AVG, 3, D(1.0), D(0.0), D(1.0 / 3.0));
    EXPECT(RING_FLOAT64, RING_AVG, 2, D(1e308), D(1e308), D(INFINITY));
}

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

/* ring__fp_default_begin/end, which the library wraps around every collective on the
 * caller's thread (and the progress thread starts with): under a program's flush-to-zero,
 * round-toward-zero and unmasked overflow, the loops between them give the default mode's
 * bits, on every element of 67 (vector loops and tail), and end puts the program's mode back;
 * in the default mode begin writes nothing. The collectives themselves: mp_worker's fpmode. */
Test(reduce_float, default_mode_between_begin_and_end)
{
#if defined(__x86_64__)
    enum { N = 67 };
    float a[N], b[N], d[N];
    const float sub = 0x1p-140f, one = 1.0f, eps = 0x1.8p-24f, big = 3.0e38f;
    /* FTZ | DAZ | round toward zero | overflow unmasked */
    const unsigned mode = ((0x1f80u | 0x8040u | 0x6000u) & ~0x400u);
    const struct {
        float x, y, want;
    } cases[] = {{sub, sub, 0x1p-139f}, {one, eps, 0x1.000002p0f}, {big, big, INFINITY}};
    const unsigned saved = _mm_getcsr();
    cr_assert_eq(ring__fp_default_begin(), 0u, "the default mode needs nothing put back");
    cr_assert_eq(_mm_getcsr(), saved);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (int i = 0; i < N; i++) a[i] = cases[c].x, b[i] = cases[c].y;
        _mm_setcsr(mode);
        const unsigned fp = ring__fp_default_begin();
        ring__reduce(d, a, b, N, RING_FLOAT32, RING_SUM);
        ring__fp_default_end(fp);
        const unsigned after = _mm_getcsr();
        _mm_setcsr(saved);
        cr_assert_eq(after & ~0x3fu, mode, "the program's mode %#x came back as %#x", mode, after);
        for (int i = 0; i < N; i++) {
            uint32_t g, w;
            memcpy(&g, &d[i], 4);
            memcpy(&w, &cases[c].want, 4);
            cr_assert_eq(g, w, "case %zu element %d: %a + %a = %a (%#x), want %a", c, i, (double)cases[c].x,
                         (double)cases[c].y, (double)d[i], g, (double)cases[c].want);
        }
    }
#else
    cr_skip_test("x86-64 only: the mode is pinned there");
#endif
}

/* Zero elements must not touch memory at all. */
Test(reduce_misc, degenerate_calls_and_impl_name)
{
    for (int t = 0; t < RING_DTYPE_COUNT; t++)
        for (int op = 0; op < RING_OP_COUNT; op++) {
            ring__reduce(NULL, NULL, NULL, 0, (ring_dtype_t)t, (ring_op_t)op);
            ring__reduce_final(NULL, NULL, NULL, 0, (ring_dtype_t)t, (ring_op_t)op, 4);
        }
    /* Out-of-range dtype or op: nothing to do, and dst stays as it was. */
    uint64_t x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8}, z[4] = {9, 9, 9, 9};
    ring__reduce(z, x, y, 4, RING_DTYPE_COUNT, RING_SUM);
    ring__reduce(z, x, y, 4, RING_FLOAT16, RING_OP_COUNT);
    ring__reduce_final(z, x, y, 4, RING_INT32, RING_OP_COUNT, 2);
    for (int i = 0; i < 4; i++) cr_assert_eq(z[i], 9);

    const char *name = ring__reduce_impl_name();
    cr_assert(name);
    cr_assert(!strcmp(name, "x86-64-v4") || !strcmp(name, "x86-64-v3") || !strcmp(name, "generic"),
              "impl name %s", name);
    cr_log_info("reduce implementation: %s", name);
}

/* ---------- conversions ---------- */

Test(reduce_convert, fp16_all_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ring__half_to_float((uint16_t)h), r = ref_h2f((uint16_t)h);
        cr_assert_eq(bits_f32(f), bits_f32(r), "half_to_float(%#x) = %#x, want %#x", h,
                     bits_f32(f), bits_f32(r));
        uint16_t back = ring__float_to_half(f);
        if ((h & 0x7fff) > 0x7c00) /* NaN: quiet, same sign and payload */
            cr_assert_eq(back, h | 0x0200, "NaN %#x came back as %#x", h, back);
        else
            cr_assert_eq(back, h, "%#x came back as %#x", h, back);
#if RING_HAVE_FLOAT16
        _Float16 c;
        uint16_t hh = (uint16_t)h;
        memcpy(&c, &hh, 2);
        cr_assert_eq(bits_f32(f), bits_f32((float)c), "half_to_float(%#x) != _Float16's", h);
#endif
    }
}

Test(reduce_convert, bf16_all_patterns)
{
    /* rounding these NaNs as numbers would carry into the sign bit and give -0 / +0 */
    cr_assert_eq(ring__float_to_bf16(f32_of(0x7fffffffu)), 0x7fff);
    cr_assert_eq(ring__float_to_bf16(f32_of(0xffffffffu)), 0xffff);
    cr_assert_eq(ring__float_to_bf16(f32_of(0x7f800001u)), 0x7fc0);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ring__bf16_to_float((uint16_t)h);
        cr_assert_eq(bits_f32(f), (uint32_t)h << 16);
        uint16_t back = ring__float_to_bf16(f);
        if ((h & 0x7fff) > 0x7f80)
            cr_assert_eq(back, h | 0x0040, "NaN %#x came back as %#x", h, back);
        else
            cr_assert_eq(back, h, "%#x came back as %#x", h, back);
    }
}

/*
 * float -> fp16/bf16 over a sample of all 2^32 inputs: a coarse stride over everything plus
 * every float whose low bits sit at or next to a rounding tie of either format.
 */
Test(reduce_convert, float_to_16bit_sampled)
{
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        static const uint32_t lows[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000,
                                        0x7fff, 0x8000, 0x8001, 0xffff, 0x18000};
        for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
            uint32_t v = (uint32_t)u ^ (uint32_t)(u & 0x1ffff) ^ lows[k];
            float f = f32_of(v);
            uint16_t h = ring__float_to_half(f), rh = ref_f2h(f);
            cr_assert_eq(h, rh, "float_to_half(%#x) = %#x, want %#x", v, h, rh);
            uint16_t b = ring__float_to_bf16(f), rb = ref_f2b(f);
            cr_assert_eq(b, rb, "float_to_bf16(%#x) = %#x, want %#x", v, b, rb);
#if RING_HAVE_FLOAT16
            _Float16 c = (_Float16)f;
            uint16_t ch;
            memcpy(&ch, &c, 2);
            cr_assert_eq(h, ch, "float_to_half(%#x) = %#x, _Float16 says %#x", v, h, ch);
#endif
        }
    }
}
