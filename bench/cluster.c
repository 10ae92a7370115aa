/* cluster: planning for a cluster -- the planner's choice of D, P, the
 * distributed optimizer and the recomputation (--dp auto) against what a
 * user writes without a planner, Megatron-LM's recipe.
 *
 *   cluster [--budget SECONDS] [--devices N,N,...] [MODEL ...]
 *
 * Run from the repository root.  For each zoo model (models/NAME.yaml but
 * the tiny ones; or the names given) on N devices of the h100-sxm preset
 * (8 a node, 80 GiB each; N = 64, 128, 256, 512 and 1024 unless given):
 *
 *   the global batch: the model file's micro-batches doubled until there are
 *     at least 2N of them, so that every D x P = N gives each replica at
 *     least 2P, two per pipeline device;
 *   default: interleaved 1F1B with 2 chunks a device on the uniform
 *     partition, full recomputation, the distributed optimizer, the smallest
 *     P (a divisor of N) whose plan fits every device, D = N / P;
 *   tuned: `--dp auto` and `--recompute auto` with the tuner (D, P, the
 *     sharding, the recomputation, the partition, placement and order), the
 *     budget given (default 20 s, the CLI's).
 *
 * One row per (model, N): each plan's (D, P), recomputation and tokens/s,
 * the ratio tuned / default, and tuned's distance to its lower bound; then
 * the geometric mean of the ratio per model and over all rows, and the
 * median distance to the bound.  It prints; it asserts nothing. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend.h"
#include "pass.h"
#include "scaleout.h"
#include "simulate.h"
#include "tune.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct plan_out {
	bool ok;
	int64_t d, p;
	ir_recompute recompute;
	double tps, step, bound, peak_gib, seconds;
	char why[120];
} plan_out;

/* Heterogeneous: the model mixes in Mamba or MoE layers (the stacks of
 * attention and MLP alone are the homogeneous ones). */
static bool heterogeneous(const char *path)
{
	fe_overrides ov = {.dp = 1};
	ir_module *m = fe_load(path, &ov);
	bool h = false;
	for (int l = 0; m && l < m->nlayers; l++)
		h |= m->layers[l].kind == IR_LAYER_MAMBA || m->layers[l].kind == IR_LAYER_MOE;
	ir_free(m);
	return h;
}

/* The global batch: the file's micro-batches doubled to at least 2N. */
static int64_t batch(const char *path, int64_t n)
{
	fe_overrides ov = {.devices = n, .cluster = "h100-sxm", .dp = 1};
	ir_module *m = fe_load(path, &ov);
	int64_t mb = m ? m->train.microbatches : 1;
	ir_free(m);
	while (mb < 2 * n)
		mb *= 2;
	return mb;
}

/* Megatron's recipe at one P: a plan, or why not; fits says whether every
 * device is within its memory. */
static bool megatron_at(const char *path, int64_t n, int64_t mb, int64_t p, plan_out *o)
{
	int64_t d = n / p;
	fe_overrides ov = {.devices = n, .microbatches = mb, .cluster = "h100-sxm",
	                   .schedule = "i1f1b", .chunks = 2, .partition = "uniform", .dp = d,
	                   .dist_opt = d > 1, .recompute = "full"};
	ir_module *m = fe_load(path, &ov);
	if (!m)
		return false;
	diag_sink quiet = {0};
	bool fits = false;
	if (pass_run_default(m, &(pass_opts){.diag = &quiet}) == 0) {
		sim_result *r = sim_run_to(m, &quiet);
		fits = r != NULL;
		double peak = 0;
		for (int i = 0; r && i < r->ndev; i++) {
			fits &= r->dev[i].peak_mem <= m->cluster.mem;
			peak = fmax(peak, (double)r->dev[i].peak_mem);
		}
		if (fits)
			*o = (plan_out){.ok = true, .d = d, .p = p, .recompute = IR_RECOMP_FULL,
			                .tps = r->tokens_per_s, .step = r->makespan,
			                .peak_gib = peak / (1 << 30)};
		sim_free(r);
	}
	ir_free(m);
	return fits;
}

static void megatron(const char *path, int64_t n, int64_t mb, plan_out *o)
{
	double t0 = now();
	*o = (plan_out){0};
	snprintf(o->why, sizeof o->why, "no P fits");
	for (int64_t p = 1; p <= n; p++)
		if (n % p == 0 && mb % (n / p) == 0 && megatron_at(path, n, mb, p, o))
			break;
	o->seconds = now() - t0;
}

static void tuned(const char *path, int64_t n, int64_t mb, double budget, plan_out *o)
{
	*o = (plan_out){0};
	fe_overrides ov = {.devices = n, .microbatches = mb, .cluster = "h100-sxm", .dp_auto = true};
	ir_module *m = fe_load(path, &ov);
	if (!m) {
		snprintf(o->why, sizeof o->why, "does not load");
		return;
	}
	char *diag = NULL;
	size_t len = 0;
	diag_sink quiet = {.stream = open_memstream(&diag, &len)};
	tune_budget b = tune_budget_start(budget);
	double t0 = now();
	scaleout so;
	ir_module *x = scaleout_search(m, &(pass_opts){.diag = &quiet, .budget = &b}, &so);
	o->seconds = now() - t0;
	if (quiet.stream)
		fclose(quiet.stream);
	if (x) {
		const scaleout_row *c = &so.rows[so.chosen];
		*o = (plan_out){.ok = true, .d = c->dp, .p = c->pp, .recompute = c->recompute,
		                .tps = c->tokens_per_s, .step = c->step, .bound = c->bound,
		                .peak_gib = (double)c->peak / (1 << 30), .seconds = o->seconds};
	} else {
		snprintf(o->why, sizeof o->why, "%.119s", quiet.first);
	}
	free(diag);
	ir_free(x);
	scaleout_free(&so);
	ir_free(m);
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double budget = 20;
	int64_t ns[16] = {64, 128, 256, 512, 1024};
	int nn = 5;
	const char *names[64];
	int nnames = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
			budget = atof(argv[++i]);
		} else if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) {
			nn = 0;
			for (char *s = strtok(argv[++i], ","); s && nn < 16; s = strtok(NULL, ","))
				ns[nn++] = atoll(s);
		} else if (nnames < 64) {
			names[nnames++] = argv[i];
		}
	}
	if (!nnames) {
		DIR *dir = opendir("models");
		struct dirent *e;
		static char keep[64][64];
		while (dir && (e = readdir(dir)) && nnames < 64) {
			size_t k = strlen(e->d_name);
			if (k < 6 || strcmp(e->d_name + k - 5, ".yaml") || strncmp(e->d_name, "tiny", 4) == 0)
				continue;
			snprintf(keep[nnames], sizeof keep[nnames], "%.*s", (int)(k - 5), e->d_name);
			names[nnames] = keep[nnames];
			nnames++;
		}
		if (dir)
			closedir(dir);
		for (int i = 0; i < nnames; i++) /* a stable order */
			for (int j = i; j > 0 && strcmp(names[j], names[j - 1]) < 0; j--) {
				const char *t = names[j];
				names[j] = names[j - 1], names[j - 1] = t;
			}
	}
	printf("h100-sxm (8 a node, 80 GiB); tuned: --dp auto --recompute auto, --tune-budget %g s\n"
	       "default: i1f1b v=2, uniform, full recomputation, distributed optimizer, the smallest P "
	       "that fits\n\n", budget);
	printf("%-20s %5s %6s | %-12s %10s | %-17s %10s %7s %8s %7s\n", "model", "N", "M",
	       "default D x P", "tokens/s", "tuned D x P, rc", "tokens/s", "ratio", "vs bound", "plan s");
	double all_log = 0, het_log = 0, gaps[1024], least = INFINITY, slowest = 0;
	int all_n = 0, het_n = 0, ngaps = 0;
	char least_at[96] = "";
	for (int i = 0; i < nnames; i++) {
		char path[512];
		snprintf(path, sizeof path, "models/%s.yaml", names[i]);
		double model_log = 0;
		int model_n = 0;
		bool het = heterogeneous(path);
		for (int k = 0; k < nn; k++) {
			int64_t n = ns[k], mb = batch(path, n);
			plan_out def, tun;
			megatron(path, n, mb, &def);
			tuned(path, n, mb, budget, &tun);
			char a[32] = "-", b[48] = "-", ta[32] = "-", tb[32] = "-", r[16] = "-", g[16] = "-";
			if (def.ok) {
				snprintf(a, sizeof a, "%lld x %lld", (long long)def.d, (long long)def.p);
				snprintf(ta, sizeof ta, "%.0f", def.tps);
			}
			if (tun.ok) {
				snprintf(b, sizeof b, "%lld x %lld, %s", (long long)tun.d, (long long)tun.p,
				         ir_recompute_names[tun.recompute]);
				snprintf(tb, sizeof tb, "%.0f", tun.tps);
				snprintf(g, sizeof g, "+%.1f%%", 100 * (tun.step / tun.bound - 1));
				if (ngaps < 1024)
					gaps[ngaps++] = tun.step / tun.bound - 1;
			}
			if (def.ok && tun.ok) {
				double q = tun.tps / def.tps;
				snprintf(r, sizeof r, "%.2fx", q);
				model_log += log(q), model_n++;
				all_log += log(q), all_n++;
				if (het)
					het_log += log(q), het_n++;
				if (q < least) {
					least = q;
					snprintf(least_at, sizeof least_at, "%s on %lld", names[i], (long long)n);
				}
			}
			slowest = tun.seconds > slowest ? tun.seconds : slowest;
			printf("%-20s %5lld %6lld | %-12s %10s | %-17s %10s %7s %8s %7.1f", names[i],
			       (long long)n, (long long)mb, a, ta, b, tb, r, g, tun.seconds);
			if (!def.ok)
				printf("  default: %s", def.why);
			if (!tun.ok)
				printf("  tuned: %s", tun.why);
			printf("\n");
			fflush(stdout);
		}
		if (model_n)
			printf("%-20s geometric mean tuned / default: %.2fx over %d sizes\n", names[i],
			       exp(model_log / model_n), model_n);
	}
	if (all_n)
		printf("\nall: geometric mean tuned / default %.2fx over %d rows", exp(all_log / all_n),
		       all_n);
	if (ngaps) {
		qsort(gaps, (size_t)ngaps, sizeof *gaps, by_double);
		printf("; tuned above its lower bound: median %.1f %%, worst %.1f %%",
		       100 * gaps[ngaps / 2], 100 * gaps[ngaps - 1]);
	}
	printf("\n");
	if (het_n)
		printf("heterogeneous models (Mamba or MoE layers): geometric mean tuned / default %.2fx "
		       "over %d rows\n", exp(het_log / het_n), het_n);
	if (all_n)
		printf("least ratio: %.2fx (%s); the longest plan: %.1f s with --tune-budget %g\n", least,
		       least_at, slowest, budget);
	return 0;
}
