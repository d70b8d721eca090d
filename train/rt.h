/*
 * rt.h: the training layer on top of ringcomm (reverse-mode autograd on float32 tensors, a
 * Linear layer and an MLP, SGD with momentum and weight decay, a sharded data loader,
 * data-parallel training with bucketed asynchronous all-reduce, and an asynchronous
 * parameter server). It uses only the public ringcomm.h API. docs/training.md explains the
 * design, the summation-order rules that make N ranks equal one process, and the measurements.
 *
 * Errors
 *   Calls that can fail return a ring_result_t (RING_OK = 0), the library's one error type:
 *   RING_ERR_INVALID_ARG for bad shapes, values or files, RING_ERR_NOMEM, RING_ERR_SYSTEM for
 *   I/O, and the communicator's own code when a collective fails. The detail is in
 *   rt_last_error(), a per-thread buffer. Ops return the new tensor, or NULL on failure with
 *   rt_last_error() set; an op given a NULL input returns NULL and keeps the message of the op
 *   that failed first, so a forward pass needs one check, on the loss.
 *
 * Memory
 *   Parameters are leaf tensors made with rt_tensor_new() and freed with rt_tensor_free().
 *   Everything an op creates lives in an rt_graph (an arena): rt_graph_reset() frees all of it
 *   at once and keeps the memory for the next step, so a training loop allocates only in its
 *   first step.
 *
 * Threads
 *   A graph, a model and everything that points at its parameters belong to one thread at a
 *   time. Different models are independent.
 */
#ifndef RT_H
#define RT_H

#include <stddef.h>
#include <stdint.h>

#include <ringcomm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last failure on this thread ("" if none). */
const char *rt_last_error(void);

/* ------------------------------------------------------------------------------------------ */
/* Random numbers: xoshiro256**, seeded through splitmix64, the same sequence everywhere.      */

typedef struct rt_rng {
    uint64_t s[4];
} rt_rng;

void rt_rng_seed(rt_rng *r, uint64_t seed);
uint64_t rt_rng_next(rt_rng *r);
double rt_rng_uniform(rt_rng *r); /* [0, 1), 53 random bits */
double rt_rng_normal(rt_rng *r);  /* mean 0, deviation 1 (Box-Muller) */
uint64_t rt_rng_below(rt_rng *r, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */

/* ------------------------------------------------------------------------------------------ */
/* Tensors and autograd.                                                                       */

typedef struct rt_graph rt_graph;
typedef struct rt_tensor rt_tensor;

/* Called once per rt_backward() when t's gradient is final: every node of that backward that
 * consumes t has propagated into t->grad. Only leaves (tensors made by rt_tensor_new) call it. */
typedef void (*rt_grad_hook)(rt_tensor *t, void *arg);
/* Propagates self->grad into the gradients of self->src[]. Internal to the ops. */
typedef void (*rt_backward_fn)(rt_tensor *self);

struct rt_tensor {
    float *data;     /* size floats, row-major */
    float *grad;     /* size floats when requires_grad, else NULL */
    size_t shape[2]; /* 1-D: {n, 1}; 2-D: {rows, cols} */
    size_t size;
    int ndim; /* 1 or 2 */
    int requires_grad;

    /* Autograd bookkeeping: set by the ops and rt_backward(); read-only for users. */
    rt_backward_fn backward; /* NULL for leaves */
    rt_tensor *src[2];
    void *aux;   /* op-specific: labels, softmax probabilities */
    float scalar; /* op-specific constant */
    rt_grad_hook hook;
    void *hook_arg;
    size_t pending; /* consumers still to propagate in the current backward */
    uint64_t mark;  /* visit stamp of the current backward */
    int leaf;       /* made by rt_tensor_new */
};

/* A leaf: zero data (and zero grad when requires_grad). ndim 1 ignores d1. NULL on failure. */
rt_tensor *rt_tensor_new(int ndim, size_t d0, size_t d1, int requires_grad);
void rt_tensor_free(rt_tensor *t);
void rt_tensor_zero_grad(rt_tensor *t);
void rt_tensor_set_hook(rt_tensor *t, rt_grad_hook fn, void *arg);

ring_result_t rt_graph_create(rt_graph **g);
/* Frees every tensor made on g since the last reset; keeps the memory. */
void rt_graph_reset(rt_graph *g);
void rt_graph_destroy(rt_graph *g);
/* A constant on g (no gradient), data uninitialised: for inputs and targets. */
rt_tensor *rt_graph_tensor(rt_graph *g, int ndim, size_t d0, size_t d1);
/* Raw memory on g, 64-byte aligned, freed by rt_graph_reset(). NULL on failure. */
void *rt_graph_alloc(rt_graph *g, size_t bytes);

/*
 * Ops. Broadcasting (add, mul): b has a's shape, or one element, or is a row ([n] or [1, n])
 * repeated over the rows of a 2-D a of shape [m, n]; the result has a's shape.
 */
rt_tensor *rt_matmul(rt_graph *g, rt_tensor *a, rt_tensor *b); /* [m,k] x [k,n] -> [m,n] */
rt_tensor *rt_add(rt_graph *g, rt_tensor *a, rt_tensor *b);
rt_tensor *rt_mul(rt_graph *g, rt_tensor *a, rt_tensor *b);
rt_tensor *rt_scale(rt_graph *g, rt_tensor *a, float s);
rt_tensor *rt_relu(rt_graph *g, rt_tensor *a);
rt_tensor *rt_tanh(rt_graph *g, rt_tensor *a);
rt_tensor *rt_sum(rt_graph *g, rt_tensor *a);  /* -> [1] */
rt_tensor *rt_mean(rt_graph *g, rt_tensor *a); /* -> [1] */
/* mean over all elements of (pred - target)^2; same number of elements -> [1] */
rt_tensor *rt_mse_loss(rt_graph *g, rt_tensor *pred, rt_tensor *target);
/* mean over the m rows of -log softmax(logits[i])[labels[i]]; logits [m, c], labels in [0, c).
 * labels are copied. If correct is not NULL it receives the number of rows whose largest
 * logit is at the label. -> [1] */
rt_tensor *rt_softmax_xent(rt_graph *g, rt_tensor *logits, const int32_t *labels, size_t *correct);

/*
 * Reverse mode from loss (one element, which gets d loss / d loss = 1): nodes are visited in
 * reverse topological order and every gradient is accumulated with +=, so leaf gradients add
 * up over backward calls until zeroed. A leaf's hook fires as soon as its gradient is final.
 */
ring_result_t rt_backward(rt_graph *g, rt_tensor *loss);

/* ------------------------------------------------------------------------------------------ */
/* Parameters, layers, models.                                                                */

typedef struct rt_params {
    rt_tensor **t;
    size_t n;   /* tensors */
    size_t cap;
} rt_params;

ring_result_t rt_params_append(rt_params *p, rt_tensor *t);
void rt_params_release(rt_params *p); /* frees the list, not the tensors */
size_t rt_params_numel(const rt_params *p);
void rt_params_zero_grad(const rt_params *p);
/* Flat copies in list order (rt_params_numel floats). */
void rt_params_get(const rt_params *p, float *flat);
void rt_params_set(const rt_params *p, const float *flat);
void rt_params_get_grad(const rt_params *p, float *flat);
void rt_params_set_grad(const rt_params *p, const float *flat);
/* A little-endian-tagged binary file (format in docs/training.md); load checks every shape. */
ring_result_t rt_params_save(const rt_params *p, const char *path);
ring_result_t rt_params_load(const rt_params *p, const char *path);

/* y = x w + b, w [in, out] (so no transpose is needed), b [out]. PyTorch's default init:
 * every value uniform in [-1/sqrt(in), 1/sqrt(in)). */
typedef struct rt_linear {
    rt_tensor *w, *b;
    size_t in, out;
} rt_linear;

ring_result_t rt_linear_init(rt_linear *l, size_t in, size_t out, rt_rng *rng);
void rt_linear_destroy(rt_linear *l);
rt_tensor *rt_linear_forward(rt_graph *g, const rt_linear *l, rt_tensor *x);

typedef enum { RT_ACT_RELU, RT_ACT_TANH } rt_activation;

/* sizes[0] inputs, sizes[n-1] outputs, n-1 Linear layers with the activation between them
 * (not after the last). n = 2 is a linear model. params lists w0, b0, w1, b1, ... */
typedef struct rt_mlp {
    rt_linear *layers;
    size_t nlayers;
    rt_activation act;
    rt_params params;
} rt_mlp;

ring_result_t rt_mlp_init(rt_mlp *m, const size_t *sizes, size_t n, rt_activation act, uint64_t seed);
void rt_mlp_destroy(rt_mlp *m);
rt_tensor *rt_mlp_forward(rt_graph *g, const rt_mlp *m, rt_tensor *x);

/* ------------------------------------------------------------------------------------------ */
/* SGD as torch.optim.SGD (dampening 0, no Nesterov):                                          */
/*   d = grad + weight_decay * w;  v = momentum * v + d;  w -= lr * v   (v starts at 0)        */

typedef struct rt_sgd {
    rt_params params; /* a copy of the list; the tensors are the model's */
    float lr, momentum, weight_decay;
    float **velocity; /* one buffer per tensor, NULL without momentum */
} rt_sgd;

ring_result_t rt_sgd_init(rt_sgd *o, const rt_params *p, float lr, float momentum, float weight_decay);
void rt_sgd_step(rt_sgd *o);
void rt_sgd_destroy(rt_sgd *o);

/* ------------------------------------------------------------------------------------------ */
/* Data sets and the sharded loader.                                                           */

typedef struct rt_dataset {
    size_t n;        /* samples */
    size_t nfeat;    /* features per sample */
    float *x;        /* [n, nfeat] */
    float *y;        /* regression: [n] targets; NULL for classification */
    int32_t *labels; /* classification: [n] in [0, nclasses); NULL for regression */
    int nclasses;    /* 0 for regression */
} rt_dataset;

/* price = 0.8 bedrooms + 0.5 bathrooms + 1.2 (+ normal noise of deviation 0.1), in $100k;
 * bedrooms uniform in 1..6, bathrooms in 1..4. */
#define RT_HOUSE_W1 0.8f
#define RT_HOUSE_W2 0.5f
#define RT_HOUSE_B 1.2f
ring_result_t rt_data_house(rt_dataset *d, size_t n, uint64_t seed);
/* nclasses interleaved spiral arms in the plane, n_per_class points each (CS231n's set). */
ring_result_t rt_data_spirals(rt_dataset *d, size_t n_per_class, int nclasses, uint64_t seed);
/* Numbers separated by commas, one sample per line, the target last; a first line where no
 * field is a number is a header (skipped, with a line on stderr); any other line with a field
 * that is not a number is an error. classification: the target must be an integer in [0, 1000)
 * and nclasses = largest + 1. */
ring_result_t rt_data_csv(rt_dataset *d, const char *path, int classification);
/* Shifts and scales every feature to mean 0, deviation 1 (constant features are only shifted);
 * with target also the regression target. mean/std of the target are returned if not NULL. */
void rt_data_standardize(rt_dataset *d, int target, float *target_mean, float *target_std);
void rt_dataset_free(rt_dataset *d);

/*
 * Like torch's DistributedSampler with drop_last: every epoch the indices 0..n-1 are shuffled
 * by a generator seeded with (seed, epoch), identical on every rank; rank r takes positions
 * r, r + N, r + 2N, ... and cuts them into batches of `batch`, dropping the tail. The global
 * batch of step t (all ranks together) is then positions [t*N*batch, (t+1)*N*batch) of the
 * shuffled order: what one process with batch N*batch and the same seed sees at step t.
 */
typedef struct rt_loader {
    const rt_dataset *d;
    size_t batch;
    int rank, nranks;
    uint64_t seed;
    size_t *perm;
    size_t steps; /* batches per epoch on every rank */
} rt_loader;

typedef struct rt_batch {
    rt_tensor *x;          /* [batch, nfeat] on the graph */
    rt_tensor *y;          /* [batch, 1] regression targets, or NULL */
    const int32_t *labels; /* [batch] class labels, or NULL */
    size_t n;
} rt_batch;

ring_result_t rt_loader_init(rt_loader *l, const rt_dataset *d, size_t batch, int rank, int nranks,
                             uint64_t seed);
void rt_loader_set_epoch(rt_loader *l, uint64_t epoch);
size_t rt_loader_index(const rt_loader *l, size_t step, size_t j); /* sample j of batch step */
ring_result_t rt_loader_batch(const rt_loader *l, size_t step, rt_graph *g, rt_batch *b);
void rt_loader_destroy(rt_loader *l);

/* ------------------------------------------------------------------------------------------ */
/* Distributed data parallel.                                                                  */

typedef struct rt_ddp rt_ddp;

typedef struct rt_ddp_options {
    double bucket_mb;       /* RING_DDP_BUCKET_MB, default 25 (MiB, fractions allowed) */
    double first_bucket_mb; /* RING_DDP_FIRST_BUCKET_MB, default 1, capped at bucket_mb */
} rt_ddp_options;

/* Fills o from the environment or the defaults; RING_ERR_INVALID_ARG for a malformed value. */
ring_result_t rt_ddp_options_init(rt_ddp_options *o);

/*
 * Checks that every rank has the same parameter shapes, broadcasts the parameters from rank 0,
 * groups them into buckets in reverse list order and hooks every parameter. comm must outlive
 * the rt_ddp and is used by it alone during rt_ddp_backward(). o NULL: rt_ddp_options_init().
 */
ring_result_t rt_ddp_create(rt_ddp **out, ring_comm_t *comm, const rt_params *p, const rt_ddp_options *o);
/* on: later backwards only accumulate locally (gradient accumulation); off: the next backward
 * all-reduces the accumulated gradients. */
void rt_ddp_no_sync(rt_ddp *d, int on);
/*
 * rt_backward(g, loss) with the all-reduce overlapped: when the last gradient of a bucket is
 * final, the bucket is all-reduced asynchronously (RING_AVG) while backward goes on; buckets
 * are started in bucket order on every rank. Returns once every gradient holds the average
 * over the ranks. On failure the ranks may be out of step: abort the communicator.
 */
ring_result_t rt_ddp_backward(rt_ddp *d, rt_graph *g, rt_tensor *loss);

typedef struct rt_ddp_stats {
    uint64_t syncs;      /* backwards that all-reduced */
    uint64_t allreduces; /* bucket all-reduces issued */
    double backward_s;   /* time in rt_backward of synced backwards */
    double comm_s;       /* time at least one bucket all-reduce was in flight */
    double hidden_s;     /* the part of comm_s during which backward was computing */
    double issue_s;      /* time backward spent inside ring_allreduce_async (not hidden) */
} rt_ddp_stats;

void rt_ddp_get_stats(const rt_ddp *d, rt_ddp_stats *s);
void rt_ddp_reset_stats(rt_ddp *d);
size_t rt_ddp_nbuckets(const rt_ddp *d);
size_t rt_ddp_bucket_numel(const rt_ddp *d, size_t i);
/* Waits for nothing: call it after the last rt_ddp_backward returned. */
void rt_ddp_destroy(rt_ddp *d);

/* ------------------------------------------------------------------------------------------ */
/* Asynchronous parameter server (Downpour-style): world rank 0 serves, ranks 1..N-1 work.     */

typedef struct rt_ps rt_ps;

/*
 * Collective over world (N >= 2). Broadcasts the parameters from rank 0, then opens one
 * two-rank communicator between the server and each worker; rank 0 chooses free ports on host
 * (the address where it listens: an address of rank 0's host that the workers reach) and sends
 * them over world. Each push carries nextra floats besides the gradient (loss, counts).
 */
ring_result_t rt_ps_create(rt_ps **out, ring_comm_t *world, const rt_params *p, const char *host,
                           size_t nextra);
int rt_ps_is_server(const rt_ps *ps);

/* Worker: sends the gradients in p and extra[nextra] to the server, then waits for the
 * server's weights after it applied them and stores them in p. */
ring_result_t rt_ps_push_pull(rt_ps *ps, const float *extra);

/* Called by the server after each applied update: the worker (1..N-1), its extra floats, and
 * the staleness (updates from other workers applied since that worker got its weights).
 * Return RING_OK to go on. */
typedef ring_result_t (*rt_ps_update_fn)(void *arg, int worker, const float *extra, uint64_t staleness);

/*
 * Server: serves workers in the order their gradients arrive, until each worker has pushed
 * updates_per_worker times: sets the model's gradients to the pushed ones, runs opt (whose
 * parameters are p), sends the new weights back to that worker alone.
 */
ring_result_t rt_ps_serve(rt_ps *ps, rt_sgd *opt, uint64_t updates_per_worker, rt_ps_update_fn fn, void *arg);

typedef struct rt_ps_stats {
    uint64_t updates;        /* server: applied; worker: pushed */
    uint64_t staleness_sum;  /* server */
    uint64_t staleness_max;  /* server */
    double wait_s;           /* worker: time in push_pull; server: time idle */
} rt_ps_stats;

void rt_ps_get_stats(const rt_ps *ps, rt_ps_stats *s);
void rt_ps_destroy(rt_ps *ps);

#ifdef __cplusplus
}
#endif

#endif /* RT_H */
