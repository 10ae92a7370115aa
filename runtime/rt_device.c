/* rt_device.c: the device executor (rt_exec.h) -- a rank whose layers run
 * on a device (the CUDA target; docs/cuda.md, "The rank program on the
 * device").  Its state (struct rt_exec_state) is private to this file.
 *
 * The generated program attaches a device after rt_init
 * (rt_device_attach_cuda in libocto_rt_cuda, or rt_device_attach_emu for
 * the host emulator) and takes its buffer block from rt_device_buffers;
 * everything else is the CPU program's sequence of calls.  Here:
 *
 *   - the device holds each layer's whole training state: the parameters
 *     in its storage type (what the kernels read), and in f32 the master
 *     parameters, the gradients W accumulates and the AdamW moments; the
 *     optimizer step runs there (optim_adamw with rt_optim.c's constants:
 *     the host's AdamW operation for operation, so the weights are the
 *     same bits);
 *   - the host's arrays (the CPU rank's layout) are a copy: uploaded after
 *     init and a resume, brought back (pull) only when a checkpoint, the
 *     model hash or rt_layer_get reads them; the step's end brings back
 *     only the head's losses;
 *   - F, B, W run dev_forward / dev_backward_b / dev_backward_w on the
 *     device buffers the program passes; token ids are made by rt_data.c
 *     (and checked) on the host, every micro-batch's of the step at once
 *     (put_ids), into page-locked memory copied to the device without a
 *     wait, before the step's first embedding or head F;
 *   - data parallelism (rt_dp.c): a bucket's gradients or parameters are
 *     copied between the layers' device arrays and the bucket's buffer
 *     (in the program's block) on the compute stream, the collective runs
 *     on the device's communicator, and rt_update's step of a range (this
 *     replica's shard with the distributed optimizer, whose moments are
 *     the only ones the device holds, as the host's layout) is the same
 *     optim_adamw as the whole model's.  The exact mode's gradient comes
 *     to the host after each W (rt_exact.c adds it there) and its rounded
 *     sum goes back before the update. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "rt_exec.h"
#include "rt_internal.h"

/* A layer's optimizer state on the device (f32, the layer's layout). */
typedef struct dopt {
	float *p32, *m, *v;
} dopt;

/* The device executor's state: ctx->xs. */
struct rt_exec_state {
	rt_dev *dev;
	const int32_t *mod;     /* per local layer: its kernel module */
	dev_layer *dlay;        /* [nlay] */
	dopt *opt;              /* [nlay]: the optimizer's state */
	void *buf;              /* the program's buffer block */
	void *scratch;
	int32_t *ids;           /* [2][microbatches][seq mbs]: the step's inputs, targets */
	int32_t *hids;          /* their page-locked host staging (NULL: no embedding or head) */
	bool need[2];           /* the rank runs an embedding (inputs), a head (targets) */
	int64_t ids_step, ids_pos; /* the step and data position the ids are of (-1: none) */
	bool ids_eval;          /* ... and whether of an evaluation pass's stream */
	bool ids_busy;          /* hids' copy may still run: wait before writing it */
	double *loss;           /* [microbatches][2]: the head's {sum, count} */
	int *flag;              /* the embedding's range flag; ids are checked on the host */
	void *stage;            /* host staging of one layer's parameters */
	bool stale;             /* the host's parameters and moments lag the device's */
	const rt_dcomm *dcomm;  /* the device's communicator, destroyed with it */
};

extern const rt_exec rt__exec_dev;

static int dev_err(rt_ctx *ctx, int rc, const char *what)
{
	return rt__fail(ctx, rc, "%s: %s", what, ctx->xs->dev->err);
}

/* A device call's message as the executor's (the caller adds the rest). */
static int dev_rc(rt_ctx *ctx, int rc)
{
	return rc ? rt__fail(ctx, rc, "%s", ctx->xs->dev->err) : RT_OK;
}

int rt__dev_attach(rt_ctx *ctx, rt_dev *dev, const int32_t *layer_mod, const rt_dcomm *dcomm,
                   bool stage)
{
	struct rt_exec_state *x;
	if (ctx->have_model || ctx->xs) {
		if (dcomm && dcomm->destroy)
			dcomm->destroy(dcomm->self);
		dev->ops->destroy(dev);
		return rt__fail(ctx, RT_ESTATE, "rt_device_attach: after rt_model_init, or twice");
	}
	if (!(x = calloc(1, sizeof *x))) {
		if (dcomm && dcomm->destroy)
			dcomm->destroy(dcomm->self);
		dev->ops->destroy(dev);
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	}
	*x = (struct rt_exec_state){.dev = dev, .mod = layer_mod, .dcomm = dcomm};
	/* The executor is chosen here, once (rt_init chose the CPU's). */
	ctx->xs = x;
	ctx->exec = &rt__exec_dev;
	ctx->dcomm = dcomm;
	ctx->comm_stage = stage;
	return RT_OK;
}

/* OCTO_COMM for an emulated rank.  Under the emulator device memory is
 * host memory, so MPI can move it as it is (OCTO_COMM unset).
 * OCTO_COMM=mpi moves it through host copies, and OCTO_COMM=nccl through
 * the emulator's stand-in for NCCL (dev/dev_emu_comm.c), as a GPU's ranks
 * do, so that those paths of the runtime run without a GPU too. */
int rt_device_attach_emu(rt_ctx *ctx, int bf16, int nmods, const char *const *names,
                         const void *const *tables, const int32_t *layer_mod)
{
	rt_dev *dev;
	rt_dcomm *dcomm = NULL;
	int rc;
	if (!ctx || nmods < 0 || (nmods && (!names || !tables)) || !layer_mod)
		return RT_EARG;
	const char *mode = getenv("OCTO_COMM");
	bool stage = mode && strcmp(mode, "mpi") == 0, nccl = mode && strcmp(mode, "nccl") == 0;
	if (mode && *mode && !stage && !nccl)
		return rt__fail(ctx, RT_EARG, "OCTO_COMM=%s: the device's ranks talk through nccl or mpi", mode);
	if ((rc = dev_emu_create(ctx->rank, bf16 != 0, &dev)))
		return rt__fail(ctx, rc, "the device emulator: out of memory");
	for (int i = 0; i < nmods; i++)
		if ((rc = dev_emu_add_table(dev, names[i], tables[i]))) {
			rt__fail(ctx, rc, "the device emulator: module %s: %s", names[i], dev->err);
			dev->ops->destroy(dev);
			return rc;
		}
	if (nccl && (rc = dev_emu_comm_create(&dcomm, ctx->err, sizeof ctx->err))) {
		dev->ops->destroy(dev);
		return rc;
	}
	return rt__dev_attach(ctx, dev, layer_mod, dcomm, stage);
}

int rt_device_buffers(rt_ctx *ctx, size_t bytes, void **base)
{
	int rc;
	if (!ctx || !base)
		return RT_EARG;
	struct rt_exec_state *x = ctx->xs;
	if (!x)
		return rt__fail(ctx, RT_ESTATE, "rt_device_buffers: no device attached");
	if (x->buf)
		return rt__fail(ctx, RT_ESTATE, "rt_device_buffers: called twice");
	if ((rc = x->dev->ops->alloc(x->dev, bytes ? bytes : 1, &x->buf)))
		return dev_err(ctx, rc, "the buffer block on the device");
	*base = x->buf;
	return RT_OK;
}

/* src (n floats) to dst on the device, through stage (n storage elements)
 * when the device stores bf16. */
static int put(rt_dev *d, void *dst, const float *src, int64_t n, void *stage)
{
	const void *from = src;
	if (d->bf16) {
		uint16_t *h = stage;
		for (int64_t k = 0; k < n; k++)
			h[k] = dev_to_bf16(src[k]);
		from = stage;
	}
	int rc = d->ops->copy(d, dst, from, (size_t)n * dev_esz(d), DEV_H2D);
	return rc ? rc : d->ops->sync(d); /* the staging buffer may be reused next */
}

static int x_put(rt_ctx *ctx, void *dst, const float *src, int64_t n)
{
	rt_dev *d = ctx->xs->dev;
	void *stage = d->bf16 ? malloc((size_t)(n ? n : 1) * 2) : NULL;
	if (d->bf16 && !stage)
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	int rc = put(d, dst, src, n, stage);
	free(stage);
	return rc ? dev_err(ctx, rc, "values to the device") : RT_OK;
}

/* The host's state of every layer -> the device: the parameters in the
 * storage type and in f32, the moments; the gradients zeroed. */
static int x_upload(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		const dopt *o = &x->opt[i];
		size_t fb = (size_t)l->sz.params * sizeof(float), mb = rt__mom_bytes(l);
		int rc = put(d, x->dlay[i].p, l->p, l->sz.params, x->stage);
		if (!rc)
			rc = d->ops->copy(d, o->p32, l->p, fb, DEV_H2D);
		if (!rc && mb)
			rc = d->ops->copy(d, o->m, l->m, mb, DEV_H2D);
		if (!rc && mb)
			rc = d->ops->copy(d, o->v, l->v, mb, DEV_H2D);
		if (!rc)
			rc = d->ops->zero(d, x->dlay[i].g, fb);
		if (!rc)
			rc = d->ops->sync(d);
		if (rc)
			return dev_err(ctx, rc, "the model's state to the device");
	}
	x->stale = false;
	return RT_OK;
}

static int x_pull(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	if (!x->stale)
		return RT_OK;
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		const dopt *o = &x->opt[i];
		size_t fb = (size_t)l->sz.params * sizeof(float), mb = rt__mom_bytes(l);
		int rc = d->ops->copy(d, l->p, o->p32, fb, DEV_D2H);
		if (!rc && mb)
			rc = d->ops->copy(d, l->m, o->m, mb, DEV_D2H);
		if (!rc && mb)
			rc = d->ops->copy(d, l->v, o->v, mb, DEV_D2H);
		if (rc)
			return dev_err(ctx, rc, "the model's state from the device");
	}
	x->stale = false;
	return RT_OK;
}

/* The optimizer step of elements [a, b) of layer h, each with its own
 * tensor's constants (rt__optim_range's cut, on the device), then h's
 * gradients cleared. */
static int x_update(rt_ctx *ctx, int h, int64_t a, int64_t b)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	const rt_lay *l = &ctx->lay[h];
	const dev_layer *L = &x->dlay[h];
	const dopt *o = &x->opt[h];
	int64_t off[RT_MAX_TENSORS], len[RT_MAX_TENSORS];
	bool dec[RT_MAX_TENSORS];
	int n, rc = rt__decays(&L->desc, off, len, dec, &n);
	if (rc)
		return rt__fail(ctx, rc, "step %lld: layer %lld: %s", rt__step_no(ctx),
		                (long long)l->index, rt_strerror(rc));
	for (int k = 0; !rc && k < n; k++) {
		int64_t lo = off[k] > a ? off[k] : a, hi = off[k] + len[k] < b ? off[k] + len[k] : b;
		if (lo >= hi)
			continue;
		rt_adamw_k c;
		rt__adamw_consts(&ctx->opt, ctx->step + 1, dec[k] && ctx->train.weight_decay > 0, &c);
		float *p32 = o->p32 + lo, *g = L->g + lo, *m = o->m + (lo - l->mlo), *v = o->v + (lo - l->mlo);
		void *p = dev_at(d, L->p, lo);
		long cnt = (long)(hi - lo);
		rc = dev_each(d, L, "optim_adamw", hi - lo,
		              (void *[]){&p32, &p, &g, &m, &v, &cnt, &c.lr, &c.step_size, &c.b1, &c.b2,
		                         &c.c1, &c.c2, &c.eps, &c.bc2_sqrt, &c.keep, &c.sgd});
	}
	if (!rc)
		rc = d->ops->zero(d, L->g, (size_t)L->nparams * sizeof(float));
	if (rc)
		return rt__fail(ctx, rc, "step %lld: the optimizer of layer %lld on the device: %s",
		                rt__step_no(ctx), (long long)l->index, d->err);
	x->stale = true;
	return RT_OK;
}

/* The layers rt_update has not updated (dp <= 1: whole moments). */
static int x_optimize(rt_ctx *ctx)
{
	int rc;
	for (int i = 0; i < ctx->nlay; i++)
		if (!ctx->lay[i].updated && (rc = x_update(ctx, i, 0, ctx->lay[i].sz.params)))
			return rc;
	return RT_OK;
}

static int x_dp_copy(rt_ctx *ctx, int h, bool grad, int64_t a, int64_t b, void *buf, bool to_buf)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	const dev_layer *L = &x->dlay[h];
	float *at = (grad ? L->g : x->opt[h].p32) + a;
	size_t nb = (size_t)(b - a) * sizeof(float);
	int rc = nb ? d->ops->copy(d, to_buf ? buf : at, to_buf ? at : buf, nb, DEV_D2D) : RT_OK;
	if (!rc && !grad && !to_buf && nb) {
		/* the kernels' copy, rounded from the master as the step rounds it */
		void *p = dev_at(d, L->p, a);
		long cnt = (long)(b - a);
		rc = dev_each(d, L, "optim_store", b - a, (void *[]){&at, &p, &cnt});
		x->stale = true;
	}
	return rc ? rt__fail(ctx, rc, "step %lld: layer %lld's %s %s the bucket's buffer on the "
	                     "device: %s", rt__step_no(ctx), (long long)ctx->lay[h].index,
	                     grad ? "gradients" : "parameters", to_buf ? "into" : "from", d->err)
	          : RT_OK;
}

static int x_grad_sync(rt_ctx *ctx, int h, int64_t a, int64_t b, bool to_host)
{
	rt_dev *d = ctx->xs->dev;
	rt_lay *l = &ctx->lay[h];
	float *g = ctx->xs->dlay[h].g;
	int rc = RT_OK;
	if (to_host)
		rc = d->ops->copy(d, l->g, g, (size_t)l->sz.params * sizeof(float), DEV_D2H);
	else if (b > a && !(rc = d->ops->copy(d, g + a, l->g + a, (size_t)(b - a) * sizeof(float), DEV_H2D)))
		rc = d->ops->sync(d); /* the host may write l->g next */
	return rc ? rt__fail(ctx, rc, "step %lld: layer %lld's gradients %s the host: %s",
	                     rt__step_no(ctx), (long long)l->index, to_host ? "to" : "from", d->err)
	          : RT_OK;
}

/* Clipping's scale, on the device's gradients (optim_scale: the host's
 * f32 product). */
static int x_scale_grad(rt_ctx *ctx, int h, int64_t a, int64_t b, float s)
{
	rt_dev *d = ctx->xs->dev;
	const dev_layer *L = &ctx->xs->dlay[h];
	float *g = L->g + a;
	long cnt = (long)(b - a);
	int rc = b > a ? dev_each(d, L, "optim_scale", b - a, (void *[]){&g, &cnt, &s}) : RT_OK;
	return rc ? rt__fail(ctx, rc, "step %lld: clipping layer %lld's gradients on the device: %s",
	                     rt__step_no(ctx), (long long)ctx->lay[h].index, d->err)
	          : RT_OK;
}

static int x_clear(rt_ctx *ctx, void *p, size_t bytes)
{
	rt_dev *d = ctx->xs->dev;
	return bytes ? dev_rc(ctx, d->ops->zero(d, p, bytes)) : RT_OK;
}

/* The device's work waited for; the ids' staging may be written again. */
static int dsync(struct rt_exec_state *x)
{
	int rc = x->dev->ops->sync(x->dev);
	if (!rc)
		x->ids_busy = false;
	return rc;
}

static int x_model_init(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	int rc;
	size_t scratch = 0, stage = 0;
	if (!(x->dlay = calloc((size_t)ctx->nlay, sizeof *x->dlay)) ||
	    !(x->opt = calloc((size_t)ctx->nlay, sizeof *x->opt)))
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		dev_layer *L = &x->dlay[i];
		rt_sizes sz;
		if ((rc = dev_layer_setup(L, &l->desc)) || (rc = dev_layer_sizes(&l->desc, d->bf16, &sz)))
			return rt__fail(ctx, rc, "device: layer %lld (%s): %s", (long long)l->index,
			                rt__kind_name(l->desc.kind), rt_strerror(rc));
		L->mod = x->mod[i];
		if ((rc = dev_layer_prepare(d, L)))
			return dev_err(ctx, rc, "the layer's library calls");
		size_t pb = (size_t)L->nparams * dev_esz(d), gb = (size_t)L->nparams * sizeof(float);
		size_t mb = rt__mom_bytes(l); /* this replica's part with the distributed optimizer */
		void *g, *p32, *m, *v;
		if ((rc = d->ops->alloc(d, pb ? pb : 1, &L->p)) || (rc = d->ops->alloc(d, gb ? gb : 1, &g)) ||
		    (rc = d->ops->alloc(d, gb ? gb : 1, &p32)) || (rc = d->ops->alloc(d, mb ? mb : 1, &m)) ||
		    (rc = d->ops->alloc(d, mb ? mb : 1, &v)))
			return dev_err(ctx, rc, "device memory for the model's state");
		L->g = g;
		x->opt[i] = (dopt){p32, m, v};
		if ((size_t)sz.scratch > scratch)
			scratch = (size_t)sz.scratch;
		if (pb > stage)
			stage = pb;
	}
	const rt_train *t = &ctx->train;
	void *p;
	if ((rc = d->ops->alloc(d, scratch ? scratch : 1, &x->scratch)))
		return dev_err(ctx, rc, "device memory for the scratch");
	for (int i = 0; i < ctx->nlay; i++) {
		x->need[0] |= ctx->lay[i].desc.kind == RT_EMBEDDING;
		x->need[1] |= ctx->lay[i].desc.kind == RT_HEAD;
	}
	x->ids_step = x->ids_pos = -1;
	if (x->need[0] || x->need[1]) {
		size_t ib = (size_t)(2 * t->microbatches * t->seq * t->mbs) * sizeof(int32_t);
		if ((rc = d->ops->alloc(d, ib, &p)))
			return dev_err(ctx, rc, "device memory for the token ids");
		x->ids = p;
		if ((rc = d->ops->host_alloc(d, ib, &p)))
			return dev_err(ctx, rc, "page-locked host memory for the token ids");
		x->hids = p;
	}
	if ((rc = d->ops->alloc(d, (size_t)t->microbatches * 2 * sizeof(double), &p)))
		return dev_err(ctx, rc, "device memory for the losses");
	x->loss = p;
	if ((rc = d->ops->alloc(d, sizeof(int), &p)) || (rc = d->ops->zero(d, p, sizeof(int))))
		return dev_err(ctx, rc, "device memory");
	x->flag = p;
	if (!(x->stage = malloc(stage ? stage : 1)))
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	return x_upload(ctx);
}

/* Every micro-batch's ids of the step (or evaluation pass, or profile) --
 * inputs if the rank runs an embedding, targets if a head -- checked, into
 * the page-locked staging and to the device in one copy on the compute
 * stream that the host does not wait for, before the first F that reads
 * them.  The ids are a function of the stream (the training's or the
 * evaluation's) and the data position (rt__fill_ids), so they are made
 * again when the step, the position or the stream changes.  The staging
 * is written only after the device was waited for since its last copy:
 * a step waits for it at its end (collect), so a training run never waits
 * here. */
static int put_ids(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	const rt_train *t = &ctx->train;
	rt_dev *d = x->dev;
	int rc;
	if (x->ids_step == ctx->step && x->ids_pos == ctx->data_pos && x->ids_eval == ctx->evaluating)
		return RT_OK;
	if (x->ids_busy && (rc = dsync(x)))
		return dev_err(ctx, rc, "the device's work before the token ids");
	int64_t n = t->seq * t->mbs, M = t->microbatches;
	for (int k = 0; k < 2; k++)
		for (int64_t mb = 0; x->need[k] && mb < M; mb++) {
			rt__fill_ids(ctx, mb, k == 1);
			for (int64_t i = 0; i < n; i++)
				if (ctx->idbuf[i] < 0 || ctx->idbuf[i] >= t->vocab)
					return rt__fail(ctx, RT_ERANGE, "%s %d of micro-batch %lld at position %lld "
					                "outside the vocabulary of %lld", k ? "target" : "token",
					                ctx->idbuf[i], (long long)mb, (long long)i,
					                (long long)t->vocab);
			memcpy(x->hids + (k * M + mb) * n, ctx->idbuf, (size_t)n * sizeof(int32_t));
		}
	int64_t from = x->need[0] ? 0 : M * n, count = (x->need[0] + x->need[1]) * M * n;
	if ((rc = d->ops->put_async(d, x->ids + from, x->hids + from, (size_t)count * sizeof(int32_t))))
		return dev_err(ctx, rc, "token ids to the device");
	x->ids_busy = true;
	x->ids_step = ctx->step;
	x->ids_pos = ctx->data_pos;
	x->ids_eval = ctx->evaluating;
	return RT_OK;
}

static int x_f(rt_ctx *ctx, int h, int64_t mb, const void *xin, void *y, void *act)
{
	struct rt_exec_state *x = ctx->xs;
	const dev_layer *L = &x->dlay[h];
	dev_io io = {.x = xin, .y = y, .act = act, .scratch = x->scratch, .err = x->flag};
	int rc;
	if (L->desc.kind == RT_EMBEDDING || L->desc.kind == RT_HEAD) {
		const rt_train *t = &ctx->train;
		if ((rc = put_ids(ctx)))
			return rc;
		io.tok = x->ids + ((L->desc.kind == RT_HEAD) * t->microbatches + mb) * t->seq * t->mbs;
	}
	if (L->desc.kind == RT_HEAD) {
		io.loss = x->loss + 2 * mb;
		ctx->mb_count[mb] = 0; /* F ran; the loss comes back at the step's end */
	}
	rc = dev_forward(x->dev, L, &io);
	return rc ? dev_err(ctx, rc, "F") : RT_OK;
}

static int x_b(rt_ctx *ctx, int h, const void *dy, float dscale, void *dx, const void *act, void *ws)
{
	struct rt_exec_state *x = ctx->xs;
	dev_io io = {.dy = dy, .dx = dx, .dscale = dscale, .act = (void *)act, .ws = ws,
	             .scratch = x->scratch};
	int rc = dev_backward_b(x->dev, &x->dlay[h], &io);
	return rc ? dev_err(ctx, rc, "B") : RT_OK;
}

static int x_w(rt_ctx *ctx, int h, const void *ws)
{
	struct rt_exec_state *x = ctx->xs;
	dev_io io = {.ws = (void *)ws, .scratch = x->scratch};
	int rc = dev_backward_w(x->dev, &x->dlay[h], &io);
	return rc ? dev_err(ctx, rc, "W") : RT_OK;
}

/* The head's losses of the step -> the host. */
static int x_collect(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	int rc;
	if ((rc = dsync(x)))
		return dev_err(ctx, rc, "the step's work on the device");
	if (ctx->head < 0)
		return RT_OK;
	int64_t n = ctx->train.microbatches;
	double *l = malloc((size_t)n * 2 * sizeof *l);
	if (!l)
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	rc = d->ops->copy(d, l, x->loss, (size_t)n * 2 * sizeof *l, DEV_D2H);
	for (int64_t m = 0; !rc && m < n; m++)
		if (ctx->mb_count[m] >= 0) {
			ctx->mb_loss[m] = l[2 * m];
			ctx->mb_count[m] = (int64_t)l[2 * m + 1];
		}
	free(l);
	return rc ? dev_err(ctx, rc, "losses from the device") : RT_OK;
}

static int x_zero_grad(rt_ctx *ctx, int h)
{
	rt_dev *d = ctx->xs->dev;
	return dev_rc(ctx, d->ops->zero(d, ctx->xs->dlay[h].g, (size_t)ctx->lay[h].sz.params * sizeof(float)));
}

static int x_sizes(rt_ctx *ctx, int h, rt_sizes *sz)
{
	return dev_layer_sizes(&ctx->lay[h].desc, ctx->xs->dev->bf16, sz);
}

static int x_alloc(rt_ctx *ctx, size_t bytes, void **p)
{
	rt_dev *d = ctx->xs->dev;
	int rc = d->ops->alloc(d, bytes ? bytes : 1, p);
	if (!rc && (rc = d->ops->zero(d, *p, bytes))) {
		d->ops->free(d, *p);
		*p = NULL;
	}
	return dev_rc(ctx, rc);
}

static void x_release(rt_ctx *ctx, void *p)
{
	rt_dev *d = ctx->xs->dev;
	if (p)
		d->ops->free(d, p);
}

static int x_to_host(rt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	rt_dev *d = ctx->xs->dev;
	return dev_rc(ctx, d->ops->copy(d, dst, src, bytes, DEV_D2H));
}

static int x_from_host(rt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	rt_dev *d = ctx->xs->dev;
	int rc = d->ops->copy(d, dst, src, bytes, DEV_H2D);
	if (!rc)
		rc = d->ops->sync(d); /* the host copy may go once this returns */
	return dev_rc(ctx, rc);
}

static int x_sync(rt_ctx *ctx)
{
	return dev_rc(ctx, dsync(ctx->xs));
}

/* A memset of the device's memory evicts its last-level cache. */
static int x_evict(rt_ctx *ctx, void *buf, size_t bytes)
{
	rt_dev *d = ctx->xs->dev;
	return dev_rc(ctx, d->ops->zero(d, buf, bytes));
}

static void x_info(const rt_ctx *ctx, rt_exec_info *out)
{
	const rt_dev *d = ctx->xs->dev;
	*out = (rt_exec_info){.device = d->name, .bf16 = d->bf16, .value_bytes = dev_esz(d),
	                      .cache_bytes = d->cache_bytes};
}

/* The trace's marks: events on the compute stream (the emulator: the
 * host's clock, its work done when the call returns). */
static int x_mark(rt_ctx *ctx, void **m)
{
	rt_dev *d = ctx->xs->dev;
	return dev_rc(ctx, d->ops->mark(d, m));
}

static int x_since(rt_ctx *ctx, void *from, void *to, int64_t *ns)
{
	rt_dev *d = ctx->xs->dev;
	double ms;
	int rc = d->ops->elapsed(d, from, to, &ms);
	if (!rc)
		*ns = (int64_t)llround(ms * 1e6);
	return dev_rc(ctx, rc);
}

static void x_unmark(rt_ctx *ctx, void *m)
{
	rt_dev *d = ctx->xs->dev;
	d->ops->unmark(d, m);
}

static void x_abort(rt_ctx *ctx)
{
	rt_dev *d = ctx->xs->dev;
	if (d->ops->abort)
		d->ops->abort(d);
}

static void x_free(rt_ctx *ctx)
{
	struct rt_exec_state *x = ctx->xs;
	rt_dev *d = x->dev;
	if (x->dcomm && x->dcomm->destroy)
		x->dcomm->destroy(x->dcomm->self);
	d->ops->sync(d);
	for (int i = 0; x->dlay && i < ctx->nlay; i++) {
		d->ops->free(d, x->dlay[i].p);
		d->ops->free(d, x->dlay[i].g);
		if (x->opt) {
			d->ops->free(d, x->opt[i].p32);
			d->ops->free(d, x->opt[i].m);
			d->ops->free(d, x->opt[i].v);
		}
	}
	d->ops->free(d, x->scratch);
	d->ops->free(d, x->ids);
	d->ops->host_free(d, x->hids);
	d->ops->free(d, x->loss);
	d->ops->free(d, x->flag);
	d->ops->free(d, x->buf);
	free(x->dlay);
	free(x->opt);
	free(x->stage);
	d->ops->destroy(d);
	free(x);
	ctx->xs = NULL;
	ctx->dcomm = NULL;
}

const rt_exec rt__exec_dev = {
    .name = "the device executor",
    .on = " on the device",
    .model_init = x_model_init,
    .f = x_f,
    .b = x_b,
    .w = x_w,
    .collect = x_collect,
    .optimize = x_optimize,
    .pull = x_pull,
    .upload = x_upload,
    .zero_grad = x_zero_grad,
    .sizes = x_sizes,
    .alloc = x_alloc,
    .release = x_release,
    .put = x_put,
    .to_host = x_to_host,
    .from_host = x_from_host,
    .sync = x_sync,
    .evict = x_evict,
    .info = x_info,
    .dp_copy = x_dp_copy,
    .grad_sync = x_grad_sync,
    .scale_grad = x_scale_grad,
    .update = x_update,
    .clear = x_clear,
    .mark = x_mark,
    .since = x_since,
    .unmark = x_unmark,
    .abort = x_abort,
    .free = x_free,
};
