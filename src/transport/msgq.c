/* The message queue and socket helpers of the slot transports (msgq.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "msgq.h"

ring__mq_req_t *ring__mq_post(ring__mq_t *q, void *conn, void *buf, size_t len, int is_send)
{
    ring__mq_req_t *r = q->free_reqs;
    if (r) {
        q->free_reqs = r->next_free;
    } else {
        if (!(r = calloc(1, sizeof *r))) return NULL;
        r->next_all = q->all_reqs;
        q->all_reqs = r;
    }
    r->conn = conn;
    r->buf = buf;
    r->len = len;
    r->done = 0;
    r->zc = !is_send && !buf;
    r->moved = r->direct = 0;
    r->mh = NULL;
    r->first = 1;
    r->seq = q->seq++;
    r->next = NULL;
    if (q->qt) q->qt->next = r;
    else q->qh = r;
    q->qt = r;
    return r;
}

void ring__mq_pop(ring__mq_t *q)
{
    q->qh = q->qh->next;
    if (!q->qh) q->qt = NULL;
}

void ring__mq_recycle(ring__mq_t *q, ring__mq_req_t *r)
{
    r->next_free = q->free_reqs;
    q->free_reqs = r;
}

int ring__mq_test(ring__mq_t *q, ring__mq_req_t *r)
{
    if (!r->moved) return 0;
    if (!r->zc) ring__mq_recycle(q, r);
    return 1;
}

void ring__mq_free(ring__mq_t *q)
{
    while (q->all_reqs) {
        ring__mq_req_t *n = q->all_reqs->next_all;
        free(q->all_reqs);
        q->all_reqs = n;
    }
    q->qh = q->qt = q->free_reqs = NULL;
}

ring_result_t ring__mq_check_piece(ring_comm_t *comm, const char *tp, const char *desc, const ring__mq_req_t *r,
                                   uint32_t seq, uint64_t msg_len, uint64_t off)
{
    if (seq != r->seq)
        return ring__seterr(comm, RING_ERR_PROTOCOL, "%s: message %u from %s arrived while %u was expected", tp, seq, desc,
                            r->seq);
    if (msg_len != r->len)
        return ring__seterr(comm, RING_ERR_MISMATCH,
                            "%s: message %u from %s is %llu bytes, this rank expected %zu "
                            "(ranks disagree on count, dtype or collective)",
                            tp, r->seq, desc, (unsigned long long)msg_len, r->len);
    if (off != r->done)
        return ring__seterr(comm, RING_ERR_PROTOCOL, "%s: message %u from %s: piece at %llu, expected %zu", tp, r->seq, desc,
                            (unsigned long long)off, r->done);
    return RING_OK;
}

int ring__mq_io(int fd, unsigned char *msg, size_t len, size_t *io, int is_write)
{
    while (*io < len) {
        ssize_t n = is_write ? send(fd, msg + *io, len - *io, MSG_NOSIGNAL | MSG_DONTWAIT)
                             : recv(fd, msg + *io, len - *io, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n <= 0) {
            if (n == 0) errno = ECONNRESET;
            return -1;
        }
        *io += (size_t)n;
    }
    return 1;
}

int ring__mq_drain(int fd)
{
    char b[64];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

ring_result_t ring__mq_no_listen(void *ctx, ring__tp_addr_t *addr, void **l)
{
    (void)addr;
    (void)l;
    return ring__seterr(*(ring_comm_t **)ctx, RING_ERR_INTERNAL, "connections of this transport are upgrades of TCP ones");
}

ring_result_t ring__mq_no_connect(void *ctx, const ring__tp_addr_t *addr, int peer, void **s)
{
    (void)addr;
    (void)peer;
    (void)s;
    return ring__seterr(*(ring_comm_t **)ctx, RING_ERR_INTERNAL, "connections of this transport are upgrades of TCP ones");
}

size_t ring__mq_diag_say(char *out, size_t len, const char *tp, int is_send, int peer, const ring__mq_t *q,
                         uint64_t in_use, uint32_t nslots, const char *more)
{
    size_t o = 0;
    if (!len) return 0;
    out[0] = '\0';
    uint64_t bytes = 0, n = 0;
    for (const ring__mq_req_t *r = q->qh; r; r = r->next, n++) bytes += r->len - r->done;
    if (!is_send) in_use = 0;
    if (!n && !in_use && !(more && *more)) return 0;
#define PUT(...) ring__diag_put(out, len, &o, __VA_ARGS__)
    PUT("%s %s rank %d:", tp, is_send ? "to" : "from", peer);
    const char *sep = " ";
    if (n) {
        char b[32];
        ring__diag_bytes(b, sizeof b, bytes);
        PUT(" %s of %llu message%s still %s (message %u first)", b, (unsigned long long)n, n == 1 ? "" : "s",
            is_send ? "to send" : "to come", (unsigned)q->qh->seq);
        sep = "; ";
    }
    /* Pieces written and not taken for the whole timeout: the receiver is not reading, even
     * where this side has nothing more to send. */
    if (in_use) {
        if (in_use >= nslots) PUT("%sall %u slots hold pieces", sep, nslots);
        else PUT("%s%llu of %u slots hold pieces", sep, (unsigned long long)in_use, nslots);
        PUT(" rank %d has not taken: that rank does not read (stopped, busy outside ringcomm, in another call, "
            "or waiting for another rank first)", peer);
        sep = "; ";
    } else if (n && is_send) {
        PUT("%sno slot in use", sep);
        sep = "; ";
    } else if (n) {
        PUT("%snothing more has arrived: rank %d sent nothing", sep, peer);
        sep = "; ";
    }
    if (more && *more) PUT("%s%s", sep, more);
#undef PUT
    return o;
}
