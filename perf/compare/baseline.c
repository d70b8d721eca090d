/* baseline: see baseline.h. Plain C11; the library comes in through pc_baseline_t's calls. */
#include "baseline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long long check(const pc_baseline_t *b, const void *got, size_t n, pc_dtype_t t, pc_op_t op,
                       const pc_gen_t *gen)
{
    size_t sz = pc_dtype_size(t);
    long long wrong = 0;
    unsigned char exp[8];
    for (size_t k = 0; k < n; k++) {
        pc_expect_reduce(exp, t, op, gen, b->nranks, k);
        if (!pc_same((const unsigned char *)got + k * sz, exp, t)) {
            if (wrong < 5)
                fprintf(stderr, "%s: rank %d: %zu elements: wrong element %zu\n", b->program, b->rank, n, k);
            wrong++;
        }
    }
    return wrong;
}

static void *alloc_buf(const pc_baseline_t *b, size_t bytes)
{
    size_t n;
    void *p = pc_alloc_buf(bytes, &n);
    if (!p) {
        fprintf(stderr, "%s: rank %d: cannot allocate %zu bytes\n", b->program, b->rank, n);
        b->die(b->ctx);
    }
    return p;
}

static void header(const pc_baseline_t *b, const pc_opts_t *o, const pc_link_t *link, int argc, char **argv)
{
    FILE *info = o->fmt == PC_FMT_TABLE ? stdout : stderr;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    pc_print_cmdline(info, b->program, argc, argv);
    fprintf(info, "# nranks %d  host %s  collective allreduce  dtype %s  op %s  in-place %d  check %d\n", b->nranks,
            host, pc_dtype_name(o->dtype), pc_op_name(o->op), o->inplace, o->check);
    pc_print_sweep(info, o);
    fprintf(info, "# %s\n", b->library);
    pc_print_link(info, link);
    for (const char *const *e = b->env; e && *e; e++) {
        const char *s = getenv(*e);
        if (s) fprintf(info, "# env: %s=%s\n", *e, s);
    }
    pc_print_date(info);
    fprintf(info, "# time: median over iterations of the max over ranks; busbw factor 2(n-1)/n\n");
    fprintf(info, "# model (ring allreduce, the bandwidth optimum): T = %s; eff = model/time\n",
            pc_model_formula(PC_COLL_ALLREDUCE, PC_ALGO_RING));
    if (o->fmt == PC_FMT_JSON) {
        pc_meta_t m = {.program = b->program,
                       .collective = "allreduce",
                       .algos = b->algo,
                       .dtype = pc_dtype_name(o->dtype),
                       .op = pc_op_name(o->op),
                       .mem = "host",
                       .host = host,
                       .library = b->library,
                       .nranks = b->nranks,
                       .root = -1,
                       .inplace = o->inplace,
                       .async = 0,
                       .check = o->check,
                       .opts = o,
                       .link = link,
                       .argc = argc,
                       .argv = argv};
        pc_json_begin(&m);
    } else {
        if (o->fmt == PC_FMT_TABLE) printf("#\n# allreduce, %s\n", b->title);
        pc_print_columns(o->fmt);
    }
    fflush(info);
}

int pc_baseline_run(const pc_baseline_t *b, const pc_opts_t *o, int argc, char **argv)
{
    const pc_dtype_t t = o->dtype;
    const pc_op_t op = o->op;
    const int inplace = o->inplace, iters = o->iters, warmup = o->warmup;
    const size_t sz = pc_dtype_size(t);
    const int n = b->nranks, is_root = b->rank == 0;
    if (pc_sweep_rows(o, sz) == 0) {
        /* An empty table would pass: a usage error, as in ring_perf. */
        if (is_root)
            fprintf(stderr, "%s: no size in -b %zu .. -e %zu holds one %s element (%zu B); no row to measure\n",
                    b->program, o->minb, o->maxb, pc_dtype_name(t), sz);
        return 2;
    }
    pc_link_t link = {-1, -1, "not given (--alpha-us)", "not given (--link-gbps)"};
    if (o->alpha_us >= 0) {
        link.alpha_s = o->alpha_us * 1e-6;
        snprintf(link.alpha_src, sizeof link.alpha_src, "--alpha-us");
    }
    if (o->link_gbps > 0) {
        link.bw_Bps = pc_gbps_to_Bps(o->link_gbps);
        snprintf(link.bw_src, sizeof link.bw_src, "--link-gbps");
    }
    if (is_root) header(b, o, &link, argc, argv);

    const pc_gen_t gen = pc_gen(pc_gen_kind(op), t, n);
    const size_t maxcount = o->maxb / sz;
    unsigned char *sbuf = alloc_buf(b, maxcount * sz), *rbuf = alloc_buf(b, inplace ? 0 : maxcount * sz);
    double *times = malloc(sizeof(double) * (size_t)iters);
    if (!times) {
        fprintf(stderr, "%s: rank %d: out of memory\n", b->program, b->rank);
        b->die(b->ctx);
    }
    pc_fill(sbuf, maxcount, t, &gen, b->rank, 0);

    pc_out_t out = {o->fmt, 0};
    pc_row_t row = {.coll = "allreduce",
                    .algo = b->algo,
                    .type = pc_dtype_name(t),
                    .redop = pc_op_name(op),
                    .nranks = n,
                    .root = -1,
                    .inplace = inplace,
                    .link = &link};
    double bw_sum = 0;
    int rows = 0;
    long long wrong_total = 0;
    size_t last_bytes = (size_t)-1;
    for (size_t size = o->minb; size <= o->maxb;) {
        size_t count = size / sz, bytes = count * sz;
        if (count > 0 && bytes != last_bytes) {
            last_bytes = bytes;
            const void *s = inplace ? NULL : sbuf;
            void *r = inplace ? sbuf : rbuf;
            b->barrier(b->ctx);
            for (int k = 0; k < warmup; k++) b->allreduce(b->ctx, s, r, count);
            b->barrier(b->ctx);
            for (int k = 0; k < iters; k++) {
                double t0 = pc_now_us();
                b->allreduce(b->ctx, s, r, count);
                times[k] = pc_now_us() - t0;
            }
            b->max_doubles(b->ctx, times, iters);
            double us = pc_median(times, iters);
            long long wrong = -1;
            if (o->check) {
                pc_fill(sbuf, count, t, &gen, b->rank, 0);
                /* The complement of the expected values: an element the library never writes
                 * fails the check (0xff bytes let every integer element whose result is -1 pass). */
                if (!inplace) pc_preset_unlike_reduce(rbuf, count, t, op, &gen, n, 0);
                b->allreduce(b->ctx, s, r, count);
                wrong = b->sum_ll(b->ctx, check(b, r, count, t, op, &gen));
                wrong_total += wrong;
            }
            pc_row_measured(&row, PC_COLL_ALLREDUCE, PC_ALGO_RING, bytes, count, us, wrong);
            if (is_root) pc_print_row(&out, &row);
            bw_sum += row.busbw;
            rows++;
        }
        if (!pc_next_size(&size, o->factor, o->incr)) break;
    }
    if (is_root) pc_print_footer(o->fmt == PC_FMT_TABLE ? stdout : stderr, NULL, o->check, wrong_total, bw_sum, rows);
    if (is_root && o->fmt == PC_FMT_JSON) pc_json_end(wrong_total, o->check);
    fflush(stdout);
    free(times);
    free(sbuf);
    free(rbuf);
    return wrong_total ? 1 : 0;
}
