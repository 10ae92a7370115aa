/* simulate.c: the discrete-event simulator (see simulate.h for the model).
 *
 * Every op has at most one input: F(s,m) takes F(s-1,m)'s activation,
 * B(s,m) takes B(s+1,m)'s gradient (the last stage's B takes its own F),
 * W(s,m) takes B(s,m).  Two kinds of event sit in one time-ordered heap: a
 * device starting its next op (once that op's input has arrived), and a
 * transfer starting on a link (once both ends are free).  In a schedule
 * that does not split the backward, B and W are one piece and the gradient
 * leaves when W ends.  Every event
 * pushed is at or after the one being handled, so events are handled in
 * time order and links are granted first come, first served. */
#include "simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

typedef struct event {
	double t;
	int kind; /* 0: transfer start, 1: device op start (transfers first at a tie) */
	int id;   /* transfer index or device */
} event;

typedef struct heap {
	event *a;
	int n, cap;
} heap;

static bool before(const event *x, const event *y)
{
	if (x->t != y->t)
		return x->t < y->t;
	if (x->kind != y->kind)
		return x->kind < y->kind;
	return x->id < y->id;
}

static void push(heap *h, event e)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 64;
		h->a = realloc(h->a, (size_t)h->cap * sizeof *h->a);
		if (!h->a)
			ir_bug("out of memory");
	}
	int i = h->n++;
	while (i > 0 && before(&e, &h->a[(i - 1) / 2])) {
		h->a[i] = h->a[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->a[i] = e;
}

static event pop(heap *h)
{
	event top = h->a[0], last = h->a[--h->n];
	int i = 0;
	for (;;) {
		int c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(&h->a[c + 1], &h->a[c]))
			c++;
		if (!before(&h->a[c], &last))
			break;
		h->a[i] = h->a[c];
		i = c;
	}
	if (h->n)
		h->a[i] = last;
	return top;
}

uint64_t sim_boundary_bytes(const ir_module *m)
{
	return ir_boundary_bytes(m); /* sim_run has checked it against the step's limit */
}

/* What a recomputing B runs again of layer c before its own work (hot, or
 * as cold as the B: the cache model): full recomputation the layer's F,
 * selective its sel_f (the scan's F; its share of F's cold time). */
double sim_redo_time(ir_recompute rc, const ir_cost *c, bool cold)
{
	switch (rc) {
	case IR_RECOMP_FULL: return cold ? c->f_cold : c->f;
	case IR_RECOMP_SELECTIVE: return cold && c->f > 0 ? c->sel_f * c->f_cold / c->f : c->sel_f;
	default: return 0;
	}
}

double sim_stage_time(const ir_module *m, int stage, ir_op_kind k)
{
	ir_recompute rc = m->stages[stage].recompute;
	double t = 0;
	for (int l = m->stages[stage].first; l <= m->stages[stage].last; l++) {
		const ir_cost *c = &m->layers[l].cost;
		t += k == IR_OP_F ? c->f : k == IR_OP_B ? c->b : c->w;
		if (k == IR_OP_B)
			t += sim_redo_time(rc, c, false);
	}
	return t;
}

/* Do pipeline devices a and b sit on one node in every replica? */
static bool same_node(const ir_module *m, int a, int b)
{
	int64_t n = m->cluster.per_node, D = ir_dp(m);
	for (int64_t r = 0; r < D; r++)
		if (ir_rank_of(m, r, a) / n != ir_rank_of(m, r, b) / n)
			return false;
	return true;
}

double sim_link_time(const ir_module *m, int a, int b, uint64_t bytes)
{
	const ir_cluster *c = &m->cluster;
	const ir_link *l = same_node(m, a, b) ? &c->intra : &c->inter;
	return l->lat + (isinf(l->bw) ? 0 : (double)bytes / l->bw * 1e6);
}

bool sim_group_intra(const ir_module *m, int p)
{
	int64_t n = m->cluster.per_node, D = ir_dp(m), node = ir_rank_of(m, 0, p) / n;
	for (int64_t r = 1; r < D; r++)
		if (ir_rank_of(m, r, p) / n != node)
			return false;
	return true;
}

double sim_coll_time(const ir_module *m, ir_comm c, int p, uint64_t bytes)
{
	const ir_link *l = sim_group_intra(m, p) ? &m->cluster.intra : &m->cluster.inter;
	double D = (double)ir_dp(m), tb = isinf(l->bw) ? 0 : (double)bytes / l->bw * 1e6;
	double ring = 2 * (D - 1) / D * tb + 2 * (D - 1) * l->lat;
	double tree = 2 * ceil(log2(D)) * (l->lat + tb);
	double t = ring < tree ? ring : tree;
	return c == IR_COMM_ALLREDUCE ? t : t / 2;
}

/* The parameters of the bucket a data-parallel op names. */
static uint64_t bucket_params(const ir_module *m, const ir_op *op)
{
	uint64_t n = 0;
	for (int l = op->first; l <= op->last; l++)
		n = ir_sat_add(n, m->layers[l].cost.params);
	return n;
}

double sim_update_time(const ir_module *m, const ir_op *op)
{
	uint64_t n = bucket_params(m, op), D = (uint64_t)ir_dp(m);
	if (m->plan.dist_opt && D > 1)
		n = (n + D - 1) / D;
	return cost_update_us(m, n);
}

void sim_free(sim_result *r)
{
	if (r)
		arena_free(r->arena);
}

typedef struct sim {
	const ir_module *m;
	sim_result *r;
	int S, M;
	int *where;      /* (stage, mb, kind) -> index in its device's program */
	double *arrive;  /* per (stage, mb, kind): when its input is there; NAN: not yet */
	double *free_at; /* per device: compute stream free */
	double *send_free, *recv_free;
	int *pc;         /* per device: next op */
	bool *queued;    /* per device: its next op is in the heap */
	int *consumer;   /* per transfer: the (stage, mb, kind) key it feeds */
	double *ready;   /* per transfer: producer's end */
	double *stime;   /* per (stage, kind): op duration */
	double **optime; /* cache model: per device and op, its duration; NULL: stime */
	double *wexact;  /* per stage: what deterministic sums add to its W (0: none) */
	heap h;
	/* Lowered programs: transfers follow the send and receive ops. */
	bool lowered, nccl;
	double *earliest;  /* per transfer: what its ops allow (NAN: not yet) */
	bool *xqueued;     /* per transfer: its start is in the heap */
	int *vxfer;        /* per value: its transfer, -1 before its producer ends */
	int *vsend, *vrecv;/* per value: op index of its send (on the producer's
	                    * device) and receive (on the consumer's) */
	double *posted;    /* mpi, per value: when the host posted the receive */
	int **step_of;     /* nccl, per device and op: its step on the comm stream */
	int **step_left;   /* nccl, per device and step: ops not started */
	int **step_first;  /* nccl, per device and step: its first op (its ops follow it) */
	double **step_end;
	int *nsteps, *head;
	double *head_since;
	/* Data parallelism (lowered programs with collectives). */
	bool dp;
	bool tie;          /* the programs sum a tied embedding across two devices */
	double **cpost;    /* per device and op: when the host posted the collective; NAN: not yet */
	int **coll_of;     /* per device and op: the collective a wait completes, else -1 */
	double *coll_free; /* mpi, per device: when its last collective ends */
	/* Carried waits: when the previous step's all-gathers end, from this
	 * step's start (NULL in the first step: nothing pending). */
	const double *const *release; /* per device and op (carried waits) */
	const double *comm0;          /* per device: its communication stream busy until */
} sim;

static int key(const sim *s, int stage, int mb, ir_op_kind k)
{
	return (stage * s->M + mb) * IR_NOPS + (int)k;
}

static int vidx(const sim *s, int stage, int mb, ir_op_kind k)
{
	return (stage * s->M + mb) * 2 + (k == IR_OP_F ? 0 : 1);
}

static double xfer_start(const sim *s, int x);
static void try_coll(sim *s, int d, int i);

/* Queue transfer x's start once its ops allow it: on nccl, when its send
 * and its receive are each at the head of their device's communication
 * stream; on mpi, once the receive is posted (the send is posted when its
 * value is made).  Unlowered programs: at once. */
static void try_xfer(sim *s, int x)
{
	if (s->xqueued[x])
		return;
	const sim_xfer *t = &s->r->xfers[x];
	double e = 0;
	if (s->lowered) {
		int v = vidx(s, t->stage, t->mb, t->kind);
		if (s->nccl) {
			if (s->step_of[t->src][s->vsend[v]] != s->head[t->src] ||
			    s->step_of[t->dst][s->vrecv[v]] != s->head[t->dst])
				return;
			e = s->head_since[t->src] > s->head_since[t->dst] ? s->head_since[t->src]
			                                                  : s->head_since[t->dst];
		} else {
			if (isnan(s->posted[v]))
				return;
			e = s->posted[v];
		}
	}
	s->earliest[x] = e;
	s->xqueued[x] = true;
	push(&s->h, (event){xfer_start(s, x), 0, x});
}

/* nccl: a step of d's communication stream has started all its ops, the
 * last ending at `end`; the next becomes the head then, and the transfers
 * it holds that are ready may start. */
static void step_started(sim *s, int d, int step, double end)
{
	if (end > s->step_end[d][step])
		s->step_end[d][step] = end;
	if (--s->step_left[d][step] > 0 || step != s->head[d])
		return;
	const ir_device *dev = &s->m->devices[d];
	while (s->head[d] < s->nsteps[d] && s->step_left[d][s->head[d]] == 0) {
		s->head_since[d] = s->step_end[d][s->head[d]];
		s->head[d]++;
	}
	if (s->head[d] == s->nsteps[d])
		return;
	for (int i = s->step_first[d][s->head[d]]; i < dev->nops && s->step_of[d][i] == s->head[d];
	     i++) {
		const ir_op *op = &dev->ops[i];
		if (ir_is_coll(op)) {
			try_coll(s, d, i);
			continue;
		}
		int x = s->vxfer[vidx(s, op->stage, op->mb, op->kind)];
		if (x >= 0)
			try_xfer(s, x);
	}
}

/* Time collective i of device d once it may start: posted, and on nccl at
 * the head of the communication stream; on mpi after the device's
 * previous collective.  Every replica posts it at the same time, so the
 * group starts it then. */
static void try_coll(sim *s, int d, int i)
{
	sim_device *sd = &s->r->dev[d];
	double st = s->cpost[d][i];
	if (!isnan(sd->start[i]) || isnan(st))
		return;
	if (s->nccl) {
		if (s->step_of[d][i] != s->head[d])
			return;
		if (s->head_since[d] > st)
			st = s->head_since[d];
	} else if (s->coll_free[d] > st) {
		st = s->coll_free[d];
	}
	const ir_op *op = &s->m->devices[d].ops[i];
	double t = sim_coll_time(s->m, op->comm, d, op->bytes);
	sd->start[i] = st;
	sd->end[i] = st + t;
	sd->coll += t;
	if (s->nccl)
		step_started(s, d, s->step_of[d][i], sd->end[i]);
	else
		s->coll_free[d] = sd->end[i];
}

static void try_device(sim *s, int d);

/* Time the tied sum at op i of device d once both copies' devices have
 * posted theirs: an all-reduce of two over the link between them (each
 * sends and receives half the table twice), then take up the other
 * device, whose wait may be held on it. */
static void try_tie(sim *s, int d, int i)
{
	const ir_op *op = &s->m->devices[d].ops[i];
	const ir_device *pd = &s->m->devices[op->peer];
	int j = 0;
	while (j < pd->nops && pd->ops[j].comm != IR_COMM_TIE)
		j++;
	if (j == pd->nops || !isnan(s->r->dev[d].start[i]) || isnan(s->cpost[d][i]) ||
	    isnan(s->cpost[op->peer][j]))
		return;
	double st = s->cpost[d][i] > s->cpost[op->peer][j] ? s->cpost[d][i] : s->cpost[op->peer][j];
	double t = 2 * sim_link_time(s->m, d, op->peer, op->bytes / 2);
	int who[2][2] = {{d, i}, {op->peer, j}};
	for (int k = 0; k < 2; k++) {
		sim_device *sd = &s->r->dev[who[k][0]];
		sd->start[who[k][1]] = st;
		sd->end[who[k][1]] = st + t;
		sd->coll += t;
	}
	try_device(s, op->peer);
}

/* Push device d's next op if its input has arrived. */
static void try_device(sim *s, int d)
{
	const ir_device *dev = &s->m->devices[d];
	/* Sends, receives and waits are timed as the transfers they stand
	 * for, not as ops of the compute stream; on mpi the host posts a
	 * receive when it gets there, and posting a send or a receive takes
	 * the host's time (the cluster's send_post, recv_post). */
	while (s->pc[d] < dev->nops && dev->ops[s->pc[d]].comm != IR_COMM_NONE) {
		const ir_op *op = &dev->ops[s->pc[d]];
		sim_device *sd = &s->r->dev[d];
		int i = s->pc[d];
		if (ir_is_coll(op)) {
			/* The host packs the bucket (counted with the updates), then posts. */
			double pack = cost_pack_us(s->m, bucket_params(s->m, op));
			s->free_at[d] += pack;
			sd->update += pack;
			s->cpost[d][i] = s->free_at[d];
			if (s->free_at[d] > s->r->makespan) /* the step's last op, when carried */
				s->r->makespan = s->free_at[d];
			try_coll(s, d, i);
		} else if (op->comm == IR_COMM_TIE) {
			/* The host posts it (MPI, on the host's copy of the gradient). */
			s->cpost[d][i] = s->free_at[d];
			try_tie(s, d, i);
		} else if (op->comm == IR_COMM_WAIT && op->coll != IR_COMM_NONE) {
			/* Blocks the compute stream until its collective ends, then the
			 * host unpacks the result; taken up again when the collective
			 * is timed.  A carried wait's collective is the previous
			 * step's, at its release. */
			const ir_op *c = &dev->ops[s->coll_of[d][i]];
			double e = !op->carried ? sd->end[s->coll_of[d][i]]
			         : s->release ? s->release[d][i] : 0;
			if (isnan(e))
				return;
			sd->start[i] = s->free_at[d];
			sd->end[i] = e > s->free_at[d] ? e : s->free_at[d];
			sd->exposed += sd->end[i] - sd->start[i];
			if (op->carried)
				sd->gather_exposed += sd->end[i] - sd->start[i];
			double unpack = c->comm == IR_COMM_TIE ? 0 : cost_unpack_us(s->m, bucket_params(s->m, c));
			sd->end[i] += unpack;
			sd->update += unpack;
			s->free_at[d] = sd->end[i];
			if (sd->end[i] > s->r->makespan)
				s->r->makespan = sd->end[i];
		} else if (op->comm == IR_COMM_UPDATE) {
			sd->start[i] = s->free_at[d];
			sd->end[i] = sd->start[i] + sim_update_time(s->m, op);
			sd->update += sd->end[i] - sd->start[i];
			s->free_at[d] = sd->end[i];
			if (sd->end[i] > s->r->makespan)
				s->r->makespan = sd->end[i];
		} else if (s->lowered && !s->nccl && op->comm == IR_COMM_RECV) {
			int v = vidx(s, op->stage, op->mb, op->kind);
			s->posted[v] = s->free_at[d];
			s->free_at[d] += s->m->cluster.recv_post;
			if (s->vxfer[v] >= 0)
				try_xfer(s, s->vxfer[v]);
		} else if (s->lowered && !s->nccl && op->comm == IR_COMM_SEND) {
			s->free_at[d] += s->m->cluster.send_post;
		}
		s->pc[d]++;
	}
	if (s->queued[d] || s->pc[d] >= dev->nops)
		return;
	const ir_op *op = &dev->ops[s->pc[d]];
	double a = s->arrive[key(s, op->stage, op->mb, op->kind)];
	if (isnan(a))
		return;
	s->queued[d] = true;
	push(&s->h, (event){a > s->free_at[d] ? a : s->free_at[d], 1, d});
}

static double xfer_start(const sim *s, int x)
{
	const sim_xfer *t = &s->r->xfers[x];
	double st = s->ready[x];
	if (s->earliest[x] > st)
		st = s->earliest[x];
	if (s->send_free[t->src] > st)
		st = s->send_free[t->src];
	if (s->recv_free[t->dst] > st)
		st = s->recv_free[t->dst];
	return st;
}

/* The value op (stage, mb, k) produced at time `end` on device d goes to
 * its consumer: directly on the same device, else through a transfer. */
static void deliver(sim *s, int d, int stage, int mb, ir_op_kind k, double end)
{
	const ir_module *m = s->m;
	int cs = -1;
	ir_op_kind ck;
	if (k == IR_OP_F) {
		if (stage + 1 < s->S)
			cs = stage + 1, ck = IR_OP_F;
		else
			cs = stage, ck = IR_OP_B;
	} else {
		bool split = ir_schedule_splits_backward[m->plan.schedule];
		if (k == IR_OP_B) /* W(s,m) needs its B */
			s->arrive[key(s, stage, mb, IR_OP_W)] = end;
		if (stage == 0 || (k == IR_OP_B) != split)
			return;
		cs = stage - 1, ck = IR_OP_B;
	}
	int cd = m->stages[cs].device;
	int ckey = key(s, cs, mb, ck);
	if (cd == d) {
		s->arrive[ckey] = end;
		try_device(s, d);
		return;
	}
	sim_result *r = s->r;
	int x = r->nxfers++;
	r->xfers[x] = (sim_xfer){d, cd, k == IR_OP_F ? IR_OP_F : IR_OP_B, stage, mb,
	                         r->boundary_bytes, 0, 0};
	s->consumer[x] = ckey;
	s->ready[x] = end;
	if (s->lowered)
		s->vxfer[vidx(s, stage, mb, k)] = x;
	try_xfer(s, x);
}

/* The cache model (docs/simulator.md, "cache"): a layer's F, B or W takes
 * its hot time when the data it reads is still in the device's cache and
 * its cold time when it is not; in between, by how much else the device
 * touched since that data was last touched (its reuse distance), over the
 * cache size:  t = hot + min(1, distance / cache) x (cold - hot).  The data
 * of F(l,m) is layer l's weights, last touched by the layer's previous op
 * on the device (the step's first F: by the optimizer, so cold); of
 * B(l,m), F(l,m)'s activation stash; of W(l,m), B(l,m)'s W stash.  An op
 * touches its layer's weights (W: its gradients), its stashes, and its
 * input and output (a boundary each, F and B).  The layers of an op run
 * as the runtime runs them: F and W in layer order, B in reverse.
 * Returns per device and op the op's duration, or NULL when the model is
 * off (no cache size, or no layer with cold times). */
static double **cache_times(const ir_module *m, int M)
{
	bool any = false;
	for (int l = 0; l < m->nlayers; l++)
		any |= m->layers[l].cost.cold;
	if (!m->cluster.cache || !any)
		return NULL;
	double C = (double)m->cluster.cache, io = 2.0 * (double)sim_boundary_bytes(m);
	double wbytes = (double)ir_dtype_bytes[m->model.dtype];
	size_t n = (size_t)m->nlayers * (size_t)M;
	double **t = calloc((size_t)m->ndevices, sizeof *t);
	/* The device's running total of bytes touched after the layer's
	 * last op, after F(l,m) and after B(l,m); NAN: not yet. */
	double *last = malloc((size_t)m->nlayers * sizeof *last);
	double *after_f = malloc(n * sizeof *after_f), *after_b = malloc(n * sizeof *after_b);
	if (!t || !last || !after_f || !after_b)
		ir_bug("out of memory");
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		if (!(t[d] = malloc(((size_t)dev->nops + 1) * sizeof **t)))
			ir_bug("out of memory");
		for (int st = 0; st < m->nstages; st++)
			if (m->stages[st].device == d)
				for (int l = m->stages[st].first; l <= m->stages[st].last; l++) {
					last[l] = NAN;
					for (int mb = 0; mb < M; mb++)
						after_f[(size_t)l * M + mb] = after_b[(size_t)l * M + mb] = NAN;
				}
		double total = 0;
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			t[d][i] = 0;
			if (op->comm != IR_COMM_NONE)
				continue;
			const ir_stage *st = &m->stages[op->stage];
			int n_l = st->last - st->first + 1;
			bool redo = op->kind == IR_OP_B && st->recompute != IR_RECOMP_NONE;
			ir_recompute rc = st->recompute;
			for (int j = 0; j < n_l; j++) {
				int l = op->kind == IR_OP_B ? st->last - j : st->first + j;
				const ir_cost *c = &m->layers[l].cost;
				size_t lm = (size_t)l * M + (size_t)op->mb;
				double since = op->kind == IR_OP_F ? last[l]
				               : op->kind == IR_OP_B ? after_f[lm] : after_b[lm];
				double hot = op->kind == IR_OP_F ? c->f : op->kind == IR_OP_B ? c->b : c->w;
				double cold = op->kind == IR_OP_F ? c->f_cold
				              : op->kind == IR_OP_B ? c->b_cold : c->w_cold;
				if (redo) /* F again (or its scan), as cold as the B that follows it */
					hot += sim_redo_time(rc, c, false), cold += sim_redo_time(rc, c, c->cold);
				double frac = isnan(since) ? 1 : (total - since) / C;
				t[d][i] += c->cold ? hot + (frac < 1 ? frac : 1) * (cold - hot) : hot;
				double weights = (double)c->params * wbytes;
				total += op->kind == IR_OP_F   ? (double)c->act + weights + io
				         : op->kind == IR_OP_B ? (double)c->act + (double)c->wstash + weights + io
				                               : (double)c->wstash + weights;
				last[l] = total;
				if (op->kind == IR_OP_F)
					after_f[lm] = total;
				else if (op->kind == IR_OP_B)
					after_b[lm] = total;
			}
		}
	}
	free(last);
	free(after_f);
	free(after_b);
	return t;
}

static void device_stats(const ir_module *m, sim_result *r, int d)
{
	sim_device *sd = &r->dev[d];
	const ir_device *dev = &m->devices[d];
	double first_b = -1, last_f_end = 0;
	for (int i = 0; i < dev->nops; i++) {
		if (dev->ops[i].comm != IR_COMM_NONE)
			continue;
		sd->busy += sd->end[i] - sd->start[i];
		if (sd->end[i] > sd->pipeline)
			sd->pipeline = sd->end[i];
		if (dev->ops[i].kind == IR_OP_B && first_b < 0)
			first_b = sd->start[i];
		if (dev->ops[i].kind == IR_OP_F && sd->end[i] > last_f_end)
			last_f_end = sd->end[i];
	}
	/* The waits for collectives and the updates come after the device's
	 * last compute op (comm places them there): neither idle nor busy. */
	double dp_time = sd->exposed + sd->update;
	double idle = r->makespan - sd->busy - dp_time;
	if (first_b < 0) {
		sd->warmup = idle;
		return;
	}
	/* Busy time inside [lo, hi), from the sequential ops; carried waits
	 * (with their unpacking) hold the compute stream early in the step. */
	double cool_from = last_f_end > first_b ? last_f_end : first_b;
	double busy_warm = 0, busy_cool = 0, dp_warm = 0;
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		if (op->comm == IR_COMM_WAIT && op->carried && sd->start[i] < first_b)
			dp_warm += sd->end[i] - sd->start[i];
		if (op->comm != IR_COMM_NONE)
			continue;
		double a = sd->start[i], b = sd->end[i];
		if (a < first_b)
			busy_warm += (b < first_b ? b : first_b) - a;
		if (b > cool_from)
			busy_cool += b - (a > cool_from ? a : cool_from);
	}
	sd->warmup = first_b - busy_warm - dp_warm;
	sd->cooldown = (r->makespan - cool_from) - busy_cool - (dp_time - dp_warm);
	sd->residual = idle - sd->warmup - sd->cooldown;
	/* The rounding of the sums leaves what should be 0 a hair below it
	 * ("-0.0 us" in a report): such a remainder is 0. */
	double eps = 1e-9 * r->makespan;
	if (sd->warmup < 0 && sd->warmup > -eps)
		sd->warmup = 0;
	if (sd->cooldown < 0 && sd->cooldown > -eps)
		sd->cooldown = 0;
	if (sd->residual < 0 && sd->residual > -eps)
		sd->residual = 0;
}

/* Memory along the device's program order: F stashes its stage's
 * activations until B (with full recomputation its input, and the whole
 * stash during F and again during B; with selective all but its layers'
 * sel_act: ir_stage_kept, ir_stage_redo); B keeps the W stash until W. */
static void device_memory(const ir_module *m, sim_result *r, int d)
{
	sim_device *sd = &r->dev[d];
	const ir_device *dev = &m->devices[d];
	/* Every sum here is a part of the step's bytes, which sim_run has
	 * checked against IR_MAX_STEP_BYTES: saturating adds all the same. */
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].device == d)
			for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
				sd->resident = ir_sat_add(sd->resident, cost_resident(m, l));
	/* The runtime's scratch, allocated with the model for the whole run. */
	sd->scratch = cost_device_scratch(m, d);
	int *coll_of = malloc(((size_t)dev->nops + 1) * sizeof *coll_of);
	if (!coll_of)
		ir_bug("out of memory");
	ir_coll_waits(dev, coll_of);
	uint64_t cur = 0, peak = 0;
	int inflight = 0;
	/* A collective completed by a carried wait keeps its buffer through
	 * the whole program, as memplan lays it out (ir_live_buffers). */
	bool *kept = calloc((size_t)dev->nops + 1, sizeof *kept);
	if (!kept)
		ir_bug("out of memory");
	for (int i = 0; i < dev->nops; i++)
		if (coll_of[i] > i)
			kept[coll_of[i]] = true, cur = ir_sat_add(cur, dev->ops[coll_of[i]].bytes);
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		/* A collective's buffer, from its post to its wait. */
		if (ir_is_coll(op) && !kept[i])
			cur = ir_sat_add(cur, op->bytes);
		else if (coll_of[i] >= 0 && coll_of[i] < i && ir_is_coll(&dev->ops[coll_of[i]]))
			cur -= dev->ops[coll_of[i]].bytes; /* (a tie's sum is in place: no buffer) */
		if (cur > peak)
			peak = cur;
		if (op->comm != IR_COMM_NONE)
			continue;
		const ir_stage *st = &m->stages[op->stage];
		uint64_t act = ir_stage_kept(m, op->stage), redo = ir_stage_redo(m, op->stage), ws = 0;
		for (int l = st->first; l <= st->last; l++)
			ws = ir_sat_add(ws, m->layers[l].cost.wstash);
		/* Verified programs run each F before its B and each B before its
		 * W, so what is taken off was put on: never below 0. */
		if (op->kind == IR_OP_F) {
			cur = ir_sat_add(cur, act), inflight++;
			if (ir_sat_add(cur, redo) > peak)
				peak = ir_sat_add(cur, redo);
		} else if (op->kind == IR_OP_B) {
			/* B reads the stash while it writes the W stash: both at once
			 * (and, recomputing, the stash it made again beside the input). */
			cur = ir_sat_add(cur, ws);
			if (ir_sat_add(cur, redo) > peak)
				peak = ir_sat_add(cur, redo);
			cur = cur >= act ? cur - act : 0, inflight--;
		} else {
			cur = cur >= ws ? cur - ws : 0;
		}
		if (cur > peak)
			peak = cur;
		if (inflight > sd->peak_inflight)
			sd->peak_inflight = inflight;
	}
	free(coll_of);
	free(kept);
	sd->peak_act = peak;
	/* memplan: the arena holds every buffer of the step, laid out; it is
	 * what codegen allocates, so it is the peak (docs/memplan.md). */
	if (m->memplan)
		sd->peak_act = m->memplan[d].arena;
	sd->peak_mem = ir_sat_add(ir_sat_add(sd->resident, sd->scratch), sd->peak_act);
}

/* Index the lowered programs: each value's send and receive; on nccl the
 * steps of every communication stream (a group is one step). */
static void setup_lowered(sim *s)
{
	const ir_module *m = s->m;
	int P = m->ndevices;
	size_t nv = (size_t)s->S * s->M * 2;
	s->vxfer = malloc(nv * sizeof *s->vxfer);
	s->vsend = malloc(nv * sizeof *s->vsend);
	s->vrecv = malloc(nv * sizeof *s->vrecv);
	s->posted = malloc(nv * sizeof *s->posted);
	s->step_of = calloc((size_t)P, sizeof *s->step_of);
	s->step_left = calloc((size_t)P, sizeof *s->step_left);
	s->step_first = calloc((size_t)P, sizeof *s->step_first);
	s->step_end = calloc((size_t)P, sizeof *s->step_end);
	s->nsteps = calloc((size_t)P, sizeof *s->nsteps);
	s->head = calloc((size_t)P, sizeof *s->head);
	s->head_since = calloc((size_t)P, sizeof *s->head_since);
	if (!s->vxfer || !s->vsend || !s->vrecv || !s->posted || !s->step_of || !s->step_left ||
	    !s->step_first || !s->step_end || !s->nsteps || !s->head || !s->head_since)
		ir_bug("out of memory");
	for (size_t v = 0; v < nv; v++)
		s->vxfer[v] = s->vsend[v] = s->vrecv[v] = -1, s->posted[v] = NAN;
	for (int d = 0; d < P; d++) {
		const ir_device *dev = &m->devices[d];
		s->step_of[d] = malloc(((size_t)dev->nops + 1) * sizeof **s->step_of);
		s->step_left[d] = calloc((size_t)dev->nops + 1, sizeof **s->step_left);
		s->step_first[d] = calloc((size_t)dev->nops + 1, sizeof **s->step_first);
		s->step_end[d] = calloc((size_t)dev->nops + 1, sizeof **s->step_end);
		if (!s->step_of[d] || !s->step_left[d] || !s->step_first[d] || !s->step_end[d])
			ir_bug("out of memory");
		int n = 0;
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			s->step_of[d][i] = -1;
			s->tie |= op->comm == IR_COMM_TIE;
			if (ir_is_coll(op)) { /* a step of its own */
				s->dp = true;
				s->step_first[d][n] = i;
				s->step_of[d][i] = n;
				s->step_left[d][n++] = 1;
				continue;
			}
			if (op->comm != IR_COMM_SEND && op->comm != IR_COMM_RECV)
				continue;
			int v = vidx(s, op->stage, op->mb, op->kind);
			(op->comm == IR_COMM_SEND ? s->vsend : s->vrecv)[v] = i;
			bool joins = op->group && i > 0 && dev->ops[i - 1].group == op->group &&
			             (dev->ops[i - 1].comm == IR_COMM_SEND || dev->ops[i - 1].comm == IR_COMM_RECV);
			if (!joins)
				s->step_first[d][n++] = i;
			s->step_of[d][i] = n - 1;
			s->step_left[d][n - 1]++;
		}
		s->nsteps[d] = n;
	}
	s->cpost = calloc((size_t)P, sizeof *s->cpost);
	s->coll_of = calloc((size_t)P, sizeof *s->coll_of);
	s->coll_free = calloc((size_t)P, sizeof *s->coll_free);
	if (!s->cpost || !s->coll_of || !s->coll_free)
		ir_bug("out of memory");
	for (int d = 0; (s->dp || s->tie) && d < P; d++) {
		const ir_device *dev = &m->devices[d];
		s->cpost[d] = malloc(((size_t)dev->nops + 1) * sizeof **s->cpost);
		s->coll_of[d] = malloc(((size_t)dev->nops + 1) * sizeof **s->coll_of);
		if (!s->cpost[d] || !s->coll_of[d])
			ir_bug("out of memory");
		for (int i = 0; i < dev->nops; i++)
			s->cpost[d][i] = NAN;
		ir_coll_waits(dev, s->coll_of[d]);
	}
	/* The previous step's all-gathers hold the communication stream. */
	for (int d = 0; s->comm0 && d < P; d++)
		s->head_since[d] = s->coll_free[d] = s->comm0[d];
}

static void free_lowered(sim *s)
{
	for (int d = 0; d < s->m->ndevices; d++) {
		free(s->step_of[d]);
		free(s->step_left[d]);
		free(s->step_first[d]);
		free(s->step_end[d]);
		free(s->cpost[d]);
		free(s->coll_of[d]);
	}
	void *bufs[] = {s->vxfer, s->vsend, s->vrecv, s->posted, s->step_of, s->step_left,
	                s->step_first, s->step_end, s->nsteps, s->head, s->head_since,
	                s->cpost, s->coll_of, s->coll_free};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		free(bufs[i]);
}

sim_result *sim_run_ready(const ir_module *m, bool *failed)
{
	*failed = false;
	if (!m->ndevices || !m->nstages)
		return NULL;
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known)
			return NULL;
	sim_result *r = sim_run(m);
	*failed = r == NULL;
	return r;
}

sim_result *sim_run(const ir_module *m)
{
	return sim_run_to(m, NULL);
}

static sim_result *sim_step(const ir_module *m, diag_sink *ds, const double *const *release,
                            const double *comm0);

/* Does a program carry a wait into the next step? */
static bool carries(const ir_module *m)
{
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			if (m->devices[d].ops[i].comm == IR_COMM_WAIT && m->devices[d].ops[i].carried)
				return true;
	return false;
}

/* The steady state of a step loop with carried waits (simulate.h): each
 * step's carried waits and communication streams released when the step
 * before's all-gathers end, measured from its end, until a step repeats
 * the one before. */
sim_result *sim_run_to(const ir_module *m, diag_sink *ds)
{
	sim_result *r = sim_step(m, ds, NULL, NULL);
	if (!r || !ir_lowered(m) || !carries(m))
		return r;
	int P = m->ndevices;
	double **rel = calloc((size_t)P, sizeof *rel), *comm0 = calloc((size_t)P, sizeof *comm0);
	int *of = NULL;
	if (!rel || !comm0)
		ir_bug("out of memory");
	for (int d = 0; d < P; d++) {
		rel[d] = malloc(((size_t)m->devices[d].nops + 1) * sizeof **rel);
		if (!rel[d])
			ir_bug("out of memory");
		for (int i = 0; i < m->devices[d].nops; i++)
			rel[d][i] = NAN;
	}
	int steps = 1;
	for (; steps < SIM_MAX_STEPS; steps++) {
		bool same = true;
		for (int d = 0; d < P; d++) {
			const ir_device *dev = &m->devices[d];
			of = realloc(of, ((size_t)dev->nops + 1) * sizeof *of);
			if (!of)
				ir_bug("out of memory");
			ir_coll_waits(dev, of);
			double busy = 0;
			for (int i = 0; i < dev->nops; i++) {
				double e = r->dev[d].end[i] - r->makespan;
				if (ir_is_coll(&dev->ops[i]) && e > busy)
					busy = e;
				if (!(dev->ops[i].comm == IR_COMM_WAIT && dev->ops[i].carried))
					continue;
				e = r->dev[d].end[of[i]] - r->makespan;
				e = e > 0 ? e : 0;
				same &= rel[d][i] == e;
				rel[d][i] = e;
			}
			same &= comm0[d] == busy;
			comm0[d] = busy;
		}
		if (same)
			break;
		sim_result *next = sim_step(m, ds, (const double *const *)rel, comm0);
		if (!next)
			break; /* cannot happen: the first step ran */
		sim_free(r);
		r = next;
	}
	r->steps = steps;
	for (int d = 0; d < P; d++)
		free(rel[d]);
	free(rel);
	free(comm0);
	free(of);
	return r;
}

static sim_result *sim_step(const ir_module *m, diag_sink *ds, const double *const *release,
                            const double *comm0)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			diag_sink_error(ds, where, "simulate: layer L%d has no cost; run the 'cost' pass first", l);
			return NULL;
		}
	if (!m->ndevices || !m->nstages) {
		diag_sink_error(ds, where, "simulate: the module has no programs; run 'schedule' first");
		return NULL;
	}
	int over = ir_step_bytes_overflow(m);
	if (over >= 0) {
		ir_step_bytes_error(m, over, ir_loc_or(m->layer_loc ? m->layer_loc[over] : (ir_loc){0}, where), ds);
		return NULL;
	}
	arena *ar = arena_new();
	sim_result *r = arena_alloc(ar, sizeof *r);
	r->arena = ar;
	r->ndev = m->ndevices;
	r->dev = arena_alloc(ar, (size_t)r->ndev * sizeof *r->dev);
	r->boundary_bytes = sim_boundary_bytes(m);
	r->steps = 1;
	sim s = {.m = m, .r = r, .S = m->nstages, .M = (int)ir_local_mb(m), .release = release,
	         .comm0 = comm0};
	size_t nkeys = (size_t)s.S * (size_t)s.M * IR_NOPS;
	s.arrive = malloc(nkeys * sizeof *s.arrive);
	s.free_at = calloc((size_t)r->ndev, sizeof *s.free_at);
	s.send_free = calloc((size_t)r->ndev, sizeof *s.send_free);
	s.recv_free = calloc((size_t)r->ndev, sizeof *s.recv_free);
	s.pc = calloc((size_t)r->ndev, sizeof *s.pc);
	s.queued = calloc((size_t)r->ndev, sizeof *s.queued);
	s.stime = malloc((size_t)s.S * IR_NOPS * sizeof *s.stime);
	s.wexact = calloc((size_t)s.S + 1, sizeof *s.wexact);
	/* At most one transfer per F and per B. */
	size_t maxx = 2 * (size_t)s.S * (size_t)s.M;
	r->xfers = arena_alloc(ar, maxx * sizeof *r->xfers);
	s.consumer = malloc(maxx * sizeof *s.consumer);
	s.ready = malloc(maxx * sizeof *s.ready);
	if (!s.arrive || !s.free_at || !s.send_free || !s.recv_free || !s.pc || !s.queued || !s.stime ||
	    !s.wexact || !s.consumer || !s.ready)
		ir_bug("out of memory");
	for (size_t i = 0; i < nkeys; i++)
		s.arrive[i] = NAN;
	for (int mb = 0; mb < s.M; mb++)
		s.arrive[key(&s, 0, mb, IR_OP_F)] = 0; /* data is there from the start */
	for (int st = 0; st < s.S; st++)
		for (int k = 0; k < IR_NOPS; k++)
			s.stime[st * IR_NOPS + k] = sim_stage_time(m, st, (ir_op_kind)k);
	for (int st = 0; st < s.S; st++)
		for (int l = m->stages[st].first; l <= m->stages[st].last; l++)
			s.wexact[st] += cost_exact_add_us(m, m->layers[l].cost.params);
	s.optime = cache_times(m, s.M);
	s.earliest = calloc(maxx, sizeof *s.earliest);
	s.xqueued = calloc(maxx, sizeof *s.xqueued);
	if (!s.earliest || !s.xqueued)
		ir_bug("out of memory");
	s.lowered = ir_lowered(m);
	s.nccl = m->plan.backend == IR_BACKEND_NCCL;
	if (s.lowered)
		setup_lowered(&s);
	int total = 0;
	for (int d = 0; d < r->ndev; d++) {
		int n = m->devices[d].nops;
		r->dev[d].start = arena_alloc(ar, (size_t)n * sizeof(double));
		r->dev[d].end = arena_alloc(ar, (size_t)n * sizeof(double));
		for (int i = 0; i < n; i++) {
			r->dev[d].start[i] = r->dev[d].end[i] = NAN; /* comm ops keep NAN */
			total += m->devices[d].ops[i].comm == IR_COMM_NONE;
		}
		try_device(&s, d);
	}

	int done = 0, nstarted = 0;
	while (s.h.n) {
		event e = pop(&s.h);
		if (e.kind == 0) {
			double st = xfer_start(&s, e.id);
			if (st > e.t) { /* a link end was taken meanwhile */
				push(&s.h, (event){st, 0, e.id});
				continue;
			}
			sim_xfer *x = &r->xfers[e.id];
			x->start = st; /* == e.t: events are taken in time order */
			x->seq = nstarted++;
			x->end = st + sim_link_time(m, x->src, x->dst, x->bytes);
			s.send_free[x->src] = s.recv_free[x->dst] = x->end;
			s.arrive[s.consumer[e.id]] = x->end;
			if (s.lowered && s.nccl) {
				int v = vidx(&s, x->stage, x->mb, x->kind);
				step_started(&s, x->src, s.step_of[x->src][s.vsend[v]], x->end);
				step_started(&s, x->dst, s.step_of[x->dst][s.vrecv[v]], x->end);
				if (s.dp) /* a collective it let start may free a wait */
					try_device(&s, x->src);
			}
			try_device(&s, x->dst);
			continue;
		}
		int d = e.id;
		s.queued[d] = false;
		const ir_op *op = &m->devices[d].ops[s.pc[d]];
		double end = e.t + (s.optime ? s.optime[d][s.pc[d]] : s.stime[op->stage * IR_NOPS + op->kind]);
		if (op->kind == IR_OP_W) /* deterministic sums: each W's exact add */
			end += s.wexact[op->stage];
		r->dev[d].start[s.pc[d]] = e.t;
		r->dev[d].end[s.pc[d]] = end;
		s.free_at[d] = end;
		s.pc[d]++;
		done++;
		if (end > r->makespan)
			r->makespan = end;
		deliver(&s, d, op->stage, op->mb, op->kind, end);
		try_device(&s, d);
	}

	/* A carried wait waits beside its F, which waits for its input: only
	 * the part after that input has arrived is the gather's exposure. */
	for (int d = 0; s.dp && d < r->ndev; d++) {
		const ir_device *dev = &m->devices[d];
		sim_device *sd = &r->dev[d];
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm != IR_COMM_WAIT || !op->carried || isnan(sd->end[i]))
				continue;
			int j = i + 1;
			while (j < dev->nops && dev->ops[j].comm != IR_COMM_NONE)
				j++;
			if (j == dev->nops)
				continue;
			double in = s.arrive[key(&s, dev->ops[j].stage, dev->ops[j].mb, dev->ops[j].kind)];
			double blocked = sd->end[i] - cost_unpack_us(m, bucket_params(m, &dev->ops[s.coll_of[d][i]]));
			double hide = (in < blocked ? in : blocked) - sd->start[i];
			if (!(hide > 0))
				continue;
			sd->start[i] += hide;
			sd->exposed -= hide;
			sd->gather_exposed -= hide;
		}
	}

	int rc = 0;
	bool stuck = done != total;
	for (int d = 0; d < r->ndev; d++)
		stuck |= s.pc[d] < m->devices[d].nops;
	if (stuck) {
		for (int d = 0; d < r->ndev; d++)
			if (s.pc[d] < m->devices[d].nops) {
				const ir_op *op = &m->devices[d].ops[s.pc[d]];
				/* At the op that waits, where it was read (IR text, a
				 * torch schedule), else at the plan. */
				ir_loc at = where;
				if (m->op_loc && m->op_loc[d])
					at = ir_loc_or(m->op_loc[d][s.pc[d]], where);
				if (op->comm == IR_COMM_WAIT && op->coll != IR_COMM_NONE)
					diag_sink_error(ds, at, "simulate: the programs cannot run to the end: D%d waits at "
					                "op %d (wait %s S%d b%d) for a collective that never starts",
					                d, s.pc[d], ir_comm_names[op->coll], op->stage, op->mb);
				else
					diag_sink_error(ds, at, "simulate: the programs cannot run to the end: D%d waits at op %d "
					                  "(%s S%d m%d) for an input that is never produced",
					           d, s.pc[d], ir_op_names[op->kind], op->stage, op->mb);
				break;
			}
		rc = -1;
	}
	free(s.arrive);
	free(s.free_at);
	free(s.send_free);
	free(s.recv_free);
	free(s.pc);
	free(s.queued);
	free(s.stime);
	free(s.wexact);
	if (s.optime)
		for (int d = 0; d < r->ndev; d++)
			free(s.optime[d]);
	free(s.optime);
	free(s.consumer);
	free(s.ready);
	free(s.earliest);
	free(s.xqueued);
	if (s.lowered)
		free_lowered(&s);
	free(s.h.a);
	if (rc) {
		sim_free(r);
		return NULL;
	}

	double idle = 0, flops = 0;
	r->dp = ir_dp(m);
	for (int d = 0; d < r->ndev; d++) {
		sim_device *sd = &r->dev[d];
		device_stats(m, r, d);
		device_memory(m, r, d);
		/* A device busy the whole step: its sum rounds to +-1 ulp of it. */
		double gap = r->makespan - sd->busy - sd->exposed - sd->update;
		idle += gap > 0 ? gap : 0;
		r->exposed = sd->exposed > r->exposed ? sd->exposed : r->exposed;
		if (sd->gather_exposed > r->gather_exposed)
			r->gather_exposed = sd->gather_exposed;
		r->update = sd->update > r->update ? sd->update : r->update;
		r->coll = sd->coll > r->coll ? sd->coll : r->coll;
	}
	for (int l = 0; l < m->nlayers; l++)
		flops += m->layers[l].cost.flops;
	/* Every replica's micro-batches, on every device of the cluster. */
	int64_t Mg = m->train.microbatches > s.M ? m->train.microbatches : s.M;
	flops *= (double)Mg;
	/* The readers keep every time and rate in range (docs/ir.md, "Ranges"),
	 * so the step is finite; a module made some other way is refused. */
	if (!isfinite(r->makespan)) {
		diag_sink_error(ds, where, "simulate: the step takes longer than a double can count (a time or "
		                  "bandwidth out of the ranges of docs/ir.md)");
		sim_free(r);
		return NULL;
	}
	double secs = r->makespan * 1e-6;
	if (secs > 0) {
		r->bubble_ratio = idle / (r->makespan * r->ndev);
		r->tokens_per_s = (double)m->train.mbs * (double)m->model.seq * (double)Mg / secs;
		r->mfu = flops / (secs * (double)r->ndev * (double)r->dp * m->cluster.flops);
	}
	return r;
}
