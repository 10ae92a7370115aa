/* plan_baselines: every baseline schedule on every model of the zoo.
 *
 *   plan_baselines [MODELS_DIR] [--cluster NAME] [--markdown]
 *
 * For each model, P in {4, 8, 16} devices and M in {P, 2P, 4P}
 * micro-batches, plans the model under each baseline schedule (uniform
 * partition, the schedule's own placement) on the h100-sxm cluster and
 * prints the simulated step: makespan, bubble and the largest peak memory
 * of any device (marked '!' when it exceeds the device).  A schedule that
 * cannot plan the case (too few layers, Megatron's m % p rule, ...) shows
 * its reason.  Columns are one per schedule, so later planners add one. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend.h"
#include "pass.h"
#include "simulate.h"

typedef struct column {
	const char *title;
	const char *schedule;
	int chunks;
} column;

static const column columns[] = {
	{"gpipe", "gpipe", 1}, {"1f1b", "1f1b", 1}, {"i1f1b v=2", "i1f1b", 2},
	{"zbh1", "zbh1", 1},   {"zbh2", "zbh2", 1}, {"zbv", "zbv", 0},
};
#define NCOLS (int)(sizeof columns / sizeof *columns)

/* One cell: "makespan ms / bubble % / peak GiB", or why there is none. */
static void cell(const char *path, const char *cluster, int p, int m, const column *c,
                 char *out, size_t n)
{
	fe_overrides ov = {.devices = p, .microbatches = m, .cluster = cluster,
	                   .schedule = c->schedule, .chunks = c->chunks};
	char *diag = NULL;
	size_t len = 0;
	FILE *saved = diag_stream;
	diag_stream = open_memstream(&diag, &len);
	ir_module *mod = fe_load(path, &ov);
	sim_result *r = NULL;
	if (mod && pass_run_default(mod, NULL) == 0)
		r = sim_run(mod);
	fclose(diag_stream);
	diag_stream = saved;
	if (r) {
		uint64_t peak = 0;
		for (int d = 0; d < r->ndev; d++)
			peak = r->dev[d].peak_mem > peak ? r->dev[d].peak_mem : peak;
		snprintf(out, n, "%.1f / %.1f%% / %.1f%s", r->makespan * 1e-3, 100 * r->bubble_ratio,
		         (double)peak / (1ull << 30), peak > mod->cluster.mem ? "!" : "");
	} else {
		/* The reason, shortened: the text after "error: ". */
		const char *e = diag ? strstr(diag, "error: ") : NULL;
		snprintf(out, n, "(%.40s)", e ? e + 7 : "failed");
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = ')', nl[1] = 0;
	}
	free(diag);
	sim_free(r);
	ir_free(mod);
}

int main(int argc, char **argv)
{
	const char *dir = fe_models_dir(), *cluster = "h100-sxm";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc)
			cluster = argv[++i];
		else if (argv[i][0] != '-')
			dir = argv[i];
		else {
			fprintf(stderr, "usage: plan_baselines [MODELS_DIR] [--cluster NAME]\n");
			return 1;
		}
	}
	char pat[1024];
	snprintf(pat, sizeof pat, "%s/*.yaml", dir);
	glob_t g;
	if (glob(pat, 0, NULL, &g) != 0) {
		fprintf(stderr, "plan_baselines: no models in %s\n", dir);
		return 1;
	}
	clock_t t0 = clock();
	printf("# plan_baselines: simulated step per baseline, cluster %s\n", cluster);
	printf("# cell: makespan ms / bubble %% / largest peak memory GiB ('!' over the device)\n\n");
	printf("| model | P | M |");
	for (int c = 0; c < NCOLS; c++)
		printf(" %s |", columns[c].title);
	printf("\n|---|---|---|");
	for (int c = 0; c < NCOLS; c++)
		printf("---|");
	printf("\n");
	for (size_t i = 0; i < g.gl_pathc; i++) {
		const char *path = g.gl_pathv[i];
		const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		if (strncmp(base, "tiny-", 5) == 0)
			continue; /* the CPU models are not for this cluster */
		for (int p = 4; p <= 16; p *= 2)
			for (int m = p; m <= 4 * p; m *= 2) {
				printf("| %.*s | %d | %d |", (int)(strlen(base) - 5), base, p, m);
				for (int c = 0; c < NCOLS; c++) {
					char buf[128];
					cell(path, cluster, p, m, &columns[c], buf, sizeof buf);
					printf(" %s |", buf);
				}
				printf("\n");
				fflush(stdout);
			}
	}
	globfree(&g);
	fprintf(stderr, "plan_baselines: %.1f s\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
	return 0;
}
