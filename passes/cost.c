/* cost.c: the `cost` pass -- F, B and W time, FLOPs and bytes of every
 * layer, from its attributes, the training shape and the cluster, and the
 * stash sizes from the runtime that will run it.
 *
 * Reads: the model (hidden, vocab, seq, dtype), the micro-batch size, the
 * optimizer, the cluster's peak FLOP/s and memory bandwidth, the plan's
 * backend, and each layer's kind, attributes and measured cost fields (a
 * profile's, ir_cost.measured).
 * Writes: ir_layer.cost of every layer: the fields nobody measured of a
 * cost not known yet, and the stash sizes (act, wstash) of every cost,
 * known or not, that no profile measured; selective recomputation's
 * sel_act (the act bytes the runtime's selective layer leaves out, at most
 * act) of every cost the runtime runs but a published profile's, and its
 * sel_f (the scan's F; scaled by a measured F) of a cost not known yet.
 * Guarantees: afterwards every layer's cost is known, finite and
 * non-negative; measured fields are kept (stash sizes rounded up to
 * RT_ALIGN); the act and wstash bytes of every layer the runtime runs are
 * the executor's own (cost_runtime_stashes: the CPU kernels' on CPU ranks,
 * the device executor's in the model's dtype on device ranks, by the
 * backend), so the memory plan made from them is what the executables
 * allocate; the times, FLOPs and resident bytes of a cost that was known
 * (from IR text) are left exactly as they were.  The pass is idempotent,
 * and printed IR stays self-contained.  This file is the only place costs
 * are made: the profile loaders only record what they measured.
 *
 * A layer is a list of ops (kernels).  Each op has FLOPs, bytes moved and a
 * class with an efficiency; it takes
 *     max(FLOPs / (peak x efficiency), bytes / memory bandwidth) + OP_US
 * and the F, B or W time of a layer is the sum over its ops.  The ops of
 * every kind, their FLOPs, bytes and stashes are derived in
 * docs/cost-model.md, which follows this file helper by helper. */
#include "cost.h"

#include <math.h>

#include "dev.h"     /* dev_layer_sizes: the device executor's stash sizes */
#include "octo_rt.h" /* RT_ALIGN */
#include "pass.h"

/* ---- constants (docs/cost-model.md, "Constants") ---------------------- */

/* Fractions of peak FLOP/s an op class reaches. */
#define EFF_GEMM 0.75   /* large dense (and grouped expert) GEMMs on tensor cores */
#define EFF_ATTN 0.50   /* flash-attention core, forward and backward */
#define EFF_SSD 0.35    /* Mamba-2 chunked SSD scan: small batched GEMMs */
#define EFF_VECTOR 0.05 /* CUDA-core arithmetic: norms, activations, conv, selective scan, softmax */

#define OP_US 4.0       /* fixed cost of launching one op, microseconds */

#define SSD_CHUNK 256   /* Mamba-2 chunk length (mamba_ssm's default chunk_size) */
#define SCAN_FLOPS 9    /* Mamba-1 selective scan, per (token, channel, state) */
#define IDX_BYTES 4     /* token ids and expert indices (int32) */
#define F32 4           /* fp32 statistics: rstd, logsumexp, router probabilities */

/* Bytes per parameter held all step besides the weights themselves. */
#define GRAD_BYTES 4    /* fp32 gradient accumulation buffer */
#define ADAM_BYTES 8    /* AdamW: first and second moments in fp32 */
#define MASTER_BYTES 4  /* fp32 master weights, when the dtype is not f32 */
#define EXACT_ADD_BYTES 136 /* deterministic W: gradient cleared and read (8), the
                          * accumulator's one or two cache lines read and written (128) */

/* FLOPs per output element of each activation (swiglu: silu(a) * b). */
static const double act_flops[IR_NACTS] = {
	[IR_ACT_SWIGLU] = 5, [IR_ACT_GEGLU] = 9, [IR_ACT_GELU] = 8,
	[IR_ACT_RELU] = 1,   [IR_ACT_RELU2] = 2,
};

typedef enum op_class { OC_GEMM, OC_ATTN, OC_SSD, OC_VECTOR } op_class;
static const double eff[] = {EFF_GEMM, EFF_ATTN, EFF_SSD, EFF_VECTOR};

/* ---- accumulating a layer's ops ------------------------------------------ */

typedef struct acc {
	const ir_cluster *c;
	double T;                    /* tokens per micro-batch: mbs x seq */
	double S;                    /* sequence length */
	double s;                    /* bytes per element of the dtype */
	double us[IR_NOPS], flops[IR_NOPS];
	double act, wstash, params;  /* bytes, bytes, count */
	double scan_f;               /* us: the scan's F (mamba), what a selective B runs again */
	double compute_s, memory_s;  /* the ops' compute and memory terms: which
	                              * field to blame for a time out of range */
} acc;

static void op(acc *a, ir_op_kind k, op_class oc, double flops, double bytes)
{
	double compute = flops / (a->c->flops * eff[oc]);
	double memory = bytes / a->c->membw; /* 0 when the bandwidth is infinite */
	a->us[k] += 1e6 * fmax(compute, memory) + OP_US;
	a->flops[k] += flops;
	a->compute_s += compute, a->memory_s += memory;
}

/* Y[rows x n] = X[rows x k] W[k x n], with `mats` weight matrices of k x n
 * (experts; every one is read).  F computes Y, B dX = dY W^T, W dW = X^T dY:
 * 2 rows k n FLOPs each.  W needs X (stashed by F) and dY (made by B). */
static void gemm(acc *a, double rows, double k, double n, double mats)
{
	double fl = 2 * rows * k * n, by = a->s * (rows * k + mats * k * n + rows * n);
	for (int p = 0; p < IR_NOPS; p++)
		op(a, p, OC_GEMM, fl, by);
	a->params += mats * k * n;
	a->act += a->s * rows * k;
	a->wstash += a->s * rows * (k + n);
}

/* RMSNorm over d features: F squares, sums, scales and weights (4 FLOPs an
 * element); B computes the input gradient and the scale's gradient in one
 * kernel (8).  Stashes its input and the fp32 rstd per row. */
static void norm(acc *a, double rows, double d)
{
	double n = rows * d;
	op(a, IR_OP_F, OC_VECTOR, 4 * n, 2 * a->s * n);
	op(a, IR_OP_B, OC_VECTOR, 8 * n, 3 * a->s * n);
	a->params += d;
	a->act += a->s * n + F32 * rows;
}

/* An elementwise op reading `in` elements and writing `out` with `flops`
 * FLOPs.  Its backward reads the input and the output gradient and writes
 * the input gradient, at twice the FLOPs.  `stash`: bytes kept for B. */
static void eltwise(acc *a, double in, double out, double flops, double stash)
{
	op(a, IR_OP_F, OC_VECTOR, flops, a->s * (in + out));
	op(a, IR_OP_B, OC_VECTOR, 2 * flops, a->s * (2 * in + out));
	a->act += stash;
}

/* x + f(x): one add forward; backward, the add of the branch's input
 * gradient into the residual gradient. */
static void residual(acc *a, double h)
{
	double n = a->T * h;
	op(a, IR_OP_F, OC_VECTOR, n, 3 * a->s * n);
	op(a, IR_OP_B, OC_VECTOR, n, 3 * a->s * n);
}

/* Matrices an FFN's up GEMM holds: gate and up for the gated activations. */
static double up_mats(int act)
{
	return act == IR_ACT_SWIGLU || act == IR_ACT_GEGLU ? 2 : 1;
}

/* The activation between an FFN's up and down GEMMs over `rows` rows of f:
 * gated ones read 2f (gate, up).  Stashes its input. */
static void activation(acc *a, double rows, double f, int act)
{
	double up = up_mats(act);
	double flops = act >= 0 && act < IR_NACTS ? act_flops[act] : 1;
	eltwise(a, rows * up * f, rows * f, flops * rows * f, a->s * rows * up * f);
}

/* Average keys per query of a causal layer: S/2 globally; a window W <= S
 * sees sum_i min(i, W) / S ~ W - W^2 / 2S. */
static double context(const acc *a, double window)
{
	if (window <= 0 || window >= a->S)
		return a->S / 2;
	return window - window * window / (2 * a->S);
}

/* Flash attention: scores Q K^T over d_qk and P V over d_v, for `ctx` keys
 * per query and H query heads (kv heads share K and V).  F: 2 T ctx H
 * (d_qk + d_v); B recomputes the scores and forms dV, dP, dQ, dK:
 * 2 T ctx H (3 d_qk + 2 d_v).  No score matrix is kept: it stashes Q, K, V
 * and the fp32 logsumexp per row (O is the output GEMM's input). */
static void attn_core(acc *a, double H, double Hkv, double d_qk, double d_v, double ctx)
{
	double T = a->T, qkv = T * (H * d_qk + Hkv * (d_qk + d_v)), o = T * H * d_v;
	double lse = F32 * T * H;
	op(a, IR_OP_F, OC_ATTN, 2 * T * ctx * H * (d_qk + d_v), a->s * (qkv + o) + lse);
	op(a, IR_OP_B, OC_ATTN, 2 * T * ctx * H * (3 * d_qk + 2 * d_v),
	   a->s * (2 * qkv + 2 * o) + lse);
	a->act += a->s * qkv + lse;
}

/* Rotary embedding of n elements: 3 FLOPs each, in place; its backward is
 * the inverse rotation and needs nothing stashed. */
static void rope(acc *a, double n)
{
	eltwise(a, n, n, 3 * n, 0);
}

/* Bias of a projection's n outputs over `rows` rows: F adds it (1 FLOP an
 * element); its gradient is the column sum of the output gradient, in W.
 * Parameters n; nothing stashed (W sums the dY the GEMM already keeps). */
static void bias(acc *a, double rows, double n)
{
	op(a, IR_OP_F, OC_VECTOR, rows * n, a->s * (2 * rows * n + n));
	op(a, IR_OP_W, OC_VECTOR, rows * n, a->s * (rows * n + n));
	a->params += n;
}

/* ---- layer kinds ---------------------------------------------------------- */

/* The attention's ops after its pre-norm, up to its output projection
 * (an attention layer's, and a parallel layer's). */
static void attention_mixer(acc *a, double h, const ir_layer *l)
{
	const int64_t *v = l->attr;
	double T = a->T, H = v[IR_ATTR_HEADS], G = v[IR_ATTR_KV_HEADS], d = v[IR_ATTR_HEAD_DIM];
	double ctx = context(a, v[IR_ATTR_WINDOW]);
	if (v[IR_ATTR_KV_LORA_RANK]) {
		/* MLA: x -> [q latent], kv latent + shared rotary key; the latents
		 * are normed and projected up to per-head q, k_nope and v. */
		double rq = v[IR_ATTR_Q_LORA_RANK], rkv = v[IR_ATTR_KV_LORA_RANK];
		double dr = v[IR_ATTR_QK_ROPE_DIM];
		double dv = v[IR_ATTR_V_HEAD_DIM] ? v[IR_ATTR_V_HEAD_DIM] : d, dqk = d + dr;
		if (rq) {
			gemm(a, T, h, rq + rkv + dr, 1); /* q_a and kv_a read the same x */
			norm(a, T, rq);
			gemm(a, T, rq, H * dqk, 1);
		} else {
			gemm(a, T, h, H * dqk + rkv + dr, 1); /* q and kv_a */
		}
		norm(a, T, rkv);
		gemm(a, T, rkv, H * (d + dv), 1);
		rope(a, T * (H + 1) * dr);
		attn_core(a, H, H, dqk, dv, ctx);
		gemm(a, T, H * dv, h, 1);
	} else {
		gemm(a, T, h, (H + 2 * G) * d, 1); /* q, k, v */
		if (v[IR_ATTR_QKV_BIAS])
			bias(a, T, (H + 2 * G) * d);
		if (v[IR_ATTR_QK_NORM]) {
			norm(a, T * H, d); /* per head, one scale for q's heads */
			norm(a, T * G, d); /* and one for k's */
		}
		rope(a, T * (H + G) * d);
		attn_core(a, H, G, d, d, ctx);
		gemm(a, T, H * d, h, 1);
	}
}

static void attention(acc *a, double h, const ir_layer *l)
{
	norm(a, a->T, h);
	attention_mixer(a, h, l);
	residual(a, h);
}

static void mlp(acc *a, double h, const int64_t *v)
{
	double T = a->T, f = v[IR_ATTR_FFN];
	int act = (int)v[IR_ATTR_ACT];
	norm(a, T, h);
	gemm(a, T, h, up_mats(act) * f, 1);
	activation(a, T, f, act);
	gemm(a, T, f, h, 1);
	residual(a, h);
}

static void moe(acc *a, double h, const int64_t *v)
{
	double T = a->T, E = v[IR_ATTR_EXPERTS], k = v[IR_ATTR_TOP_K];
	double f = v[IR_ATTR_EXPERT_FFN], sh = v[IR_ATTR_SHARED_EXPERTS];
	int act = (int)v[IR_ATTR_ACT];
	double rows = T * k; /* token copies routed to experts */
	norm(a, T, h);
	gemm(a, T, h, E, 1);                                 /* router */
	eltwise(a, T * E, 2 * rows, 5 * T * E, F32 * T * E); /* softmax, top-k */
	eltwise(a, T * h, rows * h, 0, IDX_BYTES * rows);    /* dispatch: permute copies */
	gemm(a, rows, h, up_mats(act) * f, E);
	activation(a, rows, f, act);
	gemm(a, rows, f, h, E);
	if (sh) {
		gemm(a, T, h, up_mats(act) * f * sh, 1);
		activation(a, T, f * sh, act);
		gemm(a, T, f * sh, h, 1);
	}
	if (sh && v[IR_ATTR_SHARED_GATE]) {
		/* the gate: u . gate per token (a GEMM of one column), its sigmoid
		 * (4 FLOPs) and the shared output scaled by it; B of the product
		 * needs the ungated output and the gate, stashed */
		gemm(a, T, h, 1, 1);
		eltwise(a, T * h + T, T * h, T * h + 4 * T, a->s * (T * h + T));
	}
	/* combine: weight each expert's output by its gate (their gradients
	 * need the outputs, stashed) and add the shared experts' */
	eltwise(a, (rows + (sh ? T : 0)) * h, T * h, 2 * rows * h + (sh ? T * h : 0),
	        a->s * rows * h);
	residual(a, h);
}

/* Causal depthwise convolution of `ch` channels, width w, then SiLU.  B
 * computes the input and the tap gradients in one kernel.  Stashes its
 * input. */
static void conv(acc *a, double ch, double w)
{
	double n = a->T * ch;
	eltwise(a, n, n, 2 * n * w + 4 * n, a->s * n);
	a->params += ch * w + ch; /* taps and bias */
}

/* The same for the Mamba mixer. */
static void mamba_mixer(acc *a, double h, const int64_t *v)
{
	double T = a->T, inner = v[IR_ATTR_EXPAND] * h, N = v[IR_ATTR_STATE];
	double w = v[IR_ATTR_CONV];
	if (v[IR_ATTR_VERSION] == 1) {
		/* Mamba-1: in_proj -> x, z; conv(x); x_proj -> dt (low rank), B, C;
		 * dt_proj -> delta; selective scan gated by z; out_proj. */
		double R = v[IR_ATTR_DT_RANK];
		gemm(a, T, h, 2 * inner, 1);
		conv(a, inner, w);
		gemm(a, T, inner, R + 2 * N, 1);
		gemm(a, T, R, inner, 1);
		a->params += inner + inner * N + inner; /* dt bias, A, D */
		double fl = SCAN_FLOPS * T * inner * N, by = a->s * T * (4 * inner + 2 * N);
		double before = a->us[IR_OP_F];
		op(a, IR_OP_F, OC_VECTOR, fl, by);
		a->scan_f = a->us[IR_OP_F] - before;
		op(a, IR_OP_B, OC_VECTOR, 2 * fl, 2 * by);
		a->act += a->s * T * (2 * inner + 2 * N); /* delta, z, B, C */
		gemm(a, T, inner, h, 1);
	} else {
		/* Mamba-2: in_proj -> z, x, B, C, dt; conv(x, B, C); chunked SSD;
		 * gated RMSNorm(y * silu(z)); out_proj. */
		double H = v[IR_ATTR_HEADS], P = v[IR_ATTR_HEAD_DIM], g = v[IR_ATTR_GROUPS];
		double xbc = inner + 2 * g * N, Q = SSD_CHUNK < a->S ? SSD_CHUNK : a->S;
		gemm(a, T, h, inner + xbc + H, 1);
		conv(a, xbc, w);
		a->params += 3 * H; /* A, D, dt bias */
		double fl = T * (2 * Q * (g * N + H * P) + 4 * H * N * P);
		double by = a->s * T * (xbc + H + inner);
		double before = a->us[IR_OP_F];
		op(a, IR_OP_F, OC_SSD, fl, by);
		a->scan_f = a->us[IR_OP_F] - before;
		op(a, IR_OP_B, OC_SSD, 2 * fl, 2 * by);
		a->act += a->s * T * (xbc + H) + F32 * T * H; /* x, B, C, dt; dA cumsum */
		eltwise(a, 2 * T * inner, T * inner, 9 * T * inner,
		        a->s * 2 * T * inner + F32 * T); /* gated norm: y, z, rstd */
		a->params += inner;
		gemm(a, T, inner, h, 1);
	}
}

static void mamba(acc *a, double h, const int64_t *v)
{
	norm(a, a->T, h);
	mamba_mixer(a, h, v);
	residual(a, h);
}

/* One norm, then each mixer and the add of its output into the residual:
 * the attention layer's and the Mamba-2 layer's ops less one norm. */
static void parallel(acc *a, double h, const ir_layer *l)
{
	ir_layer at, mb;
	ir_parallel_part(l, IR_LAYER_ATTENTION, &at);
	ir_parallel_part(l, IR_LAYER_MAMBA, &mb);
	norm(a, a->T, h);
	attention_mixer(a, h, &at);
	residual(a, h);
	mamba_mixer(a, h, mb.attr);
	residual(a, h);
}

/* Gather T rows of the vocab x h table; no B (token ids have no gradient);
 * W scatter-adds dY into the fp32 gradient rows (read-modify-write). */
static void embedding(acc *a, double h, double vocab)
{
	double T = a->T;
	op(a, IR_OP_F, OC_VECTOR, 0, 2 * a->s * T * h + IDX_BYTES * T);
	op(a, IR_OP_W, OC_VECTOR, T * h, a->s * T * h + IDX_BYTES * T + 2 * GRAD_BYTES * T * h);
	a->params += vocab * h;
	a->act += IDX_BYTES * T;
	a->wstash += IDX_BYTES * T + a->s * T * h;
}

/* Final norm, logits = x W_vocab, softmax cross-entropy.  The logits are
 * kept (B turns them into their gradient in place), so the head stashes
 * T x vocab and W holds dlogits until it runs. */
static void head(acc *a, double h, double vocab)
{
	double T = a->T, n = T * vocab;
	norm(a, T, h);
	gemm(a, T, h, vocab, 1);
	op(a, IR_OP_F, OC_VECTOR, 5 * n, a->s * n + 2 * IDX_BYTES * T);
	op(a, IR_OP_B, OC_VECTOR, 3 * n, 2 * a->s * n + 2 * IDX_BYTES * T);
	a->act += a->s * n + F32 * T + IDX_BYTES * T; /* logits, logsumexp, targets */
}

/* ---- the layer's cost ------------------------------------------------------ */

static int fits(const ir_module *m, int i, const char *what, double v, uint64_t *out)
{
	if (!(v >= 0 && v < 0x1p64)) {
		diag_error(ir_loc_or(m->layer_loc ? m->layer_loc[i] : (ir_loc){0}, m->loc),
		           "layer L%d (%s): %s (%.4g) does not fit in 64 bits", i,
		           ir_layer_kind_names[m->layers[i].kind], what, v);
		return -1;
	}
	*out = (uint64_t)llround(v);
	return 0;
}

int cost_layer_split(const ir_module *m, int layer, ir_cost *out, double flops[IR_NOPS])
{
	ir_assert(layer >= 0 && layer < m->nlayers);
	const ir_layer *l = &m->layers[layer];
	const ir_model_info *mi = &m->model;
	double h = mi->hidden;
	acc a = {.c = &m->cluster, .T = (double)m->train.mbs * mi->seq, .S = mi->seq,
	         .s = ir_dtype_bytes[mi->dtype]};
	switch (l->kind) {
	case IR_LAYER_EMBEDDING: embedding(&a, h, mi->vocab); break;
	case IR_LAYER_ATTENTION: attention(&a, h, l); break;
	case IR_LAYER_MLP: mlp(&a, h, l->attr); break;
	case IR_LAYER_MOE: moe(&a, h, l->attr); break;
	case IR_LAYER_MAMBA: mamba(&a, h, l->attr); break;
	case IR_LAYER_HEAD: head(&a, h, mi->vocab); break;
	case IR_LAYER_PARALLEL: parallel(&a, h, l); break;
	default: ir_bug("layer L%d has kind %d", layer, (int)l->kind);
	}

	double per_param = a.s + GRAD_BYTES;
	if (m->train.optimizer == IR_OPT_ADAMW)
		per_param += ADAM_BYTES;
	if (mi->dtype != IR_DTYPE_F32)
		per_param += MASTER_BYTES;
	ir_cost c = {.known = true, .f = ir_round_us(a.us[IR_OP_F]),
	             .b = ir_round_us(a.us[IR_OP_B]), .w = ir_round_us(a.us[IR_OP_W]),
	             .sel_f = ir_round_us(a.scan_f)};
	c.flops = a.flops[IR_OP_F] + a.flops[IR_OP_B] + a.flops[IR_OP_W];
	if (fits(m, layer, "the activation stash in bytes", a.act, &c.act) < 0 ||
	    fits(m, layer, "the W stash in bytes", a.wstash, &c.wstash) < 0 ||
	    fits(m, layer, "the parameter count", a.params, &c.params) < 0 ||
	    fits(m, layer, "the resident bytes", a.params * per_param, &c.resident) < 0)
		return -1;
	ir_loc lloc = ir_loc_or(m->layer_loc ? m->layer_loc[layer] : (ir_loc){0}, m->loc);
	if (!(c.f <= IR_MAX_US && c.b <= IR_MAX_US && c.w <= IR_MAX_US)) {
		/* The term that made it: compute (FLOPs / peak) or memory traffic. */
		bool mem = !(a.compute_s >= a.memory_s);
		diag_error(lloc, "layer L%d (%s): its time on cluster '%s' is beyond %gus (docs/ir.md, "
		           "\"Ranges\"); is '%s' too small?",
		           layer, ir_layer_kind_names[l->kind], m->cluster.name ? m->cluster.name : "",
		           IR_MAX_US, mem ? "memory_bandwidth" : "peak_flops");
		return -1;
	}
	if (!(c.flops <= IR_MAX_LAYER_FLOPS)) {
		diag_error(lloc, "layer L%d (%s): %.4g FLOPs per micro-batch is beyond %g", layer,
		           ir_layer_kind_names[l->kind], c.flops, IR_MAX_LAYER_FLOPS);
		return -1;
	}
	*out = c;
	if (flops)
		for (int p = 0; p < IR_NOPS; p++)
			flops[p] = a.flops[p];
	return 0;
}

int cost_layer(const ir_module *m, int layer, ir_cost *out)
{
	return cost_layer_split(m, layer, out, NULL);
}

/* ---- data parallelism: the optimizer's state and step ---------------------- */

uint64_t cost_optimizer_bytes(const ir_module *m)
{
	return (m->train.optimizer == IR_OPT_ADAMW ? ADAM_BYTES : 0) +
	       (m->model.dtype != IR_DTYPE_F32 ? MASTER_BYTES : 0);
}

uint64_t cost_resident(const ir_module *m, int layer)
{
	ir_assert(layer >= 0 && layer < m->nlayers);
	const ir_cost *c = &m->layers[layer].cost;
	uint64_t D = (uint64_t)ir_dp(m), r = c->resident;
	if (D > 1 && m->plan.dist_opt) {
		/* A measured resident size keeps its unsharded part as measured. */
		uint64_t per = cost_optimizer_bytes(m), whole = ir_sat_mul(c->params, per);
		uint64_t rest = c->resident > whole ? c->resident - whole : 0;
		uint64_t shard = ir_sat_add(rest, ir_sat_mul((c->params + D - 1) / D, per));
		r = shard < r ? shard : r;
	}
	/* Deterministic: the exact sum's digits of every parameter (rt_exact.c). */
	if (m->plan.deterministic)
		r = ir_sat_add(r, ir_sat_mul(c->params, IR_EXACT_VALUE_BYTES));
	return r;
}

uint64_t cost_update_bytes(const ir_module *m)
{
	uint64_t b = m->train.optimizer == IR_OPT_ADAMW ? 7 * 4 : 3 * 4;
	if (m->model.dtype != IR_DTYPE_F32)
		b += (uint64_t)ir_dtype_bytes[m->model.dtype];
	return b;
}

double cost_update_us(const ir_module *m, uint64_t n)
{
	double bytes = (double)n * (double)cost_update_bytes(m);
	return 1e6 * bytes / m->cluster.membw + OP_US; /* 0 + OP_US when membw is infinite */
}

static double membound_us(const ir_module *m, double bytes)
{
	return 1e6 * bytes / m->cluster.membw; /* 0 when membw is infinite */
}

double cost_pack_us(const ir_module *m, uint64_t n)
{
	double e = m->plan.deterministic ? IR_EXACT_VALUE_BYTES : GRAD_BYTES;
	return membound_us(m, (double)n * 2 * e);
}

double cost_unpack_us(const ir_module *m, uint64_t n)
{
	double e = m->plan.deterministic ? IR_EXACT_VALUE_BYTES : GRAD_BYTES;
	return membound_us(m, (double)n * (e + GRAD_BYTES));
}

double cost_exact_add_us(const ir_module *m, uint64_t n)
{
	return m->plan.deterministic ? membound_us(m, (double)n * EXACT_ADD_BYTES) : 0;
}

/* ---- the runtime's stash sizes ---------------------------------------------- */

rt_layer_desc cost_rt_desc(const ir_module *m, const ir_layer *l)
{
	const int64_t *a = l->attr;
	return (rt_layer_desc){
	    .kind = (rt_kind)l->kind, .hidden = m->model.hidden, .seq = m->model.seq,
	    .mbs = m->train.mbs, .vocab = m->model.vocab,
	    .tied = m->model.tie && (l->kind == IR_LAYER_EMBEDDING || l->kind == IR_LAYER_HEAD),
	    .heads = a[IR_ATTR_HEADS], .kv_heads = a[IR_ATTR_KV_HEADS],
	    .head_dim = a[IR_ATTR_HEAD_DIM], .window = a[IR_ATTR_WINDOW],
	    .q_lora_rank = a[IR_ATTR_Q_LORA_RANK], .kv_lora_rank = a[IR_ATTR_KV_LORA_RANK],
	    .qk_rope_dim = a[IR_ATTR_QK_ROPE_DIM], .v_head_dim = a[IR_ATTR_V_HEAD_DIM],
	    .ffn = a[IR_ATTR_FFN], .act = (rt_act)a[IR_ATTR_ACT], .experts = a[IR_ATTR_EXPERTS],
	    .top_k = a[IR_ATTR_TOP_K], .expert_ffn = a[IR_ATTR_EXPERT_FFN],
	    .shared_experts = a[IR_ATTR_SHARED_EXPERTS], .shared_gate = a[IR_ATTR_SHARED_GATE],
	    .version = a[IR_ATTR_VERSION],
	    .state = a[IR_ATTR_STATE], .expand = a[IR_ATTR_EXPAND], .conv = a[IR_ATTR_CONV],
	    .groups = a[IR_ATTR_GROUPS], .dt_rank = a[IR_ATTR_DT_RANK],
	    .rope_theta = ir_attr_real(l, IR_ATTR_ROPE_THETA), .qkv_bias = a[IR_ATTR_QKV_BIAS],
	    .qk_norm = a[IR_ATTR_QK_NORM], .ssm_heads = a[IR_ATTR_SSM_HEADS],
	    .ssm_head_dim = a[IR_ATTR_SSM_HEAD_DIM], .rope_scaling = a[IR_ATTR_ROPE_SCALING],
	    .rope_factor = ir_attr_real(l, IR_ATTR_ROPE_FACTOR),
	    .rope_low_freq_factor = ir_attr_real(l, IR_ATTR_ROPE_LOW_FREQ),
	    .rope_high_freq_factor = ir_attr_real(l, IR_ATTR_ROPE_HIGH_FREQ),
	    .rope_original_max = a[IR_ATTR_ROPE_ORIG_MAX],
	    .rope_beta_fast = ir_attr_real(l, IR_ATTR_ROPE_BETA_FAST),
	    .rope_beta_slow = ir_attr_real(l, IR_ATTR_ROPE_BETA_SLOW),
	    .rope_attention_factor = ir_attr_real(l, IR_ATTR_ROPE_ATTN_FACTOR),
	    .rope_mscale = ir_attr_real(l, IR_ATTR_ROPE_MSCALE),
	    .rope_mscale_all_dim = ir_attr_real(l, IR_ATTR_ROPE_MSCALE_ALL_DIM)};
}

bool cost_device_ranks(const ir_module *m)
{
	return m->plan.backend == IR_BACKEND_NCCL || m->model.dtype != IR_DTYPE_F32;
}

uint64_t cost_stash_round(uint64_t bytes)
{
	return bytes > UINT64_MAX - (RT_ALIGN - 1) ? UINT64_MAX
	                                           : (bytes + RT_ALIGN - 1) & ~(uint64_t)(RT_ALIGN - 1);
}

/* Layer `layer`'s sizes as the executor of m's ranks has them, run
 * selectively or not. */
static int runtime_sizes(const ir_module *m, int layer, bool selective, rt_sizes *sz)
{
	ir_assert(layer >= 0 && layer < m->nlayers);
	rt_layer_desc d = cost_rt_desc(m, &m->layers[layer]);
	d.selective = selective;
	if (rt_layer_check(&d) != RT_OK)
		return -1;
	int rc = cost_device_ranks(m) ? dev_layer_sizes(&d, m->model.dtype != IR_DTYPE_F32, sz)
	                              : rt_layer_sizes(&d, sz);
	return rc != RT_OK || sz->act < 0 || sz->wstash < 0 ? -1 : 0;
}

int cost_runtime_stashes(const ir_module *m, int layer, uint64_t *act, uint64_t *wstash)
{
	rt_sizes sz;
	if (runtime_sizes(m, layer, false, &sz) < 0)
		return -1;
	*act = cost_stash_round((uint64_t)sz.act);
	*wstash = cost_stash_round((uint64_t)sz.wstash);
	return 0;
}

uint64_t cost_device_scratch(const ir_module *m, int d)
{
	uint64_t most = 0;
	if (ir_times_only(m))
		return 0;
	for (int s = 0; s < m->nstages; s++) {
		const ir_stage *st = &m->stages[s];
		if (st->device != d)
			continue;
		for (int l = st->first; l <= st->last; l++) {
			rt_sizes sz;
			if (runtime_sizes(m, l, st->recompute == IR_RECOMP_SELECTIVE, &sz) == 0 && sz.scratch > 0)
				most = (uint64_t)sz.scratch > most ? (uint64_t)sz.scratch : most;
		}
	}
	return cost_stash_round(most);
}

int cost_runtime_selective(const ir_module *m, int layer, uint64_t *drop)
{
	rt_sizes all, sel;
	if (runtime_sizes(m, layer, false, &all) < 0 || runtime_sizes(m, layer, true, &sel) < 0)
		return -1;
	uint64_t a = cost_stash_round((uint64_t)all.act), s = cost_stash_round((uint64_t)sel.act);
	*drop = a > s ? a - s : 0;
	return 0;
}

/* ---- the pass ---------------------------------------------------------------- */

/* The measured fields of `have` over the analytic cost `c`. */
static void keep_measured(ir_cost *c, const ir_cost *have)
{
	unsigned k = have->measured;
	c->measured = k;
	if (k & IR_CF_BIT(F))
		c->f = have->f;
	if (k & IR_CF_BIT(B))
		c->b = have->b;
	if (k & IR_CF_BIT(W))
		c->w = have->w;
	if (k & IR_CF_BIT(COLD)) {
		c->cold = true;
		c->f_cold = have->f_cold, c->b_cold = have->b_cold, c->w_cold = have->w_cold;
	}
	if (k & IR_CF_BIT(FLOPS))
		c->flops = have->flops;
	if (k & IR_CF_BIT(ACT))
		c->act = have->act;
	if (k & IR_CF_BIT(WSTASH))
		c->wstash = have->wstash;
	if (k & IR_CF_BIT(PARAMS))
		c->params = have->params;
	if (k & IR_CF_BIT(RESIDENT))
		c->resident = have->resident;
}

int pass_cost(ir_module *m, pass_ctx *cx)
{
	for (int i = 0; i < m->nlayers; i++) {
		ir_cost *c = &m->layers[i].cost;
		if (ir_cost_complete(c->measured)) {
			/* Nothing to make (a published timing profile); selective
			 * recomputation has nothing it knows to drop (sel 0). */
			c->known = true;
			continue;
		}
		if (!c->known) {
			ir_cost a;
			if (cost_layer(m, i, &a) < 0)
				return -1;
			/* The scan's share of F, of a measured F. */
			if ((c->measured & IR_CF_BIT(F)) && a.f > 0)
				a.sel_f = ir_round_us(a.sel_f * c->f / a.f);
			keep_measured(&a, c);
			*c = a;
		}
		/* The stashes are what the executables will allocate: the runtime's
		 * sizes where it runs the layer, and a measured size in whole
		 * RT_ALIGN slices as the executables lay it out. */
		uint64_t act, ws;
		bool rt = cost_runtime_stashes(m, i, &act, &ws) == 0;
		if (c->measured & IR_CF_BIT(ACT))
			c->act = cost_stash_round(c->act);
		else if (rt)
			c->act = act;
		if (c->measured & IR_CF_BIT(WSTASH))
			c->wstash = cost_stash_round(c->wstash);
		else if (rt)
			c->wstash = ws;
		/* What a selective stage leaves out of this layer's stash: the
		 * runtime's (a part of act, measured or not); else what it was. */
		uint64_t drop;
		if (cost_runtime_selective(m, i, &drop) == 0)
			c->sel_act = drop < c->act ? drop : c->act;
		else if (c->sel_act > c->act)
			c->sel_act = c->act;
	}
	/* Each layer's bytes fit in 64 bits; the step's sum must fit too. */
	int over = ir_step_bytes_overflow(m);
	if (over >= 0)
		return ir_step_bytes_error(m, over, ir_loc_or(m->layer_loc ? m->layer_loc[over]
		                                                           : (ir_loc){0}, m->loc), cx->diag);
	return 0;
}
