/* test_cost.c: Check suite "cost" -- the analytic cost model (passes/cost.c,
 * docs/cost-model.md), the `cost` pass, profiles (frontend/profile.c,
 * docs/profile.md) and the `ideal` cluster preset.
 *
 * FLOPs and parameters are checked against closed forms written out here
 * from the documented formulas, the zoo's parameter counts against the
 * published ones, and the worked example of docs/cost-model.md number for
 * number. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost.h"
#include "frontend.h"
#include "pass.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A module built directly: embedding, the given middle layer, head. */
static ir_module *one(ir_layer_kind k, int64_t hidden, int64_t seq, int64_t mbs, ir_dtype dt)
{
	ir_module *m = ir_new();
	m->model = (ir_model_info){"t", hidden, 1000, seq, dt};
	m->train = (ir_train){.mbs = mbs, .microbatches = 4, .steps = 1, .lr = 1e-3, .seed = 1,
	                      .optimizer = IR_OPT_ADAMW};
	m->cluster = (ir_cluster){.name = "c", .devices = 1, .per_node = 1, .mem = 1ull << 36,
	                          .flops = 1e14, .membw = 1e12, .intra = {1e10, 1}, .inter = {1e9, 5}};
	m->plan.chunks = 1;
	ir_add_layer(m, IR_LAYER_EMBEDDING, (ir_loc){0});
	ir_add_layer(m, k, (ir_loc){0});
	ir_add_layer(m, IR_LAYER_HEAD, (ir_loc){0});
	return m;
}

static int64_t *attr(ir_module *m)
{
	return m->layers[1].attr;
}

static ir_cost cost_of(const ir_module *m, int i, double flops[IR_NOPS])
{
	ir_cost c;
	ck_assert_int_eq(cost_layer_split(m, i, &c, flops), 0);
	ck_assert(c.known);
	return c;
}

static ir_module *zoo(const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), name);
	ir_module *m = fe_load(path, NULL);
	ck_assert_msg(m != NULL, "cannot load %s", path);
	return m;
}

static double total_params(const ir_module *m)
{
	double p = 0;
	for (int i = 0; i < m->nlayers; i++)
		p += cost_of(m, i, NULL).params;
	return p;
}

static void assert_near(double got, double want, double rel)
{
	ck_assert_msg(fabs(got - want) <= rel * fabs(want), "got %.6g, want %.6g (within %g %%)", got,
	              want, 100 * rel);
}

/* ---- FLOPs and parameters against closed forms ------------------------------ */

START_TEST(test_mlp_closed_form)
{
	/* T = 2 x 128 tokens, h 256, f 512; gated: 3 matrices, swiglu 5 FLOPs
	 * per output; plain gelu: 2 matrices, 8 FLOPs. */
	static const struct { int act; double up, per; } cases[] = {
		{IR_ACT_SWIGLU, 2, 5}, {IR_ACT_GELU, 1, 8}, {IR_ACT_RELU2, 1, 2}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		ir_module *m = one(IR_LAYER_MLP, 256, 128, 2, IR_DTYPE_F32);
		attr(m)[IR_ATTR_FFN] = 512;
		attr(m)[IR_ATTR_ACT] = cases[i].act;
		double T = 256, h = 256, f = 512, up = cases[i].up, s = 4, fl[IR_NOPS];
		ir_cost c = cost_of(m, 1, fl);
		double mm = 2 * T * h * up * f + 2 * T * f * h;
		ck_assert_double_eq(fl[IR_OP_F], 4 * T * h + mm + cases[i].per * T * f + T * h);
		ck_assert_double_eq(fl[IR_OP_B], 8 * T * h + mm + 2 * cases[i].per * T * f + T * h);
		ck_assert_double_eq(fl[IR_OP_W], mm);
		ck_assert_double_eq(c.flops, fl[IR_OP_F] + fl[IR_OP_B] + fl[IR_OP_W]);
		ck_assert_uint_eq(c.params, (uint64_t)(h + (up + 1) * h * f));
		/* x and rstd, the up GEMM's input, the activation's input, the down GEMM's input */
		ck_assert_uint_eq(c.act, (uint64_t)(s * T * (2 * h + up * f + f) + 4 * T));
		/* the GEMMs' inputs and output gradients */
		ck_assert_uint_eq(c.wstash, (uint64_t)(s * T * (h + up * f) + s * T * (f + h)));
		/* f32 AdamW: weights 4, gradient 4, moments 8 */
		ck_assert_uint_eq(c.resident, c.params * 16);
		ir_free(m);
	}
}
END_TEST

/* The attention options (docs/cost-model.md, "attention (GQA)"): biases
 * add (H + 2G) d parameters, an add in F and a column sum in W; the
 * per-head norm adds 2d parameters and a norm over T H and T G rows of d;
 * rope_theta changes nothing.  The parameter count is the runtime's. */
START_TEST(test_attention_options_closed_form)
{
	ir_module *m = one(IR_LAYER_ATTENTION, 512, 1024, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	v[IR_ATTR_HEADS] = 8, v[IR_ATTR_KV_HEADS] = 2, v[IR_ATTR_HEAD_DIM] = 64;
	double T = 1024, h = 512, H = 8, G = 2, d = 64, base[IR_NOPS], fl[IR_NOPS];
	ir_cost c0 = cost_of(m, 1, base);
	v[IR_ATTR_ROPE_THETA] = ir_real_bits(1e6);
	ir_cost c = cost_of(m, 1, fl);
	ck_assert(c.params == c0.params && c.act == c0.act && c.wstash == c0.wstash &&
	          c.f == c0.f && c.b == c0.b && c.w == c0.w && c.flops == c0.flops);
	v[IR_ATTR_QKV_BIAS] = 1;
	c = cost_of(m, 1, fl);
	double nb = (H + 2 * G) * d;
	ck_assert_uint_eq(c.params, c0.params + (uint64_t)nb);
	ck_assert_double_eq(fl[IR_OP_F], base[IR_OP_F] + T * nb);
	ck_assert_double_eq(fl[IR_OP_B], base[IR_OP_B]);
	ck_assert_double_eq(fl[IR_OP_W], base[IR_OP_W] + T * nb);
	ck_assert_uint_eq(c.act, c0.act);
	v[IR_ATTR_QKV_BIAS] = 0, v[IR_ATTR_QK_NORM] = 1;
	c = cost_of(m, 1, fl);
	ck_assert_uint_eq(c.params, c0.params + (uint64_t)(2 * d));
	ck_assert_double_eq(fl[IR_OP_F], base[IR_OP_F] + 4 * T * (H + G) * d);
	ck_assert_double_eq(fl[IR_OP_B], base[IR_OP_B] + 8 * T * (H + G) * d);
	ck_assert_uint_eq(c.act, c0.act + (uint64_t)(2 * T * (H + G) * d + 4 * T * (H + G)));
	v[IR_ATTR_QKV_BIAS] = 1;
	c = cost_of(m, 1, fl);
	rt_layer_desc rd = cost_rt_desc(m, &m->layers[1]);
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&rd, &sz), RT_OK);
	ck_assert_uint_eq(c.params, (uint64_t)sz.params);
	ck_assert_uint_eq(c.params, (uint64_t)(h + h * (H + 2 * G) * d + H * d * h + nb + 2 * d));
	ck_assert(rd.rope_theta == 1e6 && rd.qkv_bias == 1 && rd.qk_norm == 1);
	ir_free(m);
}
END_TEST

/* A parallel layer (docs/cost-model.md, "parallel") costs an attention
 * layer and a Mamba-2 layer of its attributes less one RMSNorm: FLOPs and
 * parameters the sums less the norm's, and its parameter count is the
 * runtime's. */
START_TEST(test_parallel_closed_form)
{
	double h = 512, T = 1024, fl[3][IR_NOPS];
	ir_module *mp = one(IR_LAYER_PARALLEL, 512, 1024, 1, IR_DTYPE_F32);
	ir_module *ma = one(IR_LAYER_ATTENTION, 512, 1024, 1, IR_DTYPE_F32);
	ir_module *mm = one(IR_LAYER_MAMBA, 512, 1024, 1, IR_DTYPE_F32);
	int64_t *p = attr(mp), *a = attr(ma), *b = attr(mm);
	p[IR_ATTR_HEADS] = a[IR_ATTR_HEADS] = 8;
	p[IR_ATTR_KV_HEADS] = a[IR_ATTR_KV_HEADS] = 2;
	p[IR_ATTR_HEAD_DIM] = a[IR_ATTR_HEAD_DIM] = 64;
	p[IR_ATTR_QK_NORM] = a[IR_ATTR_QK_NORM] = 1;
	p[IR_ATTR_VERSION] = b[IR_ATTR_VERSION] = 2;
	p[IR_ATTR_STATE] = b[IR_ATTR_STATE] = 64;
	p[IR_ATTR_SSM_HEADS] = b[IR_ATTR_HEADS] = 16;
	p[IR_ATTR_SSM_HEAD_DIM] = b[IR_ATTR_HEAD_DIM] = 64;
	p[IR_ATTR_EXPAND] = b[IR_ATTR_EXPAND] = 2;
	p[IR_ATTR_CONV] = b[IR_ATTR_CONV] = 4;
	p[IR_ATTR_GROUPS] = b[IR_ATTR_GROUPS] = 2;
	ir_cost cp = cost_of(mp, 1, fl[0]), ca = cost_of(ma, 1, fl[1]), cm = cost_of(mm, 1, fl[2]);
	ck_assert_uint_eq(cp.params, ca.params + cm.params - (uint64_t)h);
	ck_assert_double_eq(fl[0][IR_OP_F], fl[1][IR_OP_F] + fl[2][IR_OP_F] - 4 * T * h);
	ck_assert_double_eq(fl[0][IR_OP_B], fl[1][IR_OP_B] + fl[2][IR_OP_B] - 8 * T * h);
	ck_assert_double_eq(fl[0][IR_OP_W], fl[1][IR_OP_W] + fl[2][IR_OP_W]);
	ck_assert(cp.sel_f == cm.sel_f && cp.sel_f > 0);
	rt_layer_desc rd = cost_rt_desc(mp, &mp->layers[1]);
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&rd, &sz), RT_OK);
	ck_assert_uint_eq(cp.params, (uint64_t)sz.params);
	ck_assert(rd.kind == RT_PARALLEL && rd.heads == 8 && rd.ssm_heads == 16 &&
	          rd.ssm_head_dim == 64 && rd.head_dim == 64 && rd.qk_norm == 1);
	ir_free(mp);
	ir_free(ma);
	ir_free(mm);
}
END_TEST

/* RoPE scaling (docs/cost-model.md, "attention (GQA)"): every type, on GQA
 * and MLA, leaves every cost field as it is (the frequencies are a table
 * made once, the factors fold into it and the scores' scale), and reaches
 * the runtime's descriptor field by field. */
START_TEST(test_rope_scaling_costs_nothing)
{
	ir_module *m = one(IR_LAYER_ATTENTION, 512, 1024, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	for (int mla = 0; mla <= 1; mla++) {
		memset(v, 0, sizeof m->layers[1].attr);
		v[IR_ATTR_HEADS] = 8, v[IR_ATTR_KV_HEADS] = mla ? 8 : 2, v[IR_ATTR_HEAD_DIM] = 64;
		if (mla)
			v[IR_ATTR_KV_LORA_RANK] = 128, v[IR_ATTR_QK_ROPE_DIM] = 32;
		double base[IR_NOPS], fl[IR_NOPS];
		ir_cost c0 = cost_of(m, 1, base);
		for (int t = IR_ROPE_LINEAR; t < IR_NROPE_SCALINGS; t++) {
			for (int a = IR_ATTR_ROPE_FACTOR; a <= IR_ATTR_ROPE_MSCALE_ALL_DIM; a++)
				v[a] = 0;
			v[IR_ATTR_ROPE_SCALING] = t;
			v[IR_ATTR_ROPE_FACTOR] = ir_real_bits(8);
			if (t != IR_ROPE_LINEAR)
				v[IR_ATTR_ROPE_ORIG_MAX] = 8192;
			if (t == IR_ROPE_LLAMA3)
				v[IR_ATTR_ROPE_LOW_FREQ] = ir_real_bits(1), v[IR_ATTR_ROPE_HIGH_FREQ] = ir_real_bits(4);
			if (t == IR_ROPE_YARN)
				v[IR_ATTR_ROPE_MSCALE] = ir_real_bits(0.7), v[IR_ATTR_ROPE_MSCALE_ALL_DIM] = ir_real_bits(0.6);
			ir_cost c = cost_of(m, 1, fl);
			ck_assert(c.params == c0.params && c.act == c0.act && c.wstash == c0.wstash &&
			          c.f == c0.f && c.b == c0.b && c.w == c0.w && c.flops == c0.flops &&
			          c.resident == c0.resident);
			for (int op = 0; op < IR_NOPS; op++)
				ck_assert_double_eq(fl[op], base[op]);
			rt_layer_desc rd = cost_rt_desc(m, &m->layers[1]);
			ck_assert_int_eq(rt_layer_check(&rd), RT_OK);
			ck_assert(rd.rope_scaling == t && rd.rope_factor == 8);
			ck_assert(rd.rope_original_max == (t == IR_ROPE_LINEAR ? 0 : 8192));
			ck_assert(rd.rope_low_freq_factor == (t == IR_ROPE_LLAMA3 ? 1 : 0));
			ck_assert(rd.rope_high_freq_factor == (t == IR_ROPE_LLAMA3 ? 4 : 0));
			ck_assert(rd.rope_mscale == (t == IR_ROPE_YARN ? 0.7 : 0));
			ck_assert(rd.rope_mscale_all_dim == (t == IR_ROPE_YARN ? 0.6 : 0));
		}
	}
	ir_free(m);
}
END_TEST

/* Causal attention core FLOPs (forward) per docs/cost-model.md. */
static double core_fwd(double T, double ctx, double H, double dqk, double dv)
{
	return 2 * T * ctx * H * (dqk + dv);
}

START_TEST(test_attention_closed_form)
{
	ir_module *m = one(IR_LAYER_ATTENTION, 512, 1024, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	v[IR_ATTR_HEADS] = 8, v[IR_ATTR_KV_HEADS] = 2, v[IR_ATTR_HEAD_DIM] = 64;
	double T = 1024, S = 1024, h = 512, H = 8, G = 2, d = 64, fl[IR_NOPS];
	for (int window = 0; window <= 1; window++) {
		double W = 256, ctx = window ? W - W * W / (2 * S) : S / 2;
		v[IR_ATTR_WINDOW] = window ? (int64_t)W : 0;
		ir_cost c = cost_of(m, 1, fl);
		double mm = 2 * T * h * (H + 2 * G) * d + 2 * T * H * d * h;
		double rope = 3 * T * (H + G) * d;
		ck_assert_double_eq(fl[IR_OP_F], 4 * T * h + mm + rope + core_fwd(T, ctx, H, d, d) + T * h);
		ck_assert_double_eq(fl[IR_OP_B], 8 * T * h + mm + 2 * rope +
		                                     2 * T * ctx * H * (3 * d + 2 * d) + T * h);
		ck_assert_double_eq(fl[IR_OP_W], mm);
		ck_assert_uint_eq(c.params, (uint64_t)(h + h * (H + 2 * G) * d + H * d * h));
		/* no S x S matrix: x, rstd, x^, Q K V, logsumexp, O */
		ck_assert_uint_eq(c.act, (uint64_t)(2 * T * h + 4 * T + 2 * T * h +
		                                    2 * T * (H + 2 * G) * d + 4 * T * H + 2 * T * H * d));
	}
	/* a window at least the sequence is global attention */
	double global[IR_NOPS];
	v[IR_ATTR_WINDOW] = 0;
	cost_of(m, 1, global);
	v[IR_ATTR_WINDOW] = 4096;
	cost_of(m, 1, fl);
	ck_assert_double_eq(fl[IR_OP_F], global[IR_OP_F]);
	ir_free(m);
}
END_TEST

START_TEST(test_mla_deepseek_v3)
{
	ir_module *m = zoo("deepseek-v3");
	ck_assert_int_eq(m->layers[1].kind, IR_LAYER_ATTENTION);
	double T = 4096, S = 4096, h = 7168, H = 128, rq = 1536, rkv = 512, dn = 128, dr = 64,
	       dv = 128, dqk = dn + dr, fl[IR_NOPS];
	ir_cost c = cost_of(m, 1, fl);
	double params = h + h * (rq + rkv + dr) + rq + rq * H * dqk + rkv + rkv * H * (dn + dv) +
	                H * dv * h;
	ck_assert_uint_eq(c.params, (uint64_t)params);
	ck_assert_uint_eq(c.params, 187114496); /* docs/cost-model.md */
	double mm = 2 * T * (h * (rq + rkv + dr) + rq * H * dqk + rkv * H * (dn + dv) + H * dv * h);
	ck_assert_double_eq(fl[IR_OP_W], mm);
	double norms = 4 * T * (h + rq + rkv), rope = 3 * T * (H + 1) * dr;
	ck_assert_double_eq(fl[IR_OP_F], norms + mm + rope +
	                                     core_fwd(T, S / 2, H, dqk, dv) + T * h);
	ir_free(m);
}
END_TEST

static double moe_forward(double T, double h, double E, double k, double f, double sh)
{
	double rows = T * k;
	return 4 * T * h + 2 * T * h * E + 5 * T * E /* norm, router, softmax */
	       + 2 * rows * h * 2 * f + 5 * rows * f + 2 * rows * f * h /* routed, swiglu */
	       + (sh ? 2 * T * h * 2 * f * sh + 5 * T * f * sh + 2 * T * f * sh * h : 0)
	       + 2 * rows * h + (sh ? T * h : 0) /* combine */
	       + T * h;                          /* residual */
}

START_TEST(test_moe_closed_form_and_scaling)
{
	ir_module *m = one(IR_LAYER_MOE, 1024, 512, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	v[IR_ATTR_EXPERTS] = 16, v[IR_ATTR_TOP_K] = 2, v[IR_ATTR_EXPERT_FFN] = 512;
	v[IR_ATTR_SHARED_EXPERTS] = 1;
	double T = 512, h = 1024, f = 512, fl[IR_NOPS];
	ir_cost c = cost_of(m, 1, fl);
	ck_assert_double_eq(fl[IR_OP_F], moe_forward(T, h, 16, 2, f, 1));
	/* parameters: norm, router, all 16 routed and the shared expert */
	ck_assert_uint_eq(c.params, (uint64_t)(h + h * 16 + 17 * 3 * h * f));
	ck_assert_double_eq(fl[IR_OP_W], 2 * T * h * 16 + 2 * (T * 2 + T) * 3 * h * f);

	/* FLOPs follow top_k (twice the experts per token: about twice the
	 * expert work), not the expert count (only the router grows). */
	v[IR_ATTR_SHARED_EXPERTS] = 0;
	double k2[IR_NOPS], k4[IR_NOPS], e64[IR_NOPS];
	ir_cost c2 = cost_of(m, 1, k2);
	v[IR_ATTR_TOP_K] = 4;
	cost_of(m, 1, k4);
	v[IR_ATTR_TOP_K] = 2, v[IR_ATTR_EXPERTS] = 64;
	ir_cost c64 = cost_of(m, 1, e64);
	assert_near(k4[IR_OP_F] / k2[IR_OP_F], 2, 0.05);
	ck_assert_double_eq(e64[IR_OP_F] - k2[IR_OP_F], (2 * T * h + 5 * T) * (64 - 16));
	assert_near(e64[IR_OP_F], k2[IR_OP_F], 0.05);
	assert_near((double)c64.params / (double)c2.params, 4, 0.01);
	ir_free(m);
}
END_TEST

/* The shared experts' gate (docs/cost-model.md, "moe", step 9): h
 * parameters, a GEMM of one column (2 T h in F, B and W) and the gating
 * product (T h + 4 T in F, twice in B), the ungated output and the gate
 * stashed; the parameter count is the runtime's. */
START_TEST(test_moe_shared_gate_closed_form)
{
	ir_module *m = one(IR_LAYER_MOE, 1024, 512, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	v[IR_ATTR_EXPERTS] = 16, v[IR_ATTR_TOP_K] = 2, v[IR_ATTR_EXPERT_FFN] = 512;
	v[IR_ATTR_SHARED_EXPERTS] = 2;
	double T = 512, h = 1024, base[IR_NOPS], fl[IR_NOPS];
	ir_cost c0 = cost_of(m, 1, base);
	v[IR_ATTR_SHARED_GATE] = 1;
	ir_cost c = cost_of(m, 1, fl);
	ck_assert_uint_eq(c.params, c0.params + (uint64_t)h);
	ck_assert_double_eq(fl[IR_OP_F], base[IR_OP_F] + 2 * T * h + T * h + 4 * T);
	ck_assert_double_eq(fl[IR_OP_B], base[IR_OP_B] + 2 * T * h + 2 * (T * h + 4 * T));
	ck_assert_double_eq(fl[IR_OP_W], base[IR_OP_W] + 2 * T * h);
	ck_assert(c.f > c0.f && c.b > c0.b && c.w > c0.w);
	rt_layer_desc rd = cost_rt_desc(m, &m->layers[1]);
	ck_assert(rd.shared_gate == 1);
	rt_sizes sz;
	ck_assert_int_eq(rt_layer_sizes(&rd, &sz), RT_OK);
	ck_assert_uint_eq(c.params, (uint64_t)sz.params);
	ir_free(m);
}
END_TEST

START_TEST(test_mamba_closed_forms)
{
	/* Mamba-2: in_proj h -> 2 inner + 2 g N + H, conv over inner + 2 g N */
	ir_module *m = one(IR_LAYER_MAMBA, 256, 512, 1, IR_DTYPE_BF16);
	int64_t *v = attr(m);
	v[IR_ATTR_VERSION] = 2, v[IR_ATTR_STATE] = 64, v[IR_ATTR_EXPAND] = 2, v[IR_ATTR_CONV] = 4;
	v[IR_ATTR_HEADS] = 8, v[IR_ATTR_HEAD_DIM] = 64, v[IR_ATTR_GROUPS] = 2;
	double T = 512, h = 256, inner = 512, N = 64, g = 2, H = 8, P = 64, w = 4, fl[IR_NOPS];
	double xbc = inner + 2 * g * N, Q = 256;
	ir_cost c = cost_of(m, 1, fl);
	ck_assert_uint_eq(c.params, (uint64_t)(h + h * (inner + xbc + H) + xbc * (w + 1) + 3 * H +
	                                       inner + inner * h));
	double ssd = T * (2 * Q * (g * N + H * P) + 4 * H * N * P);
	double mm = 2 * T * h * (inner + xbc + H) + 2 * T * inner * h;
	ck_assert_double_eq(fl[IR_OP_F], 4 * T * h + mm + (2 * T * xbc * w + 4 * T * xbc) + ssd +
	                                     9 * T * inner + T * h);
	ck_assert_double_eq(fl[IR_OP_W], mm);
	/* What a selective B runs again: the SSD scan's F, one op (0.35 of
	 * peak, its operands x, B, C, dt and output y read and written once). */
	double pk = m->cluster.flops, bw = m->cluster.membw, s2 = 2;
	ck_assert_double_eq(c.sel_f, ir_round_us(1e6 * fmax(ssd / (pk * 0.35),
	                                                     s2 * T * (xbc + H + inner) / bw) + 4));
	ck_assert(c.sel_f > 0 && c.sel_f < c.f);

	/* Mamba-1: in_proj h -> 2 inner, x_proj inner -> R + 2N, dt_proj R -> inner,
	 * selective scan 9 T inner N */
	memset(v, 0, sizeof m->layers[1].attr);
	v[IR_ATTR_VERSION] = 1, v[IR_ATTR_STATE] = 16, v[IR_ATTR_EXPAND] = 2, v[IR_ATTR_CONV] = 4;
	v[IR_ATTR_DT_RANK] = 16;
	double R = 16;
	N = 16;
	c = cost_of(m, 1, fl);
	ck_assert_uint_eq(c.params, (uint64_t)(h + h * 2 * inner + inner * (w + 1) + inner * (R + 2 * N) +
	                                       R * inner + inner + inner * N + inner + inner * h));
	mm = 2 * T * (h * 2 * inner + inner * (R + 2 * N) + R * inner + inner * h);
	ck_assert_double_eq(fl[IR_OP_F], 4 * T * h + mm + (2 * T * inner * w + 4 * T * inner) +
	                                     9 * T * inner * N + T * h);
	ck_assert_double_eq(fl[IR_OP_B], 8 * T * h + mm + 2 * (2 * T * inner * w + 4 * T * inner) +
	                                     18 * T * inner * N + T * h);
	/* The selective scan's F: 9 T inner N FLOPs on CUDA cores (0.05). */
	ck_assert_double_eq(c.sel_f, ir_round_us(1e6 * fmax(9 * T * inner * N / (pk * 0.05),
	                                                     s2 * T * (4 * inner + 2 * N) / bw) + 4));
	ir_free(m);
}
END_TEST

START_TEST(test_embedding_and_head)
{
	ir_module *m = one(IR_LAYER_MLP, 128, 64, 2, IR_DTYPE_BF16);
	attr(m)[IR_ATTR_FFN] = 256;
	double T = 128, h = 128, V = 1000, fl[IR_NOPS];
	ir_cost e = cost_of(m, 0, fl);
	ck_assert_uint_eq(e.params, (uint64_t)(V * h));
	ck_assert_double_eq(e.b, 0); /* token ids have no gradient */
	ck_assert_double_eq(fl[IR_OP_F], 0);
	ck_assert_double_eq(fl[IR_OP_W], T * h);
	ck_assert_uint_eq(e.wstash, (uint64_t)(4 * T + 2 * T * h));
	ir_cost hd = cost_of(m, 2, fl);
	ck_assert_uint_eq(hd.params, (uint64_t)(h + h * V));
	ck_assert_double_eq(fl[IR_OP_F], 4 * T * h + 2 * T * h * V + 5 * T * V);
	ck_assert_double_eq(fl[IR_OP_W], 2 * T * h * V);
	/* the logits are kept: x, rstd, x^, logits, logsumexp, targets */
	ck_assert_uint_eq(hd.act, (uint64_t)(2 * T * h + 4 * T + 2 * T * h + 2 * T * V + 8 * T));
	/* W holds x^ and dlogits */
	ck_assert_uint_eq(hd.wstash, (uint64_t)(2 * T * (h + V)));
	ir_free(m);
}
END_TEST

START_TEST(test_backward_twice_forward_for_matmuls)
{
	/* A large MLP is nearly all GEMM: B + W = 2 F within 1 %. */
	ir_module *m = one(IR_LAYER_MLP, 4096, 4096, 1, IR_DTYPE_BF16);
	attr(m)[IR_ATTR_FFN] = 14336;
	double fl[IR_NOPS];
	cost_of(m, 1, fl);
	assert_near((fl[IR_OP_B] + fl[IR_OP_W]) / fl[IR_OP_F], 2, 0.01);
	/* and every GEMM's W equals its F */
	assert_near(fl[IR_OP_W] / fl[IR_OP_F], 1, 0.01);
	/* the head too */
	cost_of(m, 2, fl);
	assert_near((fl[IR_OP_B] + fl[IR_OP_W]) / fl[IR_OP_F], 2, 0.01);
	ir_free(m);
}
END_TEST

START_TEST(test_resident_bytes)
{
	static const struct { ir_dtype dt; ir_optimizer opt; uint64_t per; } cases[] = {
		{IR_DTYPE_BF16, IR_OPT_ADAMW, 18}, /* 2 + grad 4 + moments 8 + master 4 */
		{IR_DTYPE_F16, IR_OPT_ADAMW, 18},  {IR_DTYPE_F32, IR_OPT_ADAMW, 16},
		{IR_DTYPE_BF16, IR_OPT_SGD, 10},   {IR_DTYPE_F32, IR_OPT_SGD, 8},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		ir_module *m = one(IR_LAYER_MLP, 64, 32, 1, cases[i].dt);
		attr(m)[IR_ATTR_FFN] = 128;
		m->train.optimizer = cases[i].opt;
		for (int l = 0; l < 3; l++) {
			ir_cost c = cost_of(m, l, NULL);
			ck_assert_uint_eq(c.resident, c.params * cases[i].per);
		}
		ir_free(m);
	}
}
END_TEST

/* ---- the zoo ------------------------------------------------------------------- */

START_TEST(test_zoo_params_match_published)
{
	static const struct { const char *name; double published, tol; } zoo_params[] = {
		{"llama-3-8b", 8.03e9, 0.01},   {"llama-2-7b", 6.74e9, 0.01},
		{"llama-3-70b", 70.6e9, 0.01},  {"deepseek-v3", 671e9, 0.02},
		{"deepseek-v2-lite", 15.7e9, 0.02}, {"nemotron-h-8b", 8e9, 0.03},
		{"jamba-v0.1", 51.6e9, 0.02},   {"gpt3-175b", 175e9, 0.01},
	};
	for (size_t i = 0; i < sizeof zoo_params / sizeof *zoo_params; i++) {
		ir_module *m = zoo(zoo_params[i].name);
		double p = total_params(m);
		ck_assert_msg(fabs(p - zoo_params[i].published) <= zoo_params[i].tol * zoo_params[i].published,
		              "%s: %.4g parameters, published %.4g", zoo_params[i].name, p,
		              zoo_params[i].published);
		ir_free(m);
	}
}
END_TEST

START_TEST(test_zoo_costs_positive)
{
	static const char *const names[] = {"llama-3-8b", "deepseek-v3", "nemotron-h-8b",
	                                    "jamba-v0.1", "gemma-7b",    "tiny-hybrid"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		ir_module *m = zoo(names[i]);
		ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
		for (int l = 0; l < m->nlayers; l++) {
			const ir_cost *c = &m->layers[l].cost;
			ck_assert(c->known);
			ck_assert_msg(c->f > 0 && c->w > 0 && c->flops > 0 && c->params > 0 && c->act > 0 &&
			                  c->wstash > 0 && c->resident > 0,
			              "%s L%d", names[i], l);
			if (m->layers[l].kind != IR_LAYER_EMBEDDING)
				ck_assert(c->b > 0);
			ck_assert(isfinite(c->f) && isfinite(c->b) && isfinite(c->w));
		}
		ck_assert_int_eq(ir_verify(m), 0);
		ir_free(m);
	}
}
END_TEST

/* The worked example of docs/cost-model.md: a Llama-3-8B attention layer
 * and MLP layer, seq 4096, mbs 1, bf16, AdamW, on h100-sxm. */
START_TEST(test_worked_example)
{
	ir_module *m = zoo("llama-3-8b");
	ck_assert_str_eq(m->cluster.name, "h100-sxm");
	ck_assert_int_eq(m->train.mbs, 1);
	double fl[IR_NOPS];
	ir_cost a = cost_of(m, 1, fl);
	ck_assert_double_eq_tol(a.f, 840.282, 1e-9);
	ck_assert_double_eq_tol(a.b, 1279.722, 1e-9);
	ck_assert_double_eq_tol(a.w, 471.225, 1e-9);
	ck_assert_double_eq(fl[IR_OP_F], 481183137792.0);
	ck_assert_double_eq(a.flops, 1512252112896.0);
	ck_assert_uint_eq(a.params, 41947136);
	ck_assert_uint_eq(a.act, 151535616);
	ck_assert_uint_eq(a.wstash, 150994944);
	ck_assert_uint_eq(a.resident, 755048448);
	ir_cost p = cost_of(m, 2, fl);
	ck_assert_double_eq_tol(p.f, 2120.798, 1e-9);
	ck_assert_double_eq_tol(p.b, 2200.928, 1e-9);
	ck_assert_double_eq_tol(p.w, 1953.546, 1e-9);
	ck_assert_double_eq(fl[IR_OP_F], 1443486498816.0);
	ck_assert_double_eq(p.flops, 4330442719232.0);
	ck_assert_uint_eq(p.params, 176164864);
	ck_assert_uint_eq(p.act, 419446784);
	ck_assert_uint_eq(p.wstash, 419430400);
	ck_assert_uint_eq(p.resident, 3170967552);
	ir_free(m);
}
END_TEST

/* ---- the pass ------------------------------------------------------------------- */

START_TEST(test_pass_idempotent_and_keeps_known)
{
	ir_module *m = zoo("tiny-hybrid");
	ir_cost given = {.known = true, .f = 1.5, .b = 2.5, .w = 0.5, .flops = 7, .act = 1024,
	                 .wstash = 512, .params = 3, .resident = 48};
	m->layers[3].cost = given;
	/* a measured stash is kept, in whole RT_ALIGN slices */
	m->layers[4].cost = given;
	m->layers[4].cost.measured = IR_CF_BIT(ACT) | IR_CF_BIT(WSTASH);
	m->layers[4].cost.act = 1000;
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	/* a known cost keeps its times, FLOPs, parameters and resident bytes;
	 * its stashes are the runtime's (the plan's default backend, nccl:
	 * the device executor), and so is what selective recomputation leaves
	 * out of the act stash of this mamba layer (its chunk states) */
	uint64_t act, ws, drop;
	ck_assert_int_eq(cost_runtime_stashes(m, 3, &act, &ws), 0);
	ck_assert_int_eq(cost_runtime_selective(m, 3, &drop), 0);
	ck_assert(act != given.act && ws != given.wstash && drop > 0 && drop < act);
	given.act = act, given.wstash = ws, given.sel_act = drop;
	ck_assert_mem_eq(&m->layers[3].cost, &given, sizeof given);
	ck_assert_uint_eq(m->layers[4].cost.act, 1024);
	ck_assert_uint_eq(m->layers[4].cost.wstash, 512);
	char *once = ir_print_string(m);
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	char *twice = ir_print_string(m);
	ck_assert_str_eq(once, twice);

	/* IR text with costs round-trips exactly */
	arena *a = arena_new();
	ir_module *back = ir_parse(src_from_string(a, "t.opir", once));
	ck_assert_ptr_nonnull(back);
	ck_assert(ir_equal(m, back));
	char *again = ir_print_string(back);
	ck_assert_str_eq(once, again);
	free(once), free(twice), free(again);
	ir_free(back);
	arena_free(a);
	ir_free(m);
}
END_TEST

START_TEST(test_pass_in_default_pipeline)
{
	ck_assert_int_eq(pass_default_pipeline[0], PASS_cost);
	ck_assert_int_eq(pass_lookup("cost"), PASS_cost);
	ir_module *m = zoo("tiny-dense");
	pass_opts o = {.verify_each = true};
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, &o), 0);
	for (int l = 0; l < m->nlayers; l++)
		ck_assert(m->layers[l].cost.known);
	ir_free(m);
}
END_TEST

START_TEST(test_overflow_is_a_diagnostic)
{
	/* 2^20 sequences of 2^24 tokens through a 2^24-wide MLP: the stash
	 * does not fit in 64 bits; an error, never a wrapped number. */
	ir_module *m = one(IR_LAYER_MLP, 1 << 20, 1 << 24, 1 << 20, IR_DTYPE_F32);
	attr(m)[IR_ATTR_FFN] = 1 << 24;
	tu_capture();
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), -1);
	char *msg = tu_release_first_line();
	ck_assert_msg(strstr(msg, "error: layer L0 (embedding): the W stash in bytes") &&
	                  strstr(msg, "does not fit in 64 bits"),
	              "%s", msg);
	free(msg);
	/* a vanishing compute rate gives times beyond the range */
	ir_module *n = one(IR_LAYER_MLP, 64, 32, 1, IR_DTYPE_F32);
	attr(n)[IR_ATTR_FFN] = 64;
	n->cluster.flops = 1e-320;
	tu_capture();
	ck_assert_int_eq(pass_run_one(n, PASS_cost, NULL), -1);
	msg = tu_release_first_line();
	ck_assert_msg(strstr(msg, "is beyond 1e+12us") && strstr(msg, "is 'peak_flops' too small?"),
	              "%s", msg);
	free(msg);
	/* a vanishing memory bandwidth: blamed on it, not on peak_flops */
	n->cluster.flops = 1e14;
	n->cluster.membw = 1e-300;
	tu_capture();
	ck_assert_int_eq(pass_run_one(n, PASS_cost, NULL), -1);
	msg = tu_release_first_line();
	ck_assert_msg(strstr(msg, "is 'memory_bandwidth' too small?"), "%s", msg);
	free(msg);
	ir_free(m);
	ir_free(n);
}
END_TEST

/* ---- the ideal preset ------------------------------------------------------------- */

START_TEST(test_ideal_cluster)
{
	arena *a = arena_new();
	ir_cluster c;
	ck_assert_int_eq(fe_load_cluster(a, "ideal", &c), 0);
	ck_assert(isinf(c.membw) && isinf(c.intra.bw) && isinf(c.inter.bw));
	ck_assert_double_eq(c.intra.lat, 0);
	ck_assert_double_eq(c.inter.lat, 0);
	ck_assert_uint_eq(c.mem, UINT64_MAX);
	ck_assert(isfinite(c.flops) && c.flops == 1e15);

	/* costs stay finite: compute still takes time, memory traffic none */
	fe_overrides ov = {.cluster = "ideal"};
	char path[4096];
	snprintf(path, sizeof path, "%s/tiny-hybrid.yaml", fe_models_dir());
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	for (int l = 0; l < m->nlayers; l++) {
		const ir_cost *k = &m->layers[l].cost;
		ck_assert(isfinite(k->f) && k->f > 0 && isfinite(k->w) && k->w > 0);
	}
	/* the printed form, and back exactly */
	char *text = ir_print_string(m);
	ck_assert_ptr_nonnull(strstr(text, " mem=unlimited flops=1e+15 membw=inf intra=inf/0us "
	                                   "inter=inf/0us\n"));
	ir_module *back = ir_parse(src_from_string(a, "t.opir", text));
	ck_assert_ptr_nonnull(back);
	ck_assert(ir_equal(m, back));
	ck_assert_int_eq(ir_verify(back), 0);
	char *again = ir_print_string(back);
	ck_assert_str_eq(text, again);
	free(text), free(again);
	ir_free(back);
	ir_free(m);
	arena_free(a);
}
END_TEST

/* Inline clusters: .inf / inf only for bandwidths, unlimited only for memory. */
static const struct { const char *cluster, *error; } inf_cases[] = {
	{"{preset: cpu-local, memory_bandwidth: inf, intra: {bandwidth: +.inf}}", NULL},
	{"{preset: cpu-local, memory: unlimited, inter: {bandwidth: .Inf, latency: 0}}", NULL},
	{"{preset: cpu-local, peak_flops: .inf}", "t.yaml:3:42: error: 'peak_flops' must be finite, got '.inf'"},
	{"{preset: cpu-local, memory_bandwidth: -.inf}",
	 "t.yaml:3:48: error: 'memory_bandwidth' must be finite, got '-.inf'"},
	{"{preset: cpu-local, intra: {bandwidth: unlimited}}",
	 "t.yaml:3:49: error: expected a number for 'bandwidth', got 'unlimited'"},
	{"{preset: cpu-local, memory: inf}",
	 "t.yaml:3:38: error: expected a byte size for 'memory', got 'inf'"},
	{"{preset: cpu-local, memory_bandwidth: \"inf\"}",
	 "t.yaml:3:48: error: expected a number for 'memory_bandwidth', got the string \"inf\""},
};

START_TEST(test_inf_in_yaml)
{
	arena *a = arena_new();
	const char *text = arena_printf(a,
	                                "model: {name: t, hidden: 64, vocab: 256, seq: 64}\n"
	                                "layers: [{kind: embedding}, {kind: mlp, ffn: 128}, {kind: head}]\n"
	                                "cluster: %s\n",
	                                inf_cases[_i].cluster);
	tu_capture();
	ir_module *m = fe_load_src(src_from_string(a, "t.yaml", text), NULL);
	char *msg = tu_release_first_line();
	if (inf_cases[_i].error) {
		ck_assert_ptr_null(m);
		ck_assert_str_eq(msg, inf_cases[_i].error);
	} else {
		ck_assert_msg(m != NULL, "%s", msg);
		ck_assert(isinf(m->cluster.membw) || isinf(m->cluster.inter.bw));
		ir_free(m);
	}
	free(msg);
	arena_free(a);
}
END_TEST

START_TEST(test_inf_in_ir_text)
{
	static const struct { const char *cluster, *error; } cases[] = {
		{"mem=unlimited flops=1e+11 membw=inf intra=inf/0us inter=1e+09/2us", NULL},
		{"mem=1GiB flops=inf membw=1e+10 intra=1e+09/2us inter=1e+09/2us",
		 "t.opir:4:49: error: 'flops' must be a finite number, got 'inf'"},
		{"mem=1GiB flops=1e+11 membw=nan intra=1e+09/2us inter=1e+09/2us",
		 "t.opir:4:61: error: 'membw' must be a finite number or inf, got 'nan'"},
		{"mem=1GiB flops=1e+11 membw=1e+10 intra=1e+09/inf inter=1e+09/2us",
		 "t.opir:4:73: error: 'intra' must be BANDWIDTH/LATENCYus (bytes/s and microseconds), got "
		 "'1e+09/inf'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		arena *a = arena_new();
		const char *text = arena_printf(
		    a,
		    "octopipe-ir 1\n"
		    "model \"t\" hidden=64 vocab=256 seq=64 dtype=f32\n"
		    "train mbs=1 microbatches=2 steps=1 optimizer=adamw lr=0.001 weight_decay=0 seed=1 "
		    "data=synthetic\n"
		    "cluster \"c\" devices=2 per_node=2 %s\n"
		    "plan schedule=1f1b chunks=1 partition=uniform backend=nccl\n"
		    "layer L0 embedding\nlayer L1 mlp ffn=128 activation=swiglu\nlayer L2 head\n",
		    cases[i].cluster);
		tu_capture();
		ir_module *m = ir_parse(src_from_string(a, "t.opir", text));
		char *msg = tu_release_first_line();
		if (cases[i].error) {
			ck_assert_ptr_null(m);
			ck_assert_str_eq(msg, cases[i].error);
		} else {
			ck_assert_msg(m != NULL, "%s", msg);
			ck_assert_uint_eq(m->cluster.mem, UINT64_MAX);
			ck_assert(isinf(m->cluster.membw) && isinf(m->cluster.intra.bw));
			char *out = ir_print_string(m);
			ck_assert_str_eq(out, text);
			free(out);
			ir_free(m);
		}
		free(msg);
		arena_free(a);
	}
}
END_TEST

/* ---- profiles ------------------------------------------------------------------------ */

/* tiny-dense: L0 embedding, L1 L3 L5 L7 attention, L2 L4 L6 L8 mlp, L9 head */
static ir_module *tiny(void)
{
	return zoo("tiny-dense");
}

static int profile(ir_module *m, const char *text)
{
	return fe_load_profile_src(m, src_from_string(m->arena, "p.yaml", text));
}

START_TEST(test_profile_applies)
{
	ir_module *m = tiny();
	ir_cost analytic;
	ck_assert_int_eq(cost_layer(m, 2, &analytic), 0);
	ck_assert_int_eq(profile(m, "units: ms\n"
	                            "kinds:\n"
	                            "  mlp: {f: 1.0, b: 1.5, w: 0.25, act_bytes: 1048576}\n"
	                            "  head: {f: 2e-1, b: 0, w: 3}\n"
	                            "layers:\n"
	                            "  0: {f: 2.3, b: 0.0, w: 1.1}\n"
	                            "  4: {f: 9, b: 8, w: 7, wstash_bytes: 0}\n"),
	                 0);
	const ir_layer *L = m->layers;
	/* layer entries win over kind entries; times in microseconds; only
	 * what was measured is set, for the cost pass to complete */
	ck_assert(!L[0].cost.known);
	ck_assert_uint_eq(L[0].cost.measured, IR_CF_TIMES);
	ck_assert_double_eq(L[0].cost.f, 2300);
	ck_assert_double_eq(L[0].cost.b, 0);
	ck_assert_double_eq(L[0].cost.w, 1100);
	ck_assert_double_eq(L[4].cost.f, 9000);
	ck_assert_uint_eq(L[4].cost.measured, IR_CF_TIMES | IR_CF_BIT(WSTASH));
	ck_assert_uint_eq(L[2].cost.measured, IR_CF_TIMES | IR_CF_BIT(ACT));
	ck_assert_uint_eq(L[2].cost.flops, 0);
	/* attention layers are matched by nothing */
	for (int i = 1; i <= 7; i += 2)
		ck_assert(!L[i].cost.known && !L[i].cost.measured);
	/* the text form holds the measured fields alone, and says so */
	char *text = ir_print_string(m);
	ck_assert_ptr_nonnull(strstr(text, "ffn=128 activation=swiglu f=1000us b=1500us w=250us act=1MiB "
	                                   "measured=f,b,w,act\n"));
	free(text);
	ck_assert(tu_ir_round_trips(m));

	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	uint64_t act, ws;
	ck_assert_int_eq(cost_runtime_stashes(m, 2, &act, &ws), 0);
	ck_assert(L[0].cost.known);
	ck_assert_uint_eq(L[4].cost.wstash, 0);
	ck_assert_uint_eq(L[4].cost.act, act); /* not measured: the runtime's */
	for (int i = 2; i <= 8; i += 2) {
		ck_assert(L[i].cost.known);
		if (i == 4)
			continue;
		ck_assert_double_eq(L[i].cost.f, 1000);
		ck_assert_double_eq(L[i].cost.b, 1500);
		ck_assert_double_eq(L[i].cost.w, 250);
		ck_assert_uint_eq(L[i].cost.act, 1048576);
		/* what the profile does not give: the runtime's stash, the rest analytic */
		ck_assert_uint_eq(L[i].cost.wstash, ws);
		ck_assert_uint_eq(L[i].cost.params, analytic.params);
		ck_assert_double_eq(L[i].cost.flops, analytic.flops);
	}
	ck_assert_double_eq(L[9].cost.f, 200);
	ck_assert_double_eq(L[9].cost.w, 3000);
	for (int i = 1; i <= 7; i += 2)
		ck_assert(L[i].cost.known && L[i].cost.f > 0);
	/* idempotent, and lossless with the mask */
	ir_cost before = L[2].cost;
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	ck_assert_mem_eq(&L[2].cost, &before, sizeof before);
	ck_assert(tu_ir_round_trips(m));
	ir_free(m);
}
END_TEST

/* Cold times come in threes and travel with the cost; cache_bytes sets
 * the cluster's cache (docs/simulator.md, the cache model). */
START_TEST(test_profile_cold)
{
	ir_module *m = tiny();
	ck_assert_uint_eq(m->cluster.cache, 0);
	ck_assert_int_eq(profile(m, "units: us\n"
	                            "cache_bytes: 2097152\n"
	                            "link: {latency_us: 0.5, bandwidth: 1e9, send_us: 2.5, recv_us: 0.25}\n"
	                            "kinds: {mlp: {f: 1, b: 2, w: 3, f_cold: 1.5, b_cold: 2.5, w_cold: 4}}\n"
	                            "layers: {4: {f: 1, b: 2, w: 3}}\n"),
	                 0);
	ck_assert_uint_eq(m->cluster.cache, 2097152);
	ck_assert_double_eq(m->cluster.intra.lat, 0.5);
	ck_assert_double_eq(m->cluster.send_post, 2.5);
	ck_assert_double_eq(m->cluster.recv_post, 0.25);
	const ir_cost *c = &m->layers[2].cost;
	ck_assert(!c->known && c->cold && (c->measured & IR_CF_BIT(COLD)));
	ck_assert_double_eq(c->f_cold, 1.5);
	ck_assert_double_eq(c->b_cold, 2.5);
	ck_assert_double_eq(c->w_cold, 4);
	/* a layer entry without cold times: hot only */
	ck_assert(!m->layers[4].cost.cold && !(m->layers[4].cost.measured & IR_CF_BIT(COLD)));
	ck_assert_double_eq(m->layers[4].cost.f_cold, 0);
	ck_assert(tu_ir_round_trips(m));
	/* the cost pass keeps them; the IR carries them: print, parse, equal */
	ck_assert_int_eq(pass_run_one(m, PASS_cost, NULL), 0);
	ck_assert(c->known && c->cold);
	ck_assert_double_eq(c->b_cold, 2.5);
	ck_assert(m->layers[4].cost.known && !m->layers[4].cost.cold);
	char *text = ir_print_string(m);
	ck_assert_ptr_nonnull(strstr(text, " cache=2MiB send_post=2.5us recv_post=0.25us "));
	ck_assert_ptr_nonnull(strstr(text, " f=1us b=2us w=3us f_cold=1.5us b_cold=2.5us w_cold=4us "));
	free(text);
	ck_assert(tu_ir_round_trips(m));
	ir_free(m);
}
END_TEST

START_TEST(test_profile_units)
{
	static const struct { const char *unit; double us; } units[] = {
		{"us", 1.5}, {"ms", 1500}, {"s", 1.5e6}};
	for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
		ir_module *m = tiny();
		char text[128];
		snprintf(text, sizeof text, "units: %s\nlayers: {9: {f: 1.5, b: 1.5, w: 1.5}}\n",
		         units[i].unit);
		ck_assert_int_eq(profile(m, text), 0);
		ck_assert_double_eq(m->layers[9].cost.f, units[i].us);
		ck_assert_double_eq(m->layers[9].cost.w, units[i].us);
		ir_free(m);
	}
	/* an empty profile (units only) sets nothing */
	ir_module *m = tiny();
	ck_assert_int_eq(profile(m, "# measured nothing\nunits: us\n"), 0);
	for (int i = 0; i < m->nlayers; i++)
		ck_assert(!m->layers[i].cost.known);
	ir_free(m);
}
END_TEST

static const struct { const char *text, *error; } bad_profiles[] = {
	{"kinds: {mlp: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:1:1: error: missing required key 'units' at the top level of a profile (ms, us or s)"},
	{"units: mss\n", "p.yaml:1:8: error: unknown unit 'mss' for 'units'; did you mean 'ms'?"},
	{"units: hours\n", "p.yaml:1:8: error: unknown unit 'hours' for 'units'; known: ms, us, s"},
	{"units:\n", "p.yaml:1:7: error: expected a unit (ms, us or s) for 'units', got nothing"},
	{"units: ms\nkind: {}\n",
	 "p.yaml:2:1: error: unknown key 'kind' at the top level of a profile; did you mean 'kinds'?"},
	{"units: ms\nkinds: {mlpp: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:2:9: error: unknown layer kind 'mlpp' in 'kinds'; did you mean 'mlp'?"},
	{"units: ms\nkinds: {dense: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:2:9: error: unknown layer kind 'dense' in 'kinds'; known: embedding, attention, mlp, "
	 "moe, mamba, head, parallel"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1, act_byte: 5}}\n",
	 "p.yaml:2:33: error: unknown key 'act_byte' in 'mlp'; did you mean 'act_bytes'?"},
	{"units: ms\nkinds: {mlp: {f: 1, w: 1}}\n",
	 "p.yaml:2:14: error: missing required key 'b' in 'mlp'"},
	{"units: ms\nkinds: {mlp: {f: -1, b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: 'f' must be at least 0, got -1"},
	{"units: ms\nkinds: {mlp: {f: .inf, b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: 'f' must be finite, got '.inf'"},
	{"units: ms\nkinds: {mlp: {f: fast, b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: expected a number for 'f', got 'fast'"},
	{"units: ms\nkinds: {mlp: {f: \"1\", b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: expected a number for 'f', got the string \"1\""},
	{"units: ms\nkinds: {mlp: {f: 1e400, b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: 'f' must be finite, got '1e400'"},
	{"units: s\nkinds: {mlp: {f: 1e303, b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: 'f' is too large: 1e+303 s is beyond 1e+12us (11.6 days; docs/profile.md)"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1, act_bytes: 1.5}}\n",
	 "p.yaml:2:44: error: expected a non-negative integer (bytes) for 'act_bytes', got '1.5'"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1, wstash_bytes: 99999999999999999999999}}\n",
	 "p.yaml:2:47: error: integer 99999999999999999999999 for 'wstash_bytes' is out of range"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1}, mlp: {f: 2, b: 2, w: 2}}\n",
	 "p.yaml:2:34: error: duplicate key 'mlp' in 'kinds'"},
	{"units: ms\nkinds: {mlp: {f: 1, f: 2, b: 1, w: 1}}\n",
	 "p.yaml:2:21: error: duplicate key 'f' in 'mlp'"},
	{"units: ms\nlayers: {10: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:2:10: error: layer index 10 is out of range; the model has 10 layers (0..9)"},
	{"units: ms\nlayers: {-1: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:2:10: error: layer index -1 is out of range; the model has 10 layers (0..9)"},
	{"units: ms\nlayers: {x: {f: 1, b: 1, w: 1}}\n",
	 "p.yaml:2:10: error: expected a layer index (an integer) in 'layers', got 'x'"},
	{"units: ms\nlayers:\n  3: {f: 1, b: 1, w: 1}\n  03: {f: 1, b: 1, w: 1}\n",
	 "p.yaml:4:3: error: duplicate layer 3 in 'layers'"},
	{"units: ms\nlayers: [1, 2]\n", "p.yaml:2:9: error: expected a mapping for 'layers', got a sequence"},
	{"units: ms\nkinds: {mlp: 1.0}\n", "p.yaml:2:14: error: expected a mapping for 'mlp', got '1.0'"},
	{"units: ms\nlayers: {2: [1, 2, 3]}\n",
	 "p.yaml:2:13: error: expected a mapping for layer 2, got a sequence"},
	{"units: ms\nkinds: {mlp: {f: [1], b: 1, w: 1}}\n",
	 "p.yaml:2:18: error: expected a number for 'f', got a sequence"},
	{"units: [ms]\n", "p.yaml:1:8: error: expected a string for 'units', got a sequence"},
	{"units: ms\nunits: us\n", "p.yaml:2:1: error: duplicate key 'units' at the top level of a profile"},
	{"- units: ms\n", "p.yaml:1:1: error: expected a mapping at the top level of a profile, got a sequence"},
	{"# nothing\n", "p.yaml:1:1: error: empty profile"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1}\n",
	 "p.yaml:3:1: error: did not find expected ',' or '}' while parsing a flow mapping"},
	{"units: ms\nkinds:\n  mlp: &e {f: 1, b: 1, w: 1}\n  moe: *e\n",
	 "p.yaml:4:8: error: alias '*e' in a profile; aliases are not supported here, write the entry out"},
	{"units: !!str ms\n",
	 "p.yaml:1:8: error: unsupported tag '!!str'; tags are not part of the profile format"},
	{"units: ms\n---\nunits: us\n", "p.yaml:2:1: error: a second YAML document; a profile holds one"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1}}\nlayers: {2: {f: 1, b: 1}}\n",
	 "p.yaml:3:13: error: missing required key 'w' in layer 2"},
	{"{units: ms, kinds: {mlp: {f: 1, b: 1, w: 1, flops: {y: {z: [[[[[[[[[[]]]]]]]]]]}}}}}\n",
	 "p.yaml:1:45: error: unknown key 'flops' in 'mlp'; known: f, b, w, f_cold, b_cold, w_cold, act_bytes, wstash_bytes"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1}}\nlayers: {2: {f: 1, b: 1, w: 1, {a: 1}: 2}}\n",
	 "p.yaml:3:32: error: expected a key in layer 2, got a mapping"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1, f_cold: 2, w_cold: 2}}\n",
	 "p.yaml:2:14: error: missing key 'b_cold' in 'mlp': the cold times come as f_cold, b_cold and "
	 "w_cold together"},
	{"units: ms\nkinds: {mlp: {f: 1, b: 1, w: 1, f_cold: 2, b_cold: -1, w_cold: 2}}\n",
	 "p.yaml:2:52: error: 'b_cold' must be at least 0, got -1"},
	{"units: ms\ncache_bytes: 2MiB\n",
	 "p.yaml:2:14: error: expected a non-negative integer (bytes) for 'cache_bytes', got '2MiB'"},
	{"units: \"\xff\"\n", "p.yaml:1:9: error: invalid leading UTF-8 octet (byte 0xFF); the file must be UTF-8 text"},
};

START_TEST(test_profile_bad)
{
	ir_module *m = tiny();
	tu_capture();
	int rc = profile(m, bad_profiles[_i].text);
	char *msg = tu_release_first_line();
	ck_assert_int_eq(rc, -1);
	ck_assert_str_eq(msg, bad_profiles[_i].error);
	/* nothing was applied */
	for (int i = 0; i < m->nlayers; i++)
		ck_assert(!m->layers[i].cost.known);
	free(msg);
	ir_free(m);
}
END_TEST

START_TEST(test_profile_files)
{
	char dir[] = "/tmp/octo-profile-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char good[256], empty[256], binary[256], missing[256];
	snprintf(good, sizeof good, "%s/good.yaml", dir);
	snprintf(empty, sizeof empty, "%s/empty.yaml", dir);
	snprintf(binary, sizeof binary, "%s/binary.yaml", dir);
	snprintf(missing, sizeof missing, "%s/missing.yaml", dir);
	FILE *f = fopen(good, "w");
	fputs("units: us\nkinds: {attention: {f: 10, b: 20, w: 5}}\n", f);
	fclose(f);
	fclose(fopen(empty, "w"));
	f = fopen(binary, "w");
	fwrite("units: ms\0\n", 1, 11, f);
	fclose(f);

	ir_module *m = tiny();
	ck_assert_int_eq(fe_load_profile(m, good), 0);
	ck_assert_double_eq(m->layers[1].cost.b, 20);
	/* src_read's diagnostics, on line 1 of the file */
	const char *paths[] = {empty, binary, missing};
	for (int i = 0; i < 3; i++) {
		ir_module *n = tiny();
		tu_capture();
		ck_assert_int_eq(fe_load_profile(n, paths[i]), -1);
		char *msg = tu_release_first_line();
		ck_assert_msg(strncmp(msg, paths[i], strlen(paths[i])) == 0 &&
		                  strncmp(msg + strlen(paths[i]), ":1:", 3) == 0 && strstr(msg, "error: "),
		              "%s", msg);
		free(msg);
		ir_free(n);
	}
	unlink(good), unlink(empty), unlink(binary);
	rmdir(dir);
	ir_free(m);
}
END_TEST

static Suite *cost_suite(void)
{
	Suite *s = suite_create("cost");
	TCase *tc = tcase_create("model");
	tcase_add_test(tc, test_mlp_closed_form);
	tcase_add_test(tc, test_attention_closed_form);
	tcase_add_test(tc, test_attention_options_closed_form);
	tcase_add_test(tc, test_parallel_closed_form);
	tcase_add_test(tc, test_rope_scaling_costs_nothing);
	tcase_add_test(tc, test_mla_deepseek_v3);
	tcase_add_test(tc, test_moe_closed_form_and_scaling);
	tcase_add_test(tc, test_moe_shared_gate_closed_form);
	tcase_add_test(tc, test_mamba_closed_forms);
	tcase_add_test(tc, test_embedding_and_head);
	tcase_add_test(tc, test_backward_twice_forward_for_matmuls);
	tcase_add_test(tc, test_resident_bytes);
	tcase_add_test(tc, test_zoo_params_match_published);
	tcase_add_test(tc, test_zoo_costs_positive);
	tcase_add_test(tc, test_worked_example);
	tcase_add_test(tc, test_profile_cold);
	suite_add_tcase(s, tc);

	TCase *tp = tcase_create("pass");
	tcase_add_test(tp, test_pass_idempotent_and_keeps_known);
	tcase_add_test(tp, test_pass_in_default_pipeline);
	tcase_add_test(tp, test_overflow_is_a_diagnostic);
	suite_add_tcase(s, tp);

	TCase *ti = tcase_create("ideal");
	tcase_add_test(ti, test_ideal_cluster);
	tcase_add_loop_test(ti, test_inf_in_yaml, 0, (int)(sizeof inf_cases / sizeof *inf_cases));
	tcase_add_test(ti, test_inf_in_ir_text);
	suite_add_tcase(s, ti);

	TCase *tf = tcase_create("profile");
	tcase_add_test(tf, test_profile_applies);
	tcase_add_test(tf, test_profile_units);
	tcase_add_loop_test(tf, test_profile_bad, 0, (int)(sizeof bad_profiles / sizeof *bad_profiles));
	tcase_add_test(tf, test_profile_files);
	suite_add_tcase(s, tf);
	return s;
}

int main(void)
{
	return tu_run(cost_suite());
}
