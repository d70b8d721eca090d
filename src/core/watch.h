/*
 * Failure propagation over the bootstrap star (see watch.c): when one rank fails or dies,
 * every other rank's call in flight returns an error naming it, within milliseconds, and
 * later calls fail at once.
 */
#ifndef RING_WATCH_H
#define RING_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Open the star for notices once the bootstrap is over: from then on a rank whose init fails
 * tells the others why (the star carries nothing else after the rank table). */
ring_result_t ring__watch_open(ring_comm_t *comm);
/* Start the watcher thread (nranks > 1, after a successful init; opens the star if needed). */
ring_result_t ring__watch_start(ring_comm_t *comm);
/* During init, from the end of the bootstrap until the watcher starts, nothing reads the star:
 * a wait for peers calls this, so that a rank whose init failed (it says why on the star, then
 * closes it) or that died ends the others' waits at once, not at their timeout. The root looks
 * at every rank's connection, the others at the root's (which relays). RING_OK while they are
 * up and carry no failure; a no-op once the watcher runs. `what` prefixes the message. */
ring_result_t ring__watch_init_check(ring_comm_t *comm, const char *what);
/* Stop it and say goodbye on the star (ring_comm_destroy), so that leaving is not taken for a
 * death. Safe when never started. */
void ring__watch_stop(ring_comm_t *comm);
/* This rank failed first (ring__comm_fail): tell the others (non-root: the root, which relays;
 * root: everyone). Never blocks for long; a peer that cannot take the notice is skipped. */
void ring__watch_notify(ring_comm_t *comm, ring_result_t code, const char *msg);
/*
 * Record a failure learned from elsewhere (first failure wins), and wake the engine of a call
 * in flight. Returns 1 if this became the communicator's failure.
 */
int ring__fail_remote(ring_comm_t *comm, ring_result_t code, const char *msg);
/* Root: wait (up to 5 s) until the failures the watcher is relaying to the ranks went out. */
void ring__watch_relay_wait(ring_comm_t *comm);
/* A rank other than this one that said goodbye (ring_comm_destroy) on the star, directly or
 * relayed by the root, or -1. */
int ring__watch_someone_left(ring_comm_t *comm);
/* Append to text (a call's message, len bytes) that rank `left` had left while the call `what` ran. */
void ring__watch_note_left(ring_comm_t *comm, int left, const char *what, char *text, size_t len);
/* For a call that sees comm->remote_failed: copy the recorded failure into the call's message
 * and return its code. */
ring_result_t ring__remote_result(ring_comm_t *comm, const char *what);

/*
 * A call that has made no progress for ring__stuck_ns() (min(1 s, RING_TIMEOUT_MS / 4)) says
 * so once (watch.c): the root compares the descriptors of the ranks stuck in the same call and
 * fails the communicator with RING_ERR_MISMATCH where two differ. The wait loops call it
 * (ring__wait_stop) whenever they have been idle that long; it does nothing outside a
 * collective, or for a call already reported.
 */
void ring__watch_stuck(ring_comm_t *comm);
static inline int64_t ring__stuck_ns(const ring_comm_t *comm)
{
    int64_t quarter = (int64_t)comm->params.timeout_ms * 250000LL;
    return quarter < 1000000000LL ? quarter : 1000000000LL;
}
/* Root: rank r's call with descriptor desc (RING__DESC_LEN bytes) is stuck; record it and fail
 * the communicator with RING_ERR_MISMATCH if another rank is stuck in the same call (same
 * sequence number) with a descriptor that differs. Returns 1 when it found a mismatch. */
int ring__watch_stuck_at_root(ring_comm_t *comm, int r, const unsigned char *desc);
/* Root, for a timeout of rank timed_out (its own or one it relays): appends to text (a
 * NUL-terminated string in a buffer of len bytes) the ranks that sent no stuck report for the
 * call that rank reported stuck in, or a later one, when some did not and at most half. Every
 * rank waiting on one that never came reports within RING_TIMEOUT_MS / 4, so those left are
 * where to look first; the timeout of each rank names only the peer it waited for, often one
 * that waits too. */
void ring__watch_stuck_hint(ring_comm_t *comm, int timed_out, char *text, size_t len);

/*
 * Notice frames on the star: 16-byte header (magic "RGNT", type, origin rank, code:16,
 * text length:16) + text (<= RING__NOTICE_TEXT_MAX bytes, not NUL-terminated). WAITING (a
 * stuck report, to the root only) has code 0 and exactly RING__NOTICE_WAITING_TEXT bytes of
 * text: the call's 40-byte descriptor in lowercase hex (text, so that the frame is built like
 * the others).
 */
#define RING__NOTICE_HDR 16
#define RING__NOTICE_TEXT_MAX 800
#define RING__NOTICE_WAITING_TEXT 80
enum { RING__NOTICE_FAIL = 1, RING__NOTICE_BYE = 2, RING__NOTICE_WAITING = 3 };

/* Build a frame into buf (RING__NOTICE_HDR + RING__NOTICE_TEXT_MAX bytes); text is cut to
 * the maximum. Returns the frame length. */
size_t ring__notice_build(unsigned char *buf, uint32_t type, uint32_t origin, uint32_t code, const char *text);
/*
 * Parse the frame at the start of buf[0..len): returns its length when complete and valid,
 * 0 when more bytes are needed, -1 for garbage (bad magic, type, code or length). Lengths are
 * checked before anything is read past the header.
 */
long ring__notice_parse(const unsigned char *buf, size_t len, uint32_t *type, uint32_t *origin, uint32_t *code,
                        const unsigned char **text, size_t *textlen);

#endif
