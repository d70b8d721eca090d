/*
 * Shared pages (shpage.h). Rank 0 makes the file and writes the header last (release), so a
 * rank that sees the magic sees a complete header; every other rank bumps `opened` once it
 * mapped the file, and rank 0 unlinks the name when the count is full. From then on the
 * mapping lives exactly as long as the ranks that hold it.
 *
 * An optional page rank 0 cannot reserve is refused in its header. Where not even the header
 * fits (a full RING_SHM_DIR), the refusal is the file's size: the errno, under 4096 and never a
 * multiple of 512, which no block-wise reservation passes through (a file system that grows a
 * file one block at a time, ext4, shows sizes of whole 512-byte units; growing a file with
 * ftruncate takes no space), and the other ranks count themselves in by each
 * linking a name of their own to it: rank 0 waits for the link count, then removes every name.
 * A full directory used to fail init on every rank ("cannot reserve 16384 bytes").
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "log.h"
#include "p2p.h"
#include "shpage.h"
#include "watch.h"

#define HDR_BYTES ((size_t)4096)
#define SHPAGE_MAGIC 0x52475350u /* "RGSP" */
#define SHPAGE_VERSION 1u /* change BS_VERSION (bootstrap.c) with it, and with the page's name */

/* The file: a header page, then the body in whole pages. */
static size_t file_bytes(size_t body_bytes) { return HDR_BYTES + ((body_bytes + 4095) & ~(size_t)4095); }

typedef struct hdr {
    uint32_t magic, version, nranks, pad;
    uint64_t nonce, body_bytes;
    uint32_t declined;       /* optional pages: rank 0's errno where it could not reserve the body */
    _Atomic uint32_t opened; /* ranks other than 0 that mapped the file */
} hdr_t;

/* Rank 0: wait until every other rank mapped the page, then remove its name. */
static ring_result_t wait_opened(ring_comm_t *comm, hdr_t *h, const char *path, const char *what)
{
    const int64_t deadline = ring__now_ns() + (int64_t)comm->params.timeout_ms * 1000000LL;
    /* Tests: the root goes on looking at the star this long after the count is full, as a
     * root that loses its CPU there would, while the others have left init. */
    const char *hold = getenv("RING_TEST_PAGE_HOLD_MS");
    const int64_t held_until = hold && *hold ? ring__now_ns() + atoll(hold) * 1000000LL : 0;
    while (atomic_load_explicit(&h->opened, memory_order_acquire) != (uint32_t)comm->nranks - 1 ||
           ring__now_ns() < held_until) {
        /* A rank that fails or dies in init never opens it: its bootstrap connection says so. */
        ring_result_t rc = ring__watch_init_check(comm, what);
        if (rc != RING_OK) return rc;
        if (ring__now_ns() > deadline)
            return ring__seterr(comm, RING_ERR_TIMEOUT, "%s: %u of %d ranks opened %s within %d ms (RING_TIMEOUT_MS)",
                                what, atomic_load(&h->opened), comm->nranks - 1, path, comm->params.timeout_ms);
        ring__nap_ns(100000);
    }
    unlink(path);
    return RING_OK;
}

/* A size that is a refusal (see the top of the file), not a reservation under way. */
static int refusal_size(off_t size) { return size > 0 && size < (off_t)HDR_BYTES && size % 512 != 0; }

/* A rank's name for the refused page's file (the page's own name, then -ack-<rank>). */
static void ack_path(char *out, size_t len, const char *path, int rank) { snprintf(out, len, "%s-ack-%d", path, rank); }

/* Rank 0, a page refused in its size: wait until every other rank linked a name to it, then
 * remove them all (also when the wait fails). */
static ring_result_t wait_acked(ring_comm_t *comm, int fd, const char *path, const char *what)
{
    const int64_t deadline = ring__now_ns() + (int64_t)comm->params.timeout_ms * 1000000LL;
    ring_result_t rc = RING_OK;
    struct stat st;
    while (fstat(fd, &st) == 0 && st.st_nlink < (nlink_t)comm->nranks) {
        if ((rc = ring__watch_init_check(comm, what)) != RING_OK) break;
        if (ring__now_ns() > deadline) {
            rc = ring__seterr(comm, RING_ERR_TIMEOUT, "%s: %lu of %d ranks saw that %s was refused within %d ms (RING_TIMEOUT_MS)",
                              what, (unsigned long)st.st_nlink - 1, comm->nranks - 1, path, comm->params.timeout_ms);
            break;
        }
        ring__nap_ns(100000);
    }
    for (int r = 1; r < comm->nranks; r++) {
        char a[440];
        ack_path(a, sizeof a, path, r);
        unlink(a);
    }
    unlink(path);
    return rc;
}

/* Ranks other than 0: open the file once rank 0 made it and check its header (written after
 * the file got its size). Returns it open in *fdp, and rank 0's errno in *declined where it
 * could not reserve the body (then this rank has counted itself as opened), with *bare set
 * where the refusal was the file's size (no header to map). */
static ring_result_t open_made(ring_comm_t *comm, const char *path, const char *what, size_t body_bytes, int *fdp,
                               int *declined, int *bare)
{
    const int64_t deadline = ring__now_ns() + (int64_t)comm->params.timeout_ms * 1000000LL;
    struct stat st;
    int fd;
    for (;;) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0 && fstat(fd, &st) == 0 && (st.st_size >= (off_t)HDR_BYTES || refusal_size(st.st_size))) break;
        if (fd < 0 && errno != ENOENT) return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot open %s", what, path);
        if (fd >= 0) close(fd);
        ring_result_t rc = ring__watch_init_check(comm, what);
        if (rc != RING_OK) return rc;
        if (ring__now_ns() > deadline)
            return ring__seterr(comm, RING_ERR_TIMEOUT,
                                "%s: rank 0 did not make %s within %d ms (RING_TIMEOUT_MS); is RING_SHM_DIR the same on "
                                "every rank, and do they all run the same ringcomm build?",
                                what, path, comm->params.timeout_ms);
        ring__nap_ns(200000);
    }
    *fdp = fd;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return ring__seterr(comm, RING_ERR_PROTOCOL, "%s: %s is not a page this rank can trust (owner or mode)", what, path);
    if (refusal_size(st.st_size)) { /* refused, and no room for a header to say so */
        char a[440];
        ack_path(a, sizeof a, path, comm->rank);
        if (link(path, a) != 0)
            return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot tell rank 0 this rank saw %s refused", what,
                                      path);
        *declined = (int)st.st_size;
        *bare = 1;
        return RING_OK;
    }
    hdr_t *h = mmap(NULL, HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot map %s", what, path);
    while (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHPAGE_MAGIC && ring__now_ns() < deadline) {
        ring_result_t rc = ring__watch_init_check(comm, what);
        if (rc != RING_OK) {
            munmap(h, HDR_BYTES);
            return rc;
        }
        ring__nap_ns(200000);
    }
    ring_result_t rc = RING_OK;
    if (h->magic != SHPAGE_MAGIC || h->version != SHPAGE_VERSION || h->nonce != comm->job_nonce ||
        h->nranks != (uint32_t)comm->nranks)
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "%s: %s has a bad header (another job's?)", what, path);
    else if (h->body_bytes != body_bytes)
        rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                          "%s: rank 0 made %s for %llu bytes, this rank (%d) expects %zu: do the ranks run the same "
                          "ringcomm build?",
                          what, path, (unsigned long long)h->body_bytes, comm->rank, body_bytes);
    else if ((*declined = (int)h->declined) != 0)
        atomic_fetch_add_explicit(&h->opened, 1, memory_order_release);
    else if (fstat(fd, &st) != 0 || st.st_size != (off_t)file_bytes(body_bytes))
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "%s: %s is not of the size its header says", what, path);
    munmap(h, HDR_BYTES);
    return rc;
}

ring_result_t ring__shpage_open(ring_comm_t *comm, const char *tag, const char *what, size_t body_bytes, int optional,
                                ring__shpage_t *pg)
{
    ring_result_t rc = RING_OK;
    int fd = -1, made = 0, declined = 0, bare = 0; /* bare: refused in the file's size, no header */
    void *map = NULL;
    size_t bytes = file_bytes(body_bytes);
    char path[400];
    memset(pg, 0, sizeof *pg);
    snprintf(path, sizeof path, "%s/ringcomm-%u-%u-%016llx-%s", comm->params.shm_dir, (unsigned)geteuid(),
             (unsigned)comm->peers[0].pid, (unsigned long long)ring__shm_name_tag(comm, tag), tag);
    /* A directory that is not there or not writable cannot carry rank 0's refusal either, but
     * every rank of the host sees it the same way (RING_SHM_DIR must be the same on all). */
    if (optional && access(comm->params.shm_dir, W_OK | X_OK) != 0) {
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "%s: not used: cannot write in %s (%s)", what,
                 comm->params.shm_dir, strerror(errno));
        return RING_OK;
    }
    if (comm->rank == 0) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot create %s", what, path);
            goto fail;
        }
        made = 1;
        ring__shm_hold(fd); /* until the name is gone (wait_opened), against other jobs' sweeps */
        /* All of it now: a full RING_SHM_DIR is an error (or, for an optional page, a refusal
         * every rank reads in the header) here, not a SIGBUS in a collective. A failed
         * posix_fallocate leaves the size at 0, which the other ranks wait past. */
        int e = posix_fallocate(fd, 0, (off_t)bytes);
        if (e && !optional) {
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, e, "%s: cannot reserve %zu bytes for %s", what, bytes, path);
            goto fail;
        }
        struct stat now;
        int h = e ? posix_fallocate(fd, 0, (off_t)HDR_BYTES) : 0;
        if (h && (fstat(fd, &now) != 0 || now.st_size != 0)) {
            /* The file has a size (the reservation failed after it gave one): the other ranks
             * may be waiting for its header, which cannot come. */
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, h, "%s: cannot reserve %zu bytes for %s", what, bytes, path);
            goto fail;
        }
        if (h) {
            /* Not even the header: the size says it. */
            if (ftruncate(fd, refusal_size(e) ? (off_t)e : (off_t)ENOSPC) != 0) {
                rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot mark %s refused", what, path);
                goto fail;
            }
            made = 0; /* wait_acked removes the names, whatever happens */
            bare = 1;
            RING_CHECK(wait_acked(comm, fd, path, what));
        }
        declined = e;
    } else {
        RING_CHECK(open_made(comm, path, what, body_bytes, &fd, &declined, &bare));
    }
    /* A refused page is its header alone, which the other ranks have read by now; or, where
     * even that did not fit, its size, which they have all acknowledged (nothing to map). */
    if (declined) bytes = HDR_BYTES;
    if (!bare && (!declined || comm->rank == 0)) {
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "%s: cannot map %s", what, path);
            goto fail;
        }
        hdr_t *h = map;
        if (comm->rank == 0) {
            h->nranks = (uint32_t)comm->nranks;
            h->nonce = comm->job_nonce;
            h->body_bytes = body_bytes;
            h->declined = (uint32_t)declined;
            h->version = SHPAGE_VERSION;
            __atomic_store_n(&h->magic, SHPAGE_MAGIC, __ATOMIC_RELEASE);
            RING_CHECK(wait_opened(comm, h, path, what));
            made = 0;
        } else {
            atomic_fetch_add_explicit(&h->opened, 1, memory_order_release);
        }
    }
    close(fd);
    if (declined) {
        if (map) munmap(map, bytes);
        RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "%s: not used: rank 0 could not reserve %zu bytes in %s (%s)",
                 what, file_bytes(body_bytes), comm->params.shm_dir, strerror(declined));
        return RING_OK;
    }
    pg->map = map;
    pg->bytes = bytes;
    pg->body = (char *)map + HDR_BYTES;
    return RING_OK;
fail:
    if (fd >= 0) close(fd);
    if (map) munmap(map, bytes);
    if (made) unlink(path);
    return rc;
}

void ring__shpage_close(ring__shpage_t *pg)
{
    if (pg->map) munmap(pg->map, pg->bytes);
    memset(pg, 0, sizeof *pg);
}

void ring__callrec_set(ring__callrec_t *r, const ring__opdesc_t *op)
{
    r->coll = (uint32_t)op->coll;
    r->dtype = (uint32_t)op->dtype;
    r->op = (uint32_t)op->op;
    r->root = op->root;
    r->count = op->count;
}

void ring__callrec_publish(ring__callrec_t *r, uint64_t q) { atomic_store_explicit(&r->seq, q + 1, memory_order_release); }

int ring__callrec_state(const ring__callrec_t *r, uint64_t q)
{
    uint64_t s = atomic_load_explicit(&((ring__callrec_t *)r)->seq, memory_order_acquire);
    return s < q + 1 ? 0 : s > q + 1 ? -1 : 1;
}

void ring__callrec_copy(ring__callrec_t *out, const ring__callrec_t *r)
{
    atomic_init(&out->seq, atomic_load_explicit(&((ring__callrec_t *)r)->seq, memory_order_relaxed));
    out->count = r->count;
    out->coll = r->coll;
    out->dtype = r->dtype;
    out->op = r->op;
    out->root = r->root;
}

int ring__callrec_same(const ring__callrec_t *a, const ring__callrec_t *b)
{
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op && a->root == b->root && a->count == b->count;
}

ring_result_t ring__callrec_room(ring_comm_t *comm, const ring__opdesc_t *op, const _Atomic uint64_t *done0,
                                 size_t stride, unsigned hist, uint64_t *room, const char *what)
{
    if (op->seq < hist) return RING_OK;
    const uint64_t need = op->seq - hist + 1; /* calls 0 .. seq - hist returned everywhere */
    if (*room >= need) return RING_OK;
    ring__idle_t waited;
    ring__idle_start(&waited, comm->params.spin_us * 1000LL);
    int relooked = 0;
    /* The least count seen (this rank's own: seq calls returned) becomes *room, so that ranks
     * in step are read once every hist calls, not on every call. */
    uint64_t least = op->seq;
    for (int p = 0; p < comm->nranks;) {
        const _Atomic uint64_t *done = (const _Atomic uint64_t *)((const char *)done0 + (size_t)p * stride);
        uint64_t v = p == comm->rank ? op->seq : atomic_load_explicit(done, memory_order_acquire);
        if (v >= need) {
            least = v < least ? v : least;
            p++;
            relooked = 0;
            ring__idle_progress(&waited);
            continue;
        }
        int64_t idle = ring__idle_ns(&waited);
        int stop = ring__wait_stop(comm, idle, &relooked);
        if (stop != RING__WAIT_GO_ON) {
            char who[160], doing[96];
            ring__peer_desc(comm, p, who, sizeof who);
            snprintf(doing, sizeof doing, "finish call #%llu (this rank is %u calls ahead of it)",
                     (unsigned long long)(need - 1), hist);
            return ring__wait_stop_error(comm, op, stop, what, who, doing);
        }
        if (idle < comm->params.spin_us * 1000LL) ring__spin_once(comm, idle);
        else ring__nap_ns(idle < 100000000 ? 20000 : 1000000);
    }
    *room = least;
    return RING_OK;
}
