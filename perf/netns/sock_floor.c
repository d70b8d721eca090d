/*
 * sock_floor: the small all-reduce with nothing but blocking TCP sockets, as a floor for
 * ring_perf on the namespace bed. No library, no descriptors, no progress engine, no
 * timeouts: what the kernel's network path costs for the same messages.
 *
 *   sock_floor [-b BYTES] [-n ITERS] [-w WARMUP] [-r ROUNDS] [-p PORT]
 *
 * Rank and size come from RING_RANK / RING_NRANKS (bed.sh sets them); rank i listens on the
 * address of RING_ROOT's host plus i (the bed's 10.77.0.1, .2, ...), port PORT (29700).
 * N must be a power of two. Two patterns, alternated ROUNDS times:
 *  rd   recursive doubling: log2(N) rounds; in round k rank r sends its BYTES to r ^ 2^k and
 *       receives as many, then adds (lower rank's data first). 2 log2(N) messages of BYTES per
 *       rank, as ring_perf's rd all-reduce, less its 40-byte descriptors.
 *  a2a  one round: every rank sends its BYTES to every other rank and adds all N in rank
 *       order. N-1 messages each way per rank, one round trip.
 * Messages are float32 sums of at most 64 KiB, so that a send never waits for the peer's
 * receive (both sides send first). Rank 0 prints per round and pattern the time per all-reduce
 * as ring_perf reports it: each rank times every iteration, rank 0 takes the slowest rank's
 * time of each and prints their median (us). Until 2026-12-06 it printed rank 0's mean, which
 * can sit on either side of that (2 ranks on loopback: 24-35 % under it in one run, 26-66 %
 * over it in another), so it did not compare with ring_perf's figures.
 * Exit status 0 when every rank's result is the exact sum.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXR 64

static int fds[MAXR];

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int io(int fd, void *b, size_t n, int out)
{
    char *p = b;
    while (n) {
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) { /* the peer closed: no errno of its own, so the report names it */
            errno = ECONNRESET;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what)
{
    fprintf(stderr, "sock_floor: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    size_t bytes = 4096;
    int iters = 2000, warm = 50, rounds = 3, port = 29700;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) bytes = strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) port = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: sock_floor [-b BYTES] [-n ITERS] [-w WARMUP] [-r ROUNDS] [-p PORT]\n");
            return 2;
        }
    }
    const char *rs = getenv("RING_RANK"), *ns = getenv("RING_NRANKS"), *root = getenv("RING_ROOT");
    if (!rs || !ns || !root) {
        fprintf(stderr, "sock_floor: needs RING_RANK, RING_NRANKS and RING_ROOT (run it under perf/netns/bed.sh)\n");
        return 2;
    }
    int r = atoi(rs), n = atoi(ns);
    if (n < 1 || n > MAXR || (n & (n - 1)) || r < 0 || r >= n || bytes < 4 || bytes > 65536 || bytes % 4 || iters < 1) {
        fprintf(stderr, "sock_floor: N a power of two up to %d, 4 <= BYTES <= 65536 in whole floats, ITERS >= 1\n", MAXR);
        return 2;
    }
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)strcspn(root, ":"), root);
    struct in_addr base;
    if (inet_pton(AF_INET, host, &base) != 1) {
        fprintf(stderr, "sock_floor: RING_ROOT host %s is not an IPv4 address\n", host);
        return 2;
    }
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(ntohl(base.s_addr) + (uint32_t)r)};
    int one = 1, ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(ls, (void *)&me, sizeof me) ||
        listen(ls, MAXR))
        return die("listen");
    /* The lower rank of each pair accepts, the higher one connects (retrying while the lower
     * rank starts); each connector names itself in 4 bytes. */
    for (int j = 0; j < r; j++) {
        struct sockaddr_in to = me;
        to.sin_addr.s_addr = htonl(ntohl(base.s_addr) + (uint32_t)j);
        int s = -1;
        for (int t = 0; t < 1000; t++) {
            s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (s >= 0 && connect(s, (void *)&to, sizeof to) == 0) break;
            if (s >= 0) close(s);
            s = -1;
            usleep(10000);
        }
        uint32_t who = (uint32_t)r;
        if (s < 0 || io(s, &who, 4, 1)) return die("connect");
        fds[j] = s;
    }
    uint64_t seen = 0;
    for (int j = r + 1; j < n; j++) {
        int s = accept(ls, NULL, NULL);
        uint32_t who;
        if (s < 0 || io(s, &who, 4, 0)) return die("accept");
        /* A stray connector or a second one for a rank: a usage error, not a system one. */
        if (who <= (uint32_t)r || who >= (uint32_t)n || (seen >> who & 1)) {
            fprintf(stderr, "sock_floor: rank %d: a connector named itself rank %u (expected %d..%d, once each)\n", r,
                    who, r + 1, n - 1);
            return 1;
        }
        seen |= (uint64_t)1 << who;
        fds[who] = s;
    }
    for (int j = 0; j < n; j++)
        if (j != r) setsockopt(fds[j], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    size_t cnt = bytes / 4;
    float *x = malloc(bytes), *acc = malloc(bytes), *t = malloc(bytes * (size_t)n);
    double *dt = malloc((size_t)iters * sizeof *dt), *peer = malloc((size_t)iters * sizeof *peer);
    const char *err = NULL; /* what failed, for the one exit below */
    int bad = 0;
    if (!x || !acc || !t || !dt || !peer) {
        err = "malloc";
        goto out;
    }
    /* Small integers: every order of addition gives the exact sum, so both patterns check. */
    for (size_t i = 0; i < cnt; i++) x[i] = (float)((r + 1) * (int)(i % 7 + 1));
    if (r == 0)
        printf("# sock_floor: N=%d, %zu B, %d iterations (+%d warm-up), us per all-reduce (median over iterations of "
               "the max over ranks)\n",
               n, bytes, iters, warm);
    for (int round = 0; round < rounds; round++)
        for (int a2a = 0; a2a < 2; a2a++) {
            for (int it = -warm; it < iters && !err; it++) {
                const double t0 = now_us();
                if (!a2a) {
                    memcpy(acc, x, bytes);
                    for (int m = 1; m < n && !err; m <<= 1) {
                        int p = r ^ m;
                        if (io(fds[p], acc, bytes, 1) || io(fds[p], t, bytes, 0)) err = "rd exchange";
                        const float *lo = p < r ? t : acc, *hi = p < r ? acc : t;
                        for (size_t i = 0; i < cnt; i++) acc[i] = lo[i] + hi[i];
                    }
                } else {
                    for (int j = 0; j < n && !err; j++)
                        if (j != r && io(fds[j], x, bytes, 1)) err = "a2a send";
                    for (int j = 0; j < n && !err; j++)
                        if (j != r && io(fds[j], t + (size_t)j * cnt, bytes, 0)) err = "a2a receive";
                    memcpy(t + (size_t)r * cnt, x, bytes);
                    memcpy(acc, t, bytes);
                    for (int j = 1; j < n; j++)
                        for (size_t i = 0; i < cnt; i++) acc[i] += t[(size_t)j * cnt + i];
                }
                if (it >= 0) dt[it] = now_us() - t0;
            }
            if (err) goto out;
            /* Every rank's times to rank 0, after the pattern's last bytes on the same sockets:
             * nothing of it is timed. */
            if (r != 0 && io(fds[0], dt, (size_t)iters * sizeof *dt, 1)) err = "sending the times";
            for (int j = 1; r == 0 && j < n && !err; j++) {
                if (io(fds[j], peer, (size_t)iters * sizeof *peer, 0)) err = "receiving the times";
                for (int i = 0; i < iters && !err; i++)
                    if (peer[i] > dt[i]) dt[i] = peer[i];
            }
            if (err) goto out;
            qsort(dt, (size_t)iters, sizeof *dt, by_value);
            double us = iters % 2 ? dt[iters / 2] : (dt[iters / 2 - 1] + dt[iters / 2]) / 2;
            for (size_t i = 0; i < cnt; i++)
                if (acc[i] != (float)(n * (n + 1) / 2 * (int)(i % 7 + 1))) bad++;
            if (r == 0) printf("round %d %-3s %10.2f\n", round + 1, a2a ? "a2a" : "rd", us);
        }
    if (bad) fprintf(stderr, "sock_floor: rank %d: %d wrong elements\n", r, bad);
out:
    if (err) die(err);
    free(x);
    free(acc);
    free(t);
    free(dt);
    free(peer);
    for (int j = 0; j < n; j++)
        if (j != r) close(fds[j]);
    close(ls);
    return err || bad ? 1 : 0;
}
