/*
 * Notice frames on the bootstrap star (watch.c): the watcher thread reads whatever arrives
 * into an 816-byte buffer and parses frames off its front (drain()), so the parser sees
 * every split of the byte stream: partial headers, partial text, several frames at once.
 *
 * The input is used three ways: parsed as one buffer; fed as a stream, in chunk sizes drawn
 * from the input, through a copy of drain()'s buffer handling, which must decode the same
 * frames as parsing the stream in one piece; and read as fields (type, origin, code, text)
 * for ring__notice_build, whose frame must parse back.
 */
#include <stdlib.h>
#include <string.h>

#include "watch.h"
#include "fuzz_util.h"
#include "wire.h"

#define FRAME_MAX (RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX)
#define ORIGIN_OFF 8

typedef struct frame {
    long used;
    uint32_t type, origin, code;
    const unsigned char *text;
    size_t textlen;
} frame;

static long parse(const unsigned char *buf, size_t len, frame *f)
{
    f->text = NULL;
    f->textlen = 0;
    f->used = ring__notice_parse(buf, len, &f->type, &f->origin, &f->code, &f->text, &f->textlen);
    return f->used;
}

/* What every parse must satisfy, whatever buf[0..len) holds. */
static void check_result(const unsigned char *buf, size_t len, const frame *f)
{
    FUZZ_CHECK(f->used >= -1 && f->used <= (long)len);
    /* drain() waits for more bytes on 0; with a full buffer no more can come, and the next
     * recv of 0 bytes would be taken for a closed connection, a false death report. */
    if (f->used == 0) FUZZ_CHECK(len < FRAME_MAX);
    if (f->used <= 0) return;
    FUZZ_CHECK(f->used >= RING__NOTICE_HDR);
    FUZZ_CHECK(f->textlen <= RING__NOTICE_TEXT_MAX);
    FUZZ_CHECK((size_t)f->used == RING__NOTICE_HDR + f->textlen);
    /* drain() copies textlen bytes from text: they must lie inside what was received. */
    FUZZ_CHECK(f->text == buf + RING__NOTICE_HDR && f->textlen <= len - RING__NOTICE_HDR);
    FUZZ_CHECK(f->type == RING__NOTICE_FAIL || f->type == RING__NOTICE_BYE || f->type == RING__NOTICE_WAITING);
    /* A stuck report: the root decodes exactly one descriptor's hex digits from it. */
    if (f->type == RING__NOTICE_WAITING) FUZZ_CHECK(f->textlen == RING__NOTICE_WAITING_TEXT && f->code == 0);
    FUZZ_CHECK(f->origin == ring__get32(buf + ORIGIN_OFF));
    FUZZ_CHECK(f->code < 64);
    /* A FAIL's code becomes the communicator's failure code (ring__fail_remote). RING_OK there
     * marks the communicator failed with "success": calls in flight and later ones return
     * RING_OK without having run. */
    if (f->type == RING__NOTICE_FAIL) FUZZ_CHECK(f->code != RING_OK);
}

/* The verdict on a buffer depends only on its bytes, not on how many arrived: shorter
 * prefixes of a complete frame need more bytes, and garbage stays garbage as bytes arrive. */
static void check_prefix(const unsigned char *buf, size_t len, const frame *whole, size_t cut)
{
    if (cut >= len) return;
    unsigned char *p = malloc(cut ? cut : 1); /* exactly cut bytes: reads past them are caught */
    FUZZ_CHECK(p != NULL);
    memcpy(p, buf, cut);
    frame f;
    parse(p, cut, &f);
    check_result(p, cut, &f);
    if (whole->used > 0) {
        if (cut < (size_t)whole->used) {
            FUZZ_CHECK(f.used == 0);
        } else {
            FUZZ_CHECK(f.used == whole->used && f.type == whole->type && f.origin == whole->origin &&
                       f.code == whole->code && f.textlen == whole->textlen);
        }
    } else if (whole->used == 0) {
        FUZZ_CHECK(f.used == 0);
    } else {
        FUZZ_CHECK(f.used <= 0);
    }
    free(p);
}

/* The stream parsed in one piece: the frames, and whether it ended in garbage. */
static size_t parse_stream(const uint8_t *data, size_t size, frame *out, int *garbage)
{
    size_t n = 0, off = 0;
    *garbage = 0;
    for (;;) {
        frame f;
        parse(data + off, size - off, &f);
        check_result(data + off, size - off, &f);
        if (f.used == 0) break;
        if (f.used < 0) {
            *garbage = 1;
            break;
        }
        out[n++] = f;
        off += (size_t)f.used;
    }
    return n;
}

/* drain()'s buffer handling with the socket replaced by the input, delivered in chunks. */
static void check_drain(const uint8_t *data, size_t size, const frame *want, size_t nwant, int want_garbage)
{
    unsigned char *ib = malloc(FRAME_MAX);
    FUZZ_CHECK(ib != NULL);
    size_t got = 0, off = 0, nseen = 0;
    uint32_t rng = 2463534242u ^ (uint32_t)size ^ (size ? (uint32_t)data[size - 1] << 8 : 0);
    int garbage = 0;
    while (off < size && !garbage) {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        size_t chunk = 1 + rng % (2 * FRAME_MAX);
        size_t space = FRAME_MAX - got;
        FUZZ_CHECK(space > 0); /* see check_result: a full buffer must hold a whole frame */
        size_t k = chunk < space ? chunk : space;
        if (k > size - off) k = size - off;
        memcpy(ib + got, data + off, k);
        got += k;
        off += k;
        for (;;) {
            frame f;
            parse(ib, got, &f);
            check_result(ib, got, &f);
            if (f.used == 0) break;
            if (f.used < 0) {
                garbage = 1;
                break;
            }
            FUZZ_CHECK(nseen < nwant);
            const frame *w = &want[nseen++];
            FUZZ_CHECK(f.used == w->used && f.type == w->type && f.origin == w->origin && f.code == w->code &&
                       f.textlen == w->textlen && memcmp(f.text, w->text, f.textlen) == 0);
            memmove(ib, ib + f.used, got - (size_t)f.used);
            got -= (size_t)f.used;
        }
    }
    FUZZ_CHECK(nseen == nwant && garbage == want_garbage);
    free(ib);
}

static void check_build(fuzz_reader *rd)
{
    uint8_t pick = fuzz_u8(rd);
    /* Mostly the real types, sometimes anything, so the rejection side is built too. */
    uint32_t type = (pick & 3) == 3   ? fuzz_u32(rd)
                    : (pick & 3) == 2 ? RING__NOTICE_WAITING
                    : (pick & 1)      ? RING__NOTICE_FAIL
                                      : RING__NOTICE_BYE;
    uint32_t origin = fuzz_u32(rd);
    uint32_t code = (pick & 4) ? fuzz_u32(rd) : fuzz_u8(rd) % 16;
    uint32_t tl = fuzz_u32(rd) % (RING__NOTICE_TEXT_MAX + 200);
    char *text = malloc((size_t)tl + 1);
    FUZZ_CHECK(text != NULL);
    fuzz_take(rd, text, tl);
    text[tl] = '\0';

    unsigned char *buf = malloc(FRAME_MAX);
    FUZZ_CHECK(buf != NULL);
    size_t n = ring__notice_build(buf, type, origin, code, (pick & 8) ? NULL : text);
    size_t want_text = (pick & 8) ? 0 : strlen(text);
    if (want_text > RING__NOTICE_TEXT_MAX) want_text = RING__NOTICE_TEXT_MAX;
    FUZZ_CHECK(n == RING__NOTICE_HDR + want_text);

    frame f;
    parse(buf, n, &f);
    check_result(buf, n, &f);
    uint32_t c16 = code & 0xffffu;
    /* What ranks actually send (watch.c): BYE with code 0, FAIL with a code from wire_code(),
     * WAITING with code 0 and one descriptor in hex. */
    int sent = (type == RING__NOTICE_BYE && c16 == 0) ||
               (type == RING__NOTICE_WAITING && c16 == 0 && !(pick & 8) && strlen(text) == RING__NOTICE_WAITING_TEXT) ||
               (type == RING__NOTICE_FAIL &&
                (c16 == RING_ERR_PEER || c16 == RING_ERR_MISMATCH || c16 == RING_ERR_TIMEOUT));
    if (sent) FUZZ_CHECK(f.used > 0);
    if ((type != RING__NOTICE_FAIL && type != RING__NOTICE_BYE && type != RING__NOTICE_WAITING) || c16 >= 64)
        FUZZ_CHECK(f.used == -1);
    if (type == RING__NOTICE_WAITING && want_text != RING__NOTICE_WAITING_TEXT) FUZZ_CHECK(f.used == -1);
    /* A whole frame is never "need more bytes"; between the two cases above, the parser may
     * refuse a code, but what it accepts must be what was built. */
    FUZZ_CHECK(f.used != 0);
    if (f.used > 0) {
        FUZZ_CHECK((size_t)f.used == n && f.type == type && f.origin == origin && f.code == c16);
        FUZZ_CHECK(f.textlen == want_text && memcmp(f.text, text, want_text) == 0);
    }
    free(buf);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    frame whole;
    parse(data, size, &whole);
    check_result(data, size, &whole);
    if (size) {
        check_prefix(data, size, &whole, size - 1);
        if (whole.used > 0) check_prefix(data, size, &whole, (size_t)whole.used - 1);
        check_prefix(data, size, &whole, data[0] % (size + 1));
    }

    frame *frames = malloc((size / RING__NOTICE_HDR + 1) * sizeof *frames);
    FUZZ_CHECK(frames != NULL);
    int garbage;
    size_t n = parse_stream(data, size, frames, &garbage);
    check_drain(data, size, frames, n, garbage);
    free(frames);

    fuzz_reader rd = {data, size};
    check_build(&rd);
    return 0;
}
