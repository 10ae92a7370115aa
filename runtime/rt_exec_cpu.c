/* rt_exec_cpu.c: the executor of a CPU rank (rt_exec.h): the layers run
 * the host's kernels (runtime/cpu, f32) on the model's arrays in the
 * arena, the head's loss is recorded by its F, and the optimizer is the
 * host's AdamW (rt_optim.c) over each tensor.  A data-parallel bucket
 * (rt_dp.c) is packed and unpacked by memcpy, and MPI reduces it in place.  The host's arrays are the
 * state itself, so pull and upload have nothing to move, and the programs'
 * buffers are host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_exec.h"
#include "rt_internal.h"

static int kernel_rc(rt_ctx *ctx, int rc)
{
	return rc ? rt__fail(ctx, rc, "%s", rt_strerror(rc)) : RT_OK;
}

static int nothing(rt_ctx *ctx)
{
	(void)ctx;
	return RT_OK;
}

static int cpu_f(rt_ctx *ctx, int h, int64_t mb, const void *x, void *y, void *act)
{
	rt_lay *l = &ctx->lay[h];
	int rc;
	if (l->desc.kind == RT_EMBEDDING) {
		rt__fill_ids(ctx, mb, false);
		rc = rt_forward(&l->desc, l->p, NULL, ctx->idbuf, y, NULL, act, ctx->scratch);
	} else if (l->desc.kind == RT_HEAD) {
		rt_loss loss = {0, 0};
		rt__fill_ids(ctx, mb, true);
		rc = rt_forward(&l->desc, l->p, x, ctx->idbuf, NULL, &loss, act, ctx->scratch);
		ctx->mb_loss[mb] = loss.sum;
		ctx->mb_count[mb] = loss.count;
	} else {
		rc = rt_forward(&l->desc, l->p, x, NULL, y, NULL, act, ctx->scratch);
	}
	return kernel_rc(ctx, rc);
}

static int cpu_b(rt_ctx *ctx, int h, const void *dy, float dscale, void *dx, const void *act, void *ws)
{
	rt_lay *l = &ctx->lay[h];
	return kernel_rc(ctx, rt_backward_b(&l->desc, l->p, dy, dscale, dx, act, ws, ctx->scratch));
}

static int cpu_w(rt_ctx *ctx, int h, const void *ws)
{
	rt_lay *l = &ctx->lay[h];
	return kernel_rc(ctx, rt_backward_w(&l->desc, l->p, l->g, ws, ctx->scratch));
}

static int cpu_update(rt_ctx *ctx, int h, int64_t a, int64_t b)
{
	rt_lay *l = &ctx->lay[h];
	int rc;
	if (a < b && (rc = rt__optim_range(&ctx->opt, ctx->step + 1, &l->desc, l->p, l->g, l->m, l->v,
	                                   a, b, l->mlo)))
		return rt__fail(ctx, rc, "step %lld: layer %lld: %s", rt__step_no(ctx),
		                (long long)l->index, rt_strerror(rc));
	memset(l->g, 0, (size_t)l->sz.params * sizeof(float));
	return RT_OK;
}

static int cpu_optimize(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nlay; i++) {
		int rc;
		/* dp <= 1 here (rt_step_end checks that rt_update ran on every
		 * layer otherwise): the moments are whole */
		if (!ctx->lay[i].updated && (rc = cpu_update(ctx, i, 0, ctx->lay[i].sz.params)))
			return rc;
	}
	return RT_OK;
}

static int cpu_dp_copy(rt_ctx *ctx, int h, bool grad, int64_t a, int64_t b, void *buf, bool to_buf)
{
	rt_lay *l = &ctx->lay[h];
	float *x = (grad ? l->g : l->p) + a;
	size_t nb = (size_t)(b - a) * sizeof(float);
	if (nb)
		memcpy(to_buf ? buf : x, to_buf ? x : buf, nb);
	return RT_OK;
}

static int cpu_grad_sync(rt_ctx *ctx, int h, int64_t a, int64_t b, bool to_host)
{
	(void)ctx, (void)h, (void)a, (void)b, (void)to_host;
	return RT_OK;
}

static int cpu_scale_grad(rt_ctx *ctx, int h, int64_t a, int64_t b, float s)
{
	float *g = ctx->lay[h].g;
	for (int64_t k = a; k < b; k++)
		g[k] *= s;
	return RT_OK;
}

static int cpu_clear(rt_ctx *ctx, void *p, size_t bytes)
{
	(void)ctx;
	memset(p, 0, bytes);
	return RT_OK;
}

static int cpu_zero_grad(rt_ctx *ctx, int h)
{
	memset(ctx->lay[h].g, 0, (size_t)ctx->lay[h].sz.params * sizeof(float));
	return RT_OK;
}

static int cpu_sizes(rt_ctx *ctx, int h, rt_sizes *sz)
{
	*sz = ctx->lay[h].sz;
	return RT_OK;
}

/* Aligned as the arena's blocks, which the kernels' buffers are. */
static int cpu_alloc(rt_ctx *ctx, size_t bytes, void **p)
{
	size_t n = (bytes + RT_ALIGN) & ~(size_t)(RT_ALIGN - 1); /* at least one block */
	if (n < bytes || !(*p = aligned_alloc(RT_ALIGN, n)))
		return rt__fail(ctx, RT_ENOMEM, "out of memory (%zu bytes)", bytes);
	memset(*p, 0, n);
	return RT_OK;
}

static void cpu_release(rt_ctx *ctx, void *p)
{
	(void)ctx;
	free(p);
}

static int cpu_put(rt_ctx *ctx, void *dst, const float *src, int64_t n)
{
	(void)ctx;
	memcpy(dst, src, (size_t)n * sizeof(float));
	return RT_OK;
}

static int cpu_copy(rt_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	(void)ctx;
	if (bytes)
		memmove(dst, src, bytes);
	return RT_OK;
}

/* By writing, as training evicts it: a cache line at a time. */
static int cpu_evict(rt_ctx *ctx, void *buf, size_t bytes)
{
	(void)ctx;
	unsigned char *b = buf;
	for (size_t i = 0; i < bytes; i += 64)
		b[i]++;
	return RT_OK;
}

/* The per-core cache the profile measures against: the level-2 cache
 * (sysconf, else sysfs), 1 MiB when neither says. */
static size_t cache_bytes(void)
{
	long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
	if (v > 0)
		return (size_t)v;
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r");
	unsigned long kib = 0;
	char unit = 0;
	if (f && fscanf(f, "%lu%c", &kib, &unit) == 2 && unit == 'K' && kib > 0) {
		fclose(f);
		return (size_t)kib << 10;
	}
	if (f)
		fclose(f);
	return (size_t)1 << 20;
}

static void cpu_info(const rt_ctx *ctx, rt_exec_info *out)
{
	(void)ctx;
	*out = (rt_exec_info){.device = NULL, .bf16 = false, .value_bytes = sizeof(float),
	                      .cache_bytes = cache_bytes()};
}

static void cpu_end(rt_ctx *ctx)
{
	(void)ctx;
}

const rt_exec rt__exec_cpu = {
    .name = "CPU kernels, f32",
    .on = "",
    .model_init = nothing,
    .f = cpu_f,
    .b = cpu_b,
    .w = cpu_w,
    .collect = nothing,
    .optimize = cpu_optimize,
    .pull = nothing,
    .upload = nothing,
    .zero_grad = cpu_zero_grad,
    .sizes = cpu_sizes,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .put = cpu_put,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .sync = nothing,
    .evict = cpu_evict,
    .info = cpu_info,
    .dp_copy = cpu_dp_copy,
    .grad_sync = cpu_grad_sync,
    .scale_grad = cpu_scale_grad,
    .update = cpu_update,
    .clear = cpu_clear,
    .abort = cpu_end,
    .free = cpu_end,
};
