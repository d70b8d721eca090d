/*
 * Point-to-point connections and messages (p2p.h).
 *
 * Connecting: each side connects its send connection to the peer's listener and accepts the
 * peer's into its receive connection; both directions are non-blocking, so any symmetric set of
 * pairs completes without ordering constraints. The listener stays open for the
 * communicator's lifetime; authenticated connections from a rank not yet asked for are held by
 * the transport until they are.
 *
 * Running: ops are posted in list order per connection (a connection whose queue is full keeps
 * its later ops back, others go on), then progress/test until all are done, sleeping in poll()
 * on the connections and the abort eventfd after a short spin, like the ring engine.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "log.h"
#include "p2p.h"
#include "rdma.h"
#include "topo.h"
#include "transport.h"
#include "watch.h"

#define MAX_FDS 64

void ring__peer_desc(const ring_comm_t *comm, int rank, char *out, size_t len)
{
    const ring__peer_info_t *pi = &comm->peers[rank];
    ring__sockaddr_t a;
    ring__peer_sockaddr(pi, &a);
    /* A link-local address's zone is the peer host's interface number: this rank reaches it
     * through its own (ring__addr_local_zone), and that is the name this host knows. */
    if (rank != comm->rank) ring__addr_local_zone(&a, &comm->data_addr);
    char b[80];
    snprintf(out, len, "rank %d (%s on %s)", rank, ring__addr_str(&a, b, sizeof b), pi->host);
}

/* Take the communicator's engine like a blocking collective does (comm.c): wait until no
 * operation runs or is queued, so that exactly one thing drives the connections. */
static void engine_acquire(ring_comm_t *comm)
{
    pthread_mutex_lock(&comm->mu);
    while (comm->busy || comm->qhead) pthread_cond_wait(&comm->cv_done, &comm->mu);
    comm->busy = 1;
    pthread_mutex_unlock(&comm->mu);
}

static void engine_release(ring_comm_t *comm)
{
    pthread_mutex_lock(&comm->mu);
    comm->busy = 0;
    if (comm->qhead || comm->shutdown) pthread_cond_signal(&comm->cv_work);
    pthread_cond_broadcast(&comm->cv_done);
    pthread_mutex_unlock(&comm->mu);
}

/* Same host (name and boot id) and both sides take shared memory: upgrade the TCP connection. */
static int want_shm(const ring_comm_t *comm, int p)
{
    return comm->shm_ctx && ring__topo_shm_pair(&comm->peers[comm->rank], &comm->peers[p]);
}

/* Verbs: every peer with RING_TRANSPORT=rdma; with auto, peers on other hosts (inside a host
 * shared memory is faster than a loop through the HCA) when both ranks have a port. */
static int want_rdma(const ring_comm_t *comm, int p)
{
    if (!comm->rdma_ctx || !(comm->peers[p].flags & RING__PEER_RDMA)) return 0;
    return comm->params.transport == RING__TP_RDMA || !want_shm(comm, p);
}

/* RING_TRANSPORT=shm or rdma on this rank: a peer that cannot be reached that way is a
 * configuration error, said at once rather than a silent fall back to TCP. */
static ring_result_t check_forced(ring_comm_t *comm, int p)
{
    if (comm->params.transport == RING__TP_RDMA && p != comm->rank && !want_rdma(comm, p))
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "RING_TRANSPORT=rdma, but rank %d (on %s) does not take verbs (no active port there, or its "
                            "RING_TRANSPORT is not auto or rdma)",
                            p, comm->peers[p].host);
    if (comm->params.transport != RING__TP_SHM || p == comm->rank || want_shm(comm, p)) return RING_OK;
    const ring__peer_info_t *a = &comm->peers[comm->rank], *b = &comm->peers[p];
    if (!(b->flags & RING__PEER_SHM))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "RING_TRANSPORT=shm, but rank %d has RING_TRANSPORT=tcp", p);
    if (ring__topo_same_host(a, b))
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "RING_TRANSPORT=shm, but rank %d on this host does not share RING_SHM_DIR (\"%s\" here) with "
                            "this rank: " RING__SHM_UNSHARED_WHY,
                            p, comm->params.shm_dir);
    return ring__seterr(comm, RING_ERR_INVALID_ARG, "RING_TRANSPORT=shm, but rank %d is on another host (%s, this rank on %s%s)",
                        p, b->host, a->host, strcmp(a->host, b->host) ? "" : "; same name, different boot id");
}

/* Bring conns[p] (send or receive direction) one step closer to its final transport:
 * 1 when it is there, 0 while pending. */
static ring_result_t step_conn(ring_comm_t *comm, int p, int is_send, int *ready)
{
    ring_result_t rc = RING_OK;
    void **slot = is_send ? &comm->conn_send[p] : &comm->conn_recv[p];
    *ready = 0;
    if (!*slot) {
        if (is_send) RING_CHECK(comm->tp->connect(comm->tp_ctx, &comm->peers[p].addr, p, slot));
        else RING_CHECK(comm->tp->accept(comm->lcomm, p, slot));
        if (!*slot) return RING_OK;
    }
    if (ring__tp_of(*slot) == comm->tp && (want_rdma(comm, p) || want_shm(comm, p))) {
        void *up = NULL;
#if RING_HAVE_RDMA
        if (want_rdma(comm, p)) rc = ring__rdma_transport.upgrade(comm->rdma_ctx, *slot, p, is_send, &up);
        else
#endif
            rc = ring__shm_transport.upgrade(comm->shm_ctx, *slot, p, is_send, &up);
        if (rc != RING_OK) goto fail;
        if (!up) return RING_OK;
        *slot = up;
    }
    *ready = 1;
fail:
    return rc;
}

/* A connection that failed in init (reset, closed, refused, a shared-memory segment the peer
 * already removed) usually has its cause on the star: the rank at its other end failed and
 * said why there before it closed its sockets, or the root said so for it. That notice went
 * out first but on another connection, so a connection the peer broke (RING_ERR_PEER,
 * RING_ERR_PROTOCOL) waits a little for it; an error of this rank's own system calls looks
 * once (waiting there would only hold back this rank's own notice to the others). The message
 * then starts with the cause and keeps what this rank saw. */
#define INIT_CAUSE_NS (300LL * 1000000LL)
static ring_result_t init_cause(ring_comm_t *comm, ring_result_t rc)
{
    if (comm->watch_started || !comm->bs) return rc;
    char seen[RING__ERRMSG_MAX];
    snprintf(seen, sizeof seen, "%s", comm->errmsg);
    const int64_t until = ring__now_ns() + (rc == RING_ERR_PEER || rc == RING_ERR_PROTOCOL ? INIT_CAUSE_NS : 0);
    for (;;) {
        ring_result_t c = ring__watch_init_check(comm, "connecting to peers");
        if (c != RING_OK) {
            char cause[RING__ERRMSG_MAX];
            snprintf(cause, sizeof cause, "%s", comm->errmsg);
            return ring__seterr(comm, c, "%.600s (this rank saw: %.400s)", cause, seen);
        }
        if (ring__now_ns() >= until || atomic_load(&comm->aborted)) return rc;
        ring__nap_ns(1000000);
    }
}

ring_result_t ring__conn_establish(ring_comm_t *comm, const int *to, int nto, const int *from, int nfrom,
                                   int64_t deadline_ns)
{
    ring_result_t rc = RING_OK;
    const ring__transport_t *tp = comm->tp;
    uint8_t *done = NULL;
    for (int i = 0; i < nto + nfrom; i++) {
        int p = i < nto ? to[i] : from[i - nto];
        if (p < 0 || p >= comm->nranks)
            return ring__seterr(comm, RING_ERR_INVALID_ARG, "connect: rank %d out of range [0, %d)", p, comm->nranks);
        RING_CHECK(check_forced(comm, p));
    }
    /* A connection is finished once it no longer needs its transport's attention: TCP
     * connections to same-host peers still have the shared-memory upgrade to go through. */
    done = calloc((size_t)(nto + nfrom) + 1, 1);
    if (!done) return ring__seterr(comm, RING_ERR_NOMEM, "connect: out of memory");
    for (;;) {
        int missing = 0;
        for (int i = 0; i < nto + nfrom; i++) {
            int is_send = i < nto, p = is_send ? to[i] : from[i - nto];
            if (p == comm->rank) continue;
            if (done[i]) {
                /* A made TCP connection may already carry the peer's refusal, or its close:
                 * no failure notice travels before init ends (watch.c), so look. */
                void *c = is_send ? comm->conn_send[p] : comm->conn_recv[p];
                if (ring__tp_of(c) == &ring__tcp_transport) RING_CHECK(ring__tcp_transport.check(c));
                continue;
            }
            int ready;
            RING_CHECK(step_conn(comm, p, is_send, &ready));
            done[i] = (uint8_t)ready;
            missing += !ready;
        }
        if (!missing) {
            if (comm->shm_ctx) RING_CHECK(ring__shm_forced_result(comm->shm_ctx));
#if RING_HAVE_RDMA
            if (comm->rdma_ctx) RING_CHECK(ring__rdma_forced_result(comm->rdma_ctx));
#endif
            break;
        }
        if (atomic_load(&comm->aborted)) {
            rc = ring__seterr(comm, RING_ERR_ABORTED, "aborted while connecting to peers");
            goto fail;
        }
        if (atomic_load(&comm->remote_failed)) {
            rc = ring__remote_result(comm, "connecting to peers");
            goto fail;
        }
        /* In init nothing else hears a rank that failed in its own init, or died, while this
         * one waits for its connection (or for the root, which waits for it). */
        rc = ring__watch_init_check(comm, "connecting to peers");
        if (rc != RING_OK) {
            free(done);
            return rc;
        }
        if (ring__now_ns() > deadline_ns) {
            /* Name the first connection that is missing: that peer is the one to look at. */
            char d[160];
            int p = -1, send = 0;
            for (int i = 0; i < nto + nfrom && p < 0; i++)
                if (!done[i] && (i < nto ? to[i] : from[i - nto]) != comm->rank) p = i < nto ? to[i] : from[i - nto], send = i < nto;
            void *c = send ? comm->conn_send[p] : comm->conn_recv[p];
            ring__peer_desc(comm, p, d, sizeof d);
            /* Ranks of one machine in different network namespaces: each has its own loopback,
             * which init's cross-machine check (comm.c) cannot tell apart. */
            ring__sockaddr_t pa;
            ring__peer_sockaddr(&comm->peers[p], &pa);
            ring__sockaddr_t ma = {.len = comm->data_addr_len};
            memcpy(&ma.ss, &comm->data_addr, sizeof ma.ss);
            int peer_lo = ring__addr_is_loopback(&pa), mine_lo = ring__addr_is_loopback(&ma);
            char lo[200] = "";
            if (!c && peer_lo != mine_lo)
                snprintf(lo, sizeof lo,
                         " (%s data address is a loopback one, which only %s network namespace reaches: if the "
                         "two are not in one, set RING_SOCKET_IFNAME%s)",
                         peer_lo ? "its" : "this rank's", peer_lo ? "its own" : "this", peer_lo ? " on that rank" : "");
            rc = ring__seterr(comm, RING_ERR_TIMEOUT,
                              "timed out after %d ms connecting: %d connection(s) not established, e.g. the %s %s%s%s",
                              comm->params.timeout_ms, missing, send ? "connection to" : "connection from", d,
                              c ? " (stuck in the shared-memory or verbs handshake)" : "", lo);
            goto fail;
        }
        struct pollfd fds[MAX_FDS];
        int nf = tp->listen_pollfds(comm->lcomm, fds, MAX_FDS - 1);
        if (comm->shm_ctx) nf += ring__shm_transport.upgrade_pollfds(comm->shm_ctx, fds + nf, MAX_FDS - 1 - nf);
#if RING_HAVE_RDMA
        if (comm->rdma_ctx) nf += ring__rdma_transport.upgrade_pollfds(comm->rdma_ctx, fds + nf, MAX_FDS - 1 - nf);
#endif
        fds[nf++] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
        poll(fds, (nfds_t)nf, 10);
    }
fail:
    free(done);
    /* Not for this rank's own lack of memory, an abort, or the deadline (the loop looked). */
    if (rc == RING_ERR_PEER || rc == RING_ERR_PROTOCOL || rc == RING_ERR_SYSTEM || rc == RING_ERR_CONNECT)
        rc = init_cause(comm, rc);
    return rc;
}

ring_result_t ring__p2p_connect(ring_comm_t *comm, const int *peers, int npeers)
{
    if (!comm || npeers < 0 || (npeers && !peers))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "p2p connect: bad arguments");
    if (comm->nranks == 1) return RING_OK;
    ring_result_t fc = ring__failed_result(comm, "p2p connect");
    if (fc != RING_OK) return fc;
    int64_t deadline = ring__now_ns() + (int64_t)comm->params.timeout_ms * 1000000LL;
    engine_acquire(comm);
    ring_result_t rc = ring__conn_establish(comm, peers, npeers, peers, npeers, deadline);
    engine_release(comm);
    if (rc == RING_OK) {
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "p2p: connected with %d peer(s)", npeers);
    } else {
        ring__comm_fail(comm, rc, NULL);
    }
    return rc;
}

typedef struct slot {
    void *req;
    int posted, done;
} slot;

int ring__wait_stop(ring_comm_t *comm, int64_t idle_ns, int *relooked)
{
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire)) return RING__WAIT_ABORTED;
    if (atomic_load_explicit(&comm->remote_failed, memory_order_acquire)) return RING__WAIT_REMOTE;
    /* A rank that left may have done all this wait needs before it left: the caller may only
     * have been slow to look (descheduled between its look and this check while the others
     * finished the call and destroyed their communicators). So a goodbye first buys one more
     * look, and ends the wait only if that look, too, found nothing new. */
    if (relooked && ring__watch_someone_left(comm) >= 0) {
        if (*relooked) return RING__WAIT_LEFT;
        *relooked = 1;
    }
    /* Ranks whose calls picked different algorithms may never exchange a message, so nothing
     * here would see the difference before the timeout: the root compares the stuck calls
     * (watch.c). Once per call, and only from a call stuck this long. */
    if (idle_ns >= ring__stuck_ns(comm)) ring__watch_stuck(comm);
    if (idle_ns > (int64_t)comm->params.timeout_ms * 1000000LL) return RING__WAIT_TIMEOUT;
    return RING__WAIT_GO_ON;
}

ring_result_t ring__wait_stop_error(ring_comm_t *comm, const ring__opdesc_t *op, int stop, const char *how,
                                    const char *who, const char *doing)
{
    const char *name = ring__coll_name(op->coll);
    if (stop == RING__WAIT_REMOTE) return ring__remote_result(comm, name);
    char why[128];
    if (stop == RING__WAIT_LEFT) snprintf(why, sizeof why, "failed: a rank called ring_comm_destroy");
    else if (stop == RING__WAIT_ABORTED) snprintf(why, sizeof why, "aborted by ring_comm_abort");
    else snprintf(why, sizeof why, "timed out: no progress for %d ms (RING_TIMEOUT_MS)", comm->params.timeout_ms);
    return ring__seterr(comm, stop == RING__WAIT_LEFT ? RING_ERR_PEER : stop == RING__WAIT_ABORTED ? RING_ERR_ABORTED : RING_ERR_TIMEOUT,
                        "%s #%llu (%s) %s while waiting for %s to %s", name, (unsigned long long)op->seq, how, why, who,
                        doing);
}

void ring__diag_bytes(char *b, size_t n, uint64_t v)
{
    if (v < 1024) snprintf(b, n, "%llu B", (unsigned long long)v);
    else if (v < 1024 * 1024) snprintf(b, n, "%.1f KiB", (double)v / 1024);
    else snprintf(b, n, "%.1f MiB", (double)v / (1024 * 1024));
}

void ring__diag_put(char *out, size_t len, size_t *o, const char *fmt, ...)
{
    if (*o + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + *o, len - *o, fmt, ap);
    va_end(ap);
    if (w > 0) *o = RING__MIN(*o + (size_t)w, len - 1);
}

size_t ring__diag_cut(const char *text, size_t max)
{
    size_t n = strnlen(text, max + 1);
    if (n <= max || max < 2) return RING__MIN(n, max);
    /* text[max] exists (n > max), and text[max + 1] at worst is its terminator. */
    for (size_t i = max + 1; i > 0; i--)
        if (text[i - 1] == ';' && text[i] == ' ') return i - 1;
    return max;
}

void ring__conns_diag(void *const *conns, int nconns, char *text, size_t len)
{
    size_t t = strlen(text);
    for (int k = 0; k < nconns && t + 3 < len; k++) {
        const ring__transport_t *tp = conns[k] ? ring__tp_of(conns[k]) : NULL;
        if (!tp || !tp->diag) continue;
        char d[400];
        d[0] = '\0';
        tp->diag(conns[k], d, sizeof d);
        if (d[0]) t += (size_t)snprintf(text + t, len - t, "; %s", d);
    }
}

ring_result_t ring__wait_idle(ring_comm_t *comm, void *const *conns, int nconns, int64_t idle_ns, int *stop)
{
    const int64_t timeout_ns = (int64_t)comm->params.timeout_ms * 1000000LL;
    *stop = ring__wait_stop(comm, idle_ns, NULL);
    if (*stop != RING__WAIT_GO_ON) return RING_OK;
    /* A reply usually arrives within microseconds; sleeping costs a wake-up that is longer
     * than that, so poll actively for a short while first. */
    if (idle_ns < (int64_t)comm->params.spin_us * 1000) {
        ring__spin_once(comm, idle_ns);
        return RING_OK;
    }
    struct pollfd fds[MAX_FDS];
    int owner[MAX_FDS], nf = 0;
    for (int k = 0; k < nconns && nf < MAX_FDS - 1; k++) {
        int got = ring__tp_of(conns[k])->pollfds(conns[k], fds + nf, MAX_FDS - 1 - nf);
        if (got < 0) return RING_OK; /* it can move bytes now: no sleep */
        for (int j = 0; j < got; j++) owner[nf + j] = k;
        nf += got;
    }
    fds[nf] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
    int64_t left_ms = (timeout_ns - idle_ns) / 1000000 + 1;
    /* A full table may have left sockets out (a root of many peers with many sockets each):
     * their bytes would not wake this poll, so it only naps. */
    if (nf >= MAX_FDS - 1) left_ms = 1;
    /* Wake up in time for the stuck report (ring__wait_stop). */
    const int64_t stuck_ns = ring__stuck_ns(comm);
    if (idle_ns < stuck_ns) left_ms = RING__MIN(left_ms, (stuck_ns - idle_ns) / 1000000 + 1);
    int r = poll(fds, (nfds_t)nf + 1, (int)RING__MIN(left_ms, 1000));
    if (r < 0 && errno != EINTR) return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "poll");
    for (int i = 0; r > 0 && i < nf; i++)
        if (fds[i].revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
            ring_result_t rc = ring__tp_of(conns[owner[i]])->check(conns[owner[i]]);
            if (rc != RING_OK) return rc;
        }
    return RING_OK;
}

ring_result_t ring__p2p_run_locked(ring_comm_t *comm, ring__p2p_op_t *ops, int nops)
{
    ring_result_t rc = RING_OK;
    slot st[RING__P2P_MAX_OPS];
    void *conns[2 * RING__P2P_MAX_OPS];
    int nconn = 0, ndone = 0;
    ring__idle_t idle;
    ring__idle_start(&idle, (int64_t)comm->params.spin_us * 1000);

    if (nops < 0 || nops > RING__P2P_MAX_OPS || (nops && !ops))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "p2p: %d ops (at most %d)", nops, RING__P2P_MAX_OPS);
    /* Only the entries in use: all 64 are 1 KiB, cleared for the 2-4 ops of a small exchange
     * (7% of a 2-rank 8-byte all-reduce, docs/performance.md 2026-11-27 (3)). */
    memset(st, 0, (size_t)nops * sizeof *st);
    for (int i = 0; i < nops; i++) {
        int p = ops[i].peer;
        if (p < 0 || p >= comm->nranks || p == comm->rank || (!ops[i].buf && ops[i].len))
            return ring__seterr(comm, RING_ERR_INVALID_ARG, "p2p: op %d: bad peer %d or NULL buffer", i, p);
        void *c = ops[i].is_send ? comm->conn_send[p] : comm->conn_recv[p];
        if (!c)
            return ring__seterr(comm, RING_ERR_INVALID_ARG, "p2p: no %s connection with rank %d (ring__p2p_connect first)",
                                ops[i].is_send ? "send" : "receive", p);
        int seen = 0; /* each connection once, for progress and poll */
        for (int k = 0; k < nconn; k++) seen |= conns[k] == c;
        if (!seen) conns[nconn++] = c;
    }

    while (ndone < nops) {
        int busy = 0, moved = 0;
        /* Post in list order per connection: an op waits while an earlier op on its
         * connection is unposted, which keeps the n-th send matched with the n-th receive. */
        void *blocked[2 * RING__P2P_MAX_OPS];
        int nblocked = 0;
        for (int i = 0; i < nops; i++) {
            if (st[i].posted) continue;
            ring__p2p_op_t *o = &ops[i];
            void *c = o->is_send ? comm->conn_send[o->peer] : comm->conn_recv[o->peer];
            int isblocked = 0;
            for (int k = 0; k < nblocked; k++) isblocked |= blocked[k] == c;
            if (isblocked) continue;
            /* An empty receive may come without a buffer, but to a transport a NULL buffer asks
             * for a zero-copy receive, which p2p never releases: give it a harmless address. */
            void *buf = o->buf ? o->buf : (void *)&st[i];
            if (o->is_send) RING_CHECK(ring__tp_of(c)->isend(c, buf, o->len, NULL, &st[i].req));
            else RING_CHECK(ring__tp_of(c)->irecv(c, buf, o->len, NULL, &st[i].req));
            if (!st[i].req) {
                blocked[nblocked++] = c;
                continue;
            }
            st[i].posted = 1;
            busy = 1;
        }
        for (int k = 0; k < nconn; k++) RING_CHECK(ring__tp_of(conns[k])->progress(conns[k], &moved));
        for (int i = 0; i < nops; i++) {
            if (!st[i].posted || st[i].done) continue;
            void *c = ops[i].is_send ? comm->conn_send[ops[i].peer] : comm->conn_recv[ops[i].peer];
            RING_CHECK(ring__tp_of(c)->test(st[i].req, &st[i].done));
            if (st[i].done) {
                st[i].req = NULL;
                ndone++;
                busy = 1;
                if (ops[i].on_done) RING_CHECK(ops[i].on_done(comm, ops[i].arg));
            }
        }
        if (ndone == nops) break;

        if ((busy || moved) && !ring__stop_pending(comm)) {
            ring__idle_progress(&idle);
            continue;
        }
        int stop;
        RING_CHECK(ring__wait_idle(comm, conns, nconn, ring__idle_ns(&idle), &stop));
        if (stop == RING__WAIT_GO_ON) continue;
        if (stop == RING__WAIT_REMOTE) {
            rc = ring__remote_result(comm, "p2p");
            goto fail;
        }
        /* Name the first unfinished op: in a chain of point-to-point steps, that is the peer
         * this rank is waiting for. */
        int w = 0;
        while (w < nops && st[w].done) w++;
        char d[160], why[96];
        ring__peer_desc(comm, ops[w].peer, d, sizeof d);
        if (stop == RING__WAIT_ABORTED) snprintf(why, sizeof why, "aborted by ring_comm_abort");
        else snprintf(why, sizeof why, "timed out: no progress for %d ms (RING_TIMEOUT_MS)", comm->params.timeout_ms);
        /* What the kernel says of the connections, where the wait ran out: a closed window, a
         * lossy path and a crawling one look alike from here otherwise. */
        char state[600] = "";
        if (stop == RING__WAIT_TIMEOUT) ring__conns_diag(conns, nconn, state, sizeof state);
        rc = ring__seterr(comm, stop == RING__WAIT_ABORTED ? RING_ERR_ABORTED : RING_ERR_TIMEOUT,
                          "%s while %s %zu bytes %s %s%s", why, ops[w].is_send ? "sending" : "receiving", ops[w].len,
                          ops[w].is_send ? "to" : "from", d, state);
        goto fail;
    }
fail:
    return rc;
}

ring_result_t ring__p2p_run(ring_comm_t *comm, ring__p2p_op_t *ops, int nops)
{
    if (!comm) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "p2p: comm is NULL");
    ring_result_t rc = ring__failed_result(comm, "p2p");
    if (rc != RING_OK) return rc;
    engine_acquire(comm);
    rc = ring__p2p_run_locked(comm, ops, nops);
    engine_release(comm);
    /* Like the public calls, a bad argument is refused without failing the communicator. */
    if (rc != RING_OK && rc != RING_ERR_INVALID_ARG) ring__comm_fail(comm, rc, NULL);
    return rc;
}
