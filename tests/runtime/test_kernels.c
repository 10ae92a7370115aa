/* test_kernels.c: Check suite for the CPU layer kernels (runtime/cpu).
 *
 * Every layer kind and variant (GQA, sliding window, odd head_dim, MLA with
 * and without a query rank, five MLP activations, MoE with and without
 * shared experts, Mamba-2 and Mamba-1 across scan-chunk boundaries,
 * embedding, head) goes through:
 *   - gradient checks in double: B's input gradient and W's weight
 *     gradients against central differences of L = sum(y . R) (the head:
 *     L = summed cross-entropy), normwise relative error < 1e-6 (observed
 *     up to 1e-8) with step 1e-5;
 *   - the B/W split: W reads only the W stash (act stash and scratch are
 *     poisoned before W; bitwise the same gradients), B leaves the act stash
 *     untouched, W twice doubles the gradient (1e-12), in-place x == y and
 *     dy == dx give the same bits;
 *   - f32 against f64 (same weights, same input): forward 1e-5, gradients
 *     1e-4 (normwise relative; observed up to 6e-7 and 2e-6);
 *   - determinism: two f32 runs, the second over garbage-filled buffers,
 *     give the same bits.
 * Plus init, layout, every tensor's weight-decay flag against the table
 * in docs/layers.md, descriptor errors, MoE tie-breaking, and a small
 * hybrid stack that trains (loss halves) with bitwise-equal losses over
 * two runs. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "decay_doc.h"
#include "kernels_f64.h"
#include "layers.h" /* rt__shape, rt__rope_freq: RoPE scaling's frequencies */
#include "octo_kernels.h"

#define GRAD_TOL 1e-6
#define FD_STEP 1e-5
#define F32_FWD_TOL 1e-5
#define F32_GRAD_TOL 1e-4

/* ---- cases -------------------------------------------------------------------- */

typedef struct kcase {
	const char *name;
	rt_layer_desc d;
} kcase;

#define SHAPE(h, s, b) .hidden = h, .seq = s, .mbs = b
static const kcase cases[] = {
	{"embedding", {RT_EMBEDDING, SHAPE(8, 6, 2), .vocab = 11}},
	{"head", {RT_HEAD, SHAPE(8, 6, 2), .vocab = 11}},
	{"head-tied", {RT_HEAD, SHAPE(8, 6, 2), .vocab = 11, .tied = 1}},
	{"attention-gqa", {RT_ATTENTION, SHAPE(16, 7, 2), .heads = 4, .kv_heads = 2}},
	{"attention-odd-headdim", {RT_ATTENTION, SHAPE(12, 6, 2), .heads = 2, .head_dim = 5}},
	{"attention-window", {RT_ATTENTION, SHAPE(8, 8, 2), .heads = 2, .kv_heads = 1, .window = 3}},
	{"attention-mla", {RT_ATTENTION, SHAPE(12, 6, 2), .heads = 2, .head_dim = 4, .q_lora_rank = 6,
	                   .kv_lora_rank = 5, .qk_rope_dim = 4, .v_head_dim = 3}},
	{"attention-mla-fullq", {RT_ATTENTION, SHAPE(8, 5, 2), .heads = 3, .head_dim = 2,
	                         .kv_lora_rank = 4, .qk_rope_dim = 3}},
	{"attention-qkv-bias", {RT_ATTENTION, SHAPE(16, 7, 2), .heads = 4, .kv_heads = 2,
	                        .rope_theta = 1e6, .qkv_bias = 1}},
	{"attention-qk-norm", {RT_ATTENTION, SHAPE(16, 6, 2), .heads = 4, .kv_heads = 2,
	                       .head_dim = 6, .rope_theta = 500, .qk_norm = 1}},
	{"attention-bias-norm-window", {RT_ATTENTION, SHAPE(12, 7, 2), .heads = 2, .kv_heads = 1,
	                                .head_dim = 5, .window = 3, .qkv_bias = 1, .qk_norm = 1}},
	{"attention-mla-theta", {RT_ATTENTION, SHAPE(8, 5, 2), .heads = 2, .head_dim = 2,
	                         .q_lora_rank = 3, .kv_lora_rank = 4, .qk_rope_dim = 4,
	                         .rope_theta = 1e5}},
	/* RoPE scaling: linear; llama3 with head_dim 8 (wavelengths 6.3, 63, 628,
	 * 6283) against 256 and 2048, so that the pairs fall in all three bands;
	 * YaRN with a ramp over pairs 0..3, its default attention factor; YaRN
	 * on MLA's rotary part with DeepSeek's mscale and mscale_all_dim (the
	 * attention factor and the scores' scale both not 1). */
	{"attention-rope-linear", {RT_ATTENTION, SHAPE(16, 7, 2), .heads = 2, .kv_heads = 1,
	                           .rope_scaling = RT_ROPE_LINEAR, .rope_factor = 4}},
	{"attention-rope-llama3", {RT_ATTENTION, SHAPE(16, 7, 2), .heads = 2, .head_dim = 8,
	                           .rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8,
	                           .rope_low_freq_factor = 1, .rope_high_freq_factor = 8,
	                           .rope_original_max = 2048}},
	{"attention-rope-yarn", {RT_ATTENTION, SHAPE(16, 7, 2), .heads = 2, .head_dim = 8,
	                         .window = 4, .rope_theta = 100, .rope_scaling = RT_ROPE_YARN,
	                         .rope_factor = 4, .rope_original_max = 64, .rope_beta_fast = 4,
	                         .rope_beta_slow = 0.5}},
	{"attention-rope-yarn-mla", {RT_ATTENTION, SHAPE(8, 5, 2), .heads = 2, .head_dim = 2,
	                             .q_lora_rank = 3, .kv_lora_rank = 4, .qk_rope_dim = 4,
	                             .rope_scaling = RT_ROPE_YARN, .rope_factor = 40,
	                             .rope_original_max = 16, .rope_mscale = 1,
	                             .rope_mscale_all_dim = 0.707}},
	{"mlp-swiglu", {RT_MLP, SHAPE(8, 6, 2), .ffn = 12, .act = RT_SWIGLU}},
	{"mlp-geglu", {RT_MLP, SHAPE(8, 6, 2), .ffn = 12, .act = RT_GEGLU}},
	{"mlp-gelu", {RT_MLP, SHAPE(8, 6, 2), .ffn = 12, .act = RT_GELU}},
	{"mlp-relu", {RT_MLP, SHAPE(8, 6, 2), .ffn = 12, .act = RT_RELU}},
	{"mlp-relu2", {RT_MLP, SHAPE(8, 6, 2), .ffn = 12, .act = RT_RELU2}},
	{"moe-shared", {RT_MOE, SHAPE(8, 6, 2), .experts = 4, .top_k = 2, .expert_ffn = 6,
	                .shared_experts = 1}},
	{"moe-relu2-top1", {RT_MOE, SHAPE(8, 7, 2), .experts = 3, .top_k = 1, .expert_ffn = 5,
	                    .act = RT_RELU2}},
	{"moe-all-experts", {RT_MOE, SHAPE(8, 5, 2), .experts = 3, .top_k = 3, .expert_ffn = 4,
	                     .shared_experts = 2, .act = RT_GEGLU}},
	{"moe-shared-gate", {RT_MOE, SHAPE(8, 6, 2), .experts = 4, .top_k = 2, .expert_ffn = 6,
	                     .shared_experts = 2, .shared_gate = 1}},
	{"moe-shared-gate-relu2", {RT_MOE, SHAPE(8, 5, 2), .experts = 3, .top_k = 1, .expert_ffn = 5,
	                           .shared_experts = 1, .shared_gate = 1, .act = RT_RELU2}},
	{"mamba2", {RT_MAMBA, SHAPE(8, 7, 2), .version = 2, .state = 4, .expand = 2, .conv = 3,
	            .heads = 4, .head_dim = 4, .groups = 2}},
	{"mamba2-chunks", {RT_MAMBA, SHAPE(8, 35, 1), .version = 2, .state = 3, .expand = 1,
	                   .conv = 4, .heads = 2, .head_dim = 4, .groups = 1}},
	{"mamba1", {RT_MAMBA, SHAPE(8, 7, 2), .version = 1, .state = 4, .expand = 2, .conv = 3,
	            .dt_rank = 3}},
	{"mamba1-chunks", {RT_MAMBA, SHAPE(6, 19, 1), .version = 1, .state = 3, .expand = 1,
	                   .conv = 2}},
	{"parallel", {RT_PARALLEL, SHAPE(16, 7, 2), .heads = 4, .kv_heads = 2, .version = 2,
	              .state = 4, .expand = 2, .conv = 3, .ssm_heads = 4, .ssm_head_dim = 8,
	              .groups = 2}},
	{"parallel-options-chunks", {RT_PARALLEL, SHAPE(12, 35, 1), .heads = 2, .kv_heads = 1,
	                             .head_dim = 5, .window = 6, .rope_theta = 1e6, .qkv_bias = 1,
	                             .qk_norm = 1, .state = 3, .expand = 1, .conv = 4,
	                             .ssm_heads = 3, .ssm_head_dim = 4}},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* ---- buffers -------------------------------------------------------------------- */

static uint64_t rng_state;

static double rnd(void) /* uniform in [-1, 1) */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1p-52 - 1;
}

static void *xalloc(size_t bytes)
{
	bytes = (bytes + 63) / 64 * 64 + 64;
	void *p = aligned_alloc(64, bytes);
	ck_assert_ptr_nonnull(p);
	memset(p, 0, bytes);
	return p;
}

/* Everything one layer call needs, in one precision (esz 4 or 8). */
typedef struct run {
	const rt_layer_desc *d;
	rt_sizes sz;
	size_t n, nx; /* params, elements of x and y */
	size_t esz;
	void *p, *g, *x, *y, *dy, *dx, *act, *ws, *scr;
	int32_t *tok;
} run;

static void run_alloc(run *r, const rt_layer_desc *d, size_t esz)
{
	memset(r, 0, sizeof *r);
	r->d = d;
	r->esz = esz;
	ck_assert_int_eq(esz == 8 ? rtd_layer_sizes(d, &r->sz) : rt_layer_sizes(d, &r->sz), RT_OK);
	r->n = (size_t)r->sz.params;
	r->nx = (size_t)(d->mbs * d->seq * d->hidden);
	r->p = xalloc(r->n * esz);
	r->g = xalloc(r->n * esz);
	r->x = xalloc(r->nx * esz);
	r->y = xalloc(r->nx * esz);
	r->dy = xalloc(r->nx * esz);
	r->dx = xalloc(r->nx * esz);
	r->act = xalloc((size_t)r->sz.act);
	r->ws = xalloc((size_t)r->sz.wstash);
	r->scr = xalloc((size_t)r->sz.scratch);
	r->tok = xalloc((size_t)(d->mbs * d->seq) * sizeof(int32_t));
}

static void run_free(run *r)
{
	void *ps[] = {r->p, r->g, r->x, r->y, r->dy, r->dx, r->act, r->ws, r->scr, r->tok};
	for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
		free(ps[i]);
}

/* Seeded inputs: x and dy uniform in [-1, 1), tokens (a -1 target in the
 * head), and parameters from the layer init (seed 7, layer 3), perturbed
 * so that unit norm scales and the like are not special. */
static void run_fill(run *r, uint64_t seed)
{
	rng_state = seed;
	const rt_layer_desc *d = r->d;
	size_t T = (size_t)(d->mbs * d->seq);
	for (size_t t = 0; t < T; t++)
		r->tok[t] = d->vocab ? (int32_t)((t * 7 + t / 3) % (size_t)d->vocab) : 0;
	if (d->kind == RT_HEAD)
		r->tok[1] = -1;
	if (r->esz == 8) {
		double *p = r->p, *x = r->x, *dy = r->dy;
		ck_assert_int_eq(rtd_layer_init(d, 7, 3, p), RT_OK);
		for (size_t i = 0; i < r->n; i++)
			p[i] += 0.1 * rnd();
		for (size_t i = 0; i < r->nx; i++)
			x[i] = rnd(), dy[i] = rnd();
	} else {
		float *p = r->p, *x = r->x, *dy = r->dy;
		ck_assert_int_eq(rt_layer_init(d, 7, 3, p), RT_OK);
		for (size_t i = 0; i < r->n; i++)
			p[i] += (float)(0.1 * rnd());
		for (size_t i = 0; i < r->nx; i++)
			x[i] = (float)rnd(), dy[i] = (float)rnd();
	}
}

static const void *xin(const run *r)
{
	return r->d->kind == RT_EMBEDDING ? NULL : r->x;
}

static void *yout(const run *r)
{
	return r->d->kind == RT_HEAD ? NULL : r->y;
}

/* F, B, W (W into zeroed gradients) in the run's precision. */
static void run_fbw(run *r, rt_loss *loss)
{
	const rt_layer_desc *d = r->d;
	bool emb = d->kind == RT_EMBEDDING, head = d->kind == RT_HEAD;
	memset(r->g, 0, r->n * r->esz);
	if (r->esz == 8) {
		ck_assert_int_eq(rtd_forward(d, r->p, xin(r), r->tok, yout(r), head ? loss : NULL, r->act,
		                             r->scr), RT_OK);
		ck_assert_int_eq(rtd_backward_b(d, r->p, head ? NULL : r->dy, 1, emb ? NULL : r->dx,
		                                r->act, r->ws, r->scr), RT_OK);
		ck_assert_int_eq(rtd_backward_w(d, r->p, r->g, r->ws, r->scr), RT_OK);
	} else {
		ck_assert_int_eq(rt_forward(d, r->p, xin(r), r->tok, yout(r), head ? loss : NULL, r->act,
		                            r->scr), RT_OK);
		ck_assert_int_eq(rt_backward_b(d, r->p, head ? NULL : r->dy, 1, emb ? NULL : r->dx,
		                               r->act, r->ws, r->scr), RT_OK);
		ck_assert_int_eq(rt_backward_w(d, r->p, r->g, r->ws, r->scr), RT_OK);
	}
}

/* L = sum(y . dy) (the head: its summed cross-entropy), in double. */
static double loss64(run *r)
{
	rt_loss loss = {0, 0};
	bool head = r->d->kind == RT_HEAD;
	ck_assert_int_eq(rtd_forward(r->d, r->p, xin(r), r->tok, yout(r), head ? &loss : NULL, r->act,
	                             r->scr), RT_OK);
	if (head)
		return loss.sum;
	double s = 0, *y = r->y, *dy = r->dy;
	for (size_t i = 0; i < r->nx; i++)
		s += y[i] * dy[i];
	return s;
}

static double fd(run *r, double *v)
{
	double keep = *v;
	*v = keep + FD_STEP;
	double lp = loss64(r);
	*v = keep - FD_STEP;
	double lm = loss64(r);
	*v = keep;
	return (lp - lm) / (2 * FD_STEP);
}

/* max |a - b| / max |b| */
static double relerr(const double *a, const double *b, size_t n)
{
	double num = 0, den = 1e-300;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs(a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return num / den;
}

static double relerr32(const float *a, const double *b, size_t n)
{
	double num = 0, den = 1e-300;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return num / den;
}

static int ntensors(const rt_layer_desc *d)
{
	int n;
	ck_assert_int_eq(rt_layer_ntensors(d, &n), RT_OK);
	return n;
}

static rt_tensor_info tensor(const rt_layer_desc *d, int i)
{
	rt_tensor_info t;
	ck_assert_int_eq(rt_layer_tensor(d, i, &t), RT_OK);
	return t;
}

static size_t tensor_size(const rt_tensor_info *t)
{
	size_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= (size_t)t->dim[i];
	return n;
}

/* ---- gradient checks -------------------------------------------------------------- */

START_TEST(test_gradcheck)
{
	const kcase *c = &cases[_i];
	run r;
	run_alloc(&r, &c->d, 8);
	run_fill(&r, 100 + (uint64_t)_i);
	rt_loss loss;
	run_fbw(&r, &loss);
	double *dx = xalloc(r.nx * 8), *g = xalloc(r.n * 8), *num = xalloc((r.n + r.nx) * 8);
	memcpy(dx, r.dx, r.nx * 8);
	memcpy(g, r.g, r.n * 8);
	if (c->d.kind != RT_EMBEDDING) {
		for (size_t i = 0; i < r.nx; i++)
			num[i] = fd(&r, (double *)r.x + i);
		double e = relerr(dx, num, r.nx);
		ck_assert_msg(e < GRAD_TOL, "%s: input gradient: relative error %.3g", c->name, e);
	}
	for (int k = 0; k < ntensors(&c->d); k++) {
		rt_tensor_info t = tensor(&c->d, k);
		size_t n = tensor_size(&t);
		for (size_t i = 0; i < n; i++)
			num[i] = fd(&r, (double *)r.p + t.offset + i);
		double e = relerr(g + t.offset, num, n);
		ck_assert_msg(e < GRAD_TOL, "%s: gradient of %s: relative error %.3g", c->name, t.name, e);
		double mx = 0;
		for (size_t i = 0; i < n; i++)
			mx = fmax(mx, fabs(num[i]));
		/* With top_k 1 the renormalised weight is always 1: no router gradient. */
		bool router1 = c->d.kind == RT_MOE && c->d.top_k == 1 && !strcmp(t.name, "router");
		ck_assert_msg(mx > 0 || router1, "%s: %s has a zero gradient", c->name, t.name);
	}
	free(dx);
	free(g);
	free(num);
	run_free(&r);
}
END_TEST

/* ---- the B/W split ----------------------------------------------------------------- */

static void poison(void *p, size_t bytes)
{
	memset(p, 0xff, bytes); /* NaN in both precisions */
}

START_TEST(test_bw_split)
{
	const kcase *c = &cases[_i];
	const rt_layer_desc *d = &c->d;
	bool emb = d->kind == RT_EMBEDDING, head = d->kind == RT_HEAD;
	run r;
	run_alloc(&r, d, 8);
	run_fill(&r, 200 + (uint64_t)_i);
	rt_loss loss;
	run_fbw(&r, &loss);
	double *g1 = xalloc(r.n * 8), *dx = xalloc(r.nx * 8), *y = xalloc(r.nx * 8);
	memcpy(g1, r.g, r.n * 8);
	memcpy(dx, r.dx, r.nx * 8);
	memcpy(y, r.y, r.nx * 8);

	/* F again; B must not write the act stash; W must not read it, nor
	 * anything left in scratch. */
	ck_assert_int_eq(rtd_forward(d, r.p, xin(&r), r.tok, yout(&r), head ? &loss : NULL, r.act, r.scr),
	                 RT_OK);
	void *act_copy = xalloc((size_t)r.sz.act);
	memcpy(act_copy, r.act, (size_t)r.sz.act);
	poison(r.scr, (size_t)r.sz.scratch);
	poison(r.ws, (size_t)r.sz.wstash);
	ck_assert_int_eq(rtd_backward_b(d, r.p, head ? NULL : r.dy, 1, emb ? NULL : r.dx, r.act, r.ws,
	                                r.scr), RT_OK);
	ck_assert_msg(memcmp(act_copy, r.act, (size_t)r.sz.act) == 0, "%s: B wrote the act stash", c->name);
	poison(r.act, (size_t)r.sz.act);
	poison(r.scr, (size_t)r.sz.scratch);
	memset(r.g, 0, r.n * 8);
	ck_assert_int_eq(rtd_backward_w(d, r.p, r.g, r.ws, r.scr), RT_OK);
	ck_assert_msg(memcmp(g1, r.g, r.n * 8) == 0, "%s: W depends on more than the W stash", c->name);

	/* W accumulates: twice gives twice the gradient. */
	ck_assert_int_eq(rtd_backward_w(d, r.p, r.g, r.ws, r.scr), RT_OK);
	for (size_t i = 0; i < r.n; i++)
		((double *)r.g)[i] *= 0.5;
	double e = relerr(r.g, g1, r.n);
	ck_assert_msg(e < 1e-12, "%s: W twice is not twice W (%.3g)", c->name, e);

	/* In place: y over x, dx over dy. */
	if (!emb && !head) {
		memcpy(r.y, r.x, r.nx * 8);
		ck_assert_int_eq(rtd_forward(d, r.p, r.y, NULL, r.y, NULL, r.act, r.scr), RT_OK);
		ck_assert_msg(memcmp(y, r.y, r.nx * 8) == 0, "%s: in-place F differs", c->name);
		memcpy(r.dx, r.dy, r.nx * 8);
		ck_assert_int_eq(rtd_backward_b(d, r.p, r.dx, 1, r.dx, r.act, r.ws, r.scr), RT_OK);
		ck_assert_msg(memcmp(dx, r.dx, r.nx * 8) == 0, "%s: in-place B differs", c->name);
	}
	free(act_copy);
	free(g1);
	free(dx);
	free(y);
	run_free(&r);
}
END_TEST

/* ---- f32 against f64 ----------------------------------------------------------------- */

START_TEST(test_f32_vs_f64)
{
	const kcase *c = &cases[_i];
	const rt_layer_desc *d = &c->d;
	run r4, r8;
	run_alloc(&r4, d, 4);
	run_alloc(&r8, d, 8);
	run_fill(&r4, 300 + (uint64_t)_i);
	/* The same weights and inputs in both: the f32 values, widened. */
	for (size_t i = 0; i < r4.n; i++)
		((double *)r8.p)[i] = ((float *)r4.p)[i];
	for (size_t i = 0; i < r4.nx; i++) {
		((double *)r8.x)[i] = ((float *)r4.x)[i];
		((double *)r8.dy)[i] = ((float *)r4.dy)[i];
	}
	memcpy(r8.tok, r4.tok, (size_t)(d->mbs * d->seq) * sizeof(int32_t));
	rt_loss l4, l8;
	run_fbw(&r4, &l4);
	run_fbw(&r8, &l8);
	if (d->kind == RT_HEAD) {
		ck_assert_int_eq(l4.count, l8.count);
		ck_assert_msg(fabs(l4.sum - l8.sum) < F32_FWD_TOL * fabs(l8.sum), "%s: loss %.9g vs %.9g",
		              c->name, l4.sum, l8.sum);
	} else {
		/* The layer's branch y - x, which the residual would hide. */
		double *f8 = xalloc(r4.nx * 8);
		float *f4 = xalloc(r4.nx * 4);
		for (size_t i = 0; i < r4.nx; i++) {
			bool e = d->kind == RT_EMBEDDING;
			f8[i] = ((double *)r8.y)[i] - (e ? 0 : ((double *)r8.x)[i]);
			f4[i] = ((float *)r4.y)[i] - (e ? 0 : ((float *)r4.x)[i]);
		}
		double e = relerr32(f4, f8, r4.nx);
		ck_assert_msg(e < F32_FWD_TOL, "%s: forward: f32 vs f64 %.3g", c->name, e);
		free(f8);
		free(f4);
	}
	if (d->kind != RT_EMBEDDING) {
		double e = relerr32(r4.dx, r8.dx, r4.nx);
		ck_assert_msg(e < F32_GRAD_TOL, "%s: input gradient: f32 vs f64 %.3g", c->name, e);
	}
	for (int k = 0; k < ntensors(d); k++) {
		rt_tensor_info t = tensor(d, k);
		double e = relerr32((float *)r4.g + t.offset, (double *)r8.g + t.offset, tensor_size(&t));
		ck_assert_msg(e < F32_GRAD_TOL, "%s: gradient of %s: f32 vs f64 %.3g", c->name, t.name, e);
	}
	run_free(&r4);
	run_free(&r8);
}
END_TEST

/* ---- determinism ---------------------------------------------------------------------- */

START_TEST(test_determinism)
{
	const kcase *c = &cases[_i];
	run a, b;
	run_alloc(&a, &c->d, 4);
	run_alloc(&b, &c->d, 4);
	run_fill(&a, 400);
	run_fill(&b, 400);
	rng_state = 99;
	for (size_t i = 0; i < (size_t)b.sz.scratch; i++)
		((unsigned char *)b.scr)[i] = (unsigned char)(rnd() * 127);
	poison(b.act, (size_t)b.sz.act);
	poison(b.ws, (size_t)b.sz.wstash);
	rt_loss la = {0, 0}, lb = {1, 1};
	run_fbw(&a, &la);
	run_fbw(&b, &lb);
	ck_assert_msg(memcmp(a.y, b.y, a.nx * 4) == 0, "%s: y differs", c->name);
	ck_assert_msg(memcmp(a.dx, b.dx, a.nx * 4) == 0, "%s: dx differs", c->name);
	ck_assert_msg(memcmp(a.g, b.g, a.n * 4) == 0, "%s: gradients differ", c->name);
	if (c->d.kind == RT_HEAD)
		ck_assert_msg(la.sum == lb.sum && la.count == lb.count, "%s: loss differs", c->name);
	run_free(&a);
	run_free(&b);
}
END_TEST

/* ---- selective recomputation ------------------------------------------------------------ */

/* rt_layer_desc.selective (docs/cost-model.md, "Recomputation"): a mamba
 * layer's chunk states move from the act stash to the scratch, F's held
 * nowhere until B, which makes them again: the same y, dx, W stash and
 * gradients bit for bit, with the scratch garbage between F and B.  Every
 * other kind ignores the flag: the same sizes. */
START_TEST(test_selective)
{
	const kcase *c = &cases[_i];
	rt_layer_desc ds = c->d;
	ds.selective = 1;
	run a, b;
	run_alloc(&a, &c->d, 4);
	run_alloc(&b, &ds, 4);
	ck_assert_int_eq(a.sz.params, b.sz.params);
	ck_assert_int_eq(a.sz.wstash, b.sz.wstash);
	if (c->d.kind == RT_MAMBA || c->d.kind == RT_PARALLEL) {
		int64_t nck = (c->d.seq + 15) / 16, di = c->d.hidden * c->d.expand;
		int64_t ck = c->d.mbs * di * nck * c->d.state * 4; /* heads x P = di, f32 */
		int64_t al = (ck + 63) / 64 * 64;
		ck_assert_int_eq(b.sz.act, a.sz.act - al);
		/* A parallel layer's mixers share their scratch: the states grow
		 * the mixer's part, which may be under the attention's. */
		if (c->d.kind == RT_MAMBA)
			ck_assert_int_eq(b.sz.scratch, a.sz.scratch + al);
		else
			ck_assert(b.sz.scratch >= a.sz.scratch && b.sz.scratch <= a.sz.scratch + al);
	} else {
		ck_assert_int_eq(b.sz.act, a.sz.act);
		ck_assert_int_eq(b.sz.scratch, a.sz.scratch);
	}
	run_fill(&a, 500);
	run_fill(&b, 500);
	rt_loss la = {0, 0}, lb = {0, 0};
	run_fbw(&a, &la);
	bool emb = c->d.kind == RT_EMBEDDING, head = c->d.kind == RT_HEAD;
	memset(b.g, 0, b.n * 4);
	ck_assert_int_eq(rt_forward(&ds, b.p, xin(&b), b.tok, yout(&b), head ? &lb : NULL, b.act,
	                            b.scr), RT_OK);
	poison(b.scr, (size_t)b.sz.scratch);
	ck_assert_int_eq(rt_backward_b(&ds, b.p, head ? NULL : b.dy, 1, emb ? NULL : b.dx, b.act,
	                               b.ws, b.scr), RT_OK);
	poison(b.scr, (size_t)b.sz.scratch);
	ck_assert_int_eq(rt_backward_w(&ds, b.p, b.g, b.ws, b.scr), RT_OK);
	ck_assert_msg(memcmp(a.y, b.y, a.nx * 4) == 0, "%s: y differs", c->name);
	ck_assert_msg(memcmp(a.dx, b.dx, a.nx * 4) == 0, "%s: dx differs", c->name);
	ck_assert_msg(memcmp(a.ws, b.ws, (size_t)a.sz.wstash) == 0, "%s: W stash differs", c->name);
	ck_assert_msg(memcmp(a.g, b.g, a.n * 4) == 0, "%s: gradients differ", c->name);
	ds.selective = 2;
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&ds, &sz), RT_EINVAL);
	run_free(&a);
	run_free(&b);
}
END_TEST

/* ---- init and layout ------------------------------------------------------------------ */

START_TEST(test_init)
{
	rt_layer_desc d = {RT_MLP, SHAPE(64, 4, 1), .ffn = 256};
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&d, &sz), RT_OK);
	size_t n = (size_t)sz.params;
	float *a = xalloc(n * 4), *b = xalloc(n * 4);
	double *c = xalloc(n * 8);
	ck_assert_int_eq(rt_layer_init(&d, 1, 5, a), RT_OK);
	ck_assert_int_eq(rt_layer_init(&d, 1, 5, b), RT_OK);
	ck_assert(memcmp(a, b, n * 4) == 0);
	ck_assert_int_eq(rtd_layer_init(&d, 1, 5, c), RT_OK);
	for (size_t i = 0; i < n; i++)
		ck_assert(a[i] == (float)c[i]);
	for (uint64_t seed = 1; seed <= 2; seed++) {
		ck_assert_int_eq(rt_layer_init(&d, seed, seed == 1 ? 6 : 5, b), RT_OK);
		size_t same = 0;
		for (size_t i = 0; i < n; i++)
			same += a[i] == b[i];
		/* Only the norm scale (all ones) may coincide. */
		ck_assert_msg(same == (size_t)d.hidden, "seed %d: %zu equal elements", (int)seed, same);
	}
	/* The scale: N(0, 1/fan_in) per matrix; norms start at 1. */
	for (int k = 0; k < ntensors(&d); k++) {
		rt_tensor_info t = tensor(&d, k);
		size_t m = tensor_size(&t);
		double s1 = 0, s2 = 0;
		for (size_t i = 0; i < m; i++)
			s1 += a[t.offset + i], s2 += (double)a[t.offset + i] * a[t.offset + i];
		if (t.ndim == 1) {
			ck_assert(s1 == (double)m);
			continue;
		}
		double sd = sqrt(s2 / (double)m), want = 1 / sqrt((double)t.dim[0]);
		ck_assert_msg(fabs(sd / want - 1) < 0.03, "%s: std %g, want %g", t.name, sd, want);
		ck_assert_msg(fabs(s1 / (double)m) < 4 * want / sqrt((double)m), "%s: mean %g", t.name,
		              s1 / (double)m);
	}
	/* Mamba's special tensors: dt = softplus(dt_bias) in [1e-3, 1e-1],
	 * A_log = log of [1, 16], D = 1. */
	rt_layer_desc m = {RT_MAMBA, SHAPE(64, 4, 1), .version = 2, .state = 16, .head_dim = 16};
	ck_assert_int_eq(rt_layer_sizes(&m, &sz), RT_OK);
	float *p = xalloc((size_t)sz.params * 4);
	ck_assert_int_eq(rt_layer_init(&m, 1, 2, p), RT_OK);
	for (int k = 0; k < ntensors(&m); k++) {
		rt_tensor_info t = tensor(&m, k);
		for (size_t i = 0; i < tensor_size(&t); i++) {
			double v = p[t.offset + i];
			if (!strcmp(t.name, "dt_bias"))
				ck_assert(log1p(exp(v)) > 0.99e-3 && log1p(exp(v)) < 1.01e-1);
			else if (!strcmp(t.name, "A_log"))
				ck_assert(v >= 0 && v <= log(16.0) + 1e-6);
			else if (!strcmp(t.name, "D"))
				ck_assert(v == 1);
		}
	}
	free(p);
	free(a);
	free(b);
	free(c);
}
END_TEST

START_TEST(test_layout)
{
	/* tiny-dense's attention: wq 64x64, wk 64x32, wv 64x32, wo 64x64. */
	rt_layer_desc d = {RT_ATTENTION, SHAPE(64, 64, 2), .heads = 4, .kv_heads = 2};
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&d, &sz), RT_OK);
	ck_assert_int_eq(sz.params, 64 + 64 * 64 * 2 + 64 * 32 * 2);
	static const char *const want[] = {"norm", "wq", "wk", "wv", "wo"};
	ck_assert_int_eq(ntensors(&d), 5);
	for (int i = 0; i < 5; i++)
		ck_assert_str_eq(tensor(&d, i).name, want[i]);
	rt_tensor_info t;
	ck_assert_int_eq(rt_layer_tensor(&d, 5, &t), RT_EARG);
	/* Every case: the tensors tile the array, and sizes agree between the
	 * builds up to the element size. */
	for (int c = 0; c < NCASES; c++) {
		const rt_layer_desc *cd = &cases[c].d;
		rt_sizes s4, s8;
		ck_assert_int_eq(rt_layer_sizes(cd, &s4), RT_OK);
		ck_assert_int_eq(rtd_layer_sizes(cd, &s8), RT_OK);
		ck_assert_int_eq(s4.params, s8.params);
		ck_assert(s8.act >= s4.act && s8.act <= 2 * s4.act + 64 * 64);
		int64_t off = 0;
		for (int k = 0; k < ntensors(cd); k++) {
			t = tensor(cd, k);
			ck_assert_int_eq(t.offset, off);
			off += (int64_t)tensor_size(&t);
		}
		ck_assert_int_eq(off, s4.params);
		double f, b, w;
		ck_assert_int_eq(rt_layer_flops(cd, &f, &b, &w), RT_OK);
		ck_assert(f >= 0 && b >= 0 && w > 0);
	}
}
END_TEST

/* Every tensor of every case has the weight-decay flag docs/layers.md's
 * "Weight decay" table gives it (the document is parsed, not copied), and
 * every row of that table names a tensor some case has. */
START_TEST(test_decay_flags)
{
	static doc_decay doc;
	ck_assert_msg(doc_decay_read(&doc) == 0, "%s", doc.err);
	for (int c = 0; c < NCASES; c++) {
		const rt_layer_desc *cd = &cases[c].d;
		const char *kind = doc_kind_names[cd->kind];
		for (int k = 0; k < ntensors(cd); k++) {
			rt_tensor_info t = tensor(cd, k);
			doc_decay_row *r = doc_decay_find(&doc, kind, t.name);
			ck_assert_msg(r, "%s: tensor %s %s is not in docs/layers.md's weight decay table",
			              cases[c].name, kind, t.name);
			ck_assert_msg(t.decay == r->decay, "%s: tensor %s has decay %d, docs/layers.md says %s",
			              cases[c].name, t.name, t.decay, r->decay ? "yes" : "no");
			r->seen = 1;
		}
	}
	for (int i = 0; i < doc.n; i++)
		ck_assert_msg(doc.row[i].seen, "docs/layers.md lists %s %s, which no layer has",
		              doc.row[i].kind, doc.row[i].name);
}
END_TEST

/* ---- MoE routing ----------------------------------------------------------------------- */

/* A zero router makes every expert equally likely: top-2 of 4 must pick
 * experts 0 and 1 (ties to the lower index), each with weight 1/2.  An
 * expert is an MLP, so the layer must equal the mean of two MLP layers
 * made of experts 0 and 1's weights.  Experts 2 and 3 are set to differ. */
START_TEST(test_moe_ties)
{
	rt_layer_desc moe = {RT_MOE, SHAPE(8, 5, 2), .experts = 4, .top_k = 2, .expert_ffn = 6};
	rt_layer_desc mlp = {RT_MLP, SHAPE(8, 5, 2), .ffn = 6};
	run m, e[2];
	run_alloc(&m, &moe, 8);
	run_fill(&m, 500);
	double *P = m.p;
	int nt = ntensors(&moe);
	rt_tensor_info t[8];
	for (int k = 0; k < nt; k++)
		t[k] = tensor(&moe, k); /* norm, router, experts.w_gate, .w_up, .w_down */
	ck_assert_int_eq(nt, 5);
	memset(P + t[1].offset, 0, tensor_size(&t[1]) * 8);
	size_t HF = 8 * 6;
	for (size_t i = 0; i < 2 * HF; i++) /* experts 2 and 3: large, distinct outputs */
		P[t[4].offset + 2 * HF + i] = 3 + (double)i;
	ck_assert_int_eq(rtd_forward(&moe, m.p, m.x, NULL, m.y, NULL, m.act, m.scr), RT_OK);
	for (int x = 0; x < 2; x++) {
		run_alloc(&e[x], &mlp, 8);
		double *q = e[x].p;
		memcpy(q, P + t[0].offset, 8 * 8); /* the norm scale */
		for (int k = 2; k <= 4; k++)
			memcpy(q + tensor(&mlp, k - 1).offset, P + t[k].offset + (size_t)x * HF, HF * 8);
		memcpy(e[x].x, m.x, m.nx * 8);
		ck_assert_int_eq(rtd_forward(&mlp, e[x].p, e[x].x, NULL, e[x].y, NULL, e[x].act, e[x].scr),
		                 RT_OK);
	}
	double *y = m.y, *x = m.x, *y0 = e[0].y, *y1 = e[1].y, err = 0;
	for (size_t i = 0; i < m.nx; i++)
		err = fmax(err, fabs((y[i] - x[i]) - 0.5 * ((y0[i] - x[i]) + (y1[i] - x[i]))));
	ck_assert_msg(err < 1e-12, "moe with tied router differs from experts 0, 1: %g", err);
	run_free(&m);
	run_free(&e[0]);
	run_free(&e[1]);
}
END_TEST

/* ---- tied embeddings -------------------------------------------------------------------- */

/* A tied head is the head with w = table^T: its table starts as the
 * embedding's (layer 0's, whatever the head's index), and its loss, dx and
 * gradients equal the untied head's on the transposed weight. */
START_TEST(test_tied_head)
{
	rt_layer_desc emb = {RT_EMBEDDING, SHAPE(8, 6, 2), .vocab = 11, .tied = 1};
	rt_layer_desc tied = {RT_HEAD, SHAPE(8, 6, 2), .vocab = 11, .tied = 1};
	rt_layer_desc plain = {RT_HEAD, SHAPE(8, 6, 2), .vocab = 11};
	const size_t H = 8, V = 11;
	run e, t, u;
	run_alloc(&e, &emb, 8);
	run_alloc(&t, &tied, 8);
	run_alloc(&u, &plain, 8);
	ck_assert_uint_eq(t.n, u.n);
	rt_tensor_info tt = tensor(&tied, 1), te = tensor(&emb, 0), tu = tensor(&plain, 1);
	ck_assert_str_eq(tt.name, "table");
	ck_assert(tt.decay);
	ck_assert_int_eq(tt.dim[0], (int64_t)V);
	ck_assert_int_eq(tt.dim[1], (int64_t)H);
	ck_assert_int_eq(rtd_layer_init(&emb, 42, 0, e.p), RT_OK);
	ck_assert_int_eq(rtd_layer_init(&tied, 42, 9, t.p), RT_OK);
	ck_assert_int_eq(rtd_layer_init(&plain, 42, 9, u.p), RT_OK);
	double *pe = e.p, *pt = t.p, *pu = u.p;
	ck_assert_msg(memcmp(pt + tt.offset, pe + te.offset, V * H * 8) == 0,
	              "the tied head's table does not start as the embedding's");
	ck_assert_msg(memcmp(pt + tt.offset, pu + tu.offset, V * H * 8) != 0,
	              "the tied table is the untied head's w");

	run_fill(&t, 31);
	run_fill(&u, 31);
	for (size_t v = 0; v < V; v++)
		for (size_t h = 0; h < H; h++)
			pu[tu.offset + h * V + v] = pt[tt.offset + v * H + h];
	memcpy(pu, pt, H * 8); /* the norm scale */
	rt_loss lt, lu;
	run_fbw(&t, &lt);
	run_fbw(&u, &lu);
	ck_assert_double_eq_tol(lt.sum, lu.sum, 1e-12);
	double err = 0, *dxt = t.dx, *dxu = u.dx, *gt = t.g, *gu = u.g;
	for (size_t i = 0; i < t.nx; i++)
		err = fmax(err, fabs(dxt[i] - dxu[i]));
	for (size_t h = 0; h < H; h++)
		err = fmax(err, fabs(gt[h] - gu[h]));
	for (size_t v = 0; v < V; v++)
		for (size_t h = 0; h < H; h++)
			err = fmax(err, fabs(gt[tt.offset + v * H + h] - gu[tu.offset + h * V + v]));
	ck_assert_msg(err < 1e-12, "tied head differs from the head on table^T: %g", err);
	run_free(&e);
	run_free(&t);
	run_free(&u);
}
END_TEST

/* The shared experts' gate: shared.gate is the last tensor, [H][1], after
 * the layout without it; with the gate at zero, sigmoid(0) = 1/2 weighs the
 * shared output: the layer is the ungated one with shared.w_down halved. */
START_TEST(test_moe_shared_gate)
{
	rt_layer_desc gd = {RT_MOE, SHAPE(8, 5, 2), .experts = 3, .top_k = 2, .expert_ffn = 4,
	                    .shared_experts = 2, .shared_gate = 1};
	rt_layer_desc pd = gd;
	pd.shared_gate = 0;
	run g, p;
	run_alloc(&g, &gd, 8);
	run_alloc(&p, &pd, 8);
	run_fill(&g, 600);
	ck_assert_uint_eq(g.n, p.n + 8);
	int nt = ntensors(&gd);
	rt_tensor_info gate = tensor(&gd, nt - 1), wd = tensor(&pd, ntensors(&pd) - 1);
	ck_assert_str_eq(gate.name, "shared.gate");
	ck_assert(gate.ndim == 2 && gate.dim[0] == 8 && gate.dim[1] == 1 && gate.decay);
	ck_assert_int_eq(gate.offset, (int64_t)p.n);
	ck_assert_str_eq(wd.name, "shared.w_down");
	double *G = g.p, *P = p.p;
	memcpy(P, G, p.n * 8);
	memset(G + gate.offset, 0, 8 * 8);
	for (size_t i = 0; i < tensor_size(&wd); i++)
		P[wd.offset + (int64_t)i] *= 0.5;
	memcpy(p.x, g.x, g.nx * 8);
	ck_assert_int_eq(rtd_forward(&gd, g.p, g.x, NULL, g.y, NULL, g.act, g.scr), RT_OK);
	ck_assert_int_eq(rtd_forward(&pd, p.p, p.x, NULL, p.y, NULL, p.act, p.scr), RT_OK);
	double err = relerr(g.y, p.y, g.nx);
	ck_assert_msg(err < 1e-14, "gate at zero differs from half the shared output: %g", err);
	/* A gate that is not zero changes the output. */
	G[gate.offset] = 1;
	ck_assert_int_eq(rtd_forward(&gd, g.p, g.x, NULL, g.y, NULL, g.act, g.scr), RT_OK);
	ck_assert(relerr(g.y, p.y, g.nx) > 1e-6);
	double f, b, w, f0, b0, w0;
	ck_assert_int_eq(rt_layer_flops(&gd, &f, &b, &w), RT_OK);
	ck_assert_int_eq(rt_layer_flops(&pd, &f0, &b0, &w0), RT_OK);
	double gemm = 2.0 * 10 * 8; /* 2 T H: u . gate */
	ck_assert(f == f0 + gemm && b == b0 + gemm && w == w0 + gemm);
	run_free(&g);
	run_free(&p);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------ */

START_TEST(test_errors)
{
	static const rt_layer_desc bad[] = {
		{RT_NKINDS, SHAPE(8, 4, 1)},
		{RT_MLP, SHAPE(0, 4, 1), .ffn = 8},
		{RT_MLP, SHAPE(8, 0, 1), .ffn = 8},
		{RT_MLP, SHAPE(8, 4, 1)},                                   /* no ffn */
		{RT_MLP, SHAPE(8, 4, 1), .ffn = 8, .act = RT_NACTS},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 4, .kv_heads = 3},  /* kv does not divide */
		{RT_ATTENTION, SHAPE(10, 4, 1), .heads = 4},                /* head_dim: 10 / 4 */
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .q_lora_rank = 4}, /* MLA field without MLA */
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .kv_lora_rank = 4}, /* MLA without rope dim */
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .rope_theta = -1e4},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .rope_theta = INFINITY},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .rope_theta = NAN},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .qkv_bias = 2},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .qk_norm = -1},
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .kv_lora_rank = 4, .qk_rope_dim = 2,
		 .qkv_bias = 1}, /* MLA has no q, k, v projections to bias */
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .kv_lora_rank = 4, .qk_rope_dim = 2,
		 .qk_norm = 1},
#define ROPE(...) {RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, __VA_ARGS__}
		ROPE(.rope_scaling = 4, .rope_factor = 2),                    /* no such type */
		ROPE(.rope_scaling = -1),
		ROPE(.rope_factor = 2),                                       /* a field without a type */
		ROPE(.rope_scaling = RT_ROPE_LINEAR),                         /* no factor */
		ROPE(.rope_scaling = RT_ROPE_LINEAR, .rope_factor = 0.5),     /* factor below 1 */
		ROPE(.rope_scaling = RT_ROPE_LINEAR, .rope_factor = INFINITY),
		ROPE(.rope_scaling = RT_ROPE_LINEAR, .rope_factor = 2, .rope_original_max = 8),
		ROPE(.rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8, .rope_low_freq_factor = 4,
		     .rope_high_freq_factor = 4, .rope_original_max = 64),   /* high not above low */
		ROPE(.rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8, .rope_low_freq_factor = 1,
		     .rope_high_freq_factor = 4),                             /* no original length */
		ROPE(.rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8, .rope_low_freq_factor = 1,
		     .rope_high_freq_factor = 4, .rope_original_max = 64, .rope_beta_fast = 8),
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 64,
		     .rope_beta_fast = 1, .rope_beta_slow = 2),               /* slow above fast */
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 64,
		     .rope_mscale = 1),                                       /* mscale alone */
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 64,
		     .rope_attention_factor = -1),
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 64,
		     .rope_mscale_all_dim = NAN),
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 64,
		     .rope_theta = 1),                                        /* log(theta) = 0 */
		ROPE(.rope_scaling = RT_ROPE_YARN, .rope_factor = 4, .rope_original_max = 0),
#undef ROPE
		{RT_MOE, SHAPE(8, 4, 1), .experts = 2, .top_k = 3, .expert_ffn = 4},
		{RT_MOE, SHAPE(8, 4, 1), .experts = 2, .top_k = 1, .expert_ffn = 4,
		 .shared_gate = 1}, /* a gate without shared experts */
		{RT_MOE, SHAPE(8, 4, 1), .experts = 2, .top_k = 1, .expert_ffn = 4,
		 .shared_experts = 1, .shared_gate = 2},
		{RT_MAMBA, SHAPE(8, 4, 1), .version = 3, .state = 4},
		{RT_MAMBA, SHAPE(8, 4, 1), .version = 2, .state = 4, .heads = 3, .head_dim = 4},
		{RT_MAMBA, SHAPE(8, 4, 1), .version = 2, .state = 4, .head_dim = 4, .groups = 3},
		{RT_MAMBA, SHAPE(8, 4, 1), .version = 1, .state = 4, .heads = 2},
		{RT_MAMBA, SHAPE(8, 4, 1), .version = 2, .state = 4, .ssm_heads = 4}, /* parallel's */
		{RT_ATTENTION, SHAPE(8, 4, 1), .heads = 2, .ssm_head_dim = 4},
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 2, .version = 1, .state = 4}, /* Mamba-1 */
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 2, .state = 4, .dt_rank = 2},
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 2, .kv_lora_rank = 4, .qk_rope_dim = 2,
		 .state = 4}, /* MLA */
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 2, .state = 4, .ssm_heads = 3, .ssm_head_dim = 4},
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 3, .state = 4},      /* head_dim: 8 / 3 */
		{RT_PARALLEL, SHAPE(8, 4, 1), .heads = 2},                  /* no state */
		{RT_HEAD, SHAPE(8, 4, 1)},                                  /* no vocab */
		{RT_HEAD, SHAPE(8, 4, 1), .vocab = 5, .tied = 2},
		{RT_MLP, SHAPE(8, 4, 1), .ffn = 4, .tied = 1}, /* only the embedding and head tie */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		rt_sizes sz;
		ck_assert_msg(rt_layer_check(&bad[i]) == RT_EINVAL, "bad descriptor %zu accepted", i);
		ck_assert_int_eq(rt_layer_sizes(&bad[i], &sz), RT_EINVAL);
		ck_assert_int_eq(rt_forward(&bad[i], NULL, NULL, NULL, NULL, NULL, NULL, NULL), RT_EINVAL);
	}
	ck_assert_int_eq(rt_layer_check(NULL), RT_EARG);
	for (int c = 0; c < NCASES; c++)
		ck_assert_int_eq(rt_layer_check(&cases[c].d), RT_OK);

	const rt_layer_desc *emb = &cases[0].d, *head = &cases[1].d;
	run r;
	run_alloc(&r, emb, 4);
	run_fill(&r, 1);
	r.tok[3] = (int32_t)emb->vocab;
	ck_assert_int_eq(rt_forward(emb, r.p, NULL, r.tok, r.y, NULL, r.act, r.scr), RT_ERANGE);
	r.tok[3] = -1;
	ck_assert_int_eq(rt_forward(emb, r.p, NULL, r.tok, r.y, NULL, r.act, r.scr), RT_ERANGE);
	r.tok[3] = 0;
	ck_assert_int_eq(rt_forward(emb, r.p, NULL, r.tok, r.y, NULL, r.act, r.scr), RT_OK);
	ck_assert_int_eq(rt_forward(emb, r.p, NULL, NULL, r.y, NULL, r.act, r.scr), RT_EARG);
	ck_assert_int_eq(rt_forward(emb, r.p, NULL, r.tok, r.y, NULL, (char *)r.act + 4, r.scr), RT_EARG);
	ck_assert_int_eq(rt_backward_w(emb, r.p, NULL, r.ws, r.scr), RT_EARG);
	run_free(&r);
	run_alloc(&r, head, 4);
	run_fill(&r, 1);
	rt_loss loss;
	ck_assert_int_eq(rt_forward(head, r.p, r.x, r.tok, NULL, &loss, r.act, r.scr), RT_OK);
	ck_assert_int_eq(loss.count, head->mbs * head->seq - 1); /* one target is -1 */
	ck_assert_int_eq(rt_forward(head, r.p, r.x, r.tok, NULL, NULL, r.act, r.scr), RT_EARG);
	ck_assert_int_eq(rt_forward(head, r.p, r.x, r.tok, NULL, &loss, r.act, NULL), RT_EARG);
	run_free(&r);
	for (int code = 0; code >= -5; code--)
		ck_assert_ptr_nonnull(rt_strerror(code));
}
END_TEST

/* ---- a stack that trains ----------------------------------------------------------------- */

/* tiny-hybrid's layers (hidden 64, seq 64, mbs 2), one of each mixer and
 * FFN kind, SGD on one fixed batch of a repeating token pattern: the loss
 * must halve within 30 steps, and two runs must agree bit for bit. */
static void train(double *losses, int steps)
{
	rt_layer_desc L[] = {
		{RT_EMBEDDING, SHAPE(64, 64, 2), .vocab = 256},
		{RT_MAMBA, SHAPE(64, 64, 2), .version = 2, .state = 16, .expand = 2, .conv = 4,
		 .head_dim = 16, .groups = 1},
		{RT_MOE, SHAPE(64, 64, 2), .experts = 4, .top_k = 2, .expert_ffn = 64, .shared_experts = 1},
		{RT_ATTENTION, SHAPE(64, 64, 2), .heads = 4, .kv_heads = 2},
		{RT_MLP, SHAPE(64, 64, 2), .ffn = 128},
		{RT_HEAD, SHAPE(64, 64, 2), .vocab = 256},
	};
	enum { NL = sizeof L / sizeof *L, T = 128, H = 64 };
	float *p[NL], *g[NL], *act[NL], *h[NL + 1];
	size_t n[NL], ws = 0, scr = 0;
	for (int i = 0; i < NL; i++) {
		rt_sizes sz;
		ck_assert_int_eq(rt_layer_sizes(&L[i], &sz), RT_OK);
		n[i] = (size_t)sz.params;
		p[i] = xalloc(n[i] * 4);
		g[i] = xalloc(n[i] * 4);
		act[i] = xalloc((size_t)sz.act);
		h[i] = xalloc(T * H * 4);
		ws = ws > (size_t)sz.wstash ? ws : (size_t)sz.wstash;
		scr = scr > (size_t)sz.scratch ? scr : (size_t)sz.scratch;
		ck_assert_int_eq(rt_layer_init(&L[i], 1, i, p[i]), RT_OK);
	}
	h[NL] = xalloc(T * H * 4);
	void *wst = xalloc(ws), *sc = xalloc(scr);
	float *d0 = xalloc(T * H * 4), *d1 = xalloc(T * H * 4);
	int32_t tok[T], tgt[T];
	for (int t = 0; t < T; t++) {
		tok[t] = (t % 64 * 5 + t / 64) % 13 + 'a';
		tgt[t] = ((t + 1) % 64 * 5 + t / 64) % 13 + 'a';
	}
	for (int s = 0; s < steps; s++) {
		rt_loss loss;
		for (int i = 0; i < NL; i++)
			ck_assert_int_eq(rt_forward(&L[i], p[i], i == 0 ? NULL : h[i], i == 0 ? tok : i == NL - 1 ? tgt : NULL,
			                            i == NL - 1 ? NULL : h[i + 1], i == NL - 1 ? &loss : NULL,
			                            act[i], sc), RT_OK);
		losses[s] = loss.sum / (double)loss.count;
		float *dy = NULL;
		for (int i = NL - 1; i >= 0; i--) {
			float *dx = dy == d0 ? d1 : d0;
			ck_assert_int_eq(rt_backward_b(&L[i], p[i], dy, 1.0f / T, i ? dx : NULL, act[i], wst, sc),
			                 RT_OK);
			memset(g[i], 0, n[i] * 4);
			ck_assert_int_eq(rt_backward_w(&L[i], p[i], g[i], wst, sc), RT_OK);
			for (size_t k = 0; k < n[i]; k++)
				p[i][k] -= 0.5f * g[i][k];
			dy = dx;
		}
	}
	for (int i = 0; i < NL; i++)
		free(p[i]), free(g[i]), free(act[i]), free(h[i]);
	free(h[NL]), free(wst), free(sc), free(d0), free(d1);
}

START_TEST(test_training)
{
	enum { STEPS = 30 };
	double a[STEPS], b[STEPS];
	train(a, STEPS);
	train(b, STEPS);
	ck_assert_msg(memcmp(a, b, sizeof a) == 0, "two runs differ");
	for (int s = 0; s < STEPS; s++)
		ck_assert(isfinite(a[s]));
	ck_assert_msg(a[STEPS - 1] < 0.5 * a[0], "loss %g -> %g", a[0], a[STEPS - 1]);
}
END_TEST

/* A parallel layer is an attention layer and a Mamba-2 layer on one norm:
 * with their weights taken from it (the mixer's norm the shared one), its
 * y - x, dx - dy and gradients are the two layers' sums (the shared norm's
 * gradient too), in f64 to rounding. */
START_TEST(test_parallel_parts)
{
	rt_layer_desc pd = {RT_PARALLEL, SHAPE(12, 19, 2), .heads = 3, .kv_heads = 1, .head_dim = 4,
	                    .window = 5, .qk_norm = 1, .state = 3, .expand = 2, .conv = 3,
	                    .ssm_heads = 4, .ssm_head_dim = 6, .groups = 2};
	rt_layer_desc ad = {RT_ATTENTION, SHAPE(12, 19, 2), .heads = 3, .kv_heads = 1, .head_dim = 4,
	                    .window = 5, .qk_norm = 1};
	rt_layer_desc md = {RT_MAMBA, SHAPE(12, 19, 2), .version = 2, .state = 3, .expand = 2,
	                    .conv = 3, .heads = 4, .head_dim = 6, .groups = 2};
	run rp, ra, rm;
	run_alloc(&rp, &pd, 8);
	run_alloc(&ra, &ad, 8);
	run_alloc(&rm, &md, 8);
	size_t H = 12, na = ra.n;
	ck_assert_uint_eq(rp.n, ra.n + rm.n - H);
	run_fill(&rp, 11);
	run_fill(&ra, 11);
	run_fill(&rm, 11);
	double *pp = rp.p, *pa = ra.p, *pm = rm.p;
	memcpy(pa, pp, na * 8);
	memcpy(pm, pp, H * 8);
	memcpy(pm + H, pp + na, (rm.n - H) * 8);
	memcpy(ra.x, rp.x, rp.nx * 8), memcpy(rm.x, rp.x, rp.nx * 8);
	memcpy(ra.dy, rp.dy, rp.nx * 8), memcpy(rm.dy, rp.dy, rp.nx * 8);
	run_fbw(&rp, NULL);
	run_fbw(&ra, NULL);
	run_fbw(&rm, NULL);
	const double *x = rp.x, *dy = rp.dy;
	double *yp = rp.y, *ya = ra.y, *ym = rm.y, *dxp = rp.dx, *dxa = ra.dx, *dxm = rm.dx;
	double *gp = rp.g, *ga = ra.g, *gm = rm.g;
	for (size_t i = 0; i < rp.nx; i++) {
		ck_assert_double_eq_tol(yp[i] - x[i], (ya[i] - x[i]) + (ym[i] - x[i]), 1e-12);
		ck_assert_double_eq_tol(dxp[i] - dy[i], (dxa[i] - dy[i]) + (dxm[i] - dy[i]), 1e-12);
	}
	for (size_t i = 0; i < rp.n; i++) {
		double want = i < H ? ga[i] + gm[i] : i < na ? ga[i] : gm[i - na + H];
		ck_assert_double_eq_tol(gp[i], want, 1e-12 * (1 + fabs(want)));
	}
	run_free(&rp);
	run_free(&ra);
	run_free(&rm);
}
END_TEST

/* rope_theta: 0 and 10000 are the same layer, bit for bit; another base
 * changes the output; with qk_norm the q and k heads leave the norm at unit
 * RMS times the scale, so a layer whose q and k scales are doubled and
 * whose wq, wk are halved computes the same thing (the norm undoes the
 * scale of its input). */
static void attn_forward(const rt_layer_desc *d, const double *p, double *y)
{
	run r;
	run_alloc(&r, d, 8);
	run_fill(&r, 1);
	memcpy(r.p, p, r.n * 8);
	ck_assert_int_eq(rtd_forward(d, r.p, r.x, NULL, r.y, NULL, r.act, r.scr), RT_OK);
	memcpy(y, r.y, r.nx * 8);
	run_free(&r);
}

START_TEST(test_attention_options)
{
	rt_layer_desc d = {RT_ATTENTION, SHAPE(16, 6, 2), .heads = 4, .kv_heads = 2};
	rt_sizes sz;
	ck_assert_int_eq(rtd_layer_sizes(&d, &sz), RT_OK);
	size_t n = (size_t)sz.params, nx = (size_t)(16 * 6 * 2);
	double *p = xalloc(n * 8), *y0 = xalloc(nx * 8), *y1 = xalloc(nx * 8);
	ck_assert_int_eq(rtd_layer_init(&d, 3, 1, p), RT_OK);
	attn_forward(&d, p, y0);
	d.rope_theta = 10000;
	attn_forward(&d, p, y1);
	ck_assert(memcmp(y0, y1, nx * 8) == 0);
	d.rope_theta = 1e6;
	attn_forward(&d, p, y1);
	ck_assert(memcmp(y0, y1, nx * 8) != 0);

	d = (rt_layer_desc){RT_ATTENTION, SHAPE(16, 6, 2), .heads = 4, .kv_heads = 2, .qk_norm = 1};
	ck_assert_int_eq(rtd_layer_sizes(&d, &sz), RT_OK);
	n = (size_t)sz.params;
	free(p);
	p = xalloc(n * 8);
	ck_assert_int_eq(rtd_layer_init(&d, 3, 1, p), RT_OK);
	for (size_t i = 0; i < n; i++)
		p[i] *= 1 + 0.1 * sin((double)i); /* scales not all ones */
	attn_forward(&d, p, y0);
	rt_tensor_info wq = {0}, wk = {0}, gq = {0}, gk = {0};
	int nt;
	ck_assert_int_eq(rt_layer_ntensors(&d, &nt), RT_OK);
	for (int i = 0; i < nt; i++) {
		rt_tensor_info t;
		ck_assert_int_eq(rt_layer_tensor(&d, i, &t), RT_OK);
		if (!strcmp(t.name, "wq")) wq = t;
		if (!strcmp(t.name, "wk")) wk = t;
		if (!strcmp(t.name, "q_head_norm")) gq = t;
		if (!strcmp(t.name, "k_head_norm")) gk = t;
	}
	ck_assert_int_eq(gq.ndim, 1);
	ck_assert_int_eq(gq.dim[0], 4); /* head_dim */
	ck_assert_int_eq(gk.offset, gq.offset + 4);
	for (int64_t i = 0; i < wq.dim[0] * wq.dim[1]; i++)
		p[wq.offset + i] *= 0.5;
	for (int64_t i = 0; i < wk.dim[0] * wk.dim[1]; i++)
		p[wk.offset + i] *= 4;
	attn_forward(&d, p, y1);
	double err = 0, ref = 0;
	for (size_t i = 0; i < nx; i++)
		err = fmax(err, fabs(y0[i] - y1[i])), ref = fmax(ref, fabs(y0[i]));
	/* Not exact: the norm's epsilon sees the scaled input. */
	ck_assert_msg(err < 1e-3 * ref, "qk_norm: input scale changed the output by %g", err);
	for (int64_t i = 0; i < gq.dim[0]; i++)
		p[gq.offset + i] *= 2;
	attn_forward(&d, p, y1);
	err = 0;
	for (size_t i = 0; i < nx; i++)
		err = fmax(err, fabs(y0[i] - y1[i]));
	ck_assert_msg(err > 1e-3 * ref, "qk_norm: the q scale does not reach the output");
	free(p);
	free(y0);
	free(y1);
}
END_TEST

/* RoPE scaling (docs/layers.md, "RoPE scaling"):
 *   - the inverse frequencies of Llama-3.1-405B (llama3: kept, ramped and
 *     divided pairs) and of DeepSeek-V3's rotary part (yarn) are the doc's
 *     formulas, computed apart in Python (to 1e-15);
 *   - DeepSeek-V3's mscale = mscale_all_dim = 1 leaves cos and sin as they
 *     are and scales the scores by (0.1 ln 40 + 1)^2;
 *   - linear with factor 1 is the unscaled layer, bit for bit;
 *   - YaRN's default attention factor is 0.1 ln(factor) + 1, bit for bit
 *     the one given; it multiplies the rotated q and k: with the whole head
 *     rotated (GQA), attention factor a is wq and wk scaled by a;
 *   - mscale_all_dim scales MLA's scores by mscale(factor, mscale_all_dim)^2:
 *     the same as wq_b scaled by it, attention factor 1. */
static double rope_freq(const rt_layer_desc *d, int64_t i, rt_shape *s)
{
	ck_assert_int_eq(rt__shape(d, s), RT_OK);
	return rt__rope_freq(s, i);
}

/* a's output against b's, b with the tensors named (NULL-terminated)
 * multiplied by scale: the same bits (tol 0) or within tol relative. */
static void attn_compare(const rt_layer_desc *a, const rt_layer_desc *b,
                         const char *const *tensors, double scale, double tol, const char *what)
{
	rt_sizes sz;
	ck_assert_int_eq(rtd_layer_sizes(a, &sz), RT_OK);
	size_t n = (size_t)sz.params, nx = (size_t)(a->hidden * a->seq * a->mbs);
	double *p = xalloc(n * 8), *ya = xalloc(nx * 8), *yb = xalloc(nx * 8);
	ck_assert_int_eq(rtd_layer_init(a, 3, 1, p), RT_OK);
	attn_forward(a, p, ya);
	int nt;
	ck_assert_int_eq(rt_layer_ntensors(b, &nt), RT_OK);
	for (int i = 0; i < nt; i++) {
		rt_tensor_info t;
		ck_assert_int_eq(rt_layer_tensor(b, i, &t), RT_OK);
		for (const char *const *nm = tensors; nm && *nm; nm++)
			if (!strcmp(*nm, t.name))
				for (size_t k = 0; k < tensor_size(&t); k++)
					p[t.offset + (int64_t)k] *= scale;
	}
	attn_forward(b, p, yb);
	double err = 0, ref = 0;
	for (size_t i = 0; i < nx; i++)
		err = fmax(err, fabs(ya[i] - yb[i])), ref = fmax(ref, fabs(ya[i]));
	if (tol == 0)
		ck_assert_msg(memcmp(ya, yb, nx * 8) == 0, "%s: not the same bits (%g)", what, err);
	else
		ck_assert_msg(err <= tol * ref, "%s: off by %g of %g", what, err, ref);
	free(p);
	free(ya);
	free(yb);
}

START_TEST(test_rope_scaling)
{
	rt_shape s;
	/* Llama-3.1-405B: head_dim 128, rope_theta 5e5, llama3 8 / 1 / 4 / 8192. */
	rt_layer_desc l3 = {RT_ATTENTION, SHAPE(128, 4, 1), .heads = 1, .rope_theta = 5e5,
	                    .rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8,
	                    .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
	                    .rope_original_max = 8192};
	static const struct { int64_t i; double want; } l3w[] = {
		{0, 1.0}, {10, 0.12868737343265052}, {28, 0.003211445994752591},
		{29, 0.002166570763503359}, {33, 0.00031269375038406517},
		{35, 9.556212353964683e-05}, {63, 3.068925988914511e-07},
	};
	for (size_t k = 0; k < sizeof l3w / sizeof *l3w; k++) {
		double got = rope_freq(&l3, l3w[k].i, &s);
		ck_assert_msg(fabs(got - l3w[k].want) <= 1e-15 * l3w[k].want, "llama3 pair %lld: %.17g, "
		              "want %.17g", (long long)l3w[k].i, got, l3w[k].want);
	}
	ck_assert(s.rope_mscale == 1 && s.qk_scale == 1);
	/* DeepSeek-V3: qk_rope_dim 64, theta 1e4, yarn 40 / 4096, mscales 1. */
	rt_layer_desc v3 = {RT_ATTENTION, SHAPE(64, 4, 1), .heads = 1, .head_dim = 16,
	                    .kv_lora_rank = 8, .qk_rope_dim = 64, .rope_scaling = RT_ROPE_YARN,
	                    .rope_factor = 40, .rope_original_max = 4096, .rope_beta_fast = 32,
	                    .rope_beta_slow = 1, .rope_mscale = 1, .rope_mscale_all_dim = 1};
	static const struct { int64_t i; double want; } yw[] = {
		{0, 1.0}, {10, 0.05623413251903491}, {16, 0.0055}, {20, 0.0007905694150420946},
		{25, 1.8747355233311396e-05}, {31, 3.3338035804083097e-06},
	};
	for (size_t k = 0; k < sizeof yw / sizeof *yw; k++) {
		double got = rope_freq(&v3, yw[k].i, &s);
		ck_assert_msg(fabs(got - yw[k].want) <= 1e-15 * yw[k].want, "yarn pair %lld: %.17g, "
		              "want %.17g", (long long)yw[k].i, got, yw[k].want);
	}
	ck_assert(s.rope_mscale == 1);
	ck_assert_msg(fabs(s.qk_scale - 1.8738542070926265) < 1e-15, "qk_scale %.17g", s.qk_scale);

	rt_layer_desc none = {RT_ATTENTION, SHAPE(16, 6, 2), .heads = 4, .kv_heads = 2};
	rt_layer_desc lin = none;
	lin.rope_scaling = RT_ROPE_LINEAR, lin.rope_factor = 1;
	attn_compare(&none, &lin, NULL, 1, 0, "linear with factor 1");

	rt_layer_desc yarn = {RT_ATTENTION, SHAPE(16, 6, 2), .heads = 2, .head_dim = 8,
	                      .rope_theta = 100, .rope_scaling = RT_ROPE_YARN, .rope_factor = 4,
	                      .rope_original_max = 64, .rope_beta_fast = 4, .rope_beta_slow = 0.5};
	rt_layer_desc given = yarn;
	given.rope_attention_factor = 0.1 * log(4.0) + 1;
	attn_compare(&yarn, &given, NULL, 1, 0, "yarn's default attention factor");
	rt_layer_desc one = yarn;
	one.rope_attention_factor = 1;
	given.rope_attention_factor = 1.7;
	attn_compare(&given, &one, (const char *const[]){"wq", "wk", NULL}, 1.7, 1e-12,
	             "yarn's attention factor as wq, wk scaled");

	rt_layer_desc mla = {RT_ATTENTION, SHAPE(16, 6, 2), .heads = 2, .head_dim = 4,
	                     .q_lora_rank = 6, .kv_lora_rank = 5, .qk_rope_dim = 4,
	                     .rope_scaling = RT_ROPE_YARN, .rope_factor = 40,
	                     .rope_original_max = 16, .rope_mscale = 0.707,
	                     .rope_mscale_all_dim = 0.707};
	ck_assert_int_eq(rt__shape(&mla, &s), RT_OK);
	ck_assert(s.rope_mscale == 1);
	double m = 0.1 * 0.707 * log(40.0) + 1;
	rt_layer_desc plain = mla;
	plain.rope_mscale = plain.rope_mscale_all_dim = 0, plain.rope_attention_factor = 1;
	attn_compare(&mla, &plain, (const char *const[]){"wq_b", NULL}, m * m, 1e-12,
	             "mscale_all_dim as wq_b scaled");
}
END_TEST

static Suite *kernels_suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *tc = tcase_create("grad");
	tcase_add_loop_test(tc, test_gradcheck, 0, NCASES);
	tcase_add_loop_test(tc, test_bw_split, 0, NCASES);
	tcase_add_loop_test(tc, test_f32_vs_f64, 0, NCASES);
	tcase_add_loop_test(tc, test_determinism, 0, NCASES);
	tcase_add_loop_test(tc, test_selective, 0, NCASES);
	suite_add_tcase(s, tc);
	tc = tcase_create("api");
	tcase_add_test(tc, test_init);
	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_parallel_parts);
	tcase_add_test(tc, test_decay_flags);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_attention_options);
	tcase_add_test(tc, test_rope_scaling);
	tcase_add_test(tc, test_moe_ties);
	tcase_add_test(tc, test_tied_head);
	tcase_add_test(tc, test_moe_shared_gate);
	tcase_add_test(tc, test_training);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	openblas_set_num_threads(1);
	SRunner *sr = srunner_create(kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
