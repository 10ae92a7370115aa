/* rt_arena.c: the rank's arena (rt_arena_*; octo_rt.h): one aligned block
 * allocated at rt_arena_init, handed out by a bump pointer, released to a
 * mark, with its high-water mark kept for the program's summary.  The
 * model's arrays and the programs' buffers live in it. */
#include <stdlib.h>

#include "rt_internal.h"

static size_t round_up(size_t n)
{
	return (n + RT_ALIGN - 1) & ~(size_t)(RT_ALIGN - 1);
}

int rt_arena_init(rt_ctx *ctx, size_t bytes)
{
	if (!ctx)
		return RT_EARG;
	if (ctx->arena)
		return rt__fail(ctx, RT_ESTATE, "arena: already initialised (%zu bytes)", ctx->arena_size);
	size_t sz = round_up(bytes ? bytes : 1);
	if (sz < bytes || !(ctx->arena = aligned_alloc(RT_ALIGN, sz)))
		return rt__fail(ctx, RT_ENOMEM, "arena of %zu bytes: out of memory", bytes);
	ctx->arena_size = sz;
	ctx->arena_top = ctx->arena_peak = 0;
	return RT_OK;
}

int rt_arena_alloc(rt_ctx *ctx, size_t bytes, void **out)
{
	if (!ctx || !out)
		return RT_EARG;
	*out = NULL;
	if (!ctx->arena)
		return rt__fail(ctx, RT_ESTATE, "arena: rt_arena_init has not been called");
	size_t free_ = ctx->arena_size - ctx->arena_top;
	size_t need = round_up(bytes);
	if (need < bytes || need > free_)
		return rt__fail(ctx, RT_ENOMEM,
		                "arena: out of memory: %zu bytes asked, %zu of %zu free (high-water %zu)",
		                bytes, free_, ctx->arena_size, ctx->arena_peak);
	*out = ctx->arena + ctx->arena_top;
	ctx->arena_top += need;
	if (ctx->arena_top > ctx->arena_peak)
		ctx->arena_peak = ctx->arena_top;
	return RT_OK;
}

size_t rt_arena_mark(const rt_ctx *ctx)
{
	return ctx ? ctx->arena_top : 0;
}

int rt_arena_release(rt_ctx *ctx, size_t mark)
{
	if (!ctx)
		return RT_EARG;
	if (mark > ctx->arena_top || mark % RT_ALIGN)
		return rt__fail(ctx, RT_EARG, "arena: release to %zu, above the top %zu", mark,
		                ctx->arena_top);
	ctx->arena_top = mark;
	return RT_OK;
}

int rt_arena_stats(const rt_ctx *ctx, rt_arena_info *out)
{
	if (!ctx || !out)
		return RT_EARG;
	out->size = ctx->arena_size;
	out->used = ctx->arena_top;
	out->peak = ctx->arena_peak;
	return RT_OK;
}
