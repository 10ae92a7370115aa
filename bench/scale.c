/* scale: data parallelism on the model zoo -- which D x P, with and without
 * the distributed optimizer (its all-gather waited at the end of the step,
 * or overlapped with the next step's first forwards: overlap_param_gather,
 * the default), trains each model fastest on 64, 128 and 256 devices.
 *
 *   scale [MODEL ...]
 *
 * Run from the repository root.  For each zoo model (models/NAME.yaml but the
 * tiny ones; or the names given) on N = 64, 128 and 256 devices of the
 * h100-sxm preset (8 per node), every D that divides N with P = N / D
 * at most the model's layers, the rank order the planner chooses (auto):
 * one global batch per N,
 * 2N micro-batches of the model's size (so each replica runs 2P, two per
 * pipeline stage, whatever D), planned as 1f1b on the balanced partition
 * (the tuner would take minutes per row; a fixed baseline keeps the run to
 * a few minutes), lowered, proven and given its memory plan, then
 * simulated.  One row per plan: whether every device fits its 80 GiB,
 * the step, the exposed reduction and the collectives of the slowest
 * device, the largest peak memory, tokens/s; then the best plan that fits
 * per (model, N).  It prints; it asserts nothing. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend.h"
#include "pass.h"
#include "simulate.h"

typedef struct row {
	char model[32];
	int n, d, p, dist; /* dist: 0 off, 1 on, 2 on with the all-gather overlapped */
	char order[12]; /* the rank order the planner chose */
	bool ok, fits;
	double step, exposed, coll, update, tps; /* us, us, us, us, tokens/s */
	double gather;                           /* us of exposed: the carried waits */
	double peak;                             /* GiB */
	char why[80];
} row;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Plan and simulate one row; the diagnostics go to memory (the first
 * line is the row's reason when it fails). */
static void plan(const char *path, row *r)
{
	char *diag = NULL;
	size_t len = 0;
	FILE *saved = diag_stream;
	diag_stream = open_memstream(&diag, &len);
	fe_overrides ov = {.devices = r->n, .microbatches = 2 * r->n, .cluster = "h100-sxm",
	                   .schedule = "1f1b", .partition = "balanced", .dp = r->d,
	                   .dist_opt = r->dist != 0, .no_overlap_gather = r->dist == 1};
	ir_module *m = fe_load(path, &ov);
	sim_result *s = NULL;
	if (m && pass_run_default(m, NULL) == 0)
		s = sim_run(m);
	fclose(diag_stream);
	diag_stream = saved;
	if (s) {
		r->ok = true;
		r->fits = true;
		snprintf(r->order, sizeof r->order, "%s", ir_rank_order_names[m->plan.rank_order]);
		r->step = s->makespan;
		r->exposed = s->exposed;
		r->coll = s->coll;
		r->update = s->update;
		r->gather = s->gather_exposed;
		if (r->dist == 2 && !m->plan.overlap_gather)
			r->dist = 3; /* comm kept the gather at the end: not faster overlapped */
		r->tps = s->tokens_per_s;
		uint64_t peak = 0;
		for (int d = 0; d < s->ndev; d++) {
			peak = s->dev[d].peak_mem > peak ? s->dev[d].peak_mem : peak;
			r->fits &= s->dev[d].peak_mem <= m->cluster.mem;
		}
		r->peak = (double)peak / (double)(1ull << 30);
	} else {
		const char *e = diag ? strstr(diag, "error: ") : NULL;
		snprintf(r->why, sizeof r->why, "%.70s", e ? e + 7 : "failed");
		r->why[strcspn(r->why, "\n")] = 0;
	}
	free(diag);
	sim_free(s);
	ir_free(m);
}

static void print_row(const row *r)
{
	static const char *const dist[] = {"off", "on", "on, overlapped", "on, overlap declined"};
	printf("| %s | %d | %d x %d | %s | %s |", r->model, r->n, r->d, r->p, r->ok && r->d > 1 ? r->order : "",
	       dist[r->dist]);
	if (!r->ok) {
		printf(" %s | | | | | | |\n", r->why);
		return;
	}
	printf(" %s | %.1f | %.2f | %.2f | %.2f | %.1f | %.0f |\n", r->fits ? "yes" : "no", r->step * 1e-3,
	       r->exposed * 1e-3, r->gather * 1e-3, r->coll * 1e-3, r->peak, r->tps);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The zoo's model names (models/NAME.yaml, not tiny-NAME), sorted; malloc'd. */
static int zoo(char ***out)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s", fe_models_dir());
	DIR *d = opendir(dir);
	int n = 0;
	char **names = NULL;
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t k = strlen(e->d_name);
		if (k < 6 || strcmp(e->d_name + k - 5, ".yaml") != 0 || strncmp(e->d_name, "tiny-", 5) == 0)
			continue;
		names = realloc(names, (size_t)(n + 1) * sizeof *names);
		names[n++] = strndup(e->d_name, k - 5);
	}
	if (d)
		closedir(d);
	qsort(names, (size_t)n, sizeof *names, by_name);
	*out = names;
	return n;
}

int main(int argc, char **argv)
{
	char **names;
	int nm = argc > 1 ? argc - 1 : zoo(&names);
	if (argc > 1)
		names = argv + 1;
	int sizes[3] = {64, 128, 256}, nsizes = 3;
	const char *env = getenv("SCALE_N");
	if (env && *env) {
		nsizes = 0;
		for (char *e = (char *)env; *e && nsizes < 3;) {
			long v = strtol(e, &e, 10);
			if (v > 0)
				sizes[nsizes++] = (int)v;
			while (*e == ',')
				e++;
			if (*e && (*e < '0' || *e > '9'))
				break;
		}
	}
	printf("Data parallelism on the zoo: h100-sxm (8 per node, NVLink 450 GB/s 3 us, InfiniBand "
	       "50 GB/s 10 us), the rank order the planner chooses (ranks), 1f1b on the balanced partition, 2N micro-batches per "
	       "step (2P per replica), nccl, lowered and memory-planned, simulated.  fits: every "
	       "device's peak (resident + arena) within 80 GiB; step, exposed reduction (red.; of it, "
	       "the overlapped all-gather's carried waits: gath.) and collectives (coll.) in ms, the "
	       "most of any device; peak GiB, the largest.  SCALE_N=64,128 picks the sizes.\n\n");
	printf("| model | N | D x P | ranks | dist-opt | fits | step ms | exposed red. ms | gath. ms | "
	       "coll. ms | peak GiB | tokens/s |\n|---|--:|--:|---|---|---|--:|--:|--:|--:|--:|--:|\n");
	row *best = calloc((size_t)nm * 3, sizeof *best);
	double t0 = now();
	for (int i = 0; i < nm; i++) {
		char path[1200];
		snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), names[i]);
		if (argc > 1 && strchr(names[i], '/'))
			snprintf(path, sizeof path, "%s", names[i]);
		ir_module *probe = fe_load(path, &(fe_overrides){0});
		int layers = probe ? probe->nlayers : 0;
		ir_free(probe);
		for (int k = 0; k < nsizes; k++) {
			int N = sizes[k];
			row *b = &best[i * 3 + k];
			for (int D = 1; D <= N; D *= 2) {
				int P = N / D;
				if (P > layers)
					continue;
				for (int dist = 0; dist < (D > 1 ? 3 : 1); dist++) {
					row r = {.n = N, .d = D, .p = P, .dist = dist};
					snprintf(r.model, sizeof r.model, "%s", strrchr(path, '/') + 1);
					size_t len = strlen(r.model);
					if (len > 5 && strcmp(r.model + len - 5, ".yaml") == 0)
						r.model[len - 5] = 0;
					plan(path, &r);
					print_row(&r);
					fflush(stdout);
					if (r.ok && r.fits && (!b->ok || r.tps > b->tps))
						*b = r;
				}
			}
		}
	}
	printf("\nThe best plan that fits per (model, N):\n\n| model | N | D x P | ranks | dist-opt | "
	       "fits | step ms | exposed red. ms | gath. ms | coll. ms | peak GiB | tokens/s |\n"
	       "|---|--:|--:|---|---|---|--:|--:|--:|--:|--:|--:|\n");
	for (int i = 0; i < nm * 3; i++)
		if (best[i].ok && best[i].n)
			print_row(&best[i]);
	printf("\n%.0f s\n", now() - t0);
	free(best);
	return 0;
}
