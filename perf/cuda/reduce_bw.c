/*
 * reduce_bw: bandwidth of the library's CUDA reduction kernels (ring__cuda_reduce, the ones
 * the device-buffer path runs) against a device-to-device cudaMemcpy of the same size, on
 * one GPU (docs/cuda.md). Both count bytes read plus bytes written: a reduction of S-byte
 * buffers moves 3S (a and b read, dst written), a copy 2S. The target is a ratio of at least
 * 0.9 at large sizes: the kernels should run at memory speed, like a copy.
 *
 *   reduce_bw [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPES] [-o OPS] [-n ITERS] [-w WARMUP]
 *             [--inplace] [--final NRANKS] [--inputs K [--outputs M]] [--csv] [--min-ratio R]
 *
 * Sizes are bytes per buffer (K/M/G suffixes; default 1M .. 1G, x4). DTYPES and OPS are
 * comma lists or "all" (default: all dtypes, sum). --inplace: dst == a. --final: run
 * ring__cuda_reduce_final with that nranks (AVG divides). --inputs K (2..16): the many-input
 * kernel of the direct collectives (ring__cuda_reduce_multi, final step over K), with
 * --outputs M (1..16, default 1) copies of the result written, which moves (K + M) x bytes.
 * --min-ratio: exit 1 if a size of
 * at least 256 MiB falls below it. Times are CUDA events around ITERS back-to-back launches
 * on one stream, after WARMUP untimed ones.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/ring_cuda.h"

static const char *const dtype_names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",
                                          "uint64",  "float16", "bfloat16", "float32", "float64"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};

static void die(const char *what, cudaError_t e)
{
    fprintf(stderr, "reduce_bw: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    exit(1);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) die(#call, e_);                                                     \
    } while (0)

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: fprintf(stderr, "reduce_bw: bad size %s\n", s); exit(2);
    }
    if (v < 1) {
        fprintf(stderr, "reduce_bw: bad size %s\n", s);
        exit(2);
    }
    return (size_t)v;
}

/* "all", or a comma list of names from table[0..n). */
static void parse_list(const char *arg, const char *const *table, int n, int *on, const char *what)
{
    memset(on, 0, sizeof(int) * (size_t)n);
    if (!strcmp(arg, "all")) {
        for (int i = 0; i < n; i++) on[i] = 1;
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(t, table[i])) on[i] = found = 1;
        if (!found) {
            fprintf(stderr, "reduce_bw: unknown %s %s\n", what, t);
            exit(2);
        }
    }
}

static void human(char *out, size_t len, size_t b)
{
    if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(out, len, "%zuG", b >> 30);
    else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(out, len, "%zuM", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(out, len, "%zuK", b >> 10);
    else snprintf(out, len, "%zu", b);
}

/* Seconds per operation: events around iters launches of fn after warmup ones. */
typedef struct job {
    int is_copy, ninputs, noutputs; /* ninputs: ring__cuda_reduce_multi, srcs[0..ninputs) into dsts[0..noutputs) */
    void *dst, *a, *b;
    const void *srcs[RING__CUDA_MULTI_MAX];
    void *dsts[RING__CUDA_MULTI_MAX];
    size_t bytes, count;
    ring_dtype_t dtype;
    ring_op_t op;
    int nranks;
    cudaStream_t s;
} job_t;

static void launch(const job_t *j)
{
    if (j->is_copy) {
        CK(cudaMemcpyAsync(j->dst, j->a, j->bytes, cudaMemcpyDeviceToDevice, j->s));
        return;
    }
    ring_result_t rc = j->ninputs ? ring__cuda_reduce_multi(NULL, (void *const *)j->dsts, j->noutputs, j->srcs, j->ninputs,
                                                            j->count, j->dtype, j->op, j->ninputs, j->s)
                       : j->nranks ? ring__cuda_reduce_final(NULL, j->dst, j->a, j->b, j->count, j->dtype, j->op, j->nranks, j->s)
                                 : ring__cuda_reduce(NULL, j->dst, j->a, j->b, j->count, j->dtype, j->op, j->s);
    if (rc != RING_OK) {
        fprintf(stderr, "reduce_bw: %s\n", ring_comm_last_error(NULL));
        exit(1);
    }
}

static double time_job(const job_t *j, int warmup, int iters)
{
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    for (int i = 0; i < warmup; i++) launch(j);
    CK(cudaEventRecord(t0, j->s));
    for (int i = 0; i < iters; i++) launch(j);
    CK(cudaEventRecord(t1, j->s));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    return ms / 1e3 / iters;
}

static void driver_string(char *out, size_t len)
{
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." */
    out[0] = 0;
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return;
    char line[256];
    if (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "Module");
        if (p) {
            p += 6;
            while (*p == ' ') p++;
            size_t n = strcspn(p, " \n");
            snprintf(out, len, "%.*s", (int)n, p);
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    size_t lo = 1u << 20, hi = (size_t)1 << 30;
    double factor = 4, min_ratio = 0;
    int dt_on[RING_DTYPE_COUNT], op_on[RING_OP_COUNT], iters = 20, warmup = 5, inplace = 0, csv = 0, nranks = 0, ninputs = 0,
        noutputs = 1;
    parse_list("all", dtype_names, RING_DTYPE_COUNT, dt_on, "dtype");
    parse_list("sum", op_names, RING_OP_COUNT, op_on, "op");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--inplace")) inplace = 1;
        else if (!strcmp(a, "--csv")) csv = 1;
        else if (!v) goto usage;
        else if (!strcmp(a, "-b")) lo = parse_size(v), i++;
        else if (!strcmp(a, "-e")) hi = parse_size(v), i++;
        else if (!strcmp(a, "-f")) factor = atof(v), i++;
        else if (!strcmp(a, "-d")) parse_list(v, dtype_names, RING_DTYPE_COUNT, dt_on, "dtype"), i++;
        else if (!strcmp(a, "-o")) parse_list(v, op_names, RING_OP_COUNT, op_on, "op"), i++;
        else if (!strcmp(a, "-n")) iters = atoi(v), i++;
        else if (!strcmp(a, "-w")) warmup = atoi(v), i++;
        else if (!strcmp(a, "--final")) nranks = atoi(v), i++;
        else if (!strcmp(a, "--inputs")) ninputs = atoi(v), i++;
        else if (!strcmp(a, "--outputs")) noutputs = atoi(v), i++;
        else if (!strcmp(a, "--min-ratio")) min_ratio = atof(v), i++;
        else goto usage;
    }
    if (factor <= 1 || iters < 1 || warmup < 0 || lo > hi || (ninputs && (ninputs < 2 || ninputs > RING__CUDA_MULTI_MAX)) ||
        noutputs < 1 || noutputs > RING__CUDA_MULTI_MAX)
        goto usage;

    char why[256];
    if (!ring__cuda_usable(why, sizeof why)) {
        fprintf(stderr, "reduce_bw: no usable GPU: %s\n", why);
        return 77;
    }
    int dev = 0, drv = 0, rt = 0;
    struct cudaDeviceProp p;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&p, dev));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    char kmod[64], date[64];
    driver_string(kmod, sizeof kmod);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    printf("# reduce_bw %s\n# GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB; driver %s (CUDA %d.%d), runtime %d.%d\n", date, dev,
           p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30), kmod[0] ? kmod : "?",
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    if (ninputs)
        printf("# bytes: per buffer; GB/s = (bytes read + written) / time, 1 GB = 1e9 B; %d inputs, %d outputs: reduce "
               "moves %dx, copy 2x; %s\n",
               ninputs, noutputs, ninputs + noutputs, inplace ? "in place (output k == input k)" : "out of place");
    else
        printf("# bytes: per buffer; GB/s = (bytes read + written) / time, 1 GB = 1e9 B; reduce moves 3x, copy 2x; %s%s\n",
               inplace ? "in place (dst == a)" : "out of place", nranks ? ", final step" : "");
    printf("# command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");

    void *a = NULL, *b = NULL, *d = NULL;
    CK(cudaMalloc(&a, hi));
    CK(cudaMalloc(&b, hi));
    if (!inplace) CK(cudaMalloc(&d, hi));
    /* 0x3c bytes: moderate values in every float type (fp16 1.06, fp32 0.0115), no NaN. */
    CK(cudaMemset(a, 0x3c, hi));
    CK(cudaMemset(b, 0x3c, hi));
    if (d) CK(cudaMemset(d, 0, hi));
    void *more[RING__CUDA_MULTI_MAX] = {NULL}, *outs[RING__CUDA_MULTI_MAX] = {NULL}; /* inputs 3.., outputs 2.. */
    for (int k = 2; k < ninputs; k++) {
        CK(cudaMalloc(&more[k], hi));
        CK(cudaMemset(more[k], 0x3c, hi));
    }
    for (int k = 1; k < noutputs && !inplace; k++) CK(cudaMalloc(&outs[k], hi));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    if (csv) printf("dtype,op,bytes,reduce_us,reduce_GBps,copy_us,copy_GBps,ratio\n");
    else printf("%-9s %-5s %8s %11s %11s %11s %11s %7s\n", "dtype", "op", "bytes", "reduce_us", "reduce_GB/s", "copy_us",
                "copy_GB/s", "ratio");
    double worst = 1e9;
    char worst_what[96] = "";
    for (double sz = (double)lo; sz <= (double)hi * 1.0000001; sz *= factor) {
        size_t bytes = (size_t)sz & ~(size_t)15;
        if (!bytes) continue;
        job_t cj = {.is_copy = 1, .dst = d ? d : b, .a = a, .bytes = bytes, .s = s};
        double tc = time_job(&cj, warmup, iters), copy_gbps = 2.0 * bytes / tc / 1e9;
        char hb[32];
        human(hb, sizeof hb, bytes);
        for (int dt = 0; dt < RING_DTYPE_COUNT; dt++) {
            if (!dt_on[dt]) continue;
            for (int op = 0; op < RING_OP_COUNT; op++) {
                if (!op_on[op]) continue;
                size_t es = ring_dtype_size((ring_dtype_t)dt);
                job_t rj = {.dst = inplace ? a : d, .a = a, .b = b, .bytes = bytes, .count = bytes / es,
                            .dtype = (ring_dtype_t)dt, .op = (ring_op_t)op, .nranks = nranks, .s = s,
                            .ninputs = ninputs, .noutputs = noutputs, .srcs = {a, b}, .dsts = {inplace ? a : d}};
                for (int k = 2; k < ninputs; k++) rj.srcs[k] = more[k];
                for (int k = 1; k < noutputs; k++) rj.dsts[k] = inplace ? (void *)rj.srcs[k] : outs[k];
                const double moved = ninputs ? ninputs + (double)noutputs : 3.0;
                double tr = time_job(&rj, warmup, iters), red_gbps = moved * (double)(rj.count * es) / tr / 1e9;
                double ratio = red_gbps / copy_gbps;
                if (csv)
                    printf("%s,%s,%zu,%.2f,%.1f,%.2f,%.1f,%.3f\n", dtype_names[dt], op_names[op], bytes, tr * 1e6, red_gbps,
                           tc * 1e6, copy_gbps, ratio);
                else
                    printf("%-9s %-5s %8s %11.2f %11.1f %11.2f %11.1f %7.3f\n", dtype_names[dt], op_names[op], hb, tr * 1e6,
                           red_gbps, tc * 1e6, copy_gbps, ratio);
                if (bytes >= (256u << 20) && ratio < worst) {
                    worst = ratio;
                    snprintf(worst_what, sizeof worst_what, "%s %s %s", dtype_names[dt], op_names[op], hb);
                }
            }
        }
        fflush(stdout);
    }
    if (worst < 1e9) {
        printf("# lowest ratio at >= 256M: %.3f (%s); target %.2f: %s\n", worst, worst_what, min_ratio > 0 ? min_ratio : 0.9,
               worst >= (min_ratio > 0 ? min_ratio : 0.9) ? "met" : "NOT MET");
    }
    CK(cudaStreamDestroy(s));
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    for (int k = 2; k < ninputs; k++) cudaFree(more[k]);
    for (int k = 1; k < noutputs; k++) cudaFree(outs[k]);
    return min_ratio > 0 && worst < min_ratio ? 1 : 0;

usage:
    fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPES|all] [-o OPS|all] [-n ITERS] [-w WARMUP]\n"
                    "          [--inplace] [--final NRANKS] [--inputs K [--outputs M]] [--csv] [--min-ratio R]\n", argv[0]);
    return 2;
}
