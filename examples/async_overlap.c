/*
 * Overlap: start an all-reduce with ring_allreduce_async, compute on another buffer while the
 * communicator's progress thread moves the data, then ring_wait. Rank 0 prints how long the
 * wait took against the same collective run blocking: with cores to spare the wait is shorter
 * than the collective, since part of it already ran during the computation.
 *
 *   ringrun -n 4 ./async_overlap [floats]       (default 4M floats = 16 MiB per rank)
 */
/* clock_gettime and CLOCK_MONOTONIC are POSIX: a strict -std=c11 build does not declare them. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ringcomm.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(ring_comm_t *comm, const char *call, ring_result_t rc)
{
    fprintf(stderr, "async_overlap: rank %d: %s failed: %s: %s\n", ring_comm_rank(comm), call, ring_strerror(rc),
            ring_comm_last_error(comm));
    return 1;
}

/* Stand-in for the work a program has between producing data and needing its sum. Each pass
 * halves the distance to 2, so the result has a closed form to check against. */
static void compute(float *y, size_t n, int passes)
{
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++) y[i] = y[i] * 0.5f + 1.0f;
}

static void fill(float *a, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++) a[i] = (float)(rank + 1 + (int)(i % 5));
}

/* Sums of small integers are exact in float: compare with ==. */
static size_t count_wrong(const float *a, size_t n, int nranks)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != (float)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 5))) bad++;
    return bad;
}

static int run(ring_comm_t *comm, float *a, float *y, size_t n)
{
    int rank = ring_comm_rank(comm), nranks = ring_comm_nranks(comm);
    ring_result_t rc;

    /* The collective alone. The first call pays one-time setup (scratch buffers), so time the
     * second; the barrier lines the ranks up so that no rank's clock includes a late peer. */
    double t_alone = 0;
    for (int it = 0; it < 2; it++) {
        fill(a, n, rank);
        if ((rc = ring_barrier(comm)) != RING_OK) return fail(comm, "ring_barrier", rc);
        double t0 = now_ms();
        if ((rc = ring_allreduce(comm, a, a, n, RING_FLOAT32, RING_SUM)) != RING_OK)
            return fail(comm, "ring_allreduce", rc);
        t_alone = now_ms() - t0;
        if (count_wrong(a, n, nranks)) {
            fprintf(stderr, "async_overlap: rank %d: blocking all-reduce gave %zu wrong elements\n", rank,
                    count_wrong(a, n, nranks));
            return 1;
        }
    }

    /* Size the computation to about the collective's length so that there is something to
     * overlap; capped so that a slow collective cannot make the example run for minutes. */
    for (size_t i = 0; i < n; i++) y[i] = (float)(i % 16);
    double t0 = now_ms();
    compute(y, n, 1);
    double t_pass = now_ms() - t0;
    int passes = t_pass > 0 ? (int)(t_alone / t_pass) : 1;
    if (passes < 1) passes = 1;
    if (passes > 200) passes = 200;
    for (size_t i = 0; i < n; i++) y[i] = (float)(i % 16);

    fill(a, n, rank);
    if ((rc = ring_barrier(comm)) != RING_OK) return fail(comm, "ring_barrier", rc);
    ring_request_t *req = NULL;
    t0 = now_ms();
    if ((rc = ring_allreduce_async(comm, a, a, n, RING_FLOAT32, RING_SUM, &req)) != RING_OK)
        return fail(comm, "ring_allreduce_async", rc);
    /* a belongs to the library until ring_wait returns: only y is touched here. */
    compute(y, n, passes);
    double t1 = now_ms();
    rc = ring_wait(req);
    double t2 = now_ms();
    if (rc != RING_OK) return fail(comm, "ring_wait", rc);

    size_t bad = count_wrong(a, n, nranks);
    if (bad) {
        fprintf(stderr, "async_overlap: rank %d: async all-reduce gave %zu wrong elements\n", rank, bad);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        double want = 2.0 + ((double)(i % 16) - 2.0) * ldexp(1.0, -passes);
        if (fabs(y[i] - want) > 1e-5 * want) {
            fprintf(stderr, "async_overlap: rank %d: computed y[%zu] = %g, expected %g\n", rank, i, y[i], want);
            return 1;
        }
    }
    if (rank == 0)
        printf("async_overlap: %d ranks, %zu floats: collective alone %.2f ms; overlapped: compute %.2f ms "
               "(%d passes), then ring_wait %.2f ms (%.0f%% of the collective alone), total %.2f ms\n",
               nranks, n, t_alone, t1 - t0, passes, t2 - t1, t_alone > 0 ? 100.0 * (t2 - t1) / t_alone : 0.0,
               t2 - t0);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)4 << 20;
    if (argc > 1) {
        char *end;
        unsigned long long v = strtoull(argv[1], &end, 10);
        if (*end || v == 0 || v > ((size_t)1 << 30)) {
            fprintf(stderr, "usage: async_overlap [floats]  (1 .. 2^30)\n");
            return 2;
        }
        n = (size_t)v;
    }

    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        fprintf(stderr, "async_overlap: init failed: %s: %s\n", ring_strerror(rc), ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        return 1;
    }
    float *a = malloc(n * sizeof *a), *y = malloc(n * sizeof *y);
    int status = 1;
    if (!a || !y)
        fprintf(stderr, "async_overlap: out of memory for 2 x %zu floats\n", n);
    else
        status = run(comm, a, y, n);
    /* On failure abort first: destroy waits for queued operations, each bounded only by the
     * timeout (minutes by default), and abort ends them at once. */
    if (status) ring_comm_abort(comm);
    rc = ring_comm_destroy(comm);
    if (rc != RING_OK && !status) {
        fprintf(stderr, "async_overlap: ring_comm_destroy failed: %s\n", ring_strerror(rc));
        status = 1;
    }
    free(a);
    free(y);
    return status;
}
