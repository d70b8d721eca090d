/*
 * Host reduction loops for every dtype x op.
 *
 * Contract shared by all entries:
 *  - count is in elements; count == 0 is a no-op.
 *  - dst may be the same pointer as a or b (in-place), but must not overlap them partially.
 *  - No alignment is assumed beyond the natural alignment of the element type.
 *  - Integers wrap (two's complement, no UB); fp16/bf16 are widened to float, combined, and
 *    rounded back to nearest-even, so a chain of reductions rounds at every step exactly like
 *    data that crosses the wire in that type.
 *  - Results are bitwise deterministic: the same inputs give the same bits on every CPU the
 *    run-time dispatch may pick (element-wise operations only, no reassociation, no FMA).
 *    One exception: when both inputs of SUM/PROD/AVG are NaN, either NaN payload may survive.
 *  - MIN/MAX propagate a NaN from either input, so the result does not depend on where in the
 *    ring the NaN sits. nranks < 1 is treated as 1.
 */
#ifndef RING_REDUCE_H
#define RING_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcomm.h"

/* dst[i] = a[i] op b[i]. RING_AVG combines like RING_SUM (the division is in reduce_final). */
void ring__reduce(void *dst, const void *a, const void *b, size_t count, ring_dtype_t dtype,
                  ring_op_t op);

/*
 * The last combining step of a reduction over nranks contributions:
 * dst[i] = a[i] op b[i], and for RING_AVG dst[i] = (a[i] + b[i]) / nranks: the sum wrapped or
 * rounded to the type as every partial sum is, then divided (fp16/bf16 in float and rounded
 * once more; integer division truncates).
 */
void ring__reduce_final(void *dst, const void *a, const void *b, size_t count,
                        ring_dtype_t dtype, ring_op_t op, int nranks);

/* Scalar conversions, exposed for tests and reference code. Round to nearest-even. */
float ring__half_to_float(uint16_t h);
uint16_t ring__float_to_half(float f);
float ring__bf16_to_float(uint16_t h);
uint16_t ring__float_to_bf16(float f);

/* Name of the code path the run-time dispatch picked ("x86-64-v4", "x86-64-v3", "generic"). */
const char *ring__reduce_impl_name(void);
/* Tests: run the path of that name from now on (NULL: the widest again). -1 where this CPU
 * or build does not have it. Not for use while reductions run on other threads. */
int ring__reduce_force(const char *name);

/*
 * The loops' results are those of the default floating-point mode (x86-64: round to nearest,
 * no flush-to-zero or denormals-are-zero, exceptions masked). A collective runs on the
 * caller's thread or on the progress thread, so without this the program's mode (set after
 * init: torch.set_flush_denormal does, on its own thread) would decide the bits depending on
 * the thread, or trap. begin puts the default in place on this thread and returns what end
 * needs to put the program's mode back (with the status flags the call raised); nothing is
 * written when the mode is the default. x86-64 only; no-ops elsewhere.
 */
unsigned ring__fp_default_begin(void);
void ring__fp_default_end(unsigned saved);

#endif
