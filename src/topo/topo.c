/*
 * Topology decisions that need no hwloc: CPU sets, parsing of RING_BIND / bus ids / device
 * filters, the placement plan (a pure function of the discovered summary), allocation, and
 * the host-contiguous ring order. The hwloc side lives behind topo_hw.h. See topo.h and
 * docs/topology.md.
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "param.h"
#include "net.h"
#include "topo.h"
#include "topo_hw.h"
#include "cuda/mem.h"

/* ---- CPU sets ------------------------------------------------------------------------- */

#define NWORDS (RING__TOPO_MAX_CPUS / 64)

void ring__cpumask_zero(ring__cpumask_t *m) { memset(m, 0, sizeof *m); }

void ring__cpumask_set(ring__cpumask_t *m, int cpu)
{
    if (cpu >= 0 && cpu < RING__TOPO_MAX_CPUS) m->w[cpu / 64] |= 1ull << (cpu % 64);
}

int ring__cpumask_isset(const ring__cpumask_t *m, int cpu)
{
    return cpu >= 0 && cpu < RING__TOPO_MAX_CPUS && (m->w[cpu / 64] >> (cpu % 64) & 1);
}

int ring__cpumask_count(const ring__cpumask_t *m)
{
    int n = 0;
    for (int i = 0; i < NWORDS; i++) n += __builtin_popcountll(m->w[i]);
    return n;
}

int ring__cpumask_empty(const ring__cpumask_t *m)
{
    for (int i = 0; i < NWORDS; i++)
        if (m->w[i]) return 0;
    return 1;
}

int ring__cpumask_equal(const ring__cpumask_t *a, const ring__cpumask_t *b)
{
    return memcmp(a->w, b->w, sizeof a->w) == 0;
}

int ring__cpumask_subset(const ring__cpumask_t *sub, const ring__cpumask_t *of)
{
    for (int i = 0; i < NWORDS; i++)
        if (sub->w[i] & ~of->w[i]) return 0;
    return 1;
}

int ring__cpumask_intersects(const ring__cpumask_t *a, const ring__cpumask_t *b)
{
    for (int i = 0; i < NWORDS; i++)
        if (a->w[i] & b->w[i]) return 1;
    return 0;
}

void ring__cpumask_and(ring__cpumask_t *dst, const ring__cpumask_t *a, const ring__cpumask_t *b)
{
    for (int i = 0; i < NWORDS; i++) dst->w[i] = a->w[i] & b->w[i];
}

static int parse_cpu(const char **s, int *v)
{
    if (!isdigit((unsigned char)**s)) return -1;
    long x = 0;
    while (isdigit((unsigned char)**s)) {
        x = x * 10 + (**s - '0');
        if (x >= RING__TOPO_MAX_CPUS) return -1;
        (*s)++;
    }
    *v = (int)x;
    return 0;
}

int ring__cpumask_parse(const char *s, ring__cpumask_t *m)
{
    ring__cpumask_zero(m);
    if (!s || !*s) return -1;
    while (*s) {
        int lo, hi;
        if (parse_cpu(&s, &lo) != 0) return -1;
        hi = lo;
        if (*s == '-') {
            s++;
            if (parse_cpu(&s, &hi) != 0 || hi < lo) return -1;
        }
        for (int c = lo; c <= hi; c++) ring__cpumask_set(m, c);
        if (*s == ',') {
            s++;
            if (!*s) return -1;
        } else if (*s) {
            return -1;
        }
    }
    return 0;
}

/* snprintf that appends at *o and never runs past len; returns 0 when it did not fit. */
static int put(char *buf, size_t len, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int put(char *buf, size_t len, size_t *o, const char *fmt, ...)
{
    if (*o >= len) return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, len - *o, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len - *o) {
        buf[*o] = '\0'; /* drop the partial piece: the caller marks the cut */
        return 0;
    }
    *o += (size_t)n;
    return 1;
}

/* Mark a cut string with "..." at its end, overwriting what must go to make room. */
static void mark_cut(char *buf, size_t len)
{
    if (len < 4) {
        if (len) buf[0] = '\0';
        return;
    }
    size_t o = strlen(buf);
    if (o > len - 4) o = len - 4;
    memcpy(buf + o, "...", 4);
}

const char *ring__cpumask_str(const ring__cpumask_t *m, char *buf, size_t len)
{
    size_t o = 0;
    if (!len) return buf;
    buf[0] = '\0';
    if (ring__cpumask_empty(m)) {
        snprintf(buf, len, "none");
        return buf;
    }
    int first = 1;
    for (int c = 0; c < RING__TOPO_MAX_CPUS; c++) {
        if (!ring__cpumask_isset(m, c)) continue;
        int e = c;
        while (e + 1 < RING__TOPO_MAX_CPUS && ring__cpumask_isset(m, e + 1)) e++;
        int ok = e > c ? put(buf, len, &o, "%s%d-%d", first ? "" : ",", c, e)
                       : put(buf, len, &o, "%s%d", first ? "" : ",", c);
        if (!ok) {
            mark_cut(buf, len);
            return buf;
        }
        first = 0;
        c = e;
    }
    return buf;
}

int ring__cpumask_current(ring__cpumask_t *m)
{
    ring__cpumask_zero(m);
    size_t sz = CPU_ALLOC_SIZE(RING__TOPO_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(RING__TOPO_MAX_CPUS);
    if (!set) return -1;
    CPU_ZERO_S(sz, set);
    int rc = sched_getaffinity(0, sz, set);
    if (rc == 0)
        for (int c = 0; c < RING__TOPO_MAX_CPUS; c++)
            if (CPU_ISSET_S((size_t)c, sz, set)) ring__cpumask_set(m, c);
    CPU_FREE(set);
    return rc == 0 ? 0 : -1;
}

int ring__numa_count_list(const char *s)
{
    ring__cpumask_t m;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    buf[strcspn(buf, "\n")] = '\0';
    if (!buf[0] || ring__cpumask_parse(buf, &m) != 0) return 0;
    return ring__cpumask_count(&m);
}

int ring__numa_nodes_online(void)
{
    char buf[256] = "";
    FILE *f = fopen("/sys/devices/system/node/online", "re");
    if (!f) return 0;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    return ring__numa_count_list(buf);
}

/* ---- loading and describing --------------------------------------------------------- */

ring_result_t ring__topo_load(ring_comm_t *comm, const char *xml_path, ring__topo_t **out)
{
    ring_result_t rc;
    *out = NULL;
    const char *path = xml_path;
    char label[300] = "";
    if (!path) {
        const char *env = getenv("RING_TOPO_FILE");
        if (env && *env) path = env;
        if (path) snprintf(label, sizeof label, "RING_TOPO_FILE=\"%s\"", path);
    } else {
        snprintf(label, sizeof label, "topology file \"%s\"", path);
    }
    struct stat st;
    /* hwloc opens the path blocking: a FIFO without a writer held init for good, past
     * RING_TIMEOUT_MS. A file given to a tool (ringtopo --topo <(...)) may be a pipe. */
    if (!xml_path && path && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "%s: not a regular file", label);
    ring__topo_t *t = calloc(1, sizeof *t);
    if (!t) return ring__seterr(comm, RING_ERR_NOMEM, "topology: out of memory");
    RING_CHECK(ring__topo_hw_load(comm, path, label, t));
    *out = t;
    return RING_OK;
fail:
    ring__topo_free(t);
    return rc;
}

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static ring__topo_t *shared;

ring_result_t ring__topo_get(ring_comm_t *comm, const ring__topo_t **out)
{
    ring_result_t rc = RING_OK;
    /* Around shared_mu too: a fork() between the load's end and the unlock would leave it held
     * in the child. */
    ring__fork_guard_enter();
    pthread_mutex_lock(&shared_mu);
    if (!shared) rc = ring__topo_load(comm, NULL, &shared);
    *out = shared;
    pthread_mutex_unlock(&shared_mu);
    ring__fork_guard_leave();
    return rc;
}

void ring__topo_free(ring__topo_t *t)
{
    if (!t) return;
    ring__topo_hw_free(t);
    free(t->numa);
    free(t->devs);
    free(t);
}

const char *ring__topo_kind_name(ring__topo_kind_t k)
{
    switch (k) {
    case RING__TOPO_NET: return "network";
    case RING__TOPO_HCA: return "OpenFabrics";
    case RING__TOPO_GPU: return "GPU";
    }
    return "?";
}

/* "NUMA node 1 (package 1)", "package 1", or "no single NUMA node": where a device is. */
static const char *dev_where(const ring__topo_t *t, const ring__topo_dev_t *d, char *buf, size_t len)
{
    if (d->numa >= 0 && t->nnuma > 1 && d->package >= 0)
        snprintf(buf, len, "NUMA node %d (package %d)", t->numa[d->numa].os_index, d->package);
    else if (d->numa >= 0 && t->nnuma > 1)
        snprintf(buf, len, "NUMA node %d", t->numa[d->numa].os_index);
    else if (d->package >= 0 && t->npackages > 1)
        snprintf(buf, len, "package %d", d->package);
    else
        snprintf(buf, len, "%s", t->nnuma > 1 ? "no single NUMA node" : "the only NUMA node");
    return buf;
}

const char *ring__topo_describe(const ring__topo_t *t, char *buf, size_t len)
{
    size_t o = 0;
    char cpus[256], where[64];
    if (!len) return buf;
    buf[0] = '\0';
    if (!t->have_hwloc) {
        put(buf, len, &o, "topology: none (built without hwloc)\n");
        return buf;
    }
    int ok = put(buf, len, &o, "topology: %s (%s)\n", t->source, t->backend) &&
             put(buf, len, &o, "  %d package%s, %d NUMA node%s, %d cores, %d CPUs (%s)\n", t->npackages,
                 t->npackages == 1 ? "" : "s", t->nnuma, t->nnuma == 1 ? "" : "s", t->ncores, t->npus,
                 ring__cpumask_str(&t->cpus, cpus, sizeof cpus));
    for (int i = 0; ok && i < t->nnuma; i++) {
        const ring__topo_numa_t *nd = &t->numa[i];
        char pkg[32] = "";
        if (nd->package >= 0 && t->npackages > 1) snprintf(pkg, sizeof pkg, ", package %d", nd->package);
        char mem[32] = "memory size unknown";
        if (nd->bytes) snprintf(mem, sizeof mem, "%.1f GiB", (double)nd->bytes / (1024.0 * 1024 * 1024));
        ok = put(buf, len, &o, "  NUMA node %d: CPUs %s, %s%s\n", nd->os_index,
                 ring__cpumask_str(&nd->cpus, cpus, sizeof cpus), mem, pkg);
    }
    if (ok && t->ndevs == 0) ok = put(buf, len, &o, "  no network devices or GPUs found\n");
    for (int i = 0; ok && i < t->ndevs; i++) {
        const ring__topo_dev_t *d = &t->devs[i];
        if (d->kind == RING__TOPO_GPU)
            ok = put(buf, len, &o, "  GPU %s [%04x:%04x]%s%s: %s, CPUs %s\n", d->busid, d->vendor, d->device,
                     d->name[0] ? " " : "", d->name, dev_where(t, d, where, sizeof where),
                     ring__cpumask_str(&d->cpus, cpus, sizeof cpus));
        else
            ok = put(buf, len, &o, "  %s: %s, PCI %s [%04x:%04x], %s, CPUs %s\n", d->name, ring__topo_kind_name(d->kind),
                     d->busid[0] ? d->busid : "none", d->vendor, d->device, dev_where(t, d, where, sizeof where),
                     ring__cpumask_str(&d->cpus, cpus, sizeof cpus));
    }
    if (!ok) mark_cut(buf, len);
    return buf;
}

/* ---- parsing -------------------------------------------------------------------------- */

int ring__topo_parse_bind(const char *s)
{
    if (!s || !*s || !strcasecmp(s, "auto")) return RING__BIND_AUTO;
    if (!strcasecmp(s, "force")) return RING__BIND_FORCE;
    if (!strcasecmp(s, "none")) return RING__BIND_NONE;
    return -1;
}

const char *ring__topo_bind_name(ring__bind_mode_t m)
{
    switch (m) {
    case RING__BIND_AUTO: return "auto";
    case RING__BIND_FORCE: return "force";
    case RING__BIND_NONE: return "none";
    }
    return "?";
}

/* Up to maxdigits hex digits ending at stop (a character, or '\0' for the end). */
static int hexfield(const char **s, int maxdigits, char stop, unsigned long *v)
{
    int n = 0;
    *v = 0;
    while (isxdigit((unsigned char)**s)) {
        if (++n > maxdigits) return -1;
        int c = tolower((unsigned char)**s);
        *v = *v * 16 + (unsigned long)(isdigit(c) ? c - '0' : c - 'a' + 10);
        (*s)++;
    }
    if (n == 0 || **s != stop) return -1;
    if (stop) (*s)++;
    return 0;
}

int ring__topo_busid_canon(const char *in, char out[20])
{
    unsigned long dom = 0, bus, dev, fn;
    if (!in) return -1;
    /* With or without the domain: count the colons. */
    int colons = 0;
    for (const char *p = in; *p; p++) colons += *p == ':';
    const char *s = in;
    if ((colons == 2 && hexfield(&s, 8, ':', &dom) != 0) || (colons != 1 && colons != 2)) return -1;
    if (hexfield(&s, 2, ':', &bus) != 0 || hexfield(&s, 2, '.', &dev) != 0 || hexfield(&s, 1, '\0', &fn) != 0)
        return -1;
    if (dev > 0x1f || fn > 7) return -1;
    snprintf(out, 20, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
    return 0;
}

int ring__topo_name_match(const char *spec, const char *name) { return ring__name_match(spec, name, 1); }

/* RING_LOCAL_RANK/RING_LOCAL_SIZE are ringrun's, or the user's own export under another
 * launcher: a malformed pair is a typo and fails init as any RING_* variable does. Skipped
 * like a launcher's pair, it placed the rank by the next launcher's variables, or as the only
 * rank of its host, without a word. */
static ring_result_t check_ring_local(ring_comm_t *comm)
{
    const char *r = getenv("RING_LOCAL_RANK"), *s = getenv("RING_LOCAL_SIZE");
    long long lr, ls;
    if ((!r || !*r) && (!s || !*s)) return RING_OK;
    if (r && s && ring__parse_int(r, 0, 1 << 20, &lr) == 0 && ring__parse_int(s, 1, 1 << 20, &ls) == 0 && lr < ls)
        return RING_OK;
    return ring__seterr(comm, RING_ERR_INVALID_ARG,
                        "RING_LOCAL_RANK=\"%s\", RING_LOCAL_SIZE=\"%s\": expected both, integers with 0 <= "
                        "RING_LOCAL_RANK < RING_LOCAL_SIZE <= %d",
                        r ? r : "(unset)", s ? s : "(unset)", 1 << 20);
}

ring_result_t ring__topo_req_init(ring_comm_t *comm, const ring__topo_t *t, ring__topo_req_t *req)
{
    memset(req, 0, sizeof *req);
    req->nlocal = 1;
    const char *b = getenv("RING_BIND");
    int mode = ring__topo_parse_bind(b);
    if (mode < 0)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "RING_BIND=\"%s\": expected auto, force or none", b);
    ring_result_t rc = check_ring_local(comm);
    if (rc != RING_OK) return rc;
    req->bind = (ring__bind_mode_t)mode;
    /* A communicator's resolved interface: ring_config_t's socket_ifname, where it was set, wins
     * over the variable (api.md). */
    req->nic_spec = !comm ? getenv("RING_SOCKET_IFNAME") : comm->params.ifname[0] ? comm->params.ifname : NULL;
    req->hca_spec = getenv("RING_IB_HCA");
    if (t && t->have_hwloc && !t->from_file) {
        req->bound_known = ring__cpumask_current(&req->bound) == 0;
        /* MPOL_DEFAULT is 0; a system without the call (or a seccomp filter) has no policy to keep. */
        int mode = 0;
        if (syscall(SYS_get_mempolicy, &mode, NULL, 0UL, NULL, 0UL) == 0 && mode != 0) req->own_mempolicy = 1;
    }
    return RING_OK;
}

/* topo.h; the GPU through the driver's dlopen (cuda/mem.c, in every build). */
ring_result_t ring__placement_req(ring_comm_t *comm, ring__topo_req_t *req, char *gpu, size_t gpulen, const char **src)
{
    ring_result_t rc = ring__topo_req_init(comm, comm->topo, req);
    if (rc != RING_OK) return rc;
    *src = ring__topo_env_local_rank(&req->local_rank, &req->nlocal);
    req->local_unknown = !*src && comm->nranks > 1;
    if (ring__mem_current_gpu_busid(gpu, gpulen)) req->gpu_busid = gpu;
    return RING_OK;
}

static int env_nonneg(const char *name, long long hi, int *out)
{
    long long v;
    const char *s = getenv(name);
    if (!s || ring__parse_int(s, 0, hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

int ring__topo_slurm_tasks_on_node(const char *spec, int nodeid)
{
    long long node = 0;
    int found = -1;
    const char *s = spec;
    if (!s || !*s || nodeid < 0) return -1;
    /* The whole list is checked, so that a garbled variable is never half believed. */
    while (*s) {
        char *end;
        long long count = strtoll(s, &end, 10), rep = 1;
        if (end == s || count < 1 || count > (1 << 20)) return -1;
        s = end;
        if (s[0] == '(' && s[1] == 'x') {
            rep = strtoll(s + 2, &end, 10);
            if (end == s + 2 || *end != ')' || rep < 1 || rep > (1 << 20)) return -1;
            s = end + 1;
        }
        if (found < 0 && nodeid < node + rep) found = (int)count;
        node += rep;
        if (*s == ',' && s[1]) s++;
        else if (*s) return -1;
    }
    return found;
}

const char *ring__topo_env_local_rank(int *local_rank, int *nlocal)
{
    /* The order of ring__env_bootstrap: torchrun's names before an MPI launcher's only where
     * torchrun started this process. */
    static const struct {
        const char *rank, *size, *source;
        int torch; /* ring__launcher_row_applies */
    } pairs[] = {
        {"RING_LOCAL_RANK", "RING_LOCAL_SIZE", "ringrun", 0},
        {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun", 1},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "openmpi", 0},
        {"MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpich", 0},
        {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK/LOCAL_WORLD_SIZE", 2},
    };
    int lr, nl, node;
    *local_rank = 0;
    *nlocal = 1;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (ring__launcher_row_applies(pairs[i].torch) && env_nonneg(pairs[i].rank, 1 << 20, &lr) == 0 &&
            env_nonneg(pairs[i].size, 1 << 20, &nl) == 0 && lr < nl) {
            *local_rank = lr;
            *nlocal = nl;
            return pairs[i].source;
        }
    const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
    if (!tpn) tpn = getenv("SLURM_TASKS_PER_NODE");
    if (env_nonneg("SLURM_LOCALID", 1 << 20, &lr) == 0 && env_nonneg("SLURM_NODEID", 1 << 20, &node) == 0 &&
        (nl = ring__topo_slurm_tasks_on_node(tpn, node)) > lr) {
        *local_rank = lr;
        *nlocal = nl;
        return "slurm";
    }
    return NULL;
}

/* ---- the plan ------------------------------------------------------------------------- */

/* How close two devices are, best first (NCCL's PIX/PHB/NODE/SYS, roughly). */
enum { NEAR_SWITCH, NEAR_HOSTBRIDGE, NEAR_LOCAL, NEAR_PARTIAL, NEAR_FAR };

static int dev_closeness(const ring__topo_dev_t *a, const ring__topo_dev_t *b)
{
    for (int i = 0; i < a->nbridges; i++)
        for (int j = 0; j < b->nbridges; j++)
            if (a->bridges[i] == b->bridges[j]) return NEAR_SWITCH;
    if (a->hostbridge && a->hostbridge == b->hostbridge) return NEAR_HOSTBRIDGE;
    if (ring__cpumask_equal(&a->cpus, &b->cpus)) return NEAR_LOCAL;
    if (ring__cpumask_intersects(&a->cpus, &b->cpus) || (a->package >= 0 && a->package == b->package))
        return NEAR_PARTIAL;
    return NEAR_FAR;
}

static const char *closeness_text(const ring__topo_t *t, const ring__topo_dev_t *a, const ring__topo_dev_t *b,
                                  int c)
{
    switch (c) {
    case NEAR_SWITCH: return "behind the same PCIe switch";
    case NEAR_HOSTBRIDGE: return "under the same PCI host bridge";
    case NEAR_LOCAL: return a->numa >= 0 && a->numa == b->numa && t->nnuma > 1 ? "on the same NUMA node"
                                                                               : "local to the same CPUs";
    case NEAR_PARTIAL: return a->package >= 0 && a->package == b->package ? "in the same package, another NUMA node"
                                                                          : "sharing only part of their CPUs";
    default: return "on another socket: traffic crosses the inter-socket link";
    }
}

/* How local a device is to a set of CPUs, best first. */
static int cpus_closeness(const ring__topo_dev_t *d, const ring__cpumask_t *cpus)
{
    if (ring__cpumask_subset(cpus, &d->cpus)) return 0;
    return ring__cpumask_intersects(cpus, &d->cpus) ? 1 : 2;
}

/* Index in t->numa of the one node whose CPUs hold all of `cpus`, -1 if none. */
static int numa_holding(const ring__topo_t *t, const ring__cpumask_t *cpus)
{
    for (int i = 0; i < t->nnuma; i++)
        if (ring__cpumask_subset(cpus, &t->numa[i].cpus)) return i;
    return -1;
}

/* "eth1, eth0" into buf: the devices of a kind, for messages about filters. */
static const char *dev_names(const ring__topo_t *t, ring__topo_kind_t kind, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->ndevs; i++)
        if (t->devs[i].kind == kind && !put(buf, len, &o, "%s%s", o ? ", " : "", t->devs[i].name)) {
            mark_cut(buf, len);
            break;
        }
    if (!o && !buf[0]) snprintf(buf, len, "none");
    return buf;
}

/* Among cand[0..ncand), the devices closest to `to` by closeness(): into tied[], their
 * number returned (the closeness in *best). */
static int closest_of(const ring__topo_t *t, const int *cand, int ncand, const ring__topo_dev_t *gpu,
                      const ring__cpumask_t *cpus, int *tied, int *best)
{
    int n = 0;
    *best = 1 << 30;
    for (int i = 0; i < ncand; i++) {
        int c = gpu ? dev_closeness(&t->devs[cand[i]], gpu) : cpus_closeness(&t->devs[cand[i]], cpus);
        if (c < *best) {
            *best = c;
            n = 0;
        }
        if (c == *best) tied[n++] = cand[i];
    }
    return n;
}

/* The place of GPU g among the GPUs of the topology that are closest to the same devices
 * (tied[0..ntied)): each of those GPUs takes the next device. The local rank would do only
 * where the ranks of those GPUs have consecutive local ranks, which interleaved placements
 * (GPUs numbered alternately between sockets, mpirun --map-by socket) do not give. */
static int gpu_place(const ring__topo_t *t, const int *cand, int ncand, int g, const int *tied, int ntied, int *scratch)
{
    int place = 0;
    for (int j = 0; j < g; j++) {
        if (t->devs[j].kind != RING__TOPO_GPU) continue;
        int best, n = closest_of(t, cand, ncand, &t->devs[j], NULL, scratch, &best);
        if (n == ntied && !memcmp(scratch, tied, sizeof *tied * (size_t)ntied)) place++;
    }
    return place;
}

/* The place of a launcher binding among the CPUs local to its closest devices: ranks bound to
 * cores 4 and 5 of a socket take its two NICs, whatever their local ranks (mpirun --map-by
 * socket gives a socket's ranks local ranks of one parity). -1 when the binding covers all
 * those CPUs (bound to the socket), where only the local rank tells ranks apart. */
static int bound_place(const ring__topo_t *t, const ring__cpumask_t *bound, const int *tied, int ntied)
{
    ring__cpumask_t near = t->devs[tied[0]].cpus;
    for (int i = 1; i < ntied; i++)
        for (int c = 0; c < RING__TOPO_MAX_CPUS; c++)
            if (ring__cpumask_isset(&t->devs[tied[i]].cpus, c)) ring__cpumask_set(&near, c);
    ring__cpumask_t mine;
    ring__cpumask_and(&mine, bound, &near);
    if (ring__cpumask_count(&mine) == 0 || ring__cpumask_count(&mine) >= ring__cpumask_count(&near)) return -1;
    int place = 0;
    for (int c = 0; c < RING__TOPO_MAX_CPUS && !ring__cpumask_isset(&mine, c); c++) place += ring__cpumask_isset(&near, c);
    return place;
}

/* The NIC or HCA decision: sets plan->nic, nic_name, nic_forced, nic_why. */
static ring_result_t choose_nic(ring_comm_t *comm, const ring__topo_t *t, const ring__topo_req_t *req,
                                int launcher_bound, const ring__cpumask_t *bound, ring__topo_plan_t *plan)
{
    ring_result_t rc = RING_OK;
    ring__topo_kind_t kind = req->use_hca ? RING__TOPO_HCA : RING__TOPO_NET;
    const char *var = req->use_hca ? "RING_IB_HCA" : "RING_SOCKET_IFNAME";
    const char *what = req->use_hca ? "OpenFabrics" : "network";
    const char *spec = req->use_hca ? req->hca_spec : req->nic_spec;
    if (spec && !*spec) spec = NULL;
    char names[128], b1[160], b2[96];

    int ncand = 0, nkind = 0;
    int *cand = malloc(sizeof(int) * (size_t)(t->ndevs ? t->ndevs : 1));
    int *tied = malloc(sizeof(int) * (size_t)(t->ndevs ? t->ndevs : 1));
    int *scratch = malloc(sizeof(int) * (size_t)(t->ndevs ? t->ndevs : 1));
    if (!cand || !tied || !scratch) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "topology plan: out of memory");
        goto done;
    }
    for (int i = 0; i < t->ndevs; i++) {
        if (t->devs[i].kind != kind) continue;
        nkind++;
        if (!spec || ring__topo_name_match(spec, t->devs[i].name)) cand[ncand++] = i;
    }
    if (ncand == 0) {
        if (spec) {
            snprintf(plan->nic_name, sizeof plan->nic_name, "%s", spec);
            plan->nic_forced = 1;
            snprintf(plan->nic_why, sizeof plan->nic_why,
                     "%s=\"%s\" matches no %s device in the topology (found: %s): passed to the transport as given",
                     var, spec, what, dev_names(t, kind, names, sizeof names));
        } else {
            snprintf(plan->nic_why, sizeof plan->nic_why,
                     "no %s device in the topology: the transport chooses (the route to the root)", what);
        }
        goto done;
    }

    int pick = cand[0], ntied = 0, best = 1 << 30;
    const char *reason = "";
    if (plan->gpu >= 0) {
        const ring__topo_dev_t *g = &t->devs[plan->gpu];
        ntied = closest_of(t, cand, ncand, g, NULL, tied, &best);
        /* GPUs equally close to several NICs share them out. */
        pick = tied[gpu_place(t, cand, ncand, plan->gpu, tied, ntied, scratch) % ntied];
        snprintf(b1, sizeof b1, "closest to GPU %s (%s)", g->busid, closeness_text(t, &t->devs[pick], g, best));
        reason = b1;
    } else if (launcher_bound && req->bind != RING__BIND_FORCE) {
        ntied = closest_of(t, cand, ncand, NULL, bound, tied, &best);
        const int place = bound_place(t, bound, tied, ntied);
        pick = tied[(place >= 0 ? place : req->local_rank) % ntied];
        snprintf(b1, sizeof b1, "%s the CPUs the launcher bound this rank to (%s)",
                 best == 0 ? "local to" : best == 1 ? "partly local to" : "none is local to",
                 ring__cpumask_str(bound, b2, sizeof b2));
        reason = b1;
    } else if (ncand == 1) {
        reason = spec ? "the only one it allows" : "the only one";
    } else {
        /* Blocks, not round robin: neighbouring local ranks (adjacent in the ring) share a device. */
        int k = (int)((long long)req->local_rank * ncand / req->nlocal);
        pick = cand[k];
        snprintf(b1, sizeof b1, "local rank %d of %d takes device %d of %d (a host's ranks are shared out over them in PCI order)",
                 req->local_rank, req->nlocal, k + 1, ncand);
        reason = b1;
    }
    plan->nic = pick;
    plan->nic_forced = spec != NULL;
    snprintf(plan->nic_name, sizeof plan->nic_name, "%s", t->devs[pick].name);
    if (spec)
        snprintf(plan->nic_why, sizeof plan->nic_why, "%s=\"%s\" allows %d of %d; %s", var, spec, ncand, nkind, reason);
    else
        snprintf(plan->nic_why, sizeof plan->nic_why, "%s", reason);
done:
    free(cand);
    free(tied);
    free(scratch);
    return rc;
}

/* plan->text from the decisions, after an optional note line. */
static void compose_text(const ring__topo_t *t, const char *note, ring__topo_plan_t *plan)
{
    size_t o = 0;
    int ok = put(plan->text, sizeof plan->text, &o, "%s", note) &&
             put(plan->text, sizeof plan->text, &o, "NIC: %s: %s\n", plan->nic_name[0] ? plan->nic_name : "(transport's choice)",
                 plan->nic_why) &&
             put(plan->text, sizeof plan->text, &o, "buffers: %s\n", plan->numa_why) &&
             put(plan->text, sizeof plan->text, &o, "progress thread: %s\n", plan->cpus_why);
    if (ok && t && t->from_file)
        ok = put(plan->text, sizeof plan->text, &o, "(topology from %s: this plan is shown, not applied)\n", t->source);
    if (!ok) mark_cut(plan->text, sizeof plan->text);
}

ring_result_t ring__topo_plan(ring_comm_t *comm, const ring__topo_t *t, const ring__topo_req_t *req,
                              ring__topo_plan_t *plan)
{
    char b1[256], b2[64], gpu_note[160] = "";
    memset(plan, 0, sizeof *plan);
    plan->gpu = plan->nic = plan->numa = -1;
    if (req->nlocal < 1 || req->local_rank < 0 || req->local_rank >= req->nlocal)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "topology plan: local rank %d of %d is out of range",
                            req->local_rank, req->nlocal);
    char busid[20] = "";
    if (req->gpu_busid && *req->gpu_busid && ring__topo_busid_canon(req->gpu_busid, busid) != 0)
        return ring__seterr(comm, RING_ERR_INVALID_ARG,
                            "topology plan: GPU bus id \"%s\" is not a PCI bus id like 0000:3b:00.0", req->gpu_busid);
    if (req->bound_known) plan->cpus = req->bound;

    if (!t || !t->have_hwloc) {
        const char *none = t ? "built without hwloc" : "no topology";
        const char *spec = req->use_hca ? req->hca_spec : req->nic_spec;
        if (spec && *spec) {
            snprintf(plan->nic_name, sizeof plan->nic_name, "%s", spec);
            plan->nic_forced = 1;
            snprintf(plan->nic_why, sizeof plan->nic_why, "%s=\"%s\", passed to the transport (%s)",
                     req->use_hca ? "RING_IB_HCA" : "RING_SOCKET_IFNAME", spec, none);
        } else {
            snprintf(plan->nic_why, sizeof plan->nic_why, "the transport chooses (%s)", none);
        }
        snprintf(plan->numa_why, sizeof plan->numa_why, "ordinary allocation (%s)", none);
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "not bound (%s)", none);
        compose_text(t, "", plan);
        return RING_OK;
    }

    if (busid[0]) {
        for (int i = 0; i < t->ndevs && plan->gpu < 0; i++)
            if (t->devs[i].kind == RING__TOPO_GPU && !strcmp(t->devs[i].busid, busid)) plan->gpu = i;
        if (plan->gpu < 0)
            snprintf(gpu_note, sizeof gpu_note, "GPU %s is not in the topology: placing without it\n", busid);
    }

    /* A launcher's binding is a strict subset of the CPUs we may use; CPUs outside the topology
     * (a mask from another machine) say nothing about this one. */
    ring__cpumask_t bound;
    ring__cpumask_zero(&bound);
    int launcher_bound = 0;
    if (req->bound_known) {
        ring__cpumask_and(&bound, &req->bound, &t->cpus);
        launcher_bound = !ring__cpumask_empty(&bound) && !ring__cpumask_equal(&bound, &t->cpus);
    }
    plan->launcher_bound = launcher_bound;

    ring_result_t rc = choose_nic(comm, t, req, launcher_bound, &bound, plan);
    if (rc != RING_OK) return rc;

    /* What the buffers and the thread go next to: the device the data passes through first
     * (the GPU, else the NIC), else the launcher's CPUs, else this rank's share of the nodes. */
    ring__cpumask_t place;
    int place_numa = -1, place_pkg = -1;
    char place_what[160] = "";
    ring__cpumask_zero(&place);
    int dev = plan->gpu >= 0 ? plan->gpu : plan->nic;
    if (dev >= 0) {
        const ring__topo_dev_t *d = &t->devs[dev];
        place = d->cpus;
        place_numa = d->numa;
        place_pkg = d->package;
        if (d->kind == RING__TOPO_GPU) snprintf(place_what, sizeof place_what, "GPU %s", d->busid);
        else snprintf(place_what, sizeof place_what, "%s", d->name);
    } else if (launcher_bound) {
        place = bound;
        place_numa = numa_holding(t, &bound);
        snprintf(place_what, sizeof place_what, "the CPUs the launcher bound this rank to");
    } else if (t->nnuma > 1) {
        place_numa = (int)((long long)req->local_rank * t->nnuma / req->nlocal);
        place = t->numa[place_numa].cpus;
        snprintf(place_what, sizeof place_what, "local rank %d of %d (no device to go by: ranks shared out over the NUMA nodes)",
                 req->local_rank, req->nlocal);
    }

    /* Where this rank's place among its host's ranks is unknown, every rank of the host would
     * take the same device and node: all the progress threads on one node's CPUs. No GPU and no
     * launcher binding to go by, so nothing is placed (RING_BIND=force places anyway). */
    static const char unknown[] = "this rank's place among the ranks of its host is unknown (no launcher's local "
                                  "rank variables; RING_LOCAL_RANK and RING_LOCAL_SIZE give it)";
    const int skip = req->local_unknown && req->bind == RING__BIND_AUTO && !launcher_bound && plan->gpu < 0 &&
                     t->nnuma > 1;

    /* Buffers. */
    if (req->bind == RING__BIND_NONE)
        snprintf(plan->numa_why, sizeof plan->numa_why, "ordinary allocation (RING_BIND=none)");
    else if (req->own_mempolicy && req->bind == RING__BIND_AUTO)
        snprintf(plan->numa_why, sizeof plan->numa_why,
                 "ordinary allocation: the process has a memory policy of its own (numactl --membind, srun "
                 "--mem-bind; RING_BIND=force overrides it)");
    else if (skip)
        snprintf(plan->numa_why, sizeof plan->numa_why, "ordinary allocation: %s", unknown);
    else if (t->nnuma <= 1)
        snprintf(plan->numa_why, sizeof plan->numa_why, "ordinary allocation: one NUMA node, nothing to choose");
    else if (place_numa < 0)
        snprintf(plan->numa_why, sizeof plan->numa_why, "ordinary allocation: %s is not local to one NUMA node",
                 place_what[0] ? place_what : "nothing to place by");
    else {
        plan->numa = place_numa;
        snprintf(plan->numa_why, sizeof plan->numa_why, "NUMA node %d: closest to %s", t->numa[place_numa].os_index,
                 place_what);
    }

    /* Progress thread: the node's CPUs, not one core, because it shares them with the
     * application's threads and the scheduler balances within the node. */
    ring__cpumask_t target;
    if (t->nnuma > 1 && place_numa >= 0) target = t->numa[place_numa].cpus;
    else target = place;
    ring__cpumask_and(&target, &target, &t->cpus);
    if (req->bind == RING__BIND_NONE) {
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "not bound (RING_BIND=none)");
    } else if (skip) {
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "not bound: %s", unknown);
    } else if (launcher_bound && req->bind == RING__BIND_AUTO) {
        plan->cpus = bound;
        snprintf(plan->cpus_why, sizeof plan->cpus_why,
                 "left as the launcher bound it (CPUs %s; RING_BIND=force overrides)", ring__cpumask_str(&bound, b1, sizeof b1));
    } else if (ring__cpumask_empty(&target)) {
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "not bound: nothing to place it by");
    } else if (ring__cpumask_equal(&target, &t->cpus)) {
        plan->cpus = target;
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "not bound: %s is local to every CPU", place_what);
    } else {
        plan->bind = 1;
        plan->cpus = target;
        if (t->nnuma > 1 && place_numa >= 0)
            snprintf(b2, sizeof b2, "NUMA node %d", t->numa[place_numa].os_index);
        else if (place_pkg >= 0 && t->npackages > 1)
            snprintf(b2, sizeof b2, "package %d", place_pkg);
        else
            snprintf(b2, sizeof b2, "the CPUs local to it");
        snprintf(plan->cpus_why, sizeof plan->cpus_why, "CPUs %s (%s): closest to %s%s",
                 ring__cpumask_str(&target, b1, sizeof b1), b2, place_what,
                 launcher_bound ? " (RING_BIND=force: replaces the launcher's binding)" : "");
    }

    compose_text(t, gpu_note, plan);
    return RING_OK;
}

/* ---- applying a plan ------------------------------------------------------------------ */

int ring__topo_bind_thread(const ring__topo_t *t, const ring__topo_plan_t *plan, const pthread_t *thread,
                           char *why, size_t whylen)
{
    char cpus[256];
    if (!plan->bind) {
        snprintf(why, whylen, "%s", plan->cpus_why);
        return 0;
    }
    if (t->from_file) {
        snprintf(why, whylen, "not bound: the topology comes from %s, not this machine", t->source);
        return 0;
    }
    int e = ring__topo_hw_cpubind(t, &plan->cpus, thread);
    ring__cpumask_str(&plan->cpus, cpus, sizeof cpus);
    if (e) {
        snprintf(why, whylen, "binding to CPUs %s failed: %s", cpus, strerror(e));
        return -1;
    }
    snprintf(why, whylen, "bound to CPUs %s", cpus);
    return 1;
}

int ring__topo_place(const ring__topo_t *t, const ring__topo_plan_t *plan, void *p, size_t len, char *why,
                     size_t whylen)
{
    if (plan->numa < 0) {
        snprintf(why, whylen, "%s", plan->numa_why);
        return 0;
    }
    if (t->from_file) {
        snprintf(why, whylen, "ordinary allocation: the topology comes from %s, not this machine", t->source);
        return 0;
    }
    int node = t->numa[plan->numa].os_index;
    int e = ring__topo_hw_membind(t, p, len, node);
    if (e) {
        snprintf(why, whylen, "ordinary allocation: binding to NUMA node %d failed: %s", node, strerror(e));
        return -1;
    }
    snprintf(why, whylen, "on NUMA node %d", node);
    return 1;
}

void *ring__topo_alloc(const ring__topo_t *t, const ring__topo_plan_t *plan, size_t len, char *why, size_t whylen)
{
    /* mmap, not malloc: page-aligned (for registration with CUDA or verbs), zeroed, and not yet
     * touched, so a NUMA policy set on the range decides where every page lands. */
    size_t n = len ? len : 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        snprintf(why, whylen, "mmap of %zu bytes failed: %s", n, strerror(errno));
        return NULL;
    }
    ring__topo_place(t, plan, p, n, why, whylen);
    return p;
}

void ring__topo_free_mem(void *p, size_t len)
{
    if (p) munmap(p, len ? len : 1);
}

/* ---- ring order ----------------------------------------------------------------------- */

int ring__topo_same_host(const ring__peer_info_t *a, const ring__peer_info_t *b)
{
    return !strncmp(a->host, b->host, sizeof a->host) && !strncmp(a->bootid, b->bootid, sizeof a->bootid);
}

int ring__topo_shm_pair(const ring__peer_info_t *a, const ring__peer_info_t *b)
{
    return (a->flags & b->flags & RING__PEER_SHM) && a->shm_id == b->shm_id && ring__topo_same_host(a, b);
}

typedef struct {
    const ring__peer_info_t *p;
    int rank;
} host_key_t;

static int by_host_then_rank(const void *x, const void *y)
{
    const host_key_t *a = x, *b = y;
    int c = strncmp(a->p->host, b->p->host, sizeof a->p->host);
    if (!c) c = strncmp(a->p->bootid, b->p->bootid, sizeof a->p->bootid);
    /* Within a host, the ranks that share memory (ring__topo_shm_pair) side by side. */
    const uint32_t sa = a->p->flags & RING__PEER_SHM, sb = b->p->flags & RING__PEER_SHM;
    if (!c) c = (sa > sb) - (sa < sb);
    if (!c) c = (a->p->shm_id > b->p->shm_id) - (a->p->shm_id < b->p->shm_id);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

typedef struct {
    int start, len, first_rank;
} host_group_t;

static int by_first_rank(const void *x, const void *y)
{
    const host_group_t *a = x, *b = y;
    return (a->first_rank > b->first_rank) - (a->first_rank < b->first_rank);
}

ring_result_t ring__topo_ring_order(ring_comm_t *comm, const ring__peer_info_t *peers, int n, int *order,
                                    int *nhosts)
{
    if (n < 1 || !peers || !order)
        return ring__seterr(comm, RING_ERR_INVALID_ARG, "ring order: %d ranks", n);
    host_key_t *keys = malloc(sizeof *keys * (size_t)n);
    host_group_t *groups = malloc(sizeof *groups * (size_t)n);
    if (!keys || !groups) {
        free(keys);
        free(groups);
        return ring__seterr(comm, RING_ERR_NOMEM, "ring order: out of memory for %d ranks", n);
    }
    /* Sorting by (host, shared-memory group, rank) gathers each host's ranks, those that share
     * memory together, in rank order; the hosts then go in the order of their first rank. Both
     * keys are total orders, so every rank gets the same result. */
    for (int r = 0; r < n; r++) keys[r] = (host_key_t){&peers[r], r};
    qsort(keys, (size_t)n, sizeof *keys, by_host_then_rank);
    int ng = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || !ring__topo_same_host(keys[i - 1].p, keys[i].p))
            groups[ng++] = (host_group_t){i, 0, keys[i].rank};
        groups[ng - 1].len++;
    }
    qsort(groups, (size_t)ng, sizeof *groups, by_first_rank);
    int pos = 0;
    for (int g = 0; g < ng; g++)
        for (int i = 0; i < groups[g].len; i++) order[pos++] = keys[groups[g].start + i].rank;
    if (nhosts) *nhosts = ng;
    free(keys);
    free(groups);
    return RING_OK;
}

void ring__topo_ring_neighbours(const int *order, int n, int rank, int *left, int *right)
{
    *left = *right = -1;
    for (int i = 0; i < n; i++)
        if (order[i] == rank) {
            *left = order[(i + n - 1) % n];
            *right = order[(i + 1) % n];
            return;
        }
}

void ring__topo_local_rank(const ring__peer_info_t *peers, int n, int rank, int *local_rank, int *nlocal)
{
    int lr = 0, nl = 0;
    for (int r = 0; r < n; r++)
        if (ring__topo_same_host(&peers[r], &peers[rank])) {
            nl++;
            if (r < rank) lr++;
        }
    *local_rank = lr;
    *nlocal = nl;
}

const char *ring__topo_order_str(const ring__peer_info_t *peers, const int *order, int n, char *buf, size_t len)
{
    char tail[32];
    int groups = 0;
    for (int i = 0; i < n; i++) groups += i == 0 || !ring__topo_same_host(&peers[order[i - 1]], &peers[order[i]]);
    snprintf(tail, sizeof tail, " (%d host%s)", groups, groups == 1 ? "" : "s");
    if (!len) return buf;
    buf[0] = '\0';
    size_t tl = strlen(tail);
    /* Keep room for "..." and the host count, which must survive any cut. */
    size_t room = len > tl + 4 ? len - tl - 4 : 0;
    size_t o = 0;
    int cut = room == 0;
    for (int i = 0; i < n && !cut; i++) {
        if (i > 0 && !ring__topo_same_host(&peers[order[i - 1]], &peers[order[i]]) && !put(buf, room + 1, &o, " |"))
            cut = 1;
        /* A run of consecutive ranks on one host. */
        int j = i;
        while (j + 1 < n && order[j + 1] == order[j] + 1 && ring__topo_same_host(&peers[order[j]], &peers[order[j + 1]]))
            j++;
        if (cut) break;
        int ok;
        if (j - i >= 2) {
            ok = put(buf, room + 1, &o, "%s%d-%d", o ? " " : "", order[i], order[j]);
            i = j;
        } else {
            ok = put(buf, room + 1, &o, "%s%d", o ? " " : "", order[i]);
        }
        cut = !ok;
    }
    if (cut) {
        size_t k = o < room ? o : room;
        snprintf(buf + k, len - k, "...%s", tail);
    } else {
        snprintf(buf + o, len - o, "%s", tail);
    }
    return buf;
}

const char *ring__topo_edge_transport(const ring__peer_info_t *a, const ring__peer_info_t *b, int shm, int rdma)
{
    if (ring__topo_same_host(a, b)) return shm ? "shm" : "tcp";
    return rdma ? "rdma" : "tcp";
}
