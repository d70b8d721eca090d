/*
 * CUDA (docs/cuda.md), suites 'unit' and 'cuda'.
 *
 * cuda_mem (every build, every machine): where buffers live. Host memory is host without a
 * driver; with a stand-in for the driver's cuPointerGetAttributes (ring__mem_set_driver_for_tests)
 * the device, pinned, managed, not-initialised and error answers go through the public
 * collectives on a one-rank communicator: device buffers are refused with
 * RING_ERR_UNSUPPORTED and a message, untouched, and the communicator stays usable;
 * host-accessible kinds take the host path unchanged.
 *
 * cuda_emulated (CUDA builds, every machine): the kernels' per-thread code run on the CPU
 * through the same dispatch, against the host reduction.
 *
 * cuda_gpu (CUDA builds on a machine with a GPU; skipped with the reason elsewhere): the
 * kernels against the host reduction for every dtype x op (test_cuda_check.c), and the real
 * driver's answers for cudaMalloc, cudaMallocHost, cudaHostRegister and cudaMallocManaged
 * memory.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/mem.h"
#include "cuda/mem_abi.h"
#include "ring_config.h"
#include "ringcomm.h"
#if RING_HAVE_CUDA
#include "test_cuda_check.h"
#endif

/* ---------- a stand-in for the driver ---------- */

static unsigned char fake_dev[4096] __attribute__((aligned(64)));     /* "device 1" */
static unsigned char fake_pinned[4096] __attribute__((aligned(64)));  /* page-locked host */
static unsigned char fake_managed[4096] __attribute__((aligned(64))); /* managed, device 0 */
static atomic_int fake_calls;
static int fake_rc; /* non-zero: every query fails with this CUresult */

static int within(unsigned long long p, const unsigned char *base) { return p >= (uintptr_t)base && p < (uintptr_t)base + 4096; }

static int fake_get_attrs(unsigned n, int *attrs, void **data, unsigned long long ptr)
{
    atomic_fetch_add(&fake_calls, 1);
    if (fake_rc) return fake_rc;
    unsigned memtype = 0, managed = 0;
    int ordinal = -2; /* what a driver may leave for unknown memory; must not leak out */
    if (within(ptr, fake_dev)) memtype = RING__CU_MEMORYTYPE_DEVICE, ordinal = 1;
    if (within(ptr, fake_pinned)) memtype = RING__CU_MEMORYTYPE_HOST, ordinal = 0;
    if (within(ptr, fake_managed)) memtype = RING__CU_MEMORYTYPE_DEVICE, managed = 1, ordinal = 0;
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data[i] = memtype;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_IS_MANAGED) *(unsigned *)data[i] = managed;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int *)data[i] = ordinal;
        else return 1; /* CUDA_ERROR_INVALID_VALUE: an attribute mem.c should not ask for */
    }
    return 0;
}

static ring_comm_t *one_rank(void)
{
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    return c;
}

static ring__mem_kind_t kind_of(const void *p, int *dev)
{
    ring__mem_kind_t k;
    ring_result_t rc = ring__mem_kind(NULL, p, &k, dev);
    cr_assert_eq(rc, RING_OK, "ring__mem_kind(%p): %s", p, ring_comm_last_error(NULL));
    return k;
}

/* ---------- host side: every machine ---------- */

static int static_buf[16];

Test(cuda_mem, host_memory_is_host)
{
    int stack_buf[16];
    void *heap = malloc(1 << 20);
    cr_assert(heap);
    int dev = 7;
    cr_expect_eq(kind_of(heap, &dev), RING__MEM_HOST, "malloc");
    cr_expect_eq(dev, -1);
    cr_expect_eq(kind_of(stack_buf, NULL), RING__MEM_HOST, "stack");
    cr_expect_eq(kind_of(static_buf, NULL), RING__MEM_HOST, "static");
    cr_expect_eq(kind_of(NULL, &dev), RING__MEM_HOST, "NULL");
    cr_expect_eq(kind_of((char *)heap + 12345, NULL), RING__MEM_HOST, "interior pointer");
    free(heap);
    fprintf(stderr, "[cuda_mem] driver probe: %s\n", ring__mem_driver_state());
}

/* Without a driver the probe fails once and nothing else is asked: any address is host. */
Test(cuda_mem, no_driver_means_host)
{
    ring__mem_kind_t k;
    cr_assert_eq(ring__mem_kind(NULL, static_buf, &k, NULL), RING_OK);
    if (strncmp(ring__mem_driver_state(), "no NVIDIA driver", 16) != 0) {
        fprintf(stderr, "[cuda_mem no_driver_means_host] skipped: this machine has a driver (%s)\n",
                ring__mem_driver_state());
        cr_skip_test("this machine has an NVIDIA driver");
    }
    cr_expect_eq(kind_of((void *)(uintptr_t)0x7f0000001000ull, NULL), RING__MEM_HOST);
    cr_expect(strstr(ring__mem_driver_state(), "libcuda.so.1"), "%s", ring__mem_driver_state());
}

Test(cuda_mem, driver_answers_map_to_kinds)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    int dev = 9;
    cr_expect_eq(kind_of(fake_dev + 100, &dev), RING__MEM_DEVICE);
    cr_expect_eq(dev, 1);
    cr_expect_eq(kind_of(fake_pinned, &dev), RING__MEM_HOST_PINNED);
    cr_expect_eq(dev, -1);
    cr_expect_eq(kind_of(fake_managed, &dev), RING__MEM_MANAGED);
    cr_expect_eq(dev, 0);
    cr_expect_eq(kind_of(static_buf, &dev), RING__MEM_HOST);
    cr_expect_eq(dev, -1, "an unknown pointer's ordinal is -1 whatever the driver left");
    cr_expect_str_eq(ring__mem_kind_name(RING__MEM_DEVICE), "device");
    cr_expect_str_eq(ring__mem_kind_name(RING__MEM_HOST_PINNED), "pinned host");
    ring__mem_set_driver_for_tests(NULL);
}

/* A process where nobody called cuInit has no CUDA allocation: host, asked again next time. */
Test(cuda_mem, not_initialised_is_host)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    fake_rc = RING__CUDA_ERROR_NOT_INITIALIZED;
    cr_expect_eq(kind_of(fake_dev, NULL), RING__MEM_HOST);
    fake_rc = RING__CUDA_ERROR_DEINITIALIZED;
    cr_expect_eq(kind_of(fake_dev, NULL), RING__MEM_HOST);
    fake_rc = 0;
    cr_expect_eq(kind_of(fake_dev, NULL), RING__MEM_DEVICE);
    ring__mem_set_driver_for_tests(NULL);
}

Test(cuda_mem, driver_error_is_reported_not_guessed)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    fake_rc = 999;
    ring_comm_t *c = one_rank();
    float x[4] = {1, 2, 3, 4};
    ring_result_t rc = ring_allreduce(c, x, x, 4, RING_FLOAT32, RING_SUM);
    cr_expect_eq(rc, RING_ERR_SYSTEM, "%s", ring_result_name(rc));
    cr_expect(strstr(ring_comm_last_error(c), "cuPointerGetAttributes"), "%s", ring_comm_last_error(c));
    fake_rc = 0;
    cr_expect_eq(ring_allreduce(c, x, x, 4, RING_FLOAT32, RING_SUM), RING_OK, "refused calls do not fail the comm: %s",
                 ring_comm_last_error(c));
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}

static void expect_refused(ring_comm_t *c, ring_result_t rc, const char *call, const char *which, const char *why)
{
    const char *m = ring_comm_last_error(c);
    cr_expect_eq(rc, RING_ERR_UNSUPPORTED, "%s: %s (%s)", call, ring_result_name(rc), m);
    cr_expect(strstr(m, "CUDA device memory (device 1)"), "%s: %s", call, m);
    cr_expect(strstr(m, which), "%s: message should name '%s': %s", call, which, m);
    cr_expect(strstr(m, why), "%s: message should say '%s': %s", call, why, m);
}

#if RING_HAVE_CUDA
#define MIXED "the other buffer is not"
#else
#define MIXED "no CUDA support"
#endif

/* Device buffers the build cannot take: refused before anything runs, untouched, and the
 * communicator goes on. */
Test(cuda_mem, device_buffers_are_refused)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    ring_comm_t *c = one_rank();
    float host[64];
    for (int i = 0; i < 64; i++) host[i] = (float)i;
    memset(fake_dev, 0x5a, sizeof fake_dev);
    float *dev = (float *)fake_dev;
    ring_request_t *req = (ring_request_t *)(uintptr_t)1;

    expect_refused(c, ring_allreduce(c, host, dev, 16, RING_FLOAT32, RING_SUM), "allreduce to device", "recvbuf is", MIXED);
    expect_refused(c, ring_allreduce(c, dev, host, 16, RING_FLOAT32, RING_SUM), "allreduce from device", "sendbuf is", MIXED);
    expect_refused(c, ring_allreduce_async(c, dev, host, 16, RING_FLOAT32, RING_AVG, &req), "allreduce_async", "sendbuf is",
                   MIXED);
    cr_expect_null(req, "a refused async call leaves no request");
    expect_refused(c, ring_allgather(c, host, dev, 16, RING_INT32), "allgather", "recvbuf is", MIXED);
    expect_refused(c, ring_reduce_scatter(c, dev, host, 16, RING_INT32, RING_SUM), "reduce_scatter", "sendbuf is", MIXED);
#if !RING_HAVE_CUDA
    /* A CUDA build takes these (device_buffers_need_a_gpu below refuses them for want of a GPU). */
    expect_refused(c, ring_allreduce(c, dev, dev, 16, RING_FLOAT32, RING_SUM), "allreduce in place", "sendbuf (== recvbuf) is",
                   "no CUDA support");
    expect_refused(c, ring_allreduce(c, dev, dev + 16, 16, RING_FLOAT32, RING_SUM), "allreduce device to device",
                   "sendbuf and recvbuf are", "no CUDA support");
    expect_refused(c, ring_reduce_scatter(c, dev, dev + 32, 16, RING_BFLOAT16, RING_MAX), "reduce_scatter",
                   "sendbuf and recvbuf are", "no CUDA support");
    expect_refused(c, ring_broadcast(c, dev, 16, RING_UINT8, 0), "broadcast", "buf is", "no CUDA support");
    expect_refused(c, ring_broadcast_async(c, dev, 16, RING_UINT8, 0, &req), "broadcast_async", "buf is", "no CUDA support");
#endif

    for (size_t i = 0; i < sizeof fake_dev; i++) cr_assert_eq(fake_dev[i], 0x5a, "device buffer written at byte %zu", i);
    for (int i = 0; i < 64; i++) cr_assert_eq(host[i], (float)i, "host buffer written at %d", i);

    /* The communicator is not failed: a host call works, async too. */
    float out[16];
    cr_expect_eq(ring_allreduce(c, host, out, 16, RING_FLOAT32, RING_SUM), RING_OK, "%s", ring_comm_last_error(c));
    cr_expect_eq(out[15], 15.0f);
    cr_expect_eq(ring_allreduce_async(c, host, out, 16, RING_FLOAT32, RING_SUM, &req), RING_OK);
    cr_expect_eq(ring_wait(req), RING_OK);
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}

#if RING_HAVE_CUDA
#include "cuda/ring_cuda.h"

/* A CUDA build without a usable GPU: device buffers (which cannot really exist then) are
 * refused with the reason, and nothing else changes. */
Test(cuda_mem, device_buffers_need_a_gpu)
{
    char why[256] = "";
    if (ring__cuda_usable(why, sizeof why)) {
        fprintf(stderr, "[cuda_mem device_buffers_need_a_gpu] skipped: this machine has a usable GPU\n");
        cr_skip_test("this machine has a usable GPU");
    }
    ring__mem_set_driver_for_tests(fake_get_attrs);
    ring_comm_t *c = one_rank();
    float *dev = (float *)fake_dev;
    expect_refused(c, ring_allreduce(c, dev, dev, 16, RING_FLOAT32, RING_SUM), "allreduce in place", "sendbuf (== recvbuf) is",
                   "cannot use the GPU");
    expect_refused(c, ring_allreduce(c, dev, dev + 16, 16, RING_FLOAT32, RING_SUM), "allreduce device to device",
                   "sendbuf and recvbuf are", "cannot use the GPU");
    expect_refused(c, ring_reduce_scatter(c, dev, dev + 32, 16, RING_BFLOAT16, RING_MAX), "reduce_scatter",
                   "sendbuf and recvbuf are", "cannot use the GPU");
    expect_refused(c, ring_allgather(c, dev, dev + 32, 16, RING_INT32), "allgather", "sendbuf and recvbuf are",
                   "cannot use the GPU");
    ring_request_t *req = (ring_request_t *)(uintptr_t)1;
    expect_refused(c, ring_broadcast_async(c, dev, 16, RING_UINT8, 0, &req), "broadcast_async", "buf is", "cannot use the GPU");
    cr_expect_null(req, "a refused async call leaves no request");
    float x[4] = {1, 2, 3, 4};
    cr_expect_eq(ring_allreduce(c, x, x, 4, RING_FLOAT32, RING_SUM), RING_OK, "%s", ring_comm_last_error(c));
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}

/* The device path itself on one rank, with the GPU emulated (ring__cuda_set_emulation): a
 * device-to-device copy, in place a no-op; misaligned device buffers are refused. The
 * multi-rank device path: tests/test_cuda_coll.c. */
Test(cuda_mem, device_buffers_one_rank_emulated)
{
    ring__cuda_set_emulation(1);
    ring__mem_set_driver_for_tests(fake_get_attrs);
    ring_comm_t *c = one_rank();
    float *dev = (float *)fake_dev;
    for (int i = 0; i < 64; i++) dev[i] = (float)i;
    cr_expect_eq(ring_allreduce(c, dev, dev + 64, 64, RING_FLOAT32, RING_AVG), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 64; i++) cr_assert_eq(dev[64 + i], (float)i);
    cr_expect_eq(ring_allreduce(c, dev, dev, 64, RING_FLOAT32, RING_SUM), RING_OK, "%s", ring_comm_last_error(c));
    ring_request_t *req = NULL;
    cr_expect_eq(ring_allreduce_async(c, dev + 64, dev + 128, 64, RING_FLOAT32, RING_MAX, &req), RING_OK);
    cr_expect_eq(ring_wait(req), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 64; i++) cr_assert_eq(dev[128 + i], (float)i);
    /* One rank: reduce-scatter and all-gather copy the one block, broadcast leaves it. */
    cr_expect_eq(ring_reduce_scatter(c, dev, dev + 192, 64, RING_FLOAT32, RING_AVG), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 64; i++) cr_assert_eq(dev[192 + i], (float)i);
    for (int i = 0; i < 64; i++) dev[256 + i] = -1.0f;
    cr_expect_eq(ring_allgather(c, dev, dev + 256, 64, RING_FLOAT32), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 64; i++) cr_assert_eq(dev[256 + i], (float)i);
    cr_expect_eq(ring_broadcast(c, dev, 64, RING_FLOAT32, 0), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 64; i++) cr_assert_eq(dev[i], (float)i);
    ring_result_t rc = ring_allreduce(c, (char *)dev + 1, (char *)dev + 1, 8, RING_FLOAT32, RING_SUM);
    cr_expect_eq(rc, RING_ERR_INVALID_ARG, "%s: %s", ring_result_name(rc), ring_comm_last_error(c));
    cr_expect(strstr(ring_comm_last_error(c), "aligned"), "%s", ring_comm_last_error(c));
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}
#endif

/* Pinned and managed memory are host-accessible: the host path, unchanged. */
Test(cuda_mem, pinned_and_managed_take_the_host_path)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    ring_comm_t *c = one_rank();
    int32_t *p = (int32_t *)fake_pinned, *m = (int32_t *)fake_managed;
    for (int i = 0; i < 100; i++) p[i] = i * 3;
    cr_expect_eq(ring_allreduce(c, p, m, 100, RING_INT32, RING_MAX), RING_OK, "%s", ring_comm_last_error(c));
    for (int i = 0; i < 100; i++) cr_assert_eq(m[i], i * 3);
    cr_expect_eq(ring_broadcast(c, m, 100, RING_INT32, 0), RING_OK, "%s", ring_comm_last_error(c));
    cr_expect_eq(ring_allgather(c, m, p, 100, RING_INT32), RING_OK, "%s", ring_comm_last_error(c));
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}

/* Only calls with buffers ask: barrier and count 0 do not. */
Test(cuda_mem, calls_without_buffers_do_not_ask)
{
    ring__mem_set_driver_for_tests(fake_get_attrs);
    ring_comm_t *c = one_rank();
    atomic_store(&fake_calls, 0);
    cr_expect_eq(ring_barrier(c), RING_OK);
    cr_expect_eq(ring_allreduce(c, fake_dev, fake_dev, 0, RING_FLOAT32, RING_SUM), RING_OK);
    cr_expect_eq(ring_broadcast(c, NULL, 0, RING_FLOAT32, 0), RING_OK);
    cr_expect_eq(atomic_load(&fake_calls), 0);
    float x[2] = {1, 2};
    cr_expect_eq(ring_allreduce(c, x, x, 2, RING_FLOAT32, RING_SUM), RING_OK);
    cr_expect_eq(atomic_load(&fake_calls), 1, "in place: one query for both buffers");
    cr_expect_eq(ring_allreduce(c, x, x + 1, 1, RING_FLOAT32, RING_SUM), RING_OK);
    cr_expect_eq(atomic_load(&fake_calls), 3);
    ring_comm_destroy(c);
    ring__mem_set_driver_for_tests(NULL);
}

/* ---------- GPU: kernels and the real driver ---------- */

static void need_gpu(void)
{
#if RING_HAVE_CUDA
    char why[256] = "";
    if (tc_gpu_available(why, sizeof why)) return;
    fprintf(stderr, "[cuda_gpu] skipped: no usable GPU: %s\n", why);
    cr_skip_test("no usable GPU: %s", why);
#else
    fprintf(stderr, "[cuda_gpu] skipped: this build has no CUDA (-Dcuda=disabled or no nvcc)\n");
    cr_skip_test("this build has no CUDA (-Dcuda=disabled or no nvcc)");
#endif
}

#if RING_HAVE_CUDA
static void sweep(ring_dtype_t dt)
{
    need_gpu();
    char msg[1024] = "", gpu[256];
    int cases = 0;
    tc_describe_gpu(gpu, sizeof gpu);
    int failed = tc_sweep_dtype(dt, 0, 0, msg, sizeof msg, &cases);
    fprintf(stderr, "[cuda_gpu %s] %d cases, %d failed on %s\n", tc_dtype_name(dt), cases, failed, gpu);
    cr_expect_eq(failed, 0, "%d of %d cases failed; first: %s", failed, cases, msg);
    failed = tc_sweep_multi(dt, 0, 0, msg, sizeof msg, &cases);
    cr_expect_eq(failed, 0, "many inputs: %d of %d cases failed; first: %s", failed, cases, msg);
}

/*
 * The kernels' own per-thread code on the CPU (ring__cuda_reduce_emulated): the same sweep,
 * on every machine of a CUDA build, so that indexing (heads, tails, vector widths, the
 * unrolled grid-stride loop) and element semantics are checked where no GPU is. 768 threads:
 * a small grid, many grid-stride iterations.
 */
static void emulated(ring_dtype_t dt)
{
    char msg[1024] = "";
    int cases = 0;
    tc_set_emulation(768);
    int failed = tc_sweep_dtype(dt, 0, 0, msg, sizeof msg, &cases);
    cr_expect_eq(failed, 0, "%d of %d cases failed; first: %s", failed, cases, msg);
    failed = tc_sweep_multi(dt, 0, 0, msg, sizeof msg, &cases);
    tc_set_emulation(0);
    cr_expect_eq(failed, 0, "many inputs: %d of %d cases failed; first: %s", failed, cases, msg);
}

Test(cuda_emulated, int8) { emulated(RING_INT8); }
Test(cuda_emulated, uint8) { emulated(RING_UINT8); }
Test(cuda_emulated, int32) { emulated(RING_INT32); }
Test(cuda_emulated, uint32) { emulated(RING_UINT32); }
Test(cuda_emulated, int64) { emulated(RING_INT64); }
Test(cuda_emulated, uint64) { emulated(RING_UINT64); }
Test(cuda_emulated, float16) { emulated(RING_FLOAT16); }
Test(cuda_emulated, bfloat16) { emulated(RING_BFLOAT16); }
Test(cuda_emulated, float32) { emulated(RING_FLOAT32); }
Test(cuda_emulated, float64) { emulated(RING_FLOAT64); }

Test(cuda_emulated, large_buffers, .timeout = 300)
{
    char msg[1024] = "";
    int cases = 0;
    tc_set_emulation(256 * 132 * 8); /* an H100's full wave */
    int failed = tc_sweep_large(0, msg, sizeof msg, &cases);
    tc_set_emulation(0);
    cr_expect_eq(failed, 0, "%d of %d cases failed; first: %s", failed, cases, msg);
}

Test(cuda_gpu, int8) { sweep(RING_INT8); }
Test(cuda_gpu, uint8) { sweep(RING_UINT8); }
Test(cuda_gpu, int32) { sweep(RING_INT32); }
Test(cuda_gpu, uint32) { sweep(RING_UINT32); }
Test(cuda_gpu, int64) { sweep(RING_INT64); }
Test(cuda_gpu, uint64) { sweep(RING_UINT64); }
Test(cuda_gpu, float16) { sweep(RING_FLOAT16); }
Test(cuda_gpu, bfloat16) { sweep(RING_BFLOAT16); }
Test(cuda_gpu, float32) { sweep(RING_FLOAT32); }
Test(cuda_gpu, float64) { sweep(RING_FLOAT64); }

Test(cuda_gpu, large_buffers)
{
    need_gpu();
    char msg[1024] = "";
    int cases = 0;
    int failed = tc_sweep_large(0, msg, sizeof msg, &cases);
    cr_expect_eq(failed, 0, "%d of %d cases failed; first: %s", failed, cases, msg);
}

Test(cuda_gpu, bad_arguments_launch_nothing)
{
    need_gpu();
    char msg[512] = "";
    cr_expect_eq(tc_check_args(msg, sizeof msg), 0, "%s", msg);
}

Test(cuda_gpu, real_driver_kinds)
{
    need_gpu();
    char msg[512] = "";
    cr_expect_eq(tc_check_mem_kinds(msg, sizeof msg), 0, "%s", msg);
}

Test(cuda_gpu, public_api_on_device_buffers)
{
    need_gpu();
    char msg[512] = "";
    cr_expect_eq(tc_check_public_api(msg, sizeof msg), 0, "%s", msg);
}

Test(cuda_gpu, dmabuf_export_for_gpudirect_rdma)
{
    need_gpu();
    char msg[512] = "";
    cr_expect_eq(tc_check_dmabuf(msg, sizeof msg), 0, "%s", msg);
}
#else
Test(cuda_gpu, kernels) { need_gpu(); }
#endif
