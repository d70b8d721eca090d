/*
 * xcore_pair: how fast this machine moves data between two cores right now, with no ringcomm
 * in it. Two threads, pinned to CPUs A and B, do the memory work of a 2-rank all-reduce of
 * S bytes through buffers they share, in the order the ring does it:
 *   1. each copies the half its peer reduces into its outgoing buffer;     barrier
 *   2. each sums the peer's outgoing buffer into its own half of the result; barrier
 *   3. each copies its result half into its outgoing buffer;               barrier
 *   4. each copies the peer's outgoing buffer into the other result half;  barrier
 * Steps 2 and 4 read what the other core just wrote, so the time follows the cost of moving
 * cache lines between the two cores, which a one-core copy loop does not see.
 *
 * Why it exists: on a VM the two vCPUs may sit on cores that share a cache at one moment and
 * not at the next, and a 2-rank all-reduce's time then moves in steps (docs/performance.md,
 * 2026-11-27 (2)). Run it just before and after a benchmark to know which step the machine was
 * on; the ratio of two libraries is only meaningful between runs on the same step.
 *
 * Not built by meson:  gcc -O2 -pthread -o xcore_pair perf/micro/xcore_pair.c
 * Usage:               xcore_pair [S bytes (1048576)] [blocks (3)] [iterations per block (25)] [A (0)] [B (1)]
 * Prints one line: the fastest iteration of each block, in us.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t half;          /* floats in half the vector */
static float *out[2];        /* what each thread hands to the other */
static float *src[2], *dst[2];
static int blocks = 3, per_block = 25, cpu[2] = {0, 1};
static double best[64];
static _Alignas(64) atomic_long arrived[2];

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Both threads spin: the ranks of a benchmark spin too, and a sleep would measure the wake-up. */
static void barrier(int me, long *gen)
{
    ++*gen;
    atomic_store_explicit(&arrived[me], *gen, memory_order_release);
    while (atomic_load_explicit(&arrived[!me], memory_order_acquire) < *gen) __builtin_ia32_pause();
}

static void *run(void *arg)
{
    const int me = (int)(long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu[me], &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "xcore_pair: cannot pin a thread to CPU %d\n", cpu[me]);
        exit(2);
    }
    /* Thread 0 owns the first half of the result, thread 1 the second. */
    const size_t mine = me ? half : 0, theirs = me ? 0 : half;
    long gen = 0;
    for (int b = 0; b < blocks; b++) {
        double fastest = 1e18;
        for (int i = 0; i < per_block; i++) {
            barrier(me, &gen);
            double t = now_us();
            memcpy(out[me], src[me] + theirs, half * sizeof(float));
            barrier(me, &gen);
            for (size_t j = 0; j < half; j++) dst[me][mine + j] = src[me][mine + j] + out[!me][j];
            barrier(me, &gen);
            memcpy(out[me], dst[me] + mine, half * sizeof(float));
            barrier(me, &gen);
            memcpy(dst[me] + theirs, out[!me], half * sizeof(float));
            t = now_us() - t;
            if (t < fastest) fastest = t;
        }
        if (me == 0) best[b] = fastest;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
    if (argc > 2) blocks = atoi(argv[2]);
    if (argc > 3) per_block = atoi(argv[3]);
    if (argc > 4) cpu[0] = atoi(argv[4]);
    if (argc > 5) cpu[1] = atoi(argv[5]);
    if (bytes < 2 * sizeof(float) || blocks < 1 || blocks > 64 || per_block < 1) {
        fprintf(stderr, "usage: xcore_pair [S bytes >= 8] [blocks 1..64] [iterations] [cpu A] [cpu B]\n");
        return 2;
    }
    half = bytes / sizeof(float) / 2;
    for (int i = 0; i < 2; i++) {
        out[i] = aligned_alloc(4096, (half * sizeof(float) + 4095) / 4096 * 4096);
        src[i] = aligned_alloc(4096, (2 * half * sizeof(float) + 4095) / 4096 * 4096);
        dst[i] = aligned_alloc(4096, (2 * half * sizeof(float) + 4095) / 4096 * 4096);
        if (!out[i] || !src[i] || !dst[i]) {
            fprintf(stderr, "xcore_pair: out of memory\n");
            return 2;
        }
        memset(out[i], 0, half * sizeof(float));
        for (size_t j = 0; j < 2 * half; j++) src[i][j] = (float)(j % 7), dst[i][j] = 0;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, run, (void *)1L) != 0) {
        fprintf(stderr, "xcore_pair: pthread_create failed\n");
        return 2;
    }
    run((void *)0L);
    pthread_join(t, NULL);
    printf("xcore_pair S=%zu cpus %d,%d: fastest per block (us):", 2 * half * sizeof(float), cpu[0], cpu[1]);
    for (int b = 0; b < blocks; b++) printf(" %.1f", best[b]);
    printf("\n");
    return 0;
}
