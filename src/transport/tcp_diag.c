/*
 * Reading and saying a TCP socket's state for timeout messages (tcp_diag.h). Its own file:
 * <linux/tcp.h>, which has the fields newer than glibc's struct tcp_info (the peer's window,
 * the bytes not yet sent), cannot be included next to <netinet/tcp.h>.
 */
#include "tcp_diag.h"
#include "transport.h"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

void ring__tcp_sock_read(int fd, ring__tcp_sock_t *s)
{
    memset(s, 0, sizeof *s);
    struct tcp_info ti;
    memset(&ti, 0, sizeof ti);
    socklen_t l = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) != 0) return;
    s->known = 1;
    s->state = ti.tcpi_state;
    s->mss = ti.tcpi_snd_mss;
    s->retransmits = ti.tcpi_retransmits;
    s->probes = ti.tcpi_probes;
    s->total_retrans = ti.tcpi_total_retrans;
    s->rtt_us = ti.tcpi_rtt;
    s->cwnd = ti.tcpi_snd_cwnd;
    s->last_recv_ms = ti.tcpi_last_data_recv;
    s->last_ack_ms = ti.tcpi_last_ack_recv;
    /* Fields past the 2.6-era struct: present only where the kernel filled them. */
    if (l >= offsetof(struct tcp_info, tcpi_pacing_rate) + sizeof ti.tcpi_pacing_rate && ti.tcpi_pacing_rate != ~0ULL)
        s->pacing_Bps = ti.tcpi_pacing_rate;
    if (l >= offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof ti.tcpi_snd_wnd) {
        s->have_wnd = 1;
        s->snd_wnd = ti.tcpi_snd_wnd;
    }
    int v = 0;
    if (ioctl(fd, SIOCOUTQNSD, &v) == 0 && v > 0) s->notsent = (uint64_t)v;
    int outq = 0;
    if (ioctl(fd, SIOCOUTQ, &outq) == 0 && (uint64_t)outq > s->notsent) s->unacked = (uint64_t)outq - s->notsent;
    v = 0;
    if (ioctl(fd, SIOCINQ, &v) == 0 && v > 0) s->inq = (uint64_t)v;
    l = sizeof s->cc - 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, s->cc, &l) != 0) s->cc[0] = '\0';
}

/* A receive that heard nothing this long when its wait ran out waits on silence, not on a
 * trickle (the timeout is at least 1 s and counts from the last byte of any connection). */
#define SILENT_MS 1000u

int ring__tcp_sock_kind(int is_send, size_t queued, const ring__tcp_sock_t *s)
{
    if (!s->known) return RING__TCPD_NONE;
    if (s->state != 1) return RING__TCPD_STATE;
    if (!is_send) {
        if (!queued) return RING__TCPD_NONE;
        return s->last_recv_ms >= SILENT_MS && !s->inq ? RING__TCPD_SILENT : RING__TCPD_MOVING;
    }
    const uint64_t waiting = (uint64_t)queued + s->notsent;
    if (!waiting && !s->unacked) return RING__TCPD_NONE;
    /* A window under one segment is closed to the sender (silly-window avoidance). The
     * kernels before 6.2 do not report it; their probes with nothing in flight say the same. */
    if (waiting && (s->have_wnd ? s->snd_wnd < (s->mss ? s->mss : 1u) : s->probes > 0 && !s->unacked))
        return RING__TCPD_WINDOW;
    if (s->unacked && (s->retransmits || s->probes)) return RING__TCPD_LOSS;
    /* Paced too slowly to send what waits within a second. */
    if (s->notsent && s->pacing_Bps && waiting > s->pacing_Bps) return RING__TCPD_PACED;
    return RING__TCPD_MOVING;
}

static const char *state_name(int st)
{
    static const char *names[] = {"?",         "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
                                  "TIME_WAIT", "CLOSE",       "CLOSE_WAIT", "LAST_ACK", "LISTEN",   "CLOSING"};
    return st > 0 && st < (int)(sizeof names / sizeof *names) ? names[st] : "?";
}

static void fmt_rate(char *b, size_t n, uint64_t Bps)
{
    double bits = (double)Bps * 8;
    if (bits < 1e6) snprintf(b, n, "%.1f kbit/s", bits / 1e3);
    else if (bits < 1e9) snprintf(b, n, "%.1f Mbit/s", bits / 1e6);
    else snprintf(b, n, "%.2f Gbit/s", bits / 1e9);
}

#define PUT(...) ring__diag_put(out, len, &o, __VA_ARGS__)

size_t ring__tcp_diag_say(char *out, size_t len, int is_send, int peer, int nsocks, const size_t *queued,
                          const ring__tcp_sock_t *socks)
{
    size_t o = 0;
    if (!len) return 0;
    out[0] = '\0';
    uint64_t mine = 0, notsent = 0, unacked = 0, inq = 0;
    int worst = -1, wk = RING__TCPD_NONE;
    for (int i = 0; i < nsocks; i++) {
        int k = ring__tcp_sock_kind(is_send, queued[i], &socks[i]);
        if (k > wk) wk = k, worst = i;
        if (k == RING__TCPD_NONE) continue;
        mine += queued[i];
        notsent += socks[i].notsent;
        unacked += socks[i].unacked;
        inq += socks[i].inq;
    }
    if (worst < 0) return 0;
    const ring__tcp_sock_t *s = &socks[worst];
    char a[32], b[32];
    PUT("TCP %s rank %d:", is_send ? "to" : "from", peer);
    /* The amounts say where the bytes are: still in this rank (the kernel took no more), in
     * the kernel unsent, or on the wire unacknowledged. */
    const char *sep = "";
    if (mine) {
        ring__diag_bytes(a, sizeof a, mine);
        PUT(" %s %s", a, is_send ? "not yet handed to the kernel" : "still to come");
        sep = ",";
    }
    if (is_send && notsent) {
        ring__diag_bytes(a, sizeof a, notsent);
        PUT("%s %s not sent by the kernel", sep, a);
        sep = ",";
    }
    if (is_send && unacked) {
        ring__diag_bytes(a, sizeof a, unacked);
        PUT("%s %s unacknowledged", sep, a);
        sep = ",";
    }
    if (!is_send && inq) {
        ring__diag_bytes(a, sizeof a, inq);
        PUT("%s %s arrived unread", sep, a);
        sep = ",";
    }
    /* A socket that left its state with nothing pending has no amounts before its cause. */
    const char *lead = sep[0] ? "; " : " ";
    if (nsocks > 1) PUT("%ssocket %d of %d: ", lead, worst, nsocks);
    else PUT("%s", lead);
    switch (wk) {
    case RING__TCPD_STATE:
        PUT("in TCP state %s%s", state_name(s->state), s->state == 8 ? " (the peer closed its end)" : "");
        break;
    case RING__TCPD_WINDOW:
        PUT("rank %d's receive window is closed: that rank does not read (stopped, busy outside ringcomm, in "
            "another call, or waiting for another rank first)", peer);
        break;
    case RING__TCPD_LOSS:
        PUT("%u retransmissions in a row, no ACK for %u ms: the path to rank %d drops packets or is down",
            s->retransmits ? s->retransmits : s->probes, s->last_ack_ms, peer);
        break;
    case RING__TCPD_SILENT: PUT("nothing received for %u ms", s->last_recv_ms); break;
    case RING__TCPD_PACED:
    case RING__TCPD_MOVING:
        if (!is_send) {
            PUT("last data received %u ms ago", s->last_recv_ms);
            break;
        }
        fmt_rate(a, sizeof a, s->pacing_Bps);
        ring__diag_bytes(b, sizeof b, s->notsent + queued[worst]);
        if (s->pacing_Bps) PUT("paced at %s by %s", a, s->cc[0] ? s->cc : "its congestion control");
        else PUT("sending with %s", s->cc[0] ? s->cc : "its congestion control");
        PUT(" (cwnd %u, rtt %.1f ms, %u retransmissions in all)", s->cwnd, s->rtt_us / 1000.0, s->total_retrans);
        if (wk == RING__TCPD_PACED)
            PUT(": at that pace its %s need %.0f s", b, (double)(s->notsent + queued[worst]) / (double)s->pacing_Bps);
        break;
    default: break;
    }
    return o;
}
