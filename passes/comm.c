/* comm.c: the `comm` pass: communication lowering.
 *
 * Reads the scheduled programs (compute ops only) and plan.backend; writes
 * the same programs with every cross-device dependency turned into a send
 * on the producer's device and a matching receive and wait on the
 * consumer's.  Guarantees what ir_verify checks for lowered programs
 * (docs/ir.md, invariant 5): one send, one receive and one wait per value
 * that crosses devices, FIFO order per channel, sizes that agree; stages on
 * one device hand values over without any.
 *
 * Where each op goes:
 * - a send right after the op that makes the value (the gradient of a
 *   schedule that does not split the backward leaves after W);
 * - mpi: a receive one compute op ahead of its consumer, so that the
 *   transfer overlaps that op (posts return at once); nccl: see lower_nccl;
 * - a wait just before the consumer.
 * Whether that is deadlock-free for the backend is the `verify` pass's
 * question; it answers with a proof or a cycle. */
#include "pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"

#include "simulate.h"

static int lower_p2p(ir_module *m, pass_ctx *cx);

/* The value the compute op takes from another device, if any: its
 * producing (kind, stage) and device, or false. */
static bool incoming(const ir_module *m, const ir_op *op, ir_op_kind *k, int *stage)
{
	int S = m->nstages, d = m->stages[op->stage].device;
	if (op->kind == IR_OP_F && op->stage > 0 && m->stages[op->stage - 1].device != d) {
		*k = IR_OP_F, *stage = op->stage - 1;
		return true;
	}
	if (op->kind == IR_OP_B && op->stage + 1 < S && m->stages[op->stage + 1].device != d) {
		*k = IR_OP_B, *stage = op->stage + 1;
		return true;
	}
	return false;
}

/* The value the compute op hands to another device, if any. */
static bool outgoing(const ir_module *m, const ir_op *op, ir_op_kind *k, int *to)
{
	int S = m->nstages, d = m->stages[op->stage].device;
	bool split = ir_schedule_splits_backward[m->plan.schedule];
	if (op->kind == IR_OP_F && op->stage + 1 < S && m->stages[op->stage + 1].device != d) {
		*k = IR_OP_F, *to = m->stages[op->stage + 1].device;
		return true;
	}
	/* The gradient leaves with B when the backward is split, else with W. */
	if (op->kind == (split ? IR_OP_B : IR_OP_W) && op->stage > 0 &&
	    m->stages[op->stage - 1].device != d) {
		*k = IR_OP_B, *to = m->stages[op->stage - 1].device;
		return true;
	}
	return false;
}

/* Where the receives of device d go: slot i is before compute op i.  A
 * receive goes `ahead` compute ops before its consumer, but a channel is
 * first in, first out: receives from one peer must be posted in the order
 * that peer sends, so a receive moves up to the slot of any later value of
 * its channel that is posted sooner.  sendpos gives each value's position
 * in its sender's program. */
static void place_receives(const ir_module *m, pass_ctx *cx, const ir_op *prog, int n,
                           int ahead, const long *sendpos, int *at)
{
	int S = m->nstages, M = (int)ir_local_mb(m);
	for (int i = 0; i < n; i++) {
		ir_op_kind k;
		int st;
		at[i] = -1;
		if (incoming(m, &prog[i], &k, &st))
			at[i] = i - ahead > 0 ? i - ahead : 0;
	}
	/* Per peer, walk the receives in the peer's send order, latest first,
	 * carrying the earliest slot seen. */
	int P = m->ndevices;
	for (int peer = 0; peer < P; peer++) {
		int cnt = 0;
		for (int i = 0; i < n; i++) {
			ir_op_kind k;
			int st;
			if (at[i] >= 0 && incoming(m, &prog[i], &k, &st) && m->stages[st].device == peer)
				cnt++;
		}
		if (!cnt)
			continue;
		int *idx = arena_calloc(cx->scratch, (size_t)cnt, sizeof *idx);
		long *key = arena_calloc(cx->scratch, (size_t)cnt, sizeof *key);
		int c = 0;
		for (int i = 0; i < n; i++) {
			ir_op_kind k;
			int st;
			if (at[i] >= 0 && incoming(m, &prog[i], &k, &st) && m->stages[st].device == peer) {
				idx[c] = i;
				key[c++] = sendpos[((size_t)st * M + prog[i].mb) * 2 + k];
			}
		}
		/* Insertion sort by send position (channels are short per device). */
		for (int a = 1; a < c; a++)
			for (int b = a; b > 0 && key[b] < key[b - 1]; b--) {
				long tk = key[b];
				key[b] = key[b - 1], key[b - 1] = tk;
				int ti = idx[b];
				idx[b] = idx[b - 1], idx[b - 1] = ti;
			}
		int low = n;
		for (int b = c - 1; b >= 0; b--) {
			if (at[idx[b]] > low)
				at[idx[b]] = low;
			low = at[idx[b]];
		}
	}
	(void)S;
}

/* Lower one device's program into a fresh op list of its own. */
static void lower_device(ir_module *m, pass_ctx *cx, int d, const ir_op *prog, int n,
                         uint64_t bytes, const long *sendpos)
{
	/* slot[i]: comm ops posted before compute op i (slot n: after the last). */
	typedef struct slot {
		ir_op *ops;
		int n, cap;
	} slot;
	slot *slots = arena_calloc(cx->scratch, (size_t)n + 1, sizeof *slots);
#define PUT(i, o) (*VEC_PUSH(cx->scratch, slots[i].ops, slots[i].n, slots[i].cap) = (o))
	for (int i = 0; i < n; i++) {
		ir_op_kind k;
		int to;
		if (outgoing(m, &prog[i], &k, &to))
			PUT(i + 1, ((ir_op){k, prog[i].stage, prog[i].mb, IR_COMM_SEND, to, 0, bytes}));
	}
	/* NCCL's stream runs in order: a receive posted early would hold up the
	 * sends behind it, so it goes right before its consumer, with the sends
	 * of the op before (Megatron's send_forward_recv_backward).  MPI posts
	 * return at once: one op ahead lets the transfer overlap it. */
	int *at = arena_calloc(cx->scratch, (size_t)n, sizeof *at);
	place_receives(m, cx, prog, n, m->plan.backend == IR_BACKEND_MPI ? 1 : 0, sendpos, at);
	for (int i = 0; i < n; i++) {
		ir_op_kind k;
		int st;
		if (at[i] >= 0 && incoming(m, &prog[i], &k, &st))
			PUT(at[i], ((ir_op){k, st, prog[i].mb, IR_COMM_RECV, m->stages[st].device, 0, bytes}));
	}
#undef PUT
	/* Within a slot, receives in their senders' order (FIFO channels). */
	for (int i = 0; i <= n; i++) {
		slot *sl = &slots[i];
		for (int a = 1; a < sl->n; a++)
			for (int b = a; b > 0; b--) {
				ir_op *x = &sl->ops[b - 1], *y = &sl->ops[b];
				if (x->comm != IR_COMM_RECV || y->comm != IR_COMM_RECV)
					break;
				long kx = sendpos[((size_t)x->stage * ir_local_mb(m) + x->mb) * 2 + x->kind];
				long ky = sendpos[((size_t)y->stage * ir_local_mb(m) + y->mb) * 2 + y->kind];
				if (kx <= ky)
					break;
				ir_op t = *x;
				*x = *y, *y = t;
			}
	}
	for (int i = 0; i <= n; i++) {
		/* Sends first, then receives; MPI posts return at once, so no
		 * group is needed. */
		int g = 0;
		for (int pass = 0; pass < 2; pass++)
			for (int j = 0; j < slots[i].n; j++) {
				ir_op o = slots[i].ops[j];
				if ((o.comm == IR_COMM_SEND) != (pass == 0))
					continue;
				o.group = g;
				ir_push_op(m, d, &o, (ir_loc){0});
			}
		if (i == n)
			break;
		ir_op_kind k;
		int st;
		if (incoming(m, &prog[i], &k, &st))
			ir_push_op(m, d, &(ir_op){k, st, prog[i].mb, IR_COMM_WAIT}, (ir_loc){0});
		ir_push_op(m, d, &prog[i], (ir_loc){0});
	}
}

/* NCCL: every device's communication stream takes its transfers in one
 * global order, the order in which they start in the simulated step (ties
 * by value).  Why that cannot deadlock: take the transfers in that order
 * and assume all before the k-th are done.  Its value was made by an op
 * that, in the simulated step, ended before the transfer started, after
 * only transfers that ended earlier still (so, started earlier): done; and
 * both ends have done everything before it on their streams, so both are
 * at it.  The `verify` pass checks it all the same.  Each op goes into the
 * text at the first place its constraints allow, in that order: a send
 * after the op that makes its value; a receive before the wait that
 * precedes its consumer. */
typedef struct xfer_order {
	double start;
	int seq; /* sim_xfer.seq: ties in start broken causally */
	int kind, stage, mb;
} xfer_order;

/* Ties must follow cause and effect, not the value's name: with ops or
 * transfers that take no time (a profile's zero times, an infinite
 * bandwidth), a transfer can start at the very time of one it depends on,
 * and naming order could put it first.  The simulator fixed the starts in
 * an order that respects every dependency. */
static int by_start(const void *a, const void *b)
{
	const xfer_order *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq - y->seq;
}

static int lower_nccl(ir_module *m, pass_ctx *cx, ir_op **prog, const int *n, uint64_t bytes)
{
	sim_result *r = sim_run_to(m, cx->diag);
	if (!r)
		return -1;
	int P = m->ndevices, M = (int)ir_local_mb(m);
	xfer_order *xs = arena_calloc(cx->scratch, (size_t)r->nxfers, sizeof *xs);
	for (int i = 0; i < r->nxfers; i++)
		xs[i] = (xfer_order){r->xfers[i].start, r->xfers[i].seq, r->xfers[i].kind,
		                     r->xfers[i].stage, r->xfers[i].mb};
	int nx = r->nxfers;
	sim_free(r);
	qsort(xs, (size_t)nx, sizeof *xs, by_start);
	/* Per device: position of each compute op that makes or takes a value. */
	size_t nv = (size_t)m->nstages * M * 2;
	int *made = arena_calloc(cx->scratch, nv, sizeof *made);
	int *used = arena_calloc(cx->scratch, nv, sizeof *used);
	for (int d = 0; d < P; d++)
		for (int i = 0; i < n[d]; i++) {
			ir_op_kind k;
			int st, to;
			if (outgoing(m, &prog[d][i], &k, &to))
				made[((size_t)prog[d][i].stage * M + prog[d][i].mb) * 2 + k] = i;
			if (incoming(m, &prog[d][i], &k, &st))
				used[((size_t)st * M + prog[d][i].mb) * 2 + k] = i;
		}
	/* Comm ops per device in the global order, each with the slot (before
	 * compute op i) it goes in: nondecreasing, as early as allowed. */
	typedef struct placed {
		ir_op op;
		int slot;
	} placed;
	placed **pl = arena_calloc(cx->scratch, (size_t)P, sizeof *pl);
	int *npl = arena_calloc(cx->scratch, (size_t)P, sizeof *npl);
	int *low = arena_calloc(cx->scratch, (size_t)P, sizeof *low);
	/* Each transfer is a send on its source and a receive on its
	 * destination: room for exactly those (not nx per device, which made
	 * lowering quadratic in the devices). */
	for (int t = 0; t < nx; t++) {
		int cs = xs[t].kind == IR_OP_F ? xs[t].stage + 1 : xs[t].stage - 1;
		npl[m->stages[xs[t].stage].device]++;
		npl[m->stages[cs].device]++;
	}
	for (int d = 0; d < P; d++) {
		pl[d] = arena_calloc(cx->scratch, (size_t)npl[d] + 1, sizeof **pl);
		npl[d] = 0;
	}
	int rc = 0;
	for (int t = 0; t < nx && !rc; t++) {
		const xfer_order *x = &xs[t];
		int cs = x->kind == IR_OP_F ? x->stage + 1 : x->stage - 1;
		int src = m->stages[x->stage].device, dst = m->stages[cs].device;
		size_t v = ((size_t)x->stage * M + x->mb) * 2 + (size_t)x->kind;
		int sslot = made[v] + 1 > low[src] ? made[v] + 1 : low[src];
		int rslot = low[dst];
		if (rslot > used[v]) {
			/* Cannot happen for a timeline the simulator produced. */
			diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc),
			                "comm: cannot order the transfers of D%d in one stream", dst);
			rc = -1;
			break;
		}
		pl[src][npl[src]++] = (placed){{x->kind, x->stage, x->mb, IR_COMM_SEND, dst, 0, bytes}, sslot};
		pl[dst][npl[dst]++] = (placed){{x->kind, x->stage, x->mb, IR_COMM_RECV, src, 0, bytes}, rslot};
		low[src] = sslot, low[dst] = rslot;
	}
	if (!rc) {
		ir_clear_devices(m);
		ir_alloc_devices(m);
		for (int d = 0; d < P; d++) {
			int j = 0;
			for (int i = 0; i <= n[d]; i++) {
				while (j < npl[d] && pl[d][j].slot == i)
					ir_push_op(m, d, &pl[d][j++].op, (ir_loc){0});
				if (i == n[d])
					break;
				ir_op_kind k;
				int st;
				if (incoming(m, &prog[d][i], &k, &st))
					ir_push_op(m, d, &(ir_op){k, st, prog[d][i].mb, IR_COMM_WAIT}, (ir_loc){0});
				ir_push_op(m, d, &prog[d][i], (ir_loc){0});
			}
		}
	}
	return rc;
}

/* ---- tied embeddings (docs/ir.md, "Tied embeddings") ----------------------- */

/* The stage of tied layer `which` (0: the embedding, L0; 1: the head). */
static int tie_stage(const ir_module *m, int which)
{
	int l = which ? m->nlayers - 1 : 0;
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].first <= l && l <= m->stages[s].last)
			return s;
	return -1;
}

/* Where stage s's gradients are complete on device d: its last W, or the
 * gradient send W makes right after it; -1 when d holds no W of s. */
static int stage_closes(const ir_op *ops, int n, int s)
{
	int i = -1;
	for (int j = 0; j < n; j++)
		if (ops[j].comm == IR_COMM_NONE && ops[j].kind == IR_OP_W && ops[j].stage == s)
			i = j;
	if (i >= 0 && i + 1 < n && ops[i + 1].comm == IR_COMM_SEND && ops[i + 1].stage == s &&
	    ops[i + 1].kind == IR_OP_B && ops[i + 1].mb == ops[i].mb)
		i++;
	return i;
}

/* With the tied embedding and head on two devices: on each, the sum of the
 * tied gradient with the other copy posted as soon as its stage's
 * gradients are complete (it runs under the rest of the step), and waited
 * for at the end of the program, where nothing is left for the other
 * device to wait on this one for. */
static void lower_tie(ir_module *m, pass_ctx *cx)
{
	if (!ir_tie_apart(m))
		return;
	for (int j = 0; j < 2; j++) {
		int s = tie_stage(m, j), d = m->stages[s].device, other = ir_tie_device(m, 1 - j);
		int n = m->devices[d].nops;
		ir_op *old = arena_calloc(cx->scratch, (size_t)n + 1, sizeof *old);
		for (int i = 0; i < n; i++)
			old[i] = m->devices[d].ops[i];
		int at = stage_closes(old, n, s), l = j ? m->nlayers - 1 : 0;
		while (at >= 0 && old[at].group && at + 1 < n && old[at + 1].group == old[at].group)
			at++; /* a group stays whole */
		m->devices[d].nops = 0;
		for (int i = 0; i < n; i++) {
			ir_push_op(m, d, &old[i], (ir_loc){0});
			if (i == at)
				ir_push_op(m, d, &(ir_op){.kind = IR_OP_W, .stage = s, .comm = IR_COMM_TIE,
				                          .peer = other, .bytes = ir_tie_bytes(m), .first = l,
				                          .last = l},
				           (ir_loc){0});
		}
		ir_push_op(m, d, &(ir_op){.kind = IR_OP_W, .stage = s, .comm = IR_COMM_WAIT,
		                          .coll = IR_COMM_TIE},
		           (ir_loc){0});
	}
}

/* ---- data parallelism (docs/dataparallel.md) ------------------------------ */

typedef struct bucket {
	int stage, index, first, last;
	uint64_t params;
} bucket;

/* The buckets of stage s: runs of its layers of at most plan.bucket bytes
 * of f32 gradient each (a larger layer alone), in layer order. */
static int stage_buckets(const ir_module *m, int s, bucket *out)
{
	const ir_stage *st = &m->stages[s];
	int nb = 0;
	uint64_t bytes = 0;
	for (int l = st->first; l <= st->last; l++) {
		uint64_t params = m->layers[l].cost.params, lb = ir_sat_mul(params, 4);
		if (nb == 0 || (bytes && ir_sat_add(bytes, lb) > m->plan.bucket)) {
			out[nb] = (bucket){.stage = s, .index = nb, .first = l};
			nb++;
			bytes = 0;
		}
		out[nb - 1].last = l;
		out[nb - 1].params += params;
		bytes = ir_sat_add(bytes, lb);
	}
	return nb;
}

/* Appends to device d's program bucket b's op `comm` (a wait when coll is
 * set, carried from the previous step when `carried`), with the
 * collective's bytes. */
static void push_dp(ir_module *m, int d, const bucket *b, ir_comm comm, ir_comm coll, bool carried)
{
	ir_op op = {.kind = IR_OP_W, .stage = b->stage, .mb = b->index, .comm = comm, .coll = coll,
	            .carried = carried};
	if (comm != IR_COMM_WAIT)
		op.first = b->first, op.last = b->last;
	if (comm != IR_COMM_WAIT && comm != IR_COMM_UPDATE)
		op.bytes = ir_coll_bytes(m, comm, b->params);
	ir_push_op(m, d, &op, (ir_loc){0});
}

/* Adds each stage's gradient reduction to its device's program: its
 * buckets' all-reduces (reduce-scatters with the distributed optimizer)
 * posted right after the stage's last W (and the gradient that W sends),
 * so that they overlap the rest of the step, or on the devices `late`
 * names (NULL: none) after the device's last point-to-point op; then, after the last compute
 * op, each bucket's wait and update, and with the distributed optimizer the
 * all-gathers of the updated shards.  Their waits follow at once, or with
 * overlap_param_gather go just before the stage's first F, carried: that
 * wait completes the previous step's all-gather, which then runs under
 * the fill of the pipeline (and the stages ahead of it on the device). */
static void lower_dp(ir_module *m, pass_ctx *cx, const bool *late)
{
	bool carry = m->plan.dist_opt && m->plan.overlap_gather;
	ir_comm red = m->plan.dist_opt ? IR_COMM_REDUCESCATTER : IR_COMM_ALLREDUCE;
	bucket *bk = arena_calloc(cx->scratch, (size_t)m->nlayers + 1, sizeof *bk);
	for (int d = 0; d < m->ndevices; d++) {
		int n = m->devices[d].nops;
		ir_op *old = arena_calloc(cx->scratch, (size_t)n + 1, sizeof *old);
		for (int i = 0; i < n; i++)
			old[i] = m->devices[d].ops[i];
		/* closes[i]: the stage whose reductions go after op i -- its last W,
		 * or the gradient send that W makes right after it; else -1. */
		int *last = arena_calloc(cx->scratch, (size_t)m->nstages, sizeof *last);
		int *closes = arena_calloc(cx->scratch, (size_t)n + 1, sizeof *closes);
		for (int s = 0; s < m->nstages; s++)
			last[s] = -1;
		for (int i = 0; i < n; i++) {
			closes[i] = -1;
			if (old[i].comm == IR_COMM_NONE && old[i].kind == IR_OP_W)
				last[old[i].stage] = i;
		}
		/* Late: not before the device's last point-to-point op, so that
		 * no transfer queues behind a reduction. */
		int p2p = -1;
		for (int i = 0; late && late[d] && i < n; i++)
			if (old[i].comm != IR_COMM_NONE)
				p2p = i;
		int *close_at = arena_calloc(cx->scratch, (size_t)m->nstages + 1, sizeof *close_at);
		for (int s = 0; s < m->nstages; s++)
			close_at[s] = last[s] < 0 ? -1 : stage_closes(old, n, s);
		/* A tied stage's gradients are complete once summed with the other
		 * copy's: after the `wait tie`, or, both copies here, once both
		 * stages' are (the runtime sums them at the first reduction). */
		if (m->model.tie) {
			int ts[2] = {tie_stage(m, 0), tie_stage(m, 1)}, at = -1;
			for (int i = 0; i < n; i++)
				if (old[i].comm == IR_COMM_WAIT && old[i].coll == IR_COMM_TIE)
					at = i;
			if (!ir_tie_apart(m) && close_at[ts[0]] >= 0 && close_at[ts[1]] >= 0)
				at = close_at[ts[0]] > close_at[ts[1]] ? close_at[ts[0]] : close_at[ts[1]];
			for (int j = 0; j < 2 && at >= 0; j++)
				if (close_at[ts[j]] >= 0)
					close_at[ts[j]] = at;
		}
		for (int s = 0; s < m->nstages; s++)
			if (close_at[s] >= 0)
				closes[close_at[s]] = s; /* one stage per op but the tied pair */
		/* The buckets in the order their reductions are posted: a stage's
		 * once it is closed and the device is past p2p. */
		int nb = 0, *queue = arena_calloc(cx->scratch, (size_t)m->nstages + 1, sizeof *queue), nq = 0;
		m->devices[d].nops = 0;
		bool *started = arena_calloc(cx->scratch, (size_t)m->nstages, sizeof *started);
		for (int i = 0; i < n; i++) {
			int s = old[i].stage;
			if (carry && old[i].comm == IR_COMM_NONE && old[i].kind == IR_OP_F && !started[s]) {
				bucket *sb = arena_calloc(cx->scratch, (size_t)m->nlayers + 1, sizeof *sb);
				int k = stage_buckets(m, s, sb);
				for (int j = 0; j < k; j++)
					push_dp(m, d, &sb[j], IR_COMM_WAIT, IR_COMM_ALLGATHER, true);
				started[s] = true;
			}
			ir_push_op(m, d, &old[i], (ir_loc){0});
			for (int t = 0; closes[i] >= 0 && t < m->nstages; t++)
				if (close_at[t] == i)
					queue[nq++] = t;
			if (i < p2p)
				continue;
			for (int q = 0; q < nq; q++) {
				int k = stage_buckets(m, queue[q], bk + nb);
				for (int j = nb; j < nb + k; j++)
					push_dp(m, d, &bk[j], red, IR_COMM_NONE, false);
				nb += k;
			}
			nq = 0;
		}
		for (int j = 0; j < nb; j++) {
			push_dp(m, d, &bk[j], IR_COMM_WAIT, red, false);
			push_dp(m, d, &bk[j], IR_COMM_UPDATE, IR_COMM_NONE, false);
		}
		if (carry) {
			/* The next step waits for the buckets in the order of their
			 * stages' first F: the all-gathers are posted in that order,
			 * so that the first needed is the first gathered. */
			int *first_f = arena_calloc(cx->scratch, (size_t)m->nstages, sizeof *first_f);
			for (int i = n - 1; i >= 0; i--)
				if (old[i].comm == IR_COMM_NONE && old[i].kind == IR_OP_F)
					first_f[old[i].stage] = i;
			for (int a = 1; a < nb; a++) /* stable: a stage's buckets stay in order */
				for (int b = a; b > 0 && first_f[bk[b].stage] < first_f[bk[b - 1].stage]; b--) {
					bucket t = bk[b];
					bk[b] = bk[b - 1], bk[b - 1] = t;
				}
		}
		for (int j = 0; m->plan.dist_opt && j < nb; j++)
			push_dp(m, d, &bk[j], IR_COMM_ALLGATHER, IR_COMM_NONE, false);
		for (int j = 0; m->plan.dist_opt && !carry && j < nb; j++)
			push_dp(m, d, &bk[j], IR_COMM_WAIT, IR_COMM_ALLGATHER, false);
	}
}

static int lower(ir_module *m, pass_ctx *cx, const bool *late)
{
	if (m->ndevices && ir_lowered(m))
		return 0; /* the pass is idempotent: its collectives are in too */
	int rc = lower_p2p(m, cx);
	if (!rc)
		lower_tie(m, cx);
	if (!rc && ir_dp(m) > 1)
		lower_dp(m, cx, late);
	return rc;
}

/* m's programs lowered on a copy with rank order o and the reductions
 * late on the devices `late` names (NULL: none), simulated: the step, or
 * +inf when they cannot be lowered or run. */
static double try_lowering(const ir_module *m, pass_ctx *cx, ir_rank_order o, const bool *late)
{
	ir_module *c = ir_copy_header(m);
	c->plan.rank_order = o;
	ir_copy_plan(c, m, true);
	diag_sink quiet = {0}; /* a choice that cannot be lowered loses */
	pass_ctx qx = {.diag = &quiet, .scratch = arena_new(), .budget = cx->budget};
	sim_result *r = lower(c, &qx, late) == 0 ? sim_run_to(c, &quiet) : NULL;
	double t = r ? r->makespan : INFINITY;
	sim_free(r);
	arena_free(qx.scratch);
	ir_free(c);
	return t;
}

/* The choices a data-parallel lowering leaves open, made by simulating
 * each (docs/dataparallel.md, "Where the reductions go"): the rank order
 * when it is auto, and whether every device posts its reductions as each
 * of its stages closes (early: they overlap the rest of the step) or after
 * its last point-to-point op (late: no transfer queues behind them on the
 * communication stream).  The fastest is kept; on a tie pp-inner, early.
 * (Choosing per device, one device flipped at a time, was measured: it
 * multiplies the lowerings by the devices and, within the tune budget,
 * lost more to the tuner's shorter search than it gained.) */
static void choose_lowering(ir_module *m, pass_ctx *cx, bool *late)
{
	int P = m->ndevices;
	double best = INFINITY;
	ir_rank_order pick = m->plan.rank_order == IR_RANKS_AUTO ? IR_RANKS_PP_INNER : m->plan.rank_order;
	bool *all = arena_calloc(cx->scratch, (size_t)P, sizeof *all);
	for (int o = IR_RANKS_PP_INNER; o <= IR_RANKS_DP_INNER; o++) {
		if (m->plan.rank_order != IR_RANKS_AUTO && o != (int)m->plan.rank_order)
			continue;
		for (int v = 0; v <= 1; v++) {
			for (int d = 0; d < P; d++)
				all[d] = v;
			double t = try_lowering(m, cx, (ir_rank_order)o, all);
			if (t < best) {
				best = t, pick = (ir_rank_order)o;
				memcpy(late, all, (size_t)P * sizeof *late);
			}
		}
	}
	m->plan.rank_order = pick;
}

int pass_comm_fixed(ir_module *m, pass_ctx *cx, ir_rank_order o, bool late)
{
	ir_assert(o != IR_RANKS_AUTO);
	m->plan.rank_order = o;
	bool *all = arena_calloc(cx->scratch, (size_t)m->ndevices + 1, sizeof *all);
	for (int d = 0; d < m->ndevices; d++)
		all[d] = late;
	return lower(m, cx, all);
}

/* The simulated step of m lowered with overlap_param_gather set to `on`
 * (INFINITY when it cannot be lowered or simulated), and whether every
 * device's peak memory fits. */
static double step_with_overlap(const ir_module *m, pass_ctx *cx, const bool *late, int on,
                                bool *fits)
{
	ir_module *c = ir_copy_header(m);
	c->plan.overlap_gather = on;
	ir_copy_plan(c, m, true);
	diag_sink quiet = {0};
	pass_ctx qx = {.diag = &quiet, .scratch = arena_new(), .budget = cx->budget};
	sim_result *r = lower(c, &qx, late) == 0 ? sim_run_to(c, &quiet) : NULL;
	double t = r ? r->makespan : INFINITY;
	*fits = r != NULL;
	for (int d = 0; r && d < r->ndev; d++)
		*fits &= r->dev[d].peak_mem <= m->cluster.mem;
	sim_free(r);
	arena_free(qx.scratch);
	ir_free(c);
	return t;
}

int pass_comm(ir_module *m, pass_ctx *cx)
{
	bool *late = NULL;
	if (m->ndevices && !ir_lowered(m) && ir_dp(m) > 1) {
		late = arena_calloc(cx->scratch, (size_t)m->ndevices, sizeof *late);
		choose_lowering(m, cx, late);
	}
	/* A carried wait moves its unpacking to the start of the next step,
	 * before its stage's first F: on a device whose step ends with slack
	 * and whose first F feeds the others, that can cost more than the
	 * gather it hides; and the gather's buffer is kept through the whole
	 * program, memory spent for nothing where the step is no faster.  The
	 * overlap is kept where the steady step is faster and it does not take
	 * a plan that fits in memory out of it (docs/dataparallel.md); the plan
	 * line says which. */
	if (m->ndevices && !ir_lowered(m) && ir_dp(m) > 1 && m->plan.overlap_gather) {
		bool fits_on, fits_off;
		double on = step_with_overlap(m, cx, late, 1, &fits_on);
		double off = step_with_overlap(m, cx, late, 0, &fits_off);
		if (!(on < off) || (fits_off && !fits_on))
			m->plan.overlap_gather = 0;
	}
	return lower(m, cx, late);
}

static int lower_p2p(ir_module *m, pass_ctx *cx)
{
	if (!m->ndevices) {
		diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc), "comm: the module has no programs; run 'schedule' first");
		return -1;
	}
	if (ir_lowered(m))
		return 0; /* already lowered: the pass is idempotent */
	uint64_t bytes = sim_boundary_bytes(m);
	int P = m->ndevices;
	/* Copy the compute programs out, then rebuild every program. */
	ir_op **prog = arena_calloc(cx->scratch, (size_t)P, sizeof *prog);
	int *n = arena_calloc(cx->scratch, (size_t)P, sizeof *n);
	for (int d = 0; d < P; d++) {
		n[d] = m->devices[d].nops;
		prog[d] = arena_calloc(cx->scratch, (size_t)n[d], sizeof **prog);
		for (int i = 0; i < n[d]; i++)
			prog[d][i] = m->devices[d].ops[i];
	}
	if (m->plan.backend == IR_BACKEND_NCCL) {
		return lower_nccl(m, cx, prog, n, bytes);
	}
	/* MPI.  Each crossing value's position in its sender's program. */
	size_t nv = (size_t)m->nstages * (size_t)ir_local_mb(m) * 2;
	long *sendpos = arena_calloc(cx->scratch, nv, sizeof *sendpos);
	for (int d = 0; d < P; d++)
		for (int i = 0; i < n[d]; i++) {
			ir_op_kind k;
			int to;
			if (outgoing(m, &prog[d][i], &k, &to))
				sendpos[((size_t)prog[d][i].stage * ir_local_mb(m) + prog[d][i].mb) * 2 + k] = i;
		}
	ir_clear_devices(m);
	ir_alloc_devices(m);
	for (int d = 0; d < P; d++)
		lower_device(m, cx, d, prog[d], n[d], bytes, sendpos);
	return 0;
}
