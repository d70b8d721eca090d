/*
 * The parts of the RDMA verbs transport that need no device: GID choice from a GID table and
 * the slot-window arithmetic of the credit protocol. Pure functions, built in every
 * configuration (with or without libibverbs), so the unit tests run everywhere.
 */
#ifndef RING_RDMA_H
#define RING_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

extern const ring__transport_t ring__rdma_transport;

/* RING_TRANSPORT=rdma and some pair could not set up verbs: the error (with the first reason),
 * raised once the handshakes in progress are over; RING_OK otherwise. */
ring_result_t ring__rdma_forced_result(void *rdma_ctx);

/*
 * GPUDirect RDMA (src/cuda/gdr.c): register device memory [buf, buf + len) with the verbs
 * device of rdma_ctx, with ibv_reg_dmabuf_mr when dmabuf_fd >= 0 (a dma-buf of exactly that
 * range, from the GPU driver), else with ibv_reg_mr (which takes device memory where the GPU
 * driver's peer-memory module is loaded, and host memory that stands in for a GPU in tests).
 * *mh goes to isend/irecv, which then never touch the bytes with the CPU, and to dereg_mem;
 * the context drops it at the latest. On failure the reason is in why (nothing on the comm).
 * Only in builds with the verbs transport (RING_HAVE_RDMA).
 */
ring_result_t ring__rdma_reg_device(void *rdma_ctx, void *buf, size_t len, int dmabuf_fd, void **mh, char *why,
                                    size_t whylen);
const char *ring__rdma_dev_name(void *rdma_ctx);
/* The largest message a verbs connection reads in place (its slot size): a send or receive
 * with a device registration must not be longer. */
size_t ring__rdma_slot_bytes(void *conn);

/* One GID table entry, as ibv_query_gid_table reports it. UNKNOWN: the device did not say. */
enum { RING__GID_IB = 0, RING__GID_ROCE_V1 = 1, RING__GID_ROCE_V2 = 2, RING__GID_UNKNOWN = 3 };
typedef struct ring__gid_ent {
    uint8_t gid[16];
    uint32_t index;
    uint32_t type; /* RING__GID_* */
} ring__gid_ent_t;

/* The kind of RoCE GID asked for (RING_IB_ROCE_VERSION, RING_IB_ADDR_FAMILY, RING_IB_ADDR_RANGE). */
typedef struct ring__gid_want {
    int version;     /* 1, 2; 0: any */
    int family;      /* 4: IPv4-mapped, 6: the others; 0: any */
    int prefix;      /* leading bits a GID must share with net; -1: any */
    uint8_t net[16]; /* the range as a GID (ring__parse_gid_range) */
    const char *range; /* as the user wrote it, for messages */
} ring__gid_want_t;

/*
 * Which GID a rank uses on a port. InfiniBand: the first IB GID (index 0 in practice; the LID
 * routes). RoCE: only entries of the kind `w` asks for (NULL: any); among them RoCE v2 before
 * v1 (v2 is routable over IP), IPv4-mapped (::ffff:a.b.c.d) before others, and among those the
 * one whose address is `want_v4` (the address the rank talks TCP from, network order; NULL:
 * none) so that verbs traffic takes the same interface. Returns the chosen entry's index
 * field, or -1 when the table has nothing usable; `why` says what was chosen and why (for the
 * INFO log), and names the kind asked for.
 */
int ring__rdma_pick_gid(const ring__gid_ent_t *t, int n, int is_ib, const ring__gid_want_t *w, const uint8_t *want_v4,
                        char *why, size_t len);

/* "GID index 1 (RoCE v2, IPv4 198.18.0.1)": an entry as the logs and errors name it. */
void ring__rdma_gid_str(const ring__gid_ent_t *e, char *buf, size_t len);

/*
 * RoCE: whether this rank's GID (here) and a peer's (there) can carry a connection between
 * them. RoCE v1 and v2 packets never reach each other's queue pairs (a real HCA takes both to
 * RTS, then every send times out), and RoCE v2 carries the GIDs as the packets' IP addresses,
 * so an IPv4-mapped GID and an IPv6 one have no route between them (the kernel refuses RTR
 * with EINVAL). Ranks get there when RING_IB_GID_INDEX means different entries on different
 * hosts, or a v1-only NIC faces a v2 one. Returns 0, or -1 with why naming both entries (this
 * side's as "here", the peer's "at rank <peer>"), read by both ranks. RING__GID_UNKNOWN on
 * either side passes the version check.
 */
int ring__rdma_gid_check(const ring__gid_ent_t *here, const ring__gid_ent_t *there, int peer, char *why, size_t len);

/* A verbs device implemented by the kernel on the host's CPUs (soft-RoCE "rxe", soft-iWARP
 * "siw"): its work competes with ranks that poll without yielding (RING_SPIN_YIELD). */
int ring__rdma_soft_device(const char *name);

/*
 * Slot window of one direction. The receiver owns nslots slots; the sender may have at most
 * nslots published and not yet freed: it may publish slot `next` while next - freed < nslots,
 * where freed is the receiver's count of freed slots that reached the sender (a credit).
 */
static inline int ring__rdma_can_post(uint64_t next, uint64_t freed, uint32_t nslots)
{
    return next - freed < nslots;
}

/* Immediates carry the low 31 bits of a slot counter (data) or of the freed count (credit). */
#define RING__RDMA_IMM_MASK 0x7fffffffu

/*
 * Receiver: the immediate value of an RDMA WRITE names the slot counter's low 31 bits
 * (RING__RDMA_IMM_MASK: data writes and credits carry the same width). Writes
 * on several queue pairs may arrive out of order, but all of them land in the window
 * [freed, freed + nslots). 0 and *slot = the full counter if imm is in it, -1 if not (a
 * corrupt or foreign write).
 */
int ring__rdma_slot_of_imm(uint64_t freed, uint32_t nslots, uint32_t imm, uint64_t *slot);

/*
 * Receiver: slots are released by the engine in any order, but credits go back in order.
 * Marks `slot` done in done[nslots] and advances *freed over every done slot below `limit`
 * (the next slot not yet handed out). Returns how many slots were freed now (0 if `slot` waits
 * for earlier ones), or -1 if `slot` is outside [*freed, limit) or already done.
 */
int ring__rdma_release(uint8_t *done, uint32_t nslots, uint64_t *freed, uint64_t limit, uint64_t slot);

#endif
