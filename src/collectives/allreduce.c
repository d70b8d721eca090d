/*
 * Ring allreduce = ring reduce-scatter followed by ring all-gather (bandwidth-optimal).
 *
 * The buffer of S bytes is N balanced segments; the rank at ring position r (comm->pos) does,
 * for every round of chunks (partition.h), 2(N-1) steps:
 *   step 0:            send own segment r (from sendbuf) to the right
 *   step k=1..N-2:     receive segment r-k from the left into a scratch slot,
 *                      recvbuf[seg r-k] = slot + sendbuf[seg r-k]   (on receipt of step k-1),
 *                      send recvbuf[seg r-k] to the right
 *   last RS step N-2:  the received segment r+1 is complete: recvbuf[seg r+1] holds the final
 *                      value (AVG divides here, once, by N)
 *   AG step a=0..N-2:  send recvbuf[seg r+1-a] right; receive segment r-a from the left straight
 *                      into recvbuf (zero copy), which step a+1 forwards.
 * Bytes on the wire per rank: sent = received = 2(N-1)/N * S (+ 16 bytes per message and a
 * 40-byte descriptor). Every element's final value is computed by exactly one rank and copied
 * verbatim to the others, so all ranks hold bitwise-identical results.
 * In-place (sendbuf == recvbuf) works unchanged: each segment is read before it is written, and
 * an all-gather receive into a region waits for the reduce-scatter send that read it (guard).
 */
#include <string.h>

#include "engine.h"

/* Segment numbers follow ring positions (comm->pos), not ranks: every segment is reduced by
 * exactly one position and copied to all, whatever the order. */
static int seg_sent(const ring__sched_t *s, int k)
{
    int r = s->comm->pos, n = s->comm->nranks;
    return k <= n - 2 ? ring__mod(r - k, n) : ring__mod(r + 1 - (k - (n - 1)), n);
}

static int seg_recv(const ring__sched_t *s, int k)
{
    int r = s->comm->pos, n = s->comm->nranks;
    return k <= n - 2 ? ring__mod(r - k - 1, n) : ring__mod(r - (k - (n - 1)), n);
}

static void ar_send(ring__sched_t *s, size_t i, const void **buf, size_t *len, size_t *dep, size_t *slot_of)
{
    size_t j, off, n;
    int k, c;
    (void)slot_of;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, seg_sent(s, k), c, &off, &n);
    const char *base = k == 0 ? (const char *)s->op->sendbuf : (const char *)s->op->recvbuf;
    *buf = base + off * s->esize;
    *len = n * s->esize;
    *dep = k == 0 ? RING__NONE : ring__layout_msg_index(&s->layout, s->nsteps, j, k - 1, c);
}

static void ar_recv(ring__sched_t *s, size_t i, void **buf, size_t *len, size_t *guard, int *keep)
{
    size_t j, off, n;
    int k, c, nr = s->comm->nranks;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, seg_recv(s, k), c, &off, &n);
    *len = n * s->esize;
    *keep = 0;
    if (k <= nr - 2) {
        *buf = NULL; /* reduce-scatter: land in scratch, reduce into recvbuf */
        return;
    }
    int a = k - (nr - 1);
    *buf = (char *)s->op->recvbuf + off * s->esize;
    *guard = ring__layout_msg_index(&s->layout, s->nsteps, j, a, c);
}

static void ar_done(ring__sched_t *s, size_t i, void *slot)
{
    size_t j, off, n;
    int k, c, nr = s->comm->nranks;
    if (!slot) return;
    ring__layout_msg_coords(&s->layout, s->nsteps, i, &j, &k, &c);
    ring__layout_chunk(&s->layout, j, seg_recv(s, k), c, &off, &n);
    char *dst = (char *)s->op->recvbuf + off * s->esize;
    const char *own = (const char *)s->op->sendbuf + off * s->esize;
    ring__sched_reduce(s, dst, slot, own, n, k == nr - 2);
}

void ring__allreduce_sched(ring__sched_t *s, ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring__sched_init(s, comm, op, comm->nranks, 1, 2 * (comm->nranks - 1), 0);
    s->send_msg = ar_send;
    s->recv_msg = ar_recv;
    s->recv_done = ar_done;
}
