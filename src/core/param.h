/*
 * Tunables. Each one is read from its RING_* environment variable by ring_config_init()
 * (documented in docs/env.md) and can be overridden in ring_config_t. The parsers are
 * separate functions so that they can be unit-tested.
 */
#ifndef RING_PARAM_H
#define RING_PARAM_H

#include <stddef.h>

#include "internal.h"

#define RING__DEFAULT_TIMEOUT_MS 300000
#define RING__DEFAULT_CHUNK_BYTES (512u * 1024u)
/* RING_NSOCKS=auto (params.nsocks 0): sockets per TCP bundle, except between loopback addresses
 * (ring__tcp_pair_nsocks). */
#define RING__DEFAULT_NSOCKS 2
#define RING__DEFAULT_PIPELINE_DEPTH 4
#define RING__DEFAULT_SPIN_US 50
/* TCP_RTO_MAX_MS (Linux 6.15) takes 1000 .. 120000; the kernel's own cap is 120000. */
#define RING__DEFAULT_TCP_RTO_MAX_MS 1000
#define RING__MIN_TCP_RTO_MAX_MS 1000
#define RING__MAX_TCP_RTO_MAX_MS 120000
#define RING__DEFAULT_RD_MAX_BYTES (32u * 1024u)
#define RING__DEFAULT_RD_MAX_BYTES_N (8u * 1024u)
#define RING__DEFAULT_TREE_MAX_BYTES (512u * 1024u)
#define RING__DEFAULT_RH_MAX_BYTES (128u * 1024u)
#define RING__DEFAULT_RH_MAX_BYTES_SHM (32u * 1024u)
/* The shared-memory all-reduce takes every size by default where rank 0's host has one NUMA
 * node, and sizes up to this one where it has several (ring__sm_max_bytes). */
#define RING__DEFAULT_SM_MAX_BYTES (1024u * 1024u)
#define RING__MAX_SM_BYTES SIZE_MAX
#define RING__MAX_RD_BYTES ((size_t)1 << 30)
#define RING__MAX_NSOCKS 16
#define RING__MAX_PIPELINE_DEPTH 64

/* "123", "64K", "16M", "1G", "2KiB" (powers of 1024) -> bytes. 0 on success, -1 on junk. */
int ring__parse_size(const char *s, size_t *out);
/* Decimal integer within [lo, hi]. 0 on success, -1 otherwise. */
int ring__parse_int(const char *s, long long lo, long long hi, long long *out);
/* "host:port", "[v6]:port" -> host and port strings. 0 on success, -1 otherwise. */
int ring__parse_hostport(const char *s, char *host, size_t hostlen, char *port, size_t portlen);
/* "lo-hi" -> port range. 0 on success, -1 otherwise. */
int ring__parse_port_range(const char *s, int *lo, int *hi);
/* "10.0.0.0/16" or "fd00::/8" -> the range as a GID: net (an IPv4 range ::ffff:-mapped) and the
 * number of leading bits a GID must share with it (96 + the IPv4 prefix). 0, or -1. */
int ring__parse_gid_range(const char *s, uint8_t net[16], int *prefix);
/* One hex digit's value (either case), -1 for anything else. */
int ring__hexval(int c);
/* 32 hex digits -> 16 bytes as given; any other non-empty string -> a 128-bit hash of it. */
void ring__secret_from_string(const char *s, unsigned char out[16]);

/* Resolve the effective parameters from a user config (NULL = environment + defaults). */
ring_result_t ring__params_resolve(ring__params_t *p, const ring_config_t *cfg);

/* Where rank/size/root come from in ring_comm_init_env(), for the log and for tests. */
typedef struct ring__env_bootstrap {
    int rank, nranks;
    char root[320];
    const char *source; /* "RING_*", "torchrun", "openmpi", "pmi", "RANK/WORLD_SIZE", "slurm" */
} ring__env_bootstrap_t;
ring_result_t ring__env_bootstrap(ring__env_bootstrap_t *eb);
/* Does a launcher-variable row apply here? torch 0: always; 1: a torchrun row, only where
 * torchrun started this process (its agent sets TORCHELASTIC_RUN_ID for every worker); 2: the
 * same names without torchrun, only where it did not. So RANK, WORLD_SIZE and LOCAL_RANK come
 * before an MPI launcher's variables only under torchrun (ring__env_bootstrap and
 * ring__topo_env_local_rank list the rows). */
int ring__launcher_row_applies(int torch);

#endif
