/*
 * RDMA verbs transport (libibverbs): InfiniBand and RoCE, RC queue pairs.
 *
 * Setting up: like shared memory, an upgrade of an established, authenticated TCP connection,
 * whose first socket stays as the liveness channel (a peer that dies closes it, which is
 * seen in milliseconds; a verbs retry timeout takes seconds). One connection is one direction:
 * the receiving side owns a ring of slots in registered memory, the sending side writes into
 * it. On the socket:
 *  1. sender -> receiver, OFFER (192 bytes): status (errno, 0 = verbs ready here), link layer,
 *     LID, MTU, PSN, GID, the QP numbers of its RING_IB_QPS_PER_PEER queue pairs, and the
 *     address and rkey of an 8-byte credit word; a declining OFFER carries the reason.
 *  2. receiver -> sender, ACK (192 bytes): the same about its queue pairs, plus the address,
 *     rkey, count and size of its slots, or its reason to decline.
 *  3. Both move their queue pairs INIT -> RTR -> RTS and say READY (8 bytes: status). Only if
 *     both are ready is the connection verbs; otherwise both keep TCP (RING_TRANSPORT=auto,
 *     logged at INFO) or the rank that demanded rdma fails with the reason.
 *
 * Moving a message (the same slot protocol as shared memory, so the engine cannot tell them
 * apart): a message of L bytes takes max(1, ceil(L / slot_bytes)) slots. For each piece the
 * sender writes a 64-byte header (message number, message length, offset) and the piece into
 * slot (k mod nslots) of the receiver with one RDMA WRITE WITH IMMEDIATE, imm = k mod 2^31;
 * every piece is first copied behind its header into the sender's registered staging slot k,
 * and pieces that fit the queue pair's inline limit go inline from there (the slot is free
 * again at once). Slot k goes on queue pair
 * k mod nqp. The receiver learns of slot k from the receive completion the immediate consumes
 * (posted receives are replenished at once), checks the header against the receive it has
 * posted, and either copies the piece out or hands the slot to the engine, which reduces
 * straight out of it (zero copy). Freed slots are returned in order: the receiver writes its
 * freed count into the sender's credit word with RDMA WRITE WITH IMMEDIATE (imm = the count's
 * low 31 bits), and the sender never has more than nslots slots beyond the last count it got,
 * so it can never overrun the receiver (credit flow control).
 * Bytes on the wire per message: L + 64 per piece, plus one 8-byte credit write per batch of
 * freed slots.
 *
 * Waiting: the engine spins on progress() (which polls the completion queue), then sleeps in
 * poll() on the completion channel (armed with ibv_req_notify_cq, then the queue is polled
 * once more so that nothing that landed meanwhile is slept through), the socket and the
 * device's async-event descriptor. Completion errors (IBV_WC_RETRY_EXC_ERR and the rest) and
 * fatal async events become errors naming the peer.
 *
 * Registered buffers (ring_comm_register): a message of 32 KiB up to one slot whose source
 * lies in registered memory is not copied. The sender writes only the header, flagged READ,
 * with the buffer's address and rkey; the receiver, when it reaches that slot, RDMA READs the
 * piece straight into its destination if that is registered too (zero copy on both sides), or
 * into the slot otherwise, and frees the slot after the read; the freed count tells the sender
 * its buffer is no longer needed. Such a send completes once the receiver has taken the data,
 * as a large send over TCP does once the peer has read the socket; pulling when the receive is
 * posted needs no handshake before the data can move. Registrations are the
 * user's (kept until ring_comm_deregister, documented in ringcomm.h): nothing is cached
 * behind the user's back, so nothing can go stale when memory is freed.
 *
 * Device memory (GPUDirect RDMA, src/cuda/gdr.c): the CUDA path registers its own device slots
 * with ring__rdma_reg_device (dma-buf, else peer memory) and names the registration in isend
 * and irecv. Such a send always takes the read path above, whatever its size; such a receive
 * is always read straight into its buffer, and a piece that came in the slot instead is a
 * protocol error (the CPU cannot copy it there). Their senders announce it in the collective
 * descriptor, so a receiver only posts into device memory when every message will be read.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "bootstrap.h"
#include "log.h"
#include "msgq.h"
#include "net.h"
#include "rdma.h"
#include "topo.h"
#include "watch.h"
#include "wire.h"

#define OFFER_MAGIC 0x5247524fu /* "RGRO" */
#define ACK_MAGIC 0x52475241u   /* "RGRA" */
#define READY_MAGIC 0x52475259u /* "RGRY" */
/* Handshake message (its layout is part of BS_VERSION, bootstrap.c): 0 magic, 4 status, 8 link
 * layer, 12 LID, 16 MTU, 20 QPs, 24 PSN, 28 GID index, 32 GID, 48 QP numbers, 80 address, 88
 * rkey, 92 slots, 96 slot bytes, 104 GID type, HS_TEXT_AT the reason of a non-zero status (long
 * enough for two IPv6 GIDs and a hint). */
#define HS_TEXT_AT 112
#define HS_TEXT 320
#define HS_LEN (HS_TEXT_AT + HS_TEXT)
#define READY_LEN 8
#define MAX_QPS 8
#define HDR 64 /* slot header: message number, message length, offset (padded to a cache line) */
#define MIN_SLOT (64 * (size_t)1024)
#define MAX_SLOT (4 * (size_t)1024 * 1024)
#define MAX_SLOTS 64u
#define MAX_GIDS 128
#define WANT_INLINE 256

enum { K_DATA = 1, K_CREDIT = 2, K_RECV = 3, K_READ = 4 };
#define IMM_MASK RING__RDMA_IMM_MASK
#define HDR_READ 1u /* slot header flag: the piece is not here, read it from (address, rkey) */
#define DIRECT_MIN (32 * (size_t)1024) /* below this a copy costs less than the extra round trip */
#define RD_ATOMIC 4 /* RDMA READs in flight per queue pair */
#define WRID(kind, qp, n) (((uint64_t)(kind) << 56) | ((uint64_t)(qp) << 48) | ((n) & 0xffffffffffffull))

typedef struct rdma_ctx rdma_ctx;
typedef ring__mq_req_t rdma_req;

/* A buffer the user registered (ring_comm_register), or device memory of the CUDA path
 * (ring__rdma_reg_device: never looked up by address, only named by the engine). */
typedef struct rdma_reg {
    char *addr;
    size_t len;
    struct ibv_mr *mr;
    int device;
    struct rdma_reg *next;
} rdma_reg;

typedef struct rdma_conn {
    ring__conn_t base; /* first: the transport table */
    rdma_ctx *ctx;
    int is_send, peer, fd;
    int peer_closed;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    int armed;
    int nqp;
    struct ibv_qp *qp[MAX_QPS];
    uint32_t psn;
    int sq_out[MAX_QPS]; /* work requests posted on the send queue and not completed */
    int sq_max;
    uint32_t max_inline;
    /* Receiver: the slots the sender writes into. Sender: staging of the same geometry. */
    char *slots;
    size_t slots_bytes;
    struct ibv_mr *slots_mr;
    uint32_t nslots;
    size_t slot_bytes, stride;
    /* Sender: the credit word the receiver writes. Receiver: where its count is sent from. */
    uint64_t *cred;
    struct ibv_mr *cred_mr;
    uint64_t raddr; /* sender: the receiver's slots; receiver: the sender's credit word */
    uint32_t rkey;
    uint64_t next;   /* sender: next slot to write; receiver: next slot to read */
    uint64_t freed;  /* both: slots freed by the receiver (the sender's view: the last credit) */
    uint8_t *flag;   /* sender: staging slot still being read by the HCA; receiver: slot arrived */
    uint8_t *done_at; /* receiver: released, waiting for the slots before it */
    uint64_t n_credit_waits; /* receiver: credits that waited for a send queue entry */
    rdma_req **by_slot; /* sender: the message a read-from-my-buffer slot stands for */
    uint8_t *rstate;    /* receiver: 1 while the slot's piece is being read, 2 once read */
    uint64_t n_direct, n_slots; /* messages moved each way, for the log at close */
    ring__mq_t q;       /* messages posted, in order */
    ring_result_t failed;
    char desc[160];
} rdma_conn;


/* A connection being upgraded: the verbs objects are made first, the TCP side is swapped
 * out only when both sides are ready. */
typedef struct up {
    int peer, is_send, fd, state;
    void *base;
    rdma_conn *c;
    unsigned char msg[HS_LEN];
    size_t io;
    int status, peer_status;
    char reason[HS_TEXT + 64];
    struct up *next;
} up;

struct rdma_ctx {
    ring_comm_t *comm;
    struct ibv_context *dev;
    struct ibv_pd *pd;
    char dev_name[64];
    int port;
    int is_ib;
    uint16_t lid;
    enum ibv_mtu mtu;
    int gid_index;
    union ibv_gid gid;
    uint32_t gid_type; /* RING__GID_* */
    int nqp;
    up *ups;
    uint8_t *keep_tcp[2];
    int said_qos;       /* the device's different traffic class or service level was logged */
    ring_result_t dead; /* a fatal device or port event: every connection fails with it */
    char dead_msg[256];
    ring_result_t forced_rc;
    char forced_msg[RING__ERRMSG_MAX];
    pthread_mutex_t reg_mu; /* registrations come from user threads, lookups from the engine */
    rdma_reg *regs;
};

enum { S_START, S_OFFER_IO, S_ACK_IO, S_READY_W, S_READY_R, S_DONE };

static const char *mtu_str(enum ibv_mtu m)
{
    switch (m) {
    case IBV_MTU_256: return "256";
    case IBV_MTU_512: return "512";
    case IBV_MTU_1024: return "1024";
    case IBV_MTU_2048: return "2048";
    case IBV_MTU_4096: return "4096";
    }
    return "?";
}

/* RING_IB_HCA is "name[:port]" with the NCCL filter syntax; among the devices it allows, the
 * topology's choice (the HCA closest to the rank's GPU or cores) comes first, then the first
 * active port of any. */
static ring_result_t open_port(rdma_ctx *ctx, char *why, size_t len)
{
    ring_comm_t *comm = ctx->comm;
    const char *spec = getenv("RING_IB_HCA");
    char planned[64] = "";
    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (!list) {
        int e = errno;
        snprintf(why, len, "%sibv_get_device_list: %s", e == ENOSYS ? "this kernel has no RDMA support (" : "",
                 strerror(e));
        if (e == ENOSYS) snprintf(why + strlen(why), len - strlen(why), ")");
        return RING_ERR_SYSTEM;
    }
    /* The HCA the plan gives this rank: from the same facts as the rest of its placement (its
     * local rank, so that ranks of a host share the HCAs out, and its GPU). A topology read
     * from a file is shown, never applied. The plan applies RING_IB_HCA's filter itself. */
    if (comm->topo && !comm->topo->from_file) {
        ring__topo_req_t req;
        const char *src = NULL;
        char gpu[32];
        ring__topo_plan_t *pl = calloc(1, sizeof *pl);
        if (pl && ring__placement_req(comm, &req, gpu, sizeof gpu, &src) == RING_OK) {
            req.use_hca = 1;
            if (ring__topo_plan(comm, comm->topo, &req, pl) == RING_OK && pl->nic >= 0)
                snprintf(planned, sizeof planned, "%s", pl->nic_name);
        }
        free(pl);
    }
    /* Pass 0 looks only at the topology's choice, pass 1 at everything. */
    for (int pass = planned[0] ? 0 : 1; pass < 2 && !ctx->dev; pass++) {
        for (int i = 0; i < ndev && !ctx->dev; i++) {
            const char *name = ibv_get_device_name(list[i]);
            if (spec && *spec && !ring__topo_name_match(spec, name)) continue;
            const int want_port = spec && *spec ? ring__hca_port_of(spec, name) : 0; /* this entry's */
            if (pass == 0 && (!planned[0] || strcmp(planned, name))) continue;
            struct ibv_context *d = ibv_open_device(list[i]);
            struct ibv_device_attr da;
            if (!d) continue;
            if (ibv_query_device(d, &da) != 0) {
                ibv_close_device(d);
                continue;
            }
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (want_port && p != want_port) continue;
                if (ibv_query_port(d, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
                ctx->dev = d;
                ctx->port = p;
                ctx->is_ib = pa.link_layer != IBV_LINK_LAYER_ETHERNET;
                ctx->lid = pa.lid;
                ctx->mtu = pa.active_mtu;
                snprintf(ctx->dev_name, sizeof ctx->dev_name, "%s", name);
                break;
            }
            if (!ctx->dev) ibv_close_device(d);
        }
    }
    if (!ctx->dev) {
        if (spec && *spec)
            snprintf(why, len, "no active port on a device matching RING_IB_HCA=\"%s\" (%d device(s) found)", spec, ndev);
        else
            snprintf(why, len, "no RDMA device with an active port (%d device(s) found%s)", ndev,
                     ndev ? "" : "; is the driver module loaded and rdma-core's provider installed?");
    }
    ibv_free_device_list(list);
    return ctx->dev ? RING_OK : RING_ERR_UNSUPPORTED;
}

/* The handshake compares the two ends' GID types (ring__rdma_gid_check). */
static uint32_t gid_type_of(rdma_ctx *ctx)
{
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx->dev, (uint32_t)ctx->port, (uint32_t)ctx->gid_index, &e, 0) != 0) return RING__GID_UNKNOWN;
    return e.gid_type == IBV_GID_TYPE_ROCE_V2   ? RING__GID_ROCE_V2
           : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? RING__GID_ROCE_V1
                                                : RING__GID_IB;
}

static ring_result_t pick_gid(rdma_ctx *ctx, char *why, size_t len)
{
    ring_comm_t *comm = ctx->comm;
    const char *forced = getenv("RING_IB_GID_INDEX");
    if (forced && *forced) {
        char *end;
        long v = strtol(forced, &end, 10);
        if (*end || v < 0 || v > 255 || ibv_query_gid(ctx->dev, (uint8_t)ctx->port, (int)v, &ctx->gid) != 0) {
            snprintf(why, len, "RING_IB_GID_INDEX=\"%s\" is not a GID index of %s port %d", forced, ctx->dev_name, ctx->port);
            return RING_ERR_INVALID_ARG;
        }
        static const uint8_t zero[16];
        if (!memcmp(ctx->gid.raw, zero, sizeof zero)) {
            /* An unused table entry reads back as zeros; a queue pair given it fails at RTR with
             * a far less helpful message. */
            snprintf(why, len, "RING_IB_GID_INDEX=%ld names an empty GID entry of %s port %d", v, ctx->dev_name, ctx->port);
            return RING_ERR_INVALID_ARG;
        }
        ctx->gid_index = (int)v;
        ctx->gid_type = gid_type_of(ctx);
        ring__gid_ent_t g = {.index = (uint32_t)v, .type = ctx->gid_type};
        memcpy(g.gid, ctx->gid.raw, 16);
        ring__rdma_gid_str(&g, why, len);
        snprintf(why + strlen(why), len - strlen(why), " (RING_IB_GID_INDEX%s)",
                 !ctx->is_ib && (comm->params.ib_roce_version || comm->params.ib_addr_family ||
                                 comm->params.ib_range_prefix >= 0)
                     ? "; RING_IB_ROCE_VERSION, RING_IB_ADDR_FAMILY and RING_IB_ADDR_RANGE give way to it"
                     : "");
        return RING_OK;
    }
    /* The table holds every port's entries, and the kernel refuses (EINVAL) an array too
     * small for all of them: a RoCE NIC with many addresses or VLANs has hundreds. */
    struct ibv_gid_entry *e = NULL;
    ring__gid_ent_t *t = NULL;
    ssize_t got = -EINVAL;
    int n = 0;
    for (size_t cap = MAX_GIDS; got == -EINVAL && cap <= 64 * MAX_GIDS; cap *= 4) {
        free(e);
        free(t);
        e = calloc(cap, sizeof *e);
        t = calloc(cap, sizeof *t);
        if (!e || !t) {
            free(e);
            free(t);
            snprintf(why, len, "out of memory");
            return RING_ERR_NOMEM;
        }
        got = ibv_query_gid_table(ctx->dev, e, cap, 0);
    }
    if (got < 0)
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank, "rdma: %s: ibv_query_gid_table: %s", ctx->dev_name,
                 strerror((int)-got));
    for (ssize_t i = 0; i < got; i++) {
        if ((int)e[i].port_num != ctx->port) continue;
        memcpy(t[n].gid, e[i].gid.raw, 16);
        t[n].index = e[i].gid_index;
        t[n].type = e[i].gid_type == IBV_GID_TYPE_ROCE_V2   ? RING__GID_ROCE_V2
                    : e[i].gid_type == IBV_GID_TYPE_ROCE_V1 ? RING__GID_ROCE_V1
                                                            : RING__GID_IB;
        n++;
    }
    const uint8_t *want = NULL;
    if (comm->data_addr.ss_family == AF_INET) want = (const uint8_t *)&((struct sockaddr_in *)&comm->data_addr)->sin_addr;
    ring__gid_want_t kind = {.version = comm->params.ib_roce_version,
                             .family = comm->params.ib_addr_family,
                             .prefix = comm->params.ib_range_prefix,
                             .range = comm->params.ib_range};
    memcpy(kind.net, comm->params.ib_range_net, 16);
    ctx->gid_index = ring__rdma_pick_gid(t, n, ctx->is_ib, &kind, want, why, len);
    free(e);
    free(t);
    if (ctx->gid_index < 0 && ctx->is_ib) {
        /* Old kernels without the table interface: IB routes by LID, GID 0 is enough. */
        ctx->gid_index = 0;
        snprintf(why, len, "GID index 0 (InfiniBand)");
    }
    if (ctx->gid_index < 0) return RING_ERR_UNSUPPORTED;
    if (ibv_query_gid(ctx->dev, (uint8_t)ctx->port, ctx->gid_index, &ctx->gid) != 0) {
        snprintf(why, len, "ibv_query_gid(%d): %s", ctx->gid_index, strerror(errno));
        return RING_ERR_SYSTEM;
    }
    ctx->gid_type = gid_type_of(ctx);
    return RING_OK;
}

static void conn_destroy(rdma_conn *c);

static void ctx_free(rdma_ctx *ctx)
{
    if (!ctx) return;
    /* Handshakes cut short (a peer that died or stalled, a connect timeout): their half-made
     * connections hold queue pairs, registered slots and memory of their own. */
    while (ctx->ups) {
        up *n = ctx->ups->next;
        conn_destroy(ctx->ups->c);
        free(ctx->ups);
        ctx->ups = n;
    }
    while (ctx->regs) {
        rdma_reg *n = ctx->regs->next;
        ibv_dereg_mr(ctx->regs->mr);
        free(ctx->regs);
        ctx->regs = n;
    }
    pthread_mutex_destroy(&ctx->reg_mu);
    if (ctx->pd) ibv_dealloc_pd(ctx->pd);
    if (ctx->dev) ibv_close_device(ctx->dev);
    free(ctx->keep_tcp[0]);
    free(ctx);
}

/*
 * *ctxp stays NULL (and RING_OK) when RING_TRANSPORT=auto finds no usable port: TCP between
 * hosts then, said at INFO. RING_TRANSPORT=rdma without a port is an error.
 */
static ring_result_t rdma_init(ring_comm_t *comm, void **ctxp)
{
    ring_result_t rc = RING_OK;
    char why[256] = "", gwhy[256] = "";
    *ctxp = NULL;
    rdma_ctx *ctx = calloc(1, sizeof *ctx);
    uint8_t *k = calloc(2 * (size_t)comm->nranks, 1);
    if (!ctx || !k) {
        free(ctx);
        free(k);
        return ring__seterr(comm, RING_ERR_NOMEM, "rdma: out of memory");
    }
    ctx->comm = comm;
    pthread_mutex_init(&ctx->reg_mu, NULL);
    ctx->keep_tcp[0] = k;
    ctx->keep_tcp[1] = k + comm->nranks;
    ctx->nqp = comm->params.ib_qps;
    ring__fork_guard_enter(); /* libibverbs' device list holds a lock of its own */
    rc = open_port(ctx, why, sizeof why);
    if (rc == RING_OK) rc = pick_gid(ctx, gwhy, sizeof gwhy);
    ring__fork_guard_leave();
    if (rc == RING_OK && !(ctx->pd = ibv_alloc_pd(ctx->dev))) {
        snprintf(why, sizeof why, "ibv_alloc_pd on %s: %s", ctx->dev_name, strerror(errno));
        rc = RING_ERR_SYSTEM;
    }
    if (rc == RING_OK) {
        /* Async events are read whenever a connection is checked; never block on them. */
        int fl = fcntl(ctx->dev->async_fd, F_GETFL);
        if (fl < 0 || fcntl(ctx->dev->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            snprintf(why, sizeof why, "async event descriptor of %s: %s", ctx->dev_name, strerror(errno));
            rc = RING_ERR_SYSTEM;
        }
    }
    if (rc != RING_OK) {
        const char *w = why[0] ? why : gwhy;
        if (comm->params.transport == RING__TP_RDMA)
            rc = ring__seterr(comm, rc == RING_ERR_INVALID_ARG ? rc : RING_ERR_UNSUPPORTED, "RING_TRANSPORT=rdma, but %s", w);
        else if (rc == RING_ERR_INVALID_ARG)
            /* A RING_IB_GID_INDEX that names nothing on a port that is there is a mistake to
             * report, not a host without verbs to route around. */
            rc = ring__seterr(comm, rc, "%s", w);
        else {
            /* A kind asked for (RING_IB_ROCE_VERSION, RING_IB_ADDR_FAMILY, RING_IB_ADDR_RANGE) that
             * this port lacks costs the job its verbs between this host and the others: worth a
             * warning. */
            int asked = !why[0] && !ctx->is_ib &&
                        (comm->params.ib_roce_version || comm->params.ib_addr_family || comm->params.ib_range_prefix >= 0);
            RING_LOG(asked ? RING_LOG_WARN : RING_LOG_INFO, RING_SUB_INIT, comm->rank, "rdma: not used (%s); TCP between hosts",
                     w);
            rc = RING_OK;
        }
        ctx_free(ctx);
        return rc;
    }
    RING_LOG(RING_LOG_INFO, RING_SUB_INIT, comm->rank, "rdma: %s port %d (%s, LID %u, active MTU %s), %s, %d QP(s) per peer",
             ctx->dev_name, ctx->port, ctx->is_ib ? "InfiniBand" : "RoCE", ctx->lid, mtu_str(ctx->mtu), gwhy, ctx->nqp);
    /* Registered pages are shared copy-on-write with a child after fork() on kernels without
     * copy-on-fork for pinned memory (before about 5.13): a write of the parent then moves a
     * staging slot or credit word away from what the HCA reads and writes. Said once here, as
     * fork() after init is otherwise supported (docs/api.md). */
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED)
        RING_LOG(RING_LOG_WARN, RING_SUB_INIT, comm->rank,
                 "rdma: this kernel does not copy pinned pages on fork(): a fork() after ring_comm_init, while this "
                 "communicator lives, can corrupt or stall its verbs connections (docs/rdma.md)");
    *ctxp = ctx;
    return RING_OK;
}

static void rdma_fini(void *vctx)
{
    ctx_free(vctx);
}

/* Ring edges carry pipeline chunks: a slot holds one chunk (zero-copy receive) and there is one
 * per message in flight. Connections of the latency algorithms carry small messages. */
static void geometry(const ring_comm_t *comm, int peer, uint32_t *nslots, size_t *slot_bytes)
{
    /* Called by the receiver, which owns the slots: its ring edge comes from the left. */
    if (peer == comm->left) {
        size_t s = (comm->params.chunk_bytes + 4095) & ~(size_t)4095;
        *slot_bytes = RING__MAX(MIN_SLOT, RING__MIN(MAX_SLOT, s));
        *nslots = (uint32_t)RING__MAX(2, RING__MIN((int)MAX_SLOTS, comm->params.pipeline_depth));
    } else {
        *slot_bytes = MIN_SLOT;
        *nslots = 4;
    }
}

static void conn_destroy(rdma_conn *c)
{
    if (!c) return;
    for (int i = 0; i < c->nqp; i++)
        if (c->qp[i]) ibv_destroy_qp(c->qp[i]);
    if (c->slots_mr) ibv_dereg_mr(c->slots_mr);
    if (c->cred_mr) ibv_dereg_mr(c->cred_mr);
    free(c->by_slot);
    free(c->rstate);
    if (c->cq) ibv_destroy_cq(c->cq);
    if (c->ch) ibv_destroy_comp_channel(c->ch);
    free(c->slots);
    free(c->cred);
    free(c->flag);
    free(c->done_at);
    ring__mq_free(&c->q);
    if (c->fd >= 0) close(c->fd);
    free(c);
}

/* Receives only take immediates (credits on the sender's, slot numbers on the receiver's). */
static int post_recv(rdma_conn *c, int q)
{
    struct ibv_recv_wr wr = {.wr_id = WRID(K_RECV, q, 0)}, *bad;
    return ibv_post_recv(c->qp[q], &wr, &bad);
}

/* Queue pairs in INIT with their receives posted; the slots (receiver) or staging (sender)
 * registered. Returns an errno and says why. */
static int make_verbs(rdma_ctx *ctx, rdma_conn *c, uint32_t nslots, size_t slot_bytes, char *why, size_t len)
{
    c->nslots = nslots;
    c->slot_bytes = slot_bytes;
    c->stride = HDR + slot_bytes;
    c->slots_bytes = c->stride * nslots;
    /* The sender learns the geometry from the receiver's ACK, after its queue pairs exist:
     * they are sized for the largest one. */
    uint32_t cap = c->is_send ? MAX_SLOTS : nslots;
    c->sq_max = (int)cap + 8;
    /* Tests: a receiver's send queue this short fills up with a collective's credits and reads
     * (the path in send_credit that hardware seldom takes). */
    const char *tsq = getenv("RING_TEST_IB_RECV_SQ");
    if (!c->is_send && tsq && atoi(tsq) > 0 && atoi(tsq) < c->sq_max) c->sq_max = atoi(tsq);
    int rq = 2 * (int)cap + 8;
    c->flag = calloc(nslots, 1);
    c->done_at = calloc(nslots, 1);
    c->cred = aligned_alloc(64, 64);
    if (posix_memalign((void **)&c->slots, 4096, c->slots_bytes) != 0) c->slots = NULL;
    if (!c->flag || !c->done_at || !c->cred || !c->slots) {
        snprintf(why, len, "out of memory for %zu bytes of slots", c->slots_bytes);
        return ENOMEM;
    }
    memset(c->cred, 0, 64);
    const char *what = "";
    if (!(c->ch = ibv_create_comp_channel(ctx->dev))) what = "ibv_create_comp_channel";
    else if (fcntl(c->ch->fd, F_SETFL, fcntl(c->ch->fd, F_GETFL) | O_NONBLOCK) < 0) what = "completion channel";
    else if (!(c->cq = ibv_create_cq(ctx->dev, c->nqp * (c->sq_max + rq), c, c->ch, 0))) what = "ibv_create_cq";
    else if (!(c->slots_mr = ibv_reg_mr(ctx->pd, c->slots, c->slots_bytes,
                                        IBV_ACCESS_LOCAL_WRITE | (c->is_send ? 0 : IBV_ACCESS_REMOTE_WRITE))))
        what = "ibv_reg_mr (slots; is the locked-memory limit, ulimit -l, too low?)";
    else if (!(c->cred_mr = ibv_reg_mr(ctx->pd, c->cred, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
        what = "ibv_reg_mr (credit word)";
    else if (!c->is_send && !(c->rstate = calloc(nslots, 1)))
        what = "calloc (read state)";
    if (*what) {
        int e = errno ? errno : EIO;
        snprintf(why, len, "%s on %s: %s", what, ctx->dev_name, strerror(e));
        return e;
    }
    c->psn = (uint32_t)(ring__now_ns() ^ ((uint64_t)c->peer << 12) ^ ((uint64_t)getpid() << 3)) & 0xffffff;
    for (int q = 0; q < c->nqp; q++) {
        struct ibv_qp_init_attr ia = {
            .qp_context = c,
            .send_cq = c->cq,
            .recv_cq = c->cq,
            .cap = {.max_send_wr = (uint32_t)c->sq_max, .max_recv_wr = (uint32_t)rq, .max_send_sge = 1,
                    .max_recv_sge = 1, .max_inline_data = WANT_INLINE},
            .qp_type = IBV_QPT_RC,
            .sq_sig_all = 1,
        };
        c->qp[q] = ibv_create_qp(ctx->pd, &ia);
        if (!c->qp[q]) {
            /* Some devices take no inline data at all: ask again without. */
            ia.cap.max_inline_data = 0;
            c->qp[q] = ibv_create_qp(ctx->pd, &ia);
        }
        if (!c->qp[q]) {
            int e = errno ? errno : EIO;
            snprintf(why, len, "ibv_create_qp on %s: %s", ctx->dev_name, strerror(e));
            return e;
        }
        c->max_inline = q ? RING__MIN(c->max_inline, ia.cap.max_inline_data) : ia.cap.max_inline_data;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)ctx->port,
                                .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE};
        int e = ibv_modify_qp(c->qp[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (e) {
            snprintf(why, len, "QP to INIT on %s: %s", ctx->dev_name, strerror(e));
            return e;
        }
        /* Receives: the sender's take credits (on QP 0 only), the receiver's take the immediate
         * of every slot written. */
        int nrecv = c->is_send ? (q == 0 ? rq : 0) : rq;
        for (int i = 0; i < nrecv; i++)
            if ((e = post_recv(c, q)) != 0) {
                snprintf(why, len, "ibv_post_recv on %s: %s", ctx->dev_name, strerror(e));
                return e;
            }
    }
    return 0;
}

/* This side's half of the handshake: status, port, queue pairs and the memory the peer writes. */
static void put_hs(rdma_ctx *ctx, up *u)
{
    rdma_conn *c = u->c;
    memset(u->msg, 0, HS_LEN);
    ring__put32(u->msg, u->is_send ? OFFER_MAGIC : ACK_MAGIC);
    ring__put32(u->msg + 4, (uint32_t)u->status);
    if (u->status) {
        snprintf((char *)u->msg + HS_TEXT_AT, HS_TEXT, "%.*s", HS_TEXT - 1, u->reason);
        return;
    }
    ring__put32(u->msg + 8, ctx->is_ib ? 1 : 2);
    ring__put32(u->msg + 12, ctx->lid);
    ring__put32(u->msg + 16, (uint32_t)ctx->mtu);
    ring__put32(u->msg + 20, (uint32_t)c->nqp);
    ring__put32(u->msg + 24, c->psn);
    ring__put32(u->msg + 28, (uint32_t)ctx->gid_index);
    memcpy(u->msg + 32, ctx->gid.raw, 16);
    ring__put32(u->msg + 104, ctx->gid_type);
    for (int q = 0; q < c->nqp; q++) ring__put32(u->msg + 48 + 4 * q, c->qp[q]->qp_num);
    if (u->is_send) {
        ring__put64(u->msg + 80, (uint64_t)(uintptr_t)c->cred);
        ring__put32(u->msg + 88, c->cred_mr->rkey);
    } else {
        ring__put64(u->msg + 80, (uint64_t)(uintptr_t)c->slots);
        ring__put32(u->msg + 88, c->slots_mr->rkey);
        ring__put32(u->msg + 92, c->nslots);
        ring__put64(u->msg + 96, c->slot_bytes);
    }
}

/* The peer's half: RTR and RTS towards its queue pairs. Returns an errno and says why. */
static int connect_qps(rdma_ctx *ctx, up *u)
{
    rdma_conn *c = u->c;
    const unsigned char *m = u->msg;
    int is_ib = ring__get32(m + 8) == 1;
    if (is_ib != ctx->is_ib) {
        snprintf(u->reason, sizeof u->reason, "link layers differ (%s here, %s at rank %d)", ctx->is_ib ? "InfiniBand" : "RoCE",
                 is_ib ? "InfiniBand" : "RoCE", u->peer);
        return EPROTO;
    }
    if (!is_ib) {
        ring__gid_ent_t here = {.index = (uint32_t)ctx->gid_index, .type = ctx->gid_type};
        ring__gid_ent_t there = {.index = ring__get32(m + 28), .type = ring__get32(m + 104)};
        memcpy(here.gid, ctx->gid.raw, 16);
        memcpy(there.gid, m + 32, 16);
        if (ring__rdma_gid_check(&here, &there, u->peer, u->reason, sizeof u->reason)) return EPROTO;
    }
    if ((int)ring__get32(m + 20) != c->nqp) {
        snprintf(u->reason, sizeof u->reason, "RING_IB_QPS_PER_PEER differs (%d here, %u at rank %d)", c->nqp,
                 ring__get32(m + 20), u->peer);
        return EPROTO;
    }
    enum ibv_mtu mtu = (enum ibv_mtu)RING__MIN((uint32_t)ctx->mtu, ring__get32(m + 16));
    c->raddr = ring__get64(m + 80);
    c->rkey = ring__get32(m + 88);
    for (int q = 0; q < c->nqp; q++) {
        struct ibv_qp_attr a = {
            .qp_state = IBV_QPS_RTR,
            .path_mtu = mtu,
            .dest_qp_num = ring__get32(m + 48 + 4 * q),
            .rq_psn = ring__get32(m + 24),
            .max_dest_rd_atomic = RD_ATOMIC,
            .min_rnr_timer = 12,
            .ah_attr = {.dlid = (uint16_t)ring__get32(m + 12),
                        .sl = (uint8_t)ctx->comm->params.ib_sl,
                        .port_num = (uint8_t)ctx->port},
        };
        if (!is_ib) {
            /* RoCE routes by GID (IP); InfiniBand by LID within a subnet. */
            a.ah_attr.is_global = 1;
            memcpy(a.ah_attr.grh.dgid.raw, m + 32, 16);
            a.ah_attr.grh.sgid_index = (uint8_t)ctx->gid_index;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = (uint8_t)ctx->comm->params.ib_tc;
        }
        int e = ibv_modify_qp(c->qp[q], &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        if (e) {
            snprintf(u->reason, sizeof u->reason, "QP to RTR towards rank %d: %s (no route to its %s?)", u->peer,
                     strerror(e), is_ib ? "LID" : "GID");
            return e;
        }
        /* Default timeout 14: 4.096 us x 2^14 = 67 ms per try, 7 tries (unlimited on rxe, whose
         * completer never counts 7 down); a dead peer is normally seen sooner through the
         * socket. A lost packet costs one timeout before the retransmission, so a lossy fabric
         * wants it lower, a congested one higher (RING_IB_TIMEOUT, RING_IB_RETRY_CNT as
         * NCCL's). rnr_retry 7: a receiver short of posted receives is waited for, never an
         * error. */
        struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS,
                                .timeout = (uint8_t)ctx->comm->params.ib_timeout,
                                .retry_cnt = (uint8_t)ctx->comm->params.ib_retry_cnt,
                                .rnr_retry = 7,
                                .sq_psn = c->psn,
                                .max_rd_atomic = RD_ATOMIC};
        e = ibv_modify_qp(c->qp[q], &s,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                              IBV_QP_MAX_QP_RD_ATOMIC);
        if (e) {
            snprintf(u->reason, sizeof u->reason, "QP to RTS towards rank %d: %s", u->peer, strerror(e));
            return e;
        }
    }
    return 0;
}

static rdma_conn *conn_new(rdma_ctx *ctx, int peer, int is_send)
{
    rdma_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base.tp = &ring__rdma_transport;
    c->ctx = ctx;
    c->is_send = is_send;
    c->peer = peer;
    c->fd = -1;
    c->nqp = ctx->nqp;
    snprintf(c->desc, sizeof c->desc, "rank %d (RDMA, %s)", peer, ctx->dev_name);
    return c;
}

/* Read this side's reasons into u->reason: the peer's text when it declined. */
static void peer_reason(up *u)
{
    char t[HS_TEXT];
    memcpy(t, u->msg + HS_TEXT_AT, HS_TEXT);
    t[HS_TEXT - 1] = '\0';
    snprintf(u->reason, sizeof u->reason, "rank %d: %s", u->peer, t);
}

static ring_result_t rdma_upgrade(void *vctx, void *base, int peer, int is_send, void **out)
{
    rdma_ctx *ctx = vctx;
    ring_comm_t *comm = ctx->comm;
    ring_result_t rc = RING_OK;
    up *u = ctx->ups, **pp = &ctx->ups;
    *out = NULL;
    if (ctx->keep_tcp[is_send][peer]) {
        *out = base;
        return RING_OK;
    }
    while (u && !(u->peer == peer && u->is_send == is_send)) pp = &u->next, u = u->next;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u || !(u->c = conn_new(ctx, peer, is_send))) {
            free(u);
            return ring__seterr(comm, RING_ERR_NOMEM, "rdma: out of memory");
        }
        u->peer = peer;
        u->is_send = is_send;
        u->base = base;
        u->fd = ring__tcp_conn_fd(base);
        u->state = S_START;
        u->next = ctx->ups;
        ctx->ups = u;
        pp = &ctx->ups;
    }
    int r = 1;
    if (is_send) {
        if (u->state == S_START) {
            /* The receiver decides the geometry; the sender's staging follows its ACK, so only
             * the queue pairs and the credit word exist yet. Start with the smallest staging. */
            u->status = make_verbs(ctx, u->c, 1, 4096, u->reason, sizeof u->reason);
            put_hs(ctx, u);
            u->state = S_OFFER_IO;
        }
        if (u->state == S_OFFER_IO && (r = ring__mq_io(u->fd, u->msg, HS_LEN, &u->io, 1)) == 1) {
            u->state = S_ACK_IO;
            u->io = 0;
        }
        if (r == 1 && u->state == S_ACK_IO && (r = ring__mq_io(u->fd, u->msg, HS_LEN, &u->io, 0)) == 1) {
            if (ring__get32(u->msg) != ACK_MAGIC) {
                rc = ring__seterr(comm, RING_ERR_PROTOCOL, "rdma: garbage from rank %d where a verbs ACK was expected", peer);
                goto fail;
            }
            u->peer_status = (int)ring__get32(u->msg + 4);
            if (u->peer_status && !u->status) peer_reason(u);
            if (!u->status && !u->peer_status) {
                uint32_t ns = ring__get32(u->msg + 92);
                uint64_t sb = ring__get64(u->msg + 96);
                if (ns < 1 || ns > MAX_SLOTS || sb < 4096 || sb > MAX_SLOT || sb % 64) {
                    rc = ring__seterr(comm, RING_ERR_PROTOCOL, "rdma: rank %d offered %u slots of %llu bytes", peer, ns,
                                      (unsigned long long)sb);
                    goto fail;
                }
                /* Staging of the receiver's geometry: drop the placeholder and register anew. */
                rdma_conn *old = u->c;
                ibv_dereg_mr(old->slots_mr);
                old->slots_mr = NULL;
                free(old->slots);
                free(old->flag);
                free(old->done_at);
                old->slots = NULL;
                old->flag = old->done_at = NULL;
                old->nslots = ns;
                old->slot_bytes = (size_t)sb;
                old->stride = HDR + (size_t)sb;
                old->slots_bytes = old->stride * ns;
                old->flag = calloc(ns, 1);
                old->by_slot = calloc(ns, sizeof *old->by_slot);
                if (posix_memalign((void **)&old->slots, 4096, old->slots_bytes) != 0) old->slots = NULL;
                if (!old->flag || !old->by_slot || !old->slots) {
                    u->status = ENOMEM;
                    snprintf(u->reason, sizeof u->reason, "out of memory for %zu bytes of staging", old->slots_bytes);
                } else if (!(old->slots_mr = ibv_reg_mr(ctx->pd, old->slots, old->slots_bytes, IBV_ACCESS_LOCAL_WRITE))) {
                    u->status = errno ? errno : EIO;
                    snprintf(u->reason, sizeof u->reason, "ibv_reg_mr (staging) on %s: %s", ctx->dev_name, strerror(u->status));
                }
                if (!u->status) u->status = connect_qps(ctx, u);
            }
            memset(u->msg, 0, READY_LEN);
            ring__put32(u->msg, READY_MAGIC);
            ring__put32(u->msg + 4, (uint32_t)u->status);
            u->io = 0;
            u->state = S_READY_W;
        }
    } else {
        if (u->state == S_START && (r = ring__mq_io(u->fd, u->msg, HS_LEN, &u->io, 0)) == 1) {
            if (ring__get32(u->msg) != OFFER_MAGIC) {
                rc = ring__seterr(comm, RING_ERR_PROTOCOL, "rdma: garbage from rank %d where a verbs OFFER was expected", peer);
                goto fail;
            }
            u->peer_status = (int)ring__get32(u->msg + 4);
            unsigned char offer[HS_LEN];
            memcpy(offer, u->msg, HS_LEN);
            if (u->peer_status) {
                peer_reason(u);
                u->status = ECANCELED; /* declined in turn; the ACK carries the reason back */
            } else {
                uint32_t ns;
                size_t sb;
                geometry(comm, peer, &ns, &sb);
                u->status = make_verbs(ctx, u->c, ns, sb, u->reason, sizeof u->reason);
            }
            if (!u->status) {
                memcpy(u->msg, offer, HS_LEN);
                u->status = connect_qps(ctx, u);
            }
            put_hs(ctx, u);
            u->io = 0;
            u->state = S_ACK_IO;
        }
        if (r == 1 && u->state == S_ACK_IO && (r = ring__mq_io(u->fd, u->msg, HS_LEN, &u->io, 1)) == 1) {
            memset(u->msg, 0, READY_LEN);
            ring__put32(u->msg, READY_MAGIC);
            ring__put32(u->msg + 4, (uint32_t)u->status);
            u->io = 0;
            u->state = S_READY_W;
        }
    }
    if (r == 1 && u->state == S_READY_W && (r = ring__mq_io(u->fd, u->msg, READY_LEN, &u->io, 1)) == 1) {
        u->state = S_READY_R;
        u->io = 0;
    }
    if (r == 1 && u->state == S_READY_R && (r = ring__mq_io(u->fd, u->msg, READY_LEN, &u->io, 0)) == 1) {
        if (ring__get32(u->msg) != READY_MAGIC) {
            rc = ring__seterr(comm, RING_ERR_PROTOCOL, "rdma: garbage from rank %d where READY was expected", peer);
            goto fail;
        }
        int theirs = (int)ring__get32(u->msg + 4);
        if (theirs && !u->status && !u->peer_status) {
            u->peer_status = theirs;
            snprintf(u->reason, sizeof u->reason, "rank %d could not connect its queue pairs (%s)", peer, strerror(theirs));
        }
        u->state = S_DONE;
    }
    if (r < 0) {
        rc = ring__seterr_errno(comm, RING_ERR_PEER, errno, "rdma: connection with rank %d lost during the verbs handshake", peer);
        goto fail;
    }
    if (u->state != S_DONE) return RING_OK;

    *pp = u->next;
    if (u->status || u->peer_status) {
        /* Demanded verbs fail once every handshake is over (ring__rdma_forced_result): the
         * peers are still reading this rank's messages. */
        if (comm->params.transport == RING__TP_RDMA && !ctx->forced_rc) {
            ctx->forced_rc = RING_ERR_UNSUPPORTED;
            snprintf(ctx->forced_msg, sizeof ctx->forced_msg, "RING_TRANSPORT=rdma, but verbs with rank %d failed: %s", peer,
                     u->reason);
        } else if (comm->params.transport != RING__TP_RDMA) {
            RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank, "rdma: %s rank %d stays on TCP: %s",
                     is_send ? "sending to" : "receiving from", peer, u->reason);
        }
        ctx->keep_tcp[is_send][peer] = 1;
        conn_destroy(u->c);
        free(u);
        *out = base;
        return RING_OK;
    }
    rdma_conn *c = u->c;
    c->fd = ring__tcp_take_fd(base);
    ring__tcp_transport.close(base);
    /* What the device took, not what was asked: the log then shows a RING_IB_TIMEOUT that a
     * driver clamped. */
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    int tmo = -1, retry = -1, sl = -1, tc = -1;
    if (ibv_query_qp(c->qp[0], &qa, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_AV, &qi) == 0) {
        tmo = qa.timeout;
        retry = qa.retry_cnt;
        sl = qa.ah_attr.sl;
        tc = ctx->is_ib ? -1 : qa.ah_attr.grh.traffic_class;
    }
    char tcs[32] = "";
    if (tc >= 0) snprintf(tcs, sizeof tcs, ", traffic class %d", tc);
    /* A driver may not keep what was asked (rxe holds no service level): a class or level the
     * fabric's QoS relies on and the device does not use is said once, where it is seen. Only
     * what was asked for: a device that runs other values than the defaults (an administrator's
     * override of the traffic class) shows them on the INFO line. */
    if (sl >= 0 && !ctx->said_qos &&
        ((comm->params.ib_sl && sl != comm->params.ib_sl) ||
         (!ctx->is_ib && comm->params.ib_tc && tc != comm->params.ib_tc))) {
        char asked[48] = "";
        if (!ctx->is_ib) snprintf(asked, sizeof asked, " and RING_IB_TC=%d", comm->params.ib_tc);
        ctx->said_qos = 1;
        RING_LOG(RING_LOG_WARN, RING_SUB_NET, comm->rank,
                 "rdma: %s's queue pairs report SL %d%s, where RING_IB_SL=%d%s asked for: the driver did not keep them as given",
                 ctx->dev_name, sl, tcs, comm->params.ib_sl, asked);
    }
    /* rxe's completer counts retry_cnt 7 as unlimited, like rnr_retry 7. */
    const int endless = retry == 7 && !strncmp(ctx->dev_name, "rxe", 3);
    RING_LOG(RING_LOG_INFO, RING_SUB_NET, comm->rank,
             "rdma: %s rank %d over %s (%d QP(s), %u slots of %zu bytes, inline %u, ACK timeout %d = %.1f ms, %d retries%s, SL %d%s)",
             is_send ? "sending to" : "receiving from", peer, ctx->dev_name, c->nqp, c->nslots, c->slot_bytes, c->max_inline,
             tmo, tmo >= 0 ? 4.096e-3 * (double)(1ull << tmo) : -1.0, retry, endless ? ", unlimited on rxe" : "", sl, tcs);
    free(u);
    *out = c;
    return RING_OK;
fail:
    *pp = u->next;
    conn_destroy(u->c);
    free(u);
    return rc;
}

static int rdma_upgrade_pollfds(void *vctx, struct pollfd *fds, int max)
{
    rdma_ctx *ctx = vctx;
    int n = 0;
    for (up *u = ctx->ups; u && n < max; u = u->next) {
        int wr = u->state == S_READY_W || (u->is_send && u->state == S_OFFER_IO) || (!u->is_send && u->state == S_ACK_IO);
        fds[n++] = (struct pollfd){.fd = u->fd, .events = wr ? POLLOUT : POLLIN};
    }
    return n;
}

ring_result_t ring__rdma_forced_result(void *vctx)
{
    rdma_ctx *ctx = vctx;
    if (!ctx || !ctx->forced_rc) return RING_OK;
    return ring__seterr(ctx->comm, ctx->forced_rc, "%s", ctx->forced_msg);
}

/* ---- data path ---------------------------------------------------------------------------- */

static ring_result_t conn_fail(rdma_conn *c, ring_result_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ring_result_t conn_fail(rdma_conn *c, ring_result_t code, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (!c->failed) c->failed = ring__seterr(c->ctx->comm, code, "rdma: %s with %s: %s", c->is_send ? "sending" : "receiving",
                                             c->desc, m);
    return c->failed;
}

/* mh: a device registration (ring__rdma_reg_device) naming buf; an empty message has no
 * bytes to read in place and goes as any other. */
static ring_result_t post(rdma_conn *c, void *buf, size_t len, void *mh, void **rp)
{
    *rp = NULL;
    if (c->failed) return c->failed;
    rdma_req *r = ring__mq_post(&c->q, c, buf, len, c->is_send);
    if (!r) return conn_fail(c, RING_ERR_NOMEM, "out of memory");
    r->mh = len ? mh : NULL;
    *rp = r;
    return RING_OK;
}

/* mh (ring__rdma_reg_device): buf is device memory the CPU must not read. It goes by the
 * read-in-place path whatever its size, so it must fit one slot. */
static ring_result_t rdma_isend(void *vc, const void *buf, size_t len, void *mh, void **rp)
{
    rdma_conn *c = vc;
    if (mh && len > c->slot_bytes)
        return conn_fail(c, RING_ERR_INTERNAL, "send of %zu bytes from registered device memory exceeds the %zu-byte slots",
                         len, c->slot_bytes);
    return post(c, (void *)buf, len, mh, rp);
}

/* A registered buffer holding [p, p + len), or NULL. */
static struct ibv_mr *find_reg(rdma_ctx *ctx, const void *p, size_t len)
{
    struct ibv_mr *mr = NULL;
    const char *b = p;
    pthread_mutex_lock(&ctx->reg_mu);
    for (rdma_reg *r = ctx->regs; r && !mr; r = r->next)
        if (!r->device && b >= r->addr && len <= r->len && (size_t)(b - r->addr) <= r->len - len) mr = r->mr;
    pthread_mutex_unlock(&ctx->reg_mu);
    return mr;
}

/* Register [buf, buf + len) (dma-buf fd >= 0: that dma-buf's bytes) and list it. NULL on
 * failure: *nomem if our own allocation failed, else errno is the registration's. */
static rdma_reg *reg_add(rdma_ctx *ctx, void *buf, size_t len, int dmabuf_fd, int device, int *nomem)
{
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    rdma_reg *r = calloc(1, sizeof *r);
    *nomem = !r;
    if (!r) return NULL;
    /* The dma-buf covers exactly [buf, buf + len): offset 0 into it, and the device address as
     * the I/O virtual address, so that the peer's RDMA READ names device addresses. */
    r->mr = dmabuf_fd >= 0 ? ibv_reg_dmabuf_mr(ctx->pd, 0, len, (uint64_t)(uintptr_t)buf, dmabuf_fd, access)
                           : ibv_reg_mr(ctx->pd, buf, len, access);
    if (!r->mr) {
        int e = errno;
        free(r);
        errno = e;
        return NULL;
    }
    r->addr = buf;
    r->len = len;
    r->device = device;
    pthread_mutex_lock(&ctx->reg_mu);
    r->next = ctx->regs;
    ctx->regs = r;
    pthread_mutex_unlock(&ctx->reg_mu);
    return r;
}

static ring_result_t rdma_reg_mem(void *vctx, void *buf, size_t len, void **mh)
{
    rdma_ctx *ctx = vctx;
    int nomem = 0;
    if (!(*mh = reg_add(ctx, buf, len, -1, 0, &nomem)))
        return nomem ? ring__seterr(ctx->comm, RING_ERR_NOMEM, "rdma: out of memory")
                               : ring__seterr_errno(ctx->comm, RING_ERR_SYSTEM, errno,
                                                    "rdma: registering %zu bytes at %p with %s failed (locked-memory limit, ulimit -l?)",
                                                    len, buf, ctx->dev_name);
    return RING_OK;
}

ring_result_t ring__rdma_reg_device(void *vctx, void *buf, size_t len, int dmabuf_fd, void **mh, char *why, size_t whylen)
{
    rdma_ctx *ctx = vctx;
    int nomem = 0;
    if ((*mh = reg_add(ctx, buf, len, dmabuf_fd, 1, &nomem))) return RING_OK;
    if (nomem) {
        snprintf(why, whylen, "out of memory");
        return RING_ERR_NOMEM;
    }
    snprintf(why, whylen, "%s of %zu bytes of device memory on %s: %s", dmabuf_fd >= 0 ? "ibv_reg_dmabuf_mr" : "ibv_reg_mr", len,
             ctx->dev_name, strerror(errno));
    return RING_ERR_UNSUPPORTED;
}

size_t ring__rdma_slot_bytes(void *conn)
{
    return ((rdma_conn *)conn)->slot_bytes;
}

const char *ring__rdma_dev_name(void *vctx)
{
    return ((rdma_ctx *)vctx)->dev_name;
}

static void rdma_dereg_mem(void *vctx, void *mh)
{
    rdma_ctx *ctx = vctx;
    rdma_reg **pp = &ctx->regs, *r = mh;
    if (!r) return;
    pthread_mutex_lock(&ctx->reg_mu);
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    pthread_mutex_unlock(&ctx->reg_mu);
    ibv_dereg_mr(r->mr);
    free(r);
}

/* mh (ring__rdma_reg_device): buf is device memory; the message must come by the
 * read-in-place path (the sender's descriptor promised it), which reads it straight there. */
static ring_result_t rdma_irecv(void *vc, void *buf, size_t len, void *mh, void **rp)
{
    rdma_conn *c = vc;
    if (!buf && len > c->slot_bytes)
        return conn_fail(c, RING_ERR_INTERNAL, "zero-copy receive of %zu bytes exceeds the %zu-byte slots", len, c->slot_bytes);
    if (mh && (!buf || len > c->slot_bytes))
        return conn_fail(c, RING_ERR_INTERNAL, "receive of %zu bytes into registered device memory: needs a buffer of at most one %zu-byte slot",
                         len, c->slot_bytes);
    return post(c, buf, len, mh, rp);
}

static const char *status_hint(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR: return " (the peer stopped answering: process gone, or the port or route is down)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return " (the peer stopped posting receives)";
    case IBV_WC_REM_ACCESS_ERR: return " (the peer refused the write: its slots are gone or the key is stale)";
    default: return "";
    }
}

static ring_result_t poll_cq(rdma_conn *c, int *moved);
static void drain_async(rdma_ctx *ctx);
static void drain_socket(rdma_conn *c);

/* Receiver: freed moved on; tell the sender. The count only grows, so each write carries
 * every slot freed before it. With the send queue full (credit writes and reads not yet
 * acknowledged) it waits for an entry instead of leaving the credit for later: later is this
 * connection's next poll, which after a collective's last message may come only with the next
 * collective, while a sender whose message is read from its buffer cannot finish this one
 * before the credit. The entries come free without the peer's process (its adapter answers),
 * so the wait is short; it is bounded by RING_TIMEOUT_MS all the same. It still watches what
 * the rank's other waits watch: the device's fatal events, and the peer's socket (a peer
 * that is gone needs no credit, and soft-RoCE retransmits to it for ever with a retry count
 * of 7, so its entries would not come free: whether its leaving is an error is for the waits
 * of its messages to say, gone_check). */
static ring_result_t send_credit(rdma_conn *c)
{
    if (c->sq_out[0] >= c->sq_max) {
        const int64_t deadline = ring__now_ns() + (int64_t)c->ctx->comm->params.timeout_ms * 1000000;
        c->n_credit_waits++;
        while (c->sq_out[0] >= c->sq_max) {
            int moved = 0;
            ring_result_t rc = poll_cq(c, &moved);
            if (rc != RING_OK) return rc;
            if (moved) continue;
            drain_async(c->ctx);
            if (c->failed) return c->failed;
            if (c->ctx->dead) return conn_fail(c, c->ctx->dead, "%s", c->ctx->dead_msg);
            drain_socket(c);
            if (c->peer_closed) return RING_OK;
            /* As the engine's own waits: an abort or another rank's failure ends this one
             * within a pass (a port that went down leaves the entries taken until the
             * timeout, and the call would hold a CPU until then). */
            if (atomic_load(&c->ctx->comm->aborted))
                return conn_fail(c, RING_ERR_ABORTED, "aborted by ring_comm_abort while waiting to send a credit");
            if (atomic_load(&c->ctx->comm->remote_failed)) return ring__remote_result(c->ctx->comm, "rdma");
            if (ring__now_ns() > deadline)
                return conn_fail(c, RING_ERR_TIMEOUT, "no send queue entry came free for a credit in %d ms (RING_TIMEOUT_MS)",
                                 c->ctx->comm->params.timeout_ms);
        }
    }
    c->cred[1] = c->freed; /* the source word; the sender reads the count from the immediate */
    struct ibv_sge sg = {.addr = (uint64_t)(uintptr_t)&c->cred[1], .length = 8, .lkey = c->cred_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = WRID(K_CREDIT, 0, c->freed),
        .sg_list = &sg,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED | (c->max_inline >= 8 ? IBV_SEND_INLINE : 0),
        .imm_data = htonl((uint32_t)c->freed & IMM_MASK),
        .wr.rdma = {.remote_addr = c->raddr, .rkey = c->rkey},
    }, *bad;
    int e = ibv_post_send(c->qp[0], &wr, &bad);
    if (e) return conn_fail(c, RING_ERR_SYSTEM, "ibv_post_send (credit): %s", strerror(e));
    c->sq_out[0]++;
    return RING_OK;
}

/* Sender: a credit, the receiver's freed count (low 31 bits). Messages read straight from
 * their buffer are done once their slot is freed: the receiver frees it after the read. */
static ring_result_t sender_recv(rdma_conn *c, const struct ibv_wc *wc)
{
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
        return conn_fail(c, RING_ERR_PROTOCOL, "unexpected completion opcode %d", (int)wc->opcode);
    uint32_t imm = ntohl(wc->imm_data);
    uint64_t f = c->freed + ((imm - (uint32_t)c->freed) & IMM_MASK);
    if (f - c->freed > c->nslots || f > c->next)
        return conn_fail(c, RING_ERR_PROTOCOL, "credit for %llu slots while %llu were written", (unsigned long long)f,
                         (unsigned long long)c->next);
    for (; c->freed < f; c->freed++) {
        rdma_req **w = &c->by_slot[c->freed % c->nslots];
        if (*w) (*w)->moved = 1;
        *w = NULL;
    }
    return RING_OK;
}

/* Receiver: a slot was written; the immediate names it (low 31 bits of its counter). */
static ring_result_t receiver_recv(rdma_conn *c, const struct ibv_wc *wc)
{
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
        return conn_fail(c, RING_ERR_PROTOCOL, "unexpected completion opcode %d", (int)wc->opcode);
    uint32_t imm = ntohl(wc->imm_data);
    uint64_t slot;
    if (ring__rdma_slot_of_imm(c->freed, c->nslots, imm, &slot) != 0 || c->flag[slot % c->nslots] || wc->byte_len > c->stride)
        return conn_fail(c, RING_ERR_PROTOCOL, "a write for slot %u (%u bytes) outside the window [%llu, +%u)", imm,
                         wc->byte_len, (unsigned long long)c->freed, c->nslots);
    c->flag[slot % c->nslots] = 1;
    return RING_OK;
}

static ring_result_t poll_cq(rdma_conn *c, int *moved)
{
    struct ibv_wc wc[16];
    for (;;) {
        int n = ibv_poll_cq(c->cq, 16, wc);
        if (n < 0) return conn_fail(c, RING_ERR_SYSTEM, "ibv_poll_cq failed");
        for (int i = 0; i < n; i++) {
            int kind = (int)(wc[i].wr_id >> 56), q = (int)((wc[i].wr_id >> 48) & 0xff);
            uint64_t low = wc[i].wr_id & 0xffffffffffffull;
            if (wc[i].status != IBV_WC_SUCCESS) {
                /* After the first error the queue pair flushes everything else: say the first.
                 * A flush can also be the first completion after a device event moved the queue
                 * pair to the error state, which is then the cause to say. */
                if (wc[i].status == IBV_WC_WR_FLUSH_ERR && !c->failed) {
                    drain_async(c->ctx);
                    if (c->failed) return c->failed;
                    if (c->ctx->dead) return conn_fail(c, c->ctx->dead, "%s", c->ctx->dead_msg);
                }
                if (wc[i].status == IBV_WC_WR_FLUSH_ERR && c->failed) continue;
                return conn_fail(c, RING_ERR_PEER, "%s %s (status %d, vendor error 0x%x)%s",
                                 kind == K_RECV     ? "receive"
                                 : kind == K_CREDIT ? "credit write"
                                 : kind == K_READ   ? "RDMA read"
                                                    : "RDMA write",
                                 ibv_wc_status_str(wc[i].status), (int)wc[i].status, wc[i].vendor_err,
                                 status_hint(wc[i].status));
            }
            *moved = 1;
            ring_result_t rc = RING_OK;
            if (kind == K_DATA) {
                c->sq_out[q]--;
                c->flag[low % c->nslots] = 0;
            } else if (kind == K_CREDIT) {
                c->sq_out[q]--;
            } else if (kind == K_READ) {
                c->sq_out[q]--;
                c->rstate[low % c->nslots] = 2;
            } else if (kind == K_RECV) {
                rc = c->is_send ? sender_recv(c, &wc[i]) : receiver_recv(c, &wc[i]);
                int e = post_recv(c, q);
                if (rc == RING_OK && e) rc = conn_fail(c, RING_ERR_SYSTEM, "ibv_post_recv: %s", strerror(e));
            } else {
                rc = conn_fail(c, RING_ERR_INTERNAL, "completion with unknown id 0x%llx", (unsigned long long)wc[i].wr_id);
            }
            if (rc != RING_OK) return rc;
        }
        if (n < 16) break;
    }
    return RING_OK;
}

static ring_result_t send_progress(rdma_conn *c, int *moved)
{
    while (c->q.qh) {
        rdma_req *r = c->q.qh;
        /* A registered buffer is not copied: the slot gets only the header, naming the buffer,
         * and the receiver reads the piece from it when its receive is posted. */
        struct ibv_mr *src = NULL;
        if (r->first && r->mh) src = ((rdma_reg *)r->mh)->mr;
        else if (r->first && r->len >= DIRECT_MIN && r->len <= c->slot_bytes) src = find_reg(c->ctx, r->buf, r->len);
        while (r->first || r->done < r->len) {
            uint32_t i = (uint32_t)(c->next % c->nslots);
            int q = (int)(c->next % (uint64_t)c->nqp);
            if (!ring__rdma_can_post(c->next, c->freed, c->nslots) || c->flag[i] || c->sq_out[q] >= c->sq_max)
                return RING_OK;
            size_t piece = src ? 0 : RING__MIN(c->slot_bytes, r->len - r->done);
            unsigned char hdr[HDR];
            memset(hdr, 0, sizeof hdr);
            ring__put32(hdr, r->seq);
            ring__put64(hdr + 8, r->len);
            ring__put64(hdr + 16, r->done);
            if (src) {
                ring__put32(hdr + 4, HDR_READ);
                ring__put64(hdr + 24, (uint64_t)(uintptr_t)r->buf);
                ring__put32(hdr + 32, src->rkey);
            }
            struct ibv_sge sg;
            struct ibv_send_wr wr = {
                .wr_id = WRID(K_DATA, q, c->next),
                .sg_list = &sg,
                .num_sge = 1,
                .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                .send_flags = IBV_SEND_SIGNALED,
                .imm_data = htonl((uint32_t)c->next & IMM_MASK),
                .wr.rdma = {.remote_addr = c->raddr + (uint64_t)i * c->stride, .rkey = c->rkey},
            }, *bad;
            char *st = c->slots + (size_t)i * c->stride;
            memcpy(st, hdr, HDR);
            if (piece) memcpy(st + HDR, r->buf + r->done, piece);
            sg = (struct ibv_sge){.addr = (uint64_t)(uintptr_t)st, .length = (uint32_t)(HDR + piece), .lkey = c->slots_mr->lkey};
            /* Inline: the HCA takes the bytes at post time, so the staging slot is free at once
             * and a small message goes out without a DMA read. */
            if (HDR + piece <= c->max_inline) wr.send_flags |= IBV_SEND_INLINE;
            else c->flag[i] = 1;
            int e = ibv_post_send(c->qp[q], &wr, &bad);
            if (e) return conn_fail(c, RING_ERR_SYSTEM, "ibv_post_send: %s", strerror(e));
            c->sq_out[q]++;
            r->done = src ? r->len : r->done + piece;
            r->first = 0;
            if (src) c->by_slot[i] = r; /* done when the receiver frees the slot */
            c->next++;
            *moved = 1;
        }
        if (src) {
            c->n_direct++;
        } else {
            r->moved = 1;
            c->n_slots++;
        }
        ring__mq_pop(&c->q);
    }
    return RING_OK;
}

static ring_result_t free_slot(rdma_conn *c, uint64_t slot)
{
    int n = ring__rdma_release(c->done_at, c->nslots, &c->freed, c->next, slot);
    if (n < 0) return conn_fail(c, RING_ERR_INTERNAL, "slot %llu released twice or out of order", (unsigned long long)slot);
    return n ? send_credit(c) : RING_OK;
}

/* Receiver: the slot's piece lives in the sender's registered buffer. Read it straight into
 * the receive's buffer when that is registered too (no copy on either side), else into the
 * slot, after which it is an ordinary slot. 1 once read, 0 while reading. */
static int read_piece(rdma_conn *c, rdma_req *r, uint32_t i, const unsigned char *h, ring_result_t *rc)
{
    *rc = RING_OK;
    if (c->rstate[i] == 2) {
        c->rstate[i] = 0;
        return 1;
    }
    if (c->rstate[i] == 1 || c->sq_out[0] >= c->sq_max) return 0;
    struct ibv_mr *dst = r->mh ? ((rdma_reg *)r->mh)->mr : r->zc ? NULL : find_reg(c->ctx, r->buf, r->len);
    r->direct = dst != NULL;
    struct ibv_sge sg = {.addr = (uint64_t)(uintptr_t)(dst ? r->buf : (char *)h + HDR),
                         .length = (uint32_t)r->len,
                         .lkey = dst ? dst->lkey : c->slots_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = WRID(K_READ, 0, c->next),
        .sg_list = &sg,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = {.remote_addr = ring__get64(h + 24), .rkey = ring__get32(h + 32)},
    }, *bad;
    int e = ibv_post_send(c->qp[0], &wr, &bad);
    if (e) {
        *rc = conn_fail(c, RING_ERR_SYSTEM, "ibv_post_send (RDMA read): %s", strerror(e));
        return 0;
    }
    c->sq_out[0]++;
    c->rstate[i] = 1;
    return 0;
}

static ring_result_t recv_progress(rdma_conn *c, int *moved)
{
    ring_comm_t *comm = c->ctx->comm;
    while (c->q.qh) {
        rdma_req *r = c->q.qh;
        while (r->first || r->done < r->len) {
            uint32_t i = (uint32_t)(c->next % c->nslots);
            if (!c->flag[i]) return RING_OK;
            const unsigned char *h = (const unsigned char *)c->slots + (size_t)i * c->stride;
            uint32_t seq = ring__get32(h), flags = ring__get32(h + 4);
            uint64_t mlen = ring__get64(h + 8), off = ring__get64(h + 16);
            ring_result_t rc = ring__mq_check_piece(comm, "rdma", c->desc, r, seq, mlen, off);
            if (rc != RING_OK) return c->failed = rc;
            if ((flags & HDR_READ) && mlen > c->slot_bytes)
                return conn_fail(c, RING_ERR_PROTOCOL, "message %u: %llu bytes to read do not fit a slot", r->seq,
                                 (unsigned long long)mlen);
            size_t piece = RING__MIN(c->slot_bytes, r->len - r->done);
            if (r->mh && !(flags & HDR_READ))
                return conn_fail(c, RING_ERR_PROTOCOL,
                                 "message %u: %zu bytes came in the slot, but the receive is in device memory and the sender "
                                 "had promised to send from registered memory (GPUDirect RDMA)",
                                 r->seq, piece);
            if (flags & HDR_READ) {
                if (!read_piece(c, r, i, h, &rc)) return rc;
                *moved = 1;
                if (r->direct) {
                    c->flag[i] = 0;
                    r->first = 0;
                    r->done = r->len;
                    c->n_direct++;
                    rc = free_slot(c, c->next++);
                    if (rc != RING_OK) return rc;
                    break;
                }
            }
            c->flag[i] = 0;
            r->first = 0;
            *moved = 1;
            if (r->zc) {
                r->slot = c->next++;
                r->done = r->len;
                break;
            }
            if (piece) memcpy(r->buf + r->done, h + HDR, piece);
            r->done += piece;
            rc = free_slot(c, c->next++);
            if (rc != RING_OK) return rc;
        }
        r->moved = 1;
        ring__mq_pop(&c->q);
    }
    return RING_OK;
}

/* A fatal event of the device, or of one of this connection's queue pairs, fails it. */
static void drain_async(rdma_ctx *ctx)
{
    struct ibv_async_event ev;
    while (ibv_get_async_event(ctx->dev, &ev) == 0) {
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            rdma_conn *c = ev.element.qp->qp_context;
            if (c) conn_fail(c, RING_ERR_PEER, "queue pair error: %s", ibv_event_type_str(ev.event_type));
            break;
        }
        case IBV_EVENT_PORT_ERR:
            /* The device's other ports are not this communicator's business. */
            if ((int)ev.element.port_num != ctx->port) break;
            /* fall through */
        case IBV_EVENT_CQ_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            if (!ctx->dead) {
                ctx->dead = RING_ERR_SYSTEM;
                snprintf(ctx->dead_msg, sizeof ctx->dead_msg, "%s port %d: %s", ctx->dev_name, ctx->port,
                         ibv_event_type_str(ev.event_type));
            }
            break;
        default:
            break;
        }
        ibv_ack_async_event(&ev);
    }
}

static ring_result_t rdma_progress(void *vc, int *moved)
{
    rdma_conn *c = vc;
    if (c->failed) return c->failed;
    if (c->armed) {
        /* The channel was armed before a sleep: take its event so the next arming works. */
        struct ibv_cq *cq;
        void *cctx;
        if (ibv_get_cq_event(c->ch, &cq, &cctx) == 0) {
            ibv_ack_cq_events(cq, 1);
            c->armed = 0;
        }
    }
    ring_result_t rc = poll_cq(c, moved);
    if (rc != RING_OK) return rc;
    return c->is_send ? send_progress(c, moved) : recv_progress(c, moved);
}

static ring_result_t rdma_test(void *vr, int *done)
{
    rdma_req *r = vr;
    rdma_conn *c = r->conn;
    *done = ring__mq_test(&c->q, r);
    return *done ? RING_OK : c->failed;
}

static size_t rdma_zc_max(void *vc)
{
    rdma_conn *c = vc;
    return c->is_send ? 0 : c->slot_bytes;
}

static const void *rdma_zc_data(void *vr)
{
    rdma_req *r = vr;
    rdma_conn *c = r->conn;
    return c->slots + (size_t)(r->slot % c->nslots) * c->stride + HDR;
}

static void rdma_zc_release(void *vr)
{
    rdma_req *r = vr;
    rdma_conn *c = r->conn;
    free_slot(c, r->slot); /* a failure is kept in c->failed and returned by the next call */
    ring__mq_recycle(&c->q, r);
}

/* Sender: a message read from its buffer is not done before the receiver frees its slot. */
static int reads_pending(rdma_conn *c)
{
    for (uint64_t k = c->freed; k < c->next; k++)
        if (c->by_slot[k % c->nslots]) return 1;
    return 0;
}

/* Work requests posted on the send queues and not completed. */
static int sq_pending(const rdma_conn *c)
{
    int out = 0;
    for (int q = 0; q < c->nqp; q++) out += c->sq_out[q];
    return out;
}

/* Can a pending operation still complete if the peer is gone? */
static int stuck(rdma_conn *c)
{
    if (c->is_send) return c->q.qh != NULL || sq_pending(c) > 0 || reads_pending(c);
    /* The head slot has arrived but names a buffer still being read from the sender. */
    const uint32_t i = (uint32_t)(c->next % c->nslots);
    return c->q.qh != NULL && (!c->flag[i] || c->rstate[i] == 1);
}

static void drain_socket(rdma_conn *c)
{
    if (ring__mq_drain(c->fd)) c->peer_closed = 1;
}

/* *moved: completions polled here, which the caller must not sleep on. */
static ring_result_t gone_check(rdma_conn *c, int *moved)
{
    if (c->failed) return c->failed;
    drain_async(c->ctx);
    if (c->ctx->dead) return conn_fail(c, c->ctx->dead, "%s", c->ctx->dead_msg);
    if (c->failed) return c->failed;
    ring_result_t rc = poll_cq(c, moved);
    if (rc != RING_OK) return rc;
    if (c->peer_closed && stuck(c))
        return conn_fail(c, RING_ERR_PEER, "the peer closed its connection (the process exited or was killed?) with a message pending");
    return RING_OK;
}

static int rdma_pollfds(void *vc, struct pollfd *fds, int max)
{
    rdma_conn *c = vc;
    int moved = 0;
    if (max < 3) return max > 0 ? -1 : 0;
    drain_socket(c);
    if (gone_check(c, &moved) != RING_OK || moved) return -1;
    if (c->q.qh || (c->is_send && reads_pending(c))) {
        if (!c->armed) {
            if (ibv_req_notify_cq(c->cq, 0) != 0) return -1;
            c->armed = 1;
        }
        /* Whatever completed between the last poll and the arming raised no event. */
        if (poll_cq(c, &moved) != RING_OK || moved) return -1;
        uint32_t i = (uint32_t)(c->next % c->nslots);
        if (c->is_send && c->q.qh && ring__rdma_can_post(c->next, c->freed, c->nslots) && !c->flag[i]) return -1;
        /* A slot whose piece is being read waits for the read's completion like any other. */
        if (!c->is_send && c->flag[i] && c->rstate[i] != 1) return -1;
    }
    int n = 0;
    fds[n++] = (struct pollfd){.fd = c->ch->fd, .events = POLLIN};
    if (!c->peer_closed) fds[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN | POLLRDHUP};
    fds[n++] = (struct pollfd){.fd = c->ctx->dev->async_fd, .events = POLLIN};
    return n;
}

static ring_result_t rdma_check(void *vc)
{
    rdma_conn *c = vc;
    int moved = 0;
    drain_socket(c);
    return gone_check(c, &moved);
}

static void rdma_close(void *vc)
{
    rdma_conn *c = vc;
    if (!c) return;
    if (c->is_send && c->n_direct + c->n_slots)
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, c->ctx->comm->rank,
                 "rdma: to rank %d: %llu message(s) left in registered memory for the peer to read, %llu copied into the slots",
                 c->peer, (unsigned long long)c->n_direct, (unsigned long long)c->n_slots);
    if (!c->is_send && c->n_direct)
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, c->ctx->comm->rank,
                 "rdma: from rank %d: %llu message(s) read straight into registered buffers", c->peer,
                 (unsigned long long)c->n_direct);
    if (!c->is_send && c->n_credit_waits)
        RING_LOG(RING_LOG_INFO, RING_SUB_NET, c->ctx->comm->rank,
                 "rdma: from rank %d: %llu credit(s) waited for a send queue entry", c->peer,
                 (unsigned long long)c->n_credit_waits);
    /* Receiver: the last credit may still be on its way, and a sender's message read from its
     * buffer is not done before that credit arrives. Sender: a message counts as sent once its
     * last write is posted, and the adapter may not have carried it yet (up to depth x 4 MiB).
     * Destroying the queue pair now would drop either, and the peer would report a collective
     * that succeeded as a peer gone. */
    for (int64_t until = ring__now_ns() + 1000000000LL; !c->failed && sq_pending(c) > 0;) {
        int moved = 0;
        if (poll_cq(c, &moved) != RING_OK || ring__now_ns() > until) break;
        if (!moved) ring__nap_ns(20000);
    }
    if (c->armed) {
        struct ibv_cq *cq;
        void *cctx;
        if (ibv_get_cq_event(c->ch, &cq, &cctx) == 0) ibv_ack_cq_events(cq, 1);
    }
    conn_destroy(c);
}

static const char *qps_name(enum ibv_qp_state st)
{
    switch (st) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
    }
}

/* Besides the slots (msgq.c): queue pairs out of their working state, and writes the device
 * has not completed, which on a reliable connection means it is still retrying them. */
static void rdma_diag(void *vc, char *out, size_t len)
{
    rdma_conn *c = vc;
    char more[256] = "";
    size_t o = 0;
    int out_wr = 0;
    for (int i = 0; i < c->nqp; i++) {
        out_wr += c->sq_out[i];
        struct ibv_qp_attr a;
        struct ibv_qp_init_attr ia;
        if (!c->qp[i] || ibv_query_qp(c->qp[i], &a, IBV_QP_STATE, &ia) != 0 || a.qp_state == IBV_QPS_RTS) continue;
        ring__diag_put(more, sizeof more, &o, "%squeue pair %d of %d in state %s", o ? ", " : "", i, c->nqp,
                       qps_name(a.qp_state));
    }
    if (out_wr)
        ring__diag_put(more, sizeof more, &o,
                       "%s%d work request%s posted and not completed by the device (a reliable connection retries "
                       "what the peer does not acknowledge: the path to rank %d may be down)",
                       o ? "; " : "", out_wr, out_wr == 1 ? "" : "s", c->peer);
    ring__mq_diag_say(out, len, "verbs", c->is_send, c->peer, &c->q, c->is_send ? c->next - c->freed : 0, c->nslots,
                      more);
}

const ring__transport_t ring__rdma_transport = {
    .name = "rdma",
    .init = rdma_init,
    .fini = rdma_fini,
    .listen = ring__mq_no_listen,
    .connect = ring__mq_no_connect,
    .isend = rdma_isend,
    .irecv = rdma_irecv,
    .progress = rdma_progress,
    .test = rdma_test,
    .pollfds = rdma_pollfds,
    .check = rdma_check,
    .close = rdma_close,
    .reg_mem = rdma_reg_mem,
    .dereg_mem = rdma_dereg_mem,
    .zc_max = rdma_zc_max,
    .zc_data = rdma_zc_data,
    .zc_release = rdma_zc_release,
    .upgrade = rdma_upgrade,
    .upgrade_pollfds = rdma_upgrade_pollfds,
    .diag = rdma_diag,
};
