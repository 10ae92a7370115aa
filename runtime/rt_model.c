/* rt_model.c: this rank's layers and the training step.
 *
 * Reads the rank's layer list (global index, descriptor, bucket start),
 * lays out every layer's parameters, gradients and AdamW moments in the
 * arena (with the distributed optimizer only the moments of the layer's
 * part of its bucket's shard: rt__dp_shard), initialises
 * the parameters from (seed, global layer index), loads the data
 * (rt_data.c), and runs the step through the rank's executor (rt_exec.h):
 * it checks the order of the calls, times and traces them, keeps the
 * head's losses per micro-batch and sums them in micro-batch order, and
 * holds W to micro-batch order so that the accumulated gradients are the
 * same float sums on every plan.  rt_step_end checks the loss and has the
 * executor apply the optimizer.  docs/runtime.md has the formulas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_exec.h"
#include "rt_internal.h"

#define MAX_MICROBATCHES (1 << 18) /* the message tag's field */
#define MAX_DP (1 << 20)

static size_t rup(size_t n)
{
	return (n + RT_ALIGN - 1) & ~(size_t)(RT_ALIGN - 1);
}

/* The shape hash of a layer: its kind and its tensor table (names, dims),
 * i.e. everything that decides what its parameter array means. */
static int shape_hash(const rt_layer_desc *d, uint64_t *out)
{
	int n, rc;
	uint64_t h = RT_FNV_INIT;
	uint32_t k = (uint32_t)d->kind;
	if ((rc = rt_layer_ntensors(d, &n)))
		return rc;
	h = rt__fnv(h, &k, sizeof k);
	for (int i = 0; i < n; i++) {
		rt_tensor_info t;
		if ((rc = rt_layer_tensor(d, i, &t)))
			return rc;
		h = rt__fnv(h, t.name, strlen(t.name) + 1);
		h = rt__fnv(h, &t.offset, sizeof t.offset);
		h = rt__fnv(h, &t.ndim, sizeof t.ndim);
		h = rt__fnv(h, t.dim, (size_t)t.ndim * sizeof t.dim[0]);
	}
	*out = h;
	return RT_OK;
}

/* One optimizer setting against its range, named in the message. */
static int check_setting(rt_ctx *ctx, const char *name, float v, bool positive, bool below_one)
{
	if (isfinite(v) && (positive ? v > 0 : v >= 0) && (!below_one || v < 1))
		return RT_OK;
	return rt__fail(ctx, RT_EARG, "model: optimizer setting %s is %g; it must be %s", name,
	                (double)v,
	                below_one ? "at least 0 and below 1"
	                : positive ? "finite and greater than 0" : "finite and at least 0");
}

static int check_train(rt_ctx *ctx, const rt_train *t)
{
	int rc;
	if (!t)
		return rt__fail(ctx, RT_EARG, "model: no training configuration");
	if (t->nlayers < 2 || t->seq < 1 || t->mbs < 1 || t->vocab < 1 || t->seq > (1 << 24) ||
	    t->mbs > (1 << 24) || t->vocab > (1 << 24))
		return rt__fail(ctx, RT_EARG,
		                "model: bad shape: nlayers %lld, seq %lld, mbs %lld, vocab %lld",
		                (long long)t->nlayers, (long long)t->seq, (long long)t->mbs,
		                (long long)t->vocab);
	if (t->microbatches < 1 || t->microbatches > MAX_MICROBATCHES)
		return rt__fail(ctx, RT_EARG, "model: %lld micro-batches per step (1 .. %d)",
		                (long long)t->microbatches, MAX_MICROBATCHES);
	if (t->optimizer != RT_ADAMW && t->optimizer != RT_SGD)
		return rt__fail(ctx, RT_EARG, "model: optimizer %d is neither RT_ADAMW nor RT_SGD",
		                (int)t->optimizer);
	if ((rc = check_setting(ctx, "lr", t->lr, true, false)) ||
	    (rc = check_setting(ctx, "weight_decay", t->weight_decay, false, false)) ||
	    (rc = check_setting(ctx, "beta1", t->beta1, false, true)) ||
	    (rc = check_setting(ctx, "beta2", t->beta2, false, true)) ||
	    (rc = check_setting(ctx, "eps", t->eps, true, false)))
		return rc;
	/* The decay factor as rt__adamw_consts forms it. */
	if (!isfinite((float)(1.0 - (double)t->lr * (double)t->weight_decay)))
		return rt__fail(ctx, RT_EARG,
		                "model: optimizer settings lr %g x weight_decay %g: the decay factor "
		                "1 - lr x weight_decay is not a finite float",
		                (double)t->lr, (double)t->weight_decay);
	if ((rc = rt__sched_check(ctx, t)))
		return rc;
	if (t->dp < 0 || t->dp > MAX_DP)
		return rt__fail(ctx, RT_EARG, "model: dp %lld replicas (0 or 1: one; at most %d)",
		                (long long)t->dp, MAX_DP);
	if (t->replica < 0 || t->replica >= (t->dp > 1 ? t->dp : 1))
		return rt__fail(ctx, RT_EARG, "model: replica %lld of dp %lld: it must be in 0..%lld",
		                (long long)t->replica, (long long)t->dp,
		                (long long)(t->dp > 1 ? t->dp : 1) - 1);
	if (t->pipe_rank < 0 || t->pipe_rank >= (1 << 30))
		return rt__fail(ctx, RT_EARG, "model: pipe_rank %lld: it must be in 0..2^30-1",
		                (long long)t->pipe_rank);
	if (t->dp_flags & ~(RT_DP_DISTOPT | RT_DP_EXACT))
		return rt__fail(ctx, RT_EARG, "model: dp_flags 0x%x: unknown bits (RT_DP_DISTOPT, "
		                "RT_DP_EXACT are 0x%x)", t->dp_flags, RT_DP_DISTOPT | RT_DP_EXACT);
	if ((int64_t)(t->dp > 1 ? t->dp : 1) * t->microbatches > MAX_MICROBATCHES)
		return rt__fail(ctx, RT_EARG, "model: dp %lld x %lld micro-batches per replica: more than "
		                "%d per step", (long long)t->dp, (long long)t->microbatches,
		                MAX_MICROBATCHES);
	if (t->text_file && rt__data_format_of(ctx, t->text_file) == RT_DATA_TEXT && t->vocab < 256)
		return rt__fail(ctx, RT_EARG,
		                "model: text file %s: text data (one token per byte) needs a vocabulary of "
		                "at least 256, the model's is %lld", t->text_file, (long long)t->vocab);
	return RT_OK;
}

/* The bucket that starts at layer i (rt_layer_spec.bucket_start): its last
 * layer *i1 and its parameters *np.  A layer whose sizes fail counts 0;
 * layout refuses it when it gets there. */
static void bucket_of(int n, const rt_layer_spec *L, int i, int *i1, int64_t *np)
{
	*np = 0;
	for (*i1 = i; *i1 < n; ++*i1) {
		rt_sizes sz;
		if (*i1 > i && L[*i1].bucket_start)
			break;
		if (rt_layer_sizes(&L[*i1].desc, &sz) == RT_OK)
			*np += sz.params;
	}
	--*i1;
}

/* Validates the layer list and walks the arena layout of the model: with
 * ctx->arena set up and `take` true it allocates; either way *bytes is
 * the total.  One walk serves rt_model_bytes and rt_model_init. */
static int layout(rt_ctx *ctx, bool take, const rt_train *t, int n, const rt_layer_spec *L,
                  size_t *bytes)
{
	int rc;
	size_t total = 0, scratch = 0;
	void *p;
	if ((rc = check_train(ctx, t)))
		return rc;
	if (n < 1 || !L)
		return rt__fail(ctx, RT_EARG, "model: no layers on this rank");

#define TAKE(dst, nbytes)                                                  \
	do {                                                               \
		size_t nb_ = (nbytes);                                     \
		total += rup(nb_);                                         \
		if (take) {                                                \
			if ((rc = rt_arena_alloc(ctx, nb_, &p)))           \
				return rc;                                 \
			dst = p;                                           \
		}                                                          \
	} while (0)

	rt_lay *lay = NULL;
	bool sharded = rt__dp_sharded(t);
	int b0 = 0, b1 = -1;
	int64_t boff = 0, slo = 0, shi = 0; /* the layer's offset in its bucket; the shard */
	TAKE(lay, (size_t)n * sizeof *lay);
	for (int i = 0; i < n; i++) {
		const rt_layer_desc *d = &L[i].desc;
		int64_t gi = L[i].index;
		rt_sizes sz;
		if (L[i].bucket_start != 0 && L[i].bucket_start != 1)
			return rt__fail(ctx, RT_EARG, "model: layer %lld: bucket_start %d (0 or 1)",
			                (long long)gi, (int)L[i].bucket_start);
		if (i > b1) {
			int64_t np;
			bucket_of(n, L, i, &b1, &np);
			b0 = i;
			boff = 0;
			rt__dp_shard(t, np, &slo, &shi);
		}
		if (gi < 0 || gi >= t->nlayers || (i && gi <= L[i - 1].index))
			return rt__fail(ctx, RT_EARG,
			                "model: layer %lld: global indices must ascend within 0..%lld",
			                (long long)gi, (long long)t->nlayers - 1);
		if (d->seq != t->seq || d->mbs != t->mbs ||
		    ((d->kind == RT_EMBEDDING || d->kind == RT_HEAD) && d->vocab != t->vocab))
			return rt__fail(ctx, RT_EARG,
			                "model: layer %lld: seq %lld, mbs %lld, vocab %lld differ from the "
			                "training shape (%lld, %lld, %lld)",
			                (long long)gi, (long long)d->seq, (long long)d->mbs,
			                (long long)d->vocab, (long long)t->seq, (long long)t->mbs,
			                (long long)t->vocab);
		if ((d->kind == RT_EMBEDDING) != (gi == 0) || (d->kind == RT_HEAD) != (gi == t->nlayers - 1))
			return rt__fail(ctx, RT_EARG,
			                "model: layer %lld is %s: the embedding is layer 0 and the head "
			                "the last layer, %lld", (long long)gi, rt__kind_name(d->kind),
			                (long long)t->nlayers - 1);
		if ((rc = rt_layer_sizes(d, &sz)))
			return rt__fail(ctx, rc, "model: layer %lld (%s): %s", (long long)gi,
			                rt__kind_name(d->kind), rt_strerror(rc));
		size_t pb = (size_t)sz.params * sizeof(float);
		/* The moments held: all, or the layer's part of its bucket's shard. */
		int64_t mlo = 0, mhi = sz.params;
		if (sharded) {
			mlo = (slo > boff ? slo : boff) - boff;
			mhi = (shi < boff + sz.params ? shi : boff + sz.params) - boff;
			if (mhi <= mlo)
				mlo = mhi = 0;
		}
		boff += sz.params;
		size_t mb = (size_t)(mhi - mlo) * sizeof(float);
		if (take) {
			lay[i] = (rt_lay){.index = gi, .desc = *d, .sz = sz, .mlo = mlo, .mhi = mhi,
			                  .b0 = b0, .b1 = b1};
			if ((rc = shape_hash(d, &lay[i].shape_hash)))
				return rt__fail(ctx, rc, "model: layer %lld: %s", (long long)gi,
				                rt_strerror(rc));
		}
		TAKE(lay[i].p, pb);
		TAKE(lay[i].g, pb);
		TAKE(lay[i].m, mb);
		TAKE(lay[i].v, mb);
		if (t->dp_flags & RT_DP_EXACT)
			TAKE(lay[i].acc, (size_t)sz.params * RT_EXACT_DIGITS * sizeof(int64_t));
		if ((size_t)sz.scratch > scratch)
			scratch = (size_t)sz.scratch;
	}
	void *s = NULL;
	int32_t *tok = NULL, *ids = NULL;
	double *loss = NULL;
	int64_t *count = NULL;
	TAKE(s, scratch ? scratch : 1);
	TAKE(tok, (size_t)(t->mbs * (t->seq + 1)) * sizeof(int32_t));
	TAKE(ids, (size_t)(t->mbs * t->seq) * sizeof(int32_t));
	TAKE(loss, (size_t)t->microbatches * sizeof(double));
	TAKE(count, (size_t)t->microbatches * sizeof(int64_t));
#undef TAKE
	if (take) {
		ctx->lay = lay;
		ctx->nlay = n;
		ctx->scratch = s;
		ctx->tokbuf = tok;
		ctx->idbuf = ids;
		ctx->mb_loss = loss;
		ctx->mb_count = count;
	}
	*bytes = total;
	return RT_OK;
}

int rt_model_bytes(rt_ctx *ctx, const rt_train *t, int n, const rt_layer_spec *layers,
                   size_t *bytes)
{
	if (!bytes)
		return rt__fail(ctx, RT_EARG, "rt_model_bytes: no result pointer");
	if (!t)
		return rt__fail(ctx, RT_EARG, "model: no training configuration");
	rt_train tt = rt__optim_defaults(t);
	return layout(ctx, false, &tt, n, layers, bytes);
}

int rt_model_init(rt_ctx *ctx, const rt_train *t, int n, const rt_layer_spec *layers)
{
	int rc;
	size_t bytes, mark;
	if (!ctx)
		return RT_EARG;
	if (ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_model_init: the model is already set up");
	if (!ctx->arena)
		return rt__fail(ctx, RT_ESTATE, "rt_model_init: rt_arena_init has not been called");
	if (!t)
		return rt__fail(ctx, RT_EARG, "model: no training configuration");
	rt_train tt = rt__optim_defaults(t);
	if ((rc = layout(ctx, false, &tt, n, layers, &bytes)))
		return rc;
	if (tt.dp < 1)
		tt.dp = 1;
	if (bytes > ctx->arena_size - ctx->arena_top)
		return rt__fail(ctx, RT_ENOMEM,
		                "arena: out of memory: the model's %d layers need %zu bytes, %zu of %zu "
		                "free", n, bytes, ctx->arena_size - ctx->arena_top, ctx->arena_size);
	mark = rt_arena_mark(ctx);
	if ((rc = layout(ctx, true, &tt, n, layers, &bytes)))
		goto out_arena;
	tt.text_file = NULL;
	ctx->train = tt;
	if ((rc = rt__data_load(ctx, t->text_file)))
		goto out_arena;
	ctx->tiec = MPI_COMM_NULL;
	if ((rc = rt__dp_init(ctx)) || (rc = rt__tie_init(ctx)))
		goto out_dp;
	ctx->head = -1;
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		size_t pb = (size_t)l->sz.params * sizeof(float);
		if ((rc = rt_layer_init(&l->desc, ctx->train.seed, l->index, l->p))) {
			rc = rt__fail(ctx, rc, "model: init of layer %lld: %s", (long long)l->index,
			              rt_strerror(rc));
			goto out_dp;
		}
		memset(l->g, 0, pb);
		memset(l->m, 0, rt__mom_bytes(l));
		memset(l->v, 0, rt__mom_bytes(l));
		if (l->acc)
			memset(l->acc, 0, (size_t)l->sz.params * RT_EXACT_DIGITS * sizeof(int64_t));
		if (l->desc.kind == RT_HEAD)
			ctx->head = i;
	}
	ctx->step = ctx->data_pos = 0;
	ctx->in_step = false;
	ctx->grad_norm = NAN;
	if ((rc = ctx->exec->model_init(ctx)))
		goto out_dp;
	ctx->have_model = true;
	return RT_OK;

out_dp:
	rt__tie_free(ctx);
	rt__dp_free(ctx);
	rt__data_free(ctx);
out_arena:
	rt_arena_release(ctx, mark);
	ctx->lay = NULL;
	ctx->nlay = 0;
	return rc;
}

static int need_model(rt_ctx *ctx, const char *fn)
{
	if (!ctx)
		return RT_EARG;
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "%s: rt_model_init has not been called", fn);
	return RT_OK;
}

int rt_layer_get(rt_ctx *ctx, int h, rt_layer_info *out)
{
	int rc;
	if ((rc = need_model(ctx, "rt_layer_get")))
		return rc;
	if (h < 0 || h >= ctx->nlay || !out)
		return rt__fail(ctx, RT_EARG, "rt_layer_get: no layer %d on this rank (%d layers)", h,
		                ctx->nlay);
	if ((rc = ctx->exec->pull(ctx)))
		return rc;
	out->index = ctx->lay[h].index;
	out->kind = ctx->lay[h].desc.kind;
	out->sizes = ctx->lay[h].sz;
	out->params = ctx->lay[h].p;
	return RT_OK;
}

int64_t rt_step_count(const rt_ctx *ctx)
{
	return ctx ? ctx->step : 0;
}

int64_t rt_data_position(const rt_ctx *ctx)
{
	return ctx ? ctx->data_pos : 0;
}

/* ---- the step ------------------------------------------------------------- */

static int check_op(rt_ctx *ctx, const char *fn, int h, int64_t mb)
{
	int rc;
	if ((rc = need_model(ctx, fn)))
		return rc;
	if (!ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "%s: outside a step (call rt_step_begin)", fn);
	if (h < 0 || h >= ctx->nlay)
		return rt__fail(ctx, RT_EARG, "%s: no layer %d on this rank (%d layers)", fn, h, ctx->nlay);
	if (mb < 0 || mb >= ctx->train.microbatches)
		return rt__fail(ctx, RT_EARG, "%s: layer %lld: micro-batch %lld outside 0..%lld", fn,
		                (long long)ctx->lay[h].index, (long long)mb,
		                (long long)ctx->train.microbatches - 1);
	return RT_OK;
}

/* A kernel of the executor failed: its message (ctx->err) with the step,
 * the phase, the layer and the micro-batch. */
static int kernel_fail(rt_ctx *ctx, int rc, const char *phase, const rt_lay *l, int64_t mb)
{
	char why[sizeof ctx->err];
	snprintf(why, sizeof why, "%s", ctx->err);
	return rt__fail(ctx, rc, "step %lld: %s of layer %lld (%s), micro-batch %lld%s%s: %s",
	                rt__step_no(ctx), phase, (long long)l->index, rt__kind_name(l->desc.kind),
	                (long long)mb, *ctx->exec->on ? "," : "", ctx->exec->on, why);
}

int rt_step_begin(rt_ctx *ctx)
{
	int rc;
	if ((rc = need_model(ctx, "rt_step_begin")))
		return rc;
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_step_begin: step %lld has not ended",
		                rt__step_no(ctx));
	if (ctx->step >= RT_MAX_COUNT ||
	    ctx->data_pos > RT_MAX_COUNT - ctx->train.dp * ctx->train.microbatches)
		return rt__fail(ctx, RT_EARG,
		                "rt_step_begin: step %lld: the step count (or the data position, %lld) "
		                "is at this runtime's limit (2^62)", rt__step_no(ctx),
		                (long long)ctx->data_pos);
	for (int i = 0; i < ctx->nlay; i++) {
		ctx->lay[i].next_w = 0;
		ctx->lay[i].red = RT_RED_NONE;
		ctx->lay[i].updated = false;
		ctx->lay[i].pending = false;
	}
	ctx->tie_state = RT_TIE_NONE;
	rt__sched_begin(ctx);
	for (int64_t m = 0; m < ctx->train.microbatches; m++) {
		ctx->mb_loss[m] = 0;
		ctx->mb_count[m] = -1;
	}
	ctx->in_step = true;
	return RT_OK;
}

/* F of a layer, as the program's F (phase "F") or as a recomputing B's F
 * again ("R"): the same call, so the same bits. */
static int run_f(rt_ctx *ctx, const char *fn, const char *phase, int h, int64_t mb,
                 const float *x, float *y, void *act)
{
	int rc;
	if ((rc = check_op(ctx, fn, h, mb)))
		return rc;
	rt_lay *l = &ctx->lay[h];
	rt__progress(ctx);
	void *m0, *m1;
	int64_t t0 = rt__now_ns();
	rt__trace_mark(ctx, &m0);
	rc = ctx->exec->f(ctx, h, mb, x, y, act);
	rt__trace_mark(ctx, &m1);
	rt__trace_marked(ctx, phase, t0, m0, m1, l->index, mb);
	if (rc)
		return kernel_fail(ctx, rc, phase, l, mb);
	return RT_OK;
}

int rt_run_f(rt_ctx *ctx, int h, int64_t mb, const float *x, float *y, void *act)
{
	return run_f(ctx, "rt_run_f", "F", h, mb, x, y, act);
}

int rt_run_r(rt_ctx *ctx, int h, int64_t mb, const float *x, float *y, void *act)
{
	return run_f(ctx, "rt_run_r", "R", h, mb, x, y, act);
}

int rt_run_b(rt_ctx *ctx, int h, int64_t mb, const float *dy, float *dx, const void *act,
             void *wstash)
{
	int rc;
	if ((rc = check_op(ctx, "rt_run_b", h, mb)))
		return rc;
	rt_lay *l = &ctx->lay[h];
	const rt_train *t = &ctx->train;
	/* loss = (sum of the step's per-token cross-entropies) / (its tokens):
	 * every position has a target, so the count is known before F.  The
	 * step is every replica's micro-batches. */
	float dscale = (float)(1.0 / ((double)t->dp * (double)t->microbatches * (double)t->mbs *
	                              (double)t->seq));
	rt__progress(ctx);
	void *m0, *m1;
	int64_t t0 = rt__now_ns();
	rt__trace_mark(ctx, &m0);
	rc = ctx->exec->b(ctx, h, dy, dscale, dx, act, wstash);
	rt__trace_mark(ctx, &m1);
	rt__trace_marked(ctx, "B", t0, m0, m1, l->index, mb);
	if (rc)
		return kernel_fail(ctx, rc, "B", l, mb);
	return RT_OK;
}

int rt_run_w(rt_ctx *ctx, int h, int64_t mb, const void *wstash)
{
	int rc;
	if ((rc = check_op(ctx, "rt_run_w", h, mb)))
		return rc;
	rt_lay *l = &ctx->lay[h];
	if (mb != l->next_w)
		return rt__fail(ctx, RT_ESTATE,
		                "step %lld: W of layer %lld on micro-batch %lld, but micro-batch %lld is "
		                "next: W runs in micro-batch order (the gradient sum depends on it)",
		                rt__step_no(ctx), (long long)l->index, (long long)mb,
		                (long long)l->next_w);
	if (l->red != RT_RED_NONE || l->updated)
		return rt__fail(ctx, RT_ESTATE, "step %lld: W of layer %lld on micro-batch %lld after its "
		                "reduction or update", rt__step_no(ctx), (long long)l->index,
		                (long long)mb);
	rt__progress(ctx);
	void *m0, *m1;
	int64_t t0 = rt__now_ns();
	rt__trace_mark(ctx, &m0);
	/* Exact mode: this micro-batch's gradient alone, then added exactly. */
	if (l->acc)
		rc = ctx->exec->zero_grad(ctx, h);
	if (!rc)
		rc = ctx->exec->w(ctx, h, wstash);
	rt__trace_mark(ctx, &m1);
	if (rc) {
		rt__trace_marked(ctx, "W", t0, m0, m1, l->index, mb);
		return kernel_fail(ctx, rc, "W", l, mb);
	}
	if (l->acc) {
		if ((rc = ctx->exec->grad_sync(ctx, h, 0, l->sz.params, true)))
			return rc;
		int64_t bad = rt__exact_add(l->acc, l->g, l->sz.params);
		if (bad >= 0)
			return rt__fail(ctx, RT_ELOSS,
			                "step %lld: W of layer %lld (%s), micro-batch %lld: the gradient of "
			                "parameter %lld is %s (the exact sum, RT_DP_EXACT, takes finite values)",
			                rt__step_no(ctx), (long long)l->index, rt__kind_name(l->desc.kind),
			                (long long)mb, (long long)bad, isnan(l->g[bad]) ? "NaN" : "infinite");
	}
	l->next_w++;
	rt__trace_marked(ctx, "W", t0, m0, m1, l->index, mb);
	return RT_OK;
}

int rt_step_end(rt_ctx *ctx, double *loss_out, int *have_loss)
{
	int rc;
	if ((rc = need_model(ctx, "rt_step_end")))
		return rc;
	if (!ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_step_end: no step is running");
	const rt_train *t = &ctx->train;
	if (have_loss)
		*have_loss = 0;
	for (int i = 0; i < ctx->nlay; i++)
		if (ctx->lay[i].next_w != t->microbatches)
			return rt__fail(ctx, RT_ESTATE,
			                "step %lld: layer %lld ran W on %lld of %lld micro-batches",
			                rt__step_no(ctx), (long long)ctx->lay[i].index,
			                (long long)ctx->lay[i].next_w, (long long)t->microbatches);
	/* With replicas every layer was reduced and updated during the step. */
	if (t->dp > 1 && (rc = rt__dp_check_updated(ctx)))
		return rc;
	if ((rc = ctx->exec->collect(ctx)))
		return rc;
	rt__trace_settle(ctx); /* collect waited for the step's work */
	if (ctx->head >= 0) {
		double sum = 0;
		int64_t count = 0;
		int have = 1;
		for (int64_t m = 0; m < t->microbatches; m++) {
			if (ctx->mb_count[m] < 0)
				return rt__fail(ctx, RT_ESTATE, "step %lld: the head ran no F on micro-batch %lld",
				                rt__step_no(ctx), (long long)m);
			sum += ctx->mb_loss[m];
			count += ctx->mb_count[m];
		}
		/* With replicas, replica 0's head sums every replica's in global
		 * micro-batch order: the same sum as one replica's. */
		if (t->dp > 1 && (rc = rt__dp_loss(ctx, &sum, &count, &have)))
			return rc;
		double loss = count ? sum / (double)count : 0;
		if (have && !isfinite(loss))
			return rt__fail(ctx, RT_ELOSS, "step %lld: loss is %s", rt__step_no(ctx),
			                isnan(loss) ? "NaN" : "infinite");
		if (have && loss_out)
			*loss_out = loss;
		if (have_loss)
			*have_loss = have;
	}

	/* The layers rt_update has not updated (dp <= 1): the tied sum, their
	 * exact sums rounded, then the executor's optimizer step. */
	for (int i = 0; i < ctx->nlay; i++)
		if (!ctx->lay[i].updated && (rc = rt__tie_ready(ctx, i, "rt_step_end")))
			return rc;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		if (l->red == RT_RED_POSTED && !l->updated)
			return rt__fail(ctx, RT_ESTATE, "step %lld: layer %lld: its reduction was posted "
			                "and not waited for (rt_wait)", rt__step_no(ctx),
			                (long long)l->index);
		if (l->acc && !l->updated && l->red == RT_RED_NONE && (rc = rt__dp_round(ctx, i)))
			return rc;
	}
	/* With clipping: the norm (unless the first all-gather took it), the
	 * scale, the updates rt_update left. */
	if ((rc = rt__clip(ctx)))
		return rc;
	int64_t t0 = rt__now_ns();
	if ((rc = ctx->exec->optimize(ctx)))
		return rc;
	rt__trace(ctx, "optim", t0, -1, -1, -1, 0);
	ctx->step++;
	ctx->data_pos += t->dp * t->microbatches;
	ctx->in_step = false;
	return RT_OK;
}

/* ---- the model hash --------------------------------------------------------- */

/* (global index, replica, hash, rank): by index, then replica. */
enum { H_INDEX, H_REPLICA, H_HASH, H_RANK, H_N };

static int cmp_row(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	if (x[H_INDEX] != y[H_INDEX])
		return x[H_INDEX] < y[H_INDEX] ? -1 : 1;
	return x[H_REPLICA] < y[H_REPLICA] ? -1 : x[H_REPLICA] > y[H_REPLICA];
}

/* A layer's row of the hash: its parameters and its whole moments. */
static int hash_row(rt_ctx *ctx, int i, const float *m, const float *v, void *arg)
{
	const rt_lay *l = &ctx->lay[i];
	size_t pb = (size_t)l->sz.params * sizeof(float);
	uint64_t *row = (uint64_t *)arg + H_N * i;
	uint64_t h = rt__fnv(RT_FNV_INIT, l->p, pb);
	h = rt__fnv(h, m, pb);
	row[H_INDEX] = (uint64_t)l->index;
	row[H_REPLICA] = (uint64_t)ctx->train.replica;
	row[H_HASH] = rt__fnv(h, v, pb);
	row[H_RANK] = (uint64_t)ctx->rank;
	return RT_OK;
}

int rt_model_hash(rt_ctx *ctx, uint64_t *out)
{
	int rc;
	MPI_Request req;
	if ((rc = need_model(ctx, "rt_model_hash")))
		return rc;
	if (!out)
		return RT_EARG;
	if ((rc = rt__comm_drain(ctx)) || (rc = ctx->exec->pull(ctx)))
		return rc;
	int *counts = calloc((size_t)ctx->world, sizeof *counts);
	int *displs = calloc((size_t)ctx->world, sizeof *displs);
	uint64_t *mine = malloc((size_t)ctx->nlay * H_N * sizeof *mine);
	uint64_t *all = NULL;
	int mycount = H_N * ctx->nlay, total = 0;
	if (!counts || !displs || !mine) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_model_hash: out of memory");
		goto out;
	}
	if ((rc = rt__dp_moments(ctx, hash_row, mine)))
		goto out;
	if ((rc = rt__coll(ctx, MPI_Iallgather(&mycount, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD,
	                                       &req),
	                   &req, "rt_model_hash")))
		goto out;
	for (int r = 0; r < ctx->world; r++) {
		displs[r] = total;
		total += counts[r];
	}
	if (!(all = malloc((size_t)(total ? total : 1) * sizeof *all))) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_model_hash: out of memory");
		goto out;
	}
	if ((rc = rt__coll(ctx, MPI_Iallgatherv(mine, mycount, MPI_UINT64_T, all, counts, displs,
	                                        MPI_UINT64_T, MPI_COMM_WORLD, &req),
	                   &req, "rt_model_hash")))
		goto out;
	int rows = total / H_N;
	qsort(all, (size_t)rows, H_N * sizeof *all, cmp_row);
	/* Each layer once: its replicas must hold the same bits. */
	uint64_t h = RT_FNV_INIT;
	for (int i = 0; i < rows; i++) {
		const uint64_t *x = all + H_N * i, *p = x - H_N;
		if (i && x[H_INDEX] == p[H_INDEX]) {
			if (x[H_REPLICA] == p[H_REPLICA]) {
				rc = rt__fail(ctx, RT_EARG, "rt_model_hash: layer %llu is on two ranks (%llu and "
				              "%llu) of replica %llu", (unsigned long long)x[H_INDEX],
				              (unsigned long long)p[H_RANK], (unsigned long long)x[H_RANK],
				              (unsigned long long)x[H_REPLICA]);
				goto out;
			}
			if (x[H_HASH] != p[H_HASH]) {
				rc = rt__fail(ctx, RT_ESTATE,
				              "rt_model_hash: layer %llu differs between replica %llu (rank %llu, "
				              "hash 0x%016llx) and replica %llu (rank %llu, hash 0x%016llx): the "
				              "replicas' parameters or AdamW moments have diverged",
				              (unsigned long long)x[H_INDEX], (unsigned long long)p[H_REPLICA],
				              (unsigned long long)p[H_RANK], (unsigned long long)p[H_HASH],
				              (unsigned long long)x[H_REPLICA], (unsigned long long)x[H_RANK],
				              (unsigned long long)x[H_HASH]);
				goto out;
			}
			continue;
		}
		uint64_t pair[2] = {x[H_INDEX], x[H_HASH]};
		h = rt__fnv(h, pair, sizeof pair);
	}
	*out = h;
	rc = RT_OK;
out:
	free(all);
	free(mine);
	free(displs);
	free(counts);
	return rc;
}
