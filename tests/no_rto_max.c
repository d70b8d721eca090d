/*
 * LD_PRELOAD shim for tcp/backoff_cap_* tests: a kernel without TCP_RTO_MAX_MS (before Linux
 * 6.15, e.g. Debian 12's 6.1), on this one. setsockopt and getsockopt of that option fail with
 * ENOPROTOOPT, as such a kernel answers; everything else goes to libc.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define RTO_MAX_OPT 44 /* TCP_RTO_MAX_MS */
/* The project builds with -fvisibility=hidden; an interposer must be seen. */
#define SHIM __attribute__((visibility("default")))

SHIM int setsockopt(int fd, int level, int name, const void *v, socklen_t len)
{
    static int (*real)(int, int, int, const void *, socklen_t);
    if (level == IPPROTO_TCP && name == RTO_MAX_OPT) {
        errno = ENOPROTOOPT;
        return -1;
    }
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "setsockopt");
    return real(fd, level, name, v, len);
}

SHIM int getsockopt(int fd, int level, int name, void *v, socklen_t *len)
{
    static int (*real)(int, int, int, void *, socklen_t *);
    if (level == IPPROTO_TCP && name == RTO_MAX_OPT) {
        errno = ENOPROTOOPT;
        return -1;
    }
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "getsockopt");
    return real(fd, level, name, v, len);
}
