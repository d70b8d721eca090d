/*
 * All-reduce on CUDA device buffers (coll.h, docs/cuda.md "Device buffers").
 *
 * The host path is not touched: api.c sends a call here only when src/cuda/mem.c found its
 * buffers in device memory and ring__cuda_accept_op took it. The wire protocol is the host
 * path's own (same descriptor, same algorithm choice, same messages in the same order), so a
 * rank with device buffers and a rank with host buffers can be in one call.
 *
 *  - 1 rank: a device-to-device copy.
 *  - Sizes the latency algorithms take (recursive doubling/halving, ring__algo_for): the whole
 *    buffer is staged through pinned host memory (these are at most RING_RH_MAX_BYTES) and the
 *    host algorithm runs on it.
 *  - The ring (large sizes): chunk by chunk, never a full-size host copy. For each message
 *    of the host ring's schedule (allreduce.c):
 *      send i:  D2H of its region into pinned send slot i % depth, an event; once the event
 *               completed, isend from the slot; the slot is free when the send completed.
 *      recv i:  irecv into pinned receive slot i % depth; once it arrived: reduce-scatter
 *               steps copy it H2D into device slot i % depth and reduce it into recvbuf there
 *               (recvbuf = slot + sendbuf; AVG divides at the last step), all-gather steps copy
 *               it H2D straight into recvbuf; an event; the slots are free when it completed.
 *    Everything on the GPU goes into one stream, in the order it is queued, and the queueing
 *    follows the host engine's rules: a send that forwards a reduced chunk is queued after
 *    that chunk's reduction (its D2H then runs after the kernel), an all-gather receive is
 *    copied into recvbuf only after the send that reads the same bytes queued its D2H. Windows
 *    are `depth` messages per direction, as on the host, so the deadlock argument of
 *    design.md carries over (the only new waits are for the local GPU, which always
 *    finishes). With one stream, copies in both directions and kernels do not overlap each
 *    other; they overlap the network, which is the slower part.
 *
 * Staging memory (pinned slots, device slots, stream, events) lives in a process-wide pool,
 * one set per call in flight, reused by later calls on the same device: no per-call
 * allocation, and nothing for ring_comm_destroy to free. A set whose call failed with
 * transport requests still pointing into it is never reused (a failed communicator is
 * terminal).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/coll.h"
#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#include "engine.h"
#include "log.h"
#include "p2p.h"
#include "transport.h"
#include "watch.h"

/* ---------- staging sets ---------- */

typedef struct stage {
    struct stage *next;
    int device;
    ring__cuda_stream_t st;
    int depth;
    size_t slot;                   /* bytes per slot (pinned and device) */
    unsigned char *hsend, *hrecv;  /* pinned: depth slots each */
    unsigned char *dslot;          /* device: depth slots of slot + 256 bytes */
    ring__cuda_event_t *sev, *rev; /* per send slot / receive slot */
    void **sreq, **rreq;           /* transport requests per slot */
    unsigned char *whole;          /* pinned, for whole-buffer staging */
    size_t whole_bytes;
} stage_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static stage_t *pool;

static void stage_free_ring(stage_t *s)
{
    for (int i = 0; i < s->depth; i++) {
        if (s->sev) ring__cuda_event_destroy(s->sev[i]);
        if (s->rev) ring__cuda_event_destroy(s->rev[i]);
    }
    free(s->sev);
    free(s->rev);
    free(s->sreq);
    free(s->rreq);
    ring__cuda_host_free(s->hsend);
    ring__cuda_host_free(s->hrecv);
    ring__cuda_dev_free(s->dslot);
    s->sev = s->rev = NULL;
    s->sreq = s->rreq = NULL;
    s->hsend = s->hrecv = s->dslot = NULL;
    s->depth = 0;
    s->slot = 0;
}

static void stage_destroy(stage_t *s)
{
    if (!s) return;
    stage_free_ring(s);
    ring__cuda_host_free(s->whole);
    ring__cuda_stream_destroy(s->st);
    free(s);
}

/* A set for `device` (the calling thread's current device), from the pool or new. */
static ring_result_t stage_get(ring_comm_t *comm, int device, stage_t **out)
{
    *out = NULL;
    pthread_mutex_lock(&pool_mu);
    for (stage_t **pp = &pool; *pp; pp = &(*pp)->next)
        if ((*pp)->device == device) {
            *out = *pp;
            *pp = (*pp)->next;
            break;
        }
    pthread_mutex_unlock(&pool_mu);
    if (*out) return RING_OK;
    stage_t *s = calloc(1, sizeof *s);
    if (!s) return ring__seterr(comm, RING_ERR_NOMEM, "device all-reduce: out of memory");
    s->device = device;
    ring_result_t rc = ring__cuda_stream_create(comm, &s->st);
    if (rc != RING_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return RING_OK;
}

static void stage_put(stage_t *s)
{
    pthread_mutex_lock(&pool_mu);
    s->next = pool;
    pool = s;
    pthread_mutex_unlock(&pool_mu);
}

static ring_result_t stage_ring_ensure(ring_comm_t *comm, stage_t *s, size_t slot, int depth)
{
    if (s->depth >= depth && s->slot >= slot) return RING_OK;
    stage_free_ring(s);
    size_t d = (size_t)depth;
    ring_result_t rc;
    s->sev = calloc(d, sizeof *s->sev);
    s->rev = calloc(d, sizeof *s->rev);
    s->sreq = calloc(d, sizeof *s->sreq);
    s->rreq = calloc(d, sizeof *s->rreq);
    if (!s->sev || !s->rev || !s->sreq || !s->rreq) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "device all-reduce: out of memory");
        goto fail;
    }
    s->depth = depth; /* from here stage_free_ring destroys what was created */
    for (int i = 0; i < depth; i++) {
        RING_CHECK(ring__cuda_event_create(comm, &s->sev[i]));
        RING_CHECK(ring__cuda_event_create(comm, &s->rev[i]));
    }
    RING_CHECK(ring__cuda_host_alloc(comm, d * slot, (void **)&s->hsend));
    RING_CHECK(ring__cuda_host_alloc(comm, d * slot, (void **)&s->hrecv));
    RING_CHECK(ring__cuda_dev_alloc(comm, d * (slot + 256), (void **)&s->dslot));
    s->slot = slot;
    return RING_OK;
fail:
    stage_free_ring(s);
    return rc;
}

static ring_result_t stage_whole_ensure(ring_comm_t *comm, stage_t *s, size_t bytes)
{
    if (s->whole_bytes >= bytes) return RING_OK;
    ring__cuda_host_free(s->whole);
    s->whole = NULL;
    s->whole_bytes = 0;
    ring_result_t rc = ring__cuda_host_alloc(comm, bytes, (void **)&s->whole);
    if (rc == RING_OK) s->whole_bytes = bytes;
    return rc;
}

/* ---------- accepting a call ---------- */

ring_result_t ring__cuda_accept_op(ring_comm_t *comm, ring__opdesc_t *op, int send_dev, int recv_dev,
                                   const char *which)
{
    const char *name = ring__coll_name(op->coll);
    int dev = send_dev >= 0 ? send_dev : recv_dev;
    if (op->coll != RING__COLL_ALLREDUCE)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_%s: %s CUDA device memory (device %d): only ring_allreduce takes device buffers in "
                            "this version; pass host, pinned or managed memory (docs/cuda.md)",
                            name, which, dev);
    if (send_dev < 0 || recv_dev < 0)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_allreduce: %s CUDA device memory (device %d) and the other buffer is not: pass both "
                            "in device memory, or both in host-accessible memory (docs/cuda.md)",
                            which, dev);
    if (send_dev != recv_dev)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_allreduce: sendbuf is on CUDA device %d and recvbuf on device %d: both must be on one "
                            "device",
                            send_dev, recv_dev);
    size_t es = ring_dtype_size(op->dtype);
    if (((uintptr_t)op->sendbuf | (uintptr_t)op->recvbuf) % es)
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "ring_allreduce: device buffers must be aligned to the %zu-byte element size of %s "
                            "(sendbuf %p, recvbuf %p)",
                            es, ring__dtype_name(op->dtype), op->sendbuf, (void *)op->recvbuf);
    char why[256] = "";
    if (!ring__cuda_usable(why, sizeof why))
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_allreduce: %s CUDA device memory (device %d) but this process cannot use the GPU: %s",
                            which, dev, why);
    op->mem_device = 1;
    op->device = dev;
    return RING_OK;
}

/* ---------- the staged ring ---------- */

static ring_result_t waiting_error(ring_comm_t *comm, const ring__opdesc_t *op, ring_result_t code, const char *what,
                                   size_t ns, size_t nsend, size_t nr, size_t nrecv, int got_desc)
{
    unsigned long long seq = (unsigned long long)op->seq;
    if (!got_desc)
        return ring__seterr(comm, code, "allreduce #%llu (device buffers) %s while waiting for %s to enter the collective",
                            seq, what, comm->peer_desc[0]);
    if (nr < nrecv)
        return ring__seterr(comm, code, "allreduce #%llu (device buffers) %s while waiting for message %zu of %zu from %s",
                            seq, what, nr + 1, nrecv, comm->peer_desc[0]);
    return ring__seterr(comm, code, "allreduce #%llu (device buffers) %s while sending message %zu of %zu to %s", seq,
                        what, ns + 1, nsend, comm->peer_desc[1]);
}

static ring_result_t staged_ring(ring_comm_t *comm, const ring__opdesc_t *op, stage_t *S, int *quarantine)
{
    const int n = comm->nranks, r = comm->pos, depth = comm->params.pipeline_depth;
    ring__sched_t sc; /* the host schedule's geometry; its callbacks are not used */
    ring__sched_init(&sc, comm, op, n, 1, 2 * (n - 1), 0);
    const ring__layout_t *L = &sc.layout;
    const int nsteps = sc.nsteps;
    const size_t es = sc.esize, nsend = sc.nsend, nrecv = sc.nrecv, D = (size_t)depth;
    const size_t slot = (comm->params.chunk_bytes + 255) & ~(size_t)255;
    const unsigned char *sendbuf = op->sendbuf;
    unsigned char *recvbuf = op->recvbuf;
    void *sconn = comm->send_right, *rconn = comm->recv_left;
    const ring__transport_t *stp = ring__tp_of(sconn), *rtp = ring__tp_of(rconn);
    unsigned char mydesc[RING__DESC_LEN], theirdesc[RING__DESC_LEN];
    void *dsend = NULL, *drecv = NULL;
    int got_desc = 0, sent_desc = 0;
    /* sends: staged (D2H queued) >= posted (isend) >= done; receives: posted >= arrived >=
     * processed (H2D and kernel queued) >= released (that GPU work finished). */
    size_t ns_staged = 0, ns_posted = 0, ns_done = 0;
    size_t nr_posted = 0, nr_arrived = 0, nr_proc = 0, nr_released = 0;
    int64_t last = ring__now_ns();
    ring_result_t rc = RING_OK;

    RING_CHECK(stage_ring_ensure(comm, S, slot, depth));
    ring__desc_build(mydesc, op, RING__ALGO_RING);
    RING_CHECK(stp->isend(sconn, mydesc, RING__DESC_LEN, NULL, &dsend));
    RING_CHECK(rtp->irecv(rconn, theirdesc, RING__DESC_LEN, NULL, &drecv));
    if (!dsend || !drecv) {
        rc = ring__seterr(comm, RING_ERR_INTERNAL, "device all-reduce: transport refused the descriptor message");
        goto fail;
    }
    RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank, "allreduce #%llu on device %d: count %zu, %zu messages each way",
             (unsigned long long)op->seq, op->device, op->count, nsend);

    for (;;) {
        int busy = 0, moved = 0;
        size_t j, off, len;
        int k, c;

        /* Receives into free pinned slots. */
        while (got_desc && nr_posted < nrecv && nr_posted - nr_released < D) {
            ring__layout_msg_coords(L, nsteps, nr_posted, &j, &k, &c);
            ring__layout_chunk(L, j, ring__allreduce_seg_recv(r, n, k), c, &off, &len);
            void *req = NULL;
            RING_CHECK(rtp->irecv(rconn, S->hrecv + (nr_posted % D) * S->slot, len * es, NULL, &req));
            if (!req) break;
            S->rreq[nr_posted % D] = req;
            nr_posted++;
            busy = 1;
        }
        /* Stage sends: D2H once the chunk's reduction is queued and a send slot is free. */
        while (ns_staged < nsend && ns_staged - ns_done < D) {
            ring__layout_msg_coords(L, nsteps, ns_staged, &j, &k, &c);
            if (k > 0 && ring__layout_msg_index(L, nsteps, j, k - 1, c) >= nr_proc) break;
            ring__layout_chunk(L, j, ring__allreduce_seg_sent(r, n, k), c, &off, &len);
            const unsigned char *src = (k == 0 ? sendbuf : recvbuf) + off * es;
            size_t si = ns_staged % D;
            RING_CHECK(ring__cuda_memcpy_async(comm, S->hsend + si * S->slot, src, len * es, S->st));
            RING_CHECK(ring__cuda_event_record(comm, S->sev[si], S->st));
            ns_staged++;
            busy = 1;
        }
        /* Post staged sends, in order, once their copy finished. */
        while (ns_posted < ns_staged) {
            size_t si = ns_posted % D;
            int done = 0;
            RING_CHECK(ring__cuda_event_query(comm, S->sev[si], &done));
            if (!done) break;
            ring__layout_msg_coords(L, nsteps, ns_posted, &j, &k, &c);
            ring__layout_chunk(L, j, ring__allreduce_seg_sent(r, n, k), c, &off, &len);
            void *req = NULL;
            RING_CHECK(stp->isend(sconn, S->hsend + si * S->slot, len * es, NULL, &req));
            if (!req) break;
            S->sreq[si] = req;
            ns_posted++;
            busy = 1;
        }

        RING_CHECK(stp->progress(sconn, &moved));
        RING_CHECK(rtp->progress(rconn, &moved));

        RING_CHECK(ring__desc_step(comm, stp, rtp, &dsend, &drecv, &sent_desc, &got_desc, mydesc, theirdesc, &busy));
        while (ns_done < ns_posted) {
            int done = 0;
            RING_CHECK(stp->test(S->sreq[ns_done % D], &done));
            if (!done) break;
            S->sreq[ns_done % D] = NULL;
            ns_done++;
            busy = 1;
        }
        while (nr_arrived < nr_posted) {
            int done = 0;
            RING_CHECK(rtp->test(S->rreq[nr_arrived % D], &done));
            if (!done) break;
            S->rreq[nr_arrived % D] = NULL;
            nr_arrived++;
            busy = 1;
        }
        /* Process arrived receives, in order: queue their H2D (and reduction). */
        while (nr_proc < nr_arrived) {
            ring__layout_msg_coords(L, nsteps, nr_proc, &j, &k, &c);
            ring__layout_chunk(L, j, ring__allreduce_seg_recv(r, n, k), c, &off, &len);
            size_t ri = nr_proc % D;
            unsigned char *dst = recvbuf + off * es;
            const unsigned char *pinned = S->hrecv + ri * S->slot;
            if (k <= n - 2) {
                /* Reduce-scatter: the device slot starts at dst's address modulo 256, so the
                 * kernel's 16-byte vector body applies whenever sendbuf and recvbuf agree. */
                unsigned char *ds = S->dslot + ri * (S->slot + 256) + ((uintptr_t)dst & 255);
                const unsigned char *own = sendbuf + off * es;
                RING_CHECK(ring__cuda_memcpy_async(comm, ds, pinned, len * es, S->st));
                if (k == n - 2)
                    RING_CHECK(ring__cuda_reduce_final(comm, dst, ds, own, len, op->dtype, op->op, n, S->st));
                else
                    RING_CHECK(ring__cuda_reduce(comm, dst, ds, own, len, op->dtype, op->op, S->st));
            } else {
                /* All-gather: straight into recvbuf, after the send that reads these bytes
                 * queued its copy (the host engine's guard). */
                size_t guard = ring__layout_msg_index(L, nsteps, j, k - (n - 1), c);
                if (guard >= ns_staged) break;
                RING_CHECK(ring__cuda_memcpy_async(comm, dst, pinned, len * es, S->st));
            }
            RING_CHECK(ring__cuda_event_record(comm, S->rev[ri], S->st));
            nr_proc++;
            busy = 1;
        }
        /* Release slots whose GPU work finished. */
        while (nr_released < nr_proc) {
            int done = 0;
            RING_CHECK(ring__cuda_event_query(comm, S->rev[nr_released % D], &done));
            if (!done) break;
            nr_released++;
            busy = 1;
        }

        if (got_desc && sent_desc && ns_done == nsend && nr_released == nrecv) break;

        int64_t now = ring__now_ns();
        if (busy || moved) {
            last = now;
            continue;
        }
        /* GPU work in flight cannot be waited for in poll(): only yield then (abort and
         * remote failures are still checked); otherwise sleep on the sockets as the host
         * engine does. */
        int gpu_pending = ns_posted < ns_staged || nr_released < nr_proc;
        int stop;
        void *conns[2] = {sconn, rconn};
        RING_CHECK(ring__wait_idle(comm, conns, 2, gpu_pending ? 0 : now - last, &stop));
        if (stop == RING__WAIT_ABORTED) {
            rc = waiting_error(comm, op, RING_ERR_ABORTED, "aborted by ring_comm_abort", ns_done, nsend, nr_arrived, nrecv,
                               got_desc);
            goto fail;
        }
        if (stop == RING__WAIT_REMOTE) {
            rc = ring__remote_result(comm, "allreduce");
            goto fail;
        }
        if (stop == RING__WAIT_TIMEOUT) {
            char what[96];
            snprintf(what, sizeof what, "timed out: no progress for %d ms (RING_TIMEOUT_MS)", comm->params.timeout_ms);
            rc = waiting_error(comm, op, RING_ERR_TIMEOUT, what, ns_done, nsend, nr_arrived, nrecv, got_desc);
            goto fail;
        }
    }
    return RING_OK;

fail:
    /* Requests still posted point into the pinned slots (and the descriptors into this frame,
     * which the host engine shares: a failed communicator is never driven again). */
    if (ns_posted > ns_done || nr_posted > nr_arrived || dsend || drecv) *quarantine = 1;
    return rc;
}

/* ---------- entry ---------- */

static ring_result_t run(ring_comm_t *comm, const ring__opdesc_t *op, stage_t *S, int *quarantine)
{
    const size_t bytes = op->count * ring_dtype_size(op->dtype);
    ring_result_t rc;
    if (comm->nranks == 1) {
        if (op->sendbuf == op->recvbuf) return RING_OK;
        rc = ring__cuda_memcpy_async(comm, op->recvbuf, op->sendbuf, bytes, S->st);
        return rc == RING_OK ? ring__cuda_stream_sync(comm, S->st) : rc;
    }
    int algo = ring__algo_for(comm, RING__COLL_ALLREDUCE, bytes);
    if (algo == RING__ALGO_RING) return staged_ring(comm, op, S, quarantine);

    /* Recursive doubling or halving (at most RING_RH_MAX_BYTES): the host algorithm on a
     * pinned copy of the whole buffer. */
    RING_CHECK(stage_whole_ensure(comm, S, bytes));
    RING_CHECK(ring__cuda_memcpy_async(comm, S->whole, op->sendbuf, bytes, S->st));
    RING_CHECK(ring__cuda_stream_sync(comm, S->st));
    ring__opdesc_t h = *op;
    h.sendbuf = h.recvbuf = S->whole;
    h.mem_device = 0;
    rc = algo == RING__ALGO_RD ? ring__allreduce_rd(comm, &h) : ring__allreduce_rh(comm, &h);
    if (rc != RING_OK) {
        *quarantine = 1; /* the point-to-point layer may still hold requests into S->whole */
        return rc;
    }
    RING_CHECK(ring__cuda_memcpy_async(comm, op->recvbuf, S->whole, bytes, S->st));
    RING_CHECK(ring__cuda_stream_sync(comm, S->st));
    return RING_OK;
fail:
    return rc;
}

ring_result_t ring__cuda_run_op(ring_comm_t *comm, const ring__opdesc_t *op)
{
    if (op->coll != RING__COLL_ALLREDUCE)
        return ring__seterr(comm, RING_ERR_INTERNAL, "device path: %s is not supported", ring__coll_name(op->coll));
    int prev = 0, quarantine = 0;
    stage_t *S = NULL;
    /* Blocking calls run on the caller's thread: leave its current device as it was. A thread
     * without a context (the progress thread, or a caller that never used CUDA) is left with
     * the buffers' device: "restoring" device 0 there would create a context on a GPU the
     * process may not use (cudaSetDevice initialises the context since CUDA 12). */
    const int restore = !ring__cuda_emulating() && ring__mem_thread_has_context() == 1;
    ring_result_t rc = ring__cuda_get_device(comm, &prev);
    if (rc != RING_OK) return rc;
    if (prev != op->device) rc = ring__cuda_set_device(comm, op->device);
    if (rc == RING_OK) rc = stage_get(comm, op->device, &S);
    if (rc == RING_OK) {
        rc = run(comm, op, S, &quarantine);
        /* Nothing queued may run after the call returned: wait for the stream, whatever
         * failed (its own error goes to the thread's message, not the comm's). A stream that
         * cannot be waited for (a sticky CUDA error) is not reused. */
        if (rc != RING_OK && ring__cuda_stream_sync(NULL, S->st) != RING_OK) quarantine = 2;
        if (quarantine == 2) stage_destroy(S);
        else if (!quarantine) stage_put(S);
        /* quarantine == 1: transport requests may still point into S; it is never reused. */
    }
    if (rc != RING_OK)
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank, "allreduce #%llu on device %d failed: %s",
                 (unsigned long long)op->seq, op->device, comm->errmsg);
    if (restore && prev != op->device) (void)ring__cuda_set_device(NULL, prev);
    return rc;
}
