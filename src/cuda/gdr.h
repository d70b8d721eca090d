/*
 * GPUDirect RDMA for the device engine (docs/cuda.md, "GPUDirect RDMA"): device memory the
 * verbs HCA reads and writes itself, so that device buffers cross a verbs link without a
 * copy through host memory. One set per communicator, made by its first ring collective with
 * device buffers and a verbs neighbour, on that call's device: `depth` send slots and `depth`
 * receive slots of one chunk each, registered with the communicator's verbs context.
 */
#ifndef RING_CUDA_GDR_H
#define RING_CUDA_GDR_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

typedef struct ring__gdr {
    int device;
    size_t slot;                  /* bytes per slot */
    unsigned char *sbuf, *rbuf;   /* device memory: send slots, receive slots (`depth` each) */
    void *smh, *rmh;              /* their verbs registrations (rdma.c) */
    uint64_t ntx, nrx;            /* messages moved this way (tests) */
} ring__gdr_t;

/*
 * The communicator's GPUDirect slots for a call on `device` whose ring has a verbs link, set
 * up on first use: *g NULL where GPUDirect RDMA is off (RING_IB_GDR=0), not available
 * (logged once, with the reason) or bound to another device; then the call stages through
 * pinned host memory. An error only with RING_IB_GDR=1 and no GPUDirect RDMA, or for out of
 * memory.
 */
ring_result_t ring__gdr_slots(ring_comm_t *comm, int device, size_t slot, int depth, ring__gdr_t **g);
/* Messages sent and received by GPUDirect RDMA so far (tests: cuda_coll_check --expect-gdr). */
void ring__cuda_gdr_counts(ring_comm_t *comm, uint64_t *tx, uint64_t *rx);
/* ring_comm_destroy, after the network is gone (the registrations went with the verbs
 * context): free the device memory. */
void ring__cuda_gdr_fini(ring_comm_t *comm, int gpu_busy);

#endif
