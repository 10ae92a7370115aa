/* decay_step.h: one training step of a model with every layer kind, at
 * weight decay wd and at 0, compared tensor by tensor against
 * docs/layers.md's "Weight decay" table (decay_doc.h): a tensor marked "no"
 * must come out bit for bit as without decay (the gradient comes before the
 * update, so both runs have the same), one marked "yes" must differ by
 * -lr*wd*p0 to float rounding.  On the host (unit_rt) and on the emulated
 * device (unit_dev_emu), whose optimizer must read the same flags. */
#ifndef OCTO_TEST_DECAY_STEP_H
#define OCTO_TEST_DECAY_STEP_H

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "decay_doc.h"
#include "octo_rt.h"

/* One of every kind, the variants whose tensors differ (GQA, MLA with a
 * query rank, gated and plain MLP, MoE with a shared expert and its gate,
 * Mamba-1 and 2, a parallel layer with the attention's biases and head
 * norms). */
#define DK_LAYERS 10

static void decay_layers(rt_layer_spec *L)
{
	static const rt_layer_desc k[DK_LAYERS] = {
	    {RT_EMBEDDING},
	    {RT_ATTENTION, .heads = 2, .kv_heads = 1},
	    {RT_ATTENTION, .heads = 2, .head_dim = 4, .q_lora_rank = 6, .kv_lora_rank = 5,
	     .qk_rope_dim = 4, .v_head_dim = 3},
	    {RT_MLP, .ffn = 12, .act = RT_SWIGLU},
	    {RT_MLP, .ffn = 12, .act = RT_GELU},
	    {RT_MOE, .experts = 4, .top_k = 2, .expert_ffn = 6, .shared_experts = 1, .shared_gate = 1},
	    {RT_MAMBA, .version = 1, .state = 4, .conv = 3, .dt_rank = 3},
	    {RT_MAMBA, .version = 2, .state = 4, .conv = 3, .heads = 4, .head_dim = 4, .groups = 2},
	    {RT_PARALLEL, .heads = 2, .kv_heads = 1, .qkv_bias = 1, .qk_norm = 1, .state = 4,
	     .conv = 3, .ssm_heads = 4, .ssm_head_dim = 4, .groups = 2},
	    {RT_HEAD},
	};
	for (int i = 0; i < DK_LAYERS; i++) {
		L[i] = (rt_layer_spec){i, k[i]};
		L[i].desc.hidden = 8, L[i].desc.seq = 4, L[i].desc.mbs = 2, L[i].desc.vocab = 16;
	}
}

/* The buffers of one micro-batch: activation and gradient (8 x 8 floats),
 * each layer's activation and W stash. */
typedef struct decay_bufs {
	float *x, *g;
	void *act[DK_LAYERS], *ws[DK_LAYERS];
} decay_bufs;

/* Where the layers run: `attach` (NULL: the host) before rt_model_init,
 * `buffers` after it. */
typedef struct decay_target {
	void (*attach)(rt_ctx *c, const rt_layer_spec *L);
	void (*buffers)(rt_ctx *c, const rt_layer_spec *L, decay_bufs *b);
} decay_target;

/* A context with decay_layers, trained one step of one micro-batch. */
static rt_ctx *decay_step(rt_train t, const decay_target *tg)
{
	rt_layer_spec L[DK_LAYERS];
	size_t bytes;
	decay_bufs b;
	rt_ctx *c = NULL;
	decay_layers(L);
	t.nlayers = DK_LAYERS, t.microbatches = 1;
	ck_assert_int_eq(rt_init(NULL, NULL, NULL, &c), RT_OK);
	ck_assert_int_eq(rt_model_bytes(c, &t, DK_LAYERS, L, &bytes), RT_OK);
	if (tg->attach)
		tg->attach(c, L);
	ck_assert_int_eq(rt_arena_init(c, bytes + (1 << 22)), RT_OK);
	ck_assert_msg(rt_model_init(c, &t, DK_LAYERS, L) == RT_OK, "%s", rt_errmsg(c));
	tg->buffers(c, L, &b);
	double loss;
	int have;
	ck_assert_int_eq(rt_step_begin(c), RT_OK);
	for (int h = 0; h < DK_LAYERS; h++)
		ck_assert_msg(rt_run_f(c, h, 0, h ? b.x : NULL, h < DK_LAYERS - 1 ? b.x : NULL,
		                       b.act[h]) == RT_OK, "%s", rt_errmsg(c));
	for (int h = DK_LAYERS - 1; h >= 0; h--) {
		ck_assert_msg(rt_run_b(c, h, 0, h < DK_LAYERS - 1 ? b.g : NULL, h ? b.g : NULL, b.act[h],
		                       b.ws[h]) == RT_OK, "%s", rt_errmsg(c));
		ck_assert_msg(rt_run_w(c, h, 0, b.ws[h]) == RT_OK, "%s", rt_errmsg(c));
	}
	ck_assert_msg(rt_step_end(c, &loss, &have) == RT_OK, "%s", rt_errmsg(c));
	return c;
}

/* The check, with optimizer opt. */
static void decay_check(const decay_target *tg, rt_optimizer opt)
{
	static doc_decay doc;
	ck_assert_msg(doc_decay_read(&doc) == 0, "%s", doc.err);
	const float lr = 1e-2f, wd = 0.5f;
	rt_train t = {.seed = 3, .seq = 4, .mbs = 2, .vocab = 16, .lr = lr, .optimizer = opt};
	rt_layer_spec L[DK_LAYERS];
	decay_layers(L);
	rt_ctx *c0 = decay_step(t, tg);
	t.weight_decay = wd;
	rt_ctx *cd = decay_step(t, tg);
	bool alog1 = false;
	for (int h = 0; h < DK_LAYERS; h++) {
		const rt_layer_desc *d = &L[h].desc;
		rt_layer_info i0, id;
		ck_assert_int_eq(rt_layer_get(c0, h, &i0), RT_OK);
		ck_assert_int_eq(rt_layer_get(cd, h, &id), RT_OK);
		float *p0 = malloc((size_t)i0.sizes.params * sizeof *p0);
		ck_assert_int_eq(rt_layer_init(d, t.seed, h, p0), RT_OK);
		int n;
		ck_assert_int_eq(rt_layer_ntensors(d, &n), RT_OK);
		for (int k = 0; k < n; k++) {
			rt_tensor_info ti;
			ck_assert_int_eq(rt_layer_tensor(d, k, &ti), RT_OK);
			const doc_decay_row *r = doc_decay_find(&doc, doc_kind_names[d->kind], ti.name);
			ck_assert_msg(r, "layer %d: %s is not in docs/layers.md", h, ti.name);
			int64_t len = 1, shrunk = 0;
			for (int j = 0; j < ti.ndim; j++)
				len *= ti.dim[j];
			for (int64_t e = ti.offset; e < ti.offset + len; e++) {
				float a = id.params[e], b = i0.params[e];
				if (!r->decay) {
					ck_assert_msg(memcmp(&a, &b, sizeof a) == 0,
					              "layer %d (%s) %s[%lld] is not decayed, yet %.9g with decay, "
					              "%.9g without", h, doc_kind_names[d->kind], ti.name,
					              (long long)(e - ti.offset), a, b);
					continue;
				}
				double want = (double)b - (double)lr * wd * p0[e];
				double tol = 4 * FLT_EPSILON * (fabs(p0[e]) + fabs(b) + lr);
				ck_assert_msg(fabs(a - want) <= tol,
				              "layer %d %s[%lld]: %.9g with decay, %.9g without, p0 %.9g", h,
				              ti.name, (long long)(e - ti.offset), a, b, p0[e]);
				shrunk += a != b;
			}
			if (r->decay)
				ck_assert_msg(shrunk > 0, "layer %d %s is decayed but did not change", h, ti.name);
			alog1 |= d->kind == RT_MAMBA && d->version == 1 && !strcmp(ti.name, "A_log") &&
			         !r->decay;
		}
		free(p0);
	}
	ck_assert_msg(alog1, "Mamba-1's A_log was not checked as a tensor without decay");
	ck_assert_int_eq(rt_finalize(cd), RT_OK);
	ck_assert_int_eq(rt_finalize(c0), RT_OK);
}

#endif
