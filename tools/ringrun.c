/* ringrun: start N local ranks of a program with the RING_* bootstrap environment, prefix their
 * output lines with "[rank] ", and tear the whole job down when one rank fails, on a timeout, or
 * on Ctrl-C.
 *
 *   ringrun -n N [--host H] [--port P] [--no-prefix] [--timeout SEC] [--bind-to core|none]
 *           [-x NAME=VALUE]... [--] prog args...
 *
 * Binding: like mpirun, ranks are bound one per core (in the order of ringrun's own CPU set)
 * when there are at least as many cores as ranks. Unbound, two ranks that ping-pong small
 * messages are sometimes placed on one core by the scheduler and every exchange then pays a
 * context switch: on our 2-core machine a 2-rank 4-byte all-reduce alternated between 9 and
 * 20 us from run to run unbound, and stayed at 8.5 us bound.
 *
 * Teardown (docs/launch.md): after a rank failed, the others have FAIL_GRACE_S to end by
 * themselves before SIGTERM; a signal is forwarded once, unless the terminal sent it to the
 * whole foreground group and so to the ranks already, and ranks still running KILL_GRACE_S
 * later are killed; SIGUSR1 and SIGUSR2 are only passed on (Slurm's --signal=USR1@T
 * checkpoint warning); SIGTSTP and SIGCONT stop and resume the ranks with ringrun; the
 * timeout and the kill after the grace period are served even inside a write to a stalled
 * reader; ringrun is the subreaper of what the ranks start, so a torn-down job leaves nothing
 * running.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/random.h>
#endif

#define MAX_RANKS 65536
#define READ_CHUNK 65536
/* A line longer than this is written out in pieces; the rank then owns the stream until its
 * newline, so other ranks' lines still never land inside it and memory stays bounded. */
#define LINE_FLUSH_LIMIT (1u << 20)
#define KILL_GRACE_S 2.0
/* After a rank failed, how long the others have to end by themselves before they get SIGTERM: a
 * ringcomm rank hears of a peer's failure within milliseconds and returns an error naming it,
 * which the user should see. Terminated at once, half of an 8-rank job died before printing
 * theirs (a review's runs on 2026-12-06). */
#define FAIL_GRACE_S 1.0
/* How long to keep reading after every rank has exited: a background grandchild can hold a pipe
 * open forever, and that must not keep ringrun alive. */
#define DRAIN_S 1.0
#define OUT_IOV 256

enum { S_OUT = 0, S_ERR = 1 };
enum cause { C_NONE, C_RANK, C_TIMEOUT, C_SIGNAL };

struct obuf {
    char *data;
    size_t start, len, cap;
    int fd; /* read end, -1 once closed */
    bool eof;
    bool midline; /* part of the current line (with its prefix) is already written */
};

struct rank {
    pid_t pid;
    bool running;
    char prefix[24];
    size_t prefix_len;
    struct obuf b[2];
};

static struct rank *ranks;
static int nranks;
static bool use_prefix = true;
static int owner[2] = {-1, -1};
static bool out_broken[2];
static struct iovec outq[2][OUT_IOV];
static int outq_n[2];
static int nopen; /* pipe read ends still open */
static int nrunning;

/* The job's state: the main loop's, and service()'s (which also runs inside a blocked write). */
static enum cause cause = C_NONE;
static int exit_code, cause_sig, nsig;
static double timeout_s, t_timeout, t_kill, t_term; /* t_term: SIGTERM after a failed rank */
/* Once teardown began: what processes the ranks leave behind get when ringrun adopts them
 * (PR_SET_CHILD_SUBREAPER). 0: nothing. */
static int orphan_sig;
/* Messages from service(), printed by the main loop: service() may run inside a write. */
static char notes[2048];
static size_t notes_len;

static int sig_pipe[2] = {-1, -1};
/* Forwarded to the ranks and the end of the job. */
static const int fwd_sigs[] = {SIGINT, SIGTERM, SIGHUP};
/* Passed on to the ranks and nothing more: the job goes on (Slurm's --signal=USR1@60 warning
 * before the time limit, for a checkpoint). Their default action would kill ringrun, and the
 * ranks with it through PR_SET_PDEATHSIG. */
static const int pass_sigs[] = {SIGUSR1, SIGUSR2};
/* Job control, as mpirun forwards it: SIGTSTP stops the ranks (SIGSTOP, which they cannot
 * ignore; a terminal's Ctrl-Z reached them already) and then ringrun; SIGCONT resumes them. */
static const int job_sigs[] = {SIGTSTP, SIGCONT};
static bool sig_installed[NSIG];
static struct sigaction orig_sigpipe;
static sigset_t orig_mask;
static struct rlimit orig_nofile;
static bool nofile_raised;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("ringrun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fputs("usage: ringrun -n N [options] [--] program [args...]\n"
          "Start N local ranks of program with RING_RANK, RING_NRANKS, RING_ROOT, RING_SECRET,\n"
          "RING_LOCAL_RANK and RING_LOCAL_SIZE set.\n"
          "  -n N             number of ranks\n"
          "  --host H         root host for RING_ROOT (default 127.0.0.1)\n"
          "  --port P         root port (default: a free port on H)\n"
          "  --no-prefix      do not prefix output lines with \"[rank] \"\n"
          "  --timeout SEC    kill all ranks and fail after SEC seconds\n"
          "  --bind-to W      core: bind rank r to the r-th CPU ringrun may use (the default\n"
          "                   when N <= that many CPUs); none: leave placement to the kernel\n"
          "  -x NAME=VALUE    extra environment variable for the ranks (repeatable)\n"
          "  -h, --help       show this help\n"
          "RING_SECRET is kept from ringrun's environment when set, else freshly generated.\n"
          "Exit status: 0 if every rank exits 0; else the first failing rank's status\n"
          "(128+signal if it was killed), 124 on timeout.\n",
          f);
}

/* ---------- output ---------- */

static void service(void);
static double next_timer(void);

/* How much one write may carry: a pipe, terminal or socket that poll() called writable takes
 * PIPE_BUF bytes without blocking; a file takes anything. */
static size_t write_limit(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) ? SIZE_MAX : PIPE_BUF;
}

/* Writes everything, so that a slow reader of our stdout throttles the ranks instead of losing
 * lines. It waits in poll(), not in a blocking write, and serves signals and timers meanwhile:
 * a reader that stalls (a pager left unscrolled) must not hold up --timeout or Ctrl-C. */
static void writev_all(int s, struct iovec *iov, int n)
{
    int fd = s == S_OUT ? STDOUT_FILENO : STDERR_FILENO;
    static size_t limit[2];
    if (!limit[s]) limit[s] = write_limit(fd);
    while (n > 0 && !out_broken[s]) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLOUT}, {.fd = sig_pipe[0], .events = POLLIN}};
        double next = next_timer(), d = next ? (next - now_s()) * 1000.0 + 1.0 : -1.0;
        int wait_ms = !next ? -1 : d < 0 ? 0 : d > INT_MAX ? INT_MAX : (int)d;
        int pr = poll(p, sig_pipe[0] >= 0 ? 2 : 1, wait_ms);
        service();
        if (pr <= 0 || !p[0].revents) continue;
        /* Cut the batch at the limit; the iovec cut short gets its rest back after the write. */
        int k = 0;
        size_t total = 0, cut_len = 0;
        while (k < n && k < IOV_MAX && total < limit[s]) {
            if (iov[k].iov_len > limit[s] - total) {
                cut_len = iov[k].iov_len;
                iov[k].iov_len = limit[s] - total;
            }
            total += iov[k++].iov_len;
        }
        ssize_t w = writev(fd, iov, k);
        if (cut_len) iov[k - 1].iov_len = cut_len;
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            /* Our reader went away (EPIPE): keep draining the ranks so they do not block. */
            out_broken[s] = true;
            return;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
}

static void out_flush(int s)
{
    writev_all(s, outq[s], outq_n[s]);
    outq_n[s] = 0;
}

static void out_add(int s, const void *p, size_t len)
{
    if (!len) return;
    if (outq_n[s] == OUT_IOV) out_flush(s);
    outq[s][outq_n[s]++] = (struct iovec){.iov_base = (void *)p, .iov_len = len};
}

static void out_piece(struct rank *rk, int s, const char *p, size_t len, bool newline)
{
    struct obuf *b = &rk->b[s];
    if (use_prefix && !b->midline) out_add(s, rk->prefix, rk->prefix_len);
    out_add(s, p, len);
    if (newline) out_add(s, "\n", 1);
}

/* Writes the complete lines rank r has buffered on stream s, and its partial line if it is too long
 * or the stream has ended; returns without writing while another rank owns the stream. */
static void emit_rank(int r, int s)
{
    struct rank *rk = &ranks[r];
    struct obuf *b = &rk->b[s];
    if (owner[s] >= 0 && owner[s] != r) return;
    while (b->len > 0) {
        char *p = b->data + b->start;
        char *nl = memchr(p, '\n', b->len);
        if (nl) {
            size_t n = (size_t)(nl - p) + 1;
            out_piece(rk, s, p, n, false);
            b->start += n;
            b->len -= n;
            b->midline = false;
            owner[s] = -1;
            continue;
        }
        if (b->len < LINE_FLUSH_LIMIT && !b->eof) break;
        out_piece(rk, s, p, b->len, false);
        b->start += b->len;
        b->len = 0;
        b->midline = true;
        owner[s] = r;
    }
    if (b->eof && b->midline) {
        /* Terminate the unfinished last line so the next rank's prefix starts a line of its own. */
        out_add(s, "\n", 1);
        b->midline = false;
        owner[s] = -1;
    }
    if (b->len == 0) b->start = 0;
}

static void pump(int s)
{
    if (owner[s] >= 0) emit_rank(owner[s], s);
    for (int r = 0; r < nranks && owner[s] < 0; r++) emit_rank(r, s);
    /* Flush before returning: the queued iovecs point into rank buffers that a later read may move. */
    out_flush(s);
}

/* ringrun's own messages must not land inside a rank's long line, so end that line first; the
 * rank's remainder then gets a fresh prefix. */
static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...)
{
    char line[512];
    int o = owner[S_ERR];
    if (o >= 0) {
        out_add(S_ERR, "\n", 1);
        out_flush(S_ERR);
        ranks[o].b[S_ERR].midline = false;
        owner[S_ERR] = -1;
    }
    int n = snprintf(line, sizeof line, "ringrun: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    struct iovec iov = {.iov_base = line, .iov_len = (size_t)n};
    writev_all(S_ERR, &iov, 1);
    if (o >= 0) pump(S_ERR);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    if (notes_len + 2 > sizeof notes) return;
    size_t avail = sizeof notes - notes_len - 1; /* one byte stays for the newline */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(notes + notes_len, avail, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    notes_len += (size_t)n < avail ? (size_t)n : avail - 1;
    notes[notes_len++] = '\n';
}

static void flush_notes(void)
{
    while (notes_len) {
        char copy[sizeof notes];
        size_t len = notes_len;
        memcpy(copy, notes, len);
        notes_len = 0; /* msg's write may run service(), which may add more */
        for (char *p = copy, *end = copy + len; p < end;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            msg("%.*s", (int)(nl - p), p);
            p = nl + 1;
        }
    }
}

static void close_stream(struct obuf *b)
{
    if (b->fd >= 0) {
        close(b->fd);
        b->fd = -1;
        nopen--;
    }
    b->eof = true;
}

/* One read of rank r's stream s: above 0 bytes came, 0 the stream ended, below 0 nothing now. */
static ssize_t read_stream(int r, int s)
{
    struct obuf *b = &ranks[r].b[s];
    if (b->cap - (b->start + b->len) < READ_CHUNK) {
        if (b->start > 0 && b->start >= b->len) {
            memmove(b->data, b->data + b->start, b->len);
            b->start = 0;
        }
        if (b->cap - (b->start + b->len) < READ_CHUNK) {
            size_t ncap = b->cap ? b->cap * 2 : 2 * READ_CHUNK;
            while (ncap - (b->start + b->len) < READ_CHUNK) ncap *= 2;
            char *nd = realloc(b->data, ncap);
            if (!nd) die("out of memory buffering rank %d output", r);
            b->data = nd;
            b->cap = ncap;
        }
    }
    ssize_t n = read(b->fd, b->data + b->start + b->len, b->cap - (b->start + b->len));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
    if (n <= 0) {
        close_stream(b);
        n = 0;
    } else {
        b->len += (size_t)n;
    }
    pump(s);
    return n;
}

/* What a rank that ended had written and not yet been read (a rank that could not exec says
 * why there): printed before ringrun's note of its end, which otherwise came first. A bounded
 * number of reads, since what it started may still be writing. */
static void drain_rank(int r)
{
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 64 && ranks[r].b[s].fd >= 0 && read_stream(r, s) > 0; k++) {}
}

/* ---------- signals ---------- */

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return strsignal(sig);
    }
}

/* SIGCONTs received, and their count when the last SIGTSTP came: a SIGCONT sent right after a
 * SIGTSTP, before the main loop got to stop the job, must cancel the stop, not be used up
 * before it and leave the job stopped. */
static volatile sig_atomic_t conts, conts_at_tstp;

/* The byte is the signal number, with 0x80 when the kernel sent it (SI_KERNEL): a terminal's
 * Ctrl-C, quit or hangup, which went to its whole foreground process group. */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    if (sig == SIGCONT) conts = conts + 1;
    if (sig == SIGTSTP) conts_at_tstp = conts;
    unsigned char c = (unsigned char)sig;
    if (si && si->si_code == SI_KERNEL) c |= 0x80;
    /* A full self-pipe already wakes the loop; dropping a byte then loses nothing that matters. */
    ssize_t w = write(sig_pipe[1], &c, 1);
    (void)w;
    errno = saved;
}

static void install_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    int handled[sizeof fwd_sigs / sizeof fwd_sigs[0] + sizeof pass_sigs / sizeof pass_sigs[0] +
                sizeof job_sigs / sizeof job_sigs[0]];
    size_t nhandled = 0;
    for (size_t i = 0; i < sizeof fwd_sigs / sizeof fwd_sigs[0]; i++) handled[nhandled++] = fwd_sigs[i];
    for (size_t i = 0; i < sizeof pass_sigs / sizeof pass_sigs[0]; i++) handled[nhandled++] = pass_sigs[i];
    for (size_t i = 0; i < sizeof job_sigs / sizeof job_sigs[0]; i++) handled[nhandled++] = job_sigs[i];
    for (size_t i = 0; i < nhandled; i++) {
        struct sigaction old;
        sigaction(handled[i], NULL, &old);
        /* Honour nohup and background shells: a signal ignored at startup stays ignored, for the ranks too. */
        if (old.sa_handler == SIG_IGN) continue;
        sigaction(handled[i], &sa, NULL);
        sig_installed[handled[i]] = true;
    }
    sa.sa_flags = SA_RESTART | SA_SIGINFO | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sig_installed[SIGCHLD] = true;

    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &orig_sigpipe);

    sigprocmask(SIG_SETMASK, NULL, &orig_mask);
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, SIGCHLD);
    for (size_t i = 0; i < nhandled; i++) sigaddset(&un, handled[i]);
    sigprocmask(SIG_UNBLOCK, &un, NULL);
}

/* ---------- setup ---------- */

static void make_secret(char out[33])
{
    unsigned char raw[16];
    size_t got = 0;
#ifdef __linux__
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        got += (size_t)n;
    }
#endif
    if (got < sizeof raw) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("cannot open /dev/urandom: %s", strerror(errno));
        got = 0;
        while (got < sizeof raw) {
            ssize_t n = read(fd, raw + got, sizeof raw - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) die("cannot read /dev/urandom");
            got += (size_t)n;
        }
        close(fd);
    }
    for (size_t i = 0; i < sizeof raw; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

/* Binds a TCP socket of the family of ai to `port` (0: the kernel picks) and returns the port
 * bound, or -1 with *err set. */
static int try_port(const struct addrinfo *ai, int port, int *err)
{
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    socklen_t sl = (socklen_t)ai->ai_addrlen;
    int got = -1;
    if (bind(fd, (struct sockaddr *)&ss, sl) == 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        got = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
    else *err = errno;
    close(fd);
    return got;
}

/* A port that is free now, below the kernel's ephemeral range where it can: a port from that
 * range can be handed to some outgoing connection (the ranks' own, connecting to the root)
 * between this check and rank 0's bind. A port outside it can still be taken by another
 * program meanwhile, the race every launcher that picks ports accepts; rank 0 then fails
 * with "cannot bind" and the port, and --port chooses another. */
static int pick_port(const char *host)
{
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, "0", &hints, &res);
    if (rc != 0) die("cannot resolve --host %s: %s", host, gai_strerror(rc));
    int eph_lo = 32768, eph_hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &eph_lo, &eph_hi) != 2) eph_lo = 32768;
        fclose(f);
    }
    const int lo = 10000, hi = eph_lo - 1; /* above the usual service ports */
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    int port = -1, err = 0;
    for (int tries = 0; hi - lo >= 1000 && tries < 64 && port < 0; tries++) {
        int p = lo + (int)(rand_r(&seed) % (unsigned)(hi - lo + 1));
        for (ai = res; ai && port < 0; ai = ai->ai_next) port = try_port(ai, p, &err);
    }
    for (ai = res; ai && port < 0; ai = ai->ai_next) port = try_port(ai, 0, &err);
    freeaddrinfo(res);
    if (port <= 0) die("cannot pick a free port on %s: %s (pass --port)", host, strerror(err ? err : EADDRNOTAVAIL));
    return port;
}

static long parse_long(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) die("%s: '%s' is not an integer in [%ld, %ld]", what, s, lo, hi);
    return v;
}

/* A launcher started with a closed stdio fd would hand that number to a pipe, and the dup2 into
 * the rank's stdio would then clobber it. */
static void ensure_stdio(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1) continue;
        int nf = open("/dev/null", O_RDWR);
        if (nf >= 0 && nf != fd) close(nf);
    }
}

/* Two pipes per rank: large jobs exceed the usual soft limit of 1024 descriptors. */
/* Twice what the ranks' pipes take (two per rank stay open here), up to the hard limit. Below
 * what they take, the job is refused before the first fork, rather than torn down when a pipe
 * fails thousands of ranks in. */
static void raise_nofile(void)
{
    if (getrlimit(RLIMIT_NOFILE, &orig_nofile) != 0) return;
    const rlim_t need = (rlim_t)nranks * 2 + 32, want = 2 * need;
    rlim_t have = orig_nofile.rlim_cur;
    if (have != RLIM_INFINITY && have < want) {
        struct rlimit nl = orig_nofile;
        nl.rlim_cur = (orig_nofile.rlim_max == RLIM_INFINITY || orig_nofile.rlim_max > want) ? want : orig_nofile.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &nl) == 0) nofile_raised = true, have = nl.rlim_cur;
    }
    if (have != RLIM_INFINITY && have < need)
        die("-n %d needs about %llu open files here, and the limit is %llu (raise it: ulimit -n)", nranks,
            (unsigned long long)need, (unsigned long long)have);
}

/* ---------- ranks ---------- */

struct launch {
    char **argv;
    char **xenv;
    int nxenv;
    const char *root;
    const char *secret;
    int devnull;
    int bind;      /* bind rank r to cpus[r] */
    int *cpus;     /* ringrun's allowed CPUs, in order */
};

static void set_env_int(const char *name, long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    setenv(name, buf, 1);
}

static void __attribute__((noreturn)) child_exec(const struct launch *L, int r, int out_w, int err_w, pid_t parent)
{
    /* The rank gets the signal state ringrun itself started with, not ringrun's handlers. */
    for (int s = 1; s < NSIG; s++)
        if (sig_installed[s]) signal(s, SIG_DFL);
    sigaction(SIGPIPE, &orig_sigpipe, NULL);
    if (nofile_raised) setrlimit(RLIMIT_NOFILE, &orig_nofile);
#ifdef __linux__
    /* ringrun killed with SIGKILL cannot tear the job down itself; without this the ranks would
     * linger holding ports and GPUs. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
#else
    (void)parent;
#endif
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);

    /* Only rank 0 gets the terminal's stdin: several ranks reading one tty would steal each
     * other's input. */
    if ((r != 0 && dup2(L->devnull, STDIN_FILENO) < 0) || dup2(out_w, STDOUT_FILENO) < 0 ||
        dup2(err_w, STDERR_FILENO) < 0)
        _exit(127);

    if (L->bind) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(L->cpus[r], &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            dprintf(STDERR_FILENO, "ringrun: rank %d: cannot bind to CPU %d: %s\n", r, L->cpus[r], strerror(errno));
    }
    set_env_int("RING_RANK", r);
    set_env_int("RING_NRANKS", nranks);
    set_env_int("RING_LOCAL_RANK", r);
    set_env_int("RING_LOCAL_SIZE", nranks);
    setenv("RING_ROOT", L->root, 1);
    setenv("RING_SECRET", L->secret, 1);
    /* -x comes last so an explicit request wins over ringrun's defaults. */
    for (int i = 0; i < L->nxenv; i++) putenv(L->xenv[i]);

    execvp(L->argv[0], L->argv);
    int e = errno;
    dprintf(STDERR_FILENO, "ringrun: cannot execute '%s': %s\n", L->argv[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
}

/* from_tty: the terminal sent sig to its foreground process group, which holds ringrun and so
 * the ranks (and what they started) too, unless one moved to a group of its own: a second copy
 * would make one Ctrl-C look like two to a program that treats the second as "force quit". */
static bool skip_for_tty(pid_t pid, bool from_tty) { return from_tty && getpgid(pid) == getpgrp(); }

/* Processes the ranks started and left behind: ringrun is their subreaper, so they are its
 * children once their parent died (a rank that is a shell script, killed, leaves its program). */
static int signal_orphans(int sig, bool from_tty)
{
    int n = 0;
#ifdef __linux__
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        int r;
        for (r = 0; r < nranks && ranks[r].pid != (pid_t)pid; r++) {}
        if (r < nranks || skip_for_tty((pid_t)pid, from_tty)) continue;
        if (kill((pid_t)pid, sig) == 0) n++;
    }
    fclose(f);
#else
    (void)sig;
    (void)from_tty;
#endif
    return n;
}

static void signal_job(int sig, bool from_tty)
{
    for (int r = 0; r < nranks; r++)
        if (ranks[r].running && !skip_for_tty(ranks[r].pid, from_tty)) kill(ranks[r].pid, sig);
    signal_orphans(sig, from_tty);
}

static bool is_pass_sig(int sig)
{
    for (size_t i = 0; i < sizeof pass_sigs / sizeof pass_sigs[0]; i++)
        if (pass_sigs[i] == sig) return true;
    return false;
}

/* SIGTSTP: the ranks stop, then ringrun, until a SIGCONT; the time stopped does not count
 * against --timeout or the grace period. The ranks' RING_TIMEOUT_MS clocks run on: a stop
 * longer than that ends a collective in progress with a timeout once they resume. ringrun
 * stops even in an orphaned process group, where the kernel would drop a SIGTSTP's default
 * stop: it was asked to by a kill, which a SIGCONT undoes. */
static void stop_job(bool tty)
{
    if (conts != conts_at_tstp) return; /* resumed already */
    signal_job(SIGSTOP, tty);
    const double t0 = now_s();
    if (conts == conts_at_tstp) raise(SIGSTOP);
    const double stopped = now_s() - t0;
    signal_job(SIGCONT, false);
    if (t_timeout) t_timeout += stopped;
    if (t_kill) t_kill += stopped;
    if (t_term) t_term += stopped;
    note("stopped by SIGTSTP for %.1f s, with the ranks; resumed", stopped);
}

/* Signals ringrun got, in order. SIGUSR1/SIGUSR2 are passed to the ranks and change nothing
 * else; SIGTSTP and SIGCONT stop and resume the job. Of the others, the first is forwarded
 * (unless the terminal already sent it to the ranks), arms the kill after the grace period
 * and, if nothing else failed first, becomes the job's end; a second kills. */
static void take_signals(void)
{
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(sig_pipe[0], sigs, sizeof sigs)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            int sig = sigs[i] & 0x7f;
            bool tty = sigs[i] & 0x80;
            if (sig == SIGCHLD) continue;
            if (sig == SIGTSTP) {
                stop_job(tty);
                continue;
            }
            if (sig == SIGCONT) {
                signal_job(SIGCONT, false);
                continue;
            }
            if (is_pass_sig(sig)) {
                /* The ranks only: what they left behind did not ask for it, and may die of it. */
                for (int r = 0; r < nranks; r++)
                    if (ranks[r].running && !skip_for_tty(ranks[r].pid, tty)) kill(ranks[r].pid, sig);
                continue;
            }
            if (++nsig > 1) {
                signal_job(SIGKILL, false);
                orphan_sig = SIGKILL;
                continue;
            }
            if (cause == C_NONE) {
                cause = C_SIGNAL;
                cause_sig = sig;
            }
            if (tty) {
                note("got %s from the terminal, which sent it to the ranks too (killing them in %g s, or at once if sent again)",
                     sig_name(sig), KILL_GRACE_S);
            } else {
                note("got %s; forwarding it to the ranks (killing them in %g s, or at once if sent again)", sig_name(sig),
                     KILL_GRACE_S);
                if (!orphan_sig) orphan_sig = sig;
            }
            signal_job(sig, tty);
            /* Ranks that ignore it must not keep the job (and ringrun) alive forever. */
            if (!t_kill && nrunning > 0) t_kill = now_s() + KILL_GRACE_S;
        }
    }
}

/* The earliest of the timeout and the kill after the grace period (0: none). */
static double next_timer(void)
{
    double next = t_timeout;
    if (t_kill && (!next || t_kill < next)) next = t_kill;
    if (t_term && (!next || t_term < next)) next = t_term;
    return next;
}

/* SIGTERM to the job, and SIGKILL KILL_GRACE_S later unless a kill is already set. */
static void terminate_job(double now)
{
    signal_job(SIGTERM, false);
    if (orphan_sig != SIGKILL) orphan_sig = SIGTERM;
    if (!t_kill) t_kill = now + KILL_GRACE_S;
}

static void check_timers(double now)
{
    if (t_timeout && now >= t_timeout) {
        t_timeout = 0;
        /* Ranks that all finished in time are not a timeout, even if a leftover grandchild still
         * holds a pipe. Ranks still running after a forwarded signal are stopped all the same. */
        if (nrunning > 0 && (cause == C_NONE || cause == C_SIGNAL)) {
            if (cause == C_NONE) cause = C_TIMEOUT;
            note("timeout after %g s; terminating %d running rank%s", timeout_s, nrunning, nrunning == 1 ? "" : "s");
            terminate_job(now);
        }
    }
    if (t_term && now >= t_term) {
        t_term = 0;
        if (nrunning > 0 && !t_kill) terminate_job(now);
    }
    if (t_kill && now >= t_kill) {
        t_kill = 0;
        if (nrunning > 0) {
            /* Name them (the first few): they are the ones that ignore or hang in teardown. */
            char list[160];
            size_t len = 0;
            int shown = 0;
            list[0] = '\0';
            for (int r = 0; r < nranks; r++) {
                if (!ranks[r].running) continue;
                if (shown == 16 || len + 16 >= sizeof list) {
                    snprintf(list + len, sizeof list - len, " ...");
                    break;
                }
                len += (size_t)snprintf(list + len, sizeof list - len, " %d", r);
                shown++;
            }
            note("rank%s%s still running %g s into teardown; killing %s (SIGKILL)", nrunning == 1 ? "" : "s", list,
                 KILL_GRACE_S, nrunning == 1 ? "it" : "them");
        }
        signal_job(SIGKILL, false);
        orphan_sig = SIGKILL;
    }
}

/* What the main loop does between reads, for waits elsewhere (a blocked write). */
static void service(void)
{
    take_signals();
    check_timers(now_s());
}

static void spawn_all(const struct launch *L)
{
    sigset_t all, old;
    sigfillset(&all);
    pid_t self = getpid();
    for (int r = 0; r < nranks; r++) {
        struct rank *rk = &ranks[r];
        int po[2], pe[2];
        if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
            msg("pipe for rank %d: %s", r, strerror(errno));
            signal_job(SIGKILL, false);
            exit(1);
        }
        /* Blocked across fork so that a signal landing before exec cannot run our handler in the
         * child and write into our self-pipe. */
        sigprocmask(SIG_BLOCK, &all, &old);
        pid_t pid = fork();
        if (pid == 0) child_exec(L, r, po[1], pe[1], self);
        int fork_err = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(po[1]);
        close(pe[1]);
        if (pid < 0) {
            close(po[0]);
            close(pe[0]);
            msg("fork for rank %d: %s", r, strerror(fork_err));
            signal_job(SIGKILL, false);
            exit(1);
        }
        rk->pid = pid;
        rk->running = true;
        nrunning++;
        rk->b[S_OUT].fd = po[0];
        rk->b[S_ERR].fd = pe[0];
        fcntl(po[0], F_SETFL, fcntl(po[0], F_GETFL) | O_NONBLOCK);
        fcntl(pe[0], F_SETFL, fcntl(pe[0], F_GETFL) | O_NONBLOCK);
        nopen += 2;
    }
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    long port = 0;
    double timeout = 0;
    int bind_mode = -1; /* -1: core when the ranks fit on the cores */
    char **xenv = calloc((size_t)argc + 1, sizeof *xenv);
    int nxenv = 0;
    if (!xenv) die("out of memory");
    nranks = 0;

    static const struct option longopts[] = {
        {"host", required_argument, NULL, 'H'},   {"port", required_argument, NULL, 'P'},
        {"no-prefix", no_argument, NULL, 'N'},    {"timeout", required_argument, NULL, 'T'},
        {"bind-to", required_argument, NULL, 'B'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    /* '+' stops at the program name, so the program's own options are left alone. */
    while ((c = getopt_long(argc, argv, "+n:x:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            /* mpirun's spelling: getopt reads "-np 4" as -n "p", then "4" as the program. */
            if (!strcmp(optarg, "p")) die("-np: ringrun's option is -n (ringrun -n 4 prog)");
            nranks = (int)parse_long(optarg, "-n", 1, MAX_RANKS);
            break;
        case 'H':
            if (!*optarg) die("--host: empty host");
            host = optarg;
            break;
        case 'P': port = parse_long(optarg, "--port", 1, 65535); break;
        case 'N': use_prefix = false; break;
        case 'B':
            if (!strcmp(optarg, "core")) bind_mode = 1;
            else if (!strcmp(optarg, "none")) bind_mode = 0;
            else die("--bind-to: expected core or none, got '%s'", optarg);
            break;
        case 'T': {
            char *end;
            errno = 0;
            timeout = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(timeout > 0) || timeout > 1e9)
                die("--timeout: '%s' is not a positive number of seconds", optarg);
            break;
        }
        case 'x': {
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg) die("-x: expected NAME=VALUE, got '%s'", optarg);
            xenv[nxenv++] = optarg;
            break;
        }
        case 'h':
            usage(stdout);
            free(xenv);
            return 0;
        default:
            usage(stderr);
            free(xenv);
            return 2;
        }
    }
    if (nranks <= 0) {
        fputs("ringrun: -n N is required\n", stderr);
        usage(stderr);
        free(xenv);
        return 2;
    }
    if (optind >= argc) {
        fputs("ringrun: no program given\n", stderr);
        usage(stderr);
        free(xenv);
        return 2;
    }

    ensure_stdio();

    /* Brackets belong to RING_ROOT's syntax, not to the address that bind() sees. */
    char hostbuf[256];
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        if (hl - 2 >= sizeof hostbuf) die("--host: too long");
        memcpy(hostbuf, host + 1, hl - 2);
        hostbuf[hl - 2] = '\0';
    } else {
        if (hl >= sizeof hostbuf) die("--host: too long");
        memcpy(hostbuf, host, hl + 1);
    }
    if (!port) port = pick_port(hostbuf);
    char root[300];
    snprintf(root, sizeof root, strchr(hostbuf, ':') ? "[%s]:%ld" : "%s:%ld", hostbuf, port);

    char secret_buf[33];
    const char *secret = getenv("RING_SECRET");
    if (!secret || !*secret) {
        make_secret(secret_buf);
        secret = secret_buf;
    }

    ranks = calloc((size_t)nranks, sizeof *ranks);
    if (!ranks) die("out of memory");
    for (int r = 0; r < nranks; r++) {
        snprintf(ranks[r].prefix, sizeof ranks[r].prefix, "[%d] ", r);
        ranks[r].prefix_len = strlen(ranks[r].prefix);
        ranks[r].b[S_OUT].fd = ranks[r].b[S_ERR].fd = -1;
    }

    raise_nofile();
    install_signals();
#ifdef __linux__
    /* Processes a rank starts become ringrun's when the rank dies, so that teardown reaches
     * them too (a rank that is a shell script would otherwise leave its program running). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) die("cannot open /dev/null: %s", strerror(errno));

    struct launch L = {.argv = argv + optind, .xenv = xenv, .nxenv = nxenv, .root = root, .secret = secret,
                       .devnull = devnull};
    cpu_set_t allowed;
    int ncpus = 0;
    if (bind_mode != 0 && sched_getaffinity(0, sizeof allowed, &allowed) == 0) ncpus = CPU_COUNT(&allowed);
    if (bind_mode == 1 && ncpus < nranks)
        die("--bind-to core: %d ranks but only %d CPUs available to ringrun", nranks, ncpus);
    if (bind_mode != 0 && ncpus >= nranks) {
        L.cpus = calloc((size_t)nranks, sizeof *L.cpus);
        if (!L.cpus) die("out of memory");
        for (int cpu = 0, k = 0; k < nranks && cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &allowed)) L.cpus[k++] = cpu;
        L.bind = 1;
    }
    spawn_all(&L);
    close(devnull);
    free(L.cpus);

    struct pollfd *pfd = calloc((size_t)nranks * 2 + 1, sizeof *pfd);
    int *pfd_rs = calloc((size_t)nranks * 2 + 1, sizeof *pfd_rs);
    if (!pfd || !pfd_rs) die("out of memory");

    timeout_s = timeout;
    double t_drain = 0;
    t_timeout = timeout > 0 ? now_s() + timeout : 0;

    while (nrunning > 0 || nopen > 0) {
        take_signals();
        /* Reap first and unconditionally: the SIGCHLD byte is only a wake-up, one may stand for many exits. */
        int st;
        pid_t pid;
        bool reaped = false;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            reaped = true;
            int r;
            for (r = 0; r < nranks && ranks[r].pid != pid; r++) {}
            if (r == nranks || !ranks[r].running) continue;
            ranks[r].running = false;
            nrunning--;
            bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
            /* A signal that reached ringrun and the rank at once (the terminal's Ctrl-C) was
             * handled before waitpid returned: take it first, so that the rank's death is its
             * consequence and ringrun ends by that signal. */
            if (!ok) take_signals();
            if (ok || cause != C_NONE) continue; /* failures after teardown began are its consequences */
            cause = C_RANK;
            drain_rank(r);
            if (WIFEXITED(st)) {
                exit_code = WEXITSTATUS(st);
                note("rank %d exited with status %d", r, exit_code);
            } else {
                exit_code = 128 + WTERMSIG(st);
                note("rank %d killed by signal %d (%s)", r, WTERMSIG(st), strsignal(WTERMSIG(st)));
            }
            /* The others first get FAIL_GRACE_S to report it themselves (check_timers); what the
             * failed rank left behind is not a rank with something to say. */
            t_term = now_s() + FAIL_GRACE_S;
            if (orphan_sig != SIGKILL) orphan_sig = SIGTERM;
        }
        /* A rank that died may have left processes behind, now ringrun's children. */
        if (reaped && orphan_sig) signal_orphans(orphan_sig, false);

        double now = now_s();
        check_timers(now);
        flush_notes();
        if (nrunning == 0) {
            if (nopen == 0) break; /* every pipe is at its end already: nothing to drain */
            if (!t_drain) t_drain = now + DRAIN_S;
            if (now >= t_drain) break;
        }

        double next = next_timer();
        if (t_drain && (!next || t_drain < next)) next = t_drain;
        int wait_ms = -1;
        if (next) {
            double d = (next - now) * 1000.0 + 1.0;
            wait_ms = d < 0 ? 0 : d > INT_MAX ? INT_MAX : (int)d;
        }

        int np = 0;
        pfd[np] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
        pfd_rs[np++] = -1;
        for (int r = 0; r < nranks; r++)
            for (int s = 0; s < 2; s++)
                if (ranks[r].b[s].fd >= 0) {
                    pfd[np] = (struct pollfd){.fd = ranks[r].b[s].fd, .events = POLLIN};
                    pfd_rs[np++] = r * 2 + s;
                }
        int pr = poll(pfd, (nfds_t)np, wait_ms);
        if (pr < 0) {
            if (errno == EINTR) continue; /* the signal's byte is taken at the top */
            die("poll: %s", strerror(errno));
        }
        for (int i = 1; i < np; i++)
            if (pfd[i].revents) read_stream(pfd_rs[i] / 2, pfd_rs[i] % 2);
    }
    take_signals();
    /* A job torn down leaves nothing running: what the ranks started and left goes too. */
    if (cause != C_NONE) {
        int k = signal_orphans(SIGKILL, false);
        if (k) note("killed %d process%s the ranks had left behind", k, k == 1 ? "" : "es");
    }
    flush_notes();

    for (int r = 0; r < nranks; r++)
        for (int s = 0; s < 2; s++) close_stream(&ranks[r].b[s]);
    pump(S_OUT);
    pump(S_ERR);
    flush_notes();
    for (int r = 0; r < nranks; r++) {
        free(ranks[r].b[S_OUT].data);
        free(ranks[r].b[S_ERR].data);
    }
    free(ranks);
    free(pfd);
    free(pfd_rs);
    free(xenv);

    switch (cause) {
    case C_NONE: return 0;
    case C_RANK: return exit_code;
    case C_TIMEOUT: return 124;
    case C_SIGNAL:
        /* Dying by the same signal lets a calling shell see the interrupt (and stop its loop). */
        fflush(NULL);
        signal(cause_sig, SIG_DFL);
        {
            sigset_t u;
            sigemptyset(&u);
            sigaddset(&u, cause_sig);
            sigprocmask(SIG_UNBLOCK, &u, NULL);
        }
        raise(cause_sig);
        return 128 + cause_sig;
    }
    return 1;
}
