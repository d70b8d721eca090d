/*
 * ringcomm: ring all-reduce and friends, from scratch.
 *
 * This is the only public header. Every handle is opaque; every call that can fail returns a
 * ring_result_t (RING_OK = 0) and leaves a human-readable explanation in
 * ring_comm_last_error(). The library never prints to stdout, never calls abort() or exit().
 *
 * Lifetimes
 *   - ring_comm_init*() blocks until every rank has joined (bounded by the timeout). On failure
 *     *comm may still be set to a communicator in the failed state so that
 *     ring_comm_last_error(*comm) explains what happened; ring_comm_destroy() is always safe on
 *     it (and on NULL).
 *   - A collective called on a communicator must be called by every rank, in the same order,
 *     with matching count, dtype, op and root. Calls are queued and run in the order issued.
 *   - A ring_request_t is created by an _async call and freed by the ring_wait() that completes
 *     it. ring_test() never frees; call ring_wait() once it reports done (it returns at once).
 *   - ring_comm_abort() does not wait for the call in flight: it fails every call in flight or
 *     queued with RING_ERR_ABORTED, from any thread, and tells the other ranks (at most
 *     200 ms per rank whose connection does not take the notice). ring_comm_destroy() waits for queued operations to end
 *     (each is bounded by the timeout; abort first to make that immediate), then frees
 *     everything, including requests that were never waited for.
 *   - After any failure inside a collective (timeout, dead peer, mismatch, abort) the
 *     communicator is failed: every later collective returns the first error at once
 *     (ring_comm_register/deregister, which only touch this process's memory, and the
 *     queries still work). The failure
 *     is also sent to the other ranks, whose calls in flight return an error naming this rank
 *     within milliseconds (RING_ERR_MISMATCH and RING_ERR_TIMEOUT keep their code, other
 *     causes arrive as RING_ERR_PEER); a rank that dies is reported the same way.
 *   - A call on a destroyed communicator (destroy twice included) returns
 *     RING_ERR_INVALID_ARG, as long as its memory was not reused by a new communicator.
 *     ring_comm_destroy() must still be the last call on a communicator: no other thread may
 *     be calling into it while it runs.
 *
 * Threads
 *   Every function may be called from any thread. Calls on one communicator are serialised
 *   internally in the order they enter the library, so calling collectives on the same
 *   communicator from several threads at once is safe but makes the order (which must match on
 *   every rank) the caller's problem. Different communicators are fully independent. One
 *   request is waited for or tested by one thread at a time.
 *
 * fork()
 *   A process forked after init (a data-loader worker, say) cannot use the communicators that
 *   existed then: every call on them returns RING_ERR_INVALID_ARG saying so, and
 *   ring_comm_destroy() on them returns RING_OK and does nothing. The child closes their
 *   sockets at the fork, so that a rank that dies is still seen to die while the child lives.
 *   It may create communicators of its own.
 */
#ifndef RINGCOMM_H
#define RINGCOMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RING_VERSION_MAJOR 0
#define RING_VERSION_MINOR 2
#define RING_VERSION_PATCH 0
/* RING_VERSION_CODE == ring_version() for the library this header belongs to. */
#define RING_VERSION_CODE (RING_VERSION_MAJOR * 10000 + RING_VERSION_MINOR * 100 + RING_VERSION_PATCH)

#if defined(__GNUC__)
#define RING_API __attribute__((visibility("default")))
#else
#define RING_API
#endif

/*
 * Result codes. One per failure class: X(name, value, short description).
 * The list is the single source of the enum, ring_strerror() and ring_result_name().
 */
#define RING_RESULT_LIST(X)                                                                        \
    X(RING_OK, 0, "success")                                                                       \
    X(RING_ERR_INVALID_ARG, 1, "invalid argument")                                                 \
    X(RING_ERR_NOMEM, 2, "out of memory")                                                          \
    X(RING_ERR_SYSTEM, 3, "system call failed")                                                    \
    X(RING_ERR_TIMEOUT, 4, "timed out waiting for a peer")                                         \
    X(RING_ERR_CONNECT, 5, "could not connect to a peer")                                          \
    X(RING_ERR_PEER, 6, "a peer failed or closed its connection")                                  \
    X(RING_ERR_PROTOCOL, 7, "unexpected or malformed data from a peer")                            \
    X(RING_ERR_AUTH, 8, "peer rejected: wrong job secret or protocol version")                     \
    X(RING_ERR_MISMATCH, 9, "ranks called mismatched collectives")                                 \
    X(RING_ERR_ABORTED, 10, "communicator was aborted")                                            \
    X(RING_ERR_UNSUPPORTED, 11, "operation not supported")                                         \
    X(RING_ERR_INTERNAL, 12, "internal error")

typedef enum {
#define RING_X_ENUM(name, value, desc) name = value,
    RING_RESULT_LIST(RING_X_ENUM)
#undef RING_X_ENUM
} ring_result_t;

typedef enum {
    RING_INT8,
    RING_UINT8,
    RING_INT32,
    RING_UINT32,
    RING_INT64,
    RING_UINT64,
    RING_FLOAT16,  /* IEEE 754 binary16 */
    RING_BFLOAT16, /* bfloat16: the upper half of a binary32 */
    RING_FLOAT32,
    RING_FLOAT64,
    RING_DTYPE_COUNT /* not a type: the number of types */
} ring_dtype_t;

/*
 * Reductions. Integers wrap on overflow (two's complement). fp16/bf16 are reduced through
 * float and rounded to nearest-even at every step. RING_AVG is the sum divided by nranks once
 * at the end (integer division truncates towards zero).
 */
typedef enum { RING_SUM, RING_PROD, RING_MIN, RING_MAX, RING_AVG, RING_OP_COUNT } ring_op_t;

typedef struct ring_comm ring_comm_t;       /* opaque */
typedef struct ring_request ring_request_t; /* opaque */

/*
 * Defaults for a communicator. ring_config_init() fills every field from the RING_*
 * environment variable named beside it, or from the built-in default; change fields after it
 * and pass the struct to ring_comm_init_config(). ring_comm_init() behaves as
 * ring_comm_init_config() with a freshly initialised config.
 */
typedef struct ring_config {
    size_t struct_size;        /* set by ring_config_init: sizeof(ring_config_t) where the caller was compiled */
    int timeout_ms;            /* RING_TIMEOUT_MS: max wait without progress (bootstrap, collectives) */
    size_t chunk_bytes;        /* RING_CHUNK_BYTES: pipelining unit of the ring (same on every rank) */
    int nsocks;                /* RING_NSOCKS: TCP sockets per peer; 0 = auto (1 over the loopback device, else 2) */
    int pipeline_depth;        /* RING_PIPELINE_DEPTH: chunks in flight per direction (same on every rank) */
    const char *secret;        /* RING_SECRET: job secret (32 hex digits, or any string, hashed) */
    const char *socket_ifname; /* RING_SOCKET_IFNAME: interface for data connections */
} ring_config_t;

RING_API const char *ring_strerror(ring_result_t r);    /* "timed out waiting for a peer" */
RING_API const char *ring_result_name(ring_result_t r); /* "RING_ERR_TIMEOUT" */
RING_API int ring_version(void);                        /* MAJOR*10000 + MINOR*100 + PATCH */
RING_API size_t ring_dtype_size(ring_dtype_t dtype);    /* 0 for an invalid dtype */

/*
 * ring_config_init passes the struct's size as this header has it (ring_config_init_sized):
 * a later library whose struct has more fields then knows how much of *cfg the program owns,
 * writes no more than that, and takes the later fields' defaults. A size it does not know is
 * RING_ERR_INVALID_ARG, and nothing is written. ring_config_init is also a function (for
 * bindings that cannot expand the macro), which assumes the loaded library's own size.
 */
RING_API ring_result_t ring_config_init_sized(ring_config_t *cfg, size_t cfg_size);
RING_API ring_result_t ring_config_init(ring_config_t *cfg);
#define ring_config_init(cfg) ring_config_init_sized((cfg), sizeof(ring_config_t))

/* root_addr is "host:port" (or "[v6addr]:port") where rank 0 listens. */
RING_API ring_result_t ring_comm_init(ring_comm_t **comm, int nranks, int rank, const char *root_addr);
RING_API ring_result_t ring_comm_init_config(ring_comm_t **comm, int nranks, int rank,
                                             const char *root_addr, const ring_config_t *cfg);
/*
 * Rank, size and root from the environment, the first row with a variable set decides (only
 * one of its two set is an error):
 *   RING_RANK / RING_NRANKS / RING_ROOT;
 *   torchrun (TORCHELASTIC_RUN_ID set): RANK / WORLD_SIZE / MASTER_ADDR:(MASTER_PORT+1)
 *             (MASTER_PORT itself is held by torchrun's own store);
 *   Open MPI: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE; PMI: PMI_RANK / PMI_SIZE;
 *   RANK / WORLD_SIZE without torchrun (a Kubeflow pod), root as for torchrun;
 *   Slurm: SLURM_PROCID / SLURM_NTASKS (MPI and Slurm take the root from RING_ROOT; Slurm comes
 *   last because its variables are inherited by what mpirun starts inside an allocation).
 */
RING_API ring_result_t ring_comm_init_env(ring_comm_t **comm);
RING_API ring_result_t ring_comm_destroy(ring_comm_t *comm);
RING_API ring_result_t ring_comm_abort(ring_comm_t *comm);
RING_API int ring_comm_rank(const ring_comm_t *comm);   /* -1 for NULL */
RING_API int ring_comm_nranks(const ring_comm_t *comm); /* -1 for NULL */
/*
 * Detail of the last failure on comm ("" if none). With comm == NULL: the last failure on this
 * thread without a live communicator (ring_comm_init*, ring_config_init, a call with a NULL or
 * destroyed communicator or a NULL request; thread-local). For a live comm: a copy of its text,
 * taken under its lock into one of four buffers of the calling thread used in turn (valid after
 * ring_comm_destroy, until this thread's fourth call after it). The communicator's text is
 * rewritten by the next failure on it, from any thread (the progress thread when an _async
 * operation fails, ring_comm_abort): read it right after the failing call (docs/api.md).
 */
RING_API const char *ring_comm_last_error(const ring_comm_t *comm);

/*
 * Collectives. In-place is sendbuf == recvbuf. For reduce_scatter and allgather the full
 * buffer is nranks*count elements and in-place means the rank's own slice of it, as in NCCL:
 * reduce_scatter: recvbuf == (char *)sendbuf + rank*recvcount*size;
 * allgather:      sendbuf == (char *)recvbuf + rank*sendcount*size.
 * Rank r's share of a reduce_scatter is elements [r*recvcount, (r+1)*recvcount).
 * Buffers may be host, pinned, managed or (in a CUDA build) CUDA device memory; a call's
 * sendbuf and recvbuf are both device memory of one device or both not, and device buffers
 * are aligned to the element size (host buffers may be at any address). Work queued before the call on the device's legacy
 * default stream is waited for; other streams are the caller's to synchronise. Ranks may
 * differ in where their buffers live (docs/cuda.md).
 */
RING_API ring_result_t ring_allreduce(ring_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, ring_dtype_t dtype, ring_op_t op);
RING_API ring_result_t ring_reduce_scatter(ring_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t recvcount, ring_dtype_t dtype, ring_op_t op);
RING_API ring_result_t ring_allgather(ring_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t sendcount, ring_dtype_t dtype);
RING_API ring_result_t ring_broadcast(ring_comm_t *comm, void *buf, size_t count,
                                      ring_dtype_t dtype, int root);
RING_API ring_result_t ring_barrier(ring_comm_t *comm);

/*
 * Asynchronous forms: validate, queue and return. The buffers belong to the library until
 * ring_wait() returns (or ring_test() reports done). Operations run in issue order on the
 * communicator's progress thread, so the caller can compute meanwhile.
 */
RING_API ring_result_t ring_allreduce_async(ring_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            size_t count, ring_dtype_t dtype, ring_op_t op,
                                            ring_request_t **req);
RING_API ring_result_t ring_reduce_scatter_async(ring_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t recvcount,
                                                 ring_dtype_t dtype, ring_op_t op,
                                                 ring_request_t **req);
RING_API ring_result_t ring_allgather_async(ring_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            size_t sendcount, ring_dtype_t dtype,
                                            ring_request_t **req);
RING_API ring_result_t ring_broadcast_async(ring_comm_t *comm, void *buf, size_t count,
                                            ring_dtype_t dtype, int root, ring_request_t **req);
RING_API ring_result_t ring_barrier_async(ring_comm_t *comm, ring_request_t **req);

/* Blocks until req completes, frees it, and returns the operation's result. */
RING_API ring_result_t ring_wait(ring_request_t *req);
/* *done = 1 once req completed; the return value is then the operation's result. Never frees. */
RING_API ring_result_t ring_test(ring_request_t *req, int *done);

/*
 * Buffer registration, as ncclCommRegister: optional, and local (ranks need not agree).
 * On a verbs (RDMA) connection, a message whose source buffer on the sending rank and
 * destination buffer on the receiving rank are both registered is written by the HCA
 * straight from one into the other, with no staging copy on either side (all-gather and the
 * all-gather half of all-reduce, for messages of 32 KiB and more). Unregistered buffers go
 * through the transport's own registered slots. Over TCP and shared memory registering
 * changes nothing and costs nothing, so portable code may always register.
 * Rules (the library cannot see free() or munmap()): keep the memory allocated until
 * ring_comm_deregister returns; do not deregister while an operation using the buffer is in
 * flight. ring_comm_destroy releases registrations still there. Registering pins the pages:
 * the locked-memory limit (ulimit -l) applies.
 */
typedef struct ring_reg ring_reg_t; /* opaque */
RING_API ring_result_t ring_comm_register(ring_comm_t *comm, void *buf, size_t bytes, ring_reg_t **handle);
RING_API ring_result_t ring_comm_deregister(ring_comm_t *comm, ring_reg_t *handle);

#ifdef __cplusplus
}
#endif

#endif /* RINGCOMM_H */
