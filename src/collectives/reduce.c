/*
 * Host reduction loops.
 *
 * Layout, top to bottom:
 *  - fp16/bf16 <-> float conversions written branch-free on the bits, so that they vectorise
 *    on any target and give the same bits as the F16C instructions;
 *  - one always-inline kernel per dtype family (integers, float/double, 16-bit floats), each a
 *    switch over the op with one plain element-wise loop per case;
 *  - run_*(): the switch over the dtype, compiled once per target (x86-64-v4, x86-64-v3,
 *    baseline); the widest the CPU has runs, picked once (ring__reduce_force lets the tests run
 *    each one on a CPU that has them all); with RING_HAVE_TARGET_CLONES 0 (or a compiler other
 *    than GCC) there is only the baseline, vectorised for it;
 *  - half_f16c(): fp16 with F16C intrinsics, used where the v3 clone would run (see there for
 *    why, and why _Float16 is not used);
 *  - the entry points.
 *
 * Determinism: every result is a function of a[i] and b[i] alone, computed with the operations
 * written here in IEEE single/double precision (no reassociation; nothing of the form a*b+c
 * exists, so FMA contraction has nothing to fuse). Every clone therefore produces the same bits,
 * with one exception no ISA pins down: when both inputs of a SUM/PROD/AVG are NaN, which of
 * the two payloads survives may depend on the operand order the compiler picked, which differs
 * between a clone's vector loop and its scalar fallback (taken where dst overlaps a source
 * within a vector's width, and for the tail). All of this is in the default floating-point
 * environment, which the callers put in place on x86-64 (ring__fp_default_begin) whatever the
 * program set; elsewhere (aarch64's FPCR) the calling thread's mode applies.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "reduce.h"
#include "ring_config.h"

/* GCC warns about this pragma and needs none: -std=c11 already implies -ffp-contract=off. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/*
 * Only GCC gets the per-level copies. Clang 14 treats "arch=x86-64-vN" as a CPU-model name
 * (its target_clones resolver never selected the v3 clone and picked v4 on a CPU-vendor
 * comparison) and does not know __builtin_cpu_supports("x86-64-v3").
 */
#if RING_HAVE_TARGET_CLONES && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define USE_CLONES 1
#include <immintrin.h>
#else
#define USE_CLONES 0
#endif
#if defined(__x86_64__)
#include <xmmintrin.h> /* _mm_getcsr: SSE is in every x86-64 */
#endif

/* The kernels must be inlined into each clone to be compiled for its ISA. */
#define KERNEL static inline __attribute__((always_inline))

static inline float as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t as_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/*
 * Mask-based select rather than ?: so that GCC does not turn it into a branch with the float
 * arithmetic sunk into one arm: with -ftrapping-math it then refuses to if-convert the loop.
 */
static inline uint32_t pick(int c, uint32_t x, uint32_t y)
{
    uint32_t m = 0u - (uint32_t)c;
    return (x & m) | (y & ~m);
}

/*
 * binary16 -> binary32, exact. Normal numbers only need the exponent rebiased (+112); Inf/NaN
 * get the float maximum exponent, and NaNs the quiet bit, as vcvtph2ps does; subnormals are
 * renormalised by a float subtraction that is exact (both operands share the exponent 2^-14).
 */
static inline float half_to_float(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t exp = o & 0x0f800000u;
    uint32_t norm = o + 0x38000000u;
    uint32_t sub = as_bits(as_float(o + 0x38800000u) - as_float(0x38800000u));
    uint32_t special = (norm + 0x38000000u) | pick((int32_t)o > 0x0f800000, 0x00400000u, 0);
    uint32_t r = pick(exp == 0x0f800000u, special, pick(exp == 0, sub, norm));
    return as_float(r | (uint32_t)(h & 0x8000u) << 16);
}

/*
 * binary32 -> binary16, round to nearest-even, bit-identical to vcvtps2ph with imm 0 for all
 * 2^32 inputs (NaNs keep sign and top payload bits and become quiet). Three ranges of |f|:
 *  - >= 65536 or Inf/NaN: Inf or NaN (65520..65536 overflows through the normal path);
 *  - < 2^-14, the fp16 subnormals: adding 0.5 lines the 2^-24 grid up with the float's last
 *    mantissa bit, so the FPU's own rounding does nearest-even;
 *  - otherwise: rebias, then add half an ulp minus one plus the lsb to round ties to even.
 */
static inline uint16_t float_to_half(float x)
{
    uint32_t u = as_bits(x);
    uint32_t sign = u & 0x80000000u;
    uint32_t f = u ^ sign;
    int32_t fs = (int32_t)f; /* < 2^31: signed compares, which SSE/AVX2 have natively */
    uint32_t big = pick(fs > 0x7f800000, 0x7e00u | ((f >> 13) & 0x3ffu), 0x7c00u);
    uint32_t sub = as_bits(as_float(f) + 0.5f) - 0x3f000000u;
    uint32_t norm = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
    uint32_t o = pick(fs >= 0x47800000, big, pick(fs < 0x38800000, sub, norm));
    return (uint16_t)(o | sign >> 16);
}

static inline float bf16_to_float(uint16_t h) { return as_float((uint32_t)h << 16); }

/*
 * Adding 0x7fff plus the lsb carries into the upper half exactly when rounding up to even.
 * NaNs are truncated instead (rounding could carry them into Inf or the sign) and made quiet.
 * Both arms are integer-only, so a plain ?: is safe here and vectorises to a blend.
 */
static inline uint16_t float_to_bf16(float x)
{
    uint32_t u = as_bits(x);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(x != x ? nan : rounded);
}

float ring__half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t ring__float_to_half(float f) { return float_to_half(f); }
float ring__bf16_to_float(uint16_t h) { return bf16_to_float(h); }
uint16_t ring__float_to_bf16(float f) { return float_to_bf16(f); }

/*
 * dst may be a or b itself, so no restrict: GCC versions each loop with an overlap check that
 * an exact alias passes (distance 0), so in-place runs the vector loop too.
 * The buffers are the caller's and need not be aligned to the element (a float array at an odd
 * address is a valid host buffer): the elements are read and written through a copy of T
 * aligned to 1, which the compiler loads with the same unaligned vector moves it uses anyway.
 * Through T itself such an access was undefined (UBSan: "load of misaligned address").
 */
#define LOOP(T, EXPR)                                                                              \
    do {                                                                                           \
        typedef T __attribute__((aligned(1))) any_t;                                               \
        any_t *d_ = dst;                                                                           \
        const any_t *a_ = a, *b_ = b;                                                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x = a_[i], y = b_[i];                                                                \
            d_[i] = (EXPR);                                                                        \
        }                                                                                          \
    } while (0)

/*
 * MIN/MAX propagate NaN from either operand (a NaN in a is returned as is; a NaN in b by the
 * y != y test), so the result does not depend on which rank of the ring holds the NaN. For
 * -0 vs +0 the value from a wins. Integers: y != y is false and compiles away.
 * fp16/bf16 compare after widening, so they behave the same.
 */
#define MIN_OF(x, y) (((y) < (x) || (y) != (y)) ? (y) : (x))
#define MAX_OF(x, y) (((y) > (x) || (y) != (y)) ? (y) : (x))

/*
 * Integers. SUM and PROD go through the unsigned type (wrapping without UB; the low bits of a
 * sum or product do not depend on signedness). W is the type the product is computed in, wide
 * enough that uint8_t operands do not promote to a signed int.
 *
 * AVG (reached only on the final step): for 8- and 32-bit types the division is done in
 * double, which vectorises where integer division does not, and it is exact: |sum| < 2^32 and
 * nranks < 2^31 are exact doubles, and when the quotient q is not an integer it is at least
 * 1/nranks away from every integer, while the division's rounding error is at most
 * |q| * 2^-53 < 2^-21 / nranks; so truncating the double gives C's quotient. 64-bit types
 * divide as integers, one element at a time.
 */
#define INT_KERNEL(NAME, S, U, W, DIV_IN_DOUBLE)                                                   \
    KERNEL void NAME(void *dst, const void *a, const void *b, size_t n, int is_signed,            \
                     ring_op_t op, int nranks)                                                     \
    {                                                                                              \
        switch (op) {                                                                              \
        case RING_AVG:                                                                             \
            if (DIV_IN_DOUBLE) {                                                                   \
                double dn = (double)nranks;                                                        \
                if (is_signed)                                                                     \
                    LOOP(S, (S)((double)(S)(U)((W)(U)x + (U)y) / dn));                             \
                else                                                                               \
                    LOOP(U, (U)((double)(U)((W)x + y) / dn));                                      \
            } else if (is_signed) {                                                                \
                S sn = (S)nranks;                                                                  \
                LOOP(S, (S)((S)(U)((W)(U)x + (U)y) / sn));                                         \
            } else {                                                                               \
                U un = (U)nranks;                                                                  \
                LOOP(U, (U)((U)((W)x + y) / un));                                                  \
            }                                                                                      \
            return;                                                                                \
        case RING_SUM: LOOP(U, (U)((W)x + y)); return;                                             \
        case RING_PROD: LOOP(U, (U)((W)x * y)); return;                                            \
        case RING_MIN:                                                                             \
            if (is_signed)                                                                         \
                LOOP(S, MIN_OF(x, y));                                                             \
            else                                                                                   \
                LOOP(U, MIN_OF(x, y));                                                             \
            return;                                                                                \
        case RING_MAX:                                                                             \
            if (is_signed)                                                                         \
                LOOP(S, MAX_OF(x, y));                                                             \
            else                                                                                   \
                LOOP(U, MAX_OF(x, y));                                                             \
            return;                                                                                \
        default: return;                                                                           \
        }                                                                                          \
    }

INT_KERNEL(int8_kernel, int8_t, uint8_t, unsigned, 1)
INT_KERNEL(int32_kernel, int32_t, uint32_t, uint32_t, 1)
INT_KERNEL(int64_kernel, int64_t, uint64_t, uint64_t, 0)

/* float and double; the AVG divisor is converted once, in the element type. */
#define FLOAT_KERNEL(NAME, T)                                                                      \
    KERNEL void NAME(void *dst, const void *a, const void *b, size_t n, ring_op_t op, int nranks) \
    {                                                                                              \
        switch (op) {                                                                              \
        case RING_AVG: {                                                                           \
            T dn = (T)nranks;                                                                      \
            LOOP(T, (x + y) / dn);                                                                 \
            return;                                                                                \
        }                                                                                          \
        case RING_SUM: LOOP(T, x + y); return;                                                     \
        case RING_PROD: LOOP(T, x * y); return;                                                    \
        case RING_MIN: LOOP(T, MIN_OF(x, y)); return;                                              \
        case RING_MAX: LOOP(T, MAX_OF(x, y)); return;                                              \
        default: return;                                                                           \
        }                                                                                          \
    }

FLOAT_KERNEL(float_kernel, float)
FLOAT_KERNEL(double_kernel, double)

/*
 * fp16/bf16: widen, combine in float, round back on every call. float has more than
 * 2p+2 bits for both formats, so the float result rounded to 16 bits is also the correctly
 * rounded 16-bit sum, product and quotient (no double-rounding error). AVG's last sum is
 * rounded to 16 bits before the division, as every earlier partial sum was: kept in float it
 * could not overflow where an earlier one did, so whether an average came out Inf depended on
 * which two partial sums the algorithm added last (the ring and recursive doubling differed).
 */
#define NARROW_KERNEL(NAME, TO, FROM)                                                              \
    KERNEL void NAME(void *dst, const void *a, const void *b, size_t n, ring_op_t op, int nranks) \
    {                                                                                              \
        switch (op) {                                                                              \
        case RING_AVG: {                                                                           \
            float dn = (float)nranks;                                                              \
            LOOP(uint16_t, FROM(TO(FROM(TO(x) + TO(y))) / dn));                                            \
            return;                                                                                \
        }                                                                                          \
        case RING_SUM: LOOP(uint16_t, FROM(TO(x) + TO(y))); return;                                \
        case RING_PROD: LOOP(uint16_t, FROM(TO(x) * TO(y))); return;                               \
        case RING_MIN: LOOP(uint16_t, FROM(MIN_OF(TO(x), TO(y)))); return;                         \
        case RING_MAX: LOOP(uint16_t, FROM(MAX_OF(TO(x), TO(y)))); return;                         \
        default: return;                                                                           \
        }                                                                                          \
    }

NARROW_KERNEL(half_kernel, half_to_float, float_to_half)
NARROW_KERNEL(bf16_kernel, bf16_to_float, float_to_bf16)

KERNEL void run_body(void *dst, const void *a, const void *b, size_t n, ring_dtype_t dtype, ring_op_t op,
                     int nranks)
{
    switch (dtype) {
    case RING_INT8: int8_kernel(dst, a, b, n, 1, op, nranks); return;
    case RING_UINT8: int8_kernel(dst, a, b, n, 0, op, nranks); return;
    case RING_INT32: int32_kernel(dst, a, b, n, 1, op, nranks); return;
    case RING_UINT32: int32_kernel(dst, a, b, n, 0, op, nranks); return;
    case RING_INT64: int64_kernel(dst, a, b, n, 1, op, nranks); return;
    case RING_UINT64: int64_kernel(dst, a, b, n, 0, op, nranks); return;
    case RING_FLOAT16: half_kernel(dst, a, b, n, op, nranks); return;
    case RING_BFLOAT16: bf16_kernel(dst, a, b, n, op, nranks); return;
    case RING_FLOAT32: float_kernel(dst, a, b, n, op, nranks); return;
    case RING_FLOAT64: double_kernel(dst, a, b, n, op, nranks); return;
    default: return;
    }
}

/* Paths, widest last; each run_* is run_body compiled for its target. */
enum { PATH_GENERIC, PATH_V3, PATH_V4 };
static const char *const path_names[] = {"generic", "x86-64-v3", "x86-64-v4"};

static void run_generic(void *dst, const void *a, const void *b, size_t n, ring_dtype_t dtype, ring_op_t op, int nranks)
{
    run_body(dst, a, b, n, dtype, op, nranks);
}

#if USE_CLONES
__attribute__((target("arch=x86-64-v3"))) static void run_v3(void *dst, const void *a, const void *b, size_t n,
                                                              ring_dtype_t dtype, ring_op_t op, int nranks)
{
    run_body(dst, a, b, n, dtype, op, nranks);
}

__attribute__((target("arch=x86-64-v4"))) static void run_v4(void *dst, const void *a, const void *b, size_t n,
                                                              ring_dtype_t dtype, ring_op_t op, int nranks)
{
    run_body(dst, a, b, n, dtype, op, nranks);
}
#endif

/* The widest path this CPU has. */
static int detect(void)
{
#if USE_CLONES
    __builtin_cpu_init(); /* a no-op once libgcc's constructor ran; we may run before it */
    if (__builtin_cpu_supports("x86-64-v4")) return PATH_V4;
    if (__builtin_cpu_supports("x86-64-v3")) return PATH_V3;
#endif
    return PATH_GENERIC;
}

/* -1 until the first reduction (or ring__reduce_force) picks; then fixed. Racing first calls
 * store the same value. */
static _Atomic int chosen = -1;

static int path(void)
{
    int p = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (p < 0) {
        p = detect();
        atomic_store_explicit(&chosen, p, memory_order_relaxed);
    }
    return p;
}

#if USE_CLONES
/*
 * Why fp16 has its own loop, and why _Float16 (RING_HAVE_FLOAT16) is not used: GCC 12
 * vectorises _Float16 <-> float conversions only with AVX512-FP16. With F16C alone it emits one
 * scalar vcvtph2ps per element (about 4 GB/s in cache), and the baseline clone calls libgcc per
 * element (0.2 GB/s). The bit-level conversions above vectorise everywhere, but at 4-6 GB/s in
 * AVX2/AVX-512 clones; this F16C loop runs at memory speed. It is used wherever the v3 clone
 * would be. It performs the same float operations, and the conversions it swaps in are
 * bit-identical to half_to_float/float_to_half on every input (also under FTZ/DAZ), so the
 * result does not depend on the path. The tail goes through a zero-padded block so that it
 * is computed by the same instructions.
 */
#define LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define STORE8(p, v)                                                                               \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#define ROUND16(v) _mm256_cvtph_ps(_mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#define F16C_LOOP(EXPR)                                                                            \
    do {                                                                                           \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8) {                                                               \
            __m256 x = LOAD8(a + 2 * i), y = LOAD8(b + 2 * i);                                     \
            STORE8(d + 2 * i, EXPR);                                                               \
        }                                                                                          \
        if (i < n) {                                                                               \
            uint16_t ta[8] = {0}, tb[8] = {0}, td[8];                                              \
            memcpy(ta, a + 2 * i, (n - i) * 2);                                                    \
            memcpy(tb, b + 2 * i, (n - i) * 2);                                                    \
            __m256 x = LOAD8(ta), y = LOAD8(tb);                                                   \
            STORE8(td, EXPR);                                                                      \
            memcpy(d + 2 * i, td, (n - i) * 2);                                                    \
        }                                                                                          \
    } while (0)

/* minps/maxps return their second operand unless the first compares less/greater (so a NaN in
 * x = a comes through); the blend passes a NaN in y = b too, as MIN_OF/MAX_OF do. The buffers
 * are bytes (2 per element): they need not be aligned to 2, and every access is loadu/storeu
 * or memcpy. */
__attribute__((target("arch=x86-64-v3"))) static void
half_f16c(unsigned char *d, const unsigned char *a, const unsigned char *b, size_t n, ring_op_t op, int nranks)
{
    switch (op) {
    case RING_AVG: {
        __m256 dn = _mm256_set1_ps((float)nranks);
        F16C_LOOP(_mm256_div_ps(ROUND16(_mm256_add_ps(x, y)), dn));
        return;
    }
    case RING_SUM: F16C_LOOP(_mm256_add_ps(x, y)); return;
    case RING_PROD: F16C_LOOP(_mm256_mul_ps(x, y)); return;
    case RING_MIN: F16C_LOOP(_mm256_blendv_ps(_mm256_min_ps(y, x), y, _mm256_cmp_ps(y, y, _CMP_UNORD_Q))); return;
    case RING_MAX: F16C_LOOP(_mm256_blendv_ps(_mm256_max_ps(y, x), y, _mm256_cmp_ps(y, y, _CMP_UNORD_Q))); return;
    default: return;
    }
}

#endif

static void reduce(void *dst, const void *a, const void *b, size_t count, ring_dtype_t dtype,
                   ring_op_t op, int nranks)
{
    if (count == 0) return;
    if (op == RING_AVG && nranks == 0) op = RING_SUM; /* not the final step */
    const int p = path();
    (void)p; /* only the generic path without the per-level copies */
#if USE_CLONES
    if (p >= PATH_V3 && dtype == RING_FLOAT16) {
        half_f16c(dst, a, b, count, op, nranks);
        return;
    }
    if (p == PATH_V4) run_v4(dst, a, b, count, dtype, op, nranks);
    else if (p == PATH_V3) run_v3(dst, a, b, count, dtype, op, nranks);
    else
#endif
        run_generic(dst, a, b, count, dtype, op, nranks);
}

/* MXCSR as a process starts: round to nearest, no flush-to-zero or denormals-are-zero, every
 * exception masked (status flags, the low 6 bits, aside). */
#define CSR_DEFAULT 0x1f80u

unsigned ring__fp_default_begin(void)
{
#if defined(__x86_64__)
    /* Reading costs a few cycles; the two writes, here and in end, about 50 ns together on the
     * test VM, so only when the mode differs. */
    const unsigned csr = _mm_getcsr();
    if ((csr & ~0x3fu) == CSR_DEFAULT) return 0;
    _mm_setcsr(CSR_DEFAULT);
    return csr | 0x80000000u; /* bit 31 is reserved in MXCSR: "set, put this back" */
#else
    return 0;
#endif
}

void ring__fp_default_end(unsigned saved)
{
#if defined(__x86_64__)
    /* The program's mode, with the status flags it had and those the call raised, as where
     * nothing was written. */
    if (saved & 0x80000000u) _mm_setcsr((saved & ~0x80000000u) | (_mm_getcsr() & 0x3fu));
#else
    (void)saved;
#endif
}

void ring__reduce(void *dst, const void *a, const void *b, size_t count, ring_dtype_t dtype,
                  ring_op_t op)
{
    reduce(dst, a, b, count, dtype, op, 0);
}

/* nranks < 1 is a caller bug; it is taken as 1 rather than divided by. */
void ring__reduce_final(void *dst, const void *a, const void *b, size_t count,
                        ring_dtype_t dtype, ring_op_t op, int nranks)
{
    reduce(dst, a, b, count, dtype, op, nranks < 1 ? 1 : nranks);
}

const char *ring__reduce_impl_name(void) { return path_names[path()]; }

int ring__reduce_force(const char *name)
{
    const int widest = detect();
    int want = widest;
    if (name) {
        for (want = PATH_V4; want >= 0 && strcmp(name, path_names[want]); want--) {
        }
        if (want < 0 || want > widest) return -1;
    }
    atomic_store_explicit(&chosen, want, memory_order_relaxed);
    return 0;
}
