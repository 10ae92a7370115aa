/* rt_device.c: a rank whose layers run on a device (the CUDA target;
 * docs/cuda.md, "The rank program on the device").
 *
 * The generated program attaches a device after rt_init
 * (rt_device_attach_cuda in libocto_rt_cuda, or rt_device_attach_emu for
 * the host emulator) and takes its buffer block from rt_device_buffers;
 * everything else is the CPU program's sequence of calls.  Here:
 *
 *   - the device holds each layer's whole training state: the parameters
 *     in its storage type (what the kernels read), and in f32 the master
 *     parameters, the gradients W accumulates and the AdamW moments; the
 *     optimizer step runs there (optim_adamw: the host's AdamW operation
 *     for operation, so the weights are the same bits);
 *   - the host's arrays (the CPU rank's layout) are a copy: uploaded after
 *     init and a resume, brought back (rt__dev_pull) only when a
 *     checkpoint, the model hash or rt_layer_get reads them; the step's
 *     end brings back only the head's losses;
 *   - F, B, W run dev_forward / dev_backward_b / dev_backward_w on the
 *     device buffers the program passes; token ids are made (and checked)
 *     on the host and copied to the device before the embedding's or the
 *     head's F. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "rt_internal.h"

/* A layer's optimizer state on the device (f32, the layer's layout). */
struct rt_dopt {
	float *p32, *m, *v;
};

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

/* ---- the emulator's communicators ------------------------------------------- */

/* Under the emulator device memory is host memory, so MPI can move it as
 * it is (OCTO_COMM unset).  OCTO_COMM=mpi moves it through host copies, and
 * OCTO_COMM=nccl through a stand-in for NCCL, as a GPU's ranks do, so that
 * those paths of the runtime run without a GPU too.  The stand-in keeps
 * NCCL's semantics over MPI: no tags, messages between two ranks matched in
 * the order they are posted (MPI's non-overtaking rule on a communicator of
 * its own), and a group's operations completing as one. */
typedef struct emu_group {
	int n, cap;
	MPI_Request *r;
} emu_group;

typedef struct emu_comm {
	rt_dcomm c;
	MPI_Comm comm;
	emu_group *open;
	char err[256];
} emu_comm;

static int ec_group_begin(void *s)
{
	emu_comm *e = s;
	if (!(e->open = calloc(1, sizeof *e->open))) {
		snprintf(e->err, sizeof e->err, "out of host memory");
		return RT_ENOMEM;
	}
	return RT_OK;
}

static int ec_post(emu_comm *e, bool send, void *buf, size_t bytes, int peer)
{
	emu_group *g = e->open;
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4;
		MPI_Request *r = realloc(g->r, (size_t)cap * sizeof *r);
		if (!r) {
			snprintf(e->err, sizeof e->err, "out of host memory");
			return RT_ENOMEM;
		}
		g->r = r;
		g->cap = cap;
	}
	int rc = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 0, e->comm, &g->r[g->n])
	              : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 0, e->comm, &g->r[g->n]);
	if (rc != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "%s failed (the emulator's NCCL)", send ? "MPI_Isend" : "MPI_Irecv");
		return RT_EMPI;
	}
	g->n++;
	return RT_OK;
}

static int ec_send(void *s, const void *buf, size_t bytes, int peer)
{
	return ec_post(s, true, (void *)buf, bytes, peer);
}

static int ec_recv(void *s, void *buf, size_t bytes, int peer)
{
	return ec_post(s, false, buf, bytes, peer);
}

static int ec_group_end(void *s, void **done)
{
	emu_comm *e = s;
	*done = e->open;
	e->open = NULL;
	return RT_OK;
}

static int ec_test(void *s, void *done, bool *complete)
{
	emu_comm *e = s;
	emu_group *g = done;
	int flag = 0;
	if (MPI_Testall(g->n, g->r, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
		snprintf(e->err, sizeof e->err, "MPI_Testall failed (the emulator's NCCL)");
		return RT_EMPI;
	}
	*complete = flag;
	return RT_OK;
}

static void ec_release(void *s, void *done)
{
	(void)s;
	emu_group *g = done;
	for (int i = 0; i < g->n; i++)
		if (g->r[i] != MPI_REQUEST_NULL)
			MPI_Request_free(&g->r[i]);
	free(g->r);
	free(g);
}

static const char *ec_error(void *s)
{
	return ((emu_comm *)s)->err;
}

void rt__dev_free_comm(rt_ctx *ctx)
{
	emu_comm *e = ctx->emu_comm;
	if (!e)
		return;
	if (e->open)
		ec_release(e, e->open);
	MPI_Comm_free(&e->comm);
	free(e);
	ctx->emu_comm = NULL;
}

/* OCTO_COMM for an emulated rank: see above. */
static int emu_comm_setup(rt_ctx *ctx)
{
	const char *mode = getenv("OCTO_COMM");
	if (!mode || !*mode)
		return RT_OK;
	if (strcmp(mode, "mpi") == 0) {
		ctx->dev_mpi_stage = true;
		return RT_OK;
	}
	if (strcmp(mode, "nccl") != 0)
		return rt__fail(ctx, RT_EARG, "OCTO_COMM=%s: the device's ranks talk through nccl or mpi", mode);
	emu_comm *e = calloc(1, sizeof *e);
	if (!e)
		return rt__fail(ctx, RT_ENOMEM, "device: out of host memory");
	if (MPI_Comm_dup(MPI_COMM_WORLD, &e->comm) != MPI_SUCCESS) {
		free(e);
		return rt__fail(ctx, RT_EMPI, "MPI_Comm_dup failed (the emulator's NCCL)");
	}
	e->c = (rt_dcomm){.self = e, .group_begin = ec_group_begin, .send = ec_send, .recv = ec_recv,
	                  .group_end = ec_group_end, .test = ec_test, .release = ec_release,
	                  .error = ec_error};
	ctx->emu_comm = e;
	ctx->dcomm = &e->c;
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
	if ((rc = rt__dev_attach(ctx, dev, layer_mod)))
		return rc;
	return emu_comm_setup(ctx);
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

/* The host's state of every layer -> the device: the parameters in the
 * storage type and in f32, the moments; the gradients zeroed. */
int rt__dev_upload(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		const struct rt_dopt *o = &ctx->dopt[i];
		size_t fb = (size_t)l->sz.params * sizeof(float);
		int rc = put(d, ctx->dlay[i].p, l->p, l->sz.params, ctx->dev_stage);
		if (!rc)
			rc = d->ops->copy(d, o->p32, l->p, fb, DEV_H2D);
		if (!rc)
			rc = d->ops->copy(d, o->m, l->m, fb, DEV_H2D);
		if (!rc)
			rc = d->ops->copy(d, o->v, l->v, fb, DEV_H2D);
		if (!rc)
			rc = d->ops->zero(d, ctx->dlay[i].g, fb);
		if (!rc)
			rc = d->ops->sync(d);
		if (rc)
			return dev_err(ctx, rc, "the model's state to the device");
	}
	ctx->dev_stale = false;
	return RT_OK;
}

int rt__dev_pull(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	if (!ctx->dev_stale)
		return RT_OK;
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		const struct rt_dopt *o = &ctx->dopt[i];
		size_t fb = (size_t)l->sz.params * sizeof(float);
		int rc = d->ops->copy(d, l->p, o->p32, fb, DEV_D2H);
		if (!rc)
			rc = d->ops->copy(d, l->m, o->m, fb, DEV_D2H);
		if (!rc)
			rc = d->ops->copy(d, l->v, o->v, fb, DEV_D2H);
		if (rc)
			return dev_err(ctx, rc, "the model's state from the device");
	}
	ctx->dev_stale = false;
	return RT_OK;
}

int rt__dev_optimize(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	for (int i = 0; i < ctx->nlay; i++) {
		const dev_layer *L = &ctx->dlay[i];
		const struct rt_dopt *o = &ctx->dopt[i];
		int64_t off[RT_MAX_TENSORS], len[RT_MAX_TENSORS];
		bool dec[RT_MAX_TENSORS];
		int n, rc = rt__decays(&L->desc, off, len, dec, &n);
		for (int k = 0; !rc && k < n; k++) {
			rt_adamw_k c;
			rt__adamw_consts(&ctx->train, ctx->step + 1, dec[k] && ctx->train.weight_decay > 0, &c);
			float *p32 = o->p32 + off[k], *g = L->g + off[k], *m = o->m + off[k], *v = o->v + off[k];
			void *p = dev_at(d, L->p, off[k]);
			long cnt = (long)len[k];
			rc = dev_each(d, L, "optim_adamw", len[k],
			              (void *[]){&p32, &p, &g, &m, &v, &cnt, &c.lr, &c.step_size, &c.b1, &c.b2,
			                         &c.c1, &c.c2, &c.eps, &c.bc2_sqrt, &c.keep, &c.sgd});
		}
		if (!rc)
			rc = d->ops->zero(d, L->g, (size_t)L->nparams * sizeof(float));
		if (rc)
			return rt__fail(ctx, rc, "step %lld: the optimizer of layer %lld on the device: %s",
			                rt__step_no(ctx), (long long)ctx->lay[i].index, d->err);
	}
	ctx->dev_stale = true;
	return RT_OK;
}

int rt__dev_model_init(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	int rc;
	size_t scratch = 0, stage = 0;
	if (!(ctx->dlay = calloc((size_t)ctx->nlay, sizeof *ctx->dlay)) ||
	    !(ctx->dopt = calloc((size_t)ctx->nlay, sizeof *ctx->dopt)))
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
		void *g, *p32, *m, *v;
		if ((rc = d->ops->alloc(d, pb ? pb : 1, &L->p)) || (rc = d->ops->alloc(d, gb ? gb : 1, &g)) ||
		    (rc = d->ops->alloc(d, gb ? gb : 1, &p32)) || (rc = d->ops->alloc(d, gb ? gb : 1, &m)) ||
		    (rc = d->ops->alloc(d, gb ? gb : 1, &v)))
			return dev_err(ctx, rc, "device memory for the model's state");
		L->g = g;
		ctx->dopt[i] = (struct rt_dopt){p32, m, v};
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

/* The head's losses of the step -> the host. */
int rt__dev_collect(rt_ctx *ctx)
{
	rt_dev *d = ctx->dev;
	int rc;
	if ((rc = d->ops->sync(d)))
		return dev_err(ctx, rc, "the step's work on the device");
	if (ctx->head < 0)
		return RT_OK;
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
	return rc ? dev_err(ctx, rc, "losses from the device") : RT_OK;
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
		if (ctx->dopt) {
			d->ops->free(d, ctx->dopt[i].p32);
			d->ops->free(d, ctx->dopt[i].m);
			d->ops->free(d, ctx->dopt[i].v);
		}
	}
	d->ops->free(d, ctx->dev_scratch);
	d->ops->free(d, ctx->dev_tok);
	d->ops->free(d, ctx->dev_loss);
	d->ops->free(d, ctx->dev_flag);
	d->ops->free(d, ctx->dev_buf);
	free(ctx->dlay);
	free(ctx->dopt);
	free(ctx->dev_stage);
	d->ops->destroy(d);
	ctx->dev = NULL;
}
