/* test_tune.c: Check suite for the joint tuner: never slower than the best
 * baseline that fits, every device within its memory, deterministic, the
 * user's given partition and placement kept, a clear error when nothing
 * fits, and programs that verify and run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "pass.h"
#include "simulate.h"
#include "testutil.h"
#include "tune.h"

static ir_module *load(const char *name, int devices, int mbs, uint64_t mem)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), name);
	fe_overrides ov = {.devices = devices, .microbatches = mbs, .schedule = "tuned"};
	ir_module *m = fe_load(path, &ov);
	ck_assert_msg(m != NULL, "%s does not load", path);
	if (mem)
		m->cluster.mem = mem;
	return m;
}

/* The default pipeline, as a tuned module runs it (no partition, place
 * or schedule before tune), within budget b (NULL: the default). */
static int plan_within(ir_module *m, tune_budget *b)
{
	pass_opts o = {.verify_each = true, .budget = b};
	return pass_run_default(m, &o);
}

static int plan(ir_module *m)
{
	return plan_within(m, NULL);
}

static const struct {
	const char *model;
	int devices, mbs;
} cases[] = {
	{"tiny-dense", 2, 4},      {"tiny-dense", 4, 8},       {"tiny-hybrid", 3, 6},
	{"tiny-hybrid", 4, 16},    {"nemotron-h-8b", 4, 8},    {"nemotron-h-8b", 8, 16},
	{"gemma-7b", 8, 8},        {"deepseek-v2-lite", 8, 16}, {"llama-3-8b", 4, 16},
};

/* Tuned is never slower than the best baseline that fits, and fits. */
START_TEST(test_never_worse_and_fits)
{
	ir_module *m = load(cases[_i].model, cases[_i].devices, cases[_i].mbs, 0);
	ck_assert_int_eq(plan(m), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	for (int d = 0; d < r->ndev; d++)
		ck_assert_msg(r->dev[d].peak_mem <= m->cluster.mem, "%s: D%d needs %llu > %llu",
		              cases[_i].model, d, (unsigned long long)r->dev[d].peak_mem,
		              (unsigned long long)m->cluster.mem);
	tune_row rows[TUNE_NBASELINES];
	tune_baselines(m, NULL, rows);
	double lb = tune_lower_bound(m);
	for (int i = 0; i < TUNE_NBASELINES; i++) {
		if (rows[i].ok && rows[i].fits)
			ck_assert_msg(r->makespan <= rows[i].makespan, "%s P=%d M=%d: tuned %.3f ms > %s %.3f ms",
			              cases[_i].model, cases[_i].devices, cases[_i].mbs, r->makespan * 1e-3,
			              rows[i].name, rows[i].makespan * 1e-3);
		/* The bound holds for any plan, those that do not fit too. */
		if (rows[i].ok)
			ck_assert_msg(rows[i].makespan >= lb * (1 - 1e-12), "%s P=%d M=%d: %s %.3f ms below the bound %.3f ms",
			              cases[_i].model, cases[_i].devices, cases[_i].mbs, rows[i].name,
			              rows[i].makespan * 1e-3, lb * 1e-3);
	}
	ck_assert(r->makespan >= lb * (1 - 1e-12));
	sim_free(r);
	ir_free(m);
}
END_TEST

/* With memory so tight that the baselines spill over, the tuned plan
 * still keeps every device within it (or says it cannot). */
START_TEST(test_tight_memory)
{
	ir_module *m = load("nemotron-h-8b", 8, 16, 0);
	ck_assert_int_eq(plan(m), 0);
	sim_result *r = sim_run(m);
	uint64_t peak = 0, low = UINT64_MAX;
	for (int d = 0; d < r->ndev; d++) {
		peak = r->dev[d].peak_mem > peak ? r->dev[d].peak_mem : peak;
		low = r->dev[d].resident < low ? r->dev[d].resident : low;
	}
	sim_free(r);
	ir_free(m);
	/* Squeeze the memory to 70 % of what the roomy plan used. */
	m = load("nemotron-h-8b", 8, 16, peak * 7 / 10);
	tu_capture();
	int rc = plan(m);
	const char *out = tu_captured();
	if (rc == 0) {
		r = sim_run(m);
		for (int d = 0; d < r->ndev; d++)
			ck_assert_uint_le(r->dev[d].peak_mem, m->cluster.mem);
		sim_free(r);
	} else {
		ck_assert_ptr_nonnull(strstr(out, "does not fit"));
	}
	tu_release();
	ir_free(m);
}
END_TEST

/* Recomputing, a B can need more than its F kept room for: the stage
 * keeps only its input from F to B, so F's memory check lets many F's in,
 * and their B's write W stashes (which recomputation keeps) far larger
 * than that input; the list scheduler runs a pending W first where a
 * recomputing B would not fit.  tiny-hybrid on 4 devices with 3600 KiB each
 * (the device executor's sizes, the backend being nccl; 3200 KiB before
 * Mamba-2's chunked SSD grew its scratch): a plan without recomputation
 * fits; before that check none recomputing did.  Now one fits, and it is
 * the faster: memory is what recomputation buys time with. */
START_TEST(test_recompute_tight_memory)
{
	char path[512];
	snprintf(path, sizeof path, "%s/tiny-hybrid.yaml", fe_models_dir());
	double step[2];
	for (int full = 0; full < 2; full++) {
		fe_overrides ov = {.devices = 4, .microbatches = 8, .schedule = "tuned",
		                   .recompute = full ? "full" : "none"};
		ir_module *m = fe_load(path, &ov);
		ck_assert_ptr_nonnull(m);
		m->cluster.mem = 3600u << 10;
		tu_capture();
		int rc = plan(m);
		ck_assert_msg(rc == 0, "--recompute %s: %s", ov.recompute, tu_captured());
		tu_release();
		ck_assert_int_eq(m->plan.recompute, full ? IR_RECOMP_FULL : IR_RECOMP_NONE);
		sim_result *r = sim_run(m);
		ck_assert_ptr_nonnull(r);
		for (int d = 0; d < r->ndev; d++)
			ck_assert_uint_le(r->dev[d].peak_mem, m->cluster.mem);
		step[full] = r->makespan;
		sim_free(r);
		ir_free(m);
	}
	ck_assert_msg(step[1] < step[0], "recomputing %.3f ms, not %.3f ms", step[1] * 1e-3, step[0] * 1e-3);
}
END_TEST

START_TEST(test_does_not_fit_names_the_device)
{
	ir_module *m = load("deepseek-v3", 4, 8, 0);
	tu_capture();
	ck_assert_int_eq(plan(m), -1);
	const char *out = tu_captured();
	ck_assert_msg(strstr(out, "error: the model does not fit: in the best plan found, device D") &&
	                  strstr(out, " (weights, gradients, optimizer state and activations) and has 80.0 GiB"),
	              "%s", out);
	tu_release();
	ir_free(m);
}
END_TEST

/* Whatever the budget: a budget too small to judge anything still says
 * that the model does not fit, not "no plan found". */
START_TEST(test_does_not_fit_whatever_the_budget)
{
	ir_module *m = load("deepseek-v3", 4, 8, 0);
	tune_budget b = tune_budget_start(1e-6);
	tu_capture();
	ck_assert_int_eq(plan_within(m, &b), -1);
	const char *out = tu_captured();
	ck_assert_msg(strstr(out, "error: the model does not fit: in the best plan found, device D"), "%s",
	              out);
	tu_release();
	ir_free(m);
}
END_TEST

/* A huge model with a tiny budget still gets a plan that verifies: the
 * balanced cuts (O(stages x layers log layers)) and every loop of the
 * search heed the deadline.  20,000 layers: an O(stages x layers^2) cut
 * alone would outlast the suite's timeout. */
START_TEST(test_huge_model_small_budget)
{
	char path[] = "/tmp/octopipe-tune-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "model: {name: huge, hidden: 64, vocab: 256, seq: 16, dtype: f32}\n"
	           "layers:\n  - kind: embedding\n  - repeat: 9999\n    layers:\n"
	           "      - {kind: attention, heads: 4, kv_heads: 2}\n"
	           "      - {kind: mlp, ffn: 128}\n  - kind: head\n"
	           "training: {microbatches: 8}\ncluster: h200\n");
	fclose(f);
	fe_overrides ov = {.devices = 4, .schedule = "tuned"};
	ir_module *m = fe_load(path, &ov);
	remove(path);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->nlayers, 20000);
	tune_budget b = tune_budget_start(0.05);
	ck_assert_int_eq(plan_within(m, &b), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	ck_assert_int_ge(m->nstages, 4);
	ir_free(m);
}
END_TEST

START_TEST(test_deterministic)
{
	char *text[2];
	for (int i = 0; i < 2; i++) {
		ir_module *m = load("tiny-hybrid", 4, 8, 0);
		ck_assert_int_eq(plan(m), 0);
		text[i] = ir_print_string(m);
		ir_free(m);
	}
	ck_assert_msg(strcmp(text[0], text[1]) == 0, "two runs, two plans");
	free(text[0]);
	free(text[1]);
}
END_TEST

/* An effort ends the search at the same plan each time, says so, and a
 * larger one (the default) finds a plan no slower; a deadline far off
 * never cuts it. */
START_TEST(test_effort)
{
	char *text[2];
	double step[2];
	for (int i = 0; i < 2; i++) {
		ir_module *m = load("nemotron-h-8b", 8, 16, 0);
		tune_budget b = tune_budget_start(1000);
		b.effort = 30;
		ck_assert_int_eq(plan_within(m, &b), 0);
		ck_assert(b.spent && !b.cut);
		text[i] = ir_print_string(m);
		sim_result *r = sim_run(m);
		step[i] = r->makespan;
		sim_free(r);
		ir_free(m);
	}
	ck_assert_msg(strcmp(text[0], text[1]) == 0, "one effort, two plans");
	free(text[0]);
	free(text[1]);
	ir_module *m = load("nemotron-h-8b", 8, 16, 0);
	tune_budget b = tune_budget_start(1000);
	ck_assert_int_eq(plan_within(m, &b), 0);
	/* The default effort: the anytime search may use all of it (spent) or
	 * end where its patience runs out; the seconds never cut it here. */
	ck_assert(!b.cut);
	sim_result *r = sim_run(m);
	ck_assert_double_le(r->makespan, step[0]);
	sim_free(r);
	ir_free(m);
}
END_TEST

/* A given partition and placement stay as the user wrote them; only the
 * order is tuned. */
START_TEST(test_keeps_given_plan)
{
	ir_module *m = load("tiny-hybrid", 2, 4, 0);
	static int64_t given[] = {3, 4, 5}, placement[] = {1, 0, 1};
	m->plan.partition = IR_PART_GIVEN;
	m->plan.given = given, m->plan.ngiven = 3;
	m->plan.placement = placement, m->plan.nplacement = 3;
	ck_assert_int_eq(plan(m), 0);
	ck_assert_int_eq(m->nstages, 3);
	for (int s = 0, first = 0; s < 3; s++) {
		ck_assert_int_eq(m->stages[s].first, first);
		ck_assert_int_eq(m->stages[s].last, first + (int)given[s] - 1);
		ck_assert_int_eq(m->stages[s].device, (int)placement[s]);
		first += (int)given[s];
	}
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	sim_free(r);
	ir_free(m);
}
END_TEST

/* The tuned pipeline skips partition, place and schedule: the plan is
 * the one the whole default list makes (their uniform plan was thrown
 * away), and their checks of the plan options still speak. */
START_TEST(test_tuned_pipeline_skips_the_plan_passes)
{
	ir_module *a = load("tiny-dense", 4, 8, 0), *b = load("tiny-dense", 4, 8, 0);
	ck_assert_int_eq(plan(a), 0);
	ck_assert_int_eq(pass_run(b, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	char *ta = ir_print_string(a), *tb = ir_print_string(b);
	ck_assert_str_eq(ta, tb);
	free(ta);
	free(tb);
	ir_free(a);
	ir_free(b);

	ir_module *m = load("tiny-dense", 2, 4, 0);
	m->plan.partition = IR_PART_GIVEN;
	m->plan.given = arena_calloc(m->arena, 2, sizeof *m->plan.given);
	m->plan.given[0] = m->plan.given[1] = 1;
	m->plan.ngiven = 2;
	tu_capture();
	ck_assert_int_eq(pass_run_default(m, NULL), -1); /* --verify-each would say it first */
	ck_assert_msg(strstr(tu_captured(), "error: given partition covers 2 of the"), "%s", tu_captured());
	tu_release();
	ir_free(m);
}
END_TEST

/* The tuned plan is IR text like any other: it prints, parses back equal
 * and verifies; re-running `tune` (then `comm`, `verify` and `memplan`) on
 * it gives the same plan, the same proof and the same memory plan. */
START_TEST(test_roundtrip_and_idempotent)
{
	/* Both searches end at their effort or patience, never at the default
	 * seconds, which a slow machine (the sanitizers under load) reaches
	 * at another point of one search than of the other. */
	tune_budget b1 = tune_budget_start(3600), b2 = tune_budget_start(3600);
	ir_module *m = load("nemotron-h-8b", 4, 8, 0);
	ck_assert_int_eq(plan_within(m, &b1), 0);
	ck_assert(!b1.cut);
	char *t1 = ir_print_string(m);
	arena *a = arena_new();
	ir_module *p = ir_parse(src_from_string(a, "t.opir", t1));
	ck_assert_ptr_nonnull(p);
	ck_assert(ir_equal(m, p));
	pass_id ids[] = {PASS_tune, PASS_comm, PASS_verify, PASS_memplan};
	pass_opts o = {.budget = &b2};
	ck_assert_int_eq(pass_run(p, ids, 4, &o), 0);
	ck_assert(!b2.cut);
	char *t2 = ir_print_string(p);
	ck_assert_msg(strcmp(t1, t2) == 0, "tune, comm and verify again give another plan");
	free(t1);
	free(t2);
	ir_free(p);
	arena_free(a);
	ir_free(m);
}
END_TEST

/* The bound's terms, by brute force over each layer, each number of
 * devices holding layers and each assignment of layers to devices (tune.h
 * says why each holds). */
START_TEST(test_lower_bound)
{
	ir_module *m = load("tiny-dense", 2, 4, 0);
	ck_assert_int_eq(plan(m), 0);
	int L = m->nlayers, P = 2;
	double M = 4, w0 = m->layers[0].cost.w, all = 0, fb = 0, path = 0, layer = 0;
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		all += c->f + c->b + c->w;
		fb += c->f + c->b;
		double below_f = 0, below_b = 0;
		for (int j = 0; j < l; j++)
			below_f += m->layers[j].cost.f, below_b += m->layers[j].cost.b;
		path = fmax(path, below_f + M * (c->f + c->b) + below_b + w0);
		layer = fmax(layer, below_f + M * (c->f + c->b + c->w));
	}
	double work = INFINITY;
	for (int k = 1; k <= P && k <= L; k++) {
		double idle_f = 0, idle_fb = 0;
		for (int i = 0; i < k; i++)
			for (int j = 0; j < i; j++) {
				idle_f += m->layers[j].cost.f;
				idle_fb += m->layers[j].cost.f + m->layers[j].cost.b;
			}
		idle_fb += k * w0;
		work = fmin(work, fmax((M * all + idle_f) / k, (M * fb + idle_fb) / k));
	}
	/* Whole layers with idle starts: every assignment of the layers to
	 * the P devices, each device's largest of its forward wait plus its
	 * work and its wait, F and B, and tail (tune.h); the bound is at most
	 * the least of those (its relaxation) and the terms above. */
	double split = INFINITY;
	for (int a = 0; a < 1 << L; a++) {
		double worst = 0;
		for (int d = 0; d < P; d++) {
			double all_d = 0, fb_d = 0, pf = 0, pb = 0;
			int low = -1;
			for (int l = 0; l < L; l++) {
				const ir_cost *c = &m->layers[l].cost;
				if ((a >> l & 1) != d)
					continue;
				if (low < 0) {
					low = l;
					for (int j = 0; j < l; j++)
						pf += m->layers[j].cost.f, pb += m->layers[j].cost.b;
				}
				all_d += M * (c->f + c->b + c->w);
				fb_d += M * (c->f + c->b);
			}
			if (low >= 0)
				worst = fmax(worst, fmax(pf + all_d, pf + fb_d + pb + w0));
		}
		split = fmin(split, worst);
	}
	double want = fmax(fmax(work, path), layer), lb = tune_lower_bound(m);
	ck_assert_msg(lb >= want * (1 - 1e-12) && lb <= fmax(want, split) * (1 + 1e-9),
	              "bound %.6f us: the terms give %.6f us, the best split %.6f us", lb, want, split);
	/* At least the old one's: the work over P, one micro-batch's path, the
	 * heaviest layer's M micro-batches. */
	double one = w0, big = 0;
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		one += c->f + c->b;
		big = fmax(big, c->f + c->b + c->w);
	}
	ck_assert(tune_lower_bound(m) >= fmax(fmax(M * all / P, one), M * big) * (1 - 1e-12));
	ir_free(m);
}
END_TEST

/* Layers are whole (tune.h, the work term): with only weight gradients
 * (no forward or backward, so no idle starts and no chains) the bound is
 * the best split of whole layers over P devices -- at most the least
 * largest load of any assignment of layers to devices, found here by
 * enumerating all of them -- and reaches it when the layers are equal
 * (4 of 10 on one of 3 devices). */
START_TEST(test_whole_layers)
{
	ir_module *m = load("tiny-dense", 3, 4, 0);
	ck_assert_int_eq(plan(m), 0);
	int L = m->nlayers;
	ck_assert_int_eq(L, 10); /* 3^10 assignments */
	uint64_t seed = 12345;
	for (int trial = 0; trial < 20; trial++) {
		double M = 4, w[10];
		for (int l = 0; l < L; l++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			w[l] = trial == 0 ? 1.0 : 1.0 + (double)(seed >> 40) / (double)(1 << 24) * 9;
			m->layers[l].cost = (ir_cost){.known = true, .w = w[l]};
		}
		double opt = INFINITY;
		for (int a = 0; a < 59049; a++) {
			double load[3] = {0};
			for (int l = 0, x = a; l < L; l++, x /= 3)
				load[x % 3] += M * w[l];
			opt = fmin(opt, fmax(load[0], fmax(load[1], load[2])));
		}
		double lb = tune_lower_bound(m);
		ck_assert_msg(lb <= opt * (1 + 1e-12), "trial %d: bound %g above the best split %g", trial, lb, opt);
		if (trial == 0)
			ck_assert_double_eq_tol(lb, 4 * M, 1e-9);
	}
	ir_free(m);
}
END_TEST

static Suite *tune_suite(void)
{
	Suite *s = suite_create("tune");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_never_worse_and_fits, 0, (int)(sizeof cases / sizeof *cases));
	tcase_add_test(tc, test_tight_memory);
	tcase_add_test(tc, test_recompute_tight_memory);
	tcase_add_test(tc, test_does_not_fit_names_the_device);
	tcase_add_test(tc, test_does_not_fit_whatever_the_budget);
	tcase_add_test(tc, test_huge_model_small_budget);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_effort);
	tcase_add_test(tc, test_keeps_given_plan);
	tcase_add_test(tc, test_roundtrip_and_idempotent);
	tcase_add_test(tc, test_tuned_pipeline_skips_the_plan_passes);
	tcase_add_test(tc, test_lower_bound);
	tcase_add_test(tc, test_whole_layers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(tune_suite());
}
