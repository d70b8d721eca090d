/*
 * Binomial-tree broadcast: the latency-optimal broadcast for buffers of at most one chunk.
 *
 * The tree lives on recursive doubling's connections (rd.c), which init opens for every rank,
 * so no root needs connections of its own. N ranks, p = the largest power of two <= N,
 * rem = N - p; ranks r < 2·rem pair up (r even, r+1 odd) and the odd one stands in the
 * hypercube for both, with virtual rank v = r/2; other ranks have v = r - rem.
 *  1. A root outside the hypercube (even r < 2·rem) sends to r+1, which roots the hypercube.
 *  2. Hypercube: with rel = v XOR v(hypercube root) and low = the lowest set bit of rel, a
 *     rank receives from v XOR low (the root receives nothing), then sends to v XOR m for
 *     every power of two m below low (for the root: below p), largest m first: that child
 *     heads the largest subtree, so it should start earliest.
 *  3. Each odd r < 2·rem sends to its even partner, unless that partner is the root.
 * Every data message is preceded by the 40-byte collective descriptor, checked on receipt.
 * A broadcast whose ranks disagree on the root could wait for a parent that never sends, so
 * every rank also sends its descriptor to its ring neighbour on the right and checks the one
 * from its left as soon as it arrives (not after the run): some neighbour pair differs when
 * any two ranks differ, and that rank's failure reaches all the others (watch.c).
 *
 * Bytes on the wire: each rank receives S once (+ 2 descriptors); a rank sends S to each of
 * its children (the root log2(p) times, +1 with a fold partner). Time ~ (ceil(log2 N) + [root
 * outside the hypercube]) · (α + S/B), against the ring's (N - 1)·(α + S/B) for one chunk;
 * the ring's pipeline wins once S spans many chunks, hence RING_TREE_MAX_BYTES.
 */
#include <string.h>

#include "engine.h"
#include "p2p.h"

#define MAX_CHILDREN 33

static int virt_rank(int r, int rem) { return r < 2 * rem ? r / 2 : r - rem; }

/* Parent (-1 for the root) and children, in sending order, of rank r in the tree of root. */
static int tree_of(int r, int n, int root, int *parent, int *children)
{
    const int p = ring__pow2_floor(n), rem = n - p;
    int nc = 0;
    *parent = -1;
    /* The hypercube's root: the root itself, or its odd partner if the root is folded out. */
    int hroot = root < 2 * rem && root % 2 == 0 ? root + 1 : root;
    if (r < 2 * rem && r % 2 == 0) {
        if (r == root) children[nc++] = r + 1;
        else *parent = r + 1;
        return nc;
    }
    if (r == hroot && r != root) *parent = root;
    int v = virt_rank(r, rem), rel = v ^ virt_rank(hroot, rem);
    int low = rel ? rel & -rel : p; /* children below this bit */
    if (rel) *parent = ring__rd_real_rank(v ^ low, rem);
    for (int m = low / 2; m >= 1; m /= 2) children[nc++] = ring__rd_real_rank(v ^ m, rem);
    if (r < 2 * rem && r - 1 != root) children[nc++] = r - 1;
    return nc;
}

typedef struct chk {
    const unsigned char *mine;
    unsigned char theirs[RING__DESC_LEN];
    int peer;
    const char *relation;
} chk;

static ring_result_t check_desc(ring_comm_t *comm, void *arg)
{
    chk *c = arg;
    char who[160];
    if (!memcmp(c->theirs, c->mine, RING__DESC_LEN)) return RING_OK;
    ring__peer_desc(comm, c->peer, who, sizeof who);
    return ring__desc_check(comm, c->mine, c->theirs, c->relation, who);
}

ring_result_t ring__broadcast_tree(ring_comm_t *comm, const ring__opdesc_t *op)
{
    ring_result_t rc = RING_OK;
    const int n = comm->nranks, r = comm->rank;
    const size_t bytes = op->count * ring_dtype_size(op->dtype);
    unsigned char mydesc[RING__DESC_LEN];
    int parent, children[MAX_CHILDREN];
    int nc = tree_of(r, n, op->root, &parent, children);
    ring__p2p_op_t ops[4 + 2 * MAX_CHILDREN];
    chk left = {.mine = mydesc, .peer = comm->left, .relation = "left neighbour"};
    chk up = {.mine = mydesc, .peer = parent, .relation = "parent in the broadcast tree"};
    int k = 0;

    ring__desc_build(mydesc, op, RING__ALGO_TREE);
    ops[k++] = (ring__p2p_op_t){.peer = comm->right, .is_send = 1, .buf = mydesc, .len = RING__DESC_LEN};
    ops[k++] = (ring__p2p_op_t){.peer = comm->left, .buf = left.theirs, .len = RING__DESC_LEN, .on_done = check_desc,
                                .arg = &left};
    if (parent >= 0) {
        ops[k++] = (ring__p2p_op_t){.peer = parent, .buf = up.theirs, .len = RING__DESC_LEN, .on_done = check_desc, .arg = &up};
        if (bytes) ops[k++] = (ring__p2p_op_t){.peer = parent, .buf = op->recvbuf, .len = bytes};
        RING_CHECK(ring__p2p_run_locked(comm, ops, k));
        k = 0;
    }
    for (int i = 0; i < nc; i++) {
        ops[k++] = (ring__p2p_op_t){.peer = children[i], .is_send = 1, .buf = mydesc, .len = RING__DESC_LEN};
        if (bytes) ops[k++] = (ring__p2p_op_t){.peer = children[i], .is_send = 1, .buf = op->recvbuf, .len = bytes};
    }
    RING_CHECK(ring__p2p_run_locked(comm, ops, k));
fail:
    if (rc == RING_ERR_MISMATCH) {
        /* A first message of another length (rd.c packs small data with its descriptor). */
        char who[160];
        ring__peer_desc(comm, left.peer, who, sizeof who);
        if (!ring__desc_salvage(comm, &rc, mydesc, left.theirs, left.relation, who) && parent >= 0) {
            ring__peer_desc(comm, up.peer, who, sizeof who);
            ring__desc_salvage(comm, &rc, mydesc, up.theirs, up.relation, who);
        }
    }
    return ring__algo_failed(comm, rc, op, "binomial tree");
}
