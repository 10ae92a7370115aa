/* rt_metrics.c: the metrics file of the generated programs (--metrics
 * FILE): one JSON object a line, a line a step, written by rank 0
 * (docs/runtime.md, "The training loop").  Numbers a step did not measure
 * are null. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

int rt__metrics_open(rt_ctx *ctx, const char *path, bool append, FILE **out)
{
	/* Without blocking on a FIFO nobody reads (ENXIO), as every output. */
	int fd = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_NONBLOCK | O_CLOEXEC,
	              0644);
	FILE *f = NULL;
	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		if (!(f = fdopen(fd, append ? "a" : "w")))
			close(fd);
	}
	if (!f)
		return rt__fail(ctx, RT_EIO, "metrics %s: cannot be written: %s", path,
		                errno == ENXIO ? "a pipe that nobody reads" : strerror(errno));
	*out = f;
	return RT_OK;
}

/* A number, or null when it is not one. */
static void num(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ", \"%s\": ", key);
	if (isfinite(v))
		fprintf(f, fmt, v);
	else
		fputs("null", f);
}

int rt__metrics_eval(rt_ctx *ctx, FILE *f, const char *path, int64_t step, double loss,
                      int64_t batches)
{
	fprintf(f, "{\"step\": %lld", (long long)step);
	num(f, "eval_loss", loss, "%.17g");
	fprintf(f, ", \"eval_batches\": %lld}\n", (long long)batches);
	if (fflush(f) || ferror(f))
		return rt__fail(ctx, RT_EIO, "metrics %s: write: %s", path, strerror(errno));
	return RT_OK;
}

int rt__metrics_write(rt_ctx *ctx, FILE *f, const char *path, const rt_metrics_row *r)
{
	fprintf(f, "{\"step\": %lld", (long long)r->step);
	num(f, "loss", r->loss, "%.17g");
	num(f, "lr", r->lr, "%.9g");
	num(f, "grad_norm", r->grad_norm, "%.17g");
	num(f, "tokens_per_s", r->tokens_per_s, "%.6g");
	num(f, "mfu", r->mfu, "%.6g");
	num(f, "step_time_s", r->step_time_s, "%.9g");
	num(f, "predicted_step_time_s", r->predicted_step_time_s, "%.9g");
	num(f, "eta_s", r->eta_s, "%.3f");
	fputs("}\n", f);
	if (fflush(f) || ferror(f))
		return rt__fail(ctx, RT_EIO, "metrics %s: write: %s", path, strerror(errno));
	return RT_OK;
}
