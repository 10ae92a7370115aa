/* test_schedules.c: Check suite for the baseline schedules (gpipe, 1f1b,
 * i1f1b, zbh1, zbh2, zbv), the V placement and the balanced partition.
 *
 * Properties, not texts (the golden files hold a few orders as text):
 * every schedule over a grid of devices, micro-batches and chunks verifies
 * and runs to the end under the pipeline's data dependences with its
 * in-flight bound; with uniform integer costs on the `ideal` cluster the
 * simulator's makespan equals each schedule's closed form exactly
 * (docs/schedules.md derives them); every constraint is a diagnostic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cg_impl.h" /* cg_lower_rank: the lowering, below codegen's entry */
#include "frontend.h"
#include "pass.h"
#include "simulate.h"
#include "testutil.h"
#include "tune.h"

static const char *sname(ir_schedule s)
{
	return ir_schedule_names[s];
}

/* `body` mlp layers between an embedding and a head, each body layer
 * costing f, b, w (the embedding and the head cost nothing); no latency,
 * infinite bandwidth.  With body = the stage count, every stage costs
 * exactly f, b, w. */
static ir_module *model(int body, int devices, int mbs, ir_schedule sched, int chunks, double f,
                        double b, double w)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"u", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = mbs, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "ideal", .devices = devices, .per_node = devices,
	                          .mem = 1 << 30, .flops = 1e12, .membw = 1e10,
	                          .intra = {INFINITY, 0}, .inter = {INFINITY, 0}};
	m->plan.schedule = sched;
	m->plan.chunks = chunks;
	ir_layer *l = ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	for (int i = 0; i < body; i++) {
		l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
		l->attr[IR_ATTR_FFN] = 128;
		l->cost = (ir_cost){.known = true, .f = f, .b = b, .w = w, .flops = 1e9, .act = 1000,
		                    .wstash = 0, .resident = 1 << 20};
	}
	l = ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	return m;
}

static int plan(ir_module *m)
{
	pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule};
	pass_opts o = {.verify_each = true};
	return pass_run(m, ids, 3, &o);
}

/* Stages the plan cuts for a schedule on p devices with `chunks`. */
static int stages_of(ir_schedule s, int p, int chunks)
{
	if (s == IR_SCHED_I1F1B && chunks == 1)
		chunks = 2; /* chunks=1, the default, means 2 */
	return s == IR_SCHED_ZBV ? 2 * p : p * chunks;
}

/* A planned module with one body layer per stage: every stage costs
 * exactly f, b, w. */
static ir_module *planned(ir_schedule s, int p, int mbs, int chunks, double f, double b, double w)
{
	ir_module *m = model(stages_of(s, p, chunks), p, mbs, s, chunks, f, b, w);
	ck_assert_msg(plan(m) == 0, "%s p=%d m=%d chunks=%d does not plan", sname(s), p, mbs, chunks);
	return m;
}

static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* The in-flight bound of each schedule on device d (at pipeline position
 * d: the default placements put stage d, or chunk 0 of rank d, there). */
static int inflight_bound(ir_schedule s, int p, int M, int V, int d)
{
	switch (s) {
	case IR_SCHED_GPIPE:
		return M * V;
	case IR_SCHED_1F1B:
	case IR_SCHED_ZBH1:
		return imin(p - d, M);
	case IR_SCHED_I1F1B:
		return V == 1 ? imin(p - d, M) : imin(2 * (p - d - 1) + (V - 1) * p + 1, M * V);
	case IR_SCHED_ZBH2:
		return imin(2 * (p - d) - 1, M);
	case IR_SCHED_ZBV:
		return imin(imin(2 * p, 2 * M), M + d + 1);
	default:
		ck_abort_msg("no bound for schedule %d", (int)s);
		return 0;
	}
}

static const int Ps[] = {1, 2, 3, 4, 8};

/* 1. Every schedule, p in {1,2,3,4,8}, m in {1, p, 2p, 3p+1} (multiples of
 * p only for i1f1b), chunks in {1, 2, 3} where the schedule takes them:
 * verifies, runs to the end, holds its in-flight bound, and simulates. */
START_TEST(test_grid_valid)
{
	for (int s = 0; s < IR_SCHED_TUNED; s++) /* the baselines; tuned: test_tune.c */
		for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++) {
			int p = Ps[pi];
			int ms[] = {1, p, 2 * p, 3 * p + 1};
			for (int mi = 0; mi < 4; mi++)
				for (int V = 1; V <= 3; V++) {
					int M = ms[mi];
					bool chunked = s == IR_SCHED_GPIPE || s == IR_SCHED_I1F1B;
					if (V > 1 && !chunked)
						continue;
					if (s == IR_SCHED_I1F1B && M % p)
						continue;
					ir_module *m = planned((ir_schedule)s, p, M, V, 2, 3, 1);
					ck_assert_int_eq(ir_verify(m), 0);
					int peak[8];
					tu_execute(m, NULL, peak);
					for (int d = 0; d < p; d++) {
						int want = inflight_bound((ir_schedule)s, p, M,
						                          s == IR_SCHED_I1F1B && V == 1 ? 2 : V, d);
						ck_assert_msg(peak[d] == want,
						              "%s p=%d m=%d V=%d: D%d holds %d in flight, want %d",
						              sname((ir_schedule)s), p, M, V, d, peak[d], want);
					}
					sim_result *r = sim_run(m);
					ck_assert_ptr_nonnull(r);
					for (int d = 0; d < p; d++)
						ck_assert_int_eq(r->dev[d].peak_inflight, peak[d]);
					sim_free(r);
					ir_free(m);
				}
		}
}
END_TEST

/* The greedy schedules over a wider range: they never stall, hold their
 * in-flight counts, and meet their closed forms at unit costs. */
START_TEST(test_greedy_wide)
{
	for (int p = 1; p <= 32; p += p < 12 ? 1 : 5)
		for (int M = 1; M <= 6 * p + 1; M += p < 12 ? 1 : 7) {
			ir_schedule ss[] = {IR_SCHED_ZBH2, IR_SCHED_ZBV};
			for (int k = 0; k < 2; k++) {
				ir_module *m = planned(ss[k], p, M, 1, 1, 1, 1);
				int peak[32];
				tu_execute(m, NULL, peak);
				for (int d = 0; d < p; d++)
					ck_assert_msg(peak[d] == inflight_bound(ss[k], p, M, 1, d),
					              "%s p=%d m=%d: D%d holds %d in flight, want %d", sname(ss[k]),
					              p, M, d, peak[d], inflight_bound(ss[k], p, M, 1, d));
				if (M >= p) {
					sim_result *r = sim_run(m);
					double want = (k ? 6 : 3) * M + p - 1;
					ck_assert_msg(r->makespan == want, "%s p=%d m=%d: makespan %g, want %g",
					              sname(ss[k]), p, M, r->makespan, want);
					sim_free(r);
				}
				ir_free(m);
			}
		}
}
END_TEST

/* Any placement and any cut of the stages, for every schedule: a
 * diagnostic, or programs that verify and run to the end. */
START_TEST(test_any_placement)
{
	unsigned seed = 7;
	int planned_ok = 0;
	for (int trial = 0; trial < 3000; trial++) {
		seed = seed * 1103515245u + 12345u;
		int p = 1 + (int)(seed >> 16) % 4, M = 1 + (int)(seed >> 8) % 7;
		ir_schedule sc = (ir_schedule)((seed >> 4) % IR_SCHED_TUNED);
		int nst = 1 + (int)(seed >> 20) % (2 * p + 1);
		ir_module *m = model(12, p, M, sc, 1, 1, 1, 1);
		int64_t *given = arena_alloc(m->arena, (size_t)nst * sizeof *given);
		int64_t *place = arena_alloc(m->arena, (size_t)nst * sizeof *place);
		int left = m->nlayers;
		for (int s = 0; s < nst; s++) {
			seed = seed * 1103515245u + 12345u;
			given[s] = s + 1 < nst ? 1 + (int)(seed >> 16) % 2 : left;
			left -= (int)given[s];
			place[s] = (int)(seed >> 8) % p;
		}
		m->plan.partition = IR_PART_GIVEN, m->plan.given = given, m->plan.ngiven = nst;
		if (seed & 1)
			m->plan.placement = place, m->plan.nplacement = nst;
		tu_capture();
		pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule};
		int rc = pass_run(m, ids, 3, NULL);
		if (rc == 0) {
			ck_assert_int_eq(ir_verify(m), 0);
			int peak[4];
			tu_execute(m, NULL, peak);
			planned_ok++;
		} else {
			ck_assert_int_gt(diag_errors, 0);
		}
		tu_release();
		ir_free(m);
	}
	ck_assert_int_gt(planned_ok, 300);
}
END_TEST

static double makespan(ir_module *m, int *peak0)
{
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	double t = r->makespan;
	if (peak0)
		*peak0 = r->dev[0].peak_inflight;
	sim_free(r);
	return t;
}

#define EXACT(got, want, ...)                                                  \
	ck_assert_msg((got) == (want), __VA_ARGS__)

/* 2. 1f1b: (m+p-1)(F+B+W), the backward in one piece; gpipe, whose W's
 * wait for the stage's last B: (m+p-1)(F+B) + mW, the backward split;
 * peak in flight m (gpipe) and min(p, m) (1f1b) on device 0. */
START_TEST(test_exact_gpipe_1f1b)
{
	static const double c[][3] = {{3, 5, 2}, {1, 1, 1}, {4, 2, 0}};
	for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++)
		for (int ci = 0; ci < 3; ci++) {
			int p = Ps[pi];
			double F = c[ci][0], B = c[ci][1], W = c[ci][2];
			int ms[] = {1, p, 2 * p, 3 * p + 1};
			for (int mi = 0; mi < 4; mi++) {
				int M = ms[mi], peak;
				ir_schedule ss[] = {IR_SCHED_GPIPE, IR_SCHED_1F1B};
				for (int k = 0; k < 2; k++) {
					ir_module *m = planned(ss[k], p, M, 1, F, B, W);
					double got = makespan(m, &peak),
					       want = k == 0 ? (M + p - 1) * (F + B) + M * W : (M + p - 1) * (F + B + W);
					EXACT(got, want, "%s p=%d m=%d F,B,W=%g,%g,%g: makespan %g, want %g",
					      sname(ss[k]), p, M, F, B, W, got, want);
					ck_assert_int_eq(peak, k == 0 ? M : imin(p, M));
					ir_free(m);
				}
			}
		}
}
END_TEST

/* i1f1b with chunks costing f, b, w (a device's V chunks make a stage of
 * 1F1B: F = V f): m(F+B+W) + (p-1)(F+B+W)/V, for m a multiple of p. */
START_TEST(test_exact_i1f1b)
{
	static const double c[][3] = {{3, 5, 2}, {1, 1, 1}, {2, 4, 0}};
	for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++)
		for (int V = 2; V <= 3; V++)
			for (int ci = 0; ci < 3; ci++)
				for (int k = 1; k <= 3; k++) {
					int p = Ps[pi], M = k * p, peak;
					double f = c[ci][0], b = c[ci][1], w = c[ci][2];
					ir_module *m = planned(IR_SCHED_I1F1B, p, M, V, f, b, w);
					double got = makespan(m, &peak);
					double want = M * V * (f + b + w) + (p - 1) * (f + b + w);
					EXACT(got, want, "i1f1b p=%d V=%d m=%d f,b,w=%g,%g,%g: makespan %g, want %g",
					      p, V, M, f, b, w, got, want);
					ck_assert_int_eq(peak, imin(2 * (p - 1) + (V - 1) * p + 1, M * V));
					ir_free(m);
				}
}
END_TEST

/* zbh1: m(F+B+W) + (p-1)(F+B-W) when m >= p and W <= min(F, B); in
 * flight as 1F1B. */
START_TEST(test_exact_zbh1)
{
	static const double c[][3] = {{3, 5, 2}, {2, 2, 2}, {5, 3, 3}, {4, 6, 1}, {3, 3, 0}};
	for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++)
		for (int ci = 0; ci < 5; ci++) {
			int p = Ps[pi];
			int ms[] = {p, p + 1, 2 * p, 3 * p + 1};
			for (int mi = 0; mi < 4; mi++) {
				int M = ms[mi], peak;
				double F = c[ci][0], B = c[ci][1], W = c[ci][2];
				ir_module *m = planned(IR_SCHED_ZBH1, p, M, 1, F, B, W);
				double got = makespan(m, &peak);
				double want = M * (F + B + W) + (p - 1) * (F + B - W);
				EXACT(got, want, "zbh1 p=%d m=%d F,B,W=%g,%g,%g: makespan %g, want %g", p, M,
				      F, B, W, got, want);
				ck_assert_int_eq(peak, imin(p, M));
				ir_free(m);
			}
		}
}
END_TEST

/* Device d starts at d c (its first input) and never waits after. */
static void expect_no_wait(const ir_module *m, const sim_result *r, int d, double c)
{
	int n = m->devices[d].nops;
	ck_assert_msg(r->dev[d].start[0] == d * c && r->dev[d].end[n - 1] == d * c + n * c,
	              "%s p=%d m=%d: D%d runs from %g to %g", sname(m->plan.schedule), r->ndev,
	              (int)m->train.microbatches, d, r->dev[d].start[0], r->dev[d].end[n - 1]);
}

/* zbh2 with F = B = W = c: m(F+B+W) + (p-1)F, the first forward's fill and
 * nothing else, for m >= p (a parallelogram from m >= 2p-1 on); min(2p-1, m)
 * between F and B on device 0.
 * zbv with chunk costs F = B = W = c: m(2F+2B+2W) + (p-1)F, again the
 * fill alone; min(2p, 2m, m+d+1) (stage, micro-batch) pairs, each half a
 * 1F1B stage, in flight on device d: 2p, 1F1B's peak, at the V's turn,
 * which never waits once its first input is there. */
START_TEST(test_exact_zbh2_zbv)
{
	for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++)
		for (double c = 1; c <= 3; c += 2) {
			int p = Ps[pi];
			int ms[] = {p, p + 1, 2 * p, 3 * p + 1, 5 * p};
			for (int mi = 0; mi < 5; mi++) {
				int M = ms[mi];
				ir_module *m = planned(IR_SCHED_ZBH2, p, M, 1, c, c, c);
				sim_result *r = sim_run(m);
				ck_assert_ptr_nonnull(r);
				double want = M * 3 * c + (p - 1) * c;
				EXACT(r->makespan, want, "zbh2 p=%d m=%d c=%g: makespan %g, want %g", p, M, c,
				      r->makespan, want);
				ck_assert_int_eq(r->dev[0].peak_inflight, imin(2 * p - 1, M));
				for (int d = 0; d < p && M >= 2 * p - 1; d++) /* a parallelogram */
					expect_no_wait(m, r, d, c);
				sim_free(r);
				ir_free(m);

				m = planned(IR_SCHED_ZBV, p, M, 1, c, c, c);
				r = sim_run(m);
				ck_assert_ptr_nonnull(r);
				want = M * 6 * c + (p - 1) * c;
				EXACT(r->makespan, want, "zbv p=%d m=%d c=%g: makespan %g, want %g", p, M, c,
				      r->makespan, want);
				for (int d = 0; d < p; d++)
					ck_assert_int_eq(r->dev[d].peak_inflight, inflight_bound(IR_SCHED_ZBV, p, M, 1, d));
				ck_assert_int_eq(r->dev[p - 1].peak_inflight, 2 * p);
				expect_no_wait(m, r, p - 1, c); /* the turn of the V */
				sim_free(r);
				ir_free(m);
			}
		}
}
END_TEST

/* Memory in bytes (act from F to B, a W stash as large from B to W, so that
 * the bytes count the pairs held between F and W; during B both the stash
 * and the W stash being written are held): the same 2p-layer model under
 * 1f1b (two layers a stage), zbh1 and zbv (one layer a stage).  ZB-H1 peaks
 * at exactly 1F1B's first-device peak on every device, ZB-V at the same
 * pairs with the smaller B transient of its one-layer stages; ZB-H2 holds
 * 2p-1 micro-batches on every device. */
START_TEST(test_memory_as_1f1b)
{
	for (size_t pi = 0; pi < sizeof Ps / sizeof *Ps; pi++) {
		int p = Ps[pi];
		for (int M = p; M <= 3 * p; M += p) {
			ir_schedule ss[] = {IR_SCHED_1F1B, IR_SCHED_ZBH1, IR_SCHED_ZBV, IR_SCHED_ZBH2};
			sim_result *r[4];
			ir_module *m[4];
			for (int k = 0; k < 4; k++) {
				int body = ss[k] == IR_SCHED_ZBH2 ? p : 2 * p;
				m[k] = model(body, p, M, ss[k], 1, 1, 1, 1);
				for (int l = 0; l < m[k]->nlayers; l++)
					m[k]->layers[l].cost.wstash = m[k]->layers[l].cost.act;
				ck_assert_int_eq(plan(m[k]), 0);
				r[k] = sim_run(m[k]);
				ck_assert_ptr_nonnull(r[k]);
			}
			/* p micro-batches of 2 layers, and B's transient W stash */
			uint64_t base = r[0]->dev[0].peak_act;
			ck_assert_uint_eq(base, (uint64_t)p * 2000 + 2000);
			for (int d = 0; d < p; d++) {
				ck_assert_uint_eq(r[1]->dev[d].peak_act, base);
				ck_assert_uint_eq(r[2]->dev[d].peak_act, base - 1000);
				ck_assert_uint_eq(r[3]->dev[d].peak_act, (uint64_t)imin(2 * p - 1, M) * 1000 + 1000);
			}
			for (int k = 0; k < 4; k++) {
				sim_free(r[k]);
				ir_free(m[k]);
			}
		}
	}
}
END_TEST

/* Orders spelled out on small cases. */
static void expect_program(const ir_module *m, int d, const char *want)
{
	char got[4096] = "";
	size_t n = 0;
	for (int i = 0; i < m->devices[d].nops && n + 32 < sizeof got; i++) {
		const ir_op *op = &m->devices[d].ops[i];
		n += (size_t)snprintf(got + n, sizeof got - n, "%s%s%d.%d", i ? " " : "",
		                      ir_op_names[op->kind], op->stage, op->mb);
	}
	ck_assert_str_eq(got, want);
}

START_TEST(test_orders)
{
	/* GPipe: forwards in micro-batch order, backwards reversed, a stage's
	 * W's after its last B in micro-batch order. */
	ir_module *m = planned(IR_SCHED_GPIPE, 2, 3, 1, 1, 1, 1);
	expect_program(m, 1, "F1.0 F1.1 F1.2 B1.2 B1.1 B1.0 W1.0 W1.1 W1.2");
	ir_free(m);
	/* GPipe with two stages a device: each stage in turn. */
	m = planned(IR_SCHED_GPIPE, 2, 2, 2, 1, 1, 1);
	expect_program(m, 0, "F0.0 F0.1 F2.0 F2.1 B2.1 B2.0 W2.0 W2.1 B0.1 B0.0 W0.0 W0.1");
	ir_free(m);
	/* Megatron's interleaving, p=2, V=2, m=4: D0 warms up with
	 * (2-0-1)*2 + (2-1)*2 = 4 forwards: chunk 0 of m0, m1, chunk 1 of m0, m1. */
	m = planned(IR_SCHED_I1F1B, 2, 4, 2, 1, 1, 1);
	expect_program(m, 0, "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 W2.0 F0.3 B2.1 W2.1 F2.2 B0.0 W0.0 "
	                     "F2.3 B0.1 W0.1 B2.2 W2.2 B2.3 W2.3 B0.2 W0.2 B0.3 W0.3");
	expect_program(m, 1, "F1.0 F1.1 F3.0 B3.0 W3.0 F3.1 B3.1 W3.1 F1.2 B1.0 W1.0 F1.3 B1.1 "
	                     "W1.1 F3.2 B3.2 W3.2 F3.3 B3.3 W3.3 B1.2 W1.2 B1.3 W1.3");
	ir_free(m);
	/* ZB-H1, p=3: position s keeps s W's back. */
	m = planned(IR_SCHED_ZBH1, 3, 4, 1, 1, 1, 1);
	expect_program(m, 0, "F0.0 F0.1 F0.2 B0.0 W0.0 F0.3 B0.1 W0.1 B0.2 W0.2 B0.3 W0.3");
	expect_program(m, 2, "F2.0 B2.0 F2.1 B2.1 F2.2 B2.2 W2.0 F2.3 B2.3 W2.1 W2.2 W2.3");
	ir_free(m);
	/* ZB-H2, p=4, m=8: 2p-1 = 7 warm-up forwards on D0, 7 micro-batches
	 * between F and W on every device; the last one holds its W's back. */
	m = planned(IR_SCHED_ZBH2, 4, 8, 1, 1, 1, 1);
	expect_program(m, 0, "F0.0 F0.1 F0.2 F0.3 F0.4 F0.5 F0.6 B0.0 W0.0 B0.1 F0.7 B0.2 W0.1 "
	                     "B0.3 W0.2 B0.4 W0.3 B0.5 W0.4 B0.6 W0.5 W0.6 B0.7 W0.7");
	expect_program(m, 3, "F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 F3.4 B3.4 F3.5 B3.5 F3.6 "
	                     "B3.6 W3.0 F3.7 B3.7 W3.1 W3.2 W3.3 W3.4 W3.5 W3.6 W3.7");
	ir_free(m);
	/* ZB-V, p=2, m=4: D0 holds S0 and S3, D1 S1 and S2 (the turn). */
	m = planned(IR_SCHED_ZBV, 2, 4, 1, 1, 1, 1);
	expect_program(m, 0, "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 B3.1 W3.1 F0.3 B0.0 W0.0 F3.2 "
	                     "B3.2 W3.2 B0.1 W0.1 F3.3 B3.3 B0.2 W3.3 B0.3 W0.2 W0.3");
	expect_program(m, 1, "F1.0 F2.0 F1.1 F2.1 B2.0 W2.0 F1.2 B1.0 W1.0 F2.2 B2.1 W2.1 F1.3 "
	                     "B1.1 W1.1 F2.3 B2.2 B1.2 B2.3 B1.3 W2.2 W1.2 W2.3 W1.3");
	ir_free(m);
	/* i1f1b with chunks=1 (the default) interleaves 2, not 1f1b. */
	ir_module *a = planned(IR_SCHED_I1F1B, 4, 8, 1, 1, 1, 1);
	ir_module *b = planned(IR_SCHED_I1F1B, 4, 8, 2, 1, 1, 1);
	ck_assert_int_eq(a->nstages, 8);
	for (int d = 0; d < 4; d++) {
		ck_assert_int_eq(a->devices[d].nops, b->devices[d].nops);
		ck_assert(!memcmp(a->devices[d].ops, b->devices[d].ops,
		                  (size_t)a->devices[d].nops * sizeof(ir_op)));
	}
	ir_free(a);
	ir_free(b);
}
END_TEST

/* place: zbv's V, stage k < p on device k, k >= p on device 2p-1-k. */
START_TEST(test_place_v)
{
	for (int p = 1; p <= 8; p++) {
		ir_module *m = planned(IR_SCHED_ZBV, p, p, 1, 1, 1, 1);
		ck_assert_int_eq(m->nstages, 2 * p);
		for (int k = 0; k < 2 * p; k++)
			ck_assert_int_eq(m->stages[k].device, k < p ? k : 2 * p - 1 - k);
		ir_free(m);
	}
	/* chunks=2 says the same thing. */
	ir_module *m = planned(IR_SCHED_ZBV, 3, 3, 2, 1, 1, 1);
	ck_assert_int_eq(m->nstages, 6);
	ir_free(m);
}
END_TEST

/* Every constraint is a diagnostic. */
static void expect_error(ir_module *m, const char *want)
{
	tu_capture();
	pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule};
	int rc = pass_run(m, ids, 3, NULL);
	const char *got = tu_captured();
	ck_assert_msg(rc == -1 && strstr(got, want), "want '%s', got rc=%d '%s'", want, rc, got);
	tu_release();
	ir_free(m);
}

START_TEST(test_errors)
{
	expect_error(model(8, 2, 4, IR_SCHED_1F1B, 2, 1, 1, 1),
	             "schedule 1f1b runs one stage per device, but D0 holds S0 and S2 "
	             "(chunks above 1 are for gpipe, i1f1b and zbv)");
	expect_error(model(8, 2, 4, IR_SCHED_ZBH1, 2, 1, 1, 1),
	             "schedule zbh1 runs one stage per device, but D0 holds S0 and S2");
	expect_error(model(8, 2, 4, IR_SCHED_ZBH2, 2, 1, 1, 1),
	             "schedule zbh2 runs one stage per device, but D0 holds S0 and S2");
	expect_error(model(8, 4, 6, IR_SCHED_I1F1B, 2, 1, 1, 1),
	             "m=6 is not a multiple of p=4");
	expect_error(model(8, 4, 2, IR_SCHED_I1F1B, 2, 1, 1, 1),
	             "m=2 is not a multiple of p=4");
	expect_error(model(8, 2, 4, IR_SCHED_ZBV, 3, 1, 1, 1),
	             "schedule zbv runs 2 chunks per device (a V); chunks=3 does not apply");
	expect_error(model(1, 4, 4, IR_SCHED_1F1B, 1, 1, 1, 1),
	             "cannot cut 3 layers into 4 stages (4 devices x 1 chunks)");
	expect_error(model(4, 4, 4, IR_SCHED_ZBV, 1, 1, 1, 1),
	             "cannot cut 6 layers into 8 stages (4 devices x 2 chunks)");
	expect_error(model(5, 4, 4, IR_SCHED_I1F1B, 3, 1, 1, 1),
	             "cannot cut 7 layers into 12 stages (4 devices x 3 chunks)");

	/* Placements the interleaved and V schedules cannot serve. */
	static int64_t rr[] = {0, 1, 1, 0}, v4[] = {0, 1, 0, 1}, given3[] = {2, 2, 2};
	ir_module *m = model(8, 2, 4, IR_SCHED_I1F1B, 2, 1, 1, 1);
	m->plan.placement = rr, m->plan.nplacement = 4;
	expect_error(m, "schedule i1f1b needs stage k on the device of stage k-2 "
	                "(Megatron-LM's interleaving, place's default), but S2 is on D1");
	static int64_t pairs[] = {0, 0, 1, 1};
	m = model(8, 2, 4, IR_SCHED_I1F1B, 2, 1, 1, 1);
	m->plan.placement = pairs, m->plan.nplacement = 4;
	expect_error(m, "schedule i1f1b needs S0..S1 on 2 different devices, but S1 shares D0 with an earlier one");
	m = model(8, 2, 4, IR_SCHED_ZBV, 1, 1, 1, 1);
	m->plan.placement = v4, m->plan.nplacement = 4;
	expect_error(m, "schedule zbv needs S0 and S3 alone on one device (a V), but they are on D0 and D1");
	m = model(4, 2, 4, IR_SCHED_ZBV, 1, 1, 1, 1);
	m->plan.partition = IR_PART_GIVEN, m->plan.given = given3, m->plan.ngiven = 3;
	expect_error(m, "place: schedule zbv puts 2 stages on each of the 2 devices (a V), but the plan has 3 stages");
	m = model(4, 2, 4, IR_SCHED_I1F1B, 1, 1, 1, 1);
	m->plan.partition = IR_PART_GIVEN, m->plan.given = given3, m->plan.ngiven = 3;
	expect_error(m, "schedule i1f1b interleaves chunks over the 2 devices, but the plan has 3 stages");
	/* One stage per device (a given partition) is 1f1b, not interleaving. */
	static int64_t given2[] = {3, 3};
	m = model(4, 2, 4, IR_SCHED_I1F1B, 1, 1, 1, 1);
	m->plan.partition = IR_PART_GIVEN, m->plan.given = given2, m->plan.ngiven = 2;
	expect_error(m, "schedule i1f1b needs 2 or more chunks per device; 2 stages on 2 devices is 1f1b");

	/* Balanced needs costs. */
	m = model(6, 2, 4, IR_SCHED_1F1B, 1, 1, 1, 1);
	m->layers[3].cost.known = false;
	m->plan.partition = IR_PART_BALANCED;
	expect_error(m, "balanced partition needs layer costs; run the 'cost' pass first");
}
END_TEST

/* Balanced partition: the exact optimum of the bottleneck (checked by
 * enumerating every cut), ties to the cut whose later stages are fullest. */
static double stage_sum(const ir_module *m, int s)
{
	double t = 0;
	for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
		t += m->layers[l].cost.f + m->layers[l].cost.b + m->layers[l].cost.w;
	return t;
}

/* Smallest bottleneck over every cut of L layers with costs c into S
 * stages, by recursion over the first stage. */
static double brute(const double *c, int from, int L, int S)
{
	if (S == 1) {
		double t = 0;
		for (int i = from; i < L; i++)
			t += c[i];
		return t;
	}
	double best = INFINITY, t = 0;
	for (int end = from + 1; end <= L - (S - 1); end++) {
		t += c[end - 1];
		double rest = brute(c, end, L, S - 1);
		double mx = t > rest ? t : rest;
		if (mx < best)
			best = mx;
	}
	return best;
}

START_TEST(test_balanced_exact)
{
	unsigned seed = 12345;
	for (int trial = 0; trial < 400; trial++) {
		int body = 1 + trial % 9, devices = 1 + trial % 4;
		if (body + 2 < devices)
			continue;
		ir_module *m = model(body, devices, 2, IR_SCHED_1F1B, 1, 0, 0, 0);
		double c[16];
		for (int l = 0; l < m->nlayers; l++) {
			seed = seed * 1103515245u + 12345u;
			int f = (int)(seed >> 16) % 9, b = (int)(seed >> 8) % 5;
			m->layers[l].cost.f = f, m->layers[l].cost.b = b, m->layers[l].cost.w = f % 3;
			c[l] = f + b + f % 3;
		}
		m->plan.partition = IR_PART_BALANCED;
		ck_assert_int_eq(plan(m), 0);
		ck_assert_int_eq(m->nstages, devices);
		double worst = 0;
		for (int s = 0; s < m->nstages; s++)
			worst = fmax(worst, stage_sum(m, s));
		ck_assert_double_eq(worst, brute(c, 0, m->nlayers, devices));
		/* Tie-break: no later stage could take one more layer from the
		 * stage before it without passing the bottleneck. */
		for (int s = 1; s < m->nstages; s++) {
			int prev = m->stages[s - 1].last;
			if (prev > m->stages[s - 1].first)
				ck_assert(stage_sum(m, s) + c[prev] > worst);
		}
		ir_free(m);
	}
	/* An expensive head gets a stage of its own. */
	ir_module *m = model(6, 3, 2, IR_SCHED_1F1B, 1, 1, 1, 1);
	m->layers[7].cost.f = 10;
	m->plan.partition = IR_PART_BALANCED;
	ck_assert_int_eq(plan(m), 0);
	ck_assert_int_eq(m->stages[2].first, 7);
	ck_assert_double_eq(stage_sum(m, 0), 9);
	ir_free(m);
}
END_TEST

/* Every plan `plan` offers compiles: for every schedule (tuned included),
 * the tiny models on 1-4 devices with 1-12 micro-batches either plan and
 * then pass codegen's program builder on every rank (W in micro-batch
 * order, sizes the runtime's), or are refused by the planner with a
 * diagnostic.  The schedules without constraints on M never refuse. */
START_TEST(test_plans_compile)
{
	static const char *const models[] = {"tiny-dense", "tiny-hybrid"};
	ir_schedule sched = (ir_schedule)_i;
	bool free_m = sched == IR_SCHED_GPIPE || sched == IR_SCHED_1F1B || sched == IR_SCHED_ZBH1 ||
	              sched == IR_SCHED_ZBH2 || sched == IR_SCHED_TUNED;
	int compiled = 0;
	tune_budget budget = tune_budget_start(2);
	for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++)
		for (int p = 1; p <= 4; p++)
			for (int M = 1; M <= 12; M++) {
				char path[512];
				snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), models[mi]);
				fe_overrides ov = {.devices = p, .microbatches = M, .schedule = sname(sched),
				                   .backend = "mpi"};
				ir_module *m = fe_load(path, &ov);
				ck_assert_ptr_nonnull(m);
				pass_opts o = {.verify_each = true, .budget = &budget};
				tu_capture();
				int rc = pass_run_default(m, &o);
				char *why = tu_release_first_line();
				ck_assert_msg(rc == 0 || *why, "%s %s p=%d m=%d: refused without a diagnostic",
				              models[mi], sname(sched), p, M);
				ck_assert_msg(rc == 0 || !free_m, "%s %s p=%d m=%d does not plan: %s", models[mi],
				              sname(sched), p, M, why);
				free(why);
				if (rc == 0) {
					arena *a = arena_new();
					for (int d = 0; d < m->ndevices; d++) {
						cg_rank rank;
						tu_capture();
						int lrc = cg_lower_rank(m, 0, d, false, a, &rank);
						char *err = tu_release_first_line();
						ck_assert_msg(lrc == 0, "%s %s p=%d m=%d: codegen refuses D%d: %s",
						              models[mi], sname(sched), p, M, d, err);
						free(err);
					}
					arena_free(a);
					compiled++;
				}
				ir_free(m);
			}
	ck_assert_int_gt(compiled, 0);
}
END_TEST

static Suite *schedules_suite(void)
{
	Suite *s = suite_create("schedules");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_grid_valid);
	tcase_add_test(tc, test_greedy_wide);
	tcase_add_test(tc, test_any_placement);
	tcase_add_test(tc, test_exact_gpipe_1f1b);
	tcase_add_test(tc, test_exact_i1f1b);
	tcase_add_test(tc, test_exact_zbh1);
	tcase_add_test(tc, test_exact_zbh2_zbv);
	tcase_add_test(tc, test_memory_as_1f1b);
	tcase_add_test(tc, test_orders);
	tcase_add_test(tc, test_place_v);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_balanced_exact);
	suite_add_tcase(s, tc);
	TCase *cg = tcase_create("compiles");
	tcase_set_timeout(cg, 300);
	tcase_add_loop_test(cg, test_plans_compile, 0, IR_NSCHEDULES);
	suite_add_tcase(s, cg);
	return s;
}

int main(void)
{
	return tu_run(schedules_suite());
}
