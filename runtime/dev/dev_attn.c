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
 *            kv [T][nh (dn+dv)], d_o [T][nh dv], Dsum [mbs][nh][seq] f32.
 * B copies into the W stash what W needs from act and from dy, so W reads
 * neither, and dx may be dy. */
#include "dev.h"

/* Row widths of the layer's arrays; the MLA ones are 0 for GQA. */
typedef struct attn_dims {
	int64_t T, H, nh, q, k, v, o, half;
	int64_t qn, kn; /* qk_norm: q and k (0 without) */
	int64_t rq, rkv, c, kv; /* c: the kv latent with the rotary key, rkv + dr */
} attn_dims;

typedef struct attn_act {
	void *xhat, *q, *k, *v, *o, *cqhat, *ckvhat, *qhat, *khat;
	float *r, *lse, *cqr, *ckvr, *qr, *kr;
} attn_act;

typedef struct attn_ws {
	void *xhat, *du, *dy, *o, *dq, *dk, *dv;
	void *cqhat, *dcqn, *dcq, *ckvhat, *dkv, *dckvn, *dc; /* MLA */
	void *dqn, *dkn, *qhat, *khat;                        /* qk_norm */
} attn_ws;

typedef struct attn_scr {
	void *u, *cq, *cqn, *c, *ckvn, *kv, *d_o;
	float *dsum;
} attn_scr;

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
 * statement per array: the carve order is the layout. */
static void attn_map(const rt_shape *s, size_t esz, dev_carve *ca, attn_act *a, dev_carve *cw,
                     attn_ws *w, dev_carve *cs, attn_scr *x)
{
	attn_dims z = dims(s);
	int64_t T = z.T, nlse = s->nb * s->nh * s->S;
#define R(c, n) dev_take(c, (size_t)(n) * esz)
#define F(c, n) ((float *)dev_take(c, (size_t)(n) * sizeof(float)))
	a->xhat = R(ca, T * z.H);
	a->r = F(ca, T);
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

	w->xhat = R(cw, T * z.H);
	w->du = R(cw, T * z.H);
	w->dy = R(cw, T * z.H);
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

	x->u = R(cs, T * z.H);
	x->cq = R(cs, T * z.rq);
	x->cqn = R(cs, T * z.rq);
	x->c = R(cs, T * z.c);
	x->ckvn = R(cs, T * z.rkv);
	x->kv = R(cs, T * z.kv);
	x->d_o = R(cs, T * z.o);
	x->dsum = F(cs, nlse);
#undef R
#undef F
}

static void attn_bufs(const rt_dev *d, const dev_layer *L, const dev_io *io, attn_act *a,
                      attn_ws *w, attn_scr *x)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	attn_map(&L->s, dev_esz(d), &ca, a, &cw, w, &cs, x);
}

int dev_attn_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	attn_act a;
	attn_ws w;
	attn_scr x;
	attn_map(s, esz, &ca, &a, &cw, &w, &cs, &x);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

#define TRY(call)                                                              \
	do {                                                                       \
		int rc_ = (call);                                                      \
		if (rc_)                                                               \
			return rc_;                                                        \
	} while (0)

static int copy(rt_dev *d, void *dst, const void *src, int64_t n)
{
	if (dst == src || n == 0)
		return RT_OK;
	return d->ops->copy(d, dst, src, (size_t)n * dev_esz(d), DEV_D2D);
}

/* MLA's F from u to the assembled q, k (not yet rotated) and v. */
static int mla_f(rt_dev *d, const dev_layer *L, const attn_dims *z, attn_act *a,
                 attn_scr *x)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	if (z->rq) {
		TRY(dev_proj(d, T, H, z->rq, x->u, H, dev_param(d, L, AT_WDQ), 0, x->cq, z->rq));
		TRY(dev_rows(d, L, "%s_F_qnorm", T, (void *[]){&x->cq, &gq, &x->cqn, &a->cqhat, &a->cqr}));
		TRY(dev_proj(d, T, z->rq, z->q, x->cqn, z->rq, dev_param(d, L, AT_WUQ), 0, a->q, z->q));
	} else {
		TRY(dev_proj(d, T, H, z->q, x->u, H, dev_param(d, L, AT_WQ), 0, a->q, z->q));
	}
	TRY(dev_proj(d, T, H, z->c, x->u, H, dev_param(d, L, AT_WDKV), 0, x->c, z->c));
	TRY(dev_rows(d, L, "%s_F_kvnorm", T, (void *[]){&x->c, &gkv, &x->ckvn, &a->ckvhat, &a->ckvr}));
	TRY(dev_proj(d, T, z->rkv, z->kv, x->ckvn, z->rkv, dev_param(d, L, AT_WUKV), 0, x->kv, z->kv));
	/* k_h = [kv_h[:dn], c[rkv:]] (the rotary key shared by the heads), v_h = kv_h[dn:]. */
	return dev_each(d, L, "%s_F_split", T * z->nh, (void *[]){&x->kv, &x->c, &a->k, &a->v});
}

int dev_attn_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	attn_act a;
	attn_ws w;
	attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	int64_t T = z.T, H = z.H;
	TRY(dev_norm_f(d, L, io->x, x.u, a.xhat, a.r));
	if (s->mla) {
		TRY(mla_f(d, L, &z, &a, &x));
	} else {
		TRY(dev_proj(d, T, H, z.q, x.u, H, dev_param(d, L, AT_WQ), 0, a.q, z.q));
		TRY(dev_proj(d, T, H, z.k, x.u, H, dev_param(d, L, AT_WK), 0, a.k, z.k));
		TRY(dev_proj(d, T, H, z.v, x.u, H, dev_param(d, L, AT_WV), 0, a.v, z.v));
		if (s->qkb) {
			void *bq = dev_param(d, L, AT_BQ), *bk = dev_param(d, L, AT_BK);
			void *bv = dev_param(d, L, AT_BV);
			TRY(dev_each(d, L, "%s_F_bias", T * z.q, (void *[]){&a.q, &a.k, &a.v, &bq, &bk, &bv}));
		}
		if (s->qkn) {
			void *gq = dev_param(d, L, AT_QHNORM), *gk = dev_param(d, L, AT_KHNORM);
			TRY(dev_rows(d, L, "%s_F_qhnorm", T * s->nh, (void *[]){&a.q, &gq, &a.qhat, &a.qr}));
			TRY(dev_rows(d, L, "%s_F_khnorm", T * s->nkv, (void *[]){&a.k, &gk, &a.khat, &a.kr}));
		}
	}
	TRY(dev_each(d, L, "%s_F_rope", T * z.nh * z.half, (void *[]){&a.q, &a.k}));
	TRY(dev_each(d, L, "%s_F_core", T * z.nh, (void *[]){&a.q, &a.k, &a.v, &a.o, &a.lse}));
	/* y = x + o wo; x is read only by the norm above, so y may be x. */
	TRY(copy(d, io->y, io->x, T * H));
	return dev_proj(d, T, z.o, H, a.o, z.o, dev_param(d, L, AT_WO), 1, io->y, H);
}

/* MLA's B from the unrotated dq, dk, dv to du (without the residual). */
static int mla_b(rt_dev *d, const dev_layer *L, const attn_dims *z, attn_act *a,
                 attn_ws *w)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	/* dkv_h = [dk_h[:dn], dv_h]; dc[rkv:] = sum over heads of dk_h[dn:]. */
	TRY(dev_each(d, L, "%s_B_join", T, (void *[]){&w->dk, &w->dv, &w->dkv, &w->dc}));
	TRY(dev_proj_dx(d, T, z->rkv, z->kv, w->dkv, z->kv, dev_param(d, L, AT_WUKV), 0, w->dckvn,
	                z->rkv));
	TRY(dev_rows(d, L, "%s_B_kvnorm", T,
	             (void *[]){&w->dckvn, &gkv, &a->ckvhat, &a->ckvr, &w->dc}));
	TRY(copy(d, w->ckvhat, a->ckvhat, T * z->rkv));
	TRY(dev_proj_dx(d, T, H, z->c, w->dc, z->c, dev_param(d, L, AT_WDKV), 0, w->du, H));
	if (!z->rq)
		return dev_proj_dx(d, T, H, z->q, w->dq, z->q, dev_param(d, L, AT_WQ), 1, w->du, H);
	TRY(dev_proj_dx(d, T, z->rq, z->q, w->dq, z->q, dev_param(d, L, AT_WUQ), 0, w->dcqn, z->rq));
	TRY(dev_rows(d, L, "%s_B_qnorm", T, (void *[]){&w->dcqn, &gq, &a->cqhat, &a->cqr, &w->dcq}));
	TRY(copy(d, w->cqhat, a->cqhat, T * z->rq));
	return dev_proj_dx(d, T, H, z->rq, w->dcq, z->rq, dev_param(d, L, AT_WDQ), 1, w->du, H);
}

int dev_attn_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	attn_act a;
	attn_ws w;
	attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	int64_t T = z.T, H = z.H;
	/* dy first: dx may be dy, and W needs dy. */
	TRY(copy(d, w.dy, io->dy, T * H));
	TRY(copy(d, w.xhat, a.xhat, T * H));
	TRY(copy(d, w.o, a.o, T * z.o));
	TRY(dev_proj_dx(d, T, z.o, H, w.dy, H, dev_param(d, L, AT_WO), 0, x.d_o, z.o));
	/* The core: dq (and D_i, which the kv kernel reads), then dk, dv.  With
	 * qk_norm they are the normed heads' gradients, which W keeps, and the
	 * norm's B makes dq, dk from them. */
	void *dqc = s->qkn ? w.dqn : w.dq, *dkc = s->qkn ? w.dkn : w.dk;
	TRY(dev_each(d, L, "%s_B_core_q", T * z.nh,
	             (void *[]){&a.q, &a.k, &a.v, &x.d_o, &a.lse, &x.dsum, &dqc}));
	TRY(dev_each(d, L, "%s_B_core_kv", T * s->nkv,
	             (void *[]){&a.q, &a.k, &a.v, &x.d_o, &a.lse, &x.dsum, &dkc, &w.dv}));
	TRY(dev_each(d, L, "%s_B_rope", T * z.nh * z.half, (void *[]){&dqc, &dkc}));
	if (s->qkn) {
		void *gq = dev_param(d, L, AT_QHNORM), *gk = dev_param(d, L, AT_KHNORM);
		TRY(dev_rows(d, L, "%s_B_hnorm", T * s->nh, (void *[]){&dqc, &gq, &a.qhat, &a.qr, &w.dq}));
		TRY(dev_rows(d, L, "%s_B_hnorm", T * s->nkv, (void *[]){&dkc, &gk, &a.khat, &a.kr, &w.dk}));
		TRY(copy(d, w.qhat, a.qhat, T * z.q));
		TRY(copy(d, w.khat, a.khat, T * z.k));
	}
	if (s->mla) {
		TRY(mla_b(d, L, &z, &a, &w));
	} else {
		TRY(dev_proj_dx(d, T, H, z.q, w.dq, z.q, dev_param(d, L, AT_WQ), 0, w.du, H));
		TRY(dev_proj_dx(d, T, H, z.k, w.dk, z.k, dev_param(d, L, AT_WK), 1, w.du, H));
		TRY(dev_proj_dx(d, T, H, z.v, w.dv, z.v, dev_param(d, L, AT_WV), 1, w.du, H));
	}
	return dev_norm_b(d, L, w.du, w.xhat, a.r, w.dy, io->dx);
}

/* MLA's weight gradients but wo's and the pre-norm's; x->u holds u. */
static int mla_w(rt_dev *d, const dev_layer *L, const attn_dims *z, attn_ws *w,
                 attn_scr *x)
{
	int64_t T = z->T, H = z->H;
	void *gq = dev_param(d, L, AT_QNORM), *gkv = dev_param(d, L, AT_KVNORM);
	float *dgq = dev_grad(L, AT_QNORM), *dgkv = dev_grad(L, AT_KVNORM);
	if (z->rq) {
		TRY(dev_each(d, L, "%s_W_qscale", T * z->rq, (void *[]){&w->cqhat, &gq, &x->cqn}));
		TRY(dev_proj_dw(d, T, z->rq, z->q, x->cqn, z->rq, w->dq, z->q, dev_grad(L, AT_WUQ)));
		TRY(dev_each(d, L, "%s_W_qnorm", z->rq, (void *[]){&w->dcqn, &w->cqhat, &dgq}));
		TRY(dev_proj_dw(d, T, H, z->rq, x->u, H, w->dcq, z->rq, dev_grad(L, AT_WDQ)));
	} else {
		TRY(dev_proj_dw(d, T, H, z->q, x->u, H, w->dq, z->q, dev_grad(L, AT_WQ)));
	}
	TRY(dev_each(d, L, "%s_W_kvscale", T * z->rkv, (void *[]){&w->ckvhat, &gkv, &x->ckvn}));
	TRY(dev_proj_dw(d, T, z->rkv, z->kv, x->ckvn, z->rkv, w->dkv, z->kv, dev_grad(L, AT_WUKV)));
	TRY(dev_each(d, L, "%s_W_kvnorm", z->rkv, (void *[]){&w->dckvn, &w->ckvhat, &dgkv}));
	return dev_proj_dw(d, T, H, z->c, x->u, H, w->dc, z->c, dev_grad(L, AT_WDKV));
}

int dev_attn_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	attn_dims z = dims(s);
	attn_act a; /* not read: the runtime has freed act */
	attn_ws w;
	attn_scr x;
	attn_bufs(d, L, io, &a, &w, &x);
	int64_t T = z.T, H = z.H;
	TRY(dev_norm_scale(d, L, w.xhat, x.u));
	TRY(dev_norm_w(d, L, w.du, w.xhat));
	TRY(dev_proj_dw(d, T, z.o, H, w.o, z.o, w.dy, H, dev_grad(L, AT_WO)));
	if (s->mla)
		return mla_w(d, L, &z, &w, &x);
	TRY(dev_proj_dw(d, T, H, z.q, x.u, H, w.dq, z.q, dev_grad(L, AT_WQ)));
	TRY(dev_proj_dw(d, T, H, z.k, x.u, H, w.dk, z.k, dev_grad(L, AT_WK)));
	TRY(dev_proj_dw(d, T, H, z.v, x.u, H, w.dv, z.v, dev_grad(L, AT_WV)));
	if (s->qkb) {
		float *dbq = dev_grad(L, AT_BQ), *dbk = dev_grad(L, AT_BK), *dbv = dev_grad(L, AT_BV);
		TRY(dev_each(d, L, "%s_W_bias", z.q, (void *[]){&w.dq, &w.dk, &w.dv, &dbq, &dbk, &dbv}));
	}
	if (s->qkn) {
		float *dgq = dev_grad(L, AT_QHNORM), *dgk = dev_grad(L, AT_KHNORM);
		TRY(dev_each(d, L, "%s_W_hnorm", s->dqk,
		             (void *[]){&w.dqn, &w.qhat, &w.dkn, &w.khat, &dgq, &dgk}));
	}
	return RT_OK;
}
