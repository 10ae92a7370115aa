/* dev_head.c: the head on the device (kernels_head.inc's head_*,
 * docs/layers.md): F the logits z = norm(x) w, their log-sum-exp and the
 * cross-entropy sum; B recomputes z (T x V is not stashed) and turns it
 * into dz in place; W the two weight gradients.
 *
 * Stashes (`real` the storage type):
 *   act:     xhat [T][H], r [T] (f32), lse [T] (f32), tgt [T] (i32);
 *   ws:      xhat, du [T][H], dz [T][V];
 *   scratch: u [T][H], z [T][V], ce [T] (f32).
 * A target >= V counts in the loss with ce 0 (the CPU refuses it). */
#include "dev.h"

typedef struct head_bufs {
	void *xhat; /* act */
	float *r, *lse;
	int32_t *tgt;
	void *wxhat, *du, *dz; /* ws */
	void *u, *z;           /* scratch */
	float *ce;
} head_bufs;

static void head_map(const rt_shape *s, size_t esz, dev_carve *ca, dev_carve *cw, dev_carve *cs,
                     head_bufs *m)
{
	size_t T = (size_t)s->T, H = (size_t)s->H, V = (size_t)s->V;
	m->xhat = dev_take(ca, T * H * esz);
	m->r = dev_take(ca, T * sizeof(float));
	m->lse = dev_take(ca, T * sizeof(float));
	m->tgt = dev_take(ca, T * sizeof(int32_t));
	m->wxhat = dev_take(cw, T * H * esz);
	m->du = dev_take(cw, T * H * esz);
	m->dz = dev_take(cw, T * V * esz);
	m->u = dev_take(cs, T * H * esz);
	m->z = dev_take(cs, T * V * esz);
	m->ce = dev_take(cs, T * sizeof(float));
}

static void head_bind(const rt_dev *d, const dev_layer *L, const dev_io *io, head_bufs *m)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	head_map(&L->s, dev_esz(d), &ca, &cw, &cs, m);
}

int dev_head_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	head_bufs m;
	head_map(s, esz, &ca, &cw, &cs, &m);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* The head's weight is w [H][V], or, tied, the embedding's table [V][H]
 * (kernels_head.inc): the same products with it transposed. */
static int logits(rt_dev *d, const dev_layer *L, const void *u, const void *w, void *z)
{
	int64_t T = L->s.T, H = L->s.H, V = L->s.V;
	return L->s.tied ? dev_mm(d, false, true, T, V, H, u, H, w, H, 0.f, z, V, false)
	                 : dev_proj(d, T, H, V, u, H, w, 0.f, z, V);
}

int dev_head_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	head_bufs m;
	head_bind(d, L, io, &m);
	int64_t T = L->s.T;
	double *loss = io->loss;
	int rc = dev_norm_f(d, L, io->x, m.u, m.xhat, m.r);
	if (!rc)
		rc = logits(d, L, m.u, dev_param(d, L, HD_W), m.z);
	if (!rc)
		rc = d->ops->copy(d, m.tgt, io->tok, (size_t)T * sizeof(int32_t), DEV_D2D);
	if (!rc)
		rc = dev_rows(d, L, "%s_F_lse", T, (void *[]){&m.z, &m.tgt, &m.lse, &m.ce});
	if (!rc)
		rc = dev_run(d, L, "%s_F_loss", 1, 1, (void *[]){&m.ce, &m.tgt, &loss});
	return rc;
}

int dev_head_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	head_bufs m;
	head_bind(d, L, io, &m);
	int64_t T = L->s.T, H = L->s.H, V = L->s.V;
	const void *w = dev_param(d, L, HD_W);
	float dscale = io->dscale;
	int rc = d->ops->copy(d, m.wxhat, m.xhat, (size_t)(T * H) * dev_esz(d), DEV_D2D);
	if (!rc)
		rc = dev_norm_scale(d, L, m.xhat, m.u);
	if (!rc)
		rc = logits(d, L, m.u, w, m.dz);
	if (!rc)
		rc = dev_each(d, L, "%s_B_dz", T * V, (void *[]){&m.dz, &m.lse, &m.tgt, &dscale});
	if (!rc)
		rc = L->s.tied ? dev_mm(d, false, false, T, H, V, m.dz, V, w, H, 0.f, m.du, H, false)
		               : dev_proj_dx(d, T, H, V, m.dz, V, w, 0.f, m.du, H);
	if (!rc)
		rc = dev_norm_b(d, L, m.du, m.xhat, m.r, NULL, io->dx);
	return rc;
}

int dev_head_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	head_bufs m;
	head_bind(d, L, io, &m);
	int64_t T = L->s.T, H = L->s.H, V = L->s.V;
	int rc = dev_norm_scale(d, L, m.wxhat, m.u);
	if (!rc)
		rc = dev_norm_w(d, L, m.du, m.wxhat);
	if (!rc)
		rc = L->s.tied ? dev_mm(d, true, false, V, H, T, m.dz, V, m.u, H, 1.f, dev_grad(L, HD_W),
		                        H, true)
		               : dev_proj_dw(d, T, H, V, m.u, H, m.dz, V, dev_grad(L, HD_W));
	return rc;
}
