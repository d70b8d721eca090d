/* Socket plumbing: resolution, interface choice, listen/connect, deadline I/O. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "param.h"

ring_result_t ring__addr_resolve_all(ring_comm_t *comm, const char *hostport, ring__sockaddr_t *out, int max, int *n)
{
    char host[256], port[16];
    *n = 0;
    if (ring__parse_hostport(hostport, host, sizeof host, port, sizeof port) != 0)
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "bad address \"%s\": expected host:port or [ipv6]:port", hostport ? hostport : "(null)");
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, port, &hints, &res);
    if (e != 0 || !res)
        return ring__seterr(comm, RING_ERR_CONNECT, "cannot resolve \"%s\": %s", hostport, gai_strerror(e));
    /* getaddrinfo's order (RFC 6724's preferences, /etc/gai.conf), without repeats: /etc/hosts
     * often lists one address on two lines. */
    for (const struct addrinfo *r = res; r && *n < max; r = r->ai_next) {
        if (r->ai_addrlen > sizeof out[0].ss) continue;
        int seen = 0;
        for (int k = 0; k < *n && !seen; k++)
            seen = out[k].len == r->ai_addrlen && !memcmp(&out[k].ss, r->ai_addr, r->ai_addrlen);
        if (seen) continue;
        memset(&out[*n], 0, sizeof out[*n]);
        memcpy(&out[*n].ss, r->ai_addr, r->ai_addrlen);
        out[*n].len = r->ai_addrlen;
        (*n)++;
    }
    freeaddrinfo(res);
    if (*n == 0) return ring__seterr(comm, RING_ERR_CONNECT, "cannot resolve \"%s\": no usable address", hostport);
    return RING_OK;
}

ring_result_t ring__addr_resolve(ring_comm_t *comm, const char *hostport, ring__sockaddr_t *out)
{
    int n;
    return ring__addr_resolve_all(comm, hostport, out, 1, &n);
}

const char *ring__addr_str(const ring__sockaddr_t *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)&a->ss;
        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%d", ip, ntohs(s->sin_port));
    } else if (a->ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&a->ss;
        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
        /* A link-local address means nothing without its zone, as RING_ROOT writes it. */
        char zone[IF_NAMESIZE + 2] = "", name[IF_NAMESIZE];
        if (s->sin6_scope_id && if_indextoname(s->sin6_scope_id, name)) snprintf(zone, sizeof zone, "%%%s", name);
        else if (s->sin6_scope_id) snprintf(zone, sizeof zone, "%%%u", (unsigned)s->sin6_scope_id);
        snprintf(buf, len, "[%s%s]:%d", ip, zone, ntohs(s->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", a->ss.ss_family);
    }
    return buf;
}

int ring__addr_port(const ring__sockaddr_t *a)
{
    if (a->ss.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
    if (a->ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return 0;
}

void ring__addr_set_port(ring__sockaddr_t *a, int port)
{
    if (a->ss.ss_family == AF_INET) ((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
    else if (a->ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
}

/* One NCCL-style interface filter: a comma list of prefixes, "=" for exact names, "^" to
 * exclude instead of include. */
/* The match, and in *port the port of the entry that matched (0: none given, or an exclude
 * list, whose ports name what is left out). */
static int name_match(const char *spec, const char *name, int hca_ports, int *port)
{
    int exclude = spec[0] == '^';
    if (exclude) spec++;
    int exact = spec[0] == '=';
    if (exact) spec++;
    int hit = 0;
    *port = 0;
    while (*spec && !hit) {
        size_t n = strcspn(spec, ",");
        /* "mlx5_0:1": the port is the transport's business, the device is ours. Interface
         * names keep their colon (old-style aliases are called eth0:1). */
        const char *colon = hca_ports ? memchr(spec, ':', n) : NULL;
        size_t m = colon ? (size_t)(colon - spec) : n;
        hit = exact ? (strlen(name) == m && !strncmp(name, spec, m)) : (m > 0 && !strncmp(name, spec, m));
        if (hit && colon && !exclude) *port = atoi(colon + 1);
        spec += n;
        if (*spec == ',') spec++;
    }
    return exclude ? !hit : hit;
}

int ring__name_match(const char *spec, const char *name, int hca_ports)
{
    int port;
    return name_match(spec, name, hca_ports, &port);
}

int ring__hca_port_of(const char *spec, const char *name)
{
    int port;
    return name_match(spec, name, 1, &port) ? port : 0;
}

static int link_local6(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
}

const struct ifaddrs *ring__ifaddr_pick(const struct ifaddrs *list, const char *ifname, int family,
                                        int (*usable)(const struct sockaddr *))
{
    /* 0: the root's family; 1: the other; 2 and 3: the same with IPv6 link-local addresses,
     * whose zone (the interface number) means another interface, or none, on the peers'
     * hosts; the kernel adds one to every interface, IPv4-only ones included. 4 and 5: the
     * loopback interface, which only this host reaches: an exclude list that does not name it
     * ("^docker") matches it, and getifaddrs lists it first. */
    for (int pass = 0; pass < 6; pass++)
        for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
            if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
            int fam = i->ifa_addr->sa_family;
            if (fam != AF_INET && fam != AF_INET6) continue;
            if ((pass % 2 == 0) != (fam == family)) continue;
            int tier = i->ifa_flags & IFF_LOOPBACK ? 2 : link_local6(i->ifa_addr) ? 1 : 0;
            if (pass / 2 != tier) continue;
            if (!ring__name_match(ifname, i->ifa_name, 0)) continue;
            if (usable && !usable(i->ifa_addr)) continue;
            return i;
        }
    return NULL;
}

/* The entry of getifaddrs' list that holds address a, NULL if none. A root written as
 * [::ffff:a.b.c.d] gives an IPv4-mapped address, which interfaces list as plain IPv4. */
static const struct ifaddrs *if_holding(const struct ifaddrs *list, const struct sockaddr_storage *a)
{
    int fam = a->ss_family;
    const void *want = fam == AF_INET ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                                      : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
    if (fam == AF_INET6 && IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)want)) {
        fam = AF_INET;
        want = (const unsigned char *)want + 12;
    }
    if (fam != AF_INET && fam != AF_INET6) return NULL;
    for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != fam) continue;
        const void *have = fam == AF_INET ? (const void *)&((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr
                                          : (const void *)&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr;
        if (!memcmp(have, want, fam == AF_INET ? sizeof(struct in_addr) : sizeof(struct in6_addr))) return i;
    }
    return NULL;
}

/* The number of the interface that holds address a (0: none, or it cannot be told). */
static unsigned if_of_addr(const struct sockaddr_storage *a)
{
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) return 0;
    const struct ifaddrs *i = if_holding(ifa, a);
    unsigned idx = i ? if_nametoindex(i->ifa_name) : 0;
    freeifaddrs(ifa);
    return idx;
}

void ring__addr_local_zone(ring__sockaddr_t *peer, const struct sockaddr_storage *mine)
{
    if (peer->ss.ss_family != AF_INET6) return;
    struct sockaddr_in6 *p = (struct sockaddr_in6 *)&peer->ss;
    if (!IN6_IS_ADDR_LINKLOCAL(&p->sin6_addr)) return;
    const struct sockaddr_in6 *m = (const struct sockaddr_in6 *)mine;
    if (mine->ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&m->sin6_addr)) {
        p->sin6_scope_id = m->sin6_scope_id;
        return;
    }
    /* This rank's data address is a routable one: the peer's link is most likely the one of
     * the interface that holds it, the interface this rank's data goes out of. The peer's own
     * number names some other interface here, or none. */
    unsigned idx = if_of_addr(mine);
    if (idx) p->sin6_scope_id = idx;
}

/* An address this host can bind now: not tentative (its duplicate check still running) and
 * not failed that check, which getifaddrs does not say. */
static int bindable(const struct sockaddr *sa)
{
    ring__sockaddr_t a = {.len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)};
    memcpy(&a.ss, sa, a.len);
    return ring__addr_bindable(&a);
}

int ring__addr_bindable(const ring__sockaddr_t *a)
{
    ring__sockaddr_t any = *a;
    ring__addr_set_port(&any, 0);
    /* A family this kernel lacks (IPv6 turned off) is as unusable as a foreign address; any
     * other socket failure cannot tell, and the listener's bind will report it. */
    int fd = socket(any.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno != EAFNOSUPPORT;
    int ok = bind(fd, (const struct sockaddr *)&any.ss, any.len) == 0 || errno != EADDRNOTAVAIL;
    close(fd);
    return ok;
}

int ring__addr_routable(const ring__sockaddr_t *a)
{
    int fd = socket(a->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    /* A UDP connect only looks the route up: no packet leaves. */
    int ok = connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0;
    close(fd);
    return ok;
}

ring_result_t ring__local_addr(ring_comm_t *comm, const char *ifname, const ring__sockaddr_t *toward,
                               ring__sockaddr_t *out, char *ifout, size_t ifoutlen)
{
    memset(out, 0, sizeof *out);
    snprintf(ifout, ifoutlen, "?");
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "getifaddrs");
    ring_result_t rc = RING_OK;
    if (ifname && *ifname) {
        /* Same family as the root first, so the data path matches the bootstrap path. */
        const struct ifaddrs *i = ring__ifaddr_pick(ifa, ifname, toward->ss.ss_family, bindable);
        if (i) {
            out->len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
            memcpy(&out->ss, i->ifa_addr, out->len);
            snprintf(ifout, ifoutlen, "%s", i->ifa_name);
        }
        if (out->len == 0)
            rc = ring__seterr(comm, RING_ERR_INVALID_ARG,
                              "RING_SOCKET_IFNAME=\"%s\" matches no interface that is up with an IP address", ifname);
    } else {
        int fd = socket(toward->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "socket(UDP)");
        } else {
            char b[80];
            out->len = sizeof out->ss;
            if (connect(fd, (const struct sockaddr *)&toward->ss, toward->len) != 0 ||
                getsockname(fd, (struct sockaddr *)&out->ss, &out->len) != 0)
                rc = ring__seterr_errno(comm, RING_ERR_CONNECT, errno, "no route to the root %s",
                                        ring__addr_str(toward, b, sizeof b));
            close(fd);
        }
        /* Name the interface that holds this address, for the log. */
        const struct ifaddrs *i = rc == RING_OK ? if_holding(ifa, &out->ss) : NULL;
        if (i) snprintf(ifout, ifoutlen, "%s", i->ifa_name);
    }
    freeifaddrs(ifa);
    if (rc == RING_OK) ring__addr_set_port(out, 0);
    return rc;
}

int ring__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The listening socket behind ring__listen and ring__listen_quiet: 0, or the errno of the
 * step named in *step. A RING_PORT_RANGE port is tried with SO_REUSEADDR: its only users may
 * be TIME_WAIT connections of a communicator destroyed less than a minute ago, and without it
 * a range of one port per process ran out at the second communicator. Then two processes can
 * bind one port, and only listen() tells: each port gets a socket of its own, and the next
 * port is tried where either step finds it in use. */
static int open_listener(ring__sockaddr_t *addr, int reuse, int port_lo, int port_hi, int *fdp, const char **step)
{
    int lo = port_lo > 0 ? port_lo : 0, hi = port_lo > 0 ? port_hi : 0, err = EADDRINUSE, fd = -1;
    for (int p = lo; p <= hi; p++) {
        *step = "socket";
        fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return errno;
        ring__fd_own(fd);
        int one = 1;
        if (reuse || port_lo > 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        *step = "bind";
        if (port_lo > 0) ring__addr_set_port(addr, p);
        err = bind(fd, (struct sockaddr *)&addr->ss, addr->len) == 0 ? 0 : errno;
        if (!err) {
            *step = "listen";
            err = listen(fd, 256) == 0 ? 0 : errno;
        }
        if (!err) break;
        close(fd);
        fd = -1;
        if (err != EADDRINUSE || port_lo <= 0) return err;
        *step = "bind"; /* the range is used up: say so as the bind that found it */
    }
    if (err) return err;
    addr->len = sizeof addr->ss;
    getsockname(fd, (struct sockaddr *)&addr->ss, &addr->len);
    *fdp = fd;
    return 0;
}

ring_result_t ring__listen(ring_comm_t *comm, ring__sockaddr_t *addr, int reuse, int port_lo,
                           int port_hi, int *fdp)
{
    char b[80];
    const char *step;
    int err = open_listener(addr, reuse, port_lo, port_hi, fdp, &step);
    if (!err) return RING_OK;
    if (!strcmp(step, "socket")) return ring__seterr_errno(comm, RING_ERR_SYSTEM, err, "socket");
    if (!strcmp(step, "listen"))
        return ring__seterr_errno(comm, RING_ERR_SYSTEM, err, "listen on %s", ring__addr_str(addr, b, sizeof b));
    if (port_lo > 0)
        return ring__seterr_errno(comm, RING_ERR_SYSTEM, err, "cannot bind any port of RING_PORT_RANGE %d-%d", port_lo,
                                  port_hi);
    return ring__seterr_errno(comm, RING_ERR_SYSTEM, err, "cannot bind %s", ring__addr_str(addr, b, sizeof b));
}

int ring__listen_quiet(ring__sockaddr_t *addr, int *fdp)
{
    const char *step;
    return open_listener(addr, 1, 0, 0, fdp, &step);
}

int ring__connect_start(const ring__sockaddr_t *addr, const char *cc, int *fdp, int *cc_err)
{
    *cc_err = 0;
    int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    ring__fd_own(fd);
    /* Before connect: an algorithm is set up when the connection is, and one that asks for
     * pacing (BBR) leaves the socket paced even after a later switch. */
    int e = cc ? ring__sock_set_cc(fd, cc) : 0;
    if (e) {
        close(fd);
        *cc_err = e;
        return e;
    }
    if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return e;
    }
    *fdp = fd;
    return 0;
}

static int same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return 0;
}

int ring__connect_check(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, 0);
    /* Not known to be writable yet (EINTR included): SO_ERROR would read 0 mid-connect. */
    if (n <= 0) return 0;
    int err = 0;
    socklen_t l = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0) return -errno;
    if (err) return -err;
    /* A connect to a port of the ephemeral range on this host, made while nobody listens
     * there, can pick that same port as its source: TCP's simultaneous open then connects the
     * socket to itself. Taken as connected, the rank would read its own hello and wait out the
     * whole timeout, while the real listener cannot bind the port the socket now holds. So a
     * self-connection counts as refused, and closing it frees the port. */
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0 && getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 &&
        same_endpoint(&me, &peer))
        return -ECONNREFUSED;
    return 1;
}

int ring__addr_is_loopback(const ring__sockaddr_t *a)
{
    if (a->ss.ss_family == AF_INET) return (ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24) == 127;
    if (a->ss.ss_family != AF_INET6) return 0;
    const struct in6_addr *x = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
}

int ring__addr_is_local(const ring__sockaddr_t *a)
{
    if (a->ss.ss_family != AF_INET && a->ss.ss_family != AF_INET6) return 0;
    if (ring__addr_is_loopback(a)) return 1;
    /* The kernel routes an address of its own through the loopback device, with that same
     * address as the source: ask for the route with a connected UDP socket (nothing is sent). */
    int fd = socket(a->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    ring__sockaddr_t me = {.len = sizeof me.ss};
    int local = connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0 &&
                getsockname(fd, (struct sockaddr *)&me.ss, &me.len) == 0 && me.ss.ss_family == a->ss.ss_family;
    if (local && a->ss.ss_family == AF_INET)
        local = ((const struct sockaddr_in *)&me.ss)->sin_addr.s_addr ==
                ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr;
    else if (local)
        local = !memcmp(&((const struct sockaddr_in6 *)&me.ss)->sin6_addr,
                        &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, sizeof(struct in6_addr));
    close(fd);
    return local;
}

int ring__sock_set_cc(int fd, const char *name)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) == 0 ? 0 : errno;
}

const char *ring__sock_cc(int fd, char *buf, size_t len)
{
    char n[32] = "";
    socklen_t l = sizeof n - 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, n, &l) != 0 || !n[0]) snprintf(n, sizeof n, "?");
    snprintf(buf, len, "%s", n);
    return buf;
}

/* Debian 12's headers predate it; the number is the kernel's ABI. */
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

int ring__sock_set_rto_max(int fd, int ms)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, sizeof ms) == 0 ? 0 : errno;
}

int ring__sock_rto_max(int fd)
{
    int ms = 0;
    socklen_t l = sizeof ms;
    return getsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, &l) == 0 ? ms : -1;
}

int ring__sock_set_user_timeout(int fd, unsigned ms)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) == 0 ? 0 : errno;
}

long ring__sock_user_timeout(int fd)
{
    unsigned ms = 0;
    socklen_t l = sizeof ms;
    return getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, &l) == 0 ? (long)ms : -1;
}

void ring__sock_tune(int fd, size_t bufbytes)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    if (bufbytes) {
        int b = bufbytes > (size_t)1 << 30 ? 1 << 30 : (int)bufbytes;
        /* The FORCE variants pass net.core.[rw]mem_max when we may (root); plain ones otherwise. */
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof b) != 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof b) != 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
    }
}

int ring__io_full(int fd, void *buf, size_t len, int writing, int64_t deadline_ns, int wake_fd)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return RING__IO_CLOSED;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
        int64_t left = deadline_ns - ring__now_ns();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd pf[2] = {{.fd = fd, .events = writing ? POLLOUT : POLLIN},
                               {.fd = wake_fd, .events = POLLIN}};
        int ms = (int)RING__MIN(left / 1000000 + 1, 1000);
        int r = poll(pf, wake_fd >= 0 ? 2 : 1, ms);
        if (r < 0 && errno != EINTR) return -errno;
        if (r > 0 && wake_fd >= 0 && (pf[1].revents & POLLIN)) return -ECANCELED;
    }
    return 0;
}

int ring__secret_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* SipHash-2-4 (Aumasson and Bernstein): a keyed hash whose outputs tell nothing of the key, nor
 * of its value on other inputs. */
#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND                                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 13) ^ v0;                                                                \
        v0 = SIP_ROTL(v0, 32);                                                                     \
        v2 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 16) ^ v2;                                                                \
        v0 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 21) ^ v0;                                                                \
        v2 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 17) ^ v2;                                                                \
        v2 = SIP_ROTL(v2, 32);                                                                     \
    } while (0)

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

uint64_t ring__siphash(const unsigned char key[16], const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t m = le64(in + i);
        v3 ^= m;
        SIP_ROUND;
        SIP_ROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t j = 0; i + j < len; j++) b |= (uint64_t)in[i + j] << (8 * j);
    v3 ^= b;
    SIP_ROUND;
    SIP_ROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t ring__shm_name_tag(const ring_comm_t *comm, const char *rest)
{
    /* Keyed with the whole secret, over the nonce and the rest: with the built-in secret (known
     * to all) the nonce alone is unknown to others, and 64 bits are out of reach. */
    unsigned char in[8 + 64];
    size_t n = strnlen(rest, sizeof in - 8);
    memcpy(in, &comm->job_nonce, 8);
    memcpy(in + 8, rest, n);
    return ring__siphash(comm->params.secret, in, 8 + n);
}
