/*
 * A root port for a test job, below the kernel's ephemeral range: the kernel never hands such
 * a port to an outgoing connection or to a port-0 bind (every data listener, every TCP
 * connection that a shared-memory edge starts with), so it stays free between this check and
 * rank 0's bind, through the hundreds of jobs a suite starts. Shared by the Criterion suites
 * and the plain-C TSan stress program.
 */
#ifndef RING_TEST_FREE_PORT_H
#define RING_TEST_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef CRITERION_H_
#define FREE_PORT_FAIL(msg) cr_assert_fail(msg)
#else
#define FREE_PORT_FAIL(msg) (fprintf(stderr, "%s\n", msg), exit(2))
#endif

static int free_port(void)
{
    static unsigned next;
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
        fclose(f);
    }
    int base = 10000, span = lo - base;
    if (!next) next = (unsigned)getpid() * 7919u + (unsigned)time(NULL);
    for (int tries = 0; tries < 2000; tries++) {
        int port = span >= 1000 ? base + (int)(next++ % (unsigned)span) : 0;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        if (fd < 0) FREE_PORT_FAIL("free_port: socket() failed");
        /* as the root binds: a port in TIME_WAIT from an earlier job is fine */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t l = sizeof a;
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0;
        close(fd);
        if (ok) return ntohs(a.sin_port);
    }
    FREE_PORT_FAIL("free_port: no free port below the ephemeral range");
    return -1;
}

#endif
