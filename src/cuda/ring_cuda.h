/*
 * CUDA internals (docs/cuda.md): reduction kernels and the runtime helpers the device-buffer
 * path uses, C-callable, implemented in the .cu files of src/cuda and built only where nvcc and
 * libcudart_static were found (RING_HAVE_CUDA). Nothing here is called on the host path.
 *
 * (Not named cuda.h: that is the driver API's header, and an include path that holds both
 * would pick the wrong one.)
 *
 * Conventions, as in the rest of the library:
 *  - every call that can fail returns a ring_result_t and writes the detail with ring__seterr
 *    to comm (comm may be NULL: the calling thread's message, ring_comm_last_error(NULL));
 *  - CUDA errors map to RING_ERR_NOMEM (out of memory), RING_ERR_UNSUPPORTED (no device, no
 *    or too old a driver) or RING_ERR_SYSTEM (anything else), and the message names the CUDA
 *    call and error;
 *  - calls act on the calling thread's current device; ring__cuda_set_device picks it;
 *  - streams and events are the runtime's (cudaStream_t is struct CUstream_st *), so this
 *    header does not need the CUDA headers.
 */
#ifndef RING_CUDA_H
#define RING_CUDA_H

#include <stddef.h>

#include "ringcomm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;
struct CUevent_st;
typedef struct CUstream_st *ring__cuda_stream_t; /* == cudaStream_t; NULL: the legacy default stream */
typedef struct CUevent_st *ring__cuda_event_t;   /* == cudaEvent_t */

/*
 * Can this process run kernels (driver loaded, runtime compatible, at least one device)?
 * Answers once per process and caches it; on 0 writes the reason to why (may be NULL).
 * Makes CUDA runtime calls: only for callers that already know a device buffer exists, or
 * tests.
 */
int ring__cuda_usable(char *why, size_t whylen);

/* Device count and names for logs and tests ("NVIDIA H100 80GB HBM3, driver 13.0, sm_90"). */
ring_result_t ring__cuda_describe(ring_comm_t *comm, int dev, char *out, size_t outlen);

/*
 * dst[i] = a[i] op b[i] for i < count, on `stream`, asynchronously: the semantics of
 * ring__reduce (src/collectives/reduce.h), bit for bit, except that a NaN produced by
 * SUM/PROD/AVG is the GPU's canonical NaN rather than one of the input payloads (MIN/MAX
 * return the input NaN, quieted for fp16/bf16, exactly as the host does).
 * dst, a, b: device-accessible, each aligned to the element size (else RING_ERR_INVALID_ARG,
 * nothing launched); dst may equal a or b but must not overlap them partially. Any count;
 * count == 0 launches nothing. RING_AVG combines like RING_SUM here.
 */
ring_result_t ring__cuda_reduce(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                ring_dtype_t dtype, ring_op_t op, ring__cuda_stream_t stream);
/* The last combining step: as ring__reduce_final, RING_AVG divides (a + b) by nranks once. */
ring_result_t ring__cuda_reduce_final(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                      ring_dtype_t dtype, ring_op_t op, int nranks, ring__cuda_stream_t stream);

/*
 * Many inputs at once (the direct collectives of src/cuda/direct.c): r[i] = srcs[0][i] op
 * srcs[1][i] op ... op srcs[nsrc-1][i], combined left to right with one rounding per step,
 * exactly as a chain of ring__cuda_reduce calls ending in ring__cuda_reduce_final(nranks)
 * would give, written to every dsts[0..ndst), reading each input once and writing each
 * output once. 2 <= nsrc <= RING__CUDA_MULTI_MAX, 1 <= ndst <= RING__CUDA_MULTI_MAX; an
 * output may equal an input exactly (each element's inputs are read before any of its
 * outputs is written) but must not overlap one partially; the alignment rule as above.
 */
#define RING__CUDA_MULTI_MAX 16
ring_result_t ring__cuda_reduce_multi(ring_comm_t *comm, void *const *dsts, int ndst, const void *const *srcs, int nsrc,
                                      size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                      ring__cuda_stream_t stream);
/* Tests: its per-thread code on the CPU, as ring__cuda_reduce_emulated. */
ring_result_t ring__cuda_reduce_multi_emulated(ring_comm_t *comm, void *const *dsts, int ndst, const void *const *srcs,
                                               int nsrc, size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                               size_t nthreads);

/* Report a CUDA runtime error (err: a cudaError_t) from `what` on comm, mapped as above;
 * returns the ring_result_t. */
ring_result_t ring__cuda_error(ring_comm_t *comm, int err, const char *what);

/*
 * Tests: the kernel's own per-thread code run on the CPU, on host memory, by `nthreads`
 * simulated threads (rounded up to whole 256-thread blocks) of one grid-stride loop, one after
 * another, through the same dispatch
 * (alignment, head/tail, vector width). nranks 0 is ring__cuda_reduce, >= 1 the final step.
 * Checks indexing and element semantics where no GPU exists; the device's own arithmetic
 * (__fadd_rn and friends) is replaced by the host's IEEE operations.
 */
ring_result_t ring__cuda_reduce_emulated(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                         ring_dtype_t dtype, ring_op_t op, int nranks, size_t nthreads);

/* Make dev the calling thread's current device (cudaSetDevice); read it (cudaGetDevice). */
ring_result_t ring__cuda_set_device(ring_comm_t *comm, int dev);
ring_result_t ring__cuda_get_device(ring_comm_t *comm, int *dev);
/* The physical GPU behind device dev (cudaDeviceProp.uuid): equal across processes for one
 * GPU, whatever CUDA_VISIBLE_DEVICES numbers it. The emulated GPU is one GPU for all. */
#define RING__CUDA_UUID_LEN 16
ring_result_t ring__cuda_device_uuid(ring_comm_t *comm, int dev, unsigned char *uuid);

/* Page-locked host memory (cudaHostAlloc, portable: usable from every device's streams). */
ring_result_t ring__cuda_host_alloc(ring_comm_t *comm, size_t bytes, void **p);
void ring__cuda_host_free(void *p); /* NULL is a no-op */
/* Device memory on the current device (cudaMalloc: 256-byte aligned). */
ring_result_t ring__cuda_dev_alloc(ring_comm_t *comm, size_t bytes, void **p);
void ring__cuda_dev_free(void *p); /* NULL is a no-op */

/*
 * A stream of the current device created without cudaStreamNonBlocking: work queued on it
 * waits for work queued earlier on the device's legacy default stream (stream 0, where code
 * that names no stream, PyTorch's default included, puts its kernels), and the other way
 * round. The device path relies on this to see buffers written by such code.
 */
ring_result_t ring__cuda_stream_create(ring_comm_t *comm, ring__cuda_stream_t *s);
void ring__cuda_stream_destroy(ring__cuda_stream_t s); /* NULL is a no-op */
/* Wait for everything queued on s, with no bound (tests; the collectives poll with
 * ring__cuda_stream_query and RING_TIMEOUT_MS instead). */
ring_result_t ring__cuda_stream_sync(ring_comm_t *comm, ring__cuda_stream_t s);
/* *done = 1 once everything queued on s has finished, else 0 (cudaStreamQuery). Never blocks. */
ring_result_t ring__cuda_stream_query(ring_comm_t *comm, ring__cuda_stream_t s, int *done);
/*
 * *idle = 1 when everything queued on s and on the legacy default stream has finished
 * (cudaStreamQuery on both), else 0. Queues nothing: a rank that only needs to know that its
 * inputs are written does not make its context compete for the GPU (direct.c).
 */
ring_result_t ring__cuda_stream_idle(ring_comm_t *comm, ring__cuda_stream_t s, int *idle);

/* Events without timing (cudaEventDisableTiming): cheap markers in a stream. */
ring_result_t ring__cuda_event_create(ring_comm_t *comm, ring__cuda_event_t *e);
void ring__cuda_event_destroy(ring__cuda_event_t e); /* NULL is a no-op */
ring_result_t ring__cuda_event_record(ring_comm_t *comm, ring__cuda_event_t e, ring__cuda_stream_t s);
/* *done = 1 once the work before the event's last record finished, else 0. Never blocks. */
ring_result_t ring__cuda_event_query(ring_comm_t *comm, ring__cuda_event_t e, int *done);
/* Work queued on s after this call waits for e. */
ring_result_t ring__cuda_stream_wait_event(ring_comm_t *comm, ring__cuda_stream_t s, ring__cuda_event_t e);

/*
 * Copy bytes on s, in either direction (cudaMemcpyAsync with cudaMemcpyDefault: the pointers
 * say where they live). Asynchronous with respect to the host only for device and pinned
 * memory; with pageable host memory the runtime stages it and may return late.
 */
ring_result_t ring__cuda_memcpy_async(ring_comm_t *comm, void *dst, const void *src, size_t bytes,
                                      ring__cuda_stream_t s);
/* Synchronous copy (cudaMemcpy, cudaMemcpyDefault) and fill (cudaMemset), for tests and set-up. */
ring_result_t ring__cuda_memcpy(ring_comm_t *comm, void *dst, const void *src, size_t bytes);
ring_result_t ring__cuda_memset(ring_comm_t *comm, void *dst, int value, size_t bytes);

/*
 * CUDA IPC (src/cuda/ipc.c): device memory that another process on this host maps.
 * ipc_alloc: cudaMalloc on the current device plus cudaIpcGetMemHandle; the handle is the
 * opaque 64-byte cudaIpcMemHandle_t. ipc_open maps a peer's handle on the current device
 * (cudaIpcOpenMemHandle, peer access enabled lazily where the allocation is on another GPU);
 * it fails for a handle of the calling process and where no GPU path exists.
 * Emulated (tests): the memory is a memfd mapping, the handle names it as /proc/PID/fd/N.
 */
#define RING__CUDA_IPC_HANDLE_LEN 64
ring_result_t ring__cuda_ipc_alloc(ring_comm_t *comm, size_t bytes, void **p, unsigned char *handle);
void ring__cuda_ipc_free(void *p, size_t bytes); /* NULL is a no-op */
ring_result_t ring__cuda_ipc_open(ring_comm_t *comm, const unsigned char *handle, size_t bytes, void **p);
void ring__cuda_ipc_close(void *p, size_t bytes); /* NULL is a no-op */
/* The handle of an existing allocation [base, base + bytes) of this process (cudaIpcGetMemHandle
 * on its base), which a peer opens with ring__cuda_ipc_open(handle, bytes). Emulated: memory
 * registered with ring__cuda_emu_share. */
ring_result_t ring__cuda_ipc_export(ring_comm_t *comm, void *base, size_t bytes, unsigned char *handle);
/* Tests only: emulated device memory [base, base + len) is a shared mapping of memfd fd, which
 * ring__cuda_ipc_export may hand to other processes. */
void ring__cuda_emu_share(void *base, size_t len, int fd);

/*
 * A dma-buf file descriptor for device memory [p, p + bytes) (cuMemGetHandleForAddressRange),
 * for GPUDirect RDMA's ibv_reg_dmabuf_mr; p and bytes aligned to the host page size. The
 * caller closes it. RING_ERR_UNSUPPORTED with the reason where the GPU, driver or kernel cannot
 * export one, and always on the emulated GPU.
 */
ring_result_t ring__cuda_dmabuf_fd(ring_comm_t *comm, void *p, size_t bytes, int *fd);

/*
 * Tests only: emulate the GPU on the CPU, process-wide (call before anything else here).
 * "Device" memory is host memory, streams are FIFO queues that run a few operations each time
 * they are touched (so copies and kernels really complete later than they are queued, and
 * events report done only once everything before them ran), kernels run through
 * ring__cuda_reduce_emulated. Lets the device-buffer collectives run, and be checked, on
 * machines without a GPU (tests/test_cuda_coll.c).
 */
void ring__cuda_set_emulation(int on);
int ring__cuda_emulating(void);
/* Tests only: emulated reduction kernels (ring__cuda_reduce and ring__cuda_reduce_multi) queued
 * from now on complete no sooner than ms after they were queued, as a long kernel would. */
void ring__cuda_emu_set_kernel_delay(int ms);
/* Tests only: emulated copies (ring__cuda_memcpy_async) queued from now on complete no sooner
 * than ms after they were queued, as copies behind a kernel that does not end would. */
void ring__cuda_emu_set_copy_delay(int ms);
/* Tests only: each emulated cudaIpcOpenMemHandle from now on takes ms, as a first mapping of a
 * large allocation may. */
void ring__cuda_emu_set_open_delay(int ms);
/* Tests only, on a real GPU: a kernel on the current device's legacy default stream that runs
 * until ring__cuda_test_release(*flag), as a caller's kernel that does not end would (it holds
 * ringcomm's blocking streams). *flag is mapped pinned memory. Not with the emulated GPU. */
ring_result_t ring__cuda_test_hold(ring_comm_t *comm, unsigned **flag);
/* Ends that kernel, waits for it (the legacy default stream) and frees the flag. */
void ring__cuda_test_release(unsigned *flag);
/* reduce.cu's ring__cuda_reduce queues its work here when emulating. */
ring_result_t ring__cuda_emu_reduce(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                    ring_dtype_t dtype, ring_op_t op, int nranks, ring__cuda_stream_t stream);
ring_result_t ring__cuda_emu_reduce_multi(ring_comm_t *comm, void *const *dsts, int ndst, const void *const *srcs,
                                          int nsrc, size_t count, ring_dtype_t dtype, ring_op_t op, int nranks,
                                          ring__cuda_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif
