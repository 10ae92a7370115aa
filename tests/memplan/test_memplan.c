/* test_memplan.c: Check suite for the memory plan (the `memplan` pass,
 * ir_live_buffers, the plan's IR text and its verifier checks).
 *
 * The zoo test derives every buffer's live range again here, by a plain
 * search of the program (not ir_live_buffers' index tables), checks the
 * plan against it, bounds the arena from below by the most bytes live at
 * one op, checks every pair of buffers for overlap, and compares the
 * simulator's peak with resident + scratch + arena.  It prints one line per plan:
 * the arena against that bound and against the running sum the tuner
 * judges plans by (docs/memplan.md quotes them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "frontend.h"
#include "memplan.h"
#include "pass.h"
#include "simulate.h"
#include "testutil.h"
#include "tune.h"

/* ---- an independent liveness --------------------------------------------- */

/* Position of the op (comm, kind, stage, mb) in device d's program, or -1. */
static int find(const ir_module *m, int d, ir_comm c, ir_op_kind k, int stage, int mb)
{
	const ir_device *dev = &m->devices[d];
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		if (op->comm == c && op->kind == k && op->stage == stage && op->mb == mb)
			return i;
	}
	return -1;
}

static uint64_t stage_sum(const ir_module *m, int s, bool wstash)
{
	uint64_t v = 0;
	for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
		v += wstash ? m->layers[l].cost.wstash : m->layers[l].cost.act;
	return v;
}

/* What F keeps of stage s until B: a selective stage leaves its layers'
 * sel_act out. */
static uint64_t stage_kept(const ir_module *m, int s)
{
	uint64_t v = stage_sum(m, s, false);
	if (m->stages[s].recompute == IR_RECOMP_SELECTIVE)
		for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
			v -= m->layers[l].cost.sel_act;
	return v;
}

static bool redo(const ir_module *m, int s)
{
	return m->stages[s].recompute == IR_RECOMP_FULL;
}

/* The op after which nothing on device d can still read the buffer of the
 * send at position j (docs/memplan.md, "Send buffers"). */
static int send_end(const ir_module *m, int d, int j)
{
	const ir_device *dev = &m->devices[d];
	if (m->plan.backend == IR_BACKEND_MPI)
		return dev->nops - 1;
	for (int i = j + 1; i < dev->nops; i++) {
		const ir_op *w = &dev->ops[i];
		if (w->comm != IR_COMM_WAIT)
			continue;
		int r = find(m, d, IR_COMM_RECV, w->kind, w->stage, w->mb);
		if (r > j || (dev->ops[j].group && dev->ops[r].group == dev->ops[j].group))
			return i;
	}
	return dev->nops - 1;
}

typedef struct want {
	ir_buf *b;
	int n, cap;
} want;

static void put(want *w, ir_buf b)
{
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 64;
		w->b = realloc(w->b, (size_t)w->cap * sizeof *w->b);
	}
	w->b[w->n++] = b;
}

static want derive(const ir_module *m, int d)
{
	want w = {0};
	const ir_device *dev = &m->devices[d];
	uint64_t vb = sim_boundary_bytes(m);
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		int s = op->stage, mb = op->mb;
		/* A recomputing stage reads its input again in its B. */
		if (op->comm == IR_COMM_RECV) {
			int cs = op->kind == IR_OP_F ? s + 1 : s - 1;
			ir_op_kind use = op->kind == IR_OP_F && redo(m, cs) ? IR_OP_B : op->kind;
			put(&w, (ir_buf){IR_BUF_RECV, op->kind, s, mb, i, find(m, d, IR_COMM_NONE, use, cs, mb),
			                 0, op->bytes});
		}
		if (op->comm != IR_COMM_NONE)
			continue;
		/* Recomputing: F's stash and chain during F, made again during B. */
		uint64_t rsize = stage_sum(m, s, false) + vb;
		if (op->kind == IR_OP_F && redo(m, s))
			put(&w, (ir_buf){IR_BUF_ACT, IR_OP_F, s, mb, i, i, 0, rsize});
		else if (op->kind == IR_OP_F)
			put(&w, (ir_buf){IR_BUF_ACT, IR_OP_F, s, mb, i, find(m, d, IR_COMM_NONE, IR_OP_B, s, mb), 0,
			                 stage_kept(m, s)});
		if (op->kind == IR_OP_B && redo(m, s))
			put(&w, (ir_buf){IR_BUF_RECOMP, IR_OP_F, s, mb, i, i, 0, rsize});
		if (op->kind == IR_OP_B)
			put(&w, (ir_buf){IR_BUF_WSTASH, IR_OP_F, s, mb, i, find(m, d, IR_COMM_NONE, IR_OP_W, s, mb), 0,
			                 stage_sum(m, s, true)});
		int cs = op->kind == IR_OP_F ? s + 1 : op->kind == IR_OP_B ? s - 1 : -1;
		if (cs < 0 || cs >= m->nstages)
			continue;
		if (m->stages[cs].device == d) {
			ir_op_kind use = op->kind == IR_OP_F && redo(m, cs) ? IR_OP_B : op->kind;
			put(&w, (ir_buf){IR_BUF_PASS, op->kind, s, mb, i, find(m, d, IR_COMM_NONE, use, cs, mb), 0, vb});
		} else {
			int j = find(m, d, IR_COMM_SEND, op->kind, s, mb);
			ck_assert_int_ge(j, i);
			put(&w, (ir_buf){IR_BUF_SEND, op->kind, s, mb, i, send_end(m, d, j), 0, dev->ops[j].bytes});
		}
	}
	return w;
}

/* Most bytes live at one op; compute-only: the stashes alone. */
static uint64_t live_peak(const ir_buf *b, int n, int nops, bool compute_only)
{
	uint64_t peak = 0;
	for (int p = 0; p < nops; p++) {
		uint64_t sum = 0;
		for (int i = 0; i < n; i++)
			if (b[i].first <= p && p <= b[i].last &&
			    (!compute_only || ir_buf_is_stash(b[i].kind)))
				sum += b[i].size;
		peak = sum > peak ? sum : peak;
	}
	return peak;
}

static bool same_buf(const ir_buf *a, const ir_buf *b)
{
	return a->kind == b->kind && a->value == b->value && a->stage == b->stage && a->mb == b->mb &&
	       a->first == b->first && a->last == b->last && a->size == b->size;
}

/* No two buffers live together share a byte; all fit; the arena is the top. */
static void check_layout(const ir_buf *b, int n, uint64_t size, const char *what)
{
	uint64_t top = 0;
	for (int i = 0; i < n; i++) {
		ck_assert_msg(b[i].off + b[i].size <= size, "%s: buffer %d beyond the arena", what, i);
		ck_assert_msg(b[i].off % IR_BUF_ALIGN == 0, "%s: buffer %d not aligned", what, i);
		top = b[i].off + b[i].size > top ? b[i].off + b[i].size : top;
		for (int j = 0; j < i; j++) {
			if (b[i].first > b[j].last || b[j].first > b[i].last || !b[i].size || !b[j].size)
				continue;
			ck_assert_msg(b[i].off + b[i].size <= b[j].off || b[j].off + b[j].size <= b[i].off,
			              "%s: buffers %d and %d overlap", what, j, i);
		}
	}
	ck_assert_msg(top == size, "%s: arena %llu, top %llu", what, (unsigned long long)size,
	              (unsigned long long)top);
}

static ir_module *reparse(const ir_module *m, arena *a, char **text)
{
	*text = ir_print_string(m);
	return ir_parse(src_from_string(a, "t.opir", *text));
}

/* ---- the zoo --------------------------------------------------------------- */

static const struct {
	const char *model;
	int devices, mbs;
} zoo[] = {
	{"tiny-dense", 2, 4},       {"tiny-dense", 4, 8},     {"tiny-hybrid", 2, 4},
	{"tiny-hybrid", 4, 8},      {"nemotron-h-8b", 4, 8},  {"nemotron-h-8b", 8, 16},
	{"llama-3-8b", 4, 8},       {"llama-3-8b", 8, 16},    {"gemma-7b", 4, 8},
	{"gemma-7b", 8, 16},        {"deepseek-v2-lite", 4, 8}, {"deepseek-v2-lite", 8, 16},
};
static const char *const schedules[] = {"gpipe", "1f1b", "i1f1b", "zbh1", "zbh2", "zbv", "tuned"};

/* The recomputation of the plans load() makes (NULL: the model's). */
static const char *recompute;

static ir_module *load(const char *model, int devices, int mbs, const char *sched, const char *backend)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), model);
	fe_overrides ov = {.devices = devices, .microbatches = mbs, .schedule = sched,
	                   .backend = backend, .chunks = strcmp(sched, "i1f1b") == 0 ? 2 : 0,
	                   .recompute = recompute};
	ir_module *m = fe_load(path, &ov);
	ck_assert_msg(m != NULL, "%s does not load", path);
	return m;
}

/* The runtime's scratch is in the peak: the LM head's is at least its
 * logits, mbs x seq x vocab values of the dtype (bf16 here), on the head's
 * device only (failed before the simulator counted it: the peak was the
 * resident bytes and the arena). */
START_TEST(test_scratch_in_peak)
{
	ir_module *m = load("llama-3-8b", 2, 4, "1f1b", "nccl");
	ck_assert_int_eq(pass_run_default(m, NULL), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	int head = m->stages[m->nstages - 1].device;
	uint64_t logits = (uint64_t)m->train.mbs * (uint64_t)m->model.seq * (uint64_t)m->model.vocab * 2;
	ck_assert_uint_ge(r->dev[head].scratch, logits);
	ck_assert_uint_lt(r->dev[1 - head].scratch, logits);
	for (int d = 0; d < 2; d++)
		ck_assert_uint_eq(r->dev[d].peak_mem,
		                  r->dev[d].resident + r->dev[d].scratch + m->memplan[d].arena);
	sim_free(r);
	ir_free(m);
}
END_TEST

/* One zoo plan, every check; returns the arena over the tuner's estimate
 * (the most, over devices, of resident + scratch + arena minus its peak_mem). */
static void check_plan(const char *model, int P, int M, const char *sched, const char *backend)
{
	char what[128];
	snprintf(what, sizeof what, "%s P=%d M=%d %s %s", model, P, M, sched, backend);
	ir_module *m = load(model, P, M, sched, backend);
	pass_opts o = {.verify_each = true};
	ck_assert_msg(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, &o) == 0, "%s: plan", what);
	ck_assert_ptr_nonnull(m->memplan);
	ck_assert_msg(ir_verify(m) == 0, "%s: does not verify", what);

	/* The simulator's peak is resident + scratch + arena; without the plan it is the
	 * running sum the tuner judged the plan by. */
	sim_result *r = sim_run(m);
	ir_dev_plan *plan = m->memplan;
	m->memplan = NULL;
	sim_result *r0 = sim_run(m);
	m->memplan = plan;
	ck_assert(r && r0);

	double worst_frag = 1, worst_run = 1, over_tuner = 0, peak = 0, peak_tuner = 0;
	uint64_t sum_arena = 0, sum_live = 0, sum_run = 0;
	for (int d = 0; d < P; d++) {
		const ir_dev_plan *p = &m->memplan[d];
		want w = derive(m, d);
		ck_assert_msg(w.n == p->nbufs, "%s D%d: %d buffers, want %d", what, d, p->nbufs, w.n);
		for (int i = 0; i < w.n; i++)
			ck_assert_msg(same_buf(&p->bufs[i], &w.b[i]), "%s D%d: buffer %d differs", what, d, i);
		check_layout(p->bufs, p->nbufs, p->arena, what);
		uint64_t live = live_peak(w.b, w.n, m->devices[d].nops, false);
		ck_assert_msg(p->arena >= live, "%s D%d: arena %llu below the live peak %llu", what, d,
		              (unsigned long long)p->arena, (unsigned long long)live);
		ck_assert_uint_eq(r->dev[d].peak_act, p->arena);
		ck_assert_uint_eq(r->dev[d].peak_mem, r->dev[d].resident + r->dev[d].scratch + p->arena);
		if (live && (double)p->arena / live > worst_frag)
			worst_frag = (double)p->arena / live;
		if (r0->dev[d].peak_act && (double)p->arena / r0->dev[d].peak_act > worst_run)
			worst_run = (double)p->arena / r0->dev[d].peak_act;
		double over = (double)r->dev[d].peak_mem - (double)r0->dev[d].peak_mem;
		over_tuner = over > over_tuner ? over : over_tuner;
		peak = (double)r->dev[d].peak_mem > peak ? (double)r->dev[d].peak_mem : peak;
		peak_tuner = (double)r0->dev[d].peak_mem > peak_tuner ? (double)r0->dev[d].peak_mem : peak_tuner;
		sum_arena += p->arena, sum_live += live, sum_run += r0->dev[d].peak_act;
		free(w.b);
	}
	printf("%-40s arena/live %.4f (worst device %.4f)  arena/running %.3f (worst %.3f)  "
	       "peak %.2f GiB, running-sum peak %.2f GiB (+%.1f %%; one device +%.2f GiB at most)%s\n",
	       what, (double)sum_arena / (double)sum_live, worst_frag,
	       (double)sum_arena / (double)sum_run, worst_run, peak / (1u << 30), peak_tuner / (1u << 30),
	       100 * (peak / peak_tuner - 1), over_tuner / (1u << 30),
	       peak > (double)m->cluster.mem ? "  over the device memory" : "");
	sim_free(r);
	sim_free(r0);

	/* The text form carries the plan, losslessly. */
	arena *a = arena_new();
	char *t1, *t2;
	ir_module *q = reparse(m, a, &t1);
	ck_assert_msg(q && ir_equal(m, q), "%s: parse(print(m)) != m", what);
	ck_assert_int_eq(ir_verify(q), 0);
	t2 = ir_print_string(q);
	ck_assert_msg(strcmp(t1, t2) == 0, "%s: print(parse(t)) != t", what);
	free(t1);
	free(t2);
	ir_free(q);
	arena_free(a);
	ir_free(m);
}

/* Under the sanitizers (OCTO_TEST_QUICK=1) the zoo's P=8, M=16 plans are
 * left to the normal pass: the same code, several times the work. */
START_TEST(test_zoo)
{
	const char *quick = getenv("OCTO_TEST_QUICK");
	if (quick && strcmp(quick, "1") == 0 && zoo[_i].devices > 4)
		return;
	for (size_t s = 0; s < sizeof schedules / sizeof *schedules; s++)
		for (int b = 0; b < IR_NBACKENDS; b++)
			check_plan(zoo[_i].model, zoo[_i].devices, zoo[_i].mbs, schedules[s], ir_backend_names[b]);
}
END_TEST

/* ---- uniform costs ---------------------------------------------------------- */

/* p stages of one mlp layer each (as test_sim.c's), planned through
 * memplan with the given schedule. */
static ir_module *uniform_over(int p, int mbs, ir_schedule sched, ir_backend be, ir_link link)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"u", 64, 256, 16, IR_DTYPE_F32};
	m->train = (ir_train){.mbs = 1, .microbatches = mbs, .steps = 1, .lr = 1e-3, .seed = 1};
	m->cluster = (ir_cluster){.name = "c", .devices = p, .per_node = p, .mem = 1 << 30,
	                          .flops = 1e12, .membw = 1e10, .intra = link, .inter = link};
	m->plan.schedule = sched;
	m->plan.backend = be;
	ir_layer *l = ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	for (int i = 0; i < p; i++) {
		l = ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
		l->attr[IR_ATTR_FFN] = 128;
		l->cost = (ir_cost){.known = true, .f = 1, .b = 1, .w = 1, .flops = 1e9,
		                    .act = 3072, .wstash = 1024, .resident = 1 << 20};
	}
	l = ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	l->cost = (ir_cost){.known = true};
	pass_id ids[] = {PASS_partition, PASS_place, PASS_schedule, PASS_comm, PASS_verify, PASS_memplan};
	ck_assert_int_eq(pass_run(m, ids, 6, NULL), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	return m;
}

static ir_module *uniform(int p, int mbs, ir_schedule sched, ir_backend be)
{
	return uniform_over(p, mbs, sched, be, (ir_link){1e9, 1});
}

/* 1F1B on uniform costs: device d stashes min(p - d, M) activations, and
 * at a B its W stash besides; the stashes alone lay out with no gap. */
START_TEST(test_uniform_1f1b_exact)
{
	for (int p = 1; p <= 6; p++)
		for (int mbs = p; mbs <= 3 * p; mbs += p) {
			ir_module *m = uniform(p, mbs, IR_SCHED_1F1B, IR_BACKEND_NCCL);
			for (int d = 0; d < p; d++) {
				const ir_dev_plan *pl = &m->memplan[d];
				ir_buf *b = malloc(((size_t)pl->nbufs + 1) * sizeof *b);
				int n = 0;
				for (int i = 0; i < pl->nbufs; i++)
					if (pl->bufs[i].kind == IR_BUF_ACT || pl->bufs[i].kind == IR_BUF_WSTASH)
						b[n++] = pl->bufs[i];
				int k = p - d < mbs ? p - d : mbs;
				uint64_t live = live_peak(b, n, m->devices[d].nops, true);
				ck_assert_uint_eq(live, (uint64_t)k * 3072 + 1024);
				ck_assert_uint_eq(memplan_assign(b, n), live);
				check_layout(b, n, live, "uniform compute-only");
				/* All of it: never below the bytes live at one op. */
				ck_assert_uint_ge(pl->arena, live_peak(pl->bufs, pl->nbufs, m->devices[d].nops, false));
				free(b);
			}
			ir_free(m);
		}
}
END_TEST

/* Equal sizes: greedy colouring in program order is optimal, so the arena
 * is the largest number of buffers live at once times their size. */
START_TEST(test_equal_sizes_optimal)
{
	unsigned seed = 12345;
	for (int t = 0; t < 200; t++) {
		int n = 1 + t % 60;
		ir_buf b[64];
		for (int i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			int first = (int)(seed >> 16) % 40;
			seed = seed * 1103515245u + 12345u;
			b[i] = (ir_buf){.kind = IR_BUF_ACT, .first = first, .last = first + (int)(seed >> 16) % 12,
			                .size = 4096};
		}
		uint64_t size = memplan_assign(b, n);
		ck_assert_uint_eq(size, live_peak(b, n, 64, false));
		check_layout(b, n, size, "equal sizes");
	}
}
END_TEST

/* Random sizes and ranges: a valid layout, never under the bound, and the
 * same layout every time. */
START_TEST(test_random_layouts_valid_and_deterministic)
{
	unsigned seed = 777;
	for (int t = 0; t < 300; t++) {
		int n = 1 + t % 80;
		ir_buf b[80], c[80];
		for (int i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			int first = (int)(seed >> 16) % 50;
			seed = seed * 1103515245u + 12345u;
			int len = (int)(seed >> 16) % 20;
			seed = seed * 1103515245u + 12345u;
			uint64_t size = (seed >> 16) % 7 == 0 ? 0 : 1 + (seed >> 16) % 5000;
			if (t % 2)
				size = size / 16 * IR_BUF_ALIGN; /* aligned sizes: the bound below is exact */
			b[i] = (ir_buf){.kind = IR_BUF_RECV, .first = first, .last = first + len, .size = size};
		}
		memcpy(c, b, sizeof b);
		uint64_t size = memplan_assign(b, n);
		ck_assert_uint_ge(size, live_peak(b, n, 80, false));
		check_layout(b, n, size, "random");
		ck_assert_uint_eq(memplan_assign(c, n), size);
		ck_assert(memcmp(b, c, (size_t)n * sizeof *b) == 0);
	}
	ck_assert_uint_eq(memplan_assign(NULL, 0), 0);
}
END_TEST

/* ---- the liveness rules by hand ------------------------------------------------ */

static const ir_buf *buf_of(const ir_module *m, int d, ir_buf_kind k, ir_op_kind v, int s, int mb)
{
	const ir_dev_plan *p = &m->memplan[d];
	for (int i = 0; i < p->nbufs; i++)
		if (p->bufs[i].kind == k && p->bufs[i].value == v && p->bufs[i].stage == s && p->bufs[i].mb == mb)
			return &p->bufs[i];
	ck_abort_msg("no buffer %s %s S%d m%d on D%d", ir_buf_names[k], ir_value_names[v], s, mb, d);
	return NULL;
}

/* Two devices, 1F1B, three micro-batches.  NCCL: D0's send of act S0 m0
 * (op 1) is complete once the wait of grad S1 m0 returns, its receive
 * being later on the in-order stream; MPI: a send is complete only at the
 * end of the step.  Receives live from their post to their consumer. */
START_TEST(test_rules_by_hand)
{
	ir_module *m = uniform(2, 3, IR_SCHED_1F1B, IR_BACKEND_NCCL);
	const ir_device *d0 = &m->devices[0];
	ck_assert_int_eq(d0->ops[1].comm, IR_COMM_SEND);
	const ir_buf *b = buf_of(m, 0, IR_BUF_SEND, IR_OP_F, 0, 0);
	int wait = find(m, 0, IR_COMM_WAIT, IR_OP_B, 1, 0);
	ck_assert_int_gt(find(m, 0, IR_COMM_RECV, IR_OP_B, 1, 0), 1);
	ck_assert_int_eq(b->first, 0);
	ck_assert_int_eq(b->last, wait);
	b = buf_of(m, 0, IR_BUF_RECV, IR_OP_B, 1, 0);
	ck_assert_int_eq(b->first, find(m, 0, IR_COMM_RECV, IR_OP_B, 1, 0));
	ck_assert_int_eq(b->last, find(m, 0, IR_COMM_NONE, IR_OP_B, 0, 0));
	b = buf_of(m, 0, IR_BUF_ACT, IR_OP_F, 0, 2);
	ck_assert_int_eq(b->first, find(m, 0, IR_COMM_NONE, IR_OP_F, 0, 2));
	ck_assert_int_eq(b->last, find(m, 0, IR_COMM_NONE, IR_OP_B, 0, 2));
	ck_assert_uint_eq(b->size, 3072);
	b = buf_of(m, 0, IR_BUF_WSTASH, IR_OP_F, 0, 2);
	ck_assert_int_eq(b->last, find(m, 0, IR_COMM_NONE, IR_OP_W, 0, 2));
	ck_assert_uint_eq(b->size, 1024);
	/* The last sends of the step have no wait after them. */
	b = buf_of(m, 1, IR_BUF_SEND, IR_OP_B, 1, 2);
	ck_assert_int_eq(b->last, m->devices[1].nops - 1);
	ir_free(m);

	m = load("tiny-dense", 2, 3, "zbh1", "mpi");
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			if (op->comm == IR_COMM_SEND)
				ck_assert_int_eq(buf_of(m, d, IR_BUF_SEND, op->kind, op->stage, op->mb)->last,
				                 m->devices[d].nops - 1);
		}
	ir_free(m);

	/* NCCL groups complete as one (the lowering makes none; a hand-written
	 * program may): the wait of a receive grouped with a send completes the
	 * send even when the receive is written first. */
	m = uniform(2, 3, IR_SCHED_1F1B, IR_BACKEND_NCCL);
	ir_op *ops = m->devices[0].ops;
	int j = find(m, 0, IR_COMM_SEND, IR_OP_F, 0, 1), r = find(m, 0, IR_COMM_RECV, IR_OP_B, 1, 0);
	ck_assert_int_eq(r, j + 1);
	ir_op t = ops[j];
	ops[j] = ops[r], ops[r] = t; /* recv grad S1 m0, then send act S0 m1 */
	ir_buf *bs;
	int n = ir_live_buffers(m, 0, &bs), last_alone = -1;
	for (int i = 0; i < n; i++)
		if (bs[i].kind == IR_BUF_SEND && bs[i].stage == 0 && bs[i].mb == 1)
			last_alone = bs[i].last;
	free(bs);
	ops[j].group = ops[r].group = 1;
	n = ir_live_buffers(m, 0, &bs);
	for (int i = 0; i < n; i++)
		if (bs[i].kind == IR_BUF_SEND && bs[i].stage == 0 && bs[i].mb == 1) {
			ck_assert_int_eq(bs[i].last, find(m, 0, IR_COMM_WAIT, IR_OP_B, 1, 0));
			ck_assert_int_gt(last_alone, bs[i].last);
		}
	free(bs);
	ir_free(m);
}
END_TEST

/* All stages on one device hand values over without transfers: pass
 * buffers from the producer to the consumer. */
START_TEST(test_pass_buffers_one_device)
{
	ir_module *m = load("tiny-dense", 1, 2, "i1f1b", "nccl"); /* two stages on D0 */
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	ck_assert_int_eq(m->nstages, 2);
	ck_assert(!ir_lowered(m));
	const ir_buf *b = buf_of(m, 0, IR_BUF_PASS, IR_OP_F, 0, 1);
	ck_assert_int_eq(b->first, find(m, 0, IR_COMM_NONE, IR_OP_F, 0, 1));
	ck_assert_int_eq(b->last, find(m, 0, IR_COMM_NONE, IR_OP_F, 1, 1));
	ck_assert_uint_eq(b->size, sim_boundary_bytes(m));
	b = buf_of(m, 0, IR_BUF_PASS, IR_OP_B, 1, 0);
	ck_assert_int_eq(b->first, find(m, 0, IR_COMM_NONE, IR_OP_B, 1, 0));
	ck_assert_int_eq(b->last, find(m, 0, IR_COMM_NONE, IR_OP_B, 0, 0));
	want w = derive(m, 0);
	ck_assert_int_eq(w.n, m->memplan[0].nbufs);
	ck_assert_int_eq(w.n, 2 * 2 * 2 + 2 * 2); /* act, wstash per (stage, mb); two passes per mb */
	free(w.b);
	ir_free(m);
}
END_TEST

/* Full recomputation (docs/cost-model.md, "Recomputation"): every check of
 * the zoo's on tiny-dense and tiny-hybrid, a split and a chunked schedule
 * (pass buffers), both backends; then the rules by hand: F's stash (and
 * chain) lives during F, the recomp buffer during B, the input F received
 * until B; and the arena of the first device of 1F1B, where P micro-batches
 * are in flight, smaller than without. */
START_TEST(test_recompute_full)
{
	static const char *const models[] = {"tiny-dense", "tiny-hybrid"};
	static const char *const scheds[] = {"1f1b", "zbv"};
	recompute = "full";
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			for (int b = 0; b < IR_NBACKENDS; b++)
				check_plan(models[i], 4, 8, scheds[k], ir_backend_names[b]);
	ir_module *m = load("tiny-dense", 4, 8, "1f1b", "nccl");
	recompute = NULL;
	ir_module *m0 = load("tiny-dense", 4, 8, "1f1b", "nccl");
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_int_eq(pass_run(m0, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	uint64_t vb = sim_boundary_bytes(m);
	for (int s = 0; s < m->nstages; s++) {
		ck_assert_int_eq(m->stages[s].recompute, IR_RECOMP_FULL);
		ck_assert_int_eq(m0->stages[s].recompute, IR_RECOMP_NONE);
		int d = m->stages[s].device, f = find(m, d, IR_COMM_NONE, IR_OP_F, s, 3),
		    bw = find(m, d, IR_COMM_NONE, IR_OP_B, s, 3);
		const ir_buf *b = buf_of(m, d, IR_BUF_ACT, IR_OP_F, s, 3);
		ck_assert_int_eq(b->first, f);
		ck_assert_int_eq(b->last, f);
		ck_assert_uint_eq(b->size, stage_sum(m, s, false) + vb);
		b = buf_of(m, d, IR_BUF_RECOMP, IR_OP_F, s, 3);
		ck_assert_int_eq(b->first, bw);
		ck_assert_int_eq(b->last, bw);
		ck_assert_uint_eq(b->size, stage_sum(m, s, false) + vb);
		ck_assert_uint_eq(ir_stage_kept(m, s), s ? vb : 0);
		ck_assert_uint_eq(ir_stage_kept(m0, s), stage_sum(m0, s, false));
		if (s > 0) {
			b = buf_of(m, d, IR_BUF_RECV, IR_OP_F, s - 1, 3);
			ck_assert_int_eq(b->last, bw);
			ck_assert_int_lt(buf_of(m0, d, IR_BUF_RECV, IR_OP_F, s - 1, 3)->last,
			                 find(m0, d, IR_COMM_NONE, IR_OP_B, s, 3));
		}
	}
	ck_assert_uint_lt(m->memplan[0].arena, m0->memplan[0].arena);
	ir_free(m);
	ir_free(m0);
}
END_TEST

/* Selective recomputation (docs/cost-model.md, "Recomputation"): every
 * check of the zoo's on tiny-hybrid (Mamba-2), a split and a chunked
 * schedule, both backends; then by hand: the act buffer of a stage with
 * mamba layers is its stash less their chunk states (sel_act, from the
 * runtime's own sizes: the layer's act with rt_layer_desc.selective),
 * live from F to B as without, no recomp buffer, the received input dead
 * at F as without; a stage without mamba layers keeps its whole stash;
 * and the arena of the first device of 1F1B between full's and none's. */
START_TEST(test_recompute_selective)
{
	static const char *const scheds[] = {"1f1b", "zbv"};
	recompute = "selective";
	for (int k = 0; k < 2; k++)
		for (int b = 0; b < IR_NBACKENDS; b++)
			check_plan("tiny-hybrid", 4, 8, scheds[k], ir_backend_names[b]);
	ir_module *m = load("tiny-hybrid", 4, 8, "1f1b", "mpi");
	recompute = "full";
	ir_module *mf = load("tiny-hybrid", 4, 8, "1f1b", "mpi");
	recompute = NULL;
	ir_module *m0 = load("tiny-hybrid", 4, 8, "1f1b", "mpi");
	ir_module *ms[] = {m, mf, m0};
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pass_run(ms[i], pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	int mamba = 0, other = 0;
	for (int l = 0; l < m->nlayers; l++) {
		const ir_layer *L = &m->layers[l];
		rt_layer_desc d = cost_rt_desc(m, L);
		rt_sizes all, sel;
		d.selective = 1;
		ck_assert_int_eq(rt_layer_sizes(&d, &sel), RT_OK);
		d.selective = 0;
		ck_assert_int_eq(rt_layer_sizes(&d, &all), RT_OK);
		ck_assert_uint_eq(L->cost.sel_act, cost_stash_round((uint64_t)all.act) -
		                                       cost_stash_round((uint64_t)sel.act));
		ck_assert_int_eq(L->cost.sel_act > 0, L->kind == IR_LAYER_MAMBA);
		ck_assert_int_eq(L->cost.sel_f > 0, L->kind == IR_LAYER_MAMBA);
		ck_assert(L->cost.sel_f < L->cost.f);
	}
	for (int s = 0; s < m->nstages; s++) {
		ck_assert_int_eq(m->stages[s].recompute, IR_RECOMP_SELECTIVE);
		bool has = false;
		for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
			has |= m->layers[l].kind == IR_LAYER_MAMBA;
		mamba += has, other += !has;
		int d = m->stages[s].device, f = find(m, d, IR_COMM_NONE, IR_OP_F, s, 3),
		    bw = find(m, d, IR_COMM_NONE, IR_OP_B, s, 3);
		const ir_buf *b = buf_of(m, d, IR_BUF_ACT, IR_OP_F, s, 3);
		ck_assert_int_eq(b->first, f);
		ck_assert_int_eq(b->last, bw);
		ck_assert_uint_eq(b->size, stage_kept(m, s));
		ck_assert_uint_eq(b->size, ir_stage_kept(m, s));
		ck_assert_uint_eq(ir_stage_redo(m, s), 0);
		if (has)
			ck_assert_uint_lt(b->size, stage_sum(m, s, false));
		else
			ck_assert_uint_eq(b->size, stage_sum(m, s, false));
		if (s > 0)
			ck_assert_int_lt(buf_of(m, d, IR_BUF_RECV, IR_OP_F, s - 1, 3)->last, bw);
		/* The stage's quantities under each mode: selective keeps less than
		 * none and more than full, for a B between theirs, where it has
		 * mamba layers; without, what none keeps, in none's time. */
		uint64_t kept[IR_NRECOMPUTES];
		double tb[IR_NRECOMPUTES];
		for (int rc = 0; rc < IR_NRECOMPUTES; rc++) {
			m->stages[s].recompute = (ir_recompute)rc;
			kept[rc] = ir_stage_kept(m, s);
			tb[rc] = sim_stage_time(m, s, IR_OP_B);
		}
		m->stages[s].recompute = IR_RECOMP_SELECTIVE;
		ck_assert(tb[IR_RECOMP_FULL] > tb[IR_RECOMP_NONE]);
		if (has) {
			ck_assert(kept[IR_RECOMP_FULL] < kept[IR_RECOMP_SELECTIVE] &&
			          kept[IR_RECOMP_SELECTIVE] < kept[IR_RECOMP_NONE]);
			ck_assert(tb[IR_RECOMP_NONE] < tb[IR_RECOMP_SELECTIVE] &&
			          tb[IR_RECOMP_SELECTIVE] < tb[IR_RECOMP_FULL]);
		} else {
			ck_assert_uint_eq(kept[IR_RECOMP_SELECTIVE], kept[IR_RECOMP_NONE]);
			ck_assert_double_eq(tb[IR_RECOMP_SELECTIVE], tb[IR_RECOMP_NONE]);
		}
	}
	ck_assert(mamba > 0 && other > 0);
	/* The tuner's lower bound: B runs the scans' F again, not all of F. */
	double lb[IR_NRECOMPUTES];
	for (int rc = 0; rc < IR_NRECOMPUTES; rc++) {
		m->plan.recompute = (ir_recompute)rc;
		lb[rc] = tune_lower_bound(m);
	}
	m->plan.recompute = IR_RECOMP_SELECTIVE;
	ck_assert(lb[IR_RECOMP_NONE] < lb[IR_RECOMP_SELECTIVE] &&
	          lb[IR_RECOMP_SELECTIVE] < lb[IR_RECOMP_FULL]);
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->memplan[d].nbufs; i++)
			ck_assert_int_ne(m->memplan[d].bufs[i].kind, IR_BUF_RECOMP);
	ck_assert_uint_lt(m->memplan[0].arena, m0->memplan[0].arena);
	ck_assert_uint_gt(m->memplan[0].arena, mf->memplan[0].arena);
	for (int i = 0; i < 3; i++)
		ir_free(ms[i]);
}
END_TEST

/* ---- the text form and the verifier --------------------------------------------- */

/* A small planned module's text. */
static char *small_text(void)
{
	ir_module *m = uniform(2, 2, IR_SCHED_1F1B, IR_BACKEND_NCCL);
	char *t = ir_print_string(m);
	ir_free(m);
	return t;
}

/* Replace the first occurrence of `from` in t by `to` (malloc'd copy). */
static char *edit(const char *t, const char *from, const char *to)
{
	const char *p = strstr(t, from);
	ck_assert_msg(p != NULL, "no '%s' in the text", from);
	size_t n = strlen(t) - strlen(from) + strlen(to);
	char *s = malloc(n + 1);
	memcpy(s, t, (size_t)(p - t));
	strcpy(s + (p - t), to);
	strcat(s, p + strlen(from));
	return s;
}

/* Line of the first occurrence of `what` in t (1-based). */
static int line_of(const char *t, const char *what)
{
	const char *p = strstr(t, what);
	int line = 1;
	for (const char *q = t; q < p; q++)
		line += *q == '\n';
	return line;
}

/* Parse and verify t; the first diagnostic line (malloc'd) or NULL. */
static char *first_error(const char *t, bool *parsed)
{
	arena *a = arena_new();
	tu_capture();
	ir_module *m = ir_parse(src_from_string(a, "t.opir", t));
	*parsed = m != NULL;
	if (m)
		ir_verify(m);
	char *first = tu_release_first_line();
	ir_free(m);
	arena_free(a);
	return first;
}

START_TEST(test_text_form)
{
	char *t = small_text();
	ck_assert_ptr_nonnull(strstr(t, "\nmemplan D0 arena="));
	const char *a0 = strstr(t, "\n  act S0 m0 off=");
	ck_assert_ptr_nonnull(a0);
	ck_assert_ptr_nonnull(strstr(a0, " size=3KiB live=0.."));
	ck_assert_ptr_nonnull(strstr(t, "\n  send act S0 m0 off="));
	ck_assert_ptr_nonnull(strstr(t, "\n  recv grad S1 m0 off="));
	ck_assert_ptr_nonnull(strstr(t, "\nmemplan D1 arena="));
	/* The memory plan follows the proof. */
	ck_assert(strstr(t, "\nproof ") < strstr(t, "\nmemplan D0"));
	bool parsed;
	char *e = first_error(t, &parsed);
	ck_assert_msg(parsed && *e == 0, "%s", e);
	free(e);
	free(t);
}
END_TEST

/* The hand-made overlap of the issue: D0's first two stashes at one offset. */
START_TEST(test_overlap_rejected)
{
	char *t = small_text();
	/* act S0 m1 is live with act S0 m0 (1F1B on the first of two devices
	 * runs both forwards first); put it at m0's offset. */
	const char *p = strstr(t, "  act S0 m0 off="), *q = strchr(p + 16, ' ');
	char off0[32], from[64], to[80];
	snprintf(off0, sizeof off0, "%.*s", (int)(q - p - 16), p + 16);
	p = strstr(t, "  act S0 m1 off=");
	q = strchr(p + 16, ' ');
	snprintf(from, sizeof from, "%.*s", (int)(q - p), p);
	snprintf(to, sizeof to, "  act S0 m1 off=%s", off0);
	char *bad = edit(t, from, to);
	bool parsed;
	char *e = first_error(bad, &parsed);
	ck_assert(parsed);
	char expect[160];
	snprintf(expect, sizeof expect, "t.opir:%d:3: error: D0: buffers act S0 m0 off=%s size=3KiB live=",
	         line_of(bad, "  act S0 m1 off="), off0);
	ck_assert_msg(strncmp(e, expect, strlen(expect)) == 0, "got: %s\nwant: %s...", e, expect);
	snprintf(expect, sizeof expect, "and act S0 m1 off=%s size=3KiB live=", off0);
	ck_assert_msg(strstr(e, expect) && strstr(e, "are both live at op 2 and overlap in bytes "), "%s", e);
	free(e);
	free(bad);

	/* Beyond the arena. */
	p = strstr(t, "memplan D1 arena=");
	q = strstr(p, " {");
	snprintf(from, sizeof from, "%.*s", (int)(q - p), p);
	bad = edit(t, from, "memplan D1 arena=1B");
	e = first_error(bad, &parsed);
	ck_assert_msg(parsed && strstr(e, "error: D1: buffer ") && strstr(e, "does not fit in the arena of 1B"),
	              "%s", e);
	free(e);
	free(bad);

	/* A live range the program does not have. */
	p = strstr(t, "  wstash S0 m0 off=");
	q = strstr(strstr(p, "live="), "..");
	snprintf(from, sizeof from, "%.*s", (int)(q - p) + 2, p);
	snprintf(to, sizeof to, "%.*s0..", (int)(strstr(p, "live=") - p) + 5, p);
	bad = edit(t, from, to);
	e = first_error(bad, &parsed);
	ck_assert_msg(parsed && strstr(e, "error: D0: memplan buffer ") && strstr(e, "the program needs wstash S0 m0"),
	              "%s", e);
	free(e);
	free(bad);

	/* A buffer too few. */
	p = strstr(t, "  wstash S0 m1 off=");
	q = strchr(p, '\n');
	snprintf(from, sizeof from, "%.*s", (int)(q - p) + 1, p);
	bad = edit(t, from, "");
	e = first_error(bad, &parsed);
	ck_assert_msg(parsed && strstr(e, "error: D0: memplan buffer ") == NULL &&
	                  (strstr(e, "the memory plan has") || strstr(e, "the program needs")),
	              "%s", e);
	free(e);
	free(bad);
	free(t);
}
END_TEST

/* Malformed plan lines: one diagnostic at line:col, no module. */
START_TEST(test_parse_errors)
{
	char *t = small_text();
	static const struct {
		const char *from, *to, *msg;
		int col;
	} cases[] = {
		{"  act S0 m0 off=", "  stash S0 m0 off=", "expected a buffer (act, recomp, wstash, recv, send, pass, bucket) or '}', got 'stash'", 3},
		{"  act S0 m0 off=", "  act X0 m0 off=", "expected a stage ('S' and a number), got 'X0'", 7},
		{"  send act S0 m0", "  send data S0 m0", "expected 'act' or 'grad' after 'send', got 'data'", 8},
		{" live=0..", " live=0-", "'live' must be FIRST..LAST (op positions in the program), got '0-", 0},
		{" size=3KiB", " size=3072", "'size' must be a byte count such as 512B, 4KiB or 2GiB, got '3072'", 0},
		{" size=3KiB", " bytes=3000B", "missing field 'size' in memplan buffer", 0},
		{" size=3KiB", " size=3KiB colour=red", "unknown field 'colour' in memplan buffer", 0},
		{"memplan D0 arena=", "memplan D1 arena=", "memplan D1 out of order; expected D0", 9},
		{"memplan D0 arena=", "memplan D0 size=", "expected 'arena=BYTES' after memplan D0, got 'size'", 12},
		{"memplan D0 arena=", "memplan D7 arena=", "memplan D7: the module has 2 devices", 9},
		{"\nproof ", "\n; proof ", "a memory plan needs the device programs and their proof before it", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *bad = edit(t, cases[i].from, cases[i].to);
		bool parsed;
		char *e = first_error(bad, &parsed);
		ck_assert_msg(!parsed, "case %zu parsed", i);
		ck_assert_msg(strstr(e, cases[i].msg) != NULL, "case %zu: %s", i, e);
		char loc[32];
		snprintf(loc, sizeof loc, "t.opir:%d:", line_of(bad, cases[i].to[0] == '\n' ? "memplan D0" : cases[i].to));
		ck_assert_msg(strncmp(e, loc, strlen(loc)) == 0, "case %zu: %s (want %s)", i, e, loc);
		if (cases[i].col) {
			snprintf(loc + strlen(loc), sizeof loc - strlen(loc), "%d: error: ", cases[i].col);
			ck_assert_msg(strncmp(e, loc, strlen(loc)) == 0, "case %zu: %s (want %s)", i, e, loc);
		}
		free(e);
		free(bad);
	}
	/* Unclosed, and a device short. */
	size_t n = strlen(t);
	char *cut = strdup(t);
	cut[n - 2] = 0; /* the last "}\n" */
	bool parsed;
	char *e = first_error(cut, &parsed);
	ck_assert_msg(!parsed && strstr(e, "expected '}' to close memplan D1"), "%s", e);
	free(e);
	char *d1 = strstr(cut, "\nmemplan D1");
	d1[1] = 0;
	e = first_error(cut, &parsed);
	ck_assert_msg(!parsed && strstr(e, "expected a memory plan for each of the 2 devices, got 1"), "%s", e);
	free(e);
	free(cut);
	free(t);
}
END_TEST

/* ---- the pass --------------------------------------------------------------------- */

START_TEST(test_pass_needs_proof_and_is_last)
{
	ck_assert_int_eq(pass_default_pipeline[pass_default_pipeline_len - 1], PASS_memplan);
	ck_assert_int_eq(pass_default_pipeline[pass_default_pipeline_len - 2], PASS_verify);
	ir_module *m = uniform(2, 2, IR_SCHED_1F1B, IR_BACKEND_NCCL);
	char *before = ir_print_string(m);
	/* Idempotent. */
	pass_id again[] = {PASS_memplan};
	ck_assert_int_eq(pass_run(m, again, 1, NULL), 0);
	char *after = ir_print_string(m);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
	/* New programs drop the plan with the proof. */
	pass_id resched[] = {PASS_schedule};
	ck_assert_int_eq(pass_run(m, resched, 1, NULL), 0);
	ck_assert_ptr_null(m->memplan);
	tu_capture();
	ck_assert_int_eq(pass_run(m, again, 1, NULL), -1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "memplan: the programs have no deadlock-freedom proof"));
	tu_release();
	ir_free(m);
}
END_TEST

/* P = 64, M = 256 1F1B: plan, verify and simulate quickly (CK timeout). */
START_TEST(test_large)
{
	ir_module *m = uniform(64, 256, IR_SCHED_1F1B, IR_BACKEND_MPI);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	for (int d = 0; d < 64; d++)
		ck_assert_uint_eq(r->dev[d].peak_mem, r->dev[d].resident + r->dev[d].scratch + m->memplan[d].arena);
	sim_free(r);
	ir_free(m);
}
END_TEST

/* Many buffers per device: 32768 micro-batches (over 10^5 buffers a
 * device).  The quadratic layouts are skipped, the program-order sweep
 * lays them out; the plan verifies (no two live buffers share a byte) and
 * is the simulator's peak.  GPipe holds every stash at once, 1F1B on mpi
 * every send to the end of the step: both ends of the live-set range.
 * Quadratic placement, verification or simulation would not end within
 * the suite's timeout. */
START_TEST(test_many_buffers)
{
	static const struct {
		ir_schedule s;
		ir_backend b;
	} c[] = {{IR_SCHED_1F1B, IR_BACKEND_MPI}, {IR_SCHED_1F1B, IR_BACKEND_NCCL},
	         {IR_SCHED_GPIPE, IR_BACKEND_NCCL}};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		/* Links without cost: transfers that queue up on a link are the
		 * simulator's quadratic case, not the memory plan's. */
		ir_module *m = uniform_over(2, 32768, c[i].s, c[i].b, (ir_link){INFINITY, 0});
		sim_result *r = sim_run(m);
		ck_assert_ptr_nonnull(r);
		for (int d = 0; d < 2; d++) {
			ck_assert_int_gt(m->memplan[d].nbufs, 100000);
			ck_assert_uint_eq(r->dev[d].peak_mem, r->dev[d].resident + r->dev[d].scratch + m->memplan[d].arena);
		}
		sim_free(r);
		ir_free(m);
	}
}
END_TEST

static Suite *memplan_suite(void)
{
	Suite *s = suite_create("memplan");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_zoo, 0, (int)(sizeof zoo / sizeof *zoo));
	tcase_add_test(tc, test_uniform_1f1b_exact);
	tcase_add_test(tc, test_scratch_in_peak);
	tcase_add_test(tc, test_equal_sizes_optimal);
	tcase_add_test(tc, test_random_layouts_valid_and_deterministic);
	tcase_add_test(tc, test_rules_by_hand);
	tcase_add_test(tc, test_pass_buffers_one_device);
	tcase_add_test(tc, test_recompute_full);
	tcase_add_test(tc, test_recompute_selective);
	tcase_add_test(tc, test_text_form);
	tcase_add_test(tc, test_overlap_rejected);
	tcase_add_test(tc, test_parse_errors);
	tcase_add_test(tc, test_pass_needs_proof_and_is_last);
	tcase_add_test(tc, test_large);
	suite_add_tcase(s, tc);
	TCase *big = tcase_create("many");
	tcase_set_timeout(big, 120);
	tcase_add_test(big, test_many_buffers);
	suite_add_tcase(s, big);
	return s;
}

int main(void)
{
	return tu_run(memplan_suite());
}
