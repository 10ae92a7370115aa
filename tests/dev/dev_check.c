/* dev_check: the device executor's F, B and W of every layer kind against
 * the CPU kernels, on random inputs (docs/cuda.md, "The kernel check").
 *
 * For each layer descriptor of the kinds asked for: parameters from
 * rt_layer_init plus noise (so norm scales are not all one), gradients
 * preloaded with noise (W must add to them), random x, dy and tokens.  The
 * CPU runs rt_forward / rt_backward_b / rt_backward_w; the device runs
 * dev_forward / dev_backward_b / dev_backward_w on the same values (rounded
 * to bf16 with --bf16), first with separate buffers, then with y on x and
 * dx on dy as the generated programs may pass them.  Every output (y or
 * the loss, dx, each gradient tensor) is compared by its largest error
 * relative to the largest CPU magnitude of that output: at most 1e-5 in
 * f32 and 2e-2 in bf16.
 *
 * The device is the host emulator (the module's source compiled by the
 * host C++ compiler), or the GPU with --device cuda (PTX by NVRTC for
 * --gpu-arch, default sm_90; builds with the CUDA toolkit).  --modules DIR
 * keeps the emulator's compiled modules in DIR, and loads those already
 * there instead of compiling them: the GPU kit (tests/gpu/kit.sh) carries
 * them to machines without a C++ compiler.
 *
 * --time checks nothing: it runs F, B and W of issue 19's real layers
 * (Llama-3-8B's attention and MLP, Nemotron-H-8B's Mamba-2 layer and MLP,
 * seq 4096; --small: the same kinds at small shapes, for the emulator)
 * and prints every launch and GEMM of the second run with its time between
 * two of the device's marks (dev_ops.mark: CUDA events on the compute
 * stream), per phase and per layer (the GPU kit's first run).  Exit 0 when every
 * output is within its threshold, 1 otherwise, 2 on a usage or setup
 * error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_kernels.h"
#include "dev.h"
#include "octo_kernels.h"
#include "rt_internal.h" /* the host's optimizer step, rt__adamw */

typedef struct tcase {
	const char *kind; /* the command line's name */
	const char *what;
	rt_layer_desc d;
	bool f32_only; /* see cases[] */
} tcase;

#define SEQ 24 /* more than one scan chunk (16), the last partial; one SSD chunk, partial */
#define MBS 2
#define BASE .hidden = 64, .seq = SEQ, .mbs = MBS
#define WIDE(h) .hidden = (h), .seq = SEQ, .mbs = MBS
/* Mamba-2 on the device runs in chunks of RT_SSD_CHUNK (Q) steps: three
 * chunks, the last of 5 steps; two whole chunks. */
#define SSD_LONG .seq = 2 * RT_SSD_CHUNK + 5, .mbs = MBS
#define SSD_EVEN .seq = 2 * RT_SSD_CHUNK, .mbs = MBS

static const tcase cases[] = {
    {"emb", "embedding", {.kind = RT_EMBEDDING, BASE, .vocab = 256}},
    {"head", "head", {.kind = RT_HEAD, BASE, .vocab = 256}},
    {"attn", "GQA 4/2", {.kind = RT_ATTENTION, BASE, .heads = 4, .kv_heads = 2}},
    {"attn", "MHA, window 5", {.kind = RT_ATTENTION, BASE, .heads = 4, .window = 5}},
    {"attn", "MLA, q rank 24", {.kind = RT_ATTENTION, BASE, .heads = 4, .head_dim = 16,
                                .q_lora_rank = 24, .kv_lora_rank = 32, .qk_rope_dim = 8,
                                .v_head_dim = 12}},
    {"attn", "MLA, no q rank", {.kind = RT_ATTENTION, BASE, .heads = 2, .head_dim = 16,
                                .kv_lora_rank = 16, .qk_rope_dim = 8}},
    {"attn", "GQA 4/2, qkv_bias, rope_theta 1e6", {.kind = RT_ATTENTION, BASE, .heads = 4,
                                                    .kv_heads = 2, .rope_theta = 1e6,
                                                    .qkv_bias = 1}},
    {"attn", "GQA 8/2, qk_norm, window 7", {.kind = RT_ATTENTION, BASE, .heads = 8,
                                            .kv_heads = 2, .head_dim = 12, .window = 7,
                                            .qk_norm = 1}},
    {"attn", "MHA, qkv_bias and qk_norm", {.kind = RT_ATTENTION, BASE, .heads = 4, .qkv_bias = 1,
                                           .qk_norm = 1, .rope_theta = 500000}},
    {"attn", "MLA, rope_theta 5e4", {.kind = RT_ATTENTION, BASE, .heads = 2, .head_dim = 16,
                                     .q_lora_rank = 24, .kv_lora_rank = 16, .qk_rope_dim = 8,
                                     .rope_theta = 5e4}},
    /* RoPE scaling: the module's inverse frequencies, cos and sin factor and
     * scores' scale are the CPU's (llama3: pairs kept, ramped and divided;
     * yarn: a ramp over pairs 0..4 and the default attention factor; MLA
     * with DeepSeek's mscale and mscale_all_dim). */
    {"attn", "GQA 4/2, rope linear 4, window 9", {.kind = RT_ATTENTION, BASE, .heads = 4,
                                                   .kv_heads = 2, .window = 9,
                                                   .rope_scaling = RT_ROPE_LINEAR,
                                                   .rope_factor = 4}},
    {"attn", "GQA 4/1, rope llama3", {.kind = RT_ATTENTION, BASE, .heads = 4, .kv_heads = 1,
                                      .rope_scaling = RT_ROPE_LLAMA3, .rope_factor = 8,
                                      .rope_low_freq_factor = 2, .rope_high_freq_factor = 16,
                                      .rope_original_max = 4096}},
    {"attn", "MHA, rope yarn", {.kind = RT_ATTENTION, BASE, .heads = 4,
                                .rope_scaling = RT_ROPE_YARN, .rope_factor = 16,
                                .rope_original_max = 256}},
    {"attn", "MLA, rope yarn, mscales", {.kind = RT_ATTENTION, BASE, .heads = 2,
                                                .head_dim = 16, .q_lora_rank = 24,
                                                .kv_lora_rank = 16, .qk_rope_dim = 8,
                                                .rope_scaling = RT_ROPE_YARN, .rope_factor = 40,
                                                .rope_original_max = 64, .rope_mscale = 1,
                                                .rope_mscale_all_dim = 0.8}},
    /* The tiled core's loops: three query and key tiles of 64, the last
     * partial, the online softmax's rescale, tiles the window hides skipped. */
    {"attn", "GQA 4/2, seq 133, window 40", {.kind = RT_ATTENTION, .hidden = 64, .seq = 133,
                                             .mbs = MBS, .heads = 4, .kv_heads = 2,
                                             .window = 40}},
    {"mlp", "swiglu", {.kind = RT_MLP, BASE, .ffn = 128, .act = RT_SWIGLU}},
    {"mlp", "gelu", {.kind = RT_MLP, BASE, .ffn = 96, .act = RT_GELU}},
    {"mlp", "relu2", {.kind = RT_MLP, BASE, .ffn = 80, .act = RT_RELU2}},
    /* Top-k routing is discontinuous: in bf16 a token whose k-th and
     * (k+1)-th experts are within the rounding of its logits may pick the
     * other one, and its output then differs by O(1) from the f32 CPU's.
     * The routed cases are checked in f32; bf16 checks a MoE layer that
     * routes every token to every expert (the same kernels and GEMMs, with
     * no choice to flip). */
    {"moe", "4 experts, top 2, shared", {.kind = RT_MOE, BASE, .experts = 4, .top_k = 2,
                                         .expert_ffn = 64, .shared_experts = 1, .act = RT_SWIGLU},
     .f32_only = true},
    {"moe", "8 experts, top 1, geglu", {.kind = RT_MOE, BASE, .experts = 8, .top_k = 1,
                                        .expert_ffn = 32, .act = RT_GEGLU}, .f32_only = true},
    {"moe", "4 experts, top 4, shared", {.kind = RT_MOE, BASE, .experts = 4, .top_k = 4,
                                         .expert_ffn = 48, .shared_experts = 1, .act = RT_SWIGLU}},
    /* Qwen2-MoE's sigmoid gate on the shared experts: routed (f32), and every
     * expert (bf16 too). */
    {"moe", "4 experts, top 2, 2 shared, gate", {.kind = RT_MOE, BASE, .experts = 4, .top_k = 2,
                                                 .expert_ffn = 32, .shared_experts = 2,
                                                 .shared_gate = 1, .act = RT_SWIGLU},
     .f32_only = true},
    {"moe", "3 experts, top 3, shared, gate, gelu", {.kind = RT_MOE, BASE, .experts = 3,
                                                     .top_k = 3, .expert_ffn = 32,
                                                     .shared_experts = 1, .shared_gate = 1,
                                                     .act = RT_GELU}},
    {"mamba", "Mamba-2, 1 group", {.kind = RT_MAMBA, BASE, .version = 2, .state = 16,
                                   .heads = 8, .head_dim = 16, .groups = 1}},
    {"mamba", "Mamba-2, 2 groups", {.kind = RT_MAMBA, BASE, .version = 2, .state = 8,
                                    .heads = 4, .head_dim = 32, .groups = 2}},
    {"mamba", "Mamba-1", {.kind = RT_MAMBA, BASE, .version = 1, .state = 8}},
    /* recompute=selective: the chunk states in the scratch, B makes them again */
    {"mamba", "Mamba-2, selective", {.kind = RT_MAMBA, BASE, .version = 2, .state = 8,
                                     .heads = 4, .head_dim = 32, .groups = 2, .selective = 1}},
    {"mamba", "Mamba-1, selective", {.kind = RT_MAMBA, BASE, .version = 1, .state = 8,
                                     .selective = 1}},
    /* The chunked SSD across chunks: states carried and their gradients
     * carried back, a partial last chunk, groups of several heads. */
    {"mamba", "Mamba-2, 2 groups, seq 2Q+5", {.kind = RT_MAMBA, .hidden = 64, SSD_LONG,
                                              .version = 2, .state = 8, .heads = 4,
                                              .head_dim = 32, .groups = 2}},
    /* (Named "..., sel.", its inputs gave dD 2.27e-2 in bf16, with the
     * step-by-step scan as with the SSD: "What remains" 4 of docs/cuda.md.) */
    {"mamba", "Mamba-2, 4 groups, seq 2Q, selective", {.kind = RT_MAMBA, .hidden = 64,
                                                       SSD_EVEN, .version = 2, .state = 16,
                                                       .heads = 8, .head_dim = 16, .groups = 4,
                                                       .selective = 1}},
    /* attention and a Mamba-2 mixer on one norm (Falcon-H1).  In bf16 the
     * mixer's dt_bias and D gradients (sums over every token of products of
     * rounded values) come near the threshold, as a Mamba-2 layer's do (the
     * 2-group case above goes over it for some inputs: other case names). */
    {"par", "GQA 4/2, Mamba-2 1 group", {.kind = RT_PARALLEL, BASE, .heads = 4, .kv_heads = 2,
                                         .state = 16, .ssm_heads = 8, .ssm_head_dim = 16,
                                         .groups = 1}},
    {"par", "qkv_bias, qk_norm, window, sel.", {.kind = RT_PARALLEL, BASE, .heads = 2,
                                                .kv_heads = 1, .head_dim = 16, .window = 7,
                                                .rope_theta = 1e6, .qkv_bias = 1, .qk_norm = 1,
                                                .state = 16, .expand = 1, .conv = 3,
                                                .ssm_heads = 4, .ssm_head_dim = 16,
                                                .selective = 1}},
    {"par", "GQA 4/2, Mamba-2 2 groups, 2Q+5", {.kind = RT_PARALLEL, .hidden = 64, SSD_LONG,
                                                .heads = 4, .kv_heads = 2, .state = 16,
                                                .ssm_heads = 8, .ssm_head_dim = 16,
                                                .groups = 2}},
    /* The production models' per-head widths at a short sequence: these
     * widths compile to other code than the small ones above (the
     * attention core's smaller tiles, one buffer for B's streamed pair;
     * an 11 KB frame for the scan's), and at seq 70 the core steps over
     * three query tiles and up to five key tiles. */
    {"attn", "GQA 2/1, head_dim 128 (Llama-3)", {.kind = RT_ATTENTION, WIDE(256), .heads = 2,
                                                 .kv_heads = 1, .head_dim = 128}},
    {"attn", "MHA, head_dim 128, seq 70", {.kind = RT_ATTENTION, .hidden = 256, .seq = 70,
                                           .mbs = MBS, .heads = 2, .head_dim = 128}},
    /* head_dim 256: in f32 F's tiles are 16 x 16 and no backward tile fits
     * 48 KB, so B runs the one-thread-a-row core; bf16 tiles all three. */
    {"attn", "GQA 2/1, head_dim 256 (Gemma), seq 40", {.kind = RT_ATTENTION, .hidden = 256,
                                                       .seq = 40, .mbs = MBS, .heads = 2,
                                                       .kv_heads = 1, .head_dim = 256}},
    {"attn", "MLA 192/128, ranks 96/64 (DeepSeek-V2/V3)",
     {.kind = RT_ATTENTION, WIDE(256), .heads = 2, .head_dim = 128, .q_lora_rank = 96,
      .kv_lora_rank = 64, .qk_rope_dim = 64, .v_head_dim = 128}},
    {"moe", "64 experts, top 8, 2 shared (DeepSeek-V2-Lite)",
     {.kind = RT_MOE, WIDE(64), .experts = 64, .top_k = 8, .expert_ffn = 16, .shared_experts = 2,
      .act = RT_SWIGLU}, .f32_only = true},
    {"mamba", "Mamba-2, state 128, head_dim 64 (Nemotron-H)",
     {.kind = RT_MAMBA, WIDE(128), .version = 2, .state = 128, .heads = 4, .head_dim = 64,
      .groups = 1}},
    {"mamba", "Mamba-2, state 128, head_dim 64, seq 2Q+5",
     {.kind = RT_MAMBA, .hidden = 256, SSD_LONG, .version = 2, .state = 128, .heads = 8,
      .head_dim = 64, .groups = 2}},
    {"mamba", "Mamba-1, state 16, expand 2 (Jamba)",
     {.kind = RT_MAMBA, WIDE(128), .version = 1, .state = 16}},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* ---- random values ----------------------------------------------------------- */

static uint64_t rng = 0x243f6a8885a308d3ull;

static double unif(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static float randn(void)
{
	double u = unif() + 1e-12, v = unif();
	return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static float *noise(int64_t n, float scale)
{
	float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
	for (int64_t i = 0; i < n; i++)
		p[i] = scale * randn();
	return p;
}

/* ---- storage conversion ------------------------------------------------------- */

/* f32 values in the device's storage type (a host buffer). */
static void *to_real(const float *x, int64_t n, bool bf16)
{
	void *out = malloc((size_t)(n ? n : 1) * (bf16 ? 2 : 4));
	for (int64_t i = 0; i < n; i++)
		if (bf16)
			((uint16_t *)out)[i] = dev_to_bf16(x[i]);
		else
			((float *)out)[i] = x[i];
	return out;
}

/* The values the device sees (rounded to its storage), as f32: the CPU's input. */
static void round_to(float *x, int64_t n, bool bf16)
{
	if (bf16)
		for (int64_t i = 0; i < n; i++)
			x[i] = dev_from_bf16(dev_to_bf16(x[i]));
}

/* ---- the device ----------------------------------------------------------------- */

static void die(rt_dev *d, int rc, const char *what)
{
	fprintf(stderr, "dev_check: error: %s: %s (%s)\n", what, d ? d->err : "", rt_strerror(rc));
	exit(2);
}

#define DEV(call, what)                                                              \
	do {                                                                             \
		int rc_ = (call);                                                            \
		if (rc_)                                                                     \
			die(dev, rc_, what);                                                     \
	} while (0)

static void *dalloc(rt_dev *dev, size_t bytes)
{
	void *p;
	DEV(dev->ops->alloc(dev, bytes ? bytes : 1, &p), "device allocation");
	return p;
}

static void *dput(rt_dev *dev, const void *h, size_t bytes)
{
	void *p = dalloc(dev, bytes);
	if (bytes)
		DEV(dev->ops->copy(dev, p, h, bytes, DEV_H2D), "copy to the device");
	return p;
}

/* n values of storage type at device p, as f32 on the host. */
static float *dget(rt_dev *dev, const void *p, int64_t n, bool f32)
{
	size_t esz = f32 ? 4 : dev_esz(dev);
	void *h = malloc((size_t)(n ? n : 1) * esz);
	DEV(dev->ops->sync(dev), "device sync");
	if (n)
		DEV(dev->ops->copy(dev, h, p, (size_t)n * esz, DEV_D2H), "copy from the device");
	if (esz == 4)
		return h;
	float *out = malloc((size_t)n * sizeof *out);
	for (int64_t i = 0; i < n; i++)
		out[i] = dev_from_bf16(((uint16_t *)h)[i]);
	free(h);
	return out;
}

static const char *device_kind = "emu";
static const char *gpu_arch = "sm_90";
static bool gpu_launch; /* --gpu-launch: the emulator with the GPU's blocks */
static const char *modules; /* --modules DIR: kept, and reused */
static char workdir[4096];

/* ---- --lib-attn: the library path of the attention core, on the emulator ------ */

/* A stand-in for a library's attention core (dev_ops.attn_*: cuDNN's on a
 * GPU) on the emulator, whose device memory is the host's: the core in
 * double from the layer's arrays, rounded once into the storage type, so
 * that the layer's way through the library (dev_layer_prepare, the
 * arrays dev_attn.c hands over: qk_norm's normed heads, MLA's assembled
 * k, a parallel layer's, Dsum) is checked against the CPU kernels as a
 * library's core would be.  It takes every core. */
static bool lib_attn;
static int lib_cores; /* cores taken, for the summary */

static double ld(const rt_dev *d, const void *p, int64_t i)
{
	return d->bf16 ? dev_from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void st(const rt_dev *d, void *p, int64_t i, double v)
{
	if (d->bf16)
		((uint16_t *)p)[i] = dev_to_bf16((float)v);
	else
		((float *)p)[i] = (float)v;
}

static bool h_sees(const dev_attn_core *c, int64_t i, int64_t j)
{
	return j <= i && (c->win <= 0 || j > i - c->win);
}

static int h_attn_lib(rt_dev *d, const dev_attn_core *c, bool *use)
{
	(void)d, (void)c;
	lib_cores++;
	*use = true;
	return RT_OK;
}

/* Row i of sequence b, head h (kv head kh) of a [b][s][h][d] array. */
#define ROW(b, i, h, H, D) ((((b) * c->seq + (i)) * (H) + (h)) * (D))

static int h_attn_f(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
                    const void *v, void *o, float *lse)
{
	int64_t S = c->seq, g = c->nh / c->nkv;
	double *p = malloc((size_t)S * sizeof *p);
	for (int64_t b = 0; b < c->mbs; b++)
		for (int64_t h = 0; h < c->nh; h++)
			for (int64_t i = 0; i < S; i++) {
				int64_t qi = ROW(b, i, h, c->nh, c->dqk), oi = ROW(b, i, h, c->nh, c->dv);
				double mx = -INFINITY, l = 0;
				for (int64_t j = 0; j < S; j++) {
					int64_t kj = ROW(b, j, h / g, c->nkv, c->dqk);
					double s = 0;
					for (int64_t e = 0; e < c->dqk; e++)
						s += ld(d, q, qi + e) * ld(d, k, kj + e);
					p[j] = h_sees(c, i, j) ? s * c->scale : -INFINITY;
					mx = fmax(mx, p[j]);
				}
				for (int64_t j = 0; j < S; j++)
					l += p[j] = exp(p[j] - mx);
				lse[(b * c->nh + h) * S + i] = (float)(mx + log(l));
				for (int64_t e = 0; e < c->dv; e++) {
					double y = 0;
					for (int64_t j = 0; j < S; j++)
						y += p[j] / l * ld(d, v, ROW(b, j, h / g, c->nkv, c->dv) + e);
					st(d, o, oi + e, y);
				}
			}
	free(p);
	return RT_OK;
}

static int h_attn_b(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
                    const void *v, const void *o, const void *dout, const float *lse,
                    float *dsum, void *dq, void *dk, void *dv)
{
	int64_t S = c->seq, g = c->nh / c->nkv, nq = c->mbs * S * c->nh * c->dqk;
	int64_t nk = c->mbs * S * c->nkv * c->dqk, nv = c->mbs * S * c->nkv * c->dv;
	double *gq = calloc((size_t)nq, 8), *gk = calloc((size_t)nk, 8), *gv = calloc((size_t)nv, 8);
	for (int64_t b = 0; b < c->mbs; b++)
		for (int64_t h = 0; h < c->nh; h++)
			for (int64_t i = 0; i < S; i++) {
				int64_t qi = ROW(b, i, h, c->nh, c->dqk), oi = ROW(b, i, h, c->nh, c->dv);
				int64_t si = (b * c->nh + h) * S + i;
				double D = 0;
				for (int64_t e = 0; e < c->dv; e++)
					D += ld(d, dout, oi + e) * ld(d, o, oi + e);
				dsum[si] = (float)D;
				for (int64_t j = 0; j <= i; j++) {
					if (!h_sees(c, i, j))
						continue;
					int64_t kj = ROW(b, j, h / g, c->nkv, c->dqk);
					int64_t vj = ROW(b, j, h / g, c->nkv, c->dv);
					double s = 0, dp = 0;
					for (int64_t e = 0; e < c->dqk; e++)
						s += ld(d, q, qi + e) * ld(d, k, kj + e);
					double P = exp(s * c->scale - lse[si]);
					for (int64_t e = 0; e < c->dv; e++) {
						dp += ld(d, dout, oi + e) * ld(d, v, vj + e);
						gv[vj + e] += P * ld(d, dout, oi + e);
					}
					double ds = P * (dp - D) * c->scale;
					for (int64_t e = 0; e < c->dqk; e++) {
						gq[qi + e] += ds * ld(d, k, kj + e);
						gk[kj + e] += ds * ld(d, q, qi + e);
					}
				}
			}
	for (int64_t i = 0; i < nq; i++)
		st(d, dq, i, gq[i]);
	for (int64_t i = 0; i < nk; i++)
		st(d, dk, i, gk[i]);
	for (int64_t i = 0; i < nv; i++)
		st(d, dv, i, gv[i]);
	free(gq), free(gk), free(gv);
	return RT_OK;
}
#undef ROW

static rt_dev *make_device(const rt_layer_desc *d, bool bf16, arena *a)
{
	rt_dev *dev = NULL;
	if (strcmp(device_kind, "emu") == 0) {
		char *src = cg_cuda_emu_source(d, bf16, "octo_emu_table", a);
		if (!src)
			exit(2);
		char *name = cg_cuda_module_name(d, src, a);
		DEV(dev_emu_create(0, bf16, &dev), "emulator");
		if (gpu_launch)
			dev_emu_gpu_launch(dev);
		DEV(dev_emu_add_source(dev, name, src, OCTO_CXX, workdir), "module build");
		if (lib_attn) { /* the emulator's table, with the stand-in's core */
			static dev_ops with_lib;
			with_lib = *dev->ops;
			with_lib.attn_lib = h_attn_lib;
			with_lib.attn_f = h_attn_f;
			with_lib.attn_b = h_attn_b;
			dev->ops = &with_lib;
		}
		return dev;
	}
#ifdef OCTO_HAVE_CUDA
	if (strcmp(device_kind, "cuda") == 0) {
		char *src = cg_cuda_source(d, bf16, a), *ptx = NULL, err[768];
		if (!src)
			exit(2);
		const char *name = cg_cuda_module_name(d, src, a);
		if (cg_cuda_ptx(name, src, gpu_arch, &ptx, a))
			exit(2);
		const char *img = ptx;
		int rc = dev_cuda_create(0, 1, bf16, 1, &name, &img, false, 0, &dev, err, sizeof err);
		if (rc) {
			fprintf(stderr, "dev_check: error: %s\n", err);
			exit(2);
		}
		return dev;
	}
#endif
	fprintf(stderr, "dev_check: error: no device '%s' in this build\n", device_kind);
	exit(2);
}

/* ---- one case --------------------------------------------------------------------- */

static double rel_err(const float *got, const float *want, int64_t n)
{
	double big = 0, err = 0;
	for (int64_t i = 0; i < n; i++) {
		big = fmax(big, fabs((double)want[i]));
		double e = fabs((double)got[i] - (double)want[i]);
		err = isnan(e) ? INFINITY : fmax(err, e);
	}
	return big > 0 ? err / big : err;
}

/* The root mean square error relative to the largest magnitude: where
 * rel_err sees the worst element, this sees every rounding. */
static double rms_err(const float *got, const float *want, int64_t n)
{
	double big = 0, sum = 0;
	for (int64_t i = 0; i < n; i++) {
		double e = (double)got[i] - (double)want[i];
		big = fmax(big, fabs((double)want[i]));
		sum += e * e;
	}
	return big > 0 && n ? sqrt(sum / (double)n) / big : 0;
}

/* The rounding of du in bf16 in the GQA and MHA attention and the parallel
 * layer: du is the sum of the q, k and v projections' dx (and the
 * parallel layer's mixer's in_proj dx), which must be summed in f32 and
 * rounded once.  Against the sum in double of the device's own terms
 * (dq, dk, dv and dzx from its W stash, whose layout is xhat, du, dy, o,
 * dq, dk, dv, then qk_norm's dq_n, dk_n, qhat, khat, then the mixer's yo,
 * dyn, dzx, in 256-byte steps), every element of du is within half a bf16
 * unit of the last place, less a bound of the f32 sum's own error; rounded
 * once a term, it is not.  Returns the largest error in those units. */
static double du_rounding(rt_dev *dev, const dev_layer *L, bool par, const void *ws,
                          const float *params)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, q = s->nh * s->dqk, k = s->nkv * s->dqk;
	int64_t qn = s->qkn ? q : 0, kn = s->qkn ? k : 0;
	int64_t width[14] = {H, H, H, s->nh * s->dv, q, k, s->nkv * s->dv, qn, kn, qn, kn,
	                     s->di, s->ver == 2 ? s->di : 0, s->dip};
	const int term[4] = {4, 5, 6, 13}, ti[4] = {AT_WQ, AT_WK, AT_WV, PAR_MB + MB_WIN};
	int nterm = par ? 4 : 3;
	size_t at[14], off = 0;
	for (int i = 0; i < 14; i++) {
		at[i] = off;
		off += ((size_t)(T * width[i]) * 2 + 255) & ~(size_t)255;
	}
	float *du = dget(dev, (const char *)ws + at[1], T * H, false), *tv[4];
	for (int j = 0; j < nterm; j++)
		tv[j] = dget(dev, (const char *)ws + at[term[j]], T * width[term[j]], false);
	double worst = 0;
	for (int64_t t = 0; t < T; t++)
		for (int64_t c = 0; c < H; c++) {
			double ref = 0, mag = 0;
			for (int j = 0; j < nterm; j++) {
				int64_t w = width[term[j]];
				const float *wj = params + L->t[ti[j]].offset + c * w;
				for (int64_t i = 0; i < w; i++) {
					double p = (double)tv[j][t * w + i] * (double)wj[i];
					ref += p;
					mag += fabs(p);
				}
			}
			int e;
			frexp(ref, &e); /* |ref| in [2^(e-1), 2^e): bf16's unit there is 2^(e-8) */
			double ulp = ref != 0 ? ldexp(1.0, e - 8) : ldexp(1.0, -133);
			/* the f32 sum's own error, a generous bound: 2^-17 of the terms' magnitudes */
			double e32 = ldexp(mag, -17);
			worst = fmax(worst, (fabs((double)du[t * H + c] - ref) - e32) / ulp);
		}
	free(du);
	for (int j = 0; j < nterm; j++)
		free(tv[j]);
	return worst;
}

static int report(const tcase *c, const char *out, double err, double tol)
{
	bool ok = err <= tol;
	printf("%-6s %-26s %-22s max rel err %.2e %s\n", c->kind, c->what, out, err, ok ? "ok" : "FAIL");
	return ok ? 0 : 1;
}

/* The first run's output kept in *first (run 0); the second's compared
 * with it bit for bit (run 1; false when they differ).  Frees got. */
static bool keep_bits(float **first, float *got, int64_t n, int run)
{
	if (run == 0) {
		*first = got;
		return true;
	}
	bool same = memcmp(*first, got, (size_t)n * sizeof *got) == 0;
	free(*first), free(got);
	*first = NULL;
	return same;
}

static int run_case(const tcase *c, bool bf16)
{
	const rt_layer_desc *d = &c->d;
	/* Each case's inputs depend on the case only, whichever others run. */
	rng = 0x243f6a8885a308d3ull;
	for (const char *p = c->what; *p; p++)
		rng = (rng ^ (unsigned char)*p) * 0x100000001b3ull;
	if (bf16 && c->f32_only) {
		printf("%-6s %-26s (f32 only: top-k routing flips under bf16 rounding)\n", c->kind, c->what);
		return 0;
	}
	arena *a = arena_new();
	rt_sizes cs, ds;
	if (rt_layer_sizes(d, &cs) || dev_layer_sizes(d, bf16, &ds)) {
		printf("%-6s %-26s FAIL: no sizes for this layer\n", c->kind, c->what);
		arena_free(a);
		return 1;
	}
	const double tol = bf16 ? 2e-2 : 1e-5;
	const int64_t T = d->seq * d->mbs, H = d->hidden, P = cs.params;
	const bool emb = d->kind == RT_EMBEDDING, head = d->kind == RT_HEAD;

	/* The inputs, rounded to what the device stores so both see the same. */
	float *params = malloc((size_t)P * sizeof *params);
	if (rt_layer_init(d, 7, 3, params))
		die(NULL, RT_EINVAL, "rt_layer_init");
	for (int64_t i = 0; i < P; i++)
		params[i] += 0.05f * randn();
	round_to(params, P, bf16);
	float *x = noise(T * H, 1.f), *dy = noise(T * H, 1.f), *g0 = noise(P, 0.01f);
	round_to(x, T * H, bf16);
	round_to(dy, T * H, bf16);
	int32_t *tok = malloc((size_t)T * sizeof *tok);
	for (int64_t t = 0; t < T; t++)
		tok[t] = (int32_t)(unif() * (double)d->vocab);
	if (head)
		tok[3] = -1; /* an ignored target */

	/* CPU */
	void *act = calloc(1, (size_t)cs.act + 64), *ws = calloc(1, (size_t)cs.wstash + 64),
	     *scr = calloc(1, (size_t)cs.scratch + 64);
	float *y = calloc((size_t)(T * H), sizeof *y), *dx = calloc((size_t)(T * H), sizeof *dx);
	float *grads = malloc((size_t)P * sizeof *grads);
	memcpy(grads, g0, (size_t)P * sizeof *grads);
	rt_loss loss = {0, 0};
	int rc = rt_forward(d, params, emb ? NULL : x, emb || head ? tok : NULL, head ? NULL : y,
	                    head ? &loss : NULL, act, scr);
	if (!rc)
		rc = rt_backward_b(d, params, head ? NULL : dy, 1.f / (float)T, emb ? NULL : dx, act, ws, scr);
	if (!rc)
		rc = rt_backward_w(d, params, grads, ws, scr);
	if (rc)
		die(NULL, rc, "the CPU kernels");

	/* The device, twice: separate buffers, then y on x and dx on dy; the
	 * second run must give the first's bits (y, dx, the gradients). */
	rt_dev *dev = make_device(d, bf16, a);
	int bad = 0;
	float *run1[3] = {NULL, NULL, NULL};
	bool same = true;
	for (int alias = 0; alias < 2; alias++) {
		size_t esz = dev_esz(dev), act_b = (size_t)(T * H) * esz;
		dev_layer L;
		DEV(dev_layer_setup(&L, d), "layer setup");
		void *hp = to_real(params, P, bf16), *hx = to_real(x, T * H, bf16), *hdy = to_real(dy, T * H, bf16);
		L.mod = 0;
		DEV(dev_layer_prepare(dev, &L), "the layer's library calls");
		L.p = dput(dev, hp, (size_t)P * esz);
		L.g = dput(dev, g0, (size_t)P * sizeof(float));
		dev_io io = {.dscale = 1.f / (float)T};
		void *dxin = dput(dev, hx, act_b), *ddy = dput(dev, hdy, act_b);
		void *dyout = alias ? dxin : dalloc(dev, act_b), *ddx = alias ? ddy : dalloc(dev, act_b);
		int zero = 0;
		io.x = emb ? NULL : dxin;
		io.y = head ? NULL : dyout;
		io.tok = emb || head ? dput(dev, tok, (size_t)T * sizeof *tok) : NULL;
		io.loss = head ? dalloc(dev, 2 * sizeof(double)) : NULL;
		io.err = emb ? dput(dev, &zero, sizeof zero) : NULL;
		io.act = dalloc(dev, (size_t)ds.act);
		io.ws = dalloc(dev, (size_t)ds.wstash);
		io.scratch = dalloc(dev, (size_t)ds.scratch);
		DEV(dev_forward(dev, &L, &io), "F");
		io.dy = head ? NULL : ddy;
		io.dx = emb ? NULL : ddx;
		if (head) {
			double dl[2];
			DEV(dev->ops->sync(dev), "device sync");
			DEV(dev->ops->copy(dev, dl, io.loss, sizeof dl, DEV_D2H), "copy from the device");
			double e = fabs(dl[0] - loss.sum) / fabs(loss.sum);
			bad |= report(c, alias ? "F loss (aliased)" : "F loss", e, tol);
			if (dl[1] != (double)loss.count)
				bad |= report(c, "F count", INFINITY, tol);
		} else {
			float *got = dget(dev, io.y, T * H, false);
			bad |= report(c, alias ? "F y (aliased)" : "F y", rel_err(got, y, T * H), tol);
			same &= keep_bits(&run1[0], got, T * H, alias);
		}
		/* The scratch holds nothing from F to B (a selective B makes its
		 * chunk states again). */
		DEV(dev->ops->zero(dev, io.scratch, (size_t)ds.scratch), "zeroing the scratch");
		DEV(dev_backward_b(dev, &L, &io), "B");
		if (!emb) {
			float *got = dget(dev, io.dx, T * H, false);
			bad |= report(c, alias ? "B dx (aliased)" : "B dx", rel_err(got, dx, T * H), tol);
			same &= keep_bits(&run1[1], got, T * H, alias);
		}
		if (!emb && !head && !alias) {
			/* du, the gradient of the pre-norm's output (a sum of the
			 * mixers' or the blocks' input projections): the W stash's
			 * second array in every kind with a pre-norm, on the CPU
			 * (64-byte steps, f32) and the device (256-byte steps) alike.
			 * Its roundings in bf16 show here before the norm's B mixes
			 * them into dx. */
			size_t cpu_at = ((size_t)(T * H) * sizeof(float) + 63) & ~(size_t)63;
			size_t du_at = (act_b + 255) & ~(size_t)255;
			float *got = dget(dev, (char *)io.ws + du_at, T * H, false);
			const float *want = (const float *)((char *)ws + cpu_at);
			bad |= report(c, "B du", rel_err(got, want, T * H), tol);
			printf("%-6s %-26s %-22s rms rel err %.2e\n", c->kind, c->what, "B du",
			       rms_err(got, want, T * H));
			free(got);
		}
		if (bf16 && !alias && (d->kind == RT_ATTENTION || d->kind == RT_PARALLEL) && !L.s.mla) {
			double u = du_rounding(dev, &L, d->kind == RT_PARALLEL, io.ws, params);
			bool ok = u <= 0.5;
			printf("%-6s %-26s %-22s %.3f units in the last place (rounded once: at most 0.5) "
			       "%s\n", c->kind, c->what, "B du rounding", u, ok ? "ok" : "FAIL");
			bad |= !ok;
		}
		DEV(dev_backward_w(dev, &L, &io), "W");
		if (alias) {
			same &= keep_bits(&run1[2], dget(dev, L.g, P, true), P, alias);
		} else {
			float *got = dget(dev, L.g, P, true);
			for (int i = 0; i < L.nt; i++) {
				const rt_tensor *t = &L.t[i];
				if (!t->size)
					continue;
				char what[64];
				snprintf(what, sizeof what, "W d%s", t->name);
				bad |= report(c, what, rel_err(got + t->offset, grads + t->offset, t->size), tol);
			}
			keep_bits(&run1[2], got, P, alias);
		}
		free(hp);
		free(hx);
		free(hdy);
	}
	if (!same) {
		printf("%-6s %-26s %-22s FAIL: the second run's bits differ from the first's\n", c->kind,
		       c->what, "F, B, W twice");
		bad = 1;
	}
	dev->ops->destroy(dev);
	free(params), free(x), free(dy), free(g0), free(tok), free(act), free(ws), free(scr);
	free(y), free(dx), free(grads);
	arena_free(a);
	return bad;
}

/* The optimizer kernel (optim_adamw, in every module) against the host's
 * rt__adamw: three steps of AdamW with and without decay, and SGD, on one
 * tensor; the f32 master weights and moments must be the same bits, the
 * storage copy their rounding. */
static int run_optim(bool bf16)
{
	arena *a = arena_new();
	const rt_layer_desc d = {.kind = RT_MLP, BASE, .ffn = 128, .act = RT_SWIGLU};
	rt_dev *dev = make_device(&d, bf16, a);
	dev_layer L;
	DEV(dev_layer_setup(&L, &d), "layer setup");
	L.mod = 0;
	rng = 0x6f7074696du;
	const int64_t n = 5000;
	int bad = 0;
	for (int mode = 0; mode < 3; mode++) {
		rt_train t = {.lr = 1e-2f, .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
		              .optimizer = mode == 2 ? RT_SGD : RT_ADAMW};
		float *p = noise(n, 1.f), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
		float *dp = dput(dev, p, (size_t)n * 4), *dm = dput(dev, m, (size_t)n * 4);
		float *dv = dput(dev, v, (size_t)n * 4);
		void *hp = to_real(p, n, bf16), *dst = dput(dev, hp, (size_t)n * dev_esz(dev));
		for (int64_t step = 1; step <= 3; step++) {
			float *g = noise(n, 0.1f), *dg = dput(dev, g, (size_t)n * 4);
			rt_adamw_k c;
			rt__adamw_consts(&t, step, mode == 0, &c);
			rt__adamw(&c, p, g, m, v, n);
			long cnt = (long)n;
			DEV(dev_each(dev, &L, "optim_adamw", n,
			             (void *[]){&dp, &dst, &dg, &dm, &dv, &cnt, &c.lr, &c.step_size, &c.b1, &c.b2,
			                        &c.c1, &c.c2, &c.eps, &c.bc2_sqrt, &c.keep, &c.sgd}),
			    "optim_adamw");
			free(g);
		}
		float *gp = dget(dev, dp, n, true), *gm = dget(dev, dm, n, true), *gv = dget(dev, dv, n, true);
		float *gs = dget(dev, dst, n, false);
		int64_t diff = 0;
		for (int64_t i = 0; i < n; i++) {
			float want_s = bf16 ? dev_from_bf16(dev_to_bf16(p[i])) : p[i];
			diff += memcmp(&gp[i], &p[i], 4) != 0 || memcmp(&gm[i], &m[i], 4) != 0 ||
			        memcmp(&gv[i], &v[i], 4) != 0 || memcmp(&gs[i], &want_s, 4) != 0;
		}
		static const char *const what[] = {"AdamW, decay", "AdamW", "SGD"};
		printf("%-6s %-26s %-22s %lld of %lld elements differ from the host's %s\n", "optim", what[mode],
		       "3 steps", (long long)diff, (long long)n, diff ? "FAIL" : "ok");
		bad |= diff != 0;
		free(p), free(m), free(v), free(hp), free(gp), free(gm), free(gv), free(gs);
	}
	dev->ops->destroy(dev);
	arena_free(a);
	return bad;
}

/* ---- --time: every launch and GEMM of real layers, timed ------------------------ */

/* The layers of issue 19's timing at seq 4096, micro-batch 1 (a Llama-3-8B
 * layer pair, a Nemotron-H-8B Mamba-2 layer and its relu2 MLP), cheapest
 * first so that a run cut short has the most lines; --small: the same
 * kinds at the GPU check rehearsal's shapes (tests/gpu/run.sh --emulate). */
#define REAL .hidden = 4096, .seq = 4096, .mbs = 1
#define SMALL .hidden = 128, .seq = 64, .mbs = 1
static const tcase timed_real[] = {
    {"mlp", "Nemotron-H-8B relu2 21504", {.kind = RT_MLP, REAL, .ffn = 21504, .act = RT_RELU2}},
    {"mlp", "Llama-3-8B swiglu 14336", {.kind = RT_MLP, REAL, .ffn = 14336, .act = RT_SWIGLU}},
    {"mamba", "Nemotron-H-8B Mamba-2", {.kind = RT_MAMBA, REAL, .version = 2, .state = 128,
                                         .expand = 2, .conv = 4, .heads = 128, .head_dim = 64,
                                         .groups = 8}},
    {"attn", "Llama-3-8B GQA 32/8", {.kind = RT_ATTENTION, REAL, .heads = 32, .kv_heads = 8,
                                     .head_dim = 128, .rope_theta = 500000}},
};
static const tcase timed_small[] = {
    {"mlp", "relu2 256", {.kind = RT_MLP, SMALL, .ffn = 256, .act = RT_RELU2}},
    {"mlp", "swiglu 256", {.kind = RT_MLP, SMALL, .ffn = 256, .act = RT_SWIGLU}},
    {"mamba", "Mamba-2", {.kind = RT_MAMBA, SMALL, .version = 2, .state = 16, .expand = 2,
                          .conv = 4, .heads = 4, .head_dim = 64, .groups = 2}},
    {"attn", "GQA 4/2", {.kind = RT_ATTENTION, SMALL, .heads = 4, .kv_heads = 2, .head_dim = 32}},
};

/* One timed call: a launch or a GEMM between two of the device's marks. */
typedef struct tcall {
	char what[112];
	double flops; /* a GEMM's 2mnk, a library core's (core_flops), else 0 */
	bool lib;     /* a library's attention core, counted with the kernels */
	void *from, *to;
} tcall;
static tcall *calls;
static int ncalls, capcalls;
static const dev_ops *inner; /* the backend's table, under the timing one */

static tcall *next_call(void)
{
	if (ncalls == capcalls) {
		capcalls = capcalls ? 2 * capcalls : 256;
		calls = realloc(calls, (size_t)capcalls * sizeof *calls);
		if (!calls) {
			fprintf(stderr, "dev_check: error: out of host memory\n");
			exit(2);
		}
	}
	tcall *t = &calls[ncalls++];
	*t = (tcall){.flops = 0};
	return t;
}

static int t_gemm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                  int64_t ldc, bool c_f32)
{
	tcall *t = next_call();
	snprintf(t->what, sizeof t->what, "GEMM %lldx%lldx%lld%s%s%s", (long long)m, (long long)n,
	         (long long)k, ta ? " A^T" : "", tb ? " B^T" : "", c_f32 ? " C f32" : "");
	t->flops = 2.0 * (double)m * (double)n * (double)k;
	int rc = inner->mark(d, &t->from);
	if (!rc)
		rc = inner->gemm(d, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_f32);
	if (!rc)
		rc = inner->mark(d, &t->to);
	return rc;
}

static int t_gemm_sb(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                     int64_t sb, float beta, void *c, int64_t ldc, int64_t sc, int64_t batch,
                     bool ab_f32, bool c_f32)
{
	tcall *t = next_call();
	snprintf(t->what, sizeof t->what, "GEMM %lldx(%lldx%lldx%lld)%s%s%s%s", (long long)batch,
	         (long long)m, (long long)n, (long long)k, ta ? " A^T" : "", tb ? " B^T" : "",
	         ab_f32 ? " A,B f32" : "", c_f32 ? " C f32" : "");
	t->flops = 2.0 * (double)batch * (double)m * (double)n * (double)k;
	int rc = inner->mark(d, &t->from);
	if (!rc)
		rc = inner->gemm_sb(d, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
		                    batch, ab_f32, c_f32);
	if (!rc)
		rc = inner->mark(d, &t->to);
	return rc;
}

static int t_launch(rt_dev *d, int mod, const char *fn, unsigned grid, unsigned block, void **args)
{
	tcall *t = next_call();
	snprintf(t->what, sizeof t->what, "%s <<<%u, %u>>>", fn, grid, block);
	int rc = inner->mark(d, &t->from);
	if (!rc)
		rc = inner->launch(d, mod, fn, grid, block, args);
	if (!rc)
		rc = inner->mark(d, &t->to);
	return rc;
}

/* The attention core through the device's library (OCTO_ATTN=cudnn),
 * timed as one call with its rate: FLOPs 4 s d per (head, visible pair) in
 * F (QK^T and PV, d the mean of dqk and dv) and 10 in B (FlashAttention-2's
 * five products), over the whole causal triangle (a window's pairs are
 * fewer: the rate is then an upper bound). */
static tcall *lib_call(const char *phase, const dev_attn_core *c, double per)
{
	tcall *t = next_call();
	snprintf(t->what, sizeof t->what, "library attention %s %lldx%lld heads %lld/%lld", phase,
	         (long long)c->mbs, (long long)c->seq, (long long)c->nh, (long long)c->nkv);
	double pairs = (double)c->seq * (double)(c->seq + 1) / 2;
	t->flops = per * (double)c->mbs * (double)c->nh * pairs * (double)(c->dqk + c->dv) / 2;
	t->lib = true;
	return t;
}

static int t_attn_f(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
                    const void *v, void *o, float *lse)
{
	tcall *t = lib_call("F", c, 4);
	int rc = inner->mark(d, &t->from);
	if (!rc)
		rc = inner->attn_f(d, c, q, k, v, o, lse);
	if (!rc)
		rc = inner->mark(d, &t->to);
	return rc;
}

static int t_attn_b(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
                    const void *v, const void *o, const void *dout, const float *lse,
                    float *dsum, void *dq, void *dk, void *dv)
{
	tcall *t = lib_call("B", c, 10);
	int rc = inner->mark(d, &t->from);
	if (!rc)
		rc = inner->attn_b(d, c, q, k, v, o, dout, lse, dsum, dq, dk, dv);
	if (!rc)
		rc = inner->mark(d, &t->to);
	return rc;
}

/* F, B and W of c's layer, once to warm up, then each call timed:
 *   call LAYER PHASE MS [TFLOP/s] WHAT
 *   phase LAYER PHASE span MS, gemms MS (N, TFLOP/s), kernels MS (N)
 * (span: from the phase's first mark to its last, launch gaps included). */
static int time_case(const tcase *c, bool bf16)
{
	const rt_layer_desc *d = &c->d;
	arena *a = arena_new();
	rt_sizes cs, ds;
	if (rt_layer_sizes(d, &cs) || dev_layer_sizes(d, bf16, &ds)) {
		printf("%s: FAIL: no sizes for this layer\n", c->what);
		arena_free(a);
		return 1;
	}
	const int64_t T = d->seq * d->mbs, H = d->hidden, P = cs.params;
	rng = 0x74696d65u;
	rt_dev *dev = make_device(d, bf16, a);
	if (!dev->ops->mark) {
		fprintf(stderr, "dev_check: error: device '%s' has no timing marks\n", dev->ops->name);
		exit(2);
	}
	size_t esz = dev_esz(dev), act_b = (size_t)(T * H) * esz;
	dev_layer L;
	DEV(dev_layer_setup(&L, d), "layer setup");
	float *params = noise(P, 0.02f), *x = noise(T * H, 1.f);
	void *hp = to_real(params, P, bf16), *hx = to_real(x, T * H, bf16);
	L.mod = 0;
	DEV(dev_layer_prepare(dev, &L), "the layer's library calls");
	L.p = dput(dev, hp, (size_t)P * esz);
	L.g = dalloc(dev, (size_t)P * sizeof(float));
	DEV(dev->ops->zero(dev, L.g, (size_t)P * sizeof(float)), "zeroing");
	free(params), free(hp);
	dev_io io = {.dscale = 1.f / (float)T};
	io.x = dput(dev, hx, act_b);
	io.dy = dput(dev, hx, act_b);
	io.y = dalloc(dev, act_b);
	io.dx = dalloc(dev, act_b);
	io.act = dalloc(dev, (size_t)ds.act);
	io.ws = dalloc(dev, (size_t)ds.wstash);
	io.scratch = dalloc(dev, (size_t)ds.scratch);
	free(x), free(hx);
	static const char *const phase[] = {"F", "B", "W"};
	int (*const run[])(rt_dev *, const dev_layer *, const dev_io *) = {dev_forward, dev_backward_b,
	                                                                   dev_backward_w};
	for (int p = 0; p < 3; p++)
		DEV(run[p](dev, &L, &io), phase[p]);
	DEV(dev->ops->sync(dev), "device sync");

	/* The backend's table under one that marks around each call. */
	dev_ops timed = *dev->ops;
	inner = dev->ops;
	timed.gemm = t_gemm;
	timed.gemm_sb = t_gemm_sb;
	timed.launch = t_launch;
	if (inner->attn_f) {
		timed.attn_f = t_attn_f;
		timed.attn_b = t_attn_b;
	}
	dev->ops = &timed;
	double total = 0;
	for (int p = 0; p < 3; p++) {
		ncalls = 0;
		DEV(run[p](dev, &L, &io), phase[p]);
		double gemm_ms = 0, kern_ms = 0, flops = 0, span = 0;
		int ng = 0, nk = 0;
		for (int i = 0; i < ncalls; i++) {
			tcall *t = &calls[i];
			double ms = 0;
			DEV(inner->elapsed(dev, t->from, t->to, &ms), "timing");
			char rate[32] = "";
			if (t->flops)
				snprintf(rate, sizeof rate, " %.1f TFLOP/s", t->flops / (ms * 1e9));
			if (t->flops && !t->lib) {
				gemm_ms += ms, flops += t->flops, ng++;
			} else {
				kern_ms += ms, nk++;
			}
			printf("call %s %s %.3f ms%s %s\n", c->what, phase[p], ms, rate, t->what);
		}
		if (ncalls)
			DEV(inner->elapsed(dev, calls[0].from, calls[ncalls - 1].to, &span), "timing");
		for (int i = 0; i < ncalls; i++) {
			inner->unmark(dev, calls[i].from);
			inner->unmark(dev, calls[i].to);
		}
		printf("phase %s %s span %.3f ms, gemms %.3f ms (%d, %.1f TFLOP/s), kernels %.3f ms (%d)\n",
		       c->what, phase[p], span, gemm_ms, ng, gemm_ms > 0 ? flops / (gemm_ms * 1e9) : 0.0,
		       kern_ms, nk);
		fflush(stdout);
		total += span;
	}
	printf("layer %s F+B+W %.3f ms\n", c->what, total);
	dev->ops = inner;
	dev->ops->destroy(dev);
	arena_free(a);
	return 0;
}

/* Whether a KIND of the command line named `kind` (want[]: the cases it
 * picked). */
static bool kind_wanted(const bool *want, const char *kind)
{
	for (int k = 0; k < NCASES; k++)
		if (want[k] && strcmp(cases[k].kind, kind) == 0)
			return true;
	return false;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: dev_check [--bf16] [--device emu|cuda] [--gpu-arch sm_XX] [--gpu-launch] "
	           "[--modules DIR] [--quick] [--lib-attn] [--time [--small]] [KIND ...]\n"
	           "  KIND: emb head attn mlp moe mamba par optim (default: all)\n"
	           "  --modules DIR: the emulator's compiled modules kept in DIR, and reused from it\n"
	           "  --time: no check; every launch and GEMM of F, B, W timed on real layers (Llama-3-8B\n"
	           "  attention and MLP, Nemotron-H-8B Mamba-2 and MLP, seq 4096; --small: small shapes)\n"
	           "  --gpu-launch: the emulator launches as the GPU does (256-thread blocks, up to\n"
	           "  8192 of them) instead of its own 32-thread blocks\n"
	           "  --quick: the first case of each kind only (the sanitizer build's GPU-launch run)\n"
	           "  --lib-attn: (emulator) the attention cores through the device's library path, a\n"
	           "  stand-in computing them on the host (what cuDNN's takes on a GPU)\n"
	           "  compares the device executor's F, B, W with the CPU kernels on random inputs;\n"
	           "  thresholds: 1e-5 (f32) and 2e-2 (bf16) relative to the largest CPU value\n");
}

int main(int argc, char **argv)
{
	bool bf16 = false, want[NCASES] = {0}, any = false, optim = false, timing = false, small = false;
	bool quick = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--bf16") == 0) {
			bf16 = true;
		} else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
			device_kind = argv[++i];
		} else if (strcmp(argv[i], "--gpu-arch") == 0 && i + 1 < argc) {
			gpu_arch = argv[++i];
		} else if (strcmp(argv[i], "--time") == 0) {
			timing = true;
		} else if (strcmp(argv[i], "--small") == 0) {
			small = true;
		} else if (strcmp(argv[i], "--modules") == 0 && i + 1 < argc) {
			modules = argv[++i];
		} else if (strcmp(argv[i], "--gpu-launch") == 0) {
			gpu_launch = true;
		} else if (strcmp(argv[i], "--quick") == 0) {
			quick = true;
		} else if (strcmp(argv[i], "--lib-attn") == 0) {
			lib_attn = true;
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "optim") == 0) {
			optim = any = true;
		} else {
			bool found = false;
			for (int k = 0; k < NCASES; k++)
				if (strcmp(cases[k].kind, argv[i]) == 0)
					want[k] = found = any = true;
			if (!found) {
				fprintf(stderr, "dev_check: error: unknown argument '%s'\n", argv[i]);
				usage(stderr);
				return 2;
			}
		}
	}
	if (modules) {
		if (snprintf(workdir, sizeof workdir, "%s", modules) >= (int)sizeof workdir) {
			fprintf(stderr, "dev_check: error: --modules %s: path too long\n", modules);
			return 2;
		}
	} else {
		snprintf(workdir, sizeof workdir, "%s/dev_check.XXXXXX",
		         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		if (!mkdtemp(workdir)) {
			perror("dev_check: mkdtemp");
			return 2;
		}
	}
	int bad = 0;
	if (timing) {
		const tcase *tl = small ? timed_small : timed_real;
		for (size_t k = 0; k < sizeof timed_real / sizeof *timed_real; k++)
			if (!any || kind_wanted(want, tl[k].kind))
				bad |= time_case(&tl[k], bf16);
	} else {
		for (int k = 0; k < NCASES; k++) {
			bool first = true; /* the kind's first case, which --quick runs alone */
			for (int j = 0; j < k; j++)
				first &= strcmp(cases[j].kind, cases[k].kind) != 0;
			if ((!any || want[k]) && (!quick || first))
				bad |= run_case(&cases[k], bf16);
		}
		if (!any || optim)
			bad |= run_optim(bf16);
	}
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
	if (!modules && system(cmd) != 0)
		fprintf(stderr, "dev_check: warning: could not remove %s\n", workdir);
	if (lib_attn) {
		if (strcmp(device_kind, "emu") != 0) {
			fprintf(stderr, "dev_check: error: --lib-attn is the emulator's (on a GPU: OCTO_ATTN=cudnn)\n");
			return 2;
		}
		printf("attention cores through the library path: %d\n", lib_cores);
		bad |= lib_cores == 0;
	}
	printf("%s\n", bad ? "dev_check: FAIL" : "dev_check: every output within its threshold");
	return bad;
}
