/*
 * HELLO, the 296-byte frame every rank sends the root first (bootstrap.c). The root parses it
 * from anyone who connects, before knowing who they are, so every byte is hostile.
 *
 * Input: the first 296 bytes are a HELLO as received (zero-padded when shorter); byte 296,
 * bit 0, writes the job secret into it, because the secret is compared in constant time and
 * the fuzzer could never guess it. The same bytes, read as fields (rank, nranks, address
 * block, secret choice), also build a HELLO with ring__hello_build that must parse back.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "fuzz_util.h"

/* Offsets in the frame (bootstrap.c): magic, version, secret, nranks, rank, then the address
 * block, laid out as one rank-table entry (addr len, addr, host, boot id, pid). */
#define SECRET_OFF 8
#define INFO_OFF 32
#define HOST_OFF (INFO_OFF + 4 + RING__TP_ADDR_MAX)
#define BOOTID_OFF (HOST_OFF + RING__HOST_MAX)

static void check_terminated(const ring__peer_info_t *info)
{
    FUZZ_CHECK(info->host[RING__HOST_MAX - 1] == '\0');
    FUZZ_CHECK(info->bootid[RING__BOOTID_MAX - 1] == '\0');
}

/* What parse must do with any 296 bytes. buf is exactly RING__HELLO_LEN long on the heap, so
 * that ASan sees any read past the frame. */
static void check_parse(const unsigned char *buf)
{
    uint32_t rank = 0, nranks = 0;
    ring__peer_info_t info;
    ring_result_t code = RING_ERR_INTERNAL;
    const char *why = ring__hello_parse(buf, fuzz_secret, &rank, &nranks, &info, &code);
    if (why) {
        FUZZ_CHECK(code == RING_ERR_PROTOCOL || code == RING_ERR_AUTH);
        /* The root copies the reason into a REJECT frame: it must fit whole. */
        FUZZ_CHECK(why[0] != '\0' && strlen(why) < RING__REJECT_MSG_LEN);
        return;
    }
    FUZZ_CHECK(code == RING_OK);
    FUZZ_CHECK(info.addr.len >= 1 && info.addr.len <= RING__TP_ADDR_MAX);
    check_terminated(&info);

    /* Accepted means every field was taken as sent: building a HELLO from what parse returned
     * gives the same bytes back, except the string terminators that parse forces. */
    unsigned char *again = malloc(RING__HELLO_LEN);
    FUZZ_CHECK(again != NULL);
    ring__hello_build(again, fuzz_secret, rank, nranks, &info);
    unsigned char *want = malloc(RING__HELLO_LEN);
    FUZZ_CHECK(want != NULL);
    memcpy(want, buf, RING__HELLO_LEN);
    want[HOST_OFF + RING__HOST_MAX - 1] = '\0';
    want[BOOTID_OFF + RING__BOOTID_MAX - 1] = '\0';
    FUZZ_CHECK(memcmp(again, want, RING__HELLO_LEN) == 0);

    /* Magic, version and secret are all checked: flipping a bit in any of their bytes must
     * turn an accepted HELLO into a rejected one. */
    for (size_t i = 0; i < SECRET_OFF + 16; i++) {
        memcpy(want, buf, RING__HELLO_LEN);
        want[i] ^= (unsigned char)(1u << (i % 8));
        ring__peer_info_t scratch;
        uint32_t r2, n2;
        ring_result_t c2;
        FUZZ_CHECK(ring__hello_parse(want, fuzz_secret, &r2, &n2, &scratch, &c2) != NULL);
        FUZZ_CHECK(c2 == RING_ERR_PROTOCOL || c2 == RING_ERR_AUTH);
    }
    free(want);
    free(again);
}

/* build then parse: what a well-behaved rank sends must be accepted as sent. */
static void check_roundtrip(fuzz_reader *rd)
{
    ring__peer_info_t in;
    memset(&in, 0, sizeof in);
    uint32_t rank = fuzz_u32(rd), nranks = fuzz_u32(rd);
    in.addr.len = fuzz_u32(rd);
    fuzz_take(rd, in.addr.data, sizeof in.addr.data);
    fuzz_take(rd, in.host, sizeof in.host);
    fuzz_take(rd, in.bootid, sizeof in.bootid);
    in.pid = fuzz_u32(rd);
    uint8_t which = fuzz_u8(rd);

    uint8_t secret[16];
    memcpy(secret, fuzz_secret, sizeof secret);
    int wrong_secret = which & 1;
    if (wrong_secret) secret[(which >> 1) % 16] ^= (uint8_t)(1u << (which >> 5));

    unsigned char *buf = malloc(RING__HELLO_LEN);
    FUZZ_CHECK(buf != NULL);
    ring__hello_build(buf, secret, rank, nranks, &in);
    uint32_t r = 0, n = 0;
    ring__peer_info_t out;
    ring_result_t code = RING_ERR_INTERNAL;
    const char *why = ring__hello_parse(buf, fuzz_secret, &r, &n, &out, &code);
    if (wrong_secret) {
        FUZZ_CHECK(why != NULL && code == RING_ERR_AUTH);
    } else if (in.addr.len == 0 || in.addr.len > RING__TP_ADDR_MAX) {
        FUZZ_CHECK(why != NULL && code == RING_ERR_PROTOCOL);
    } else {
        FUZZ_CHECK(why == NULL && code == RING_OK);
        FUZZ_CHECK(r == rank && n == nranks);
        FUZZ_CHECK(out.addr.len == in.addr.len);
        FUZZ_CHECK(memcmp(out.addr.data, in.addr.data, RING__TP_ADDR_MAX) == 0);
        FUZZ_CHECK(memcmp(out.host, in.host, RING__HOST_MAX - 1) == 0);
        FUZZ_CHECK(memcmp(out.bootid, in.bootid, RING__BOOTID_MAX - 1) == 0);
        FUZZ_CHECK(out.pid == in.pid);
        check_terminated(&out);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf = calloc(1, RING__HELLO_LEN);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size < RING__HELLO_LEN ? size : RING__HELLO_LEN);
    if (size > RING__HELLO_LEN && (data[RING__HELLO_LEN] & 1)) memcpy(buf + SECRET_OFF, fuzz_secret, 16);
    check_parse(buf);
    free(buf);

    fuzz_reader rd = {data, size};
    check_roundtrip(&rd);
    return 0;
}
