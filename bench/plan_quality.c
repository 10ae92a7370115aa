/* plan_quality: the tuner's plans against the baselines, on the model zoo
 * and on the published timing profiles.
 *
 *   plan_quality [PROFILES_DIR] [--budget SECONDS] [--only zoo|profiles]
 *
 * Run from the repository root (PROFILES_DIR defaults to
 * ../shared/profiles).  Table 1 plans the zoo's heterogeneous models and
 * the llama-3-8b control with analytic costs on h100-sxm, P in {4, 8, 16,
 * 32}, M in {P, 2P, 4P}; table 2 plans every published profile
 * (fe_load_profile_model) on the ideal cluster, P in {4, 8}, M in {8, 16}.
 * Each row: the simulated step of the baselines (tune_baselines, planned
 * on a copy), of the `tuned` schedule (the default pipeline, timed), the
 * speedups, and the gap to tune_lower_bound.  Then geometric means per
 * model and overall, and median gaps.  It prints; it asserts nothing. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend.h"
#include "pass.h"
#include "simulate.h"
#include "tune.h"

/* The baselines shown, by their tune_row names; "best" is over all
 * TUNE_NBASELINES of them. */
static const char *const shown[] = {"1f1b", "i1f1b v=2", "zbh1", "zbv"};
#define NSHOWN (int)(sizeof shown / sizeof *shown)

typedef struct row {
	const char *model;
	int p, m;
	tune_row base[TUNE_NBASELINES];
	bool have_base;      /* costs known, so the baselines were planned */
	bool ok;             /* the tuned plan was made and simulated */
	double tuned, lb;    /* microseconds */
	double secs;         /* wall time of the default pipeline */
	char why[96];        /* !ok: what stopped it */
} row;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const tune_row *base_row(const row *r, const char *name)
{
	for (int i = 0; i < TUNE_NBASELINES; i++)
		if (strcmp(r->base[i].name, name) == 0)
			return &r->base[i];
	return NULL;
}

/* The fastest baseline that fits, or NULL. */
static const tune_row *best_row(const row *r)
{
	const tune_row *best = NULL;
	for (int i = 0; r->have_base && i < TUNE_NBASELINES; i++) {
		const tune_row *b = &r->base[i];
		if (b->ok && b->fits && (!best || b->makespan < best->makespan))
			best = b;
	}
	return best;
}

/* What stopped the tuned plan, from its first diagnostic: "does not fit
 * (D3 needs 95.1 GiB)" for memory, else the message cut short. */
static void reason(const char *diag, char *out, size_t n)
{
	const char *e = diag ? strstr(diag, "error: ") : NULL;
	int dev;
	double need;
	const char *d = e ? strstr(e, "device D") : NULL;
	if (e && strstr(e, "does not fit") && d && sscanf(d, "device D%d needs %lf", &dev, &need) == 2) {
		snprintf(out, n, "does not fit (D%d needs %.1f GiB)", dev, need);
		return;
	}
	snprintf(out, n, "%.60s", e ? e + 7 : "failed");
	out[strcspn(out, "\n")] = 0;
}

/* The tuner's budget, one per plan (--budget). */
static tune_budget budget_per_plan;

/* Plan mod (schedule 'tuned') with the default pipeline, simulate it, and
 * plan the baselines on its costs.  Frees mod. */
static void plan(ir_module *mod, row *r)
{
	char *diag = NULL;
	size_t len = 0;
	FILE *saved = diag_stream;
	diag_stream = open_memstream(&diag, &len);
	double t0 = now();
	int rc = pass_run_default(mod, &(pass_opts){.budget = &budget_per_plan});
	r->secs = now() - t0;
	sim_result *s = rc == 0 ? sim_run(mod) : NULL;
	fclose(diag_stream);
	diag_stream = saved;
	if (s) {
		r->ok = true;
		r->tuned = s->makespan;
	} else {
		reason(diag, r->why, sizeof r->why);
	}
	free(diag);
	sim_free(s);
	r->have_base = true;
	for (int l = 0; l < mod->nlayers; l++)
		r->have_base &= mod->layers[l].cost.known;
	if (r->have_base) {
		tune_baselines(mod, &budget_per_plan, r->base);
		r->lb = tune_lower_bound(mod);
	}
	ir_free(mod);
}

/* ---- printing ------------------------------------------------------------- */

static void header(void)
{
	printf("| model | P | M |");
	for (int i = 0; i < NSHOWN; i++)
		printf(" %s |", shown[i]);
	printf(" best baseline | tuned | x i1f1b | x best | LB gap | tuner s |\n");
	printf("|---|--:|--:|");
	for (int i = 0; i < NSHOWN; i++)
		printf("--:|");
	printf("---|--:|--:|--:|--:|--:|\n");
}

static void print_row(const row *r)
{
	printf("| %s | %d | %d |", r->model, r->p, r->m);
	for (int i = 0; i < NSHOWN; i++) {
		const tune_row *b = r->have_base ? base_row(r, shown[i]) : NULL;
		if (b && b->ok)
			printf(" %.1f%s |", b->makespan * 1e-3, b->fits ? "" : "!");
		else
			printf(" n/a |");
	}
	const tune_row *best = best_row(r);
	if (best)
		printf(" %s %.1f |", best->name, best->makespan * 1e-3);
	else
		printf(" none fits |");
	if (!r->ok) {
		printf(" %s | | | | %.2f |\n", r->why, r->secs);
		return;
	}
	const tune_row *i1 = base_row(r, "i1f1b v=2");
	printf(" %.1f |", r->tuned * 1e-3);
	if (i1 && i1->ok && i1->fits)
		printf(" %.3f |", i1->makespan / r->tuned);
	else
		printf(" |");
	if (best)
		printf(" %.3f |", best->makespan / r->tuned);
	else
		printf(" |");
	printf(" %.1f%% | %.2f |\n", 100 * (r->tuned / r->lb - 1), r->secs);
}

/* ---- summaries -------------------------------------------------------------- */

typedef struct summary {
	double log_i1, log_best; /* sums of log speedups */
	int n_i1, n_best;
	double *gaps;
	int ngaps;
} summary;

static void add(summary *s, const row *r, int cap)
{
	if (!r->ok)
		return;
	const tune_row *i1 = base_row(r, "i1f1b v=2"), *best = best_row(r);
	if (i1 && i1->ok && i1->fits)
		s->log_i1 += log(i1->makespan / r->tuned), s->n_i1++;
	if (best)
		s->log_best += log(best->makespan / r->tuned), s->n_best++;
	if (!s->gaps)
		s->gaps = calloc((size_t)cap, sizeof *s->gaps);
	s->gaps[s->ngaps++] = r->tuned / r->lb - 1;
}

static void print_summary(const char *name, const char *kind, summary *s)
{
	printf("| %s | %s |", name, kind);
	if (s->n_i1)
		printf(" %.3f (%d) |", exp(s->log_i1 / s->n_i1), s->n_i1);
	else
		printf(" n/a |");
	if (s->n_best)
		printf(" %.3f (%d) |", exp(s->log_best / s->n_best), s->n_best);
	else
		printf(" n/a |");
	if (s->ngaps) {
		printf(" %.1f%% |\n", 100 * ir_median(s->gaps, s->ngaps));
	} else {
		printf(" n/a |\n");
	}
	free(s->gaps);
	*s = (summary){0};
}

/* Per model, then per kind, then all rows.  is_control(name) picks the
 * control models. */
static void summarize(const row *rows, int n, bool (*is_control)(const char *),
                      const char *hetero, const char *control)
{
	printf("\n| model | kind | geomean x i1f1b (rows) | geomean x best (rows) | median LB gap |\n");
	printf("|---|---|--:|--:|--:|\n");
	summary s = {0};
	for (int i = 0; i < n;) {
		int j = i;
		for (; j < n && strcmp(rows[j].model, rows[i].model) == 0; j++)
			add(&s, &rows[j], n);
		print_summary(rows[i].model, is_control(rows[i].model) ? control : hetero, &s);
		i = j;
	}
	for (int c = 0; c < 2; c++) {
		for (int i = 0; i < n; i++)
			if (is_control(rows[i].model) == (c == 1))
				add(&s, &rows[i], n);
		char title[64];
		snprintf(title, sizeof title, "**all %s**", c ? control : hetero);
		print_summary(title, c ? control : hetero, &s);
	}
	for (int i = 0; i < n; i++)
		add(&s, &rows[i], n);
	print_summary("**all**", "", &s);
}

/* ---- the two tables ------------------------------------------------------------ */

static const char *const zoo[] = {"gemma-7b",       "deepseek-v2-lite", "deepseek-v3",
                                  "nemotron-h-8b",  "nemotron-h-56b",   "jamba-v0.1",
                                  "llama-3-8b"};
#define NZOO (int)(sizeof zoo / sizeof *zoo)

static bool zoo_control(const char *name)
{
	return strcmp(name, "llama-3-8b") == 0;
}

static bool profile_control(const char *name)
{
	return strncmp(name, "llama", 5) == 0;
}

static void legend(double budget)
{
	printf("Columns: 1f1b, i1f1b v=2, zbh1, zbv: the baseline's simulated step in ms (uniform "
	       "partition; '!' it does not fit the device's memory, n/a it cannot plan the case); "
	       "best baseline: the fastest of all %d baselines (gpipe, zbh2 and balanced zbh1 "
	       "included) that fits; tuned: the `tuned` schedule's step in ms (fe_load with "
	       "--schedule tuned, the default pipeline, sim_run); x i1f1b, x best: i1f1b's and the "
	       "best baseline's step over tuned's (> 1: tuned is faster; blank when that side does "
	       "not fit); LB gap: tuned / tune_lower_bound - 1; tuner s: wall seconds of the "
	       "default pipeline, tuner budget %.1f s per plan (tune_budget_start).\n\n",
	       TUNE_NBASELINES, budget);
}

static int table_zoo(double budget)
{
	printf("## Table 1: model zoo, analytic costs, cluster h100-sxm (80 GiB)\n\n");
	legend(budget);
	header();
	row *rows = calloc(NZOO * 12, sizeof *rows);
	int n = 0;
	for (int z = 0; z < NZOO; z++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), zoo[z]);
		for (int p = 4; p <= 32; p *= 2)
			for (int m = p; m <= 4 * p; m *= 2) {
				row *r = &rows[n++];
				r->model = zoo[z], r->p = p, r->m = m;
				fe_overrides ov = {.devices = p, .microbatches = m, .cluster = "h100-sxm",
				                   .schedule = "tuned"};
				ir_module *mod = fe_load(path, &ov);
				if (!mod) {
					free(rows);
					return 1;
				}
				plan(mod, r);
				print_row(r);
				fflush(stdout);
			}
	}
	summarize(rows, n, zoo_control, "heterogeneous", "control");
	free(rows);
	return 0;
}

static int by_name(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static int table_profiles(const char *dir, double budget)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "plan_quality: cannot open %s\n", dir);
		return 1;
	}
	char **files = NULL;
	int nfiles = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) {
			files = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
			files[nfiles++] = strdup(e->d_name);
		}
	}
	closedir(d);
	qsort(files, (size_t)nfiles, sizeof *files, by_name);

	printf("\n## Table 2: published profiles (%s), measured costs, cluster ideal\n\n", dir);
	printf("No memory limits and free links: every plan fits.  ");
	legend(budget);
	header();
	row *rows = calloc((size_t)nfiles * 4 + 1, sizeof *rows);
	char **names = calloc((size_t)nfiles + 1, sizeof *names);
	int n = 0, rc = 0;
	for (int f = 0; f < nfiles; f++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, files[f]);
		names[f] = strndup(files[f], strlen(files[f]) - 5);
		for (int p = 4; p <= 8; p *= 2)
			for (int m = 8; m <= 16; m *= 2) {
				fe_overrides ov = {.devices = p, .microbatches = m, .schedule = "tuned"};
				ir_module *mod = fe_load_profile_model(path, &ov);
				if (!mod) {
					rc = 1; /* the diagnostic says why */
					continue;
				}
				row *r = &rows[n++];
				r->model = names[f], r->p = p, r->m = m;
				plan(mod, r);
				print_row(r);
				fflush(stdout);
			}
	}
	summarize(rows, n, profile_control, "hybrid", "dense");
	for (int f = 0; f < nfiles; f++)
		free(files[f]), free(names[f]);
	free(files);
	free(names);
	free(rows);
	return rc;
}

int main(int argc, char **argv)
{
	const char *dir = "../shared/profiles";
	double budget = 2;
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
			budget = atof(argv[++i]);
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
		           (strcmp(argv[i + 1], "zoo") == 0 || strcmp(argv[i + 1], "profiles") == 0)) {
			only = argv[++i];
		} else if (argv[i][0] != '-') {
			dir = argv[i];
		} else {
			fprintf(stderr, "usage: plan_quality [PROFILES_DIR] [--budget SECONDS] [--only zoo|profiles]\n");
			return 1;
		}
	}
	budget_per_plan = tune_budget_start(budget);
	double t0 = now();
	printf("# plan_quality: the tuned schedule against the baselines\n\n");
	int rc = only && strcmp(only, "profiles") == 0 ? 0 : table_zoo(budget);
	if (rc == 0 && !(only && strcmp(only, "zoo") == 0))
		rc = table_profiles(dir, budget);
	fprintf(stderr, "plan_quality: %.1f s\n", now() - t0);
	return rc;
}
