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

/* One GID table entry, as ibv_query_gid_table reports it. */
enum { RING__GID_IB = 0, RING__GID_ROCE_V1 = 1, RING__GID_ROCE_V2 = 2 };
typedef struct ring__gid_ent {
    uint8_t gid[16];
    uint32_t index;
    uint32_t type; /* RING__GID_* */
} ring__gid_ent_t;

/*
 * Which GID a rank uses on a port. InfiniBand: the first IB GID (index 0 in practice; the LID
 * routes). RoCE: RoCE v2 before v1 (v2 is routable over IP), IPv4-mapped (::ffff:a.b.c.d)
 * before others, and among those the one whose address is `want_v4` (the address the rank
 * talks TCP from, network order; NULL: none) so that verbs traffic takes the same interface.
 * Returns the chosen entry's index field, or -1 when the table has nothing usable; `why` says
 * what was chosen and why (for the INFO log).
 */
int ring__rdma_pick_gid(const ring__gid_ent_t *t, int n, int is_ib, const uint8_t *want_v4, char *why, size_t len);

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
