/*
 * The TCP transport's two wire checks (tcp.c): the 40-byte handshake every data connection
 * opens with (checked before the sender is known: hostile bytes), and the 16-byte header in
 * front of every message (from an authenticated peer, but a stream out of sync or a rank
 * running another collective must be caught, not trusted). An accepted handshake's rank and
 * socket index index the listener's fds[rank][idx] directly.
 *
 * Input, 82 bytes (zero-padded when shorter):
 *   flags:1 | nsocks:1 | nranks:2 | myrank:2 | nonce:8 | want_seq:4 | want_len:8 | hs:40 | hdr:16
 * flags bit 0 writes the job secret into the handshake and bit 1 the nonce (the secret is
 * compared in constant time, which the fuzzer cannot solve); bit 2 makes the expected
 * sequence number and length those of the header, so that the accepting path is reached.
 */
#include <stdlib.h>
#include <string.h>

#include "param.h"
#include "transport.h"
#include "fuzz_util.h"
#include "wire.h"

/* Handshake layout (tcp.c tcp_connect): magic, version | nsocks << 16, secret, rank, index,
 * nonce. Header: magic, sequence number, length. */
#define HS_SECRET_OFF 8
#define HS_RANK_OFF 24
#define HS_NONCE_OFF 32
#define HDR_SEQ_OFF 4
#define HDR_LEN_OFF 8
_Static_assert(HS_NONCE_OFF + 8 == RING__TCP_HS_LEN, "handshake layout differs from tcp.c");
_Static_assert(HDR_LEN_OFF + 8 == RING__TCP_HDR_LEN, "header layout differs from tcp.c");

typedef struct hs_params {
    int nsocks, nranks, myrank;
    uint64_t nonce;
} hs_params;

static const char *hs_check(const unsigned char *h, const hs_params *p, uint32_t *rank, uint32_t *idx)
{
    return ring__tcp_hs_check(h, fuzz_secret, p->nonce, p->nsocks, p->nranks, p->myrank, rank, idx);
}

/* h is exactly RING__TCP_HS_LEN long on the heap, so that ASan sees any read past it. */
static void check_handshake(const unsigned char *h, const hs_params *p)
{
    uint32_t rank = 0xffffffffu, idx = 0xffffffffu;
    const char *why = hs_check(h, p, &rank, &idx);
    if (why) {
        FUZZ_CHECK(why[0] != '\0');
        return;
    }
    /* The listener stores the socket at fds[rank][idx]: both must be in range, and a rank
     * never connects to itself. */
    FUZZ_CHECK(rank < (uint32_t)p->nranks && rank != (uint32_t)p->myrank);
    FUZZ_CHECK(idx < (uint32_t)p->nsocks && idx < RING__MAX_NSOCKS);
    FUZZ_CHECK(rank == ring__get32(h + HS_RANK_OFF) && idx == ring__get32(h + HS_RANK_OFF + 4));
    FUZZ_CHECK(memcmp(h + HS_SECRET_OFF, fuzz_secret, 16) == 0);
    FUZZ_CHECK(ring__get64(h + HS_NONCE_OFF) == p->nonce);

    /* Everything but rank and index must match exactly: one flipped bit in magic, version,
     * socket count, secret or nonce is a stranger, a skewed build or another job. */
    unsigned char *m = malloc(RING__TCP_HS_LEN);
    FUZZ_CHECK(m != NULL);
    for (size_t i = 0; i < RING__TCP_HS_LEN; i++) {
        if (i >= HS_RANK_OFF && i < HS_NONCE_OFF) continue;
        memcpy(m, h, RING__TCP_HS_LEN);
        m[i] ^= (unsigned char)(1u << (i % 8));
        uint32_t r2, i2;
        FUZZ_CHECK(hs_check(m, p, &r2, &i2) != NULL);
    }
    free(m);
}

static void check_header(const unsigned char *hdr, uint32_t want_seq, uint64_t want_len)
{
    uint32_t seq = 0;
    uint64_t len = 0;
    int rc = ring__tcp_hdr_check(hdr, want_seq, (size_t)want_len, &seq, &len);
    FUZZ_CHECK(rc >= 0 && rc <= 3);
    /* check_header in tcp.c prints seq and len for codes 2 and 3: they must be what arrived. */
    if (rc != 1) {
        FUZZ_CHECK(seq == ring__get32(hdr + HDR_SEQ_OFF));
        FUZZ_CHECK(len == ring__get64(hdr + HDR_LEN_OFF));
    }
    if (rc == 2) FUZZ_CHECK(seq != want_seq);
    if (rc == 3) FUZZ_CHECK(seq == want_seq && len != want_len);
    if (rc != 0) return;
    FUZZ_CHECK(seq == want_seq && len == want_len);

    /* All 16 bytes are significant: a single flipped bit anywhere is a stream out of sync. */
    unsigned char *m = malloc(RING__TCP_HDR_LEN);
    FUZZ_CHECK(m != NULL);
    for (size_t i = 0; i < RING__TCP_HDR_LEN; i++) {
        memcpy(m, hdr, RING__TCP_HDR_LEN);
        m[i] ^= (unsigned char)(1u << (i % 8));
        uint32_t s2;
        uint64_t l2;
        FUZZ_CHECK(ring__tcp_hdr_check(m, want_seq, (size_t)want_len, &s2, &l2) != 0);
    }
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader rd = {data, size};
    uint8_t flags = fuzz_u8(&rd);
    hs_params p;
    p.nsocks = 1 + fuzz_u8(&rd) % RING__MAX_NSOCKS;
    uint8_t b[2];
    fuzz_take(&rd, b, 2);
    p.nranks = 1 + (b[0] | b[1] << 8); /* 1 .. 65536 */
    fuzz_take(&rd, b, 2);
    p.myrank = (b[0] | b[1] << 8) % p.nranks;
    p.nonce = fuzz_u64(&rd);
    uint32_t want_seq = fuzz_u32(&rd);
    uint64_t want_len = fuzz_u64(&rd);

    unsigned char *hs = malloc(RING__TCP_HS_LEN);
    unsigned char *hdr = malloc(RING__TCP_HDR_LEN);
    FUZZ_CHECK(hs != NULL && hdr != NULL);
    fuzz_take(&rd, hs, RING__TCP_HS_LEN);
    fuzz_take(&rd, hdr, RING__TCP_HDR_LEN);
    if (flags & 1) memcpy(hs + HS_SECRET_OFF, fuzz_secret, 16);
    if (flags & 2) ring__put64(hs + HS_NONCE_OFF, p.nonce);
    if (flags & 4) {
        want_seq = ring__get32(hdr + HDR_SEQ_OFF);
        want_len = ring__get64(hdr + HDR_LEN_OFF);
    }

    check_handshake(hs, &p);
    check_header(hdr, want_seq, want_len);
    free(hdr);
    free(hs);
    return 0;
}
