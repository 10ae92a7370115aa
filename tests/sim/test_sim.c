/* test_sim.c: Check suite for the simulator: closed forms on uniform
 * costs, the idle split, link costs, memory, deadlock detection and
 * determinism.  (The baselines' closed forms are in test_schedules.c.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "simulate.h"
#include "testutil.h"

/* p stages of one mlp layer each (the embedding and head cost nothing and
 * ride on the first and last stage); every stage costs F, B, W. */
static ir_module *uniform(int p, int mbs, double F, double B, double W, double bw, double lat)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"u", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = mbs, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "c", .devices = p, .per_node = p, .mem = 1 << 30,
	                          .flops = 1e12, .membw = 1e10, .intra = {bw, lat}, .inter = {bw, lat}};
	ir_layer *l = ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	for (int i = 0; i < p; i++) {
		l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
		l->attr[IR_ATTR_FFN] = 128;
		l->cost = (ir_cost){.known = true, .f = F, .b = B, .w = W, .flops = 1e9,
		                    .act = 1000, .wstash = 100, .resident = 1 << 20};
	}
	l = ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule};
	ck_assert_int_eq(pass_run(m, ids, 3, NULL), 0);
	return m;
}

START_TEST(test_1f1b_closed_form)
{
	for (int p = 1; p <= 8; p++)
		for (int m = p; m <= 4 * p; m += p) {
			double F = 3, B = 5, W = 2;
			ir_module *mod = uniform(p, m, F, B, W, INFINITY, 0);
			sim_result *r = sim_run(mod);
			ck_assert_ptr_nonnull(r);
			double want = (m + p - 1) * (F + B + W);
			ck_assert_msg(r->makespan == want, "p=%d m=%d: makespan %g, want %g", p, m,
			              r->makespan, want);
			/* Device 0 waits (p-1)(B+W) for its first gradient after its p
			 * forwards: 1F1B's backward is one piece, B then W. */
			ck_assert_double_eq(r->dev[0].warmup, (p - 1) * (B + W));
			double idle = 0;
			for (int d = 0; d < p; d++) {
				sim_device *sd = &r->dev[d];
				ck_assert_double_eq(sd->busy, m * (F + B + W));
				ck_assert(sd->warmup >= 0 && sd->cooldown >= 0 && sd->residual >= 0);
				ck_assert_double_eq_tol(sd->warmup + sd->cooldown + sd->residual,
				                        r->makespan - sd->busy, 1e-9);
				ck_assert_int_eq(sd->peak_inflight, p - d < m ? p - d : m);
				idle += r->makespan - sd->busy;
			}
			ck_assert_double_eq_tol(r->bubble_ratio, idle / (p * r->makespan), 1e-12);
			sim_free(r);
			ir_free(mod);
		}
}
END_TEST

/* With a latency L on every hop, one micro-batch of 1F1B (backward in one
 * piece) takes p(F+B+W) + 2(p-1)L. */
START_TEST(test_latency_single_microbatch)
{
	for (int p = 1; p <= 6; p++) {
		ir_module *mod = uniform(p, 1, 4, 6, 1, INFINITY, 7);
		sim_result *r = sim_run(mod);
		ck_assert_ptr_nonnull(r);
		ck_assert_double_eq(r->makespan, p * (4 + 6 + 1) + 2 * (p - 1) * 7);
		ck_assert_int_eq(r->nxfers, 2 * (p - 1));
		sim_free(r);
		ir_free(mod);
	}
}
END_TEST

/* Bandwidth: bytes = mbs x seq x hidden x 4 = 4096 B at 4096e6 B/s is 1us
 * per hop; links inside a node vs across nodes use their own numbers. */
START_TEST(test_bandwidth_and_nodes)
{
	ir_module *mod = uniform(4, 1, 10, 10, 0, 4096e6, 0);
	ck_assert_uint_eq(sim_boundary_bytes(mod), 4096);
	sim_result *r = sim_run(mod);
	ck_assert_double_eq(r->makespan, 4 * 20 + 2 * 3 * 1.0);
	sim_free(r);
	/* Two nodes of two: the middle hop is inter-node, ten times slower. */
	mod->cluster.per_node = 2;
	mod->cluster.inter.bw = 409.6e6;
	r = sim_run(mod);
	ck_assert_double_eq_tol(r->makespan, 4 * 20 + 2 * (2 * 1.0 + 10.0), 1e-9);
	/* One link end is busy at a time: sends from one device serialise. */
	for (int i = 0; i < r->nxfers; i++)
		ck_assert(r->xfers[i].end > r->xfers[i].start);
	sim_free(r);
	ir_free(mod);
}
END_TEST

START_TEST(test_memory)
{
	ir_module *mod = uniform(4, 8, 1, 1, 1, INFINITY, 0);
	sim_result *r = sim_run(mod);
	for (int d = 0; d < 4; d++) {
		/* 1F1B: (p - d) activations in flight, plus the W stash that the
		 * first B writes while they are all still held; its W follows at
		 * once, so W stashes never add up. */
		ck_assert_uint_eq(r->dev[d].peak_act, (uint64_t)(4 - d) * 1000 + 100);
		ck_assert_uint_eq(r->dev[d].resident, 1 << 20);
		ck_assert_uint_eq(r->dev[d].peak_mem, (1u << 20) + (uint64_t)(4 - d) * 1000 + 100);
	}
	/* tokens/s: 8 micro-batches x 16 tokens in makespan microseconds. */
	ck_assert_double_eq_tol(r->tokens_per_s, 8 * 16 / (r->makespan * 1e-6), 1e-6);
	ck_assert_double_eq_tol(r->mfu, 4 * 8 * 1e9 / (r->makespan * 1e-6 * 4 * 1e12), 1e-12);
	sim_free(r);
	ir_free(mod);
}
END_TEST

/* D1 runs F S1 m1 first: it needs F S0 m1, which D0 runs after B S0 m0,
 * which needs B S1 m0, which D1 runs after F S1 m1: a cycle. */
START_TEST(test_stuck_programs)
{
	ir_module *mod = uniform(2, 2, 1, 1, 1, INFINITY, 0);
	static const ir_op d0[] = {{IR_OP_F, 0, 0}, {IR_OP_B, 0, 0}, {IR_OP_W, 0, 0},
	                           {IR_OP_F, 0, 1}, {IR_OP_B, 0, 1}, {IR_OP_W, 0, 1}};
	static const ir_op d1[] = {{IR_OP_F, 1, 1}, {IR_OP_F, 1, 0}, {IR_OP_B, 1, 0},
	                           {IR_OP_W, 1, 0}, {IR_OP_B, 1, 1}, {IR_OP_W, 1, 1}};
	memcpy(mod->devices[0].ops, d0, sizeof d0);
	memcpy(mod->devices[1].ops, d1, sizeof d1);
	ck_assert_int_eq(ir_verify(mod), 0); /* structurally fine */
	tu_capture();
	ck_assert_ptr_null(sim_run(mod));
	ck_assert_ptr_nonnull(strstr(tu_captured(), "cannot run to the end"));
	tu_release();
	/* To a sink of its own (the tuner judging a candidate): counted and
	 * kept there, nothing on the default one. */
	diag_sink quiet = {0};
	tu_capture();
	int before = diag_errors;
	ck_assert_ptr_null(sim_run_to(mod, &quiet));
	ck_assert_int_eq(diag_errors, before);
	ck_assert_str_eq(tu_captured(), "");
	tu_release();
	ck_assert_int_eq(quiet.errors, 1);
	ck_assert_ptr_nonnull(strstr(quiet.first, "cannot run to the end"));
	ir_free(mod);
}
END_TEST

START_TEST(test_needs_costs)
{
	ir_module *mod = uniform(2, 2, 1, 1, 1, INFINITY, 0);
	mod->layers[1].cost.known = false;
	tu_capture();
	ck_assert_ptr_null(sim_run(mod));
	ck_assert_ptr_nonnull(strstr(tu_captured(), "layer L1 has no cost"));
	tu_release();
	ir_free(mod);
}
END_TEST

START_TEST(test_deterministic_and_fast)
{
	/* 128 devices x 1024 micro-batches of 1F1B: 393216 ops. */
	ir_module *mod = uniform(128, 1024, 1, 2, 1, 1e9, 3);
	sim_result *a = sim_run(mod), *b = sim_run(mod);
	ck_assert_double_eq(a->makespan, b->makespan);
	for (int d = 0; d < 128; d++)
		ck_assert(memcmp(a->dev[d].start, b->dev[d].start,
		                 (size_t)mod->devices[d].nops * sizeof(double)) == 0);
	sim_free(a);
	sim_free(b);
	ir_free(mod);
}
END_TEST

/* The cache model (docs/simulator.md): one device, one stage [embedding,
 * mlp, head] under 1F1B runs F(m) B(m) W(m) for each m; only the mlp has
 * cold times.  A boundary is 1 x 16 x 64 x 4 = 4096 bytes; the embedding
 * and the head stash nothing and have no weights, so each of their F and
 * B touches 2 x 4096 bytes and their W nothing.  The mlp's reuse
 * distances are then: F(m) 8192 (W(m-1) of the head, F(m) of the
 * embedding; F(0) follows the optimizer: cold), B(m) 16384 (F and B of
 * the head), W(m) 8192 (B of the embedding). */
START_TEST(test_cache_model)
{
	const double F = 4, B = 8, W = 2, Fc = 8, Bc = 16, Wc = 6;
	const int M = 4;
	ir_module *mod = uniform(1, M, F, B, W, INFINITY, 0);
	ir_cost *c = &mod->layers[1].cost;
	c->act = c->wstash = c->params = 0;
	c->cold = true, c->f_cold = Fc, c->b_cold = Bc, c->w_cold = Wc;
	const ir_device *dev = &mod->devices[0];
	ck_assert_int_eq(dev->nops, 3 * M);
	for (int i = 0; i < dev->nops; i++)
		ck_assert(dev->ops[i].kind == (ir_op_kind)(i % 3) && dev->ops[i].mb == i / 3);

	/* No cache size: the hot times. */
	sim_result *r = sim_run(mod);
	ck_assert_double_eq(r->makespan, M * (F + B + W));
	sim_free(r);

	/* A cache of 32768 bytes: F 1/4 of the way to cold (the first F all
	 * the way), B 1/2, W 1/4. */
	mod->cluster.cache = 32768;
	r = sim_run(mod);
	double want = M * (F + B + W) + (Fc - F) * (1 + (M - 1) * 0.25) + M * 0.5 * (Bc - B) +
	              M * 0.25 * (Wc - W);
	ck_assert_msg(r->makespan == want, "makespan %g, want %g", r->makespan, want);
	ck_assert_double_eq(r->dev[0].end[1] - r->dev[0].start[1], B + 0.5 * (Bc - B));
	sim_free(r);

	/* A cache smaller than any distance: everything cold. */
	mod->cluster.cache = 4096;
	r = sim_run(mod);
	ck_assert_double_eq(r->makespan, M * (Fc + Bc + Wc));
	sim_free(r);

	/* Without cold times the cache size changes nothing. */
	c->cold = false;
	r = sim_run(mod);
	ck_assert_double_eq(r->makespan, M * (F + B + W));
	sim_free(r);
	ir_free(mod);
}
END_TEST

/* Posting a send or a receive takes the host's time on mpi (the cluster's
 * send_post, recv_post), and nothing on nccl.  Two devices, one
 * micro-batch, F = 3, B = 5, W = 2, a free link: D0 runs F, posts its
 * send (20) and its receive (1), so its B starts at max(2F + B + W, F +
 * 21) = 24 instead of 13, and ends the step at 24 + B + W = 31. */
START_TEST(test_posting_cost)
{
	for (int nccl = 0; nccl < 2; nccl++) {
		ir_module *mod = uniform(2, 1, 3, 5, 2, INFINITY, 0);
		mod->plan.backend = nccl ? IR_BACKEND_NCCL : IR_BACKEND_MPI;
		pass_id comm[] = {PASS_comm};
		ck_assert_int_eq(pass_run(mod, comm, 1, NULL), 0);
		sim_result *r = sim_run(mod);
		ck_assert_double_eq(r->makespan, 2 * (3 + 5 + 2));
		sim_free(r);
		mod->cluster.send_post = 20, mod->cluster.recv_post = 1;
		r = sim_run(mod);
		ck_assert_double_eq(r->makespan, nccl ? 2 * (3 + 5 + 2) : 31);
		sim_free(r);
		ir_free(mod);
	}
}
END_TEST

static Suite *sim_suite(void)
{
	Suite *s = suite_create("simulate");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_1f1b_closed_form);
	tcase_add_test(tc, test_latency_single_microbatch);
	tcase_add_test(tc, test_bandwidth_and_nodes);
	tcase_add_test(tc, test_memory);
	tcase_add_test(tc, test_stuck_programs);
	tcase_add_test(tc, test_needs_costs);
	tcase_add_test(tc, test_deterministic_and_fast);
	tcase_add_test(tc, test_cache_model);
	tcase_add_test(tc, test_posting_cost);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(sim_suite());
}
