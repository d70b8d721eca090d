/*
 * Unit tests for the topology module (src/topo): CPU lists, RING_BIND, bus ids and device
 * filters, the host-contiguous ring order with fake host identities (no hwloc needed), and
 * the placement decisions on the synthetic hwloc XML topologies beside this file:
 *   two-socket-gpu0-nic1.xml  GPU on socket 0, the only NIC on socket 1
 *   two-socket-two-nic.xml    a NIC and a GPU on each socket
 *   two-socket-two-hca.xml    three HCAs, one behind a PCIe switch with a GPU
 *   no-numa.xml               two packages, no NUMA information, NIC on package 1
 *   two-socket-hbm.xml        two-socket-two-nic.xml with a 16 GiB HBM node (no CPUs) on package 1
 * Decisions that need hwloc are skipped, with the reason, in a build without it; the build
 * without hwloc has its own checks (no binding, no placement, a file is refused).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "net.h"
#include "topo.h"

static void clean_env(void)
{
    static const char *const vars[] = {
        "RING_BIND", "RING_SOCKET_IFNAME", "RING_IB_HCA", "RING_TOPO_FILE", "RING_TRANSPORT",
        "RING_LOCAL_RANK", "RING_LOCAL_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
        "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "TORCHELASTIC_RUN_ID",
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

TestSuite(topo, .init = clean_env);

#define NEED_HWLOC()                                                                               \
    do {                                                                                           \
        if (!RING_HAVE_HWLOC) cr_skip_test("built without hwloc (-Dhwloc=disabled): no topology to decide on"); \
    } while (0)

static const char *xml(const char *name)
{
    static char path[1024];
    const char *dir = getenv("RING_TEST_TOPO_DIR");
    cr_assert(dir, "RING_TEST_TOPO_DIR is not set (run through meson test)");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static ring__topo_t *load(const char *name)
{
    ring__topo_t *t = NULL;
    ring_result_t rc = ring__topo_load(NULL, xml(name), &t);
    cr_assert_eq(rc, RING_OK, "%s: %s", name, ring_comm_last_error(NULL));
    cr_assert(t->have_hwloc && t->from_file);
    return t;
}

static ring__topo_req_t req_for(int local_rank, int nlocal, const char *gpu)
{
    ring__topo_req_t r;
    memset(&r, 0, sizeof r);
    r.local_rank = local_rank;
    r.nlocal = nlocal;
    r.gpu_busid = gpu;
    return r;
}

static ring__topo_plan_t plan_of(const ring__topo_t *t, const ring__topo_req_t *r)
{
    ring__topo_plan_t p;
    ring_result_t rc = ring__topo_plan(NULL, t, r, &p);
    cr_assert_eq(rc, RING_OK, "plan: %s", ring_comm_last_error(NULL));
    return p;
}

static const char *nic(const ring__topo_t *t, const ring__topo_plan_t *p)
{
    return p->nic >= 0 ? t->devs[p->nic].name : "(none)";
}

static int numa_os(const ring__topo_t *t, const ring__topo_plan_t *p)
{
    return p->numa >= 0 ? t->numa[p->numa].os_index : -1;
}

static const char *cpus(const ring__cpumask_t *m)
{
    static char buf[256];
    return ring__cpumask_str(m, buf, sizeof buf);
}

static const ring__topo_dev_t *dev(const ring__topo_t *t, const char *name_or_busid)
{
    for (int i = 0; i < t->ndevs; i++)
        if (!strcmp(t->devs[i].name, name_or_busid) || !strcmp(t->devs[i].busid, name_or_busid)) return &t->devs[i];
    cr_assert_fail("no device %s in %s", name_or_busid, t->source);
    return NULL;
}

/* ---- CPU lists, modes, bus ids, filters ------------------------------------------------ */

Test(topo, cpumask_parse_and_format)
{
    ring__cpumask_t m;
    char buf[64];
    cr_assert_eq(ring__cpumask_parse("0-3,8-11", &m), 0);
    cr_assert_eq(ring__cpumask_count(&m), 8);
    cr_assert(ring__cpumask_isset(&m, 9) && !ring__cpumask_isset(&m, 4));
    cr_assert_str_eq(ring__cpumask_str(&m, buf, sizeof buf), "0-3,8-11");
    cr_assert_eq(ring__cpumask_parse("5", &m), 0);
    cr_assert_str_eq(ring__cpumask_str(&m, buf, sizeof buf), "5");
    cr_assert_eq(ring__cpumask_parse("4095", &m), 0);
    cr_assert_str_eq(ring__cpumask_str(&m, buf, sizeof buf), "4095");
    const char *bad[] = {"", "3-1", "1,", ",1", "a", "4096", "1-", "1 2", "0x3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(ring__cpumask_parse(bad[i], &m), -1, "\"%s\" accepted", bad[i]);
    ring__cpumask_zero(&m);
    cr_assert_str_eq(ring__cpumask_str(&m, buf, sizeof buf), "none");
    /* Every other CPU of 64: too long for 16 bytes, cut visibly. */
    for (int c = 0; c < 64; c += 2) ring__cpumask_set(&m, c);
    char small[16];
    ring__cpumask_str(&m, small, sizeof small);
    cr_assert(strlen(small) < sizeof small && !strcmp(small + strlen(small) - 3, "..."), "got \"%s\"", small);

    /* The kernel's list of online NUMA nodes, as /sys/devices/system/node/online has it. */
    cr_assert_eq(ring__numa_count_list("0\n"), 1);
    cr_assert_eq(ring__numa_count_list("0-1\n"), 2);
    cr_assert_eq(ring__numa_count_list("0,2-3"), 3);
    cr_assert_eq(ring__numa_count_list(""), 0);
    cr_assert_eq(ring__numa_count_list(NULL), 0);
    cr_assert_eq(ring__numa_count_list("junk"), 0);
    int nodes = ring__numa_nodes_online();
    cr_assert(nodes >= 0 && nodes <= 4096, "%d NUMA nodes online", nodes);

    ring__cpumask_t a, b, c;
    ring__cpumask_parse("0-7", &a);
    ring__cpumask_parse("4-5", &b);
    cr_assert(ring__cpumask_subset(&b, &a) && !ring__cpumask_subset(&a, &b));
    ring__cpumask_parse("6-9", &b);
    cr_assert(ring__cpumask_intersects(&a, &b));
    ring__cpumask_and(&c, &a, &b);
    cr_assert_str_eq(cpus(&c), "6-7");
}

Test(topo, current_affinity_is_read)
{
    ring__cpumask_t m;
    cr_assert_eq(ring__cpumask_current(&m), 0);
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    cr_assert_eq(ring__cpumask_count(&m), CPU_COUNT(&set));
}

Test(topo, bind_modes)
{
    cr_assert_eq(ring__topo_parse_bind(NULL), RING__BIND_AUTO);
    cr_assert_eq(ring__topo_parse_bind(""), RING__BIND_AUTO);
    cr_assert_eq(ring__topo_parse_bind("auto"), RING__BIND_AUTO);
    cr_assert_eq(ring__topo_parse_bind("FORCE"), RING__BIND_FORCE);
    cr_assert_eq(ring__topo_parse_bind("none"), RING__BIND_NONE);
    cr_assert_eq(ring__topo_parse_bind("yes"), -1);
    cr_assert_str_eq(ring__topo_bind_name(RING__BIND_FORCE), "force");

    ring__topo_req_t r;
    setenv("RING_BIND", "sometimes", 1);
    cr_assert_eq(ring__topo_req_init(NULL, NULL, &r), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_BIND=\"sometimes\""), "%s", ring_comm_last_error(NULL));
    setenv("RING_BIND", "none", 1);
    setenv("RING_SOCKET_IFNAME", "=eth1", 1);
    setenv("RING_IB_HCA", "mlx5_1:1", 1);
    cr_assert_eq(ring__topo_req_init(NULL, NULL, &r), RING_OK);
    cr_assert_eq(r.bind, RING__BIND_NONE);
    cr_assert_str_eq(r.nic_spec, "=eth1");
    cr_assert_str_eq(r.hca_spec, "mlx5_1:1");
    cr_assert(r.local_rank == 0 && r.nlocal == 1 && !r.gpu_busid && !r.use_hca && !r.bound_known);
}

/* One rank places nothing, but its RING_BIND is checked all the same: a typo that passed at
 * one rank would fail the same job at two. */
Test(topo, one_rank_checks_ring_bind)
{
    ring_comm_t *c = NULL;
    setenv("RING_BIND", "sometimes", 1);
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(c), "RING_BIND=\"sometimes\": expected auto, force or none"), "%s",
              ring_comm_last_error(c));
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
    setenv("RING_BIND", "force", 1);
    cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring_comm_destroy(c), RING_OK);
}

/* ringrun's local-rank pair (or the user's export of it) is checked as every RING_* variable:
 * a malformed one was skipped without a word, and the rank placed as if alone on its host. A
 * launcher's pair that is so is still skipped (discovery_env_local_rank). */
Test(topo, a_malformed_ring_local_pair_fails_init)
{
    static const char *const bad[][2] = {{"1", NULL}, {NULL, "4"}, {"x", "4"}, {"1", "4x"}, {"4", "4"},
                                         {"-1", "4"}, {"0", "0"}, {"", "4"}};
    ring__topo_req_t r;
    ring_comm_t *c = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *lr = bad[i][0], *ls = bad[i][1];
        if (lr) setenv("RING_LOCAL_RANK", lr, 1);
        else unsetenv("RING_LOCAL_RANK");
        if (ls) setenv("RING_LOCAL_SIZE", ls, 1);
        else unsetenv("RING_LOCAL_SIZE");
        cr_assert_eq(ring__topo_req_init(NULL, NULL, &r), RING_ERR_INVALID_ARG, "%s / %s", lr ? lr : "-",
                     ls ? ls : "-");
        cr_assert(strstr(ring_comm_last_error(NULL), "RING_LOCAL_RANK=") &&
                      strstr(ring_comm_last_error(NULL), "expected both"),
                  "%s", ring_comm_last_error(NULL));
        cr_assert_eq(ring_comm_init(&c, 1, 0, NULL), RING_ERR_INVALID_ARG, "%s / %s", lr ? lr : "-", ls ? ls : "-");
        cr_assert_eq(ring_comm_destroy(c), RING_OK);
        c = NULL;
    }
    setenv("RING_LOCAL_RANK", "3", 1);
    setenv("RING_LOCAL_SIZE", " 4 ", 1);
    cr_assert_eq(ring__topo_req_init(NULL, NULL, &r), RING_OK, "%s", ring_comm_last_error(NULL));
    setenv("RING_LOCAL_RANK", "", 1);
    setenv("RING_LOCAL_SIZE", "", 1);
    cr_assert_eq(ring__topo_req_init(NULL, NULL, &r), RING_OK, "empty is unset");
}

Test(topo, busid_canon)
{
    char out[20];
    cr_assert_eq(ring__topo_busid_canon("0000:3B:00.0", out), 0);
    cr_assert_str_eq(out, "0000:3b:00.0");
    cr_assert_eq(ring__topo_busid_canon("3b:00.1", out), 0); /* no domain */
    cr_assert_str_eq(out, "0000:3b:00.1");
    cr_assert_eq(ring__topo_busid_canon("00000000:D8:1F.7", out), 0); /* NVML's form */
    cr_assert_str_eq(out, "0000:d8:1f.7");
    cr_assert_eq(ring__topo_busid_canon("10001:01:00.0", out), 0); /* VMD domains are wider */
    cr_assert_str_eq(out, "10001:01:00.0");
    const char *bad[] = {"", "3b:00", "zz:00.0", "0000:3b:20.0", "0000:3b:00.8", "0000:3b:00.0x",
                         "0000:03b:00.0", ":3b:00.0", "1:2:3:00.0", "000000000:3b:00.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(ring__topo_busid_canon(bad[i], out), -1, "\"%s\" accepted", bad[i]);
    cr_assert_eq(ring__topo_busid_canon(NULL, out), -1);
}

Test(topo, device_filters)
{
    cr_assert(ring__topo_name_match("eth", "eth0"));
    cr_assert(ring__topo_name_match("ib,eth", "eth1"));
    cr_assert(!ring__topo_name_match("=eth", "eth0"));
    cr_assert(ring__topo_name_match("=eth0", "eth0"));
    cr_assert(!ring__topo_name_match("=eth0", "eth01"));
    cr_assert(!ring__topo_name_match("^docker,lo", "docker0"));
    cr_assert(!ring__topo_name_match("^docker,lo", "lo"));
    cr_assert(ring__topo_name_match("^docker,lo", "eth0"));
    cr_assert(ring__topo_name_match("mlx5_0:1", "mlx5_0"));
    cr_assert(!ring__topo_name_match("mlx5_0:1", "mlx5_1"));
    cr_assert(ring__topo_name_match("=mlx5_1:1,mlx5_3", "mlx5_1"));
    cr_assert(!ring__topo_name_match("^=mlx5_1:1", "mlx5_1"));
    cr_assert(ring__topo_name_match("^=mlx5_1:1", "mlx5_10"));
    /* The port is the matching entry's: it used to be the last colon's of the whole list. */
    cr_assert_eq(ring__hca_port_of("rxe0:1,mlx5_0:2", "rxe0"), 1);
    cr_assert_eq(ring__hca_port_of("rxe0:1,mlx5_0:2", "mlx5_0"), 2);
    cr_assert_eq(ring__hca_port_of("mlx5_0:2,rxe0", "rxe0"), 0);
    cr_assert_eq(ring__hca_port_of("=mlx5_1:1,mlx5_3", "mlx5_3"), 0);
    cr_assert_eq(ring__hca_port_of("^mlx5_0:1", "mlx5_1"), 0);
    cr_assert_eq(ring__hca_port_of("mlx5_0:1", "mlx5_1"), 0);
}

Test(topo, launcher_local_rank)
{
    int lr, nl;
    cr_assert_null(ring__topo_env_local_rank(&lr, &nl));
    cr_assert(lr == 0 && nl == 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    cr_assert_null(ring__topo_env_local_rank(&lr, &nl), "a rank without a size is not enough");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "openmpi");
    cr_assert(lr == 3 && nl == 4);
    setenv("RING_LOCAL_RANK", "1", 1); /* ringrun's own variables come first */
    setenv("RING_LOCAL_SIZE", "2", 1);
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "ringrun");
    cr_assert(lr == 1 && nl == 2);
    setenv("RING_LOCAL_RANK", "2", 1); /* inconsistent: skipped */
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "openmpi");
    /* LOCAL_RANK comes before mpirun's only where torchrun started the process, as the rank
     * does (ring__env_bootstrap). */
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "openmpi");
    cr_assert(lr == 3 && nl == 4);
    setenv("TORCHELASTIC_RUN_ID", "job7", 1);
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "torchrun");
    cr_assert(lr == 0 && nl == 1);
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "LOCAL_RANK/LOCAL_WORLD_SIZE");
    clean_env();
    setenv("SLURM_LOCALID", "2", 1);
    setenv("SLURM_NODEID", "2", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2),3", 1);
    cr_assert_str_eq(ring__topo_env_local_rank(&lr, &nl), "slurm");
    cr_assert(lr == 2 && nl == 3);
    setenv("SLURM_NODEID", "3", 1); /* beyond the list */
    cr_assert_null(ring__topo_env_local_rank(&lr, &nl));

    cr_assert_eq(ring__topo_slurm_tasks_on_node("4(x2),3", 0), 4);
    cr_assert_eq(ring__topo_slurm_tasks_on_node("4(x2),3", 1), 4);
    cr_assert_eq(ring__topo_slurm_tasks_on_node("4(x2),3", 2), 3);
    cr_assert_eq(ring__topo_slurm_tasks_on_node("8", 0), 8);
    const char *bad[] = {"", "x", "4(x", "4(x0)", "4,", "4(2)", "0", "4;3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(ring__topo_slurm_tasks_on_node(bad[i], 0), -1, "\"%s\" accepted", bad[i]);
}

/* ---- ring order ---------------------------------------------------------------------- */

/* peers from a host letter per rank ("abab"), all with the same boot id. */
static ring__peer_info_t *fake_peers(const char *hosts)
{
    int n = (int)strlen(hosts);
    ring__peer_info_t *p = calloc((size_t)n, sizeof *p);
    cr_assert(p);
    for (int r = 0; r < n; r++) {
        snprintf(p[r].host, sizeof p[r].host, "node-%c", hosts[r]);
        snprintf(p[r].bootid, sizeof p[r].bootid, "boot-%c", hosts[r]);
    }
    return p;
}

static void check_order(const char *hosts, const int *expect, int expect_hosts)
{
    int n = (int)strlen(hosts), nh = -1;
    ring__peer_info_t *p = fake_peers(hosts);
    int *order = calloc((size_t)n, sizeof *order);
    cr_assert_eq(ring__topo_ring_order(NULL, p, n, order, &nh), RING_OK);
    for (int i = 0; i < n; i++) cr_assert_eq(order[i], expect[i], "hosts %s: position %d is rank %d, want %d", hosts, i, order[i], expect[i]);
    cr_assert_eq(nh, expect_hosts);
    free(order);
    free(p);
}

Test(topo, ring_order_groups_hosts)
{
    check_order("abababab", (int[]){0, 2, 4, 6, 1, 3, 5, 7}, 2);
    check_order("baacb", (int[]){0, 4, 1, 2, 3}, 3); /* hosts in order of their lowest rank */
    check_order("aaaa", (int[]){0, 1, 2, 3}, 1);
    check_order("abcd", (int[]){0, 1, 2, 3}, 4);
    check_order("a", (int[]){0}, 1);
    check_order("aabbaabb", (int[]){0, 1, 4, 5, 2, 3, 6, 7}, 2);
}

Test(topo, ring_order_host_identity_is_name_and_boot_id)
{
    /* Same name, different boot id: two machines that were both called "localhost". */
    ring__peer_info_t p[4];
    memset(p, 0, sizeof p);
    for (int r = 0; r < 4; r++) {
        snprintf(p[r].host, sizeof p[r].host, "localhost");
        snprintf(p[r].bootid, sizeof p[r].bootid, r % 2 ? "boot-2" : "boot-1");
    }
    int order[4], nh;
    cr_assert_eq(ring__topo_ring_order(NULL, p, 4, order, &nh), RING_OK);
    cr_assert_eq(nh, 2);
    cr_assert(order[0] == 0 && order[1] == 2 && order[2] == 1 && order[3] == 3);
    cr_assert(!ring__topo_same_host(&p[0], &p[1]) && ring__topo_same_host(&p[0], &p[2]));
    cr_assert_eq(ring__topo_ring_order(NULL, p, 0, order, &nh), RING_ERR_INVALID_ARG);
}

/* Ranks of one host that do not all share memory (two RING_SHM_DIR identities: a container's
 * own /dev/shm, another user): those that do sit side by side, so the ring's edges inside the
 * host are shared memory; in rank order every edge was TCP. */
Test(topo, ring_order_keeps_ranks_that_share_memory_together)
{
    ring__peer_info_t p[4];
    memset(p, 0, sizeof p);
    for (int r = 0; r < 4; r++) {
        snprintf(p[r].host, sizeof p[r].host, "node");
        snprintf(p[r].bootid, sizeof p[r].bootid, "boot");
        p[r].flags = RING__PEER_SHM;
        /* Alike in their low 32 bits: identities are compared whole. */
        p[r].shm_id = r % 2 ? 0x5100000000000017ull : 0x1700000000000017ull;
    }
    int order[4], nh;
    cr_assert_eq(ring__topo_ring_order(NULL, p, 4, order, &nh), RING_OK);
    cr_assert_eq(nh, 1);
    int shm_edges = 0;
    for (int i = 0; i < 4; i++) shm_edges += ring__topo_shm_pair(&p[order[i]], &p[order[(i + 1) % 4]]);
    cr_assert_eq(shm_edges, 2, "order %d %d %d %d", order[0], order[1], order[2], order[3]);
}

/* Large random jobs: a permutation, hosts contiguous, hosts by lowest rank, ranks ascending
 * within a host, and the same answer from a shuffled copy of nothing but the same table. */
Test(topo, ring_order_properties_random)
{
    unsigned seed = 12345;
    for (int trial = 0; trial < 20; trial++) {
        int n = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 8) % 3000;
        int h = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 8) % 40;
        ring__peer_info_t *p = calloc((size_t)n, sizeof *p);
        int *order = calloc((size_t)n, sizeof *order), *order2 = calloc((size_t)n, sizeof *order2);
        int *seen = calloc((size_t)n, sizeof *seen), *host_done = calloc((size_t)h, sizeof *host_done);
        int *host_of = calloc((size_t)n, sizeof *host_of);
        cr_assert(p && order && order2 && seen && host_done && host_of);
        for (int r = 0; r < n; r++) {
            host_of[r] = (int)((seed = seed * 1103515245u + 12345u) >> 8) % h;
            snprintf(p[r].host, sizeof p[r].host, "h%d", host_of[r]);
            snprintf(p[r].bootid, sizeof p[r].bootid, "b%d", host_of[r] * 7);
        }
        int nh, nh2;
        cr_assert_eq(ring__topo_ring_order(NULL, p, n, order, &nh), RING_OK);
        cr_assert_eq(ring__topo_ring_order(NULL, p, n, order2, &nh2), RING_OK);
        cr_assert_eq(memcmp(order, order2, sizeof *order * (size_t)n), 0);
        int distinct = 0, groups = 0, last_first = -1;
        for (int r = 0; r < n; r++) distinct += !host_done[host_of[r]]++;
        memset(host_done, 0, sizeof *host_done * (size_t)h);
        for (int i = 0; i < n; i++) {
            int r = order[i];
            cr_assert(r >= 0 && r < n && !seen[r]++, "not a permutation");
            if (i == 0 || host_of[order[i - 1]] != host_of[r]) {
                cr_assert(!host_done[host_of[r]]++, "host h%d appears twice in the ring", host_of[r]);
                cr_assert(r > last_first, "hosts not in the order of their lowest rank");
                last_first = r;
                /* The first rank of a group is its host's lowest. */
                for (int q = 0; q < r; q++) cr_assert(host_of[q] != host_of[r]);
                groups++;
            } else {
                cr_assert(order[i - 1] < r, "ranks of a host not ascending");
            }
        }
        cr_assert_eq(groups, distinct);
        cr_assert_eq(nh, distinct);
        free(p), free(order), free(order2), free(seen), free(host_done), free(host_of);
    }
}

Test(topo, ring_order_string_neighbours_local_rank)
{
    ring__peer_info_t *p = fake_peers("aabbaabb");
    int order[8], nh, l, r, lr, nl;
    char buf[128];
    cr_assert_eq(ring__topo_ring_order(NULL, p, 8, order, &nh), RING_OK);
    cr_assert_str_eq(ring__topo_order_str(p, order, 8, buf, sizeof buf), "0 1 4 5 | 2 3 6 7 (2 hosts)");
    ring__topo_ring_neighbours(order, 8, 5, &l, &r);
    cr_assert(l == 4 && r == 2, "rank 5: left %d right %d", l, r);
    ring__topo_ring_neighbours(order, 8, 0, &l, &r);
    cr_assert(l == 7 && r == 1, "rank 0: left %d right %d", l, r);
    ring__topo_ring_neighbours(order, 8, 9, &l, &r);
    cr_assert(l == -1 && r == -1);
    ring__topo_local_rank(p, 8, 5, &lr, &nl);
    cr_assert(lr == 3 && nl == 4, "rank 5: local %d of %d", lr, nl);
    ring__topo_local_rank(p, 8, 2, &lr, &nl);
    cr_assert(lr == 0 && nl == 4);
    cr_assert_str_eq(ring__topo_edge_transport(&p[0], &p[1], 1, 0), "shm");
    cr_assert_str_eq(ring__topo_edge_transport(&p[0], &p[1], 0, 1), "tcp"); /* RING_TRANSPORT=tcp */
    cr_assert_str_eq(ring__topo_edge_transport(&p[1], &p[2], 1, 0), "tcp");
    cr_assert_str_eq(ring__topo_edge_transport(&p[1], &p[2], 1, 1), "rdma");
    free(p);

    p = fake_peers("aaaaaaaabbbbbbbb");
    int o16[16];
    cr_assert_eq(ring__topo_ring_order(NULL, p, 16, o16, &nh), RING_OK);
    cr_assert_str_eq(ring__topo_order_str(p, o16, 16, buf, sizeof buf), "0-7 | 8-15 (2 hosts)");
    /* Too short for the list: cut, but the host count survives. */
    char small[20];
    ring__topo_order_str(p, o16, 16, small, sizeof small);
    cr_assert(strstr(small, "...") && strstr(small, "(2 hosts)"), "got \"%s\"", small);
    free(p);

    p = fake_peers("a");
    cr_assert_eq(ring__topo_ring_order(NULL, p, 1, o16, &nh), RING_OK);
    cr_assert_str_eq(ring__topo_order_str(p, o16, 1, buf, sizeof buf), "0 (1 host)");
    free(p);
}

/* ---- discovery ------------------------------------------------------------------------- */

Test(topo, discovery_two_sockets)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-gpu0-nic1.xml");
    cr_assert_eq(t->npackages, 2);
    cr_assert_eq(t->nnuma, 2);
    cr_assert_eq(t->ncores, 8);
    cr_assert_eq(t->npus, 16);
    cr_assert_str_eq(cpus(&t->cpus), "0-15");
    cr_assert_eq(t->numa[0].os_index, 0);
    cr_assert_str_eq(cpus(&t->numa[0].cpus), "0-3,8-11");
    cr_assert_eq(t->numa[1].package, 1);
    cr_assert_eq(t->numa[1].bytes, 68719476736ull);
    cr_assert_eq(t->ndevs, 2);
    const ring__topo_dev_t *g = dev(t, "0000:3b:00.0"), *e = dev(t, "eth1");
    cr_assert_eq(g->kind, RING__TOPO_GPU);
    cr_assert(g->vendor == 0x10de && g->pci_class == 0x0302);
    cr_assert_eq(t->numa[g->numa].os_index, 0);
    cr_assert_eq(g->package, 0);
    cr_assert_str_eq(cpus(&g->cpus), "0-3,8-11");
    cr_assert_eq(e->kind, RING__TOPO_NET);
    cr_assert_str_eq(e->busid, "0000:af:00.0");
    cr_assert_eq(t->numa[e->numa].os_index, 1);
    cr_assert_str_eq(cpus(&e->cpus), "4-7,12-15");
    char buf[2048];
    ring__topo_describe(t, buf, sizeof buf);
    cr_assert(strstr(buf, "eth1: network, PCI 0000:af:00.0 [8086:1593], NUMA node 1 (package 1), CPUs 4-7,12-15"), "%s", buf);
    cr_assert(strstr(buf, "GPU 0000:3b:00.0 [10de:20b0] card0: NUMA node 0 (package 0)"), "%s", buf);
    ring__topo_free(t);
}

Test(topo, discovery_hcas_and_switch)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-two-hca.xml");
    int nnet = 0, nhca = 0, ngpu = 0;
    for (int i = 0; i < t->ndevs; i++) {
        nnet += t->devs[i].kind == RING__TOPO_NET;
        nhca += t->devs[i].kind == RING__TOPO_HCA;
        ngpu += t->devs[i].kind == RING__TOPO_GPU;
    }
    cr_assert(nnet == 3 && nhca == 3 && ngpu == 2, "net %d hca %d gpu %d", nnet, nhca, ngpu);
    const ring__topo_dev_t *m1 = dev(t, "mlx5_1"), *g1 = dev(t, "0000:d8:00.0"), *m2 = dev(t, "mlx5_2");
    cr_assert_eq(m1->kind, RING__TOPO_HCA);
    cr_assert_str_eq(m1->busid, "0000:d9:00.0");
    cr_assert(m1->nbridges == 1 && g1->nbridges == 1 && m1->bridges[0] == g1->bridges[0], "the switch is shared");
    cr_assert(m2->nbridges == 0 && m2->hostbridge && m2->hostbridge != m1->hostbridge);
    cr_assert_str_eq(dev(t, "ib1")->busid, "0000:d9:00.0");
    ring__topo_free(t);
}

/* The request every plan of a rank comes from (comm.c's placement, the verbs transport's HCA):
 * the launcher's local rank is in it, so that the ranks of a host share the HCAs out. The verbs
 * transport made its own with local rank 0 of 1, and every rank of a host took the same HCA. */
Test(topo, placement_request_carries_the_local_rank_to_the_hca_choice)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-two-hca.xml");
    ring_comm_t *comm = calloc(1, sizeof *comm);
    cr_assert_not_null(comm);
    comm->nranks = 4;
    comm->topo = t;
    char hca[2][64];
    for (int lr = 0; lr < 2; lr++) {
        char v[8];
        snprintf(v, sizeof v, "%d", lr);
        setenv("RING_LOCAL_RANK", v, 1);
        setenv("RING_LOCAL_SIZE", "2", 1);
        ring__topo_req_t r;
        const char *src = NULL;
        char gpu[32];
        cr_assert_eq(ring__placement_req(comm, &r, gpu, sizeof gpu, &src), RING_OK, "%s", ring_comm_last_error(NULL));
        cr_assert(src && r.local_rank == lr && r.nlocal == 2 && !r.local_unknown, "local rank %d of %d (%s)",
                  r.local_rank, r.nlocal, src ? src : "none");
        cr_assert_null(r.gpu_busid, "no CUDA context on this thread, so no GPU");
        r.use_hca = 1;
        ring__topo_plan_t p = plan_of(t, &r);
        snprintf(hca[lr], sizeof hca[lr], "%s", nic(t, &p));
    }
    unsetenv("RING_LOCAL_RANK");
    unsetenv("RING_LOCAL_SIZE");
    cr_assert_str_neq(hca[0], hca[1], "both local ranks took %s", hca[0]);
    free(comm);
    ring__topo_free(t);
}

/* A memory-only node (HBM, CXL memory) comes from hwloc with the CPUs of the package it hangs
 * under, the same as the DRAM node there. It used to count as a third node: eth1 and the GPU of
 * package 1 had no node (two under their package), and ranks were placed on the HBM node. */
Test(topo, a_memory_only_node_is_left_out)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-hbm.xml");
    cr_assert_eq(t->nnuma, 2, "%d nodes", t->nnuma);
    for (int i = 0; i < t->nnuma; i++) cr_assert_neq(t->numa[i].os_index, 2, "the HBM node is kept");
    const ring__topo_dev_t *e1 = dev(t, "eth1");
    cr_assert(e1->numa >= 0 && t->numa[e1->numa].os_index == 1, "eth1 on node %d", e1->numa);
    for (int lr = 0; lr < 3; lr++)
        for (int hca = 0; hca < 2; hca++) {
            ring__topo_req_t r = req_for(lr, 3, NULL);
            r.use_hca = hca;
            ring__topo_plan_t p = plan_of(t, &r);
            cr_assert_neq(numa_os(t, &p), 2, "local rank %d (%s): buffers on the HBM node: %s", lr, hca ? "rdma" : "tcp",
                          p.text);
        }
    ring__topo_t *u = load("two-socket-two-nic.xml");
    cr_assert_eq(u->nnuma, 2);
    ring__topo_free(u);
    ring__topo_free(t);
    /* The same kind of node hung under the machine with every CPU (CXL memory hwloc cannot
     * place): it left every device's node ambiguous, so a GPU's buffers were not placed, and
     * took a third of the ranks' buffers when no device decided. */
    t = load("two-socket-cxl-on-machine.xml");
    cr_assert_eq(t->nnuma, 2, "%d nodes", t->nnuma);
    for (int i = 0; i < t->nnuma; i++) cr_assert_neq(t->numa[i].os_index, 2, "the CXL node is kept");
    ring__topo_req_t r = req_for(0, 2, "0000:3b:00.0");
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_eq(numa_os(t, &p), 0, "a GPU on socket 0: %s", p.numa_why);
    for (int lr = 0; lr < 3; lr++) {
        r = req_for(lr, 3, NULL);
        p = plan_of(t, &r);
        cr_assert_neq(numa_os(t, &p), 2, "local rank %d: buffers on the CXL node: %s", lr, p.text);
    }
    ring__topo_free(t);
    /* The same past the first 64 nodes (the memory-only node is the 65th hwloc lists). */
    t = load("sixty-five-socket-memory-node.xml");
    cr_assert_eq(t->nnuma, 66, "%d nodes", t->nnuma);
    for (int i = 0; i < t->nnuma; i++) cr_assert_neq(t->numa[i].os_index, 66, "the memory-only node is kept");
    r = req_for(65, 66, NULL);
    p = plan_of(t, &r);
    cr_assert_eq(numa_os(t, &p), 65, "local rank 65 of 66: %s", p.text);
    ring__topo_free(t);
}

Test(topo, discovery_no_numa)
{
    NEED_HWLOC();
    ring__topo_t *t = load("no-numa.xml");
    cr_assert_eq(t->nnuma, 1);
    cr_assert_eq(t->npackages, 2);
    cr_assert_eq(t->numa[0].package, -1, "the only node spans both packages");
    const ring__topo_dev_t *e = dev(t, "eth0");
    cr_assert_eq(e->package, 1);
    cr_assert_str_eq(cpus(&e->cpus), "2-3");
    ring__topo_free(t);
}

Test(topo, load_errors_and_env, .timeout = 60)
{
    NEED_HWLOC();
    ring__topo_t *t = NULL;
    cr_assert_eq(ring__topo_load(NULL, "/nonexistent/topo.xml", &t), RING_ERR_INVALID_ARG);
    cr_assert_null(t);
    cr_assert(strstr(ring_comm_last_error(NULL), "/nonexistent/topo.xml"), "%s", ring_comm_last_error(NULL));
    /* A file that is not a topology at all. */
    cr_assert_eq(ring__topo_load(NULL, xml("meson.build"), &t), RING_ERR_INVALID_ARG);
    /* Not a regular file: a FIFO without a writer held init for good (hwloc opens it blocking). */
    char dir[] = "/tmp/ringtopo-fifo-XXXXXX", fifo[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/f", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    setenv("RING_TOPO_FILE", fifo, 1);
    ring_result_t frc = ring__topo_load(NULL, NULL, &t);
    unlink(fifo);
    cr_assert_eq(frc, RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "RING_TOPO_FILE=") &&
                  strstr(ring_comm_last_error(NULL), "not a regular file"),
              "%s", ring_comm_last_error(NULL));
    setenv("RING_TOPO_FILE", dir, 1);
    cr_assert_eq(ring__topo_load(NULL, NULL, &t), RING_ERR_INVALID_ARG);
    cr_assert(strstr(ring_comm_last_error(NULL), "not a regular file"), "%s", ring_comm_last_error(NULL));
    rmdir(dir);
    unsetenv("RING_TOPO_FILE");
    /* A file named to a tool may be a pipe (ringtopo --topo <(...)), written before it is read. */
    int pp[2];
    cr_assert_eq(pipe(pp), 0);
    FILE *x = fopen(xml("no-numa.xml"), "r");
    cr_assert_not_null(x);
    char chunk[4096];
    for (size_t got; (got = fread(chunk, 1, sizeof chunk, x)) > 0;) cr_assert_eq(write(pp[1], chunk, got), (ssize_t)got);
    fclose(x);
    close(pp[1]);
    char piped[64];
    snprintf(piped, sizeof piped, "/proc/self/fd/%d", pp[0]);
    cr_assert_eq(ring__topo_load(NULL, piped, &t), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(t->npus, 4);
    ring__topo_free(t);
    close(pp[0]);
    setenv("RING_TOPO_FILE", xml("no-numa.xml"), 1);
    cr_assert_eq(ring__topo_load(NULL, NULL, &t), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert(t->from_file && strstr(t->source, "no-numa.xml"));
    cr_assert_eq(t->npus, 4);
    /* A file's CPUs are not this machine's: the launcher's binding is unknown for it. */
    ring__topo_req_t r;
    cr_assert_eq(ring__topo_req_init(NULL, t, &r), RING_OK);
    cr_assert_eq(r.bound_known, 0);
    ring__topo_free(t);
}

/* ---- decisions ------------------------------------------------------------------------- */

Test(topo, gpu_decides_when_nic_is_on_the_other_socket)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-gpu0-nic1.xml");
    ring__topo_req_t r = req_for(0, 1, "0000:3B:00.0"); /* CUDA's upper case */
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_eq(p.gpu, (int)(dev(t, "0000:3b:00.0") - t->devs));
    cr_assert_str_eq(nic(t, &p), "eth1");
    cr_assert_str_eq(p.nic_name, "eth1");
    cr_assert_eq(p.nic_forced, 0);
    cr_assert(strstr(p.nic_why, "inter-socket"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 0, "buffers next to the GPU: %s", p.numa_why);
    cr_assert_eq(p.bind, 1);
    cr_assert_str_eq(cpus(&p.cpus), "0-3,8-11");
    cr_assert(strstr(p.text, "NIC: eth1: closest to GPU 0000:3b:00.0"), "%s", p.text);
    cr_assert(strstr(p.text, "buffers: NUMA node 0: closest to GPU 0000:3b:00.0"), "%s", p.text);
    cr_assert(strstr(p.text, "progress thread: CPUs 0-3,8-11 (NUMA node 0)"), "%s", p.text);
    cr_assert(strstr(p.text, "shown, not applied"), "%s", p.text);

    /* Without a GPU the NIC is the device in use. */
    r = req_for(0, 1, NULL);
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth1");
    cr_assert(strstr(p.nic_why, "the only one"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1);
    cr_assert(p.bind && !strcmp(cpus(&p.cpus), "4-7,12-15"));

    /* A GPU this topology does not have: said, and placed by the NIC. */
    r = req_for(0, 1, "0000:65:00.0");
    p = plan_of(t, &r);
    cr_assert_eq(p.gpu, -1);
    cr_assert(strstr(p.text, "GPU 0000:65:00.0 is not in the topology"), "%s", p.text);
    cr_assert_eq(numa_os(t, &p), 1);

    r = req_for(0, 1, "not-a-bus-id");
    ring__topo_plan_t bad;
    cr_assert_eq(ring__topo_plan(NULL, t, &r, &bad), RING_ERR_INVALID_ARG);
    r = req_for(2, 2, NULL);
    cr_assert_eq(ring__topo_plan(NULL, t, &r, &bad), RING_ERR_INVALID_ARG);
    ring__topo_free(t);
}

Test(topo, launcher_binding_is_left_alone_unless_forced)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-gpu0-nic1.xml");
    ring__topo_req_t r = req_for(0, 1, "0000:3b:00.0");
    r.bound_known = 1;
    ring__cpumask_parse("4-5", &r.bound); /* srun --cpu-bind put us on socket 1 */

    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert(p.launcher_bound && !p.bind);
    cr_assert_str_eq(cpus(&p.cpus), "4-5");
    cr_assert(strstr(p.cpus_why, "left as the launcher bound it"), "%s", p.cpus_why);
    cr_assert_eq(numa_os(t, &p), 0, "buffers still go next to the GPU");

    r.bind = RING__BIND_FORCE;
    p = plan_of(t, &r);
    cr_assert(p.launcher_bound && p.bind);
    cr_assert_str_eq(cpus(&p.cpus), "0-3,8-11");
    cr_assert(strstr(p.cpus_why, "replaces the launcher's binding"), "%s", p.cpus_why);

    r.bind = RING__BIND_NONE;
    p = plan_of(t, &r);
    cr_assert(!p.bind && p.numa == -1);
    cr_assert(strstr(p.text, "RING_BIND=none"), "%s", p.text);
    cr_assert_str_eq(nic(t, &p), "eth1", "the device choice stays");

    /* Bound to every CPU is not bound. */
    r.bind = RING__BIND_AUTO;
    ring__cpumask_parse("0-15", &r.bound);
    p = plan_of(t, &r);
    cr_assert(!p.launcher_bound && p.bind);
    ring__topo_free(t);
}

Test(topo, two_nics_follow_gpu_or_share_out)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-two-nic.xml");
    ring__topo_req_t r = req_for(0, 2, "0000:d8:00.0");
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth1", "%s", p.nic_why);
    cr_assert(strstr(p.nic_why, "local to the same CPUs") || strstr(p.nic_why, "same NUMA node"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1);
    cr_assert_str_eq(cpus(&p.cpus), "4-7,12-15");
    r = req_for(1, 2, "0000:3b:00.0");
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth0");
    cr_assert_eq(numa_os(t, &p), 0);

    /* No GPU: a host's ranks in blocks over the NICs, each with its NIC's node. */
    const char *want4[] = {"eth0", "eth0", "eth1", "eth1"};
    for (int lr = 0; lr < 4; lr++) {
        r = req_for(lr, 4, NULL);
        p = plan_of(t, &r);
        cr_assert_str_eq(nic(t, &p), want4[lr], "local rank %d of 4", lr);
        cr_assert_eq(numa_os(t, &p), lr < 2 ? 0 : 1);
    }
    r = req_for(1, 2, NULL);
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth1");
    cr_assert(strstr(p.nic_why, "local rank 1 of 2 takes device 2 of 2"), "%s", p.nic_why);
    r = req_for(0, 1, NULL);
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth0");

    /* No launcher said where this rank is among its host's: every rank would take eth0 and
     * node 0, so neither buffers nor the thread are placed, unless RING_BIND=force. */
    r = req_for(0, 1, NULL);
    r.local_unknown = 1;
    p = plan_of(t, &r);
    cr_assert(p.numa == -1 && !p.bind, "numa %d bind %d", p.numa, p.bind);
    cr_assert(strstr(p.numa_why, "RING_LOCAL_RANK") && strstr(p.cpus_why, "not bound"), "%s / %s", p.numa_why, p.cpus_why);
    r.bind = RING__BIND_FORCE;
    p = plan_of(t, &r);
    cr_assert(p.numa >= 0 && p.bind, "RING_BIND=force places anyway: %s / %s", p.numa_why, p.cpus_why);
    r = req_for(0, 1, "0000:d8:00.0");
    r.local_unknown = 1;
    p = plan_of(t, &r);
    cr_assert_eq(numa_os(t, &p), 1, "a GPU still decides: %s", p.numa_why);
    /* A memory policy of the process's own (numactl --membind) is kept for the buffers. */
    r.local_unknown = 0;
    r.own_mempolicy = 1;
    p = plan_of(t, &r);
    cr_assert(p.numa == -1 && strstr(p.numa_why, "memory policy of its own"), "%s", p.numa_why);
    r.bind = RING__BIND_FORCE;
    p = plan_of(t, &r);
    cr_assert_eq(numa_os(t, &p), 1, "RING_BIND=force places over it: %s", p.numa_why);

    /* A launcher binding on socket 1 picks socket 1's NIC and is kept. */
    r = req_for(0, 1, NULL);
    r.bound_known = 1;
    ring__cpumask_parse("5,13", &r.bound);
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth1", "%s", p.nic_why);
    cr_assert(!p.bind && numa_os(t, &p) == 1);
    ring__topo_free(t);
}

/* Ranks of a host with interleaved placements take every device of a tie. The local rank
 * shared them out only where the ranks that tie had consecutive local ranks: GPUs numbered
 * alternately between the sockets, and mpirun --map-by socket --bind-to core (local ranks 1
 * and 3 on socket 1, bound to cores 4 and 5), left a socket's second NIC or HCA idle. */
Test(topo, interleaved_ranks_share_out_every_device_of_a_tie)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-four-nic-four-gpu.xml");
    const char *gpus[] = {"0000:3b:00.0", "0000:d8:00.0", "0000:3d:00.0", "0000:da:00.0"};
    const char *want[] = {"eth0", "eth1", "eth2", "eth3"};
    for (int lr = 0; lr < 4; lr++) {
        ring__topo_req_t r = req_for(lr, 4, gpus[lr]);
        ring__topo_plan_t p = plan_of(t, &r);
        cr_assert_str_eq(nic(t, &p), want[lr], "local rank %d, GPU %s: %s", lr, gpus[lr], p.nic_why);
    }
    ring__topo_free(t);
    t = load("two-socket-two-hca.xml");
    const char *bound[] = {"0", "4", "1", "5"};
    char seen[4][32];
    for (int lr = 0; lr < 4; lr++) {
        ring__topo_req_t r = req_for(lr, 4, NULL);
        r.use_hca = 1;
        r.bound_known = 1;
        cr_assert_eq(ring__cpumask_parse(bound[lr], &r.bound), 0);
        ring__topo_plan_t p = plan_of(t, &r);
        snprintf(seen[lr], sizeof seen[lr], "%s", nic(t, &p));
    }
    cr_assert_str_neq(seen[1], seen[3], "the ranks bound to cores 4 and 5 both took %s", seen[1]);
    cr_assert_str_eq(seen[0], seen[2], "socket 0 has one HCA: %s and %s", seen[0], seen[2]);
    ring__topo_free(t);
}

/* No device to go by: the launcher's CPUs, else the ranks of a host over the NUMA nodes. */
Test(topo, no_device_falls_back_to_cpus_then_nodes)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-gpu0-nic1.xml");
    ring__topo_req_t r = req_for(1, 2, NULL);
    r.use_hca = 1; /* RDMA on a machine without HCAs */
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_eq(p.nic, -1);
    cr_assert_str_eq(p.nic_name, "");
    cr_assert(strstr(p.nic_why, "no OpenFabrics device in the topology"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1, "%s", p.numa_why);
    cr_assert(p.bind && !strcmp(cpus(&p.cpus), "4-7,12-15"));
    r.local_rank = 0;
    p = plan_of(t, &r);
    cr_assert_eq(numa_os(t, &p), 0);

    r = req_for(0, 1, NULL);
    r.nic_spec = "bond0";
    r.bound_known = 1;
    ring__cpumask_parse("5,13", &r.bound);
    p = plan_of(t, &r);
    cr_assert_eq(p.nic, -1);
    cr_assert_eq(numa_os(t, &p), 1, "%s", p.numa_why);
    cr_assert(!p.bind && !strcmp(cpus(&p.cpus), "5,13"));
    /* Bound across both nodes: no single node to put the buffers on. */
    ring__cpumask_parse("3-4", &r.bound);
    p = plan_of(t, &r);
    cr_assert_eq(p.numa, -1);
    cr_assert(strstr(p.numa_why, "not local to one NUMA node"), "%s", p.numa_why);
    ring__topo_free(t);
}

Test(topo, socket_ifname_overrides)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-two-nic.xml");
    ring__topo_req_t r = req_for(0, 1, "0000:d8:00.0");
    r.nic_spec = "eth0";
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth0");
    cr_assert(p.nic_forced);
    cr_assert(strstr(p.nic_why, "RING_SOCKET_IFNAME=\"eth0\" allows 1 of 2"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1, "buffers stay with the GPU");

    r.nic_spec = "^eth1";
    r.gpu_busid = NULL;
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth0");

    /* An interface hwloc does not show (bond, VLAN, loopback) goes to the transport as given. */
    r.nic_spec = "bond0";
    r.gpu_busid = "0000:d8:00.0";
    p = plan_of(t, &r);
    cr_assert_eq(p.nic, -1);
    cr_assert_str_eq(p.nic_name, "bond0");
    cr_assert(p.nic_forced);
    cr_assert(strstr(p.nic_why, "matches no network device in the topology (found: eth0, eth1)"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1);
    ring__topo_free(t);
}

Test(topo, hca_closest_to_gpu_and_ib_hca_override)
{
    NEED_HWLOC();
    ring__topo_t *t = load("two-socket-two-hca.xml");
    ring__topo_req_t r = req_for(0, 1, "0000:d8:00.0");
    r.use_hca = 1;
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "mlx5_1", "%s", p.nic_why);
    cr_assert(strstr(p.nic_why, "behind the same PCIe switch"), "%s", p.nic_why);
    cr_assert_eq(numa_os(t, &p), 1);

    r.gpu_busid = "0000:3b:00.0";
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "mlx5_0");
    cr_assert_eq(numa_os(t, &p), 0);

    r.hca_spec = "mlx5_2";
    r.gpu_busid = "0000:d8:00.0";
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "mlx5_2");
    cr_assert(p.nic_forced);
    r.hca_spec = "=mlx5_0:1";
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "mlx5_0");
    cr_assert(strstr(p.nic_why, "on another socket"), "%s", p.nic_why);
    r.hca_spec = "mlx4";
    p = plan_of(t, &r);
    cr_assert(p.nic == -1 && !strcmp(p.nic_name, "mlx4"));
    cr_assert(strstr(p.nic_why, "found: mlx5_0, mlx5_2, mlx5_1"), "%s", p.nic_why);

    /* TCP on the same machine: the IPoIB interface behind the GPU's switch. */
    r = req_for(0, 1, "0000:d8:00.0");
    p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "ib1");
    ring__topo_free(t);
}

Test(topo, no_numa_binds_to_the_package_but_places_nothing)
{
    NEED_HWLOC();
    ring__topo_t *t = load("no-numa.xml");
    ring__topo_req_t r = req_for(0, 1, NULL);
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert_str_eq(nic(t, &p), "eth0");
    cr_assert_eq(p.numa, -1);
    cr_assert(strstr(p.numa_why, "one NUMA node"), "%s", p.numa_why);
    cr_assert_eq(p.bind, 1);
    cr_assert_str_eq(cpus(&p.cpus), "2-3");
    cr_assert(strstr(p.cpus_why, "CPUs 2-3 (package 1): closest to eth0"), "%s", p.cpus_why);

    /* A file plan is never applied to this machine. */
    char why[256];
    cr_assert_eq(ring__topo_bind_thread(t, &p, NULL, why, sizeof why), 0);
    cr_assert(strstr(why, "not this machine"), "%s", why);
    void *m = ring__topo_alloc(t, &p, 4096, why, sizeof why);
    cr_assert_not_null(m);
    ring__topo_free_mem(m, 4096);
    ring__topo_free(t);
}

/* ---- this machine -------------------------------------------------------------------- */

struct bind_arg {
    const ring__topo_t *t;
    ring__topo_plan_t plan;
    int rc;
    char why[256];
    ring__cpumask_t after;
};

static void *bind_self(void *p)
{
    struct bind_arg *a = p;
    a->rc = ring__topo_bind_thread(a->t, &a->plan, NULL, a->why, sizeof a->why);
    ring__cpumask_current(&a->after);
    return NULL;
}

/* The machine through the process-wide topology, as init gets it (loading the machine again
 * and again is slow, and leaks inside libpciaccess). */
Test(topo, this_machine_bind_and_alloc)
{
    NEED_HWLOC();
    const ring__topo_t *t = NULL, *t2 = NULL;
    cr_assert_eq(ring__topo_get(NULL, &t), RING_OK, "%s", ring_comm_last_error(NULL));
    cr_assert_eq(ring__topo_get(NULL, &t2), RING_OK);
    cr_assert_eq(t, t2, "loaded once per process");
    cr_assert(t->have_hwloc && !t->from_file && t->npus >= 1 && t->nnuma >= 1);
    cr_assert(!ring__cpumask_empty(&t->cpus));
    ring__topo_req_t r;
    cr_assert_eq(ring__topo_req_init(NULL, t, &r), RING_OK);
    cr_assert_eq(r.bound_known, 1);
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert(p.text[0]);

    /* Bind a fresh thread to the first CPU we may use: the plan as init would apply it. */
    struct bind_arg a = {.t = t, .plan = p};
    int first = 0;
    while (!ring__cpumask_isset(&t->cpus, first)) first++;
    a.plan.bind = 1;
    ring__cpumask_zero(&a.plan.cpus);
    ring__cpumask_set(&a.plan.cpus, first);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, bind_self, &a), 0);
    pthread_join(th, NULL);
    cr_assert_eq(a.rc, 1, "%s", a.why);
    cr_assert_eq(ring__cpumask_count(&a.after), 1);
    cr_assert(ring__cpumask_isset(&a.after, first));

    /* Memory on node 0's index: page-aligned, zeroed, usable; bound unless the system forbids
     * mbind (containers without CAP_SYS_NICE), in which case it says so. */
    ring__topo_plan_t mp = p;
    mp.numa = 0;
    char why[256];
    size_t len = 3 * 4096 + 5;
    unsigned char *m = ring__topo_alloc(t, &mp, len, why, sizeof why);
    cr_assert_not_null(m, "%s", why);
    cr_assert_eq((uintptr_t)m % 4096, 0);
    for (size_t i = 0; i < len; i++) cr_assert_eq(m[i], 0);
    memset(m, 0xab, len);
    char want[64];
    snprintf(want, sizeof want, "on NUMA node %d", t->numa[0].os_index);
    cr_assert(!strcmp(why, want) || strstr(why, "failed: "), "%s", why);
    if (strcmp(why, want)) cr_log_warn("NUMA binding refused here: %s", why);
    ring__topo_free_mem(m, len);

    /* An existing mapping (a shared-memory segment) placed before first touch. */
    unsigned char *seg = ring__topo_alloc(t, &p, 65536, why, sizeof why);
    cr_assert_not_null(seg);
    int placed = ring__topo_place(t, &mp, seg, 65536, why, sizeof why);
    cr_assert(placed == 1 ? !strcmp(why, want) : placed == -1 && strstr(why, "failed: "), "%d %s", placed, why);
    seg[0] = 1;
    ring__topo_free_mem(seg, 65536);
}

/* ---- ringtopo ------------------------------------------------------------------------ */

/* Run ringtopo with args (stderr folded into stdout); returns its exit status. */
static int ringtopo(const char *args, char *out, size_t len)
{
    const char *exe = getenv("RING_TEST_RINGTOPO");
    cr_assert(exe, "RING_TEST_RINGTOPO is not set (run through meson test)");
    char cmd[2048];
    cr_assert((size_t)snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", exe, args) < sizeof cmd, "command too long");
    FILE *f = popen(cmd, "r");
    cr_assert(f, "popen %s", cmd);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    cr_assert(WIFEXITED(st), "%s: killed", cmd);
    return WEXITSTATUS(st);
}

Test(topo, ringtopo_tool)
{
    static char out[65536];
    char args[1200];
    cr_assert_eq(ringtopo("--bind maybe", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--bind: 'maybe'"), "%s", out);
    cr_assert_eq(ringtopo("--hosts a,b --nranks 3", out, sizeof out), 2, "%s", out);
    cr_assert_eq(ringtopo("--gpu 3b:00", out, sizeof out), 2, "%s", out);
    cr_assert_eq(ringtopo("stray", out, sizeof out), 2, "%s", out);
    /* This machine, ranks on fake hosts: the ring order needs no hwloc. */
    cr_assert_eq(ringtopo("--hosts a,b,a,b", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "ring order: 0 2 | 1 3 (2 hosts)"), "%s", out);
    cr_assert(strstr(out, "0 -> 2: shm (both on a)"), "%s", out);
    cr_assert(strstr(out, "2 -> 1: tcp (a -> b"), "%s", out);

    snprintf(args, sizeof args, "--topo '%s' --hosts node-a*2,node-b*2 --gpu 0000:3b:00.0", xml("two-socket-gpu0-nic1.xml"));
    int rc = ringtopo(args, out, sizeof out);
    if (!RING_HAVE_HWLOC) {
        cr_assert_eq(rc, 1, "%s", out);
        cr_assert(strstr(out, "this build has no hwloc"), "%s", out);
        return;
    }
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "eth1: network, PCI 0000:af:00.0 [8086:1593], NUMA node 1 (package 1), CPUs 4-7,12-15"), "%s", out);
    cr_assert(strstr(out, "rank 3 (host node-b, local rank 1 of 2, GPU 0000:3b:00.0):\n"
                          "  NIC: eth1: closest to GPU 0000:3b:00.0 (on another socket: traffic crosses the inter-socket link)\n"
                          "  buffers: NUMA node 0: closest to GPU 0000:3b:00.0\n"
                          "  progress thread: CPUs 0-3,8-11 (NUMA node 0): closest to GPU 0000:3b:00.0\n"),
              "%s", out);
    cr_assert(strstr(out, "ring order: 0 1 | 2 3 (2 hosts)\nthe ring crosses the network 2 times"), "%s", out);
    cr_assert(strstr(out, "1 -> 2: tcp (node-a -> node-b, out through eth1)"), "%s", out);

    snprintf(args, sizeof args, "--topo '%s' --rdma --gpu 0000:d8:00.0 --hosts x,y", xml("two-socket-two-hca.xml"));
    cr_assert_eq(ringtopo(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "0 -> 1: rdma (x -> y, out through mlx5_1)"), "%s", out);
    cr_assert_eq(ringtopo("--topo /nonexistent.xml", out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "topology file \"/nonexistent.xml\""), "%s", out);
}

/* No topology at all (a machine hwloc could not read): nothing bound or placed, said so. */
Test(topo, plan_without_topology)
{
    ring__topo_req_t r = req_for(0, 1, "0000:3b:00.0");
    r.nic_spec = "=eth1";
    ring__topo_plan_t p = plan_of(NULL, &r);
    cr_assert(!p.bind && p.numa == -1 && p.nic == -1 && p.gpu == -1 && p.nic_forced);
    cr_assert_str_eq(p.nic_name, "=eth1");
    cr_assert(strstr(p.text, "progress thread: not bound (no topology)"), "%s", p.text);
    char why[256];
    cr_assert_eq(ring__topo_bind_thread(NULL, &p, NULL, why, sizeof why), 0);
    void *m = ring__topo_alloc(NULL, &p, 10, why, sizeof why);
    cr_assert_not_null(m);
    cr_assert_str_eq(why, "ordinary allocation (no topology)");
    ring__topo_free_mem(m, 10);
}

/* ---- the build without hwloc --------------------------------------------------------- */

Test(topo, without_hwloc_nothing_is_placed)
{
    if (RING_HAVE_HWLOC) cr_skip_test("this build has hwloc: the no-hwloc behaviour is checked with -Dhwloc=disabled");
    const ring__topo_t *shared = NULL;
    cr_assert_eq(ring__topo_get(NULL, &shared), RING_OK);
    cr_assert(shared && !shared->have_hwloc);
    ring__topo_t *t = NULL;
    cr_assert_eq(ring__topo_load(NULL, NULL, &t), RING_OK);
    cr_assert_eq(t->have_hwloc, 0);
    ring__topo_req_t r = req_for(0, 1, "0000:3b:00.0");
    r.nic_spec = "eth0";
    ring__topo_plan_t p = plan_of(t, &r);
    cr_assert(!p.bind && p.numa == -1 && p.nic == -1 && p.gpu == -1);
    cr_assert_str_eq(p.nic_name, "eth0");
    cr_assert(strstr(p.text, "built without hwloc"), "%s", p.text);
    char why[256];
    cr_assert_eq(ring__topo_bind_thread(t, &p, NULL, why, sizeof why), 0);
    void *m = ring__topo_alloc(t, &p, 100, why, sizeof why);
    cr_assert_not_null(m);
    memset(m, 1, 100);
    ring__topo_free_mem(m, 100);
    ring__topo_free(t);

    t = NULL;
    cr_assert_eq(ring__topo_load(NULL, "x.xml", &t), RING_ERR_UNSUPPORTED);
    cr_assert_null(t);
    cr_assert(strstr(ring_comm_last_error(NULL), "no hwloc"), "%s", ring_comm_last_error(NULL));
    setenv("RING_TOPO_FILE", "y.xml", 1);
    cr_assert_eq(ring__topo_load(NULL, NULL, &t), RING_ERR_UNSUPPORTED);
}
