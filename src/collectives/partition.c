/* Partition arithmetic; see partition.h for the layout it describes. */
#include "partition.h"

void ring__layout_init(ring__layout_t *l, size_t count, int nseg, int balanced, size_t chunk, int lanes, int split)
{
    l->nseg = nseg;
    l->seg_base = balanced ? count / (size_t)nseg : count;
    l->seg_extra = balanced ? count % (size_t)nseg : 0;
    l->chunk = chunk ? chunk : 1;
    l->lanes = lanes > 0 ? lanes : 1;
    l->piece = split ? l->chunk / (size_t)l->lanes : l->chunk;
    if (!l->piece) l->piece = 1;
    size_t maxlen = l->seg_base + (l->seg_extra ? 1 : 0);
    size_t per_round = l->chunk * (size_t)l->lanes;
    l->nrounds = maxlen / per_round + (maxlen % per_round != 0);
}

size_t ring__layout_seg_len(const ring__layout_t *l, int s) { return l->seg_base + ((size_t)s < l->seg_extra); }

size_t ring__layout_seg_off(const ring__layout_t *l, int s)
{
    size_t us = (size_t)s;
    return us * l->seg_base + (us < l->seg_extra ? us : l->seg_extra);
}

int ring__layout_round_lanes(const ring__layout_t *l, size_t j)
{
    size_t maxlen = l->seg_base + (l->seg_extra ? 1 : 0);
    size_t per_round = l->chunk * (size_t)l->lanes;
    size_t rem = maxlen - j * per_round;
    if (rem >= per_round) return l->lanes;
    size_t lanes = rem / l->piece + (rem % l->piece != 0);
    if (lanes > (size_t)l->lanes) lanes = (size_t)l->lanes;
    return lanes ? (int)lanes : 1;
}

void ring__layout_chunk(const ring__layout_t *l, size_t j, int s, int c, size_t *off, size_t *len)
{
    size_t per_round = l->chunk * (size_t)l->lanes;
    size_t seglen = ring__layout_seg_len(l, s);
    size_t start = j * per_round;
    size_t rem = seglen > start ? seglen - start : 0;
    if (rem > per_round) rem = per_round;
    size_t lanes = (size_t)ring__layout_round_lanes(l, j);
    size_t uc = (size_t)c;
    size_t base = rem / lanes, extra = rem % lanes;
    *len = base + (uc < extra);
    *off = ring__layout_seg_off(l, s) + start + uc * base + (uc < extra ? uc : extra);
}

size_t ring__layout_nmsgs(const ring__layout_t *l, int nsteps)
{
    if (l->nrounds == 0) return 0;
    size_t full = (l->nrounds - 1) * (size_t)l->lanes;
    return (full + (size_t)ring__layout_round_lanes(l, l->nrounds - 1)) * (size_t)nsteps;
}

size_t ring__layout_msg_index(const ring__layout_t *l, int nsteps, size_t j, int k, int c)
{
    return j * (size_t)nsteps * (size_t)l->lanes + (size_t)k * (size_t)ring__layout_round_lanes(l, j) + (size_t)c;
}

void ring__layout_msg_coords(const ring__layout_t *l, int nsteps, size_t i, size_t *j, int *k, int *c)
{
    size_t per_round = (size_t)nsteps * (size_t)l->lanes;
    size_t jj = i / per_round;
    if (jj >= l->nrounds) jj = l->nrounds - 1; /* only the last round can be short */
    size_t rest = i - jj * per_round;
    size_t lanes = (size_t)ring__layout_round_lanes(l, jj);
    *j = jj;
    *k = (int)(rest / lanes);
    *c = (int)(rest % lanes);
}
