/* Log sink: formats one line per call and writes it with a single write(2), so lines from
 * the progress thread and the caller's thread never interleave. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

atomic_int ring__log_level_v = -1;
unsigned ring__log_subsys_v = RING_SUB_ALL;
static int log_fd = 2;
static char log_host[64] = "?";
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static unsigned subsys_bit(const char *s, size_t n)
{
    static const struct { const char *name; unsigned bit; } map[] = {
        {"INIT", RING_SUB_INIT}, {"NET", RING_SUB_NET}, {"COLL", RING_SUB_COLL}, {"ALL", RING_SUB_ALL}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].name) == n && strncasecmp(s, map[i].name, n) == 0) return map[i].bit;
    return 0;
}

/* The mask RING_DEBUG_SUBSYS names; the first name it does not know in bad (empty if none).
 * A list of nothing but unknown names keeps every subsystem: a typo must not silence the log
 * that was asked for. */
static void parse_subsys(const char *v, char *bad, size_t badlen)
{
    unsigned mask = 0;
    while (isspace((unsigned char)*v)) v++; /* " ^NET" */
    int negate = v[0] == '^', known = 0;
    if (negate) v++;
    bad[0] = '\0';
    while (*v) {
        size_t n = strcspn(v, ","), k = n;
        const char *w = v;
        /* "INIT, NET" */
        while (k && isspace((unsigned char)*w)) w++, k--;
        while (k && isspace((unsigned char)w[k - 1])) k--;
        unsigned bit = subsys_bit(w, k);
        if (bit) known = 1;
        else if (k && !bad[0]) snprintf(bad, badlen, "%.*s", (int)k, w);
        mask |= bit;
        v += n;
        if (*v == ',') v++;
    }
    ring__log_subsys_v = negate ? (RING_SUB_ALL & ~mask) : known ? mask : RING_SUB_ALL;
}

/* Every write to the log. A pipe whose reader is gone must not kill the program with SIGPIPE
 * (docs/api.md): block it for this write and take back one this write raised. errno is the
 * caller's. */
static void write_nopipe(const char *buf, size_t len)
{
    int saved = errno;
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    if (write(log_fd, buf, len) < 0 && errno == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
}

/* The log file's name from RING_DEBUG_FILE: %h the host name, %p the pid. A name that does
 * not fit stays unopened (the log stays on stderr and says so): a cut name would be another
 * file. */
static void open_file(const char *pattern)
{
    char path[512];
    size_t o = 0;
    int fits = 1;
    for (const char *p = pattern; *p && fits; p++) {
        int k;
        if (p[0] == '%' && p[1] == 'h') {
            k = snprintf(path + o, sizeof path - o, "%s", log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            k = snprintf(path + o, sizeof path - o, "%d", (int)getpid());
            p++;
        } else {
            k = o + 1 < sizeof path ? (path[o] = *p, 1) : -1;
        }
        if (k < 0 || (size_t)k >= sizeof path - o) fits = 0;
        else o += (size_t)k;
    }
    path[o] = '\0';
    /* Non-blocking, so that a FIFO without a reader fails (ENXIO) instead of holding init for
     * good; the writes that follow block as they would on stderr. */
    int fd = fits ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644) : -1;
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (fd >= 0) {
        if (log_fd >= 0) close(log_fd);
        log_fd = fd;
    } else if (log_fd >= 0) {
        char m[640];
        int k = fits ? snprintf(m, sizeof m, "ringcomm: RING_DEBUG_FILE: cannot open %s (%s); logging to stderr\n", path,
                                strerror(errno))
                     : snprintf(m, sizeof m, "ringcomm: RING_DEBUG_FILE names a path longer than 511 bytes; logging to stderr\n");
        write_nopipe(m, k < (int)sizeof m ? (size_t)k : sizeof m - 1);
    }
}

static void do_init(void)
{
    gethostname(log_host, sizeof log_host - 1);
    log_host[sizeof log_host - 1] = '\0';
    int level = RING_LOG_NONE, unknown_level = 0;
    const char *v = getenv("RING_DEBUG");
    if (v && *v) { /* empty is unset, as for every RING_* variable */
        if (!strcasecmp(v, "WARN")) level = RING_LOG_WARN;
        else if (!strcasecmp(v, "INFO")) level = RING_LOG_INFO;
        else if (!strcasecmp(v, "TRACE")) level = RING_LOG_TRACE;
        else if (!strcasecmp(v, "NONE") || !strcasecmp(v, "OFF")) level = RING_LOG_NONE;
        else level = RING_LOG_WARN, unknown_level = 1;
    }
    char bad[64] = "";
    const char *s = getenv("RING_DEBUG_SUBSYS");
    if (s && *s) parse_subsys(s, bad, sizeof bad);
    /* stderr as it is now, on a descriptor of the log's own: a program that closed fd 2 before
     * init would otherwise have the log written into whatever the library opens next there
     * (a socket of the job), and one that closes it later into whatever takes its place. */
    if (level > RING_LOG_NONE) log_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    const char *f = getenv("RING_DEBUG_FILE");
    if (f && *f && level > RING_LOG_NONE) open_file(f);
    /* The log cannot fail a call, so a value it does not know is said in the log itself. */
    if (unknown_level)
        ring__log(RING_LOG_WARN, RING_SUB_INIT, -1, "RING_DEBUG=\"%s\" is not NONE, WARN, INFO or TRACE: logging at WARN", v);
    if (bad[0] && level > RING_LOG_NONE)
        ring__log(RING_LOG_WARN, RING_SUB_INIT, -1, "RING_DEBUG_SUBSYS: \"%s\" is not INIT, NET, COLL or ALL: ignored%s", bad,
                  ring__log_subsys_v == RING_SUB_ALL && s[0] != '^' ? " (logging every subsystem)" : "");
    atomic_store(&ring__log_level_v, level);
}

void ring__log_init(void) { pthread_once(&log_once, do_init); }

void ring__log(int level, unsigned subsys, int rank, const char *fmt, ...)
{
    static const char *const lv[] = {"NONE", "WARN", "INFO", "TRACE"};
    const char *sub = subsys == RING_SUB_INIT ? "INIT"
                      : subsys == RING_SUB_NET ? "NET"
                      : subsys == RING_SUB_COLL ? "COLL"
                                                : "ALL";
    char line[2048];
    int n = snprintf(line, sizeof line, "%s:%d:%ld [%d] ringcomm %s %s ", log_host, (int)getpid(),
                     (long)syscall(SYS_gettid), rank, lv[level & 3], sub);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    if (log_fd < 0) return; /* stderr was closed at init */
    write_nopipe(line, len);
}
