/*
 * Thread stress for the ThreadSanitizer build (Criterion cannot run under TSan: its runner
 * maps a fixed-address arena that collides with TSan's shadow memory). Plain C, one process:
 * every rank is a communicator driven by its own threads, over real loopback sockets.
 *
 *  1. Two communicators (A and B) of two ranks each; four threads (rank x communicator) run
 *     mixed async and blocking collectives at the same time, with ring_test polling, and check
 *     every result.
 *  2. Abort from another thread while a call is in flight and others are queued.
 *  3. Three ranks; rank 2 destroys its communicator while 0 and 1 are in an all-reduce with
 *     it: the watcher threads record and relay its goodbye while the callers read it.
 *  4. A mismatched first call with 64 _async calls queued behind it: each rank reads its
 *     communicator's error text right after the first call returned, while the progress
 *     thread fails the queued ones and rewrites that text.
 *
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "free_port.h"
#include "ringcomm.h"

#define ITERS 150
#define COUNT 1000

typedef struct rank_ctx {
    int rank, nranks;
    char root[64];
    ring_comm_t *comm;
    ring_result_t rc;
    char err[1024];
} rank_ctx;

static void *init_main(void *p)
{
    rank_ctx *c = p;
    c->rc = ring_comm_init(&c->comm, c->nranks, c->rank, c->root);
    if (c->rc) snprintf(c->err, sizeof c->err, "init: %s", ring_comm_last_error(c->comm));
    return NULL;
}

static int init_group(rank_ctx *ctx, int n)
{
    pthread_t t[8];
    int port = free_port();
    for (int r = 0; r < n; r++) {
        memset(&ctx[r], 0, sizeof ctx[r]);
        ctx[r].rank = r;
        ctx[r].nranks = n;
        snprintf(ctx[r].root, sizeof ctx[r].root, "127.0.0.1:%d", port);
        pthread_create(&t[r], NULL, init_main, &ctx[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < n; r++)
        if (ctx[r].rc) {
            fprintf(stderr, "rank %d: %s\n", r, ctx[r].err);
            return -1;
        }
    return 0;
}

static int init_pair(rank_ctx ctx[2]) { return init_group(ctx, 2); }

#define FAIL(c, ...)                                                                               \
    do {                                                                                           \
        snprintf((c)->err, sizeof (c)->err, __VA_ARGS__);                                          \
        (c)->rc = RING_ERR_INTERNAL;                                                               \
        return NULL;                                                                               \
    } while (0)

#define CALL(c, expr)                                                                              \
    do {                                                                                           \
        ring_result_t r_ = (expr);                                                                 \
        if (r_ != RING_OK) FAIL(c, "%s: %s: %s", #expr, ring_result_name(r_), ring_comm_last_error((c)->comm)); \
    } while (0)

/* Mixed traffic on one communicator; rank r contributes r+1 (+ i), results are exact. */
static void *mixed_main(void *p)
{
    rank_ctx *c = p;
    int32_t *a = malloc(COUNT * sizeof *a), *b = malloc(COUNT * sizeof *b), *full = malloc(2 * COUNT * sizeof *full);
    for (int it = 0; it < ITERS; it++) {
        ring_request_t *rq[3];
        for (int i = 0; i < COUNT; i++) a[i] = (c->rank + 1) * (i + it);
        CALL(c, ring_allreduce_async(c->comm, a, b, COUNT, RING_INT32, RING_SUM, &rq[0]));
        CALL(c, ring_barrier_async(c->comm, &rq[1]));
        CALL(c, ring_allgather_async(c->comm, a, full, COUNT, RING_INT32, &rq[2]));
        int done = 0;
        while (!done) CALL(c, ring_test(rq[0], &done));
        for (int k = 0; k < 3; k++) CALL(c, ring_wait(rq[k]));
        for (int i = 0; i < COUNT; i++) {
            if (b[i] != 3 * (i + it)) FAIL(c, "iteration %d: allreduce[%d] = %d, want %d", it, i, b[i], 3 * (i + it));
            if (full[i] != i + it || full[COUNT + i] != 2 * (i + it)) FAIL(c, "iteration %d: allgather[%d] wrong", it, i);
        }
        /* Blocking call right behind async ones: must run after them, in order. */
        CALL(c, ring_broadcast_async(c->comm, a, COUNT, RING_INT32, it % 2, &rq[0]));
        CALL(c, ring_reduce_scatter(c->comm, full, b, COUNT, RING_INT32, RING_MAX));
        CALL(c, ring_wait(rq[0]));
        for (int i = 0; i < COUNT; i++) {
            int32_t want_a = (it % 2 + 1) * (i + it), want_b = (c->rank + 1) * (i + it);
            if (a[i] != want_a) FAIL(c, "iteration %d: broadcast[%d] = %d, want %d", it, i, a[i], want_a);
            if (b[i] != want_b) FAIL(c, "iteration %d: reduce_scatter[%d] = %d, want %d", it, i, b[i], want_b);
        }
    }
    free(a);
    free(b);
    free(full);
    return NULL;
}

static int test_mixed(void)
{
    rank_ctx A[2], B[2];
    if (init_pair(A) || init_pair(B)) return -1;
    rank_ctx *all[4] = {&A[0], &A[1], &B[0], &B[1]};
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, mixed_main, all[i]);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        if (all[i]->rc) {
            fprintf(stderr, "mixed: comm %c rank %d: %s\n", i < 2 ? 'A' : 'B', all[i]->rank, all[i]->err);
            bad = 1;
        }
    for (int i = 0; i < 4; i++) ring_comm_destroy(all[i]->comm);
    return bad ? -1 : 0;
}

static void *inflight_main(void *p)
{
    rank_ctx *c = p;
    int32_t v[16] = {0};
    c->rc = ring_allreduce(c->comm, v, v, 16, RING_INT32, RING_SUM);
    return NULL;
}

static int test_abort(void)
{
    rank_ctx P[2];
    if (init_pair(P)) return -1;
    int32_t v[16] = {0};
    ring_request_t *queued = NULL;
    pthread_t t;
    /* Rank 1 never joins: the first call blocks in flight, the async one waits in the queue. */
    pthread_create(&t, NULL, inflight_main, &P[0]);
    usleep(100 * 1000);
    ring_result_t q = ring_allreduce_async(P[0].comm, v, v, 16, RING_INT32, RING_SUM, &queued);
    usleep(100 * 1000);
    ring_comm_abort(P[0].comm);
    pthread_join(t, NULL);
    int bad = 0;
    if (P[0].rc != RING_ERR_ABORTED) {
        fprintf(stderr, "abort: in-flight call returned %s\n", ring_result_name(P[0].rc));
        bad = 1;
    }
    if (q == RING_OK) {
        ring_result_t w = ring_wait(queued);
        if (w != RING_ERR_ABORTED) {
            fprintf(stderr, "abort: queued call returned %s\n", ring_result_name(w));
            bad = 1;
        }
    } else if (q != RING_ERR_ABORTED) {
        fprintf(stderr, "abort: async issue returned %s\n", ring_result_name(q));
        bad = 1;
    }
    ring_comm_destroy(P[0].comm);
    ring_comm_destroy(P[1].comm);
    return bad ? -1 : 0;
}

static void *big_main(void *p)
{
    rank_ctx *c = p;
    size_t count = (size_t)2 << 20; /* 8 MiB: still sending to rank 2 when it leaves */
    float *v = calloc(count, sizeof *v);
    c->rc = v ? ring_allreduce(c->comm, v, v, count, RING_FLOAT32, RING_SUM) : RING_ERR_NOMEM;
    snprintf(c->err, sizeof c->err, "%s", ring_comm_last_error(c->comm));
    free(v);
    return NULL;
}

static int test_departure(void)
{
    rank_ctx P[3];
    if (init_group(P, 3)) return -1;
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, big_main, &P[r]);
    usleep(50 * 1000);
    ring_comm_destroy(P[2].comm);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    int bad = 0;
    for (int r = 0; r < 2; r++)
        if (P[r].rc != RING_ERR_PEER || !strstr(P[r].err, "rank 2") || !strstr(P[r].err, "ring_comm_destroy")) {
            fprintf(stderr, "departure: rank %d: %s: %s\n", r, ring_result_name(P[r].rc), P[r].err);
            bad = 1;
        }
    for (int r = 0; r < 2; r++) ring_comm_destroy(P[r].comm);
    return bad ? -1 : 0;
}

#define QUEUED 64

static void *lasterr_main(void *p)
{
    rank_ctx *c = p;
    ring_request_t *rq[QUEUED + 1];
    int32_t v[2000] = {0};
    /* Rank 0 sends 1000 elements where rank 1 sends 2000: every rank fails the first call. */
    CALL(c, ring_allreduce_async(c->comm, v, v, c->rank ? 2000 : 1000, RING_INT32, RING_SUM, &rq[0]));
    for (int k = 1; k <= QUEUED; k++) {
        ring_result_t r = ring_allreduce_async(c->comm, v, v, 16, RING_INT32, RING_SUM, &rq[k]);
        if (r != RING_OK) rq[k] = NULL; /* already failed: refused at once, no request */
    }
    ring_result_t first = ring_wait(rq[0]);
    char seen[1024] = "";
    for (int i = 0; i < 2000; i++) {
        snprintf(seen, sizeof seen, "%s", ring_comm_last_error(c->comm));
        if (!strstr(seen, "count=1000") || !strstr(seen, "count=2000")) break;
    }
    for (int k = 1; k <= QUEUED; k++)
        if (rq[k] && ring_wait(rq[k]) != RING_ERR_MISMATCH) FAIL(c, "queued call %d did not fail as a mismatch", k);
    if (first != RING_ERR_MISMATCH) FAIL(c, "first call returned %s: %s", ring_result_name(first), seen);
    if (!strstr(seen, "count=1000") || !strstr(seen, "count=2000"))
        FAIL(c, "the text does not name both counts: %s", seen);
    return NULL;
}

static int test_last_error(void)
{
    rank_ctx P[2];
    if (init_pair(P)) return -1;
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, lasterr_main, &P[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    int bad = 0;
    for (int r = 0; r < 2; r++)
        if (P[r].rc) {
            fprintf(stderr, "last error: rank %d: %s\n", r, P[r].err);
            bad = 1;
        }
    for (int r = 0; r < 2; r++) ring_comm_destroy(P[r].comm);
    return bad ? -1 : 0;
}

int main(void)
{
    struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"mixed async/blocking traffic on two communicators", test_mixed},
                 {"abort from another thread", test_abort},
                 {"a rank destroys its communicator mid-collective", test_departure},
                 {"error text read while the progress thread fails queued calls", test_last_error}};
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int r = tests[i].fn();
        printf("%s: %s\n", r ? "FAIL" : "ok", tests[i].name);
        if (r) failed++;
        else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
