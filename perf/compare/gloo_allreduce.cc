/*
 * gloo_allreduce: the ring_perf allreduce measurement, done with Gloo (Debian's libgloo-dev,
 * the CPU backend of PyTorch's distributed package), so that its table compares line by line
 * with ring_perf's and mpi_allreduce's (same sizes, rounding, timing rule, row format, busbw =
 * algbw * 2(n-1)/n). C++ only because Gloo is a C++ library; it uses nothing of ringcomm.
 *
 *   ringrun -n 4 -- build/perf/gloo_allreduce --store DIR -b 4 -e 64M -f 2 -d float
 *
 * Each call is made as PyTorch's ProcessGroupGloo makes a dense CPU all-reduce: a fresh
 * gloo::AllreduceOptions on the context, the buffers, the reduce function and a new tag, then
 * gloo::allreduce(), whose default algorithm is Gloo's ring (reduce-scatter then all-gather in
 * segments of up to 1 MiB, two in flight); -A bcube picks Gloo's other algorithm.
 *
 * Ranks: RING_RANK / RING_NRANKS (ringrun, perf/netns/bed.sh), else RANK / WORLD_SIZE
 * (torchrun). Rendezvous: Gloo's FileStore in --store DIR, a directory every rank sees and no
 * earlier run used (the keys stay there). Interface: GLOO_SOCKET_IFNAME (PyTorch's name), else
 * RING_SOCKET_IFNAME (the bed sets it), else lo; IPv4.
 *
 * The measurement, the check and the output are baseline.c's, shared with mpi_allreduce (the
 * median over iterations of the max over ranks; -c 1 checks against exact values on every rank).
 * A Gloo exception (a peer gone, a timeout) ends the rank with exit status 2 and its text.
 */
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <getopt.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "baseline.h"

namespace {

/* The rank's Gloo state, behind pc_baseline_t.ctx: the context, the next tag (every collective
 * on a context takes a new one, as in ProcessGroupGloo), and what the sweep's all-reduces use. */
struct Sweep {
    int rank = 0, nranks = 1;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    uint32_t tag = 0;
    pc_dtype_t type = PC_FLOAT32;
    gloo::AllreduceOptions::Func fn;
    gloo::AllreduceOptions::Algorithm algo = gloo::AllreduceOptions::Algorithm::RING;
};

/* The check's expected values wrap through uint64 for integers (perf_common): the integer
 * reductions compute in the unsigned type of the same width, where wrapping is defined. */
template <typename T> struct Wrap { using U = T; };
template <> struct Wrap<int8_t> { using U = uint8_t; };
template <> struct Wrap<int32_t> { using U = uint32_t; };
template <> struct Wrap<int64_t> { using U = uint64_t; };

template <typename T> void red_sum(void *o, const void *a, const void *b, size_t n)
{
    using U = typename Wrap<T>::U;
    T *d = static_cast<T *>(o);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++) d[i] = (T)(U)((U)x[i] + (U)y[i]);
}

template <typename T> void red_prod(void *o, const void *a, const void *b, size_t n)
{
    using U = typename Wrap<T>::U;
    T *d = static_cast<T *>(o);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++) d[i] = (T)(U)((U)x[i] * (U)y[i]);
}

template <typename T> void red_min(void *o, const void *a, const void *b, size_t n)
{
    T *d = static_cast<T *>(o);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++) d[i] = y[i] < x[i] ? y[i] : x[i];
}

template <typename T> void red_max(void *o, const void *a, const void *b, size_t n)
{
    T *d = static_cast<T *>(o);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++) d[i] = y[i] > x[i] ? y[i] : x[i];
}

template <typename T> gloo::AllreduceOptions::Func pick(pc_op_t op)
{
    switch (op) {
    case PC_SUM: return red_sum<T>;
    case PC_PROD: return red_prod<T>;
    case PC_MIN: return red_min<T>;
    default: return red_max<T>;
    }
}

gloo::AllreduceOptions::Func reduce_fn(pc_dtype_t t, pc_op_t op)
{
    switch (t) {
    case PC_INT8: return pick<int8_t>(op);
    case PC_UINT8: return pick<uint8_t>(op);
    case PC_INT32: return pick<int32_t>(op);
    case PC_UINT32: return pick<uint32_t>(op);
    case PC_INT64: return pick<int64_t>(op);
    case PC_UINT64: return pick<uint64_t>(op);
    case PC_FLOAT32: return pick<float>(op);
    default: return pick<double>(op);
    }
}

/* One all-reduce of count elements of type T; in place when s is NULL. Typed, as Gloo cuts its
 * segments at whole elements of the size the buffers were given with. */
template <typename T>
void call_t(Sweep &w, const void *s, void *r, size_t count, const gloo::AllreduceOptions::Func &fn,
            gloo::AllreduceOptions::Algorithm algo)
{
    gloo::AllreduceOptions opts(w.ctx);
    if (s) opts.setInput<T>(static_cast<T *>(const_cast<void *>(s)), count);
    opts.setOutput<T>(static_cast<T *>(r), count);
    opts.setReduceFunction(fn);
    opts.setAlgorithm(algo);
    opts.setTag(w.tag++);
    gloo::allreduce(opts);
}

/* The callbacks of baseline.c, which is C: a C++ exception must not unwind through its frames,
 * so each one ends the process on an exception instead (as MPI_Abort does for mpi_allreduce). */
[[noreturn]] void fail(const Sweep &w, const std::exception &e)
{
    fprintf(stderr, "gloo_allreduce: rank %d: %s\n", w.rank, e.what());
    fflush(stdout);
    _exit(2);
}

extern "C" void cb_allreduce(void *ctx, const void *s, void *r, size_t count)
{
    Sweep &w = *static_cast<Sweep *>(ctx);
    try {
        switch (w.type) {
        case PC_INT8: call_t<int8_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_UINT8: call_t<uint8_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_INT32: call_t<int32_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_UINT32: call_t<uint32_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_INT64: call_t<int64_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_UINT64: call_t<uint64_t>(w, s, r, count, w.fn, w.algo); break;
        case PC_FLOAT32: call_t<float>(w, s, r, count, w.fn, w.algo); break;
        default: call_t<double>(w, s, r, count, w.fn, w.algo); break;
        }
    } catch (const std::exception &e) {
        fail(w, e);
    }
}

void barrier(Sweep &w)
{
    gloo::BarrierOptions opts(w.ctx);
    opts.setTag(w.tag++);
    gloo::barrier(opts);
}

extern "C" void cb_barrier(void *ctx)
{
    Sweep &w = *static_cast<Sweep *>(ctx);
    try {
        barrier(w);
    } catch (const std::exception &e) {
        fail(w, e);
    }
}

extern "C" void cb_max_doubles(void *ctx, double *v, int n)
{
    Sweep &w = *static_cast<Sweep *>(ctx);
    try {
        call_t<double>(w, nullptr, v, (size_t)n, red_max<double>, gloo::AllreduceOptions::Algorithm::RING);
    } catch (const std::exception &e) {
        fail(w, e);
    }
}

extern "C" long long cb_sum_ll(void *ctx, long long v)
{
    Sweep &w = *static_cast<Sweep *>(ctx);
    int64_t x = v;
    try {
        call_t<int64_t>(w, nullptr, &x, 1, red_sum<int64_t>, gloo::AllreduceOptions::Algorithm::RING);
    } catch (const std::exception &e) {
        fail(w, e);
    }
    return x;
}

extern "C" void cb_die(void *)
{
    fflush(stdout);
    _exit(2);
}

void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: ringrun -n N -- %s --store DIR [options]\n"
            "  --store DIR  rendezvous directory (Gloo FileStore): seen by every rank, unused by earlier runs\n"
            "  -A ring|bcube  Gloo's all-reduce algorithm (default ring, as PyTorch's default)\n"
            PC_USAGE_SWEEP
            "  -d dtype   int8 uint8 int32 uint32 int64 uint64 float|float32 double|float64 (default float)\n"
            "  -o op      sum prod min max (default sum)\n"
            "  -I 0|1     in-place (default 0)\n"
            PC_USAGE_OUTPUT
            "  -h         this help\n"
            "Ranks from RING_RANK/RING_NRANKS (ringrun) or RANK/WORLD_SIZE; interface from\n"
            "GLOO_SOCKET_IFNAME, else RING_SOCKET_IFNAME, else lo.\n",
            argv0);
}

[[noreturn]] void bad_arg(int rank, const char *argv0, const char *msg, const char *val)
{
    if (rank == 0) {
        if (val) fprintf(stderr, "gloo_allreduce: %s: '%s'\n", msg, val);
        else fprintf(stderr, "gloo_allreduce: %s\n", msg);
        usage(stderr, argv0);
    }
    exit(2);
}

int env_int(const char *a, const char *b, int lo, int *out)
{
    const char *s = getenv(a);
    if (!s) s = getenv(b);
    if (!s) return 0;
    return pc_parse_int(s, lo, 1 << 20, out) == 0 ? 1 : -1;
}

int run(Sweep &w, int argc, char **argv)
{
    pc_opts_t o;
    pc_opts_init(&o, 0, PC_AVG); /* no fp16/bf16, no avg: as mpi_allreduce */

    if (env_int("RING_RANK", "RANK", 0, &w.rank) != 1 || env_int("RING_NRANKS", "WORLD_SIZE", 1, &w.nranks) != 1 ||
        w.rank >= w.nranks) {
        fprintf(stderr, "gloo_allreduce: needs RING_RANK and RING_NRANKS (ringrun) or RANK and WORLD_SIZE, "
                        "0 <= rank < nranks\n");
        return 2;
    }

    enum { OPT_STORE = 300 };
    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT,
                                             {"store", required_argument, nullptr, OPT_STORE},
                                             {"help", no_argument, nullptr, 'h'},
                                             {nullptr, 0, nullptr, 0}};
    const char *store = nullptr;
    auto algo = gloo::AllreduceOptions::Algorithm::RING;
    const char *algo_name = "ring";
    int ch;
    const char *err;
    while ((ch = getopt_long(argc, argv, "A:b:e:f:i:n:w:c:d:o:I:h", longopts, nullptr)) != -1) {
        if (ch == 'h') {
            if (w.rank == 0) usage(stdout, argv[0]);
            return 0;
        }
        if (ch == OPT_STORE) {
            store = optarg;
            continue;
        }
        if (ch == 'A') {
            if (!strcmp(optarg, "ring")) algo = gloo::AllreduceOptions::Algorithm::RING;
            else if (!strcmp(optarg, "bcube")) algo = gloo::AllreduceOptions::Algorithm::BCUBE;
            else bad_arg(w.rank, argv[0], "-A takes ring or bcube", optarg);
            algo_name = optarg;
            continue;
        }
        switch (pc_parse_opt(&o, ch, optarg, &err)) {
        case 1: break;
        case -1: bad_arg(w.rank, argv[0], err, optarg);
        default:
            if (w.rank == 0) usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc) bad_arg(w.rank, argv[0], "unexpected argument", argv[optind]);
    if (!store) bad_arg(w.rank, argv[0], "--store DIR is required", nullptr);
    if (o.minb > o.maxb) bad_arg(w.rank, argv[0], "-b is larger than -e", nullptr);

    const char *ifname = getenv("GLOO_SOCKET_IFNAME");
    if (!ifname || !*ifname) ifname = getenv("RING_SOCKET_IFNAME");
    if (!ifname || !*ifname) ifname = "lo";
    gloo::transport::tcp::attr attr;
    attr.iface = ifname;
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore fs(store);
    w.ctx = std::make_shared<gloo::rendezvous::Context>(w.rank, w.nranks);
    /* Large sizes on the 1 Gbit/s bed take seconds per call; Gloo's default is 30 s. */
    w.ctx->setTimeout(std::chrono::seconds(300));
    w.ctx->connectFullMesh(fs, dev);

    w.type = o.dtype;
    w.fn = reduce_fn(o.dtype, o.op);
    w.algo = algo;
    const std::string lib = std::string("Gloo (Debian libgloo 0.0~git20220518), TCP on ") + ifname + ", algorithm " +
                            algo_name;
    const std::string title = std::string("gloo::allreduce (") + algo_name + ")";
    static const char *const env[] = {"GLOO_SOCKET_IFNAME", nullptr};
    pc_baseline_t b = {};
    b.program = "gloo_allreduce";
    b.library = lib.c_str();
    b.title = title.c_str();
    b.algo = "gloo";
    b.env = env;
    b.rank = w.rank;
    b.nranks = w.nranks;
    b.ctx = &w;
    b.allreduce = cb_allreduce;
    b.barrier = cb_barrier;
    b.max_doubles = cb_max_doubles;
    b.sum_ll = cb_sum_ll;
    b.die = cb_die;
    int rc = pc_baseline_run(&b, &o, argc, argv);
    /* Gloo closes a pair when its peer's process ends: a last barrier keeps a fast rank from
     * leaving while a slow one still reads its final result. */
    barrier(w);
    w.ctx.reset();
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    Sweep w;
    try {
        return run(w, argc, argv);
    } catch (const std::exception &e) {
        fprintf(stderr, "gloo_allreduce: rank %d: %s\n", w.rank, e.what());
        return 2;
    }
}
