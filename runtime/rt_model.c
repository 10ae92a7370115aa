/* rt_model.c: this rank's layers and the training step.
 *
 * Reads the rank's layer list (global index + descriptor), lays out every
 * layer's parameters, gradients and AdamW moments in the arena, initialises
 * the parameters from (seed, global layer index), and wraps the kernels:
 * the embedding and the head get their tokens from the data source
 * (sample = data position + micro-batch, so the data do not depend on the
 * plan), the head's losses are kept per micro-batch and summed in
 * micro-batch order, and W is held to micro-batch order so that the
 * accumulated gradients are the same float sums on every plan.  rt_step_end
 * checks the loss and applies AdamW.  docs/runtime.md has the formulas. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers.h" /* RT_MAX_TENSORS */
#include "rt_internal.h"

#define MAX_MICROBATCHES (1 << 18) /* the message tag's field */

static size_t rup(size_t n)
{
	return (n + RT_ALIGN - 1) & ~(size_t)(RT_ALIGN - 1);
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
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

/* The settings 0 stands for (docs/runtime.md). */
static rt_train with_defaults(const rt_train *t)
{
	rt_train tt = *t;
	if (!tt.beta1)
		tt.beta1 = 0.9f;
	if (!tt.beta2)
		tt.beta2 = 0.999f;
	if (!tt.eps)
		tt.eps = 1e-8f;
	return tt;
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
	if (t->text_file && t->vocab < 256)
		return rt__fail(ctx, RT_EARG,
		                "model: text file %s: text data (one token per byte) needs a vocabulary of "
		                "at least 256, the model's is %lld", t->text_file, (long long)t->vocab);
	return RT_OK;
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
	TAKE(lay, (size_t)n * sizeof *lay);
	for (int i = 0; i < n; i++) {
		const rt_layer_desc *d = &L[i].desc;
		int64_t gi = L[i].index;
		rt_sizes sz;
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
		if (take) {
			lay[i] = (rt_lay){.index = gi, .desc = *d, .sz = sz};
			if ((rc = shape_hash(d, &lay[i].shape_hash)))
				return rt__fail(ctx, rc, "model: layer %lld: %s", (long long)gi,
				                rt_strerror(rc));
		}
		TAKE(lay[i].p, pb);
		TAKE(lay[i].g, pb);
		TAKE(lay[i].m, pb);
		TAKE(lay[i].v, pb);
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
	rt_train tt = with_defaults(t);
	return layout(ctx, false, &tt, n, layers, bytes);
}

/* The text file's bytes: a regular file of at least seq + 1 bytes, read
 * to its size (a device, a pipe or a directory has no size to read to, and
 * /dev/zero would never end). */
static int read_text(rt_ctx *ctx, const char *path)
{
	struct stat st;
	unsigned char *buf = NULL;
	int rc = RT_OK;
	int fd = rt__open_regular(path, &st);
	if (fd == -2)
		return rt__fail(ctx, RT_EIO, "text file %s: not a regular file (%s)", path,
		                rt__file_kind(&st));
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "text file %s: %s", path, strerror(errno));
	size_t len = (size_t)st.st_size;
	if (st.st_size < ctx->train.seq + 1) {
		rc = rt__fail(ctx, RT_EIO, "text file %s: %lld bytes, fewer than one sequence (seq + 1 = "
		              "%lld bytes)", path, (long long)st.st_size, (long long)ctx->train.seq + 1);
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX / 2 || !(buf = malloc(len))) {
		rc = rt__fail(ctx, RT_ENOMEM, "text file %s: %lld bytes: out of memory", path,
		              (long long)st.st_size);
		goto out;
	}
	for (size_t got = 0; got < len;) {
		ssize_t r = read(fd, buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = rt__fail(ctx, RT_EIO, "text file %s: read: %s", path,
			              r < 0 ? strerror(errno) : "the file shrank while it was read");
			goto out;
		}
		got += (size_t)r;
	}
	ctx->text = buf;
	ctx->text_len = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

/* Every rank's data, compared once (an all-gather of a hash of the text,
 * 0 for synthetic tokens): a rank given another --data would otherwise
 * train the others on inputs and targets of two sources, and exit 0. */
static int same_data(rt_ctx *ctx)
{
	MPI_Request req;
	uint64_t mine = ctx->text ? rt__fnv(RT_FNV_INIT, ctx->text, ctx->text_len) : 0;
	uint64_t *all = malloc((size_t)ctx->world * sizeof *all);
	int rc;
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "model: comparing the ranks' data")))
		goto out;
	for (int r = 1; r < ctx->world; r++)
		if (all[r] != all[0]) {
			char a[64], b[64];
			snprintf(a, sizeof a, all[r] ? "a text file of hash 0x%016llx" : "synthetic tokens",
			         (unsigned long long)all[r]);
			snprintf(b, sizeof b, all[0] ? "a text file of hash 0x%016llx" : "synthetic tokens",
			         (unsigned long long)all[0]);
			rc = rt__fail(ctx, RT_EARG,
			              "model: rank %d and rank 0 train on different data (%s on rank %d, %s "
			              "on rank 0): every rank needs the same text file",
			              r, a, r, b);
			goto out;
		}
out:
	free(all);
	return rc;
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
	rt_train tt = with_defaults(t);
	if ((rc = layout(ctx, false, &tt, n, layers, &bytes)))
		return rc;
	if (bytes > ctx->arena_size - ctx->arena_top)
		return rt__fail(ctx, RT_ENOMEM,
		                "arena: out of memory: the model's %d layers need %zu bytes, %zu of %zu "
		                "free", n, bytes, ctx->arena_size - ctx->arena_top, ctx->arena_size);
	mark = rt_arena_mark(ctx);
	if ((rc = layout(ctx, true, &tt, n, layers, &bytes)))
		goto out_arena;
	/* The context keeps its own copy of the path (the caller's may go). */
	tt.text_file = NULL;
	ctx->train = tt;
	if (t->text_file) {
		if (!(ctx->text_path = strdup(t->text_file))) {
			rc = rt__fail(ctx, RT_ENOMEM, "model: out of memory");
			goto out_arena;
		}
		if ((rc = read_text(ctx, t->text_file)))
			goto out_text;
		ctx->train.text_file = ctx->text_path;
	}
	if ((rc = same_data(ctx)))
		goto out_text;
	ctx->head = -1;
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		size_t pb = (size_t)l->sz.params * sizeof(float);
		if ((rc = rt_layer_init(&l->desc, ctx->train.seed, l->index, l->p))) {
			rc = rt__fail(ctx, rc, "model: init of layer %lld: %s", (long long)l->index,
			              rt_strerror(rc));
			goto out_text;
		}
		memset(l->g, 0, pb);
		memset(l->m, 0, pb);
		memset(l->v, 0, pb);
		if (l->desc.kind == RT_HEAD)
			ctx->head = i;
	}
	ctx->step = ctx->data_pos = 0;
	ctx->in_step = false;
	if (ctx->dev && (rc = rt__dev_model_init(ctx)))
		goto out_text;
	ctx->have_model = true;
	return RT_OK;

out_text:
	free(ctx->text);
	free(ctx->text_path);
	ctx->text = NULL;
	ctx->text_path = NULL;
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
	if (ctx->dev && (rc = rt__dev_pull(ctx)))
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

/* ---- data ------------------------------------------------------------------ */

int rt_data_sample(const rt_ctx *ctx, int64_t sample, int32_t *tokens)
{
	if (!ctx || !ctx->have_model || !tokens || sample < 0)
		return RT_EARG;
	const rt_train *t = &ctx->train;
	int64_t w = t->seq + 1;
	for (int64_t b = 0; b < t->mbs; b++) {
		int32_t *row = tokens + b * w;
		if (ctx->text) {
			/* Sequence q of the data is window q mod nwin of the file:
			 * seq + 1 bytes from q * seq (windows overlap by one byte, the
			 * last input's target). */
			uint64_t nwin = (ctx->text_len - 1) / (uint64_t)t->seq;
			uint64_t q = (uint64_t)sample * (uint64_t)t->mbs + (uint64_t)b;
			const unsigned char *src = ctx->text + (q % nwin) * (uint64_t)t->seq;
			for (int64_t p = 0; p < w; p++)
				row[p] = src[p];
		} else {
			uint64_t hs = mix64(mix64(t->seed ^ 0x6f63746f64617461ull) ^ (uint64_t)sample);
			for (int64_t p = 0; p < w; p++)
				row[p] = (int32_t)(mix64(hs ^ (uint64_t)(b * w + p)) % (uint64_t)t->vocab);
		}
	}
	return RT_OK;
}

/* Inputs (first seq tokens of each sequence) or targets (last seq) of the
 * current step's micro-batch mb into ctx->idbuf. */
void rt__fill_ids(rt_ctx *ctx, int64_t mb, bool targets)
{
	const rt_train *t = &ctx->train;
	rt_data_sample(ctx, ctx->data_pos + mb, ctx->tokbuf);
	for (int64_t b = 0; b < t->mbs; b++)
		memcpy(ctx->idbuf + b * t->seq, ctx->tokbuf + b * (t->seq + 1) + (targets ? 1 : 0),
		       (size_t)t->seq * sizeof(int32_t));
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

static int kernel_fail(rt_ctx *ctx, int rc, const char *phase, const rt_lay *l, int64_t mb)
{
	return rt__fail(ctx, rc, "step %lld: %s of layer %lld (%s), micro-batch %lld: %s",
	                rt__step_no(ctx), phase, (long long)l->index, rt__kind_name(l->desc.kind),
	                (long long)mb, rt_strerror(rc));
}

/* The same, for a device op: its message (rt_device.c's) is in ctx->err. */
static int kernel_fail_dev(rt_ctx *ctx, int rc, const char *phase, const rt_lay *l, int64_t mb)
{
	char why[sizeof ctx->err];
	snprintf(why, sizeof why, "%s", ctx->err);
	return rt__fail(ctx, rc, "step %lld: %s of layer %lld (%s), micro-batch %lld, on the "
	                "device: %s", rt__step_no(ctx), phase, (long long)l->index,
	                rt__kind_name(l->desc.kind), (long long)mb, why);
}

int rt_step_begin(rt_ctx *ctx)
{
	int rc;
	if ((rc = need_model(ctx, "rt_step_begin")))
		return rc;
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_step_begin: step %lld has not ended",
		                rt__step_no(ctx));
	if (ctx->step >= RT_MAX_COUNT || ctx->data_pos > RT_MAX_COUNT - ctx->train.microbatches)
		return rt__fail(ctx, RT_EARG,
		                "rt_step_begin: step %lld: the step count (or the data position, %lld) "
		                "is at this runtime's limit (2^62)", rt__step_no(ctx),
		                (long long)ctx->data_pos);
	for (int i = 0; i < ctx->nlay; i++)
		ctx->lay[i].next_w = 0;
	for (int64_t m = 0; m < ctx->train.microbatches; m++) {
		ctx->mb_loss[m] = 0;
		ctx->mb_count[m] = -1;
	}
	ctx->in_step = true;
	return RT_OK;
}

int rt_run_f(rt_ctx *ctx, int h, int64_t mb, const float *x, float *y, void *act)
{
	int rc;
	if ((rc = check_op(ctx, "rt_run_f", h, mb)))
		return rc;
	rt_lay *l = &ctx->lay[h];
	rt__progress(ctx);
	int64_t t0 = rt__now_ns();
	if (ctx->dev) {
		if ((rc = rt__dev_f(ctx, h, mb, x, y, act)))
			return kernel_fail_dev(ctx, rc, "F", l, mb);
	} else if (l->desc.kind == RT_EMBEDDING) {
		rt__fill_ids(ctx, mb, false);
		rc = rt_forward(&l->desc, l->p, NULL, ctx->idbuf, y, NULL, act, ctx->scratch);
	} else if (l->desc.kind == RT_HEAD) {
		rt_loss loss = {0, 0};
		rt__fill_ids(ctx, mb, true);
		rc = rt_forward(&l->desc, l->p, x, ctx->idbuf, NULL, &loss, act, ctx->scratch);
		ctx->mb_loss[mb] = loss.sum;
		ctx->mb_count[mb] = loss.count;
	} else {
		rc = rt_forward(&l->desc, l->p, x, NULL, y, NULL, act, ctx->scratch);
	}
	if (rc)
		return kernel_fail(ctx, rc, "F", l, mb);
	rt__trace(ctx, "F", t0, l->index, mb, -1, 0);
	return RT_OK;
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
	 * every position has a target, so the count is known before F. */
	float dscale = (float)(1.0 / ((double)t->microbatches * (double)t->mbs * (double)t->seq));
	rt__progress(ctx);
	int64_t t0 = rt__now_ns();
	if (ctx->dev) {
		if ((rc = rt__dev_b(ctx, h, dy, dscale, dx, act, wstash)))
			return kernel_fail_dev(ctx, rc, "B", l, mb);
	} else if ((rc = rt_backward_b(&l->desc, l->p, dy, dscale, dx, act, wstash, ctx->scratch))) {
		return kernel_fail(ctx, rc, "B", l, mb);
	}
	rt__trace(ctx, "B", t0, l->index, mb, -1, 0);
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
	rt__progress(ctx);
	int64_t t0 = rt__now_ns();
	if (ctx->dev) {
		if ((rc = rt__dev_w(ctx, h, wstash)))
			return kernel_fail_dev(ctx, rc, "W", l, mb);
	} else if ((rc = rt_backward_w(&l->desc, l->p, l->g, wstash, ctx->scratch))) {
		return kernel_fail(ctx, rc, "W", l, mb);
	}
	l->next_w++;
	rt__trace(ctx, "W", t0, l->index, mb, -1, 0);
	return RT_OK;
}

/* Which tensors decay is the layer table's (rt_tensor_info.decay, declared
 * with each tensor in runtime/cpu/layers.c), not a rule on shapes: Mamba-1's
 * A_log is a matrix that does not decay. */
int rt__decays(const rt_layer_desc *d, int64_t *off, int64_t *len, bool *dec, int *n)
{
	int rc;
	if ((rc = rt_layer_ntensors(d, n)))
		return rc;
	for (int i = 0; i < *n; i++) {
		rt_tensor_info ti;
		if ((rc = rt_layer_tensor(d, i, &ti)))
			return rc;
		int64_t sz = 1;
		for (int k = 0; k < ti.ndim; k++)
			sz *= ti.dim[k];
		off[i] = ti.offset;
		len[i] = sz;
		dec[i] = ti.decay != 0;
	}
	return RT_OK;
}

void rt__adamw_consts(const rt_train *t, int64_t step, bool decay, rt_adamw_k *k)
{
	*k = (rt_adamw_k){.lr = t->lr, .b1 = t->beta1, .b2 = t->beta2, .eps = t->eps,
	                  .c1 = 1.0f - t->beta1, .c2 = 1.0f - t->beta2,
	                  .keep = decay ? (float)(1.0 - (double)t->lr * (double)t->weight_decay) : 1.0f,
	                  .sgd = t->optimizer == RT_SGD};
	/* PyTorch's AdamW: bias corrections in double, then in float
	 * p = p*(1 - lr*wd) - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
	double bc1 = 1.0 - pow((double)t->beta1, (double)step);
	double bc2 = 1.0 - pow((double)t->beta2, (double)step);
	k->step_size = (float)((double)t->lr / bc1);
	k->bc2_sqrt = (float)sqrt(bc2);
}

/* The optimizer step of one tensor (the device runs the same operations:
 * codegen/cuda_lib.cu's adamw). */
void rt__adamw(const rt_adamw_k *k, float *p, const float *g, float *m, float *v, int64_t n)
{
	if (k->sgd) {
		for (int64_t i = 0; i < n; i++)
			p[i] = p[i] * k->keep - k->lr * g[i];
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		m[i] = k->b1 * m[i] + k->c1 * g[i];
		v[i] = k->b2 * v[i] + k->c2 * (g[i] * g[i]);
		float denom = sqrtf(v[i]) / k->bc2_sqrt + k->eps;
		p[i] = p[i] * k->keep - k->step_size * (m[i] / denom);
	}
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
	if (ctx->dev && (rc = rt__dev_collect(ctx)))
		return rc;
	if (ctx->head >= 0) {
		double sum = 0;
		int64_t count = 0;
		for (int64_t m = 0; m < t->microbatches; m++) {
			if (ctx->mb_count[m] < 0)
				return rt__fail(ctx, RT_ESTATE, "step %lld: the head ran no F on micro-batch %lld",
				                rt__step_no(ctx), (long long)m);
			sum += ctx->mb_loss[m];
			count += ctx->mb_count[m];
		}
		double loss = count ? sum / (double)count : 0;
		if (!isfinite(loss))
			return rt__fail(ctx, RT_ELOSS, "step %lld: loss is %s", rt__step_no(ctx),
			                isnan(loss) ? "NaN" : "infinite");
		if (loss_out)
			*loss_out = loss;
		if (have_loss)
			*have_loss = 1;
	}

	int64_t t0 = rt__now_ns();
	if (ctx->dev && (rc = rt__dev_optimize(ctx)))
		return rc;
	for (int i = 0; i < (ctx->dev ? 0 : ctx->nlay); i++) { /* the host's AdamW: a CPU rank */
		rt_lay *l = &ctx->lay[i];
		int64_t off[RT_MAX_TENSORS], len[RT_MAX_TENSORS];
		bool dec[RT_MAX_TENSORS];
		int n;
		if ((rc = rt__decays(&l->desc, off, len, dec, &n)))
			return rt__fail(ctx, rc, "step %lld: layer %lld: %s", rt__step_no(ctx),
			                (long long)l->index, rt_strerror(rc));
		for (int k = 0; k < n; k++) {
			rt_adamw_k c;
			rt__adamw_consts(t, ctx->step + 1, dec[k] && t->weight_decay > 0, &c);
			rt__adamw(&c, l->p + off[k], l->g + off[k], l->m + off[k], l->v + off[k], len[k]);
		}
		memset(l->g, 0, (size_t)l->sz.params * sizeof(float));
	}
	rt__trace(ctx, "optim", t0, -1, -1, -1, 0);
	ctx->step++;
	ctx->data_pos += t->microbatches;
	ctx->in_step = false;
	return RT_OK;
}

/* ---- the model hash --------------------------------------------------------- */

static int cmp_pair(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

int rt_model_hash(rt_ctx *ctx, uint64_t *out)
{
	int rc;
	MPI_Request req;
	if ((rc = need_model(ctx, "rt_model_hash")))
		return rc;
	if (ctx->dev && (rc = rt__dev_pull(ctx)))
		return rc;
	if (!out)
		return RT_EARG;
	int *counts = calloc((size_t)ctx->world, sizeof *counts);
	int *displs = calloc((size_t)ctx->world, sizeof *displs);
	uint64_t *mine = malloc((size_t)ctx->nlay * 2 * sizeof *mine);
	uint64_t *all = NULL;
	int mycount = 2 * ctx->nlay, total = 0;
	if (!counts || !displs || !mine) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_model_hash: out of memory");
		goto out;
	}
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		size_t pb = (size_t)l->sz.params * sizeof(float);
		uint64_t h = rt__fnv(RT_FNV_INIT, l->p, pb);
		h = rt__fnv(h, l->m, pb);
		mine[2 * i] = (uint64_t)l->index;
		mine[2 * i + 1] = rt__fnv(h, l->v, pb);
	}
	if ((rc = rt__coll(ctx, MPI_Iallgather(&mycount, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD,
	                                       &req),
	                   &req, "rt_model_hash")))
		goto out;
	for (int r = 0; r < ctx->world; r++) {
		displs[r] = total;
		total += counts[r];
	}
	if (!(all = malloc((size_t)total * sizeof *all))) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_model_hash: out of memory");
		goto out;
	}
	if ((rc = rt__coll(ctx, MPI_Iallgatherv(mine, mycount, MPI_UINT64_T, all, counts, displs,
	                                        MPI_UINT64_T, MPI_COMM_WORLD, &req),
	                   &req, "rt_model_hash")))
		goto out;
	qsort(all, (size_t)total / 2, 2 * sizeof *all, cmp_pair);
	uint64_t h = RT_FNV_INIT;
	for (int i = 0; i < total / 2; i++) {
		if (i && all[2 * i] == all[2 * i - 2]) {
			rc = rt__fail(ctx, RT_EARG, "rt_model_hash: layer %llu is on two ranks",
			              (unsigned long long)all[2 * i]);
			goto out;
		}
		h = rt__fnv(h, &all[2 * i], 2 * sizeof *all);
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
