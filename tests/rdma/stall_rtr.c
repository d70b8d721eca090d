/*
 * stall_rtr.so - LD_PRELOAD shim for tests/rdma/suite.sh's "handshake cut short" stage: the
 * process that loads it parks for good in its first ibv_modify_qp to RTR, i.e. in the middle
 * of the verbs handshake, after it took its peer's OFFER or ACK and before it answers. Its
 * peers then sit in a half-done handshake until their connect timeout: what they must survive
 * (an error naming the handshake) and clean up after (ring_comm_destroy gives back the
 * half-made queue pairs, registrations and memory; LeakSanitizer checks in the ASan pass).
 *
 * Built by suite.sh in the guest: cc -shared -fPIC -o stall_rtr.so stall_rtr.c -ldl
 * STALL_MARK=path: created when the process parks (the test checks that it got that far).
 * Under AddressSanitizer the shim comes before libasan in the library list: the process that
 * loads it needs ASAN_OPTIONS=verify_asan_link_order=0 (it is never checked: it gets killed).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <infiniband/verbs.h>

typedef int (*modify_qp_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR) {
        const char *mark = getenv("STALL_MARK");
        if (mark) {
            int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) close(fd);
        }
        for (;;) pause();
    }
    modify_qp_fn real = (modify_qp_fn)dlvsym(RTLD_NEXT, "ibv_modify_qp", "IBVERBS_1.1");
    if (!real) real = (modify_qp_fn)dlsym(RTLD_NEXT, "ibv_modify_qp");
    return real ? real(qp, attr, attr_mask) : -1;
}
