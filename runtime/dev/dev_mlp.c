/* dev_mlp.c: the mlp on the device (kernels_mlp.inc's mlp_*, docs/layers.md),
 * and the feed-forward block it shares with the moe (dev_ffn.h).
 *
 * Stashes, in the order carved (each piece 256-byte aligned; `real` is the
 * storage type, r f32):
 *   act:     xhat [T][H], r [T], a [T][F], b [T][F] (gated);
 *   ws:      xhat, du, dy [T][H], h, da [T][F], db [T][F] (gated);
 *   scratch: u [T][H], h [T][F], du32 [T][H] f32 (bf16 only: B's gate
 *            and up projections summed in f32, rounded once into du).
 * The CPU's, with r in f32. */
#include "dev_ffn.h"

/* ---- the feed-forward block ------------------------------------------------ */

static int ffn_up(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *X,
                  void *a, void *b)
{
	int64_t H = L->s.H;
	int rc = dev_proj(d, n, H, w->F, X, H, w->w1, 0.f, a, w->F);
	if (!rc && w->wu)
		rc = dev_proj(d, n, H, w->F, X, H, w->wu, 0.f, b, w->F);
	return rc;
}

int dev_ffn_act_f(rt_dev *d, const dev_layer *L, int64_t m, const void *a, const void *b, void *h)
{
	return dev_each(d, L, "%s_F_act", m, (void *[]){&a, &b, &h, &m});
}

/* da holds dh on entry (the kernel reads each element before it writes it). */
int dev_ffn_act_b(rt_dev *d, const dev_layer *L, int64_t m, const void *a, const void *b, void *h,
                  void *da, void *db)
{
	const void *dh = da;
	int rc = dev_each(d, L, "%s_B_act", m, (void *[]){&dh, &a, &b, &da, &db, &m});
	return rc ? rc : dev_ffn_act_f(d, L, m, a, b, h);
}

static int ffn_dx(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *da,
                  const void *db, float beta, float *dX)
{
	int64_t H = L->s.H;
	int rc = dev_proj_dx_f32(d, n, H, w->F, da, w->F, w->w1, beta, dX, H);
	if (!rc && w->wu)
		rc = dev_proj_dx_f32(d, n, H, w->F, db, w->F, w->wu, 1.f, dX, H);
	return rc;
}

int dev_ffn_f(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *X, void *a,
              void *b, void *h, float beta, void *Y)
{
	int64_t H = L->s.H;
	int rc = ffn_up(d, L, n, w, X, a, b);
	if (!rc)
		rc = dev_ffn_act_f(d, L, n * w->F, a, b, h);
	if (!rc)
		rc = dev_proj(d, n, w->F, H, h, w->F, w->wd, beta, Y, H);
	return rc;
}

int dev_ffn_b(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *dY,
              const void *a, const void *b, void *h, void *da, void *db, float beta, float *dX)
{
	int64_t H = L->s.H;
	int rc = dev_proj_dx(d, n, w->F, H, dY, H, w->wd, 0.f, da, w->F);
	if (!rc)
		rc = dev_ffn_act_b(d, L, n * w->F, a, b, h, da, db);
	if (!rc)
		rc = ffn_dx(d, L, n, w, da, db, beta, dX);
	return rc;
}

int dev_ffn_w(rt_dev *d, const dev_layer *L, int64_t n, const dev_ffn *w, const void *X,
              const void *dY, const void *h, const void *da, const void *db, const dev_ffn_grad *g)
{
	int64_t H = L->s.H;
	int rc = dev_proj_dw(d, n, w->F, H, h, w->F, dY, H, g->wd);
	if (!rc)
		rc = dev_proj_dw(d, n, H, w->F, X, H, da, w->F, g->w1);
	if (!rc && w->wu)
		rc = dev_proj_dw(d, n, H, w->F, X, H, db, w->F, g->wu);
	return rc;
}

/* ---- the mlp ----------------------------------------------------------------- */

typedef struct mlp_bufs {
	void *xhat, *a, *b; /* act */
	float *r;
	void *wxhat, *du, *dy, *h, *da, *db; /* ws */
	void *u, *xh;                        /* scratch: u, F's h */
	float *du32;                         /* scratch, bf16: du's accumulator */
} mlp_bufs;

static void mlp_map(const rt_shape *s, size_t esz, dev_carve *ca, dev_carve *cw, dev_carve *cs,
                    mlp_bufs *m)
{
	size_t T = (size_t)s->T, H = (size_t)s->H, F = (size_t)s->F, Fb = s->gated ? F : 0;
	m->xhat = dev_take(ca, T * H * esz);
	m->r = dev_take(ca, T * sizeof(float));
	m->a = dev_take(ca, T * F * esz);
	m->b = dev_take(ca, T * Fb * esz);
	m->wxhat = dev_take(cw, T * H * esz);
	m->du = dev_take(cw, T * H * esz);
	m->dy = dev_take(cw, T * H * esz);
	m->h = dev_take(cw, T * F * esz);
	m->da = dev_take(cw, T * F * esz);
	m->db = dev_take(cw, T * Fb * esz);
	m->u = dev_take(cs, T * H * esz);
	m->xh = dev_take(cs, T * F * esz);
	m->du32 = dev_take(cs, esz < sizeof(float) ? T * H * sizeof(float) : 0);
}

static void mlp_bind(const rt_dev *d, const dev_layer *L, const dev_io *io, mlp_bufs *m)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	mlp_map(&L->s, dev_esz(d), &ca, &cw, &cs, m);
}

static dev_ffn mlp_ffn(const rt_dev *d, const dev_layer *L)
{
	return (dev_ffn){L->s.F, dev_param(d, L, FF_W1), L->s.gated ? dev_param(d, L, FF_WU) : NULL,
	                 dev_param(d, L, FF_WD)};
}

int dev_mlp_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	mlp_bufs m;
	mlp_map(s, esz, &ca, &cw, &cs, &m);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* y = x + ffn(norm(x)); x is read only by the norm, so y may be x. */
int dev_mlp_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	mlp_bufs m;
	mlp_bind(d, L, io, &m);
	dev_ffn w = mlp_ffn(d, L);
	int64_t T = L->s.T, H = L->s.H;
	int rc = dev_norm_f(d, L, io->x, m.u, m.xhat, m.r);
	if (!rc && io->y != io->x)
		rc = d->ops->copy(d, io->y, io->x, (size_t)(T * H) * dev_esz(d), DEV_D2D);
	if (!rc)
		rc = dev_ffn_f(d, L, T, &w, m.u, m.a, m.b, m.xh, 1.f, io->y);
	return rc;
}

/* dy goes to the W stash first: dx may be dy. */
int dev_mlp_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	mlp_bufs m;
	mlp_bind(d, L, io, &m);
	dev_ffn w = mlp_ffn(d, L);
	int64_t T = L->s.T, H = L->s.H;
	size_t bytes = (size_t)(T * H) * dev_esz(d);
	int rc = d->ops->copy(d, m.dy, io->dy, bytes, DEV_D2D);
	if (!rc)
		rc = d->ops->copy(d, m.wxhat, m.xhat, bytes, DEV_D2D);
	float b0, *acc = dev_acc_begin(d, m.du, m.du32, 0.f, &b0);
	if (!rc)
		rc = dev_ffn_b(d, L, T, &w, m.dy, m.a, m.b, m.h, m.da, m.db, b0, acc);
	if (!rc)
		rc = dev_acc_end(d, L, acc, m.du, T * H, 0.f);
	if (!rc)
		rc = dev_norm_b(d, L, m.du, m.xhat, m.r, m.dy, io->dx);
	return rc;
}

int dev_mlp_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	mlp_bufs m;
	mlp_bind(d, L, io, &m);
	dev_ffn w = mlp_ffn(d, L);
	dev_ffn_grad g = {dev_grad(L, FF_W1), L->s.gated ? dev_grad(L, FF_WU) : NULL,
	                  dev_grad(L, FF_WD)};
	int rc = dev_norm_scale(d, L, m.wxhat, m.u);
	if (!rc)
		rc = dev_norm_w(d, L, m.du, m.wxhat);
	if (!rc)
		rc = dev_ffn_w(d, L, L->s.T, &w, m.u, m.dy, m.h, m.da, m.db, &g);
	return rc;
}
