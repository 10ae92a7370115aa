/* rt_cli.c: what the per-rank programs of `octopipe compile` share beyond
 * the training calls: their command line (--steps, --data, --checkpoint,
 * --resume, --trace, --profile, --help; the training loop's options are
 * rt_loop.c's), the step clock and the summary, and the scalar forms of
 * rt_send/rt_recv.  Keeping these here keeps the
 * generated LLVM IR to the plan itself (docs/codegen.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

static const char usage_text[] =
    "options:\n"
    "  --steps N         train N steps (after --resume: N more)\n"
    "  --data FILE[,FILE...]  train on these files, one stream (docs/data.md)\n"
    "  --data-format F   auto (by name: .bin .u16 uint16, .u32 uint32, else text),\n"
    "                    text (a token per byte), u16 or u32 (little-endian tokens)\n"
    "  --data-position P with --resume on other data than the checkpoint's: reset\n"
    "                    (from sample 0) or keep (the checkpoint's position)\n"
    "  --checkpoint DIR  save the model and optimizer state there after training\n"
    "                    (and on SIGTERM or SIGINT: every rank stops after the step)\n"
    "  --resume DIR      start from the checkpoint in DIR (any plan's)\n"
    "  --trace DIR       write DIR/trace-rank<R>.json (Chrome trace) at the end\n"
    "  --profile FILE    profiling mode: time F, B, W of this rank's layers, write\n"
    "                    FILE (docs/profile.md; 'octopipe plan --profile FILE'), no training\n"
    "  --help            say what this program is\n";
static const char usage_tail[] =
    "Every rank of the job gets the same options: run them all with the 'launch'\n"
    "script next to this program ('launch --steps 20').\n";

static const char *base_name(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;
	return s ? s + 1 : p ? p : "rank";
}

static int usage_error(const char *prog, const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: error: ", prog);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", usage_text);
	rt__loop_usage(stderr);
	fputs(usage_tail, stderr);
	return RT_EARG;
}

/* The model's text file: an absolute path as it is, else relative to the
 * directory of the running executable, so a compiled directory can move. */
static const char *resolve_data(rt_cli *cli, const char *data)
{
	if (!data || data[0] == '/')
		return data;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return data;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	if ((size_t)snprintf(cli->path, sizeof cli->path, "%s/%s", exe, data) >= sizeof cli->path)
		return data;
	return cli->path;
}

static int parse(int argc, char **argv, const rt_prog_info *prog, rt_cli *cli);

int rt_cli_parse(int argc, char **argv, const rt_prog_info *prog, rt_cli *cli)
{
	memset(cli, 0, sizeof *cli);
	cli->prog = prog;
	cli->steps = prog->steps;
	if (!(cli->loop = rt__loop_new())) {
		fprintf(stderr, "%s: error: out of memory\n", base_name(argc > 0 ? argv[0] : NULL));
		return RT_EARG;
	}
	int rc = parse(argc, argv, prog, cli);
	if (rc) {
		rt__loop_free(cli->loop);
		cli->loop = NULL;
	}
	return rc;
}

static int parse(int argc, char **argv, const rt_prog_info *prog, rt_cli *cli)
{
	const char *name = base_name(argc > 0 ? argv[0] : NULL), *data = NULL, *fmt = NULL,
	           *pos = NULL;
	static const char *const flags[] = {"--steps",   "--data",    "--checkpoint",  "--resume",
	                                    "--trace",   "--profile", "--data-format", "--data-position"};
	const char **dest[] = {NULL,         &data,         &cli->checkpoint, &cli->resume,
	                       &cli->trace,  &cli->profile, &fmt,             &pos};
	enum { NFLAGS = sizeof flags / sizeof flags[0] };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("%s\ncompile hash 0x%016llx\n%s", prog->about,
			       (unsigned long long)prog->compile, usage_text);
			rt__loop_usage(stdout);
			fputs(usage_tail, stdout);
			return 1;
		}
		int k = -1;
		size_t len = strcspn(a, "=");
		for (int f = 0; f < NFLAGS; f++)
			if (strlen(flags[f]) == len && !strncmp(a, flags[f], len))
				k = f;
		int lk = k < 0 ? rt__loop_option(a, len) : -1;
		if (k < 0 && lk < 0)
			return usage_error(name, "unknown option '%s'", a);
		const char *fl = k >= 0 ? flags[k] : rt__loop_name(lk);
		const char *v = a[len] == '=' ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
		if (!v || !*v)
			return usage_error(name, "option '%s' needs a value", fl);
		if (lk >= 0) {
			const char *why = rt__loop_set(cli->loop, lk, v);
			if (why) {
				char msg[160];
				snprintf(msg, sizeof msg, "%s %s, got '%%s'", fl, why);
				return usage_error(name, msg, v);
			}
		} else if (k == 0) {
			char *end;
			errno = 0;
			long long n = strtoll(v, &end, 10);
			if (*end || errno || n < 0 || n > INT_MAX || *v < '0' || *v > '9')
				return usage_error(name, "--steps needs a count (0 or more), got '%s'", v);
			cli->steps = n;
		} else {
			*dest[k] = v;
		}
	}
	/* rt_data_format and rt_data_rule by their names (the rule's 0 has none) */
	static const char *const fmts[] = {"auto", "text", "u16", "u32", NULL},
	                         *const rules[] = {"", "reset", "keep", NULL};
	int f = 0, r = 0;
	while (fmt && fmts[f] && strcmp(fmt, fmts[f]))
		f++;
	while (pos && rules[++r] && strcmp(pos, rules[r]))
		;
	if (fmt && !fmts[f])
		return usage_error(name, "--data-format is auto, text, u16 or u32, not '%s'", fmt);
	if (pos && !rules[r])
		return usage_error(name, "--data-position is reset or keep, not '%s'", pos);
	if (pos && !cli->resume)
		return usage_error(name, "--data-position %s needs --resume DIR", pos);
	/* The model's files are read as compiled; --data's by their names. */
	cli->data_format = fmt ? f : data ? RT_DATA_AUTO : prog->data_format;
	cli->data_position = pos ? r : RT_DATA_SAME;
	cli->data = data ? data : resolve_data(cli, prog->data);
	return RT_OK;
}

/* What every rank of a job must agree on, all-gathered once at start. */
enum { K_COMPILE, K_STEPS, K_CHECKPOINT, K_RESUME, K_PROFILE, K_LOOP, K_N };

/* An option's value as the ranks compare it: 0 when not given, else a
 * hash of the string (never 0). */
static uint64_t opt_key(const char *v)
{
	return v ? rt__fnv(RT_FNV_INIT, v, strlen(v)) | 1 : 0;
}

/* Every rank's compile hash and options, all-gathered once: the ranks of
 * one job must come from one compile (docs/codegen.md), else a rank of
 * another model or seed would train with the others and one of another
 * plan would wait for messages nobody sends; and they must run with the
 * same --steps, --checkpoint, --resume and --profile (the 'launch' script
 * gives every rank the same arguments), else ranks that stop at different
 * steps, or save, load or profile alone, wait for each other until the
 * deadline, or train from two states.  The first rank that differs from
 * rank 0 is named, with both values where they are numbers, by every rank. */
static int same_job(rt_ctx *ctx, const rt_cli *cli)
{
	static const char *const flag[K_N] = {NULL, "--steps", "--checkpoint", "--resume",
	                                      "--profile", "--warmup, --decay, --decay-steps, --min-lr, "
	                                      "--clip, --save-every or --keep"};
	MPI_Request req;
	uint64_t mine[K_N] = {cli->prog->compile, (uint64_t)cli->steps, opt_key(cli->checkpoint),
	                      opt_key(cli->resume), opt_key(cli->profile), rt__loop_key(cli->loop)};
	uint64_t *all = malloc((size_t)ctx->world * K_N * sizeof *all);
	int rc;
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "start: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(mine, K_N, MPI_UINT64_T, all, K_N, MPI_UINT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "start: exchanging the compile hashes and options")))
		goto out;
	for (int k = 0; k < K_N; k++)
		for (int r = 1; r < ctx->world; r++) {
			uint64_t v = all[r * K_N + k], v0 = all[k];
			if (v == v0)
				continue;
			if (k == K_COMPILE)
				rc = rt__fail(ctx, RT_EARG,
				              "rank %d and rank 0 are programs of different compiles (compile "
				              "hash 0x%016llx on rank %d, 0x%016llx on rank 0: another model, "
				              "seed or plan): start every rank from one 'octopipe compile' "
				              "directory",
				              r, (unsigned long long)v, r, (unsigned long long)v0);
			else if (k == K_STEPS)
				rc = rt__fail(ctx, RT_EARG,
				              "rank %d and rank 0 were started with different options (--steps "
				              "%llu on rank %d, %llu on rank 0): give every rank the same ones "
				              "(the 'launch' script does)",
				              r, (unsigned long long)v, r, (unsigned long long)v0);
			else if (k == K_LOOP)
				rc = rt__fail(ctx, RT_EARG,
				              "rank %d and rank 0 were started with different options (%s "
				              "differ): give every rank the same ones (the 'launch' script does)",
				              r, flag[k]);
			else if (v && v0)
				rc = rt__fail(ctx, RT_EARG,
				              "rank %d and rank 0 were started with different options (%s names "
				              "another path on rank %d than on rank 0): give every rank the same "
				              "ones (the 'launch' script does)",
				              r, flag[k], r);
			else
				rc = rt__fail(ctx, RT_EARG,
				              "rank %d and rank 0 were started with different options (%s given "
				              "on rank %d, not on rank %d): give every rank the same ones (the "
				              "'launch' script does)",
				              r, flag[k], v ? r : 0, v ? 0 : r);
			goto out;
		}
out:
	free(all);
	return rc;
}

int rt_cli_start(rt_cli *cli, rt_ctx *ctx)
{
	const rt_prog_info *p = cli->prog;
	int rc;
	if (rt_rank(ctx) != p->rank || rt_world_size(ctx) != p->nranks)
		return rt__fail(ctx, RT_EARG,
		                "this is the program of rank %d of %d, but it runs as rank %d of %d "
		                "(start the ranks with the 'launch' script next to it)",
		                (int)p->rank, (int)p->nranks, rt_rank(ctx), rt_world_size(ctx));
	if ((rc = same_job(ctx, cli)) ||
	    (rc = rt_data_options(ctx, cli->data_format, cli->data_position)))
		return rc;
	/* A checkpoint, trace or profile that cannot be written is found now,
	 * not after training. */
	if (cli->checkpoint && !cli->profile && (rc = rt_ckpt_check(ctx, cli->checkpoint)))
		return rc;
	if ((rc = rt__trace_check(ctx)))
		return rc;
	if (cli->profile && rt_rank(ctx) == 0 && (rc = rt__out_check(ctx, "profile", cli->profile)))
		return rc;
	return rt__loop_start(cli, ctx);
}

static double now_s(void)
{
	return (double)rt__now_ns() * 1e-9;
}

void rt_cli_step_begin(rt_cli *cli)
{
	cli->t0 = now_s();
}

int rt_cli_step_end(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss)
{
	double dt = now_s() - cli->t0;
	if (cli->done++ == 0)
		cli->first_s = dt;
	else
		cli->rest_s += dt;
	if (have_loss)
		cli->last_loss = loss;
	return rt__loop_step(cli, ctx, loss, have_loss, dt);
}

int rt_cli_finish(rt_cli *cli, rt_ctx *ctx)
{
	uint64_t h;
	int rc = rt_model_hash(ctx, &h);
	if (rc)
		return rc;
	const rt_prog_info *p = cli->prog;
	/* The rank that printed the losses: the head's, of replica 0 with data
	 * parallelism (the others' heads hold no loss). */
	if (cli->done > 0 && ctx->head >= 0 && ctx->train.replica == 0) {
		/* The first step pays for page faults and MPI's connection set-up. */
		int64_t n = cli->done > 1 ? cli->done - 1 : 1;
		double mean = cli->done > 1 ? cli->rest_s / (double)n : cli->first_s;
		printf("summary: %lld steps, mean step %.2f ms%s, %.0f tokens/s, final loss %.6f",
		       (long long)cli->done, mean * 1e3, cli->done > 1 ? " after the first" : "",
		       (double)p->tokens / mean, cli->last_loss);
		if (p->predicted_us > 0) {
			printf("; predicted %.2f ms (measured/predicted %.2f", p->predicted_us * 1e-3,
			       mean * 1e6 / p->predicted_us);
			/* The prediction assumes a core per rank: say when they share. */
			long cores = sysconf(_SC_NPROCESSORS_ONLN);
			if (cores > 0 && rt_world_size(ctx) > cores)
				printf("; %d ranks share %ld cores, and the prediction assumes one per rank",
				       rt_world_size(ctx), cores);
			printf(")");
		}
		printf("\n");
	}
	if (rt_rank(ctx) == 0)
		printf("model hash 0x%016llx after step %lld\n", (unsigned long long)h,
		       (long long)rt_step_count(ctx));
	fflush(stdout);
	rt__loop_free(cli->loop);
	cli->loop = NULL;
	return RT_OK;
}

int rt_post_send(rt_ctx *ctx, int peer, const void *buf, size_t bytes, int stage, int mb,
                 int kind, int *req)
{
	return rt_send(ctx, peer, buf, bytes, (rt_tag){stage, mb, (rt_msg)kind}, req);
}

int rt_post_recv(rt_ctx *ctx, int peer, void *buf, size_t bytes, int stage, int mb, int kind,
                 int *req)
{
	return rt_recv(ctx, peer, buf, bytes, (rt_tag){stage, mb, (rt_msg)kind}, req);
}
