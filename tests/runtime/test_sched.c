/* test_sched.c: Check suite for rt_sched.c's math: the learning-rate
 * schedule (rt_lr_at: warm-up, cosine, linear, constant, the ends, a pure
 * function of the step) and the settings it refuses; the global norm's
 * exact sum of squares (rt__exact_sumsq, rt__exact_value): the same bits
 * whatever the order and however the values are cut among accumulators
 * added digit by digit (as ranks are, by MPI_SUM), within a double's
 * rounding of the __float128 sum of the f32 squares, and a square that
 * overflows refused. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define D RT_EXACT_DIGITS

static rt_train sched(int64_t warmup, rt_decay decay, int64_t dsteps, float lr, float lo)
{
	return (rt_train){.lr = lr, .warmup = warmup, .decay = decay, .decay_steps = dsteps,
	                  .min_lr = lo};
}

START_TEST(test_warmup_and_decay)
{
	rt_train t = sched(4, RT_DECAY_COSINE, 12, 1e-3f, 1e-4f);
	double lr = 1e-3f, lo = 1e-4f;
	/* warm-up: (t + 1) / warmup of lr, rounded once */
	for (int s = 0; s < 4; s++)
		ck_assert_float_eq(rt_lr_at(&t, s), (float)(lr * (s + 1) / 4.0));
	ck_assert_float_eq(rt_lr_at(&t, 3), 1e-3f);
	/* cosine: lr at the end of the warm-up, the midpoint halfway, min_lr from decay_steps on */
	ck_assert_float_eq(rt_lr_at(&t, 4), 1e-3f);
	ck_assert_float_eq(rt_lr_at(&t, 8), (float)(lo + (lr - lo) * 0.5 * (1.0 + cos(M_PI * 0.5))));
	ck_assert_float_eq(rt_lr_at(&t, 12), 1e-4f);
	ck_assert_float_eq(rt_lr_at(&t, 1000000), 1e-4f);
	for (int s = 4; s < 12; s++) /* non-increasing after the warm-up */
		ck_assert(rt_lr_at(&t, s + 1) <= rt_lr_at(&t, s));
	/* linear: a straight line to min_lr */
	t.decay = RT_DECAY_LINEAR;
	ck_assert_float_eq(rt_lr_at(&t, 6), (float)(lo + (lr - lo) * (1.0 - 2.0 / 8.0)));
	ck_assert_float_eq(rt_lr_at(&t, 12), 1e-4f);
	/* constant: lr after the warm-up, whatever decay_steps says */
	t.decay = RT_DECAY_CONSTANT;
	ck_assert_float_eq(rt_lr_at(&t, 100), 1e-3f);
	/* no warm-up: the first step has lr itself */
	t = sched(0, RT_DECAY_COSINE, 10, 2e-3f, 0);
	ck_assert_float_eq(rt_lr_at(&t, 0), 2e-3f);
	ck_assert_float_eq(rt_lr_at(&t, 10), 0.0f);
	/* a decay that ends inside the warm-up: min_lr once it is over */
	t = sched(5, RT_DECAY_LINEAR, 3, 1e-3f, 1e-5f);
	ck_assert_float_eq(rt_lr_at(&t, 4), 1e-3f);
	ck_assert_float_eq(rt_lr_at(&t, 5), 1e-5f);
	/* a pure function of the step: the same bits asked twice, in any order */
	t = sched(3, RT_DECAY_COSINE, 50, 3e-4f, 3e-5f);
	float a[50];
	for (int s = 49; s >= 0; s--)
		a[s] = rt_lr_at(&t, s);
	for (int s = 0; s < 50; s++) {
		float b = rt_lr_at(&t, s);
		ck_assert(memcmp(&a[s], &b, sizeof b) == 0);
	}
}
END_TEST

START_TEST(test_settings_refused)
{
	rt_train t = sched(0, RT_DECAY_COSINE, 10, 1e-3f, 0);
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_OK);
	t.min_lr = 2e-3f; /* above lr */
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_EARG);
	t.min_lr = 0;
	t.clip = -1;
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_EARG);
	t.clip = INFINITY;
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_EARG);
	t.clip = 1;
	t.warmup = -1;
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_EARG);
	t.warmup = 0;
	t.decay = (rt_decay)7;
	ck_assert_int_eq(rt__sched_check(NULL, &t), RT_EARG);
}
END_TEST

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A gradient-like value: any sign, magnitudes from 1e-30 to 1e4. */
static float rand_grad(void)
{
	double m = (double)(next() >> 11) / 9007199254740992.0;
	float x = (float)ldexp(0.5 + m / 2, (int)(next() % 114) - 100);
	return next() & 1 ? -x : x;
}

enum { N = 20000 };

START_TEST(test_sumsq_order_and_parts)
{
	static float x[N], y[N];
	for (int i = 0; i < N; i++)
		x[i] = rand_grad();
	int64_t whole[D] = {0};
	ck_assert_int_eq(rt__exact_sumsq(whole, x, N), -1);
	double v = rt__exact_value(whole);
	/* the reference: the f32 squares summed in __float128 */
	__float128 ref = 0;
	for (int i = 0; i < N; i++)
		ref += (__float128)(x[i] * x[i]);
	ck_assert(fabs(v - (double)ref) <= 4 * 0x1p-53 * (double)ref);
	/* shuffled */
	memcpy(y, x, sizeof x);
	for (int i = N - 1; i > 0; i--) {
		int j = (int)(next() % (uint64_t)(i + 1));
		float tmp = y[i];
		y[i] = y[j], y[j] = tmp;
	}
	int64_t sh[D] = {0};
	ck_assert_int_eq(rt__exact_sumsq(sh, y, N), -1);
	ck_assert(memcmp(&v, &(double){rt__exact_value(sh)}, sizeof v) == 0);
	/* cut into 2, 3, 7 parts, each its own accumulator (a rank), added digit by digit */
	static const int cuts[] = {2, 3, 7};
	for (int c = 0; c < 3; c++) {
		int64_t sum[D] = {0};
		for (int p = 0; p < cuts[c]; p++) {
			int64_t part[D] = {0};
			int lo = N * p / cuts[c], hi = N * (p + 1) / cuts[c];
			ck_assert_int_eq(rt__exact_sumsq(part, y + lo, hi - lo), -1);
			for (int k = 0; k < D; k++)
				sum[k] += part[k];
		}
		double w = rt__exact_value(sum);
		ck_assert(memcmp(&v, &w, sizeof v) == 0);
	}
}
END_TEST

START_TEST(test_sumsq_edges)
{
	int64_t acc[D] = {0};
	/* 3-4-5: exact */
	float x[] = {3, -4, 0, -0.0f};
	ck_assert_int_eq(rt__exact_sumsq(acc, x, 4), -1);
	ck_assert(rt__exact_value(acc) == 25.0);
	/* squares below f32's range vanish; the norm of zeros is 0 */
	int64_t z[D] = {0};
	float tiny[] = {1e-30f, -1e-30f};
	ck_assert_int_eq(rt__exact_sumsq(z, tiny, 2), -1);
	ck_assert(rt__exact_value(z) == 0.0);
	/* a square that overflows f32, and NaN: refused at their index */
	int64_t o[D] = {0};
	float big[] = {1, 2e19f, 1};
	ck_assert_int_eq(rt__exact_sumsq(o, big, 3), 1);
	float nan[] = {1, 2, NAN};
	ck_assert_int_eq(rt__exact_sumsq(o, nan, 3), 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("sched");
	tcase_add_test(tc, test_warmup_and_decay);
	tcase_add_test(tc, test_settings_refused);
	tcase_add_test(tc, test_sumsq_order_and_parts);
	tcase_add_test(tc, test_sumsq_edges);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
