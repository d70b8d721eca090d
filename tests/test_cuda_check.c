/*
 * CUDA kernel checks against the host reduction (test_cuda_check.h). Plain C, no test
 * framework: test_cuda.c wraps these in Criterion tests, test_cuda_main.c in a main().
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#include "reduce.h"
#include "test_cuda_check.h"

static const char *const dtype_names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                          "uint64",  "float16", "bfloat16", "float32", "float64"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};

const char *tc_dtype_name(ring_dtype_t dt) { return (unsigned)dt < RING_DTYPE_COUNT ? dtype_names[dt] : "?"; }
const char *tc_op_name(ring_op_t op) { return (unsigned)op < RING_OP_COUNT ? op_names[op] : "?"; }

int tc_gpu_available(char *why, size_t len) { return ring__cuda_usable(why, len); }

void tc_describe_gpu(char *out, size_t len)
{
    if (ring__cuda_describe(NULL, 0, out, len) != RING_OK) snprintf(out, len, "%s", ring_comm_last_error(NULL));
}

/* ---------- data ---------- */

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int is_float(ring_dtype_t dt)
{
    return dt == RING_FLOAT16 || dt == RING_BFLOAT16 || dt == RING_FLOAT32 || dt == RING_FLOAT64;
}

/* Zeros of both signs, subnormals, the largest finite values, infinities, quiet and
 * signalling NaNs of both signs. */
static const uint16_t specials16_half[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
                                           0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7d23, 0x3c00, 0xbc00};
static const uint16_t specials16_bf16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f,
                                           0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fa5, 0x3f80, 0xbf80};
static const uint32_t specials32[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00800000u,
                                      0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                      0x7f800001u, 0x7fa5a5a5u, 0x3f800000u, 0xbf800000u};
static const uint64_t specials64[] = {0x0000000000000000ull, 0x8000000000000000ull, 0x0000000000000001ull,
                                      0x8000000000000001ull, 0x000fffffffffffffull, 0x0010000000000000ull,
                                      0x7fefffffffffffffull, 0xffefffffffffffffull, 0x7ff0000000000000ull,
                                      0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000000ull,
                                      0x7ff0000000000001ull, 0x7ff5a5a5a5a5a5a5ull, 0x3ff0000000000000ull,
                                      0xbff0000000000000ull};

/*
 * Integers: random bits. Floats, per element: 3 in 4 moderate numbers (random sign and
 * mantissa, exponent near 0, so sums and products round in every way without overflowing),
 * 1 in 8 special values, 1 in 8 random bits (any class, NaN payloads included).
 */
static void gen(void *buf, size_t n, ring_dtype_t dt, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next_u64(s), q = next_u64(s);
        int kind = (int)(q & 7); /* 0: bits, 1: special, else moderate */
        switch (dt) {
        case RING_INT8:
        case RING_UINT8: ((uint8_t *)buf)[i] = (uint8_t)r; break;
        case RING_INT32:
        case RING_UINT32: ((uint32_t *)buf)[i] = (uint32_t)r; break;
        case RING_INT64:
        case RING_UINT64: ((uint64_t *)buf)[i] = r; break;
        case RING_FLOAT16: {
            uint16_t v = (uint16_t)r;
            if (kind == 1) v = specials16_half[r % 16];
            else if (kind > 1) v = (uint16_t)((r & 0x8000) | (uint64_t)(15 + (int)((q >> 8) % 13) - 6) << 10 | (r & 0x3ff));
            ((uint16_t *)buf)[i] = v;
            break;
        }
        case RING_BFLOAT16: {
            uint16_t v = (uint16_t)r;
            if (kind == 1) v = specials16_bf16[r % 16];
            else if (kind > 1) v = (uint16_t)((r & 0x8000) | (uint64_t)(127 + (int)((q >> 8) % 41) - 20) << 7 | (r & 0x7f));
            ((uint16_t *)buf)[i] = v;
            break;
        }
        case RING_FLOAT32: {
            uint32_t v = (uint32_t)r;
            if (kind == 1) v = specials32[r % 16];
            else if (kind > 1)
                v = (uint32_t)((r & 0x80000000u) | (uint64_t)(127 + (int)((q >> 8) % 61) - 30) << 23 | (r & 0x7fffffu));
            ((uint32_t *)buf)[i] = v;
            break;
        }
        case RING_FLOAT64: {
            uint64_t v = r;
            if (kind == 1) v = specials64[r % 16];
            else if (kind > 1)
                v = (r & 0x8000000000000000ull) | (uint64_t)(1023 + (int)((q >> 8) % 201) - 100) << 52 |
                    (r & 0x000fffffffffffffull);
            ((uint64_t *)buf)[i] = v;
            break;
        }
        default: break;
        }
    }
}

static int is_nan(const unsigned char *p, ring_dtype_t dt)
{
    uint16_t h;
    uint32_t f;
    uint64_t d;
    switch (dt) {
    case RING_FLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
    case RING_BFLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
    case RING_FLOAT32: memcpy(&f, p, 4); return (f & 0x7fffffffu) > 0x7f800000u;
    case RING_FLOAT64: memcpy(&d, p, 8); return (d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

static void hex_elem(char *out, size_t len, const unsigned char *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es); /* little-endian */
    snprintf(out, len, "0x%0*" PRIx64, (int)(2 * es), v);
}

/* ---------- buffers, kept between cases: device memory, or host memory when emulating ---------- */

typedef struct arena {
    void *buf[3];
    size_t cap;
    int host; /* buf[] are host memory (emulation) */
    ring__cuda_stream_t stream;
} arena_t;

static _Thread_local arena_t arena;
static _Thread_local size_t emulate_threads;

void tc_set_emulation(size_t nthreads) { emulate_threads = nthreads; }

static void arena_free(void)
{
    for (int k = 0; k < 3; k++) {
        if (arena.host) free(arena.buf[k]);
        else ring__cuda_dev_free(arena.buf[k]);
        arena.buf[k] = NULL;
    }
    arena.cap = 0;
}

static int arena_ensure(size_t bytes, char *msg, size_t len)
{
    int host = emulate_threads != 0;
    if (arena.cap >= bytes && arena.host == host) return 0;
    arena_free();
    arena.host = host;
    for (int k = 0; k < 3; k++) {
        /* Both 256-byte aligned, as cudaMalloc's are. */
        if (host ? !(arena.buf[k] = aligned_alloc(256, (bytes + 255) & ~(size_t)255))
                 : ring__cuda_dev_alloc(NULL, bytes, &arena.buf[k]) != RING_OK) {
            snprintf(msg, len, "%s", host ? "out of host memory" : ring_comm_last_error(NULL));
            return -1;
        }
    }
    if (!host && !arena.stream && ring__cuda_stream_create(NULL, &arena.stream) != RING_OK) {
        snprintf(msg, len, "%s", ring_comm_last_error(NULL));
        return -1;
    }
    arena.cap = bytes;
    return 0;
}

#define CANARY 0xA5

static void describe_case(char *out, size_t len, const tc_case_t *c)
{
    static const char *const alias[] = {"out of place", "dst == a", "dst == b"};
    char final[32] = "";
    if (c->nranks) snprintf(final, sizeof final, " final nranks=%d", c->nranks);
    snprintf(out, len, "%s %s%s, count %zu, offsets dst %zu a %zu b %zu (elements), %s, seed %" PRIu64 "%s",
             tc_dtype_name(c->dtype), tc_op_name(c->op), final, c->count,
             c->alias == TC_OUT_OF_PLACE ? c->off_dst : c->alias == TC_DST_IS_A ? c->off_a : c->off_b, c->off_a,
             c->off_b, alias[c->alias], c->seed, emulate_threads ? " (emulated on the CPU)" : "");
}

int tc_run_case(const tc_case_t *c, char *msg, size_t len)
{
    const size_t es = ring_dtype_size(c->dtype), n = c->count;
    size_t maxoff = c->off_dst > c->off_a ? c->off_dst : c->off_a;
    if (c->off_b > maxoff) maxoff = c->off_b;
    const size_t cap = (n + maxoff + 64) * es;
    char what[256];
    int result = -1;
    describe_case(what, sizeof what, c);
    unsigned char *ha = malloc(n * es + 1), *hb = malloc(n * es + 1), *ref = malloc(n * es + 1), *out = malloc(cap);
    if (!ha || !hb || !ref || !out) {
        snprintf(msg, len, "%s: out of host memory", what);
        goto done;
    }
    if (arena_ensure(cap, msg, len)) goto done;

    uint64_t s = c->seed;
    gen(ha, n, c->dtype, &s);
    gen(hb, n, c->dtype, &s);

    /* The host result, with the same aliasing. */
    const void *ra = ha, *rb = hb;
    if (c->alias == TC_DST_IS_A) {
        memcpy(ref, ha, n * es);
        ra = ref;
    } else if (c->alias == TC_DST_IS_B) {
        memcpy(ref, hb, n * es);
        rb = ref;
    }
    if (c->nranks) ring__reduce_final(ref, ra, rb, n, c->dtype, c->op, c->nranks);
    else ring__reduce(ref, ra, rb, n, c->dtype, c->op);

    unsigned char *da = arena.buf[0], *db = arena.buf[1], *dd = arena.buf[2];
    unsigned char *pa = da + c->off_a * es, *pb = db + c->off_b * es, *pd = dd + c->off_dst * es, *dbase = dd;
    if (c->alias == TC_DST_IS_A) pd = pa, dbase = da;
    if (c->alias == TC_DST_IS_B) pd = pb, dbase = db;
    ring_result_t rc;
    if (arena.host) {
        memset(da, CANARY, cap);
        memset(db, CANARY, cap);
        memset(dd, CANARY, cap);
        memcpy(pa, ha, n * es);
        memcpy(pb, hb, n * es);
        rc = ring__cuda_reduce_emulated(NULL, pd, pa, pb, n, c->dtype, c->op, c->nranks, emulate_threads);
        if (rc != RING_OK) {
            snprintf(msg, len, "%s: %s: %s", what, ring_result_name(rc), ring_comm_last_error(NULL));
            goto done;
        }
        memcpy(out, dbase, cap);
    } else {
        ring__cuda_stream_t st = (c->seed & 1) ? arena.stream : NULL;
        if (ring__cuda_memset(NULL, da, CANARY, cap) || ring__cuda_memset(NULL, db, CANARY, cap) ||
            ring__cuda_memset(NULL, dd, CANARY, cap) || ring__cuda_memcpy(NULL, pa, ha, n * es) ||
            ring__cuda_memcpy(NULL, pb, hb, n * es)) {
            snprintf(msg, len, "%s: set-up: %s", what, ring_comm_last_error(NULL));
            goto done;
        }
        rc = c->nranks ? ring__cuda_reduce_final(NULL, pd, pa, pb, n, c->dtype, c->op, c->nranks, st)
                       : ring__cuda_reduce(NULL, pd, pa, pb, n, c->dtype, c->op, st);
        if (rc == RING_OK) rc = ring__cuda_stream_sync(NULL, st);
        if (rc != RING_OK) {
            snprintf(msg, len, "%s: %s: %s", what, ring_result_name(rc), ring_comm_last_error(NULL));
            goto done;
        }
        if (ring__cuda_memcpy(NULL, out, dbase, cap)) {
            snprintf(msg, len, "%s: copy back: %s", what, ring_comm_last_error(NULL));
            goto done;
        }
    }
    result = 0;
    const size_t start = (size_t)(pd - dbase);
    for (size_t b = 0; b < cap; b++) {
        if (b >= start && b < start + n * es) continue;
        if (out[b] != CANARY) {
            snprintf(msg, len, "%s: byte %zd from dst's first element was written (0x%02x): out of bounds", what,
                     (ssize_t)b - (ssize_t)start, out[b]);
            result = 1;
            goto done;
        }
    }
    const int lenient_nan = is_float(c->dtype) && c->op != RING_MIN && c->op != RING_MAX;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *h = ref + i * es, *d = out + start + i * es;
        if (!memcmp(h, d, es)) continue;
        if (lenient_nan && is_nan(h, c->dtype) && is_nan(d, c->dtype)) continue;
        char xa[24], xb[24], xh[24], xd[24];
        hex_elem(xa, sizeof xa, ha + i * es, es);
        hex_elem(xb, sizeof xb, hb + i * es, es);
        hex_elem(xh, sizeof xh, h, es);
        hex_elem(xd, sizeof xd, d, es);
        snprintf(msg, len, "%s: element %zu: a %s, b %s: host %s, GPU %s", what, i, xa, xb, xh, xd);
        result = 1;
        goto done;
    }
done:
    free(ha);
    free(hb);
    free(ref);
    free(out);
    return result;
}

/* ---------- sweeps ---------- */

typedef struct pattern {
    size_t d, a, b;
    tc_alias_t alias;
} pattern_t;

/* Aligned; the same misalignment (vector body after a head); different ones (single
 * elements); in place both ways. */
static const pattern_t patterns[] = {
    {0, 0, 0, TC_OUT_OF_PLACE}, {1, 1, 1, TC_OUT_OF_PLACE}, {3, 3, 3, TC_OUT_OF_PLACE},
    {0, 1, 2, TC_OUT_OF_PLACE}, {5, 5, 2, TC_OUT_OF_PLACE}, {0, 1, 1, TC_DST_IS_A},
    {0, 3, 7, TC_DST_IS_B},
};

static const size_t lengths[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 1000, 4099, 65537,
                                 (1u << 20) + 13};
static const size_t quick_lengths[] = {0, 1, 3, 8, 17, 33, 65, 1000};

static int record(int r, char *msg, size_t len, const char *one, int *failures, int verbose)
{
    if (r == 0) return 0;
    if (!*failures) snprintf(msg, len, "%s", one);
    if (verbose) fprintf(stderr, "  FAIL %s\n", one);
    (*failures)++;
    return r;
}

int tc_sweep_dtype(ring_dtype_t dt, int quick, int verbose, char *msg, size_t len, int *ncases)
{
    int failures = 0, cases = 0;
    char one[1024];
    const size_t *ls = quick ? quick_lengths : lengths;
    size_t nl = quick ? sizeof quick_lengths / sizeof *quick_lengths : sizeof lengths / sizeof *lengths;
    /* The CPU emulation stops at 65537 elements (still many grid-stride iterations of a small
     * grid); tc_sweep_large covers big buffers. */
    if (!quick && emulate_threads) nl--;
    /* Not the final step (0), a final step, and AVG divisors 1, 2 and 300 (more than an 8-bit
     * type holds: the divisor must not be narrowed). */
    static const int nranks_all[] = {0, 3};
    static const int nranks_avg[] = {1, 2, 300};
    uint64_t seed = 0x5eed0000u + (uint64_t)dt * 0x10000u;
    for (int op = 0; op < RING_OP_COUNT; op++) {
        int variants = 2 + (op == RING_AVG ? 3 : 0);
        for (int v = 0; v < variants; v++) {
            int nr = v < 2 ? nranks_all[v] : nranks_avg[v - 2];
            for (size_t li = 0; li < nl; li++)
                for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
                    tc_case_t c = {.dtype = dt, .op = (ring_op_t)op, .nranks = nr, .count = ls[li],
                                   .off_dst = patterns[p].d, .off_a = patterns[p].a, .off_b = patterns[p].b,
                                   .alias = patterns[p].alias, .seed = seed++};
                    int r = tc_run_case(&c, one, sizeof one);
                    cases++;
                    if (record(r, msg, len, one, &failures, verbose) < 0) goto out; /* CUDA broke: stop */
                }
        }
        if (verbose) fprintf(stderr, "  %s %s: %d cases, %d failed so far\n", tc_dtype_name(dt), tc_op_name((ring_op_t)op), cases, failures);
    }
out:
    if (ncases) *ncases = cases;
    return failures;
}

/*
 * The many-input kernel (ring__cuda_reduce_multi, direct collectives): nsrc inputs against
 * the host chain ring__reduce(s0, s1), ..., ring__reduce_final(.., s[n-1], nranks = nsrc),
 * which is what the kernel promises bit for bit, written to ndst outputs. off: per input and
 * then per output element offsets; in_place: output k is input k (the direct all-reduce's
 * in-place call), else the outputs are separate.
 */
static int multi_case(ring_dtype_t dt, ring_op_t op, int nsrc, int ndst, size_t n, const size_t *off, int in_place,
                      uint64_t seed, char *msg, size_t len)
{
    const size_t es = ring_dtype_size(dt), cap = (n + 64) * es, stride = (cap + 255) & ~(size_t)255;
    const size_t total = stride * (size_t)(nsrc + ndst);
    unsigned char *host = malloc(total), *ref = malloc(n * es + 1), *out = malloc(total);
    unsigned char *mem = NULL;
    const void *srcs[RING__CUDA_MULTI_MAX];
    void *dsts[RING__CUDA_MULTI_MAX];
    char what[256];
    int result = -1;
    snprintf(what, sizeof what,
             "reduce_multi %s %s, %d inputs, %d outputs, count %zu, offsets %zu %zu .. %zu, %s, seed %" PRIu64 "%s",
             tc_dtype_name(dt), tc_op_name(op), nsrc, ndst, n, off[0], off[1], off[nsrc + ndst - 1],
             in_place ? "outputs are the inputs" : "out of place", seed, emulate_threads ? " (emulated on the CPU)" : "");
    if (!host || !ref || !out) {
        snprintf(msg, len, "%s: out of host memory", what);
        goto done;
    }
    if (emulate_threads ? !(mem = aligned_alloc(256, total)) : ring__cuda_dev_alloc(NULL, total, (void **)&mem) != RING_OK) {
        snprintf(msg, len, "%s: %s", what, emulate_threads ? "out of host memory" : ring_comm_last_error(NULL));
        mem = NULL;
        goto done;
    }
    memset(host, CANARY, total);
    uint64_t s = seed;
    for (int k = 0; k < nsrc; k++) gen(host + (size_t)k * stride + off[k] * es, n, dt, &s);
    memcpy(ref, host + off[0] * es, n * es);
    for (int k = 1; k < nsrc; k++) {
        const void *in = host + (size_t)k * stride + off[k] * es;
        if (k == nsrc - 1) ring__reduce_final(ref, ref, in, n, dt, op, nsrc);
        else ring__reduce(ref, ref, in, n, dt, op);
    }
    for (int k = 0; k < nsrc; k++) srcs[k] = mem + (size_t)k * stride + off[k] * es;
    for (int o = 0; o < ndst; o++)
        dsts[o] = in_place ? (void *)srcs[o] : mem + (size_t)(nsrc + o) * stride + off[nsrc + o] * es;
    ring_result_t rc;
    if (emulate_threads) {
        memcpy(mem, host, total);
        rc = ring__cuda_reduce_multi_emulated(NULL, dsts, ndst, srcs, nsrc, n, dt, op, nsrc, emulate_threads);
        if (rc == RING_OK) memcpy(out, mem, total);
    } else {
        rc = ring__cuda_memcpy(NULL, mem, host, total);
        if (rc == RING_OK) rc = ring__cuda_reduce_multi(NULL, dsts, ndst, srcs, nsrc, n, dt, op, nsrc, arena.stream);
        if (rc == RING_OK) rc = ring__cuda_stream_sync(NULL, arena.stream);
        if (rc == RING_OK) rc = ring__cuda_memcpy(NULL, out, mem, total);
    }
    if (rc != RING_OK) {
        snprintf(msg, len, "%s: %s: %s", what, ring_result_name(rc), ring_comm_last_error(NULL));
        goto done;
    }
    result = 0;
    /* Every output holds the result; every other byte (inputs that are not outputs,
     * canaries) is as it was. */
    for (size_t b = 0; b < total; b++) {
        int in_out = 0;
        for (int o = 0; o < ndst && !in_out; o++) {
            size_t start = (size_t)((unsigned char *)dsts[o] - mem);
            in_out = b >= start && b < start + n * es;
        }
        if (!in_out && out[b] != host[b]) {
            snprintf(msg, len, "%s: byte %zu changed but is no output's: out of bounds", what, b);
            result = 1;
            goto done;
        }
    }
    const int lenient_nan = is_float(dt) && op != RING_MIN && op != RING_MAX;
    for (int o = 0; o < ndst; o++) {
        const size_t start = (size_t)((unsigned char *)dsts[o] - mem);
        for (size_t i = 0; i < n; i++) {
            const unsigned char *h = ref + i * es, *d = out + start + i * es;
            if (!memcmp(h, d, es) || (lenient_nan && is_nan(h, dt) && is_nan(d, dt))) continue;
            char xh[24], xd[24];
            hex_elem(xh, sizeof xh, h, es);
            hex_elem(xd, sizeof xd, d, es);
            snprintf(msg, len, "%s: output %d element %zu: host %s, GPU %s", what, o, i, xh, xd);
            result = 1;
            goto done;
        }
    }
done:
    if (emulate_threads) free(mem);
    else ring__cuda_dev_free(mem);
    free(host);
    free(ref);
    free(out);
    return result;
}

int tc_sweep_multi(ring_dtype_t dt, int quick, int verbose, char *msg, size_t len, int *ncases)
{
    static const int nsrcs[] = {2, 3, 5, RING__CUDA_MULTI_MAX};
    static const size_t mlengths[] = {1, 3, 8, 17, 33, 127, 1000, 4099, 65537};
    const size_t nl = quick ? 6 : sizeof mlengths / sizeof *mlengths - (emulate_threads ? 1 : 0);
    int failures = 0, cases = 0;
    char one[1024];
    uint64_t seed = 0x3a17000u + (uint64_t)dt * 0x10000u;
    if (!emulate_threads && arena_ensure(64, msg, len)) return 1; /* the stream */
    for (int op = 0; op < RING_OP_COUNT; op++)
        for (size_t ni = 0; ni < sizeof nsrcs / sizeof *nsrcs - (quick ? 1 : 0); ni++)
            for (size_t li = 0; li < nl; li++)
                for (int pat = 0; pat < 5; pat++) {
                    /* One output: aligned; all one element in (vector body after a head); one
                     * input off by one (single elements). Every input an output too (the
                     * in-place direct all-reduce), aligned; as many separate outputs, one off
                     * by one. */
                    const int ns = nsrcs[ni], nd = pat < 3 ? 1 : ns;
                    size_t off[2 * RING__CUDA_MULTI_MAX] = {0};
                    for (int k = 0; k < ns + nd; k++) off[k] = pat == 1 ? 1 : 0;
                    if (pat == 2) off[ns - 1] = 1;
                    if (pat == 4) off[ns + nd - 1] = 1;
                    int r = multi_case((ring_dtype_t)dt, (ring_op_t)op, ns, nd, mlengths[li], off, pat == 3, seed++, one,
                                       sizeof one);
                    cases++;
                    if (record(r, msg, len, one, &failures, verbose) < 0) goto out;
                }
out:
    if (ncases) *ncases = cases;
    return failures;
}

void tc_cleanup(void)
{
    arena_free();
    ring__cuda_stream_destroy(arena.stream);
    arena.stream = NULL;
}

int tc_sweep_large(int verbose, char *msg, size_t len, int *ncases)
{
    static const tc_case_t big[] = {
        {RING_FLOAT32, RING_SUM, 0, (1u << 24) + 7, 0, 0, 0, TC_OUT_OF_PLACE, 101},
        {RING_FLOAT32, RING_SUM, 0, (1u << 24) + 7, 1, 1, 1, TC_DST_IS_A, 102},
        {RING_INT8, RING_MAX, 0, (1u << 26) + 5, 3, 3, 3, TC_OUT_OF_PLACE, 103},
        {RING_BFLOAT16, RING_AVG, 4, (1u << 24) + 3, 0, 0, 0, TC_DST_IS_B, 104},
        {RING_FLOAT64, RING_PROD, 0, (1u << 22) + 1, 0, 1, 0, TC_OUT_OF_PLACE, 105},
    };
    int failures = 0, cases = 0;
    char one[1024];
    for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        int r = tc_run_case(&big[i], one, sizeof one);
        cases++;
        if (verbose) fprintf(stderr, "  large %s %s count %zu: %s\n", tc_dtype_name(big[i].dtype), tc_op_name(big[i].op),
                             big[i].count, r == 0 ? "ok" : "FAIL");
        if (record(r, msg, len, one, &failures, verbose) < 0) break;
    }
    if (ncases) *ncases = cases;
    return failures;
}

int tc_check_args(char *msg, size_t len)
{
    void *d = NULL;
    unsigned char host[64];
    if (ring__cuda_dev_alloc(NULL, 4096, &d) != RING_OK || ring__cuda_memset(NULL, d, CANARY, 4096) != RING_OK) {
        snprintf(msg, len, "set-up: %s", ring_comm_last_error(NULL));
        ring__cuda_dev_free(d);
        return 1;
    }
    unsigned char *p = d;
    int bad = 0;
    ring_result_t rc = ring__cuda_reduce(NULL, p + 1, p + 1024, p + 2048, 8, RING_FLOAT32, RING_SUM, NULL);
    if (rc != RING_ERR_INVALID_ARG || !strstr(ring_comm_last_error(NULL), "aligned")) {
        snprintf(msg, len, "misaligned float32 dst: got %s (%s), want RING_ERR_INVALID_ARG about alignment",
                 ring_result_name(rc), ring_comm_last_error(NULL));
        bad = 1;
    }
    rc = ring__cuda_reduce(NULL, p, p + 1024, p + 2050, 8, RING_INT64, RING_MAX, NULL);
    if (!bad && rc != RING_ERR_INVALID_ARG) {
        snprintf(msg, len, "misaligned int64 b: got %s, want RING_ERR_INVALID_ARG", ring_result_name(rc));
        bad = 1;
    }
    rc = ring__cuda_reduce(NULL, NULL, NULL, NULL, 0, RING_FLOAT32, RING_SUM, NULL);
    if (!bad && rc != RING_OK) {
        snprintf(msg, len, "count 0 with NULL pointers: got %s, want RING_OK", ring_result_name(rc));
        bad = 1;
    }
    rc = ring__cuda_reduce(NULL, p, p, p, 4, RING_DTYPE_COUNT, RING_SUM, NULL);
    if (!bad && rc != RING_ERR_INVALID_ARG) {
        snprintf(msg, len, "invalid dtype: got %s, want RING_ERR_INVALID_ARG", ring_result_name(rc));
        bad = 1;
    }
    rc = ring__cuda_reduce_final(NULL, p, p, p, 4, RING_FLOAT32, RING_OP_COUNT, 2, NULL);
    if (!bad && rc != RING_ERR_INVALID_ARG) {
        snprintf(msg, len, "invalid op: got %s, want RING_ERR_INVALID_ARG", ring_result_name(rc));
        bad = 1;
    }
    /* Nothing was launched: the buffer still holds the canary. */
    if (!bad && (ring__cuda_stream_sync(NULL, NULL) != RING_OK || ring__cuda_memcpy(NULL, host, p, sizeof host) != RING_OK)) {
        snprintf(msg, len, "after the refused calls: %s", ring_comm_last_error(NULL));
        bad = 1;
    }
    for (size_t i = 0; !bad && i < sizeof host; i++)
        if (host[i] != CANARY) {
            snprintf(msg, len, "a refused call wrote device memory (byte %zu)", i);
            bad = 1;
        }
    ring__cuda_dev_free(d);
    return bad;
}

/* ---------- the real driver ---------- */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(msg, len, __VA_ARGS__);                                                           \
        bad = 1;                                                                                   \
        goto out;                                                                                  \
    } while (0)

static int expect_kind(const void *p, ring__mem_kind_t want, int want_dev, const char *what, char *msg, size_t len)
{
    ring__mem_kind_t k;
    int dev = -5;
    ring_result_t rc = ring__mem_kind(NULL, p, &k, &dev);
    if (rc != RING_OK) {
        snprintf(msg, len, "%s: ring__mem_kind failed: %s", what, ring_comm_last_error(NULL));
        return 1;
    }
    if (k != want || (want_dev >= -1 && dev != want_dev)) {
        snprintf(msg, len, "%s: classified %s on device %d, want %s on device %d", what, ring__mem_kind_name(k), dev,
                 ring__mem_kind_name(want), want_dev);
        return 1;
    }
    return 0;
}

int tc_check_mem_kinds(char *msg, size_t len)
{
    int bad = 0, cur = 0;
    void *dev = NULL, *pinned = NULL, *managed = NULL, *reg = malloc(1 << 16);
    int registered = 0;
    cudaError_t e;
    if (!reg) FAIL("out of host memory");
    if ((e = cudaGetDevice(&cur)) != cudaSuccess) FAIL("cudaGetDevice: %s", cudaGetErrorString(e));
    if ((e = cudaMalloc(&dev, 1 << 16)) != cudaSuccess) FAIL("cudaMalloc: %s", cudaGetErrorString(e));
    if ((e = cudaMallocHost(&pinned, 1 << 16)) != cudaSuccess) FAIL("cudaMallocHost: %s", cudaGetErrorString(e));
    if ((e = cudaMallocManaged(&managed, 1 << 16, cudaMemAttachGlobal)) != cudaSuccess)
        FAIL("cudaMallocManaged: %s", cudaGetErrorString(e));
    if ((e = cudaHostRegister(reg, 1 << 16, cudaHostRegisterDefault)) != cudaSuccess)
        FAIL("cudaHostRegister: %s", cudaGetErrorString(e));
    registered = 1;
    if (expect_kind(dev, RING__MEM_DEVICE, cur, "cudaMalloc", msg, len) ||
        expect_kind((char *)dev + 4100, RING__MEM_DEVICE, cur, "cudaMalloc + 4100", msg, len) ||
        expect_kind(pinned, RING__MEM_HOST_PINNED, -1, "cudaMallocHost", msg, len) ||
        expect_kind(reg, RING__MEM_HOST_PINNED, -1, "cudaHostRegister", msg, len) ||
        expect_kind(managed, RING__MEM_MANAGED, -2, "cudaMallocManaged", msg, len) ||
        expect_kind(msg, RING__MEM_HOST, -1, "stack", msg, len) ||
        expect_kind(dtype_names, RING__MEM_HOST, -1, "static", msg, len))
        bad = 1;
out:
    if (registered) cudaHostUnregister(reg);
    free(reg);
    cudaFree(dev);
    cudaFreeHost(pinned);
    cudaFree(managed);
    return bad;
}

/* Do the 256 floats at dev read 0, 1, ..., 255? If not, say which element is wrong. */
static int holds_ramp(const float *dev, const char *what, char *msg, size_t len)
{
    float host[256];
    cudaError_t e = cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        snprintf(msg, len, "%s: cudaMemcpy back: %s", what, cudaGetErrorString(e));
        return 0;
    }
    for (int i = 0; i < 256; i++)
        if (host[i] != (float)i) {
            snprintf(msg, len, "%s: element %d is %g, want %d", what, i, host[i], i);
            return 0;
        }
    return 1;
}

int tc_check_dmabuf(char *msg, size_t len)
{
    /* GPUDirect RDMA's first half (src/cuda/gdr.c): a dma-buf of device memory for
     * ibv_reg_dmabuf_mr. Where the GPU, driver or kernel has none the answer must be
     * RING_ERR_UNSUPPORTED with a reason; where it has one, the descriptor must be a dma-buf
     * that covers the range (its size is what lseek to the end reports). */
    const size_t bytes = (size_t)2 << 20;
    int bad = 0, fd = -1;
    void *dev = NULL;
    cudaError_t e;
    if ((e = cudaMalloc(&dev, bytes)) != cudaSuccess) FAIL("cudaMalloc: %s", cudaGetErrorString(e));
    ring_result_t rc = ring__cuda_dmabuf_fd(NULL, dev, bytes, &fd);
    if (rc == RING_ERR_UNSUPPORTED) {
        if (fd != -1) FAIL("dma-buf refused but fd %d", fd);
        if (!ring_comm_last_error(NULL)[0]) FAIL("dma-buf refused without a reason");
        printf("note: no dma-buf export here (GPUDirect RDMA would use ibv_reg_mr): %s\n", ring_comm_last_error(NULL));
        goto out;
    }
    if (rc != RING_OK) FAIL("ring__cuda_dmabuf_fd: %s (%s)", ring_result_name(rc), ring_comm_last_error(NULL));
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < (off_t)bytes) FAIL("dma-buf fd %d: size %lld, want at least %zu", fd, (long long)end, bytes);
    printf("note: dma-buf export works: fd of %lld bytes for %zu bytes of device memory\n", (long long)end, bytes);
out:
    if (fd >= 0) close(fd);
    cudaFree(dev);
    return bad;
}

int tc_check_public_api(char *msg, size_t len)
{
    int bad = 0;
    ring_comm_t *c = NULL;
    float *dev = NULL, host[256];
    cudaError_t e;
    if ((e = cudaMalloc((void **)&dev, 1 << 16)) != cudaSuccess) FAIL("cudaMalloc: %s", cudaGetErrorString(e));
    if (ring_comm_init(&c, 1, 0, NULL) != RING_OK) FAIL("ring_comm_init: %s", ring_comm_last_error(NULL));
    for (int i = 0; i < 256; i++) host[i] = (float)i;
    if ((e = cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice)) != cudaSuccess) FAIL("cudaMemcpy: %s", cudaGetErrorString(e));
    /* One rank: the device path copies device to device. */
    ring_result_t rc = ring_allreduce(c, dev, dev + 256, 256, RING_FLOAT32, RING_SUM);
    if (rc != RING_OK) FAIL("ring_allreduce on device memory: %s (%s)", ring_result_name(rc), ring_comm_last_error(c));
    if (!holds_ramp(dev + 256, "ring_allreduce on device memory, one rank", msg, len)) {
        bad = 1; /* holds_ramp wrote msg */
        goto out;
    }
    /* The other collectives on one rank: broadcast leaves the buffer, all-gather copies it. */
    rc = ring_broadcast(c, dev, 256, RING_FLOAT32, 0);
    if (rc != RING_OK) FAIL("ring_broadcast on device memory: %s (%s)", ring_result_name(rc), ring_comm_last_error(c));
    if ((e = cudaMemset(dev + 512, 0, 256 * sizeof(float))) != cudaSuccess) FAIL("cudaMemset: %s", cudaGetErrorString(e));
    rc = ring_allgather(c, dev, dev + 512, 256, RING_FLOAT32);
    if (rc != RING_OK) FAIL("ring_allgather on device memory: %s (%s)", ring_result_name(rc), ring_comm_last_error(c));
    if (!holds_ramp(dev + 512, "ring_allgather on device memory, one rank", msg, len)) {
        bad = 1; /* holds_ramp wrote msg */
        goto out;
    }
    rc = ring_allreduce(c, (char *)dev + 2, (char *)dev + 2, 16, RING_FLOAT32, RING_SUM);
    if (rc != RING_ERR_INVALID_ARG)
        FAIL("misaligned device buffer: %s (%s), want RING_ERR_INVALID_ARG", ring_result_name(rc), ring_comm_last_error(c));
    rc = ring_allreduce(c, host, dev, 16, RING_FLOAT32, RING_SUM);
    if (rc != RING_ERR_UNSUPPORTED)
        FAIL("host sendbuf, device recvbuf: %s (%s), want RING_ERR_UNSUPPORTED", ring_result_name(rc), ring_comm_last_error(c));
    if ((rc = ring_allreduce(c, host, host, 16, RING_FLOAT32, RING_SUM)) != RING_OK)
        FAIL("host allreduce after the refusals: %s", ring_comm_last_error(c));
out:
    ring_comm_destroy(c);
    cudaFree(dev);
    return bad;
}
