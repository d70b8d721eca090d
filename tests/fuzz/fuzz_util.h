/*
 * Shared by the libFuzzer harnesses and the seed generator. Invariant violations trap, so
 * libFuzzer reports them like any crash and saves the input that caused them.
 */
#ifndef RING_FUZZ_UTIL_H
#define RING_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The message names the broken invariant: a bare trap would leave only a line number. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

/* Every harness and seed uses this job secret, so that seeds authenticate and mutations of
 * them explore what lies behind the secret check. */
static const uint8_t fuzz_secret[16] = {0x52, 0x69, 0x6e, 0x67, 0x46, 0x75, 0x7a, 0x7a,
                                        0x53, 0x65, 0x63, 0x72, 0x65, 0x74, 0x21, 0x01};

/* Reads fields from the fuzzer's bytes; past the end it yields zeros, so that every input,
 * however short, still drives the whole harness. */
typedef struct fuzz_reader {
    const uint8_t *p;
    size_t n;
} fuzz_reader;

static inline void fuzz_take(fuzz_reader *r, void *out, size_t len)
{
    size_t k = len < r->n ? len : r->n;
    if (k) memcpy(out, r->p, k);
    memset((uint8_t *)out + k, 0, len - k);
    r->p += k;
    r->n -= k;
}

static inline uint8_t fuzz_u8(fuzz_reader *r)
{
    uint8_t v;
    fuzz_take(r, &v, 1);
    return v;
}

static inline uint32_t fuzz_u32(fuzz_reader *r)
{
    uint8_t b[4];
    fuzz_take(r, b, 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t fuzz_u64(fuzz_reader *r)
{
    uint64_t lo = fuzz_u32(r);
    return lo | (uint64_t)fuzz_u32(r) << 32;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
