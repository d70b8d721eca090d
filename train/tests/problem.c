/*
 * problem.c: the shared training problem of the DDP tests (see problem.h). Two models: the house
 * price regression (linear, MSE) and a 2-16-16-3 tanh MLP on spirals (softmax cross-entropy).
 */
#include <string.h>

#include "problem.h"

ring_result_t problem_init(struct problem *p, const struct problem_cfg *cfg, int rank, int nranks, uint64_t init_seed)
{
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    ring_result_t rc;
    if (cfg->global_batch % (size_t)nranks != 0 || cfg->accum < 1) return RING_ERR_INVALID_ARG;
    if ((rc = rt_graph_create(&p->g)) != RING_OK) goto fail;
    float lr, momentum = 0.9f, wd;
    if (cfg->model == PROBLEM_LINEAR) {
        size_t sizes[] = {2, 1};
        if ((rc = rt_data_house(&p->data, 1000, cfg->seed)) != RING_OK) goto fail;
        if ((rc = rt_mlp_init(&p->model, sizes, 2, RT_ACT_TANH, init_seed)) != RING_OK) goto fail;
        lr = 0.01f;
        wd = 1e-3f;
    } else {
        size_t sizes[] = {2, 16, 16, 3};
        if ((rc = rt_data_spirals(&p->data, 200, 3, cfg->seed)) != RING_OK) goto fail;
        if ((rc = rt_mlp_init(&p->model, sizes, 4, RT_ACT_TANH, init_seed)) != RING_OK) goto fail;
        lr = 0.1f;
        wd = 1e-4f;
    }
    if ((rc = rt_sgd_init(&p->opt, &p->model.params, lr, momentum, wd)) != RING_OK) goto fail;
    rc = rt_loader_init(&p->loader, &p->data, cfg->global_batch / (size_t)nranks, rank, nranks, cfg->seed + 7);
    if (rc != RING_OK) goto fail;
    /* Updates never straddle epochs: the tail that cannot fill one is dropped, as in ddp_train. */
    p->updates_per_epoch = p->loader.steps / (size_t)cfg->accum;
    if (p->updates_per_epoch == 0) {
        rc = RING_ERR_INVALID_ARG;
        goto fail;
    }
    return RING_OK;
fail:
    problem_destroy(p);
    return rc;
}

rt_tensor *problem_loss(struct problem *p, int t, int j)
{
    uint64_t epoch = (uint64_t)t / p->updates_per_epoch;
    if (epoch != p->epoch) {
        rt_loader_set_epoch(&p->loader, epoch);
        p->epoch = epoch;
    }
    size_t step = ((size_t)t % p->updates_per_epoch) * (size_t)p->cfg.accum + (size_t)j;
    rt_graph_reset(p->g);
    rt_batch b;
    if (rt_loader_batch(&p->loader, step, p->g, &b) != RING_OK) return NULL;
    rt_tensor *out = rt_mlp_forward(p->g, &p->model, b.x);
    rt_tensor *loss = b.labels ? rt_softmax_xent(p->g, out, b.labels, NULL) : rt_mse_loss(p->g, out, b.y);
    return p->cfg.accum > 1 ? rt_scale(p->g, loss, 1.0f / (float)p->cfg.accum) : loss;
}

void problem_destroy(struct problem *p)
{
    rt_loader_destroy(&p->loader);
    rt_sgd_destroy(&p->opt);
    rt_mlp_destroy(&p->model);
    rt_dataset_free(&p->data);
    rt_graph_destroy(p->g);
    p->g = NULL;
}
