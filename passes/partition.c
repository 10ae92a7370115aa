/* partition.c: the `partition` pass.
 *
 * Reads the layers (and, for `balanced`, their costs), the plan options
 * (partition, given, chunks, schedule) and the device count; writes the
 * stage list (contiguous, in order, unplaced) and drops any earlier
 * placement or programs.  Guarantees: every layer in exactly one stage,
 * stages in layer order, none empty.
 *
 * The stage count is devices x chunks, except for zbv, which always cuts
 * 2 x devices stages (two per device, in a V) and accepts chunks of 1 or 2.
 *
 * uniform: stages of equal layer counts, counting only the layers between
 * the embedding and the head; the embedding joins the first stage and the
 * head the last, as Megatron-LM does.  When the count does not divide, the
 * stages after the first take one extra layer each (the first already
 * carries the embedding).  With fewer body layers than stages, every layer
 * counts, embedding and head included.
 * balanced: the cut that minimises the largest stage time F + B + W (the
 * layers' costs, from the `cost` pass), exactly: a binary search for the
 * smallest feasible bottleneck T, then, among the cuts whose stages all
 * take at most T, the one whose later stages are as full as possible
 * (1F1B-like schedules stash the most micro-batches on the first stages,
 * so ties go to lighter early stages).
 * given: the layer counts of plan.given, in order.
 *
 * A plan of more than PASS_MAX_PAIRS (stage, micro-batch) pairs is refused
 * here, before any pass builds its programs. */
#include "pass.h"

#include <string.h>

static ir_loc plan_loc(const ir_module *m)
{
	return ir_loc_or(m->plan_loc, m->loc);
}

/* A given partition covers the layers, every stage at least one. */
static int check_given(const ir_module *m, pass_ctx *cx)
{
	const ir_plan_opts *p = &m->plan;
	int first = 0;
	for (int s = 0; s < p->ngiven; s++) {
		int last = first + (int)p->given[s] - 1;
		if (p->given[s] < 1 || last >= m->nlayers) {
			diag_sink_error(cx->diag, plan_loc(m), "given partition: stage %d (%lld layers) runs past the %d layers of the model",
			                s, (long long)p->given[s], m->nlayers);
			return -1;
		}
		first = last + 1;
	}
	if (first != m->nlayers) {
		diag_sink_error(cx->diag, plan_loc(m), "given partition covers %d of the %d layers", first, m->nlayers);
		return -1;
	}
	return 0;
}

static void partition_given(ir_module *m)
{
	const ir_plan_opts *p = &m->plan;
	for (int s = 0, first = 0; s < p->ngiven; s++) {
		int last = first + (int)p->given[s] - 1;
		ir_add_stage(m, first, last, -1, (ir_loc){0});
		first = last + 1;
	}
}

/* Layers of stage s in the uniform cut of L layers into S stages. */
static int uniform_count(int L, int S, int s)
{
	int body = L - 2, skip = 1;
	if (body < S) /* too few: count every layer */
		body = L, skip = 0;
	int n = S == 1 ? body : body / S + (s >= 1 && s <= body % S);
	if (skip && s == 0)
		n += 1; /* the embedding */
	if (skip && s == S - 1)
		n += 1; /* the head */
	return n;
}

static void partition_uniform(ir_module *m, int S)
{
	int first = 0;
	for (int s = 0; s < S; s++) {
		int n = uniform_count(m->nlayers, S, s);
		ir_add_stage(m, first, first + n - 1, -1, (ir_loc){0});
		first += n;
	}
	ir_assert(first == m->nlayers);
}

const char *pass_partition_label(const ir_module *m)
{
	if (!m->nstages || m->plan.partition == IR_PART_GIVEN || m->plan.schedule != IR_SCHED_TUNED)
		return ir_partition_names[m->plan.partition];
	for (int s = 0, first = 0; s < m->nstages; s++) {
		int n = uniform_count(m->nlayers, m->nstages, s);
		if (m->stages[s].first != first || m->stages[s].last != first + n - 1)
			return "tuned";
		first += n;
	}
	return "uniform";
}

/* Can the layers be cut into at most S stages of time <= T each?  Stage
 * times are differences of the prefix sums `pre`, which are monotone in
 * both ends, so every comparison below agrees with every other. */
static bool fits(const double *pre, int L, int S, double T)
{
	int stages = 0;
	for (int i = 0; i < L; stages++) {
		if (pre[i + 1] - pre[i] > T)
			return false;
		int j = i + 1;
		while (j < L && pre[j + 1] - pre[i] <= T)
			j++;
		i = j;
	}
	return stages <= S;
}

static uint64_t bits_of(double x)
{
	uint64_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static double of_bits(uint64_t u)
{
	double x;
	memcpy(&x, &u, sizeof x);
	return x;
}

static void partition_balanced(ir_module *m, int S, arena *scratch)
{
	int L = m->nlayers;
	double *pre = arena_alloc(scratch, (size_t)(L + 1) * sizeof *pre);
	int *start = arena_alloc(scratch, (size_t)S * sizeof *start);
	pre[0] = 0;
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		pre[l + 1] = pre[l] + (c->f + c->b + c->w);
	}
	/* Non-negative doubles order as their bit patterns, and feasibility
	 * only changes at a stage time, so the smallest feasible bit pattern
	 * is the optimal bottleneck itself. */
	uint64_t lo = 0, hi = bits_of(pre[L]);
	ir_assert(fits(pre, L, S, pre[L]));
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (fits(pre, L, S, of_bits(mid)))
			hi = mid;
		else
			lo = mid + 1;
	}
	double T = of_bits(lo);
	/* From the back: each stage takes as many layers as fit in T while
	 * leaving one for every stage before it.  If any cut fits in T, the
	 * boundaries this picks are never after that cut's, so the first
	 * stage, which takes the rest, fits too. */
	int end = L;
	for (int k = S - 1; k > 0; k--) {
		int b = end - 1;
		while (b - 1 >= k && pre[end] - pre[b - 1] <= T)
			b--;
		start[k] = b;
		end = b;
	}
	start[0] = 0;
	ir_assert(pre[end] - pre[0] <= T);
	for (int k = 0; k < S; k++)
		ir_add_stage(m, start[k], k + 1 < S ? start[k + 1] - 1 : L - 1, -1, (ir_loc){0});
}

/* Refuse, before any program is built, a plan of more (stage, micro-batch)
 * pairs than PASS_MAX_PAIRS. */
static int check_size(const ir_module *m, pass_ctx *cx, int64_t nstages)
{
	int64_t M = ir_local_mb(m);
	if (nstages * M <= PASS_MAX_PAIRS)
		return 0;
	diag_sink_error(cx->diag, ir_loc_or(m->train_loc, m->loc),
	                "%lld micro-batches on %lld stages make %lld (stage, micro-batch) pairs; a plan holds "
	                "at most %d (about 3 KiB of planner memory each): use at most %lld micro-batches "
	                "here",
	                (long long)M, (long long)nstages, (long long)(nstages * M), PASS_MAX_PAIRS,
	                (long long)(PASS_MAX_PAIRS / nstages));
	return -1;
}

/* Every check the partition makes of the plan options; *nstages: the
 * stage count it cuts. */
static int check(const ir_module *m, pass_ctx *cx, int *nstages)
{
	const ir_plan_opts *p = &m->plan;
	if (p->partition == IR_PART_GIVEN) {
		*nstages = p->ngiven;
		return check_size(m, cx, p->ngiven) || check_given(m, cx) ? -1 : 0;
	}
	int64_t chunks = ir_plan_chunks(p);
	if (chunks == 0) {
		diag_sink_error(cx->diag, ir_loc_or(m->chunks_loc, plan_loc(m)),
		                "schedule zbv runs 2 chunks per device (a V); chunks=%lld does not apply",
		                (long long)p->chunks);
		return -1;
	}
	int64_t n = ir_pipe_devices(m) * chunks;
	if (n > m->nlayers) {
		diag_sink_error(cx->diag, ir_loc_or(m->cluster_at.devices, plan_loc(m)),
		                "cannot cut %d layers into %lld stages (%lld devices x %lld chunks)",
		                m->nlayers, (long long)n, (long long)ir_pipe_devices(m),
		                (long long)chunks);
		return -1;
	}
	if (check_size(m, cx, n))
		return -1;
	if (p->partition == IR_PART_BALANCED && !pass_costed(m)) {
		diag_sink_error(cx->diag, plan_loc(m), "balanced partition needs layer costs; run the 'cost' pass first");
		return -1;
	}
	*nstages = (int)n;
	return 0;
}

int pass_check_plan(const ir_module *m, pass_ctx *cx)
{
	int nstages;
	return check(m, cx, &nstages) || pass_check_placement(m, cx, nstages) ? -1 : 0;
}

int pass_partition(ir_module *m, pass_ctx *cx)
{
	ir_clear_devices(m);
	ir_clear_stages(m);
	int nstages;
	if (check(m, cx, &nstages))
		return -1;
	if (m->plan.partition == IR_PART_GIVEN)
		partition_given(m);
	else if (m->plan.partition == IR_PART_BALANCED)
		partition_balanced(m, nstages, cx->scratch);
	else
		partition_uniform(m, nstages);
	return 0;
}
