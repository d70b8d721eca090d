/*
 * Collectives on CUDA device buffers (docs/cuda.md, "Device buffers"): all-reduce,
 * reduce-scatter, all-gather and broadcast, staged through pinned host memory chunk by chunk
 * on the host path's wire protocol. Built where
 * RING_HAVE_CUDA; src/cuda/mem.c and src/core/api.c are the only callers.
 */
#ifndef RING_CUDA_COLL_H
#define RING_CUDA_COLL_H

#include "internal.h"

/*
 * A validated call whose buffers include device memory (send_dev / recv_dev: the device of
 * sendbuf / recvbuf, -1 for host-accessible memory; which: "sendbuf is", ... for messages).
 * RING_OK with op->mem_device and op->device set when the device path takes the call;
 * otherwise RING_ERR_UNSUPPORTED (or RING_ERR_INVALID_ARG) with the reason, and nothing runs.
 */
ring_result_t ring__cuda_accept_op(ring_comm_t *comm, ring__opdesc_t *op, int send_dev, int recv_dev,
                                   const char *which);

/* Run an accepted call (op->mem_device) on the calling thread; ring__run_op's device branch. */
ring_result_t ring__cuda_run_op(ring_comm_t *comm, const ring__opdesc_t *op);
/* How many times a staged ring's pinned and device slots were (re)allocated in this process:
 * for the test that communicators used in turn share them instead. */
unsigned long ring__cuda_stage_ring_allocs(void);

/*
 * Make `dev` the calling thread's current device for library work; ..._leave puts the
 * previous one back. A thread without a context (the progress thread, or a caller that never
 * used CUDA) is left on dev: "restoring" device 0 there would create a context on a GPU the
 * process may not use (cudaSetDevice initialises the context since CUDA 12).
 */
typedef struct ring__cuda_devscope {
    int dev, prev, restore;
} ring__cuda_devscope_t;
ring_result_t ring__cuda_device_enter(ring_comm_t *comm, int dev, ring__cuda_devscope_t *s);
void ring__cuda_device_leave(const ring__cuda_devscope_t *s);

/* The error of a wait for the GPU (the calling thread's device, op->device) that reached
 * RING_TIMEOUT_MS after waited_ns: the same text on the staged and the direct path. */
ring_result_t ring__cuda_gpu_timeout(ring_comm_t *comm, const ring__opdesc_t *op, int64_t waited_ns);

/* ring_comm_destroy, once the connections are closed: free the staging sets of failed calls
 * (not those whose GPU work, which timed out, has still not finished: ring__cuda_leave). */
void ring__cuda_free_dead(ring_comm_t *comm);
/* ring_comm_destroy: 1 while the GPU work of a call of comm that timed out (gpu_timeout in
 * coll.c) has not finished: memory it copies into or reads must not be freed (CUDA IPC
 * slots, GPUDirect slots). */
int ring__cuda_dead_busy(ring_comm_t *comm);
/* Never free p, and keep it reachable: memory such GPU work may still use. */
void ring__cuda_leave(void *p);

#endif
