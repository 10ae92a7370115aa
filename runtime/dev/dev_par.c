/* dev_par.c: the parallel layer on the device: the attention's and the
 * Mamba-2 mixer's F, B and W (dev_mix.h) on one pre-norm, as
 * kernels_par.inc composes the CPU's (docs/layers.md, "parallel"):
 * y = x + Attn(u) + Mamba(u), u = RMSNorm(x) g.
 *
 * The device layout: act: xhat [T][H], r [T] f32, then the attention's
 * stash and the mixer's without their norms' (each in its kind's layout,
 * dev_attn.c, dev_mamba.c); W stash: xhat, du, dy [T][H], then the
 * attention's and the mixer's likewise; scratch: u [T][H], then the
 * attention's and the mixer's from the same offset (they run one after
 * the other), so its size is u's plus the larger.  Under selective the
 * mixer's chunk states lie in its scratch as a Mamba layer's: F writes
 * them after the attention's F, B makes them again after the attention's
 * B.
 *
 * The module's entry points: parallel_F_norm ... (the shared norm), and
 * the attention's and the mixer's under their own names.  The mixer reads
 * its tensors through a view of the layer whose MB_* slots are the
 * parallel layer's from PAR_MB on. */
#include "dev_mix.h"

typedef struct par_bufs {
	void *xhat;
	float *r;
	dev_attn_act aa;
	dev_attn_ws aw;
	dev_attn_scr ax;
	dev_mb_act ma;
	dev_mb_ws mw;
	dev_mb_scr mx;
	float *du32;
} par_bufs;

static void par_map(const rt_shape *s, size_t esz, dev_carve *ca, dev_carve *cw, dev_carve *cs,
                    par_bufs *p)
{
	size_t th = (size_t)(s->T * s->H) * esz;
	p->xhat = dev_take(ca, th);
	p->r = dev_take(ca, (size_t)s->T * sizeof(float));
	void *wxhat = dev_take(cw, th), *du = dev_take(cw, th), *dy = dev_take(cw, th);
	void *u = dev_take(cs, th);
	p->du32 = dev_take(cs, esz < sizeof(float) ? (size_t)(s->T * s->H) * sizeof(float) : 0);
	dev_carve cs2 = *cs;
	dev_attn_map(s, esz, false, ca, &p->aa, cw, &p->aw, cs, &p->ax);
	dev_mb_map(s, esz, false, ca, &p->ma, cw, &p->mw, &cs2, &p->mx);
	if (cs2.off > cs->off)
		cs->off = cs2.off;
	p->aa.xhat = p->ma.xhat = p->xhat;
	p->aa.r = p->ma.r = p->r;
	p->aw.xhat = p->mw.xhat = wxhat;
	p->aw.du = p->mw.du = du;
	p->aw.dy = p->mw.dy = dy;
	p->ax.u = p->mx.u = u;
}

static void par_at(const rt_dev *d, const dev_layer *L, const dev_io *io, par_bufs *p)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0}, cs = {io->scratch, 0};
	par_map(&L->s, dev_esz(d), &ca, &cw, &cs, p);
}

int dev_par_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0}, cs = {0};
	par_bufs p;
	par_map(s, esz, &ca, &cw, &cs, &p);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = (int64_t)cs.off;
	return RT_OK;
}

/* The mixer's tensors in a Mamba layer's slots (its MB_NORM empty). */
static void mixer_view(const dev_layer *L, dev_layer *m)
{
	*m = *L;
	for (int i = 0; i < MB_N; i++)
		m->t[i] = L->t[PAR_MB + i];
	m->nt = MB_N;
}

/* The attention's output projection is added to y first, then the mixer's. */
int dev_par_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	par_bufs p;
	dev_layer M;
	par_at(d, L, io, &p);
	mixer_view(L, &M);
	DEV_TRY(dev_prenorm_f(d, L, io->x, io->y, p.ax.u, p.xhat, p.r));
	DEV_TRY(dev_attn_mix_f(d, L, &p.aa, &p.ax, io->y));
	return dev_mb_mix_f(d, &M, &p.ma, &p.mx, io->y);
}

/* du = the attention's gradient of u, then the mixer's added to it, in
 * f32, rounded once. */
int dev_par_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	par_bufs p;
	dev_layer M;
	par_at(d, L, io, &p);
	mixer_view(L, &M);
	DEV_TRY(dev_prenorm_keep(d, L, io->dy, p.aw.dy, p.xhat, p.aw.xhat));
	float b0, *acc = dev_acc_begin(d, p.aw.du, p.du32, 0, &b0);
	DEV_TRY(dev_attn_mix_b(d, L, b0, acc, &p.aa, &p.aw, &p.ax));
	DEV_TRY(dev_mb_mix_b(d, &M, acc, &p.ma, &p.mw, &p.mx));
	DEV_TRY(dev_acc_end(d, L, acc, p.aw.du, L->s.T * L->s.H, 0));
	return dev_norm_b(d, L, p.aw.du, p.aw.xhat, p.r, p.aw.dy, io->dx);
}

int dev_par_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	par_bufs p; /* act not read: the runtime has freed it */
	dev_layer M;
	par_at(d, L, io, &p);
	mixer_view(L, &M);
	DEV_TRY(dev_prenorm_w(d, L, p.aw.xhat, p.aw.du, p.ax.u));
	DEV_TRY(dev_attn_mix_w(d, L, &p.aw, &p.ax));
	return dev_mb_mix_w(d, &M, &p.mw, &p.mx);
}
