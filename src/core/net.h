/* Socket helpers shared by the bootstrap and the TCP transport. */
#ifndef RING_NET_H
#define RING_NET_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "internal.h"

typedef struct ring__sockaddr {
    struct sockaddr_storage ss;
    socklen_t len;
} ring__sockaddr_t;

/* Resolve "host:port" (getaddrinfo, first stream address). */
ring_result_t ring__addr_resolve(ring_comm_t *comm, const char *hostport, ring__sockaddr_t *out);
/* All its stream addresses, up to max, in getaddrinfo's order without repeats: a name can
 * stand for an address this host cannot use (an IPv6 one without a route, an IPv4 one of
 * another network) ahead of the one that works. */
ring_result_t ring__addr_resolve_all(ring_comm_t *comm, const char *hostport, ring__sockaddr_t *out, int max, int *n);
#define RING__ROOT_ADDRS_MAX 8
/* "ip:port" or "[ip6]:port" for logs and messages. */
const char *ring__addr_str(const ring__sockaddr_t *a, char *buf, size_t len);
int ring__addr_port(const ring__sockaddr_t *a);
void ring__addr_set_port(ring__sockaddr_t *a, int port);

/* A peer's IPv6 link-local address came with the zone (interface number) of its own host:
 * where this rank's data address is link-local too, the peer is on that link, in this host's
 * zone; where it is a routable one, the peer is taken to be on the link of the interface that
 * holds it. Any other address is left as it is. */
void ring__addr_local_zone(ring__sockaddr_t *peer, const struct sockaddr_storage *mine);

struct ifaddrs;
struct sockaddr;
/* The address RING_SOCKET_IFNAME (ifname) gives, from getifaddrs' list: of an interface that is
 * up and matches, in the root's family, else the other, IPv6 link-local only where nothing else
 * is, the loopback interface only where no other interface matches, and usable(addr) (NULL:
 * any). */
const struct ifaddrs *ring__ifaddr_pick(const struct ifaddrs *list, const char *ifname, int family,
                                        int (*usable)(const struct sockaddr *));

/*
 * The local address for data connections: the interface named by ifname (NCCL-style list:
 * "eth0,ib" prefixes, "=eth0" exact, "^docker,lo" exclusions) if given, else the address the
 * kernel would use to reach `toward` (the root), found with a connected UDP socket (no
 * packet is sent). Port 0. *ifout receives the interface name (may be "?").
 */
ring_result_t ring__local_addr(ring_comm_t *comm, const char *ifname, const ring__sockaddr_t *toward,
                               ring__sockaddr_t *out, char *ifout, size_t ifoutlen);

/* Could this host listen on a's address (bind it, port aside)? 1 also when it cannot tell,
 * but 0 for a family the kernel lacks. */
int ring__addr_bindable(const ring__sockaddr_t *a);
/* Has this host a route to a? (the lookup a connect makes; nothing is sent) */
int ring__addr_routable(const ring__sockaddr_t *a);

/* Non-blocking listening socket. port_lo..port_hi (0,0 = the address's port as given). */
ring_result_t ring__listen(ring_comm_t *comm, ring__sockaddr_t *addr, int reuse, int port_lo,
                           int port_hi, int *fd);
/* The same with SO_REUSEADDR and the address's own port, recording no error: 0 or an errno. */
int ring__listen_quiet(ring__sockaddr_t *addr, int *fd);
/* Start a non-blocking connect, with TCP congestion control cc (NULL: the system's) chosen
 * before the handshake. 0 = connected or in progress; else errno, which is also in *cc_err
 * when it was the congestion control's (see ring__sock_set_cc). */
int ring__connect_start(const ring__sockaddr_t *addr, const char *cc, int *fd, int *cc_err);
/* Has the non-blocking connect on fd finished? 1 yes, 0 not yet, -errno on failure (a socket
 * connected to itself is -ECONNREFUSED). */
int ring__connect_check(int fd);
/* Whether traffic to a stays inside this host's network stack (this namespace's loopback
 * device): a loopback address, or an address of this namespace's own interfaces, which the
 * kernel routes to itself. 0 for anything else, and when the route cannot be looked up. */
int ring__addr_is_local(const ring__sockaddr_t *a);
/* A loopback address (127/8, ::1, ::ffff:127/104): the same answer on every host. */
int ring__addr_is_loopback(const ring__sockaddr_t *a);
/* TCP congestion control of fd: set it (0 or errno: ENOENT not in this kernel, EPERM not in
 * net.ipv4.tcp_allowed_congestion_control for a process without CAP_NET_ADMIN), or read it
 * into buf ("?" when it cannot be read). */
int ring__sock_set_cc(int fd, const char *name);
const char *ring__sock_cc(int fd, char *buf, size_t len);
/* Cap of fd's retransmission and zero-window-probe backoff (TCP_RTO_MAX_MS, Linux 6.15): set
 * it (0 or errno: ENOPROTOOPT on older kernels, EINVAL outside 1000 .. 120000), or read it
 * (-1 when it cannot be read). */
int ring__sock_set_rto_max(int fd, int ms);
int ring__sock_rto_max(int fd);
/* TCP_USER_TIMEOUT: how long data may stay unacknowledged (or a window closed) before the
 * kernel gives the connection up; set (0 or errno) or read (-1 when it cannot be read; 0 is
 * the kernel's own rule). */
int ring__sock_set_user_timeout(int fd, unsigned ms);
long ring__sock_user_timeout(int fd);
/* TCP_NODELAY, keepalive, optional buffer sizes. */
void ring__sock_tune(int fd, size_t bufbytes);
int ring__set_nonblock(int fd);

/* Blocking-with-deadline I/O for the bootstrap (poll-driven, EINTR-safe, MSG_NOSIGNAL).
 * Return 0, RING__IO_CLOSED when reading hit the end of the stream (the peer closed the
 * connection: not an errno, so that no "Connection reset by peer" is made up for it), or a
 * negative errno (-ETIMEDOUT at the deadline, -ECANCELED when wake_fd fires). */
#define RING__IO_CLOSED 1
int ring__io_full(int fd, void *buf, size_t len, int writing, int64_t deadline_ns, int wake_fd);

/* Constant-time comparison, so that probing the secret byte by byte learns nothing. */
int ring__secret_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* SipHash-2-4 of data under a 128-bit key. */
uint64_t ring__siphash(const unsigned char key[16], const void *data, size_t len);

/* NCCL-style device filter (RING_SOCKET_IFNAME, RING_IB_HCA): comma list of name prefixes,
 * "=" first for exact names, "^" first to exclude. hca_ports: an entry may end in ":port",
 * which is ignored for the match. */
int ring__name_match(const char *spec, const char *name, int hca_ports);
/* RING_IB_HCA: the port named by the entry of spec that matches device name ("mlx5_0:1,mlx5_1:2"
 * gives 2 for mlx5_1); 0 where it names none (any active port). */
int ring__hca_port_of(const char *spec, const char *name);

#endif
