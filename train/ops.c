/*
 * ops.c: the differentiable ops. Each forward makes its result on the graph and records its
 * sources and a backward function; each backward adds (+=) its contribution to the gradients of
 * the sources that require one. Loops run in a fixed order, so one process always computes the
 * same bits (replicas stay identical because every rank then applies the same all-reduced
 * gradient).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_internal.h"

/* Shape text for messages. */
static const char *shape_str(const rt_tensor *t, char *buf, size_t len)
{
    if (t->ndim == 1)
        snprintf(buf, len, "[%zu]", t->shape[0]);
    else
        snprintf(buf, len, "[%zu, %zu]", t->shape[0], t->shape[1]);
    return buf;
}

/* A new result on g whose gradient is wanted when any source's is. */
static rt_tensor *node(rt_graph *g, int ndim, size_t d0, size_t d1, rt_tensor *a, rt_tensor *b, rt_backward_fn bw)
{
    rt_tensor *t = rt_graph_tensor(g, ndim, d0, d1);
    if (!t) {
        rt__op_failed();
        return NULL;
    }
    t->src[0] = a;
    t->src[1] = b;
    t->requires_grad = (a && a->requires_grad) || (b && b->requires_grad);
    t->backward = t->requires_grad ? bw : NULL;
    return t;
}

static rt_tensor *op_fail(const char *fmt, const rt_tensor *a, const rt_tensor *b)
{
    char sa[64], sb[64] = "";
    shape_str(a, sa, sizeof sa);
    if (b) shape_str(b, sb, sizeof sb);
    rt__fail(RING_ERR_INVALID_ARG, fmt, sa, sb);
    rt__op_failed();
    return NULL;
}

static int bad_inputs(rt_graph *g, const rt_tensor *a, const rt_tensor *b, int binary)
{
    if (!a || (binary && !b)) return 1; /* an earlier op failed: keep its message */
    if (!g) {
        rt__fail(RING_ERR_INVALID_ARG, "op: graph is NULL");
        rt__op_failed();
        return 1;
    }
    return 0;
}

/* ---------- matmul ---------- */

/*
 * C[m,n] = A[m,k] B[k,n]: row i of C is the sum over p of A[i,p] times row p of B, so the inner
 * loop runs along contiguous rows and vectorises. Four values of p are folded into one pass
 * over the row (a quarter of the loads and stores of C), still added one after the other in
 * order of p, so every element is the same sum, in the same order, as the plain loop.
 */
static void mm_forward(const float *A, const float *B, float *C, size_t m, size_t k, size_t n)
{
    memset(C, 0, m * n * sizeof *C);
    for (size_t i = 0; i < m; i++) {
        float *c = C + i * n;
        const float *a = A + i * k;
        size_t p = 0;
        for (; p + 4 <= k; p += 4) {
            const float a0 = a[p], a1 = a[p + 1], a2 = a[p + 2], a3 = a[p + 3];
            const float *b0 = B + p * n, *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
            for (size_t j = 0; j < n; j++) {
                float v = c[j];
                v += a0 * b0[j];
                v += a1 * b1[j];
                v += a2 * b2[j];
                v += a3 * b3[j];
                c[j] = v;
            }
        }
        for (; p < k; p++) {
            const float av = a[p];
            const float *b = B + p * n;
            for (size_t j = 0; j < n; j++) c[j] += av * b[j];
        }
    }
}

/* Dot product of two contiguous rows in 16 interleaved partial sums, combined in a fixed
 * tree: independent chains keep the vector adders busy (one chain waits on its own latency),
 * and the order is fixed, so the result is the same bits on every run and every rank. */
static float dot(const float *x, const float *y, size_t n)
{
    float s[16] = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) s[l] += x[j + l] * y[j + l];
    for (int l = 0; j < n; j++, l++) s[l] += x[j] * y[j];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) s[l] += s[l + w];
    return s[0];
}

static void mm_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0], *b = self->src[1];
    size_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    const float *dC = self->grad;
    if (a->requires_grad) {
        /* dA[i,p] += sum_j dC[i,j] B[p,j] */
        for (size_t i = 0; i < m; i++)
            for (size_t p = 0; p < k; p++) a->grad[i * k + p] += dot(dC + i * n, b->data + p * n, n);
    }
    if (b->requires_grad) {
        /* dB[p,:] += A[i,p] dC[i,:] over i in order; four rows of dC per pass over dB's row, added
         * one after the other, as in mm_forward. */
        size_t i = 0;
        for (; i + 4 <= m; i += 4) {
            const float *d0 = dC + i * n, *d1 = d0 + n, *d2 = d1 + n, *d3 = d2 + n;
            for (size_t p = 0; p < k; p++) {
                const float a0 = a->data[i * k + p], a1 = a->data[(i + 1) * k + p], a2 = a->data[(i + 2) * k + p],
                            a3 = a->data[(i + 3) * k + p];
                float *db = b->grad + p * n;
                for (size_t j = 0; j < n; j++) {
                    float v = db[j];
                    v += a0 * d0[j];
                    v += a1 * d1[j];
                    v += a2 * d2[j];
                    v += a3 * d3[j];
                    db[j] = v;
                }
            }
        }
        for (; i < m; i++)
            for (size_t p = 0; p < k; p++) {
                const float av = a->data[i * k + p];
                float *db = b->grad + p * n;
                const float *dc = dC + i * n;
                for (size_t j = 0; j < n; j++) db[j] += av * dc[j];
            }
    }
}

rt_tensor *rt_matmul(rt_graph *g, rt_tensor *a, rt_tensor *b)
{
    if (bad_inputs(g, a, b, 1)) return NULL;
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != b->shape[0])
        return op_fail("rt_matmul: shapes %s and %s do not multiply (2-D [m,k] x [k,n])", a, b);
    rt_tensor *c = node(g, 2, a->shape[0], b->shape[1], a, b, mm_backward);
    if (!c) return NULL;
    mm_forward(a->data, b->data, c->data, a->shape[0], a->shape[1], b->shape[1]);
    return c;
}

/* ---------- broadcasting add / mul ---------- */

enum bcast { B_SAME, B_SCALAR, B_ROW };

/* How b spreads over a (see rt.h), or -1. */
static int bcast_kind(const rt_tensor *a, const rt_tensor *b)
{
    if (a->ndim == b->ndim && a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1]) return B_SAME;
    if (b->size == 1) return B_SCALAR;
    if (a->ndim == 2 && b->size == a->shape[1] && (b->ndim == 1 || b->shape[0] == 1)) return B_ROW;
    return -1;
}

/* Index of b's element paired with a's element i. */
static size_t bidx(int kind, size_t i, size_t cols)
{
    return kind == B_SAME ? i : kind == B_SCALAR ? 0 : i % cols;
}

static void add_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0], *b = self->src[1];
    int kind = bcast_kind(a, b);
    size_t cols = a->shape[1];
    if (a->requires_grad)
        for (size_t i = 0; i < a->size; i++) a->grad[i] += self->grad[i];
    if (b->requires_grad)
        for (size_t i = 0; i < a->size; i++) b->grad[bidx(kind, i, cols)] += self->grad[i];
}

static void mul_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0], *b = self->src[1];
    int kind = bcast_kind(a, b);
    size_t cols = a->shape[1];
    /* Both sides read the other's data, so a*a (a == b) gets both halves of 2a da. */
    if (a->requires_grad)
        for (size_t i = 0; i < a->size; i++) a->grad[i] += self->grad[i] * b->data[bidx(kind, i, cols)];
    if (b->requires_grad)
        for (size_t i = 0; i < a->size; i++) b->grad[bidx(kind, i, cols)] += self->grad[i] * a->data[i];
}

static rt_tensor *binary(rt_graph *g, rt_tensor *a, rt_tensor *b, int is_mul)
{
    if (bad_inputs(g, a, b, 1)) return NULL;
    int kind = bcast_kind(a, b);
    if (kind < 0)
        return op_fail(is_mul ? "rt_mul: %s and %s do not broadcast (b: same shape, one element, or a row)"
                              : "rt_add: %s and %s do not broadcast (b: same shape, one element, or a row)",
                       a, b);
    rt_tensor *c = node(g, a->ndim, a->shape[0], a->shape[1], a, b, is_mul ? mul_backward : add_backward);
    if (!c) return NULL;
    size_t cols = a->shape[1];
    if (is_mul)
        for (size_t i = 0; i < a->size; i++) c->data[i] = a->data[i] * b->data[bidx(kind, i, cols)];
    else if (kind == B_ROW)
        for (size_t r = 0; r < a->shape[0]; r++)
            for (size_t j = 0; j < cols; j++) c->data[r * cols + j] = a->data[r * cols + j] + b->data[j];
    else
        for (size_t i = 0; i < a->size; i++) c->data[i] = a->data[i] + b->data[bidx(kind, i, cols)];
    return c;
}

rt_tensor *rt_add(rt_graph *g, rt_tensor *a, rt_tensor *b)
{
    return binary(g, a, b, 0);
}

rt_tensor *rt_mul(rt_graph *g, rt_tensor *a, rt_tensor *b)
{
    return binary(g, a, b, 1);
}

/* ---------- elementwise ---------- */

static void scale_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0];
    for (size_t i = 0; i < a->size; i++) a->grad[i] += self->scalar * self->grad[i];
}

rt_tensor *rt_scale(rt_graph *g, rt_tensor *a, float s)
{
    if (bad_inputs(g, a, NULL, 0)) return NULL;
    rt_tensor *c = node(g, a->ndim, a->shape[0], a->shape[1], a, NULL, scale_backward);
    if (!c) return NULL;
    c->scalar = s;
    for (size_t i = 0; i < a->size; i++) c->data[i] = s * a->data[i];
    return c;
}

static void relu_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0];
    /* The derivative at 0 is taken as 0, as in PyTorch. */
    for (size_t i = 0; i < a->size; i++)
        if (a->data[i] > 0.0f) a->grad[i] += self->grad[i];
}

rt_tensor *rt_relu(rt_graph *g, rt_tensor *a)
{
    if (bad_inputs(g, a, NULL, 0)) return NULL;
    rt_tensor *c = node(g, a->ndim, a->shape[0], a->shape[1], a, NULL, relu_backward);
    if (!c) return NULL;
    for (size_t i = 0; i < a->size; i++) c->data[i] = a->data[i] > 0.0f ? a->data[i] : 0.0f;
    return c;
}

static void tanh_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0];
    /* d tanh = 1 - tanh^2, from the output already computed. */
    for (size_t i = 0; i < a->size; i++) a->grad[i] += self->grad[i] * (1.0f - self->data[i] * self->data[i]);
}

rt_tensor *rt_tanh(rt_graph *g, rt_tensor *a)
{
    if (bad_inputs(g, a, NULL, 0)) return NULL;
    rt_tensor *c = node(g, a->ndim, a->shape[0], a->shape[1], a, NULL, tanh_backward);
    if (!c) return NULL;
    for (size_t i = 0; i < a->size; i++) c->data[i] = tanhf(a->data[i]);
    return c;
}

/* ---------- reductions and losses ---------- */

/* Sums are accumulated in double: the loss is a reported figure, and rounding it once keeps it
 * independent of how many terms there are. */
static void sum_backward(rt_tensor *self)
{
    rt_tensor *a = self->src[0];
    float d = self->grad[0] * self->scalar;
    for (size_t i = 0; i < a->size; i++) a->grad[i] += d;
}

static rt_tensor *reduce(rt_graph *g, rt_tensor *a, int mean)
{
    if (bad_inputs(g, a, NULL, 0)) return NULL;
    rt_tensor *c = node(g, 1, 1, 1, a, NULL, sum_backward);
    if (!c) return NULL;
    double s = 0;
    for (size_t i = 0; i < a->size; i++) s += a->data[i];
    c->scalar = mean ? 1.0f / (float)a->size : 1.0f;
    c->data[0] = (float)(mean ? s / (double)a->size : s);
    return c;
}

rt_tensor *rt_sum(rt_graph *g, rt_tensor *a)
{
    return reduce(g, a, 0);
}

rt_tensor *rt_mean(rt_graph *g, rt_tensor *a)
{
    return reduce(g, a, 1);
}

static void mse_backward(rt_tensor *self)
{
    rt_tensor *p = self->src[0], *t = self->src[1];
    float k = self->grad[0] * 2.0f / (float)p->size;
    if (p->requires_grad)
        for (size_t i = 0; i < p->size; i++) p->grad[i] += k * (p->data[i] - t->data[i]);
    if (t->requires_grad)
        for (size_t i = 0; i < p->size; i++) t->grad[i] -= k * (p->data[i] - t->data[i]);
}

rt_tensor *rt_mse_loss(rt_graph *g, rt_tensor *pred, rt_tensor *target)
{
    if (bad_inputs(g, pred, target, 1)) return NULL;
    if (pred->size != target->size)
        return op_fail("rt_mse_loss: prediction %s and target %s differ in size", pred, target);
    rt_tensor *c = node(g, 1, 1, 1, pred, target, mse_backward);
    if (!c) return NULL;
    double s = 0;
    for (size_t i = 0; i < pred->size; i++) {
        double d = (double)pred->data[i] - (double)target->data[i];
        s += d * d;
    }
    c->data[0] = (float)(s / (double)pred->size);
    return c;
}

static void xent_backward(rt_tensor *self)
{
    rt_tensor *z = self->src[0];
    const float *prob = self->aux;
    const int32_t *labels = (const int32_t *)(prob + z->size);
    size_t m = z->shape[0], c = z->shape[1];
    float k = self->grad[0] / (float)m;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < c; j++) {
            float p = prob[i * c + j] - ((size_t)labels[i] == j ? 1.0f : 0.0f);
            z->grad[i * c + j] += k * p;
        }
}

rt_tensor *rt_softmax_xent(rt_graph *g, rt_tensor *logits, const int32_t *labels, size_t *correct)
{
    if (bad_inputs(g, logits, NULL, 0)) return NULL;
    if (logits->ndim != 2) {
        rt__fail(RING_ERR_INVALID_ARG, "rt_softmax_xent: logits [%zu] must be 2-D [rows, classes]", logits->shape[0]);
        rt__op_failed();
        return NULL;
    }
    if (!labels) {
        rt__fail(RING_ERR_INVALID_ARG, "rt_softmax_xent: labels is NULL");
        rt__op_failed();
        return NULL;
    }
    size_t m = logits->shape[0], c = logits->shape[1];
    for (size_t i = 0; i < m; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= c) {
            rt__fail(RING_ERR_INVALID_ARG, "rt_softmax_xent: label %d of row %zu is not in [0, %zu)", (int)labels[i], i, c);
            rt__op_failed();
            return NULL;
        }
    rt_tensor *out = node(g, 1, 1, 1, logits, NULL, xent_backward);
    if (!out) return NULL;
    /* The probabilities are kept for backward, followed by a copy of the labels. */
    float *prob = rt_graph_alloc(g, m * c * sizeof(float) + m * sizeof(int32_t));
    if (!prob) {
        rt__op_failed();
        return NULL;
    }
    int32_t *lab = (int32_t *)(prob + m * c);
    memcpy(lab, labels, m * sizeof *lab);
    out->aux = prob;
    double loss = 0;
    size_t right = 0;
    for (size_t i = 0; i < m; i++) {
        const float *z = logits->data + i * c;
        size_t arg = 0;
        for (size_t j = 1; j < c; j++)
            if (z[j] > z[arg]) arg = j;
        /* Shift by the largest logit so that exp cannot overflow. */
        double zmax = z[arg], den = 0;
        for (size_t j = 0; j < c; j++) den += exp((double)z[j] - zmax);
        for (size_t j = 0; j < c; j++) prob[i * c + j] = (float)(exp((double)z[j] - zmax) / den);
        loss += log(den) - ((double)z[lab[i]] - zmax);
        right += arg == (size_t)lab[i];
    }
    out->data[0] = (float)(loss / (double)m);
    if (correct) *correct = right;
    return out;
}
