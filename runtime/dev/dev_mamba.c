/* dev_mamba.c: the Mamba layer (versions 2 and 1) on the device: what
 * kernels_mamba.inc's mamba_fwd, mamba_bwd and mamba_w compute, as the GEMMs
 * in_proj, out_proj (and, version 1, x_proj and dt_proj) around the mamba_*
 * entry points of codegen/cuda_kernels.c (docs/cuda.md).
 *
 * The stashes follow kernels_mamba.inc's mamba_map but in the kernels' shapes:
 * the norm statistics and the scan's chunk states are f32; the scan's dA
 * and dD are per-sequence f32 partials (W sums them: mamba_W_alog); v1 keeps
 * x_proj's whole output for W (dt_proj reads its first R columns in place).
 * The scratch of F and W and the scratch of B share one buffer.  Under
 * recompute=selective (rt_shape.sel) the chunk states are not stashed but
 * kept in the scratch, beside both: B starts by running F's scan kernel
 * again on the stashed inputs (its y into B's dys, which B writes later),
 * which gives F's states bit for bit. */
#include "dev.h"

#define TRY(call)                                                                        \
	do {                                                                                 \
		int rc_ = (call);                                                                \
		if (rc_)                                                                         \
			return rc_;                                                                  \
	} while (0)

/* F -> B.  zx: in_proj's output, [z | x B C | dt] (v2) or [x | z] (v1);
 * cv the convolution before SiLU, xc after; v = dt's pre-activation. */
typedef struct mb_act {
	void *xhat;
	float *r;
	void *zx, *cv, *xc, *v;
	float *dt; /* softplus(v) in f32 even in bf16: it scales A in exp(dt A) */
	float *ck; /* [nb][mh][nck][P][N]: the state entering each chunk (none under selective) */
	void *ys;
	void *yhat; /* v2: the gated norm's output before its scale */
	float *gr;  /* v2: its 1/rms per (row, group) */
	void *xdbl; /* v1: x_proj's output [dt_low | B | C] */
} mb_act;

/* B -> W. */
typedef struct mb_ws {
	void *xhat, *du, *dy;
	void *yo;   /* out_proj's input before the gated norm's scale (v2: yhat; v1: the gated y) */
	void *dyn;  /* v2: the gradient of the gated norm's output */
	void *dzx;  /* the gradient of in_proj's output */
	void *xpre; /* the convolution's input, packed [T][cd] */
	void *dcv;
	float *dA; /* [nb][mh][N] (v1: mh = di channels) */
	float *dD; /* [nb][mh] */
	void *xc, *xdbl, *dxdbl, *dv; /* v1: x_proj's and dt_proj's inputs and output gradients */
} mb_ws;

/* Scratch: u, yn in F and W; the rest in B, over the same bytes. */
typedef struct mb_scr {
	void *u, *yn;
	void *dyg, *dys, *dxbc;
	float *dbp, *dcp; /* the scan's dB, dC per head [T][mh][N], before scan_reduce */
	float *ddt;       /* [T][mh] */
	float *ck;        /* selective: the chunk states, F's and B's again */
} mb_scr;

static void mb_map(const rt_shape *s, size_t esz, dev_carve *ca, mb_act *a, dev_carve *cw,
                   mb_ws *w, dev_carve *cs, mb_scr *x)
{
	size_t T = (size_t)s->T, H = (size_t)s->H, di = (size_t)s->di, cd = (size_t)s->cd;
	size_t dip = (size_t)s->dip, mh = (size_t)s->mh, N = (size_t)s->N, nb = (size_t)s->nb;
	bool v1 = s->ver == 1;
	size_t xd = v1 ? (size_t)(s->R + 2 * s->N) : 0, di2 = v1 ? 0 : di, di1 = v1 ? di : 0;
	size_t ck = nb * mh * (size_t)s->nck * (size_t)(s->P * s->N), f = sizeof(float);
	*a = (mb_act){dev_take(ca, T * H * esz),   dev_take(ca, T * f),
	              dev_take(ca, T * dip * esz), dev_take(ca, T * cd * esz),
	              dev_take(ca, T * cd * esz),  dev_take(ca, T * mh * esz),
	              dev_take(ca, T * mh * f),    dev_take(ca, s->sel ? 0 : ck * f),
	              dev_take(ca, T * di * esz),  dev_take(ca, T * di2 * esz),
	              dev_take(ca, v1 ? 0 : T * (size_t)s->G * f), dev_take(ca, T * xd * esz)};
	*w = (mb_ws){dev_take(cw, T * H * esz),   dev_take(cw, T * H * esz),
	             dev_take(cw, T * H * esz),   dev_take(cw, T * di * esz),
	             dev_take(cw, T * di2 * esz), dev_take(cw, T * dip * esz),
	             dev_take(cw, T * cd * esz),  dev_take(cw, T * cd * esz),
	             dev_take(cw, nb * mh * N * f), dev_take(cw, nb * mh * f),
	             dev_take(cw, T * di1 * esz), dev_take(cw, T * xd * esz),
	             dev_take(cw, T * xd * esz),  dev_take(cw, T * di1 * esz)};
	x->ck = dev_take(cs, s->sel ? ck * f : 0);
	dev_carve fw = *cs, b = *cs;
	x->u = dev_take(&fw, T * H * esz);
	x->yn = dev_take(&fw, T * di * esz);
	x->dyg = dev_take(&b, T * di1 * esz); /* v2: out_proj's dx goes to ws.dyn */
	x->dys = dev_take(&b, T * di * esz);
	x->dxbc = dev_take(&b, T * cd * esz);
	x->dbp = dev_take(&b, T * mh * N * f);
	x->dcp = dev_take(&b, T * mh * N * f);
	x->ddt = dev_take(&b, T * mh * f);
	cs->off = fw.off > b.off ? fw.off : b.off;
}

static void mb_at(const rt_dev *d, const dev_layer *L, const dev_io *io, mb_act *a, mb_ws *w,
                  mb_scr *x)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	mb_map(&L->s, dev_esz(d), &ca, a, &cw, w, &cs, x);
}

int dev_mamba_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	mb_act a;
	mb_ws w;
	mb_scr x;
	mb_map(s, esz, &ca, &a, &cw, &w, &cs, &x);
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

static mb_scan scan_in(const rt_dev *d, const rt_shape *s, const mb_act *a)
{
	if (s->ver == 2)
		return (mb_scan){a->xc, dev_at(d, a->xc, s->di), dev_at(d, a->xc, s->di + s->G * s->N)};
	return (mb_scan){a->xc, dev_at(d, a->xdbl, s->R), dev_at(d, a->xdbl, s->R + s->N)};
}

static int copy(rt_dev *d, void *dst, const void *src, int64_t n)
{
	if (dst == src || n == 0)
		return RT_OK;
	return d->ops->copy(d, dst, src, (size_t)n * dev_esz(d), DEV_D2D);
}

int dev_mamba_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	bool v1 = s->ver == 1;
	mb_act a;
	mb_ws w;
	mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	void *convw = dev_param(d, L, MB_CONVW), *convb = dev_param(d, L, MB_CONVB);
	void *dtb = dev_param(d, L, MB_DTBIAS), *alog = dev_param(d, L, MB_ALOG);
	void *D = dev_param(d, L, MB_D), *ng = dev_param(d, L, MB_GNORM);
	void *cin = dev_at(d, a.zx, v1 ? 0 : di), *z = dev_at(d, a.zx, v1 ? di : 0);

	TRY(dev_norm_f(d, L, io->x, x.u, a.xhat, a.r));
	TRY(dev_proj(d, T, H, dip, x.u, H, dev_param(d, L, MB_WIN), 0, a.zx, dip));
	TRY(dev_each(d, L, "%s_F_conv", T * cd, (void *[]){&cin, &convw, &convb, &a.cv, &a.xc}));
	void *dtsrc = a.v; /* v1: dt_proj's output, biased in place */
	if (v1) {
		int64_t R = s->R, xd = R + 2 * s->N;
		TRY(dev_proj(d, T, di, xd, a.xc, di, dev_param(d, L, MB_XPROJ), 0, a.xdbl, xd));
		TRY(dev_proj(d, T, R, di, a.xdbl, xd, dev_param(d, L, MB_DTPROJ), 0, a.v, di));
	} else {
		dtsrc = dev_at(d, a.zx, di + cd);
	}
	TRY(dev_each(d, L, "%s_F_dt", T * mh, (void *[]){&dtsrc, &dtb, &a.v, &a.dt}));
	mb_scan sc = scan_in(d, s, &a);
	float *ck = s->sel ? x.ck : a.ck;
	TRY(dev_each(d, L, "%s_F_scan", s->nb * mh * s->P,
	             (void *[]){&sc.x, &sc.B, &sc.C, &a.dt, &alog, &D, &a.ys, &ck}));
	if (v1)
		TRY(dev_each(d, L, "%s_F_gate", T * di, (void *[]){&a.ys, &z, &x.yn}));
	else
		TRY(dev_rows(d, L, "%s_F_gnorm", T * s->G,
		             (void *[]){&a.ys, &z, &ng, &a.yhat, &a.gr, &x.yn}));
	/* y = x + out_proj(yn); x was last read by the norm, so y may be x. */
	TRY(copy(d, io->y, io->x, T * H));
	return dev_proj(d, T, di, H, x.yn, di, dev_param(d, L, MB_WOUT), 1, io->y, H);
}

int dev_mamba_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	int64_t N = s->N, R = s->R, xd = R + 2 * N;
	bool v1 = s->ver == 1;
	mb_act a;
	mb_ws w;
	mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	void *convw = dev_param(d, L, MB_CONVW), *alog = dev_param(d, L, MB_ALOG);
	void *D = dev_param(d, L, MB_D), *ng = dev_param(d, L, MB_GNORM);
	void *wout = dev_param(d, L, MB_WOUT);
	void *cin = dev_at(d, a.zx, v1 ? 0 : di), *z = dev_at(d, a.zx, v1 ? di : 0);
	void *dcin = dev_at(d, w.dzx, v1 ? 0 : di), *dz = dev_at(d, w.dzx, v1 ? di : 0);
	mb_scan sc = scan_in(d, s, &a);
	float *ck = s->sel ? x.ck : a.ck;

	/* Selective: F's chunk states again, by F's kernel on F's inputs. */
	if (s->sel)
		TRY(dev_each(d, L, "%s_F_scan", s->nb * mh * s->P,
		             (void *[]){&sc.x, &sc.B, &sc.C, &a.dt, &alog, &D, &x.dys, &ck}));
	/* dy first: dx may be dy, and dy is the norm's residual and W's. */
	TRY(copy(d, w.dy, io->dy, T * H));
	TRY(copy(d, w.xhat, a.xhat, T * H));
	/* out_proj, then the gate (and v2's gated norm): dys and z's part of dzx. */
	if (v1) {
		TRY(dev_proj_dx(d, T, di, H, w.dy, H, wout, 0, x.dyg, di));
		TRY(dev_each(d, L, "%s_B_gate", T * di, (void *[]){&x.dyg, &a.ys, &z, &x.dys, &dz}));
		TRY(dev_each(d, L, "%s_F_gate", T * di, (void *[]){&a.ys, &z, &w.yo}));
	} else {
		TRY(dev_proj_dx(d, T, di, H, w.dy, H, wout, 0, w.dyn, di));
		TRY(copy(d, w.yo, a.yhat, T * di));
		TRY(dev_rows(d, L, "%s_B_gnorm", T * s->G,
		             (void *[]){&w.dyn, &ng, &a.yhat, &a.gr, &a.ys, &z, &x.dys, &dz}));
	}
	/* The scan: dx into dxbc; dB, dC summed over a group's heads into dxbc
	 * (v2) or x_proj's output gradient (v1); ddt to dt's pre-activation. */
	if (s->P > 1024)
		return dev_fail(d, RT_EINVAL, "mamba layer: head_dim %lld over 1024, the threads of "
		                "one scan block", (long long)s->P);
	TRY(dev_run(d, L, "%s_B_scan", (unsigned)(s->nb * mh), (unsigned)s->P,
	            (void *[]){&sc.x, &sc.B, &sc.C, &a.dt, &alog, &D, &x.dys, &ck, &x.dxbc, &x.dbp,
	                       &x.dcp, &x.ddt, &w.dA, &w.dD}));
	void *dB = v1 ? dev_at(d, w.dxdbl, R) : dev_at(d, x.dxbc, di);
	void *dC = v1 ? dev_at(d, w.dxdbl, R + N) : dev_at(d, x.dxbc, di + s->G * N);
	TRY(dev_each(d, L, "%s_B_reduce", T * s->G * N, (void *[]){&x.dbp, &x.dcp, &dB, &dC}));
	void *dv = v1 ? w.dv : dev_at(d, w.dzx, di + cd);
	TRY(dev_each(d, L, "%s_B_dt", T * mh, (void *[]){&x.ddt, &a.v, &dv}));
	if (v1) {
		TRY(dev_proj_dx(d, T, R, di, w.dv, di, dev_param(d, L, MB_DTPROJ), 0, w.dxdbl, xd));
		TRY(dev_proj_dx(d, T, di, xd, w.dxdbl, xd, dev_param(d, L, MB_XPROJ), 1, x.dxbc, di));
		TRY(copy(d, w.xc, a.xc, T * di));
		TRY(copy(d, w.xdbl, a.xdbl, T * xd));
	}
	/* The convolution (its input packed for W), in_proj, the norm. */
	TRY(dev_each(d, L, "%s_B_dcv", T * cd, (void *[]){&x.dxbc, &a.cv, &w.dcv}));
	TRY(dev_each(d, L, "%s_B_xpre", T * cd, (void *[]){&cin, &w.xpre}));
	TRY(dev_each(d, L, "%s_B_conv", T * cd, (void *[]){&w.dcv, &convw, &dcin}));
	TRY(dev_proj_dx(d, T, H, dip, w.dzx, dip, dev_param(d, L, MB_WIN), 0, w.du, H));
	return dev_norm_b(d, L, w.du, a.xhat, a.r, w.dy, io->dx);
}

int dev_mamba_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	int64_t T = s->T, H = s->H, di = s->di, cd = s->cd, dip = s->dip, mh = s->mh;
	bool v1 = s->ver == 1;
	mb_act a;
	mb_ws w;
	mb_scr x;
	mb_at(d, L, io, &a, &w, &x);
	void *alog = dev_param(d, L, MB_ALOG), *ng = dev_param(d, L, MB_GNORM);
	float *gconvw = dev_grad(L, MB_CONVW), *gconvb = dev_grad(L, MB_CONVB);
	float *gdtb = dev_grad(L, MB_DTBIAS), *galog = dev_grad(L, MB_ALOG), *gD = dev_grad(L, MB_D);

	TRY(dev_norm_scale(d, L, w.xhat, x.u));
	TRY(dev_norm_w(d, L, w.du, w.xhat));
	TRY(dev_proj_dw(d, T, H, dip, x.u, H, w.dzx, dip, dev_grad(L, MB_WIN)));
	TRY(dev_each(d, L, "%s_W_conv", cd, (void *[]){&w.dcv, &w.xpre, &gconvw, &gconvb}));
	void *dv = v1 ? w.dv : dev_at(d, w.dzx, di + cd);
	TRY(dev_each(d, L, "%s_W_dtbias", mh, (void *[]){&dv, &gdtb}));
	TRY(dev_each(d, L, "%s_W_alog", v1 ? di * s->N : mh,
	             (void *[]){&w.dA, &w.dD, &alog, &galog, &gD}));
	if (v1) {
		int64_t R = s->R, xd = R + 2 * s->N;
		TRY(dev_proj_dw(d, T, di, xd, w.xc, di, w.dxdbl, xd, dev_grad(L, MB_XPROJ)));
		TRY(dev_proj_dw(d, T, R, di, w.xdbl, xd, w.dv, di, dev_grad(L, MB_DTPROJ)));
		return dev_proj_dw(d, T, di, H, w.yo, di, w.dy, H, dev_grad(L, MB_WOUT));
	}
	float *gng = dev_grad(L, MB_GNORM);
	TRY(dev_each(d, L, "%s_W_gnorm", di, (void *[]){&w.dyn, &w.yo, &gng}));
	TRY(dev_each(d, L, "%s_W_gscale", T * di, (void *[]){&w.yo, &ng, &x.yn}));
	return dev_proj_dw(d, T, di, H, x.yn, di, w.dy, H, dev_grad(L, MB_WOUT));
}
