/*
 * Reference model for the multi-process collective tests.
 *
 * Everything here is written from the public contract in ringcomm.h and shares no code with
 * the library (its own fp16/bf16 conversions, its own wrap arithmetic), so that a bug in the
 * library's reduction loops cannot hide by also being in the expected values.
 *
 * Inputs are a pure function of (seed, op index, rank, element index): every rank can
 * regenerate every other rank's contribution and compute the expected result on its own,
 * without trusting any data that went through the library.
 */
#ifndef RING_TEST_REFERENCE_H
#define RING_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcomm.h"

/* What a buffer is filled with; picks data for which the expected result is exact. */
typedef enum {
    /* Any bit pattern (NaNs included): for collectives that only move data. */
    REF_BITS,
    /* Data for a reduction whose result does not depend on the order of combination:
     * integers full range (wrap is associative), floats small exactly summable values for
     * SUM/AVG, {-2,-1,1,2} for PROD, finite values without -0 for MIN/MAX. */
    REF_EXACT,
    /* Random non-integer floats for tolerance checks (float types only). */
    REF_NOISE,
    /* IEEE special values for a reduction (float types only): see ref_special_expect. */
    REF_SPECIAL,
} ref_kind_t;

uint64_t ref_mix64(uint64_t x);
uint64_t ref_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

size_t ref_dtype_size(ring_dtype_t dt); /* 0 if invalid */
int ref_dtype_is_float(ring_dtype_t dt);
const char *ref_dtype_name(ring_dtype_t dt);
const char *ref_op_name(ring_op_t op);

float ref_half_to_float(uint16_t h);
uint16_t ref_float_to_half(float f); /* round to nearest-even, overflow to inf, NaN kept NaN */
float ref_bf16_to_float(uint16_t h);
uint16_t ref_float_to_bf16(float f); /* round to nearest-even */

/*
 * Contribution of `rank` to operation `opidx`: elements [first, first+count) of its buffer,
 * written to buf[0..count). `op` and `nranks` shape REF_EXACT data (value ranges shrink with
 * nranks so that every partial sum stays exact).
 */
void ref_fill(void *buf, size_t count, ring_dtype_t dt, ring_op_t op, ref_kind_t kind, int nranks,
              uint64_t seed, uint64_t opidx, int rank, size_t first);

/* Bytes no correct result can equal by accident, for output buffers before the call. */
void ref_fill_garbage(void *buf, size_t nbytes, uint64_t salt);

/*
 * Expected result of reducing every rank's REF_EXACT contribution (ranks 0..nranks-1) for
 * elements [first, first+count), with the library's documented semantics: integers wrap,
 * fp16/bf16 round to nearest-even after every combination, RING_AVG divides the sum once at
 * the end (in float for 16/32-bit floats, double for float64, truncating for integers).
 */
void ref_expect_reduce(void *out, size_t count, ring_dtype_t dt, ring_op_t op, int nranks,
                       uint64_t seed, uint64_t opidx, size_t first);

/*
 * For REF_NOISE data: the exact-as-double sum of every rank's contribution to element `idx`
 * (*sum) and the sum of magnitudes (*abssum) for an error bound.
 */
void ref_noise_sum(ring_dtype_t dt, int nranks, uint64_t seed, uint64_t opidx, size_t idx,
                   double *sum, double *abssum);

/* Unit roundoff of a float dtype (2^-11 for fp16, ...). */
double ref_unit_roundoff(ring_dtype_t dt);

double ref_elem_to_double(const void *p, ring_dtype_t dt);
/* "123 (0x7b)" / "1.5 (0x3e00)": value and raw bits, for mismatch reports. */
void ref_format_elem(char *out, size_t outlen, const void *p, ring_dtype_t dt);

/*
 * IEEE special values (REF_SPECIAL; float types, every op). Every element position draws a
 * case from (seed, opidx, index) alone, and each rank's value from the case and its rank:
 * NaN (quiet, random sign and payload) on one rank or on two, +Inf and -Inf together, Inf
 * with finite values, the largest finite value on two or more ranks (SUM overflows), on one
 * (absorbs the rest), or +MAX and -MAX cancelling among zeros, -0 on every rank, -0 and +0
 * mixed, subnormals alone, ordinary values, and for PROD zero times Inf, overflow, one
 * subnormal times powers of two. The cases are chosen so that the documented result does
 * not depend on the order of combination (ref_special_expect checks that on every element).
 *
 * ref_special_expect writes the expected bits of every element and, in how[i], how a result
 * is compared with them: REF_MATCH_BITS bitwise; REF_MATCH_NAN any quiet NaN (the payload
 * and sign of a NaN are free); REF_MATCH_ZERO a zero of either sign (MIN/MAX of -0 and +0:
 * which of two equal operands wins is not documented). It returns the number of elements
 * whose expected value came out differently in different combination orders (0 unless the
 * generator is wrong; the first is described in `why`).
 */
enum { REF_MATCH_BITS, REF_MATCH_NAN, REF_MATCH_ZERO };

size_t ref_special_expect(void *out, unsigned char *how, size_t count, ring_dtype_t dt, ring_op_t op, int nranks,
                          uint64_t seed, uint64_t opidx, size_t first, char *why, size_t whylen);
/* 1 if got is acceptable for expected exp compared the `how` way. */
int ref_special_match(const void *got, const void *exp, int how, ring_dtype_t dt);
/* The case of element idx and every rank's input, for mismatch reports. */
void ref_special_describe(char *out, size_t outlen, ring_dtype_t dt, ring_op_t op, int nranks, uint64_t seed,
                          uint64_t opidx, size_t idx);
/* The element's bits with every NaN replaced by one canonical NaN: for comparing ranks'
 * results with the NaN payloads left out. */
uint64_t ref_canonical_bits(const void *p, ring_dtype_t dt);

uint64_t ref_fnv1a(uint64_t h, const void *p, size_t n);
#define REF_FNV_INIT 0xcbf29ce484222325ULL

#endif
