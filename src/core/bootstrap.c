/*
 * Bootstrap rendezvous.
 *
 * Steps and bytes on the wire:
 *  1. rank 0 listens on root_addr (SO_REUSEADDR, non-blocking).
 *  2. rank r > 0 connects (retrying while the root is not up yet) and sends HELLO, 296 bytes:
 *     magic "RGBS" | version | 128-bit secret | nranks | rank | addr len | addr[128] |
 *     host[64] | boot id[40] | pid | flags (bits 8-13: RING_NSOCKS and RING_TCP_DUPLEX; top
 *     byte: NUMA nodes of the host) | layout key (chunk size and pipeline depth) |
 *     kernel (hash of the real boot id) | first CPU and CPU count (u16 each) of the affinity |
 *     shared-memory identity (64-bit hash).
 *  3. rank 0 accepts in a poll loop and reads each connection as soon as it has accepted it
 *     (a burst of ranks must not push each other out). Each has 10 s to deliver a whole HELLO; bad
 *     magic is closed silently (port scanners, strangers), a wrong secret/version/nranks or a
 *     duplicate rank gets a REJECT frame (24-byte header + 480-byte reason) and is closed; one
 *     with the job's secret but another version also fails the job at once, on the root and
 *     every rank that joined (nothing can make those ranks agree), and the root's timeout
 *     names the last connection it turned away. No
 *     stranger can stall or break the job: at most 64 unauthenticated connections are held,
 *     the oldest dropped first.
 *  4. When all ranks joined, rank 0 sends each one TABLE: 24-byte header (magic "RGBT", type,
 *     nranks, code, 64-bit job nonce) + nranks x 264-byte entries (addr len, addr, host, boot
 *     id, pid, flags, layout key, kernel, CPUs, shared-memory identity). Total root traffic:
 *     (N-1) x (296 + 24 + 264 N) bytes.
 *     Host name and boot id tell which ranks share a host (shared memory, ring order); flags
 *     say whether a rank takes shared-memory connections and carry its RING_NSOCKS and
 *     RING_TCP_DUPLEX; every rank checks that all layout keys and those two equal its own
 *     (comm.c). Kernel and CPUs say how many ranks share this machine's CPUs,
 *     namespaces and RING_HOST_ID included, which decides how a rank waits (comm.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap.h"
#include "topo.h"
#include "log.h"
#include "watch.h"
#include "wire.h"

#define BS_MAGIC 0x52474253u    /* "RGBS" */
#define TABLE_MAGIC 0x52474254u /* "RGBT" */
/* The version of everything ranks of one job must share, not of the bootstrap alone: it
 * changes with the TCP handshake (RING__TCP_VERSION), the shared-memory segment and page
 * layouts and names, and the collective descriptor, so that ranks of different builds fail
 * here, naming both versions, instead of in a later step that cannot tell (a 0.1.0 and a
 * later rank on one host each waited out RING_TIMEOUT_MS for a page the other named
 * differently). 7: RING_NSOCKS in the flags may be 0, auto (6 had only 1-16, and 2 by
 * default); 8: 480-byte REJECT text; 9: the shared pages' keyed names (4f61f3d) and refusal by
 * size (2ec6bfb), RING_SM_MAX_BYTES and RING_SHM_DIR in the flags; 10: the shared-memory
 * identity as 64 bits in an entry of its own (264-byte entries, 296-byte HELLO), no longer 8
 * bits of the flags; 11: the verbs handshake's 432-byte OFFER and ACK, with the GID type. A
 * HELLO of any version is settled from its first 32 bytes when its version differs
 * (RING__HELLO_HDR_LEN), whatever its length. */
#define BS_VERSION 11u
#define TYPE_TABLE 1u
#define TYPE_REJECT 2u
#define MAX_PENDING 64
#define HELLO_TIMEOUT_NS (10LL * 1000000000LL)

uint32_t ring__fnv1a(const void *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 16777619u;
    return h;
}

uint64_t ring__fnv1a64(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* Only equality matters, and 0 stays "unknown". */
uint32_t ring__kernel_hash(const char *bootid) { return ring__fnv1a(bootid, strlen(bootid)) | 1u; }

void ring__host_identity(ring__peer_info_t *info)
{
    gethostname(info->host, sizeof info->host - 1);
    info->host[sizeof info->host - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(info->bootid, sizeof info->bootid, f)) info->bootid[0] = '\0';
        fclose(f);
        info->bootid[strcspn(info->bootid, "\n")] = '\0';
    }
    info->pid = (uint32_t)getpid();
    info->kernel = info->bootid[0] ? ring__kernel_hash(info->bootid) : 0;
    ring__cpumask_t set;
    if (ring__cpumask_current(&set) == 0) {
        int first = 0;
        while (first < RING__TOPO_MAX_CPUS - 1 && !ring__cpumask_isset(&set, first)) first++;
        info->cpu_first = (uint16_t)first;
        info->cpu_count = (uint16_t)RING__MIN(ring__cpumask_count(&set), 65535);
    }
    info->numa_nodes = (uint8_t)RING__MIN(ring__numa_nodes_online(), 255);
}

int ring__spin_busy_pick(const ring__peer_info_t *peers, int n, int me, long online)
{
    const ring__peer_info_t *mine = &peers[me];
    int mates = 0, bound = 0, free_ = 0;
    if (!mine->kernel) return 0;
    for (int q = 0; q < n; q++) {
        if (peers[q].kernel != mine->kernel) continue;
        mates++;
        if (peers[q].cpu_count == 1) {
            bound++;
            for (int o = 0; o < q; o++)
                if (peers[o].kernel == mine->kernel && peers[o].cpu_count == 1 && peers[o].cpu_first == peers[q].cpu_first)
                    return 0; /* two ranks bound to one CPU */
        }
    }
    if (mates > online) return 0;
    for (int q = 0; q < n; q++)
        if (peers[q].kernel == mine->kernel && peers[q].cpu_count >= mates) free_++;
    return bound == mates || free_ == mates;
}

int ring__loopback_far(const ring__peer_info_t *peers, int n, int *far)
{
    for (int lo = 0; lo < n; lo++) {
        ring__sockaddr_t a;
        ring__peer_sockaddr(&peers[lo], &a);
        if (!peers[lo].kernel || !ring__addr_is_loopback(&a)) continue;
        for (int q = 0; q < n; q++)
            if (peers[q].kernel && peers[q].kernel != peers[lo].kernel) {
                *far = q;
                return lo;
            }
    }
    return -1;
}

#define CG_PATH 1024

/* ceil(quota / period) from the files of one cgroup directory; 0: no limit there. */
static long cg_dir_limit(const char *dir, int v1)
{
    char path[CG_PATH + 32], buf[128];
    long long q = -1, p = 0;
    FILE *f;
    if (v1) {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
        if ((f = fopen(path, "re"))) {
            if (fscanf(f, "%lld", &q) != 1) q = -1;
            fclose(f);
        }
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        if ((f = fopen(path, "re"))) {
            if (fscanf(f, "%lld", &p) != 1) p = 0;
            fclose(f);
        }
    } else {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        if ((f = fopen(path, "re"))) {
            /* "max 100000" (no limit) or "200000 100000" */
            if (fgets(buf, sizeof buf, f) && sscanf(buf, "%lld %lld", &q, &p) != 2) q = -1;
            fclose(f);
        }
    }
    return q > 0 && p > 0 ? (long)((q + p - 1) / p) : 0;
}

/* A v1 controller list ("cpu", "cpu,cpuacct") names the cpu controller. */
static int has_cpu(const char *ctrl)
{
    for (const char *t = ctrl; *t;) {
        size_t k = strcspn(t, ",");
        if (k == 3 && !strncmp(t, "cpu", 3)) return 1;
        t += k + (t[k] == ',');
    }
    return 0;
}

long ring__cgroup_cpu_limit(const char *proc_cgroup, const char *root)
{
    char line[1024], rel[768] = "", dir[CG_PATH];
    int v1 = 0, found = 0;
    long best = 0;
    FILE *f = fopen(proc_cgroup, "re");
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = '\0';
        const char *ctrl = a + 1;
        int cpu = has_cpu(ctrl);
        if (cpu || (!*ctrl && !found)) { /* v1's cpu line, else v2's "0::" line */
            snprintf(rel, sizeof rel, "%s", b + 1);
            v1 = cpu;
            found = 1;
            if (cpu) break; /* a v1 cpu controller is where the limit is enforced */
        }
    }
    fclose(f);
    if (!found || rel[0] != '/') return 0;
    /* The group and each ancestor up to the root: any of them may hold the limit. */
    for (;;) {
        /* v1 mounts the controller as "cpu" or "cpu,cpuacct" (one often a link to the other). */
        const char *mounts[] = {"/cpu", "/cpu,cpuacct"};
        for (int i = 0; i < (v1 ? 2 : 1); i++) {
            snprintf(dir, sizeof dir, "%s%s%s", root, v1 ? mounts[i] : "", strcmp(rel, "/") ? rel : "");
            long l = cg_dir_limit(dir, v1);
            if (l > 0) {
                if (!best || l < best) best = l;
                break;
            }
        }
        if (!strcmp(rel, "/")) break;
        char *slash = strrchr(rel, '/');
        if (slash == rel) slash++; /* "/a" -> "/" */
        *slash = '\0';
    }
    return best;
}

/* The code for a failed ring__io_full: its own timeout and the abort keep their meaning, any
 * other failure is the caller's (a peer that broke the connection). */
static ring_result_t io_code(int e, ring_result_t other)
{
    return e == -ETIMEDOUT ? RING_ERR_TIMEOUT : e == -ECANCELED ? RING_ERR_ABORTED : other;
}

static void put_info(unsigned char *p, const ring__peer_info_t *info)
{
    ring__put32(p, info->addr.len);
    memcpy(p + 4, info->addr.data, RING__TP_ADDR_MAX);
    memcpy(p + 132, info->host, RING__HOST_MAX);
    memcpy(p + 196, info->bootid, RING__BOOTID_MAX);
    ring__put32(p + 236, info->pid);
    ring__put32(p + 240, (info->flags & 0xffffffu) | (uint32_t)info->numa_nodes << 24);
    ring__put32(p + 244, info->layout);
    ring__put32(p + 248, info->kernel);
    ring__put32(p + 252, (uint32_t)info->cpu_first << 16 | info->cpu_count);
    ring__put64(p + 256, info->shm_id);
}

/* Returns -1 when the entry is malformed (lengths not validated would size a later copy). */
int ring__peer_info_parse(const unsigned char *p, ring__peer_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->addr.len = ring__get32(p);
    if (info->addr.len == 0 || info->addr.len > RING__TP_ADDR_MAX) return -1;
    memcpy(info->addr.data, p + 4, RING__TP_ADDR_MAX);
    memcpy(info->host, p + 132, RING__HOST_MAX);
    memcpy(info->bootid, p + 196, RING__BOOTID_MAX);
    info->host[RING__HOST_MAX - 1] = '\0';
    info->bootid[RING__BOOTID_MAX - 1] = '\0';
    info->pid = ring__get32(p + 236);
    uint32_t flags = ring__get32(p + 240);
    info->flags = flags & 0xffffffu;
    info->numa_nodes = (uint8_t)(flags >> 24);
    info->layout = ring__get32(p + 244);
    info->kernel = ring__get32(p + 248);
    uint32_t cpus = ring__get32(p + 252);
    info->cpu_first = (uint16_t)(cpus >> 16);
    info->cpu_count = (uint16_t)cpus;
    info->shm_id = ring__get64(p + 256);
    return 0;
}

void ring__hello_build(unsigned char *buf, const uint8_t secret[16], uint32_t rank,
                       uint32_t nranks, const ring__peer_info_t *info)
{
    memset(buf, 0, RING__HELLO_LEN);
    ring__put32(buf, BS_MAGIC);
    ring__put32(buf + 4, BS_VERSION);
    memcpy(buf + 8, secret, 16);
    ring__put32(buf + 24, nranks);
    ring__put32(buf + 28, rank);
    put_info(buf + 32, info);
}

const char *ring__hello_parse(const unsigned char *buf, const uint8_t secret[16], uint32_t *rank,
                              uint32_t *nranks, ring__peer_info_t *info, ring_result_t *code)
{
    *code = RING_ERR_PROTOCOL;
    if (ring__get32(buf) != BS_MAGIC) return "not a ringcomm bootstrap connection (bad magic)";
    *code = RING_ERR_AUTH;
    /* The secret first: it has been at offset 8 in every version, so a rank of the job is told
     * from a stranger whatever its version (and the root fails the job for it: root_gather). */
    if (!ring__secret_equal(buf + 8, secret, 16)) return "wrong job secret (RING_SECRET differs from the root's)";
    if (ring__get32(buf + 4) != BS_VERSION) {
        static _Thread_local char why[RING__REJECT_MSG_LEN];
        snprintf(why, sizeof why,
                 "rank %u runs ringcomm protocol version %u, the root (ringcomm %d.%d.%d) version %u: every rank must "
                 "run the same ringcomm build",
                 ring__get32(buf + 28), ring__get32(buf + 4), RING_VERSION_MAJOR, RING_VERSION_MINOR, RING_VERSION_PATCH,
                 BS_VERSION);
        return why;
    }
    *nranks = ring__get32(buf + 24);
    *rank = ring__get32(buf + 28);
    *code = RING_ERR_PROTOCOL;
    if (ring__peer_info_parse(buf + 32, info) != 0) return "malformed address in HELLO";
    *code = RING_OK;
    return NULL;
}

/* root_failed (in the word at 8): not this connection's fault, but rank 0's own failure, which
 * a rank that joined learns this way (tell_joined). */
static void send_reject(int fd, ring_result_t code, const char *why, int root_failed, int64_t deadline)
{
    unsigned char b[RING__TABLE_HDR_LEN + RING__REJECT_MSG_LEN] = {0};
    ring__put32(b, TABLE_MAGIC);
    ring__put32(b + 4, TYPE_REJECT);
    ring__put32(b + 8, (uint32_t)!!root_failed);
    ring__put32(b + 12, (uint32_t)code);
    snprintf((char *)b + RING__TABLE_HDR_LEN, RING__REJECT_MSG_LEN, "%s", why);
    /* Best effort and short: a rejected peer must not be able to hold the root. */
    int64_t d = RING__MIN(deadline, ring__now_ns() + 100 * 1000000LL);
    (void)ring__io_full(fd, b, sizeof b, 1, d, -1);
}

/* comm->errmsg without its "bootstrap: " prefix, for a text that gets its own. */
static const char *own_text(const ring_comm_t *comm)
{
    const char *m = comm->errmsg;
    return strncmp(m, "bootstrap: ", 11) == 0 ? m + 11 : m;
}

/* Rank 0 failed init after some ranks joined: those that wait for the table get its reason
 * in a REJECT (code: rank 0's own); without it they would see the connection close and could
 * only guess ("rank 0 died, or other ranks never joined?"). */
static void tell_joined(ring_comm_t *comm, ring__bootstrap_t *bs, ring_result_t code, int from, int64_t deadline)
{
    for (int r = from; r < comm->nranks; r++)
        if (bs->rank_fds[r] >= 0) send_reject(bs->rank_fds[r], code, own_text(comm), 1, deadline);
}

typedef struct pend {
    int fd;
    unsigned char buf[RING__HELLO_LEN];
    size_t got;
    int64_t deadline;
    uint64_t seq; /* accept order: the oldest goes first when the table is full */
    ring__sockaddr_t from;
} pend;

typedef struct gather {
    ring_comm_t *comm;
    ring__bootstrap_t *bs;
    ring__peer_info_t *all;
    pend *p;
    int np, joined;
    int64_t deadline;
    /* The last connection turned away, for the timeout's message: "missing rank 1" alone hid
     * that rank 1 came and was rejected (its log at WARN, which is off by default). */
    char rejected[RING__REJECT_MSG_LEN + 80];
    /* A rank of this job (the right secret) that cannot take part whatever happens next: its
     * protocol version differs. The job fails at once, on every rank that joined. */
    int fatal;
    char fatal_text[RING__REJECT_MSG_LEN + 80];
} gather;

static void drop(gather *g, int i)
{
    close(g->p[i].fd);
    g->p[i] = g->p[--g->np];
}

/* Reads what pending connection i has sent and settles it if it can: 1 if it left the table
 * (joined, rejected or dropped), 0 if it stays for more bytes. */
static int settle(gather *g, int i, int64_t now)
{
    ring_comm_t *comm = g->comm;
    pend *c = &g->p[i];
    int n = comm->nranks;
    char b[80];
    ssize_t got = recv(c->fd, c->buf + c->got, RING__HELLO_LEN - c->got, MSG_DONTWAIT);
    const int e = got < 0 ? errno : 0;
    const int broken = got < 0 && e != EAGAIN && e != EINTR;
    if (got > 0) c->got += (size_t)got;
    if (got == 0 || broken || (c->got < RING__HELLO_LEN && now > c->deadline)) {
        RING_LOG(RING_LOG_WARN, RING_SUB_INIT, 0, "bootstrap: dropped connection from %s: %s",
                 ring__addr_str(&c->from, b, sizeof b),
                 got == 0 ? "closed before a complete HELLO"
                 : broken ? strerror(e)
                          : "no complete HELLO in time");
        drop(g, i);
        return 1;
    }
    /* Another magic or version is settled from the header (RING__HELLO_HDR_LEN): a rank of a
     * build whose HELLO is shorter has sent all it will, and waits for an answer. */
    const int foreign = c->got >= RING__HELLO_HDR_LEN &&
                        (ring__get32(c->buf) != BS_MAGIC || ring__get32(c->buf + 4) != BS_VERSION);
    if (c->got < RING__HELLO_LEN && !foreign) return 0;
    uint32_t r = 0, nr = 0;
    ring__peer_info_t info;
    ring_result_t code;
    char why[RING__REJECT_MSG_LEN];
    const char *bad = ring__hello_parse(c->buf, comm->params.secret, &r, &nr, &info, &code);
    if (bad) {
        snprintf(why, sizeof why, "%s", bad);
    } else if (nr != (uint32_t)n) {
        code = RING_ERR_INVALID_ARG;
        snprintf(why, sizeof why, "rank %u was started with nranks=%u but the root has nranks=%d", r, nr, n);
    } else if (r == 0 || r >= (uint32_t)n) {
        code = RING_ERR_INVALID_ARG;
        snprintf(why, sizeof why, "rank %u is out of range for nranks=%d (or a second rank 0)", r, n);
    } else if (g->bs->rank_fds[r] >= 0) {
        code = RING_ERR_INVALID_ARG;
        snprintf(why, sizeof why, "rank %u joined twice (duplicate RING_RANK?)", r);
    } else {
        why[0] = '\0';
    }
    if (why[0]) {
        RING_LOG(RING_LOG_WARN, RING_SUB_INIT, 0, "bootstrap: rejected %s: %s", ring__addr_str(&c->from, b, sizeof b), why);
        if (code != RING_ERR_PROTOCOL) {
            send_reject(c->fd, code, why, 0, g->deadline);
            snprintf(g->rejected, sizeof g->rejected, "%s: %s", ring__addr_str(&c->from, b, sizeof b), why);
            /* Only a rank of this job: the secret set for it (without RING_SECRET every job has
             * the built-in one, and a stray process of another job and build must not end this
             * one), and a rank this job still waits for. */
            uint32_t sr = ring__get32(c->buf + 28);
            g->fatal |= code == RING_ERR_AUTH && ring__get32(c->buf + 4) != BS_VERSION && comm->params.secret_set &&
                        ring__secret_equal(c->buf + 8, comm->params.secret, 16) &&
                        ring__get32(c->buf + 24) == (uint32_t)n && sr > 0 && sr < (uint32_t)n &&
                        g->bs->rank_fds[sr] < 0;
            if (g->fatal && !g->fatal_text[0]) snprintf(g->fatal_text, sizeof g->fatal_text, "%s", g->rejected);
        }
        drop(g, i);
        return 1;
    }
    g->all[r] = info;
    g->bs->rank_fds[r] = c->fd;
    g->joined++;
    RING_LOG(RING_LOG_TRACE, RING_SUB_INIT, 0, "bootstrap: rank %u joined from %s (%d/%d)", r,
             ring__addr_str(&c->from, b, sizeof b), g->joined, n);
    g->p[i] = g->p[--g->np];
    return 1;
}

/* A loopback root address other than 127.0.0.1 and ::1, which a job of one host names on
 * purpose: 127.0.1.1 and its like come from a host name in /etc/hosts. */
static int debian_own_name(const ring__sockaddr_t *root)
{
    if (!ring__addr_is_loopback(root)) return 0;
    if (root->ss.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&root->ss)->sin_addr.s_addr != htonl(INADDR_LOOPBACK);
    const struct in6_addr *a = &((const struct sockaddr_in6 *)&root->ss)->sin6_addr;
    return !IN6_IS_ADDR_LOOPBACK(a) && !(IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127 && a->s6_addr[13] == 0 &&
                                         a->s6_addr[14] == 0 && a->s6_addr[15] == 1);
}

static ring_result_t root_gather(ring_comm_t *comm, ring__bootstrap_t *bs, const int *lfds, int nl,
                                 const ring__sockaddr_t *root, ring__peer_info_t *all, int64_t deadline)
{
    int n = comm->nranks;
    gather g = {.comm = comm, .bs = bs, .all = all, .joined = 1, .deadline = deadline};
    g.p = calloc(MAX_PENDING, sizeof *g.p);
    if (!g.p) return ring__seterr(comm, RING_ERR_NOMEM, "bootstrap: out of memory");
    uint64_t accepted = 0;
    char b[80];
    ring_result_t rc = RING_OK;
    while (g.joined < n) {
        if (atomic_load(&comm->aborted)) {
            rc = ring__seterr(comm, RING_ERR_ABORTED, "bootstrap: aborted");
            break;
        }
        int64_t now = ring__now_ns();
        if (now >= deadline) {
            char missing[256] = "";
            size_t o = 0;
            for (int r = 1; r < n && o < sizeof missing - 16; r++)
                if (bs->rank_fds[r] < 0) o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d", o ? ", " : "", r);
            /* Debian's /etc/hosts maps the machine's own name to 127.0.1.1: RING_ROOT=$(hostname)
             * then listens where only this host's ranks can come. */
            rc = ring__seterr(comm, RING_ERR_TIMEOUT,
                              "bootstrap: timed out after %d ms at root %s: %d of %d ranks joined; missing rank(s) %s%s%s%s%s",
                              comm->params.timeout_ms, ring__addr_str(root, b, sizeof b), g.joined, n, missing,
                              o >= sizeof missing - 16 ? ", ..." : "",
                              debian_own_name(root)
                                  ? " (the root listens on a loopback address, which ranks on other hosts cannot "
                                    "reach: does RING_ROOT's host name resolve to 127.0.1.1 here, as /etc/hosts has "
                                    "it on Debian?)"
                                  : "",
                              g.rejected[0] ? "; the root turned away " : "", g.rejected);
            break;
        }
        struct pollfd fds[MAX_PENDING + RING__ROOT_ADDRS_MAX + 1];
        for (int l = 0; l < nl; l++) fds[l] = (struct pollfd){.fd = lfds[l], .events = POLLIN};
        fds[nl] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
        for (int i = 0; i < g.np; i++) fds[nl + 1 + i] = (struct pollfd){.fd = g.p[i].fd, .events = POLLIN};
        int ms = (int)RING__MIN((deadline - now) / 1000000 + 1, 200);
        if (poll(fds, (nfds_t)(nl + 1 + g.np), ms) < 0 && errno != EINTR) {
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "bootstrap: poll");
            break;
        }
        /* Each connection is read as soon as it is accepted: a rank sends its HELLO right after
         * connecting, so ranks leave the table at once and only strangers and slow senders
         * hold slots. Draining the backlog first would let a burst of ranks (a large job, or
         * a root that was descheduled) push each other out. */
        for (int l = 0; l < nl;) {
            ring__sockaddr_t from;
            from.len = sizeof from.ss;
            int fd = accept4(lfds[l], (struct sockaddr *)&from.ss, &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            ring__fd_own(fd);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    l++; /* this listener is drained: the next */
                    continue;
                }
                /* Out of descriptors: nothing frees one before the job gives up, and a readable
                 * listener would only spin until the deadline. */
                rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno,
                                        "bootstrap: rank 0 cannot accept rank connections (%d of %d ranks joined; it "
                                        "holds one connection per rank during init: raise the open-file limit, "
                                        "ulimit -n)",
                                        g.joined, n);
                goto out;
            }
            if (g.np == MAX_PENDING) {
                int old = 0;
                for (int i = 1; i < g.np; i++)
                    if (g.p[i].seq < g.p[old].seq) old = i;
                RING_LOG(RING_LOG_WARN, RING_SUB_INIT, 0, "bootstrap: too many unauthenticated connections, dropping %s",
                         ring__addr_str(&g.p[old].from, b, sizeof b));
                drop(&g, old);
            }
            g.p[g.np] = (pend){.fd = fd, .deadline = now + HELLO_TIMEOUT_NS, .seq = accepted++, .from = from};
            g.np++;
            settle(&g, g.np - 1, now);
        }
        for (int i = 0; i < g.np;)
            if (!settle(&g, i, now)) i++;
        if (g.fatal && g.joined < n) {
            rc = ring__seterr(comm, RING_ERR_AUTH, "bootstrap: the root turned away %s", g.fatal_text);
            break;
        }
    }
out:
    for (int i = 0; i < g.np; i++) close(g.p[i].fd);
    free(g.p);
    return rc;
}

/* A listener on one more address of the root's name, or -1: no error is recorded (the first
 * address already listens, and this one is only a help to ranks that cannot reach that). */
static int extra_listener(const ring__sockaddr_t *a)
{
    ring__sockaddr_t la = *a;
    int fd = -1;
    return ring__addr_bindable(a) && ring__listen_quiet(&la, &fd) == 0 ? fd : -1;
}

static ring_result_t root_run(ring_comm_t *comm, ring__bootstrap_t *bs, const ring__sockaddr_t *roots, int nroots,
                              ring__peer_info_t *all, int64_t deadline)
{
    ring_result_t rc;
    int n = comm->nranks;
    char b[80], also[RING__ROOT_ADDRS_MAX * 56] = "";
    const ring__sockaddr_t *root = &roots[0];
    ring__sockaddr_t la = *root;
    int lfds[RING__ROOT_ADDRS_MAX], nl = 0;
    unsigned char *table = NULL;
    rc = ring__listen(comm, &la, 1, 0, 0, &lfds[0]);
    if (rc != RING_OK) {
        ring__seterr(comm, rc, "bootstrap: rank 0 cannot listen on the root address %s (%s)",
                     ring__addr_str(root, b, sizeof b), comm->errmsg);
        goto fail;
    }
    nl = 1;
    /* The other addresses of RING_ROOT's name that are this host's: the ranks try each in turn,
     * and one that cannot reach the first (no IPv6 route, say) joins through another. */
    size_t o = 0;
    for (int k = 1; k < nroots && k < RING__ROOT_ADDRS_MAX; k++) {
        int fd = extra_listener(&roots[k]);
        if (fd < 0) continue;
        lfds[nl++] = fd;
        if (o < sizeof also)
            o += (size_t)snprintf(also + o, sizeof also - o, "%s%s", o ? ", " : " (also on ",
                                  ring__addr_str(&roots[k], b, sizeof b));
    }
    if (o && o < sizeof also) snprintf(also + o, sizeof also - o, ")");
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, 0, "bootstrap: root listening on %s%s for %d ranks",
             ring__addr_str(&la, b, sizeof b), also, n);
    rc = root_gather(comm, bs, lfds, nl, root, all, deadline);
    if (rc != RING_OK) {
        tell_joined(comm, bs, rc, 1, deadline);
        goto fail;
    }
    if (getrandom(&comm->job_nonce, sizeof comm->job_nonce, 0) != (ssize_t)sizeof comm->job_nonce)
        comm->job_nonce = (uint64_t)ring__now_ns() ^ ((uint64_t)getpid() << 32);
    size_t tlen = RING__TABLE_HDR_LEN + (size_t)n * RING__TABLE_ENTRY_LEN;
    table = calloc(1, tlen);
    if (!table) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "bootstrap: out of memory");
        goto fail;
    }
    ring__put32(table, TABLE_MAGIC);
    ring__put32(table + 4, TYPE_TABLE);
    ring__put32(table + 8, (uint32_t)n);
    memcpy(table + 16, &comm->job_nonce, 8);
    for (int r = 0; r < n; r++) put_info(table + RING__TABLE_HDR_LEN + (size_t)r * RING__TABLE_ENTRY_LEN, &all[r]);
    for (int r = 1; r < n; r++) {
        int e = ring__io_full(bs->rank_fds[r], table, tlen, 1, deadline, comm->wake_fd);
        if (e) {
            rc = ring__seterr_errno(comm, io_code(e, RING_ERR_PEER), -e, "bootstrap: sending the rank table to rank %d", r);
            /* Ranks 1..r-1 have the table and are connecting to each other, watching their
             * star connection: they get the FAIL notice the watcher would send (which names
             * rank r), not just a closed connection that says "rank 0 died". The rest get a
             * REJECT with the same reason instead of the table. */
            char text[RING__ERRMSG_MAX];
            unsigned char f[RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX];
            snprintf(text, sizeof text, "rank 0 (%.64s, pid %u) failed: %.680s", all[0].host, (unsigned)all[0].pid,
                     comm->errmsg);
            size_t fl = ring__notice_build(f, RING__NOTICE_FAIL, 0, RING_ERR_PEER, text);
            for (int q = 1; q < r; q++)
                (void)ring__io_full(bs->rank_fds[q], f, fl, 1, ring__now_ns() + 100 * 1000000LL, -1);
            tell_joined(comm, bs, rc, r + 1, deadline);
            goto fail;
        }
    }
fail:
    for (int l = 0; l < nl; l++) close(lfds[l]);
    free(table);
    return rc;
}

static ring_result_t rank_run(ring_comm_t *comm, ring__bootstrap_t *bs, const ring__sockaddr_t *roots, int nroots,
                              const ring__peer_info_t *mine, ring__peer_info_t *all, int64_t deadline)
{
    ring_result_t rc = RING_OK;
    char b[80];
    int n = comm->nranks;
    int fd = -1, last_err = 0, tries = 0;
    unsigned char *table = NULL;
    int64_t backoff = 10 * 1000000LL;
    const ring__sockaddr_t *root = &roots[0];
    /* The root may start later than we do: retry refused connections until the deadline, each
     * of the root's addresses in turn. */
    while (fd < 0) {
        if (atomic_load(&comm->aborted)) {
            rc = ring__seterr(comm, RING_ERR_ABORTED, "bootstrap: aborted");
            goto fail;
        }
        if (ring__now_ns() >= deadline) {
            char all_of[RING__ROOT_ADDRS_MAX * 56] = "";
            size_t o = 0;
            for (int k = 0; nroots > 1 && k < nroots && o < sizeof all_of; k++)
                o += (size_t)snprintf(all_of + o, sizeof all_of - o, "%s%s", k ? ", " : " (tried each of its addresses: ",
                                      ring__addr_str(&roots[k], b, sizeof b));
            if (nroots > 1 && o < sizeof all_of) snprintf(all_of + o, sizeof all_of - o, ")");
            rc = ring__seterr_errno(comm, RING_ERR_CONNECT, last_err ? last_err : ETIMEDOUT,
                                    "bootstrap: rank %d could not reach the root %s within %d ms%s (is rank 0 "
                                    "running and RING_ROOT the address where it listens?)",
                                    comm->rank, ring__addr_str(&roots[0], b, sizeof b), comm->params.timeout_ms, all_of);
            goto fail;
        }
        root = &roots[tries++ % nroots];
        int cfd = -1;
        int cc_err, e = ring__connect_start(root, NULL, &cfd, &cc_err);
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
            /* This process is out of a resource: retrying until the deadline would end in
             * "could not reach the root" minutes later, blaming rank 0. */
            rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, e,
                                    "bootstrap: rank %d cannot open a socket to the root %s (raise the open-file "
                                    "limit, ulimit -n)",
                                    comm->rank, ring__addr_str(root, b, sizeof b));
            goto fail;
        }
        if (!e) {
            struct pollfd pf[2] = {{.fd = cfd, .events = POLLOUT}, {.fd = comm->wake_fd, .events = POLLIN}};
            int64_t left = deadline - ring__now_ns();
            const int64_t until = ring__now_ns() + RING__MIN(RING__MAX(left / 1000000, 1), 1000) * 1000000LL;
            /* Until it connects, fails, or its slice is up: a signal (a profiler's timer) ends
             * poll() early, and a connection given up at every tick never completed where the
             * round trip to the root is longer than the tick. */
            int r;
            while ((r = ring__connect_check(cfd)) == 0 && ring__now_ns() < until)
                if (poll(pf, 2, (int)RING__MAX((until - ring__now_ns()) / 1000000, 1)) > 0 && pf[1].revents) break;
            if (r == 1) {
                fd = cfd;
                if (nroots > 1)
                    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "bootstrap: reached the root at %s (address %d of %d)",
                             ring__addr_str(root, b, sizeof b), (int)(root - roots) + 1, nroots);
                break;
            }
            e = r < 0 ? -r : ETIMEDOUT;
            close(cfd);
        }
        last_err = e;
        struct timespec ts = {0, (long)backoff};
        nanosleep(&ts, NULL);
        backoff = RING__MIN(backoff * 2, 500 * 1000000LL);
    }
    unsigned char hello[RING__HELLO_LEN];
    ring__hello_build(hello, comm->params.secret, (uint32_t)comm->rank, (uint32_t)n, mine);
    int e = ring__io_full(fd, hello, sizeof hello, 1, deadline, comm->wake_fd);
    /* The root's clock started about when ours did: where a rank never joins, it times out at
     * about our deadline and then sends its reason ("missing rank(s) 3"). Wait a little longer
     * for that reason than the root waits, or most ranks time out beside it and can only guess
     * (seen in 6 of 7 ranks at 8 ranks). */
    const int64_t table_deadline = deadline + RING__MIN((int64_t)comm->params.timeout_ms, 1000LL) * 1000000LL;
    unsigned char hdr[RING__TABLE_HDR_LEN];
    if (!e) e = ring__io_full(fd, hdr, sizeof hdr, 0, table_deadline, comm->wake_fd);
    if (e == RING__IO_CLOSED) {
        /* A root that fails after this rank joined says why (a REJECT); a close without one is
         * a root that died, or one older than that. */
        rc = ring__seterr(comm, RING_ERR_CONNECT,
                          "bootstrap: rank %d waiting for the rank table from the root %s: the root closed the "
                          "connection without a reason (rank 0 died?)",
                          comm->rank, ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    if (e) {
        rc = ring__seterr_errno(comm, io_code(e, RING_ERR_CONNECT),
                                -e, "bootstrap: rank %d waiting for the rank table from the root %s (rank 0 died, or "
                                "other ranks never joined?)", comm->rank, ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    if (ring__get32(hdr) != TABLE_MAGIC) {
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "bootstrap: %s is not a ringcomm root (bad reply magic)",
                          ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    if (ring__get32(hdr + 4) == TYPE_REJECT) {
        char why[RING__REJECT_MSG_LEN] = "";
        ring__io_full(fd, why, sizeof why, 0, RING__MIN(table_deadline, ring__now_ns() + 1000000000LL), -1);
        why[sizeof why - 1] = '\0';
        ring_result_t code = (ring_result_t)ring__get32(hdr + 12);
        if (!ring__get32(hdr + 8) && (code == RING_ERR_AUTH || code == RING_ERR_INVALID_ARG || code == RING_ERR_PROTOCOL))
            rc = ring__seterr(comm, code, "bootstrap: the root %s rejected rank %d: %s",
                              ring__addr_str(root, b, sizeof b), comm->rank, why);
        else /* rank 0 failed itself (tell_joined); a timeout there is one here, and a rank of
              * another build there (AUTH) a reason for this rank too */
            rc = ring__seterr(comm, code == RING_ERR_TIMEOUT || code == RING_ERR_AUTH ? code : RING_ERR_PEER,
                              "bootstrap: rank 0 (the root %s) failed init before rank %d got the rank table: %s",
                              ring__addr_str(root, b, sizeof b), comm->rank, why);
        goto fail;
    }
    if (ring__get32(hdr + 4) != TYPE_TABLE || ring__get32(hdr + 8) != (uint32_t)n) {
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "bootstrap: malformed rank table from %s",
                          ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    memcpy(&comm->job_nonce, hdr + 16, 8);
    size_t tlen = (size_t)n * RING__TABLE_ENTRY_LEN;
    table = malloc(tlen);
    if (!table) {
        rc = ring__seterr(comm, RING_ERR_NOMEM, "bootstrap: out of memory");
        goto fail;
    }
    e = ring__io_full(fd, table, tlen, 0, table_deadline, comm->wake_fd);
    if (e == RING__IO_CLOSED) {
        rc = ring__seterr(comm, RING_ERR_PEER, "bootstrap: reading the rank table from %s: the root closed the connection",
                          ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    if (e) {
        rc = ring__seterr_errno(comm, io_code(e, RING_ERR_PEER), -e, "bootstrap: reading the rank table from %s",
                                ring__addr_str(root, b, sizeof b));
        goto fail;
    }
    for (int r = 0; r < n; r++) {
        if (ring__peer_info_parse(table + (size_t)r * RING__TABLE_ENTRY_LEN, &all[r]) != 0) {
            rc = ring__seterr(comm, RING_ERR_PROTOCOL, "bootstrap: malformed entry %d in the rank table", r);
            goto fail;
        }
    }
    bs->root_fd = fd;
    fd = -1;
fail:
    if (fd >= 0) close(fd);
    free(table);
    return rc;
}

ring_result_t ring__bootstrap_init(ring_comm_t *comm, const ring__sockaddr_t *roots, int nroots,
                                   const ring__peer_info_t *mine, ring__peer_info_t *all,
                                   int64_t deadline_ns)
{
    ring__bootstrap_t *bs = calloc(1, sizeof *bs);
    if (!bs) return ring__seterr(comm, RING_ERR_NOMEM, "bootstrap: out of memory");
    bs->root_fd = -1;
    bs->nranks = comm->nranks;
    comm->bs = bs;
    all[comm->rank] = *mine;
    if (comm->rank != 0) return rank_run(comm, bs, roots, nroots, mine, all, deadline_ns);
    bs->rank_fds = malloc((size_t)comm->nranks * sizeof(int));
    if (!bs->rank_fds) return ring__seterr(comm, RING_ERR_NOMEM, "bootstrap: out of memory");
    for (int r = 0; r < comm->nranks; r++) bs->rank_fds[r] = -1;
    return root_run(comm, bs, roots, nroots, all, deadline_ns);
}

void ring__bootstrap_close(ring__bootstrap_t *bs)
{
    if (!bs) return;
    if (bs->root_fd >= 0) close(bs->root_fd);
    if (bs->rank_fds)
        for (int r = 0; r < bs->nranks; r++)
            if (bs->rank_fds[r] >= 0) close(bs->rank_fds[r]);
    free(bs->rank_fds);
    free(bs);
}
