/* dev_common.c: what the layer kinds of the device executor share: errors,
 * the stash carve, tensor pointers, launches, projections, copies, the
 * pre-norm (dev.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dev.h"

int dev_fail(rt_dev *d, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->err, sizeof d->err, fmt, ap);
	va_end(ap);
	return code;
}

void *dev_take(dev_carve *c, size_t bytes)
{
	size_t o = c->off;
	c->off += (bytes + 255) & ~(size_t)255;
	return c->base ? c->base + o : NULL;
}

void *dev_param(const rt_dev *d, const dev_layer *L, int i)
{
	return dev_at(d, L->p, L->t[i].offset);
}

float *dev_grad(const dev_layer *L, int i)
{
	return L->g + L->t[i].offset;
}

int dev_run(rt_dev *d, const dev_layer *L, const char *fn, unsigned grid, unsigned block, void **args)
{
	char name[96];
	snprintf(name, sizeof name, fn, L->kind);
	if (grid == 0)
		return RT_OK;
	int rc = d->ops->launch(d, L->mod, name, grid, block, args);
	if (rc) {
		char why[sizeof d->err];
		snprintf(why, sizeof why, "%s", d->err);
		return dev_fail(d, rc, "%s layer, kernel %s: %s", L->kind, name, why);
	}
	return RT_OK;
}

unsigned dev_each_grid(const rt_dev *d, int64_t n)
{
	int64_t g = (n + d->each_block - 1) / d->each_block;
	if (g < 1)
		g = 1;
	return g > d->max_grid ? d->max_grid : (unsigned)g;
}

int dev_each(rt_dev *d, const dev_layer *L, const char *fn, int64_t n, void **args)
{
	return dev_run(d, L, fn, dev_each_grid(d, n), d->each_block, args);
}

int dev_rows(rt_dev *d, const dev_layer *L, const char *fn, int64_t rows, void **args)
{
	return dev_run(d, L, fn, (unsigned)rows, d->row, args);
}

int dev_mm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
           int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc, bool c_f32)
{
	if (m == 0 || n == 0)
		return RT_OK;
	return d->ops->gemm(d, ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc, c_f32);
}

int dev_bmm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
            dev_bdim o, dev_bdim in)
{
	if (m == 0 || n == 0 || o.n == 0 || in.n == 0)
		return RT_OK;
	if (o.n > in.n) {
		dev_bdim t = o;
		o = in;
		in = t;
	}
	for (int64_t i = 0; i < o.n; i++)
		DEV_TRY(d->ops->gemm_sb(d, ta, tb, m, n, k, 1.f, a + i * o.sa, lda, in.sa, b + i * o.sb,
		                        ldb, in.sb, beta, c + i * o.sc, ldc, in.sc, in.n, true, true));
	return RT_OK;
}

int dev_proj(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *x, int64_t ldx,
             const void *w, float beta, void *y, int64_t ldy)
{
	return dev_mm(d, false, false, n, out, in, x, ldx, w, out, beta, y, ldy, false);
}

int dev_proj_dx(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *dy, int64_t lddy,
                const void *w, float beta, void *dx, int64_t lddx)
{
	return dev_mm(d, false, true, n, in, out, dy, lddy, w, out, beta, dx, lddx, false);
}

int dev_proj_dw(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *x, int64_t ldx,
                const void *dy, int64_t lddy, float *dw)
{
	return dev_mm(d, true, false, in, out, n, x, ldx, dy, lddy, 1.f, dw, out, true);
}

int dev_proj_dx_f32(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *dy, int64_t lddy,
                    const void *w, float beta, float *dx, int64_t lddx)
{
	return dev_mm(d, false, true, n, in, out, dy, lddy, w, out, beta, dx, lddx, true);
}

float *dev_acc_begin(const rt_dev *d, void *dst, float *acc32, float beta, float *b0)
{
	*b0 = d->bf16 ? 0.f : beta;
	return d->bf16 ? acc32 : (float *)dst;
}

int dev_acc_end(rt_dev *d, const dev_layer *L, const float *acc, void *dst, int64_t n, float beta)
{
	if ((const void *)acc == dst)
		return RT_OK;
	long cnt = (long)n;
	int add = beta != 0;
	return dev_each(d, L, "acc_store", n, (void *[]){&acc, &dst, &cnt, &add});
}

int64_t dev_col_chunks(int64_t rows)
{
	return (rows + RT_COL_CHUNK - 1) / RT_COL_CHUNK;
}

int dev_col_add(rt_dev *d, const dev_layer *L, const float *part, int64_t rows, int64_t w,
                float *dst)
{
	long chunks = (long)dev_col_chunks(rows), lw = (long)w;
	return dev_each(d, L, "col_sum", w, (void *[]){&part, &dst, &chunks, &lw});
}

int dev_norm_f(rt_dev *d, const dev_layer *L, const void *x, void *u, void *xhat, float *r)
{
	void *g = dev_param(d, L, 0);
	return dev_rows(d, L, "%s_F_norm", L->s.T, (void *[]){&x, &g, &u, &xhat, &r});
}

int dev_norm_b(rt_dev *d, const dev_layer *L, const void *du, const void *xhat, const float *r,
               const void *dres, void *dx)
{
	void *g = dev_param(d, L, 0);
	return dev_rows(d, L, "%s_B_norm", L->s.T, (void *[]){&du, &g, &xhat, &r, &dres, &dx});
}

int dev_norm_scale(rt_dev *d, const dev_layer *L, const void *xhat, void *u)
{
	void *g = dev_param(d, L, 0);
	return dev_each(d, L, "%s_W_scale", L->s.T * L->s.H, (void *[]){&xhat, &g, &u});
}

int dev_norm_w(rt_dev *d, const dev_layer *L, const void *du, const void *xhat)
{
	int64_t T = L->s.T, H = L->s.H;
	DEV_TRY(dev_each(d, L, "%s_W_norm", dev_col_chunks(T) * H, (void *[]){&du, &xhat, &d->colp}));
	return dev_col_add(d, L, d->colp, T, H, dev_grad(L, 0));
}

int dev_prenorm_f(rt_dev *d, const dev_layer *L, const void *x, void *y, void *u, void *xhat,
                  float *r)
{
	DEV_TRY(dev_norm_f(d, L, x, u, xhat, r));
	return dev_copy(d, y, x, L->s.T * L->s.H);
}

int dev_prenorm_keep(rt_dev *d, const dev_layer *L, const void *dy, void *wdy, const void *xhat,
                     void *wxhat)
{
	DEV_TRY(dev_copy(d, wdy, dy, L->s.T * L->s.H));
	return dev_copy(d, wxhat, xhat, L->s.T * L->s.H);
}

int dev_prenorm_w(rt_dev *d, const dev_layer *L, const void *wxhat, const void *du, void *u)
{
	DEV_TRY(dev_norm_scale(d, L, wxhat, u));
	return dev_norm_w(d, L, du, wxhat);
}

int dev_copy(rt_dev *d, void *dst, const void *src, int64_t n)
{
	if (dst == src || n == 0)
		return RT_OK;
	return d->ops->copy(d, dst, src, (size_t)n * dev_esz(d), DEV_D2D);
}
