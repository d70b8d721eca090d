/*
 * reduce_bench: bandwidth of the host reduction loops against memcpy.
 *
 *   reduce_bench [-s SIZE[K|M|G]] [-n ITERS]
 *
 * For each dtype (SUM, plus MIN for float32) it times ring__reduce(dst, a, b) on SIZE-byte
 * buffers and reports the median of ITERS runs. A reduction reads two buffers and writes one,
 * so its rate is 3*SIZE/time; memcpy of the same size, timed alongside, moves 2*SIZE, and
 * "ratio" compares the two rates: near 1 means the loop runs as fast as the memory system
 * lets a copy run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reduce.h"
#include "ringcomm.h"

static const char *const dtype_names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                          "uint64",  "float16", "bfloat16", "float32", "float64"};
static const size_t dtype_sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    int sh = 0;
    switch (*end) {
    case 'k': case 'K': sh = 10; end++; break;
    case 'm': case 'M': sh = 20; end++; break;
    case 'g': case 'G': sh = 30; end++; break;
    default: break;
    }
    /* Shifted past 64 bits, 17179869185G would read as 1 GiB. */
    if (v > (SIZE_MAX >> sh)) return -1;
    v <<= sh;
    if (*end == 'i' || *end == 'I') end++; /* accept KiB/MiB spellings too */
    if (*end == 'b' || *end == 'B') end++;
    /* At least one element of the widest type (8 bytes): below, some rows would divide by 0. */
    if (*end || v < 8) return -1;
    *out = (size_t)v;
    return 0;
}

/* Ordinary values (no NaN, Inf or subnormals, which some CPUs handle in microcode). */
static void fill(void *buf, size_t count, ring_dtype_t t, int salt)
{
    for (size_t i = 0; i < count; i++) {
        int v = (int)((i * 7 + (size_t)salt) % 97) + 1;
        float f = 1.0f + (float)v / 128.0f;
        unsigned char *p = (unsigned char *)buf + i * dtype_sizes[t];
        switch (t) {
        case RING_INT8: case RING_UINT8: *p = (unsigned char)v; break;
        case RING_INT32: case RING_UINT32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
        case RING_INT64: case RING_UINT64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
        case RING_FLOAT16: { uint16_t x = ring__float_to_half(f); memcpy(p, &x, 2); break; }
        case RING_BFLOAT16: { uint16_t x = ring__float_to_bf16(f); memcpy(p, &x, 2); break; }
        case RING_FLOAT32: memcpy(p, &f, 4); break;
        default: { double x = f; memcpy(p, &x, 8); break; }
        }
    }
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-s SIZE[K|M|G], at least 8] [-n ITERS]\n", argv0);
    exit(2);
}

int main(int argc, char **argv)
{
    size_t bytes = 64u << 20;
    int iters = 10, c;
    while ((c = getopt(argc, argv, "s:n:h")) != -1) {
        switch (c) {
        case 's':
            if (parse_size(optarg, &bytes)) usage(argv[0]);
            break;
        case 'n':
            iters = atoi(optarg);
            if (iters < 1) usage(argv[0]);
            break;
        default: usage(argv[0]);
        }
    }
    size_t alloc = (bytes + 63) / 64 * 64;
    unsigned char *a = aligned_alloc(64, alloc), *b = aligned_alloc(64, alloc);
    unsigned char *d = aligned_alloc(64, alloc);
    double *t = malloc((size_t)iters * sizeof *t), *tc = malloc((size_t)iters * sizeof *tc);
    if (!a || !b || !d || !t || !tc) {
        fprintf(stderr, "out of memory for 3 x %zu bytes\n", bytes);
        return 1;
    }
    memset(a, 1, alloc); /* fault the pages in before timing */
    memset(b, 2, alloc);
    memset(d, 0, alloc);

    printf("reduce implementation: %s\n", ring__reduce_impl_name());
    printf("%-9s %-4s %12s %10s %8s %12s %6s\n", "dtype", "op", "bytes", "time_us", "GB/s",
           "memcpy GB/s", "ratio");
    for (int k = 0; k <= RING_DTYPE_COUNT; k++) {
        ring_dtype_t dt = k < RING_DTYPE_COUNT ? (ring_dtype_t)k : RING_FLOAT32;
        ring_op_t op = k < RING_DTYPE_COUNT ? RING_SUM : RING_MIN;
        size_t count = bytes / dtype_sizes[dt];
        size_t used = count * dtype_sizes[dt];
        fill(a, count, dt, 1);
        fill(b, count, dt, 2);
        /*
         * memcpy runs alternately with the reduction, so that both see the same machine (other
         * load, frequency); the first round warms up and is dropped.
         */
        for (int i = 0; i < iters + 1; i++) {
            double t0 = now_us();
            ring__reduce(d, a, b, count, dt, op);
            double t1 = now_us();
            memcpy(d, a, used);
            __asm__ volatile("" : : "r"(d) : "memory"); /* keep the copy */
            double t2 = now_us();
            if (i > 0) {
                t[i - 1] = t1 - t0;
                tc[i - 1] = t2 - t1;
            }
        }
        double us = median(t, iters), gbs = 3.0 * (double)used / us / 1e3;
        double memcpy_gbs = 2.0 * (double)used / median(tc, iters) / 1e3;
        printf("%-9s %-4s %12zu %10.1f %8.2f %12.2f %6.2f\n", dtype_names[dt],
               op == RING_SUM ? "sum" : "min", used, us, gbs, memcpy_gbs, gbs / memcpy_gbs);
    }
    free(a);
    free(b);
    free(d);
    free(t);
    free(tc);
    return 0;
}
