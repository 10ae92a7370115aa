/* rt_trace.c: the per-op trace.  While tracing (rt_options.trace_dir or
 * OCTO_TRACE_DIR), every F, B, W, send and receive post, wait, optimizer
 * step and checkpoint is recorded with its CLOCK_MONOTONIC start and end
 * (relative to an origin taken right after a barrier at init, so the ranks
 * of one machine share it exactly and those of several nearly), and
 * written per rank as Chrome trace JSON: one process per rank, compute on
 * thread 0, communication on thread 1.  rt_trace_merge joins the ranks'
 * files into one.  The event buffer is the one allocation outside the
 * arena: the trace is a diagnostic, sized by the run, not by the plan. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_exec.h"
#include "rt_internal.h"

#define TRACE_HEAD "{\"traceEvents\":[\n"
#define TRACE_TAIL "\n]}\n"

void rt__trace(rt_ctx *ctx, const char *name, int64_t t0, int64_t layer, int64_t mb, int64_t peer,
               int64_t bytes)
{
	if (!ctx->trace_dir)
		return;
	if (ctx->nev == ctx->evcap) {
		size_t cap = ctx->evcap ? 2 * ctx->evcap : 4096;
		rt_event *e = realloc(ctx->ev, cap * sizeof *e);
		if (!e)
			return; /* the trace stops growing; training goes on */
		ctx->ev = e;
		ctx->evcap = cap;
	}
	rt_event *e = &ctx->ev[ctx->nev++];
	e->m0 = e->m1 = NULL;
	e->marked = false;
	e->t0 = t0 - ctx->origin_ns;
	e->t1 = rt__now_ns() - ctx->origin_ns;
	e->layer = layer;
	e->mb = mb;
	e->step = ctx->step;
	e->peer = peer;
	e->bytes = bytes;
	snprintf(e->name, sizeof e->name, "%s", name);
}

void rt__trace_mark(rt_ctx *ctx, void **m)
{
	const rt_exec *x = ctx->exec;
	*m = NULL;
	if (!ctx->trace_dir || !x->mark)
		return;
	/* The first mark: the work issued so far done, so that the origin mark
	 * is reached at once, at the host's time now. */
	if (!ctx->mark0) {
		if (x->sync(ctx) || x->mark(ctx, &ctx->mark0)) {
			ctx->mark0 = NULL;
			return;
		}
		ctx->mark0_ns = rt__now_ns() - ctx->origin_ns;
	}
	if (x->mark(ctx, m))
		*m = NULL;
}

void rt__trace_marked(rt_ctx *ctx, const char *name, int64_t t0, void *m0, void *m1,
                      int64_t layer, int64_t mb)
{
	size_t n = ctx->nev;
	rt__trace(ctx, name, t0, layer, mb, -1, 0);
	if (ctx->nev > n && m0 && m1) {
		ctx->ev[n].m0 = m0;
		ctx->ev[n].m1 = m1;
		return;
	}
	if (m0)
		ctx->exec->unmark(ctx, m0);
	if (m1)
		ctx->exec->unmark(ctx, m1);
}

void rt__trace_settle(rt_ctx *ctx)
{
	const rt_exec *x = ctx->exec;
	if (!ctx->mark0)
		return;
	for (size_t i = ctx->settled; i < ctx->nev; i++) {
		rt_event *e = &ctx->ev[i];
		int64_t a, b;
		if (!e->m0)
			continue;
		if (!x->since(ctx, ctx->mark0, e->m0, &a) && !x->since(ctx, ctx->mark0, e->m1, &b) &&
		    a <= b) {
			e->t0 = ctx->mark0_ns + a;
			e->t1 = ctx->mark0_ns + b;
			e->marked = true;
		}
		x->unmark(ctx, e->m0);
		x->unmark(ctx, e->m1);
		e->m0 = e->m1 = NULL;
	}
	ctx->settled = ctx->nev;
	/* A new origin, the work done now: the marks' clock is read over one
	 * step at a time (CUDA's elapsed time is a float of milliseconds). */
	x->unmark(ctx, ctx->mark0);
	if (x->mark(ctx, &ctx->mark0))
		ctx->mark0 = NULL;
	else
		ctx->mark0_ns = rt__now_ns() - ctx->origin_ns;
}

void rt__trace_drop(rt_ctx *ctx)
{
	const rt_exec *x = ctx->exec;
	for (size_t i = ctx->settled; i < ctx->nev; i++) {
		rt_event *e = &ctx->ev[i];
		if (e->m0) {
			x->unmark(ctx, e->m0);
			x->unmark(ctx, e->m1);
			e->m0 = e->m1 = NULL;
		}
	}
	ctx->settled = ctx->nev;
	if (ctx->mark0)
		x->unmark(ctx, ctx->mark0);
	ctx->mark0 = NULL;
}

static bool is_comm(const char *name)
{
	return !strcmp(name, "send") || !strcmp(name, "recv") || !strcmp(name, "wait") ||
	       !strcmp(name, "all-reduce") || !strcmp(name, "reduce-scatter") ||
	       !strcmp(name, "all-gather");
}

int rt__trace_check(rt_ctx *ctx)
{
	char path[4096];
	const char *dir = ctx->trace_dir;
	if (!dir)
		return RT_OK;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return rt__fail(ctx, RT_EIO, "trace %s: mkdir: %s", dir, strerror(errno));
	snprintf(path, sizeof path, "%s/trace-rank%d.json", dir, ctx->rank);
	return rt__out_check(ctx, "trace", path);
}

int rt_trace_write(rt_ctx *ctx, const char *dir)
{
	char path[4096];
	if (!ctx || !dir)
		return RT_EARG;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return rt__fail(ctx, RT_EIO, "trace %s: mkdir: %s", dir, strerror(errno));
	snprintf(path, sizeof path, "%s/trace-rank%d.json", dir, ctx->rank);
	FILE *f = rt__create_out(path);
	if (!f)
		return rt__fail(ctx, RT_EIO, "trace %s: %s", path,
		                errno == ENXIO ? "a pipe that nobody reads" : strerror(errno));
	fputs(TRACE_HEAD, f);
	fprintf(f,
	        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
	        "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n"
	        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
	        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"comm\"}}",
	        ctx->rank, ctx->rank, ctx->rank, ctx->rank, ctx->rank, ctx->rank);
	for (size_t i = 0; i < ctx->nev; i++) {
		const rt_event *e = &ctx->ev[i];
		char label[64];
		if (e->layer >= 0)
			snprintf(label, sizeof label, "%s L%lld m%lld", e->name, (long long)e->layer,
			         (long long)e->mb);
		else if (e->peer >= 0)
			snprintf(label, sizeof label, "%s r%lld m%lld", e->name, (long long)e->peer,
			         (long long)e->mb);
		else
			snprintf(label, sizeof label, "%s", e->name);
		fprintf(f,
		        ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
		        "\"ts\":%lld.%03lld,\"dur\":%lld.%03lld,\"args\":{\"step\":%lld,\"layer\":%lld,"
		        "\"mb\":%lld,\"peer\":%lld,\"bytes\":%lld%s}}",
		        label, e->name, ctx->rank, is_comm(e->name), (long long)(e->t0 / 1000),
		        (long long)(e->t0 % 1000), (long long)((e->t1 - e->t0) / 1000),
		        (long long)((e->t1 - e->t0) % 1000), (long long)e->step, (long long)e->layer,
		        (long long)e->mb, (long long)e->peer, (long long)e->bytes,
		        e->marked ? ",\"clock\":\"device\"" : "");
	}
	fputs(TRACE_TAIL, f);
	if (ferror(f) | fclose(f))
		return rt__fail(ctx, RT_EIO, "trace %s: write error", path);
	return RT_OK;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;
	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = 0;
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int rt_trace_merge(const char *dir, int nranks, const char *out_path, char *err, size_t errlen)
{
	char path[4096];
	int rc = RT_OK;
	FILE *out = NULL;
	char *buf = NULL;
	if (!dir || !out_path || nranks < 1) {
		snprintf(err, errlen, "trace merge: bad arguments");
		return RT_EARG;
	}
	if (!(out = fopen(out_path, "w"))) {
		snprintf(err, errlen, "trace %s: %s", out_path, strerror(errno));
		return RT_EIO;
	}
	fputs(TRACE_HEAD, out);
	size_t hl = strlen(TRACE_HEAD), tl = strlen(TRACE_TAIL);
	for (int r = 0; r < nranks; r++) {
		size_t len;
		snprintf(path, sizeof path, "%s/trace-rank%d.json", dir, r);
		if (!(buf = slurp(path, &len))) {
			snprintf(err, errlen, "trace %s: %s", path, strerror(errno ? errno : EIO));
			rc = RT_EIO;
			goto out;
		}
		if (len < hl + tl || memcmp(buf, TRACE_HEAD, hl) || memcmp(buf + len - tl, TRACE_TAIL, tl)) {
			snprintf(err, errlen, "trace %s: not a trace written by libocto_rt", path);
			rc = RT_EIO;
			goto out;
		}
		if (r)
			fputs(",\n", out);
		fwrite(buf + hl, 1, len - hl - tl, out);
		free(buf);
		buf = NULL;
	}
	fputs(TRACE_TAIL, out);
out:
	free(buf);
	if ((ferror(out) | fclose(out)) && !rc) {
		snprintf(err, errlen, "trace %s: write error", out_path);
		rc = RT_EIO;
	}
	return rc;
}
