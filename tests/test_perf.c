/*
 * Unit tests for perf/perf_common.c, the network-free half of ring_perf and mpi_allreduce:
 * bus-bandwidth factors and the alpha-beta model (expected values worked out by hand from the
 * formulas in perf_common.h, not by calling the same arithmetic), size and option parsing, the
 * CSV row layout that perf/compare/compare.sh reads by column position, and the parts of the
 * result check that say what a call must not write (output presets, send buffer, guard spans).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "perf_common.h"

/* Equal up to rounding of the decimal constants below. */
static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }
#define NEAR(a, b) near((a), (b))

static const int ranks[] = {1, 2, 4, 8};

/* ---- busbw factors ------------------------------------------------------------------------ */

Test(perf, busbw_factors)
{
    /* nccl-tests: allreduce 2(n-1)/n, reduce_scatter and allgather (n-1)/n, broadcast 1. */
    static const double ar[] = {0, 1, 1.5, 1.75}, half[] = {0, 0.5, 0.75, 0.875};
    for (int k = 0; k < 4; k++) {
        int n = ranks[k];
        cr_expect(NEAR(pc_busbw_factor(PC_COLL_ALLREDUCE, n), ar[k]), "allreduce n=%d", n);
        cr_expect(NEAR(pc_busbw_factor(PC_COLL_REDUCE_SCATTER, n), half[k]), "reduce_scatter n=%d", n);
        cr_expect(NEAR(pc_busbw_factor(PC_COLL_ALLGATHER, n), half[k]), "allgather n=%d", n);
        cr_expect(NEAR(pc_busbw_factor(PC_COLL_BROADCAST, n), 1), "broadcast n=%d", n);
        cr_expect(NEAR(pc_busbw_factor(PC_COLL_BARRIER, n), 0), "barrier n=%d", n);
    }
}

/* ---- the model ---------------------------------------------------------------------------- */

/* alpha = 10 us, B = 1e9 bytes/s, S = 1 MiB: S/B = 1048.576 us. */
#define ALPHA 10e-6
#define BW 1e9
#define S ((size_t)1 << 20)

Test(perf, model_ring)
{
    /* n = 1, 2, 4, 8 */
    static const double ar[] = {0, 20 + 1048.576, 60 + 1572.864, 140 + 1835.008};
    static const double half[] = {0, 10 + 524.288, 30 + 786.432, 70 + 917.504};
    static const double bc[] = {0, 10 + 1048.576, 30 + 1048.576, 70 + 1048.576};
    static const double ba[] = {0, 10, 30, 70};
    for (int k = 0; k < 4; k++) {
        int n = ranks[k];
        double v;
        v = pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, n, S, ALPHA, BW);
        cr_expect(NEAR(v, ar[k]), "allreduce n=%d: %.6f, expected %.6f", n, v, ar[k]);
        v = pc_model_us(PC_COLL_REDUCE_SCATTER, PC_ALGO_RING, n, S, ALPHA, BW);
        cr_expect(NEAR(v, half[k]), "reduce_scatter n=%d: %.6f, expected %.6f", n, v, half[k]);
        v = pc_model_us(PC_COLL_ALLGATHER, PC_ALGO_RING, n, S, ALPHA, BW);
        cr_expect(NEAR(v, half[k]), "allgather n=%d: %.6f, expected %.6f", n, v, half[k]);
        v = pc_model_us(PC_COLL_BROADCAST, PC_ALGO_RING, n, S, ALPHA, BW);
        cr_expect(NEAR(v, bc[k]), "broadcast n=%d: %.6f, expected %.6f", n, v, bc[k]);
        v = pc_model_us(PC_COLL_BARRIER, PC_ALGO_RING, n, 0, ALPHA, BW);
        cr_expect(NEAR(v, ba[k]), "barrier n=%d: %.6f, expected %.6f", n, v, ba[k]);
        /* The shared-memory all-reduce and barrier rows get the same bound. */
        v = pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_SM, n, S, ALPHA, BW);
        cr_expect(NEAR(v, ar[k]), "sm allreduce n=%d: %.6f, expected %.6f", n, v, ar[k]);
        v = pc_model_us(PC_COLL_BARRIER, PC_ALGO_SM, n, 0, ALPHA, BW);
        cr_expect(NEAR(v, ba[k]), "sm barrier n=%d: %.6f, expected %.6f", n, v, ba[k]);
    }
    cr_expect_str_eq(pc_model_formula(PC_COLL_ALLREDUCE, PC_ALGO_SM), pc_model_formula(PC_COLL_ALLREDUCE, PC_ALGO_RING));
}

Test(perf, model_ps)
{
    /* 2(n-1) (alpha + S/B) */
    static const double ps[] = {0, 2 * 1058.576, 6 * 1058.576, 14 * 1058.576};
    for (int k = 0; k < 4; k++) {
        double v = pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_PS, ranks[k], S, ALPHA, BW);
        cr_expect(NEAR(v, ps[k]), "ps n=%d: %.6f, expected %.6f", ranks[k], v, ps[k]);
    }
    /* The baseline exists for allreduce only. */
    cr_expect_eq(pc_model_us(PC_COLL_BROADCAST, PC_ALGO_PS, 4, S, ALPHA, BW), -1);
    cr_expect_eq(pc_model_us(PC_COLL_BARRIER, PC_ALGO_PS, 1, 0, ALPHA, BW), -1);
}

Test(perf, model_rd)
{
    /* (log2 p + 2 [n > p]) (alpha + S/B); p = largest power of two <= n. */
    static const int n[] = {1, 2, 3, 4, 5, 8};
    static const double steps[] = {0, 1, 3, 2, 4, 3};
    for (int k = 0; k < 6; k++) {
        double v = pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RD, n[k], S, ALPHA, BW);
        cr_expect(NEAR(v, steps[k] * 1058.576), "rd allreduce n=%d: %.6f, expected %.6f", n[k], v, steps[k] * 1058.576);
        v = pc_model_us(PC_COLL_BARRIER, PC_ALGO_RD, n[k], 0, ALPHA, -1);
        cr_expect(NEAR(v, steps[k] * 10), "rd barrier n=%d: %.6f, expected %.6f", n[k], v, steps[k] * 10);
    }
    cr_expect_eq(pc_model_us(PC_COLL_ALLGATHER, PC_ALGO_RD, 4, S, ALPHA, BW), -1, "rd runs allreduce and barrier only");
    cr_expect_str_eq(pc_algo_name(PC_ALGO_RD), "rd");
}

Test(perf, model_unknown_parameters)
{
    cr_expect_eq(pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, 4, S, -1, BW), -1);
    cr_expect_eq(pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, 4, S, ALPHA, 0), -1);
    cr_expect_eq(pc_model_us(PC_COLL_ALLGATHER, PC_ALGO_RING, 4, S, ALPHA, -1), -1);
    cr_expect_eq(pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_PS, 4, S, ALPHA, 0), -1);
    /* The barrier moves no payload: alpha alone is enough. */
    cr_expect(NEAR(pc_model_us(PC_COLL_BARRIER, PC_ALGO_RING, 4, 0, ALPHA, -1), 30));
    cr_expect_eq(pc_model_us(PC_COLL_BARRIER, PC_ALGO_RING, 4, 0, -1, BW), -1);
    /* One rank: nothing crosses a link, whatever is known. */
    cr_expect_eq(pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, 1, S, -1, -1), 0);
    /* alpha = 0 is a valid (pure bandwidth) model. */
    cr_expect(NEAR(pc_model_us(PC_COLL_ALLREDUCE, PC_ALGO_RING, 2, S, 0, BW), 1048.576));
}

Test(perf, eff_and_units)
{
    cr_expect(NEAR(pc_eff(50, 100), 0.5));
    cr_expect(NEAR(pc_eff(300, 100), 3));
    cr_expect_eq(pc_eff(0, 100), -1, "n = 1: model 0, no ratio");
    cr_expect_eq(pc_eff(-1, 100), -1, "no model");
    cr_expect_eq(pc_eff(10, 0), -1, "no time");
    cr_expect(NEAR(pc_gbps_to_Bps(8), 1e9));
    cr_expect(NEAR(pc_gbps_to_Bps(100), 12.5e9));
    for (int c = 0; c < PC_COLL_COUNT; c++) cr_expect_not_null(pc_model_formula((pc_coll_t)c, PC_ALGO_RING));
}

Test(perf, row_measured)
{
    /* 4 ranks, 1 MB in 1000 us: algbw 1 GB/s; allreduce busbw 1.5 GB/s; ring model at 10 us and
     * 1 GB/s: 2*3*10 + 1.5 * 1e6 B / 1e9 B/s = 60 + 1500 us. The names and the link stay. */
    pc_link_t link = {10e-6, 1e9, "a", "b"};
    pc_row_t r = {.coll = "allreduce", .algo = "mpi", .nranks = 4, .root = -1, .link = &link};
    pc_row_measured(&r, PC_COLL_ALLREDUCE, PC_ALGO_RING, 1000000, 250000, 1000, 7);
    cr_expect_eq(r.bytes, 1000000);
    cr_expect_eq(r.count, 250000);
    cr_expect(NEAR(r.us, 1000));
    cr_expect(NEAR(r.algbw, 1.0));
    cr_expect(NEAR(r.busbw, 1.5));
    cr_expect_eq(r.wrong, 7);
    cr_expect(NEAR(r.model_us, 1560));
    cr_expect_str_eq(r.algo, "mpi");
    cr_expect_eq(r.link, &link);
    /* allgather: busbw (n-1)/n; the parameter server's model 2(n-1)(alpha + S/B) = 6 * 1010 us;
     * no link bandwidth: no model. */
    pc_row_measured(&r, PC_COLL_ALLGATHER, PC_ALGO_RING, 1000000, 250000, 1000, -1);
    cr_expect(NEAR(r.busbw, 0.75));
    cr_expect_eq(r.wrong, -1);
    pc_row_measured(&r, PC_COLL_ALLREDUCE, PC_ALGO_PS, 1000000, 250000, 1000, 0);
    cr_expect(NEAR(r.model_us, 6060));
    link.bw_Bps = -1;
    pc_row_measured(&r, PC_COLL_ALLREDUCE, PC_ALGO_RING, 1000000, 250000, 1000, 0);
    cr_expect_eq(r.model_us, -1);
}

Test(perf, collective_names)
{
    pc_coll_t c = PC_COLL_BARRIER;
    for (int k = 0; k < PC_COLL_COUNT; k++) {
        cr_assert_eq(pc_parse_coll(pc_coll_name((pc_coll_t)k), &c), 0);
        cr_expect_eq(c, (pc_coll_t)k);
    }
    cr_expect_eq(pc_parse_coll("reducescatter", &c), 0);
    cr_expect_eq(c, PC_COLL_REDUCE_SCATTER);
    cr_expect_eq(pc_parse_coll("all_reduce", &c), 0);
    cr_expect_eq(c, PC_COLL_ALLREDUCE);
    cr_expect_eq(pc_parse_coll("all_gather", &c), 0);
    cr_expect_eq(c, PC_COLL_ALLGATHER);
    cr_expect_eq(pc_parse_coll("alltoall", &c), -1);
    cr_expect_eq(pc_parse_coll("", &c), -1);
    cr_expect_str_eq(pc_algo_name(PC_ALGO_RING), "ring");
    cr_expect_str_eq(pc_algo_name(PC_ALGO_PS), "ps");
}

/* ---- sizes -------------------------------------------------------------------------------- */

Test(perf, parse_size)
{
    static const struct {
        const char *s;
        size_t v;
    } good[] = {
        {"0", 0},           {"4", 4},           {"1K", 1024},           {"1k", 1024},
        {"16M", 16u << 20}, {"2G", (size_t)2 << 30}, {"1KiB", 1024},    {"1KB", 1024},
        {"3MiB", 3u << 20}, {"5b", 5},          {"1T", (size_t)1 << 40}, {"64m", 64u << 20},
    };
    for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
        size_t v = 12345;
        cr_expect_eq(pc_parse_size(good[k].s, &v), 0, "'%s' rejected", good[k].s);
        cr_expect_eq(v, good[k].v, "'%s' = %zu, expected %zu", good[k].s, v, good[k].v);
    }
    static const char *const bad[] = {"", "-1", "+1", "K", "1X", "1.5K", "12 ", " 12", "1KK", "1Bi",
                                      "99999999999T", "18446744073709551616"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        size_t v = 777;
        cr_expect_eq(pc_parse_size(bad[k], &v), -1, "'%s' accepted", bad[k]);
        cr_expect_eq(v, 777, "'%s' wrote the output", bad[k]);
    }
    size_t v;
    cr_expect_eq(pc_parse_size(NULL, &v), -1);
}

Test(perf, parse_double)
{
    double v = -5;
    cr_expect_eq(pc_parse_double("2.5", 0, 10, &v), 0);
    cr_expect(NEAR(v, 2.5));
    cr_expect_eq(pc_parse_double("1e-3", 0, 10, &v), 0);
    cr_expect(NEAR(v, 1e-3));
    cr_expect_eq(pc_parse_double("11", 0, 10, &v), -1);
    cr_expect_eq(pc_parse_double("nan", 0, 10, &v), -1);
    cr_expect_eq(pc_parse_double("inf", 0, 1e300, &v), -1);
    cr_expect_eq(pc_parse_double("1x", 0, 10, &v), -1);
    cr_expect_eq(pc_parse_double("", 0, 10, &v), -1);
    cr_expect_eq(pc_parse_double("1e999", 0, 1e308, &v), -1);
}

/* ---- option parsing through getopt_long, as ring_perf does it --------------------------- */

/* Parse a NULL-terminated argv like ring_perf: returns 0, or -1 at the first invalid value
 * (*err set). */
static int parse(pc_opts_t *o, char **argv, const char **err)
{
    static const struct option longopts[] = {PC_LONGOPTS_OUTPUT, PC_LONGOPTS_PROBE, {NULL, 0, NULL, 0}};
    int argc = 0;
    while (argv[argc]) argc++;
    pc_opts_init(o, 1, PC_OP_COUNT);
    optind = 0; /* glibc: start over */
    opterr = 0;
    *err = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "A:G:b:e:f:i:n:w:c:d:o:I:", longopts, NULL)) != -1) {
        int r = pc_parse_opt(o, ch, optarg, err);
        if (r == -1) return -1;
        if (r == 0) {
            *err = "not a shared option";
            return -1;
        }
    }
    return 0;
}

#define PARSE(o, err, ...) parse(o, (char *[]){"ring_perf", __VA_ARGS__, NULL}, err)

Test(perf, option_defaults)
{
    pc_opts_t o;
    pc_opts_init(&o, 1, PC_OP_COUNT);
    cr_expect_eq(o.fmt, PC_FMT_TABLE);
    cr_expect(o.alpha_us < 0);
    cr_expect(o.link_gbps < 0);
    cr_expect_eq(o.probe, 1);
    cr_expect_eq(o.probe_bytes, (size_t)64 << 20);
    cr_expect_eq(o.algos, PC_ALGO_BIT(PC_ALGO_RING));
    cr_expect_eq(o.mem, PC_MEM_HOST);
}

Test(perf, option_new_flags)
{
    pc_opts_t o;
    const char *err;
    cr_assert_eq(PARSE(&o, &err, "-A", "both", "-G", "host", "--json", "--alpha-us", "12.5", "--link-gbps", "8",
                       "--no-probe", "--probe-bytes", "4M", "-b", "1K", "-e", "64M", "-f", "4"),
                 0, "%s", err ? err : "");
    cr_expect_eq(o.algos, PC_ALGO_BIT(PC_ALGO_RING) | PC_ALGO_BIT(PC_ALGO_PS));
    cr_expect_eq(o.mem, PC_MEM_HOST);
    cr_expect_eq(o.fmt, PC_FMT_JSON);
    cr_expect(NEAR(o.alpha_us, 12.5));
    cr_expect(NEAR(o.link_gbps, 8));
    cr_expect_eq(o.probe, 0);
    cr_expect_eq(o.probe_bytes, (size_t)4 << 20);
    cr_expect_eq(o.minb, 1024);
    cr_expect_eq(o.maxb, (size_t)64 << 20);
    cr_expect_eq(o.factor, 4);

    cr_assert_eq(PARSE(&o, &err, "-A", "ps", "-G", "cuda", "--csv", "--alpha-us=0"), 0);
    cr_expect_eq(o.algos, PC_ALGO_BIT(PC_ALGO_PS));
    cr_expect_eq(o.mem, PC_MEM_CUDA, "parsing accepts cuda; ring_perf skips it when built without CUDA");
    cr_expect_eq(o.fmt, PC_FMT_CSV);
    cr_expect_eq(o.alpha_us, 0);
    cr_assert_eq(PARSE(&o, &err, "-A", "ring", "--csv", "--csv"), 0, "repeating a format is harmless");
    cr_expect_eq(o.algos, PC_ALGO_BIT(PC_ALGO_RING));
    cr_assert_eq(PARSE(&o, &err, "-G", "both"), 0);
    cr_expect_eq(o.mem, PC_MEM_BOTH);
}

Test(perf, option_bad_values)
{
    pc_opts_t o;
    const char *err;
    cr_expect_eq(PARSE(&o, &err, "-A", "tree"), -1);
    cr_expect_eq(PARSE(&o, &err, "-A", "Ring"), -1);
    cr_expect_eq(PARSE(&o, &err, "-G", "gpu"), -1);
    cr_expect_str_eq(err, "-G needs host, cuda or both");
    cr_expect_eq(PARSE(&o, &err, "-G", "Both"), -1);
    cr_expect_eq(PARSE(&o, &err, "--csv", "--json"), -1);
    cr_expect_str_eq(err, "--csv and --json exclude each other");
    cr_expect_eq(PARSE(&o, &err, "--json", "--csv"), -1);
    cr_expect_eq(PARSE(&o, &err, "--alpha-us", "-1"), -1);
    cr_expect_eq(PARSE(&o, &err, "--alpha-us", "abc"), -1);
    cr_expect_eq(PARSE(&o, &err, "--alpha-us", "nan"), -1);
    cr_expect_eq(PARSE(&o, &err, "--link-gbps", "0"), -1);
    cr_expect_eq(PARSE(&o, &err, "--link-gbps", "-3"), -1);
    cr_expect_eq(PARSE(&o, &err, "--link-gbps", "10G"), -1);
    cr_expect_eq(PARSE(&o, &err, "--probe-bytes", "0"), -1);
    cr_expect_eq(PARSE(&o, &err, "--probe-bytes", "4X"), -1);
    cr_expect_eq(PARSE(&o, &err, "-b", "1.5K"), -1);
    cr_expect_eq(PARSE(&o, &err, "-f", "1"), -1);
    cr_expect_eq(PARSE(&o, &err, "-d", "float128"), -1);
}

Test(perf, next_size)
{
    size_t s = 4;
    cr_expect_eq(pc_next_size(&s, 4, 0), 1);
    cr_expect_eq(s, 16);
    s = 0;
    cr_expect_eq(pc_next_size(&s, 4, 0), 1, "-b 0 goes to 1 B");
    cr_expect_eq(s, 1);
    cr_expect_eq(pc_next_size(&s, 4, 0), 1, "then by the factor");
    cr_expect_eq(s, 4);
    s = 100;
    cr_expect_eq(pc_next_size(&s, 0, 28), 1);
    cr_expect_eq(s, 128);
    s = SIZE_MAX / 2 + 1;
    cr_expect_eq(pc_next_size(&s, 2, 0), 0, "overflow ends the sweep");
}

/* Sweeps that make no row (every size rounds to zero elements per rank): ring_perf and
 * mpi_allreduce refuse them instead of printing an empty table that passes. */
Test(perf, sweep_rows)
{
    pc_opts_t o;
    pc_opts_init(&o, 1, PC_OP_COUNT);
    cr_expect_eq(pc_sweep_rows(&o, 4), 27, "4 B .. 256 MiB, factor 2, float");
    o.minb = 4;
    o.maxb = 8;
    cr_expect_eq(pc_sweep_rows(&o, 4 * 3), 0, "allgather of float over 3 ranks: 12 B at least");
    o.maxb = 16;
    cr_expect_eq(pc_sweep_rows(&o, 4 * 3), 1, "16 B rounds to 12 B");
    o.maxb = 64;
    cr_expect_eq(pc_sweep_rows(&o, 4 * 3), 3, "16, 32, 64 B: 12, 24, 60 B");
    o.minb = 2;
    o.maxb = 3;
    cr_expect_eq(pc_sweep_rows(&o, 4), 0, "-b 2 -e 3 with float");
    cr_expect_eq(pc_sweep_rows(&o, 1), 1, "-b 2 -e 3 with int8: 2 B (4 B is past -e)");
    o.minb = o.maxb = 0;
    cr_expect_eq(pc_sweep_rows(&o, 1), 0, "-b 0 -e 0");
    o.maxb = 1;
    cr_expect_eq(pc_sweep_rows(&o, 1), 1, "-b 0 -e 1 with int8: the 1 B row");
    o.maxb = 16;
    o.factor = 4;
    cr_expect_eq(pc_sweep_rows(&o, 1), 3, "-b 0 -e 16 -f 4: 1, 4, 16 B");
    o.factor = 2;
    o.factor = 0;
    o.incr = 1;
    o.minb = 9;
    o.maxb = 15;
    cr_expect_eq(pc_sweep_rows(&o, 8), 1, "9..15 B all round to the same 8 B row");
    cr_expect_eq(pc_sweep_rows(&o, 0), 0);
}

/* ---- what the check compares -------------------------------------------------------------- */

static const int check_ranks[] = {1, 2, 3, 8, 31};

/* Every preset element differs from the element the check expects there, for every dtype, op
 * and rank count: an element the call does not write always fails. */
Test(check, preset_unlike_never_passes)
{
    enum { N = 200 };
    unsigned char out[N * 8], exp[8];
    for (int d = 0; d < PC_DTYPE_COUNT; d++) {
        const size_t sz = pc_dtype_size((pc_dtype_t)d);
        for (size_t ri = 0; ri < sizeof check_ranks / sizeof *check_ranks; ri++) {
            const int n = check_ranks[ri];
            for (int op = 0; op < PC_OP_COUNT; op++) {
                pc_gen_t g = pc_gen(pc_gen_kind((pc_op_t)op), (pc_dtype_t)d, n);
                pc_preset_unlike_reduce(out, N, (pc_dtype_t)d, (pc_op_t)op, &g, n, 5);
                for (size_t k = 0; k < N; k++) {
                    pc_expect_reduce(exp, (pc_dtype_t)d, (pc_op_t)op, &g, n, 5 + k);
                    cr_assert(!pc_same(out + k * sz, exp, (pc_dtype_t)d), "%s %s n=%d element %zu passes unwritten",
                              pc_dtype_name((pc_dtype_t)d), pc_op_name((pc_op_t)op), n, k);
                }
            }
            pc_gen_t g = pc_gen(PC_GEN_RANGE, (pc_dtype_t)d, n);
            for (int r = 0; r < n; r++) {
                pc_preset_unlike_copy(out, N, (pc_dtype_t)d, &g, r, 7);
                for (size_t k = 0; k < N; k++) {
                    pc_put(exp, 0, (pc_dtype_t)d, pc_val(&g, r, 7 + k));
                    cr_assert(!pc_same(out + k * sz, exp, (pc_dtype_t)d), "%s copy of rank %d element %zu",
                              pc_dtype_name((pc_dtype_t)d), r, k);
                }
            }
        }
    }
}

/* What the presets replace (mpi_allreduce preset its output with 0xff bytes): int32 sums of -1
 * passed there without being written. */
Test(check, preset_of_ones_passes_minus_one)
{
    const int n = 2;
    pc_gen_t g = pc_gen(PC_GEN_SUM, PC_INT32, n);
    int32_t ones, exp;
    memset(&ones, 0xff, sizeof ones);
    size_t pass = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        pc_expect_reduce(&exp, PC_INT32, PC_SUM, &g, n, i);
        pass += pc_same(&ones, &exp, PC_INT32);
    }
    cr_expect_gt(pass, 0, "no sum of -1 in 1000 elements: the case the presets are for is gone");
}

Test(check, send_buffer_changed)
{
    enum { N = 64 };
    float b[N];
    pc_gen_t g = pc_gen(PC_GEN_SUM, PC_FLOAT32, 4);
    size_t first;
    pc_fill(b, N, PC_FLOAT32, &g, 2, 100);
    cr_expect_eq(pc_count_changed(b, N, PC_FLOAT32, &g, 2, 100, &first), 0);
    cr_expect_eq(first, N);
    cr_expect_eq(pc_count_changed(b, N, PC_FLOAT32, &g, 2, 101, &first) > 0, 1, "another base is other data");
    b[40] += 1;
    b[50] = 3.4e38f;
    cr_expect_eq(pc_count_changed(b, N, PC_FLOAT32, &g, 2, 100, &first), 2);
    cr_expect_eq(first, 40);
    /* Bitwise: a -0.0 written over a 0 is a change, though it compares equal. */
    pc_fill(b, N, PC_FLOAT32, &g, 2, 100);
    size_t z = N;
    for (size_t k = 0; k < N && z == N; k++)
        if (b[k] == 0) z = k;
    cr_assert_lt(z, N, "no zero in the check data");
    b[z] = -0.0f;
    cr_expect_eq(pc_count_changed(b, N, PC_FLOAT32, &g, 2, 100, &first), 1);
    cr_expect_eq(first, z);
}

Test(check, guard_span)
{
    unsigned char gbuf[PC_GUARD_BYTES];
    size_t first;
    pc_guard_fill(gbuf, sizeof gbuf);
    cr_expect_eq(pc_guard_count(gbuf, sizeof gbuf, 4, &first), 0);
    cr_expect_eq(first, sizeof gbuf);
    /* One float element past the end of the used part, as a library writing count + 1. */
    float v = 12345.f;
    memcpy(gbuf, &v, sizeof v);
    cr_expect_eq(pc_guard_count(gbuf, sizeof gbuf, 4, &first), 1);
    cr_expect_eq(first, 0);
    cr_expect_eq(pc_guard_count(gbuf, sizeof gbuf, 1, &first), 4, "counted by the byte");
    pc_guard_fill(gbuf, sizeof gbuf);
    gbuf[PC_GUARD_BYTES - 1] ^= 1;
    gbuf[9] ^= 0x40;
    cr_expect_eq(pc_guard_count(gbuf, sizeof gbuf, 8, &first), 2);
    cr_expect_eq(first, 9);
}

/* No element of the check data matches the guard pattern at any aligned place: a stray element
 * of the call's data over the guard always counts. The inputs and copies are in [-100, 100];
 * sums and products of the wider types go further. */
Test(check, guard_pattern_is_no_check_data)
{
    unsigned char gbuf[PC_GUARD_BYTES], e[8];
    pc_guard_fill(gbuf, sizeof gbuf);
    for (int d = 0; d < PC_DTYPE_COUNT; d++) {
        const size_t sz = pc_dtype_size((pc_dtype_t)d);
        const int lim = sz == 1 ? 100 : 4096;
        for (int v = -lim; v <= lim; v++) {
            pc_put(e, 0, (pc_dtype_t)d, v);
            for (size_t off = 0; off + sz <= sizeof gbuf; off += sz)
                cr_assert(memcmp(gbuf + off, e, sz) != 0, "%s %d matches the guard at byte %zu",
                          pc_dtype_name((pc_dtype_t)d), v, off);
        }
    }
}

/* ---- output layout ------------------------------------------------------------------------ */

static void redirect(void) { cr_redirect_stdout(); }

/* What the test printed so far, NUL-terminated. */
static void captured(char *buf, size_t len)
{
    fflush(stdout);
    memset(buf, 0, len);
    size_t n = fread(buf, 1, len - 1, cr_get_redirected_stdout());
    cr_assert(n > 0);
}

Test(perf, csv_columns, .init = redirect, .timeout = 10)
{
    pc_link_t l = {10e-6, 1e9, "--alpha-us", "--link-gbps"};
    pc_out_t out = {PC_FMT_CSV, 0};
    pc_row_t r = {.coll = "allreduce", .algo = "ps", .type = "float", .redop = "sum", .nranks = 4, .root = -1,
                  .inplace = 0, .bytes = 1024, .count = 256, .us = 100, .algbw = 0.01024, .busbw = 0.01536,
                  .wrong = 0, .model_us = 50, .link = &l};
    pc_print_columns(PC_FMT_CSV);
    pc_print_row(&out, &r);
    r.model_us = -1;
    r.wrong = -1;
    pc_link_t none = {-1, -1, "--no-probe", "--no-probe"};
    r.link = &none;
    pc_print_row(&out, &r);
    fflush(stdout);
    /* compare.sh reads columns 3 (size), 9 (time), 11 (busbw), 12 (wrong) by position. */
    cr_assert_stdout_eq_str(
        "collective,nranks,size,count,type,redop,root,inplace,time_us,algbw_GBps,busbw_GBps,wrong,"
        "model_us,eff,algo,alpha_us,link_GBps\n"
        "allreduce,4,1024,256,float,sum,-1,0,100.000,0.010240,0.015360,0,50.000,0.5000,ps,10.000,1.000000\n"
        "allreduce,4,1024,256,float,sum,-1,0,100.000,0.010240,0.015360,-1,,,ps,,\n");
}

/* -G cuda|both: a last column "mem"; rows without mem (host-only runs) keep the layout above. */
Test(perf, csv_mem_column, .init = redirect, .timeout = 10)
{
    pc_link_t l = {10e-6, 1e9, "--alpha-us", "--link-gbps"};
    pc_out_t out = {PC_FMT_CSV, 0};
    pc_row_t r = {.coll = "allgather", .algo = "ring", .type = "int8", .redop = "none", .nranks = 3, .root = -1,
                  .inplace = 1, .bytes = 3072, .count = 1024, .us = 10, .algbw = 0.3072, .busbw = 0.2048,
                  .wrong = 0, .model_us = 5, .link = &l, .mem = "host"};
    pc_print_columns_mem(PC_FMT_CSV);
    pc_print_row(&out, &r);
    r.mem = "cuda";
    pc_print_row(&out, &r);
    fflush(stdout);
    cr_assert_stdout_eq_str(
        "collective,nranks,size,count,type,redop,root,inplace,time_us,algbw_GBps,busbw_GBps,wrong,"
        "model_us,eff,algo,alpha_us,link_GBps,mem\n"
        "allgather,3,3072,1024,int8,none,-1,1,10.000,0.307200,0.204800,0,5.000,0.5000,ring,10.000,1.000000,host\n"
        "allgather,3,3072,1024,int8,none,-1,1,10.000,0.307200,0.204800,0,5.000,0.5000,ring,10.000,1.000000,cuda\n");
}

Test(perf, table_columns_mem_unchanged, .init = redirect, .timeout = 10)
{
    /* The table's columns do not change with -G: each table's title says where its buffers are. */
    pc_print_columns(PC_FMT_TABLE);
    pc_print_columns_mem(PC_FMT_TABLE);
    pc_print_columns_mem(PC_FMT_JSON);
    fflush(stdout);
    const char *t = "#\n"
                    "#       size         count      type   redop    root        time     algbw     busbw  #wrong"
                    "       model    eff  algo\n"
                    "#        (B)    (elements)                                  (us)    (GB/s)    (GB/s)        "
                    "        (us)             \n";
    char want[1024];
    snprintf(want, sizeof want, "%s%s", t, t);
    cr_assert_stdout_eq_str(want);
}

Test(perf, table_row_without_model, .init = redirect, .timeout = 10)
{
    pc_out_t out = {PC_FMT_TABLE, 0};
    pc_row_t r = {.coll = "allreduce", .algo = "ring", .type = "float", .redop = "sum", .nranks = 1, .root = -1,
                  .bytes = 4, .count = 1, .us = 1, .algbw = 0.004, .busbw = 0, .wrong = 0, .model_us = 0};
    pc_print_row(&out, &r);
    fflush(stdout);
    /* n = 1: model 0, eff "-" (no division by zero). */
    cr_assert_stdout_eq_str("           4             1     float     sum      -1        1.00     0.004     0.000"
                            "       0        0.00      -  ring\n");
}

/* A JSON document of two 8-byte all-reduce rows under m (the rows' `mem`: mem1, then mem2),
 * captured into buf. */
static void json_two_rows(const pc_meta_t *m, int wrong, const char *mem1, const char *mem2, char *buf, size_t len)
{
    pc_out_t out = {PC_FMT_JSON, 0};
    pc_row_t r = {.coll = "allreduce", .algo = "ring", .type = "float", .redop = "sum", .nranks = 2, .root = -1,
                  .bytes = 8, .count = 2, .us = 2, .algbw = 0.004, .busbw = 0.004, .wrong = wrong, .model_us = -1,
                  .link = m->link, .mem = mem1};
    pc_json_begin(m);
    pc_print_row(&out, &r);
    r.mem = mem2;
    pc_print_row(&out, &r);
    pc_json_end(0, 1);
    captured(buf, len);
}

Test(perf, json_rows, .init = redirect, .timeout = 10)
{
    pc_opts_t o;
    pc_opts_init(&o, 1, PC_OP_COUNT);
    pc_link_t l = {-1, 2e9, "--no-probe", "--link-gbps"};
    char *argv[] = {"ring_perf", "--json", "quote\"d", NULL};
    pc_meta_t m = {.program = "ring_perf", .collective = "allreduce", .algos = "ring", .dtype = "float",
                   .op = "sum", .mem = "host", .host = "h", .library = "lib", .nranks = 2, .root = -1,
                   .opts = &o, .link = &l, .argc = 3, .argv = argv};
    /* Only the stable parts (the date changes): escaped argv, null for unknowns, separators. */
    char buf[8192];
    json_two_rows(&m, -1, NULL, NULL, buf, sizeof buf);
    cr_expect(strstr(buf, "\"command\": [\"ring_perf\", \"--json\", \"quote\\\"d\"]") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"alpha_us\": null") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"link_GBps\": 2.000000, \"link_Gbps\": 16.000000") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"wrong\": null, \"model_us\": null, \"eff\": null},\n    {") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"wrong_total\": 0, \"ok\": true\n}\n") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"gpu\"") == NULL && strstr(buf, "\"mem\"") == NULL, "host-only runs: no new keys: %s", buf);
}

Test(perf, json_mem, .init = redirect, .timeout = 10)
{
    pc_opts_t o;
    pc_opts_init(&o, 1, PC_OP_COUNT);
    pc_link_t l = {-1, -1, "--no-probe", "--no-probe"};
    char *argv[] = {"ring_perf", "-G", "both", NULL};
    pc_meta_t m = {.program = "ring_perf", .collective = "allreduce", .algos = "ring", .dtype = "float",
                   .op = "sum", .mem = "both", .gpu = "device 0: GPU \"x\"", .host = "h", .library = "lib",
                   .nranks = 2, .root = -1, .opts = &o, .link = &l, .argc = 3, .argv = argv};
    char buf[8192];
    json_two_rows(&m, 0, "host", "cuda", buf, sizeof buf);
    cr_expect(strstr(buf, "\"memory\": \"both\", \"gpu\": \"device 0: GPU \\\"x\\\"\"") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"eff\": null, \"mem\": \"host\"},\n") != NULL, "%s", buf);
    cr_expect(strstr(buf, "\"eff\": null, \"mem\": \"cuda\"}\n  ]") != NULL, "%s", buf);
}

/* -c 0: nothing was compared, so neither "0 OK" nor "ok": true (compare.sh and readers of the
 * JSON took those for checked results). */
Test(perf, footer_and_json_end_unchecked, .init = redirect, .timeout = 10)
{
    pc_print_footer(stdout, NULL, 1, 0, 3.0, 2);
    pc_print_footer(stdout, "ps", 1, 3, 1.0, 1);
    pc_print_footer(stdout, "ring, cuda", 0, 0, 2.0, 1);
    pc_json_end(0, 1);
    pc_json_end(2, 1);
    pc_json_end(0, 0);
    fflush(stdout);
    cr_assert_stdout_eq_str("# Out of bounds values : 0 OK\n"
                            "# Avg bus bandwidth    : 1.5\n"
                            "#\n"
                            "# Out of bounds values : 3 FAILED (ps)\n"
                            "# Avg bus bandwidth    : 1 (ps)\n"
                            "#\n"
                            "# Out of bounds values : N/A (not checked, -c 0) (ring, cuda)\n"
                            "# Avg bus bandwidth    : 2 (ring, cuda)\n"
                            "#\n"
                            "\n  ],\n  \"wrong_total\": 0, \"ok\": true\n}\n"
                            "\n  ],\n  \"wrong_total\": 2, \"ok\": false\n}\n"
                            "\n  ],\n  \"wrong_total\": null, \"ok\": null\n}\n");
}

/* A size so large that rounding it up to whole pages wraps: refused, not a 4 KiB buffer that the
 * sweep then writes past (ring_perf -e 18446744073709551615 used to crash). */
Test(alloc, sizes_that_wrap_when_rounded_up_are_refused)
{
    size_t n = 0;
    cr_assert_null(pc_alloc_buf(SIZE_MAX, &n));
    cr_assert_eq(n, SIZE_MAX);
    cr_assert_null(pc_alloc_buf(SIZE_MAX - 4095, &n));
    void *p = pc_alloc_buf(5000, &n);
    cr_assert_not_null(p);
    cr_assert_eq(n, 8192);
    free(p);
}
