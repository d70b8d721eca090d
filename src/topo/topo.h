/*
 * Topology: what the machine looks like (hwloc), where this rank should put its progress thread
 * and its buffers, which NIC or HCA it should use, and the ring order across hosts.
 *
 * The work is split so that every decision can be tested without the machine:
 *  - ring__topo_load() reads the machine (or an hwloc XML file: RING_TOPO_FILE) into a plain
 *    summary (ring__topo_t: NUMA nodes, packages, network devices, GPUs, with their CPU
 *    locality). Only this, binding and allocation touch hwloc.
 *  - ring__topo_plan() is a pure function of that summary and a request (RING_BIND, the CPUs
 *    the launcher left this rank, its GPU, RING_SOCKET_IFNAME / RING_IB_HCA, its place among
 *    the ranks of its host). It returns every decision with the reason for it, as text.
 *  - ring__topo_bind_thread() and ring__topo_alloc() apply a plan.
 *  - ring__topo_ring_order() puts the ranks of each host next to each other in the ring; it
 *    needs only the host identities from the bootstrap and no hwloc.
 * Built without hwloc (-Dhwloc=disabled) the same API works: the summary says so, the plan
 * binds nothing and places nothing, and the ring order is unchanged.
 *
 * Nothing here prints; errors go through ring__seterr. Binding and NUMA placement are
 * optimisations: their functions report what they did as text instead of failing the caller.
 */
#ifndef RING_TOPO_H
#define RING_TOPO_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "internal.h"

/* CPU sets are plain bitmaps of Linux CPU numbers, so plans need no hwloc to be read or tested.
 * 4096 is four times glibc's CPU_SETSIZE; a machine with CPUs numbered beyond it fails load. */
#define RING__TOPO_MAX_CPUS 4096
#define RING__TOPO_MAX_BRIDGES 8

typedef struct ring__cpumask {
    uint64_t w[RING__TOPO_MAX_CPUS / 64];
} ring__cpumask_t;

void ring__cpumask_zero(ring__cpumask_t *m);
void ring__cpumask_set(ring__cpumask_t *m, int cpu);
int ring__cpumask_isset(const ring__cpumask_t *m, int cpu);
int ring__cpumask_count(const ring__cpumask_t *m);
int ring__cpumask_empty(const ring__cpumask_t *m);
int ring__cpumask_equal(const ring__cpumask_t *a, const ring__cpumask_t *b);
int ring__cpumask_subset(const ring__cpumask_t *sub, const ring__cpumask_t *of); /* sub within of */
int ring__cpumask_intersects(const ring__cpumask_t *a, const ring__cpumask_t *b);
void ring__cpumask_and(ring__cpumask_t *dst, const ring__cpumask_t *a, const ring__cpumask_t *b);
/* "0-3,8-11" (as taskset -c and hwloc's list format). 0 on success, -1 on junk or a CPU
 * beyond RING__TOPO_MAX_CPUS. */
int ring__cpumask_parse(const char *s, ring__cpumask_t *m);
/* The list format; an empty set is "none". Truncated with "..." if len is too small. */
const char *ring__cpumask_str(const ring__cpumask_t *m, char *buf, size_t len);
/* The CPUs the calling thread may run on now (sched_getaffinity). 0 on success, -1 otherwise. */
int ring__cpumask_current(ring__cpumask_t *m);
/* Memory (NUMA) nodes of the machine, from the kernel's list of online nodes
 * (/sys/devices/system/node/online: "0", "0-1"), whatever this process may use; 0 where the
 * kernel shows none (built without NUMA, or no sysfs). Without hwloc, so that every build
 * tells the same. ring__numa_count_list: the count of such a list, 0 for junk. */
int ring__numa_nodes_online(void);
int ring__numa_count_list(const char *s);

/* ---- discovery ------------------------------------------------------------------------ */

typedef enum {
    RING__TOPO_NET = 1, /* network interface (hwloc "network" OS device): eth0, ens1f0, ib0 */
    RING__TOPO_HCA,     /* OpenFabrics device (RDMA): mlx5_0 */
    RING__TOPO_GPU,     /* PCI display or 3D controller (class 0x03xx) */
} ring__topo_kind_t;

typedef struct ring__topo_numa {
    int os_index;         /* Linux node number (numactl -m) */
    int package;          /* index in the package list, -1 if the node spans packages */
    uint64_t bytes;       /* local memory, 0 if unknown */
    ring__cpumask_t cpus; /* CPUs local to the node */
    int special;          /* hwloc gave it a subtype (HBM, MCDRAM, SPM, CXL memory...) */
} ring__topo_numa_t;

typedef struct ring__topo_dev {
    ring__topo_kind_t kind;
    char name[32];        /* OS name (eth1, mlx5_0); GPUs: their first OS device (card0, cuda0) or "" */
    char busid[20];       /* PCI bus id "0000:af:00.0", "" if not on PCI */
    unsigned vendor, device, pci_class;
    int numa;             /* index in numa[] of the node it is attached to, -1 if several or unknown */
    int package;          /* index of its package, -1 if several or unknown */
    ring__cpumask_t cpus; /* CPUs local to it (its closest non-I/O ancestor in hwloc) */
    /* PCI bridges above it, nearest first, host bridge excluded (hwloc gp_index): two devices
     * that share one sit behind the same PCIe switch. */
    int nbridges;
    uint64_t bridges[RING__TOPO_MAX_BRIDGES];
    uint64_t hostbridge;  /* hwloc gp_index of its host bridge, 0 if none */
} ring__topo_dev_t;

struct ring__topo_hw; /* hwloc state, private to the file that owns it */

typedef struct ring__topo {
    int have_hwloc;       /* 0: built without hwloc; nothing below is filled */
    int from_file;        /* 1: read from an XML file; its plans are shown, never applied */
    char source[256];     /* "this machine" or the file's path */
    char backend[32];     /* "hwloc, API 2.8" (the library in use), "none" */
    int npackages, ncores, npus;
    ring__cpumask_t cpus; /* every CPU the process may use (hwloc's allowed set) */
    int nnuma;
    ring__topo_numa_t *numa;
    int ndevs;
    ring__topo_dev_t *devs; /* in PCI order: network devices, HCAs and GPUs together */
    struct ring__topo_hw *hw;
} ring__topo_t;

/*
 * Read the topology. xml_path NULL: RING_TOPO_FILE if set, else this machine (with PCI
 * devices). Errors: RING_ERR_INVALID_ARG for a file hwloc cannot load, RING_ERR_UNSUPPORTED
 * for any file in a build without hwloc (and for CPU numbers beyond RING__TOPO_MAX_CPUS),
 * RING_ERR_SYSTEM when hwloc cannot read the machine, RING_ERR_NOMEM. Without hwloc, loading
 * the machine succeeds with have_hwloc = 0. comm may be NULL. Init should treat a failure to
 * read the machine as "no topology" (log it and go on), and a failure to read RING_TOPO_FILE
 * as the user's error. Each call reads anew: init uses ring__topo_get() below.
 */
ring_result_t ring__topo_load(ring_comm_t *comm, const char *xml_path, ring__topo_t **out);
void ring__topo_free(ring__topo_t *t); /* NULL is fine */
/*
 * The process's topology (RING_TOPO_FILE or the machine), loaded by the first call and kept
 * until exit; what init uses. Reading the machine takes tens of milliseconds and leaks about
 * 1 KB inside libpciaccess each time, so a process that creates many communicators must not
 * do it per communicator. Thread-safe; a failed load is retried by the next call. The
 * topology is read-only from then on (plan, bind and alloc only read it).
 */
ring_result_t ring__topo_get(ring_comm_t *comm, const ring__topo_t **out);
const char *ring__topo_kind_name(ring__topo_kind_t k); /* "network", "OpenFabrics", "GPU" */
/* Several lines describing what was found (ringtopo, RING_DEBUG=TRACE). Returns buf. */
const char *ring__topo_describe(const ring__topo_t *t, char *buf, size_t len);

/* ---- decisions ------------------------------------------------------------------------ */

typedef enum { RING__BIND_AUTO = 0, RING__BIND_FORCE, RING__BIND_NONE } ring__bind_mode_t;

/* RING_BIND value -> mode; NULL or "" is auto. -1 for anything else. */
int ring__topo_parse_bind(const char *s);
const char *ring__topo_bind_name(ring__bind_mode_t m);

/* Parse a PCI bus id ("0000:3b:00.0", "3B:00.0", NVML's "00000000:3B:00.0") into the canonical
 * lower-case "dddd:bb:dd.f". 0 on success, -1 on junk. */
int ring__topo_busid_canon(const char *in, char out[20]);

/* NCCL-style device filter as in RING_SOCKET_IFNAME / RING_IB_HCA: comma list of prefixes,
 * "=" first for exact names, "^" first to exclude; an HCA entry may end in ":port". */
int ring__topo_name_match(const char *spec, const char *name);

typedef struct ring__topo_req {
    ring__bind_mode_t bind; /* RING_BIND */
    int bound_known;        /* 1: `bound` holds the CPUs this rank may run on now */
    ring__cpumask_t bound;  /* set by the launcher (srun --cpu-bind, mpirun --bind-to, ringrun) */
    const char *gpu_busid;  /* this rank's GPU (cudaDeviceGetPCIBusId), or NULL */
    const char *nic_spec;   /* RING_SOCKET_IFNAME, or NULL */
    const char *hca_spec;   /* RING_IB_HCA, or NULL */
    int use_hca;            /* the transport is RDMA: choose among HCAs, not interfaces */
    int local_rank, nlocal; /* this rank's index among the ranks of its host, and their number */
    int local_unknown;      /* 1: no launcher said them (0 of 1 stands in) and the job has more ranks */
    int own_mempolicy;      /* 1: the process has a memory policy of its own (numactl --membind,
                             * srun --mem-bind): buffers are not placed over it */
} ring__topo_req_t;

/*
 * Defaults from the environment: RING_BIND (RING_ERR_INVALID_ARG if not auto|force|none),
 * RING_SOCKET_IFNAME, RING_IB_HCA (the strings are getenv's), and the calling thread's CPU
 * affinity when t describes this machine (a file's CPUs are not this machine's, so then the
 * launcher's binding is unknown). local_rank 0 of 1, no GPU, TCP. The caller then fills in
 * what it knows better (nic_spec from ring_config_t, the local rank, the GPU).
 */
ring_result_t ring__topo_req_init(ring_comm_t *comm, const ring__topo_t *t, ring__topo_req_t *req);
/* The request a rank's plan comes from, made the same way wherever a plan is made (comm.c's
 * placement, the verbs transport's HCA): ring__topo_req_init on comm->topo, the local rank
 * from the launcher (*src: its source, or NULL), and the GPU of the calling thread's current
 * CUDA context if any (its bus id written into gpu). */
ring_result_t ring__placement_req(ring_comm_t *comm, ring__topo_req_t *req, char *gpu, size_t gpulen, const char **src);

typedef struct ring__topo_plan {
    int gpu;                /* index in t->devs of the rank's GPU, -1 if none given or not found */
    int nic;                /* index in t->devs of the NIC or HCA to use, -1: none from the topology */
    char nic_name[64];      /* what to hand the transport: a device name, the user's filter as
                             * given when it matches nothing here, or "" to let it choose */
    int nic_forced;         /* nic_name comes from RING_SOCKET_IFNAME / RING_IB_HCA */
    int numa;               /* index in t->numa for buffers, -1: ordinary allocation */
    int bind;               /* 1: bind the progress thread to `cpus` */
    int launcher_bound;     /* the launcher had already bound this rank */
    ring__cpumask_t cpus;   /* the progress thread's CPUs: to bind, or left as they are */
    char nic_why[320], numa_why[256], cpus_why[320];
    char text[1536];        /* the three decisions, one per line, for the log and ringtopo */
} ring__topo_plan_t;

/*
 * Decide. t may be NULL (the topology could not be read): the plan then binds and places
 * nothing, like a build without hwloc. Errors: RING_ERR_INVALID_ARG for a GPU bus id that is
 * not one or a local rank out of range, RING_ERR_NOMEM. A GPU that is not in the topology, or
 * a filter that matches no device in it, is not an error: the plan says so and carries on
 * (the transport is the judge of interface names).
 */
ring_result_t ring__topo_plan(ring_comm_t *comm, const ring__topo_t *t, const ring__topo_req_t *req,
                              ring__topo_plan_t *plan);

/*
 * Bind a thread (NULL: the calling one) to plan->cpus if plan->bind. Returns 1 when bound, 0
 * when nothing was to be done or could be done here (no hwloc, topology from a file), -1 when
 * the system refused; `why` says which, for the log. Binding is an optimisation: go on either way.
 * t may be NULL only with a plan made from NULL.
 */
int ring__topo_bind_thread(const ring__topo_t *t, const ring__topo_plan_t *plan, const pthread_t *thread,
                           char *why, size_t whylen);

/*
 * len bytes of page-aligned, zero-filled memory, bound to plan->numa's node when there is one
 * (before first touch, so the pages land there). When binding is not possible the memory is
 * ordinary; `why` says where the pages will be. NULL only when out of memory. Free with
 * ring__topo_free_mem(p, len).
 */
void *ring__topo_alloc(const ring__topo_t *t, const ring__topo_plan_t *plan, size_t len, char *why,
                       size_t whylen);
void ring__topo_free_mem(void *p, size_t len);
/* Put the untouched pages of an existing page-aligned mapping (a shared-memory segment just
 * mapped, before anyone writes it) on plan->numa's node. 1 placed, 0 nothing to do here, -1
 * refused by the system; `why` as for ring__topo_alloc. */
int ring__topo_place(const ring__topo_t *t, const ring__topo_plan_t *plan, void *p, size_t len, char *why,
                     size_t whylen);

/*
 * This rank's local rank and the number of ranks on its host as the launcher tells them, for
 * plans made before the bootstrap (the interface is chosen before the rank table exists):
 * RING_LOCAL_RANK/RING_LOCAL_SIZE (ringrun), LOCAL_RANK/LOCAL_WORLD_SIZE (torchrun),
 * OMPI_COMM_WORLD_LOCAL_RANK/_SIZE (Open MPI), MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel
 * MPI), SLURM_LOCALID with SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID (srun). Returns the
 * source's name, or NULL (and 0 of 1) when none is complete and consistent.
 */
const char *ring__topo_env_local_rank(int *local_rank, int *nlocal);
/* Slurm's tasks-per-node list ("4(x2),3") -> the count on node `nodeid`, -1 if malformed or
 * out of range. */
int ring__topo_slurm_tasks_on_node(const char *spec, int nodeid);

/* ---- ring order ----------------------------------------------------------------------- */

/* Same host: same host name and same boot id (two machines may share a name; two containers on
 * one machine share the boot id but not the name, and do not share memory unless told to). */
int ring__topo_same_host(const ring__peer_info_t *a, const ring__peer_info_t *b);
/* Shared memory between a and b: both take it (RING__PEER_SHM) and they are on one host. */
int ring__topo_shm_pair(const ring__peer_info_t *a, const ring__peer_info_t *b);

/*
 * order[pos] = rank for pos in 0..n-1: the ranks of each host contiguous, hosts in the order of
 * their lowest rank, ranks within a host by rank. A pure function of the host identities, so
 * every rank computes the same order. *nhosts (may be NULL) receives the number of hosts.
 * O(n log n). Errors: RING_ERR_INVALID_ARG (n < 1), RING_ERR_NOMEM.
 */
ring_result_t ring__topo_ring_order(ring_comm_t *comm, const ring__peer_info_t *peers, int n, int *order,
                                    int *nhosts);
/* This rank's ring neighbours under an order (O(n)). */
void ring__topo_ring_neighbours(const int *order, int n, int rank, int *left, int *right);
/* Index of `rank` among the ranks of its host (by rank) and their number (O(n)). */
void ring__topo_local_rank(const ring__peer_info_t *peers, int n, int rank, int *local_rank, int *nlocal);
/* "0 1 4 5 | 2 3 6 7 (2 hosts)": hosts separated by "|", runs of 3+ written "8-15"; truncated
 * with "..." before the host count if len is short. Returns buf. */
const char *ring__topo_order_str(const ring__peer_info_t *peers, const int *order, int n, char *buf,
                                 size_t len);
/* Transport of the ring edge a -> b: "shm" on one host when shared memory is allowed
 * (RING_TRANSPORT is not tcp), else "rdma" between hosts when an HCA is in use, else "tcp". */
const char *ring__topo_edge_transport(const ring__peer_info_t *a, const ring__peer_info_t *b, int shm, int rdma);

#endif
