/* test_exact.c: Check suite for rt_exact.c, the exact f32 sums of the
 * deterministic mode (RT_DP_EXACT): random sets whose exponents span at
 * most 60 binades, summed in several orders and cut into several parts
 * (each part its own accumulator, the parts' digits then added, as
 * MPI_SUM on MPI_INT64_T adds them), give the same bits, and those of the
 * __float128 sum rounded to float (exact in that range: 60 binades, 24
 * mantissa bits and the carries fit in 113 bits); then cancellations,
 * subnormals, +-0, ties, the largest finite values, overflow, NaN and inf. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define D RT_EXACT_DIGITS

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A random f32 with biased exponent in [e0, e0 + span) (0: subnormal). */
static float rand_f32(int e0, int span)
{
	uint32_t e = (uint32_t)(e0 + (int)(next() % (uint64_t)span));
	uint32_t b = (uint32_t)(next() & 0x807fffffu) | (e << 23);
	float x;
	memcpy(&x, &b, sizeof x);
	return x;
}

static uint32_t bits(float x)
{
	uint32_t b;
	memcpy(&b, &x, sizeof b);
	return b;
}

/* The sum of x[0..n) through one accumulator, in order idx. */
static int sum_exact(const float *x, const int *idx, int n, float *out)
{
	int64_t acc[D] = {0};
	for (int i = 0; i < n; i++)
		if (rt__exact_add(acc, &x[idx ? idx[i] : i], 1) >= 0)
			return -1;
	return rt__exact_round(acc, out, 1) >= 0 ? -1 : 0;
}

/* Cut into k parts (each its own accumulator), digits added, rounded. */
static float sum_parts(const float *x, int n, int k)
{
	int64_t *acc = calloc((size_t)k * D, sizeof *acc), tot[D] = {0};
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(rt__exact_add(acc + (size_t)(next() % (uint64_t)k) * D, &x[i], 1), -1);
	for (int p = k - 1; p >= 0; p--) /* in any order: integers */
		for (int d = 0; d < D; d++)
			tot[d] += acc[p * D + d];
	float out;
	ck_assert_int_eq(rt__exact_round(tot, &out, 1), -1);
	free(acc);
	return out;
}

static float ref_sum(const float *x, int n)
{
	__float128 s = 0;
	for (int i = 0; i < n; i++)
		s += (__float128)x[i];
	return (float)s;
}

static void check_set(const float *x, int n)
{
	float fwd, rev, shuf, ref = ref_sum(x, n);
	int *idx = malloc((size_t)n * sizeof *idx);
	for (int i = 0; i < n; i++)
		idx[i] = n - 1 - i;
	ck_assert_int_eq(sum_exact(x, NULL, n, &fwd), 0);
	ck_assert_int_eq(sum_exact(x, idx, n, &rev), 0);
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(next() % (uint64_t)(i + 1)), t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
	ck_assert_int_eq(sum_exact(x, idx, n, &shuf), 0);
	ck_assert_msg(bits(fwd) == bits(ref), "exact sum %a, __float128 sum rounded %a", (double)fwd,
	              (double)ref);
	ck_assert_uint_eq(bits(rev), bits(fwd));
	ck_assert_uint_eq(bits(shuf), bits(fwd));
	for (int k = 2; k <= 8; k *= 2)
		ck_assert_uint_eq(bits(sum_parts(x, n, k)), bits(fwd));
	free(idx);
}

/* Random sets: windows of 60 binades from the subnormals to near the top
 * (below it by the 10 bits a sum of 1000 values may grow). */
START_TEST(test_random_sets)
{
	enum { N = 1000 };
	float x[N];
	for (int e0 = 0; e0 + 60 <= 244; e0 += 8)
		for (int rep = 0; rep < 4; rep++) {
			int n = 1 + (int)(next() % N);
			for (int i = 0; i < n; i++)
				x[i] = rand_f32(e0, 60);
			check_set(x, n);
		}
}
END_TEST

/* Cancellation, zeros, subnormals, ties, the largest values. */
START_TEST(test_edges)
{
	float tiny = FLT_TRUE_MIN, big = FLT_MAX, out;
	const float sets[][6] = {
		{1.0f, -1.0f, 0, 0, 0, 0},                          /* exact zero: +0 */
		{-0.0f, -0.0f, 0, 0, 0, 0},                         /* +-0 */
		{1e10f, 1e-8f, -1e10f, 0, 0, 0},                    /* the small one survives */
		{tiny, tiny, tiny, 0, 0, 0},                        /* subnormal sums */
		{FLT_MIN, -tiny, 0, 0, 0, 0},                       /* below the normal boundary */
		{FLT_MIN / 2, FLT_MIN / 2, 0, 0, 0, 0},             /* up to it */
		{1.0f, 0x1p-24f, 0, 0, 0, 0},                       /* a tie: to even (down) */
		{1.0f, 0x1p-24f, 0x1p-23f, 0, 0, 0},                /* a tie: to even (up) */
		{1.0f, 0x1p-24f, 0x1p-60f, 0, 0, 0},                /* just above a tie */
		{big, -big, big, 0, 0, 0},                          /* the largest finite value */
		{big, 0x1p102f, 0, 0, 0, 0},                        /* below the rounding to inf */
		{-big, -0x1p102f, 0, 0, 0, 0},
	};
	for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
		check_set(sets[s], 6);
	ck_assert_uint_eq(bits(sum_parts(sets[1], 2, 2)), 0); /* -0 + -0 is +0 here */
	ck_assert_int_eq(sum_exact((const float[]){1.0f, 0x1p-24f}, NULL, 2, &out), 0);
	ck_assert(out == 1.0f);
	ck_assert_int_eq(sum_exact((const float[]){1e30f, 1e-30f, -1e30f}, NULL, 3, &out), 0);
	ck_assert(out == 1e-30f); /* 200 binades apart: beyond __float128, exact here */
	ck_assert_int_eq(sum_exact((const float[]){big, -big, big}, NULL, 3, &out), 0);
	ck_assert(out == big);
	/* Overflow: past FLT_MAX by half an ulp (2^103) rounds to 2^128. */
	ck_assert_int_eq(sum_exact((const float[]){big, big}, NULL, 2, &out), -1);
	ck_assert_int_eq(sum_exact((const float[]){big, 0x1p103f}, NULL, 2, &out), -1);
	ck_assert_int_eq(sum_exact((const float[]){-big, -0x1p103f}, NULL, 2, &out), -1);
	/* Not finite: refused, with its index. */
	int64_t acc[3 * D] = {0};
	ck_assert_int_eq(rt__exact_add(acc, (const float[]){1.0f, NAN, 2.0f}, 3), 1);
	ck_assert_int_eq(rt__exact_add(acc, (const float[]){INFINITY}, 1), 0);
}
END_TEST

/* Many additions: carries across every digit, and back. */
START_TEST(test_many)
{
	enum { N = 200000 };
	float *x = malloc(N * sizeof *x);
	for (int i = 0; i < N; i++)
		x[i] = rand_f32(150, 60);
	check_set(x, N);
	for (int i = 0; i < N; i++)
		x[i] = (i & 1) ? -x[i - 1] : rand_f32(1, 60);
	float out;
	ck_assert_int_eq(sum_exact(x, NULL, N, &out), 0);
	ck_assert_uint_eq(bits(out), 0);
	free(x);
}
END_TEST

/* Vectors: n accumulators side by side, rounded at once. */
START_TEST(test_vector)
{
	enum { N = 64, K = 10 };
	int64_t acc[N * D];
	float x[K][N], out[N];
	memset(acc, 0, sizeof acc);
	for (int k = 0; k < K; k++) {
		for (int i = 0; i < N; i++)
			x[k][i] = rand_f32(90, 40);
		ck_assert_int_eq(rt__exact_add(acc, x[k], N), -1);
	}
	ck_assert_int_eq(rt__exact_round(acc, out, N), -1);
	for (int i = 0; i < N; i++) {
		float col[K];
		for (int k = 0; k < K; k++)
			col[k] = x[k][i];
		ck_assert_uint_eq(bits(out[i]), bits(ref_sum(col, K)));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("exact");
	TCase *tc = tcase_create("exact");
	tcase_add_test(tc, test_random_sets);
	tcase_add_test(tc, test_edges);
	tcase_add_test(tc, test_many);
	tcase_add_test(tc, test_vector);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
