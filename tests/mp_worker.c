/*
 * One rank of a multi-process collective test: `mp_worker <scenario> [seed]`.
 *
 * Started by test_collectives (fork+exec, one process per rank) with RING_RANK, RING_NRANKS,
 * RING_ROOT, RING_SECRET, RING_TIMEOUT_MS and RING_TEST_OUTDIR in the environment. Uses only
 * the public API. Every result is checked against reference.c, which regenerates every rank's
 * input on its own, so a rank never trusts data that went through the library.
 *
 * For slow beds such as the emulated RDMA guest (unset, nothing changes): RING_TEST_MAX_BYTES
 * (K/M/G suffixes) bounds every collective's largest buffer (see bound_count),
 * RING_TEST_BACKTOBACK_OPS the length of the backtoback soak (5000).
 *
 * Exit status: 0 all checks passed; 1 a check failed; 2 the library returned an unexpected
 * error; 3 bad usage or setup; 77 rank 0 could not bind the root port (the harness retries
 * with another port), or, in "rebuild", the survivors' rank 0 its second root port.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "reference.h"
#include "ringcomm.h"

enum { EXIT_CHECK = 1, EXIT_LIB = 2, EXIT_SETUP = 3, EXIT_PORT_IN_USE = 77 };

static int g_rank = -1, g_nranks = -1;
static const char *g_scenario = "?";
/* RING_TEST_MAX_BYTES (test_collectives passes it on), 0 = no bound: see bound_count. */
static size_t g_max_bytes;

/* One write() per line so that lines of concurrent ranks and threads do not interleave. */
static void wlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void wlog(const char *fmt, ...)
{
    char line[2048];
    int n = snprintf(line, sizeof line, "[rank %d/%d %s] ", g_rank, g_nranks, g_scenario);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void write_outfile(const char *name, const char *content)
{
    const char *dir = getenv("RING_TEST_OUTDIR");
    if (!dir || !*dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        wlog("cannot create %s: %s", path, strerror(errno));
        exit(EXIT_SETUP);
    }
    fputs(content, f);
    if (fclose(f) != 0) {
        wlog("cannot write %s: %s", path, strerror(errno));
        exit(EXIT_SETUP);
    }
}

static void write_checked(long n)
{
    char name[64], val[64];
    snprintf(name, sizeof name, "checked.%d", g_rank);
    snprintf(val, sizeof val, "%ld\n", n);
    write_outfile(name, val);
}

/* xorshift64*: the per-run schedule (op order, counts, batching), identical on every rank. */
typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dULL;
}

static uint64_t rng_below(rng_t *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

static rng_t rng_make(uint64_t seed, uint64_t stream)
{
    rng_t r = {ref_hash4(seed, stream, 0x7e57, 1) | 1};
    return r;
}

/* ---------------------------------------------------------------------------------------- */
/* Buffers with guard zones                                                                 */
/* ---------------------------------------------------------------------------------------- */

#define GUARD 64

typedef struct {
    unsigned char *mem;
    size_t memlen;
    unsigned char *p; /* the buffer handed to the library */
    size_t len;
    uint64_t salt;
} gbuf_t;

static unsigned char guard_byte(uint64_t salt, size_t pos)
{
    return (unsigned char)((ref_mix64(salt) >> ((pos & 7) * 8)) ^ (pos * 0x9d));
}

/* The start is shifted by a multiple of the element size so that the library sees buffers of
 * natural alignment only, not the 16-byte alignment malloc happens to give. */
static int gbuf_alloc(gbuf_t *g, size_t len, size_t elemsz, uint64_t salt)
{
    size_t off = elemsz * (size_t)(ref_mix64(salt ^ 0xa11) % (64 / elemsz));
    g->memlen = GUARD + off + len + GUARD;
    g->mem = malloc(g->memlen);
    if (!g->mem) return -1;
    g->p = g->mem + GUARD + off;
    g->len = len;
    g->salt = salt;
    for (unsigned char *q = g->mem; q < g->p; q++) *q = guard_byte(salt, (size_t)(q - g->mem));
    for (unsigned char *q = g->p + len; q < g->mem + g->memlen; q++) *q = guard_byte(salt, (size_t)(q - g->mem));
    return 0;
}

static void gbuf_free(gbuf_t *g)
{
    free(g->mem);
    memset(g, 0, sizeof *g);
}

/* Returns the number of clobbered guard bytes. */
static size_t gbuf_check(const gbuf_t *g, size_t *first_bad)
{
    size_t bad = 0;
    *first_bad = 0;
    for (const unsigned char *q = g->mem; q < g->mem + g->memlen; q++) {
        if (q == g->p) q += g->len;
        if (q >= g->mem + g->memlen) break;
        size_t pos = (size_t)(q - g->mem);
        if (*q != guard_byte(g->salt, pos)) {
            if (!bad) *first_bad = pos;
            bad++;
        }
    }
    return bad;
}

/* ---------------------------------------------------------------------------------------- */
/* Collective operations: issue, complete, verify                                           */
/* ---------------------------------------------------------------------------------------- */

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_BARRIER, C_NCOLL };
static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};

typedef struct {
    ring_comm_t *comm;
    const char *label; /* which communicator, for the threads scenario */
    int rank, n;
    uint64_t seed;
    long checked;
    int failed_ops;
    int lib_error; /* a call failed: the communicator is failed, stop */
    double poll_limit_s;
    struct op *unfinished; /* batch left in the library's hands by a failure */
    size_t nunfinished;
    /* REF_SPECIAL ops (scenario special): all-reduce results hashed with NaNs made canonical
     * and as they are (XOR of one hash per op, so the order of completion does not matter),
     * and how many elements were compared each way (REF_MATCH_*). */
    uint64_t hash_canon, hash_raw;
    unsigned long long matched[3];
} ctx_t;

typedef struct op {
    int coll;
    ring_dtype_t dt;
    ring_op_t op;
    int inplace;
    int async;
    int wait_direct; /* async: ring_wait at once instead of polling ring_test first */
    size_t count;    /* per rank for reduce_scatter / allgather */
    int root;
    uint64_t idx; /* seeds this op's data */

    int special;     /* REF_SPECIAL data (reductions of float types only) */
    int verified;    /* checked as soon as ring_test reported done, before ring_wait */
    int own_check;   /* the caller checks the result itself (not REF_EXACT/REF_BITS data) */

    gbuf_t a, b; /* a: send (or the in-place buffer); b: out-of-place receive */
    const void *send;
    void *recv;
    ring_request_t *req;
} op_t;

static void op_describe(const op_t *o, char *buf, size_t len)
{
    if (o->coll == C_BARRIER)
        snprintf(buf, len, "op #%" PRIu64 " barrier %s", o->idx, o->async ? "async" : "blocking");
    else if (o->coll == C_BROADCAST)
        snprintf(buf, len, "op #%" PRIu64 " broadcast %s count=%zu root=%d %s", o->idx, ref_dtype_name(o->dt),
                 o->count, o->root, o->async ? "async" : "blocking");
    else
        snprintf(buf, len, "op #%" PRIu64 " %s %s%s%s count=%zu%s %s %s", o->idx, coll_names[o->coll],
                 ref_dtype_name(o->dt), o->coll == C_ALLGATHER ? "" : " ",
                 o->coll == C_ALLGATHER ? "" : ref_op_name(o->op), o->count,
                 o->coll == C_ALLREDUCE ? "" : " (per rank)", o->inplace ? "in-place" : "out-of-place",
                 o->async ? "async" : "blocking");
}

static ref_kind_t op_kind(const op_t *o)
{
    if (o->special) return REF_SPECIAL;
    return (o->coll == C_ALLREDUCE || o->coll == C_REDUCE_SCATTER) ? REF_EXACT : REF_BITS;
}

static void fail_alloc(ctx_t *c, size_t bytes)
{
    wlog("%sout of memory allocating %zu bytes", c->label, bytes);
    exit(EXIT_SETUP);
}

static void alloc_or_die(ctx_t *c, gbuf_t *g, size_t len, size_t sz, uint64_t salt)
{
    if (gbuf_alloc(g, len, sz, salt) != 0) fail_alloc(c, len);
}

/* Allocates and fills the buffers of o as this rank sees them before the call. */
static void op_prepare(ctx_t *c, op_t *o)
{
    size_t sz = ref_dtype_size(o->dt);
    size_t n = (size_t)c->n, cnt = o->count;
    uint64_t salt = ref_hash4(c->seed, o->idx, (uint64_t)c->rank, 0x9a4d);
    ref_kind_t kind = op_kind(o);
    o->send = NULL;
    o->recv = NULL;
    o->req = NULL;
    o->verified = 0;
    memset(&o->a, 0, sizeof o->a);
    memset(&o->b, 0, sizeof o->b);
    switch (o->coll) {
    case C_ALLREDUCE:
        alloc_or_die(c, &o->a, cnt * sz, sz, salt);
        ref_fill(o->a.p, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
        o->send = o->a.p;
        if (o->inplace) {
            o->recv = o->a.p;
        } else {
            alloc_or_die(c, &o->b, cnt * sz, sz, salt + 1);
            ref_fill_garbage(o->b.p, o->b.len, salt + 2);
            o->recv = o->b.p;
        }
        break;
    case C_REDUCE_SCATTER:
        alloc_or_die(c, &o->a, n * cnt * sz, sz, salt);
        ref_fill(o->a.p, n * cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
        o->send = o->a.p;
        if (o->inplace) {
            o->recv = o->a.p + (size_t)c->rank * cnt * sz;
        } else {
            alloc_or_die(c, &o->b, cnt * sz, sz, salt + 1);
            ref_fill_garbage(o->b.p, o->b.len, salt + 2);
            o->recv = o->b.p;
        }
        break;
    case C_ALLGATHER:
        if (o->inplace) {
            alloc_or_die(c, &o->a, n * cnt * sz, sz, salt);
            ref_fill_garbage(o->a.p, o->a.len, salt + 2);
            unsigned char *mine = o->a.p + (size_t)c->rank * cnt * sz;
            ref_fill(mine, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
            o->send = mine;
            o->recv = o->a.p;
        } else {
            alloc_or_die(c, &o->a, cnt * sz, sz, salt);
            ref_fill(o->a.p, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
            alloc_or_die(c, &o->b, n * cnt * sz, sz, salt + 1);
            ref_fill_garbage(o->b.p, o->b.len, salt + 2);
            o->send = o->a.p;
            o->recv = o->b.p;
        }
        break;
    case C_BROADCAST:
        alloc_or_die(c, &o->a, cnt * sz, sz, salt);
        if (c->rank == o->root)
            ref_fill(o->a.p, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, o->root, 0);
        else
            ref_fill_garbage(o->a.p, o->a.len, salt + 2);
        o->send = o->recv = o->a.p;
        break;
    default: break;
    }
}

static void op_release(op_t *o)
{
    gbuf_free(&o->a);
    gbuf_free(&o->b);
}

static void lib_fail(ctx_t *c, const op_t *o, const char *call, ring_result_t rc)
{
    char d[256];
    op_describe(o, d, sizeof d);
    const char *name = ring_result_name(rc);
    wlog("%s%s: %s returned %d (%s): %s", c->label, d, call, (int)rc, name ? name : "?",
         ring_comm_last_error(c->comm));
    c->lib_error = 1;
}

static void op_issue(ctx_t *c, op_t *o)
{
    ring_result_t rc;
    ring_request_t **rq = o->async ? &o->req : NULL;
    switch (o->coll) {
    case C_ALLREDUCE:
        rc = rq ? ring_allreduce_async(c->comm, o->send, o->recv, o->count, o->dt, o->op, rq)
                : ring_allreduce(c->comm, o->send, o->recv, o->count, o->dt, o->op);
        break;
    case C_REDUCE_SCATTER:
        rc = rq ? ring_reduce_scatter_async(c->comm, o->send, o->recv, o->count, o->dt, o->op, rq)
                : ring_reduce_scatter(c->comm, o->send, o->recv, o->count, o->dt, o->op);
        break;
    case C_ALLGATHER:
        rc = rq ? ring_allgather_async(c->comm, o->send, o->recv, o->count, o->dt, rq)
                : ring_allgather(c->comm, o->send, o->recv, o->count, o->dt);
        break;
    case C_BROADCAST:
        rc = rq ? ring_broadcast_async(c->comm, o->recv, o->count, o->dt, o->root, rq)
                : ring_broadcast(c->comm, o->recv, o->count, o->dt, o->root);
        break;
    default:
        rc = rq ? ring_barrier_async(c->comm, rq) : ring_barrier(c->comm);
        break;
    }
    if (rc != RING_OK) {
        lib_fail(c, o, o->async ? "the _async call" : "the blocking call", rc);
        o->req = NULL;
    } else if (o->async && !o->req) {
        char d[256];
        op_describe(o, d, sizeof d);
        wlog("%s%s: _async returned RING_OK but no request", c->label, d);
        c->lib_error = 1;
    }
}

static void op_verify(ctx_t *c, op_t *o);

static void op_complete(ctx_t *c, op_t *o)
{
    if (!o->async || !o->req) return;
    ring_result_t rc;
    if (!o->wait_direct) {
        int done = 0;
        double t0 = now_s();
        long backoff_us = 10;
        for (;;) {
            rc = ring_test(o->req, &done);
            if (done) break;
            if (now_s() - t0 > c->poll_limit_s) {
                char d[256];
                op_describe(o, d, sizeof d);
                wlog("%s%s: ring_test still not done after %.0f s", c->label, d, c->poll_limit_s);
                c->lib_error = 1;
                return; /* the harness kills us; never wait on a request that may hang */
            }
            /* Back off: up to 8 ranks share 2 cores here, and a spinning poller would steal
             * the time the progress threads need. */
            sleep_us(backoff_us);
            if (backoff_us < 1000) backoff_us *= 2;
        }
        if (rc != RING_OK) {
            lib_fail(c, o, "ring_test", rc);
            ring_wait(o->req);
            o->req = NULL;
            return;
        }
        /* ring_test never frees: asking again must give the same answer. */
        int done2 = 0;
        ring_result_t rc2 = ring_test(o->req, &done2);
        if (!done2 || rc2 != RING_OK) {
            char d[256];
            op_describe(o, d, sizeof d);
            wlog("%s%s: second ring_test after completion gave done=%d rc=%d", c->label, d, done2, (int)rc2);
            c->failed_ops++;
        }
        /* "done" hands the buffers back: the result must be complete before ring_wait. */
        if (!o->own_check) {
            op_verify(c, o);
            o->verified = 1;
        }
    }
    rc = ring_wait(o->req);
    o->req = NULL;
    if (rc != RING_OK) lib_fail(c, o, "ring_wait", rc);
}

enum { MAX_REPORT_ELEMS = 5, MAX_REPORT_OPS = 10 };

/* Element-wise bitwise comparison; reports the first few differences. */
static size_t compare(ctx_t *c, const op_t *o, const char *what, const unsigned char *got,
                      const unsigned char *exp, size_t count, size_t index_base)
{
    size_t sz = ref_dtype_size(o->dt);
    if (memcmp(got, exp, count * sz) == 0) return 0;
    size_t bad = 0;
    char d[256];
    op_describe(o, d, sizeof d);
    for (size_t i = 0; i < count; i++) {
        if (memcmp(got + i * sz, exp + i * sz, sz) == 0) continue;
        if (bad < MAX_REPORT_ELEMS && c->failed_ops < MAX_REPORT_OPS) {
            char g[96], e[96];
            ref_format_elem(g, sizeof g, got + i * sz, o->dt);
            ref_format_elem(e, sizeof e, exp + i * sz, o->dt);
            wlog("%sMISMATCH %s: %s[%zu]: got %s, expected %s", c->label, d, what, index_base + i, g, e);
        }
        bad++;
    }
    if (c->failed_ops < MAX_REPORT_OPS)
        wlog("%sMISMATCH %s: %s: %zu of %zu elements differ", c->label, d, what, bad, count);
    return bad;
}

static size_t check_guards(ctx_t *c, const op_t *o, const gbuf_t *g, const char *which)
{
    if (!g->mem) return 0;
    size_t first;
    size_t bad = gbuf_check(g, &first);
    if (bad && c->failed_ops < MAX_REPORT_OPS) {
        char d[256];
        op_describe(o, d, sizeof d);
        size_t start = (size_t)(g->p - g->mem);
        if (first < start)
            wlog("%sGUARD %s: %zu guard bytes around the %s buffer clobbered, the first %zu bytes before its start",
                 c->label, d, bad, which, start - first);
        else
            wlog("%sGUARD %s: %zu guard bytes around the %s buffer clobbered, the first at byte %zu past its end",
                 c->label, d, bad, which, first - start - g->len);
    }
    return bad;
}

static unsigned char *xmalloc(ctx_t *c, size_t n)
{
    unsigned char *p = malloc(n ? n : 1);
    if (!p) fail_alloc(c, n);
    return p;
}

/*
 * REF_SPECIAL results: element-wise against ref_special_expect, NaNs as any quiet NaN and the
 * zeros of MIN/MAX over -0 and +0 as either zero, everything else bitwise. Reports the first
 * few differences with every rank's input.
 *
 * The reference costs one value per rank per element, so every rank computing it for all of a
 * large all-reduce would cost N^2 per element at N ranks on the 2 cores of CI: there each rank
 * checks its 1/N slice of the result (vlo..vhi) and hashes all of it, and the harness requires
 * every rank's hash to equal rank 0's, so that every element of every rank is checked still.
 */
enum { SPECIAL_FULL_CHECK = 4096 };

static size_t compare_special(ctx_t *c, const op_t *o, const unsigned char *got, size_t count, size_t index_base)
{
    size_t sz = ref_dtype_size(o->dt), bad = 0, vlo = 0, vhi = count;
    if (o->coll == C_ALLREDUCE && count > SPECIAL_FULL_CHECK) {
        vlo = count / (size_t)c->n * (size_t)c->rank;
        vhi = c->rank == c->n - 1 ? count : vlo + count / (size_t)c->n;
    }
    size_t nv = vhi - vlo;
    unsigned char *exp = xmalloc(c, nv * sz), *how = xmalloc(c, nv);
    char why[512] = "", d[256];
    op_describe(o, d, sizeof d);
    size_t amb = ref_special_expect(exp, how, nv, o->dt, o->op, c->n, c->seed, o->idx, index_base + vlo, why, sizeof why);
    if (amb) {
        /* A flaw of the test's data, not of the library: the expected value is undefined. */
        wlog("%sREFERENCE %s: %zu elements have no order-independent result, e.g. %s", c->label, d, amb, why);
        exit(EXIT_SETUP);
    }
    for (size_t j = 0; j < nv; j++) {
        size_t i = vlo + j;
        c->matched[how[j]]++;
        if (ref_special_match(got + i * sz, exp + j * sz, how[j], o->dt)) continue;
        if (bad < MAX_REPORT_ELEMS && c->failed_ops < MAX_REPORT_OPS) {
            char g[96], e[96], in[1024];
            ref_format_elem(g, sizeof g, got + i * sz, o->dt);
            ref_format_elem(e, sizeof e, exp + j * sz, o->dt);
            ref_special_describe(in, sizeof in, o->dt, o->op, c->n, c->seed, o->idx, index_base + i);
            wlog("%sMISMATCH %s: result[%zu]: got %s, expected %s%s; %s", c->label, d, index_base + i, g,
                 how[j] == REF_MATCH_NAN ? "a quiet NaN" : how[j] == REF_MATCH_ZERO ? "a zero of either sign" : e,
                 how[j] == REF_MATCH_NAN ? " (any payload)" : "", in);
        }
        bad++;
    }
    if (bad && c->failed_ops < MAX_REPORT_OPS)
        wlog("%sMISMATCH %s: result: %zu of the %zu elements [%zu, %zu) this rank checks differ", c->label, d, bad, nv,
             index_base + vlo, index_base + vhi);
    if (o->coll == C_ALLREDUCE) {
        uint64_t hc = ref_fnv1a(REF_FNV_INIT, &o->idx, sizeof o->idx), hr = hc;
        for (size_t i = 0; i < count; i++) {
            uint64_t b = ref_canonical_bits(got + i * sz, o->dt);
            hc = ref_fnv1a(hc, &b, sizeof b);
        }
        hr = ref_fnv1a(hr, got, count * sz);
        c->hash_canon ^= ref_mix64(hc);
        c->hash_raw ^= ref_mix64(hr);
    }
    free(exp);
    free(how);
    return bad;
}

static void op_verify(ctx_t *c, op_t *o)
{
    size_t sz = ref_dtype_size(o->dt);
    size_t n = (size_t)c->n, cnt = o->count;
    size_t bad = 0;
    ref_kind_t kind = op_kind(o);
    unsigned char *exp = NULL;
    switch (o->coll) {
    case C_ALLREDUCE:
        exp = xmalloc(c, cnt * sz);
        if (o->special) bad += compare_special(c, o, o->recv, cnt, 0);
        else {
            ref_expect_reduce(exp, cnt, o->dt, o->op, c->n, c->seed, o->idx, 0);
            bad += compare(c, o, "result", o->recv, exp, cnt, 0);
        }
        if (!o->inplace) {
            ref_fill(exp, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
            bad += compare(c, o, "sendbuf (must be unchanged)", o->send, exp, cnt, 0);
        }
        break;
    case C_REDUCE_SCATTER: {
        size_t mine = (size_t)c->rank * cnt;
        exp = xmalloc(c, n * cnt * sz);
        if (o->special) bad += compare_special(c, o, o->recv, cnt, mine);
        else {
            ref_expect_reduce(exp, cnt, o->dt, o->op, c->n, c->seed, o->idx, mine);
            bad += compare(c, o, "result", o->recv, exp, cnt, mine);
        }
        ref_fill(exp, n * cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, c->rank, 0);
        if (!o->inplace) {
            bad += compare(c, o, "sendbuf (must be unchanged)", o->send, exp, n * cnt, 0);
        } else {
            /* sendbuf is const: the other ranks' slices around the in-place result stay. */
            bad += compare(c, o, "sendbuf outside own slice (const)", o->a.p, exp, mine, 0);
            size_t after = mine + cnt;
            bad += compare(c, o, "sendbuf outside own slice (const)", o->a.p + after * sz, exp + after * sz,
                           n * cnt - after, after);
        }
        break;
    }
    case C_ALLGATHER:
        exp = xmalloc(c, n * cnt * sz);
        for (int q = 0; q < c->n; q++)
            ref_fill(exp + (size_t)q * cnt * sz, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, q, 0);
        bad += compare(c, o, "result", o->recv, exp, n * cnt, 0);
        if (!o->inplace)
            bad += compare(c, o, "sendbuf (must be unchanged)", o->send, exp + (size_t)c->rank * cnt * sz, cnt, 0);
        break;
    case C_BROADCAST:
        exp = xmalloc(c, cnt * sz);
        ref_fill(exp, cnt, o->dt, o->op, kind, c->n, c->seed, o->idx, o->root, 0);
        bad += compare(c, o, "result", o->recv, exp, cnt, 0);
        break;
    default: break;
    }
    free(exp);
    bad += check_guards(c, o, &o->a, o->inplace || o->coll == C_BROADCAST ? "in-place" : "send");
    bad += check_guards(c, o, &o->b, "receive");
    if (bad) c->failed_ops++;
    c->checked++;
}

/*
 * Runs ops[0..nops) in batches: a blocking op alone, or up to four async ops in flight at
 * once, sometimes followed by a blocking op issued behind them (it must queue after them).
 * Async requests are completed in a shuffled order, not the issue order.
 */
static void run_ops(ctx_t *c, op_t *ops, size_t nops, rng_t *sched)
{
    enum { MAXB = 5 };
    size_t i = 0;
    while (i < nops && !c->lib_error) {
        size_t b = 1;
        if (ops[i].async) {
            size_t want = 1 + (size_t)rng_below(sched, 4);
            while (b < want && i + b < nops && ops[i + b].async) b++;
            if (i + b < nops && !ops[i + b].async && rng_below(sched, 3) == 0) b++;
        }
        op_t *batch = ops + i;
        for (size_t k = 0; k < b; k++) op_prepare(c, &batch[k]);
        for (size_t k = 0; k < b && !c->lib_error; k++) op_issue(c, &batch[k]);
        size_t order[MAXB];
        for (size_t k = 0; k < b; k++) order[k] = k;
        for (size_t k = b; k > 1; k--) {
            size_t j = (size_t)rng_below(sched, k);
            size_t t = order[k - 1];
            order[k - 1] = order[j];
            order[j] = t;
        }
        for (size_t k = 0; k < b && !c->lib_error; k++) op_complete(c, &batch[order[k]]);
        if (c->lib_error) {
            /* Requests still out own their buffers until the library lets go of them: free
             * them only after ring_comm_destroy (see finish). */
            c->unfinished = batch;
            c->nunfinished = b;
            return;
        }
        for (size_t k = 0; k < b; k++) {
            if (!batch[k].verified) op_verify(c, &batch[k]);
            op_release(&batch[k]);
        }
        i += b;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Schedules                                                                                */
/* ---------------------------------------------------------------------------------------- */

/*
 * With RING_TEST_MAX_BYTES set (slow beds: emulated RDMA), a count whose largest buffer
 * (count * size, times `mult` = nranks for reduce-scatter and all-gather) exceeds the bound
 * becomes one in (bound/2, bound], picked from the original count so that every rank agrees
 * and the sizes still vary; not a multiple of the rank count where that can be avoided. It is
 * applied after a schedule has drawn all its random numbers, so that unset, every schedule is
 * exactly what it was, and set, the rest of the schedule is unchanged.
 */
static size_t bound_count(size_t cnt, size_t sz, size_t mult)
{
    if (!g_max_bytes || !cnt) return cnt;
    size_t lim = g_max_bytes / (sz * mult);
    if (cnt <= lim) return cnt;
    if (lim < 4) return lim;
    size_t c = lim - cnt % (lim - lim / 2);
    if (g_nranks > 1 && c % (size_t)g_nranks == 0) c--;
    return c;
}

static size_t coll_mult(int coll, int n)
{
    return coll == C_REDUCE_SCATTER || coll == C_ALLGATHER ? (size_t)n : 1;
}

/* A count of about 1-3 MB of elements, not a multiple of nranks. */
static size_t big_count(rng_t *r, size_t sz, int n)
{
    size_t bytes = ((size_t)1 << 20) + (size_t)rng_below(r, (size_t)2 << 20);
    size_t cnt = bytes / sz;
    if (n > 1 && cnt % (size_t)n == 0) cnt++;
    return cnt;
}

static const size_t primes[] = {5, 31, 127, 257, 1021, 8191, 16381};

/* The list every collective must see at least once (if it has enough ops). */
static size_t special_count(size_t k, int n, size_t sz, rng_t *r, size_t *nspecial)
{
    const size_t fixed[] = {0, 1, 2, 3, 7, 13, (size_t)(n - 1), (size_t)(n + 1), 97, 1009, 4099,
                            (size_t)n * 37 + 1, 65537};
    size_t nf = sizeof fixed / sizeof fixed[0], np = sizeof primes / sizeof primes[0];
    *nspecial = nf + np + 1;
    if (k < nf) return fixed[k];
    if (k < nf + np) return primes[k - nf];
    return big_count(r, sz, n);
}

static size_t random_count(rng_t *r, int n, size_t sz, int allow_big)
{
    uint64_t x = rng_below(r, 1000);
    if (x < 450) return (size_t)rng_below(r, 64);
    if (x < 750) return (size_t)rng_below(r, 2048);
    if (x < 900) return (size_t)rng_below(r, 20000);
    if (x < 960) return primes[rng_below(r, sizeof primes / sizeof primes[0])];
    if (x < 985 || !allow_big) return 65537 + (size_t)rng_below(r, 3) * (size_t)n;
    return big_count(r, sz, n);
}

static void shuffle_ops(op_t *ops, size_t n, rng_t *r)
{
    for (size_t k = n; k > 1; k--) {
        size_t j = (size_t)rng_below(r, k);
        op_t t = ops[k - 1];
        ops[k - 1] = ops[j];
        ops[j] = t;
    }
}

static op_t *ops_alloc(size_t n)
{
    op_t *ops = calloc(n ? n : 1, sizeof *ops);
    if (!ops) {
        wlog("out of memory for %zu ops", n);
        exit(EXIT_SETUP);
    }
    return ops;
}

/*
 * Every collective x dtype x op (reductions) x in-place/out-of-place x blocking/async, every
 * broadcast root x dtype, some barriers; shuffled; each collective gets every special count
 * once, the rest random.
 */
static op_t *matrix_schedule(int n, uint64_t seed, size_t *nops_out)
{
    size_t cap = 2 * (RING_DTYPE_COUNT * RING_OP_COUNT * 4) + RING_DTYPE_COUNT * 4 +
                 (size_t)RING_DTYPE_COUNT * (size_t)n * 2 + 8;
    op_t *ops = ops_alloc(cap);
    size_t k = 0;
    for (int coll = C_ALLREDUCE; coll <= C_REDUCE_SCATTER; coll++)
        for (int dt = 0; dt < RING_DTYPE_COUNT; dt++)
            for (int op = 0; op < RING_OP_COUNT; op++)
                for (int v = 0; v < 4; v++)
                    ops[k++] = (op_t){.coll = coll, .dt = (ring_dtype_t)dt, .op = (ring_op_t)op,
                                      .inplace = v & 1, .async = v >> 1};
    for (int dt = 0; dt < RING_DTYPE_COUNT; dt++)
        for (int v = 0; v < 4; v++)
            ops[k++] = (op_t){.coll = C_ALLGATHER, .dt = (ring_dtype_t)dt, .inplace = v & 1, .async = v >> 1};
    for (int dt = 0; dt < RING_DTYPE_COUNT; dt++)
        for (int root = 0; root < n; root++)
            for (int v = 0; v < 2; v++)
                ops[k++] = (op_t){.coll = C_BROADCAST, .dt = (ring_dtype_t)dt, .root = root, .inplace = 1, .async = v};
    for (int v = 0; v < 8; v++) ops[k++] = (op_t){.coll = C_BARRIER, .dt = RING_UINT8, .async = v & 1};

    rng_t r = rng_make(seed, 1);
    shuffle_ops(ops, k, &r);
    size_t seen[C_NCOLL] = {0};
    for (size_t i = 0; i < k; i++) {
        op_t *o = &ops[i];
        o->idx = i;
        o->wait_direct = rng_below(&r, 4) == 0;
        if (o->coll == C_BARRIER) continue;
        size_t sz = ref_dtype_size(o->dt), nspecial;
        size_t cnt = special_count(seen[o->coll], n, sz, &r, &nspecial);
        if (seen[o->coll] >= nspecial) cnt = random_count(&r, n, sz, 1);
        seen[o->coll]++;
        o->count = bound_count(cnt, sz, coll_mult(o->coll, n));
    }
    *nops_out = k;
    return ops;
}

/* Random mixed ops of small and medium size. */
static op_t *mixed_schedule(int n, uint64_t seed, uint64_t stream, size_t nops, size_t maxcount)
{
    op_t *ops = ops_alloc(nops);
    rng_t r = rng_make(seed, stream);
    for (size_t i = 0; i < nops; i++) {
        op_t *o = &ops[i];
        uint64_t x = rng_below(&r, 100);
        o->coll = x < 40 ? C_ALLREDUCE : x < 60 ? C_REDUCE_SCATTER : x < 75 ? C_ALLGATHER : x < 95 ? C_BROADCAST : C_BARRIER;
        o->dt = (ring_dtype_t)rng_below(&r, RING_DTYPE_COUNT);
        o->op = (ring_op_t)rng_below(&r, RING_OP_COUNT);
        o->inplace = (int)rng_below(&r, 2);
        o->async = (int)rng_below(&r, 2);
        o->wait_direct = rng_below(&r, 4) == 0;
        o->root = (int)rng_below(&r, (uint64_t)n);
        uint64_t y = rng_below(&r, 100);
        o->count = y < 60 ? (size_t)rng_below(&r, 16) : y < 90 ? (size_t)rng_below(&r, 1024) : (size_t)rng_below(&r, maxcount + 1);
        if (o->coll == C_BROADCAST) o->inplace = 1;
        if (o->coll == C_BARRIER) o->dt = RING_UINT8;
        o->count = bound_count(o->count, ref_dtype_size(o->dt), coll_mult(o->coll, n));
        o->idx = stream << 32 | i;
    }
    return ops;
}

/* ---------------------------------------------------------------------------------------- */
/* Scenarios                                                                                */
/* ---------------------------------------------------------------------------------------- */

static ring_comm_t *init_comm_env(void)
{
    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        char msg[1024];
        const char *m = ring_comm_last_error(comm);
        if (!m || !*m) m = ring_comm_last_error(NULL);
        /* A copy: the text belongs to comm, which goes away below. */
        snprintf(msg, sizeof msg, "%s", m ? m : "(null)");
        wlog("ring_comm_init_env failed: %s: %s", ring_result_name(rc), msg);
        ring_comm_destroy(comm);
        if (g_rank == 0 && rc == RING_ERR_SYSTEM && (strstr(msg, "in use") || strstr(msg, "EADDRINUSE")))
            exit(EXIT_PORT_IN_USE);
        exit(EXIT_LIB);
    }
    if (ring_comm_rank(comm) != g_rank || ring_comm_nranks(comm) != g_nranks) {
        wlog("ring_comm_rank/nranks = %d/%d, environment says %d/%d", ring_comm_rank(comm), ring_comm_nranks(comm),
             g_rank, g_nranks);
        exit(EXIT_CHECK);
    }
    return comm;
}

static int finish(ctx_t *c, const char *what)
{
    if (c->comm) {
        /* After a failure, requests may still be queued: abort makes destroy immediate. */
        if (c->lib_error) ring_comm_abort(c->comm);
        ring_result_t rc = ring_comm_destroy(c->comm);
        c->comm = NULL;
        if (rc != RING_OK && !c->lib_error) {
            wlog("%sring_comm_destroy returned %s", c->label, ring_result_name(rc));
            c->lib_error = 1;
        }
    }
    for (size_t k = 0; k < c->nunfinished; k++) op_release(&c->unfinished[k]);
    c->nunfinished = 0;
    if (c->lib_error) return EXIT_LIB;
    if (c->failed_ops) {
        wlog("%s%s: %d of %ld collectives FAILED their checks", c->label, what, c->failed_ops, c->checked);
        return EXIT_CHECK;
    }
    return 0;
}

static ctx_t make_ctx(ring_comm_t *comm, uint64_t seed, const char *label)
{
    ctx_t c = {.comm = comm, .label = label, .rank = g_rank, .n = g_nranks, .seed = seed, .poll_limit_s = 120};
    return c;
}

static int scenario_matrix(uint64_t seed)
{
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    size_t nops;
    op_t *ops = matrix_schedule(c.n, seed, &nops);
    rng_t sched = rng_make(seed, 2);
    double t0 = now_s();
    run_ops(&c, ops, nops, &sched);
    if (g_rank == 0)
        wlog("checked %ld collectives (N=%d seed=0x%" PRIx64 ") in %.2f s", c.checked, c.n, seed, now_s() - t0);
    write_checked(c.checked);
    int rc = finish(&c, "matrix");
    free(ops);
    return rc;
}

/* ---- soak: what a long run must give back ---- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SOAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SOAK_SANITIZED 1
#endif
#endif
#ifndef SOAK_SANITIZED
#define SOAK_SANITIZED 0
#endif

typedef struct {
    int fds;
    long threads, rss_kb;
    long long heap; /* malloc'd bytes in use, -1 where unknown */
} soak_t;

static int soak_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static long soak_status(const char *key)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}

static soak_t soak_sample(void)
{
    soak_t s = {.fds = soak_fds(), .threads = soak_status("Threads"), .heap = -1};
#if !SOAK_SANITIZED && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    /* Give free pages back first, so that RSS counts what is live, not malloc's cache of
     * what the largest batch once needed. */
    malloc_trim(0);
    struct mallinfo2 mi = mallinfo2();
    s.heap = (long long)(mi.uordblks + mi.hblkhd);
#endif
    s.rss_kb = soak_status("VmRSS");
    return s;
}

/* A size knob as the library reads it (digits and an optional K/M/G), or the default. */
static size_t soak_env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    int sh = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
    return (size_t)x << sh;
}

/*
 * The run must end with the fds and threads it had after init, exactly, and with no more
 * memory in use than the library keeps on purpose: its pipeline scratch (RING_PIPELINE_DEPTH
 * slots of RING_CHUNK_BYTES, allocated on the first ring collective) plus 256 KiB for the
 * engine's bookkeeping, the transport's request pools and socket queues, all bounded by the
 * depth, not by the number of calls. Leaking 52 bytes a call over 5000 calls exceeds that.
 * RSS (after malloc_trim) gets the same allowance plus 8 MiB: pages that stay partly used
 * at the ends of the heaps of the main and the progress thread's arena, and malloc's
 * per-arena bookkeeping; the batches' buffers alone peak at ~15 MB (5 ops x 2 x 1.28 MB).
 * Under ASan/TSan only fds and threads are compared: quarantine and shadow memory make RSS
 * meaningless there, and LeakSanitizer checks the heap exactly at exit.
 */
static int soak_check(const soak_t *init, const soak_t *end, long ops)
{
    int bad = 0;
    if (end->fds != init->fds) {
        wlog("soak: %d file descriptors open after %ld collectives, %d after init", end->fds, ops, init->fds);
        bad = 1;
    }
    if (end->threads != init->threads) {
        wlog("soak: %ld threads after %ld collectives, %ld after init", end->threads, ops, init->threads);
        bad = 1;
    }
    size_t depth = soak_env_size("RING_PIPELINE_DEPTH", 4), chunk = soak_env_size("RING_CHUNK_BYTES", 512 * 1024);
    long long kept = (long long)(depth * ((chunk + 63) & ~(size_t)63)) + 256 * 1024;
    if (init->heap >= 0 && end->heap - init->heap > kept) {
        wlog("soak: %lld bytes more in use after %ld collectives than after init (the library may keep %lld)",
             end->heap - init->heap, ops, kept);
        bad = 1;
    }
    long rss_slack_kb = (long)(kept / 1024) + 8 * 1024;
    if (!SOAK_SANITIZED && init->rss_kb > 0 && end->rss_kb - init->rss_kb > rss_slack_kb) {
        wlog("soak: VmRSS grew by %ld kB over %ld collectives (bound %ld kB)", end->rss_kb - init->rss_kb, ops, rss_slack_kb);
        bad = 1;
    }
    if (g_rank == 0)
        wlog("soak: after %ld collectives: fds %d -> %d, threads %ld -> %ld, VmRSS %ld -> %ld kB, heap in use %lld -> %lld B%s",
             ops, init->fds, end->fds, init->threads, end->threads, init->rss_kb, end->rss_kb, init->heap, end->heap,
             SOAK_SANITIZED ? " (memory not compared under a sanitizer)" : "");
    return bad;
}

/*
 * After ring_comm_destroy: at most the descriptors and threads the process had before its
 * first init (plus the library's log file, where there is one, and the thread TSan starts at
 * the first pthread_create). A thread that pthread_join has returned for still counts in
 * /proc/self/status until the kernel has released it, and in the emulated RDMA guest that
 * took longer than reaching the next line ("rebuild" over verbs once counted one thread too
 * many). So a count over the bound is read again for up to 2 s: what the library kept stays
 * over it. *after gets the last sample; 1 when it is within the bound.
 */
static int soak_back_to(const soak_t *before, soak_t *after)
{
    int log_fd = getenv("RING_DEBUG") && getenv("RING_DEBUG_FILE") ? 1 : 0;
    double t0 = now_s();
    for (int tries = 1;; tries++) {
        *after = soak_sample();
        if (after->fds <= before->fds + log_fd && after->threads <= before->threads + SOAK_SANITIZED) {
            if (tries > 1) wlog("soak: back to the counts before init after %.0f ms (%d reads)", (now_s() - t0) * 1e3, tries);
            return 1;
        }
        if (now_s() - t0 > 2) return 0;
        sleep_us(10000);
    }
}

static int scenario_backtoback(uint64_t seed)
{
    soak_t before = soak_sample();
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    /* Fewer on slow beds (the emulated RDMA guest): a leak of a few hundred bytes a call or
     * of any fd or thread still shows; the first ops are the same as in the full run. */
    const size_t nops = soak_env_size("RING_TEST_BACKTOBACK_OPS", 5000);
    op_t *ops = mixed_schedule(c.n, seed, 3, nops, 40000);
    rng_t sched = rng_make(seed, 4);
    soak_t at_init = soak_sample();
    double t0 = now_s();
    run_ops(&c, ops, nops, &sched);
    if (g_rank == 0) wlog("checked %ld collectives in %.2f s", c.checked, now_s() - t0);
    int soak_bad = 0;
    if (!c.lib_error) {
        soak_t end = soak_sample();
        soak_bad = soak_check(&at_init, &end, c.checked);
    }
    write_checked(c.checked);
    int rc = finish(&c, "backtoback");
    free(ops);
    /* Destroyed, the communicator leaves nothing open and no thread behind (soak_back_to). */
    soak_t after;
    if (!rc && !soak_bad && !soak_back_to(&before, &after)) {
        wlog("soak: after ring_comm_destroy: %d fds and %ld threads, %d and %ld before init", after.fds, after.threads,
             before.fds, before.threads);
        soak_bad = 1;
    }
    return rc ? rc : soak_bad ? EXIT_CHECK : 0;
}

/* ---- faults: one rank is SIGKILLed at a random moment ---- */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long g_kill_after_us;

/* The victim's killer: records when it pulls the trigger (CLOCK_MONOTONIC is shared by every
 * process of the host, so the survivors' error times can be compared with it). */
static void *killer_main(void *arg)
{
    (void)arg;
    sleep_us(g_kill_after_us);
    char name[64], val[64];
    snprintf(name, sizeof name, "kill.%d", g_rank);
    snprintf(val, sizeof val, "%lld\n", (long long)mono_ns());
    write_outfile(name, val);
    kill(getpid(), SIGKILL);
    return NULL;
}

/* A survivor's first error, "<ns> <code> <message>", for the harness. */
static void write_err(int64_t t_err, ring_result_t rc, const char *msg)
{
    char name[64], val[1400];
    snprintf(name, sizeof name, "err.%d", g_rank);
    snprintf(val, sizeof val, "%lld %s %s\n", (long long)t_err, ring_result_name(rc), msg);
    write_outfile(name, val);
}

/*
 * The start "faults" and "rebuild" share: init, the victim's killer thread, then random
 * collectives (random kind and size, float buffers *a and *b of 2^20 * nranks elements) until
 * one fails; *done counts the calls. Results are not checked: these calls are there for a rank
 * to die in the middle of. Returns the first error; *a is NULL where it was init's (a rank
 * still in init when the victim died fails there, naming it: also a survivor). No error within
 * 30 s fails the scenario.
 */
static ring_result_t until_death(int victim, rng_t *r, ring_comm_t **comm, float **a, float **b, long *done)
{
    static const size_t sizes[] = {0, 1, 7, 1000, 4099, 65536, 1 << 20};
    *a = *b = NULL;
    *done = 0;
    ring_result_t rc = ring_comm_init_env(comm);
    if (rc != RING_OK) {
        if (g_rank == 0 && rc == RING_ERR_SYSTEM && strstr(ring_comm_last_error(*comm), "in use")) exit(EXIT_PORT_IN_USE);
        return rc;
    }
    size_t maxcount = ((size_t)1 << 20) * (size_t)g_nranks;
    *a = calloc(maxcount, sizeof **a);
    *b = calloc(maxcount, sizeof **b);
    pthread_t t;
    if (!*a || !*b || (g_rank == victim && pthread_create(&t, NULL, killer_main, NULL) != 0)) exit(EXIT_SETUP);
    double t0 = now_s();
    while (rc == RING_OK && now_s() - t0 < 30) {
        size_t cnt = sizes[rng_below(r, sizeof sizes / sizeof *sizes)];
        uint64_t kind = rng_below(r, 6);
        cnt = bound_count(cnt, sizeof **a, kind == 2 || kind == 3 ? (size_t)g_nranks : 1);
        switch (kind) {
        case 0:
        case 1: rc = ring_allreduce(*comm, *a, *b, cnt, RING_FLOAT32, RING_SUM); break;
        case 2: rc = ring_reduce_scatter(*comm, *a, *b, cnt, RING_FLOAT32, RING_MAX); break;
        case 3: rc = ring_allgather(*comm, *a, *b, cnt, RING_FLOAT32); break;
        case 4: rc = ring_broadcast(*comm, *a, cnt, RING_FLOAT32, (int)rng_below(r, (uint64_t)g_nranks)); break;
        default: {
            ring_request_t *q = NULL;
            rc = ring_allreduce_async(*comm, *a, *b, cnt, RING_FLOAT32, RING_MIN, &q);
            if (rc == RING_OK) rc = ring_wait(q);
        }
        }
        (*done)++;
    }
    if (rc == RING_OK) {
        wlog("no error after %ld collectives in 30 s although rank %d was killed after %ld us", *done, victim,
             g_kill_after_us);
        exit(EXIT_CHECK);
    }
    return rc;
}

/*
 * Every rank runs random collectives (random kind, size, dtype) until one fails; the victim
 * (chosen by the seed) is killed from a thread at a random time, so the death lands at any
 * point of any collective. A survivor writes err.<rank> (write_err) for its first error,
 * checks that the next call fails at once with the same code, and exits 0; the harness
 * compares the times with kill.<victim> and checks that the message names the victim. The
 * victim's clock starts when its own init returns, so it may die while a slower rank is still
 * in init: that rank's init fails then, naming it (docs/reliability.md), and counts as its
 * first error.
 */
static int scenario_faults(uint64_t seed)
{
    rng_t r = rng_make(seed, 11);
    int victim = (int)rng_below(&r, (uint64_t)g_nranks);
    g_kill_after_us = (long)rng_below(&r, 300000);
    ring_comm_t *comm = NULL;
    float *a, *b;
    long done;
    ring_result_t rc = until_death(victim, &r, &comm, &a, &b, &done);
    write_err(mono_ns(), rc, ring_comm_last_error(comm));
    if (!a) { /* init's error: the harness checks it as any survivor's, and there is no call to make */
        ring_comm_destroy(comm);
        return 0;
    }
    /* As a program that gives up at the first error does: "abort" aborts and exits (ring_perf),
     * "exit" only exits, with no destroy that would wait for the library's threads. */
    const char *at_once = getenv("MP_FAULTS_EXIT_AT_ONCE");
    if (at_once && (!strcmp(at_once, "abort") || !strcmp(at_once, "exit"))) {
        write_checked(done);
        free(a); /* LeakSanitizer runs at exit */
        free(b);
        if (!strcmp(at_once, "abort")) ring_comm_abort(comm);
        exit(0);
    }
    int64_t t1 = mono_ns();
    ring_result_t again = ring_barrier(comm);
    int64_t fast_us = (mono_ns() - t1) / 1000;
    char name[64], val[64];
    snprintf(name, sizeof name, "again.%d", g_rank);
    snprintf(val, sizeof val, "%lld\n", (long long)fast_us);
    write_outfile(name, val); /* the harness reports the slowest */
    if (again != rc || fast_us > 100000) {
        wlog("after the failure, ring_barrier returned %s in %lld us (expected %s at once)", ring_result_name(again),
             (long long)fast_us, ring_result_name(rc));
        return EXIT_CHECK;
    }
    ring_comm_destroy(comm);
    free(a);
    free(b);
    write_checked(done);
    return 0;
}

/* ---- rebuild: the survivors of a death make a smaller communicator and go on ---- */

/*
 * What a job that outlives a rank does (an elastic launcher going on without the lost node, a
 * retry with the ranks that are left): as in "faults", a random victim is killed at a random
 * moment of random collectives. Each survivor takes its error, aborts the failed communicator
 * (odd seeds) or not, destroys it, then makes a new one of the nranks - 1 survivors, numbered
 * in the old order without the victim, whose rank 0 listens on a second root port
 * (RING_TEST_ROOT2: the old rank 0 may be the one that died), and runs 150 random collectives
 * on it, every result checked. The failed communicator must leave nothing the new one trips
 * over (its sockets and ports, shared-memory segments, threads, the library's list of live
 * communicators), and once the new one is destroyed too, no descriptor or thread at all.
 */
static int scenario_rebuild(uint64_t seed)
{
    rng_t r = rng_make(seed, 31);
    int victim = (int)rng_below(&r, (uint64_t)g_nranks);
    g_kill_after_us = 20000 + (long)rng_below(&r, 300000);
    const char *root2 = getenv("RING_TEST_ROOT2");
    if (!root2 || !*root2) {
        wlog("RING_TEST_ROOT2 is not set");
        return EXIT_SETUP;
    }
    soak_t before = soak_sample();
    ring_comm_t *comm = NULL;
    float *a, *b;
    long done;
    ring_result_t rc = until_death(victim, &r, &comm, &a, &b, &done);
    write_err(mono_ns(), rc, ring_comm_last_error(comm));
    if (seed & 1) ring_comm_abort(comm);
    ring_comm_destroy(comm);
    free(a);
    free(b);

    int nr = g_nranks - 1, rr = g_rank - (g_rank > victim);
    ring_comm_t *c2 = NULL;
    rc = ring_comm_init(&c2, nr, rr, nr > 1 ? root2 : NULL);
    if (rc != RING_OK) {
        const char *m = ring_comm_last_error(c2);
        wlog("the survivors' communicator (rank %d of %d): init: %s: %s", rr, nr, ring_result_name(rc), m ? m : "");
        int in_use = rr == 0 && rc == RING_ERR_SYSTEM && m && strstr(m, "in use");
        ring_comm_destroy(c2);
        return in_use ? EXIT_PORT_IN_USE : EXIT_LIB;
    }
    ctx_t c = make_ctx(c2, seed ^ 0x5eb11d, "rebuilt: ");
    c.rank = rr;
    c.n = nr;
    const size_t nops = 150;
    op_t *ops = mixed_schedule(nr, seed, 41, nops, 20000);
    rng_t sched = rng_make(seed, 42);
    run_ops(&c, ops, nops, &sched);
    long checked = c.checked;
    int res = finish(&c, "rebuild");
    free(ops);
    if (res) return res;
    soak_t after;
    if (!soak_back_to(&before, &after)) {
        wlog("both communicators destroyed: %d fds and %ld threads 2 s later, %d and %ld before the first init",
             after.fds, after.threads, before.fds, before.threads);
        return EXIT_CHECK;
    }
    write_checked(checked);
    return 0;
}

/* ---- float_random ---- */

static int scenario_float_random(uint64_t seed)
{
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    static const ring_dtype_t fdt[] = {RING_FLOAT16, RING_BFLOAT16, RING_FLOAT32, RING_FLOAT64};
    rng_t r = rng_make(seed, 5);
    uint64_t hash = REF_FNV_INIT;
    size_t idx = 0;
    for (size_t t = 0; t < 4 && !c.lib_error; t++) {
        for (int opi = 0; opi < 2 && !c.lib_error; opi++) {
            size_t sz = ref_dtype_size(fdt[t]);
            const size_t counts[] = {1, 7, (size_t)c.n * 3 + 1, 1009, 65537, big_count(&r, sz, c.n)};
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && !c.lib_error; ci++, idx++) {
                op_t o = {.coll = C_ALLREDUCE, .dt = fdt[t], .op = opi ? RING_AVG : RING_SUM,
                          .inplace = (int)(idx & 1), .async = (int)((idx >> 1) & 1),
                          .count = bound_count(counts[ci], sz, 1),
                          .idx = 1000 + idx, .own_check = 1};
                size_t cnt = o.count;
                uint64_t salt = ref_hash4(seed, o.idx, (uint64_t)c.rank, 0xf1);
                alloc_or_die(&c, &o.a, cnt * sz, sz, salt);
                ref_fill(o.a.p, cnt, o.dt, o.op, REF_NOISE, c.n, seed, o.idx, c.rank, 0);
                o.send = o.a.p;
                o.recv = o.a.p;
                if (!o.inplace) {
                    alloc_or_die(&c, &o.b, cnt * sz, sz, salt + 1);
                    ref_fill_garbage(o.b.p, o.b.len, salt + 2);
                    o.recv = o.b.p;
                }
                op_issue(&c, &o);
                if (!c.lib_error) op_complete(&c, &o);
                if (c.lib_error) {
                    c.unfinished = &o;
                    c.nunfinished = 1;
                    return finish(&c, "float_random");
                }

                char d[256];
                op_describe(&o, d, sizeof d);
                double u = ref_unit_roundoff(o.dt);
                /* Recursive summation in any order is off by <= (n-1)u*sum|x| to first order;
                 * the final division and rounding add u*|result|; doubled for slack. Absolute
                 * term: rounding of results in the fp16 subnormal range. */
                double abs_floor = o.dt == RING_FLOAT16 ? 0x1p-24 : 0x1p-126;
                size_t bad = 0;
                for (size_t i = 0; i < cnt; i++) {
                    double sum, abssum;
                    ref_noise_sum(o.dt, c.n, seed, o.idx, i, &sum, &abssum);
                    double want = o.op == RING_AVG ? sum / c.n : sum;
                    double tol = 2.0 * (double)(c.n + 1) * u * (o.op == RING_AVG ? abssum / c.n : abssum) + abs_floor;
                    double got = ref_elem_to_double((const unsigned char *)o.recv + i * sz, o.dt);
                    if (!(fabs(got - want) <= tol)) {
                        if (bad < MAX_REPORT_ELEMS)
                            wlog("MISMATCH %s: result[%zu] = %.17g, expected %.17g +- %.3g", d, i, got, want, tol);
                        bad++;
                    }
                }
                if (bad) wlog("MISMATCH %s: %zu of %zu elements outside the tolerance", d, bad, cnt);
                if (!o.inplace) {
                    unsigned char *exp = xmalloc(&c, cnt * sz);
                    ref_fill(exp, cnt, o.dt, o.op, REF_NOISE, c.n, seed, o.idx, c.rank, 0);
                    bad += compare(&c, &o, "sendbuf (must be unchanged)", o.send, exp, cnt, 0);
                    free(exp);
                }
                bad += check_guards(&c, &o, &o.a, o.inplace ? "in-place" : "send");
                bad += check_guards(&c, &o, &o.b, "receive");
                if (bad) c.failed_ops++;
                c.checked++;
                hash = ref_fnv1a(hash, o.recv, cnt * sz);
                op_release(&o);
            }
        }
    }
    char name[64], val[64];
    snprintf(name, sizeof name, "hash.%d", g_rank);
    snprintf(val, sizeof val, "%016" PRIx64 "\n", hash);
    write_outfile(name, val);
    if (g_rank == 0) wlog("checked %ld allreduces, result hash %016" PRIx64, c.checked, hash);
    write_checked(c.checked);
    return finish(&c, "float_random");
}

/* ---- special: IEEE special values ---- */

/*
 * NaN, +-Inf, +-0, subnormals and the largest finite values, mixed across ranks (reference.h,
 * REF_SPECIAL), through all-reduce and reduce-scatter of every float type and op: counts of 1,
 * 7, 67 and 1031 elements (vector bodies and scalar tails of the reduction loops) and one of
 * about 300 KiB (chunks of the pipeline, rounds of the shared-memory all-reduce), in-place
 * or not, blocking or async. Every rank checks its results against the reference (of the
 * large all-reduces its 1/N slice, see compare_special) and leaves hash.<rank>, a hash of its
 * all-reduce results with every NaN made one canonical NaN, and rawhash.<rank>, the same of
 * the raw bits, for the harness to compare across ranks.
 */
static int scenario_special(uint64_t seed)
{
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    static const ring_dtype_t fdt[] = {RING_FLOAT16, RING_BFLOAT16, RING_FLOAT32, RING_FLOAT64};
    const size_t nops = 4 * RING_OP_COUNT * 7;
    op_t *ops = ops_alloc(nops);
    rng_t r = rng_make(seed, 40);
    size_t k = 0;
    for (size_t t = 0; t < 4; t++) {
        size_t sz = ref_dtype_size(fdt[t]);
        size_t big = ((size_t)300 << 10) / sz + 3;
        if (big % (size_t)c.n == 0) big++;
        const size_t counts[] = {1, 7, 67, 1031, big};
        const size_t rs_counts[] = {5, 259};
        for (int op = 0; op < RING_OP_COUNT; op++) {
            for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
                ops[k++] = (op_t){.coll = C_ALLREDUCE, .dt = fdt[t], .op = (ring_op_t)op, .special = 1,
                                  .count = bound_count(counts[i], sz, 1)};
            for (size_t i = 0; i < sizeof rs_counts / sizeof rs_counts[0]; i++)
                ops[k++] = (op_t){.coll = C_REDUCE_SCATTER, .dt = fdt[t], .op = (ring_op_t)op, .special = 1,
                                  .count = bound_count(rs_counts[i], sz, (size_t)c.n)};
        }
    }
    for (size_t i = 0; i < k; i++) {
        ops[i].idx = 3000 + i;
        ops[i].inplace = (int)rng_below(&r, 2);
        ops[i].async = (int)rng_below(&r, 2);
        ops[i].wait_direct = rng_below(&r, 4) == 0;
    }
    rng_t sched = rng_make(seed, 41);
    double t0 = now_s();
    run_ops(&c, ops, k, &sched);
    char name[64], val[64];
    snprintf(name, sizeof name, "hash.%d", g_rank);
    snprintf(val, sizeof val, "%016" PRIx64 "\n", c.hash_canon);
    write_outfile(name, val);
    snprintf(name, sizeof name, "rawhash.%d", g_rank);
    snprintf(val, sizeof val, "%016" PRIx64 "\n", c.hash_raw);
    write_outfile(name, val);
    if (g_rank == 0)
        wlog("checked %ld collectives (N=%d seed=0x%" PRIx64 ") in %.2f s: %llu elements bitwise, %llu NaN, %llu zeros "
             "of either sign", c.checked, c.n, seed, now_s() - t0, c.matched[REF_MATCH_BITS], c.matched[REF_MATCH_NAN],
             c.matched[REF_MATCH_ZERO]);
    write_checked(c.checked);
    int rc = finish(&c, "special");
    free(ops);
    return rc;
}

/* ---- threads ---- */

typedef struct {
    int which;
    uint64_t seed;
    const char *root2;
    int result;
    int port_in_use;
    long checked;
} thread_arg_t;

static void *comm_thread(void *p)
{
    thread_arg_t *t = p;
    static const char *const labels[] = {"comm1: ", "comm2: "};
    ring_comm_t *comm = NULL;
    ring_result_t rc = t->which == 0 ? ring_comm_init_env(&comm)
                                     : ring_comm_init(&comm, g_nranks, g_rank, t->root2);
    if (rc != RING_OK) {
        const char *msg = ring_comm_last_error(comm);
        if (!msg || !*msg) msg = ring_comm_last_error(NULL);
        if (!msg) msg = "(null)";
        wlog("%sinit failed: %s: %s", labels[t->which], ring_result_name(rc), msg);
        ring_comm_destroy(comm);
        t->port_in_use = g_rank == 0 && rc == RING_ERR_SYSTEM && (strstr(msg, "in use") || strstr(msg, "EADDRINUSE"));
        t->result = EXIT_LIB;
        return NULL;
    }
    ctx_t c = make_ctx(comm, t->seed, labels[t->which]);
    const size_t nops = 500;
    op_t *ops = mixed_schedule(c.n, t->seed, 10 + (uint64_t)t->which, nops, 20000);
    rng_t sched = rng_make(t->seed, 20 + (uint64_t)t->which);
    run_ops(&c, ops, nops, &sched);
    t->checked = c.checked;
    t->result = finish(&c, "threads");
    free(ops);
    return NULL;
}

static int scenario_threads(uint64_t seed)
{
    const char *root2 = getenv("RING_TEST_ROOT2");
    if (!root2 || !*root2) {
        wlog("RING_TEST_ROOT2 is not set");
        return EXIT_SETUP;
    }
    thread_arg_t args[2] = {{.which = 0, .seed = seed, .root2 = root2}, {.which = 1, .seed = seed ^ 0xc0ffee, .root2 = root2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        int e = pthread_create(&th[i], NULL, comm_thread, &args[i]);
        if (e) {
            wlog("pthread_create: %s", strerror(e));
            return EXIT_SETUP;
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    if (args[0].port_in_use || args[1].port_in_use) return EXIT_PORT_IN_USE;
    long total = args[0].checked + args[1].checked;
    if (g_rank == 0) wlog("checked %ld collectives on two communicators", total);
    write_checked(total);
    return args[0].result ? args[0].result : args[1].result;
}

/* ---- barrier ---- */

static int file_exists(const char *name)
{
    const char *dir = getenv("RING_TEST_OUTDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static int scenario_barrier(uint64_t seed)
{
    const char *dir = getenv("RING_TEST_OUTDIR");
    if (!dir || !*dir) {
        wlog("RING_TEST_OUTDIR is not set");
        return EXIT_SETUP;
    }
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    const int rounds = 3;
    for (int round = 0; round < rounds && !c.lib_error; round++) {
        long ms = (long)(ref_hash4(seed, (uint64_t)round, (uint64_t)c.rank, 0xba) % 201);
        sleep_us(ms * 1000);
        char name[64];
        /* Round 0 uses the plain names the harness also checks. */
        if (round == 0) snprintf(name, sizeof name, "entered.%d", c.rank);
        else snprintf(name, sizeof name, "entered.r%d.%d", round, c.rank);
        write_outfile(name, "1\n");
        ring_result_t rc;
        if (round == 2) {
            ring_request_t *req = NULL;
            rc = ring_barrier_async(c.comm, &req);
            if (rc == RING_OK) rc = ring_wait(req);
        } else {
            rc = ring_barrier(c.comm);
        }
        if (rc != RING_OK) {
            wlog("round %d: barrier returned %s: %s", round, ring_result_name(rc), ring_comm_last_error(c.comm));
            c.lib_error = 1;
            break;
        }
        int missing = 0;
        for (int q = 0; q < c.n; q++) {
            if (round == 0) snprintf(name, sizeof name, "entered.%d", q);
            else snprintf(name, sizeof name, "entered.r%d.%d", round, q);
            if (!file_exists(name)) {
                wlog("round %d: left the barrier (slept %ld ms) before rank %d entered it: %s missing", round, ms, q, name);
                missing = 1;
            }
        }
        c.failed_ops += missing;
        c.checked++;
    }
    write_checked(c.checked);
    return finish(&c, "barrier");
}

/* ---- large ---- */

/*
 * Element i of rank r: i + 3(i>>8) + 5(i>>16) + 7(i>>24) + 101(i>>31) + 37r (mod 256). It
 * depends on every byte of the index, so data landing at a wrong offset (e.g. one truncated to
 * 32 bits) is caught. Within a 256-element block it is base + (i & 255): fill and check run a
 * block at a time so that 2 GiB take seconds, not minutes.
 */
static inline uint8_t large_block_base(uint64_t block, int rank)
{
    return (uint8_t)((block << 8) + block * 3 + (block >> 8) * 5 + (block >> 16) * 7 + (block >> 23) * 101 +
                     (uint64_t)rank * 37);
}

/* p[0..n) as rank r's input. */
static void large_fill(unsigned char *p, size_t n, int r)
{
    for (size_t blk = 0; blk * 256 < n; blk++) {
        uint8_t base = large_block_base(blk, r);
        size_t len = n - blk * 256 < 256 ? n - blk * 256 : 256;
        for (size_t j = 0; j < len; j++) p[blk * 256 + j] = (uint8_t)(base + j);
    }
}

/* Bad bytes of p[0..n), elements first.. of the pattern, against the sum of ranks r..rmax's
 * inputs (r = rmax: one rank's). */
static size_t large_check(const unsigned char *p, size_t first, size_t n, int r, int rmax, const char *what)
{
    size_t bad = 0;
    const unsigned step = (unsigned)(rmax - r + 1);
    for (size_t i = first; i < first + n;) {
        const size_t blk = i / 256, end = (blk + 1) * 256 < first + n ? (blk + 1) * 256 : first + n;
        uint8_t base = 0;
        for (int q = r; q <= rmax; q++) base = (uint8_t)(base + large_block_base(blk, q));
        const unsigned char *b = p + (i - first);
        unsigned diff = 0;
        for (size_t j = i % 256, k = 0; k < end - i; j++, k++) diff |= (unsigned)(b[k] ^ (uint8_t)(base + step * j));
        for (size_t j = i % 256, k = 0; diff && k < end - i; j++, k++) {
            uint8_t want = (uint8_t)(base + step * j);
            if (b[k] == want) continue;
            if (bad < MAX_REPORT_ELEMS) wlog("MISMATCH large %s: [%zu] = %u, expected %u", what, i + k, b[k], want);
            bad++;
        }
        i = end;
    }
    return bad;
}

/* 2^31 + 3 int8 elements (all-reduce, broadcast) and 2 x (2^30 + 1) (in-place all-gather and
 * reduce-scatter): byte offsets and counts past INT_MAX in each collective's own arithmetic. */
static int scenario_large(uint64_t seed)
{
    if (g_nranks != 2) {
        wlog("the large scenario is for 2 ranks");
        return EXIT_SETUP;
    }
    /* Past 2^32 bytes, where a byte count cut to 32 bits would be small again (below it, such a
     * cut changes nothing and the test could not see it): 2^32 + 5 for all-reduce and
     * broadcast, 2 x (2^31 + 2) = count - 1 for all-gather and reduce-scatter (the byte after
     * theirs is a guard). */
    const size_t count = ((size_t)1 << 32) + 5, each = ((size_t)1 << 31) + 2;
    const size_t tail = 4096;
    unsigned char *buf = mmap(NULL, count + tail, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buf == MAP_FAILED) {
        wlog("mmap %zu bytes: %s", count + tail, strerror(errno));
        return EXIT_SETUP;
    }
    double tfill = now_s();
    large_fill(buf, count, g_rank);
    for (size_t i = 0; i < tail; i++) buf[count + i] = (uint8_t)(0x5a ^ i);
    tfill = now_s() - tfill;
    ctx_t c = make_ctx(init_comm_env(), seed, "");
    const char *what[4] = {"allreduce", "broadcast", "allgather", "reduce_scatter"};
    for (int k = 0; k < 4 && !c.lib_error; k++) {
        const int root = 1;
        size_t bytes = count;
        if (k == 1 && g_rank != root) memset(buf, 0xa5, count);
        if (k == 2) {
            bytes = 2 * each;
            memset(buf, 0xa5, bytes);
            large_fill(buf + (size_t)g_rank * each, each, g_rank);
        }
        if (k == 3) large_fill(buf, bytes = 2 * each, g_rank);
        if (k >= 2) buf[bytes] = 0x77; /* the byte just past these calls' 2 x each (count - 1) */
        double t0 = now_s();
        unsigned char *mine = buf + (size_t)g_rank * each;
        ring_result_t rc = k == 0   ? ring_allreduce(c.comm, buf, buf, count, RING_INT8, RING_SUM)
                           : k == 1 ? ring_broadcast(c.comm, buf, count, RING_INT8, root)
                           : k == 2 ? ring_allgather(c.comm, mine, buf, each, RING_INT8)
                                    : ring_reduce_scatter(c.comm, buf, mine, each, RING_INT8, RING_SUM);
        double dt = now_s() - t0;
        if (rc != RING_OK) {
            wlog("%s of %zu bytes: %s: %s", what[k], bytes, ring_result_name(rc), ring_comm_last_error(c.comm));
            c.lib_error = 1;
            break;
        }
        double tcheck = now_s();
        size_t bad = k < 2    ? large_check(buf, 0, count, 0, 1, what[k])
                     : k == 2 ? large_check(buf, 0, each, 0, 0, what[k]) + large_check(buf + each, 0, each, 1, 1, what[k])
                              : large_check(mine, (size_t)g_rank * each, each, 0, 1, what[k]);
        if (k >= 2 && buf[bytes] != 0x77) {
            wlog("GUARD large %s: byte %zu after the end was written", what[k], bytes);
            bad++;
        }
        for (size_t i = 0; i < tail; i++)
            if (buf[count + i] != (uint8_t)(0x5a ^ i)) {
                wlog("GUARD large %s: byte %zu after the end was written", what[k], i);
                bad++;
                break;
            }
        if (bad) {
            wlog("MISMATCH large %s: %zu bad bytes", what[k], bad);
            c.failed_ops++;
        }
        c.checked++;
        tcheck = now_s() - tcheck;
        if (g_rank == 0)
            wlog("%s of %zu int8 in %.1f s (%.2f GB/s algorithm bandwidth); fill %.1f s, check %.1f s", what[k], bytes,
                 dt, (double)bytes / dt / 1e9, tfill, tcheck);
        tfill = 0;
    }
    munmap(buf, count + tail);
    write_checked(c.checked);
    return finish(&c, "large");
}

/* ---- errors ---- */

static int g_err_fail;

#define EXPECT_RC(call, want)                                                                      \
    do {                                                                                           \
        ring_result_t got_ = (call);                                                               \
        if (got_ != (want)) {                                                                      \
            wlog("line %d: %s returned %d (%s), expected %s", __LINE__, #call, (int)got_,           \
                 ring_result_name(got_) ? ring_result_name(got_) : "NULL", #want);                 \
            g_err_fail++;                                                                          \
        }                                                                                          \
    } while (0)

/* An argument error on a live communicator: the code, and an explanation left behind. */
#define EXPECT_ARG(comm, call)                                                                     \
    do {                                                                                           \
        EXPECT_RC(call, RING_ERR_INVALID_ARG);                                                     \
        const char *e_ = ring_comm_last_error(comm);                                               \
        if (!e_ || !*e_) {                                                                         \
            wlog("line %d: %s left no explanation in ring_comm_last_error", __LINE__, #call);     \
            g_err_fail++;                                                                          \
        }                                                                                          \
    } while (0)

static int scenario_errors(uint64_t seed)
{
    /* Names and descriptions come from the same X-list as the header: compare to it. */
    static const struct {
        ring_result_t code;
        const char *name, *desc;
    } codes[] = {
#define X(name, value, desc) {name, #name, desc},
        RING_RESULT_LIST(X)
#undef X
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = ring_strerror(codes[i].code), *nm = ring_result_name(codes[i].code);
        if (!s || strcmp(s, codes[i].desc) || !nm || strcmp(nm, codes[i].name)) {
            wlog("ring_strerror/ring_result_name(%d) = \"%s\"/\"%s\", expected \"%s\"/\"%s\"", (int)codes[i].code,
                 s ? s : "NULL", nm ? nm : "NULL", codes[i].desc, codes[i].name);
            g_err_fail++;
        }
    }
    const int unknown[] = {-1, 13, 99, 1 << 30};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        if (!ring_strerror((ring_result_t)unknown[i]) || !ring_result_name((ring_result_t)unknown[i])) {
            wlog("ring_strerror/ring_result_name(%d) returned NULL for an unknown code", unknown[i]);
            g_err_fail++;
        }
    if (ring_version() != RING_VERSION_CODE) {
        wlog("ring_version() = %d, header says %d", ring_version(), RING_VERSION_CODE);
        g_err_fail++;
    }
    for (int d = 0; d < RING_DTYPE_COUNT; d++)
        if (ring_dtype_size((ring_dtype_t)d) != ref_dtype_size((ring_dtype_t)d)) {
            wlog("ring_dtype_size(%s) = %zu, expected %zu", ref_dtype_name((ring_dtype_t)d),
                 ring_dtype_size((ring_dtype_t)d), ref_dtype_size((ring_dtype_t)d));
            g_err_fail++;
        }
    if (ring_dtype_size((ring_dtype_t)99) != 0 || ring_dtype_size(RING_DTYPE_COUNT) != 0) {
        wlog("ring_dtype_size of an invalid dtype is not 0");
        g_err_fail++;
    }
    if (ring_comm_rank(NULL) != -1 || ring_comm_nranks(NULL) != -1) {
        wlog("ring_comm_rank/nranks(NULL) != -1");
        g_err_fail++;
    }
    EXPECT_RC(ring_config_init(NULL), RING_ERR_INVALID_ARG);
    ring_comm_destroy(NULL); /* documented as safe; the code it returns is not specified */

    int32_t buf[64] = {0}, buf2[64] = {0};
    ring_request_t *req = NULL;
    int done = 0;

    /* NULL communicator */
    EXPECT_RC(ring_allreduce(NULL, buf, buf2, 4, RING_INT32, RING_SUM), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_reduce_scatter(NULL, buf, buf2, 2, RING_INT32, RING_SUM), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_allgather(NULL, buf, buf2, 2, RING_INT32), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_broadcast(NULL, buf, 4, RING_INT32, 0), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_barrier(NULL), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_allreduce_async(NULL, buf, buf2, 4, RING_INT32, RING_SUM, &req), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_reduce_scatter_async(NULL, buf, buf2, 2, RING_INT32, RING_SUM, &req), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_allgather_async(NULL, buf, buf2, 2, RING_INT32, &req), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_broadcast_async(NULL, buf, 4, RING_INT32, 0, &req), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_barrier_async(NULL, &req), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_wait(NULL), RING_ERR_INVALID_ARG);
    EXPECT_RC(ring_test(NULL, &done), RING_ERR_INVALID_ARG);

    ctx_t c = make_ctx(init_comm_env(), seed, "");
    ring_comm_t *comm = c.comm;
    const int n = c.n;

    /* Rank 0 makes many more bad calls than the others: if any of them reached the wire or
     * the queue, the ranks' sequences would no longer match and the valid calls below fail. */
    int reps = c.rank == 0 ? 3 : 1;
    for (int rep = 0; rep < reps; rep++) {
        /* NULL buffers with count > 0 */
        EXPECT_ARG(comm, ring_allreduce(comm, NULL, buf2, 4, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_allreduce(comm, buf, NULL, 4, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_reduce_scatter(comm, NULL, buf2, 2, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_reduce_scatter(comm, buf, NULL, 2, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_allgather(comm, NULL, buf2, 2, RING_INT32));
        EXPECT_ARG(comm, ring_allgather(comm, buf, NULL, 2, RING_INT32));
        EXPECT_ARG(comm, ring_broadcast(comm, NULL, 4, RING_INT32, 0));
        EXPECT_ARG(comm, ring_allreduce_async(comm, NULL, buf2, 4, RING_INT32, RING_SUM, &req));
        EXPECT_ARG(comm, ring_reduce_scatter_async(comm, buf, NULL, 2, RING_INT32, RING_SUM, &req));
        EXPECT_ARG(comm, ring_allgather_async(comm, NULL, buf2, 2, RING_INT32, &req));
        EXPECT_ARG(comm, ring_broadcast_async(comm, NULL, 4, RING_INT32, 0, &req));
        /* NULL request pointer */
        EXPECT_ARG(comm, ring_allreduce_async(comm, buf, buf2, 4, RING_INT32, RING_SUM, NULL));
        EXPECT_ARG(comm, ring_reduce_scatter_async(comm, buf, buf2, 2, RING_INT32, RING_SUM, NULL));
        EXPECT_ARG(comm, ring_allgather_async(comm, buf, buf2, 2, RING_INT32, NULL));
        EXPECT_ARG(comm, ring_broadcast_async(comm, buf, 4, RING_INT32, 0, NULL));
        EXPECT_ARG(comm, ring_barrier_async(comm, NULL));
        /* invalid dtype / op */
        const ring_dtype_t bad_dt[] = {(ring_dtype_t)99, RING_DTYPE_COUNT, (ring_dtype_t)-1};
        for (size_t i = 0; i < 3; i++) {
            EXPECT_ARG(comm, ring_allreduce(comm, buf, buf2, 4, bad_dt[i], RING_SUM));
            EXPECT_ARG(comm, ring_reduce_scatter(comm, buf, buf2, 2, bad_dt[i], RING_SUM));
            EXPECT_ARG(comm, ring_allgather(comm, buf, buf2, 2, bad_dt[i]));
            EXPECT_ARG(comm, ring_broadcast(comm, buf, 4, bad_dt[i], 0));
            EXPECT_ARG(comm, ring_allreduce_async(comm, buf, buf2, 4, bad_dt[i], RING_SUM, &req));
        }
        const ring_op_t bad_op[] = {(ring_op_t)99, RING_OP_COUNT, (ring_op_t)-1};
        for (size_t i = 0; i < 3; i++) {
            EXPECT_ARG(comm, ring_allreduce(comm, buf, buf2, 4, RING_INT32, bad_op[i]));
            EXPECT_ARG(comm, ring_reduce_scatter(comm, buf, buf2, 2, RING_INT32, bad_op[i]));
            EXPECT_ARG(comm, ring_reduce_scatter_async(comm, buf, buf2, 2, RING_FLOAT32, bad_op[i], &req));
        }
        /* invalid root */
        EXPECT_ARG(comm, ring_broadcast(comm, buf, 4, RING_INT32, -1));
        EXPECT_ARG(comm, ring_broadcast(comm, buf, 4, RING_INT32, n));
        EXPECT_ARG(comm, ring_broadcast_async(comm, buf, 4, RING_INT32, n + 5, &req));
        /* count * size (* nranks) overflowing size_t */
        EXPECT_ARG(comm, ring_allreduce(comm, buf, buf2, SIZE_MAX / 2, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_allreduce(comm, buf, buf, SIZE_MAX / 2, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_broadcast(comm, buf, SIZE_MAX / 2, RING_INT32, 0));
        EXPECT_ARG(comm, ring_reduce_scatter(comm, buf, buf2, SIZE_MAX / 2, RING_INT32, RING_SUM));
        EXPECT_ARG(comm, ring_allgather(comm, buf, buf2, SIZE_MAX / 2, RING_INT32));
        /* count*size fits but nranks*count*size does not */
        size_t per = SIZE_MAX / 4 / (size_t)n + 1;
        if (n > 1) {
            EXPECT_ARG(comm, ring_reduce_scatter(comm, buf, buf2, per, RING_INT32, RING_SUM));
            EXPECT_ARG(comm, ring_allgather(comm, buf, buf2, per, RING_INT32));
        }
        EXPECT_ARG(comm, ring_allreduce_async(comm, buf, buf2, SIZE_MAX / 2, RING_INT32, RING_SUM, &req));
    }
    if (g_err_fail) {
        wlog("%d argument checks failed", g_err_fail);
        c.failed_ops++;
    }
    c.checked++;

    /* The argument errors must not have failed the communicator: every collective works. */
    op_t *ops = mixed_schedule(n, seed, 30, 60, 3000);
    for (int coll = 0; coll < C_NCOLL; coll++) { /* one of each, at least */
        ops[coll].coll = coll;
        ops[coll].inplace = coll == C_BROADCAST ? 1 : ops[coll].inplace;
        ops[coll].dt = coll == C_BARRIER ? RING_UINT8 : ops[coll].dt;
    }
    ops[0].async = 0;
    rng_t sched = rng_make(seed, 31);
    run_ops(&c, ops, 60, &sched);
    write_checked(c.checked);
    if (g_rank == 0) wlog("checked %ld calls (argument checks + collectives)", c.checked);
    int rc = finish(&c, "errors");
    free(ops);
    return rc;
}

static int env_int(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > 1 << 20 ? -1 : (int)v;
}

/* ---- relaywait: rank 0's next call waits for the relay of a failure it recorded ---- */

/*
 * The last rank leaves without a word after a barrier (its sockets close: a death). Rank 0
 * records that, and its relay to the others is held (the harness sets
 * RING_TEST_RELAY_HOLD_MS); 100 ms later, while the relay is still held, rank 0 starts a new
 * call, which must fail only after the relay went out, and exits at once, as a program that
 * gives up at its first error does. The other ranks look 1.5 s later: their error must name
 * the last rank, not rank 0, whose exit they would see first had its call returned at once.
 * err.<rank> as write_err; every rank but the last writes one.
 */
static int scenario_relaywait(uint64_t seed)
{
    (void)seed;
    ring_comm_t *comm = init_comm_env();
    ring_result_t rc = ring_barrier(comm);
    if (rc != RING_OK) {
        wlog("the first barrier failed: %s: %s", ring_result_name(rc), ring_comm_last_error(comm));
        return EXIT_CHECK;
    }
    if (g_rank == g_nranks - 1) {
        write_checked(1);
        _exit(0);
    }
    sleep_us(g_rank == 0 ? 100000 : 1500000);
    rc = ring_barrier(comm);
    write_err(mono_ns(), rc, rc == RING_OK ? "" : ring_comm_last_error(comm));
    write_checked(1);
    if (rc == RING_OK) {
        wlog("the barrier after rank %d left succeeded", g_nranks - 1);
        return EXIT_CHECK;
    }
    if (g_rank == 0) exit(0);
    ring_comm_destroy(comm);
    return 0;
}

/* ---- rounds, ticking: communicators made one after another, a timer signal ---- */

/* Communicators made one after another in one process (elastic restarts, retries): four rounds
 * of init, a checked all-reduce and destroy. Init's errors are this scenario's (exit 2), not the
 * harness's retry on a root port in use. */
static int scenario_rounds(uint64_t seed)
{
    (void)seed;
    for (int round = 0; round < 4; round++) {
        ring_comm_t *comm = NULL;
        ring_result_t rc = ring_comm_init_env(&comm);
        if (rc != RING_OK) {
            wlog("round %d: init: %s: %s", round, ring_result_name(rc), ring_comm_last_error(comm));
            ring_comm_destroy(comm);
            return EXIT_LIB;
        }
        int64_t v[3] = {g_rank, round, 1}, want[3] = {(int64_t)g_nranks * (g_nranks - 1) / 2, (int64_t)round * g_nranks, g_nranks};
        rc = ring_allreduce(comm, v, v, 3, RING_INT64, RING_SUM);
        if (rc != RING_OK || memcmp(v, want, sizeof v)) {
            wlog("round %d: all-reduce: %s: %s", round, ring_result_name(rc), ring_comm_last_error(comm));
            return rc != RING_OK ? EXIT_LIB : EXIT_CHECK;
        }
        if ((rc = ring_comm_destroy(comm)) != RING_OK) {
            wlog("round %d: destroy: %s", round, ring_result_name(rc));
            return EXIT_LIB;
        }
    }
    write_checked(4);
    return 0;
}

static void tick(int sig) { (void)sig; }

/* A program with a periodic timer signal (a sampling profiler's SIGALRM or SIGPROF), every
 * RING_TEST_TICK_US (default 5000) with SA_RESTART, through init, collectives and destroy.
 * Run by netns_slow_root.sh over a link whose round trip is longer than the tick. */
static int scenario_ticking(uint64_t seed)
{
    (void)seed;
    const char *t = getenv("RING_TEST_TICK_US");
    long us = t && *t ? atol(t) : 5000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tick;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{us / 1000000, us % 1000000}, {us / 1000000, us % 1000000}};
    if (us > 0 && setitimer(ITIMER_REAL, &it, NULL) != 0) return EXIT_SETUP;
    ring_comm_t *comm = init_comm_env();
    int32_t in[97], out[97];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 97; i++) in[i] = g_rank * 1000 + i + round;
        ring_result_t rc = ring_allreduce(comm, in, out, 97, RING_INT32, RING_SUM);
        if (rc != RING_OK) {
            wlog("round %d: %s: %s", round, ring_result_name(rc), ring_comm_last_error(comm));
            return EXIT_LIB;
        }
        for (int i = 0; i < 97; i++) {
            int32_t want = (int32_t)(1000 * g_nranks * (g_nranks - 1) / 2 + g_nranks * (i + round));
            if (out[i] != want) {
                wlog("round %d element %d: %d, want %d", round, i, out[i], want);
                return EXIT_CHECK;
            }
        }
    }
    ring_result_t rc = ring_comm_destroy(comm);
    if (rc != RING_OK) {
        wlog("destroy: %s", ring_result_name(rc));
        return EXIT_LIB;
    }
    return 0;
}

/* ---- fpmode: the program's floating-point mode does not reach the results ---- */

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

/*
 * After init each rank sets flush-to-zero, denormals-are-zero, round toward zero and unmasked
 * overflow on its thread (as torch.set_flush_denormal does the first two), then sums
 * [tiny, 1, 3e38] with [tiny, 1.5 * 2^-24, 3e38] and zeros (67 elements): blocking, which runs on this
 * thread, and async behind another async call, which runs on the progress thread. Every result
 * must be the default mode's (2 tiny, 1 + 2^-23, inf, bit for bit, and no SIGFPE), and the
 * thread's own mode must be as it set it afterwards. Then the same on a second communicator
 * made while that mode was set, whose progress thread starts with it.
 */
static int scenario_fpmode(uint64_t seed)
{
    (void)seed;
#if defined(__x86_64__)
    enum { N = 67 };
    const float tiny = 0x1p-140f, x[3] = {tiny, 1.0f, 3.0e38f}, y[3] = {tiny, 0x1.8p-24f, 3.0e38f},
                want[3] = {0x1p-139f, 0x1.000002p0f, INFINITY};
    float *in = calloc(N, sizeof *in), *out = calloc(N, sizeof *out), *other = calloc(1 << 20, sizeof *other);
    if (!in || !out || !other) return EXIT_SETUP;
    for (int i = 0; i < N; i++) in[i] = g_rank == 0 ? x[i % 3] : g_rank == 1 ? y[i % 3] : 0.0f; /* sums exact in any order */
    const unsigned saved = _mm_getcsr(), mode = (0x1f80u | 0x8040u | 0x6000u) & ~0x400u;
    /* Set before init on the second communicator: its progress thread starts with this mode. */
    ring_comm_t *comm = NULL;
    long checked = 0;
    for (int pass = 0; pass < 4; pass++) {
        if (pass == 2) {
            ring_comm_destroy(comm);
            _mm_setcsr(mode);
            comm = init_comm_env();
            _mm_setcsr(saved);
        } else if (pass == 0) {
            comm = init_comm_env();
        }
        memset(out, 0, N * sizeof *out);
        _mm_setcsr(mode);
        ring_result_t rc;
        if (pass % 2 == 0) {
            rc = ring_allreduce(comm, in, out, N, RING_FLOAT32, RING_SUM);
        } else {
            ring_request_t *q1 = NULL, *q2 = NULL;
            rc = ring_allreduce_async(comm, other, other, 1 << 20, RING_FLOAT32, RING_SUM, &q1);
            if (rc == RING_OK) rc = ring_allreduce_async(comm, in, out, N, RING_FLOAT32, RING_SUM, &q2);
            if (q1) {
                ring_result_t w = ring_wait(q1);
                if (rc == RING_OK) rc = w;
            }
            if (q2) {
                ring_result_t w = ring_wait(q2);
                if (rc == RING_OK) rc = w;
            }
        }
        const unsigned after = _mm_getcsr();
        _mm_setcsr(saved);
        if (rc != RING_OK) {
            wlog("pass %d: %s: %s", pass, ring_result_name(rc), ring_comm_last_error(comm));
            return EXIT_CHECK;
        }
        if ((after & ~0x3fu) != mode) {
            wlog("pass %d: this thread's mode %#x came back as %#x", pass, mode, after);
            return EXIT_CHECK;
        }
        for (int i = 0; i < N; i++) {
            uint32_t g, w;
            memcpy(&g, &out[i], 4);
            memcpy(&w, &want[i % 3], 4);
            if (g != w) {
                wlog("pass %d (%s, mode set %s init) element %d: %#x, the default mode gives %#x", pass,
                     pass % 2 ? "progress thread" : "this thread", pass < 2 ? "after" : "before", i, g, w);
                return EXIT_CHECK;
            }
        }
        checked++;
    }
    ring_comm_destroy(comm);
    free(in);
    free(out);
    free(other);
    write_checked(checked);
    return 0;
#else
    wlog("x86-64 only");
    return EXIT_SETUP;
#endif
}

/* ---- initfail: ring_comm_init_env must fail (a configuration that cannot work) ---- */

/* Every rank must get an error, not a hang; it leaves err.<rank> = "<code> <message>" for the
 * harness to check the wording. */
static int scenario_initfail(uint64_t seed)
{
    (void)seed;
    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc == RING_OK) {
        wlog("ring_comm_init_env succeeded where it had to fail");
        ring_comm_destroy(comm);
        return EXIT_CHECK;
    }
    const char *msg = ring_comm_last_error(comm);
    if (!msg || !*msg) msg = ring_comm_last_error(NULL);
    char name[32], val[1200];
    snprintf(name, sizeof name, "err.%d", g_rank);
    snprintf(val, sizeof val, "%s %s\n", ring_result_name(rc), msg ? msg : "(null)");
    write_outfile(name, val);
    ring_comm_destroy(comm);
    write_checked(1);
    return 0;
}

/* ---- mismatch: the ranks' calls differ (the harness gives some ranks other settings) ---- */

/* One all-reduce of RING_TEST_COUNT float32 elements (the harness sets another count on some
 * ranks): every rank must fail it with an error, not hang until RING_TIMEOUT_MS, and leaves
 * err.<rank> = "<code> <milliseconds> <message>" for the harness to check. */
static int scenario_mismatch(uint64_t seed)
{
    (void)seed;
    const char *cs = getenv("RING_TEST_COUNT");
    size_t count = cs && *cs ? strtoull(cs, NULL, 10) : 0;
    if (!count) {
        wlog("RING_TEST_COUNT is not set");
        return EXIT_SETUP;
    }
    ring_comm_t *comm = init_comm_env();
    float *buf = calloc(count, sizeof *buf);
    if (!buf) {
        wlog("out of memory for %zu elements", count);
        ring_comm_destroy(comm);
        return EXIT_SETUP;
    }
    double t0 = now_s();
    ring_result_t rc = ring_allreduce(comm, buf, buf, count, RING_FLOAT32, RING_SUM);
    double ms = (now_s() - t0) * 1e3;
    char name[32], val[1300];
    snprintf(name, sizeof name, "err.%d", g_rank);
    snprintf(val, sizeof val, "%s %.0f %s\n", ring_result_name(rc), ms, rc == RING_OK ? "" : ring_comm_last_error(comm));
    write_outfile(name, val);
    wlog("allreduce(count=%zu): %s after %.0f ms", count, ring_result_name(rc), ms);
    free(buf);
    ring_comm_abort(comm);
    ring_comm_destroy(comm);
    write_checked(1);
    if (rc == RING_OK) {
        wlog("the all-reduce succeeded although the ranks' counts differ");
        return EXIT_CHECK;
    }
    return 0;
}

/* silent: joins, then never calls a collective until the harness kills it (a rank that is
 * alive but elsewhere: its peers' timeouts must say so, tests/rdma/suite.sh). */
static int scenario_silent(uint64_t seed)
{
    (void)seed;
    ring_comm_t *comm = init_comm_env();
    wlog("joined; silent until killed");
    for (int i = 0; i < 600; i++) {
        struct timespec ts = {0, 500 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ring_comm_destroy(comm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s matrix|float_random|special|threads|backtoback|barrier|large|errors|faults|initfail|mismatch|relaywait|fpmode|ticking|rounds|silent [seed]\n", argv[0]);
        return EXIT_SETUP;
    }
    g_scenario = argv[1];
    g_rank = env_int("RING_RANK");
    g_nranks = env_int("RING_NRANKS");
    if (g_rank < 0 || g_nranks < 1 || g_rank >= g_nranks) {
        wlog("RING_RANK / RING_NRANKS missing or invalid");
        return EXIT_SETUP;
    }
    uint64_t seed = argc == 3 ? strtoull(argv[2], NULL, 0) : 1;
    g_max_bytes = soak_env_size("RING_TEST_MAX_BYTES", 0);
    static const struct {
        const char *name;
        int (*fn)(uint64_t);
    } scenarios[] = {
        {"matrix", scenario_matrix},   {"float_random", scenario_float_random}, {"special", scenario_special}, {"threads", scenario_threads},
        {"backtoback", scenario_backtoback}, {"barrier", scenario_barrier},   {"large", scenario_large},
        {"errors", scenario_errors}, {"faults", scenario_faults}, {"initfail", scenario_initfail},
        {"mismatch", scenario_mismatch}, {"relaywait", scenario_relaywait},
        {"fpmode", scenario_fpmode}, {"ticking", scenario_ticking}, {"rounds", scenario_rounds},
        {"silent", scenario_silent}, {"rebuild", scenario_rebuild},
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (!strcmp(argv[1], scenarios[i].name)) return scenarios[i].fn(seed);
    wlog("unknown scenario");
    return EXIT_SETUP;
}
