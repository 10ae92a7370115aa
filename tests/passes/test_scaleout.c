/* test_scaleout.c: Check suite for the data-parallel search (--dp auto,
 * passes/scaleout.c).  Properties: the candidates are exactly the degrees
 * that divide the devices and the micro-batches; each row is the plan a
 * fixed --dp gives; the one kept is the fastest that fits; the bound is
 * below every step; memory decides what fits; nothing fitting is an error
 * naming the closest. */
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "pass.h"
#include "scaleout.h"
#include "simulate.h"
#include "testutil.h"

static ir_module *load(const char *model, int64_t devices, const char *schedule)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), model);
	fe_overrides ov = {.devices = devices, .schedule = schedule, .dp_auto = true};
	ir_module *m = fe_load(path, &ov);
	ck_assert_msg(m != NULL, "%s does not load", path);
	ck_assert(m->dp_auto && m->recompute_auto); /* recompute follows dp's search */
	return m;
}

/* The simulated step of m planned with the default pipeline at a fixed dp
 * and sharding (as --dp D would plan it). */
static double fixed_dp_step(const ir_module *base, int64_t D, bool dist_opt, ir_recompute rc,
                            const char *model, const char *schedule)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), model);
	fe_overrides ov = {.devices = base->cluster.devices, .schedule = schedule, .dp = D,
	                   .dist_opt = dist_opt, .recompute = ir_recompute_names[rc]};
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	m->cluster.mem = base->cluster.mem;
	ck_assert_int_eq(pass_run_default(m, NULL), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	double t = r->makespan;
	sim_free(r);
	ir_free(m);
	return t;
}

static void check_rows(const ir_module *m, const ir_module *kept, const scaleout *so)
{
	int64_t N = m->cluster.devices, M = m->train.microbatches;
	/* The candidates: every D dividing N and M with a layer per device,
	 * with the sharding off and on where there are replicas. */
	int want = 0, modes = 2; /* recomputed: none and full, and selective with Mamba layers */
	for (int l = 0; l < m->nlayers; l++)
		modes = m->layers[l].kind == IR_LAYER_MAMBA ? 3 : modes;
	for (int64_t D = 1; D <= N; D++)
		if (N % D == 0 && M % D == 0 && N / D <= m->nlayers && (m->dp_auto || D == ir_dp(m)))
			want += (m->dp_auto && D > 1 && !m->plan.dist_opt ? 2 : 1) * (m->recompute_auto ? modes : 1);
	ck_assert_int_eq(so->nrows, want);
	ck_assert_int_ge(so->chosen, 0);
	const scaleout_row *c = &so->rows[so->chosen];
	ck_assert(c->ok && c->fits && c->chosen);
	for (int i = 0; i < so->nrows; i++) {
		const scaleout_row *r = &so->rows[i];
		ck_assert_int_eq(r->dp * r->pp, N);
		ck_assert(!r->dist_opt || r->dp > 1);
		if (!r->ok) {
			/* A candidate not planned says why; one pruned by its bound
			 * could not have won. */
			ck_assert(r->why[0]);
			if (strstr(r->why, "cannot be faster"))
				ck_assert(r->bound >= c->step);
			continue;
		}
		ck_assert_msg(r->bound <= r->step * (1 + 1e-12), "D=%lld: bound %g above the step %g",
		              (long long)r->dp, r->bound, r->step);
		ck_assert_int_eq(r->fits, m->cluster.mem == UINT64_MAX || r->peak <= m->cluster.mem);
		if (r->fits)
			ck_assert_msg(c->step <= r->step, "kept D=%lld (%g us), D=%lld is faster (%g us)",
			              (long long)c->dp, c->step, (long long)r->dp, r->step);
		ck_assert(i == so->chosen || r->why[0]);
	}
	/* The module kept is the row kept. */
	ck_assert_int_eq(ir_dp(kept), c->dp);
	ck_assert_int_eq(kept->plan.dist_opt != 0, c->dist_opt);
	ck_assert(ir_lowered(kept) && kept->memplan);
	sim_result *r = sim_run(kept);
	ck_assert_ptr_nonnull(r);
	ck_assert(r->makespan == c->step);
	sim_free(r);
}

/* A fixed schedule (no tuner, no budget in play): every row is the step a
 * fixed --dp plans. */
START_TEST(test_rows_are_fixed_dp_plans)
{
	ir_module *m = load("tiny-hybrid", 4, "1f1b");
	scaleout so;
	ir_module *kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	for (int i = 0; i < so.nrows; i++) {
		const scaleout_row *r = &so.rows[i];
		if (!r->ok)
			continue; /* pruned: check_rows says why that is right */
		ck_assert(r->recompute == IR_RECOMP_NONE || r->step > so.rows[so.chosen].step);
		double t = fixed_dp_step(m, r->dp, r->dist_opt, r->recompute, "tiny-hybrid", "1f1b");
		ck_assert_msg(t == r->step, "D=%lld%s: row %g us, --dp gives %g us", (long long)r->dp,
		              r->dist_opt ? " dist-opt" : "", r->step, t);
	}
	ir_free(kept);
	scaleout_free(&so);
	ir_free(m);
}
END_TEST

/* Under a memory limit between the candidates' peaks (a fixed schedule,
 * whose peaks do not adapt to the limit as the tuner's do): what fits
 * decides, and the fastest of it is kept. */
START_TEST(test_memory_decides)
{
	ir_module *m = load("tiny-hybrid", 4, "1f1b");
	m->cluster.mem = UINT64_MAX;
	scaleout so;
	ir_module *kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	uint64_t lo = UINT64_MAX, hi = 0;
	for (int i = 0; i < so.nrows; i++) {
		lo = so.rows[i].peak < lo ? so.rows[i].peak : lo;
		hi = so.rows[i].peak > hi ? so.rows[i].peak : hi;
	}
	ck_assert_msg(lo < hi, "the candidates' peaks are all %llu bytes", (unsigned long long)lo);
	ir_free(kept);
	scaleout_free(&so);

	/* Below the largest peak: at least that candidate does not fit. */
	m->cluster.mem = lo + (hi - lo) / 2;
	kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	int over = 0;
	for (int i = 0; i < so.nrows; i++)
		over += so.rows[i].ok && !so.rows[i].fits;
	ck_assert_int_ge(over, 1);
	ck_assert_uint_le(so.rows[so.chosen].peak, m->cluster.mem);
	ir_free(kept);
	scaleout_free(&so);

	/* The tuner's plans, the same limit: the one kept fits. */
	m->plan.schedule = IR_SCHED_TUNED;
	kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	ir_free(kept);
	scaleout_free(&so);

	/* Below every peak: an error saying so. */
	m->cluster.mem = lo / 4;
	tu_capture();
	kept = scaleout_search(m, &(pass_opts){0}, &so);
	char *first = tu_release_first_line();
	ck_assert_ptr_null(kept);
	ck_assert_int_eq(so.chosen, -1);
	ck_assert_msg(strstr(first, "does not fit"), "%s", first);
	free(first);
	scaleout_free(&so);
	ir_free(m);
}
END_TEST

/* The distributed optimizer given on: only candidates with it (where there
 * are replicas); given off: none with it; searched: both where there are
 * replicas; a degree that divides nothing: no candidates, an error. */
START_TEST(test_fixed_sharding_and_no_candidate)
{
	for (int mode = 0; mode < 3; mode++) { /* off, on, searched */
		ir_module *m = load("tiny-dense", 4, "1f1b");
		ck_assert(m->dist_opt_auto); /* with dp auto, unless given */
		m->plan.dist_opt = mode == 1;
		m->dist_opt_auto = mode == 2;
		scaleout so;
		ir_module *kept = scaleout_search(m, &(pass_opts){0}, &so);
		ck_assert_ptr_nonnull(kept);
		int on = 0, replicated = 0;
		for (int i = 0; i < so.nrows; i++) {
			on += so.rows[i].dist_opt;
			replicated += so.rows[i].dp > 1;
			if (mode < 2)
				ck_assert(so.rows[i].dist_opt == (mode == 1 && so.rows[i].dp > 1));
		}
		if (mode == 2)
			ck_assert_int_eq(on * 2, replicated); /* each replicated D off and on */
		ck_assert(!kept->dist_opt_auto);
		ir_free(kept);
		scaleout_free(&so);
		ir_free(m);
	}

	ir_module *m;
	scaleout so;
	ir_module *kept;

	m = load("tiny-dense", 64, "1f1b"); /* more devices than layers, D = 1 only divides M */
	m->train.microbatches = 1;
	tu_capture();
	kept = scaleout_search(m, &(pass_opts){0}, &so);
	char *first = tu_release_first_line();
	ck_assert_ptr_null(kept);
	ck_assert_int_eq(so.nrows, 0);
	ck_assert_msg(strstr(first, "dp=auto: no data-parallel degree D divides both the 64 devices"),
	              "%s", first);
	free(first);
	scaleout_free(&so);
	ir_free(m);
}
END_TEST

/* --recompute auto with dp given: the search over the recomputation
 * alone; a model whose 1F1B stash does not fit 4 devices (nemotron-h-8b,
 * 8 micro-batches, on devices of 64 GiB: without recomputation a device
 * needs 67.7 GiB, selectively 62.0) is planned recomputing -- selective,
 * which drops the Mamba scans' chunk states for little time, before full --
 * and one that fits is not. */
START_TEST(test_recompute_when_it_must)
{
	char path[512];
	snprintf(path, sizeof path, "%s/nemotron-h-8b.yaml", fe_models_dir());
	fe_overrides ov = {.devices = 4, .microbatches = 8, .schedule = "1f1b", .dp = 1,
	                   .recompute = "auto"};
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	ck_assert(!m->dp_auto && m->recompute_auto);
	m->cluster.mem = (uint64_t)64 << 30;
	scaleout so;
	ir_module *kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	ck_assert_int_eq(so.nrows, 3);
	ck_assert(so.rows[0].ok && !so.rows[0].fits && so.rows[0].recompute == IR_RECOMP_NONE);
	ck_assert(so.rows[1].chosen && so.rows[1].recompute == IR_RECOMP_SELECTIVE);
	ck_assert(so.rows[1].recompute_share > 0 && so.rows[1].recompute_share < 0.05);
	ck_assert(so.rows[2].recompute == IR_RECOMP_FULL && !so.rows[2].chosen);
	ck_assert(!so.rows[2].ok || so.rows[2].step > so.rows[1].step);
	ck_assert_int_eq(kept->plan.recompute, IR_RECOMP_SELECTIVE);
	for (int s = 0; s < kept->nstages; s++)
		ck_assert_int_eq(kept->stages[s].recompute, IR_RECOMP_SELECTIVE);
	ir_free(kept);
	scaleout_free(&so);
	/* With room for the stash, stashing is faster and kept. */
	m->cluster.mem = UINT64_MAX;
	kept = scaleout_search(m, &(pass_opts){0}, &so);
	ck_assert_ptr_nonnull(kept);
	check_rows(m, kept, &so);
	ck_assert_int_eq(kept->plan.recompute, IR_RECOMP_NONE);
	ir_free(kept);
	scaleout_free(&so);
	ir_free(m);
}
END_TEST

static Suite *scaleout_suite(void)
{
	Suite *s = suite_create("scaleout");
	TCase *tc = tcase_create("search");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_rows_are_fixed_dp_plans);
	tcase_add_test(tc, test_memory_decides);
	tcase_add_test(tc, test_fixed_sharding_and_no_candidate);
	tcase_add_test(tc, test_recompute_when_it_must);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(scaleout_suite());
}
