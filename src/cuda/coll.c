/*
 * Collectives on CUDA device buffers: all-reduce, reduce-scatter, all-gather and broadcast
 * (coll.h, docs/cuda.md "Device buffers").
 *
 * The host path is not touched: api.c sends a call here only when src/cuda/mem.c found its
 * buffers in device memory and ring__cuda_accept_op took it. The wire protocol is the host
 * path's own (same descriptor, same algorithm choice, same messages in the same order: the
 * ring algorithms' own schedules drive the staging below), so ranks with device buffers and
 * ranks with host buffers can be in one call.
 *
 *  - 1 rank: a device-to-device copy (nothing for broadcast).
 *  - Sizes the point-to-point algorithms take (recursive doubling/halving all-reduce, tree
 *    broadcast; ring__algo_for): the whole buffer is staged through pinned host memory and
 *    the host algorithm runs on it. By default these are small buffers (RING_RH_MAX_BYTES,
 *    RING_TREE_MAX_BYTES); RING_ALGO=rd|rh forces them, and this staging, at any size.
 *  - The ring (everything else): chunk by chunk through `depth` pinned slots per direction,
 *    never a full-size host copy (staged_engine below). Bytes on the wire are the host
 *    algorithm's; each byte sent also crosses PCIe once D2H, each byte received once H2D.
 *    Over a verbs link with GPUDirect RDMA (gdr.c) the NIC reads and writes GPU memory
 *    instead, and neither pinned slots nor the CPU touch the bytes.
 *
 * Staging memory (pinned slots, device slots, stream, events) lives in a process-wide pool,
 * one set per call in flight, reused by later calls on the same device: no per-call
 * allocation, and nothing for ring_comm_destroy to free. A set whose call failed with
 * transport requests still pointing into it is never reused (a failed communicator is
 * terminal).
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/coll.h"
#include "cuda/direct.h"
#include "cuda/gdr.h"
#include "cuda/ipc.h"
#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#include "engine.h"
#include "log.h"
#include "p2p.h"
#include "rdma.h"
#include "transport.h"
#include "watch.h"

/* ---------- staging sets ---------- */

typedef struct stage {
    struct stage *next;
    int device;
    ring__cuda_stream_t st, so; /* receives' H2D and kernels; sends' D2H (and IPC copies) */
    int depth;
    size_t slot;                   /* bytes per slot (pinned and device) */
    unsigned char *hsend, *hrecv;  /* pinned: depth slots each */
    unsigned char *dslot;          /* device: depth slots of slot + 256 bytes */
    ring__cuda_event_t *sev, *rev; /* per send slot / receive slot */
    void **sreq, **rreq;           /* transport requests per slot */
    unsigned char *whole;          /* pinned, for whole-buffer staging */
    size_t whole_bytes;
    int stuck; /* its GPU work did not finish within RING_TIMEOUT_MS (gpu_timeout) */
} stage_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static stage_t *pool;
static atomic_ulong ring_sets_made; /* ring__cuda_stage_ring_allocs */

unsigned long ring__cuda_stage_ring_allocs(void) { return atomic_load(&ring_sets_made); }

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
    ring__cuda_stream_destroy(s->so);
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
    if (!s) return ring__seterr(comm, RING_ERR_NOMEM, "device collectives: out of memory");
    s->device = device;
    ring_result_t rc = ring__cuda_stream_create(comm, &s->st);
    if (rc == RING_OK) rc = ring__cuda_stream_create(comm, &s->so);
    if (rc != RING_OK) {
        ring__cuda_stream_destroy(s->st);
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
    /* Grow to cover what the set held too (its users index with s->slot and their own depth):
     * communicators of one device with a smaller chunk and a deeper pipeline, used in turn,
     * otherwise freed and allocated the set on every call, each free waiting for the device.
     * Not beyond twice the larger of the two: 64 KiB x 16 and 4 MiB x 2 would make 64 MiB of
     * pinned and device memory where each needs 1 or 8; those go back to the exact size. */
    const size_t held = (size_t)s->depth * s->slot, need = (size_t)depth * slot;
    const size_t both = (size_t)RING__MAX(depth, s->depth) * RING__MAX(slot, s->slot);
    if (both <= 2 * RING__MAX(held, need)) {
        depth = RING__MAX(depth, s->depth);
        slot = RING__MAX(slot, s->slot);
    }
    stage_free_ring(s);
    atomic_fetch_add(&ring_sets_made, 1);
    size_t d = (size_t)depth;
    ring_result_t rc;
    s->sev = calloc(d, sizeof *s->sev);
    s->rev = calloc(d, sizeof *s->rev);
    s->sreq = calloc(d, sizeof *s->sreq);
    s->rreq = calloc(d, sizeof *s->rreq);
    if (!s->sev || !s->rev || !s->sreq || !s->rreq) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "device collectives: out of memory");
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
    if (op->coll != RING__COLL_ALLREDUCE && op->coll != RING__COLL_REDUCE_SCATTER && op->coll != RING__COLL_ALLGATHER &&
        op->coll != RING__COLL_BROADCAST)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED, "ring_%s: %s CUDA device memory (device %d): not supported", name,
                            which, dev);
    if (send_dev < 0 || recv_dev < 0)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_%s: %s CUDA device memory (device %d) and the other buffer is not: pass both "
                            "in device memory, or both in host-accessible memory (docs/cuda.md)",
                            name, which, dev);
    if (send_dev != recv_dev)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_%s: sendbuf is on CUDA device %d and recvbuf on device %d: both must be on one device",
                            name, send_dev, recv_dev);
    size_t es = ring_dtype_size(op->dtype);
    if (((uintptr_t)op->sendbuf | (uintptr_t)op->recvbuf) % es)
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "ring_%s: device buffers must be aligned to the %zu-byte element size of %s "
                            "(sendbuf %p, recvbuf %p)",
                            name, es, ring__dtype_name(op->dtype), op->sendbuf, (void *)op->recvbuf);
    if (ring__cuda_ipc_links(comm->params.cuda_ipc)) {
        /* The CUDA IPC links are made on the device of the first device collective and stay
         * there: claimed here, in issue order, before anything is sent. */
        int bound = -1;
        if (!atomic_compare_exchange_strong(&comm->cuda_ipc_device, &bound, dev) && bound != dev)
            return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                                "ring_%s: buffers on CUDA device %d, but with RING_CUDA_IPC=1 this communicator's "
                                "device collectives run on device %d (its first one): use one device per "
                                "communicator (docs/cuda.md)",
                                name, dev, bound);
    }
    char why[256] = "";
    if (!ring__cuda_usable(why, sizeof why))
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "ring_%s: %s CUDA device memory (device %d) but this process cannot use the GPU: %s", name,
                            which, dev, why);
    op->mem_device = 1;
    op->device = dev;
    return RING_OK;
}

/* ---------- waiting for the GPU ---------- */

/* The staging streams are blocking ones (ring_cuda.h): their copies and kernels run only after
 * work queued earlier on the device's legacy default stream, so a caller's kernel there that
 * does not end (or a hung GPU) holds them for ever. Every wait for them is bounded by
 * RING_TIMEOUT_MS and ends in this error; the set is then marked stuck: never reused, never
 * freed under the GPU (ring__cuda_free_dead). */
ring_result_t ring__cuda_gpu_timeout(ring_comm_t *comm, const ring__opdesc_t *op, int64_t waited_ns)
{
    return ring__seterr(comm, RING_ERR_TIMEOUT,
                        "%s #%llu: timed out: the GPU (device %d) has not finished the copies and kernels ringcomm "
                        "queued for this call in %lld ms (RING_TIMEOUT_MS is %d): they run after work queued "
                        "earlier on the device's legacy default stream (a kernel there that does not end?), or "
                        "the GPU hangs; they may still write recvbuf when they run",
                        ring__coll_name(op->coll), (unsigned long long)op->seq, op->device,
                        (long long)(waited_ns / 1000000), comm->params.timeout_ms);
}

static ring_result_t gpu_timeout(ring_comm_t *comm, stage_t *S, const ring__opdesc_t *op, int64_t waited_ns)
{
    S->stuck = 1;
    return ring__cuda_gpu_timeout(comm, op, waited_ns);
}

/* Everything queued on s, waited for on the host until RING_TIMEOUT_MS after *since (0: from
 * now; the waits of one phase share a clock). Polled with a yield between tries for 10 ms, as
 * cudaStreamSynchronize waits by default (it spins, or yields where the CPUs are fewer than
 * the contexts), since a nap would add its length to the end of every call; then with 100 us
 * naps, so that a long wait does not hold a CPU. Neither an abort nor a peer's failure ends
 * it: the copies would still write recvbuf after the return. report NULL: a failed call's
 * cleanup, which keeps the call's own error. */
static ring_result_t drain(ring_comm_t *comm, ring_comm_t *report, stage_t *S, ring__cuda_stream_t s,
                           const ring__opdesc_t *op, int64_t *since)
{
    const int64_t bound = (int64_t)comm->params.timeout_ms * 1000000LL;
    if (!*since) *since = ring__now_ns();
    for (;;) {
        int done = 0;
        ring_result_t rc = ring__cuda_stream_query(report, s, &done);
        if (rc != RING_OK || done) return rc;
        const int64_t waited = ring__now_ns() - *since;
        if (waited >= bound) {
            if (report) return gpu_timeout(report, S, op, waited);
            S->stuck = 1;
            return RING_ERR_TIMEOUT;
        }
        if (waited < 10000000) sched_yield();
        else ring__nap_ns(100000);
    }
}

/* Memory that a GPU which did not finish its work may still use (ring_comm_destroy): never
 * freed, and kept reachable here, so that leak checkers do not call it lost. */
static pthread_mutex_t left_mu = PTHREAD_MUTEX_INITIALIZER;
static void **left;
static size_t nleft, capleft;

void ring__cuda_leave(void *p)
{
    pthread_mutex_lock(&left_mu);
    if (nleft == capleft) {
        size_t cap = capleft ? 2 * capleft : 8;
        void **n = realloc(left, cap * sizeof *n);
        if (n) left = n, capleft = cap;
    }
    if (nleft < capleft) left[nleft++] = p;
    pthread_mutex_unlock(&left_mu);
}

/* ---------- the staged ring engine ---------- */

/* What the reduction hook needs of the call in progress. */
typedef struct dev_state {
    stage_t *S;
    size_t depth;                /* the communicator's: the pooled S may have more slots, from another */
    size_t cur;                  /* the receive recv_done is processing */
    const unsigned char *pinned; /* its bytes: pinned slot, the sender's slot (CUDA IPC) or a GPUDirect slot */
    int reduced;                 /* recv_done reduced it (through the hook) */
    int remote;                  /* it is in device memory already (CUDA IPC, GPUDirect RDMA) */
    unsigned char **kept;        /* per receive slot: where a kept (forwarded) sum lives */
    ring_result_t err;
} dev_state_t;

/* ring__sched_reduce on the device: the received slot goes H2D into the receive's device
 * slot, then a kernel. The device slot starts at the output's address modulo 256 (the own
 * input's when the sum stays in the slot to be forwarded), so the kernel's 16-byte vector body
 * applies whenever sendbuf and recvbuf agree. A message that came over CUDA IPC is already on
 * a GPU: the kernel reads it in the sender's slot; so does one that GPUDirect RDMA read into a
 * receive slot of this GPU. */
static void dev_reduce(ring__sched_t *s, void *dst, const void *slot, const void *own, size_t n, int final)
{
    dev_state_t *d = s->dev;
    stage_t *S = d->S;
    ring_comm_t *comm = s->comm;
    ring_result_t rc = RING_OK;
    if (d->err) return;
    if (slot != d->pinned) {
        d->err = ring__seterr(comm, RING_ERR_INTERNAL, "device engine: receive %zu reduced from a foreign slot", d->cur);
        return;
    }
    const size_t ri = d->cur % d->depth; /* as the engine counts receive slots (kept has depth) */
    const int in_slot = dst == slot; /* a partial sum that a later send forwards */
    unsigned char *ds = S->dslot + ri * (S->slot + 256) + ((uintptr_t)(in_slot ? own : dst) & 255);
    unsigned char *out = in_slot ? ds : dst;
    const void *in = slot;
    if (!d->remote) {
        RING_CHECK(ring__cuda_memcpy_async(comm, ds, slot, n * s->esize, S->st));
        in = ds;
    }
    if (final) RING_CHECK(ring__cuda_reduce_final(comm, out, in, own, n, s->op->dtype, s->op->op, comm->nranks, S->st));
    else RING_CHECK(ring__cuda_reduce(comm, out, in, own, n, s->op->dtype, s->op->op, S->st));
    if (in_slot) d->kept[ri] = ds;
    d->reduced = 1;
    return;
fail:
    d->err = rc;
}

/* A link message's request (ipc.c) finished: *req back to NULL, *flag set. */
static ring_result_t link_step(const ring__transport_t *tp, void **req, int *flag)
{
    int done = 0;
    ring_result_t rc = *req ? tp->test(*req, &done) : RING_OK;
    if (rc == RING_OK && done) {
        *req = NULL;
        *flag = 1;
    }
    return rc;
}

/*
 * Runs a host ring schedule (engine.h) whose buffers are device memory. The callbacks say
 * which bytes each message carries; this loop moves them through pinned slots:
 *   send i:  D2H of its bytes (device buffer, or the device slot that holds a kept partial
 *            sum) into pinned send slot i % depth, an event; once it completed, isend from
 *            the slot; the slot is free when the send completed.
 *   recv i:  irecv into pinned receive slot i % depth; once arrived, in order: into a device
 *            buffer, an H2D copy; into scratch (buf NULL), recv_done reduces it through
 *            dev_reduce (H2D into the device slot, a kernel); an event. The slots are free when
 *            that work finished and, for a kept sum, the D2H of the send that forwards it finished.
 * With RING_CUDA_IPC=1 a link message follows the descriptor each way (ipc.c), and a link that
 * is CUDA IPC replaces the pinned slots and the transport: send i is a device-to-device copy
 * into the right neighbour's slot of the link, published once it finished; receive i reads
 * the left neighbour's slot (the kernel reduces out of it, or a device-to-device copy), and
 * the slot goes back once that work finished. The windows stay the same.
 * A verbs link with GPUDirect RDMA (gdr.c) keeps the transport but not the host memory: send i
 * is a device-to-device copy into the GPUDirect send slot, then an isend that the HCA reads
 * from there; receive i, when the left neighbour's descriptor says it sends that way, is an
 * irecv that the HCA fills in a GPUDirect receive slot, out of which the kernel reduces.
 * Two streams, so that the copies out (D2H) overlap the copies in and the kernels (PCIe is
 * full duplex): receives' H2D and kernels go into st, sends' copies into so. The host
 * engine's rules become rules about queueing plus events between the streams: a send waits
 * until the receive it depends on has queued its work and then, on so, for that receive's
 * event (its D2H runs after the kernel); a receive with a guard waits until that send queued
 * its D2H and then, on st, for its event; a device slot holding a kept sum is released only
 * once the D2H that forwards it finished (not merely queued). An event is waited for only
 * while it still marks the message in question: a slot's event is re-recorded only after
 * that message released its slot. Windows are `depth` messages per direction, as on the
 * host, so the deadlock argument of design.md carries over (the only new waits are for the
 * local GPU, whose streams only ever wait for work queued earlier, so it finishes unless that
 * earlier work never does: gpu_timeout).
 */
static ring_result_t staged_engine(ring__sched_t *sc, stage_t *S, int *quarantine)
{
    ring_comm_t *comm = sc->comm;
    const ring__opdesc_t *op = sc->op;
    const int depth = comm->params.pipeline_depth;
    const size_t D = (size_t)depth, nsend = sc->nsend, nrecv = sc->nrecv;
    const size_t slot = (comm->params.chunk_bytes + 255) & ~(size_t)255;
    void *sconn = comm->send_right, *rconn = comm->recv_left;
    const ring__transport_t *stp = ring__tp_of(sconn), *rtp = ring__tp_of(rconn);
    unsigned char mydesc[RING__DESC_LEN], theirdesc[RING__DESC_LEN] = {0};
    void *dsend = NULL, *drecv = NULL;
    int got_desc = 0, sent_desc = 0;
    /* CUDA IPC (ipc.c): the link messages, and the links' first message numbers this call. */
    const int ipc_on = ring__cuda_ipc_links(comm->params.cuda_ipc);
    ring__ipc_call_t ic = {.tx = 0, .rx = 0};
    void *lsend = NULL, *lrecv = NULL;
    int sent_link = !ipc_on, got_link = !ipc_on;
    uint64_t txb = 0, rxb = 0;
    int64_t last_check = 0;
    /* GPUDirect RDMA (gdr.c): 1 where this call's messages go that way; gdr_rx is known once
     * the left neighbour's descriptor (which says how it sends) arrived. */
    ring__gdr_t *g = NULL;
    int gdr_tx = 0, gdr_rx = -1;
    /* sends: staged (D2H queued) >= posted (isend) >= done; receives: posted >= arrived >=
     * processed (H2D and kernel queued) >= released (that GPU work finished). */
    size_t ns_staged = 0, ns_posted = 0, ns_done = 0;
    size_t nr_posted = 0, nr_arrived = 0, nr_proc = 0, nr_released = 0;
    size_t *slen = NULL, *held = NULL; /* per send slot: bytes; per receive slot: kept receive or NONE */
    size_t *fwd = NULL;                /* per receive slot: the send whose D2H reads its kept sum, or NONE */
    unsigned char **sdst = NULL;       /* per send slot: where its bytes were copied */
    const unsigned char **rsrc = NULL; /* per receive slot: where its bytes are */
    dev_state_t d = {.S = S, .depth = D};
    int64_t last = ring__now_ns();
    ring_result_t rc = RING_OK;

    RING_CHECK(stage_ring_ensure(comm, S, slot, depth));
    slen = calloc(D, sizeof *slen);
    held = malloc(D * sizeof *held);
    fwd = malloc(D * sizeof *fwd);
    d.kept = calloc(D, sizeof *d.kept);
    sdst = calloc(D, sizeof *sdst);
    rsrc = calloc(D, sizeof *rsrc);
    if (!slen || !held || !fwd || !d.kept || !sdst || !rsrc) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "device engine: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < D; i++) held[i] = fwd[i] = RING__NONE;
    sc->reduce = dev_reduce;
    sc->dev = &d;

#if RING_HAVE_RDMA
    {
        const int tx_verbs = stp == &ring__rdma_transport && comm->params.chunk_bytes <= ring__rdma_slot_bytes(sconn);
        const int rx_verbs = rtp == &ring__rdma_transport && comm->params.chunk_bytes <= ring__rdma_slot_bytes(rconn);
        if (tx_verbs || rx_verbs) RING_CHECK(ring__gdr_slots(comm, op->device, slot, depth, &g));
        gdr_tx = g && tx_verbs;
        if (!g || !rx_verbs) gdr_rx = 0;
    }
#else
    gdr_rx = 0;
#endif
    ring__desc_build(mydesc, op, RING__ALGO_RING | (ipc_on ? RING__ALGO_CUDA_IPC : 0) | (gdr_tx ? RING__DESC_GDR : 0));
    if (ipc_on) {
        RING_CHECK(ring__ipc_begin(comm, op->device, &ic));
        txb = ring__ipc_tx_base(comm);
        rxb = ring__ipc_rx_base(comm);
    }
    RING_CHECK(stp->isend(sconn, mydesc, RING__DESC_LEN, NULL, &dsend));
    RING_CHECK(rtp->irecv(rconn, theirdesc, RING__DESC_LEN, NULL, &drecv));
    if (!dsend || !drecv) {
        rc = ring__seterr(comm, RING_ERR_INTERNAL, "device engine: transport refused the descriptor message");
        goto fail;
    }
    RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank, "%s #%llu on device %d: count %zu, %zu sends, %zu receives",
             ring__coll_name(op->coll), (unsigned long long)op->seq, op->device, op->count, nsend, nrecv);

    for (;;) {
        int busy = 0, moved = 0, gpu_wait = 0;

        /* The link messages go after the descriptors; the one from the left is taken only
         * once its descriptor matched, so a rank without RING_CUDA_IPC=1 is reported as a
         * mismatch rather than as a message of the wrong length. */
        if (!sent_link && !lsend) RING_CHECK(stp->isend(sconn, ic.out, RING__IPC_MSG_LEN, NULL, &lsend));
        if (!got_link && !lrecv && got_desc) RING_CHECK(rtp->irecv(rconn, ic.in, RING__IPC_MSG_LEN, NULL, &lrecv));
        if (ic.tx < 0) {
            ring__ipc_poll_answer(comm, &ic);
            busy |= ic.tx >= 0;
        }

        if (got_desc && gdr_rx < 0) gdr_rx = (ring__desc_hints(theirdesc) & RING__DESC_GDR) != 0;
        /* Receives into free pinned slots (over CUDA IPC: the sender's slots, nothing to post;
         * by GPUDirect RDMA: the GPUDirect receive slots). */
        while (got_link && got_desc && nr_posted < nrecv && nr_posted - nr_released < D) {
            if (ic.rx == 1) {
                nr_posted++;
                busy = 1;
                continue;
            }
            void *buf = NULL, *req = NULL;
            size_t len = 0, guard = RING__NONE;
            int keep = 0;
            sc->recv_msg(sc, nr_posted, &buf, &len, &guard, &keep);
            if (gdr_rx == 1)
                RING_CHECK(rtp->irecv(rconn, g->rbuf + (nr_posted % D) * g->slot, len, g->rmh, &req));
            else RING_CHECK(rtp->irecv(rconn, S->hrecv + (nr_posted % D) * S->slot, len, NULL, &req));
            if (!req) break;
            S->rreq[nr_posted % D] = req;
            nr_posted++;
            busy = 1;
        }
        /* Stage sends: D2H once what they read is queued and a send slot is free (over CUDA
         * IPC: a device-to-device copy once the receiver gave the link's slot back). */
        while (ic.tx >= 0 && (sent_link || lsend) && ns_staged < nsend && ns_staged - ns_done < D) {
            const void *buf = NULL;
            size_t len = 0, dep = RING__NONE, slot_of = RING__NONE;
            sc->send_msg(sc, ns_staged, &buf, &len, &dep, &slot_of);
            if (dep != RING__NONE && dep >= nr_proc) break;
            if (ic.tx == 1 && !ring__ipc_tx_credit(comm, txb + ns_staged)) break;
            if (slot_of != RING__NONE) {
                if (held[slot_of % D] != slot_of) {
                    rc = ring__seterr(comm, RING_ERR_INTERNAL, "device engine: send %zu forwards receive %zu, not held",
                                      ns_staged, slot_of);
                    goto fail;
                }
                buf = d.kept[slot_of % D];
            }
            size_t si = ns_staged % D;
            /* What it reads was written on the receive stream: wait for that receive's event,
             * which is still its own while the receive holds its slot (the slot's next
             * receive cannot be processed before it is released). */
            if (slot_of != RING__NONE) RING_CHECK(ring__cuda_stream_wait_event(comm, S->so, S->rev[slot_of % D]));
            else if (dep != RING__NONE && dep >= nr_released)
                RING_CHECK(ring__cuda_stream_wait_event(comm, S->so, S->rev[dep % D]));
            sdst[si] = ic.tx == 1 ? ring__ipc_tx_slot(comm, txb + ns_staged, buf)
                       : gdr_tx   ? g->sbuf + si * g->slot
                                  : S->hsend + si * S->slot;
            RING_CHECK(ring__cuda_memcpy_async(comm, sdst[si], buf, len, S->so));
            RING_CHECK(ring__cuda_event_record(comm, S->sev[si], S->so));
            if (slot_of != RING__NONE) {
                /* The device slot is free once this copy finished (ns_posted passes it). */
                held[slot_of % D] = RING__NONE;
                fwd[slot_of % D] = ns_staged;
            }
            slen[si] = len;
            ns_staged++;
            busy = 1;
        }
        /* Post staged sends, in order, once their copy finished. */
        while (ns_posted < ns_staged) {
            size_t si = ns_posted % D;
            int done = 0;
            void *req = NULL;
            RING_CHECK(ring__cuda_event_query(comm, S->sev[si], &done));
            if (!done) {
                gpu_wait = 1;
                break;
            }
            if (ic.tx == 1) {
                /* In the receiver's reach now; the slot's return is the link's business. */
                ring__ipc_tx_publish(comm, txb + ns_posted, sdst[si], slen[si]);
                ns_posted++;
                ns_done++;
                busy = 1;
                continue;
            }
            RING_CHECK(stp->isend(sconn, sdst[si], slen[si], gdr_tx ? g->smh : NULL, &req));
            if (!req) break;
            if (gdr_tx) g->ntx++;
            S->sreq[si] = req;
            ns_posted++;
            busy = 1;
        }

        RING_CHECK(stp->progress(sconn, &moved));
        RING_CHECK(rtp->progress(rconn, &moved));

        RING_CHECK(ring__desc_step(comm, stp, rtp, &dsend, &drecv, &sent_desc, &got_desc, mydesc, theirdesc, &busy));
        RING_CHECK(link_step(stp, &lsend, &sent_link));
        if (lrecv) {
            RING_CHECK(link_step(rtp, &lrecv, &got_link));
            if (got_link) {
                busy = 1;
                RING_CHECK(ring__ipc_accept(comm, &ic));
            }
        }
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
            if (ic.rx == 1) {
                void *buf = NULL;
                size_t len = 0, guard = RING__NONE;
                int keep = 0;
                const void *at = NULL;
                sc->recv_msg(sc, nr_arrived, &buf, &len, &guard, &keep);
                RING_CHECK(ring__ipc_rx_poll(comm, rxb + nr_arrived, len, &at, &done));
                if (!done) break;
                rsrc[nr_arrived % D] = at;
                nr_arrived++;
                busy = 1;
                continue;
            }
            RING_CHECK(rtp->test(S->rreq[nr_arrived % D], &done));
            if (!done) break;
            S->rreq[nr_arrived % D] = NULL;
            if (gdr_rx == 1) g->nrx++;
            nr_arrived++;
            busy = 1;
        }
        /* Process arrived receives, in order: queue their H2D (and reduction). */
        while (nr_proc < nr_arrived) {
            void *buf = NULL;
            size_t len = 0, guard = RING__NONE, ri = nr_proc % D;
            int keep = 0;
            sc->recv_msg(sc, nr_proc, &buf, &len, &guard, &keep);
            if (guard != RING__NONE && guard >= ns_staged) break;
            /* The bytes it overwrites are read by send `guard` on the send stream: wait for its
             * copy unless it finished (the send slot's event is guard's until then). In the
             * ring all-reduce the received chunk depends on that send having left, so this
             * is a safeguard rather than a wait that happens. */
            if (guard != RING__NONE && guard >= ns_posted)
                RING_CHECK(ring__cuda_stream_wait_event(comm, S->st, S->sev[guard % D]));
            const unsigned char *pinned = ic.rx == 1     ? rsrc[ri]
                                          : gdr_rx == 1 ? g->rbuf + ri * g->slot
                                                        : S->hrecv + ri * S->slot;
            if (buf) {
                RING_CHECK(ring__cuda_memcpy_async(comm, buf, pinned, len, S->st));
                sc->recv_done(sc, nr_proc, NULL);
            } else {
                d.cur = nr_proc;
                d.pinned = pinned;
                d.remote = ic.rx == 1 || gdr_rx == 1;
                d.reduced = 0;
                sc->recv_done(sc, nr_proc, (void *)pinned);
                if (d.err) {
                    rc = d.err;
                    goto fail;
                }
                if (!d.reduced) {
                    rc = ring__seterr(comm, RING_ERR_INTERNAL, "device engine: receive %zu into scratch was not reduced",
                                      nr_proc);
                    goto fail;
                }
                if (keep) held[ri] = nr_proc;
            }
            RING_CHECK(ring__cuda_event_record(comm, S->rev[ri], S->st));
            nr_proc++;
            busy = 1;
        }
        /* Release slots whose GPU work finished and whose kept sum was forwarded. */
        while (nr_released < nr_proc) {
            int done = 0;
            const size_t ri = nr_released % D;
            if (held[ri] == nr_released || (fwd[ri] != RING__NONE && fwd[ri] >= ns_posted)) break;
            RING_CHECK(ring__cuda_event_query(comm, S->rev[ri], &done));
            if (!done) {
                gpu_wait = 1;
                break;
            }
            fwd[ri] = RING__NONE;
            nr_released++;
            if (ic.rx == 1) ring__ipc_rx_release(comm, rxb + nr_released);
            busy = 1;
        }

        if (got_desc && sent_desc && sent_link && got_link && ic.tx >= 0 && ns_done == nsend && nr_released == nrecv)
            break;

        int64_t now = ring__now_ns();
        if ((busy || moved) && !ring__stop_pending(comm)) {
            last = now;
            continue;
        }
        /* GPU work in flight cannot be waited for in poll(): only yield then (abort and
         * remote failures are still checked, and RING_TIMEOUT_MS without progress ends the
         * wait: gpu_timeout); otherwise sleep on the sockets as the host engine does. Only
         * an event that is not done counts: a slot held for a forward whose send cannot be
         * staged, or a staged send the transport refused, waits on the network, and that
         * wait must run into RING_TIMEOUT_MS (a stopped right neighbour otherwise kept this
         * rank, and every rank holding as it did, spinning for ever). */
        /* Nor can a CUDA IPC neighbour's page: yield while waiting on it, look at the
         * sockets for a dead peer every 100 ms, and time out as everywhere. */
        int ipc_wait = ic.tx < 0 || (ic.tx == 1 && ns_done < nsend) || (ic.rx == 1 && nr_arrived < nr_posted);
        if (gpu_wait && now - last >= (int64_t)comm->params.timeout_ms * 1000000LL) {
            rc = gpu_timeout(comm, S, op, now - last);
            goto fail;
        }
        int64_t idle = gpu_wait ? 0 : now - last;
        if (ipc_wait && idle <= (int64_t)comm->params.timeout_ms * 1000000LL) {
            idle = 0;
            if (now - last_check > 100000000LL) {
                last_check = now;
                RING_CHECK(stp->check(sconn));
                RING_CHECK(rtp->check(rconn));
            }
        }
        RING_CHECK(ring__engine_idle(sc, idle, ns_done, ns_posted, nr_arrived, got_desc));
    }
    if (ipc_on) ring__ipc_end(comm, &ic, nsend, nrecv);

fail:
    if (!got_desc) ring__desc_salvage(comm, &rc, mydesc, theirdesc, "left neighbour", comm->peer_desc[0]);
    /* Requests still posted point into the pinned slots (and the descriptors into this frame,
     * which the host engine shares: a failed communicator is never driven again). */
    if (rc != RING_OK && (ns_posted > ns_done || nr_posted > nr_arrived || dsend || drecv || lsend || lrecv || S->stuck))
        *quarantine = 1;
    free(sdst);
    free(rsrc);
    free(fwd);
    free(slen);
    free(held);
    free(d.kept);
    return rc;
}

/* ---------- entry ---------- */

/* The whole buffer through pinned memory, for the point-to-point algorithms (recursive
 * doubling and halving, the broadcast tree), which run only on small buffers: D2H where the
 * input matters, the host algorithm on the pinned copy, H2D of the result. */
static ring_result_t whole_staged(ring_comm_t *comm, const ring__opdesc_t *op, int algo, stage_t *S, int *quarantine)
{
    const size_t bytes = op->count * ring_dtype_size(op->dtype);
    const int bcast = op->coll == RING__COLL_BROADCAST;
    ring_result_t rc;
    RING_CHECK(stage_whole_ensure(comm, S, bytes));
    if (!bcast || comm->rank == op->root) {
        int64_t since = 0;
        RING_CHECK(ring__cuda_memcpy_async(comm, S->whole, op->sendbuf, bytes, S->st));
        RING_CHECK(drain(comm, comm, S, S->st, op, &since));
    }
    ring__opdesc_t h = *op;
    h.sendbuf = h.recvbuf = S->whole;
    h.mem_device = 0;
    rc = bcast ? ring__broadcast_tree(comm, &h) : algo == RING__ALGO_RD ? ring__allreduce_rd(comm, &h) : ring__allreduce_rh(comm, &h);
    if (rc != RING_OK) {
        *quarantine = 1; /* the point-to-point layer may still hold requests into S->whole */
        return rc;
    }
    if (!bcast || comm->rank != op->root) {
        int64_t since = 0;
        RING_CHECK(ring__cuda_memcpy_async(comm, op->recvbuf, S->whole, bytes, S->st));
        RING_CHECK(drain(comm, comm, S, S->st, op, &since));
    }
    return RING_OK;
fail:
    return rc;
}

static ring_result_t run(ring_comm_t *comm, const ring__opdesc_t *op, stage_t *S, int *quarantine)
{
    const size_t es = ring_dtype_size(op->dtype), bytes = op->count * es;
    int64_t since = 0;
    ring_result_t rc;
    if (comm->nranks == 1) {
        /* One rank: the result is the input, as on the host (reduce-scatter's segment 0 and
         * all-gather's only segment are the first count elements). */
        if (op->coll == RING__COLL_BROADCAST || op->sendbuf == op->recvbuf) return RING_OK;
        rc = ring__cuda_memcpy_async(comm, op->recvbuf, op->sendbuf, bytes, S->st);
        return rc == RING_OK ? drain(comm, comm, S, S->st, op, &since) : rc;
    }
    /* Every rank on this host with device buffers: read the peers' buffers in place. */
    int ran = 0, stuck = 0;
    rc = ring__direct_run(comm, op, S->st, &ran, &stuck);
    if (stuck) S->stuck = 1;
    if (rc != RING_OK || ran) return rc;
    int algo = ring__algo_for(comm, op->coll, bytes);
    if (algo == RING__ALGO_RD || algo == RING__ALGO_RH || algo == RING__ALGO_TREE)
        return whole_staged(comm, op, algo, S, quarantine);

    ring__sched_t sc;
    RING_CHECK(ring__ring_sched(&sc, comm, op));
    if (op->coll == RING__COLL_ALLGATHER) {
        /* The own segment, device to device, queued before anything that reads it. */
        unsigned char *own = (unsigned char *)op->recvbuf + (size_t)comm->rank * bytes;
        if (own != (const unsigned char *)op->sendbuf && bytes)
            RING_CHECK(ring__cuda_memcpy_async(comm, own, op->sendbuf, bytes, S->so));
    }
    rc = staged_engine(&sc, S, quarantine);
    if (rc == RING_OK) rc = drain(comm, comm, S, S->st, op, &since);
    if (rc == RING_OK) rc = drain(comm, comm, S, S->so, op, &since);
fail:
    return rc;
}

ring_result_t ring__cuda_device_enter(ring_comm_t *comm, int dev, ring__cuda_devscope_t *s)
{
    s->dev = dev;
    s->restore = !ring__cuda_emulating() && ring__mem_thread_has_context() == 1;
    ring_result_t rc = ring__cuda_get_device(comm, &s->prev);
    if (rc == RING_OK && s->prev != dev) rc = ring__cuda_set_device(comm, dev);
    if (rc != RING_OK) s->restore = 0;
    return rc;
}

void ring__cuda_device_leave(const ring__cuda_devscope_t *s)
{
    if (s->restore && s->prev != s->dev) (void)ring__cuda_set_device(NULL, s->prev);
}

/* Whether a stuck set of comm's failed calls still has GPU work (on its own device). */
static int set_busy(stage_t *s)
{
    int st_done = 1, so_done = 1;
    if (!s->stuck) return 0;
    ring__cuda_devscope_t ds;
    (void)ring__cuda_device_enter(NULL, s->device, &ds);
    if (ring__cuda_stream_query(NULL, s->st, &st_done) != RING_OK || ring__cuda_stream_query(NULL, s->so, &so_done) != RING_OK)
        st_done = so_done = 1; /* a sticky error: nothing will run any more */
    ring__cuda_device_leave(&ds);
    return !(st_done && so_done);
}

int ring__cuda_dead_busy(ring_comm_t *comm)
{
    for (stage_t *s = comm->cuda_dead; s; s = s->next)
        if (set_busy(s)) return 1;
    return 0;
}

void ring__cuda_free_dead(ring_comm_t *comm)
{
    while (comm->cuda_dead) {
        stage_t *s = comm->cuda_dead;
        ring__cuda_devscope_t ds;
        comm->cuda_dead = s->next;
        if (set_busy(s)) {
            /* Its copies may still run: freeing the pinned memory under them (or waiting in
             * cudaFreeHost, which synchronizes with the device) is worse than the leak. */
            RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                     "ring_comm_destroy: the staging memory of device %d is left allocated: the GPU still has "
                     "not run the copies of a call that timed out",
                     s->device);
            ring__cuda_leave(s);
            continue;
        }
        (void)ring__cuda_device_enter(NULL, s->device, &ds); /* freed on its own device */
        stage_destroy(s);
        ring__cuda_device_leave(&ds);
    }
}

ring_result_t ring__cuda_run_op(ring_comm_t *comm, const ring__opdesc_t *op)
{
    int quarantine = 0;
    stage_t *S = NULL;
    ring__cuda_devscope_t ds; /* blocking calls run on the caller's thread: put it back */
    ring_result_t rc = ring__cuda_device_enter(comm, op->device, &ds);
    if (rc != RING_OK) return rc;
    rc = stage_get(comm, op->device, &S);
    if (rc == RING_OK) {
        rc = run(comm, op, S, &quarantine);
        /* Nothing queued may run after the call returned: wait for the streams, whatever
         * failed (their own error goes to the thread's message, not the comm's), for
         * RING_TIMEOUT_MS at most, and not again when the GPU already ran out of it. A stream
         * that cannot be waited for (a sticky CUDA error) is not reused, nor freed while
         * transport requests may still point into it (quarantine 1 says so: it goes to
         * cuda_dead); nor is one whose work did not finish in time (stuck). */
        if (rc != RING_OK && !S->stuck) {
            int64_t since = 0;
            ring_result_t w = drain(comm, NULL, S, S->st, op, &since);
            if (w == RING_OK) w = drain(comm, NULL, S, S->so, op, &since);
            if (S->stuck)
                RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                         "%s #%llu failed, and the GPU (device %d) has not finished its copies and kernels %d ms "
                         "later: they may still write recvbuf",
                         ring__coll_name(op->coll), (unsigned long long)op->seq, S->device, comm->params.timeout_ms);
            else if (w != RING_OK && !quarantine) quarantine = 2;
        }
        if (S->stuck) quarantine = 1;
        if (quarantine == 2) stage_destroy(S);
        else if (!quarantine) stage_put(S);
        else {
            /* Transport requests may still point into S: never reused, freed by
             * ring_comm_destroy once the connections are closed. */
            S->next = comm->cuda_dead;
            comm->cuda_dead = S;
        }
    }
    if (rc != RING_OK) {
        char why[RING__ERRMSG_MAX];
        ring__op_error(comm, why, sizeof why);
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank, "%s #%llu on device %d failed: %s",
                 ring__coll_name(op->coll), (unsigned long long)op->seq, op->device, why);
    }
    ring__cuda_device_leave(&ds);
    return rc;
}
