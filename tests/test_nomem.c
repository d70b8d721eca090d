/*
 * Out of memory, at every allocation in turn (RING_ERR_NOMEM), and out of the other resources
 * at every system call that takes one. The binary links with --wrap for malloc, calloc,
 * realloc, aligned_alloc and posix_memalign, and for socket, accept4, bind, listen, eventfd,
 * mmap, open, ftruncate, posix_fallocate and pthread_create, so every such call the library
 * makes goes through this file. A job of 3 ranks, each a thread of this process on real
 * loopback sockets, runs init, every collective (sync and async), a buffer registration, an
 * abort and destroy. Round k fails the k-th call of one family (allocations, or those system
 * calls) of one rank (its own thread and the threads the library starts for it count as one
 * rank), once; the rounds go on until one in which the rank made fewer than k, so every call
 * site those calls reach has failed once. A failed system call fails with the errno of a
 * system out of that resource (EMFILE, ENOMEM, EAGAIN, ENOSPC, EADDRINUSE).
 *
 * What every round must show:
 *  - every rank returns from every call: no hang, no crash (ASan builds: no leak either, and no
 *    use of a NULL the library did not check);
 *  - a rank whose allocation failed returns RING_ERR_NOMEM from the call that needed it, and
 *    one whose system call failed an error whose text carries that errno's, unless the call
 *    was optional (or retried) and every call still succeeded;
 *  - the other ranks fail too, with an error naming the failed rank or saying what failed,
 *    within the timeout and the cause grace (docs/reliability.md), never with wrong data;
 *  - every call that returned RING_OK left the right result;
 *  - where every call went through (the last round, or an allocation the library can do
 *    without), the victim still hears the others: the next rank aborts, and every rank's
 *    barrier fails saying so, well within the timeout (a watcher thread that could not get
 *    its memory used to end silently, and the rank ran on deaf);
 *  - after all rounds, no file descriptor or thread is left behind.
 * The rounds run over TCP and over shared memory, with the root (rank 0) failing and with the
 * last rank failing: the root's bootstrap and the shared page's owner differ from the others.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "clear_env.h"
#include "free_port.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcomm.h"

#define NR 3
#define TIMEOUT_MS 1500
/* A round may wait out the timeout (the root failed before it listened: the others retry
 * until then) and then the cause grace for a closed connection (4 s). */
#define ROUND_LIMIT_MS (TIMEOUT_MS + 4000 + 3000)
#define MAX_ROUNDS 3000

/* ---- the faults ------------------------------------------------------------------------------ */

/* Two families, counted apart: allocations, and the system calls that take a resource (an fd,
 * a mapping, a thread, disk space, a port) and fail when the system has none left. */
enum { FAM_ALLOC, FAM_SYS };

/* One countdown per rank; a thread points at its rank's, or at none. */
typedef struct fault {
    int family;
    atomic_long left;  /* calls of the family until the one that fails; <= 0: none to fail */
    atomic_long calls; /* calls of the family made while armed */
    atomic_int fired;
    void *site;       /* return address of the call that failed */
    const char *call; /* its name */
    int err;          /* the errno it failed with */
} fault_t;

static __thread fault_t *armed;

/* 1: fail this call, with errno = err. */
static int fail_now(int family, void *site, const char *call, int err)
{
    fault_t *f = armed;
    if (!f || f->family != family) return 0;
    atomic_fetch_add(&f->calls, 1);
    if (atomic_fetch_sub(&f->left, 1) != 1) return 0;
    f->site = site;
    f->call = call;
    f->err = err;
    atomic_store(&f->fired, 1);
    errno = err;
    return 1;
}
#define ALLOC_FAILS() fail_now(FAM_ALLOC, __builtin_return_address(0), "allocation", ENOMEM)
#define SYS_FAILS(call, err) fail_now(FAM_SYS, __builtin_return_address(0), call, err)

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

void *__wrap_malloc(size_t n) { return ALLOC_FAILS() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return ALLOC_FAILS() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return ALLOC_FAILS() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return ALLOC_FAILS() ? NULL : __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return ALLOC_FAILS() ? ENOMEM : __real_posix_memalign(p, a, n); }

/* Each with the errno a system out of that resource gives. */
int __real_socket(int d, int t, int p);
int __real_accept4(int fd, struct sockaddr *a, socklen_t *l, int fl);
int __real_bind(int fd, const struct sockaddr *a, socklen_t l);
int __real_listen(int fd, int n);
int __real_eventfd(unsigned v, int fl);
void *__real_mmap(void *a, size_t n, int prot, int fl, int fd, off_t off);
void *__real_mmap64(void *a, size_t n, int prot, int fl, int fd, off_t off);
int __real_open(const char *path, int fl, ...);
int __real_open64(const char *path, int fl, ...);
int __real_ftruncate(int fd, off_t n);
int __real_ftruncate64(int fd, off_t n);
int __real_posix_fallocate64(int fd, off_t off, off_t n);
int __wrap_socket(int d, int t, int p);
int __wrap_accept4(int fd, struct sockaddr *a, socklen_t *l, int fl);
int __wrap_bind(int fd, const struct sockaddr *a, socklen_t l);
int __wrap_listen(int fd, int n);
int __wrap_eventfd(unsigned v, int fl);
void *__wrap_mmap(void *a, size_t n, int prot, int fl, int fd, off_t off);
void *__wrap_mmap64(void *a, size_t n, int prot, int fl, int fd, off_t off);
int __wrap_open(const char *path, int fl, ...);
int __wrap_open64(const char *path, int fl, ...);
int __wrap_ftruncate(int fd, off_t n);
int __wrap_ftruncate64(int fd, off_t n);
int __wrap_posix_fallocate64(int fd, off_t off, off_t n);

int __wrap_socket(int d, int t, int p) { return SYS_FAILS("socket", EMFILE) ? -1 : __real_socket(d, t, p); }
int __wrap_accept4(int fd, struct sockaddr *a, socklen_t *l, int fl)
{
    return SYS_FAILS("accept4", EMFILE) ? -1 : __real_accept4(fd, a, l, fl);
}
int __wrap_bind(int fd, const struct sockaddr *a, socklen_t l) { return SYS_FAILS("bind", EADDRINUSE) ? -1 : __real_bind(fd, a, l); }
int __wrap_listen(int fd, int n) { return SYS_FAILS("listen", EADDRINUSE) ? -1 : __real_listen(fd, n); }
int __wrap_eventfd(unsigned v, int fl) { return SYS_FAILS("eventfd", EMFILE) ? -1 : __real_eventfd(v, fl); }
void *__wrap_mmap(void *a, size_t n, int prot, int fl, int fd, off_t off)
{
    return SYS_FAILS("mmap", ENOMEM) ? MAP_FAILED : __real_mmap(a, n, prot, fl, fd, off);
}
void *__wrap_mmap64(void *a, size_t n, int prot, int fl, int fd, off_t off)
{
    return SYS_FAILS("mmap", ENOMEM) ? MAP_FAILED : __real_mmap64(a, n, prot, fl, fd, off);
}
static mode_t mode_arg(int fl, va_list ap) { return (fl & O_CREAT) || (fl & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0; }
int __wrap_open(const char *path, int fl, ...)
{
    va_list ap;
    va_start(ap, fl);
    mode_t m = mode_arg(fl, ap);
    va_end(ap);
    return SYS_FAILS("open", EMFILE) ? -1 : __real_open(path, fl, m);
}
int __wrap_open64(const char *path, int fl, ...)
{
    va_list ap;
    va_start(ap, fl);
    mode_t m = mode_arg(fl, ap);
    va_end(ap);
    return SYS_FAILS("open", EMFILE) ? -1 : __real_open64(path, fl, m);
}
int __wrap_ftruncate(int fd, off_t n) { return SYS_FAILS("ftruncate", ENOSPC) ? -1 : __real_ftruncate(fd, n); }
int __wrap_ftruncate64(int fd, off_t n) { return SYS_FAILS("ftruncate", ENOSPC) ? -1 : __real_ftruncate64(fd, n); }
int __wrap_posix_fallocate64(int fd, off_t off, off_t n)
{
    return SYS_FAILS("posix_fallocate", ENOSPC) ? ENOSPC : __real_posix_fallocate64(fd, off, n);
}

/* The threads the library starts for a rank (progress, watcher) count as that rank. */
typedef struct tramp {
    void *(*fn)(void *);
    void *arg;
    fault_t *armed;
} tramp_t;

static void *tramp_main(void *p)
{
    tramp_t t = *(tramp_t *)p;
    free(p);
    armed = t.armed;
    return t.fn(t.arg);
}

int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (SYS_FAILS("pthread_create", EAGAIN)) return EAGAIN;
    tramp_t *p = __real_malloc(sizeof *p);
    if (!p) return EAGAIN;
    *p = (tramp_t){fn, arg, armed};
    int e = __real_pthread_create(t, attr, tramp_main, p);
    if (e) free(p);
    return e;
}

/* ---- a rank's calls ----------------------------------------------------------------------- */

enum { S_INIT, S_AR_LARGE, S_AR_SMALL, S_RS, S_AG, S_BC, S_BARRIER, S_AR_ASYNC, S_BC_ASYNC, S_REG, S_ABORT, S_DESTROY, S_N };
static const char *const step_name[S_N] = {"init",      "allreduce (large)", "allreduce (small)", "reduce_scatter",
                                           "allgather", "broadcast",         "barrier",           "allreduce_async",
                                           "broadcast_async", "register + allreduce", "abort + barrier", "destroy"};

#define LARGE 100003 /* several 64 KiB chunks of int32, not divisible by 3 */
#define SMALL 5
#define RS 1001
#define AG 777
#define BC 3001
#define ASYNC 20011

typedef struct rank_arg {
    int rank, port;
    int aborter;          /* this rank calls ring_comm_abort in the last step */
    atomic_int *at_abort; /* ranks past their calls, shared by the round's ranks */
    fault_t *fault; /* NULL: this rank's allocations all succeed */
    ring_result_t rc[S_N];
    int ran[S_N];
    size_t wrong[S_N];
    int first_fail; /* step, or -1 */
    char msg[512];  /* the first failure's text */
    char abort_msg[512];
    pthread_t t;
    atomic_int done;
} rank_arg;

static int32_t val(int rank, size_t i, int salt) { return (int32_t)((rank + 1) * (int)(i % 977 + 1) + salt); }
static int32_t sum(size_t i, int salt)
{
    int32_t s = 0;
    for (int r = 0; r < NR; r++) s += val(r, i, salt);
    return s;
}

/* The step's call on buffers made before arming (a failed test allocation is not the
 * library's); returns wrong elements through *wrong. */
static ring_result_t step(ring_comm_t *c, int s, int rank, int32_t *a, int32_t *b, float *f, size_t *wrong)
{
    ring_result_t rc = RING_OK;
    ring_request_t *q = NULL;
    *wrong = 0;
    switch (s) {
    case S_AR_LARGE:
    case S_REG: {
        ring_reg_t *h = NULL;
        for (size_t i = 0; i < LARGE; i++) a[i] = val(rank, i, s);
        if (s == S_REG) rc = ring_comm_register(c, a, LARGE * sizeof *a, &h);
        if (rc == RING_OK) rc = ring_allreduce(c, a, a, LARGE, RING_INT32, RING_SUM);
        for (size_t i = 0; rc == RING_OK && i < LARGE; i++) *wrong += a[i] != sum(i, s);
        if (h) {
            ring_result_t d = ring_comm_deregister(c, h);
            if (rc == RING_OK) rc = d;
        }
        break;
    }
    case S_AR_SMALL:
        for (size_t i = 0; i < SMALL; i++) f[i] = (float)(rank + 1) * 0.5f;
        rc = ring_allreduce(c, f, f, SMALL, RING_FLOAT32, RING_SUM);
        for (size_t i = 0; rc == RING_OK && i < SMALL; i++) *wrong += f[i] != 0.5f * NR * (NR + 1) / 2;
        break;
    case S_RS:
        for (size_t i = 0; i < (size_t)RS * NR; i++) a[i] = val(rank, i, s);
        rc = ring_reduce_scatter(c, a, b, RS, RING_INT32, RING_SUM);
        for (size_t i = 0; rc == RING_OK && i < RS; i++) *wrong += b[i] != sum((size_t)rank * RS + i, s);
        break;
    case S_AG:
        for (size_t i = 0; i < AG; i++) a[i] = val(rank, i, s);
        rc = ring_allgather(c, a, b, AG, RING_INT32);
        for (size_t i = 0; rc == RING_OK && i < (size_t)AG * NR; i++) *wrong += b[i] != val((int)(i / AG), i % AG, s);
        break;
    case S_BC:
    case S_BC_ASYNC:
        for (size_t i = 0; i < BC; i++) a[i] = val(rank, i, s);
        rc = s == S_BC ? ring_broadcast(c, a, BC, RING_INT32, 1) : ring_broadcast_async(c, a, BC, RING_INT32, 2, &q);
        if (rc == RING_OK && q) rc = ring_wait(q);
        for (size_t i = 0; rc == RING_OK && i < BC; i++) *wrong += a[i] != val(s == S_BC ? 1 : 2, i, s);
        break;
    case S_BARRIER: rc = ring_barrier(c); break;
    case S_AR_ASYNC:
        for (size_t i = 0; i < ASYNC; i++) a[i] = val(rank, i, s);
        rc = ring_allreduce_async(c, a, b, ASYNC, RING_INT32, RING_SUM, &q);
        if (rc == RING_OK) rc = ring_wait(q);
        for (size_t i = 0; rc == RING_OK && i < ASYNC; i++) *wrong += b[i] != sum(i, s);
        break;
    default: break;
    }
    return rc;
}

static void *rank_main(void *p)
{
    rank_arg *r = p;
    size_t big = (size_t)LARGE > (size_t)RS * NR ? LARGE : (size_t)RS * NR;
    int32_t *a = malloc(big * sizeof *a), *b = malloc(big * sizeof *b);
    float *f = malloc(SMALL * sizeof *f);
    ring_comm_t *c = NULL;
    char root[64];
    snprintf(root, sizeof root, "127.0.0.1:%d", r->port);
    ring_config_t cfg;
    ring_config_init(&cfg);
    cfg.timeout_ms = TIMEOUT_MS;
    cfg.secret = "nomem-test-secret";
    cfg.chunk_bytes = 64 << 10;
    r->first_fail = -1;
    armed = r->fault;
    for (int s = 0; s < S_N && a && b && f; s++) {
        if (s == S_INIT) {
            r->rc[s] = ring_comm_init_config(&c, NR, r->rank, root, &cfg);
        } else if (s == S_DESTROY) {
            r->rc[s] = c ? ring_comm_destroy(c) : RING_OK;
        } else if (s == S_ABORT) {
            /* Where every call went through: one rank aborts, and the others' barrier must
             * hear why from the star, which only a working watcher thread passes on. */
            atomic_fetch_add(r->at_abort, 1);
            if (r->first_fail >= 0) continue;
            /* Not before every rank returned from its last call, which the abort would fail. */
            for (int i = 0; i < 5000 && atomic_load(r->at_abort) < NR; i++) usleep(1000);
            if (r->aborter) ring_comm_abort(c);
            r->rc[s] = ring_barrier(c);
            snprintf(r->abort_msg, sizeof r->abort_msg, "%s", ring_comm_last_error(c));
            r->ran[s] = 1;
            continue;
        } else if (r->first_fail < 0) {
            r->rc[s] = step(c, s, r->rank, a, b, f, &r->wrong[s]);
        } else {
            continue; /* after a failure: straight to destroy */
        }
        r->ran[s] = 1;
        if (r->rc[s] != RING_OK && r->first_fail < 0) {
            r->first_fail = s;
            /* init's text is thread-local when there is no communicator */
            snprintf(r->msg, sizeof r->msg, "%s", ring_comm_last_error(s == S_INIT ? NULL : c));
        }
    }
    armed = NULL;
    free(a);
    free(b);
    free(f);
    atomic_store(&r->done, 1);
    return NULL;
}

/* ---- the rounds ------------------------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s: %s", path, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* An allocation site as addr2line takes it: the binary and the offset in it. */
static const char *site_name(void *site, char *out, size_t len)
{
    Dl_info di;
    if (site && dladdr(site, &di) && di.dli_fname) {
        const char *b = strrchr(di.dli_fname, '/');
        snprintf(out, len, "%s+0x%lx", b ? b + 1 : di.dli_fname, (unsigned long)((char *)site - (char *)di.dli_fbase));
    } else {
        snprintf(out, len, "%p", site);
    }
    return out;
}

/* The others may wait out their timeout only for a rank that never joined the job: a root
 * that never listened, or a rank that never reached the root. */
static int never_joined(const char *msg)
{
    return strstr(msg, "could not reach the root") || strstr(msg, "missing rank(s)") ||
           strstr(msg, "waiting for the rank table");
}

/* Round k fails allocation k of rank `victim`; returns 0 once that rank made fewer than k. */
static int round_run(int family, long k, int victim, int *sites, void **site_seen, int max_sites)
{
    fault_t fault;
    fault.family = family;
    fault.call = NULL;
    fault.err = 0;
    atomic_init(&fault.left, k);
    atomic_init(&fault.calls, 0);
    atomic_init(&fault.fired, 0);
    fault.site = NULL;
    rank_arg ra[NR];
    atomic_int at_abort;
    atomic_init(&at_abort, 0);
    int port = free_port();
    double t0 = now_ms();
    for (int r = 0; r < NR; r++) {
        memset(&ra[r], 0, sizeof ra[r]);
        ra[r].rank = r;
        ra[r].port = port;
        ra[r].fault = r == victim ? &fault : NULL;
        ra[r].aborter = r == (victim + 1) % NR;
        ra[r].at_abort = &at_abort;
        cr_assert_eq(pthread_create(&ra[r].t, NULL, rank_main, &ra[r]), 0);
    }
    /* A rank that does not come back within the limit is a hang: name it and its step. */
    for (int r = 0; r < NR; r++) {
        while (!atomic_load(&ra[r].done) && now_ms() - t0 < ROUND_LIMIT_MS) usleep(2000);
        if (!atomic_load(&ra[r].done)) {
            int s = 0;
            while (s < S_N && ra[r].ran[s]) s++;
            cr_assert_fail("round %ld (call %ld of rank %d fails): rank %d still in %s after %.0f ms", k, k, victim, r,
                           s < S_N ? step_name[s] : "?", now_ms() - t0);
        }
        pthread_join(ra[r].t, NULL);
    }
    double ms = now_ms() - t0;
    int fired = atomic_load(&fault.fired);
    rank_arg *v = &ra[victim];

    for (int r = 0; r < NR; r++)
        for (int s = 0; s < S_N; s++)
            cr_assert_eq(ra[r].wrong[s], 0, "round %ld: rank %d's %s returned RING_OK with %zu wrong elements", k, r,
                         step_name[s], ra[r].wrong[s]);
    for (int r = 0; r < NR; r++)
        cr_assert_eq(ra[r].rc[S_DESTROY], RING_OK, "round %ld: rank %d: destroy: %s", k, r,
                     ring_result_name(ra[r].rc[S_DESTROY]));
    int all_ok = 1;
    for (int r = 0; r < NR; r++) all_ok &= ra[r].first_fail < 0;
    for (int r = 0; r < NR && all_ok; r++) {
        cr_assert_neq(ra[r].rc[S_ABORT], RING_OK, "round %ld: rank %d's barrier after rank %d's abort returned RING_OK", k, r,
                      (victim + 1) % NR);
        cr_assert(strstr(ra[r].abort_msg, "abort"), "round %ld: rank %d's barrier after rank %d's abort does not say so: %s: %s",
                  k, r, (victim + 1) % NR, ring_result_name(ra[r].rc[S_ABORT]), ra[r].abort_msg);
    }
    cr_assert(!all_ok || ms < TIMEOUT_MS * 0.8,
              "round %ld: the ranks took %.0f ms to see rank %d's abort (rank %d: %s)", k, ms, (victim + 1) % NR, victim,
              ra[victim].abort_msg);
    if (!fired) {
        for (int r = 0; r < NR; r++)
            cr_assert_eq(ra[r].first_fail, -1, "round %ld (no call failed): rank %d: %s: %s: %s", k, r,
                         step_name[ra[r].first_fail], ring_result_name(ra[r].rc[ra[r].first_fail]), ra[r].msg);
        cr_log_info("rank %d made %ld %s: every one failed once in the rounds before", victim, atomic_load(&fault.calls),
                    family == FAM_ALLOC ? "allocations" : "resource-taking system calls");
        return 0;
    }
    char sn[200], at[160];
    snprintf(sn, sizeof sn, "%s at %s", fault.call, site_name(fault.site, at, sizeof at));
    int new_site = 1;
    for (int i = 0; i < *sites; i++) new_site &= site_seen[i] != fault.site;
    if (new_site && *sites < max_sites) site_seen[(*sites)++] = fault.site;

    if (v->first_fail < 0) {
        /* A call the library can do without (or retries): then every rank must have done it all. */
        for (int r = 0; r < NR; r++)
            cr_assert_eq(ra[r].first_fail, -1, "round %ld: the victim (rank %d) went through, rank %d failed: %s: %s: %s", k,
                         victim, r, step_name[ra[r].first_fail], ring_result_name(ra[r].rc[ra[r].first_fail]),
                         ra[r].msg);
        if (new_site) cr_log_info("round %ld: %s failed, tolerated, every call right (%.0f ms)", k, sn, ms);
        return 1;
    }
    /* Out of memory is RING_ERR_NOMEM; a system call keeps its errno's text (the code is the
     * one its caller gives, e.g. RING_ERR_SYSTEM or RING_ERR_CONNECT). */
    if (family == FAM_ALLOC)
        cr_assert_eq(v->rc[v->first_fail], RING_ERR_NOMEM, "round %ld: rank %d's %s failed, and its %s returned %s: %s", k,
                     victim, sn, step_name[v->first_fail], ring_result_name(v->rc[v->first_fail]), v->msg);
    else
        cr_assert(strstr(v->msg, strerror(fault.err)), "round %ld: rank %d's %s failed (%s), and its %s returned %s: %s", k,
                  victim, sn, strerror(fault.err), step_name[v->first_fail], ring_result_name(v->rc[v->first_fail]),
                  v->msg);
    for (int r = 0; r < NR; r++) {
        if (r == victim) continue;
        /* A rank may finish a call the victim failed in only if the victim's failure came after
         * its own part (e.g. in the victim's last step); then its next call fails. Every rank
         * that ran on must fail somewhere, with a text that tells what happened. */
        if (ra[r].first_fail < 0) {
            cr_assert(v->first_fail == S_DESTROY || v->first_fail == S_REG,
                      "round %ld: rank %d failed in %s (%s) but rank %d saw no error", k, victim, step_name[v->first_fail],
                      v->msg, r);
            continue;
        }
        char name[32];
        snprintf(name, sizeof name, "rank %d", victim);
        cr_assert(strstr(ra[r].msg, name) || strstr(ra[r].msg, "out of memory") || strstr(ra[r].msg, "root") ||
                      strstr(ra[r].msg, strerror(family == FAM_ALLOC ? ENOMEM : fault.err)),
                  "round %ld: rank %d failed (%s in %s), rank %d's error does not say so: %s: %s", k, victim, v->msg,
                  step_name[v->first_fail], r, ring_result_name(ra[r].rc[ra[r].first_fail]), ra[r].msg);
    }
    int inherent = 0;
    for (int r = 0; r < NR; r++) inherent |= ra[r].first_fail >= 0 && never_joined(ra[r].msg);
    for (int r = 0; r < NR && !inherent; r++)
        cr_assert(ms < TIMEOUT_MS * 0.8 && (r == victim || ra[r].first_fail < 0 || ra[r].rc[ra[r].first_fail] != RING_ERR_TIMEOUT),
                  "round %ld (%.0f ms): rank %d failed (%s in %s: %s) and rank %d waited for it until its "
                  "timeout: %s: %s",
                  k, ms, victim, v->msg, step_name[v->first_fail], sn, r,
                  ra[r].first_fail < 0 ? "-" : ring_result_name(ra[r].rc[ra[r].first_fail]), ra[r].msg);
    if (new_site)
        cr_log_info("round %ld (%.0f ms): %s: rank %d: %s: %s; rank %d: %s", k, ms, sn, victim,
                    step_name[v->first_fail], v->msg, (victim + 1) % NR,
                    ra[(victim + 1) % NR].first_fail < 0 ? "went through" : ra[(victim + 1) % NR].msg);
    return 1;
}

static void every_call(int family, int victim, const char *transport)
{
    clear_ring_env();
    setenv("RING_TRANSPORT", transport, 1);
    int fds0 = count_dir("/proc/self/fd"), threads0 = count_dir("/proc/self/task");
    void *seen[512];
    int sites = 0;
    long k = 1;
    double t0 = now_ms();
    while (round_run(family, k, victim, &sites, seen, 512)) {
        k++;
        cr_assert(k <= MAX_ROUNDS, "more than %d calls in one round", MAX_ROUNDS);
    }
    /* The library's threads end by the time destroy returns; the kernel may take a moment to
     * drop a finished thread's task entry. */
    double t1 = now_ms();
    while ((count_dir("/proc/self/task") > threads0 || count_dir("/proc/self/fd") > fds0) && now_ms() - t1 < 2000)
        usleep(10000);
    cr_assert_eq(count_dir("/proc/self/fd"), fds0, "file descriptors left behind after %ld rounds", k);
    cr_assert_eq(count_dir("/proc/self/task"), threads0, "threads left behind after %ld rounds", k);
    cr_log_info("%s, rank %d failing: %ld rounds, %d distinct %s sites failed, %.1f s", transport, victim, k, sites,
                family == FAM_ALLOC ? "allocation" : "system call", (now_ms() - t0) / 1e3);
}

TestSuite(nomem, .timeout = 900);

Test(nomem, every_allocation_of_the_root_failing_in_turn_over_tcp) { every_call(FAM_ALLOC, 0, "tcp"); }
Test(nomem, every_allocation_of_the_last_rank_failing_in_turn_over_tcp) { every_call(FAM_ALLOC, NR - 1, "tcp"); }
Test(nomem, every_allocation_of_the_root_failing_in_turn_over_shared_memory) { every_call(FAM_ALLOC, 0, "shm"); }
Test(nomem, every_allocation_of_the_last_rank_failing_in_turn_over_shared_memory) { every_call(FAM_ALLOC, NR - 1, "shm"); }

/* Out of fds, mappings, threads, disk or ports: socket, accept4, bind, listen, eventfd, mmap,
 * open, ftruncate, posix_fallocate and pthread_create, each failing in turn. */
TestSuite(sysfail, .timeout = 900);

Test(sysfail, every_resource_call_of_the_root_failing_in_turn_over_tcp) { every_call(FAM_SYS, 0, "tcp"); }
Test(sysfail, every_resource_call_of_the_last_rank_failing_in_turn_over_tcp) { every_call(FAM_SYS, NR - 1, "tcp"); }
Test(sysfail, every_resource_call_of_the_root_failing_in_turn_over_shared_memory) { every_call(FAM_SYS, 0, "shm"); }
Test(sysfail, every_resource_call_of_the_last_rank_failing_in_turn_over_shared_memory) { every_call(FAM_SYS, NR - 1, "shm"); }
