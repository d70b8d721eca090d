/*
 * Logging: RING_DEBUG=WARN|INFO|TRACE, RING_DEBUG_SUBSYS=INIT,NET,COLL,ALL (or ^NET to drop
 * one), RING_DEBUG_FILE=path (%h host, %p pid). Lines go to stderr by default, never stdout,
 * and carry host, pid, rank and subsystem. The level check is one relaxed load, so disabled
 * TRACE calls cost nothing measurable on the data path.
 */
#ifndef RING_LOG_H
#define RING_LOG_H

#include <stdatomic.h>

enum { RING_LOG_NONE = 0, RING_LOG_WARN = 1, RING_LOG_INFO = 2, RING_LOG_TRACE = 3 };
enum {
    RING_SUB_INIT = 1u << 0,
    RING_SUB_NET = 1u << 1,
    RING_SUB_COLL = 1u << 2,
    RING_SUB_ALL = 0xffu,
};

extern atomic_int ring__log_level_v; /* -1 until the environment has been read */
extern unsigned ring__log_subsys_v;

void ring__log_init(void);
void ring__log(int level, unsigned subsys, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int ring__log_on(int level, unsigned subsys)
{
    /* Acquire: the level is stored last (do_init), after the file, host and subsystems that a
     * thread seeing it then uses. */
    int l = atomic_load_explicit(&ring__log_level_v, memory_order_acquire);
    if (l < 0) {
        ring__log_init();
        l = atomic_load_explicit(&ring__log_level_v, memory_order_acquire);
    }
    return level <= l && (subsys & ring__log_subsys_v);
}

#define RING_LOG(level, subsys, rank, ...)                                                         \
    do {                                                                                           \
        if (ring__log_on((level), (subsys))) ring__log((level), (subsys), (rank), __VA_ARGS__);    \
    } while (0)

#endif
