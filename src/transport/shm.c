/*
 * Shared-memory transport between two ranks on one host.
 *
 * Setting up: an upgrade of an established, authenticated TCP connection. Its first socket
 * stays as the doorbell and liveness channel; the other sockets are closed.
 *  1. The sending side creates <RING_SHM_DIR>/ringcomm-<uid>-<pid>-<hash>-<from>-<to>-<n>
 *     (O_EXCL, mode 0600), reserves all of it with posix_fallocate (a full /dev/shm is an
 *     error now, not a SIGBUS in the middle of a collective), maps it, writes the header and
 *     sends OFFER (256 bytes) on the socket:
 *       magic "RGSO" | status | segment bytes (u64) | name or reason [240]
 *     status != 0 declines: no segment could be made here, and the text says why.
 *  2. The receiving side opens the file, checks owner, mode, size and header (magic, version,
 *     job nonce, both ranks, geometry), maps it and unlinks it at once: both sides hold the
 *     mapping, so a crash from here on leaves nothing in the directory. It answers ACK:
 *       magic "RGSA" | status (errno of what failed, 0 = mapped)          (8 bytes)
 *  3. Both mapped: the connection is shared memory. Otherwise both keep the TCP connection
 *     (RING_TRANSPORT=auto, logged) or the rank that demanded shm fails (RING_TRANSPORT=shm).
 *  A segment is only left behind if its creator is killed between steps 1 and 2; the next
 *  communicator of the same user sweeps segments whose creator no longer exists. The creator
 *  holds an open-file-description lock on the file until its name is gone (ring__shm_hold),
 *  so that a live creator the sweep cannot see by its pid keeps it.
 *
 * The segment: a control page (header, tail counter, sleep flags, one 128-byte header per
 * slot), then nslots payload slots of slot_bytes each, page-aligned. It is one
 * single-producer/single-consumer queue of slots:
 *  - The sender copies a piece of a message into slot n mod nslots (n counts the slots ever
 *    published): into the slot's header when the piece is at most 104 bytes (a descriptor, a
 *    small all-reduce, or both in one message), else into the slot's page. It writes the
 *    header (message number, message length, and for a message longer than 104 bytes the
 *    offset of the piece) and publishes the slot by storing pub = n + 1 in the header with
 *    release order. A message of L bytes takes max(1, ceil(L / slot_bytes)) slots;
 *    one of at most slot_bytes can be received in place (zero copy).
 *  - The receiver polls pub of the slot it expects next (acquire order). The header and a piece
 *    of up to 48 bytes are on that same cache line, so a small message costs the receiver one
 *    line brought over from the sender's core, two up to 104 bytes (a head counter beside the
 *    slots cost one more, and the page another: 2 ranks, 8 B to 4 KiB all-reduce 5-13% faster,
 *    docs/performance.md 2026-11-27 (2)). It checks the header against the receive it has
 *    posted (message number, exact length), copies the piece out or hands the slot to the
 *    engine, which reduces straight out of it into the user buffer; freed slots advance tail
 *    (release order), always in order. A message of another length fails the receive
 *    (RING_ERR_MISMATCH), but its first bytes, up to the descriptor's 40, are copied into the
 *    receive's buffer first: every collective opens with its descriptor, and with both in hand
 *    the caller can say which calls differ even where the lengths of the first messages do
 *    (src/collectives/rd.c sends its descriptor and a small buffer as one message).
 *  - Waiting: the engine spins first (RING_SPIN_US, yielding the CPU). Before it sleeps in
 *    poll(), a side that waits raises its sleep flag, fences and looks at the queue again; the
 *    other side fences after publishing and, if the flag is up, takes it down and writes one
 *    byte on the socket (Dekker's handshake: one of the two always sees the other). A futex
 *    would not do: a rank may wait on a shared-memory neighbour, a TCP neighbour and the abort
 *    eventfd at once, and only poll() waits on all of them. A pair that keeps each other busy
 *    makes no system call; an idle rank uses no CPU.
 *  - A peer that exits closes the socket, and poll() says so. That is an error only for an
 *    operation that can no longer complete: data published before the peer exited is still
 *    read, as TCP would deliver bytes already sent.
 * Bytes moved per message: one copy into the segment and one out of it, or none out for a
 * zero-copy receive. Nothing goes on the socket but the 264 setup bytes and doorbells.
 */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "msgq.h"
#include "transport.h"
#include "wire.h"

#define SEG_MAGIC 0x52475347u   /* "RGSG" */
#define OFFER_MAGIC 0x5247534fu /* "RGSO" */
#define ACK_MAGIC 0x52475341u   /* "RGSA" */
#define SEG_VERSION 4u /* change BS_VERSION (bootstrap.c) with it */
#define OFFER_LEN 256
#define OFFER_TEXT 240
#define ACK_LEN 8
#define PAGE ((size_t)4096)
#define MAX_SLOTS 64u
#define MIN_SLOT (64 * (size_t)1024)
#define MAX_SLOT (4 * (size_t)1024 * 1024)
#define NAME_PREFIX "ringcomm-"
/* Between a file's creation and its creator's hold on it lie microseconds; the sweep leaves
 * younger files alone. */
#define SWEEP_MIN_AGE_S 2

/* A piece this small travels in its slot's header: up to LINE1_MAX bytes (a descriptor, a
 * descriptor with up to 8 bytes of data, src/collectives/rd.c) on the header's first cache
 * line, up to 104 (a descriptor with up to 64 bytes of data) on its two. */
#define INLINE_MAX 104
#define LINE1_MAX 48

/* Two cache lines per slot: a receiver that sees pub has the header and a small piece at once. */
typedef struct slot_hdr {
    /* (uint32_t)(slot number + 1) once the piece is readable. 32 bits wrap after 4G slots, but
     * the value a reused slot still holds is nslots less than the one awaited, and a fresh
     * segment's 0 is never awaited before the wrap, so no stale value is ever taken as new. */
    alignas(64) _Atomic uint32_t pub;
    uint32_t seq;                     /* message number */
    uint64_t msg_len;
    unsigned char inl[INLINE_MAX];    /* the piece, if it is at most INLINE_MAX bytes */
    /* The piece's offset in its message, last: a message of at most INLINE_MAX bytes is one
     * piece at 0, and neither side touches this for it, so that one of at most LINE1_MAX
     * bytes never brings the second line over to the other core. */
    uint64_t off;
} slot_hdr;
_Static_assert(sizeof(slot_hdr) == 128, "a slot header is two cache lines");
_Static_assert(offsetof(slot_hdr, inl) + LINE1_MAX == 64, "LINE1_MAX bytes of a piece share pub's line");

typedef struct seg_ctl {
    uint32_t magic, version;
    uint64_t nonce;
    uint32_t from, to;
    uint32_t nslots, pad;
    uint64_t slot_bytes, total_bytes, data_off;
    alignas(64) _Atomic uint32_t rx_sleep; /* receiver is about to sleep: ring after publishing */
    alignas(64) _Atomic uint64_t tail; /* slots freed: written by the receiver */
    _Atomic uint32_t tx_sleep;         /* sender waits for a free slot: ring after freeing */
    alignas(64) slot_hdr slots[];
} seg_ctl;

typedef struct shm_ctx shm_ctx;
typedef ring__mq_req_t shm_req;

typedef struct shm_conn {
    ring__conn_t base; /* first: the transport table */
    shm_ctx *ctx;
    int is_send, peer, fd;
    int peer_closed;
    char *seg;
    size_t seg_bytes;
    seg_ctl *ctl;
    char *data;
    uint32_t nslots;
    size_t slot_bytes;
    uint64_t next;    /* sender: next slot to publish; receiver: next slot to read */
    uint64_t freed;   /* receiver: slots freed (= tail) */
    uint64_t tail_seen; /* sender: tail as last read */
    uint8_t *done_at; /* receiver: slot read and released, waiting for the ones before it */
    ring__mq_t q;     /* messages posted, in order */
    ring_result_t failed;
    char desc[160];
} shm_conn;


/* A connection being upgraded: what one side of the OFFER/ACK exchange still has to do. */
typedef struct up {
    int peer, is_send, fd, state;
    void *base;
    unsigned char msg[OFFER_LEN];
    size_t io;
    int status;          /* sender: own status in the OFFER; receiver: own status in the ACK */
    char reason[OFFER_TEXT];
    char path[PATH_MAX];
    char *seg;
    size_t seg_bytes;
    int hold_fd; /* sender: the segment's fd and its hold, until the name is gone, or -1 */
    /* The segment's geometry as checked: the header stays writable by the peer, so what is
     * used is this copy, not what the header says later. */
    uint32_t nslots;
    size_t slot_bytes, data_off;
    struct up *next;
} up;

struct shm_ctx {
    ring_comm_t *comm;
    up *ups;
    uint8_t *keep_tcp[2]; /* by direction and peer: the pair agreed on TCP, do not ask again */
    /* RING_TRANSPORT=shm and a pair could not map a segment: the first reason, reported once
     * every handshake in progress is over (ring__shm_forced_result). */
    ring_result_t forced_rc;
    char forced_msg[RING__ERRMSG_MAX];
};

enum { S_START, S_OFFER_IO, S_ACK_IO, S_DONE };

static ring_result_t shm_init(ring_comm_t *comm, void **ctxp)
{
    shm_ctx *ctx = calloc(1, sizeof *ctx);
    uint8_t *k = calloc(2 * (size_t)comm->nranks, 1);
    if (!ctx || !k) {
        free(ctx);
        free(k);
        return ring__seterr(comm, RING_ERR_NOMEM, "shm: out of memory");
    }
    ctx->comm = comm;
    ctx->keep_tcp[0] = k;
    ctx->keep_tcp[1] = k + comm->nranks;
    *ctxp = ctx;
    return RING_OK;
}

static void up_free(up *u)
{
    if (u->seg) munmap(u->seg, u->seg_bytes);
    /* A sender that gives up before the receiver mapped the segment removes it itself. */
    if (u->is_send && u->path[0]) unlink(u->path);
    if (u->hold_fd >= 0) close(u->hold_fd);
    free(u);
}

static void shm_fini(void *vctx)
{
    shm_ctx *ctx = vctx;
    if (!ctx) return;
    while (ctx->ups) {
        up *n = ctx->ups->next;
        up_free(ctx->ups);
        ctx->ups = n;
    }
    free(ctx->keep_tcp[0]);
    free(ctx);
}

static size_t data_off_for(uint32_t nslots)
{
    return (sizeof(seg_ctl) + nslots * sizeof(slot_hdr) + PAGE - 1) & ~(PAGE - 1);
}

/* Ring edges carry the pipeline's chunks, so a slot holds one whole chunk (zero-copy receive)
 * and there is one slot per message in flight; connections used only by the latency
 * algorithms carry small messages and get a small segment. */
static void geometry(const ring_comm_t *comm, int peer, uint32_t *nslots, size_t *slot_bytes)
{
    if (peer == comm->right) {
        size_t s = (comm->params.chunk_bytes + PAGE - 1) & ~(PAGE - 1);
        *slot_bytes = RING__MAX(MIN_SLOT, RING__MIN(MAX_SLOT, s));
        *nslots = (uint32_t)RING__MAX(2, RING__MIN((int)MAX_SLOTS, comm->params.pipeline_depth));
    } else {
        *slot_bytes = MIN_SLOT;
        *nslots = 4;
    }
}

/* Reasons are cut to fit the OFFER: paths in them may be long, and a cut message beats none. */
static void say(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

static void put_text(unsigned char *m, const char *s)
{
    snprintf((char *)m + 16, OFFER_TEXT, "%s", s);
}

/* Sender, step 1: the segment, or a declining OFFER with the reason. */
static void make_segment(shm_ctx *ctx, up *u)
{
    ring_comm_t *comm = ctx->comm;
    static atomic_uint counter;
    uint32_t nslots;
    size_t slot_bytes;
    geometry(comm, u->peer, &nslots, &slot_bytes);
    size_t doff = data_off_for(nslots), total = doff + (size_t)nslots * slot_bytes;
    int fd = -1, e = 0;
    char name[128];
    for (int tries = 0; tries < 16 && fd < 0; tries++) {
        char rest[48];
        snprintf(rest, sizeof rest, "%d-%d-%u", comm->rank, u->peer, atomic_fetch_add(&counter, 1));
        snprintf(name, sizeof name, NAME_PREFIX "%u-%d-%016llx-%s", (unsigned)geteuid(), (int)getpid(),
                 (unsigned long long)ring__shm_name_tag(comm, rest), rest);
        say(u->path, sizeof u->path, "%s/%s", comm->params.shm_dir, name);
        fd = open(u->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        e = errno;
        if (fd < 0 && e != EEXIST) break;
    }
    if (fd >= 0) ring__shm_hold(fd);
    memset(u->msg, 0, sizeof u->msg);
    ring__put32(u->msg, OFFER_MAGIC);
    if (fd < 0) {
        u->path[0] = '\0';
        say(u->reason, sizeof u->reason, "cannot create a segment in %s: %s", comm->params.shm_dir, strerror(e));
        goto decline;
    }
    /* posix_fallocate returns the error instead of setting errno. */
    e = posix_fallocate(fd, 0, (off_t)total);
    if (e) {
        say(u->reason, sizeof u->reason, "cannot reserve %zu bytes in %s (%s; a container's /dev/shm is often 64 MiB: "
                 "raise it, or set RING_SHM_DIR)", total, comm->params.shm_dir, strerror(e));
        goto decline;
    }
    u->seg = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (u->seg == MAP_FAILED) {
        u->seg = NULL;
        say(u->reason, sizeof u->reason, "cannot map %zu bytes of %s: %s", total, u->path, strerror(errno));
        goto decline;
    }
    u->hold_fd = fd; /* closed once the name is gone (up_free) */
    u->seg_bytes = total;
    seg_ctl *h = (seg_ctl *)u->seg;
    h->magic = SEG_MAGIC;
    h->version = SEG_VERSION;
    h->nonce = comm->job_nonce;
    h->from = (uint32_t)comm->rank;
    h->to = (uint32_t)u->peer;
    h->nslots = nslots;
    h->slot_bytes = slot_bytes;
    h->total_bytes = total;
    h->data_off = doff;
    u->nslots = nslots;
    u->slot_bytes = slot_bytes;
    u->data_off = doff;
    atomic_init(&h->tail, 0);
    atomic_init(&h->rx_sleep, 0);
    atomic_init(&h->tx_sleep, 0);
    ring__put32(u->msg + 4, 0);
    ring__put64(u->msg + 8, total);
    put_text(u->msg, name);
    return;
decline:
    if (fd >= 0) {
        close(fd);
        unlink(u->path);
    }
    u->path[0] = '\0';
    u->status = e ? e : EIO;
    ring__put32(u->msg + 4, (uint32_t)u->status);
    put_text(u->msg, u->reason);
}

/* Receiver, step 2: map what the OFFER names, or say why not (status = errno). */
static int map_segment(shm_ctx *ctx, up *u)
{
    ring_comm_t *comm = ctx->comm;
    char name[OFFER_TEXT];
    uint64_t total = ring__get64(u->msg + 8);
    memcpy(name, u->msg + 16, OFFER_TEXT);
    name[OFFER_TEXT - 1] = '\0';
    /* Only a plain name of ours inside the agreed directory: the peer is authenticated, but a
     * path of its choosing is not something to open. */
    if (strncmp(name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0 || strchr(name, '/')) {
        say(u->reason, sizeof u->reason, "the offered segment name is not a ringcomm segment");
        return EINVAL;
    }
    say(u->path, sizeof u->path, "%s/%s", comm->params.shm_dir, name);
    int fd = open(u->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        say(u->reason, sizeof u->reason, "cannot open %s: %s (is RING_SHM_DIR the same on both ranks?)", u->path,
                 strerror(e));
        return e;
    }
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) != 0) e = errno;
    else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) || (uint64_t)st.st_size != total ||
             total < PAGE || total > ((uint64_t)1 << 40))
        e = EPERM;
    if (e) {
        say(u->reason, sizeof u->reason, "%s is not a segment this rank can trust (owner, mode or size)", u->path);
        close(fd);
        return e;
    }
    u->seg = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    unlink(u->path);
    if (u->seg == MAP_FAILED) {
        u->seg = NULL;
        say(u->reason, sizeof u->reason, "cannot map %s: %s", u->path, strerror(e));
        return e;
    }
    u->seg_bytes = (size_t)total;
    seg_ctl *h = (seg_ctl *)u->seg;
    /* A peer linked against another ringcomm build lays its slots out differently. */
    if (h->magic == SEG_MAGIC && h->version != SEG_VERSION) {
        say(u->reason, sizeof u->reason, "the segment from rank %d has layout version %u, this rank's is %u (different ringcomm builds?)",
            u->peer, h->version, SEG_VERSION);
        return EPROTO;
    }
    /* Each field read once, into the copy that is checked and then used (up). */
    const volatile seg_ctl *vh = h;
    const uint32_t nslots = vh->nslots;
    const uint64_t slot_bytes = vh->slot_bytes, data_off = vh->data_off;
    if (h->magic != SEG_MAGIC || h->nonce != comm->job_nonce || h->from != (uint32_t)u->peer ||
        h->to != (uint32_t)comm->rank || nslots == 0 || nslots > MAX_SLOTS || slot_bytes < PAGE || slot_bytes > MAX_SLOT ||
        slot_bytes % 64 || h->total_bytes != total || data_off != data_off_for(nslots) ||
        data_off + (uint64_t)nslots * slot_bytes != total) {
        say(u->reason, sizeof u->reason, "the segment from rank %d has a bad header", u->peer);
        return EPROTO;
    }
    u->nslots = nslots;
    u->slot_bytes = (size_t)slot_bytes;
    u->data_off = (size_t)data_off;
    return 0;
}

static ring_result_t conn_from(shm_ctx *ctx, up *u, shm_conn **out)
{
    ring_comm_t *comm = ctx->comm;
    shm_conn *c = calloc(1, sizeof *c);
    uint8_t *d = NULL;
    seg_ctl *h = (seg_ctl *)u->seg;
    if (c && !u->is_send) d = calloc(u->nslots, 1);
    if (!c || (!u->is_send && !d)) {
        free(c);
        return ring__seterr(comm, RING_ERR_NOMEM, "shm: out of memory");
    }
    c->base.tp = &ring__shm_transport;
    c->ctx = ctx;
    c->is_send = u->is_send;
    c->peer = u->peer;
    c->seg = u->seg;
    c->seg_bytes = u->seg_bytes;
    c->ctl = h;
    c->nslots = u->nslots;
    c->slot_bytes = u->slot_bytes;
    c->data = u->seg + u->data_off;
    c->done_at = d;
    c->fd = ring__tcp_take_fd(u->base);
    ring__tcp_transport.close(u->base);
    u->seg = NULL;
    snprintf(c->desc, sizeof c->desc, "rank %d (shared memory)", u->peer);
    *out = c;
    return RING_OK;
}

static ring_result_t shm_upgrade(void *vctx, void *base, int peer, int is_send, void **out)
{
    shm_ctx *ctx = vctx;
    ring_comm_t *comm = ctx->comm;
    ring_result_t rc = RING_OK;
    up *u = ctx->ups, **pp = &ctx->ups;
    *out = NULL;
    if (ctx->keep_tcp[is_send][peer]) {
        *out = base;
        return RING_OK;
    }
    while (u && !(u->peer == peer && u->is_send == is_send)) pp = &u->next, u = u->next;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u) return ring__seterr(comm, RING_ERR_NOMEM, "shm: out of memory");
        u->peer = peer;
        u->is_send = is_send;
        u->base = base;
        u->fd = ring__tcp_conn_fd(base);
        u->hold_fd = -1;
        u->state = S_START;
        u->next = ctx->ups;
        ctx->ups = u;
        pp = &ctx->ups;
    }
    int r = 1;
    if (is_send) {
        if (u->state == S_START) {
            make_segment(ctx, u);
            u->state = S_OFFER_IO;
        }
        if (u->state == S_OFFER_IO && (r = ring__mq_io(u->fd, u->msg, OFFER_LEN, &u->io, 1)) == 1) {
            u->state = S_ACK_IO;
            u->io = 0;
        }
        if (r == 1 && u->state == S_ACK_IO && (r = ring__mq_io(u->fd, u->msg, ACK_LEN, &u->io, 0)) == 1) {
            if (ring__get32(u->msg) != ACK_MAGIC) {
                rc = ring__seterr(comm, RING_ERR_PROTOCOL, "shm: garbage from rank %d where a segment ACK was expected", peer);
                goto fail;
            }
            if (!u->status) {
                u->status = (int)ring__get32(u->msg + 4);
                if (u->status)
                    say(u->reason, sizeof u->reason, "rank %d could not map the segment: %s", peer, strerror(u->status));
            }
            u->state = S_DONE;
        }
    } else {
        if (u->state == S_START && (r = ring__mq_io(u->fd, u->msg, OFFER_LEN, &u->io, 0)) == 1) {
            if (ring__get32(u->msg) != OFFER_MAGIC) {
                rc = ring__seterr(comm, RING_ERR_PROTOCOL, "shm: garbage from rank %d where a segment OFFER was expected", peer);
                goto fail;
            }
            int theirs = (int)ring__get32(u->msg + 4);
            if (theirs) {
                u->status = theirs;
                char why[OFFER_TEXT];
                memcpy(why, u->msg + 16, OFFER_TEXT);
                why[OFFER_TEXT - 1] = '\0';
                say(u->reason, sizeof u->reason, "rank %d: %s", peer, why);
            } else {
                u->status = map_segment(ctx, u);
            }
            memset(u->msg, 0, ACK_LEN);
            ring__put32(u->msg, ACK_MAGIC);
            ring__put32(u->msg + 4, (uint32_t)(theirs ? 0 : u->status));
            u->io = 0;
            u->state = S_ACK_IO;
        }
        if (r == 1 && u->state == S_ACK_IO && (r = ring__mq_io(u->fd, u->msg, ACK_LEN, &u->io, 1)) == 1) u->state = S_DONE;
    }
    if (r < 0) {
        rc = ring__seterr_errno(comm, RING_ERR_PEER, errno, "shm: connection with rank %d lost during the shared-memory handshake",
                                peer);
        goto fail;
    }
    if (u->state != S_DONE) return RING_OK;

    *pp = u->next;
    if (u->status) {
        /* Demanded shared memory fails, but not yet: the peers are still reading this rank's
         * OFFERs and ACKs, and closing the sockets under them would leave them with "connection
         * reset" instead of the reason. */
        if (comm->params.transport == RING__TP_SHM && !ctx->forced_rc) {
            ctx->forced_rc = RING_ERR_SYSTEM;
            say(ctx->forced_msg, sizeof ctx->forced_msg, "RING_TRANSPORT=shm, but shared memory with rank %d failed: %s",
                peer, u->reason);
        }
        else if (comm->params.transport != RING__TP_SHM)
            RING_LOG(RING_LOG_WARN, RING_SUB_NET, comm->rank, "shm: %s rank %d stays on TCP: %s",
                     is_send ? "sending to" : "receiving from", peer, u->reason);
        ctx->keep_tcp[is_send][peer] = 1;
        up_free(u);
        *out = base;
        return RING_OK;
    }
    shm_conn *c = NULL;
    rc = conn_from(ctx, u, &c);
    if (rc == RING_OK) {
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank, "shm: %s rank %d through shared memory (%u slots of %zu bytes)",
                 is_send ? "sending to" : "receiving from", peer, c->nslots, c->slot_bytes);
        *out = c;
    }
    up_free(u);
    return rc;
fail:
    *pp = u->next;
    up_free(u);
    return rc;
}

static int shm_upgrade_pollfds(void *vctx, struct pollfd *fds, int max)
{
    shm_ctx *ctx = vctx;
    int n = 0;
    for (up *u = ctx->ups; u && n < max; u = u->next) {
        int wr = (u->is_send && u->state == S_OFFER_IO) || (!u->is_send && u->state == S_ACK_IO);
        fds[n++] = (struct pollfd){.fd = u->fd, .events = wr ? POLLOUT : POLLIN};
    }
    return n;
}

static ring_result_t fail_conn(shm_conn *c, ring_result_t code, const char *fmt, const char *what)
{
    c->failed = ring__seterr(c->ctx->comm, code, fmt, what, c->desc);
    return c->failed;
}

/* Dekker's full fence between this side's store and its look at the other side's. GCC's
 * ThreadSanitizer does not model fences and refuses them (-Wtsan, an error with -Werror, once
 * inlining put one where it looks): there a sequentially consistent read-modify-write of the
 * flag, which it does model, stands in for it. */
static inline void dekker_fence(_Atomic uint32_t *flag)
{
#if defined(__SANITIZE_THREAD__)
    atomic_fetch_add_explicit(flag, 0, memory_order_seq_cst);
#else
    (void)flag;
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Wake the other side if it went to sleep waiting for what we just did. */
static void ring_bell(shm_conn *c, _Atomic uint32_t *flag)
{
    dekker_fence(flag);
    if (atomic_load_explicit(flag, memory_order_relaxed) && atomic_exchange(flag, 0)) {
        char b = 1;
        /* EAGAIN: the socket is full of unread doorbells, so the peer is awake anyway. */
        ssize_t n = send(c->fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
}

static ring_result_t post(void *vc, void *buf, size_t len, void **rp)
{
    shm_conn *c = vc;
    *rp = NULL;
    if (c->failed) return c->failed;
    if (!(*rp = ring__mq_post(&c->q, c, buf, len, c->is_send)))
        return c->failed = ring__seterr(c->ctx->comm, RING_ERR_NOMEM, "shm: out of memory");
    return RING_OK;
}

static ring_result_t shm_isend(void *c, const void *buf, size_t len, void *mh, void **rp)
{
    (void)mh;
    return post(c, (void *)buf, len, rp);
}

static ring_result_t shm_irecv(void *vc, void *buf, size_t len, void *mh, void **rp)
{
    shm_conn *c = vc;
    (void)mh;
    if (!buf && len > c->slot_bytes)
        return c->failed = ring__seterr(c->ctx->comm, RING_ERR_INTERNAL,
                                        "shm: zero-copy receive of %zu bytes from %s exceeds its %zu-byte slots", len,
                                        c->desc, c->slot_bytes);
    return post(c, buf, len, rp);
}

/* Where slot i's piece of `piece` bytes lies: in the slot's header up to INLINE_MAX bytes, else
 * in its page. Sender and receiver compute `piece` alike (their lengths are checked equal). */
static unsigned char *piece_at(const shm_conn *c, uint32_t i, size_t piece)
{
    return piece <= INLINE_MAX ? c->ctl->slots[i].inl : (unsigned char *)c->data + (size_t)i * c->slot_bytes;
}

/* Whether a message of msg_len bytes carries its pieces' offsets (slot_hdr.off): both sides ask
 * here, so the rule that keeps a small message on the header's first line is written once. */
static int has_off(uint64_t msg_len)
{
    return msg_len > INLINE_MAX;
}

static ring_result_t send_progress(shm_conn *c, int *moved)
{
    int published = 0;
    while (c->q.qh) {
        shm_req *r = c->q.qh;
        while (r->first || r->done < r->len) {
            if (c->next - c->tail_seen >= c->nslots) {
                c->tail_seen = atomic_load_explicit(&c->ctl->tail, memory_order_acquire);
                if (c->next - c->tail_seen >= c->nslots) goto out;
            }
            uint32_t i = (uint32_t)(c->next % c->nslots);
            slot_hdr *h = &c->ctl->slots[i];
            size_t piece = RING__MIN(c->slot_bytes, r->len - r->done);
            if (piece) memcpy(piece_at(c, i, piece), r->buf + r->done, piece);
            h->seq = r->seq;
            h->msg_len = r->len;
            if (has_off(r->len)) h->off = r->done;
            r->done += piece;
            r->first = 0;
            c->next++;
            atomic_store_explicit(&h->pub, (uint32_t)c->next, memory_order_release);
            published = 1;
        }
        r->moved = 1;
        ring__mq_pop(&c->q);
    }
out:
    if (published) {
        *moved = 1;
        ring_bell(c, &c->ctl->rx_sleep);
    }
    return RING_OK;
}

static void free_slot(shm_conn *c, uint64_t slot)
{
    c->done_at[slot % c->nslots] = 1;
    int adv = 0;
    while (c->freed < c->next && c->done_at[c->freed % c->nslots]) {
        c->done_at[c->freed % c->nslots] = 0;
        c->freed++;
        adv = 1;
    }
    if (adv) {
        atomic_store_explicit(&c->ctl->tail, c->freed, memory_order_release);
        ring_bell(c, &c->ctl->tx_sleep);
    }
}

/* Receiver: the sender published slot i = next mod nslots (its header, and its piece, are
 * readable). */
static int readable(shm_conn *c, uint32_t i)
{
    return atomic_load_explicit(&c->ctl->slots[i].pub, memory_order_acquire) == (uint32_t)(c->next + 1);
}

static ring_result_t recv_progress(shm_conn *c, int *moved)
{
    ring_comm_t *comm = c->ctx->comm;
    while (c->q.qh) {
        shm_req *r = c->q.qh;
        while (r->first || r->done < r->len) {
            uint32_t i = (uint32_t)(c->next % c->nslots);
            if (!readable(c, i)) return RING_OK;
            const slot_hdr *h = &c->ctl->slots[i];
            uint64_t len = h->msg_len;
            ring_result_t rc = ring__mq_check_piece(comm, "shm", c->desc, r, h->seq, len, has_off(len) ? h->off : 0);
            if (rc == RING_ERR_MISMATCH && r->first && r->buf) {
                size_t theirs = RING__MIN(c->slot_bytes, len);
                memcpy(r->buf, piece_at(c, i, theirs), RING__MIN(RING__MIN(r->len, theirs), (size_t)RING__DESC_LEN));
            }
            if (rc != RING_OK) return c->failed = rc;
            size_t piece = RING__MIN(c->slot_bytes, r->len - r->done);
            r->first = 0;
            *moved = 1;
            if (r->zc) {
                r->slot = c->next++;
                r->done = r->len;
                break;
            }
            if (piece) memcpy(r->buf + r->done, piece_at(c, i, piece), piece);
            r->done += piece;
            free_slot(c, c->next++);
        }
        r->moved = 1;
        ring__mq_pop(&c->q);
    }
    return RING_OK;
}

static ring_result_t shm_progress(void *vc, int *moved)
{
    shm_conn *c = vc;
    if (c->failed) return c->failed;
    /* Awake and working: a doorbell for us would be a wasted system call on the other side. */
    _Atomic uint32_t *mine = c->is_send ? &c->ctl->tx_sleep : &c->ctl->rx_sleep;
    if (atomic_load_explicit(mine, memory_order_relaxed)) atomic_store_explicit(mine, 0, memory_order_relaxed);
    return c->is_send ? send_progress(c, moved) : recv_progress(c, moved);
}

static ring_result_t shm_test(void *vr, int *done)
{
    shm_req *r = vr;
    shm_conn *c = r->conn;
    *done = ring__mq_test(&c->q, r);
    return *done ? RING_OK : c->failed;
}

static size_t shm_zc_max(void *vc)
{
    shm_conn *c = vc;
    return c->is_send ? 0 : c->slot_bytes;
}

static const void *shm_zc_data(void *vr)
{
    shm_req *r = vr;
    shm_conn *c = r->conn;
    /* A zero-copy receive is one piece: the whole message. */
    return piece_at(c, (uint32_t)(r->slot % c->nslots), r->len);
}

static void shm_zc_release(void *vr)
{
    shm_req *r = vr;
    shm_conn *c = r->conn;
    free_slot(c, r->slot);
    ring__mq_recycle(&c->q, r);
}

/* Can a pending operation still complete if the peer is gone? */
static int stuck(shm_conn *c)
{
    if (!c->q.qh) return 0;
    if (c->is_send) return c->next - atomic_load_explicit(&c->ctl->tail, memory_order_acquire) >= c->nslots;
    return !readable(c, (uint32_t)(c->next % c->nslots));
}

/* Read doorbells; notice an orderly close of the socket (the peer exited). */
static void drain(shm_conn *c)
{
    if (ring__mq_drain(c->fd)) c->peer_closed = 1;
}

static ring_result_t gone_check(shm_conn *c)
{
    if (c->failed) return c->failed;
    if (c->peer_closed && stuck(c))
        return fail_conn(c, RING_ERR_PEER,
                         "shm: %s: %s closed its connection (the process exited or was killed?) with a message pending",
                         c->is_send ? "sending" : "receiving");
    return RING_OK;
}

static int shm_pollfds(void *vc, struct pollfd *fds, int max)
{
    shm_conn *c = vc;
    if (max < 1) return 0;
    drain(c);
    if (gone_check(c) != RING_OK) return -1;
    /* The peer closed after its last publish (no doorbell: this side's flag was down): what
     * it published can be taken now, so no sleep on a socket that will not ring. */
    if (c->peer_closed) return c->q.qh && !stuck(c) ? -1 : 0;
    if (c->q.qh) {
        _Atomic uint32_t *flag = c->is_send ? &c->ctl->tx_sleep : &c->ctl->rx_sleep;
        atomic_store_explicit(flag, 1, memory_order_relaxed);
        dekker_fence(flag);
        if (!stuck(c)) return -1;
    }
    fds[0] = (struct pollfd){.fd = c->fd, .events = POLLIN | POLLRDHUP};
    return 1;
}

static ring_result_t shm_check(void *vc)
{
    shm_conn *c = vc;
    drain(c);
    return gone_check(c);
}

static void shm_close(void *vc)
{
    shm_conn *c = vc;
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    if (c->seg) munmap(c->seg, c->seg_bytes);
    ring__mq_free(&c->q);
    free(c->done_at);
    free(c);
}

ring_result_t ring__shm_forced_result(void *vctx)
{
    shm_ctx *ctx = vctx;
    if (!ctx || !ctx->forced_rc) return RING_OK;
    return ring__seterr(ctx->comm, ctx->forced_rc, "%s", ctx->forced_msg);
}

void ring__shm_hold(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) { /* no OFD locks (before Linux 3.15): the pid alone decides */ }
}

/* Another process holds fd's file: its creator, alive (ring__shm_hold). */
static int held(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return fcntl(fd, F_OFD_SETLK, &fl) != 0 && (errno == EAGAIN || errno == EACCES);
}

int ring__shm_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    unsigned me = (unsigned)geteuid();
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned uid;
        int pid;
        if (sscanf(e->d_name, NAME_PREFIX "%u-%d-", &uid, &pid) != 2 || uid != me || pid <= 0) continue;
        /* No such pid here is not proof of death: a creator in another pid namespace (a
         * container sharing /dev/shm) or on another host (a shared RING_SHM_DIR) is alive and
         * holds its file; only a file nobody holds goes. */
        if (kill(pid, 0) == 0 || errno != ESRCH) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) continue;
        struct stat st;
        /* Made in the last SWEEP_MIN_AGE_S seconds: its creator may not hold it yet. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == me &&
            time(NULL) - st.st_ctim.tv_sec >= SWEEP_MIN_AGE_S && !held(fd) && unlink(path) == 0)
            removed++;
        close(fd);
    }
    closedir(d);
    return removed;
}

static void shm_diag(void *vc, char *out, size_t len)
{
    shm_conn *c = vc;
    /* The tail as the receiver last wrote it, not as this side last looked: fresh for the report. */
    uint64_t in_use = c->is_send ? c->next - atomic_load_explicit(&c->ctl->tail, memory_order_acquire) : 0;
    ring__mq_diag_say(out, len, "shared memory", c->is_send, c->peer, &c->q, in_use, c->nslots,
                      c->peer_closed ? "its process closed the connection's socket" : NULL);
}

const ring__transport_t ring__shm_transport = {
    .name = "shm",
    .mismatch_prefix = RING__DESC_LEN,
    .init = shm_init,
    .fini = shm_fini,
    .listen = ring__mq_no_listen,
    .connect = ring__mq_no_connect,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .progress = shm_progress,
    .test = shm_test,
    .pollfds = shm_pollfds,
    .check = shm_check,
    .close = shm_close,
    .zc_max = shm_zc_max,
    .zc_data = shm_zc_data,
    .zc_release = shm_zc_release,
    .upgrade = shm_upgrade,
    .upgrade_pollfds = shm_upgrade_pollfds,
    .diag = shm_diag,
};
