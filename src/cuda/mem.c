/*
 * Pointer classification (mem.h): libcuda.so.1 through dlopen, in every build.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/mem.h"
#include "cuda/mem_abi.h"
#if RING_HAVE_CUDA
#include "cuda/coll.h"
#endif

typedef int (*error_name_fn)(int err, const char **name);
typedef int (*ctx_get_current_fn)(void **ctx);
typedef int (*ctx_get_device_fn)(int *dev);
typedef int (*device_busid_fn)(char *id, int len, int dev);

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static ring__cu_get_attrs_fn drv_get_attrs; /* written once, under probe_once */
static error_name_fn drv_error_name;
static ctx_get_current_fn drv_ctx_get_current;
static ctx_get_device_fn drv_ctx_get_device;
static device_busid_fn drv_device_busid;
static char drv_state[320] = "not probed yet";
static _Atomic(ring__cu_get_attrs_fn) test_get_attrs;

static void probe(void)
{
    /* RTLD_LOCAL: the driver's symbols stay out of the global namespace. The handle is never
     * closed (the driver stays loaded for the process's lifetime anyway). */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(drv_state, sizeof drv_state, "no NVIDIA driver (dlopen libcuda.so.1: %s): no buffer can be device memory",
                 e ? e : "unknown error");
        return;
    }
    /* POSIX guarantees that dlsym's object pointer converts to a function pointer. */
    ring__cu_get_attrs_fn ga = (ring__cu_get_attrs_fn)dlsym(lib, "cuPointerGetAttributes");
    drv_error_name = (error_name_fn)dlsym(lib, "cuGetErrorName");
    drv_ctx_get_current = (ctx_get_current_fn)dlsym(lib, "cuCtxGetCurrent");
    drv_ctx_get_device = (ctx_get_device_fn)dlsym(lib, "cuCtxGetDevice");
    drv_device_busid = (device_busid_fn)dlsym(lib, "cuDeviceGetPCIBusId");
    if (!ga) {
        snprintf(drv_state, sizeof drv_state,
                 "libcuda.so.1 has no cuPointerGetAttributes (a driver older than CUDA 7): buffers are taken as host memory");
        return;
    }
    drv_get_attrs = ga;
    snprintf(drv_state, sizeof drv_state, "libcuda.so.1 loaded");
}

/*
 * The probe runs once per process, inside the fork guard (comm.c). glibc's fork neither waits
 * for a dlopen in another thread nor keeps a pthread_once that a fork interrupted: the child
 * runs it again, so a child forked in the middle of the probe called dlopen on the loader's
 * half-updated state and died of SIGSEGV in _dl_load_cache_lookup (the grandchild of
 * pair/a_child_forked_during_the_parents_first_init_makes_its_own_communicator, 4 of 40 runs
 * with both CPUs busy). In the guard, a fork waits for the probe to end. The flag keeps the
 * guard's lock off every later call (the pointer classification of each collective).
 */
static atomic_int probed;

static void probe_now(void)
{
    if (atomic_load_explicit(&probed, memory_order_acquire)) return;
    ring__fork_guard_enter();
    pthread_once(&probe_once, probe);
    ring__fork_guard_leave();
    atomic_store_explicit(&probed, 1, memory_order_release);
}

const char *ring__mem_driver_state(void) { return drv_state; }

int ring__mem_thread_has_context(void)
{
    probe_now();
    void *ctx = NULL;
    if (!drv_ctx_get_current || drv_ctx_get_current(&ctx) != RING__CUDA_SUCCESS) return -1;
    return ctx != NULL;
}

int ring__mem_current_gpu_busid(char *out, size_t len)
{
    /* cuCtxGetCurrent answers CUDA_ERROR_NOT_INITIALIZED before cuInit: nothing starts here. */
    if (ring__mem_thread_has_context() != 1 || !drv_ctx_get_device || !drv_device_busid || len < 2) return 0;
    int dev = -1;
    if (drv_ctx_get_device(&dev) != RING__CUDA_SUCCESS || drv_device_busid(out, (int)len, dev) != RING__CUDA_SUCCESS)
        return 0;
    out[len - 1] = '\0';
    return out[0] != '\0';
}

void ring__mem_set_driver_for_tests(ring__cu_get_attrs_fn fn)
{
    atomic_store_explicit(&test_get_attrs, fn, memory_order_release);
}

static struct {
    uintptr_t base;
    size_t len;
    uint64_t id;
} fake_ranges[4];
static uint64_t fake_next_id = 1;

static int fake_ranges_get_attrs(unsigned n, int *attrs, void **data, unsigned long long ptr)
{
    int in = -1;
    for (int r = 0; r < 4; r++)
        if (ptr >= fake_ranges[r].base && ptr - fake_ranges[r].base < fake_ranges[r].len) in = r;
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data[i] = in >= 0 ? RING__CU_MEMORYTYPE_DEVICE : 0;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_IS_MANAGED) *(unsigned *)data[i] = 0;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int *)data[i] = in >= 0 ? 0 : -1;
        else if (in < 0) continue; /* the driver answers the range attributes for its own memory only */
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_BUFFER_ID) *(unsigned long long *)data[i] = fake_ranges[in].id;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) *(unsigned *)data[i] = 1;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(unsigned long long *)data[i] = fake_ranges[in].base;
        else if (attrs[i] == RING__CU_POINTER_ATTRIBUTE_RANGE_SIZE) *(size_t *)data[i] = fake_ranges[in].len;
    }
    return 0;
}

void ring__mem_fake_device_range(int slot, const void *base, size_t len)
{
    if (slot < 0 || slot >= 4) return;
    fake_ranges[slot].base = (uintptr_t)base;
    fake_ranges[slot].len = len;
    fake_ranges[slot].id = fake_next_id++;
    ring__mem_set_driver_for_tests(fake_ranges_get_attrs);
}

static ring__cu_get_attrs_fn get_attrs(void)
{
    ring__cu_get_attrs_fn ga = atomic_load_explicit(&test_get_attrs, memory_order_acquire);
    if (!ga) {
        probe_now();
        ga = drv_get_attrs;
    }
    return ga;
}

ring_result_t ring__mem_range(ring_comm_t *comm, const void *ptr, ring__mem_range_t *out)
{
    ring__cu_get_attrs_fn ga = get_attrs();
    unsigned long long base = 0, id = 0;
    size_t size = 0;
    unsigned capable = 0;
    memset(out, 0, sizeof *out);
    if (!ga) return ring__seterr(comm, RING_ERR_UNSUPPORTED, "no NVIDIA driver");
    int attrs[4] = {RING__CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, RING__CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                    RING__CU_POINTER_ATTRIBUTE_BUFFER_ID, RING__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    void *data[4] = {&base, &size, &id, &capable};
    int r = ga(4, attrs, data, (unsigned long long)(uintptr_t)ptr);
    if (r != RING__CUDA_SUCCESS || !base || !size || (uintptr_t)ptr < base || (uintptr_t)ptr - base >= size)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED, "cuPointerGetAttributes cannot tell which allocation %p is in (%d)",
                            ptr, r);
    out->base = (uintptr_t)base;
    out->size = size;
    out->id = id;
    out->ipc_capable = capable != 0;
    return RING_OK;
}

const char *ring__mem_kind_name(ring__mem_kind_t kind)
{
    switch (kind) {
    case RING__MEM_HOST: return "host";
    case RING__MEM_HOST_PINNED: return "pinned host";
    case RING__MEM_MANAGED: return "managed";
    case RING__MEM_DEVICE: return "device";
    }
    return "?";
}

ring_result_t ring__mem_kind(ring_comm_t *comm, const void *ptr, ring__mem_kind_t *kind, int *device)
{
    *kind = RING__MEM_HOST;
    if (device) *device = -1;
    if (!ptr) return RING_OK;
    ring__cu_get_attrs_fn ga = get_attrs();
    if (!ga) return RING_OK; /* no driver: nothing can be device memory */

    /* Defaults for a pointer the driver does not know: it writes nothing or zeros. */
    unsigned memtype = 0, managed = 0;
    int ordinal = -1;
    int attrs[3] = {RING__CU_POINTER_ATTRIBUTE_MEMORY_TYPE, RING__CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    RING__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[3] = {&memtype, &managed, &ordinal};
    int r = ga(3, attrs, data, (unsigned long long)(uintptr_t)ptr);
    /* Not initialised: no allocation can exist yet. Deinitialised: the process is exiting and
     * no device memory is usable any more. Either way the host path is the only one. */
    if (r == RING__CUDA_ERROR_NOT_INITIALIZED || r == RING__CUDA_ERROR_DEINITIALIZED) return RING_OK;
    if (r != RING__CUDA_SUCCESS) {
        const char *name = NULL;
        if (!drv_error_name || drv_error_name(r, &name) != RING__CUDA_SUCCESS || !name) name = "unknown error";
        return ring__seterr(comm, RING_ERR_SYSTEM,
                            "cannot tell whether buffer %p is CUDA device memory: cuPointerGetAttributes failed: %s (%d)",
                            ptr, name, r);
    }
    if (managed) {
        *kind = RING__MEM_MANAGED;
    } else if (memtype == RING__CU_MEMORYTYPE_HOST) {
        *kind = RING__MEM_HOST_PINNED;
        ordinal = -1;
    } else if (memtype != 0) {
        /* RING__CU_MEMORYTYPE_DEVICE, and anything a later driver may add: not the host's. */
        *kind = RING__MEM_DEVICE;
    } else {
        ordinal = -1;
    }
    if (device) *device = ordinal;
    return RING_OK;
}


ring_result_t ring__mem_check_op(ring_comm_t *comm, ring__opdesc_t *op, int async)
{
    /* Every call comes here: without a driver, answer at once rather than ask twice. */
    if (!get_attrs()) return RING_OK;
    ring__mem_kind_t ks, kr;
    int ds, dr;
    ring_result_t rc = ring__mem_kind(comm, op->sendbuf, &ks, &ds);
    if (rc != RING_OK) return rc;
    if (op->recvbuf == op->sendbuf) {
        kr = ks;
        dr = ds;
    } else {
        rc = ring__mem_kind(comm, op->recvbuf, &kr, &dr);
        if (rc != RING_OK) return rc;
    }
    if (ks != RING__MEM_DEVICE && kr != RING__MEM_DEVICE) return RING_OK;

    const char *name = ring__call_name(op->coll, async);
    const char *which;
    if (op->coll == RING__COLL_BROADCAST) which = "buf is";
    else if (op->sendbuf == op->recvbuf) which = "sendbuf (== recvbuf) is";
    else if (ks == RING__MEM_DEVICE && kr == RING__MEM_DEVICE) which = "sendbuf and recvbuf are";
    else if (ks == RING__MEM_DEVICE) which = "sendbuf is";
    else which = "recvbuf is";
#if RING_HAVE_CUDA
    (void)name;
    return ring__cuda_accept_op(comm, op, ks == RING__MEM_DEVICE ? ds : -1, kr == RING__MEM_DEVICE ? dr : -1, which);
#else
    return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                        "ring_%s: %s CUDA device memory (device %d): this build has no CUDA support (configured with "
                        "-Dcuda=disabled or without nvcc); pass host, pinned or managed memory, or rebuild with "
                        "-Dcuda=enabled (docs/cuda.md)",
                        name, which, ks == RING__MEM_DEVICE ? ds : dr);
#endif
}
