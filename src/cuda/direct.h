/*
 * Direct collectives over CUDA IPC for communicators whose ranks all share one host
 * (docs/cuda.md, "Direct collectives on one host"); direct.c says how they work.
 */
#ifndef RING_CUDA_DIRECT_H
#define RING_CUDA_DIRECT_H

#include <stdint.h>

#include "internal.h"

struct CUstream_st; /* cudaStream_t */

/* Values of RING_CUDA_IPC (params.cuda_ipc). */
enum {
    RING__CUDA_IPC_AUTO = -1, /* direct where the whole communicator is on one host */
    RING__CUDA_IPC_OFF = 0,   /* neither: device buffers are staged through host memory */
    RING__CUDA_IPC_ON = 1,    /* direct, and the ring's CUDA IPC links elsewhere (ipc.c: every rank promises device buffers) */
    RING__CUDA_IPC_RING = 2,  /* the ring's CUDA IPC links only */
};
/* Values of RING_CUDA_DIRECT_WORK (params.cuda_direct_work). */
enum {
    RING__DIRECT_WORK_AUTO = -1, /* one where every rank's buffers are on one GPU, else each */
    RING__DIRECT_WORK_EACH = 0,  /* every rank queues the work of its block, on its own GPU */
    RING__DIRECT_WORK_ONE = 1,   /* rank 0 queues the whole call's work; the others queue nothing */
};
static inline int ring__cuda_ipc_links(int mode) { return mode == RING__CUDA_IPC_ON || mode == RING__CUDA_IPC_RING; }
static inline int ring__cuda_ipc_direct(int mode) { return mode == RING__CUDA_IPC_AUTO || mode == RING__CUDA_IPC_ON; }

/* Init, every rank, once the rank table and the ring are known: make (rank 0) or open the
 * shared page when every rank is on this host and offers the path (RING__PEER_CUDA_DIRECT);
 * otherwise nothing. A page that cannot be made or opened fails init. */
ring_result_t ring__direct_setup(ring_comm_t *comm);
/* ring_comm_destroy: unmap peers' buffers and the page (rank 0 removes its file). gpu_busy
 * (ring__cuda_dead_busy): the GPU has not finished a timed-out call's work; where a direct
 * call timed out, that work may use the mappings: they stay mapped. */
void ring__direct_fini(ring_comm_t *comm, int gpu_busy);

/* A collective this rank runs on the host path: its record, so that ranks with device
 * buffers know this call is not direct. Waits only while a rank is HIST calls behind
 * (ring__callrec_room); nothing when there is no page. */
ring_result_t ring__direct_note(ring_comm_t *comm, const ring__opdesc_t *op);
/* After every call, whatever its result: this rank reads no record of op->seq any more. */
void ring__direct_done(ring_comm_t *comm, const ring__opdesc_t *op);

/*
 * A device-buffer collective (op->mem_device, the calling thread on op->device, stream: the
 * call's staging stream). *ran = 1: the direct path ran it (rc is its result); *ran = 0: it
 * did not apply on some rank, the call goes the staged way (every rank decides the same).
 * *stuck = 1: work queued on stream did not finish within RING_TIMEOUT_MS (the call failed
 * with RING_ERR_TIMEOUT, or had failed before): the stream is not to be waited for again.
 */
ring_result_t ring__direct_run(ring_comm_t *comm, const ring__opdesc_t *op, struct CUstream_st *stream, int *ran,
                               int *stuck);

/* Tests: calls this communicator ran directly, and how many of them rank 0 alone worked. */
uint64_t ring__cuda_direct_count(ring_comm_t *comm);
uint64_t ring__cuda_direct_one_count(ring_comm_t *comm);

#endif
