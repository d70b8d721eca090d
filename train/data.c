/*
 * data.c: the generated data sets (house prices, spirals), CSV files, standardisation, and the
 * sharded loader that gives each rank a disjoint part of every epoch's shuffled order.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define CSV_MAX_CLASSES 1000

static ring_result_t alloc_set(rt_dataset *d, size_t n, size_t nfeat, int classification)
{
    memset(d, 0, sizeof *d);
    if (n == 0 || nfeat == 0) return rt__fail(RING_ERR_INVALID_ARG, "data set: no samples or no features");
    if (n > SIZE_MAX / sizeof(float) / nfeat) return rt__fail(RING_ERR_INVALID_ARG, "data set: too large");
    d->n = n;
    d->nfeat = nfeat;
    d->x = malloc(n * nfeat * sizeof *d->x);
    if (classification)
        d->labels = malloc(n * sizeof *d->labels);
    else
        d->y = malloc(n * sizeof *d->y);
    if (!d->x || (!d->labels && !d->y)) {
        rt_dataset_free(d);
        return rt__fail(RING_ERR_NOMEM, "data set: out of memory for %zu samples", n);
    }
    return RING_OK;
}

void rt_dataset_free(rt_dataset *d)
{
    if (!d) return;
    free(d->x);
    free(d->y);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

ring_result_t rt_data_house(rt_dataset *d, size_t n, uint64_t seed)
{
    if (!d) return rt__fail(RING_ERR_INVALID_ARG, "rt_data_house: d is NULL");
    ring_result_t rc = alloc_set(d, n, 2, 0);
    if (rc != RING_OK) return rc;
    rt_rng r;
    rt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        float bed = (float)(1 + rt_rng_below(&r, 6)), bath = (float)(1 + rt_rng_below(&r, 4));
        d->x[2 * i] = bed;
        d->x[2 * i + 1] = bath;
        d->y[i] = RT_HOUSE_W1 * bed + RT_HOUSE_W2 * bath + RT_HOUSE_B + (float)(0.1 * rt_rng_normal(&r));
    }
    return RING_OK;
}

ring_result_t rt_data_spirals(rt_dataset *d, size_t n_per_class, int nclasses, uint64_t seed)
{
    if (!d) return rt__fail(RING_ERR_INVALID_ARG, "rt_data_spirals: d is NULL");
    if (nclasses < 2 || n_per_class < 2 || n_per_class > SIZE_MAX / (size_t)nclasses)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_data_spirals: need >= 2 classes of >= 2 points");
    ring_result_t rc = alloc_set(d, n_per_class * (size_t)nclasses, 2, 1);
    if (rc != RING_OK) return rc;
    d->nclasses = nclasses;
    rt_rng r;
    rt_rng_seed(&r, seed);
    size_t i = 0;
    for (int c = 0; c < nclasses; c++)
        for (size_t k = 0; k < n_per_class; k++, i++) {
            /* Radius grows along the arm; each arm turns through 4 radians, with angular noise. */
            double frac = (double)k / (double)(n_per_class - 1);
            double t = 4.0 * (c + frac) + 0.2 * rt_rng_normal(&r);
            d->x[2 * i] = (float)(frac * sin(t));
            d->x[2 * i + 1] = (float)(frac * cos(t));
            d->labels[i] = c;
        }
    return RING_OK;
}

/* Splits line in place at commas into at most max fields; returns the count (max + 1 if more). */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *p = line;
    for (;;) {
        if (n == max) return max + 1;
        fields[n++] = p;
        char *c = strchr(p, ',');
        if (!c) return n;
        *c = '\0';
        p = c + 1;
    }
}

static int parse_number(const char *s, double *v)
{
    char *end;
    while (*s == ' ' || *s == '\t') s++;
    errno = 0;
    *v = strtod(s, &end);
    /* ERANGE with a finite result is an underflow (1e-320): a number all the same. */
    if (end == s || !isfinite(*v)) return 0;
    while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
    return *end == '\0';
}

ring_result_t rt_data_csv(rt_dataset *d, const char *path, int classification)
{
    if (!d || !path) return rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: NULL argument");
    memset(d, 0, sizeof *d);
    enum { MAXF = 4096 };
    ring_result_t rc = RING_OK;
    char *line = NULL, **fields = NULL;
    size_t linecap = 0, ncols = 0, rows = 0, cap = 0, lineno = 0;
    double *vals = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return rt__fail(RING_ERR_SYSTEM, "rt_data_csv: cannot open %s: %s", path, strerror(errno));
    fields = malloc(MAXF * sizeof *fields);
    if (!fields) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_data_csv: out of memory");
        goto fail;
    }
    ssize_t len;
    while ((len = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        char *text = line;
        /* A UTF-8 byte-order mark, as spreadsheets write at the start of the file. */
        if (lineno == 1 && len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) text += 3, len -= 3;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' || text[len - 1] == '\t'))
            text[--len] = '\0';
        if (len == 0) continue;
        size_t nf = split_fields(text, fields, MAXF);
        if (nf > MAXF) {
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s:%zu: more than %d columns", path, lineno, MAXF);
            goto fail;
        }
        if (ncols == 0 && nf < 2) {
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s:%zu: need at least one feature and the target", path, lineno);
            goto fail;
        }
        if (ncols && nf != ncols) {
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s:%zu: %zu columns, the first row had %zu", path, lineno, nf, ncols);
            goto fail;
        }
        if (rows == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            double *q = realloc(vals, nc * nf * sizeof *q);
            if (!q) {
                rc = rt__fail(RING_ERR_NOMEM, "rt_data_csv: out of memory at line %zu", lineno);
                goto fail;
            }
            vals = q;
            cap = nc;
        }
        size_t bad = nf, numbers = 0;
        for (size_t j = 0; j < nf; j++) {
            if (parse_number(fields[j], &vals[rows * nf + j])) numbers++;
            else if (bad == nf) bad = j;
        }
        if (bad < nf) {
            /* The first line is a header only where no field is a number: "1,2,x" is a sample
             * with a typo, and dropping it as a header would lose it without a word. */
            if (ncols == 0 && rows == 0 && numbers == 0) {
                ncols = nf; /* the width the data rows must have */
                fprintf(stderr, "rt_data_csv: %s:%zu: no field is a number: skipped as a header\n", path, lineno);
                continue;
            }
            rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s:%zu: column %zu is not a number", path, lineno, bad + 1);
            goto fail;
        }
        ncols = nf;
        if (classification) {
            double t = vals[rows * nf + nf - 1];
            if (t != floor(t) || t < 0 || t >= CSV_MAX_CLASSES) {
                rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s:%zu: class label %g is not an integer in [0, %d)", path,
                              lineno, t, CSV_MAX_CLASSES);
                goto fail;
            }
        }
        rows++;
    }
    if (ferror(f)) {
        rc = rt__fail(RING_ERR_SYSTEM, "rt_data_csv: reading %s: %s", path, strerror(errno));
        goto fail;
    }
    if (rows == 0) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s has no data rows", path);
        goto fail;
    }
    RT_CHECK(alloc_set(d, rows, ncols - 1, classification));
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j + 1 < ncols; j++) d->x[i * (ncols - 1) + j] = (float)vals[i * ncols + j];
        double t = vals[i * ncols + ncols - 1];
        if (classification) {
            d->labels[i] = (int32_t)t;
            if ((int)t + 1 > d->nclasses) d->nclasses = (int)t + 1;
        } else {
            d->y[i] = (float)t;
        }
    }
    if (classification && d->nclasses < 2) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_data_csv: %s: every label is 0; classification needs two classes", path);
        goto fail;
    }
    goto done;
fail:
    rt_dataset_free(d);
done:
    free(vals);
    free(fields);
    free(line);
    fclose(f);
    return rc;
}

/* Mean and deviation over a strided column, in double. */
static void moments(const float *v, size_t n, size_t stride, double *mean, double *std)
{
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++) s += v[i * stride];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) {
        double d = v[i * stride] - *mean;
        ss += d * d;
    }
    *std = sqrt(ss / (double)n);
}

static void standardize_column(float *v, size_t n, size_t stride, float *mean_out, float *std_out)
{
    double mean, std;
    moments(v, n, stride, &mean, &std);
    if (!(std > 0)) std = 1; /* a constant column is only centred */
    for (size_t i = 0; i < n; i++) v[i * stride] = (float)((v[i * stride] - mean) / std);
    if (mean_out) *mean_out = (float)mean;
    if (std_out) *std_out = (float)std;
}

void rt_data_standardize(rt_dataset *d, int target, float *target_mean, float *target_std)
{
    for (size_t j = 0; j < d->nfeat; j++) standardize_column(d->x + j, d->n, d->nfeat, NULL, NULL);
    if (target && d->y) standardize_column(d->y, d->n, 1, target_mean, target_std);
}

ring_result_t rt_loader_init(rt_loader *l, const rt_dataset *d, size_t batch, int rank, int nranks, uint64_t seed)
{
    if (!l || !d) return rt__fail(RING_ERR_INVALID_ARG, "rt_loader_init: NULL argument");
    memset(l, 0, sizeof *l);
    if (nranks < 1 || rank < 0 || rank >= nranks || batch == 0)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_loader_init: rank %d of %d, batch %zu", rank, nranks, batch);
    size_t per_rank = d->n / (size_t)nranks;
    if (per_rank < batch)
        return rt__fail(RING_ERR_INVALID_ARG,
                        "rt_loader_init: %zu samples give %zu per rank over %d ranks, fewer than one batch of %zu", d->n,
                        per_rank, nranks, batch);
    l->perm = malloc(d->n * sizeof *l->perm);
    if (!l->perm) return rt__fail(RING_ERR_NOMEM, "rt_loader_init: out of memory");
    l->d = d;
    l->batch = batch;
    l->rank = rank;
    l->nranks = nranks;
    l->seed = seed;
    l->steps = per_rank / batch;
    rt_loader_set_epoch(l, 0);
    return RING_OK;
}

void rt_loader_set_epoch(rt_loader *l, uint64_t epoch)
{
    /* Fisher-Yates from a generator that depends on the seed and the epoch only, so every rank
     * computes the same order without any communication. */
    rt_rng r;
    rt_rng_seed(&r, l->seed ^ (0x9e3779b97f4a7c15ull * (epoch + 1)));
    size_t n = l->d->n;
    for (size_t i = 0; i < n; i++) l->perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rt_rng_below(&r, (uint64_t)i + 1);
        size_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

size_t rt_loader_index(const rt_loader *l, size_t step, size_t j)
{
    return l->perm[(step * l->batch + j) * (size_t)l->nranks + (size_t)l->rank];
}

ring_result_t rt_loader_batch(const rt_loader *l, size_t step, rt_graph *g, rt_batch *b)
{
    if (!l || !g || !b) return rt__fail(RING_ERR_INVALID_ARG, "rt_loader_batch: NULL argument");
    if (step >= l->steps)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_loader_batch: step %zu of an epoch of %zu", step, l->steps);
    const rt_dataset *d = l->d;
    memset(b, 0, sizeof *b);
    b->n = l->batch;
    b->x = rt_graph_tensor(g, 2, l->batch, d->nfeat);
    if (!b->x) return RING_ERR_NOMEM;
    int32_t *labels = NULL;
    if (d->labels) {
        labels = rt_graph_alloc(g, l->batch * sizeof *labels);
        if (!labels) return RING_ERR_NOMEM;
        b->labels = labels;
    } else {
        b->y = rt_graph_tensor(g, 2, l->batch, 1);
        if (!b->y) return RING_ERR_NOMEM;
    }
    for (size_t j = 0; j < l->batch; j++) {
        size_t i = rt_loader_index(l, step, j);
        memcpy(b->x->data + j * d->nfeat, d->x + i * d->nfeat, d->nfeat * sizeof(float));
        if (labels)
            labels[j] = d->labels[i];
        else
            b->y->data[j] = d->y[i];
    }
    return RING_OK;
}

void rt_loader_destroy(rt_loader *l)
{
    if (!l) return;
    free(l->perm);
    memset(l, 0, sizeof *l);
}
