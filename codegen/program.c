/* program.c: one device's proven program -> the op table of its rank
 * executable (a cg_rank).
 *
 * Reads the lowered, proven module (and the simulated step time the rank
 * reports against); writes nothing back.  Guarantees, or refuses with a diagnostic:
 * every layer is one the CPU runtime runs (rt_layer_check); the values sent
 * and received have the runtime's size (f32 activations); W runs in
 * micro-batch order in every stage (the runtime adds weight gradients in
 * that order, which is what makes the weights the same for every plan).
 *
 * Buffers: the memory plan's, as the verifier proved it, byte for byte.
 * The cost pass took every layer's stash sizes from the runtime's own size
 * functions (cost_runtime_stashes), so the plan's buffers are what the
 * runtime puts in them; a stash size that is not (a profile's, measured on
 * another executor) is refused, and any other difference is a bug.  On top
 * of the plan, F and B chain a stage's layers through one buffer: the
 * stage's output value, or, where the stage has none (the last stage's F,
 * the first stage's B), its input value, which is dead after the op, or a
 * work buffer when the stage has neither (a one-stage program). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_impl.h"
#include "cost.h" /* cost_rt_desc, cost_stash_round */
#include "dev.h"  /* dev_layer_sizes: the device executor's stash sizes */

#define RUP(n) (((uint64_t)(n) + RT_ALIGN - 1) & ~(uint64_t)(RT_ALIGN - 1))

const char *const cg_op_names[CG_NOPS] = {
#define X(e, s) s,
	CG_OPS(X)
#undef X
};

/* The IR's enums and the runtime's are one table each, in the same order. */
_Static_assert((int)IR_LAYER_EMBEDDING == (int)RT_EMBEDDING && (int)IR_LAYER_HEAD == (int)RT_HEAD &&
                   (int)IR_NLAYER_KINDS == (int)RT_NKINDS,
               "layer kinds of ir.h and octo_kernels.h differ");
_Static_assert(IR_EXACT_VALUE_BYTES == 8 * RT_EXACT_DIGITS,
               "a deterministic reduction's value bytes of ir.h and octo_rt.h differ");
_Static_assert((int)IR_ACT_SWIGLU == (int)RT_SWIGLU && (int)IR_NACTS == (int)RT_NACTS,
               "activations of ir.h and octo_kernels.h differ");

/* A value's bytes: f32 on CPU ranks, the model's dtype on a device. */
static uint64_t value_bytes(const ir_module *m, bool device)
{
	uint64_t esz = device && m->model.dtype == IR_DTYPE_BF16 ? 2 : sizeof(float);
	return (uint64_t)m->train.mbs * (uint64_t)m->model.seq * (uint64_t)m->model.hidden * esz;
}

typedef struct lowering {
	const ir_module *m;
	int d, S, M;
	bool device; /* the layers run on a device: its stash sizes and value bytes */
	ir_loc where;
	int *stage_h0;       /* per stage on this device: its first local layer; -1 elsewhere */
	rt_sizes *sz;        /* per local layer */
	uint64_t *stash[2];  /* per stage: the runtime's act and W stash bytes (RT_ALIGN'd slices) */
	int64_t *act_off, *ws_off, *val_off[2]; /* per (stage, mb); val_off by value kind F, B */
	int64_t *redo_off;   /* per (stage, mb): a recomputing stage's recomp buffer */
	int64_t work;        /* the work buffer, or -1 */
	rt_train train;      /* the runtime's settings (rt_coll_bytes) */
	int nbk;             /* collectives' buffers: (coll, stage, bucket) and offset */
	ir_buf *bk;
} lowering;

#define AT(s, mb) ((size_t)(s) * (size_t)L->M + (size_t)(mb))

/* Does stage s recompute its activations fully?  Its stash buffers (act,
 * recomp) then hold one value more after the stash: the chain of its
 * layers (ir_stage_redo).  A selective stage runs as one that does not,
 * with its layers' rt_layer_desc.selective set: smaller act stashes, and
 * each mamba layer's B makes its chunk states again inside rt_run_b. */
static bool redo(const lowering *L, int s)
{
	return L->m->stages[s].recompute == IR_RECOMP_FULL;
}

/* What each buffer of the plan holds, by the runtime's sizes. */
static uint64_t needed(const lowering *L, const ir_buf *b)
{
	switch (b->kind) {
	case IR_BUF_ACT:
	case IR_BUF_RECOMP:
		return L->stash[0][b->stage] + (redo(L, b->stage) ? value_bytes(L->m, L->device) : 0);
	case IR_BUF_WSTASH: return L->stash[1][b->stage];
	case IR_BUF_BUCKET: return b->size; /* checked against the runtime's at its collective */
	default: return value_bytes(L->m, L->device);
	}
}

/* The buffers and their offsets: the memory plan's (see the file comment). */
static int plan_buffers(lowering *L, cg_rank *out)
{
	const ir_module *m = L->m;
	const ir_dev_plan *p = m->memplan ? &m->memplan[L->d] : NULL;
	if (!p) {
		diag_error(L->where, "codegen: the module has no memory plan: the executables allocate "
		                     "the buffers the `memplan` pass lays out (run it)");
		return -1;
	}
	ir_buf *b;
	int n = ir_live_buffers(m, L->d, &b);
	if (p->nbufs != n)
		ir_bug("codegen: D%d's memory plan has %d buffers, its program %d", L->d, p->nbufs, n);
	for (int i = 0; i < n; i++) {
		const ir_buf *x = &p->bufs[i];
		if (x->kind != b[i].kind || x->stage != b[i].stage || x->mb != b[i].mb ||
		    x->off % RT_ALIGN != 0)
			ir_bug("codegen: D%d's memory plan is not its program's (buffer %d)", L->d, i);
		if (x->size == needed(L, x))
			continue;
		/* The layers' were checked; a recomputing stash's chain is a value. */
		if (ir_buf_is_stash(x->kind) && !(x->kind != IR_BUF_WSTASH && redo(L, x->stage)))
			ir_bug("codegen: D%d's %s buffer of S%d m%d is %llu bytes in the memory plan, but "
			       "the runtime's are %llu", L->d, ir_buf_names[x->kind], x->stage, x->mb,
			       (unsigned long long)x->size, (unsigned long long)needed(L, x));
		/* A value's bytes are the program's (IR text may give others). */
		diag_error(L->where, "codegen: D%d's %s %s buffer of S%d m%d is %llu bytes, but the "
		           "runtime's values are %llu bytes (%s; the model's dtype is %s)", L->d,
		           ir_buf_names[x->kind], ir_value_names[x->value], x->stage, x->mb,
		           (unsigned long long)x->size, (unsigned long long)needed(L, x),
		           L->device ? "the model's dtype on a device" : "f32 on CPU ranks",
		           ir_dtype_names[m->model.dtype]);
		free(b);
		return -1;
	}
	free(b);
	uint64_t top = p->arena;
	out->ir_arena = p->arena;
	out->nbufs = n;
	L->nbk = 0;
	for (int i = 0; i < n; i++) {
		const ir_buf *x = &p->bufs[i];
		size_t k = AT(x->stage, x->mb);
		switch (x->kind) {
		case IR_BUF_ACT: L->act_off[k] = (int64_t)x->off; break;
		case IR_BUF_RECOMP: L->redo_off[k] = (int64_t)x->off; break;
		case IR_BUF_WSTASH: L->ws_off[k] = (int64_t)x->off; break;
		case IR_BUF_BUCKET: L->bk[L->nbk++] = *x; break;
		default: L->val_off[x->value == IR_OP_B][k] = (int64_t)x->off; break;
		}
	}
	/* A program of one stage has no value to chain its layers through. */
	L->work = -1;
	for (int s = 0; s < L->S; s++)
		if (L->stage_h0[s] >= 0 && s == 0 && s == L->S - 1) {
			top = RUP(top);
			L->work = (int64_t)top;
			top += RUP(value_bytes(m, L->device));
		}
	out->buf_bytes = RUP(top);
	return 0;
}

/* The buffer of collective c of stage s's bucket b (the memory plan's). */
static const ir_buf *bucket_buf(const lowering *L, ir_comm c, int s, int b)
{
	for (int i = 0; i < L->nbk; i++)
		if (L->bk[i].coll == c && L->bk[i].stage == s && L->bk[i].mb == b)
			return &L->bk[i];
	ir_bug("codegen: no %s buffer for S%d b%d", ir_comm_names[c], s, b);
}

static int64_t need_off(int64_t off, const char *what, int s, int mb)
{
	if (off < 0)
		ir_bug("codegen: no %s buffer for stage %d, micro-batch %d", what, s, mb);
	return off;
}

/* F and B of stage s, micro-batch mb: where the chain starts and ends.  A
 * recomputing stage keeps F's input for its B: its F chains through the
 * end of its act buffer where it has no output to chain through, and its B
 * reads the recomp buffer that R (below) fills. */
static void chain(const lowering *L, cg_op *c, int s, int mb, bool fwd)
{
	int prev = fwd ? s - 1 : s + 1, kind = fwd ? 0 : 1;
	bool has_in = prev >= 0 && prev < L->S, has_out = fwd ? s + 1 < L->S : s > 0;
	c->in = has_in ? need_off(L->val_off[kind][AT(prev, mb)], "input", s, mb) : -1;
	c->act = need_off((fwd || !redo(L, s) ? L->act_off : L->redo_off)[AT(s, mb)],
	                  fwd || !redo(L, s) ? "act stash" : "recomp stash", s, mb);
	if (has_out) {
		c->out = c->last = need_off(L->val_off[kind][AT(s, mb)], "output", s, mb);
	} else {
		c->last = -1;
		c->out = fwd && redo(L, s) ? c->act + (int64_t)L->stash[0][s]
		       : c->in >= 0        ? c->in : L->work;
	}
	c->ws = fwd ? -1 : need_off(L->ws_off[AT(s, mb)], "W stash", s, mb);
}

/* R of stage s, micro-batch mb, before its B: F again from the input F
 * kept (none for the first stage: the data) into the recomp buffer,
 * chained through its end, which also takes the output. */
static cg_op redo_op(const lowering *L, const cg_op *b, int s, int mb)
{
	cg_op c = *b;
	c.kind = CG_R;
	c.in = s > 0 ? need_off(L->val_off[0][AT(s - 1, mb)], "kept input", s, mb) : -1;
	c.out = c.last = b->act + (int64_t)L->stash[0][s];
	c.ws = -1;
	return c;
}

/* Layer l's stashes in the module are the runtime's (the cost pass put
 * them there; run selectively, its act less its sel_act), or a profile's
 * measured on another executor, refused. */
static int check_stashes(const ir_module *m, int l, const rt_layer_desc *d, const rt_sizes *sz,
                         bool device)
{
	const ir_cost *c = &m->layers[l].cost;
	uint64_t act = cost_stash_round((uint64_t)sz->act), ws = cost_stash_round((uint64_t)sz->wstash);
	uint64_t plan_act = c->act - (d->selective ? c->sel_act : 0); /* sel_act <= act: verified */
	if (plan_act == act && c->wstash == ws)
		return 0;
	bool act_off = plan_act != act;
	if (!(c->measured & (act_off ? IR_CF_BIT(ACT) : IR_CF_BIT(WSTASH))))
		ir_bug("codegen: layer L%d's %s stash is %llu bytes in the plan, but the %s's are %llu", l,
		       act_off ? "act" : "W", (unsigned long long)(act_off ? plan_act : c->wstash),
		       device ? "device executor" : "CPU runtime",
		       (unsigned long long)(act_off ? act : ws));
	diag_error(ir_loc_or(m->layer_loc ? m->layer_loc[l] : (ir_loc){0}, ir_loc_or(m->plan_loc, m->loc)),
	           "codegen: layer L%d (%s): the profile measured a%s stash of %llu bytes, but the %s "
	           "holds %llu: the memory plan would not be what the executables allocate; measure "
	           "on this target ('octopipe profile --target'), or leave %s out of the profile",
	           l, ir_layer_kind_names[m->layers[l].kind], act_off ? "n act" : " W",
	           (unsigned long long)(act_off ? c->act : c->wstash),
	           device ? "device executor" : "CPU runtime", (unsigned long long)(act_off ? act : ws),
	           act_off ? "act_bytes" : "wstash_bytes");
	return -1;
}

static const char *kinds_text(const ir_module *m, const ir_stage *st, arena *a)
{
	char *t = arena_strdup(a, "");
	for (int l = st->first; l <= st->last; l++)
		t = arena_printf(a, "%s%s%s", t, l > st->first ? ", " : "",
		                 ir_layer_kind_names[m->layers[l].kind]);
	return t;
}

/* The replica of cluster rank k (ir_rank_of's inverse). */
static int64_t replica_of(const ir_module *m, int64_t k)
{
	int64_t D = ir_dp(m), P = m->ndevices;
	return m->plan.rank_order == IR_RANKS_DP_INNER ? k % D : k / P;
}

static const char *about_text(const ir_module *m, double predicted_us, int d, int rank, bool device,
                              int nops, arena *a, const char *data)
{
	char *t = arena_printf(
	    a,
	    "rank%d: rank %d of %d of a pipeline-parallel training program for %s (%d layers, "
	    "hidden %lld, vocab %lld, seq %lld, %s), compiled by octopipe for %s\n"
	    "plan: schedule %s, %d stages on %d ranks, %lld micro-batches of %lld x %lld tokens per "
	    "step, deadlock-free under %s (certificate %016llx)",
	    rank, rank, cg_nranks(m), m->model.name, m->nlayers, (long long)m->model.hidden,
	    (long long)m->model.vocab, (long long)m->model.seq,
	    device ? ir_dtype_names[m->model.dtype] : "f32",
	    device ? "CUDA ranks (NCCL, or MPI with OCTO_COMM=mpi)" : "CPU ranks under MPI",
	    ir_schedule_names[m->plan.schedule], m->nstages, cg_nranks(m),
	    (long long)m->train.microbatches, (long long)m->train.mbs, (long long)m->model.seq,
	    ir_backend_names[m->proof.backend], (unsigned long long)m->proof.order);
	if (predicted_us > 0)
		t = arena_printf(a, "%s; predicted step %.3f ms", t, predicted_us * 1e-3);
	if (ir_dp(m) > 1)
		t = arena_printf(a, "%s\ndata parallelism: %lld replicas of a %d-rank pipeline (rank order "
		                    "%s); this rank runs pipeline device D%d of replica %lld", t,
		                 (long long)ir_dp(m), m->ndevices, ir_rank_order_names[m->plan.rank_order],
		                 d, (long long)replica_of(m, rank));
	t = arena_printf(a, "%s\nthis rank holds:", t);
	int held = 0;
	for (int s = 0; s < m->nstages; s++) {
		const ir_stage *st = &m->stages[s];
		if (st->device != d)
			continue;
		t = arena_printf(a, "%s%s stage S%d = L%d..L%d (%s)", t, held++ ? ";" : "", s, st->first,
		                 st->last, kinds_text(m, st, a));
	}
	return arena_printf(a, "%s; %d ops per step\ndata: %s; %lld steps unless --steps says otherwise",
	                    t, nops, data ? data : "synthetic tokens", (long long)m->train.steps);
}

/* The runtime's training settings of the module; the rank's place in the
 * job (pipe_rank, replica) is set per rank. */
static rt_train train_of(const ir_module *m, bool device)
{
	(void)device;
	return (rt_train){.seed = m->train.seed, .nlayers = m->nlayers, .seq = m->model.seq,
	                  .mbs = m->train.mbs, .vocab = m->model.vocab,
	                  .microbatches = ir_local_mb(m),
	                  .optimizer = m->train.optimizer == IR_OPT_SGD ? RT_SGD : RT_ADAMW,
	                  .lr = (float)m->train.lr, .weight_decay = (float)m->train.weight_decay,
	                  .dp = ir_dp(m) > 1 ? ir_dp(m) : 0,
	                  .dp_flags = (m->plan.dist_opt ? RT_DP_DISTOPT : 0u) |
	                              (m->plan.deterministic ? RT_DP_EXACT : 0u),
	                  .warmup = m->train.warmup, .decay = (rt_decay)m->train.decay,
	                  /* the compile's steps unless given: the same schedule
	                   * however a run is cut by --steps and --resume */
	                  .decay_steps = m->train.decay_steps ? m->train.decay_steps : m->train.steps,
	                  .min_lr = (float)m->train.min_lr, .clip = (float)m->train.clip};
}

/* A data-parallel op of the program (docs/dataparallel.md) as a row of the
 * table: a collective posts on its bucket's buffer with a request slot of
 * its own, which its wait names; update runs the bucket's optimizer step.
 * coll_of: ir_coll_waits of the program.  The collective's bytes must be the
 * runtime's for the bucket's layers (rt_coll_bytes). */
static int dp_op(lowering *L, const ir_op *op, ir_loc loc, cg_op *c, const int *coll_of,
                 int *coll_slot, int *nslots, bool *waited)
{
	const ir_module *m = L->m;
	const ir_device *dev = &m->devices[L->d];
	const ir_stage *st = &m->stages[op->stage];
	int s = op->stage;
	if (op->comm == IR_COMM_WAIT) {
		int j = coll_of[op - dev->ops];
		if (j < 0)
			ir_bug("codegen: D%d waits for %s S%d b%d, never posted", L->d,
			       ir_comm_names[op->coll], s, op->mb);
		/* A carried wait comes before its post (the previous step's): the
		 * slot is the post's, held from one step into the next. */
		if (coll_slot[j] < 0)
			coll_slot[j] = (*nslots)++;
		c->kind = CG_WAIT;
		c->req = coll_slot[j];
		waited[c->req] = true;
		return 0;
	}
	if (L->stage_h0[s] < 0 || op->first < st->first || op->last > st->last)
		ir_bug("codegen: D%d's bucket S%d b%d is not in its stage", L->d, s, op->mb);
	c->h0 = L->stage_h0[s] + (op->first - st->first);
	c->h1 = L->stage_h0[s] + (op->last - st->first);
	if (op->comm == IR_COMM_UPDATE) {
		c->kind = CG_UPDATE;
		return 0;
	}
	int kind = op->comm == IR_COMM_ALLREDUCE ? RT_ALL_REDUCE
	         : op->comm == IR_COMM_REDUCESCATTER ? RT_REDUCE_SCATTER : RT_ALL_GATHER;
	int64_t n = 0;
	for (int h = c->h0; h <= c->h1; h++)
		n += L->sz[h].params;
	int64_t want = rt_coll_bytes(&L->train, kind, n);
	if (want < 0 || op->bytes != (uint64_t)want) {
		diag_error(loc, "codegen: %s S%d b%d moves %llu bytes, but the runtime's buffer for the "
		                "%lld parameters of L%d..L%d is %lld bytes",
		           ir_comm_names[op->comm], s, op->mb, (unsigned long long)op->bytes, (long long)n,
		           op->first, op->last, (long long)want);
		return -1;
	}
	const ir_buf *b = bucket_buf(L, op->comm, s, op->mb);
	c->kind = CG_COLL;
	c->tkind = kind;
	c->bytes = (int64_t)op->bytes;
	c->in = (int64_t)b->off;
	if (coll_slot[op - dev->ops] < 0)
		coll_slot[op - dev->ops] = (*nslots)++;
	c->req = coll_slot[op - dev->ops];
	return 0;
}

void cg_replicate(const ir_module *m, const cg_rank *pipe, arena *a, cg_rank *out)
{
	int64_t D = ir_dp(m), P = m->ndevices;
	for (int64_t r = 0; r < D; r++)
		for (int64_t p = 0; p < P; p++) {
			int64_t k = ir_rank_of(m, r, p);
			cg_rank *x = &out[k];
			*x = pipe[p];
			x->rank = (int)k;
			x->nranks = cg_nranks(m);
			x->train.replica = D > 1 ? r : 0;
			x->train.pipe_rank = p;
			x->prog.rank = (int32_t)k;
			x->prog.nranks = cg_nranks(m);
			x->ops = arena_alloc(a, (size_t)(x->nops + 1) * sizeof *x->ops);
			for (int i = 0; i < x->nops; i++) {
				x->ops[i] = pipe[p].ops[i];
				if (x->ops[i].kind == CG_SEND || x->ops[i].kind == CG_RECV)
					x->ops[i].peer = (int32_t)ir_rank_of(m, r, pipe[p].ops[i].peer);
			}
			if (D > 1)
				x->prog.about = about_text(m, pipe[p].prog.predicted_us, (int)p, (int)k,
				                           pipe[p].dev != CG_TARGET_CPU, pipe[p].nops, a,
				                           pipe[p].prog.data);
		}
}

int cg_lower_rank(const ir_module *m, double predicted_us, int d, bool device, arena *a,
                  cg_rank *out)
{
	memset(out, 0, sizeof *out);
	lowering Lv = {.m = m, .d = d, .S = m->nstages, .M = (int)ir_local_mb(m),
	               .device = device, .where = ir_loc_or(m->plan_loc, m->loc)};
	lowering *L = &Lv;
	const ir_device *dev = &m->devices[d];
	size_t nsm = (size_t)L->S * (size_t)L->M;
	L->stage_h0 = arena_alloc(a, (size_t)L->S * sizeof *L->stage_h0);
	L->stash[0] = arena_alloc(a, (size_t)L->S * sizeof(uint64_t));
	L->stash[1] = arena_alloc(a, (size_t)L->S * sizeof(uint64_t));
	L->act_off = arena_alloc(a, nsm * sizeof(int64_t));
	L->ws_off = arena_alloc(a, nsm * sizeof(int64_t));
	L->val_off[0] = arena_alloc(a, nsm * sizeof(int64_t));
	L->val_off[1] = arena_alloc(a, nsm * sizeof(int64_t));
	L->redo_off = arena_alloc(a, nsm * sizeof(int64_t));
	for (size_t i = 0; i < nsm; i++)
		L->act_off[i] = L->ws_off[i] = L->val_off[0][i] = L->val_off[1][i] = L->redo_off[i] = -1;

	/* The rank's layers, stage by stage (stages cover the layers in order,
	 * so the global indices ascend), each with its slice of the stashes. */
	int nl = 0;
	for (int s = 0; s < L->S; s++)
		if (m->stages[s].device == d)
			nl += m->stages[s].last - m->stages[s].first + 1;
	if (!nl) {
		diag_error(L->where, "codegen: D%d holds no stage, but every rank of the job needs at "
		                     "least one layer (the runtime's model state): place a stage on it, or "
		                     "plan for fewer devices", d);
		return -1;
	}
	out->layers = arena_alloc(a, (size_t)(nl ? nl : 1) * sizeof *out->layers);
	out->act_at = arena_alloc(a, (size_t)(nl ? nl : 1) * sizeof *out->act_at);
	out->ws_at = arena_alloc(a, (size_t)(nl ? nl : 1) * sizeof *out->ws_at);
	L->sz = arena_alloc(a, (size_t)(nl ? nl : 1) * sizeof *L->sz);
	uint64_t vb = RUP(value_bytes(m, device)), prof = 0;
	int h = 0;
	for (int s = 0; s < L->S; s++) {
		const ir_stage *st = &m->stages[s];
		L->stage_h0[s] = -1;
		if (st->device != d)
			continue;
		L->stage_h0[s] = h;
		for (int l = st->first; l <= st->last; l++, h++) {
			rt_layer_spec *sp = &out->layers[h];
			sp->index = l;
			sp->desc = cost_rt_desc(m, &m->layers[l]);
			/* A selective stage's layers that leave something out. */
			sp->desc.selective = st->recompute == IR_RECOMP_SELECTIVE &&
			                     m->layers[l].cost.sel_act > 0;
			sp->bucket_start = 0; /* the reductions' first layers: below */
			if (rt_layer_check(&sp->desc) != RT_OK ||
			    (device ? dev_layer_sizes(&sp->desc, m->model.dtype == IR_DTYPE_BF16, &L->sz[h])
			            : rt_layer_sizes(&sp->desc, &L->sz[h])) != RT_OK) {
				diag_error(ir_loc_or(m->layer_loc ? m->layer_loc[l] : (ir_loc){0}, L->where),
				           "codegen: layer L%d (%s) is not one the %s can run "
				           "(docs/layers.md lists what it supports)",
				           l, ir_layer_kind_names[m->layers[l].kind],
				           device ? "device executor (docs/cuda.md)" : "CPU runtime");
				return -1;
			}
			if (check_stashes(m, l, &sp->desc, &L->sz[h], device) < 0)
				return -1;
			out->act_at[h] = (int64_t)L->stash[0][s];
			out->ws_at[h] = (int64_t)L->stash[1][s];
			L->stash[0][s] += RUP(L->sz[h].act);
			L->stash[1][s] += RUP(L->sz[h].wstash);
			uint64_t p = 4 * vb + RUP(L->sz[h].act) + RUP(L->sz[h].wstash);
			prof = p > prof ? p : prof;
		}
	}
	out->nlayers = nl;
	out->prof_bytes = prof;
	L->bk = arena_alloc(a, (size_t)(m->memplan ? m->memplan[d].nbufs + 1 : 1) * sizeof *L->bk);
	if (plan_buffers(L, out))
		return -1;

	/* The op table, with request slots: one per ungrouped receive (its
	 * wait), one per ungrouped send and one per group (waited for at their
	 * group's first wait, else at the end of the step). */
	cg_op *ops = arena_alloc(a, (size_t)(3 * dev->nops + 1) * sizeof *ops);
	int *slot_of = arena_alloc(a, 2 * nsm * sizeof(int)); /* recv of a value -> slot */
	int *next_w = arena_alloc(a, (size_t)L->S * sizeof(int));
	int nslots = 0, n = 0, group = 0, group_slot = -1;
	bool *waited = arena_alloc(a, (size_t)(dev->nops + 1) * sizeof(bool));
	int *coll_slot = arena_alloc(a, (size_t)(dev->nops + 1) * sizeof(int)); /* per op: its slot */
	int *coll_of = arena_alloc(a, (size_t)(dev->nops + 1) * sizeof(int));   /* a wait's collective */
	ir_coll_waits(dev, coll_of);
	for (int i = 0; i < dev->nops; i++)
		coll_slot[i] = -1;
	L->train = train_of(m, device);
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		ir_loc loc = ir_loc_or(m->op_loc && m->op_loc[d] ? m->op_loc[d][i] : (ir_loc){0}, L->where);
		int s = op->stage, mb = op->mb;
		if (op->group != group) {
			if (group) {
				ops[n++] = (cg_op){.kind = CG_GROUP_END, .req = group_slot, .in = -1, .out = -1,
				                   .last = -1, .act = -1, .ws = -1};
			}
			if (op->group) {
				for (int j = 0; j < i; j++)
					if (dev->ops[j].group == op->group)
						ir_bug("codegen: group %d of D%d is not contiguous", op->group, d);
				group_slot = nslots++;
				ops[n++] = (cg_op){.kind = CG_GROUP_BEGIN, .req = -1, .in = -1, .out = -1,
				                   .last = -1, .act = -1, .ws = -1};
			}
			group = op->group;
		}
		cg_op c = {.mb = mb, .req = -1, .in = -1, .out = -1, .last = -1, .act = -1, .ws = -1};
		if (ir_is_dp_op(op)) {
			if (dp_op(L, op, loc, &c, coll_of, coll_slot, &nslots, waited) < 0)
				return -1;
			/* The runtime lays the distributed optimizer's moment shards
			 * out per bucket, and takes only the buckets declared. */
			if (c.kind != CG_WAIT)
				out->layers[c.h0].bucket_start = 1;
		} else if (ir_is_tie_op(op)) {
			/* The tied sum (docs/ir.md, "Tied embeddings"): its post has a
			 * request slot of its own, which its wait names. */
			if (op->comm == IR_COMM_WAIT) {
				int j = coll_of[i];
				if (j < 0 || coll_slot[j] < 0)
					ir_bug("codegen: D%d waits for a tie S%d never posted", d, s);
				c.kind = CG_WAIT;
				c.req = coll_slot[j];
				waited[c.req] = true;
			} else {
				c.kind = CG_TIE;
				c.h0 = c.h1 = L->stage_h0[s] + (op->first - m->stages[s].first);
				if (L->stage_h0[s] < 0)
					ir_bug("codegen: D%d ties stage %d, placed elsewhere", d, s);
				c.bytes = (int64_t)op->bytes;
				c.req = coll_slot[i] = nslots++;
			}
		} else if (op->comm == IR_COMM_NONE) {
			c.kind = op->kind == IR_OP_F ? CG_F : op->kind == IR_OP_B ? CG_B : CG_W;
			c.h0 = L->stage_h0[s];
			c.h1 = c.h0 + m->stages[s].last - m->stages[s].first;
			if (c.h0 < 0)
				ir_bug("codegen: D%d runs stage %d, placed elsewhere", d, s);
			if (op->kind == IR_OP_W) {
				if (mb != next_w[s]) {
					diag_error(loc, "codegen: W S%d m%d runs before W S%d m%d: the runtime adds "
					                "weight gradients in micro-batch order per layer (so that "
					                "every plan gives the same weights), and refuses anything else",
					           s, mb, s, next_w[s]);
					return -1;
				}
				next_w[s]++;
				c.ws = need_off(L->ws_off[AT(s, mb)], "W stash", s, mb);
			} else {
				chain(L, &c, s, mb, op->kind == IR_OP_F);
				if (op->kind == IR_OP_B && redo(L, s))
					ops[n++] = redo_op(L, &c, s, mb);
			}
		} else if (op->comm == IR_COMM_WAIT) {
			int sl = slot_of[2 * AT(s, mb) + (op->kind == IR_OP_B)];
			if (waited[sl])
				continue; /* the group this value came in was waited for already */
			waited[sl] = true;
			c.kind = CG_WAIT;
			c.req = sl;
		} else {
			bool send = op->comm == IR_COMM_SEND;
			uint64_t want = value_bytes(m, device);
			if (op->bytes != want) {
				diag_error(loc, "codegen: %s of %s S%d m%d moves %llu bytes, but the runtime's "
				                "values are %llu bytes (%s; the model's dtype is %s)",
				           send ? "send" : "receive", ir_value_names[op->kind], s, mb,
				           (unsigned long long)op->bytes, (unsigned long long)want,
				           device ? "the model's dtype on a device" : "f32 on CPU ranks",
				           ir_dtype_names[m->model.dtype]);
				return -1;
			}
			c.kind = send ? CG_SEND : CG_RECV;
			c.peer = op->peer;
			c.tstage = s;
			c.tkind = op->kind == IR_OP_F ? RT_MSG_ACT : RT_MSG_GRAD;
			c.bytes = (int64_t)op->bytes;
			c.in = need_off(L->val_off[op->kind == IR_OP_B][AT(s, mb)], send ? "send" : "receive",
			                s, mb);
			if (!op->group)
				c.req = nslots++;
			if (!send)
				slot_of[2 * AT(s, mb) + (op->kind == IR_OP_B)] = op->group ? group_slot : c.req;
		}
		ops[n++] = c;
	}
	if (group)
		ops[n++] = (cg_op){.kind = CG_GROUP_END, .req = group_slot, .in = -1, .out = -1,
		                   .last = -1, .act = -1, .ws = -1};
	for (int s = 0; s < L->S; s++)
		if (L->stage_h0[s] >= 0 && next_w[s] != L->M)
			ir_bug("codegen: stage %d ran W on %d of %d micro-batches", s, next_w[s], L->M);

	/* Slots nobody waits for within the step (sends, groups of sends) come
	 * first, so one rt_waitall at the end of the step completes them. */
	int *renum = arena_alloc(a, (size_t)(nslots + 1) * sizeof(int)), nend = 0, k = 0;
	for (int sl = 0; sl < nslots; sl++)
		if (!waited[sl])
			renum[sl] = nend++;
	k = nend;
	for (int sl = 0; sl < nslots; sl++)
		if (waited[sl])
			renum[sl] = k++;
	for (int i = 0; i < n; i++)
		if (ops[i].req >= 0)
			ops[i].req = renum[ops[i].req];
	out->ops = ops;
	out->nops = n;
	out->nreqs = nslots;
	out->nend = nend;

	out->rank = d;
	out->nranks = cg_nranks(m);
	out->train = L->train;
	out->train.pipe_rank = d;
	/* Text is copied next to the programs (codegen/output.c); token files,
	 * which may be large, are named where they are (absolute paths). */
	const char *data = NULL;
	int32_t fmt = RT_DATA_AUTO;
	if (m->train.data == IR_DATA_TEXT) {
		const char *slash = strrchr(m->train.text_file, '/');
		data = slash ? slash + 1 : m->train.text_file;
		fmt = RT_DATA_TEXT; /* whatever its name */
	} else if (m->train.data == IR_DATA_TOKENS) {
		data = m->train.token_files;
		fmt = m->train.token_format == IR_TOKFMT_U16   ? RT_DATA_U16
		      : m->train.token_format == IR_TOKFMT_U32 ? RT_DATA_U32
		                                               : RT_DATA_AUTO;
	}
	out->prog = (rt_prog_info){
	    .about = about_text(m, predicted_us, d, d, device, n, a, data), .data = data,
	    .data_format = fmt, .steps = m->train.steps,
	    .tokens = m->train.microbatches * m->train.mbs * m->model.seq, /* the whole batch */
	    .predicted_us = predicted_us, .rank = d, .nranks = cg_nranks(m),
	    .peak_flops = m->cluster.flops};
	return 0;
}
