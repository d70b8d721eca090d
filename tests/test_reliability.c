/*
 * Reliability and security of a running job (issue 4), with every rank a communicator on its
 * own thread of this process: real sockets on loopback, and the harness sees every rank's
 * return code, message and timing, and the process's own fds, threads and memory.
 *
 *  strangers  connections from outside the job (garbage, wrong-secret HELLO and handshakes,
 *             half-open and half-closed connections, port scans, slow loris) while 4 ranks
 *             join and run checked collectives: results stay right, nothing leaks. Ranks
 *             queued behind 64 silent strangers in a stopped root's backlog all join; a root
 *             out of file descriptors fails init at once, saying so.
 *  resources  10,000 init/destroy cycles, and pairs that fail (abort, timeout, a peer gone,
 *             init rejected), without fd, thread or memory growth.
 *  bad_input  every argument error of every call on a live pair is refused before anything
 *             is sent (the pair still agrees on the next allreduce); NULL and destroyed
 *             handles; calls after a failure fail fast with the first error's code.
 *  mismatch   every collective x every descriptor field: both ranks get RING_ERR_MISMATCH
 *             showing both calls; 4 ranks where only one far rank differs.
 *  timeout    the message names the collective, its sequence number and the peer.
 *  departure  a rank that destroys mid-collective is named by every rank; a peer that resets
 *             the connections made to it before taking them fails init at once.
 *  abort      a call in flight returns within 100 ms of ring_comm_abort from another thread.
 *  sm         the shared-memory all-reduce (3 ranks, medium sizes): it runs, and its waits on
 *             the shared page end in a timeout, an abort or a departure naming the rank; with
 *             no room for its page every rank leaves it out and the job runs.
 *
 * Criterion assertions only run on the test's own thread (they longjmp); rank threads record
 * what they saw and the test thread checks it. The suite runs with --jobs 1 (meson.build):
 * the latency and memory checks must not share the 2 CI cores with the other test cases.
 */
#include <criterion/criterion.h>

#include "clear_env.h"
#include "free_port.h"
#include <criterion/logging.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/inotify.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "engine.h"
#include "internal.h"
#include "p2p.h"
#include "param.h"
#include "transport.h"
#include "watch.h"
#include "wire.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define MAXR 8
#define SECRET "reliability-test-secret"

/* ---- process and time helpers ------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void clear_env(void)
{
    clear_ring_env();
    /* The reliability-tcp run: every pair on TCP (one-host pairs would take shared memory). */
    const char *tp = getenv("RING_TEST_TRANSPORT");
    if (tp && *tp) setenv("RING_TRANSPORT", tp, 1);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d, "/proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* A field of /proc/self/status ("Threads", "VmRSS" in kB). */
static long status_field(const char *key)
{
    FILE *f = fopen("/proc/self/status", "re");
    cr_assert_not_null(f, "/proc/self/status: %s", strerror(errno));
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    cr_assert(v >= 0, "no %s in /proc/self/status", key);
    return v;
}

/* Bytes malloc has handed out and not got back (every arena), where glibc can say. */
static long long heap_in_use(void)
{
#if !UNDER_SANITIZER && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#else
    return -1;
#endif
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- groups of ranks as threads ------------------------------------------------------------ */

/* Fault injection (test_reliability links with --wrap=pthread_create): the n-th thread that a
 * thread starts fails with EAGAIN, as it does when the process is out of threads. Init starts
 * the watcher first and then the progress thread, so 2 fails the progress thread. */
static __thread int fail_create_at;
/* Before it fails, the thread start waits (up to 10 s) until this many inits returned RING_OK
 * (inits_ok, counted by init_main): the other ranks must have finished init, or they may fail
 * in it too (a root still waiting for the shared page sees the rank's star connection close). */
static atomic_int fail_create_after, inits_ok;
int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (fail_create_at > 0 && --fail_create_at == 0) {
        for (int i = 0; i < 10000 && atomic_load(&inits_ok) < atomic_load(&fail_create_after); i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        return EAGAIN;
    }
    return __real_pthread_create(t, attr, fn, arg);
}

/* Fault injection (--wrap=open64): this thread opens the shared-memory all-reduce's page (a
 * name ending in "-sm") this many ms late, as a rank slow to get there would. */
static __thread int slow_page_ms;
int __real_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    size_t l = strlen(path);
    if (slow_page_ms > 0 && !(flags & O_CREAT) && l > 3 && !strcmp(path + l - 3, "-sm")) {
        struct timespec ts = {slow_page_ms / 1000, (long)(slow_page_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return __real_open64(path, flags, mode);
}

/* Fault injection (--wrap=posix_fallocate64): this thread (the root) gives the shared-memory
 * all-reduce's page its size, holds this many ms (the other ranks open it and wait for its
 * header), then reports the disk full, for this call and the one that would shrink the page
 * to a refusal: the root's init fails before it writes the header. */
static __thread int page_full_ms;
int __real_posix_fallocate64(int fd, off_t off, off_t len);
int __wrap_posix_fallocate64(int fd, off_t off, off_t len);
int __wrap_posix_fallocate64(int fd, off_t off, off_t len)
{
    int e = __real_posix_fallocate64(fd, off, len);
    char link[64], name[512];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t l = readlink(link, name, sizeof name - 1);
    if (page_full_ms == 0 || l < 3 || strncmp(name + l - 3, "-sm", 3) != 0) return e;
    if (page_full_ms > 0) {
        struct timespec ts = {page_full_ms / 1000, (long)(page_full_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        page_full_ms = -1; /* the next call, the shrink, fails at once */
    }
    return ENOSPC;
}

/* Fault injection (--wrap=write): this thread's log lines (any write longer than an eventfd's
 * 8 bytes) wait this many ms first, as a thread that loses its CPU there would: the abort
 * below has woken its call by then and goes on using the communicator afterwards. */
static __thread int slow_log_ms;
ssize_t __real_write(int fd, const void *buf, size_t len);
ssize_t __wrap_write(int fd, const void *buf, size_t len);
ssize_t __wrap_write(int fd, const void *buf, size_t len)
{
    if (slow_log_ms > 0 && len > 8) {
        struct timespec ts = {slow_log_ms / 1000, (long)(slow_log_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return __real_write(fd, buf, len);
}

typedef struct init_arg {
    int n, rank;
    int fail_create_at; /* 0, or which of init's thread starts fails */
    int slow_page_ms;   /* see __wrap_open64 */
    int page_full_ms;   /* see __wrap_posix_fallocate64 */
    char root[64];
    int timeout_ms;     /* 0: default */
    size_t then_bcast;  /* > 0: after init, a broadcast of this many floats from rank 1 */
    ring_result_t then_rc;
    char then_msg[RING__ERRMSG_MAX];
    const char *secret; /* NULL: SECRET */
    size_t chunk_bytes; /* 0: default */
    int depth;          /* 0: default */
    ring_comm_t *comm;
    ring_result_t rc;
    char msg[RING__ERRMSG_MAX];
    pthread_t t;
} init_arg;

static void *init_main(void *p)
{
    init_arg *a = p;
    ring_config_t cfg;
    ring_config_init(&cfg);
    if (a->timeout_ms) cfg.timeout_ms = a->timeout_ms;
    cfg.secret = a->secret ? a->secret : SECRET;
    if (a->chunk_bytes) cfg.chunk_bytes = a->chunk_bytes;
    if (a->depth) cfg.pipeline_depth = a->depth;
    fail_create_at = a->fail_create_at;
    slow_page_ms = a->slow_page_ms;
    page_full_ms = a->page_full_ms;
    a->rc = ring_comm_init_config(&a->comm, a->n, a->rank, a->root, &cfg);
    if (a->rc == RING_OK) atomic_fetch_add(&inits_ok, 1);
    /* The failure text of init is thread-local (or on the shell communicator). */
    snprintf(a->msg, sizeof a->msg, "%s", a->rc == RING_OK ? "" : ring_comm_last_error(a->comm ? a->comm : NULL));
    if (a->rc == RING_OK && a->then_bcast) {
        float *x = calloc(a->then_bcast, sizeof *x);
        a->then_rc = x ? ring_broadcast(a->comm, x, a->then_bcast, RING_FLOAT32, 1) : RING_ERR_NOMEM;
        snprintf(a->then_msg, sizeof a->then_msg, "%s", ring_comm_last_error(a->comm));
        free(x);
    }
    return NULL;
}

static void init_start(init_arg *a, int n, int rank, int port, int timeout_ms, const char *secret)
{
    *a = (init_arg){.n = n, .rank = rank, .timeout_ms = timeout_ms, .secret = secret};
    snprintf(a->root, sizeof a->root, "127.0.0.1:%d", port);
    cr_assert_eq(pthread_create(&a->t, NULL, init_main, a), 0);
}

/* n ranks of one job, their init_args filled in but for the root address: runs their inits
 * to the end and logs each result. */
static void inits_run(init_arg *a, int n)
{
    int port = free_port();
    atomic_store(&inits_ok, 0);
    atomic_store(&fail_create_after, 0);
    for (int r = 0; r < n; r++) {
        snprintf(a[r].root, sizeof a[r].root, "127.0.0.1:%d", port);
        cr_assert_eq(pthread_create(&a[r].t, NULL, init_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(a[r].t, NULL);
    for (int r = 0; r < n; r++)
        cr_log_info("rank %d: %s: %s", r, ring_result_name(a[r].rc), a[r].rc ? a[r].msg : "");
}

/* n ranks of one job; asserts that every one joined. */
/* n ranks of one job, rank r with timeout tmo[r]. */
static void group_init_each(ring_comm_t **c, int n, const int *tmo)
{
    init_arg a[MAXR];
    int port = free_port();
    for (int r = 0; r < n; r++) init_start(&a[r], n, r, port, tmo[r], NULL);
    for (int r = 0; r < n; r++) pthread_join(a[r].t, NULL);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d of %d: init: %s: %s", r, n, ring_result_name(a[r].rc), a[r].msg);
        c[r] = a[r].comm;
    }
}

static void group_init(ring_comm_t **c, int n, int timeout_ms)
{
    int tmo[MAXR];
    for (int r = 0; r < n; r++) tmo[r] = timeout_ms;
    group_init_each(c, n, tmo);
}

static void group_destroy(ring_comm_t **c, int n)
{
    for (int r = 0; r < n; r++) {
        ring_result_t rc = ring_comm_destroy(c[r]);
        cr_assert_eq(rc, RING_OK, "destroy rank %d: %s", r, ring_result_name(rc));
        c[r] = NULL;
    }
}

/* One collective call as a rank issues it; run by call_main on the rank's thread. */
typedef enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_BARRIER, K_N } kind_t;
static const char *const kind_name[K_N] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};

typedef struct call {
    ring_comm_t *comm;
    kind_t kind;
    size_t count;
    ring_dtype_t dt;
    ring_op_t op;
    int root;
    int async; /* _async + ring_wait: the progress thread runs it */
    ring_result_t rc;
    char msg[RING__ERRMSG_MAX];
    double t_start, t_end;
    pthread_t t;
} call_t;

static ring_result_t issue(ring_comm_t *c, kind_t k, const void *s, void *r, size_t count, ring_dtype_t dt,
                           ring_op_t op, int root, int async)
{
    ring_request_t *q = NULL;
    ring_result_t rc;
    switch (k) {
    case K_ALLREDUCE:
        rc = async ? ring_allreduce_async(c, s, r, count, dt, op, &q) : ring_allreduce(c, s, r, count, dt, op);
        break;
    case K_REDUCE_SCATTER:
        rc = async ? ring_reduce_scatter_async(c, s, r, count, dt, op, &q) : ring_reduce_scatter(c, s, r, count, dt, op);
        break;
    case K_ALLGATHER: rc = async ? ring_allgather_async(c, s, r, count, dt, &q) : ring_allgather(c, s, r, count, dt); break;
    case K_BROADCAST: rc = async ? ring_broadcast_async(c, r, count, dt, root, &q) : ring_broadcast(c, r, count, dt, root); break;
    default: rc = async ? ring_barrier_async(c, &q) : ring_barrier(c); break;
    }
    if (async && rc == RING_OK) rc = ring_wait(q);
    return rc;
}

static void *call_main(void *p)
{
    call_t *c = p;
    int n = ring_comm_nranks(c->comm);
    size_t bytes = (c->count ? c->count : 1) * 8 * (size_t)(n > 0 ? n : 1);
    char *s = calloc(1, bytes), *r = calloc(1, bytes);
    c->t_start = now_ms();
    c->rc = s && r ? issue(c->comm, c->kind, s, r, c->count, c->dt, c->op, c->root, c->async) : RING_ERR_NOMEM;
    c->t_end = now_ms();
    snprintf(c->msg, sizeof c->msg, "%s", ring_comm_last_error(c->comm));
    free(s);
    free(r);
    return NULL;
}

static void call_start(call_t *c) { cr_assert_eq(pthread_create(&c->t, NULL, call_main, c), 0); }

static void run_calls(call_t *calls, int n)
{
    for (int i = 0; i < n; i++) call_start(&calls[i]);
    for (int i = 0; i < n; i++) pthread_join(calls[i].t, NULL);
}

/* Every rank allreduces int32 sums of known values in place; 0 if every element is right. */
typedef struct check_arg {
    ring_comm_t *comm;
    size_t count;
    int salt;
    ring_result_t rc;
    size_t bad;
    char msg[RING__ERRMSG_MAX];
    pthread_t t;
} check_arg;

static void *check_main(void *p)
{
    check_arg *a = p;
    int r = ring_comm_rank(a->comm), n = ring_comm_nranks(a->comm);
    int32_t *b = malloc((a->count ? a->count : 1) * sizeof *b);
    if (!b) {
        a->rc = RING_ERR_NOMEM;
        return NULL;
    }
    for (size_t j = 0; j < a->count; j++) b[j] = (int32_t)((r + 1) * (int)(j % 1000 + 1) + a->salt);
    a->rc = ring_allreduce(a->comm, b, b, a->count, RING_INT32, RING_SUM);
    if (a->rc != RING_OK) snprintf(a->msg, sizeof a->msg, "%s", ring_comm_last_error(a->comm));
    a->bad = 0;
    for (size_t j = 0; a->rc == RING_OK && j < a->count; j++)
        a->bad += b[j] != (int32_t)(n * (n + 1) / 2 * (int)(j % 1000 + 1) + n * a->salt);
    free(b);
    return NULL;
}

static void assert_group_works(ring_comm_t **c, int n, size_t count, const char *after)
{
    static int salt;
    check_arg a[MAXR];
    salt++;
    for (int r = 0; r < n; r++) {
        a[r] = (check_arg){.comm = c[r], .count = count, .salt = salt};
        cr_assert_eq(pthread_create(&a[r].t, NULL, check_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(a[r].t, NULL);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "after %s: rank %d's next allreduce failed: %s: %s", after, r,
                     ring_result_name(a[r].rc), a[r].msg);
        cr_assert_eq(a[r].bad, 0, "after %s: rank %d's next allreduce has %zu wrong elements", after, r, a[r].bad);
    }
}

/* Wait (bounded) until the star told comm about another rank's failure. */
static int wait_remote_failed(ring_comm_t *c, int ms)
{
    double until = now_ms() + ms;
    while (!atomic_load(&c->remote_failed) && now_ms() < until) sleep_ms(2);
    return atomic_load(&c->remote_failed);
}

/* ================================================================================================
 * a. Strangers while a job runs
 * ============================================================================================= */

/* The bootstrap's REJECT reply (bootstrap.c): "RGBT" | type 2 | nranks | code | nonce, reason. */
#define BS_REPLY_MAGIC 0x52474254u
#define BS_TYPE_REJECT 2u
/* The data connection handshake (tcp.c): "RGDH" | version 1 | nsocks<<16 | secret | rank | index | nonce. */
#define DATA_HS_MAGIC 0x52474448u

typedef struct target {
    struct sockaddr_storage ss;
    socklen_t len;
} target_t;

static void data_hs_build(unsigned char h[RING__TCP_HS_LEN], uint32_t magic, const uint8_t secret[16], uint64_t nonce,
                          int nsocks, uint32_t rank, uint32_t idx)
{
    ring__put32(h, magic);
    ring__put32(h + 4, RING__TCP_VERSION | (uint32_t)nsocks << 16);
    memcpy(h + 8, secret, 16);
    ring__put32(h + 24, rank);
    ring__put32(h + 28, idx);
    ring__put64(h + 32, nonce);
}

/* Non-blocking connect with a bound: a listener whose backlog is full must not hang us. */
static int stranger_connect(const target_t *t, int timeout_ms)
{
    int fd = socket(t->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)&t->ss, t->len) != 0) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t l = sizeof err;
        if (errno != EINPROGRESS || poll(&pf, 1, timeout_ms) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static int send_bytes(int fd, const void *b, size_t n)
{
    const char *p = b;
    double until = now_ms() + 1000;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EINTR) return -1;
        if (now_ms() > until) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 10);
    }
    return 0;
}

/* Read until the other side closes (1) or stop/timeout (0); keeps the first bytes in cap. */
static int wait_closed(int fd, int timeout_ms, atomic_int *stop, unsigned char *cap, size_t caplen, size_t *got)
{
    double until = now_ms() + timeout_ms;
    size_t have = 0;
    for (;;) {
        unsigned char b[512];
        ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
        if (k > 0) {
            size_t take = cap && have < caplen ? RING__MIN((size_t)k, caplen - have) : 0;
            if (take) memcpy(cap + have, b, take);
            have += take;
            continue;
        }
        if (now_ms() > until || (stop && atomic_load(stop))) {
            if (got) *got = have;
            return 0;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
        poll(&pf, 1, 20);
    }
    if (got) *got = have;
    return 1;
}

typedef struct strangers {
    atomic_int stop;
    int n;
    target_t root;
    atomic_int data_ready;
    target_t data[MAXR];
    int accepts[MAXR]; /* rank r accepts a new data connection during the job (p2p_connect) */
    uint8_t secret[16], wrong[16];
    uint64_t nonce;
    int nsocks;
    ring__peer_info_t fake; /* a plausible address block for forged HELLOs */

    atomic_int root_rejects;   /* REJECT replies that name the wrong secret */
    atomic_int root_closed;    /* garbage connections the root closed */
    atomic_int root_held;      /* silent, truncated and half-closed connections held open */
    atomic_int loris_bytes;    /* bytes trickled */
    atomic_int scans;          /* connect+close */
    atomic_int data_held;      /* silent connections held on data listeners */
    atomic_int data_sent;      /* forged handshakes sent */
    atomic_int data_rejected[MAXR]; /* forged handshakes closed by rank r's listener */
    int forged_per_rank;
} strangers_t;

static int stopped(strangers_t *s) { return atomic_load(&s->stop); }

/* Garbage to the root: 300 bytes that are not a HELLO; the root must close the connection. */
static void *root_garbage_main(void *p)
{
    strangers_t *s = p;
    unsigned x = 12345;
    while (!stopped(s)) {
        int fd = stranger_connect(&s->root, 200);
        if (fd < 0) {
            sleep_ms(5);
            continue;
        }
        unsigned char junk[300];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
        junk[0] = 'G'; /* never the HELLO magic */
        if (send_bytes(fd, junk, sizeof junk) == 0 && wait_closed(fd, 3000, &s->stop, NULL, 0, NULL))
            atomic_fetch_add(&s->root_closed, 1);
        close(fd);
        sleep_ms(20);
    }
    return NULL;
}

/* Well-formed HELLOs with the wrong secret, claiming ranks that have not joined yet. */
static void *root_badhello_main(void *p)
{
    strangers_t *s = p;
    for (uint32_t i = 0; !stopped(s); i++) {
        int fd = stranger_connect(&s->root, 200);
        if (fd < 0) {
            sleep_ms(5);
            continue;
        }
        unsigned char hello[RING__HELLO_LEN], reply[RING__TABLE_HDR_LEN + RING__REJECT_MSG_LEN];
        ring__hello_build(hello, s->wrong, 1 + i % (uint32_t)(s->n - 1), (uint32_t)s->n, &s->fake);
        size_t got = 0;
        memset(reply, 0, sizeof reply);
        if (send_bytes(fd, hello, sizeof hello) == 0 && wait_closed(fd, 3000, &s->stop, reply, sizeof reply, &got) &&
            got == sizeof reply && ring__get32(reply) == BS_REPLY_MAGIC && ring__get32(reply + 4) == BS_TYPE_REJECT &&
            ring__get32(reply + 12) == RING_ERR_AUTH) {
            reply[sizeof reply - 1] = '\0';
            if (strstr((char *)reply + RING__TABLE_HDR_LEN, "secret")) atomic_fetch_add(&s->root_rejects, 1);
        }
        close(fd);
        sleep_ms(20);
    }
    return NULL;
}

/* Connections that never finish: 2 silent, 2 with the first 100 bytes of a HELLO carrying the
 * right secret, 2 that send 100 bytes and shut down their sending side (half-closed). */
static void *root_holders_main(void *p)
{
    strangers_t *s = p;
    int fds[6];
    for (int i = 0; i < 6; i++) {
        fds[i] = -1;
        while (fds[i] < 0 && !stopped(s)) {
            fds[i] = stranger_connect(&s->root, 200);
            if (fds[i] < 0) sleep_ms(5);
        }
        if (fds[i] < 0) break;
        if (i >= 2) {
            unsigned char hello[RING__HELLO_LEN];
            ring__hello_build(hello, s->secret, 1, (uint32_t)s->n, &s->fake);
            send_bytes(fds[i], hello, 100);
            if (i >= 4) shutdown(fds[i], SHUT_WR);
        }
        atomic_fetch_add(&s->root_held, 1);
    }
    while (!stopped(s)) sleep_ms(10);
    for (int i = 0; i < 6; i++)
        if (fds[i] >= 0) close(fds[i]);
    return NULL;
}

/* Slow loris: one byte of a HELLO (root) or handshake (data) every 50 ms, reconnecting when
 * dropped, on the root and on every data listener. */
static void *loris_main(void *p)
{
    strangers_t *s = p;
    int fd[1 + MAXR];
    size_t pos[1 + MAXR];
    unsigned char hello[RING__HELLO_LEN], hs[RING__TCP_HS_LEN];
    ring__hello_build(hello, s->secret, 1, (uint32_t)s->n, &s->fake);
    for (int i = 0; i <= MAXR; i++) fd[i] = -1, pos[i] = 0;
    while (!stopped(s)) {
        int ntargets = atomic_load(&s->data_ready) ? 1 + s->n : 1;
        if (ntargets > 1) data_hs_build(hs, DATA_HS_MAGIC, s->secret, s->nonce, s->nsocks, 1, 0);
        for (int i = 0; i < ntargets; i++) {
            const target_t *t = i == 0 ? &s->root : &s->data[i - 1];
            const unsigned char *msg = i == 0 ? hello : hs;
            size_t len = i == 0 ? sizeof hello : sizeof hs;
            if (fd[i] < 0) {
                fd[i] = stranger_connect(t, 100);
                pos[i] = 0;
                if (fd[i] < 0) continue;
            }
            /* Never the last byte: the message stays incomplete for as long as we trickle. */
            if (pos[i] + 1 < len && send(fd[i], msg + pos[i], 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
                pos[i]++;
                atomic_fetch_add(&s->loris_bytes, 1);
            } else if (pos[i] + 1 < len) {
                close(fd[i]);
                fd[i] = -1;
            }
        }
        sleep_ms(50);
    }
    for (int i = 0; i <= MAXR; i++)
        if (fd[i] >= 0) close(fd[i]);
    return NULL;
}

/* Port scan: connect and close at once, on the root and every data listener. Capped, so that
 * listeners nobody accepts on (the root after init) do not fill up and slow the test. */
static void *scan_main(void *p)
{
    strangers_t *s = p;
    int per[1 + MAXR] = {0};
    while (!stopped(s)) {
        int ntargets = atomic_load(&s->data_ready) ? 1 + s->n : 1;
        for (int i = 0; i < ntargets; i++) {
            if (per[i] >= 150) continue;
            int fd = stranger_connect(i == 0 ? &s->root : &s->data[i - 1], 50);
            if (fd >= 0) {
                close(fd);
                per[i]++;
                atomic_fetch_add(&s->scans, 1);
            }
        }
        sleep_ms(3);
    }
    return NULL;
}

/* On every data listener: 2 silent connections, and forged handshakes that differ from a valid
 * one in one field each (secret, nonce, sender rank, magic) plus a truncated one. A listener
 * that accepts during the job must close every complete forgery. */
static void *data_strangers_main(void *p)
{
    strangers_t *s = p;
    enum { NFORGE = 5, NSILENT = 2 };
    int fds[MAXR][NFORGE + NSILENT];
    for (int r = 0; r < s->n; r++)
        for (int k = 0; k < NFORGE + NSILENT; k++) fds[r][k] = -1;
    for (int r = 0; r < s->n; r++) {
        for (int k = 0; k < NFORGE + NSILENT; k++) {
            fds[r][k] = stranger_connect(&s->data[r], 1000);
            if (fds[r][k] < 0) continue;
            if (k >= NFORGE) {
                atomic_fetch_add(&s->data_held, 1);
                continue;
            }
            unsigned char hs[RING__TCP_HS_LEN];
            uint32_t other = (uint32_t)(r + 1) % (uint32_t)s->n;
            switch (k) {
            case 0: data_hs_build(hs, DATA_HS_MAGIC, s->wrong, s->nonce, s->nsocks, other, 0); break;
            case 1: data_hs_build(hs, DATA_HS_MAGIC, s->secret, s->nonce ^ 1, s->nsocks, other, 0); break;
            case 2: data_hs_build(hs, DATA_HS_MAGIC, s->secret, s->nonce, s->nsocks, (uint32_t)s->n + 5, 0); break;
            case 3: data_hs_build(hs, 0x47455420u /* "GET " */, s->secret, s->nonce, s->nsocks, other, 0); break;
            default: data_hs_build(hs, DATA_HS_MAGIC, s->wrong, s->nonce, s->nsocks, other, 0); break;
            }
            send_bytes(fds[r][k], hs, k == 4 ? RING__TCP_HS_LEN / 2 : RING__TCP_HS_LEN);
            if (k < 4) atomic_fetch_add(&s->data_sent, 1);
        }
    }
    /* Watch the complete forgeries until the job is over. */
    int closed[MAXR][4] = {{0}};
    while (!stopped(s)) {
        for (int r = 0; r < s->n; r++)
            for (int k = 0; k < 4; k++)
                if (fds[r][k] >= 0 && !closed[r][k] && wait_closed(fds[r][k], 0, NULL, NULL, 0, NULL)) {
                    closed[r][k] = 1;
                    atomic_fetch_add(&s->data_rejected[r], 1);
                }
        sleep_ms(10);
    }
    for (int r = 0; r < s->n; r++)
        for (int k = 0; k < NFORGE + NSILENT; k++)
            if (fds[r][k] >= 0) close(fds[r][k]);
    return NULL;
}

/* One rank's part of the job: checked allreduces (both algorithms), broadcasts from every
 * root, async calls, and once a full mesh of point-to-point connections (so that listeners
 * accept while strangers are queued on them) with an all-to-all exchange. Rank 0 decides for
 * everyone, by a broadcast each iteration, when to connect the mesh and when to stop, so the
 * job lasts long enough for the strangers to act during it. */
typedef struct job_arg {
    ring_comm_t *comm;
    double t0, min_ms;
    long iters;
    long checked;
    long wrong;
    ring_result_t rc;
    char what[128];
    char msg[RING__ERRMSG_MAX];
    pthread_t t;
} job_arg;

#define JOB_MAX_COUNT 60000
enum { JOB_STOP, JOB_GO, JOB_MESH };

static void job_fail(job_arg *a, ring_result_t rc, const char *what, long i)
{
    a->rc = rc;
    snprintf(a->what, sizeof a->what, "%s (iteration %ld)", what, i);
    snprintf(a->msg, sizeof a->msg, "%s", ring_comm_last_error(a->comm));
}

static ring_result_t job_mesh(job_arg *a, int me, int n)
{
    int peers[MAXR] = {0}, np = 0;
    for (int q = 0; q < n; q++)
        if (q != me) peers[np++] = q;
    ring_result_t rc = ring__p2p_connect(a->comm, peers, np);
    if (rc != RING_OK) return rc;
    unsigned char out[MAXR][1000], in[MAXR][1000];
    ring__p2p_op_t ops[2 * MAXR];
    int nops = 0;
    for (int q = 0; q < n; q++) {
        if (q == me) continue;
        for (int j = 0; j < 1000; j++) out[q][j] = (unsigned char)(me * 31 + q * 7 + j);
        ops[nops++] = (ring__p2p_op_t){.peer = q, .is_send = 1, .buf = out[q], .len = 1000};
    }
    for (int q = 0; q < n; q++)
        if (q != me) ops[nops++] = (ring__p2p_op_t){.peer = q, .is_send = 0, .buf = in[q], .len = 1000};
    rc = ring__p2p_run(a->comm, ops, nops);
    for (int q = 0; rc == RING_OK && q < n; q++)
        for (int j = 0; q != me && j < 1000; j++) a->wrong += in[q][j] != (unsigned char)(q * 31 + me * 7 + j);
    return rc;
}

static void *job_main(void *p)
{
    job_arg *a = p;
    int me = ring_comm_rank(a->comm), n = ring_comm_nranks(a->comm);
    int32_t *b = malloc(JOB_MAX_COUNT * sizeof *b), *o = malloc(JOB_MAX_COUNT * sizeof *o);
    int meshed = 0;
    if (!b || !o) {
        job_fail(a, RING_ERR_NOMEM, "malloc", -1);
        goto out;
    }
    for (long i = 0;; i++) {
        static const size_t counts[] = {7, 100, 3000, JOB_MAX_COUNT};
        size_t count = counts[i % 4];
        for (size_t j = 0; j < count; j++) b[j] = (int32_t)((me + 1) * (int)(j + 1) + (int)i);
        ring_result_t rc;
        if (i % 5 == 4) {
            ring_request_t *q = NULL;
            rc = ring_allreduce_async(a->comm, b, o, count, RING_INT32, RING_SUM, &q);
            if (rc == RING_OK) rc = ring_wait(q);
            memcpy(b, o, count * sizeof *b);
        } else {
            rc = ring_allreduce(a->comm, b, b, count, RING_INT32, RING_SUM);
        }
        if (rc != RING_OK) {
            job_fail(a, rc, "allreduce", i);
            goto out;
        }
        for (size_t j = 0; j < count; j++) a->wrong += b[j] != (int32_t)(n * (n + 1) / 2 * (int)(j + 1) + n * (int)i);
        a->checked++;

        int root = (int)(i % n);
        size_t bc = counts[(i + 1) % 4];
        for (size_t j = 0; j < bc; j++) b[j] = me == root ? (int32_t)(j * 7 + (size_t)i) : -1;
        rc = ring_broadcast(a->comm, b, bc, RING_INT32, root);
        if (rc != RING_OK) {
            job_fail(a, rc, "broadcast", i);
            goto out;
        }
        for (size_t j = 0; j < bc; j++) a->wrong += b[j] != (int32_t)(j * 7 + (size_t)i);
        a->checked++;

        int32_t ctl = JOB_GO;
        if (me == 0) {
            double el = now_ms() - a->t0;
            if (!meshed && el >= a->min_ms / 2) ctl = JOB_MESH;
            else if (meshed && el >= a->min_ms) ctl = JOB_STOP;
            if (i > 1000000) ctl = JOB_STOP; /* the clock is broken; the assertions will say so */
        }
        rc = ring_broadcast(a->comm, &ctl, 1, RING_INT32, 0);
        if (rc != RING_OK) {
            job_fail(a, rc, "control broadcast", i);
            goto out;
        }
        a->iters = i + 1;
        if (ctl == JOB_STOP) break;
        if (ctl == JOB_MESH) {
            rc = job_mesh(a, me, n);
            if (rc != RING_OK) {
                job_fail(a, rc, "full mesh of point-to-point connections", i);
                goto out;
            }
            meshed = 1;
            a->checked++;
        }
    }
    a->rc = meshed ? RING_OK : RING_ERR_INTERNAL;
    if (!meshed) snprintf(a->what, sizeof a->what, "the job ended without the mesh");
out:
    free(b);
    free(o);
    return NULL;
}

/* A rank's own data handshake that takes longer than the 10 s a stranger gets (its segments
 * lost again and again) still completes while init's deadline allows: the listener used to
 * drop it at 10 s, and init failed on every rank with "closed this rank's connection before
 * taking it". A test hook holds the handshake after its first byte. */
Test(strangers, a_ranks_handshake_slower_than_a_strangers_limit_still_joins, .timeout = 90)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    setenv("RING_TEST_TCP_HS_HOLD_MS", "10500", 1);
    ring_comm_t *c[2];
    double t0 = now_ms();
    group_init(c, 2, 30000);
    double took = now_ms() - t0;
    unsetenv("RING_TEST_TCP_HS_HOLD_MS");
    cr_assert(took >= 10400, "init took %.0f ms: the hook did not hold the handshake", took);
    assert_group_works(c, 2, 1000, "after a slow handshake");
    group_destroy(c, 2);
    unsetenv("RING_TRANSPORT");
}

Test(strangers, garbage_wrong_secrets_scans_and_slow_loris_do_not_disturb_the_job, .timeout = 240)
{
    clear_env();
    enum { N = 4, JOB_MS = 2500 };
    const int fds0 = count_fds();
    const long threads0 = status_field("Threads");
    strangers_t *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->n = N;
    ring__secret_from_string(SECRET, s->secret);
    ring__secret_from_string("not-the-job-secret", s->wrong);
    {
        struct sockaddr_in fa = {.sin_family = AF_INET, .sin_port = htons(1), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        s->fake.addr.len = sizeof fa;
        memcpy(s->fake.addr.data, &fa, sizeof fa);
        snprintf(s->fake.host, sizeof s->fake.host, "stranger");
    }
    /* The forged HELLO is a valid one but for the secret: the root must refuse it for that. */
    {
        unsigned char h[RING__HELLO_LEN];
        uint32_t rk, nr;
        ring__peer_info_t info;
        ring_result_t code;
        ring__hello_build(h, s->wrong, 1, N, &s->fake);
        cr_assert_null(ring__hello_parse(h, s->wrong, &rk, &nr, &info, &code));
        cr_assert_not_null(ring__hello_parse(h, s->secret, &rk, &nr, &info, &code));
        cr_assert_eq(code, RING_ERR_AUTH);
    }
    int port = free_port();
    struct sockaddr_in ra = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memcpy(&s->root.ss, &ra, sizeof ra);
    s->root.len = sizeof ra;

    /* Rank 0 listens; the strangers get there before any real rank does. */
    init_arg ia[N];
    init_start(&ia[0], N, 0, port, 60000, NULL);
    pthread_t st[6];
    void *(*fns[5])(void *) = {root_garbage_main, root_badhello_main, root_holders_main, loris_main, scan_main};
    for (int i = 0; i < 5; i++) cr_assert_eq(pthread_create(&st[i], NULL, fns[i], s), 0);
    double t0 = now_ms();
    while ((atomic_load(&s->root_held) < 6 || atomic_load(&s->root_rejects) < 1 || atomic_load(&s->root_closed) < 1 ||
            atomic_load(&s->loris_bytes) < 3) &&
           now_ms() - t0 < 20000)
        sleep_ms(5);
    cr_assert_eq(atomic_load(&s->root_held), 6, "the root never accepted the stranger connections");
    cr_assert(atomic_load(&s->root_rejects) >= 1, "no REJECT naming the wrong secret came back from the root");
    cr_assert(atomic_load(&s->root_closed) >= 1, "the root did not close a garbage connection");
    double t_join = now_ms();
    for (int r = 1; r < N; r++) init_start(&ia[r], N, r, port, 60000, NULL);
    ring_comm_t *c[N];
    for (int r = 0; r < N; r++) pthread_join(ia[r].t, NULL);
    t_join = now_ms() - t_join;
    for (int r = 0; r < N; r++) {
        cr_assert_eq(ia[r].rc, RING_OK, "rank %d could not join among strangers: %s: %s", r, ring_result_name(ia[r].rc),
                     ia[r].msg);
        c[r] = ia[r].comm;
    }
    double t_init = now_ms() - t0;
    /* Less than the 10 s a stranger has to finish its HELLO: the root never waited for one. */
    cr_assert(t_join < 5000, "ranks 1..3 needed %.0f ms to join among strangers", t_join);

    /* Now the data listeners (open for the communicator's lifetime). */
    s->nonce = c[0]->job_nonce;
    s->nsocks = ring__tcp_pair_nsocks(c[0], 1); /* every pair alike: all on loopback */
    int accepting = 0;
    for (int r = 0; r < N; r++) {
        const ring__tp_addr_t *a = &c[0]->peers[r].addr;
        cr_assert(a->len <= sizeof s->data[r].ss);
        memcpy(&s->data[r].ss, a->data, a->len);
        s->data[r].len = a->len;
        for (int q = 0; q < N; q++) s->accepts[r] |= q != r && !c[r]->conn_recv[q];
        accepting += s->accepts[r];
        /* Each forged handshake is a valid one but for the field it gets wrong. */
        unsigned char hs[RING__TCP_HS_LEN];
        uint32_t rk, idx;
        data_hs_build(hs, DATA_HS_MAGIC, s->secret, s->nonce, s->nsocks, (uint32_t)(r + 1) % N, 0);
        cr_assert_eq(ring__tcp_pair_nsocks(c[r], (r + 1) % N), s->nsocks);
        cr_assert_null(ring__tcp_hs_check(hs, c[r]->params.secret, c[r]->job_nonce, s->nsocks, N, r, &rk, &idx));
    }
    cr_assert(accepting > 0, "the full mesh adds no connection: the listeners would never be exercised");
    atomic_store(&s->data_ready, 1);
    cr_assert_eq(pthread_create(&st[5], NULL, data_strangers_main, s), 0);
    t0 = now_ms();
    while ((atomic_load(&s->data_sent) < 4 * N || atomic_load(&s->data_held) < 2 * N) && now_ms() - t0 < 20000) sleep_ms(5);
    cr_assert_eq(atomic_load(&s->data_sent), 4 * N, "forged handshakes not delivered");
    cr_assert_eq(atomic_load(&s->data_held), 2 * N);

    job_arg ja[N];
    t0 = now_ms();
    for (int r = 0; r < N; r++) {
        ja[r] = (job_arg){.comm = c[r], .t0 = t0, .min_ms = JOB_MS, .rc = RING_ERR_INTERNAL};
        cr_assert_eq(pthread_create(&ja[r].t, NULL, job_main, &ja[r]), 0);
    }
    for (int r = 0; r < N; r++) pthread_join(ja[r].t, NULL);
    double t_job = now_ms() - t0;
    /* The forgeries on accepting listeners are closed by the accept that ran in the job. */
    t0 = now_ms();
    for (int r = 0; r < N; r++)
        while (s->accepts[r] && atomic_load(&s->data_rejected[r]) < 4 && now_ms() - t0 < 5000) sleep_ms(5);
    atomic_store(&s->stop, 1);
    for (int i = 0; i < 6; i++) pthread_join(st[i], NULL);

    cr_log_info("strangers: init %.0f ms, job %.0f ms (%ld iterations x %d ranks); %d REJECTs, %d garbage closed, "
                "%d scans, %d loris bytes, forged handshakes closed per rank: %d %d %d %d",
                t_init, t_job, ja[0].iters, N, atomic_load(&s->root_rejects), atomic_load(&s->root_closed),
                atomic_load(&s->scans), atomic_load(&s->loris_bytes), atomic_load(&s->data_rejected[0]),
                atomic_load(&s->data_rejected[1]), atomic_load(&s->data_rejected[2]), atomic_load(&s->data_rejected[3]));
    for (int r = 0; r < N; r++) {
        cr_assert_eq(ja[r].rc, RING_OK, "rank %d: %s failed: %s: %s", r, ja[r].what, ring_result_name(ja[r].rc), ja[r].msg);
        cr_assert_eq(ja[r].wrong, 0, "rank %d: %ld wrong elements", r, ja[r].wrong);
        cr_assert_eq(ja[r].iters, ja[0].iters);
        cr_assert_eq(ja[r].checked, 2 * ja[0].iters + 1);
        if (s->accepts[r])
            cr_assert_eq(atomic_load(&s->data_rejected[r]), 4, "rank %d accepted during the job but kept %d forgeries open",
                         r, 4 - atomic_load(&s->data_rejected[r]));
    }
    cr_assert(t_job < 60000, "the job took %.0f ms among strangers", t_job);
    cr_assert(atomic_load(&s->scans) > 0 && atomic_load(&s->loris_bytes) > 10);
    group_destroy(c, N);
    free(s);
    cr_assert_eq(count_fds(), fds0, "file descriptors leaked: %d before, %d after", fds0, count_fds());
    cr_assert_eq(status_field("Threads"), threads0, "threads left behind");
}

/* Up to max silent connections to the root on 127.0.0.1:port, once it listens (waiting up to
 * 10 s for that); stop_pid > 0 is stopped (SIGSTOP) after the first, so that the rest queue in
 * its backlog. Returns how many connected. */
static int silent_strangers(int port, int *fds, int max, pid_t stop_pid)
{
    target_t root = {.len = sizeof(struct sockaddr_in)};
    *(struct sockaddr_in *)&root.ss = (struct sockaddr_in){
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int n = 0;
    for (double until = now_ms() + 10000; n == 0 && now_ms() < until;) {
        fds[0] = stranger_connect(&root, 100);
        if (fds[0] >= 0) n = 1;
        else sleep_ms(5);
    }
    if (n && stop_pid > 0) kill(stop_pid, SIGSTOP);
    for (; n > 0 && n < max; n++) {
        fds[n] = stranger_connect(&root, 1000);
        if (fds[n] < 0) break;
    }
    return n;
}

/* A root that was not running while its backlog filled (descheduled, or a large job starting
 * at once): 64 silent strangers, then every rank, all queued before the root accepts any. The
 * root holds 64 unauthenticated connections at most; the ranks, whose HELLOs are already
 * there, must all join, and only strangers may be dropped. Rank 0 is a child process so that
 * it can be stopped (SIGSTOP) while the others queue. */
Test(strangers, ranks_queued_behind_a_full_table_of_silent_strangers_all_join, .timeout = 120)
{
    clear_env();
    enum { N = 4, NSTRANGERS = 64, TIMEOUT_MS = 15000 };
    const int port = free_port();
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the test process failed: do not outlive it */
        init_arg a = {.n = N, .rank = 0, .timeout_ms = TIMEOUT_MS};
        snprintf(a.root, sizeof a.root, "127.0.0.1:%d", port);
        init_main(&a);
        if (a.rc != RING_OK) {
            fprintf(stderr, "rank 0: init: %s: %s\n", ring_result_name(a.rc), a.msg);
            _exit(2);
        }
        check_arg c = {.comm = a.comm, .count = 1000, .salt = 7};
        check_main(&c);
        if (c.rc != RING_OK || c.bad) fprintf(stderr, "rank 0: allreduce: %s, %zu wrong\n", c.msg, c.bad);
        ring_result_t d = ring_comm_destroy(a.comm);
        _exit(c.rc == RING_OK && !c.bad && d == RING_OK ? 0 : 3);
    }
    int sfd[NSTRANGERS];
    const int ns = silent_strangers(port, sfd, NSTRANGERS, pid); /* the root stops once it listens */
    init_arg a[N];
    for (int r = 1; r < N; r++) init_start(&a[r], N, r, port, TIMEOUT_MS, NULL);
    sleep_ms(500); /* their connections and HELLOs are in the stopped root's backlog */
    kill(pid, SIGCONT);
    for (int r = 1; r < N; r++) pthread_join(a[r].t, NULL);
    /* One checked allreduce with rank 0, then the ranks here leave before rank 0 is waited for. */
    check_arg c[N];
    int started[N] = {0};
    for (int r = 1; r < N; r++) {
        c[r] = (check_arg){.comm = a[r].comm, .count = 1000, .salt = 7, .rc = RING_ERR_INTERNAL};
        if (a[r].rc == RING_OK) started[r] = pthread_create(&c[r].t, NULL, check_main, &c[r]) == 0;
    }
    for (int r = 1; r < N; r++)
        if (started[r]) pthread_join(c[r].t, NULL);
    ring_result_t d[N] = {RING_OK};
    for (int r = 1; r < N; r++) d[r] = a[r].rc == RING_OK ? ring_comm_destroy(a[r].comm) : RING_OK;
    int status = -1, done = 0;
    for (double until = now_ms() + 30000; !done && now_ms() < until;) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) sleep_ms(10);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    for (int i = 0; i < ns; i++) close(sfd[i]);
    cr_assert_eq(ns, NSTRANGERS, "only %d of %d strangers could connect to the root", ns, NSTRANGERS);
    for (int r = 1; r < N; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: init: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
        cr_assert_eq(c[r].rc, RING_OK, "rank %d: allreduce: %s: %s", r, ring_result_name(c[r].rc), c[r].msg);
        cr_assert_eq(c[r].bad, 0, "rank %d: %zu wrong elements", r, c[r].bad);
        cr_assert_eq(d[r], RING_OK, "rank %d: destroy: %s", r, ring_result_name(d[r]));
    }
    cr_assert(done, "rank 0 (pid %d) did not finish within 30 s of the others", (int)pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 0 failed (wait status %#x; its stderr says why)",
              status);
}

/* Rank 0 out of file descriptors while ranks and strangers connect: init must fail at once,
 * saying why (errno's text and the open-file limit), not spin until RING_TIMEOUT_MS and then
 * blame missing ranks. Rank 0 is a child process with a low RLIMIT_NOFILE; it reports its
 * result code, time and message through a pipe. */
Test(strangers, a_root_out_of_descriptors_fails_init_at_once_saying_so, .timeout = 120)
{
    clear_env();
    enum { N = 4, NSTRANGERS = 48, TIMEOUT_MS = 20000 };
    const int port = free_port();
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pfd[0]);
        /* Room for init's own descriptors, not for the strangers. */
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = (rlim_t)count_fds() + 24;
        setrlimit(RLIMIT_NOFILE, &rl);
        init_arg a = {.n = N, .rank = 0, .timeout_ms = TIMEOUT_MS};
        snprintf(a.root, sizeof a.root, "127.0.0.1:%d", port);
        double t0 = now_ms();
        init_main(&a);
        char out[RING__ERRMSG_MAX + 64];
        int len = snprintf(out, sizeof out, "%d %.0f %s", (int)a.rc, now_ms() - t0, a.msg);
        if (write(pfd[1], out, (size_t)RING__MIN(len, (int)sizeof out - 1)) < 0) _exit(4);
        if (a.rc == RING_OK) ring_comm_destroy(a.comm);
        _exit(0);
    }
    close(pfd[1]);
    int sfd[NSTRANGERS];
    const int ns = silent_strangers(port, sfd, NSTRANGERS, 0);
    init_arg a[N];
    /* The ranks' own timeout is short: with rank 0 gone they can only time out. */
    for (int r = 1; r < N; r++) init_start(&a[r], N, r, port, 3000, NULL);
    char got[RING__ERRMSG_MAX + 64] = "";
    size_t have = 0;
    for (double until = now_ms() + 60000; now_ms() < until && have < sizeof got - 1;) {
        struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t k = read(pfd[0], got + have, sizeof got - 1 - have);
        if (k <= 0) break;
        have += (size_t)k;
    }
    got[have] = '\0';
    for (int r = 1; r < N; r++) pthread_join(a[r].t, NULL);
    for (int r = 1; r < N; r++)
        if (a[r].rc == RING_OK) ring_comm_destroy(a[r].comm);
    for (int i = 0; i < ns; i++) close(sfd[i]);
    close(pfd[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int rc = -1;
    double ms = -1;
    int off = 0;
    cr_assert(sscanf(got, "%d %lf %n", &rc, &ms, &off) == 2, "rank 0 reported nothing: \"%s\"", got);
    cr_assert_eq(rc, RING_ERR_SYSTEM, "rank 0: %s: %s", ring_result_name((ring_result_t)rc), got + off);
    cr_assert(strstr(got + off, "Too many open files") && strstr(got + off, "ulimit -n"),
              "rank 0's message lacks errno's text or the hint: %s", got + off);
    cr_assert_lt(ms, TIMEOUT_MS / 4, "rank 0 took %.0f ms to fail (timeout %d ms)", ms, TIMEOUT_MS);
    for (int r = 1; r < N; r++) cr_assert_neq(a[r].rc, RING_OK, "rank %d joined a job whose root failed", r);
    cr_log_info("rank 0 after %.0f ms: %s", ms, got + off);
}

/* ================================================================================================
 * b. Resources
 * ============================================================================================= */

/* One N=2 job: join, one checked small allreduce (recursive doubling, scratch allocated),
 * destroy. Failures are returned, not asserted (called in a loop). */
static const char *pair_cycle(char *why, size_t len)
{
    init_arg a[2];
    int port = free_port();
    for (int r = 0; r < 2; r++) init_start(&a[r], 2, r, port, 30000, NULL);
    for (int r = 0; r < 2; r++) pthread_join(a[r].t, NULL);
    for (int r = 0; r < 2; r++)
        if (a[r].rc != RING_OK) {
            snprintf(why, len, "pair init rank %d: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
            ring_comm_destroy(a[0].comm);
            ring_comm_destroy(a[1].comm);
            return why;
        }
    check_arg k[2];
    for (int r = 0; r < 2; r++) {
        k[r] = (check_arg){.comm = a[r].comm, .count = 33, .salt = 5};
        pthread_create(&k[r].t, NULL, check_main, &k[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(k[r].t, NULL);
    const char *bad = NULL;
    for (int r = 0; r < 2 && !bad; r++)
        if (k[r].rc != RING_OK || k[r].bad) {
            snprintf(why, len, "pair allreduce rank %d: %s, %zu wrong: %s", r, ring_result_name(k[r].rc), k[r].bad, k[r].msg);
            bad = why;
        }
    for (int r = 0; r < 2; r++)
        if (ring_comm_destroy(a[r].comm) != RING_OK && !bad) {
            snprintf(why, len, "pair destroy rank %d failed", r);
            bad = why;
        }
    return bad;
}

/* One N=1 communicator: init, a few calls, destroy. Some cycles leave an async request that
 * is never waited for (destroy frees it) or abort first, the paths most likely to leak. */
static const char *single_cycle(int i, char *why, size_t len)
{
    ring_comm_t *c = NULL;
    ring_result_t rc = ring_comm_init(&c, 1, 0, NULL);
    if (rc != RING_OK) {
        snprintf(why, len, "cycle %d: init: %s: %s", i, ring_result_name(rc), ring_comm_last_error(NULL));
        ring_comm_destroy(c);
        return why;
    }
    float in[16], out[16];
    for (int j = 0; j < 16; j++) in[j] = (float)(i + j);
    rc = ring_allreduce(c, in, out, 16, RING_FLOAT32, RING_SUM);
    if (rc == RING_OK && memcmp(in, out, sizeof in)) rc = RING_ERR_INTERNAL;
    ring_request_t *q = NULL;
    if (rc == RING_OK && i % 10 == 3) rc = ring_barrier_async(c, &q); /* never waited for */
    if (rc == RING_OK && i % 7 == 5) rc = ring_comm_abort(c);
    if (rc != RING_OK) {
        snprintf(why, len, "cycle %d: %s: %s", i, ring_result_name(rc), ring_comm_last_error(c));
        ring_comm_destroy(c);
        return why;
    }
    if (ring_comm_destroy(c) != RING_OK) {
        snprintf(why, len, "cycle %d: destroy failed", i);
        return why;
    }
    return NULL;
}

Test(resources, ten_thousand_init_destroy_cycles_leave_no_fd_thread_or_memory_behind, .timeout = 300)
{
    clear_env();
    enum { WARM_SINGLE = 300, WARM_PAIRS = 20, SINGLE = 9600, PAIRS = 400 };
    char why[RING__ERRMSG_MAX + 128];
    const char *bad;
    /* Warm-up: the first cycles allocate what a process keeps for good (malloc arenas for
     * each new thread, glibc's cache of thread stacks, Criterion's and stdio's buffers), so the
     * baseline is taken after them and the comparison sees only per-cycle growth. */
    for (int i = 0; i < WARM_SINGLE; i++) cr_assert_null(bad = single_cycle(i, why, sizeof why), "%s", bad);
    for (int i = 0; i < WARM_PAIRS; i++) cr_assert_null(bad = pair_cycle(why, sizeof why), "%s", bad);
    const int fds0 = count_fds();
    const long threads0 = status_field("Threads"), rss0 = status_field("VmRSS");
    const long long heap0 = heap_in_use();
    double t0 = now_ms();
    for (int i = 0; i < SINGLE; i++) {
        bad = single_cycle(i, why, sizeof why);
        if (bad) cr_assert_fail("%s", bad);
    }
    double t_single = now_ms() - t0;
    t0 = now_ms();
    for (int i = 0; i < PAIRS; i++) {
        bad = pair_cycle(why, sizeof why);
        if (bad) cr_assert_fail("pair %d: %s", i, bad);
    }
    double t_pairs = now_ms() - t0;
    const int fds1 = count_fds();
    const long threads1 = status_field("Threads"), rss1 = status_field("VmRSS");
    const long long heap1 = heap_in_use();
    cr_log_info("resources: %d single-rank cycles in %.0f ms, %d pairs in %.0f ms; fds %d -> %d, threads %ld -> %ld, "
                "VmRSS %ld -> %ld kB, heap in use %lld -> %lld B",
                SINGLE, t_single, PAIRS, t_pairs, fds0, fds1, threads0, threads1, rss0, rss1, heap0, heap1);
    cr_assert_eq(fds1, fds0, "file descriptors grew from %d to %d over %d cycles", fds0, fds1, SINGLE + PAIRS);
    cr_assert_eq(threads1, threads0, "threads grew from %ld to %ld", threads0, threads1);
    if (UNDER_SANITIZER) {
        /* ASan keeps freed blocks in quarantine (up to 256 MiB) and TSan has shadow memory, so
         * RSS says nothing there; LeakSanitizer checks the same thing exactly at exit. */
        cr_log_info("resources: memory growth not checked under a sanitizer (LeakSanitizer does it)");
        return;
    }
    /* 4 MiB over 10,000 cycles is 419 bytes a cycle, less than one communicator struct
     * (sizeof(struct ring_comm) is over 3 KiB), so leaking any communicator, request or
     * connection shows. The slack is for malloc's free lists and page-granular fragmentation,
     * which move RSS by a few hundred KiB either way. */
    cr_assert(rss1 - rss0 <= 4096, "VmRSS grew by %ld kB over %d cycles", rss1 - rss0, SINGLE + PAIRS);
    if (heap0 >= 0)
        /* Everything a cycle allocates is freed by destroy. Measured: +5 to +10 KiB that stop
         * growing after ~200 pairs (malloc's bookkeeping as new threads land on other
         * arenas), so 64 KiB, 6 bytes a cycle, is room for that and nothing per cycle. */
        cr_assert(heap1 - heap0 <= 65536, "malloc'd bytes in use grew by %lld over %d cycles", heap1 - heap0,
                  SINGLE + PAIRS);
}

/* Pairs that fail in every way a job ends badly, one after the other: each must give back
 * every fd and thread when destroyed. */
static void failing_pair_round(int round, double *worst_peer_ms)
{
    ring_comm_t *c[2];
    char what[64];
    switch (round % 4) {
    case 0: { /* rank 0 aborts a call in flight; rank 1 hears of it over the star */
        group_init(c, 2, 60000);
        call_t k = {.comm = c[0], .kind = K_ALLREDUCE, .count = 50000, .dt = RING_FLOAT32, .op = RING_SUM};
        call_start(&k);
        sleep_ms(30);
        cr_assert_eq(ring_comm_abort(c[0]), RING_OK);
        pthread_join(k.t, NULL);
        cr_assert_eq(k.rc, RING_ERR_ABORTED, "round %d: %s: %s", round, ring_result_name(k.rc), k.msg);
        cr_assert(wait_remote_failed(c[1], 5000), "round %d: rank 1 never heard that rank 0 aborted", round);
        double t = now_ms();
        ring_result_t rc = ring_barrier(c[1]);
        cr_assert_eq(rc, RING_ERR_PEER, "round %d: rank 1 after rank 0 aborted: %s: %s", round, ring_result_name(rc),
                     ring_comm_last_error(c[1]));
        cr_assert(strstr(ring_comm_last_error(c[1]), "rank 0") && strstr(ring_comm_last_error(c[1]), "abort"), "%s",
                  ring_comm_last_error(c[1]));
        cr_assert(now_ms() - t < 100);
        snprintf(what, sizeof what, "abort");
        break;
    }
    case 1: { /* rank 0 times out alone; idle rank 1 is told over the star and keeps the code */
        group_init(c, 2, 300);
        call_t k[2] = {{.comm = c[0], .kind = K_ALLREDUCE, .count = 10, .dt = RING_FLOAT32},
                       {.comm = c[1], .kind = K_BROADCAST, .count = 10, .dt = RING_FLOAT32, .root = 1}};
        call_start(&k[0]);
        pthread_join(k[0].t, NULL);
        cr_assert_eq(k[0].rc, RING_ERR_TIMEOUT, "round %d: %s: %s", round, ring_result_name(k[0].rc), k[0].msg);
        cr_assert(wait_remote_failed(c[1], 5000), "round %d: rank 1 never heard that rank 0 timed out", round);
        call_start(&k[1]);
        pthread_join(k[1].t, NULL);
        cr_assert_eq(k[1].rc, RING_ERR_TIMEOUT, "round %d: rank 1: %s: %s", round, ring_result_name(k[1].rc), k[1].msg);
        snprintf(what, sizeof what, "timeout");
        break;
    }
    case 2: { /* rank 1 destroys its communicator while rank 0 waits in a collective */
        group_init(c, 2, 60000);
        call_t k = {.comm = c[0], .kind = K_ALLGATHER, .count = 20000, .dt = RING_FLOAT32};
        call_start(&k);
        sleep_ms(30);
        double t = now_ms();
        cr_assert_eq(ring_comm_destroy(c[1]), RING_OK);
        c[1] = NULL;
        pthread_join(k.t, NULL);
        double late = k.t_end - t;
        if (late > *worst_peer_ms) *worst_peer_ms = late;
        cr_assert_eq(k.rc, RING_ERR_PEER, "round %d: rank 0 after rank 1 left: %s: %s", round, ring_result_name(k.rc), k.msg);
        cr_assert(strstr(k.msg, "rank 1") && strstr(k.msg, "ring_comm_destroy"), "%s", k.msg);
        /* Rank 1's goodbye ends the cause grace (comm.c) at once; a loaded machine may still be
         * slow, and it must never be the 60 s timeout. */
        cr_assert(late < 5000, "round %d: rank 0 noticed rank 1 leaving after %.0f ms", round, late);
        snprintf(what, sizeof what, "peer destroyed");
        break;
    }
    default: { /* init refused: rank 1 has another secret, the root times out naming it */
        init_arg a[2];
        int port = free_port();
        init_start(&a[0], 2, 0, port, 300, NULL);
        init_start(&a[1], 2, 1, port, 300, "another job's secret");
        for (int r = 0; r < 2; r++) pthread_join(a[r].t, NULL);
        cr_assert_eq(a[1].rc, RING_ERR_AUTH, "round %d: %s: %s", round, ring_result_name(a[1].rc), a[1].msg);
        cr_assert_eq(a[0].rc, RING_ERR_TIMEOUT, "round %d: %s: %s", round, ring_result_name(a[0].rc), a[0].msg);
        cr_assert(strstr(a[0].msg, "missing rank(s) 1"), "%s", a[0].msg);
        c[0] = a[0].comm;
        c[1] = a[1].comm;
        cr_assert_eq(ring_allreduce(c[0], NULL, NULL, 0, RING_FLOAT32, RING_SUM), RING_ERR_TIMEOUT, "a failed init fails fast");
        snprintf(what, sizeof what, "init refused");
        break;
    }
    }
    if (round < 4) cr_log_info("resources: failing pair (%s): rank 0: %s | rank 1: %s", what,
                               ring_comm_last_error(c[0]), c[1] ? ring_comm_last_error(c[1]) : "(destroyed)");
    for (int r = 0; r < 2; r++)
        if (c[r]) cr_assert_eq(ring_comm_destroy(c[r]), RING_OK, "round %d (%s): destroy rank %d", round, what, r);
}

Test(resources, failed_pairs_give_back_every_fd_and_thread, .timeout = 240)
{
    clear_env();
    enum { ROUNDS = 16 };
    double worst = 0;
    failing_pair_round(0, &worst); /* warm-up: first-use allocations, see above */
    const int fds0 = count_fds();
    const long threads0 = status_field("Threads");
    double t0 = now_ms();
    for (int i = 0; i < ROUNDS; i++) failing_pair_round(i, &worst);
    cr_log_info("resources: %d failing pairs in %.0f ms; slowest notice of a departed peer %.0f ms", ROUNDS,
                now_ms() - t0, worst);
    cr_assert_eq(count_fds(), fds0, "file descriptors leaked: %d before, %d after", fds0, count_fds());
    cr_assert_eq(status_field("Threads"), threads0, "threads left behind");
}

/* ================================================================================================
 * c. Bad input
 * ============================================================================================= */

static ring_comm_t *g_pair[2];
static int g_cases;

/* expr was called on rank `side` only; it must be refused with RING_ERR_INVALID_ARG and a
 * message containing `needle`, and the pair must still agree on the next allreduce: a
 * refused call that sent a byte or used up a sequence number on one side breaks that. */
static void refused(int side, const char *text, ring_result_t rc, ring_request_t *req, const char *needle, int line)
{
    ring_comm_t *c = side >= 0 ? g_pair[side] : NULL;
    const char *m = ring_comm_last_error(c);
    cr_assert_eq(rc, RING_ERR_INVALID_ARG, "line %d: %s returned %s: %s", line, text, ring_result_name(rc), m);
    cr_assert(m && strstr(m, needle), "line %d: %s: message lacks \"%s\": %s", line, text, needle, m ? m : "(null)");
    cr_assert_null(req, "line %d: %s: refused but handed out a request", line, text);
    g_cases++;
    if (side >= 0) assert_group_works(g_pair, 2, 1 + (size_t)(g_cases % 3) * 5000, text);
}

#define REFUSED(side, expr, needle) refused((side), #expr, (expr), NULL, (needle), __LINE__)
#define REFUSED_ASYNC(side, expr, needle)                                                          \
    do {                                                                                           \
        req = (ring_request_t *)&req; /* must come back NULL */                                    \
        ring_result_t rc_ = (expr);                                                                \
        refused((side), #expr, rc_, req, (needle), __LINE__);                                      \
    } while (0)

Test(bad_input, null_buffers_bad_dtype_op_root_and_overflow_are_refused_before_sending, .timeout = 120)
{
    clear_env();
    group_init(g_pair, 2, 10000);
    float a[64] = {0}, b[128] = {0};
    ring_request_t *req;
    g_cases = 0;
    for (int s = 0; s < 2; s++) {
        ring_comm_t *c = g_pair[s];
        /* NULL buffers with count > 0 */
        REFUSED(s, ring_allreduce(c, NULL, b, 8, RING_FLOAT32, RING_SUM), "NULL buffer");
        REFUSED(s, ring_allreduce(c, a, NULL, 8, RING_FLOAT32, RING_SUM), "NULL buffer");
        REFUSED(s, ring_reduce_scatter(c, NULL, b, 8, RING_FLOAT32, RING_SUM), "NULL buffer");
        REFUSED(s, ring_reduce_scatter(c, a, NULL, 8, RING_FLOAT32, RING_SUM), "NULL buffer");
        REFUSED(s, ring_allgather(c, NULL, b, 8, RING_FLOAT32), "NULL buffer");
        REFUSED(s, ring_allgather(c, a, NULL, 8, RING_FLOAT32), "NULL buffer");
        REFUSED(s, ring_broadcast(c, NULL, 8, RING_FLOAT32, 0), "NULL buffer");
        REFUSED_ASYNC(s, ring_allreduce_async(c, NULL, b, 8, RING_FLOAT32, RING_SUM, &req), "NULL buffer");
        REFUSED_ASYNC(s, ring_reduce_scatter_async(c, a, NULL, 8, RING_FLOAT32, RING_SUM, &req), "NULL buffer");
        REFUSED_ASYNC(s, ring_allgather_async(c, NULL, b, 8, RING_FLOAT32, &req), "NULL buffer");
        REFUSED_ASYNC(s, ring_broadcast_async(c, NULL, 8, RING_FLOAT32, 1, &req), "NULL buffer");
        /* invalid dtype, for every collective that takes one */
        const ring_dtype_t bad_dt[] = {RING_DTYPE_COUNT, (ring_dtype_t)-1, (ring_dtype_t)1000};
        for (size_t i = 0; i < 3; i++) {
            REFUSED(s, ring_allreduce(c, a, b, 8, bad_dt[i], RING_SUM), "invalid dtype");
            REFUSED(s, ring_reduce_scatter(c, b, a, 8, bad_dt[i], RING_SUM), "invalid dtype");
            REFUSED(s, ring_allgather(c, a, b, 8, bad_dt[i]), "invalid dtype");
            REFUSED(s, ring_broadcast(c, a, 8, bad_dt[i], 0), "invalid dtype");
        }
        /* The _async form names itself (it was named after the blocking call). */
        REFUSED_ASYNC(s, ring_allreduce_async(c, a, b, 8, RING_DTYPE_COUNT, RING_SUM, &req), "ring_allreduce_async: invalid dtype");
        REFUSED_ASYNC(s, ring_allgather_async(c, a, b, 8, (ring_dtype_t)-1, &req), "ring_allgather_async: invalid dtype");
        REFUSED_ASYNC(s, ring_broadcast_async(c, a, 8, (ring_dtype_t)99, 0, &req), "ring_broadcast_async: invalid dtype");
        /* invalid reduction op */
        const ring_op_t bad_op[] = {RING_OP_COUNT, (ring_op_t)-1, (ring_op_t)77};
        for (size_t i = 0; i < 3; i++) {
            REFUSED(s, ring_allreduce(c, a, b, 8, RING_FLOAT32, bad_op[i]), "invalid reduction op");
            REFUSED(s, ring_reduce_scatter(c, b, a, 8, RING_FLOAT32, bad_op[i]), "invalid reduction op");
        }
        REFUSED_ASYNC(s, ring_reduce_scatter_async(c, b, a, 8, RING_INT8, RING_OP_COUNT, &req),
                      "ring_reduce_scatter_async: invalid reduction op");
        /* broadcast root out of range */
        const int bad_root[] = {-1, 2, INT_MAX, INT_MIN};
        for (size_t i = 0; i < 4; i++) REFUSED(s, ring_broadcast(c, a, 8, RING_FLOAT32, bad_root[i]), "out of range");
        REFUSED_ASYNC(s, ring_broadcast_async(c, a, 8, RING_FLOAT32, 2, &req), "ring_broadcast_async: root 2 out of range");
        /* count x element size (x nranks for the full buffers) beyond size_t */
        REFUSED(s, ring_allreduce(c, a, b, SIZE_MAX / 2, RING_FLOAT32, RING_SUM), "overflows");
        REFUSED(s, ring_allreduce(c, a, b, SIZE_MAX / 8 + 1, RING_FLOAT64, RING_MAX), "overflows");
        REFUSED(s, ring_allreduce(c, a, a, SIZE_MAX / 2 + 1, RING_BFLOAT16, RING_SUM), "overflows");
        REFUSED(s, ring_allreduce(c, a, b, SIZE_MAX, RING_INT32, RING_SUM), "overflows");
        REFUSED(s, ring_reduce_scatter(c, b, a, SIZE_MAX / 8 + 1, RING_FLOAT32, RING_SUM), "x nranks");
        REFUSED(s, ring_reduce_scatter(c, b, a, SIZE_MAX / 2 + 1, RING_INT8, RING_SUM), "x nranks");
        REFUSED(s, ring_allgather(c, a, b, SIZE_MAX / 8 + 1, RING_FLOAT32), "x nranks");
        REFUSED(s, ring_allgather(c, a, b, SIZE_MAX / 2 + 1, RING_UINT8), "x nranks");
        REFUSED(s, ring_broadcast(c, a, SIZE_MAX / 4, RING_FLOAT64, 0), "overflows");
        REFUSED_ASYNC(s, ring_allgather_async(c, a, b, SIZE_MAX / 3, RING_FLOAT16, &req), "overflows");
        /* an _async call without a place for the request */
        REFUSED(s, ring_allreduce_async(c, a, b, 8, RING_FLOAT32, RING_SUM, NULL), "req is NULL");
        REFUSED(s, ring_reduce_scatter_async(c, b, a, 8, RING_FLOAT32, RING_SUM, NULL), "req is NULL");
        REFUSED(s, ring_allgather_async(c, a, b, 8, RING_FLOAT32, NULL), "req is NULL");
        REFUSED(s, ring_broadcast_async(c, a, 8, RING_FLOAT32, 0, NULL), "req is NULL");
        REFUSED(s, ring_barrier_async(c, NULL), "req is NULL");
    }
    cr_log_info("bad_input: %d refused calls, each followed by a checked allreduce", g_cases);
    /* count 0 with NULL buffers is a valid (empty) collective on both ranks. */
    call_t z[2] = {{.comm = g_pair[0], .kind = K_ALLREDUCE, .count = 0, .dt = RING_FLOAT32},
                   {.comm = g_pair[1], .kind = K_ALLREDUCE, .count = 0, .dt = RING_FLOAT32}};
    run_calls(z, 2);
    cr_assert(z[0].rc == RING_OK && z[1].rc == RING_OK, "%s / %s", z[0].msg, z[1].msg);
    assert_group_works(g_pair, 2, 100, "count 0");
    group_destroy(g_pair, 2);
}

/*
 * A byte size no object can have (more than PTRDIFF_MAX) must be refused even when
 * count x size does not wrap: SIZE_MAX int8 elements, or SIZE_MAX/2 + 1 of them, cannot be a
 * buffer. One rank, in place, so that acceptance is harmless here (nothing is copied) and
 * shows as RING_OK instead of a crash.
 */
Test(bad_input, byte_sizes_beyond_any_object_are_refused, .timeout = 20)
{
    clear_env();
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK);
    char b[16];
    const size_t counts[] = {SIZE_MAX, SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < 2; i++) {
        ring_result_t rc = ring_allreduce(c, b, b, counts[i], RING_INT8, RING_SUM);
        cr_expect_eq(rc, RING_ERR_INVALID_ARG, "allreduce of %zu int8 in place returned %s", counts[i], ring_result_name(rc));
        rc = ring_broadcast(c, b, counts[i], RING_UINT8, 0);
        cr_expect_eq(rc, RING_ERR_INVALID_ARG, "broadcast of %zu uint8 returned %s", counts[i], ring_result_name(rc));
    }
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
}

/* Partially overlapping buffers are refused; the in-place forms (and buffers that touch
 * without overlapping) run and give the right result. */
typedef struct form_arg {
    ring_comm_t *comm;
    kind_t kind;
    int inplace; /* 1: the in-place form; 0: adjacent, not overlapping */
    size_t count;
    ring_result_t rc;
    size_t bad;
    char msg[RING__ERRMSG_MAX];
    pthread_t t;
} form_arg;

static void *form_main(void *p)
{
    form_arg *a = p;
    int r = ring_comm_rank(a->comm), n = ring_comm_nranks(a->comm);
    size_t cnt = a->count, full = cnt * (size_t)n;
    int32_t *m = calloc(3 * full + 8, sizeof *m);
    if (!m) {
        a->rc = RING_ERR_NOMEM;
        return NULL;
    }
    a->bad = 0;
    if (a->kind == K_ALLREDUCE) {
        int32_t *s = m, *d = a->inplace ? m : m + cnt;
        for (size_t j = 0; j < cnt; j++) s[j] = (int32_t)((r + 1) * (int)j);
        a->rc = ring_allreduce(a->comm, s, d, cnt, RING_INT32, RING_SUM);
        for (size_t j = 0; a->rc == RING_OK && j < cnt; j++) a->bad += d[j] != (int32_t)(n * (n + 1) / 2 * (int)j);
    } else if (a->kind == K_REDUCE_SCATTER) {
        int32_t *s = m, *d = a->inplace ? m + (size_t)r * cnt : m + full;
        for (size_t j = 0; j < full; j++) s[j] = (int32_t)((r + 1) * (int)j);
        a->rc = ring_reduce_scatter(a->comm, s, d, cnt, RING_INT32, RING_SUM);
        for (size_t j = 0; a->rc == RING_OK && j < cnt; j++)
            a->bad += d[j] != (int32_t)(n * (n + 1) / 2 * (int)((size_t)r * cnt + j));
    } else {
        int32_t *d = m, *s = a->inplace ? m + (size_t)r * cnt : m + full;
        for (size_t j = 0; j < cnt; j++) s[j] = (int32_t)(r * 1000 + (int)j);
        a->rc = ring_allgather(a->comm, s, d, cnt, RING_INT32);
        for (size_t j = 0; a->rc == RING_OK && j < full; j++)
            a->bad += d[j] != (int32_t)((int)(j / cnt) * 1000 + (int)(j % cnt));
    }
    if (a->rc != RING_OK) snprintf(a->msg, sizeof a->msg, "%s", ring_comm_last_error(a->comm));
    free(m);
    return NULL;
}

Test(bad_input, partial_overlaps_are_refused_and_in_place_forms_run, .timeout = 120)
{
    clear_env();
    group_init(g_pair, 2, 10000);
    g_cases = 0;
    const size_t cnt = 40;
    int32_t *pool = calloc(8 * cnt + 16, sizeof *pool);
    cr_assert_not_null(pool);
    int32_t *m = pool + 8; /* room before the buffers for overlaps from below */
    ring_request_t *req;
    for (int s = 0; s < 2; s++) {
        ring_comm_t *c = g_pair[s];
        int other = 1 - s;
        /* allreduce: recv shifted against send by less than the buffer, either way */
        REFUSED(s, ring_allreduce(c, m, m + 1, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_allreduce(c, m + 1, m, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_allreduce(c, m, m + cnt - 1, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_allreduce(c, m, (char *)m + 1, cnt, RING_INT32, RING_SUM), "overlap");
        /* reduce_scatter: recv (cnt) inside or across send (2*cnt) but not this rank's slice */
        REFUSED(s, ring_reduce_scatter(c, m, m + (size_t)s * cnt + 1, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_reduce_scatter(c, m, m + (size_t)other * cnt, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_reduce_scatter(c, m, m - 1, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED(s, ring_reduce_scatter(c, m, m + 2 * cnt - 1, cnt, RING_INT32, RING_SUM), "overlap");
        REFUSED_ASYNC(s, ring_reduce_scatter_async(c, m, m + 3, cnt, RING_INT32, RING_MAX, &req), "ring_reduce_scatter_async: recvbuf overlaps");
        /* allgather: send (cnt) inside or across recv (2*cnt) but not this rank's slice */
        REFUSED(s, ring_allgather(c, m + (size_t)s * cnt + 1, m, cnt, RING_INT32), "overlap");
        REFUSED(s, ring_allgather(c, m + (size_t)other * cnt, m, cnt, RING_INT32), "overlap");
        REFUSED(s, ring_allgather(c, m - 1, m, cnt, RING_INT32), "overlap");
        REFUSED(s, ring_allgather(c, m + 2 * cnt - 1, m, cnt, RING_INT32), "overlap");
        REFUSED_ASYNC(s, ring_allgather_async(c, m + 5, m, cnt, RING_INT32, &req), "ring_allgather_async: sendbuf overlaps");
    }
    /* The allowed forms, on both ranks, results checked. */
    for (int k = K_ALLREDUCE; k <= K_ALLGATHER; k++)
        for (int inplace = 0; inplace < 2; inplace++) {
            form_arg f[2];
            for (int r = 0; r < 2; r++) {
                f[r] = (form_arg){.comm = g_pair[r], .kind = (kind_t)k, .inplace = inplace, .count = cnt};
                cr_assert_eq(pthread_create(&f[r].t, NULL, form_main, &f[r]), 0);
            }
            for (int r = 0; r < 2; r++) pthread_join(f[r].t, NULL);
            for (int r = 0; r < 2; r++) {
                cr_assert_eq(f[r].rc, RING_OK, "%s %s rank %d: %s: %s", kind_name[k], inplace ? "in place" : "adjacent",
                             r, ring_result_name(f[r].rc), f[r].msg);
                cr_assert_eq(f[r].bad, 0, "%s %s rank %d: %zu wrong elements", kind_name[k],
                             inplace ? "in place" : "adjacent", r, f[r].bad);
            }
        }
    free(pool);
    group_destroy(g_pair, 2);
}

/* Every collective, blocking and _async, on a handle that is not a live communicator (NULL
 * or destroyed): refused with `needle` in the thread's message, and an _async req set to NULL. */
static void refuse_every_collective(ring_comm_t *d, const char *needle)
{
    float a[8] = {0}, b[16] = {0};
    ring_request_t *req;
    REFUSED(-1, ring_allreduce(d, a, b, 8, RING_FLOAT32, RING_SUM), needle);
    REFUSED(-1, ring_reduce_scatter(d, b, a, 8, RING_FLOAT32, RING_SUM), needle);
    REFUSED(-1, ring_allgather(d, a, b, 8, RING_FLOAT32), needle);
    REFUSED(-1, ring_broadcast(d, a, 8, RING_FLOAT32, 0), needle);
    REFUSED(-1, ring_barrier(d), needle);
    REFUSED_ASYNC(-1, ring_allreduce_async(d, a, b, 8, RING_FLOAT32, RING_SUM, &req), needle);
    REFUSED_ASYNC(-1, ring_reduce_scatter_async(d, b, a, 8, RING_FLOAT32, RING_SUM, &req), needle);
    REFUSED_ASYNC(-1, ring_allgather_async(d, a, b, 8, RING_FLOAT32, &req), needle);
    REFUSED_ASYNC(-1, ring_broadcast_async(d, a, 8, RING_FLOAT32, 0, &req), needle);
    REFUSED_ASYNC(-1, ring_barrier_async(d, &req), needle);
}

Test(bad_input, null_and_destroyed_communicators, .timeout = 60)
{
    clear_env();
    int done = 0;
    g_cases = 0;
    /* NULL: every entry point. */
    refuse_every_collective(NULL, "comm is NULL");
    REFUSED(-1, ring_barrier_async(NULL, NULL), "NULL"); /* either argument may be named first */
    REFUSED(-1, ring_comm_abort(NULL), "comm is NULL");
    REFUSED(-1, ring_wait(NULL), "request is NULL");
    REFUSED(-1, ring_test(NULL, &done), "NULL request");
    cr_assert_eq(ring_comm_destroy(NULL), RING_OK, "destroy(NULL) is documented as safe");
    cr_assert_eq(ring_comm_rank(NULL), -1);
    cr_assert_eq(ring_comm_nranks(NULL), -1);
    cr_assert_not_null(ring_comm_last_error(NULL));

    /* ring_test without a place for the answer, on a real request. */
    ring_comm_t *one = NULL;
    cr_assert_eq(ring_comm_init(&one, 1, 0, NULL), RING_OK);
    ring_request_t *q = NULL;
    cr_assert_eq(ring_barrier_async(one, &q), RING_OK);
    REFUSED(-1, ring_test(q, NULL), "NULL request or done pointer");
    cr_assert_eq(ring_wait(q), RING_OK);

    /* Destroyed: a pair (sockets, threads) and the single rank above. Nothing is created
     * after the destroys, so no new communicator can reuse their addresses. */
    ring_comm_t *c[2];
    group_init(c, 2, 10000);
    {
        ring_comm_t *dead[3] = {c[0], c[1], one};
        for (int i = 0; i < 3; i++) cr_assert_eq(ring_comm_destroy(dead[i]), RING_OK);
        for (int i = 0; i < 3; i++) {
            ring_comm_t *d = dead[i];
            refuse_every_collective(d, "not a live communicator");
            REFUSED(-1, ring_comm_abort(d), "not a live communicator");
            REFUSED(-1, ring_comm_destroy(d), "destroyed twice");
            cr_assert_eq(ring_comm_rank(d), -1);
            cr_assert_eq(ring_comm_nranks(d), -1);
            cr_assert(strstr(ring_comm_last_error(d), "not a live communicator"), "%s", ring_comm_last_error(d));
        }
    }
    cr_log_info("bad_input: %d refused calls on NULL and destroyed communicators", g_cases);
}

/* The argument check of an _async call without a request must not touch a destroyed
 * communicator either (the registry exists so that no call does): the refusal and its
 * message belong to the caller's thread, as for every other call on a dead handle. A message
 * written into the freed communicator instead leaves the thread's message empty here, ASan
 * reports the write, and with MALLOC_PERTURB_ (meson sets it) the call can block for good on
 * the freed mutex: hence the short timeout. */
Test(bad_input, async_without_request_on_a_destroyed_communicator, .timeout = 20)
{
    clear_env();
    float a[8] = {0}, b[16] = {0};
    ring_comm_t *c[2];
    group_init(c, 2, 10000);
    for (int r = 0; r < 2; r++) cr_assert_eq(ring_comm_destroy(c[r]), RING_OK);
    for (int k = 0; k < K_N; k++) {
        ring__tls_errbuf()[0] = '\0';
        ring_comm_t *d = c[k % 2];
        ring_result_t rc;
        switch (k) {
        case K_ALLREDUCE: rc = ring_allreduce_async(d, a, b, 8, RING_FLOAT32, RING_SUM, NULL); break;
        case K_REDUCE_SCATTER: rc = ring_reduce_scatter_async(d, b, a, 8, RING_FLOAT32, RING_SUM, NULL); break;
        case K_ALLGATHER: rc = ring_allgather_async(d, a, b, 8, RING_FLOAT32, NULL); break;
        case K_BROADCAST: rc = ring_broadcast_async(d, a, 8, RING_FLOAT32, 0, NULL); break;
        default: rc = ring_barrier_async(d, NULL); break;
        }
        cr_expect_eq(rc, RING_ERR_INVALID_ARG, "%s_async(destroyed, req NULL): %s", kind_name[k], ring_result_name(rc));
        cr_expect(ring_comm_last_error(NULL)[0] != '\0',
                  "%s_async(destroyed comm, req NULL): refused, but the message went elsewhere than this thread's "
                  "(into the freed communicator?)", kind_name[k]);
    }
}

/* After a failure every call returns the first error's code at once, whatever its arguments,
 * and requests queued before the failure complete with it. */
static void assert_fails_fast(ring_comm_t *c, ring_result_t want, const char *first, const char *who)
{
    float a[8] = {0}, b[16] = {0};
    for (int k = 0; k < K_N; k++)
        for (int async = 0; async < 2; async++) {
            double t = now_ms();
            ring_request_t *q = (ring_request_t *)&q;
            ring_result_t rc;
            switch (k) {
            case K_ALLREDUCE:
                rc = async ? ring_allreduce_async(c, a, b, 8, RING_FLOAT32, RING_SUM, &q)
                           : ring_allreduce(c, a, b, 8, RING_FLOAT32, RING_SUM);
                break;
            case K_REDUCE_SCATTER:
                rc = async ? ring_reduce_scatter_async(c, b, a, 4, RING_FLOAT32, RING_SUM, &q)
                           : ring_reduce_scatter(c, b, a, 4, RING_FLOAT32, RING_SUM);
                break;
            case K_ALLGATHER:
                rc = async ? ring_allgather_async(c, a, b, 8, RING_FLOAT32, &q) : ring_allgather(c, a, b, 8, RING_FLOAT32);
                break;
            case K_BROADCAST:
                rc = async ? ring_broadcast_async(c, a, 8, RING_FLOAT32, 1, &q) : ring_broadcast(c, a, 8, RING_FLOAT32, 1);
                break;
            default: rc = async ? ring_barrier_async(c, &q) : ring_barrier(c); break;
            }
            double ms = now_ms() - t;
            const char *m = ring_comm_last_error(c);
            cr_assert_eq(rc, want, "%s: %s%s after the failure: %s: %s", who, kind_name[k], async ? "_async" : "",
                         ring_result_name(rc), m);
            cr_assert(ms < 50, "%s: %s took %.1f ms to fail", who, kind_name[k], ms);
            cr_assert(strstr(m, "communicator failed earlier") && strstr(m, first), "%s: %s", who, m);
            if (async) cr_assert_null(q, "%s: a failed _async call handed out a request", who);
        }
    /* Argument errors too: the communicator's state is reported before the arguments. */
    cr_assert_eq(ring_allreduce(c, NULL, NULL, 8, (ring_dtype_t)99, RING_SUM), want);
}

Test(bad_input, calls_after_a_failure_fail_fast_with_the_first_code, .timeout = 120)
{
    clear_env();
    ring_comm_t *c[2];
    /* 1. Abort on rank 0 with a call queued behind one in flight. */
    group_init(c, 2, 60000);
    float x[1000] = {0}, y[1000] = {0};
    ring_request_t *q1 = NULL, *q2 = NULL;
    cr_assert_eq(ring_allreduce_async(c[0], x, x, 1000, RING_FLOAT32, RING_SUM, &q1), RING_OK);
    cr_assert_eq(ring_broadcast_async(c[0], y, 1000, RING_FLOAT32, 0, &q2), RING_OK);
    sleep_ms(50);
    cr_assert_eq(ring_comm_abort(c[0]), RING_OK);
    cr_assert_eq(ring_wait(q1), RING_ERR_ABORTED);
    cr_assert_eq(ring_wait(q2), RING_ERR_ABORTED, "a queued request completes with the abort");
    assert_fails_fast(c[0], RING_ERR_ABORTED, "aborted", "rank 0 (aborted)");
    cr_assert(wait_remote_failed(c[1], 5000), "rank 1 never heard of rank 0's abort");
    assert_fails_fast(c[1], RING_ERR_PEER, "rank 0", "rank 1 (told by the star)");
    group_destroy(c, 2);

    /* 2. A mismatch: both ranks keep RING_ERR_MISMATCH. */
    group_init(c, 2, 60000);
    call_t k[2] = {{.comm = c[0], .kind = K_ALLREDUCE, .count = 10, .dt = RING_FLOAT32},
                   {.comm = c[1], .kind = K_ALLREDUCE, .count = 11, .dt = RING_FLOAT32}};
    run_calls(k, 2);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(k[r].rc, RING_ERR_MISMATCH, "rank %d: %s: %s", r, ring_result_name(k[r].rc), k[r].msg);
        assert_fails_fast(c[r], RING_ERR_MISMATCH, "mismatch", r ? "rank 1 (mismatch)" : "rank 0 (mismatch)");
    }
    group_destroy(c, 2);
}

/* ================================================================================================
 * d. Mismatch matrix
 * ============================================================================================= */

static const char *dt_name(ring_dtype_t d) { return d == RING_FLOAT32 ? "float32" : d == RING_INT32 ? "int32" : "float64"; }

/* The descriptor text of a call, as the mismatch message shows it (engine.c desc_str), cut
 * where the two sides differ so that each needle is specific to one side. */
static void needle_for(const call_t *k, int field, char *out, size_t len)
{
    switch (field) {
    case 0: snprintf(out, len, "called #0 %s", kind_name[k->kind]); break;
    case 1: snprintf(out, len, "count=%zu,", k->count); break;
    case 2: snprintf(out, len, "%zu, %s", k->count, dt_name(k->dt)); break;
    case 3: snprintf(out, len, ", %s)", k->op == RING_SUM ? "sum" : "max"); break;
    default: snprintf(out, len, "root=%d)", k->root); break;
    }
}

static void mismatch_case(call_t a, call_t b, int field, double *worst)
{
    static const char *const fields[] = {"collective", "count", "dtype", "op", "root"};
    ring_comm_t *c[2];
    group_init(c, 2, 60000);
    call_t k[2] = {a, b};
    k[0].comm = c[0];
    k[1].comm = c[1];
    run_calls(k, 2);
    char na[64], nb[64];
    needle_for(&k[0], field, na, sizeof na);
    needle_for(&k[1], field, nb, sizeof nb);
    cr_log_info("mismatch (%s): rank 0: %s | rank 1: %s", fields[field], k[0].msg, k[1].msg);
    for (int r = 0; r < 2; r++) {
        double ms = k[r].t_end - k[r].t_start;
        if (ms > *worst) *worst = ms;
        cr_assert_eq(k[r].rc, RING_ERR_MISMATCH, "%s differs (%s vs %s): rank %d got %s: %s", fields[field], na, nb, r,
                     ring_result_name(k[r].rc), k[r].msg);
        cr_assert(strstr(k[r].msg, na) && strstr(k[r].msg, nb),
                  "%s differs: rank %d's message does not show both sides (\"%s\", \"%s\"): %s", fields[field], r, na, nb,
                  k[r].msg);
        /* The timeout is 60 s: an answer within seconds came from the check, not a timeout. */
        cr_assert(ms < 10000, "%s differs: rank %d took %.0f ms", fields[field], r, ms);
    }
    group_destroy(c, 2);
}

Test(mismatch, every_collective_and_every_field_on_two_ranks, .timeout = 240)
{
    clear_env();
    double worst = 0;
    int cases = 0;
    const call_t base = {.count = 10, .dt = RING_FLOAT32, .op = RING_SUM, .root = 0};
    /* the collective itself: every ordered pair of different collectives */
    for (int x = 0; x < K_N; x++)
        for (int y = 0; y < K_N; y++) {
            if (x == y) continue;
            call_t a = base, b = base;
            a.kind = (kind_t)x;
            b.kind = (kind_t)y;
            mismatch_case(a, b, 0, &worst), cases++;
        }
    for (int x = 0; x < K_BARRIER; x++) {
        call_t a = base, b = base;
        a.kind = b.kind = (kind_t)x;
        b.count = 23;
        mismatch_case(a, b, 1, &worst), cases++;
        /* dtype: same element size (the byte counts agree: only the descriptor can tell), and
         * a different size */
        b = a;
        b.dt = RING_INT32;
        mismatch_case(a, b, 2, &worst), cases++;
        b.dt = RING_FLOAT64;
        mismatch_case(a, b, 2, &worst), cases++;
        if (x == K_ALLREDUCE || x == K_REDUCE_SCATTER) {
            b = a;
            b.op = RING_MAX;
            mismatch_case(a, b, 3, &worst), cases++;
        }
        if (x == K_BROADCAST) {
            b = a;
            b.root = 1;
            mismatch_case(a, b, 4, &worst), cases++;
        }
    }
    /* Large enough for the ring algorithm too (the small ones above use recursive doubling for
     * allreduce and the barrier). */
    call_t a = base, b = base;
    a.count = 100000;
    b.count = 100000;
    b.op = RING_MAX;
    mismatch_case(a, b, 3, &worst), cases++;
    b = a;
    b.dt = RING_INT32;
    mismatch_case(a, b, 2, &worst), cases++;
    cr_log_info("mismatch: %d cases on 2 ranks, slowest answer %.0f ms", cases, worst);
}

/* 4 ranks, only rank `odd` calls differently: its right neighbour and itself see the
 * difference; the other two must hear of it over the star, keep the code and see both calls. */
static void far_mismatch(size_t count_all, size_t count_odd, int odd)
{
    enum { N = 4 };
    ring_comm_t *c[N];
    group_init(c, N, 60000);
    call_t k[N];
    for (int r = 0; r < N; r++)
        k[r] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = r == odd ? count_odd : count_all, .dt = RING_FLOAT32};
    run_calls(k, N);
    char na[64], nb[64];
    snprintf(na, sizeof na, "count=%zu,", count_all);
    snprintf(nb, sizeof nb, "count=%zu,", count_odd);
    for (int r = 0; r < N; r++) {
        double ms = k[r].t_end - k[r].t_start;
        cr_log_info("mismatch (4 ranks, rank %d differs, count %zu): rank %d: %.1f ms: %s", odd, count_all, r, ms, k[r].msg);
        cr_assert_eq(k[r].rc, RING_ERR_MISMATCH, "rank %d got %s: %s", r, ring_result_name(k[r].rc), k[r].msg);
        cr_assert(strstr(k[r].msg, na) && strstr(k[r].msg, nb), "rank %d does not show both calls: %s", r, k[r].msg);
        cr_assert(ms < 10000, "rank %d took %.0f ms (the timeout is 60 s)", r, ms);
    }
    group_destroy(c, N);
}

/* A binomial-tree broadcast (small buffers, N >= 4) where one rank names another root: ranks
 * whose view agrees with their tree parent may finish the broadcast, but none may hang or
 * report success for the call after it, and every error is the mismatch with both roots. */
static void tree_mismatch(int n, int root_all, int root_odd, int odd)
{
    ring_comm_t *c[MAXR];
    group_init(c, n, 60000);
    call_t k[MAXR], b[MAXR];
    for (int r = 0; r < n; r++)
        k[r] = (call_t){.comm = c[r], .kind = K_BROADCAST, .count = 16, .dt = RING_FLOAT32,
                        .root = r == odd ? root_odd : root_all};
    run_calls(k, n);
    for (int r = 0; r < n; r++) b[r] = (call_t){.comm = c[r], .kind = K_BARRIER};
    run_calls(b, n);
    char na[32], nb[32];
    snprintf(na, sizeof na, "root=%d)", root_all);
    snprintf(nb, sizeof nb, "root=%d)", root_odd);
    for (int r = 0; r < n; r++) {
        const call_t *e = k[r].rc != RING_OK ? &k[r] : &b[r];
        double ms = e->t_end - k[r].t_start;
        cr_log_info("tree mismatch (%d ranks, rank %d names root %d, the others %d): rank %d: %s after %.1f ms: %s", n,
                    odd, root_odd, root_all, r, k[r].rc != RING_OK ? "broadcast" : "barrier", ms, e->msg);
        cr_assert_eq(e->rc, RING_ERR_MISMATCH, "rank %d got %s: %s", r, ring_result_name(e->rc), e->msg);
        /* Both broadcasts, or, where this rank's broadcast finished (a root waits for nobody)
         * and its barrier met the other tree's broadcast first, that broadcast against the
         * barrier: which of the two reaches a rank first is a race. */
        const char *other = k[r].root == root_all ? nb : na;
        int both = strstr(e->msg, na) && strstr(e->msg, nb);
        int barrier = k[r].rc == RING_OK && strstr(e->msg, "barrier") && strstr(e->msg, other);
        cr_assert(both || barrier, "rank %d does not show both calls: %s", r, e->msg);
        cr_assert(ms < 10000, "rank %d took %.0f ms (the timeout is 60 s)", r, ms);
    }
    group_destroy(c, n);
}

/* The pipeline depth (chunks per round) and the chunk size decide the order and lengths of the
 * ring's messages. With a different depth alone the lengths agree and only the order differs,
 * which no per-call check sees (before init checked it, 4 MiB all-reduces came back wrong):
 * every rank must refuse at init, naming the other rank and its own values. */
Test(mismatch, chunk_size_or_depth_that_differ_fail_init_on_every_rank, .timeout = 120)
{
    clear_env();
    const struct {
        size_t chunk;
        int depth;
    } odd[] = {{0, 2}, {256 * 1024, 0}, {1003, 4}};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        const int n = 3, bad = 1 + (int)(i % 2);
        init_arg a[MAXR];
        int port = free_port();
        for (int r = 0; r < n; r++) {
            a[r] = (init_arg){.n = n, .rank = r, .timeout_ms = 20000, .secret = NULL};
            if (r == bad) {
                a[r].chunk_bytes = odd[i].chunk;
                a[r].depth = odd[i].depth;
            }
            snprintf(a[r].root, sizeof a[r].root, "127.0.0.1:%d", port);
            cr_assert_eq(pthread_create(&a[r].t, NULL, init_main, &a[r]), 0);
        }
        for (int r = 0; r < n; r++) pthread_join(a[r].t, NULL);
        for (int r = 0; r < n; r++) {
            cr_log_info("layout mismatch %zu: rank %d: %s", i, r, a[r].msg);
            cr_assert_eq(a[r].rc, RING_ERR_INVALID_ARG, "case %zu rank %d: %s: %s", i, r, ring_result_name(a[r].rc),
                         a[r].msg);
            char who[32];
            snprintf(who, sizeof who, "rank %d ", r == bad ? 0 : bad);
            cr_assert(strstr(a[r].msg, who) && strstr(a[r].msg, "RING_PIPELINE_DEPTH"),
                      "case %zu rank %d does not name rank %d and the parameters: %s", i, r, r == bad ? 0 : bad,
                      a[r].msg);
            if (a[r].comm) ring_comm_destroy(a[r].comm);
        }
    }
}

Test(mismatch, tree_broadcast_with_a_different_root, .timeout = 120)
{
    clear_env();
    tree_mismatch(4, 0, 2, 2); /* rank 2 roots its own tree: 2 and 0 each wait for nobody */
    tree_mismatch(5, 4, 0, 1); /* fold pairs: the root outside the hypercube */
    tree_mismatch(8, 3, 5, 6);
}

/* Over shared memory a small recursive-doubling all-reduce sends its descriptor and its data as
 * one message of another length than a descriptor (rd.c). Rank 0 all-reduces, the others
 * broadcast with a tree (RING_ALGO=rd: both latency algorithms at 4 ranks on one host). Rank 1
 * is rank 0's first partner and takes it as its left neighbour: its descriptor receive gets the
 * packed message, and must still name both calls, not two lengths. Every rank must end with the
 * mismatch (in the broadcast, or the barrier after it where its broadcast could finish). */
Test(mismatch, tree_broadcast_against_a_packed_allreduce)
{
    enum { N = 4 };
    clear_env();
    setenv("RING_ALGO", "rd", 1);
    ring_comm_t *c[N];
    group_init(c, N, 60000);
    call_t k[N], b[N];
    for (int r = 0; r < N; r++)
        k[r] = (call_t){.comm = c[r], .kind = r == 0 ? K_ALLREDUCE : K_BROADCAST, .count = 10, .dt = RING_FLOAT32, .root = 2};
    run_calls(k, N);
    for (int r = 0; r < N; r++) b[r] = (call_t){.comm = c[r], .kind = K_BARRIER};
    run_calls(b, N);
    const char *na = "allreduce(count=10,", *nb = "broadcast(count=10,";
    for (int r = 0; r < N; r++) {
        const call_t *e = k[r].rc != RING_OK ? &k[r] : &b[r];
        cr_log_info("tree against packed all-reduce: rank %d: %s: %s", r, k[r].rc != RING_OK ? "broadcast" : "barrier", e->msg);
        cr_assert_eq(e->rc, RING_ERR_MISMATCH, "rank %d got %s: %s", r, ring_result_name(e->rc), e->msg);
        cr_assert(strstr(e->msg, na) && strstr(e->msg, nb), "rank %d does not show both calls: %s", r, e->msg);
    }
    cr_assert_neq(k[1].rc, RING_OK, "rank 1's broadcast finished although its left neighbour all-reduced");
    group_destroy(c, N);
    clear_env();
}

Test(mismatch, four_ranks_where_one_far_rank_differs, .timeout = 120)
{
    clear_env();
    far_mismatch(100000, 100001, 2); /* ring: ranks 2 and 3 see it, 0 and 1 are told */
    far_mismatch(100, 101, 3);       /* recursive doubling */
    far_mismatch(100000, 100001, 0); /* the root itself differs */
}

/* A count that sends one rank to recursive halving and its neighbours to the ring (4 ranks over
 * TCP, and over shared memory without the page): recursive halving's first partner is two ring
 * positions away, so rank 3 waited for rank 1, which ran the ring and read only from rank 0,
 * and rank 0 waited for rank 3's ring messages. Every rank timed out instead of failing with
 * the mismatch. The other way round (one rank on recursive doubling) the same held wherever
 * the ring order is not the rank order (hosts interleaved: test_collectives). */
Test(mismatch, one_rank_on_recursive_halving_against_the_ring, .timeout = 120)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    far_mismatch(100000, 10000, 3);
    far_mismatch(100000, 10000, 1);
    far_mismatch(100000, 100, 2); /* recursive doubling: its first partner is a ring neighbour */
    clear_env();
    setenv("RING_SM_MAX_BYTES", "0", 1);
    far_mismatch(100000, 5000, 3);
    clear_env();
}

/* ================================================================================================
 * e. Timeout message, abort latency
 * ============================================================================================= */

Test(timeout, names_the_collective_its_sequence_number_and_the_peer, .timeout = 180)
{
    clear_env();
    struct {
        kind_t kind;
        size_t count;
    } cases[] = {{K_ALLREDUCE, 10}, {K_ALLREDUCE, 100000}, {K_REDUCE_SCATTER, 1000}, {K_ALLGATHER, 1000},
                 {K_BROADCAST, 1000}, {K_BARRIER, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ring_comm_t *c[2];
        group_init(c, 2, 1000);
        int before = (int)(i % 3); /* so that the sequence number is not always 0 */
        for (int j = 0; j < before; j++) assert_group_works(c, 2, 50, "warm-up");
        call_t k = {.comm = c[0], .kind = cases[i].kind, .count = cases[i].count, .dt = RING_FLOAT32, .root = 1};
        run_calls(&k, 1);
        double ms = k.t_end - k.t_start;
        char want[64];
        snprintf(want, sizeof want, "%s #%d", kind_name[k.kind], before);
        cr_log_info("timeout: %s alone after %.0f ms: %s", kind_name[k.kind], ms, k.msg);
        cr_assert_eq(k.rc, RING_ERR_TIMEOUT, "%s: %s: %s", want, ring_result_name(k.rc), k.msg);
        cr_assert(strstr(k.msg, want), "the message does not name \"%s\": %s", want, k.msg);
        cr_assert(strstr(k.msg, "rank 1"), "the message does not name the peer: %s", k.msg);
        cr_assert(strstr(k.msg, "timed out"), "%s", k.msg);
        cr_assert(ms >= 950 && ms < 6000, "%s timed out after %.0f ms with RING_TIMEOUT_MS=1000", want, ms);
        /* Later calls on this rank fail fast with the same code. */
        double t = now_ms();
        cr_assert_eq(ring_barrier(c[0]), RING_ERR_TIMEOUT);
        cr_assert(now_ms() - t < 50);
        cr_assert(strstr(ring_comm_last_error(c[0]), want), "%s", ring_comm_last_error(c[0]));
        /* The idle peer is told, with the code. */
        cr_assert(wait_remote_failed(c[1], 5000), "rank 1 never heard that rank 0 timed out");
        t = now_ms();
        ring_result_t rc = ring_allreduce(c[1], NULL, NULL, 0, RING_FLOAT32, RING_SUM);
        cr_assert_eq(rc, RING_ERR_TIMEOUT, "rank 1: %s: %s", ring_result_name(rc), ring_comm_last_error(c[1]));
        cr_assert(now_ms() - t < 50);
        cr_assert(strstr(ring_comm_last_error(c[1]), "rank 0") && strstr(ring_comm_last_error(c[1]), want), "rank 1: %s",
                  ring_comm_last_error(c[1]));
        group_destroy(c, 2);
    }
}

/* Two ranks over `transport`; rank 0 alone makes each call, with a 1.5 s timeout; its message
 * must hold each of the case's three strings. */
typedef struct diag_case {
    kind_t kind;
    size_t count;
    const char *want[3];
} diag_case;

static void timeouts_say(const char *transport, const diag_case *cases, size_t n)
{
    clear_env();
    setenv("RING_TRANSPORT", transport, 1);
    for (size_t i = 0; i < n; i++) {
        ring_comm_t *c[2];
        group_init(c, 2, 1500);
        call_t k = {.comm = c[0], .kind = cases[i].kind, .count = cases[i].count, .dt = RING_FLOAT32, .root = 1};
        run_calls(&k, 1);
        cr_log_info("%s, %s of %zu alone: %s", transport, kind_name[k.kind], k.count, k.msg);
        cr_assert_eq(k.rc, RING_ERR_TIMEOUT, "%s: %s", ring_result_name(k.rc), k.msg);
        for (int w = 0; w < 3; w++)
            cr_assert(strstr(k.msg, cases[i].want[w]), "%s, %s of %zu: no \"%s\" in: %s", transport, kind_name[k.kind],
                      k.count, cases[i].want[w], k.msg);
        group_destroy(c, 2);
    }
    unsetenv("RING_TRANSPORT");
}

/* A timeout says what this rank sees of its connections (the transports' diag op). Rank 1
 * never makes the call, so nothing reads its sockets: with a buffer larger than the socket
 * buffers its receive window closes, and rank 0's message must say so; with a small one
 * (recursive doubling, nothing to send once the kernel took it) the receive that waits must
 * say that nothing came. A broadcast from rank 1 only receives. */
Test(timeout, over_tcp_says_whether_the_peer_does_not_read_or_sends_nothing, .timeout = 120)
{
    const diag_case cases[] = {
        {K_ALLREDUCE, (size_t)16 << 20, {"TCP to rank 1:", "not sent by the kernel", "rank 1's receive window is closed"}},
        {K_ALLREDUCE, 10, {"TCP from rank 1:", "still to come", "nothing received for"}},
        {K_BROADCAST, 100000, {"TCP from rank 1:", "still to come", "nothing received for"}},
    };
    timeouts_say("tcp", cases, sizeof cases / sizeof *cases);
}

/* The same over shared memory: the slots a silent rank does not empty, and the receive that
 * nothing reaches. */
Test(timeout, over_shared_memory_says_whether_the_peer_does_not_read_or_sends_nothing, .timeout = 120)
{
    const diag_case cases[] = {
        {K_ALLGATHER, (size_t)4 << 20,
         {"shared memory to rank 1: ", "slots hold pieces rank 1 has not taken: that rank does not read",
          "shared memory from rank 1: "}},
        {K_BROADCAST, 100000, {"shared memory from rank 1:", "still to come", "nothing more has arrived: rank 1 sent nothing"}},
    };
    timeouts_say("shm", cases, sizeof cases / sizeof *cases);
}

/* TCP with 16 KiB socket buffers and 64 KiB chunks, so that a send a peer does not take stays
 * unfinished in the sender instead of in the kernel. */
static void tcp_small_sockbufs(void)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    setenv("RING_SOCKBUF_BYTES", "16K", 1);
    setenv("RING_CHUNK_BYTES", "64K", 1);
}

/* Before its left neighbour's descriptor, a rank whose own segments its right neighbour does
 * not take names both: 3 ranks over TCP with 16 KiB socket buffers (so that a send stays
 * unfinished in this rank), only rank 1 calls a 16 MiB-per-rank all-gather: rank 0 never sends
 * and rank 2 never reads. It used to name rank 0 alone. */
Test(timeout, before_the_left_descriptor_a_right_neighbour_that_does_not_take_is_named, .timeout = 60)
{
    tcp_small_sockbufs();
    ring_comm_t *c[3];
    group_init(c, 3, 1500);
    call_t k = {.comm = c[1], .kind = K_ALLGATHER, .count = (size_t)4 << 20, .dt = RING_FLOAT32};
    run_calls(&k, 1);
    cr_log_info("rank 1: %s", k.msg);
    cr_assert_eq(k.rc, RING_ERR_TIMEOUT, "%s: %s", ring_result_name(k.rc), k.msg);
    cr_assert(strstr(k.msg, "waiting for rank 0 (") && strstr(k.msg, "to enter the collective and for rank 2 (") &&
                  strstr(k.msg, "to take message 1 of"),
              "%s", k.msg);
    group_destroy(c, 3);
    clear_env();
}

/* A broadcast's root receives nothing: once its left neighbour's descriptor is in, all it has
 * left is sending, and a right neighbour that never calls must be named as the one that does
 * not take. 3 ranks over TCP with 16 KiB socket buffers; rank 1 never makes the call. Rank 2
 * (which waits for rank 1's data) has a longer timeout, so that the failure is rank 0's and not
 * one relayed from rank 2. */
Test(timeout, a_broadcast_root_names_the_right_neighbour_that_does_not_take, .timeout = 60)
{
    tcp_small_sockbufs();
    ring_comm_t *c[3];
    const int tmo[3] = {1500, 20000, 20000};
    group_init_each(c, 3, tmo);
    call_t k[2] = {{.comm = c[0], .kind = K_BROADCAST, .count = (size_t)1 << 20, .dt = RING_FLOAT32, .root = 0},
                   {.comm = c[2], .kind = K_BROADCAST, .count = (size_t)1 << 20, .dt = RING_FLOAT32, .root = 0}};
    run_calls(k, 2);
    cr_log_info("rank 0: %s", k[0].msg);
    cr_assert_eq(k[0].rc, RING_ERR_TIMEOUT, "%s: %s", ring_result_name(k[0].rc), k[0].msg);
    cr_assert(strstr(k[0].msg, "broadcast") && strstr(k[0].msg, "while sending message ") &&
                  strstr(k[0].msg, " to rank 1 ("),
              "%s", k[0].msg);
    cr_assert_neq(k[1].rc, RING_OK, "rank 2 cannot finish without rank 1");
    group_destroy(c, 3);
    clear_env();
}

/* Eight ranks over TCP, recursive doubling; rank 3 never makes the call. Each rank's timeout
 * names the peer it waited for, which for most is one that waits too (rank 0 waits for rank 2,
 * which waits for rank 3). Rank 0 has every other rank's stuck report by then and names the
 * one that sent none, and the ranks that heard of its failure first get that text. */
Test(timeout, rank_0_names_the_rank_that_never_reported_waiting, .timeout = 120)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    enum { N = 8, SILENT = 3 };
    ring_comm_t *c[N];
    group_init(c, N, 1200);
    assert_group_works(c, N, 10, "warm-up");
    call_t k[N - 1];
    for (int r = 0, i = 0; r < N; r++)
        if (r != SILENT) k[i++] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = 10, .dt = RING_FLOAT32};
    run_calls(k, N - 1);
    cr_log_info("rank 0: %s", k[0].msg);
    cr_assert_eq(k[0].rc, RING_ERR_TIMEOUT, "rank 0: %s: %s", ring_result_name(k[0].rc), k[0].msg);
    cr_assert(strstr(k[0].msg, "every rank but 3 told rank 0 it was waiting in this call"), "rank 0: %s", k[0].msg);
    for (int i = 1; i < N - 1; i++) cr_assert_eq(k[i].rc, RING_ERR_TIMEOUT, "%s", k[i].msg);
    group_destroy(c, N);
    unsetenv("RING_TRANSPORT");
}

/* The hint must be about the call that timed out. Here the ranks' last stuck reports are from
 * an all-gather that rank 2 entered late; the all-reduce after it, which rank 1 never enters,
 * runs on the shared page, whose waits make no report (under RING_TEST_TRANSPORT=tcp it runs by
 * recursive doubling, which reports, and the hint is right). The hint used to take the
 * all-gather's reports for it and name rank 2, which was in the call. */
Test(timeout, the_hint_is_never_drawn_from_an_earlier_calls_reports, .timeout = 60)
{
    clear_env();
    enum { N = 3 };
    ring_comm_t *c[N];
    group_init(c, N, 2000);
    call_t g[N];
    for (int r = 0; r < N; r++) g[r] = (call_t){.comm = c[r], .kind = K_ALLGATHER, .count = 10, .dt = RING_FLOAT32};
    call_start(&g[0]);
    call_start(&g[1]);
    sleep_ms(1200); /* past the stuck report at a quarter of the timeout */
    call_start(&g[2]);
    for (int r = 0; r < N; r++) pthread_join(g[r].t, NULL);
    for (int r = 0; r < N; r++) cr_assert_eq(g[r].rc, RING_OK, "all-gather, rank %d: %s", r, g[r].msg);
    call_t k[2] = {{.comm = c[0], .kind = K_ALLREDUCE, .count = 10, .dt = RING_FLOAT32},
                   {.comm = c[2], .kind = K_ALLREDUCE, .count = 10, .dt = RING_FLOAT32}};
    run_calls(k, 2);
    cr_log_info("rank 0: %s", k[0].msg);
    cr_assert_eq(k[0].rc, RING_ERR_TIMEOUT, "rank 0: %s: %s", ring_result_name(k[0].rc), k[0].msg);
    cr_assert(strstr(k[0].msg, "rank 1"), "rank 0: %s", k[0].msg);
    /* Over TCP the all-reduce reports (recursive doubling), and the hint names rank 1. */
    cr_assert(!strstr(k[0].msg, "every rank but 2"), "a hint from the all-gather's reports: %s", k[0].msg);
    group_destroy(c, N);
}

/* One rank blocks in a call the other never makes; ring_comm_abort from this thread. Returns
 * the milliseconds from the abort to the call's return. */
static double abort_latency(kind_t kind, size_t count, int async, char *msg, size_t len)
{
    ring_comm_t *c[2];
    group_init(c, 2, 60000);
    call_t k = {.comm = c[0], .kind = kind, .count = count, .dt = RING_FLOAT32, .root = 1, .async = async};
    call_start(&k);
    sleep_ms(150); /* deep in its poll() by now */
    double t = now_ms();
    cr_assert_eq(ring_comm_abort(c[0]), RING_OK);
    pthread_join(k.t, NULL);
    cr_assert_eq(k.rc, RING_ERR_ABORTED, "%s: %s: %s", kind_name[kind], ring_result_name(k.rc), k.msg);
    snprintf(msg, len, "%s", k.msg);
    group_destroy(c, 2);
    return k.t_end - t;
}

/*
 * A rank that destroys its communicator while the others are in a collective with it: its
 * goodbye reaches the root directly and the other ranks through the root's relay, so every
 * rank's error names it and says it called ring_comm_destroy, without waiting out the 4 s
 * cause grace for a failure notice that never comes. 8 MiB per rank so that the senders to
 * rank 2 are still sending (and see the closed connection themselves) when it leaves.
 */
Test(departure, a_rank_that_destroys_mid_collective_is_named_by_every_rank, .timeout = 120)
{
    clear_env();
    for (int round = 0; round < 2; round++) {
        if (round == 1) setenv("RING_TRANSPORT", "tcp", 1);
        ring_comm_t *c[3];
        group_init(c, 3, 60000);
        call_t k[2];
        for (int r = 0; r < 2; r++)
            k[r] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = 2u << 20, .dt = RING_FLOAT32, .op = RING_SUM};
        for (int r = 0; r < 2; r++) call_start(&k[r]);
        sleep_ms(50);
        cr_assert_eq(ring_comm_destroy(c[2]), RING_OK);
        c[2] = NULL;
        for (int r = 0; r < 2; r++) pthread_join(k[r].t, NULL);
        for (int r = 0; r < 2; r++) {
            cr_assert_eq(k[r].rc, RING_ERR_PEER, "%s: rank %d: %s: %s", round ? "tcp" : "auto", r,
                         ring_result_name(k[r].rc), k[r].msg);
            cr_assert(strstr(k[r].msg, "rank 2") && strstr(k[r].msg, "ring_comm_destroy"), "%s: rank %d: %s",
                      round ? "tcp" : "auto", r, k[r].msg);
        }
        /* Rank 1 is not the root: it can only have heard of the departure by the relay. */
        double until = now_ms() + 5000;
        while (ring__watch_someone_left(c[1]) < 0 && now_ms() < until) sleep_ms(2);
        cr_assert_eq(ring__watch_someone_left(c[1]), 2, "%s: the root did not relay rank 2's goodbye to rank 1",
                     round ? "tcp" : "auto");
        cr_log_info("departure (%s): rank 0 after %.0f ms: %s | rank 1 after %.0f ms: %s", round ? "tcp" : "auto",
                    k[0].t_end - k[0].t_start, k[0].msg, k[1].t_end - k[1].t_start, k[1].msg);
        group_destroy(c, 2);
    }
}

/* Init that fails at its end (here: the progress thread, or the watcher, cannot be started) is
 * a failure, not a departure: the ranks that finished init must hear the failing rank's own
 * text. (That rank used to say only goodbye, so the others reported that it "had called
 * ring_comm_destroy".) For a rank that is not the root, and for the root. */
Test(departure, init_that_fails_at_its_end_tells_every_rank_why, .timeout = 60)
{
    clear_env();
    for (int round = 0; round < 4; round++) {
        int bad = round & 1 ? 0 : 2, nth = round < 2 ? 2 : 1;
        const char *what = nth == 2 ? "cannot start the progress thread" : "cannot start the watcher thread";
        init_arg a[3];
        int port = free_port();
        atomic_store(&inits_ok, 0);
        atomic_store(&fail_create_after, 2);
        for (int r = 0; r < 3; r++) {
            a[r] = (init_arg){.n = 3, .rank = r, .timeout_ms = 20000, .fail_create_at = r == bad ? nth : 0};
            snprintf(a[r].root, sizeof a[r].root, "127.0.0.1:%d", port);
            cr_assert_eq(pthread_create(&a[r].t, NULL, init_main, &a[r]), 0);
        }
        for (int r = 0; r < 3; r++) pthread_join(a[r].t, NULL);
        cr_assert_eq(a[bad].rc, RING_ERR_SYSTEM, "rank %d: %s: %s", bad, ring_result_name(a[bad].rc), a[bad].msg);
        cr_assert(strstr(a[bad].msg, what), "rank %d: %s", bad, a[bad].msg);
        for (int r = 0; r < 3; r++) {
            if (r == bad) continue;
            cr_assert_eq(a[r].rc, RING_OK, "rank %d: init: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
            cr_assert(wait_remote_failed(a[r].comm, 5000), "bad rank %d: rank %d never heard of its failure", bad, r);
            ring_result_t rc = ring_barrier(a[r].comm);
            const char *m = ring_comm_last_error(a[r].comm);
            cr_log_info("init failure of rank %d: rank %d: %s: %s", bad, r, ring_result_name(rc), m);
            cr_assert_eq(rc, RING_ERR_PEER, "bad rank %d: rank %d: %s: %s", bad, r, ring_result_name(rc), m);
            char who[32];
            snprintf(who, sizeof who, "rank %d", bad);
            cr_assert(strstr(m, who) && strstr(m, what), "bad rank %d: rank %d: %s", bad, r, m);
            cr_assert_eq(ring_comm_destroy(a[r].comm), RING_OK);
        }
        cr_assert_eq(ring_comm_destroy(a[bad].comm), RING_OK);
    }
}

/* A rank whose init fails while the root still waits for the others in init (here: for rank 1,
 * slow to open the shared-memory all-reduce's page): the root's init fails naming the rank and
 * its reason, not "died during init", because the failing rank said why on its star connection
 * before it closed it; and rank 1 learns it from the root instead of waiting its whole timeout
 * for a page the root will not make. */
Test(sm, init_that_fails_while_the_root_waits_for_the_page_is_named_with_its_reason, .timeout = 60)
{
    clear_env();
    init_arg a[3];
    for (int r = 0; r < 3; r++)
        a[r] = (init_arg){.n = 3, .rank = r, .timeout_ms = 20000, .fail_create_at = r == 2 ? 2 : 0,
                          .slow_page_ms = r == 1 ? 1500 : 0};
    inits_run(a, 3);
    cr_assert_eq(a[2].rc, RING_ERR_SYSTEM, "rank 2: %s: %s", ring_result_name(a[2].rc), a[2].msg);
    cr_assert_eq(a[0].rc, RING_ERR_PEER, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    cr_assert(strstr(a[0].msg, "rank 2") && strstr(a[0].msg, "failed: ") &&
                  strstr(a[0].msg, "cannot start the progress thread"),
              "rank 0: %s", a[0].msg);
    /* Rank 1, still waiting for the page that rank 0 will not make now, hears it from rank 0 at
     * once instead of waiting out its 20 s for the file. */
    cr_assert_eq(a[1].rc, RING_ERR_PEER, "rank 1: %s: %s", ring_result_name(a[1].rc), a[1].msg);
    cr_assert(strstr(a[1].msg, "rank 2") && strstr(a[1].msg, "cannot start the progress thread"), "rank 1: %s",
              a[1].msg);
    for (int r = 0; r < 3; r++) ring_comm_destroy(a[r].comm);
}

/* The root fails in init after it gave the shared page its size but before it wrote the header,
 * while the other ranks have the file open and wait for that header: they hear the root's
 * reason at once instead of waiting out their 20 s and then calling the page "another job's". */
Test(sm, root_that_fails_before_the_page_header_is_named_by_the_ranks_waiting_for_it, .timeout = 60)
{
    clear_env();
    init_arg a[3];
    for (int r = 0; r < 3; r++)
        a[r] = (init_arg){.n = 3, .rank = r, .timeout_ms = 20000, .page_full_ms = r == 0 ? 1000 : 0};
    double t0 = now_ms();
    inits_run(a, 3);
    double took = now_ms() - t0;
    cr_log_info("init ended after %.0f ms", took);
    cr_assert_eq(a[0].rc, RING_ERR_SYSTEM, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    cr_assert(strstr(a[0].msg, "cannot reserve"), "rank 0: %s", a[0].msg);
    for (int r = 1; r < 3; r++) {
        cr_assert_eq(a[r].rc, RING_ERR_PEER, "rank %d: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
        cr_assert(strstr(a[r].msg, "cannot reserve"), "rank %d: %s", r, a[r].msg);
    }
    cr_assert_lt(took, 10000.0, "init took %.0f ms to end", took);
    for (int r = 0; r < 3; r++) ring_comm_destroy(a[r].comm);
}

/* Ranks 1 and 2 leave init while the root still waits at the shared page (RING_TEST_PAGE_HOLD_MS)
 * and their first call is a mismatch (a broadcast of 100 floats against 101): the root's init
 * fails with the cause's code, RING_ERR_MISMATCH, as every rank's does. It failed with
 * RING_ERR_PEER, "rank 2 ... failed during init" (rank 2 had finished its init), and passed
 * that on, so most ranks reported RING_ERR_PEER for a mismatch. */
Test(sm, a_mismatch_while_the_root_is_still_in_init_keeps_its_code, .timeout = 60)
{
    clear_env();
    setenv("RING_TEST_PAGE_HOLD_MS", "3000", 1);
    init_arg a[3];
    for (int r = 0; r < 3; r++)
        a[r] = (init_arg){.n = 3, .rank = r, .timeout_ms = 20000, .then_bcast = r == 0 ? 0 : r == 1 ? 100 : 101};
    inits_run(a, 3);
    unsetenv("RING_TEST_PAGE_HOLD_MS");
    for (int r = 1; r < 3; r++)
        cr_log_info("rank %d's broadcast: %s: %s", r, ring_result_name(a[r].then_rc), a[r].then_msg);
    cr_assert_eq(a[0].rc, RING_ERR_MISMATCH, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    cr_assert(strstr(a[0].msg, "collective mismatch") && !strstr(a[0].msg, "during init"), "rank 0: %s", a[0].msg);
    for (int r = 1; r < 3; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s", r, a[r].msg);
        cr_assert_eq(a[r].then_rc, RING_ERR_MISMATCH, "rank %d: %s: %s", r, ring_result_name(a[r].then_rc), a[r].then_msg);
    }
    for (int r = 0; r < 3; r++) ring_comm_destroy(a[r].comm);
}

/* Accept one connection on lfd within ms: the fd, or -1. */
static int accept_within(int lfd, int ms)
{
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    if (poll(&pf, 1, ms) != 1) return -1;
    return accept(lfd, NULL, NULL);
}

/*
 * A peer that dies while rank 0 connects to it, after the rank table went out: rank 0's
 * sockets reach its listener and are reset before the peer took them (the accept word never
 * comes). No failure notice travels before init ends, so rank 0 must see this on the sockets
 * themselves and fail init within a moment with RING_ERR_CONNECT naming the peer, not retry
 * until RING_TIMEOUT_MS. Rank 1 is this thread, speaking the bootstrap with the job's secret;
 * its "data listener" takes the connections, reads their handshakes and resets them (SO_LINGER
 * 0). With RING_TCP_DUPLEX=1 rank 0 waits for the accept word, which never comes (the sockets
 * are set aside, tcp.c); with 0 the sockets are made once their handshakes are out, and the
 * resets come 100 ms later, while rank 0 waits for rank 1's connection the other way.
 */
/* Garbage on one rank's star connection (a corrupted or foreign frame reaching the root): the
 * root tells every rank, the sender included, naming that rank, with a code the ranks' parser
 * takes. (The root used to relay RING_ERR_PROTOCOL raw: the other ranks read its relay as
 * garbage from rank 0, blamed rank 0 and stopped watching it, and rank 3 heard nothing.) */
Test(departure, garbage_on_a_star_connection_is_named_to_every_rank_the_sender_included, .timeout = 60)
{
    clear_env();
    ring_comm_t *c[4];
    group_init(c, 4, 60000);
    static const char junk[] = "not a ringcomm notice, not at all";
    cr_assert_eq(send(c[3]->bs->root_fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
    for (int r = 0; r < 4; r++) {
        cr_assert(wait_remote_failed(c[r], 5000), "rank %d never heard of the garbage from rank 3", r);
        ring_result_t rc = ring_barrier(c[r]);
        const char *m = ring_comm_last_error(c[r]);
        cr_log_info("garbage on the star: rank %d: %s: %s", r, ring_result_name(rc), m);
        cr_assert_eq(rc, r == 0 ? RING_ERR_PROTOCOL : RING_ERR_PEER, "rank %d: %s: %s", r, ring_result_name(rc), m);
        cr_assert(strstr(m, "rank 3") && strstr(m, "garbage on the bootstrap connection with rank 3"), "rank %d: %s", r,
                  m);
    }
    group_destroy(c, 4);
}

static void *destroy_main(void *comm)
{
    ring_comm_destroy(comm);
    return NULL;
}

/* ring_comm_destroy while a blocking call runs inline on another thread and an async call
 * waits behind it (a caller bug the header names, which destroy still waits out): the
 * progress thread used to spin at shutdown holding the lock the inline call needs to finish,
 * so destroy never returned. */
Test(departure, destroy_during_an_inline_call_with_an_async_one_queued_finishes_both, .timeout = 60)
{
    clear_env();
    ring_comm_t *c[2];
    group_init(c, 2, 10000);
    call_t a = {.comm = c[0], .kind = K_ALLREDUCE, .count = 1000, .dt = RING_FLOAT32, .op = RING_SUM};
    call_start(&a);
    sleep_ms(100);
    static float s[1000], r[1000], s1[1000], r1[1000];
    ring_request_t *q = NULL;
    cr_assert_eq(ring_allreduce_async(c[0], s, r, 1000, RING_FLOAT32, RING_SUM, &q), RING_OK);
    pthread_t d;
    cr_assert_eq(pthread_create(&d, NULL, destroy_main, c[0]), 0);
    sleep_ms(100);
    for (int i = 0; i < 2; i++) {
        ring_result_t rc = ring_allreduce(c[1], s1, r1, 1000, RING_FLOAT32, RING_SUM);
        cr_assert_eq(rc, RING_OK, "rank 1, call %d: %s: %s", i, ring_result_name(rc), ring_comm_last_error(c[1]));
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    cr_assert_eq(pthread_timedjoin_np(a.t, NULL, &until), 0, "rank 0's inline call never returned");
    cr_assert_eq(a.rc, RING_OK, "rank 0's inline call: %s: %s", ring_result_name(a.rc), a.msg);
    cr_assert_eq(pthread_timedjoin_np(d, NULL, &until), 0, "ring_comm_destroy never returned");
    cr_assert_eq(ring_comm_destroy(c[1]), RING_OK);
}

typedef struct {
    ring_request_t *q;
    ring_result_t rc;
    pthread_t t;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    w->rc = ring_wait(w->q);
    return NULL;
}

/* The same with a thread blocked in ring_wait on a queued call, as a watchdog's destroy meets
 * the thread that waits for the collective (train/ddp.c has one): destroy freed the request
 * and the communicator under the waiting thread, which then read the freed request and freed
 * it again (AddressSanitizer: heap-use-after-free in ring_wait). */
Test(departure, destroy_while_another_thread_waits_for_a_request_finishes_the_wait_first, .timeout = 60)
{
    clear_env();
    /* The waiting thread takes the lock back 300 ms after its request is done, as a thread of
     * a busy program may: the old destroy had freed the request and the communicator by then
     * (in a plain race the waiter usually won). */
    setenv("RING_TEST_WAIT_WAKE_HOLD_MS", "300", 1);
    ring_comm_t *c[2];
    group_init(c, 2, 10000);
    static float s[1000], r[1000], s1[1000], r1[1000];
    waiter_t w = {0};
    cr_assert_eq(ring_allreduce_async(c[0], s, r, 1000, RING_FLOAT32, RING_SUM, &w.q), RING_OK);
    cr_assert_eq(pthread_create(&w.t, NULL, waiter_main, &w), 0);
    sleep_ms(50);
    pthread_t d;
    cr_assert_eq(pthread_create(&d, NULL, destroy_main, c[0]), 0);
    sleep_ms(100);
    ring_result_t rc = ring_allreduce(c[1], s1, r1, 1000, RING_FLOAT32, RING_SUM);
    cr_assert_eq(rc, RING_OK, "rank 1: %s: %s", ring_result_name(rc), ring_comm_last_error(c[1]));
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    cr_assert_eq(pthread_timedjoin_np(w.t, NULL, &until), 0, "rank 0's ring_wait never returned");
    cr_assert_eq(w.rc, RING_OK, "rank 0's ring_wait: %s", ring_result_name(w.rc));
    cr_assert_eq(pthread_timedjoin_np(d, NULL, &until), 0, "ring_comm_destroy never returned");
    cr_assert_eq(ring_comm_destroy(c[1]), RING_OK);
}

/* A forged rank: its table entry, with the settings a rank of this process resolves (so that
 * the entry passes the table checks), and a listener at its address, which is returned. */
static int fake_rank_entry(ring__params_t *prm, ring__peer_info_t *fake)
{
    ring_config_t cfg;
    ring_config_init(&cfg);
    cfg.secret = SECRET;
    cr_assert_eq(ring__params_resolve(prm, &cfg), RING_OK);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t ll = sizeof la;
    cr_assert(lfd >= 0 && bind(lfd, (struct sockaddr *)&la, sizeof la) == 0 && listen(lfd, 16) == 0 &&
                  getsockname(lfd, (struct sockaddr *)&la, &ll) == 0,
              "fake listener: %s", strerror(errno));
    memset(fake, 0, sizeof *fake);
    fake->addr.len = sizeof la;
    memcpy(fake->addr.data, &la, sizeof la);
    snprintf(fake->host, sizeof fake->host, "fake-peer"); /* another host: TCP, never shared memory */
    snprintf(fake->bootid, sizeof fake->bootid, "fake-boot");
    fake->pid = 1;
    fake->layout = ring__layout_key(prm->chunk_bytes, prm->pipeline_depth);
    fake->flags = ring__peer_tcp_flags(prm->nsocks, prm->tcp_duplex);
    return lfd;
}

/* The root's bootstrap connection, made by a forged rank within 10 s. */
static int fake_rank_join(int port, const ring__params_t *prm, int rank, int n, const ring__peer_info_t *fake)
{
    target_t root;
    struct sockaddr_in ra = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memcpy(&root.ss, &ra, sizeof ra);
    root.len = sizeof ra;
    int bfd = -1;
    for (double until = now_ms() + 10000; bfd < 0 && now_ms() < until; sleep_ms(10)) bfd = stranger_connect(&root, 200);
    cr_assert(bfd >= 0, "rank 0 never listened on the root port");
    unsigned char hello[RING__HELLO_LEN];
    ring__hello_build(hello, prm->secret, (uint32_t)rank, (uint32_t)n, fake);
    cr_assert_eq(send_bytes(bfd, hello, sizeof hello), 0);
    return bfd;
}

/* Rank 0 that fails init after ranks joined tells them why. A root that timed out waiting for
 * rank 2 used to close its connections, and rank 1 said "Connection reset by peer" (the close
 * was read as a reset) without naming rank 2; a root that could not send the table to rank 2
 * (it had reset its connection) left rank 1, which had the table, saying "rank 0 died". */
Test(departure, a_root_that_fails_init_tells_the_ranks_that_joined_why, .timeout = 120)
{
    clear_env();
    enum { N = 3 };
    /* Rank 2 never comes: the root's 3 s timeout passes (rank 1 joins well within it), rank 1
     * has 30 s. */
    int port = free_port();
    init_arg a[2];
    init_start(&a[0], N, 0, port, 3000, NULL);
    init_start(&a[1], N, 1, port, 30000, NULL);
    double t0 = now_ms();
    pthread_join(a[1].t, NULL);
    double took = now_ms() - t0;
    pthread_join(a[0].t, NULL);
    cr_log_info("root timed out: rank 0: %s: %s; rank 1 after %.0f ms: %s: %s", ring_result_name(a[0].rc), a[0].msg,
                took, ring_result_name(a[1].rc), a[1].msg);
    cr_assert_eq(a[0].rc, RING_ERR_TIMEOUT, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    cr_assert_eq(a[1].rc, RING_ERR_TIMEOUT, "rank 1: %s: %s", ring_result_name(a[1].rc), a[1].msg);
    cr_assert(strstr(a[1].msg, "missing rank(s) 2") && !strstr(a[1].msg, "reset"), "rank 1: %s", a[1].msg);
    cr_assert_lt(took, 20000, "rank 1 took %.0f ms (its timeout: 30 s)", took);

    /* Forged rank 2 joins first and resets its connection; rank 1 joins after it and gets the
     * table before rank 0 finds rank 2's connection broken. */
    ring__params_t prm;
    ring__peer_info_t fake;
    int lfd = fake_rank_entry(&prm, &fake);
    port = free_port();
    init_start(&a[0], N, 0, port, 30000, NULL);
    int bfd = fake_rank_join(port, &prm, 2, N, &fake);
    sleep_ms(1500); /* rank 0 reads the HELLO (it reads each connection as soon as it accepts it) */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(bfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(bfd);
    sleep_ms(100);
    t0 = now_ms();
    init_start(&a[1], N, 1, port, 30000, NULL);
    pthread_join(a[1].t, NULL);
    took = now_ms() - t0;
    pthread_join(a[0].t, NULL);
    close(lfd);
    cr_log_info("table not sent: rank 0: %s: %s; rank 1 after %.0f ms: %s: %s", ring_result_name(a[0].rc), a[0].msg,
                took, ring_result_name(a[1].rc), a[1].msg);
    cr_assert_eq(a[0].rc, RING_ERR_PEER, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    cr_assert(strstr(a[0].msg, "sending the rank table to rank 2"), "rank 0: %s", a[0].msg);
    cr_assert_eq(a[1].rc, RING_ERR_PEER, "rank 1: %s: %s", ring_result_name(a[1].rc), a[1].msg);
    cr_assert(strstr(a[1].msg, "sending the rank table to rank 2") && strstr(a[1].msg, "rank 0"), "rank 1: %s",
              a[1].msg);
    cr_assert_lt(took, 20000, "rank 1 took %.0f ms (timeout 30 s)", took);
}

/* The same, with the same timeout on every rank (as a launcher gives them) and rank 1 started a
 * little before the root, so that its clock runs out first: it waits past its own deadline for
 * the root's reason. It used to time out beside the root with "rank 0 died, or other ranks
 * never joined?" (6 of 7 ranks at 8 ranks in a review's runs). */
Test(departure, ranks_with_the_roots_timeout_get_its_reason_for_a_rank_that_never_joined, .timeout = 60)
{
    clear_env();
    enum { N = 4 };
    int port = free_port();
    init_arg a[3];
    init_start(&a[1], N, 1, port, 1500, NULL);
    init_start(&a[2], N, 2, port, 1500, NULL);
    sleep_ms(100);
    init_start(&a[0], N, 0, port, 1500, NULL);
    for (int r = 0; r < 3; r++) pthread_join(a[r].t, NULL);
    cr_assert_eq(a[0].rc, RING_ERR_TIMEOUT, "rank 0: %s: %s", ring_result_name(a[0].rc), a[0].msg);
    for (int r = 1; r < 3; r++) {
        cr_assert_eq(a[r].rc, RING_ERR_TIMEOUT, "rank %d: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
        cr_assert(strstr(a[r].msg, "missing rank(s) 3"), "rank %d: %s", r, a[r].msg);
    }
}

/* A rank in init looks at its star connection with the root: a goodbye there that the root
 * relayed for another rank (it finished init and left) must not hide the root's own death
 * afterwards. It did: the look found "a goodbye" and took the closed connection for a rank
 * that left, on every later look too. */
Test(departure, a_relayed_goodbye_does_not_hide_the_roots_death_during_init, .timeout = 30)
{
    enum { N = 3 };
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ring__peer_info_t peers[N];
    memset(peers, 0, sizeof peers);
    for (int r = 0; r < N; r++) {
        snprintf(peers[r].host, sizeof peers[r].host, "host%d", r);
        peers[r].pid = 100u + (unsigned)r;
    }
    ring__bootstrap_t bs = {.root_fd = sv[0], .rank_fds = NULL, .nranks = N};
    ring_comm_t *view = calloc(1, sizeof *view);
    cr_assert(view);
    view->rank = 2;
    view->nranks = N;
    view->peers = peers;
    view->bs = &bs;
    unsigned char f[RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX];
    size_t n = ring__notice_build(f, RING__NOTICE_BYE, 1, 0, NULL); /* rank 1 left, relayed by the root */
    cr_assert_eq(send_bytes(sv[1], f, n), 0);
    cr_assert_eq(ring__watch_init_check(view, "connecting to peers"), RING_OK, "rank 1's goodbye is no failure: %s",
                 view->errmsg);
    close(sv[1]); /* the root dies */
    ring_result_t rc = ring__watch_init_check(view, "connecting to peers");
    cr_assert_eq(rc, RING_ERR_PEER, "the root's connection closed after a relayed goodbye: %s: %s", ring_result_name(rc),
                 view->errmsg);
    cr_assert(strstr(view->errmsg, "rank 0") && strstr(view->errmsg, "died"), "%s", view->errmsg);
    /* The root's own goodbye before its close is a root that left. */
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    close(bs.root_fd);
    bs.root_fd = sv[0];
    n = ring__notice_build(f, RING__NOTICE_BYE, 0, 0, NULL);
    cr_assert_eq(send_bytes(sv[1], f, n), 0);
    close(sv[1]);
    cr_assert_eq(ring__watch_init_check(view, "connecting to peers"), RING_OK, "%s", view->errmsg);
    close(sv[0]);
    free(view);
}

Test(departure, a_peer_that_resets_the_connections_before_taking_them_fails_init_at_once, .timeout = 120)
{
    enum { TIMEOUT_MS = 30000, N = 2 };
    for (int duplex = 1; duplex >= 0; duplex--) {
        clear_env();
        if (!duplex) setenv("RING_TCP_DUPLEX", "0", 1);
        ring__params_t prm;
        ring__peer_info_t fake;
        int lfd = fake_rank_entry(&prm, &fake);
        cr_assert_eq(prm.tcp_duplex, duplex);

        int port = free_port();
        init_arg a;
        init_start(&a, N, 0, port, TIMEOUT_MS, NULL);
        int bfd = fake_rank_join(port, &prm, 1, N, &fake);
        unsigned char table[RING__TABLE_HDR_LEN + N * RING__TABLE_ENTRY_LEN];
        const int64_t within = 10000000000LL; /* 10 s for each read below */
        cr_assert_eq(ring__io_full(bfd, table, sizeof table, 0, ring__now_ns() + within, -1), 0, "no rank table from rank 0");
        /* As many sockets as rank 0 decides for this pair from the table it sent (tcp.c's rule,
         * not a copy of it here). */
        ring__peer_info_t tab[N];
        for (int r = 0; r < N; r++)
            cr_assert_eq(ring__peer_info_parse(table + RING__TABLE_HDR_LEN + r * RING__TABLE_ENTRY_LEN, &tab[r]), 0,
                         "rank table entry %d", r);
        ring_comm_t view;
        memset(&view, 0, sizeof view);
        view.params = prm;
        view.rank = 0; /* rank 0's side of the pair, as tcp.c there sees it */
        view.nranks = N;
        view.peers = tab;
        const int nsock = ring__tcp_pair_nsocks(&view, 1);
        cr_assert(nsock >= 1 && nsock <= RING__MAX_NSOCKS);

        /* Take every socket rank 0 opens to this "rank" and see its handshake; then reset them
         * all. */
        int fds[RING__MAX_NSOCKS];
        for (int i = 0; i < nsock; i++) {
            fds[i] = accept_within(lfd, 10000);
            cr_assert(fds[i] >= 0, "duplex %d: rank 0 did not connect socket %d of %d", duplex, i, nsock);
            unsigned char hs[RING__TCP_HS_LEN];
            cr_assert_eq(ring__io_full(fds[i], hs, sizeof hs, 0, ring__now_ns() + within, -1), 0,
                         "duplex %d: no handshake on socket %d", duplex, i);
            cr_assert_eq(ring__get32(hs), DATA_HS_MAGIC);
        }
        /* One-way sockets count as made once their handshakes are out, but rank 0 may still
         * be peeking at them for a refusal word: give it time to take them first. */
        if (!duplex) sleep_ms(100);
        for (int i = 0; i < nsock; i++) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(fds[i]);
        }
        double t_reset = now_ms();
        pthread_join(a.t, NULL);
        double took = now_ms() - t_reset;
        cr_log_info("departure (duplex %d): rank 0 failed %.0f ms after the resets: %s", duplex, took, a.msg);
        /* Duplex: no socket is made before the accept word, so the resets are set aside and
         * rank 0 fails once no refusal word showed on a sibling (200 ms). One-way: rank 0 made
         * the connection before the resets, so they fail it while rank 0 waits for the other
         * direction. */
        ring_result_t want = duplex ? RING_ERR_CONNECT : RING_ERR_PEER;
        const char *says = duplex ? "closed this rank's connection before taking it" : "Connection reset by peer";
        cr_assert_eq(a.rc, want, "duplex %d: rank 0: %s: %s", duplex, ring_result_name(a.rc), a.msg);
        cr_assert(strstr(a.msg, "rank 1") && strstr(a.msg, says), "duplex %d: rank 0: %s", duplex, a.msg);
        cr_assert(took < 3000, "duplex %d: rank 0 needed %.0f ms after the resets (timeout %d ms)", duplex, took,
                  TIMEOUT_MS);
        ring_comm_destroy(a.comm);
        close(bfd);
        close(lfd);
    }
}

Test(abort, unblocks_a_call_in_flight_within_100_ms, .timeout = 120)
{
    clear_env();
    char msg[RING__ERRMSG_MAX];
    double ms[5];
    for (int i = 0; i < 5; i++) ms[i] = abort_latency(K_ALLREDUCE, 100000, 0, msg, sizeof msg);
    qsort(ms, 5, sizeof *ms, cmp_double);
    cr_log_info("abort: ring allreduce returned %.2f / %.2f / %.2f ms after the abort (min / median / max): %s", ms[0],
                ms[2], ms[4], msg);
    cr_assert(ms[2] < 100, "median %.1f ms from ring_comm_abort to the call's return", ms[2]);
    /* Every other waiting path (recursive doubling, the progress thread, the broadcast and the
     * barrier), once each; a loaded machine may delay one wake-up, not ten. */
    struct {
        kind_t kind;
        size_t count;
        int async;
    } other[] = {{K_ALLREDUCE, 10, 0}, {K_ALLREDUCE, 100000, 1}, {K_BROADCAST, 1000, 0}, {K_BARRIER, 0, 0},
                 {K_REDUCE_SCATTER, 1000, 1}};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        double t = abort_latency(other[i].kind, other[i].count, other[i].async, msg, sizeof msg);
        cr_log_info("abort: %s%s (count %zu) returned %.2f ms after the abort: %s", kind_name[other[i].kind],
                    other[i].async ? " async" : "", other[i].count, t, msg);
        cr_assert(t < 1000, "%s: %.1f ms from ring_comm_abort to the call's return", kind_name[other[i].kind], t);
    }
}

/* A watchdog thread aborts; the call it wakes returns at once, and its thread destroys the
 * communicator, as the docs say to, while the abort still records and sends its error (its
 * log line made slow here). Destroy must wait for the abort to finish: it used to free the
 * communicator under it (ASan: heap-use-after-free in ring_comm_abort). */
static double abort_returned_ms;

static void *abort_slowly(void *comm)
{
    slow_log_ms = 300;
    ring_comm_abort(comm);
    abort_returned_ms = now_ms();
    return NULL;
}

Test(abort, destroy_right_after_the_woken_call_waits_for_the_abort_to_finish, .timeout = 60)
{
    clear_env();
    setenv("RING_DEBUG", "WARN", 1); /* the abort's error is logged: where its thread waits */
    ring_comm_t *c[2];
    group_init(c, 2, 20000);
    call_t k = {.comm = c[0], .kind = K_ALLREDUCE, .count = 1 << 16, .dt = RING_FLOAT32, .op = RING_SUM};
    call_start(&k); /* rank 1 never joins: the call waits */
    sleep_ms(100);
    pthread_t w;
    cr_assert_eq(pthread_create(&w, NULL, abort_slowly, c[0]), 0);
    pthread_join(k.t, NULL);
    cr_assert_eq(k.rc, RING_ERR_ABORTED, "%s: %s", ring_result_name(k.rc), k.msg);
    cr_assert_eq(ring_comm_destroy(c[0]), RING_OK);
    const double destroyed = now_ms();
    pthread_join(w, NULL);
    cr_log_info("call returned %.0f ms before the abort did; destroy returned %.0f ms after it", abort_returned_ms - k.t_end,
                destroyed - abort_returned_ms);
    cr_assert_geq(destroyed, abort_returned_ms, "ring_comm_destroy returned %.0f ms before ring_comm_abort",
                  abort_returned_ms - destroyed);
    ring_comm_destroy(c[1]);
}

/* TCP stream sockets this process has open. */
static int tcp_sockets(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        int fd = atoi(e->d_name), dom = 0, type = 0;
        socklen_t l = sizeof dom, m = sizeof type;
        if (e->d_name[0] != '.' && fd != dirfd(d) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &m) == 0 && (dom == AF_INET || dom == AF_INET6) &&
            type == SOCK_STREAM)
            n++;
    }
    if (d) closedir(d);
    return n;
}

/* A forked child's report, read by the parent: ends the child (status 0 if all was written). */
static void tell_parent(int fd, const char *m)
{
    ssize_t w = write(fd, m, strlen(m));
    _exit(w == (ssize_t)strlen(m) ? 0 : 1);
}

/* A child with a pipe to report through (tell_parent): its pid, 0 in the child. */
static pid_t fork_reporting(int out[2])
{
    cr_assert_eq(pipe(out), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    return pid;
}

/* The parent's side: the child's report in m, and the child must have exited with status 0. */
static void child_report(pid_t pid, int out[2], char *m, size_t len)
{
    close(out[1]);
    ssize_t n = read(out[0], m, len - 1);
    int st = 0;
    waitpid(pid, &st, 0);
    close(out[0]);
    cr_assert(n > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);
    m[n] = '\0';
}

/* A process forked after init (a data-loader worker, say) holds none of the communicators'
 * sockets, so a rank that dies is still seen to die while such a child lives (it used to keep
 * every connection open: peers waited out RING_TIMEOUT_MS), and the child's calls on them say
 * why they cannot run instead of speaking for the parent's rank. The parent goes on. */
Test(departure, a_forked_child_holds_no_socket_and_cannot_use_the_parents_communicators, .timeout = 60)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    ring_comm_t *c[2];
    group_init(c, 2, 20000);
    const int before = tcp_sockets();
    cr_assert_gt(before, 0);
    int out[2];
    pid_t pid = fork_reporting(out);
    if (pid == 0) {
        char m[600];
        int sockets = tcp_sockets();
        float x = 1;
        ring_result_t rc = ring_allreduce(c[0], &x, &x, 1, RING_FLOAT32, RING_SUM);
        ring_result_t dc = ring_comm_destroy(c[1]);
        snprintf(m, sizeof m, "%d %d %d %s", sockets, (int)rc, (int)dc, ring_comm_last_error(NULL));
        tell_parent(out[1], m);
    }
    char m[600] = "";
    child_report(pid, out, m, sizeof m);
    int sockets = -1, rc = -1, dc = -1, at = 0;
    cr_assert_eq(sscanf(m, "%d %d %d %n", &sockets, &rc, &dc, &at), 3, "%s", m);
    cr_log_info("parent: %d TCP sockets; child: %d, allreduce %s: %s, destroy %s", before, sockets,
                ring_result_name((ring_result_t)rc), m + at, ring_result_name((ring_result_t)dc));
    cr_assert_eq(sockets, 0, "the child kept %d of the parent's %d TCP sockets", sockets, before);
    cr_assert_eq(rc, RING_ERR_INVALID_ARG, "child's allreduce: %s: %s", ring_result_name((ring_result_t)rc), m + at);
    cr_assert(strstr(m + at, "fork()"), "%s", m + at);
    cr_assert_eq(dc, RING_OK);
    /* The parent's ranks are untouched. */
    call_t k[2];
    for (int r = 0; r < 2; r++) k[r] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = 1000, .dt = RING_FLOAT32, .op = RING_SUM};
    run_calls(k, 2);
    for (int r = 0; r < 2; r++) cr_assert_eq(k[r].rc, RING_OK, "rank %d after the fork: %s", r, k[r].msg);
    group_destroy(c, 2);
}

/* The child knows every communicator its parent had, however many: it kept 64, and the oldest
 * beyond them were "destroyed twice?" in the child (destroy failed; a request queued on one was
 * waited for forever). Here the 2-rank pair is older than 70 one-rank communicators. */
Test(departure, a_forked_child_knows_every_communicator_of_its_parent, .timeout = 60)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    ring_comm_t *c[2], *one[70];
    group_init(c, 2, 20000);
    for (int i = 0; i < 70; i++) cr_assert_eq(ring_comm_init(&one[i], 1, 0, NULL), RING_OK);
    int out[2];
    pid_t pid = fork_reporting(out);
    if (pid == 0) {
        char m[700];
        float x = 1;
        int sockets = tcp_sockets();
        ring_result_t rc = ring_allreduce(c[0], &x, &x, 1, RING_FLOAT32, RING_SUM);
        const char *why = ring_comm_last_error(NULL);
        int fork_text = strstr(why, "fork()") != NULL;
        ring_result_t dc = ring_comm_destroy(c[1]), d1 = ring_comm_destroy(one[0]);
        snprintf(m, sizeof m, "%d %d %d %d %d %s", sockets, (int)rc, fork_text, (int)dc, (int)d1, why);
        tell_parent(out[1], m);
    }
    char m[700] = "";
    child_report(pid, out, m, sizeof m);
    int sockets = -1, rc = -1, fork_text = 0, dc = -1, d1 = -1;
    cr_assert_eq(sscanf(m, "%d %d %d %d %d", &sockets, &rc, &fork_text, &dc, &d1), 5, "%s", m);
    cr_assert_eq(sockets, 0, "the child kept %d TCP sockets", sockets);
    cr_assert(rc == RING_ERR_INVALID_ARG && fork_text, "child's allreduce on the oldest communicator: %s", m);
    cr_assert_eq(dc, RING_OK, "child's destroy of the oldest communicator: %s", m);
    cr_assert_eq(d1, RING_OK, "%s", m);
    for (int i = 0; i < 70; i++) ring_comm_destroy(one[i]);
    group_destroy(c, 2);
}

/* A call that failed on a closed data connection waits up to 4 s for the cause (comm.c).
 * Rank 1, in a child process, shuts its data sockets down and keeps its star connection, so
 * no cause ever comes. During that wait rank 0's main thread either aborts (the call must
 * return RING_ERR_ABORTED at once: it used to sit the wait out, 2.5 s here, and return
 * RING_ERR_PEER) or makes a call with a NULL buffer (the failure recorded and sent to the
 * others must still be the closed connection: it used to be the NULL buffer's text). */
static void closed_connection_wait(int abort_it)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    const int port = free_port();
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* Gone with the test process, even when one of its assertions ends it early. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(go[1]);
        init_arg a = {.n = 2, .rank = 1, .timeout_ms = 60000};
        snprintf(a.root, sizeof a.root, "127.0.0.1:%d", port);
        init_main(&a);
        char b;
        if (a.rc != RING_OK || read(go[0], &b, 1) != 1) _exit(1);
        DIR *d = opendir("/proc/self/fd");
        for (struct dirent *e; d && (e = readdir(d));) {
            struct stat st;
            int fd = atoi(e->d_name);
            if (e->d_name[0] != '.' && fd != a.comm->bs->root_fd && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
                shutdown(fd, SHUT_RDWR);
        }
        sleep(30);
        _exit(0);
    }
    init_arg a;
    init_start(&a, 2, 0, port, 60000, NULL);
    pthread_join(a.t, NULL);
    cr_assert_eq(a.rc, RING_OK, "init: %s", a.msg);
    call_t k = {.comm = a.comm, .kind = K_ALLREDUCE, .count = 1 << 20, .dt = RING_FLOAT32, .op = RING_SUM};
    call_start(&k);
    sleep_ms(100);
    cr_assert_eq(write(go[1], "g", 1), 1);
    sleep_ms(1500); /* past the transport's own 1 s look for an explanation: in comm.c's wait */
    double t = now_ms();
    if (abort_it) cr_assert_eq(ring_comm_abort(a.comm), RING_OK);
    else cr_assert_eq(ring_allreduce(a.comm, NULL, NULL, 10, RING_FLOAT32, RING_SUM), RING_ERR_INVALID_ARG);
    pthread_join(k.t, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char failed[RING__ERRMSG_MAX];
    snprintf(failed, sizeof failed, "%s", a.comm->fail_msg);
    cr_log_info("%s in the cause wait: returned %.1f ms after it (%.0f ms into the call): %s: %s; recorded: %s",
                abort_it ? "abort" : "a NULL-buffer call", k.t_end - t, k.t_end - k.t_start, ring_result_name(k.rc),
                k.msg, failed);
    if (abort_it) {
        cr_assert_eq(k.rc, RING_ERR_ABORTED, "%s: %s", ring_result_name(k.rc), k.msg);
        cr_assert(k.t_end - t < 1000, "returned %.0f ms after the abort", k.t_end - t);
    } else {
        cr_assert_eq(k.rc, RING_ERR_PEER, "%s: %s", ring_result_name(k.rc), k.msg);
        /* The closed connection, as its sender or its receiver saw it first ("connection
         * closed", or a send's "Broken pipe" on a loaded machine), never the NULL buffer. */
        for (int i = 0; i < 2; i++) {
            const char *m = i ? k.msg : failed;
            cr_assert(strstr(m, "tcp: connection") && strstr(m, "rank 1") && !strstr(m, "NULL buffer"),
                      "recorded failure: %s; the call's: %s", failed, k.msg);
        }
    }
    cr_assert_eq(ring_comm_destroy(a.comm), RING_OK);
    close(go[0]);
    close(go[1]);
}

Test(abort, during_the_wait_for_a_closed_connections_cause_returns_aborted_at_once, .timeout = 60)
{
    closed_connection_wait(1);
}

Test(departure, another_threads_error_during_the_wait_for_a_cause_does_not_become_the_failure, .timeout = 60)
{
    closed_connection_wait(0);
}

/* ================================================================================================
 * f. The shared-memory all-reduce (src/collectives/sm.c): its waits have no socket to poll
 * ============================================================================================= */

Test(sm, waits_end_in_a_timeout_an_abort_or_a_departure_naming_the_rank, .timeout = 180)
{
    clear_env();
    enum { N = 3, COUNT = 50000 }; /* 200 KB of float32: above recursive doubling, in the window */
    ring_comm_t *c[N];

    /* It runs by default for this size on 3 ranks of one host, and gets it right. */
    group_init(c, N, 1000);
    cr_assert(ring__sm_available(c[0]), "3 ranks of one host have no shared-memory all-reduce page");
    assert_group_works(c, N, COUNT, "warm-up");
    cr_assert(ring__sm_count(c[0]) >= 1, "the all-reduce of %d int32 did not take the shared-memory path", COUNT);

    /* Rank 2 never comes: ranks 0 and 1 time out naming it. */
    call_t k[N];
    for (int r = 0; r < 2; r++) k[r] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = COUNT, .dt = RING_FLOAT32};
    run_calls(k, 2);
    for (int r = 0; r < 2; r++) {
        double ms = k[r].t_end - k[r].t_start;
        cr_log_info("sm timeout: rank %d after %.0f ms: %s", r, ms, k[r].msg);
        cr_assert_eq(k[r].rc, RING_ERR_TIMEOUT, "rank %d: %s: %s", r, ring_result_name(k[r].rc), k[r].msg);
        cr_assert(strstr(k[r].msg, "shared-memory all-reduce") && strstr(k[r].msg, "rank 2"), "rank %d: %s", r, k[r].msg);
        cr_assert(ms >= 950 && ms < 6000, "rank %d timed out after %.0f ms with RING_TIMEOUT_MS=1000", r, ms);
    }
    group_destroy(c, N);

    /* Abort: a rank waiting alone returns at once. */
    group_init(c, N, 60000);
    k[0] = (call_t){.comm = c[0], .kind = K_ALLREDUCE, .count = COUNT, .dt = RING_FLOAT32};
    call_start(&k[0]);
    sleep_ms(150);
    double t = now_ms();
    cr_assert_eq(ring_comm_abort(c[0]), RING_OK);
    pthread_join(k[0].t, NULL);
    cr_log_info("sm abort: %.1f ms after the abort: %s", k[0].t_end - t, k[0].msg);
    cr_assert_eq(k[0].rc, RING_ERR_ABORTED, "%s: %s", ring_result_name(k[0].rc), k[0].msg);
    cr_assert(k[0].t_end - t < 100, "returned %.0f ms after ring_comm_abort", k[0].t_end - t);
    group_destroy(c, N);

    /* Departure: rank 2 destroys its communicator while 0 and 1 wait for it. */
    group_init(c, N, 60000);
    for (int r = 0; r < 2; r++) k[r] = (call_t){.comm = c[r], .kind = K_ALLREDUCE, .count = COUNT, .dt = RING_FLOAT32};
    for (int r = 0; r < 2; r++) call_start(&k[r]);
    sleep_ms(100);
    cr_assert_eq(ring_comm_destroy(c[2]), RING_OK);
    c[2] = NULL;
    for (int r = 0; r < 2; r++) pthread_join(k[r].t, NULL);
    for (int r = 0; r < 2; r++) {
        cr_log_info("sm departure: rank %d after %.0f ms: %s", r, k[r].t_end - k[r].t_start, k[r].msg);
        cr_assert_eq(k[r].rc, RING_ERR_PEER, "rank %d: %s: %s", r, ring_result_name(k[r].rc), k[r].msg);
        cr_assert(strstr(k[r].msg, "rank 2") && strstr(k[r].msg, "ring_comm_destroy"), "rank %d: %s", r, k[r].msg);
    }
    group_destroy(c, 2);
}

/* A rank that is slow to look: rank 2 enters a small all-reduce first and is held between its
 * look at the others and the checks that end a wait (the test hook), while ranks 0 and 1 enter,
 * finish (a small round needs nothing more of rank 2 once its input is in) and destroy their
 * communicators. Released, rank 2 sees the goodbyes, but everything it waits for is there:
 * it must finish the call with the right result, not fail with RING_ERR_PEER. A build that
 * trusted the goodbye over a last look failed here (and once in the collectives suite under
 * ASan, 2026-11-27). */
static ring_comm_t *_Atomic hold_comm;
static atomic_int hold_state; /* 0: not yet, 1: holding, 2: released */

static void hold_hook(const ring_comm_t *comm, uint64_t seq)
{
    (void)seq;
    int idle = 0;
    if (comm != atomic_load(&hold_comm) || !atomic_compare_exchange_strong(&hold_state, &idle, 1)) return;
    double until = now_ms() + 20000;
    while (atomic_load(&hold_state) == 1 && now_ms() < until) sleep_ms(1);
}

Test(sm, a_rank_slow_to_look_finishes_a_call_the_others_finished_and_left, .timeout = 120)
{
    clear_env();
    enum { N = 3, COUNT = 13 };
    ring_comm_t *c[N];
    group_init(c, N, 60000);
    assert_group_works(c, N, COUNT, "init");
    uint64_t before = ring__sm_count(c[2]);
    cr_assert(before >= 1, "the all-reduce of %d int32 on 3 ranks did not take the shared-memory path", COUNT);

    atomic_store(&hold_comm, c[2]);
    atomic_store(&hold_state, 0);
    ring__sm_set_wait_hook_for_tests(hold_hook);
    check_arg a[N];
    a[2] = (check_arg){.comm = c[2], .count = COUNT, .salt = 77};
    cr_assert_eq(pthread_create(&a[2].t, NULL, check_main, &a[2]), 0);
    double until = now_ms() + 10000;
    while (atomic_load(&hold_state) != 1 && now_ms() < until) sleep_ms(1);
    cr_assert_eq(atomic_load(&hold_state), 1, "rank 2 never waited in the shared-memory all-reduce");

    for (int r = 0; r < 2; r++) {
        a[r] = (check_arg){.comm = c[r], .count = COUNT, .salt = 77};
        cr_assert_eq(pthread_create(&a[r].t, NULL, check_main, &a[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(a[r].t, NULL);
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s: %s", r, ring_result_name(a[r].rc), a[r].msg);
        cr_assert_eq(a[r].bad, 0, "rank %d: %zu wrong elements", r, a[r].bad);
    }
    group_destroy(c, 2);
    until = now_ms() + 5000;
    while (ring__watch_someone_left(c[2]) < 0 && now_ms() < until) sleep_ms(2);
    cr_assert_geq(ring__watch_someone_left(c[2]), 0, "rank 2 did not hear of the others' goodbyes");

    atomic_store(&hold_state, 2);
    pthread_join(a[2].t, NULL);
    ring__sm_set_wait_hook_for_tests(NULL);
    cr_assert_eq(a[2].rc, RING_OK, "rank 2: %s: %s", ring_result_name(a[2].rc), a[2].msg);
    cr_assert_eq(a[2].bad, 0, "rank 2: %zu wrong elements", a[2].bad);
    cr_assert_eq(ring__sm_count(c[2]), before + 1, "rank 2's call did not run on the shared-memory path");
    cr_assert_eq(ring_comm_destroy(c[2]), RING_OK);
}

/* Ranks that run ahead of one slow to look. Rank 0 of 17 enters a small all-reduce first and is
 * held in its first wait (the test hook), before it read the others' records of the call. The
 * others finish the call (rank 0's input and record are in) and go on with ring broadcasts from
 * roots 1, 2, ..., 16. A root sends at once and waits only for its left neighbour's descriptor,
 * so broadcast k stalls at rank k (its left is stuck in broadcast k - 1) and rank d finishes
 * calls up to d - 1 of them: rank 16 gets 16 calls ahead of rank 0. Each call writes a record
 * into a ring of 16 per rank, and rank 16's record of its 16th broadcast used to rewrite the
 * record of the all-reduce that rank 0 had still to read: rank 0 then failed a correct call with
 * "rank 16 ... is 16 or more calls past #.. allreduce" (RING_ERR_MISMATCH). Now a rank waits
 * before it rewrites a record that some rank has not finished with. */
enum { AHEAD_N = 17, AHEAD_COUNT = 13 };

typedef struct ahead_arg {
    ring_comm_t *comm;
    ring_result_t rc;
    atomic_int done; /* calls that returned RING_OK */
    size_t bad;
    char msg[RING__ERRMSG_MAX];
    pthread_t t;
} ahead_arg;

static void *ahead_main(void *p)
{
    ahead_arg *a = p;
    int r = ring_comm_rank(a->comm), n = ring_comm_nranks(a->comm);
    int32_t b[AHEAD_COUNT];
    for (int k = 0; k <= n; k++) {
        const int reduce = k == 0 || k == n; /* an all-reduce first and last, broadcasts from 1 .. n-1 between */
        for (int j = 0; j < AHEAD_COUNT; j++) b[j] = reduce ? (r + 1) * (j + 1) : r == k ? 1000 * k + j : -1;
        a->rc = reduce ? ring_allreduce(a->comm, b, b, AHEAD_COUNT, RING_INT32, RING_SUM)
                       : ring_broadcast(a->comm, b, AHEAD_COUNT, RING_INT32, k);
        if (a->rc != RING_OK) {
            snprintf(a->msg, sizeof a->msg, "%s", ring_comm_last_error(a->comm));
            break;
        }
        for (int j = 0; j < AHEAD_COUNT; j++) a->bad += b[j] != (reduce ? n * (n + 1) / 2 * (j + 1) : 1000 * k + j);
        atomic_fetch_add(&a->done, 1);
    }
    return NULL;
}

Test(sm, ranks_that_run_ahead_of_one_slow_to_look_wait_before_they_rewrite_its_records, .timeout = 180)
{
    clear_env();
    setenv("RING_TREE_MAX_BYTES", "0", 1); /* ring broadcasts (the tree's roots wait for more) */
    enum { N = AHEAD_N, SLOW = 0 };
    static init_arg ia[N];
    static ahead_arg a[N];
    int port = free_port();
    for (int r = 0; r < N; r++) {
        /* 64 slots on each ring edge: rank 16 forwards every broadcast to rank 0, which takes none. */
        ia[r] = (init_arg){.n = N, .rank = r, .timeout_ms = 60000, .chunk_bytes = 64 << 10, .depth = 64};
        snprintf(ia[r].root, sizeof ia[r].root, "127.0.0.1:%d", port);
        cr_assert_eq(pthread_create(&ia[r].t, NULL, init_main, &ia[r]), 0);
    }
    ring_comm_t *c[N];
    for (int r = 0; r < N; r++) pthread_join(ia[r].t, NULL);
    for (int r = 0; r < N; r++) {
        cr_assert_eq(ia[r].rc, RING_OK, "rank %d: init: %s: %s", r, ring_result_name(ia[r].rc), ia[r].msg);
        c[r] = ia[r].comm;
    }
    uint64_t before = ring__sm_count(c[SLOW]);

    atomic_store(&hold_comm, c[SLOW]);
    atomic_store(&hold_state, 0);
    ring__sm_set_wait_hook_for_tests(hold_hook);
    a[SLOW] = (ahead_arg){.comm = c[SLOW]};
    cr_assert_eq(pthread_create(&a[SLOW].t, NULL, ahead_main, &a[SLOW]), 0);
    double until = now_ms() + 10000;
    while (atomic_load(&hold_state) != 1 && now_ms() < until) sleep_ms(1);
    cr_assert_eq(atomic_load(&hold_state), 1, "rank 0 never waited in the shared-memory all-reduce");
    for (int r = 1; r < N; r++) {
        a[r] = (ahead_arg){.comm = c[r]};
        cr_assert_eq(pthread_create(&a[r].t, NULL, ahead_main, &a[r]), 0);
    }
    /* The staircase: rank d finishes the all-reduce and d - 1 broadcasts. */
    until = now_ms() + 20000;
    while (atomic_load(&a[N - 1].done) < N - 1 && now_ms() < until) sleep_ms(5);
    sleep_ms(200);
    int ahead = atomic_load(&a[N - 1].done);
    char stairs[256] = "";
    for (int r = 0, o = 0; r < N && o < (int)sizeof stairs - 8; r++)
        o += snprintf(stairs + o, sizeof stairs - (size_t)o, " %d", atomic_load(&a[r].done));
    cr_log_info("calls finished per rank:%s", stairs);
    atomic_store(&hold_state, 2);
    for (int r = 0; r < N; r++) pthread_join(a[r].t, NULL);
    ring__sm_set_wait_hook_for_tests(NULL);
    cr_log_info("run ahead: rank %d had finished %d calls when rank 0 was let go", N - 1, ahead);
    for (int r = 0; r < N; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d after %d calls: %s: %s", r, atomic_load(&a[r].done),
                     ring_result_name(a[r].rc), a[r].msg);
        cr_assert_eq(atomic_load(&a[r].done), N + 1, "rank %d", r);
        cr_assert_eq(a[r].bad, 0, "rank %d: %zu wrong elements", r, a[r].bad);
    }
    cr_assert_eq(ring__sm_count(c[SLOW]), before + 2, "rank 0's all-reduces did not run on the shared-memory path");
    cr_assert_geq(ahead, N - 1, "rank %d finished only %d calls ahead: the test did not reach the record ring's end",
                  N - 1, ahead);
    group_destroy(c, N);
}

/* Above 1 MiB auto gives the page every size where rank 0's host has one NUMA node and keeps
 * the ring where it has several (ring__sm_max_bytes); RING_SM_MAX_BYTES overrides either way.
 * 4 MiB calls, checked element by element, counted by the path that ran them. */
Test(sm, large_calls_follow_the_numa_default_and_the_setting, .timeout = 120)
{
    clear_env();
    enum { N = 3 };
    const size_t count = (size_t)1 << 20; /* 4 MiB of int32 */
    ring_comm_t *c[N];
    group_init(c, N, 20000);
    cr_assert(ring__sm_available(c[0]), "3 ranks of one host have no shared-memory all-reduce page");
    const int one_node = c[0]->peers[0].numa_nodes <= 1;
    cr_log_info("rank 0's host: %d NUMA nodes; default limit %zu", c[0]->peers[0].numa_nodes, ring__sm_max_bytes(c[0], NULL));
    cr_assert_eq(ring__sm_max_bytes(c[0], NULL), one_node ? SIZE_MAX : (size_t)1 << 20);
    uint64_t before = ring__sm_count(c[0]);
    assert_group_works(c, N, count, "init");
    cr_assert_eq(ring__sm_count(c[0]) - before, one_node ? 1u : 0u, "a 4 MiB all-reduce %s the shared-memory path",
                 one_node ? "did not take" : "took");
    group_destroy(c, N);

    /* 1 MiB set: the ring takes the 4 MiB calls whatever the host has. */
    setenv("RING_SM_MAX_BYTES", "1M", 1);
    group_init(c, N, 20000);
    before = ring__sm_count(c[0]);
    assert_group_works(c, N, count, "init with RING_SM_MAX_BYTES=1M");
    cr_assert_eq(ring__sm_count(c[0]), before, "a 4 MiB all-reduce took the shared-memory path above RING_SM_MAX_BYTES");
    group_destroy(c, N);

    /* Every size set: the page takes them on a host of several NUMA nodes too. */
    setenv("RING_SM_MAX_BYTES", "1T", 1);
    group_init(c, N, 20000);
    before = ring__sm_count(c[0]);
    assert_group_works(c, N, count, "init with RING_SM_MAX_BYTES=1T");
    cr_assert_eq(ring__sm_count(c[0]) - before, 1u, "a 4 MiB all-reduce did not take the shared-memory path");
    group_destroy(c, N);
    clear_env();
}

/* A RING_SHM_DIR with no room for the page (a 1 MiB tmpfs): every rank leaves the path out at
 * init (rank 0's refusal travels in the page's header), the job runs on the other algorithms,
 * and nothing is left in the directory. full: the tmpfs is filled first, so that not even the
 * page's header fits (a container's /dev/shm that others filled): the refusal travels in the
 * file's size, and init used to fail on every rank ("cannot reserve 16384 bytes" for the direct
 * CUDA IPC page, or 2105344 for this one). Needs mount(2): skipped where it is refused. */
static void no_room(int full)
{
    clear_env();
    char dir[] = "/tmp/ringcomm-sm-tiny-XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    if (mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=1777") != 0) {
        int e = errno;
        rmdir(dir);
        fprintf(stderr, "SKIP sm/no_room_for_the_page: cannot mount a small tmpfs here (%s)\n", strerror(e));
        cr_skip_test("cannot mount a small tmpfs here (%s): the page's refusal path is not exercised", strerror(e));
    }
    char filler[64] = "";
    if (full) {
        snprintf(filler, sizeof filler, "%s/filler", dir);
        int fd = open(filler, O_WRONLY | O_CREAT | O_EXCL, 0600);
        cr_assert_geq(fd, 0, "%s: %s", filler, strerror(errno));
        static char block[4096];
        while (write(fd, block, sizeof block) == (ssize_t)sizeof block) {}
        close(fd);
        struct statvfs vs;
        cr_assert(statvfs(dir, &vs) == 0 && vs.f_bavail == 0, "the tmpfs still has %lu free blocks",
                  (unsigned long)vs.f_bavail);
    }
    setenv("RING_SHM_DIR", dir, 1);
    enum { N = 3 };
    ring_comm_t *c[N];
    group_init(c, N, 20000);
    for (int r = 0; r < N; r++) cr_assert(!ring__sm_available(c[r]), "rank %d has the page in a 1 MiB tmpfs", r);
    assert_group_works(c, N, 50000, "init without the page");
    cr_assert_eq(ring__sm_count(c[0]), 0);
    group_destroy(c, N);
    unsetenv("RING_SHM_DIR");
    if (filler[0]) unlink(filler);
    DIR *d = opendir(dir);
    int left = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) left += e->d_name[0] != '.';
    if (d) closedir(d);
    umount(dir);
    rmdir(dir);
    cr_assert_eq(left, 0, "%d file(s) left in the tmpfs", left);
}

/* The names a job makes in RING_SHM_DIR are listed for every user; they must not tell another
 * user the name of the shared page to come (made after the segments' names) or the job nonce
 * that data handshakes carry. They used to carry the nonce: a local user watching /dev/shm made
 * the page's name first, and every job on the host failed init. */
Test(sm, names_in_the_shm_directory_carry_no_job_nonce, .timeout = 60)
{
    clear_env();
    char dir[] = "/dev/shm/ringcomm-test-names-XXXXXX";
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    setenv("RING_SHM_DIR", dir, 1);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    cr_assert(in >= 0 && inotify_add_watch(in, dir, IN_CREATE) >= 0, "inotify: %s", strerror(errno));
    enum { N = 3 };
    ring_comm_t *c[N];
    group_init(c, N, 20000);
    assert_group_works(c, N, 1000, "after init");
    char names[64][NAME_MAX + 1];
    int nn = 0;
    union {
        struct inotify_event e;
        char b[4096];
    } ev;
    ssize_t got;
    while ((got = read(in, ev.b, sizeof ev.b)) > 0)
        for (char *p = ev.b; p < ev.b + got && nn < 64;) {
            struct inotify_event *e = (struct inotify_event *)(void *)p;
            if (e->len) snprintf(names[nn++], sizeof names[0], "%s", e->name);
            p += sizeof *e + e->len;
        }
    close(in);
    char nonce[17], page[NAME_MAX + 1];
    snprintf(nonce, sizeof nonce, "%016llx", (unsigned long long)c[0]->job_nonce);
    snprintf(page, sizeof page, "ringcomm-%u-%u-%016llx-sm", (unsigned)geteuid(), (unsigned)c[0]->peers[0].pid,
             (unsigned long long)ring__shm_name_tag(c[0], "sm"));
    int saw_page = 0, segments = 0, carries = -1;
    for (int i = 0; i < nn; i++) {
        cr_log_info("made %s", names[i]);
        if (strstr(names[i], nonce) && carries < 0) carries = i;
        if (!strcmp(names[i], page)) saw_page = 1;
        else if (strncmp(names[i], "ringcomm-", 9) == 0) segments++;
    }
    group_destroy(c, N);
    unsetenv("RING_SHM_DIR");
    rmdir(dir); /* before the checks: a failed one must not leave it behind */
    cr_assert(carries < 0, "%s carries the job nonce %s", carries < 0 ? "" : names[carries], nonce);
    cr_assert(saw_page, "no shared page named %s among %d names", page, nn);
    cr_assert_gt(segments, 0, "no transport segment among %d names", nn);
}

Test(sm, no_room_for_the_page_leaves_it_out_on_every_rank, .timeout = 120) { no_room(0); }
Test(sm, a_full_directory_leaves_every_page_out_on_every_rank, .timeout = 120) { no_room(1); }
