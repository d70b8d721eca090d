/*
 * The hwloc side of the topology module (topo_hw.h): read the machine or an XML file with PCI
 * devices, turn it into the plain summary that the decisions work on, and apply a plan's
 * thread binding and memory placement.
 */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_hw.h"

#if HWLOC_API_VERSION < 0x00020000
#error "ringcomm needs hwloc 2.x or later"
#endif

struct ring__topo_hw {
    hwloc_topology_t topo;
};

/* hwloc 3 made the OS device type a bit set (a device may be GPU and coprocessor at once). */
static int osdev_is(hwloc_obj_t o, unsigned type)
{
#if HWLOC_API_VERSION >= 0x00030000
    return (o->attr->osdev.types & type) != 0;
#else
    return o->attr->osdev.type == (hwloc_obj_osdev_type_t)type;
#endif
}

/* hwloc bitmap -> our mask; -1 if a CPU lies beyond RING__TOPO_MAX_CPUS. */
static int to_mask(hwloc_const_bitmap_t b, ring__cpumask_t *m)
{
    ring__cpumask_zero(m);
    if (hwloc_bitmap_weight(b) < 0) return -1; /* infinite */
    int i;
    hwloc_bitmap_foreach_begin(i, b)
    {
        if (i >= RING__TOPO_MAX_CPUS) return -1;
        ring__cpumask_set(m, i);
    }
    hwloc_bitmap_foreach_end();
    return 0;
}

static int package_of(hwloc_topology_t topo, hwloc_obj_t o)
{
    if (o->type == HWLOC_OBJ_PACKAGE) return (int)o->logical_index;
    hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
    return p ? (int)p->logical_index : -1;
}

/* Fill a device's locality (CPUs, NUMA node, package) and its PCI bridges from the PCI device
 * it sits on (pci may be NULL for a device hwloc found outside PCI). */
static ring_result_t fill_dev(ring_comm_t *comm, const ring__topo_t *t, hwloc_topology_t topo, hwloc_obj_t obj,
                              hwloc_obj_t pci, ring__topo_dev_t *d)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
    d->numa = -1;
    d->package = -1;
    if (anc) {
        if (to_mask(anc->cpuset, &d->cpus) != 0)
            return ring__seterr(comm, RING_ERR_UNSUPPORTED, "topology: CPU numbers beyond %d are not supported",
                                RING__TOPO_MAX_CPUS - 1);
        d->package = package_of(topo, anc);
        /* The one kept node under it (a memory-only node beside it is not one). */
        int found = 0;
        if (anc->nodeset)
            for (int i = 0; i < t->nnuma; i++)
                if (hwloc_bitmap_isset(anc->nodeset, (unsigned)t->numa[i].os_index)) d->numa = i, found++;
        if (found != 1) d->numa = -1;
    }
    if (pci) {
        struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
        snprintf(d->busid, sizeof d->busid, "%04x:%02x:%02x.%x", (unsigned)a->domain, (unsigned)a->bus,
                 (unsigned)a->dev, (unsigned)a->func);
        d->vendor = a->vendor_id;
        d->device = a->device_id;
        d->pci_class = a->class_id;
        for (hwloc_obj_t p = pci->parent; p && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
            if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) d->hostbridge = p->gp_index;
            else if (d->nbridges < RING__TOPO_MAX_BRIDGES) d->bridges[d->nbridges++] = p->gp_index;
        }
    }
    return RING_OK;
}

static int by_busid(const void *x, const void *y)
{
    const ring__topo_dev_t *a = x, *b = y;
    int c = strcmp(a->busid, b->busid);
    if (!c) c = (int)a->kind - (int)b->kind;
    return c ? c : strcmp(a->name, b->name);
}

static ring_result_t summarise(ring_comm_t *comm, hwloc_topology_t topo, ring__topo_t *t)
{
    ring_result_t rc = RING_OK;
    if (to_mask(hwloc_topology_get_allowed_cpuset(topo), &t->cpus) != 0)
        return ring__seterr(comm, RING_ERR_UNSUPPORTED, "topology: CPU numbers beyond %d are not supported",
                            RING__TOPO_MAX_CPUS - 1);
    t->npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    t->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);

    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    t->numa = calloc((size_t)(nnuma > 0 ? nnuma : 1), sizeof *t->numa);
    if (!t->numa) return ring__seterr(comm, RING_ERR_NOMEM, "topology: out of memory");
    for (int i = 0; i < nnuma; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        ring__topo_numa_t *nd = &t->numa[t->nnuma];
        nd->os_index = (int)o->os_index;
        nd->bytes = o->attr->numanode.local_memory;
        /* Nodes without CPUs (HBM, CXL memory) are no place for a progress thread's buffers. */
        if (to_mask(o->cpuset, &nd->cpus) != 0)
            return ring__seterr(comm, RING_ERR_UNSUPPORTED, "topology: CPU numbers beyond %d are not supported",
                                RING__TOPO_MAX_CPUS - 1);
        ring__cpumask_and(&nd->cpus, &nd->cpus, &t->cpus);
        if (ring__cpumask_empty(&nd->cpus)) continue;
        /* hwloc hangs a node without CPUs of its own under the package (or machine) it is
         * attached to and gives it that object's CPUs: it then has the same CPUs as the DRAM
         * node there. Keep one node per set of CPUs: the one hwloc gives no subtype (HBM,
         * MCDRAM, SPM and CXL memory have one), else the first. */
        int same = -1;
        for (int k = 0; k < t->nnuma && same < 0; k++)
            if (ring__cpumask_equal(&t->numa[k].cpus, &nd->cpus)) same = k;
        if (same >= 0) {
            if (!o->subtype && t->numa[same].special) {
                t->numa[same].os_index = nd->os_index;
                t->numa[same].bytes = nd->bytes;
                t->numa[same].special = 0;
            }
            continue; /* nd is scratch: the next node overwrites it */
        }
        nd->special = o->subtype != NULL;
        nd->package = o->parent ? package_of(topo, o->parent) : -1;
        t->nnuma++;
    }
    /* A node that hwloc could not place (CXL expanders, memory without HMAT initiators) hangs
     * under the machine with every CPU: its CPUs are not its own but wider than another
     * node's. Kept, it made every device's node ambiguous (so no buffer was placed) and took
     * ranks' buffers when they were shared out over the nodes. */
    uint8_t *wider = calloc((size_t)(t->nnuma > 0 ? t->nnuma : 1), 1);
    if (!wider) return ring__seterr(comm, RING_ERR_NOMEM, "topology: out of memory");
    int kept = 0;
    for (int k = 0; k < t->nnuma; k++)
        for (int j = 0; j < t->nnuma && !wider[k]; j++)
            wider[k] = j != k && ring__cpumask_subset(&t->numa[j].cpus, &t->numa[k].cpus) &&
                       !ring__cpumask_equal(&t->numa[j].cpus, &t->numa[k].cpus);
    for (int k = 0; k < t->nnuma; k++)
        if (!wider[k]) t->numa[kept++] = t->numa[k];
    t->nnuma = kept;
    free(wider);

    int cap = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o));) cap++;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o));) cap++;
    t->devs = calloc((size_t)(cap > 0 ? cap : 1), sizeof *t->devs);
    if (!t->devs) return ring__seterr(comm, RING_ERR_NOMEM, "topology: out of memory");

    /* Network interfaces and HCAs are OS devices (what the transport names); GPUs are PCI
     * devices of class 0x03xx, since a CUDA bus id names the PCI function. */
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o));) {
        int net = osdev_is(o, HWLOC_OBJ_OSDEV_NETWORK), hca = osdev_is(o, HWLOC_OBJ_OSDEV_OPENFABRICS);
        if ((!net && !hca) || !o->name) continue;
        ring__topo_dev_t *d = &t->devs[t->ndevs];
        d->kind = hca ? RING__TOPO_HCA : RING__TOPO_NET;
        snprintf(d->name, sizeof d->name, "%s", o->name);
        hwloc_obj_t pci = o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE ? o->parent : NULL;
        RING_CHECK(fill_dev(comm, t, topo, o, pci, d));
        t->ndevs++;
    }
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o));) {
        if ((o->attr->pcidev.class_id >> 8) != 0x03) continue;
        ring__topo_dev_t *d = &t->devs[t->ndevs];
        d->kind = RING__TOPO_GPU;
        for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
            if (c->type == HWLOC_OBJ_OS_DEVICE && c->name) {
                snprintf(d->name, sizeof d->name, "%s", c->name);
                break;
            }
        RING_CHECK(fill_dev(comm, t, topo, o, o, d));
        t->ndevs++;
    }
    qsort(t->devs, (size_t)t->ndevs, sizeof *t->devs, by_busid);
fail:
    return rc;
}

ring_result_t ring__topo_hw_load(ring_comm_t *comm, const char *path, const char *label, ring__topo_t *t)
{
    ring_result_t rc = RING_OK;
    t->have_hwloc = 1;
    unsigned v = hwloc_get_api_version();
    snprintf(t->backend, sizeof t->backend, "hwloc, API %u.%u", v >> 16, (v >> 8) & 0xff);
    snprintf(t->source, sizeof t->source, "%s", path ? path : "this machine");
    t->from_file = path != NULL;
    t->hw = calloc(1, sizeof *t->hw);
    if (!t->hw) return ring__seterr(comm, RING_ERR_NOMEM, "topology: out of memory");
    if (hwloc_topology_init(&t->hw->topo) != 0) {
        free(t->hw);
        t->hw = NULL;
        return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "topology: hwloc_topology_init");
    }
    hwloc_topology_t topo = t->hw->topo;
    /* GPUs, NICs and HCAs, without every PCI bridge and storage controller. GPUs are matched
     * by PCI bus id, so the vendor plugins stay out: hwloc's CUDA and NVML discovery would
     * initialise the CUDA runtime inside init, and OpenCL and GL cost time for names only. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if HWLOC_API_VERSION >= 0x00020100
    static const char *const skip[] = {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
#endif
    if (path && hwloc_topology_set_xml(topo, path) != 0) {
        rc = ring__seterr_errno(comm, RING_ERR_INVALID_ARG, errno, "%s: hwloc cannot read it", label);
        goto fail;
    }
    if (hwloc_topology_load(topo) != 0) {
        int e = errno;
        if (path)
            rc = ring__seterr_errno(comm, RING_ERR_INVALID_ARG, e, "%s: not an hwloc topology that hwloc %u.x can load",
                                    label, v >> 16);
        else
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, e, "topology: hwloc cannot read this machine");
        goto fail;
    }
    RING_CHECK(summarise(comm, topo, t));
    return RING_OK;
fail:
    /* ring__topo_free (the caller's cleanup) releases t->hw and the arrays. */
    return rc;
}

void ring__topo_hw_free(ring__topo_t *t)
{
    if (!t->hw) return;
    hwloc_topology_destroy(t->hw->topo);
    free(t->hw);
    t->hw = NULL;
}

int ring__topo_hw_cpubind(const ring__topo_t *t, const ring__cpumask_t *cpus, const pthread_t *thread)
{
    if (!t->hw) return ENOSYS;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set) return ENOMEM;
    for (int c = 0; c < RING__TOPO_MAX_CPUS; c++)
        if (ring__cpumask_isset(cpus, c)) hwloc_bitmap_set(set, (unsigned)c);
    int rc = thread ? hwloc_set_thread_cpubind(t->hw->topo, *thread, set, 0)
                    : hwloc_set_cpubind(t->hw->topo, set, HWLOC_CPUBIND_THREAD);
    int e = rc ? (errno ? errno : EINVAL) : 0;
    hwloc_bitmap_free(set);
    return e;
}

int ring__topo_hw_membind(const ring__topo_t *t, void *p, size_t len, int os_node)
{
    if (!t->hw) return ENOSYS;
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    if (!nodes) return ENOMEM;
    hwloc_bitmap_set(nodes, (unsigned)os_node);
    /* BIND without STRICT is Linux's "preferred" policy: when the node is full the pages go
     * elsewhere instead of the process being killed. */
    int rc = hwloc_set_area_membind(t->hw->topo, p, len, nodes, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    int e = rc ? (errno ? errno : EINVAL) : 0;
    hwloc_bitmap_free(nodes);
    return e;
}
