/*
 * TCP transport.
 *
 * A connection to one peer is a bundle of `nsocks` non-blocking sockets (RING_NSOCKS; auto: one
 * where the bytes stay in one network stack, else two, ring__tcp_pair_nsocks), one direction
 * only. Each socket opens with a 40-byte handshake from the connecting side:
 *   magic "RGDH" | version | nsocks | duplex | 128-bit job secret | sender rank | socket index | job nonce
 * and the accepting side closes anything that does not match (strangers, port scanners,
 * connections of another job) without disturbing the job.
 *
 * Duplex pairs (RING_TCP_DUPLEX, the default, for every pair that stays TCP: no shared-memory or
 * verbs upgrade can take its sockets): the send connection to a peer and the receive
 * connection from it are two views of one bundle, made by the lower rank of the pair whichever
 * of the two is asked for first. A small message on a one-way socket costs the receiver a
 * segment of its own, an ACK that Linux sends at once when a read empties the socket; where the
 * same sockets carry the answer, as between recursive-doubling partners, the ACK rides on it.
 * On the 1 Gbit/s namespace bed those ACKs were 29% of all CPU time at N = 4 (perf, 4 B).
 * The handshake's duplex flag says which kind a socket is; the higher rank answers each
 * socket of a duplex bundle with a 4-byte word, "RGDA" (taken) or "RGDN" (refused: its
 * RING_TCP_DUPLEX differs; since the rank table carries the setting and init compares it
 * first, comm.c, only a peer that skipped that check can get here), and the lower rank counts
 * the bundle as made only on "RGDA".
 *
 * On the wire, message m is a 16-byte header  magic "RGMS" | m mod 2^32 | length (u64)
 * on socket 0, and its payload cut into at most nsocks pieces (of at least 64 KiB unless the
 * whole message is shorter), piece j on socket ((s + j) mod nsocks) with s = (m mod nsocks),
 * and s = 0 for messages under 64 KiB. Both sides derive the same cut from the length, which
 * the receiver knows (lengths must match exactly; the header is checked before the message
 * completes). The header's socket does not depend on the length, so a receiver that posted
 * another length still reads the sender's header where it looks for its own, and reports the
 * difference at once.
 *
 * Congestion control (RING_TCP_CONGESTION, cc_init): chosen per socket before its handshake,
 * on the connecting socket and on the listener, whose algorithm accepted sockets inherit.
 * Backoff cap (RING_TCP_RTO_MAX_MS, rto_set): on every data socket once it is connected.
 *
 * Every socket has a FIFO of pending pieces; progress() drains each FIFO with one
 * sendmsg/recvmsg over up to 16 queued pieces, so many small messages cost one syscall, and
 * sends and receives on all sockets are driven together, so no message size can deadlock.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap.h"
#include "log.h"
#include "wire.h"
#include "net.h"
#include "param.h"
#include "tcp_diag.h"
#include "topo.h"
#include "transport.h"

#define HS_MAGIC 0x52474448u  /* "RGDH" */
#define MSG_MAGIC 0x52474d53u /* "RGMS" */
#define HS_LEN 40
#define HS_DUPLEX_SHIFT 24 /* bit of the version word: the sender made this socket for a duplex bundle */
#define ACK_MAGIC 0x52474441u  /* "RGDA": a duplex socket taken by the higher rank */
#define NAK_MAGIC 0x5247444eu  /* "RGDN": refused, RING_TCP_DUPLEX differs */
#define ACK_LEN 4
#define HDR_LEN 16
#define MIN_PIECE ((size_t)64 * 1024)
#define MAX_PENDING 64
#define HS_TIMEOUT_NS (10LL * 1000000000LL)
#define MAX_IOV 16
/* TCP_USER_TIMEOUT of a capped socket (rto_set): past RING_TIMEOUT_MS, and no shorter than
 * the kernel's give-up time without the cap (15 retransmissions from 200 ms up to 120 s). */
#define USER_TIMEOUT_SLACK_MS 10000
#define USER_TIMEOUT_MIN_MS 925000

typedef struct tcp_listen tcp_listen;
typedef struct bundle bundle;

typedef struct tcp_ctx {
    ring_comm_t *comm;
    size_t sockbuf;
    /* Congestion control for connections that stay inside this host and for the others;
     * NULL: the system's (sys_cc, which a remote socket taken from the listener gets back). */
    const char *cc_local, *cc_remote;
    char cc_name[16], sys_cc[16];
    int rto_refused; /* the kernel refused TCP_RTO_MAX_MS once (said at init): not asked again */
    struct pconn *connecting; /* connections being established, by peer */
    tcp_listen *l;            /* this rank's listener: a duplex pair's higher rank takes its sockets there */
    bundle **bundles;         /* duplex bundles, by peer; NULL until made */
    /* Sockets per pair, by peer (pair_nsocks); 0 until first asked with the rank table in.
     * Every setup step asks again, and the answer may cost a route lookup. */
    uint8_t *nsocks;
} tcp_ctx;

/* A duplex bundle: the sockets of both directions with one peer, closed with its last view. */
struct bundle {
    tcp_ctx *ctx;
    int peer;
    int refs;
    int fds[RING__MAX_NSOCKS];
};

typedef struct tcp_req tcp_req;

typedef struct op {
    char *base;
    size_t len, done;
    tcp_req *req;
    int is_hdr;
} op;

typedef struct sockq {
    int fd;
    int peer_closed; /* orderly EOF seen while nothing was pending on this socket */
    /* The peer closed after bytes no receive has asked for yet: POLLRDHUP would stay up, and
     * every poll() return at once, until they are read. The receive that takes them sees the
     * end by POLLIN, so the socket is polled without it. */
    int eof_after_data;
    op *ops;
    size_t cap, head, count;
} sockq;

typedef struct tcp_conn {
    ring__conn_t base; /* first: the transport table */
    tcp_ctx *ctx;
    bundle *bundle; /* duplex: the bundle this view shares with the other direction; else NULL */
    int is_send;
    int peer;
    int nsocks;
    sockq q[RING__MAX_NSOCKS];
    uint32_t seq;
    tcp_req *free_reqs, *all_reqs;
    ring_result_t failed;
    char desc[128];
} tcp_conn;

struct tcp_req {
    tcp_conn *c;
    int pending; /* pieces (and header) not yet fully moved */
    uint32_t seq;
    size_t len;
    unsigned char hdr[HDR_LEN];
    tcp_req *next_free, *next_all;
};

typedef struct pconn {
    int peer;
    int nsocks;
    ring__sockaddr_t addr;
    const char *cc; /* congestion control for its sockets (NULL: the system's) */
    int fds[RING__MAX_NSOCKS];
    int duplex;
    /* 0 connecting, 1 sending handshake, 2 waiting for the accept word (duplex), 3 done,
     * 4 lost (the peer reset or closed it before taking it) */
    int state[RING__MAX_NSOCKS];
    size_t hs_sent[RING__MAX_NSOCKS];
    unsigned char ack[RING__MAX_NSOCKS][ACK_LEN];
    size_t ack_got[RING__MAX_NSOCKS];
    int64_t lost_at; /* a socket was reset or closed before the peer took it (0: none was) */

    unsigned char hs[RING__MAX_NSOCKS][HS_LEN];
    int64_t retry_at[RING__MAX_NSOCKS];
    int64_t hs_hold_until; /* tests (RING_TEST_TCP_HS_HOLD_MS): the rest of each handshake waits */
    struct pconn *next;
} pconn;

typedef struct pending {
    int fd;
    unsigned char buf[HS_LEN];
    size_t got;
    int64_t deadline;
    uint64_t seq; /* accept order: the oldest goes first when the table is full */
    ring__sockaddr_t from;
} pending;

struct tcp_listen {
    tcp_ctx *ctx;
    int fd;
    ring__sockaddr_t addr;
    pending pend[MAX_PENDING];
    int npend;
    uint64_t accepted;
    /* Authenticated sockets, by sender rank and socket index, held until accept() asks for
     * that rank: peers may connect in any order and before we expect them. */
    int (*fds)[RING__MAX_NSOCKS];
    int *have;
    int nranks;
};

/*
 * RING_TCP_CONGESTION. auto: connections that stay inside this host use CUBIC, the others the
 * system's algorithm. Inside a host there is no network to share, and BBR, the default on
 * many tuned hosts, paces every socket at the rate it has measured: after a stream that
 * measured less than a burst could go, a 2-rank 1 MiB all-reduce on the 2-core VM took
 * 700-1000 us instead of 200-300 (docs/performance.md, 2026-11-26 (7)). system: every connection
 * keeps the system's; a name: every connection uses it.
 */
static void cc_init(tcp_ctx *ctx)
{
    const char *v = ctx->comm->params.tcp_cc;
    snprintf(ctx->sys_cc, sizeof ctx->sys_cc, "?");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        ring__sock_cc(fd, ctx->sys_cc, sizeof ctx->sys_cc);
        close(fd);
    }
    if (!strcmp(v, "system")) return;
    if (!strcmp(v, "auto")) {
        if (strcmp(ctx->sys_cc, "cubic") != 0) ctx->cc_local = "cubic";
        return;
    }
    snprintf(ctx->cc_name, sizeof ctx->cc_name, "%s", v);
    ctx->cc_local = ctx->cc_remote = ctx->cc_name;
}

/*
 * Why the backoff is capped (RING_TCP_RTO_MAX_MS, default 1 s). A receiver that waits for a
 * piece on one socket of a bundle leaves the next pieces in the others' buffers, so their
 * windows close often, and the sender probes a closed window on a doubling timer. The window
 * update that reopens it is a bare ACK, which TCP never sends twice: when a link goes down
 * while the receiver drains such a socket, the update is lost, and the sender learns of the
 * open window only at its next probe, with the receiver waiting for exactly those bytes. On
 * the namespace bed (host 1's link down for 1 s in 1 MiB all-reduces) the sender sat with
 * 520 KB queued in "persist" for 2 s while the receiver's queue was empty, and once in 7 full
 * runs of that test no byte moved for the whole 20 s RING_TIMEOUT_MS; retransmissions of
 * segments lost in the outage back off the same way. Capped at 1 s, a lost update or segment
 * costs at most a second per round. Kernels before 6.15 have no such cap (120 s): said at
 * INFO, or at WARN when RING_TCP_RTO_MAX_MS was set, on the first socket.
 *
 * The cap also shortens the kernel's own rule for giving a connection up: 15 retransmissions
 * (net.ipv4.tcp_retries2) on a timer doubling up to the cap, 14.4 s at 1 s where it was about
 * 15 min at 120 s. A 20 s outage then ended in ETIMEDOUT on the bed, where the uncapped
 * sockets rode it out. So a capped socket also gets TCP_USER_TIMEOUT, which replaces that
 * rule: the uncapped rule's 925 s without an acknowledgement (or with the window closed), or
 * RING_TIMEOUT_MS + 10 s if longer. A call that waits fails at RING_TIMEOUT_MS by itself,
 * naming the call and the peer; the kernel's limit only matters between calls, where sooner
 * would only do harm.
 */
static void rto_set(tcp_ctx *ctx, int fd)
{
    const ring__params_t *p = &ctx->comm->params;
    if (!p->tcp_rto_max_ms || ctx->rto_refused) return;
    int e = ring__sock_set_rto_max(fd, p->tcp_rto_max_ms);
    if (!e) {
        unsigned long long ut = (unsigned long long)p->timeout_ms + USER_TIMEOUT_SLACK_MS;
        if (ut < USER_TIMEOUT_MIN_MS) ut = USER_TIMEOUT_MIN_MS;
        e = ring__sock_set_user_timeout(fd, ut > UINT_MAX ? UINT_MAX : (unsigned)ut);
        /* Any kernel with the cap has had this since 2.6.37: a refusal is something else. */
        if (e)
            RING_LOG(RING_LOG_WARN, RING_SUB_NET, ctx->comm->rank,
                     "tcp: TCP_USER_TIMEOUT refused (errno %d): the kernel may give a connection up after 15 "
                     "retransmissions at the %d ms backoff cap",
                     e, p->tcp_rto_max_ms);
        return;
    }
    ctx->rto_refused = 1;
    char eb[128];
    const char *why = strerror_r(e, eb, sizeof eb); /* GNU: may return its own text */
    RING_LOG(p->tcp_rto_max_set ? RING_LOG_WARN : RING_LOG_INFO, RING_SUB_NET, ctx->comm->rank,
             "tcp: RING_TCP_RTO_MAX_MS=%d not applied (%s: TCP_RTO_MAX_MS needs Linux 6.15): after a network outage, "
             "retransmissions and window probes may back off up to the kernel's 120 s",
             p->tcp_rto_max_ms, why);
}

/* A named algorithm the kernel refuses is a configuration error: say what it offers. */
static ring_result_t cc_error(ring_comm_t *comm, int err, const char *name)
{
    char avail[256] = "?", allowed[256] = "?";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_congestion_control", "re");
    if (f) {
        if (!fgets(avail, sizeof avail, f)) snprintf(avail, sizeof avail, "?");
        fclose(f);
    }
    f = fopen("/proc/sys/net/ipv4/tcp_allowed_congestion_control", "re");
    if (f) {
        if (!fgets(allowed, sizeof allowed, f)) snprintf(allowed, sizeof allowed, "?");
        fclose(f);
    }
    avail[strcspn(avail, "\n")] = 0;
    allowed[strcspn(allowed, "\n")] = 0;
    return ring__seterr_errno(comm, RING_ERR_INVALID_ARG, err,
                              "RING_TCP_CONGESTION=\"%s\": the kernel refused TCP congestion control %s (this kernel "
                              "has: %s; allowed without CAP_NET_ADMIN: %s)",
                              comm->params.tcp_cc, name, avail, allowed);
}

static ring_result_t tcp_init(ring_comm_t *comm, void **ctxp)
{
    tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
    ctx->comm = comm;
    ctx->sockbuf = comm->params.sockbuf_bytes;
    cc_init(ctx);
    ctx->bundles = calloc((size_t)comm->nranks, sizeof *ctx->bundles);
    ctx->nsocks = calloc((size_t)comm->nranks, sizeof *ctx->nsocks);
    if (!ctx->bundles || !ctx->nsocks) {
        free(ctx->bundles);
        free(ctx->nsocks);
        free(ctx);
        return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
    }
    *ctxp = ctx;
    return RING_OK;
}

static int addr_from_blob(const ring__tp_addr_t *a, ring__sockaddr_t *out);

/*
 * Whether the pair (this rank, peer) shares its sockets between both directions. Computed
 * from the rank table alone (both ranks' flags, the same host test), so both ranks of a pair
 * get the same answer; RING_TCP_DUPLEX differing between them is caught at the handshake.
 * A pair that shared memory or verbs may take over is never duplex: their upgrades run their
 * own exchange on the first socket of each direction and then keep it as a doorbell.
 */
static int pair_duplex(const tcp_ctx *ctx, int peer)
{
    const ring_comm_t *comm = ctx->comm;
    if (!comm->params.tcp_duplex || !comm->peers) return 0;
    const ring__peer_info_t *a = &comm->peers[comm->rank], *b = &comm->peers[peer];
    return !(a->flags & b->flags & RING__PEER_RDMA) && !ring__topo_shm_pair(a, b);
}

int ring__tcp_pair_nsocks(const ring_comm_t *comm, int peer)
{
    if (comm->params.nsocks) return comm->params.nsocks;
    if (!comm->peers || peer < 0 || peer >= comm->nranks) return RING__DEFAULT_NSOCKS;
    ring__sockaddr_t a, b;
    if (addr_from_blob(&comm->peers[comm->rank].addr, &a) || addr_from_blob(&comm->peers[peer].addr, &b))
        return RING__DEFAULT_NSOCKS;
    if (ring__addr_is_loopback(&a) && ring__addr_is_loopback(&b)) return 1;
    /* A NIC address of this machine reached from the same network namespace also goes through
     * the loopback device. Both ends agree without asking each other: ranks in one namespace
     * each find the other's address among their own, and a rank in another namespace (the
     * netns bed, a container) cannot have it among its own, since a job whose peer's address
     * routed back to itself could not connect at all. The same kernel guards against a stale
     * or odd table. */
    const ring__peer_info_t *me = &comm->peers[comm->rank], *pi = &comm->peers[peer];
    if (me->kernel && me->kernel == pi->kernel && ring__addr_is_local(&b)) return 1;
    return RING__DEFAULT_NSOCKS;
}

/* ring__tcp_pair_nsocks, decided once per peer. */
static int pair_nsocks(tcp_ctx *ctx, int peer)
{
    const ring_comm_t *comm = ctx->comm;
    if (!comm->peers || peer < 0 || peer >= comm->nranks) return ring__tcp_pair_nsocks(comm, peer);
    if (!ctx->nsocks[peer]) ctx->nsocks[peer] = (uint8_t)ring__tcp_pair_nsocks(comm, peer);
    return ctx->nsocks[peer];
}

static void pconn_free(pconn *pc)
{
    for (int i = 0; i < RING__MAX_NSOCKS; i++)
        if (pc->fds[i] >= 0) close(pc->fds[i]);
    free(pc);
}

static void tcp_fini(void *vctx)
{
    tcp_ctx *ctx = vctx;
    if (!ctx) return;
    while (ctx->connecting) {
        pconn *n = ctx->connecting->next;
        pconn_free(ctx->connecting);
        ctx->connecting = n;
    }
    /* Views close before fini (release_network) and each bundle goes with its last one; what
     * is left here never got a view (its view could not be allocated). */
    for (int r = 0; r < ctx->comm->nranks; r++) {
        bundle *lk = ctx->bundles[r];
        if (!lk) continue;
        if (lk->refs) {
            lk->ctx = NULL;
            continue;
        }
        for (int i = 0; i < RING__MAX_NSOCKS; i++)
            if (lk->fds[i] >= 0) close(lk->fds[i]);
        free(lk);
    }
    free(ctx->bundles);
    free(ctx->nsocks);
    free(ctx);
}

static ring_result_t tcp_listen_open(void *vctx, ring__tp_addr_t *addr, void **lp)
{
    tcp_ctx *ctx = vctx;
    ring_comm_t *comm = ctx->comm;
    tcp_listen *l = calloc(1, sizeof *l);
    if (!l) return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
    l->ctx = ctx;
    l->fd = -1;
    l->nranks = comm->nranks;
    l->fds = malloc((size_t)l->nranks * sizeof *l->fds);
    l->have = calloc((size_t)l->nranks, sizeof *l->have);
    if (!l->fds || !l->have) {
        free(l->fds);
        free(l->have);
        free(l);
        return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
    }
    for (int r = 0; r < l->nranks; r++)
        for (int i = 0; i < RING__MAX_NSOCKS; i++) l->fds[r][i] = -1;
    memcpy(&l->addr.ss, &comm->data_addr, comm->data_addr_len);
    l->addr.len = comm->data_addr_len;
    ring_result_t rc = ring__listen(comm, &l->addr, 0, comm->params.port_lo, comm->params.port_hi, &l->fd);
    /* Accepted sockets start with the listener's algorithm, set up at their handshake: the one
     * for this host's connections (auto) or the named one; listen_pump gives remote sockets of
     * auto the system's back. */
    int e = rc == RING_OK && ctx->cc_local ? ring__sock_set_cc(l->fd, ctx->cc_local) : 0;
    if (e && ctx->cc_remote) {
        rc = cc_error(comm, e, ctx->cc_local);
    } else if (e) {
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank,
                 "tcp: connections inside this host keep %s: cubic was refused (%s)", ctx->sys_cc, strerror(e));
        ctx->cc_local = NULL;
    }
    if (rc != RING_OK) {
        if (l->fd >= 0) close(l->fd);
        free(l->fds);
        free(l->have);
        free(l);
        return rc;
    }
    addr->len = l->addr.len;
    memcpy(addr->data, &l->addr.ss, l->addr.len);
    ctx->l = l;
    *lp = l;
    return RING_OK;
}

static void tcp_close_listen(void *vl)
{
    tcp_listen *l = vl;
    if (!l) return;
    if (l->ctx->l == l) l->ctx->l = NULL;
    if (l->fd >= 0) close(l->fd);
    for (int i = 0; i < l->npend; i++) close(l->pend[i].fd);
    for (int r = 0; r < l->nranks; r++)
        for (int i = 0; i < RING__MAX_NSOCKS; i++)
            if (l->fds[r][i] >= 0) close(l->fds[r][i]);
    free(l->fds);
    free(l->have);
    free(l);
}

static int addr_from_blob(const ring__tp_addr_t *a, ring__sockaddr_t *out)
{
    memset(out, 0, sizeof *out);
    if (a->len < sizeof(sa_family_t) || a->len > sizeof out->ss) return -1;
    memcpy(&out->ss, a->data, a->len);
    out->len = a->len;
    if (out->ss.ss_family == AF_INET && a->len == sizeof(struct sockaddr_in)) return 0;
    if (out->ss.ss_family == AF_INET6 && a->len == sizeof(struct sockaddr_in6)) return 0;
    return -1;
}

static tcp_conn *conn_new(tcp_ctx *ctx, int is_send, int peer, const ring__sockaddr_t *addr)
{
    tcp_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base.tp = &ring__tcp_transport;
    c->ctx = ctx;
    c->is_send = is_send;
    c->peer = peer;
    c->nsocks = pair_nsocks(ctx, peer);
    for (int i = 0; i < RING__MAX_NSOCKS; i++) c->q[i].fd = -1;
    char b[80];
    snprintf(c->desc, sizeof c->desc, "rank %d (%s)", peer, addr ? ring__addr_str(addr, b, sizeof b) : "?");
    return c;
}

static ring_result_t nak_error(ring_comm_t *comm, int peer)
{
    return ring__seterr(comm, RING_ERR_INVALID_ARG,
                        "tcp: rank %d refused this rank's connection: RING_TCP_DUPLEX differs between the two ranks "
                        "(it must be equal on all ranks)",
                        peer);
}

/* What a peer left unread on a socket that should carry nothing towards this rank, peeked so
 * that nothing is taken: its close, its refusal word, other bytes, an error (errno), or nothing. */
enum { PEEK_NOTHING, PEEK_CLOSED, PEEK_REFUSED, PEEK_DATA, PEEK_ERROR };

static int peek_refusal(int fd)
{
    unsigned char w[ACK_LEN];
    ssize_t n = recv(fd, w, sizeof w, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return PEEK_CLOSED;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? PEEK_NOTHING : PEEK_ERROR;
    return n == ACK_LEN && ring__get32(w) == NAK_MAGIC ? PEEK_REFUSED : PEEK_DATA;
}

/* The peer reset or closed socket i before taking it: it failed or exited. A peer that refuses
 * (RING_TCP_DUPLEX differs) writes its word on the one socket it read and closes the rest, and
 * those can show their reset first (a connection still in its listener's queue is reset when
 * the listener closes): so the socket is only set aside, and pconn_step fails once the word had
 * a moment to show on a sibling. */
static void pconn_lost(pconn *pc, int i, int64_t now)
{
    close(pc->fds[i]);
    pc->fds[i] = -1;
    pc->state[i] = 4;
    if (!pc->lost_at) pc->lost_at = now;
}

/*
 * Drive the sockets this rank opens to peer (the send direction, or a duplex bundle); *fds
 * gets them, handshakes sent, once all are connected (*done = 1), else *done = 0.
 */
static ring_result_t pconn_step(tcp_ctx *ctx, const ring__tp_addr_t *addr, int peer, int duplex, int *fds, int *done)
{
    ring_comm_t *comm = ctx->comm;
    *done = 0;
    pconn *pc = ctx->connecting;
    while (pc && pc->peer != peer) pc = pc->next;
    if (!pc) {
        pc = calloc(1, sizeof *pc);
        if (!pc) return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
        pc->peer = peer;
        pc->nsocks = pair_nsocks(ctx, peer);
        pc->duplex = duplex;
        for (int i = 0; i < RING__MAX_NSOCKS; i++) pc->fds[i] = -1;
        if (addr_from_blob(addr, &pc->addr) != 0) {
            free(pc);
            return ring__seterr(comm, RING_ERR_PROTOCOL, "tcp: malformed address for rank %d", peer);
        }
        ring__addr_local_zone(&pc->addr, &comm->data_addr);
        pc->cc = ctx->cc_local == ctx->cc_remote || ring__addr_is_local(&pc->addr) ? ctx->cc_local : ctx->cc_remote;
        for (int i = 0; i < pc->nsocks; i++) {
            unsigned char *h = pc->hs[i];
            ring__put32(h, HS_MAGIC);
            ring__put32(h + 4, RING__TCP_VERSION | (uint32_t)pc->nsocks << 16 | (uint32_t)duplex << HS_DUPLEX_SHIFT);
            memcpy(h + 8, comm->params.secret, 16);
            ring__put32(h + 24, (uint32_t)comm->rank);
            ring__put32(h + 28, (uint32_t)i);
            ring__put64(h + 32, comm->job_nonce);
        }
        /* Tests: a handshake that takes this long after its first byte, as over a link that
         * loses its segments again and again. */
        const char *hold = getenv("RING_TEST_TCP_HS_HOLD_MS");
        if (hold && *hold) pc->hs_hold_until = ring__now_ns() + atoll(hold) * 1000000LL;
        pc->next = ctx->connecting;
        ctx->connecting = pc;
    }
    char b[80];
    int64_t now = ring__now_ns();
    int ready = 0;
    for (int i = 0; i < pc->nsocks; i++) {
        if (pc->state[i] == 0) {
            if (pc->fds[i] < 0) {
                if (now < pc->retry_at[i]) continue;
                int cc_err, e = ring__connect_start(&pc->addr, pc->cc, &pc->fds[i], &cc_err);
                if (cc_err) return cc_error(comm, cc_err, pc->cc);
                if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)
                    return ring__seterr_errno(comm, RING_ERR_SYSTEM, e,
                                              "tcp: rank %d cannot open a socket to rank %d (each peer takes up to "
                                              "RING_NSOCKS descriptors: raise the open-file limit, ulimit -n)",
                                              comm->rank, peer);
                if (e) return ring__seterr_errno(comm, RING_ERR_CONNECT, e, "connect to rank %d at %s", peer,
                                                 ring__addr_str(&pc->addr, b, sizeof b));
            }
            int r = ring__connect_check(pc->fds[i]);
            if (r == 0) continue;
            if (r == -ECONNRESET) {
                pconn_lost(pc, i, now);
                continue;
            }
            if (r < 0) {
                /* The peer's listener exists before addresses are published, so a refusal is
                 * unusual; retry briefly (the caller's deadline bounds it) rather than fail on
                 * a transient backlog overflow. */
                close(pc->fds[i]);
                pc->fds[i] = -1;
                pc->retry_at[i] = now + 20 * 1000000LL;
                if (-r != ECONNREFUSED && -r != ETIMEDOUT && -r != EAGAIN)
                    return ring__seterr_errno(comm, RING_ERR_CONNECT, -r, "connect to rank %d at %s", peer,
                                              ring__addr_str(&pc->addr, b, sizeof b));
                continue;
            }
            ring__sock_tune(pc->fds[i], ctx->sockbuf);
            rto_set(ctx, pc->fds[i]);
            pc->state[i] = 1;
        }
        if (pc->state[i] == 1) {
            if (pc->hs_hold_until && pc->hs_sent[i] == 1 && now < pc->hs_hold_until) {
                ring__nap_ns(1000000); /* the socket stays writable: do not spin on it */
                continue;
            }
            ssize_t n = send(pc->fds[i], pc->hs[i] + pc->hs_sent[i],
                             pc->hs_hold_until && pc->hs_sent[i] == 0 ? 1 : HS_LEN - pc->hs_sent[i],
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) {
                pconn_lost(pc, i, now);
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return ring__seterr_errno(comm, RING_ERR_CONNECT, errno, "handshake with rank %d at %s", peer,
                                          ring__addr_str(&pc->addr, b, sizeof b));
            if (n > 0) pc->hs_sent[i] += (size_t)n;
            if (pc->hs_sent[i] == HS_LEN) pc->state[i] = pc->duplex ? 2 : 3;
        }
        if (pc->state[i] == 2) {
            /* Duplex: done only once the peer took the socket, so that a peer that refuses it
             * (RING_TCP_DUPLEX differs) can say why, and this rank never finishes init with a
             * connection nobody will read. */
            ssize_t n = recv(pc->fds[i], pc->ack[i] + pc->ack_got[i], ACK_LEN - pc->ack_got[i], MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                pconn_lost(pc, i, now);
                continue;
            }
            if (n > 0) pc->ack_got[i] += (size_t)n;
            if (pc->ack_got[i] == ACK_LEN) {
                uint32_t w = ring__get32(pc->ack[i]);
                if (w == NAK_MAGIC) return nak_error(comm, peer);
                if (w != ACK_MAGIC)
                    return ring__seterr(comm, RING_ERR_PROTOCOL, "tcp: garbage from rank %d at %s instead of its accept word",
                                        peer, ring__addr_str(&pc->addr, b, sizeof b));
                pc->state[i] = 3;
            }
        }
        if (pc->state[i] == 3 && !pc->duplex) {
            /* A one-way socket counts as made once its handshake is out, while its siblings
             * may still be connecting. A duplex peer that refused it (RING_TCP_DUPLEX differs)
             * wrote its word here and exited, and the siblings would retry its gone listener
             * until the deadline: look for the word, or the close, now. */
            int k = peek_refusal(pc->fds[i]);
            if (k == PEEK_REFUSED) return nak_error(comm, peer);
            if (k == PEEK_CLOSED || k == PEEK_ERROR) pconn_lost(pc, i, now);
        }
        if (pc->state[i] == 3) ready++;
    }
    /* No failure notices travel before init ends (watch.c), so say what is known. */
    if (pc->lost_at && now - pc->lost_at > 200 * 1000000LL)
        return ring__seterr(comm, RING_ERR_CONNECT,
                            "tcp: rank %d at %s closed this rank's connection before taking it (it failed, exited or refused "
                            "the connection: its own error, or its log at RING_DEBUG=WARN, says why)",
                            peer, ring__addr_str(&pc->addr, b, sizeof b));
    if (ready < pc->nsocks) return RING_OK;
    for (int i = 0; i < pc->nsocks; i++) {
        fds[i] = pc->fds[i];
        pc->fds[i] = -1;
    }
    pconn **pp = &ctx->connecting;
    while (*pp != pc) pp = &(*pp)->next;
    *pp = pc->next;
    pconn_free(pc);
    *done = 1;
    return RING_OK;
}

static ring_result_t listen_pump(tcp_listen *l);

/* Move peer's authenticated sockets from the listener into fds once all have come: 1 if so. */
static int take_from_listener(tcp_listen *l, int peer, int *fds)
{
    tcp_ctx *ctx = l->ctx;
    int n = pair_nsocks(ctx, peer);
    if (l->have[peer] < n) return 0;
    for (int i = 0; i < n; i++) {
        fds[i] = l->fds[peer][i];
        l->fds[peer][i] = -1;
        ring__sock_tune(fds[i], ctx->sockbuf);
        rto_set(ctx, fds[i]);
    }
    l->have[peer] = 0;
    return 1;
}

/* A view (one direction) of fds with peer in *out; duplex views share lk. If it cannot be
 * made, sockets that are this view's alone are closed. */
static ring_result_t view_new(tcp_ctx *ctx, int is_send, int peer, const int *fds, bundle *lk, void **out)
{
    ring__sockaddr_t pa;
    pa.len = sizeof pa.ss;
    int have_addr = getpeername(fds[0], (struct sockaddr *)&pa.ss, &pa.len) == 0;
    tcp_conn *c = conn_new(ctx, is_send, peer, have_addr ? &pa : NULL);
    if (!c) {
        for (int i = 0, n = pair_nsocks(ctx, peer); !lk && i < n; i++) close(fds[i]);
        return ring__seterr(ctx->comm, RING_ERR_NOMEM, "tcp: out of memory");
    }
    for (int i = 0; i < c->nsocks; i++) c->q[i].fd = fds[i];
    c->bundle = lk;
    if (lk) lk->refs++;
    char cc[32], rto[32] = "the kernel's", gone[32] = "the kernel's rule";
    int rto_ms = ring__sock_rto_max(fds[0]);
    long ut = ring__sock_user_timeout(fds[0]);
    if (rto_ms > 0) snprintf(rto, sizeof rto, "%d ms", rto_ms);
    if (ut > 0) snprintf(gone, sizeof gone, "%ld ms", ut);
    RING_LOG(RING_LOG_INFO, RING_SUB_NET, ctx->comm->rank,
             "tcp: %s %s over %d socket(s), congestion control %s, backoff cap %s, gives up unacknowledged after %s%s",
             is_send ? "sending to" : "receiving from", c->desc, c->nsocks, ring__sock_cc(fds[0], cc, sizeof cc), rto,
             gone,
             !lk ? "" : lk->refs == 2 ? " (duplex: the sockets of the other direction)" : " (duplex)");
    *out = c;
    return RING_OK;
}

/* The duplex bundle with peer, once made: the lower rank connects, the higher one takes the
 * sockets from its listener. *out stays NULL while it is pending. */
static ring_result_t duplex_bundle(tcp_ctx *ctx, int peer, bundle **out)
{
    ring_comm_t *comm = ctx->comm;
    ring_result_t rc = RING_OK;
    int fds[RING__MAX_NSOCKS], done = 0, n = pair_nsocks(ctx, peer);
    tcp_listen *l = ctx->l;
    if (!l) return ring__seterr(comm, RING_ERR_INTERNAL, "tcp: no listener for rank %d's duplex connection", peer);
    /* Every time, on either rank of the pair: strangers' and stale sockets are closed whenever
     * this rank adds a connection, even one whose bundle exists or that it makes itself. */
    RING_CHECK(listen_pump(l));
    *out = ctx->bundles[peer];
    if (*out) return RING_OK;
    if (comm->rank < peer) {
        RING_CHECK(pconn_step(ctx, &comm->peers[peer].addr, peer, 1, fds, &done));
    } else {
        done = take_from_listener(l, peer, fds);
        if (done) {
            unsigned char ack[ACK_LEN];
            ring__put32(ack, ACK_MAGIC);
            /* 4 bytes into a new socket's empty send buffer: all or an error. */
            for (int i = 0; i < n && rc == RING_OK; i++)
                if (send(fds[i], ack, ACK_LEN, MSG_NOSIGNAL | MSG_DONTWAIT) != ACK_LEN)
                    rc = ring__seterr_errno(comm, RING_ERR_CONNECT, errno, "tcp: accepting rank %d's duplex socket", peer);
            if (rc != RING_OK) {
                for (int i = 0; i < n; i++) close(fds[i]);
                return rc;
            }
        }
    }
    if (!done) return RING_OK;
    bundle *lk = calloc(1, sizeof *lk);
    if (!lk) {
        for (int i = 0; i < n; i++) close(fds[i]);
        return ring__seterr(comm, RING_ERR_NOMEM, "tcp: out of memory");
    }
    lk->ctx = ctx;
    lk->peer = peer;
    for (int i = 0; i < RING__MAX_NSOCKS; i++) lk->fds[i] = i < n ? fds[i] : -1;
    ctx->bundles[peer] = *out = lk;
fail:
    return rc;
}

/* Either direction of a duplex pair: a view of its bundle once that is made (*out stays NULL
 * until then). */
static ring_result_t duplex_view(tcp_ctx *ctx, int is_send, int peer, void **out)
{
    bundle *lk = NULL;
    ring_result_t rc = duplex_bundle(ctx, peer, &lk);
    if (rc != RING_OK || !lk) return rc;
    return view_new(ctx, is_send, peer, lk->fds, lk, out);
}

static ring_result_t tcp_connect(void *vctx, const ring__tp_addr_t *addr, int peer, void **sp)
{
    tcp_ctx *ctx = vctx;
    ring_result_t rc = RING_OK;
    int fds[RING__MAX_NSOCKS], done = 0;
    *sp = NULL;
    if (pair_duplex(ctx, peer)) return duplex_view(ctx, 1, peer, sp);
    RING_CHECK(pconn_step(ctx, addr, peer, 0, fds, &done));
    if (done) rc = view_new(ctx, 1, peer, fds, NULL, sp);
fail:
    return rc;
}

const char *ring__tcp_hs_check(const unsigned char *h, const uint8_t secret[16], uint64_t nonce, int nsocks,
                               int nranks, int myrank, uint32_t *rank, uint32_t *idx)
{
    uint32_t ver = ring__get32(h + 4);
    *rank = ring__get32(h + 24);
    *idx = ring__get32(h + 28);
    if (ring__get32(h) != HS_MAGIC) return "not a ringcomm data connection (bad magic)";
    if ((ver & 0xffff) != RING__TCP_VERSION) {
        static _Thread_local char why[96];
        snprintf(why, sizeof why, "data protocol version %u differs from this rank's %u (another ringcomm build)",
                 ver & 0xffff, RING__TCP_VERSION);
        return why;
    }
    if (!ring__secret_equal(h + 8, secret, 16)) return "wrong job secret";
    if (ring__get64(h + 32) != nonce) return "belongs to another job instance";
    if (((ver >> 16) & 0xff) != (uint32_t)nsocks) return "RING_NSOCKS differs between ranks";
    /* Bit HS_DUPLEX_SHIFT is the sender's duplex flag, which the caller compares with what it
     * expects of that rank; the bits above it are not used by any build. */
    if (ver >> (HS_DUPLEX_SHIFT + 1)) return "unknown handshake flags (a newer build?)";
    if (*rank >= (uint32_t)nranks || *rank == (uint32_t)myrank) return "sender rank out of range";
    if (*idx >= (uint32_t)nsocks) return "bad socket index";
    return NULL;
}

int ring__tcp_hdr_check(const unsigned char *hdr, uint32_t want_seq, size_t want_len, uint32_t *seq, uint64_t *len)
{
    *seq = ring__get32(hdr + 4);
    *len = ring__get64(hdr + 8);
    if (ring__get32(hdr) != MSG_MAGIC) return 1;
    if (*seq != want_seq) return 2;
    if (*len != want_len) return 3;
    return 0;
}

static void drop_pending(tcp_listen *l, int i, const char *why)
{
    char b[80];
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, l->ctx->comm->rank,
             "tcp: rejected connection from %s: %s", ring__addr_str(&l->pend[i].from, b, sizeof b), why);
    close(l->pend[i].fd);
    l->pend[i] = l->pend[--l->npend];
}

/* Reads what pending connection i has sent and settles it if it can: 1 if it left the table
 * (authenticated into l->fds, or dropped), 0 if it stays for more bytes, -1 with the error set
 * if the job is misconfigured. */
static int settle_pending(tcp_listen *l, int i, int64_t now, ring_result_t *rc)
{
    tcp_ctx *ctx = l->ctx;
    ring_comm_t *comm = ctx->comm;
    pending *p = &l->pend[i];
    ssize_t n = recv(p->fd, p->buf + p->got, HS_LEN - p->got, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        drop_pending(l, i, "closed before completing the handshake");
        return 1;
    }
    if (n > 0) p->got += (size_t)n;
    if (p->got < HS_LEN) {
        if (now > p->deadline) {
            drop_pending(l, i, "handshake not completed in time");
            return 1;
        }
        return 0;
    }
    uint32_t rank, idx;
    /* The count the claimed sender must use with this rank (out of range: any, the rank
     * check drops it). */
    int ns = pair_nsocks(l->ctx, (int)RING__MIN(ring__get32(p->buf + 24), (uint32_t)INT32_MAX));
    const char *why = ring__tcp_hs_check(p->buf, comm->params.secret, comm->job_nonce, ns, l->nranks, comm->rank,
                                         &rank, &idx);
    if (!why && l->fds[rank][idx] >= 0) why = "duplicate socket index";
    if (why) {
        drop_pending(l, i, why);
        return 1;
    }
    /* Authenticated, so a member of this job: a disagreement on duplex is a configuration
     * error of the job, said now instead of two ranks waiting for each other's socket. */
    int duplex = (int)(ring__get32(p->buf + 4) >> HS_DUPLEX_SHIFT & 1);
    if (duplex != pair_duplex(ctx, (int)rank)) {
        /* A duplex sender waits for a word back: tell it why (best effort). */
        unsigned char nak[ACK_LEN];
        ring__put32(nak, NAK_MAGIC);
        (void)send(p->fd, nak, ACK_LEN, MSG_NOSIGNAL | MSG_DONTWAIT);
        *rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                           "tcp: rank %u connects %s, this rank expected %s: RING_TCP_DUPLEX differs between "
                           "the two ranks (it must be equal on all ranks)",
                           rank, duplex ? "one socket bundle for both directions" : "one bundle per direction",
                           duplex ? "one per direction" : "one for both");
        return -1;
    }
    l->fds[rank][idx] = p->fd;
    l->have[rank]++;
    l->pend[i] = l->pend[--l->npend];
    return 1;
}

/* Accept what is waiting on the listener and read handshakes: authenticated sockets wait in
 * l->fds by sender rank and socket index until asked for. Each connection is read as soon as
 * it is accepted (a peer sends its handshake right after connecting), so only strangers and
 * slow senders hold the pending table, and a burst of peers cannot push each other out. */
static ring_result_t listen_pump(tcp_listen *l)
{
    tcp_ctx *ctx = l->ctx;
    ring_comm_t *comm = ctx->comm;
    int64_t now = ring__now_ns();
    ring_result_t rc = RING_OK;
    char b[80];
    for (;;) {
        ring__sockaddr_t from;
        from.len = sizeof from.ss;
        int fd = accept4(l->fd, (struct sockaddr *)&from.ss, &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        ring__fd_own(fd);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            /* EMFILE and the like: the peer's connection would wait in the backlog until both
             * ranks time out, with the listener readable all along. */
            return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno,
                                      "tcp: rank %d cannot accept a peer's connection (each peer takes up to "
                                      "RING_NSOCKS descriptors: raise the open-file limit, ulimit -n)",
                                      comm->rank);
        }
        /* auto: the socket came with the listener's algorithm for this host's connections. */
        if (ctx->cc_local && !ctx->cc_remote && !ring__addr_is_local(&from)) {
            int e = ring__sock_set_cc(fd, ctx->sys_cc);
            if (e)
                RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank, "tcp: a connection from %s keeps %s: %s refused (%s)",
                         ring__addr_str(&from, b, sizeof b), ctx->cc_local, ctx->sys_cc, strerror(e));
        }
        if (l->npend == MAX_PENDING) {
            int old = 0;
            for (int i = 1; i < l->npend; i++)
                if (l->pend[i].seq < l->pend[old].seq) old = i;
            drop_pending(l, old, "too many unauthenticated connections");
        }
        pending *p = &l->pend[l->npend++];
        memset(p, 0, sizeof *p);
        p->fd = fd;
        p->from = from;
        /* Strangers are bounded by the table (the oldest goes when it is full), so a rank's own
         * handshake may take as long as RING_TIMEOUT_MS (the init deadline, and the longest
         * wait without progress after it): over a lossy link its retransmissions took longer
         * than 10 s, and init failed on every rank (2 of 7 runs at 20% loss). */
        p->deadline = now + RING__MAX(HS_TIMEOUT_NS, (int64_t)comm->params.timeout_ms * 1000000LL);
        p->seq = l->accepted++;
        if (settle_pending(l, l->npend - 1, now, &rc) < 0) return rc;
    }
    for (int i = 0; i < l->npend;) {
        int r = settle_pending(l, i, now, &rc);
        if (r < 0) return rc;
        if (r == 0) i++;
    }
    return RING_OK;
}

static ring_result_t tcp_accept(void *vl, int peer, void **rp)
{
    tcp_listen *l = vl;
    tcp_ctx *ctx = l->ctx;
    ring_comm_t *comm = ctx->comm;
    ring_result_t rc = RING_OK;
    int fds[RING__MAX_NSOCKS];
    *rp = NULL;
    if (peer < 0 || peer >= l->nranks || peer == comm->rank)
        return ring__seterr(comm, RING_ERR_INTERNAL, "tcp: accept from invalid rank %d", peer);
    if (pair_duplex(ctx, peer)) return duplex_view(ctx, 0, peer, rp);
    RING_CHECK(listen_pump(l));
    if (take_from_listener(l, peer, fds)) rc = view_new(ctx, 0, peer, fds, NULL, rp);
fail:
    return rc;
}

static int tcp_listen_pollfds(void *vl, struct pollfd *fds, int max)
{
    tcp_listen *l = vl;
    int n = 0;
    if (n < max) fds[n++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
    for (int i = 0; i < l->npend && n < max; i++) fds[n++] = (struct pollfd){.fd = l->pend[i].fd, .events = POLLIN};
    for (pconn *pc = l->ctx->connecting; pc; pc = pc->next)
        for (int i = 0; i < pc->nsocks && n < max; i++)
            if (pc->fds[i] >= 0 && pc->state[i] < 3)
                fds[n++] = (struct pollfd){.fd = pc->fds[i], .events = pc->state[i] == 2 ? POLLIN : POLLOUT};
    return n;
}

static int q_push(sockq *q, char *base, size_t len, tcp_req *req, int is_hdr)
{
    if (q->count == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 64;
        op *n = malloc(ncap * sizeof *n);
        if (!n) return -1;
        for (size_t i = 0; i < q->count; i++) n[i] = q->ops[(q->head + i) % q->cap];
        free(q->ops);
        q->ops = n;
        q->cap = ncap;
        q->head = 0;
    }
    q->ops[(q->head + q->count) % q->cap] = (op){.base = base, .len = len, .req = req, .is_hdr = is_hdr};
    q->count++;
    return 0;
}

static ring_result_t post(void *vc, void *buf, size_t len, void **rp)
{
    tcp_conn *c = vc;
    *rp = NULL;
    if (c->failed) return c->failed;
    tcp_req *r = c->free_reqs;
    if (r) {
        c->free_reqs = r->next_free;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) return ring__seterr(c->ctx->comm, RING_ERR_NOMEM, "tcp: out of memory");
        r->next_all = c->all_reqs;
        c->all_reqs = r;
    }
    r->c = c;
    r->seq = c->seq++;
    r->len = len;
    if (c->is_send) {
        ring__put32(r->hdr, MSG_MAGIC);
        ring__put32(r->hdr + 4, r->seq);
        ring__put64(r->hdr + 8, len);
    }
    size_t npieces = len == 0 ? 0 : RING__MIN((size_t)c->nsocks, RING__MAX((size_t)1, len / MIN_PIECE));
    /* Small messages stay on socket 0, so a burst of them (descriptor, small collectives)
     * leaves in one sendmsg; only messages worth splitting rotate their first socket. */
    int start = len < MIN_PIECE ? 0 : (int)(r->seq % (uint32_t)c->nsocks);
    int closed = c->q[0].peer_closed;
    for (size_t j = 0; j < npieces; j++) closed |= c->q[(start + (int)j) % c->nsocks].peer_closed;
    if (closed)
        return c->failed = ring__seterr(c->ctx->comm, RING_ERR_PEER,
                                        "tcp: %s closed its connection (it exited or destroyed its communicator) "
                                        "but this rank still has messages for it", c->desc);
    r->pending = 1 + (int)npieces;
    /* The header on socket 0 whatever the length: with it on the first piece's socket, which
     * depends on the length, a receiver that posted a length on the other side of 64 KiB
     * looked for it on another socket than it was sent on, and waited out its timeout or read
     * payload as a header, instead of RING_ERR_MISMATCH. */
    int err = q_push(&c->q[0], (char *)r->hdr, HDR_LEN, r, 1);
    size_t off = 0;
    for (size_t j = 0; j < npieces && !err; j++) {
        size_t plen = len / npieces + (j < len % npieces);
        err = q_push(&c->q[(start + (int)j) % c->nsocks], (char *)buf + off, plen, r, 0);
        off += plen;
    }
    if (err) {
        c->failed = ring__seterr(c->ctx->comm, RING_ERR_NOMEM, "tcp: out of memory queueing a message");
        return c->failed;
    }
    *rp = r;
    return RING_OK;
}

static ring_result_t tcp_isend(void *c, const void *buf, size_t len, void *mh, void **rp)
{
    (void)mh;
    return post(c, (void *)buf, len, rp);
}

static ring_result_t tcp_irecv(void *c, void *buf, size_t len, void *mh, void **rp)
{
    (void)mh;
    return post(c, buf, len, rp);
}

static ring_result_t conn_fail(tcp_conn *c, ring_result_t rc, int err, const char *what)
{
    ring_comm_t *comm = c->ctx->comm;
    if (err)
        c->failed = ring__seterr_errno(comm, rc, err, "tcp: %s %s", what, c->desc);
    else
        c->failed = ring__seterr(comm, rc, "tcp: %s %s", what, c->desc);
    return c->failed;
}

static ring_result_t check_header(tcp_conn *c, tcp_req *r)
{
    uint32_t seq;
    uint64_t len;
    ring_comm_t *comm = c->ctx->comm;
    switch (ring__tcp_hdr_check(r->hdr, r->seq, r->len, &seq, &len)) {
    case 1:
        return c->failed = ring__seterr(comm, RING_ERR_PROTOCOL,
                                        "tcp: garbage from %s: bad message magic 0x%08x (stream out of sync)",
                                        c->desc, ring__get32(r->hdr));
    case 2:
        return c->failed = ring__seterr(comm, RING_ERR_PROTOCOL,
                                        "tcp: message %u from %s arrived while %u was expected", seq, c->desc, r->seq);
    case 3:
        return c->failed = ring__seterr(comm, RING_ERR_MISMATCH,
                                        "tcp: message %u from %s is %llu bytes, this rank expected %zu "
                                        "(ranks disagree on count, dtype or collective)",
                                        r->seq, c->desc, (unsigned long long)len, r->len);
    default:
        return RING_OK;
    }
}

static ring_result_t drive(tcp_conn *c, sockq *q, int *moved)
{
    while (q->count) {
        struct iovec iov[MAX_IOV];
        int n = 0;
        size_t want = 0;
        for (size_t i = 0; i < q->count && n < MAX_IOV; i++) {
            op *o = &q->ops[(q->head + i) % q->cap];
            iov[n].iov_base = o->base + o->done;
            iov[n].iov_len = o->len - o->done;
            want += iov[n].iov_len;
            n++;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t got = c->is_send ? sendmsg(q->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(q->fd, &mh, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return RING_OK;
            return conn_fail(c, RING_ERR_PEER, errno, c->is_send ? "sending to" : "receiving from");
        }
        if (got == 0 && want > 0)
            return conn_fail(c, RING_ERR_PEER, 0,
                             "connection closed (the process exited or was killed?) by");
        *moved = 1;
        size_t left = (size_t)got;
        while (q->count) {
            op *o = &q->ops[q->head];
            size_t take = RING__MIN(left, o->len - o->done);
            o->done += take;
            left -= take;
            if (o->done < o->len) break;
            if (!c->is_send && o->is_hdr) {
                ring_result_t rc = check_header(c, o->req);
                if (rc != RING_OK) return rc;
            }
            o->req->pending--;
            q->head = (q->head + 1) % q->cap;
            q->count--;
        }
        if ((size_t)got < want) return RING_OK; /* socket buffer full/empty: poll before retrying */
    }
    return RING_OK;
}

static ring_result_t tcp_progress(void *vc, int *moved)
{
    tcp_conn *c = vc;
    if (c->failed) return c->failed;
    for (int i = 0; i < c->nsocks; i++) {
        ring_result_t rc = drive(c, &c->q[i], moved);
        if (rc != RING_OK) return rc;
    }
    return RING_OK;
}

static ring_result_t tcp_test(void *vr, int *done)
{
    tcp_req *r = vr;
    tcp_conn *c = r->c;
    *done = 0;
    if (r->pending == 0) {
        *done = 1;
        r->next_free = c->free_reqs;
        c->free_reqs = r;
        return RING_OK;
    }
    return c->failed;
}

static int tcp_pollfds(void *vc, struct pollfd *fds, int max)
{
    tcp_conn *c = vc;
    int n = 0;
    for (int i = 0; i < c->nsocks && n < max; i++) {
        short ev = c->q[i].peer_closed || c->q[i].eof_after_data ? 0 : POLLRDHUP;
        if (c->q[i].count) ev |= c->is_send ? POLLOUT : POLLIN;
        fds[n++] = (struct pollfd){.fd = c->q[i].fd, .events = ev};
    }
    return n;
}

static ring_result_t tcp_check(void *vc)
{
    tcp_conn *c = vc;
    if (c->failed) return c->failed;
    for (int i = 0; i < c->nsocks; i++) {
        if (c->q[i].peer_closed) continue;
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(c->q[i].fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err)
            return conn_fail(c, RING_ERR_PEER, err, "connection failed with");
        int k = peek_refusal(c->q[i].fd);
        /* The refusal word means something only on a one-way send socket, where the peer
         * writes nothing else. Towards a receive view or a duplex bundle it is data: a piece
         * of payload (on a socket other than its header's) may start with those 4 bytes, and
         * taken for a word it kept POLLRDHUP asked for after the peer's close, and poll() from
         * returning at once. */
        if (k == PEEK_REFUSED && (!c->is_send || c->bundle)) k = PEEK_DATA;
        if (k == PEEK_CLOSED) {
            /* A neighbour that finished its part and destroyed its communicator closes
             * cleanly, one socket at a time, while its last bytes may still be queued on the
             * others: EOF is an error only on a socket where we still expect to move bytes. */
            if (c->q[i].count) return conn_fail(c, RING_ERR_PEER, 0, "connection closed (the process exited or was killed?) by");
            c->q[i].peer_closed = 1;
            continue;
        }
        if (k == PEEK_ERROR) return conn_fail(c, RING_ERR_PEER, errno, "connection failed with");
        if (k == PEEK_DATA && !c->q[i].eof_after_data && (!c->is_send || c->bundle)) {
            struct pollfd p = {.fd = c->q[i].fd, .events = POLLRDHUP};
            if (poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP)) c->q[i].eof_after_data = 1;
        }
        if (c->is_send && !c->bundle) {
            /* A duplex peer that refused this one-way socket said why on it (listen_pump). */
            if (k == PEEK_REFUSED) return c->failed = nak_error(c->ctx->comm, c->peer);
            if (k == PEEK_DATA) return conn_fail(c, RING_ERR_PROTOCOL, 0, "unexpected data on a send-only connection from");
        }
    }
    return RING_OK;
}

static void tcp_close(void *vc)
{
    tcp_conn *c = vc;
    if (!c) return;
    for (int i = 0; i < RING__MAX_NSOCKS; i++) {
        if (c->q[i].fd >= 0 && !c->bundle) close(c->q[i].fd);
        free(c->q[i].ops);
    }
    if (c->bundle && --c->bundle->refs == 0) {
        bundle *lk = c->bundle;
        for (int i = 0; i < RING__MAX_NSOCKS; i++)
            if (lk->fds[i] >= 0) close(lk->fds[i]);
        if (lk->ctx) lk->ctx->bundles[lk->peer] = NULL;
        free(lk);
    }
    while (c->all_reqs) {
        tcp_req *n = c->all_reqs->next_all;
        free(c->all_reqs);
        c->all_reqs = n;
    }
    free(c);
}

static void tcp_diag(void *vc, char *out, size_t len)
{
    tcp_conn *c = vc;
    size_t queued[RING__MAX_NSOCKS];
    ring__tcp_sock_t socks[RING__MAX_NSOCKS];
    for (int i = 0; i < c->nsocks; i++) {
        const sockq *q = &c->q[i];
        queued[i] = 0;
        /* Payload only, as the slot transports count: the 16-byte headers are the wire's. */
        for (size_t j = 0; j < q->count; j++) {
            const op *o = &q->ops[(q->head + j) % q->cap];
            if (!o->is_hdr) queued[i] += o->len - o->done;
        }
        ring__tcp_sock_read(q->fd, &socks[i]);
    }
    ring__tcp_diag_say(out, len, c->is_send, c->peer, c->nsocks, queued, socks);
}

int ring__tcp_conn_fd(void *vc)
{
    tcp_conn *c = vc;
    return c->q[0].fd;
}

int ring__tcp_take_fd(void *vc)
{
    tcp_conn *c = vc;
    /* Never a duplex view (pair_duplex leaves out every pair an upgrade could take): its
     * socket also carries the other direction. */
    if (c->bundle) return -1;
    int fd = c->q[0].fd;
    c->q[0].fd = -1;
    return fd;
}

const ring__transport_t ring__tcp_transport = {
    .name = "tcp",
    .init = tcp_init,
    .fini = tcp_fini,
    .listen = tcp_listen_open,
    .close_listen = tcp_close_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .listen_pollfds = tcp_listen_pollfds,
    .reg_mem = NULL,
    .dereg_mem = NULL,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .progress = tcp_progress,
    .test = tcp_test,
    .pollfds = tcp_pollfds,
    .check = tcp_check,
    .close = tcp_close,
    .diag = tcp_diag,
};
