/*
 * nn.c: parameter lists (flat copies, save/load), the Linear layer and the MLP built from it.
 *
 * Parameter file, in the writer's byte order (the tag lets a reader with the other order refuse
 * the file instead of loading garbage):
 *   "RTPARAMS"  u32 version (1)  u32 byte-order tag 0x01020304  u64 tensor count
 *   per tensor: u32 ndim  u32 0  u64 shape[0]  u64 shape[1]  then shape[0]*shape[1] float32
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define PARAM_MAGIC "RTPARAMS"
#define PARAM_VERSION 1u
#define PARAM_ORDER 0x01020304u

ring_result_t rt_params_append(rt_params *p, rt_tensor *t)
{
    if (!p || !t) return rt__fail(RING_ERR_INVALID_ARG, "rt_params_append: NULL argument");
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 8;
        rt_tensor **q = realloc(p->t, nc * sizeof *q);
        if (!q) return rt__fail(RING_ERR_NOMEM, "rt_params_append: out of memory");
        p->t = q;
        p->cap = nc;
    }
    p->t[p->n++] = t;
    return RING_OK;
}

void rt_params_release(rt_params *p)
{
    if (!p) return;
    free(p->t);
    memset(p, 0, sizeof *p);
}

size_t rt_params_numel(const rt_params *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) n += p->t[i]->size;
    return n;
}

void rt_params_zero_grad(const rt_params *p)
{
    for (size_t i = 0; i < p->n; i++) rt_tensor_zero_grad(p->t[i]);
}

void rt_params_get(const rt_params *p, float *flat)
{
    for (size_t i = 0; i < p->n; i++) {
        memcpy(flat, p->t[i]->data, p->t[i]->size * sizeof *flat);
        flat += p->t[i]->size;
    }
}

void rt_params_set(const rt_params *p, const float *flat)
{
    for (size_t i = 0; i < p->n; i++) {
        memcpy(p->t[i]->data, flat, p->t[i]->size * sizeof *flat);
        flat += p->t[i]->size;
    }
}

void rt_params_get_grad(const rt_params *p, float *flat)
{
    for (size_t i = 0; i < p->n; i++) {
        if (p->t[i]->grad)
            memcpy(flat, p->t[i]->grad, p->t[i]->size * sizeof *flat);
        else
            memset(flat, 0, p->t[i]->size * sizeof *flat);
        flat += p->t[i]->size;
    }
}

void rt_params_set_grad(const rt_params *p, const float *flat)
{
    for (size_t i = 0; i < p->n; i++) {
        if (p->t[i]->grad) memcpy(p->t[i]->grad, flat, p->t[i]->size * sizeof *flat);
        flat += p->t[i]->size;
    }
}

struct tensor_rec {
    uint32_t ndim, zero;
    uint64_t d0, d1;
};

ring_result_t rt_params_save(const rt_params *p, const char *path)
{
    if (!p || !path) return rt__fail(RING_ERR_INVALID_ARG, "rt_params_save: NULL argument");
    ring_result_t rc = RING_OK;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_params_save: path too long");
    /* Written beside the target and renamed over it, so that a crash never leaves a torn file
     * where a good one was. */
    FILE *f = fopen(tmp, "wb");
    if (!f) return rt__fail(RING_ERR_SYSTEM, "rt_params_save: cannot create %s: %s", tmp, strerror(errno));
    uint32_t head[2] = {PARAM_VERSION, PARAM_ORDER};
    uint64_t count = p->n;
    int ok = fwrite(PARAM_MAGIC, 8, 1, f) == 1 && fwrite(head, sizeof head, 1, f) == 1 &&
             fwrite(&count, sizeof count, 1, f) == 1;
    for (size_t i = 0; ok && i < p->n; i++) {
        const rt_tensor *t = p->t[i];
        struct tensor_rec r = {(uint32_t)t->ndim, 0, t->shape[0], t->shape[1]};
        ok = fwrite(&r, sizeof r, 1, f) == 1 && fwrite(t->data, sizeof(float), t->size, f) == t->size;
    }
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        rc = rt__fail(RING_ERR_SYSTEM, "rt_params_save: writing %s: %s", tmp, strerror(err));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = rt__fail(RING_ERR_SYSTEM, "rt_params_save: rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    return RING_OK;
fail:
    remove(tmp);
    return rc;
}

ring_result_t rt_params_load(const rt_params *p, const char *path)
{
    if (!p || !path) return rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: NULL argument");
    ring_result_t rc = RING_OK;
    float *all = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rt__fail(RING_ERR_SYSTEM, "rt_params_load: cannot open %s: %s", path, strerror(errno));
    char magic[8];
    uint32_t head[2];
    uint64_t count;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, PARAM_MAGIC, 8) != 0 || fread(head, sizeof head, 1, f) != 1 ||
        fread(&count, sizeof count, 1, f) != 1) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s is not a parameter file", path);
        goto fail;
    }
    if (head[1] != PARAM_ORDER) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s was written with the other byte order", path);
        goto fail;
    }
    if (head[0] != PARAM_VERSION) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s has format version %u, this build reads %u", path,
                      (unsigned)head[0], PARAM_VERSION);
        goto fail;
    }
    if (count != p->n) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s holds %llu tensors, the model has %zu", path,
                      (unsigned long long)count, p->n);
        goto fail;
    }
    /* Everything is read and checked before the model is touched: a bad file changes nothing. */
    all = malloc((rt_params_numel(p) + 1) * sizeof *all);
    if (!all) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_params_load: out of memory");
        goto fail;
    }
    float *dst = all;
    for (size_t i = 0; i < p->n; i++) {
        const rt_tensor *t = p->t[i];
        struct tensor_rec r;
        if (fread(&r, sizeof r, 1, f) != 1) {
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s is truncated at tensor %zu", path, i);
            goto fail;
        }
        if (r.ndim != (uint32_t)t->ndim || r.d0 != t->shape[0] || r.d1 != t->shape[1]) {
            rc = rt__fail(RING_ERR_INVALID_ARG,
                          "rt_params_load: tensor %zu of %s is %u-D %llu x %llu, the model's is %d-D %zu x %zu", i,
                          path, (unsigned)r.ndim, (unsigned long long)r.d0, (unsigned long long)r.d1, t->ndim,
                          t->shape[0], t->shape[1]);
            goto fail;
        }
        if (fread(dst, sizeof(float), t->size, f) != t->size) {
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s is truncated at tensor %zu", path, i);
            goto fail;
        }
        dst += t->size;
    }
    if (fgetc(f) != EOF) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_params_load: %s has bytes after the last tensor", path);
        goto fail;
    }
    rt_params_set(p, all);
fail:
    free(all);
    fclose(f);
    return rc;
}

ring_result_t rt_linear_init(rt_linear *l, size_t in, size_t out, rt_rng *rng)
{
    if (!l || !rng || in == 0 || out == 0)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_linear_init: bad arguments (%zu inputs, %zu outputs)", in, out);
    memset(l, 0, sizeof *l);
    l->in = in;
    l->out = out;
    l->w = rt_tensor_new(2, in, out, 1);
    l->b = rt_tensor_new(1, out, 1, 1);
    if (!l->w || !l->b) {
        rt_linear_destroy(l);
        return RING_ERR_NOMEM;
    }
    double bound = 1.0 / sqrt((double)in);
    for (size_t i = 0; i < l->w->size; i++) l->w->data[i] = (float)((2.0 * rt_rng_uniform(rng) - 1.0) * bound);
    for (size_t i = 0; i < l->b->size; i++) l->b->data[i] = (float)((2.0 * rt_rng_uniform(rng) - 1.0) * bound);
    return RING_OK;
}

void rt_linear_destroy(rt_linear *l)
{
    if (!l) return;
    rt_tensor_free(l->w);
    rt_tensor_free(l->b);
    l->w = l->b = NULL;
}

rt_tensor *rt_linear_forward(rt_graph *g, const rt_linear *l, rt_tensor *x)
{
    return rt_add(g, rt_matmul(g, x, l->w), l->b);
}

ring_result_t rt_mlp_init(rt_mlp *m, const size_t *sizes, size_t n, rt_activation act, uint64_t seed)
{
    if (!m) return rt__fail(RING_ERR_INVALID_ARG, "rt_mlp_init: m is NULL");
    memset(m, 0, sizeof *m);
    if (!sizes || n < 2) return rt__fail(RING_ERR_INVALID_ARG, "rt_mlp_init: need at least 2 sizes (inputs, outputs)");
    if (act != RT_ACT_RELU && act != RT_ACT_TANH) return rt__fail(RING_ERR_INVALID_ARG, "rt_mlp_init: bad activation");
    ring_result_t rc;
    rt_rng rng;
    rt_rng_seed(&rng, seed);
    m->act = act;
    m->layers = calloc(n - 1, sizeof *m->layers);
    if (!m->layers) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_mlp_init: out of memory");
        goto fail;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        RT_CHECK(rt_linear_init(&m->layers[i], sizes[i], sizes[i + 1], &rng));
        m->nlayers++;
        RT_CHECK(rt_params_append(&m->params, m->layers[i].w));
        RT_CHECK(rt_params_append(&m->params, m->layers[i].b));
    }
    return RING_OK;
fail:
    rt_mlp_destroy(m);
    return rc;
}

void rt_mlp_destroy(rt_mlp *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->nlayers; i++) rt_linear_destroy(&m->layers[i]);
    free(m->layers);
    rt_params_release(&m->params);
    memset(m, 0, sizeof *m);
}

rt_tensor *rt_mlp_forward(rt_graph *g, const rt_mlp *m, rt_tensor *x)
{
    rt_tensor *h = x;
    for (size_t i = 0; i < m->nlayers; i++) {
        h = rt_linear_forward(g, &m->layers[i], h);
        if (i + 1 < m->nlayers) h = m->act == RT_ACT_RELU ? rt_relu(g, h) : rt_tanh(g, h);
    }
    return h;
}
