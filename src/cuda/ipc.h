/*
 * CUDA IPC links between ring neighbours on one host (docs/cuda.md, "CUDA IPC"), used by the
 * device engine (coll.c) when RING_CUDA_IPC=1. One link per direction: this rank sends to its
 * right neighbour through device slots it exports, and reads what its left neighbour exported.
 * ipc.c says how a link is set up and what crosses it.
 */
#ifndef RING_CUDA_IPC_H
#define RING_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The link message: after the collective descriptor, each way, on every ring call in IPC mode. */
#define RING__IPC_MSG_LEN 256

/* One call's view of the two links. tx/rx: how this call's messages go, 1 through CUDA IPC,
 * 0 staged through host memory and the transport (the host protocol), -1 not known yet. */
typedef struct ring__ipc_call {
    unsigned char out[RING__IPC_MSG_LEN], in[RING__IPC_MSG_LEN];
    int tx, rx;
} ring__ipc_call_t;

/* Before the call's first message: set up the send link on `device` if it is new, and write
 * the link message to send. A link that cannot be made is staged (logged), not an error. */
ring_result_t ring__ipc_begin(ring_comm_t *comm, int device, ring__ipc_call_t *c);
/* The left neighbour's link message arrived: map what it offers and answer, or take its
 * "staged". Errors: a message that breaks the protocol, a page that cannot be mapped. */
ring_result_t ring__ipc_accept(ring_comm_t *comm, ring__ipc_call_t *c);
/* While c->tx < 0: has the right neighbour answered the setup? Sets c->tx when it has. */
void ring__ipc_poll_answer(ring_comm_t *comm, ring__ipc_call_t *c);
/* After a call that succeeded: its messages count in the links' message numbers. */
void ring__ipc_end(ring_comm_t *comm, const ring__ipc_call_t *c, size_t nsent, size_t nrecvd);

/* Send link (c->tx == 1). Message numbers m count over the communicator's life: the first
 * message of a call is ring__ipc_tx_base(comm). */
uint64_t ring__ipc_tx_base(ring_comm_t *comm);
/* May message m be written: has the receiver finished with the slot it takes? */
int ring__ipc_tx_credit(ring_comm_t *comm, uint64_t m);
/* Where message m's bytes go: its slot, at src's offset modulo 256 (the kernel's vector body
 * needs its operands congruent modulo 16; the receiver's own data sits where src does). */
unsigned char *ring__ipc_tx_slot(ring_comm_t *comm, uint64_t m, const void *src);
/* The copy into the slot finished: the receiver may read it. */
void ring__ipc_tx_publish(ring_comm_t *comm, uint64_t m, const unsigned char *at, size_t len);

/* Receive link (c->rx == 1). */
uint64_t ring__ipc_rx_base(ring_comm_t *comm);
/* Has message m (of len bytes) been published? *at: its bytes in the sender's slot. A header
 * that disagrees with the schedule is RING_ERR_PROTOCOL. */
ring_result_t ring__ipc_rx_poll(ring_comm_t *comm, uint64_t m, size_t len, const void **at, int *arrived);
/* Messages before `upto` are no longer read: their slots go back to the sender. */
void ring__ipc_rx_release(ring_comm_t *comm, uint64_t upto);

/* Tests: messages moved over each link so far (0 where it is not CUDA IPC). */
void ring__cuda_ipc_counts(ring_comm_t *comm, uint64_t *tx, uint64_t *rx);
/* Tests: messages this rank published that its receiver has not released (0 where the send
 * link is not CUDA IPC); and how many send links' slots ring_comm_destroy left allocated in
 * this process for that reason. */
uint64_t ring__cuda_ipc_unreleased(ring_comm_t *comm);
int ring__cuda_ipc_left(void);
/* ring_comm_destroy: wait (bounded) until the receiver is done with our slots, then free
 * (gpu_busy: ring__cuda_dead_busy; the slots are then left allocated). */
void ring__cuda_ipc_fini(ring_comm_t *comm, int gpu_busy);

#endif
