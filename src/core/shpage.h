/*
 * A shared page for the ranks of one host (shpage.c): one file in RING_SHM_DIR that every
 * rank maps at init and whose name is gone before init returns, so that nothing is left
 * behind however the job ends. The collectives that work through shared memory instead of
 * the ring's connections keep their per-rank records and data areas in one (the shared-memory
 * all-reduce, src/collectives/sm.c; direct CUDA IPC, src/cuda/direct.c).
 */
#ifndef RING_SHPAGE_H
#define RING_SHPAGE_H

#include <stddef.h>

#include "internal.h"

typedef struct ring__shpage {
    void *map;    /* the whole mapping: a header page, then the body */
    size_t bytes; /* of the mapping */
    void *body;   /* page-aligned, body_bytes, zero-filled */
} ring__shpage_t;

/*
 * Collective over the communicator (every rank calls it, at init): rank 0 creates
 * <RING_SHM_DIR>/ringcomm-<uid>-<rank 0's pid>-<hash>-<tag> (O_EXCL, 0600, all of it
 * reserved with posix_fallocate), the others open it once it is there, check owner, mode and
 * header, and map it; rank 0 removes the name when every rank has mapped it. Every wait is
 * bounded by RING_TIMEOUT_MS, and rank 0 stops waiting for a rank whose bootstrap connection
 * closed. `what` starts the error messages ("shared-memory all-reduce"). On failure *pg is
 * left empty. optional: where rank 0 cannot reserve the body (a small tmpfs), every rank
 * returns RING_OK with *pg empty (and logs why) instead of failing init.
 */
ring_result_t ring__shpage_open(ring_comm_t *comm, const char *tag, const char *what, size_t body_bytes, int optional,
                                ring__shpage_t *pg);
void ring__shpage_close(ring__shpage_t *pg);

/*
 * What a call is, as the ranks meeting in a page tell each other, one record per rank and
 * call in a ring of slots. seq = q + 1 once the record (with the owner's fields after this
 * header) describes call q: written last, with release order, and read first, with acquire.
 * A slot is rewritten only when every rank is done with the call it held.
 */
typedef struct ring__callrec {
    _Atomic uint64_t seq;
    uint64_t count;
    uint32_t coll, dtype, op;
    int32_t root;
} ring__callrec_t;

/* The call's fields (not seq), then, after the owner's own fields, publish. */
void ring__callrec_set(ring__callrec_t *r, const ring__opdesc_t *op);
void ring__callrec_publish(ring__callrec_t *r, uint64_t q);
/* 1: r describes call q (its fields may be read now), 0: not yet, -1: a later call. */
int ring__callrec_state(const ring__callrec_t *r, uint64_t q);
/* out = r's fields, seq included (after ring__callrec_state said 1). */
void ring__callrec_copy(ring__callrec_t *out, const ring__callrec_t *r);
/* The same call: collective, count, dtype, op and root. */
int ring__callrec_same(const ring__callrec_t *a, const ring__callrec_t *b);

/*
 * Before this rank writes its record of call op->seq into slot op->seq mod hist: wait until
 * every rank is done with the call that slot held, op->seq - hist. Rank p's done counter (the
 * number of its calls that returned) is at done0 + p * stride bytes. Without the wait a rank
 * that ran ahead (a broadcast root, whose sends the transport buffers, needs no one) could
 * overwrite a record a slow rank had still to read. *room caches the count every rank is
 * known to have reached. Bounded by RING_TIMEOUT_MS, an abort, a failure or a departure; what
 * names the records in the error ("shared-memory all-reduce records").
 */
ring_result_t ring__callrec_room(ring_comm_t *comm, const ring__opdesc_t *op, const _Atomic uint64_t *done0,
                                 size_t stride, unsigned hist, uint64_t *room, const char *what);

#endif
