/*
 * Unit tests for the core modules that need no network: partition arithmetic, environment
 * parsing, parameter resolution, error strings, bootstrap HELLO validation, and the
 * single-rank communicator (which runs the whole API path without sockets).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "bootstrap.h"
#include "clear_env.h"
#include "free_port.h"
#include "net.h"
#include "engine.h"
#include "internal.h"
#include "log.h"
#include "msgq.h"
#include "p2p.h"
#include "param.h"
#include "partition.h"
#include "tcp_diag.h"
#include "transport.h"
#include "watch.h"
#include "wire.h"

/* ---- partition ------------------------------------------------------------------------ */

static void check_layout(size_t count, int nseg, int balanced, size_t chunk, int lanes, int split)
{
    ring__layout_t l;
    ring__layout_init(&l, count, nseg, balanced, chunk, lanes, split);
    size_t total = 0;
    for (int s = 0; s < nseg; s++) {
        size_t len = ring__layout_seg_len(&l, s);
        total += len;
        if (s > 0) cr_assert_eq(ring__layout_seg_off(&l, s), ring__layout_seg_off(&l, s - 1) + ring__layout_seg_len(&l, s - 1));
        /* Walking every round and chunk of a segment must tile it exactly, in order. */
        size_t expect = ring__layout_seg_off(&l, s), covered = 0;
        for (size_t j = 0; j < l.nrounds; j++) {
            int lj = ring__layout_round_lanes(&l, j);
            cr_assert(lj >= 1 && lj <= lanes);
            for (int c = 0; c < lj; c++) {
                size_t off, n;
                ring__layout_chunk(&l, j, s, c, &off, &n);
                cr_assert(n <= chunk, "chunk of %zu elements exceeds E=%zu", n, chunk);
                if (n) cr_assert_eq(off, expect, "count %zu nseg %d seg %d round %zu chunk %d", count, nseg, s, j, c);
                expect += n;
                covered += n;
            }
        }
        cr_assert_eq(covered, len, "count %zu nseg %d seg %d: covered %zu of %zu", count, nseg, s, covered, len);
    }
    cr_assert_eq(total, balanced ? count : count * (size_t)nseg);
    if (balanced && nseg > 0) {
        size_t mx = ring__layout_seg_len(&l, 0), mn = ring__layout_seg_len(&l, nseg - 1);
        cr_assert(mx - mn <= 1, "segments unbalanced");
    }
    /* Message index <-> coordinates round-trip for every message. */
    int nsteps = 2 * (nseg > 1 ? nseg - 1 : 1);
    size_t nm = ring__layout_nmsgs(&l, nsteps);
    for (size_t i = 0; i < nm; i++) {
        size_t j;
        int k, c;
        ring__layout_msg_coords(&l, nsteps, i, &j, &k, &c);
        cr_assert(k >= 0 && k < nsteps && c >= 0 && c < ring__layout_round_lanes(&l, j));
        cr_assert_eq(ring__layout_msg_index(&l, nsteps, j, k, c), i);
    }
}

/* ---- stuck reports (watch.c): the root's comparison ---- */

static void stuck_desc(unsigned char *d, uint64_t seq, size_t count, int algo)
{
    ring__opdesc_t op = {.coll = RING__COLL_ALLREDUCE, .count = count, .dtype = RING_FLOAT32, .op = RING_SUM, .seq = seq};
    ring__desc_build(d, &op, algo);
}

/* A root with no star connections (fds -1: relays go nowhere), enough for the comparison. */
typedef struct stuck_root {
    ring_comm_t comm;
    ring__bootstrap_t bs;
    int fds[4], left[4];
    ring__peer_info_t peers[4];
} stuck_root;

static void stuck_root_init(stuck_root *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 4; i++) t->fds[i] = -1;
    t->bs.root_fd = -1;
    t->bs.rank_fds = t->fds;
    t->comm.bs = &t->bs;
    t->comm.nranks = 4;
    t->comm.wake_fd = -1;
    t->comm.watch_left = t->left;
    t->comm.peers = t->peers;
    t->comm.stuck_desc = calloc(4, RING__DESC_LEN);
    t->comm.stuck_at = calloc(4, sizeof *t->comm.stuck_at);
    cr_assert(t->comm.stuck_desc && t->comm.stuck_at);
    pthread_mutex_init(&t->comm.star_mu, NULL);
    pthread_mutex_init(&t->comm.err_mu, NULL);
}

static void stuck_root_fini(stuck_root *t)
{
    free(t->comm.stuck_desc);
    free(t->comm.stuck_at);
    pthread_mutex_destroy(&t->comm.star_mu);
    pthread_mutex_destroy(&t->comm.err_mu);
}

Test(stuck, root_flags_only_the_same_call_with_another_descriptor)
{
    stuck_root t;
    stuck_root_init(&t);
    unsigned char ring5[RING__DESC_LEN], ring6[RING__DESC_LEN], rh5[RING__DESC_LEN], hint5[RING__DESC_LEN];
    stuck_desc(ring5, 5, 100000, RING__ALGO_RING);
    stuck_desc(ring6, 6, 10000, RING__ALGO_RH);
    stuck_desc(rh5, 5, 10000, RING__ALGO_RH);
    stuck_desc(hint5, 5, 100000, RING__ALGO_RING | RING__DESC_GDR);
    /* The same call everywhere (a hint bit aside), or another call: a slow rank, no mismatch. */
    cr_assert_eq(ring__watch_stuck_at_root(&t.comm, 0, ring5), 0);
    cr_assert_eq(ring__watch_stuck_at_root(&t.comm, 1, hint5), 0);
    cr_assert_eq(ring__watch_stuck_at_root(&t.comm, 2, ring6), 0);
    cr_assert_eq(atomic_load(&t.comm.fail_code), RING_OK);
    cr_assert_eq(atomic_load(&t.comm.remote_failed), 0);
    /* The same call on another algorithm: the mismatch, naming both ranks and both calls. */
    cr_assert_eq(ring__watch_stuck_at_root(&t.comm, 3, rh5), 1);
    cr_assert_eq(atomic_load(&t.comm.fail_code), RING_ERR_MISMATCH);
    cr_assert_eq(atomic_load(&t.comm.remote_failed), 1);
    cr_assert(strstr(t.comm.fail_msg, "rank 3 called #5 allreduce(count=10000, float32, sum) [recursive halving]") &&
                  strstr(t.comm.fail_msg, "rank 0 called #5 allreduce(count=100000, float32, sum) [ring]"),
              "%s", t.comm.fail_msg);
    stuck_root_fini(&t);
}

Test(stuck, waiting_notice_carries_exactly_one_descriptor)
{
    unsigned char f[RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX];
    char hex[RING__NOTICE_WAITING_TEXT + 2];
    memset(hex, 'a', sizeof hex - 1);
    hex[sizeof hex - 1] = '\0';
    uint32_t type, origin, code;
    const unsigned char *t;
    size_t tl;
    hex[RING__NOTICE_WAITING_TEXT] = '\0';
    size_t n = ring__notice_build(f, RING__NOTICE_WAITING, 2, 0, hex);
    cr_assert_eq(ring__notice_parse(f, n, &type, &origin, &code, &t, &tl), (long)n);
    cr_assert(type == RING__NOTICE_WAITING && origin == 2 && code == 0 && tl == RING__NOTICE_WAITING_TEXT);
    /* One digit more or less, or a code: garbage. */
    hex[RING__NOTICE_WAITING_TEXT] = 'a';
    n = ring__notice_build(f, RING__NOTICE_WAITING, 2, 0, hex);
    cr_assert_eq(ring__notice_parse(f, n, &type, &origin, &code, &t, &tl), -1);
    hex[RING__NOTICE_WAITING_TEXT - 1] = '\0';
    n = ring__notice_build(f, RING__NOTICE_WAITING, 2, 0, hex);
    cr_assert_eq(ring__notice_parse(f, n, &type, &origin, &code, &t, &tl), -1);
    memset(hex, 'a', RING__NOTICE_WAITING_TEXT);
    hex[RING__NOTICE_WAITING_TEXT] = '\0';
    n = ring__notice_build(f, RING__NOTICE_WAITING, 2, RING_ERR_MISMATCH, hex);
    cr_assert_eq(ring__notice_parse(f, n, &type, &origin, &code, &t, &tl), -1);
}

Test(partition, tiles_every_segment_exactly)
{
    const size_t counts[] = {0, 1, 2, 3, 7, 8, 9, 97, 1000, 1009, 4099, 65537, 1 << 20};
    const size_t chunks[] = {1, 3, 64, 1000, 4096};
    for (size_t a = 0; a < sizeof counts / sizeof *counts; a++)
        for (int n = 1; n <= 8; n++)
            for (size_t b = 0; b < sizeof chunks / sizeof *chunks; b++)
                for (int lanes = 1; lanes <= 4; lanes++) {
                    if (counts[a] / chunks[b] > 200000) continue; /* keep the test fast */
                    for (int split = 0; split < 2; split++) {
                        check_layout(counts[a], n, 1, chunks[b], lanes, split);
                        check_layout(counts[a] / 3, n, 0, chunks[b], lanes, split);
                    }
                }
}

Test(partition, small_buffers_use_one_message_per_step)
{
    ring__layout_t l;
    for (int split = 0; split < 2; split++) {
        ring__layout_init(&l, 100, 4, 1, 1000, 3, split);
        cr_assert_eq(l.nrounds, 1);
        cr_assert_eq(ring__layout_round_lanes(&l, 0), 1);
        cr_assert_eq(ring__layout_nmsgs(&l, 6), 6);
        ring__layout_init(&l, 0, 4, 1, 1000, 3, split);
        cr_assert_eq(ring__layout_nmsgs(&l, 6), 0);
    }
}

Test(partition, split_cuts_a_short_round_into_lanes)
{
    /* Segments of one chunk: one message per step unsplit, L pieces of E/L split. */
    ring__layout_t l;
    size_t off, n;
    ring__layout_init(&l, 4000, 4, 1, 1000, 3, 0);
    cr_assert_eq(ring__layout_round_lanes(&l, 0), 1);
    ring__layout_init(&l, 4000, 4, 1, 1000, 3, 1);
    cr_assert_eq(ring__layout_round_lanes(&l, 0), 3);
    ring__layout_chunk(&l, 0, 1, 0, &off, &n);
    cr_assert(off == 1000 && n == 334, "off %zu n %zu", off, n);
    ring__layout_chunk(&l, 0, 1, 2, &off, &n);
    cr_assert(off == 1667 && n == 333, "off %zu n %zu", off, n);
    /* Only as many pieces as E/L-sized ones fill: 400 elements make 2. */
    ring__layout_init(&l, 1600, 4, 1, 1000, 3, 1);
    cr_assert_eq(ring__layout_round_lanes(&l, 0), 2);
    /* Full rounds are unchanged: 3 chunks of E, then a short round of 1 piece. */
    ring__layout_init(&l, 4 * 3300, 4, 1, 1000, 3, 1);
    cr_assert_eq(l.nrounds, 2);
    cr_assert_eq(ring__layout_round_lanes(&l, 0), 3);
    cr_assert_eq(ring__layout_round_lanes(&l, 1), 1);
}

Test(partition, large_counts_do_not_overflow)
{
    ring__layout_t l;
    size_t count = ((size_t)1 << 31) + 3;
    ring__layout_init(&l, count, 2, 1, 512 * 1024, 3, 1);
    size_t off, n;
    ring__layout_chunk(&l, l.nrounds - 1, 1, ring__layout_round_lanes(&l, l.nrounds - 1) - 1, &off, &n);
    cr_assert_eq(off + n, count);
}

Test(partition, mod_handles_negatives)
{
    cr_assert_eq(ring__mod(-1, 4), 3);
    cr_assert_eq(ring__mod(-9, 4), 3);
    cr_assert_eq(ring__mod(5, 4), 1);
}

/* ---- parsing ---------------------------------------------------------------------------- */

Test(param, parse_size)
{
    size_t v;
    cr_assert_eq(ring__parse_size("123", &v), 0);
    cr_assert_eq(v, 123);
    cr_assert_eq(ring__parse_size("64K", &v), 0);
    cr_assert_eq(v, 65536);
    cr_assert_eq(ring__parse_size("16M", &v), 0);
    cr_assert_eq(v, 16u << 20);
    cr_assert_eq(ring__parse_size("1G", &v), 0);
    cr_assert_eq(v, (size_t)1 << 30);
    cr_assert_eq(ring__parse_size("2KiB", &v), 0);
    cr_assert_eq(v, 2048);
    cr_assert_eq(ring__parse_size("8kb", &v), 0);
    cr_assert_eq(v, 8192);
    cr_assert_neq(ring__parse_size("", &v), 0);
    cr_assert_neq(ring__parse_size("abc", &v), 0);
    cr_assert_neq(ring__parse_size("-5", &v), 0);
    cr_assert_neq(ring__parse_size("12X", &v), 0);
    cr_assert_neq(ring__parse_size("99999999999999999999", &v), 0);
    cr_assert_neq(ring__parse_size("17179869184G", &v), 0); /* overflows 64 bits */
}

Test(param, parse_int)
{
    long long v;
    cr_assert_eq(ring__parse_int("42", 0, 100, &v), 0);
    cr_assert_eq(v, 42);
    cr_assert_neq(ring__parse_int("101", 0, 100, &v), 0);
    cr_assert_neq(ring__parse_int("4x", 0, 100, &v), 0);
    cr_assert_neq(ring__parse_int("", 0, 100, &v), 0);
    cr_assert_neq(ring__parse_int(NULL, 0, 100, &v), 0);
    /* No digits is not 0 (RING_RANK=" " used to be rank 0; RING_IB_RETRY_CNT=" " no retries). */
    cr_assert_neq(ring__parse_int(" ", 0, 100, &v), 0);
    cr_assert_neq(ring__parse_int(" \t", 0, 100, &v), 0);
    cr_assert_eq(ring__parse_int(" 7 ", 0, 100, &v), 0);
    cr_assert_eq(v, 7);
}

Test(param, parse_hostport)
{
    char h[64], p[16];
    cr_assert_eq(ring__parse_hostport("127.0.0.1:29500", h, sizeof h, p, sizeof p), 0);
    cr_assert_str_eq(h, "127.0.0.1");
    cr_assert_str_eq(p, "29500");
    cr_assert_eq(ring__parse_hostport("[::1]:80", h, sizeof h, p, sizeof p), 0);
    cr_assert_str_eq(h, "::1");
    cr_assert_eq(ring__parse_hostport("node-7.cluster:1", h, sizeof h, p, sizeof p), 0);
    cr_assert_str_eq(h, "node-7.cluster");
    cr_assert_neq(ring__parse_hostport("::1:80", h, sizeof h, p, sizeof p), 0);
    cr_assert_neq(ring__parse_hostport("host", h, sizeof h, p, sizeof p), 0);
    cr_assert_neq(ring__parse_hostport("host:0", h, sizeof h, p, sizeof p), 0);
    cr_assert_neq(ring__parse_hostport("host:70000", h, sizeof h, p, sizeof p), 0);
    cr_assert_neq(ring__parse_hostport(":80", h, sizeof h, p, sizeof p), 0);
}

Test(param, port_range)
{
    int lo, hi;
    cr_assert_eq(ring__parse_port_range("50000-50100", &lo, &hi), 0);
    cr_assert_eq(lo, 50000);
    cr_assert_eq(hi, 50100);
    cr_assert_neq(ring__parse_port_range("50100-50000", &lo, &hi), 0);
    cr_assert_neq(ring__parse_port_range("5000", &lo, &hi), 0);
    /* One port is a range: one rank per port is how env.md sizes it. */
    cr_assert_eq(ring__parse_port_range("50000-50000", &lo, &hi), 0);
    cr_assert(lo == 50000 && hi == 50000, "%d-%d", lo, hi);
}

/* The TCP message header: the receiver's check of magic, sequence and length, each on its own
 * (until now only the fuzz build, which needs clang, saw a disabled sequence check). The magic
 * is tcp.c's "RGMS". */
Test(tcp, message_header_check_refuses_each_field_on_its_own)
{
    unsigned char h[16];
    uint32_t seq;
    uint64_t len;
    ring__put32(h, 0x52474d53u);
    ring__put32(h + 4, 5);
    ring__put64(h + 8, 4096);
    cr_assert_eq(ring__tcp_hdr_check(h, 5, 4096, &seq, &len), 0);
    cr_assert(seq == 5 && len == 4096);
    cr_assert_eq(ring__tcp_hdr_check(h, 4, 4096, &seq, &len), 2, "a message out of sequence");
    cr_assert_eq(seq, 5);
    cr_assert_eq(ring__tcp_hdr_check(h, 5, 4095, &seq, &len), 3, "a message of another length");
    ring__put64(h + 8, (uint64_t)1 << 32 | 4096); /* a length cut to 32 bits would pass */
    cr_assert_eq(ring__tcp_hdr_check(h, 5, 4096, &seq, &len), 3);
    ring__put32(h, 0x52474d54u);
    cr_assert_eq(ring__tcp_hdr_check(h, 5, 4096, &seq, &len), 1, "another magic");
}

/* The socket states a timeout message tells apart, from made-up TCP_INFO readings: the BBR
 * stall is the one CI saw (docs/reliability.md, "BBR after a long outage"). */
static ring__tcp_sock_t est(void)
{
    ring__tcp_sock_t s = {.known = 1, .state = 1, .have_wnd = 1, .snd_wnd = 65536, .mss = 1448, .cwnd = 10,
                          .rtt_us = 400, .pacing_Bps = 125000000};
    snprintf(s.cc, sizeof s.cc, "cubic");
    return s;
}

Test(tcp, diag_kinds_from_the_kernels_readings)
{
    ring__tcp_sock_t s = est();
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_NONE, "nothing waits");
    cr_assert_eq(ring__tcp_sock_kind(0, 0, &s), RING__TCPD_NONE, "no receive posted");
    s.notsent = 1000;
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_MOVING, "a fast pace is no cause");
    cr_assert_eq(ring__tcp_sock_kind(0, 0, &s), RING__TCPD_NONE, "the send side is not the receive view's");
    s.snd_wnd = 1000; /* under one segment: closed to the sender */
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_WINDOW);
    s = est();
    s.have_wnd = 0, s.snd_wnd = 0, s.probes = 3, s.notsent = 0;
    cr_assert_eq(ring__tcp_sock_kind(1, 4096, &s), RING__TCPD_WINDOW, "a kernel before 6.2: probes, nothing in flight");
    s.probes = 0;
    cr_assert_eq(ring__tcp_sock_kind(1, 4096, &s), RING__TCPD_MOVING, "no probes yet");
    s = est();
    s.unacked = 65536, s.retransmits = 5, s.last_ack_ms = 4004;
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_LOSS);
    s.retransmits = 0;
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_MOVING, "in flight, no retransmission: a slow path");
    s = est();
    s.notsent = 435752, s.pacing_Bps = 1380, s.cwnd = 4, s.total_retrans = 31;
    snprintf(s.cc, sizeof s.cc, "bbr");
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_PACED);
    s.pacing_Bps = 1000000; /* the 425 KiB go within a second */
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_MOVING);
    s = est();
    s.last_recv_ms = 4004;
    cr_assert_eq(ring__tcp_sock_kind(0, 56, &s), RING__TCPD_SILENT);
    s.inq = 10;
    cr_assert_eq(ring__tcp_sock_kind(0, 56, &s), RING__TCPD_MOVING, "bytes came and wait to be read");
    s.inq = 0, s.last_recv_ms = 3;
    cr_assert_eq(ring__tcp_sock_kind(0, 56, &s), RING__TCPD_MOVING);
    s.state = 8;
    cr_assert_eq(ring__tcp_sock_kind(0, 0, &s), RING__TCPD_STATE, "a socket not established always says so");
    s.known = 0;
    cr_assert_eq(ring__tcp_sock_kind(1, 100, &s), RING__TCPD_NONE, "no reading, nothing said");
}

Test(tcp, diag_clause_sums_the_sockets_and_names_the_worst)
{
    char b[400];
    ring__tcp_sock_t s[2] = {est(), est()};
    size_t q[2] = {0, 0};
    cr_assert_eq(ring__tcp_diag_say(b, sizeof b, 1, 2, 2, q, s), 0);
    cr_assert_str_eq(b, "");
    s[1].notsent = 435752, s[1].pacing_Bps = 1380, s[1].cwnd = 4, s[1].total_retrans = 31;
    snprintf(s[1].cc, sizeof s[1].cc, "bbr");
    s[0].notsent = 1024;
    q[0] = 2 << 20;
    ring__tcp_diag_say(b, sizeof b, 1, 2, 2, q, s);
    cr_log_info("%s", b);
    cr_assert_str_eq(b, "TCP to rank 2: 2.0 MiB not yet handed to the kernel, 426.5 KiB not sent by the kernel; "
                        "socket 1 of 2: paced at 11.0 kbit/s by bbr (cwnd 4, rtt 0.4 ms, 31 retransmissions in all): "
                        "at that pace its 425.5 KiB need 316 s");
    s[0].snd_wnd = 0; /* a closed window outranks the pace */
    ring__tcp_diag_say(b, sizeof b, 1, 2, 2, q, s);
    cr_assert(strstr(b, "; socket 0 of 2: rank 2's receive window is closed: that rank does not read"), "%s", b);
    /* One socket: no socket number. */
    s[0] = est();
    s[0].unacked = 152, s[0].retransmits = 5, s[0].last_ack_ms = 4004;
    q[0] = 0;
    ring__tcp_diag_say(b, sizeof b, 1, 0, 1, q, s);
    cr_assert_str_eq(b, "TCP to rank 0: 152 B unacknowledged; 5 retransmissions in a row, no ACK for 4004 ms: the path "
                        "to rank 0 drops packets or is down");
    s[0] = est();
    s[0].last_recv_ms = 4004;
    q[0] = 56;
    ring__tcp_diag_say(b, sizeof b, 0, 3, 1, q, s);
    cr_assert_str_eq(b, "TCP from rank 3: 56 B still to come; nothing received for 4004 ms");
    s[0].state = 8;
    ring__tcp_diag_say(b, sizeof b, 0, 3, 1, q, s);
    cr_assert_str_eq(b, "TCP from rank 3: 56 B still to come; in TCP state CLOSE_WAIT (the peer closed its end)");
    q[0] = 0;
    ring__tcp_diag_say(b, sizeof b, 0, 3, 1, q, s);
    cr_assert_str_eq(b, "TCP from rank 3: in TCP state CLOSE_WAIT (the peer closed its end)", "nothing pending");
    q[0] = 56;
    /* A short buffer is cut, never overrun. */
    char small[24];
    memset(small, 'x', sizeof small);
    size_t n = ring__tcp_diag_say(small, 20, 0, 3, 1, q, s);
    cr_assert(n < 20 && strlen(small) == n && small[20] == 'x', "%zu: %s", n, small);
}

/* The slot transports' clause (msgq.c): what is posted, then what the slots say. */
Test(msgq, diag_clause_says_full_slots_and_silence)
{
    char b[400];
    ring__mq_t q = {0};
    int conn;
    cr_assert_eq(ring__mq_diag_say(b, sizeof b, "shared memory", 1, 2, &q, 0, 8, NULL), 0, "nothing posted");
    cr_assert_str_eq(b, "");
    ring__mq_req_t *r1 = ring__mq_post(&q, &conn, b, 1 << 20, 1), *r2 = ring__mq_post(&q, &conn, b, 2 << 20, 1);
    cr_assert(r1 && r2);
    r1->done = 512 * 1024, r1->first = 0;
    ring__mq_diag_say(b, sizeof b, "shared memory", 1, 2, &q, 8, 8, NULL);
    cr_assert_str_eq(b, "shared memory to rank 2: 2.5 MiB of 2 messages still to send (message 0 first); all 8 slots "
                        "hold pieces rank 2 has not taken: that rank does not read (stopped, busy outside ringcomm, in "
                        "another call, or waiting for another rank first)");
    ring__mq_diag_say(b, sizeof b, "verbs", 1, 2, &q, 0, 8, "queue pair 0 of 1 in state ERR");
    cr_assert_str_eq(b, "verbs to rank 2: 2.5 MiB of 2 messages still to send (message 0 first); no slot in use; "
                        "queue pair 0 of 1 in state ERR");
    ring__mq_pop(&q);
    ring__mq_pop(&q);
    ring__mq_diag_say(b, sizeof b, "verbs", 1, 2, &q, 3, 8, NULL);
    cr_assert_str_eq(b, "verbs to rank 2: 3 of 8 slots hold pieces rank 2 has not taken: that rank does not read "
                        "(stopped, busy outside ringcomm, in another call, or waiting for another rank first)",
                     "nothing posted, pieces not taken");
    ring__mq_diag_say(b, sizeof b, "verbs", 1, 2, &q, 0, 8, "1 work request posted and not completed");
    cr_assert_str_eq(b, "verbs to rank 2: 1 work request posted and not completed", "nothing posted, the device's clause");
    cr_assert_eq(ring__mq_diag_say(b, sizeof b, "verbs", 1, 2, &q, 0, 8, NULL), 0);
    ring__mq_free(&q);
    ring__mq_t rq = {0};
    cr_assert(ring__mq_post(&rq, &conn, b, 40, 0));
    ring__mq_diag_say(b, sizeof b, "shared memory", 0, 1, &rq, 5, 8, NULL); /* in_use: the sender's only */
    cr_assert_str_eq(b, "shared memory from rank 1: 40 B of 1 message still to come (message 0 first); nothing more has "
                        "arrived: rank 1 sent nothing");
    char small[16];
    memset(small, 'x', sizeof small);
    size_t n = ring__mq_diag_say(small, 12, "shared memory", 0, 1, &rq, 0, 8, NULL);
    cr_assert(n < 12 && strlen(small) == n && small[12] == 'x', "%zu: %s", n, small);
    ring__mq_free(&rq);
}

/* A relay keeps whole clauses of a timeout (watch.c's on_fail). */
Test(tcp, diag_cut_keeps_whole_clauses)
{
    const char *t = "allreduce #3 timed out while waiting; TCP to rank 1: 2.0 MiB; TCP from rank 1: nothing";
    size_t n = strlen(t);
    cr_assert_eq(ring__diag_cut(t, n), n, "it fits");
    cr_assert_eq(ring__diag_cut(t, 500), n);
    size_t second = (size_t)(strstr(t, "; TCP from") - t), first = (size_t)(strstr(t, "; TCP to") - t);
    cr_assert_eq(ring__diag_cut(t, n - 1), second, "the last clause dropped whole");
    cr_assert_eq(ring__diag_cut(t, second + 1), second, "a cut just past a boundary");
    cr_assert_eq(ring__diag_cut(t, second), second, "exactly up to a boundary");
    cr_assert_eq(ring__diag_cut(t, second - 1), first, "one short of it: the clause before goes too");
    cr_assert_eq(ring__diag_cut(t, 10), 10, "no boundary within max: max");
    cr_assert_eq(ring__diag_cut(t, 1), 1);
    cr_assert_eq(ring__diag_cut(t, 0), 0);
    cr_assert_eq(ring__diag_cut("", 0), 0);
}

/* The readings from a real socket pair on loopback: a receiver that does not read closes its
 * window, and the sender's reading says so. */
Test(tcp, diag_reads_a_closed_window_from_the_kernel, .timeout = 30)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), a = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(l >= 0 && a >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int small = 16384;
    cr_assert_eq(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    cr_assert_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    cr_assert_eq(connect(a, (struct sockaddr *)&sa, sizeof sa), 0);
    int b = accept(l, NULL, NULL);
    cr_assert(b >= 0);
    cr_assert_eq(fcntl(a, F_SETFL, O_NONBLOCK), 0);
    ring__tcp_sock_t s;
    ring__tcp_sock_read(a, &s);
    cr_assert(s.known && s.state == 1 && s.cc[0] && s.mss > 0, "known %d state %d cc '%s' mss %u", s.known, s.state, s.cc,
              s.mss);
    cr_assert_eq(ring__tcp_sock_kind(1, 0, &s), RING__TCPD_NONE);
    static char junk[1 << 16];
    size_t sent = 0;
    int kind = RING__TCPD_NONE;
    for (int tries = 0; tries < 400 && kind != RING__TCPD_WINDOW; tries++) {
        ssize_t w;
        while ((w = send(a, junk, sizeof junk, MSG_NOSIGNAL)) > 0) sent += (size_t)w;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        ring__tcp_sock_read(a, &s);
        kind = ring__tcp_sock_kind(1, 0, &s);
    }
    cr_log_info("after %zu bytes: kind %d, notsent %llu, unacked %llu, window %u (have %d), probes %u", sent, kind,
                (unsigned long long)s.notsent, (unsigned long long)s.unacked, s.snd_wnd, s.have_wnd, s.probes);
    cr_assert_eq(kind, RING__TCPD_WINDOW, "the sender never saw the window closed");
    cr_assert(s.notsent > 0);
    ring__tcp_sock_t r;
    ring__tcp_sock_read(b, &r);
    cr_assert(r.inq > 0 && r.inq <= sent, "the receiver's unread bytes: %llu", (unsigned long long)r.inq);
    cr_assert_eq(ring__tcp_sock_kind(0, 100, &r), RING__TCPD_MOVING, "bytes wait to be read");
    close(a);
    close(b);
    close(l);
}

Test(param, secret_hex_and_string)
{
    unsigned char a[16], b[16];
    ring__secret_from_string("00112233445566778899aabbccddeeff", a);
    cr_assert_eq(a[0], 0x00);
    cr_assert_eq(a[1], 0x11);
    cr_assert_eq(a[15], 0xff);
    ring__secret_from_string("correct horse", a);
    ring__secret_from_string("correct horsf", b);
    cr_assert_neq(memcmp(a, b, 16), 0);
    ring__secret_from_string("correct horse", b);
    cr_assert_eq(memcmp(a, b, 16), 0);
}

/* Launchers' variables and every RING_* knob. */
static void clear_env(void)
{
    const char *launch[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "TORCHELASTIC_RUN_ID"};
    for (size_t i = 0; i < sizeof launch / sizeof *launch; i++) unsetenv(launch[i]);
    clear_ring_env();
}

/* The environment's row: ring__env_bootstrap succeeds from `source`, with this rank and size
 * where they are not negative. */
static void expect_row(ring__env_bootstrap_t *eb, const char *source, int rank, int nranks)
{
    cr_assert_eq(ring__env_bootstrap(eb), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_str_eq(eb->source, source);
    if (rank >= 0) cr_assert_eq(eb->rank, rank);
    if (nranks >= 0) cr_assert_eq(eb->nranks, nranks);
}

static void set_pair(const char *a, const char *va, const char *b, const char *vb)
{
    setenv(a, va, 1);
    setenv(b, vb, 1);
}

Test(param, env_bootstrap_order)
{
    ring__env_bootstrap_t eb;
    clear_env();
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_RANK") != NULL);

    set_pair("PMI_RANK", "1", "PMI_SIZE", "3");
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG, "PMI without RING_ROOT has no root");
    setenv("RING_ROOT", "10.0.0.1:5000", 1);
    expect_row(&eb, "pmi", 1, 3);

    /* Inside an sbatch/salloc allocation every process inherits SLURM_PROCID/SLURM_NTASKS,
     * those that Hydra's mpiexec or mpirun start too: the launcher that started the process
     * comes first (with -n1 every rank was "rank 0 of 1" and ran alone). */
    set_pair("SLURM_PROCID", "0", "SLURM_NTASKS", "1");
    expect_row(&eb, "pmi", 1, 3);
    set_pair("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "4");
    expect_row(&eb, "openmpi", 2, -1);
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    expect_row(&eb, "slurm", -1, -1); /* srun alone */
    /* Set but empty is unset: the search goes on. */
    set_pair("OMPI_COMM_WORLD_RANK", "", "OMPI_COMM_WORLD_SIZE", "");
    expect_row(&eb, "slurm", -1, -1);
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");

    unsetenv("RING_ROOT");
    set_pair("RANK", "3", "WORLD_SIZE", "8");
    set_pair("MASTER_ADDR", "node0", "MASTER_PORT", "29500");
    /* RANK and WORLD_SIZE without torchrun (a Kubeflow pod) come after mpirun's names: with
     * RANK=0 WORLD_SIZE=1 left in the environment, mpirun -np 2 ran two jobs of one rank. */
    set_pair("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2");
    setenv("RING_ROOT", "10.0.0.1:5000", 1);
    expect_row(&eb, "openmpi", 1, 2);
    unsetenv("WORLD_SIZE"); /* half a row after a whole one is never looked at */
    expect_row(&eb, "openmpi", -1, -1);
    setenv("WORLD_SIZE", "8", 1);
    /* torchrun started the process (mpirun started torchrun, one per node): its names win. */
    setenv("TORCHELASTIC_RUN_ID", "job7", 1);
    unsetenv("RING_ROOT");
    expect_row(&eb, "torchrun", 3, -1);
    cr_assert_str_eq(eb.root, "node0:29501", "torchrun's store holds MASTER_PORT itself");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("TORCHELASTIC_RUN_ID");
    /* Without torchrun and without mpirun: RANK and WORLD_SIZE, and the root from MASTER_*. */
    expect_row(&eb, "RANK/WORLD_SIZE", -1, 8);
    cr_assert_str_eq(eb.root, "node0:29501");
    setenv("MASTER_PORT", "65535", 1);
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "MASTER_PORT=\"65535\" is not a port in [1, 65534] (rank 0 listens on MASTER_PORT+1"),
              "%s", ring_comm_last_error(NULL));
    set_pair("MASTER_PORT", "29500", "TORCHELASTIC_RUN_ID", "job7");
    setenv("MASTER_ADDR", "fd00::1", 1);
    cr_assert_eq(ring__env_bootstrap(&eb), RING_OK);
    cr_assert_str_eq(eb.root, "[fd00::1]:29501");
    setenv("MASTER_ADDR", "[fd00::1]", 1);
    cr_assert_eq(ring__env_bootstrap(&eb), RING_OK);
    cr_assert_str_eq(eb.root, "[fd00::1]:29501", "brackets given are not doubled");
    /* Set but empty is unset here too: no root address, not ":29501" or "is not a port". */
    setenv("MASTER_ADDR", "", 1);
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "no root address"), "%s", ring_comm_last_error(NULL));
    set_pair("MASTER_ADDR", "node0", "MASTER_PORT", "");
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "no root address"), "%s", ring_comm_last_error(NULL));
    setenv("MASTER_PORT", "29500", 1);

    set_pair("RING_RANK", "0", "RING_NRANKS", "2");
    setenv("RING_ROOT", "127.0.0.1:7000", 1);
    expect_row(&eb, "RING_*", -1, -1);
    cr_assert_str_eq(eb.root, "127.0.0.1:7000");

    setenv("RING_RANK", "2", 1); /* out of range for 2 ranks */
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);

    /* Half a row is an error naming both variables, not a reason to take the next launcher's
     * (RING_RANK without RING_NRANKS inside a Slurm allocation ran as "rank 0 of 1"). */
    setenv("RING_RANK", "1", 1);
    unsetenv("RING_NRANKS");
    set_pair("SLURM_PROCID", "0", "SLURM_NTASKS", "1");
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_RANK is set") && strstr(ring_comm_last_error(NULL), "RING_NRANKS"),
              "%s", ring_comm_last_error(NULL));
    unsetenv("RING_RANK");
    unsetenv("WORLD_SIZE");
    cr_assert_eq(ring__env_bootstrap(&eb), RING_ERR_INVALID_ARG, "RANK without WORLD_SIZE");
    cr_assert(strstr(ring_comm_last_error(NULL), "WORLD_SIZE"), "%s", ring_comm_last_error(NULL));
    clear_env();
}

Test(param, resolve_env_and_config)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.chunk_bytes, RING__DEFAULT_CHUNK_BYTES);
    cr_assert_eq(p.nsocks, 0, "RING_NSOCKS unset is auto");
    cr_assert_eq(p.secret_set, 0);
    setenv("RING_NSOCKS", "auto", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.nsocks, 0);
    setenv("RING_NSOCKS", "0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "0 is not a socket count (auto is the word)");

    /* An interface name longer than the field is refused, not cut. */
    unsetenv("RING_NSOCKS");
    char longname[200];
    memset(longname, 'e', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    setenv("RING_SOCKET_IFNAME", longname, 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_SOCKET_IFNAME"), "%s", ring_comm_last_error(NULL));
    setenv("RING_SOCKET_IFNAME", "eth0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_str_eq(p.ifname, "eth0");
    unsetenv("RING_SOCKET_IFNAME");

    setenv("RING_CHUNK_BYTES", "1M", 1);
    setenv("RING_NSOCKS", "3", 1);
    setenv("RING_TIMEOUT_MS", "1500", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.chunk_bytes, 1u << 20);
    cr_assert_eq(p.nsocks, 3);
    cr_assert_eq(p.timeout_ms, 1500);

    ring_config_t cfg;
    cr_assert_eq(ring_config_init(&cfg), RING_OK);
    cr_assert_eq(cfg.nsocks, 3, "config starts from the environment");
    cfg.nsocks = 5;
    cfg.secret = "s3cret";
    cr_assert_eq(ring__params_resolve(&p, &cfg), RING_OK);
    cr_assert_eq(p.nsocks, 5, "config overrides the environment");
    cr_assert_eq(p.secret_set, 1);

    cfg.nsocks = 99;
    cr_assert_eq(ring__params_resolve(&p, &cfg), RING_ERR_INVALID_ARG);
    cfg.nsocks = 2;
    cfg.struct_size = 3;
    cr_assert_eq(ring__params_resolve(&p, &cfg), RING_ERR_INVALID_ARG);

    setenv("RING_NSOCKS", "zero", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_NSOCKS=\"zero\": expected auto or an integer in [1, 16]"),
              "%s", ring_comm_last_error(NULL));
    setenv("RING_NSOCKS", "1", 1);
    setenv("RING_CHUNK_BYTES", "3", 1); /* below the minimum */
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    unsetenv("RING_CHUNK_BYTES");
    /* Socket buffers below 16 KiB made TCP crawl (seconds per 64 KiB) without ever timing out. */
    static const char *const sockbuf_bad[] = {"1", "4K", "16383"}, *const sockbuf_ok[] = {"0", "16K", "1G"};
    for (int i = 0; i < 3; i++) {
        setenv("RING_SOCKBUF_BYTES", sockbuf_bad[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "%s", sockbuf_bad[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "RING_SOCKBUF_BYTES=") &&
                      strstr(ring_comm_last_error(NULL), "[16384, "),
                  "%s", ring_comm_last_error(NULL));
        setenv("RING_SOCKBUF_BYTES", sockbuf_ok[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK, "%s: %s", sockbuf_ok[i], ring_comm_last_error(NULL));
    }
    clear_env();
}

static void put_addr(ring__tp_addr_t *t, const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1, "%s", ip);
        t->len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1, "%s", ip);
        t->len = sizeof *a;
    }
    memcpy(t->data, &ss, t->len);
}

/* RING_NSOCKS=auto: one socket where both data addresses of the pair are loopback ones, the
 * default elsewhere, decided from the table alone so that both ends agree; a set value wins. */
/* ring_config_init passes the header's size (ringcomm.h): a size the library does not know
 * (a program built against another header) is refused before a byte is written, where the
 * library used to fill its own size of whatever the program had allocated. */
Test(param, config_init_takes_the_callers_size)
{
    clear_env();
    struct {
        ring_config_t cfg;
        unsigned char guard[64];
    } small;
    memset(&small, 0xa5, sizeof small);
    const size_t older = offsetof(ring_config_t, socket_ifname); /* a struct without the last field */
    cr_assert_eq(ring_config_init_sized(&small.cfg, older), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "the program's ring_config_t has") &&
                  strstr(ring_comm_last_error(NULL), "built against another ringcomm.h"),
              "%s", ring_comm_last_error(NULL));
    const unsigned char *b = (const unsigned char *)&small;
    for (size_t i = 0; i < sizeof small; i++) cr_assert_eq(b[i], 0xa5, "byte %zu written", i);
    cr_assert_eq(ring_config_init_sized(&small.cfg, sizeof(ring_config_t) + 8), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_config_init_sized(NULL, sizeof(ring_config_t)), RING_ERR_INVALID_ARG);

    /* The macro and the function (bindings) both give this header's struct. */
    ring_config_t a, f;
    cr_assert_eq(ring_config_init(&a), RING_OK);
    cr_assert_eq((ring_config_init)(&f), RING_OK);
    cr_assert_eq(a.struct_size, sizeof(ring_config_t));
    cr_assert_eq(f.struct_size, sizeof(ring_config_t));
    cr_assert_eq(a.chunk_bytes, f.chunk_bytes);
    for (size_t i = sizeof small.cfg; i < sizeof small; i++) cr_assert_eq(b[i], 0xa5);
}

Test(param, tcp_sockets_per_pair)
{
    static const char *const ips[] = {"127.0.0.1", "127.0.0.2", "10.1.2.3", "::1", "::ffff:127.0.0.9", "fd00::5",
                                      "::ffff:10.0.0.1"};
    enum { N = sizeof ips / sizeof *ips };
    ring__peer_info_t peers[N];
    memset(peers, 0, sizeof peers);
    for (int r = 0; r < N; r++) put_addr(&peers[r].addr, ips[r]);
    static const int loop[N] = {1, 1, 0, 1, 1, 0, 0};
    ring_comm_t c;
    memset(&c, 0, sizeof c);
    c.nranks = N;
    c.peers = peers;
    for (int me = 0; me < N; me++)
        for (int p = 0; p < N; p++) {
            if (p == me) continue;
            c.rank = me;
            int want = loop[me] && loop[p] ? 1 : RING__DEFAULT_NSOCKS;
            cr_assert_eq(ring__tcp_pair_nsocks(&c, p), want, "%s -> %s", ips[me], ips[p]);
            c.rank = p;
            cr_assert_eq(ring__tcp_pair_nsocks(&c, me), want, "the other end, %s -> %s", ips[p], ips[me]);
            c.params.nsocks = 3;
            cr_assert_eq(ring__tcp_pair_nsocks(&c, me), 3, "a set RING_NSOCKS applies to every pair");
            c.params.nsocks = 0;
        }
    c.rank = 0;
    cr_assert_eq(ring__tcp_pair_nsocks(&c, N), RING__DEFAULT_NSOCKS, "rank out of range");
    cr_assert_eq(ring__tcp_pair_nsocks(&c, -1), RING__DEFAULT_NSOCKS, "rank out of range");
    peers[1].addr.len = 3; /* malformed */
    cr_assert_eq(ring__tcp_pair_nsocks(&c, 1), RING__DEFAULT_NSOCKS);
    c.peers = NULL; /* before the table */
    cr_assert_eq(ring__tcp_pair_nsocks(&c, 1), RING__DEFAULT_NSOCKS);
}

/* Two ranks on one kernel and in one network namespace that use a NIC address of the machine
 * (RING_SOCKET_IFNAME=eth0) get one socket as on loopback; the same address on another kernel,
 * an unknown kernel, or a peer address that is not this machine's keeps the default. */
Test(param, tcp_sockets_per_pair_own_address)
{
    char own[INET6_ADDRSTRLEN] = "";
    struct ifaddrs *ifs = NULL;
    cr_assert_eq(getifaddrs(&ifs), 0, "getifaddrs: %s", strerror(errno));
    for (struct ifaddrs *i = ifs; i && !own[0]; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        const struct in_addr *a = &((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if ((ntohl(a->s_addr) >> 24) != 127) inet_ntop(AF_INET, a, own, sizeof own);
    }
    freeifaddrs(ifs);
    if (!own[0]) {
        cr_log_warn("skipped: this machine has no IPv4 address outside 127/8");
        cr_skip_test("no IPv4 address outside 127/8");
    }
    ring__peer_info_t peers[3];
    memset(peers, 0, sizeof peers);
    put_addr(&peers[0].addr, own);
    put_addr(&peers[1].addr, own);
    put_addr(&peers[2].addr, "198.51.100.7"); /* TEST-NET-2: nobody's */
    ring_comm_t c;
    memset(&c, 0, sizeof c);
    c.nranks = 3;
    c.peers = peers;
    for (int me = 0; me < 2; me++) {
        c.rank = me;
        cr_assert_eq(ring__tcp_pair_nsocks(&c, !me), RING__DEFAULT_NSOCKS, "%s, kernels unknown", own);
        peers[0].kernel = peers[1].kernel = peers[2].kernel = 0x5151u;
        cr_assert_eq(ring__tcp_pair_nsocks(&c, !me), 1, "%s, one kernel", own);
        cr_assert_eq(ring__tcp_pair_nsocks(&c, 2), RING__DEFAULT_NSOCKS, "198.51.100.7 is not this machine's");
        peers[!me].kernel = 0x7777u;
        cr_assert_eq(ring__tcp_pair_nsocks(&c, !me), RING__DEFAULT_NSOCKS, "%s, the peer on another kernel", own);
        c.params.nsocks = 4;
        peers[!me].kernel = 0x5151u;
        cr_assert_eq(ring__tcp_pair_nsocks(&c, !me), 4, "a set RING_NSOCKS still applies");
        c.params.nsocks = 0;
        peers[0].kernel = peers[1].kernel = peers[2].kernel = 0;
    }
}

/* The three-way knobs: auto (-1) by default, each value (off: 0, on: 1) read, anything else
 * refused by name. */
static void threeway(const char *var, size_t field, const char *off, const char *on)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(*(int *)((char *)&p + field), -1, "%s: auto by default", var);
    const char *vals[] = {off, on, "auto"};
    const int want[] = {0, 1, -1};
    for (int i = 0; i < 3; i++) {
        setenv(var, vals[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK, "%s=%s", var, vals[i]);
        cr_assert_eq(*(int *)((char *)&p + field), want[i], "%s=%s", var, vals[i]);
    }
    setenv(var, "yes", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), var) != NULL);
    clear_env();
}
static void tristate(const char *var, size_t field) { threeway(var, field, "0", "1"); }

Test(param, ib_gdr) { tristate("RING_IB_GDR", offsetof(ring__params_t, ib_gdr)); }
Test(param, spin_yield) { tristate("RING_SPIN_YIELD", offsetof(ring__params_t, spin_yield)); }
Test(param, cuda_direct_work)
{
    threeway("RING_CUDA_DIRECT_WORK", offsetof(ring__params_t, cuda_direct_work), "each", "one");
}

Test(param, tcp_congestion)
{
    clear_env();
    ring__params_t p;
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_str_eq(p.tcp_cc, "auto");
    static const char *const good[] = {"system", "bbr", "cubic", "dctcp", "my_cc-2", "fifteen_chars_x"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        setenv("RING_TCP_CONGESTION", good[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK, "%s: %s", good[i], ring_comm_last_error(NULL));
        cr_assert_str_eq(p.tcp_cc, good[i]);
    }
    static const char *const bad[] = {"sixteen_chars_xy", "cu bic", "cubic;", "../x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("RING_TCP_CONGESTION", bad[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "%s accepted", bad[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "RING_TCP_CONGESTION") != NULL);
    }
    unsetenv("RING_TCP_CONGESTION");
}

Test(param, tcp_rto_max)
{
    clear_env();
    ring__params_t p;
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.tcp_rto_max_ms, 1000);
    cr_assert_eq(p.tcp_rto_max_set, 0);
    static const struct { const char *s; int v; } good[] = {{"0", 0}, {"1000", 1000}, {"2500", 2500}, {"120000", 120000}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        setenv("RING_TCP_RTO_MAX_MS", good[i].s, 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK, "%s: %s", good[i].s, ring_comm_last_error(NULL));
        cr_assert_eq(p.tcp_rto_max_ms, good[i].v, "%s gave %d", good[i].s, p.tcp_rto_max_ms);
        cr_assert_eq(p.tcp_rto_max_set, 1);
    }
    /* The kernel takes 1000 .. 120000 (TCP_RTO_MAX_MS): below or above is refused here, not
     * left for every socket to fail. */
    static const char *const bad[] = {"1", "999", "120001", "-1", "1s", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("RING_TCP_RTO_MAX_MS", bad[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "%s accepted", bad[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "RING_TCP_RTO_MAX_MS") != NULL);
    }
    unsetenv("RING_TCP_RTO_MAX_MS");
}

Test(param, tcp_duplex)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.tcp_duplex, 1, "duplex by default");
    setenv("RING_TCP_DUPLEX", "0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.tcp_duplex, 0);
    setenv("RING_TCP_DUPLEX", "2", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_TCP_DUPLEX") != NULL);
    clear_env();
}

Test(param, ib_timeout_and_retries)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.ib_timeout, 14, "67 ms per try by default");
    cr_assert_eq(p.ib_retry_cnt, 7);
    setenv("RING_IB_TIMEOUT", "18", 1);
    setenv("RING_IB_RETRY_CNT", "0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.ib_timeout, 18);
    cr_assert_eq(p.ib_retry_cnt, 0);
    /* 0 is "wait forever" in verbs, which no wait of ours may do */
    setenv("RING_IB_TIMEOUT", "0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_TIMEOUT") != NULL);
    setenv("RING_IB_TIMEOUT", "25", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    setenv("RING_IB_TIMEOUT", "14", 1);
    setenv("RING_IB_RETRY_CNT", "8", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_RETRY_CNT") != NULL);
    clear_env();
}

Test(param, ib_traffic_class_and_service_level)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert(p.ib_tc == 0 && p.ib_sl == 0, "the default class and level: %d %d", p.ib_tc, p.ib_sl);
    setenv("RING_IB_TC", "106", 1); /* DSCP 26 (AF31) with ECN capable: a common RoCE setting */
    setenv("RING_IB_SL", "3", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert(p.ib_tc == 106 && p.ib_sl == 3, "%d %d", p.ib_tc, p.ib_sl);
    setenv("RING_IB_TC", "255", 1);
    setenv("RING_IB_SL", "15", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert(p.ib_tc == 255 && p.ib_sl == 15, "%d %d", p.ib_tc, p.ib_sl);
    /* Both go into 8 and 4 bits: a larger value would be cut to another class or level. */
    setenv("RING_IB_TC", "256", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_TC") != NULL);
    setenv("RING_IB_TC", "0", 1);
    setenv("RING_IB_SL", "16", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_SL") != NULL);
    setenv("RING_IB_SL", "-1", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    clear_env();
}

Test(param, gid_address_ranges)
{
    uint8_t net[16];
    int prefix = -2;
    cr_assert_eq(ring__parse_gid_range("10.1.0.0/16", net, &prefix), 0);
    const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 0};
    cr_assert(!memcmp(net, v4, 16) && prefix == 112, "an IPv4 range as a GID: ::ffff:10.1.0.0, 96 + 16 bits (%d)", prefix);
    cr_assert_eq(ring__parse_gid_range("0.0.0.0/0", net, &prefix), 0);
    cr_assert_eq(prefix, 96);
    cr_assert_eq(ring__parse_gid_range("fd00::/8", net, &prefix), 0);
    cr_assert(net[0] == 0xfd && net[1] == 0 && prefix == 8, "%d", prefix);
    cr_assert_eq(ring__parse_gid_range("::/0", net, &prefix), 0);
    cr_assert_eq(prefix, 0);
    cr_assert_eq(ring__parse_gid_range("fe80::1/128", net, &prefix), 0);
    cr_assert_eq(prefix, 128);
    static const char *const bad[] = {"10.0.0.0", "10.0.0.0/33", "10.0.0.0/", "10.0.0/8", "fd00::/129", "fd00::/-1",
                                      "10.0.0.0/+8", "10.0.0.0/ 8", "10.0.0.0/8x", "host/8", "/8", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_neq(ring__parse_gid_range(bad[i], net, &prefix), 0, "\"%s\" taken", bad[i]);
    cr_assert_neq(ring__parse_gid_range(NULL, net, &prefix), 0);
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.ib_range_prefix, -1, "any address by default");
    setenv("RING_IB_ADDR_RANGE", "198.18.0.0/15", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert(p.ib_range_prefix == 111 && !strcmp(p.ib_range, "198.18.0.0/15"), "%d %s", p.ib_range_prefix, p.ib_range);
    setenv("RING_IB_ADDR_RANGE", "198.18.0.0", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_ADDR_RANGE=\"198.18.0.0\": expected an address range"), "%s",
              ring_comm_last_error(NULL));
    clear_env();
}

Test(param, ib_roce_version_and_address_family)
{
    ring__params_t p;
    clear_env();
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.ib_roce_version, 0, "any version by default");
    cr_assert_eq(p.ib_addr_family, 0, "any family by default");
    static const struct {
        const char *v, *f;
        int version, family;
    } ok[] = {{"1", "AF_INET", 1, 4}, {"2", "AF_INET6", 2, 6}, {"2", "ipv4", 2, 4}, {"", "ipv6", 0, 6}, {"1", "", 1, 0}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        setenv("RING_IB_ROCE_VERSION", ok[i].v, 1);
        setenv("RING_IB_ADDR_FAMILY", ok[i].f, 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK, "%s %s: %s", ok[i].v, ok[i].f, ring_comm_last_error(NULL));
        cr_assert_eq(p.ib_roce_version, ok[i].version, "%s", ok[i].v);
        cr_assert_eq(p.ib_addr_family, ok[i].family, "%s", ok[i].f);
    }
    static const char *const bad_version[] = {"0", "3", "v2", "2 "};
    setenv("RING_IB_ADDR_FAMILY", "", 1);
    for (size_t i = 0; i < sizeof bad_version / sizeof *bad_version; i++) {
        setenv("RING_IB_ROCE_VERSION", bad_version[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "\"%s\"", bad_version[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "RING_IB_ROCE_VERSION") != NULL);
    }
    static const char *const bad_family[] = {"inet", "AF_INET4", "4", "IPv6"};
    setenv("RING_IB_ROCE_VERSION", "", 1);
    for (size_t i = 0; i < sizeof bad_family / sizeof *bad_family; i++) {
        setenv("RING_IB_ADDR_FAMILY", bad_family[i], 1);
        cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG, "\"%s\"", bad_family[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "expected AF_INET or AF_INET6") != NULL, "%s", ring_comm_last_error(NULL));
    }
    clear_env();
}

/* ---- how a waiting rank spins ------------------------------------------------------------- */

static void ranks_on(ring__peer_info_t *p, int n, const uint32_t *kernel, const int *first, const int *count)
{
    memset(p, 0, sizeof *p * (size_t)n);
    for (int r = 0; r < n; r++) {
        p[r].kernel = kernel[r];
        p[r].cpu_first = (uint16_t)first[r];
        p[r].cpu_count = (uint16_t)count[r];
    }
}

Test(spin, busy_only_when_no_rank_shares_a_cpu)
{
    ring__peer_info_t p[4];
    const uint32_t one[] = {7, 7, 7, 7}, two[] = {7, 7, 9, 9};
    /* ringrun's binding: one CPU each, all different. */
    ranks_on(p, 2, one, (int[]){0, 1}, (int[]){1, 1});
    cr_assert(ring__spin_busy_pick(p, 2, 0, 2));
    cr_assert(ring__spin_busy_pick(p, 2, 1, 2));
    /* Both bound to CPU 0 (taskset on the launcher). */
    ranks_on(p, 2, one, (int[]){0, 0}, (int[]){1, 1});
    cr_assert_not(ring__spin_busy_pick(p, 2, 0, 2));
    /* Unbound: as many CPUs as ranks, or fewer. */
    ranks_on(p, 2, one, (int[]){0, 0}, (int[]){2, 2});
    cr_assert(ring__spin_busy_pick(p, 2, 0, 2));
    ranks_on(p, 4, one, (int[]){0, 0, 0, 0}, (int[]){2, 2, 2, 2});
    cr_assert_not(ring__spin_busy_pick(p, 4, 0, 2), "4 ranks on 2 CPUs");
    cr_assert_not(ring__spin_busy_pick(p, 4, 0, 8), "4 ranks each allowed on the same 2 of 8 CPUs");
    ranks_on(p, 4, one, (int[]){0, 0, 0, 0}, (int[]){8, 8, 8, 8});
    cr_assert(ring__spin_busy_pick(p, 4, 3, 8));
    /* Two machines of 2 ranks on 2 CPUs each: only the ranks of a machine count. Stand-in
     * host names (RING_HOST_ID) keep the kernel, so namespaces of one machine still count. */
    ranks_on(p, 4, two, (int[]){0, 0, 0, 0}, (int[]){2, 2, 2, 2});
    cr_assert(ring__spin_busy_pick(p, 4, 0, 2));
    cr_assert(ring__spin_busy_pick(p, 4, 2, 2));
    /* A mix of bound and unbound ranks, or an unknown kernel: yield. */
    ranks_on(p, 2, one, (int[]){0, 0}, (int[]){1, 2});
    cr_assert_not(ring__spin_busy_pick(p, 2, 0, 2));
    ranks_on(p, 2, (uint32_t[]){0, 0}, (int[]){0, 1}, (int[]){1, 1});
    cr_assert_not(ring__spin_busy_pick(p, 2, 0, 2));
}

/* A file under dir, with its parent directories. */
static void put_file(const char *dir, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *s = path + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(spin, cgroup_cpu_limits_v1_and_v2)
{
    char dir[] = "/tmp/ringcomm-cg-XXXXXX", proc[600], root[600];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(proc, sizeof proc, "%s/cgroup", dir);
    snprintf(root, sizeof root, "%s/fs", dir);
    /* v2: the group itself has no limit, its parent 1.5 CPUs (rounded up), the root none. */
    put_file(dir, "cgroup", "0::/pod/ctr\n");
    put_file(dir, "fs/cpu.max", "max 100000\n");
    put_file(dir, "fs/pod/cpu.max", "150000 100000\n");
    put_file(dir, "fs/pod/ctr/cpu.max", "max 100000\n");
    cr_assert_eq(ring__cgroup_cpu_limit(proc, root), 2);
    /* The tighter of two levels. */
    put_file(dir, "fs/pod/ctr/cpu.max", "100000 100000\n");
    cr_assert_eq(ring__cgroup_cpu_limit(proc, root), 1);
    /* v1 (hybrid: the cpu controller's line wins over "0::"), mounted as cpu,cpuacct. */
    put_file(dir, "cgroup", "4:memory:/x\n3:cpu,cpuacct:/job\n0::/\n");
    put_file(dir, "fs/cpu,cpuacct/job/cpu.cfs_quota_us", "400000\n");
    put_file(dir, "fs/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    cr_assert_eq(ring__cgroup_cpu_limit(proc, root), 4);
    put_file(dir, "fs/cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
    cr_assert_eq(ring__cgroup_cpu_limit(proc, root), 0, "-1: no limit");
    /* Unreadable or unknown: no limit. */
    put_file(dir, "cgroup", "garbage\n");
    cr_assert_eq(ring__cgroup_cpu_limit(proc, root), 0);
    cr_assert_eq(ring__cgroup_cpu_limit("/nonexistent/cgroup", root), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- collective descriptors -------------------------------------------------------------- */

/* A rank's hints (how it moves its bytes, e.g. GPUDirect RDMA) never make a mismatch; every
 * field of the call still does, and the message still names both calls. */
Test(desc, hints_are_not_compared_but_the_call_is)
{
    float x[4];
    ring_comm_t *c = calloc(1, sizeof *c); /* enough of one for the error path */
    cr_assert_not_null(c);
    pthread_mutex_init(&c->err_mu, NULL);
    ring__opdesc_t a = {.coll = RING__COLL_ALLREDUCE, .seq = 7, .count = 4, .dtype = RING_FLOAT32, .op = RING_SUM,
                        .sendbuf = x, .recvbuf = x};
    ring__opdesc_t b = a;
    unsigned char da[RING__DESC_LEN], db[RING__DESC_LEN];
    ring__desc_build(da, &a, RING__ALGO_RING | RING__DESC_GDR);
    ring__desc_build(db, &b, RING__ALGO_RING);
    cr_assert_eq(ring__desc_hints(da), (uint32_t)RING__DESC_GDR);
    cr_assert_eq(ring__desc_hints(db), 0u);
    cr_assert_eq(ring__desc_check(c, da, db, "left neighbour", "rank 1"), RING_OK);
    cr_assert_eq(ring__desc_check(c, db, da, "left neighbour", "rank 1"), RING_OK);
    b.count = 5;
    ring__desc_build(db, &b, RING__ALGO_RING | RING__DESC_GDR);
    cr_assert_eq(ring__desc_check(c, da, db, "left neighbour", "rank 1"), RING_ERR_MISMATCH);
    cr_assert(strstr(c->errmsg, "count=5") != NULL, "%s", c->errmsg);
    b.count = 4;
    ring__desc_build(db, &b, RING__ALGO_RD | RING__DESC_GDR);
    cr_assert_eq(ring__desc_check(c, da, db, "left neighbour", "rank 1"), RING_ERR_MISMATCH, "the algorithm is compared");
    ring__desc_build(db, &b, RING__ALGO_RING | RING__ALGO_CUDA_IPC);
    cr_assert_eq(ring__desc_check(c, da, db, "left neighbour", "rank 1"), RING_ERR_MISMATCH, "CUDA IPC is compared");
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

/* One byte of a neighbour's descriptor flipped on the wire, at every place of every word after
 * the magic: either garbage (RING_ERR_PROTOCOL: a field no rank builds) or a mismatch whose
 * two calls read differently. A flip in a barrier's count was a mismatch between "#4 barrier"
 * and "#4 barrier". */
Test(desc, a_descriptor_no_rank_builds_is_garbage_and_a_mismatch_names_the_difference)
{
    float x[4];
    ring_comm_t *c = calloc(1, sizeof *c); /* enough of one for the error path */
    cr_assert_not_null(c);
    pthread_mutex_init(&c->err_mu, NULL);
    c->nranks = 4;
    const ring__opdesc_t calls[] = {
        {.coll = RING__COLL_BARRIER, .seq = 4},
        {.coll = RING__COLL_ALLREDUCE, .seq = 9, .count = 4, .dtype = RING_FLOAT32, .op = RING_SUM, .sendbuf = x, .recvbuf = x},
        {.coll = RING__COLL_BROADCAST, .seq = 2, .count = 3, .dtype = RING_INT8, .root = 1, .sendbuf = x, .recvbuf = x},
    };
    int garbage = 0, mismatches = 0;
    for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
        unsigned char mine[RING__DESC_LEN], theirs[RING__DESC_LEN];
        ring__desc_build(mine, &calls[k], RING__ALGO_RING);
        for (int off = 4; off < RING__DESC_LEN; off++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(theirs, mine, sizeof theirs);
                theirs[off] ^= (unsigned char)(1u << bit);
                ring_result_t rc = ring__desc_check(c, mine, theirs, "left neighbour", "rank 1");
                if (rc == RING_OK) {
                    cr_assert(off == RING__DESC_LEN - 4 + 1 && bit == 1, "call %zu, byte %d bit %d: no error", k, off, bit);
                    continue; /* the GDR hint bit (0x200), which is not compared */
                }
                if (rc == RING_ERR_PROTOCOL) {
                    cr_assert(strstr(c->errmsg, "no rank builds"), "%s", c->errmsg);
                    garbage++;
                    continue;
                }
                cr_assert_eq(rc, RING_ERR_MISMATCH, "call %zu, byte %d bit %d: %s", k, off, bit, ring_result_name(rc));
                const char *a = strstr(c->errmsg, " called "), *b = a ? strstr(a + 1, " called ") : NULL;
                cr_assert(a && b, "%s", c->errmsg);
                size_t la = (size_t)(strstr(a, " but ") - a) - 8;
                cr_assert(strlen(b + 8) != la || strncmp(a + 8, b + 8, la) != 0,
                          "call %zu, byte %d bit %d: the two calls read the same: %s", k, off, bit, c->errmsg);
                mismatches++;
            }
    }
    cr_log_info("%d flips garbage, %d mismatches", garbage, mismatches);
    cr_assert_gt(garbage, 0);
    cr_assert_gt(mismatches, 0);
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

/* A message in the descriptor's place that is not one (a flip in its magic, another
 * program's bytes): garbage naming the sender, never a mismatch read out of foreign fields. */
Test(desc, a_message_without_the_descriptor_magic_is_garbage_from_the_sender)
{
    ring_comm_t *c = calloc(1, sizeof *c); /* enough of one for the error path */
    cr_assert_not_null(c);
    pthread_mutex_init(&c->err_mu, NULL);
    c->nranks = 4;
    const ring__opdesc_t call = {.coll = RING__COLL_BARRIER, .seq = 4};
    unsigned char mine[RING__DESC_LEN], theirs[RING__DESC_LEN];
    ring__desc_build(mine, &call, RING__ALGO_RING);
    for (int off = 0; off < 4; off++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(theirs, mine, sizeof theirs);
            theirs[off] ^= (unsigned char)(1u << bit);
            cr_assert_eq(ring__desc_check(c, mine, theirs, "left neighbour", "rank 1"), RING_ERR_PROTOCOL,
                         "byte %d bit %d", off, bit);
            cr_assert(strstr(c->errmsg, "garbage from rank 1 where a collective descriptor was expected"), "%s",
                      c->errmsg);
        }
    memset(theirs, 0, sizeof theirs);
    cr_assert_eq(ring__desc_check(c, mine, theirs, "left neighbour", "rank 1"), RING_ERR_PROTOCOL, "zeros");
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

/* ---- errors ----------------------------------------------------------------------------- */

Test(errors, every_code_has_a_name_and_text)
{
    for (int r = RING_OK; r <= RING_ERR_INTERNAL; r++) {
        const char *s = ring_strerror((ring_result_t)r), *n = ring_result_name((ring_result_t)r);
        cr_assert(s && *s && strcmp(s, "unknown result code") != 0, "code %d", r);
        cr_assert(n && strncmp(n, "RING_", 5) == 0, "code %d", r);
    }
    cr_assert_str_eq(ring_result_name(RING_ERR_TIMEOUT), "RING_ERR_TIMEOUT");
    cr_assert_str_eq(ring_strerror((ring_result_t)999), "unknown result code");
    cr_assert_eq(ring_version(), RING_VERSION_CODE);
}

Test(errors, dtype_sizes)
{
    cr_assert_eq(ring_dtype_size(RING_INT8), 1);
    cr_assert_eq(ring_dtype_size(RING_BFLOAT16), 2);
    cr_assert_eq(ring_dtype_size(RING_FLOAT32), 4);
    cr_assert_eq(ring_dtype_size(RING_UINT64), 8);
    cr_assert_eq(ring_dtype_size((ring_dtype_t)42), 0);
}

Test(errors, errno_text_is_kept)
{
    ring__seterr_errno(NULL, RING_ERR_SYSTEM, ECONNREFUSED, "connect to %s", "x");
    cr_assert(strstr(ring_comm_last_error(NULL), "connect to x") != NULL);
    cr_assert(strstr(ring_comm_last_error(NULL), "refused") != NULL, "got: %s", ring_comm_last_error(NULL));
}

/* ---- bootstrap wire format ---------------------------------------------------------------- */

Test(bootstrap, hello_roundtrip_and_rejections)
{
    uint8_t secret[16], other[16];
    memset(secret, 7, 16);
    memset(other, 8, 16);
    ring__peer_info_t info = {0}, got;
    info.addr.len = 16;
    memset(info.addr.data, 0xab, 16);
    strcpy(info.host, "nodeA");
    strcpy(info.bootid, "boot-1");
    info.pid = 1234;
    info.kernel = 0x89abcdefu;
    info.cpu_first = 300;
    info.cpu_count = 2;
    info.flags = RING__PEER_SHM | RING__PEER_CUDA_DIRECT;
    info.numa_nodes = 200;
    info.shm_id = 0xfedcba9876543211ull;
    unsigned char buf[RING__HELLO_LEN];
    uint32_t rank, nranks;
    ring_result_t code;
    ring__hello_build(buf, secret, 3, 8, &info);
    cr_assert_null(ring__hello_parse(buf, secret, &rank, &nranks, &got, &code));
    cr_assert_eq(rank, 3);
    cr_assert_eq(nranks, 8);
    cr_assert_str_eq(got.host, "nodeA");
    cr_assert_eq(got.pid, 1234);
    cr_assert_eq(got.kernel, 0x89abcdefu);
    cr_assert_eq(got.cpu_first, 300);
    cr_assert_eq(got.cpu_count, 2);
    cr_assert_eq(got.flags, RING__PEER_SHM | RING__PEER_CUDA_DIRECT);
    cr_assert_eq(got.numa_nodes, 200);
    cr_assert_eq(got.shm_id, 0xfedcba9876543211ull, "shm_id %#llx", (unsigned long long)got.shm_id);
    cr_assert_eq(memcmp(got.addr.data, info.addr.data, 16), 0);

    cr_assert_not_null(ring__hello_parse(buf, other, &rank, &nranks, &got, &code));
    cr_assert_eq(code, RING_ERR_AUTH);
    /* Another version: named with both numbers where the secret is the job's, a stranger's
     * secret first otherwise. */
    unsigned char ver[RING__HELLO_LEN];
    memcpy(ver, buf, sizeof ver);
    ring__put32(ver + 4, 7);
    const char *why = ring__hello_parse(ver, secret, &rank, &nranks, &got, &code);
    cr_assert(why && strstr(why, "rank 3 runs ringcomm protocol version 7") && code == RING_ERR_AUTH, "%s", why);
    why = ring__hello_parse(ver, other, &rank, &nranks, &got, &code);
    cr_assert(why && strstr(why, "wrong job secret"), "%s", why);

    unsigned char bad[RING__HELLO_LEN];
    memcpy(bad, buf, sizeof bad);
    bad[0] ^= 1;
    cr_assert_not_null(ring__hello_parse(bad, secret, &rank, &nranks, &got, &code));
    cr_assert_eq(code, RING_ERR_PROTOCOL);

    /* An address length beyond the field must be refused, not used to size a copy. */
    memcpy(bad, buf, sizeof bad);
    bad[32] = 0xff;
    bad[33] = 0xff;
    cr_assert_not_null(ring__hello_parse(bad, secret, &rank, &nranks, &got, &code));

    /* Unterminated strings from the wire come back terminated. */
    memcpy(bad, buf, sizeof bad);
    memset(bad + 32 + 132, 'x', RING__HOST_MAX);
    cr_assert_null(ring__hello_parse(bad, secret, &rank, &nranks, &got, &code));
    cr_assert_eq(strlen(got.host), RING__HOST_MAX - 1);

    /* Random garbage never parses as valid. */
    srand(1);
    for (int t = 0; t < 1000; t++) {
        for (size_t i = 0; i < sizeof bad; i++) bad[i] = (unsigned char)rand();
        cr_assert_not_null(ring__hello_parse(bad, secret, &rank, &nranks, &got, &code));
    }
}

/* ---- single-rank communicator ------------------------------------------------------------ */

/* A collective's failure text is what its own thread set, even when another thread's refused
 * call on the same communicator overwrote the last error in between: the text goes to every
 * rank (ring__comm_fail), and it used to be read back from comm->errmsg after the collective
 * returned, so another thread's "invalid dtype" could be sent as this call's cause. */
static void *refused_call(void *c)
{
    ring_result_t rc = ring_allreduce(c, NULL, NULL, 1, (ring_dtype_t)99, RING_SUM);
    return (void *)(intptr_t)rc;
}

Test(comm, failure_text_of_a_collective_survives_another_threads_refused_call)
{
    clear_env();
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    ring__op_begin(c);
    ring__seterr(c, RING_ERR_TIMEOUT, "allreduce #7: the collective's own failure");
    pthread_t t;
    void *res;
    cr_assert_eq(pthread_create(&t, NULL, refused_call, c), 0);
    pthread_join(t, &res);
    cr_assert_eq((ring_result_t)(intptr_t)res, RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(c), "invalid dtype"), "%s", ring_comm_last_error(c));
    char out[RING__ERRMSG_MAX];
    ring__op_error(c, out, sizeof out);
    ring__op_end();
    cr_assert_str_eq(out, "allreduce #7: the collective's own failure");
    /* Outside a collective, the communicator's last error, whoever set it. */
    ring__op_error(c, out, sizeof out);
    cr_assert(strstr(out, "invalid dtype"), "%s", out);
    ring_comm_destroy(c);
}

Test(comm, single_rank_runs_every_collective)
{
    clear_env();
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring_comm_rank(c), 0);
    cr_assert_eq(ring_comm_nranks(c), 1);
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    cr_assert_eq(ring_allreduce(c, in, out, 5, RING_FLOAT32, RING_AVG), RING_OK);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    memset(out, 0, sizeof out);
    cr_assert_eq(ring_reduce_scatter(c, in, out, 5, RING_FLOAT32, RING_SUM), RING_OK);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    memset(out, 0, sizeof out);
    cr_assert_eq(ring_allgather(c, in, out, 5, RING_FLOAT32), RING_OK);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    cr_assert_eq(ring_broadcast(c, in, 5, RING_FLOAT32, 0), RING_OK);
    cr_assert_eq(ring_barrier(c), RING_OK);
    ring_request_t *rq = NULL;
    cr_assert_eq(ring_allreduce_async(c, in, in, 5, RING_FLOAT32, RING_SUM, &rq), RING_OK);
    int done = 0;
    /* The progress thread finishes it; on a loaded machine (tests run two at a time on two
     * cores) that thread may wait a while for a CPU, so the bound is time, not a count of tries. */
    for (int64_t end = ring__now_ns() + 10000000000LL; !done && ring__now_ns() < end;) {
        cr_assert_eq(ring_test(rq, &done), RING_OK);
        if (!done) sched_yield();
    }
    cr_assert(done, "the progress thread did not finish a 1-rank all-reduce in 10 s");
    cr_assert_eq(ring_wait(rq), RING_OK);
    /* Argument errors leave the communicator usable. */
    cr_assert_eq(ring_allreduce(c, NULL, out, 5, RING_FLOAT32, RING_SUM), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_allreduce(c, in, out, 5, (ring_dtype_t)77, RING_SUM), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_allreduce(c, in, out, 5, RING_FLOAT32, (ring_op_t)77), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_allreduce(c, in, in + 1, 3, RING_FLOAT32, RING_SUM), RING_ERR_INVALID_ARG, "partial overlap");
    cr_assert_eq(ring_allreduce(c, in, out, SIZE_MAX / 2, RING_FLOAT32, RING_SUM), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_broadcast(c, in, 5, RING_FLOAT32, 1), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_allreduce(c, in, out, 5, RING_FLOAT32, RING_SUM), RING_OK);
    /* Abort fails later calls with RING_ERR_ABORTED. */
    cr_assert_eq(ring_comm_abort(c), RING_OK);
    cr_assert_eq(ring_allreduce(c, in, out, 5, RING_FLOAT32, RING_SUM), RING_ERR_ABORTED);
    cr_assert(strstr(ring_comm_last_error(c), "abort") != NULL);
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
    cr_assert_eq(ring_comm_destroy(NULL), RING_OK);
}

Test(comm, init_argument_errors)
{
    ring_comm_t *c = (ring_comm_t *)0x1;
    cr_assert_eq(ring_comm_init(&c, 0, 0, "127.0.0.1:1"), RING_ERR_INVALID_ARG);
    cr_assert_null(c);
    cr_assert_eq(ring_comm_init(&c, 2, 2, "127.0.0.1:1"), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_init(&c, 2, 0, NULL), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_init(NULL, 2, 0, "127.0.0.1:1"), RING_ERR_INVALID_ARG);
    /* A malformed root fails one rank too (it passed there, to fail the same program at two);
     * NULL or "" is still one rank's "no root". */
    static const char *const bad_roots[] = {"127.0.0.1:4x", "127.0.0.1", ":0", "127.0.0.1:65536", "::1:4000"};
    for (size_t i = 0; i < sizeof bad_roots / sizeof bad_roots[0]; i++) {
        cr_assert_eq(ring_comm_init(&c, 1, 0, bad_roots[i]), RING_ERR_INVALID_ARG, "%s", bad_roots[i]);
        cr_assert(strstr(ring_comm_last_error(NULL), "bad root address"), "%s", ring_comm_last_error(NULL));
    }
    cr_assert_eq(ring_comm_init(&c, 1, 0, ""), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
    cr_assert_eq(ring_comm_init(&c, 1, 0, "localhost:29500"), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
    cr_assert_eq(ring_allreduce(NULL, NULL, NULL, 0, RING_FLOAT32, RING_SUM), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_wait(NULL), RING_ERR_INVALID_ARG);
}

/* Registration is local and optional: without a verbs transport it records the buffer and
 * changes nothing, and its errors are the usual ones. ASan's leak check covers destroy with
 * registrations left. */
Test(comm, register_and_deregister_buffers)
{
    ring_comm_t *c = NULL, *d = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    float buf[256], out[256];
    for (int i = 0; i < 256; i++) buf[i] = (float)i;
    ring_reg_t *h = NULL, *h2 = NULL, *h3 = NULL;
    cr_assert_eq(ring_comm_register(c, buf, sizeof buf, &h), RING_OK, "%s", ring_comm_last_error(c));
    cr_assert_not_null(h);
    cr_assert_eq(ring_comm_register(c, out, sizeof out, &h2), RING_OK);
    cr_assert_eq(ring_allreduce(c, buf, out, 256, RING_FLOAT32, RING_SUM), RING_OK, "%s", ring_comm_last_error(c));
    cr_assert_eq(out[255], 255.0f);
    cr_assert_eq(ring_comm_register(c, NULL, 8, &h3), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_register(c, buf, 0, &h3), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_register(c, buf, 8, NULL), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_register(NULL, buf, 8, &h3), RING_ERR_INVALID_ARG);
    cr_assert_eq(ring_comm_deregister(c, h), RING_OK);
    cr_assert_eq(ring_comm_deregister(c, h2), RING_OK);
    /* A handle of another communicator is refused, not freed. */
    cr_assert_eq(ring_comm_init(&d, 1, 0, NULL), RING_OK);
    cr_assert_eq(ring_comm_register(d, buf, sizeof buf, &h3), RING_OK);
    cr_assert_eq(ring_comm_deregister(c, h3), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(c), "not a registration of this communicator"), "%s", ring_comm_last_error(c));
    cr_assert_eq(ring_comm_deregister(NULL, h3), RING_ERR_INVALID_ARG);
    /* Left registered: destroy releases it. */
    cr_assert_eq(ring_comm_register(c, out, sizeof out, &h), RING_OK);
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
    cr_assert_eq(ring_comm_destroy(d), RING_OK);
}

Test(comm, unreachable_root_fails_with_a_named_address_within_the_timeout)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "300", 1);
    ring_comm_t *c = NULL;
    /* Port 1 on loopback: nobody listens there, so every connect is refused. */
    ring_result_t r = ring_comm_init(&c, 2, 1, "127.0.0.1:1");
    cr_assert_eq(r, RING_ERR_CONNECT, "got %s: %s", ring_result_name(r), ring_comm_last_error(c));
    cr_assert(strstr(ring_comm_last_error(c), "127.0.0.1:1") != NULL, "%s", ring_comm_last_error(c));
    cr_assert(strstr(ring_comm_last_error(NULL), "127.0.0.1:1") != NULL);
    cr_assert_eq(ring_allreduce(c, NULL, NULL, 0, RING_FLOAT32, RING_SUM), RING_ERR_CONNECT, "failed comm fails fast");
    ring_comm_destroy(c);
    clear_env();
}

Test(comm, root_waits_then_names_missing_ranks)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "300", 1);
    ring_comm_t *c = NULL;
    ring_result_t r = ring_comm_init(&c, 3, 0, "127.0.0.1:0");
    /* Port 0 is refused by the address parser: the root must be a real port. */
    cr_assert_eq(r, RING_ERR_INVALID_ARG);
    ring_comm_destroy(c);
    c = NULL;
    char root[32];
    snprintf(root, sizeof root, "127.0.0.1:%d", free_port());
    r = ring_comm_init(&c, 3, 0, root);
    cr_assert_eq(r, RING_ERR_TIMEOUT, "got %s: %s", ring_result_name(r), ring_comm_last_error(c));
    cr_assert(strstr(ring_comm_last_error(c), "missing rank(s) 1, 2") != NULL, "%s", ring_comm_last_error(c));
    ring_comm_destroy(c);
    clear_env();
}

/* ---- two ranks inside one process ---------------------------------------------------------
 * Each rank is its own communicator on its own thread: real sockets on loopback, and the
 * harness can observe both sides without processes. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct pair_arg {
    int rank, nranks; /* nranks 0: 2 */
    char root[64];
    ring_comm_t *comm;
    ring_result_t rc;
    double ms; /* how long init took */
} pair_arg;

static double now_ms(void);

static void *init_thread(void *p)
{
    pair_arg *a = p;
    double t0 = now_ms();
    a->rc = ring_comm_init(&a->comm, a->nranks ? a->nranks : 2, a->rank, a->root);
    a->ms = now_ms() - t0;
    return NULL;
}

/* Rank `rank` of nranks (0: 2) joining the root on this port, on thread *t. */
static void start_rank(pair_arg *a, pthread_t *t, int rank, int nranks, int port)
{
    *a = (pair_arg){.rank = rank, .nranks = nranks};
    snprintf(a->root, sizeof a->root, "127.0.0.1:%d", port);
    pthread_create(t, NULL, init_thread, a);
}

static void init_pair(ring_comm_t **c0, ring_comm_t **c1)
{
    pair_arg a[2];
    pthread_t t[2];
    int port = free_port();
    for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 2, port);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    cr_assert_eq(a[0].rc, RING_OK, "rank 0: %s", ring_comm_last_error(a[0].comm));
    cr_assert_eq(a[1].rc, RING_OK, "rank 1: %s", ring_comm_last_error(a[1].comm));
    *c0 = a[0].comm;
    *c1 = a[1].comm;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct coll_arg {
    ring_comm_t *comm;
    size_t count;
    float *buf;
    ring_result_t rc;
    double t_end;
} coll_arg;

static void *allreduce_thread(void *p)
{
    coll_arg *a = p;
    a->rc = ring_allreduce(a->comm, a->buf, a->buf, a->count, RING_FLOAT32, RING_SUM);
    a->t_end = now_ms();
    return NULL;
}

Test(pair, allreduce_between_two_threads)
{
    clear_env();
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    float b0[1000], b1[1000];
    for (int i = 0; i < 1000; i++) b0[i] = (float)i, b1[i] = (float)(2 * i);
    coll_arg a0 = {.comm = c0, .count = 1000, .buf = b0}, a1 = {.comm = c1, .count = 1000, .buf = b1};
    pthread_t t0, t1;
    pthread_create(&t0, NULL, allreduce_thread, &a0);
    pthread_create(&t1, NULL, allreduce_thread, &a1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cr_assert_eq(a0.rc, RING_OK, "%s", ring_comm_last_error(c0));
    cr_assert_eq(a1.rc, RING_OK, "%s", ring_comm_last_error(c1));
    for (int i = 0; i < 1000; i++) cr_assert(b0[i] == 3.0f * i && b1[i] == 3.0f * i, "element %d", i);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
}

/* A raw connection to the root at port that says HELLO as rank 2 of 3 with this secret and
 * protocol version (waiting up to 5 s for the root to listen); the REJECT's text in rej. */
/* A HELLO from a raw socket as rank `rank` of `nranks`; version 0 keeps this build's, another
 * is sent as builds up to version 9 sent theirs (288 bytes). The REJECT's text in rej ("" when
 * the root sent none). */
static void stray_hello(int port, const uint8_t secret[16], uint32_t rank, uint32_t nranks, uint32_t version,
                        char rej[RING__REJECT_MSG_LEN + 1])
{
    int fd = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 500 && fd < 0; i++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) close(fd), fd = -1, usleep(10000);
    }
    cr_assert_geq(fd, 0, "the root never listened");
    ring__peer_info_t info;
    memset(&info, 0, sizeof info);
    info.addr.len = sizeof sa;
    memcpy(info.addr.data, &sa, sizeof sa);
    strcpy(info.host, "elsewhere");
    strcpy(info.bootid, "other-build");
    unsigned char hello[RING__HELLO_LEN];
    ring__hello_build(hello, secret, rank, nranks, &info);
    size_t len = sizeof hello;
    if (version) {
        ring__put32(hello + 4, version);
        /* As long as versions up to 9 made it (their entries had 256 bytes): such a rank has
         * sent all it will, and the root must answer from the header, not wait for the rest. */
        len = 288;
    }
    cr_assert_eq(write(fd, hello, len), (ssize_t)len);
    unsigned char b[RING__TABLE_HDR_LEN + RING__REJECT_MSG_LEN] = {0};
    size_t got = 0;
    for (ssize_t k; got < sizeof b && (k = read(fd, b + got, sizeof b - got)) > 0;) got += (size_t)k;
    close(fd);
    memcpy(rej, b + RING__TABLE_HDR_LEN, RING__REJECT_MSG_LEN);
    rej[RING__REJECT_MSG_LEN] = '\0';
}

/* A rank of the job (the right secret) that runs another protocol version (another ringcomm
 * build) fails the job at once on the root and on every rank that joined, naming both
 * versions; the root used to turn it away and wait out RING_TIMEOUT_MS with "missing rank(s)
 * 2". Rank 2 here is a raw socket that sends a HELLO of version 8, 288 bytes long as such
 * builds sent it (the root settles it from its header). */
Test(bootstrap, a_rank_of_another_protocol_version_fails_the_job_at_once, .timeout = 60)
{
    clear_env();
    setenv("RING_SECRET", "00112233445566778899aabbccddeeff", 1);
    setenv("RING_TIMEOUT_MS", "20000", 1);
    char logpath[] = "/tmp/ringlog-version-XXXXXX";
    int lfd = mkstemp(logpath);
    cr_assert_geq(lfd, 0);
    close(lfd);
    setenv("RING_DEBUG", "TRACE", 1);
    setenv("RING_DEBUG_SUBSYS", "INIT", 1);
    setenv("RING_DEBUG_FILE", logpath, 1);
    ring__params_t prm;
    cr_assert_eq(ring__params_resolve(&prm, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    pair_arg a[2];
    pthread_t t[2];
    int port = free_port();
    for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 3, port);
    /* Rank 2 only once rank 1 joined (the root's TRACE line), so that rank 1 hears the reason. */
    char text[16384] = "";
    for (int i = 0; i < 1000 && !strstr(text, "rank 1 joined"); i++) {
        usleep(10000);
        FILE *f = fopen(logpath, "r");
        if (!f) continue;
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    cr_assert(strstr(text, "rank 1 joined"), "rank 1 never joined: %s", text);
    char rej[RING__REJECT_MSG_LEN + 1];
    stray_hello(port, prm.secret, 2, 3, 8, rej);
    cr_assert(strstr(rej, "rank 2 runs ringcomm protocol version 8"), "REJECT: %s", rej);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    unlink(logpath);
    for (int r = 0; r < 2; r++) {
        const char *m = ring_comm_last_error(a[r].comm);
        cr_assert_eq(a[r].rc, RING_ERR_AUTH, "rank %d: %s: %s", r, ring_result_name(a[r].rc), m);
        cr_assert(strstr(m, "rank 2 runs ringcomm protocol version 8") && strstr(m, "same ringcomm build"), "rank %d: %s",
                  r, m);
        cr_assert(r == 0 || (strstr(m, "failed init before rank 1 got the rank table") && !strstr(m, "rejected rank 1")),
                  "rank 1 was not the one turned away: %s", m);
        cr_assert_lt(a[r].ms, 10000, "rank %d took %.0f ms: the root waited for its timeout", r, a[r].ms);
        ring_comm_destroy(a[r].comm);
    }
    clear_env();
}

/* The same HELLO without RING_SECRET: every job then has the built-in secret, so a stray
 * process of another job and build is no rank of this one. It is turned away, and the job goes
 * on when its real rank 2 comes (it ended the job before). */
Test(bootstrap, a_stray_of_another_version_without_ring_secret_is_only_turned_away, .timeout = 60)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "20000", 1);
    ring__params_t prm;
    cr_assert_eq(ring__params_resolve(&prm, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert(!prm.secret_set);
    pair_arg a[3];
    pthread_t t[3];
    int port = free_port();
    for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 3, port);
    char rej[RING__REJECT_MSG_LEN + 1];
    stray_hello(port, prm.secret, 2, 3, 8, rej);
    cr_assert(strstr(rej, "protocol version 8"), "REJECT: %s", rej);
    start_rank(&a[2], &t[2], 2, 3, port);
    for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s: %s", r, ring_result_name(a[r].rc), ring_comm_last_error(a[r].comm));
        ring_comm_destroy(a[r].comm);
    }
    clear_env();
}

/* A HELLO with the job's secret and version that claims a rank past the table (rank ==
 * nranks, or 2^32 - 1) is turned away as out of range, and the job goes on: the root indexes
 * its connection and entry arrays by that rank, one past their end at rank == nranks. */
Test(bootstrap, a_hello_claiming_a_rank_past_the_table_is_turned_away, .timeout = 60)
{
    clear_env();
    setenv("RING_SECRET", "00112233445566778899aabbccddeeff", 1);
    setenv("RING_TIMEOUT_MS", "20000", 1);
    ring__params_t prm;
    cr_assert_eq(ring__params_resolve(&prm, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    pair_arg a[3];
    pthread_t t[3];
    int port = free_port();
    for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 3, port);
    const uint32_t claims[] = {3, 0xffffffffu};
    for (int i = 0; i < 2; i++) {
        char rej[RING__REJECT_MSG_LEN + 1];
        stray_hello(port, prm.secret, claims[i], 3, 0, rej);
        cr_assert(strstr(rej, "out of range for nranks=3"), "rank %u: REJECT: \"%s\"", claims[i], rej);
    }
    start_rank(&a[2], &t[2], 2, 3, port);
    for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s: %s", r, ring_result_name(a[r].rc), ring_comm_last_error(a[r].comm));
        ring_comm_destroy(a[r].comm);
    }
    clear_env();
}

/* Two ranks as threads of this process, with no Criterion assertion (for forked children):
 * RING_OK when both inits, one all-reduce and both destroys went well; otherwise the failing
 * step and its message go to stderr, the child's only way to say why. */
static ring_result_t pair_round_plain(int port)
{
    pair_arg a[2];
    pthread_t t[2];
    for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 2, port);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    ring_result_t rc = a[0].rc != RING_OK ? a[0].rc : a[1].rc;
    for (int r = 0; r < 2; r++)
        if (a[r].rc != RING_OK)
            fprintf(stderr, "[pid %d] rank %d of a pair on port %d: init: %s: %s\n", (int)getpid(), r, port,
                    ring_result_name(a[r].rc), ring_comm_last_error(a[r].comm));
    if (rc == RING_OK) {
        float b0[64], b1[64];
        for (int i = 0; i < 64; i++) b0[i] = (float)i, b1[i] = 1.0f;
        coll_arg c0 = {.comm = a[0].comm, .count = 64, .buf = b0}, c1 = {.comm = a[1].comm, .count = 64, .buf = b1};
        pthread_create(&t[0], NULL, allreduce_thread, &c0);
        pthread_create(&t[1], NULL, allreduce_thread, &c1);
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        rc = c0.rc != RING_OK ? c0.rc : c1.rc;
        if (rc != RING_OK)
            fprintf(stderr, "[pid %d] pair on port %d: allreduce: %s: %s\n", (int)getpid(), port, ring_result_name(rc),
                    ring_comm_last_error(c0.rc != RING_OK ? a[0].comm : a[1].comm));
        for (int i = 0; i < 64 && rc == RING_OK; i++)
            if (b0[i] != i + 1.0f || b1[i] != i + 1.0f) {
                fprintf(stderr, "[pid %d] pair on port %d: element %d is %g and %g, not %g\n", (int)getpid(), port, i,
                        (double)b0[i], (double)b1[i], i + 1.0);
                rc = RING_ERR_INTERNAL;
            }
    }
    if (a[0].rc == RING_OK) ring_comm_destroy(a[0].comm);
    if (a[1].rc == RING_OK) ring_comm_destroy(a[1].comm);
    return rc;
}

/* fork() while another thread of the process is in its first ring_comm_init (loading the
 * topology): the child's own first communicator hung for good, its init threads waiting for a
 * lock the parent's loading thread held at the fork (api.md: a child may make communicators
 * of its own). Each try is a fresh process (the topology is loaded once per process), forking
 * at another moment of that load; the grandchild has 20 s for its own pair. */
Test(pair, a_child_forked_during_the_parents_first_init_makes_its_own_communicator, .timeout = 240)
{
    clear_env();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The sanitizers' own allocator lock is not taken at fork: a grandchild forked while the
     * parent's threads allocate hangs in malloc, whatever the library does. */
    fprintf(stderr, "[fork during init] skipped: sanitizer build (its allocator is not fork-safe with threads)\n");
    cr_skip_test("sanitizer build");
#endif
    for (int k = 0; k < 12; k++) {
        int p1 = free_port(), p2 = free_port();
        pid_t mid = fork();
        cr_assert_geq(mid, 0);
        if (mid == 0) {
            pair_arg a[2];
            pthread_t t[2];
            for (int r = 0; r < 2; r++) start_rank(&a[r], &t[r], r, 2, p1);
            usleep((useconds_t)(200 + k * 1500));
            pid_t kid = fork();
            if (kid == 0) {
                alarm(20);
                _exit(pair_round_plain(p2) == RING_OK ? 0 : 3);
            }
            int st = 0;
            waitpid(kid, &st, 0);
            for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
            for (int r = 0; r < 2; r++)
                if (a[r].rc == RING_OK) ring_comm_destroy(a[r].comm);
            _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
        }
        int st = 0;
        waitpid(mid, &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d us into the first init: the child %s (status %d%s)",
                  200 + k * 1500,
                  WIFEXITED(st) && WEXITSTATUS(st) == 100 + SIGALRM ? "hung (killed by its 20 s alarm)" : "failed",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                  WIFEXITED(st) && WEXITSTATUS(st) == 3 ? ": its pair failed, stderr says how"
                  : WIFEXITED(st) && WEXITSTATUS(st) > 100 ? ": 100 + the signal that ended it" : "");
    }
}

Test(pair, abort_from_another_thread_unblocks_the_call)
{
    clear_env();
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    float buf[16] = {0};
    coll_arg a = {.comm = c0, .count = 16, .buf = buf};
    pthread_t t;
    pthread_create(&t, NULL, allreduce_thread, &a); /* rank 1 never joins this allreduce */
    usleep(200 * 1000);
    double t_abort = now_ms();
    cr_assert_eq(ring_comm_abort(c0), RING_OK);
    pthread_join(t, NULL);
    cr_assert_eq(a.rc, RING_ERR_ABORTED, "got %s", ring_result_name(a.rc));
    double waited = a.t_end - t_abort;
    cr_log_info("abort unblocked the call in %.1f ms", waited);
    cr_assert(waited < 1000, "abort took %.1f ms", waited);
    /* Later calls fail at once with the first error; async ones too. */
    cr_assert_eq(ring_barrier(c0), RING_ERR_ABORTED);
    ring_request_t *rq = NULL;
    cr_assert_eq(ring_barrier_async(c0, &rq), RING_ERR_ABORTED);
    cr_assert_null(rq);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
}

Test(pair, timeout_names_the_peer, .timeout = 30)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "2000", 1);
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    float buf[16] = {0};
    /* Only rank 0 calls: it must give up after the timeout and say whom it waited for. */
    ring_comm_t *c = c0;
    const double t0 = now_ms();
    ring_result_t r = ring_allreduce(c, buf, buf, 16, RING_FLOAT32, RING_SUM);
    const double ms = now_ms() - t0;
    cr_assert_eq(r, RING_ERR_TIMEOUT, "got %s", ring_result_name(r));
    /* At the timeout, not long after it (a unit slip in the deadline would wait for ever). */
    cr_assert(ms >= 1900 && ms < 6000, "gave up after %.0f ms with RING_TIMEOUT_MS=2000", ms);
    const char *m = ring_comm_last_error(c);
    cr_assert(strstr(m, "allreduce #0") && strstr(m, "rank 1"), "message: %s", m);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
    clear_env();
}

/* The same through the async API, polled: ring_test must hand back the request's failure (and
 * keep handing it back), as ring_wait does; a program that polls and never waits would
 * otherwise take a failed call for a finished one. */
Test(pair, ring_test_returns_the_failure_of_its_request, .timeout = 30)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "500", 1);
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    float buf[16] = {0};
    ring_request_t *rq = NULL;
    cr_assert_eq(ring_allreduce_async(c0, buf, buf, 16, RING_FLOAT32, RING_SUM, &rq), RING_OK);
    int done = 0;
    ring_result_t r = RING_OK;
    for (int64_t end = ring__now_ns() + 10000000000LL; !done && ring__now_ns() < end;) {
        r = ring_test(rq, &done);
        if (!done) usleep(1000);
    }
    cr_assert(done, "the request never finished");
    cr_assert_eq(r, RING_ERR_TIMEOUT, "ring_test gave %s", ring_result_name(r));
    cr_assert_eq(ring_test(rq, &done), RING_ERR_TIMEOUT);
    cr_assert(done);
    cr_assert_eq(ring_wait(rq), RING_ERR_TIMEOUT);
    cr_assert(strstr(ring_comm_last_error(c0), "rank 1"), "%s", ring_comm_last_error(c0));
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
    clear_env();
}

/* Both ranks allreduce concurrently with different counts; both must report a mismatch. */
static void allreduce_both_mismatch(ring_comm_t *c0, size_t n0, float *b0, ring_comm_t *c1, size_t n1, float *b1)
{
    coll_arg a0 = {.comm = c0, .count = n0, .buf = b0}, a1 = {.comm = c1, .count = n1, .buf = b1};
    pthread_t t0, t1;
    pthread_create(&t0, NULL, allreduce_thread, &a0);
    pthread_create(&t1, NULL, allreduce_thread, &a1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cr_assert_eq(a0.rc, RING_ERR_MISMATCH, "rank 0 got %s: %s", ring_result_name(a0.rc), ring_comm_last_error(c0));
    cr_assert_eq(a1.rc, RING_ERR_MISMATCH, "rank 1 got %s: %s", ring_result_name(a1.rc), ring_comm_last_error(c1));
}

Test(pair, mismatched_counts_fail_on_both_ranks_with_both_sides)
{
    clear_env();
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    static float b0[64], b1[64];
    allreduce_both_mismatch(c0, 10, b0, c1, 20, b1);
    const char *m = ring_comm_last_error(c1);
    cr_assert(strstr(m, "count=20") && strstr(m, "count=10"), "message shows both sides: %s", m);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
}

static void *barrier_loop(void *p)
{
    coll_arg *a = p;
    a->rc = RING_OK;
    for (int i = 0; i < 200 && a->rc == RING_OK; i++) {
        ring_request_t *rq[3];
        a->rc = ring_allreduce_async(a->comm, a->buf, a->buf, a->count, RING_FLOAT32, RING_MAX, &rq[0]);
        if (a->rc == RING_OK) a->rc = ring_barrier_async(a->comm, &rq[1]);
        if (a->rc == RING_OK) a->rc = ring_broadcast_async(a->comm, a->buf, a->count, RING_FLOAT32, i % 2, &rq[2]);
        /* A blocking call issued while async ones are queued must run after them. */
        if (a->rc == RING_OK) a->rc = ring_allreduce(a->comm, a->buf, a->buf, a->count, RING_FLOAT32, RING_MIN);
        for (int k = 0; k < 3; k++) {
            ring_result_t w = ring_wait(rq[k]);
            if (a->rc == RING_OK) a->rc = w;
        }
    }
    return NULL;
}

Test(pair, async_and_blocking_calls_keep_issue_order)
{
    clear_env();
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    float b0[300], b1[300];
    /* Different data on the ranks: the first MAX makes both i + 1000, and only a MIN that ran
     * before it (the order broken) could bring either back to i. */
    for (int i = 0; i < 300; i++) b0[i] = (float)i, b1[i] = (float)(i + 1000);
    coll_arg a0 = {.comm = c0, .count = 300, .buf = b0}, a1 = {.comm = c1, .count = 300, .buf = b1};
    pthread_t t0, t1;
    pthread_create(&t0, NULL, barrier_loop, &a0);
    pthread_create(&t1, NULL, barrier_loop, &a1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cr_assert_eq(a0.rc, RING_OK, "%s", ring_comm_last_error(c0));
    cr_assert_eq(a1.rc, RING_OK, "%s", ring_comm_last_error(c1));
    for (int i = 0; i < 300; i++)
        cr_assert(b0[i] == (float)(i + 1000) && b1[i] == (float)(i + 1000), "element %d: %g and %g", i, b0[i], b1[i]);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
}

Test(pair, stranger_on_the_root_port_does_not_break_init)
{
    clear_env();
    int port = free_port();
    pair_arg a[2];
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        a[r] = (pair_arg){.rank = r};
        snprintf(a[r].root, sizeof a[r].root, "127.0.0.1:%d", port);
    }
    pthread_create(&t[0], NULL, init_thread, &a[0]);
    /* A stranger connects first, sends garbage and stays; another connects and says nothing. */
    int s1 = -1, s2 = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 200 && s1 < 0; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) s1 = fd;
        else { close(fd); usleep(10000); }
    }
    cr_assert(s1 >= 0, "root never listened");
    char junk[300];
    memset(junk, 'A', sizeof junk);
    cr_assert_eq(write(s1, junk, sizeof junk), (ssize_t)sizeof junk);
    s2 = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(s2, (struct sockaddr *)&sa, sizeof sa), 0);
    pthread_create(&t[1], NULL, init_thread, &a[1]);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    cr_assert_eq(a[0].rc, RING_OK, "%s", ring_comm_last_error(a[0].comm));
    cr_assert_eq(a[1].rc, RING_OK, "%s", ring_comm_last_error(a[1].comm));
    close(s1);
    close(s2);
    ring_comm_destroy(a[0].comm);
    ring_comm_destroy(a[1].comm);
}

typedef struct cfg_arg {
    pair_arg p;
    const char *secret;
} cfg_arg;

static void *init_cfg_thread(void *v)
{
    cfg_arg *a = v;
    ring_config_t cfg;
    ring_config_init(&cfg);
    cfg.secret = a->secret;
    cfg.timeout_ms = 1500;
    a->p.rc = ring_comm_init_config(&a->p.comm, 2, a->p.rank, a->p.root, &cfg);
    return NULL;
}

Test(pair, wrong_secret_is_rejected_with_a_reason)
{
    clear_env();
    int port = free_port();
    cfg_arg a[2] = {{.p = {.rank = 0}, .secret = "job-secret-A"}, {.p = {.rank = 1}, .secret = "job-secret-B"}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        snprintf(a[r].p.root, sizeof a[r].p.root, "127.0.0.1:%d", port);
        pthread_create(&t[r], NULL, init_cfg_thread, &a[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    cr_assert_eq(a[1].p.rc, RING_ERR_AUTH, "rank 1 got %s: %s", ring_result_name(a[1].p.rc), ring_comm_last_error(a[1].p.comm));
    cr_assert(strstr(ring_comm_last_error(a[1].p.comm), "secret"), "%s", ring_comm_last_error(a[1].p.comm));
    cr_assert_eq(a[0].p.rc, RING_ERR_TIMEOUT, "the root keeps waiting for a real rank 1, then names it: %s",
                 ring_comm_last_error(a[0].p.comm));
    cr_assert(strstr(ring_comm_last_error(a[0].p.comm), "missing rank(s) 1"), "%s", ring_comm_last_error(a[0].p.comm));
    ring_comm_destroy(a[0].p.comm);
    ring_comm_destroy(a[1].p.comm);
}

/* ---- recursive doubling, point-to-point ------------------------------------------------ */

Test(rd, partners_are_symmetric_and_few)
{
    for (int n = 1; n <= 70; n++) {
        int lists[70][40], cnt[70];
        int lg = 0;
        while ((1 << (lg + 1)) <= n) lg++;
        for (int r = 0; r < n; r++) {
            cnt[r] = ring__rd_partners(r, n, lists[r]);
            cr_assert(cnt[r] <= lg + 1, "n %d rank %d: %d partners", n, r, cnt[r]);
        }
        for (int r = 0; r < n; r++)
            for (int k = 0; k < cnt[r]; k++) {
                int q = lists[r][k], found = 0;
                cr_assert(q >= 0 && q < n && q != r, "n %d rank %d partner %d", n, r, q);
                for (int j = 0; j < cnt[q]; j++) found |= lists[q][j] == r;
                cr_assert(found, "n %d: %d lists %d but not the other way", n, r, q);
            }
    }
}

Test(param, algo_and_rd_threshold)
{
    clear_env();
    ring__params_t p;
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.algo, RING__ALGO_AUTO);
    cr_assert_eq(p.rd_max_bytes, (size_t)RING__DEFAULT_RD_MAX_BYTES);
    setenv("RING_ALGO", "rd", 1);
    setenv("RING_RD_MAX_BYTES", "8K", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.algo, RING__ALGO_RD);
    cr_assert_eq(p.rd_max_bytes, (size_t)8192);
    setenv("RING_ALGO", "ring", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_OK);
    cr_assert_eq(p.algo, RING__ALGO_RING);
    setenv("RING_ALGO", "tree", 1);
    cr_assert_eq(ring__params_resolve(&p, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring__tls_errbuf(), "RING_ALGO"), "%s", ring__tls_errbuf());
    clear_env();
}

/* The shared-memory all-reduce's largest size: RING_SM_MAX_BYTES wherever it is set, else
 * every size where rank 0's host has one NUMA node (or shows none) and 1 MiB where it has
 * several, whatever the other ranks' entries say (they all read rank 0's). */
Test(param, sm_max_bytes_default_follows_rank0_numa_nodes)
{
    clear_env();
    ring__peer_info_t peers[3];
    memset(peers, 0, sizeof peers);
    ring_comm_t *c = calloc(1, sizeof *c);
    cr_assert(c);
    c->nranks = 3;
    c->peers = peers;
    cr_assert_eq(ring__params_resolve(&c->params, NULL), RING_OK);
    cr_assert_eq(c->params.sm_max_set, 0);
    const int nodes[] = {0, 1, 2, 8};
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
        peers[0].numa_nodes = (uint8_t)nodes[i];
        peers[1].numa_nodes = peers[2].numa_nodes = (uint8_t)(nodes[i] > 1 ? 1 : 4);
        size_t want = nodes[i] > 1 ? (size_t)RING__DEFAULT_SM_MAX_BYTES : SIZE_MAX;
        const char *why = NULL;
        cr_assert_eq(ring__sm_max_bytes(c, &why), want, "rank 0 with %d NUMA nodes: %zu", nodes[i], ring__sm_max_bytes(c, NULL));
        cr_assert_str_eq(why, nodes[i] > 1 ? "default for several NUMA nodes" : "default for one NUMA node");
    }
    setenv("RING_SM_MAX_BYTES", "4M", 1);
    cr_assert_eq(ring__params_resolve(&c->params, NULL), RING_OK);
    cr_assert(c->params.sm_max_set);
    peers[0].numa_nodes = 1;
    const char *why = NULL;
    cr_assert_eq(ring__sm_max_bytes(c, &why), (size_t)4 << 20);
    cr_assert_str_eq(why, "", "the setting applies, not a default");
    setenv("RING_SM_MAX_BYTES", "1T", 1);
    cr_assert_eq(ring__params_resolve(&c->params, NULL), RING_OK);
    cr_assert_eq(ring__sm_max_bytes(c, NULL), (size_t)1 << 40);
    setenv("RING_SM_MAX_BYTES", "lots", 1);
    cr_assert_eq(ring__params_resolve(&c->params, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring__tls_errbuf(), "RING_SM_MAX_BYTES=\"lots\": expected a size of at least 0 bytes"), "%s",
              ring__tls_errbuf());
    free(c);
    clear_env();
}

Test(pair, counts_on_both_sides_of_the_rd_threshold_are_a_mismatch)
{
    clear_env();
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    /* 100 floats go by recursive doubling, 100000 by the ring: the two ranks run different
     * algorithms over the same connections, and both must still say "mismatch". */
    static float b0[100000], b1[100000];
    allreduce_both_mismatch(c0, 100, b0, c1, 100000, b1);
    const char *m = ring_comm_last_error(c0);
    cr_assert(strstr(m, "count=100,") && strstr(m, "count=100000") && strstr(m, "recursive doubling") && strstr(m, "[ring]"),
              "message shows both sides: %s", m);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
}

typedef struct p2p_arg {
    ring_comm_t *comm;
    ring_result_t rc;
    unsigned char out[3000], in[3000];
} p2p_arg;

static void *p2p_thread(void *v)
{
    p2p_arg *a = v;
    int me = ring_comm_rank(a->comm), peer = 1 - me;
    for (int i = 0; i < 3000; i++) a->out[i] = (unsigned char)(i * 7 + me);
    /* Both sides list send before receive: a simultaneous exchange must not deadlock. */
    ring__p2p_op_t ops[3] = {
        {.peer = peer, .is_send = 1, .buf = a->out, .len = 1000},
        {.peer = peer, .is_send = 1, .buf = a->out + 1000, .len = 2000},
        {.peer = peer, .is_send = 0, .buf = a->in, .len = 1000},
    };
    a->rc = ring__p2p_connect(a->comm, &peer, 1);
    if (a->rc == RING_OK) a->rc = ring__p2p_run(a->comm, ops, 3);
    ring__p2p_op_t rest = {.peer = peer, .is_send = 0, .buf = a->in + 1000, .len = 2000};
    if (a->rc == RING_OK) a->rc = ring__p2p_run(a->comm, &rest, 1);
    return NULL;
}

Test(pair, p2p_exchange_in_order)
{
    clear_env();
    ring_comm_t *c[2];
    init_pair(&c[0], &c[1]);
    p2p_arg *a = calloc(2, sizeof *a);
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
        a[r].comm = c[r];
        pthread_create(&t[r], NULL, p2p_thread, &a[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s", r, ring_comm_last_error(c[r]));
        cr_assert(!memcmp(a[r].in, a[1 - r].out, 3000), "rank %d received other bytes than were sent", r);
    }
    /* A rank that is not connected, and a peer out of range, are argument errors. */
    ring__p2p_op_t bad = {.peer = 5, .is_send = 1, .buf = a[0].out, .len = 1};
    cr_assert_eq(ring__p2p_run(c[0], &bad, 1), RING_ERR_INVALID_ARG);
    free(a);
    ring_comm_destroy(c[0]);
    ring_comm_destroy(c[1]);
}

/* Shared-memory pieces travel in the slot header up to 104 bytes (48 on its first cache line)
 * and in the slot's page above (src/transport/shm.c), and a message longer than a slot (64 KiB
 * on this edge) ends with a piece of any size: lengths on both sides of these limits, more
 * messages than the edge has slots (4), so that every slot is reused with the other kind of
 * piece. */
static const size_t shm_lens[] = {0,     1,     39,    40,    41,    47,    48,    49,    103,   104,   105,   4096,
                                  65535, 65536, 65537, 65536 + 104, 65536 + 105, 3 * 65536 + 40, 104, 0,
                                  5 * 65536 + 1, 105, 1};
#define SHM_NLENS (sizeof shm_lens / sizeof *shm_lens)

typedef struct shm_arg {
    ring_comm_t *comm;
    ring_result_t rc;
    const char *tp; /* the send connection's transport */
    unsigned char *out[SHM_NLENS], *in[SHM_NLENS];
} shm_arg;

static void *shm_pieces_thread(void *v)
{
    shm_arg *a = v;
    int me = ring_comm_rank(a->comm), peer = 1 - me;
    ring__p2p_op_t ops[2 * SHM_NLENS];
    int n = 0;
    for (size_t m = 0; m < SHM_NLENS; m++) {
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 1, .buf = a->out[m], .len = shm_lens[m]};
        ops[n++] = (ring__p2p_op_t){.peer = peer, .is_send = 0, .buf = a->in[m], .len = shm_lens[m]};
    }
    a->rc = ring__p2p_connect(a->comm, &peer, 1);
    if (a->rc == RING_OK) {
        a->tp = ring__tp_of(a->comm->conn_send[peer])->name;
        a->rc = ring__p2p_run(a->comm, ops, n);
    }
    return NULL;
}

Test(pair, shm_pieces_around_the_inline_and_slot_sizes_arrive_whole)
{
    clear_env();
    setenv("RING_TRANSPORT", "shm", 1);
    /* The ring edge's slots hold one chunk: 64 KiB, as the lengths above assume. */
    setenv("RING_CHUNK_BYTES", "65536", 1);
    ring_comm_t *c[2];
    init_pair(&c[0], &c[1]);
    shm_arg *a = calloc(2, sizeof *a);
    cr_assert_not_null(a);
    for (int r = 0; r < 2; r++) {
        a[r].comm = c[r];
        for (size_t m = 0; m < SHM_NLENS; m++) {
            /* One byte more than needed, so that an empty message still has a buffer. */
            a[r].out[m] = malloc(shm_lens[m] + 1);
            a[r].in[m] = malloc(shm_lens[m] + 1);
            cr_assert(a[r].out[m] && a[r].in[m]);
            for (size_t i = 0; i < shm_lens[m]; i++) a[r].out[m][i] = (unsigned char)(i * 131 + m * 17 + r * 7 + 1);
            memset(a[r].in[m], 0, shm_lens[m] + 1);
        }
    }
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, shm_pieces_thread, &a[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(a[r].rc, RING_OK, "rank %d: %s", r, ring_comm_last_error(c[r]));
        cr_assert_str_eq(a[r].tp, "shm", "rank %d's connection is %s, not shared memory", r, a[r].tp);
        for (size_t m = 0; m < SHM_NLENS; m++)
            cr_assert(!memcmp(a[r].in[m], a[1 - r].out[m], shm_lens[m]), "rank %d: message %zu (%zu bytes) differs from what was sent",
                      r, m, shm_lens[m]);
    }
    for (int r = 0; r < 2; r++)
        for (size_t m = 0; m < SHM_NLENS; m++) free(a[r].out[m]), free(a[r].in[m]);
    free(a);
    ring_comm_destroy(c[0]);
    ring_comm_destroy(c[1]);
    clear_env();
}

Test(pair, p2p_timeout_names_the_peer)
{
    clear_env();
    setenv("RING_TIMEOUT_MS", "1000", 1);
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    unsigned char b[8];
    ring__p2p_op_t op = {.peer = 1, .is_send = 0, .buf = b, .len = sizeof b};
    ring_result_t r = ring__p2p_run(c0, &op, 1);
    cr_assert_eq(r, RING_ERR_TIMEOUT, "got %s", ring_result_name(r));
    cr_assert(strstr(ring_comm_last_error(c0), "from rank 1"), "%s", ring_comm_last_error(c0));
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
    clear_env();
}

/* A data connection that reaches end of file while its peer's process lives on (its socket
 * shut down, a middlebox that closed it): the receive fails at once naming the peer. A read
 * of 0 taken for progress would spin for good, and no timeout would fire, as "progress" never
 * stops (the watcher hides this when the peer dies, as it names the dead rank). */
Test(pair, tcp_end_of_file_from_a_live_peer_fails_the_receive_at_once, .timeout = 30)
{
    clear_env();
    setenv("RING_TRANSPORT", "tcp", 1);
    setenv("RING_TIMEOUT_MS", "5000", 1);
    ring_comm_t *c0, *c1;
    init_pair(&c0, &c1);
    cr_assert_str_eq(ring__tp_of(c0->conn_send[1])->name, "tcp");
    cr_assert_eq(shutdown(ring__tcp_conn_fd(c0->conn_send[1]), SHUT_WR), 0, "%s", strerror(errno));
    unsigned char b[100];
    ring__p2p_op_t op = {.peer = 0, .is_send = 0, .buf = b, .len = sizeof b};
    const double t0 = now_ms();
    ring_result_t r = ring__p2p_run(c1, &op, 1);
    const double ms = now_ms() - t0;
    cr_assert_eq(r, RING_ERR_PEER, "got %s: %s", ring_result_name(r), ring_comm_last_error(c1));
    cr_assert(strstr(ring_comm_last_error(c1), "connection closed"), "%s", ring_comm_last_error(c1));
    cr_assert_lt(ms, 2000, "took %.0f ms", ms);
    ring_comm_destroy(c0);
    ring_comm_destroy(c1);
    clear_env();
}

/* A shared-memory sender whose ring is full (every slot written, none taken) and whose
 * receiver's process is gone: check() says so at once. The ring-full test had no test of its
 * own (an off-by-one there left such a sender to the watcher or RING_TIMEOUT_MS), so this one
 * drives the transport itself, below the watcher that names a departed rank. */
Test(pair, shm_sender_with_a_full_ring_sees_its_receiver_leave, .timeout = 30)
{
    clear_env();
    setenv("RING_TRANSPORT", "shm", 1);
    ring_comm_t *c[2];
    init_pair(&c[0], &c[1]);
    void *tx = c[0]->conn_send[1];
    const ring__transport_t *tp = ring__tp_of(tx);
    cr_assert_str_eq(tp->name, "shm");
    /* Far more than the ring holds: the sender fills it and then waits for slots. */
    const size_t len = (size_t)256 << 20;
    char *out = malloc(len);
    cr_assert_not_null(out);
    memset(out, 7, len);
    void *sreq = NULL;
    cr_assert_eq(tp->isend(tx, out, len, NULL, &sreq), RING_OK);
    int moved = 1, done = 0;
    for (int idle = 0; idle < 100;) {
        moved = 0; /* progress only ever sets it */
        cr_assert_eq(tp->progress(tx, &moved), RING_OK, "%s", ring_comm_last_error(c[0]));
        idle = moved ? 0 : idle + 1;
    }
    cr_assert_eq(tp->test(sreq, &done), RING_OK);
    cr_assert(!done, "the ring took the whole message");
    cr_assert_eq(tp->check(tx), RING_OK, "the receiver is still there");
    cr_assert_eq(ring_comm_destroy(c[1]), RING_OK);
    ring_result_t r = RING_OK;
    for (int64_t end = ring__now_ns() + 2000000000LL; r == RING_OK && ring__now_ns() < end; usleep(1000)) {
        r = tp->check(tx);
        if (r == RING_OK) r = tp->progress(tx, &moved);
    }
    cr_assert_eq(r, RING_ERR_PEER, "got %s 2 s after the receiver left: %s", ring_result_name(r),
                 ring_comm_last_error(c[0]));
    cr_assert(strstr(ring_comm_last_error(c[0]), "closed its connection"), "%s", ring_comm_last_error(c[0]));
    ring_comm_destroy(c[0]);
    free(out);
    clear_env();
}

/* The reference vectors of the SipHash paper's test code (key 00..0f, message 00..len-1),
 * which the shared-memory file names depend on to tell nothing of the job nonce. */
Test(net, siphash_matches_the_reference_vectors)
{
    unsigned char key[16], msg[64];
    for (int i = 0; i < 16; i++) key[i] = (unsigned char)i;
    for (int i = 0; i < 64; i++) msg[i] = (unsigned char)i;
    cr_assert_eq(ring__siphash(key, msg, 0), 0x726fdb47dd0e0e31ULL);
    cr_assert_eq(ring__siphash(key, msg, 1), 0x74f839c593dc67fdULL);
    cr_assert_eq(ring__siphash(key, msg, 8), 0x93f5f5799a932462ULL);
    cr_assert_eq(ring__siphash(key, msg, 15), 0xa129ca6149be45e5ULL);
    cr_assert_eq(ring__siphash(key, msg, 63), 0x958a324ceb064572ULL);
}

/* A connect toward an ephemeral port of this host, made while nobody listens there, can take
 * that very port as its source and connect to itself (TCP simultaneous open). Binding a socket
 * and connecting it to its own address builds that case on purpose: it must count as refused,
 * while a real connection to a listener still counts as connected. */
Test(net, self_connection_counts_as_refused)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "self-connect: %s", strerror(errno));
    cr_assert_eq(ring__connect_check(fd), -ECONNREFUSED);
    close(fd);

    ring__sockaddr_t to;
    int lfd = -1, cfd = -1;
    char where[32];
    snprintf(where, sizeof where, "127.0.0.1:%d", free_port());
    cr_assert_eq(ring__addr_resolve(NULL, where, &to), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring__listen(NULL, &to, 1, 0, 0, &lfd), RING_OK);
    int cc_err = -1;
    cr_assert_eq(ring__connect_start(&to, NULL, &cfd, &cc_err), 0);
    cr_assert_eq(cc_err, 0);
    int r = 0;
    for (int i = 0; i < 1000 && (r = ring__connect_check(cfd)) == 0; i++) usleep(1000);
    cr_assert_eq(r, 1);
    close(cfd);
    close(lfd);
}

static ring__sockaddr_t addr_of(const char *hostport)
{
    ring__sockaddr_t a;
    cr_assert_eq(ring__addr_resolve(NULL, hostport, &a), RING_OK, "%s: %s", hostport, ring_comm_last_error(NULL));
    return a;
}

/* Which peers count as inside this host for RING_TCP_CONGESTION=auto: loopback, and this
 * namespace's own addresses (the one the kernel would use toward the outside, found the way
 * the bootstrap finds it), but not an address that is routed elsewhere. */
Test(net, local_addresses_are_loopback_and_our_own)
{
    ring__sockaddr_t a = addr_of("127.0.0.1:1");
    cr_assert(ring__addr_is_local(&a));
    a = addr_of("127.1.2.3:1");
    cr_assert(ring__addr_is_local(&a));
    a = addr_of("[::1]:1");
    cr_assert(ring__addr_is_local(&a));
    a = addr_of("[::ffff:127.0.0.1]:1");
    cr_assert(ring__addr_is_local(&a));
    /* TEST-NET-2 is never assigned to a host: routed away, or unroutable without a default
     * route; either way not local. */
    a = addr_of("198.51.100.7:1");
    cr_assert(!ring__addr_is_local(&a));
    ring__sockaddr_t me;
    char ifn[64];
    if (ring__local_addr(NULL, NULL, &a, &me, ifn, sizeof ifn) == RING_OK) {
        char b[80];
        cr_assert(ring__addr_is_local(&me), "this host's own address %s (%s) should count as local",
                  ring__addr_str(&me, b, sizeof b), ifn);
    } else {
        fprintf(stderr, "[net local] own-address case skipped: no route out of this namespace (%s)\n",
                ring_comm_last_error(NULL));
    }
}

/* RING_SOCKET_IFNAME's choice among an interface's addresses: the root's family, else the
 * other, an IPv6 link-local address (zone = an interface number of this host, which means
 * another interface or none on the peers' hosts) only where there is nothing else, and no
 * address the kernel cannot bind (tentative, or failed its duplicate check). It took the
 * link-local address the kernel adds to an IPv4 interface for an IPv6 root, and a tentative
 * address listed first. */
static struct sockaddr_storage pick_sa[6];
static struct ifaddrs pick_if[6];
static void pick_add(int k, const char *ifname, int family, const char *ip)
{
    memset(&pick_sa[k], 0, sizeof pick_sa[k]);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&pick_sa[k];
        a->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&pick_sa[k];
        a->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    }
    pick_if[k] = (struct ifaddrs){.ifa_next = k > 0 ? &pick_if[k - 1] : NULL, .ifa_name = (char *)ifname,
                                  .ifa_flags = IFF_UP, .ifa_addr = (struct sockaddr *)&pick_sa[k]};
}

static const char *pick_ip(const struct ifaddrs *i, char *b, size_t len)
{
    if (!i) return "(none)";
    const void *a = i->ifa_addr->sa_family == AF_INET ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                                      : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    return inet_ntop(i->ifa_addr->sa_family, a, b, (socklen_t)len);
}

static int not_fd00_22(const struct sockaddr *sa)
{
    struct in6_addr t;
    inet_pton(AF_INET6, "fd00::22", &t);
    return sa->sa_family != AF_INET6 || memcmp(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, &t, sizeof t);
}

Test(net, socket_ifname_prefers_routable_usable_addresses)
{
    char b[64];
    /* getifaddrs lists the newest first: the list runs from index 5 down to 0. */
    pick_add(0, "eth1", AF_INET6, "fd01::3");
    pick_add(1, "eth0", AF_INET, "10.20.0.3");
    pick_add(2, "eth0", AF_INET6, "fe80::7855:feff:feed:cec2");
    const struct ifaddrs *i = ring__ifaddr_pick(&pick_if[2], "eth0", AF_INET6, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "10.20.0.3", "IPv6 root, IPv4 eth0: %s", pick_ip(i, b, sizeof b));
    i = ring__ifaddr_pick(&pick_if[2], "eth1", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "fd01::3");
    pick_add(3, "eth0", AF_INET6, "fd00::2");
    pick_add(4, "eth0", AF_INET6, "fd00::22");
    i = ring__ifaddr_pick(&pick_if[4], "eth0", AF_INET6, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "fd00::22");
    i = ring__ifaddr_pick(&pick_if[4], "eth0", AF_INET6, not_fd00_22);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "fd00::2", "the unusable address was taken: %s", pick_ip(i, b, sizeof b));
    /* Only link-local: taken, rather than nothing. */
    pick_add(5, "eth9", AF_INET6, "fe80::1");
    i = ring__ifaddr_pick(&pick_if[5], "eth9", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "fe80::1");
    cr_assert_null(ring__ifaddr_pick(&pick_if[5], "eth7", AF_INET, NULL));
}

/* An exclude list that does not name lo ("^docker") matches it, and getifaddrs lists it first:
 * taken, it gave a data address no other host reaches. Loopback comes last, and only a filter
 * that leaves nothing else takes it. */
Test(net, socket_ifname_takes_loopback_only_when_nothing_else_matches)
{
    char b[64];
    /* getifaddrs' order: lo, eth0, docker0 (the list runs from index 2 down to 0). */
    pick_add(0, "docker0", AF_INET, "172.17.0.1");
    pick_add(1, "eth0", AF_INET, "10.20.0.3");
    pick_add(2, "lo", AF_INET, "127.0.0.1");
    pick_if[2].ifa_flags |= IFF_LOOPBACK;
    const struct ifaddrs *i = ring__ifaddr_pick(&pick_if[2], "^docker", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "10.20.0.3", "^docker: %s", pick_ip(i, b, sizeof b));
    i = ring__ifaddr_pick(&pick_if[2], "^docker,eth", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "127.0.0.1", "^docker,eth: %s", pick_ip(i, b, sizeof b));
    i = ring__ifaddr_pick(&pick_if[2], "lo", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "127.0.0.1");
    /* Before an IPv6 link-local address of another interface too: that one reaches the link. */
    pick_add(3, "eth5", AF_INET6, "fe80::5");
    i = ring__ifaddr_pick(&pick_if[3], "^docker,eth0", AF_INET, NULL);
    cr_assert_str_eq(pick_ip(i, b, sizeof b), "fe80::5", "^docker,eth0: %s", pick_ip(i, b, sizeof b));
}

/* A peer's link-local address carries its own host's interface number: connected as it came,
 * it failed with "Network is unreachable" wherever the hosts number their interfaces
 * differently. It takes this rank's zone when this rank's data address is link-local too. */
Test(net, a_peers_link_local_address_takes_this_hosts_zone)
{
    ring__sockaddr_t peer = addr_of("[fe80::101]:5000");
    ((struct sockaddr_in6 *)&peer.ss)->sin6_scope_id = 12;
    struct sockaddr_storage mine;
    memset(&mine, 0, sizeof mine);
    struct sockaddr_in6 *m = (struct sockaddr_in6 *)&mine;
    m->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "fe80::100", &m->sin6_addr);
    m->sin6_scope_id = 2;
    ring__addr_local_zone(&peer, &mine);
    cr_assert_eq(((struct sockaddr_in6 *)&peer.ss)->sin6_scope_id, 2);
    /* A routable peer address keeps what it has. */
    ring__sockaddr_t g = addr_of("[fd00::2]:5000");
    ring__addr_local_zone(&g, &mine);
    cr_assert_eq(((struct sockaddr_in6 *)&g.ss)->sin6_scope_id, 0);
    /* A routable address here: the link of the interface that holds it (127.0.0.1 and ::1 are
     * lo's), not the number the peer's host gave (it kept 12). */
    const char *const routable[] = {"127.0.0.1:5000", "[::1]:5000"};
    for (int k = 0; k < 2; k++) {
        ring__sockaddr_t here = addr_of(routable[k]);
        if (!ring__addr_bindable(&here)) continue; /* no IPv6 on this host */
        peer = addr_of("[fe80::101]:5000");
        ((struct sockaddr_in6 *)&peer.ss)->sin6_scope_id = 12;
        ring__addr_local_zone(&peer, &here.ss);
        cr_assert_eq(((struct sockaddr_in6 *)&peer.ss)->sin6_scope_id, if_nametoindex("lo"), "%s: zone %u",
                     routable[k], ((struct sockaddr_in6 *)&peer.ss)->sin6_scope_id);
    }
}

/* ring__connect_start sets the congestion control before the connection exists (reno is in
 * every kernel and always allowed), and an unknown name is reported as the algorithm's
 * failure, not the connect's. */
Test(net, connect_start_sets_congestion_control)
{
    char where[32], cc[32];
    snprintf(where, sizeof where, "127.0.0.1:%d", free_port());
    ring__sockaddr_t to = addr_of(where);
    int lfd = -1, cfd = -1, cc_err = -1;
    cr_assert_eq(ring__listen(NULL, &to, 1, 0, 0, &lfd), RING_OK);
    cr_assert_eq(ring__connect_start(&to, "reno", &cfd, &cc_err), 0, "%s", strerror(cc_err));
    cr_assert_str_eq(ring__sock_cc(cfd, cc, sizeof cc), "reno");
    close(cfd);
    cfd = -1;
    int e = ring__connect_start(&to, "no-such-cc", &cfd, &cc_err);
    cr_assert_eq(e, ENOENT, "%s", strerror(e));
    cr_assert_eq(cc_err, ENOENT);
    cr_assert_eq(cfd, -1);
    close(lfd);
    cr_assert_str_eq(ring__sock_cc(-1, cc, sizeof cc), "?");
}

/* A TCP peer that sends a message this rank has not asked for yet and then closes: the socket
 * then holds data and the peer's end. POLLRDHUP is level-triggered and stays up while the data
 * sits unread, so a wait that kept asking for it returned from every poll() at once (300,000
 * wake-ups in half a second: a core burnt while this rank waited on other peers). The
 * message must still arrive whole once its receive is posted. Both TCP layouts: one-way
 * sockets, and duplex bundles where the send view shares the sockets. And a message in two
 * pieces (2 sockets) whose second piece, alone at the head of its socket, starts with the bytes
 * of the refusal word "RGDN": taken for the word, it left POLLRDHUP asked for (18,000 wake-ups
 * in 300 ms one-way, 2,200 duplex). */
Test(pair, tcp_peer_that_closes_after_unread_bytes_does_not_make_poll_spin, .timeout = 60)
{
    for (int kase = 0; kase < 4; kase++) {
        const int duplex = kase & 1, word = kase >> 1;
        clear_env();
        setenv("RING_TRANSPORT", "tcp", 1);
        setenv("RING_TCP_DUPLEX", duplex ? "1" : "0", 1);
        if (word) setenv("RING_NSOCKS", "2", 1);
        ring_comm_t *c[2];
        init_pair(&c[0], &c[1]);
        static char out[2 * 65536], in[2 * 65536];
        const size_t len = word ? sizeof out : 100;
        memset(out, 0, sizeof out);
        memset(in, 0, sizeof in);
        snprintf(out, 100, "sent before the close");
        /* The refusal word as tcp.c writes it (ring__put32): the start of the second piece. */
        if (word) ring__put32((unsigned char *)out + 65536, 0x5247444eu);
        ring__p2p_op_t send = {.peer = 1, .is_send = 1, .buf = out, .len = len};
        cr_assert_eq(ring__p2p_run(c[0], &send, 1), RING_OK, "%s", ring_comm_last_error(c[0]));
        cr_assert_eq(ring_comm_destroy(c[0]), RING_OK);
        usleep(50000);
        void *conns[2] = {c[1]->conn_recv[0], c[1]->conn_send[0]};
        cr_assert(strcmp(ring__tp_of(conns[0])->name, "tcp") == 0, "%s", ring__tp_of(conns[0])->name);
        int wakes = 0;
        double t0 = now_ms();
        while (now_ms() - t0 < 300) {
            struct pollfd fds[32];
            int n = 0;
            for (int k = 0; k < 2; k++) n += ring__tp_of(conns[k])->pollfds(conns[k], fds + n, 16);
            int pr = poll(fds, (nfds_t)n, 100);
            wakes++;
            for (int i = 0; pr > 0 && i < n; i++)
                if (fds[i].revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
                    for (int k = 0; k < 2; k++) ring__tp_of(conns[k])->check(conns[k]);
        }
        cr_assert_leq(wakes, 10, "duplex %d, word %d: %d poll() wake-ups in 300 ms with a 100 ms timeout", duplex, word,
                      wakes);
        ring__p2p_op_t recv = {.peer = 0, .is_send = 0, .buf = in, .len = len};
        cr_assert_eq(ring__p2p_run(c[1], &recv, 1), RING_OK, "duplex %d, word %d: %s", duplex, word,
                     ring_comm_last_error(c[1]));
        cr_assert(!memcmp(in, out, len), "duplex %d, word %d: the message arrived changed", duplex, word);
        ring_comm_destroy(c[1]);
    }
    clear_env();
}

typedef struct mm_arg {
    ring_comm_t *comm;
    ring__p2p_op_t ops[2];
    int nops;
    ring_result_t rc;
    double ms;
    char msg[RING__ERRMSG_MAX];
} mm_arg;

static void *mm_thread(void *v)
{
    mm_arg *a = v;
    double t0 = now_ms();
    a->rc = ring__p2p_run(a->comm, a->ops, a->nops);
    a->ms = now_ms() - t0;
    snprintf(a->msg, sizeof a->msg, "%s", a->rc == RING_OK ? "" : ring_comm_last_error(a->comm));
    return NULL;
}

/* Two lengths on both sides of 64 KiB over 2 TCP sockets: the sender cuts its message by its
 * length, the receiver by the length it posted, and a message of 64 KiB or more starts on
 * socket (seq mod nsocks). The difference must still be RING_ERR_MISMATCH with both lengths,
 * at once, whichever side is the larger and whatever the message's number: with the header on
 * the socket of the first piece, a receiver that expected the larger message on socket 1 waited
 * for a header that went to socket 0 until its timeout, and one that expected the smaller read
 * the larger message's second piece as its header ("bad message magic"). */
Test(pair, tcp_length_mismatch_across_64k_on_two_sockets_is_a_mismatch, .timeout = 120)
{
    static char sb[200000], rb[200000];
    const size_t lens[2][2] = {{1000, 200000}, {200000, 1000}}; /* {sent, expected} */
    for (int dir = 0; dir < 2; dir++)
        for (int warm = 0; warm < 2; warm++) {
            clear_env();
            setenv("RING_TRANSPORT", "tcp", 1);
            setenv("RING_NSOCKS", "2", 1);
            setenv("RING_TIMEOUT_MS", "5000", 1);
            ring_comm_t *c[2];
            init_pair(&c[0], &c[1]);
            /* An 8-byte message first, or not: the mismatched one is message 0 or 1. */
            mm_arg a[2] = {{.comm = c[0]}, {.comm = c[1]}};
            if (warm) {
                a[0].ops[a[0].nops++] = (ring__p2p_op_t){.peer = 1, .is_send = 1, .buf = sb, .len = 8};
                a[1].ops[a[1].nops++] = (ring__p2p_op_t){.peer = 0, .is_send = 0, .buf = rb, .len = 8};
            }
            a[0].ops[a[0].nops++] = (ring__p2p_op_t){.peer = 1, .is_send = 1, .buf = sb, .len = lens[dir][0]};
            a[1].ops[a[1].nops++] = (ring__p2p_op_t){.peer = 0, .is_send = 0, .buf = rb, .len = lens[dir][1]};
            pthread_t t[2];
            for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, mm_thread, &a[r]);
            for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
            char want[64];
            snprintf(want, sizeof want, "is %zu bytes, this rank expected %zu", lens[dir][0], lens[dir][1]);
            cr_log_info("sent %zu, expected %zu, message %d: %s after %.0f ms: %s", lens[dir][0], lens[dir][1], warm,
                        ring_result_name(a[1].rc), a[1].ms, a[1].msg);
            cr_assert_eq(a[1].rc, RING_ERR_MISMATCH, "sent %zu, expected %zu, message %d: %s after %.0f ms: %s",
                         lens[dir][0], lens[dir][1], warm, ring_result_name(a[1].rc), a[1].ms, a[1].msg);
            cr_assert(strstr(a[1].msg, want), "%s", a[1].msg);
            cr_assert_lt(a[1].ms, 2000, "the mismatch took %.0f ms (timeout 5000 ms)", a[1].ms);
            ring_comm_destroy(c[0]);
            ring_comm_destroy(c[1]);
        }
    clear_env();
}

/* RING_ALGO=sm runs the all-reduce and the barrier through the shared page at every size
 * (docs/env.md), RING_RD_MAX_BYTES or not: the barrier used to fall back to recursive doubling
 * when RING_RD_MAX_BYTES was set. Under auto, a set RING_RD_MAX_BYTES keeps both on it. */
Test(pair, algo_sm_forces_the_page_for_the_barrier_too)
{
    for (int forced = 0; forced < 2; forced++) {
        clear_env();
        setenv("RING_RD_MAX_BYTES", "8192", 1);
        if (forced) setenv("RING_ALGO", "sm", 1);
        ring_comm_t *c[2];
        init_pair(&c[0], &c[1]);
        if (!ring__sm_available(c[0])) {
            ring_comm_destroy(c[0]);
            ring_comm_destroy(c[1]);
            fprintf(stderr, "SKIP pair/algo_sm_forces_the_page_for_the_barrier_too: no shared page (RING_SHM_DIR?)\n");
            cr_skip_test("no shared-memory page between two ranks of this host (RING_SHM_DIR?)");
        }
        int want = forced ? RING__ALGO_SM : RING__ALGO_RD;
        cr_assert_eq(ring__algo_for(c[0], RING__COLL_BARRIER, 0), want, "forced %d: barrier", forced);
        cr_assert_eq(ring__algo_for(c[0], RING__COLL_ALLREDUCE, 64), want, "forced %d: 64-byte all-reduce", forced);
        ring_comm_destroy(c[0]);
        ring_comm_destroy(c[1]);
    }
}

/* RING_DEBUG_FILE longer than the 511 bytes the name may have: the log stays on stderr. It used
 * to be cut to another name (here a file "log-nnnn..." beside the one meant), and a long host
 * name in %h wrote past the end of the name's buffer. */
Test(log, an_overlong_debug_file_name_is_not_cut_to_another_file)
{
    clear_env();
    char dir[] = "/tmp/ringlog-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char pattern[1024];
    int o = snprintf(pattern, sizeof pattern, "%s/", dir);
    for (int i = 0; i < 220; i++) o += snprintf(pattern + o, sizeof pattern - (size_t)o, "./");
    o += snprintf(pattern + o, sizeof pattern - (size_t)o, "log-");
    for (int i = 0; i < 100; i++) pattern[o++] = 'n';
    snprintf(pattern + o, sizeof pattern - (size_t)o, "-%%h-%%p");
    cr_assert_gt(strlen(pattern), 511);
    setenv("RING_DEBUG", "WARN", 1);
    setenv("RING_DEBUG_FILE", pattern, 1);
    ring__log_init();
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            cr_log_error("made: %s", e->d_name);
            n++;
        }
    closedir(d);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(n, 0, "a log file was made under a cut name");
    clear_env();
}

/* The log's own variables cannot fail a call, so a value it does not know is said in the log:
 * RING_DEBUG_SUBSYS of unknown names only used to turn every subsystem off (RING_DEBUG=INFO
 * then printed nothing at all), and an unknown RING_DEBUG level went unmentioned. */
static char *log_run(const char *level, const char *subsys, char *out, size_t len)
{
    char path[] = "/tmp/ringlog-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("RING_DEBUG", level, 1);
    setenv("RING_DEBUG_SUBSYS", subsys, 1);
    setenv("RING_DEBUG_FILE", path, 1);
    ring__log_init();
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, 0, "a NET warning");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(path);
    clear_env();
    return out;
}

Test(log, unknown_subsystems_are_named_and_do_not_silence_the_log)
{
    clear_env();
    char out[4096];
    log_run("INFO", "FOO", out, sizeof out);
    cr_log_info("%s", out);
    cr_assert(strstr(out, "RING_DEBUG_SUBSYS: \"FOO\" is not INIT, NET, COLL or ALL"), "%s", out);
    cr_assert(strstr(out, "a NET warning"), "RING_DEBUG_SUBSYS=FOO silenced the log: %s", out);
}

Test(log, a_known_subsystem_beside_an_unknown_one_still_filters)
{
    clear_env();
    char out[4096];
    log_run("INFO", "INIT,FOO", out, sizeof out);
    cr_assert(strstr(out, "\"FOO\" is not"), "%s", out);
    cr_assert_null(strstr(out, "a NET warning"), "NET was not asked for: %s", out);
}

/* "INIT, NET" as people write lists: the space made " NET" an unknown name, and NET's lines
 * were left out. */
Test(log, subsystem_names_may_have_spaces_around_them)
{
    clear_env();
    char out[4096];
    log_run("INFO", " INIT , NET\t", out, sizeof out);
    cr_assert_null(strstr(out, "is not INIT, NET, COLL or ALL"), "%s", out);
    cr_assert(strstr(out, "a NET warning"), "%s", out);
    log_run("INFO", "INIT, COLL", out, sizeof out);
    cr_assert_null(strstr(out, "is not INIT, NET, COLL or ALL"), "%s", out);
    cr_assert_null(strstr(out, "a NET warning"), "NET was not asked for: %s", out);
    log_run("INFO", " ^NET", out, sizeof out);
    cr_assert_null(strstr(out, "is not INIT, NET, COLL or ALL"), "%s", out);
    cr_assert_null(strstr(out, "a NET warning"), "NET was excluded: %s", out);
}

Test(log, an_unknown_level_is_named_and_logs_warnings)
{
    clear_env();
    char out[4096];
    log_run("verbose", "ALL", out, sizeof out);
    cr_assert(strstr(out, "RING_DEBUG=\"verbose\" is not NONE, WARN, INFO or TRACE: logging at WARN"), "%s", out);
    cr_assert(strstr(out, "a NET warning"), "%s", out);
}

/* stderr on a pipe whose reader is gone; returns a copy of the old stderr. */
static int stderr_to_a_closed_pipe(void)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[0]);
    int saved = dup(2);
    cr_assert_eq(dup2(p[1], 2), 2);
    close(p[1]);
    return saved;
}

/* The log on a pipe whose reader is gone: the write fails with EPIPE and the program lives
 * (docs/api.md: the library never raises SIGPIPE); it used to die of it. errno stays. */
Test(log, a_closed_pipe_on_stderr_raises_no_sigpipe)
{
    clear_env();
    int saved = stderr_to_a_closed_pipe();
    setenv("RING_DEBUG", "WARN", 1);
    ring__log_init();
    errno = ENOENT;
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, 0, "into a pipe nobody reads");
    int e = errno;
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(e, ENOENT, "errno %d after the log line", e);
    clear_env();
}

/* The same for the line that says RING_DEBUG_FILE cannot be opened, written at the first
 * communicator: it went out with a plain write(), and the program died of SIGPIPE in init. */
Test(log, a_debug_file_that_cannot_be_opened_raises_no_sigpipe_on_a_closed_pipe)
{
    clear_env();
    int saved = stderr_to_a_closed_pipe();
    setenv("RING_DEBUG", "INFO", 1);
    setenv("RING_DEBUG_FILE", "/nonexistent-ringcomm-dir/log.%p", 1);
    errno = ENOENT;
    ring__log_init();
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, 0, "into a pipe nobody reads");
    int e = errno;
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(e, ENOENT, "errno %d after the log lines", e);
    clear_env();
}

/* stderr closed before init: the log is off, and a descriptor the library opens later as fd 2
 * (a socket of the job) never receives log lines; they used to be written into it. */
Test(log, a_closed_stderr_is_not_written_once_something_else_takes_fd_2)
{
    clear_env();
    int saved = dup(2);
    close(2);
    setenv("RING_DEBUG", "INFO", 1);
    ring__log_init();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    int took2 = sv[0] == 2 || sv[1] == 2;
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, 0, "must not reach the socket");
    char b[64];
    ssize_t n = recv(sv[0] == 2 ? sv[1] : sv[0], b, sizeof b, MSG_DONTWAIT);
    close(sv[0]);
    close(sv[1]);
    dup2(saved, 2);
    close(saved);
    cr_assert(took2, "the socket pair did not take fd 2");
    cr_assert_leq(n, 0, "%zd bytes of log went into the socket", n);
    clear_env();
}

/* The text of file path (at most len - 1 bytes), which is then removed. */
static void slurp(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    out[fread(out, 1, len - 1, f)] = '\0';
    fclose(f);
    unlink(path);
}

/* RING_DEBUG=TRACE logs every collective with what ran and how it ended (env.md); only the ring
 * engine's calls had a line, so a one-rank or recursive-doubling call logged nothing. */
Test(log, trace_logs_every_collective)
{
    clear_env();
    char path[] = "/tmp/ringlog-trace-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("RING_DEBUG", "TRACE", 1);
    setenv("RING_DEBUG_SUBSYS", "COLL", 1);
    setenv("RING_DEBUG_FILE", path, 1);
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK);
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(ring_allreduce(c, x, x, 4, RING_FLOAT32, RING_SUM), RING_OK);
    cr_assert_eq(ring_broadcast(c, x, 4, RING_FLOAT32, 0), RING_OK);
    ring_comm_destroy(c);
    char out[4096];
    slurp(path, out, sizeof out);
    clear_env();
    cr_assert(strstr(out, "allreduce #0: count 4 float32 sum, one rank: RING_OK in "), "%s", out);
    cr_assert(strstr(out, "broadcast #1: count 4 float32 root 0, one rank: RING_OK in "), "%s", out);
}

/* A RING_DEBUG_FILE that cannot be opened (a missing directory) leaves the log on stderr, and
 * stderr says so; it used to say nothing, and the file the user looked for never came. */
static void debug_file_fallback(const char *pattern, char *out, size_t outlen)
{
    clear_env();
    char err[] = "/tmp/ringlog-err-XXXXXX";
    int efd = mkstemp(err);
    cr_assert_geq(efd, 0);
    int saved = dup(2);
    cr_assert_eq(dup2(efd, 2), 2);
    close(efd);
    setenv("RING_DEBUG", "WARN", 1);
    setenv("RING_DEBUG_FILE", pattern, 1);
    ring__log_init();
    RING_LOG(RING_LOG_WARN, RING_SUB_NET, 0, "a NET warning");
    dup2(saved, 2);
    close(saved);
    slurp(err, out, outlen);
    unlink(err);
    clear_env();
}

Test(log, a_debug_file_that_cannot_be_opened_is_named_on_stderr)
{
    char out[4096];
    debug_file_fallback("/nonexistent-ringcomm-dir/log-%p", out, sizeof out);
    cr_assert(strstr(out, "RING_DEBUG_FILE: cannot open /nonexistent-ringcomm-dir/log-") &&
                  strstr(out, "No such file or directory"),
              "%s", out);
    cr_assert(strstr(out, "a NET warning"), "the log is not on stderr: %s", out);
}

/* A FIFO nobody reads: opening it for writing blocked, and init with it, for good. */
Test(log, a_debug_file_that_is_a_fifo_without_a_reader_is_named_on_stderr, .timeout = 20)
{
    char fifo[] = "/tmp/ringlog-fifo-XXXXXX", out[4096];
    cr_assert_not_null(mkdtemp(fifo));
    char path[64];
    snprintf(path, sizeof path, "%s/f", fifo);
    cr_assert_eq(mkfifo(path, 0600), 0);
    debug_file_fallback(path, out, sizeof out);
    unlink(path);
    rmdir(fifo);
    cr_assert(strstr(out, "RING_DEBUG_FILE: cannot open /tmp/ringlog-fifo-") &&
                  strstr(out, "No such device or address"),
              "%s", out);
    cr_assert(strstr(out, "a NET warning"), "the log is not on stderr: %s", out);
}

/* The log takes its copy of stderr at the first communicator (api.md), not at its first line:
 * a program that replaced fd 2 after init (closed it, and a file of its own took the number)
 * had the library's warnings written into that file. */
Test(log, stderr_is_taken_at_the_first_communicator)
{
    clear_env();
    char was[] = "/tmp/ringlog-was-XXXXXX", mine[] = "/tmp/ringlog-mine-XXXXXX";
    int wfd = mkstemp(was), mfd = mkstemp(mine);
    cr_assert(wfd >= 0 && mfd >= 0);
    close(mfd);
    int saved = dup(2);
    cr_assert_eq(dup2(wfd, 2), 2);
    close(wfd);
    setenv("RING_DEBUG", "WARN", 1);
    ring_comm_t *c = NULL;
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK);
    close(2);
    mfd = open(mine, O_WRONLY | O_APPEND | O_CLOEXEC);
    cr_assert_eq(mfd, 2, "the program's own file did not take fd 2");
    int x = 0;
    cr_assert_eq(ring_broadcast(c, &x, 1, RING_INT32, 5), RING_ERR_INVALID_ARG);
    ring_comm_destroy(c);
    dup2(saved, 2);
    close(saved);
    char got_was[4096], got_mine[4096];
    slurp(was, got_was, sizeof got_was);
    slurp(mine, got_mine, sizeof got_mine);
    clear_env();
    cr_assert_eq(got_mine[0], '\0', "the log went into the program's file: %s", got_mine);
    cr_assert(strstr(got_was, "root 5 out of range"), "the warning is not on the stderr of init: \"%s\"", got_was);
}

/* A shared-memory peer that publishes its last message while this rank's sleep flag is down (so
 * it rings no doorbell) and then closes its socket: the message can be taken at once, so the
 * wait must not sleep (pollfds used to return no descriptor, and the rank slept up to 1 s on
 * the others with the data ready). */
Test(pair, shm_peer_that_closed_after_its_last_publish_does_not_put_the_receiver_to_sleep, .timeout = 30)
{
    clear_env();
    setenv("RING_TRANSPORT", "shm", 1);
    ring_comm_t *c[2];
    init_pair(&c[0], &c[1]);
    void *rx = c[1]->conn_recv[0], *tx = c[0]->conn_send[1];
    const ring__transport_t *tp = ring__tp_of(rx);
    cr_assert_str_eq(tp->name, "shm");
    char out[64] = "published, then the socket closed", in[64] = "";
    void *rreq = NULL, *sreq = NULL;
    cr_assert_eq(tp->irecv(rx, in, sizeof in, NULL, &rreq), RING_OK);
    cr_assert_not_null(rreq);
    cr_assert_eq(ring__tp_of(tx)->isend(tx, out, sizeof out, NULL, &sreq), RING_OK);
    int moved = 0, done = 0;
    for (int i = 0; i < 1000 && !done; i++) {
        cr_assert_eq(ring__tp_of(tx)->progress(tx, &moved), RING_OK);
        cr_assert_eq(ring__tp_of(tx)->test(sreq, &done), RING_OK);
    }
    cr_assert(done, "the send was not published");
    cr_assert_eq(ring_comm_destroy(c[0]), RING_OK);
    usleep(50000);
    struct pollfd fds[4];
    cr_assert_eq(tp->pollfds(rx, fds, 4), -1, "the receive can complete now: no sleep");
    done = 0;
    for (int i = 0; i < 1000 && !done; i++) {
        cr_assert_eq(tp->progress(rx, &moved), RING_OK, "%s", ring_comm_last_error(c[1]));
        cr_assert_eq(tp->test(rreq, &done), RING_OK);
    }
    cr_assert(done);
    cr_assert_str_eq(in, out);
    ring_comm_destroy(c[1]);
}

/*
 * The sweep of left-behind segments (ring__shm_sweep) removes a file only when no process of
 * its pid exists here AND nobody holds the file: a creator in another pid namespace (a
 * container sharing /dev/shm) looks dead by its pid but holds its file (ring__shm_hold). Until
 * 2026-11-29 the pid alone decided, and a job starting next to such a container removed a
 * segment its peer had still to open.
 */
static int sweep_make(const char *dir, int pid, int n, int hold)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ringcomm-%u-%d-0123456789abcdef-0-1-%d", dir, (unsigned)geteuid(), pid, n);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    if (hold) ring__shm_hold(fd);
    else close(fd);
    return hold ? fd : -1;
}

static int sweep_has(const char *dir, int pid, int n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ringcomm-%u-%d-0123456789abcdef-0-1-%d", dir, (unsigned)geteuid(), pid, n);
    return access(path, F_OK) == 0;
}

Test(shm, sweep_removes_only_files_nobody_holds_of_pids_that_are_gone)
{
    char dir[] = "/tmp/ringcomm-sweep-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    int dead = 0;
    for (int p = 4194000; p > 300000 && !dead; p--)
        if (kill(p, 0) != 0 && errno == ESRCH) dead = p;
    cr_assert(dead, "no free pid to stand for a dead (or unseen) creator");
    int held_fd = sweep_make(dir, dead, 0, 1); /* alive elsewhere: holds its file */
    sweep_make(dir, dead, 1, 0);               /* dead: nobody holds it */
    sweep_make(dir, (int)getpid(), 2, 0);      /* its pid is alive here */
    cr_assert_eq(ring__shm_sweep(dir), 0, "files a second old were swept (their creators may not hold them yet)");
    usleep(2200 * 1000);
    int removed = ring__shm_sweep(dir);
    int held_kept = sweep_has(dir, dead, 0), dead_gone = !sweep_has(dir, dead, 1), live_kept = sweep_has(dir, (int)getpid(), 2);
    close(held_fd);
    int released_gone = ring__shm_sweep(dir) == 1 && !sweep_has(dir, dead, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/ringcomm-%u-%d-0123456789abcdef-0-1-2", dir, (unsigned)geteuid(), (int)getpid());
    unlink(path);
    rmdir(dir);
    cr_assert(held_kept, "the sweep removed a file its (live, unseen) creator holds");
    cr_assert(dead_gone && removed == 1, "the sweep left a dead creator's file (removed %d)", removed);
    cr_assert(live_kept, "the sweep removed a file of a live pid");
    cr_assert(released_gone, "once its creator let go, the file stayed");
}
