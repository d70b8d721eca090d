/*
 * optim.c: SGD with momentum and weight decay, the update of torch.optim.SGD (dampening 0, no
 * Nesterov). The update is a fixed sequence of float operations, so ranks that start from the
 * same weights and apply the same all-reduced gradient stay bitwise identical.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

ring_result_t rt_sgd_init(rt_sgd *o, const rt_params *p, float lr, float momentum, float weight_decay)
{
    if (!o || !p) return rt__fail(RING_ERR_INVALID_ARG, "rt_sgd_init: NULL argument");
    memset(o, 0, sizeof *o);
    if (!(lr > 0.0f) || !(momentum >= 0.0f && momentum < 1.0f) || !(weight_decay >= 0.0f))
        return rt__fail(RING_ERR_INVALID_ARG, "rt_sgd_init: need lr > 0, 0 <= momentum < 1, weight_decay >= 0 (got %g, %g, %g)",
                        (double)lr, (double)momentum, (double)weight_decay);
    ring_result_t rc;
    for (size_t i = 0; i < p->n; i++) RT_CHECK(rt_params_append(&o->params, p->t[i]));
    o->lr = lr;
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    if (momentum > 0.0f) {
        o->velocity = calloc(p->n ? p->n : 1, sizeof *o->velocity);
        if (!o->velocity) {
            rc = rt__fail(RING_ERR_NOMEM, "rt_sgd_init: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < p->n; i++) {
            o->velocity[i] = calloc(p->t[i]->size, sizeof(float));
            if (!o->velocity[i]) {
                rc = rt__fail(RING_ERR_NOMEM, "rt_sgd_init: out of memory for the momentum buffers");
                goto fail;
            }
        }
    }
    return RING_OK;
fail:
    rt_sgd_destroy(o);
    return rc;
}

void rt_sgd_step(rt_sgd *o)
{
    for (size_t i = 0; i < o->params.n; i++) {
        rt_tensor *t = o->params.t[i];
        if (!t->grad) continue;
        float *v = o->velocity ? o->velocity[i] : NULL;
        for (size_t j = 0; j < t->size; j++) {
            float d = t->grad[j];
            if (o->weight_decay != 0.0f) d += o->weight_decay * t->data[j];
            if (v) {
                v[j] = o->momentum * v[j] + d;
                d = v[j];
            }
            t->data[j] -= o->lr * d;
        }
    }
}

void rt_sgd_destroy(rt_sgd *o)
{
    if (!o) return;
    if (o->velocity)
        for (size_t i = 0; i < o->params.n; i++) free(o->velocity[i]);
    free(o->velocity);
    rt_params_release(&o->params);
    memset(o, 0, sizeof *o);
}
