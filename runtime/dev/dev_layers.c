/* dev_layers.c: the layer executor's entry points (dev.h): the kind's
 * shape and tensors, then its F, B, W in dev_<kind>.c.  The scratch is
 * the kind's, then the column partials of W's two-stage column sums
 * (dev_col_add), which every kind but the embedding has. */
#include "dev.h"

typedef struct kind_fns {
	int (*sizes)(const rt_shape *s, size_t esz, rt_sizes *sz);
	int (*f)(rt_dev *d, const dev_layer *L, const dev_io *io);
	int (*b)(rt_dev *d, const dev_layer *L, const dev_io *io);
	int (*w)(rt_dev *d, const dev_layer *L, const dev_io *io);
} kind_fns;

#define K(k) {dev_##k##_sizes, dev_##k##_f, dev_##k##_b, dev_##k##_w}
static const kind_fns kinds[RT_NKINDS] = {
    [RT_EMBEDDING] = K(emb), [RT_ATTENTION] = K(attn), [RT_MLP] = K(mlp),
    [RT_MOE] = K(moe),       [RT_MAMBA] = K(mamba),    [RT_HEAD] = K(head),
    [RT_PARALLEL] = K(par),
};
#undef K

int dev_layer_setup(dev_layer *L, const rt_layer_desc *d)
{
	int rc = rt__shape(d, &L->s);
	if (rc)
		return rc;
	L->desc = *d;
	L->nparams = rt__tensors(&L->s, L->t, &L->nt);
	L->kind = rt__kind_name(d->kind);
	return RT_OK;
}

int dev_layer_prepare(rt_dev *d, dev_layer *L)
{
	L->lib_attn = false;
	bool attn = L->desc.kind == RT_ATTENTION || L->desc.kind == RT_PARALLEL;
	if (!attn || !d->ops->attn_lib)
		return RT_OK;
	dev_attn_core c = dev_attn_core_of(&L->s);
	return d->ops->attn_lib(d, &c, &L->lib_attn);
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* The column partials' bytes: the most that one of the kind's column-sum
 * kernels writes (all its outputs' [chunks][width] f32). */
static int64_t col_bytes(const rt_shape *s)
{
	int64_t n = dev_col_chunks(s->T), w = s->kind == RT_EMBEDDING ? 0 : n * s->H; /* the norm */
	if (s->kind == RT_ATTENTION || s->kind == RT_PARALLEL) {
		if (s->qkb)
			w = max64(w, n * (s->nh * s->dqk + s->nkv * s->dqk + s->nkv * s->dv));
		if (s->qkn)
			w = max64(w, (dev_col_chunks(s->T * s->nh) + dev_col_chunks(s->T * s->nkv)) * s->dqk);
		if (s->mla)
			w = max64(w, n * max64(s->rq, s->rkv));
	}
	if (s->kind == RT_MAMBA || s->kind == RT_PARALLEL) /* the convolution, dt_bias, the gated norm */
		w = max64(w, n * max64(s->cd * (s->Kc + 1), max64(s->mh, s->di)));
	return w * (int64_t)sizeof(float);
}

/* The kind's scratch bytes, to the column partials. */
static int kind_sizes(const dev_layer *L, size_t esz, rt_sizes *sz)
{
	*sz = (rt_sizes){.params = L->nparams};
	if (!kinds[L->desc.kind].sizes)
		return RT_EINVAL; /* a kind the device executor does not run */
	int rc = kinds[L->desc.kind].sizes(&L->s, esz, sz);
	sz->scratch = (sz->scratch + 255) & ~(int64_t)255;
	return rc;
}

int dev_layer_sizes(const rt_layer_desc *d, bool bf16, rt_sizes *sz)
{
	dev_layer L;
	int rc = dev_layer_setup(&L, d);
	if (!rc)
		rc = kind_sizes(&L, bf16 ? 2 : 4, sz);
	if (!rc)
		sz->scratch += col_bytes(&L.s);
	return rc;
}

int dev_forward(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	return kinds[L->desc.kind].f(d, L, io);
}

int dev_backward_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	return kinds[L->desc.kind].b(d, L, io);
}

int dev_backward_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	rt_sizes sz;
	DEV_TRY(kind_sizes(L, dev_esz(d), &sz));
	d->colp = io->scratch ? (float *)((char *)io->scratch + sz.scratch) : NULL;
	return kinds[L->desc.kind].w(d, L, io);
}
