/*
 * ps.c: an asynchronous parameter server (Downpour SGD) built from collectives only.
 *
 * ringcomm has no point-to-point calls, so each worker w gets its own two-rank communicator
 * with the server (server = its rank 0, worker = its rank 1). On it a "send" is a broadcast
 * from the sender: a push is ring_broadcast(grad, root = worker), a pull is
 * ring_broadcast(weights, root = server). Calls on different communicators are independent, so
 * a worker exchanges with the server without any other worker taking part.
 *
 * Setup (collective over the world communicator): rank 0 broadcasts the initial parameters;
 * it then binds N-1 sockets to port 0 on its host to have the kernel choose free ports, closes
 * them and broadcasts the port numbers; server and worker w then create their communicator at
 * host:port[w-1]. (A port can be taken by another program between the close and the
 * communicator's own bind; that init then fails with RING_ERR_SYSTEM and says so.)
 *
 * Serving: the server keeps one receive (an _async broadcast rooted at the worker) posted on
 * every worker's communicator and polls them with ring_test() round-robin. When worker w's
 * gradient has landed it applies it at once (SGD on the server's copy of the model), copies the
 * new weights into w's send buffer, issues the broadcast of them to w and posts w's next
 * receive behind it. A worker thus waits only for the server's handling of its own update.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

struct peer {
    ring_comm_t *comm;
    float *grad;           /* server: landing zone of w's pushes (P + nextra) */
    float *send;           /* server: weights on their way to w (P) */
    ring_request_t *req_grad, *req_send;
    uint64_t version_sent; /* server version of the weights w computes with */
    uint64_t updates;      /* pushes applied */
};

struct rt_ps {
    ring_comm_t *world;
    rt_params params;
    size_t numel, nextra;
    int rank, nranks;
    int failed;
    struct peer *peers; /* server: index w = 1..N-1; worker: index 0 is its link to the server */
    float *buf;         /* worker: push buffer (P + nextra) */
    float *wbuf;        /* worker: pulled weights (P) */
    uint64_t version;
    rt_ps_stats stats;
};

/* Binds n sockets to port 0 on host and reports the ports the kernel chose; all are held until
 * the last is bound so that the same port cannot come back twice. */
static ring_result_t pick_ports(const char *host, int n, int32_t *ports)
{
    ring_result_t rc = RING_OK;
    int *fds = malloc((size_t)n * sizeof *fds);
    if (!fds) return rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
    for (int i = 0; i < n; i++) fds[i] = -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int err = getaddrinfo(host, "0", &hints, &ai);
    if (err) {
        rc = rt__fail(RING_ERR_CONNECT, "rt_ps_create: cannot resolve %s: %s", host, gai_strerror(err));
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        fds[i] = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || bind(fds[i], ai->ai_addr, ai->ai_addrlen) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&ss, &len) != 0) {
            rc = rt__fail(RING_ERR_SYSTEM, "rt_ps_create: cannot bind a port on %s: %s", host, strerror(errno));
            goto fail;
        }
        ports[i] = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                            : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
fail:
    /* All or nothing: the workers take port 0 as "the server could not choose". */
    if (rc != RING_OK) memset(ports, 0, (size_t)n * sizeof *ports);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (ai) freeaddrinfo(ai);
    free(fds);
    return rc;
}

int rt_ps_is_server(const rt_ps *ps)
{
    return ps && ps->rank == 0;
}

ring_result_t rt_ps_create(rt_ps **out, ring_comm_t *world, const rt_params *p, const char *host, size_t nextra)
{
    if (!out || !world || !p || !host || !*host) return rt__fail(RING_ERR_INVALID_ARG, "rt_ps_create: NULL argument");
    *out = NULL;
    ring_result_t rc;
    int32_t *ports = NULL;
    struct rt_ps *ps = calloc(1, sizeof *ps);
    if (!ps) return rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
    ps->world = world;
    ps->rank = ring_comm_rank(world);
    ps->nranks = ring_comm_nranks(world);
    ps->nextra = nextra;
    for (size_t i = 0; i < p->n; i++) RT_CHECK(rt_params_append(&ps->params, p->t[i]));
    ps->numel = rt_params_numel(p);
    if (ps->nranks < 2) {
        rc = rt__fail(RING_ERR_INVALID_ARG, "rt_ps_create: a parameter server needs 2 or more ranks (1 server + workers), not %d",
                      ps->nranks);
        goto fail;
    }
    int nw = ps->nranks - 1;
    size_t P = ps->numel;

    /* Every worker starts from the server's weights. */
    float *flat = malloc((P + nextra + 1) * sizeof *flat);
    if (!flat) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
        goto fail;
    }
    rt_params_get(p, flat);
    rc = ring_broadcast(world, flat, P, RING_FLOAT32, 0);
    if (rc == RING_OK) rt_params_set(p, flat);
    free(flat);
    if (rc != RING_OK) {
        rt__fail_comm(rc, world, "rt_ps_create: broadcast of the initial parameters");
        goto fail;
    }

    ports = calloc((size_t)nw, sizeof *ports);
    if (!ports) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
        goto fail;
    }
    /* A failure to pick is sent as port 0, so that the workers stop too instead of waiting. */
    ring_result_t pick = RING_OK;
    if (ps->rank == 0) pick = pick_ports(host, nw, ports);
    rc = ring_broadcast(world, ports, (size_t)nw, RING_INT32, 0);
    if (rc != RING_OK) {
        rt__fail_comm(rc, world, "rt_ps_create: broadcast of the server's ports");
        goto fail;
    }
    if (pick != RING_OK) {
        rc = pick;
        goto fail;
    }
    if (ports[0] == 0) {
        rc = rt__fail(RING_ERR_SYSTEM, "rt_ps_create: the server (rank 0) could not choose ports on %s", host);
        goto fail;
    }

    ring_config_t cfg;
    if ((rc = ring_config_init(&cfg)) != RING_OK) {
        rt__fail(rc, "rt_ps_create: %s", ring_comm_last_error(NULL));
        goto fail;
    }
    int bracket = strchr(host, ':') != NULL; /* IPv6 literal */
    ps->peers = calloc((size_t)ps->nranks, sizeof *ps->peers);
    if (!ps->peers) {
        rc = rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
        goto fail;
    }
    /* The server joins the workers one after the other; a worker whose turn has not come retries
     * its connection until the server listens (bounded by RING_TIMEOUT_MS). */
    for (int w = 1; w <= nw; w++) {
        if (ps->rank != 0 && ps->rank != w) continue;
        char addr[512];
        snprintf(addr, sizeof addr, bracket ? "[%s]:%d" : "%s:%d", host, (int)ports[w - 1]);
        struct peer *pe = &ps->peers[ps->rank == 0 ? w : 0];
        rc = ring_comm_init_config(&pe->comm, 2, ps->rank == 0 ? 0 : 1, addr, &cfg);
        if (rc != RING_OK) {
            rt__fail_comm(rc, pe->comm, "rt_ps_create: link between the server and worker %d at %s", w, addr);
            goto fail;
        }
        if (ps->rank == 0) {
            pe->grad = malloc((P + nextra + 1) * sizeof(float));
            pe->send = malloc((P + 1) * sizeof(float));
            if (!pe->grad || !pe->send) {
                rc = rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
                goto fail;
            }
        }
    }
    if (ps->rank != 0) {
        ps->buf = malloc((P + nextra + 1) * sizeof(float));
        ps->wbuf = malloc((P + 1) * sizeof(float));
        if (!ps->buf || !ps->wbuf) {
            rc = rt__fail(RING_ERR_NOMEM, "rt_ps_create: out of memory");
            goto fail;
        }
    }
    free(ports);
    *out = ps;
    return RING_OK;
fail:
    free(ports);
    ps->failed = 1;
    rt_ps_destroy(ps);
    return rc;
}

ring_result_t rt_ps_push_pull(rt_ps *ps, const float *extra)
{
    if (!ps || ps->rank == 0) return rt__fail(RING_ERR_INVALID_ARG, "rt_ps_push_pull: not a worker");
    if (ps->nextra && !extra) return rt__fail(RING_ERR_INVALID_ARG, "rt_ps_push_pull: extra is NULL");
    ring_comm_t *c = ps->peers[0].comm;
    double t0 = rt__now();
    rt_params_get_grad(&ps->params, ps->buf);
    if (ps->nextra) memcpy(ps->buf + ps->numel, extra, ps->nextra * sizeof *extra);
    ring_result_t rc = ring_broadcast(c, ps->buf, ps->numel + ps->nextra, RING_FLOAT32, 1);
    if (rc != RING_OK) {
        ps->failed = 1;
        return rt__fail_comm(rc, c, "rt_ps_push_pull: push of worker %d's gradient", ps->rank);
    }
    rc = ring_broadcast(c, ps->wbuf, ps->numel, RING_FLOAT32, 0);
    if (rc != RING_OK) {
        ps->failed = 1;
        return rt__fail_comm(rc, c, "rt_ps_push_pull: pull of the weights by worker %d", ps->rank);
    }
    rt_params_set(&ps->params, ps->wbuf);
    ps->stats.updates++;
    ps->stats.wait_s += rt__now() - t0;
    return RING_OK;
}

static ring_result_t post_receive(rt_ps *ps, int w)
{
    struct peer *pe = &ps->peers[w];
    ring_result_t rc = ring_broadcast_async(pe->comm, pe->grad, ps->numel + ps->nextra, RING_FLOAT32, 1, &pe->req_grad);
    if (rc != RING_OK) return rt__fail_comm(rc, pe->comm, "rt_ps_serve: receive from worker %d", w);
    return RING_OK;
}

/* One applied update: the gradient of worker w has landed in its buffer. */
static ring_result_t apply(rt_ps *ps, int w, rt_sgd *opt, uint64_t per_worker, rt_ps_update_fn fn, void *arg)
{
    struct peer *pe = &ps->peers[w];
    ring_result_t rc;
    /* The previous weights sent to w went out before w pushed again (same communicator, in
     * order), so this wait returns at once; it frees the request. */
    if (pe->req_send) {
        rc = ring_wait(pe->req_send);
        pe->req_send = NULL;
        if (rc != RING_OK) return rt__fail_comm(rc, pe->comm, "rt_ps_serve: weights to worker %d", w);
    }
    uint64_t stale = ps->version - pe->version_sent;
    rt_params_set_grad(&ps->params, pe->grad);
    rt_sgd_step(opt);
    ps->version++;
    ps->stats.updates++;
    ps->stats.staleness_sum += stale;
    if (stale > ps->stats.staleness_max) ps->stats.staleness_max = stale;
    rt_params_get(&ps->params, pe->send);
    pe->version_sent = ps->version;
    rc = ring_broadcast_async(pe->comm, pe->send, ps->numel, RING_FLOAT32, 0, &pe->req_send);
    if (rc != RING_OK) return rt__fail_comm(rc, pe->comm, "rt_ps_serve: weights to worker %d", w);
    pe->updates++;
    if (fn && (rc = fn(arg, w, pe->grad + ps->numel, stale)) != RING_OK) return rc;
    /* The receive buffer is read: the next push may land in it. */
    if (pe->updates < per_worker) return post_receive(ps, w);
    return RING_OK;
}

ring_result_t rt_ps_serve(rt_ps *ps, rt_sgd *opt, uint64_t updates_per_worker, rt_ps_update_fn fn, void *arg)
{
    if (!ps || ps->rank != 0 || !opt) return rt__fail(RING_ERR_INVALID_ARG, "rt_ps_serve: not the server");
    ring_result_t rc = RING_OK;
    int nw = ps->nranks - 1, open = 0;
    if (updates_per_worker > 0)
        for (int w = 1; w <= nw; w++) {
            RT_CHECK(post_receive(ps, w));
            open++;
        }
    int start = 1;
    while (open > 0) {
        int progressed = 0;
        /* Round-robin from where the last pass stopped, so that a busy worker cannot starve the
         * others when several gradients are waiting. The pass keeps its origin: moved within
         * the pass, it polled some workers twice and skipped others (a 4-rank job served
         * worker 1 in 7 of 60 updates). */
        const int origin = start;
        for (int k = 0; k < nw; k++) {
            int w = 1 + (origin - 1 + k) % nw;
            struct peer *pe = &ps->peers[w];
            if (!pe->req_grad) continue;
            int done = 0;
            rc = ring_test(pe->req_grad, &done);
            if (!done && rc == RING_OK) continue;
            ring_result_t wrc = ring_wait(pe->req_grad);
            pe->req_grad = NULL;
            if (rc == RING_OK) rc = wrc;
            if (rc != RING_OK) {
                rt__fail_comm(rc, pe->comm, "rt_ps_serve: receive from worker %d", w);
                goto fail;
            }
            RT_CHECK(apply(ps, w, opt, updates_per_worker, fn, arg));
            if (pe->updates == updates_per_worker) open--;
            progressed = 1;
            start = w % nw + 1;
        }
        if (!progressed) {
            /* Nothing has landed: sleep a little rather than spin, since the workers usually
             * share the machine's cores with the server. */
            double t0 = rt__now();
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            ps->stats.wait_s += rt__now() - t0;
        }
    }
    for (int w = 1; w <= nw; w++) {
        struct peer *pe = &ps->peers[w];
        if (!pe->req_send) continue;
        rc = ring_wait(pe->req_send);
        pe->req_send = NULL;
        if (rc != RING_OK) {
            rt__fail_comm(rc, pe->comm, "rt_ps_serve: last weights to worker %d", w);
            goto fail;
        }
    }
    return RING_OK;
fail:
    ps->failed = 1;
    return rc;
}

void rt_ps_get_stats(const rt_ps *ps, rt_ps_stats *s)
{
    if (ps && s) *s = ps->stats;
}

void rt_ps_destroy(rt_ps *ps)
{
    if (!ps) return;
    if (ps->peers)
        for (int i = 0; i < ps->nranks; i++) {
            struct peer *pe = &ps->peers[i];
            /* After a failure the partner may never call again: abort so that destroy does not
             * wait out the timeout on queued receives. Requests never waited for are freed by
             * destroy. */
            if (ps->failed && pe->comm) ring_comm_abort(pe->comm);
            ring_comm_destroy(pe->comm);
            free(pe->grad);
            free(pe->send);
        }
    free(ps->peers);
    free(ps->buf);
    free(ps->wbuf);
    rt_params_release(&ps->params);
    free(ps);
}
