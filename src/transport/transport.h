/*
 * The transport interface: one table of function pointers per transport (TCP, shared memory,
 * RDMA verbs). The ring engine sees only this table, so a new transport needs no change
 * in the collectives. Every connection object starts with a ring__conn_t naming its table, so
 * one rank can talk shared memory to its left neighbour and TCP to its right.
 *
 * Model (close to NCCL's net plugin API):
 *  - Connections are one-way: a send connection to one peer, a receive connection from one
 *    peer. A rank's ring uses one of each (to its right, from its left). A transport may back
 *    the two directions of a pair with the same sockets (TCP does: RING_TCP_DUPLEX); each
 *    connection object still moves one direction and is closed on its own.
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
 *  - Every connection starts as TCP (authenticated with the job secret). A transport with an
 *    upgrade() op then builds its own connection on top of an established TCP one, whose
 *    socket it keeps as a doorbell and liveness channel (shared memory does this).
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

struct ring__transport;

/* The first member of every connection object: which transport drives it. */
typedef struct ring__conn {
    const struct ring__transport *tp;
} ring__conn_t;

/* The collective descriptor every algorithm sends first (its format: engine.h). A transport
 * knows its length only to hand it over on a length mismatch (mismatch_prefix below). */
#define RING__DESC_LEN 40

typedef struct ring__transport {
    const char *name;
    /*
     * A receive whose first message has another length than was posted still fails with
     * RING_ERR_MISMATCH, but first gets up to this many leading bytes of what came (0: none).
     * RING__DESC_LEN or more lets the two sides' first messages differ in length and still
     * compare descriptors: recursive doubling then packs small data into the descriptor's
     * message (rd.c).
     */
    size_t mismatch_prefix;

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
    /* Descriptors to poll when progress() moved nothing. Returns how many were written, or -1
     * if the connection can move bytes now (a transport that must arm a wake-up before
     * sleeping found that its peer acted meanwhile): then the caller does not sleep. */
    int (*pollfds)(void *conn, struct pollfd *fds, int max);
    /* Called when poll() reported a hang-up or error on one of conn's descriptors: return an
     * error if the connection is dead, RING_OK if it is merely readable/writable. */
    ring_result_t (*check)(void *conn);

    /* Close a send or receive connection; pending requests are dropped. Safe on NULL. */
    void (*close)(void *conn);

    /*
     * Optional zero-copy receive (NULL where the transport has none). zc_max: the largest
     * message irecv accepts with buf == NULL on this receive connection (0: none). Such a
     * receive lands in transport memory: once test() reports it done (test does not free it),
     * zc_data gives the bytes, valid until zc_release frees the request and the memory.
     * Zero-copy receives on a connection are released in the order they were posted.
     */
    size_t (*zc_max)(void *rcomm);
    const void *(*zc_data)(void *req);
    void (*zc_release)(void *req);

    /*
     * Optional: build a connection of this transport on `base`, an established TCP connection
     * with `peer` (is_send: the direction of base). Never blocks: *conn stays NULL until both
     * sides agreed; call again. On success *conn is the new connection and base was consumed
     * (closed); *conn == base means the peer declined or the transport is unavailable here
     * and the two sides keep TCP. On error base is left to the caller.
     */
    ring_result_t (*upgrade)(void *ctx, void *base, int peer, int is_send, void **conn);
    /* Descriptors to poll while upgrades are pending. */
    int (*upgrade_pollfds)(void *ctx, struct pollfd *fds, int max);

    /*
     * Optional: for a wait that timed out on conn, one clause on where its bytes stand and
     * why they do not move, as far as this side can see ("TCP to rank 2: 425.5 KiB not sent
     * by the kernel; socket 1 of 2: paced at 11.0 kbit/s by bbr ..."), or "" where nothing is
     * held up. Never blocks, never fails, changes nothing.
     */
    void (*diag)(void *conn, char *out, size_t len);
} ring__transport_t;

/* The diag clauses of conns, each after "; ", appended to text (of size len). */
void ring__conns_diag(void *const *conns, int nconns, char *text, size_t len);
/* A byte count as diag clauses write it: "56 B", "425.5 KiB", "2.0 MiB". */
void ring__diag_bytes(char *out, size_t len, uint64_t v);
/* How much of text to keep within max bytes: all of it if it fits, else up to the last "; "
 * (where diag clauses start) within max, so that what follows a cut copy (a relay's hint)
 * does not follow half a clause; max where there is none. */
size_t ring__diag_cut(const char *text, size_t max);
/* Appends to out (of size len) at *o, which grows by what was written; never past len - 1. */
void ring__diag_put(char *out, size_t len, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static inline const ring__transport_t *ring__tp_of(void *conn) { return ((ring__conn_t *)conn)->tp; }

extern const ring__transport_t ring__tcp_transport;
extern const ring__transport_t ring__shm_transport;

/* The TCP connection's first socket (the shared-memory upgrade talks on it), and taking it
 * over: the connection no longer closes it. */
int ring__tcp_conn_fd(void *conn);
int ring__tcp_take_fd(void *conn);
/* RING_TRANSPORT=shm and some pair fell back to TCP: the error (with the first reason), to
 * be raised once the handshakes in progress are over; RING_OK otherwise. */
ring_result_t ring__shm_forced_result(void *shm_ctx);
/* Remove shared-memory segments in dir left by ringcomm processes of this user that no longer
 * exist (killed between creating a segment and its peer mapping it): no process of that pid
 * here, and none holding the file (ring__shm_hold). Returns how many. */
int ring__shm_sweep(const char *dir);
/* The creator of a file in RING_SHM_DIR holds it (an open-file-description write lock on fd)
 * for as long as fd stays open: the sweep leaves it alone, whatever pid namespace or host the
 * creator runs in. */
void ring__shm_hold(int fd);

/*
 * The TCP transport's wire checks, pure functions so that tests and fuzzers can drive them.
 * hs_check: a 40-byte connection handshake; NULL if it may be accepted (then *rank and *idx
 * are the sender's rank and socket index, both in range), else the reason to drop it. The
 * sender's duplex flag (bit 24 of the version word) is the caller's to compare with what it
 * expects of that rank.
 * hdr_check: a 16-byte message header against the expected sequence number and length;
 * 0 good, 1 bad magic, 2 wrong sequence, 3 wrong length.
 */
/* The data protocol's version, in the handshake: ranks of builds that frame messages
 * differently refuse each other there. 2 since 2026-11-29: every header on socket 0. Change
 * BS_VERSION (bootstrap.c) with it, so that such ranks fail at the bootstrap, every rank
 * naming both versions, before a socket is made. */
#define RING__TCP_VERSION 2u
#define RING__TCP_HS_LEN 40
#define RING__TCP_HDR_LEN 16
const char *ring__tcp_hs_check(const unsigned char *h, const uint8_t secret[16], uint64_t nonce, int nsocks,
                               int nranks, int myrank, uint32_t *rank, uint32_t *idx);
int ring__tcp_hdr_check(const unsigned char *hdr, uint32_t want_seq, size_t want_len, uint32_t *seq, uint64_t *len);
/* Sockets per TCP bundle between this rank and peer: RING_NSOCKS where set; with auto, one
 * where the pair's bytes go through the loopback device (both data addresses loopback
 * addresses, or, on the same kernel, the peer's address is one of this rank's own: one host,
 * one network namespace), where more sockets only add syscalls and wake-ups
 * (docs/performance.md 2026-11-27 (6), (7)); RING__DEFAULT_NSOCKS otherwise. From the rank
 * table and this rank's own addresses, so both ranks of a pair agree. */
int ring__tcp_pair_nsocks(const ring_comm_t *comm, int peer);

#endif
