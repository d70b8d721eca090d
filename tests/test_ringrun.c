/* Tests for tools/ringrun: run the real binary (RING_TEST_RINGRUN) on the helper program
 * tests/ringrun_child (RING_TEST_RINGRUN_CHILD) and check environment, output prefixing and
 * line integrity, exit-status propagation, teardown on failure, timeout and signal forwarding.
 * Every run has a deadline; on expiry the whole process group of ringrun is killed. */
#include <criterion/criterion.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64
#define MAX_PIDS 16

typedef struct {
    char *d;
    size_t n, cap;
} buf_t;

typedef struct {
    pid_t pid; /* also the process group of ringrun and its ranks */
    int fd[2]; /* ringrun's stdout, stderr */
    buf_t b[2];
    int status;
    bool reaped;
    double t0, t_end;
} run_t;

/* A failed assertion leaves the run behind; the fini hook kills it so that no ranks outlive the test. */
static pid_t live_pgid;

static void kill_leftovers(void)
{
    if (live_pgid > 0) {
        killpg(live_pgid, SIGKILL);
        waitpid(live_pgid, NULL, 0);
        live_pgid = 0;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static const char *env_path(const char *name)
{
    const char *p = getenv(name);
    cr_assert(p && *p, "%s is not set (run this test through meson test)", name);
    cr_assert(access(p, X_OK) == 0, "%s=%s is not executable", name, p);
    return p;
}

static void buf_append(buf_t *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 65536;
        while (b->n + n + 1 > nc) nc *= 2;
        b->d = realloc(b->d, nc);
        cr_assert(b->d, "out of memory");
        b->cap = nc;
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
    b->d[b->n] = '\0';
}

/* Starts ringrun with the given arguments (NULL-terminated, after argv[0]). env entries "NAME=VALUE"
 * are set and "NAME" alone unset; RING_SECRET is unset unless given so that ringrun makes its own. */
/* >= 0: the next run gets this pseudo-terminal (its slave side) as controlling terminal and stdin, in
 * a session of its own, as a shell in a terminal window would start it. */
static int run_tty = -1;
static int run_nofile; /* > 0: ringrun starts with this open-file limit, soft and hard */

static void start_run(run_t *r, const char *const *args, const char *const *env, const char *stdin_data)
{
    const char *ringrun = env_path("RING_TEST_RINGRUN");
    const char *argv[MAX_ARGS];
    int na = 0;
    argv[na++] = ringrun;
    for (; args && *args; args++) {
        cr_assert(na < MAX_ARGS - 1);
        argv[na++] = *args;
    }
    argv[na] = NULL;

    memset(r, 0, sizeof *r);
    int po[2], pe[2], pin[2];
    cr_assert(pipe2(po, O_CLOEXEC) == 0 && pipe2(pe, O_CLOEXEC) == 0 && pipe2(pin, O_CLOEXEC) == 0);
    if (stdin_data) {
        size_t len = strlen(stdin_data);
        cr_assert(len < 4096, "stdin data must fit the pipe");
        cr_assert(write(pin[1], stdin_data, len) == (ssize_t)len);
    }
    close(pin[1]);
    fflush(NULL);
    r->t0 = now_s();
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (run_tty >= 0) {
            if (setsid() < 0 || ioctl(run_tty, TIOCSCTTY, 0) != 0) _exit(125);
            dup2(run_tty, 0);
        } else {
            setpgid(0, 0);
            dup2(pin[0], 0);
        }
        dup2(po[1], 1);
        dup2(pe[1], 2);
        /* Nothing from the test runner may leak in: the fd test checks what the ranks inherit. */
        long maxfd = sysconf(_SC_OPEN_MAX);
        if (maxfd < 0 || maxfd > 65536) maxfd = 65536;
        for (int fd = 3; fd < maxfd; fd++) close(fd);
        unsetenv("RING_SECRET");
        for (; env && *env; env++) {
            const char *eq = strchr(*env, '=');
            if (eq) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(eq - *env), *env);
                setenv(name, eq + 1, 1);
            } else {
                unsetenv(*env);
            }
        }
        if (run_nofile > 0) {
            struct rlimit rl = {(rlim_t)run_nofile, (rlim_t)run_nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(125);
        }
        execv(ringrun, (char *const *)argv);
        _exit(126);
    }
    if (run_tty < 0) setpgid(pid, pid);
    close(pin[0]);
    close(po[1]);
    close(pe[1]);
    r->pid = pid;
    live_pgid = pid;
    r->fd[0] = po[0];
    r->fd[1] = pe[0];
}

/* Reads output until both streams end, stop() says so, or the deadline passes (returns false). */
static bool pump_until(run_t *r, double deadline, bool (*stop)(run_t *, void *), void *arg)
{
    for (;;) {
        if (stop && stop(r, arg)) return true;
        struct pollfd p[2];
        int np = 0, idx[2];
        for (int s = 0; s < 2; s++)
            if (r->fd[s] >= 0) {
                p[np] = (struct pollfd){.fd = r->fd[s], .events = POLLIN};
                idx[np++] = s;
            }
        if (np == 0) return !stop;
        double left = deadline - now_s();
        if (left <= 0) return false;
        int pr = poll(p, (nfds_t)np, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR) cr_assert_fail("poll: %s", strerror(errno));
        for (int i = 0; i < np && pr > 0; i++) {
            if (!p[i].revents) continue;
            char chunk[65536];
            ssize_t n = read(p[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                buf_append(&r->b[idx[i]], chunk, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(r->fd[idx[i]]);
                r->fd[idx[i]] = -1;
            }
        }
    }
}

static bool try_reap(run_t *r)
{
    if (r->reaped) return true;
    pid_t w = waitpid(r->pid, &r->status, WNOHANG);
    if (w == r->pid) {
        r->reaped = true;
        r->t_end = now_s();
        /* ringrun waits for its ranks, so anything left in the group now is a leak; kill it anyway. */
        killpg(r->pid, SIGKILL);
        live_pgid = 0;
    }
    return r->reaped;
}

/* Collects all output and the exit status within timeout seconds of now, or fails the test. */
static void finish_run(run_t *r, double timeout)
{
    double deadline = now_s() + timeout;
    bool ok = pump_until(r, deadline, NULL, NULL);
    while (ok && !try_reap(r)) {
        if (now_s() >= deadline) ok = false;
        else sleep_s(0.01);
    }
    if (!ok) {
        kill_leftovers();
        cr_assert_fail("ringrun did not finish within %.1f s\nstdout:\n%.2000s\nstderr:\n%.2000s", timeout,
                       r->b[0].d ? r->b[0].d : "", r->b[1].d ? r->b[1].d : "");
    }
    for (int s = 0; s < 2; s++)
        if (!r->b[s].d) buf_append(&r->b[s], "", 0);
}

static void free_run(run_t *r)
{
    for (int s = 0; s < 2; s++) {
        if (r->fd[s] >= 0) close(r->fd[s]);
        free(r->b[s].d);
    }
}

static void run_to_end(run_t *r, const char *const *args, const char *const *env, double timeout)
{
    start_run(r, args, env, NULL);
    finish_run(r, timeout);
}

static int exit_code(const run_t *r)
{
    cr_assert(WIFEXITED(r->status), "ringrun did not exit normally (status 0x%x)", r->status);
    return WEXITSTATUS(r->status);
}

/* Splits a finished stream into lines in place; insists on a final newline. */
static size_t split_lines(buf_t *b, char ***out)
{
    size_t cap = 1024, n = 0;
    char **v = malloc(cap * sizeof *v);
    cr_assert(v);
    if (b->n) cr_assert(b->d[b->n - 1] == '\n', "output does not end with a newline: ...%.80s", b->d + (b->n > 80 ? b->n - 80 : 0));
    char *p = b->d, *end = b->d + b->n;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        *nl = '\0';
        if (n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            cr_assert(v);
        }
        v[n++] = p;
        p = nl + 1;
    }
    *out = v;
    return n;
}

/* Parses "[r] rest"; returns r or -1. */
static int parse_prefix(const char *line, const char **rest)
{
    if (line[0] != '[' || !isdigit((unsigned char)line[1])) return -1;
    char *e;
    long r = strtol(line + 1, &e, 10);
    if (e[0] != ']' || e[1] != ' ') return -1;
    *rest = e + 2;
    return (int)r;
}

/* The value of NAME=value that rank r printed in "env" mode, or NULL. */
static const char *env_value(char **lines, size_t n, int rank, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < n; i++) {
        const char *rest;
        if (parse_prefix(lines[i], &rest) == rank && !strncmp(rest, name, nl) && rest[nl] == '=') return rest + nl + 1;
    }
    return NULL;
}

/* Same as make_line in ringrun_child.c. */
static size_t make_line(char *buf, int r, int s, long i)
{
    int n = sprintf(buf, "%s r=%d i=%ld ", s ? "err" : "out", r, i);
    size_t fill = (size_t)((i * 37 + r * 11) % 300);
    memset(buf + n, 'a' + (int)((r + i) % 26), fill);
    buf[n + fill] = '\0';
    return (size_t)n + fill;
}

static void collect_ready_pids(run_t *r, pid_t *pids, int n)
{
    int got = 0;
    const char *p = r->b[0].d;
    while (p && (p = strstr(p, "ready pid=")) && got < n) {
        pids[got++] = (pid_t)atoi(p + strlen("ready pid="));
        p++;
    }
    cr_assert_eq(got, n, "expected %d ready lines, got %d:\n%s", n, got, r->b[0].d ? r->b[0].d : "");
}

static bool has_n_ready(run_t *r, void *arg)
{
    int want = *(int *)arg, got = 0;
    for (const char *p = r->b[0].d; p && (p = strstr(p, "ready pid=")); p++) got++;
    return got >= want;
}

static bool stderr_has_n(run_t *r, void *arg)
{
    const char **a = arg; /* {needle, count as string} */
    int want = atoi(a[1]), got = 0;
    for (const char *p = r->b[1].d; p && (p = strstr(p, a[0])); p++) got++;
    return got >= want;
}

static void wait_ready(run_t *r, int n, pid_t *pids)
{
    if (!pump_until(r, now_s() + 8, has_n_ready, &n)) {
        kill_leftovers();
        cr_assert_fail("ranks did not start: stdout:\n%s\nstderr:\n%s", r->b[0].d ? r->b[0].d : "", r->b[1].d ? r->b[1].d : "");
    }
    collect_ready_pids(r, pids, n);
}

/* Dead means gone or a zombie: an orphan may wait a while for its reaper. */
static bool pid_dead(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *cp = strrchr(buf, ')');
    return cp && cp[1] == ' ' && (cp[2] == 'Z' || cp[2] == 'X');
}

static void assert_all_dead(const pid_t *pids, int n)
{
    double deadline = now_s() + 2;
    for (int i = 0; i < n; i++) {
        while (!pid_dead(pids[i]) && now_s() < deadline) sleep_s(0.01);
        cr_assert(pid_dead(pids[i]), "rank process %d is still running after ringrun exited", (int)pids[i]);
    }
}

static void assert_stderr_has(const run_t *r, const char *needle)
{
    cr_assert(strstr(r->b[1].d, needle), "stderr lacks \"%s\":\n%.4000s", needle, r->b[1].d);
}

/* out must hold the whole line: "[r] text" followed by a newline. */
static void assert_stdout_line(const run_t *r, const char *line)
{
    const char *d = r->b[0].d ? r->b[0].d : "";
    size_t n = strlen(line);
    for (const char *p = d; (p = strstr(p, line)); p++)
        if ((p == d || p[-1] == '\n') && p[n] == '\n') return;
    cr_assert_fail("stdout lacks the line \"%s\":\n%.4000s", line, d);
}

#define CHILD env_path("RING_TEST_RINGRUN_CHILD")
#define RR_TEST(name) Test(ringrun, name, .timeout = 15, .fini = kill_leftovers)

/* ---------- environment ---------- */

static void check_env_n4(run_t *r, char secret_out[64])
{
    cr_assert_eq(exit_code(r), 0, "stderr:\n%s", r->b[1].d);
    char **lines;
    size_t n = split_lines(&r->b[0], &lines);
    cr_assert_eq(n, 4 * 6, "expected 24 lines, got %zu:\n%s", n, r->b[0].d);
    const char *root0 = NULL, *secret0 = NULL;
    for (int rank = 0; rank < 4; rank++) {
        char want[16];
        snprintf(want, sizeof want, "%d", rank);
        const char *v = env_value(lines, n, rank, "RING_RANK");
        cr_assert(v && !strcmp(v, want), "rank %d: RING_RANK=%s", rank, v ? v : "(none)");
        v = env_value(lines, n, rank, "RING_LOCAL_RANK");
        cr_assert(v && !strcmp(v, want), "rank %d: RING_LOCAL_RANK=%s", rank, v ? v : "(none)");
        v = env_value(lines, n, rank, "RING_NRANKS");
        cr_assert(v && !strcmp(v, "4"), "rank %d: RING_NRANKS=%s", rank, v ? v : "(none)");
        v = env_value(lines, n, rank, "RING_LOCAL_SIZE");
        cr_assert(v && !strcmp(v, "4"), "rank %d: RING_LOCAL_SIZE=%s", rank, v ? v : "(none)");
        const char *root = env_value(lines, n, rank, "RING_ROOT");
        const char *secret = env_value(lines, n, rank, "RING_SECRET");
        cr_assert(root && secret, "rank %d lacks RING_ROOT or RING_SECRET", rank);
        if (rank == 0) {
            root0 = root;
            secret0 = secret;
        }
        cr_assert_str_eq(root, root0, "ranks disagree on RING_ROOT");
        cr_assert_str_eq(secret, secret0, "ranks disagree on RING_SECRET");
    }
    snprintf(secret_out, 64, "%s", secret0);
    /* Every line came from the rank its prefix names, and nothing else is there. */
    for (size_t i = 0; i < n; i++) {
        const char *rest;
        cr_assert(parse_prefix(lines[i], &rest) >= 0 && !strncmp(rest, "RING_", 5), "odd line: %s", lines[i]);
    }
    cr_assert_eq(strncmp(root0, "127.0.0.1:", 10), 0, "RING_ROOT=%s", root0);
    int port = atoi(root0 + 10);
    cr_assert(port > 0 && port < 65536, "RING_ROOT=%s", root0);
    /* Below the ephemeral range, where no outgoing connection can take it before rank 0 binds. */
    int eph_lo = 0, eph_hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f && fscanf(f, "%d %d", &eph_lo, &eph_hi) == 2 && eph_lo > 11000)
        cr_assert(port >= 10000 && port < eph_lo, "RING_ROOT=%s is not in 10000-%d", root0, eph_lo - 1);
    if (f) fclose(f);
    free(lines);
}

RR_TEST(env_four_ranks)
{
    const char *args[] = {"-n", "4", "--", CHILD, "env", NULL};
    char s1[64], s2[64];
    run_t r;
    run_to_end(&r, args, NULL, 10);
    check_env_n4(&r, s1);
    free_run(&r);
    cr_assert_eq(strlen(s1), 32, "secret \"%s\" is not 32 characters", s1);
    for (int i = 0; i < 32; i++)
        cr_assert(isxdigit((unsigned char)s1[i]), "secret \"%s\" is not hex", s1);

    run_to_end(&r, args, NULL, 10);
    check_env_n4(&r, s2);
    free_run(&r);
    cr_assert_str_neq(s1, s2, "two launches got the same secret");
}

static int parent_ncpus(void)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

RR_TEST(bind_to_core_gives_each_rank_its_own_cpu)
{
    int n = parent_ncpus() < 2 ? 1 : 2;
    char ns[8];
    snprintf(ns, sizeof ns, "%d", n);
    const char *args[] = {"-n", ns, "--bind-to", "core", CHILD, "cpus", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
    char **lines;
    size_t nl = split_lines(&r.b[0], &lines);
    const char *first0 = env_value(lines, nl, 0, "FIRSTCPU");
    for (int k = 0; k < n; k++) {
        const char *c = env_value(lines, nl, k, "NCPUS");
        cr_assert(c && !strcmp(c, "1"), "rank %d may run on %s CPUs", k, c ? c : "?");
    }
    if (n == 2) {
        const char *first1 = env_value(lines, nl, 1, "FIRSTCPU");
        cr_assert(first0 && first1 && strcmp(first0, first1), "both ranks on CPU %s", first0 ? first0 : "?");
    }
    free(lines);
    free_run(&r);
}

RR_TEST(bind_to_none_leaves_the_cpu_set_alone)
{
    const char *args[] = {"-n", "2", "--bind-to", "none", CHILD, "cpus", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
    char **lines;
    size_t nl = split_lines(&r.b[0], &lines);
    char want[16];
    snprintf(want, sizeof want, "%d", parent_ncpus());
    for (int k = 0; k < 2; k++) {
        const char *c = env_value(lines, nl, k, "NCPUS");
        cr_assert(c && !strcmp(c, want), "rank %d may run on %s CPUs, ringrun on %s", k, c ? c : "?", want);
    }
    free(lines);
    free_run(&r);
}

RR_TEST(secret_from_environment_is_kept)
{
    const char *args[] = {"-n", "4", CHILD, "env", NULL};
    const char *env[] = {"RING_SECRET=0123456789abcdef0123456789abcdef", NULL};
    char s[64];
    run_t r;
    run_to_end(&r, args, env, 10);
    check_env_n4(&r, s);
    cr_assert_str_eq(s, "0123456789abcdef0123456789abcdef");
    free_run(&r);
}

RR_TEST(host_and_port_options)
{
    const char *args[] = {"-n", "2", "--host", "127.0.0.1", "--port", "34567", CHILD, "env", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
    char **lines;
    size_t n = split_lines(&r.b[0], &lines);
    for (int rank = 0; rank < 2; rank++) {
        const char *v = env_value(lines, n, rank, "RING_ROOT");
        cr_assert(v && !strcmp(v, "127.0.0.1:34567"), "rank %d: RING_ROOT=%s", rank, v ? v : "(none)");
    }
    free(lines);
    free_run(&r);
}

RR_TEST(extra_env_with_x)
{
    const char *args[] = {"-n", "3", "-x", "FOO=bar", "-x", "BAZ=a=b", "-x", "EMPTY=", CHILD, "env", "FOO", "BAZ", "EMPTY", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
    char **lines;
    size_t n = split_lines(&r.b[0], &lines);
    for (int rank = 0; rank < 3; rank++) {
        const char *v = env_value(lines, n, rank, "FOO");
        cr_assert(v && !strcmp(v, "bar"), "rank %d: FOO=%s", rank, v ? v : "(unset)");
        v = env_value(lines, n, rank, "BAZ");
        cr_assert(v && !strcmp(v, "a=b"), "rank %d: BAZ=%s", rank, v ? v : "(unset)");
        v = env_value(lines, n, rank, "EMPTY");
        cr_assert(v && !strcmp(v, ""), "rank %d: EMPTY=%s", rank, v ? v : "(unset)");
    }
    free(lines);
    free_run(&r);
}

/* ---------- output ---------- */

/* Every line is "[r] " + rank r's next expected line; per-rank order is kept; nothing is missing. */
static void check_lines(buf_t *b, int s, int nranks, long k, bool prefixed)
{
    char **lines;
    size_t n = split_lines(b, &lines);
    cr_assert_eq(n, (size_t)nranks * (size_t)k, "stream %d: %zu lines, expected %ld", s, n, nranks * k);
    long next[64] = {0};
    char want[512];
    for (size_t i = 0; i < n; i++) {
        const char *rest = lines[i];
        int r;
        if (prefixed) {
            r = parse_prefix(lines[i], &rest);
        } else {
            r = -1;
            sscanf(rest, "%*s r=%d", &r);
        }
        cr_assert(r >= 0 && r < nranks, "stream %d line %zu has no valid rank: %.200s", s, i, lines[i]);
        make_line(want, r, s, next[r]);
        cr_assert(!strcmp(rest, want), "stream %d line %zu (rank %d, #%ld) is mangled:\n got: %.300s\nwant: %.300s", s, i,
                  r, next[r], lines[i], want);
        next[r]++;
    }
    for (int r = 0; r < nranks; r++) cr_assert_eq(next[r], k, "rank %d: %ld lines on stream %d", r, next[r], s);
    free(lines);
}

RR_TEST(lines_prefixed_and_whole)
{
    const char *args[] = {"-n", "4", CHILD, "lines", "2000", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 12);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%.2000s", r.b[1].d);
    check_lines(&r.b[0], 0, 4, 2000, true);
    check_lines(&r.b[1], 1, 4, 2000, true);
    free_run(&r);
}

RR_TEST(no_prefix)
{
    const char *args[] = {"--no-prefix", "-n", "2", CHILD, "lines", "300", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%.2000s", r.b[1].d);
    check_lines(&r.b[0], 0, 2, 300, false);
    check_lines(&r.b[1], 1, 2, 300, false);
    free_run(&r);
}

static void check_long(long bytes, long k)
{
    char nb[32], nk[32];
    snprintf(nb, sizeof nb, "%ld", bytes);
    snprintf(nk, sizeof nk, "%ld", k);
    const char *args[] = {"-n", "4", CHILD, "long", nb, nk, NULL};
    run_t r;
    run_to_end(&r, args, NULL, 12);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%.2000s", r.b[1].d);
    char **lines;
    size_t n = split_lines(&r.b[0], &lines);
    cr_assert_eq(n, 4 * (size_t)k, "%zu lines, expected %ld", n, 4 * k);
    char *want = malloc((size_t)bytes + 1);
    cr_assert(want);
    long next[4] = {0};
    for (size_t i = 0; i < n; i++) {
        const char *rest;
        int rk = parse_prefix(lines[i], &rest);
        cr_assert(rk >= 0 && rk < 4, "line %zu lacks a prefix: %.100s", i, lines[i]);
        int h = snprintf(want, (size_t)bytes + 1, "L r=%d i=%ld ", rk, next[rk]);
        memset(want + h, 'A' + (int)((rk + next[rk]) % 26), (size_t)(bytes - h));
        want[bytes] = '\0';
        cr_assert_eq(strlen(rest), (size_t)bytes, "line %zu (rank %d) has %zu bytes, expected %ld", i, rk, strlen(rest), bytes);
        cr_assert(!memcmp(rest, want, (size_t)bytes), "line %zu (rank %d) is mangled", i, rk);
        next[rk]++;
    }
    free(want);
    free(lines);
    free_run(&r);
}

RR_TEST(long_lines) { check_long(200000, 4); }

/* Past ringrun's in-memory line limit the line is written in pieces; it still must not be broken
 * up by other ranks' output. */
RR_TEST(very_long_lines) { check_long(3 << 20, 2); }

RR_TEST(partial_last_line_flushed)
{
    const char *args[] = {"-n", "3", CHILD, "partial", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0);
    for (int s = 0; s < 2; s++) {
        char **lines;
        size_t n = split_lines(&r.b[s], &lines);
        cr_assert_eq(n, 3, "stream %d: %zu lines:\n%s", s, n, r.b[s].d);
        bool seen[3] = {false};
        for (size_t i = 0; i < n; i++) {
            const char *rest;
            int rk = parse_prefix(lines[i], &rest);
            cr_assert(rk >= 0 && rk < 3, "bad line %s", lines[i]);
            char want[32];
            snprintf(want, sizeof want, "%spartial-%d", s ? "e" : "", rk);
            cr_assert_str_eq(rest, want);
            seen[rk] = true;
        }
        cr_assert(seen[0] && seen[1] && seen[2]);
        free(lines);
    }
    free_run(&r);
}

RR_TEST(stdin_goes_to_rank_zero_only)
{
    const char *args[] = {"-n", "2", CHILD, "stdin", NULL};
    run_t r;
    start_run(&r, args, NULL, "hello");
    finish_run(&r, 10);
    cr_assert_eq(exit_code(&r), 0);
    /* Checking what fd 0 is, not just who read the bytes: with a shared stdin rank 0 could win the race anyway. */
    cr_assert(strstr(r.b[0].d, "[0] stdin pipe:["), "stdout:\n%s", r.b[0].d);
    cr_assert(strstr(r.b[0].d, "] bytes=5\n"), "stdout:\n%s", r.b[0].d);
    cr_assert(strstr(r.b[0].d, "[1] stdin /dev/null bytes=0\n"), "stdout:\n%s", r.b[0].d);
    free_run(&r);
}

RR_TEST(no_descriptors_leak_into_ranks)
{
    const char *args[] = {"-n", "4", CHILD, "fds", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0);
    char **lines;
    size_t n = split_lines(&r.b[0], &lines);
    cr_assert_eq(n, 4, "ranks see extra descriptors:\n%s", r.b[0].d);
    for (size_t i = 0; i < n; i++) {
        const char *rest;
        cr_assert(parse_prefix(lines[i], &rest) >= 0 && !strcmp(rest, "fds done"), "%s", lines[i]);
    }
    free(lines);
    free_run(&r);
}

/* ---------- failures ---------- */

RR_TEST(all_ok_exits_zero)
{
    const char *args[] = {"-n", "3", CHILD, "lines", "5", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_eq(exit_code(&r), 0);
    cr_assert(!strstr(r.b[1].d, "ringrun:"), "unexpected message:\n%s", r.b[1].d);
    free_run(&r);
}

RR_TEST(failing_rank_stops_the_others)
{
    const char *args[] = {"-n", "4", CHILD, "fail", "2", "3", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 12);
    double took = r.t_end - r.t0;
    cr_assert_eq(exit_code(&r), 3, "exit status %d, stderr:\n%s", exit_code(&r), r.b[1].d);
    cr_assert_lt(took, 4.0, "took %.2f s: the sleeping ranks were not stopped", took);
    assert_stderr_has(&r, "ringrun: rank 2 exited with status 3\n");
    /* The others die from ringrun's SIGTERM, not from their own sleep ending. */
    assert_stderr_has(&r, "[0] got SIGTERM\n");
    assert_stderr_has(&r, "[1] got SIGTERM\n");
    assert_stderr_has(&r, "[3] got SIGTERM\n");
    free_run(&r);
}

/* The others end by themselves within the grace after a failure (a ringcomm rank returns an
 * error naming the failed peer), and what they say reaches the output: ringrun used to send
 * SIGTERM at once, and ranks died before they printed it. */
RR_TEST(failing_rank_leaves_the_others_time_to_report_it)
{
    char file[64];
    snprintf(file, sizeof file, "/tmp/ringrun-follow-%d", (int)getpid());
    unlink(file);
    const char *args[] = {"-n", "4", CHILD, "follow", "2", "3", file, NULL};
    run_t r;
    run_to_end(&r, args, NULL, 12);
    unlink(file);
    cr_assert_eq(exit_code(&r), 3, "exit status %d, stderr:\n%s", exit_code(&r), r.b[1].d);
    assert_stderr_has(&r, "ringrun: rank 2 exited with status 3\n");
    assert_stderr_has(&r, "[0] rank 0: rank 2 failed\n");
    assert_stderr_has(&r, "[1] rank 1: rank 2 failed\n");
    assert_stderr_has(&r, "[3] rank 3: rank 2 failed\n");
    cr_assert(!strstr(r.b[1].d, "got SIGTERM"), "terminated before they reported it:\n%s", r.b[1].d);
    free_run(&r);
}

/* Once every rank ended and its output is read, ringrun ends too. It used to wait out the 1 s
 * meant for a pipe that a rank's leftover child holds open whenever it read the pipes' ends
 * before it reaped the last rank: in about one run of three. */
RR_TEST(ends_as_soon_as_the_ranks_have_ended)
{
    const char *args[] = {"-n", "2", "/bin/true", NULL};
    for (int i = 0; i < 8; i++) {
        run_t r;
        run_to_end(&r, args, NULL, 10);
        double took = r.t_end - r.t0;
        cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
        cr_assert_lt(took, 0.9, "run %d took %.2f s for two ranks that exit at once", i, took);
        free_run(&r);
    }
}

RR_TEST(sigkill_after_grace_when_sigterm_ignored)
{
    const char *args[] = {"-n", "3", CHILD, "fail", "1", "5", "stubborn", NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    finish_run(&r, 12);
    double took = r.t_end - r.t0;
    cr_assert_eq(exit_code(&r), 5, "stderr:\n%s", r.b[1].d);
    cr_assert_lt(took, 6.0, "took %.2f s: no SIGKILL after the grace period", took);
    assert_stderr_has(&r, "ringrun: rank 1 exited with status 5\n");
    assert_stderr_has(&r, "[0] got SIGTERM (ignoring)\n");
    assert_stderr_has(&r, "[2] got SIGTERM (ignoring)\n");
    assert_all_dead(pids, 2);
    free_run(&r);
}

RR_TEST(killed_rank_fails_the_job)
{
    const char *args[] = {"-n", "3", CHILD, "crash", "1", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 12);
    double took = r.t_end - r.t0;
    cr_assert_eq(exit_code(&r), 128 + SIGKILL, "stderr:\n%s", r.b[1].d);
    cr_assert_lt(took, 4.0, "took %.2f s", took);
    assert_stderr_has(&r, "ringrun: rank 1 killed by signal 9");
    free_run(&r);
}

RR_TEST(missing_program)
{
    const char *args[] = {"-n", "2", "/nonexistent/ringrun-test-program", NULL};
    run_t r;
    run_to_end(&r, args, NULL, 10);
    cr_assert_neq(exit_code(&r), 0);
    assert_stderr_has(&r, "cannot execute");
    /* The cause before its effect: the rank's own words came after ringrun's note. */
    const char *why = strstr(r.b[1].d, "cannot execute"), *end = strstr(r.b[1].d, "exited with status");
    cr_assert(why && end && why < end, "%s", r.b[1].d);
    free_run(&r);
}

RR_TEST(usage_errors)
{
    const char *const bad[][8] = {
        {CHILD, "env", NULL},                   /* no -n */
        {"-n", "2", NULL},                      /* no program */
        {"-n", "0", CHILD, "env", NULL},        /* bad count */
        {"-n", "2", "-x", "NOEQUALS", CHILD, NULL},
        {"-n", "2", "--timeout", "soon", CHILD, NULL},
        {"-n", "2", "--bogus", CHILD, NULL},
        {"-n", "2", "--bind-to", "socket", CHILD, NULL},
        {"-n", "100000", "--bind-to", "core", CHILD, NULL}, /* more ranks than CPUs */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_t r;
        run_to_end(&r, bad[i], NULL, 5);
        cr_assert_eq(exit_code(&r), 2, "case %zu: exit %d", i, exit_code(&r));
        cr_assert(strstr(r.b[1].d, "ringrun"), "case %zu: no message", i);
        cr_assert_eq(r.b[0].n, 0, "case %zu: a rank ran:\n%s", i, r.b[0].d);
        free_run(&r);
    }
    run_t r;
    /* More ranks than the open-file limit allows pipes for: said before any rank starts (it
     * forked ranks until a pipe failed, about 10000 of 12000 at a limit of 20000). */
    run_nofile = 128;
    const char *many[] = {"-n", "200", CHILD, "env", NULL};
    run_to_end(&r, many, NULL, 10);
    run_nofile = 0;
    cr_assert_eq(exit_code(&r), 2, "%s", r.b[1].d);
    cr_assert(strstr(r.b[1].d, "open files") && strstr(r.b[1].d, "ulimit -n"), "%s", r.b[1].d);
    cr_assert_eq(r.b[0].n, 0, "a rank ran:\n%s", r.b[0].d);
    free_run(&r);
    /* mpirun's -np is read as -n "p": the message names ringrun's spelling. */
    const char *np[] = {"-np", "2", CHILD, "env", NULL};
    run_to_end(&r, np, NULL, 5);
    cr_assert_eq(exit_code(&r), 2);
    cr_assert(strstr(r.b[1].d, "ringrun's option is -n"), "%s", r.b[1].d);
    free_run(&r);
    const char *help[] = {"--help", NULL};
    run_to_end(&r, help, NULL, 5);
    cr_assert_eq(exit_code(&r), 0);
    cr_assert(strstr(r.b[0].d, "usage"));
    free_run(&r);
}

RR_TEST(timeout_kills_the_job)
{
    const char *args[] = {"--timeout", "1", "-n", "2", CHILD, "sleep", "10", NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    finish_run(&r, 12);
    double took = r.t_end - r.t0;
    cr_assert_eq(exit_code(&r), 124, "stderr:\n%s", r.b[1].d);
    cr_assert(took > 0.9 && took < 5.0, "took %.2f s with --timeout 1", took);
    assert_stderr_has(&r, "ringrun: timeout");
    assert_all_dead(pids, 2);
    free_run(&r);
}

/* ---------- signals ---------- */

static void check_died_of(const run_t *r, int sig)
{
    bool ok = (WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig) ||
              (WIFEXITED(r->status) && WEXITSTATUS(r->status) == 128 + sig);
    cr_assert(ok, "ringrun status 0x%x after signal %d; stderr:\n%s", r->status, sig, r->b[1].d);
}

static void forwarded_signal(int sig, const char *name)
{
    const char *args[] = {"-n", "4", CHILD, "sleep", "10", NULL};
    run_t r;
    pid_t pids[4];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 4, pids);
    double t = now_s();
    cr_assert_eq(kill(r.pid, sig), 0);
    finish_run(&r, 8);
    cr_assert_lt(r.t_end - t, 3.0, "ringrun took %.2f s to stop after %s", r.t_end - t, name);
    check_died_of(&r, sig);
    char needle[64];
    for (int rk = 0; rk < 4; rk++) {
        snprintf(needle, sizeof needle, "[%d] got %s\n", rk, name);
        assert_stderr_has(&r, needle);
    }
    assert_all_dead(pids, 4);
    free_run(&r);
}

RR_TEST(sigint_is_forwarded) { forwarded_signal(SIGINT, "SIGINT"); }

RR_TEST(sigterm_is_forwarded) { forwarded_signal(SIGTERM, "SIGTERM"); }

/* Ctrl-C in a terminal: the terminal sends SIGINT to its whole foreground process group, ringrun
 * and the ranks alike. Each rank must get it once (ringrun used to forward a second copy, and a
 * program that takes a second Ctrl-C for "quit now" skipped its clean-up), and ringrun must die
 * by SIGINT so that a calling shell stops its loop (it often returned 130 instead: it counted a
 * rank's death from that SIGINT as a failure before it read its own signal). */
RR_TEST(ctrl_c_in_a_terminal_reaches_each_rank_once_and_ringrun_dies_of_it)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    cr_assert(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0, "pseudo-terminal: %s", strerror(errno));
    const char *name = ptsname(master);
    cr_assert_not_null(name);
    int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    cr_assert(slave >= 0, "%s: %s", name, strerror(errno));
    const char *args[] = {"-n", "3", CHILD, "count", "5", NULL};
    run_t r;
    pid_t pids[3];
    run_tty = slave;
    start_run(&r, args, NULL, NULL);
    run_tty = -1;
    close(slave);
    wait_ready(&r, 3, pids);
    cr_assert_eq(write(master, "\x03", 1), 1, "writing ^C: %s", strerror(errno));
    finish_run(&r, 8);
    close(master);
    const char *want = "SIGINTs: 1\n";
    int got = 0;
    for (const char *p = r.b[1].d; p && (p = strstr(p, want)); p++) got++;
    cr_assert_eq(got, 3, "not every rank got exactly one SIGINT; stderr:\n%s", r.b[1].d);
    assert_stderr_has(&r, "from the terminal");
    cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGINT,
              "ringrun status 0x%x after ^C, not death by SIGINT; stderr:\n%s", r.status, r.b[1].d);
    assert_all_dead(pids, 3);
    free_run(&r);
}

/* --timeout holds after a forwarded signal that a rank ignores: the job ends at the timeout, not
 * when the rank feels like it (it used to run on to its own end). */
RR_TEST(timeout_still_ends_a_job_whose_ranks_ignore_a_forwarded_signal)
{
    /* --timeout 1: well before the 2 s kill grace that the forwarded SIGINT arms. */
    const char *args[] = {"-n", "2", "--timeout", "1", CHILD, "nointr", "10", NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    cr_assert_eq(kill(r.pid, SIGINT), 0);
    finish_run(&r, 12);
    double took = r.t_end - r.t0;
    cr_assert(took < 5.0, "took %.2f s with --timeout 1; stderr:\n%s", took, r.b[1].d);
    assert_stderr_has(&r, "ringrun: timeout");
    check_died_of(&r, SIGINT);
    assert_all_dead(pids, 2);
    free_run(&r);
}

/* A rank that is a shell running the program (not exec'ing it): at teardown the shell dies and
 * its program is orphaned. ringrun adopts it (subreaper) and ends it too, instead of leaving it
 * running, holding ports or a GPU, after ringrun returned. */
RR_TEST(programs_that_a_rank_left_behind_are_torn_down_too)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "'%s' sleep 30; echo late", CHILD);
    const char *args[] = {"-n", "2", "--timeout", "1", "/bin/sh", "-c", cmd, NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    /* Not finish_run: it kills ringrun's process group once ringrun is reaped, orphans included. */
    cr_assert(pump_until(&r, now_s() + 12, NULL, NULL), "ringrun did not finish; stderr:\n%s", r.b[1].d);
    cr_assert_eq(waitpid(r.pid, &r.status, 0), r.pid);
    r.reaped = true;
    assert_all_dead(pids, 2);
    killpg(r.pid, SIGKILL);
    live_pgid = 0;
    cr_assert_eq(exit_code(&r), 124, "stderr:\n%s", r.b[1].d);
    cr_assert(!strstr(r.b[0].d ? r.b[0].d : "", "late"), "a shell went on after teardown:\n%s", r.b[0].d);
    free_run(&r);
}

/* A reader of ringrun's output that stops reading (a pager left unscrolled) throttles the ranks,
 * but must not hold up --timeout: ringrun used to sit in a blocking write, and the ranks ran on
 * until the reader came back. */
RR_TEST(timeout_holds_while_the_reader_of_the_output_stalls)
{
    const char *args[] = {"-n", "1", "--timeout", "1", CHILD, "flood", NULL};
    run_t r;
    pid_t pid;
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 1, &pid);
    sleep_s(2.5); /* not reading: ringrun's writes to us stall once the pipe is full */
    bool dead = pid_dead(pid);
    finish_run(&r, 10);
    cr_assert(dead, "the rank still ran 2.5 s into a 1 s timeout while ringrun's reader stalled");
    cr_assert_eq(exit_code(&r), 124, "stderr:\n%s", r.b[1].d);
    free_run(&r);
}

RR_TEST(second_sigint_kills)
{
    const char *args[] = {"-n", "3", CHILD, "nointr", "10", NULL};
    run_t r;
    pid_t pids[3];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 3, pids);
    cr_assert_eq(kill(r.pid, SIGINT), 0);
    const char *want[] = {"got SIGINT (ignoring)", "3"};
    cr_assert(pump_until(&r, now_s() + 5, stderr_has_n, want), "SIGINT not forwarded:\n%s", r.b[1].d);
    sleep_s(0.3);
    cr_assert(!try_reap(&r), "ringrun exited although its ranks ignore SIGINT");
    for (int i = 0; i < 3; i++) cr_assert(!pid_dead(pids[i]), "rank %d died from an ignored SIGINT", i);
    double t = now_s();
    cr_assert_eq(kill(r.pid, SIGINT), 0);
    finish_run(&r, 8);
    cr_assert_lt(r.t_end - t, 3.0, "second SIGINT took %.2f s", r.t_end - t);
    check_died_of(&r, SIGINT);
    assert_all_dead(pids, 3);
    free_run(&r);
}

static bool stdout_has_n(run_t *r, void *arg)
{
    const char **a = arg; /* {needle, count as string} */
    int want = atoi(a[1]), got = 0;
    for (const char *p = r->b[0].d; p && (p = strstr(p, a[0])); p++) got++;
    return got >= want;
}

/* SIGUSR1 and SIGUSR2 are passed to the ranks, not a reason to stop: Slurm's --signal=USR1@60
 * warns a job before its time limit so that it can checkpoint. ringrun used to die of the
 * signal's default action, and its ranks with it (PR_SET_PDEATHSIG). */
RR_TEST(sigusr1_and_sigusr2_are_forwarded_without_teardown)
{
    const char *script = "trap 'echo got USR1' USR1; trap 'echo got USR2; exit 0' USR2; "
                         "echo ready pid=$$; while :; do sleep .05; done";
    const char *args[] = {"-n", "2", "/bin/sh", "-c", script, NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    cr_assert_eq(kill(r.pid, SIGUSR1), 0);
    const char *usr1[] = {"got USR1", "2"};
    cr_assert(pump_until(&r, now_s() + 3, stdout_has_n, usr1), "SIGUSR1 not forwarded to both ranks; status 0x%x\nstdout:\n%s\nstderr:\n%s",
              try_reap(&r) ? r.status : 0, r.b[0].d ? r.b[0].d : "", r.b[1].d ? r.b[1].d : "");
    assert_stdout_line(&r, "[0] got USR1");
    assert_stdout_line(&r, "[1] got USR1");
    sleep_s(0.3);
    cr_assert(!try_reap(&r), "ringrun exited after SIGUSR1 (status 0x%x); stderr:\n%s", r.status, r.b[1].d ? r.b[1].d : "");
    for (int i = 0; i < 2; i++) cr_assert(!pid_dead(pids[i]), "rank %d died after SIGUSR1", i);
    cr_assert_eq(kill(r.pid, SIGUSR2), 0);
    finish_run(&r, 5);
    cr_assert_eq(exit_code(&r), 0, "stderr:\n%s", r.b[1].d);
    assert_stdout_line(&r, "[0] got USR2");
    assert_stdout_line(&r, "[1] got USR2");
    cr_assert(!strstr(r.b[1].d, "terminat") && !strstr(r.b[1].d, "kill"), "teardown after SIGUSR1/2:\n%s", r.b[1].d);
    assert_all_dead(pids, 2);
    free_run(&r);
}

/* A process's state letter from /proc (R, S, T for stopped...), or '?' when it is gone. */
static char pid_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *cp = strrchr(buf, ')');
    return cp && cp[1] == ' ' ? cp[2] : '?';
}

static bool all_in_state(const pid_t *pids, int n, bool stopped)
{
    for (int i = 0; i < n; i++)
        if ((pid_state(pids[i]) == 'T') != stopped) return false;
    return true;
}

static bool wait_states(const pid_t *pids, int n, bool stopped, double within)
{
    for (double end = now_s() + within; now_s() < end; sleep_s(0.02))
        if (all_in_state(pids, n, stopped)) return true;
    return all_in_state(pids, n, stopped);
}

/* Two ranks that work about 1 s and print "done", under ringrun --timeout T; pids[0..1]. */
static void start_workers(run_t *r, const char *timeout, pid_t *pids)
{
    const char *script = "echo ready pid=$$; i=0; while [ $i -lt 20 ]; do sleep .05; i=$((i+1)); done; echo done";
    const char *args[] = {"-n", "2", "--timeout", timeout, "/bin/sh", "-c", script, NULL};
    start_run(r, args, NULL, NULL);
    wait_ready(r, 2, pids);
}

/* ringrun exited 0 within `within` seconds and both ranks finished their work. */
static void workers_done(run_t *r, double within)
{
    finish_run(r, within);
    cr_assert_eq(exit_code(r), 0, "stderr:\n%s", r->b[1].d);
    assert_stdout_line(r, "[0] done");
    assert_stdout_line(r, "[1] done");
}

/* SIGTSTP from outside a terminal (kill, a batch system) stops the ranks and ringrun, SIGCONT
 * resumes them, and the time stopped does not count against --timeout: here the ranks work
 * about 1 s, are stopped for 5 s, and the job must still end inside its 4 s limit. ringrun
 * used to stop alone while the ranks ran on. */
/* 5 s stopped and the job's own second: more than RR_TEST's 15 s leaves on a loaded machine. */
Test(ringrun, sigtstp_stops_the_ranks_and_sigcont_resumes_them, .timeout = 40, .fini = kill_leftovers)
{
    run_t r;
    pid_t pids[3];
    start_workers(&r, "4", pids);
    pids[2] = r.pid;
    cr_assert_eq(kill(r.pid, SIGTSTP), 0);
    cr_assert(wait_states(pids, 3, true, 3), "after SIGTSTP: rank 0 '%c', rank 1 '%c', ringrun '%c' (T: stopped)",
              pid_state(pids[0]), pid_state(pids[1]), pid_state(pids[2]));
    sleep_s(5);
    cr_assert(all_in_state(pids, 3, true), "stopped job moved on: '%c' '%c' '%c'", pid_state(pids[0]), pid_state(pids[1]),
              pid_state(pids[2]));
    cr_assert_eq(kill(r.pid, SIGCONT), 0);
    cr_assert(wait_states(pids, 3, false, 3), "after SIGCONT: rank 0 '%c', rank 1 '%c', ringrun '%c'", pid_state(pids[0]),
              pid_state(pids[1]), pid_state(pids[2]));
    workers_done(&r, 5);
    assert_stderr_has(&r, "stopped by SIGTSTP for");
    free_run(&r);
}

/* A SIGCONT sent right after the SIGTSTP, before ringrun acted on it, cancels the stop: it used
 * to be used up first, and ringrun then stopped itself with nothing left to wake it. */
RR_TEST(sigcont_right_after_sigtstp_leaves_the_job_running)
{
    run_t r;
    pid_t pids[2];
    start_workers(&r, "10", pids);
    cr_assert_eq(kill(r.pid, SIGTSTP), 0);
    cr_assert_eq(kill(r.pid, SIGCONT), 0);
    workers_done(&r, 6);
    free_run(&r);
}

/* Ranks that ignore a forwarded SIGTERM get the same SIGKILL after the grace period as after a
 * failed rank; ringrun used to wait for them forever. */
static void forwarded_signal_ignored(int sig)
{
    const char *script = "trap '' TERM INT HUP; echo ready pid=$$; while :; do sleep .05; done";
    const char *args[] = {"-n", "2", "/bin/sh", "-c", script, NULL};
    run_t r;
    pid_t pids[2];
    start_run(&r, args, NULL, NULL);
    wait_ready(&r, 2, pids);
    double t = now_s();
    cr_assert_eq(kill(r.pid, sig), 0);
    finish_run(&r, 6);
    double took = r.t_end - t;
    cr_assert(took > 1.5 && took < 4.0, "ringrun stopped %.2f s after signal %d (grace: 2 s); stderr:\n%s", took, sig, r.b[1].d);
    check_died_of(&r, sig);
    assert_stderr_has(&r, "ringrun: ranks 0 1 still running");
    assert_all_dead(pids, 2);
    free_run(&r);
}

RR_TEST(sigkill_after_grace_when_a_forwarded_sigterm_is_ignored) { forwarded_signal_ignored(SIGTERM); }

RR_TEST(sigkill_after_grace_when_a_forwarded_sigint_is_ignored) { forwarded_signal_ignored(SIGINT); }
