/*
 * ring_perf: bandwidth/latency sweep of the ringcomm collectives, in the style of nccl-tests,
 * with an alpha-beta model of each row and a parameter-server baseline for allreduce.
 *
 *   ringrun -n 4 build/perf/ring_perf -C allreduce -b 4 -e 256M -f 2 -d float -o sum -A both
 *
 * Every rank runs this program; ringrun sets RING_RANK/RING_NRANKS/RING_ROOT/RING_SECRET and the
 * communicator comes from ring_comm_init_env(). Rank 0 prints; other ranks only print errors.
 *
 * Per size: one ring_barrier, -w warm-up calls, then -n timed calls, each timed on its own with
 * CLOCK_MONOTONIC. The per-iteration times are reduced with RING_MAX over ranks (outside the
 * timed region) and the reported time is the median over iterations of that maximum.
 * With -c 1 the buffers are then refilled with check data, the collective runs once more and
 * every rank compares its output element by element with an independently computed value.
 * What a call must not write is checked too: the send buffer of an out-of-place call (const to
 * the library) must still hold its check data bit for bit, and the PC_GUARD_BYTES after the
 * part of each buffer that the call uses (the buffers are allocated that much larger than the
 * largest size needs) must still hold the pattern they were preset with (pc_guard_fill).
 * #wrong is the number of mismatching output elements, changed send elements and changed
 * guard elements, summed over ranks; stderr says which of them each rank found.
 * With -c 0 nothing is compared: #wrong is -1, the footer says "not checked" and the JSON
 * object's "ok" is null.
 *
 * Sizes are full-buffer bytes as in nccl-tests: allreduce/broadcast send count*size bytes,
 * reduce_scatter's size is the full send buffer (nranks*recvcount*size), allgather's the full
 * receive buffer (nranks*sendcount*size). The count column is the count argument of the call
 * (per rank for reduce_scatter and allgather). Sizes are rounded down to what the count can
 * express; sizes that round to zero elements (or repeat the previous row) are skipped, and a
 * range where every size does (say -C allgather -b 4 -e 8 on 3 ranks) is a usage error: no row
 * would be measured.
 *
 * Model columns. Before the sweep the tool measures the two parameters of the alpha-beta model
 * with the library's internal point-to-point layer (src/core/p2p.h) over the ring connections
 * (send to the right, receive from the left), which exist without any ring__p2p_connect. Left
 * and right are the communicator's ring neighbours, in the ring's order (ranks of one host next
 * to each other, RING_HOST_ID), not rank -/+ 1; the header prints that order:
 *  - alpha: an 8-byte token goes once around the ring (rank 0 sends to its right, every rank
 *    forwards what it receives from its left to its right, rank 0 receives it from its left);
 *    alpha = median over ALPHA_REPS trips (after ALPHA_WARMUP) of rank 0's trip time / n, the
 *    cost of one dependent hop as the collectives pay it;
 *  - B: every rank at once streams --probe-bytes (default 64 MiB) to its right while receiving
 *    as much from its left, in 4 MiB messages, LINK_PIECES per ring__p2p_run call; the time of
 *    a repetition is the max over ranks, B = bytes / time, the best of LINK_REPS repetitions
 *    (after one warm-up): the rate each link sustains while all of them carry traffic, which is
 *    what a ring collective asks of them. The received bytes are compared with the sent ones.
 * --alpha-us / --link-gbps give either parameter instead (no probe for it); --no-probe leaves
 * the ones not given unknown and their model columns "-". model(us) is the time the formula
 * predicts for the row's size (perf_common.h, pc_model_us); eff = model / measured, so 1 means
 * the call ran as fast as the links allow and smaller is slower. The broadcast model treats the
 * ring broadcast as a chain of n-1 hops pipelined in chunks: (n-1) alpha + S/B, without the
 * pipeline fill; the barrier's is one token pass of n-1 dependent empty steps, (n-1) alpha.
 * Rows of the shared-memory all-reduce ("sm", ranks of one host) have no link of their own and
 * get the collective's formula, the ring's, with the same alpha and B (measured over the same
 * shared memory): eff above 1 there means the page beat the ring's bound.
 * The library runs allreduces of at most RING_RD_MAX_BYTES, and the barrier, by recursive
 * doubling unless RING_ALGO says otherwise (src/core/api.c): those rows say "rd" in the algo
 * column and use its model, (log2 p + 2 [n > p]) (alpha + S/B) with p the largest power of
 * two <= n (alpha only for the barrier).
 *
 * Parameter-server baseline (-A ps, or -A both for the ring table then the ps table on the same
 * sizes; allreduce only): every rank != 0 sends its whole buffer to rank 0 and then receives
 * the result from it; rank 0 receives the n-1 buffers (posted together, in batches of at most
 * RING__P2P_MAX_OPS ranks and PS_SCRATCH_MAX bytes of receive buffers), reduces them into its
 * result in rank order with the library's own loops (ring__reduce, and ring__reduce_final for
 * the last one, which divides for avg), then sends the result to every rank at once. Its
 * connections are opened once before the sweep (ring__p2p_connect). Timing and checks are the
 * ring's; busbw uses the allreduce factor 2(n-1)/n so the two tables compare at equal bytes;
 * its model is 2(n-1) (alpha + S/B), since rank 0's link carries 2(n-1) S one message after the
 * other: the model of a network where rank 0's NIC is the bottleneck. On one host (loopback)
 * there is no such NIC and rank 0's n-1 receives overlap, so the baseline runs faster than that
 * model (eff > 1) and, for a few KiB, faster than the ring (2 dependent messages against
 * 2(n-1)). Rows carry the algorithm in the algo column ("ring", "rd" or "ps"); the collective
 * column stays "allreduce".
 *
 * Device buffers (-G cuda, -G both; CUDA builds, docs/cuda.md): sendbuf and recvbuf are
 * cudaMalloc'ed on device (local rank) mod (the host's GPU count) and passed to the calls as
 * they are, so the rows time the library's device path (staging through pinned host memory,
 * reductions on the GPU), in the same timed loop as host rows: no copy of ring_perf's is in it.
 * Check data is written into host memory of the same layout (the host buffers) and copied to
 * the device before the checked call; the result is copied back after it (cudaMemcpy). -G both
 * runs the sweep on host buffers, then the same sweep on device buffers, in one run with one
 * set of probes, and ends with busbw per size side by side and the device/host ratio (the
 * target of the device path: within 15 % of host buffers); --csv rows get a last column "mem"
 * and --json rows a key "mem" (host or cuda), and the JSON object a "gpu" description, only
 * then: -G host output is unchanged. Refused (exit 2) with -G cuda|both: -A ps|both (the
 * baseline reduces on the host and cannot read device memory), -R 1 (the device path never
 * sends from or into the user's buffer, so registering it changes nothing; verbs would need
 * GPUDirect RDMA) and the barrier (no buffers). Without CUDA in the build, or when any rank has
 * no usable GPU, every rank exits 77 after rank 0 said why.
 * --emulate-gpu (for tests; not in -h): -G cuda|both with the GPU emulated on the CPU
 * (ring__cuda_set_emulation) and a stand-in driver that calls the two buffers device memory of
 * device 0, as cuda_coll_check --emulate does: the device path's staging and ordering run over
 * the real transports on machines without a GPU, and are checked; its times mean nothing.
 *
 * Exit status: 0 every checked element right (or -c 0), 1 some element wrong, 2 usage error
 * (including a range of sizes that gives no row) or failed call, 77 (skipped) -G cuda|both
 * cannot run here.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "p2p.h"
#include "perf_common.h"
#include "reduce.h"
#include "ring_config.h"
#include "topo.h"
#include "transport.h"
#include "ringcomm.h"

#if RING_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/direct.h"
#include "cuda/mem.h"
#include "cuda/ring_cuda.h"
#endif

extern char **environ; /* <unistd.h> declares it only with _GNU_SOURCE */

/* alpha probe: enough trips for a stable median on a loaded machine, a few ms in all on loopback. */
#define ALPHA_REPS 100
#define ALPHA_WARMUP 10
/* link probe: 4 MiB messages, 8 in flight per call, like a deep pipeline of large chunks. */
#define LINK_PIECE ((size_t)4 << 20)
#define LINK_PIECES 8
#define LINK_REPS 3
/* ps baseline: rank 0's receive buffers stay under this together (there is always at least one). */
#define PS_SCRATCH_MAX ((size_t)1 << 30)
/* Exit status when -G cuda|both cannot run here: what meson and perf/cuda/gpu_checks.sh read as
 * "skipped", so a GPU benchmark in a test list does not fail on a machine without a GPU. */
#define EXIT_SKIP 77
/* getopt_long value of --emulate-gpu, above perf_common's long options. */
#define OPT_EMULATE_GPU 512

/* perf_common's dtypes and ops, as the library's. */
static const ring_dtype_t ring_dtypes[PC_DTYPE_COUNT] = {RING_INT8,    RING_UINT8,    RING_INT32,   RING_UINT32,
                                                         RING_INT64,   RING_UINT64,   RING_FLOAT16, RING_BFLOAT16,
                                                         RING_FLOAT32, RING_FLOAT64};
static const ring_op_t ring_ops[PC_OP_COUNT] = {RING_SUM, RING_PROD, RING_MIN, RING_MAX, RING_AVG};

typedef struct {
    pc_opts_t pc; /* sizes, iterations, check, in-place, output, dtype, op, model, -A, -G */
    pc_coll_t coll;
    int root, async;
    int reg;     /* -R 1: ring_comm_register the sweep's buffers */
    int emulate; /* --emulate-gpu: -G cuda|both on the CPU (tests) */
} opts_t;

static ring_comm_t *g_comm;
static int g_rank, g_nranks;

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                    */

static void die_call(const char *what, ring_result_t r)
{
    fprintf(stderr, "ring_perf: rank %d: %s failed: %s (%s): %s\n", g_rank, what, ring_strerror(r),
            ring_result_name(r), ring_comm_last_error(g_comm));
    fflush(stderr);
    /* Make the other ranks fail fast instead of waiting for the timeout. */
    ring_comm_abort(g_comm);
    exit(2);
}

#define CALL(what, expr)                                                                           \
    do {                                                                                           \
        ring_result_t rc_ = (expr);                                                                \
        if (rc_ != RING_OK) die_call(what, rc_);                                                   \
    } while (0)

static void die_msg(const char *msg)
{
    fprintf(stderr, "ring_perf: rank %d: %s\n", g_rank, msg);
    fflush(stderr);
    ring_comm_abort(g_comm);
    exit(2);
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]   (run under ringrun: every rank runs it)\n"
            "  -C coll    allreduce|reduce_scatter|allgather|broadcast|barrier (default allreduce)\n"
            "  -A algo    ring|ps|both: the library (the ring, or the algorithm it picks for the size: rd, rh,\n"
            "             sm or tree; the algo column says which), the parameter-server baseline (allreduce,\n"
            "             host buffers), or both tables on the same sizes (default ring)\n"
            "  -G mem     host|cuda|both: where the buffers live: host memory, CUDA device memory\n"
            "             (cudaMalloc on device local rank %% GPUs; checks copy through host memory\n"
            "             outside the timed calls), or both: the sweep on host buffers, then on\n"
            "             device buffers, and their busbw side by side (default host; cuda and both\n"
            "             exit 77 where the build has no CUDA or a rank has no usable GPU)\n"
            PC_USAGE_SWEEP
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16 float|float32\n"
            "             double|float64 (default float)\n"
            "  -o op      sum prod min max avg (default sum)\n"
            "  -r root    broadcast root (default 0)\n"
            "  -I 0|1     in-place (default 0)\n"
            "  -a 0|1     use the _async API followed by ring_wait (default 0; the ps baseline is\n"
            "             always blocking)\n"
            "  -R 0|1     register the buffers with ring_comm_register (default 0; over verbs,\n"
            "             registered buffers are written straight into each other; host buffers only)\n"
            PC_USAGE_OUTPUT
            "  --no-probe        do not measure alpha and the link bandwidth before the sweep; the\n"
            "                    model columns then need --alpha-us and --link-gbps (the barrier: alpha)\n"
            "  --probe-bytes N   bytes each rank streams in the link probe (default 64M)\n"
            "  -h         this help\n"
            "exit status: 0 results right (or not checked), 1 a wrong element, 2 usage error (or no\n"
            "size in -b .. -e holds one element per rank) or failed call,\n"
            "77 -G cuda|both cannot run here (no CUDA in this build, or a rank without a usable GPU)\n",
            argv0);
}

/* Before init, exit(2) after rank 0 printed msg. The other ranks stay a moment: ringrun ends the
 * job at the first rank's exit, and would often kill rank 0 before it said why. */
static void usage_exit(void)
{
    const char *r = getenv("RING_RANK");
    if (r && strcmp(r, "0") != 0) usleep(300 * 1000);
    exit(2);
}

static void bad_arg(const char *argv0, const char *msg, const char *val)
{
    /* Before init the rank is only known from the launcher: let one rank print the usage. */
    const char *r = getenv("RING_RANK");
    if (!r || strcmp(r, "0") == 0) {
        if (val) fprintf(stderr, "ring_perf: %s: '%s'\n", msg, val);
        else fprintf(stderr, "ring_perf: %s\n", msg);
        usage(stderr, argv0);
    }
    usage_exit();
}

/* A usage error without the usage text (the options were understood, the combination not). */
static void bad_combination(const char *msg)
{
    const char *r = getenv("RING_RANK");
    if (!r || strcmp(r, "0") == 0) fprintf(stderr, "ring_perf: %s\n", msg);
    usage_exit();
}

static void *alloc_buf(size_t bytes)
{
    size_t n;
    void *p = pc_alloc_buf(bytes, &n);
    if (!p) {
        fprintf(stderr, "ring_perf: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        ring_comm_abort(g_comm);
        exit(2);
    }
    return p;
}

/* bytes and the guard span after them (guard_set); 0 stays 0 (a buffer the calls never use),
 * and a size that cannot grow stays too large to allocate. */
static size_t with_guard(size_t bytes)
{
    if (!bytes) return 0;
    return bytes > SIZE_MAX - PC_GUARD_BYTES ? SIZE_MAX : bytes + PC_GUARD_BYTES;
}

/* Collective, after init: exit 2 where no size of -b .. -e holds one element (per rank, where
 * the count is per rank): the sweep would print an empty table and pass. Every rank computes
 * the same; rank 0 says why. */
static void no_rows_exit(const opts_t *o)
{
    const size_t sz = pc_dtype_size(o->pc.dtype);
    const int per_rank = o->coll == PC_COLL_REDUCE_SCATTER || o->coll == PC_COLL_ALLGATHER;
    const size_t unit = per_rank ? sz * (size_t)g_nranks : sz;
    if (pc_sweep_rows(&o->pc, unit) > 0) return;
    if (g_rank == 0) {
        if (per_rank)
            fprintf(stderr,
                    "ring_perf: no size in -b %zu .. -e %zu holds one %s element (%zu B) per rank: %s over %d ranks "
                    "needs sizes of at least %zu B; no row to measure\n",
                    o->pc.minb, o->pc.maxb, pc_dtype_name(o->pc.dtype), sz, pc_coll_name(o->coll), g_nranks, unit);
        else
            fprintf(stderr,
                    "ring_perf: no size in -b %zu .. -e %zu holds one %s element (%zu B); no row to measure\n",
                    o->pc.minb, o->pc.maxb, pc_dtype_name(o->pc.dtype), sz);
        fflush(stderr);
    }
    /* Nobody leaves before rank 0 said it: ringrun ends the job at the first rank's exit. */
    (void)ring_barrier(g_comm);
    ring_comm_destroy(g_comm);
    exit(2);
}

static void p2p(ring__p2p_op_t *ops, int nops, const char *what)
{
    CALL(what, ring__p2p_run(g_comm, ops, nops));
}

/* ---------------------------------------------------------------------------------------- */
/* Device buffers (-G cuda|both)                                                             */

static struct {
    const char *opt;       /* "-G cuda" or "-G both", for messages */
    unsigned char *buf[2]; /* the device sendbuf and recvbuf; NULL where the call needs none */
    int dev, ndev;  /* this rank's device, of ndev on its host */
    int *devs;      /* every rank's device (rank 0 prints them) */
    char desc[256]; /* ring__cuda_describe of dev */
} g_gpu;

/*
 * Collective: unless every rank can use device buffers (ok), all exit EXIT_SKIP together (one
 * rank leaving alone would leave the others waiting for it). Rank 0 says why; another rank
 * only where its reason may differ from rank 0's (rank 0 was fine).
 */
static void gpu_agree(int32_t ok, const char *why)
{
    const int n = g_nranks;
    int32_t *oks = calloc((size_t)n, sizeof *oks);
    if (!oks) die_msg("out of memory");
    CALL("ring_allgather (GPU check)", ring_allgather(g_comm, &ok, oks, 1, RING_INT32));
    int bad = 0;
    for (int r = 0; r < n; r++) bad += !oks[r];
    if (!bad) {
        free(oks);
        return;
    }
    if (!ok && (g_rank == 0 || oks[0])) fprintf(stderr, "ring_perf: rank %d: %s: %s\n", g_rank, g_gpu.opt, why);
    if (g_rank == 0)
        fprintf(stderr, "ring_perf: %s: %d of %d ranks cannot use device buffers; skipped (exit %d)\n", g_gpu.opt,
                bad, n, EXIT_SKIP);
    fflush(stderr);
    free(oks);
    /* Nobody leaves before rank 0 said it: ringrun ends the job at the first rank's exit. */
    (void)ring_barrier(g_comm);
    ring_comm_destroy(g_comm);
    exit(EXIT_SKIP);
}

#if RING_HAVE_CUDA
/* Before init: --emulate-gpu replaces the GPU and the driver's answers for the whole process
 * (the stand-in driver, as cuda_coll_check's: gpu_alloc's two buffers are device memory of
 * device 0, everything else host memory). */
static void gpu_emulate(void)
{
    ring__cuda_set_emulation(1);
    ring__mem_fake_device_range(0, NULL, 0);
}

/* Collective, after init: every rank has a usable GPU, or all skip. Then the device: local
 * rank % the host's GPUs, as one process per GPU is the usual layout. */
static void gpu_setup(void)
{
    char cause[256] = "", why[640];
    int32_t ok = ring__cuda_usable(cause, sizeof cause);
    /* The runtime's reason for a missing driver ("driver version is insufficient") misleads;
     * the library's own probe of libcuda.so.1 says what is missing. */
    const char *drv = ok || ring__mem_thread_has_context() >= 0 ? NULL : ring__mem_driver_state();
    snprintf(why, sizeof why, "no usable GPU: %s%s%s", cause, drv ? "; " : "", drv ? drv : "");
    gpu_agree(ok, why);
    g_gpu.devs = calloc((size_t)g_nranks, sizeof *g_gpu.devs);
    if (!g_gpu.devs) die_msg("out of memory");
    int local = g_rank, nlocal = 1;
    g_gpu.ndev = 1;
    if (!ring__cuda_emulating() && (cudaGetDeviceCount(&g_gpu.ndev) != cudaSuccess || g_gpu.ndev < 1)) g_gpu.ndev = 1;
    if (!ring__topo_env_local_rank(&local, &nlocal)) local = g_rank;
    g_gpu.dev = local % g_gpu.ndev;
    CALL("ring__cuda_set_device", ring__cuda_set_device(g_comm, g_gpu.dev));
    if (ring__cuda_describe(g_comm, g_gpu.dev, g_gpu.desc, sizeof g_gpu.desc) != RING_OK)
        snprintf(g_gpu.desc, sizeof g_gpu.desc, "device %d (%s)", g_gpu.dev, ring_comm_last_error(g_comm));
    int32_t d = g_gpu.dev;
    CALL("ring_allgather (devices)", ring_allgather(g_comm, &d, g_gpu.devs, 1, RING_INT32));
}

/* Buffer b (0 send, 1 receive) on the device; NULL for 0 bytes, as the calls then use none. */
static unsigned char *gpu_alloc(int b, size_t bytes)
{
    void *p = NULL;
    if (!bytes) return NULL;
    CALL("ring__cuda_dev_alloc", ring__cuda_dev_alloc(g_comm, bytes, &p));
    if (ring__cuda_emulating()) ring__mem_fake_device_range(b, p, bytes);
    g_gpu.buf[b] = p;
    return p;
}

static void gpu_copy(void *dst, const void *src, size_t bytes)
{
    CALL("ring__cuda_memcpy", ring__cuda_memcpy(g_comm, dst, src, bytes));
}

static void gpu_free(void)
{
    for (int b = 0; b < 2; b++) ring__cuda_dev_free(g_gpu.buf[b]);
    free(g_gpu.devs);
}
#else
/* Without CUDA, gpu_setup skips: the others are never reached. */
static void gpu_emulate(void) {}
static void gpu_setup(void)
{
    gpu_agree(0, "this build has no CUDA support (meson setup -Dcuda=enabled with nvcc and libcudart_static: "
                 "docs/cuda.md)");
}
static unsigned char *gpu_alloc(int b, size_t bytes)
{
    (void)b;
    (void)bytes;
    die_msg("this build has no CUDA support");
    return NULL;
}
static void gpu_copy(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    die_msg("this build has no CUDA support");
}
static void gpu_free(void) {}
#endif

/* The algorithm the library runs for a call of this collective and size: the rule of
 * ring__run_op (src/core/api.c) on the communicator's RING_ALGO / RING_RD_MAX_BYTES. */
static pc_algo_t lib_algo(pc_coll_t c, size_t bytes)
{
    ring__coll_t lc = c == PC_COLL_ALLREDUCE   ? RING__COLL_ALLREDUCE
                      : c == PC_COLL_BARRIER   ? RING__COLL_BARRIER
                      : c == PC_COLL_BROADCAST ? RING__COLL_BROADCAST
                                               : RING__COLL_ALLGATHER;
    int a = ring__algo_for(g_comm, lc, bytes);
    return a == RING__ALGO_RD     ? PC_ALGO_RD
           : a == RING__ALGO_TREE ? PC_ALGO_TREE
           : a == RING__ALGO_RH   ? PC_ALGO_RH
           : a == RING__ALGO_SM   ? PC_ALGO_SM
                                  : PC_ALGO_RING;
}

/* ---------------------------------------------------------------------------------------- */
/* Model parameters                                                                          */

/* Per-hop latency in seconds: median ring trip of an 8-byte token / n (rank 0 measures). The
 * neighbours are the communicator's (g_comm->left/right: the ring's order, ranks of one host
 * next to each other), not rank -/+ 1: those are the links the collectives use, and the only
 * ones connected without ring__p2p_connect. */
static double probe_alpha(void)
{
    const int n = g_nranks, right = g_comm->right, left = g_comm->left;
    double t[ALPHA_REPS];
    CALL("ring_barrier", ring_barrier(g_comm));
    for (int k = -ALPHA_WARMUP; k < ALPHA_REPS; k++) {
        uint64_t token = (uint64_t)(k + ALPHA_WARMUP), back = ~(uint64_t)0;
        if (g_rank == 0) {
            /* Both in one call: the receive is posted while the send goes out. */
            ring__p2p_op_t ops[2] = {{.peer = right, .is_send = 1, .buf = &token, .len = sizeof token},
                                      {.peer = left, .is_send = 0, .buf = &back, .len = sizeof back}};
            double t0 = pc_now_us();
            p2p(ops, 2, "ring__p2p_run (alpha probe)");
            double dt = pc_now_us() - t0;
            if (back != token) die_msg("alpha probe: the token came back changed");
            if (k >= 0) t[k] = dt;
        } else {
            ring__p2p_op_t rx = {.peer = left, .is_send = 0, .buf = &back, .len = sizeof back};
            p2p(&rx, 1, "ring__p2p_run (alpha probe)");
            ring__p2p_op_t tx = {.peer = right, .is_send = 1, .buf = &back, .len = sizeof back};
            p2p(&tx, 1, "ring__p2p_run (alpha probe)");
        }
    }
    double alpha = g_rank == 0 ? pc_median(t, ALPHA_REPS) * 1e-6 / n : 0;
    /* Every rank uses the same value (only rank 0 prints, but keep the state identical). */
    CALL("ring_broadcast (alpha)", ring_broadcast(g_comm, &alpha, 1, RING_FLOAT64, 0));
    return alpha;
}

/* Link bandwidth in bytes/s: all ranks stream `total` bytes to their ring neighbour on the
 * right at once (g_comm->right, as in probe_alpha). */
static double probe_link(size_t total)
{
    const int right = g_comm->right, left = g_comm->left;
    const size_t piece = total < LINK_PIECE ? total : LINK_PIECE;
    const size_t per_call = total < piece * LINK_PIECES ? total : piece * LINK_PIECES;
    unsigned char *sb = alloc_buf(per_call), *rb = alloc_buf(per_call);
    /* The same pattern on every rank, so what arrives from the left must equal what is sent. */
    for (size_t k = 0; k < per_call; k++) sb[k] = (unsigned char)(k * 131u + (k >> 12));
    double t[LINK_REPS];
    for (int rep = -1; rep < LINK_REPS; rep++) {
        CALL("ring_barrier", ring_barrier(g_comm));
        double t0 = pc_now_us();
        for (size_t off = 0; off < total; off += per_call) {
            size_t len = total - off < per_call ? total - off : per_call;
            ring__p2p_op_t ops[2 * LINK_PIECES];
            int nops = 0;
            for (size_t p = 0; p < len; p += piece) {
                size_t m = len - p < piece ? len - p : piece;
                ops[nops++] = (ring__p2p_op_t){.peer = right, .is_send = 1, .buf = sb + p, .len = m};
                ops[nops++] = (ring__p2p_op_t){.peer = left, .is_send = 0, .buf = rb + p, .len = m};
            }
            p2p(ops, nops, "ring__p2p_run (link probe)");
        }
        if (rep >= 0) t[rep] = pc_now_us() - t0;
    }
    /* The last call filled rb from its start; compare what it covered. */
    size_t last = total % per_call ? total % per_call : per_call;
    if (memcmp(sb, rb, last) != 0) die_msg("link probe: the bytes received differ from the bytes sent");
    free(sb);
    free(rb);
    CALL("ring_allreduce (probe max)", ring_allreduce(g_comm, t, t, LINK_REPS, RING_FLOAT64, RING_MAX));
    double best = t[0];
    for (int k = 1; k < LINK_REPS; k++)
        if (t[k] < best) best = t[k];
    return (double)total / (best * 1e-6);
}

static void format_bytes(char *s, size_t n, size_t b)
{
    if (b >= ((size_t)1 << 30) && b % ((size_t)1 << 30) == 0) snprintf(s, n, "%zu GiB", b >> 30);
    else if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) snprintf(s, n, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(s, n, "%zu KiB", b >> 10);
    else snprintf(s, n, "%zu B", b);
}

/* alpha and B from the options, else from the probes, else unknown. Collective (all ranks). */
static pc_link_t model_params(const pc_opts_t *o)
{
    pc_link_t l = {-1, -1, "", ""};
    if (o->alpha_us >= 0) {
        l.alpha_s = o->alpha_us * 1e-6;
        snprintf(l.alpha_src, sizeof l.alpha_src, "--alpha-us");
    } else if (g_nranks == 1) {
        snprintf(l.alpha_src, sizeof l.alpha_src, "1 rank: no hop to measure");
    } else if (!o->probe) {
        snprintf(l.alpha_src, sizeof l.alpha_src, "--no-probe");
    } else {
        l.alpha_s = probe_alpha();
        snprintf(l.alpha_src, sizeof l.alpha_src, "ring token pass, median of %d", ALPHA_REPS);
    }
    if (o->link_gbps > 0) {
        l.bw_Bps = pc_gbps_to_Bps(o->link_gbps);
        snprintf(l.bw_src, sizeof l.bw_src, "--link-gbps");
    } else if (g_nranks == 1) {
        snprintf(l.bw_src, sizeof l.bw_src, "1 rank: no link to measure");
    } else if (!o->probe) {
        snprintf(l.bw_src, sizeof l.bw_src, "--no-probe");
    } else {
        char b[32];
        format_bytes(b, sizeof b, o->probe_bytes);
        l.bw_Bps = probe_link(o->probe_bytes);
        snprintf(l.bw_src, sizeof l.bw_src, "ring streaming, %s, best of %d", b, LINK_REPS);
    }
    return l;
}

/* ---------------------------------------------------------------------------------------- */
/* Parameter-server baseline                                                                 */

static struct {
    unsigned char **slot; /* rank 0: receive buffers for nslots ranks at a time */
    int nslots;
} g_ps;

static void ps_setup(size_t maxbytes)
{
    const int n = g_nranks;
    if (n == 1) return;
    int npeers = g_rank == 0 ? n - 1 : 1;
    int *peers = malloc(sizeof(int) * (size_t)npeers);
    if (!peers) die_msg("out of memory");
    for (int k = 0; k < npeers; k++) peers[k] = g_rank == 0 ? k + 1 : 0;
    CALL("ring__p2p_connect (ps)", ring__p2p_connect(g_comm, peers, npeers));
    free(peers);
    if (g_rank != 0) return;
    size_t fit = maxbytes ? PS_SCRATCH_MAX / maxbytes : (size_t)n;
    int ns = n - 1 < RING__P2P_MAX_OPS ? n - 1 : RING__P2P_MAX_OPS;
    if ((size_t)ns > fit) ns = fit ? (int)fit : 1;
    g_ps.nslots = ns;
    g_ps.slot = calloc((size_t)ns, sizeof *g_ps.slot);
    if (!g_ps.slot) die_msg("out of memory");
    for (int k = 0; k < ns; k++) g_ps.slot[k] = alloc_buf(maxbytes);
}

static void ps_free(void)
{
    for (int k = 0; k < g_ps.nslots; k++) free(g_ps.slot[k]);
    free(g_ps.slot);
}

static void ps_allreduce(const void *send, void *recv, size_t count, ring_dtype_t dt, ring_op_t op, size_t esize)
{
    const int n = g_nranks;
    const size_t bytes = count * esize;
    if (n == 1) {
        if (recv != send) memcpy(recv, send, bytes);
        return;
    }
    if (g_rank != 0) {
        /* Two calls: in place, the result must not land in the buffer while it is being sent. */
        ring__p2p_op_t tx = {.peer = 0, .is_send = 1, .buf = (void *)send, .len = bytes};
        p2p(&tx, 1, "ring__p2p_run (ps send)");
        ring__p2p_op_t rx = {.peer = 0, .is_send = 0, .buf = recv, .len = bytes};
        p2p(&rx, 1, "ring__p2p_run (ps result)");
        return;
    }
    ring__p2p_op_t ops[RING__P2P_MAX_OPS];
    const void *acc = send; /* rank 0's own contribution comes first */
    for (int q0 = 1; q0 < n; q0 += g_ps.nslots) {
        int nb = n - q0 < g_ps.nslots ? n - q0 : g_ps.nslots;
        for (int k = 0; k < nb; k++) ops[k] = (ring__p2p_op_t){.peer = q0 + k, .is_send = 0, .buf = g_ps.slot[k], .len = bytes};
        p2p(ops, nb, "ring__p2p_run (ps gather)");
        for (int k = 0; k < nb; k++) {
            if (q0 + k == n - 1) ring__reduce_final(recv, acc, g_ps.slot[k], count, dt, op, n);
            else ring__reduce(recv, acc, g_ps.slot[k], count, dt, op);
            acc = recv;
        }
    }
    for (int q0 = 1; q0 < n; q0 += RING__P2P_MAX_OPS) {
        int nb = n - q0 < RING__P2P_MAX_OPS ? n - q0 : RING__P2P_MAX_OPS;
        for (int k = 0; k < nb; k++) ops[k] = (ring__p2p_op_t){.peer = q0 + k, .is_send = 1, .buf = recv, .len = bytes};
        p2p(ops, nb, "ring__p2p_run (ps scatter)");
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Check data (generator and expected values: perf_common)                                   */

/* Count mismatches of got[k] against the expectation; print the first few to stderr. */
typedef struct {
    pc_dtype_t dtype;
    pc_op_t op;
    const pc_gen_t *gen;
    int reduce;       /* 1: reduction over ranks of val(r, base + k); 0: copy of val(src, base + k) */
    int src;          /* copy source rank */
} expect_t;

static long long check_range(const void *got, size_t n, uint64_t base, const expect_t *e, size_t *reported,
                             const char *what, size_t bytes)
{
    size_t sz = pc_dtype_size(e->dtype);
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        const unsigned char *g = (const unsigned char *)got + k * sz;
        if (e->reduce) pc_expect_reduce(exp, e->dtype, e->op, e->gen, g_nranks, base + k);
        else pc_put(exp, 0, e->dtype, pc_val(e->gen, e->src, base + k));
        if (!pc_same(g, exp, e->dtype)) {
            if (*reported < 5) {
                char a[64], b[64];
                pc_describe(a, sizeof a, g, e->dtype);
                pc_describe(b, sizeof b, exp, e->dtype);
                fprintf(stderr, "ring_perf: rank %d: %s %zu B: wrong element %zu = %s, expected %s\n", g_rank,
                        what, bytes, (size_t)(base + k), a, b);
                (*reported)++;
            }
            wrong++;
        }
    }
    return wrong;
}

/* out[k] = the bitwise complement of what check_range expects there: an element the call
 * never writes then fails the check whatever its expected value (pc_preset_unlike_*). */
static void preset_unlike(void *out, size_t n, uint64_t base, const expect_t *e)
{
    if (e->reduce) pc_preset_unlike_reduce(out, n, e->dtype, e->op, e->gen, g_nranks, base);
    else pc_preset_unlike_copy(out, n, e->dtype, e->gen, e->src, base);
}

/* The send buffer of an out-of-place call, n elements of this rank's check data from base:
 * the elements the call changed (the buffer is const to the library). */
static long long check_send(const void *got, size_t n, uint64_t base, const expect_t *e, size_t *reported,
                            const char *what, size_t bytes)
{
    size_t first;
    size_t bad = pc_count_changed(got, n, e->dtype, e->gen, g_rank, base, &first);
    if (bad && *reported < 5) {
        char a[64], b[64];
        unsigned char exp[8];
        pc_put(exp, 0, e->dtype, pc_val(e->gen, g_rank, base + first));
        pc_describe(a, sizeof a, (const unsigned char *)got + first * pc_dtype_size(e->dtype), e->dtype);
        pc_describe(b, sizeof b, exp, e->dtype);
        fprintf(stderr,
                "ring_perf: rank %d: %s %zu B: the call changed %zu element%s of its (const) send buffer, "
                "the first element %zu = %s, was %s\n",
                g_rank, what, bytes, bad, bad == 1 ? "" : "s", (size_t)(base + first), a, b);
        (*reported)++;
    }
    return (long long)bad;
}

/* The guard span after the `used` bytes of one buffer of the checked call (see sweep). */
typedef struct {
    unsigned char *at;  /* the span, in the buffer the call gets (host or device memory) */
    const char *name;   /* "send", "receive" */
    size_t used;        /* bytes of the buffer before it */
    unsigned char saved[PC_GUARD_BYTES]; /* what the span held before the check */
} guard_t;

/* ---------------------------------------------------------------------------------------- */
/* Running one collective                                                                    */

typedef struct {
    pc_coll_t coll;
    pc_algo_t algo;
    size_t count; /* the count argument */
    ring_dtype_t dtype;
    ring_op_t op;
    size_t esize;
    int root, async;
    const void *send;
    void *recv;
} call_t;

static void run_once(const call_t *c)
{
    ring_request_t *req = NULL;
    ring_result_t r = RING_OK;
    const char *what = pc_coll_name(c->coll);
    if (c->algo == PC_ALGO_PS) {
        ps_allreduce(c->send, c->recv, c->count, c->dtype, c->op, c->esize);
        return;
    }
    if (c->async) {
        switch (c->coll) {
        case PC_COLL_ALLREDUCE:
            r = ring_allreduce_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req);
            break;
        case PC_COLL_REDUCE_SCATTER:
            r = ring_reduce_scatter_async(g_comm, c->send, c->recv, c->count, c->dtype, c->op, &req);
            break;
        case PC_COLL_ALLGATHER: r = ring_allgather_async(g_comm, c->send, c->recv, c->count, c->dtype, &req); break;
        case PC_COLL_BROADCAST: r = ring_broadcast_async(g_comm, c->recv, c->count, c->dtype, c->root, &req); break;
        case PC_COLL_BARRIER: r = ring_barrier_async(g_comm, &req); break;
        default: break;
        }
        if (r != RING_OK) die_call(what, r);
        r = ring_wait(req);
        if (r != RING_OK) die_call("ring_wait", r);
        return;
    }
    switch (c->coll) {
    case PC_COLL_ALLREDUCE: r = ring_allreduce(g_comm, c->send, c->recv, c->count, c->dtype, c->op); break;
    case PC_COLL_REDUCE_SCATTER:
        r = ring_reduce_scatter(g_comm, c->send, c->recv, c->count, c->dtype, c->op);
        break;
    case PC_COLL_ALLGATHER: r = ring_allgather(g_comm, c->send, c->recv, c->count, c->dtype); break;
    case PC_COLL_BROADCAST: r = ring_broadcast(g_comm, c->recv, c->count, c->dtype, c->root); break;
    case PC_COLL_BARRIER: r = ring_barrier(g_comm); break;
    default: break;
    }
    if (r != RING_OK) die_call(what, r);
}

/* Median over iterations of the max over ranks of each iteration's time (us). */
static double timed_loop(const call_t *c, int warmup, int iters, double *t)
{
    for (int k = 0; k < warmup; k++) run_once(c);
    CALL("ring_barrier", ring_barrier(g_comm));
    for (int k = 0; k < iters; k++) {
        double t0 = pc_now_us();
        run_once(c);
        t[k] = pc_now_us() - t0;
    }
    CALL("ring_allreduce (timing max)", ring_allreduce(g_comm, t, t, (size_t)iters, RING_FLOAT64, RING_MAX));
    return pc_median(t, iters);
}

/* ---------------------------------------------------------------------------------------- */

static FILE *g_info; /* where the # lines go: stdout, or stderr with --csv/--json */

static const char *algos_name(unsigned algos)
{
    if (algos == (PC_ALGO_BIT(PC_ALGO_RING) | PC_ALGO_BIT(PC_ALGO_PS))) return "both";
    return algos == PC_ALGO_BIT(PC_ALGO_PS) ? "ps" : "ring";
}

static const char *mem_name(pc_mem_t m) { return m == PC_MEM_CUDA ? "cuda" : m == PC_MEM_BOTH ? "both" : "host"; }

static void library_string(char *s, size_t n)
{
    int v = ring_version();
    snprintf(s, n, "ringcomm %d.%d.%d (header %d.%d.%d)", v / 10000, v / 100 % 100, v % 100, RING_VERSION_MAJOR,
             RING_VERSION_MINOR, RING_VERSION_PATCH);
}

static void print_header(int argc, char **argv, const opts_t *o, const pc_link_t *link)
{
    FILE *f = g_info;
    pc_print_cmdline(f, "ring_perf", argc, argv);
    char host[256] = "?", lib[128];
    gethostname(host, sizeof host - 1);
    fprintf(f,
            "# nranks %d  host %s  collective %s  algo %s  dtype %s  op %s  root %d  in-place %d  async %d  "
            "check %d  memory %s%s\n",
            g_nranks, host, pc_coll_name(o->coll), algos_name(o->pc.algos), pc_dtype_name(o->pc.dtype),
            pc_op_name(o->pc.op), o->root, o->pc.inplace, o->async, o->pc.check,
            o->pc.mem == PC_MEM_BOTH ? "host, then cuda" : mem_name(o->pc.mem), o->reg ? " (registered)" : "");
    if (o->pc.mem != PC_MEM_HOST) {
        /* Where the device buffers are, and that the checks' copies are not timed. */
        fprintf(f, "# device buffers: cudaMalloc, device = local rank mod GPU count (%d on rank 0)%s; rank 0: %s\n",
                g_gpu.ndev, o->emulate ? ", --emulate-gpu" : "", g_gpu.desc);
        fprintf(f, "# devices by rank:");
        for (int r = 0; r < g_nranks && r < 32; r++) fprintf(f, " %d", g_gpu.devs[r]);
        fprintf(f, "%s; check data goes through host memory (cudaMemcpy) outside the timed calls\n",
                g_nranks > 32 ? " ..." : "");
    }
    pc_print_sweep(f, &o->pc);
    library_string(lib, sizeof lib);
    fprintf(f, "# %s\n", lib);
    /* Every RING_* setting, so that a result file says how it was made; not what the launcher
     * sets per rank (who and where), nor the job's secret. */
    static const char *const ident[] = {"RING_RANK=",       "RING_NRANKS=",     "RING_ROOT=",
                                        "RING_LOCAL_RANK=", "RING_LOCAL_SIZE=", "RING_SECRET="};
    int any = 0;
    fprintf(f, "# env:");
    for (char **e = environ; *e; e++) {
        size_t k = 0;
        if (strncmp(*e, "RING_", 5)) continue;
        while (k < sizeof ident / sizeof *ident && strncmp(*e, ident[k], strlen(ident[k]))) k++;
        if (k < sizeof ident / sizeof *ident) continue;
        fprintf(f, " %s", *e);
        any = 1;
    }
    fprintf(f, "%s\n", any ? "" : " (no RING_* setting: library defaults)");
    if (g_nranks > 1) {
        fprintf(f, "# transport (rank 0's ring edges): from the left %s, to the right %s%s\n",
                ring__tp_of(g_comm->recv_left)->name, ring__tp_of(g_comm->send_right)->name,
                g_comm->all_shm ? " (every ring edge within one host)" : "");
        /* The links the collectives and the probes use: each rank sends to the next. */
        char order[256];
        fprintf(f, "# ring order: %s; each rank sends to the next, the probes measure these links\n",
                ring__topo_order_str(g_comm->peers, g_comm->order, g_nranks, order, sizeof order));
    }
    pc_print_date(f);
    pc_print_link(f, link);
    fprintf(f, "# time: median over iterations of the max over ranks; bytes = full buffer; busbw factor ");
    switch (o->coll) {
    case PC_COLL_ALLREDUCE: fprintf(f, "2(n-1)/n\n"); break;
    case PC_COLL_REDUCE_SCATTER:
    case PC_COLL_ALLGATHER: fprintf(f, "(n-1)/n\n"); break;
    case PC_COLL_BROADCAST: fprintf(f, "1\n"); break;
    default: fprintf(f, "0 (barrier)\n"); break;
    }
    if (o->pc.algos & PC_ALGO_BIT(PC_ALGO_RING)) {
        /* Which of the library's algorithms the rows can show, and each one's model. */
        const ring__params_t *p = &g_comm->params;
        int ring = 1, rd = 0, tree = 0, rh = 0;
        if (o->coll == PC_COLL_ALLREDUCE) {
            /* Where the shared-memory all-reduce takes the small sizes, auto runs recursive
             * doubling only below a RING_RD_MAX_BYTES that was set, and halving never. */
            const int sm_small = p->algo == RING__ALGO_AUTO && lib_algo(o->coll, 0) == PC_ALGO_SM;
            ring = p->algo == RING__ALGO_AUTO || p->algo == RING__ALGO_RING;
            rd = (p->algo == RING__ALGO_AUTO && !sm_small) || p->algo == RING__ALGO_RD;
            rh = (p->algo == RING__ALGO_AUTO && lib_algo(o->coll, ring__rh_max_bytes(g_comm)) == PC_ALGO_RH) ||
                 p->algo == RING__ALGO_RH;
        } else if (o->coll == PC_COLL_BARRIER) {
            /* One algorithm at every size: the shared page's rows take the ring's bound. */
            const pc_algo_t b = lib_algo(o->coll, 0);
            ring = b == PC_ALGO_RING || b == PC_ALGO_SM;
            rd = b == PC_ALGO_RD;
        } else if (o->coll == PC_COLL_BROADCAST) {
            /* The library's own choice at the smallest and the largest size: RING_ALGO=rh takes
             * the tree as rd does, sm the ring (the header named the other model for both). */
            tree = lib_algo(o->coll, 0) == PC_ALGO_TREE;
            ring = lib_algo(o->coll, SIZE_MAX) == PC_ALGO_RING;
        }
        const char *sm_why;
        const size_t sm_max = ring__sm_max_bytes(g_comm, &sm_why);
        char sm_upto[96];
        if (sm_max == SIZE_MAX) snprintf(sm_upto, sizeof sm_upto, "at every size");
        else snprintf(sm_upto, sizeof sm_upto, "up to %zu B, ring above", sm_max);
        if (o->coll == PC_COLL_ALLREDUCE && p->algo == RING__ALGO_AUTO && lib_algo(o->coll, 0) == PC_ALGO_SM)
            fprintf(f, "# library algorithm: sm (shared-memory all-reduce) %s (RING_ALGO, RING_SM_MAX_BYTES%s%s)\n", sm_upto,
                    *sm_why ? ": " : "", sm_why);
        else if (o->coll == PC_COLL_ALLREDUCE && p->algo == RING__ALGO_AUTO && lib_algo(o->coll, sm_max) == PC_ALGO_SM)
            fprintf(f, "# library algorithm: rd (recursive doubling) up to %zu B, sm (shared-memory all-reduce) %s "
                       "(RING_ALGO, RING_RD_MAX_BYTES, RING_SM_MAX_BYTES)\n",
                    ring__rd_max_bytes(g_comm), sm_upto);
        else if (o->coll == PC_COLL_ALLREDUCE && p->algo == RING__ALGO_AUTO)
            fprintf(f, "# library algorithm: rd (recursive doubling) up to %zu B, rh (recursive halving) up to %zu B, ring above "
                       "(RING_ALGO, RING_RD_MAX_BYTES%s, RING_RH_MAX_BYTES%s)\n",
                    ring__rd_max_bytes(g_comm), ring__rh_max_bytes(g_comm),
                    p->rd_max_set ? "" : g_comm->nranks <= 2 ? ": default for 2 ranks" : ": default for 3+ ranks",
                    p->rh_max_set ? "" : g_comm->all_shm ? ": shared-memory default" : ": TCP default");
        if (o->coll == PC_COLL_BROADCAST && p->algo == RING__ALGO_AUTO && tree)
            fprintf(f, "# library algorithm: tree (binomial) up to %zu B, ring above (RING_ALGO, RING_TREE_MAX_BYTES)\n",
                    p->tree_max_bytes);
        if (ring)
            fprintf(f, "# model (ring%s): T = %s; eff = model/time\n",
                    lib_algo(o->coll, 0) == PC_ALGO_SM ? ", also on sm rows: the collective's bound with these alpha and B" : "",
                    pc_model_formula(o->coll, PC_ALGO_RING));
        if (rd) fprintf(f, "# model (rd): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_RD));
        if (rh) fprintf(f, "# model (rh): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_RH));
        if (tree) fprintf(f, "# model (tree): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_TREE));
    }
    if (o->pc.algos & PC_ALGO_BIT(PC_ALGO_PS))
        fprintf(f, "# model (ps): T = %s; eff = model/time\n", pc_model_formula(o->coll, PC_ALGO_PS));
    if (o->pc.fmt == PC_FMT_JSON) {
        pc_meta_t m = {.program = "ring_perf",
                       .collective = pc_coll_name(o->coll),
                       .algos = algos_name(o->pc.algos),
                       .dtype = o->coll == PC_COLL_BARRIER ? "none" : pc_dtype_name(o->pc.dtype),
                       .op = (o->coll == PC_COLL_ALLREDUCE || o->coll == PC_COLL_REDUCE_SCATTER)
                                 ? pc_op_name(o->pc.op)
                                 : "none",
                       .mem = mem_name(o->pc.mem),
                       .gpu = o->pc.mem != PC_MEM_HOST ? g_gpu.desc : NULL,
                       .host = host,
                       .library = lib,
                       .nranks = g_nranks,
                       .root = o->coll == PC_COLL_BROADCAST ? o->root : -1,
                       .inplace = o->pc.inplace,
                       .async = o->async,
                       .check = o->pc.check,
                       .opts = &o->pc,
                       .link = link,
                       .argc = argc,
                       .argv = argv};
        pc_json_begin(&m);
    } else if (o->pc.fmt == PC_FMT_CSV) {
        if (o->pc.mem == PC_MEM_HOST) pc_print_columns(PC_FMT_CSV);
        else pc_print_columns_mem(PC_FMT_CSV);
    }
    fflush(f);
}

/* One table's sizes and busbw, for the -G both comparison. */
typedef struct {
    size_t *bytes;
    double *busbw;
    int n, cap;
} rows_t;

/* The state of one sweep that every table shares. */
typedef struct {
    const opts_t *o;
    const pc_link_t *link;
    pc_out_t *out;
    const pc_gen_t *gen;
    unsigned char *sbuf, *rbuf; /* what the calls get: host memory, or device memory */
    size_t sbytes, rbytes;      /* their sizes at the largest row; PC_GUARD_BYTES more follow */
    /* Host memory of the same sizes: sbuf and rbuf themselves, or for device buffers the
     * mirrors that check data is written into and results are read back into. */
    unsigned char *hs, *hr;
    int dev;         /* sbuf and rbuf are device memory */
    const char *mem; /* NULL (-G host: output as before), "host" or "cuda" */
    double *times;
    rows_t *rows; /* -G both: where this table's busbw goes; else NULL */
} sweep_t;

/* The host memory behind p, a pointer into sbuf or rbuf (or their guard spans): p itself, or
 * the same offset in the mirror. */
static unsigned char *host_of(const sweep_t *sw, const void *p)
{
    uintptr_t q = (uintptr_t)p, s = (uintptr_t)sw->sbuf;
    if (!sw->dev) return (unsigned char *)p;
    if (sw->sbuf && q >= s && q < s + sw->sbytes + PC_GUARD_BYTES) return sw->hs + (q - s);
    return sw->hr + (q - (uintptr_t)sw->rbuf);
}

/* Device buffers: bytes at p from the mirror to the device, or back. Only around the checked
 * call, never in the timed loop, so device and host rows time the same calls. */
static void to_dev(const sweep_t *sw, void *p, size_t bytes)
{
    if (sw->dev && bytes) gpu_copy(p, host_of(sw, p), bytes);
}

static void from_dev(const sweep_t *sw, const void *p, size_t bytes)
{
    if (sw->dev && bytes) gpu_copy(host_of(sw, p), p, bytes);
}

/* Before the checked call: preset the guard span after the first `used` bytes of buf (none
 * where the call does not use buf), keeping what it held. */
static void guard_set(const sweep_t *sw, guard_t *g, unsigned char *buf, size_t used, const char *name)
{
    g->at = used ? buf + used : NULL;
    g->name = name;
    g->used = used;
    if (!g->at) return;
    unsigned char *h = host_of(sw, g->at);
    from_dev(sw, g->at, PC_GUARD_BYTES);
    memcpy(g->saved, h, PC_GUARD_BYTES);
    pc_guard_fill(h, PC_GUARD_BYTES);
    to_dev(sw, g->at, PC_GUARD_BYTES);
}

/* After it: the elements of the span that the call wrote. The span then gets its bytes back,
 * so that the timed calls of the larger sizes reduce the data they would have without checks. */
static long long guard_check(const sweep_t *sw, guard_t *g, size_t esize, size_t *reported, const char *what,
                             size_t bytes)
{
    if (!g->at) return 0;
    unsigned char *h = host_of(sw, g->at);
    size_t first;
    from_dev(sw, g->at, PC_GUARD_BYTES);
    size_t bad = pc_guard_count(h, PC_GUARD_BYTES, esize, &first);
    if (bad && *reported < 5) {
        fprintf(stderr,
                "ring_perf: rank %d: %s %zu B: the call wrote past the %zu bytes it uses of its %s buffer: %zu "
                "element%s changed in the %d bytes after them, the first byte changed at offset %zu\n",
                g_rank, what, bytes, g->used, g->name, bad, bad == 1 ? "" : "s", PC_GUARD_BYTES, g->used + first);
        (*reported)++;
    }
    memcpy(h, g->saved, PC_GUARD_BYTES);
    to_dev(sw, g->at, PC_GUARD_BYTES);
    return (long long)bad;
}

/* Initial data: the check pattern (valid for out-of-place allreduce/reduce_scatter at any
 * size), so that the timed calls reduce ordinary numbers; device buffers get a copy. */
static void init_data(const sweep_t *sw, size_t maxcount, size_t maxper)
{
    const opts_t *o = sw->o;
    const pc_dtype_t dt = o->pc.dtype;
    const size_t sz = pc_dtype_size(dt);
    if (o->coll == PC_COLL_ALLREDUCE || o->coll == PC_COLL_REDUCE_SCATTER)
        pc_fill(sw->hs, sw->sbytes / sz, dt, sw->gen, g_rank, 0);
    else if (o->coll == PC_COLL_BROADCAST) pc_fill(sw->hr, maxcount, dt, sw->gen, g_rank, 0);
    else if (o->coll == PC_COLL_ALLGATHER) {
        if (o->pc.inplace) pc_fill(sw->hr, maxper * (size_t)g_nranks, dt, sw->gen, g_rank, 0);
        else pc_fill(sw->hs, maxper, dt, sw->gen, g_rank, 0);
    }
    to_dev(sw, sw->sbuf, sw->sbytes);
    to_dev(sw, sw->rbuf, sw->rbytes);
}

static void rows_add(rows_t *t, size_t bytes, double busbw)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        size_t *b = realloc(t->bytes, sizeof *b * (size_t)cap);
        if (b) t->bytes = b;
        double *w = realloc(t->busbw, sizeof *w * (size_t)cap);
        if (w) t->busbw = w;
        if (!b || !w) die_msg("out of memory");
        t->cap = cap;
    }
    t->bytes[t->n] = bytes;
    t->busbw[t->n++] = busbw;
}

/* One table: every size for one algorithm. Returns the number of wrong elements. */
static long long sweep(const sweep_t *sw, pc_algo_t algo)
{
    const opts_t *o = sw->o;
    const int n = g_nranks, is_root = g_rank == 0;
    const pc_dtype_t dt = o->pc.dtype;
    const size_t sz = pc_dtype_size(dt);
    const ring_dtype_t rdt = ring_dtypes[dt];
    const ring_op_t rop = ring_ops[o->pc.op];
    const int has_op = o->coll == PC_COLL_ALLREDUCE || o->coll == PC_COLL_REDUCE_SCATTER;
    const int inplace = o->pc.inplace;
    const pc_gen_t *gen = sw->gen;
    unsigned char *sbuf = sw->sbuf, *rbuf = sw->rbuf;
    pc_row_t row = {.coll = pc_coll_name(o->coll),
                    .algo = pc_algo_name(algo),
                    .type = o->coll == PC_COLL_BARRIER ? "none" : pc_dtype_name(dt),
                    .redop = has_op ? pc_op_name(o->pc.op) : "none",
                    .nranks = n,
                    .root = o->coll == PC_COLL_BROADCAST ? o->root : -1,
                    .inplace = inplace,
                    .link = sw->link,
                    .mem = sw->mem};
    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;

    if (is_root && o->pc.fmt == PC_FMT_TABLE) {
        if (algo == PC_ALGO_PS)
            fprintf(stdout, "#\n# %s, parameter-server baseline: all to rank 0, reduce there, result back to all\n",
                    row.coll);
        else
            fprintf(stdout, "#\n# %s, ringcomm%s\n", row.coll,
                    !sw->mem ? "" : sw->dev ? ", device buffers (cuda)" : ", host buffers");
        pc_print_columns(PC_FMT_TABLE);
    }

    if (o->coll == PC_COLL_BARRIER) {
        call_t c = {PC_COLL_BARRIER, algo, 0, rdt, rop, sz, 0, o->async, NULL, NULL};
        const pc_algo_t ran = lib_algo(o->coll, 0);
        CALL("ring_barrier", ring_barrier(g_comm));
        row.us = timed_loop(&c, o->pc.warmup, o->pc.iters, sw->times);
        row.algo = pc_algo_name(ran);
        row.model_us = pc_model_us(o->coll, ran, n, 0, sw->link->alpha_s, sw->link->bw_Bps);
        row.wrong = -1;
        if (is_root) pc_print_row(sw->out, &row);
        rows = 1;
    } else {
        for (size_t size = o->pc.minb; size <= o->pc.maxb;) {
            /* Round down to what the count can express. */
            size_t count, bytes;
            if (o->coll == PC_COLL_REDUCE_SCATTER || o->coll == PC_COLL_ALLGATHER) {
                count = size / sz / (size_t)n;
                bytes = count * (size_t)n * sz;
            } else {
                count = size / sz;
                bytes = count * sz;
            }
            if (count > 0 && bytes != last_bytes) {
                last_bytes = bytes;
                call_t c = {o->coll, algo, count, rdt, rop, sz, o->root, o->async, NULL, NULL};
                switch (o->coll) {
                case PC_COLL_ALLREDUCE: c.send = sbuf; c.recv = inplace ? sbuf : rbuf; break;
                case PC_COLL_REDUCE_SCATTER:
                    c.send = sbuf;
                    c.recv = inplace ? sbuf + (size_t)g_rank * count * sz : rbuf;
                    break;
                case PC_COLL_ALLGATHER:
                    c.recv = rbuf;
                    c.send = inplace ? rbuf + (size_t)g_rank * count * sz : sbuf;
                    break;
                case PC_COLL_BROADCAST: c.recv = rbuf; break;
                default: break;
                }
                /* The library's rows: the algorithm it picks for this size, and that one's model. */
                const pc_algo_t ran = algo == PC_ALGO_PS ? PC_ALGO_PS : lib_algo(o->coll, bytes);
                CALL("ring_barrier", ring_barrier(g_comm));
                double us = timed_loop(&c, o->pc.warmup, o->pc.iters, sw->times);

                long long wrong = -1;
                if (o->pc.check) {
                    long long w = 0;
                    size_t reported = 0;
                    expect_t e = {dt, o->pc.op, gen, 1, 0};
                    char what[64];
                    snprintf(what, sizeof what, "%s (%s)", row.coll, pc_algo_name(ran));
                    /* The bytes of each buffer this call uses (from the buffer's start, as laid
                     * out above: in place, the receive block lies in the send buffer or the
                     * other way round), and the guard span after them. */
                    size_t s_used = 0, r_used = 0;
                    switch (o->coll) {
                    case PC_COLL_ALLREDUCE: s_used = count * sz; r_used = inplace ? 0 : count * sz; break;
                    case PC_COLL_REDUCE_SCATTER: s_used = count * n * sz; r_used = inplace ? 0 : count * sz; break;
                    case PC_COLL_ALLGATHER: s_used = inplace ? 0 : count * sz; r_used = count * n * sz; break;
                    case PC_COLL_BROADCAST: r_used = count * sz; break;
                    default: break;
                    }
                    guard_t guards[2];
                    guard_set(sw, &guards[0], sbuf, s_used, "send");
                    guard_set(sw, &guards[1], rbuf, r_used, "receive");
                    /* Fresh inputs; outputs preset to the complement of their expected values
                     * (preset_unlike). Written and read in host memory (host_of); device buffers
                     * are copied to before the call and back after it (to_dev, from_dev).
                     * Out of place, the send buffer must come back as it was filled. */
                    switch (o->coll) {
                    case PC_COLL_ALLREDUCE:
                        pc_fill(host_of(sw, sbuf), count, dt, gen, g_rank, 0);
                        to_dev(sw, sbuf, count * sz);
                        if (!inplace) {
                            preset_unlike(host_of(sw, rbuf), count, 0, &e);
                            to_dev(sw, rbuf, count * sz);
                        }
                        run_once(&c);
                        from_dev(sw, c.recv, count * sz);
                        w = check_range(host_of(sw, c.recv), count, 0, &e, &reported, what, bytes);
                        if (!inplace) {
                            from_dev(sw, sbuf, count * sz);
                            w += check_send(host_of(sw, sbuf), count, 0, &e, &reported, what, bytes);
                        }
                        break;
                    case PC_COLL_REDUCE_SCATTER:
                        pc_fill(host_of(sw, sbuf), count * n, dt, gen, g_rank, 0);
                        to_dev(sw, sbuf, count * n * sz);
                        if (!inplace) {
                            preset_unlike(host_of(sw, rbuf), count, (uint64_t)g_rank * count, &e);
                            to_dev(sw, rbuf, count * sz);
                        }
                        run_once(&c);
                        from_dev(sw, c.recv, count * sz);
                        w = check_range(host_of(sw, c.recv), count, (uint64_t)g_rank * count, &e, &reported, what,
                                        bytes);
                        if (!inplace) {
                            from_dev(sw, sbuf, count * n * sz);
                            w += check_send(host_of(sw, sbuf), count * n, 0, &e, &reported, what, bytes);
                        }
                        break;
                    case PC_COLL_ALLGATHER:
                        /* Rank q contributes val(q, q*count + j). */
                        e.reduce = 0;
                        for (int q = 0; q < n; q++) {
                            e.src = q;
                            preset_unlike(host_of(sw, rbuf) + (size_t)q * count * sz, count, (uint64_t)q * count, &e);
                        }
                        pc_fill(host_of(sw, c.send), count, dt, gen, g_rank, (uint64_t)g_rank * count);
                        to_dev(sw, rbuf, count * n * sz); /* in place: c.send's block too */
                        if (!inplace) to_dev(sw, (void *)c.send, count * sz);
                        run_once(&c);
                        from_dev(sw, rbuf, count * n * sz);
                        e.reduce = 0;
                        for (int q = 0; q < n; q++) {
                            e.src = q;
                            w += check_range(host_of(sw, rbuf) + (size_t)q * count * sz, count, (uint64_t)q * count,
                                             &e, &reported, what, bytes);
                        }
                        if (!inplace) {
                            from_dev(sw, c.send, count * sz);
                            w += check_send(host_of(sw, c.send), count, (uint64_t)g_rank * count, &e, &reported, what,
                                            bytes);
                        }
                        break;
                    case PC_COLL_BROADCAST:
                        e.reduce = 0;
                        e.src = o->root;
                        if (g_rank == o->root) pc_fill(host_of(sw, rbuf), count, dt, gen, g_rank, 0);
                        else preset_unlike(host_of(sw, rbuf), count, 0, &e);
                        to_dev(sw, rbuf, count * sz);
                        run_once(&c);
                        from_dev(sw, rbuf, count * sz);
                        w = check_range(host_of(sw, rbuf), count, 0, &e, &reported, what, bytes);
                        break;
                    default: break;
                    }
                    for (int b = 0; b < 2; b++) w += guard_check(sw, &guards[b], sz, &reported, what, bytes);
                    int64_t w64 = w;
                    CALL("ring_allreduce (#wrong)", ring_allreduce(g_comm, &w64, &w64, 1, RING_INT64, RING_SUM));
                    wrong = (long long)w64;
                    wrong_total += wrong;
                }
                pc_row_measured(&row, o->coll, ran, bytes, count, us, wrong);
                row.algo = pc_algo_name(ran);
                if (is_root) pc_print_row(sw->out, &row);
                if (sw->rows) rows_add(sw->rows, bytes, row.busbw);
                bw_sum += row.busbw;
                rows++;
            }
            if (!pc_next_size(&size, o->pc.factor, o->pc.incr)) break;
        }
    }
    if (is_root) {
        /* The footer names its table where there are several: the algorithm, the memory. */
        char label[32] = "";
        if (o->pc.algos != PC_ALGO_BIT(algo)) snprintf(label, sizeof label, "%s", pc_algo_name(algo));
        if (sw->mem)
            snprintf(label + strlen(label), sizeof label - strlen(label), "%s%s", *label ? ", " : "", sw->mem);
        pc_print_footer(g_info, *label ? label : NULL, o->pc.check, wrong_total, bw_sum, rows);
    }
    return wrong_total;
}

/* -G both: busbw of each size on device buffers against host buffers, the same sizes in the
 * same run (rank 0). */
static void print_comparison(const rows_t *h, const rows_t *d)
{
    FILE *f = g_info;
    fprintf(f, "#\n# busbw on device buffers against host buffers, same run\n");
    fprintf(f, "# %10s  %10s  %10s  %9s\n", "size", "host", "cuda", "cuda/host");
    fprintf(f, "# %10s  %10s  %10s  %9s\n", "(B)", "(GB/s)", "(GB/s)", "");
    for (int k = 0; k < h->n && k < d->n; k++) {
        char ratio[32] = "-";
        if (h->busbw[k] > 0) snprintf(ratio, sizeof ratio, "%.2f", d->busbw[k] / h->busbw[k]);
        fprintf(f, "# %10zu  %10.3f  %10.3f  %9s\n", h->bytes[k], h->busbw[k], d->busbw[k], ratio);
    }
    int k = (h->n < d->n ? h->n : d->n) - 1;
    if (k >= 0 && h->busbw[k] > 0)
        fprintf(f, "# cuda/host busbw at the largest size (%zu B): %.2f\n", h->bytes[k], d->busbw[k] / h->busbw[k]);
    fprintf(f, "#\n");
    fflush(f);
}

int main(int argc, char **argv)
{
    opts_t o = {.coll = PC_COLL_ALLREDUCE, .root = 0, .async = 0};
    pc_opts_init(&o.pc, 1, PC_OP_COUNT);
    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT, PC_LONGOPTS_PROBE,
                                             {"help", no_argument, NULL, 'h'},
                                             {"emulate-gpu", no_argument, NULL, OPT_EMULATE_GPU},
                                             {NULL, 0, NULL, 0}};
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "C:A:G:b:e:f:i:n:w:c:d:o:r:I:a:R:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'C':
            if (pc_parse_coll(optarg, &o.coll)) bad_arg(argv[0], "unknown collective", optarg);
            break;
        case 'a': if (pc_parse_int(optarg, 0, 1, &o.async)) bad_arg(argv[0], "-a needs 0 or 1", optarg); break;
        case 'R': if (pc_parse_int(optarg, 0, 1, &o.reg)) bad_arg(argv[0], "-R needs 0 or 1", optarg); break;
        case 'r': if (pc_parse_int(optarg, 0, 1 << 20, &o.root)) bad_arg(argv[0], "bad root for -r", optarg); break;
        case 'h': usage(stdout, argv[0]); return 0;
        case OPT_EMULATE_GPU: o.emulate = 1; break;
        default:
            switch (pc_parse_opt(&o.pc, ch, optarg, &err)) {
            case 1: break;
            case -1: bad_arg(argv[0], err, optarg); break;
            default: usage(stderr, argv[0]); return 2;
            }
        }
    }
    if (optind < argc) bad_arg(argv[0], "unexpected argument", argv[optind]);
    if (o.pc.minb > o.pc.maxb) {
        fprintf(stderr, "ring_perf: -b %zu is larger than -e %zu\n", o.pc.minb, o.pc.maxb);
        return 2;
    }
    if ((o.pc.algos & PC_ALGO_BIT(PC_ALGO_PS)) && o.coll != PC_COLL_ALLREDUCE)
        bad_combination("-A ps/both: the parameter-server baseline is an allreduce (use -C allreduce)");
    const int use_dev = o.pc.mem != PC_MEM_HOST;
    if (use_dev) {
        if (o.coll == PC_COLL_BARRIER) bad_combination("-G cuda/both: the barrier has no buffers (use -G host)");
        if (o.pc.algos & PC_ALGO_BIT(PC_ALGO_PS))
            bad_combination("-G cuda/both with -A ps/both: the parameter-server baseline reduces on the host and "
                            "cannot read device buffers (use -A ring)");
        /* ring_comm_register takes any pointer, but the device path never sends from or into
         * the user's buffer (it goes through the library's own pinned or GPUDirect slots): a
         * registered row would measure nothing different, or fail in ibv_reg_mr. */
        if (o.reg)
            bad_combination("-G cuda/both with -R 1: device buffers go through the library's own slots (pinned "
                            "host memory, or registered device memory with GPUDirect RDMA: docs/rdma.md), so "
                            "registering them has no effect");
        g_gpu.opt = o.pc.mem == PC_MEM_BOTH ? "-G both" : "-G cuda";
        if (o.emulate) gpu_emulate(); /* before anything in the process touches CUDA */
    } else if (o.emulate) {
        bad_combination("--emulate-gpu emulates the device buffers of -G cuda or -G both");
    }

    ring_result_t r = ring_comm_init_env(&g_comm);
    if (r != RING_OK) {
        fprintf(stderr, "ring_perf: ring_comm_init_env failed: %s (%s): %s\n", ring_strerror(r), ring_result_name(r),
                ring_comm_last_error(g_comm ? g_comm : NULL));
        ring_comm_destroy(g_comm);
        return 2;
    }
    g_rank = ring_comm_rank(g_comm);
    g_nranks = ring_comm_nranks(g_comm);
    const int n = g_nranks;
    if (o.coll == PC_COLL_BROADCAST && o.root >= n) {
        if (g_rank == 0) fprintf(stderr, "ring_perf: -r %d: root must be < nranks (%d)\n", o.root, n);
        ring_comm_destroy(g_comm);
        return 2;
    }
    if (o.coll != PC_COLL_BARRIER) no_rows_exit(&o);
    if (use_dev) gpu_setup(); /* every rank has a GPU, or all skip */
    const pc_dtype_t dt = o.pc.dtype;
    /* allgather/broadcast only copy: their data is the [-100, 100] range. */
    const int kind = (o.coll == PC_COLL_ALLGATHER || o.coll == PC_COLL_BROADCAST) ? PC_GEN_RANGE : pc_gen_kind(o.pc.op);
    const pc_gen_t gen = pc_gen(kind, dt, n);

    const int is_root = g_rank == 0;
    g_info = o.pc.fmt == PC_FMT_TABLE ? stdout : stderr;
    const size_t sz = pc_dtype_size(dt);
    const int inplace = o.pc.inplace;

    /* Buffers, once, at the largest size. */
    size_t maxcount = o.pc.maxb / sz;          /* elements in the full buffer */
    size_t maxper = maxcount / (size_t)n;      /* per-rank elements (reduce_scatter/allgather) */
    size_t send_bytes = 0, recv_bytes = 0;
    switch (o.coll) {
    case PC_COLL_ALLREDUCE: send_bytes = maxcount * sz; recv_bytes = inplace ? 0 : maxcount * sz; break;
    case PC_COLL_REDUCE_SCATTER: send_bytes = maxper * n * sz; recv_bytes = inplace ? 0 : maxper * sz; break;
    case PC_COLL_ALLGATHER: send_bytes = inplace ? 0 : maxper * sz; recv_bytes = maxper * n * sz; break;
    case PC_COLL_BROADCAST: recv_bytes = maxcount * sz; break;
    default: break;
    }

    /* Probes and connections before any buffer of the sweep exists: they use memory of their own. */
    const pc_link_t link = model_params(&o.pc);
    if (o.pc.algos & PC_ALGO_BIT(PC_ALGO_PS)) ps_setup(maxcount * sz);

    if (is_root) print_header(argc, argv, &o, &link);
    if (is_root && pc_gen_inexact(&gen, dt, n))
        fprintf(g_info, "# warning: %d ranks are too many for exact %s sums; checks may report errors\n", n,
                pc_dtype_name(dt));

    /* Host buffers always: the host sweep's, and the device buffers' mirrors. */
    /* Each with its guard span after it, which the largest row checks too. */
    unsigned char *sbuf = alloc_buf(with_guard(send_bytes)), *rbuf = alloc_buf(with_guard(recv_bytes));
    unsigned char *dsbuf = use_dev ? gpu_alloc(0, with_guard(send_bytes)) : NULL;
    unsigned char *drbuf = use_dev ? gpu_alloc(1, with_guard(recv_bytes)) : NULL;
    double *times = malloc(sizeof(double) * (size_t)o.pc.iters);
    if (!times) die_msg("out of memory");
    ring_reg_t *regs[2] = {NULL, NULL};
    for (int i = 0; i < 2 && o.reg; i++) {
        void *b = i ? (void *)rbuf : (void *)sbuf;
        size_t nb = i ? recv_bytes : send_bytes;
        if (!b || !nb) continue;
        r = ring_comm_register(g_comm, b, nb, &regs[i]);
        if (r != RING_OK) {
            fprintf(stderr, "ring_perf: rank %d: ring_comm_register failed: %s (%s): %s\n", g_rank, ring_strerror(r),
                    ring_result_name(r), ring_comm_last_error(g_comm));
            return 2;
        }
    }
    /* The sweep on host buffers (-G host|both), then on device buffers (-G cuda|both) with the
     * host buffers as their mirrors. */
    pc_out_t out = {o.pc.fmt, 0};
    rows_t rows[2] = {{0}};
    long long wrong_total = 0;
    for (int d = 0; d < 2; d++) {
        if ((d == 0 && o.pc.mem == PC_MEM_CUDA) || (d == 1 && !use_dev)) continue;
        sweep_t sw = {.o = &o,
                      .link = &link,
                      .out = &out,
                      .gen = &gen,
                      .sbuf = d ? dsbuf : sbuf,
                      .rbuf = d ? drbuf : rbuf,
                      .sbytes = send_bytes,
                      .rbytes = recv_bytes,
                      .hs = sbuf,
                      .hr = rbuf,
                      .dev = d,
                      .mem = !use_dev ? NULL : d ? "cuda" : "host",
                      .times = times,
                      .rows = o.pc.mem == PC_MEM_BOTH ? &rows[d] : NULL};
        init_data(&sw, maxcount, maxper);
        for (int a = 0; a < PC_ALGO_COUNT; a++)
            if (o.pc.algos & PC_ALGO_BIT(a)) wrong_total += sweep(&sw, (pc_algo_t)a);
    }
    if (is_root && o.pc.mem == PC_MEM_BOTH) print_comparison(&rows[0], &rows[1]);
#if RING_HAVE_CUDA
    /* Which way the device-buffer calls went: direct over CUDA IPC (every rank on one host,
     * src/cuda/direct.c), else staged through host memory or the ring's CUDA IPC links. */
    if (is_root && use_dev && o.pc.fmt != PC_FMT_JSON)
        fprintf(g_info, "# device-buffer calls that ran direct over CUDA IPC on rank 0: %llu (%llu worked by rank 0 alone)\n",
                (unsigned long long)ring__cuda_direct_count(g_comm),
                (unsigned long long)ring__cuda_direct_one_count(g_comm));
#endif
    if (is_root && o.pc.fmt == PC_FMT_JSON) pc_json_end(wrong_total, o.pc.check);

    for (int i = 0; i < 2; i++)
        if (regs[i] && ring_comm_deregister(g_comm, regs[i]) != RING_OK)
            fprintf(stderr, "ring_perf: rank %d: ring_comm_deregister: %s\n", g_rank, ring_comm_last_error(g_comm));
    free(times);
    free(sbuf);
    free(rbuf);
    for (int d = 0; d < 2; d++) {
        free(rows[d].bytes);
        free(rows[d].busbw);
    }
    if (use_dev) gpu_free();
    ps_free();
    r = ring_comm_destroy(g_comm);
    if (r != RING_OK) {
        fprintf(stderr, "ring_perf: rank %d: ring_comm_destroy failed: %s (%s)\n", g_rank, ring_strerror(r),
                ring_result_name(r));
        return 2;
    }
    return wrong_total ? 1 : 0;
}
