/*
 * Where a user buffer lives (docs/cuda.md). One internal function classifies a pointer, in
 * every build (-Dcuda=disabled included), without linking any CUDA library:
 *
 *  - libcuda.so.1 is opened with dlopen once per process, on the first classification. If it
 *    cannot be opened there is no NVIDIA driver, no pointer can be device memory, and every
 *    later answer is "host" with no further call of any kind.
 *  - Otherwise cuPointerGetAttributes (memory type, managed flag, device ordinal) answers for
 *    each pointer. It needs no current context. CUDA_ERROR_NOT_INITIALIZED means nobody called
 *    cuInit in this process, so no CUDA allocation exists yet: "host", and the next call asks
 *    again. The library never calls cuInit itself (a process that initialises CUDA and then
 *    forks cannot use CUDA in the child: initialising it behind a host-only user's back would
 *    break that user's forked workers).
 *
 * Host, pinned (cudaMallocHost, cudaHostRegister) and managed (cudaMallocManaged) memory are
 * host-accessible and take the host path unchanged; device memory is not.
 */
#ifndef RING_CUDA_MEM_H
#define RING_CUDA_MEM_H

#include "internal.h"

typedef enum {
    RING__MEM_HOST,        /* not known to CUDA (malloc, stack, static, mmap), or no CUDA here */
    RING__MEM_HOST_PINNED, /* page-locked or registered host memory */
    RING__MEM_MANAGED,     /* unified memory: accessible from the host */
    RING__MEM_DEVICE,      /* device memory: the host must not touch it */
} ring__mem_kind_t;

/*
 * Classify ptr (NULL is host). *device: the CUDA device ordinal for device and managed memory,
 * else -1 (device may be NULL). Fails (RING_ERR_SYSTEM, message on comm) only when the driver
 * is there and initialised but cannot answer, since guessing "host" for a device pointer would
 * crash in the reduction loops.
 */
ring_result_t ring__mem_kind(ring_comm_t *comm, const void *ptr, ring__mem_kind_t *kind, int *device);

const char *ring__mem_kind_name(ring__mem_kind_t kind);

/*
 * The allocation that device pointer ptr lies in, for CUDA IPC of user buffers
 * (src/cuda/direct.c): its base and size, the driver's buffer id (unique per allocation for
 * the process's lifetime, so a freed and reallocated range gets a new one) and whether
 * cudaIpcGetMemHandle can export it (not for cudaMallocAsync pools or cuMemCreate memory).
 * RING_ERR_UNSUPPORTED when the driver cannot say.
 */
typedef struct ring__mem_range {
    uintptr_t base;
    size_t size;
    uint64_t id;
    int ipc_capable;
} ring__mem_range_t;
ring_result_t ring__mem_range(ring_comm_t *comm, const void *ptr, ring__mem_range_t *out); /* "host", "pinned host", "managed", "device" */

/*
 * The check api.c makes on a validated call with buffers (count > 0): RING_OK when every
 * buffer is host-accessible; RING_ERR_UNSUPPORTED, with a message naming the buffer, its
 * device and why, when one is device memory and this build has no device path for it.
 */
ring_result_t ring__mem_check_op(ring_comm_t *comm, ring__opdesc_t *op, int async); /* async: the _async form, for the message */

/* Does the calling thread have a current CUDA context (cuCtxGetCurrent)? 1 yes, 0 no, -1 cannot
 * tell (no driver). The device path uses it not to leave a context behind on a thread that
 * had none. */
int ring__mem_thread_has_context(void);

/* The PCI bus id ("0000:3b:00.0") of the device of the calling thread's current CUDA context,
 * into out: 1; 0 when there is no driver or no current context. It never initialises CUDA (a
 * program that has not used it yet has no GPU as far as the topology plan goes). */
int ring__mem_current_gpu_busid(char *out, size_t len);

/* What the driver probe found: "not probed yet", "no NVIDIA driver (...)", "libcuda.so.1 loaded". */
const char *ring__mem_driver_state(void);

/*
 * Tests only: answer with this function instead of libcuda's cuPointerGetAttributes (same
 * signature and return codes; attrs are the RING__CU_POINTER_ATTRIBUTE_* of mem_abi.h), so
 * that the device-pointer paths run on machines without a GPU. NULL restores the real probe.
 */
typedef int (*ring__cu_get_attrs_fn)(unsigned n, int *attrs, void **data, unsigned long long ptr);
void ring__mem_set_driver_for_tests(ring__cu_get_attrs_fn fn);
/*
 * Tests only: install a stand-in driver that calls range `slot` (0..3: [base, base + len),
 * len 0 clears it) device memory of device 0 and every other address host memory, for
 * programs that run the device path with the GPU emulated (ring__cuda_set_emulation). Each
 * range is one allocation to ring__mem_range (a new id each time a slot is set).
 */
void ring__mem_fake_device_range(int slot, const void *base, size_t len);

#endif
