/* report.c: `octopipe report DIR`, the simulator against a run.
 *
 * Reads DIR/plan.opir (what `compile` wrote) and the per-rank traces of a
 * run of DIR's programs (`DIR/launch --trace DIR/trace`: DIR/trace/ or DIR
 * itself holds trace-rank<R>.json), simulates the plan, and lines every
 * compute op of every step up with its simulated counterpart by (kind,
 * stage, micro-batch): a stage's op is the span of its layers' events.
 * Each step is measured from its first op's start; an op's measured time
 * is the median over the steps after the first (the first pays for page
 * faults and connection set-up).  Prints the step time predicted against
 * measured, busy and bubble per device, the ten ops whose end is furthest
 * from its prediction, and a verdict; writes DIR/report-timeline.svg (the
 * two timelines on one axis) and DIR/report-trace.json (the ranks' traces
 * with the prediction as processes of its own, aligned to the median
 * step).  Reads nothing it does not check: missing or foreign traces are
 * errors that say so. */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir.h"
#include "simulate.h"
#include "viz.h"

#define WITHIN 5.0 /* percent: "ran as predicted" */

/* An error about the directory or its traces: through the one printer
 * (no location: "octopipe report: error: ..."); returns the exit status. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror((ir_loc){0}, fmt, ap);
	va_end(ap);
	return 1;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* A number after "key": in one event line of a libocto_rt trace. */
/* A finite number after key (strtod also takes nan, inf and hex, which no
 * trace holds; a NaN would pass every range check below and then index by
 * (int)NaN). */
static bool field(const char *line, const char *key, double *out)
{
	const char *p = strstr(line, key);
	if (!p)
		return false;
	p += strlen(key);
	if (!(*p == '-' || (*p >= '0' && *p <= '9')))
		return false;
	char *end;
	*out = strtod(p, &end);
	return end != p && isfinite(*out);
}

/* The same, a whole number that fits an int. */
static bool int_field(const char *line, const char *key, double *out)
{
	return field(line, key, out) && *out == floor(*out) && *out >= INT_MIN && *out <= INT_MAX;
}

typedef struct run {
	const ir_module *m;
	int nsteps;          /* steps seen in the traces */
	int *opidx;          /* (kind, stage, mb) -> op index on the stage's device */
	int *count;          /* per device, op, step: layer events seen */
	double *t0, *t1;     /* per device, op, step: first start, last end (us) */
	int *base;           /* per device: offset of its ops in the arrays above */
	int total;
	double *red, *upd;   /* data parallelism, per device and step: the time in waits of
	                      * collectives, and in bucket updates (us) */
} run;

#define AT(rn, d, i, s) (((size_t)(rn)->base[d] + (size_t)(i)) * (size_t)(rn)->nsteps + (size_t)(s))

/* One rank's trace into rn (two passes: the first, with rn->t0 NULL, only
 * counts the steps). */
static int read_rank(run *rn, int d, int rank, const char *path, const char *text, int *stage_of)
{
	const ir_module *m = rn->m;
	int64_t M = ir_local_mb(m);
	for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char ev[512];
		if (len >= sizeof ev || !strstr(line, "\"ph\":\"X\""))
			continue;
		memcpy(ev, line, len);
		ev[len] = 0;
		/* R: a recomputing B's F again (rt_run_r), a part of that B */
		int kind = strstr(ev, "\"cat\":\"F\"") ? IR_OP_F
		         : strstr(ev, "\"cat\":\"B\"") || strstr(ev, "\"cat\":\"R\"") ? IR_OP_B
		         : strstr(ev, "\"cat\":\"W\"") ? IR_OP_W : -1;
		/* A collective's wait ("wait", no peer) or a bucket's update
		 * ("optim L<first>"): data parallelism's time, per step. */
		bool red = strstr(ev, "\"name\":\"wait\",") != NULL, upd = strstr(ev, "\"name\":\"optim L") != NULL;
		if (kind < 0 && !red && !upd)
			continue;
		double ts, dur, step, layer, mb, pid;
		if (!field(ev, "\"ts\":", &ts) || !field(ev, "\"dur\":", &dur) || dur < 0 ||
		    !int_field(ev, "\"step\":", &step) || !int_field(ev, "\"layer\":", &layer) ||
		    !int_field(ev, "\"mb\":", &mb) || !int_field(ev, "\"pid\":", &pid))
			return fail("%s: an event without ts, dur (finite, not negative), step, layer, mb or pid "
			            "(whole numbers): not a trace written by libocto_rt", path);
		if ((int)pid != rank)
			return fail("%s: an event of rank %d in rank %d's file", path, (int)pid, rank);
		if (kind < 0) {
			if (rn->t0 && step < rn->nsteps)
				(red ? rn->red : rn->upd)[(size_t)d * (size_t)rn->nsteps + (size_t)step] += dur;
			continue;
		}
		if (layer < 0 || layer >= m->nlayers || mb < 0 || mb >= (double)M || step < 0 || step > 1e7)
			return fail("%s: %s of layer %.0f, micro-batch %.0f: the plan has %d layers and %lld "
			            "micro-batches: this trace is from another plan",
			            path, ir_op_names[kind], layer, mb, m->nlayers, (long long)M);
		int s = stage_of[(int)layer];
		if (m->stages[s].device != d)
			return fail("%s: rank %d ran layer %.0f, but the plan (stage S%d) puts it on D%d: this "
			            "trace is from another plan", path, rank, layer, s, m->stages[s].device);
		if (!rn->t0) {
			if ((int)step + 1 > rn->nsteps)
				rn->nsteps = (int)step + 1;
			continue;
		}
		int i = rn->opidx[((size_t)kind * (size_t)m->nstages + (size_t)s) * (size_t)M + (size_t)mb];
		size_t at = AT(rn, d, i, (int)step);
		double a = ts, b = ts + dur;
		if (!rn->count[at]++ || a < rn->t0[at])
			rn->t0[at] = a;
		if (rn->count[at] == 1 || b > rn->t1[at])
			rn->t1[at] = b;
	}
	return 0;
}

static sim_result *new_result(const ir_module *m)
{
	arena *a = arena_new();
	sim_result *r = arena_alloc(a, sizeof *r);
	r->arena = a;
	r->ndev = m->ndevices;
	r->dev = arena_alloc(a, (size_t)(m->ndevices ? m->ndevices : 1) * sizeof *r->dev);
	for (int d = 0; d < m->ndevices; d++) {
		int n = m->devices[d].nops ? m->devices[d].nops : 1;
		r->dev[d].start = arena_alloc(a, (size_t)n * sizeof(double));
		r->dev[d].end = arena_alloc(a, (size_t)n * sizeof(double));
	}
	return r;
}

typedef struct gap {
	int d, i;
	double err; /* measured end - predicted end, us */
} gap;

static int cmp_gap(const void *a, const void *b)
{
	double x = fabs(((const gap *)a)->err), y = fabs(((const gap *)b)->err);
	return x > y ? -1 : x < y;
}

static const char *time_text(char *buf, double us)
{
	ir_fmt_time(buf, 24, us);
	return buf;
}

/* The merged trace: the ranks' events as they are, then the prediction
 * as processes "predicted D<d>" (pid 1000 + d), shifted to start where
 * the step at `origin` (trace time, us) starts. */
static int write_trace(const ir_module *m, const sim_result *r, char **texts, double origin,
                       const char *path)
{
	static const char head[] = "{\"traceEvents\":[\n", tail[] = "\n]}\n";
	FILE *f = fopen(path, "w");
	if (!f)
		return fail("cannot write '%s': %s", path, strerror(errno));
	fputs(head, f);
	for (int d = 0; d < m->ndevices; d++) {
		size_t n = strlen(texts[d]);
		fwrite(texts[d] + strlen(head), 1, n - strlen(head) - strlen(tail), f);
		fputs(",\n", f);
	}
	for (int d = 0; d < m->ndevices; d++) {
		fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"predicted D%d\"}},\n"
		           "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}",
		        1000 + d, d, 1000 + d, 1000 + d);
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm != IR_COMM_NONE || !isfinite(r->dev[d].start[i]))
				continue;
			fprintf(f, ",\n{\"name\":\"%s s%d m%d\",\"cat\":\"predicted\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
			           "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"stage\":%d,\"mb\":%d}}",
			        ir_op_names[op->kind], op->stage, op->mb, 1000 + d, origin + r->dev[d].start[i],
			        r->dev[d].end[i] - r->dev[d].start[i], op->stage, op->mb);
		}
		fputs(d + 1 < m->ndevices ? ",\n" : "", f);
	}
	fputs(tail, f);
	if (ferror(f) | fclose(f))
		return fail("cannot write '%s': write error", path);
	return 0;
}

int report_run(const char *dir)
{
	int rc = 1;
	char path[4200], tdir[4000];
	arena *ar = arena_new();
	ir_module *m = NULL;
	sim_result *pred = NULL, *meas = NULL;
	char **texts = NULL;
	run rn = {0};
	int *stage_of = NULL;
	double *span = NULL, *tmp = NULL;
	gap *gaps = NULL;

	if (strlen(dir) > 3900) {
		rc = fail("%.40s...: the directory's name is too long", dir);
		goto out;
	}
	snprintf(path, sizeof path, "%s/plan.opir", dir);
	if (!exists(path)) {
		rc = fail("%s: no plan.opir: give the directory 'octopipe compile -o DIR' wrote", dir);
		goto out;
	}
	src_file *src = src_read(ar, path);
	if (!src || !(m = ir_parse(src)) || ir_verify(m) != 0)
		goto out;
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			rc = fail("%s: layer %d has no cost: not a plan that 'compile' wrote", path, l);
			goto out;
		}
	if (!m->ndevices || !(pred = sim_run(m)))
		goto out;

	/* The traces: DIR/trace/ (launch --trace DIR/trace), else DIR. */
	snprintf(tdir, sizeof tdir, "%.3900s/trace", dir);
	snprintf(path, sizeof path, "%s/trace-rank0.json", tdir);
	if (!exists(path))
		snprintf(tdir, sizeof tdir, "%.3900s", dir);
	snprintf(path, sizeof path, "%s/trace-rank0.json", tdir);
	if (!exists(path)) {
		rc = fail("%s: no traces (trace-rank0.json in %s/trace or %s): run the plan with traces "
		          "first, e.g. '%s/launch --steps 20 --trace %s/trace'", dir, dir, dir, dir, dir);
		goto out;
	}
	int nd = m->ndevices;
	texts = calloc((size_t)nd, sizeof *texts);
	stage_of = malloc((size_t)m->nlayers * sizeof *stage_of);
	for (int s = 0; s < m->nstages; s++)
		for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
			stage_of[l] = s;
	/* With data parallelism the job has dp x nd ranks; replica 0's stand
	 * for the pipeline (every replica runs the same programs). */
	int nranks = (int)ir_dp(m) * nd;
	snprintf(path, sizeof path, "%s/trace-rank%d.json", tdir, nranks);
	if (exists(path)) {
		rc = fail("%s: a trace of rank %d, but the plan has %d ranks: these traces are from "
		          "another plan", path, nranks, nranks);
		goto out;
	}
	rn.m = m;
	for (int d = 0; d < nd; d++) {
		int rank = (int)ir_rank_of(m, 0, d);
		snprintf(path, sizeof path, "%s/trace-rank%d.json", tdir, rank);
		if (!exists(path)) {
			rc = fail("%s: missing (the plan has %d ranks; every rank's trace is needed)", path,
			          nranks);
			goto out;
		}
		const src_file *ts = src_read(ar, path); /* owned by the arena */
		if (!ts)
			goto out;
		texts[d] = (char *)ts->text;
		size_t len = ts->len;
		if (len < 22 || strncmp(texts[d], "{\"traceEvents\":[\n", 17) || strcmp(texts[d] + len - 4, "\n]}\n")) {
			rc = fail("%s: not a trace written by libocto_rt", path);
			goto out;
		}
		if (read_rank(&rn, d, rank, path, texts[d], stage_of))
			goto out;
	}
	if (rn.nsteps == 0) {
		rc = fail("%s: the traces hold no F, B or W: was the run a training run (--steps 1 or more)?", tdir);
		goto out;
	}

	/* Index the compute ops, then the second pass. */
	int64_t M = ir_local_mb(m);
	rn.opidx = malloc((size_t)IR_NOPS * (size_t)m->nstages * (size_t)M * sizeof *rn.opidx);
	rn.base = malloc((size_t)nd * sizeof *rn.base);
	for (int d = 0; d < nd; d++) {
		rn.base[d] = rn.total;
		rn.total += m->devices[d].nops;
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			if (op->comm == IR_COMM_NONE)
				rn.opidx[((size_t)op->kind * (size_t)m->nstages + (size_t)op->stage) * (size_t)M +
				         (size_t)op->mb] = i;
		}
	}
	size_t cells = (size_t)rn.total * (size_t)rn.nsteps;
	rn.count = calloc(cells, sizeof *rn.count);
	rn.t0 = malloc(cells * sizeof *rn.t0);
	rn.t1 = malloc(cells * sizeof *rn.t1);
	rn.red = calloc((size_t)nd * (size_t)rn.nsteps, sizeof *rn.red);
	rn.upd = calloc((size_t)nd * (size_t)rn.nsteps, sizeof *rn.upd);
	for (int d = 0; d < nd; d++)
		if (read_rank(&rn, d, (int)ir_rank_of(m, 0, d), "", texts[d], stage_of))
			goto out;
	for (int d = 0; d < nd; d++)
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			if (op->comm != IR_COMM_NONE)
				continue;
			const ir_stage *st = &m->stages[op->stage];
			/* A fully recomputing stage's B: its layers' R events and B
			 * events (a selective one's B recomputes inside its B events). */
			int want = (st->last - st->first + 1) *
			           (op->kind == IR_OP_B && st->recompute == IR_RECOMP_FULL ? 2 : 1);
			for (int s = 0; s < rn.nsteps; s++)
				if (rn.count[AT(&rn, d, i, s)] != want) {
					rc = fail("%s/trace-rank%d.json: step %d has %d layer events for %s S%d m%d, "
					          "which has %d: the run stopped early, or the trace is from another plan",
					          tdir, (int)ir_rank_of(m, 0, d), s, rn.count[AT(&rn, d, i, s)],
					          ir_op_names[op->kind], op->stage, op->mb, want);
					goto out;
				}
		}

	/* Each step from its first op; the steps after the first. */
	int first = rn.nsteps > 1 ? 1 : 0, used = rn.nsteps - first;
	span = malloc((size_t)rn.nsteps * 2 * sizeof *span);
	double *origin = span + rn.nsteps;
	for (int s = 0; s < rn.nsteps; s++) {
		double lo = INFINITY, hi = -INFINITY;
		for (int d = 0; d < nd; d++)
			for (int i = 0; i < m->devices[d].nops; i++)
				if (m->devices[d].ops[i].comm == IR_COMM_NONE) {
					lo = fmin(lo, rn.t0[AT(&rn, d, i, s)]);
					hi = fmax(hi, rn.t1[AT(&rn, d, i, s)]);
				}
		origin[s] = lo;
		span[s] = hi - lo;
	}
	tmp = malloc((size_t)(rn.nsteps + 1) * sizeof *tmp);
	memcpy(tmp, span + first, (size_t)used * sizeof *tmp);
	double measured = ir_median(tmp, used);
	int mid = first; /* the step closest to the median, for the merged trace */
	for (int s = first; s < rn.nsteps; s++)
		if (fabs(span[s] - measured) < fabs(span[mid] - measured))
			mid = s;
	double period = NAN; /* first op to first op: the whole step, AdamW included */
	if (rn.nsteps - first >= 2) {
		for (int s = first; s + 1 < rn.nsteps; s++)
			tmp[s - first] = origin[s + 1] - origin[s];
		period = ir_median(tmp, rn.nsteps - 1 - first);
	}

	meas = new_result(m);
	meas->makespan = measured;
	double idle = 0;
	for (int d = 0; d < nd; d++) {
		sim_device *sd = &meas->dev[d];
		for (int i = 0; i < m->devices[d].nops; i++) {
			sd->start[i] = sd->end[i] = NAN;
			if (m->devices[d].ops[i].comm != IR_COMM_NONE)
				continue;
			for (int s = first; s < rn.nsteps; s++)
				tmp[s - first] = rn.t0[AT(&rn, d, i, s)] - origin[s];
			sd->start[i] = ir_median(tmp, used);
			for (int s = first; s < rn.nsteps; s++)
				tmp[s - first] = rn.t1[AT(&rn, d, i, s)] - origin[s];
			sd->end[i] = ir_median(tmp, used);
			sd->busy += sd->end[i] - sd->start[i];
		}
		idle += measured - sd->busy;
	}
	meas->bubble_ratio = measured > 0 ? idle / (nd * measured) : 0;

	/* The table.  With data parallelism the step of F, B and W (the span
	 * measured) is the simulator's pipeline time; the waits of the
	 * collectives and the updates after it have rows of their own. */
	char a[24], b[24], c[24], e[24];
	bool dp = ir_dp(m) > 1;
	double pspan = pred->makespan;
	if (dp) {
		pspan = 0;
		for (int d = 0; d < nd; d++)
			pspan = fmax(pspan, pred->dev[d].pipeline);
	}
	double err = 100 * (measured / pspan - 1);
	printf("report: %s: %s, schedule %s, %d devices, %lld micro-batches; %d traced steps, "
	       "medians of steps %d..%d\n", dir, m->model.name, ir_schedule_names[m->plan.schedule], nd,
	       (long long)M, rn.nsteps, first + 1, rn.nsteps);
	printf("\n%-22s %12s %12s %8s\n", "", "predicted", "measured", "error");
	printf("%-22s %12s %12s %+7.1f%%\n", dp ? "step time (F, B, W)" : "step time",
	       time_text(a, pspan), time_text(b, measured), err);
	for (int d = 0; d < nd; d++) {
		double pb = pred->dev[d].busy, mb_ = meas->dev[d].busy;
		char lab[32];
		snprintf(lab, sizeof lab, "D%d busy", d);
		printf("%-22s %12s %12s %+7.1f%%\n", lab, time_text(a, pb), time_text(b, mb_), 100 * (mb_ / pb - 1));
		snprintf(lab, sizeof lab, "D%d bubble", d);
		printf("%-22s %12s %12s %+7.1f%%\n", lab, time_text(c, pspan - pb), time_text(e, measured - mb_),
		       pspan - pb > 0 ? 100 * ((measured - mb_) / (pspan - pb) - 1) : 0.0);
		for (int k = 0; dp && k < 2; k++) {
			double *v = k ? rn.upd : rn.red, p = k ? pred->dev[d].update : pred->dev[d].exposed;
			for (int s = first; s < rn.nsteps; s++)
				tmp[s - first] = v[(size_t)d * (size_t)rn.nsteps + (size_t)s];
			double x = ir_median(tmp, used);
			snprintf(lab, sizeof lab, k ? "D%d updates" : "D%d exposed reduction", d);
			printf("%-22s %12s %12s", lab, time_text(a, p), time_text(b, x));
			if (p > 0)
				printf(" %+7.1f%%", 100 * (x / p - 1));
			printf("\n");
		}
	}
	if (dp)
		printf("(replica 0's ranks; updates: the optimizer steps of the buckets, predicted with "
		       "the host's packing around the collectives)\n");
	if (isfinite(period))
		printf("(the whole step, first op to the next step's, with AdamW and the step's end, "
		       "which the simulator leaves out: %s)\n", time_text(a, period));

	gaps = malloc((size_t)(rn.total ? rn.total : 1) * sizeof *gaps);
	int ng = 0;
	for (int d = 0; d < nd; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			if (m->devices[d].ops[i].comm == IR_COMM_NONE)
				gaps[ng++] = (gap){d, i, meas->dev[d].end[i] - pred->dev[d].end[i]};
	qsort(gaps, (size_t)ng, sizeof *gaps, cmp_gap);
	printf("\nthe ops whose end is furthest from its prediction (start and duration, ms):\n"
	       "%-16s %-6s %19s %19s %11s\n", "op", "device", "predicted", "measured", "end error");
	for (int g = 0; g < ng && g < 10; g++) {
		int d = gaps[g].d, i = gaps[g].i;
		const ir_op *op = &m->devices[d].ops[i];
		char name[32];
		snprintf(name, sizeof name, "%s S%d m%d", ir_op_names[op->kind], op->stage, op->mb);
		printf("%-16s D%-5d %9.3f +%8.3f %9.3f +%8.3f %+10.3f\n", name, d, pred->dev[d].start[i] * 1e-3,
		       (pred->dev[d].end[i] - pred->dev[d].start[i]) * 1e-3, meas->dev[d].start[i] * 1e-3,
		       (meas->dev[d].end[i] - meas->dev[d].start[i]) * 1e-3, gaps[g].err * 1e-3);
	}

	printf("\n");
	if (fabs(err) <= WITHIN) {
		printf("ran as predicted: step time within %.0f %% (measured %.1f %% %s)\n", WITHIN, fabs(err),
		       err >= 0 ? "slower" : "faster");
	} else {
		printf("did not run as predicted: measured %.1f %% %s; largest gaps:", fabs(err),
		       err >= 0 ? "slower" : "faster");
		for (int g = 0; g < ng && g < 3; g++) {
			const ir_op *op = &m->devices[gaps[g].d].ops[gaps[g].i];
			printf("%s %s S%d m%d on D%d (%+.3f ms)", g ? "," : "", ir_op_names[op->kind], op->stage,
			       op->mb, gaps[g].d, gaps[g].err * 1e-3);
		}
		printf("\n");
	}

	char cap0[96], cap1[96];
	snprintf(cap0, sizeof cap0, "predicted: ");
	snprintf(cap1, sizeof cap1, "measured (median of steps %d..%d): ", first + 1, rn.nsteps);
	snprintf(path, sizeof path, "%s/report-timeline.svg", dir);
	if (viz_svg_compare(m, pred, cap0, meas, cap1, path) != 0)
		goto out;
	printf("wrote %s\n", path);
	snprintf(path, sizeof path, "%s/report-trace.json", dir);
	if (write_trace(m, pred, texts, origin[mid], path))
		goto out;
	printf("wrote %s (the ranks' traces; 'predicted D<d>' aligned to step %d)\n", path, mid + 1);
	rc = 0;
out:
	free(gaps);
	free(tmp);
	free(span);
	free(rn.t1);
	free(rn.red);
	free(rn.upd);
	free(rn.t0);
	free(rn.count);
	free(rn.base);
	free(rn.opidx);
	free(stage_of);
	free(texts);
	sim_free(meas);
	sim_free(pred);
	ir_free(m);
	arena_free(ar);
	return rc;
}
