/*
 * The part of the topology module that talks to hwloc, behind four calls, so that topo.c (the
 * decisions, the ring order, allocation) is the same whether hwloc is built in or not:
 * topo_hwloc.c implements them with hwloc, topo_nohwloc.c for builds without it.
 */
#ifndef RING_TOPO_HW_H
#define RING_TOPO_HW_H

#include "topo.h"

/* Fill a zeroed t from the machine (path NULL) or an hwloc XML file, named in errors as `label`
 * ("RING_TOPO_FILE=x.xml", "topology file x.xml"); t->numa and t->devs are malloc'ed
 * (ring__topo_free releases them, then calls ring__topo_hw_free). */
ring_result_t ring__topo_hw_load(ring_comm_t *comm, const char *path, const char *label, ring__topo_t *t);
void ring__topo_hw_free(ring__topo_t *t);
/* Bind a thread (NULL: the calling one). 0, or an errno value. */
int ring__topo_hw_cpubind(const ring__topo_t *t, const ring__cpumask_t *cpus, const pthread_t *thread);
/* Prefer NUMA node os_node for the pages of [p, p+len) not yet touched. 0, or an errno value. */
int ring__topo_hw_membind(const ring__topo_t *t, void *p, size_t len, int os_node);

#endif
