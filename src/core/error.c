/*
 * Result codes, names, and the error-message plumbing behind ring_comm_last_error().
 * Messages are formatted once, where the failure is understood (which peer, which address,
 * which call), so that the caller never has to guess from a bare code.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "watch.h"
#include "log.h"

const char *ring_strerror(ring_result_t r)
{
    switch (r) {
#define RING_X_STR(name, value, desc)                                                              \
    case name: return desc;
        RING_RESULT_LIST(RING_X_STR)
#undef RING_X_STR
    }
    return "unknown result code";
}

const char *ring_result_name(ring_result_t r)
{
    switch (r) {
#define RING_X_NAME(name, value, desc)                                                             \
    case name: return #name;
        RING_RESULT_LIST(RING_X_NAME)
#undef RING_X_NAME
    }
    return "RING_ERR_UNKNOWN";
}

int ring_version(void) { return RING_VERSION_CODE; }

size_t ring_dtype_size(ring_dtype_t d)
{
    switch (d) {
    case RING_INT8: case RING_UINT8: return 1;
    case RING_FLOAT16: case RING_BFLOAT16: return 2;
    case RING_INT32: case RING_UINT32: case RING_FLOAT32: return 4;
    case RING_INT64: case RING_UINT64: case RING_FLOAT64: return 8;
    default: return 0;
    }
}

const char *ring__dtype_name(ring_dtype_t d)
{
    static const char *const names[] = {"int8",  "uint8",  "int32",    "uint32",  "int64",
                                        "uint64", "float16", "bfloat16", "float32", "float64"};
    return (unsigned)d < RING_DTYPE_COUNT ? names[d] : "invalid-dtype";
}

const char *ring__op_name(ring_op_t o)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)o < RING_OP_COUNT ? names[o] : "invalid-op";
}

const char *ring__coll_name(ring__coll_t c)
{
    switch (c) {
    case RING__COLL_ALLREDUCE: return "allreduce";
    case RING__COLL_REDUCE_SCATTER: return "reduce_scatter";
    case RING__COLL_ALLGATHER: return "allgather";
    case RING__COLL_BROADCAST: return "broadcast";
    case RING__COLL_BARRIER: return "barrier";
    }
    return "invalid-collective";
}

const char *ring__call_name(ring__coll_t c, int async)
{
    if (!async) return ring__coll_name(c);
    switch (c) {
    case RING__COLL_ALLREDUCE: return "allreduce_async";
    case RING__COLL_REDUCE_SCATTER: return "reduce_scatter_async";
    case RING__COLL_ALLGATHER: return "allgather_async";
    case RING__COLL_BROADCAST: return "broadcast_async";
    case RING__COLL_BARRIER: return "barrier_async";
    }
    return "invalid-collective";
}

static _Thread_local char tls_err[RING__ERRMSG_MAX];

char *ring__tls_errbuf(void) { return tls_err; }

/* The collective this thread runs (run_one), and the last error it set on its communicator:
 * another thread's call on the same communicator (a refused argument, say) may overwrite
 * comm->errmsg before the collective's failure is taken up and sent to the other ranks. */
static _Thread_local const ring_comm_t *op_comm;
static _Thread_local char op_err[RING__ERRMSG_MAX];

void ring__op_begin(const ring_comm_t *comm)
{
    op_comm = comm;
    op_err[0] = '\0';
}

void ring__op_end(void) { op_comm = NULL; }

void ring__op_error(ring_comm_t *comm, char *out, size_t len)
{
    if (comm == op_comm && op_err[0]) {
        snprintf(out, len, "%s", op_err);
        return;
    }
    pthread_mutex_lock(&comm->err_mu);
    snprintf(out, len, "%s", comm->errmsg);
    pthread_mutex_unlock(&comm->err_mu);
}

void ring__errmsg_put(ring_comm_t *comm, const char *text)
{
    pthread_mutex_lock(&comm->err_mu);
    snprintf(comm->errmsg, sizeof comm->errmsg, "%s", text);
    pthread_mutex_unlock(&comm->err_mu);
    if (comm == op_comm) snprintf(op_err, sizeof op_err, "%s", text);
}

static ring_result_t vset(ring_comm_t *comm, ring_result_t code, int errnum, const char *fmt,
                          va_list ap)
{
    char buf[RING__ERRMSG_MAX];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) n = 0;
    if (errnum && (size_t)n < sizeof buf) {
        char eb[128];
        /* GNU strerror_r returns the message pointer (may not use eb). */
        const char *es = strerror_r(errnum, eb, sizeof eb);
        snprintf(buf + n, sizeof buf - (size_t)n, ": %s (errno %d)", es, errnum);
    }
    if (comm) {
        ring__errmsg_put(comm, buf);
        RING_LOG(RING_LOG_WARN, RING_SUB_ALL, comm->rank, "%s: %s", ring_result_name(code), buf);
    } else {
        memcpy(tls_err, buf, sizeof buf);
        RING_LOG(RING_LOG_WARN, RING_SUB_ALL, -1, "%s: %s", ring_result_name(code), buf);
    }
    return code;
}

ring_result_t ring__seterr(ring_comm_t *comm, ring_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(comm, code, 0, fmt, ap);
    va_end(ap);
    return code;
}

ring_result_t ring__seterr_errno(ring_comm_t *comm, ring_result_t code, int errnum,
                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(comm, code, errnum, fmt, ap);
    va_end(ap);
    return code;
}

void ring__comm_fail(ring_comm_t *comm, ring_result_t code, const char *text)
{
    if (!comm || code == RING_OK) return;
    char msg[RING__ERRMSG_MAX];
    pthread_mutex_lock(&comm->err_mu);
    int expected = RING_OK;
    int first = atomic_compare_exchange_strong(&comm->fail_code, &expected, (int)code);
    if (first) {
        snprintf(comm->fail_msg, sizeof comm->fail_msg, "%s", text ? text : comm->errmsg);
        memcpy(msg, comm->fail_msg, sizeof msg);
    }
    pthread_mutex_unlock(&comm->err_mu);
    /* This rank failed first: the others must not wait for it until their timeout. */
    if (first) ring__watch_notify(comm, code, msg);
}

ring_result_t ring__failed_result(ring_comm_t *comm, const char *what)
{
    int fc = atomic_load(&comm->fail_code);
    if (fc == RING_OK) return RING_OK;
    /* On rank 0 the failure may still be on its way to the other ranks (watch.c, fail_relayed):
     * a program that exits on this error must not end the process before it is. */
    if (comm->rank == 0) ring__watch_relay_wait(comm);
    char buf[RING__ERRMSG_MAX];
    pthread_mutex_lock(&comm->err_mu);
    snprintf(buf, sizeof buf, "%s: communicator failed earlier: %.900s", what, comm->fail_msg);
    pthread_mutex_unlock(&comm->err_mu);
    ring__errmsg_put(comm, buf);
    return (ring_result_t)fc;
}

/* A live communicator's text is rewritten under err_mu by any thread (the progress thread when
 * an _async operation fails): the caller gets a copy taken under the lock, in a buffer of its
 * own thread. Four of them in turn, so that one printf may name the texts of a few
 * communicators; each stays as it was until this thread's fourth call after it. */
#define LAST_COPIES 4
static _Thread_local char last_copy[LAST_COPIES][RING__ERRMSG_MAX];
static _Thread_local unsigned last_next;

const char *ring_comm_last_error(const ring_comm_t *comm)
{
    if (!comm) return tls_err;
    if (!ring__comm_live(comm)) return ring__not_live_text(comm);
    char *out = last_copy[last_next++ % LAST_COPIES];
    ring_comm_t *c = (ring_comm_t *)comm; /* the lock only: the text is not changed */
    pthread_mutex_lock(&c->err_mu);
    memcpy(out, c->errmsg, RING__ERRMSG_MAX);
    pthread_mutex_unlock(&c->err_mu);
    return out;
}

int64_t ring__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
