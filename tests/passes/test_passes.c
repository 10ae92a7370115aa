/* test_passes.c: Check suite for passes/ (partition, place, schedule and
 * the pass manager).  Properties, not texts: coverage and balance of the
 * partition, placement as given, and 1F1B programs that run to completion
 * under the pipeline's data dependences with 1F1B's in-flight bound; and
 * comm's data-parallel choices (the rank order, the overlapped all-gather). */
#include <math.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "copy.h"
#include "pass.h"
#include "simulate.h"
#include "testutil.h"

/* A module with `body` mlp layers between embedding and head, built
 * directly so that the test does not depend on the frontend. */
static ir_module *chain(int body, int devices, int mbs, int chunks)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"chain", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = mbs, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "c", .devices = devices, .per_node = devices,
	                          .mem = 1 << 30, .flops = 1e11, .membw = 1e10,
	                          .intra = {1e9, 1}, .inter = {1e9, 1}};
	m->plan.chunks = chunks;
	ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	for (int i = 0; i < body; i++) {
		ir_layer *l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
		l->attr[IR_ATTR_FFN] = 128;
	}
	ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	return m;
}

static int run_default(ir_module *m)
{
	pass_opts o = {.verify_each = true};
	return pass_run_default(m, &o);
}

static bool same_list(const pass_id *a, int na, const pass_id *b, int nb)
{
	return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* The pipeline a module runs: the default one, a tuned module's without
 * the plan passes; and what a module still lacks of it. */
START_TEST(test_pipeline_for_and_lacking)
{
	ir_module *m = chain(6, 2, 2, 1);
	m->plan.schedule = IR_SCHED_1F1B;
	pass_id ids[PASS_MAX_PIPELINE];
	int n = pass_pipeline_for(m, ids);
	ck_assert(same_list(ids, n, pass_default_pipeline, pass_default_pipeline_len));
	ck_assert(same_list(ids, pass_lacking(m, ids), pass_default_pipeline, pass_default_pipeline_len));
	/* Programs without costs: cost, then from comm on. */
	ck_assert_int_eq(pass_run(m, pass_plan_passes.ids, pass_plan_passes.n, NULL), 0);
	static const pass_id unlowered[] = {PASS_cost, PASS_comm, PASS_verify, PASS_memplan};
	ck_assert(same_list(ids, pass_lacking(m, ids), unlowered, 4));
	ck_assert_int_eq(pass_run(m, unlowered, 4, NULL), 0);
	/* Lowered: cost again (the target's stash sizes), verify, memplan. */
	static const pass_id lowered[] = {PASS_cost, PASS_verify, PASS_memplan};
	ck_assert(same_list(ids, pass_lacking(m, ids), lowered, 3));

	m->plan.schedule = IR_SCHED_TUNED;
	static const pass_id tuned[] = {PASS_cost, PASS_tune, PASS_comm, PASS_verify, PASS_memplan};
	ck_assert(same_list(ids, pass_pipeline_for(m, ids), tuned, 5));
	ir_free(m);
}
END_TEST

/* A pass writes its diagnostics to the sink of its options, not to the
 * default one: counted there, the first kept. */
START_TEST(test_diagnostics_to_the_sink)
{
	ir_module *m = chain(6, 2, 2, 1);
	diag_sink quiet = {0};
	tu_capture();
	ck_assert_int_eq(pass_run_one(m, PASS_place, &(pass_opts){.diag = &quiet}), -1);
	ck_assert_str_eq(tu_captured(), "");
	ck_assert_int_eq(diag_errors, 0);
	tu_release();
	ck_assert_int_eq(quiet.errors, 1);
	ck_assert_str_eq(quiet.first, "place: the module has no stages; run 'partition' first");
	ir_free(m);
}
END_TEST

START_TEST(test_partition_uniform_balanced)
{
	tu_capture();
	for (int body = 1; body <= 40; body++)
		for (int dev = 1; dev <= 8; dev++) {
			ir_module *m = chain(body, dev, 1, 1);
			pass_id p = PASS_partition;
			int rc = pass_run(m, &p, 1, NULL);
			if (body + 2 < dev) {
				ck_assert_int_eq(rc, -1);
				ck_assert_ptr_nonnull(strstr(tu_captured(), "cannot cut"));
				ir_free(m);
				continue;
			}
			ck_assert_int_eq(rc, 0);
			ck_assert_int_eq(ir_verify(m), 0);
			ck_assert_int_eq(m->nstages, dev);
			/* Body layers per stage differ by at most one when there are
			 * enough of them; the embedding is in S0, the head in the last. */
			if (body >= dev) {
				int lo = 1 << 30, hi = 0;
				for (int s = 0; s < dev; s++) {
					int n = m->stages[s].last - m->stages[s].first + 1;
					n -= (s == 0) + (s == dev - 1);
					lo = n < lo ? n : lo;
					hi = n > hi ? n : hi;
				}
				ck_assert_int_le(hi - lo, 1);
			}
			ck_assert_int_eq(m->stages[0].first, 0);
			ck_assert_int_eq(m->stages[dev - 1].last, body + 1);
			ir_free(m);
		}
	tu_release();
}
END_TEST

START_TEST(test_partition_given_and_place_given)
{
	ir_module *m = chain(6, 2, 2, 1);
	static int64_t given[] = {2, 3, 3}, placement[] = {1, 0, 1};
	m->plan.partition = IR_PART_GIVEN;
	m->plan.given = given, m->plan.ngiven = 3;
	m->plan.placement = placement, m->plan.nplacement = 3;
	pass_id ids[] = {PASS_partition, PASS_place};
	ck_assert_int_eq(pass_run(m, ids, 2, NULL), 0);
	ck_assert_int_eq(m->nstages, 3);
	ck_assert_int_eq(m->stages[1].first, 2);
	ck_assert_int_eq(m->stages[1].last, 4);
	for (int s = 0; s < 3; s++)
		ck_assert_int_eq(m->stages[s].device, placement[s]);
	/* 1F1B needs one stage per device: D1 holds S0 and S2. */
	tu_capture();
	pass_id sched = PASS_schedule;
	ck_assert_int_eq(pass_run(m, &sched, 1, NULL), -1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "one stage per device, but D1 holds S0 and S2"));
	tu_release();
	ir_free(m);
}
END_TEST

START_TEST(test_1f1b_runs_and_bounds_inflight)
{
	static const int grid[][3] = {{1, 1, 1}, {4, 2, 1}, {4, 4, 8}, {8, 4, 3}, {10, 4, 16},
	                              {30, 8, 32}, {7, 7, 7}, {12, 6, 2}};
	for (size_t g = 0; g < sizeof grid / sizeof *grid; g++) {
		int body = grid[g][0], P = grid[g][1], M = grid[g][2];
		ir_module *m = chain(body, P, M, 1);
		ck_assert_int_eq(run_default(m), 0);
		ck_assert_int_eq(ir_verify(m), 0);
		int inflight[64];
		tu_execute(m, inflight, NULL);
		for (int s = 0; s < P; s++) {
			int bound = P - s < M ? P - s : M;
			ck_assert_msg(inflight[s] == bound, "P=%d M=%d stage %d: %d in flight, 1F1B holds %d",
			              P, M, s, inflight[s], bound);
		}
		ir_free(m);
	}
}
END_TEST

START_TEST(test_1f1b_follows_any_bijective_placement)
{
	ir_module *m = chain(6, 4, 5, 1);
	static int64_t placement[] = {2, 0, 3, 1};
	m->plan.placement = placement, m->plan.nplacement = 4;
	ck_assert_int_eq(run_default(m), 0);
	int inflight[4];
	tu_execute(m, inflight, NULL);
	for (int s = 0; s < 4; s++) {
		ck_assert_int_eq(m->stages[s].device, placement[s]);
		const ir_device *dev = &m->devices[placement[s]];
		int first = 0;
		while (dev->ops[first].comm != IR_COMM_NONE)
			first++;
		ck_assert_int_eq(dev->ops[first].stage, s);
	}
	ir_free(m);
}
END_TEST

START_TEST(test_pass_list_parsing)
{
	pass_id ids[8];
	ck_assert_int_eq(pass_parse_list("partition,place,schedule", ids, 8, (ir_loc){0}), 3);
	ck_assert_int_eq(ids[2], PASS_schedule);
	tu_capture();
	ck_assert_int_eq(pass_parse_list("partition,plac", ids, 8, (ir_loc){0}), -1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "unknown pass 'plac'; did you mean 'place'?"));
	tu_release();
	tu_capture();
	ck_assert_int_eq(pass_parse_list("partition,,place", ids, 8, (ir_loc){0}), -1);
	tu_release();
}
END_TEST

START_TEST(test_dump_banners)
{
	ir_module *m = chain(4, 2, 2, 1);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	pass_opts o = {.print_after_all = true, .dump = f};
	o.print_before[PASS_place] = true;
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, &o), 0);
	fclose(f);
	const char *want[] = {"; *** IR Dump After partition ***\n", "; *** IR Dump Before place ***\n",
	                      "; *** IR Dump After place ***\n", "; *** IR Dump After schedule ***\n"};
	const char *p = buf;
	for (int i = 0; i < 4; i++) {
		const char *q = strstr(p, want[i]);
		ck_assert_msg(q != NULL, "missing or out of order: %s", want[i]);
		p = q + 1;
	}
	free(buf);
	ir_free(m);
}
END_TEST

START_TEST(test_tiny_models_plan)
{
	static const char *const models[] = {"tiny-dense", "tiny-hybrid"};
	for (int i = 0; i < 2; i++)
		for (int dev = 1; dev <= 4; dev++) {
			char path[512];
			snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), models[i]);
			fe_overrides ov = {.devices = dev};
			ir_module *m = fe_load(path, &ov);
			ck_assert_msg(m != NULL, "%s does not load", path);
			ck_assert_int_eq(run_default(m), 0);
			int *inflight = calloc((size_t)m->nstages, sizeof *inflight);
			tu_execute(m, inflight, NULL);
			free(inflight);
			ir_free(m);
		}
}
END_TEST

/* The step of chain(body, 4 devices, mb micro-batches) as 2 replicas of a
 * 2-device pipeline, a node per 2 devices and a slow link between nodes,
 * 1F1B, under rank order o; *chosen: the order the plan ends with. */
static double dp_step(int body, int ffn, int mbs, int mb, ir_rank_order o, ir_rank_order *chosen)
{
	ir_module *m = chain(body, 4, mb, 1);
	m->train.mbs = mbs;
	m->cluster.per_node = 2;
	m->cluster.inter = (ir_link){1e8, 20};
	m->plan.schedule = IR_SCHED_1F1B;
	m->plan.dp = 2;
	m->plan.bucket = 1 << 20;
	m->plan.rank_order = o;
	for (int l = 1; l <= body; l++)
		m->layers[l].attr[IR_ATTR_FFN] = ffn;
	ck_assert_int_eq(run_default(m), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	double t = r->makespan;
	*chosen = m->plan.rank_order;
	sim_free(r);
	ir_free(m);
	return t;
}

/* chain(6 layers, 4 devices, 8 micro-batches, 2 chunks) as 2 replicas of
 * an interleaved 2-device pipeline with the distributed optimizer, a
 * bucket per layer; overlap_param_gather as given. */
static ir_module *dp_interleaved(int overlap, int ffn)
{
	ir_module *m = chain(6, 4, 8, 2);
	m->plan.schedule = IR_SCHED_I1F1B;
	m->plan.dp = 2;
	m->plan.dist_opt = 1;
	m->plan.overlap_gather = overlap;
	m->plan.bucket = 1;
	for (int l = 1; l <= 6; l++)
		m->layers[l].attr[IR_ATTR_FFN] = ffn;
	ck_assert_int_eq(run_default(m), 0);
	return m;
}

/* overlap_param_gather: each bucket's wait goes just before its stage's
 * first F, carried (the run of carried waits there is the stage's
 * buckets, in order); the program ends with the all-gathers, in the order
 * of their stages' first F; none is waited for in its own step.  Kept, it
 * is because the steady step is faster; and a plan where it would not be
 * (1F1B: device 0's first stage has no fill) declines it. */
START_TEST(test_overlap_param_gather)
{
	ir_module *m = dp_interleaved(1, 4096), *off = dp_interleaved(0, 4096);
	ck_assert_int_eq(m->plan.overlap_gather, 1);
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		int first_f[16], nf = 0, ag = 0, last_ag_f = -1;
		for (int s = 0; s < 16; s++)
			first_f[s] = -1;
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			ck_assert(!(op->comm == IR_COMM_WAIT && op->coll == IR_COMM_ALLGATHER && !op->carried));
			if (op->comm == IR_COMM_NONE && op->kind == IR_OP_F && first_f[op->stage] < 0) {
				first_f[op->stage] = i, nf++;
				/* Right before it: the stage's buckets' carried waits, in order. */
				const ir_stage *st = &m->stages[op->stage];
				int nb = st->last - st->first + 1;
				for (int b = 0; b < nb; b++) {
					const ir_op *w = &dev->ops[i - nb + b];
					ck_assert(w->comm == IR_COMM_WAIT && w->carried && w->coll == IR_COMM_ALLGATHER &&
					          w->stage == op->stage && w->mb == b);
				}
			}
			if (op->comm == IR_COMM_ALLGATHER) {
				ag++;
				ck_assert_int_ge(first_f[op->stage], last_ag_f);
				last_ag_f = first_f[op->stage];
			} else {
				ck_assert_int_eq(ag, 0); /* the all-gathers end the program */
			}
		}
		ck_assert_int_eq(nf, 2);
	}
	sim_result *a = sim_run(m), *b = sim_run(off);
	ck_assert_int_gt(a->steps, 1);
	ck_assert_double_lt(a->makespan, b->makespan);
	sim_free(a);
	sim_free(b);
	ir_free(m);
	ir_free(off);

	m = chain(4, 4, 8, 1);
	m->plan.schedule = IR_SCHED_1F1B;
	m->plan.dp = 2;
	m->plan.dist_opt = 1;
	m->plan.overlap_gather = 1;
	m->plan.bucket = 1;
	ck_assert_int_eq(run_default(m), 0);
	ck_assert_int_eq(m->plan.overlap_gather, 0);
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			ck_assert(!m->devices[d].ops[i].carried);
	ir_free(m);
}
END_TEST

/* rank_order=auto (the default): `comm` keeps the order whose step
 * simulates faster -- pp-inner where the pipeline's transfers dominate,
 * dp-inner where the gradients' collectives do. */
START_TEST(test_rank_order_auto)
{
	static const struct {
		int body, ffn, mbs, mb;
		ir_rank_order want;
	} cases[] = {
		{2, 128, 64, 16, IR_RANKS_PP_INNER}, /* large activations, small layers */
		{4, 4096, 1, 2, IR_RANKS_DP_INNER},  /* large layers, small activations */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		ir_rank_order got, pp, dp;
		double t = dp_step(cases[i].body, cases[i].ffn, cases[i].mbs, cases[i].mb, IR_RANKS_AUTO, &got);
		double tp = dp_step(cases[i].body, cases[i].ffn, cases[i].mbs, cases[i].mb, IR_RANKS_PP_INNER, &pp);
		double td = dp_step(cases[i].body, cases[i].ffn, cases[i].mbs, cases[i].mb, IR_RANKS_DP_INNER, &dp);
		ck_assert_int_eq(pp, IR_RANKS_PP_INNER);
		ck_assert_int_eq(dp, IR_RANKS_DP_INNER);
		ck_assert_msg(got == cases[i].want, "case %zu: auto chose %s (pp-inner %g us, dp-inner %g us)",
		              i, ir_rank_order_names[got], tp, td);
		ck_assert(t == (tp < td ? tp : td) && (tp < td) == (got == IR_RANKS_PP_INNER));
	}
}
END_TEST

/* m's compute programs lowered on a copy with comm's choices fixed: the
 * simulated step. */
static double fixed_step(const ir_module *m, ir_rank_order o, bool late)
{
	ir_module *c = ir_copy_header(m);
	ir_copy_plan(c, m, true);
	arena *a = arena_new();
	pass_ctx cx = {.diag = &diag_default, .scratch = a};
	ck_assert_int_eq(pass_comm_fixed(c, &cx, o, late), 0);
	arena_free(a);
	sim_result *r = sim_run(c);
	ck_assert_ptr_nonnull(r);
	double t = r->makespan;
	sim_free(r);
	ir_free(c);
	return t;
}

/* Where the reductions go: `comm` keeps the fastest of posting them as
 * each stage closes and after the device's last transfer, under each rank
 * order; with two stages a device (interleaved 1F1B) and slow collectives,
 * posting early holds the transfers the other stage still needs on the
 * communication stream, and late wins. */
START_TEST(test_reduction_placement)
{
	ir_module *m = chain(8, 4, 16, 2);
	m->plan.schedule = IR_SCHED_I1F1B;
	m->plan.dp = 2;
	m->plan.bucket = 1 << 20;
	m->cluster.devices = 8;
	m->cluster.per_node = 4;
	m->cluster.inter = (ir_link){1e8, 20};
	for (int l = 1; l <= 8; l++)
		m->layers[l].attr[IR_ATTR_FFN] = 4096;
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	ck_assert_int_eq(pass_run(m, pass_plan_passes.ids, pass_plan_passes.n, NULL), 0);
	double t[2][2];
	for (int o = 0; o < 2; o++)
		for (int late = 0; late < 2; late++)
			t[o][late] = fixed_step(m, o ? IR_RANKS_DP_INNER : IR_RANKS_PP_INNER, late);
	ck_assert_int_eq(pass_run_one(m, PASS_comm, NULL), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	int o = m->plan.rank_order == IR_RANKS_DP_INNER;
	double best = fmin(fmin(t[0][0], t[0][1]), fmin(t[1][0], t[1][1]));
	ck_assert_msg(r->makespan == best, "comm kept %g us; early/late: pp-inner %g/%g, dp-inner %g/%g",
	              r->makespan, t[0][0], t[0][1], t[1][0], t[1][1]);
	ck_assert_msg(t[o][1] < t[o][0], "late %g us, early %g us", t[o][1], t[o][0]);
	sim_free(r);
	ir_free(m);
}
END_TEST

/* comm is idempotent on lowered data-parallel programs: run again, it adds
 * no second set of collectives (it once did: the point-to-point lowering
 * stopped, the data-parallel one ran again). */
START_TEST(test_comm_idempotent_with_collectives)
{
	ir_module *m = chain(4, 4, 4, 1);
	m->plan.schedule = IR_SCHED_1F1B;
	m->plan.dp = 2;
	m->plan.dist_opt = 1;
	m->plan.bucket = 1 << 20;
	ck_assert_int_eq(run_default(m), 0);
	ir_module *again = ir_copy_header(m);
	ir_copy_plan(again, m, false);
	ck_assert_int_eq(pass_run_one(again, PASS_comm, NULL), 0);
	ck_assert_int_eq(m->ndevices, again->ndevices);
	for (int d = 0; d < m->ndevices; d++)
		ck_assert_int_eq(again->devices[d].nops, m->devices[d].nops);
	ck_assert_int_eq(ir_verify(again), 0);
	ir_free(again);
	ir_free(m);
}
END_TEST

/* Tied embeddings (docs/ir.md, "Tied embeddings"): with the embedding and
 * the head on two devices, comm gives each one tie right after its stage's
 * last W and the wait at its program's end, and nothing else changes: the
 * same programs without them are the untied model's, and the simulated
 * memory of every device is the untied model's (the sum is in place),
 * with and without a memory plan.  On one device (V-shape) there is none.
 * comm is idempotent on them. */
START_TEST(test_tie_ops)
{
	for (int zbv = 0; zbv < 2; zbv++) {
		ir_module *mod[2];
		for (int tie = 0; tie < 2; tie++) {
			ir_module *m = mod[tie] = chain(6, 4, 8, zbv ? 2 : 1);
			m->model.tie = tie;
			m->plan.schedule = zbv ? IR_SCHED_ZBV : IR_SCHED_1F1B;
			ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
			ck_assert_int_eq(pass_run(m, pass_plan_passes.ids, pass_plan_passes.n, NULL), 0);
			ck_assert_int_eq(pass_run_one(m, PASS_comm, NULL), 0);
			ck_assert_int_eq(ir_verify(m), 0);
		}
		ir_module *t = mod[1], *u = mod[0];
		ck_assert_int_eq(ir_tie_apart(t), !zbv);
		for (int d = 0; d < t->ndevices; d++) {
			const ir_device *a = &t->devices[d], *b = &u->devices[d];
			int ties = 0, j = 0, last_w = -1;
			for (int i = 0; i < a->nops; i++) {
				if (a->ops[i].comm == IR_COMM_NONE && a->ops[i].kind == IR_OP_W)
					last_w = i;
				if (ir_is_tie_op(&a->ops[i])) {
					ties++;
					if (a->ops[i].comm == IR_COMM_TIE)
						ck_assert_int_eq(a->ops[i].first, d == 0 ? 0 : t->nlayers - 1);
					else
						ck_assert_int_eq(i, a->nops - 1); /* the wait ends the program */
					continue;
				}
				ck_assert_int_lt(j, b->nops);
				ck_assert_mem_eq(&a->ops[i], &b->ops[j], sizeof a->ops[i]);
				j++;
			}
			ck_assert_int_eq(j, b->nops);
			bool holds = ir_tie_apart(t) && (d == ir_tie_device(t, 0) || d == ir_tie_device(t, 1));
			ck_assert_int_eq(ties, holds ? 2 : 0);
			if (holds) /* the post right after the last W (and the gradient it sends) */
				ck_assert_int_le(last_w, a->nops - 3);
		}
		for (int plan = 0; plan < 2; plan++) {
			sim_result *rt = sim_run(t), *ru = sim_run(u);
			ck_assert_ptr_nonnull(rt);
			ck_assert_ptr_nonnull(ru);
			for (int d = 0; d < t->ndevices; d++)
				ck_assert_uint_eq(rt->dev[d].peak_mem, ru->dev[d].peak_mem);
			ck_assert(rt->makespan >= ru->makespan);
			sim_free(rt);
			sim_free(ru);
			if (!plan) {
				ck_assert_int_eq(pass_run_one(t, PASS_verify, NULL), 0);
				ck_assert_int_eq(pass_run_one(t, PASS_memplan, NULL), 0);
				ck_assert_int_eq(pass_run_one(u, PASS_verify, NULL), 0);
				ck_assert_int_eq(pass_run_one(u, PASS_memplan, NULL), 0);
			}
		}
		ir_module *again = ir_copy_header(t);
		ir_copy_plan(again, t, false);
		ck_assert_int_eq(pass_run_one(again, PASS_comm, NULL), 0);
		for (int d = 0; d < t->ndevices; d++)
			ck_assert_int_eq(again->devices[d].nops, t->devices[d].nops);
		ir_free(again);
		ir_free(t);
		ir_free(u);
	}
}
END_TEST

/* Every zoo model, planned (1F1B: some do not fit 4 devices' memory, which
 * the tuner would refuse), survives print and parse field for field. */
START_TEST(test_zoo_roundtrip)
{
	char pat[512];
	snprintf(pat, sizeof pat, "%s/*.yaml", fe_models_dir());
	glob_t g;
	ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
	ck_assert_uint_ge(g.gl_pathc, 12);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		fe_overrides ov = {.devices = 4, .schedule = "1f1b"};
		ir_module *m = fe_load(g.gl_pathv[i], &ov);
		ck_assert_msg(m != NULL, "%s does not load", g.gl_pathv[i]);
		ck_assert_int_eq(run_default(m), 0);
		char *text = ir_print_string(m);
		arena *a = arena_new();
		ir_module *p = ir_parse(src_from_string(a, g.gl_pathv[i], text));
		ck_assert_msg(p && ir_equal(m, p), "%s: parse(print(m)) != m", g.gl_pathv[i]);
		free(text);
		ir_free(p);
		arena_free(a);
		ir_free(m);
	}
	globfree(&g);
}
END_TEST

static Suite *passes_suite(void)
{
	Suite *s = suite_create("passes");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_partition_uniform_balanced);
	tcase_add_test(tc, test_partition_given_and_place_given);
	tcase_add_test(tc, test_1f1b_runs_and_bounds_inflight);
	tcase_add_test(tc, test_1f1b_follows_any_bijective_placement);
	tcase_add_test(tc, test_pass_list_parsing);
	tcase_add_test(tc, test_dump_banners);
	tcase_add_test(tc, test_tiny_models_plan);
	tcase_add_test(tc, test_rank_order_auto);
	tcase_add_test(tc, test_reduction_placement);
	tcase_add_test(tc, test_comm_idempotent_with_collectives);
	tcase_add_test(tc, test_tie_ops);
	tcase_add_test(tc, test_zoo_roundtrip);
	tcase_add_test(tc, test_overlap_param_gather);
	tcase_add_test(tc, test_pipeline_for_and_lacking);
	tcase_add_test(tc, test_diagnostics_to_the_sink);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(passes_suite());
}
