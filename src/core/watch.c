/*
 * Failure propagation over the bootstrap star.
 *
 * The star (every rank's TCP connection to rank 0, kept from the bootstrap) carries notice
 * frames once the bootstrap is over (watch.h); the watcher reads them after init:
 *  - FAIL: a rank's first failure (its message), sent to the root; the root formats it as
 *    "rank k (host) failed: ..." and relays it to every other rank. The root's own first
 *    failure goes to everyone directly.
 *  - BYE: sent by ring_comm_destroy, so that an orderly exit is not taken for a death. The
 *    root relays a rank's BYE (origin = that rank) to every other rank: a rank whose call
 *    fails because a peer left in the middle of it learns at once that the peer called
 *    ring_comm_destroy, instead of waiting out the cause grace (comm.c) for a FAIL that is
 *    not coming.
 *  - WAITING: a stuck report, sent to the root (never relayed) by a collective call that has
 *    made no progress for min(1 s, RING_TIMEOUT_MS / 4), once per call: its 40-byte
 *    descriptor (engine.h; the sequence number is in it) as 80 hex digits. Ranks whose counts
 *    put them on different algorithms (ring against recursive halving or doubling) may never
 *    exchange a message, so no descriptor check sees the difference and every rank would wait
 *    out RING_TIMEOUT_MS. The root keeps each rank's last report (its own without a frame) and,
 *    when two ranks are stuck in the same call (same sequence number) with descriptors that
 *    differ, fails the communicator with RING_ERR_MISMATCH naming both calls, as for its own
 *    first failure: every rank's call returns within one wake-up. Different sequence numbers
 *    are not compared: a rank may be one call ahead of another. A call that progresses sends
 *    nothing.
 * A star connection that closes without BYE means the process died (the kernel closes a
 * killed process's sockets at once): the root turns that into a FAIL naming the rank, and
 * ranks that lose the root do the same for rank 0.
 *
 * One watcher thread per communicator sleeps in poll() on its star sockets and a stop
 * eventfd, so detection does not depend on the application calling into the library, and an
 * idle rank costs nothing. On a notice it records the failure (first failure wins) and
 * writes the communicator's wake eventfd, which every wait in the engine polls: a call in
 * flight returns within one wake-up. Codes travel with the notice for MISMATCH and TIMEOUT
 * (every rank reports the same kind of error); anything else arrives as RING_ERR_PEER.
 *
 * Bytes: one 16-byte header + up to 800 bytes of text per notice; root relays to N-2 ranks
 * (for BYE: to those that have not left yet). WAITING: 16 + 80 bytes, at most one per rank
 * and call, only from calls stuck that long; none in the normal case.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "engine.h"
#include "log.h"
#include "net.h"
#include "param.h"
#include "transport.h"
#include "watch.h"
#include "wire.h"

#define NOTICE_MAGIC 0x52474e54u /* "RGNT" */
#define FRAME_MAX (RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX)
#define SEND_WAIT_NS (200LL * 1000000LL)

_Static_assert(RING__NOTICE_WAITING_TEXT == 2 * RING__DESC_LEN, "a stuck report carries one descriptor in hex");

size_t ring__notice_build(unsigned char *buf, uint32_t type, uint32_t origin, uint32_t code, const char *text)
{
    size_t n = text ? strlen(text) : 0;
    if (n > RING__NOTICE_TEXT_MAX) n = RING__NOTICE_TEXT_MAX;
    ring__put32(buf, NOTICE_MAGIC);
    ring__put32(buf + 4, type);
    ring__put32(buf + 8, origin);
    ring__put32(buf + 12, (code & 0xffffu) | ((uint32_t)n << 16));
    if (n) memcpy(buf + RING__NOTICE_HDR, text, n);
    return RING__NOTICE_HDR + n;
}

long ring__notice_parse(const unsigned char *buf, size_t len, uint32_t *type, uint32_t *origin, uint32_t *code,
                        const unsigned char **text, size_t *textlen)
{
    if (len < 4) return 0;
    if (ring__get32(buf) != NOTICE_MAGIC) return -1;
    if (len < RING__NOTICE_HDR) return 0;
    uint32_t t = ring__get32(buf + 4), cl = ring__get32(buf + 12);
    size_t n = cl >> 16;
    uint32_t c = cl & 0xffffu;
    /* A FAIL carries one of the codes wire_code() sends; RING_OK there would make a call in
     * flight return success without finishing (found by tests/fuzz/fuzz_notice). */
    int fail_ok = c == RING_ERR_PEER || c == RING_ERR_MISMATCH || c == RING_ERR_TIMEOUT;
    if (!(t == RING__NOTICE_FAIL && fail_ok) && !(t == RING__NOTICE_BYE && c == 0) && !(t == RING__NOTICE_WAITING && c == 0))
        return -1;
    if (n > RING__NOTICE_TEXT_MAX || (t == RING__NOTICE_WAITING && n != RING__NOTICE_WAITING_TEXT)) return -1;
    if (len < RING__NOTICE_HDR + n) return 0;
    *type = t;
    *origin = ring__get32(buf + 8);
    *code = c;
    *text = buf + RING__NOTICE_HDR;
    *textlen = n;
    return (long)(RING__NOTICE_HDR + n);
}

/* The first failure wins: 1 if this one is it. */
static int fail_record(ring_comm_t *comm, ring_result_t code, const char *msg)
{
    int first = 0;
    pthread_mutex_lock(&comm->err_mu);
    int expected = RING_OK;
    if (atomic_compare_exchange_strong(&comm->fail_code, &expected, (int)code)) {
        snprintf(comm->fail_msg, sizeof comm->fail_msg, "%s", msg);
        first = 1;
    }
    pthread_mutex_unlock(&comm->err_mu);
    return first;
}

static void fail_wake(ring_comm_t *comm, const char *msg)
{
    atomic_store_explicit(&comm->remote_failed, 1, memory_order_release);
    uint64_t one = 1;
    if (comm->wake_fd >= 0 && write(comm->wake_fd, &one, sizeof one) < 0) { /* already signalled */ }
    RING_LOG(RING_LOG_WARN, RING_SUB_INIT, comm->rank, "%s", msg);
}

int ring__fail_remote(ring_comm_t *comm, ring_result_t code, const char *msg)
{
    int first = fail_record(comm, code, msg);
    if (first) fail_wake(comm, msg);
    return first;
}

static void relay(ring_comm_t *comm, uint32_t type, int origin, uint32_t code, const char *text, int skip);

/* Root: a failure it learnt of, relayed to the other ranks before its own calls wake up. The
 * other way round, a program that exits on the error (abort, then exit) could end the process
 * before the watcher sent the relay, and the ranks would see rank 0's connection close and
 * report rank 0 dead (4 of 13 runs after a kill -9 with 5% packet loss in a review's runs). */
static void fail_relayed(ring_comm_t *comm, ring_result_t code, const char *msg, int origin, uint32_t wire, int skip)
{
    /* Counted before the failure shows: a new call fails at once on fail_code, and a program
     * that then aborts must not exit under the relay (ring__watch_relay_wait). */
    atomic_fetch_add(&comm->relaying, 1);
    if (fail_record(comm, code, msg)) {
        relay(comm, RING__NOTICE_FAIL, origin, wire, msg, skip);
        fail_wake(comm, msg);
    }
    atomic_fetch_sub(&comm->relaying, 1);
}

void ring__watch_relay_wait(ring_comm_t *comm)
{
    /* Each relay gives a peer whose socket does not drain SEND_WAIT_NS. */
    const int64_t until = ring__now_ns() + 5000LL * 1000000LL;
    while (atomic_load(&comm->relaying) > 0 && ring__now_ns() < until) ring__nap_ns(1000000);
}

int ring__watch_someone_left(ring_comm_t *comm)
{
    int who = -1;
    if (comm->nranks < 2 || !comm->watch_left) return -1;
    pthread_mutex_lock(&comm->star_mu);
    for (int r = 0; r < comm->nranks && who < 0; r++)
        if (r != comm->rank && comm->watch_left[r]) who = r;
    pthread_mutex_unlock(&comm->star_mu);
    return who;
}

ring_result_t ring__remote_result(ring_comm_t *comm, const char *what)
{
    char buf[RING__ERRMSG_MAX];
    pthread_mutex_lock(&comm->err_mu);
    snprintf(buf, sizeof buf, "%s: %.900s", what, comm->fail_msg);
    pthread_mutex_unlock(&comm->err_mu);
    ring__errmsg_put(comm, buf);
    int fc = atomic_load(&comm->fail_code);
    /* remote_failed is only set after a failure code was recorded; never report success. */
    return fc == RING_OK ? RING_ERR_INTERNAL : (ring_result_t)fc;
}

/* Whole frame or nothing useful: a short deadline, since a peer that does not read its star
 * socket for that long is dead or wedged and will learn from its data connections. Called
 * with star_mu held (it also guards watch_left). */
static void send_frame(ring_comm_t *comm, int fd, const unsigned char *f, size_t n)
{
    if (fd < 0) return;
    int r = ring__io_full(fd, (void *)f, n, 1, ring__now_ns() + SEND_WAIT_NS, -1);
    if (r != 0)
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "could not pass a notice on the bootstrap connection: %s",
                 strerror(-r));
}

static uint32_t wire_code(ring_result_t code)
{
    return code == RING_ERR_MISMATCH || code == RING_ERR_TIMEOUT ? (uint32_t)code : (uint32_t)RING_ERR_PEER;
}

/* Root: tell every rank except `skip` (and those that left). */
static void relay(ring_comm_t *comm, uint32_t type, int origin, uint32_t code, const char *text, int skip)
{
    ring__bootstrap_t *bs = comm->bs;
    /* Tests: a root slow to relay a failure (a loaded host, a lossy link to the ranks). */
    const char *hold = type == RING__NOTICE_FAIL ? getenv("RING_TEST_RELAY_HOLD_MS") : NULL;
    for (long long ms = hold && *hold ? atoll(hold) : 0; ms > 0; ms -= 10) ring__nap_ns(10000000L);
    unsigned char f[FRAME_MAX];
    size_t n = ring__notice_build(f, type, (uint32_t)origin, code, text);
    pthread_mutex_lock(&comm->star_mu);
    for (int r = 1; r < comm->nranks; r++)
        if (r != skip && !comm->watch_left[r]) send_frame(comm, bs->rank_fds[r], f, n);
    pthread_mutex_unlock(&comm->star_mu);
}

static void host_of(ring_comm_t *comm, int r, char *out, size_t len)
{
    const ring__peer_info_t *pi = &comm->peers[r];
    snprintf(out, len, "%.64s, pid %u", pi->host, (unsigned)pi->pid);
}

void ring__watch_note_left(ring_comm_t *comm, int left, const char *what, char *text, size_t len)
{
    char h[96];
    host_of(comm, left, h, sizeof h);
    size_t used = strnlen(text, len);
    if (used + 1 < len)
        snprintf(text + used, len - used, "; rank %d (%s) had called ring_comm_destroy while this rank was still in %s with it",
                 left, h, what);
}

void ring__watch_notify(ring_comm_t *comm, ring_result_t code, const char *msg)
{
    if (!comm || comm->nranks < 2 || !comm->bs || !comm->peers || !comm->watch_left) return;
    char text[RING__ERRMSG_MAX], h[96];
    if (comm->rank == 0) {
        host_of(comm, 0, h, sizeof h);
        snprintf(text, sizeof text, "rank 0 (%s) failed: %.680s", h, msg);
        relay(comm, RING__NOTICE_FAIL, 0, wire_code(code), text, -1);
        return;
    }
    unsigned char f[FRAME_MAX];
    size_t n = ring__notice_build(f, RING__NOTICE_FAIL, (uint32_t)comm->rank, wire_code(code), msg);
    pthread_mutex_lock(&comm->star_mu);
    send_frame(comm, comm->bs->root_fd, f, n);
    pthread_mutex_unlock(&comm->star_mu);
}

/* A notice from rank `from` (the root's view) or from the root, or garbage on that
 * connection (garbage: the sender knows nothing of it, so it is told too). The relay carries
 * a code the ranks' parser takes (wire_code): a raw RING_ERR_PROTOCOL would be garbage to them. */
static void on_fail(ring_comm_t *comm, int from, uint32_t code, const char *text, int garbage)
{
    if (comm->rank != 0) {
        ring__fail_remote(comm, (ring_result_t)code, text);
        return;
    }
    char msg[RING__ERRMSG_MAX], h[96];
    host_of(comm, from, h, sizeof h);
    /* Room for the hint within what a relay carries (RING__NOTICE_TEXT_MAX); a timeout's
     * transport clauses are dropped whole where they do not fit. */
    const size_t room = code == RING_ERR_TIMEOUT ? 560 : 700, keep = ring__diag_cut(text, room);
    snprintf(msg, sizeof msg, "rank %d (%s) failed: %.*s%s", from, h, (int)keep, text, text[keep] ? " (...)" : "");
    if (code == RING_ERR_TIMEOUT && !garbage) ring__watch_stuck_hint(comm, from, msg, sizeof msg);
    fail_relayed(comm, (ring_result_t)code, msg, from, wire_code((ring_result_t)code), garbage ? -1 : from);
}

static void on_gone(ring_comm_t *comm, int r, const char *how)
{
    char msg[RING__NOTICE_TEXT_MAX + 1], h[96];
    host_of(comm, r, h, sizeof h);
    snprintf(msg, sizeof msg, "rank %d (%s) died: its bootstrap connection %s without ring_comm_destroy", r, h, how);
    if (comm->rank != 0) {
        ring__fail_remote(comm, RING_ERR_PEER, msg);
        return;
    }
    fail_relayed(comm, RING_ERR_PEER, msg, r, wire_code(RING_ERR_PEER), r);
}

int ring__watch_stuck_at_root(ring_comm_t *comm, int r, const unsigned char *desc)
{
    char msg[RING__ERRMSG_MAX];
    int bad = 0;
    if (comm->rank != 0 || r < 0 || r >= comm->nranks) return 0;
    pthread_mutex_lock(&comm->star_mu);
    if (!comm->stuck_desc) { /* destroyed, or never opened */
        pthread_mutex_unlock(&comm->star_mu);
        return 0;
    }
    memcpy(comm->stuck_desc + (size_t)r * RING__DESC_LEN, desc, RING__DESC_LEN);
    if (comm->stuck_at) comm->stuck_at[r] = ring__now_ns();
    for (int q = 0; q < comm->nranks && !bad; q++) {
        const unsigned char *o = comm->stuck_desc + (size_t)q * RING__DESC_LEN;
        /* Only the same call: another sequence number is a rank a call ahead or behind. */
        if (q == r || ring__get32(o) == 0 || ring__desc_seq(o) != ring__desc_seq(desc)) continue;
        bad = ring__desc_conflict(desc, r, o, q, msg, sizeof msg);
    }
    pthread_mutex_unlock(&comm->star_mu);
    /* As the root's own first failure: everyone, r included, is told. */
    if (bad) fail_relayed(comm, RING_ERR_MISMATCH, msg, r, RING_ERR_MISMATCH, -1);
    return bad;
}

void ring__watch_stuck_hint(ring_comm_t *comm, int timed_out, char *text, size_t len)
{
    char list[160];
    size_t o = 0;
    int missing = 0, waiting = 0, n = comm->nranks;
    list[0] = '\0';
    /* Two ranks: the timeout names the other one already. */
    if (comm->rank != 0 || n < 3 || timed_out < 0 || timed_out >= n) return;
    pthread_mutex_lock(&comm->star_mu);
    /* The call is the one rank timed_out reported stuck in (rank 0's own report is recorded
     * without a frame), RING_TIMEOUT_MS / 4 into the stall that timed out: a report older than
     * RING_TIMEOUT_MS is an earlier call's, and the one that timed out made none (the
     * shared-memory all-reduce and device buffers do not report), so nothing can be said. */
    const unsigned char *mine = comm->stuck_desc ? comm->stuck_desc + (size_t)timed_out * RING__DESC_LEN : NULL;
    const int64_t recent = ring__now_ns() - (int64_t)comm->params.timeout_ms * 1000000LL;
    const int fresh = mine && comm->stuck_at && ring__get32(mine) != 0 && comm->stuck_at[timed_out] > recent;
    const uint64_t seq = fresh ? ring__desc_seq(mine) : UINT64_MAX;
    for (int q = 0; seq != UINT64_MAX && q < n; q++) {
        const unsigned char *d = comm->stuck_desc + (size_t)q * RING__DESC_LEN;
        if (q == timed_out) continue;
        if (ring__get32(d) != 0 && ring__desc_seq(d) >= seq) {
            waiting++;
            continue;
        }
        if (++missing <= 8 && o < sizeof list)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", o ? ", " : "", q);
    }
    pthread_mutex_unlock(&comm->star_mu);
    /* A report from another rank shows that this call's waits report; more than half silent
     * says nothing about who is to blame. */
    if (missing == 0 || waiting == 0 || 2 * missing > n) return;
    size_t t = strlen(text);
    if (t + 1 < len)
        snprintf(text + t, len - t, "; every rank but %s%s told rank 0 it was waiting in this call: look at %s first",
                 list, missing > 8 ? ", ..." : "", missing == 1 ? "that rank" : "those ranks");
}

void ring__watch_stuck(ring_comm_t *comm)
{
    const ring__opdesc_t *op = comm->stuck_op;
    if (!op || comm->stuck_said == op->seq + 1) return;
    comm->stuck_said = op->seq + 1;
    if (comm->nranks < 2 || !comm->bs || !comm->watch_left || !comm->peers) return;
    unsigned char d[RING__DESC_LEN];
    ring__desc_build(d, op, comm->stuck_algo);
    if (comm->rank == 0) {
        ring__watch_stuck_at_root(comm, 0, d);
        return;
    }
    static const char digits[] = "0123456789abcdef";
    char hex[RING__NOTICE_WAITING_TEXT + 1];
    for (int i = 0; i < RING__DESC_LEN; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[RING__NOTICE_WAITING_TEXT] = '\0';
    unsigned char f[RING__NOTICE_HDR + RING__NOTICE_WAITING_TEXT];
    size_t n = ring__notice_build(f, RING__NOTICE_WAITING, (uint32_t)comm->rank, 0, hex);
    pthread_mutex_lock(&comm->star_mu);
    send_frame(comm, comm->bs->root_fd, f, n);
    pthread_mutex_unlock(&comm->star_mu);
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "%s #%llu: no progress for %lld ms, told the root",
             ring__coll_name(op->coll), (unsigned long long)op->seq, (long long)(ring__stuck_ns(comm) / 1000000));
}

/* Root: rank r's stuck report; 0 for garbage (not hex, or no descriptor in it). */
static int on_waiting(ring_comm_t *comm, int r, const unsigned char *t)
{
    unsigned char d[RING__DESC_LEN];
    for (int i = 0; i < RING__DESC_LEN; i++) {
        int hi = ring__hexval(t[2 * i]), lo = ring__hexval(t[2 * i + 1]);
        if (hi < 0 || lo < 0) return 0;
        d[i] = (unsigned char)(hi << 4 | lo);
    }
    if (ring__get32(d) == 0) return 0;
    ring__watch_stuck_at_root(comm, r, d);
    return 1;
}

typedef struct inbuf {
    unsigned char b[FRAME_MAX];
    size_t got;
} inbuf;

/* Drain fd (peer rank r); returns 0 while the connection stays useful, 1 when it is done. */
static int drain(ring_comm_t *comm, int fd, int r, inbuf *ib)
{
    for (;;) {
        ssize_t k = recv(fd, ib->b + ib->got, sizeof ib->b - ib->got, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            pthread_mutex_lock(&comm->star_mu);
            int left = comm->watch_left[r];
            pthread_mutex_unlock(&comm->star_mu);
            if (!left) on_gone(comm, r, k == 0 ? "closed" : "failed");
            return 1;
        }
        ib->got += (size_t)k;
        for (;;) {
            uint32_t type, origin, code;
            const unsigned char *t;
            size_t tl;
            long used = ring__notice_parse(ib->b, ib->got, &type, &origin, &code, &t, &tl);
            if (used == 0) break;
            if (used < 0) {
                char msg[160];
                snprintf(msg, sizeof msg, "garbage on the bootstrap connection with rank %d", r);
                on_fail(comm, r, RING_ERR_PROTOCOL, msg, 1);
                return 1;
            }
            if (type == RING__NOTICE_BYE) {
                /* At the root: the sender's own. Elsewhere: the root's own (origin 0) or a relayed one. */
                int ok = comm->rank == 0 ? origin == (uint32_t)r
                                         : origin < (uint32_t)comm->nranks && origin != (uint32_t)comm->rank;
                int who = (int)origin;
                if (!ok) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "a goodbye for rank %u on the bootstrap connection with rank %d", origin, r);
                    on_fail(comm, r, RING_ERR_PROTOCOL, msg, 1);
                    return 1;
                }
                pthread_mutex_lock(&comm->star_mu);
                comm->watch_left[who] = 1;
                pthread_mutex_unlock(&comm->star_mu);
                if (comm->rank == 0) relay(comm, RING__NOTICE_BYE, r, 0, NULL, r);
            } else if (type == RING__NOTICE_WAITING) {
                /* Only ranks report to the root, each for itself; the root sends none. */
                if (comm->rank != 0 || origin != (uint32_t)r || !on_waiting(comm, r, t)) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "a bad stuck report (origin %u) on the bootstrap connection with rank %d",
                             origin, r);
                    on_fail(comm, r, RING_ERR_PROTOCOL, msg, 1);
                    return 1;
                }
            } else {
                char text[RING__NOTICE_TEXT_MAX + 1];
                memcpy(text, t, tl);
                text[tl] = '\0';
                on_fail(comm, r, code, text, 0);
            }
            memmove(ib->b, ib->b + used, ib->got - (size_t)used);
            ib->got -= (size_t)used;
        }
    }
}

/* The watcher's poll set and read buffers, made by ring__watch_start on the caller's thread so
 * that init fails with RING_ERR_NOMEM where they cannot be had: a watcher that found no memory
 * used to end at once, and the rank ran on deaf to the others' failures. */
typedef struct watch_mem {
    struct pollfd *fds;
    int *who, *done;
    inbuf *ib;
} watch_mem;

static void watch_mem_free(watch_mem *m)
{
    if (!m) return;
    free(m->fds);
    free(m->who);
    free(m->ib);
    free(m->done);
    free(m);
}

static void *watch_main(void *arg)
{
    ring_comm_t *comm = arg;
    ring__bootstrap_t *bs = comm->bs;
    watch_mem *m = comm->watch_mem;
    int n = comm->nranks;
    for (;;) {
        int nf = 0;
        m->fds[nf++] = (struct pollfd){.fd = comm->watch_stop_fd, .events = POLLIN};
        if (comm->rank == 0) {
            for (int r = 1; r < n; r++)
                if (!m->done[r] && bs->rank_fds[r] >= 0) {
                    m->who[nf] = r;
                    m->fds[nf++] = (struct pollfd){.fd = bs->rank_fds[r], .events = POLLIN | POLLRDHUP};
                }
        } else if (!m->done[0] && bs->root_fd >= 0) {
            m->who[nf] = 0;
            m->fds[nf++] = (struct pollfd){.fd = bs->root_fd, .events = POLLIN | POLLRDHUP};
        }
        int k = poll(m->fds, (nfds_t)nf, -1);
        if (k < 0 && errno != EINTR) break;
        if (m->fds[0].revents) break;
        for (int i = 1; k > 0 && i < nf; i++)
            if (m->fds[i].revents) m->done[m->who[i]] = drain(comm, m->fds[i].fd, m->who[i], &m->ib[m->who[i]]);
    }
    return NULL;
}

/* Rank r's star connection fd, looked at without reading (the watcher reads it later): a FAIL
 * notice waiting there, or the connection closed, is the reason to stop waiting. */
static ring_result_t star_look(ring_comm_t *comm, int fd, int r, short revents, const char *what)
{
    unsigned char f[2 * FRAME_MAX];
    ssize_t k = recv(fd, f, sizeof f, MSG_PEEK | MSG_DONTWAIT);
    size_t off = 0;
    int bye = 0;
    while (k > 0 && off < (size_t)k) {
        uint32_t type, origin, code;
        const unsigned char *t;
        size_t tl;
        long used = ring__notice_parse(f + off, (size_t)k - off, &type, &origin, &code, &t, &tl);
        if (used == 0) break;
        if (used < 0)
            return ring__seterr(comm, RING_ERR_PROTOCOL, "%s: garbage on the bootstrap connection with rank %d", what, r);
        /* A goodbye is a rank that finished init and left: not a death, and not this wait's
         * business (the connections it waits on say what it means for them). Only the owner's
         * own: a goodbye the root relayed for another rank does not explain the root's
         * connection closing, and since a look only peeks, it would excuse every later close. */
        bye |= type == RING__NOTICE_BYE && origin == (uint32_t)r;
        if (type == RING__NOTICE_FAIL) {
            /* The cause's code where the ranks keep it: a rank may have finished its init and
             * failed in its first call, a mismatch, while this one still waits (the root, for
             * the others to map its page). That rank "failed during init" with RING_ERR_PEER
             * said neither what nor when. */
            const ring_result_t c = (ring_result_t)wire_code((ring_result_t)code);
            if (r == 0) return ring__seterr(comm, c, "%s: during init: %.*s", what, (int)tl, (const char *)t);
            return ring__seterr(comm, c, "%s: rank %d (%s, pid %u) failed: %.*s", what, r, comm->peers[r].host,
                                comm->peers[r].pid, (int)tl, (const char *)t);
        }
        off += (size_t)used;
    }
    if (!(revents & (POLLRDHUP | POLLHUP | POLLERR)) || bye) return RING_OK;
    /* It may have finished its own init: this rank's is what was going on. */
    return ring__seterr(comm, RING_ERR_PEER, "%s: rank %d (%s, pid %u) died while this rank was in init (its bootstrap connection closed)",
                        what, r, comm->peers[r].host, comm->peers[r].pid);
}

ring_result_t ring__watch_init_check(ring_comm_t *comm, const char *what)
{
    ring__bootstrap_t *bs = comm->bs;
    if (comm->nranks < 2 || !bs || comm->watch_started) return RING_OK;
    if (comm->rank != 0) {
        struct pollfd pf = {.fd = bs->root_fd, .events = POLLIN | POLLRDHUP};
        if (bs->root_fd < 0 || poll(&pf, 1, 0) <= 0) return RING_OK;
        return star_look(comm, bs->root_fd, 0, pf.revents, what);
    }
    if (!bs->rank_fds) return RING_OK;
    /* In batches: one poll per 64 ranks, and a look only where something came. */
    for (int r0 = 1; r0 < comm->nranks; r0 += 64) {
        struct pollfd pf[64];
        int nb = RING__MIN(64, comm->nranks - r0);
        for (int i = 0; i < nb; i++) pf[i] = (struct pollfd){.fd = bs->rank_fds[r0 + i], .events = POLLIN | POLLRDHUP};
        if (poll(pf, (nfds_t)nb, 0) <= 0) continue;
        for (int i = 0; i < nb; i++) {
            if (!pf[i].revents || pf[i].fd < 0) continue;
            ring_result_t rc = star_look(comm, pf[i].fd, r0 + i, pf[i].revents, what);
            if (rc != RING_OK) return rc;
        }
    }
    return RING_OK;
}

ring_result_t ring__watch_open(ring_comm_t *comm)
{
    if (comm->nranks < 2 || comm->watch_left) return RING_OK;
    comm->watch_left = calloc((size_t)comm->nranks, sizeof *comm->watch_left);
    if (comm->rank == 0) {
        comm->stuck_desc = calloc((size_t)comm->nranks, RING__DESC_LEN);
        comm->stuck_at = calloc((size_t)comm->nranks, sizeof *comm->stuck_at);
    }
    if (!comm->watch_left || (comm->rank == 0 && (!comm->stuck_desc || !comm->stuck_at))) {
        free(comm->watch_left);
        comm->watch_left = NULL;
        free(comm->stuck_desc);
        comm->stuck_desc = NULL;
        free(comm->stuck_at);
        comm->stuck_at = NULL;
        return ring__seterr(comm, RING_ERR_NOMEM, "out of memory");
    }
    return RING_OK;
}

ring_result_t ring__watch_start(ring_comm_t *comm)
{
    if (comm->nranks < 2) return RING_OK;
    ring_result_t rc = ring__watch_open(comm);
    if (rc != RING_OK) return rc;
    size_t n = (size_t)comm->nranks;
    watch_mem *m = calloc(1, sizeof *m);
    if (m) {
        m->fds = calloc(n + 1, sizeof *m->fds);
        m->who = calloc(n + 1, sizeof *m->who);
        m->ib = calloc(n, sizeof *m->ib);
        m->done = calloc(n, sizeof *m->done);
    }
    if (!m || !m->fds || !m->who || !m->ib || !m->done) {
        watch_mem_free(m);
        return ring__seterr(comm, RING_ERR_NOMEM, "watcher: out of memory");
    }
    comm->watch_mem = m;
    comm->watch_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (comm->watch_stop_fd < 0) return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "eventfd");
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&comm->watch_thread, NULL, watch_main, comm);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) return ring__seterr_errno(comm, RING_ERR_SYSTEM, e, "cannot start the watcher thread");
    comm->watch_started = 1;
    return RING_OK;
}

void ring__watch_stop(ring_comm_t *comm)
{
    if (comm->watch_started) {
        uint64_t one = 1;
        if (write(comm->watch_stop_fd, &one, sizeof one) < 0) { /* cannot fail for an eventfd */ }
        pthread_join(comm->watch_thread, NULL);
        comm->watch_started = 0;
    }
    if (comm->bs && comm->nranks > 1 && comm->watch_left) {
        unsigned char f[RING__NOTICE_HDR];
        size_t n = ring__notice_build(f, RING__NOTICE_BYE, (uint32_t)comm->rank, 0, NULL);
        pthread_mutex_lock(&comm->star_mu);
        if (comm->rank != 0) {
            send_frame(comm, comm->bs->root_fd, f, n);
        } else {
            for (int r = 1; r < comm->nranks; r++)
                if (!comm->watch_left[r]) send_frame(comm, comm->bs->rank_fds[r], f, n);
        }
        pthread_mutex_unlock(&comm->star_mu);
    }
    if (comm->watch_stop_fd >= 0) close(comm->watch_stop_fd);
    comm->watch_stop_fd = -1;
    free(comm->watch_left);
    comm->watch_left = NULL;
    pthread_mutex_lock(&comm->star_mu);
    free(comm->stuck_desc);
    comm->stuck_desc = NULL;
    free(comm->stuck_at);
    comm->stuck_at = NULL;
    pthread_mutex_unlock(&comm->star_mu);
    watch_mem_free(comm->watch_mem);
    comm->watch_mem = NULL;
}
