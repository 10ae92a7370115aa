/* rt_sched.c: the learning-rate schedule and gradient clipping by the
 * global norm (docs/runtime.md, "The schedule and clipping").
 *
 * The lr of step t is a pure function of t and the settings (rt_lr_at),
 * so a resumed run, whose step count comes from the checkpoint, continues
 * the schedule where it stopped.  The norm is summed exactly (rt_exact.c:
 * each square rounded to f32, the squares added as fixed-point digits,
 * the ranks' digits added by MPI_SUM on int64), so it has the same bits on
 * every rank and for every plan: any cut into stages, any placement, any
 * number of replicas in exact mode, the distributed optimizer on or off.
 * Each parameter counts once: a rank's own layers without replicas; with
 * the distributed optimizer each replica's shard; with whole all-reduced
 * gradients replica 0's copy; a tied table the embedding's copy.  The sum
 * reads the host's gradient array, which a device rank's executor fills
 * from the device first (grad_sync); the scale is the executor's
 * (scale_grad: on the device, the same f32 product). */
#include <math.h>
#include <string.h>

#include "rt_exec.h"
#include "rt_internal.h"

float rt_lr_at(const rt_train *t, int64_t step)
{
	double lr = t->lr, lo = t->min_lr;
	if (step < 0)
		step = 0;
	if (t->warmup > 0 && step < t->warmup)
		return (float)(lr * (double)(step + 1) / (double)t->warmup);
	if (t->decay == RT_DECAY_CONSTANT)
		return t->lr;
	int64_t w = t->warmup > 0 ? t->warmup : 0;
	if (step >= t->decay_steps || t->decay_steps <= w)
		return t->min_lr;
	double p = (double)(step - w) / (double)(t->decay_steps - w); /* in [0, 1) */
	if (t->decay == RT_DECAY_COSINE)
		return (float)(lo + (lr - lo) * 0.5 * (1.0 + cos(M_PI * p)));
	return (float)(lo + (lr - lo) * (1.0 - p));
}

double rt_grad_norm(const rt_ctx *ctx)
{
	return ctx ? ctx->grad_norm : NAN;
}

int rt__sched_check(rt_ctx *ctx, const rt_train *t)
{
	if (t->warmup < 0 || t->decay_steps < 0)
		return rt__fail(ctx, RT_EARG, "model: %s is %lld; it must be 0 or more",
		                t->warmup < 0 ? "warmup" : "decay_steps",
		                (long long)(t->warmup < 0 ? t->warmup : t->decay_steps));
	if ((unsigned)t->decay > RT_DECAY_LINEAR)
		return rt__fail(ctx, RT_EARG, "model: decay %d is none of constant, cosine, linear",
		                (int)t->decay);
	if (!isfinite(t->min_lr) || t->min_lr < 0 || t->min_lr > t->lr)
		return rt__fail(ctx, RT_EARG, "model: min_lr is %g; it must be finite, 0 or more and "
		                "at most lr (%g)", (double)t->min_lr, (double)t->lr);
	if (!isfinite(t->clip) || t->clip < 0)
		return rt__fail(ctx, RT_EARG, "model: clip is %g; it must be finite and 0 (no "
		                "clipping) or more", (double)t->clip);
	return RT_OK;
}

void rt__sched_begin(rt_ctx *ctx)
{
	ctx->opt = ctx->train;
	ctx->opt.lr = rt_lr_at(&ctx->train, ctx->step);
	ctx->clipped = false;
}

/* The elements of local layer h that this step updates on this rank: what
 * rt_update left pending, else the whole layer. */
static void update_range(const rt_lay *l, int64_t *a, int64_t *b)
{
	*a = l->pending ? l->ua : 0;
	*b = l->pending ? l->ub : l->sz.params;
}

int rt__clip(rt_ctx *ctx)
{
	const rt_train *t = &ctx->train;
	int64_t acc[RT_EXACT_DIGITS] = {0}, a, b;
	MPI_Request req;
	int rc;
	if (t->clip <= 0 || ctx->clipped)
		return RT_OK;
	bool sharded = t->dp > 1 && (t->dp_flags & RT_DP_DISTOPT);
	bool counts = sharded || t->replica == 0;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		if (t->dp > 1 && !l->updated)
			return rt__fail(ctx, RT_ESTATE, "step %lld: clipping: layer %lld is not updated "
			                "(rt_update) before the step's first all-gather: the norm needs "
			                "every gradient of the step", rt__step_no(ctx), (long long)l->index);
		update_range(l, &a, &b);
		/* A device's gradients: to the host's array (nothing on the CPU). */
		if (counts && b > a && (rc = ctx->exec->grad_sync(ctx, i, 0, 0, true)))
			return rc;
		/* A tied head's table counts in the embedding's copy. */
		int64_t off, n, cut[2][2] = {{a, b}, {b, b}};
		if (rt__tie_counts(ctx, i, &off, &n)) {
			cut[0][1] = off < a ? a : off < b ? off : b;
			cut[1][0] = off + n < a ? a : off + n < b ? off + n : b;
		}
		for (int k = 0; counts && k < 2; k++) {
			int64_t lo = cut[k][0], hi = cut[k][1];
			int64_t bad = hi > lo ? rt__exact_sumsq(acc, l->g + lo, hi - lo) : -1;
			if (bad >= 0)
				return rt__fail(ctx, RT_ELOSS, "step %lld: layer %lld: element %lld of the "
				                "gradient is %g: its square is not finite (the gradient norm)",
				                rt__step_no(ctx), (long long)l->index, (long long)(lo + bad),
				                (double)l->g[lo + bad]);
		}
	}
	int64_t t0 = rt__now_ns();
	if ((rc = rt__coll(ctx, MPI_Iallreduce(MPI_IN_PLACE, acc, RT_EXACT_DIGITS, MPI_INT64_T,
	                                       MPI_SUM, MPI_COMM_WORLD, &req),
	                   &req, "clipping: the gradient norm")))
		return rc;
	double norm = sqrt(rt__exact_value(acc));
	float scale = norm > (double)t->clip ? (float)((double)t->clip / norm) : 1.0f;
	ctx->grad_norm = norm;
	for (int i = 0; scale < 1.0f && i < ctx->nlay; i++) {
		update_range(&ctx->lay[i], &a, &b);
		if ((rc = ctx->exec->scale_grad(ctx, i, a, b, scale)))
			return rc;
	}
	rt__trace(ctx, "clip", t0, -1, -1, -1, 0);
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		if (!l->pending)
			continue;
		l->pending = false;
		if ((rc = ctx->exec->update(ctx, i, l->ua, l->ub)))
			return rc;
	}
	ctx->clipped = true;
	return RT_OK;
}
