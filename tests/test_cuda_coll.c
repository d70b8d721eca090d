/*
 * The device-buffer collectives across processes (src/cuda/coll.c, docs/cuda.md), one process
 * per rank under ringrun:
 *
 *   ringrun -n N cuda_coll_check [--emulate] [--mixed | --mixed-odd] [--quick]
 *
 * --emulate  no GPU needed (CI): the GPU is emulated on the CPU (ring__cuda_set_emulation:
 *            copies and kernels complete later than they are queued, in stream order) and
 *            "device" memory is host memory that a stand-in driver reports as device memory,
 *            so the device path's staging, ordering and slot reuse run over the real
 *            transports. Without it: cudaMalloc buffers on device rank % device count.
 * --mixed    odd ranks pass host buffers, even ranks device buffers: both paths in one call
 *            (they share the wire protocol).
 * --mixed-odd  the other way round: even ranks (rank 0 among them) host, odd ranks device.
 *            With 3 or more ranks on one host, rank 0 and rank 2 then both choose the
 *            shared-memory all-reduce and must both find rank 1's device record.
 * --quick    fewer cases (for compute-sanitizer).
 * --expect-ipc  with RING_CUDA_IPC=1: fail unless every rank sent and received its ring
 *            messages over CUDA IPC links (src/cuda/ipc.c), not staged through host memory.
 * --ipc-mixed   with RING_CUDA_IPC=1, rank 1 breaks the knob's promise and passes host
 *            buffers to a ring all-reduce: every rank must return an error within 10 s (the
 *            neighbours of rank 1 RING_ERR_MISMATCH naming RING_CUDA_IPC), none may hang.
 * --expect-direct / --expect-no-direct  fail unless some call (every device-buffer call when
 *            the run has no host ranks) / no call ran as a direct collective over CUDA IPC
 *            (src/cuda/direct.c: every rank on one host with device buffers).
 * --expect-work one|each  with --expect-direct: fail unless every direct call was worked by
 *            rank 0 alone (one: all ranks' buffers on one GPU, or RING_CUDA_DIRECT_WORK=one)
 *            / by every rank for its part (each).
 * --work-split  odd ranks set RING_CUDA_DIRECT_WORK=each, even ranks one, before init: rank
 *            0's setting must decide for every rank (with --expect-work one).
 * --direct-dies   the last rank leaves (exit 0, no ring_comm_destroy) just before a direct
 *            all-reduce: the others must return an error within 10 s, none may hang.
 * --direct-mismatch  rank 0 passes one element more than the others to a device all-reduce:
 *            every rank must return an error within 10 s.
 * --direct-abort R  rank R calls ring_comm_abort from another thread 0.2 s into a direct
 *            all-reduce whose kernel (rank 0 works alone) takes 1 s: every rank must return an
 *            error, and no rank's recvbuf may change after its call returned (each fills it
 *            with a pattern at once and checks it 1.5 s later, after rank 0 destroyed its
 *            communicator): the kernel reading and writing every rank's buffers must have
 *            finished before any call returns.
 * --foreign-pid R  rank R's direct-call records claim a pid namespace of their own and a pid
 *            that is no process here (RING_TEST_DIRECT_FOREIGN_PID), as for a rank in another
 *            container: with --direct-abort, the others must still wait for its kernel.
 * --stalled-receiver  3 or more ranks, staged ring, run with RING_TIMEOUT_MS of a few seconds
 *            and small socket buffers: the last rank is stopped (SIGSTOP, for 15 s) in the
 *            middle of back-to-back device reduce-scatters, so its left neighbour can sit with
 *            reduced chunks it cannot forward while its sends back up. Every rank between 1
 *            and the stopped one must return an error within 10 s, on its own clock: rank 0
 *            is given RING_TIMEOUT_MS=60000, so that its timeout cannot rescue the others.
 *            Ranks 0 and the stopped one must return an error too.
 * --gpu-stuck small|ring|direct  rank 1's GPU stops finishing the copies and kernels ringcomm
 *            queues (emulated: each takes 60 s, as work behind a caller's kernel on the legacy
 *            default stream that does not end would; on a GPU: such a kernel, which the test
 *            ends after ring_comm_destroy) in an all-reduce of 5 floats
 *            (whole-buffer staging) or 1 MiB (the staged ring; direct: a direct collective,
 *            run with RING_CUDA_DIRECT_WORK=each so that rank 1 has a kernel of its own, and
 *            whose first call must have run directly). Rank 1, the only one on a short
 *            RING_TIMEOUT_MS, must return RING_ERR_TIMEOUT naming its GPU within that timeout
 *            and 2 s, the others an error that passes that on, within 10 s, and rank 1's
 *            ring_comm_destroy must not wait for the GPU (2 s at most). With --expect-ipc
 *            the first (working) call must have gone over CUDA IPC links.
 * --trace-check  with --mixed-odd: the ranks log at RING_DEBUG=TRACE (subsystem COLL) into a
 *            file of their own, and each host rank's log must name the ring for the all-reduces
 *            it chose the shared-memory algorithm for (a rank has device buffers), never the
 *            shared-memory all-reduce, which none of them ran.
 *
 * Each case fills every rank's input with REF_EXACT data (tests/reference.h: results that do
 * not depend on the order of combination), runs ring_allreduce, ring_reduce_scatter,
 * ring_allgather or ring_broadcast (blocking or async, in place or not, aligned, offset by one
 * element, or with sendbuf and recvbuf misaligned to each other), copies the result back and
 * compares every element with the reference; sizes cover the whole-buffer staging (recursive
 * doubling/halving, the broadcast tree) and the chunked ring with many messages (run with a
 * small RING_CHUNK_BYTES). Exit status: 0 passed, 1 failed, 77 no usable GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda/coll.h"
#include "cuda/direct.h"
#include "cuda/gdr.h"
#include "cuda/ipc.h"
#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#include "reference.h"
#include "ringcomm.h"

#define ARENA_BYTES ((size_t)64 << 20)

static unsigned char *arena; /* "device" memory: cudaMalloc, or shared host memory when emulating */
static int emulate;

typedef struct layout {
    const char *name;
    int inplace, async;
    size_t send_off, recv_off; /* elements */
} layout_t;

static const layout_t layouts[] = {
    {"out of place", 0, 0, 0, 0},
    {"in place", 1, 0, 0, 0},
    {"async, offset 1", 0, 1, 1, 1},
    {"send+1 recv+0", 0, 0, 1, 0},
    {"async in place, offset 3", 1, 1, 3, 3},
};

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_COUNT };
static const char *const coll_names[C_COUNT] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};

/* One collective of `count` (per-rank block for reduce-scatter and all-gather); returns 0 when
 * every element matched. */
static int run_case(ring_comm_t *comm, int use_device, int coll, ring_dtype_t dt, ring_op_t op, size_t count,
                    const layout_t *lo, uint64_t opidx)
{
    const int rank = ring_comm_rank(comm), n = ring_comm_nranks(comm);
    const size_t es = ring_dtype_size(dt);
    const uint64_t seed = 0xc0da;
    const int root = (int)(opidx % (uint64_t)n);
    /* Elements in sendbuf and recvbuf, and where rank's block sits in the bigger one. */
    size_t scount = count, rcount = count, mine = 0;
    if (coll == C_REDUCE_SCATTER) scount = count * (size_t)n, mine = (size_t)rank * count;
    if (coll == C_ALLGATHER) rcount = count * (size_t)n, mine = (size_t)rank * count;
    const size_t sbytes = scount * es, rbytes = rcount * es;
    unsigned char *in = malloc(sbytes + 1), *out = malloc(rbytes + 1), *want = malloc(rbytes + 1);
    unsigned char *hostbuf = NULL;
    int bad = 0;
    char what[192];
    snprintf(what, sizeof what, "%s %s %s count %zu %s (%s)", coll_names[coll], ref_dtype_name(dt), ref_op_name(op),
             count, lo->name, use_device ? "device" : "host");
    if (!in || !out || !want) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        exit(1);
    }
    switch (coll) {
    case C_ALLREDUCE:
    case C_REDUCE_SCATTER:
        ref_fill(in, scount, dt, op, REF_EXACT, n, seed, opidx, rank, 0);
        ref_expect_reduce(want, rcount, dt, op, n, seed, opidx, mine);
        break;
    case C_ALLGATHER:
        ref_fill(in, scount, dt, op, REF_EXACT, n, seed, opidx, rank, 0);
        for (int r = 0; r < n; r++) ref_fill(want + (size_t)r * count * es, count, dt, op, REF_EXACT, n, seed, opidx, r, 0);
        break;
    default:
        if (rank == root) ref_fill(in, scount, dt, op, REF_EXACT, n, seed, opidx, root, 0);
        else ref_fill_garbage(in, sbytes, opidx);
        ref_fill(want, rcount, dt, op, REF_EXACT, n, seed, opidx, root, 0);
    }

    /* sendbuf and recvbuf in the arena (device) or on the heap (host). In place: recvbuf is
     * sendbuf (all-reduce, broadcast), or this rank's block of the bigger buffer. */
    unsigned char *base;
    size_t big = (sbytes > rbytes ? sbytes : rbytes) + 64 * es;
    size_t need = 2 * big + 512;
    if (use_device) {
        if (need > ARENA_BYTES) {
            fprintf(stderr, "rank %d: %s does not fit the arena\n", rank, what);
            exit(1);
        }
        base = arena;
    } else {
        hostbuf = aligned_alloc(256, (need + 255) & ~(size_t)255);
        base = hostbuf;
    }
    unsigned char *send, *recv;
    if (coll == C_BROADCAST || (lo->inplace && coll == C_ALLREDUCE)) {
        send = recv = base + lo->send_off * es;
    } else if (lo->inplace && coll == C_REDUCE_SCATTER) {
        send = base + lo->send_off * es;
        recv = send + mine * es;
    } else if (lo->inplace) { /* all-gather */
        recv = base + lo->recv_off * es;
        send = recv + mine * es;
    } else {
        send = base + lo->send_off * es;
        recv = base + ((big + 511) & ~(size_t)255) + lo->recv_off * es;
    }
    if (ring__cuda_memcpy(NULL, send, in, sbytes) != RING_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, ring_comm_last_error(NULL));
        exit(1);
    }
    ring_result_t rc = RING_OK;
    ring_request_t *req = NULL;
    switch (coll) {
    case C_ALLREDUCE:
        rc = lo->async ? ring_allreduce_async(comm, send, recv, count, dt, op, &req)
                       : ring_allreduce(comm, send, recv, count, dt, op);
        break;
    case C_REDUCE_SCATTER:
        rc = lo->async ? ring_reduce_scatter_async(comm, send, recv, count, dt, op, &req)
                       : ring_reduce_scatter(comm, send, recv, count, dt, op);
        break;
    case C_ALLGATHER:
        rc = lo->async ? ring_allgather_async(comm, send, recv, count, dt, &req) : ring_allgather(comm, send, recv, count, dt);
        break;
    default:
        rc = lo->async ? ring_broadcast_async(comm, send, count, dt, root, &req) : ring_broadcast(comm, send, count, dt, root);
    }
    if (rc == RING_OK && req) rc = ring_wait(req);
    if (rc != RING_OK) {
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, ring_result_name(rc), ring_comm_last_error(comm));
        exit(1); /* the communicator is failed now: nothing more to learn */
    }
    if (ring__cuda_memcpy(NULL, out, recv, rbytes) != RING_OK) {
        fprintf(stderr, "rank %d: %s: copy back: %s\n", rank, what, ring_comm_last_error(NULL));
        exit(1);
    }
    for (size_t i = 0; i < rcount; i++)
        if (memcmp(out + i * es, want + i * es, es)) {
            char g[64], w[64];
            ref_format_elem(g, sizeof g, out + i * es, dt);
            ref_format_elem(w, sizeof w, want + i * es, dt);
            fprintf(stderr, "rank %d: %s: element %zu is %s, want %s\n", rank, what, i, g, w);
            bad = 1;
            break;
        }
    free(in);
    free(out);
    free(want);
    free(hostbuf);
    return bad;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *abort_later(void *comm)
{
    struct timespec nap = {0, 200000000};
    nanosleep(&nap, NULL);
    ring_comm_abort(comm);
    return NULL;
}

/* A host rank's TRACE log (--trace-check): its all-reduces that chose the shared-memory
 * algorithm found a rank with device buffers and ran as the ring, and the log must say so. */
static int trace_ok(const char *path, int rank)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "rank %d: no TRACE log at %s\n", rank, path);
        return 0;
    }
    char line[2048];
    int fallback = 0, wrong = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, " allreduce #")) continue;
        if (strstr(line, ", ring (a rank has device buffers): ")) fallback++;
        if (strstr(line, "shared-memory all-reduce")) {
            if (!wrong) fprintf(stderr, "rank %d: the TRACE log names an algorithm that did not run: %s", rank, line);
            wrong++;
        }
    }
    fclose(f);
    if (!fallback) fprintf(stderr, "rank %d: no all-reduce in %s says it fell back to the ring\n", rank, path);
    return fallback && !wrong;
}

int main(int argc, char **argv)
{
    int mixed = 0, quick = 0, expect_ipc = 0, ipc_mixed = 0, expect_gdr = -1, expect_direct = -1, direct_dies = 0,
        direct_mismatch = 0, expect_one = -1, work_split = 0, stalled = 0, direct_abort = -1, depth_change = 0,
        late_map = 0, gpu_stuck = 0, trace_check = 0, foreign_pid = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--emulate")) emulate = 1;
        else if (!strcmp(argv[i], "--mixed")) mixed = 1;
        else if (!strcmp(argv[i], "--mixed-odd")) mixed = 2;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--expect-ipc")) expect_ipc = 1;
        else if (!strcmp(argv[i], "--ipc-mixed")) ipc_mixed = 1;
        else if (!strcmp(argv[i], "--expect-gdr")) expect_gdr = 1;
        else if (!strcmp(argv[i], "--expect-no-gdr")) expect_gdr = 0;
        else if (!strcmp(argv[i], "--expect-direct")) expect_direct = 1;
        else if (!strcmp(argv[i], "--expect-no-direct")) expect_direct = 0;
        else if (!strcmp(argv[i], "--direct-dies")) direct_dies = 1;
        else if (!strcmp(argv[i], "--direct-mismatch")) direct_mismatch = 1;
        else if (!strcmp(argv[i], "--work-split")) work_split = 1;
        else if (!strcmp(argv[i], "--stalled-receiver")) stalled = 1;
        else if (!strcmp(argv[i], "--direct-abort") && i + 1 < argc) direct_abort = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--late-map")) late_map = 1;
        else if (!strcmp(argv[i], "--foreign-pid") && i + 1 < argc) foreign_pid = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace-check")) trace_check = 1;
        else if (!strcmp(argv[i], "--gpu-stuck") && i + 1 < argc && !strcmp(argv[i + 1], "small")) gpu_stuck = 1, i++;
        else if (!strcmp(argv[i], "--gpu-stuck") && i + 1 < argc && !strcmp(argv[i + 1], "ring")) gpu_stuck = 2, i++;
        else if (!strcmp(argv[i], "--gpu-stuck") && i + 1 < argc && !strcmp(argv[i + 1], "direct")) gpu_stuck = 3, i++;
        else if (!strcmp(argv[i], "--depth-change") && i + 1 < argc) depth_change = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-work") && i + 1 < argc && !strcmp(argv[i + 1], "one")) expect_one = 1, i++;
        else if (!strcmp(argv[i], "--expect-work") && i + 1 < argc && !strcmp(argv[i + 1], "each")) expect_one = 0, i++;
        else {
            fprintf(stderr,
                    "usage: %s [--emulate] [--mixed | --mixed-odd] [--quick] [--expect-ipc] [--ipc-mixed]\n"
                    "       [--expect-gdr | --expect-no-gdr] [--expect-direct | --expect-no-direct] [--expect-work one|each]\n"
                    "       [--work-split] [--direct-dies] [--direct-mismatch] [--stalled-receiver] [--direct-abort RANK]\n"
                    "       [--late-map] [--depth-change DEPTH] [--gpu-stuck small|ring|direct] [--trace-check]\n"
                    "       [--foreign-pid RANK]\n",
                    argv[0]);
            return 2;
        }
    }
    char why[256] = "";
    if (emulate) {
        ring__cuda_set_emulation(1);
        /* Shared memory, so that the emulated CUDA IPC can hand it to other ranks. */
        int fd = memfd_create("cuda_coll_check-arena", MFD_CLOEXEC);
        void *m = fd >= 0 && ftruncate(fd, ARENA_BYTES) == 0
                      ? mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
        if (m == MAP_FAILED) {
            perror("cuda_coll_check: arena");
            return 1;
        }
        arena = m;
        ring__cuda_emu_share(arena, ARENA_BYTES, fd);
        ring__mem_fake_device_range(0, arena, ARENA_BYTES); /* the stand-in driver: device 0 */
    } else if (!ring__cuda_usable(why, sizeof why)) {
        printf("SKIP: no usable GPU: %s\n", why);
        return 77;
    }
    int short_clock = 0; /* this rank keeps a RING_TIMEOUT_MS of a few seconds */
    if (stalled) {
        /* Only the stopped rank's left neighbour keeps the short timeout. */
        const char *r = getenv("RING_RANK"), *s = getenv("RING_NRANKS");
        if (r && s && atoi(r) != atoi(s) - 2) setenv("RING_TIMEOUT_MS", "60000", 1);
        else short_clock = 1;
    }
    if (gpu_stuck) {
        /* Only rank 1 keeps the short timeout: its own clock must end its call. */
        const char *r = getenv("RING_RANK");
        if (r && atoi(r) != 1) setenv("RING_TIMEOUT_MS", "60000", 1);
        else short_clock = 1;
    }
    if (foreign_pid >= 0) {
        const char *r = getenv("RING_RANK");
        if (r && atoi(r) == foreign_pid) setenv("RING_TEST_DIRECT_FOREIGN_PID", "1", 1);
    }
    if (work_split) {
        const char *r = getenv("RING_RANK");
        setenv("RING_CUDA_DIRECT_WORK", r && atoi(r) % 2 ? "each" : "one", 1);
    }
    char trace_path[64] = "";
    if (trace_check) {
        /* The log opens at the first communicator, so these must be set before init. */
        snprintf(trace_path, sizeof trace_path, "/tmp/cuda_coll_check-trace-%d", (int)getpid());
        unlink(trace_path);
        setenv("RING_DEBUG", "TRACE", 1);
        setenv("RING_DEBUG_SUBSYS", "COLL", 1);
        setenv("RING_DEBUG_FILE", "/tmp/cuda_coll_check-trace-%p", 1);
    }
    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    /* The short clock bounds joining the job too, and rank 0 may take longer than that to
     * listen on a loaded machine (seen once under ASan: "could not reach the root within 3000
     * ms"); the others wait 60 s for this rank, so it joins again: these tests are about the
     * call's timeout, not the join's. */
    for (int again = 0; short_clock && rc == RING_ERR_CONNECT && again < 5; again++) rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        fprintf(stderr, "init: %s: %s\n", ring_result_name(rc), ring_comm_last_error(comm ? comm : NULL));
        return 1;
    }
    const int rank = ring_comm_rank(comm), n = ring_comm_nranks(comm);
    int ndev = 1;
    if (!emulate) {
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) ndev = 1;
        if (ring__cuda_set_device(NULL, rank % ndev) != RING_OK ||
            ring__cuda_dev_alloc(NULL, ARENA_BYTES, (void **)&arena) != RING_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, ring_comm_last_error(NULL));
            return 1;
        }
    }
    if (!arena) return 1;
    /* mixed 1: even ranks device; 2: odd ranks device. */
    const int dev_parity = mixed == 2 ? 1 : 0;
    const int use_device = !mixed || rank % 2 == dev_parity;
    if (depth_change > 0) {
        /* Communicators one after the other in this process, every second one with another
         * pipeline depth and a 64 KiB chunk: the staging sets are pooled per device, so a
         * call gets the set an earlier one made for its deeper pipeline, and must count its
         * slots by its own depth (it used to index its partial sums by the set's, and forwarded
         * stale ones). After the first two, the set covers both and is never made again (it
         * was freed and made on every call, each free waiting for the device). */
        int bad = 0;
        unsigned long made_after_two = 0;
        for (int round = 0; round < 4 && !bad; round++) {
            if (round == 2) made_after_two = ring__cuda_stage_ring_allocs();
            if (round) {
                ring_comm_destroy(comm);
                ring_config_t cfg;
                ring_config_init(&cfg);
                if (round % 2) {
                    cfg.pipeline_depth = depth_change;
                    cfg.chunk_bytes = 64 * 1024; /* the suite runs this with RING_CHUNK_BYTES=4K */
                }
                rc = ring_comm_init_config(&comm, n, rank, getenv("RING_ROOT"), &cfg);
                if (rc != RING_OK) {
                    fprintf(stderr, "rank %d: second init: %s\n", rank, ring_comm_last_error(comm));
                    return 1;
                }
            }
            for (size_t li = 0; li < 2; li++) {
                bad |= run_case(comm, 1, C_REDUCE_SCATTER, RING_FLOAT32, RING_SUM, 40000, &layouts[li], li);
                bad |= run_case(comm, 1, C_ALLREDUCE, RING_INT32, RING_SUM, 120001, &layouts[li], li + 2);
            }
        }
        const unsigned long made = ring__cuda_stage_ring_allocs() - made_after_two;
        if (!bad && made) {
            fprintf(stderr, "rank %d: the staging slots were made %lu more time(s) after the first two communicators\n",
                    rank, made);
            bad = 1;
        }
        int32_t flag = bad, any = 0;
        if (ring_allreduce(comm, &flag, &any, 1, RING_INT32, RING_MAX) != RING_OK) any = 1;
        printf("rank %d: %s: depth %s, then %d (and back, twice); staging slots made again: %lu\n", rank,
               any ? "FAIL" : "PASS", getenv("RING_PIPELINE_DEPTH") ? getenv("RING_PIPELINE_DEPTH") : "default",
               depth_change, made);
        ring_comm_destroy(comm);
        return any ? 1 : 0;
    }
    if (direct_dies || direct_mismatch) {
        /* One direct all-reduce first, so that the failure hits a communicator that works. */
        const size_t count = 1 << 16;
        rc = ring_allreduce(comm, arena, arena, count, RING_FLOAT32, RING_SUM);
        if (rc != RING_OK) {
            fprintf(stderr, "rank %d: first all-reduce: %s\n", rank, ring_comm_last_error(comm));
            return 1;
        }
        if (direct_dies && rank == n - 1) {
            /* Late enough that the others are waiting for this rank inside the call. */
            struct timespec nap = {0, 300000000};
            nanosleep(&nap, NULL);
            printf("rank %d: leaving without a word\n", rank);
            fflush(stdout);
            _exit(0);
        }
        const double t0 = now_s();
        rc = ring_allreduce(comm, arena, arena, count + (direct_mismatch && rank == 0), RING_FLOAT32, RING_SUM);
        const double s = now_s() - t0;
        int ok = rc != RING_OK && s < 10;
        printf("rank %d: %s after %.2f s: %s: %s\n", rank, ok ? "PASS" : "FAIL", s, ring_result_name(rc),
               ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        return ok ? 0 : 1;
    }
    if (direct_abort >= 0) {
        const size_t count = 1 << 16;
        float *send = (float *)arena, *recv = (float *)arena + count;
        if (late_map) {
            /* The abort comes while rank 0 still maps the peers' buffers (its first call): the
             * others have entered stage 1 and returned by the time rank 0 gets there, and
             * rank 0 must not then queue work on their buffers. */
            if (rank == 0) ring__cuda_emu_set_open_delay(600);
        } else {
            rc = ring_allreduce(comm, send, recv, count, RING_FLOAT32, RING_SUM);
            if (rc != RING_OK) {
                fprintf(stderr, "rank %d: first all-reduce: %s\n", rank, ring_comm_last_error(comm));
                return 1;
            }
            ring__cuda_emu_set_kernel_delay(1000);
        }
        pthread_t th;
        if (rank == direct_abort && pthread_create(&th, NULL, abort_later, comm) != 0) return 1;
        const double t0 = now_s();
        rc = ring_allreduce(comm, send, recv, count, RING_FLOAT32, RING_SUM);
        const double s = now_s() - t0;
        memset(recv, 0x5a, count * sizeof *recv);
        if (rank == direct_abort) pthread_join(th, NULL);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ring_comm_last_error(comm));
        if (rank == 0) ring_comm_destroy(comm); /* lets anything still queued run */
        struct timespec nap = {1, 500000000};
        nanosleep(&nap, NULL);
        size_t changed = 0;
        for (size_t i = 0; i < count * sizeof *recv; i++) changed += ((unsigned char *)recv)[i] != 0x5a;
        int ok = rc != RING_OK && s < 10 && !changed;
        printf("rank %d: %s after %.2f s: %s: %s; %zu recvbuf bytes changed after the call returned\n", rank,
               ok ? "PASS" : "FAIL", s, ring_result_name(rc), msg, changed);
        if (rank != 0) ring_comm_destroy(comm);
        return ok ? 0 : 1;
    }
    if (stalled) {
        /* Back-to-back reduce-scatters; a helper process stops the last rank (SIGSTOP) in the
         * middle of one, 0.4 s in, and lets it go on 15 s later. */
        const size_t seg = (size_t)1 << 18, count = seg * (size_t)n;
        if (n < 3 || count * sizeof(float) + seg * sizeof(float) > ARENA_BYTES) {
            fprintf(stderr, "--stalled-receiver needs 3 to 63 ranks\n");
            return 2;
        }
        if (rank == n - 1) {
            pid_t me = getpid(), pid = fork();
            if (pid == 0) {
                struct timespec a = {0, 400000000}, b = {15, 0};
                nanosleep(&a, NULL);
                kill(me, SIGSTOP);
                nanosleep(&b, NULL);
                kill(me, SIGCONT);
                _exit(0);
            }
        }
        long calls = 0;
        double s = 0;
        do {
            const double t0 = now_s();
            rc = ring_reduce_scatter(comm, arena, arena + count * sizeof(float), seg, RING_FLOAT32, RING_SUM);
            s = now_s() - t0;
        } while (rc == RING_OK && ++calls < 1000000);
        /* Calls went through before the stop, or the setup is wrong; the left neighbour's
         * error names the stopped rank, whose receive it waited for. */
        char stopped[32];
        snprintf(stopped, sizeof stopped, "rank %d (", n - 1);
        int ok = rc != RING_OK && calls > 0 &&
                 (rank != n - 2 || (rc == RING_ERR_TIMEOUT && s < 10 && strstr(ring_comm_last_error(comm), stopped)));
        printf("rank %d: %s after %ld calls, the last %.2f s: %s: %s\n", rank, ok ? "PASS" : "FAIL", calls, s,
               ring_result_name(rc), ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        if (rank == n - 1) wait(NULL);
        return ok ? 0 : 1;
    }
    if (gpu_stuck) {
        const size_t count = gpu_stuck == 1 ? 5 : (size_t)1 << 18;
        float *buf = (float *)arena;
        unsigned *hold = NULL;
        if (n < 2) {
            fprintf(stderr, "--gpu-stuck needs 2 or more ranks\n");
            return 2;
        }
        rc = ring_allreduce(comm, buf, buf, count, RING_FLOAT32, RING_SUM); /* a communicator that works */
        if (rc != RING_OK) {
            fprintf(stderr, "rank %d: first all-reduce: %s\n", rank, ring_comm_last_error(comm));
            return 1;
        }
        if (expect_ipc) {
            /* The stuck call must be one whose messages go over CUDA IPC links (their slots
             * are what destroy must leave then). */
            uint64_t tx = 0, rx = 0;
            ring__cuda_ipc_counts(comm, &tx, &rx);
            if (!tx || !rx) {
                fprintf(stderr, "rank %d: expected the first all-reduce over CUDA IPC (RING_CUDA_IPC=ring)\n", rank);
                return 1;
            }
        }
        if (gpu_stuck == 3 && ring__cuda_direct_count(comm) != 1) {
            fprintf(stderr, "rank %d: expected the first all-reduce to run directly over CUDA IPC\n", rank);
            return 1;
        }
        if (rank == 1 && emulate) ring__cuda_emu_set_copy_delay(60000), ring__cuda_emu_set_kernel_delay(60000);
        /* On a GPU: a kernel that does not end on the legacy default stream, queued before the
         * call (in a direct call its inputs are then never ready). */
        if (rank == 1 && !emulate && ring__cuda_test_hold(NULL, &hold) != RING_OK) {
            fprintf(stderr, "rank 1: %s\n", ring_comm_last_error(NULL));
            return 1;
        }
        const double t0 = now_s();
        rc = ring_allreduce(comm, buf, buf, count, RING_FLOAT32, RING_SUM);
        const double s = now_s() - t0;
        const char *t = getenv("RING_TIMEOUT_MS");
        const double limit = rank == 1 ? (t ? atof(t) / 1000 : 300) + 2 : 10;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ring_comm_last_error(comm));
        const int named = strstr(msg, "has not finished the copies and kernels ringcomm queued") != NULL;
        /* Messages of the failed call its receiver had not released: destroy must leave those
         * slots allocated (the receiver's queued kernels may read them); it used to free them. */
        const uint64_t unreleased = ring__cuda_ipc_unreleased(comm);
        const double d0 = now_s();
        ring_comm_destroy(comm);
        const double ds = now_s() - d0;
        ring__cuda_test_release(hold); /* the process can end now */
        const int left = ring__cuda_ipc_left();
        /* One host, so the ring is in rank order: rank 0 sends to the stuck rank 1, which
         * cannot release what it queued kernels for. */
        int ok = rc != RING_OK && s < limit && named && (rank != 1 || (rc == RING_ERR_TIMEOUT && ds < 2)) &&
                 (unreleased == 0) == (left == 0) && (!expect_ipc || rank != 0 || unreleased > 0);
        printf("rank %d: %s after %.2f s (limit %.0f s): %s: %s; ring_comm_destroy took %.2f s; %llu message(s) "
               "not released by the receiver, %d slot set(s) left allocated\n",
               rank, ok ? "PASS" : "FAIL", s, limit, ring_result_name(rc), msg, ds, (unsigned long long)unreleased, left);
        return ok ? 0 : 1;
    }
    if (ipc_mixed) {
        /* Big enough for the ring at any chunk size the tests use. */
        const size_t count = 1 << 20;
        float *host = calloc(count, sizeof *host);
        void *buf = rank == 1 ? (void *)host : (void *)arena;
        const double t0 = now_s();
        rc = host ? ring_allreduce(comm, buf, buf, count, RING_FLOAT32, RING_SUM) : RING_ERR_NOMEM;
        const double s = now_s() - t0;
        const char *msg = ring_comm_last_error(comm);
        int neighbour = n > 1 && (rank == 2 % n || rank == 1);
        int ok = rc != RING_OK && s < 10 &&
                 (!neighbour || (rc == RING_ERR_MISMATCH && strstr(msg, "RING_CUDA_IPC") != NULL));
        printf("rank %d (%s buffers): %s after %.2f s: %s: %s\n", rank, rank == 1 ? "host" : "device",
               ok ? "PASS" : "FAIL", s, ring_result_name(rc), msg);
        free(host);
        ring_comm_destroy(comm);
        return ok ? 0 : 1;
    }
    char gpu[256];
    ring__cuda_describe(NULL, rank % ndev, gpu, sizeof gpu);
    if (rank == 0)
        printf("cuda_coll_check: %d ranks, %s buffers, %s%s; RING_CHUNK_BYTES=%s RING_PIPELINE_DEPTH=%s\n", n,
               mixed ? "mixed host/device" : "device", emulate ? "emulated GPU" : gpu, quick ? ", quick" : "",
               getenv("RING_CHUNK_BYTES") ? getenv("RING_CHUNK_BYTES") : "default",
               getenv("RING_PIPELINE_DEPTH") ? getenv("RING_PIPELINE_DEPTH") : "default");

    /* Whole-buffer staging (small: recursive doubling; medium: halving from 3 ranks; the
     * broadcast tree from 4) and the ring (many chunks with a small RING_CHUNK_BYTES); counts
     * below, at and above nranks. All-reduce and reduce-scatter take every dtype x op, the
     * other two (no arithmetic) every dtype; the biggest sizes a subset. */
    static const size_t counts[] = {1, 2, 5, 17, 1000, 6000, 40000, 250001};
    static const size_t quick_counts[] = {3, 1000, 70001};
    const size_t *cs = quick ? quick_counts : counts;
    size_t ncs = quick ? sizeof quick_counts / sizeof *quick_counts : sizeof counts / sizeof *counts;
    const size_t nlayouts = sizeof layouts / sizeof *layouts;
    uint64_t opidx = 0;
    int cases = 0, bad = 0;
    for (int coll = 0; coll < C_COUNT; coll++)
        for (size_t ci = 0; ci < ncs; ci++)
            for (int dt = 0; dt < RING_DTYPE_COUNT; dt++)
                for (int op = 0; op < RING_OP_COUNT; op++) {
                    size_t count = cs[ci];
                    if ((coll == C_ALLGATHER || coll == C_BROADCAST) && op != RING_SUM) continue;
                    if (count > 50000 && (op != RING_SUM && op != RING_AVG) && dt != RING_FLOAT32) continue;
                    if (count > 50000 && coll != C_ALLREDUCE && coll != C_BROADCAST) count /= (size_t)n;
                    const layout_t *lo = &layouts[(opidx + ci) % nlayouts];
                    bad |= run_case(comm, use_device, coll, (ring_dtype_t)dt, (ring_op_t)op, count, lo, opidx++);
                    cases++;
                }
    /* Every layout on a ring-sized buffer, every collective. */
    for (int coll = 0; coll < C_COUNT; coll++)
        for (size_t li = 0; li < nlayouts; li++, cases++)
            bad |= run_case(comm, use_device, coll, RING_BFLOAT16, RING_SUM, quick ? 50001 : 300007 / (size_t)n,
                            &layouts[li], opidx++);

    if (expect_ipc && n > 1) {
        uint64_t tx = 0, rx = 0;
        ring__cuda_ipc_counts(comm, &tx, &rx);
        printf("rank %d: %llu messages sent and %llu received over CUDA IPC\n", rank, (unsigned long long)tx,
               (unsigned long long)rx);
        if (!tx || !rx) {
            fprintf(stderr, "rank %d: expected the ring's messages over CUDA IPC (RING_CUDA_IPC=1)\n", rank);
            bad = 1;
        }
    }
    if (n > 1) {
        uint64_t nd = ring__cuda_direct_count(comm), n1 = ring__cuda_direct_one_count(comm);
        printf("rank %d: %llu of %d calls ran directly over CUDA IPC, %llu of them worked by rank 0 alone\n", rank,
               (unsigned long long)nd, cases, (unsigned long long)n1);
        if (expect_one >= 0 && n1 != (expect_one ? nd : 0)) {
            fprintf(stderr, "rank %d: expected %s of the direct calls to be worked by rank 0 alone\n", rank,
                    expect_one ? "every one" : "none");
            bad = 1;
        }
        /* With host ranks in the ring, no call can be direct. */
        int want = expect_direct < 0 ? -1 : mixed ? 0 : expect_direct;
        if ((want == 1 && nd != (uint64_t)cases) || (want == 0 && nd != 0)) {
            fprintf(stderr, "rank %d: expected %s to run directly over CUDA IPC\n", rank, want ? "every call" : "no call");
            bad = 1;
        }
    }
    if (expect_gdr >= 0 && n > 1) {
        /* GPUDirect RDMA: a rank with device buffers sends that way; it receives that way when
         * its left neighbour has device buffers too; a rank with host buffers never does. */
        uint64_t tx = 0, rx = 0;
        ring__cuda_gdr_counts(comm, &tx, &rx);
        const int left_dev = !mixed || ((rank + n - 1) % n) % 2 == dev_parity;
        printf("rank %d: %llu messages sent and %llu received by GPUDirect RDMA\n", rank, (unsigned long long)tx,
               (unsigned long long)rx);
        int want_tx = expect_gdr && use_device, want_rx = want_tx && left_dev;
        if (!tx != !want_tx || !rx != !want_rx) {
            fprintf(stderr, "rank %d: expected %s sent and %s received by GPUDirect RDMA\n", rank,
                    want_tx ? "messages" : "nothing", want_rx ? "messages" : "nothing");
            bad = 1;
        }
    }
    if (trace_check) {
        /* Before the verdict's all-reduce below, which every rank runs with host buffers. */
        if (!use_device && !trace_ok(trace_path, rank)) bad = 1;
        unlink(trace_path);
    }
    /* Everyone agrees on the verdict (a host all-reduce of the failure flags). */
    int32_t flag = bad, any = 0;
    rc = ring_allreduce(comm, &flag, &any, 1, RING_INT32, RING_MAX);
    if (rc != RING_OK) {
        fprintf(stderr, "rank %d: final check: %s\n", rank, ring_comm_last_error(comm));
        any = 1;
    }
    if (rank == 0) printf("%s: %d cases per rank%s\n", any ? "FAIL" : "PASS", cases, any ? " (see the ranks' messages)" : "");
    ring_comm_destroy(comm);
    if (!emulate) ring__cuda_dev_free(arena);
    return any ? 1 : 0;
}
