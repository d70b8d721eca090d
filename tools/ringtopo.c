/* ringtopo: show what ringcomm finds on a machine (or in an hwloc XML file) and every decision
 * it would take there: per rank the NIC or HCA, where its buffers go and where its progress
 * thread runs, then the ring order and the transport of every ring edge.
 *
 *   ringtopo [--topo FILE.xml] [--nranks N] [--hosts H,H,...] [--gpu BUSID,...] [--rank R]
 *            [--bind auto|force|none] [--cpus LIST] [--ifname SPEC] [--hca SPEC] [--rdma]
 *
 * It uses the library's own functions (src/topo), so what it prints is what a rank decides
 * and logs at init. Nothing is bound and nothing is allocated here.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "topo.h"

#define MAX_RANKS 65536

static void usage(FILE *f)
{
    fputs("usage: ringtopo [options]\n"
          "Print the topology ringcomm sees and the decisions each rank would take on it.\n"
          "  --topo FILE      hwloc XML topology (lstopo out.xml) instead of this machine\n"
          "                   (default: RING_TOPO_FILE if set)\n"
          "  --nranks N       number of ranks (default: the number of --hosts entries, else 1)\n"
          "  --hosts LIST     host of each rank, e.g. a,a,b,b or a*4,b*4 (default: all on this host)\n"
          "  --gpu LIST       GPU PCI bus ids; local rank i uses entry i modulo their number\n"
          "  --rank R         print the plan of rank R only\n"
          "  --bind MODE      auto, force or none (default: RING_BIND, else auto)\n"
          "  --cpus LIST      CPUs the launcher bound each rank to, e.g. 0-3 (default: this\n"
          "                   process's binding on this machine, unknown for a file)\n"
          "  --ifname SPEC    as RING_SOCKET_IFNAME (default: its value)\n"
          "  --hca SPEC       as RING_IB_HCA (default: its value); implies --rdma\n"
          "  --rdma           choose among OpenFabrics HCAs (RDMA transport) instead of interfaces\n"
          "  -h, --help       show this help\n"
          "Exit status: 0 on success, 1 when the topology cannot be read or a plan fails, 2 on a\n"
          "usage error.\n",
          f);
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ringtopo: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (--help for usage)\n", stderr);
    va_end(ap);
    exit(2);
}

static long parse_long(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) die_usage("%s: '%s' is not an integer in [%ld, %ld]", what, s, lo, hi);
    return v;
}

/* "a,a,b" or "a*2,b": one host name per rank into peers (NULL peers: just count). */
static int parse_hosts(const char *list, ring__peer_info_t *peers, int max)
{
    int n = 0;
    const char *s = list;
    while (*s) {
        size_t len = strcspn(s, ",");
        const char *star = memchr(s, '*', len);
        size_t nlen = star ? (size_t)(star - s) : len;
        long rep = 1;
        if (star) {
            char num[16];
            size_t k = len - nlen - 1;
            if (k == 0 || k >= sizeof num) die_usage("--hosts: bad repeat in '%.*s'", (int)len, s);
            memcpy(num, star + 1, k);
            num[k] = '\0';
            rep = parse_long(num, "--hosts repeat", 1, MAX_RANKS);
        }
        if (nlen == 0 || nlen >= RING__HOST_MAX) die_usage("--hosts: bad host name in '%.*s'", (int)len, s);
        for (long i = 0; i < rep; i++, n++) {
            if (n >= max) die_usage("--hosts: more than %d ranks", max);
            if (peers) {
                memcpy(peers[n].host, s, nlen);
                peers[n].host[nlen] = '\0';
            }
        }
        s += len;
        if (*s == ',' && !*++s) die_usage("--hosts: trailing comma");
    }
    if (n == 0) die_usage("--hosts: empty list");
    return n;
}

/* Entry i of a comma list, into buf. */
static const char *list_entry(const char *list, int i, char *buf, size_t len)
{
    int n = 0;
    for (const char *s = list;; n++) {
        size_t l = strcspn(s, ",");
        if (n == i) {
            snprintf(buf, len, "%.*s", (int)l, s);
            return buf;
        }
        s += l;
        if (!*s) break;
        s++;
    }
    return NULL;
}

static int list_count(const char *list)
{
    int n = 1;
    for (const char *s = list; *s; s++) n += *s == ',';
    return n;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"topo", required_argument, NULL, 't'},  {"nranks", required_argument, NULL, 'n'},
        {"hosts", required_argument, NULL, 'H'}, {"gpu", required_argument, NULL, 'g'},
        {"rank", required_argument, NULL, 'r'},  {"bind", required_argument, NULL, 'b'},
        {"cpus", required_argument, NULL, 'c'},  {"ifname", required_argument, NULL, 'i'},
        {"hca", required_argument, NULL, 'a'},   {"rdma", no_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *topo_file = NULL, *hosts = NULL, *gpus = NULL, *bind = NULL, *cpus = NULL;
    const char *ifname = NULL, *hca = NULL;
    int nranks = 0, only_rank = -1, rdma = 0, c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 't': topo_file = optarg; break;
        case 'n': nranks = (int)parse_long(optarg, "--nranks", 1, MAX_RANKS); break;
        case 'H': hosts = optarg; break;
        case 'g': gpus = optarg; break;
        case 'r': only_rank = (int)parse_long(optarg, "--rank", 0, MAX_RANKS - 1); break;
        case 'b': bind = optarg; break;
        case 'c': cpus = optarg; break;
        case 'i': ifname = optarg; break;
        case 'a': hca = optarg; rdma = 1; break;
        case 'R': rdma = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) die_usage("unexpected argument '%s'", argv[optind]);

    /* Check every option before the (slow) discovery. */
    int nhosts_given = hosts ? parse_hosts(hosts, NULL, MAX_RANKS) : 0;
    if (!nranks) nranks = nhosts_given ? nhosts_given : 1;
    if (hosts && nhosts_given != nranks)
        die_usage("--hosts names %d ranks but --nranks is %d", nhosts_given, nranks);
    if (only_rank >= nranks) die_usage("--rank %d: there are %d ranks", only_rank, nranks);
    int bind_mode = -1;
    if (bind && (bind_mode = ring__topo_parse_bind(bind)) < 0) die_usage("--bind: '%s' is not auto, force or none", bind);
    ring__cpumask_t cpumask;
    if (cpus && ring__cpumask_parse(cpus, &cpumask) != 0) die_usage("--cpus: '%s' is not a CPU list like 0-3,8", cpus);
    char gpu[20], entry[64];
    for (int i = 0; gpus && i < list_count(gpus); i++)
        if (ring__topo_busid_canon(list_entry(gpus, i, entry, sizeof entry), gpu) != 0)
            die_usage("--gpu: '%s' is not a PCI bus id like 0000:3b:00.0", entry);

    ring__peer_info_t *peers = calloc((size_t)nranks, sizeof *peers);
    int *order = calloc((size_t)nranks, sizeof *order);
    ring__topo_plan_t *plans = calloc((size_t)nranks, sizeof *plans);
    char *buf = malloc(65536);
    ring__topo_t *file_topo = NULL;
    const ring__topo_t *t = NULL;
    int status = 1;
    if (!peers || !order || !plans || !buf) {
        fprintf(stderr, "ringtopo: out of memory for %d ranks\n", nranks);
        goto out;
    }
    if (hosts) {
        parse_hosts(hosts, peers, nranks);
    } else {
        ring__peer_info_t me;
        memset(&me, 0, sizeof me);
        ring__host_identity(&me);
        for (int r = 0; r < nranks; r++) peers[r] = me;
    }

    /* Without --topo, the same process-wide topology init uses (RING_TOPO_FILE or the machine). */
    ring_result_t rc = topo_file ? ring__topo_load(NULL, topo_file, &file_topo) : ring__topo_get(NULL, &t);
    if (rc != RING_OK) {
        fprintf(stderr, "ringtopo: %s\n", ring_comm_last_error(NULL));
        goto out;
    }
    if (file_topo) t = file_topo;
    fputs(ring__topo_describe(t, buf, 65536), stdout);

    ring__topo_req_t req;
    /* --bind replaces RING_BIND: a bad value in the environment is not this run's business. */
    const char *env_bind = getenv("RING_BIND");
    char *saved_bind = bind_mode >= 0 && env_bind ? strdup(env_bind) : NULL;
    if (bind_mode >= 0) unsetenv("RING_BIND");
    rc = ring__topo_req_init(NULL, t, &req);
    if (saved_bind) setenv("RING_BIND", saved_bind, 1);
    free(saved_bind);
    if (rc != RING_OK) {
        fprintf(stderr, "ringtopo: %s\n", ring_comm_last_error(NULL));
        goto out;
    }
    if (bind_mode >= 0) req.bind = (ring__bind_mode_t)bind_mode;
    if (cpus) {
        req.bound = cpumask;
        req.bound_known = 1;
    }
    if (ifname) req.nic_spec = ifname;
    if (hca) req.hca_spec = hca;
    req.use_hca = rdma;
    char b1[256];
    if (req.bound_known && t->have_hwloc && ring__cpumask_subset(&t->cpus, &req.bound))
        snprintf(b1, sizeof b1, "none (all CPUs)");
    else if (req.bound_known)
        ring__cpumask_str(&req.bound, b1, sizeof b1);
    else
        snprintf(b1, sizeof b1, "unknown");
    printf("\nsettings: RING_BIND=%s, %s, launcher binding %s, %s\n", ring__topo_bind_name(req.bind),
           rdma ? "RDMA transport (HCAs)" : "TCP transport (network interfaces)", b1,
           rdma ? (req.hca_spec && *req.hca_spec ? req.hca_spec : "RING_IB_HCA unset")
                : (req.nic_spec && *req.nic_spec ? req.nic_spec : "RING_SOCKET_IFNAME unset"));

    /* Every simulated host has this topology; a rank's plan depends on its place in its host. */
    for (int r = 0; r < nranks; r++) {
        ring__topo_local_rank(peers, nranks, r, &req.local_rank, &req.nlocal);
        req.gpu_busid = NULL;
        if (gpus && ring__topo_busid_canon(list_entry(gpus, req.local_rank % list_count(gpus), entry, sizeof entry), gpu) == 0)
            req.gpu_busid = gpu; /* checked above */
        if (ring__topo_plan(NULL, t, &req, &plans[r]) != RING_OK) {
            fprintf(stderr, "ringtopo: rank %d: %s\n", r, ring_comm_last_error(NULL));
            goto out;
        }
        if (only_rank >= 0 && r != only_rank) continue;
        printf("\nrank %d (host %s, local rank %d of %d%s%s):\n", r, peers[r].host, req.local_rank, req.nlocal,
               req.gpu_busid ? ", GPU " : "", req.gpu_busid ? req.gpu_busid : "");
        const char *line = plans[r].text;
        while (*line) {
            size_t l = strcspn(line, "\n");
            printf("  %.*s\n", (int)l, line);
            line += l + (line[l] == '\n');
        }
    }

    int nh;
    if (ring__topo_ring_order(NULL, peers, nranks, order, &nh) != RING_OK) {
        fprintf(stderr, "ringtopo: %s\n", ring_comm_last_error(NULL));
        goto out;
    }
    printf("\nring order: %s\n", ring__topo_order_str(peers, order, nranks, buf, 65536));
    int crossings = nh > 1 ? nh : 0; /* a ring over h > 1 hosts leaves each host once */
    printf("the ring crosses the network %d time%s\n", crossings, crossings == 1 ? "" : "s");
    /* The rule of the transports: shared memory between ranks with the same host name and boot
     * id unless RING_TRANSPORT=tcp, the network between hosts. */
    const char *tpenv = getenv("RING_TRANSPORT");
    int shm = !(tpenv && !strcmp(tpenv, "tcp"));
    printf("edges (same host name and boot id: %s):\n", shm ? "shared memory" : "TCP, RING_TRANSPORT=tcp");
    for (int i = 0; i < nranks && nranks > 1; i++) {
        int a = order[i], b = order[(i + 1) % nranks];
        int hca_used = plans[a].nic >= 0 && t->devs[plans[a].nic].kind == RING__TOPO_HCA;
        const char *tp = ring__topo_edge_transport(&peers[a], &peers[b], shm, hca_used);
        if (ring__topo_same_host(&peers[a], &peers[b]))
            printf("  %d -> %d: %s (both on %s)\n", a, b, tp, peers[a].host);
        else
            printf("  %d -> %d: %s (%s -> %s, out through %s)\n", a, b, tp, peers[a].host, peers[b].host,
                   plans[a].nic_name[0] ? plans[a].nic_name : "the interface toward the peer");
    }
    if (nranks == 1) printf("  none (one rank)\n");
    status = 0;
out:
    ring__topo_free(file_topo);
    free(buf);
    free(plans);
    free(order);
    free(peers);
    return status;
}
