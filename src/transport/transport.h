/*
 * The transport interface: one table of function pointers per transport (TCP now; shared
 * memory and RDMA verbs later). The ring engine sees only this table, so a new transport
 * needs no change in the collectives.
 *
 * Model (close to NCCL's net plugin API):
 *  - Connections are one-way: a send connection to one peer, a receive connection from one
 *    peer. A rank's ring uses one of each (to its right, from its left).
 *  - Messages, not streams: the n-th isend on a send connection is matched by the n-th irecv
 *    on the peer's receive connection, and the two lengths must be equal (a difference is a
 *    protocol error, reported with both lengths, never a silent truncation).
 *  - Nothing blocks. connect/accept return RING_OK with the out-pointer still NULL while the
 *    connection is not ready; call them again. isend/irecv only queue work; progress() moves
 *    bytes; test() reports completion. When nothing moves, the engine sleeps in poll() on the
 *    descriptors from pollfds() (plus its abort eventfd), so idle ranks use no CPU.
 *  - Buffers belong to the transport from isend/irecv until test() reports done.
 *  - Errors are returned as ring_result_t with the detail already written to the
 *    communicator (peer rank and address included); a failed connection stays failed.
 */
#ifndef RING_TRANSPORT_H
#define RING_TRANSPORT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define RING__TP_ADDR_MAX 128

/* What a rank publishes through the bootstrap so that peers can connect to it. */
typedef struct ring__tp_addr {
    uint32_t len;
    uint8_t data[RING__TP_ADDR_MAX];
} ring__tp_addr_t;

typedef struct ring__transport {
    const char *name;

    /* Per-communicator state. init may read comm->params. fini is safe after a failed init. */
    ring_result_t (*init)(ring_comm_t *comm, void **ctx);
    void (*fini)(void *ctx);

    /* Open a listening endpoint and describe it in *addr. Does not block. */
    ring_result_t (*listen)(void *ctx, ring__tp_addr_t *addr, void **lcomm);
    void (*close_listen)(void *lcomm);

    /*
     * Connect to `peer`'s listener (send direction). Never blocks: *scomm stays NULL until the
     * connection is established; call again. Every connection presents the job secret.
     */
    ring_result_t (*connect)(void *ctx, const ring__tp_addr_t *addr, int peer, void **scomm);
    /*
     * Accept the receive connection from `peer`. Never blocks: *rcomm stays NULL until it is
     * established; call again. Connections that do not authenticate as `peer` of this job are
     * closed and logged, without failing the call.
     */
    ring_result_t (*accept)(void *lcomm, int peer, void **rcomm);
    /* Descriptors to poll while connect/accept are pending (may return 0). */
    int (*listen_pollfds)(void *lcomm, struct pollfd *fds, int max);

    /* Register memory for zero-copy use; *mh may be NULL where registration is not needed.
     * Optional (NULL): the transport needs no registration. */
    ring_result_t (*reg_mem)(void *ctx, void *buf, size_t len, void **mh);
    void (*dereg_mem)(void *ctx, void *mh);

    /*
     * Queue a message. *req is NULL if the transport cannot take more right now (call again
     * after progress). len may be 0. buf must stay valid and unchanged (send) or untouched
     * (receive) until test() reports done.
     */
    ring_result_t (*isend)(void *scomm, const void *buf, size_t len, void *mh, void **req);
    ring_result_t (*irecv)(void *rcomm, void *buf, size_t len, void *mh, void **req);

    /* Move as many bytes as possible without blocking. *moved is set non-zero if anything
     * moved (the engine's no-progress timeout is measured with it). */
    ring_result_t (*progress)(void *conn, int *moved);
    /* Completion check; frees req when it reports done. Does not move data. */
    ring_result_t (*test)(void *req, int *done);
    /* Descriptors to poll when progress() moved nothing. Returns how many were written. */
    int (*pollfds)(void *conn, struct pollfd *fds, int max);
    /* Called when poll() reported a hang-up or error on one of conn's descriptors: return an
     * error if the connection is dead, RING_OK if it is merely readable/writable. */
    ring_result_t (*check)(void *conn);

    /* Close a send or receive connection; pending requests are dropped. Safe on NULL. */
    void (*close)(void *conn);
} ring__transport_t;

extern const ring__transport_t ring__tcp_transport;

/*
 * The TCP transport's wire checks, pure functions so that tests and fuzzers can drive them.
 * hs_check: a 40-byte connection handshake; NULL if it may be accepted (then *rank and *idx
 * are the sender's rank and socket index, both in range), else the reason to drop it.
 * hdr_check: a 16-byte message header against the expected sequence number and length;
 * 0 good, 1 bad magic, 2 wrong sequence, 3 wrong length.
 */
#define RING__TCP_HS_LEN 40
#define RING__TCP_HDR_LEN 16
const char *ring__tcp_hs_check(const unsigned char *h, const uint8_t secret[16], uint64_t nonce, int nsocks,
                               int nranks, int myrank, uint32_t *rank, uint32_t *idx);
int ring__tcp_hdr_check(const unsigned char *hdr, uint32_t want_seq, size_t want_len, uint32_t *seq, uint64_t *len);

#endif
