/*
 * The topology backend for builds without hwloc (-Dhwloc=disabled, or libhwloc-dev missing):
 * the machine is "unknown", so plans bind nothing and place nothing; a topology file cannot be
 * read and says why, rather than being ignored.
 */
#include <errno.h>
#include <stdio.h>

#include "topo_hw.h"

ring_result_t ring__topo_hw_load(ring_comm_t *comm, const char *path, const char *label, ring__topo_t *t)
{
    if (path)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED,
                            "%s: this build has no hwloc (rebuild with libhwloc-dev installed and -Dhwloc=auto or enabled)",
                            label);
    t->have_hwloc = 0;
    snprintf(t->source, sizeof t->source, "this machine");
    snprintf(t->backend, sizeof t->backend, "none");
    return RING_OK;
}

void ring__topo_hw_free(ring__topo_t *t) { (void)t; }

int ring__topo_hw_cpubind(const ring__topo_t *t, const ring__cpumask_t *cpus, const pthread_t *thread)
{
    (void)t, (void)cpus, (void)thread;
    return ENOSYS;
}

int ring__topo_hw_membind(const ring__topo_t *t, void *p, size_t len, int os_node)
{
    (void)t, (void)p, (void)len, (void)os_node;
    return ENOSYS;
}
