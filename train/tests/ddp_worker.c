/*
 * ddp_worker: one rank of the DDP tests, started by test_ddp through ringrun. Trains the shared
 * problem (problem.h) with rt_ddp and writes what the test checks:
 *   DIR/params.RANK  the flat parameters after DDP's start (update 0) and after every update,
 *                    (steps + 1) x numel float32 in host order;
 *   DIR/stats.RANK   "allreduces A buckets B syncs S comm C hidden H backward W" (seconds).
 * The model is initialised from a rank-dependent seed, so equal replicas prove the broadcast.
 *
 *   ringrun -n N ddp_worker linear|mlp|mismatch GLOBAL_BATCH ACCUM STEPS BUCKET_MB FIRST_BUCKET_MB DIR
 *
 * mismatch: rank 1 builds the linear model and the others the MLP; rt_ddp_create must refuse.
 */
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include "problem.h"

static int fail(int rank, const char *what, const char *msg)
{
    fprintf(stderr, "ddp_worker: rank %d: %s: %s\n", rank, what, msg);
    return 1;
}

static int append_params(FILE *f, const rt_params *p, float *flat)
{
    size_t n = rt_params_numel(p);
    rt_params_get(p, flat);
    return fwrite(flat, sizeof *flat, n, f) == n;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: ddp_worker linear|mlp|mismatch GLOBAL_BATCH ACCUM STEPS BUCKET_MB FIRST_BUCKET_MB DIR\n");
        return 2;
    }
    struct problem_cfg cfg = {
        .model = argv[1][0] == 'l' ? PROBLEM_LINEAR : PROBLEM_MLP,
        .global_batch = (size_t)atol(argv[2]),
        .accum = atoi(argv[3]),
        .steps = atoi(argv[4]),
        .seed = 42,
    };
    rt_ddp_options dopt = {.bucket_mb = atof(argv[5]), .first_bucket_mb = atof(argv[6])};
    const char *dir = argv[7];

    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        fprintf(stderr, "ddp_worker: init: %s\n", ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        return 1;
    }
    int rank = ring_comm_rank(comm), nranks = ring_comm_nranks(comm), status = 1;
    if (!strcmp(argv[1], "mismatch") && rank == 1) cfg.model = PROBLEM_LINEAR;
    struct problem p;
    rt_ddp *ddp = NULL;
    FILE *f = NULL;
    float *flat = NULL;
    char path[4096];

    if (problem_init(&p, &cfg, rank, nranks, PROBLEM_INIT_SEED + (uint64_t)rank) != RING_OK) {
        fail(rank, "problem", rt_last_error());
        goto out;
    }
    if (rt_ddp_create(&ddp, comm, &p.model.params, &dopt) != RING_OK) {
        fail(rank, "rt_ddp_create", rt_last_error());
        goto out;
    }
    flat = malloc(rt_params_numel(&p.model.params) * sizeof *flat);
    snprintf(path, sizeof path, "%s/params.%d", dir, rank);
    f = fopen(path, "wb");
    if (!flat || !f) {
        fail(rank, path, "cannot allocate or create");
        goto out;
    }
    if (!append_params(f, &p.model.params, flat)) goto write_fail;
    for (int t = 0; t < cfg.steps; t++) {
        for (int j = 0; j < cfg.accum; j++) {
            rt_tensor *loss = problem_loss(&p, t, j);
            rt_ddp_no_sync(ddp, j + 1 < cfg.accum);
            if (rt_ddp_backward(ddp, p.g, loss) != RING_OK) {
                fail(rank, "rt_ddp_backward", rt_last_error());
                goto out;
            }
        }
        rt_sgd_step(&p.opt);
        rt_params_zero_grad(&p.model.params);
        if (!append_params(f, &p.model.params, flat)) goto write_fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        goto write_fail;
    }
    f = NULL;
    rt_ddp_stats st;
    rt_ddp_get_stats(ddp, &st);
    snprintf(path, sizeof path, "%s/stats.%d", dir, rank);
    f = fopen(path, "w");
    if (!f || fprintf(f, "allreduces %llu buckets %zu syncs %llu comm %.9f hidden %.9f backward %.9f\n",
                      (unsigned long long)st.allreduces, rt_ddp_nbuckets(ddp), (unsigned long long)st.syncs, st.comm_s,
                      st.hidden_s, st.backward_s) < 0)
        goto write_fail;
    status = 0;
    goto out;
write_fail:
    fail(rank, "writing results", path);
out:
    if (f) fclose(f);
    free(flat);
    rt_ddp_destroy(ddp);
    problem_destroy(&p);
    if (status) ring_comm_abort(comm);
    ring_comm_destroy(comm);
    return status;
}
