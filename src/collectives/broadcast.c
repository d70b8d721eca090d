/*
 * Pipelined ring broadcast from `root`.
 *
 * The buffer is cut into chunks of RING_CHUNK_BYTES. The root sends chunk c to its right;
 * every other rank receives chunk c straight into buf and, unless its right neighbour is the
 * root, forwards it at once, so chunk c+1 travels behind chunk c and the time is about
 * (N - 2 + C) chunk times for C chunks instead of (N-1) C.
 * Bytes on the wire: each rank but the last in the chain sends S, each but the root receives S.
 */
#include "engine.h"

static void bc_send(ring__sched_t *s, size_t i, const void **buf, size_t *len, size_t *dep, size_t *slot_of)
{
    size_t off, n;
    (void)slot_of;
    ring__layout_chunk(&s->layout, i / (size_t)s->layout.lanes, 0, (int)(i % (size_t)s->layout.lanes), &off, &n);
    *buf = (const char *)s->op->recvbuf + off * s->esize;
    *len = n * s->esize;
    *dep = s->comm->rank == s->op->root ? RING__NONE : i;
}

static void bc_recv(ring__sched_t *s, size_t i, void **buf, size_t *len, size_t *guard, int *keep)
{
    size_t off, n;
    (void)guard;
    (void)keep;
    ring__layout_chunk(&s->layout, i / (size_t)s->layout.lanes, 0, (int)(i % (size_t)s->layout.lanes), &off, &n);
    *buf = (char *)s->op->recvbuf + off * s->esize;
    *len = n * s->esize;
}

static void bc_done(ring__sched_t *s, size_t i, void *slot)
{
    (void)s;
    (void)i;
    (void)slot;
}

void ring__broadcast_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op)
{
    /* One segment, one step per round, one lane: message i is simply chunk i of the buffer. */
    ring__sched_init(s, comm, op, 1, 0, 1, 1);
    size_t nmsg = s->nsend;
    /* The chain runs along ring positions from the root's to the one before it. */
    int last = ring__mod(comm->pos_of[op->root] - 1, comm->nranks);
    s->nsend = comm->pos == last ? 0 : nmsg;
    s->nrecv = comm->rank == op->root ? 0 : nmsg;
    s->send_msg = bc_send;
    s->recv_msg = bc_recv;
    s->recv_done = bc_done;
}
