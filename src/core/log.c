/* Log sink: formats one line per call and writes it with a single write(2), so lines from
 * the progress thread and the caller's thread never interleave. */
#include <fcntl.h>
#include <pthread.h>
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

static void parse_subsys(const char *v)
{
    unsigned mask = 0;
    int negate = v[0] == '^';
    if (negate) v++;
    while (*v) {
        size_t n = strcspn(v, ",");
        mask |= subsys_bit(v, n);
        v += n;
        if (*v == ',') v++;
    }
    ring__log_subsys_v = negate ? (RING_SUB_ALL & ~mask) : mask;
}

static void open_file(const char *pattern)
{
    char path[512];
    size_t o = 0;
    for (const char *p = pattern; *p && o + 32 < sizeof path; p++) {
        if (p[0] == '%' && p[1] == 'h') {
            o += (size_t)snprintf(path + o, sizeof path - o, "%s", log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
            p++;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) log_fd = fd;
}

static void do_init(void)
{
    gethostname(log_host, sizeof log_host - 1);
    log_host[sizeof log_host - 1] = '\0';
    int level = RING_LOG_NONE;
    const char *v = getenv("RING_DEBUG");
    if (v) {
        if (!strcasecmp(v, "WARN")) level = RING_LOG_WARN;
        else if (!strcasecmp(v, "INFO")) level = RING_LOG_INFO;
        else if (!strcasecmp(v, "TRACE")) level = RING_LOG_TRACE;
        else if (!strcasecmp(v, "NONE") || !strcasecmp(v, "OFF")) level = RING_LOG_NONE;
        else level = RING_LOG_WARN;
    }
    const char *s = getenv("RING_DEBUG_SUBSYS");
    if (s && *s) parse_subsys(s);
    const char *f = getenv("RING_DEBUG_FILE");
    if (f && *f && level > RING_LOG_NONE) open_file(f);
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
    ssize_t w = write(log_fd, line, len);
    (void)w;
}
