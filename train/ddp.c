/*
 * ddp.c: distributed data parallel, as PyTorch's DistributedDataParallel does it.
 *
 *   create    every rank checks that all ranks have the same parameter shapes (an all-reduce
 *             of MIN and MAX of a shape digest), then rank 0's parameters are broadcast so that
 *             every replica starts identical. Parameters are grouped into buckets in reverse list
 *             order (the order backward finishes them): the first bucket holds up to
 *             first_bucket_mb, the others up to bucket_mb; a tensor is never split.
 *   backward  each parameter has a hook that backward fires when its gradient is final. When
 *             every parameter of a bucket is final, its gradients are copied into the bucket's
 *             flat buffer and ring_allreduce_async(RING_AVG) is issued, while backward goes on
 *             with the earlier layers. Buckets are issued strictly in bucket order, so that the
 *             collectives are called in the same order on every rank whatever order the hooks
 *             fire in. After backward, buckets not yet issued (parameters the loss does not
 *             reach) are issued, all are waited for and the averages copied back.
 *   no_sync   hooks do nothing; gradients accumulate locally until the next synced backward,
 *             which all-reduces the sum: k micro-steps cost one all-reduce.
 *
 * Overlap is measured, not estimated: a waiter thread blocks in ring_wait() on each request in
 * issue order and stamps its completion. The all-reduce time of a step is the union of the
 * intervals [issue, completion] of its buckets (the progress thread runs them one after the
 * other, so that is when it was busy with them); the hidden part is what of that union lies
 * inside backward, less the time backward spent issuing (inside ring_allreduce_async and the
 * handover to the waiter), when it was not computing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define MIB (1024.0 * 1024.0)

struct bucket {
    size_t first, nparams; /* parameters order[first .. first+nparams) */
    size_t numel;
    float *buf;
    size_t nready;
    ring_request_t *req;
    double t_issue, t_ret, t_done; /* _async called; backward resumed after the handover; completed */
    ring_result_t rc;
};

struct hook_arg {
    struct rt_ddp *d;
    size_t param; /* index in the parameter list */
};

struct rt_ddp {
    ring_comm_t *comm;
    rt_params params;
    size_t *order;          /* bucket order: parameter indices, last parameter first */
    size_t *param_bucket;   /* parameter index -> bucket */
    unsigned char *ready;   /* per parameter, in the current backward */
    struct hook_arg *args;
    struct bucket *b;
    size_t nbuckets;
    size_t next_issue;
    int armed, no_sync;
    ring_result_t issue_rc; /* first failure to issue, reported after backward */

    /* Waiter thread: requests are handed over by count, completions are stamped under mu. */
    pthread_t waiter;
    int waiter_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t nhanded, ndone;
    int stop;

    rt_ddp_stats stats;
};

static void *waiter_main(void *arg)
{
    struct rt_ddp *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->ndone == d->nhanded) pthread_cond_wait(&d->cv, &d->mu);
        if (d->ndone == d->nhanded) break; /* stop, nothing outstanding */
        struct bucket *b = &d->b[d->ndone];
        ring_request_t *req = b->req;
        pthread_mutex_unlock(&d->mu);
        ring_result_t rc = ring_wait(req);
        double t = rt__now();
        pthread_mutex_lock(&d->mu);
        b->req = NULL;
        b->rc = rc;
        b->t_done = t;
        d->ndone++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void issue(struct rt_ddp *d, struct bucket *b)
{
    if (d->issue_rc != RING_OK) return; /* the ranks are out of step already: issue nothing more */
    float *p = b->buf;
    for (size_t k = 0; k < b->nparams; k++) {
        const rt_tensor *t = d->params.t[d->order[b->first + k]];
        memcpy(p, t->grad, t->size * sizeof *p);
        p += t->size;
    }
    ring_request_t *req = NULL;
    b->t_issue = rt__now();
    ring_result_t rc = ring_allreduce_async(d->comm, b->buf, b->buf, b->numel, RING_FLOAT32, RING_AVG, &req);
    if (rc != RING_OK) {
        b->t_ret = rt__now();
        d->issue_rc = rt__fail_comm(rc, d->comm, "ddp: all-reduce of bucket %zu (%zu floats)", (size_t)(b - d->b), b->numel);
        return;
    }
    d->stats.allreduces++;
    pthread_mutex_lock(&d->mu);
    b->req = req;
    d->nhanded++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    /* Waking the waiter is part of issuing: backward resumes only now. */
    b->t_ret = rt__now();
}

/* Issues every bucket from next_issue on that is complete (or all of them at the end). */
static void issue_ready(struct rt_ddp *d, int all)
{
    while (d->next_issue < d->nbuckets) {
        struct bucket *b = &d->b[d->next_issue];
        if (!all && b->nready < b->nparams) break;
        issue(d, b);
        d->next_issue++;
    }
}

static void grad_hook(rt_tensor *t, void *arg)
{
    (void)t;
    struct hook_arg *h = arg;
    struct rt_ddp *d = h->d;
    if (!d->armed || d->no_sync || d->ready[h->param]) return;
    d->ready[h->param] = 1;
    struct bucket *b = &d->b[d->param_bucket[h->param]];
    if (++b->nready == b->nparams) issue_ready(d, 0);
}

static ring_result_t parse_mb(const char *name, double def, double *out)
{
    const char *s = getenv(name);
    *out = def;
    if (!s || !*s) return RING_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v > 0) || v > 1e6)
        return rt__fail(RING_ERR_INVALID_ARG, "%s=\"%s\": expected a number of MiB in (0, 1e6]", name, s);
    *out = v;
    return RING_OK;
}

ring_result_t rt_ddp_options_init(rt_ddp_options *o)
{
    if (!o) return rt__fail(RING_ERR_INVALID_ARG, "rt_ddp_options_init: o is NULL");
    ring_result_t rc;
    RT_CHECK(parse_mb("RING_DDP_BUCKET_MB", 25.0, &o->bucket_mb));
    RT_CHECK(parse_mb("RING_DDP_FIRST_BUCKET_MB", 1.0, &o->first_bucket_mb));
    return RING_OK;
fail:
    return rc;
}

/* A digest of the shapes in list order (FNV-1a over ndim and dims). */
static uint64_t shape_digest(const rt_params *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t v[3] = {(uint64_t)p->t[i]->ndim, p->t[i]->shape[0], p->t[i]->shape[1]};
        const unsigned char *c = (const unsigned char *)v;
        for (size_t k = 0; k < sizeof v; k++) h = (h ^ c[k]) * 0x100000001b3ull;
    }
    return h;
}

/* Every rank must hold the same model, or the buckets (and the collectives) would not match. */
static ring_result_t check_shapes(struct rt_ddp *d)
{
    /* The digest is halved into two non-negative int64s so that MIN/MAX compare it exactly. */
    uint64_t h = shape_digest(&d->params);
    int64_t v[3] = {(int64_t)d->params.n, (int64_t)(h >> 32), (int64_t)(h & 0xffffffffu)};
    int64_t lo[3], hi[3];
    ring_result_t rc = ring_allreduce(d->comm, v, lo, 3, RING_INT64, RING_MIN);
    if (rc == RING_OK) rc = ring_allreduce(d->comm, v, hi, 3, RING_INT64, RING_MAX);
    if (rc != RING_OK) return rt__fail_comm(rc, d->comm, "rt_ddp_create: comparing the models of the ranks");
    if (memcmp(lo, hi, sizeof lo) != 0)
        return rt__fail(RING_ERR_INVALID_ARG,
                        "rt_ddp_create: the ranks hold different models (this rank: %zu tensors, shape digest %016llx)",
                        d->params.n, (unsigned long long)h);
    return RING_OK;
}

static ring_result_t broadcast_params(struct rt_ddp *d)
{
    size_t n = rt_params_numel(&d->params);
    float *flat = malloc((n ? n : 1) * sizeof *flat);
    if (!flat) return rt__fail(RING_ERR_NOMEM, "rt_ddp_create: out of memory for %zu floats", n);
    rt_params_get(&d->params, flat);
    ring_result_t rc = ring_broadcast(d->comm, flat, n, RING_FLOAT32, 0);
    if (rc == RING_OK)
        rt_params_set(&d->params, flat);
    else
        rt__fail_comm(rc, d->comm, "rt_ddp_create: broadcast of the parameters from rank 0");
    free(flat);
    return rc;
}

static ring_result_t make_buckets(struct rt_ddp *d, const rt_ddp_options *o)
{
    size_t np = d->params.n;
    double cap = o->bucket_mb * MIB, first_cap = (o->first_bucket_mb < o->bucket_mb ? o->first_bucket_mb : o->bucket_mb) * MIB;
    d->b = calloc(np ? np : 1, sizeof *d->b); /* at most one bucket per tensor */
    if (!d->b) return rt__fail(RING_ERR_NOMEM, "rt_ddp_create: out of memory");
    struct bucket *b = NULL;
    double bytes = 0;
    for (size_t k = 0; k < np; k++) {
        size_t i = np - 1 - k;
        d->order[k] = i;
        if (!b) {
            b = &d->b[d->nbuckets++];
            b->first = k;
            bytes = 0;
        }
        b->nparams++;
        b->numel += d->params.t[i]->size;
        d->param_bucket[i] = (size_t)(b - d->b);
        bytes += (double)d->params.t[i]->size * sizeof(float);
        /* As PyTorch: a bucket closes once it reaches its cap. */
        if (bytes >= (d->nbuckets == 1 ? first_cap : cap)) b = NULL;
    }
    for (size_t j = 0; j < d->nbuckets; j++) {
        d->b[j].buf = malloc(d->b[j].numel * sizeof(float));
        if (!d->b[j].buf) return rt__fail(RING_ERR_NOMEM, "rt_ddp_create: out of memory for bucket %zu", j);
    }
    return RING_OK;
}

ring_result_t rt_ddp_create(rt_ddp **out, ring_comm_t *comm, const rt_params *p, const rt_ddp_options *o)
{
    if (!out || !comm || !p) return rt__fail(RING_ERR_INVALID_ARG, "rt_ddp_create: NULL argument");
    *out = NULL;
    ring_result_t rc;
    rt_ddp_options def;
    if (!o) {
        if ((rc = rt_ddp_options_init(&def)) != RING_OK) return rc;
        o = &def;
    }
    /* The bound of RING_DDP_BUCKET_MB: far above it the byte caps no longer fit a size_t. */
    if (!(o->bucket_mb > 0) || !(o->first_bucket_mb > 0) || o->bucket_mb > 1e6 || o->first_bucket_mb > 1e6)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_ddp_create: bucket sizes must be in (0, 1e6] MiB");
    for (size_t i = 0; i < p->n; i++)
        if (!p->t[i] || !p->t[i]->leaf || !p->t[i]->grad)
            return rt__fail(RING_ERR_INVALID_ARG, "rt_ddp_create: parameter %zu is not a leaf that requires grad", i);

    struct rt_ddp *d = calloc(1, sizeof *d);
    if (!d) return rt__fail(RING_ERR_NOMEM, "rt_ddp_create: out of memory");
    d->comm = comm;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    for (size_t i = 0; i < p->n; i++) RT_CHECK(rt_params_append(&d->params, p->t[i]));
    size_t np = p->n ? p->n : 1;
    d->order = calloc(np, sizeof *d->order);
    d->param_bucket = calloc(np, sizeof *d->param_bucket);
    d->ready = calloc(np, 1);
    d->args = calloc(np, sizeof *d->args);
    if (!d->order || !d->param_bucket || !d->ready || !d->args) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_ddp_create: out of memory");
        goto fail;
    }
    RT_CHECK(make_buckets(d, o));
    RT_CHECK(check_shapes(d));
    RT_CHECK(broadcast_params(d));
    int err = pthread_create(&d->waiter, NULL, waiter_main, d);
    if (err) {
        rc = rt__fail(RING_ERR_SYSTEM, "rt_ddp_create: cannot start the waiter thread: %s", strerror(err));
        goto fail;
    }
    d->waiter_started = 1;
    for (size_t i = 0; i < p->n; i++) {
        d->args[i] = (struct hook_arg){d, i};
        rt_tensor_set_hook(p->t[i], grad_hook, &d->args[i]);
    }
    *out = d;
    return RING_OK;
fail:
    rt_ddp_destroy(d);
    return rc;
}

void rt_ddp_no_sync(rt_ddp *d, int on)
{
    if (d) d->no_sync = on != 0;
}

/*
 * Union of the buckets' [issue, done] intervals, and its part that lay inside backward's
 * computation: [t_start, t_end] less the time the thread spent inside ring_allreduce_async
 * itself (backward is stalled there, nothing is hidden behind it). Buckets complete in issue
 * order, so one pass merges them; each bucket is in flight during its own issue call, so that
 * call's time is inside the union.
 */
static void account(struct rt_ddp *d, double t_start, double t_end)
{
    double comm = 0, hidden = 0, lo = 0, hi = -1, stalled = 0;
    for (size_t j = 0; j <= d->nbuckets; j++) {
        const struct bucket *b = j < d->nbuckets ? &d->b[j] : NULL;
        if (b && b->t_issue < t_end) stalled += (b->t_ret < t_end ? b->t_ret : t_end) - b->t_issue;
        if (b && b->t_issue <= hi) {
            if (b->t_done > hi) hi = b->t_done;
            continue;
        }
        if (hi >= lo) { /* close [lo, hi] */
            comm += hi - lo;
            double a = lo > t_start ? lo : t_start, z = hi < t_end ? hi : t_end;
            if (z > a) hidden += z - a;
        }
        if (b) {
            lo = b->t_issue;
            hi = b->t_done;
        }
    }
    d->stats.comm_s += comm;
    d->stats.hidden_s += hidden > stalled ? hidden - stalled : 0;
    d->stats.issue_s += stalled;
}

ring_result_t rt_ddp_backward(rt_ddp *d, rt_graph *g, rt_tensor *loss)
{
    if (!d) return rt__fail(RING_ERR_INVALID_ARG, "rt_ddp_backward: d is NULL");
    if (d->no_sync) return rt_backward(g, loss);

    ring_result_t rc = RING_OK;
    d->next_issue = 0;
    d->issue_rc = RING_OK;
    memset(d->ready, 0, d->params.n);
    for (size_t j = 0; j < d->nbuckets; j++) {
        d->b[j].nready = 0;
        d->b[j].rc = RING_OK;
    }
    pthread_mutex_lock(&d->mu);
    d->nhanded = d->ndone = 0;
    pthread_mutex_unlock(&d->mu);

    d->armed = 1;
    double t0 = rt__now();
    ring_result_t brc = rt_backward(g, loss);
    double t1 = rt__now();
    d->armed = 0;
    /* Even when backward failed, the buckets already issued must be waited for before their
     * buffers can be touched again. The rest is issued only after a good backward: on a bad one
     * the ranks are out of step anyway and the caller aborts. */
    if (brc == RING_OK) issue_ready(d, 1);

    pthread_mutex_lock(&d->mu);
    while (d->ndone < d->nhanded) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);

    if (brc != RING_OK) return brc;
    if (d->issue_rc != RING_OK) return d->issue_rc;
    for (size_t j = 0; j < d->nbuckets; j++)
        if (d->b[j].rc != RING_OK) {
            rc = rt__fail_comm(d->b[j].rc, d->comm, "ddp: all-reduce of bucket %zu (%zu floats)", j, d->b[j].numel);
            return rc;
        }
    for (size_t j = 0; j < d->nbuckets; j++) {
        const float *p = d->b[j].buf;
        for (size_t k = 0; k < d->b[j].nparams; k++) {
            rt_tensor *t = d->params.t[d->order[d->b[j].first + k]];
            memcpy(t->grad, p, t->size * sizeof *p);
            p += t->size;
        }
    }
    d->stats.syncs++;
    d->stats.backward_s += t1 - t0;
    account(d, t0, t1);
    return RING_OK;
}

void rt_ddp_get_stats(const rt_ddp *d, rt_ddp_stats *s)
{
    if (d && s) *s = d->stats;
}

void rt_ddp_reset_stats(rt_ddp *d)
{
    if (d) memset(&d->stats, 0, sizeof d->stats);
}

size_t rt_ddp_nbuckets(const rt_ddp *d)
{
    return d ? d->nbuckets : 0;
}

size_t rt_ddp_bucket_numel(const rt_ddp *d, size_t i)
{
    return d && i < d->nbuckets ? d->b[i].numel : 0;
}

void rt_ddp_destroy(rt_ddp *d)
{
    if (!d) return;
    if (d->waiter_started) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->waiter, NULL);
    }
    for (size_t i = 0; i < d->params.n; i++)
        if (d->params.t[i]->hook == grad_hook) rt_tensor_set_hook(d->params.t[i], NULL, NULL);
    if (d->b)
        for (size_t j = 0; j < d->nbuckets; j++) free(d->b[j].buf);
    free(d->b);
    free(d->order);
    free(d->param_bucket);
    free(d->ready);
    free(d->args);
    rt_params_release(&d->params);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
