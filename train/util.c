/*
 * util.c: the per-thread error buffer, the monotonic clock and the random number generator
 * of the training layer.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "rt_internal.h"

static _Thread_local char err_buf[1024];
static _Thread_local int op_failed;

const char *rt_last_error(void)
{
    return err_buf;
}

static void set_error(const char *fmt, va_list ap)
{
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
}

ring_result_t rt__fail(ring_result_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return rc;
}

ring_result_t rt__fail_comm(ring_result_t rc, const ring_comm_t *comm, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* The communicator's text may be rewritten by its progress thread later: copy it now. */
    snprintf(err_buf, sizeof err_buf, "%s: %s: %s", what, ring_result_name(rc), ring_comm_last_error(comm));
    return rc;
}

void rt__op_failed(void)
{
    op_failed = 1;
}

int rt__take_op_failed(void)
{
    int f = op_failed;
    op_failed = 0;
    return f;
}

double rt__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64 spreads a small seed over the 256 bits of state, as xoshiro's authors advise. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rt_rng_seed(rt_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rt_rng_next(rt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rt_rng_uniform(rt_rng *r)
{
    return (double)(rt_rng_next(r) >> 11) * 0x1.0p-53;
}

double rt_rng_normal(rt_rng *r)
{
    /* 1 - u keeps the logarithm's argument in (0, 1]. */
    double u1 = 1.0 - rt_rng_uniform(r), u2 = rt_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rt_rng_below(rt_rng *r, uint64_t n)
{
    /* Rejection of the short last interval: a plain modulo would favour small values. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rt_rng_next(r);
    while (x >= limit);
    return x % n;
}
