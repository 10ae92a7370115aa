/* prove.c: the `verify` pass: the deadlock-freedom proof (ir/verify.c,
 * ir_verify, checks the IR's invariants; this pass proves that programs
 * which keep them cannot deadlock).
 *
 * Reads lowered programs (the `comm` pass) and plan.backend; writes the
 * proof into the module (m->proof), or reports a cycle and fails.
 * Guarantees: a module with a proof cannot deadlock under rendezvous
 * semantics (a send may wait until its receive is posted: true of NCCL and
 * of MPI standard sends), whatever the buffer sizes; code generation
 * refuses a module without one.
 *
 * The proof is the one of docs/deadlock.md.  A step is a compute op, a
 * send or a receive outside a group, a whole group (under both backends:
 * the runtime posts a group's ops together and completes them as one,
 * rt_comm.c), or a wait; each step s has two events, P(s) "posted" and
 * C(s) "completed", with P(s) -> C(s).  Program order:
 *   nccl  compute steps (and waits) run in order on the compute stream,
 *         C(prev) -> P(next); sends, receives and groups run in order on the
 *         communication stream, C(prev) -> P(next); a send's step waits for
 *         the compute op that made its value, C(op) -> P(send); a wait
 *         completes after its receive's step, C(recv) -> C(wait).  (The
 *         runtime on a GPU chains the two streams with events, so each
 *         device runs its steps one after another; the verdicts are the
 *         same, docs/deadlock.md.)
 *   mpi   one host thread: posts return at once, P(prev) -> P(next) for a
 *         post; a compute op or a wait blocks, so the next step starts
 *         after its C; a wait completes after its receive's step (the
 *         whole group when the receive is in one).
 * Partners: for a send and the receive it matches (ir_channel_pairs: on
 * nccl the k-th send and the k-th receive of a channel; on mpi the send and
 * the receive with its tag, the value's stage, micro-batch and kind), each
 * side's completion needs the other side posted: P(recv) -> C(send) and
 * P(send) -> C(recv).  The programs are deadlock-free if and only if this
 * graph is acyclic; a topological order is the certificate, and a cycle is
 * the counterexample, printed step by step. */
#include "pass.h"

#include <string.h>

typedef struct step {
	int dev;
	int first, last;   /* ops of the step: one, or a whole group */
} step;

typedef struct graph {
	const ir_module *m;
	step *steps;
	int nsteps, capsteps;
	int *of_op_base;   /* per device: index into op_step */
	int *op_step;      /* per op (all devices, flattened): its step */
	int *eu, *ev;      /* edges */
	long nedges, capedges;
	arena *a;          /* the pass's scratch: all of the above */
	diag_sink *diag;
} graph;

static void edge(graph *g, int u, int v)
{
	if (g->nedges == g->capedges) {
		size_t old = (size_t)g->capedges;
		g->capedges = g->capedges ? 2 * g->capedges : 1024;
		g->eu = arena_grow(g->a, g->eu, old * sizeof *g->eu, (size_t)g->capedges * sizeof *g->eu);
		g->ev = arena_grow(g->a, g->ev, old * sizeof *g->ev, (size_t)g->capedges * sizeof *g->ev);
	}
	g->eu[g->nedges] = u;
	g->ev[g->nedges++] = v;
}

#define P_(s) (2 * (s))
#define C_(s) (2 * (s) + 1)

static int step_of(const graph *g, int d, int i)
{
	return g->op_step[g->of_op_base[d] + i];
}

static const ir_op *first_op(const graph *g, int s)
{
	return &g->m->devices[g->steps[s].dev].ops[g->steps[s].first];
}

/* Split every program into steps. */
static void build_steps(graph *g)
{
	const ir_module *m = g->m;
	int total = 0;
	g->of_op_base = arena_calloc(g->a, (size_t)m->ndevices, sizeof *g->of_op_base);
	for (int d = 0; d < m->ndevices; d++)
		g->of_op_base[d] = total, total += m->devices[d].nops;
	g->op_step = arena_calloc(g->a, (size_t)total, sizeof *g->op_step);
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops;) {
			int j = i;
			/* A group is one step under both backends: the runtime posts
			 * its ops together and gives them one handle (rt_comm.c), so a
			 * wait on any value of the group completes only when all of
			 * the group's sends and receives have. */
			if (dev->ops[i].group)
				while (j + 1 < dev->nops && dev->ops[j + 1].group == dev->ops[i].group)
					j++;
			step *s = VEC_PUSH(g->a, g->steps, g->nsteps, g->capsteps);
			s->dev = d, s->first = i, s->last = j;
			for (int k = i; k <= j; k++)
				g->op_step[g->of_op_base[d] + k] = g->nsteps - 1;
			i = j + 1;
		}
	}
}

/* Key of a value: (kind, stage, mb). */
static size_t vkey(const ir_module *m, const ir_op *op)
{
	return ((size_t)op->stage * (size_t)ir_local_mb(m) + (size_t)op->mb) * 2 + (size_t)op->kind;
}

typedef struct partner_ctx {
	graph *g;
	int a, b;
} partner_ctx;

/* Rendezvous: each side completes only once the other is posted. */
static int partner_edges(void *ctx, int i, int j)
{
	partner_ctx *c = ctx;
	int x = step_of(c->g, c->a, i), y = step_of(c->g, c->b, j);
	edge(c->g, P_(y), C_(x));
	edge(c->g, P_(x), C_(y));
	return 0;
}

static void build_edges(graph *g)
{
	const ir_module *m = g->m;
	ir_backend be = m->plan.backend;
	int S = m->nstages, M = (int)ir_local_mb(m);
	size_t nv = (size_t)S * M * 2;
	int *recv_step = arena_calloc(g->a, nv, sizeof *recv_step);
	int *made_step = arena_calloc(g->a, nv, sizeof *made_step); /* compute step that makes a sent value */
	for (size_t i = 0; i < nv; i++)
		recv_step[i] = made_step[i] = -1;
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm == IR_COMM_RECV)
				recv_step[vkey(m, op)] = step_of(g, d, i);
			if (op->comm != IR_COMM_NONE)
				continue;
			for (int k = IR_OP_F; k <= IR_OP_B; k++)
				if (ir_value_maker(m, (ir_op_kind)k) == op->kind) {
					ir_op v = *op; /* the value this op makes */
					v.kind = (ir_op_kind)k;
					made_step[vkey(m, &v)] = step_of(g, d, i);
				}
		}
	}
	for (int s = 0; s < g->nsteps; s++)
		edge(g, P_(s), C_(s));
	/* Program order. */
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		int prev_compute = -1, prev_comm = -1, prev_any = -1;
		for (int i = 0; i < dev->nops;) {
			int s = step_of(g, d, i);
			const ir_op *op = &dev->ops[i];
			bool comm = op->comm == IR_COMM_SEND || op->comm == IR_COMM_RECV;
			if (be == IR_BACKEND_NCCL) {
				if (comm) {
					if (prev_comm >= 0)
						edge(g, C_(prev_comm), P_(s));
					prev_comm = s;
				} else {
					if (prev_compute >= 0)
						edge(g, C_(prev_compute), P_(s));
					prev_compute = s;
				}
			} else if (prev_any >= 0) {
				const ir_op *po = first_op(g, prev_any);
				bool posted = po->comm == IR_COMM_SEND || po->comm == IR_COMM_RECV;
				edge(g, posted ? P_(prev_any) : C_(prev_any), P_(s));
			}
			prev_any = s;
			/* A send waits for the op that made its value; a wait for its receive. */
			for (int k = g->steps[s].first; k <= g->steps[s].last; k++) {
				const ir_op *o = &dev->ops[k];
				size_t v = vkey(m, o);
				if (o->comm == IR_COMM_SEND && made_step[v] >= 0)
					edge(g, C_(made_step[v]), P_(s));
				if (o->comm == IR_COMM_WAIT && recv_step[v] >= 0)
					edge(g, C_(recv_step[v]), C_(s));
			}
			i = g->steps[s].last + 1;
		}
	}
	/* Partners: as the backend matches (nccl first in, first out per
	 * channel; mpi by tag). */
	for (int a = 0; a < m->ndevices; a++)
		for (int b = 0; b < m->ndevices; b++)
			if (a != b)
				ir_channel_pairs(m, a, b, partner_edges, &(partner_ctx){g, a, b});
}

static void describe(const graph *g, int s, char *buf, size_t n)
{
	const step *st = &g->steps[s];
	const ir_op *op = first_op(g, s);
	if (st->last > st->first) {
		snprintf(buf, n, "D%d: group of %d (first: %s %s S%d m%d with D%d)", st->dev,
		         st->last - st->first + 1, ir_comm_names[op->comm], ir_value_names[op->kind],
		         op->stage, op->mb, op->peer);
	} else if (op->comm == IR_COMM_NONE) {
		snprintf(buf, n, "D%d: %s S%d m%d", st->dev, ir_op_names[op->kind], op->stage, op->mb);
	} else if (op->comm == IR_COMM_WAIT) {
		snprintf(buf, n, "D%d: wait %s S%d m%d", st->dev, ir_value_names[op->kind], op->stage, op->mb);
	} else {
		snprintf(buf, n, "D%d: %s %s S%d m%d %s D%d", st->dev, ir_comm_names[op->comm],
		         ir_value_names[op->kind], op->stage, op->mb,
		         op->comm == IR_COMM_SEND ? "to" : "from", op->peer);
	}
}

/* Kahn's algorithm; on a cycle, walk it and print it. */
static int prove(graph *g)
{
	int N = 2 * g->nsteps;
	int *deg = arena_calloc(g->a, (size_t)N, sizeof *deg);
	int *head = arena_calloc(g->a, (size_t)N + 1, sizeof *head);
	int *adj = arena_calloc(g->a, (size_t)g->nedges, sizeof *adj);
	int *queue = arena_calloc(g->a, (size_t)N, sizeof *queue);
	for (long e = 0; e < g->nedges; e++)
		head[g->eu[e] + 1]++, deg[g->ev[e]]++;
	for (int u = 0; u < N; u++)
		head[u + 1] += head[u];
	int *fill = arena_calloc(g->a, (size_t)N, sizeof *fill);
	memcpy(fill, head, (size_t)N * sizeof *fill);
	for (long e = 0; e < g->nedges; e++)
		adj[fill[g->eu[e]]++] = g->ev[e];
	int qh = 0, qt = 0;
	for (int u = 0; u < N; u++)
		if (!deg[u])
			queue[qt++] = u;
	uint64_t hash = 1469598103934665603ull;
	while (qh < qt) {
		int u = queue[qh++];
		hash = (hash ^ (uint64_t)u) * 1099511628211ull;
		for (int k = head[u]; k < head[u + 1]; k++)
			if (--deg[adj[k]] == 0)
				queue[qt++] = adj[k];
	}
	int rc = 0;
	const ir_module *m = g->m;
	if (qt == N) {
		ir_module *mm = (ir_module *)m;
		mm->proof = (ir_proof){true, m->plan.backend, g->nsteps, hash};
	} else {
		/* Every event left waits on another left: follow such edges from
		 * one until an event repeats; the loop is the cycle. */
		int *seen = arena_calloc(g->a, (size_t)N, sizeof *seen), u = -1;
		for (int x = 0; x < N && u < 0; x++)
			if (deg[x])
				u = x;
		/* Walk predecessors that are still blocked: build reverse lists. */
		int *pred = arena_calloc(g->a, (size_t)N, sizeof *pred);
		for (int x = 0; x < N; x++)
			pred[x] = -1;
		for (long e = 0; e < g->nedges; e++)
			if (deg[g->eu[e]] && deg[g->ev[e]] && pred[g->ev[e]] < 0)
				pred[g->ev[e]] = g->eu[e];
		int t = 1;
		while (!seen[u]) {
			seen[u] = t++;
			u = pred[u];
			ir_assert(u >= 0);
		}
		/* u is on the cycle: print it in the order events wait on each other. */
		diag_sink_error(g->diag, ir_loc_or(m->plan_loc, m->loc),
		                "verify: the programs can deadlock under %s semantics; a cycle of waits:",
		                ir_backend_names[m->plan.backend]);
		int start = u, last_step = -1, shown = 0, steps = 0;
		do {
			int s = u / 2;
			if (s != last_step) {
				if (shown < 64) {
					char buf[160];
					describe(g, s, buf, sizeof buf);
					diag_sink_line(g->diag, "  %s %s", buf, u % 2 ? "cannot complete" : "cannot be posted");
					shown++;
				}
				steps++;
			}
			last_step = s;
			u = pred[u];
		} while (u != start);
		if (steps > shown)
			diag_sink_line(g->diag, "  ... and %d more steps of the cycle", steps - shown);
		rc = -1;
	}
	return rc;
}

int pass_verify(ir_module *m, pass_ctx *cx)
{
	if (!m->ndevices) {
		diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc), "verify: the module has no programs to prove");
		return -1;
	}
	if (!ir_lowered(m) && m->nstages > 1) {
		/* Without comm ops there is nothing to match, unless no value
		 * crosses devices at all. */
		for (int s = 0; s + 1 < m->nstages; s++)
			if (m->stages[s].device != m->stages[s + 1].device) {
				diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc),
				                "verify: the programs are not lowered; run 'comm' first");
				return -1;
			}
	}
	if (ir_verify(m) != 0)
		return -1;
	bool had = m->proof.proven;
	ir_proof old = m->proof;
	graph g = {.m = m, .a = cx->scratch, .diag = cx->diag};
	build_steps(&g);
	build_edges(&g);
	int rc = prove(&g);
	if (rc == 0 && had && (old.backend != m->proof.backend || old.steps != m->proof.steps ||
	                       old.order != m->proof.order)) {
		diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc),
		                "verify: the proof in the module (%s, %lld steps, order %016llx) is not this "
		                "program's (%s, %lld steps, order %016llx)",
		                ir_backend_names[old.backend], (long long)old.steps, (unsigned long long)old.order,
		                ir_backend_names[m->proof.backend], (long long)m->proof.steps,
		                (unsigned long long)m->proof.order);
		rc = -1;
	}
	return rc;
}
