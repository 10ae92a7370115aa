/* rt_tie.c: tied embeddings (docs/runtime.md, "Tied embeddings").
 *
 * When the model ties its LM head to its embedding (rt_layer_desc.tied on
 * both), the head's table and the embedding's are one parameter held as
 * two copies: on one rank when the plan puts both layers on one device,
 * else one on each of two ranks of the same replica.  Each copy's W adds
 * its own gradient; before anything reads them (the DP group's reduction,
 * the update, the step's end) the two are replaced by their sum, on both
 * copies, so both take the same optimizer step and stay equal bit for bit.
 *
 * On one rank the sum is taken here (rt__tie_ready, at the first reader).
 * Across two it is an in-place MPI all-reduce over a communicator of the
 * two (made at rt_model_init, MPI_Comm_split of the world by replica),
 * posted by rt_tie_post and completed by rt_wait: the program's `tie` and
 * `wait tie` ops, which the compiler places and proves with the rest
 * (docs/ir.md, "Tied embeddings").  It sums the f32 gradients (a device
 * rank's through its host copy), or in exact mode the exact sums' digits
 * as int64.
 *
 * Guarantees: a sum of two f32 values is the same whichever is first, and
 * the digits' sum is exact, so the tied gradient is the same bits on one
 * rank or two, for every plan; in exact mode for every number of replicas
 * too, as the DP group's reduction comes after the tie. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rt_exec.h"
#include "rt_internal.h"

enum { TIE_EMB = 1, TIE_HEAD = 2 }; /* which tied layers a rank holds */
enum { F_BITS, F_REPLICA, F_N };

/* The tied table of layer l: elements [*off, *off + *n). */
static void tied_part(const rt_lay *l, int64_t *off, int64_t *n)
{
	int nt = 0;
	*off = 0;
	*n = 0;
	if (rt_layer_ntensors(&l->desc, &nt))
		return;
	for (int i = 0; i < nt; i++) {
		rt_tensor_info ti;
		if (!rt_layer_tensor(&l->desc, i, &ti) && !strcmp(ti.name, "table")) {
			*off = ti.offset;
			*n = ti.dim[0] * ti.dim[1];
		}
	}
}

int rt__tie_init(rt_ctx *ctx)
{
	const rt_train *t = &ctx->train;
	char mpimsg[MPI_MAX_ERROR_STRING];
	MPI_Request req;
	int rc, bits = 0;
	ctx->tie_h[0] = ctx->tie_h[1] = -1;
	ctx->tiec = MPI_COMM_NULL;
	ctx->tie_peer = -1;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		if (!l->desc.tied)
			continue;
		int k = l->desc.kind == RT_HEAD;
		ctx->tie_h[k] = i;
		bits |= k ? TIE_HEAD : TIE_EMB;
	}
	int64_t mine[F_N] = {bits, t->replica};
	int64_t *all = malloc((size_t)ctx->world * F_N * sizeof *all);
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(mine, F_N, MPI_INT64_T, all, F_N, MPI_INT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "model: the ranks' tied embeddings")))
		goto out;
	int any = 0;
	for (int r = 0; r < ctx->world; r++)
		any |= (int)all[F_N * r + F_BITS];
	if (!any)
		goto out;
	/* Every replica holds one tied embedding and one tied head. */
	for (int64_t rep = 0; rep < (t->dp > 1 ? t->dp : 1); rep++) {
		int emb = -1, head = -1, ne = 0, nh = 0;
		for (int r = 0; r < ctx->world; r++) {
			const int64_t *o = all + F_N * r;
			if (o[F_REPLICA] != rep)
				continue;
			if (o[F_BITS] & TIE_EMB)
				emb = r, ne++;
			if (o[F_BITS] & TIE_HEAD)
				head = r, nh++;
		}
		if (ne != 1 || nh != 1) {
			rc = rt__fail(ctx, RT_EARG,
			              "model: tied embeddings: replica %lld has %d rank(s) with a tied "
			              "embedding and %d with a tied head; it needs one of each (both "
			              "layers' rt_layer_desc.tied set, or neither)",
			              (long long)rep, ne, nh);
			goto out;
		}
		if (rep == t->replica && bits && bits != (TIE_EMB | TIE_HEAD))
			ctx->tie_peer = bits == TIE_EMB ? head : emb;
	}
	/* Every rank is here (the all-gather): the blocking split cannot wait
	 * for one that never comes. */
	bool split = bits && bits != (TIE_EMB | TIE_HEAD);
	int mrc = MPI_Comm_split(MPI_COMM_WORLD, split ? (int)t->replica : MPI_UNDEFINED, bits,
	                         &ctx->tiec);
	if (mrc != MPI_SUCCESS) {
		ctx->tiec = MPI_COMM_NULL;
		rc = rt__fail(ctx, RT_EMPI, "model: the tied embeddings' communicator (MPI_Comm_split): "
		              "%s", rt__mpierr(mrc, mpimsg));
		goto out;
	}
	if (ctx->tiec != MPI_COMM_NULL)
		MPI_Comm_set_errhandler(ctx->tiec, MPI_ERRORS_RETURN);
out:
	free(all);
	return rc;
}

void rt__tie_free(rt_ctx *ctx)
{
	if (ctx->tiec != MPI_COMM_NULL)
		MPI_Comm_free(&ctx->tiec);
	ctx->tiec = MPI_COMM_NULL;
}

bool rt__tied(const rt_ctx *ctx, int h)
{
	return h >= 0 && (h == ctx->tie_h[0] || h == ctx->tie_h[1]);
}

/* The step's gradients of the tied table of local layer h: complete? */
static int complete(rt_ctx *ctx, int h, const char *fn)
{
	const rt_lay *l = &ctx->lay[h];
	if (l->next_w != ctx->train.microbatches)
		return rt__fail(ctx, RT_ESTATE,
		                "step %lld: %s: layer %lld (%s), tied, ran W on %lld of %lld "
		                "micro-batches: its gradient is not complete", rt__step_no(ctx), fn,
		                (long long)l->index, rt__kind_name(l->desc.kind), (long long)l->next_w,
		                (long long)ctx->train.microbatches);
	if (l->red != RT_RED_NONE || l->updated)
		return rt__fail(ctx, RT_ESTATE, "step %lld: %s: layer %lld is reduced or updated before "
		                "its tied gradient is summed", rt__step_no(ctx), fn, (long long)l->index);
	return RT_OK;
}

/* Both copies on this rank: their sum into both. */
static int sum_local(rt_ctx *ctx, const char *fn)
{
	int he = ctx->tie_h[0], hh = ctx->tie_h[1], rc;
	if ((rc = complete(ctx, he, fn)) || (rc = complete(ctx, hh, fn)))
		return rc;
	rt_lay *e = &ctx->lay[he], *h = &ctx->lay[hh];
	int64_t eo, en, ho, hn;
	tied_part(e, &eo, &en);
	tied_part(h, &ho, &hn);
	if (en != hn || !en)
		return rt__fail(ctx, RT_EARG, "model: the tied embedding's table has %lld elements, the "
		                "head's %lld", (long long)en, (long long)hn);
	if (e->acc) {
		int64_t *a = e->acc + eo * RT_EXACT_DIGITS, *b = h->acc + ho * RT_EXACT_DIGITS;
		for (int64_t i = 0; i < en * RT_EXACT_DIGITS; i++)
			b[i] = a[i] = a[i] + b[i];
		return RT_OK;
	}
	if ((rc = ctx->exec->grad_sync(ctx, he, 0, e->sz.params, true)) ||
	    (rc = ctx->exec->grad_sync(ctx, hh, 0, h->sz.params, true)))
		return rc;
	float *a = e->g + eo, *b = h->g + ho;
	for (int64_t i = 0; i < en; i++)
		b[i] = a[i] = a[i] + b[i];
	if ((rc = ctx->exec->grad_sync(ctx, he, eo, eo + en, false)))
		return rc;
	return ctx->exec->grad_sync(ctx, hh, ho, ho + hn, false);
}

int rt__tie_ready(rt_ctx *ctx, int h, const char *fn)
{
	if (!rt__tied(ctx, h) || ctx->tie_state == RT_TIE_DONE)
		return RT_OK;
	if (ctx->tiec == MPI_COMM_NULL) {
		int rc = sum_local(ctx, fn);
		if (!rc)
			ctx->tie_state = RT_TIE_DONE;
		return rc;
	}
	const rt_lay *l = &ctx->lay[h];
	return rt__fail(ctx, RT_ESTATE,
	                "step %lld: %s: layer %lld (%s) is tied to its copy on rank %d, and their "
	                "gradients' sum is not %s (rt_tie_post, then rt_wait)", rt__step_no(ctx), fn,
	                (long long)l->index, rt__kind_name(l->desc.kind), ctx->tie_peer,
	                ctx->tie_state == RT_TIE_POSTED ? "waited for" : "posted");
}

/* At the wait: a device rank's host copy back to the device. */
static int finish(rt_ctx *ctx, const rt_op *op)
{
	const rt_lay *l = &ctx->lay[op->h0];
	int64_t off, n;
	int rc = RT_OK;
	tied_part(l, &off, &n);
	if (!l->acc)
		rc = ctx->exec->grad_sync(ctx, op->h0, off, off + n, false);
	if (!rc)
		ctx->tie_state = RT_TIE_DONE;
	return rc;
}

int rt_tie_post(rt_ctx *ctx, int h, int *req)
{
	char mpimsg[MPI_MAX_ERROR_STRING];
	int rc, k;
	if (!ctx)
		return RT_EARG;
	if (req)
		*req = -1;
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_tie_post: rt_model_init has not been called");
	if (!ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_tie_post: outside a step (call rt_step_begin)");
	if (!req)
		return rt__fail(ctx, RT_EARG, "rt_tie_post: no handle pointer");
	if (h < 0 || h >= ctx->nlay || !rt__tied(ctx, h) || ctx->tiec == MPI_COMM_NULL)
		return rt__fail(ctx, RT_EARG, "rt_tie_post: local layer %d is not a tied layer whose "
		                "copy is on another rank", h);
	if (ctx->tie_state != RT_TIE_NONE)
		return rt__fail(ctx, RT_ESTATE, "step %lld: rt_tie_post: the tied gradient is summed "
		                "twice in one step", rt__step_no(ctx));
	if ((rc = complete(ctx, h, "rt_tie_post")))
		return rc;
	rt_lay *l = &ctx->lay[h];
	int64_t off, n;
	tied_part(l, &off, &n);
	bool ex = l->acc != NULL;
	int64_t count = n * (ex ? RT_EXACT_DIGITS : 1);
	if (count > INT_MAX)
		return rt__fail(ctx, RT_EARG, "rt_tie_post: layer %lld's tied table: %lld elements, more "
		                "than one MPI call takes (%d)", (long long)l->index, (long long)count,
		                INT_MAX);
	void *buf = ex ? (void *)(l->acc + off * RT_EXACT_DIGITS) : (void *)(l->g + off);
	if (!ex && (rc = ctx->exec->grad_sync(ctx, h, 0, l->sz.params, true)))
		return rc;
	rt_op op = {.peer = ctx->tie_peer, .tag = {(int32_t)ctx->train.pipe_rank, -1, RT_MSG_OTHER},
	            .bytes = (size_t)count * (ex ? sizeof(int64_t) : sizeof(float)),
	            .coll = RT_TIE_COLL, .h0 = h, .h1 = h, .cbuf = buf, .finish = finish};
	MPI_Request *mr;
	int64_t t0 = rt__now_ns();
	if ((rc = rt__coll_req(ctx, &op, &k, &mr)))
		return rc;
	int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, ex ? MPI_INT64_T : MPI_FLOAT, MPI_SUM,
	                         ctx->tiec, mr);
	if (mrc != MPI_SUCCESS) {
		rt__coll_drop(ctx, k);
		return rt__fail(ctx, RT_EMPI, "rt_tie_post: layer %lld's tied gradient with rank %d: %s",
		                (long long)l->index, ctx->tie_peer, rt__mpierr(mrc, mpimsg));
	}
	ctx->tie_state = RT_TIE_POSTED;
	*req = k;
	rt__trace(ctx, "tie", t0, l->index, -1, -1, (int64_t)op.bytes);
	return RT_OK;
}

bool rt__tie_counts(const rt_ctx *ctx, int h, int64_t *off, int64_t *n)
{
	*off = *n = 0;
	if (!rt__tied(ctx, h) || ctx->lay[h].desc.kind != RT_HEAD)
		return false;
	tied_part(&ctx->lay[h], off, n);
	return true;
}
