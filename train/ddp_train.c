/*
 * ddp_train: data-parallel training with ringcomm, the demo of the training layer (train/rt.h).
 *
 *   ringrun -n 4 ddp_train                          house prices (linear), then spirals (MLP)
 *   ringrun -n 4 ddp_train --task spirals --epochs 40
 *   ringrun -n 4 ddp_train --data file.csv [--classify] [--hidden 32,32]
 *   ringrun -n 4 ddp_train --mode ps-async          rank 0 serves parameters, 1..3 train
 *
 * Every rank generates (or reads) the whole data set, trains on its shard of each epoch, and
 * all-reduces gradients in buckets overlapped with backward (mode ddp), or pushes gradients to
 * rank 0 and pulls weights without waiting for the other workers (mode ps-async). Rank 0 prints
 * one line per epoch (training loss and accuracy over the epoch, samples/s, the share of
 * all-reduce time hidden behind backward), writes the curve to PREFIX-TASK-MODE.csv, and plots it
 * to PREFIX-TASK-MODE.png with gnuplot when gnuplot is installed. --help lists the options.
 */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "rt.h"

extern char **environ;

enum mode { MODE_DDP, MODE_PS };
enum task { TASK_HOUSE, TASK_SPIRALS, TASK_CSV, NTASKS };
static const char *const task_names[NTASKS] = {"house", "spirals", "csv"};

#define MAX_HIDDEN 16

struct opts {
    int tasks[NTASKS]; /* which tasks to run, in this order */
    int ntasks;
    const char *data;
    int classify;
    int epochs;
    size_t batch, samples;
    float lr, momentum, wd;
    int lr_set, momentum_set, epochs_set, samples_set;
    size_t hidden[MAX_HIDDEN], nhidden;
    int hidden_set;
    rt_activation act;
    int act_set;
    uint64_t seed;
    int accum;
    double bucket_mb, first_bucket_mb; /* <= 0: from the environment or the defaults */
    enum mode mode;
    const char *out;
    int plot, check_replicas, quiet;
    int straggler_rank;
    double straggler_ms;
    double loss_below; /* NAN: no check */
    const char *save, *load, *summary, *ps_host, *ps_trace;
};

/* What one task needs: data, model, optimiser, and the figures of the run. */
struct run {
    const struct opts *o;
    enum task task;
    ring_comm_t *comm;
    int rank, nranks;
    rt_dataset data;
    rt_mlp model;
    rt_sgd opt;
    rt_loader loader;
    rt_graph *g;
    FILE *csv;
    char path_csv[1024], path_png[1024], path_gp[1024];
    /* progress */
    double t_start, train_s;
    double samples_total;
    double rate_samples, rate_time; /* epochs after the first, for the summary */
    double overlap_hidden, overlap_comm;
    uint64_t replica_checks;
    /* ps-async server window */
    int ps_epoch;
    uint64_t ps_updates, ps_window;
    double ps_loss, ps_correct, ps_samples, ps_stale, ps_t_last, ps_samples_last;
    uint64_t ps_stale_max;
    FILE *trace;
    double final_loss, final_acc;
    char err[1200]; /* why the run failed */
};

/* Both need rc, r and a fail: label. CHECK is for rt_ calls (message in rt_last_error), COMM
 * for direct ringcomm calls (message in the communicator). */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc != RING_OK) {                                                                       \
            snprintf(r->err, sizeof r->err, "%s", rt_last_error());                                \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
#define COMM(call, what)                                                                           \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc != RING_OK) {                                                                       \
            snprintf(r->err, sizeof r->err, "%s: %s", what, ring_comm_last_error(r->comm));        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static void usage(FILE *f)
{
    fputs("usage: ringrun -n N ddp_train [options]\n"
          "  --task T          house | spirals | all (house, then spirals; the default)\n"
          "  --data FILE       train on a CSV file (target in the last column) instead\n"
          "  --classify        the CSV target is a class label (default: regression)\n"
          "  --mode M          ddp (synchronous ring all-reduce, default) | ps-async\n"
          "  --epochs E        epochs (house 20, spirals 40, csv 20)\n"
          "  --batch B         samples per rank per step (default 32)\n"
          "  --samples S       generated samples (house 4096; spirals: per class, 1000)\n"
          "  --lr X --momentum X --weight-decay X   SGD (task defaults; momentum 0.9 in ddp, 0 in\n"
          "                    ps-async, where stale gradients already act as momentum)\n"
          "  --hidden A,B,..   hidden layer widths (house none, spirals 64,64, csv none)\n"
          "  --act relu|tanh   activation (default tanh)\n"
          "  --accum K         gradient accumulation: K micro-steps per update (no_sync)\n"
          "  --bucket-mb X     DDP bucket size in MiB (RING_DDP_BUCKET_MB, default 25)\n"
          "  --first-bucket-mb X  first bucket (RING_DDP_FIRST_BUCKET_MB, default 1)\n"
          "  --seed N          data, model and shuffling seed (default 1)\n"
          "  --out PREFIX      output files PREFIX-TASK-MODE.{csv,gp,png} (default ddp_train)\n"
          "  --no-plot         write the CSV only\n"
          "  --check-replicas  compare a hash of the parameters of all ranks after every step\n"
          "  --straggler R:MS  rank R sleeps MS milliseconds every step (to see who waits); in ps-async\n"
          "                    rank 0, the server, sleeps MS milliseconds after each update it applies\n"
          "  --loss-below X    exit 1 unless the final loss over the whole data set is below X\n"
          "  --save FILE / --load FILE   final / initial parameters (one task only)\n"
          "  --summary FILE    rank 0 writes key-value results (for scripts and tests)\n"
          "  --ps-host H       address the server listens on in ps-async (default: RING_ROOT's)\n"
          "  --ps-trace FILE   ps-async: the server writes \"update worker staleness seconds\" per update\n"
          "  --quiet           no per-epoch lines\n",
          f);
}

static int parse_size_list(const char *s, size_t *out, size_t max, size_t *n)
{
    *n = 0;
    if (!strcmp(s, "none") || !*s) return 1;
    while (*s) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || errno || v == 0 || v > 65536 || *n == max) return 0;
        out[(*n)++] = (size_t)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return 0;
    }
    return 1;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end && !errno && isfinite(*v);
}

/* The optimizer keeps these as float: a double past FLT_MAX would become inf there, and
 * training would print NaN losses and still exit 0. */
static int parse_float(const char *s, double *v)
{
    return parse_double(s, v) && fabs(*v) <= FLT_MAX;
}

/* 1: run; 0: bad arguments (message printed); -1: --help was printed. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 32;
    o->momentum = 0.9f;
    o->act = RT_ACT_TANH;
    o->seed = 1;
    o->accum = 1;
    o->out = "ddp_train";
    o->plot = 1;
    o->straggler_rank = -1;
    o->loss_below = NAN;
    const char *task = "all";
    enum { O_TASK = 256, O_DATA, O_CLASSIFY, O_MODE, O_EPOCHS, O_BATCH, O_SAMPLES, O_LR, O_MOM, O_WD, O_HIDDEN, O_ACT,
           O_ACCUM, O_BUCKET, O_FIRST, O_SEED, O_OUT, O_NOPLOT, O_CHECK, O_STRAG, O_BELOW, O_SAVE, O_LOAD, O_SUMMARY,
           O_PSHOST, O_PSTRACE, O_QUIET };
    static const struct option lo[] = {
        {"task", 1, 0, O_TASK},       {"data", 1, 0, O_DATA},         {"classify", 0, 0, O_CLASSIFY},
        {"mode", 1, 0, O_MODE},       {"epochs", 1, 0, O_EPOCHS},     {"batch", 1, 0, O_BATCH},
        {"samples", 1, 0, O_SAMPLES}, {"lr", 1, 0, O_LR},             {"momentum", 1, 0, O_MOM},
        {"weight-decay", 1, 0, O_WD}, {"hidden", 1, 0, O_HIDDEN},     {"act", 1, 0, O_ACT},
        {"accum", 1, 0, O_ACCUM},     {"bucket-mb", 1, 0, O_BUCKET},  {"first-bucket-mb", 1, 0, O_FIRST},
        {"seed", 1, 0, O_SEED},       {"out", 1, 0, O_OUT},           {"no-plot", 0, 0, O_NOPLOT},
        {"check-replicas", 0, 0, O_CHECK}, {"straggler", 1, 0, O_STRAG}, {"loss-below", 1, 0, O_BELOW},
        {"save", 1, 0, O_SAVE},       {"load", 1, 0, O_LOAD},         {"summary", 1, 0, O_SUMMARY},
        {"ps-host", 1, 0, O_PSHOST},  {"ps-trace", 1, 0, O_PSTRACE},  {"quiet", 0, 0, O_QUIET},
        {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    double v;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_TASK: task = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_CLASSIFY: o->classify = 1; break;
        case O_MODE:
            if (!strcmp(optarg, "ddp")) o->mode = MODE_DDP;
            else if (!strcmp(optarg, "ps-async")) o->mode = MODE_PS;
            else goto bad;
            break;
        case O_EPOCHS:
            if (!parse_double(optarg, &v) || v < 1 || v > 1e6 || v != floor(v)) goto bad;
            o->epochs = (int)v;
            o->epochs_set = 1;
            break;
        case O_BATCH:
            if (!parse_double(optarg, &v) || v < 1 || v > 1e6 || v != floor(v)) goto bad;
            o->batch = (size_t)v;
            break;
        case O_SAMPLES:
            if (!parse_double(optarg, &v) || v < 2 || v > 1e8 || v != floor(v)) goto bad;
            o->samples = (size_t)v;
            o->samples_set = 1;
            break;
        case O_LR:
            if (!parse_float(optarg, &v) || !(v > 0)) goto bad;
            o->lr = (float)v;
            o->lr_set = 1;
            break;
        case O_MOM:
            if (!parse_double(optarg, &v) || v < 0 || v >= 1) goto bad;
            o->momentum = (float)v;
            o->momentum_set = 1;
            break;
        case O_WD:
            if (!parse_float(optarg, &v) || v < 0) goto bad;
            o->wd = (float)v;
            break;
        case O_HIDDEN:
            if (!parse_size_list(optarg, o->hidden, MAX_HIDDEN, &o->nhidden)) goto bad;
            o->hidden_set = 1;
            break;
        case O_ACT:
            if (!strcmp(optarg, "relu")) o->act = RT_ACT_RELU;
            else if (!strcmp(optarg, "tanh")) o->act = RT_ACT_TANH;
            else goto bad;
            o->act_set = 1;
            break;
        case O_ACCUM:
            if (!parse_double(optarg, &v) || v < 1 || v > 1e4 || v != floor(v)) goto bad;
            o->accum = (int)v;
            break;
        case O_BUCKET:
            if (!parse_double(optarg, &v) || !(v > 0) || v > 1e6) goto bad;
            o->bucket_mb = v;
            break;
        case O_FIRST:
            if (!parse_double(optarg, &v) || !(v > 0) || v > 1e6) goto bad;
            o->first_bucket_mb = v;
            break;
        case O_SEED:
            if (!parse_double(optarg, &v) || v < 0 || v > 9e15 || v != floor(v)) goto bad;
            o->seed = (uint64_t)v;
            break;
        case O_OUT: o->out = optarg; break;
        case O_NOPLOT: o->plot = 0; break;
        case O_CHECK: o->check_replicas = 1; break;
        case O_STRAG: {
            char *end;
            long r = strtol(optarg, &end, 10);
            /* At most a day: sleep_ms's timespec must hold it. */
            if (end == optarg || *end != ':' || r < 0 || r > INT_MAX || !parse_double(end + 1, &v) ||
                v < 0 || v > 86400e3)
                goto bad;
            o->straggler_rank = (int)r;
            o->straggler_ms = v;
            break;
        }
        case O_BELOW:
            if (!parse_double(optarg, &v)) goto bad;
            o->loss_below = v;
            break;
        case O_SAVE: o->save = optarg; break;
        case O_LOAD: o->load = optarg; break;
        case O_SUMMARY: o->summary = optarg; break;
        case O_PSHOST: o->ps_host = optarg; break;
        case O_PSTRACE: o->ps_trace = optarg; break;
        case O_QUIET: o->quiet = 1; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 0;
        }
        continue;
    bad:
        fprintf(stderr, "ddp_train: bad value '%s' for --%s\n", optarg, lo[c - O_TASK].name);
        return 0;
    }
    if (optind < argc) {
        fprintf(stderr, "ddp_train: unexpected argument '%s'\n", argv[optind]);
        return 0;
    }
    if (o->data) {
        o->tasks[o->ntasks++] = TASK_CSV;
    } else if (!strcmp(task, "all")) {
        o->tasks[o->ntasks++] = TASK_HOUSE;
        o->tasks[o->ntasks++] = TASK_SPIRALS;
    } else if (!strcmp(task, "house")) {
        o->tasks[o->ntasks++] = TASK_HOUSE;
    } else if (!strcmp(task, "spirals")) {
        o->tasks[o->ntasks++] = TASK_SPIRALS;
    } else {
        fprintf(stderr, "ddp_train: unknown task '%s' (house, spirals, all; --data for a CSV file)\n", task);
        return 0;
    }
    if ((o->save || o->load) && o->ntasks != 1) {
        fprintf(stderr, "ddp_train: --save/--load need one task (--task house|spirals or --data)\n");
        return 0;
    }
    if (o->mode == MODE_PS && (o->accum != 1 || o->check_replicas)) {
        fprintf(stderr, "ddp_train: --accum and --check-replicas apply to --mode ddp only (in ps-async the server "
                        "holds the one model)\n");
        return 0;
    }
    return 1;
}

static const char *mode_name(enum mode m)
{
    return m == MODE_DDP ? "ddp" : "ps-async";
}

static int is_classification(const struct run *r)
{
    return r->data.labels != NULL;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail_msg(const struct run *r, const char *what, ring_result_t rc)
{
    fprintf(stderr, "ddp_train: rank %d: %s: %s: %s\n", r->rank, what, ring_result_name(rc), r->err);
}

/* The model's output and its loss on a batch; correct counts right answers when classifying. */
static rt_tensor *batch_loss(struct run *r, rt_tensor *x, rt_tensor *y, const int32_t *labels, size_t *correct)
{
    rt_tensor *out = rt_mlp_forward(r->g, &r->model, x);
    *correct = 0;
    if (labels) return rt_softmax_xent(r->g, out, labels, correct);
    return rt_mse_loss(r->g, out, y);
}

/* Loss and accuracy of the current model over the whole data set, in chunks. */
static ring_result_t evaluate(struct run *r, double *loss, double *acc)
{
    const rt_dataset *d = &r->data;
    const size_t chunk = 1024;
    double lsum = 0, right = 0;
    for (size_t i0 = 0; i0 < d->n; i0 += chunk) {
        size_t m = d->n - i0 < chunk ? d->n - i0 : chunk;
        rt_graph_reset(r->g);
        rt_tensor *x = rt_graph_tensor(r->g, 2, m, d->nfeat), *y = NULL;
        if (!x) return RING_ERR_NOMEM;
        memcpy(x->data, d->x + i0 * d->nfeat, m * d->nfeat * sizeof(float));
        if (d->y) {
            y = rt_graph_tensor(r->g, 2, m, 1);
            if (!y) return RING_ERR_NOMEM;
            memcpy(y->data, d->y + i0, m * sizeof(float));
        }
        size_t c;
        rt_tensor *l = batch_loss(r, x, y, d->labels ? d->labels + i0 : NULL, &c);
        if (!l) return RING_ERR_INVALID_ARG;
        lsum += (double)l->data[0] * (double)m;
        right += (double)c;
    }
    rt_graph_reset(r->g);
    *loss = lsum / (double)d->n;
    *acc = is_classification(r) ? right / (double)d->n : NAN;
    return RING_OK;
}

static uint64_t params_hash(const rt_params *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < p->n; i++) {
        const unsigned char *c = (const unsigned char *)p->t[i]->data;
        for (size_t k = 0; k < p->t[i]->size * sizeof(float); k++) h = (h ^ c[k]) * 0x100000001b3ull;
    }
    return h;
}

/* Every rank's parameters must be the same bits after every update. */
static ring_result_t check_replicas(struct run *r)
{
    uint64_t h = params_hash(&r->model.params), *all = calloc((size_t)r->nranks, sizeof *all);
    ring_result_t rc;
    if (!all) {
        snprintf(r->err, sizeof r->err, "out of memory for %d parameter hashes", r->nranks);
        rc = RING_ERR_NOMEM;
        goto fail;
    }
    COMM(ring_allgather(r->comm, &h, all, 1, RING_UINT64), "allgather of the parameter hashes");
    for (int k = 1; k < r->nranks; k++)
        if (all[k] != all[0]) {
            snprintf(r->err, sizeof r->err, "replicas differ after update %llu: rank 0 %016llx, rank %d %016llx",
                     (unsigned long long)r->replica_checks + 1, (unsigned long long)all[0], k, (unsigned long long)all[k]);
            rc = RING_ERR_INTERNAL;
            goto fail;
        }
    r->replica_checks++;
    rc = RING_OK;
fail:
    free(all);
    return rc;
}

static void csv_row(struct run *r, int epoch, double loss, double acc, double rate, double overlap, double stale)
{
    if (!r->csv) return;
    fprintf(r->csv, "%d,%.0f,%.4f,%.8g,%.6g,%.1f,%.4f,%.3f\n", epoch, r->samples_total, r->train_s, loss, acc, rate,
            overlap, stale);
    fflush(r->csv);
}

static void print_epoch(const struct run *r, int epoch, double loss, double acc, double rate, const char *tail)
{
    if (r->o->quiet) return;
    char a[32] = "";
    if (!isnan(acc)) snprintf(a, sizeof a, "  acc %5.1f%%", 100.0 * acc);
    printf("%s %s  epoch %3d/%d  loss %.6f%s  samples/s %9.0f  %s\n", task_names[r->task], mode_name(r->o->mode), epoch,
           r->o->epochs, loss, a, rate, tail);
    fflush(stdout);
}

/* ---------- synchronous data parallel ---------- */

static ring_result_t train_ddp(struct run *r)
{
    const struct opts *o = r->o;
    ring_result_t rc;
    rt_ddp *ddp = NULL;
    rt_ddp_options dopt;
    CHECK(rt_ddp_options_init(&dopt));
    if (o->bucket_mb > 0) dopt.bucket_mb = o->bucket_mb;
    if (o->first_bucket_mb > 0) dopt.first_bucket_mb = o->first_bucket_mb;
    CHECK(rt_ddp_create(&ddp, r->comm, &r->model.params, &dopt));
    CHECK(rt_loader_init(&r->loader, &r->data, o->batch, r->rank, r->nranks, o->seed + 2));
    size_t steps = r->loader.steps - r->loader.steps % (size_t)o->accum;
    if (steps == 0) {
        rc = RING_ERR_INVALID_ARG;
        snprintf(r->err, sizeof r->err, "%zu batches per epoch cannot make one update of %d micro-steps", r->loader.steps,
                 o->accum);
        goto out;
    }
    if (r->rank == 0 && !o->quiet) {
        printf("%s ddp: %d ranks, %zu samples, %zu steps/epoch of %zu x %d samples%s, %zu parameters in %zu bucket(s)\n",
               task_names[r->task], r->nranks, r->data.n, steps, o->batch, r->nranks,
               o->accum > 1 ? " (accumulated)" : "", rt_params_numel(&r->model.params), rt_ddp_nbuckets(ddp));
        fflush(stdout);
    }
    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        rt_loader_set_epoch(&r->loader, (uint64_t)epoch - 1);
        rt_ddp_reset_stats(ddp);
        double lsum = 0, right = 0, seen = 0, t0 = now_s();
        for (size_t s = 0; s < steps; s++) {
            if (r->rank == o->straggler_rank) sleep_ms(o->straggler_ms);
            rt_graph_reset(r->g);
            rt_batch b;
            CHECK(rt_loader_batch(&r->loader, s, r->g, &b));
            size_t c;
            rt_tensor *loss = batch_loss(r, b.x, b.y, b.labels, &c);
            /* Accumulated micro-steps each carry 1/K of the loss, so their summed gradient is the
             * gradient of the mean over all K micro-batches. */
            rt_tensor *l = o->accum > 1 ? rt_scale(r->g, loss, 1.0f / (float)o->accum) : loss;
            int sync = (s + 1) % (size_t)o->accum == 0;
            rt_ddp_no_sync(ddp, !sync);
            CHECK(rt_ddp_backward(ddp, r->g, l));
            lsum += (double)loss->data[0] * (double)b.n;
            right += (double)c;
            seen += (double)b.n;
            if (sync) {
                rt_sgd_step(&r->opt);
                rt_params_zero_grad(&r->model.params);
                if (o->check_replicas && (rc = check_replicas(r)) != RING_OK) goto fail;
            }
        }
        double dt = now_s() - t0;
        rt_ddp_stats st;
        rt_ddp_get_stats(ddp, &st);
        /* One small all-reduce per epoch for the figures: sums over ranks, and the slowest
         * rank's time, since that is the time the epoch took. */
        double v[7] = {lsum, right, seen, st.hidden_s, st.comm_s, st.issue_s, st.backward_s}, tmax = dt;
        COMM(ring_allreduce(r->comm, v, v, 7, RING_FLOAT64, RING_SUM), "all-reduce of the epoch's figures");
        COMM(ring_allreduce(r->comm, &tmax, &tmax, 1, RING_FLOAT64, RING_MAX), "all-reduce of the epoch's time");
        r->samples_total += v[2];
        r->train_s += tmax;
        if (epoch > 1 || o->epochs == 1) {
            r->rate_samples += v[2];
            r->rate_time += tmax;
        }
        r->overlap_hidden += v[3];
        r->overlap_comm += v[4];
        double loss = v[0] / v[2], acc = is_classification(r) ? v[1] / v[2] : NAN, rate = v[2] / tmax;
        double share = v[4] > 0 ? v[3] / v[4] : 0;
        if (r->rank == 0) {
            char tail[240];
            double per = 1e3 / r->nranks / (double)(st.syncs ? st.syncs : 1);
            snprintf(tail, sizeof tail,
                     "all-reduce hidden %3.0f%% (%.3f of %.3f ms per update; issuing %.3f ms; backward %.3f ms)",
                     100.0 * share, v[3] * per, v[4] * per, v[5] * per, v[6] * per);
            print_epoch(r, epoch, loss, acc, rate, tail);
            csv_row(r, epoch, loss, acc, rate, share, 0);
        }
    }
    rc = RING_OK;
    goto out;
fail:
    if (rc == RING_OK) rc = RING_ERR_INTERNAL;
out:
    rt_ddp_destroy(ddp);
    return rc;
}

/* ---------- asynchronous parameter server ---------- */

/* Server side: one "epoch" is as many updates as the workers make in one pass over the data. */
static ring_result_t ps_update(void *arg, int worker, const float *extra, uint64_t stale)
{
    struct run *r = arg;
    /* A slow server: every worker's gradient is waiting when it looks again. */
    if (r->rank == r->o->straggler_rank) sleep_ms(r->o->straggler_ms);
    if (r->trace)
        fprintf(r->trace, "%llu %d %llu %.6f\n", (unsigned long long)r->ps_updates + 1, worker, (unsigned long long)stale,
                now_s() - r->t_start);
    r->ps_loss += (double)extra[0] * (double)r->o->batch;
    r->ps_correct += (double)extra[1];
    r->ps_samples += (double)r->o->batch;
    r->ps_stale += (double)stale;
    if (stale > r->ps_stale_max) r->ps_stale_max = stale;
    if (++r->ps_updates % r->ps_window) return RING_OK;
    double t = now_s();
    r->ps_epoch++;
    double rate = (r->ps_samples) / (t - r->ps_t_last);
    r->samples_total += r->ps_samples;
    r->train_s = t - r->t_start;
    if (r->ps_epoch > 1 || r->o->epochs == 1) {
        r->rate_samples += r->ps_samples;
        r->rate_time += t - r->ps_t_last;
    }
    double loss = r->ps_loss / r->ps_samples, acc = is_classification(r) ? r->ps_correct / r->ps_samples : NAN;
    double stale_mean = r->ps_stale / (double)r->ps_window;
    char tail[128];
    snprintf(tail, sizeof tail, "staleness mean %.2f max %llu updates", stale_mean, (unsigned long long)r->ps_stale_max);
    print_epoch(r, r->ps_epoch, loss, acc, rate, tail);
    csv_row(r, r->ps_epoch, loss, acc, rate, NAN, stale_mean);
    r->ps_loss = r->ps_correct = r->ps_samples = r->ps_stale = 0;
    r->ps_stale_max = 0;
    r->ps_t_last = t;
    return RING_OK;
}

/* The host part of RING_ROOT ("host:port" or "[v6]:port"). */
static int root_host(char *buf, size_t len)
{
    const char *root = getenv("RING_ROOT");
    if (!root || !*root) return 0;
    const char *end;
    if (root[0] == '[') {
        end = strchr(root, ']');
        if (!end) return 0;
        root++;
    } else {
        end = strrchr(root, ':');
        if (!end) return 0;
    }
    if ((size_t)(end - root) >= len) return 0;
    memcpy(buf, root, (size_t)(end - root));
    buf[end - root] = '\0';
    return 1;
}

static ring_result_t train_ps(struct run *r)
{
    const struct opts *o = r->o;
    ring_result_t rc;
    rt_ps *ps = NULL;
    char host[256];
    if (o->ps_host)
        snprintf(host, sizeof host, "%s", o->ps_host);
    else if (!root_host(host, sizeof host)) {
        snprintf(r->err, sizeof r->err,
                 "--mode ps-async needs the server's address: RING_ROOT=host:port (ringrun sets it) or --ps-host");
        return RING_ERR_INVALID_ARG;
    }
    if (r->nranks < 2) {
        snprintf(r->err, sizeof r->err, "--mode ps-async needs 2 or more ranks: rank 0 serves, the others train");
        return RING_ERR_INVALID_ARG;
    }
    int nw = r->nranks - 1;
    /* Every rank builds a worker loader (rank r-1 of N-1), so the server knows the step count. */
    CHECK(rt_loader_init(&r->loader, &r->data, o->batch, r->rank ? r->rank - 1 : 0, nw, o->seed + 2));
    size_t steps = r->loader.steps;
    CHECK(rt_ps_create(&ps, r->comm, &r->model.params, host, 2));
    if (r->rank == 0 && !o->quiet) {
        printf("%s ps-async: server rank 0 at %s, %d workers, %zu samples, %zu steps/epoch of %zu samples per worker, "
               "%zu parameters\n",
               task_names[r->task], host, nw, r->data.n, steps, o->batch, rt_params_numel(&r->model.params));
        fflush(stdout);
    }
    if (rt_ps_is_server(ps)) {
        r->ps_window = (uint64_t)steps * (uint64_t)nw;
        if (o->ps_trace && !(r->trace = fopen(o->ps_trace, "w")))
            fprintf(stderr, "ddp_train: cannot write %s: %s (going on without the trace)\n", o->ps_trace, strerror(errno));
        r->ps_t_last = r->t_start = now_s();
        CHECK(rt_ps_serve(ps, &r->opt, (uint64_t)steps * (uint64_t)o->epochs, ps_update, r));
    } else {
        for (int epoch = 1; epoch <= o->epochs; epoch++) {
            rt_loader_set_epoch(&r->loader, (uint64_t)epoch - 1);
            for (size_t s = 0; s < steps; s++) {
                if (r->rank == o->straggler_rank) sleep_ms(o->straggler_ms);
                rt_graph_reset(r->g);
                rt_batch b;
                CHECK(rt_loader_batch(&r->loader, s, r->g, &b));
                size_t c;
                rt_tensor *loss = batch_loss(r, b.x, b.y, b.labels, &c);
                rt_params_zero_grad(&r->model.params);
                CHECK(rt_backward(r->g, loss));
                float extra[2] = {loss->data[0], (float)c};
                CHECK(rt_ps_push_pull(ps, extra));
            }
        }
    }
    if (r->rank == 0) {
        rt_ps_stats st;
        rt_ps_get_stats(ps, &st);
        if (!o->quiet)
            printf("%s ps-async: %llu updates, staleness mean %.2f max %llu, server idle %.2f s\n", task_names[r->task],
                   (unsigned long long)st.updates, st.updates ? (double)st.staleness_sum / (double)st.updates : 0.0,
                   (unsigned long long)st.staleness_max, st.wait_s);
    }
    rc = RING_OK;
    goto out;
fail:
    if (rc == RING_OK) rc = RING_ERR_INTERNAL;
out:
    if (r->trace) fclose(r->trace);
    r->trace = NULL;
    rt_ps_destroy(ps);
    return rc;
}

/* ---------- output ---------- */

/* Writes a gnuplot script beside the CSV and runs gnuplot on it. The plot is a convenience: any
 * problem is reported and training still counts as done. */
static void plot(struct run *r)
{
    FILE *f = fopen(r->path_gp, "w");
    if (!f) {
        fprintf(stderr, "ddp_train: cannot write %s: %s; plot skipped (the curve is in %s)\n", r->path_gp,
                strerror(errno), r->path_csv);
        return;
    }
    fprintf(f,
            "# Loss curve of ddp_train; run: gnuplot %s\n"
            "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
            "    set terminal pngcairo size 900,540\n"
            "} else {\n"
            "    set terminal png size 900,540\n"
            "}\n"
            "set termoption noenhanced\n"
            "set output \"%s\"\n"
            "set datafile separator \",\"\n"
            "set title \"ddp_train: %s, %s, %d ranks\"\n"
            "set xlabel \"epoch\"\n"
            "set ylabel \"training loss\"\n"
            "set logscale y\n"
            "set grid\n"
            "set key top right\n",
            r->path_gp, r->path_png, task_names[r->task], mode_name(r->o->mode), r->nranks);
    if (is_classification(r))
        fprintf(f,
                "set y2label \"accuracy\"\n"
                "set y2range [0:1]\n"
                "set y2tics\n"
                "plot \"%s\" using 1:4 skip 1 with linespoints title \"loss\", \\\n"
                "     \"%s\" using 1:5 skip 1 axes x1y2 with lines title \"accuracy\"\n",
                r->path_csv, r->path_csv);
    else
        fprintf(f, "plot \"%s\" using 1:4 skip 1 with linespoints title \"loss\"\n", r->path_csv);
    if (fclose(f) != 0) {
        fprintf(stderr, "ddp_train: writing %s failed; plot skipped\n", r->path_gp);
        return;
    }
    pid_t pid;
    char *argv[] = {"gnuplot", r->path_gp, NULL};
    int err = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (err) {
        fprintf(stderr, "ddp_train: cannot run gnuplot: %s%s; plot skipped (the curve is in %s)\n", strerror(err),
                err == ENOENT ? " (Debian: apt-get install gnuplot-nox)" : "", r->path_csv);
        return;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "ddp_train: gnuplot failed on %s; plot skipped (the curve is in %s)\n", r->path_gp, r->path_csv);
    else if (!r->o->quiet)
        printf("%s: loss curve in %s, plot %s\n", task_names[r->task], r->path_csv, r->path_png);
}

static ring_result_t load_task(struct run *r)
{
    const struct opts *o = r->o;
    ring_result_t rc = RING_OK;
    size_t sizes[MAX_HIDDEN + 2], ns = 0;
    switch (r->task) {
    case TASK_HOUSE: rc = rt_data_house(&r->data, o->samples_set ? o->samples : 4096, o->seed); break;
    case TASK_SPIRALS: rc = rt_data_spirals(&r->data, o->samples_set ? o->samples : 1000, 3, o->seed); break;
    case TASK_CSV:
        rc = rt_data_csv(&r->data, o->data, o->classify);
        if (rc == RING_OK) {
            float tm = 0, ts = 1;
            rt_data_standardize(&r->data, 1, &tm, &ts);
            if (r->rank == 0 && !o->quiet) {
                printf("csv: %s: %zu samples, %zu features", o->data, r->data.n, r->data.nfeat);
                if (is_classification(r))
                    printf(", %d classes\n", r->data.nclasses);
                else
                    printf("; features and target standardised (target mean %g, deviation %g): losses are in "
                           "units of the deviation squared\n",
                           (double)tm, (double)ts);
            }
        }
        break;
    default: break;
    }
    if (rc != RING_OK) return rc;
    sizes[ns++] = r->data.nfeat;
    if (o->hidden_set) {
        for (size_t i = 0; i < o->nhidden; i++) sizes[ns++] = o->hidden[i];
    } else if (r->task == TASK_SPIRALS) {
        sizes[ns++] = 64;
        sizes[ns++] = 64;
    }
    sizes[ns++] = is_classification(r) ? (size_t)r->data.nclasses : 1;
    if ((rc = rt_mlp_init(&r->model, sizes, ns, o->act, o->seed + 1)) != RING_OK) return rc;
    if (o->load && (rc = rt_params_load(&r->model.params, o->load)) != RING_OK) return rc;
    float lr = o->lr_set ? o->lr : r->task == TASK_HOUSE ? 0.01f : r->task == TASK_SPIRALS ? 0.1f : 0.05f;
    /* Stale gradients already act like momentum (docs/training.md: with 3 workers, momentum 0.5
     * made the house regression diverge), so ps-async starts without it unless asked. */
    float momentum = o->momentum_set || o->mode == MODE_DDP ? o->momentum : 0.0f;
    return rt_sgd_init(&r->opt, &r->model.params, lr, momentum, o->wd);
}

static void write_summary(const struct run *r, const double *rank_time)
{
    const struct opts *o = r->o;
    FILE *f = fopen(o->summary, "a");
    if (!f) {
        fprintf(stderr, "ddp_train: cannot write %s: %s\n", o->summary, strerror(errno));
        return;
    }
    fprintf(f, "task %s\nmode %s\nnranks %d\nepochs %d\nfinal_loss %.8g\nfinal_accuracy %.6g\nsamples_per_s %.1f\n",
            task_names[r->task], mode_name(o->mode), r->nranks, o->epochs, r->final_loss, r->final_acc,
            r->rate_time > 0 ? r->rate_samples / r->rate_time : 0.0);
    if (o->mode == MODE_DDP)
        fprintf(f, "overlap %.4f\nreplica_checks %llu\n", r->overlap_comm > 0 ? r->overlap_hidden / r->overlap_comm : 0.0,
                (unsigned long long)r->replica_checks);
    for (int k = 0; k < r->nranks; k++) fprintf(f, "rank_time_s %d %.6f\n", k, rank_time[k]);
    fclose(f);
}

static ring_result_t run_task(ring_comm_t *comm, const struct opts *o, enum task task)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.task = task;
    r.comm = comm;
    r.rank = ring_comm_rank(comm);
    r.nranks = ring_comm_nranks(comm);
    ring_result_t rc;
    double *rank_time = NULL;
    if ((rc = rt_graph_create(&r.g)) != RING_OK || (rc = load_task(&r)) != RING_OK) {
        snprintf(r.err, sizeof r.err, "%s", rt_last_error());
        fail_msg(&r, task_names[task], rc);
        goto out;
    }
    if (r.rank == 0) {
        snprintf(r.path_csv, sizeof r.path_csv, "%s-%s-%s.csv", o->out, task_names[task], mode_name(o->mode));
        snprintf(r.path_png, sizeof r.path_png, "%s-%s-%s.png", o->out, task_names[task], mode_name(o->mode));
        snprintf(r.path_gp, sizeof r.path_gp, "%s-%s-%s.gp", o->out, task_names[task], mode_name(o->mode));
        r.csv = fopen(r.path_csv, "w");
        if (!r.csv)
            fprintf(stderr, "ddp_train: cannot write %s: %s (going on without the CSV)\n", r.path_csv, strerror(errno));
        else
            fprintf(r.csv, "epoch,samples,time_s,loss,accuracy,samples_per_s,overlap,staleness\n");
    }
    double t0 = now_s();
    rc = o->mode == MODE_DDP ? train_ddp(&r) : train_ps(&r);
    double my_time = now_s() - t0;
    if (rc != RING_OK) {
        fail_msg(&r, o->mode == MODE_DDP ? "training (ddp)" : "training (ps-async)", rc);
        goto out;
    }
    rank_time = calloc((size_t)r.nranks, sizeof *rank_time);
    if (!rank_time) {
        rc = RING_ERR_NOMEM;
        snprintf(r.err, sizeof r.err, "out of memory");
        fail_msg(&r, "results", rc);
        goto out;
    }
    if ((rc = ring_allgather(comm, &my_time, rank_time, 1, RING_FLOAT64)) != RING_OK) {
        snprintf(r.err, sizeof r.err, "%s", ring_comm_last_error(comm));
        fail_msg(&r, "allgather of the ranks' times", rc);
        goto out;
    }
    if (r.rank == 0) {
        if ((rc = evaluate(&r, &r.final_loss, &r.final_acc)) != RING_OK) {
            snprintf(r.err, sizeof r.err, "%s", rt_last_error());
            fail_msg(&r, "evaluation", rc);
            goto out;
        }
        printf("%s %s: final loss %.6f", task_names[task], mode_name(o->mode), r.final_loss);
        if (!isnan(r.final_acc)) printf(", accuracy %.1f%%", 100.0 * r.final_acc);
        printf(" over all %zu samples; %.0f samples/s", r.data.n, r.rate_time > 0 ? r.rate_samples / r.rate_time : 0.0);
        if (o->mode == MODE_DDP)
            printf(", all-reduce hidden behind backward %.0f%%",
                   r.overlap_comm > 0 ? 100.0 * r.overlap_hidden / r.overlap_comm : 0.0);
        if (o->check_replicas && o->mode == MODE_DDP)
            printf("; replicas bitwise identical after each of %llu updates", (unsigned long long)r.replica_checks);
        printf("\n");
        if (task == TASK_HOUSE && r.model.nlayers == 1)
            printf("house: learned price = %.3f bedrooms + %.3f bathrooms + %.3f (data made with %.3f, %.3f, %.3f)\n",
                   (double)r.model.layers[0].w->data[0], (double)r.model.layers[0].w->data[1],
                   (double)r.model.layers[0].b->data[0], (double)RT_HOUSE_W1, (double)RT_HOUSE_W2, (double)RT_HOUSE_B);
        fflush(stdout);
        if (o->save && (rc = rt_params_save(&r.model.params, o->save)) != RING_OK) {
            snprintf(r.err, sizeof r.err, "%s", rt_last_error());
            fail_msg(&r, "save", rc);
            goto out;
        }
        if (r.csv) {
            fclose(r.csv);
            r.csv = NULL;
            if (o->plot) plot(&r);
        }
        if (o->summary) write_summary(&r, rank_time);
        if (!isnan(o->loss_below) && !(r.final_loss < o->loss_below)) {
            fprintf(stderr, "ddp_train: %s: final loss %.6f is not below %g\n", task_names[task], r.final_loss,
                    o->loss_below);
            rc = RING_ERR_INTERNAL;
        }
    }
out:
    if (r.csv) fclose(r.csv);
    free(rank_time);
    rt_loader_destroy(&r.loader);
    rt_sgd_destroy(&r.opt);
    rt_mlp_destroy(&r.model);
    rt_dataset_free(&r.data);
    rt_graph_destroy(r.g);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    int args = parse_args(argc, argv, &o);
    if (args <= 0) return args < 0 ? 0 : 2;
    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        fprintf(stderr, "ddp_train: init failed: %s: %s (start it with ringrun -n N ddp_train)\n", ring_strerror(rc),
                ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        return 1;
    }
    int status = 0;
    for (int i = 0; i < o.ntasks && status == 0; i++) {
        /* Each task has its default epoch count unless --epochs was given. */
        if (!o.epochs_set) o.epochs = o.tasks[i] == TASK_SPIRALS ? 40 : 20;
        if (run_task(comm, &o, (enum task)o.tasks[i]) != RING_OK) status = 1;
    }
    /* A failed rank may leave the others inside a collective: abort tells them at once, where
     * destroy would wait for the timeout. */
    if (status) ring_comm_abort(comm);
    if (ring_comm_destroy(comm) != RING_OK && !status) status = 1;
    return status;
}
