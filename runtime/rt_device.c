/* rt_device.c: a rank whose layers run on a device (the CUDA target;
 * docs/cuda.md, "The rank program on the device").
 *
 * The generated program attaches a device after rt_init
 * (rt_device_attach_cuda in libocto_rt_cuda, or rt_device_attach_emu for
 * the host emulator) and takes its buffer block from rt_device_buffers;
 * everything else is the CPU program's sequence of calls.  Here:
 *
 *   - the host keeps the master state: f32 parameters, AdamW moments and
 *     the gradients' step-end copy, in the arena as on a CPU rank, so
 *     rt_step_end's AdamW, checkpoints and the model hash are the CPU's
 *     code;
 *   - the device holds per layer the parameters in its storage type
 *     (uploaded after init, each optimizer step and a resume) and f32
 *     gradients that W accumulates; the step's end brings the gradients
 *     and the head's losses back, and zeroes the device's gradients;
 *   - F, B, W run dev_forward / dev_backward_b / dev_backward_w on the
 *     device buffers the program passes; token ids are made (and checked)
 *     on the host and copied to the device before the embedding's or the
 *     head's F. */
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "rt_internal.h"

static int dev_err(rt_ctx *ctx, int rc, const char *what)
{
	return rt__fail(ctx, rc, "%s: %s", what, ctx->dev->err);
}

int rt__dev_attach(rt_ctx *ctx, rt_dev *dev, const int32_t *layer_mod)
{
	if (ctx->have_model || ctx->dev) {
		dev->ops->destroy(dev);
		return rt__fail(ctx, RT_ESTATE, "rt_device_attach: after rt_model_init, or twice");
	}
	ctx->dev = dev;
	ctx->dev_mod = layer_mod;
	return RT_OK;
}

int rt_device_attach_emu(rt_ctx *ctx, int bf16, int nmods, const char *const *names,
                         const void *const *tables, const int32_t *layer_mod)
{
	rt_dev *dev;
	int rc;
	if (!ctx || nmods < 0 || (nmods && (!names || !tables)) || !layer_mod)
		return RT_EARG;
	if ((rc = dev_emu_create(ctx->rank, bf16 != 0, &dev)))
		return rt__fail(ctx, rc, "the device emulator: out of memory");
	for (int i = 0; i < nmods; i++)
		if ((rc = dev_emu_add_table(dev, names[i], tables[i]))) {
			rt__fail(ctx, rc, "the device emulator: module %s: %s", names[i], dev->err);
			dev->ops->destroy(dev);
			return rc;
		}
	return rt__dev_attach(ctx, dev, layer_mod);
}

int rt_device_buffers(rt_ctx *ctx, size_t bytes, void **base)
{
	int rc;
	if (!ctx || !base)
		return RT_EARG;
	if (!ctx->dev)
		return rt__fail(ctx, RT_ESTATE, "rt_device_buffers: no device attached");
	if (ctx->dev_buf)
		return rt__fail(ctx, RT_ESTATE, "rt_device_buffers: called twice");
	if ((rc = ctx->dev->ops->alloc(ctx->dev, bytes ? bytes : 1, &ctx->dev_buf)))
		return dev_err(ctx, rc, "the buffer block on the device");
	*base = ctx->dev_buf;
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

int rt__dev_put(rt_ctx *ctx, void *dst, const float *src, int64_t n)
{
	void *stage = ctx->dev->bf16 ? malloc((size_t)(n ? n : 1) * 2) : NULL;
	if (ctx->dev->bf16 && !stage)
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	int rc = put(ctx->dev, dst, src, n, stage);
	free(stage);
	return rc ? dev_err(ctx, rc, "values to the device") : RT_OK;
}

/* The host's f32 parameters of every layer -> the device's storage. */
int rt__dev_upload(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nlay; i++) {
		int rc = put(ctx->dev, ctx->dlay[i].p, ctx->lay[i].p, ctx->lay[i].sz.params, ctx->dev_stage);
		if (rc)
			return dev_err(ctx, rc, "parameters to the device");
	}
	return RT_OK;
}

int rt__dev_model_init(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	int rc;
	size_t scratch = 0, stage = 0;
	if (!(ctx->dlay = calloc((size_t)ctx->nlay, sizeof *ctx->dlay)))
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		dev_layer *L = &ctx->dlay[i];
		rt_sizes sz;
		if ((rc = dev_layer_setup(L, &l->desc)) || (rc = dev_layer_sizes(&l->desc, d->bf16, &sz)))
			return rt__fail(ctx, rc, "device: layer %lld (%s): %s", (long long)l->index,
			                rt__kind_name(l->desc.kind), rt_strerror(rc));
		L->mod = ctx->dev_mod[i];
		size_t pb = (size_t)L->nparams * dev_esz(d), gb = (size_t)L->nparams * sizeof(float);
		void *g;
		if ((rc = d->ops->alloc(d, pb ? pb : 1, &L->p)) || (rc = d->ops->alloc(d, gb ? gb : 1, &g)) ||
		    (rc = d->ops->zero(d, g, gb)))
			return dev_err(ctx, rc, "device memory for the parameters");
		L->g = g;
		if ((size_t)sz.scratch > scratch)
			scratch = (size_t)sz.scratch;
		if (pb > stage)
			stage = pb;
	}
	const rt_train *t = &ctx->train;
	void *p;
	if ((rc = d->ops->alloc(d, scratch ? scratch : 1, &ctx->dev_scratch)) ||
	    (rc = d->ops->alloc(d, (size_t)(t->seq * t->mbs) * sizeof(int32_t), &p)))
		return dev_err(ctx, rc, "device memory for the scratch");
	ctx->dev_tok = p;
	if ((rc = d->ops->alloc(d, (size_t)t->microbatches * 2 * sizeof(double), &p)))
		return dev_err(ctx, rc, "device memory for the losses");
	ctx->dev_loss = p;
	if ((rc = d->ops->alloc(d, sizeof(int), &p)) || (rc = d->ops->zero(d, p, sizeof(int))))
		return dev_err(ctx, rc, "device memory");
	ctx->dev_flag = p;
	if (!(ctx->dev_stage = malloc(stage ? stage : 1)))
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	return rt__dev_upload(ctx);
}

/* The ids of micro-batch mb (inputs, or targets) on the device. */
static int put_ids(rt_ctx *ctx, int64_t mb, bool targets)
{
	rt__fill_ids(ctx, mb, targets);
	const rt_train *t = &ctx->train;
	int64_t n = t->seq * t->mbs;
	for (int64_t i = 0; i < n; i++)
		if (ctx->idbuf[i] < 0 || ctx->idbuf[i] >= t->vocab)
			return rt__fail(ctx, RT_ERANGE, "token %d at position %lld outside the vocabulary of %lld",
			                ctx->idbuf[i], (long long)i, (long long)t->vocab);
	rt_dev *d = ctx->dev;
	int rc = d->ops->copy(d, ctx->dev_tok, ctx->idbuf, (size_t)n * sizeof(int32_t), DEV_H2D);
	return rc ? dev_err(ctx, rc, "token ids to the device") : RT_OK;
}

int rt__dev_f(rt_ctx *ctx, int h, int64_t mb, const void *x, void *y, void *act)
{
	const dev_layer *L = &ctx->dlay[h];
	dev_io io = {.x = x, .y = y, .act = act, .scratch = ctx->dev_scratch, .err = ctx->dev_flag};
	int rc;
	if (L->desc.kind == RT_EMBEDDING || L->desc.kind == RT_HEAD) {
		if ((rc = put_ids(ctx, mb, L->desc.kind == RT_HEAD)))
			return rc;
		io.tok = ctx->dev_tok;
	}
	if (L->desc.kind == RT_HEAD) {
		io.loss = ctx->dev_loss + 2 * mb;
		ctx->mb_count[mb] = 0; /* F ran; the loss comes back at the step's end */
	}
	/* The ids' buffer is reused by the next F: the copy and the kernels
	 * are in one stream's order (the emulator's copies are synchronous). */
	rc = dev_forward(ctx->dev, L, &io);
	return rc ? dev_err(ctx, rc, "F") : RT_OK;
}

int rt__dev_b(rt_ctx *ctx, int h, const void *dy, float dscale, void *dx, const void *act, void *ws)
{
	dev_io io = {.dy = dy, .dx = dx, .dscale = dscale, .act = (void *)act, .ws = ws,
	             .scratch = ctx->dev_scratch};
	int rc = dev_backward_b(ctx->dev, &ctx->dlay[h], &io);
	return rc ? dev_err(ctx, rc, "B") : RT_OK;
}

int rt__dev_w(rt_ctx *ctx, int h, const void *ws)
{
	dev_io io = {.ws = (void *)ws, .scratch = ctx->dev_scratch};
	int rc = dev_backward_w(ctx->dev, &ctx->dlay[h], &io);
	return rc ? dev_err(ctx, rc, "W") : RT_OK;
}

/* The step's gradients and the head's losses -> the host; the device's
 * gradients back to zero for the next step. */
int rt__dev_collect(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	int rc;
	if ((rc = d->ops->sync(d)))
		return dev_err(ctx, rc, "the step's work on the device");
	for (int i = 0; i < ctx->nlay; i++) {
		size_t gb = (size_t)ctx->lay[i].sz.params * sizeof(float);
		if ((rc = d->ops->copy(d, ctx->lay[i].g, ctx->dlay[i].g, gb, DEV_D2H)) ||
		    (rc = d->ops->zero(d, ctx->dlay[i].g, gb)))
			return dev_err(ctx, rc, "gradients from the device");
	}
	if (ctx->head >= 0) {
		int64_t n = ctx->train.microbatches;
		double *l = malloc((size_t)n * 2 * sizeof *l);
		if (!l)
			return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
		rc = d->ops->copy(d, l, ctx->dev_loss, (size_t)n * 2 * sizeof *l, DEV_D2H);
		for (int64_t m = 0; !rc && m < n; m++)
			if (ctx->mb_count[m] >= 0) {
				ctx->mb_loss[m] = l[2 * m];
				ctx->mb_count[m] = (int64_t)l[2 * m + 1];
			}
		free(l);
		if (rc)
			return dev_err(ctx, rc, "losses from the device");
	}
	return RT_OK;
}

void rt__dev_free(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	if (!d)
		return;
	d->ops->sync(d);
	for (int i = 0; ctx->dlay && i < ctx->nlay; i++) {
		d->ops->free(d, ctx->dlay[i].p);
		d->ops->free(d, ctx->dlay[i].g);
	}
	d->ops->free(d, ctx->dev_scratch);
	d->ops->free(d, ctx->dev_tok);
	d->ops->free(d, ctx->dev_loss);
	d->ops->free(d, ctx->dev_flag);
	d->ops->free(d, ctx->dev_buf);
	free(ctx->dlay);
	free(ctx->dev_stage);
	d->ops->destroy(d);
	ctx->dev = NULL;
}
