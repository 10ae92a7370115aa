/* test_sim.c: Check suite for the simulator: closed forms on uniform
 * costs, the idle split, link costs, memory, deadlock detection,
 * determinism, and data parallelism (collectives, exposed reduction, the
 * distributed optimizer's memory).  (The baselines' closed forms are in test_schedules.c.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
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
		ck_assert_uint_eq(r->dev[d].scratch, cost_device_scratch(mod, d));
		ck_assert_uint_eq(r->dev[d].peak_mem,
		                  (1u << 20) + r->dev[d].scratch + (uint64_t)(4 - d) * 1000 + 100);
	}
	/* tokens/s: 8 micro-batches x 16 tokens in makespan microseconds. */
	ck_assert_double_eq_tol(r->tokens_per_s, 8 * 16 / (r->makespan * 1e-6), 1e-6);
	ck_assert_double_eq_tol(r->mfu, 4 * 8 * 1e9 / (r->makespan * 1e-6 * 4 * 1e12), 1e-12);
	sim_free(r);
	ir_free(mod);
}
END_TEST

/* Full recomputation (docs/cost-model.md, "Recomputation"): B runs F again,
 * so 1F1B's closed form holds with B + F for B; each device keeps its
 * stage's input (the boundary value; nothing on the first, whose input is
 * the data) per micro-batch in flight instead of the stash, and needs the
 * stash and one value during one F or B. */
START_TEST(test_recompute_full)
{
	int p = 4, M = 8;
	double F = 3, B = 5, W = 2;
	ir_module *mod = uniform(p, M, F, B, W, INFINITY, 0);
	uint64_t act = 1 << 16, vb = sim_boundary_bytes(mod);
	for (int l = 0; l < mod->nlayers; l++)
		if (mod->layers[l].kind == IR_LAYER_MLP)
			mod->layers[l].cost.act = act;
	sim_result *r0 = sim_run(mod);
	for (int s = 0; s < mod->nstages; s++)
		mod->stages[s].recompute = IR_RECOMP_FULL;
	sim_result *r = sim_run(mod);
	ck_assert(r0 && r);
	for (int s = 0; s < mod->nstages; s++) {
		ck_assert_double_eq(sim_stage_time(mod, s, IR_OP_B), B + F);
		ck_assert_double_eq(sim_stage_time(mod, s, IR_OP_F), F);
		ck_assert_double_eq(sim_stage_time(mod, s, IR_OP_W), W);
		ck_assert_uint_eq(ir_stage_kept(mod, s), s ? vb : 0);
		ck_assert_uint_eq(ir_stage_redo(mod, s), act + vb);
	}
	ck_assert_double_eq(r0->makespan, (M + p - 1) * (F + B + W));
	ck_assert_double_eq(r->makespan, (M + p - 1) * (F + (B + F) + W));
	for (int d = 0; d < p; d++) {
		uint64_t n = (uint64_t)(p - d), kept = d ? vb : 0;
		ck_assert_double_eq(r->dev[d].busy, M * (2 * F + B + W));
		ck_assert_uint_eq(r0->dev[d].peak_act, n * act + 100);
		/* The first B: the inputs in flight, its W stash, the stash made again. */
		ck_assert_uint_eq(r->dev[d].peak_act, n * kept + 100 + act + vb);
		if (n > 1)
			ck_assert_uint_lt(r->dev[d].peak_act, r0->dev[d].peak_act);
	}
	sim_free(r);
	sim_free(r0);
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

/* ---- data parallelism ---------------------------------------------------- */

/* Collective times (simulate.h): intra link 1e9 B/s and 5us, inter 1e8 B/s
 * and 20us; a DP group of 4.  Large buffers ride the ring, small ones the
 * tree; pp-inner puts a group's members P ranks apart, dp-inner side by
 * side, and the pipeline's links move the other way. */
START_TEST(test_dp_collective_cost)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"dp", 64, 256, 16, IR_DTYPE_F32};
	m->cluster = (ir_cluster){.name = "c", .devices = 8, .per_node = 8, .mem = 1 << 30,
	                          .flops = 1e12, .membw = 1e10, .intra = {1e9, 5}, .inter = {1e8, 20}};
	m->plan.dp = 4; /* P = 2 */
	m->plan.rank_order = IR_RANKS_PP_INNER;
	double big = 1e8, small = 1000;
	/* One node of 8: everything intra.  Ring 2(3/4) 1e5 + 6 x 5; tree
	 * 2 x 2 x (5 + 1e5). */
	ck_assert(sim_group_intra(m, 0) && sim_group_intra(m, 1));
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_ALLREDUCE, 0, (uint64_t)big), 150000 + 30, 1e-6);
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_REDUCESCATTER, 0, (uint64_t)big), 75015, 1e-6);
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_ALLGATHER, 1, (uint64_t)big), 75015, 1e-6);
	/* 1000 bytes: ring 1.5 + 30, tree 4 x (5 + 1) = 24. */
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_ALLREDUCE, 0, (uint64_t)small), 24, 1e-9);
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_REDUCESCATTER, 0, (uint64_t)small), 12, 1e-9);
	/* Nodes of 4.  pp-inner: device 0's group is ranks 0, 2, 4, 6, across
	 * two nodes (inter: ring 2(3/4) 1e6 + 6 x 20); a pipeline, ranks 2r
	 * and 2r + 1, stays on its node. */
	m->cluster.per_node = 4;
	ck_assert(!sim_group_intra(m, 0));
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_ALLREDUCE, 0, (uint64_t)big), 1.5e6 + 120, 1e-6);
	ck_assert_double_eq_tol(sim_link_time(m, 0, 1, 1000), 5 + 1, 1e-9);
	/* dp-inner: device p's group is ranks 4p .. 4p + 3, one node; the
	 * pipeline's neighbours are 4 ranks apart, on two nodes. */
	m->plan.rank_order = IR_RANKS_DP_INNER;
	ck_assert(sim_group_intra(m, 0) && sim_group_intra(m, 1));
	ck_assert_double_eq_tol(sim_coll_time(m, IR_COMM_ALLREDUCE, 1, (uint64_t)big), 150030, 1e-6);
	ck_assert_double_eq_tol(sim_link_time(m, 0, 1, 1000), 20 + 10, 1e-9);
	/* An update: AdamW moves 28 bytes a parameter; 1e6 of them at 1e10 B/s
	 * is 2800us, plus the cost model's 4us launch; the distributed
	 * optimizer updates a quarter of them. */
	ir_layer *l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
	l->cost = (ir_cost){.known = true, .params = 1000000};
	ir_op up = {.kind = IR_OP_W, .comm = IR_COMM_UPDATE, .first = 0, .last = 0};
	ck_assert_double_eq_tol(sim_update_time(m, &up), 2800 + 4, 1e-9);
	m->plan.dist_opt = 1;
	ck_assert_double_eq_tol(sim_update_time(m, &up), 700 + 4, 1e-9);
	ir_free(m);
}
END_TEST

/* One device per pipeline, D replicas, two stages on it: S0 = [embedding]
 * (no parameters: its reduction moves nothing, in no time on a link
 * without latency) and S1 = [mlp with `params` parameters, head]; two
 * micro-batches per replica, each F0 F1 B1 W1 B0 W0.  S1's all-reduce is
 * posted after its last W and overlaps the last B0 and W0 (b0 each); the
 * waits come after them. */
static ir_module *dp_two_stages(int D, double b0, uint64_t params, int dist_opt, ir_backend be)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"dp", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = 2 * D, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "c", .devices = D, .per_node = 8, .mem = 1ull << 40,
	                          .flops = 1e12, .membw = 1e12, .intra = {4e9, 0}, .inter = {4e9, 0}};
	m->plan = (ir_plan_opts){.schedule = IR_SCHED_1F1B, .chunks = 1, .partition = IR_PART_UNIFORM,
	                         .backend = be, .dp = D, .rank_order = IR_RANKS_PP_INNER,
	                         .dist_opt = dist_opt, .bucket = 1ull << 30};
	ir_layer *l = ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	l->cost = (ir_cost){.known = true, .f = 10, .b = b0, .w = b0, .act = 1024, .wstash = 256};
	l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
	l->attr[IR_ATTR_FFN] = 128;
	l->cost = (ir_cost){.known = true, .f = 10, .b = 10, .w = 10, .flops = 1e6, .act = 4096,
	                    .wstash = 1024, .params = params, .resident = params * 16};
	l = ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	ir_add_stage(m, 0, 0, 0, (ir_loc){0});
	ir_add_stage(m, 1, 2, 0, (ir_loc){0});
	ir_alloc_devices(m);
	ck_assert_int_eq(m->ndevices, 1);
	for (int mb = 0; mb < 2; mb++) {
		ir_add_op(m, 0, IR_OP_F, 0, mb, (ir_loc){0});
		ir_add_op(m, 0, IR_OP_F, 1, mb, (ir_loc){0});
		ir_add_op(m, 0, IR_OP_B, 1, mb, (ir_loc){0});
		ir_add_op(m, 0, IR_OP_W, 1, mb, (ir_loc){0});
		ir_add_op(m, 0, IR_OP_B, 0, mb, (ir_loc){0});
		ir_add_op(m, 0, IR_OP_W, 0, mb, (ir_loc){0});
	}
	pass_id lower[] = {PASS_comm, PASS_verify, PASS_memplan};
	ck_assert_int_eq(pass_run(m, lower, 3, NULL), 0);
	return m;
}

/* S1's all-reduce: 4 x params bytes over 2 members at 4e9 B/s, ring
 * 2(1/2) x bytes / bw = params / 1e3 us.  With 1e6 parameters that is
 * 1000us: hidden behind B0 + W0 = 1200us, exposed for 800us behind 200us. */
START_TEST(test_dp_exposed_reduction)
{
	for (int be = 0; be < IR_NBACKENDS; be++) {
		ir_module *m = dp_two_stages(2, 600, 1000000, 0, (ir_backend)be);
		sim_result *r = sim_run(m);
		ck_assert_ptr_nonnull(r);
		ck_assert_int_eq(r->dp, 2);
		const sim_device *sd = &r->dev[0];
		ck_assert_double_eq_tol(sd->coll, 1000, 1e-9);
		ck_assert_double_eq(sd->exposed, 0);
		/* Two updates: 4us each plus 28 bytes a parameter at 1e12 B/s; and
		 * the host's packing of S1's bucket (8 bytes a parameter) and
		 * unpacking of its sum (8). */
		ck_assert_double_eq_tol(sd->update, 2 * 4 + 1e6 * (28 + 8 + 8) / 1e12 * 1e6, 1e-9);
		/* S1's packing runs between its last W and S0's (inside the
		 * pipeline's span); the rest of the updates after it. */
		double pack = 1e6 * 8 / 1e12 * 1e6;
		ck_assert_double_eq_tol(r->makespan, sd->pipeline + sd->update - pack, 1e-9);
		ck_assert_double_eq_tol(sd->busy + sd->warmup + sd->cooldown + sd->residual + sd->exposed +
		                        sd->update, r->makespan, 1e-9);
		/* Global tokens: 4 micro-batches of 16 tokens (2 per replica). */
		ck_assert_double_eq_tol(r->tokens_per_s, 4 * 16 / (r->makespan * 1e-6), 1e-6);
		sim_free(r);
		ir_free(m);

		/* Deterministic sums: each of S1's two W's adds its 1e6 gradients
		 * exactly, 136 bytes a parameter at 1e12 B/s. */
		m = dp_two_stages(2, 600, 1000000, 0, (ir_backend)be);
		r = sim_run(m);
		double busy = r->dev[0].busy;
		sim_free(r);
		m->plan.deterministic = 1;
		r = sim_run(m);
		ck_assert_double_eq_tol(r->dev[0].busy - busy, 2 * 1e6 * 136 / 1e12 * 1e6, 1e-9);
		sim_free(r);
		ir_free(m);

		m = dp_two_stages(2, 100, 1000000, 0, (ir_backend)be);
		r = sim_run(m);
		ck_assert_ptr_nonnull(r);
		ck_assert_double_eq_tol(r->dev[0].exposed, 800, 1e-9);
		ck_assert_double_eq_tol(r->exposed, 800, 1e-9);
		ck_assert_double_eq_tol(r->makespan, r->dev[0].pipeline + 800 + r->dev[0].update - pack, 1e-9);
		sim_free(r);
		ir_free(m);
	}
}
END_TEST

/* The distributed optimizer holds the AdamW moments of ceil(params / D)
 * parameters: 8 x (n - n / D) bytes fewer per device for the same arena
 * (n even, so the reduce-scatter's buffer is the all-reduce's size), and
 * the simulator's peak is the resident bytes plus the memory plan's arena,
 * which holds the collectives' buffers. */
START_TEST(test_dp_memory)
{
	const uint64_t n = 1000000;
	for (int D = 2; D <= 4; D += 2) {
		ir_module *a = dp_two_stages(D, 100, n, 0, IR_BACKEND_NCCL);
		ir_module *b = dp_two_stages(D, 100, n, 1, IR_BACKEND_NCCL);
		sim_result *ra = sim_run(a), *rb = sim_run(b);
		ck_assert_uint_eq(ra->dev[0].resident, 16 * n);
		ck_assert_uint_eq(rb->dev[0].resident, 8 * n + 8 * (n / D));
		for (int k = 0; k < 2; k++) {
			const ir_module *m = k ? b : a;
			const sim_result *r = k ? rb : ra;
			bool bucket = false;
			for (int i = 0; i < m->memplan[0].nbufs; i++)
				bucket |= m->memplan[0].bufs[i].kind == IR_BUF_BUCKET &&
				          m->memplan[0].bufs[i].size == 4 * n;
			ck_assert(bucket);
			ck_assert_uint_eq(r->dev[0].peak_act, m->memplan[0].arena);
			ck_assert_uint_eq(r->dev[0].peak_mem,
			                  r->dev[0].resident + r->dev[0].scratch + m->memplan[0].arena);
		}
		ck_assert_uint_eq(a->memplan[0].arena, b->memplan[0].arena);
		ck_assert_uint_eq(ra->dev[0].peak_mem - rb->dev[0].peak_mem, 8 * (n - n / D));
		sim_free(ra);
		sim_free(rb);
		ir_free(a);
		ir_free(b);
	}
	/* An odd count rounds the shard up; bf16 shards the f32 master too. */
	ir_module *m = dp_two_stages(4, 100, 1000001, 1, IR_BACKEND_NCCL);
	ck_assert_uint_eq(cost_resident(m, 1), 8 * 1000001 + 8 * 250001);
	m->model.dtype = IR_DTYPE_BF16;
	m->layers[1].cost.resident = 1000001 * (2 + 4 + 8 + 4);
	ck_assert_uint_eq(cost_resident(m, 1), 1000001 * (2 + 4) + 250001 * 12);
	/* Deterministic sums hold the runtime's exact accumulator besides. */
	m->plan.deterministic = 1;
	ck_assert_uint_eq(cost_resident(m, 1),
	                  1000001 * (2 + 4) + 250001 * 12 + 1000001 * IR_EXACT_VALUE_BYTES);
	ir_free(m);
}
END_TEST

/* Two pipeline devices, D = 2, the distributed optimizer: S0 = [embedding,
 * mlp] on D0, S1 = [mlp with 2e6 parameters, head] on D1, 1F1B over four
 * micro-batches per replica, mlp F = B = W = f.  S1's all-gather moves
 * 8e6 bytes, 1000us on the 4e9 B/s link; D1 finishes last (the 1000us
 * reduce-scatter, its update, the gather), while its next step waits f
 * for D0's first F anyway: the fill the carried wait hides the gather in. */
static ir_module *dp_overlap(double f, int overlap, ir_backend be, ir_schedule sched)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"dp", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = 8, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "c", .devices = 4, .per_node = 8, .mem = 1ull << 40,
	                          .flops = 1e12, .membw = 1e12, .intra = {4e9, 0}, .inter = {4e9, 0}};
	m->plan = (ir_plan_opts){.schedule = sched, .chunks = 1, .partition = IR_PART_UNIFORM,
	                         .backend = be, .dp = 2, .rank_order = IR_RANKS_PP_INNER,
	                         .dist_opt = 1, .overlap_gather = overlap, .bucket = 1ull << 30};
	const uint64_t params[4] = {1000, 1000, 2000000, 0};
	const ir_layer_kind kinds[4] = {IR_LAYER_EMBEDDING, IR_LAYER_MLP, IR_LAYER_MLP, IR_LAYER_HEAD};
	for (int i = 0; i < 4; i++) {
		ir_layer *l = ir_add_layer(m, kinds[i], (ir_loc){0});
		bool mlp = kinds[i] == IR_LAYER_MLP;
		if (mlp)
			l->attr[IR_ATTR_FFN] = 128;
		l->cost = (ir_cost){.known = true, .f = mlp ? f : 0, .b = mlp ? f : 0, .w = mlp ? f : 0,
		                    .flops = 1e6, .act = 4096, .wstash = 1024, .params = params[i],
		                    .resident = params[i] * 16};
	}
	pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule, PASS_comm, PASS_verify, PASS_memplan};
	ck_assert_int_eq(pass_run(m, ids, 6, NULL), 0);
	return m;
}

/* The overlapped all-gather: on mpi (collectives beside the transfers),
 * with a fill of f = 600us before D1's first F, most of S1's 1000us
 * gather hides in it, and the step is that much shorter than with the
 * gather waited at the end; it never hides more than the gather.  (On
 * nccl D1's first receive queues behind the gather on its communication
 * stream: nothing hides there.)  And a plan with the overlap on is never
 * slower than one with it off (comm keeps it only where the steady step
 * is not). */
START_TEST(test_dp_overlap_gather)
{
	{
		ir_backend be = IR_BACKEND_MPI;
		ir_module *on = dp_overlap(600, 1, be, IR_SCHED_1F1B);
		ir_module *off = dp_overlap(600, 0, be, IR_SCHED_1F1B);
		ck_assert_int_eq(on->plan.overlap_gather, 1);
		bool carried = false;
		for (int i = 0; i < on->devices[1].nops; i++)
			carried |= on->devices[1].ops[i].comm == IR_COMM_WAIT && on->devices[1].ops[i].carried;
		ck_assert(carried);
		sim_result *a = sim_run(on), *b = sim_run(off);
		ck_assert_ptr_nonnull(a);
		ck_assert_ptr_nonnull(b);
		ck_assert_int_gt(a->steps, 1);
		ck_assert_int_eq(b->steps, 1);
		double ag = sim_coll_time(on, IR_COMM_ALLGATHER, 1, 8000000);
		ck_assert_double_eq_tol(ag, 1000, 1e-9);
		/* D1 waits for the gather only where the fill does not cover it. */
		ck_assert_double_lt(a->dev[1].gather_exposed, ag - 500);
		ck_assert_double_eq(b->dev[1].gather_exposed, 0);
		ck_assert_double_lt(a->makespan, b->makespan - 500);
		ck_assert_double_ge(a->makespan, b->makespan - ag);
		/* The idle split still adds up with the wait early in the step. */
		for (int d = 0; d < 2; d++) {
			const sim_device *sd = &a->dev[d];
			ck_assert_double_eq_tol(sd->busy + sd->warmup + sd->cooldown + sd->residual + sd->exposed +
			                        sd->update, a->makespan, 1e-6);
		}
		sim_free(a);
		sim_free(b);
		ir_free(on);
		ir_free(off);
	}
	/* Never slower: every schedule, both backends, fills short and long. */
	static const ir_schedule scheds[] = {IR_SCHED_1F1B, IR_SCHED_GPIPE, IR_SCHED_ZBH1, IR_SCHED_ZBH2};
	static const double fs[] = {10, 100, 600, 3000};
	for (int be = 0; be < IR_NBACKENDS; be++)
		for (size_t k = 0; k < sizeof scheds / sizeof *scheds; k++)
			for (size_t j = 0; j < sizeof fs / sizeof *fs; j++) {
				ir_module *on = dp_overlap(fs[j], 1, (ir_backend)be, scheds[k]);
				ir_module *off = dp_overlap(fs[j], 0, (ir_backend)be, scheds[k]);
				sim_result *a = sim_run(on), *b = sim_run(off);
				ck_assert_double_le(a->makespan, b->makespan);
				sim_free(a);
				sim_free(b);
				ir_free(on);
				ir_free(off);
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
	tcase_add_test(tc, test_recompute_full);
	tcase_add_test(tc, test_stuck_programs);
	tcase_add_test(tc, test_needs_costs);
	tcase_add_test(tc, test_deterministic_and_fast);
	tcase_add_test(tc, test_cache_model);
	tcase_add_test(tc, test_posting_cost);
	tcase_add_test(tc, test_dp_collective_cost);
	tcase_add_test(tc, test_dp_exposed_reduction);
	tcase_add_test(tc, test_dp_memory);
	tcase_add_test(tc, test_dp_overlap_gather);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(sim_suite());
}
