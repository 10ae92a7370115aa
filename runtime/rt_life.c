/* rt_life.c: the life cycle of a rank's context, the top of the runtime:
 * rt_init (MPI init under a watchdog, the options and the environment,
 * a barrier for the trace's common origin, the wait-for chain's
 * communicator), rt_finalize (the trace written, the communication, the
 * executor's and the data's state freed, MPI finalised) and the job-wide
 * rt_abort.  Every failure is recorded in the context (rt_errmsg) and
 * returned as an RT_ code; only rt_abort ends anything, and it ends the
 * whole job (MPI_Abort) so that no rank waits forever for a dead one. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "rt_exec.h"
#include "rt_internal.h"

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
	c->dpc = MPI_COMM_NULL;
	c->tiec = MPI_COMM_NULL;
	c->tie_h[0] = c->tie_h[1] = -1;
	c->ask = MPI_REQUEST_NULL;
	c->waiting.state = RT_WS_RUNNING;
	c->head = -1;
	/* The host's kernels unless a device is attached (rt_device_attach_*):
	 * the one place besides that where the executor is chosen. */
	c->exec = &rt__exec_cpu;
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
	/* The last step's carried all-gathers, before MPI goes. */
	int drc = rt__comm_drain(ctx);
	if (drc != RT_OK)
		return rt_abort(ctx, drc);
	if (ctx->trace_dir) {
		if (ctx->mark0 && ctx->exec->sync(ctx) == RT_OK)
			rt__trace_settle(ctx);
		rt__trace_drop(ctx);
		rc = rt_trace_write(ctx, ctx->trace_dir);
	}
	/* MPI_Finalize waits for every rank with no deadline: one stopped or
	 * hung after the last collective (writing its trace, say) would hold
	 * the others there for ever.  A barrier first, against the deadline
	 * and answering the wait-for questions as every collective does: past
	 * it the message names the rank that is not here and the job ends. */
	if (ctx->mpi_owned && ctx->world > 1) {
		MPI_Request r;
		int brc = rt__coll(ctx, MPI_Ibarrier(MPI_COMM_WORLD, &r), &r, "finalize");
		if (brc != RT_OK)
			return rt_abort(ctx, brc);
	}
	rt__comm_free_all(ctx);
	rt__ctl_free(ctx);
	rt__tie_free(ctx);
	rt__dp_free(ctx);
	ctx->exec->free(ctx); /* after the communication: its groups may be the device's */
	rt__data_free(ctx);
	rt__eval_free(ctx);
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

int rt_abort(rt_ctx *ctx, int code)
{
	int inited = 0, finalized = 0;
	const char *msg = ctx && ctx->err[0] ? ctx->err : rt_strerror(code);
	if (ctx) /* without one, rt_init has already said what failed */
		fprintf(stderr, "octopipe rank %d: error: %s\n", ctx->rank, msg);
	if (ctx)
		ctx->exec->abort(ctx);
	fflush(stderr);
	fflush(stdout);
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (inited && !finalized)
		MPI_Abort(MPI_COMM_WORLD, code < 0 && code > -126 ? -code : 1);
	return code;
}

