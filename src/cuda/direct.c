/*
 * Direct collectives over CUDA IPC (direct.h, docs/cuda.md "Direct collectives on one host"),
 * for communicators whose ranks all share one host (every ring edge shared memory) and all
 * offer the path (RING_CUDA_IPC=auto or 1 in a CUDA build). Every rank reads and writes its
 * peers' device buffers in place: no staging slots, no host memory, no ring.
 *
 * All-reduce of S bytes over N ranks (block r = the r-th of N equal parts, 16-byte aligned):
 *  0. Arrival. Every rank writes a record for the call's sequence number q into its row of a
 *     shared page, for every collective it runs, host buffers included: what the call is,
 *     whether this rank offers the path (device buffers that cudaIpcGetMemHandle exports) and,
 *     if so, the allocations' handles and offsets. A rank on the host path writes and goes on;
 *     a rank with device buffers waits for all N records of call q.
 *  1. Decision. All N records offer the path and describe the same call: direct. Otherwise
 *     every rank with device buffers runs the staged ring, exactly as without this file (they
 *     all read the same records, so they all decide the same).
 *  2. Stage 1. Map the peers' buffers (cudaIpcOpenMemHandle, cached by the peer's buffer id,
 *     which the driver never reuses), wait until work queued before the call has finished
 *     (other processes read and write this rank's buffers from here on), publish whether
 *     every map worked. Any failure: every rank falls back to the staged ring for this call,
 *     and the rank that failed stops offering the path for later calls (the log says why).
 *  3. Stage 2. Rank r reduces block r of all N inputs, in rank order, in one kernel
 *     (ring__cuda_reduce_multi), and writes the result into block r of every rank's recvbuf
 *     (reads S, writes S per rank); it publishes once the kernel finished and returns when
 *     every rank has: then every recvbuf is complete, and no rank's buffers are touched after
 *     its call returned.
 *     Where every rank's buffers are on one GPU (the records carry the GPU's uuid;
 *     RING_CUDA_DIRECT_WORK=auto), rank 0 alone does this for all N blocks, in one kernel
 *     over the whole buffer, and the others queue no GPU work at all: the ranks' processes
 *     have a context each, and contexts of different processes take turns on a GPU, one
 *     switch per turn; N kernels of S/N each cost N turns where one kernel of S costs one.
 * GPU memory traffic, all ranks together: 2 N S, against 5 (N-1) S for a ring over CUDA IPC
 * (15 S against 8 S at N = 4); nothing crosses PCIe. Synchronisation: three waits on the
 * shared page per call (each for every rank: microseconds on one host) and at most two waits
 * for the own GPU (none where the GPU had nothing queued and the rank does no work).
 * In-place calls work unchanged: block r of every buffer is read and written by one rank
 * alone, by one kernel, each element's inputs before its outputs.
 * Reduce-scatter is the same kernel with one output (block r of the inputs into this rank's
 * recvbuf); all-gather copies every peer's sendbuf into place, broadcast copies the root's
 * buffer (pull: device-to-device copies through the mappings).
 *
 * Each block is reduced by exactly one rank and copied to the others, so every rank gets the
 * same bits (the order of combination is rank order, not the ring's).
 *
 * Waiting for peers' GPU work happens on the host. Interprocess CUDA events (peers' streams
 * waiting for each other, one host wait per call) were measured and were slower where ranks
 * share a GPU: 1.7 ms against 0.57 ms per 1 MiB all-reduce, 4 ranks on one H200
 * (docs/performance.md).
 *
 * Waiting: the page gives no file descriptor to poll, so a waiting rank yields, and after
 * 100 ms without progress sleeps a millisecond between looks. A dead rank is noticed by the
 * watcher (the bootstrap star), a rank that left by ring_comm_destroy by its goodbye, and
 * anything else by RING_TIMEOUT_MS, as everywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "cuda/coll.h"
#include "cuda/direct.h"
#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#include "log.h"
#include "p2p.h"
#include "shpage.h"
#include "watch.h"

#define HIST 16      /* records per rank: a rank waits before it gets that many calls ahead (publish) */
#define MAPS 32      /* cached mappings per peer */
#define EXPORTS 16   /* cached handles of this rank's own allocations */

enum { REC_HOST = 1, REC_DEVICE = 2, REC_DECLINE = 3 };

typedef struct buf_desc {
    uint64_t id, off, size; /* allocation (driver buffer id), offset of the buffer in it, its size */
    unsigned char handle[RING__CUDA_IPC_HANDLE_LEN];
} buf_desc_t;

/* What a rank says about its part in a call, copied whole in and out of the page. */
typedef struct offer {
    uint32_t kind, pid;
    int32_t work; /* this rank's RING_CUDA_DIRECT_WORK: rank 0's decides, so all decide alike */
    uint32_t pidns; /* the inode of the rank's pid namespace (0 unknown): its pid means a process
                     * here only where it equals this rank's */
    buf_desc_t buf[2]; /* sendbuf, recvbuf */
    unsigned char gpu[RING__CUDA_UUID_LEN]; /* the physical GPU of the buffers */
} offer_t;

typedef struct rec {
    ring__callrec_t c;
    offer_t o;
} rec_t;

typedef struct row {
    _Atomic uint64_t progress; /* direct calls: 4 (q + 1) + stage */
    _Atomic uint64_t refused;  /* q + 1: this rank could not map a peer's buffer in call q */
    _Atomic uint64_t worked;   /* q + 1: nothing this rank queued in call q touches a peer any more */
    _Atomic uint64_t done;     /* calls of this rank that returned: it reads no record of them */
    _Atomic uint64_t withdrawn; /* q + 1: this rank failed in call q after it reached stage 1 (settle) */
    unsigned char pad[24];
    rec_t rec[HIST];
} row_t;

typedef struct map {
    uint64_t id, used;
    uint32_t pid;
    void *base;
    size_t size;
} map_t;

typedef struct export {
    uint64_t id, used;
    uintptr_t base;
    size_t size;
    unsigned char handle[RING__CUDA_IPC_HANDLE_LEN];
} export_t;

typedef struct direct {
    ring__shpage_t page;
    row_t *row; /* in the page: one per rank */
    int declined;   /* a peer's buffer could not be mapped: no more offers */
    uint64_t tick, ncalls, nones;
    uint64_t room; /* every rank's done has reached this (ring__callrec_room) */
    map_t *maps;    /* nranks x MAPS */
    export_t exports[EXPORTS];
    int device;     /* of the mappings (one device per communicator's direct calls) */
    int uuid_dev;   /* the device whose GPU uuid is cached (-1: none) */
    unsigned char uuid[RING__CUDA_UUID_LEN];
    uint32_t pid;   /* this process, for the records (getpid() is a system call, once per call) */
    uint32_t pidns; /* its pid namespace (offer_t) */
    ring__cuda_event_t ev; /* made on the first direct call */
    int stuck;             /* this call: the own GPU did not finish within RING_TIMEOUT_MS */
    int was_stuck;         /* some call's: its kernel may still use the mappings */
    /* Per call, nranks each: the records read, which of them arrived, every rank's sendbuf
     * and recvbuf as this process addresses them (own: the call's; peers': mapped, NULL where
     * this rank does not touch them). */
    rec_t *recs;
    unsigned char *got;
    void **sptr, **rptr;
} direct_t;

static void direct_free(direct_t *d)
{
    ring__shpage_close(&d->page);
    free(d->maps);
    free(d->recs);
    free(d->got);
    free(d->sptr);
    free(d->rptr);
    free(d);
}

static int offered(const ring_comm_t *comm)
{
    if (comm->nranks < 2 || comm->nranks > RING__CUDA_MULTI_MAX || !comm->all_shm) return 0;
    for (int r = 0; r < comm->nranks; r++)
        if (!(comm->peers[r].flags & RING__PEER_CUDA_DIRECT)) return 0;
    return 1;
}

ring_result_t ring__direct_setup(ring_comm_t *comm)
{
    ring_result_t rc = RING_OK;
    direct_t *d = NULL;
    if (!offered(comm)) return RING_OK;
    const size_t n = (size_t)comm->nranks;
    d = calloc(1, sizeof *d);
    if (d) {
        d->pid = (uint32_t)getpid();
        struct stat ns;
        d->pidns = stat("/proc/self/ns/pid", &ns) == 0 ? (uint32_t)ns.st_ino : 0;
        /* Tests: this rank's records say it is in a pid namespace of its own, under a pid that
         * is no process here (as for a rank in another container that shares /dev/shm). */
        if (getenv("RING_TEST_DIRECT_FOREIGN_PID")) d->pid = INT32_MAX, d->pidns = ~d->pidns;
        d->maps = calloc(n * MAPS, sizeof *d->maps);
        d->recs = calloc(n, sizeof *d->recs);
        d->got = calloc(n, 1);
        d->sptr = calloc(n, sizeof *d->sptr);
        d->rptr = calloc(n, sizeof *d->rptr);
    }
    if (!d || !d->maps || !d->recs || !d->got || !d->sptr || !d->rptr) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "direct CUDA IPC: out of memory");
        goto fail;
    }
    d->device = -1;
    d->uuid_dev = -1;
    /* Optional: a RING_SHM_DIR without room leaves device buffers to the staged ring (it
     * failed init on every rank, GPU or not). */
    RING_CHECK(ring__shpage_open(comm, "direct", "direct CUDA IPC", n * sizeof(row_t), 1, &d->page));
    if (!d->page.map) { /* every rank got the same answer and logged it */
        direct_free(d);
        return RING_OK;
    }
    d->row = d->page.body;
    comm->cuda_direct = d;
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank,
             "direct CUDA IPC: every rank is on this host: device-buffer collectives may run directly");
    return RING_OK;
fail:
    if (d) direct_free(d);
    return rc;
}

void ring__direct_fini(ring_comm_t *comm, int gpu_busy)
{
    direct_t *d = comm->cuda_direct;
    if (!d) return;
    comm->cuda_direct = NULL;
    /* The mappings and the event are the offering device's: close them in its context, not
     * in whichever device the destroying thread has current. */
    ring__cuda_devscope_t ds;
    int entered = d->device >= 0 && ring__cuda_device_enter(NULL, d->device, &ds) == RING_OK;
    /* A kernel of a call that timed out may still read and write through the mappings:
     * unmapping them under it would fault the caller's context; they go with the process. */
    gpu_busy = gpu_busy && d->was_stuck;
    if (gpu_busy)
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                 "ring_comm_destroy: the peers' buffers stay mapped (direct CUDA IPC): the GPU still has not "
                 "run the work of a call that timed out");
    for (size_t i = 0; !gpu_busy && i < (size_t)comm->nranks * MAPS; i++)
        ring__cuda_ipc_close(d->maps[i].base, d->maps[i].size);
    ring__cuda_event_destroy(d->ev);
    if (entered) ring__cuda_device_leave(&ds);
    direct_free(d);
}

uint64_t ring__cuda_direct_count(ring_comm_t *comm)
{
    direct_t *d = comm->cuda_direct;
    return d ? d->ncalls : 0;
}

uint64_t ring__cuda_direct_one_count(ring_comm_t *comm)
{
    direct_t *d = comm->cuda_direct;
    return d ? d->nones : 0;
}

/* ---------- records ---------- */

static rec_t *rec_of(direct_t *d, int rank, uint64_t q) { return &d->row[rank].rec[q % HIST]; }

static ring_result_t rec_publish(ring_comm_t *comm, direct_t *d, const ring__opdesc_t *op, const offer_t *fill)
{
    /* The slot held call seq - HIST: wait until every rank is done with it (a rank can run
     * ahead of one slow to look, sm.c's note says how). Readers look at the fields only
     * after seeing seq + 1. */
    ring_result_t rc = ring__callrec_room(comm, op, &d->row[0].done, sizeof(row_t), HIST, &d->room,
                                          "direct CUDA IPC records");
    if (rc != RING_OK) return rc;
    rec_t *r = rec_of(d, comm->rank, op->seq);
    ring__callrec_set(&r->c, op);
    if (fill) r->o = *fill;
    else r->o.kind = REC_HOST; /* readers look no further: the host path's store stays small */
    r->o.pid = d->pid;
    r->o.pidns = d->pidns;
    ring__callrec_publish(&r->c, op->seq);
    return RING_OK;
}

/* Peer p's record of call q: 1 copied, 0 not there yet, -1 overwritten by a later call (a
 * rank that did not wait for room: a bug, reported). */
static int rec_read(direct_t *d, int p, uint64_t q, rec_t *out)
{
    const rec_t *r = rec_of(d, p, q);
    int st = ring__callrec_state(&r->c, q);
    if (st == 1) {
        ring__callrec_copy(&out->c, &r->c);
        out->o = r->o;
    }
    return st;
}

ring_result_t ring__direct_note(ring_comm_t *comm, const ring__opdesc_t *op)
{
    direct_t *d = comm->cuda_direct;
    return d ? rec_publish(comm, d, op, NULL) : RING_OK;
}

void ring__direct_done(ring_comm_t *comm, const ring__opdesc_t *op)
{
    direct_t *d = comm->cuda_direct;
    if (d) atomic_store_explicit(&d->row[comm->rank].done, op->seq + 1, memory_order_release);
}

/* ---------- this rank's buffers ---------- */

/* Describe the allocation holding ptr for peers: 0 done, else why not in why. */
static int describe(direct_t *d, const void *ptr, buf_desc_t *b, char *why, size_t len)
{
    ring__mem_range_t mr;
    if (ring__mem_range(NULL, ptr, &mr) != RING_OK) {
        snprintf(why, len, "%s", ring_comm_last_error(NULL));
        return -1;
    }
    if (!mr.ipc_capable) {
        snprintf(why, len, "buffer %p is not in memory that CUDA IPC can export (cudaMallocAsync pool or cuMemCreate?)",
                 ptr);
        return -1;
    }
    b->id = mr.id;
    b->off = (uintptr_t)ptr - mr.base;
    b->size = mr.size;
    export_t *e = NULL, *lru = &d->exports[0];
    for (int i = 0; i < EXPORTS; i++) {
        if (d->exports[i].id == mr.id && d->exports[i].base == mr.base && d->exports[i].size == mr.size) e = &d->exports[i];
        if (d->exports[i].used < lru->used) lru = &d->exports[i];
    }
    if (!e) {
        if (ring__cuda_ipc_export(NULL, (void *)mr.base, mr.size, lru->handle) != RING_OK) {
            lru->id = 0;
            snprintf(why, len, "%s", ring_comm_last_error(NULL));
            return -1;
        }
        e = lru;
        e->id = mr.id;
        e->base = mr.base;
        e->size = mr.size;
    }
    e->used = ++d->tick;
    memcpy(b->handle, e->handle, sizeof b->handle);
    return 0;
}

/* Peer p's allocation, mapped here (from the cache or opened now). A failure's message is the
 * thread's (ring_comm_last_error(NULL)): it is not the call's error, the call falls back. */
static ring_result_t map_peer(direct_t *d, int p, uint32_t pid, const buf_desc_t *b, void **base)
{
    map_t *m = &d->maps[(size_t)p * MAPS], *hit = NULL, *lru = m;
    for (int i = 0; i < MAPS; i++) {
        if (m[i].base && m[i].id == b->id && m[i].pid == pid && m[i].size == b->size) hit = &m[i];
        if (m[i].used < lru->used) lru = &m[i];
    }
    if (!hit) {
        void *at = NULL;
        ring_result_t rc = ring__cuda_ipc_open(NULL, b->handle, b->size, &at);
        if (rc != RING_OK) return rc;
        ring__cuda_ipc_close(lru->base, lru->size);
        hit = lru;
        hit->base = at;
        hit->id = b->id;
        hit->pid = pid;
        hit->size = b->size;
    }
    hit->used = ++d->tick;
    *base = hit->base;
    return RING_OK;
}

/* ---------- waiting ---------- */

enum { W_RECORDS, W_STAGE, W_GPU };

static const char *stage_text(int stage, ring__coll_t coll)
{
    if (stage == 1) return "map the buffers and finish the work queued before the call";
    return coll == RING__COLL_ALLREDUCE || coll == RING__COLL_REDUCE_SCATTER ? "reduce its block" : "copy its blocks";
}

/* A rank that reached stage 1 of op and then failed (an abort, a timeout, a peer's failure)
 * has returned or is about to: its buffers are not this call's any more. */
static int withdrew(const direct_t *d, int p, const ring__opdesc_t *op)
{
    return atomic_load_explicit(&d->row[p].withdrawn, memory_order_seq_cst) == op->seq + 1;
}

static ring_result_t withdrawn_error(ring_comm_t *comm, const ring__opdesc_t *op, int p)
{
    char peer[160];
    ring__peer_desc(comm, p, peer, sizeof peer);
    return ring__seterr(comm, RING_ERR_PEER, "%s #%llu: %s failed in the direct CUDA IPC call after it had entered",
                        ring__coll_name(op->coll), (unsigned long long)op->seq, peer);
}

/*
 * Wait until every rank's record of this call is there (W_RECORDS: d->recs filled), every
 * rank reached progress `target` (W_STAGE; a rank that withdrew never will), or this rank's
 * event finished (W_GPU; its timeout marks the call stuck: d->stuck).
 */
static ring_result_t wait_for(ring_comm_t *comm, direct_t *d, const ring__opdesc_t *op, int what, uint64_t target)
{
    const char *name = ring__coll_name(op->coll);
    const int n = comm->nranks;
    int64_t last = ring__now_ns();
    int lag = -1, relooked = 0;
    ring_result_t rc = RING_OK;
    if (what == W_RECORDS) memset(d->got, 0, (size_t)n);
    for (;;) {
        int done = 1, moved = 0;
        if (what == W_GPU) {
            RING_CHECK(ring__cuda_event_query(comm, d->ev, &done));
        } else {
            for (int p = 0; p < n; p++) {
                if (what == W_RECORDS) {
                    if (d->got[p]) continue;
                    int r = rec_read(d, p, op->seq, &d->recs[p]);
                    if (r < 0) {
                        rc = ring__seterr(comm, RING_ERR_INTERNAL,
                                          "%s #%llu: rank %d is %d or more calls ahead of this rank (direct CUDA IPC)",
                                          name, (unsigned long long)op->seq, p, HIST);
                        goto fail;
                    }
                    if (r > 0) d->got[p] = 1, moved = 1;
                    else done = 0, lag = p;
                } else if (atomic_load_explicit(&d->row[p].progress, memory_order_acquire) < target) {
                    if (withdrew(d, p, op)) {
                        rc = withdrawn_error(comm, op, p);
                        goto fail;
                    }
                    done = 0;
                    lag = p;
                    break;
                }
            }
        }
        if (done) break;
        int64_t now = ring__now_ns();
        if (moved) last = now, relooked = 0;
        int stop = ring__wait_stop(comm, now - last, what != W_GPU ? &relooked : NULL);
        if (stop == RING__WAIT_TIMEOUT && what == W_GPU) {
            d->stuck = 1;
            rc = ring__cuda_gpu_timeout(comm, op, now - last);
            goto fail;
        }
        if (stop != RING__WAIT_GO_ON) {
            char peer[160] = "this rank's GPU";
            if (what != W_GPU) ring__peer_desc(comm, lag, peer, sizeof peer);
            rc = ring__wait_stop_error(comm, op, stop, "direct CUDA IPC", peer,
                                       what == W_RECORDS ? "enter the collective"
                                       : what == W_GPU   ? "finish this rank's work"
                                                         : stage_text((int)(target % 4), op->coll));
            goto fail;
        }
        if (now - last > 100000000LL) ring__nap_ns(1000000);
        else ring__spin_once(comm, now - last);
    }
fail:
    return rc;
}

/* Publish stage s of call q and wait until every rank is there. The store is seq_cst: with the
 * load of `withdrawn` after stage 1 and settle's store-then-load it makes a Dekker pair, so a
 * rank that withdraws either sees this rank at stage 1 (and waits for its work) or this rank
 * sees the withdrawal (and queues none). */
static uint64_t stage_mark(const ring__opdesc_t *op, int s) { return 4 * (op->seq + 1) + (uint64_t)s; }

static ring_result_t stage(ring_comm_t *comm, direct_t *d, const ring__opdesc_t *op, int s)
{
    const uint64_t target = stage_mark(op, s);
    atomic_store_explicit(&d->row[comm->rank].progress, target, memory_order_seq_cst);
    return wait_for(comm, d, op, W_STAGE, target);
}

/* ---------- the call ---------- */

/*
 * The end of a call in which this rank published stage 1: from then on a peer that sees every
 * rank at stage 1 queues work that reads and writes this rank's buffers. The work this rank
 * queued (queued: on stream st) reads and writes peers' buffers, and a peer reuses or frees
 * them once its call returned, even with an error: so this rank says when its work finished
 * (row.worked, as soon as it did), and a failed call first withdraws (row.withdrawn: a peer
 * that reaches stage 1 later sees it and queues nothing, one waiting at a stage stops), then
 * returns only once every rank that had reached stage 1 said its work finished or is gone. An
 * abort or a peer's failure does not cut these waits short (the GPU finishes what it was
 * given: a kernel of the direct path takes milliseconds); RING_TIMEOUT_MS bounds them, once:
 * work that already had RING_TIMEOUT_MS (d->stuck) is not waited for again, nor is it said
 * finished. Errors here keep the call's first error.
 */
static void settle(ring_comm_t *comm, direct_t *d, const ring__opdesc_t *op, struct CUstream_st *st, int queued,
                   ring_result_t rc, const rec_t *recs)
{
    /* Success: stage 2 said all of it, and the work's end was said when it came. */
    if (rc == RING_OK) return;
    const int64_t start = ring__now_ns(), bound = (int64_t)comm->params.timeout_ms * 1000000LL;
    const uint64_t mark = op->seq + 1, stage1 = stage_mark(op, 1);
    int done = !queued;
    /* Recorded again: the call may have failed between queueing and recording. */
    if (!done && !d->stuck && ring__cuda_event_record(NULL, d->ev, st) == RING_OK) {
        while (ring__now_ns() - start < bound && ring__cuda_event_query(NULL, d->ev, &done) == RING_OK && !done)
            ring__nap_ns(50000);
        if (!done && ring__now_ns() - start >= bound) d->stuck = 1;
    }
    if (done) atomic_store_explicit(&d->row[comm->rank].worked, mark, memory_order_release);
    atomic_store_explicit(&d->row[comm->rank].withdrawn, mark, memory_order_seq_cst);
    for (int p = 0; p < comm->nranks; p++) {
        /* Not at stage 1 now: it sees the withdrawal when it gets there (stage()). This
         * rank's own work, if not finished, had its wait above. */
        if (p == comm->rank || atomic_load_explicit(&d->row[p].progress, memory_order_seq_cst) < stage1) continue;
        /* A peer in another pid namespace (a container sharing /dev/shm and the GPU, not the
         * pids) has a pid that names no process here, or another one: only the bound ends
         * the wait for it. */
        const pid_t pid = (pid_t)recs[p].o.pid;
        const int seen = d->pidns && recs[p].o.pidns == d->pidns;
        while (atomic_load_explicit(&d->row[p].worked, memory_order_acquire) < mark && ring__now_ns() - start < bound &&
               (!seen || kill(pid, 0) == 0 || errno == EPERM))
            ring__nap_ns(50000);
    }
}

/* The failed CUDA call's message, cut to 200 characters: it becomes part of a longer reason. */
static int failed_why(ring_comm_t *comm, char *why, size_t len)
{
    ring__op_error(comm, why, RING__MIN(len, (size_t)201));
    return -1;
}

/* Does this rank offer the path for op? Fills its record; 0 yes, else why in why. */
static int offer(direct_t *d, ring_comm_t *comm, const ring__opdesc_t *op, offer_t *mine, char *why, size_t len)
{
    memset(mine, 0, sizeof *mine);
    mine->kind = REC_DECLINE;
    if (d->declined) return snprintf(why, len, "declined since an earlier call"), -1;
    if (comm->params.algo != RING__ALGO_AUTO) return snprintf(why, len, "RING_ALGO names an algorithm"), -1;
    if (d->device >= 0 && d->device != op->device)
        return snprintf(why, len, "buffers on device %d, earlier direct offers on device %d", op->device, d->device), -1;
    const int bcast = op->coll == RING__COLL_BROADCAST;
    if (describe(d, op->sendbuf, &mine->buf[0], why, len)) return -1;
    if (!bcast && describe(d, op->recvbuf, &mine->buf[1], why, len)) return -1;
    if (!d->ev) {
        if (ring__cuda_event_create(comm, &d->ev) != RING_OK) return failed_why(comm, why, len);
        /* The event, and every mapping after it, belongs to this device's context. */
        d->device = op->device;
    }
    if (d->uuid_dev != op->device) {
        if (ring__cuda_device_uuid(comm, op->device, d->uuid) != RING_OK) return failed_why(comm, why, len);
        d->uuid_dev = op->device;
    }
    memcpy(mine->gpu, d->uuid, sizeof mine->gpu);
    mine->work = comm->params.cuda_direct_work;
    mine->kind = REC_DEVICE;
    return 0;
}

static void *at(void *base, const buf_desc_t *b, size_t off) { return (unsigned char *)base + b->off + off; }

/*
 * The GPU work of ranks [r0, r1)'s parts of the call (stage 2): r1 = r0 + 1 where every rank
 * works its own part, [0, N) where rank 0 works them all. sptr/rptr: every rank's buffers
 * as this process addresses them.
 */
static ring_result_t queue_work(ring_comm_t *comm, const ring__opdesc_t *op, int r0, int r1, void *const *sptr,
                                void *const *rptr, ring__cuda_stream_t st)
{
    const int n = comm->nranks;
    const size_t es = ring_dtype_size(op->dtype), bytes = op->count * es;
    const void *srcs[RING__CUDA_MULTI_MAX];
    void *dsts[RING__CUDA_MULTI_MAX];
    ring_result_t rc = RING_OK;
    switch (op->coll) {
    case RING__COLL_ALLREDUCE: {
        /* Blocks r0..r1-1 (16-byte aligned blocks) of every input, reduced once and written
         * into every rank's recvbuf: one kernel, whichever the range. */
        const size_t align = 16 / es;
        size_t blk = (op->count + (size_t)n - 1) / (size_t)n;
        blk = (blk + align - 1) / align * align;
        const size_t lo = RING__MIN(blk * (size_t)r0, op->count), hi = RING__MIN(blk * (size_t)r1, op->count);
        for (int p = 0; p < n; p++) {
            srcs[p] = (const unsigned char *)sptr[p] + lo * es;
            dsts[p] = (unsigned char *)rptr[p] + lo * es;
        }
        RING_CHECK(ring__cuda_reduce_multi(comm, dsts, n, srcs, n, hi - lo, op->dtype, op->op, n, st));
        break;
    }
    case RING__COLL_REDUCE_SCATTER:
        for (int r = r0; r < r1; r++) {
            for (int p = 0; p < n; p++) srcs[p] = (const unsigned char *)sptr[p] + (size_t)r * bytes;
            RING_CHECK(ring__cuda_reduce_multi(comm, &rptr[r], 1, srcs, n, op->count, op->dtype, op->op, n, st));
        }
        break;
    case RING__COLL_ALLGATHER:
        for (int r = r0; r < r1; r++)
            for (int p = 0; p < n; p++) {
                unsigned char *dst = (unsigned char *)rptr[r] + (size_t)p * bytes;
                if (dst != sptr[p]) RING_CHECK(ring__cuda_memcpy_async(comm, dst, sptr[p], bytes, st));
            }
        break;
    default: /* broadcast: one buffer per rank (sendbuf = recvbuf) */
        for (int r = r0; r < r1; r++)
            if (r != op->root) RING_CHECK(ring__cuda_memcpy_async(comm, sptr[r], sptr[op->root], bytes, st));
    }
fail:
    return rc;
}

/* One GPU does the whole call's work where the ranks' buffers all live on one GPU: their
 * processes' contexts would take turns on it anyway, each turn a context switch (RING_CUDA_DIRECT_WORK). */
static int one_worker(const ring_comm_t *comm, const rec_t *recs)
{
    if (recs[0].o.work != RING__DIRECT_WORK_AUTO) return recs[0].o.work == RING__DIRECT_WORK_ONE;
    for (int p = 1; p < comm->nranks; p++)
        if (memcmp(recs[p].o.gpu, recs[0].o.gpu, sizeof recs[0].o.gpu)) return 0;
    return 1;
}

ring_result_t ring__direct_run(ring_comm_t *comm, const ring__opdesc_t *op, struct CUstream_st *st, int *ran, int *stuck)
{
    direct_t *d = comm->cuda_direct;
    const int n = comm->nranks, me = comm->rank;
    const ring__coll_t coll = op->coll;
    offer_t mine;
    ring_result_t rc = RING_OK;
    char why[256] = "";
    int idle = 0, queued = 0, entered = 0;
    *ran = *stuck = 0;
    if (!d) return RING_OK;
    d->stuck = 0;
    const rec_t *recs = d->recs;
    if (offer(d, comm, op, &mine, why, sizeof why)) {
        RING_CHECK(rec_publish(comm, d, op, &mine));
        RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, me, "%s #%llu: not direct: %s", ring__coll_name(coll),
                 (unsigned long long)op->seq, why);
        return RING_OK;
    }
    /* "Inputs ready": the staging stream is a blocking stream, so an event on it follows the
     * work queued before the call on the legacy default stream; waited for below, while the
     * peers arrive. Where both queues are already empty, nothing is queued at all: a rank
     * with no GPU work in the call then never takes a turn on the GPU. */
    RING_CHECK(ring__cuda_stream_idle(comm, st, &idle));
    if (!idle) RING_CHECK(ring__cuda_event_record(comm, d->ev, st));
    RING_CHECK(rec_publish(comm, d, op, &mine));
    /* Steps 0 and 1. */
    RING_CHECK(wait_for(comm, d, op, W_RECORDS, 0));
    for (int p = 0; p < n; p++) {
        if (recs[p].o.kind != REC_DEVICE || !ring__callrec_same(&recs[p].c, &recs[me].c)) {
            RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, me, "%s #%llu: not direct: rank %d %s", ring__coll_name(coll),
                     (unsigned long long)op->seq, p,
                     recs[p].o.kind == REC_HOST      ? "has host buffers"
                     : recs[p].o.kind == REC_DECLINE ? "declined"
                                                   : "runs another call");
            goto fail; /* *ran = 0: the staged path, whose descriptors name any mismatch */
        }
    }
    const int one = one_worker(comm, recs), works = !one || me == 0;
    /* Step 2: the peers' allocations this rank reads or writes: rank 0 working alone touches
     * every buffer of the call; a rank working its part reads every sendbuf (broadcast: the
     * root's) and, in an all-reduce, writes every recvbuf. */
    {
        int ok = 1;
        for (int p = 0; p < n; p++) {
            d->sptr[p] = d->rptr[p] = NULL;
            if (p == me) {
                d->sptr[p] = (void *)op->sendbuf;
                d->rptr[p] = op->recvbuf;
                continue;
            }
            if (!works || !ok) continue;
            const int need_send = coll == RING__COLL_BROADCAST && !one ? p == op->root : 1;
            const int need_recv = coll != RING__COLL_BROADCAST && (one || coll == RING__COLL_ALLREDUCE);
            void *base = NULL;
            if (need_send && map_peer(d, p, recs[p].o.pid, &recs[p].o.buf[0], &base) != RING_OK) ok = 0;
            else if (need_send) d->sptr[p] = at(base, &recs[p].o.buf[0], 0);
            if (ok && need_recv && map_peer(d, p, recs[p].o.pid, &recs[p].o.buf[1], &base) != RING_OK) ok = 0;
            else if (ok && need_recv) d->rptr[p] = at(base, &recs[p].o.buf[1], 0);
            if (!ok) {
                snprintf(why, sizeof why, "%s", ring_comm_last_error(NULL));
                RING_LOG(RING_LOG_WARN, RING_SUB_COLL, me,
                         "direct CUDA IPC: cannot map rank %d's buffer, device-buffer collectives go the staged way: %s",
                         p, why);
                d->declined = 1;
                atomic_store_explicit(&d->row[me].refused, op->seq + 1, memory_order_relaxed);
            }
        }
        /* Peers read this rank's buffers from stage 1 on: its inputs must be there. */
        if (!idle) RING_CHECK(wait_for(comm, d, op, W_GPU, 0));
        entered = 1; /* stage 1 goes out now: whatever happens next, settle */
        RING_CHECK(stage(comm, d, op, 1));
        for (int p = 0; p < n; p++)
            if (atomic_load_explicit(&d->row[p].refused, memory_order_relaxed) == op->seq + 1) goto fail;
        for (int p = 0; p < n; p++)
            if (withdrew(d, p, op)) {
                rc = withdrawn_error(comm, op, p);
                goto fail;
            }
    }
    d->device = op->device;
    *ran = 1;
    /* Steps 3 and 4: one kernel for all-reduce, one per part for reduce-scatter, copies for
     * the others; once every rank's work finished, no rank's buffers are read or written any
     * more. A rank with no work says so at once (settle). */
    if (!works) {
        atomic_store_explicit(&d->row[me].worked, op->seq + 1, memory_order_release);
    } else {
        queued = 1;
        RING_CHECK(queue_work(comm, op, one ? 0 : me, one ? n : me + 1, d->sptr, d->rptr, st));
        RING_CHECK(ring__cuda_event_record(comm, d->ev, st));
        RING_CHECK(wait_for(comm, d, op, W_GPU, 0));
        /* Now, not at settle: a peer that failed waits for it before it returns. */
        atomic_store_explicit(&d->row[me].worked, op->seq + 1, memory_order_release);
    }
    RING_CHECK(stage(comm, d, op, 2));
    d->ncalls++;
    d->nones += (uint64_t)one;
fail:
    if (entered) settle(comm, d, op, st, queued, rc, recs);
    *stuck = d->stuck;
    d->was_stuck |= d->stuck;
    return rc;
}
