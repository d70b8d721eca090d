/*
 * The CUDA kernel checks as a plain program (docs/cuda.md), for GPU machines without
 * Criterion and for compute-sanitizer: the same checks as test_cuda.c's cuda_gpu suite.
 *
 *   cuda_kernel_check [--quick] [--verbose] [--dtype NAME]...
 *
 * --quick: short lengths only (memcheck/racecheck run it). Exit status: 0 all passed, 1 a
 * check failed, 77 skipped (no usable GPU; meson counts 77 as a skip), 2 bad usage.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "test_cuda_check.h"

int main(int argc, char **argv)
{
    int quick = 0, verbose = 0, only[RING_DTYPE_COUNT] = {0}, nonly = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *name = argv[++i];
            int found = 0;
            for (int d = 0; d < RING_DTYPE_COUNT; d++)
                if (!strcmp(name, tc_dtype_name((ring_dtype_t)d))) only[d] = found = 1;
            if (!found) {
                fprintf(stderr, "unknown dtype %s\n", name);
                return 2;
            }
            nonly++;
        } else {
            fprintf(stderr, "usage: %s [--quick] [--verbose] [--dtype NAME]...\n", argv[0]);
            return 2;
        }
    }
    char why[256] = "", gpu[256] = "", msg[1024] = "";
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    printf("cuda_kernel_check: %s%s\n", date, quick ? " (quick)" : "");
    if (!tc_gpu_available(why, sizeof why)) {
        printf("SKIP: no usable GPU: %s\n", why);
        return 77;
    }
    tc_describe_gpu(gpu, sizeof gpu);
    printf("%s\n", gpu);

    int total = 0, failed = 0;
    struct {
        const char *name;
        int (*fn)(char *, size_t);
    } singles[] = {{"arguments", tc_check_args}, {"memory kinds", tc_check_mem_kinds}, {"public API", tc_check_public_api},
                 {"dma-buf export", tc_check_dmabuf}};
    for (size_t i = 0; i < sizeof singles / sizeof *singles; i++) {
        int r = singles[i].fn(msg, sizeof msg);
        total++;
        failed += r != 0;
        printf("%-10s %-14s %s%s\n", "check", singles[i].name, r ? "FAIL: " : "ok", r ? msg : "");
    }
    for (int d = 0; d < RING_DTYPE_COUNT; d++) {
        if (nonly && !only[d]) continue;
        int cases = 0;
        int f = tc_sweep_dtype((ring_dtype_t)d, quick, verbose, msg, sizeof msg, &cases);
        total += cases;
        failed += f;
        printf("%-10s %-14s %d cases, %s%s\n", "sweep", tc_dtype_name((ring_dtype_t)d), cases, f ? "FAILED: " : "ok",
               f ? msg : "");
        f = tc_sweep_multi((ring_dtype_t)d, quick, verbose, msg, sizeof msg, &cases);
        total += cases;
        failed += f;
        printf("%-10s %-14s %d cases, %s%s\n", "multi", tc_dtype_name((ring_dtype_t)d), cases, f ? "FAILED: " : "ok",
               f ? msg : "");
        fflush(stdout);
    }
    if (!quick && !nonly) {
        int cases = 0;
        int f = tc_sweep_large(verbose, msg, sizeof msg, &cases);
        total += cases;
        failed += f;
        printf("%-10s %-14s %d cases, %s%s\n", "sweep", "large", cases, f ? "FAILED: " : "ok", f ? msg : "");
    }
    tc_cleanup(); /* compute-sanitizer's leak check counts what is still allocated at exit */
    printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "PASS", total, failed);
    return failed ? 1 : 0;
}
