/*
 * problem.h: one training problem built the same way by the multi-rank worker (ddp_worker, under
 * ringrun) and by the single-process reference inside test_ddp, so that the two differ only in
 * how the global batch is split: data, model, optimiser, loader and the loss of a micro-step.
 */
#ifndef TRAIN_TEST_PROBLEM_H
#define TRAIN_TEST_PROBLEM_H

#include "rt.h"

enum problem_model { PROBLEM_LINEAR, PROBLEM_MLP };

struct problem_cfg {
    enum problem_model model;
    size_t global_batch; /* samples per micro-step over all ranks */
    int accum;           /* micro-steps per update */
    int steps;           /* updates */
    uint64_t seed;
};

struct problem {
    struct problem_cfg cfg;
    rt_dataset data;
    rt_mlp model;
    rt_sgd opt;
    rt_loader loader;
    rt_graph *g;
    size_t updates_per_epoch;
    uint64_t epoch; /* the loader's current epoch */
};

/*
 * The problem as rank `rank` of `nranks` sees it: batch global_batch/nranks per micro-step.
 * The model is initialised from init_seed (the worker passes a rank-dependent one, so that only
 * DDP's broadcast can make the replicas equal). On failure rt_last_error() says why.
 */
ring_result_t problem_init(struct problem *p, const struct problem_cfg *cfg, int rank, int nranks, uint64_t init_seed);
/* The loss of micro-step j of update t, on p->g (reset first), scaled by 1/accum. */
rt_tensor *problem_loss(struct problem *p, int t, int j);
void problem_destroy(struct problem *p);

/* The model seed every test uses for rank 0 (and so for the reference). */
#define PROBLEM_INIT_SEED 1234u

#endif /* TRAIN_TEST_PROBLEM_H */
