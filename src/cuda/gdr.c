/*
 * GPUDirect RDMA slots (gdr.h). How a device buffer crosses a verbs link with them (coll.c's
 * staged_engine and rdma.c's read-in-place path):
 *   sender:   device-to-device copy of the chunk into send slot i (on the GPU), then isend
 *             from the slot with its registration: rdma.c writes only the 64-byte header
 *             (address, rkey) into the receiver's verbs slot and never touches the bytes;
 *   receiver: its irecv names receive slot i and that registration; when the header arrives
 *             the HCA RDMA READs the chunk from the sender's GPU straight into this GPU, and
 *             the kernel reduces out of the slot (all-gather and broadcast: a device copy).
 * Bytes on the wire are the staged path's (the chunk, plus 64 bytes of header per message),
 * but PCIe carries each byte once per side (NIC <-> GPU) instead of twice (GPU -> host ->
 * NIC), and no CPU copy or pinned bounce buffer is involved.
 *
 * Agreement: the receiver can post into device memory only if every message of the call
 * comes by the read path, which only a sender with device buffers and slots of its own can
 * promise. So a sender sets RING__DESC_GDR in its collective descriptor, which precedes the
 * data; the receiver sees it before it posts the call's first receive. A sender with host
 * buffers, or without GPUDirect, sends as before, and a receiver without GPUDirect takes the
 * read path into host memory as it does for registered host buffers: every mix works.
 *
 * Registration: ibv_reg_dmabuf_mr on a dma-buf of the slots (cuMemGetHandleForAddressRange),
 * the upstream way; else ibv_reg_mr on the device pointer, which works where the GPU driver's
 * peer-memory module (nvidia-peermem) is loaded; else no GPUDirect. On the emulated GPU of the
 * tests the slots are host memory and ibv_reg_mr registers them as such: the data path above
 * then runs for real over verbs (soft-RoCE), only the dma-buf call itself is left untested.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/coll.h"
#include "cuda/gdr.h"
#include "cuda/ring_cuda.h"
#include "log.h"
#include "rdma.h"

#define GDR_ALIGN ((size_t)2 << 20) /* dma-buf export wants page-aligned ranges; cudaMalloc aligns 2 MiB ones */

/* The comm's state: made once (chunk and depth are fixed per communicator, so the slots
 * always fit), off for good after a failure (logged then). */
typedef struct gdr_state {
    ring__gdr_t g;
    int on; /* 1 set up, -1 not available */
} gdr_state;

/* The slots' device memory, freed on their own device (the caller's may be another). */
static void slots_free(gdr_state *s)
{
    if (!s->g.sbuf && !s->g.rbuf) return;
    ring__cuda_devscope_t ds;
    (void)ring__cuda_device_enter(NULL, s->g.device, &ds);
    ring__cuda_dev_free(s->g.sbuf);
    ring__cuda_dev_free(s->g.rbuf);
    ring__cuda_device_leave(&ds);
    s->g.sbuf = s->g.rbuf = NULL;
}

#if RING_HAVE_RDMA
/* Register [p, p + bytes) of device memory: dma-buf first, then the peer-memory path. */
static ring_result_t reg_one(ring_comm_t *comm, void *p, size_t bytes, void **mh, const char **how, char *why, size_t len)
{
    int fd = -1;
    char dwhy[256] = "";
    ring_result_t rc = ring__cuda_dmabuf_fd(NULL, p, bytes, &fd);
    if (rc != RING_OK) snprintf(dwhy, sizeof dwhy, "%s", ring_comm_last_error(NULL));
    if (fd >= 0) {
        rc = ring__rdma_reg_device(comm->rdma_ctx, p, bytes, fd, mh, dwhy, sizeof dwhy);
        close(fd); /* the registration holds its own reference to the dma-buf */
        if (rc == RING_OK) {
            *how = "ibv_reg_dmabuf_mr";
            return RING_OK;
        }
    }
    rc = ring__rdma_reg_device(comm->rdma_ctx, p, bytes, -1, mh, why, len);
    if (rc == RING_OK) {
        *how = ring__cuda_emulating() ? "ibv_reg_mr (emulated GPU: host memory)" : "ibv_reg_mr (GPU peer memory)";
        return RING_OK;
    }
    size_t n = strlen(why);
    if (n < len) snprintf(why + n, len - n, "; dma-buf: %s", dwhy);
    return rc;
}
#endif

ring_result_t ring__gdr_slots(ring_comm_t *comm, int device, size_t slot, int depth, ring__gdr_t **out)
{
    gdr_state *s = comm->cuda_gdr;
    *out = NULL;
    if (comm->params.ib_gdr == 0 || !comm->rdma_ctx) return RING_OK;
    if (s && s->on < 0)
        return comm->params.ib_gdr == 1
                   ? ring__seterr(comm, RING_ERR_UNSUPPORTED, "RING_IB_GDR=1, but GPUDirect RDMA is not available (see the log)")
                   : RING_OK;
    if (s && s->on > 0) {
        if (s->g.device == device) *out = &s->g;
        else
            RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank,
                     "GPUDirect RDMA is set up on device %d: this call on device %d is staged through host memory", s->g.device, device);
        return RING_OK;
    }
#if RING_HAVE_RDMA
    char why[512] = "";
    const char *how = "";
    size_t bytes = (slot * (size_t)depth + GDR_ALIGN - 1) & ~(GDR_ALIGN - 1);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return ring__seterr(comm, RING_ERR_NOMEM, "GPUDirect RDMA: out of memory");
        comm->cuda_gdr = s;
    }
    s->g.device = device;
    ring_result_t rc = ring__cuda_dev_alloc(NULL, bytes, (void **)&s->g.sbuf);
    if (rc == RING_OK) rc = ring__cuda_dev_alloc(NULL, bytes, (void **)&s->g.rbuf);
    if (rc != RING_OK) snprintf(why, sizeof why, "%s", ring_comm_last_error(NULL));
    if (rc == RING_OK) rc = reg_one(comm, s->g.sbuf, bytes, &s->g.smh, &how, why, sizeof why);
    if (rc == RING_OK) rc = reg_one(comm, s->g.rbuf, bytes, &s->g.rmh, &how, why, sizeof why);
    if (rc != RING_OK) {
        if (s->g.smh) ring__rdma_transport.dereg_mem(comm->rdma_ctx, s->g.smh);
        if (s->g.rmh) ring__rdma_transport.dereg_mem(comm->rdma_ctx, s->g.rmh);
        s->g.smh = s->g.rmh = NULL;
        slots_free(s);
        s->on = -1;
        if (comm->params.ib_gdr == 1)
            return ring__seterr(comm, RING_ERR_UNSUPPORTED, "RING_IB_GDR=1, but GPUDirect RDMA is not available on %s for device %d: %s",
                                ring__rdma_dev_name(comm->rdma_ctx), device, why);
        RING_LOG(RING_LOG_INFO, RING_SUB_COLL, comm->rank,
                 "GPUDirect RDMA not available on %s for device %d (%s): device buffers over verbs are staged through "
                 "pinned host memory",
                 ring__rdma_dev_name(comm->rdma_ctx), device, why);
        return RING_OK;
    }
    s->on = 1;
    s->g.slot = slot;
    RING_LOG(RING_LOG_INFO, RING_SUB_COLL, comm->rank,
             "GPUDirect RDMA on %s for device %d (%s): device buffers cross verbs links between GPU memory and the NIC, "
             "%d x %zu-byte slots each way",
             ring__rdma_dev_name(comm->rdma_ctx), device, how, depth, slot);
    *out = &s->g;
    return RING_OK;
#else
    (void)device;
    (void)slot;
    (void)depth;
    return RING_OK;
#endif
}

void ring__cuda_gdr_counts(ring_comm_t *comm, uint64_t *tx, uint64_t *rx)
{
    const gdr_state *s = comm->cuda_gdr;
    *tx = s ? s->g.ntx : 0;
    *rx = s ? s->g.nrx : 0;
}

void ring__cuda_gdr_fini(ring_comm_t *comm, int gpu_busy)
{
    gdr_state *s = comm->cuda_gdr;
    if (!s) return;
    comm->cuda_gdr = NULL;
    if (gpu_busy && (s->g.sbuf || s->g.rbuf)) {
        /* Copies of a call that timed out may still write the send slots and kernels read
         * the receive slots; cudaFree would wait for them, or free memory under them. */
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                 "ring_comm_destroy: the GPUDirect slots of device %d are left allocated: the GPU still has not "
                 "run the work of a call that timed out",
                 s->g.device);
        ring__cuda_leave(s);
        return;
    }
    slots_free(s);
    free(s);
}
