/*
 * Ring reduce-scatter: rank r ends with the reduction of segment r (recvcount elements) of
 * every rank's sendbuf. Below, r is the ring position (comm->pos) and "segment x" is the
 * segment of the rank at position x (comm->order[x]), so each rank still ends with its own.
 *
 * Steps per round of chunks (partition.h), N-1 in all:
 *   step 0:        send sendbuf[seg r-1] to the right
 *   step k=1..N-2: receive the partial sum of segment r-k-1 from the left into a scratch
 *                  slot, add sendbuf[seg r-k-1] in place in the slot, and forward the slot
 *                  (step k+1 sends it; the slot is freed when that send completes)
 *   last step:     the received partial sum of segment r plus sendbuf[seg r] goes to recvbuf
 *                  (AVG divides here, once)
 * Bytes on the wire per rank: (N-1)/N of the full buffer each way. Intermediate sums live
 * only in the bounded scratch slots, so recvbuf (one segment) is written exactly once, which
 * is also what makes in-place (recvbuf inside sendbuf at segment r) safe.
 */
#include "engine.h"

static void rs_send(ring__sched_t *s, size_t i, const void **buf, size_t *len, size_t *dep, size_t *slot_of)
{
    size_t j, off, n;
    int k, c, r = s->comm->pos, nr = s->comm->nranks;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, s->comm->order[ring__mod(r - k - 1, nr)], c, &off, &n);
    *len = n * s->esize;
    if (k == 0) {
        *buf = (const char *)s->op->sendbuf + off * s->esize;
        return;
    }
    *dep = ring__layout_msg_index(&s->layout, s->nsteps, j, k - 1, c);
    *slot_of = *dep;
}

static void rs_recv(ring__sched_t *s, size_t i, void **buf, size_t *len, size_t *guard, int *keep)
{
    size_t j, off, n;
    int k, c, r = s->comm->pos, nr = s->comm->nranks;
    (void)guard;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, s->comm->order[ring__mod(r - k - 2, nr)], c, &off, &n);
    *len = n * s->esize;
    *buf = NULL;
    *keep = k < nr - 2;
}

static void rs_done(ring__sched_t *s, size_t i, void *slot)
{
    size_t j, off, n;
    int k, c, r = s->comm->pos, nr = s->comm->nranks;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    int seg = s->comm->order[ring__mod(r - k - 2, nr)];
    ring__layout_chunk(&s->layout, j, seg, c, &off, &n);
    const char *own = (const char *)s->op->sendbuf + off * s->esize;
    if (k < nr - 2) {
        ring__sched_reduce(s, slot, slot, own, n, 0);
    } else {
        char *dst = (char *)s->op->recvbuf + (off - ring__layout_seg_off(&s->layout, seg)) * s->esize;
        ring__sched_reduce(s, dst, slot, own, n, 1);
    }
}

void ring__reduce_scatter_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring__sched_init(s, comm, op, comm->nranks, 0, comm->nranks - 1, 0);
    s->send_msg = rs_send;
    s->recv_msg = rs_recv;
    s->recv_done = rs_done;
}
