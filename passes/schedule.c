/* schedule.c: the `schedule` pass.
 *
 * Reads the placed stages, the micro-batch count and plan.schedule; writes
 * one program per device: the order of F, B and W of every (stage,
 * micro-batch) that device runs.  Guarantees what ir_verify checks (one F,
 * B, W each, in that order, on the stage's device) and that the order
 * respects the pipeline's data flow, so that the programs can run.  A
 * placement a schedule cannot serve (1F1B on a device holding two stages,
 * interleaving whose micro-batches do not fill its groups) is a
 * diagnostic, never a crash.
 *
 * The baselines order work as their authors do (docs/schedules.md has the
 * orders, their closed forms and why they hold).  Two shapes serve all six:
 *
 * Every schedule runs a stage's W's in micro-batch order (ir_verify checks
 * it): the runtime adds weight gradients in that order, so that every plan
 * gives the same weights.
 *
 * - phased: on every device, a forward order and a backward order, a
 *   warm-up count of forwards, then one forward and one backward at a time,
 *   then the remaining backwards; W follows its B at once or is held back
 *   in a FIFO of a fixed depth.
 *     gpipe  every forward first (each stage of the device in turn, its
 *            micro-batches in order), then every backward in reverse, a
 *            stage's W's after its last B (the backward split).
 *     1f1b   PipeDream-flush, Megatron-LM's default: the stage at pipeline
 *            position s warms up with min(S-1-s, M) forwards.
 *     i1f1b  Megatron-LM's interleaved 1F1B: V >= 2 chunks per device
 *            (chunks=1, the default, means 2: ir_plan_chunks), micro-
 *            batches in groups of p, the warm-up of Megatron's code.
 *     zbh1   ZB-H1: 1F1B's order with B and W split; the stage at position
 *            s keeps its s most recent W's back, which fills its cool-down.
 * - greedy: a list scheduler over unit-time ops, as the Zero Bubble
 *   authors build their schedules, with a cap on the (stage, micro-batch)
 *   pairs a device holds between F and W; see schedule_greedy.
 *     zbh2   ZB-H2: one stage per device, 2p-1 pairs held on every device,
 *            backward first (the first device warms up with 2p-1
 *            forwards).
 *     zbv    ZB-V: 2p stages in a V (stage k and 2p-1-k share a device),
 *            2p pairs of half a 1F1B stage held per device (1F1B's peak
 *            on its first device), forward first. */
#include "pass.h"

#include <stdlib.h>

typedef struct work {
	int stage, mb;
} work;

static ir_loc plan_loc(const ir_module *m)
{
	return ir_loc_or(m->plan_loc, m->loc);
}

/* ---- W held back: a FIFO per device ------------------------------------- */

typedef struct wqueue {
	work *q;
	int head, n, cap;
} wqueue;

static void wq_push(wqueue *w, int stage, int mb)
{
	ir_assert(w->n < w->cap);
	w->q[(w->head + w->n++) % w->cap] = (work){stage, mb};
}

static work wq_pop(wqueue *w)
{
	ir_assert(w->n > 0);
	work x = w->q[w->head];
	w->head = (w->head + 1) % w->cap, w->n--;
	return x;
}

static void wq_emit_oldest(ir_module *m, int dev, wqueue *w)
{
	work x = wq_pop(w);
	ir_add_op(m, dev, IR_OP_W, x.stage, x.mb, (ir_loc){0});
}

/* ---- shape 1: warm-up, one forward one backward, cool-down -------------- */

typedef struct phased {
	work *fwd, *bwd; /* the device's n forwards and n backwards, in order */
	int n;
	int warm;        /* forwards before the first backward */
	int defer;       /* W's held back; 0: each W right after its B */
} phased;

static void emit_b(ir_module *m, int dev, wqueue *w, int defer, work b)
{
	ir_add_op(m, dev, IR_OP_B, b.stage, b.mb, (ir_loc){0});
	wq_push(w, b.stage, b.mb);
	while (w->n > defer)
		wq_emit_oldest(m, dev, w);
}

static void emit_phased(ir_module *m, pass_ctx *cx, int dev, const phased *ph)
{
	wqueue w = {.q = arena_calloc(cx->scratch, (size_t)ph->n + 1, sizeof(work)), .cap = ph->n + 1};
	ir_assert(ph->warm >= 0 && ph->warm <= ph->n);
	for (int i = 0; i < ph->warm; i++)
		ir_add_op(m, dev, IR_OP_F, ph->fwd[i].stage, ph->fwd[i].mb, (ir_loc){0});
	for (int i = 0; i < ph->n - ph->warm; i++) {
		const work *f = &ph->fwd[ph->warm + i];
		ir_add_op(m, dev, IR_OP_F, f->stage, f->mb, (ir_loc){0});
		emit_b(m, dev, &w, ph->defer, ph->bwd[i]);
	}
	for (int i = ph->n - ph->warm; i < ph->n; i++)
		emit_b(m, dev, &w, ph->defer, ph->bwd[i]);
	while (w.n)
		wq_emit_oldest(m, dev, &w);
}

/* ---- placement shapes ---------------------------------------------------- */

/* 1F1B and the H schedules run one stage per device (any one-to-one
 * placement).  Returns 0, or -1 after a diagnostic. */
static int check_one_stage_per_device(const ir_module *m, pass_ctx *cx)
{
	int *owner = arena_calloc(cx->scratch, (size_t)ir_pipe_devices(m), sizeof *owner);
	int rc = 0;
	for (int d = 0; d < ir_pipe_devices(m); d++)
		owner[d] = -1;
	for (int s = 0; s < m->nstages && !rc; s++) {
		int d = m->stages[s].device;
		if (owner[d] >= 0) {
			bool chunked = m->plan.chunks > 1 && m->plan.partition != IR_PART_GIVEN;
			diag_sink_error(cx->diag, chunked ? ir_loc_or(m->chunks_loc, plan_loc(m)) : plan_loc(m),
			                "schedule %s runs one stage per device, but D%d holds S%d and S%d%s",
			                ir_schedule_names[m->plan.schedule], d, owner[d], s,
			                chunked ? " (chunks above 1 are for gpipe, i1f1b and zbv)" : "");
			rc = -1;
		}
		owner[d] = s;
	}
	return rc;
}

/* Interleaving needs p x V stages with stage k on the device of stage k-p
 * (stage k on device k mod p by default).  Returns V, or 0 after a
 * diagnostic. */
static int interleaved_chunks(const ir_module *m, pass_ctx *cx)
{
	int p = (int)ir_pipe_devices(m), S = m->nstages;
	if (S % p) {
		diag_sink_error(cx->diag, plan_loc(m), "schedule i1f1b interleaves chunks over the %d devices, but the plan has %d stages (not a multiple of %d)",
		                p, S, p);
		return 0;
	}
	int *seen = arena_calloc(cx->scratch, (size_t)p, sizeof *seen);
	int twice = -1, bad = -1;
	for (int s = 0; s < p && twice < 0; s++)
		if (seen[m->stages[s].device]++)
			twice = s;
	for (int s = p; s < S && twice < 0 && bad < 0; s++)
		if (m->stages[s].device != m->stages[s - p].device)
			bad = s;
	if (twice >= 0)
		diag_sink_error(cx->diag, plan_loc(m), "schedule i1f1b needs S0..S%d on %d different devices, but S%d shares D%d with an earlier one",
		                p - 1, p, twice, m->stages[twice].device);
	else if (bad >= 0)
		diag_sink_error(cx->diag, plan_loc(m), "schedule i1f1b needs stage k on the device of stage k-%d (Megatron-LM's interleaving, place's default), but S%d is on D%d",
		                p, bad, m->stages[bad].device);
	return twice >= 0 || bad >= 0 ? 0 : S / p;
}

/* ZB-V needs 2p stages with stages k and 2p-1-k on one device, a device
 * each (place's default for zbv).  Returns 0, or -1 after a diagnostic. */
static int check_v_shape(const ir_module *m, pass_ctx *cx)
{
	int p = (int)ir_pipe_devices(m), S = m->nstages;
	if (S != 2 * p) {
		diag_sink_error(cx->diag, plan_loc(m), "schedule zbv runs two stages per device in a V: %d stages on %d devices, the plan has %d",
		                2 * p, p, S);
		return -1;
	}
	int *seen = arena_calloc(cx->scratch, (size_t)p, sizeof *seen);
	int bad = -1;
	for (int s = 0; s < p && bad < 0; s++)
		if (seen[m->stages[s].device]++ || m->stages[S - 1 - s].device != m->stages[s].device)
			bad = s;
	if (bad >= 0) {
		diag_sink_error(cx->diag, plan_loc(m), "schedule zbv needs S%d and S%d alone on one device (a V), but they are on D%d and D%d",
		                bad, S - 1 - bad, m->stages[bad].device, m->stages[S - 1 - bad].device);
		return -1;
	}
	return 0;
}

/* ---- gpipe, 1f1b, zbh1, i1f1b -------------------------------------------- */

/* Every forward, then every backward in reverse; a stage's W's follow its
 * last B (that of m0), in micro-batch order, as every program must run
 * them (ir_verify): W right after its B would add the gradients in
 * reverse.  The makespan is the same, (M + p - 1)(F + B) + M W: each W
 * fills the time the device would wait for the next gradient anyway. */
static int schedule_gpipe(ir_module *m)
{
	int M = (int)ir_local_mb(m);
	ir_alloc_devices(m);
	for (int d = 0; d < m->ndevices; d++) {
		for (int s = 0; s < m->nstages; s++)
			for (int i = 0; s < m->nstages && m->stages[s].device == d && i < M; i++)
				ir_add_op(m, d, IR_OP_F, s, i, (ir_loc){0});
		for (int s = m->nstages - 1; s >= 0; s--) {
			if (m->stages[s].device != d)
				continue;
			for (int i = M - 1; i >= 0; i--)
				ir_add_op(m, d, IR_OP_B, s, i, (ir_loc){0});
			for (int i = 0; i < M; i++)
				ir_add_op(m, d, IR_OP_W, s, i, (ir_loc){0});
		}
	}
	return 0;
}

/* 1F1B, and ZB-H1 with `zb`: the stage at position s holds s W's back. */
static int schedule_1f1b(ir_module *m, pass_ctx *cx, bool zb)
{
	int S = m->nstages, M = (int)ir_local_mb(m);
	if (check_one_stage_per_device(m, cx) < 0)
		return -1;
	work *seq = arena_calloc(cx->scratch, (size_t)M, sizeof *seq);
	ir_alloc_devices(m);
	for (int s = 0; s < S; s++) {
		for (int i = 0; i < M; i++)
			seq[i] = (work){s, i};
		int warm = S - 1 - s < M ? S - 1 - s : M;
		emit_phased(m, cx, m->stages[s].device, &(phased){seq, seq, M, warm, zb ? s : 0});
	}
	return 0;
}

/* Megatron-LM's forward_backward_pipelining_with_interleaving: on the device
 * of rank r, the k-th forward runs chunk (k mod pV) / p of micro-batch
 * (k / pV) p + k mod p; the k-th backward the same with the chunks
 * reversed; (p-r-1)·2 + (V-1)·p warm-up forwards. */
static int schedule_i1f1b(ir_module *m, pass_ctx *cx)
{
	int V = interleaved_chunks(m, cx);
	if (!V)
		return -1;
	int p = (int)ir_pipe_devices(m), M = (int)ir_local_mb(m);
	if (V == 1) {
		diag_sink_error(cx->diag, plan_loc(m), "schedule i1f1b needs 2 or more chunks per device; %d stages on %d devices is 1f1b",
		                m->nstages, p);
		return -1;
	}
	if (M % p) {
		diag_sink_error(cx->diag, ir_loc_or(m->microbatches_loc, plan_loc(m)), "schedule i1f1b (Megatron-LM's interleaved 1F1B) runs micro-batches in groups of the pipeline depth: m=%d is not a multiple of p=%d",
		                M, p);
		return -1;
	}
	int n = M * V;
	work *fwd = arena_calloc(cx->scratch, (size_t)n, sizeof *fwd);
	work *bwd = arena_calloc(cx->scratch, (size_t)n, sizeof *bwd);
	ir_alloc_devices(m);
	for (int r = 0; r < p; r++) {
		for (int k = 0; k < n; k++) {
			int g = k / (p * V), c = k % (p * V) / p, mb = g * p + k % p;
			fwd[k] = (work){c * p + r, mb};
			bwd[k] = (work){(V - 1 - c) * p + r, mb};
		}
		int warm = (p - r - 1) * 2 + (V - 1) * p;
		emit_phased(m, cx, m->stages[r].device, &(phased){fwd, bwd, n, warm < n ? warm : n, 0});
	}
	return 0;
}

/* ---- shape 2: the greedy list scheduler (zbh2, zbv) ---------------------- */

/* Unit-time list scheduling, as the Zero Bubble authors build ZB-H2 and
 * ZB-V.  At step t every device starts at most one op whose input was
 * produced before t, from three slots:
 *   F  its deepest ready forward that fits in memory; if a ready forward
 *      does not fit, its oldest pending W instead (W frees memory);
 *   B  its oldest ready backward (the deeper stage on a tie);
 *   W  its oldest pending W;
 * tried in the order F, B, W (zbv) or B, F, W (zbh2).  Memory counts the
 * (stage, micro-batch) pairs between F and W on the device, as the Zero
 * Bubble papers count a micro-batch's activations (B frees some, W the
 * rest), and stays within cap[d].  A forward of the device's first stage
 * also leaves room for one deeper forward: it needs fewer than cap[d]-1
 * micro-batches waiting on the device for their deeper forward.
 *
 * That rule makes the scheduler deadlock-free: take the oldest unfinished
 * micro-batch i.  A B or W of it that is ready always runs (or another
 * does); a forward of i at the device's first stage finds the device empty
 * of later micro-batches (stages run their micro-batches in order); a
 * deeper forward of i is blocked only if all cap[d] pairs are first-stage
 * forwards waiting for it, which the rule forbids.
 *
 * Only devices that an op ending at t can concern are looked at in step
 * t, so the cost is O(ops x stages per device). */
typedef struct greedy {
	ir_module *m;
	int S, M, P;
	const int *cap;
	bool forward_first;
	int *done;     /* per (stage, mb, kind): step + 1 when started, 0: not yet */
	int *nf, *nb;  /* per stage: next micro-batch to forward, to backward */
	int **mine;    /* per device: its stages, deepest first */
	int *nmine;
	int *held;     /* per device: (stage, mb) pairs between F and W */
	int *waiting;  /* per device: micro-batches past its first stage, not its deepest */
	wqueue *wq;
} greedy;

static int *gdone(const greedy *g, int stage, int mb, ir_op_kind k)
{
	return &g->done[((size_t)stage * g->M + mb) * IR_NOPS + k];
}

static bool ready_by(const greedy *g, int stage, int mb, ir_op_kind k, int t)
{
	int d = *gdone(g, stage, mb, k);
	return d && d <= t;
}

static ir_op oldest_w(const greedy *g, int d)
{
	if (!g->wq[d].n)
		return (ir_op){IR_NOPS, -1, -1};
	work w = g->wq[d].q[g->wq[d].head];
	return (ir_op){IR_OP_W, w.stage, w.mb};
}

static ir_op slot_f(const greedy *g, int d, int t)
{
	int n = g->nmine[d], first = g->mine[d][n - 1];
	bool blocked = false;
	for (int j = 0; j < n; j++) {
		int s = g->mine[d][j], i = g->nf[s];
		if (i >= g->M || (s > 0 && !ready_by(g, s - 1, i, IR_OP_F, t)))
			continue;
		bool fits = g->held[d] < g->cap[d] &&
		            (n == 1 || s != first || g->waiting[d] + 1 < g->cap[d]);
		if (fits)
			return (ir_op){IR_OP_F, s, i};
		blocked = true;
	}
	return blocked ? oldest_w(g, d) : (ir_op){IR_NOPS, -1, -1};
}

static ir_op slot_b(const greedy *g, int d, int t)
{
	ir_op best = {IR_NOPS, -1, -1};
	for (int j = 0; j < g->nmine[d]; j++) {
		int s = g->mine[d][j], i = g->nb[s];
		if (i >= g->M)
			continue;
		bool in = s == g->S - 1 ? ready_by(g, s, i, IR_OP_F, t) : ready_by(g, s + 1, i, IR_OP_B, t);
		if (in && (best.kind == IR_NOPS || i < best.mb))
			best = (ir_op){IR_OP_B, s, i};
	}
	return best;
}

/* The op device d starts at step t, or kind IR_NOPS for none. */
static ir_op pick(const greedy *g, int d, int t)
{
	ir_op op = g->forward_first ? slot_f(g, d, t) : slot_b(g, d, t);
	if (op.kind == IR_NOPS)
		op = g->forward_first ? slot_b(g, d, t) : slot_f(g, d, t);
	if (op.kind == IR_NOPS)
		op = oldest_w(g, d);
	return op;
}

static void start(greedy *g, int d, ir_op op, int t)
{
	int n = g->nmine[d];
	ir_add_op(g->m, d, op.kind, op.stage, op.mb, (ir_loc){0});
	*gdone(g, op.stage, op.mb, op.kind) = t + 1;
	if (op.kind == IR_OP_F) {
		g->nf[op.stage]++, g->held[d]++;
		if (n > 1)
			g->waiting[d] += op.stage == g->mine[d][n - 1] ? 1 : op.stage == g->mine[d][0] ? -1 : 0;
	} else if (op.kind == IR_OP_B) {
		g->nb[op.stage]++;
		wq_push(&g->wq[d], op.stage, op.mb);
	} else {
		work x = wq_pop(&g->wq[d]);
		ir_assert(x.stage == op.stage && x.mb == op.mb);
		g->held[d]--;
	}
}

static void schedule_greedy(ir_module *m, pass_ctx *cx, const int *cap, bool forward_first)
{
	greedy g = {.m = m, .S = m->nstages, .M = (int)ir_local_mb(m),
	            .P = (int)ir_pipe_devices(m), .cap = cap, .forward_first = forward_first};
	g.done = arena_calloc(cx->scratch, (size_t)g.S * g.M * IR_NOPS, sizeof *g.done);
	g.nf = arena_calloc(cx->scratch, (size_t)g.S, sizeof *g.nf);
	g.nb = arena_calloc(cx->scratch, (size_t)g.S, sizeof *g.nb);
	g.mine = arena_calloc(cx->scratch, (size_t)g.P, sizeof *g.mine);
	g.nmine = arena_calloc(cx->scratch, (size_t)g.P, sizeof *g.nmine);
	g.held = arena_calloc(cx->scratch, (size_t)g.P, sizeof *g.held);
	g.waiting = arena_calloc(cx->scratch, (size_t)g.P, sizeof *g.waiting);
	g.wq = arena_calloc(cx->scratch, (size_t)g.P, sizeof *g.wq);
	for (int s = 0; s < g.S; s++)
		g.nmine[m->stages[s].device]++;
	for (int d = 0; d < g.P; d++) {
		g.mine[d] = arena_calloc(cx->scratch, (size_t)g.nmine[d], sizeof **g.mine);
		g.wq[d] = (wqueue){.q = arena_calloc(cx->scratch, (size_t)g.nmine[d] * g.M, sizeof(work)),
		                   .cap = g.nmine[d] * g.M};
		g.nmine[d] = 0;
	}
	for (int s = g.S - 1; s >= 0; s--) {
		int d = m->stages[s].device;
		g.mine[d][g.nmine[d]++] = s;
	}

	/* The devices to look at in this step and in the next. */
	int *cur = arena_calloc(cx->scratch, (size_t)g.P, sizeof *cur);
	int *next = arena_calloc(cx->scratch, (size_t)g.P, sizeof *next);
	int *mark = arena_calloc(cx->scratch, (size_t)g.P, sizeof *mark);
	int ncur = 0, nnext = 0;
	for (int d = 0; d < g.P; d++)
		if (g.nmine[d])
			cur[ncur++] = d;
	int64_t left = (int64_t)g.S * g.M * IR_NOPS;
	for (int t = 0; left > 0; t++) {
		if (!ncur)
			ir_bug("greedy schedule stalls at step %d with %lld ops left", t, (long long)left);
		nnext = 0;
		for (int k = 0; k < ncur; k++) {
			int d = cur[k];
			ir_op op = pick(&g, d, t);
			if (op.kind == IR_NOPS)
				continue;
			start(&g, d, op, t);
			left--;
			/* Who may have something new at t + 1: d itself, and the
			 * device that takes this op's output. */
			int wake[2] = {d, -1};
			if (op.kind == IR_OP_F && op.stage + 1 < g.S)
				wake[1] = m->stages[op.stage + 1].device;
			else if (op.kind == IR_OP_B && op.stage > 0)
				wake[1] = m->stages[op.stage - 1].device;
			for (int w = 0; w < 2; w++)
				if (wake[w] >= 0 && mark[wake[w]] != t + 1)
					mark[wake[w]] = t + 1, next[nnext++] = wake[w];
		}
		int *tmp = cur;
		cur = next, next = tmp, ncur = nnext;
	}
}

/* ZB-H2: 2p-1 micro-batches between F and W on every device, backward
 * first; the first device warms up with 2p-1 forwards. */
static int schedule_zbh2(ir_module *m, pass_ctx *cx)
{
	if (check_one_stage_per_device(m, cx) < 0)
		return -1;
	int *cap = arena_calloc(cx->scratch, (size_t)ir_pipe_devices(m), sizeof *cap);
	for (int d = 0; d < ir_pipe_devices(m); d++)
		cap[d] = 2 * m->nstages - 1;
	ir_alloc_devices(m);
	schedule_greedy(m, cx, cap, false);
	return 0;
}

/* ZB-V: 2p (stage, micro-batch) pairs between F and W on every device,
 * each half a 1F1B stage: 1F1B's peak on its first device; forward
 * first. */
static int schedule_zbv(ir_module *m, pass_ctx *cx)
{
	if (check_v_shape(m, cx) < 0)
		return -1;
	int p = (int)ir_pipe_devices(m);
	int *cap = arena_calloc(cx->scratch, (size_t)p, sizeof *cap);
	for (int d = 0; d < p; d++)
		cap[d] = 2 * p;
	ir_alloc_devices(m);
	schedule_greedy(m, cx, cap, true);
	return 0;
}

int pass_schedule(ir_module *m, pass_ctx *cx)
{
	if (!m->nstages) {
		diag_sink_error(cx->diag, plan_loc(m), "schedule: the module has no stages; run 'partition' and 'place' first");
		return -1;
	}
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].device < 0) {
			diag_sink_error(cx->diag, plan_loc(m), "schedule: stage S%d has no device; run 'place' first", s);
			return -1;
		}
	ir_clear_devices(m);
	switch (m->plan.schedule) {
	case IR_SCHED_GPIPE:
		return schedule_gpipe(m);
	case IR_SCHED_1F1B:
		return schedule_1f1b(m, cx, false);
	case IR_SCHED_ZBH1:
		return schedule_1f1b(m, cx, true);
	case IR_SCHED_I1F1B:
		return schedule_i1f1b(m, cx);
	case IR_SCHED_ZBH2:
		return schedule_zbh2(m, cx);
	case IR_SCHED_ZBV:
		return schedule_zbv(m, cx);
	case IR_SCHED_TUNED:
		return 0; /* the `tune` pass orders the work, together with the rest */
	default:
		break;
	}
	ir_bug("unknown schedule %d", (int)m->plan.schedule);
}
