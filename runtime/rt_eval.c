/* rt_eval.c: evaluation passes over held-out data (docs/runtime.md,
 * "Evaluation").  A pass is a step without its backward: the program runs
 * its F ops and the activations' sends and receives in the plan's order
 * (codegen/host.c's eval walk), so the pass inherits the step's proof of
 * deadlock freedom -- every rank drops the same ops (B, W, R, gradients,
 * collectives), a dropped op only removed edges from the proof's event
 * graph, and a receive still matches the send it matched in the step.
 *
 * The pass reads its tokens through the training's data path: while it
 * runs, the context's token stream is the held-out one and its data
 * position is the pass's first sample, both put back at rt_eval_end. */
#include <math.h>
#include <stdlib.h>

#include "rt_exec.h"
#include "rt_internal.h"

int rt__eval_load(rt_ctx *ctx, const char *path)
{
	if (ctx->have_eval)
		return RT_OK;
	/* rt__data_load maps into the context: the training's stream is put
	 * aside meanwhile, and the held-out one moved out after. */
	rt_stream train = {0};
	const char *tfile = ctx->train.text_file;
	int fmt = ctx->data_format;
	rt__data_swap(ctx, &train);
	/* Its files are read by their names (docs/data.md), not by the
	 * training's format: that may be the compiled model's text. */
	ctx->data_format = RT_DATA_AUTO;
	int rc = rt__data_load(ctx, path);
	ctx->data_format = fmt;
	rt__data_swap(ctx, &ctx->eval);
	rt__data_swap(ctx, &train);
	ctx->train.text_file = tfile;
	ctx->have_eval = rc == RT_OK;
	return rc;
}

void rt__eval_free(rt_ctx *ctx)
{
	if (!ctx->have_eval)
		return;
	rt_stream train = {0};
	const char *tfile = ctx->train.text_file;
	rt__data_swap(ctx, &train);
	rt__data_swap(ctx, &ctx->eval);
	rt__data_free(ctx);
	rt__data_swap(ctx, &train);
	ctx->train.text_file = tfile;
	ctx->have_eval = false;
}

int rt_eval_begin(rt_ctx *ctx, int64_t pass)
{
	if (!ctx)
		return RT_EARG;
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_eval_begin: rt_model_init has not been called");
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_eval_begin: inside step %lld", rt__step_no(ctx));
	if (!ctx->have_eval)
		return rt__fail(ctx, RT_ESTATE, "rt_eval_begin: no evaluation data is loaded");
	int64_t per = ctx->train.dp * ctx->train.microbatches;
	if (pass < 0 || pass > RT_MAX_COUNT / per)
		return rt__fail(ctx, RT_EARG, "rt_eval_begin: pass %lld", (long long)pass);
	ctx->saved_pos = ctx->data_pos;
	ctx->data_pos = pass * per;
	rt__data_swap(ctx, &ctx->eval); /* the held-out stream in, the training's aside */
	for (int64_t m = 0; m < ctx->train.microbatches; m++) {
		ctx->mb_loss[m] = 0;
		ctx->mb_count[m] = -1;
	}
	ctx->evaluating = ctx->in_step = true;
	return RT_OK;
}

int rt_eval_end(rt_ctx *ctx, double *loss_out, int *have_loss)
{
	int rc = RT_OK;
	if (!ctx)
		return RT_EARG;
	if (!ctx->evaluating)
		return rt__fail(ctx, RT_ESTATE, "rt_eval_end: no evaluation pass is running");
	if (have_loss)
		*have_loss = 0;
	if ((rc = ctx->exec->collect(ctx)))
		goto out;
	if (ctx->head >= 0) {
		const rt_train *t = &ctx->train;
		double sum = 0;
		int64_t count = 0;
		int have = 1;
		for (int64_t m = 0; m < t->microbatches; m++) {
			if (ctx->mb_count[m] < 0) {
				rc = rt__fail(ctx, RT_ESTATE, "evaluation: the head ran no F on micro-batch "
				              "%lld", (long long)m);
				goto out;
			}
			sum += ctx->mb_loss[m];
			count += ctx->mb_count[m];
		}
		if (t->dp > 1 && (rc = rt__dp_loss(ctx, &sum, &count, &have)))
			goto out;
		double loss = count ? sum / (double)count : 0;
		if (have && !isfinite(loss)) {
			rc = rt__fail(ctx, RT_ELOSS, "evaluation after step %lld: loss is %s",
			              (long long)ctx->step, isnan(loss) ? "NaN" : "infinite");
			goto out;
		}
		if (have && loss_out)
			*loss_out = loss;
		if (have_loss)
			*have_loss = have;
	}
out:
	ctx->data_pos = ctx->saved_pos;
	rt__data_swap(ctx, &ctx->eval);
	ctx->evaluating = ctx->in_step = false;
	return rc;
}
