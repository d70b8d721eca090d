/*
 * The smallest complete ringcomm program: join the job described by the environment, sum a
 * vector across all ranks, check the sum, leave.
 *
 *   ringrun -n 4 ./allreduce
 *   mpirun -np 4 -x RING_ROOT=127.0.0.1:29500 ./allreduce   (Open MPI only starts the ranks)
 *
 * Build against an installed ringcomm:
 *   cc allreduce.c $(pkg-config --cflags --libs ringcomm) -o allreduce
 */
#include <stdio.h>
#include <stdlib.h>

#include <ringcomm.h>

#define COUNT 4096

int main(void)
{
    ring_comm_t *comm = NULL;
    ring_result_t rc = ring_comm_init_env(&comm);
    if (rc != RING_OK) {
        /* A failed init may still hand back a communicator whose last error has the detail;
         * without one the detail is kept per thread under NULL. */
        fprintf(stderr, "allreduce: init failed: %s: %s\n", ring_strerror(rc), ring_comm_last_error(comm));
        ring_comm_destroy(comm);
        return 1;
    }
    int rank = ring_comm_rank(comm), nranks = ring_comm_nranks(comm);

    float *buf = malloc(COUNT * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "allreduce: out of memory\n");
        ring_comm_destroy(comm);
        return 1;
    }
    /* Small integers keep the float sum exact, so the check can compare with ==. */
    for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1 + i % 7);

    rc = ring_allreduce(comm, buf, buf, COUNT, RING_FLOAT32, RING_SUM);
    if (rc != RING_OK) {
        fprintf(stderr, "allreduce: rank %d: ring_allreduce failed: %s: %s\n", rank, ring_strerror(rc),
                ring_comm_last_error(comm));
        free(buf);
        ring_comm_destroy(comm);
        return 1;
    }

    int bad = 0;
    for (int i = 0; i < COUNT; i++) {
        float want = (float)(nranks * (nranks + 1) / 2 + nranks * (i % 7));
        if (buf[i] != want) {
            if (bad++ < 5) fprintf(stderr, "allreduce: rank %d: element %d is %g, expected %g\n", rank, i, buf[i], want);
        }
    }
    free(buf);
    rc = ring_comm_destroy(comm);
    if (rc != RING_OK) {
        fprintf(stderr, "allreduce: rank %d: ring_comm_destroy failed: %s\n", rank, ring_strerror(rc));
        return 1;
    }
    if (bad) {
        fprintf(stderr, "allreduce: rank %d: %d wrong elements\n", rank, bad);
        return 1;
    }
    printf("allreduce: rank %d of %d: %d floats summed correctly\n", rank, nranks, COUNT);
    return 0;
}
