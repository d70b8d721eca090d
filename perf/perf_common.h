/*
 * perf_common: the parts of ring_perf and compare/mpi_allreduce that depend neither on ringcomm
 * nor on MPI: option parsing (sizes with K/M/G suffixes, dtype/op names), check data (input
 * generation, exact expected values, element comparison; fp16/bf16 conversions), timing
 * statistics and the table/CSV output, so that both programs measure and print the same way.
 */
#ifndef RINGCOMM_PERF_COMMON_H
#define RINGCOMM_PERF_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* The options both programs share (-b -e -f -i -n -w -c -I -d -o --csv). */
typedef struct {
    size_t minb, maxb;
    size_t factor; /* 0: use incr */
    size_t incr;
    int iters, warmup, check, inplace, csv;
    pc_dtype_t dtype;
    pc_op_t op;
    int allow_16bit; /* accept half/float16/fp16/bfloat16/bf16 for -d */
    int nops;        /* -o accepts the first nops of pc_op_t */
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

/* The defaults: 4 .. 256M, factor 2, 20 iterations, 5 warm-up, check, float, sum. */
void pc_opts_init(pc_opts_t *o, int allow_16bit, int nops);

/* Long option value returned by getopt_long for --csv. */
#define PC_OPT_CSV 'S'

/*
 * Handle getopt character ch (with its optarg arg) if it is a shared option: returns 1 when it
 * was handled, 0 when ch is not a shared option, -1 when arg is invalid (*err is the message).
 */
int pc_parse_opt(pc_opts_t *o, int ch, const char *arg, const char **err);

/* Next size of the sweep after *size; 0 when the sweep ends (overflow). */
int pc_next_size(size_t *size, size_t factor, size_t incr);

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

/* ---- timing and buffers ----------------------------------------------------------------- */

double pc_now_us(void); /* CLOCK_MONOTONIC */
/* Median of t[0..n) (sorts t). */
double pc_median(double *t, int n);
/* Page-aligned, zeroed (touched) buffer of at least one page; NULL on failure, *alloc the size tried. */
void *pc_alloc_buf(size_t bytes, size_t *alloc);

/* ---- output ----------------------------------------------------------------------------- */

/* "# prog: argv..." */
void pc_print_cmdline(FILE *f, const char *prog, int argc, char **argv);
/* "# minBytes ...  step ...  warmup iters ...  iters ..." */
void pc_print_sweep(FILE *f, const pc_opts_t *o);
/* "# date ..." */
void pc_print_date(FILE *f);
/* The CSV header or the table header, on stdout. */
void pc_print_columns(int csv);
/* One result row on stdout. */
void pc_print_row(int csv, const char *coll, int nranks, size_t bytes, size_t count, const char *type,
                  const char *redop, int root, int inplace, double us, double algbw, double busbw, long long wrong);
/* The summary lines. */
void pc_print_footer(FILE *f, long long wrong_total, double bw_sum, int rows);

#endif
