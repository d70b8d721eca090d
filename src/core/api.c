/*
 * Public collective entry points: argument validation (nothing is sent for a bad call, and a
 * bad call does not fail the communicator), then submission to the run queue.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "cuda/coll.h"
#include "cuda/direct.h"
#include "cuda/mem.h"
#include "engine.h"
#include "log.h"
#include "param.h"
#include "reduce.h"

static int overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

static ring_result_t validate(ring_comm_t *comm, const ring__opdesc_t *op, int async)
{
    const char *name = ring__call_name(op->coll, async);
    if (!comm) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_%s: comm is NULL", name);
    if (!ring__comm_live(comm))
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_%s: %s", name, ring__not_live_text(comm));
    if (atomic_load(&comm->fail_code) != RING_OK) { /* the name only on this path: every call comes here */
        char what[64];
        snprintf(what, sizeof what, "ring_%s", name);
        return ring__failed_result(comm, what);
    }
    if (op->coll == RING__COLL_BARRIER) return RING_OK;
    if ((unsigned)op->dtype >= RING_DTYPE_COUNT)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: invalid dtype %d", name, (int)op->dtype);
    int reduces = op->coll == RING__COLL_ALLREDUCE || op->coll == RING__COLL_REDUCE_SCATTER;
    if (reduces && (unsigned)op->op >= RING_OP_COUNT)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: invalid reduction op %d", name, (int)op->op);
    if (op->coll == RING__COLL_BROADCAST && (op->root < 0 || op->root >= comm->nranks))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: root %d out of range [0, %d)", name, op->root,
                            comm->nranks);
    size_t es = ring_dtype_size(op->dtype);
    int full = op->coll == RING__COLL_REDUCE_SCATTER || op->coll == RING__COLL_ALLGATHER;
    size_t mult = full ? (size_t)comm->nranks : 1;
    /* No object is larger than PTRDIFF_MAX bytes; a larger count is a bug in the caller that
     * would otherwise reach memmove or the wire. */
    if (op->count > (size_t)PTRDIFF_MAX / es / mult)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: count %zu x %zu-byte %s%s overflows the address space",
                            name, op->count, es, ring__dtype_name(op->dtype), full ? " x nranks" : "");
    if (op->count == 0) return RING_OK;
    if (!op->recvbuf || !op->sendbuf)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: NULL buffer with count %zu", name, op->count);
    size_t bytes = op->count * es, fullbytes = bytes * mult;
    const char *sb = op->sendbuf;
    char *rb = op->recvbuf;
    switch (op->coll) {
    case RING__COLL_ALLREDUCE:
        if (sb != rb && overlap(sb, bytes, rb, bytes))
            return ring__seterr(comm, RING_ERR_INVALID_ARG,
                                "ring_%s: sendbuf and recvbuf overlap partially (in-place needs sendbuf == recvbuf)", name);
        break;
    case RING__COLL_REDUCE_SCATTER:
        if (rb != sb + (size_t)comm->rank * bytes && overlap(sb, fullbytes, rb, bytes))
            return ring__seterr(comm, RING_ERR_INVALID_ARG,
                                "ring_%s: recvbuf overlaps sendbuf but is not this rank's slice "
                                "(in-place needs recvbuf == sendbuf + rank*recvcount)",
                                name);
        break;
    case RING__COLL_ALLGATHER:
        if (sb != rb + (size_t)comm->rank * bytes && overlap(sb, bytes, rb, fullbytes))
            return ring__seterr(comm, RING_ERR_INVALID_ARG,
                                "ring_%s: sendbuf overlaps recvbuf but is not this rank's slice "
                                "(in-place needs sendbuf == recvbuf + rank*sendcount)",
                                name);
        break;
    default:
        break;
    }
    return RING_OK;
}

static ring_result_t issue(ring_comm_t *comm, ring__opdesc_t *op, ring_request_t **reqp, int async)
{
    if (async && reqp) *reqp = NULL;
    /* validate() first: a NULL, destroyed or failed comm answers as such (and is never written
     * to when destroyed), whatever else is wrong with the call. */
    ring_result_t rc = validate(comm, op, async);
    if (rc != RING_OK) return rc;
    if (async && !reqp)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring_%s: req is NULL", ring__call_name(op->coll, 1));
    /* Where the buffers live (src/cuda/mem.h): host, pinned and managed memory go on
     * unchanged; device memory is refused unless this build has a device path for the call. */
    if (op->coll != RING__COLL_BARRIER && op->count) {
        rc = ring__mem_check_op(comm, op, async);
        if (rc != RING_OK) return rc;
    }
    return ring__submit(comm, op, async ? reqp : NULL);
}

/*
 * Defaults measured in docs/performance.md ("Choosing the all-reduce algorithm"). With two
 * ranks recursive doubling is one exchange of the whole buffer and halving saves nothing, so
 * it runs up to 32 KiB and the ring above. With more, recursive doubling moves log2(N) times
 * the buffer and loses to halving from about 8 KiB on both transports; halving loses to the
 * ring (same bytes, but the pipeline overlaps them) from about 32 KiB on shared memory and
 * 128 KiB over TCP. The inputs (N, every ring edge on one host) are the same on every rank.
 */
size_t ring__rd_max_bytes(const ring_comm_t *comm)
{
    if (comm->params.rd_max_set) return comm->params.rd_max_bytes;
    return comm->nranks <= 2 ? RING__DEFAULT_RD_MAX_BYTES : RING__DEFAULT_RD_MAX_BYTES_N;
}

size_t ring__rh_max_bytes(const ring_comm_t *comm)
{
    if (comm->params.rh_max_set) return comm->params.rh_max_bytes;
    if (comm->nranks <= 2) return 0;
    return comm->all_shm ? RING__DEFAULT_RH_MAX_BYTES_SHM : RING__DEFAULT_RH_MAX_BYTES;
}

/*
 * Above 1 MiB the shared-memory all-reduce moves about as much memory per rank as the ring
 * (S in, S through the reduction, S out; the ring copies in and reduces out each of its
 * 2(N-1) chunks of S/N) but waits twice per window of 2 MiB / N for all ranks instead of once
 * per chunk for one neighbour. With more ranks than cores (the 2-core VM) that made 4-64 MiB
 * 1.4x faster with 3 ranks and 1.8-2.1x with 8, and level with 4 (docs/performance.md,
 * 2026-11-27). The page sits on rank 0's NUMA node, so on a host of several nodes half the
 * ranks would move every byte across the link between the sockets: there the ring keeps the
 * sizes above 1 MiB, as before. The count comes from rank 0's entry in the rank table, so
 * every rank gets the same answer.
 */
size_t ring__sm_max_bytes(const ring_comm_t *comm, const char **why)
{
    const char *w = "";
    size_t max = comm->params.sm_max_bytes;
    if (!comm->params.sm_max_set) {
        const int nodes = comm->peers ? comm->peers[0].numa_nodes : 0;
        w = nodes > 1 ? "default for several NUMA nodes" : "default for one NUMA node";
        max = nodes > 1 ? RING__DEFAULT_SM_MAX_BYTES : SIZE_MAX;
    }
    if (why) *why = w;
    return max;
}

int ring__algo_for(const ring_comm_t *comm, ring__coll_t coll, size_t bytes)
{
    int algo = comm->params.algo;
    /* The shared-memory all-reduce (and barrier) exists where every rank is on one host
     * (comm->sm, the same on every rank); elsewhere RING_ALGO=sm means the ring, or recursive
     * doubling for the barrier. By default it takes every all-reduce up to ring__sm_max_bytes
     * from 3 ranks on (with 2, the ring's one exchange each way moves less memory), unless
     * RING_RD_MAX_BYTES was set: then recursive doubling keeps the sizes up to it. */
    const int sm_ok = ring__sm_available(comm) && (algo == RING__ALGO_SM || (algo == RING__ALGO_AUTO && comm->nranks >= 3));
    if (coll == RING__COLL_ALLREDUCE) {
        if (algo == RING__ALGO_SM) return sm_ok ? RING__ALGO_SM : RING__ALGO_RING;
        if (algo != RING__ALGO_AUTO) return algo;
        const int sm = sm_ok && bytes <= ring__sm_max_bytes(comm, NULL);
        if (sm && !comm->params.rd_max_set) return RING__ALGO_SM;
        if (bytes <= ring__rd_max_bytes(comm)) return RING__ALGO_RD;
        if (sm) return RING__ALGO_SM;
        /* Medium sizes: the ring's bytes on the wire with log2 N latencies instead of N-1. */
        return bytes <= ring__rh_max_bytes(comm) ? RING__ALGO_RH : RING__ALGO_RING;
    }
    /* RING_ALGO=sm forces the page for the barrier too; RING_RD_MAX_BYTES keeps only auto's. */
    if (coll == RING__COLL_BARRIER)
        return algo == RING__ALGO_RING                                         ? RING__ALGO_RING
               : sm_ok && (algo == RING__ALGO_SM || !comm->params.rd_max_set) ? RING__ALGO_SM
                                                                               : RING__ALGO_RD;
    /* With 2 or 3 ranks the tree is as deep as the ring is long; from 4 on it is shallower. */
    if (coll == RING__COLL_BROADCAST)
        return algo == RING__ALGO_RD || algo == RING__ALGO_RH || (algo == RING__ALGO_AUTO && comm->nranks >= 4 && bytes <= comm->params.tree_max_bytes)
                   ? RING__ALGO_TREE
                   : RING__ALGO_RING;
    return RING__ALGO_RING;
}

/* *ran names what ran, for the TRACE line: where a forced algorithm does not fit the
 * collective, or the shared-memory all-reduce finds device buffers, the ring runs instead. */
static ring_result_t run_op(ring_comm_t *comm, const ring__opdesc_t *op, const char **ran)
{
    int algo = ring__algo_for(comm, op->coll, op->count * ring_dtype_size(op->dtype));
    *ran = "ring";
    /* Ranks in the shared-memory all-reduce read every rank's record of this call (sm.c). */
    ring_result_t rc = ring__sm_note(comm, op, algo);
    if (rc != RING_OK) return rc;
#if RING_HAVE_CUDA
    /* Device buffers (src/cuda/coll.c): accepted at issue time, run here. */
    if (op->mem_device) {
        *ran = "device buffers";
        return ring__cuda_run_op(comm, op);
    }
    /* Ranks with device buffers on this host read this call's record (src/cuda/direct.c). */
    rc = ring__direct_note(comm, op);
    if (rc != RING_OK) return rc;
#endif
    if (comm->nranks == 1) {
        /* One rank: the result is the input (x / 1 == x for AVG in every type). */
        size_t bytes = op->count * ring_dtype_size(op->dtype);
        *ran = "one rank";
        if (op->coll != RING__COLL_BARRIER && op->coll != RING__COLL_BROADCAST && bytes && op->sendbuf != op->recvbuf)
            memmove(op->recvbuf, op->sendbuf, bytes);
        return RING_OK;
    }
    if (algo == RING__ALGO_SM) {
        /* All-reduce, or barrier: a round with no data (every rank has entered once every rank
         * published it). */
        int ran_sm = 0;
        rc = ring__allreduce_sm(comm, op, &ran_sm);
        if (ran_sm) {
            *ran = op->coll == RING__COLL_BARRIER ? "shared memory" : "shared-memory all-reduce";
            return rc;
        }
        /* A rank has device buffers (so this is an all-reduce): every host rank takes the
         * ring with it, as the device path does for this algorithm. */
        *ran = "ring (a rank has device buffers)";
        comm->stuck_op = op;
        comm->stuck_algo = RING__ALGO_RING;
        return ring__ring_run(comm, op);
    }
    int rd = algo == RING__ALGO_RD;
    /* The algorithm the call's descriptor will name, for its stuck report (watch.c): nothing
     * is built unless the call gets stuck. The shared-memory all-reduce (above) compares every
     * rank's record of the call itself; device buffers (src/cuda) make none, so their ranks
     * never take part in the comparison, which only ever compares two reports. */
    comm->stuck_op = op;
    /* ring__algo_for names only what runs, but for an all-reduce under a forced RING_ALGO that
     * has none (tree), which the switch below takes as the ring. */
    comm->stuck_algo = op->coll == RING__COLL_ALLREDUCE && !rd && algo != RING__ALGO_RH ? RING__ALGO_RING : algo;
    switch (op->coll) {
    case RING__COLL_ALLREDUCE:
        if (rd) {
            *ran = "recursive doubling";
            return ring__allreduce_rd(comm, op);
        }
        if (algo == RING__ALGO_RH) {
            *ran = "recursive halving";
            return ring__allreduce_rh(comm, op);
        }
        return ring__ring_run(comm, op);
    case RING__COLL_REDUCE_SCATTER:
    case RING__COLL_ALLGATHER: return ring__ring_run(comm, op);
    case RING__COLL_BROADCAST:
        if (algo != RING__ALGO_TREE) return ring__ring_run(comm, op);
        *ran = "tree";
        return ring__broadcast_tree(comm, op);
    case RING__COLL_BARRIER:
        if (!rd) return ring__barrier_ring(comm, op);
        *ran = "recursive doubling";
        return ring__barrier_rd(comm, op);
    }
    return ring__seterr(comm, RING_ERR_INTERNAL, "unknown collective %d", (int)op->coll);
}

ring_result_t ring__run_op(ring_comm_t *comm, const ring__opdesc_t *op)
{
    const int trace = ring__log_on(RING_LOG_TRACE, RING_SUB_COLL);
    const int64_t t0 = trace ? ring__now_ns() : 0;
    const char *ran = "ring";
    ring_result_t rc = run_op(comm, op, &ran);
    /* One line per call whatever the algorithm (the ring engine adds its own message counts). */
    if (trace) {
        char what[96] = "";
        if (op->coll == RING__COLL_ALLREDUCE || op->coll == RING__COLL_REDUCE_SCATTER)
            snprintf(what, sizeof what, "count %zu %s %s, ", op->count, ring__dtype_name(op->dtype), ring__op_name(op->op));
        else if (op->coll == RING__COLL_BROADCAST)
            snprintf(what, sizeof what, "count %zu %s root %d, ", op->count, ring__dtype_name(op->dtype), op->root);
        else if (op->coll == RING__COLL_ALLGATHER)
            snprintf(what, sizeof what, "count %zu %s, ", op->count, ring__dtype_name(op->dtype));
        RING_LOG(RING_LOG_TRACE, RING_SUB_COLL, comm->rank, "%s #%llu: %s%s: %s in %.1f us", ring__coll_name(op->coll),
                 (unsigned long long)op->seq, what, ran, ring_result_name(rc),
                 (double)(ring__now_ns() - t0) / 1e3);
    }
    comm->stuck_op = NULL;
    /* Done with this call's records, whatever the result: a rank that is HIST calls ahead
     * waits for this before it rewrites the slot (ring__callrec_room). */
    ring__sm_done(comm, op);
#if RING_HAVE_CUDA
    ring__direct_done(comm, op);
#endif
    return rc;
}

#define OPDESC(c, sb, rb, n, dt, o, rt)                                                            \
    (ring__opdesc_t) { .coll = (c), .sendbuf = (sb), .recvbuf = (rb), .count = (n), .dtype = (dt), .op = (o), .root = (rt) }

ring_result_t ring_allreduce(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             ring_dtype_t dtype, ring_op_t op)
{
    ring__opdesc_t d = OPDESC(RING__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0);
    return issue(comm, &d, NULL, 0);
}

ring_result_t ring_allreduce_async(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                   ring_dtype_t dtype, ring_op_t op, ring_request_t **req)
{
    ring__opdesc_t d = OPDESC(RING__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0);
    return issue(comm, &d, req, 1);
}

ring_result_t ring_reduce_scatter(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                  ring_dtype_t dtype, ring_op_t op)
{
    ring__opdesc_t d = OPDESC(RING__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0);
    return issue(comm, &d, NULL, 0);
}

ring_result_t ring_reduce_scatter_async(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ring_dtype_t dtype, ring_op_t op, ring_request_t **req)
{
    ring__opdesc_t d = OPDESC(RING__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0);
    return issue(comm, &d, req, 1);
}

ring_result_t ring_allgather(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                             ring_dtype_t dtype)
{
    ring__opdesc_t d = OPDESC(RING__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, RING_SUM, 0);
    return issue(comm, &d, NULL, 0);
}

ring_result_t ring_allgather_async(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                                   ring_dtype_t dtype, ring_request_t **req)
{
    ring__opdesc_t d = OPDESC(RING__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, RING_SUM, 0);
    return issue(comm, &d, req, 1);
}

ring_result_t ring_broadcast(ring_comm_t *comm, void *buf, size_t count, ring_dtype_t dtype, int root)
{
    ring__opdesc_t d = OPDESC(RING__COLL_BROADCAST, buf, buf, count, dtype, RING_SUM, root);
    return issue(comm, &d, NULL, 0);
}

ring_result_t ring_broadcast_async(ring_comm_t *comm, void *buf, size_t count, ring_dtype_t dtype, int root,
                                   ring_request_t **req)
{
    ring__opdesc_t d = OPDESC(RING__COLL_BROADCAST, buf, buf, count, dtype, RING_SUM, root);
    return issue(comm, &d, req, 1);
}

ring_result_t ring_barrier(ring_comm_t *comm)
{
    ring__opdesc_t d = OPDESC(RING__COLL_BARRIER, NULL, NULL, 0, RING_UINT8, RING_SUM, 0);
    return issue(comm, &d, NULL, 0);
}

ring_result_t ring_barrier_async(ring_comm_t *comm, ring_request_t **req)
{
    ring__opdesc_t d = OPDESC(RING__COLL_BARRIER, NULL, NULL, 0, RING_UINT8, RING_SUM, 0);
    return issue(comm, &d, req, 1);
}
