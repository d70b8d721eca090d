/* ringrun_child: the program test_ringrun starts under ringrun. argv[1] picks a behaviour; every
 * rank reads its rank from RING_RANK, so one command line gives each rank its own part.
 *
 *   env [NAME...]         print RING_* (and NAME...) as NAME=value, one per line
 *   lines K               K checkable lines on stdout and K on stderr, each written in pieces
 *   long BYTES K          K lines of BYTES bytes each on stdout
 *   fail R CODE [stubborn] rank R exits CODE after 0.2 s; the others sleep 10 s (stubborn: ignoring SIGTERM)
 *   crash R               rank R kills itself with SIGKILL after 0.2 s; the others sleep 10 s
 *   follow R CODE FILE    rank R writes its pid to FILE and exits CODE after 0.2 s; the others
 *                         wait until that pid is gone, then say so on stderr and exit 6 (as a
 *                         ringcomm rank reports a failed peer)
 *   sleep S               print "ready pid=P", sleep S seconds
 *   nointr S              like sleep, but ignore SIGINT
 *   flood                 print "ready pid=P", then lines on stdout until killed
 *   count S               print "ready pid=P", count SIGINTs; 0.5 s after the first (or after S s)
 *                         print "SIGINTs: N" on stderr and exit 0
 *   partial               "partial-R" on stdout and "epartial-R" on stderr, no newline
 *   fds                   list open descriptors above 2, then "fds done"
 *   stdin                 report what stdin is and how many bytes it held
 *
 * The line format of "lines" and "long" is shared with test_ringrun.c, which regenerates it.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank;

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(99);
        }
        p += w;
        n -= (size_t)w;
    }
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
    write_all(fd, buf, (size_t)n);
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    /* Handlers that ignore a signal must not cut the sleep short. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* The handlers report, so the tests can tell that ringrun (not a timeout) delivered the signal. */
static void on_term_exit(int sig)
{
    const char *m = sig == SIGINT ? "got SIGINT\n" : "got SIGTERM\n";
    write_all(STDERR_FILENO, m, strlen(m));
    _exit(128 + sig);
}

static void on_sig_ignore(int sig)
{
    const char *m = sig == SIGINT ? "got SIGINT (ignoring)\n" : "got SIGTERM (ignoring)\n";
    write_all(STDERR_FILENO, m, strlen(m));
}

static volatile sig_atomic_t nsigint;
static void on_sig_count(int sig)
{
    (void)sig;
    nsigint++;
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static long arg_long(int argc, char **argv, int i)
{
    if (i >= argc) {
        say(STDERR_FILENO, "ringrun_child: %s: missing argument %d\n", argv[1], i - 1);
        exit(98);
    }
    return strtol(argv[i], NULL, 10);
}

/* Line i of rank r on stream s (0 stdout, 1 stderr), without the newline; test_ringrun.c has the
 * same function. */
static size_t make_line(char *buf, int r, int s, long i)
{
    int n = sprintf(buf, "%s r=%d i=%ld ", s ? "err" : "out", r, i);
    size_t fill = (size_t)((i * 37 + r * 11) % 300);
    memset(buf + n, 'a' + (int)((r + i) % 26), fill);
    return (size_t)n + fill;
}

static void lines(long k)
{
    char buf[512];
    for (long i = 0; i < k; i++) {
        for (int s = 0; s < 2; s++) {
            size_t n = make_line(buf, rank, s, i);
            buf[n++] = '\n';
            /* Three writes per line, so ringrun sees lines split across reads and has to join them. */
            size_t a = n / 3, b = 2 * n / 3;
            int fd = s ? STDERR_FILENO : STDOUT_FILENO;
            write_all(fd, buf, a);
            write_all(fd, buf + a, b - a);
            write_all(fd, buf + b, n - b);
        }
    }
}

static void long_lines(long bytes, long k)
{
    char *buf = malloc((size_t)bytes + 1);
    if (!buf) exit(97);
    for (long i = 0; i < k; i++) {
        int h = snprintf(buf, (size_t)bytes + 1, "L r=%d i=%ld ", rank, i);
        memset(buf + h, 'A' + (int)((rank + i) % 26), (size_t)(bytes - h));
        buf[bytes] = '\n';
        /* Small writes interleave in time with the other ranks' output. */
        for (long off = 0; off < bytes + 1; off += 4096) {
            long n = bytes + 1 - off < 4096 ? bytes + 1 - off : 4096;
            write_all(STDOUT_FILENO, buf + off, (size_t)n);
        }
    }
    free(buf);
}

static void list_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        say(STDOUT_FILENO, "fds unavailable\n");
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd <= 2 || fd == dirfd(d)) continue;
        char path[64], target[PATH_MAX];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = '\0';
        say(STDOUT_FILENO, "fd %d -> %s\n", fd, target);
    }
    closedir(d);
    say(STDOUT_FILENO, "fds done\n");
}

int main(int argc, char **argv)
{
    const char *rs = getenv("RING_RANK");
    rank = rs ? atoi(rs) : -1;
    if (argc < 2) {
        say(STDERR_FILENO, "usage: ringrun_child MODE [args...]\n");
        return 98;
    }
    const char *mode = argv[1];

    if (!strcmp(mode, "env")) {
        static const char *names[] = {"RING_RANK", "RING_NRANKS", "RING_ROOT", "RING_SECRET",
                                      "RING_LOCAL_RANK", "RING_LOCAL_SIZE"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *v = getenv(names[i]);
            say(STDOUT_FILENO, v ? "%s=%s\n" : "%s unset\n", names[i], v ? v : "");
        }
        for (int i = 2; i < argc; i++) {
            const char *v = getenv(argv[i]);
            say(STDOUT_FILENO, v ? "%s=%s\n" : "%s unset\n", argv[i], v ? v : "");
        }
    } else if (!strcmp(mode, "cpus")) {
        /* Placement, for --bind-to: how many CPUs this rank may run on, and the first one. */
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
        int first = -1;
        for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
            if (CPU_ISSET(c, &set)) first = c;
        say(STDOUT_FILENO, "NCPUS=%d\nFIRSTCPU=%d\n", CPU_COUNT(&set), first);
    } else if (!strcmp(mode, "lines")) {
        lines(arg_long(argc, argv, 2));
    } else if (!strcmp(mode, "long")) {
        long_lines(arg_long(argc, argv, 2), arg_long(argc, argv, 3));
    } else if (!strcmp(mode, "fail") || !strcmp(mode, "crash")) {
        long r = arg_long(argc, argv, 2);
        if (rank == r) {
            sleep_s(0.2);
            if (!strcmp(mode, "crash")) kill(getpid(), SIGKILL);
            return (int)arg_long(argc, argv, 3);
        }
        handle(SIGTERM, argc > 4 && !strcmp(argv[4], "stubborn") ? on_sig_ignore : on_term_exit);
        say(STDOUT_FILENO, "ready pid=%d\n", (int)getpid());
        sleep_s(10);
    } else if (!strcmp(mode, "follow")) {
        long r = arg_long(argc, argv, 2);
        const char *file = argc > 4 ? argv[4] : "";
        if (rank == r) {
            FILE *f = fopen(file, "w");
            if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) return 97;
            sleep_s(0.2);
            return (int)arg_long(argc, argv, 3);
        }
        handle(SIGTERM, on_term_exit);
        int pid = 0;
        for (int i = 0; i < 1000 && pid <= 0; i++) {
            FILE *f = fopen(file, "r");
            if (!f || fscanf(f, "%d", &pid) != 1) pid = 0;
            if (f) fclose(f);
            if (pid <= 0) sleep_s(0.01);
        }
        while (pid > 0 && !(kill(pid, 0) != 0 && errno == ESRCH)) sleep_s(0.005);
        say(STDERR_FILENO, "rank %d: rank %ld failed\n", rank, r);
        return 6;
    } else if (!strcmp(mode, "sleep") || !strcmp(mode, "nointr")) {
        handle(SIGINT, !strcmp(mode, "nointr") ? on_sig_ignore : on_term_exit);
        handle(SIGTERM, on_term_exit);
        say(STDOUT_FILENO, "ready pid=%d\n", (int)getpid());
        sleep_s((double)arg_long(argc, argv, 2));
    } else if (!strcmp(mode, "flood")) {
        say(STDOUT_FILENO, "ready pid=%d\n", (int)getpid());
        for (long i = 0;; i++) say(STDOUT_FILENO, "flood r=%d i=%ld\n", rank, i);
    } else if (!strcmp(mode, "count")) {
        handle(SIGINT, on_sig_count);
        say(STDOUT_FILENO, "ready pid=%d\n", (int)getpid());
        for (long i = 0, s = arg_long(argc, argv, 2); i < s * 100 && !nsigint; i++) sleep_s(0.01);
        sleep_s(0.5);
        say(STDERR_FILENO, "SIGINTs: %d\n", (int)nsigint);
    } else if (!strcmp(mode, "partial")) {
        say(STDOUT_FILENO, "partial-%d", rank);
        say(STDERR_FILENO, "epartial-%d", rank);
    } else if (!strcmp(mode, "fds")) {
        list_fds();
    } else if (!strcmp(mode, "stdin")) {
        char buf[4096];
        long total = 0;
        ssize_t n;
        while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0) total += n;
        char target[PATH_MAX];
        ssize_t tl = readlink("/proc/self/fd/0", target, sizeof target - 1);
        target[tl < 0 ? 0 : tl] = '\0';
        say(STDOUT_FILENO, "stdin %s bytes=%ld\n", target, total);
    } else {
        say(STDERR_FILENO, "ringrun_child: unknown mode '%s'\n", mode);
        return 98;
    }
    return 0;
}
