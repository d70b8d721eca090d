/*
 * CUDA IPC links between ring neighbours on one host (ipc.h, docs/cuda.md "CUDA IPC").
 *
 * Why opt-in (RING_CUDA_IPC=1): the host protocol lets every rank choose host or device
 * buffers for itself in each call, and the ring has no channel from a receiver back to its
 * sender, so a sender cannot learn that its receiver has device buffers this time. With the
 * knob every rank promises device buffers in every ring collective that has them on any
 * rank; the collective descriptor carries the promise, so a rank that breaks it gets
 * RING_ERR_MISMATCH instead of bytes it cannot read.
 *
 * A link (sender S -> receiver R, the ring connection between them is shared memory):
 *  Set-up, in S's first ring call in IPC mode:
 *   1. S allocates nslots = max(2, RING_PIPELINE_DEPTH) device slots of stride bytes
 *      (chunk rounded to 256, plus 256 so that data can start at any offset modulo 256) with
 *      cudaMalloc, exports them (cudaIpcGetMemHandle) and creates a one-page control file in
 *      RING_SHM_DIR (mode 0600, named like the shared-memory transport's segments so that
 *      its sweep removes it if S dies before R opened it).
 *   2. S's link message (256 bytes, after the descriptor, over the ring connection):
 *        magic "RGCL" | mode (1 IPC, 0 staged) | gen | setup | nslots | device | stride (u64)
 *        | bytes (u64) | pid | handle [64] | page name [128]
 *   3. R opens and checks the page (owner, mode, size, job nonce, both ranks), unlinks it,
 *      maps the slots with cudaIpcOpenMemHandle on its device and answers in the page:
 *      answer = 0 (mapped) or not (no GPU path, one process, ...), then answer_gen = gen.
 *   4. S waits for the answer before its first data message. Refused: both ends stage this
 *      link through host memory, as without the knob, for the communicator's life.
 *  Later calls: the same link message with setup = 0, so R can check that both ends agree.
 *  Data, message m (numbered over the communicator's life):
 *   - S waits until consumed > m - nslots (R is done with the slot), copies the bytes device
 *     to device into slot m % nslots, and once that copy finished writes the slot header
 *     (m, length, offset) and ready = m + 1 (release).
 *   - R sees ready > m (acquire), checks the header against its schedule, and reduces
 *     straight out of S's slot into its own buffer (a kernel reading the peer's memory), or
 *     copies it device to device; when that work finished, consumed = m + 1 (release).
 *  Bytes per message: one device-to-device copy on S, one read by R's kernel or copy. Nothing
 *  crosses PCIe or the host; the ring connection carries 40 + 256 bytes per call.
 * Waiting on the page cannot be done in poll(): the engine yields while it waits and checks
 * the connections' sockets for a dead peer, with RING_TIMEOUT_MS as everywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda/coll.h"
#include "cuda/ipc.h"
#include "cuda/ring_cuda.h"
#include "log.h"
#include "p2p.h"
#include "param.h"
#include "transport.h"
#include "wire.h"

#define MSG_MAGIC 0x4c434752u  /* "RGCL" */
#define PAGE_MAGIC 0x50494752u /* "RGIP" */
#define PAGE_VERSION 1u
#define PAGE_BYTES 4096
#define NAME_LEN 128
#define NAME_PREFIX "ringcomm-"

typedef struct page {
    uint32_t magic, version;
    uint64_t nonce;
    uint32_t from, to, nslots, pad;
    _Atomic uint64_t ready;       /* sender: messages published */
    _Atomic uint64_t consumed;    /* receiver: messages it no longer reads */
    _Atomic uint32_t answer_gen;  /* receiver: the set-up it answered */
    _Atomic int32_t answer;       /* 0: mapped, the link is CUDA IPC */
    struct {
        uint64_t msg, len;
        uint32_t off, pad;
    } slot[RING__MAX_PIPELINE_DEPTH];
} page_t;
_Static_assert(sizeof(page_t) <= PAGE_BYTES, "the control page");

enum { NONE, AWAIT, IPC, STAGED };

typedef struct link {
    int state;
    int device;
    uint32_t gen, nslots;
    size_t stride, bytes;
    unsigned char *mem; /* tx: our slots; rx: the sender's, mapped */
    page_t *pg;
    char path[400]; /* tx: the page file until the receiver answered */
    uint64_t count;
    uint64_t published; /* tx: messages published, those of a call that failed included */
    unsigned char handle[RING__CUDA_IPC_HANDLE_LEN];
} link_t;

typedef struct ipc {
    link_t tx, rx;
} ipc_t;

static ipc_t *get(ring_comm_t *comm)
{
    if (!comm->cuda_ipc) comm->cuda_ipc = calloc(1, sizeof(ipc_t));
    return comm->cuda_ipc;
}

static int is_shm(void *conn) { return conn && !strcmp(ring__tp_of(conn)->name, "shm"); }

static void tx_release(link_t *t)
{
    ring__cuda_ipc_free(t->mem, t->bytes);
    if (t->pg) munmap(t->pg, PAGE_BYTES);
    if (t->path[0]) unlink(t->path);
    t->mem = NULL;
    t->pg = NULL;
    t->path[0] = '\0';
}

/* Step 1. On failure the link is staged and *why says why. */
static void tx_setup(ring_comm_t *comm, link_t *t, int device, char *why, size_t whylen)
{
    static atomic_uint counter;
    const int depth = comm->params.pipeline_depth;
    int fd = -1;
    t->device = device;
    t->nslots = (uint32_t)(depth < 2 ? 2 : depth);
    t->stride = ((comm->params.chunk_bytes + 255) & ~(size_t)255) + 256;
    t->bytes = t->nslots * t->stride;
    if (!is_shm(comm->send_right)) {
        snprintf(why, whylen, "the ring connection to rank %d is %s, not shared memory (another host?)", comm->right,
                 ring__tp_of(comm->send_right)->name);
        goto fail;
    }
    if (ring__cuda_ipc_alloc(NULL, t->bytes, (void **)&t->mem, t->handle) != RING_OK) {
        snprintf(why, whylen, "%s", ring_comm_last_error(NULL));
        goto fail;
    }
    for (int tries = 0; tries < 16 && fd < 0; tries++) {
        char rest[48];
        snprintf(rest, sizeof rest, "%d-%d-ipc%u", comm->rank, comm->right, atomic_fetch_add(&counter, 1));
        snprintf(t->path, sizeof t->path, "%s/" NAME_PREFIX "%u-%d-%016llx-%s", comm->params.shm_dir, (unsigned)geteuid(),
                 (int)getpid(), (unsigned long long)ring__shm_name_tag(comm, rest), rest);
        fd = open(t->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        snprintf(why, whylen, "cannot create %.200s: %s", t->path, strerror(errno));
        t->path[0] = '\0';
        goto fail;
    }
    int e = posix_fallocate(fd, 0, PAGE_BYTES);
    if (!e) {
        t->pg = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (t->pg == MAP_FAILED) {
            e = errno;
            t->pg = NULL;
        }
    }
    close(fd);
    if (e) {
        snprintf(why, whylen, "cannot map %.200s: %s", t->path, strerror(e));
        goto fail;
    }
    t->pg->magic = PAGE_MAGIC;
    t->pg->version = PAGE_VERSION;
    t->pg->nonce = comm->job_nonce;
    t->pg->from = (uint32_t)comm->rank;
    t->pg->to = (uint32_t)comm->right;
    t->pg->nslots = t->nslots;
    atomic_init(&t->pg->ready, 0);
    atomic_init(&t->pg->consumed, 0);
    atomic_init(&t->pg->answer, -1);
    atomic_store_explicit(&t->pg->answer_gen, 0, memory_order_release);
    t->gen = 1;
    t->count = 0;
    t->state = AWAIT;
    return;
fail:
    tx_release(t);
    t->state = STAGED;
}

ring_result_t ring__ipc_begin(ring_comm_t *comm, int device, ring__ipc_call_t *c)
{
    ipc_t *x = get(comm);
    memset(c, 0, sizeof *c);
    c->tx = c->rx = -1;
    if (!x) return ring__seterr(comm, RING_ERR_NOMEM, "CUDA IPC: out of memory");
    link_t *t = &x->tx;
    if (t->state == NONE) {
        char why[256] = "";
        tx_setup(comm, t, device, why, sizeof why);
        if (t->state == STAGED)
            RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                     "RING_CUDA_IPC: no CUDA IPC to rank %d, device buffers go through host memory: %s", comm->right,
                     why);
    } else if (t->state == IPC && t->device != device) {
        /* ring__cuda_accept_op binds the communicator to one device; this is a bug if seen. */
        return ring__seterr(comm, RING_ERR_INTERNAL, "CUDA IPC: link made on device %d, call on device %d", t->device,
                            device);
    }
    unsigned char *b = c->out;
    ring__put32(b, MSG_MAGIC);
    ring__put32(b + 4, t->state == STAGED ? 0 : 1);
    ring__put32(b + 8, t->gen);
    if (t->state == AWAIT) {
        ring__put32(b + 12, 1);
        ring__put32(b + 16, t->nslots);
        ring__put32(b + 20, (uint32_t)device);
        ring__put64(b + 24, t->stride);
        ring__put64(b + 32, t->bytes);
        ring__put32(b + 40, (uint32_t)getpid());
        memcpy(b + 48, t->handle, RING__CUDA_IPC_HANDLE_LEN);
        snprintf((char *)b + 112, NAME_LEN, "%s", strrchr(t->path, '/') + 1);
    }
    if (t->state == IPC) c->tx = 1;
    else if (t->state == STAGED) c->tx = 0;
    return RING_OK;
}

/* Step 3, the page: open and check it, or say why not. */
static ring_result_t rx_page(ring_comm_t *comm, link_t *r, const char *name)
{
    char path[400];
    if (strncmp(name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0 || strchr(name, '/'))
        return ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: rank %d offered a page that is not ours (\"%.40s\")",
                            comm->left, name);
    snprintf(path, sizeof path, "%s/%s", comm->params.shm_dir, name);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return ring__seterr_errno(comm, RING_ERR_SYSTEM, errno,
                                  "CUDA IPC: cannot open %s from rank %d (is RING_SHM_DIR the same on both ranks?)",
                                  path, comm->left);
    struct stat st;
    ring_result_t rc = RING_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
        st.st_size != PAGE_BYTES)
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: %s is not a page this rank can trust (owner, mode or size)",
                          path);
    else if ((r->pg = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        r->pg = NULL;
        rc = ring__seterr_errno(comm, RING_ERR_SYSTEM, errno, "CUDA IPC: cannot map %s", path);
    }
    close(fd);
    unlink(path);
    if (rc == RING_OK && (r->pg->magic != PAGE_MAGIC || r->pg->version != PAGE_VERSION ||
                          r->pg->nonce != comm->job_nonce || r->pg->from != (uint32_t)comm->left ||
                          r->pg->to != (uint32_t)comm->rank || r->pg->nslots != r->nslots))
        rc = ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: the page from rank %d has a bad header", comm->left);
    if (rc != RING_OK && r->pg) {
        munmap(r->pg, PAGE_BYTES);
        r->pg = NULL;
    }
    return rc;
}

ring_result_t ring__ipc_accept(ring_comm_t *comm, ring__ipc_call_t *c)
{
    ipc_t *x = get(comm);
    if (!x) return ring__seterr(comm, RING_ERR_NOMEM, "CUDA IPC: out of memory");
    link_t *r = &x->rx;
    const unsigned char *b = c->in;
    if (ring__get32(b) != MSG_MAGIC)
        return ring__seterr(comm, RING_ERR_PROTOCOL,
                            "garbage from rank %d where the CUDA IPC link message was expected (RING_CUDA_IPC must be "
                            "the same on all ranks)",
                            comm->left);
    uint32_t mode = ring__get32(b + 4), gen = ring__get32(b + 8), setup = ring__get32(b + 12);
    if (mode == 0) {
        if (r->state == IPC)
            return ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: rank %d stopped using the link it set up", comm->left);
        r->state = STAGED;
        c->rx = 0;
        return RING_OK;
    }
    if (!setup) {
        if (r->state != IPC || gen != r->gen)
            return ring__seterr(comm, RING_ERR_PROTOCOL,
                                "CUDA IPC: rank %d sends over link %u, which this rank has not mapped", comm->left, gen);
        c->rx = 1;
        return RING_OK;
    }
    if (r->state != NONE)
        return ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: rank %d set up its link a second time", comm->left);
    r->gen = gen;
    r->nslots = ring__get32(b + 16);
    r->stride = ring__get64(b + 24);
    r->bytes = ring__get64(b + 32);
    memcpy(r->handle, b + 48, RING__CUDA_IPC_HANDLE_LEN);
    char name[NAME_LEN];
    memcpy(name, b + 112, NAME_LEN);
    name[NAME_LEN - 1] = '\0';
    if (r->nslots < 2 || r->nslots > RING__MAX_PIPELINE_DEPTH || r->stride < 512 || r->stride % 256 ||
        r->bytes != r->nslots * r->stride)
        return ring__seterr(comm, RING_ERR_PROTOCOL, "CUDA IPC: rank %d offered a bad slot geometry (%u x %zu bytes)",
                            comm->left, r->nslots, r->stride);
    ring_result_t rc = rx_page(comm, r, name);
    if (rc != RING_OK) return rc;
    int dev = 0;
    (void)ring__cuda_get_device(NULL, &dev);
    if (ring__cuda_ipc_open(NULL, r->handle, r->bytes, (void **)&r->mem) == RING_OK) {
        r->state = IPC;
        r->device = dev;
        c->rx = 1;
        atomic_store_explicit(&r->pg->answer, 0, memory_order_relaxed);
        RING_LOG(RING_LOG_INFO, RING_SUB_COLL, comm->rank,
                 "RING_CUDA_IPC: device buffers from rank %d (its device %u) arrive through CUDA IPC on device %d",
                 comm->left, ring__get32(b + 20), dev);
    } else {
        r->state = STAGED;
        c->rx = 0;
        atomic_store_explicit(&r->pg->answer, 1, memory_order_relaxed);
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                 "RING_CUDA_IPC: cannot map the device memory of rank %d, its device buffers come through host "
                 "memory: %s",
                 comm->left, ring_comm_last_error(NULL));
    }
    atomic_store_explicit(&r->pg->answer_gen, gen, memory_order_release);
    if (r->state == STAGED) {
        munmap(r->pg, PAGE_BYTES);
        r->pg = NULL;
    }
    return RING_OK;
}

void ring__ipc_poll_answer(ring_comm_t *comm, ring__ipc_call_t *c)
{
    link_t *t = &((ipc_t *)comm->cuda_ipc)->tx;
    if (c->tx >= 0 || t->state != AWAIT) return;
    if (atomic_load_explicit(&t->pg->answer_gen, memory_order_acquire) != t->gen) return;
    unlink(t->path); /* the receiver has it mapped or gave up on it */
    t->path[0] = '\0';
    if (atomic_load_explicit(&t->pg->answer, memory_order_relaxed) == 0) {
        t->state = IPC;
        c->tx = 1;
        return;
    }
    RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
             "RING_CUDA_IPC: rank %d cannot map this rank's device memory (its log says why); device buffers go "
             "through host memory",
             comm->right);
    tx_release(t);
    t->state = STAGED;
    c->tx = 0;
}

void ring__ipc_end(ring_comm_t *comm, const ring__ipc_call_t *c, size_t nsent, size_t nrecvd)
{
    ipc_t *x = comm->cuda_ipc;
    if (c->tx == 1) x->tx.count += nsent;
    if (c->rx == 1) x->rx.count += nrecvd;
}

uint64_t ring__ipc_tx_base(ring_comm_t *comm) { return ((ipc_t *)comm->cuda_ipc)->tx.count; }
uint64_t ring__ipc_rx_base(ring_comm_t *comm) { return ((ipc_t *)comm->cuda_ipc)->rx.count; }

int ring__ipc_tx_credit(ring_comm_t *comm, uint64_t m)
{
    link_t *t = &((ipc_t *)comm->cuda_ipc)->tx;
    return m < atomic_load_explicit(&t->pg->consumed, memory_order_acquire) + t->nslots;
}

unsigned char *ring__ipc_tx_slot(ring_comm_t *comm, uint64_t m, const void *src)
{
    link_t *t = &((ipc_t *)comm->cuda_ipc)->tx;
    return t->mem + (m % t->nslots) * t->stride + ((uintptr_t)src & 255);
}

void ring__ipc_tx_publish(ring_comm_t *comm, uint64_t m, const unsigned char *at, size_t len)
{
    link_t *t = &((ipc_t *)comm->cuda_ipc)->tx;
    size_t i = m % t->nslots;
    t->pg->slot[i].msg = m;
    t->pg->slot[i].len = len;
    t->pg->slot[i].off = (uint32_t)(at - (t->mem + i * t->stride));
    t->published = m + 1;
    atomic_store_explicit(&t->pg->ready, m + 1, memory_order_release);
}

ring_result_t ring__ipc_rx_poll(ring_comm_t *comm, uint64_t m, size_t len, const void **at, int *arrived)
{
    link_t *r = &((ipc_t *)comm->cuda_ipc)->rx;
    *arrived = 0;
    if (atomic_load_explicit(&r->pg->ready, memory_order_acquire) <= m) return RING_OK;
    size_t i = m % r->nslots;
    uint64_t msg = r->pg->slot[i].msg, got = r->pg->slot[i].len;
    uint32_t off = r->pg->slot[i].off;
    if (msg != m || got != len || off >= 256 || off + got > r->stride)
        return ring__seterr(comm, RING_ERR_PROTOCOL,
                            "CUDA IPC: rank %d published message %llu of %llu bytes at offset %u where this rank "
                            "expected message %llu of %zu bytes (a collective mismatch?)",
                            comm->left, (unsigned long long)msg, (unsigned long long)got, off, (unsigned long long)m,
                            len);
    *at = r->mem + i * r->stride + off;
    *arrived = 1;
    return RING_OK;
}

void ring__ipc_rx_release(ring_comm_t *comm, uint64_t upto)
{
    link_t *r = &((ipc_t *)comm->cuda_ipc)->rx;
    atomic_store_explicit(&r->pg->consumed, upto, memory_order_release);
}

void ring__cuda_ipc_counts(ring_comm_t *comm, uint64_t *tx, uint64_t *rx)
{
    ipc_t *x = comm->cuda_ipc;
    *tx = x && x->tx.state == IPC ? x->tx.count : 0;
    *rx = x && x->rx.state == IPC ? x->rx.count : 0;
}

static atomic_int slots_left;

int ring__cuda_ipc_left(void) { return atomic_load(&slots_left); }

/* Messages of a CUDA IPC send link its receiver has not released. */
static uint64_t unreleased(const link_t *t)
{
    return t->published - atomic_load_explicit(&t->pg->consumed, memory_order_acquire);
}

uint64_t ring__cuda_ipc_unreleased(ring_comm_t *comm)
{
    ipc_t *x = comm->cuda_ipc;
    return x && x->tx.state == IPC ? unreleased(&x->tx) : 0;
}

void ring__cuda_ipc_fini(ring_comm_t *comm, int gpu_busy)
{
    ipc_t *x = comm->cuda_ipc;
    if (!x) return;
    link_t *t = &x->tx, *r = &x->rx;
    /* The receiver may still be reading our slots in the last call (a sender finishes when
     * its copies are published): give it time, bounded, before the memory goes away. Every
     * published message counts, those of a call that failed too: the receiver may have queued
     * kernels that read them before it learnt of the failure. */
    if (t->state == IPC) {
        int64_t limit = ring__now_ns() + (int64_t)RING__MIN(comm->params.timeout_ms, 10000) * 1000000LL;
        while (unreleased(t) && ring__now_ns() < limit &&
               !atomic_load(&comm->aborted) && !atomic_load(&comm->remote_failed) && !atomic_load(&comm->fail_code)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        /* After a failure the receiver stops consuming (and its queued work may still read):
         * the slots stay allocated rather than be pulled from under it. */
        const uint64_t left = unreleased(t);
        if (left && t->mem) {
            RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                     "ring_comm_destroy: the CUDA IPC slots are left allocated: rank %d had not released messages "
                     "%llu..%llu of this rank when its call ended, and its GPU may still read them",
                     comm->right, (unsigned long long)(t->published - left), (unsigned long long)t->published - 1);
            t->mem = NULL;
            atomic_fetch_add(&slots_left, 1);
        }
    }
    if (gpu_busy && (t->mem || r->mem)) {
        /* Copies of a call that timed out may still write our slots, and kernels read the
         * left neighbour's: neither is freed nor closed (that would wait for them, or pull
         * the memory from under them); the pages and the file, host memory, go as usual. */
        RING_LOG(RING_LOG_WARN, RING_SUB_COLL, comm->rank,
                 "ring_comm_destroy: the CUDA IPC slots are left allocated and mapped: the GPU still has not run "
                 "the work of a call that timed out");
        t->mem = r->mem = NULL;
    }
    /* Freed on the device the memory belongs to (both links are on the communicator's). */
    ring__cuda_devscope_t ds = {0};
    if (t->mem || r->mem) (void)ring__cuda_device_enter(NULL, t->mem ? t->device : r->device, &ds);
    tx_release(t);
    ring__cuda_ipc_close(r->mem, r->bytes);
    if (r->pg) munmap(r->pg, PAGE_BYTES);
    ring__cuda_device_leave(&ds);
    free(x);
    comm->cuda_ipc = NULL;
}
