/* dev_moe.c: the mixture of experts on the device (kernels_moe.inc's moe_*,
 * docs/layers.md): the router GEMM, routing and layout kernels, the experts
 * as grouped GEMMs over their rows of the gathered buffers (the
 * activations once over all rows), the shared experts as one MLP.
 *
 * The layout (moe_F_layout, a stable counting sort by expert) leaves each
 * expert's rows off[e]..off[e+1] on the device, and the grouped GEMMs
 * (cuda_lib.cu's moe_gmm, moe_gmm_w) read them there: one launch runs a
 * product for every expert, its grid sized by a bound the host knows (at
 * most ceil(T K / 64) + E row tiles), so a MoE layer makes no host
 * synchronisation and no copy to the host.  The layout is valid by
 * construction (moe_route picks experts in [0, E)); the products clamp the
 * rows they take to [0, T K], so that a corrupt one cannot reach outside
 * the buffers.
 *
 * Stashes (`real` the storage type; TK = T K; Fb, SFb = F, SF when gated,
 * else 0):
 *   act:     xhat [T][H], r [T] (f32), p [T][E] (f32), w [TK] (f32),
 *            a [TK][F], b [TK][Fb], Y [TK][H], sa [T][SF], sb [T][SFb],
 *            sel, slot, rowtok [TK] (i32), off [E+1] (i32);
 *   ws:      xhat, du, dy [T][H], dr [T][E], dY [TK][H], h, da [TK][F],
 *            db [TK][Fb], sh, sda [T][SF], sdb [T][SFb], rowtok [TK] (i32),
 *            off [E+1] (i32);
 *   scratch: u [T][H], logits [T][E], X [TK][H], h [TK][F], sh [T][SF],
 *            dX [TK][H] (f32: an expert's gate and up terms summed in
 *            f32, and du's terms with them rounded once by the scatter);
 * and with shared_gate, at the ends (a layer without it keeps its layout):
 * act so [T][H] (the shared output before the gate), g [T] (f32); ws sdy
 * [T][H] (g dy, the shared MLP's output gradient), sdz [T] (the gate's
 * pre-activation gradient); scratch z [T] (u . gate); then, in bf16 only,
 * scratch du32 [T][H] f32 (du's router and shared terms, which the
 * scatter adds to the experts' and rounds). */
#include "dev_ffn.h"

typedef struct moe_bufs {
	void *xhat, *a, *b, *ye, *sa, *sb; /* act */
	float *r, *p, *w;
	int32_t *sel, *slot, *rowtok, *off;
	void *wxhat, *du, *dy, *dr, *dyg, *h, *da, *db, *sh, *sda, *sdb; /* ws */
	int32_t *wrowtok, *woff;
	void *u, *logit, *xg, *xh, *xsh;       /* scratch (xh, xsh: F's h, sh) */
	float *dxg, *du32;
	void *so, *sdy, *sdz, *sz;             /* shared_gate */
	float *sg;
} moe_bufs;

static void moe_map(const rt_shape *s, size_t esz, dev_carve *ca, dev_carve *cw, dev_carve *cs,
                    moe_bufs *m)
{
	size_t T = (size_t)s->T, H = (size_t)s->H, F = (size_t)s->F, E = (size_t)s->E;
	size_t TK = T * (size_t)s->K, SF = (size_t)s->SF;
	size_t Fb = s->gated ? F : 0, SFb = s->gated ? SF : 0, i4 = sizeof(int32_t);
	size_t G = s->sgate ? T : 0;
	m->xhat = dev_take(ca, T * H * esz);
	m->r = dev_take(ca, T * sizeof(float));
	m->p = dev_take(ca, T * E * sizeof(float));
	m->w = dev_take(ca, TK * sizeof(float));
	m->a = dev_take(ca, TK * F * esz);
	m->b = dev_take(ca, TK * Fb * esz);
	m->ye = dev_take(ca, TK * H * esz);
	m->sa = dev_take(ca, T * SF * esz);
	m->sb = dev_take(ca, T * SFb * esz);
	m->sel = dev_take(ca, TK * i4);
	m->slot = dev_take(ca, TK * i4);
	m->rowtok = dev_take(ca, TK * i4);
	m->off = dev_take(ca, (E + 1) * i4);
	m->so = dev_take(ca, G * H * esz);
	m->sg = dev_take(ca, G * sizeof(float));
	m->wxhat = dev_take(cw, T * H * esz);
	m->du = dev_take(cw, T * H * esz);
	m->dy = dev_take(cw, T * H * esz);
	m->dr = dev_take(cw, T * E * esz);
	m->dyg = dev_take(cw, TK * H * esz);
	m->h = dev_take(cw, TK * F * esz);
	m->da = dev_take(cw, TK * F * esz);
	m->db = dev_take(cw, TK * Fb * esz);
	m->sh = dev_take(cw, T * SF * esz);
	m->sda = dev_take(cw, T * SF * esz);
	m->sdb = dev_take(cw, T * SFb * esz);
	m->wrowtok = dev_take(cw, TK * i4);
	m->woff = dev_take(cw, (E + 1) * i4);
	m->sdy = dev_take(cw, G * H * esz);
	m->sdz = dev_take(cw, G * esz);
	m->u = dev_take(cs, T * H * esz);
	m->logit = dev_take(cs, T * E * esz);
	m->xg = dev_take(cs, TK * H * esz);
	m->xh = dev_take(cs, TK * F * esz);
	m->xsh = dev_take(cs, T * SF * esz);
	m->dxg = dev_take(cs, TK * H * sizeof(float));
	m->sz = dev_take(cs, G * esz);
	m->du32 = dev_take(cs, esz < sizeof(float) ? T * H * sizeof(float) : 0);
}

static void moe_bind(const rt_dev *d, const dev_layer *L, const dev_io *io, moe_bufs *m)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	moe_map(&L->s, dev_esz(d), &ca, &cw, &cs, m);
}

int dev_moe_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	moe_bufs m;
	moe_map(s, esz, &ca, &cw, &cs, &m);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* cuda_lib.cu's constants, which the launches must match: the grouped
 * GEMMs' tile (GM_BM = GM_BN) and block (GM_THREADS), the routing's block
 * (MOE_RT, a warp per token) and the layout's (MOE_LT). */
enum { GM_TILE = 64, GM_THREADS = 128, MOE_RT = 256, MOE_LT = 256 };

static int64_t tiles(int64_t n)
{
	return (n + GM_TILE - 1) / GM_TILE;
}

/* C = beta C + A W_e on every expert's rows, N columns (moe_gmm: fn one of
 * %s_F_up, _F_down, _B_dh, _B_dx); w the experts' first matrix. */
static int moe_gmm(rt_dev *d, const dev_layer *L, const char *fn, int64_t N, const int32_t *off,
                   const void *a, const void *w, void *c, int beta)
{
	int64_t grid = (tiles(L->s.T * L->s.K) + L->s.E) * tiles(N);
	return dev_run(d, L, fn, (unsigned)grid, GM_THREADS, (void *[]){&off, &a, &w, &c, &beta});
}

/* G_e += A_e^T B_e, [M][N] each expert (moe_gmm_w: %s_W_dw, _W_dwd). */
static int moe_gmm_w(rt_dev *d, const dev_layer *L, const char *fn, int64_t M, int64_t N,
                     const int32_t *off, const void *a, const void *b, float *g)
{
	int64_t grid = L->s.E * tiles(M) * tiles(N);
	return dev_run(d, L, fn, (unsigned)grid, GM_THREADS, (void *[]){&off, &a, &b, &g});
}

static dev_ffn moe_shared(const rt_dev *d, const dev_layer *L)
{
	return (dev_ffn){L->s.SF, dev_param(d, L, MOE_SW1),
	                 L->s.gated ? dev_param(d, L, MOE_SWU) : NULL, dev_param(d, L, MOE_SWD)};
}

int dev_moe_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	moe_bufs m;
	moe_bind(d, L, io, &m);
	int64_t T = s->T, H = s->H, E = s->E, F = s->F, TK = T * s->K;
	void *y = io->y;
	int rc = dev_norm_f(d, L, io->x, m.u, m.xhat, m.r);
	if (!rc)
		rc = dev_proj(d, T, H, E, m.u, H, dev_param(d, L, MOE_ROUTER), 0.f, m.logit, E);
	if (!rc)
		rc = dev_run(d, L, "%s_F_route", (unsigned)((T + MOE_RT / 32 - 1) / (MOE_RT / 32)), MOE_RT,
		             (void *[]){&m.logit, &m.p, &m.w, &m.sel});
	if (!rc)
		rc = dev_run(d, L, "%s_F_layout", 1, MOE_LT, (void *[]){&m.sel, &m.off, &m.slot, &m.rowtok});
	if (!rc)
		rc = dev_each(d, L, "%s_F_gather", TK * H, (void *[]){&m.u, &m.rowtok, &m.xg});
	/* y = x + shared(u) (times sigmoid(u . gate) with shared_gate) + the
	 * routed outputs, in that order; x is read only by the norm, so y may
	 * be x. */
	if (!rc && y != io->x)
		rc = d->ops->copy(d, y, io->x, (size_t)(T * H) * dev_esz(d), DEV_D2D);
	if (!rc && s->SF) {
		dev_ffn sw = moe_shared(d, L);
		rc = dev_ffn_f(d, L, T, &sw, m.u, m.sa, m.sb, m.xsh, s->sgate ? 0.f : 1.f,
		               s->sgate ? m.so : y);
	}
	if (!rc && s->sgate)
		rc = dev_proj(d, T, H, 1, m.u, H, dev_param(d, L, MOE_SGATE), 0.f, m.sz, 1);
	if (!rc && s->sgate)
		rc = dev_each(d, L, "%s_F_sgate", T * H, (void *[]){&m.sz, &m.so, &m.sg, &y});
	if (!rc)
		rc = moe_gmm(d, L, "%s_F_up", F, m.off, m.xg, dev_param(d, L, MOE_W1), m.a, 0);
	if (!rc && s->gated)
		rc = moe_gmm(d, L, "%s_F_up", F, m.off, m.xg, dev_param(d, L, MOE_WU), m.b, 0);
	if (!rc)
		rc = dev_ffn_act_f(d, L, TK * F, m.a, m.b, m.xh);
	if (!rc)
		rc = moe_gmm(d, L, "%s_F_down", H, m.off, m.xh, dev_param(d, L, MOE_WD), m.ye, 0);
	if (!rc)
		rc = dev_each(d, L, "%s_F_combine", T * H, (void *[]){&m.w, &m.slot, &m.ye, &y});
	return rc;
}

/* dy goes to the W stash first: dx may be dy. */
int dev_moe_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	moe_bufs m;
	moe_bind(d, L, io, &m);
	int64_t T = s->T, H = s->H, E = s->E, F = s->F, TK = T * s->K;
	size_t bytes = (size_t)(T * H) * dev_esz(d);
	int rc = d->ops->copy(d, m.dy, io->dy, bytes, DEV_D2D);
	if (!rc)
		rc = d->ops->copy(d, m.wxhat, m.xhat, bytes, DEV_D2D);
	if (!rc)
		rc = d->ops->copy(d, m.wrowtok, m.rowtok, (size_t)TK * sizeof(int32_t), DEV_D2D);
	if (!rc)
		rc = d->ops->copy(d, m.woff, m.off, (size_t)(E + 1) * sizeof(int32_t), DEV_D2D);
	/* Through the combine: dY = w dy per row, dr through the renormalised
	 * softmax. */
	if (!rc)
		rc = dev_each(d, L, "%s_B_route", T,
		              (void *[]){&m.dy, &m.ye, &m.p, &m.w, &m.sel, &m.slot, &m.dyg, &m.dr});
	if (!rc)
		rc = moe_gmm(d, L, "%s_B_dh", F, m.off, m.dyg, dev_param(d, L, MOE_WD), m.da, 0);
	if (!rc)
		rc = dev_ffn_act_b(d, L, TK * F, m.a, m.b, m.h, m.da, m.db);
	/* The experts' dX in f32: the gate's and up's terms summed there. */
	if (!rc)
		rc = moe_gmm(d, L, "%s_B_dx", H, m.off, m.da, dev_param(d, L, MOE_W1), m.dxg, 0);
	if (!rc && s->gated)
		rc = moe_gmm(d, L, "%s_B_dx", H, m.off, m.db, dev_param(d, L, MOE_WU), m.dxg, 1);
	/* du = dr router^T + shared_B(dy, or g dy with the gate) + sdz gate^T
	 * + the experts' dX, in that order, summed in f32 and rounded once (by
	 * the scatter, which adds the experts' rows). */
	float b0, *acc = dev_acc_begin(d, m.du, m.du32, 0.f, &b0);
	if (!rc)
		rc = dev_proj_dx_f32(d, T, H, E, m.dr, E, dev_param(d, L, MOE_ROUTER), b0, acc, H);
	if (!rc && s->sgate)
		rc = dev_each(d, L, "%s_B_sgate", T, (void *[]){&m.dy, &m.so, &m.sg, &m.sdy, &m.sdz});
	if (!rc && s->SF) {
		dev_ffn sw = moe_shared(d, L);
		rc = dev_ffn_b(d, L, T, &sw, s->sgate ? m.sdy : m.dy, m.sa, m.sb, m.sh, m.sda, m.sdb,
		               1.f, acc);
	}
	if (!rc && s->sgate)
		rc = dev_proj_dx_f32(d, T, H, 1, m.sdz, 1, dev_param(d, L, MOE_SGATE), 1.f, acc, H);
	if (!rc)
		rc = dev_each(d, L, "%s_B_scatter", T * H, (void *[]){&m.slot, &m.dxg, &acc, &m.du});
	if (!rc)
		rc = dev_norm_b(d, L, m.du, m.xhat, m.r, m.dy, io->dx);
	return rc;
}

int dev_moe_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	const rt_shape *s = &L->s;
	moe_bufs m;
	moe_bind(d, L, io, &m);
	int64_t T = s->T, H = s->H, E = s->E, F = s->F, TK = T * s->K;
	int rc = dev_norm_scale(d, L, m.wxhat, m.u);
	if (!rc)
		rc = dev_norm_w(d, L, m.du, m.wxhat);
	if (!rc)
		rc = dev_proj_dw(d, T, H, E, m.u, H, m.dr, E, dev_grad(L, MOE_ROUTER));
	if (!rc)
		rc = dev_each(d, L, "%s_W_gather", TK * H, (void *[]){&m.u, &m.wrowtok, &m.xg});
	if (!rc)
		rc = moe_gmm_w(d, L, "%s_W_dwd", F, H, m.woff, m.h, m.dyg, dev_grad(L, MOE_WD));
	if (!rc)
		rc = moe_gmm_w(d, L, "%s_W_dw", H, F, m.woff, m.xg, m.da, dev_grad(L, MOE_W1));
	if (!rc && s->gated)
		rc = moe_gmm_w(d, L, "%s_W_dw", H, F, m.woff, m.xg, m.db, dev_grad(L, MOE_WU));
	if (!rc && s->SF) {
		dev_ffn sw = moe_shared(d, L);
		dev_ffn_grad sg = {dev_grad(L, MOE_SW1), s->gated ? dev_grad(L, MOE_SWU) : NULL,
		                   dev_grad(L, MOE_SWD)};
		rc = dev_ffn_w(d, L, T, &sw, m.u, s->sgate ? m.sdy : m.dy, m.sh, m.sda, m.sdb, &sg);
	}
	if (!rc && s->sgate)
		rc = dev_proj_dw(d, T, H, 1, m.u, H, m.sdz, 1, dev_grad(L, MOE_SGATE));
	return rc;
}
