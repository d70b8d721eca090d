/* Device-free parts of the RDMA transport (rdma.h): GID choice and slot-window arithmetic. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "rdma.h"

static int is_v4_mapped(const uint8_t g[16])
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, pre, sizeof pre) == 0;
}

static int is_link_local(const uint8_t g[16]) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

static int is_zero(const uint8_t g[16])
{
    for (int i = 0; i < 16; i++)
        if (g[i]) return 0;
    return 1;
}

int ring__rdma_soft_device(const char *name)
{
    return name && (!strncmp(name, "rxe", 3) || !strncmp(name, "siw", 3));
}

/* The first `bits` bits of a and b are equal. */
static int same_prefix(const uint8_t *a, const uint8_t *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole)) return 0;
    return !rest || ((a[whole] ^ b[whole]) >> (8 - rest)) == 0;
}

int ring__rdma_pick_gid(const ring__gid_ent_t *t, int n, int is_ib, const ring__gid_want_t *w, const uint8_t *want_v4,
                        char *why, size_t len)
{
    int best = -1, best_score = -1;
    const int version = w && !is_ib ? w->version : 0, family = w && !is_ib ? w->family : 0;
    const int prefix = w && !is_ib ? w->prefix : -1;
    char asked[160] = "";
    if (version) snprintf(asked, sizeof asked, "RING_IB_ROCE_VERSION=%d", version);
    if (family)
        snprintf(asked + strlen(asked), sizeof asked - strlen(asked), "%sRING_IB_ADDR_FAMILY=%s", asked[0] ? ", " : "",
                 family == 4 ? "AF_INET" : "AF_INET6");
    if (prefix >= 0)
        snprintf(asked + strlen(asked), sizeof asked - strlen(asked), "%sRING_IB_ADDR_RANGE=%s", asked[0] ? ", " : "",
                 w->range ? w->range : "?");
    for (int i = 0; i < n; i++) {
        const ring__gid_ent_t *e = &t[i];
        /* A queue pair's source GID index is 8 bits (ibv_global_route.sgid_index): an entry
         * past 255 would be cut to another one at RTR. */
        if (is_zero(e->gid) || e->index > 255) continue;
        int score;
        if (is_ib) {
            if (e->type != RING__GID_IB) continue;
            score = 1;
        } else {
            if (e->type == RING__GID_IB) continue;
            if (version && e->type != (uint32_t)version) continue;
            if ((family == 4 && !is_v4_mapped(e->gid)) || (family == 6 && is_v4_mapped(e->gid))) continue;
            if (prefix >= 0 && !same_prefix(e->gid, w->net, prefix)) continue;
            /* v2 over v1 first (a v1 rank and a v2 rank never meet: their queue pairs reach RTS
             * and every packet is dropped, so every rank must choose alike, whatever its
             * addresses), then the bootstrap address, then IPv4 over IPv6, a routable IPv6
             * address over the link-local one every port has (RoCE v2 between subnets cannot
             * route from fe80::). Until 2026-12-06 the bootstrap address outranked v2. */
            score = (e->type == RING__GID_ROCE_V2 ? 16 : 0) + (is_v4_mapped(e->gid) ? 2 : is_link_local(e->gid) ? 0 : 1) +
                    (want_v4 && is_v4_mapped(e->gid) && !memcmp(e->gid + 12, want_v4, 4) ? 8 : 0);
        }
        if (score > best_score || (score == best_score && e->index < t[best].index)) best = i, best_score = score;
    }
    if (best < 0) {
        snprintf(why, len, "no usable %s GID in the port's table (%d entries)%s%s", is_ib ? "InfiniBand" : "RoCE", n,
                 asked[0] ? " of the kind asked for: " : "", asked);
        return -1;
    }
    const ring__gid_ent_t *e = &t[best];
    if (is_ib) {
        snprintf(why, len, "GID index %u (InfiniBand: the LID routes)", e->index);
    } else if (is_v4_mapped(e->gid)) {
        snprintf(why, len, "GID index %u: RoCE v%d, IPv4 %u.%u.%u.%u%s", e->index, e->type == RING__GID_ROCE_V2 ? 2 : 1,
                 e->gid[12], e->gid[13], e->gid[14], e->gid[15],
                 best_score % 16 >= 8 ? " (the bootstrap interface's address)"
                 : asked[0]           ? ""
                                      : " (no GID carries the bootstrap interface's address)");
    } else {
        /* With a kind asked for, the entries it left out are not this port's whole table. */
        snprintf(why, len, "GID index %u: RoCE v%d, IPv6%s%s", e->index, e->type == RING__GID_ROCE_V2 ? 2 : 1,
                 is_link_local(e->gid) ? " link-local" : "", asked[0] ? "" : " (no IPv4 GID on this port)");
    }
    if (asked[0]) snprintf(why + strlen(why), len - strlen(why), " (%s)", asked);
    return (int)e->index;
}

static const char *type_str(uint32_t type)
{
    switch (type) {
    case RING__GID_IB: return "InfiniBand";
    case RING__GID_ROCE_V1: return "RoCE v1";
    case RING__GID_ROCE_V2: return "RoCE v2";
    }
    return "type unknown";
}

void ring__rdma_gid_str(const ring__gid_ent_t *e, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";
    if (is_v4_mapped(e->gid))
        inet_ntop(AF_INET, e->gid + 12, a, sizeof a);
    else
        inet_ntop(AF_INET6, e->gid, a, sizeof a);
    snprintf(buf, len, "GID index %u (%s, %s %s)", e->index, type_str(e->type), is_v4_mapped(e->gid) ? "IPv4" : "IPv6", a);
}

int ring__rdma_gid_check(const ring__gid_ent_t *here, const ring__gid_ent_t *there, int peer, char *why, size_t len)
{
    const char *what = NULL;
    int known = here->type != RING__GID_UNKNOWN && there->type != RING__GID_UNKNOWN;
    if (known && here->type != there->type)
        what = "RoCE versions differ, and v1 and v2 packets never meet";
    else if (known && here->type == RING__GID_ROCE_V2 && is_v4_mapped(here->gid) != is_v4_mapped(there->gid))
        what = "RoCE v2 carries GIDs as IP addresses, and IPv4 and IPv6 have no route between them";
    if (!what) return 0;
    char h[96], t[96];
    ring__rdma_gid_str(here, h, sizeof h);
    ring__rdma_gid_str(there, t, sizeof t);
    snprintf(why, len, "%s here, %s at rank %d: %s; choose one kind on every rank (RING_IB_ROCE_VERSION, RING_IB_ADDR_FAMILY)",
             h, t, peer, what);
    return -1;
}

int ring__rdma_slot_of_imm(uint64_t freed, uint32_t nslots, uint32_t imm, uint64_t *slot)
{
    /* Only the counter's low 31 bits travel: the difference wraps at 2^31, not 2^32. */
    uint32_t d = (imm - (uint32_t)freed) & RING__RDMA_IMM_MASK;
    if (d >= nslots) return -1;
    *slot = freed + d;
    return 0;
}

int ring__rdma_release(uint8_t *done, uint32_t nslots, uint64_t *freed, uint64_t limit, uint64_t slot)
{
    if (slot < *freed || slot >= limit || limit - *freed > nslots || done[slot % nslots]) return -1;
    done[slot % nslots] = 1;
    int n = 0;
    while (*freed < limit && done[*freed % nslots]) {
        done[*freed % nslots] = 0;
        (*freed)++;
        n++;
    }
    return n;
}
