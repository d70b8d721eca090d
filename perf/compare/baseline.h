/*
 * baseline: the measurement the side-by-side programs (mpi_allreduce, gloo_allreduce) share,
 * so that what differs between their tables and ring_perf's is the library and nothing else.
 *
 * Per size of the sweep: a barrier, -w warm-up calls, a barrier, -n timed calls each timed with
 * CLOCK_MONOTONIC; the time of a row is the median over iterations of the max over ranks (an
 * all-reduce of the times, outside the timed region). With -c 1, one more call on fresh check
 * data (the output preset to the complement of the expected values, so an element never
 * written fails) is compared on every rank with the exact values of perf_common, and the
 * wrong elements are summed over ranks. Rank 0 prints the header, ring_perf's row format
 * (algo column = the library) and the footer. Model columns only with --alpha-us and
 * --link-gbps: these programs do not probe the links.
 */
#ifndef RINGCOMM_PERF_BASELINE_H
#define RINGCOMM_PERF_BASELINE_H

#include "../perf_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *program;    /* "mpi_allreduce": messages and the header's command line */
    const char *library;    /* version line, printed as "# <library>" */
    const char *title;      /* table title after "allreduce, " */
    const char *algo;       /* the rows' algo column: "mpi", "gloo" */
    const char *const *env; /* environment variables to echo in the header when set; NULL-ended, or NULL */
    int rank, nranks;
    void *ctx;
    /* One all-reduce of count elements of the options' dtype and op; s NULL: in place on r.
     * The program ends the job itself on an error (nothing is measured after one). */
    void (*allreduce)(void *ctx, const void *s, void *r, size_t count);
    void (*barrier)(void *ctx);
    void (*max_doubles)(void *ctx, double *v, int n); /* in place, element-wise max over ranks */
    long long (*sum_ll)(void *ctx, long long v);      /* sum over ranks */
    void (*die)(void *ctx);                           /* a rank cannot go on (allocation): end the job */
} pc_baseline_t;

/* The sweep of o with the header and footer. Returns the exit status: 0, 1 (a wrong element
 * somewhere), 2 (no size of the sweep holds one element; rank 0 says so). */
int pc_baseline_run(const pc_baseline_t *b, const pc_opts_t *o, int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
