/*
 * tensor.c: leaf tensors, the graph arena that holds everything an op creates, and reverse-mode
 * backward (topological order from the loss, gradients accumulated with +=, a hook on each leaf
 * fired the moment its gradient is final).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define ALIGN 64
#define CHUNK_MIN ((size_t)1 << 20)

struct chunk {
    struct chunk *next;
    size_t cap, used;
    unsigned char *mem; /* cap bytes, ALIGN-aligned */
};

struct rt_graph {
    struct chunk *head, *cur;
    /* Scratch of rt_backward, kept between calls. */
    rt_tensor **order;
    size_t order_cap;
    struct frame {
        rt_tensor *t;
        int next; /* next src to visit */
    } *stack;
    size_t stack_cap;
};

/* Each backward stamps the nodes it visits with a fresh number, so that no per-node flag has to
 * be cleared, and leaves shared by several graphs are seen once per backward. */
static _Atomic uint64_t backward_serial;

rt_tensor *rt_tensor_new(int ndim, size_t d0, size_t d1, int requires_grad)
{
    if (ndim == 1) d1 = 1;
    if ((ndim != 1 && ndim != 2) || d0 == 0 || d1 == 0 || d0 > SIZE_MAX / sizeof(float) / d1) {
        rt__fail(RING_ERR_INVALID_ARG, "rt_tensor_new: bad shape (ndim %d, %zu x %zu)", ndim, d0, d1);
        return NULL;
    }
    rt_tensor *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->size = d0 * d1;
    t->leaf = 1;
    t->requires_grad = requires_grad != 0;
    t->data = calloc(t->size, sizeof(float));
    if (!t->data) goto nomem;
    if (t->requires_grad) {
        t->grad = calloc(t->size, sizeof(float));
        if (!t->grad) goto nomem;
    }
    return t;
nomem:
    rt_tensor_free(t);
    rt__fail(RING_ERR_NOMEM, "rt_tensor_new: out of memory for %zu x %zu floats", d0, d1);
    return NULL;
}

void rt_tensor_free(rt_tensor *t)
{
    if (!t || !t->leaf) return;
    free(t->data);
    free(t->grad);
    free(t);
}

void rt_tensor_zero_grad(rt_tensor *t)
{
    if (t && t->grad) memset(t->grad, 0, t->size * sizeof(float));
}

void rt_tensor_set_hook(rt_tensor *t, rt_grad_hook fn, void *arg)
{
    if (!t) return;
    t->hook = fn;
    t->hook_arg = arg;
}

ring_result_t rt_graph_create(rt_graph **g)
{
    if (!g) return rt__fail(RING_ERR_INVALID_ARG, "rt_graph_create: g is NULL");
    *g = calloc(1, sizeof **g);
    if (!*g) return rt__fail(RING_ERR_NOMEM, "rt_graph_create: out of memory");
    return RING_OK;
}

void rt_graph_reset(rt_graph *g)
{
    if (!g) return;
    for (struct chunk *c = g->head; c; c = c->next) c->used = 0;
    g->cur = g->head;
}

void rt_graph_destroy(rt_graph *g)
{
    if (!g) return;
    struct chunk *c = g->head;
    while (c) {
        struct chunk *next = c->next;
        free(c->mem);
        free(c);
        c = next;
    }
    free(g->order);
    free(g->stack);
    free(g);
}

void *rt_graph_alloc(rt_graph *g, size_t bytes)
{
    if (!g) {
        rt__fail(RING_ERR_INVALID_ARG, "rt_graph_alloc: graph is NULL");
        return NULL;
    }
    if (bytes > SIZE_MAX - ALIGN) goto nomem;
    bytes = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    /* Steps repeat the same allocations, so after the first step a chunk that was too small is
     * skipped the same way every time and no new memory is needed. */
    while (g->cur && g->cur->cap - g->cur->used < bytes) g->cur = g->cur->next;
    if (!g->cur) {
        struct chunk *c = calloc(1, sizeof *c);
        if (!c) goto nomem;
        c->cap = bytes > CHUNK_MIN ? bytes : CHUNK_MIN;
        c->mem = aligned_alloc(ALIGN, c->cap);
        if (!c->mem) {
            free(c);
            goto nomem;
        }
        struct chunk **tail = &g->head;
        while (*tail) tail = &(*tail)->next;
        *tail = c;
        g->cur = c;
    }
    void *p = g->cur->mem + g->cur->used;
    g->cur->used += bytes;
    return p;
nomem:
    rt__fail(RING_ERR_NOMEM, "graph: out of memory for %zu bytes", bytes);
    return NULL;
}

rt_tensor *rt_graph_tensor(rt_graph *g, int ndim, size_t d0, size_t d1)
{
    if (ndim == 1) d1 = 1;
    if ((ndim != 1 && ndim != 2) || d0 == 0 || d1 == 0 || d0 > SIZE_MAX / sizeof(float) / d1) {
        rt__fail(RING_ERR_INVALID_ARG, "rt_graph_tensor: bad shape (ndim %d, %zu x %zu)", ndim, d0, d1);
        return NULL;
    }
    rt_tensor *t = rt_graph_alloc(g, sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->data = rt_graph_alloc(g, d0 * d1 * sizeof(float));
    if (!t->data) return NULL;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->size = d0 * d1;
    return t;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

/* Post-order depth-first walk from the loss over nodes that need a gradient: every node lands
 * after all of its sources, which is a topological order. Iterative, so that deep graphs (long
 * chains of ops) cannot overflow the C stack. */
static ring_result_t topo_sort(rt_graph *g, rt_tensor *loss, uint64_t stamp, size_t *n_out)
{
    size_t n = 0, depth = 0;
    if (!grow((void **)&g->stack, &g->stack_cap, 1, sizeof *g->stack)) goto nomem;
    loss->mark = stamp;
    g->stack[depth++] = (struct frame){loss, 0};
    while (depth) {
        struct frame *f = &g->stack[depth - 1];
        rt_tensor *t = f->t;
        if (f->next < 2) {
            rt_tensor *s = t->src[f->next++];
            if (s && s->requires_grad && s->mark != stamp) {
                s->mark = stamp;
                if (!grow((void **)&g->stack, &g->stack_cap, depth + 1, sizeof *g->stack)) goto nomem;
                g->stack[depth++] = (struct frame){s, 0};
            }
            continue;
        }
        depth--;
        if (!grow((void **)&g->order, &g->order_cap, n + 1, sizeof *g->order)) goto nomem;
        g->order[n++] = t;
    }
    *n_out = n;
    return RING_OK;
nomem:
    return rt__fail(RING_ERR_NOMEM, "rt_backward: out of memory for the topological order");
}

ring_result_t rt_backward(rt_graph *g, rt_tensor *loss)
{
    if (!loss) {
        /* An op before the loss failed and said why; keep that message. */
        if (!rt__take_op_failed()) rt__fail(RING_ERR_INVALID_ARG, "rt_backward: loss is NULL");
        return RING_ERR_INVALID_ARG;
    }
    if (!g) return rt__fail(RING_ERR_INVALID_ARG, "rt_backward: graph is NULL");
    if (loss->size != 1)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_backward: the loss must have one element, not %zu", loss->size);
    if (!loss->requires_grad)
        return rt__fail(RING_ERR_INVALID_ARG, "rt_backward: the loss does not depend on any tensor that requires grad");

    ring_result_t rc;
    uint64_t stamp = atomic_fetch_add(&backward_serial, 1) + 1;
    size_t n = 0;
    RT_CHECK(topo_sort(g, loss, stamp, &n));

    /* Inner nodes start from a zero gradient in every backward; leaves keep theirs (+=). Each
     * edge into a node counts one pending consumer. */
    for (size_t i = 0; i < n; i++) {
        rt_tensor *t = g->order[i];
        t->pending = 0;
        if (!t->leaf) {
            if (!t->grad) {
                t->grad = rt_graph_alloc(g, t->size * sizeof(float));
                if (!t->grad) return RING_ERR_NOMEM;
            }
            memset(t->grad, 0, t->size * sizeof(float));
        }
    }
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            rt_tensor *s = g->order[i]->src[k];
            if (s && s->requires_grad) s->pending++;
        }

    loss->grad[0] += 1.0f;
    if (loss->leaf && loss->hook) loss->hook(loss, loss->hook_arg);
    for (size_t i = n; i-- > 0;) {
        rt_tensor *t = g->order[i];
        if (!t->backward) continue;
        t->backward(t);
        for (int k = 0; k < 2; k++) {
            rt_tensor *s = t->src[k];
            if (s && s->requires_grad && --s->pending == 0 && s->leaf && s->hook) s->hook(s, s->hook_arg);
        }
    }
    return RING_OK;
fail:
    return rc;
}
