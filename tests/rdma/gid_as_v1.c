/*
 * gid_as_v1.so - LD_PRELOAD shim for tests/rdma/suite.sh's "mixed" stage: the process that
 * loads it sees every RoCE v2 GID of its device reported as RoCE v1, as on a host whose NIC
 * (or whose RING_IB_GID_INDEX) gives it a v1 entry. soft-RoCE has v2 entries only, and a real
 * v1 end facing a v2 end takes both queue pairs to RTS and then times out; the verbs handshake
 * must instead refuse the pair at once, naming both ends' GIDs. The queue pairs themselves
 * never see the difference (the kernel still sends v2): the handshake's check is what is tested.
 *
 * Built by suite.sh in the guest: cc -shared -fPIC -o gid_as_v1.so gid_as_v1.c -ldl
 * Under AddressSanitizer the shim comes before libasan in the library list: the process that
 * loads it needs ASAN_OPTIONS=verify_asan_link_order=0.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

typedef int (*query_ex_fn)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t, size_t);
typedef ssize_t (*query_table_fn)(struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t, size_t);

static void *real(const char *name)
{
    void *f = dlvsym(RTLD_NEXT, name, "IBVERBS_1.11");
    return f ? f : dlsym(RTLD_NEXT, name);
}

static void as_v1(struct ibv_gid_entry *e)
{
    if (e->gid_type == IBV_GID_TYPE_ROCE_V2) e->gid_type = IBV_GID_TYPE_ROCE_V1;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags,
                      size_t entry_size)
{
    query_ex_fn f = (query_ex_fn)real("_ibv_query_gid_ex");
    if (!f) return ENOSYS;
    int r = f(ctx, port, index, e, flags, entry_size);
    if (r == 0) as_v1(e);
    return r;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t max, uint32_t flags,
                             size_t entry_size)
{
    query_table_fn f = (query_table_fn)real("_ibv_query_gid_table");
    if (!f) return -ENOSYS;
    ssize_t n = f(ctx, e, max, flags, entry_size);
    for (ssize_t i = 0; i < n; i++) as_v1((struct ibv_gid_entry *)((char *)e + (size_t)i * entry_size));
    return n;
}
