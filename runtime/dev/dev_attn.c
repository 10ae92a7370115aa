/* dev_attn.c: the attention layer on the device (dev.h): GQA / MHA with an
 * optional sliding window, and MLA.  F, B and W follow kernels_attn.inc's
 * attn_fwd, attn_bwd and attn_w step by step (the math of docs/layers.md):
 * the projections are GEMMs, the rest the attention_* entry points of
 * codegen/cuda_kernels.c.
 *
 * The device layout (attn_map; `real` is the storage type, f32 marked):
 *   act:     xhat [T][H], r [T] f32, q [T][nh dqk], k [T][nkv dqk] (both
 *            rotated), v [T][nkv dv], o [T][nh dv], lse [mbs][nh][seq] f32;
 *            MLA: cqhat [T][rq], r_q [T] f32 (rq > 0), ckvhat [T][rkv],
 *            r_kv [T] f32; qk_norm: qhat [T][nh dqk], r_qh [T nh] f32,
 *            khat [T][nkv dqk], r_kh [T nkv] f32;
 *   W stash: xhat, du, dy [T][H], o, dq, dk, dv (shapes of act's); MLA:
 *            cqhat, dcq_n, dcq [T][rq], ckvhat [T][rkv], dkv [T][nh (dn+dv)],
 *            dckv_n [T][rkv], dc [T][rkv+dr]; qk_norm: dq_n, dk_n (the
 *            normed heads' gradients), qhat, khat;
 *   scratch: u [T][H], cq, cq_n [T][rq], c [T][rkv+dr], ckv_n [T][rkv],
 *            kv [T][nh (dn+dv)], d_o [T][nh dv], Dsum [mbs][nh][seq] f32
 *            (D_i = dO_i . o_i, B_q's, which B_kv reads),
 *            rcs, rsn [seq][rope_len/2] f32 (the rotation's table, made in F
 *            and again in B: attention_F_ropetab),
 *            du32 [T][H] f32 (bf16 only, the layer's: B's input projections
 *            summed in f32, rounded once into du; a parallel layer has its
 *            own, which the mixer's in_proj adds to too).
 * B copies into the W stash what W needs from act and from dy, so W reads
 * neither, and dx may be dy.
 *
 * The layer is the pre-norm (dev_common.c) around the mixer (dev_mix.h),
 * which a parallel layer shares with the Mamba mixer (dev_par.c); without
 * its norm (xhat, r, the W stash's xhat, du, dy, the scratch's u) the
 * layout is the mixer's. */
#include <math.h>

#include "dev_mix.h"

/* Row widths of the layer's arrays; the MLA ones are 0 for GQA. */
typedef struct attn_dims {
	int64_t T, H, nh, q, k, v, o, half;
	int64_t qn, kn; /* qk_norm: q and k (0 without) */
	int64_t rq, rkv, c, kv; /* c: the kv latent with the rotary key, rkv + dr */
} attn_dims;

static attn_dims dims(const rt_shape *s)
{
	attn_dims z = {.T = s->T, .H = s->H, .nh = s->nh, .half = s->rope_len / 2};
	z.q = s->nh * s->dqk;
	z.k = s->nkv * s->dqk;
	z.v = s->nkv * s->dv;
	z.o = s->nh * s->dv;
	z.qn = s->qkn ? z.q : 0;
	z.kn = s->qkn ? z.k : 0;
	if (s->mla) {
		z.rq = s->rq;
		z.rkv = s->rkv;
		z.c = s->rkv + s->dr;
		z.kv = s->nh * (s->dn + s->dv);
	}
	return z;
}

/* The three layouts over act, ws and scr (a NULL base only counts).  One
 * statement per array: the carve order is the layout; the pre-norm's
 * arrays only with norm. */
void dev_attn_map(const rt_shape *s, size_t esz, bool norm, dev_carve *ca, dev_attn_act *a,
                  dev_carve *cw, dev_attn_ws *w, dev_carve *cs, dev_attn_scr *x)
{
	attn_dims z = dims(s);
	int64_t T = z.T, nlse = s->nb * s->nh * s->S, Tn = norm ? T : 0;
#define R(c, n) dev_take(c, (size_t)(n) * esz)
#define F(c, n) ((float *)dev_take(c, (size_t)(n) * sizeof(float)))
	a->xhat = R(ca, Tn * z.H);
	a->r = F(ca, Tn);
	a->q = R(ca, T * z.q);
	a->k = R(ca, T * z.k);
	a->v = R(ca, T * z.v);
	a->o = R(ca, T * z.o);
	a->lse = F(ca, nlse);
	a->cqhat = R(ca, T * z.rq);
	a->cqr = F(ca, z.rq ? T : 0);
	a->ckvhat = R(ca, T * z.rkv);
	a->ckvr = F(ca, z.rkv ? T : 0);
	a->qhat = R(ca, T * z.qn);
	a->qr = F(ca, z.qn ? T * s->nh : 0);
	a->khat = R(ca, T * z.kn);
	a->kr = F(ca, z.kn ? T * s->nkv : 0);

	w->xhat = R(cw, Tn * z.H);
	w->du = R(cw, Tn * z.H);
	w->dy = R(cw, Tn * z.H);
	w->o = R(cw, T * z.o);
	w->dq = R(cw, T * z.q);
	w->dk = R(cw, T * z.k);
	w->dv = R(cw, T * z.v);
	w->cqhat = R(cw, T * z.rq);
	w->dcqn = R(cw, T * z.rq);
	w->dcq = R(cw, T * z.rq);
	w->ckvhat = R(cw, T * z.rkv);
	w->dkv = R(cw, T * z.kv);
	w->dckvn = R(cw, T * z.rkv);
	w->dc = R(cw, T * z.c);
	w->dqn = R(cw, T * z.qn);
	w->dkn = R(cw, T * z.kn);
	w->qhat = R(cw, T * z.qn);
	w->khat = R(cw, T * z.kn);

	x->u = R(cs, Tn * z.H);
	x->cq = R(cs, T * z.rq);
	x->cqn = R(cs, T * z.rq);
	x->c = R(cs, T * z.c);
	x->ckvn = R(cs, T * z.rkv);
	x->kv = R(cs, T * z.kv);
	x->d_o = R(cs, T * z.o);
	x->dsum = F(cs, nlse);
	x->rcs = F(cs, s->S * z.half);
	x->rsn = F(cs, s->S * z.half);
	x->du32 = F(cs, esz < sizeof(float) ? Tn * z.H : 0);
#undef R
#undef F
}

static void attn_bufs(const rt_dev *d, const dev_layer *L, const dev_io *io, dev_attn_act *a,
                      dev_attn_ws *w, dev_attn_scr *x)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	dev_attn_map(&L->s, dev_esz(d), true, &ca, a, &cw, w, &cs, x);
}

int dev_attn_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	dev_attn_act a;
	dev_attn_ws w;
	dev_attn_scr x;
	dev_attn_map(s, esz, true, &ca, &a, &cw, &w, &cs, &x);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* The core's launches (cuda_lib.cu, "attention core"): blocks of
 * ATT_THREADS, one per 64 rows of a (sequence, head) -- the queries' heads
 * for F and B_q, the kv heads for B_kv; a module's tiles are 64 rows or
 * fewer, so every block has one, and a block takes tiles grid apart. */
#define ATT_THREADS 128

static unsigned core_grid(const rt_shape *s, int64_t heads)
{
	return (unsigned)(s->nb * heads * ((s->S + 63) / 64));
}

dev_attn_core dev_attn_core_of(const rt_shape *s)
{
	return (dev_attn_core){.mbs = s->nb, .seq = s->S, .nh = s->nh, .nkv = s->nkv, .dqk = s->dqk,
	                       .dv = s->dv, .win = s->win,
	                       .scale = (float)(s->qk_scale / sqrt((double)s->dqk))};
}

/* MLA's F from u to the assembled q, k (not yet rotated) and v. */
static int mla_f(rt_dev *d, const dev_layer *L, const attn_dims *z, dev_attn_act *a,
                 dev_attn_scr *x)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	if (z->rq) {
		DEV_TRY(dev_proj(d, T, H, z->rq, x->u, H, dev_param(d, L, AT_WDQ), 0, x->cq, z->rq));
		DEV_TRY(dev_rows(d, L, "attention_F_qnorm", T,
		                 (void *[]){&x->cq, &gq, &x->cqn, &a->cqhat, &a->cqr}));
		DEV_TRY(dev_proj(d, T, z->rq, z->q, x->cqn, z->rq, dev_param(d, L, AT_WUQ), 0, a->q, z->q));
	} else {
		DEV_TRY(dev_proj(d, T, H, z->q, x->u, H, dev_param(d, L, AT_WQ), 0, a->q, z->q));
	}
	DEV_TRY(dev_proj(d, T, H, z->c, x->u, H, dev_param(d, L, AT_WDKV), 0, x->c, z->c));
	DEV_TRY(dev_rows(d, L, "attention_F_kvnorm", T,
	                 (void *[]){&x->c, &gkv, &x->ckvn, &a->ckvhat, &a->ckvr}));
	DEV_TRY(dev_proj(d, T, z->rkv, z->kv, x->ckvn, z->rkv, dev_param(d, L, AT_WUKV), 0, x->kv,
	                 z->kv));
	/* k_h = [kv_h[:dn], c[rkv:]] (the rotary key shared by the heads), v_h = kv_h[dn:]. */
	return dev_each(d, L, "attention_F_split", T * z->nh, (void *[]){&x->kv, &x->c, &a->k, &a->v});
}

/* The rotation's cos and sin per (position, pair) into the scratch's
 * table, from the module's inverse frequencies as the CPU's rope_tables. */
static int rope_table(rt_dev *d, const dev_layer *L, dev_attn_scr *x)
{
	return dev_each(d, L, "attention_F_ropetab", L->s.S * (L->s.rope_len / 2),
	                (void *[]){&x->rcs, &x->rsn});
}

/* y += o wo, from u = x->u. */
int dev_attn_mix_f(rt_dev *d, const dev_layer *L, dev_attn_act *a, dev_attn_scr *x, void *y)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	int64_t T = z.T, H = z.H;
	if (s->mla) {
		DEV_TRY(mla_f(d, L, &z, a, x));
	} else {
		DEV_TRY(dev_proj(d, T, H, z.q, x->u, H, dev_param(d, L, AT_WQ), 0, a->q, z.q));
		DEV_TRY(dev_proj(d, T, H, z.k, x->u, H, dev_param(d, L, AT_WK), 0, a->k, z.k));
		DEV_TRY(dev_proj(d, T, H, z.v, x->u, H, dev_param(d, L, AT_WV), 0, a->v, z.v));
		if (s->qkb) {
			void *bq = dev_param(d, L, AT_BQ), *bk = dev_param(d, L, AT_BK);
			void *bv = dev_param(d, L, AT_BV);
			DEV_TRY(dev_each(d, L, "attention_F_bias", T * z.q,
			                 (void *[]){&a->q, &a->k, &a->v, &bq, &bk, &bv}));
		}
		if (s->qkn) {
			void *gq = dev_param(d, L, AT_QHNORM), *gk = dev_param(d, L, AT_KHNORM);
			DEV_TRY(dev_rows(d, L, "attention_F_qhnorm", T * s->nh,
			                 (void *[]){&a->q, &gq, &a->qhat, &a->qr}));
			DEV_TRY(dev_rows(d, L, "attention_F_khnorm", T * s->nkv,
			                 (void *[]){&a->k, &gk, &a->khat, &a->kr}));
		}
	}
	DEV_TRY(rope_table(d, L, x));
	DEV_TRY(dev_each(d, L, "attention_F_rope", T * z.nh * z.half,
	                 (void *[]){&a->q, &a->k, &x->rcs, &x->rsn}));
	if (L->lib_attn) {
		dev_attn_core c = dev_attn_core_of(s);
		DEV_TRY(d->ops->attn_f(d, &c, a->q, a->k, a->v, a->o, a->lse));
	} else {
		DEV_TRY(dev_run(d, L, "attention_F_core", core_grid(s, s->nh), ATT_THREADS,
		                (void *[]){&a->q, &a->k, &a->v, &a->o, &a->lse}));
	}
	return dev_proj(d, T, z.o, H, a->o, z.o, dev_param(d, L, AT_WO), 1, y, H);
}

int dev_attn_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_attn_act a;
	dev_attn_ws w;
	dev_attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_f(d, L, io->x, io->y, x.u, a.xhat, a.r));
	return dev_attn_mix_f(d, L, &a, &x, io->y);
}

/* MLA's B from the unrotated dq, dk, dv to du's accumulator (b0 its
 * first term's beta: dev_acc_begin). */
static int mla_b(rt_dev *d, const dev_layer *L, const attn_dims *z, float b0, float *acc,
                 dev_attn_act *a, dev_attn_ws *w)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	/* dkv_h = [dk_h[:dn], dv_h]; dc[rkv:] = sum over heads of dk_h[dn:]. */
	DEV_TRY(dev_each(d, L, "attention_B_join", T, (void *[]){&w->dk, &w->dv, &w->dkv, &w->dc}));
	DEV_TRY(dev_proj_dx(d, T, z->rkv, z->kv, w->dkv, z->kv, dev_param(d, L, AT_WUKV), 0, w->dckvn,
	                    z->rkv));
	DEV_TRY(dev_rows(d, L, "attention_B_kvnorm", T,
	                 (void *[]){&w->dckvn, &gkv, &a->ckvhat, &a->ckvr, &w->dc}));
	DEV_TRY(dev_copy(d, w->ckvhat, a->ckvhat, T * z->rkv));
	DEV_TRY(dev_proj_dx_f32(d, T, H, z->c, w->dc, z->c, dev_param(d, L, AT_WDKV), b0, acc, H));
	if (!z->rq)
		return dev_proj_dx_f32(d, T, H, z->q, w->dq, z->q, dev_param(d, L, AT_WQ), 1, acc, H);
	DEV_TRY(dev_proj_dx(d, T, z->rq, z->q, w->dq, z->q, dev_param(d, L, AT_WUQ), 0, w->dcqn,
	                    z->rq));
	DEV_TRY(dev_rows(d, L, "attention_B_qnorm", T,
	                 (void *[]){&w->dcqn, &gq, &a->cqhat, &a->cqr, &w->dcq}));
	DEV_TRY(dev_copy(d, w->cqhat, a->cqhat, T * z->rq));
	return dev_proj_dx_f32(d, T, H, z->rq, w->dcq, z->rq, dev_param(d, L, AT_WDQ), 1, acc, H);
}

/* From dy = w->dy to du's f32 accumulator acc (b0 its first term's beta:
 * dev_acc_begin; the layer rounds it once into du); what W needs kept. */
int dev_attn_mix_b(rt_dev *d, const dev_layer *L, float b0, float *acc, dev_attn_act *a,
                   dev_attn_ws *w, dev_attn_scr *x)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	int64_t T = z.T, H = z.H;
	DEV_TRY(dev_copy(d, w->o, a->o, T * z.o));
	DEV_TRY(dev_proj_dx(d, T, z.o, H, w->dy, H, dev_param(d, L, AT_WO), 0, x->d_o, z.o));
	/* The core: dq (and D_i, which the kv kernel reads), then dk, dv.  With
	 * qk_norm they are the normed heads' gradients, which W keeps, and the
	 * norm's B makes dq, dk from them. */
	void *dqc = s->qkn ? w->dqn : w->dq, *dkc = s->qkn ? w->dkn : w->dk;
	if (L->lib_attn) {
		dev_attn_core c = dev_attn_core_of(s);
		DEV_TRY(d->ops->attn_b(d, &c, a->q, a->k, a->v, a->o, x->d_o, a->lse, x->dsum, dqc, dkc,
		                       w->dv));
	} else {
		DEV_TRY(dev_run(d, L, "attention_B_core_q", core_grid(s, s->nh), ATT_THREADS,
		                (void *[]){&a->q, &a->k, &a->v, &a->o, &x->d_o, &a->lse, &x->dsum, &dqc}));
		DEV_TRY(dev_run(d, L, "attention_B_core_kv", core_grid(s, s->nkv), ATT_THREADS,
		                (void *[]){&a->q, &a->k, &a->v, &x->d_o, &a->lse, &x->dsum, &dkc,
		                           &w->dv}));
	}
	DEV_TRY(rope_table(d, L, x));
	DEV_TRY(dev_each(d, L, "attention_B_rope", T * z.nh * z.half,
	                 (void *[]){&dqc, &dkc, &x->rcs, &x->rsn}));
	if (s->qkn) {
		void *gq = dev_param(d, L, AT_QHNORM), *gk = dev_param(d, L, AT_KHNORM);
		DEV_TRY(dev_rows(d, L, "attention_B_hnorm", T * s->nh,
		                 (void *[]){&dqc, &gq, &a->qhat, &a->qr, &w->dq}));
		DEV_TRY(dev_rows(d, L, "attention_B_hnorm", T * s->nkv,
		                 (void *[]){&dkc, &gk, &a->khat, &a->kr, &w->dk}));
		DEV_TRY(dev_copy(d, w->qhat, a->qhat, T * z.q));
		DEV_TRY(dev_copy(d, w->khat, a->khat, T * z.k));
	}
	if (s->mla)
		return mla_b(d, L, &z, b0, acc, a, w);
	DEV_TRY(dev_proj_dx_f32(d, T, H, z.q, w->dq, z.q, dev_param(d, L, AT_WQ), b0, acc, H));
	DEV_TRY(dev_proj_dx_f32(d, T, H, z.k, w->dk, z.k, dev_param(d, L, AT_WK), 1, acc, H));
	return dev_proj_dx_f32(d, T, H, z.v, w->dv, z.v, dev_param(d, L, AT_WV), 1, acc, H);
}

int dev_attn_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_attn_act a;
	dev_attn_ws w;
	dev_attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_keep(d, L, io->dy, w.dy, a.xhat, w.xhat));
	float b0, *acc = dev_acc_begin(d, w.du, x.du32, 0, &b0);
	DEV_TRY(dev_attn_mix_b(d, L, b0, acc, &a, &w, &x));
	DEV_TRY(dev_acc_end(d, L, acc, w.du, L->s.T * L->s.H, 0));
	return dev_norm_b(d, L, w.du, w.xhat, a.r, w.dy, io->dx);
}

/* MLA's weight gradients but wo's; x->u holds u. */
static int mla_w(rt_dev *d, const dev_layer *L, const attn_dims *z, dev_attn_ws *w,
                 dev_attn_scr *x)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	float *dgq = dev_grad(L, AT_QNORM), *dgkv = dev_grad(L, AT_KVNORM);
	if (z->rq) {
		DEV_TRY(dev_each(d, L, "attention_W_qscale", T * z->rq,
		                 (void *[]){&w->cqhat, &gq, &x->cqn}));
		DEV_TRY(dev_proj_dw(d, T, z->rq, z->q, x->cqn, z->rq, w->dq, z->q, dev_grad(L, AT_WUQ)));
		DEV_TRY(dev_each(d, L, "attention_W_qnorm", dev_col_chunks(T) * z->rq,
		                 (void *[]){&w->dcqn, &w->cqhat, &d->colp}));
		DEV_TRY(dev_col_add(d, L, d->colp, T, z->rq, dgq));
		DEV_TRY(dev_proj_dw(d, T, H, z->rq, x->u, H, w->dcq, z->rq, dev_grad(L, AT_WDQ)));
	} else {
		DEV_TRY(dev_proj_dw(d, T, H, z->q, x->u, H, w->dq, z->q, dev_grad(L, AT_WQ)));
	}
	DEV_TRY(dev_each(d, L, "attention_W_kvscale", T * z->rkv,
	                 (void *[]){&w->ckvhat, &gkv, &x->ckvn}));
	DEV_TRY(dev_proj_dw(d, T, z->rkv, z->kv, x->ckvn, z->rkv, w->dkv, z->kv,
	                    dev_grad(L, AT_WUKV)));
	DEV_TRY(dev_each(d, L, "attention_W_kvnorm", dev_col_chunks(T) * z->rkv,
	                 (void *[]){&w->dckvn, &w->ckvhat, &d->colp}));
	DEV_TRY(dev_col_add(d, L, d->colp, T, z->rkv, dgkv));
	return dev_proj_dw(d, T, H, z->c, x->u, H, w->dc, z->c, dev_grad(L, AT_WDKV));
}

/* The weight gradients but the pre-norm's; x->u holds u. */
int dev_attn_mix_w(rt_dev *d, const dev_layer *L, dev_attn_ws *w, dev_attn_scr *x)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	int64_t T = z.T, H = z.H;
	DEV_TRY(dev_proj_dw(d, T, z.o, H, w->o, z.o, w->dy, H, dev_grad(L, AT_WO)));
	if (s->mla)
		return mla_w(d, L, &z, w, x);
	DEV_TRY(dev_proj_dw(d, T, H, z.q, x->u, H, w->dq, z.q, dev_grad(L, AT_WQ)));
	DEV_TRY(dev_proj_dw(d, T, H, z.k, x->u, H, w->dk, z.k, dev_grad(L, AT_WK)));
	DEV_TRY(dev_proj_dw(d, T, H, z.v, x->u, H, w->dv, z.v, dev_grad(L, AT_WV)));
	/* The biases' and head norms' column sums: the partials of q's, then
	 * k's (and v's) in d->colp, each added to its gradient. */
	float *cp = d->colp;
	if (s->qkb) {
		int64_t n = dev_col_chunks(T);
		DEV_TRY(dev_each(d, L, "attention_W_bias", n * z.q,
		                 (void *[]){&w->dq, &w->dk, &w->dv, &cp}));
		DEV_TRY(dev_col_add(d, L, cp, T, z.q, dev_grad(L, AT_BQ)));
		DEV_TRY(dev_col_add(d, L, cp + n * z.q, T, z.k, dev_grad(L, AT_BK)));
		DEV_TRY(dev_col_add(d, L, cp + n * (z.q + z.k), T, z.v, dev_grad(L, AT_BV)));
	}
	if (s->qkn) {
		int64_t tq = T * s->nh, tk = T * s->nkv;
		DEV_TRY(dev_each(d, L, "attention_W_hnorm", dev_col_chunks(tq) * s->dqk,
		                 (void *[]){&w->dqn, &w->qhat, &w->dkn, &w->khat, &cp}));
		DEV_TRY(dev_col_add(d, L, cp, tq, s->dqk, dev_grad(L, AT_QHNORM)));
		DEV_TRY(dev_col_add(d, L, cp + dev_col_chunks(tq) * s->dqk, tk, s->dqk,
		                    dev_grad(L, AT_KHNORM)));
	}
	return RT_OK;
}

int dev_attn_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_attn_act a; /* not read: the runtime has freed act */
	dev_attn_ws w;
	dev_attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_w(d, L, w.xhat, w.du, x.u));
	return dev_attn_mix_w(d, L, &w, &x);
}
