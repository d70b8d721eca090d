/*
 * CUDA runtime helpers (ring_cuda.h): thin C wrappers over the runtime API with the library's
 * error convention, for the device-buffer path and the tests. The runtime is linked
 * statically (libcudart_static.a): it loads libcuda.so.1 itself on its first call, so a
 * process that never reaches these functions never touches the driver, and one on a machine
 * without a driver gets cudaErrorInsufficientDriver here instead of a failed load.
 */
#include <cuda.h> /* the driver API's constants, checked against src/cuda/mem.c's copies below */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "mem_abi.h"
#include "ring_cuda.h"

/* src/core/error.c (internal.h is C only). */
extern "C" int64_t ring__now_ns(void);

extern "C" ring_result_t ring__seterr(ring_comm_t *comm, ring_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* mem.c talks to libcuda through dlopen with its own copies of these values. */
static_assert(RING__CU_POINTER_ATTRIBUTE_MEMORY_TYPE == CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_IS_MANAGED == CU_POINTER_ATTRIBUTE_IS_MANAGED, "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_BUFFER_ID == CU_POINTER_ATTRIBUTE_BUFFER_ID, "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
              "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_RANGE_START_ADDR == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "driver ABI");
static_assert(RING__CU_POINTER_ATTRIBUTE_RANGE_SIZE == CU_POINTER_ATTRIBUTE_RANGE_SIZE, "driver ABI");
static_assert(RING__CU_MEMORYTYPE_HOST == CU_MEMORYTYPE_HOST, "driver ABI");
static_assert(RING__CU_MEMORYTYPE_DEVICE == CU_MEMORYTYPE_DEVICE, "driver ABI");
static_assert(RING__CUDA_SUCCESS == CUDA_SUCCESS, "driver ABI");
static_assert(RING__CUDA_ERROR_NOT_INITIALIZED == CUDA_ERROR_NOT_INITIALIZED, "driver ABI");
static_assert(RING__CUDA_ERROR_DEINITIALIZED == CUDA_ERROR_DEINITIALIZED, "driver ABI");
static_assert(sizeof(CUdeviceptr) == sizeof(unsigned long long), "driver ABI");

extern "C" ring_result_t ring__cuda_error(ring_comm_t *comm, int err, const char *what)
{
    cudaError_t e = (cudaError_t)err;
    ring_result_t code = RING_ERR_SYSTEM;
    switch (e) {
    case cudaErrorMemoryAllocation: code = RING_ERR_NOMEM; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: code = RING_ERR_UNSUPPORTED; break;
    default: break;
    }
    /* Clear the runtime's last-error slot (ours: cudart is linked statically, the user's
     * runtime has its own), so a later unrelated check does not see this one. */
    (void)cudaGetLastError();
    return ring__seterr(comm, code, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---------- emulation for tests (ring_cuda.h: ring__cuda_set_emulation) ---------- */

namespace {

struct EmuOp {
    int kind; /* 0 copy, 1 reduce, 2 many-input reduce, 3 wait: stream dst up to op n */
    void *dst;
    const void *a, *b;
    size_t n; /* bytes (copy) or elements (reduce) */
    ring_dtype_t dtype;
    ring_op_t op;
    int nranks;
    int nsrc, ndst; /* kind 2: srcs[0..nsrc) into dsts[0..ndst) */
    const void *srcs[RING__CUDA_MULTI_MAX];
    void *dsts[RING__CUDA_MULTI_MAX];
    int64_t ready_ns; /* CLOCK_MONOTONIC before which a touch does not run it (0: any time) */
};

struct EmuStream {
    EmuOp *q; /* ring buffer of cap entries: ops done .. enq-1 are queued */
    size_t cap;
    uint64_t enq, done;
    unsigned phase; /* which runs of 32 queued operations are lazy (below) */
};

struct EmuEvent {
    EmuStream *s;
    uint64_t at;
};

int emu_on;
pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
EmuStream emu_null; /* the legacy default stream */
uint64_t emu_rng = 0x9e3779b97f4a7c15ull;

EmuStream *emu_stream(ring__cuda_stream_t s) { return s ? reinterpret_cast<EmuStream *>(s) : &emu_null; }

void emu_exec(const EmuOp &o)
{
    if (o.kind == 0) memmove(o.dst, o.a, o.n);
    else if (o.kind == 1) (void)ring__cuda_reduce_emulated(NULL, o.dst, o.a, o.b, o.n, o.dtype, o.op, o.nranks, 256);
    else (void)ring__cuda_reduce_multi_emulated(NULL, o.dsts, o.ndst, o.srcs, o.nsrc, o.n, o.dtype, o.op, o.nranks, 256);
}

int64_t emu_kernel_delay_ns; /* ring__cuda_emu_set_kernel_delay */
int64_t emu_copy_delay_ns;   /* ring__cuda_emu_set_copy_delay */
int emu_open_delay_ms; /* ring__cuda_emu_set_open_delay (__atomic: set by a test's thread) */

/* Run queued work up to (excluding) op number upto. A touch (lazy) stops at a kernel that is
 * not ready yet; a synchronization waits for it. emu_mu held. */
void emu_run(EmuStream *s, uint64_t upto, bool lazy = false)
{
    while (s->done < upto && s->done < s->enq) {
        const EmuOp &o = s->q[s->done % s->cap];
        if (o.kind == 3) {
            /* No cycle: the op waited for was queued before this wait was. */
            EmuStream *w = static_cast<EmuStream *>(o.dst);
            emu_run(w, o.n, lazy);
            if (w->done < o.n) return; /* lazy, and w is held by work not ready yet */
            s->done++;
            continue;
        }
        for (int64_t now = ring__now_ns(); o.ready_ns > now; now = ring__now_ns()) {
            if (lazy) return;
            struct timespec nap = {0, (long)(o.ready_ns - now < 1000000 ? o.ready_ns - now : 1000000)};
            nanosleep(&nap, NULL);
        }
        emu_exec(o);
        s->done++;
    }
}

uint64_t emu_next(void)
{
    emu_rng = emu_rng * 6364136223846793005ull + 1442695040888963407ull;
    return emu_rng >> 33;
}

/* Every touch of a stream runs 0, 1 or 2 of its queued operations, so work completes later
 * than it is queued, in order, as on a GPU. In alternate runs of 32 operations a stream is
 * lazy (it skips three touches in four), and consecutive streams start in opposite phases:
 * work on two streams then completes in every relative order that the events the caller
 * waits for allow, so a missing cudaStreamWaitEvent shows up as wrong data. */
void emu_step(EmuStream *s)
{
    uint64_t r = emu_next();
    if (((s->done / 32 + s->phase) & 1) && r % 4) return;
    emu_run(s, s->done + (r >> 2) % 3, true);
}

bool emu_push(EmuStream *s, const EmuOp &o)
{
    if (s->enq - s->done == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        EmuOp *q = static_cast<EmuOp *>(malloc(cap * sizeof *q));
        if (!q) return false;
        for (uint64_t i = s->done; i < s->enq; i++) q[i % cap] = s->q[i % s->cap];
        free(s->q);
        s->q = q;
        s->cap = cap;
    }
    s->q[s->enq % s->cap] = o;
    s->enq++;
    emu_step(s);
    return true;
}

struct EmuLock {
    EmuLock() { pthread_mutex_lock(&emu_mu); }
    ~EmuLock() { pthread_mutex_unlock(&emu_mu); }
};

} // namespace

extern "C" void ring__cuda_set_emulation(int on) { emu_on = on; }
extern "C" int ring__cuda_emulating(void) { return emu_on; }

extern "C" void ring__cuda_emu_set_kernel_delay(int ms)
{
    EmuLock l;
    emu_kernel_delay_ns = (int64_t)ms * 1000000LL;
}

extern "C" void ring__cuda_emu_set_copy_delay(int ms)
{
    EmuLock l;
    emu_copy_delay_ns = (int64_t)ms * 1000000LL;
}

extern "C" void ring__cuda_emu_set_open_delay(int ms) { __atomic_store_n(&emu_open_delay_ms, ms, __ATOMIC_RELAXED); }

extern "C" ring_result_t ring__cuda_emu_reduce(ring_comm_t *comm, void *dst, const void *a, const void *b, size_t count,
                                               ring_dtype_t dtype, ring_op_t op, int nranks, ring__cuda_stream_t stream)
{
    EmuLock l;
    EmuOp o = {1, dst, a, b, count, dtype, op, nranks, 0, 0, {}, {}, emu_kernel_delay_ns ? ring__now_ns() + emu_kernel_delay_ns : 0};
    if (!emu_push(emu_stream(stream), o)) return ring__seterr(comm, RING_ERR_NOMEM, "emulated GPU: out of memory");
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_emu_reduce_multi(ring_comm_t *comm, void *const *dsts, int ndst,
                                                     const void *const *srcs, int nsrc, size_t count, ring_dtype_t dtype,
                                                     ring_op_t op, int nranks, ring__cuda_stream_t stream)
{
    EmuLock l;
    EmuOp o = {2, dsts[0], NULL, NULL, count, dtype, op, nranks, nsrc, ndst, {}, {},
               emu_kernel_delay_ns ? ring__now_ns() + emu_kernel_delay_ns : 0};
    for (int k = 0; k < nsrc && k < RING__CUDA_MULTI_MAX; k++) o.srcs[k] = srcs[k];
    for (int k = 0; k < ndst && k < RING__CUDA_MULTI_MAX; k++) o.dsts[k] = dsts[k];
    if (!emu_push(emu_stream(stream), o)) return ring__seterr(comm, RING_ERR_NOMEM, "emulated GPU: out of memory");
    return RING_OK;
}

#define CU_CHECK(comm, call, what)                                                                 \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return ring__cuda_error((comm), (int)e_, (what));                   \
    } while (0)

static pthread_once_t usable_once = PTHREAD_ONCE_INIT;
static int usable_answer;
static char usable_why[256];

static void probe_usable(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(usable_why, sizeof usable_why, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        return;
    }
    if (n < 1) {
        snprintf(usable_why, sizeof usable_why, "cudaGetDeviceCount: no CUDA device");
        return;
    }
    usable_answer = 1;
}

extern "C" int ring__cuda_usable(char *why, size_t whylen)
{
    if (emu_on) return 1;
    pthread_once(&usable_once, probe_usable);
    if (!usable_answer && why && whylen) snprintf(why, whylen, "%s", usable_why);
    return usable_answer;
}

extern "C" ring_result_t ring__cuda_describe(ring_comm_t *comm, int dev, char *out, size_t outlen)
{
    if (emu_on) {
        snprintf(out, outlen, "device %d: GPU emulated on the CPU (tests)", dev);
        return RING_OK;
    }
    cudaDeviceProp p;
    int drv = 0, rt = 0;
    CU_CHECK(comm, cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    CU_CHECK(comm, cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
    CU_CHECK(comm, cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
    snprintf(out, outlen, "device %d: %s, sm_%d%d, %d SMs, %.1f GiB; CUDA driver API %d.%d, runtime %d.%d", dev,
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30), drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_set_device(ring_comm_t *comm, int dev)
{
    if (emu_on) return RING_OK;
    char what[48];
    snprintf(what, sizeof what, "cudaSetDevice(%d)", dev);
    CU_CHECK(comm, cudaSetDevice(dev), what);
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_get_device(ring_comm_t *comm, int *dev)
{
    *dev = 0;
    if (emu_on) return RING_OK;
    CU_CHECK(comm, cudaGetDevice(dev), "cudaGetDevice");
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_device_uuid(ring_comm_t *comm, int dev, unsigned char *uuid)
{
    memset(uuid, 0, RING__CUDA_UUID_LEN);
    if (emu_on) {
        memcpy(uuid, "emulated GPU", 12);
        return RING_OK;
    }
    cudaDeviceProp p;
    CU_CHECK(comm, cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    static_assert(sizeof p.uuid.bytes == RING__CUDA_UUID_LEN, "cudaUUID_t is 16 bytes");
    memcpy(uuid, p.uuid.bytes, RING__CUDA_UUID_LEN);
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_host_alloc(ring_comm_t *comm, size_t bytes, void **p)
{
    *p = NULL;
    if (emu_on) {
        *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
        return *p ? RING_OK : ring__seterr(comm, RING_ERR_NOMEM, "emulated cudaHostAlloc(%zu bytes): out of memory", bytes);
    }
    char what[64];
    snprintf(what, sizeof what, "cudaHostAlloc(%zu bytes)", bytes);
    CU_CHECK(comm, cudaHostAlloc(p, bytes, cudaHostAllocPortable), what);
    return RING_OK;
}

extern "C" void ring__cuda_host_free(void *p)
{
    if (emu_on) {
        free(p);
        return;
    }
    if (p && cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" ring_result_t ring__cuda_dev_alloc(ring_comm_t *comm, size_t bytes, void **p)
{
    *p = NULL;
    if (emu_on) {
        *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
        return *p ? RING_OK : ring__seterr(comm, RING_ERR_NOMEM, "emulated cudaMalloc(%zu bytes): out of memory", bytes);
    }
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
    CU_CHECK(comm, cudaMalloc(p, bytes), what);
    return RING_OK;
}

extern "C" void ring__cuda_dev_free(void *p)
{
    if (emu_on) {
        free(p);
        return;
    }
    if (p && cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" ring_result_t ring__cuda_stream_create(ring_comm_t *comm, ring__cuda_stream_t *s)
{
    *s = NULL;
    if (emu_on) {
        EmuStream *e = static_cast<EmuStream *>(calloc(1, sizeof *e));
        if (!e) return ring__seterr(comm, RING_ERR_NOMEM, "emulated cudaStreamCreate: out of memory");
        {
            /* Timings differ from process to process (and so from rank to rank). */
            EmuLock l;
            static unsigned created;
            if (!created) emu_rng ^= (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
            e->phase = created++ & 1;
        }
        *s = reinterpret_cast<ring__cuda_stream_t>(e);
        return RING_OK;
    }
    CU_CHECK(comm, cudaStreamCreateWithFlags(s, cudaStreamDefault), "cudaStreamCreateWithFlags");
    return RING_OK;
}

extern "C" void ring__cuda_stream_destroy(ring__cuda_stream_t s)
{
    if (emu_on) {
        if (!s) return;
        EmuLock l;
        EmuStream *e = emu_stream(s);
        emu_run(e, e->enq); /* cudaStreamDestroy lets queued work finish */
        free(e->q);
        free(e);
        return;
    }
    if (s && cudaStreamDestroy(s) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" ring_result_t ring__cuda_stream_sync(ring_comm_t *comm, ring__cuda_stream_t s)
{
    if (emu_on) {
        EmuLock l;
        EmuStream *e = emu_stream(s);
        emu_run(e, e->enq);
        return RING_OK;
    }
    CU_CHECK(comm, cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return RING_OK;
}

/* A cudaStreamQuery's or cudaEventQuery's answer: done, not yet (not an error), or an error. */
static ring_result_t query_answer(ring_comm_t *comm, cudaError_t r, int *done, const char *what)
{
    *done = r == cudaSuccess;
    if (r == cudaSuccess || r == cudaErrorNotReady) {
        if (r == cudaErrorNotReady) (void)cudaGetLastError(); /* keep the slot clean */
        return RING_OK;
    }
    return ring__cuda_error(comm, (int)r, what);
}

extern "C" ring_result_t ring__cuda_stream_query(ring_comm_t *comm, ring__cuda_stream_t s, int *done)
{
    if (emu_on) {
        EmuLock l;
        EmuStream *e = emu_stream(s);
        emu_step(e);
        *done = e->done >= e->enq;
        return RING_OK;
    }
    return query_answer(comm, cudaStreamQuery(s), done, "cudaStreamQuery");
}

extern "C" ring_result_t ring__cuda_stream_idle(ring_comm_t *comm, ring__cuda_stream_t s, int *idle)
{
    if (emu_on) {
        EmuLock l;
        EmuStream *e = emu_stream(s);
        *idle = e->done >= e->enq && emu_null.done >= emu_null.enq;
        return RING_OK;
    }
    *idle = 0;
    const cudaStream_t qs[2] = {s, cudaStreamLegacy};
    for (int i = 0; i < 2; i++) {
        cudaError_t r = cudaStreamQuery(qs[i]);
        if (r == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error; keep the slot clean */
            return RING_OK;
        }
        if (r != cudaSuccess) return ring__cuda_error(comm, (int)r, "cudaStreamQuery");
    }
    *idle = 1;
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_event_create(ring_comm_t *comm, ring__cuda_event_t *e)
{
    *e = NULL;
    if (emu_on) {
        EmuEvent *v = static_cast<EmuEvent *>(calloc(1, sizeof *v));
        if (!v) return ring__seterr(comm, RING_ERR_NOMEM, "emulated cudaEventCreate: out of memory");
        *e = reinterpret_cast<ring__cuda_event_t>(v);
        return RING_OK;
    }
    CU_CHECK(comm, cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return RING_OK;
}

extern "C" void ring__cuda_event_destroy(ring__cuda_event_t e)
{
    if (emu_on) {
        free(e);
        return;
    }
    if (e && cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" ring_result_t ring__cuda_event_record(ring_comm_t *comm, ring__cuda_event_t e, ring__cuda_stream_t s)
{
    if (emu_on) {
        EmuLock l;
        EmuEvent *v = reinterpret_cast<EmuEvent *>(e);
        v->s = emu_stream(s);
        v->at = v->s->enq;
        emu_step(v->s);
        return RING_OK;
    }
    CU_CHECK(comm, cudaEventRecord(e, s), "cudaEventRecord");
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_event_query(ring_comm_t *comm, ring__cuda_event_t e, int *done)
{
    if (emu_on) {
        EmuLock l;
        EmuEvent *v = reinterpret_cast<EmuEvent *>(e);
        if (v->s) emu_step(v->s);
        *done = !v->s || v->s->done >= v->at;
        return RING_OK;
    }
    return query_answer(comm, cudaEventQuery(e), done, "cudaEventQuery");
}

extern "C" ring_result_t ring__cuda_stream_wait_event(ring_comm_t *comm, ring__cuda_stream_t s, ring__cuda_event_t e)
{
    if (emu_on) {
        /* Make the event's stream reach it now (stricter than needed), unless work not ready
         * yet (a delay) holds it: then a wait in s, which holds s as long. Such a wait reads
         * the other stream when it runs, so a stream is destroyed only once the streams
         * waiting for it are idle (coll.c frees a set only then). */
        EmuLock l;
        EmuEvent *v = reinterpret_cast<EmuEvent *>(e);
        EmuStream *me = emu_stream(s);
        if (v->s && v->s != me) {
            emu_run(v->s, v->at, true);
            if (v->s->done < v->at) {
                EmuOp o = {3, v->s, NULL, NULL, (size_t)v->at, RING_UINT8, RING_SUM, 0, 0, 0, {}, {}, 0};
                if (!emu_push(me, o)) return ring__seterr(comm, RING_ERR_NOMEM, "emulated GPU: out of memory");
            }
        }
        return RING_OK;
    }
    CU_CHECK(comm, cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_memcpy_async(ring_comm_t *comm, void *dst, const void *src, size_t bytes,
                                                 ring__cuda_stream_t s)
{
    if (!bytes) return RING_OK;
    if (emu_on) {
        EmuLock l;
        EmuOp o = {0, dst, src, NULL, bytes, RING_UINT8, RING_SUM, 0, 0, 0, {}, {},
                   emu_copy_delay_ns ? ring__now_ns() + emu_copy_delay_ns : 0};
        if (!emu_push(emu_stream(s), o)) return ring__seterr(comm, RING_ERR_NOMEM, "emulated GPU: out of memory");
        return RING_OK;
    }
    char what[80];
    snprintf(what, sizeof what, "cudaMemcpyAsync(%zu bytes)", bytes);
    CU_CHECK(comm, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), what);
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_memcpy(ring_comm_t *comm, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return RING_OK;
    if (emu_on) {
        EmuLock l;
        emu_run(&emu_null, emu_null.enq);
        memmove(dst, src, bytes);
        return RING_OK;
    }
    char what[80];
    snprintf(what, sizeof what, "cudaMemcpy(%zu bytes)", bytes);
    CU_CHECK(comm, cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), what);
    return RING_OK;
}

extern "C" ring_result_t ring__cuda_memset(ring_comm_t *comm, void *dst, int value, size_t bytes)
{
    if (!bytes) return RING_OK;
    if (emu_on) {
        memset(dst, value, bytes);
        return RING_OK;
    }
    CU_CHECK(comm, cudaMemset(dst, value, bytes), "cudaMemset");
    return RING_OK;
}

/* ---------- CUDA IPC ---------- */

static_assert(sizeof(cudaIpcMemHandle_t) == RING__CUDA_IPC_HANDLE_LEN, "cudaIpcMemHandle_t size");

namespace {
/* Emulated IPC memory: a memfd, kept open by its creator so that peers can open it through
 * /proc/PID/fd/N. The handle: "RGEI" | pid | fd | bytes. */
const uint32_t EMU_IPC_MAGIC = 0x49454752u;
struct EmuIpc {
    EmuIpc *next;
    void *p;
    int fd;
};
EmuIpc *emu_ipc;

void emu_handle(unsigned char *handle, int fd, uint64_t bytes)
{
    uint32_t w[3] = {EMU_IPC_MAGIC, (uint32_t)getpid(), (uint32_t)fd};
    memcpy(handle, w, sizeof w);
    memcpy(handle + 12, &bytes, sizeof bytes);
}
} // namespace

extern "C" ring_result_t ring__cuda_ipc_alloc(ring_comm_t *comm, size_t bytes, void **p, unsigned char *handle)
{
    *p = NULL;
    memset(handle, 0, RING__CUDA_IPC_HANDLE_LEN);
    if (emu_on) {
        EmuIpc *e = static_cast<EmuIpc *>(calloc(1, sizeof *e));
        int fd = memfd_create("ringcomm-emu-ipc", MFD_CLOEXEC);
        void *m = MAP_FAILED;
        if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0)
            m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (!e || m == MAP_FAILED) {
            free(e);
            if (fd >= 0) close(fd);
            return ring__seterr(comm, RING_ERR_NOMEM, "emulated CUDA IPC allocation of %zu bytes failed", bytes);
        }
        e->p = m;
        e->fd = fd;
        {
            EmuLock l;
            e->next = emu_ipc;
            emu_ipc = e;
        }
        emu_handle(handle, fd, bytes);
        *p = m;
        return RING_OK;
    }
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
    CU_CHECK(comm, cudaMalloc(p, bytes), what);
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, *p);
    if (e != cudaSuccess) {
        (void)cudaFree(*p);
        *p = NULL;
        return ring__cuda_error(comm, (int)e, "cudaIpcGetMemHandle");
    }
    memcpy(handle, &h, sizeof h);
    return RING_OK;
}

namespace {
/* Emulated user memory that other processes may map (tests: ring__cuda_emu_share). */
struct EmuShare {
    EmuShare *next;
    uintptr_t base;
    size_t len;
    int fd;
};
EmuShare *emu_shares;
} // namespace

extern "C" void ring__cuda_emu_share(void *base, size_t len, int fd)
{
    EmuShare *e = static_cast<EmuShare *>(calloc(1, sizeof *e));
    if (!e) return;
    e->base = (uintptr_t)base;
    e->len = len;
    e->fd = fd;
    EmuLock l;
    e->next = emu_shares;
    emu_shares = e;
}

extern "C" ring_result_t ring__cuda_ipc_export(ring_comm_t *comm, void *base, size_t bytes, unsigned char *handle)
{
    memset(handle, 0, RING__CUDA_IPC_HANDLE_LEN);
    if (emu_on) {
        int fd = -1;
        {
            EmuLock l;
            for (EmuShare *e = emu_shares; e; e = e->next)
                if (e->base == (uintptr_t)base && e->len == bytes) fd = e->fd;
        }
        if (fd < 0)
            return ring__seterr(comm, RING_ERR_UNSUPPORTED, "emulated cudaIpcGetMemHandle: %p is not shareable memory", base);
        emu_handle(handle, fd, bytes);
        return RING_OK;
    }
    cudaIpcMemHandle_t h;
    CU_CHECK(comm, cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle");
    memcpy(handle, &h, sizeof h);
    return RING_OK;
}

extern "C" void ring__cuda_ipc_free(void *p, size_t bytes)
{
    if (!p) return;
    if (emu_on) {
        EmuIpc *found = NULL;
        {
            EmuLock l;
            for (EmuIpc **pp = &emu_ipc; *pp; pp = &(*pp)->next)
                if ((*pp)->p == p) {
                    found = *pp;
                    *pp = found->next;
                    break;
                }
        }
        munmap(p, bytes);
        if (found) close(found->fd);
        free(found);
        return;
    }
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" ring_result_t ring__cuda_ipc_open(ring_comm_t *comm, const unsigned char *handle, size_t bytes, void **p)
{
    *p = NULL;
    if (emu_on) {
        uint32_t w[3];
        uint64_t b;
        memcpy(w, handle, sizeof w);
        memcpy(&b, handle + 12, sizeof b);
        /* Tests of the refused set-up (a GPU pair without a path, one process). */
        if (getenv("RING_TEST_EMU_IPC_REFUSE"))
            return ring__seterr(comm, RING_ERR_UNSUPPORTED, "emulated cudaIpcOpenMemHandle: refused (RING_TEST_EMU_IPC_REFUSE)");
        if (w[0] != EMU_IPC_MAGIC || b != bytes)
            return ring__seterr(comm, RING_ERR_PROTOCOL, "emulated cudaIpcOpenMemHandle: not an emulated handle");
        if (int ms = __atomic_load_n(&emu_open_delay_ms, __ATOMIC_RELAXED)) {
            struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
            nanosleep(&t, NULL);
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/%u/fd/%u", w[1], w[2]);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != b) {
            if (fd >= 0) close(fd);
            return ring__seterr(comm, RING_ERR_SYSTEM, "emulated cudaIpcOpenMemHandle: cannot open %s", path);
        }
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return ring__seterr(comm, RING_ERR_SYSTEM, "emulated cudaIpcOpenMemHandle: cannot map %s", path);
        *p = m;
        return RING_OK;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    CU_CHECK(comm, cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    return RING_OK;
}

extern "C" void ring__cuda_ipc_close(void *p, size_t bytes)
{
    if (!p) return;
    if (emu_on) {
        munmap(p, bytes);
        return;
    }
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) (void)cudaGetLastError();
}

/* ---------- tests on a GPU ---------- */

/* One thread polling mapped host memory: volatile, so every look goes to the host's copy. */
static __global__ void hold_kernel(const volatile unsigned *flag)
{
    while (*flag == 0) {
    }
}

extern "C" ring_result_t ring__cuda_test_hold(ring_comm_t *comm, unsigned **flag)
{
    void *h = NULL, *d = NULL;
    *flag = NULL;
    if (emu_on) return ring__seterr(comm, RING_ERR_UNSUPPORTED, "emulated GPU: no kernel to hold it (use the emulated delays)");
    CU_CHECK(comm, cudaHostAlloc(&h, sizeof(unsigned), cudaHostAllocMapped), "cudaHostAlloc (the test's flag)");
    *(volatile unsigned *)h = 0;
    cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
    if (e == cudaSuccess) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, 1, 1);
        cfg.blockDim = dim3(1, 1, 1);
        cfg.stream = cudaStreamLegacy;
        e = cudaLaunchKernelEx(&cfg, hold_kernel, (const volatile unsigned *)d);
    }
    if (e != cudaSuccess) {
        (void)cudaFreeHost(h);
        return ring__cuda_error(comm, (int)e, "the test's holding kernel");
    }
    *flag = (unsigned *)h;
    return RING_OK;
}

extern "C" void ring__cuda_test_release(unsigned *flag)
{
    if (!flag) return;
    __atomic_store_n(flag, 1u, __ATOMIC_SEQ_CST);
    if (cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) (void)cudaGetLastError();
    if (cudaFreeHost(flag) != cudaSuccess) (void)cudaGetLastError();
}

/* ---------- dma-buf export (GPUDirect RDMA, src/cuda/gdr.c) ---------- */

extern "C" ring_result_t ring__cuda_dmabuf_fd(ring_comm_t *comm, void *p, size_t bytes, int *fd)
{
    *fd = -1;
    if (emu_on) return ring__seterr(comm, RING_ERR_UNSUPPORTED, "emulated GPU: no dma-buf export");
    /* Through the runtime's entry-point query, so that the library never links libcuda itself
     * (it must load on machines without a driver). cuMemGetHandleForAddressRange is CUDA 11.7. */
    typedef CUresult (*get_handle_fn)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        return ring__seterr(comm, RING_ERR_UNSUPPORTED, "the driver has no cuMemGetHandleForAddressRange (older than CUDA 11.7)");
    }
    int h = -1;
    CUresult r = ((get_handle_fn)fn)(&h, (CUdeviceptr)(uintptr_t)p, bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS || h < 0)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "cuMemGetHandleForAddressRange(dma-buf, %zu bytes) failed with CUresult %d (no dma-buf support "
                            "in this GPU, driver or kernel)",
                            bytes, (int)r);
    *fd = h;
    return RING_OK;
}
