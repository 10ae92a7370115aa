/* dev_mamba.c: the Mamba layer (versions 2 and 1) on the device: what
 * kernels_mamba.inc's mamba_fwd, mamba_bwd and mamba_w compute, as the GEMMs
 * in_proj, out_proj (and, version 1, x_proj and dt_proj) around the mamba_*
 * entry points of codegen/cuda_kernels.c (docs/cuda.md).
 *
 * Mamba-2's scan is the chunked SSD (ssd_f, ssd_b below; docs/cuda.md,
 * "Mamba-2 as the chunked SSD"), Mamba-1's the step-by-step scan.
 *
 * The stashes follow kernels_mamba.inc's mamba_map but in the kernels' shapes:
 * the norm statistics and the scan's chunk states are f32 (v2: the state
 * entering each chunk of RT_SSD_CHUNK steps, v1 of RT_SCAN_CHUNK); the
 * scan's dA and dD are per-sequence f32 partials (W sums them:
 * mamba_W_alog); v1 keeps x_proj's whole output for W (dt_proj reads its
 * first R columns in place).  The scratch of F and W and the scratch of B
 * share one buffer; v2's SSD buffers (dev_ssd, f32) are in it, F's after u
 * and yn, B's over the same bytes.  Under recompute=selective (rt_shape.sel)
 * the chunk states are not stashed but kept in the scratch, beside both: B
 * starts by making them again from the stashed inputs with F's own calls
 * (v1: F's scan kernel, its y into B's dys, which B writes later; v2:
 * ssd_states), which gives F's states bit for bit.
 *
 * The layer is the pre-norm (dev_common.c) around the mixer (dev_mix.h),
 * which a parallel layer shares with the attention (dev_par.c); without
 * its norm (xhat, r, the W stash's xhat, du, dy, the scratch's u) the
 * layout is the mixer's. */
#include "dev_mix.h"

/* The SSD's buffers (v2; none for v1): F's, or with `b` B's. */
static void ssd_map(const rt_shape *s, dev_carve *c, bool b, dev_ssd *q)
{
	size_t v2 = s->ver == 2, f = sizeof(float), Q = RT_SSD_CHUNK;
	size_t nbc = v2 * (size_t)(s->nb * s->nq), mh = (size_t)s->mh, di = (size_t)s->di;
	size_t GN = (size_t)(s->G * s->N), G = (size_t)s->G, PN = (size_t)(s->P * s->N), bo = b;
	*q = (dev_ssd){dev_take(c, nbc * Q * di * f),       dev_take(c, nbc * Q * GN * f),
	               dev_take(c, nbc * Q * GN * f),       dev_take(c, nbc * mh * Q * f),
	               dev_take(c, nbc * mh * Q * f),       dev_take(c, nbc * G * Q * Q * f),
	               dev_take(c, !bo * nbc * mh * Q * Q * f), dev_take(c, nbc * Q * di * f),
	               dev_take(c, nbc * Q * di * f),       dev_take(c, bo * nbc * Q * di * f),
	               dev_take(c, bo * nbc * mh * PN * f), dev_take(c, bo * nbc * Q * di * f),
	               dev_take(c, bo * nbc * mh * Q * Q * f), dev_take(c, bo * nbc * G * Q * Q * f),
	               dev_take(c, bo * nbc * Q * GN * f), dev_take(c, bo * nbc * Q * GN * f),
	               dev_take(c, bo * nbc * mh * f),     dev_take(c, bo * nbc * mh * f)};
}

void dev_mb_map(const rt_shape *s, size_t esz, bool norm, dev_carve *ca, dev_mb_act *a,
                dev_carve *cw, dev_mb_ws *w, dev_carve *cs, dev_mb_scr *x)
{
	size_t T = (size_t)s->T, di = (size_t)s->di, cd = (size_t)s->cd;
	size_t dip = (size_t)s->dip, mh = (size_t)s->mh, N = (size_t)s->N, nb = (size_t)s->nb;
	size_t Tn = norm ? T : 0, H = (size_t)s->H;
	bool v1 = s->ver == 1;
	size_t xd = v1 ? (size_t)(s->R + 2 * s->N) : 0, di2 = v1 ? 0 : di, di1 = v1 ? di : 0;
	size_t PN = (size_t)(s->P * s->N), f = sizeof(float);
	size_t ck = nb * mh * (size_t)(v1 ? s->nck : s->nq) * PN;
	*a = (dev_mb_act){dev_take(ca, Tn * H * esz),  dev_take(ca, Tn * f),
	                  dev_take(ca, T * dip * esz), dev_take(ca, T * cd * esz),
	                  dev_take(ca, T * cd * esz),  dev_take(ca, T * mh * esz),
	                  dev_take(ca, T * mh * f),    dev_take(ca, s->sel ? 0 : ck * f),
	                  dev_take(ca, T * di * esz),  dev_take(ca, T * di2 * esz),
	                  dev_take(ca, v1 ? 0 : T * (size_t)s->G * f), dev_take(ca, T * xd * esz)};
	*w = (dev_mb_ws){dev_take(cw, Tn * H * esz),  dev_take(cw, Tn * H * esz),
	                 dev_take(cw, Tn * H * esz),  dev_take(cw, T * di * esz),
	                 dev_take(cw, T * di2 * esz), dev_take(cw, T * dip * esz),
	                 dev_take(cw, T * cd * esz),  dev_take(cw, T * cd * esz),
	                 dev_take(cw, nb * mh * N * f), dev_take(cw, nb * mh * f),
	                 dev_take(cw, T * di1 * esz), dev_take(cw, T * xd * esz),
	                 dev_take(cw, T * xd * esz),  dev_take(cw, T * di1 * esz)};
	x->ck = dev_take(cs, s->sel ? ck * f : 0);
	dev_carve fw = *cs, b = *cs;
	x->u = dev_take(&fw, Tn * H * esz);
	x->yn = dev_take(&fw, T * di * esz);
	ssd_map(s, &fw, false, &x->qf);
	x->dyg = dev_take(&b, T * di1 * esz); /* v2: out_proj's dx goes to ws.dyn */
	x->dys = dev_take(&b, T * di * esz);
	x->dxbc = dev_take(&b, T * cd * esz);
	x->dx32 = dev_take(&b, esz < f ? T * di1 * f : 0);
	x->dbp = dev_take(&b, T * mh * N * f * v1);
	x->dcp = dev_take(&b, T * mh * N * f * v1);
	x->ddt = dev_take(&b, T * mh * f);
	ssd_map(s, &b, true, &x->qb);
	cs->off = fw.off > b.off ? fw.off : b.off;
}

static void mb_at(const rt_dev *d, const dev_layer *L, const dev_io *io, dev_mb_act *a,
                  dev_mb_ws *w, dev_mb_scr *x)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	dev_mb_map(&L->s, dev_esz(d), true, &ca, a, &cw, w, &cs, x);
}

int dev_mamba_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	dev_mb_act a;
	dev_mb_ws w;
	dev_mb_scr x;
	dev_mb_map(s, esz, true, &ca, &a, &cw, &w, &cs, &x);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* The scan's x, B and C: in the convolution's output (v2) or, v1, x there
 * and B, C in x_proj's output. */
typedef struct mb_scan {
	void *x, *B, *C;
} mb_scan;

static mb_scan scan_in(const rt_dev *d, const rt_shape *s, const dev_mb_act *a)
{
	if (s->ver == 2)
		return (mb_scan){a->xc, dev_at(d, a->xc, s->di), dev_at(d, a->xc, s->di + s->G * s->N)};
	return (mb_scan){a->xc, dev_at(d, a->xdbl, s->R), dev_at(d, a->xdbl, s->R + s->N)};
}

/* ---- Mamba-2: the chunked SSD (cuda_lib.cu's ssd_* between f32 batched
 * GEMMs; dev_ssd's layouts).  A GEMM per chunk bc and group g or head h
 * (dev_bmm: one strided-batched call per value of the smaller index). */

typedef struct ssd_dims {
	int64_t Q, nbc, mh, P, N, G, GN, hpg, di, PN;
} ssd_dims;

static ssd_dims ssd_dims_of(const rt_shape *s)
{
	int64_t hpg = s->mh / s->G;
	return (ssd_dims){RT_SSD_CHUNK, s->nb * s->nq, s->mh, s->P, s->N, s->G, s->G * s->N, hpg,
	                  s->di, s->P * s->N};
}

/* x, B, C, dt into the chunks, l, and cb = C B^T per group. */
static int ssd_prep(rt_dev *d, const dev_layer *L, const dev_mb_act *a, const dev_ssd *q)
{
	ssd_dims k = ssd_dims_of(&L->s);
	void *alog = dev_param(d, L, MB_ALOG);
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_pack", k.nbc * k.Q * k.di,
	                 (void *[]){(void *)&a->xc, (void *)&q->xq, (void *)&q->bq, (void *)&q->cq}));
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_cum", k.nbc * k.mh,
	                 (void *[]){(void *)&a->dt, &alog, (void *)&q->dtq, (void *)&q->lq}));
	return dev_bmm(d, false, true, k.Q, k.Q, k.N, q->cq, k.GN, q->bq, k.GN, 0, q->cb, k.Q,
	               (dev_bdim){k.nbc, k.Q * k.GN, k.Q * k.GN, k.G * k.Q * k.Q},
	               (dev_bdim){k.G, k.N, k.N, k.Q * k.Q});
}

/* The states entering the chunks into ck (after ssd_prep): each chunk's
 * own, X_w^T B per group (its heads' P x N stacked), into the next chunk's
 * slot, then carried across the chunks in order.  F's, and a selective B's
 * again: the same calls, the same bits. */
static int ssd_states(rt_dev *d, const dev_layer *L, const dev_ssd *q, float *ck)
{
	ssd_dims k = ssd_dims_of(&L->s);
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_xw", k.nbc * k.Q * k.di,
	                 (void *[]){(void *)&q->xq, (void *)&q->dtq, (void *)&q->lq, (void *)&q->wq}));
	DEV_TRY(dev_bmm(d, true, false, k.hpg * k.P, k.N, k.Q, q->wq, k.di, q->bq, k.GN, 0,
	                ck + k.mh * k.PN, k.N,
	                (dev_bdim){k.nbc - 1, k.Q * k.di, k.Q * k.GN, k.mh * k.PN},
	                (dev_bdim){k.G, k.hpg * k.P, k.N, k.hpg * k.PN}));
	return dev_each(d, L, "mamba_F_ssd_chunks", L->s.nb * k.mh * k.PN,
	                (void *[]){(void *)&q->lq, &ck});
}

/* C H^T per group (the heads' states stacked) into out [nbc][Q][di]. */
static int ssd_ch(rt_dev *d, const ssd_dims *k, const dev_ssd *q, const float *ck, float *out)
{
	return dev_bmm(d, false, true, k->Q, k->hpg * k->P, k->N, q->cq, k->GN, ck, k->N, 0, out,
	               k->di, (dev_bdim){k->nbc, k->Q * k->GN, k->mh * k->PN, k->Q * k->di},
	               (dev_bdim){k->G, k->N, k->hpg * k->PN, k->hpg * k->P});
}

/* F: ys from the stashed xc, dt; the chunk states into ck. */
static int ssd_f(rt_dev *d, const dev_layer *L, const dev_mb_act *a, const dev_ssd *q, float *ck)
{
	ssd_dims k = ssd_dims_of(&L->s);
	void *D = dev_param(d, L, MB_D);
	DEV_TRY(ssd_prep(d, L, a, q));
	DEV_TRY(ssd_states(d, L, q, ck));
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_mask", k.nbc * k.mh * k.Q * k.Q,
	                 (void *[]){(void *)&q->cb, (void *)&q->dtq, (void *)&q->lq, (void *)&q->m}));
	/* y intra-chunk = M x per head; C H^T into wq (x's weights are spent) */
	DEV_TRY(dev_bmm(d, false, false, k.Q, k.P, k.Q, q->m, k.Q, q->xq, k.di, 0, q->yq, k.di,
	                (dev_bdim){k.nbc, k.mh * k.Q * k.Q, k.Q * k.di, k.Q * k.di},
	                (dev_bdim){k.mh, k.Q * k.Q, k.P, k.P}));
	DEV_TRY(ssd_ch(d, &k, q, ck, q->wq));
	return dev_each(d, L, "mamba_F_ssd_out", L->s.T * k.di,
	                (void *[]){(void *)&q->yq, (void *)&q->wq, (void *)&q->lq, (void *)&a->xc, &D,
	                           (void *)&a->ys});
}

/* B: from dys, dx | dB | dC into dxbc, ddt, and dA, dD for W (n = 0 of
 * dA's [nb][mh][N]).  ck holds F's states (a selective B makes them
 * first). */
static int ssd_b(rt_dev *d, const dev_layer *L, const dev_mb_act *a, dev_mb_ws *w, dev_mb_scr *x,
                 float *ck)
{
	const rt_shape *s = &L->s;
	ssd_dims k = ssd_dims_of(s);
	const dev_ssd *q = &x->qb;
	void *D = dev_param(d, L, MB_D), *alog = dev_param(d, L, MB_ALOG);
	int64_t hP = k.hpg * k.P;
	dev_bdim by_bc_q = {k.nbc, k.Q * k.di, k.Q * k.GN, k.mh * k.PN}; /* [Q][di], [Q][GN], states */
	dev_bdim by_g_q = {k.G, hP, k.N, k.hpg * k.PN};

	DEV_TRY(ssd_prep(d, L, a, q));
	if (s->sel)
		DEV_TRY(ssd_states(d, L, q, ck));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_dy", k.nbc * k.Q * k.di,
	                 (void *[]){(void *)&x->dys, (void *)&q->dyq}));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_dyw", k.nbc * k.Q * k.di,
	                 (void *[]){(void *)&q->dyq, (void *)&q->dtq, (void *)&q->lq, (void *)&q->wq}));
	/* The chunk states' gradients: dy_w^T C, then carried backwards (e). */
	DEV_TRY(dev_bmm(d, true, false, hP, k.N, k.Q, q->wq, k.di, q->cq, k.GN, 0, q->e, k.N, by_bc_q,
	                by_g_q));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_chunks", s->nb * k.mh * k.PN,
	                 (void *[]){(void *)&q->lq, (void *)&q->e}));
	/* dC through the state entering: dy_w H, heads of a group summed. */
	DEV_TRY(dev_bmm(d, false, false, k.Q, k.N, hP, q->wq, k.di, ck, k.N, 0, q->dcq, k.GN,
	                (dev_bdim){k.nbc, k.Q * k.di, k.mh * k.PN, k.Q * k.GN},
	                (dev_bdim){k.G, hP, k.hpg * k.PN, k.N}));
	/* C H^T (yq), B E^T (zq); x's weights, and dB through the state leaving. */
	DEV_TRY(ssd_ch(d, &k, q, ck, q->yq));
	DEV_TRY(dev_bmm(d, false, true, k.Q, hP, k.N, q->bq, k.GN, q->e, k.N, 0, q->zq, k.di,
	                (dev_bdim){k.nbc, k.Q * k.GN, k.mh * k.PN, k.Q * k.di},
	                (dev_bdim){k.G, k.N, k.hpg * k.PN, hP}));
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_xw", k.nbc * k.Q * k.di,
	                 (void *[]){(void *)&q->xq, (void *)&q->dtq, (void *)&q->lq, (void *)&q->wq}));
	DEV_TRY(dev_bmm(d, false, false, k.Q, k.N, hP, q->wq, k.di, q->e, k.N, 0, q->dbq, k.GN,
	                (dev_bdim){k.nbc, k.Q * k.di, k.mh * k.PN, k.Q * k.GN},
	                (dev_bdim){k.G, hP, k.hpg * k.PN, k.N}));
	/* Intra-chunk: dy x^T per head, cb's gradient per group. */
	dev_bdim by_bc_h = {k.nbc, k.mh * k.Q * k.Q, k.Q * k.di, k.Q * k.di};
	DEV_TRY(dev_bmm(d, false, true, k.Q, k.Q, k.P, q->dyq, k.di, q->xq, k.di, 0, q->dcb, k.Q,
	                (dev_bdim){k.nbc, k.Q * k.di, k.Q * k.di, k.mh * k.Q * k.Q},
	                (dev_bdim){k.mh, k.P, k.P, k.Q * k.Q}));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_mask", k.nbc * k.G * k.Q * k.Q,
	                 (void *[]){(void *)&q->dtq, (void *)&q->lq, (void *)&q->dcb, (void *)&q->dcbg}));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_dt", k.nbc * k.mh,
	                 (void *[]){(void *)&q->cb, (void *)&q->dcb, (void *)&q->dtq, (void *)&q->lq,
	                            (void *)&q->xq, (void *)&q->dyq, (void *)&q->yq, (void *)&q->zq,
	                            (void *)&q->e, &ck, &alog, (void *)&x->ddt, (void *)&q->dap,
	                            (void *)&q->ddp}));
	dev_bdim by_bc_g = {k.nbc, k.G * k.Q * k.Q, k.Q * k.GN, k.Q * k.GN};
	dev_bdim by_g = {k.G, k.Q * k.Q, k.N, k.N};
	DEV_TRY(dev_bmm(d, false, false, k.Q, k.N, k.Q, q->dcbg, k.Q, q->bq, k.GN, 1, q->dcq, k.GN,
	                by_bc_g, by_g));
	DEV_TRY(dev_bmm(d, true, false, k.Q, k.N, k.Q, q->dcbg, k.Q, q->cq, k.GN, 1, q->dbq, k.GN,
	                by_bc_g, by_g));
	/* dx intra-chunk = M^T dy per head: M made again as F made it, over dcb
	 * (spent), and C H^T in yq is spent too. */
	DEV_TRY(dev_each(d, L, "mamba_F_ssd_mask", k.nbc * k.mh * k.Q * k.Q,
	                 (void *[]){(void *)&q->cb, (void *)&q->dtq, (void *)&q->lq, (void *)&q->dcb}));
	DEV_TRY(dev_bmm(d, true, false, k.Q, k.P, k.Q, q->dcb, k.Q, q->dyq, k.di, 0, q->yq, k.di,
	                by_bc_h, (dev_bdim){k.mh, k.Q * k.Q, k.P, k.P}));
	DEV_TRY(dev_each(d, L, "mamba_B_ssd_dx", s->T * s->cd,
	                 (void *[]){(void *)&q->yq, (void *)&q->zq, (void *)&q->dtq, (void *)&q->lq,
	                            (void *)&x->dys, &D, (void *)&q->dbq, (void *)&q->dcq,
	                            (void *)&x->dxbc}));
	return dev_each(d, L, "mamba_B_ssd_ad", s->nb * k.mh,
	                (void *[]){(void *)&q->dap, (void *)&q->ddp, (void *)&w->dA, (void *)&w->dD});
}

/* y += out_proj(yn), from u = x->u. */
int dev_mb_mix_f(rt_dev *d, const dev_layer *L, dev_mb_act *a, dev_mb_scr *x, void *y)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	bool v1 = s->ver == 1;
	void *convw = dev_param(d, L, MB_CONVW), *convb = dev_param(d, L, MB_CONVB);
	void *dtb = dev_param(d, L, MB_DTBIAS), *alog = dev_param(d, L, MB_ALOG);
	void *D = dev_param(d, L, MB_D), *ng = dev_param(d, L, MB_GNORM);
	void *cin = dev_at(d, a->zx, v1 ? 0 : di), *z = dev_at(d, a->zx, v1 ? di : 0);

	DEV_TRY(dev_proj(d, T, H, dip, x->u, H, dev_param(d, L, MB_WIN), 0, a->zx, dip));
	DEV_TRY(dev_each(d, L, "mamba_F_conv", T * cd,
	                 (void *[]){&cin, &convw, &convb, &a->cv, &a->xc}));
	void *dtsrc = a->v; /* v1: dt_proj's output, biased in place */
	if (v1) {
		int64_t R = s->R, xd = R + 2 * s->N;
		DEV_TRY(dev_proj(d, T, di, xd, a->xc, di, dev_param(d, L, MB_XPROJ), 0, a->xdbl, xd));
		DEV_TRY(dev_proj(d, T, R, di, a->xdbl, xd, dev_param(d, L, MB_DTPROJ), 0, a->v, di));
	} else {
		dtsrc = dev_at(d, a->zx, di + cd);
	}
	DEV_TRY(dev_each(d, L, "mamba_F_dt", T * mh, (void *[]){&dtsrc, &dtb, &a->v, &a->dt}));
	float *ck = s->sel ? x->ck : a->ck;
	if (v1) {
		mb_scan sc = scan_in(d, s, a);
		DEV_TRY(dev_each(d, L, "mamba_F_scan", s->nb * mh * s->P,
		                 (void *[]){&sc.x, &sc.B, &sc.C, &a->dt, &alog, &D, &a->ys, &ck}));
	} else {
		DEV_TRY(ssd_f(d, L, a, &x->qf, ck));
	}
	if (v1)
		DEV_TRY(dev_each(d, L, "mamba_F_gate", T * di, (void *[]){&a->ys, &z, &x->yn}));
	else
		DEV_TRY(dev_rows(d, L, "mamba_F_gnorm", T * s->G,
		                 (void *[]){&a->ys, &z, &ng, &a->yhat, &a->gr, &x->yn}));
	return dev_proj(d, T, di, H, x->yn, di, dev_param(d, L, MB_WOUT), 1, y, H);
}

int dev_mamba_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_mb_act a;
	dev_mb_ws w;
	dev_mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_f(d, L, io->x, io->y, x.u, a.xhat, a.r));
	return dev_mb_mix_f(d, L, &a, &x, io->y);
}

/* From dy = w->dy to du, or with acc, in_proj's dx added to du's f32
 * accumulator acc (a parallel layer's); what W needs kept. */
int dev_mb_mix_b(rt_dev *d, const dev_layer *L, float *acc, dev_mb_act *a, dev_mb_ws *w,
                 dev_mb_scr *x)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	int64_t N = s->N, R = s->R, xd = R + 2 * N;
	bool v1 = s->ver == 1;
	void *convw = dev_param(d, L, MB_CONVW), *alog = dev_param(d, L, MB_ALOG);
	void *D = dev_param(d, L, MB_D), *ng = dev_param(d, L, MB_GNORM);
	void *wout = dev_param(d, L, MB_WOUT);
	void *cin = dev_at(d, a->zx, v1 ? 0 : di), *z = dev_at(d, a->zx, v1 ? di : 0);
	void *dcin = dev_at(d, w->dzx, v1 ? 0 : di), *dz = dev_at(d, w->dzx, v1 ? di : 0);
	mb_scan sc = scan_in(d, s, a);
	float *ck = s->sel ? x->ck : a->ck;

	/* Selective: F's chunk states again, by F's kernel on F's inputs (v2:
	 * in ssd_b). */
	if (s->sel && v1)
		DEV_TRY(dev_each(d, L, "mamba_F_scan", s->nb * mh * s->P,
		                 (void *[]){&sc.x, &sc.B, &sc.C, &a->dt, &alog, &D, &x->dys, &ck}));
	/* out_proj, then the gate (and v2's gated norm): dys and z's part of dzx. */
	if (v1) {
		DEV_TRY(dev_proj_dx(d, T, di, H, w->dy, H, wout, 0, x->dyg, di));
		DEV_TRY(dev_each(d, L, "mamba_B_gate", T * di,
		                 (void *[]){&x->dyg, &a->ys, &z, &x->dys, &dz}));
		DEV_TRY(dev_each(d, L, "mamba_F_gate", T * di, (void *[]){&a->ys, &z, &w->yo}));
	} else {
		DEV_TRY(dev_proj_dx(d, T, di, H, w->dy, H, wout, 0, w->dyn, di));
		DEV_TRY(dev_copy(d, w->yo, a->yhat, T * di));
		DEV_TRY(dev_rows(d, L, "mamba_B_gnorm", T * s->G,
		                 (void *[]){&w->dyn, &ng, &a->yhat, &a->gr, &a->ys, &z, &x->dys, &dz}));
	}
	/* The scan: dx into dxbc; dB, dC summed over a group's heads into dxbc
	 * (v2) or x_proj's output gradient (v1); ddt to dt's pre-activation.
	 * v1's dx is f32, x_proj's dx is added to it there, and the sum is
	 * rounded once into dxbc. */
	float b0, *dx = v1 ? dev_acc_begin(d, x->dxbc, x->dx32, 0, &b0) : NULL;
	if (v1) {
		if (s->P > 1024)
			return dev_fail(d, RT_EINVAL, "%s layer: head_dim %lld over 1024, the threads of "
			                "one scan block", L->kind, (long long)s->P);
		DEV_TRY(dev_run(d, L, "mamba_B_scan", (unsigned)(s->nb * mh), (unsigned)s->P,
		                (void *[]){&sc.x, &sc.B, &sc.C, &a->dt, &alog, &D, &x->dys, &ck, &dx,
		                           &x->dbp, &x->dcp, &x->ddt, &w->dA, &w->dD}));
		void *dB = dev_at(d, w->dxdbl, R), *dC = dev_at(d, w->dxdbl, R + N);
		DEV_TRY(dev_each(d, L, "mamba_B_reduce", T * s->G * N,
		                 (void *[]){&x->dbp, &x->dcp, &dB, &dC}));
	} else {
		DEV_TRY(ssd_b(d, L, a, w, x, ck));
	}
	void *dv = v1 ? w->dv : dev_at(d, w->dzx, di + cd);
	DEV_TRY(dev_each(d, L, "mamba_B_dt", T * mh, (void *[]){&x->ddt, &a->v, &dv}));
	if (v1) {
		DEV_TRY(dev_proj_dx(d, T, R, di, w->dv, di, dev_param(d, L, MB_DTPROJ), 0, w->dxdbl, xd));
		DEV_TRY(dev_proj_dx_f32(d, T, di, xd, w->dxdbl, xd, dev_param(d, L, MB_XPROJ), 1, dx,
		                        di));
		DEV_TRY(dev_acc_end(d, L, dx, x->dxbc, T * di, 0));
		DEV_TRY(dev_copy(d, w->xc, a->xc, T * di));
		DEV_TRY(dev_copy(d, w->xdbl, a->xdbl, T * xd));
	}
	/* The convolution (its input packed for W), in_proj. */
	DEV_TRY(dev_each(d, L, "mamba_B_dcv", T * cd, (void *[]){&x->dxbc, &a->cv, &w->dcv}));
	DEV_TRY(dev_each(d, L, "mamba_B_xpre", T * cd, (void *[]){&cin, &w->xpre}));
	DEV_TRY(dev_each(d, L, "mamba_B_conv", T * cd, (void *[]){&w->dcv, &convw, &dcin}));
	void *win = dev_param(d, L, MB_WIN);
	if (!acc)
		return dev_proj_dx(d, T, H, dip, w->dzx, dip, win, 0, w->du, H);
	return dev_proj_dx_f32(d, T, H, dip, w->dzx, dip, win, 1, acc, H);
}

int dev_mamba_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_mb_act a;
	dev_mb_ws w;
	dev_mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_keep(d, L, io->dy, w.dy, a.xhat, w.xhat));
	DEV_TRY(dev_mb_mix_b(d, L, NULL, &a, &w, &x));
	return dev_norm_b(d, L, w.du, a.xhat, a.r, w.dy, io->dx);
}

/* The weight gradients but the pre-norm's; x->u holds u. */
int dev_mb_mix_w(rt_dev *d, const dev_layer *L, dev_mb_ws *w, dev_mb_scr *x)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	bool v1 = s->ver == 1;
	void *alog = dev_param(d, L, MB_ALOG), *ng = dev_param(d, L, MB_GNORM);
	float *galog = dev_grad(L, MB_ALOG), *gD = dev_grad(L, MB_D), *cp = d->colp;
	int64_t n = dev_col_chunks(T);

	DEV_TRY(dev_proj_dw(d, T, H, dip, x->u, H, w->dzx, dip, dev_grad(L, MB_WIN)));
	/* The column sums (dev_col_add): the convolution's weights and bias,
	 * dt_bias (and v2's gated norm below). */
	DEV_TRY(dev_each(d, L, "mamba_W_conv", n * cd, (void *[]){&w->dcv, &w->xpre, &cp}));
	DEV_TRY(dev_col_add(d, L, cp, T, cd * s->Kc, dev_grad(L, MB_CONVW)));
	DEV_TRY(dev_col_add(d, L, cp + n * cd * s->Kc, T, cd, dev_grad(L, MB_CONVB)));
	void *dv = v1 ? w->dv : dev_at(d, w->dzx, di + cd);
	DEV_TRY(dev_each(d, L, "mamba_W_dtbias", n * mh, (void *[]){&dv, &cp}));
	DEV_TRY(dev_col_add(d, L, cp, T, mh, dev_grad(L, MB_DTBIAS)));
	DEV_TRY(dev_each(d, L, "mamba_W_alog", v1 ? di * s->N : mh,
	                 (void *[]){&w->dA, &w->dD, &alog, &galog, &gD}));
	if (v1) {
		int64_t R = s->R, xd = R + 2 * s->N;
		DEV_TRY(dev_proj_dw(d, T, di, xd, w->xc, di, w->dxdbl, xd, dev_grad(L, MB_XPROJ)));
		DEV_TRY(dev_proj_dw(d, T, R, di, w->xdbl, xd, w->dv, di, dev_grad(L, MB_DTPROJ)));
		return dev_proj_dw(d, T, di, H, w->yo, di, w->dy, H, dev_grad(L, MB_WOUT));
	}
	DEV_TRY(dev_each(d, L, "mamba_W_gnorm", n * di, (void *[]){&w->dyn, &w->yo, &cp}));
	DEV_TRY(dev_col_add(d, L, cp, T, di, dev_grad(L, MB_GNORM)));
	DEV_TRY(dev_each(d, L, "mamba_W_gscale", T * di, (void *[]){&w->yo, &ng, &x->yn}));
	return dev_proj_dw(d, T, di, H, x->yn, di, w->dy, H, dev_grad(L, MB_WOUT));
}

int dev_mamba_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	dev_mb_act a; /* not read: the runtime has freed act */
	dev_mb_ws w;
	dev_mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	DEV_TRY(dev_prenorm_w(d, L, w.xhat, w.du, x.u));
	return dev_mb_mix_w(d, L, &w, &x);
}
