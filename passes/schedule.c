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
 * - phased: on every device, a forward order and a backward order, a
 *   warm-up count of forwards, then one forward and one backward at a time,
 *   then the remaining backwards; W follows its B at once or is held back
 *   in a FIFO of a fixed depth.
 *     gpipe  every forward first (each stage of the device in turn, its
 *            micro-batches in order), then every backward in reverse.
 *     1f1b   PipeDream-flush, Megatron-LM's default: the stage at pipeline
 *            position s warms up with min(S-1-s, M) forwards.
 *     i1f1b  Megatron-LM's interleaved 1F1B: V chunks per device, micro-
 *            batches in groups of p, the warm-up of Megatron's code.
 *     zbh1   ZB-H1: 1F1B's order with B and W split; the stage at position
 *            s keeps its s most recent W's back, which fills its cool-down.
 * - greedy: a list scheduler over unit-time ops, as the Zero Bubble
 *   authors build their schedules: at every step each device starts a
 *   ready F (if its in-flight cap allows), else a ready B, else its oldest
 *   W.  The caps make the schedule.
 *     zbh2   ZB-H2: one stage per device, 2(p-s)-1 micro-batches in flight
 *            at position s (2p-1 on the first device).
 *     zbv    ZB-V: 2p stages in a V (stage k and 2p-1-k share a device),
 *            at most 2p (stage, micro-batch) pairs in flight per device,
 *            the activation memory of 1F1B's first device. */
#include "pass.h"

#include <stdlib.h>

typedef struct work {
	int stage, mb;
} work;

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		ir_bug("out of memory");
	return p;
}

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

static void wq_emit_oldest(ir_module *m, int dev, wqueue *w)
{
	ir_assert(w->n > 0);
	work x = w->q[w->head];
	w->head = (w->head + 1) % w->cap, w->n--;
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

static void emit_phased(ir_module *m, int dev, const phased *ph)
{
	wqueue w = {.q = xcalloc((size_t)ph->n + 1, sizeof(work)), .cap = ph->n + 1};
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
	free(w.q);
}

/* ---- placement shapes ---------------------------------------------------- */

/* The stage of every device, for schedules that run one stage per device:
 * owner[d], -1 for a device without one.  NULL after a diagnostic. */
static int *one_stage_per_device(const ir_module *m)
{
	int *owner = xcalloc((size_t)m->cluster.devices, sizeof *owner);
	for (int d = 0; d < m->cluster.devices; d++)
		owner[d] = -1;
	for (int s = 0; s < m->nstages; s++) {
		int d = m->stages[s].device;
		if (owner[d] >= 0) {
			diag_error(plan_loc(m), "schedule %s runs one stage per device, but D%d holds S%d and S%d",
			           ir_schedule_names[m->plan.schedule], d, owner[d], s);
			free(owner);
			return NULL;
		}
		owner[d] = s;
	}
	return owner;
}

/* Interleaving needs p x V stages with stage k on the device of stage k-p
 * (stage k on device k mod p by default).  Returns V, or 0 after a
 * diagnostic. */
static int interleaved_chunks(const ir_module *m)
{
	int p = (int)m->cluster.devices, S = m->nstages;
	if (S % p) {
		diag_error(plan_loc(m), "schedule i1f1b interleaves chunks over the %d devices, but the plan has %d stages (not a multiple of %d)",
		           p, S, p);
		return 0;
	}
	int *seen = xcalloc((size_t)p, sizeof *seen);
	int bad = -1;
	for (int s = 0; s < p && bad < 0; s++)
		if (seen[m->stages[s].device]++)
			bad = s;
	for (int s = p; s < S && bad < 0; s++)
		if (m->stages[s].device != m->stages[s - p].device)
			bad = s;
	free(seen);
	if (bad >= 0) {
		diag_error(plan_loc(m), "schedule i1f1b needs stage k on the device of stage k-%d (Megatron-LM's interleaving, place's default), but S%d is on D%d",
		           p, bad, m->stages[bad].device);
		return 0;
	}
	return S / p;
}

/* ZB-V needs 2p stages with stages k and 2p-1-k on one device, a device
 * each (place's default for zbv).  Returns 0, or -1 after a diagnostic. */
static int check_v_shape(const ir_module *m)
{
	int p = (int)m->cluster.devices, S = m->nstages;
	if (S != 2 * p) {
		diag_error(plan_loc(m), "schedule zbv runs two stages per device in a V: %d stages on %d devices, the plan has %d",
		           2 * p, p, S);
		return -1;
	}
	int *seen = xcalloc((size_t)p, sizeof *seen);
	int bad = -1;
	for (int s = 0; s < p && bad < 0; s++)
		if (seen[m->stages[s].device]++ || m->stages[S - 1 - s].device != m->stages[s].device)
			bad = s;
	free(seen);
	if (bad >= 0) {
		diag_error(plan_loc(m), "schedule zbv needs S%d and S%d alone on one device (a V), but they are on D%d and D%d",
		           bad, S - 1 - bad, m->stages[bad].device, m->stages[S - 1 - bad].device);
		return -1;
	}
	return 0;
}

/* ---- gpipe, 1f1b, zbh1, i1f1b -------------------------------------------- */

static int schedule_gpipe(ir_module *m)
{
	int M = (int)m->train.microbatches;
	work *fwd = xcalloc((size_t)m->nstages * M, sizeof *fwd);
	work *bwd = xcalloc((size_t)m->nstages * M, sizeof *bwd);
	ir_alloc_devices(m);
	for (int d = 0; d < m->ndevices; d++) {
		int n = 0;
		for (int s = 0; s < m->nstages; s++)
			if (m->stages[s].device == d)
				for (int i = 0; i < M; i++)
					fwd[n++] = (work){s, i};
		for (int i = 0; i < n; i++)
			bwd[i] = fwd[n - 1 - i];
		emit_phased(m, d, &(phased){fwd, bwd, n, n, 0});
	}
	free(fwd);
	free(bwd);
	return 0;
}

/* 1F1B, and ZB-H1 with `zb`: the stage at position s holds s W's back. */
static int schedule_1f1b(ir_module *m, bool zb)
{
	int S = m->nstages, M = (int)m->train.microbatches;
	int *owner = one_stage_per_device(m);
	if (!owner)
		return -1;
	free(owner);
	work *seq = xcalloc((size_t)M, sizeof *seq);
	ir_alloc_devices(m);
	for (int s = 0; s < S; s++) {
		for (int i = 0; i < M; i++)
			seq[i] = (work){s, i};
		int warm = S - 1 - s < M ? S - 1 - s : M;
		emit_phased(m, m->stages[s].device, &(phased){seq, seq, M, warm, zb ? s : 0});
	}
	free(seq);
	return 0;
}

/* Megatron-LM's forward_backward_pipelining_with_interleaving: on the device
 * of rank r, the k-th forward runs chunk (k mod pV) / p of micro-batch
 * (k / pV) p + k mod p; the k-th backward the same with the chunks
 * reversed; (p-r-1)·2 + (V-1)·p warm-up forwards. */
static int schedule_i1f1b(ir_module *m)
{
	int V = interleaved_chunks(m);
	if (!V)
		return -1;
	if (V == 1)
		return schedule_1f1b(m, false);
	int p = (int)m->cluster.devices, M = (int)m->train.microbatches;
	if (M % p) {
		diag_error(plan_loc(m), "schedule i1f1b (Megatron-LM's interleaved 1F1B) runs micro-batches in groups of the pipeline depth: m=%d is not a multiple of p=%d",
		           M, p);
		return -1;
	}
	int n = M * V;
	work *fwd = xcalloc((size_t)n, sizeof *fwd), *bwd = xcalloc((size_t)n, sizeof *bwd);
	ir_alloc_devices(m);
	for (int r = 0; r < p; r++) {
		for (int k = 0; k < n; k++) {
			int g = k / (p * V), c = k % (p * V) / p, mb = g * p + k % p;
			fwd[k] = (work){c * p + r, mb};
			bwd[k] = (work){(V - 1 - c) * p + r, mb};
		}
		int warm = (p - r - 1) * 2 + (V - 1) * p;
		emit_phased(m, m->stages[r].device, &(phased){fwd, bwd, n, warm < n ? warm : n, 0});
	}
	free(fwd);
	free(bwd);
	return 0;
}

/* ---- shape 2: the greedy list scheduler (zbh2, zbv) ---------------------- */

/* Unit-time list scheduling.  At step t a device starts at most one op whose
 * input was produced before t: a forward if `cap[d]` allows (preferring the
 * deeper stage), else a backward (oldest micro-batch, then deeper stage),
 * else its oldest pending W.  A forward of stage s needs room for the
 * micro-batch's stages on the device from s on, so that a micro-batch let
 * in can always finish its forward there.  Only devices that an op ending
 * at t can concern are looked at in step t, so the cost is O(ops x stages
 * per device). */
typedef struct greedy {
	ir_module *m;
	int S, M, P;
	int *done;     /* per (stage, mb, kind): step + 1 when started, 0: not yet */
	int *nf, *nb;  /* per stage: next micro-batch to forward, to backward */
	int **mine;    /* per device: its stages, deepest first */
	int *nmine;
	int *act;      /* per device: (stage, mb) pairs between F and B */
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

/* The op device d starts at step t, or kind IR_NOPS for none. */
static ir_op pick(const greedy *g, int d, int t, const int *cap)
{
	for (int j = 0; j < g->nmine[d]; j++) {
		int s = g->mine[d][j], i = g->nf[s];
		if (i < g->M && (s == 0 || ready_by(g, s - 1, i, IR_OP_F, t)) &&
		    g->act[d] + j + 1 <= cap[d])
			return (ir_op){IR_OP_F, s, i};
	}
	ir_op best = {IR_NOPS, -1, -1};
	for (int j = 0; j < g->nmine[d]; j++) {
		int s = g->mine[d][j], i = g->nb[s];
		if (i >= g->M)
			continue;
		bool in = s == g->S - 1 ? ready_by(g, s, i, IR_OP_F, t) : ready_by(g, s + 1, i, IR_OP_B, t);
		if (in && (best.kind == IR_NOPS || i < best.mb))
			best = (ir_op){IR_OP_B, s, i};
	}
	if (best.kind == IR_NOPS && g->wq[d].n) {
		work w = g->wq[d].q[g->wq[d].head];
		best = (ir_op){IR_OP_W, w.stage, w.mb};
	}
	return best;
}

static void schedule_greedy(ir_module *m, const int *cap)
{
	greedy g = {.m = m, .S = m->nstages, .M = (int)m->train.microbatches,
	            .P = (int)m->cluster.devices};
	g.done = xcalloc((size_t)g.S * g.M * IR_NOPS, sizeof *g.done);
	g.nf = xcalloc((size_t)g.S, sizeof *g.nf);
	g.nb = xcalloc((size_t)g.S, sizeof *g.nb);
	g.mine = xcalloc((size_t)g.P, sizeof *g.mine);
	g.nmine = xcalloc((size_t)g.P, sizeof *g.nmine);
	g.act = xcalloc((size_t)g.P, sizeof *g.act);
	g.wq = xcalloc((size_t)g.P, sizeof *g.wq);
	for (int s = g.S - 1; s >= 0; s--)
		g.nmine[m->stages[s].device]++;
	for (int d = 0; d < g.P; d++) {
		g.mine[d] = xcalloc((size_t)g.nmine[d], sizeof **g.mine);
		g.wq[d] = (wqueue){.q = xcalloc((size_t)g.nmine[d] * g.M, sizeof(work)),
		                   .cap = g.nmine[d] * g.M};
		g.nmine[d] = 0;
	}
	for (int s = g.S - 1; s >= 0; s--) {
		int d = m->stages[s].device;
		g.mine[d][g.nmine[d]++] = s;
	}

	/* Devices to look at in this step and the next; `mark` keeps each once. */
	int *cur = xcalloc((size_t)g.P, sizeof *cur), *next = xcalloc((size_t)g.P, sizeof *next);
	int *mark = xcalloc((size_t)g.P, sizeof *mark);
	int ncur = 0, nnext = 0;
	for (int d = 0; d < g.P; d++)
		if (g.nmine[d])
			cur[ncur++] = d, mark[d] = 1;
	int64_t left = (int64_t)g.S * g.M * IR_NOPS;
#define WAKE(dev)                                                              \
	do {                                                                       \
		if (mark[dev] != t + 2)                                                \
			mark[dev] = t + 2, next[nnext++] = (dev);                          \
	} while (0)
	for (int t = 0; left > 0; t++) {
		if (!ncur)
			ir_bug("greedy schedule stalls at step %d with %lld ops left", t, (long long)left);
		nnext = 0;
		for (int k = 0; k < ncur; k++) {
			int d = cur[k];
			ir_op op = pick(&g, d, t, cap);
			if (op.kind == IR_NOPS)
				continue;
			ir_add_op(m, d, op.kind, op.stage, op.mb, (ir_loc){0});
			*gdone(&g, op.stage, op.mb, op.kind) = t + 1;
			left--;
			WAKE(d);
			if (op.kind == IR_OP_F) {
				g.nf[op.stage]++, g.act[d]++;
				if (op.stage + 1 < g.S)
					WAKE(m->stages[op.stage + 1].device);
			} else if (op.kind == IR_OP_B) {
				g.nb[op.stage]++, g.act[d]--;
				wq_push(&g.wq[d], op.stage, op.mb);
				if (op.stage > 0)
					WAKE(m->stages[op.stage - 1].device);
			} else {
				g.wq[d].head = (g.wq[d].head + 1) % g.wq[d].cap, g.wq[d].n--;
			}
		}
		int *tmp = cur;
		cur = next, next = tmp, ncur = nnext;
	}
#undef WAKE
	for (int d = 0; d < g.P; d++)
		free(g.mine[d]), free(g.wq[d].q);
	free(g.done), free(g.nf), free(g.nb), free(g.mine), free(g.nmine), free(g.act), free(g.wq);
	free(cur), free(next), free(mark);
}

/* ZB-H2: up to 2(p-s)-1 micro-batches in flight at pipeline position s. */
static int schedule_zbh2(ir_module *m)
{
	int *owner = one_stage_per_device(m);
	if (!owner)
		return -1;
	int p = m->nstages;
	int *cap = xcalloc((size_t)m->cluster.devices, sizeof *cap);
	for (int d = 0; d < m->cluster.devices; d++)
		cap[d] = owner[d] >= 0 ? 2 * (p - owner[d]) - 1 : 0;
	ir_alloc_devices(m);
	schedule_greedy(m, cap);
	free(cap);
	free(owner);
	return 0;
}

/* ZB-V: 2p (stage, micro-batch) pairs in flight per device, each half a
 * 1F1B stage: 1F1B's peak activation memory on every device. */
static int schedule_zbv(ir_module *m)
{
	if (check_v_shape(m) < 0)
		return -1;
	int p = (int)m->cluster.devices;
	int *cap = xcalloc((size_t)p, sizeof *cap);
	for (int d = 0; d < p; d++)
		cap[d] = 2 * p;
	ir_alloc_devices(m);
	schedule_greedy(m, cap);
	free(cap);
	return 0;
}

int pass_schedule(ir_module *m)
{
	if (!m->nstages) {
		diag_error(plan_loc(m), "schedule: the module has no stages; run 'partition' and 'place' first");
		return -1;
	}
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].device < 0) {
			diag_error(plan_loc(m), "schedule: stage S%d has no device; run 'place' first", s);
			return -1;
		}
	ir_clear_devices(m);
	switch (m->plan.schedule) {
	case IR_SCHED_GPIPE:
		return schedule_gpipe(m);
	case IR_SCHED_1F1B:
		return schedule_1f1b(m, false);
	case IR_SCHED_ZBH1:
		return schedule_1f1b(m, true);
	case IR_SCHED_I1F1B:
		return schedule_i1f1b(m);
	case IR_SCHED_ZBH2:
		return schedule_zbh2(m);
	case IR_SCHED_ZBV:
		return schedule_zbv(m);
	default:
		break;
	}
	ir_bug("unknown schedule %d", (int)m->plan.schedule);
}
