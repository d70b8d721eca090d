/*
 * CUDA kernel checks (docs/cuda.md), shared by the Criterion suite (test_cuda.c) and the
 * standalone program (test_cuda_main.c) that GPU machines without Criterion run.
 *
 * Every check runs ring__cuda_reduce / ring__cuda_reduce_final on device buffers and
 * compares the result with the host reduction (ring__reduce / ring__reduce_final) on the same
 * inputs: bit for bit, except that where the host's SUM/PROD/AVG result is a NaN the GPU's may
 * be any NaN (ring_cuda.h). Bytes around the destination are checked untouched.
 */
#ifndef RING_TEST_CUDA_CHECK_H
#define RING_TEST_CUDA_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "ringcomm.h"

/*
 * Emulation (no GPU needed): with nthreads > 0 the checks below run the kernel's per-thread
 * code on the CPU over host memory (ring__cuda_reduce_emulated) as a grid of nthreads
 * threads; 0 (the default) runs the real kernels on the GPU. Per thread of the caller.
 */
void tc_set_emulation(size_t nthreads);

/* 1 if kernels can run here; else 0 and the reason in why. */
int tc_gpu_available(char *why, size_t len);
/* "device 0: NVIDIA H100 ..., driver ..." or the error. */
void tc_describe_gpu(char *out, size_t len);

/* Where the destination is, relative to the inputs. */
typedef enum { TC_OUT_OF_PLACE, TC_DST_IS_A, TC_DST_IS_B } tc_alias_t;

typedef struct tc_case {
    ring_dtype_t dtype;
    ring_op_t op;
    int nranks;       /* 0: ring__cuda_reduce (not the final step); >= 1: ring__cuda_reduce_final */
    size_t count;     /* elements */
    size_t off_dst, off_a, off_b; /* element offsets from 256-byte aligned device allocations */
    tc_alias_t alias; /* TC_DST_IS_A: dst = a (off_dst ignored) */
    uint64_t seed;
} tc_case_t;

/*
 * Run one case. Returns 0 on success, 1 when the results differ (msg says where and how),
 * -1 on a CUDA or library error (msg says which).
 */
int tc_run_case(const tc_case_t *c, char *msg, size_t len);

/*
 * The sweep for one dtype: every op, final and not, lengths 0 .. 2^20+, aligned and misaligned
 * offsets, in-place both ways; `quick` uses short lengths only (for compute-sanitizer).
 * Returns the number of failed cases; the first failure's message goes to msg; progress lines
 * go to stderr when verbose.
 */
int tc_sweep_dtype(ring_dtype_t dt, int quick, int verbose, char *msg, size_t len, int *ncases);

/* Large buffers: several grid-stride iterations of the unrolled loop (float32 SUM, int8 MAX,
 * bf16 AVG). Same return convention as tc_sweep_dtype. */
int tc_sweep_large(int verbose, char *msg, size_t len, int *ncases);

/* The many-input kernel of the direct collectives (ring__cuda_reduce_multi) against a chain of
 * host reductions, for every op, 2 to RING__CUDA_MULTI_MAX inputs, one output or one per
 * input (separate, or the inputs themselves), odd lengths and offsets. Same return convention. */
int tc_sweep_multi(ring_dtype_t dt, int quick, int verbose, char *msg, size_t len, int *ncases);

/* Free what the checks keep between cases (the device arena and its stream). */
void tc_cleanup(void);

/* Argument checks: misaligned pointers refused without a launch, count 0, bad dtype/op.
 * Returns 0 or 1 (msg). */
int tc_check_args(char *msg, size_t len);

/* The real driver's answers (src/cuda/mem.h) for cudaMalloc (and an interior pointer),
 * cudaMallocHost, cudaHostRegister, cudaMallocManaged and malloc memory. Returns 0 or 1 (msg). */
int tc_check_mem_kinds(char *msg, size_t len);

/* The public collectives on a one-rank communicator with cudaMalloc buffers: what this build
 * promises for device memory (docs/cuda.md). Returns 0 or 1 (msg). */
int tc_check_public_api(char *msg, size_t len);
/* The dma-buf export GPUDirect RDMA registers (ring__cuda_dmabuf_fd): a dma-buf covering the
 * range, or RING_ERR_UNSUPPORTED with a reason. Needs a GPU. */
int tc_check_dmabuf(char *msg, size_t len);

const char *tc_dtype_name(ring_dtype_t dt);
const char *tc_op_name(ring_op_t op);

#endif
