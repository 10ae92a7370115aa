/* rt_core.c: the context of a rank (MPI init and finalize, rank and world
 * size from the launcher), error messages and the job-wide abort, the
 * arena, the clock.  Every failure is recorded in the context (rt_errmsg)
 * and returned as an RT_ code; only rt_abort ends anything, and it ends the
 * whole job (MPI_Abort) so that no rank waits forever for a dead one. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "dev.h"
#include "rt_internal.h"

int rt__fail(rt_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
	va_end(ap);
	return code;
}

const char *rt__mpierr(int rc, char *buf)
{
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
		snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
	return buf;
}

int64_t rt__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t rt__fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

const char *rt__kind_name(rt_kind k)
{
	static const char *const names[RT_NKINDS] = {"embedding", "attention", "mlp",
	                                             "moe",       "mamba",     "head"};
	return (unsigned)k < RT_NKINDS ? names[k] : "?";
}

int rt__open_regular(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, st)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -2;
	}
	/* Regular files ignore O_NONBLOCK; cleared all the same. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

FILE *rt__create_out(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return NULL;
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return f;
}

int rt__out_check(rt_ctx *ctx, const char *what, const char *path)
{
	struct stat st;
	bool existed = stat(path, &st) == 0;
	/* No O_TRUNC: an existing file keeps its bytes until the real write. */
	int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "%s %s: cannot be written: %s", what, path,
		                errno == ENXIO ? "a pipe that nobody reads" : strerror(errno));
	close(fd);
	if (!existed)
		unlink(path);
	return RT_OK;
}

const char *rt__file_kind(const struct stat *st)
{
	return S_ISDIR(st->st_mode)    ? "a directory"
	       : S_ISCHR(st->st_mode)  ? "a character device"
	       : S_ISBLK(st->st_mode)  ? "a block device"
	       : S_ISFIFO(st->st_mode) ? "a pipe"
	       : S_ISSOCK(st->st_mode) ? "a socket"
	                               : "a special file";
}

/* Before a context exists, messages go straight to stderr. */
static int early_fail(int code, const char *what, int rc)
{
	char buf[MPI_MAX_ERROR_STRING];
	fprintf(stderr, "octopipe: error: %s: %s\n", what, rc ? rt__mpierr(rc, buf) : rt_strerror(code));
	return code;
}

static int env_timeout(const char *s, double *out)
{
	char *end;
	errno = 0;
	/* Decimal only, as the flags: no leading space, sign or hex. */
	if (!((*s >= '0' && *s <= '9') || *s == '.') || strpbrk(s, "xX"))
		return RT_EARG;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 1e9)
		return RT_EARG;
	*out = v;
	return RT_OK;
}

/* MPI_Init_thread waits for every rank of the job and cannot be
 * interrupted: a rank stopped (SIGSTOP) or stuck before it would hang the
 * others there, outside every deadline and without a word.  A watchdog
 * thread gives it the communication timeout; past that the rank says so,
 * naming itself (the launcher's rank variable: there is no MPI yet) and the
 * cause, and ends itself with _exit -- the one place the runtime ends a
 * process other than through rt_abort, since there is no MPI to abort
 * with --, and the launcher then ends the job. */
typedef struct init_watch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	double timeout_s;
} init_watch;

static void *watch_init(void *arg)
{
	init_watch *w = arg;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	double t = w->timeout_s;
	until.tv_sec += (time_t)t;
	until.tv_nsec += (long)((t - (double)(time_t)t) * 1e9);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->mu);
	int rc = 0;
	while (!w->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
	bool late = !w->done;
	pthread_mutex_unlock(&w->mu);
	if (late) {
		const char *r = getenv("OMPI_COMM_WORLD_RANK");
		if (!r && !(r = getenv("PMIX_RANK")))
			r = getenv("PMI_RANK");
		fprintf(stderr,
		        "octopipe rank %s: error: MPI start-up (MPI_Init) did not finish within %g s "
		        "(OCTO_COMM_TIMEOUT): a rank of the job is stopped or stuck before it, or did "
		        "not start\n",
		        r ? r : "?", t);
		fflush(stderr);
		_exit(-RT_ETIMEOUT);
	}
	return NULL;
}

/* MPI_Init_thread under the watchdog. */
static int init_mpi(int *argc, char ***argv, double timeout_s, int *provided)
{
	init_watch w = {.done = false, .timeout_s = timeout_s};
	pthread_t th;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	bool watching = pthread_create(&th, NULL, watch_init, &w) == 0;
	int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, provided);
	if (watching) {
		pthread_mutex_lock(&w.mu);
		w.done = true;
		pthread_cond_signal(&w.cv);
		pthread_mutex_unlock(&w.mu);
		pthread_join(th, NULL);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return rc;
}

int rt_init(int *argc, char ***argv, const rt_options *opt, rt_ctx **out)
{
	rt_options none = {0};
	int rc, inited = 0, provided, code = RT_ENOMEM;
	rt_ctx *c;

	if (!out)
		return RT_EARG;
	*out = NULL;
	if (!opt)
		opt = &none;
	if ((rc = MPI_Initialized(&inited)) != MPI_SUCCESS)
		return early_fail(RT_EMPI, "MPI_Initialized", rc);
	if (!inited) {
		/* The deadline as below; an OCTO_COMM_TIMEOUT that does not parse
		 * is reported below, with the rank, and the default watches here. */
		double wait_s = 60;
		const char *e = getenv("OCTO_COMM_TIMEOUT");
		if (opt->comm_timeout_s > 0)
			wait_s = opt->comm_timeout_s;
		else if (e && *e && env_timeout(e, &wait_s))
			wait_s = 60;
		if ((rc = init_mpi(argc, argv, wait_s, &provided)) != MPI_SUCCESS)
			return early_fail(RT_EMPI, "MPI_Init_thread", rc);
	}
	/* Errors come back as codes, to be reported with the rank. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

	if (!(c = calloc(1, sizeof *c)))
		return early_fail(RT_ENOMEM, "rt_init", 0);
	c->mpi_owned = !inited;
	c->group = -1;
	c->ctl = MPI_COMM_NULL;
	c->ask = MPI_REQUEST_NULL;
	c->waiting.state = RT_WS_RUNNING;
	c->head = -1;
	MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c->world);

	c->flags = opt->flags;
	const char *s = getenv("OCTO_COMM_SYNC");
	if (s && *s && strcmp(s, "0") != 0)
		c->flags |= RT_COMM_SYNC;
	c->timeout_s = 60;
	if (opt->comm_timeout_s > 0) {
		c->timeout_s = opt->comm_timeout_s;
	} else if ((s = getenv("OCTO_COMM_TIMEOUT")) && *s && env_timeout(s, &c->timeout_s)) {
		code = RT_EARG;
		fprintf(stderr, "octopipe rank %d: error: OCTO_COMM_TIMEOUT='%s': expected seconds, a decimal "
		        "number above 0 and at most 1e9\n",
		        c->rank, s);
		goto out_ctx;
	}
	s = opt->trace_dir ? opt->trace_dir : getenv("OCTO_TRACE_DIR");
	if (s && *s && !(c->trace_dir = strdup(s))) {
		early_fail(RT_ENOMEM, "rt_init", 0);
		goto out_ctx;
	}
	/* One BLAS thread per rank: ranks share the cores, and the kernels'
	 * results are bitwise reproducible for a fixed thread count. */
	if (!(c->flags & RT_NO_BLAS_PIN))
		openblas_set_num_threads(1);

	/* A common time origin for the ranks' traces (to within a barrier). */
	MPI_Request req;
	if ((code = rt__coll(c, MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "rt_init"))) {
		fprintf(stderr, "octopipe rank %d: error: %s\n", c->rank, c->err);
		goto out_ctx;
	}
	c->origin_ns = rt__now_ns();
	if ((code = rt__ctl_init(c))) {
		fprintf(stderr, "octopipe rank %d: error: %s\n", c->rank, c->err);
		goto out_ctx;
	}
	*out = c;
	return RT_OK;

out_ctx:
	free(c->trace_dir);
	free(c);
	/* MPI stays initialised: the caller's rt_abort(NULL, code) ends the
	 * job, and no rank waits for this one in a barrier it never joins. */
	return code;
}

int rt_finalize(rt_ctx *ctx)
{
	int rc = RT_OK;
	if (!ctx)
		return RT_EARG;
	if (ctx->trace_dir)
		rc = rt_trace_write(ctx, ctx->trace_dir);
	rt__comm_free_all(ctx);
	rt__ctl_free(ctx);
	rt__dev_free_comm(ctx);
	rt__dev_free(ctx);
	free(ctx->text);
	free(ctx->text_path);
	free(ctx->ev);
	free(ctx->trace_dir);
	free(ctx->arena);
	bool owned = ctx->mpi_owned;
	if (rc) {
		/* The trace is a diagnostic: say so, finish anyway. */
		fprintf(stderr, "octopipe rank %d: warning: %s\n", ctx->rank, ctx->err);
	}
	free(ctx);
	if (owned && MPI_Finalize() != MPI_SUCCESS)
		return RT_EMPI;
	return rc;
}

int rt_rank(const rt_ctx *ctx)
{
	return ctx ? ctx->rank : -1;
}

int rt_world_size(const rt_ctx *ctx)
{
	return ctx ? ctx->world : 0;
}

const char *rt_errmsg(const rt_ctx *ctx)
{
	return ctx ? ctx->err : "";
}

int rt_abort(rt_ctx *ctx, int code)
{
	int inited = 0, finalized = 0;
	const char *msg = ctx && ctx->err[0] ? ctx->err : rt_strerror(code);
	if (ctx) /* without one, rt_init has already said what failed */
		fprintf(stderr, "octopipe rank %d: error: %s\n", ctx->rank, msg);
	if (ctx && ctx->dev && ctx->dev->ops->abort)
		ctx->dev->ops->abort(ctx->dev);
	fflush(stderr);
	fflush(stdout);
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (inited && !finalized)
		MPI_Abort(MPI_COMM_WORLD, code < 0 && code > -126 ? -code : 1);
	return code;
}

/* ---- arena ---------------------------------------------------------------- */

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
