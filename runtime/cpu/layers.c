/* layers.c: the element-type-independent half of the CPU kernels: it
 * validates descriptors (filling defaults into an rt_shape), lays out each
 * kind's parameters in one flat array, gives every parameter its initial
 * value from a counter-based hash of (seed, layer, element), and counts
 * FLOPs.  Both kernel builds (f32, f64) read these, so the two agree on
 * layout and init by construction. */
#include <math.h>
#include <stddef.h>

#include "layers.h"

#define LIM ((int64_t)1 << 24)   /* any one attribute or model size */
#define LIM_LD ((int64_t)1 << 30) /* any derived row length (a BLAS int) */

const char *rt_strerror(int code)
{
	switch (code) {
#define RT_CODE_CASE(name, value, message) \
	case name: return message;
		RT_CODES(RT_CODE_CASE)
#undef RT_CODE_CASE
	default: return "unknown error";
	}
}

const char *rt__kind_name(rt_kind k)
{
	static const char *const names[RT_NKINDS] = {
#define RT_KIND_NAME(kind, name) [kind] = name,
	    RT_KINDS(RT_KIND_NAME)
#undef RT_KIND_NAME
	};
	return (unsigned)k < RT_NKINDS ? names[k] : "?";
}

static bool in(int64_t v, int64_t lo, int64_t hi)
{
	return v >= lo && v <= hi;
}

static int64_t or_default(int64_t v, int64_t dflt)
{
	return v ? v : dflt;
}

static bool finite_pos(double v)
{
	return v > 0 && isfinite(v);
}

/* YaRN's magnitude correction at a scale factor (get_mscale of Hugging
 * Face's rope utils and DeepSeek's yarn_get_mscale). */
static double yarn_mscale(double factor, double m)
{
	return factor <= 1 ? 1 : 0.1 * m * log(factor) + 1;
}

/* rope_scaling and its fields (docs/layers.md, "RoPE scaling"): the
 * type's in range, the others 0; s->theta is set. */
static int shape_rope(const rt_layer_desc *d, rt_shape *s)
{
	int64_t t = d->rope_scaling;
	if (!in(t, 0, RT_NROPES - 1))
		return RT_EINVAL;
	bool l3 = t == RT_ROPE_LLAMA3, yarn = t == RT_ROPE_YARN;
	if ((t == RT_ROPE_NONE && d->rope_factor != 0) ||
	    (!l3 && (d->rope_low_freq_factor != 0 || d->rope_high_freq_factor != 0)) ||
	    (!l3 && !yarn && d->rope_original_max != 0) ||
	    (!yarn && (d->rope_beta_fast != 0 || d->rope_beta_slow != 0 ||
	               d->rope_attention_factor != 0 || d->rope_mscale != 0 ||
	               d->rope_mscale_all_dim != 0)))
		return RT_EINVAL;
	s->rope_type = (int)t;
	s->rope_mscale = s->qk_scale = 1;
	if (t == RT_ROPE_NONE)
		return RT_OK;
	if (!(d->rope_factor >= 1 && isfinite(d->rope_factor)))
		return RT_EINVAL;
	s->rope_factor = d->rope_factor;
	if (t == RT_ROPE_LINEAR)
		return RT_OK;
	if (!in(d->rope_original_max, 1, (int64_t)1 << 30))
		return RT_EINVAL;
	s->rope_orig = d->rope_original_max;
	if (l3) {
		s->rope_lo = d->rope_low_freq_factor;
		s->rope_hi = d->rope_high_freq_factor;
		return finite_pos(s->rope_lo) && finite_pos(s->rope_hi) && s->rope_hi > s->rope_lo
		           ? RT_OK : RT_EINVAL;
	}
	double af = d->rope_attention_factor, ms = d->rope_mscale, all = d->rope_mscale_all_dim;
	s->rope_fast = d->rope_beta_fast != 0 ? d->rope_beta_fast : 32;
	s->rope_slow = d->rope_beta_slow != 0 ? d->rope_beta_slow : 1;
	if (!finite_pos(s->rope_fast) || !finite_pos(s->rope_slow) || !(s->rope_fast > s->rope_slow) ||
	    (af != 0 && !finite_pos(af)) || (ms != 0 && !finite_pos(ms)) ||
	    (all != 0 && !finite_pos(all)) || (ms != 0 && all == 0) || !(s->theta > 1))
		return RT_EINVAL;
	double f = s->rope_factor;
	s->rope_mscale = af != 0 ? af : ms != 0 ? yarn_mscale(f, ms) / yarn_mscale(f, all)
	                                        : yarn_mscale(f, 1);
	if (all != 0)
		s->qk_scale = yarn_mscale(f, all) * yarn_mscale(f, all);
	return RT_OK;
}

double rt__rope_freq(const rt_shape *s, int64_t i)
{
	double L = (double)s->rope_len, inv = pow(s->theta, -2.0 * (double)i / L);
	double f = s->rope_factor, orig = (double)s->rope_orig;
	switch (s->rope_type) {
	case RT_ROPE_LINEAR:
		return inv / f;
	case RT_ROPE_LLAMA3: {
		/* Wavelengths below orig / high_freq_factor keep their frequency,
		 * those above orig / low_freq_factor are divided by the factor, and
		 * a smooth ramp joins the two. */
		double wavelen = 2 * M_PI / inv;
		if (wavelen < orig / s->rope_hi)
			return inv;
		if (wavelen > orig / s->rope_lo)
			return inv / f;
		double smooth = (orig / wavelen - s->rope_lo) / (s->rope_hi - s->rope_lo);
		return (1 - smooth) * inv / f + smooth * inv;
	}
	case RT_ROPE_YARN: {
		/* The pairs that turn fewer than beta_slow times over the original
		 * context are interpolated (divided by the factor), those that turn
		 * more than beta_fast times are kept, with a linear ramp between. */
		double lo = floor(L * log(orig / (s->rope_fast * 2 * M_PI)) / (2 * log(s->theta)));
		double hi = ceil(L * log(orig / (s->rope_slow * 2 * M_PI)) / (2 * log(s->theta)));
		lo = lo > 0 ? lo : 0;
		hi = hi < L - 1 ? hi : L - 1;
		if (lo == hi)
			hi += 0.001;
		double ramp = ((double)i - lo) / (hi - lo);
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		double extra = 1 - ramp;
		return inv / f * (1 - extra) + inv * extra;
	}
	default:
		return inv;
	}
}

static int shape_attention(const rt_layer_desc *d, rt_shape *s)
{
	s->nh = d->heads;
	if (!in(s->nh, 1, LIM) || !in(d->kv_heads, 0, LIM) || !in(d->head_dim, 0, LIM) ||
	    !in(d->window, 0, (int64_t)1 << 30))
		return RT_EINVAL;
	s->win = d->window;
	/* rope_theta: 0 is the default; anything else finite and > 0. */
	if (d->rope_theta != 0 && !(d->rope_theta > 0 && isfinite(d->rope_theta)))
		return RT_EINVAL;
	s->theta = d->rope_theta != 0 ? d->rope_theta : RT_ROPE_THETA;
	if (!in(d->qkv_bias, 0, 1) || !in(d->qk_norm, 0, 1))
		return RT_EINVAL;
	s->qkb = d->qkv_bias != 0;
	s->qkn = d->qk_norm != 0;
	if (!d->head_dim && s->H % s->nh)
		return RT_EINVAL;
	int64_t hd = or_default(d->head_dim, s->H / s->nh);
	s->mla = d->kv_lora_rank != 0;
	if (!s->mla) {
		if (d->q_lora_rank || d->qk_rope_dim || d->v_head_dim)
			return RT_EINVAL;
		s->nkv = or_default(d->kv_heads, s->nh);
		if (s->nh % s->nkv)
			return RT_EINVAL;
		s->dqk = s->dv = hd;
		s->rope_off = 0;
		s->rope_len = hd;
	} else {
		/* MLA: keys and values are per head (kv_heads does not apply). */
		if (!in(d->kv_lora_rank, 1, LIM) || !in(d->qk_rope_dim, 1, LIM) ||
		    !in(d->q_lora_rank, 0, LIM) || !in(d->v_head_dim, 0, LIM) || s->qkb || s->qkn)
			return RT_EINVAL;
		s->nkv = s->nh;
		s->dn = hd;
		s->dr = d->qk_rope_dim;
		s->rq = d->q_lora_rank;
		s->rkv = d->kv_lora_rank;
		s->dqk = s->dn + s->dr;
		s->dv = or_default(d->v_head_dim, hd);
		s->rope_off = s->dn;
		s->rope_len = s->dr;
	}
	if (s->nh * s->dqk > LIM_LD || s->nh * (s->dn + s->dv) > LIM_LD || s->nh * s->dv > LIM_LD)
		return RT_EINVAL;
	return shape_rope(d, s);
}

static int shape_ffn(const rt_layer_desc *d, rt_shape *s)
{
	if (!in((int64_t)d->act, 0, RT_NACTS - 1))
		return RT_EINVAL;
	s->act = d->act;
	s->gated = d->act == RT_SWIGLU || d->act == RT_GEGLU;
	if (s->kind == RT_MLP) {
		s->F = d->ffn;
		return in(s->F, 1, LIM) ? RT_OK : RT_EINVAL;
	}
	s->E = d->experts;
	s->K = d->top_k;
	s->F = d->expert_ffn;
	if (!in(s->E, 1, (int64_t)1 << 16) || !in(s->K, 1, s->E) || !in(s->F, 1, LIM) ||
	    !in(d->shared_experts, 0, (int64_t)1 << 16) || !in(d->shared_gate, 0, 1) ||
	    (d->shared_gate && !d->shared_experts))
		return RT_EINVAL;
	s->SF = d->shared_experts * s->F;
	s->sgate = d->shared_gate != 0;
	if (s->SF > LIM_LD || s->T * s->K > LIM_LD || s->E * s->H * s->F > ((int64_t)1 << 40))
		return RT_EINVAL;
	return RT_OK;
}

/* heads, head_dim: the mixer's (mamba's own, or a parallel layer's ssm_). */
static int shape_mamba(const rt_layer_desc *d, int64_t heads, int64_t head_dim, rt_shape *s)
{
	s->ver = (int)or_default(d->version, 2);
	int64_t expand = or_default(d->expand, 2);
	s->N = d->state;
	s->Kc = or_default(d->conv, 4);
	if ((s->ver != 1 && s->ver != 2) || !in(expand, 1, 64) || !in(s->N, 1, (int64_t)1 << 16) ||
	    !in(s->Kc, 1, 1024))
		return RT_EINVAL;
	s->di = expand * s->H;
	if (s->ver == 2) {
		if (d->dt_rank || !in(heads, 0, LIM) || !in(head_dim, 0, LIM) || !in(d->groups, 0, LIM))
			return RT_EINVAL;
		s->P = or_default(head_dim, heads ? s->di / heads : 64);
		s->mh = or_default(heads, s->di / s->P);
		s->G = or_default(d->groups, 1);
		if (s->P < 1 || s->mh * s->P != s->di || s->mh % s->G)
			return RT_EINVAL;
		s->cd = s->di + 2 * s->G * s->N;
		s->dip = s->di + s->cd + s->mh;
	} else {
		if (d->heads || d->head_dim || d->groups || !in(d->dt_rank, 0, LIM))
			return RT_EINVAL;
		/* Mamba-1 is the scan with one channel per head and one group. */
		s->R = or_default(d->dt_rank, (s->H + 15) / 16);
		s->mh = s->di;
		s->P = 1;
		s->G = 1;
		s->cd = s->di;
		s->dip = 2 * s->di;
	}
	if (s->dip > LIM_LD || s->mh * s->N > LIM_LD || s->R + 2 * s->N > LIM_LD)
		return RT_EINVAL;
	s->nck = (s->S + RT_SCAN_CHUNK - 1) / RT_SCAN_CHUNK;
	s->nq = (s->S + RT_SSD_CHUNK - 1) / RT_SSD_CHUNK;
	s->sel = d->selective == 1;
	return RT_OK;
}

int rt__shape(const rt_layer_desc *d, rt_shape *s)
{
	if (!d)
		return RT_EARG;
	*s = (rt_shape){.kind = d->kind, .H = d->hidden, .S = d->seq, .nb = d->mbs, .V = d->vocab,
	                .tied = d->tied == 1 && d->kind == RT_HEAD};
	if (!in((int64_t)d->kind, 0, RT_NKINDS - 1) || !in(s->H, 1, LIM) || !in(s->S, 1, LIM) ||
	    (d->kind != RT_PARALLEL && (d->ssm_heads || d->ssm_head_dim)) ||
	    !in(s->nb, 1, LIM) || s->S * s->nb > LIM_LD || !in(d->selective, 0, 1) ||
	    !in(d->tied, 0, (d->kind == RT_EMBEDDING || d->kind == RT_HEAD) ? 1 : 0))
		return RT_EINVAL;
	s->T = s->S * s->nb;
	switch (d->kind) {
	case RT_EMBEDDING:
	case RT_HEAD:
		return in(s->V, 1, LIM) ? RT_OK : RT_EINVAL;
	case RT_ATTENTION:
		return shape_attention(d, s);
	case RT_MLP:
	case RT_MOE:
		return shape_ffn(d, s);
	case RT_MAMBA:
		return shape_mamba(d, d->heads, d->head_dim, s);
	case RT_PARALLEL: {
		/* Attention (GQA: MLA's latents are not a parallel layer's) beside a
		 * Mamba-2 mixer. */
		if (d->kv_lora_rank || or_default(d->version, 2) != 2)
			return RT_EINVAL;
		int rc = shape_attention(d, s);
		return rc ? rc : shape_mamba(d, d->ssm_heads, d->ssm_head_dim, s);
	}
	default:
		return RT_EINVAL;
	}
}

int rt_layer_check(const rt_layer_desc *d)
{
	rt_shape s;
	return rt__shape(d, &s);
}

/* ---- parameter layout ------------------------------------------------- */

/* Every tensor's weight decay is stated here, where the tensor is declared:
 * the optimizer of both executors reads it (rt__decays), and docs/layers.md
 * lists it (checked by unit_kernels).  Projections decay; norm scales,
 * biases and the SSM's A_log, D and dt_bias do not, whatever their shape. */
enum { KEEP, DECAY };

static void put(rt_tensor *t, const char *name, rt_init_rule init, int decay, int ndim, int64_t a,
                int64_t b, int64_t c)
{
	*t = (rt_tensor){.name = name, .ndim = ndim, .dim = {a, b, c}, .init = init,
	                 .decay = decay == DECAY};
	t->size = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
}

#define MAT(name, rows, cols) put(t, name, INIT_NORMAL, DECAY, 2, rows, cols, 0)
#define VEC(name, n, init) put(t, name, init, KEEP, 1, n, 0, 0)
#define EXPERTS(name, e, rows, cols) put(t, name, INIT_NORMAL, DECAY, 3, e, rows, cols)

static void tensors_attention(const rt_shape *s, rt_tensor *tt)
{
	rt_tensor *t;
	int64_t q = s->nh * s->dqk;
	bool fullq = !s->mla || !s->rq;
	t = &tt[AT_NORM], VEC("norm", s->H, INIT_ONES);
	int64_t k = s->nkv * s->dqk, v = s->nkv * s->dv;
	t = &tt[AT_WQ], MAT("wq", fullq ? s->H : 0, q);
	t = &tt[AT_BQ], VEC("bq", s->qkb ? q : 0, INIT_ZEROS);
	t = &tt[AT_WDQ], MAT("wq_a", fullq ? 0 : s->H, s->rq);
	t = &tt[AT_QNORM], VEC("q_norm", fullq ? 0 : s->rq, INIT_ONES);
	t = &tt[AT_WUQ], MAT("wq_b", fullq ? 0 : s->rq, q);
	t = &tt[AT_WK], MAT("wk", s->mla ? 0 : s->H, k);
	t = &tt[AT_BK], VEC("bk", s->qkb ? k : 0, INIT_ZEROS);
	t = &tt[AT_WV], MAT("wv", s->mla ? 0 : s->H, v);
	t = &tt[AT_BV], VEC("bv", s->qkb ? v : 0, INIT_ZEROS);
	t = &tt[AT_QHNORM], VEC("q_head_norm", s->qkn ? s->dqk : 0, INIT_ONES);
	t = &tt[AT_KHNORM], VEC("k_head_norm", s->qkn ? s->dqk : 0, INIT_ONES);
	t = &tt[AT_WDKV], MAT("wkv_a", s->mla ? s->H : 0, s->rkv + s->dr);
	t = &tt[AT_KVNORM], VEC("kv_norm", s->mla ? s->rkv : 0, INIT_ONES);
	t = &tt[AT_WUKV], MAT("wkv_b", s->mla ? s->rkv : 0, s->nh * (s->dn + s->dv));
	t = &tt[AT_WO], MAT("wo", s->nh * s->dv, s->H);
}

/* norm: the mixer's own pre-norm (a parallel layer's is the attention's). */
static void tensors_mamba(const rt_shape *s, rt_tensor *tt, bool norm)
{
	rt_tensor *t;
	bool v1 = s->ver == 1;
	t = &tt[MB_NORM], VEC("norm", norm ? s->H : 0, INIT_ONES);
	t = &tt[MB_WIN], MAT("in_proj", s->H, s->dip);
	t = &tt[MB_CONVW], put(t, "conv_w", INIT_CONV, DECAY, 2, s->cd, s->Kc, 0);
	t = &tt[MB_CONVB], VEC("conv_b", s->cd, INIT_ZEROS);
	t = &tt[MB_XPROJ], MAT("x_proj", v1 ? s->di : 0, s->R + 2 * s->N);
	t = &tt[MB_DTPROJ], MAT("dt_proj", v1 ? s->R : 0, s->di);
	t = &tt[MB_DTBIAS], VEC("dt_bias", s->mh, INIT_DT_BIAS);
	if (v1)
		t = &tt[MB_ALOG], put(t, "A_log", INIT_ALOG_N, KEEP, 2, s->di, s->N, 0);
	else
		t = &tt[MB_ALOG], VEC("A_log", s->mh, INIT_ALOG_U);
	t = &tt[MB_D], VEC("D", s->mh, INIT_ONES);
	t = &tt[MB_GNORM], VEC("norm_gated", v1 ? 0 : s->di, INIT_ONES);
	t = &tt[MB_WOUT], MAT("out_proj", s->di, s->H);
}

int64_t rt__tensors(const rt_shape *s, rt_tensor *tt, int *n)
{
	rt_tensor *t;
	int nt = 0;
	switch (s->kind) {
	case RT_EMBEDDING:
		nt = EMB_N;
		t = &tt[EMB_TABLE], put(t, "table", INIT_EMBED, DECAY, 2, s->V, s->H, 0);
		break;
	case RT_HEAD:
		nt = HD_N;
		t = &tt[HD_NORM], VEC("norm", s->H, INIT_ONES);
		if (s->tied) /* the embedding's table, as the embedding lays it out */
			t = &tt[HD_W], put(t, "table", INIT_TIED, DECAY, 2, s->V, s->H, 0);
		else
			t = &tt[HD_W], MAT("w", s->H, s->V);
		break;
	case RT_ATTENTION:
		nt = AT_N;
		tensors_attention(s, tt);
		break;
	case RT_MLP:
		nt = FF_N;
		t = &tt[FF_NORM], VEC("norm", s->H, INIT_ONES);
		t = &tt[FF_W1], MAT(s->gated ? "w_gate" : "w_up", s->H, s->F);
		t = &tt[FF_WU], MAT("w_up", s->gated ? s->H : 0, s->F);
		t = &tt[FF_WD], MAT("w_down", s->F, s->H);
		break;
	case RT_MOE:
		nt = MOE_N;
		t = &tt[MOE_NORM], VEC("norm", s->H, INIT_ONES);
		t = &tt[MOE_ROUTER], MAT("router", s->H, s->E);
		t = &tt[MOE_W1], EXPERTS(s->gated ? "experts.w_gate" : "experts.w_up", s->E, s->H, s->F);
		t = &tt[MOE_WU], EXPERTS("experts.w_up", s->gated ? s->E : 0, s->H, s->F);
		t = &tt[MOE_WD], EXPERTS("experts.w_down", s->E, s->F, s->H);
		t = &tt[MOE_SW1], MAT(s->gated ? "shared.w_gate" : "shared.w_up", s->SF ? s->H : 0, s->SF);
		t = &tt[MOE_SWU], MAT("shared.w_up", s->SF && s->gated ? s->H : 0, s->SF);
		t = &tt[MOE_SWD], MAT("shared.w_down", s->SF, s->SF ? s->H : 0);
		/* Qwen2-MoE's shared_expert_gate, nn.Linear(hidden, 1): decays. */
		t = &tt[MOE_SGATE], MAT("shared.gate", s->sgate ? s->H : 0, 1);
		break;
	case RT_MAMBA:
		nt = MB_N;
		tensors_mamba(s, tt, true);
		break;
	case RT_PARALLEL:
		nt = PAR_N;
		tensors_attention(s, tt);
		tensors_mamba(s, tt + PAR_MB, false);
		break;
	default:
		*n = 0;
		return 0;
	}
	int64_t off = 0;
	for (int i = 0; i < nt; i++) {
		tt[i].offset = off;
		off += tt[i].size;
	}
	*n = nt;
	return off;
}

int rt_layer_ntensors(const rt_layer_desc *d, int *n)
{
	rt_shape s;
	rt_tensor t[RT_MAX_TENSORS];
	int rc = rt__shape(d, &s), nt;
	if (rc)
		return rc;
	if (!n)
		return RT_EARG;
	rt__tensors(&s, t, &nt);
	*n = 0;
	for (int i = 0; i < nt; i++)
		*n += t[i].size > 0;
	return RT_OK;
}

int rt_layer_tensor(const rt_layer_desc *d, int i, rt_tensor_info *out)
{
	rt_shape s;
	rt_tensor t[RT_MAX_TENSORS];
	int rc = rt__shape(d, &s), nt;
	if (rc)
		return rc;
	if (!out || i < 0)
		return RT_EARG;
	rt__tensors(&s, t, &nt);
	for (int k = 0; k < nt; k++) {
		if (!t[k].size)
			continue;
		if (i-- == 0) {
			*out = (rt_tensor_info){.name = t[k].name, .offset = t[k].offset,
			                        .ndim = t[k].ndim,
			                        .dim = {t[k].dim[0], t[k].dim[1], t[k].dim[2]},
			                        .decay = t[k].decay};
			return RT_OK;
		}
	}
	return RT_EARG;
}

/* ---- init ------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 bits, draw j of element i. */
static double unif(uint64_t key, int64_t i, int j)
{
	return (double)(mix64(key ^ mix64((uint64_t)i * 4 + (uint64_t)j)) >> 11) * 0x1p-53;
}

double rt__init_value(const rt_tensor *t, uint64_t seed, int64_t layer, int64_t i)
{
	uint64_t key = mix64(mix64(seed) ^ (uint64_t)layer);
	int64_t g = t->offset + i; /* the element's index in the layer's array */
	if (t->init == INIT_TIED) /* layer 0's table, which starts its array */
		key = mix64(mix64(seed)), g = i;
	switch (t->init) {
	case INIT_ONES:
		return 1;
	case INIT_ZEROS:
		return 0;
	case INIT_NORMAL:
	case INIT_CONV:
	case INIT_EMBED:
	case INIT_TIED: {
		/* Irwin-Hall: four uniforms, centred and scaled to unit variance.
		 * Plain arithmetic, so every libm gives the same bits. */
		double z = (unif(key, g, 0) + unif(key, g, 1) + unif(key, g, 2) + unif(key, g, 3) - 2) *
		           1.7320508075688772;
		if (t->init == INIT_EMBED || t->init == INIT_TIED)
			return z;
		int64_t fan = t->init == INIT_CONV ? t->dim[1] : t->dim[t->ndim - 2];
		return z / sqrt((double)fan);
	}
	case INIT_DT_BIAS: {
		double dt = exp(log(1e-3) + unif(key, g, 0) * (log(1e-1) - log(1e-3)));
		return dt + log(-expm1(-dt));
	}
	case INIT_ALOG_U:
		return log(1 + 15 * unif(key, g, 0));
	case INIT_ALOG_N:
		return log((double)(i % t->dim[1] + 1));
	}
	return 0;
}

/* ---- FLOPs ------------------------------------------------------------ */

/* Adds one pass of the projections to *proj and the core's F, B (and W)
 * to *fx, *bx (*wx): the attention's and the Mamba mixer's, each kind's
 * and a parallel layer's sums. */
static void flops_attention(const rt_shape *s, double *proj, double *fx, double *bx)
{
	double T = (double)s->T, H = (double)s->H;
	double q = (double)(s->nh * s->dqk);
	if (!s->mla) {
		*proj += 2 * T * H * (q + (double)(s->nkv * (s->dqk + s->dv)));
	} else {
		*proj += s->rq ? 2 * T * (double)s->rq * (H + q) : 2 * T * H * q;
		*proj += 2 * T * H * (double)(s->rkv + s->dr) +
		        2 * T * (double)(s->rkv * s->nh * (s->dn + s->dv));
	}
	*proj += 2 * T * (double)(s->nh * s->dv) * H;
	double pairs = 0;
	for (int64_t i = 0; i < s->S; i++)
		pairs += (double)(s->win && s->win < i + 1 ? s->win : i + 1);
	double c = (double)(s->nb * s->nh) * pairs * 2;
	*fx += c * (double)(s->dqk + s->dv);
	*bx += c * (double)(3 * s->dqk + 2 * s->dv);
}

static void flops_mamba(const rt_shape *s, double *proj, double *fx, double *bx, double *wx)
{
	double T = (double)s->T, H = (double)s->H;
	double scan = T * (double)(s->mh * s->P * s->N), conv = 2 * T * (double)(s->cd * s->Kc);
	*proj += 2 * T * H * (double)s->dip + 2 * T * (double)s->di * H;
	if (s->ver == 1)
		*proj += 2 * T * (double)(s->di * (s->R + 2 * s->N)) + 2 * T * (double)(s->R * s->di);
	*fx += conv + 5 * scan;
	*bx += conv + 15 * scan;
	*wx += conv;
}

int rt_layer_flops(const rt_layer_desc *d, double *f, double *b, double *w)
{
	rt_shape s;
	int rc = rt__shape(d, &s);
	if (rc)
		return rc;
	if (!f || !b || !w)
		return RT_EARG;
	double T = (double)s.T, H = (double)s.H;
	double proj = 0, fx = 0, bx = 0, wx = 0; /* proj: one pass of the projections */
	switch (s.kind) {
	case RT_EMBEDDING:
		wx = T * H;
		break;
	case RT_HEAD:
		proj = 2 * T * H * (double)s.V;
		bx = proj; /* B recomputes the logits */
		break;
	case RT_ATTENTION:
		flops_attention(&s, &proj, &fx, &bx);
		break;
	case RT_MLP:
		proj = 2 * T * H * (double)s.F * (s.gated ? 3 : 2);
		break;
	case RT_MOE:
		proj = 2 * T * H * (double)s.E +
		       2 * T * H * (double)(s.K * s.F + s.SF) * (s.gated ? 3 : 2) +
		       (s.sgate ? 2 * T * H : 0); /* the shared experts' gate */
		break;
	case RT_MAMBA:
		flops_mamba(&s, &proj, &fx, &bx, &wx);
		break;
	case RT_PARALLEL: /* the two mixers' sums */
		flops_attention(&s, &proj, &fx, &bx);
		flops_mamba(&s, &proj, &fx, &bx, &wx);
		break;
	default:
		break;
	}
	*f = proj + fx;
	*b = proj + bx;
	*w = proj + wx;
	return RT_OK;
}
