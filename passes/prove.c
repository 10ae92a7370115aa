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
 * P(send) -> C(recv).  Collectives (all-reduce, reduce-scatter,
 * all-gather) are posts like transfers: on nccl's communication stream in
 * program order, non-blocking under mpi; each waits for the op that made
 * its buffer (the stage's last W, or the bucket's update); a collective's
 * wait completes after it; and a member's collective completes only once
 * every member of its DP group has posted it (the same kind, stage and
 * bucket): P(member's) -> C(own).  The replicas run the same programs, so
 * pass_verify proves the quotient, one copy (D = 1 below, where that edge
 * is P -> C itself); prove_replicas builds the D copies from programs given
 * per replica (prove.h; docs/deadlock.md, "Collectives", for why the
 * quotient decides).  A carried wait (overlap_param_gather) completes the
 * all-gather the previous step posted: every member posted it within the
 * previous step, whose graph is this one, so by induction over the steps
 * those posts have all happened and the wait depends on no event of its
 * own step (its first step has nothing pending at all); no edge goes from
 * a later step to an earlier one, so a cycle of the step loop is a cycle
 * of one step (docs/deadlock.md, "Carried waits").  The programs are
 * deadlock-free if and only if this graph is acyclic; a topological order
 * is the certificate, and a cycle is the counterexample, printed step by
 * step. */
#include "prove.h"

#include <string.h>

typedef struct step {
	int rep, dev;      /* replica (0 in the quotient) and pipeline device */
	int first, last;   /* ops of the step: one, or a whole group */
} step;

typedef struct graph {
	const ir_module *m;
	const prove_replica *reps;
	int D, P;          /* replicas and devices per replica */
	step *steps;
	int nsteps, capsteps;
	int *of_op_base;   /* per replica and device (r * P + d): index into op_step */
	int *op_step;      /* per op (all programs, flattened): its step */
	int *coll_step;    /* per replica and collective (r * nkeys + ckey): its step, or -1 */
	size_t nkeys;
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

static const ir_device *prog(const graph *g, int r, int d)
{
	return &g->reps[r].devices[d];
}

static int step_of(const graph *g, int r, int d, int i)
{
	return g->op_step[g->of_op_base[r * g->P + d] + i];
}

static const ir_op *first_op(const graph *g, int s)
{
	return &prog(g, g->steps[s].rep, g->steps[s].dev)->ops[g->steps[s].first];
}

/* A post: a transfer or a collective, which the communication stream runs
 * (nccl) or which returns at once (mpi). */
static bool is_post(const ir_op *op)
{
	return op->comm == IR_COMM_SEND || op->comm == IR_COMM_RECV || ir_is_coll(op) ||
	       op->comm == IR_COMM_TIE;
}

/* A collective's key in its DP group: (stage, bucket, kind); a stage's
 * buckets sit at its layers (ir_verify: at most one per layer). */
static size_t ckey(const ir_module *m, int stage, int bucket, ir_comm c)
{
	return ((size_t)m->stages[stage].first + (size_t)bucket) * 3 + (size_t)(c - IR_COMM_ALLREDUCE);
}

/* Split every program of every replica into steps. */
static void build_steps(graph *g)
{
	int total = 0;
	g->of_op_base = arena_calloc(g->a, (size_t)g->D * g->P, sizeof *g->of_op_base);
	for (int r = 0; r < g->D; r++)
		for (int d = 0; d < g->P; d++)
			g->of_op_base[r * g->P + d] = total, total += prog(g, r, d)->nops;
	g->op_step = arena_calloc(g->a, (size_t)total + 1, sizeof *g->op_step);
	for (int r = 0; r < g->D; r++)
		for (int d = 0; d < g->P; d++) {
			const ir_device *dev = prog(g, r, d);
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
				s->rep = r, s->dev = d, s->first = i, s->last = j;
				for (int k = i; k <= j; k++)
					g->op_step[g->of_op_base[r * g->P + d] + k] = g->nsteps - 1;
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
	int r, a, b;
} partner_ctx;

/* Rendezvous: each side completes only once the other is posted. */
static int partner_edges(void *ctx, int i, int j)
{
	partner_ctx *c = ctx;
	int x = step_of(c->g, c->r, c->a, i), y = step_of(c->g, c->r, c->b, j);
	edge(c->g, P_(y), C_(x));
	edge(c->g, P_(x), C_(y));
	return 0;
}

/* The module as replica r sees it: m with r's programs. */
static ir_module replica_view(const graph *g, int r)
{
	ir_module v = *g->m;
	v.devices = (ir_device *)g->reps[r].devices;
	v.op_loc = (ir_loc **)g->reps[r].op_loc;
	v.memplan = NULL;
	return v;
}

static ir_loc op_at(const graph *g, int r, int d, int i)
{
	const ir_module *m = g->m;
	ir_loc *const *locs = g->reps[r].op_loc;
	return locs && locs[d] && locs[d][i].src ? locs[d][i] : ir_loc_or(m->plan_loc, m->loc);
}

static void build_edges(graph *g)
{
	const ir_module *m = g->m;
	ir_backend be = m->plan.backend;
	int S = m->nstages, M = (int)ir_local_mb(m);
	size_t nv = (size_t)S * M * 2;
	int *recv_step = arena_calloc(g->a, nv, sizeof *recv_step);
	int *made_step = arena_calloc(g->a, nv, sizeof *made_step); /* compute step that makes a sent value */
	int *last_w = arena_calloc(g->a, (size_t)S + 1, sizeof *last_w); /* per stage: its last W's step */
	int *upd_step = arena_calloc(g->a, (size_t)m->nlayers + 1, sizeof *upd_step); /* per bucket */
	int *tie_step = arena_calloc(g->a, (size_t)S + 1, sizeof *tie_step); /* per stage: its tie */
	for (int s = 0; s < g->nsteps; s++)
		edge(g, P_(s), C_(s));
	for (int r = 0; r < g->D; r++) {
		int *coll = g->coll_step + (size_t)r * g->nkeys;
		for (size_t i = 0; i < nv; i++)
			recv_step[i] = made_step[i] = -1;
		for (int s = 0; s < S; s++)
			last_w[s] = tie_step[s] = -1;
		for (int d = 0; d < g->P; d++) {
			const ir_device *dev = prog(g, r, d);
			for (int i = 0; i < dev->nops; i++) {
				const ir_op *op = &dev->ops[i];
				if (ir_is_coll(op))
					coll[ckey(m, op->stage, op->mb, op->comm)] = step_of(g, r, d, i);
				if (op->comm == IR_COMM_UPDATE)
					upd_step[m->stages[op->stage].first + op->mb] = step_of(g, r, d, i);
				if (op->comm == IR_COMM_RECV)
					recv_step[vkey(m, op)] = step_of(g, r, d, i);
				if (op->comm == IR_COMM_TIE)
					tie_step[op->stage] = step_of(g, r, d, i);
				if (op->comm != IR_COMM_NONE)
					continue;
				if (op->kind == IR_OP_W)
					last_w[op->stage] = step_of(g, r, d, i); /* W's run in micro-batch order */
				for (int k = IR_OP_F; k <= IR_OP_B; k++)
					if (ir_value_maker(m, (ir_op_kind)k) == op->kind) {
						ir_op v = *op; /* the value this op makes */
						v.kind = (ir_op_kind)k;
						made_step[vkey(m, &v)] = step_of(g, r, d, i);
					}
			}
		}
		/* Program order. */
		for (int d = 0; d < g->P; d++) {
			const ir_device *dev = prog(g, r, d);
			int prev_compute = -1, prev_comm = -1, prev_any = -1, host = -1, posted = -1;
			for (int i = 0; i < dev->nops;) {
				int s = step_of(g, r, d, i);
				const ir_op *op = &dev->ops[i];
				if (be == IR_BACKEND_NCCL) {
					/* Transfers and collectives on the communication stream;
					 * compute ops, waits and updates on the compute stream.
					 * The tied sum runs on the host: its post reads the
					 * gradient back, after every op issued before it on
					 * either stream, and returns (MPI), so what follows is
					 * issued after it but does not wait for it; its wait
					 * holds the host, so nothing after it is issued on
					 * either stream until it is done. */
					if (host >= 0)
						edge(g, C_(host), P_(s));
					if (posted >= 0)
						edge(g, P_(posted), P_(s));
					if (op->comm == IR_COMM_TIE) {
						if (prev_compute >= 0)
							edge(g, C_(prev_compute), P_(s));
						if (prev_comm >= 0)
							edge(g, C_(prev_comm), P_(s));
						posted = s;
					} else if (is_post(op)) {
						if (prev_comm >= 0)
							edge(g, C_(prev_comm), P_(s));
						prev_comm = s;
					} else {
						if (prev_compute >= 0)
							edge(g, C_(prev_compute), P_(s));
						prev_compute = s;
					}
					if (op->comm == IR_COMM_WAIT && op->coll == IR_COMM_TIE)
						host = s;
				} else if (prev_any >= 0) {
					edge(g, is_post(first_op(g, prev_any)) ? P_(prev_any) : C_(prev_any), P_(s));
				}
				prev_any = s;
				/* A send waits for the op that made its value, a collective
				 * for the op that made its buffer (a reduction the stage's
				 * last W, an all-gather the bucket's update); a wait for its
				 * receive or its collective. */
				for (int k = g->steps[s].first; k <= g->steps[s].last; k++) {
					const ir_op *o = &dev->ops[k];
					if (o->comm == IR_COMM_SEND && made_step[vkey(m, o)] >= 0)
						edge(g, C_(made_step[vkey(m, o)]), P_(s));
					if (o->comm == IR_COMM_WAIT && o->coll == IR_COMM_NONE && recv_step[vkey(m, o)] >= 0)
						edge(g, C_(recv_step[vkey(m, o)]), C_(s));
					/* A carried wait completes the previous step's post
					 * (see the header): nothing of this step. */
					if (o->comm == IR_COMM_WAIT && o->coll == IR_COMM_TIE && tie_step[o->stage] >= 0)
						edge(g, C_(tie_step[o->stage]), C_(s));
					else if (o->comm == IR_COMM_WAIT && o->coll != IR_COMM_NONE && !o->carried &&
					         coll[ckey(m, o->stage, o->mb, o->coll)] >= 0)
						edge(g, C_(coll[ckey(m, o->stage, o->mb, o->coll)]), C_(s));
					int maker = o->comm == IR_COMM_ALLGATHER ? upd_step[m->stages[o->stage].first + o->mb]
					          : ir_is_coll(o) || o->comm == IR_COMM_TIE ? last_w[o->stage] : -1;
					if (maker >= 0)
						edge(g, C_(maker), P_(s));
				}
				i = g->steps[s].last + 1;
			}
		}
		/* The tied sum: each copy's completes only once the other's is
		 * posted, within the replica. */
		for (int a = 0; a < S; a++)
			for (int b = 0; b < S; b++)
				if (a != b && tie_step[a] >= 0 && tie_step[b] >= 0)
					edge(g, P_(tie_step[b]), C_(tie_step[a]));
		/* Partners: as the backend matches (nccl first in, first out per
		 * channel; mpi by tag), within the replica. */
		ir_module v = replica_view(g, r);
		ir_channels *ix = ir_channels_index(&v);
		for (int a = 0; a < g->P; a++)
			for (int b = 0; b < g->P; b++)
				if (a != b)
					ir_channel_pairs(&v, ix, a, b, partner_edges, &(partner_ctx){g, r, a, b});
		ir_channels_free(ix);
	}
	/* Collectives: a member's completes only once every member of its DP
	 * group has posted it (in the quotient, its own post: P -> C). */
	for (size_t k = 0; k < g->nkeys && g->D > 1; k++)
		for (int r = 0; r < g->D; r++)
			for (int q = 0; q < g->D; q++) {
				int x = g->coll_step[(size_t)r * g->nkeys + k], y = g->coll_step[(size_t)q * g->nkeys + k];
				if (q != r && x >= 0 && y >= 0)
					edge(g, P_(y), C_(x));
			}
}

/* "D1", or with replicas "R1 D1 (rank 3)". */
static const char *rank_name(const graph *g, int r, int d, char *buf, size_t n)
{
	if (g->D == 1)
		snprintf(buf, n, "D%d", d);
	else
		snprintf(buf, n, "R%d D%d (rank %lld)", r, d, (long long)ir_rank_of(g->m, r, d));
	return buf;
}

static void describe(const graph *g, int s, char *buf, size_t n)
{
	const step *st = &g->steps[s];
	const ir_op *op = first_op(g, s);
	char who[48], peer[48];
	rank_name(g, st->rep, st->dev, who, sizeof who);
	if (op->comm == IR_COMM_SEND || op->comm == IR_COMM_RECV)
		rank_name(g, st->rep, op->peer, peer, sizeof peer);
	if (st->last > st->first) {
		snprintf(buf, n, "%s: group of %d (first: %s %s S%d m%d with %s)", who,
		         st->last - st->first + 1, ir_comm_names[op->comm], ir_value_names[op->kind],
		         op->stage, op->mb, peer);
	} else if (op->comm == IR_COMM_NONE) {
		snprintf(buf, n, "%s: %s S%d m%d", who, ir_op_names[op->kind], op->stage, op->mb);
	} else if (op->comm == IR_COMM_WAIT && op->coll == IR_COMM_TIE) {
		snprintf(buf, n, "%s: wait tie S%d", who, op->stage);
	} else if (op->comm == IR_COMM_WAIT && op->coll != IR_COMM_NONE) {
		snprintf(buf, n, "%s: wait %s S%d b%d%s", who, ir_comm_names[op->coll], op->stage, op->mb,
		         op->carried ? " carried" : "");
	} else if (op->comm == IR_COMM_WAIT) {
		snprintf(buf, n, "%s: wait %s S%d m%d", who, ir_value_names[op->kind], op->stage, op->mb);
	} else if (op->comm == IR_COMM_UPDATE) {
		snprintf(buf, n, "%s: update S%d b%d", who, op->stage, op->mb);
	} else if (op->comm == IR_COMM_TIE) {
		rank_name(g, st->rep, op->peer, peer, sizeof peer);
		snprintf(buf, n, "%s: tie S%d L%d with %s", who, op->stage, op->first, peer);
	} else if (ir_is_coll(op)) {
		snprintf(buf, n, "%s: %s S%d b%d over the DP group of D%d", who, ir_comm_names[op->comm],
		         op->stage, op->mb, st->dev);
	} else {
		snprintf(buf, n, "%s: %s %s S%d m%d %s %s", who, ir_comm_names[op->comm],
		         ir_value_names[op->kind], op->stage, op->mb,
		         op->comm == IR_COMM_SEND ? "to" : "from", peer);
	}
}

/* Kahn's algorithm; on a cycle, walk it and print it. */
static int prove(graph *g, ir_proof *out)
{
	int N = 2 * g->nsteps;
	int *deg = arena_calloc(g->a, (size_t)N + 1, sizeof *deg);
	int *head = arena_calloc(g->a, (size_t)N + 1, sizeof *head);
	int *adj = arena_calloc(g->a, (size_t)g->nedges + 1, sizeof *adj);
	int *queue = arena_calloc(g->a, (size_t)N + 1, sizeof *queue);
	for (long e = 0; e < g->nedges; e++)
		head[g->eu[e] + 1]++, deg[g->ev[e]]++;
	for (int u = 0; u < N; u++)
		head[u + 1] += head[u];
	int *fill = arena_calloc(g->a, (size_t)N + 1, sizeof *fill);
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
	const ir_module *m = g->m;
	if (qt == N) {
		*out = (ir_proof){true, m->plan.backend, g->nsteps, hash};
		return PROVE_OK;
	}
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
	if (g->D == 1)
		diag_sink_error(g->diag, ir_loc_or(m->plan_loc, m->loc),
		                "verify: the programs can deadlock under %s semantics; a cycle of waits:",
		                ir_backend_names[m->plan.backend]);
	else
		diag_sink_error(g->diag, ir_loc_or(m->plan_loc, m->loc),
		                "verify: the programs of the %d replicas can deadlock under %s semantics; a "
		                "cycle of waits:", g->D, ir_backend_names[m->plan.backend]);
	int start = u, last_step = -1, shown = 0, steps = 0;
	do {
		int s = u / 2;
		if (s != last_step) {
			if (shown < 64) {
				char buf[200];
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
	return PROVE_CYCLE;
}

/* The members of each DP group agree on each collective's bytes. */
static int check_bytes(graph *g)
{
	for (int r = 1; r < g->D; r++)
		for (int d = 0; d < g->P; d++) {
			const ir_device *dev = prog(g, r, d);
			for (int i = 0; i < dev->nops; i++) {
				const ir_op *op = &dev->ops[i];
				if (!ir_is_coll(op))
					continue;
				int k0 = g->coll_step[ckey(g->m, op->stage, op->mb, op->comm)];
				if (k0 < 0)
					continue; /* not in replica 0: ir_verify refused that */
				const step *s0 = &g->steps[k0];
				const ir_op *o0 = &prog(g, 0, s0->dev)->ops[s0->first];
				if (o0->bytes != op->bytes) {
					diag_sink_error(g->diag, op_at(g, r, d, i),
					                "verify: replica %d posts %s S%d b%d of %llu bytes, replica 0 of "
					                "%llu: the members of a DP group must agree on a collective's size",
					                r, ir_comm_names[op->comm], op->stage, op->mb,
					                (unsigned long long)op->bytes, (unsigned long long)o0->bytes);
					return PROVE_INVALID;
				}
			}
		}
	return PROVE_OK;
}

/* The k-th collective each member of a DP group posts is the same one:
 * MPI and NCCL match a group's collectives by the order of their posts. */
static int check_order(graph *g)
{
	for (int d = 0; d < g->P; d++)
		for (int r = 1; r < g->D; r++) {
			const ir_device *a = prog(g, 0, d), *b = prog(g, r, d);
			int i = 0, j = 0, k = 0;
			for (;; i++, j++, k++) {
				while (i < a->nops && !ir_is_coll(&a->ops[i]))
					i++;
				while (j < b->nops && !ir_is_coll(&b->ops[j]))
					j++;
				if (i >= a->nops || j >= b->nops)
					break; /* the same set of collectives (ir_verify): both end */
				const ir_op *x = &a->ops[i], *y = &b->ops[j];
				if (x->comm != y->comm || x->stage != y->stage || x->mb != y->mb) {
					diag_sink_error(g->diag, op_at(g, r, d, j),
					                "verify: the DP group of D%d disagrees on its collective %d: replica "
					                "%d posts %s S%d b%d where replica 0 posts %s S%d b%d (MPI and NCCL "
					                "match a group's collectives by the order of their posts)",
					                d, k, r, ir_comm_names[y->comm], y->stage, y->mb,
					                ir_comm_names[x->comm], x->stage, x->mb);
					return PROVE_INVALID;
				}
			}
		}
	return PROVE_OK;
}

int prove_replicas(const ir_module *m, const prove_replica *reps, int D, arena *a,
                   diag_sink *diag, ir_proof *proof)
{
	ir_assert(D >= 1 && (D == 1 || D == ir_dp(m)));
	graph g = {.m = m, .reps = reps, .D = D, .P = m->ndevices, .a = a, .diag = diag};
	for (int r = 0; r < D; r++) {
		if (reps[r].devices == m->devices)
			continue; /* the module's own: its caller verified them */
		ir_module v = replica_view(&g, r);
		if (ir_verify(&v) != 0)
			return PROVE_INVALID;
	}
	g.nkeys = (size_t)m->nlayers * 3;
	g.coll_step = arena_calloc(a, (size_t)D * g.nkeys + 1, sizeof *g.coll_step);
	for (size_t k = 0; k < (size_t)D * g.nkeys; k++)
		g.coll_step[k] = -1;
	build_steps(&g);
	build_edges(&g);
	int rc = check_bytes(&g);
	ir_proof got;
	if (rc == PROVE_OK)
		rc = prove(&g, &got);
	if (rc == PROVE_OK)
		rc = check_order(&g);
	if (rc == PROVE_OK && proof)
		*proof = got;
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
	/* The quotient: the replicas run these same programs, so one copy, in
	 * which each collective waits for its own post, decides (docs/deadlock.md,
	 * "Collectives"). */
	prove_replica q = {m->devices, (ir_loc *const *)m->op_loc};
	int rc = prove_replicas(m, &q, 1, cx->scratch, cx->diag, &m->proof) == PROVE_OK ? 0 : -1;
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
