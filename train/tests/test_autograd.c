/*
 * test_autograd: every op against an independent float64 reference. For each case the test
 * builds L = sum(op(inputs) * W) with a fixed random W (so that every output element gets a
 * different upstream gradient), runs rt_backward, and compares
 *   - the op's float32 output with the float64 reference forward, and
 *   - every input gradient with the central finite difference (L(x+h) - L(x-h)) / 2h of the
 *     float64 reference, h = 1e-6, which is accurate to about 1e-9.
 * Then the autograd rules: += accumulation over consumers and over backward calls, zero_grad,
 * hooks firing once with the final gradient, and errors that keep the first message.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

#define MAXIN 3
#define MAXN 64

struct op_case;
typedef rt_tensor *(*build_fn)(rt_graph *g, rt_tensor **in, const struct op_case *c);
typedef void (*ref_fn)(const struct op_case *c, double *const *in, double *out);

struct op_case {
    const char *name;
    int nin;
    int ndim[MAXIN];
    size_t d0[MAXIN], d1[MAXIN];
    int grad[MAXIN];
    build_fn build;
    ref_fn ref;
    size_t nout;
    double away_from_zero; /* inputs keep |x| at least this (kinks) */
    int32_t labels[8];
    float scalar;
};

static size_t numel(const struct op_case *c, int i)
{
    return c->d0[i] * (c->ndim[i] == 2 ? c->d1[i] : 1);
}

/* L = sum_i W_i y_i in double. */
static double ref_loss(const struct op_case *c, double *const *in, const double *w)
{
    double y[MAXN];
    c->ref(c, in, y);
    double l = 0;
    for (size_t i = 0; i < c->nout; i++) l += w[i] * y[i];
    return l;
}

static void run_case(const struct op_case *c)
{
    rt_rng rng;
    rt_rng_seed(&rng, 2024);
    rt_tensor *in[MAXIN] = {0};
    double *din[MAXIN] = {0};
    for (int i = 0; i < c->nin; i++) {
        in[i] = rt_tensor_new(c->ndim[i], c->d0[i], c->d1[i], c->grad[i]);
        cr_assert(in[i], "%s: %s", c->name, rt_last_error());
        din[i] = malloc(numel(c, i) * sizeof(double));
        for (size_t k = 0; k < numel(c, i); k++) {
            double v = 2.0 * rt_rng_uniform(&rng) - 1.0;
            if (fabs(v) < c->away_from_zero) v = v < 0 ? v - c->away_from_zero : v + c->away_from_zero;
            in[i]->data[k] = (float)v;
            din[i][k] = in[i]->data[k]; /* the reference sees exactly the float inputs */
        }
    }
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    rt_tensor *y = c->build(g, in, c);
    cr_assert(y, "%s: forward failed: %s", c->name, rt_last_error());
    cr_assert_eq(y->size, c->nout, "%s: output has %zu elements, expected %zu", c->name, y->size, c->nout);
    rt_tensor *w = rt_graph_tensor(g, y->ndim, y->shape[0], y->shape[1]);
    double dw[MAXN];
    for (size_t k = 0; k < y->size; k++) {
        w->data[k] = (float)(0.5 + rt_rng_uniform(&rng));
        dw[k] = w->data[k];
    }
    rt_tensor *loss = rt_sum(g, rt_mul(g, y, w));
    cr_assert_eq(rt_backward(g, loss), RING_OK, "%s: %s", c->name, rt_last_error());

    double yref[MAXN];
    c->ref(c, din, yref);
    for (size_t k = 0; k < c->nout; k++)
        cr_expect(fabs(y->data[k] - yref[k]) <= 1e-5 * (1 + fabs(yref[k])), "%s: output %zu is %.9g, reference %.9g",
                  c->name, k, (double)y->data[k], yref[k]);

    const double h = 1e-6;
    for (int i = 0; i < c->nin; i++) {
        if (!c->grad[i]) {
            cr_expect_null(in[i]->grad, "%s: input %d needs no gradient", c->name, i);
            continue;
        }
        for (size_t k = 0; k < numel(c, i); k++) {
            double keep = din[i][k];
            din[i][k] = keep + h;
            double lp = ref_loss(c, din, dw);
            din[i][k] = keep - h;
            double lm = ref_loss(c, din, dw);
            din[i][k] = keep;
            double fd = (lp - lm) / (2 * h), got = in[i]->grad[k];
            cr_expect(fabs(got - fd) <= 1e-4 * (1 + fabs(fd)), "%s: d/d input%d[%zu] = %.9g, finite difference %.9g",
                      c->name, i, k, got, fd);
        }
    }
    rt_graph_destroy(g);
    for (int i = 0; i < c->nin; i++) {
        rt_tensor_free(in[i]);
        free(din[i]);
    }
}

/* ---------- references ---------- */

static void ref_matmul(const struct op_case *c, double *const *in, double *out)
{
    size_t m = c->d0[0], k = c->d1[0], n = c->d1[1];
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t p = 0; p < k; p++) s += in[0][i * k + p] * in[1][p * n + j];
            out[i * n + j] = s;
        }
}

/* b's element for a's element i under the broadcasting rules of rt.h. */
static double bval(const struct op_case *c, const double *b, size_t i)
{
    size_t nb = numel(c, 1);
    if (nb == numel(c, 0)) return b[i];
    if (nb == 1) return b[0];
    return b[i % c->d1[0]];
}

static void ref_add(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = in[0][i] + bval(c, in[1], i);
}

static void ref_mul(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = in[0][i] * bval(c, in[1], i);
}

static void ref_square(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = in[0][i] * in[0][i];
}

static void ref_scale(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = (double)c->scalar * in[0][i];
}

static void ref_relu(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = in[0][i] > 0 ? in[0][i] : 0;
}

static void ref_tanh(const struct op_case *c, double *const *in, double *out)
{
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = tanh(in[0][i]);
}

static void ref_sum(const struct op_case *c, double *const *in, double *out)
{
    out[0] = 0;
    for (size_t i = 0; i < numel(c, 0); i++) out[0] += in[0][i];
}

static void ref_mean(const struct op_case *c, double *const *in, double *out)
{
    ref_sum(c, in, out);
    out[0] /= (double)numel(c, 0);
}

static void ref_mse(const struct op_case *c, double *const *in, double *out)
{
    out[0] = 0;
    for (size_t i = 0; i < numel(c, 0); i++) out[0] += (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]);
    out[0] /= (double)numel(c, 0);
}

static void ref_xent(const struct op_case *c, double *const *in, double *out)
{
    size_t m = c->d0[0], k = c->d1[0];
    out[0] = 0;
    for (size_t i = 0; i < m; i++) {
        double den = 0;
        for (size_t j = 0; j < k; j++) den += exp(in[0][i * k + j]);
        out[0] -= log(exp(in[0][i * k + (size_t)c->labels[i]]) / den);
    }
    out[0] /= (double)m;
}

static void ref_shared(const struct op_case *c, double *const *in, double *out)
{
    /* y = tanh(x) * x + x: three consumers of x. */
    for (size_t i = 0; i < numel(c, 0); i++) out[i] = tanh(in[0][i]) * in[0][i] + in[0][i];
}

static void ref_layer(const struct op_case *c, double *const *in, double *out)
{
    /* relu(x w + b), x [m,k], w [k,n], b [n] */
    size_t m = c->d0[0], k = c->d1[0], n = c->d1[1];
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double s = in[2][j];
            for (size_t p = 0; p < k; p++) s += in[0][i * k + p] * in[1][p * n + j];
            out[i * n + j] = s > 0 ? s : 0;
        }
}

/* ---------- builders ---------- */

static rt_tensor *b_matmul(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_matmul(g, in[0], in[1]);
}
static rt_tensor *b_add(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_add(g, in[0], in[1]);
}
static rt_tensor *b_mul(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_mul(g, in[0], in[1]);
}
static rt_tensor *b_square(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_mul(g, in[0], in[0]);
}
static rt_tensor *b_scale(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    return rt_scale(g, in[0], c->scalar);
}
static rt_tensor *b_relu(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_relu(g, in[0]);
}
static rt_tensor *b_tanh(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_tanh(g, in[0]);
}
static rt_tensor *b_sum(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_sum(g, in[0]);
}
static rt_tensor *b_mean(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_mean(g, in[0]);
}
static rt_tensor *b_mse(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_mse_loss(g, in[0], in[1]);
}
static rt_tensor *b_xent(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    return rt_softmax_xent(g, in[0], c->labels, NULL);
}
static rt_tensor *b_shared(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    return rt_add(g, rt_mul(g, rt_tanh(g, in[0]), in[0]), in[0]);
}
static rt_tensor *b_layer(rt_graph *g, rt_tensor **in, const struct op_case *c)
{
    (void)c;
    rt_linear l = {in[1], in[2], in[1]->shape[0], in[1]->shape[1]};
    return rt_relu(g, rt_linear_forward(g, &l, in[0]));
}

/* ---------- cases ---------- */

#define IN2(n0, a0, b0, n1, a1, b1) .nin = 2, .ndim = {n0, n1}, .d0 = {a0, a1}, .d1 = {b0, b1}, .grad = {1, 1}
#define IN1(n0, a0, b0) .nin = 1, .ndim = {n0}, .d0 = {a0}, .d1 = {b0}, .grad = {1}

static const struct op_case cases[] = {
    {.name = "matmul 3x4 4x5", IN2(2, 3, 4, 2, 4, 5), .build = b_matmul, .ref = ref_matmul, .nout = 15},
    {.name = "matmul 1x3 3x1", IN2(2, 1, 3, 2, 3, 1), .build = b_matmul, .ref = ref_matmul, .nout = 1},
    {.name = "matmul 4x7 7x2, constant left", .nin = 2, .ndim = {2, 2}, .d0 = {4, 7}, .d1 = {7, 2}, .grad = {0, 1},
     .build = b_matmul, .ref = ref_matmul, .nout = 8},
    {.name = "add same shape", IN2(2, 3, 4, 2, 3, 4), .build = b_add, .ref = ref_add, .nout = 12},
    {.name = "add bias row [n]", IN2(2, 3, 4, 1, 4, 1), .build = b_add, .ref = ref_add, .nout = 12},
    {.name = "add bias row [1,n]", IN2(2, 5, 3, 2, 1, 3), .build = b_add, .ref = ref_add, .nout = 15},
    {.name = "add scalar", IN2(2, 2, 3, 1, 1, 1), .build = b_add, .ref = ref_add, .nout = 6},
    {.name = "add 1-D", IN2(1, 6, 1, 1, 6, 1), .build = b_add, .ref = ref_add, .nout = 6},
    {.name = "mul same shape", IN2(2, 3, 4, 2, 3, 4), .build = b_mul, .ref = ref_mul, .nout = 12},
    {.name = "mul row", IN2(2, 3, 4, 1, 4, 1), .build = b_mul, .ref = ref_mul, .nout = 12},
    {.name = "mul scalar", IN2(1, 5, 1, 1, 1, 1), .build = b_mul, .ref = ref_mul, .nout = 5},
    {.name = "mul x by itself", IN1(2, 3, 3), .build = b_square, .ref = ref_square, .nout = 9},
    {.name = "scale", IN1(2, 2, 5), .build = b_scale, .ref = ref_scale, .nout = 10, .scalar = -1.75f},
    {.name = "relu", IN1(2, 4, 5), .build = b_relu, .ref = ref_relu, .nout = 20, .away_from_zero = 0.05},
    {.name = "tanh", IN1(2, 4, 5), .build = b_tanh, .ref = ref_tanh, .nout = 20},
    {.name = "sum", IN1(2, 3, 7), .build = b_sum, .ref = ref_sum, .nout = 1},
    {.name = "mean", IN1(1, 9, 1), .build = b_mean, .ref = ref_mean, .nout = 1},
    {.name = "mse", IN2(2, 6, 1, 2, 6, 1), .build = b_mse, .ref = ref_mse, .nout = 1},
    {.name = "softmax cross-entropy", IN1(2, 5, 4), .build = b_xent, .ref = ref_xent, .nout = 1,
     .labels = {0, 3, 1, 1, 2}},
    {.name = "x used three times", IN1(2, 3, 4), .build = b_shared, .ref = ref_shared, .nout = 12},
    {.name = "linear layer + relu", .nin = 3, .ndim = {2, 2, 1}, .d0 = {4, 3, 5}, .d1 = {3, 5, 1}, .grad = {1, 1, 1},
     .build = b_layer, .ref = ref_layer, .nout = 20, .away_from_zero = 0.05},
};

#define NCASES (sizeof cases / sizeof cases[0])

ParameterizedTestParameters(autograd, op_against_finite_differences)
{
    static size_t idx[NCASES];
    for (size_t i = 0; i < NCASES; i++) idx[i] = i;
    return cr_make_param_array(size_t, idx, NCASES);
}

ParameterizedTest(size_t *i, autograd, op_against_finite_differences)
{
    run_case(&cases[*i]);
}

/* ---------- autograd rules ---------- */

Test(autograd, gradients_accumulate_over_backwards_until_zeroed)
{
    rt_tensor *x = rt_tensor_new(1, 3, 1, 1);
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    x->data[0] = 1;
    x->data[1] = -2;
    x->data[2] = 0.5f;
    rt_tensor *l = rt_sum(g, rt_mul(g, x, x)); /* d/dx = 2x */
    cr_assert_eq(rt_backward(g, l), RING_OK);
    cr_assert_eq(rt_backward(g, l), RING_OK);
    for (int i = 0; i < 3; i++) cr_expect_float_eq(x->grad[i], 4 * x->data[i], 1e-6, "twice 2x");
    rt_tensor_zero_grad(x);
    cr_assert_eq(rt_backward(g, l), RING_OK);
    for (int i = 0; i < 3; i++) cr_expect_float_eq(x->grad[i], 2 * x->data[i], 1e-6, "2x after zero_grad");
    rt_graph_destroy(g);
    rt_tensor_free(x);
}

struct hook_log {
    int calls;
    float grad_at_call[4];
};

static void hook(rt_tensor *t, void *arg)
{
    struct hook_log *h = arg;
    h->calls++;
    memcpy(h->grad_at_call, t->grad, t->size * sizeof(float));
}

Test(autograd, hook_fires_once_with_the_final_gradient)
{
    /* w feeds two branches; its hook must come after both have added their part. */
    rt_tensor *w = rt_tensor_new(1, 2, 1, 1), *x = rt_tensor_new(1, 2, 1, 0);
    w->data[0] = 0.3f;
    w->data[1] = -0.7f;
    x->data[0] = 2;
    x->data[1] = 3;
    struct hook_log h = {0};
    rt_tensor_set_hook(w, hook, &h);
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    rt_tensor *a = rt_tanh(g, rt_mul(g, w, x)), *b = rt_scale(g, w, 3.0f);
    rt_tensor *l = rt_sum(g, rt_add(g, rt_tanh(g, a), b));
    cr_assert_eq(rt_backward(g, l), RING_OK);
    cr_expect_eq(h.calls, 1);
    for (int i = 0; i < 2; i++) cr_expect_eq(h.grad_at_call[i], w->grad[i], "hook saw a partial gradient");
    rt_graph_destroy(g);
    rt_tensor_free(w);
    rt_tensor_free(x);
}

Test(autograd, graph_reset_reuses_memory_and_results_repeat_bitwise)
{
    size_t sizes[] = {3, 8, 2};
    rt_mlp m;
    cr_assert_eq(rt_mlp_init(&m, sizes, 3, RT_ACT_RELU, 5), RING_OK);
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    float first[2 * 4], again[2 * 4];
    for (int rep = 0; rep < 3; rep++) {
        rt_graph_reset(g);
        rt_tensor *x = rt_graph_tensor(g, 2, 4, 3);
        for (size_t i = 0; i < x->size; i++) x->data[i] = (float)i * 0.1f - 0.5f;
        rt_tensor *y = rt_mlp_forward(g, &m, x);
        cr_assert(y);
        memcpy(rep ? again : first, y->data, sizeof first);
        if (rep) cr_expect(memcmp(first, again, sizeof first) == 0);
    }
    rt_graph_destroy(g);
    rt_mlp_destroy(&m);
}

Test(autograd, errors_keep_the_first_message)
{
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    rt_tensor *a = rt_tensor_new(2, 2, 3, 1), *b = rt_tensor_new(2, 2, 3, 1);
    rt_tensor *bad = rt_matmul(g, a, b);
    cr_expect_null(bad);
    cr_expect(strstr(rt_last_error(), "rt_matmul: shapes [2, 3] and [2, 3]") != NULL, "message: %s", rt_last_error());
    /* NULL flows through the later ops; backward reports the matmul. */
    rt_tensor *l = rt_sum(g, rt_tanh(g, bad));
    cr_expect_null(l);
    cr_expect_eq(rt_backward(g, l), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), "rt_matmul") != NULL, "message: %s", rt_last_error());

    rt_tensor *col = rt_tensor_new(1, 2, 1, 0); /* [2] is not a row of [2, 3] */
    cr_expect_null(rt_add(g, a, col));
    cr_expect(strstr(rt_last_error(), "do not broadcast") != NULL, "message: %s", rt_last_error());
    rt_tensor_free(col);
    int32_t labels[2] = {0, 3};
    cr_expect_null(rt_softmax_xent(g, a, labels, NULL));
    cr_expect(strstr(rt_last_error(), "label 3 of row 1") != NULL, "message: %s", rt_last_error());
    cr_expect_eq(rt_backward(g, a), RING_ERR_INVALID_ARG, "a 6-element loss is refused");
    rt_graph_destroy(g);
    rt_tensor_free(a);
    rt_tensor_free(b);
}
