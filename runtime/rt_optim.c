/* rt_optim.c: the optimizer's math, shared by the executors: the settings'
 * defaults, which tensors of a layer decay, AdamW's constants for a step
 * (bias corrections in double, PyTorch's order), and the host's update of
 * one tensor.  The device runs the same operations on its own copy
 * (codegen/cuda_lib.cu's adamw, with these constants), so the weights are
 * the same bits on either.  docs/runtime.md has the formulas. */
#include <math.h>

#include "rt_internal.h"

rt_train rt__optim_defaults(const rt_train *t)
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

int rt__optim_range(const rt_train *t, int64_t step, const rt_layer_desc *d, float *p,
                    const float *g, float *m, float *v, int64_t lo, int64_t hi, int64_t mo)
{
	int64_t off[RT_MAX_TENSORS], len[RT_MAX_TENSORS];
	bool dec[RT_MAX_TENSORS];
	int n, rc;
	if ((rc = rt__decays(d, off, len, dec, &n)))
		return rc;
	for (int k = 0; k < n; k++) {
		int64_t a = off[k] > lo ? off[k] : lo, b = off[k] + len[k] < hi ? off[k] + len[k] : hi;
		if (a >= b)
			continue;
		rt_adamw_k c;
		rt__adamw_consts(t, step, dec[k] && t->weight_decay > 0, &c);
		rt__adamw(&c, p + a, g + a, m + (a - mo), v + (a - mo), b - a);
	}
	return RT_OK;
}
