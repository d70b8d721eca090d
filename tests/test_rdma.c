/* Unit tests of the RDMA transport's device-free parts (src/transport/rdma.h): GID choice from
 * GID tables as real ports present them, and the slot-window arithmetic of the credit protocol.
 * They need no verbs device and run in every build. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "rdma.h"

static ring__gid_ent_t v4(uint32_t index, uint32_t type, uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
    ring__gid_ent_t e = {.index = index, .type = type};
    e.gid[10] = e.gid[11] = 0xff;
    e.gid[12] = a, e.gid[13] = b, e.gid[14] = c, e.gid[15] = d;
    return e;
}

static ring__gid_ent_t v6_link_local(uint32_t index, uint32_t type)
{
    ring__gid_ent_t e = {.index = index, .type = type};
    e.gid[0] = 0xfe, e.gid[1] = 0x80, e.gid[8] = 0x98, e.gid[15] = 0xad;
    return e;
}

/* What a RoCE port with two addresses looks like: per address a v1 and a v2 entry, after the
 * link-local pair. */
static int roce_table(ring__gid_ent_t *t)
{
    int n = 0;
    t[n++] = v6_link_local(0, RING__GID_ROCE_V1);
    t[n++] = v6_link_local(1, RING__GID_ROCE_V2);
    t[n++] = v4(2, RING__GID_ROCE_V1, 10, 0, 0, 5);
    t[n++] = v4(3, RING__GID_ROCE_V2, 10, 0, 0, 5);
    t[n++] = v4(4, RING__GID_ROCE_V1, 192, 168, 7, 5);
    t[n++] = v4(5, RING__GID_ROCE_V2, 192, 168, 7, 5);
    return n;
}

Test(rdma_gid, roce_prefers_v2_with_the_bootstrap_address)
{
    ring__gid_ent_t t[8];
    int n = roce_table(t);
    char why[256];
    const uint8_t want[4] = {192, 168, 7, 5};
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, NULL, want, why, sizeof why), 5, "%s", why);
    cr_assert(strstr(why, "RoCE v2") && strstr(why, "192.168.7.5") && strstr(why, "bootstrap"), "%s", why);
}

Test(rdma_gid, roce_without_a_matching_address_takes_the_first_ipv4_v2)
{
    ring__gid_ent_t t[8];
    int n = roce_table(t);
    char why[256];
    const uint8_t lo[4] = {127, 0, 0, 1};
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, NULL, lo, why, sizeof why), 3, "%s", why);
    cr_assert(strstr(why, "no GID carries"), "%s", why);
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, NULL, NULL, why, sizeof why), 3, "%s", why);
}

/* A v1 GID that carries the bootstrap address and a v2 GID of another network: v2, as a peer
 * whose v1 GIDs carry no such address would take (the bootstrap match outranked v2, and the
 * two ranks' queue pairs then dropped every packet). */
Test(rdma_gid, roce_v2_outranks_the_bootstrap_address_on_v1)
{
    ring__gid_ent_t t[2] = {v4(0, RING__GID_ROCE_V1, 10, 0, 0, 5), v4(1, RING__GID_ROCE_V2, 192, 168, 1, 5)};
    const uint8_t want[4] = {10, 0, 0, 5};
    char why[160];
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, NULL, want, why, sizeof why), 1, "%s", why);
    cr_assert(strstr(why, "RoCE v2") && strstr(why, "no GID carries the bootstrap"), "%s", why);
}

Test(rdma_gid, soft_roce_table_of_the_test_vm)
{
    /* rxe0 on dummy0 with 198.18.0.1: index 0 link-local v2... as the guest shows it. */
    ring__gid_ent_t t[2] = {v6_link_local(0, RING__GID_ROCE_V2), v4(1, RING__GID_ROCE_V2, 198, 18, 0, 1)};
    char why[256];
    const uint8_t lo[4] = {127, 0, 0, 1};
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, NULL, lo, why, sizeof why), 1, "%s", why);
}

Test(rdma_gid, roce_v1_only_and_ipv6_only_ports)
{
    ring__gid_ent_t t[3] = {v6_link_local(0, RING__GID_ROCE_V1), v4(1, RING__GID_ROCE_V1, 10, 1, 1, 1)};
    char why[256];
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, NULL, NULL, why, sizeof why), 1, "%s", why);
    cr_assert(strstr(why, "RoCE v1"), "%s", why);
    ring__gid_ent_t u[1] = {v6_link_local(7, RING__GID_ROCE_V2)};
    cr_assert_eq(ring__rdma_pick_gid(u, 1, 0, NULL, NULL, why, sizeof why), 7, "%s", why);
    cr_assert(strstr(why, "IPv6"), "%s", why);
}

/* An IPv6-only RoCE v2 port: the routable address, not the link-local one at index 0 (RoCE v2
 * between subnets cannot route from fe80::); it took index 0, as the lowest of equal scores. */
Test(rdma_gid, ipv6_only_port_takes_the_routable_address)
{
    ring__gid_ent_t g = {.index = 1, .type = RING__GID_ROCE_V2};
    g.gid[0] = 0x20, g.gid[1] = 0x01, g.gid[2] = 0x0d, g.gid[3] = 0xb8, g.gid[15] = 5;
    ring__gid_ent_t t[2] = {v6_link_local(0, RING__GID_ROCE_V2), g};
    char why[256];
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, NULL, NULL, why, sizeof why), 1, "%s", why);
    cr_assert(strstr(why, "IPv6") && !strstr(why, "link-local"), "%s", why);
    /* IPv4 still comes first. */
    ring__gid_ent_t u[3] = {t[0], t[1], v4(2, RING__GID_ROCE_V2, 10, 0, 0, 5)};
    cr_assert_eq(ring__rdma_pick_gid(u, 3, 0, NULL, NULL, why, sizeof why), 2, "%s", why);
}

/* A queue pair takes an 8-bit source GID index: in a table of hundreds of entries (addresses,
 * VLANs), the best one past 255 must not be picked, as it would be cut to index & 255 at RTR
 * (300 became 44). */
Test(rdma_gid, entries_past_index_255_are_not_picked)
{
    ring__gid_ent_t t[301];
    for (int i = 0; i < 300; i++) t[i] = v4((uint32_t)i, RING__GID_ROCE_V2, 10, 1, (uint8_t)(i >> 8), (uint8_t)i);
    t[300] = v4(300, RING__GID_ROCE_V2, 192, 168, 7, 5);
    char why[256];
    const uint8_t want[4] = {192, 168, 7, 5};
    int got = ring__rdma_pick_gid(t, 301, 0, NULL, want, why, sizeof why);
    cr_assert(got >= 0 && got <= 255, "picked %d: %s", got, why);
    cr_assert(strstr(why, "no GID carries"), "%s", why);
}

Test(rdma_gid, infiniband_takes_an_ib_gid_and_ignores_roce_entries)
{
    ring__gid_ent_t t[3] = {v4(0, RING__GID_ROCE_V2, 10, 0, 0, 1), v6_link_local(1, RING__GID_IB), v6_link_local(2, RING__GID_IB)};
    char why[256];
    cr_assert_eq(ring__rdma_pick_gid(t, 3, 1, NULL, NULL, why, sizeof why), 1, "%s", why);
    cr_assert(strstr(why, "InfiniBand"), "%s", why);
}

Test(rdma_gid, empty_or_zero_tables_say_so)
{
    ring__gid_ent_t t[2] = {{.index = 0, .type = RING__GID_ROCE_V2}, {.index = 1, .type = RING__GID_ROCE_V2}};
    char why[256];
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, NULL, NULL, why, sizeof why), -1);
    cr_assert(strstr(why, "no usable RoCE GID"), "%s", why);
    cr_assert_eq(ring__rdma_pick_gid(t, 0, 1, NULL, NULL, why, sizeof why), -1);
    /* A RoCE table offers nothing to an InfiniBand port, and the reverse. */
    ring__gid_ent_t r[1] = {v4(0, RING__GID_ROCE_V2, 10, 0, 0, 1)};
    cr_assert_eq(ring__rdma_pick_gid(r, 1, 1, NULL, NULL, why, sizeof why), -1);
    ring__gid_ent_t ib[1] = {v6_link_local(0, RING__GID_IB)};
    cr_assert_eq(ring__rdma_pick_gid(ib, 1, 0, NULL, NULL, why, sizeof why), -1);
}

/* A kind of GID: version, family, no range. */
#define KIND(v, f) (&(ring__gid_want_t){.version = (v), .family = (f), .prefix = -1})

/* RING_IB_ROCE_VERSION and RING_IB_ADDR_FAMILY narrow the choice to one kind of entry, which
 * means the same on every host where an index does not. */
Test(rdma_gid, a_kind_asked_for_narrows_the_choice)
{
    ring__gid_ent_t t[8];
    int n = roce_table(t);
    const uint8_t want[4] = {192, 168, 7, 5};
    char why[256];
    /* IPv6 only: the link-local v2 entry, although the bootstrap address has v2 entries. */
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, KIND(0, 6), want, why, sizeof why), 1, "%s", why);
    cr_assert(strstr(why, "RoCE v2, IPv6 link-local (RING_IB_ADDR_FAMILY=AF_INET6)"), "%s", why);
    /* v1 only: the v1 entry of the bootstrap address. */
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, KIND(1, 0), want, why, sizeof why), 4, "%s", why);
    cr_assert(strstr(why, "RoCE v1") && strstr(why, "(RING_IB_ROCE_VERSION=1)"), "%s", why);
    /* Both: v1 and IPv6. */
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, KIND(1, 6), want, why, sizeof why), 0, "%s", why);
    cr_assert(strstr(why, "(RING_IB_ROCE_VERSION=1, RING_IB_ADDR_FAMILY=AF_INET6)"), "%s", why);
    /* IPv4 and v2 ask for what the default picks anyway. */
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, KIND(2, 4), want, why, sizeof why), 5, "%s", why);
    /* A routable IPv6 address still goes before the link-local one. */
    ring__gid_ent_t g = v6_link_local(6, RING__GID_ROCE_V2);
    g.gid[0] = 0xfd, g.gid[1] = 0x00;
    t[n] = g;
    cr_assert_eq(ring__rdma_pick_gid(t, n + 1, 0, KIND(2, 6), NULL, why, sizeof why), 6, "%s", why);
}

/* RING_IB_ADDR_RANGE: one subnet among several on a port (VLANs), IPv4 or IPv6, any prefix. */
Test(rdma_gid, an_address_range_picks_its_subnet)
{
    ring__gid_ent_t t[8];
    int n = roce_table(t);
    const uint8_t want[4] = {192, 168, 7, 5};
    char why[256];
    ring__gid_want_t w = {.prefix = -1, .range = "10.0.0.0/16"};
    /* 10.0.0.0/16 as ring__parse_gid_range gives it: ::ffff:10.0.0.0, 96 + 16 bits. */
    w.net[10] = w.net[11] = 0xff, w.net[12] = 10, w.prefix = 112;
    /* The range outranks the bootstrap address (192.168.7.5): v2 entry of 10.0.0.5. */
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &w, want, why, sizeof why), 3, "%s", why);
    cr_assert(strstr(why, "(RING_IB_ADDR_RANGE=10.0.0.0/16)"), "%s", why);
    w.version = 1;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &w, want, why, sizeof why), 2, "%s", why);
    /* A prefix that is not a whole byte: 192.168.6.0/23 holds 192.168.7.5, 192.168.4.0/23 not. */
    ring__gid_want_t x = {.prefix = 96 + 23, .range = "192.168.6.0/23"};
    x.net[10] = x.net[11] = 0xff, x.net[12] = 192, x.net[13] = 168, x.net[14] = 6;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &x, NULL, why, sizeof why), 5, "%s", why);
    x.net[14] = 4;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &x, NULL, why, sizeof why), -1, "%s", why);
    cr_assert(strstr(why, "of the kind asked for: RING_IB_ADDR_RANGE=192.168.6.0/23"), "%s", why);
    /* fe80::/10: the link-local entries only, v2 first. */
    ring__gid_want_t l = {.prefix = 10, .range = "fe80::/10"};
    l.net[0] = 0xfe, l.net[1] = 0x80;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &l, want, why, sizeof why), 1, "%s", why);
    /* The port has IPv4 entries; the range left them out. */
    cr_assert(!strstr(why, "no IPv4 GID"), "%s", why);
    /* And the bootstrap address has a GID (192.168.7.5), outside the range asked for. */
    w.version = 0;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &w, want, why, sizeof why), 3, "%s", why);
    cr_assert(!strstr(why, "no GID carries"), "%s", why);
    /* /0 of either family takes all of that family and nothing of the other. */
    ring__gid_want_t all4 = {.prefix = 96, .range = "0.0.0.0/0"};
    all4.net[10] = all4.net[11] = 0xff;
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &all4, want, why, sizeof why), 5, "%s", why);
    ring__gid_want_t all = {.prefix = 0, .range = "::/0"};
    cr_assert_eq(ring__rdma_pick_gid(t, n, 0, &all, want, why, sizeof why), 5, "%s", why);
}

Test(rdma_gid, a_kind_the_port_lacks_says_what_was_asked)
{
    ring__gid_ent_t t[2] = {v6_link_local(0, RING__GID_ROCE_V2), v4(1, RING__GID_ROCE_V2, 198, 18, 0, 1)};
    char why[256];
    /* soft-RoCE has v2 entries only. */
    cr_assert_eq(ring__rdma_pick_gid(t, 2, 0, KIND(1, 0), NULL, why, sizeof why), -1);
    cr_assert(strstr(why, "no usable RoCE GID in the port's table (2 entries) of the kind asked for: RING_IB_ROCE_VERSION=1"),
              "%s", why);
    ring__gid_ent_t u[1] = {v4(1, RING__GID_ROCE_V2, 10, 0, 0, 1)};
    cr_assert_eq(ring__rdma_pick_gid(u, 1, 0, KIND(0, 6), NULL, why, sizeof why), -1);
    cr_assert(strstr(why, "of the kind asked for: RING_IB_ADDR_FAMILY=AF_INET6"), "%s", why);
    /* InfiniBand routes by LID: the RoCE kinds do not apply. */
    ring__gid_ent_t ib[1] = {v6_link_local(0, RING__GID_IB)};
    cr_assert_eq(ring__rdma_pick_gid(ib, 1, 1, KIND(2, 4), NULL, why, sizeof why), 0, "%s", why);
}

/* The handshake's check of the two ends' GIDs (ring__rdma_gid_check), on the soft-RoCE guest's
 * table (0: fe80:: link-local, 1: ::ffff:198.18.0.1, both RoCE v2) and on a dual-stack one. */
Test(rdma_gid, ends_of_one_version_and_family_connect)
{
    char why[512] = "";
    ring__gid_ent_t a = v4(1, RING__GID_ROCE_V2, 198, 18, 0, 1), b = v4(3, RING__GID_ROCE_V2, 10, 0, 0, 5);
    cr_assert_eq(ring__rdma_gid_check(&a, &b, 1, why, sizeof why), 0, "%s", why);
    ring__gid_ent_t l = v6_link_local(0, RING__GID_ROCE_V2), m = v6_link_local(1, RING__GID_ROCE_V2);
    cr_assert_eq(ring__rdma_gid_check(&l, &m, 1, why, sizeof why), 0, "%s", why);
    /* RoCE v1 routes by the Ethernet address: the GIDs' families do not matter there. */
    ring__gid_ent_t v1a = v4(2, RING__GID_ROCE_V1, 10, 0, 0, 5), v1b = v6_link_local(0, RING__GID_ROCE_V1);
    cr_assert_eq(ring__rdma_gid_check(&v1a, &v1b, 1, why, sizeof why), 0, "%s", why);
    /* A device that did not say its GID's type: nothing to compare, as before the check. */
    ring__gid_ent_t u = v4(1, RING__GID_UNKNOWN, 10, 0, 0, 6);
    cr_assert_eq(ring__rdma_gid_check(&u, &v1a, 1, why, sizeof why), 0, "%s", why);
    cr_assert_eq(ring__rdma_gid_check(&b, &u, 1, why, sizeof why), 0, "%s", why);
}

Test(rdma_gid, ipv4_and_ipv6_v2_ends_are_refused_naming_both)
{
    char why[512] = "";
    ring__gid_ent_t l = v6_link_local(0, RING__GID_ROCE_V2), a = v4(1, RING__GID_ROCE_V2, 198, 18, 0, 1);
    cr_assert_eq(ring__rdma_gid_check(&l, &a, 3, why, sizeof why), -1);
    cr_assert(strstr(why, "GID index 0 (RoCE v2, IPv6 fe80::9800:0:0:ad) here, GID index 1 (RoCE v2, IPv4 198.18.0.1) at rank 3"),
              "%s", why);
    cr_assert(strstr(why, "IPv4 and IPv6") && strstr(why, "RING_IB_ADDR_FAMILY)"), "%s", why);
    cr_assert_eq(ring__rdma_gid_check(&a, &l, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "GID index 1 (RoCE v2, IPv4 198.18.0.1) here, GID index 0 (RoCE v2, IPv6 fe80::9800:0:0:ad) at rank 0"),
              "%s", why);
}

Test(rdma_gid, v1_and_v2_ends_are_refused_naming_both)
{
    char why[512] = "";
    ring__gid_ent_t t[6];
    roce_table(t);
    /* Index 3 on one host and 2 on the other: same address, different versions. */
    cr_assert_eq(ring__rdma_gid_check(&t[3], &t[2], 1, why, sizeof why), -1);
    cr_assert(strstr(why, "GID index 3 (RoCE v2, IPv4 10.0.0.5) here, GID index 2 (RoCE v1, IPv4 10.0.0.5) at rank 1"), "%s",
              why);
    cr_assert(strstr(why, "RoCE versions differ"), "%s", why);
    cr_assert_eq(ring__rdma_gid_check(&t[0], &t[5], 2, why, sizeof why), -1);
    cr_assert(strstr(why, "RoCE versions differ"), "%s", why);
}

Test(rdma_gid, a_refusal_of_two_long_ipv6_gids_fits_the_handshake)
{
    /* The text travels in the handshake (HS_TEXT, 320 bytes with its terminator) and must
     * keep its advice at the end. */
    ring__gid_ent_t a = {.index = 255, .type = RING__GID_ROCE_V2}, b = {.index = 254, .type = RING__GID_ROCE_V1};
    memset(a.gid, 0xab, 16);
    memset(b.gid, 0xcd, 16);
    char why[512] = "";
    cr_assert_eq(ring__rdma_gid_check(&a, &b, 2147483647, why, sizeof why), -1);
    cr_assert_lt(strlen(why), 320, "%zu: %s", strlen(why), why);
    cr_assert(strstr(why, "abab:abab:abab:abab:abab:abab:abab:abab") && strstr(why, "(RING_IB_ROCE_VERSION, RING_IB_ADDR_FAMILY)"), "%s", why);
}

Test(rdma_soft, kernel_devices_are_named)
{
    cr_assert(ring__rdma_soft_device("rxe0"));
    cr_assert(ring__rdma_soft_device("siw_eth0"));
    cr_assert_not(ring__rdma_soft_device("mlx5_0"));
    cr_assert_not(ring__rdma_soft_device("bnxt_re0"));
    cr_assert_not(ring__rdma_soft_device(NULL));
}

Test(rdma_credit, sender_window_holds_exactly_nslots)
{
    cr_assert(ring__rdma_can_post(0, 0, 4));
    cr_assert(ring__rdma_can_post(3, 0, 4));
    cr_assert_not(ring__rdma_can_post(4, 0, 4));
    cr_assert(ring__rdma_can_post(4, 1, 4));
    /* Across the 2^32 wrap of the immediate: the counters themselves are 64-bit. */
    uint64_t base = (1ull << 32) - 2;
    cr_assert(ring__rdma_can_post(base + 3, base, 4));
    cr_assert_not(ring__rdma_can_post(base + 4, base, 4));
}

Test(rdma_credit, immediate_maps_into_the_window_only)
{
    uint64_t s;
    cr_assert_eq(ring__rdma_slot_of_imm(10, 4, 10, &s), 0);
    cr_assert_eq(s, 10);
    cr_assert_eq(ring__rdma_slot_of_imm(10, 4, 13, &s), 0);
    cr_assert_eq(s, 13);
    cr_assert_eq(ring__rdma_slot_of_imm(10, 4, 14, &s), -1, "one past the window");
    cr_assert_eq(ring__rdma_slot_of_imm(10, 4, 9, &s), -1, "a slot already freed");
    /* Only 31 bits travel (the sender masks them), so the window wraps at 2^31: freed = 2^31 - 1,
     * imm 1 is slot 2^31 + 1, and at freed = 2^31 the next write's imm is 0. */
    uint64_t f = (1ull << 31) - 1;
    cr_assert_eq(ring__rdma_slot_of_imm(f, 4, 1, &s), 0);
    cr_assert_eq(s, (1ull << 31) + 1);
    cr_assert_eq(ring__rdma_slot_of_imm(f, 4, 3, &s), -1);
    cr_assert_eq(ring__rdma_slot_of_imm(1ull << 31, 4, 0, &s), 0);
    cr_assert_eq(s, 1ull << 31);
    /* ... and again at every multiple of 2^31, here 3 * 2^31 + 5, where imm is 5 + 2^31 - 2^31. */
    f = 3 * (1ull << 31) + 5;
    cr_assert_eq(ring__rdma_slot_of_imm(f, 4, (uint32_t)(f + 2) & RING__RDMA_IMM_MASK, &s), 0);
    cr_assert_eq(s, f + 2);
    cr_assert_eq(ring__rdma_slot_of_imm(f, 4, (uint32_t)(f - 1) & RING__RDMA_IMM_MASK, &s), -1, "freed already");
}

Test(rdma_credit, release_returns_credits_in_order)
{
    uint8_t done[4] = {0};
    uint64_t freed = 0;
    /* Slots 0..3 handed out (limit 4); the engine releases 2, 1, 0, 3. */
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 4, 2), 0);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 4, 1), 0);
    cr_assert_eq(freed, 0);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 4, 0), 3, "0 frees 0, 1 and 2 at once");
    cr_assert_eq(freed, 3);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 4, 3), 1);
    cr_assert_eq(freed, 4);
    /* Errors: twice, below the freed count, beyond what was handed out. */
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 6, 5), 0);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 6, 5), -1);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 6, 3), -1);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 6, 6), -1);
    cr_assert_eq(ring__rdma_release(done, 4, &freed, 6, 4), 2);
    cr_assert_eq(freed, 6);
}

Test(rdma_credit, window_and_release_agree_over_many_rounds)
{
    /* A sender and a receiver driven by the same arithmetic never overrun: simulate random
     * release orders and check that every slot written lands in a free one. */
    enum { N = 8 };
    uint8_t done[N] = {0}, busy[N] = {0};
    /* Started below 2^31 so that the counters cross the immediate's wrap. */
    const uint64_t start = (1ull << 31) - 5000;
    uint64_t next = start, freed = start, handed = start, credit = start;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 100000; round++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        if ((rng & 1) && ring__rdma_can_post(next, credit, N)) {
            cr_assert_not(busy[next % N], "slot %llu overwritten before it was freed", (unsigned long long)next);
            busy[next % N] = 1;
            uint64_t s;
            /* As rdma.c sends it: the low 31 bits. */
            cr_assert_eq(ring__rdma_slot_of_imm(freed, N, (uint32_t)next & RING__RDMA_IMM_MASK, &s), 0);
            cr_assert_eq(s, next);
            next++;
        } else if (handed < next) {
            handed++; /* the receiver reads the next slot */
        }
        if ((rng & 6) == 6 && freed < handed) {
            /* release a random slot among the read and not yet released ones */
            uint64_t cand[N];
            int k = 0;
            for (uint64_t x = freed; x < handed; x++)
                if (!done[x % N]) cand[k++] = x;
            if (k) {
                uint64_t x = cand[(rng >> 8) % (uint64_t)k];
                uint64_t before = freed;
                cr_assert_geq(ring__rdma_release(done, N, &freed, handed, x), 0);
                for (uint64_t y = before; y < freed; y++) busy[y % N] = 0;
                credit = freed;
            }
        }
    }
    cr_assert_gt(freed, 1ull << 31, "the run must cross the wrap (freed %llu)", (unsigned long long)freed);
}
