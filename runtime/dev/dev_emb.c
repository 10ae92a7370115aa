/* dev_emb.c: the embedding on the device (kernels_emb.inc's emb_*,
 * docs/layers.md): F gathers table rows, B moves dy and the tokens into the
 * W stash (there is no input gradient), W scatter-adds them into the
 * table's gradient, t ascending per column.
 *
 * Stashes: act: tok [T] (i32); ws: tok [T] (i32), dy [T][H]; no scratch.
 * A token outside the vocabulary sets *io->err (the caller clears it) and
 * leaves its row of y unwritten; W must not run on such a batch. */
#include "dev.h"

typedef struct emb_bufs {
	int32_t *tok;  /* act */
	int32_t *wtok; /* ws */
	void *dy;
} emb_bufs;

static void emb_map(const rt_shape *s, size_t esz, dev_carve *ca, dev_carve *cw, emb_bufs *m)
{
	size_t T = (size_t)s->T, H = (size_t)s->H;
	m->tok = dev_take(ca, T * sizeof(int32_t));
	m->wtok = dev_take(cw, T * sizeof(int32_t));
	m->dy = dev_take(cw, T * H * esz);
}

static void emb_bind(const rt_dev *d, const dev_layer *L, const dev_io *io, emb_bufs *m)
{
	dev_carve ca = {io->act, 0}, cw = {io->ws, 0};
	emb_map(&L->s, dev_esz(d), &ca, &cw, m);
}

int dev_emb_sizes(const rt_shape *s, size_t esz, rt_sizes *sz)
{
	dev_carve ca = {0}, cw = {0};
	emb_bufs m;
	emb_map(s, esz, &ca, &cw, &m);
	sz->act = (int64_t)ca.off;
	sz->wstash = (int64_t)cw.off;
	sz->scratch = 0;
	return RT_OK;
}

int dev_emb_f(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	emb_bufs m;
	emb_bind(d, L, io, &m);
	const void *table = dev_param(d, L, EMB_TABLE);
	void *y = io->y;
	int *err = io->err;
	int rc = d->ops->copy(d, m.tok, io->tok, (size_t)L->s.T * sizeof(int32_t), DEV_D2D);
	if (!rc)
		rc = dev_each(d, L, "%s_F", L->s.T * L->s.H, (void *[]){&m.tok, &table, &y, &err});
	return rc;
}

int dev_emb_b(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	emb_bufs m;
	emb_bind(d, L, io, &m);
	int rc = d->ops->copy(d, m.wtok, m.tok, (size_t)L->s.T * sizeof(int32_t), DEV_D2D);
	if (!rc)
		rc = d->ops->copy(d, m.dy, io->dy, (size_t)(L->s.T * L->s.H) * dev_esz(d), DEV_D2D);
	return rc;
}

int dev_emb_w(rt_dev *d, const dev_layer *L, const dev_io *io)
{
	emb_bufs m;
	emb_bind(d, L, io, &m);
	float *dtable = dev_grad(L, EMB_TABLE);
	return dev_each(d, L, "%s_W", L->s.H, (void *[]){&m.wtok, &m.dy, &dtable});
}
