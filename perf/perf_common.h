/*
 * perf_common: the parts of ring_perf and compare/mpi_allreduce that depend neither on ringcomm
 * nor on MPI: option parsing (sizes with K/M/G suffixes, dtype/op names, the model and output
 * options), check data (input generation, exact expected values, element comparison; fp16/bf16
 * conversions), the bus-bandwidth factors and the alpha-beta model, timing statistics and the
 * table/CSV/JSON output, so that both programs measure and print the same way and the
 * arithmetic can be unit-tested without a network (tests/test_perf.c).
 */
#ifndef RINGCOMM_PERF_COMMON_H
#define RINGCOMM_PERF_COMMON_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* compare/gloo_allreduce.cc is C++ (Gloo is a C++ library). */
#ifdef __cplusplus
extern "C" {
#endif

/* Element types and reductions, in the order of ring_dtype_t / ring_op_t. */
typedef enum {
    PC_INT8,
    PC_UINT8,
    PC_INT32,
    PC_UINT32,
    PC_INT64,
    PC_UINT64,
    PC_FLOAT16,
    PC_BFLOAT16,
    PC_FLOAT32,
    PC_FLOAT64,
    PC_DTYPE_COUNT
} pc_dtype_t;

typedef enum { PC_SUM, PC_PROD, PC_MIN, PC_MAX, PC_AVG, PC_OP_COUNT } pc_op_t;

const char *pc_dtype_name(pc_dtype_t dt); /* display name: "half", "bfloat16", "float", ... */
size_t pc_dtype_size(pc_dtype_t dt);
const char *pc_op_name(pc_op_t op);

/* ---- options ---------------------------------------------------------------------------- */

/* Sizes: decimal with an optional K/M/G/T suffix (powers of 1024), optionally "i" and/or "B". */
int pc_parse_size(const char *s, size_t *out);
int pc_parse_int(const char *s, int lo, int hi, int *out);

/* Floating-point option value in [lo, hi] (finite, no trailing characters). */
int pc_parse_double(const char *s, double lo, double hi, double *out);

typedef enum { PC_FMT_TABLE, PC_FMT_CSV, PC_FMT_JSON } pc_fmt_t;

/* Where the buffers live (-G): host memory, CUDA device memory, or one sweep on each. */
typedef enum { PC_MEM_HOST, PC_MEM_CUDA, PC_MEM_BOTH } pc_mem_t;

/* Algorithms: -A picks the library (PC_ALGO_RING; it runs the ring, or recursive doubling for
 * small allreduces and the barrier, and rows say which) and/or the parameter-server baseline of
 * ring_perf (everyone sends to rank 0, rank 0 reduces and sends the result back). */
typedef enum { PC_ALGO_RING, PC_ALGO_PS, PC_ALGO_RD, PC_ALGO_TREE, PC_ALGO_RH, PC_ALGO_SM, PC_ALGO_COUNT } pc_algo_t;
#define PC_ALGO_BIT(a) (1u << (a))

/* The options both programs share (-b -e -f -i -n -w -c -I -d -o --csv --json --alpha-us
 * --link-gbps), and those only ring_perf passes on (-A -G --no-probe --probe-bytes). */
typedef struct {
    size_t minb, maxb;
    size_t factor; /* 0: use incr */
    size_t incr;
    int iters, warmup, check, inplace;
    pc_fmt_t fmt;
    pc_dtype_t dtype;
    pc_op_t op;
    int allow_16bit;    /* accept half/float16/fp16/bfloat16/bf16 for -d */
    int nops;           /* -o accepts the first nops of pc_op_t */
    double alpha_us;    /* --alpha-us; < 0: not given */
    double link_gbps;   /* --link-gbps, Gbit/s as NICs are rated; < 0: not given */
    int probe;          /* measure alpha and the link before the sweep; 0 after --no-probe */
    size_t probe_bytes; /* --probe-bytes: bytes each rank streams in the link probe */
    unsigned algos;     /* -A: PC_ALGO_BIT()s, never 0 */
    pc_mem_t mem;       /* -G */
} pc_opts_t;

/* Usage lines of the sweep options (-b -e -f -i -n -w -c). */
#define PC_USAGE_SWEEP                                                                             \
    "  -b bytes   minimum size (default 4); K/M/G suffixes are powers of 1024\n"                   \
    "  -e bytes   maximum size (default 256M)\n"                                                   \
    "  -f factor  multiply the size by this between rows (default 2)\n"                            \
    "  -i bytes   add this to the size between rows (instead of -f)\n"                             \
    "  -n iters   timed iterations per size (default 20)\n"                                        \
    "  -w iters   warm-up iterations per size (default 5)\n"                                       \
    "  -c 0|1     check results (default 1)\n"

/* Usage lines of the output and model options both programs take. */
#define PC_USAGE_OUTPUT                                                                            \
    "  --csv      machine-readable rows on stdout (the # lines go to stderr)\n"                    \
    "  --json     one JSON object (metadata and rows) on stdout (the # lines go to stderr)\n"      \
    "  --alpha-us X     per-hop latency of the model columns, in microseconds\n"                   \
    "  --link-gbps Y    link bandwidth of the model columns, in Gbit/s (B = Y*1e9/8 bytes/s)\n"

/* The defaults: 4 .. 256M, factor 2, 20 iterations, 5 warm-up, check, float, sum, table, probe
 * 64 MiB, ring, host memory, no alpha/link given. */
void pc_opts_init(pc_opts_t *o, int allow_16bit, int nops);

/* getopt_long values of the long options (above any short option character). */
#define PC_OPT_CSV 'S'
enum { PC_OPT_JSON = 256, PC_OPT_ALPHA_US, PC_OPT_LINK_GBPS, PC_OPT_NO_PROBE, PC_OPT_PROBE_BYTES };

/* struct option entries for getopt_long: the ones both programs take, and the probe options. */
#define PC_LONGOPTS_OUTPUT                                                                         \
    {"csv", no_argument, NULL, PC_OPT_CSV}, {"json", no_argument, NULL, PC_OPT_JSON},               \
        {"alpha-us", required_argument, NULL, PC_OPT_ALPHA_US},                                    \
        {"link-gbps", required_argument, NULL, PC_OPT_LINK_GBPS}
#define PC_LONGOPTS_PROBE                                                                          \
    {"no-probe", no_argument, NULL, PC_OPT_NO_PROBE}, {"probe-bytes", required_argument, NULL, PC_OPT_PROBE_BYTES}

/*
 * Handle getopt character ch (with its optarg arg) if it is a shared option: returns 1 when it
 * was handled, 0 when ch is not a shared option, -1 when arg is invalid (*err is the message).
 * -A takes ring|ps|both, -G host|cuda|both (whether this build can run cuda is the caller's check).
 */
int pc_parse_opt(pc_opts_t *o, int ch, const char *arg, const char **err);

/* Next size of the sweep after *size; 0 when the sweep ends (overflow). */
int pc_next_size(size_t *size, size_t factor, size_t incr);

/* Rows of the sweep -b .. -e where sizes are rounded down to whole units of `unit` bytes (the
 * element size, times the ranks where the count is per rank: reduce_scatter, allgather), as
 * both programs walk it: sizes that round to zero, or to the previous row's, make no row. 0:
 * no size in the range holds one unit, and a run would print an empty table. */
size_t pc_sweep_rows(const pc_opts_t *o, size_t unit);

/* ---- collectives, bus bandwidth, the alpha-beta model ------------------------------------ */

typedef enum {
    PC_COLL_ALLREDUCE,
    PC_COLL_REDUCE_SCATTER,
    PC_COLL_ALLGATHER,
    PC_COLL_BROADCAST,
    PC_COLL_BARRIER,
    PC_COLL_COUNT
} pc_coll_t;

const char *pc_coll_name(pc_coll_t c); /* "allreduce", "reduce_scatter", ... */
/* The names above, and the aliases reducescatter, all_reduce, all_gather. */
int pc_parse_coll(const char *s, pc_coll_t *out);
const char *pc_algo_name(pc_algo_t a); /* "ring", "ps", "rd" */

/*
 * busbw = algbw * factor (nccl-tests): the fraction of the buffer that crosses the busiest
 * link, so that busbw of a bandwidth-optimal algorithm approaches the link bandwidth at every
 * rank count. allreduce 2(n-1)/n, reduce_scatter and allgather (n-1)/n, broadcast 1, barrier 0.
 * The parameter-server baseline uses the allreduce factor so that its table compares with the
 * ring's at equal bytes (its own busiest link carries 2(n-1) S, so its busbw falls with n).
 */
double pc_busbw_factor(pc_coll_t c, int nranks);

/*
 * Predicted time in microseconds of one call on S = bytes (the size column), n ranks, per-hop
 * latency alpha_s (seconds) and link bandwidth bw_Bps (bytes/s):
 *   allreduce ring          2(n-1) alpha + 2(n-1)/n S/B
 *   reduce_scatter, allgather (n-1) alpha +  (n-1)/n S/B
 *   broadcast               (n-1) alpha + S/B   (a chain of n-1 hops, pipelined in chunks: the
 *                                                fill of the pipeline is left out)
 *   barrier                 (n-1) alpha         (one token pass of n-1 dependent empty steps)
 *   allreduce ps            2(n-1) (alpha + S/B) (rank 0's link carries 2(n-1) S, one message
 *                                                after the other)
 *   allreduce rd            (log2 p + 2 [r > 0]) (alpha + S/B)   (recursive doubling: p the
 *                                                largest power of two <= n, r = n - p ranks fold
 *                                                into a partner before and get the result after)
 *   barrier rd              (log2 p + 2 [r > 0]) alpha
 * n <= 1: 0. Returns -1 when a parameter the formula needs is unknown (alpha_s < 0, or
 * bw_Bps <= 0 for anything but the barrier) or the algorithm does not run that collective.
 */
double pc_model_us(pc_coll_t c, pc_algo_t a, int nranks, size_t bytes, double alpha_s, double bw_Bps);
/* The formula above as text, for the header. */
const char *pc_model_formula(pc_coll_t c, pc_algo_t a);
/* eff = model / measured; -1 where it is undefined (no model, model 0 as at n = 1, us <= 0). */
double pc_eff(double model_us, double us);
/* Gbit/s (network rating) to bytes/s. */
double pc_gbps_to_Bps(double gbit_per_s);

/* ---- check data ------------------------------------------------------------------------- */

/*
 * Input element i of rank r is a small integer pc_val(g, r, i), exactly representable in every
 * dtype, chosen so the reduction over ranks is exact in every dtype:
 *   PC_GEN_SUM   (sum, avg):   [-amp, amp]; amp = 4 (less for bf16/fp16 with many ranks so that
 *                              |sum| <= 256 for bf16 and <= 2048 for fp16);
 *   PC_GEN_PROD  (prod):       -1 or 1, and 2 on ranks r == i (mod 8) (at most ceil(n/8) factors 2);
 *   PC_GEN_RANGE (min, max, and data that is only copied): [-100, 100].
 * Integers wrap through uint64 in the expected values.
 */
enum { PC_GEN_SUM, PC_GEN_PROD, PC_GEN_RANGE };

typedef struct {
    int kind; /* PC_GEN_* */
    int amp;  /* PC_GEN_SUM amplitude */
} pc_gen_t;

int pc_gen_kind(pc_op_t op);
/* A generator of the given kind, its amplitude fitted to dt and nranks. */
pc_gen_t pc_gen(int kind, pc_dtype_t dt, int nranks);
/* Whether nranks * amp exceeds what dt sums exactly (fp16/bf16 with very many ranks). */
int pc_gen_inexact(const pc_gen_t *g, pc_dtype_t dt, int nranks);

int pc_val(const pc_gen_t *g, int r, uint64_t i);
/* Store v (a small integer) as element k of buf. */
void pc_put(void *buf, size_t k, pc_dtype_t dt, int v);
/* buf[k] = pc_val(g, r, base + k) for k in [0, n). */
void pc_fill(void *buf, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base);
/* Expected element i of the reduction over nranks ranks, in dt's representation (<= 8 bytes). */
void pc_expect_reduce(void *out, pc_dtype_t dt, pc_op_t op, const pc_gen_t *g, int nranks, uint64_t i);
/* Element equality: bitwise for integers, numeric for floating types (NaN is never equal). */
int pc_same(const void *a, const void *b, pc_dtype_t dt);
/* Element as text. */
void pc_describe(char *s, size_t n, const void *p, pc_dtype_t dt);

/*
 * Output presets: out[k] = the bitwise complement of the element base + k that the check
 * expects there (the reduction over nranks ranks, or a copy of rank r's data), so that an
 * element the call never writes fails the check whatever its expected value: a preset of 0xff
 * bytes let every integer element whose result is -1 pass unwritten. The complement of a
 * floating-point value has the other sign (or is a NaN), so it never compares equal either.
 */
void pc_preset_unlike_reduce(void *out, size_t n, pc_dtype_t dt, pc_op_t op, const pc_gen_t *g, int nranks,
                             uint64_t base);
void pc_preset_unlike_copy(void *out, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base);

/* Elements of buf[0..n) that are not bit for bit what pc_fill(buf, n, dt, g, r, base) wrote (a
 * send buffer the call must leave alone; bitwise, as a -0.0 in place of 0 is a write too);
 * *first: the index of the first such element (n if none). */
size_t pc_count_changed(const void *buf, size_t n, pc_dtype_t dt, const pc_gen_t *g, int r, uint64_t base,
                        size_t *first);

/*
 * Guard spans: ring_perf allocates PC_GUARD_BYTES more than the largest size needs and, before
 * the checked call, presets the bytes right after the part of each buffer that the call uses
 * with this pattern; any of them changed afterwards is a write past the end of the buffer. No
 * element of the check data in any dtype matches the pattern, so a stray element of the call's
 * data differs from it.
 */
#define PC_GUARD_BYTES 4096
void pc_guard_fill(void *p, size_t n);
/* Elements of esize bytes in p[0..n) with any byte that differs from pc_guard_fill's pattern;
 * *first: the offset of the first differing byte (n if none). */
size_t pc_guard_count(const void *p, size_t n, size_t esize, size_t *first);

/* ---- timing and buffers ----------------------------------------------------------------- */

double pc_now_us(void); /* CLOCK_MONOTONIC */
/* Median of t[0..n) (sorts t). */
double pc_median(double *t, int n);
/* Page-aligned, zeroed (touched) buffer of at least one page; NULL on failure, *alloc the size tried. */
void *pc_alloc_buf(size_t bytes, size_t *alloc);

/* ---- output ----------------------------------------------------------------------------- */

/* The model parameters in use and where they came from. */
typedef struct {
    double alpha_s;      /* per-hop latency; < 0: unknown */
    double bw_Bps;       /* link bandwidth in bytes/s; <= 0: unknown */
    char alpha_src[96];  /* "ring token pass, median of 100", "--alpha-us", ... */
    char bw_src[96];
} pc_link_t;

/* Run metadata, for the JSON object. gpu: the device buffers' GPU, printed as "gpu" after
 * "memory" only when not NULL (host-only runs keep their keys). */
typedef struct {
    const char *program, *collective, *algos, *dtype, *op, *mem, *host, *library, *gpu;
    int nranks, root, inplace, async, check;
    const pc_opts_t *opts;
    const pc_link_t *link;
    int argc;
    char **argv;
} pc_meta_t;

/* One result row. */
typedef struct {
    const char *coll, *algo, *type, *redop;
    int nranks, root, inplace;
    size_t bytes, count;
    double us, algbw, busbw;
    long long wrong; /* -1: not checked */
    double model_us; /* < 0: no model */
    const pc_link_t *link;
    const char *mem; /* "host" or "cuda": a last CSV column / JSON key "mem"; NULL (host-only
                        runs, mpi_allreduce): not printed, so their format stays as it was */
} pc_row_t;

/* The measured fields of r for one size of collective c: bytes, count, us, algbw = bytes / us,
 * busbw = algbw * pc_busbw_factor(c, r->nranks), wrong, and model_us, the model of algorithm a
 * on r->link (which must be set). The rest of r (names, ranks, link) stays as the caller set it. */
void pc_row_measured(pc_row_t *r, pc_coll_t c, pc_algo_t a, size_t bytes, size_t count, double us, long long wrong);

/* Output state: the format, and rows printed so far (JSON separators). */
typedef struct {
    pc_fmt_t fmt;
    int rows;
} pc_out_t;

/* "# prog: argv..." */
void pc_print_cmdline(FILE *f, const char *prog, int argc, char **argv);
/* "# minBytes ...  step ...  warmup iters ...  iters ..." */
void pc_print_sweep(FILE *f, const pc_opts_t *o);
/* Local time as "2026-11-21 10:00:00 +0100". */
void pc_date_string(char *s, size_t n);
/* "# date ..." */
void pc_print_date(FILE *f);
/* "# alpha 23.4 us (...)  link 2.31 GB/s = 18.5 Gbit/s (...)" */
void pc_print_link(FILE *f, const pc_link_t *l);
/* The CSV header or the table header, on stdout; nothing for JSON. */
void pc_print_columns(pc_fmt_t fmt);
/* The same with a last CSV column "mem", for runs whose rows set pc_row_t.mem (ring_perf
 * -G cuda|both); the table is unchanged (its title says where the buffers are). */
void pc_print_columns_mem(pc_fmt_t fmt);
/* One result row on stdout. */
void pc_print_row(pc_out_t *out, const pc_row_t *r);
/* JSON: the object's opening and metadata up to the rows array, and its end, on stdout. */
void pc_json_begin(const pc_meta_t *m);
/* checked 0 (-c 0): "wrong_total" and "ok" are null, as no element was compared. */
void pc_json_end(long long wrong_total, int checked);
/* The summary lines; label (may be NULL) names the table, e.g. the algorithm. checked 0 (-c 0):
 * the results were not compared, and the first line says so instead of "0 OK". */
void pc_print_footer(FILE *f, const char *label, int checked, long long wrong_total, double bw_sum, int rows);

#ifdef __cplusplus
}
#endif

#endif
