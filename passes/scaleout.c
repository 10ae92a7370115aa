/* scaleout.c: choosing the data-parallel degree (scaleout.h).
 *
 * Every candidate is the model as the user wrote it with dp (and the
 * distributed optimizer) fixed, planned by the same passes a fixed --dp
 * runs, quietly: a candidate that cannot be cut, placed or fitted is a row
 * with its reason, not an error.  The candidates' dumps go to memory; the
 * chosen one's are written at the end, so --print-ir-after shows the plan
 * kept.  Guarantees: the module returned is exactly the planned candidate
 * (no second planning run that a budget could make differ); it fits every
 * device's memory; no candidate that fits is faster. */
/* open_memstream: POSIX 2008 (the build defines _GNU_SOURCE) */
#include "scaleout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy.h"
#include "cost.h"
#include "simulate.h"
#include "tune.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The search's share of the budget: the rest is left to the baselines the
 * driver compares the chosen plan with (tune_baselines). */
#define SEARCH_SHARE 0.85

/* Of the search's share, what the first round (every candidate once) may
 * take; the rest plans the fastest candidates again with more time
 * (second_round). */
#define FIRST_ROUND 0.5

/* At most this many candidates are planned again. */
#define SECOND_ROUND_MAX 3

/* The tuner's effort (plans judged, tune_budget.effort) in the first
 * round: this share of a plan's; the second round gives the whole. */
#define FIRST_EFFORT 0.25

void scaleout_free(scaleout *s)
{
	free(s->rows);
	ir_free(s->base);
	s->rows = NULL;
	s->base = NULL;
	s->nrows = 0;
}

/* ---- the bound ------------------------------------------------------------- */

/* The least reduction-and-update tail of one layer's gradient bucket over
 * the DP group: its collective on the faster of the two rank orders' links
 * and its update; +inf when no layer has parameters. */
static double least_tail(const ir_module *m)
{
	double best = INFINITY;
	int64_t D = ir_dp(m);
	ir_module *o = ir_copy_header(m); /* to price each rank order's link */
	for (int l = 0; l < m->nlayers; l++) {
		uint64_t n = m->layers[l].cost.params;
		if (!n)
			continue;
		double coll = INFINITY;
		ir_comm c = m->plan.dist_opt ? IR_COMM_REDUCESCATTER : IR_COMM_ALLREDUCE;
		for (int r = IR_RANKS_PP_INNER; r <= IR_RANKS_DP_INNER; r++) {
			o->plan.rank_order = (ir_rank_order)r;
			for (int p = 0; p < ir_pipe_devices(m); p++) {
				double t = sim_coll_time(o, c, p, ir_coll_bytes(m, c, n));
				coll = t < coll ? t : coll;
			}
		}
		uint64_t k = m->plan.dist_opt ? (n + (uint64_t)D - 1) / (uint64_t)D : n;
		double t = coll + cost_update_us(m, k);
		best = t < best ? t : best;
	}
	ir_free(o);
	return best;
}

double scaleout_bound(const ir_module *m)
{
	double work, path, layer;
	int heaviest;
	tune_bound_terms(m, &work, &path, &layer, &heaviest);
	if (ir_dp(m) > 1) {
		/* Layer 0's and the heaviest layer's last ops are weight gradients;
		 * their buckets are reduced and updated after them. */
		double tail = least_tail(m);
		if (isfinite(tail)) {
			path += m->layers[0].cost.params ? tail : 0;
			layer += m->layers[heaviest].cost.params ? tail : 0;
		}
	}
	double lb = work > path ? work : path;
	return layer > lb ? layer : lb;
}

/* ---- the candidates --------------------------------------------------------- */

typedef struct cand {
	ir_module *m;  /* planned, or NULL */
	char *dump;    /* its dumps (malloc'd by open_memstream), or NULL */
	size_t ndump;
	char *diag;    /* its diagnostics as printed, or NULL */
	size_t ndiag;
	char first[160]; /* the first one's message */
	bool cut, spent; /* its tuner stopped at its deadline, or its effort: more may find a faster plan */
} cand;

/* The first line of a quiet sink's first error, into why. */
static void first_line(const diag_sink *q, char *why, size_t n)
{
	const char *first = q->errors && q->first[0] ? q->first : "cannot plan";
	size_t k = strcspn(first, "\n");
	k = k < n ? k : n - 1;
	memcpy(why, first, k);
	why[k] = 0;
}

/* A candidate's module before planning: m with row's dp and sharding. */
static ir_module *candidate(const ir_module *m, const scaleout_row *row)
{
	ir_module *x = ir_copy_header(m);
	x->dp_auto = false;
	x->dist_opt_auto = false;
	x->plan.dp = row->dp > 1 ? row->dp : 0;
	x->recompute_auto = false;
	x->plan.recompute = row->recompute;
	x->plan.dist_opt = row->dist_opt;
	/* The overlapped all-gather as the model asks, where there is one. */
	x->plan.overlap_gather = row->dist_opt && m->plan.overlap_gather;
	if (row->dp == 1) {
		/* One replica: no data-parallel options (ir_check_dp). */
		x->plan.bucket = 0;
		x->plan.rank_order = IR_RANKS_AUTO;
	}
	return x;
}

/* The search's clock, for its progress lines and the candidates' (one
 * line a second in all, counted from the search's start). */
typedef struct search_clock {
	double t0, last_line;
	int k, n; /* the candidate being planned, of n */
	bool have_fit; /* a candidate fits: the others' tuners may stop at their deadlines */
	long effort;   /* a plan's tuner effort (tune_budget.effort) */
} search_clock;

/* How much a mode saves of the stash: none, selective, full. */
static int saving(ir_recompute r)
{
	return r == IR_RECOMP_NONE ? 0 : r == IR_RECOMP_SELECTIVE ? 1 : 2;
}

/* Plan candidate row on a copy of m within `seconds`. */
static void plan_one(const ir_module *m, const pass_opts *po, double seconds, long effort,
                     scaleout_row *row, cand *c, search_clock *ck)
{
	ir_module *x = candidate(m, row);
	free(c->diag); /* the prescreen's, empty */
	c->diag = NULL;
	c->ndiag = 0;
	pass_id ids[PASS_MAX_PIPELINE];
	int n = pass_pipeline_for(x, ids);
	diag_sink quiet = {.stream = open_memstream(&c->diag, &c->ndiag)};
	tune_budget b = tune_budget_start(seconds > 0.01 ? seconds : 0.01);
	b.clock0 = ck->t0;
	b.effort = effort;
	b.may_fail = ck->have_fit;
	b.last_progress = ck->last_line;
	snprintf(b.what, sizeof b.what, "D=%lld x P=%lld%s%s%s (%d of %d)", (long long)row->dp,
	         (long long)row->pp, row->dist_opt ? ", distributed optimizer" : "",
	         row->recompute != IR_RECOMP_NONE ? ", recompute " : "",
	         row->recompute != IR_RECOMP_NONE ? ir_recompute_names[row->recompute] : "", ck->k,
	         ck->n);
	pass_opts o = *po;
	o.diag = &quiet;
	o.budget = &b;
	o.dump = NULL;
	bool dumps = po->print_after_all;
	for (int i = 0; i < PASS_COUNT; i++)
		dumps = dumps || po->print_before[i] || po->print_after[i];
	if (dumps)
		o.dump = open_memstream(&c->dump, &c->ndump);
	int rc = pass_run(x, ids, n, &o);
	c->cut = b.cut;
	c->spent = b.spent;
	ck->last_line = b.last_progress;
	if (o.dump)
		fclose(o.dump);
	sim_result *r = rc == 0 && ir_verify(x) == 0 ? sim_run_to(x, &quiet) : NULL;
	if (quiet.stream)
		fclose(quiet.stream);
	if (!r) {
		first_line(&quiet, row->why, sizeof row->why);
		memcpy(c->first, quiet.first, sizeof c->first);
		ir_free(x);
		return;
	}
	row->ok = true;
	row->fits = true;
	row->step = r->makespan;
	row->bubble = r->bubble_ratio;
	row->exposed = r->exposed;
	row->update = r->update;
	row->tokens_per_s = r->tokens_per_s;
	if (row->recompute != IR_RECOMP_NONE) {
		double f = 0;
		for (int l = 0; l < x->nlayers; l++)
			f += sim_redo_time(x->plan.recompute, &x->layers[l].cost, false);
		row->recompute_share = f * (double)ir_local_mb(x) / (double)row->pp / r->makespan;
	}
	for (int d = 0; d < r->ndev; d++) {
		uint64_t pk = r->dev[d].peak_mem;
		row->peak = pk > row->peak ? pk : row->peak;
		if (x->cluster.mem != UINT64_MAX && pk > x->cluster.mem)
			row->fits = false;
	}
	if (!row->fits) {
		char need[32], mem[32];
		ir_fmt_size(need, sizeof need, row->peak);
		ir_fmt_size(mem, sizeof mem, x->cluster.mem);
		snprintf(row->why, sizeof row->why, "does not fit: a device needs %s of its %s", need, mem);
	}
	sim_free(r);
	c->m = x;
}

/* Plan again, with the search's time that is left and a plan's whole
 * effort, the fastest candidates that fit and whose tuner was cut short
 * (by its seconds or its effort), fastest first, while their bound
 * is below the best step: the first round gave every candidate an equal
 * share, and the ones that matter are known only after it.  A candidate's
 * second plan replaces its first when it is faster.  Returns the best. */
static int second_round(const ir_module *m, const pass_opts *po, scaleout *out, cand *c, int best,
                        double end, search_clock *ck)
{
	int pick[SECOND_ROUND_MAX], n = 0;
	for (int i = 0; i < out->nrows; i++) {
		const scaleout_row *r = &out->rows[i];
		if (!r->ok || !r->fits || !(c[i].cut || c[i].spent))
			continue;
		int k = n < SECOND_ROUND_MAX ? n++ : SECOND_ROUND_MAX;
		for (; k > 0 && r->step < out->rows[pick[k - 1]].step; k--)
			if (k < SECOND_ROUND_MAX)
				pick[k] = pick[k - 1];
		if (k < SECOND_ROUND_MAX)
			pick[k] = i;
	}
	for (int k = 0; k < n; k++) {
		int i = pick[k];
		double t = now();
		if (t >= end || out->rows[i].bound >= out->rows[best].step)
			break;
		scaleout_row again = out->rows[i];
		again.ok = again.fits = false;
		again.peak = 0;
		cand d = {0};
		ck->k = k + 1;
		ck->n = n;
		ck->have_fit = true;
		plan_one(m, po, (end - t) * SEARCH_SHARE / (double)(n - k), ck->effort, &again, &d, ck);
		if (again.ok && again.fits && again.step < out->rows[i].step) {
			out->rows[i] = again;
			ir_free(c[i].m);
			free(c[i].dump);
			free(c[i].diag);
			c[i] = d;
			if (again.step < out->rows[best].step || (again.step == out->rows[best].step && i < best))
				best = i;
		} else {
			ir_free(d.m);
			free(d.dump);
			free(d.diag);
		}
	}
	return best;
}

/* Why a row that plans and fits lost to the chosen one: the larger of its
 * extra idle time (bubble) and its extra reduction and update. */
static void why_lost(scaleout_row *row, const scaleout_row *best)
{
	double idle = row->bubble * row->step - best->bubble * best->step;
	double red = (row->exposed + row->update) - (best->exposed + best->update);
	char d[32];
	snprintf(d, sizeof d, "%.3f ms", (row->step - best->step) * 1e-3);
	if (row->step <= best->step)
		snprintf(row->why, sizeof row->why, "as fast; the smaller D is kept");
	else
		snprintf(row->why, sizeof row->why, "%s: %s slower", red > idle ? "reduction" : "bubble", d);
}

/* The least largest stage time (F + B + W of one micro-batch, F twice when
 * recomputing) of a cut of x's layers into P contiguous stages: the
 * greedy check of a cap, bisected. */
static double largest_stage(const ir_module *x, int P)
{
	double lo = 0, hi = 0;
	for (int l = 0; l < x->nlayers; l++) {
		const ir_cost *c = &x->layers[l].cost;
		double t = c->f + sim_redo_time(x->plan.recompute, c, false) + c->b + c->w;
		lo = t > lo ? t : lo;
		hi += t;
	}
	for (int it = 0; it < 50 && hi - lo > 1e-9 * hi; it++) {
		double cap = (lo + hi) / 2, run = 0;
		int stages = 1;
		for (int l = 0; l < x->nlayers && stages <= P; l++) {
			const ir_cost *c = &x->layers[l].cost;
			double t = c->f + sim_redo_time(x->plan.recompute, c, false) + c->b + c->w;
			if (run + t > cap)
				stages++, run = 0;
			run += t;
		}
		if (stages <= P)
			hi = cap;
		else
			lo = cap;
	}
	return hi;
}

/* What a candidate is known to need before it is planned: its lower bound
 * (row->bound), and false with row->why when no plan of it can fit: some
 * device holds at least the resident bytes (weights, gradients, optimizer
 * state) of the layers' average share, and of the largest layer, which
 * one device holds whole. */
static bool prescreen(const ir_module *m, scaleout_row *row, cand *c, double *estimate)
{
	ir_module *x = candidate(m, row);
	diag_sink quiet = {.stream = open_memstream(&c->diag, &c->ndiag)};
	bool ok = pass_run_one(x, PASS_cost, &(pass_opts){.diag = &quiet}) == 0;
	if (quiet.stream)
		fclose(quiet.stream);
	memcpy(c->first, quiet.first, sizeof c->first);
	if (ok) {
		row->bound = scaleout_bound(x);
		/* What 1F1B on the balanced cut would take: the fill and drain
		 * (P - 1 stage times) and the layers' granularity, which the bound
		 * does not see; at least the bound. */
		int64_t P = row->pp;
		double fb = (double)(ir_local_mb(x) + P - 1) * largest_stage(x, (int)P);
		*estimate = fb > row->bound ? fb : row->bound;
		uint64_t sum = 0, most = 0;
		for (int l = 0; l < x->nlayers; l++) {
			uint64_t r = cost_resident(x, l);
			sum = ir_sat_add(sum, r);
			most = r > most ? r : most;
		}
		uint64_t share = sum / (uint64_t)row->pp + (sum % (uint64_t)row->pp != 0);
		uint64_t need = share > most ? share : most;
		row->peak = need;
		if (x->cluster.mem != UINT64_MAX && need > x->cluster.mem) {
			char a[32], b[32];
			ir_fmt_size(a, sizeof a, need);
			ir_fmt_size(b, sizeof b, x->cluster.mem);
			snprintf(row->why, sizeof row->why,
			         "does not fit: a device holds at least %s of weights, gradients and "
			         "optimizer state, and has %s", a, b);
			ok = false;
		}
	} else {
		snprintf(row->why, sizeof row->why, "%.160s", quiet.first[0] ? quiet.first : "cannot cost");
	}
	ir_free(x);
	return ok;
}

/* Is candidate a (estimated ea) more promising than b (eb): a smaller
 * estimate, or the same and less memory needed (more likely to fit)? */
static bool before(const scaleout_row *a, double ea, const scaleout_row *b, double eb)
{
	return ea < eb || (ea == eb && a->peak < b->peak);
}

/* The candidate list: every D dividing N and M with a layer per pipeline
 * device, each with the optimizer's sharding off and on (on only with
 * replicas), or as the user fixed it. */
static int candidates(const ir_module *m, scaleout *out)
{
	int64_t N = m->cluster.devices, M = m->train.microbatches;
	int64_t lo = m->dp_auto ? 1 : ir_dp(m), hi = m->dp_auto ? N : ir_dp(m);
	/* Selective drops something only where there are Mamba layers (their
	 * scans' chunk states); elsewhere it is none under another name. */
	bool scans = false;
	for (int l = 0; l < m->nlayers; l++)
		scans |= m->layers[l].kind == IR_LAYER_MAMBA;
	int cap = 0;
	for (int64_t D = lo; D <= hi; D++)
		cap += N % D == 0 ? 2 * IR_NRECOMPUTES : 0;
	if (!(out->rows = calloc((size_t)cap + 1, sizeof *out->rows)))
		return -1;
	for (int64_t D = lo; D <= hi; D++) {
		if (N % D || M % D || N / D > m->nlayers)
			continue;
		for (int on = 0; on <= 1; on++) {
			if (m->dist_opt_auto ? on && D == 1 : on != (m->plan.dist_opt && D > 1))
				continue; /* searched; else as given */
			/* In order of the memory they save: none, selective, full. */
			static const ir_recompute modes[] = {IR_RECOMP_NONE, IR_RECOMP_SELECTIVE, IR_RECOMP_FULL};
			for (int k = 0; k < 3; k++) {
				ir_recompute rc = modes[k];
				if (m->recompute_auto ? rc == IR_RECOMP_SELECTIVE && !scans : rc != m->plan.recompute)
					continue;
				scaleout_row *r = &out->rows[out->nrows++];
				r->dp = D;
				r->pp = N / D;
				r->dist_opt = on;
				r->recompute = rc;
			}
		}
	}
	return 0;
}

ir_module *scaleout_search(const ir_module *m, const pass_opts *po, scaleout *out)
{
	memset(out, 0, sizeof *out);
	out->chosen = -1;
	out->dp_searched = m->dp_auto;
	out->dist_opt_searched = m->dist_opt_auto;
	out->recompute_searched = m->recompute_auto;
	ir_loc at = ir_loc_or(m->dp_loc, ir_loc_or(m->plan_loc, m->loc));
	diag_sink *ds = po->diag;
	if (ir_times_only(m)) {
		diag_sink_error(ds, at, "dp=auto needs the model's parameters and memory to price the "
		                        "gradient reductions and to fit the replicas; a timing profile "
		                        "has times only: give --dp D");
		return NULL;
	}
	if (candidates(m, out) < 0) {
		diag_sink_error(ds, at, "out of memory");
		return NULL;
	}
	if (!out->nrows && m->dp_auto) {
		diag_sink_error(ds, at,
		                "dp=auto: no data-parallel degree D divides both the %lld devices and the "
		                "step's %lld micro-batches with at most %d pipeline devices (one layer each)",
		                (long long)m->cluster.devices, (long long)m->train.microbatches,
		                m->nlayers);
		return NULL;
	}
	tune_budget fallback = tune_budget_start(0), *b = po->budget ? po->budget : &fallback;
	double t0 = b->armed ? b->armed : now();
	double end = t0 + b->seconds; /* tune_budget_start's: never 0 */
	search_clock ck = {.t0 = t0, .last_line = t0, .effort = tune_effort(b)};
	cand *c = calloc((size_t)out->nrows, sizeof *c);
	if (!c) {
		diag_sink_error(ds, at, "out of memory");
		return NULL;
	}
	/* The candidates that may fit, most promising first (the least
	 * estimated step: 1F1B on the balanced cut, at least the bound; a
	 * stashing one that does not fit brings its recomputing twin forward);
	 * one whose bound is not below the best step found cannot win, and none
	 * is begun once the budget has run out. */
	int *order = malloc((size_t)out->nrows * sizeof *order), nord = 0;
	if (!order) {
		free(c);
		diag_sink_error(ds, at, "out of memory");
		return NULL;
	}
	double *est = calloc((size_t)out->nrows, sizeof *est);
	if (!est) {
		free(c);
		free(order);
		diag_sink_error(ds, at, "out of memory");
		return NULL;
	}
	for (int i = 0; i < out->nrows; i++)
		if (prescreen(m, &out->rows[i], &c[i], &est[i])) {
			int k = nord++;
			for (; k > 0 && before(&out->rows[i], est[i], &out->rows[order[k - 1]], est[order[k - 1]]); k--)
				order[k] = order[k - 1];
			order[k] = i;
		}
	free(est);
	int best = -1;
	bool unplanned = false; /* a candidate was left for the budget */
	for (int k = 0; k < nord; k++) {
		int i = order[k];
		scaleout_row *row = &out->rows[i];
		double t = now();
		if (best >= 0 && row->bound >= out->rows[best].step) {
			snprintf(row->why, sizeof row->why, "cannot be faster: its lower bound is above the "
			                                    "step kept");
			continue;
		}
		/* Past the deadline, only until one fits, and with the least
		 * tuning: a plan that fits is worth more than the budget. */
		if (t >= end && best >= 0) {
			snprintf(row->why, sizeof row->why, "not planned: the tune budget (--tune-budget) ran out");
			unplanned = true;
			continue;
		}
		ck.k = k + 1;
		ck.n = nord;
		if (t - ck.last_line >= 1) {
			ck.last_line = t;
			fprintf(stderr, "dp search: %.1f s, D=%lld x P=%lld%s (%d of %d)", t - t0,
			        (long long)row->dp, (long long)row->pp,
			        row->dist_opt ? ", distributed optimizer" : "", k + 1, nord);
			if (best >= 0)
				fprintf(stderr, ", best %.3f ms at D=%lld", out->rows[best].step * 1e-3,
				        (long long)out->rows[best].dp);
			fprintf(stderr, "\n");
		}
		double share = t < end ? (end - t) * SEARCH_SHARE * FIRST_ROUND / (double)(nord - k) : 0;
		ck.have_fit = best >= 0;
		plan_one(m, po, share, (long)(FIRST_EFFORT * (double)ck.effort), row, &c[i], &ck);
		/* Too big: the same saving the next more memory (selective, then
		 * full) is the likeliest to fit and the fastest of those that
		 * may, so it is next. */
		if (!(row->ok && row->fits) && row->recompute != IR_RECOMP_FULL) {
			int twin = -1;
			for (int j = k + 2; j < nord; j++) {
				const scaleout_row *o = &out->rows[order[j]];
				if (o->dp == row->dp && o->dist_opt == row->dist_opt &&
				    saving(o->recompute) > saving(row->recompute) &&
				    (twin < 0 || saving(o->recompute) < saving(out->rows[order[twin]].recompute)))
					twin = j;
			}
			if (twin >= 0) {
				int moved = order[twin];
				memmove(order + k + 2, order + k + 1, (size_t)(twin - k - 1) * sizeof *order);
				order[k + 1] = moved;
			}
		}
		if (row->ok && row->fits &&
		    (best < 0 || row->step < out->rows[best].step ||
		     (row->step == out->rows[best].step && i < best)))
			best = i;
	}
	free(order);
	if (best >= 0)
		best = second_round(m, po, out, c, best, end, &ck);
	/* What cut the kept plan's search short, for `plan` to say: its
	 * tuner's seconds or effort, or candidates left unplanned. */
	b->cut = unplanned || (best >= 0 && c[best].cut);
	b->spent = best >= 0 && c[best].spent;
	/* The baselines compared afterwards stop by the same deadline. */
	b->t0 = t0;
	b->end = end;
	b->armed = 0;
	ir_module *keep = NULL;
	if (best >= 0) {
		out->chosen = best;
		out->rows[best].chosen = true;
		for (int i = 0; i < out->nrows; i++)
			if (i != best && out->rows[i].ok && out->rows[i].fits)
				why_lost(&out->rows[i], &out->rows[best]);
		keep = c[best].m;
		c[best].m = NULL;
		if (c[best].dump) {
			fwrite(c[best].dump, 1, c[best].ndump, po->dump ? po->dump : stdout);
		}
	} else {
		/* Name the candidate that came closest to fitting. */
		int close = -1;
		for (int i = 0; i < out->nrows; i++)
			if (out->rows[i].ok && (close < 0 || out->rows[i].peak < out->rows[close].peak))
				close = i;
		if (close >= 0) {
			char need[32], mem[32];
			ir_fmt_size(need, sizeof need, out->rows[close].peak);
			ir_fmt_size(mem, sizeof mem, m->cluster.mem);
			diag_sink_error(ds, ir_loc_or(m->cluster_at.mem, at),
			                "the model does not fit with any data-parallel degree: the closest, "
			                "D=%lld x P=%lld%s, needs %s on a device that has %s",
			                (long long)out->rows[close].dp, (long long)out->rows[close].pp,
			                out->rows[close].dist_opt ? " with the distributed optimizer" : "",
			                need, mem);
		} else {
			/* Nothing plans: the first planned candidate's diagnostics as
			 * they were (D = 1 when it was tried: what the model gives
			 * without the search); none planned: the least memory any
			 * candidate needs. */
			int first = -1, least = 0;
			for (int i = 0; i < out->nrows && first < 0; i++)
				if (c[i].diag && c[i].ndiag)
					first = i;
			for (int i = 1; i < out->nrows; i++)
				if (out->rows[i].peak < out->rows[least].peak)
					least = i;
			diag_sink *sink = ds ? ds : &diag_default;
			if (first >= 0) {
				if (sink->stream)
					fwrite(c[first].diag, 1, c[first].ndiag, sink->stream);
				if (!sink->errors++)
					memcpy(sink->first, c[first].first, sizeof sink->first);
			} else {
				const scaleout_row *r = &out->rows[least];
				char need[32], mem[32];
				ir_fmt_size(need, sizeof need, r->peak);
				ir_fmt_size(mem, sizeof mem, m->cluster.mem);
				diag_sink_error(ds, ir_loc_or(m->cluster_at.mem, at),
				                "the model does not fit with any data-parallel degree: with the "
				                "least memory, D=%lld x P=%lld%s, a device holds at least %s of "
				                "weights, gradients and optimizer state, and has %s",
				                (long long)r->dp, (long long)r->pp,
				                r->dist_opt ? " with the distributed optimizer" : "", need, mem);
			}
		}
	}
	for (int i = 0; i < out->nrows; i++) {
		ir_free(c[i].m);
		free(c[i].dump);
		free(c[i].diag);
	}
	free(c);
	return keep;
}
