/*
 * Rank-table entries: after the 24-byte TABLE header, rank_run (bootstrap.c) reads nranks
 * 264-byte entries from the root and parses each with ring__peer_info_parse; the root parses
 * the same block inside every HELLO. The address, host and boot id then size copies and are
 * printed, so a length or terminator taken from the wire unchecked would be a memory bug.
 *
 * Input: consecutive 264-byte entries (the table body); a short last one is zero-padded. The
 * header checks in rank_run are inline code, not a function, and are not covered here.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "fuzz_util.h"
#include "wire.h"

/* Entry layout (bootstrap.c put_info): addr len, addr, host, boot id, pid, flags (top byte:
 * NUMA nodes), layout key, kernel, CPUs, shared-memory identity. */
#define ADDR_OFF 4
#define HOST_OFF (ADDR_OFF + RING__TP_ADDR_MAX)
#define BOOTID_OFF (HOST_OFF + RING__HOST_MAX)
#define PID_OFF (BOOTID_OFF + RING__BOOTID_MAX)
#define FLAGS_OFF (PID_OFF + 4)
#define LAYOUT_OFF (FLAGS_OFF + 4)
#define KERNEL_OFF (LAYOUT_OFF + 4)
#define CPUS_OFF (KERNEL_OFF + 4)
#define SHM_ID_OFF (CPUS_OFF + 4)
#define HELLO_INFO_OFF 32
_Static_assert(SHM_ID_OFF + 8 == RING__TABLE_ENTRY_LEN, "entry layout differs from bootstrap.c");
_Static_assert(HELLO_INFO_OFF + RING__TABLE_ENTRY_LEN == RING__HELLO_LEN, "HELLO layout differs from bootstrap.c");

/* e is exactly one entry long on the heap, so that ASan sees any read past it. */
static void check_entry(const unsigned char *e)
{
    ring__peer_info_t info;
    int rc = ring__peer_info_parse(e, &info);
    uint32_t len = ring__get32(e);
    int valid = len >= 1 && len <= RING__TP_ADDR_MAX;
    /* The address length is the only thing that can make an entry malformed; any other bytes
     * are data (a layout key that differs from this rank's fails init later, in comm.c), and
     * refusing them here would fail a legitimate job. */
    FUZZ_CHECK(rc == 0 || rc == -1);
    FUZZ_CHECK((rc == 0) == valid);
    if (rc != 0) return;

    FUZZ_CHECK(info.addr.len == len);
    FUZZ_CHECK(info.host[RING__HOST_MAX - 1] == '\0');
    FUZZ_CHECK(info.bootid[RING__BOOTID_MAX - 1] == '\0');
    FUZZ_CHECK(strlen(info.host) < RING__HOST_MAX && strlen(info.bootid) < RING__BOOTID_MAX);
    FUZZ_CHECK(info.pid == ring__get32(e + PID_OFF));
    /* The flags word: flags in the low 24 bits, the host's NUMA node count in the top byte. */
    FUZZ_CHECK(info.flags == (ring__get32(e + FLAGS_OFF) & 0xffffffu));
    FUZZ_CHECK(info.numa_nodes == ring__get32(e + FLAGS_OFF) >> 24);
    FUZZ_CHECK(info.layout == ring__get32(e + LAYOUT_OFF));
    FUZZ_CHECK(info.kernel == ring__get32(e + KERNEL_OFF));
    FUZZ_CHECK(((uint32_t)info.cpu_first << 16 | info.cpu_count) == ring__get32(e + CPUS_OFF));
    FUZZ_CHECK(info.shm_id == ring__get64(e + SHM_ID_OFF));

    /* Serialising what was parsed (the root does exactly that when it sends the table) gives
     * the entry back, except the terminators parse forces. A HELLO carries the same block. */
    unsigned char *hello = malloc(RING__HELLO_LEN);
    unsigned char *want = malloc(RING__TABLE_ENTRY_LEN);
    FUZZ_CHECK(hello != NULL && want != NULL);
    ring__hello_build(hello, fuzz_secret, 1, 2, &info);
    memcpy(want, e, RING__TABLE_ENTRY_LEN);
    want[HOST_OFF + RING__HOST_MAX - 1] = '\0';
    want[BOOTID_OFF + RING__BOOTID_MAX - 1] = '\0';
    FUZZ_CHECK(memcmp(hello + HELLO_INFO_OFF, want, RING__TABLE_ENTRY_LEN) == 0);
    free(want);
    free(hello);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    do {
        unsigned char *e = calloc(1, RING__TABLE_ENTRY_LEN);
        FUZZ_CHECK(e != NULL);
        size_t k = size - off < RING__TABLE_ENTRY_LEN ? size - off : RING__TABLE_ENTRY_LEN;
        if (k) memcpy(e, data + off, k);
        check_entry(e);
        free(e);
        off += k;
    } while (off < size);
    return 0;
}
