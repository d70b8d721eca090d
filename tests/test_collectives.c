/*
 * Multi-process collective tests: each Test starts N ranks of mp_worker (fork+exec, so every
 * rank is a fresh process with its own library state) talking over loopback TCP, waits for
 * them under a hard deadline, and requires every rank to exit 0. The checks themselves run in
 * the ranks (see mp_worker.c); files the ranks leave in a scratch directory let this side
 * verify cross-rank properties without trusting any rank (identical float results, barrier
 * ordering, how many collectives were checked).
 *
 * Environment: RING_TEST_WORKER (path of mp_worker, set by meson), RING_TEST_LARGE=1 enables
 * the > 2^31-element test, RING_TEST_SEED (optional) perturbs every seed.
 * RING_TEST_TRANSPORT runs the whole suite over one transport (meson runs it several times):
 * "tcp" and "shm" set RING_TRANSPORT on every rank; "mix" sets tcp on every third rank
 * (2, 5, ...), so rings have shared-memory and TCP edges side by side. RING_TEST_ALGO sets
 * RING_ALGO and RING_TEST_NSOCKS sets RING_NSOCKS on every rank. A test's own settings win.
 *
 * Bounds for slow beds (tests/rdma/suite.sh runs this binary in an emulated guest over
 * soft-RoCE, where a byte costs ~100x what it costs on loopback). Unset, nothing changes:
 *   RING_TEST_MAX_RANKS=N   tests that need more than N ranks (N >= 2) are skipped; fault
 *                           trials draw their rank count from 2..min(6, N)
 *   RING_TEST_MAX_BYTES=B   passed on to every rank: mp_worker shrinks any collective whose
 *                           largest buffer exceeds B bytes (K/M/G suffixes) to one of B/2..B
 *   RING_TEST_BACKTOBACK_OPS  passed on: calls in the backtoback soak (5000)
 *   RING_TEST_FAULT_TRIALS  number of fault-injection trials (50)
 *   RING_TEST_FAULT_BOUND_MS  how soon after the kill every survivor must have its error (2000)
 */
#include <criterion/criterion.h>

#include "free_port.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_RANKS 16
#define EXIT_PORT_IN_USE 77
/* After one rank fails, the others should notice the dead peer quickly; this bounds how long
 * they are given before being killed so that a failure never costs the whole deadline. */
#define GRACE_AFTER_FAILURE_S 20

typedef struct {
    const char *scenario;
    int nranks;
    uint64_t seed;
    const char *const *env; /* extra "NAME=value" entries, NULL-terminated; may be NULL */
    const char *const *env_odd; /* more, for odd ranks only, taking precedence over env */
    int deadline_s;
    int second_root; /* threads scenario: a second communicator needs its own root port */
    int kill_ok;     /* faults scenario: a rank that SIGKILLed itself (left kill.<r>) is fine */
    const char *hosts; /* "a,b,a": RING_HOST_ID of rank 0, 1, 2 (stand-in host identities) */
    int log_init;      /* RING_DEBUG=INFO for INIT and NET into <outdir>/init.<rank> */
} job_t;

static int read_outfile(const char *dir, const char *name, char *buf, size_t len);

typedef struct {
    int ok;
    int port_in_use;
    double seconds;
    char outdir[256];
    char msg[2048];
    int pids[MAX_RANKS];
} job_result_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void random_hex32(char out[33])
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r < 0 && errno == EINTR) continue;
        cr_assert(r > 0, "getrandom: %s", strerror(errno));
        got += (size_t)r;
    }
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Tunables a developer may have exported must not leak into the ranks (the test sets its
 * own); logging switches are kept so that a failing run can be re-run with logs. */
static int inherit_var(const char *kv)
{
    if (strncmp(kv, "RING_", 5) != 0) return 1;
    return strncmp(kv, "RING_LOG", 8) == 0 || strncmp(kv, "RING_DEBUG", 10) == 0;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    cr_assert(r >= 0, "out of memory");
    return s;
}

/* A non-negative integer setting with an optional K/M/G suffix; dflt when unset or empty.
 * A malformed value fails the test instead of being read as something else. */
static long long env_count(const char *name, long long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    int sh = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
    if (sh) end++;
    cr_assert(errno == 0 && end != v && !*end && x >= 0 && x <= (LLONG_MAX >> 30), "%s=%s: not a count", name, v);
    return x << sh;
}

/* RING_TEST_MAX_RANKS, 0 when unset. Below 2 it would skip tests after they set things up
 * (the shm ones mount a tmpfs, then run 2 ranks): refused. */
static int max_ranks(void)
{
    long long m = env_count("RING_TEST_MAX_RANKS", 0);
    cr_assert(m == 0 || (m >= 2 && m <= MAX_RANKS), "RING_TEST_MAX_RANKS=%lld: must be 2..%d", m, MAX_RANKS);
    return (int)m;
}

static const char *worker_path(void)
{
    const char *w = getenv("RING_TEST_WORKER");
    cr_assert(w && *w, "RING_TEST_WORKER is not set (meson sets it to the mp_worker binary)");
    cr_assert(access(w, X_OK) == 0, "RING_TEST_WORKER=%s: %s", w, strerror(errno));
    return w;
}

static uint64_t seed_for(uint64_t base)
{
    const char *s = getenv("RING_TEST_SEED");
    return s && *s ? base ^ strtoull(s, NULL, 0) : base;
}

static void remove_outdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void describe_status(char *buf, size_t len, int rank, int status, int killed)
{
    if (killed)
        snprintf(buf, len, "rank %d: killed (SIGKILL from the test: %s); ", rank,
                 killed == 1 ? "deadline" : "still running after another rank failed");
    else if (WIFEXITED(status))
        snprintf(buf, len, "rank %d: exit %d; ", rank, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "rank %d: killed by signal %d (%s); ", rank, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "rank %d: status 0x%x; ", rank, status);
}

static void run_job_once(const job_t *job, job_result_t *res)
{
    const char *worker = worker_path();
    int n = job->nranks;
    cr_assert(n >= 1 && n <= MAX_RANKS);
    int maxn = max_ranks();
    if (maxn && n > maxn) {
        fprintf(stderr, "[%s N=%d] skipped: RING_TEST_MAX_RANKS=%d\n", job->scenario, n, maxn);
        cr_skip_test("needs %d ranks, RING_TEST_MAX_RANKS=%d", n, maxn);
    }
    long long max_bytes = env_count("RING_TEST_MAX_BYTES", 0), b2b_ops = env_count("RING_TEST_BACKTOBACK_OPS", 0);
    memset(res, 0, sizeof *res);

    snprintf(res->outdir, sizeof res->outdir, "%s/ringcomm-mp-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert(mkdtemp(res->outdir), "mkdtemp: %s", strerror(errno));

    char secret[33];
    random_hex32(secret);
    int port = free_port(), port2 = job->second_root ? free_port() : 0;
    char seedstr[32];
    snprintf(seedstr, sizeof seedstr, "0x%" PRIx64, job->seed);

    /* The whole environment of every rank is built before fork: the child only execs. */
    size_t nenv = 0;
    while (environ[nenv]) nenv++;
    size_t nextra = 0;
    while (job->env && job->env[nextra]) nextra++;
    size_t nodd = 0;
    while (job->env_odd && job->env_odd[nodd]) nodd++;
    char **envs[MAX_RANKS];
    size_t nalloc[MAX_RANKS]; /* leading entries of envs[r] that are ours to free */
    for (int r = 0; r < n; r++) {
        char **e = calloc(nenv + nextra + nodd + 24, sizeof *e);
        cr_assert(e, "out of memory");
        size_t k = 0;
        /* Per-test settings first: getenv returns the first match. */
        for (size_t i = 0; r % 2 && i < nodd; i++) e[k++] = xasprintf("%s", job->env_odd[i]);
        for (size_t i = 0; i < nextra; i++) e[k++] = xasprintf("%s", job->env[i]);
        e[k++] = xasprintf("RING_RANK=%d", r);
        e[k++] = xasprintf("RING_NRANKS=%d", n);
        e[k++] = xasprintf("RING_ROOT=127.0.0.1:%d", port);
        e[k++] = xasprintf("RING_SECRET=%s", secret);
        e[k++] = xasprintf("RING_TIMEOUT_MS=30000");
        e[k++] = xasprintf("RING_TEST_OUTDIR=%s", res->outdir);
        if (port2) e[k++] = xasprintf("RING_TEST_ROOT2=127.0.0.1:%d", port2);
        if (max_bytes) e[k++] = xasprintf("RING_TEST_MAX_BYTES=%lld", max_bytes);
        if (b2b_ops) e[k++] = xasprintf("RING_TEST_BACKTOBACK_OPS=%lld", b2b_ops);
        const char *tpv = getenv("RING_TEST_TRANSPORT"), *algo = getenv("RING_TEST_ALGO");
        if (tpv && !strcmp(tpv, "mix")) e[k++] = xasprintf("RING_TRANSPORT=%s", r % 3 == 2 ? "tcp" : "auto");
        else if (tpv && *tpv) e[k++] = xasprintf("RING_TRANSPORT=%s", tpv);
        if (algo && *algo) e[k++] = xasprintf("RING_ALGO=%s", algo);
        const char *nsv = getenv("RING_TEST_NSOCKS");
        if (nsv && *nsv) e[k++] = xasprintf("RING_NSOCKS=%s", nsv);
        if (job->hosts) {
            const char *h = job->hosts;
            for (int q = 0; q < r && h; q++) h = strchr(h, ',') ? strchr(h, ',') + 1 : NULL;
            cr_assert(h && *h, "job hosts \"%s\" has no entry for rank %d", job->hosts, r);
            e[k++] = xasprintf("RING_HOST_ID=%.*s", (int)strcspn(h, ","), h);
        }
        if (job->log_init) {
            e[k++] = xasprintf("RING_DEBUG=INFO");
            e[k++] = xasprintf("RING_DEBUG_SUBSYS=INIT,NET");
            e[k++] = xasprintf("RING_DEBUG_FILE=%s/init.%d", res->outdir, r);
        }
        /* In sanitizer builds undefined behaviour in any rank must fail the test, not scroll
         * by (meson sets this itself; this covers running the binary by hand). */
        if (!getenv("UBSAN_OPTIONS")) e[k++] = xasprintf("UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1");
        nalloc[r] = k;
        for (size_t i = 0; i < nenv; i++)
            if (inherit_var(environ[i])) e[k++] = environ[i];
        e[k] = NULL;
        envs[r] = e;
    }
    char *argv[] = {(char *)worker, (char *)job->scenario, seedstr, NULL};

    pid_t parent = getpid();
    pid_t pids[MAX_RANKS];
    int status[MAX_RANKS], done[MAX_RANKS], killed[MAX_RANKS];
    double t0 = now_s();
    for (int r = 0; r < n; r++) {
        done[r] = killed[r] = 0;
        status[r] = 0;
        pid_t pid = fork();
        if (pid < 0) {
            for (int q = 0; q < r; q++) kill(pids[q], SIGKILL);
            for (int q = 0; q < r; q++) waitpid(pids[q], NULL, 0);
            cr_assert_fail("fork: %s", strerror(errno));
        }
        if (pid == 0) {
            /* Never outlive the test process, even if it is killed by its own timeout. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(126);
            execve(worker, argv, envs[r]);
            _exit(127);
        }
        pids[r] = pid;
        res->pids[r] = pid;
    }

    double deadline = t0 + job->deadline_s, fail_at = 0;
    int alive = n, timed_out = 0;
    while (alive > 0) {
        for (int r = 0; r < n; r++) {
            if (done[r]) continue;
            pid_t w = waitpid(pids[r], &status[r], WNOHANG);
            if (w != pids[r]) continue;
            done[r] = 1;
            alive--;
            int bad = !WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0;
            if (bad && !fail_at) fail_at = now_s();
            /* Rank 0 of the job's communicator, or of a second one a scenario makes (another rank
             * may be its rank 0: "rebuild"). */
            if (WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == EXIT_PORT_IN_USE) res->port_in_use = 1;
        }
        if (!alive) break;
        double t = now_s();
        int why = 0;
        if (t > deadline) why = 1, timed_out = 1;
        else if (res->port_in_use || (fail_at && t > fail_at + GRACE_AFTER_FAILURE_S)) why = 2;
        if (why) {
            for (int r = 0; r < n; r++)
                if (!done[r]) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], &status[r], 0);
                    done[r] = 1;
                    killed[r] = why;
                }
            break;
        }
        sleep_ms(10);
    }
    res->seconds = now_s() - t0;

    for (int r = 0; r < n; r++) {
        for (size_t k = 0; k < nalloc[r]; k++) free(envs[r][k]);
        free(envs[r]);
    }

    res->ok = 1;
    size_t off = 0;
    for (int r = 0; r < n; r++) {
        int good = !killed[r] && WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
        if (!good && job->kill_ok && !killed[r] && WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL) {
            char name[32], buf[64];
            snprintf(name, sizeof name, "kill.%d", r);
            good = read_outfile(res->outdir, name, buf, sizeof buf);
        }
        if (good) continue;
        res->ok = 0;
        if (off < sizeof res->msg)
            describe_status(res->msg + off, sizeof res->msg - off, r, status[r], killed[r]);
        off = strlen(res->msg);
    }
    if (timed_out && off < sizeof res->msg)
        snprintf(res->msg + off, sizeof res->msg - off, "deadline of %d s exceeded; ", job->deadline_s);
}

/* Reads a small integer or token file the ranks left; 0 if absent. */
static int read_outfile(const char *dir, const char *name, char *buf, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[got] = '\0';
    return got > 0;
}

/* Shared-memory segments in dir created by any rank of the job (their names carry the
 * creator's pid): a segment must be unlinked as soon as both sides mapped it, so none may
 * outlive a job, not even one in which a rank was killed. Returns how many, first in *name. */
static int segments_left(const char *dir, const job_result_t *res, int n, char *name, size_t len)
{
    DIR *d = opendir(dir);
    int found = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned uid;
        int pid;
        if (sscanf(e->d_name, "ringcomm-%u-%d-", &uid, &pid) != 2) continue;
        for (int r = 0; r < n; r++)
            if (res->pids[r] == pid) {
                if (!found++) snprintf(name, len, "%s/%s", dir, e->d_name);
            }
    }
    closedir(d);
    return found;
}

/*
 * Runs the job (once more with fresh ports if rank 0 lost its port to someone else), asserts
 * every rank passed and every rank reported a non-zero number of checked operations. Returns
 * the outdir for further checks; the caller removes it.
 */
static void run_job(const job_t *job, job_result_t *res, long *checked_per_rank)
{
    for (int attempt = 0;; attempt++) {
        run_job_once(job, res);
        if (!res->port_in_use || attempt == 1) break;
        fprintf(stderr, "[%s N=%d] root port was taken before rank 0 could bind it; retrying with a new port\n",
                job->scenario, job->nranks);
        remove_outdir(res->outdir);
    }
    if (!res->ok) {
        char outdir[256];
        snprintf(outdir, sizeof outdir, "%s", res->outdir);
        remove_outdir(outdir);
        cr_assert_fail("%s N=%d seed=0x%" PRIx64 " failed after %.1f s: %s(the ranks' stderr above says why; "
                       "rerun one rank by hand with RING_RANK/RING_NRANKS/RING_ROOT set: mp_worker %s 0x%" PRIx64 ")",
                       job->scenario, job->nranks, job->seed, res->seconds, res->msg, job->scenario, job->seed);
    }
    char seg[512];
    int nseg = segments_left("/dev/shm", res, job->nranks, seg, sizeof seg);
    if (nseg) remove_outdir(res->outdir);
    cr_assert(nseg == 0, "%s N=%d: %d shared-memory segment(s) of the job left behind, e.g. %s", job->scenario,
              job->nranks, nseg, seg);
    long first = -1;
    for (int r = 0; r < job->nranks; r++) {
        char name[64], buf[64];
        snprintf(name, sizeof name, "checked.%d", r);
        int have = read_outfile(res->outdir, name, buf, sizeof buf);
        long v = have ? strtol(buf, NULL, 10) : -1;
        if (v <= 0) remove_outdir(res->outdir);
        cr_assert(v > 0, "%s N=%d: rank %d exited 0 but reports %ld checked operations: a test that checks nothing",
                  job->scenario, job->nranks, r, v);
        if (r == 0) first = v;
        checked_per_rank[r] = v;
    }
    fprintf(stderr, "[%s N=%d seed=0x%" PRIx64 "] passed: %ld collectives checked per rank, %.1f s\n", job->scenario,
            job->nranks, job->seed, first, res->seconds);
}

static void run_simple(const char *scenario, int n, uint64_t seed, const char *const *env, int deadline_s)
{
    job_t job = {.scenario = scenario, .nranks = n, .seed = seed_for(seed), .env = env, .deadline_s = deadline_s};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    remove_outdir(res.outdir);
    /* Every rank runs the same schedule: differing counts mean a rank skipped work. */
    for (int r = 1; r < n; r++)
        cr_expect(checked[r] == checked[0], "%s N=%d: rank %d checked %ld collectives, rank 0 %ld", scenario, n, r,
                  checked[r], checked[0]);
}

#define MATRIX_DEADLINE 150

Test(collectives, matrix_n1, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 1, 0x1001, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n2, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 2, 0x2002, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n3, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 3, 0x3003, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n4, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 4, 0x4004, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n5, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 5, 0x5005, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n6, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 6, 0x6006, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n7, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 7, 0x7007, NULL, MATRIX_DEADLINE); }
Test(collectives, matrix_n8, .timeout = MATRIX_DEADLINE + 60) { run_simple("matrix", 8, 0x8008, NULL, MATRIX_DEADLINE); }

/* A chunk size that is no multiple of any element size larger than 1 (1000 would be a multiple
 * of 8), and more sockets than the default: chunks must be rounded down to whole elements, and
 * scratch slots 1003 bytes apart are misaligned for every wider type. The shared-memory
 * all-reduce (every size by default where all ranks share a one-node host) keeps to 64 KiB,
 * so that the ring's all-reduce runs on these chunks over shared memory too. */
Test(collectives, matrix_n3_chunk1003_nsocks3, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_CHUNK_BYTES=1003", "RING_NSOCKS=3", "RING_SM_MAX_BYTES=64K", NULL};
    run_simple("matrix", 3, 0x3e03, env, MATRIX_DEADLINE);
}

/* Recursive doubling for every size (by default it only takes small buffers): the fold of
 * non-power-of-two N (5, 6, 7), in-place, AVG's single division and zero counts. */
Test(collectives, matrix_n5_rd, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rd", NULL};
    run_simple("matrix", 5, 0x5d05, env, MATRIX_DEADLINE);
}

Test(collectives, matrix_n6_rd, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rd", NULL};
    run_simple("matrix", 6, 0x6d06, env, MATRIX_DEADLINE);
}

Test(collectives, matrix_n8_rd, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rd", NULL};
    run_simple("matrix", 8, 0x8d08, env, MATRIX_DEADLINE);
}

/* Recursive halving and doubling for every size: ranges that halve down to empty ones (counts
 * below the number of ranks), odd ranges, the fold for 3, 6 and 7 ranks, AVG in the last
 * halving round. */
Test(collectives, matrix_n3_rh, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rh", NULL};
    run_simple("matrix", 3, 0x3a03, env, MATRIX_DEADLINE);
}

Test(collectives, matrix_n6_rh, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rh", NULL};
    run_simple("matrix", 6, 0x6a06, env, MATRIX_DEADLINE);
}

Test(collectives, matrix_n8_rh, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=rh", NULL};
    run_simple("matrix", 8, 0x8a08, env, MATRIX_DEADLINE);
}

/* The ring for every size, small ones included (by default they go by recursive doubling). */
Test(collectives, matrix_n4_ring, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_ALGO=ring", NULL};
    run_simple("matrix", 4, 0x4e04, env, MATRIX_DEADLINE);
}

/* Small chunks and a single chunk in flight: many pipeline steps, no overlap to hide bugs (the
 * ring's all-reduce above 64 KiB over shared memory too, as above). */
Test(collectives, matrix_n4_chunk4096_depth1, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_CHUNK_BYTES=4096", "RING_PIPELINE_DEPTH=1", "RING_SM_MAX_BYTES=64K", NULL};
    run_simple("matrix", 4, 0x4d14, env, MATRIX_DEADLINE);
}

/* Rounded float results must still be bitwise identical on every rank: each rank leaves a
 * hash of all its results and this side compares them, trusting no rank's own claim. */
static void run_float_random(int n, uint64_t seed, const char *const *env)
{
    job_t job = {.scenario = "float_random", .nranks = n, .seed = seed_for(seed), .deadline_s = 120, .env = env};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    char h0[64] = "", h[64];
    int have0 = read_outfile(res.outdir, "hash.0", h0, sizeof h0);
    int same = have0;
    int differing = -1;
    for (int r = 1; r < n && same; r++) {
        char name[32];
        snprintf(name, sizeof name, "hash.%d", r);
        if (!read_outfile(res.outdir, name, h, sizeof h) || strcmp(h, h0) != 0) same = 0, differing = r;
    }
    remove_outdir(res.outdir);
    cr_assert(have0, "float_random N=%d: rank 0 left no result hash", n);
    cr_assert(same, "float_random N=%d: rank %d's results differ bitwise from rank 0's (hash %s vs %s)", n, differing,
              h, h0);
}

Test(collectives, float_random_n4, .timeout = 180) { run_float_random(4, 0xf404, NULL); }
Test(collectives, float_random_n5, .timeout = 180) { run_float_random(5, 0xf505, NULL); }
/* Recursive doubling at every size: partners combine in the same operand order, so the bits
 * agree even though no single rank computes each element. */
Test(collectives, float_random_n7_rd, .timeout = 180)
{
    static const char *const env[] = {"RING_ALGO=rd", NULL};
    run_float_random(7, 0xf707, env);
}

/* Recursive halving: each element is reduced by one rank and copied to the others. */
Test(collectives, float_random_n6_rh, .timeout = 180)
{
    static const char *const env[] = {"RING_ALGO=rh", NULL};
    run_float_random(6, 0xf606, env);
}

/*
 * IEEE special values across ranks (mp_worker "special"): NaN on one rank and on two, +Inf
 * with -Inf, overflow of the largest finite values, -0 on every rank and mixed with +0,
 * subnormals, zero times Inf, through all-reduce and reduce-scatter of float16, bfloat16,
 * float32 and float64 with every op, at N = 2, 3, 5, 8. The ranks check their results against
 * the reference (NaN as any quiet NaN, the sign of a MIN/MAX zero over -0 and +0 free, every
 * other element bitwise; of a large all-reduce each rank checks a 1/N slice), and here every
 * rank's all-reduce results must be rank 0's bits, NaN payloads included (the ranks share one
 * CPU), which extends each slice's check to every rank. Small chunks so that the ring's pipeline cuts the
 * larger counts; the suite's variants run it over shared memory, TCP, mixed rings, recursive
 * doubling and the shared-memory all-reduce.
 */
Test(collectives, special_float_values_reduce_as_documented_and_alike_on_every_rank, .timeout = 300)
{
    static const int sizes[] = {2, 3, 5, 8};
    static const char *const env[] = {"RING_CHUNK_BYTES=12000", NULL};
    int maxn = max_ranks();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = sizes[i];
        if (maxn && n > maxn) {
            fprintf(stderr, "[special N=%d] skipped: RING_TEST_MAX_RANKS=%d\n", n, maxn);
            continue;
        }
        job_t job = {.scenario = "special", .nranks = n, .seed = seed_for(0x5bec00 + (uint64_t)n), .env = env,
                     .deadline_s = 120};
        job_result_t res;
        long checked[MAX_RANKS];
        run_job(&job, &res, checked);
        char h0[64] = "", r0[64] = "", h[64] = "", rh[64] = "";
        int have = read_outfile(res.outdir, "hash.0", h0, sizeof h0) && read_outfile(res.outdir, "rawhash.0", r0, sizeof r0);
        int differing = -1, raw_differing = -1;
        for (int r = 1; r < n && have && differing < 0; r++) {
            char name[32];
            snprintf(name, sizeof name, "hash.%d", r);
            if (!read_outfile(res.outdir, name, h, sizeof h) || strcmp(h, h0) != 0) differing = r;
            snprintf(name, sizeof name, "rawhash.%d", r);
            if (raw_differing < 0 && (!read_outfile(res.outdir, name, rh, sizeof rh) || strcmp(rh, r0) != 0))
                raw_differing = r;
        }
        remove_outdir(res.outdir);
        cr_assert(have, "special N=%d: rank 0 left no result hashes", n);
        cr_assert(differing < 0, "special N=%d: rank %d's results differ from rank 0's beyond NaN payloads (hash %s vs %s)",
                  n, differing, h, h0);
        /* docs/api.md: NaN payloads may differ only between CPUs of different SIMD width; these
         * ranks share one CPU. */
        cr_assert(raw_differing < 0, "special N=%d: rank %d's results differ from rank 0's in NaN payloads (one CPU)", n,
                  raw_differing);
        for (int r = 1; r < n; r++)
            cr_expect(checked[r] == checked[0], "special N=%d: rank %d checked %ld collectives, rank 0 %ld", n, r,
                      checked[r], checked[0]);
    }
}

/*
 * Fault injection: in each trial one random rank of 2..6 is SIGKILLed at a random moment of a
 * random sequence of collectives (mp_worker "faults"). Every survivor must return an error
 * naming the dead rank within 2 s of the kill, fail the next call at once, and exit cleanly;
 * nothing may hang (the job deadline is far below the 300 s default timeout). Trials, ranks
 * and the 2 s follow RING_TEST_FAULT_TRIALS, RING_TEST_MAX_RANKS, RING_TEST_FAULT_BOUND_MS.
 */
#define FAULT_TRIALS 50
#define FAULT_MAX_RANKS 6
/* splitmix64: trial parameters from one seed (RING_TEST_SEED perturbs it like every test). */
static uint64_t next_rand(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
#define FAULT_BOUND_MS 2000

/* The slowest survivor over a test's trials (how long after the kill, which trial, rank and
 * error: a slow bed can be told from a slow path) and the slowest call after an error. */
typedef struct {
    double worst;
    char slowest[1700];
    long long again_us;
} fault_stats;

/* One trial of the faults scenario (or of "rebuild", which goes on after the error): runs it,
 * checks every survivor's error, and adds its timings to *st. */
static void fault_trial(int trial, int n, uint64_t seed, const char *const *env, long long bound_ns, fault_stats *st,
                        int rebuild)
{
    job_t job = {.scenario = rebuild ? "rebuild" : "faults", .nranks = n, .seed = seed, .env = env,
                 .deadline_s = rebuild ? 90 : 40, .kill_ok = 1, .second_root = rebuild};
    job_result_t res;
    run_job_once(&job, &res);
    if (res.port_in_use) { /* someone took the root port first: the trial never started */
        remove_outdir(res.outdir);
        run_job_once(&job, &res);
    }
    char kbuf[64] = "", name[32];
    int victim = -1;
    for (int r = 0; r < n && victim < 0; r++) {
        snprintf(name, sizeof name, "kill.%d", r);
        if (read_outfile(res.outdir, name, kbuf, sizeof kbuf)) victim = r;
    }
    char outdir[256];
    snprintf(outdir, sizeof outdir, "%s", res.outdir);
    if (!res.ok || victim < 0) remove_outdir(outdir);
    cr_assert(res.ok, "trial %d (N=%d seed=0x%" PRIx64 "): %s", trial, n, seed, res.msg);
    cr_assert(victim >= 0, "trial %d (N=%d seed=0x%" PRIx64 "): the victim left no kill time", trial, n, seed);
    char seg[512];
    int nseg = segments_left("/dev/shm", &res, n, seg, sizeof seg);
    if (nseg) remove_outdir(outdir);
    cr_assert(nseg == 0, "trial %d (N=%d seed=0x%" PRIx64 "): rank %d was killed and %d shared-memory segment(s) "
              "are left, e.g. %s", trial, n, seed, victim, nseg, seg);
    long long t_kill = atoll(kbuf);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    for (int r = 0; r < n; r++) {
        if (r == victim) continue;
        char ebuf[1500];
        snprintf(name, sizeof name, "err.%d", r);
        int have = read_outfile(res.outdir, name, ebuf, sizeof ebuf);
        long long t_err = have ? atoll(ebuf) : 0;
        double late = (double)(t_err - t_kill) / 1e9;
        if (late > st->worst) {
            st->worst = late;
            const char *msg = strchr(ebuf, ' ');
            ebuf[strcspn(ebuf, "\n")] = '\0';
            snprintf(st->slowest, sizeof st->slowest, "trial %d, N=%d seed=0x%" PRIx64 ", rank %d after rank %d's death:%s",
                     trial, n, seed, r, victim, msg ? msg : " (no message)");
        }
        char abuf[64];
        snprintf(name, sizeof name, "again.%d", r); /* only where the survivor made the next call */
        if (read_outfile(res.outdir, name, abuf, sizeof abuf) && atoll(abuf) > st->again_us) st->again_us = atoll(abuf);
        int ok = have && t_err - t_kill < bound_ns && strstr(ebuf, want);
        if (!ok) remove_outdir(outdir);
        cr_assert(have, "trial %d (N=%d seed=0x%" PRIx64 "): survivor %d left no error", trial, n, seed, r);
        cr_assert(t_err - t_kill < bound_ns, "trial %d (N=%d seed=0x%" PRIx64 "): rank %d returned its error %.3f s after rank %d was killed",
                  trial, n, seed, r, late, victim);
        cr_assert(strstr(ebuf, want), "trial %d (N=%d seed=0x%" PRIx64 "): rank %d's error does not name %s: %s", trial,
                  n, seed, r, want, ebuf);
    }
    long first = -1;
    for (int r = 0; r < n && rebuild; r++) {
        if (r == victim) continue;
        char cbuf[64];
        snprintf(name, sizeof name, "checked.%d", r);
        long v = read_outfile(res.outdir, name, cbuf, sizeof cbuf) ? strtol(cbuf, NULL, 10) : -1;
        if (first < 0) first = v;
        if (v <= 0 || v != first) remove_outdir(outdir);
        cr_assert(v > 0, "trial %d (N=%d seed=0x%" PRIx64 "): survivor %d checked %ld collectives on the survivors' "
                  "communicator", trial, n, seed, r, v);
        cr_assert(v == first, "trial %d (N=%d seed=0x%" PRIx64 "): survivor %d checked %ld collectives, another %ld",
                  trial, n, seed, r, v, first);
    }
    remove_outdir(outdir);
}

Test(faults, kill_a_random_rank_at_a_random_point, .timeout = 600)
{
    uint64_t rs = seed_for(0xfa017);
    fault_stats st = {0};
    int trials = (int)env_count("RING_TEST_FAULT_TRIALS", FAULT_TRIALS);
    long long bound_ns = env_count("RING_TEST_FAULT_BOUND_MS", FAULT_BOUND_MS) * 1000000LL;
    int maxn = max_ranks() && max_ranks() < FAULT_MAX_RANKS ? max_ranks() : FAULT_MAX_RANKS;
    for (int trial = 0; trial < trials; trial++) {
        int n = 2 + (int)(next_rand(&rs) % (uint64_t)(maxn - 1));
        fault_trial(trial, n, next_rand(&rs), NULL, bound_ns, &st, 0);
    }
    fprintf(stderr, "[faults] %d trials: every survivor named the killed rank; slowest error %.3f s after the kill (%s); "
            "slowest call after the error %lld us\n", trials, st.worst, st.slowest, st.again_us);
}

/* The same where rank 0 is slow to relay the death (a test hook holds every relay 300 ms) and
 * every survivor exits as soon as its error is written, after ring_comm_abort in even trials
 * and without it in odd ones (no destroy, which would wait for the relay): the ranks must still
 * hear from rank 0 who died. Rank 0 used to wake its
 * own call first, so it could exit before the relay went out, and the others then reported
 * rank 0 dead (seen with 5% packet loss). */
Test(faults, rank_0_relays_a_death_before_its_own_call_returns, .timeout = 300)
{
    static const char *const env_abort[] = {"RING_TEST_RELAY_HOLD_MS=300", "MP_FAULTS_EXIT_AT_ONCE=abort", NULL};
    static const char *const env_exit[] = {"RING_TEST_RELAY_HOLD_MS=300", "MP_FAULTS_EXIT_AT_ONCE=exit", NULL};
    uint64_t rs = seed_for(0xfa018);
    long long bound_ns = env_count("RING_TEST_FAULT_BOUND_MS", FAULT_BOUND_MS) * 1000000LL;
    int maxn = max_ranks() && max_ranks() < 4 ? max_ranks() : 4;
    fault_stats st = {0};
    for (int trial = 0; trial < 20; trial++)
        fault_trial(trial, maxn < 3 ? maxn : 3 + (int)(next_rand(&rs) % (uint64_t)(maxn - 2)), next_rand(&rs),
                    trial % 2 ? env_exit : env_abort, bound_ns, &st, 0);
    fprintf(stderr, "[faults relay] 20 trials: every survivor named the killed rank; slowest error %.3f s after the kill (%s)\n",
            st.worst, st.slowest);
}

/* Going on without the dead rank (mp_worker "rebuild"): after the error, the survivors destroy
 * the failed communicator and make one of nranks - 1 ranks in the same processes, on another
 * root port (the dead rank may have been rank 0), over the job's transports (shared memory
 * between these ranks unless RING_TEST_TRANSPORT says otherwise), and every collective on it
 * must be right; neither communicator may leave a descriptor, a thread or a shared-memory
 * segment behind. Ranks 2..6, 8 trials (fewer where RING_TEST_FAULT_TRIALS says so). */
Test(faults, the_survivors_of_a_death_make_a_smaller_communicator_and_go_on, .timeout = 600)
{
    uint64_t rs = seed_for(0xfa019);
    long long bound_ns = env_count("RING_TEST_FAULT_BOUND_MS", FAULT_BOUND_MS) * 1000000LL;
    int maxn = max_ranks() && max_ranks() < FAULT_MAX_RANKS ? max_ranks() : FAULT_MAX_RANKS;
    fault_stats st = {0};
    int trials = (int)env_count("RING_TEST_FAULT_TRIALS", 8);
    if (trials > 8) trials = 8;
    for (int trial = 0; trial < trials; trial++)
        fault_trial(trial, 2 + (int)(next_rand(&rs) % (uint64_t)(maxn - 1)), next_rand(&rs), NULL, bound_ns, &st, 1);
    fprintf(stderr, "[faults rebuild] %d trials: every survivor named the killed rank (slowest %.3f s after the kill) "
            "and went on with the others on a new communicator, every result right\n", trials, st.worst);
}

/* The failing-call side of the same rule, which the random trials above seldom reach: a call
 * that rank 0 starts after it recorded a death, while the relay is still held, returns only
 * once the relay went out (mp_worker scenario relaywait: rank 0 exits as soon as that call
 * returns). The other ranks must name the rank that died, not rank 0. */
Test(faults, rank_0s_next_call_after_a_death_waits_for_the_relay, .timeout = 120)
{
    static const char *const env[] = {"RING_TEST_RELAY_HOLD_MS=300", NULL};
    for (int n = 3; n <= 4; n++) {
        job_t job = {.scenario = "relaywait", .nranks = n, .seed = seed_for(0x1e1a + (uint64_t)n), .env = env,
                     .deadline_s = 60};
        job_result_t res;
        long checked[MAX_RANKS];
        run_job(&job, &res, checked);
        char want[32], bad[32];
        snprintf(want, sizeof want, "rank %d (", n - 1);
        snprintf(bad, sizeof bad, "rank 0 (");
        for (int r = 1; r < n - 1; r++) {
            char name[32], buf[1500] = "";
            snprintf(name, sizeof name, "err.%d", r);
            int have = read_outfile(res.outdir, name, buf, sizeof buf);
            int ok = have && strstr(buf, want) && !strstr(buf, bad);
            if (!ok) remove_outdir(res.outdir);
            cr_assert(have, "N=%d: rank %d left no error", n, r);
            cr_assert(ok, "N=%d: rank %d's error does not name rank %d alone: %s", n, r, n - 1, buf);
        }
        remove_outdir(res.outdir);
    }
}

/* A program that sets flush-to-zero, another rounding and an unmasked exception after init
 * (mp_worker fpmode): the results of a call on its own thread and of one on the progress thread
 * are the default mode's, and its mode is its own again. The progress thread keeps init's mode
 * and the caller's thread has the program's, so the two used to differ. */
Test(collectives, results_ignore_the_programs_floating_point_mode, .timeout = 120)
{
#if defined(__x86_64__)
    for (int n = 2; n <= 3; n++) {
        job_t job = {.scenario = "fpmode", .nranks = n, .seed = seed_for(0xf9 + (uint64_t)n), .deadline_s = 60};
        job_result_t res;
        long checked[MAX_RANKS];
        run_job(&job, &res, checked);
        remove_outdir(res.outdir);
    }
#else
    cr_skip_test("x86-64 only");
#endif
}

Test(collectives, threads_n3, .timeout = 180)
{
    job_t job = {.scenario = "threads", .nranks = 3, .seed = seed_for(0x7403), .deadline_s = 120, .second_root = 1};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    remove_outdir(res.outdir);
}

Test(collectives, backtoback_n4, .timeout = 180) { run_simple("backtoback", 4, 0xb404, NULL, 120); }

Test(collectives, barrier_n5, .timeout = 180)
{
    job_t job = {.scenario = "barrier", .nranks = 5, .seed = seed_for(0xba05), .deadline_s = 120};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    int missing = -1;
    for (int r = 0; r < 5 && missing < 0; r++) {
        char name[32], buf[8];
        snprintf(name, sizeof name, "entered.%d", r);
        if (!read_outfile(res.outdir, name, buf, sizeof buf)) missing = r;
    }
    remove_outdir(res.outdir);
    cr_assert(missing < 0, "barrier: rank %d never created its entered file", missing);
}

static long mem_available_kib(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* 2^32 + 5 int8 elements (all-reduce, broadcast; all-gather and reduce-scatter of 2 x 2^31 + 2):
 * every index and byte count past INT_MAX and UINT32_MAX, over the default transport (shared
 * memory between the two ranks) and the ring (mp_worker scenario_large). Until 2026-12-06 it
 * was 2^31 + 3, and a byte count cut to 32 bits would have passed. 4 GiB per rank. */
Test(collectives, large_n2, .timeout = 360)
{
    const char *large = getenv("RING_TEST_LARGE");
    if (!large || strcmp(large, "1") != 0) {
        fprintf(stderr, "[large N=2] skipped: RING_TEST_LARGE is not 1 (sanitizer build or large_tests=false)\n");
        cr_skip_test("RING_TEST_LARGE is not 1");
    }
    long kib = mem_available_kib();
    if (kib < 12L * 1024 * 1024) {
        fprintf(stderr, "[large N=2] skipped: needs 12 GiB of available memory, /proc/meminfo says %ld KiB\n", kib);
        cr_skip_test("less than 12 GiB of available memory");
    }
    job_t job = {.scenario = "large", .nranks = 2, .seed = seed_for(0x1a2), .deadline_s = 300};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    remove_outdir(res.outdir);
}

Test(collectives, errors_n2, .timeout = 180) { run_simple("errors", 2, 0xe202, NULL, 120); }

/* ---- shared memory: set-up failures, leftovers ---- */

/* Every rank's init must fail, and its message must contain `want`. */
/* Every rank of the job must fail ring_comm_init with an error that says want. */
static void run_initfail_job(job_t *job, const char *want)
{
    job->scenario = "initfail";
    job->deadline_s = 60;
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(job, &res, checked);
    for (int r = 0; r < job->nranks; r++) {
        char name[32], buf[1300] = "";
        snprintf(name, sizeof name, "err.%d", r);
        int have = read_outfile(res.outdir, name, buf, sizeof buf);
        if (!have || !strstr(buf, want)) remove_outdir(res.outdir);
        cr_assert(have, "rank %d left no error", r);
        cr_assert(strstr(buf, want), "rank %d's error does not say \"%s\": %s", r, want, buf);
    }
    remove_outdir(res.outdir);
}

static void run_initfail(int n, const char *const *env, const char *want)
{
    job_t job = {.nranks = n, .seed = seed_for(0x1f), .env = env};
    run_initfail_job(&job, want);
}

/* TCP with one socket bundle per direction (RING_TCP_DUPLEX=0), as pairs that shared memory
 * or verbs may take over still have: the default gives every other TCP pair one bundle for
 * both directions, which the other runs of this file use. */
Test(collectives, matrix_n4_tcp_one_way, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", "RING_TCP_DUPLEX=0", NULL};
    run_simple("matrix", 4, 0x4c04, env, MATRIX_DEADLINE);
}

/* Ranks that disagree on RING_NSOCKS or RING_TCP_DUPLEX would make sockets their peers drop
 * or refuse (RING_NSOCKS: one rank then waited out its whole timeout). Each rank's bootstrap
 * entry carries both, so every rank fails init at once naming the setting: here rank 1 of 3
 * differs, and every rank must say so, not only the first pair that meets over TCP. */
Test(collectives, tcp_settings_that_differ_fail_init_on_every_rank, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", NULL};
    static const char *const odd_duplex[] = {"RING_TCP_DUPLEX=0", NULL};
    static const char *const odd_nsocks[] = {"RING_NSOCKS=3", NULL};
    job_t job = {.nranks = 3, .seed = seed_for(0xd402), .env = env, .env_odd = odd_duplex};
    run_initfail_job(&job, "RING_TCP_DUPLEX differs between ranks");
    job = (job_t){.nranks = 3, .seed = seed_for(0xd403), .env = env, .env_odd = odd_nsocks};
    run_initfail_job(&job, "RING_NSOCKS differs between ranks");
}

/* RING_PORT_RANGE of exactly one port per rank (docs/launch.md's size), and communicators made
 * one after another: each destroy leaves TIME_WAIT connections on the ports (on the side that
 * closed first), and without SO_REUSEADDR the next init, or the next job for a minute, found
 * the range used up ("cannot bind any port of RING_PORT_RANGE"). Two jobs of four rounds each,
 * over TCP and with the default transport. */
Test(collectives, a_port_range_of_one_port_per_rank_serves_communicators_one_after_another, .timeout = 240)
{
    int lo = 0;
    for (int tries = 0; tries < 100 && !lo; tries++) {
        int p = free_port(), ok = 1;
        for (int k = 0; k < 4 && ok; k++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(p + k))};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
            if (fd >= 0) close(fd);
        }
        if (ok) lo = p;
    }
    cr_assert(lo, "no four free ports side by side");
    /* free_port hands out ports in turn: the jobs' root ports must come after the range. */
    for (int p = free_port(); p >= lo && p <= lo + 3;) p = free_port();
    char range[48];
    snprintf(range, sizeof range, "RING_PORT_RANGE=%d-%d", lo, lo + 3);
    const char *const tcp[] = {"RING_TRANSPORT=tcp", range, NULL}, *const dflt[] = {range, NULL};
    run_simple("rounds", 4, 0x9a01, tcp, 120);
    run_simple("rounds", 4, 0x9a02, dflt, 120);
}

/* Ranks of one host that do not share RING_SHM_DIR (another directory here; a container's own
 * /dev/shm, another user or a read-only mount alike), or that share it with RING_SM_MAX_BYTES=0
 * on some only: the others waited out RING_TIMEOUT_MS for a shared page that was never made or
 * made elsewhere ("is RING_SHM_DIR the same on every rank?"). Each rank's bootstrap entry
 * carries what it sees of the directory and the setting: pairs that do not share it use TCP
 * (and the rest runs: checked results), RING_TRANSPORT=shm fails init naming it, and the
 * setting that differs fails init on every rank, naming it. */
Test(collectives, shm_settings_that_differ_fail_init_on_every_rank, .timeout = 240)
{
    static const char *const odd_sm[] = {"RING_SM_MAX_BYTES=0", NULL};
    static const char *const odd_dir[] = {"RING_SHM_DIR=/tmp", NULL};
    static const char *const forced[] = {"RING_TRANSPORT=shm", NULL}, *const dflt[] = {"RING_TRANSPORT=auto", NULL};
    job_t job = {.nranks = 3, .seed = seed_for(0xd404), .env = dflt, .env_odd = odd_sm};
    run_initfail_job(&job, "it must be equal on all ranks (0 on some would leave the others waiting for the shared page)");
    job = (job_t){.scenario = "rounds", .nranks = 3, .seed = seed_for(0xd405), .env = dflt, .env_odd = odd_dir, .deadline_s = 60};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    remove_outdir(res.outdir);
    job = (job_t){.nranks = 3, .seed = seed_for(0xd406), .env = forced, .env_odd = odd_dir};
    run_initfail_job(&job, "does not share RING_SHM_DIR");
}

/* A rank whose data address is a loopback one, in a job that spans machines: its peers on the
 * other machine could only retry that address until the timeout. Rank 1 of 3 says it runs on
 * another machine (RING_TEST_KERNEL: another boot id); every rank's address is 127.0.0.1 (the
 * route to the root), so every rank must fail init at once, naming the loopback address. On
 * one machine (the other tests of this file) the same addresses are fine. */
Test(collectives, a_loopback_data_address_in_a_job_across_machines_fails_init_on_every_rank, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", NULL};
    static const char *const odd[] = {"RING_TEST_KERNEL=another machine", NULL};
    job_t job = {.nranks = 3, .seed = seed_for(0x10b1), .env = env, .env_odd = odd};
    run_initfail_job(&job, "has the loopback data address 127.0.0.1:");
}

/* ---- mismatched counts across the algorithm thresholds ---- */

/*
 * A count that puts some ranks on the ring and others on recursive doubling: the ring's ranks
 * talk only to their ring neighbours, recursive doubling's first to partners that need not be
 * ring neighbours. With the ranks of two stand-in hosts interleaved the ring order is 0 2 1 3,
 * and no pair that met held both kinds of call: every rank waited out RING_TIMEOUT_MS and
 * reported a timeout naming a rank that had entered. Every rank must get RING_ERR_MISMATCH
 * naming both counts, long before the timeout (20 s here).
 */
Test(mismatch, counts_on_both_sides_of_the_ring_threshold_with_interleaved_hosts, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=auto", "RING_TIMEOUT_MS=20000", "RING_TEST_COUNT=100000", NULL};
    static const char *const odd[] = {"RING_TEST_COUNT=100", NULL};
    job_t job = {.scenario = "mismatch", .nranks = 4, .seed = seed_for(0x3a04), .env = env, .env_odd = odd,
                 .deadline_s = 60, .hosts = "a,b,a,b"};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    for (int r = 0; r < job.nranks; r++) {
        char name[32], buf[1300] = "", code[64] = "";
        double ms = -1;
        snprintf(name, sizeof name, "err.%d", r);
        int have = read_outfile(res.outdir, name, buf, sizeof buf);
        if (have) sscanf(buf, "%63s %lf", code, &ms);
        int ok = have && !strcmp(code, "RING_ERR_MISMATCH") && ms >= 0 && ms < 10000 && strstr(buf, "count=100000,") &&
                 strstr(buf, "count=100,");
        if (!ok) remove_outdir(res.outdir);
        cr_assert(have, "rank %d left no result", r);
        cr_assert(!strcmp(code, "RING_ERR_MISMATCH") && ms >= 0 && ms < 10000,
                  "rank %d: expected RING_ERR_MISMATCH within 10 s (the timeout is 20 s): %s", r, buf);
        cr_assert(ok, "rank %d's error does not name both counts: %s", r, buf);
    }
    remove_outdir(res.outdir);
}

/* ---- TCP congestion control (RING_TCP_CONGESTION) ---- */

/* The first line of a /proc/sys file, or "" */
static void read_sysctl(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(out, (int)len, f)) out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static int word_in(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(list, w); p; p = strstr(p + 1, w))
        if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
    return 0;
}

/* Where `key` is in line, what follows it must be `want`, ended by a space, comma or newline. */
static int conn_field_ok(const char *line, const char *key, const char *want)
{
    const char *p = strstr(line, key);
    if (!p) return 0;
    p += strlen(key);
    size_t wlen = strlen(want);
    return strncmp(p, want, wlen) == 0 && p[wlen] && strchr(" ,\n", p[wlen]);
}

/* Three ranks over TCP on loopback with `var` and `var2` (NULL: nothing more) set: every
 * connection's INFO line must show `want` after `key`, and `want2` after `key2` where key2 is
 * not NULL (all read back from the socket), every rank's log must hold `must` (NULL: no such
 * check), and the results must be right. */
static void run_conn_job(const char *var, const char *var2, const char *key, const char *want, const char *key2,
                         const char *want2, const char *must, uint64_t seed)
{
    const char *const env[] = {"RING_TRANSPORT=tcp", var, var ? var2 : NULL, NULL};
    job_t job = {.scenario = "float_random", .nranks = 3, .seed = seed_for(seed), .deadline_s = 120, .env = env,
                 .log_init = 1};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    char bad[1100] = "";
    int seen[3] = {0}, said[3] = {0};
    for (int r = 0; r < 3 && !bad[0]; r++) {
        char path[512], line[1024];
        snprintf(path, sizeof path, "%s/init.%d", res.outdir, r);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f) && !bad[0]) {
            if (must && strstr(line, must)) said[r]++;
            if (!strstr(line, key) || !strstr(line, " over ")) continue;
            if (!conn_field_ok(line, key, want) || (key2 && !conn_field_ok(line, key2, want2)))
                snprintf(bad, sizeof bad, "rank %d: %s", r, line);
            seen[r]++;
        }
        fclose(f);
    }
    remove_outdir(res.outdir);
    cr_assert(!bad[0], "%s: expected %s%s%s%s, got %s", var ? var : "(defaults)", key, want, key2 ? " and " : "",
              key2 ? want2 : "", bad);
    for (int r = 0; r < 3; r++) {
        cr_assert(seen[r] >= 2, "rank %d logged %d TCP connections with their %s(expected its two ring neighbours' at "
                  "least)", r, seen[r], key);
        cr_assert(!must || said[r] == 1, "rank %d's log holds \"%s\" %d times (expected once)", r, must, said[r]);
    }
}

static void run_cc_job(const char *setting, const char *want, uint64_t seed)
{
    char var[64];
    snprintf(var, sizeof var, "RING_TCP_CONGESTION=%s", setting);
    run_conn_job(var, NULL, "congestion control ", want, NULL, NULL, NULL, seed);
}

/* Reno is in every kernel and allowed to every process. */
Test(tcp, congestion_control_named_is_used, .timeout = 180) { run_cc_job("reno", "reno", 0xcc01); }

/* Connections that stay inside the host use CUBIC under auto (the default), whatever the
 * system's default is: there is no network to share, and BBR's pacing slowed them down. */
Test(tcp, congestion_control_auto_inside_host_is_cubic, .timeout = 180)
{
    char avail[256], allowed[256];
    read_sysctl("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof avail);
    read_sysctl("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof allowed);
    if (!word_in(avail, "cubic") || (geteuid() != 0 && !word_in(allowed, "cubic"))) {
        fprintf(stderr, "[tcp cc auto] skipped: cubic is not available (%s) or not allowed (%s) here\n", avail, allowed);
        cr_skip_test("cubic not available");
    }
    run_cc_job("auto", "cubic", 0xcc02);
}

Test(tcp, congestion_control_system_keeps_the_default, .timeout = 180)
{
    char sys[64];
    read_sysctl("/proc/sys/net/ipv4/tcp_congestion_control", sys, sizeof sys);
    cr_assert(sys[0], "cannot read /proc/sys/net/ipv4/tcp_congestion_control");
    run_cc_job("system", sys, 0xcc03);
}

/* A name the kernel does not know fails init on every rank, naming the setting and what the
 * kernel has. */
Test(tcp, congestion_control_unknown_fails_on_every_rank, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", "RING_TCP_CONGESTION=no-such-cc", NULL};
    run_initfail(3, env, "RING_TCP_CONGESTION=\"no-such-cc\": the kernel refused TCP congestion control no-such-cc");
}

/* ---- Backoff cap (RING_TCP_RTO_MAX_MS) ---- */

#define GIVE_UP "gives up unacknowledged after "

/* The cap each data socket must carry, as its INFO line prints it: `ms` where the kernel has
 * TCP_RTO_MAX_MS (Linux 6.15, which also brought the sysctl read here), "the kernel's" where
 * it has not (the library goes on without it). With the cap, the kernel must give a
 * connection up after the larger of 925 s and `timeout_ms` + 10 s without an acknowledgement
 * (TCP_USER_TIMEOUT), not by its own rule, which the cap shortens to 14.4 s. */
static void rto_want(int ms, int timeout_ms, char *out, size_t len, char *gone, size_t glen)
{
    char sys[32];
    read_sysctl("/proc/sys/net/ipv4/tcp_rto_max_ms", sys, sizeof sys);
    snprintf(gone, glen, "the kernel's rule");
    if (!sys[0]) {
        fprintf(stderr, "[tcp rto] this kernel has no TCP_RTO_MAX_MS: checking that the library goes on without it\n");
        snprintf(out, len, "the kernel's");
    } else if (ms) {
        snprintf(out, len, "%d ms", ms);
        snprintf(gone, glen, "%d ms", timeout_ms + 10000 > 925000 ? timeout_ms + 10000 : 925000);
    } else {
        snprintf(out, len, "%s ms", sys);
    }
}

/* By default a data socket's retransmissions and zero-window probes back off to 1 s at most:
 * a window update lost in an outage then costs a second, not up to 120 s (tcp.c, rto_set). */
Test(tcp, backoff_cap_default_is_one_second, .timeout = 180)
{
    char want[48], gone[48];
    rto_want(1000, 30000, want, sizeof want, gone, sizeof gone); /* the harness's RING_TIMEOUT_MS */
    run_conn_job(NULL, NULL, "backoff cap ", want, GIVE_UP, gone, NULL, 0xcd01);
}

Test(tcp, backoff_cap_named_is_used, .timeout = 180)
{
    char want[48], gone[48];
    rto_want(2500, 1000000, want, sizeof want, gone, sizeof gone);
    run_conn_job("RING_TCP_RTO_MAX_MS=2500", "RING_TIMEOUT_MS=1000000", "backoff cap ", want, GIVE_UP, gone, NULL, 0xcd02);
}

/* 0 leaves the kernel's cap (net.ipv4.tcp_rto_max_ms, 120 s unless changed). */
Test(tcp, backoff_cap_zero_keeps_the_kernels, .timeout = 180)
{
    char want[48], gone[48];
    rto_want(0, 0, want, sizeof want, gone, sizeof gone);
    run_conn_job("RING_TCP_RTO_MAX_MS=0", NULL, "backoff cap ", want, GIVE_UP, gone, NULL, 0xcd03);
}

/* A kernel without the option (before 6.15, as Debian 12's 6.1), which the ranks get from
 * tests/no_rto_max.c: the job runs on with the kernel's backoff, each connection says so, and
 * each rank says once why, at WARN where the variable was set and at INFO by default. */
static void run_no_rto_job(const char *var, const char *level, uint64_t seed)
{
    const char *shim = getenv("RING_TEST_NO_RTO_SHIM");
    if (!shim || !*shim) {
        fprintf(stderr, "[tcp rto] skipped: no RING_TEST_NO_RTO_SHIM (sanitizer builds cannot preload it)\n");
        cr_skip_test("no RING_TEST_NO_RTO_SHIM");
    }
    char pre[600], must[160];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", shim);
    snprintf(must, sizeof must, "%s NET tcp: RING_TCP_RTO_MAX_MS=%s not applied (", level,
             var ? strchr(var, '=') + 1 : "1000");
    run_conn_job(pre, var, "backoff cap ", "the kernel's", GIVE_UP, "the kernel's rule", must, seed);
}

Test(tcp, backoff_cap_without_the_kernel_option_runs_on, .timeout = 180) { run_no_rto_job(NULL, "INFO", 0xcd04); }

Test(tcp, backoff_cap_set_without_the_kernel_option_warns, .timeout = 180)
{
    run_no_rto_job("RING_TCP_RTO_MAX_MS=4000", "WARN", 0xcd05);
}

/* Below the kernel's 1 s floor: a configuration error on every rank, not a silent default. */
Test(tcp, backoff_cap_below_one_second_fails_on_every_rank, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", "RING_TCP_RTO_MAX_MS=999", NULL};
    run_initfail(3, env, "RING_TCP_RTO_MAX_MS=\"999\": expected 0 (the kernel's) or an integer in [1000, 120000]");
}

/* Without a usable segment directory, auto keeps TCP (and says so at WARN); shm refuses. */
Test(shm, missing_directory_auto_keeps_tcp, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_TRANSPORT=auto", "RING_SHM_DIR=/nonexistent-ringcomm-dir", NULL};
    run_simple("matrix", 3, 0x5a03, env, MATRIX_DEADLINE);
}

Test(shm, missing_directory_forced_shm_fails_on_every_rank, .timeout = 120)
{
    static const char *const env[] = {"RING_TRANSPORT=shm", "RING_SHM_DIR=/nonexistent-ringcomm-dir", NULL};
    run_initfail(3, env, "cannot create a segment in /nonexistent-ringcomm-dir");
}

/* What a test made outside its own process, undone however it ends (an assertion that fails
 * ends the test process through exit, which runs these). */
static char left_mount[64], left_files[2][256];
static void undo_left(void)
{
    if (left_mount[0]) {
        umount2(left_mount, MNT_DETACH);
        rmdir(left_mount);
    }
    for (int i = 0; i < 2; i++)
        if (left_files[i][0]) unlink(left_files[i]);
}

/* A full tmpfs (a container's small /dev/shm): posix_fallocate refuses up front, so auto falls
 * back to TCP instead of dying of SIGBUS later, and shm says what to do. Needs a tmpfs mount. */
Test(shm, full_tmpfs_is_refused_up_front, .timeout = 2 * MATRIX_DEADLINE + 60)
{
    char dir[] = "/tmp/ringcomm-tmpfs-XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=64k,mode=1777 ringcomm-test %s 2>/dev/null", dir);
    if (geteuid() != 0 || system(cmd) != 0) {
        rmdir(dir);
        fprintf(stderr, "[shm full tmpfs] skipped: cannot mount a tmpfs here (needs root)\n");
        cr_skip_test("cannot mount a tmpfs (needs root)");
    }
    snprintf(left_mount, sizeof left_mount, "%s", dir);
    atexit(undo_left);
    char dirvar[96];
    snprintf(dirvar, sizeof dirvar, "RING_SHM_DIR=%s", dir);
    const char *const env_auto[] = {"RING_TRANSPORT=auto", dirvar, NULL};
    const char *const env_shm[] = {"RING_TRANSPORT=shm", dirvar, NULL};
    run_simple("matrix", 2, 0x5a02, env_auto, MATRIX_DEADLINE);
    run_initfail(2, env_shm, "cannot reserve");
    snprintf(cmd, sizeof cmd, "umount %s", dir);
    cr_expect(system(cmd) == 0, "umount %s failed", dir);
    rmdir(dir);
    left_mount[0] = '\0';
}

/* A segment whose creator was killed before its peer mapped it is removed by the next
 * communicator of the same user; one whose creator lives is left alone (one whose creator
 * lives where its pid cannot be seen: shm/sweep_removes_only_files_nobody_holds_... in
 * test_core.c). */
Test(shm, segments_of_dead_creators_are_swept, .timeout = MATRIX_DEADLINE + 60)
{
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    cr_assert(dead > 0, "fork: %s", strerror(errno));
    waitpid(dead, NULL, 0);
    char stale[256], live[256];
    snprintf(stale, sizeof stale, "/dev/shm/ringcomm-%u-%d-00000000deadbeef-0-1-0", (unsigned)geteuid(), (int)dead);
    snprintf(live, sizeof live, "/dev/shm/ringcomm-%u-%d-00000000deadbeef-0-1-0", (unsigned)geteuid(), (int)getpid());
    int fd1 = open(stale, O_CREAT | O_EXCL | O_WRONLY, 0600), fd2 = open(live, O_CREAT | O_EXCL | O_WRONLY, 0600);
    snprintf(left_files[0], sizeof left_files[0], "%s", stale);
    snprintf(left_files[1], sizeof left_files[1], "%s", live);
    atexit(undo_left);
    cr_assert(fd1 >= 0 && fd2 >= 0, "cannot create test files in /dev/shm: %s", strerror(errno));
    close(fd1);
    close(fd2);
    /* The sweep leaves files younger than 2 s alone (their creators may not hold them yet). */
    usleep(2200 * 1000);
    static const char *const env[] = {"RING_TRANSPORT=auto", NULL};
    run_simple("matrix", 2, 0x5e02, env, MATRIX_DEADLINE);
    int stale_left = access(stale, F_OK) == 0, live_left = access(live, F_OK) == 0;
    unlink(stale);
    unlink(live);
    cr_assert(!stale_left, "%s (creator pid %d is dead) was not swept", stale, (int)dead);
    cr_assert(live_left, "%s (creator pid %d is alive) was removed", live, (int)getpid());
}

/* ---- ring order: ranks of one host next to each other ---- */

/* The line of an INIT log that starts with `key` (rest of the line in out); 0 if none. */
static int log_line(const char *dir, int rank, const char *key, char *out, size_t len)
{
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/init.%d", dir, rank);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *p = strstr(line, key);
        if (!p) continue;
        snprintf(out, len, "%s", p + strlen(key));
        out[strcspn(out, "\n")] = '\0';
        found = 1;
    }
    fclose(f);
    return found;
}

/* Six ranks on three stand-in hosts, interleaved: every rank must log the same host-contiguous
 * order, its neighbours must be the ones that order gives with shared memory inside a host and
 * TCP between hosts, and every collective must still be right (reduce-scatter and all-gather
 * map rank-owned blocks through the order). */
Test(ring_order, ranks_of_a_host_are_contiguous_and_results_stay_right, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_TRANSPORT=auto", NULL};
    job_t job = {.scenario = "matrix", .nranks = 6, .seed = seed_for(0x0de6), .env = env, .deadline_s = MATRIX_DEADLINE,
                 .hosts = "a,b,a,b,c,a", .log_init = 1};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    /* order: host a = 0 2 5, host b = 1 3, host c = 4; edges a->a shm, a->b tcp, b->b shm ... */
    static const char *const want_ready[6] = {
        "left rank 4 (127.0.0.1:", "left rank 5 (127.0.0.1:", "left rank 0 (127.0.0.1:",
        "left rank 1 (127.0.0.1:", "left rank 3 (127.0.0.1:", "left rank 2 (127.0.0.1:"};
    static const char *const want_tp[6][2] = {{"tcp", "shm"}, {"tcp", "shm"}, {"shm", "shm"},
                                              {"shm", "tcp"}, {"tcp", "tcp"}, {"shm", "tcp"}};
    for (int r = 0; r < 6; r++) {
        char order[512] = "", ready[512] = "";
        int ho = log_line(res.outdir, r, "ring order: ", order, sizeof order);
        int hr = log_line(res.outdir, r, "ring ready: ", ready, sizeof ready);
        int ok = ho && hr && !strcmp(order, "0 2 5 | 1 3 | 4 (3 hosts)") && strstr(ready, want_ready[r]);
        if (!ok) remove_outdir(res.outdir);
        cr_assert(ho && hr, "rank %d logged no ring order / ring ready line", r);
        cr_assert(!strcmp(order, "0 2 5 | 1 3 | 4 (3 hosts)"), "rank %d logged ring order \"%s\"", r, order);
        cr_assert(strstr(ready, want_ready[r]), "rank %d: ring ready: %s (expected %s...)", r, ready, want_ready[r]);
        char edges[64];
        snprintf(edges, sizeof edges, "over %s, right", want_tp[r][0]);
        cr_assert(strstr(ready, edges), "rank %d: left edge should be %s: %s", r, want_tp[r][0], ready);
        snprintf(edges, sizeof edges, "over %s", want_tp[r][1]);
        cr_assert(strstr(strstr(ready, ", right") ? strstr(ready, ", right") : ready, edges),
                  "rank %d: right edge should be %s: %s", r, want_tp[r][1], ready);
    }
    remove_outdir(res.outdir);
}

/* The same interleaved hosts over TCP alone: every edge is TCP, and a ring position still
 * differs from the rank on most ranks. The collective suites' other runs have position ==
 * rank (one host), so a slip between the two in a collective (the all-gather's own block
 * copied from the position's place, say) went unseen outside the test above, which the TCP,
 * mix, rd and sm runs leave out. */
Test(ring_order, interleaved_hosts_over_tcp_only_keep_results_right, .timeout = MATRIX_DEADLINE + 60)
{
    static const char *const env[] = {"RING_TRANSPORT=tcp", NULL};
    job_t job = {.scenario = "matrix", .nranks = 5, .seed = seed_for(0x0de5), .env = env, .deadline_s = MATRIX_DEADLINE,
                 .hosts = "a,b,a,b,c", .log_init = 1};
    job_result_t res;
    long checked[MAX_RANKS];
    run_job(&job, &res, checked);
    char order[512] = "";
    int ho = log_line(res.outdir, 0, "ring order: ", order, sizeof order);
    int ok = ho && !strcmp(order, "0 2 | 1 3 | 4 (3 hosts)");
    remove_outdir(res.outdir);
    cr_assert(ok, "rank 0 logged ring order \"%s\"", order);
}
