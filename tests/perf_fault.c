/*
 * perf_fault.c: collectives that misbehave, linked with -Wl,--wrap into a second ring_perf
 * (ring_perf_faulty, tests/meson.build), to show that ring_perf -c 1 catches what a library
 * must not do: write its const send buffer, or past the end of a buffer (tests/perf_output.sh
 * faults). RING_TEST_PERF_FAULT picks the fault, done after the library's own call and only on
 * float data (int8 for the allgather), so ring_perf's other calls (times, #wrong, the probes)
 * run as they should:
 *   send      allreduce: overwrites the send buffer (out of place)
 *   send-rs   reduce_scatter: changes the last element of the send buffer (count * nranks)
 *   past      allreduce: writes one element after the count of the receive buffer
 *   past-ag   allgather: one element after the count * nranks of the receive buffer
 *   past-bc   broadcast: one element after the count of the buffer, on ranks but the root
 *   wrong     allreduce: one wrong element on rank 1 (the output check, as a control)
 * Unset: every call as the library's.
 */
#include <stdlib.h>
#include <string.h>

#include "ringcomm.h"

ring_result_t __real_ring_allreduce(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                    ring_dtype_t dtype, ring_op_t op);
ring_result_t __real_ring_reduce_scatter(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ring_dtype_t dtype, ring_op_t op);
ring_result_t __real_ring_allgather(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ring_dtype_t dtype);
ring_result_t __real_ring_broadcast(ring_comm_t *comm, void *buf, size_t count, ring_dtype_t dtype, int root);

ring_result_t __wrap_ring_allreduce(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                    ring_dtype_t dtype, ring_op_t op);
ring_result_t __wrap_ring_reduce_scatter(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ring_dtype_t dtype, ring_op_t op);
ring_result_t __wrap_ring_allgather(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ring_dtype_t dtype);
ring_result_t __wrap_ring_broadcast(ring_comm_t *comm, void *buf, size_t count, ring_dtype_t dtype, int root);

static int fault(const char *name)
{
    const char *s = getenv("RING_TEST_PERF_FAULT");
    return s && strcmp(s, name) == 0;
}

ring_result_t __wrap_ring_allreduce(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                    ring_dtype_t dtype, ring_op_t op)
{
    ring_result_t rc = __real_ring_allreduce(comm, sendbuf, recvbuf, count, dtype, op);
    if (rc != RING_OK || dtype != RING_FLOAT32 || count == 0) return rc;
    float *r = recvbuf;
    if (fault("send") && sendbuf != recvbuf) memset((void *)sendbuf, 0x7f, count * sizeof(float));
    if (fault("past")) r[count] = 12345.0f;
    if (fault("wrong") && ring_comm_rank(comm) == 1) r[count - 1] += 1;
    return rc;
}

ring_result_t __wrap_ring_reduce_scatter(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ring_dtype_t dtype, ring_op_t op)
{
    ring_result_t rc = __real_ring_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op);
    if (rc != RING_OK || dtype != RING_FLOAT32 || recvcount == 0) return rc;
    /* The last element of the whole send buffer, in another rank's block. */
    if (fault("send-rs")) ((float *)sendbuf)[recvcount * (size_t)ring_comm_nranks(comm) - 1] += 1;
    return rc;
}

ring_result_t __wrap_ring_allgather(ring_comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ring_dtype_t dtype)
{
    ring_result_t rc = __real_ring_allgather(comm, sendbuf, recvbuf, sendcount, dtype);
    if (rc != RING_OK || dtype != RING_INT8 || sendcount == 0) return rc;
    if (fault("past-ag")) ((signed char *)recvbuf)[sendcount * (size_t)ring_comm_nranks(comm)] = 7;
    return rc;
}

ring_result_t __wrap_ring_broadcast(ring_comm_t *comm, void *buf, size_t count, ring_dtype_t dtype, int root)
{
    ring_result_t rc = __real_ring_broadcast(comm, buf, count, dtype, root);
    if (rc != RING_OK || dtype != RING_FLOAT32 || count == 0) return rc;
    if (fault("past-bc") && ring_comm_rank(comm) != root) ((float *)buf)[count] = 1.0f;
    return rc;
}
