/*
 * Writes the seed corpora of the fuzz harnesses: valid frames as ranks send them, and
 * near-valid ones that fail exactly one check, so that the fuzzer starts next to every branch
 * instead of having to find the magic numbers first. The output is committed under
 * tests/fuzz/corpus/; the test fuzz-seeds regenerates it and compares, so seeds that no longer
 * match the wire format (say, after a version bump) are noticed.
 *
 * Each seed is checked against the library while it is written (valid ones must be accepted,
 * near-valid ones refused), so a seed that does not test what its name says fails here.
 *
 * Usage: fuzz_gen_corpus OUTDIR (writes OUTDIR/fuzz_<harness>/<seed>).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "bootstrap.h"
#include "fuzz_util.h"
#include "param.h"
#include "transport.h"
#include "watch.h"
#include "wire.h"

/* tcp.c builds its handshake inline, so its magic numbers are repeated here ("RGDH", "RGMS");
 * the version is transport.h's RING__TCP_VERSION. */
#define HS_MAGIC 0x52474448u
#define MSG_MAGIC 0x52474d53u

static const char *outdir;
static int failures;

static void put_file(const char *harness, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", outdir, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void expect(int ok, const char *harness, const char *name)
{
    if (ok) return;
    fprintf(stderr, "gen_corpus: seed %s/%s does not test what its name says\n", harness, name);
    failures++;
}

/* ---- bootstrap: HELLO and rank-table entries ---------------------------------------------- */

static ring__peer_info_t info_v4(void)
{
    ring__peer_info_t in;
    memset(&in, 0, sizeof in);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(41234)};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    in.addr.len = sizeof sa;
    memcpy(in.addr.data, &sa, sizeof sa);
    snprintf(in.host, sizeof in.host, "node-a");
    snprintf(in.bootid, sizeof in.bootid, "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9");
    in.pid = 4242;
    in.kernel = 0x5eed0001u;
    in.cpu_first = 0;
    in.cpu_count = 1;
    return in;
}

static ring__peer_info_t info_v6(void)
{
    ring__peer_info_t in;
    memset(&in, 0, sizeof in);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(50001)};
    sa.sin6_addr.s6_addr[15] = 1;
    in.addr.len = sizeof sa;
    memcpy(in.addr.data, &sa, sizeof sa);
    snprintf(in.host, sizeof in.host, "gpu-node-017.cluster.example");
    snprintf(in.bootid, sizeof in.bootid, "0a1b2c3d-0000-4000-8000-123456789abc");
    in.pid = 123456;
    in.kernel = 0x5eed0003u;
    in.cpu_first = 96;
    in.cpu_count = 48;
    return in;
}

static int hello_ok(const unsigned char *buf, ring_result_t *code)
{
    uint32_t r, n;
    ring__peer_info_t out;
    return ring__hello_parse(buf, fuzz_secret, &r, &n, &out, code) == NULL;
}

/* Checked as the harness reads it: zero-padded, the secret written in when byte 296 says so. */
static void hello_seed(const char *name, const unsigned char *buf, size_t len, ring_result_t want)
{
    unsigned char h[RING__HELLO_LEN] = {0};
    memcpy(h, buf, len < sizeof h ? len : sizeof h);
    if (len > RING__HELLO_LEN && (buf[RING__HELLO_LEN] & 1)) memcpy(h + 8, fuzz_secret, 16);
    ring_result_t code = RING_OK;
    int ok = hello_ok(h, &code);
    expect(want == RING_OK ? ok : !ok && code == want, "fuzz_hello", name);
    put_file("fuzz_hello", name, buf, len);
}

static void gen_hello(void)
{
    unsigned char b[RING__HELLO_LEN + 1], m[RING__HELLO_LEN + 1];
    ring__peer_info_t v4 = info_v4(), v6 = info_v6();

    ring__hello_build(b, fuzz_secret, 1, 4, &v4);
    hello_seed("valid_ipv4", b, RING__HELLO_LEN, RING_OK);
    memcpy(m, b, RING__HELLO_LEN);
    memset(m + 8, 0, 16);
    m[RING__HELLO_LEN] = 1; /* the harness writes the secret back in */
    hello_seed("zeroed_secret_patched", m, RING__HELLO_LEN + 1, RING_OK);
    memcpy(m, b, RING__HELLO_LEN);
    m[0] ^= 0x20;
    hello_seed("bad_magic", m, RING__HELLO_LEN, RING_ERR_PROTOCOL);
    memcpy(m, b, RING__HELLO_LEN);
    m[4] = 1; /* the version before the shared-memory flag */
    hello_seed("version_1", m, RING__HELLO_LEN, RING_ERR_AUTH);
    memcpy(m, b, RING__HELLO_LEN);
    m[23] ^= 1;
    hello_seed("wrong_secret", m, RING__HELLO_LEN, RING_ERR_AUTH);
    hello_seed("truncated", b, 100, RING_OK);

    ring__hello_build(b, fuzz_secret, 7, 8, &v6);
    hello_seed("valid_ipv6", b, RING__HELLO_LEN, RING_OK);

    ring__peer_info_t full = v4;
    full.addr.len = RING__TP_ADDR_MAX;
    memset(full.addr.data, 0xa5, sizeof full.addr.data);
    memset(full.host, 'h', sizeof full.host); /* unterminated on the wire */
    memset(full.bootid, 'b', sizeof full.bootid);
    full.pid = 0xffffffffu;
    ring__hello_build(b, fuzz_secret, 0xffffffffu, 0xffffffffu, &full);
    hello_seed("full_fields_unterminated", b, RING__HELLO_LEN, RING_OK);

    ring__peer_info_t bad = v4;
    bad.addr.len = 0;
    ring__hello_build(b, fuzz_secret, 1, 4, &bad);
    hello_seed("addr_len_0", b, RING__HELLO_LEN, RING_ERR_PROTOCOL);
    bad.addr.len = RING__TP_ADDR_MAX + 1;
    ring__hello_build(b, fuzz_secret, 1, 4, &bad);
    hello_seed("addr_len_129", b, RING__HELLO_LEN, RING_ERR_PROTOCOL);
    bad.addr.len = 0xffffffffu;
    ring__hello_build(b, fuzz_secret, 1, 4, &bad);
    hello_seed("addr_len_max", b, RING__HELLO_LEN, RING_ERR_PROTOCOL);
}

/* An entry is the HELLO's address block (bytes 32..296). */
static void entry_of(unsigned char *e, const ring__peer_info_t *in)
{
    unsigned char b[RING__HELLO_LEN];
    ring__hello_build(b, fuzz_secret, 1, 2, in);
    memcpy(e, b + 32, RING__TABLE_ENTRY_LEN);
}

static void table_seed(const char *name, const unsigned char *t, size_t len, int valid)
{
    for (size_t off = 0; off + RING__TABLE_ENTRY_LEN <= len; off += RING__TABLE_ENTRY_LEN) {
        ring__peer_info_t out;
        int ok = ring__peer_info_parse(t + off, &out) == 0;
        /* near-valid tables: only the last entry is malformed */
        expect(ok == (valid || off + 2 * RING__TABLE_ENTRY_LEN <= len), "fuzz_table", name);
    }
    put_file("fuzz_table", name, t, len);
}

static void gen_table(void)
{
    enum { E = RING__TABLE_ENTRY_LEN };
    unsigned char t[4 * E];
    ring__peer_info_t v4 = info_v4(), v6 = info_v6(), x = v4;
    entry_of(t, &v4);
    entry_of(t + E, &v6);
    x.addr.len = RING__TP_ADDR_MAX;
    memset(x.host, 'h', sizeof x.host);
    memset(x.bootid, 'b', sizeof x.bootid);
    entry_of(t + 2 * E, &x);
    table_seed("three_ranks", t, 3 * E, 1);
    table_seed("one_rank", t, E, 1);
    table_seed("partial_entry", t, E + 100, 1);

    x = v4;
    x.addr.len = 0;
    entry_of(t + E, &x);
    table_seed("addr_len_0", t, 2 * E, 0);
    x.addr.len = RING__TP_ADDR_MAX + 1;
    entry_of(t + E, &x);
    table_seed("addr_len_129", t, 2 * E, 0);
    x.addr.len = 0x80000000u;
    entry_of(t + E, &x);
    table_seed("addr_len_huge", t, 2 * E, 0);
    x = v4;
    x.flags = RING__PEER_SHM;
    entry_of(t + E, &x);
    table_seed("shm_flag", t, 2 * E, 1);
    ring__put32(t + E + E - 4, 0x9e3779b9u); /* a layout key: data, not malformed */
    table_seed("layout_set", t, 2 * E, 1);
}

/* ---- tcp: handshake and message header ---------------------------------------------------- */

enum { W_PARAMS = 26, W_LEN = W_PARAMS + RING__TCP_HS_LEN + RING__TCP_HDR_LEN };

typedef struct wire_seed {
    uint8_t flags;
    int nsocks, nranks, myrank;
    uint64_t nonce;
    uint32_t want_seq;
    uint64_t want_len;
    unsigned char hs[RING__TCP_HS_LEN];
    unsigned char hdr[RING__TCP_HDR_LEN];
} wire_seed;

static wire_seed wire_valid(void)
{
    wire_seed s = {.flags = 0, .nsocks = 2, .nranks = 4, .myrank = 0, .nonce = 0x1122334455667788ull,
                   .want_seq = 7, .want_len = 4096};
    ring__put32(s.hs, HS_MAGIC);
    ring__put32(s.hs + 4, RING__TCP_VERSION | (uint32_t)s.nsocks << 16);
    memcpy(s.hs + 8, fuzz_secret, 16);
    ring__put32(s.hs + 24, 3);
    ring__put32(s.hs + 28, 1);
    ring__put64(s.hs + 32, s.nonce);
    ring__put32(s.hdr, MSG_MAGIC);
    ring__put32(s.hdr + 4, s.want_seq);
    ring__put64(s.hdr + 8, s.want_len);
    return s;
}

/* want_hs / want_hdr: 1 if the library must accept that part (flags applied as the harness does). */
static void wire_seed_put(const char *name, const wire_seed *s, int want_hs, int want_hdr)
{
    unsigned char b[W_LEN];
    b[0] = s->flags;
    b[1] = (unsigned char)(s->nsocks - 1);
    b[2] = (unsigned char)(s->nranks - 1);
    b[3] = (unsigned char)((s->nranks - 1) >> 8);
    b[4] = (unsigned char)s->myrank;
    b[5] = (unsigned char)(s->myrank >> 8);
    ring__put64(b + 6, s->nonce);
    ring__put32(b + 14, s->want_seq);
    ring__put64(b + 18, s->want_len);
    memcpy(b + W_PARAMS, s->hs, RING__TCP_HS_LEN);
    memcpy(b + W_PARAMS + RING__TCP_HS_LEN, s->hdr, RING__TCP_HDR_LEN);

    unsigned char hs[RING__TCP_HS_LEN];
    memcpy(hs, s->hs, sizeof hs);
    if (s->flags & 1) memcpy(hs + 8, fuzz_secret, 16);
    if (s->flags & 2) ring__put64(hs + 32, s->nonce);
    uint32_t rank, idx, seq;
    uint64_t len;
    int hs_ok = ring__tcp_hs_check(hs, fuzz_secret, s->nonce, s->nsocks, s->nranks, s->myrank, &rank, &idx) == NULL;
    uint32_t want_seq = (s->flags & 4) ? ring__get32(s->hdr + 4) : s->want_seq;
    uint64_t want_len = (s->flags & 4) ? ring__get64(s->hdr + 8) : s->want_len;
    int hdr_ok = ring__tcp_hdr_check(s->hdr, want_seq, (size_t)want_len, &seq, &len) == 0;
    expect(hs_ok == want_hs && hdr_ok == want_hdr, "fuzz_tcp_wire", name);
    put_file("fuzz_tcp_wire", name, b, sizeof b);
}

static void gen_tcp_wire(void)
{
    wire_seed v = wire_valid(), s;
    wire_seed_put("valid", &v, 1, 1);

    s = v;
    s.hs[0] ^= 1;
    s.hdr[0] ^= 1;
    wire_seed_put("bad_magics", &s, 0, 0);
    s = v;
    ring__put32(s.hs + 4, (RING__TCP_VERSION + 1) | (uint32_t)s.nsocks << 16);
    wire_seed_put("version_next", &s, 0, 1);
    s = v;
    ring__put32(s.hs + 4, RING__TCP_VERSION | 4u << 16);
    wire_seed_put("nsocks_differ", &s, 0, 1);
    s = v;
    ring__put32(s.hs + 4, RING__TCP_VERSION | (uint32_t)s.nsocks << 16 | 1u << 24);
    wire_seed_put("duplex_flag", &s, 1, 1);
    s = v;
    ring__put32(s.hs + 4, RING__TCP_VERSION | (uint32_t)s.nsocks << 16 | 1u << 25);
    wire_seed_put("unknown_flag", &s, 0, 1);
    s = v;
    s.hs[20] ^= 0x80;
    wire_seed_put("wrong_secret", &s, 0, 1);
    s.flags = 1;
    wire_seed_put("wrong_secret_patched", &s, 1, 1);
    s = v;
    s.hs[39] ^= 1;
    wire_seed_put("other_job_nonce", &s, 0, 1);
    s = v;
    ring__put32(s.hs + 24, 0);
    wire_seed_put("rank_is_self", &s, 0, 1);
    s = v;
    ring__put32(s.hs + 24, 4);
    wire_seed_put("rank_out_of_range", &s, 0, 1);
    s = v;
    ring__put32(s.hs + 28, 2);
    wire_seed_put("index_out_of_range", &s, 0, 1);
    s = v;
    s.nsocks = RING__MAX_NSOCKS;
    s.nranks = 65536;
    s.myrank = 65535;
    ring__put32(s.hs + 4, RING__TCP_VERSION | (uint32_t)RING__MAX_NSOCKS << 16);
    ring__put32(s.hs + 24, 65534);
    ring__put32(s.hs + 28, RING__MAX_NSOCKS - 1);
    wire_seed_put("largest_job", &s, 1, 1);
    s = v;
    s.want_seq = 8;
    wire_seed_put("hdr_wrong_seq", &s, 1, 0);
    s = v;
    s.want_len = 4095;
    wire_seed_put("hdr_wrong_len", &s, 1, 0);
    s = v;
    ring__put32(s.hdr + 4, 0xffffffffu);
    ring__put64(s.hdr + 8, ~0ull);
    s.flags = 7;
    wire_seed_put("hdr_extremes_matched", &s, 1, 1);
}

/* ---- watch: notice frames ----------------------------------------------------------------- */

static void notice_seed(const char *name, const unsigned char *b, size_t n, long want_first)
{
    uint32_t type, origin, code;
    const unsigned char *t;
    size_t tl;
    expect(ring__notice_parse(b, n, &type, &origin, &code, &t, &tl) == want_first, "fuzz_notice", name);
    put_file("fuzz_notice", name, b, n);
}

static void gen_notice(void)
{
    enum { F = RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX };
    unsigned char b[3 * F];
    char text[RING__NOTICE_TEXT_MAX + 2];
    const char *why = "rank 2 (node-b, pid 17) failed: tcp: message 3 from rank 1 (10.0.0.2:50000) is "
                      "4096 bytes, this rank expected 8192";
    size_t n = ring__notice_build(b, RING__NOTICE_FAIL, 2, RING_ERR_MISMATCH, why);
    notice_seed("fail_mismatch", b, n, (long)n);
    size_t n2 = ring__notice_build(b + n, RING__NOTICE_BYE, 3, 0, NULL);
    notice_seed("fail_then_bye", b, n + n2, (long)n);
    size_t n3 = ring__notice_build(b + n + n2, RING__NOTICE_FAIL, 0, RING_ERR_PEER, "rank 0 (root) died");
    notice_seed("three_frames", b, n + n2 + n3, (long)n);
    notice_seed("fail_truncated_text", b, n - 5, 0);
    notice_seed("header_only_prefix", b, 10, 0);
    memset(b + n, 0xee, 20);
    notice_seed("fail_then_garbage", b, n + 20, (long)n);

    n = ring__notice_build(b, RING__NOTICE_BYE, 1, 0, NULL);
    notice_seed("bye", b, n, (long)n);

    /* A stuck report (one descriptor in hex), and one with a digit short, which is garbage. */
    const char *desc_hex = "4f504752000000000000000000000000a086010000000000000000000000000000000000"
                           "01000000";
    n = ring__notice_build(b, RING__NOTICE_WAITING, 3, 0, desc_hex);
    notice_seed("waiting", b, n, (long)n);
    char short_hex[RING__NOTICE_WAITING_TEXT];
    memcpy(short_hex, desc_hex, sizeof short_hex - 1);
    short_hex[sizeof short_hex - 1] = '\0';
    n = ring__notice_build(b, RING__NOTICE_WAITING, 3, 0, short_hex);
    notice_seed("waiting_short", b, n, -1);

    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    n = ring__notice_build(b, RING__NOTICE_FAIL, 0xffffffffu, RING_ERR_TIMEOUT, text); /* cut to 800 */
    notice_seed("fail_longest_text", b, n, (long)n);
    ring__put32(b + 12, RING_ERR_TIMEOUT | (uint32_t)(RING__NOTICE_TEXT_MAX + 1) << 16);
    notice_seed("text_len_801", b, n, -1);

    n = ring__notice_build(b, 3, 1, RING_ERR_PEER, "?");
    notice_seed("unknown_type", b, n, -1);
    n = ring__notice_build(b, RING__NOTICE_FAIL, 1, 64, "code");
    notice_seed("code_64", b, n, -1);
    n = ring__notice_build(b, RING__NOTICE_FAIL, 1, RING_ERR_PEER, "magic");
    b[3] ^= 0x40;
    notice_seed("bad_magic", b, n, -1);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir(outdir, 0755);
    gen_hello();
    gen_table();
    gen_tcp_wire();
    gen_notice();
    return failures ? 1 : 0;
}
