/* test_xcheck.c: Check suite for the deadlock proof (passes/verify.c),
 * against brute force.
 *
 * Small programs are planned and lowered (2-4 devices, 1-3 micro-batches,
 * 3-6 layers, tied embeddings or not, every schedule, the passes'
 * placements or random ones, both backends), then mutated the ways a lowering goes wrong: adjacent
 * communication ops swapped, a wait or a transfer moved, a group split,
 * two adjacent transfers merged into a group, a transfer gathered into the
 * group of another, two sends swapped, two adjacent compute ops swapped.
 * Mutants the structural verifier rejects are dropped.  For the rest, the
 * proof's verdict must equal that of an exhaustive search of every
 * interleaving under rendezvous semantics, on the runtime the backend runs
 * on.  The explorer is written from the runtime's code (rt_comm.c,
 * rt_cuda.c, rt_device.c; docs/deadlock.md), not from the proof's event
 * graph: an explicit-state search over the ranks' program counters, the
 * groups posted and the messages matched (see "The runtimes" below):
 *
 *   mpi   one host thread per rank; a group is one request; messages
 *         matched by tag (stage, micro-batch, kind) per channel.
 *   nccl  each rank's device runs its ops one after another (the runtime
 *         chains its two streams with events); a group completes when
 *         every op's partner is posted; first in, first out per channel.
 *         Besides, every program the proof accepts must run on the
 *         emulator's stand-in for NCCL (host semantics, first in, first
 *         out).
 *
 * And the simulator, which compile runs, must run every program the proof
 * accepts to the end (a program whose ops on one device wait for a later
 * op of that device is ir_verify's to refuse).
 *
 * The programs are deadlock-free iff every reachable state is final or has
 * a move.  Deterministic: one seed, a fixed number of cases. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend.h"
#include "pass.h"
#include "prove.h"
#include "testutil.h"
#include "simulate.h"
#include "tune.h"

/* An assertion for the hot paths: ck_assert records every check it passes,
 * which the explorer's millions of states cannot afford. */
#define REQUIRE(c, ...)                                                        \
	do {                                                                       \
		if (!(c))                                                              \
			ck_abort_msg(__VA_ARGS__);                                         \
	} while (0)

/* ---- random numbers ---------------------------------------------------- */

typedef struct rng {
	uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull); /* splitmix64 */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int pick(rng *r, int n)
{
	return (int)(rnext(r) % (uint64_t)n);
}

/* ---- the programs, as the explorer reads them ---------------------------- */

/* X_COLL: an all-reduce, reduce-scatter or all-gather (posted, and
 * complete once every member of its DP group has posted it); X_CWAIT: the
 * wait of one.  An update is a compute op: it touches no other rank.
 * X_TIE: the tied embeddings' sum (the runtime's rt_tie_post: on the host,
 * after the device's work so far; it returns), complete once the other
 * copy's rank (peer, op partner) has posted its own; X_TWAIT: its wait. */
enum { X_COMPUTE, X_WAIT, X_SEND, X_RECV, X_COLL, X_CWAIT, X_TIE, X_TWAIT };

/* Ranks the explorer's state holds: D replicas x P devices. */
enum { XMAXR = 16, XMAXD = 4 };

typedef struct xop {
	int type;
	int kind, stage, mb; /* send, recv, wait: the value; collective, its wait: stage, bucket */
	int comm;    /* collective and its wait: the collective's kind */
	int peer;    /* send, recv: the other rank */
	int run;     /* send, recv: first op of its run (its group, or itself); collective: itself */
	int end;     /* send, recv: one past the last op of its run; collective: itself + 1 */
	int partner; /* send, recv: index, on peer, of the op it matches */
	int recv;    /* wait: index of its receive; collective's wait: of its collective;
	              * tie's wait: of its tie */
	int member[XMAXD]; /* collective: index of the same collective (kind, stage,
	              * bucket) in the program of each member of its DP group */
} xop;

/* How a receive finds its message: NCCL (and the emulator's stand-in) has
 * no tags, the k-th send of a channel meets its k-th receive; the runtime
 * over MPI tags a message with (stage, micro-batch, kind), and MPI keeps
 * first in, first out only among equal tags. */
typedef enum matching { MATCH_FIFO, MATCH_TAG } matching;

/* The programs of D replicas of a P-device pipeline: rank r * P + d runs
 * replica r's program of device d. */
typedef struct xprog {
	int R, P, D;
	int n[XMAXR];
	xop *ops[XMAXR];
} xprog;

static bool is_xfer(const ir_op *o)
{
	return o->comm == IR_COMM_SEND || o->comm == IR_COMM_RECV;
}

static bool same_value(const xop *a, const xop *b)
{
	return a->kind == b->kind && a->stage == b->stage && a->mb == b->mb;
}

/* The j-th op of device d of type t, peer p (and, for MATCH_TAG, the value
 * of v) counted from the start; -1 when there is none. */
static int nth(const xprog *x, int d, int t, int p, const xop *v, matching mt, int k)
{
	for (int i = 0; i < x->n[d]; i++) {
		const xop *o = &x->ops[d][i];
		if (o->type == t && o->peer == p && (mt == MATCH_FIFO || same_value(o, v)) && k-- == 0)
			return i;
	}
	return -1;
}

static bool is_coll(const ir_op *o)
{
	return o->comm == IR_COMM_ALLREDUCE || o->comm == IR_COMM_REDUCESCATTER ||
	       o->comm == IR_COMM_ALLGATHER;
}

/* Read D replicas' programs (reps[r]: replica r's P programs).  Groups are
 * maximal runs of transfers with the same non-zero group; every send meets
 * its receive in its replica by mt; a collective meets the collective of
 * the same kind, stage and bucket, and the same step, in every member of
 * its DP group (device d of each replica).  Programs that carry a wait
 * into the next step (overlap_param_gather) run two steps, one after the
 * other: in the first a carried wait has nothing to wait for (the
 * runtime's RT_NO_REQ), in the second it waits for the collective the
 * first step posted, later in the program; transfers and collectives meet
 * by their order across both. */
static void xprog_build(const ir_module *m, const ir_device *const *reps, int D, xprog *x,
                        matching mt)
{
	x->P = m->ndevices, x->D = D, x->R = D * m->ndevices;
	REQUIRE(x->R <= XMAXR && D <= XMAXD, "%d ranks; the explorer's state holds %d", x->R, XMAXR);
	int steps = 1, len[XMAXR];
	for (int q = 0; q < x->R; q++) {
		const ir_device *dev = &reps[q / x->P][q % x->P];
		for (int i = 0; i < dev->nops; i++)
			if (dev->ops[i].comm == IR_COMM_WAIT && dev->ops[i].carried)
				steps = 2;
	}
	for (int q = 0; q < x->R; q++) {
		int r = q / x->P;
		const ir_device *dev = &reps[r][q % x->P];
		int n0 = len[q] = dev->nops;
		x->n[q] = steps * n0;
		REQUIRE(x->n[q] < 255, "rank %d: %d ops; the explorer's counters hold 254", q, x->n[q]);
		x->ops[q] = calloc((size_t)x->n[q] + 1, sizeof *x->ops[q]);
		for (int i = 0; i < x->n[q]; i++) {
			const ir_op *o = &dev->ops[i % n0];
			xop *e = &x->ops[q][i];
			*e = (xop){.kind = o->kind, .stage = o->stage, .mb = o->mb, .peer = r * x->P + o->peer,
			           .partner = -1, .recv = -1, .run = i, .end = i + 1};
			switch (o->comm) {
			case IR_COMM_NONE:
			case IR_COMM_UPDATE:
				e->type = X_COMPUTE;
				break;
			case IR_COMM_SEND:
			case IR_COMM_RECV: {
				e->type = o->comm == IR_COMM_SEND ? X_SEND : X_RECV;
				bool cont = i % n0 > 0 && o->group && is_xfer(&dev->ops[i % n0 - 1]) &&
				            dev->ops[i % n0 - 1].group == o->group;
				e->run = cont ? x->ops[q][i - 1].run : i;
				for (int k = e->run; k <= i; k++)
					x->ops[q][k].end = i + 1;
				break;
			}
			case IR_COMM_TIE:
				e->type = X_TIE;
				break;
			case IR_COMM_WAIT:
				e->type = o->coll == IR_COMM_TIE ? X_TWAIT : o->coll ? X_CWAIT : X_WAIT;
				e->comm = o->coll;
				if (o->carried && i < n0)
					e->type = X_COMPUTE; /* the first step: nothing pending */
				break;
			default:
				REQUIRE(is_coll(o), "an op the explorer does not know");
				e->type = X_COLL;
				e->comm = o->comm;
			}
		}
		for (int i = 0; i < x->n[q]; i++) {
			xop *e = &x->ops[q][i];
			if (e->type != X_WAIT && e->type != X_CWAIT && e->type != X_TWAIT)
				continue;
			/* Its receive or collective: in its step, or a carried wait's
			 * in the step before. */
			int base = (i / n0 - dev->ops[i % n0].carried) * n0;
			for (int j = base; j < base + n0; j++) {
				const xop *o = &x->ops[q][j];
				if (e->type == X_WAIT    ? o->type == X_RECV && same_value(o, e)
				    : e->type == X_TWAIT ? o->type == X_TIE && o->stage == e->stage
				                         : o->type == X_COLL && o->comm == e->comm &&
				                               o->stage == e->stage && o->mb == e->mb)
					e->recv = j;
			}
			REQUIRE(e->recv >= 0, "rank %d: wait without its receive or collective", q);
		}
	}
	/* Partners: the k-th send of a to b (of its value, by tag) meets the
	 * k-th receive on b from a (of that value). */
	for (int a = 0; a < x->R; a++)
		for (int i = 0; i < x->n[a]; i++) {
			xop *s = &x->ops[a][i];
			if (s->type == X_COLL) {
				/* The same collective in each member of the group. */
				for (int r = 0; r < D; r++) {
					int q = r * x->P + a % x->P;
					s->member[r] = -1;
					int step = i / len[a];
					for (int j = step * len[q]; j < (step + 1) * len[q]; j++) {
						const xop *o = &x->ops[q][j];
						if (o->type == X_COLL && o->comm == s->comm && o->stage == s->stage && o->mb == s->mb)
							s->member[r] = j;
					}
					REQUIRE(s->member[r] >= 0, "rank %d: a collective that rank %d lacks", a, q);
				}
				continue;
			}
			if (s->type == X_TIE) {
				/* The other copy's tie, in the same step of its rank. */
				int step = i / len[a], q = s->peer;
				for (int j = step * len[q]; j < (step + 1) * len[q]; j++)
					if (x->ops[q][j].type == X_TIE)
						s->partner = j;
				REQUIRE(s->partner >= 0, "rank %d: a tie that rank %d lacks", a, q);
				continue;
			}
			if (s->type != X_SEND)
				continue;
			int k = 0;
			for (int j = 0; j < i; j++) {
				const xop *o = &x->ops[a][j];
				k += o->type == X_SEND && o->peer == s->peer && (mt == MATCH_FIFO || same_value(o, s));
			}
			int j = nth(x, s->peer, X_RECV, a, s, mt, k);
			REQUIRE(j >= 0, "rank %d: a send without a receive", a);
			xop *r = &x->ops[s->peer][j];
			REQUIRE(r->partner < 0, "rank %d: a receive with two sends", s->peer);
			s->partner = j, r->partner = i;
		}
	for (int d = 0; d < x->R; d++)
		for (int i = 0; i < x->n[d]; i++)
			REQUIRE(x->ops[d][i].type != X_RECV || x->ops[d][i].partner >= 0,
			        "rank %d: a receive without a send", d);
}

static void xprog_free(xprog *x)
{
	for (int d = 0; d < x->R; d++)
		free(x->ops[d]);
}

/* ---- the state space -------------------------------------------------------- */

enum { KEY = 2 * XMAXR };
typedef union state {
	uint8_t b[KEY];
	uint64_t w[KEY / 8];
} state;

/* The states seen, kept from one search to the next: a stamp per slot
 * says which search filled it, so clearing is one increment. */
typedef struct stateset {
	state *keys;
	uint32_t *stamp;
	uint32_t epoch;
	size_t cap, n;
} stateset;

static uint64_t shash(const state *s)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < KEY / 8; i++) {
		h ^= s->w[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return h;
}

static void set_clear(stateset *t)
{
	t->epoch++;
	t->n = 0;
}

static void set_free(stateset *t)
{
	free(t->keys);
	free(t->stamp);
	*t = (stateset){0};
}

/* Insert; false when already there. */
static bool set_add(stateset *t, const state *s)
{
	if (2 * (t->n + 1) > t->cap) {
		stateset u = {.cap = t->cap ? 2 * t->cap : 1 << 14, .epoch = 1};
		u.keys = malloc(u.cap * sizeof *u.keys);
		u.stamp = calloc(u.cap, sizeof *u.stamp);
		REQUIRE(u.keys && u.stamp, "out of memory");
		for (size_t i = 0; i < t->cap; i++)
			if (t->stamp[i] == t->epoch)
				set_add(&u, &t->keys[i]);
		free(t->keys);
		free(t->stamp);
		*t = u;
	}
	size_t i = shash(s) & (t->cap - 1);
	while (t->stamp[i] == t->epoch) {
		if (!memcmp(&t->keys[i], s, sizeof *s))
			return false;
		i = (i + 1) & (t->cap - 1);
	}
	t->stamp[i] = t->epoch;
	t->keys[i] = *s;
	t->n++;
	return true;
}

typedef struct explorer {
	const xprog *x;
	stateset *seen;
	state *stack;
	size_t nstack, capstack;
	size_t limit;
	bool overflow;
	bool final; /* the final state was reached */
} explorer;

static void visit(explorer *e, const state *s)
{
	if (!set_add(e->seen, s))
		return;
	if (e->seen->n > e->limit)
		e->overflow = true;
	if (e->nstack == e->capstack) {
		e->capstack = e->capstack ? 2 * e->capstack : 1024;
		e->stack = realloc(e->stack, e->capstack * sizeof *e->stack);
		REQUIRE(e->stack, "out of memory");
	}
	e->stack[e->nstack++] = *s;
}

/* The runtimes (docs/deadlock.md, "What the runtime does"):
 *
 *   SEM_HOST    the runtime over MPI (rt_comm.c), and the emulator's
 *               stand-in for NCCL (rt_device.c): one host thread per rank.
 *               A send, a receive or a whole group is posted and returns;
 *               compute ops run; a wait blocks until every op of its
 *               receive's request (the receive alone, or its whole group:
 *               one handle) has completed.  A message is matched once its
 *               send and its receive are both posted, and both complete
 *               then (rendezvous).  The step ends waiting for every request
 *               (rt_waitall), so the end is every op run and every message
 *               matched.
 *   SEM_STREAM  NCCL on a GPU (rt_cuda.c): every group, and a lone send or
 *               receive as a group of one, waits for the compute stream's
 *               work so far (an event) and the compute stream's next work
 *               waits for the group (an event), so each rank's device runs
 *               its ops one after another: a compute op runs, a group is
 *               posted (its kernel starts) and completes once every op's
 *               partner is posted too; a wait has nothing left to wait for.
 *
 * Collectives (DESIGN.md, "Scaling out"): a collective is posted like a
 * transfer (SEM_HOST: it returns; SEM_STREAM: it takes the device's turn
 * until it completes) and completes once every member of its DP group has
 * posted it; its wait blocks until then.
 *
 * Tied embeddings (rt_tie.c): the host posts the sum once the device has
 * run everything before it (it reads the gradient back) and goes on; the
 * sum completes once the other copy's rank has posted its own, and the
 * wait blocks the rank until then, under both semantics.
 *
 * State: b[q] the program counter of rank q (every op before it is
 * posted, or run); SEM_STREAM: b[XMAXR + q], the run at the counter is
 * posted. */
typedef enum semantics { SEM_HOST, SEM_STREAM } semantics;

/* SEM_HOST: has the message of transfer i on device d matched (and so
 * completed)?  Both its ends are posted: before their counters.  Matching
 * is taken as soon as it can happen, not as a move of its own: once both
 * ends are posted nothing can take either from the other (a tag, or a
 * place on a first-in-first-out channel, names one message), so matching
 * later would only add states, never a deadlock. */
static bool host_matched(const xprog *x, const state *s, int d, int i)
{
	const xop *o = &x->ops[d][i];
	return i < s->b[d] && o->partner < s->b[o->peer];
}

/* Has every member of the DP group posted collective i of rank q (SEM_HOST:
 * before its counter)? */
static bool host_coll_done(const xprog *x, const state *s, int q, int i)
{
	const xop *c = &x->ops[q][i];
	bool done = true;
	for (int r = 0; r < x->D; r++)
		done &= c->member[r] < s->b[r * x->P + q % x->P];
	return done;
}

/* Can rank d pass the op at its counter, and is that a local move (a
 * compute op, an update or a wait that may pass: it changes nothing any
 * other rank reads, and nothing can take it back)? */
static bool host_enabled(const xprog *x, const state *s, int d, bool *local)
{
	const xop *o = &x->ops[d][s->b[d]];
	*local = o->type == X_COMPUTE || o->type == X_WAIT || o->type == X_CWAIT || o->type == X_TWAIT;
	if (o->type == X_TWAIT) {
		const xop *t = &x->ops[d][o->recv];
		return t->partner < s->b[t->peer];
	}
	if (o->type == X_WAIT) {
		const xop *r = &x->ops[d][o->recv];
		for (int i = r->run; i < r->end; i++)
			if (!host_matched(x, s, d, i))
				return false;
	}
	if (o->type == X_CWAIT)
		return host_coll_done(x, s, d, o->recv);
	return true;
}

/* With replicas (D > 1) the explorer takes a local move alone when one is
 * there: it is independent of every other move and stays enabled, so the
 * states it skips hold no deadlock that the taken path misses (a
 * persistent set of one move); without it, D copies of a program would
 * multiply their interleavings. */
/* Explore every interleaving even with replicas (the reduction's check). */
static bool no_reduction;

static int host_moves(explorer *e, const state *s)
{
	const xprog *x = e->x;
	int moves = 0;
	bool local;
	for (int d = 0; d < x->R && x->D > 1 && !no_reduction; d++)
		if (s->b[d] < x->n[d] && host_enabled(x, s, d, &local) && local) {
			state t = *s;
			t.b[d]++;
			visit(e, &t);
			return 1;
		}
	for (int d = 0; d < x->R; d++) {
		int pc = s->b[d];
		if (pc >= x->n[d] || !host_enabled(x, s, d, &local))
			continue;
		const xop *o = &x->ops[d][pc];
		state t = *s;
		t.b[d] = (uint8_t)(o->type == X_SEND || o->type == X_RECV ? o->end : pc + 1); /* a run posts at once */
		visit(e, &t);
		moves++;
	}
	return moves;
}

/* Every op run; then every message is matched, as both ends are posted,
 * and every collective complete. */
static bool host_final(const xprog *x, const state *s)
{
	for (int d = 0; d < x->R; d++)
		if (s->b[d] < x->n[d])
			return false;
	return true;
}

/* SEM_STREAM: is op i of rank d posted?  Before the counter, or in the
 * posted run at it. */
static bool stream_posted(const xprog *x, const state *s, int d, int i)
{
	int pc = s->b[d];
	return i < pc || (s->b[XMAXR + d] && pc < x->n[d] && x->ops[d][i].run == pc &&
	                  (x->ops[d][i].type == X_SEND || x->ops[d][i].type == X_RECV ||
	                   x->ops[d][i].type == X_COLL));
}

static int stream_moves(explorer *e, const state *s)
{
	const xprog *x = e->x;
	int moves = 0;
	for (int pass = x->D > 1 && !no_reduction ? 0 : 1; pass < 2; pass++) /* with replicas: a local move alone first */
		for (int d = 0; d < x->R; d++) {
			int pc = s->b[d];
			if (pc >= x->n[d])
				continue;
			const xop *o = &x->ops[d][pc];
			bool post = o->type == X_SEND || o->type == X_RECV || o->type == X_COLL;
			if (pass == 0 && (post || o->type == X_TIE))
				continue;
			/* A tie's wait: until the other copy's tie is posted (before
			 * that rank's counter: the device had reached it). */
			if (o->type == X_TWAIT) {
				const xop *tie = &x->ops[d][o->recv];
				if (!(tie->partner < s->b[tie->peer]))
					continue;
			}
			state t = *s;
			if (post) {
				if (!s->b[XMAXR + d]) {
					t.b[XMAXR + d] = 1;
				} else {
					/* A run completes once every op's partner is posted; a
					 * collective once every member has posted it. */
					bool done = true;
					if (o->type == X_COLL)
						for (int r = 0; r < x->D; r++)
							done &= stream_posted(x, s, r * x->P + d % x->P, o->member[r]);
					else
						for (int i = pc; i < o->end; i++)
							done &= stream_posted(x, s, x->ops[d][i].peer, x->ops[d][i].partner);
					if (!done)
						continue;
					t.b[d] = (uint8_t)o->end;
					t.b[XMAXR + d] = 0;
				}
			} else {
				/* A compute op runs; a wait's receive or collective is
				 * before the counter, so done. */
				REQUIRE(o->type == X_COMPUTE || o->type == X_TIE || x->ops[d][o->recv].end <= pc,
				        "a wait before its receive");
				t.b[d] = (uint8_t)(pc + 1);
			}
			visit(e, &t);
			moves++;
			if (pass == 0)
				return moves;
		}
	return moves;
}

static bool stream_final(const xprog *x, const state *s)
{
	for (int d = 0; d < x->R; d++)
		if (s->b[d] < x->n[d])
			return false;
	return true;
}

enum { FREE = 0, DEADLOCK = 1, TOO_BIG = 2 };

/* Every interleaving: FREE, DEADLOCK (a reachable state that is not final
 * has no move), or TOO_BIG past `limit` states.  *nstates: states seen. */
static int explore(const xprog *x, semantics sem, size_t limit, size_t *nstates)
{
	static stateset seen; /* kept: most searches are small, a few are not */
	set_clear(&seen);
	explorer e = {.x = x, .seen = &seen, .limit = limit};
	state s0 = {{0}};
	for (int d = 0; d < x->R; d++)
		REQUIRE(x->n[d] < 255, "rank %d: %d ops do not fit a state byte", d, x->n[d]);
	visit(&e, &s0);
	int verdict = FREE;
	while (e.nstack && verdict == FREE) {
		if (e.overflow) {
			verdict = TOO_BIG;
			break;
		}
		state s = e.stack[--e.nstack];
		int moves = sem == SEM_HOST ? host_moves(&e, &s) : stream_moves(&e, &s);
		bool final = sem == SEM_HOST ? host_final(x, &s) : stream_final(x, &s);
		e.final |= final;
		if (!moves && !final)
			verdict = DEADLOCK;
		REQUIRE(!final || !moves, "a move out of the final state");
	}
	/* Without a deadlock every run ends, so the end is reachable. */
	REQUIRE(verdict != FREE || e.final, "no deadlock, yet the end is not reachable");
	*nstates = seen.n;
	if (seen.cap > (1u << 22))
		set_free(&seen);
	free(e.stack);
	return verdict;
}

/* The module's programs under a runtime and a matching. */
static int explore_module(const ir_module *m, semantics sem, matching mt, size_t limit,
                          size_t *nstates)
{
	xprog x;
	const ir_device *one = m->devices;
	xprog_build(m, &one, 1, &x, mt);
	int v = explore(&x, sem, limit, nstates);
	xprog_free(&x);
	return v;
}

/* The runtime a module's backend runs on: mpi over MPI with tags; nccl on
 * a GPU's streams, first in, first out. */
static int explore_backend(const ir_module *m, size_t limit, size_t *nstates)
{
	if (m->plan.backend == IR_BACKEND_MPI)
		return explore_module(m, SEM_HOST, MATCH_TAG, limit, nstates);
	return explore_module(m, SEM_STREAM, MATCH_FIFO, limit, nstates);
}

/* ---- building and mutating programs ---------------------------------------------------- */

static const char *const sched_names[] = {"1f1b", "gpipe", "i1f1b", "zbh1", "zbh2", "zbv", "tuned"};

/* The tuner's budget for the random plans (test_xcheck sets it). */
static tune_budget budget;

/* The YAML of a model of L layers: the embedding, a random run of MLP and
 * attention layers, the head. */
static const char *model_text(rng *r, arena *a, int L)
{
	char layers[512] = "[{kind: embedding}";
	for (int i = 0; i < L - 2; i++)
		strcat(layers, pick(r, 2) ? ", {kind: mlp, ffn: 128}" : ", {kind: attention, heads: 4}");
	strcat(layers, ", {kind: head}]");
	return arena_printf(a,
	                    "model: {name: x, hidden: 64, vocab: 256, seq: 8, dtype: f32, "
	                    "tie_embeddings: %s}\n"
	                    "layers: %s\n"
	                    "cluster: cpu-local\n",
	                    pick(r, 2) ? "true" : "false", layers);
}

/* A small planned and lowered module, or NULL when the random plan cannot
 * be built (a schedule that cannot serve the placement, too few layers). */
static ir_module *build(rng *r, arena *a)
{
	int P = 2 + pick(r, 3), M = 1 + pick(r, 3), L = 3 + pick(r, 4);
	const char *text = model_text(r, a, L);
	fe_overrides ov = {.devices = P,
	                   .microbatches = M,
	                   .schedule = sched_names[pick(r, 7)],
	                   .chunks = 1 + pick(r, 2),
	                   .backend = pick(r, 2) ? "mpi" : "nccl"};
	bool random_place = pick(r, 2);
	int S = 2 + pick(r, L - 1); /* 2..L stages */
	int64_t cut[8], dev[8];
	if (random_place) {
		/* A random composition of L layers into S stages, on random devices. */
		for (int s = 0; s < S; s++)
			cut[s] = 1;
		for (int i = S; i < L; i++)
			cut[pick(r, S)]++;
		for (int s = 0; s < S; s++)
			dev[s] = pick(r, P);
	}
	tu_capture();
	ir_module *m = fe_load_src(src_from_string(a, "x.yaml", text), &ov);
	if (m && random_place) {
		m->plan.partition = IR_PART_GIVEN;
		m->plan.given = arena_alloc(m->arena, (size_t)S * sizeof *m->plan.given);
		m->plan.placement = arena_alloc(m->arena, (size_t)S * sizeof *m->plan.placement);
		memcpy(m->plan.given, cut, (size_t)S * sizeof *cut);
		memcpy(m->plan.placement, dev, (size_t)S * sizeof *dev);
		m->plan.ngiven = m->plan.nplacement = S;
	}
	static const pass_id lower[] = {PASS_cost, PASS_partition, PASS_place, PASS_schedule,
	                                PASS_tune, PASS_comm};
	pass_opts o = {.budget = &budget};
	if (m && pass_run(m, lower, (int)(sizeof lower / sizeof *lower), &o) != 0) {
		ir_free(m);
		m = NULL;
	}
	tu_release();
	return m;
}

/* Make every group a maximal run of transfers with one id of its own, and
 * a run of one ungrouped: what the text form would say. */
static void normalize_groups(ir_module *m)
{
	int next = 1;
	for (int d = 0; d < m->ndevices; d++) {
		ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops;) {
			ir_op *o = &dev->ops[i];
			if (!is_xfer(o) || !o->group) {
				o->group = 0;
				i++;
				continue;
			}
			int j = i + 1;
			while (j < dev->nops && is_xfer(&dev->ops[j]) && dev->ops[j].group == o->group)
				j++;
			int g = j - i > 1 ? next++ : 0;
			for (int k = i; k < j; k++)
				dev->ops[k].group = g;
			i = j;
		}
	}
}

static void move_op(ir_device *dev, int from, int to)
{
	ir_op o = dev->ops[from];
	if (from < to)
		memmove(&dev->ops[from], &dev->ops[from + 1], (size_t)(to - from) * sizeof o);
	else
		memmove(&dev->ops[to + 1], &dev->ops[to], (size_t)(from - to) * sizeof o);
	dev->ops[to] = o;
}

/* A random op of dev satisfying ok(), or -1. */
static int pick_op(rng *r, const ir_device *dev, bool (*ok)(const ir_device *, int))
{
	int cand[512], n = 0;
	for (int i = 0; i < dev->nops && n < 512; i++)
		if (ok(dev, i))
			cand[n++] = i;
	return n ? cand[pick(r, n)] : -1;
}

static bool ok_adjacent_comm(const ir_device *dev, int i)
{
	return i + 1 < dev->nops && dev->ops[i].comm != IR_COMM_NONE && dev->ops[i + 1].comm != IR_COMM_NONE;
}
static bool ok_adjacent_xfers(const ir_device *dev, int i)
{
	return i + 1 < dev->nops && is_xfer(&dev->ops[i]) && is_xfer(&dev->ops[i + 1]);
}
static bool ok_wait(const ir_device *dev, int i)
{
	return dev->ops[i].comm == IR_COMM_WAIT;
}
static bool ok_comm(const ir_device *dev, int i)
{
	return dev->ops[i].comm != IR_COMM_NONE;
}
static bool ok_send(const ir_device *dev, int i)
{
	return dev->ops[i].comm == IR_COMM_SEND;
}
static bool ok_adjacent_compute(const ir_device *dev, int i)
{
	return i + 1 < dev->nops && dev->ops[i].comm == IR_COMM_NONE && dev->ops[i + 1].comm == IR_COMM_NONE;
}
static bool ok_grouped(const ir_device *dev, int i)
{
	return dev->ops[i].group != 0;
}
static bool ok_xfer(const ir_device *dev, int i)
{
	return is_xfer(&dev->ops[i]);
}

/* The run of transfer i: its group's ops around it, or itself. */
static void run_of(const ir_device *dev, int i, int *lo, int *hi)
{
	int g = dev->ops[i].group;
	*lo = *hi = i;
	while (g && *lo > 0 && is_xfer(&dev->ops[*lo - 1]) && dev->ops[*lo - 1].group == g)
		--*lo;
	while (g && *hi + 1 < dev->nops && is_xfer(&dev->ops[*hi + 1]) && dev->ops[*hi + 1].group == g)
		++*hi;
}

enum {
	MUT_SWAP_ADJ,
	MUT_MOVE_WAIT,
	MUT_SPLIT,
	MUT_MERGE,
	MUT_SWAP_SENDS,
	MUT_MOVE_COMM,
	MUT_SWAP_COMPUTE,
	MUT_GROUP,
	NMUT
};

/* Index in dev of the compute op (kind, stage, mb), or -1. */
static int find_compute(const ir_device *dev, ir_op_kind k, int stage, int mb)
{
	for (int i = 0; i < dev->nops; i++)
		if (dev->ops[i].comm == IR_COMM_NONE && dev->ops[i].kind == k && dev->ops[i].stage == stage &&
		    dev->ops[i].mb == mb)
			return i;
	return -1;
}

/* Where a send's value is made: F, or B (W when the backward is whole). */
static int producer_of(const ir_module *m, const ir_device *dev, const ir_op *send)
{
	bool split = ir_schedule_splits_backward[m->plan.schedule];
	return find_compute(dev, send->kind == IR_OP_B && !split ? IR_OP_W : send->kind, send->stage, send->mb);
}

/* The range a wait may move in and still pass the structural checks:
 * after its receive, up to its consumer.  Positions once it is taken out. */
static bool wait_range(const ir_device *dev, int w, int *lo, int *hi)
{
	const ir_op *o = &dev->ops[w];
	int r = -1;
	if (o->coll == IR_COMM_TIE) { /* after its tie, anywhere */
		for (int i = 0; i < dev->nops; i++)
			if (dev->ops[i].comm == IR_COMM_TIE)
				r = i;
		*lo = r + 1 - (r > w);
		*hi = dev->nops - 1;
		return r >= 0 && *lo <= *hi;
	}
	for (int i = 0; i < dev->nops; i++)
		if (dev->ops[i].comm == IR_COMM_RECV && dev->ops[i].kind == o->kind &&
		    dev->ops[i].stage == o->stage && dev->ops[i].mb == o->mb)
			r = i;
	int u = find_compute(dev, o->kind, o->kind == IR_OP_F ? o->stage + 1 : o->stage - 1, o->mb);
	if (r < 0 || u < 0)
		return false;
	*lo = r + 1 - (r > w);
	*hi = u - (u > w);
	return *lo <= *hi;
}

/* Group ids the mutations make: above any the passes give. */
static int fresh_group = 1000000;

/* One random mutation on one random device; false when it found nothing
 * to change. */
static bool mutate(rng *r, ir_module *m, int kind)
{
	ir_device *dev = &m->devices[pick(r, m->ndevices)];
	int i, j;
	switch (kind) {
	case MUT_SWAP_ADJ:
	case MUT_SWAP_COMPUTE:
		if ((i = pick_op(r, dev, kind == MUT_SWAP_ADJ ? ok_adjacent_comm : ok_adjacent_compute)) < 0)
			return false;
		{
			ir_op t = dev->ops[i];
			dev->ops[i] = dev->ops[i + 1], dev->ops[i + 1] = t;
		}
		return true;
	case MUT_MOVE_WAIT: {
		/* Anywhere between its receive and its consumer. */
		int lo, hi;
		if ((i = pick_op(r, dev, ok_wait)) < 0 || !wait_range(dev, i, &lo, &hi))
			return false;
		int to = lo + pick(r, hi - lo + 1);
		if (to == i)
			return false;
		move_op(dev, i, to);
		return true;
	}
	case MUT_MOVE_COMM: {
		if ((i = pick_op(r, dev, ok_comm)) < 0)
			return false;
		int to = i + (pick(r, 2) ? 1 : -1) * (1 + pick(r, 8));
		to = to < 0 ? 0 : to >= dev->nops ? dev->nops - 1 : to;
		if (to == i)
			return false;
		move_op(dev, i, to);
		return true;
	}
	case MUT_SPLIT:
		if ((i = pick_op(r, dev, ok_grouped)) < 0)
			return false;
		for (j = i; j > 0 && dev->ops[j - 1].group == dev->ops[i].group; j--)
			;
		for (int g = dev->ops[i].group; j < dev->nops && dev->ops[j].group == g; j++)
			dev->ops[j].group = 0;
		return true;
	case MUT_MERGE: {
		if ((i = pick_op(r, dev, ok_adjacent_xfers)) < 0)
			return false;
		/* The runs of i and i + 1 become one group. */
		int lo, hi, lo2, hi2;
		run_of(dev, i, &lo, &hi);
		run_of(dev, i + 1, &lo2, &hi2);
		int g = fresh_group++;
		for (int k = lo; k <= hi2; k++)
			dev->ops[k].group = g;
		return true;
	}
	case MUT_GROUP: {
		/* A transfer up to 8 places away joins the run of transfer i: it
		 * moves next to the run, and the two become one group (as a
		 * hand-written file, or a comm pass that groups, would have it). */
		int lo, hi, cand[16], n = 0;
		if ((i = pick_op(r, dev, ok_xfer)) < 0)
			return false;
		run_of(dev, i, &lo, &hi);
		for (int k = lo - 8; k <= hi + 8; k++)
			if (k >= 0 && k < dev->nops && (k < lo || k > hi) && is_xfer(&dev->ops[k]))
				cand[n++] = k;
		if (!n)
			return false;
		j = cand[pick(r, n)];
		if (j < lo)
			move_op(dev, j, lo - 1), lo--;
		else
			move_op(dev, j, hi + 1), hi++;
		int g = fresh_group++;
		for (int k = lo; k <= hi; k++)
			dev->ops[k].group = g;
		return true;
	}
	case MUT_SWAP_SENDS: {
		/* Two sends of one device (any) to different peers trade places;
		 * when the later one's value is not made yet at the earlier one's
		 * place, the earlier one moves to just after the later one instead:
		 * either way their order is exchanged. */
		int pairs[256][3], n = 0;
		for (int d = 0; d < m->ndevices; d++) {
			const ir_device *dv = &m->devices[d];
			for (int a = 0; a < dv->nops; a++)
				for (int b = a + 1; b < dv->nops && n < 256; b++)
					if (ok_send(dv, a) && ok_send(dv, b) && dv->ops[a].peer != dv->ops[b].peer)
						pairs[n][0] = d, pairs[n][1] = a, pairs[n++][2] = b;
		}
		if (!n)
			return false;
		int c = pick(r, n);
		dev = &m->devices[pairs[c][0]];
		i = pairs[c][1], j = pairs[c][2];
		if (producer_of(m, dev, &dev->ops[j]) < i) {
			ir_op t = dev->ops[i];
			dev->ops[i] = dev->ops[j], dev->ops[j] = t;
		} else {
			move_op(dev, i, j);
		}
		return true;
	}
	}
	return false;
}

/* ---- the cross-check ---------------------------------------------------------------- */

typedef struct tally {
	int bases, unbuilt, cases, agree_free, agree_dead, rejected, too_big, disagree;
	int base_free, base_dead;   /* the programs as comm lowered them */
	int by[IR_NBACKENDS][2];    /* [backend][deadlock?] */
	int grouped[IR_NBACKENDS][2]; /* the same, of programs with a group */
	int tied[IR_NBACKENDS][2];    /* the same, of programs with tie ops */
	int by_mut[NMUT][2];        /* mutants by their last mutation and verdict */
	int tag_only[2];            /* mpi programs first-in-first-out matching refuses */
	int emu_only;               /* nccl programs the proof refuses that the emulator runs */
	int emu_unsound;            /* nccl programs proven that deadlock on the emulator */
	int unsimulated;            /* programs proven that the simulator cannot run */
	size_t states, max_states;
} tally;

static const char *const mut_names[NMUT] = {"swap adjacent", "move wait", "split group",
                                             "merge into group", "swap sends", "move transfer",
                                             "swap compute", "gather into group"};

static bool has_group(const ir_module *m)
{
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			if (m->devices[d].ops[i].group)
				return true;
	return false;
}

static void count_states(tally *t, size_t n)
{
	t->states += n;
	if (n > t->max_states)
		t->max_states = n;
}

/* Can the simulator (which compile runs) run m to the end? */
static bool simulates(const ir_module *m, bool show)
{
	tu_capture();
	sim_result *r = sim_run(m);
	char *why = strdup(tu_captured());
	tu_release();
	if (!r && show)
		printf("xcheck: proven, but the simulator cannot run it:\n%s", why);
	free(why);
	sim_free(r);
	return r != NULL;
}

/* Compare the proof with the explorer on m: for the runtime of its
 * backend, the same verdict; on nccl, also the emulator's stand-in (host
 * semantics, first in, first out), which must run every program the
 * proof accepts; and the simulator must run every program the proof
 * accepts.  False on disagreement. */
static bool check_one(ir_module *m, tally *t, int last_mut)
{
	size_t n = 0, ne = 0;
	int want = explore_backend(m, 400000, &n);
	count_states(t, n);
	if (want == TOO_BIG) {
		t->too_big++;
		return true;
	}
	m->proof = (ir_proof){0};
	tu_capture();
	int rc = pass_run_one(m, PASS_verify, NULL);
	char *said = strdup(tu_captured());
	tu_release();
	bool proof_free = rc == 0, mpi = m->plan.backend == IR_BACKEND_MPI;
	int emu = mpi ? FREE : explore_module(m, SEM_HOST, MATCH_FIFO, 400000, &ne);
	count_states(t, ne);
	t->cases++;
	t->emu_unsound += proof_free && emu == DEADLOCK;
	bool sims = !proof_free || simulates(m, t->unsimulated < 3);
	t->unsimulated += !sims;
	bool ok = proof_free == (want == FREE) && !(proof_free && emu == DEADLOCK) && sims;
	if (ok) {
		if (proof_free)
			t->agree_free++;
		else
			t->agree_dead++;
		t->by[m->plan.backend][!proof_free]++;
		if (has_group(m))
			t->grouped[m->plan.backend][!proof_free]++;
		if (ir_tie_apart(m))
			t->tied[m->plan.backend][!proof_free]++;
		if (last_mut >= 0)
			t->by_mut[last_mut][!proof_free]++;
		else if (proof_free)
			t->base_free++;
		else
			t->base_dead++;
		t->emu_only += !mpi && !proof_free && emu == FREE;
		if (mpi) {
			/* Would first-in-first-out matching (nccl's) refuse it? */
			m->plan.backend = IR_BACKEND_NCCL;
			tu_capture();
			int errs = ir_verify(m);
			tu_release();
			m->plan.backend = IR_BACKEND_MPI;
			if (errs)
				t->tag_only[!proof_free]++;
		}
	} else if (++t->disagree <= 3) {
		printf("xcheck: DISAGREEMENT: the proof says %s, the explorer %s (%zu states)%s%s\n",
		       proof_free ? "deadlock-free" : "deadlock", want == FREE ? "deadlock-free" : "deadlock", n,
		       proof_free && emu == DEADLOCK ? "; the emulator's stand-in deadlocks" : "",
		       sims ? "" : "; the simulator cannot run it");
		printf("%s", said);
		ir_print(stdout, m);
	}
	free(said);
	return ok;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { NBASES = 2000, MUTANTS = 16 };

START_TEST(test_xcheck)
{
	budget = tune_budget_start(1); /* a cap the tiny plans never reach: the cases stay the same anywhere */
	rng r = {0x0c70d1ce5eedull};
	tally t = {0};
	double t0 = now();
	for (int c = 0; c < NBASES; c++) {
		arena *a;
		ir_module *m;
		for (int tries = 0;; tries++) {
			ck_assert_msg(tries < 1000, "no random plan builds");
			a = arena_new();
			if ((m = build(&r, a)))
				break;
			t.unbuilt++;
			arena_free(a);
		}
		t.bases++;
		/* The lowering as comm wrote it, then mutants of it. */
		check_one(m, &t, -1);
		int P = m->ndevices;
		ir_op *base[4];
		int nbase[4];
		for (int d = 0; d < P; d++) {
			nbase[d] = m->devices[d].nops;
			base[d] = malloc(((size_t)nbase[d] + 1) * sizeof **base);
			if (nbase[d]) /* an idle device has no ops at all */
				memcpy(base[d], m->devices[d].ops, (size_t)nbase[d] * sizeof **base);
		}
		for (int k = 0; k < MUTANTS; k++) {
			for (int d = 0; d < P; d++)
				if (nbase[d])
					memcpy(m->devices[d].ops, base[d], (size_t)nbase[d] * sizeof **base);
			int nmut = 1 + pick(&r, 4), last = -1;
			for (int i = 0; i < nmut; i++) {
				int kind = pick(&r, NMUT);
				if (mutate(&r, m, kind))
					last = kind;
			}
			if (last < 0)
				continue;
			normalize_groups(m);
			tu_capture();
			int errs = ir_verify(m);
			tu_release();
			if (errs) {
				t.rejected++;
				continue;
			}
			check_one(m, &t, last);
		}
		for (int d = 0; d < P; d++)
			free(base[d]);
		ir_free(m);
		arena_free(a);
	}
	double secs = now() - t0;
	printf("xcheck: %d cases: %d deadlock-free, %d deadlock; %s\n", t.cases, t.agree_free,
	       t.agree_dead, t.disagree ? "VERDICTS DISAGREE" : "verdicts agree");
	printf("xcheck: nccl %d free / %d deadlock, mpi %d free / %d deadlock\n", t.by[IR_BACKEND_NCCL][0],
	       t.by[IR_BACKEND_NCCL][1], t.by[IR_BACKEND_MPI][0], t.by[IR_BACKEND_MPI][1]);
	printf("xcheck:   with a group: nccl %d free / %d deadlock, mpi %d free / %d deadlock\n",
	       t.grouped[IR_BACKEND_NCCL][0], t.grouped[IR_BACKEND_NCCL][1], t.grouped[IR_BACKEND_MPI][0],
	       t.grouped[IR_BACKEND_MPI][1]);
	printf("xcheck:   with tie ops: nccl %d free / %d deadlock, mpi %d free / %d deadlock\n",
	       t.tied[IR_BACKEND_NCCL][0], t.tied[IR_BACKEND_NCCL][1], t.tied[IR_BACKEND_MPI][0],
	       t.tied[IR_BACKEND_MPI][1]);
	printf("xcheck:   mpi, matched by tag but not first in, first out: %d free / %d deadlock\n",
	       t.tag_only[0], t.tag_only[1]);
	printf("xcheck:   nccl, refused by the proof but run by the emulator's stand-in: %d; proven "
	       "but deadlocking there: %d\n", t.emu_only, t.emu_unsound);
	printf("xcheck:   proven but not run by the simulator: %d\n", t.unsimulated);
	printf("xcheck:   as lowered by comm              %4d free / %4d deadlock\n", t.base_free, t.base_dead);
	for (int k = 0; k < NMUT; k++)
		printf("xcheck:   last mutation %-16s %4d free / %4d deadlock\n", mut_names[k], t.by_mut[k][0],
		       t.by_mut[k][1]);
	printf("xcheck: %d lowered programs (%d random plans not buildable), %d mutants rejected by "
	       "ir_verify, %d past the state limit, %d disagreements; %zu states explored (at most %zu "
	       "in one case), %.1f s\n",
	       t.bases, t.unbuilt, t.rejected, t.too_big, t.disagree, t.states, t.max_states, secs);
	fflush(stdout);
	ck_assert_int_eq(t.disagree, 0);
	ck_assert_msg(t.too_big * 100 <= t.cases, "%d cases past the state limit", t.too_big);
	ck_assert_int_gt(t.agree_free, 0);
	ck_assert_int_gt(t.agree_dead, 0);
	/* The classes the cross-check is for are among the cases. */
	ck_assert_int_gt(t.grouped[IR_BACKEND_MPI][0], 0);
	ck_assert_int_gt(t.grouped[IR_BACKEND_MPI][1], 0);
	for (int b = 0; b < IR_NBACKENDS; b++) /* the tie ops, proven and refused, on both */
		ck_assert(t.tied[b][0] > 0 && t.tied[b][1] > 0);
	ck_assert_int_gt(t.tag_only[0], 0);
}
END_TEST

/* ---- data parallelism: replicas and collectives ---------------------------------- */

/* The programs of D replicas, each its own copy (rep[r][d]), mutable. */
typedef struct replicas {
	int D, P;
	ir_device dev[XMAXD][4];
} replicas;

static void replicas_fill(replicas *x, const ir_module *m, int D)
{
	x->D = D, x->P = m->ndevices;
	for (int r = 0; r < D; r++)
		for (int d = 0; d < x->P; d++) {
			const ir_device *src = &m->devices[d];
			ir_device *dst = &x->dev[r][d];
			dst->ops = malloc(((size_t)src->nops + 1) * sizeof *dst->ops);
			REQUIRE(dst->ops, "out of memory");
			if (src->nops)
				memcpy(dst->ops, src->ops, (size_t)src->nops * sizeof *dst->ops);
			dst->nops = dst->capops = src->nops;
		}
}

static void replicas_free(replicas *x)
{
	for (int r = 0; r < x->D; r++)
		for (int d = 0; d < x->P; d++)
			free(x->dev[r][d].ops);
}

/* m, with replica r's programs. */
static ir_module replica_view(const ir_module *m, replicas *x, int r)
{
	ir_module v = *m;
	v.devices = x->dev[r];
	v.op_loc = NULL;
	v.memplan = NULL;
	return v;
}

static int explore_replicas(const ir_module *m, replicas *x, semantics sem, matching mt,
                            size_t limit, size_t *nstates)
{
	const ir_device *reps[XMAXD];
	for (int r = 0; r < x->D; r++)
		reps[r] = x->dev[r];
	xprog p;
	xprog_build(m, reps, x->D, &p, mt);
	int v = explore(&p, sem, limit, nstates);
	xprog_free(&p);
	return v;
}

static int explore_replicas_backend(const ir_module *m, replicas *x, size_t limit, size_t *nstates)
{
	if (m->plan.backend == IR_BACKEND_MPI)
		return explore_replicas(m, x, SEM_HOST, MATCH_TAG, limit, nstates);
	return explore_replicas(m, x, SEM_STREAM, MATCH_FIFO, limit, nstates);
}

/* prove_replicas on x; what it printed, in *said (malloc'd). */
static int prove_x(const ir_module *m, replicas *x, char **said, ir_proof *proof)
{
	prove_replica reps[XMAXD];
	for (int r = 0; r < x->D; r++)
		reps[r] = (prove_replica){x->dev[r], NULL};
	arena *a = arena_new();
	tu_capture();
	int rc = prove_replicas(m, reps, x->D, a, NULL, proof);
	*said = strdup(tu_captured());
	tu_release();
	arena_free(a);
	return rc;
}

/* A small data-parallel module, planned and lowered (no tuner: the
 * schedules' own programs), or NULL when the random plan cannot be built. */
static ir_module *build_dp(rng *r, arena *a, int *D)
{
	*D = 2 + pick(r, 2);
	int dist = pick(r, 2), carry = pick(r, 2);
	/* Three replicas multiply the states: one micro-batch, one chunk. */
	int P = 2 + pick(r, *D == 2 ? 2 : 1), M = *D == 2 ? 1 + pick(r, 2) : 1, L = 3 + pick(r, 3);
	const char *text = model_text(r, a, L);
	static const uint64_t buckets[] = {1, 200 << 10, 32 << 20};
	fe_overrides ov = {.devices = *D * P,
	                   .microbatches = *D * M,
	                   .schedule = sched_names[pick(r, 6)], /* not tuned */
	                   .chunks = *D == 2 ? 1 + pick(r, 2) : 1,
	                   .backend = pick(r, 2) ? "mpi" : "nccl",
	                   .dp = *D,
	                   .dist_opt = dist,
	                   /* Carried waits double the explored programs (two steps):
	                    * on the smallest pipelines only. */
	                   .no_overlap_gather = dist && (!carry || *D > 2 || P > 2 || M > 1),
	                   .deterministic = pick(r, 4) == 0,
	                   .bucket = buckets[pick(r, 3)]};
	tu_capture();
	ir_module *m = fe_load_src(src_from_string(a, "x.yaml", text), &ov);
	static const pass_id lower[] = {PASS_cost, PASS_partition, PASS_place, PASS_schedule, PASS_comm};
	if (m && pass_run(m, lower, (int)(sizeof lower / sizeof *lower), NULL) != 0) {
		ir_free(m);
		m = NULL;
	}
	tu_release();
	return m;
}

static bool ok_coll(const ir_device *dev, int i)
{
	return is_coll(&dev->ops[i]);
}
static bool ok_cwait(const ir_device *dev, int i)
{
	return dev->ops[i].comm == IR_COMM_WAIT && dev->ops[i].coll;
}
static bool ok_update(const ir_device *dev, int i)
{
	return dev->ops[i].comm == IR_COMM_UPDATE;
}

enum { DM_MOVE_COLL, DM_MOVE_CWAIT, DM_MOVE_UPDATE, DM_SWAP_COLLS, DM_DROP_WAIT, DM_P2P, NDMUT };
static const char *const dmut_names[NDMUT] = {"move collective", "move its wait", "move update",
                                               "swap collectives", "drop a wait", "a p2p mutation"};

/* One data-parallel mutation of v's programs; false when it found nothing
 * to change. */
static bool mutate_dp(rng *r, ir_module *v, int kind)
{
	ir_device *dev = &v->devices[pick(r, v->ndevices)];
	int i, j;
	switch (kind) {
	case DM_MOVE_COLL:
	case DM_MOVE_CWAIT:
	case DM_MOVE_UPDATE: {
		bool (*ok)(const ir_device *, int) = kind == DM_MOVE_COLL ? ok_coll : kind == DM_MOVE_CWAIT ? ok_cwait : ok_update;
		if ((i = pick_op(r, dev, ok)) < 0)
			return false;
		int to;
		if (pick(r, 2)) {
			/* Up to 8 places away. */
			to = i + (pick(r, 2) ? 1 : -1) * (1 + pick(r, 8));
			to = to < 0 ? 0 : to >= dev->nops ? dev->nops - 1 : to;
		} else {
			/* Anywhere the structural checks allow: after the op before
			 * it in its bucket's chain (the stage's last W, the
			 * collective, the wait, the update), before the one after. */
			const ir_op *o = &dev->ops[i];
			int after = -1, before = dev->nops;
			for (int k = 0; k < dev->nops; k++) {
				const ir_op *p = &dev->ops[k];
				bool mine = p->stage == o->stage && p->mb == o->mb;
				bool red_wait = p->comm == IR_COMM_WAIT && mine &&
				                (p->coll == IR_COMM_ALLREDUCE || p->coll == IR_COMM_REDUCESCATTER);
				if (kind == DM_MOVE_COLL) {
					if (o->comm != IR_COMM_ALLGATHER && p->comm == IR_COMM_NONE && p->kind == IR_OP_W &&
					    p->stage == o->stage)
						after = k;
					if (o->comm == IR_COMM_ALLGATHER && p->comm == IR_COMM_UPDATE && mine)
						after = k;
					if (p->comm == IR_COMM_WAIT && p->coll == o->comm && mine)
						before = k;
				} else if (kind == DM_MOVE_CWAIT && o->carried) {
					/* Before the stage's first F (the post is the
					 * previous step's). */
					if (p->comm == IR_COMM_NONE && p->kind == IR_OP_F && p->stage == o->stage &&
					    before == dev->nops)
						before = k;
				} else if (kind == DM_MOVE_CWAIT) {
					if (p->comm == o->coll && mine)
						after = k;
					if (o->coll != IR_COMM_ALLGATHER && p->comm == IR_COMM_UPDATE && mine)
						before = k;
				} else {
					if (red_wait)
						after = k;
					if (p->comm == IR_COMM_ALLGATHER && mine)
						before = k;
				}
			}
			int lo = after < 0 ? 0 : after - (after > i) + 1;
			int hi = before >= dev->nops ? dev->nops - 1 : before - (before > i);
			if (lo > hi)
				return false;
			to = lo + pick(r, hi - lo + 1);
		}
		if (to == i)
			return false;
		move_op(dev, i, to);
		return true;
	}
	case DM_SWAP_COLLS: {
		int cand[64], n = 0;
		for (int k = 0; k < dev->nops && n < 64; k++)
			if (is_coll(&dev->ops[k]))
				cand[n++] = k;
		if (n < 2)
			return false;
		i = cand[pick(r, n)], j = cand[pick(r, n)];
		if (i == j)
			return false;
		ir_op t = dev->ops[i];
		dev->ops[i] = dev->ops[j], dev->ops[j] = t;
		return true;
	}
	case DM_DROP_WAIT:
		if ((i = pick_op(r, dev, ok_cwait)) < 0)
			return false;
		memmove(&dev->ops[i], &dev->ops[i + 1], (size_t)(dev->nops - i - 1) * sizeof *dev->ops);
		dev->nops--;
		return true;
	default:
		return mutate(r, v, pick(r, NMUT));
	}
}

typedef struct dtally {
	int bases, unbuilt, cases, rejected, too_big, disagree;
	int by[IR_NBACKENDS][3];   /* [backend][free, deadlock, order mismatch] */
	int scope[2][3];           /* [one replica?][free, deadlock, order mismatch] */
	int by_mut[NDMUT][3];
	int rej_by_mut[NDMUT];      /* mutants ir_verify refuses, by their last mutation */
	int quotient;              /* identical replicas: the quotient and the D copies agree */
	int by_d[XMAXD + 1];       /* cases per D */
	int emu_unsound;
	int reduction_checked;     /* cases also explored without the local-move reduction */
	int carried[2];            /* cases with carried waits (two steps explored): [free, not] */
	size_t states, max_states;
} dtally;

/* The proof (of the D copies; with identical replicas also of the quotient,
 * pass_verify) against the explorer on the D replicas.  False on
 * disagreement. */
static bool check_dp(ir_module *m, replicas *x, bool identical, dtally *t, int last_mut)
{
	size_t n = 0, ne = 0;
	int want = explore_replicas_backend(m, x, 400000, &n);
	t->states += n;
	t->max_states = n > t->max_states ? n : t->max_states;
	if (want == TOO_BIG) {
		t->too_big++;
		if (getenv("XDP_DEBUG"))
			printf("too big: D=%d P=%d M=%lld S=%d %s\n", x->D, x->P, (long long)ir_local_mb(m), m->nstages, ir_backend_names[m->plan.backend]);
		return true;
	}
	char *said;
	ir_proof pr = {0};
	int rc = prove_x(m, x, &said, &pr);
	bool ok = rc == PROVE_OK ? want == FREE : rc == PROVE_CYCLE ? want == DEADLOCK : want == FREE;
	ok &= rc != PROVE_INVALID || !identical; /* identical replicas agree on every order */
	if (identical) {
		/* The quotient: the module's own programs are replica 0's. */
		ir_device *own = m->devices;
		m->devices = x->dev[0];
		m->proof = (ir_proof){0};
		tu_capture();
		int q = pass_run_one(m, PASS_verify, NULL);
		tu_release();
		m->devices = own;
		bool agree = (q == 0) == (rc == PROVE_OK) &&
		             (q != 0 || pr.steps == (int64_t)x->D * m->proof.steps);
		t->quotient += agree;
		ok &= agree;
	}
	if (rc == PROVE_OK && m->plan.backend == IR_BACKEND_NCCL) {
		int emu = explore_replicas(m, x, SEM_HOST, MATCH_FIFO, 400000, &ne);
		t->emu_unsound += emu == DEADLOCK;
		ok &= emu != DEADLOCK;
	}
	t->cases++;
	t->by_d[x->D]++;
	bool carries = false;
	for (int d = 0; d < x->P; d++)
		for (int i = 0; i < x->dev[0][d].nops; i++)
			carries |= x->dev[0][d].ops[i].comm == IR_COMM_WAIT && x->dev[0][d].ops[i].carried;
	if (carries && ok)
		t->carried[rc != PROVE_OK]++;
	int v = rc == PROVE_OK ? 0 : rc == PROVE_CYCLE ? 1 : 2;
	if (ok) {
		t->by[m->plan.backend][v]++;
		t->scope[!identical][v]++;
		if (last_mut >= 0)
			t->by_mut[last_mut][v]++;
	} else if (++t->disagree <= 3) {
		printf("xcheck-dp: DISAGREEMENT: the proof says %s, the explorer %s (%zu states, %s)\n",
		       rc == PROVE_OK ? "deadlock-free" : rc == PROVE_CYCLE ? "deadlock" : "order mismatch",
		       want == FREE ? "deadlock-free" : "deadlock", n,
		       identical ? "identical replicas" : "one replica mutated");
		printf("%s", said);
		for (int r = 0; r < x->D; r++) {
			ir_module vw = replica_view(m, x, r);
			printf("; replica %d\n", r);
			ir_print(stdout, &vw);
		}
	}
	free(said);
	return ok;
}

enum { NDPBASES = 160, DPMUTANTS = 16 };

START_TEST(test_xcheck_dp)
{
	rng r = {0xd1a7a9a11e1ull};
	dtally t = {0};
	double t0 = now();
	for (int c = 0; c < NDPBASES; c++) {
		arena *a;
		ir_module *m;
		int D;
		for (int tries = 0;; tries++) {
			ck_assert_msg(tries < 1000, "no random data-parallel plan builds");
			a = arena_new();
			if ((m = build_dp(&r, a, &D)))
				break;
			t.unbuilt++;
			arena_free(a);
		}
		t.bases++;
		replicas base;
		replicas_fill(&base, m, D);
		{
			replicas x;
			replicas_fill(&x, m, D);
			check_dp(m, &x, true, &t, -1);
			replicas_free(&x);
		}
		for (int k = 0; k < DPMUTANTS; k++) {
			replicas x;
			replicas_fill(&x, m, D);
			/* Every replica alike (the quotient's case), or one alone. */
			bool one = pick(&r, 2);
			int target = one ? pick(&r, D) : 0, nmut = 1 + pick(&r, 3), last = -1;
			ir_module v = replica_view(m, &x, target);
			for (int i = 0; i < nmut; i++) {
				int kind = pick(&r, NDMUT);
				if (kind == DM_SWAP_COLLS && !one)
					continue; /* in one replica only: alike, it is a valid reordering */
				if (mutate_dp(&r, &v, kind))
					last = kind;
			}
			if (last < 0) {
				replicas_free(&x);
				continue;
			}
			normalize_groups(&v);
			if (!one)
				for (int q = 1; q < D; q++)
					for (int d = 0; d < x.P; d++) {
						x.dev[q][d].nops = x.dev[0][d].nops;
						memcpy(x.dev[q][d].ops, x.dev[0][d].ops, (size_t)x.dev[0][d].nops * sizeof *x.dev[0][d].ops);
					}
			tu_capture();
			int errs = ir_verify(&v);
			tu_release();
			if (errs) {
				t.rejected++;
				t.rej_by_mut[last]++;
				replicas_free(&x);
				continue;
			}
			check_dp(m, &x, !one, &t, last);
			/* Now and then the explorer without its reduction: the same
			 * verdict (on the smaller cases). */
			if (D == 2 && k % 4 == 0) {
				size_t n1, n2;
				int with = explore_replicas_backend(m, &x, 400000, &n1);
				no_reduction = true;
				int without = explore_replicas_backend(m, &x, 400000, &n2);
				no_reduction = false;
				if (with != TOO_BIG && without != TOO_BIG) {
					t.reduction_checked++;
					ck_assert_msg(with == without, "the explorer's reduction changes a verdict");
				}
			}
			replicas_free(&x);
		}
		replicas_free(&base);
		ir_free(m);
		arena_free(a);
	}
	double secs = now() - t0;
	printf("xcheck-dp: %d cases (D=2: %d, D=3: %d): %d deadlock-free, %d deadlock, %d order "
	       "mismatches; %s\n", t.cases, t.by_d[2], t.by_d[3],
	       t.scope[0][0] + t.scope[1][0], t.scope[0][1] + t.scope[1][1], t.scope[0][2] + t.scope[1][2],
	       t.disagree ? "VERDICTS DISAGREE" : "verdicts agree");
	printf("xcheck-dp:   with carried all-gather waits (two steps explored): %d free, %d deadlock or "
	       "order\n", t.carried[0], t.carried[1]);
	ck_assert_int_gt(t.carried[0], 0);
	printf("xcheck-dp:   nccl %d free / %d deadlock / %d order, mpi %d free / %d deadlock / %d order\n",
	       t.by[IR_BACKEND_NCCL][0], t.by[IR_BACKEND_NCCL][1], t.by[IR_BACKEND_NCCL][2],
	       t.by[IR_BACKEND_MPI][0], t.by[IR_BACKEND_MPI][1], t.by[IR_BACKEND_MPI][2]);
	printf("xcheck-dp:   replicas alike %d free / %d deadlock (quotient = D copies: %d); one "
	       "replica mutated %d free / %d deadlock / %d order\n",
	       t.scope[0][0], t.scope[0][1], t.quotient, t.scope[1][0], t.scope[1][1], t.scope[1][2]);
	for (int k = 0; k < NDMUT; k++)
		printf("xcheck-dp:   last mutation %-17s %4d free / %4d deadlock / %4d order (%d refused by "
		       "ir_verify)\n", dmut_names[k], t.by_mut[k][0], t.by_mut[k][1], t.by_mut[k][2],
		       t.rej_by_mut[k]);
	printf("xcheck-dp: %d lowered programs (%d random plans not buildable), %d mutants rejected by "
	       "ir_verify, %d past the state limit, %d disagreements, %d proven nccl programs "
	       "deadlocking on the emulator; %zu states (at most %zu in one case), %.1f s\n",
	       t.bases, t.unbuilt, t.rejected, t.too_big, t.disagree, t.emu_unsound, t.states,
	       t.max_states, secs);
	printf("xcheck-dp: %d cases explored again without the local-move reduction: the same verdicts\n",
	       t.reduction_checked);
	fflush(stdout);
	ck_assert_int_eq(t.disagree, 0);
	ck_assert_msg(t.too_big * 100 <= t.cases, "%d cases past the state limit", t.too_big);
	ck_assert_int_gt(t.scope[0][0], 0);
	ck_assert_int_gt(t.scope[1][1], 0);
	ck_assert_int_gt(t.scope[1][2], 0);
	ck_assert_int_gt(t.reduction_checked, 0);
}
END_TEST

/* Replica 1 posts the two reductions of one stage in the other order.
 * nccl: each waits on the serial stream for the other's members, a cycle.
 * mpi with each wait right after its post: a cycle too.  mpi with the
 * waits at the end (as comm lowers): no cycle, but the members disagree on
 * the order of their collectives, which the runtimes match by position. */
START_TEST(test_replicas)
{
	static const char *const yaml =
	    "model: {name: x, hidden: 64, vocab: 256, seq: 8, dtype: f32}\n"
	    "layers: [{kind: embedding}, {kind: mlp, ffn: 128}, {kind: attention, heads: 4}, {kind: head}]\n"
	    "cluster: cpu-local\n";
	for (int be = 0; be < 3; be++) {
		arena *a = arena_new();
		fe_overrides ov = {.devices = 4, .microbatches = 4, .schedule = "1f1b", .dp = 2, .bucket = 1,
		                   .backend = be ? "mpi" : "nccl"};
		tu_capture();
		ir_module *m = fe_load_src(src_from_string(a, "x.yaml", yaml), &ov);
		static const pass_id lower[] = {PASS_cost, PASS_partition, PASS_place, PASS_schedule, PASS_comm,
		                                PASS_verify};
		int rc = m ? pass_run(m, lower, 6, NULL) : -1;
		tu_release();
		ck_assert_int_eq(rc, 0);
		int64_t qsteps = m->proof.steps;
		replicas x;
		replicas_fill(&x, m, 2);
		char *said;
		ir_proof pr;
		/* Alike: proven, twice the quotient's steps. */
		ck_assert_int_eq(prove_x(m, &x, &said, &pr), PROVE_OK);
		ck_assert_int_eq(pr.steps, 2 * qsteps);
		free(said);
		/* D0's two reductions (S0 b0, S0 b1), their waits and updates. */
		ir_device *d0 = &x.dev[1][0];
		int c[2] = {-1, -1};
		for (int i = 0, k = 0; i < d0->nops; i++)
			if (is_coll(&d0->ops[i]))
				c[k++] = i;
		ck_assert(c[0] >= 0 && c[1] == c[0] + 1);
		if (be == 2) {
			/* Each collective's wait and update right after it, in both
			 * replicas, replica 1 in the other order. */
			for (int r = 0; r < 2; r++) {
				ir_device *dv = &x.dev[r][0];
				ir_op t[6], *o = &dv->ops[c[0]];
				ck_assert_int_eq(dv->nops, c[0] + 6);
				int first = r == 0 ? 0 : 1;
				for (int k = 0; k < 2; k++) {
					int b = k == 0 ? first : 1 - first;
					t[3 * k] = o[b];      /* all-reduce S0 b */
					t[3 * k + 1] = o[2 + 2 * b]; /* its wait */
					t[3 * k + 2] = o[3 + 2 * b]; /* its update */
				}
				memcpy(o, t, sizeof t);
			}
		} else {
			ir_op t = d0->ops[c[0]];
			d0->ops[c[0]] = d0->ops[c[1]], d0->ops[c[1]] = t;
		}
		rc = prove_x(m, &x, &said, &pr);
		size_t n;
		int want = explore_replicas_backend(m, &x, 1000000, &n);
		if (be == 1) {
			ck_assert_int_eq(rc, PROVE_INVALID);
			ck_assert_int_eq(want, FREE);
			ck_assert_msg(strstr(said, "the DP group of D0 disagrees on its collective 0: replica 1 "
			                           "posts all-reduce S0 b1 where replica 0 posts all-reduce S0 b0"),
			              "%s", said);
		} else {
			ck_assert_int_eq(rc, PROVE_CYCLE);
			ck_assert_int_eq(want, DEADLOCK);
			ck_assert_msg(strstr(said, "R1 D0 (rank 2): all-reduce S0 b") && strstr(said, "R0 D0 (rank 0)"),
			              "%s", said);
		}
		printf("xcheck: replicas, %s%s:\n%s", ir_backend_names[m->plan.backend],
		       be == 2 ? ", waits in program order" : "", said);
		free(said);
		replicas_free(&x);
		ir_free(m);
		arena_free(a);
	}
}
END_TEST

/* The explorer on the hand-written corpus (tests/deadlock): every program
 * that passes the structural checks gets the verdict its "; EXPECT:" line
 * gives, from the explorer and from the proof alike. */
START_TEST(test_corpus)
{
	arena *a = arena_new();
	const char *dirname = arena_printf(a, "%s/../tests/deadlock", fe_models_dir());
	DIR *dir = opendir(dirname);
	ck_assert_msg(dir != NULL, "cannot open %s", dirname);
	int explored = 0, structural = 0;
	for (struct dirent *de; (de = readdir(dir));) {
		size_t len = strlen(de->d_name);
		if (len < 5 || strcmp(de->d_name + len - 5, ".opir"))
			continue;
		const char *path = arena_printf(a, "%s/%s", dirname, de->d_name);
		tu_capture();
		src_file *src = src_read(a, path);
		ir_module *m = src ? ir_parse(src) : NULL;
		int errs = m ? ir_verify(m) : -1;
		tu_release();
		ck_assert_msg(m != NULL, "%s does not parse", path);
		int want = -1;
		ck_assert_msg(sscanf(src->text, "; EXPECT: %d", &want) == 1, "%s: no EXPECT line", path);
		if (errs) {
			ck_assert_int_eq(want, 1);
			structural++;
		} else {
			size_t n;
			int got = explore_backend(m, 1000000, &n);
			ck_assert_msg(got == (want ? DEADLOCK : FREE), "%s: the explorer says %s", path,
			              got == FREE ? "deadlock-free" : got == DEADLOCK ? "deadlock" : "too big");
			if (!want && m->plan.backend == IR_BACKEND_NCCL)
				ck_assert_msg(explore_module(m, SEM_HOST, MATCH_FIFO, 1000000, &n) == FREE,
				              "%s: deadlocks on the emulator's stand-in for NCCL", path);
			tu_capture();
			int rc = pass_run_one(m, PASS_verify, NULL);
			tu_release();
			ck_assert_msg((rc == 0) == (want == 0), "%s: the proof says %s", path,
			              rc == 0 ? "deadlock-free" : "deadlock");
			explored++;
		}
		ir_free(m);
	}
	closedir(dir);
	printf("xcheck: corpus: %d programs explored, %d rejected by the structural checks\n", explored,
	       structural);
	ck_assert_int_ge(explored, 6);
	arena_free(a);
}
END_TEST

static Suite *xcheck_suite(void)
{
	Suite *s = suite_create("xcheck");
	TCase *tc = tcase_create("proof-vs-explorer");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_corpus);
	tcase_add_test(tc, test_xcheck);
	suite_add_tcase(s, tc);
	TCase *dp = tcase_create("replicas");
	tcase_set_timeout(dp, 600);
	tcase_add_test(dp, test_replicas);
	tcase_add_test(dp, test_xcheck_dp);
	suite_add_tcase(s, dp);
	return s;
}

int main(void)
{
	return tu_run(xcheck_suite());
}
