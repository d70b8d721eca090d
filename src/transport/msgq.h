/*
 * What the slot transports (shared memory, verbs) share: the ordered queue of messages posted on
 * one connection, with pooled requests; the check of a piece's header against the receive at
 * the head of the queue; and the non-blocking socket I/O of their upgrade handshakes and
 * liveness channel. The slots themselves differ (a mapped segment, registered memory written by
 * the HCA), the message rules do not: the n-th send is matched by the n-th receive, lengths must
 * be equal, a message of L bytes travels in max(1, ceil(L / slot)) pieces in order.
 */
#ifndef RING_MSGQ_H
#define RING_MSGQ_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "transport.h"

typedef struct ring__mq_req {
    void *conn;       /* the transport's connection */
    char *buf;        /* NULL: a zero-copy receive */
    size_t len, done; /* bytes of the message, bytes moved so far */
    uint32_t seq;     /* message number on the connection */
    int zc;           /* zero-copy receive: the data stays in slot `slot` until released */
    int moved;        /* the caller may reuse buf (test() reports done) */
    int first;        /* no piece moved yet (a 0-byte message still takes one) */
    int direct;       /* transport-specific (verbs: the piece went straight into buf) */
    void *mh;         /* transport-specific (verbs: buf is registered device memory, never touched by the CPU) */
    uint64_t slot;
    struct ring__mq_req *next, *next_free, *next_all;
} ring__mq_req_t;

typedef struct ring__mq {
    uint32_t seq;                /* messages posted */
    ring__mq_req_t *qh, *qt;     /* posted, not yet fully moved, in order */
    ring__mq_req_t *free_reqs, *all_reqs;
} ring__mq_t;

/* Queue a message; NULL when out of memory. */
ring__mq_req_t *ring__mq_post(ring__mq_t *q, void *conn, void *buf, size_t len, int is_send);
/* The head moved completely: take it off the queue. */
void ring__mq_pop(ring__mq_t *q);
/* test(): *done once moved; a moved request that is not zero-copy goes back to the pool. */
int ring__mq_test(ring__mq_t *q, ring__mq_req_t *r);
/* Back to the pool (a released zero-copy receive). */
void ring__mq_recycle(ring__mq_t *q, ring__mq_req_t *r);
void ring__mq_free(ring__mq_t *q);

/*
 * A piece's header (message number, message length, offset) against r, the receive at the
 * head. RING_OK, or the error set on comm: a wrong number or offset is a protocol error, a
 * different length RING_ERR_MISMATCH (ranks disagree on the call), both naming the peer `desc`.
 */
ring_result_t ring__mq_check_piece(ring_comm_t *comm, const char *tp, const char *desc, const ring__mq_req_t *r,
                                   uint32_t seq, uint64_t msg_len, uint64_t off);

/*
 * The diag clause (transport.h) of a slot transport's connection: what is still posted on it,
 * then what the slots say, e.g. "shared memory to rank 2: 3.0 MiB of 2 messages still to send
 * (message 5 first); all 8 slots hold pieces rank 2 has not taken: that rank does not read
 * (...)". in_use: the sender's slots written and not yet freed by the receiver. more: the
 * transport's own clause (the verbs queue pairs), or NULL. "" where nothing is posted and
 * more is empty.
 */
size_t ring__mq_diag_say(char *out, size_t len, const char *tp, int is_send, int peer, const ring__mq_t *q,
                         uint64_t in_use, uint32_t nslots, const char *more);

/* Move msg[*io, len) on a non-blocking socket. 1: all moved, 0: not yet, -1: error (errno;
 * ECONNRESET for an orderly close). */
int ring__mq_io(int fd, unsigned char *msg, size_t len, size_t *io, int is_write);
/* Read and drop what the peer wrote (doorbells). 1 if the peer closed the socket. */
int ring__mq_drain(int fd);

/* listen/connect of a transport whose connections are upgrades of TCP ones (never called;
 * an internal error if they are). ctx must start with its ring_comm_t pointer. */
ring_result_t ring__mq_no_listen(void *ctx, ring__tp_addr_t *addr, void **l);
ring_result_t ring__mq_no_connect(void *ctx, const ring__tp_addr_t *addr, int peer, void **s);

#endif
