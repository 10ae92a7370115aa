/* rt_dp.c: data parallelism: dp replicas of a pipeline (docs/runtime.md,
 * "Data parallelism").
 *
 * Reads the rank's (dp, replica, pipe_rank, dp_flags) from the training
 * configuration, checks them against every rank's (one all-gather with the
 * deadline, which also makes sure every rank has arrived before the
 * blocking MPI_Comm_split) and makes the DP communicator: the ranks of one
 * pipe_rank, ordered by replica, so that a rank's place in it is its
 * replica.  On a bucket of consecutive local layers it posts MPI's own
 * non-blocking collectives (all-reduce, reduce-scatter of the gradients,
 * all-gather of the parameters), registered in rt_comm.c's request table so
 * that rt_wait completes them under the deadline; at the wait the result
 * goes back into the layers (finish).  rt_update is the optimizer step of a
 * reduced bucket, on this replica's shard with the distributed optimizer,
 * whose moments are the only ones the replica holds (rt_model.c lays them
 * out per declared bucket).  It also gathers the heads' losses to replica 0
 * in global micro-batch order, and a bucket's moment shards into a
 * temporary buffer for a save or the model hash.
 *
 * Guarantees: the bucket layout in a buffer is one formula (rt_coll_bytes,
 * rt__dp_shard: c = ceil(n / dp), replica r's shard elements [r*c, r*c + c)
 * of the layers' concatenated arrays); with the distributed optimizer a
 * bucket is only ever one rt_model_init was given; AdamW on a shard is
 * AdamW on the whole tensor restricted to it (elementwise, each element
 * with its own tensor's constants), so sharding changes no bit; in exact mode the reduction is
 * integer arithmetic (rt_exact.c), the same bits for any dp and any order.
 *
 * The executor (rt_exec.h) moves a layer's state in and out of the
 * bucket's buffer, which is in its memory, and runs the update: the host's
 * arrays on a CPU rank, the device's on a device rank.  The collective
 * itself is MPI's on that buffer, or the device's communicator's (NCCL, or
 * the emulator's stand-in for it; rt_comm.c) when the rank has one: an
 * NCCL communicator per DP group, made here over the DP communicator.
 * The exact mode keeps its digits on the host on either (a device's
 * gradient comes back after each W): packed into the buffer, summed as
 * int64 by MPI or NCCL, rounded on the host and put back. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rt_exec.h"
#include "rt_internal.h"

static const char *const coll_name[RT_NCOLL] = {"all-reduce", "reduce-scatter", "all-gather"};

static bool is_exact(const rt_ctx *ctx)
{
	return ctx->train.dp_flags & RT_DP_EXACT;
}

static bool is_distopt(const rt_ctx *ctx)
{
	return ctx->train.dp_flags & RT_DP_DISTOPT;
}

/* ---- the DP group ------------------------------------------------------------ */

enum { F_DP, F_REPLICA, F_PIPE, F_FLAGS, F_N };

int rt__dp_init(rt_ctx *ctx)
{
	const rt_train *t = &ctx->train;
	MPI_Request req;
	char mpimsg[MPI_MAX_ERROR_STRING];
	int rc;
	if (t->dp > 1 && ctx->comm_stage)
		return rt__fail(ctx, RT_EARG,
		                "model: dp %lld on device ranks that talk through MPI (OCTO_COMM=mpi): a "
		                "bucket's collectives run on the device's communicator (NCCL), so unset "
		                "OCTO_COMM or set it to nccl", (long long)t->dp);
	int64_t mine[F_N] = {t->dp, t->replica, t->pipe_rank, (int64_t)t->dp_flags};
	int64_t *all = malloc((size_t)ctx->world * F_N * sizeof *all);
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(mine, F_N, MPI_INT64_T, all, F_N, MPI_INT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "model: the ranks' data-parallel settings")))
		goto out;
	for (int r = 0; r < ctx->world; r++) {
		const int64_t *o = all + F_N * r;
		if (o[F_DP] != all[F_DP] || o[F_FLAGS] != all[F_FLAGS]) {
			rc = rt__fail(ctx, RT_EARG,
			              "model: rank %d has dp %lld and dp_flags 0x%llx, rank 0 dp %lld and "
			              "dp_flags 0x%llx: every rank of the job must agree", r,
			              (long long)o[F_DP], (unsigned long long)o[F_FLAGS],
			              (long long)all[F_DP], (unsigned long long)all[F_FLAGS]);
			goto out;
		}
	}
	if (t->dp <= 1) {
		ctx->dpc = MPI_COMM_SELF;
		goto out;
	}
	/* My DP group: the ranks of my pipe_rank, replicas 0..dp-1 once each. */
	int members = 0;
	for (int r = 0; r < ctx->world; r++) {
		const int64_t *o = all + F_N * r;
		if (o[F_PIPE] != t->pipe_rank)
			continue;
		members++;
		for (int q = 0; q < r; q++)
			if (all[F_N * q + F_PIPE] == t->pipe_rank && all[F_N * q + F_REPLICA] == o[F_REPLICA]) {
				rc = rt__fail(ctx, RT_EARG,
				              "model: ranks %d and %d are both replica %lld of pipe_rank %lld", q,
				              r, (long long)o[F_REPLICA], (long long)t->pipe_rank);
				goto out;
			}
	}
	if (members != t->dp) {
		rc = rt__fail(ctx, RT_EARG,
		              "model: the DP group of pipe_rank %lld has %d rank(s) of the job's %d, dp is "
		              "%lld: every pipe_rank needs one rank per replica", (long long)t->pipe_rank,
		              members, ctx->world, (long long)t->dp);
		goto out;
	}
	/* Every rank is here (the all-gather): the blocking split cannot wait
	 * for one that never comes. */
	MPI_Comm c = MPI_COMM_NULL;
	int mrc = MPI_Comm_split(MPI_COMM_WORLD, (int)t->pipe_rank, (int)t->replica, &c), me = -1;
	if (mrc != MPI_SUCCESS) {
		rc = rt__fail(ctx, RT_EMPI, "model: the DP communicator (MPI_Comm_split): %s",
		              rt__mpierr(mrc, mpimsg));
		goto out;
	}
	MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	MPI_Comm_rank(c, &me);
	ctx->dpc = c;
	if (me != t->replica) {
		rc = rt__fail(ctx, RT_EMPI, "model: replica %lld is rank %d of its DP communicator",
		              (long long)t->replica, me);
		goto out;
	}
	/* The device's communicator of the group, over the same ranks in the
	 * same order (every member is here: the all-gather above). */
	const rt_dcomm *dc = ctx->dcomm;
	if (dc && (rc = dc->dp_init(dc->self, c)))
		rc = rt__fail(ctx, rc, "model: the DP group's device communicator: %s", dc->error(dc->self));
out:
	free(all);
	return rc;
}

void rt__dp_free(rt_ctx *ctx)
{
	if (ctx->dpc != MPI_COMM_NULL && ctx->dpc != MPI_COMM_SELF)
		MPI_Comm_free(&ctx->dpc);
	ctx->dpc = MPI_COMM_NULL;
}

/* ---- buckets ---------------------------------------------------------------- */

bool rt__dp_sharded(const rt_train *t)
{
	return (t->dp_flags & RT_DP_DISTOPT) && t->dp > 1;
}

int64_t rt__dp_shard(const rt_train *t, int64_t n, int64_t *lo, int64_t *hi)
{
	int64_t dp = t->dp > 1 ? t->dp : 1, c = (n + dp - 1) / dp;
	*lo = t->replica * c;
	*hi = *lo + c < n ? *lo + c : n;
	if (*hi < *lo)
		*hi = *lo;
	return c;
}

static int check_bucket(rt_ctx *ctx, const char *fn, int h0, int h1)
{
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "%s: rt_model_init has not been called", fn);
	if (!ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "%s: outside a step (call rt_step_begin)", fn);
	if (h0 < 0 || h1 < h0 || h1 >= ctx->nlay)
		return rt__fail(ctx, RT_EARG, "%s: layers %d..%d: not a bucket of this rank's layers "
		                "(0..%d)", fn, h0, h1, ctx->nlay - 1);
	const rt_lay *l = &ctx->lay[h0];
	if (rt__dp_sharded(&ctx->train) && (l->b0 != h0 || l->b1 != h1))
		return rt__fail(ctx, RT_EARG,
		                "%s: local layers %d..%d (layers %lld..%lld) are not a bucket "
		                "rt_model_init was given: with the distributed optimizer each replica "
		                "holds the moments of its shard of each declared bucket "
		                "(rt_layer_spec.bucket_start), and layer %lld is in the bucket of local "
		                "layers %d..%d", fn, h0, h1, (long long)l->index,
		                (long long)ctx->lay[h1].index, (long long)l->index, l->b0, l->b1);
	return RT_OK;
}

static int64_t bucket_params(const rt_ctx *ctx, int h0, int h1)
{
	int64_t n = 0;
	for (int h = h0; h <= h1; h++)
		n += ctx->lay[h].sz.params;
	return n;
}

/* The part [*a, *b) of a layer (its elements at off..off+params of the
 * bucket) inside the bucket's elements [lo, hi); false if none. */
static bool span(const rt_lay *l, int64_t off, int64_t lo, int64_t hi, int64_t *a, int64_t *b)
{
	*a = (lo > off ? lo : off) - off;
	*b = (hi < off + l->sz.params ? hi : off + l->sz.params) - off;
	return *a < *b;
}

/* Elements [lo, hi) of the bucket's parameters or gradients between the
 * layers and buf (the executor's memory), element e at buf[e]. */
static int copy_bucket(rt_ctx *ctx, int h0, int h1, bool grad, int64_t lo, int64_t hi, float *buf,
                       bool to_buf)
{
	int64_t off = 0, a, b;
	int rc;
	for (int h = h0; h <= h1; off += ctx->lay[h].sz.params, h++)
		if (span(&ctx->lay[h], off, lo, hi, &a, &b) &&
		    (rc = ctx->exec->dp_copy(ctx, h, grad, a, b, buf + off + a, to_buf)))
			return rc;
	return RT_OK;
}

/* This replica's shard [*lo, *hi) of a bucket of n elements, and c. */
static int64_t shard(const rt_ctx *ctx, int64_t n, int64_t *lo, int64_t *hi)
{
	return rt__dp_shard(&ctx->train, n, lo, hi);
}

static int overflow(rt_ctx *ctx, const rt_lay *l, int64_t i)
{
	return rt__fail(ctx, RT_ELOSS,
	                "step %lld: layer %lld (%s): the step's gradient of parameter %lld overflows "
	                "f32 (the exact sum of the micro-batches' gradients, RT_DP_EXACT)",
	                rt__step_no(ctx), (long long)l->index, rt__kind_name(l->desc.kind),
	                (long long)i);
}

int rt__dp_round(rt_ctx *ctx, int h)
{
	rt_lay *l = &ctx->lay[h];
	int64_t i = rt__exact_round(l->acc, l->g, l->sz.params);
	if (i >= 0)
		return overflow(ctx, l, i);
	memset(l->acc, 0, (size_t)l->sz.params * RT_EXACT_DIGITS * sizeof(int64_t));
	return ctx->exec->grad_sync(ctx, h, 0, l->sz.params, false);
}

/* Elements [a, b) of layer l's exact sums, digits in the executor's
 * memory at d, rounded into its gradients. */
static int round_digits(rt_ctx *ctx, int h, const int64_t *d, int64_t a, int64_t b)
{
	rt_lay *l = &ctx->lay[h];
	size_t nb = (size_t)(b - a) * RT_EXACT_DIGITS * sizeof(int64_t);
	int64_t *tmp = malloc(nb), i;
	int rc;
	if (!tmp)
		return rt__fail(ctx, RT_ENOMEM, "step %lld: the exact sums: out of memory",
		                rt__step_no(ctx));
	if (!(rc = ctx->exec->to_host(ctx, tmp, d, nb))) {
		if ((i = rt__exact_round(tmp, l->g + a, b - a)) >= 0)
			rc = overflow(ctx, l, a + i);
		else
			rc = ctx->exec->grad_sync(ctx, h, a, b, false);
	}
	free(tmp);
	return rc;
}

/* At the wait: the collective's result into the layers.  A
 * reduce-scatter's result, the shard, is at the start of the buffer under
 * MPI (MPI_IN_PLACE) and at its own place under the device's communicator
 * (NCCL's in-place form: replica r's at r*c). */
static int finish(rt_ctx *ctx, const rt_op *op)
{
	int64_t n = bucket_params(ctx, op->h0, op->h1), lo = 0, hi = n, off = 0, a, b, base = 0;
	bool ex = is_exact(ctx);
	int rc;
	if (op->coll == RT_ALL_GATHER)
		return copy_bucket(ctx, op->h0, op->h1, false, 0, n, op->cbuf, false);
	if (op->coll == RT_REDUCE_SCATTER) {
		shard(ctx, n, &lo, &hi);
		base = ctx->dcomm ? 0 : lo;
	}
	for (int h = op->h0; h <= op->h1; off += ctx->lay[h].sz.params, h++) {
		rt_lay *l = &ctx->lay[h];
		l->red = op->coll == RT_ALL_REDUCE ? RT_RED_ALL : RT_RED_SHARD;
		if (span(l, off, lo, hi, &a, &b)) {
			if (ex)
				rc = round_digits(ctx, h, (const int64_t *)op->cbuf +
				                              (off + a - base) * RT_EXACT_DIGITS, a, b);
			else
				rc = ctx->exec->dp_copy(ctx, h, true, a, b,
				                        (float *)op->cbuf + off + a - base, false);
			if (rc)
				return rc;
		}
		if (ex)
			memset(l->acc, 0, (size_t)l->sz.params * RT_EXACT_DIGITS * sizeof(int64_t));
	}
	return RT_OK;
}

int rt_post_coll(rt_ctx *ctx, int kind, int h0, int h1, void *buf, size_t bytes, int *req)
{
	char mpimsg[MPI_MAX_ERROR_STRING];
	int rc, h;
	if (!ctx)
		return RT_EARG;
	if (req)
		*req = -1;
	if ((rc = check_bucket(ctx, "rt_post_coll", h0, h1)))
		return rc;
	if (kind < 0 || kind >= RT_NCOLL || !req)
		return rt__fail(ctx, RT_EARG, "rt_post_coll: %s", !req ? "no handle pointer"
		                : "the kind is none of RT_ALL_REDUCE, RT_REDUCE_SCATTER, RT_ALL_GATHER");
	const rt_train *t = &ctx->train;
	const rt_lay *L0 = &ctx->lay[h0], *L1 = &ctx->lay[h1];
	int64_t n = bucket_params(ctx, h0, h1), need = rt_coll_bytes(t, kind, n), lo, hi;
	int64_t c = shard(ctx, n, &lo, &hi);
	if (!buf || (int64_t)bytes != need)
		return rt__fail(ctx, RT_EARG,
		                "rt_post_coll: %s of layers %lld..%lld (local %d..%d, %lld parameters): a "
		                "buffer of %zu bytes%s, the bucket needs %lld (rt_coll_bytes)",
		                coll_name[kind], (long long)L0->index, (long long)L1->index, h0, h1,
		                (long long)n, bytes, buf ? "" : " at NULL", (long long)need);
	bool reduce = kind != RT_ALL_GATHER, ex = reduce && is_exact(ctx);
	int64_t count = (kind == RT_ALL_REDUCE ? n : c) * (ex ? RT_EXACT_DIGITS : 1);
	if (!ctx->dcomm && count > INT_MAX)
		return rt__fail(ctx, RT_EARG, "rt_post_coll: %s of layers %lld..%lld: %lld elements per "
		                "rank, more than one MPI call takes (%d)", coll_name[kind],
		                (long long)L0->index, (long long)L1->index, (long long)count, INT_MAX);
	for (int i = h0; reduce && i <= h1; i++)
		if ((rc = rt__tie_ready(ctx, i, "rt_post_coll")))
			return rc;
	for (int i = h0; reduce && i <= h1; i++) {
		const rt_lay *l = &ctx->lay[i];
		if (l->next_w != t->microbatches)
			return rt__fail(ctx, RT_ESTATE,
			                "step %lld: rt_post_coll: %s of layer %lld, which ran W on %lld of "
			                "%lld micro-batches: its gradients are not complete",
			                rt__step_no(ctx), coll_name[kind], (long long)l->index,
			                (long long)l->next_w, (long long)t->microbatches);
		if (l->red != RT_RED_NONE || l->updated)
			return rt__fail(ctx, RT_ESTATE, "step %lld: rt_post_coll: layer %lld is reduced twice "
			                "in one step", rt__step_no(ctx), (long long)l->index);
	}
	/* The updated parameters go out: with clipping the updates are done
	 * now, after the norm of every gradient of the step. */
	if (kind == RT_ALL_GATHER && (rc = rt__clip(ctx)))
		return rc;

	/* Pack: the gradients (exact: the host's digits) from element 0,
	 * or this replica's parameters at their place. */
	unsigned char *b = buf;
	size_t at = 0;
	if (reduce && ex) {
		for (int i = h0; !rc && i <= h1; i++) {
			const rt_lay *l = &ctx->lay[i];
			size_t nb = (size_t)l->sz.params * RT_EXACT_DIGITS * sizeof(int64_t);
			rc = ctx->exec->from_host(ctx, b + at, l->acc, nb);
			at += nb;
		}
	} else if (reduce) {
		rc = copy_bucket(ctx, h0, h1, true, 0, n, buf, true);
		at = (size_t)n * sizeof(float);
	}
	if (!rc)
		rc = reduce ? ctx->exec->clear(ctx, b + at, bytes - at) : ctx->exec->clear(ctx, buf, bytes);
	if (!rc && !reduce)
		rc = copy_bucket(ctx, h0, h1, false, lo, hi, buf, true);
	if (rc)
		return rc;

	rt_op op = {.peer = -1, .tag = {(int32_t)t->pipe_rank, -1, RT_MSG_OTHER}, .bytes = bytes,
	            .coll = kind, .h0 = h0, .h1 = h1, .cbuf = buf, .finish = finish};
	int64_t t0 = rt__now_ns();
	if (ctx->dcomm) {
		if ((rc = rt__coll_dcomm(ctx, &op, buf, (size_t)count, ex, &h)))
			return rc;
	} else {
		MPI_Request *mr;
		if ((rc = rt__coll_req(ctx, &op, &h, &mr)))
			return rc;
		MPI_Datatype ty = ex ? MPI_INT64_T : MPI_FLOAT;
		int mrc;
		if (kind == RT_ALL_REDUCE)
			mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, ty, MPI_SUM, ctx->dpc, mr);
		else if (kind == RT_REDUCE_SCATTER)
			mrc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)count, ty, MPI_SUM, ctx->dpc,
			                                mr);
		else
			mrc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, MPI_FLOAT,
			                     ctx->dpc, mr);
		if (mrc != MPI_SUCCESS) {
			rt__coll_drop(ctx, h);
			return rt__fail(ctx, RT_EMPI, "rt_post_coll: %s of layers %lld..%lld: %s",
			                coll_name[kind], (long long)L0->index, (long long)L1->index,
			                rt__mpierr(mrc, mpimsg));
		}
	}
	for (int i = h0; reduce && i <= h1; i++)
		ctx->lay[i].red = RT_RED_POSTED;
	*req = h;
	rt__trace(ctx, coll_name[kind], t0, L0->index, -1, -1, (int64_t)bytes);
	return RT_OK;
}

int rt_update(rt_ctx *ctx, int h0, int h1)
{
	int rc;
	if (!ctx)
		return RT_EARG;
	if ((rc = check_bucket(ctx, "rt_update", h0, h1)))
		return rc;
	const rt_train *t = &ctx->train;
	bool dist = is_distopt(ctx);
	for (int i = h0; i <= h1; i++)
		if (ctx->lay[i].red == RT_RED_NONE && (rc = rt__tie_ready(ctx, i, "rt_update")))
			return rc;
	for (int i = h0; i <= h1; i++) {
		rt_lay *l = &ctx->lay[i];
		const char *why = NULL;
		if (l->updated)
			why = "is updated twice in one step";
		else if (l->next_w != t->microbatches)
			why = "has not run W on every micro-batch";
		else if (l->red == RT_RED_POSTED)
			why = "has a reduction posted and not waited for (rt_wait)";
		else if (l->red == RT_RED_NONE && t->dp > 1)
			why = "has not been reduced over its DP group (rt_post_coll, then rt_wait)";
		else if (l->red == RT_RED_SHARD && !dist)
			why = "was reduce-scattered: without the distributed optimizer (RT_DP_DISTOPT) an "
			      "update needs the whole gradient (an all-reduce)";
		if (why)
			return rt__fail(ctx, RT_ESTATE, "step %lld: rt_update: layer %lld %s",
			                rt__step_no(ctx), (long long)l->index, why);
	}
	for (int i = h0; i <= h1; i++)
		if (ctx->lay[i].red == RT_RED_NONE && is_exact(ctx) && (rc = rt__dp_round(ctx, i)))
			return rc;
	int64_t n = bucket_params(ctx, h0, h1), lo = 0, hi = n, off = 0, a, b;
	if (dist)
		shard(ctx, n, &lo, &hi);
	int64_t t0 = rt__now_ns();
	for (int i = h0; i <= h1; off += ctx->lay[i].sz.params, i++) {
		rt_lay *l = &ctx->lay[i];
		/* sharded: [a, b) is the layer's part of the shard, [mlo, mhi),
		 * since the bucket is the declared one (check_bucket) */
		if (!span(l, off, lo, hi, &a, &b))
			a = b = 0;
		/* With clipping the update waits for the global norm (rt__clip,
		 * before the first all-gather or at rt_step_end). */
		if (t->clip > 0)
			l->pending = true, l->ua = a, l->ub = b;
		else if ((rc = ctx->exec->update(ctx, i, a, b)))
			return rc;
		l->updated = true;
	}
	rt__trace(ctx, "optim", t0, ctx->lay[h0].index, -1, -1, 0);
	return RT_OK;
}

int rt__dp_check_updated(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nlay; i++)
		if (!ctx->lay[i].updated)
			return rt__fail(ctx, RT_ESTATE,
			                "step %lld: layer %lld was not updated: with dp %lld every layer is "
			                "reduced over its DP group (rt_post_coll, rt_wait) and updated "
			                "(rt_update) within the step", rt__step_no(ctx),
			                (long long)ctx->lay[i].index, (long long)ctx->train.dp);
	return RT_OK;
}

/* ---- the loss, the moments ------------------------------------------------------ */

int rt__dp_loss(rt_ctx *ctx, double *loss, int64_t *count, int *have)
{
	MPI_Request req;
	const int64_t M = ctx->train.microbatches, dp = ctx->train.dp;
	bool root = ctx->train.replica == 0;
	double *ls = NULL;
	int64_t *cs = NULL;
	int rc;
	*have = 0;
	if (root && (!(ls = malloc((size_t)(dp * M) * sizeof *ls)) ||
	             !(cs = malloc((size_t)(dp * M) * sizeof *cs)))) {
		rc = rt__fail(ctx, RT_ENOMEM, "step %lld: the losses: out of memory", rt__step_no(ctx));
		goto out;
	}
	if ((rc = rt__coll(ctx, MPI_Igather(ctx->mb_loss, (int)M, MPI_DOUBLE, ls, (int)M, MPI_DOUBLE, 0,
	                                    ctx->dpc, &req),
	                   &req, "step end: the replicas' losses")) ||
	    (rc = rt__coll(ctx, MPI_Igather(ctx->mb_count, (int)M, MPI_INT64_T, cs, (int)M, MPI_INT64_T,
	                                    0, ctx->dpc, &req),
	                   &req, "step end: the replicas' losses")))
		goto out;
	if (root) {
		/* global micro-batch order, as one replica sums */
		double sum = 0;
		int64_t n = 0;
		for (int64_t g = 0; g < dp * M; g++) {
			sum += ls[g];
			n += cs[g];
		}
		*loss = sum;
		*count = n;
		*have = 1;
	}
out:
	free(cs);
	free(ls);
	return rc;
}

int rt__dp_moments(rt_ctx *ctx, rt_moments_fn *fn, void *arg)
{
	MPI_Request req;
	int rc = RT_OK, frc = RT_OK;
	if (!rt__dp_sharded(&ctx->train)) {
		for (int h = 0; !frc && h < ctx->nlay; h++)
			frc = fn(ctx, h, ctx->lay[h].m, ctx->lay[h].v, arg);
		return frc;
	}
	for (int h0 = 0; h0 < ctx->nlay; h0 = ctx->lay[h0].b1 + 1) {
		int h1 = ctx->lay[h0].b1;
		int64_t n = bucket_params(ctx, h0, h1), lo, hi, c = shard(ctx, n, &lo, &hi), off;
		if (c > INT_MAX)
			return rt__fail(ctx, RT_EARG, "the moment shards of layers %lld..%lld: %lld "
			                "elements per rank, more than one MPI call takes (%d)",
			                (long long)ctx->lay[h0].index, (long long)ctx->lay[h1].index,
			                (long long)c, INT_MAX);
		/* element e of the bucket at buf[e]; replica r's shard at r*c */
		size_t len = (size_t)(c * ctx->train.dp);
		float *m = calloc(len ? len : 1, sizeof *m), *v = calloc(len ? len : 1, sizeof *v);
		if (!m || !v) {
			free(m);
			free(v);
			return rt__fail(ctx, RT_ENOMEM, "the moment shards: out of memory");
		}
		off = 0;
		for (int h = h0; h <= h1; off += ctx->lay[h].sz.params, h++) {
			const rt_lay *l = &ctx->lay[h];
			memcpy(m + off + l->mlo, l->m, rt__mom_bytes(l));
			memcpy(v + off + l->mlo, l->v, rt__mom_bytes(l));
		}
		for (int k = 0; !rc && k < 2; k++)
			rc = rt__coll(ctx, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, k ? v : m,
			                                  (int)c, MPI_FLOAT, ctx->dpc, &req),
			              &req, "the replicas' AdamW moment shards");
		off = 0;
		for (int h = h0; !rc && !frc && h <= h1; off += ctx->lay[h].sz.params, h++)
			frc = fn(ctx, h, m + off, v + off, arg);
		free(m);
		free(v);
		if (rc)
			return rc;
	}
	return frc;
}
