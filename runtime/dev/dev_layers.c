/* dev_layers.c: the layer executor's entry points (dev.h): the kind's
 * shape and tensors, then its F, B, W in dev_<kind>.c. */
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

int dev_layer_sizes(const rt_layer_desc *d, bool bf16, rt_sizes *sz)
{
	dev_layer L;
	int rc = dev_layer_setup(&L, d);
	if (rc)
		return rc;
	*sz = (rt_sizes){.params = L.nparams};
	if (!kinds[d->kind].sizes)
		return RT_EINVAL; /* a kind the device executor does not run */
	return kinds[d->kind].sizes(&L.s, bf16 ? 2 : 4, sz);
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
	return kinds[L->desc.kind].w(d, L, io);
}
