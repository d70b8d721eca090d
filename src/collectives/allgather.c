/*
 * Ring all-gather: recvbuf (N x sendcount elements) ends with rank s's sendbuf in segment s.
 * Below, r is the ring position (comm->pos) and "segment x" is that of the rank at position x
 * (comm->order[x]).
 *
 * Steps per round of chunks (partition.h), N-1 in all:
 *   step 0:        send own sendbuf to the right
 *   step k=1..N-2: forward segment r-k, which arrived from the left at step k-1
 *   every step:    receive segment r-k-1 from the left straight into recvbuf (zero copy)
 * The own segment is copied from sendbuf into recvbuf once (skipped in-place).
 * Bytes on the wire per rank: (N-1)/N of the gathered buffer each way.
 */
#include "engine.h"

static void ag_send(ring__sched_t *s, size_t i, const void **buf, size_t *len, size_t *dep, size_t *slot_of)
{
    size_t j, off, n;
    int k, c, r = s->comm->pos, nr = s->comm->nranks;
    (void)slot_of;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    int seg = s->comm->order[ring__mod(r - k, nr)];
    ring__layout_chunk(&s->layout, j, seg, c, &off, &n);
    *len = n * s->esize;
    if (k == 0) {
        *buf = (const char *)s->op->sendbuf + (off - ring__layout_seg_off(&s->layout, seg)) * s->esize;
        return;
    }
    *buf = (const char *)s->op->recvbuf + off * s->esize;
    *dep = ring__layout_msg_index(&s->layout, s->nsteps, j, k - 1, c);
}

static void ag_recv(ring__sched_t *s, size_t i, void **buf, size_t *len, size_t *guard, int *keep)
{
    size_t j, off, n;
    int k, c, r = s->comm->pos, nr = s->comm->nranks;
    (void)guard;
    (void)keep;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, s->comm->order[ring__mod(r - k - 1, nr)], c, &off, &n);
    *len = n * s->esize;
    *buf = (char *)s->op->recvbuf + off * s->esize;
}

static void ag_done(ring__sched_t *s, size_t i, void *slot)
{
    (void)s;
    (void)i;
    (void)slot;
}

void ring__allgather_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring__sched_init(s, comm, op, comm->nranks, 0, comm->nranks - 1, 0);
    s->send_msg = ag_send;
    s->recv_msg = ag_recv;
    s->recv_done = ag_done;
}
