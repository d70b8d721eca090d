/*
 * CUDA reduction kernels: dst[i] = a[i] op b[i] for every dtype x op, with the semantics of
 * the host loops (src/collectives/reduce.c), so that a chunk reduced on a GPU has the same
 * bits as one reduced by a CPU:
 *  - integers wrap (computed in the unsigned type); RING_AVG divides the wrapped sum by nranks
 *    and truncates towards zero. The host divides 8- and 32-bit sums in double and proves the
 *    truncated quotient equal to C's integer quotient, which is what is computed here;
 *  - float/double: one IEEE operation each, round to nearest-even (the __fadd_rn family,
 *    which the compiler never contracts into an FMA; -fmad=false besides), no flush to zero;
 *    AVG is (x + y) / nranks with nranks converted to the element type, as on the host;
 *  - fp16/bf16: widened to float (exact), combined in float with the host's operations and
 *    rounded to nearest-even once (__float2half_rn / __float2bfloat16_rn). float has more
 *    than 2p+2 bits for both, so SUM and PROD are also the correctly rounded 16-bit results:
 *    native __hadd/__hmul would give the same bits. AVG rounds the sum to 16 bits, as every
 *    partial sum is, then divides in float and rounds again, as the host does;
 *  - MIN/MAX: (y < x || y != y) ? y : x on the widened values, returning the input's bits, so
 *    NaN propagates from either side and -0 vs +0 keeps a; a NaN result of fp16/bf16 is
 *    quieted as the host's widen-and-narrow does (h | quiet bit);
 *  - one difference: a NaN made by SUM/PROD/AVG is the GPU's canonical NaN, where the host
 *    keeps an input's payload (x86 rules). NaN stays NaN either way.
 *
 * Memory access: every thread moves 16-byte vectors, kUnroll of them in flight per input
 * before the first use, in a grid-stride loop over a grid of one wave (SM count x 2048
 * threads). The vector body needs dst, a and b at the same address modulo 16; the elements
 * before dst's first 16-byte boundary (head) and after the last whole vector (tail), fewer
 * than one vector each, are done one by one by the first threads. When the three pointers
 * are not congruent modulo 16 the kernel runs on single elements (still coalesced).
 * Pointers must be aligned to their element size (the API's rule; checked, never launched
 * otherwise: a misaligned access would kill the CUDA context).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "ring_cuda.h"

/* src/core/internal.h is C11 (stdatomic.h) and not for C++; the one function used here. */
extern "C" ring_result_t ring__seterr(ring_comm_t *comm, ring_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kVec = 16;

/* ---------- element operations: one struct per dtype family, op as template argument ---------- */

/* Integers: T the element type, U its unsigned type, W the type + and * are computed in (wide
 * enough that uint8_t operands do not promote to a signed int, as in reduce.c), D the type the
 * AVG division is done in (int for 8-bit: the divisor is the whole nranks). */
template <typename T, typename U, typename W, typename D> struct IntOps {
    template <int OP> static __host__ __device__ __forceinline__ T apply(T x, T y, int nranks)
    {
        if (OP == RING_SUM || OP == RING_AVG) {
            T s = (T)(U)((W)(U)x + (W)(U)y);
            if (OP == RING_SUM) return s;
            return (T)((D)s / (D)nranks);
        }
        if (OP == RING_PROD) return (T)(U)((W)(U)x * (W)(U)y);
        if (OP == RING_MIN) return y < x ? y : x;
        return y > x ? y : x; /* RING_MAX */
    }
};

typedef IntOps<int8_t, uint8_t, unsigned, int> Int8Ops;
typedef IntOps<uint8_t, uint8_t, unsigned, int> Uint8Ops;
typedef IntOps<int32_t, uint32_t, uint32_t, int32_t> Int32Ops;
typedef IntOps<uint32_t, uint32_t, uint32_t, uint32_t> Uint32Ops;
typedef IntOps<int64_t, uint64_t, uint64_t, int64_t> Int64Ops;
typedef IntOps<uint64_t, uint64_t, uint64_t, uint64_t> Uint64Ops;

/* One IEEE operation, rounded to nearest-even, never contracted. Host code (the emulation,
 * below) is compiled with -ffp-contract=off and SSE arithmetic, which is the same thing. */
#ifdef __CUDA_ARCH__
#define RN(dev, expr) dev
#else
#define RN(dev, expr) (expr)
#endif
__host__ __device__ __forceinline__ float add_rn(float x, float y) { return RN(__fadd_rn(x, y), x + y); }
__host__ __device__ __forceinline__ float mul_rn(float x, float y) { return RN(__fmul_rn(x, y), x * y); }
__host__ __device__ __forceinline__ float div_rn(float x, float y) { return RN(__fdiv_rn(x, y), x / y); }
__host__ __device__ __forceinline__ double add_rn(double x, double y) { return RN(__dadd_rn(x, y), x + y); }
__host__ __device__ __forceinline__ double mul_rn(double x, double y) { return RN(__dmul_rn(x, y), x * y); }
__host__ __device__ __forceinline__ double div_rn(double x, double y) { return RN(__ddiv_rn(x, y), x / y); }

/* MIN_OF / MAX_OF of reduce.c: NaN from either side, -0 vs +0 keeps x. */
template <typename F> __host__ __device__ __forceinline__ bool take_y_min(F x, F y) { return y < x || y != y; }
template <typename F> __host__ __device__ __forceinline__ bool take_y_max(F x, F y) { return y > x || y != y; }

template <typename T> struct FloatOps {
    template <int OP> static __host__ __device__ __forceinline__ T apply(T x, T y, int nranks)
    {
        if (OP == RING_SUM) return add_rn(x, y);
        if (OP == RING_PROD) return mul_rn(x, y);
        if (OP == RING_AVG) return div_rn(add_rn(x, y), (T)nranks);
        if (OP == RING_MIN) return take_y_min(x, y) ? y : x;
        return take_y_max(x, y) ? y : x; /* RING_MAX */
    }
};

/* 16-bit floats, stored as their bits. */
struct HalfConv {
    static __host__ __device__ __forceinline__ float widen(uint16_t h) { return __half2float(__ushort_as_half(h)); }
    static __host__ __device__ __forceinline__ uint16_t narrow(float f) { return __half_as_ushort(__float2half_rn(f)); }
    static constexpr uint16_t kInf = 0x7c00, kQuiet = 0x0200;
};
struct Bf16Conv {
    static __host__ __device__ __forceinline__ float widen(uint16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }
    static __host__ __device__ __forceinline__ uint16_t narrow(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
    static constexpr uint16_t kInf = 0x7f80, kQuiet = 0x0040;
};

template <class C> struct NarrowOps {
    /* A NaN comes out of the host's widen-compare-narrow quiet, payload kept: h | quiet bit. */
    static __host__ __device__ __forceinline__ uint16_t quiet(uint16_t h)
    {
        return (uint16_t)((h & 0x7fffu) > C::kInf ? h | C::kQuiet : h);
    }
    template <int OP> static __host__ __device__ __forceinline__ uint16_t apply(uint16_t x, uint16_t y, int nranks)
    {
        float fx = C::widen(x), fy = C::widen(y);
        if (OP == RING_SUM) return C::narrow(add_rn(fx, fy));
        if (OP == RING_PROD) return C::narrow(mul_rn(fx, fy));
        if (OP == RING_AVG) return C::narrow(div_rn(C::widen(C::narrow(add_rn(fx, fy))), (float)nranks));
        if (OP == RING_MIN) return quiet(take_y_min(fx, fy) ? y : x);
        return quiet(take_y_max(fx, fy) ? y : x); /* RING_MAX */
    }
};

/* ---------- the kernel ---------- */

/* The device compiler unrolls; the host compiler (emulation) does not know the pragma. */
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

template <int B> struct Raw;
template <> struct Raw<16> { typedef uint4 type; };
template <> struct Raw<8> { typedef unsigned long long type; };
template <> struct Raw<4> { typedef unsigned type; };
template <> struct Raw<2> { typedef unsigned short type; };
template <> struct Raw<1> { typedef unsigned char type; };

/* One access of VB bytes, as raw bits or as elements. */
template <typename T, int VB> union VecOf {
    typename Raw<VB>::type raw;
    T e[VB / sizeof(T)];
};

/*
 * VB bytes per access: kVec (the vector body), or sizeof(T) (single elements; head and tail
 * are then 0). Elements [0, head) and [head + nvec*W, head + nvec*W + tail) one by one, the
 * nvec vectors in between as whole loads and stores. dst may alias a or b exactly, so no
 * __restrict__: every vector is loaded before the store that could overwrite it.
 */
template <class Ops, typename T, int OP, int VB>
__host__ __device__ __forceinline__ void reduce_thread(size_t tid, size_t stride, T *dst, const T *a, const T *b,
                                                       size_t head, size_t nvec, size_t tail, int nranks)
{
    constexpr int W = VB / (int)sizeof(T);
    typedef typename Raw<VB>::type R;
    typedef VecOf<T, VB> Vec;
    const size_t body_end = head + nvec * W;
    if (tid < head) dst[tid] = Ops::template apply<OP>(a[tid], b[tid], nranks);
    if (tid < tail) dst[body_end + tid] = Ops::template apply<OP>(a[body_end + tid], b[body_end + tid], nranks);

    const R *va = reinterpret_cast<const R *>(a + head);
    const R *vb = reinterpret_cast<const R *>(b + head);
    R *vd = reinterpret_cast<R *>(dst + head);
    size_t i = tid;
    for (; i + (kUnroll - 1) * stride < nvec; i += kUnroll * stride) {
        Vec x[kUnroll], y[kUnroll];
UNROLL
        for (int u = 0; u < kUnroll; u++) {
            x[u].raw = va[i + u * stride];
            y[u].raw = vb[i + u * stride];
        }
UNROLL
        for (int u = 0; u < kUnroll; u++) {
UNROLL
            for (int e = 0; e < W; e++) x[u].e[e] = Ops::template apply<OP>(x[u].e[e], y[u].e[e], nranks);
            vd[i + u * stride] = x[u].raw;
        }
    }
    for (; i < nvec; i += stride) {
        Vec x, y;
        x.raw = va[i];
        y.raw = vb[i];
UNROLL
        for (int e = 0; e < W; e++) x.e[e] = Ops::template apply<OP>(x.e[e], y.e[e], nranks);
        vd[i] = x.raw;
    }
}

template <class Ops, typename T, int OP, int VB>
__global__ void __launch_bounds__(kThreads)
reduce_kernel(T *dst, const T *a, const T *b, size_t head, size_t nvec, size_t tail, int nranks)
{
    reduce_thread<Ops, T, OP, VB>((size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x, dst,
                                  a, b, head, nvec, tail, nranks);
}

/*
 * Many inputs (ring__cuda_reduce_multi): dst = ((s0 op s1) op s2) ... op s[n-1], one rounding
 * per step as in a chain of the two-input kernel, the last step the final one (AVG divides
 * there), written to dst and to every extra output out[1..nout). Each thread keeps its
 * kUnroll vectors in registers across the inputs, so each input is read once and each output
 * written once: (n + nout) x bytes instead of 3(n - 1) x bytes plus copies.
 */
struct Srcs {
    const void *p[RING__CUDA_MULTI_MAX];
    void *out[RING__CUDA_MULTI_MAX]; /* out[0] is the kernel's dst */
    int nout;
};

template <int OP> struct StepOp {
    static constexpr int value = OP == RING_AVG ? RING_SUM : OP; /* AVG divides at the last step only */
};

template <class Ops, typename T, int OP>
__host__ __device__ __forceinline__ T combine(const Srcs &s, int n, size_t j, int nranks)
{
    T v = static_cast<const T *>(s.p[0])[j];
    for (int k = 1; k < n; k++) {
        T y = static_cast<const T *>(s.p[k])[j];
        v = k == n - 1 ? Ops::template apply<OP>(v, y, nranks) : Ops::template apply<StepOp<OP>::value>(v, y, nranks);
    }
    return v;
}

template <class Ops, typename T, int OP, int VB>
__host__ __device__ __forceinline__ void multi_thread(size_t tid, size_t stride, T *dst, const Srcs &s, int n,
                                                      size_t head, size_t nvec, size_t tail, int nranks)
{
    constexpr int W = VB / (int)sizeof(T);
    typedef typename Raw<VB>::type R;
    typedef VecOf<T, VB> Vec;
    const size_t body_end = head + nvec * W;
    for (int side = 0; side < 2; side++) {
        const size_t j = side ? body_end + tid : tid;
        if (tid >= (side ? tail : head)) continue;
        const T v = combine<Ops, T, OP>(s, n, j, nranks);
        dst[j] = v;
        for (int o = 1; o < s.nout; o++) static_cast<T *>(s.out[o])[j] = v;
    }

    R *vd = reinterpret_cast<R *>(dst + head);
    size_t i = tid;
    for (; i + (kUnroll - 1) * stride < nvec; i += kUnroll * stride) {
        Vec x[kUnroll], y[kUnroll];
        const R *v0 = reinterpret_cast<const R *>(static_cast<const T *>(s.p[0]) + head);
UNROLL
        for (int u = 0; u < kUnroll; u++) x[u].raw = v0[i + u * stride];
        for (int k = 1; k < n; k++) {
            const R *vk = reinterpret_cast<const R *>(static_cast<const T *>(s.p[k]) + head);
UNROLL
            for (int u = 0; u < kUnroll; u++) y[u].raw = vk[i + u * stride];
            if (k == n - 1) {
UNROLL
                for (int u = 0; u < kUnroll; u++)
UNROLL
                    for (int e = 0; e < W; e++) x[u].e[e] = Ops::template apply<OP>(x[u].e[e], y[u].e[e], nranks);
            } else {
UNROLL
                for (int u = 0; u < kUnroll; u++)
UNROLL
                    for (int e = 0; e < W; e++)
                        x[u].e[e] = Ops::template apply<StepOp<OP>::value>(x[u].e[e], y[u].e[e], nranks);
            }
        }
UNROLL
        for (int u = 0; u < kUnroll; u++) vd[i + u * stride] = x[u].raw;
        for (int o = 1; o < s.nout; o++) {
            R *vo = reinterpret_cast<R *>(static_cast<T *>(s.out[o]) + head);
UNROLL
            for (int u = 0; u < kUnroll; u++) vo[i + u * stride] = x[u].raw;
        }
    }
    for (; i < nvec; i += stride) {
        Vec x, y;
        x.raw = reinterpret_cast<const R *>(static_cast<const T *>(s.p[0]) + head)[i];
        for (int k = 1; k < n; k++) {
            y.raw = reinterpret_cast<const R *>(static_cast<const T *>(s.p[k]) + head)[i];
UNROLL
            for (int e = 0; e < W; e++)
                x.e[e] = k == n - 1 ? Ops::template apply<OP>(x.e[e], y.e[e], nranks)
                                    : Ops::template apply<StepOp<OP>::value>(x.e[e], y.e[e], nranks);
        }
        vd[i] = x.raw;
        for (int o = 1; o < s.nout; o++) reinterpret_cast<R *>(static_cast<T *>(s.out[o]) + head)[i] = x.raw;
    }
}

template <class Ops, typename T, int OP, int VB>
__global__ void __launch_bounds__(kThreads)
multi_kernel(T *dst, Srcs s, int n, size_t head, size_t nvec, size_t tail, int nranks)
{
    multi_thread<Ops, T, OP, VB>((size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x, dst, s,
                                 n, head, nvec, tail, nranks);
}

/* Tests without a GPU: the same per-thread code on the CPU, for `emulate` threads one after
 * another (each element belongs to one thread, so the order does not matter). 0: the GPU. */
thread_local size_t emulate;

/* Blocks for `work` threads' worth of items: at most one full wave (2048 threads per SM). */
cudaError_t grid_for(size_t work, unsigned *blocks)
{
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    size_t wave = (size_t)(sms > 0 ? sms : 1) * (2048 / kThreads);
    size_t want = (work + kThreads - 1) / kThreads;
    *blocks = (unsigned)(want < 1 ? 1 : want < wave ? want : wave);
    return cudaSuccess;
}

/* One grid-stride wave for the larger of head, nvec and tail, on stream. */
cudaError_t launch_config(size_t head, size_t nvec, size_t tail, cudaStream_t stream, cudaLaunchConfig_t *cfg)
{
    size_t work = nvec > head ? nvec : head;
    if (tail > work) work = tail;
    *cfg = cudaLaunchConfig_t{};
    cudaError_t e = grid_for(work, &cfg->gridDim.x);
    cfg->gridDim.y = cfg->gridDim.z = 1;
    cfg->blockDim = dim3(kThreads, 1, 1);
    cfg->stream = stream;
    return e;
}

/* Either kernel (s != NULL: the many-input one on s->p[0..n)), or its threads on the CPU. */
template <class Ops, typename T, int OP, int VB>
cudaError_t launch(T *dst, const T *a, const T *b, const Srcs *s, int n, size_t head, size_t nvec, size_t tail,
                   int nranks, cudaStream_t stream)
{
    for (size_t t = 0; t < emulate; t++) {
        if (s) multi_thread<Ops, T, OP, VB>(t, emulate, dst, *s, n, head, nvec, tail, nranks);
        else reduce_thread<Ops, T, OP, VB>(t, emulate, dst, a, b, head, nvec, tail, nranks);
    }
    if (emulate) return cudaSuccess;
    cudaLaunchConfig_t cfg;
    cudaError_t e = launch_config(head, nvec, tail, stream, &cfg);
    if (e != cudaSuccess) return e;
    /* cudaLaunchKernelEx rather than <<<>>>: the launch stub nvcc generates keeps its kernel
     * handle in a function-local static, which needs C++'s thread-safe statics (libstdc++);
     * the library is C and builds with -fno-threadsafe-statics. */
    if (s) return cudaLaunchKernelEx(&cfg, multi_kernel<Ops, T, OP, VB>, dst, *s, n, head, nvec, tail, nranks);
    return cudaLaunchKernelEx(&cfg, reduce_kernel<Ops, T, OP, VB>, dst, a, b, head, nvec, tail, nranks);
}

/* The vector body's split of n elements at dst: single elements up to dst's first 16-byte
 * boundary (head), whole vectors, the rest one by one (tail). */
template <typename T> void split(const T *dst, size_t n, size_t *head, size_t *nvec, size_t *tail)
{
    constexpr size_t W = kVec / sizeof(T);
    *head = ((kVec - (uintptr_t)dst % kVec) % kVec) / sizeof(T);
    if (*head > n) *head = n;
    *nvec = (n - *head) / W;
    *tail = n - *head - *nvec * W;
}

/* The vector body where dst, a and b agree modulo 16, else single elements. */
template <class Ops, typename T, int OP>
cudaError_t run_op(void *dstv, const void *av, const void *bv, size_t n, int nranks, cudaStream_t stream)
{
    T *dst = static_cast<T *>(dstv);
    const T *a = static_cast<const T *>(av), *b = static_cast<const T *>(bv);
    const uintptr_t d = (uintptr_t)dst % kVec;
    if ((uintptr_t)a % kVec != d || (uintptr_t)b % kVec != d)
        return launch<Ops, T, OP, (int)sizeof(T)>(dst, a, b, nullptr, 0, 0, n, 0, nranks, stream);
    size_t head, nvec, tail;
    split(dst, n, &head, &nvec, &tail);
    return launch<Ops, T, OP, kVec>(dst, a, b, nullptr, 0, head, nvec, tail, nranks, stream);
}

/* The same for many inputs: the vector body where every input and output agree modulo 16. */
template <class Ops, typename T, int OP>
cudaError_t run_multi_op(void *dstv, const Srcs &s, int nsrc, size_t n, int nranks, cudaStream_t stream)
{
    T *dst = static_cast<T *>(dstv);
    bool congruent = true;
    for (int k = 0; k < nsrc; k++) congruent = congruent && (uintptr_t)s.p[k] % kVec == (uintptr_t)dst % kVec;
    for (int o = 1; o < s.nout; o++) congruent = congruent && (uintptr_t)s.out[o] % kVec == (uintptr_t)dst % kVec;
    if (!congruent) return launch<Ops, T, OP, (int)sizeof(T)>(dst, nullptr, nullptr, &s, nsrc, 0, n, 0, nranks, stream);
    size_t head, nvec, tail;
    split(dst, n, &head, &nvec, &tail);
    return launch<Ops, T, OP, kVec>(dst, nullptr, nullptr, &s, nsrc, head, nvec, tail, nranks, stream);
}

/* One entry for both kernels: s == NULL is the two-input kernel on a and b. */
template <class Ops, typename T, int OP>
cudaError_t run_any(void *dst, const void *a, const void *b, const Srcs *s, int nsrc, size_t n, int nranks,
                    cudaStream_t stream)
{
    return s ? run_multi_op<Ops, T, OP>(dst, *s, nsrc, n, nranks, stream) : run_op<Ops, T, OP>(dst, a, b, n, nranks, stream);
}

template <class Ops, typename T>
cudaError_t run_dtype(void *dst, const void *a, const void *b, const Srcs *s, int nsrc, size_t n, ring_op_t op,
                      int nranks, cudaStream_t stream)
{
    switch (op) {
    case RING_SUM: return run_any<Ops, T, RING_SUM>(dst, a, b, s, nsrc, n, nranks, stream);
    case RING_PROD: return run_any<Ops, T, RING_PROD>(dst, a, b, s, nsrc, n, nranks, stream);
    case RING_MIN: return run_any<Ops, T, RING_MIN>(dst, a, b, s, nsrc, n, nranks, stream);
    case RING_MAX: return run_any<Ops, T, RING_MAX>(dst, a, b, s, nsrc, n, nranks, stream);
    case RING_AVG: return run_any<Ops, T, RING_AVG>(dst, a, b, s, nsrc, n, nranks, stream);
    default: return cudaErrorInvalidValue;
    }
}

const char *dtype_label(ring_dtype_t dt)
{
    static const char *const names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                        "uint64",  "float16", "bfloat16", "float32", "float64"};
    return (unsigned)dt < RING_DTYPE_COUNT ? names[dt] : "?";
}

/* Both kernels' checks and dispatch; s != NULL: the many-input kernel on s->p[0..nsrc). */
ring_result_t reduce_any(ring_comm_t *comm, void *dst, const void *a, const void *b, const Srcs *s, int nsrc,
                         size_t count, ring_dtype_t dtype, ring_op_t op, int nranks, cudaStream_t stream)
{
    const char *what = s ? "ring__cuda_reduce_multi" : nranks ? "ring__cuda_reduce_final" : "ring__cuda_reduce";
    if ((unsigned)dtype >= RING_DTYPE_COUNT || (unsigned)op >= RING_OP_COUNT)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s: invalid dtype %d or op %d", what, (int)dtype, (int)op);
    if (s && (nsrc < 2 || nsrc > RING__CUDA_MULTI_MAX || s->nout < 1 || s->nout > RING__CUDA_MULTI_MAX))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s: %d inputs and %d outputs (2 to %d, 1 to %d)", what, nsrc,
                            s->nout, RING__CUDA_MULTI_MAX, RING__CUDA_MULTI_MAX);
    if (count == 0) return RING_OK;
    size_t es = ring_dtype_size(dtype);
    uintptr_t bits = (uintptr_t)dst;
    bool null = !dst;
    if (s) {
        for (int k = 0; k < nsrc; k++) bits |= (uintptr_t)s->p[k], null = null || !s->p[k];
        for (int o = 1; o < s->nout; o++) bits |= (uintptr_t)s->out[o], null = null || !s->out[o];
    } else {
        bits |= (uintptr_t)a | (uintptr_t)b;
        null = null || !a || !b;
    }
    if (null) return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s: NULL pointer with count %zu", what, count);
    if (bits % es)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s: %s buffers must be aligned to %zu bytes (dst %p, a %p, b %p)",
                            what, dtype_label(dtype), es, dst, s ? s->p[0] : a, s ? s->p[1] : b);
    if (op == RING_AVG && nranks == 0) op = RING_SUM; /* not the final step, as on the host */
    /* Tests without a GPU (ring__cuda_set_emulation): queue it on the emulated stream, which
     * runs it later through the emulated entries below (emulate != 0 then). */
    if (!emulate && ring__cuda_emulating())
        return s ? ring__cuda_emu_reduce_multi(comm, s->out, s->nout, s->p, nsrc, count, dtype, op, nranks, stream)
                 : ring__cuda_emu_reduce(comm, dst, a, b, count, dtype, op, nranks, stream);
    cudaError_t e = cudaErrorInvalidValue;
    switch (dtype) {
    case RING_INT8: e = run_dtype<Int8Ops, int8_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_UINT8: e = run_dtype<Uint8Ops, uint8_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_INT32: e = run_dtype<Int32Ops, int32_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_UINT32: e = run_dtype<Uint32Ops, uint32_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_INT64: e = run_dtype<Int64Ops, int64_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_UINT64: e = run_dtype<Uint64Ops, uint64_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_FLOAT16: e = run_dtype<NarrowOps<HalfConv>, uint16_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_BFLOAT16: e = run_dtype<NarrowOps<Bf16Conv>, uint16_t>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_FLOAT32: e = run_dtype<FloatOps<float>, float>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    case RING_FLOAT64: e = run_dtype<FloatOps<double>, double>(dst, a, b, s, nsrc, count, op, nranks, stream); break;
    default: break;
    }
    if (e != cudaSuccess) {
        char w[96];
        snprintf(w, sizeof w, "%s(%s, count %zu): kernel launch", what, dtype_label(dtype), count);
        return ring__cuda_error(comm, (int)e, w);
    }
    return RING_OK;
}

ring_result_t reduce(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                     ring_dtype_t dtype, ring_op_t op, int nranks, cudaStream_t stream)
{
    return reduce_any(comm, dst, a, b, NULL, 0, count, dtype, op, nranks, stream);
}

ring_result_t reduce_multi(ring_comm_t *comm, void *const *dsts, int ndst, const void *const *srcs, int nsrc,
                           size_t count, ring_dtype_t dtype, ring_op_t op, int nranks, cudaStream_t stream)
{
    Srcs s = {};
    if (nsrc < 0 || nsrc > RING__CUDA_MULTI_MAX) nsrc = -1; /* reduce_any reports it */
    s.nout = ndst < 1 || ndst > RING__CUDA_MULTI_MAX ? 0 : ndst;
    for (int k = 0; k < nsrc; k++) s.p[k] = srcs[k];
    for (int o = 0; o < s.nout; o++) s.out[o] = dsts[o];
    return reduce_any(comm, s.out[0], NULL, NULL, &s, nsrc, count, dtype, op, nranks, stream);
}

} // namespace

extern "C" ring_result_t ring__cuda_reduce_emulated(ring_comm_t *comm, void *dst, const void *a, const void *b,
                                                    size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                                    size_t nthreads)
{
    /* A real grid has whole blocks of kThreads (>= 16, which the head and tail need). */
    emulate = (nthreads + kThreads - 1) / kThreads * kThreads;
    if (!emulate) emulate = kThreads;
    ring_result_t rc = reduce(comm, dst, a, b, count, dtype, op, nranks < 0 ? 1 : nranks, NULL);
    emulate = 0;
    return rc;
}

extern "C" ring_result_t ring__cuda_reduce_multi_emulated(ring_comm_t *comm, void *const *dsts, int ndst,
                                                          const void *const *srcs, int nsrc, size_t count,
                                                          ring_dtype_t dtype, ring_op_t op, int nranks, size_t nthreads)
{
    emulate = (nthreads + kThreads - 1) / kThreads * kThreads;
    if (!emulate) emulate = kThreads;
    ring_result_t rc = reduce_multi(comm, dsts, ndst, srcs, nsrc, count, dtype, op, nranks < 1 ? 1 : nranks, NULL);
    emulate = 0;
    return rc;
}

extern "C" ring_result_t ring__cuda_reduce_multi(ring_comm_t *comm, void *const *dsts, int ndst, const void *const *srcs,
                                                 int nsrc, size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                                 ring__cuda_stream_t stream)
{
    return reduce_multi(comm, dsts, ndst, srcs, nsrc, count, dtype, op, nranks < 1 ? 1 : nranks, stream);
}

extern "C" ring_result_t ring__cuda_reduce(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                           ring_dtype_t dtype, ring_op_t op, ring__cuda_stream_t stream)
{
    return reduce(comm, dst, a, b, count, dtype, op, 0, stream);
}

/* nranks < 1 is a caller bug; it is taken as 1 rather than divided by (as on the host). */
extern "C" ring_result_t ring__cuda_reduce_final(ring_comm_t *comm, void *dst, const void *a, const void *b,
                                                 size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                                 ring__cuda_stream_t stream)
{
    return reduce(comm, dst, a, b, count, dtype, op, nranks < 1 ? 1 : nranks, stream);
}
