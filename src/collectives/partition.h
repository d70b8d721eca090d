/*
 * How a ring collective cuts a buffer into messages.
 *
 * The buffer is N segments (one per rank in the ring). Allreduce balances `count` over the
 * segments (the first count % N get one element more); reduce-scatter and all-gather use N
 * equal segments of the per-rank count. Each segment is walked in rounds of L chunks of E
 * elements (E = RING_CHUNK_BYTES / element size). A round runs every ring step over its L
 * chunks before the next round starts, so the message stream of each link is ordered
 *     round j, step k, chunk c   (c fastest).
 * A receive of (j, k, c) enables the send of (j, k+1, c), exactly L messages later in the
 * stream; keeping L below the number of scratch slots is what makes slot forwarding
 * deadlock-free (a rank never waits for a slot that only its own future progress frees).
 * The last round may be short: it uses L_j = ceil(remaining / P) chunks (at most L), split
 * evenly, so no chunk exceeds E elements and buffers of at most P elements per segment cost one
 * message per step. P is E, or E/L with `split`: over a network link one E-sized chunk per step
 * leaves the wire idle while the whole chunk is reduced before it is forwarded (N=8, 4 MiB,
 * 1 Gbit/s: 0.89-0.92 of the link against 0.90-0.94 split; docs/performance.md), while over
 * shared memory the "wire" is the CPU that reduces, and the extra messages only cost (N=2,
 * 1 MiB: about 20 % slower split).
 */
#ifndef RING_PARTITION_H
#define RING_PARTITION_H

#include <stddef.h>

typedef struct ring__layout {
    int nseg;
    size_t seg_base, seg_extra; /* segment s has seg_base + (s < seg_extra) elements */
    size_t chunk;               /* E */
    int lanes;                  /* L */
    size_t piece;               /* P: short rounds are cut into chunks of at least P (E or E/L) */
    size_t nrounds;             /* 0 when every segment is empty */
} ring__layout_t;

/* balanced: count is the whole buffer; otherwise count is the length of every segment.
 * split: cut short rounds into pieces of E/L (network rings) rather than E. */
void ring__layout_init(ring__layout_t *l, size_t count, int nseg, int balanced, size_t chunk, int lanes, int split);
size_t ring__layout_seg_off(const ring__layout_t *l, int s);
size_t ring__layout_seg_len(const ring__layout_t *l, int s);
/* Chunks per step in round j (L, or fewer in the last round). */
int ring__layout_round_lanes(const ring__layout_t *l, size_t j);
/* Element offset (within the whole buffer) and length of chunk c of segment s in round j. */
void ring__layout_chunk(const ring__layout_t *l, size_t j, int s, int c, size_t *off, size_t *len);
/* Messages per link for a schedule of `nsteps` steps per round. */
size_t ring__layout_nmsgs(const ring__layout_t *l, int nsteps);
/* Index of message (j, k, c) in the stream, and back. */
size_t ring__layout_msg_index(const ring__layout_t *l, int nsteps, size_t j, int k, int c);
void ring__layout_msg_coords(const ring__layout_t *l, int nsteps, size_t i, size_t *j, int *k, int *c);

/* (a mod n) for possibly negative a. */
static inline int ring__mod(int a, int n) { return ((a % n) + n) % n; }

#endif
