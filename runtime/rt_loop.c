/* rt_loop.c: the training loop of the generated programs around the
 * plan's steps (docs/runtime.md, "The training loop"): the options of the
 * learning-rate schedule and clipping over the compiled ones, periodic
 * checkpoints that keep the newest K, a stop on SIGTERM or SIGINT that
 * every rank agrees on at a step boundary and saves, the step line with
 * its ETA, and the metrics file.  rt_cli.c parses the command line and
 * hands this file the options it names (one table, below).
 *
 * The one collective a step (rt__loop_step, after rt_step_end on every
 * rank, so every rank calls it at the same step and it cannot cross the
 * plan's messages): an all-reduce that tells every rank whether any rank
 * got a signal, and rank 0 the step's loss, which only the head's rank
 * holds.  A signal only sets a flag; the step runs to its end, every rank
 * learns of the flag in the same all-reduce, saves the same step and
 * stops. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

struct rt_loop {
	/* the options; -1 (NAN for numbers, NULL for paths): not given */
	int64_t warmup, decay, decay_steps, save_every, keep, eval_every, eval_batches;
	double min_lr, clip;
	const char *metrics, *eval_data;
	int passes;       /* of the evaluation running */
	double eval_sum;  /* of its passes' losses (the head's rank of replica 0) */
	FILE *mf;         /* rank 0's metrics file */
	int64_t saved_at; /* the step count of the last save, or -1 */
	int stop;         /* the job stops after this step: SIGTERM or SIGINT */
};

static const char *const decay_names[] = {"constant", "cosine", "linear"};

typedef enum otype { O_COUNT, O_POSITIVE, O_NUMBER, O_DECAY, O_PATH } otype;

/* The options this file takes; rt_cli.c's usage lists them after its own. */
static const struct opt {
	const char *name, *arg;
	otype type;
	size_t off;
	const char *help;
} opts[] = {
    {"--warmup", "N", O_COUNT, offsetof(rt_loop, warmup),
     "raise the learning rate linearly over the first N steps"},
    {"--decay", "KIND", O_DECAY, offsetof(rt_loop, decay),
     "then cosine, linear or constant, down to --min-lr"},
    {"--decay-steps", "N", O_COUNT, offsetof(rt_loop, decay_steps),
     "the step that reaches --min-lr (warm-up included; default: the compile's steps)"},
    {"--min-lr", "LR", O_NUMBER, offsetof(rt_loop, min_lr), "the learning rate at the end of the decay"},
    {"--clip", "MAXNORM", O_NUMBER, offsetof(rt_loop, clip),
     "scale the gradients to a global norm of at most MAXNORM (0: off)"},
    {"--save-every", "N", O_POSITIVE, offsetof(rt_loop, save_every),
     "also save to the --checkpoint DIR every N steps"},
    {"--keep", "K", O_POSITIVE, offsetof(rt_loop, keep), "keep the newest K saves in DIR (default 1)"},
    {"--metrics", "FILE", O_PATH, offsetof(rt_loop, metrics),
     "rank 0 writes a JSON line a step to FILE (appended to after --resume)"},
    {"--eval-every", "N", O_POSITIVE, offsetof(rt_loop, eval_every),
     "after every N-th step, the loss on --eval-data, forward only"},
    {"--eval-data", "FILE", O_PATH, offsetof(rt_loop, eval_data),
     "the held-out data of --eval-every (files by name, as --data-format auto)"},
    {"--eval-batches", "K", O_POSITIVE, offsetof(rt_loop, eval_batches),
     "micro-batches of it each time (default: a step's; rounded up to steps)"},
};
#define NOPTS (int)(sizeof opts / sizeof *opts)

rt_loop *rt__loop_new(void)
{
	rt_loop *L = malloc(sizeof *L);
	if (!L)
		return NULL;
	*L = (rt_loop){.warmup = -1, .decay = -1, .decay_steps = -1, .save_every = -1, .keep = -1,
	               .eval_every = -1, .eval_batches = -1, .min_lr = NAN, .clip = NAN,
	               .saved_at = -1};
	return L;
}

void rt__loop_free(rt_loop *L)
{
	if (!L)
		return;
	if (L->mf)
		fclose(L->mf);
	free(L);
}

void rt__loop_usage(FILE *f)
{
	for (int i = 0; i < NOPTS; i++) {
		char head[40];
		snprintf(head, sizeof head, "%s %s", opts[i].name, opts[i].arg);
		fprintf(f, "  %-17s %s\n", head, opts[i].help);
	}
}

int rt__loop_option(const char *flag, size_t len)
{
	for (int i = 0; i < NOPTS; i++)
		if (strlen(opts[i].name) == len && !strncmp(flag, opts[i].name, len))
			return i;
	return -1;
}

const char *rt__loop_set(rt_loop *L, int k, const char *v)
{
	const struct opt *o = &opts[k];
	char *end, *at = (char *)L + o->off;
	errno = 0;
	switch (o->type) {
	case O_COUNT:
	case O_POSITIVE: {
		/* digits only, as --steps: no sign, blank or hex */
		long long n = strtoll(v, &end, 10);
		if (*end || errno || *v < '0' || *v > '9' || n > RT_MAX_COUNT ||
		    (o->type == O_POSITIVE && n < 1))
			return o->type == O_POSITIVE ? "needs a count of 1 or more" : "needs a count (0 or more)";
		*(int64_t *)at = n;
		return NULL;
	}
	case O_NUMBER: {
		double x = strtod(v, &end);
		if (*end || errno || !(*v >= '0' && *v <= '9') || !isfinite(x))
			return "needs a finite number, 0 or more";
		*(double *)at = x;
		return NULL;
	}
	case O_DECAY:
		for (int d = 0; d < 3; d++)
			if (!strcmp(v, decay_names[d])) {
				*(int64_t *)at = d;
				return NULL;
			}
		return "needs cosine, linear or constant";
	case O_PATH: *(const char **)at = v; return NULL;
	}
	return "is not an option";
}

const char *rt__loop_name(int k)
{
	return opts[k].name;
}

uint64_t rt__loop_key(const rt_loop *L)
{
	/* what changes the steps' bits or when every rank must save */
	int64_t v[] = {L->warmup,     L->decay,      L->decay_steps,     L->save_every,
	               L->keep,       L->eval_every, L->eval_batches, L->eval_data != NULL};
	uint64_t h = rt__fnv(RT_FNV_INIT, v, sizeof v);
	h = rt__fnv(h, &L->min_lr, sizeof L->min_lr);
	return rt__fnv(h, &L->clip, sizeof L->clip) | 1;
}

void rt_cli_train(rt_cli *cli, rt_train *t)
{
	const rt_loop *L = cli->loop;
	if (L->warmup >= 0)
		t->warmup = L->warmup;
	if (L->decay >= 0)
		t->decay = (rt_decay)L->decay;
	if (L->decay_steps >= 0)
		t->decay_steps = L->decay_steps;
	if (!isnan(L->min_lr))
		t->min_lr = (float)L->min_lr;
	if (!isnan(L->clip))
		t->clip = (float)L->clip;
}

/* ---- signals ---------------------------------------------------------------- */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

/* SIGTERM and SIGINT set a flag once; the handler is then reset, so a
 * second signal ends the process at once (SA_RESETHAND). */
static int catch_signals(rt_ctx *ctx)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
		return rt__fail(ctx, RT_EARG, "start: cannot catch SIGTERM and SIGINT: %s",
		                strerror(errno));
	return RT_OK;
}

int rt__loop_start(rt_cli *cli, rt_ctx *ctx)
{
	rt_loop *L = cli->loop;
	int rc;
	if ((L->save_every > 0 || L->keep > 0) && !cli->checkpoint)
		return rt__fail(ctx, RT_EARG, "%s needs --checkpoint DIR: the directory the saves go to",
		                L->save_every > 0 ? "--save-every" : "--keep");
	if ((L->eval_every > 0) != (L->eval_data != NULL) || (L->eval_batches > 0 && !L->eval_data))
		return rt__fail(ctx, RT_EARG, "--eval-every N and --eval-data FILE come together (and "
		                "--eval-batches with them)");
	if (cli->profile)
		return RT_OK;
	if ((rc = catch_signals(ctx)))
		return rc;
	if (L->metrics && rt_rank(ctx) == 0 &&
	    (rc = rt__metrics_open(ctx, L->metrics, cli->resume != NULL, &L->mf)))
		return rc;
	return RT_OK;
}

/* ---- the step's end ---------------------------------------------------------- */

static int save(rt_cli *cli, rt_ctx *ctx)
{
	rt_loop *L = cli->loop;
	int rc = rt_ckpt_save_keep(ctx, cli->checkpoint, L->keep > 0 ? L->keep : 1);
	if (!rc)
		L->saved_at = rt_step_count(ctx);
	return rc;
}

/* FLOPs of this rank's layers in one step (F, B and W of each local
 * micro-batch; no recomputation: the model's FLOPs). */
static double step_flops(const rt_ctx *ctx)
{
	double sum = 0;
	for (int i = 0; i < ctx->nlay; i++) {
		double f, b, w;
		if (!rt_layer_flops(&ctx->lay[i].desc, &f, &b, &w))
			sum += (f + b + w) * (double)ctx->train.microbatches;
	}
	return sum;
}

static void print_eta(double s)
{
	long long t = (long long)(s + 0.5);
	printf("eta %lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

enum { V_TERM, V_INT, V_LOSS, V_HAVE, V_FLOPS, V_N };

int rt__loop_step(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss, double dt)
{
	rt_loop *L = cli->loop;
	const rt_prog_info *p = cli->prog;
	MPI_Request req;
	int rc, sig = got_signal;
	double v[V_N] = {sig == SIGTERM, sig == SIGINT, have_loss ? loss : 0, have_loss ? 1 : 0,
	                 step_flops(ctx)};
	if ((rc = rt__coll(ctx, MPI_Iallreduce(MPI_IN_PLACE, v, V_N, MPI_DOUBLE, MPI_SUM,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "the step's end")))
		return rc;
	int64_t step = rt_step_count(ctx);
	double lr = ctx->opt.lr, norm = rt_grad_norm(ctx);
	int64_t left = cli->steps - cli->done;
	double mean = cli->done > 1 ? cli->rest_s / (double)(cli->done - 1) : cli->first_s;
	double eta = (double)(left > 0 ? left : 0) * mean;
	if (have_loss) {
		printf("step %lld loss %.6f (%a) lr %.4g", (long long)step, loss, loss, (double)lr);
		if (!isnan(norm))
			printf(" grad norm %.4g", norm);
		printf(" %.0f tokens/s %.2f ms ", (double)p->tokens / dt, dt * 1e3);
		print_eta(eta);
		printf("\n");
		fflush(stdout);
	}
	if (L->mf) {
		rt_metrics_row r = {
		    .step = step, .loss = v[V_HAVE] > 0 ? v[V_LOSS] : NAN, .lr = lr, .grad_norm = norm,
		    .tokens_per_s = (double)p->tokens / dt,
		    .mfu = p->peak_flops > 0 ? v[V_FLOPS] / (dt * (double)ctx->world * p->peak_flops) : NAN,
		    .step_time_s = dt, .predicted_step_time_s = p->predicted_us > 0 ? p->predicted_us * 1e-6 : NAN,
		    .eta_s = eta};
		if ((rc = rt__metrics_write(ctx, L->mf, L->metrics, &r)))
			return rc;
	}
	if (L->save_every > 0 && step % L->save_every == 0 && (rc = save(cli, ctx)))
		return rc;
	if (v[V_TERM] > 0 || v[V_INT] > 0) {
		L->stop = v[V_TERM] > 0 ? SIGTERM : SIGINT;
		return 1;
	}
	return RT_OK;
}

/* ---- evaluation ------------------------------------------------------------- */

int rt_cli_eval_passes(rt_cli *cli, rt_ctx *ctx)
{
	rt_loop *L = cli->loop;
	int rc;
	if (L->eval_every <= 0 || rt_step_count(ctx) % L->eval_every)
		return 0;
	if ((rc = rt__eval_load(ctx, L->eval_data)))
		return rc;
	int64_t per = ctx->train.dp * ctx->train.microbatches;
	int64_t k = L->eval_batches > 0 ? L->eval_batches : per, n = (k + per - 1) / per;
	L->passes = n > 1 << 20 ? 1 << 20 : (int)n;
	L->eval_sum = 0;
	return L->passes;
}

int rt_cli_eval_end(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss, int pass)
{
	rt_loop *L = cli->loop;
	MPI_Request req;
	int rc;
	if (have_loss)
		L->eval_sum += loss;
	if (pass + 1 < L->passes)
		return RT_OK;
	/* The mean of the passes (each the mean of as many tokens), to rank 0. */
	double v[2] = {have_loss ? L->eval_sum : 0, have_loss ? 1 : 0};
	if ((rc = rt__coll(ctx, MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "the evaluation's end")))
		return rc;
	int64_t batches = (int64_t)L->passes * ctx->train.dp * ctx->train.microbatches;
	double mean = v[0] / (double)L->passes;
	if (rt_rank(ctx) != 0 || v[1] <= 0)
		return RT_OK;
	printf("eval after step %lld: loss %.6f (%a) over %lld micro-batches of %s\n",
	       (long long)rt_step_count(ctx), mean, mean, (long long)batches, L->eval_data);
	fflush(stdout);
	return L->mf ? rt__metrics_eval(ctx, L->mf, L->metrics, rt_step_count(ctx), mean, batches)
	             : RT_OK;
}

int rt_cli_save(rt_cli *cli, rt_ctx *ctx)
{
	rt_loop *L = cli->loop;
	int rc;
	const char *sig = L->stop == SIGTERM ? "SIGTERM" : "SIGINT";
	if (cli->checkpoint && L->saved_at != rt_step_count(ctx) && (rc = save(cli, ctx)))
		return rc;
	if (L->stop && rt_rank(ctx) == 0) {
		if (cli->checkpoint)
			printf("stopped on %s after step %lld: checkpoint %s saved (step %lld); "
			       "'--resume %s' goes on from it\n",
			       sig, (long long)rt_step_count(ctx), cli->checkpoint,
			       (long long)rt_step_count(ctx), cli->checkpoint);
		else
			printf("stopped on %s after step %lld: nothing saved (no --checkpoint)\n", sig,
			       (long long)rt_step_count(ctx));
		fflush(stdout);
	}
	return RT_OK;
}
