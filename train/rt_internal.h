/*
 * rt_internal.h: what the training layer's files share and users do not see: the error
 * buffer, the CHECK/goto-fail macros, the clock.
 */
#ifndef RT_INTERNAL_H
#define RT_INTERNAL_H

#include "rt.h"

#if defined(__GNUC__)
#define RT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RT_PRINTF(f, a)
#endif

/* Sets rt_last_error() and returns rc, so that a failure is one statement. */
ring_result_t rt__fail(ring_result_t rc, const char *fmt, ...) RT_PRINTF(2, 3);
/* For a failed collective: "what: RING_ERR_X: <the communicator's message>". */
ring_result_t rt__fail_comm(ring_result_t rc, const ring_comm_t *comm, const char *fmt, ...) RT_PRINTF(3, 4);

/* Ops mark that they failed, so that rt_backward(NULL) keeps their message. */
void rt__op_failed(void);
int rt__take_op_failed(void);

/* rc must be a ring_result_t in scope and the function must have a fail: label. */
#define RT_CHECK(call)                                                                             \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc != RING_OK) goto fail;                                                              \
    } while (0)

double rt__now(void); /* seconds, monotonic */

#endif /* RT_INTERNAL_H */
