/* rt_exact.c: exact sums of f32 values, for the deterministic mode
 * (RT_DP_EXACT; docs/runtime.md, "Data parallelism").
 *
 * Every finite f32 is an integer multiple of 2^-149 below 2^128, so a sum
 * of them is an integer in units of 2^-149 below 2^277 (times the count).
 * An accumulator holds that integer as RT_EXACT_DIGITS (9) int64 digits,
 * digit k weighing 2^(32k): adding a value adds its 24-bit mantissa,
 * shifted by its exponent, into at most two digits (subtracts, for a
 * negative value), with no carry propagated.  Each addition moves a digit
 * by less than 2^32, so ~2^31 additions cannot overflow one, and digits
 * added digit by digit (MPI_SUM on MPI_INT64_T) are the sum of the values:
 * exact integer arithmetic, the same whatever the order or the grouping.
 *
 * Rounding, once at the end: the carries normalised (digits 0..7 into
 * [0, 2^32), the sign in digit 8), the magnitude rounded to 24 bits to
 * nearest, ties to even, as an f32 (subnormals included: below 2^24 units
 * the integer is the f32's bit pattern itself).  A magnitude that rounds to
 * 2^128 or more is an overflow: the caller names the layer.  Pure
 * functions on caller memory; no MPI, no context. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rt_internal.h"

#define D RT_EXACT_DIGITS

/* Adds one f32 (finite, bit pattern b) into the digits d. */
static void add_one(int64_t *d, uint32_t b)
{
	uint32_t e = (b >> 23) & 0xff, f = b & 0x7fffff;
	if (!e && !f)
		return; /* +-0 */
	/* value = m * 2^s units of 2^-149 */
	uint64_t m = e ? (f | 0x800000u) : f;
	unsigned s = e ? e - 1 : 0;
	uint64_t w = m << (s & 31);
	int64_t lo = (int64_t)(w & 0xffffffffu), hi = (int64_t)(w >> 32);
	d += s >> 5;
	if (b >> 31) {
		d[0] -= lo;
		if (hi)
			d[1] -= hi;
	} else {
		d[0] += lo;
		if (hi)
			d[1] += hi;
	}
}

int64_t rt__exact_add(int64_t *acc, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], sizeof b);
		if (((b >> 23) & 0xff) == 0xff)
			return i;
		add_one(acc + i * D, b);
	}
	return -1;
}

/* Digits 0..D-2 into [0, 2^32), the rest carried up (floor division, so a
 * negative digit borrows). */
static void normalise(int64_t *d)
{
	for (int k = 0; k < D - 1; k++) {
		int64_t low = (int64_t)((uint64_t)d[k] & 0xffffffffu);
		d[k + 1] += (d[k] - low) / ((int64_t)1 << 32);
		d[k] = low;
	}
}

/* Bit `pos` of the magnitude (digits of 32 bits). */
static unsigned bit(const int64_t *d, int pos)
{
	return (unsigned)(((uint64_t)d[pos >> 5] >> (pos & 31)) & 1);
}

/* Any bit below `pos` set. */
static int any_below(const int64_t *d, int pos)
{
	for (int k = 0; k < (pos >> 5); k++)
		if (d[k])
			return 1;
	return (pos & 31) && ((uint64_t)d[pos >> 5] & ((1ull << (pos & 31)) - 1));
}

/* 24 bits of the magnitude from bit `pos` up. */
static uint32_t bits24(const int64_t *d, int pos)
{
	int k = pos >> 5, o = pos & 31;
	uint64_t w = (uint64_t)d[k] >> o;
	if (k + 1 < D)
		w |= (uint64_t)d[k + 1] << (32 - o);
	return (uint32_t)(w & 0xffffffu);
}

/* One accumulator to the nearest f32; -1 on overflow. */
static int round_one(const int64_t *acc, float *out)
{
	int64_t d[D];
	memcpy(d, acc, sizeof d);
	normalise(d);
	uint32_t sign = 0;
	if (d[D - 1] < 0) {
		for (int k = 0; k < D; k++)
			d[k] = -d[k];
		normalise(d);
		sign = 0x80000000u;
	}
	if (d[D - 1] >= ((int64_t)1 << 32))
		return -1;
	int top = D - 1;
	while (top >= 0 && !d[top])
		top--;
	uint32_t bits;
	if (top < 0) {
		bits = 0; /* an exact zero is +0 */
		sign = 0;
	} else {
		int p = 32 * top + 31 - __builtin_clz((unsigned)d[top]);
		if (p < 24) {
			bits = (uint32_t)d[0]; /* m * 2^-149, m < 2^24: the f32's pattern */
		} else {
			int s = p - 23;
			uint32_t m = bits24(d, s);
			if (bit(d, s - 1) && (any_below(d, s - 1) || (m & 1)))
				m++; /* to 2^24 at most: the next binade's pattern below */
			uint64_t wide = ((uint64_t)s << 23) + m;
			if (wide >= 0x7f800000u)
				return -1;
			bits = (uint32_t)wide;
		}
	}
	bits |= sign;
	memcpy(out, &bits, sizeof bits);
	return 0;
}

int64_t rt__exact_round(const int64_t *acc, float *out, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (round_one(acc + i * D, &out[i]))
			return i;
	return -1;
}

/* One accumulator takes every square here, so its digits are normalised
 * every 2^30 additions, before any could pass 2^62. */
int64_t rt__exact_sumsq(int64_t *acc, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float q = x[i] * x[i];
		uint32_t b;
		memcpy(&b, &q, sizeof b);
		if (((b >> 23) & 0xff) == 0xff)
			return i;
		add_one(acc, b);
		if ((i & ((INT64_C(1) << 30) - 1)) == (INT64_C(1) << 30) - 1)
			normalise(acc);
	}
	normalise(acc);
	return -1;
}

/* From the top digit down, each digit exact in a double: the same digits
 * give the same double on every rank. */
double rt__exact_value(const int64_t *acc)
{
	int64_t d[D];
	memcpy(d, acc, sizeof d);
	normalise(d);
	double v = 0;
	for (int k = D - 1; k >= 0; k--)
		v += ldexp((double)d[k], 32 * k - 149);
	return v;
}
