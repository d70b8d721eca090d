/*
 * What the kernel says about a TCP connection that made no progress, for timeout messages.
 *
 * A timeout that names only the peer leaves the reader to guess which of three quite different
 * things happened: the peer stopped reading (its receive window closed), the path drops
 * packets (the kernel retransmits and hears no ACK), or the path still works but crawls (the
 * congestion control paces the socket at a few kbit/s, as BBR did after a 20 s outage on the
 * namespace bed: docs/reliability.md). TCP_INFO and the socket queues tell them apart at no
 * cost, so a timed-out wait asks (tcp.c's diag op) and the message says which it was.
 */
#ifndef RING_TCP_DIAG_H
#define RING_TCP_DIAG_H

#include <stddef.h>
#include <stdint.h>

typedef struct ring__tcp_sock {
    int known; /* TCP_INFO answered */
    int state; /* the kernel's TCP state: 1 established, 8 close-wait, ... */
    char cc[16];
    uint64_t notsent; /* written by this rank, not yet sent by the kernel */
    uint64_t unacked; /* sent, not yet acknowledged by the peer */
    uint64_t inq;     /* arrived, not yet read by this rank */
    int have_wnd;     /* the kernel reports the peer's window (tcpi_snd_wnd, Linux 6.2+) */
    uint32_t snd_wnd, mss;
    uint32_t retransmits; /* of the oldest unacknowledged segment, in a row */
    uint32_t probes;      /* zero-window or keepalive probes without answer */
    uint32_t total_retrans;
    uint64_t pacing_Bps; /* bytes per second; 0: not reported */
    uint32_t rtt_us, cwnd;
    uint32_t last_recv_ms, last_ack_ms; /* since data last came in, since the last ACK */
} ring__tcp_sock_t;

/* Fills *s from the kernel; s->known stays 0 where it does not answer. */
void ring__tcp_sock_read(int fd, ring__tcp_sock_t *s);

/* Why one socket of a bundle holds up the direction a view moves, most telling first. */
enum {
    RING__TCPD_NONE,   /* nothing waits on it in this direction */
    RING__TCPD_MOVING, /* bytes wait, no cause visible (a paced or slow path shows its rate) */
    RING__TCPD_PACED,  /* bytes wait for the congestion control's pace, which is slow */
    RING__TCPD_SILENT, /* a receive waits and nothing came for a while */
    RING__TCPD_LOSS,   /* sent bytes are retransmitted and not acknowledged */
    RING__TCPD_WINDOW, /* the peer's receive window is closed: it does not read */
    RING__TCPD_STATE,  /* not established any more (the peer closed its side, say) */
};

/* The kind of socket s for a send (is_send) or receive view whose queue here holds `queued`
 * bytes on it (not yet written, or not yet read). */
int ring__tcp_sock_kind(int is_send, size_t queued, const ring__tcp_sock_t *s);

/*
 * One clause on a view's sockets for a timeout message, e.g. "TCP to rank 2: 425.5 KiB not
 * sent by the kernel; socket 1 of 2: paced at 11.0 kbit/s by bbr (cwnd 4, rtt 0.4 ms, 31
 * retransmissions in all): at that pace its 425.5 KiB need 316 s": the amounts summed over
 * the sockets that hold something up, then the cause on the one whose kind ranks highest
 * (no socket number where the bundle has one). queued[i]: this rank's payload bytes on socket
 * i. Writes "" where no socket holds anything up. Returns the length written.
 */
size_t ring__tcp_diag_say(char *out, size_t len, int is_send, int peer, int nsocks, const size_t *queued,
                          const ring__tcp_sock_t *socks);

#endif
