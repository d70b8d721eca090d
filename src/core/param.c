/* Environment parsing and parameter resolution. See param.h and docs/env.md. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "param.h"

int ring__parse_size(const char *s, size_t *out)
{
    if (!s) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b')) end += 2;
    else if (shift && (end[0] == 'B' || end[0] == 'b')) end++;
    else if (!shift && (end[0] == 'B' || end[0] == 'b')) end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    if (shift && v > (SIZE_MAX >> shift)) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

int ring__parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s) return -1; /* no digits: "" and "  " are not 0 */
    while (isspace((unsigned char)*end)) end++;
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int ring__parse_hostport(const char *s, char *host, size_t hostlen, char *port, size_t portlen)
{
    if (!s || !*s) return -1;
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') return -1;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        if (memchr(s, ':', (size_t)(colon - s))) return -1; /* bare IPv6 needs brackets */
        hl = (size_t)(colon - s);
    }
    const char *p = colon + 1;
    long long pv;
    if (hl == 0 || hl >= hostlen || ring__parse_int(p, 1, 65535, &pv) != 0) return -1;
    if (strlen(p) >= portlen) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, portlen, "%lld", pv);
    return 0;
}

int ring__parse_gid_range(const char *s, uint8_t net[16], int *prefix)
{
    char a[64];
    const char *slash = s ? strchr(s, '/') : NULL;
    /* A digit first: ring__parse_int would take "/ 8" and "/+8". */
    if (!slash || (size_t)(slash - s) >= sizeof a || !isdigit((unsigned char)slash[1])) return -1;
    memcpy(a, s, (size_t)(slash - s));
    a[slash - s] = '\0';
    long long len;
    memset(net, 0, 16);
    if (inet_pton(AF_INET, a, net + 12) == 1) {
        if (ring__parse_int(slash + 1, 0, 32, &len) != 0) return -1;
        net[10] = net[11] = 0xff;
        *prefix = 96 + (int)len;
        return 0;
    }
    if (inet_pton(AF_INET6, a, net) != 1 || ring__parse_int(slash + 1, 0, 128, &len) != 0) return -1;
    *prefix = (int)len;
    return 0;
}

int ring__parse_port_range(const char *s, int *lo, int *hi)
{
    char a[16], b[16];
    const char *dash = s ? strchr(s, '-') : NULL;
    if (!dash || (size_t)(dash - s) >= sizeof a || strlen(dash + 1) >= sizeof b) return -1;
    memcpy(a, s, (size_t)(dash - s));
    a[dash - s] = '\0';
    strcpy(b, dash + 1);
    long long l, h;
    if (ring__parse_int(a, 1, 65535, &l) || ring__parse_int(b, 1, 65535, &h) || l > h) return -1;
    *lo = (int)l;
    *hi = (int)h;
    return 0;
}

int ring__hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

void ring__secret_from_string(const char *s, unsigned char out[16])
{
    size_t n = strlen(s);
    int hex = n == 32;
    for (size_t i = 0; hex && i < 32; i++) hex = ring__hexval((unsigned char)s[i]) >= 0;
    if (hex) {
        for (int i = 0; i < 16; i++)
            out[i] = (unsigned char)(ring__hexval((unsigned char)s[2 * i]) << 4 | ring__hexval((unsigned char)s[2 * i + 1]));
        return;
    }
    /* Not a key: stretch the string into 128 bits with two independent FNV-1a streams. It is
     * only as secret as the string is; ringrun and docs recommend 32 random hex digits. */
    uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
    for (size_t i = 0; i < n; i++) {
        h1 = (h1 ^ (unsigned char)s[i]) * 0x100000001b3ULL;
        h2 = (h2 ^ (unsigned char)s[n - 1 - i]) * 0x100000001b3ULL;
    }
    memcpy(out, &h1, 8);
    memcpy(out + 8, &h2, 8);
}

/* Only this layout so far; a later one accepts this size too and fills only its fields. */
ring_result_t ring_config_init_sized(ring_config_t *cfg, size_t cfg_size)
{
    if (!cfg) return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_config_init: cfg is NULL");
    if (cfg_size != sizeof *cfg)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                            "ring_config_init: the program's ring_config_t has %zu bytes, this library's %zu "
                            "(built against another ringcomm.h?)",
                            cfg_size, sizeof *cfg);
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    ring__params_t p;
    ring_result_t rc = ring__params_resolve(&p, NULL);
    if (rc != RING_OK) return rc;
    cfg->timeout_ms = p.timeout_ms;
    cfg->chunk_bytes = p.chunk_bytes;
    cfg->nsocks = p.nsocks;
    cfg->pipeline_depth = p.pipeline_depth;
    cfg->secret = getenv("RING_SECRET");
    cfg->socket_ifname = getenv("RING_SOCKET_IFNAME");
    return RING_OK;
}

static ring_result_t env_int(const char *name, long long lo, long long hi, long long *v)
{
    const char *s = getenv(name);
    if (!s || !*s) return RING_OK;
    if (ring__parse_int(s, lo, hi, v) != 0)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "%s=\"%s\": expected an integer in [%lld, %lld]",
                            name, s, lo, hi);
    return RING_OK;
}

/* An int-sized setting: def where unset or empty. */
static ring_result_t env_small(const char *name, int lo, int hi, int def, int *v)
{
    long long q = def;
    ring_result_t rc = env_int(name, lo, hi, &q);
    *v = (int)q;
    return rc;
}

/* A keyword variable: unset or empty leaves *v; one of names[i] sets values[i]; anything else
 * is RING_ERR_INVALID_ARG, saying what was `expected`. */
static ring_result_t env_choice(const char *name, const char *const *names, const int *values, int n,
                                const char *expected, int *v)
{
    const char *s = getenv(name);
    if (!s || !*s) return RING_OK;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *v = values[i];
            return RING_OK;
        }
    return ring__seterr(NULL, RING_ERR_INVALID_ARG, "%s=\"%s\": expected %s", name, s, expected);
}

static ring_result_t env_size(const char *name, size_t lo, size_t hi, size_t *v)
{
    const char *s = getenv(name);
    if (!s || !*s) return RING_OK;
    size_t x;
    if (ring__parse_size(s, &x) != 0 || x < lo || x > hi) {
        if (hi == SIZE_MAX)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "%s=\"%s\": expected a size of at least %zu bytes (K/M/G/T suffixes allowed)", name, s, lo);
        return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                            "%s=\"%s\": expected a size in [%zu, %zu] bytes (K/M/G/T suffixes allowed)",
                            name, s, lo, hi);
    }
    *v = x;
    return RING_OK;
}

#define RING__MIN_CHUNK 64
#define RING__MIN_SOCKBUF ((size_t)16 * 1024)
#define RING__MAX_CHUNK ((size_t)1 << 30)

ring_result_t ring__params_resolve(ring__params_t *p, const ring_config_t *cfg)
{
    ring_result_t rc;
    memset(p, 0, sizeof *p);
    long long v;

    v = RING__DEFAULT_TIMEOUT_MS;
    RING_CHECK(env_int("RING_TIMEOUT_MS", 1, 86400000LL * 7, &v));
    p->timeout_ms = (int)v;
    p->chunk_bytes = RING__DEFAULT_CHUNK_BYTES;
    RING_CHECK(env_size("RING_CHUNK_BYTES", RING__MIN_CHUNK, RING__MAX_CHUNK, &p->chunk_bytes));
    /* auto (0): ring__tcp_pair_nsocks picks per pair. */
    v = 0;
    const char *ns = getenv("RING_NSOCKS");
    if (ns && *ns && strcmp(ns, "auto") && ring__parse_int(ns, 1, RING__MAX_NSOCKS, &v) != 0) {
        rc = ring__seterr(NULL, RING_ERR_INVALID_ARG, "RING_NSOCKS=\"%s\": expected auto or an integer in [1, %d]", ns,
                          RING__MAX_NSOCKS);
        goto fail;
    }
    p->nsocks = (int)v;
    v = 1;
    RING_CHECK(env_int("RING_TCP_DUPLEX", 0, 1, &v));
    p->tcp_duplex = (int)v;
    snprintf(p->tcp_cc, sizeof p->tcp_cc, "auto");
    const char *cc = getenv("RING_TCP_CONGESTION");
    if (cc && *cc) {
        /* The kernel's names (TCP_CA_NAME_MAX is 16 with the NUL): whether this one exists
         * and may be used shows when the first socket asks for it. */
        size_t n = strlen(cc);
        int ok = n < sizeof p->tcp_cc;
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)cc[i]) || cc[i] == '_' || cc[i] == '-';
        if (!ok)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "RING_TCP_CONGESTION=\"%s\": expected auto, system or the name of a TCP congestion "
                                "control algorithm (at most %zu letters, digits, _ or -)",
                                cc, sizeof p->tcp_cc - 1);
        snprintf(p->tcp_cc, sizeof p->tcp_cc, "%s", cc);
    }
    v = RING__DEFAULT_TCP_RTO_MAX_MS;
    RING_CHECK(env_int("RING_TCP_RTO_MAX_MS", 0, RING__MAX_TCP_RTO_MAX_MS, &v));
    if (v && v < RING__MIN_TCP_RTO_MAX_MS) {
        rc = ring__seterr(NULL, RING_ERR_INVALID_ARG,
                          "RING_TCP_RTO_MAX_MS=\"%s\": expected 0 (the kernel's) or an integer in [%d, %d] (the "
                          "kernel takes no less than 1 s)",
                          getenv("RING_TCP_RTO_MAX_MS"), RING__MIN_TCP_RTO_MAX_MS, RING__MAX_TCP_RTO_MAX_MS);
        goto fail;
    }
    p->tcp_rto_max_ms = (int)v;
    p->tcp_rto_max_set = getenv("RING_TCP_RTO_MAX_MS") && *getenv("RING_TCP_RTO_MAX_MS");
    v = RING__DEFAULT_PIPELINE_DEPTH;
    RING_CHECK(env_int("RING_PIPELINE_DEPTH", 1, RING__MAX_PIPELINE_DEPTH, &v));
    p->pipeline_depth = (int)v;
    v = RING__DEFAULT_SPIN_US;
    RING_CHECK(env_int("RING_SPIN_US", 0, 1000000, &v));
    p->spin_us = (int)v;
    p->sockbuf_bytes = 0;
    RING_CHECK(env_size("RING_SOCKBUF_BYTES", 0, (size_t)1 << 30, &p->sockbuf_bytes));
    if (p->sockbuf_bytes && p->sockbuf_bytes < RING__MIN_SOCKBUF) {
        /* Below it TCP crawls rather than fails: 2 ranks, a 64 KiB all-reduce took 2.3 s with 4
         * KiB and 1 s with 8 KiB (44 ms with 16 KiB, 24 us with 64 KiB), and 1 MiB with 1 byte
         * never finished in 100 s; bytes still trickled, so RING_TIMEOUT_MS never fired. 16 KiB
         * stays allowed: slow, but tests use it to fill a socket quickly. */
        rc = ring__seterr(NULL, RING_ERR_INVALID_ARG,
                          "RING_SOCKBUF_BYTES=\"%s\": expected 0 (the kernel's autotuning) or a size in [%zu, %zu] "
                          "bytes (K/M/G suffixes allowed)",
                          getenv("RING_SOCKBUF_BYTES"), (size_t)RING__MIN_SOCKBUF, (size_t)1 << 30);
        goto fail;
    }
    p->rd_max_bytes = RING__DEFAULT_RD_MAX_BYTES;
    RING_CHECK(env_size("RING_RD_MAX_BYTES", 0, RING__MAX_RD_BYTES, &p->rd_max_bytes));
    p->rd_max_set = getenv("RING_RD_MAX_BYTES") && *getenv("RING_RD_MAX_BYTES");
    p->tree_max_bytes = RING__DEFAULT_TREE_MAX_BYTES;
    p->rh_max_bytes = RING__DEFAULT_RH_MAX_BYTES;
    RING_CHECK(env_size("RING_RH_MAX_BYTES", 0, RING__MAX_RD_BYTES, &p->rh_max_bytes));
    p->rh_max_set = getenv("RING_RH_MAX_BYTES") && *getenv("RING_RH_MAX_BYTES");
    RING_CHECK(env_size("RING_TREE_MAX_BYTES", 0, RING__MAX_RD_BYTES, &p->tree_max_bytes));
    p->sm_max_bytes = RING__DEFAULT_SM_MAX_BYTES;
    RING_CHECK(env_size("RING_SM_MAX_BYTES", 0, RING__MAX_SM_BYTES, &p->sm_max_bytes));
    p->sm_max_set = getenv("RING_SM_MAX_BYTES") && *getenv("RING_SM_MAX_BYTES");
    {
        static const char *const names[] = {"auto", "tcp", "shm", "rdma"};
        static const int values[] = {RING__TP_AUTO, RING__TP_TCP, RING__TP_SHM, RING__TP_RDMA};
        p->transport = RING__TP_AUTO;
        RING_CHECK(env_choice("RING_TRANSPORT", names, values, (int)(sizeof names / sizeof *names),
                              "auto, tcp, shm or rdma", &p->transport));
#if !RING_HAVE_RDMA
        if (p->transport == RING__TP_RDMA)
            return ring__seterr(NULL, RING_ERR_UNSUPPORTED,
                                "RING_TRANSPORT=rdma, but this build has no verbs transport (built without libibverbs, "
                                "or with -Drdma=disabled)");
#endif
    }
    {
        RING_CHECK(env_small("RING_IB_QPS_PER_PEER", 1, 8, 1, &p->ib_qps));
        /* 14: 4.096 us x 2^14 = 67 ms per try. The verbs range is 0 (wait forever, which the
         * rules on blocking waits forbid) .. 31; past 24 (69 s per try) a dead peer would be
         * found only by the socket watch, so refuse that as a likely typo. */
        RING_CHECK(env_small("RING_IB_TIMEOUT", 1, 24, 14, &p->ib_timeout));
        RING_CHECK(env_small("RING_IB_RETRY_CNT", 0, 7, 7, &p->ib_retry_cnt));
        /* RoCE fabrics run lossless (PFC) and ECN-marked queues for the traffic classes the
         * operators name, and InfiniBand QoS by service level: without them verbs traffic
         * shares the default queue with everything else (NCCL's NCCL_IB_TC, NCCL_IB_SL). */
        RING_CHECK(env_small("RING_IB_TC", 0, 255, 0, &p->ib_tc));
        RING_CHECK(env_small("RING_IB_SL", 0, 15, 0, &p->ib_sl));
        /* GID tables are laid out per host, so an index means different entries on different
         * hosts; a kind means the same everywhere (NCCL's NCCL_IB_ROCE_VERSION_NUM and
         * NCCL_IB_ADDR_FAMILY, whose spellings are taken too). */
        static const char *const vnames[] = {"1", "2"};
        static const int vvalues[] = {1, 2};
        RING_CHECK(env_choice("RING_IB_ROCE_VERSION", vnames, vvalues, 2, "1 or 2", &p->ib_roce_version));
        static const char *const fnames[] = {"AF_INET", "AF_INET6", "ipv4", "ipv6"};
        static const int fvalues[] = {4, 6, 4, 6};
        RING_CHECK(env_choice("RING_IB_ADDR_FAMILY", fnames, fvalues, 4, "AF_INET or AF_INET6 (or ipv4, ipv6)",
                              &p->ib_addr_family));
        /* Several subnets on one RoCE port (VLANs): the one the fabric's verbs traffic belongs
         * to (NCCL's NCCL_IB_ADDR_RANGE). */
        const char *ar = getenv("RING_IB_ADDR_RANGE");
        p->ib_range_prefix = -1;
        if (ar && *ar) {
            if (strlen(ar) >= sizeof p->ib_range || ring__parse_gid_range(ar, p->ib_range_net, &p->ib_range_prefix) != 0)
                return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                    "RING_IB_ADDR_RANGE=\"%s\": expected an address range such as 10.0.0.0/16 or fd00::/8", ar);
            snprintf(p->ib_range, sizeof p->ib_range, "%s", ar);
        }
    }
    const char *hid = getenv("RING_HOST_ID");
    if (hid && *hid) {
        if (strlen(hid) >= sizeof p->host_id)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG, "RING_HOST_ID=\"%s\": at most %zu characters", hid,
                                sizeof p->host_id - 1);
        snprintf(p->host_id, sizeof p->host_id, "%s", hid);
    }
    const char *sd = getenv("RING_SHM_DIR");
    if (sd && *sd) {
        if (sd[0] != '/' || strlen(sd) >= sizeof p->shm_dir - 64)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG, "RING_SHM_DIR=\"%s\": expected an absolute directory path of at most %zu characters",
                                sd, sizeof p->shm_dir - 65);
        snprintf(p->shm_dir, sizeof p->shm_dir, "%s", sd);
    } else {
        snprintf(p->shm_dir, sizeof p->shm_dir, "/dev/shm");
    }
    {
        /* src/cuda/direct.h's RING__CUDA_IPC_* */
        static const char *const names[] = {"auto", "0", "1", "ring"};
        static const int values[] = {-1, 0, 1, 2};
        p->cuda_ipc = -1;
        RING_CHECK(env_choice("RING_CUDA_IPC", names, values, (int)(sizeof names / sizeof *names),
                              "auto, 0, 1 or ring", &p->cuda_ipc));
    }
    {
        /* src/cuda/direct.h's RING__DIRECT_WORK_* */
        static const char *const names[] = {"auto", "one", "each"};
        static const int values[] = {-1, 1, 0};
        p->cuda_direct_work = -1;
        RING_CHECK(env_choice("RING_CUDA_DIRECT_WORK", names, values, (int)(sizeof names / sizeof *names),
                              "auto, one or each", &p->cuda_direct_work));
    }
    {
        static const char *const names[] = {"auto", "0", "1"};
        static const int values[] = {-1, 0, 1};
        p->spin_yield = -1;
        RING_CHECK(env_choice("RING_SPIN_YIELD", names, values, (int)(sizeof names / sizeof *names),
                              "auto, 0 or 1", &p->spin_yield));
    }
    {
        static const char *const names[] = {"auto", "0", "1"};
        static const int values[] = {-1, 0, 1};
        p->ib_gdr = -1;
        RING_CHECK(env_choice("RING_IB_GDR", names, values, (int)(sizeof names / sizeof *names),
                              "auto, 0 or 1", &p->ib_gdr));
    }
    {
        static const char *const names[] = {"auto", "ring", "rd", "rh", "sm"};
        static const int values[] = {RING__ALGO_AUTO, RING__ALGO_RING, RING__ALGO_RD, RING__ALGO_RH, RING__ALGO_SM};
        p->algo = RING__ALGO_AUTO;
        RING_CHECK(env_choice("RING_ALGO", names, values, (int)(sizeof names / sizeof *names),
                              "ring, rd, rh, sm or auto", &p->algo));
    }
    const char *pr = getenv("RING_PORT_RANGE");
    if (pr && *pr && ring__parse_port_range(pr, &p->port_lo, &p->port_hi) != 0)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "RING_PORT_RANGE=\"%s\": expected lo-hi, e.g. 50000-50100", pr);

    const char *secret = getenv("RING_SECRET");
    const char *ifname = getenv("RING_SOCKET_IFNAME");
    if (cfg) {
        if (cfg->struct_size != sizeof(ring_config_t))
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "ring_config_t: struct_size %zu != %zu (initialise it with ring_config_init)",
                                cfg->struct_size, sizeof(ring_config_t));
        if (cfg->timeout_ms < 0 || cfg->nsocks < 0 || cfg->nsocks > RING__MAX_NSOCKS ||
            cfg->pipeline_depth < 0 || cfg->pipeline_depth > RING__MAX_PIPELINE_DEPTH ||
            (cfg->chunk_bytes && (cfg->chunk_bytes < RING__MIN_CHUNK || cfg->chunk_bytes > RING__MAX_CHUNK)))
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "ring_config_t: out-of-range field (timeout_ms %d, chunk_bytes %zu, nsocks %d, pipeline_depth %d)",
                                cfg->timeout_ms, cfg->chunk_bytes, cfg->nsocks, cfg->pipeline_depth);
        if (cfg->timeout_ms) p->timeout_ms = cfg->timeout_ms;
        if (cfg->chunk_bytes) p->chunk_bytes = cfg->chunk_bytes;
        if (cfg->nsocks) p->nsocks = cfg->nsocks;
        if (cfg->pipeline_depth) p->pipeline_depth = cfg->pipeline_depth;
        secret = cfg->secret;
        ifname = cfg->socket_ifname;
    }
    if (secret && *secret) {
        ring__secret_from_string(secret, p->secret);
        p->secret_set = 1;
    } else {
        ring__secret_from_string("ringcomm-default-secret", p->secret);
    }
    if (ifname && strlen(ifname) >= sizeof p->ifname)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "RING_SOCKET_IFNAME (socket_ifname) \"%.40s...\": at most %zu characters", ifname,
                            sizeof p->ifname - 1);
    if (ifname) snprintf(p->ifname, sizeof p->ifname, "%s", ifname);
    return RING_OK;
fail:
    return rc;
}

static ring_result_t need_int(const char *name, const char *src, long long lo, long long hi, int *out)
{
    long long v;
    const char *s = getenv(name);
    if (ring__parse_int(s, lo, hi, &v) != 0)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG, "ring_comm_init_env: %s=\"%s\" (from %s) is not an integer in [%lld, %lld]",
                            name, s ? s : "", src, lo, hi);
    *out = (int)v;
    return RING_OK;
}

int ring__launcher_row_applies(int torch)
{
    if (!torch) return 1;
    const char *v = getenv("TORCHELASTIC_RUN_ID");
    return (torch == 1) == (v && *v);
}

ring_result_t ring__env_bootstrap(ring__env_bootstrap_t *eb)
{
    static const struct {
        const char *rank, *size, *source;
        int torch; /* ring__launcher_row_applies; the RANK/WORLD_SIZE rows are the ones not 0 */
    } sources[] = {
        /* The launcher that started this process before the ones around it: every process of an
         * sbatch/salloc allocation inherits SLURM_PROCID and SLURM_NTASKS, also those that
         * mpirun or Hydra's mpiexec start inside it, where they name the allocation's task (with
         * -n1, every rank would be "rank 0 of 1" and run alone). Under srun --mpi=pmi2 PMI and
         * Slurm agree. RANK and WORLD_SIZE are names anything may export (a Kubeflow pod sets
         * them for a program it starts without torchrun): they come before mpirun's only
         * where torchrun itself started this process, else after them; with RANK=0
         * WORLD_SIZE=1 left in the environment, mpirun -np 2 ran two jobs of one rank. */
        {"RING_RANK", "RING_NRANKS", "RING_*", 0},
        {"RANK", "WORLD_SIZE", "torchrun", 1},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi", 0},
        {"PMI_RANK", "PMI_SIZE", "pmi", 0},
        {"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE", 2},
        {"SLURM_PROCID", "SLURM_NTASKS", "slurm", 0},
    };
    ring_result_t rc;
    memset(eb, 0, sizeof *eb);
    int master = 0; /* a RANK/WORLD_SIZE row: the root may come from MASTER_ADDR and MASTER_PORT */
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        if (!ring__launcher_row_applies(sources[i].torch)) continue;
        const char *r = getenv(sources[i].rank), *n = getenv(sources[i].size);
        int has_r = r && *r, has_n = n && *n; /* empty is unset, as for every RING_* variable */
        /* Half a row is a mistake, not a reason to ask the next launcher: RING_RANK without
         * RING_NRANKS inside an allocation used to run as Slurm's "rank 0 of 1", alone. */
        if (has_r != has_n)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "ring_comm_init_env: %s is set (%s) but %s is not: set both, or neither", has_r ? sources[i].rank : sources[i].size,
                                sources[i].source, has_r ? sources[i].size : sources[i].rank);
        if (!has_r) continue;
        eb->source = sources[i].source;
        master = sources[i].torch != 0;
        RING_CHECK(need_int(sources[i].size, eb->source, 1, 1 << 20, &eb->nranks));
        RING_CHECK(need_int(sources[i].rank, eb->source, 0, eb->nranks - 1, &eb->rank));
        break;
    }
    if (!eb->source)
        return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                            "ring_comm_init_env: no rank/size in the environment (set RING_RANK and RING_NRANKS, "
                            "or run under ringrun, torchrun, srun or mpirun)");
    const char *root = getenv("RING_ROOT");
    if (root && *root) {
        snprintf(eb->root, sizeof eb->root, "%s", root);
    } else if (master && getenv("MASTER_ADDR") && *getenv("MASTER_ADDR") && getenv("MASTER_PORT") &&
               *getenv("MASTER_PORT")) {
        long long port;
        const char *addr = getenv("MASTER_ADDR");
        char bare[256];
        size_t al = strlen(addr);
        if (addr[0] == '[' && al > 2 && addr[al - 1] == ']' && al - 2 < sizeof bare) {
            /* "[fd00::1]": the brackets belong to host:port syntax, which this adds itself. */
            memcpy(bare, addr + 1, al - 2);
            bare[al - 2] = '\0';
            addr = bare;
        }
        if (ring__parse_int(getenv("MASTER_PORT"), 1, 65534, &port) != 0)
            return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                                "ring_comm_init_env: MASTER_PORT=\"%s\" is not a port in [1, 65534] (rank 0 listens on "
                                "MASTER_PORT+1: torchrun's store holds MASTER_PORT)",
                                getenv("MASTER_PORT"));
        /* torchrun's agent already listens on MASTER_PORT with its own store. */
        snprintf(eb->root, sizeof eb->root, strchr(addr, ':') ? "[%s]:%lld" : "%s:%lld", addr, port + 1);
    } else {
        return ring__seterr(NULL, RING_ERR_INVALID_ARG,
                            "ring_comm_init_env: rank and size come from %s but no root address: set RING_ROOT=host:port "
                            "(the address where rank 0 listens)", eb->source);
    }
    return RING_OK;
fail:
    return rc;
}

/* The function behind the header's macro, for callers that cannot expand it (bindings): the
 * size this library was built with. */
#undef ring_config_init
ring_result_t ring_config_init(ring_config_t *cfg) { return ring_config_init_sized(cfg, sizeof *cfg); }
