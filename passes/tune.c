/* tune.c: the `tune` pass: partition, placement and schedule searched
 * together, judged by the simulator (docs/tuner.md).
 *
 * Reads a module with layer costs whose schedule is 'tuned' (any other
 * schedule: the pass does nothing), and its plan options, checked as
 * partition and place check them (a tuned module's pipeline runs neither:
 * pass_pipeline_for).  Writes the stages, their devices and
 * every device's program: the best plan found that fits every device's
 * memory.  Guarantees a plan no slower than the best baseline that fits,
 * whose W's run in micro-batch order on every stage (ir_verify's rule:
 * the list scheduler runs a stage's B's in order and a device's pending
 * W's first in, first out; the baselines keep it too), and a diagnostic
 * naming the device, what it needs and what it has when nothing fits at
 * all, whatever the budget.
 *
 * The search, in the order OctoPipe's bubble-aware tuner works:
 * 1. start from every baseline (partitions uniform and balanced);
 * 2. balance the workload: for P and 2P stages, the cut that minimises
 *    the largest stage time;
 * 3. placement: one stage per device, round-robin chunks, and the V that
 *    puts a device's two stages at both ends of the pipeline;
 * 4. order: a list scheduler over the real costs and links builds each
 *    device's program (below), under a few priority policies, and the
 *    simulator times it;
 * 5. refine: move single layers across stage boundaries while the
 *    simulated step gets shorter, until no move helps or the budget ends;
 * 6. search further (anneal): the effort left to a large-neighbourhood
 *    search over layouts, policies and per-stage ranks, from a fixed seed.
 * Every candidate is a scratch module (freed after it is judged), so the
 * search never grows the module it writes; the candidates kept live in
 * the pass's scratch arena, a candidate's schedule tables in an arena of
 * its own.  Nested runs of other passes (the baselines, lowering) write
 * their diagnostics to a sink of their own, and the budget comes from the
 * pass options (tune_budget). */
#include "tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy.h"
#include "cost.h"
#include "pass.h"
#include "simulate.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The budget bounds the whole plan: its clock starts when the budget is
 * made (the command line is read), else when the tune pass starts; the
 * search leaves time for what follows it (lowering, the memory plan, the
 * comparison table; see pass_tune), and tune_baselines stops at the same
 * deadline. */
#define DEFAULT_BUDGET_S 20

/* Plans judged by one search at most, unless --tune-effort says (the
 * baselines included).  Enough for the searches of docs/tuner.md's tables
 * to end where no move helps (a few thousand plans) -- so they end at the
 * same plan on any machine -- and a bound on those that would not. */
#define DEFAULT_EFFORT 20000

long tune_effort(const tune_budget *b)
{
	return b && b->effort > 0 ? b->effort : DEFAULT_EFFORT;
}

tune_budget tune_budget_start(double seconds)
{
	/* The default counts from the tune pass. */
	return (tune_budget){.seconds = seconds > 0 ? seconds : DEFAULT_BUDGET_S,
	                     .armed = seconds > 0 ? now() : 0, .end = INFINITY, .refused_dev = -1};
}

/* One line to stderr a second, from the first second of the plan on:
 * what the tuner is doing and the best step so far (best < 0: none).
 * Without a budget, or before the tune pass started its clock, none. */
static void progress_line(tune_budget *b, const char *doing, long evals, double best, double lb)
{
	double n = now();
	/* No tune pass ran (the baselines of an untuned plan): no plan clock. */
	double t0 = b && b->clock0 ? b->clock0 : b ? b->t0 : 0;
	if (!b || !b->t0 || n - t0 < 1 || n - b->last_progress < 1)
		return;
	b->last_progress = n;
	fprintf(stderr, "tune: %.1f s, %s%s%s, %ld plans judged", n - t0, b->what,
	        *b->what ? ": " : "", doing, evals);
	if (best >= 0)
		fprintf(stderr, ", best %.3f ms, %.1f %% above the lower bound", best * 1e-3,
		        100 * (best / lb - 1));
	fprintf(stderr, "\n");
}


/* ---- judging a plan ---------------------------------------------------- */

typedef struct verdict {
	bool ok, fits;
	double makespan, bubble;
	uint64_t peak;
	int tight_dev;      /* the device furthest over its memory */
	uint64_t tight_need;
} verdict;

/* Judge a plan by simulating it.  It fits when every device's peak leaves
 * `reserve` bytes of its memory free: the memory plan (`memplan`) adds
 * transfer buffers and fragmentation to the running sum the simulator
 * judges candidates by (docs/memplan.md), so the tuner keeps a reserve and
 * checks the real memory plan of what it picks (pass_tune). */
static verdict judge(const ir_module *m, uint64_t reserve)
{
	verdict v = {.makespan = INFINITY};
	diag_sink quiet = {0}; /* a plan that cannot run is a verdict, not an error */
	sim_result *r = sim_run_to(m, &quiet);
	if (!r)
		return v;
	v.ok = true;
	v.fits = true;
	v.makespan = r->makespan;
	v.bubble = r->bubble_ratio;
	v.tight_dev = -1;
	for (int d = 0; d < r->ndev; d++) {
		uint64_t pk = r->dev[d].peak_mem;
		if (pk > v.peak)
			v.peak = pk;
		if (m->cluster.mem != UINT64_MAX && pk > m->cluster.mem - reserve) {
			v.fits = false;
			if (v.tight_dev < 0 || pk > v.tight_need)
				v.tight_dev = d, v.tight_need = pk;
		}
	}
	sim_free(r);
	return v;
}

/* ---- baselines ----------------------------------------------------------- */

static const struct {
	const char *name;
	ir_schedule schedule;
	int chunks;
	ir_partition partition;
} baselines[TUNE_NBASELINES] = {
	{"gpipe", IR_SCHED_GPIPE, 1, IR_PART_UNIFORM},
	{"1f1b", IR_SCHED_1F1B, 1, IR_PART_UNIFORM},
	{"i1f1b v=2", IR_SCHED_I1F1B, 2, IR_PART_UNIFORM},
	{"zbh1", IR_SCHED_ZBH1, 1, IR_PART_UNIFORM},
	{"zbh2", IR_SCHED_ZBH2, 1, IR_PART_UNIFORM},
	{"zbv", IR_SCHED_ZBV, 2, IR_PART_UNIFORM},
	{"zbh1 balanced", IR_SCHED_ZBH1, 1, IR_PART_BALANCED},
};

/* Run passes on c with their diagnostics kept out of sight (a sink that
 * prints nothing): a baseline that does not apply to this model is a row
 * with a reason, not an error.  The first diagnostic goes to why (when
 * given). */
static bool run_quiet(ir_module *c, pass_list passes, char *why, size_t n)
{
	diag_sink quiet = {0};
	bool ok = pass_run(c, passes.ids, passes.n, &(pass_opts){.diag = &quiet}) == 0;
	if (!ok && why) {
		/* Its first line, as much as fits. */
		const char *first = quiet.errors ? quiet.first : "cannot plan";
		size_t k = strcspn(first, "\n");
		k = k < n ? k : n - 1;
		memcpy(why, first, k);
		why[k] = 0;
	}
	return ok;
}

/* Baseline i planned on a copy of m, or NULL (why says what stopped it).
 * A partition and placement the user gave stay: the baselines then differ
 * only in their order of work. */
static ir_module *baseline(const ir_module *m, int i, char *why, size_t n)
{
	ir_module *c = ir_copy_header(m);
	c->plan.schedule = baselines[i].schedule;
	if (m->plan.partition != IR_PART_GIVEN) {
		c->plan.chunks = baselines[i].chunks;
		c->plan.partition = baselines[i].partition;
		c->plan.ngiven = c->plan.nplacement = 0;
	}
	if (!run_quiet(c, pass_plan_passes, why, n)) {
		ir_free(c);
		return NULL;
	}
	return c;
}

static int over_memory(const ir_module *m, const ir_module *x, uint64_t *need);
static int over_after_memplan(const ir_module *m, ir_module *x, uint64_t *need);

/* over_after_memplan for the tuner's own candidates, cheaper: with
 * replicas, comm's choices fixed instead of simulated (pp-inner, the
 * reductions posted as each stage closes: their buffers live longest, so
 * the peak is never below the one comm's choice of where gives; the
 * all-gathers not overlapped, as comm lowers them where the overlap would
 * not fit); then the proof and the memory plan as over_after_memplan
 * (comm keeps the lowering). */
static int over_after_memplan_fit(const ir_module *m, ir_module *x, uint64_t *need)
{
	if (ir_dp(x) > 1) {
		/* Without the overlapped all-gather, whose buffer lives through the
		 * step: comm keeps the overlap only where the plan still fits. */
		x->plan.overlap_gather = 0;
		diag_sink quiet = {0};
		arena *a = arena_new();
		pass_ctx cx = {.diag = &quiet, .scratch = a};
		int rc = pass_comm_fixed(x, &cx, IR_RANKS_PP_INNER, false);
		arena_free(a);
		if (rc != 0)
			return -1; /* the pipeline will report it on the real module */
	}
	return over_after_memplan(m, x, need);
}

/* The largest device peak of x once lowered and given its memory plan
 * (what will really be allocated), against its memory: the device over it
 * most, or -1.  x is lowered in place (with its own schedule's semantics). */
static int over_after_memplan(const ir_module *m, ir_module *x, uint64_t *need)
{
	if (!run_quiet(x, pass_lower_passes, NULL, 0))
		return -1; /* the pipeline will report it on the real module */
	return over_memory(m, x, need);
}

/* The device of lowered x over m's memory most (its peak into *need), or
 * -1. */
static int over_memory(const ir_module *m, const ir_module *x, uint64_t *need)
{
	diag_sink quiet = {0};
	sim_result *r = sim_run_to(x, &quiet);
	int worst = -1;
	for (int d = 0; r && d < r->ndev; d++)
		if (r->dev[d].peak_mem > m->cluster.mem && (worst < 0 || r->dev[d].peak_mem > *need))
			worst = d, *need = r->dev[d].peak_mem;
	sim_free(r);
	return worst;
}

void tune_baselines(const ir_module *m, tune_budget *b, tune_row *rows)
{
	for (int i = 0; i < TUNE_NBASELINES; i++) {
		tune_row *r = &rows[i];
		memset(r, 0, sizeof *r);
		snprintf(r->name, sizeof r->name, "%s", baselines[i].name);
		if (b && now() >= b->end) {
			snprintf(r->why, sizeof r->why, "not judged: the tune budget (--tune-budget) ran out");
			continue;
		}
		progress_line(b, "comparing with the baselines", i, -1, 0);
		ir_module *c = baseline(m, i, r->why, sizeof r->why);
		if (c) {
			/* Timed and sized as the tuned plan is: lowered, with its memory
			 * plan — what would really run and be allocated. */
			uint64_t need = 0;
			int over = over_after_memplan(m, c, &need);
			verdict v = judge(c, 0);
			r->ok = v.ok;
			r->fits = v.ok && over < 0;
			r->makespan = v.makespan;
			r->bubble = v.bubble;
			r->peak_mem = v.peak;
			if (!v.ok)
				snprintf(r->why, sizeof r->why, "the programs cannot run");
		}
		ir_free(c);
	}
}

static int by_size_desc(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a < b) - (a > b);
}

/* The whole-layers term (tune.h): the layers' M x (f + b + w), largest
 * first; any kP + 1 of them put k + 1 on one of P devices, at least the
 * k + 1 least of those. */
static double whole_layers(const ir_module *m, int P)
{
	int L = m->nlayers;
	double M = (double)ir_local_mb(m), best = 0;
	if (L == 0 || P < 1)
		return 0;
	double *job = malloc((size_t)L * sizeof *job);
	ir_assert(job != NULL);
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		job[l] = M * (c->f + c->b + sim_redo_time(m->plan.recompute, c, false) + c->w);
	}
	qsort(job, (size_t)L, sizeof *job, by_size_desc);
	for (int k = 0; (int64_t)k * P + 1 <= L; k++) {
		double sum = 0; /* jobs kP - k .. kP */
		for (int j = k * P - k; j <= k * P; j++)
			sum += job[j];
		best = sum > best ? sum : best;
	}
	free(job);
	return best;
}

/* ---- whole layers with idle starts ---------------------------------------- */

/* The jobs of a split (split_bound): kind 0, the most frequent size, is
 * counted per device; kinds 1..ni-1 are the state of the dynamic program
 * (mixed radix, count + 1 digits each); the rest only count in the
 * total. */
typedef struct lsplit {
	int nk, ni, P;
	double size[64];
	int count[64];
	int radix[64];    /* state digit weights of kinds 1..ni-1 */
	int nstates;
	double total;     /* every job's size */
	double first;     /* layer 0's job: on device 0, whose lowest layer it is */
	const double *idle;
	int *dp, *next;   /* per state: the most kind-0 jobs placed, -1: none */
} lsplit;

/* Could the jobs fit P devices, the i-th holding at most T - idle[i]?  A
 * relaxation (yes whenever some assignment fits): kinds past ni are
 * divisible, and device i's idle is the least its place among the
 * devices' lowest layers allows; device 0 holds layer 0. */
static bool split_fits(lsplit *x, double T)
{
	double room = 0;
	for (int i = 0; i < x->P; i++)
		room += T > x->idle[i] ? T - x->idle[i] : 0;
	if (room < x->total * (1 - 1e-12))
		return false;
	int n0 = x->count[0];
	for (int s = 0; s < x->nstates; s++)
		x->dp[s] = -1;
	x->dp[0] = 0;
	for (int i = 0; i < x->P; i++) {
		double cap = T - x->idle[i] - (i == 0 ? x->first : 0);
		if (cap < 0 && i == 0)
			return false;
		if (cap < 0)
			continue;
		memcpy(x->next, x->dp, (size_t)x->nstates * sizeof *x->next);
		for (int s = 0; s < x->nstates; s++) {
			if (x->dp[s] < 0)
				continue;
			/* Every addition a (kinds 1..ni-1, within what is left) that fits. */
			int a[64] = {0}, left[64];
			for (int k = 1, r = s; k < x->ni; k++)
				left[k] = x->count[k] - (r / x->radix[k]) % (x->count[k] + 1);
			for (;;) {
				double used = 0;
				int off = 0;
				for (int k = 1; k < x->ni; k++)
					used += a[k] * x->size[k], off += a[k] * x->radix[k];
				if (used <= cap * (1 + 1e-12)) {
					int fit = (int)fmin(floor((cap - used) / x->size[0] + 1e-9), (double)n0);
					int v = x->dp[s] + fit > n0 ? n0 : x->dp[s] + fit;
					if (v > x->next[s + off])
						x->next[s + off] = v;
				}
				int k = 1; /* the next addition: odometer, past a digit that no longer fits */
				while (k < x->ni && (a[k] == left[k] || used > cap * (1 + 1e-12))) {
					used -= a[k] * x->size[k];
					a[k] = 0;
					k++;
				}
				if (k >= x->ni)
					break;
				a[k]++;
			}
		}
		int *t = x->dp;
		x->dp = x->next, x->next = t;
	}
	return x->dp[x->nstates - 1] >= n0;
}

/* The least T at which split_fits, above lo (a valid bound already):
 * for the jobs job[0..L) on P devices whose i-th by lowest layer idles
 * idle[i].  Returns the largest T found not to fit (so a bound), or lo
 * when the jobs have too many kinds to split exactly at this size. */
static double split_bound(const double *job, int L, const double *idle, int P, double lo)
{
	lsplit x = {.P = P, .idle = idle, .first = L ? job[0] : 0, .total = L ? job[0] : 0};
	for (int l = 1; l < L; l++) {
		int k = 0;
		while (k < x.nk && x.size[k] != job[l])
			k++;
		if (k == x.nk) {
			if (x.nk == 64)
				return lo;
			x.size[x.nk] = job[l], x.count[x.nk++] = 0;
		}
		x.count[k]++;
		x.total += job[l];
	}
	if (x.nk == 0)
		return lo;
	/* Kind 0: the most frequent; then the others by size, largest first,
	 * while the states stay within what P devices x ~50 steps afford. */
	for (int i = 0; i < x.nk; i++)
		for (int j = i + 1; j < x.nk; j++) {
			bool swap = i == 0 ? x.count[j] > x.count[i] || (x.count[j] == x.count[i] && x.size[j] > x.size[i])
			                   : x.size[j] > x.size[i];
			if (swap) {
				double ts = x.size[i];
				int tc = x.count[i];
				x.size[i] = x.size[j], x.count[i] = x.count[j];
				x.size[j] = ts, x.count[j] = tc;
			}
		}
	if (!(x.size[0] > 0))
		return lo;
	int most = (int)sqrt(2e7 / (50.0 * P)), states = 1;
	x.ni = 1;
	for (int k = 1; k < x.nk; k++) {
		if ((int64_t)states * (x.count[k] + 1) > most)
			continue; /* divisible: only the total counts it */
		double ts = x.size[x.ni];
		int tc = x.count[x.ni];
		x.size[x.ni] = x.size[k], x.count[x.ni] = x.count[k];
		x.size[k] = ts, x.count[k] = tc;
		x.radix[x.ni++] = states;
		states *= x.count[x.ni - 1] + 1;
	}
	x.nstates = states;
	x.dp = malloc((size_t)states * sizeof *x.dp);
	x.next = malloc((size_t)states * sizeof *x.next);
	ir_assert(x.dp && x.next);
	double hi = lo > 0 ? lo : x.size[0];
	for (int i = 0; i < 64 && !split_fits(&x, hi); i++)
		lo = hi, hi *= 2;
	for (int i = 0; i < 50 && hi - lo > 1e-9 * hi; i++) {
		double mid = lo + (hi - lo) / 2;
		if (split_fits(&x, mid))
			hi = mid;
		else
			lo = mid;
	}
	free(x.dp);
	free(x.next);
	return lo;
}

void tune_bound_terms(const ir_module *m, double *work, double *path, double *layer, int *heaviest)
{
	double M = (double)ir_local_mb(m), w0 = m->nlayers ? m->layers[0].cost.w : 0;
	int L = m->nlayers, P = (int)ir_pipe_devices(m);
	double all = 0, fb = 0, pre_f = 0, pre_b = 0;
	*path = *layer = 0;
	*heaviest = 0;
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		double b = c->b + sim_redo_time(m->plan.recompute, c, false);
		all += c->f + b + c->w;
		fb += c->f + b;
		/* pre_f, pre_b: micro-batch 0's forward and backward below l. */
		double chain = pre_f + M * (c->f + b) + pre_b + w0;
		double mine = pre_f + M * (c->f + b + c->w);
		*path = chain > *path ? chain : *path;
		if (mine > *layer)
			*layer = mine, *heaviest = l;
		pre_f += c->f;
		pre_b += b;
	}
	/* The devices' work with their idle starts and ends, for the best
	 * number k of devices holding layers. */
	int K = P < L ? P : L;
	double sf = 0, sfb = 0, pf = 0, pb = 0;
	*work = INFINITY;
	for (int k = 1; k <= K; k++) {
		const ir_cost *c = &m->layers[k - 1].cost;
		sf += pf; /* the k least forward prefixes: layers 0 .. k-1's */
		sfb += pf + pb + w0;
		double a = (M * all + sf) / k, b = (M * fb + sfb) / k;
		double t = a > b ? a : b;
		*work = t < *work ? t : *work;
		pf += c->f;
		pb += c->b + sim_redo_time(m->plan.recompute, c, false);
	}
	if (!K)
		*work = 0;
	double whole = whole_layers(m, P);
	*work = whole > *work ? whole : *work;
	/* Whole layers and idle starts together: device i by lowest layer
	 * waits for the forward through layers 0 .. i-1 (and after its last B
	 * the backward through them and layer 0's W). */
	if (K) {
		double *job = malloc((size_t)L * sizeof *job), *idle = malloc((size_t)P * sizeof *idle);
		ir_assert(job && idle);
		for (int pass = 0; pass < 2; pass++) {
			double f = 0, bb = 0;
			for (int i = 0; i < P; i++) {
				idle[i] = i < L ? f + (pass ? bb + w0 : 0) : INFINITY;
				if (i < L) {
					const ir_cost *c = &m->layers[i].cost;
					f += c->f;
					bb += c->b + sim_redo_time(m->plan.recompute, c, false);
				}
			}
			for (int l = 0; l < L; l++) {
				const ir_cost *c = &m->layers[l].cost;
				job[l] = M * (c->f + c->b + sim_redo_time(m->plan.recompute, c, false) + (pass ? 0 : c->w));
			}
			*work = split_bound(job, L, idle, P, *work);
		}
		free(job);
		free(idle);
	}
}

double tune_lower_bound(const ir_module *m)
{
	double work, path, layer;
	int heaviest;
	tune_bound_terms(m, &work, &path, &layer, &heaviest);
	double lb = work > path ? work : path;
	return layer > lb ? layer : lb;
}

/* ---- the list scheduler ------------------------------------------------ */

/* Priorities of the list scheduler.  b_first: a ready backward goes before
 * a ready forward (it is on the critical path and frees memory); else the
 * forward does (fills the pipeline sooner).  deep_first: among ready
 * forwards, the deepest stage first (finishes micro-batches early), else
 * the oldest micro-batch.  w_lazy: with nothing else ready, a pending W
 * waits if an input is known to arrive before it would end.  pri (NULL:
 * all 0): per stage s, pri[2s] ranks its F and pri[2s + 1] its B; among
 * the ready ops of a device the higher rank goes first, and the rules
 * above break ties (a B and an F of one rank: b_first).  The anytime
 * search tunes them (anneal). */
typedef struct knobs {
	bool b_first, deep_first, w_lazy;
	const signed char *pri;
} knobs;

static int rank_of(const knobs *k, int s, ir_op_kind kind)
{
	return k->pri ? k->pri[2 * s + (kind == IR_OP_B)] : 0;
}

typedef struct lsched {
	ir_module *m;
	int S, M, P;
	double *tf, *tb, *tw;   /* per stage: F, B, W time */
	int64_t *act, *ws;      /* per stage: stash bytes (act: ir_stage_kept) */
	int64_t *redo;          /* per stage: ir_stage_redo, held during its F and B */
	int64_t *limit;         /* per device: bytes for stashes (INT64_MAX: no limit) */
	int64_t *used;
	int64_t *reserve;       /* per stage: act of the next deeper stage on its device */
	double *arr_f, *arr_b;  /* per (stage, mb): input arrival, NAN: not known */
	int *nf, *nb;           /* per stage: next micro-batch to forward / backward */
	double *t;              /* per device: free at */
	bool *waiting;
	int **mine;             /* per device: its stages, deepest first */
	int *nmine;
	int **wq;               /* per device: pending W's as stage * M + mb, FIFO */
	int *wh, *wt;
	double *send_free, *recv_free;
	uint64_t bytes;
} lsched;

static double deliver(lsched *L, int a, int b, double end)
{
	if (a == b)
		return end;
	double st = end;
	if (L->send_free[a] > st)
		st = L->send_free[a];
	if (L->recv_free[b] > st)
		st = L->recv_free[b];
	double e = st + sim_link_time(L->m, a, b, L->bytes);
	L->send_free[a] = L->recv_free[b] = e;
	return e;
}

static void wake(lsched *L, int d, double when)
{
	if (L->waiting[d]) {
		L->waiting[d] = false;
		if (when > L->t[d])
			L->t[d] = when;
	}
}

/* F(s) fits when its stash, the W stash its B will write while the stash
 * is still held (and the stash a recomputing B makes again), and room for
 * one deeper F all fit. */
static bool f_fits(const lsched *L, int d, int s)
{
	return L->used[d] + L->act[s] + L->ws[s] + L->redo[s] + L->reserve[s] <= L->limit[d];
}

/* B(s) of a recomputing stage fits when the W stash it writes and the
 * stash it makes again fit beside what is held.  F's check keeps that
 * room for the last F only, and a recomputing stage keeps just its input:
 * many F's pass, and their B's then pile up W stashes far larger than
 * what F kept unless a pending W goes first.  Without recomputation F
 * kept the stash that B trades for its W stash, and the check would only
 * hold back B's that the judge lets through. */
static bool b_fits(const lsched *L, int d, int s)
{
	return L->redo[s] == 0 || L->used[d] + L->ws[s] + L->redo[s] <= L->limit[d];
}

/* Build every device's program into L->m.  Returns 0, or -1 when the
 * policy runs into a dead end (memory too tight for it). */
static int list_schedule(lsched *L, const knobs *k)
{
	ir_module *m = L->m;
	int S = L->S, M = L->M, P = L->P;
	long left = 3L * S * M;
	ir_alloc_devices(m);
	while (left > 0) {
		int d = -1;
		for (int e = 0; e < P; e++) {
			if (L->waiting[e] || (d >= 0 && L->t[e] >= L->t[d]))
				continue;
			bool work = L->wh[e] != L->wt[e]; /* a W pending, or a B to come */
			for (int i = 0; i < L->nmine[e] && !work; i++)
				work = L->nb[L->mine[e][i]] < M;
			if (work)
				d = e;
		}
		if (d < 0)
			return -1; /* every device with work waits: a dead end */
		double T = L->t[d];
		int best_b = -1, best_f = -1;
		double ta = INFINITY; /* next known arrival this device could use */
		for (int i = 0; i < L->nmine[d]; i++) {
			int s = L->mine[d][i];
			if (L->nb[s] < L->nf[s]) {
				double a = L->arr_b[s * M + L->nb[s]];
				if (a <= T) {
					int r = rank_of(k, s, IR_OP_B), rb = best_b < 0 ? 0 : rank_of(k, best_b, IR_OP_B);
					if (best_b < 0 || r > rb || (r == rb && a < L->arr_b[best_b * M + L->nb[best_b]]))
						best_b = s;
				} else if (a < ta) {
					ta = a;
				}
			}
			if (L->nf[s] < M && f_fits(L, d, s)) {
				double a = L->arr_f[s * M + L->nf[s]];
				if (a <= T) {
					int r = rank_of(k, s, IR_OP_F), rf = best_f < 0 ? 0 : rank_of(k, best_f, IR_OP_F);
					if (best_f < 0 || r > rf ||
					    (r == rf && (k->deep_first ? s > best_f : L->nf[s] < L->nf[best_f])))
						best_f = s;
				} else if (a < ta) {
					ta = a;
				}
			}
		}
		bool has_w = L->wh[d] != L->wt[d];
		ir_op_kind kind;
		int s;
		bool b_next = best_b >= 0 &&
		              (best_f < 0 || 2 * rank_of(k, best_b, IR_OP_B) + k->b_first >
		                                     2 * rank_of(k, best_f, IR_OP_F) + !k->b_first);
		if (b_next && has_w && !b_fits(L, d, best_b)) {
			/* The W's first, at once: each frees the W stash the B lacks. */
			kind = IR_OP_W, s = L->wq[d][L->wh[d]] / M;
		} else if (b_next) {
			kind = IR_OP_B, s = best_b;
		} else if (best_f >= 0) {
			kind = IR_OP_F, s = best_f;
		} else if (has_w) {
			int ws = L->wq[d][L->wh[d]] / M;
			if (k->w_lazy && ta < T + L->tw[ws]) {
				L->t[d] = ta;
				continue;
			}
			kind = IR_OP_W, s = ws;
		} else {
			if (isfinite(ta))
				L->t[d] = ta;
			else
				L->waiting[d] = true;
			continue;
		}
		int mb;
		double end;
		if (kind == IR_OP_F) {
			mb = L->nf[s]++;
			end = T + L->tf[s];
			L->used[d] += L->act[s];
			if (s == S - 1) {
				L->arr_b[s * M + mb] = end;
			} else {
				int d2 = m->stages[s + 1].device;
				L->arr_f[(s + 1) * M + mb] = deliver(L, d, d2, end);
				wake(L, d2, L->arr_f[(s + 1) * M + mb]);
			}
		} else if (kind == IR_OP_B) {
			mb = L->nb[s]++;
			end = T + L->tb[s];
			L->used[d] += L->ws[s] - L->act[s];
			L->wq[d][L->wt[d]++] = s * M + mb;
			if (s > 0) {
				int d2 = m->stages[s - 1].device;
				L->arr_b[(s - 1) * M + mb] = deliver(L, d, d2, end);
				wake(L, d2, L->arr_b[(s - 1) * M + mb]);
			}
		} else {
			mb = L->wq[d][L->wh[d]++] % M;
			end = T + L->tw[s];
			L->used[d] -= L->ws[s];
		}
		ir_add_op(m, d, kind, s, mb, (ir_loc){0});
		L->t[d] = end;
		left--;
	}
	return 0;
}

/* Schedule the placed stages of c with knobs k; 0 or -1 (dead end).
 * Without `fit`, the memory limits are ignored: a plan that shows how much
 * memory it would need. */
static int order(ir_module *c, const knobs *k, bool fit, uint64_t reserve)
{
	lsched L = {.m = c, .S = c->nstages, .M = (int)ir_local_mb(c),
	            .P = (int)ir_pipe_devices(c)};
	int S = L.S, M = L.M, P = L.P;
	/* Called for every candidate: its tables are freed with it. */
	arena *a = arena_new();
	L.tf = arena_calloc(a, (size_t)S, sizeof *L.tf);
	L.tb = arena_calloc(a, (size_t)S, sizeof *L.tb);
	L.tw = arena_calloc(a, (size_t)S, sizeof *L.tw);
	L.act = arena_calloc(a, (size_t)S, sizeof *L.act);
	L.ws = arena_calloc(a, (size_t)S, sizeof *L.ws);
	L.redo = arena_calloc(a, (size_t)S, sizeof *L.redo);
	L.reserve = arena_calloc(a, (size_t)S, sizeof *L.reserve);
	L.nf = arena_calloc(a, (size_t)S, sizeof *L.nf);
	L.nb = arena_calloc(a, (size_t)S, sizeof *L.nb);
	L.arr_f = arena_calloc(a, (size_t)S * M, sizeof *L.arr_f);
	L.arr_b = arena_calloc(a, (size_t)S * M, sizeof *L.arr_b);
	L.limit = arena_calloc(a, (size_t)P, sizeof *L.limit);
	L.used = arena_calloc(a, (size_t)P, sizeof *L.used);
	L.t = arena_calloc(a, (size_t)P, sizeof *L.t);
	L.waiting = arena_calloc(a, (size_t)P, sizeof *L.waiting);
	L.mine = arena_calloc(a, (size_t)P, sizeof *L.mine);
	L.nmine = arena_calloc(a, (size_t)P, sizeof *L.nmine);
	L.wq = arena_calloc(a, (size_t)P, sizeof *L.wq);
	L.wh = arena_calloc(a, (size_t)P, sizeof *L.wh);
	L.wt = arena_calloc(a, (size_t)P, sizeof *L.wt);
	L.send_free = arena_calloc(a, (size_t)P, sizeof *L.send_free);
	L.recv_free = arena_calloc(a, (size_t)P, sizeof *L.recv_free);
	L.bytes = sim_boundary_bytes(c);
	for (size_t i = 0; i < (size_t)S * M; i++)
		L.arr_f[i] = L.arr_b[i] = NAN;
	for (int mb = 0; mb < M; mb++)
		L.arr_f[mb] = 0;
	for (int s = 0; s < S; s++) {
		L.tf[s] = sim_stage_time(c, s, IR_OP_F);
		L.tb[s] = sim_stage_time(c, s, IR_OP_B);
		L.tw[s] = sim_stage_time(c, s, IR_OP_W);
		L.act[s] = (int64_t)ir_stage_kept(c, s);
		L.redo[s] = (int64_t)ir_stage_redo(c, s);
		for (int l = c->stages[s].first; l <= c->stages[s].last; l++)
			L.ws[s] += (int64_t)c->layers[l].cost.wstash;
		L.nmine[c->stages[s].device]++;
	}
	for (int d = 0; d < P; d++) {
		L.mine[d] = arena_calloc(a, (size_t)L.nmine[d], sizeof **L.mine);
		L.wq[d] = arena_calloc(a, (size_t)L.nmine[d] * M, sizeof **L.wq);
		L.nmine[d] = 0;
		L.limit[d] = INT64_MAX;
	}
	for (int s = S - 1; s >= 0; s--) { /* deepest first */
		int d = c->stages[s].device;
		if (L.nmine[d])
			L.reserve[s] = L.act[L.mine[d][L.nmine[d] - 1]];
		L.mine[d][L.nmine[d]++] = s;
	}
	if (fit && c->cluster.mem != UINT64_MAX) {
		for (int d = 0; d < P; d++)
			L.limit[d] = (int64_t)(c->cluster.mem - reserve);
		for (int s = 0; s < S; s++)
			for (int l = c->stages[s].first; l <= c->stages[s].last; l++)
				L.limit[c->stages[s].device] -= (int64_t)cost_resident(c, l);
		for (int d = 0; d < P; d++)
			L.limit[d] -= (int64_t)cost_device_scratch(c, d);
	}
	int rc = list_schedule(&L, k);
	arena_free(a);
	return rc;
}

/* ---- candidates ---------------------------------------------------------- */

typedef enum { PL_SEQ, PL_RR, PL_V, PL_KEEP } placement_kind;

typedef struct cand {
	int S;
	int *bound;  /* S + 1 layer boundaries: stage s is [bound[s], bound[s+1]) */
	int *dev;    /* device of each stage */
	knobs k;     /* its policy; k.pri unused: */
	signed char *pri; /* NULL, or 2S ranks (knobs.pri) */
	verdict v;
} cand;

#define POOL 3 /* layouts refined, the best of each */

typedef struct tuner {
	const ir_module *m;
	uint64_t reserve;   /* bytes each device keeps free (see judge) */
	double deadline;
	long evals;
	long effort;        /* plans judged at most by the search (the baselines' count) */
	cand best;
	bool have_best;
	cand pool[POOL];    /* the best few layouts, each under its best policy */
	int npool;
	double lb;
	const char *doing;  /* for the progress line */
	arena *a;           /* the pass's scratch: the candidates kept */
	tune_budget *budget;
	int P;              /* devices of one pipeline */
	double *pre;        /* per layer l: the F + B + W of layers [0, l) */
	double *load;       /* per device: balance_devices's scratch */
} tuner;

/* Stop searching: the deadline passed (the budget's seconds: tune_budget.cut)
 * or the effort is spent (tune_budget.spent).  The effort stops the search
 * at the same point on any machine; the seconds only where they come
 * first. */
static bool stop(tuner *t)
{
	if (now() >= t->deadline)
		return t->budget->cut = true;
	if (t->evals >= t->effort)
		return t->budget->spent = true;
	return false;
}

static void progress(tuner *t)
{
	progress_line(t->budget, t->doing, t->evals,
	              t->have_best && t->best.v.fits ? t->best.v.makespan : -1, t->lb);
}

/* Build the candidate into a scratch module (stages, devices, programs). */
static ir_module *build(const tuner *t, const cand *c)
{
	ir_module *x = ir_copy_header(t->m);
	for (int s = 0; s < c->S; s++)
		ir_add_stage(x, c->bound[s], c->bound[s + 1] - 1, c->dev[s], (ir_loc){0});
	knobs k = c->k;
	k.pri = c->pri;
	if (order(x, &k, true, t->reserve) == 0)
		return x;
	/* Memory too tight for this policy: the plan it would run, marked as
	 * not fitting by the judge, still says how much is missing. */
	ir_clear_devices(x);
	if (order(x, &k, false, 0) == 0)
		return x;
	ir_free(x);
	return NULL;
}

static void copy_cand(arena *a, cand *dst, const cand *src)
{
	*dst = *src;
	dst->bound = arena_calloc(a, (size_t)src->S + 1, sizeof *dst->bound);
	dst->dev = arena_calloc(a, (size_t)src->S, sizeof *dst->dev);
	memcpy(dst->bound, src->bound, (size_t)(src->S + 1) * sizeof *dst->bound);
	memcpy(dst->dev, src->dev, (size_t)src->S * sizeof *dst->dev);
	if (src->pri) {
		dst->pri = arena_calloc(a, 2 * (size_t)src->S, sizeof *dst->pri);
		memcpy(dst->pri, src->pri, 2 * (size_t)src->S * sizeof *dst->pri);
	}
}

static bool better(const verdict *a, const verdict *b)
{
	if (a->fits != b->fits)
		return a->fits;
	if (!a->fits) /* neither fits: the one that needs less */
		return a->tight_need < b->tight_need;
	return a->makespan < b->makespan;
}

/* Judge c; keep it when it beats the best.  Returns true if kept. */
static bool consider(tuner *t, cand *c)
{
	t->evals++;
	c->v = (verdict){.makespan = INFINITY};
	ir_module *x = build(t, c);
	if (!x)
		return false;
	c->v = judge(x, t->reserve);
	ir_free(x);
	progress(t);
	if (!c->v.ok || (t->have_best && !better(&c->v, &t->best.v)))
		return false;
	copy_cand(t->a, &t->best, c);
	t->have_best = true;
	return true;
}

/* The partition pass's balanced cut for S stages (the least largest stage
 * time, ties to the fullest later stages). */
static bool minmax_bounds(const ir_module *m, int S, int *bound)
{
	ir_module *c = ir_copy_header(m);
	c->plan.partition = IR_PART_BALANCED;
	c->plan.schedule = IR_SCHED_1F1B;
	c->plan.ngiven = c->plan.nplacement = 0;
	c->cluster.devices = S * ir_dp(m); /* S stages of one chunk (per replica) */
	c->plan.chunks = 1;
	static const pass_id cut[] = {PASS_partition};
	bool ok = S <= m->nlayers && run_quiet(c, (pass_list){cut, 1}, NULL, 0) && c->nstages == S;
	if (ok) {
		for (int s = 0; s < S; s++)
			bound[s] = c->stages[s].first;
		bound[S] = m->nlayers;
	}
	ir_free(c);
	return ok;
}

/* Row s of the least-squares cut (see balanced_bounds): for l in [lo, hi],
 * the best first s stages over layers [0, l) given row s-1 (prev), the
 * cheapest k from [klo, khi].  The cost of a stage, its squared time while
 * within cap (else none), makes the matrix Monge, so the leftmost best k
 * grows with l: divide and conquer, O(layers log layers) per row. */
typedef struct sqrow {
	const double *pre, *prev;
	double *cur;
	int *from;
	const int *first; /* per l: the least k whose stage [k, l) is within cap */
	double cap;
} sqrow;

static void sq_rows(const sqrow *r, int lo, int hi, int klo, int khi)
{
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, a = klo > r->first[mid] ? klo : r->first[mid];
		int b = khi < mid - 1 ? khi : mid - 1, arg = -1;
		double best = INFINITY;
		for (int k = a; k <= b; k++) {
			double w = r->pre[mid] - r->pre[k], v = r->prev[k] + w * w;
			if (w <= r->cap && v < best)
				best = v, arg = k;
		}
		r->cur[mid] = best;
		r->from[mid] = arg;
		/* A row without a stage within cap bounds the others by where
		 * its window starts: the rows above it end before, those below
		 * start after. */
		int split = arg >= 0 ? arg : a < khi ? a : khi;
		if (split < klo)
			split = klo;
		sq_rows(r, lo, mid - 1, klo, split);
		lo = mid + 1, klo = split;
	}
}

/* Balanced boundaries for S stages: first the least possible largest
 * stage (F + B + W; the partition pass's cut), then, among the cuts
 * within it, the least sum of squared stage times, so that the stages
 * other than the largest are even too (a cut that only minimises the
 * largest leaves the rest lopsided whenever one heavy layer, such as a
 * large LM head, sets the maximum).  Dynamic programming over S rows,
 * each O(layers log layers) (sq_rows); false when the deadline passes. */
static bool balanced_bounds(const ir_module *m, int S, int *bound, double deadline, arena *a)
{
	int L = m->nlayers;
	if (S < 1 || S > L || !minmax_bounds(m, S, bound))
		return false;
	double *pre = arena_calloc(a, (size_t)L + 1, sizeof *pre);
	for (int l = 0; l < L; l++) {
		const ir_cost *c = &m->layers[l].cost;
		pre[l + 1] = pre[l] + c->f + c->b + c->w;
	}
	double T = 0;
	for (int s = 0; s < S; s++)
		T = fmax(T, pre[bound[s + 1]] - pre[bound[s]]);
	int *first = arena_calloc(a, (size_t)L + 1, sizeof *first);
	for (int l = 0, k = 0; l <= L; l++) {
		while (k < l && pre[l] - pre[k] > T * (1 + 1e-12))
			k++;
		first[l] = k;
	}
	double *prev = arena_calloc(a, (size_t)L + 1, sizeof *prev);
	double *cur = arena_calloc(a, (size_t)L + 1, sizeof *cur);
	int *from = arena_calloc(a, (size_t)(S + 1) * (size_t)(L + 1), sizeof *from);
	for (int l = 0; l <= L; l++)
		prev[l] = l ? INFINITY : 0;
	bool ok = true;
	for (int s = 1; s <= S && ok; s++) {
		for (int l = 0; l <= L; l++)
			cur[l] = INFINITY;
		sqrow r = {pre, prev, cur, from + (size_t)s * (size_t)(L + 1), first, T * (1 + 1e-12)};
		sq_rows(&r, s, L - (S - s), s - 1, L - 1);
		double *x = prev;
		prev = cur, cur = x;
		ok = now() < deadline;
	}
	ok = ok && isfinite(prev[L]);
	if (ok) { /* else the partition pass's cut stays */
		bound[S] = L;
		for (int s = S, l = L; s > 0; s--)
			l = bound[s - 1] = from[(size_t)s * (size_t)(L + 1) + (size_t)l];
	}
	return ok;
}

/* Move single layers across boundaries to even out the devices' loads
 * (F + B + W of all their stages) for a fixed placement: steepest descent
 * on the sum of squared loads (then the largest), no simulation.  Cheap, so
 * it runs before the simulator judges the layout. */
static void balance_devices(tuner *t, int S, const int *dev, int *bound)
{
	const double *pre = t->pre;
	double *load = t->load;
	int P = t->P;
	while (now() < t->deadline) {
		double best_max = INFINITY, best_sq = INFINITY;
		int best_i = -1, best_nb = 0;
		for (int pass = -1; pass < 2 * S; pass++) {
			/* pass -1 scores the current cut; then boundary i = pass/2 + 1 moves by -1/+1 */
			int i = pass / 2 + 1, nb = 0, old = 0;
			if (pass >= 0) {
				if (i >= S)
					break;
				nb = bound[i] + (pass % 2 ? 1 : -1);
				if (nb <= bound[i - 1] || nb >= bound[i + 1])
					continue;
				old = bound[i];
				bound[i] = nb;
			}
			memset(load, 0, (size_t)P * sizeof *load);
			for (int s = 0; s < S; s++)
				load[dev[s]] += pre[bound[s + 1]] - pre[bound[s]];
			double mx = 0, sq = 0;
			for (int d = 0; d < P; d++)
				mx = load[d] > mx ? load[d] : mx, sq += load[d] * load[d];
			if (pass >= 0)
				bound[i] = old;
			/* Squares first: a move that only passes load on to a
			 * lighter neighbour still counts, so load flows along. */
			if (sq < best_sq * (1 - 1e-12) || (sq <= best_sq && mx < best_max)) {
				best_max = mx, best_sq = sq;
				best_i = pass >= 0 ? i : -1, best_nb = nb;
			}
		}
		if (best_i < 0)
			break; /* the current cut is the best of its neighbours */
		bound[best_i] = best_nb;
	}
}

static void place(int S, int P, placement_kind pk, int *dev)
{
	for (int s = 0; s < S; s++)
		dev[s] = pk == PL_V && s >= P ? 2 * P - 1 - s : s % P;
}

static const knobs policies[] = {
	{true, true, false}, {true, true, true}, {true, false, false}, {false, true, false},
	{false, false, false}, {true, false, true},
};
#define NPOLICIES (int)(sizeof policies / sizeof *policies)

/* Try every policy on a layout; the best kept in t, and the layout under
 * its best policy in the pool when it is among the best few. */
static void try_layout(tuner *t, int S, const int *bound, const int *dev)
{
	cand c = {.S = S}, mine = {0};
	c.bound = (int *)bound;
	c.dev = (int *)dev;
	bool any = false;
	for (int i = 0; i < NPOLICIES && !stop(t); i++) {
		c.k = policies[i];
		consider(t, &c);
		if (c.v.ok && c.v.fits && (!any || c.v.makespan < mine.v.makespan)) {
			copy_cand(t->a, &mine, &c);
			any = true;
		}
	}
	if (!any)
		return;
	int at = t->npool < POOL ? t->npool++ : POOL - 1;
	if (at == POOL - 1 && t->npool == POOL && t->pool[at].S &&
	    t->pool[at].v.makespan <= mine.v.makespan)
		return;
	t->pool[at] = mine;
	for (int i = at; i > 0 && t->pool[i].v.makespan < t->pool[i - 1].v.makespan; i--) {
		cand x = t->pool[i];
		t->pool[i] = t->pool[i - 1];
		t->pool[i - 1] = x;
	}
}

/* Move single layers across boundaries of layout `from` while it helps. */
static void refine(tuner *t, const cand *from)
{
	cand c = {0};
	copy_cand(t->a, &c, from);
	for (bool improved = true; improved && !stop(t);) {
		improved = false;
		for (int i = 1; i < c.S && !stop(t); i++)
			for (int dir = -1; dir <= 1; dir += 2) {
				int nb = c.bound[i] + dir;
				if (nb <= c.bound[i - 1] || nb >= c.bound[i + 1])
					continue;
				int old = c.bound[i];
				verdict before = c.v;
				c.bound[i] = nb;
				consider(t, &c);
				if (c.v.ok && c.v.fits && c.v.makespan < before.makespan) {
					improved = true;
				} else {
					c.bound[i] = old;
					c.v = before;
				}
			}
	}
}

/* ---- the anytime search -------------------------------------------------- */

/* splitmix64: the search's moves come from a fixed seed, so the same
 * effort ends at the same plan on any machine. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int pick(uint64_t *s, int n)
{
	return (int)(rnd(s) % (uint64_t)n);
}

typedef enum { MV_SHIFT, MV_MOVE, MV_SWAP, MV_SPLIT, MV_MERGE, MV_POLICY, MV_RANK, MV_KINDS } move_kind;

/* The stages device d holds in c. */
static int held(const cand *c, int d)
{
	int n = 0;
	for (int s = 0; s < c->S; s++)
		n += c->dev[s] == d;
	return n;
}

static bool same_policy(const knobs *a, const knobs *b)
{
	return a->b_first == b->b_first && a->deep_first == b->deep_first && a->w_lazy == b->w_lazy;
}

/* dst = src, into dst's buffers (room for the anytime search's largest
 * layout); src->pri NULL reads as all 0. */
static void set_cand(cand *dst, const cand *src)
{
	dst->S = src->S, dst->k = src->k, dst->v = src->v;
	memcpy(dst->bound, src->bound, (size_t)(src->S + 1) * sizeof *dst->bound);
	memcpy(dst->dev, src->dev, (size_t)src->S * sizeof *dst->dev);
	if (src->pri)
		memcpy(dst->pri, src->pri, 2 * (size_t)src->S * sizeof *dst->pri);
	else
		memset(dst->pri, 0, 2 * (size_t)src->S * sizeof *dst->pri);
}

/* The ranks a stage's F and B may take (knobs.pri). */
#define RANK_MAX 3

/* One random move of c into n (set_cand's buffers): shift a boundary by
 * 1-3 layers, move a stage to another device, swap two stages' devices,
 * split a stage in two (the new one on a random device, with the ranks of
 * the one split), merge two neighbours, change the policy, or raise or
 * lower the rank of one stage's F or B.  Every device keeps a stage.
 * `fixed`: the placement was given, only boundaries, policy and ranks
 * move.  False: the move drawn does not apply. */
static bool neighbour(uint64_t *rs, const cand *c, cand *n, int P, int maxS, bool fixed)
{
	int S = c->S;
	set_cand(n, c);
	static const move_kind fixed_moves[] = {MV_SHIFT, MV_SHIFT, MV_POLICY, MV_RANK};
	move_kind mk = fixed ? fixed_moves[pick(rs, 4)] : (move_kind)pick(rs, MV_KINDS);
	switch (mk) {
	case MV_SHIFT: {
		if (S < 2)
			return false;
		int i = 1 + pick(rs, S - 1), d = 1 + pick(rs, 3);
		int nb = c->bound[i] + (pick(rs, 2) ? d : -d);
		if (nb <= c->bound[i - 1] || nb >= c->bound[i + 1])
			return false;
		n->bound[i] = nb;
		return true;
	}
	case MV_MOVE: {
		int s = pick(rs, S), d = pick(rs, P);
		if (d == c->dev[s] || held(c, c->dev[s]) < 2)
			return false;
		n->dev[s] = d;
		return true;
	}
	case MV_SWAP: {
		int a = pick(rs, S), b = pick(rs, S);
		if (c->dev[a] == c->dev[b])
			return false;
		n->dev[a] = c->dev[b], n->dev[b] = c->dev[a];
		return true;
	}
	case MV_SPLIT: {
		int s = pick(rs, S), len = c->bound[s + 1] - c->bound[s];
		if (S + 1 > maxS || len < 2)
			return false;
		for (int i = S; i > s; i--)
			n->bound[i + 1] = c->bound[i];
		for (int i = S - 1; i >= s; i--) {
			n->dev[i + 1] = c->dev[i];
			n->pri[2 * i + 2] = c->pri[2 * i], n->pri[2 * i + 3] = c->pri[2 * i + 1];
		}
		n->bound[s + 1] = c->bound[s] + 1 + pick(rs, len - 1);
		n->dev[s + 1] = pick(rs, P);
		n->S = S + 1;
		return true;
	}
	case MV_MERGE: {
		if (S < 2)
			return false;
		int s = pick(rs, S - 1), keep = c->dev[s + pick(rs, 2)];
		int gone = keep == c->dev[s] ? c->dev[s + 1] : c->dev[s];
		if (gone != keep && held(c, gone) < 2)
			return false;
		n->dev[s] = keep;
		for (int i = s + 1; i < S - 1; i++) {
			n->dev[i] = c->dev[i + 1];
			n->pri[2 * i] = c->pri[2 * i + 2], n->pri[2 * i + 1] = c->pri[2 * i + 3];
		}
		for (int i = s + 1; i < S; i++)
			n->bound[i] = c->bound[i + 1];
		n->S = S - 1;
		return true;
	}
	case MV_POLICY: {
		int i = pick(rs, NPOLICIES);
		if (same_policy(&policies[i], &c->k))
			return false;
		n->k = policies[i];
		return true;
	}
	default: {
		int i = pick(rs, 2 * S), r = c->pri[i] + (pick(rs, 2) ? 1 : -1);
		if (r < -RANK_MAX || r > RANK_MAX)
			return false;
		n->pri[i] = (signed char)r;
		return true;
	}
	}
}

/* The moves drawn without the best getting faster before the search
 * ends, where it has converged whatever the effort left: 5000 on the
 * published configurations (a few hundred stages x micro-batches), fewer
 * on larger ones, whose every plan takes longer to judge, down to 300;
 * a count of moves, so the same on any machine. */
static long patience(const tuner *t, int S)
{
	double ops = (double)S * (double)ir_local_mb(t->m);
	double n = 5000 * 512 / (ops > 1 ? ops : 1);
	return n > 5000 ? 5000 : n < 300 ? 300 : (long)n;
}

/* c's real memory plan fits (the cluster's memory unlimited: yes): the
 * judge's reserve is a guess, and the anytime search goes where it is
 * thinnest. */
static bool fits_planned(const tuner *t, const cand *c)
{
	if (t->m->cluster.mem == UINT64_MAX)
		return true;
	ir_module *x = build(t, c);
	uint64_t need = 0;
	bool fits = x && over_after_memplan_fit(t->m, x, &need) < 0;
	ir_free(x);
	return fits;
}

/* The anytime search's last bests, checked from the newest for one whose
 * memory plan fits. */
#define HISTORY 16

/* Threshold accepting over neighbour(): from the best plan found, accept
 * a move whose plan fits and is at most a threshold slower than the
 * current one (the threshold falls to 0 as the search goes on), and go
 * back to the best after a run of moves that did not improve it.  Runs
 * until stop() or patience() moves without a faster best.  It starts
 * only from a best whose memory plan fits (else pass_tune searches again
 * with a larger reserve, and the time is left to that search), and ends
 * at its newest best whose memory plan fits. */
static void anneal(tuner *t, const cand *from, int maxS, bool fixed, uint64_t rs)
{
	if (!t->have_best || !t->best.v.fits || !from->v.fits)
		return;
	if (maxS < from->S)
		maxS = from->S;
	if (maxS < t->best.S)
		maxS = t->best.S;
	if (!fits_planned(t, &t->best) || (from != &t->best && !fits_planned(t, from)))
		return;
	cand start = t->best, hist[HISTORY];
	long nh = 0;
	cand cur = {0}, n = {0};
	cand *both[] = {&cur, &n};
	for (int i = 0; i < 2; i++) {
		both[i]->bound = arena_calloc(t->a, (size_t)maxS + 1, sizeof *cur.bound);
		both[i]->dev = arena_calloc(t->a, (size_t)maxS, sizeof *cur.dev);
		both[i]->pri = arena_calloc(t->a, 2 * (size_t)maxS, sizeof *cur.pri);
	}
	set_cand(&cur, from);
	long since_best = 0, since_restart = 0, enough = patience(t, from->S);
	while (!stop(t) && since_best < enough) {
		since_best++, since_restart++;
		if (!neighbour(&rs, &cur, &n, t->P, maxS, fixed) ||
		    (int64_t)n.S * ir_local_mb(t->m) > PASS_MAX_PAIRS)
			continue;
		/* Half the layout moves with the devices' loads evened out after
		 * them: a stage moved or split mostly needs its neighbours'
		 * layers shifted to pay off. */
		if (!fixed && pick(&rs, 2))
			balance_devices(t, n.S, n.dev, n.bound);
		if (consider(t, &n)) {
			since_best = since_restart = 0;
			hist[nh++ % HISTORY] = t->best; /* consider copied it: its own arrays */
		}
		double tau = 0.004 * (1 - (double)since_best / (double)enough);
		if (n.v.ok && n.v.fits && n.v.makespan <= cur.v.makespan * (1 + tau))
			set_cand(&cur, &n);
		if (since_restart >= 200) {
			since_restart = 0;
			set_cand(&cur, &t->best);
		}
	}
	for (long i = nh - 1; i >= 0 && i >= nh - HISTORY; i--)
		if (fits_planned(t, &hist[i % HISTORY])) {
			t->best = hist[i % HISTORY];
			return;
		}
	t->best = start;
}

/* What follows the search, in units of one baseline planned, judged,
 * lowered and memory-planned (the first one's time): the final plan's
 * check in pass_tune and again in the pipeline, and the comparison table
 * (a unit a row), with one unit to spare.  docs/tuner.md has how close
 * it comes. */
#define AFTER_SEARCH (TUNE_NBASELINES + 3)

/* One search with a memory reserve: the best plan found, as a scratch
 * module with stages and programs, or NULL after filling *tight (the
 * plan found that needs the least memory, when one was found).  It ends
 * by `deadline`, less the time what follows it takes.  *planned: the plan
 * returned is a baseline whose memory plan was made and fits. */
static ir_module *search(ir_module *m, pass_ctx *cx, tune_budget *b, uint64_t reserve,
                         double deadline, verdict *tight, bool *planned)
{
	int P = (int)ir_pipe_devices(m);
	tuner t = {.m = m, .lb = tune_lower_bound(m), .reserve = reserve, .deadline = deadline,
	           .effort = tune_effort(b),
	           .doing = "planning the baselines", .a = cx->scratch, .budget = b, .P = P};
	t.pre = arena_calloc(t.a, (size_t)m->nlayers + 1, sizeof *t.pre);
	t.load = arena_calloc(t.a, (size_t)P, sizeof *t.load);
	for (int l = 0; l < m->nlayers; l++) {
		const ir_cost *c = &m->layers[l].cost;
		t.pre[l + 1] = t.pre[l] + c->f + c->b + c->w;
	}

	/* 1. The baselines' plans, their orders run with the backward split
	 * (the gradient leaves when B ends, as in every tuned plan): never
	 * slower than the baseline itself.  Past the deadline only until one
	 * fits; all of them when none does (what the least needs is the
	 * error), so a tight budget never turns a plan that fits into none. */
	ir_module *fallback = NULL;
	verdict fv = {.makespan = INFINITY}, least = {.tight_dev = -1};
	double unit = -1;
	bool fv_planned = false; /* the fallback's memory plan was made, and fits */
	/* Megatron-LM's recipe (i1f1b v=2) first: under a tight budget the plan
	 * is then never slower than what a user would write; 1f1b (the least
	 * memory but gpipe's) next, in case it does not fit; gpipe (the most
	 * memory) last. */
	static const int first_to_last[TUNE_NBASELINES] = {2, 1, 3, 5, 4, 6, 0};
	for (int n = 0; n < TUNE_NBASELINES && !((fallback || b->may_fail) && now() >= t.deadline); n++) {
		int i = first_to_last[n];
		double t1 = now();
		ir_module *c = baseline(m, i, NULL, 0);
		progress(&t);
		if (!c)
			continue;
		c->plan.schedule = IR_SCHED_TUNED;
		verdict v = judge(c, reserve);
		t.evals++;
		bool first = unit < 0, checked = false;
		if (v.ok && (first || (!v.fits && v.makespan < fv.makespan && m->cluster.mem != UINT64_MAX))) {
			/* Over the reserve: what counts is whether its real memory
			 * plan fits; check on a copy (lowering is in place).  The
			 * first is checked anyway: its time is the unit of what
			 * follows the search. */
			ir_module *low = ir_copy_header(m);
			ir_copy_plan(low, c, false);
			uint64_t need = 0;
			int over = over_after_memplan_fit(m, low, &need);
			v.fits = over < 0;
			checked = true;
			if (over >= 0)
				v.tight_dev = over, v.tight_need = need;
			ir_free(low);
		}
		if (first) {
			unit = now() - t1;
			t.deadline = deadline - AFTER_SEARCH * unit;
		}
		if (v.ok && !v.fits && v.tight_need > m->cluster.mem &&
		    (least.tight_dev < 0 || v.tight_need < least.tight_need))
			least = v;
		if (v.ok && v.fits && v.makespan < fv.makespan) {
			ir_free(fallback);
			fallback = c, fv = v, fv_planned = checked;
		} else {
			ir_free(c);
		}
	}
	t.doing = "searching";

	/* 2-4. Layouts x policies.  A given partition or placement is kept. */
	const ir_plan_opts *po = &m->plan;
	int maxS = 4 * P > m->nlayers ? m->nlayers : 4 * P;
	int *bound = arena_calloc(t.a, (size_t)m->nlayers + 1, sizeof *bound);
	int *dev = arena_calloc(t.a, (size_t)m->nlayers, sizeof *dev);
	if (po->partition == IR_PART_GIVEN) {
		int S = po->ngiven;
		bound[0] = 0;
		for (int s = 0; s < S; s++)
			bound[s + 1] = bound[s] + (int)po->given[s];
		if (po->nplacement) {
			for (int s = 0; s < S; s++)
				dev[s] = (int)po->placement[s];
			try_layout(&t, S, bound, dev);
		} else {
			for (placement_kind pk = PL_SEQ; pk <= PL_V; pk++) {
				if (pk == PL_V && S != 2 * P)
					continue;
				place(S, P, pk, dev);
				try_layout(&t, S, bound, dev);
			}
		}
	} else {
		/* Stage counts from P to 4P: every count while P is small (a
		 * count between multiples of P gives devices unequal numbers of
		 * stages), every (P/4)-th when it is large, and 2P always (the V). */
		int step = P / 4 > 1 ? P / 4 : 1;
		for (int S = P, even = 0; S <= maxS;
		     even = !even, S += even ? 0 : (S < 2 * P && S + step > 2 * P ? 2 * P - S : step)) {
			/* Each stage count twice: the partition pass's balanced cut
			 * (least largest stage), then the even one (also least
			 * squares); the search needs both starting points. */
			if (stop(&t) || (int64_t)S * ir_local_mb(m) > PASS_MAX_PAIRS)
				break;
			if (S < 1 || !(even ? balanced_bounds(m, S, bound, t.deadline, t.a) : minmax_bounds(m, S, bound)))
				continue;
			for (placement_kind pk = PL_SEQ; pk <= PL_V; pk++) {
				if ((pk == PL_SEQ) != (S == P) || (pk == PL_V && S != 2 * P))
					continue;
				if (po->nplacement == S) {
					for (int s = 0; s < S; s++)
						dev[s] = (int)po->placement[s];
				} else {
					place(S, P, pk, dev);
				}
				try_layout(&t, S, bound, dev);
				/* The same placement with the devices' loads evened out. */
				int *b2 = arena_calloc(t.a, (size_t)S + 1, sizeof *b2);
				memcpy(b2, bound, (size_t)(S + 1) * sizeof *b2);
				balance_devices(&t, S, dev, b2);
				if (memcmp(b2, bound, (size_t)(S + 1) * sizeof *b2) != 0)
					try_layout(&t, S, b2, dev);
			}
		}
		/* The last layers alone on the last device (the LM head and up to
		 * two before it: its M forwards and backwards on one device are
		 * the chain docs/tuner.md's bound counts), the others round-robin
		 * or in a V over the P - 1 other devices, the loads evened out per
		 * device. */
		int L = m->nlayers;
		for (int kh = 1; kh <= 3 && P >= 3 && po->nplacement == 0 && !stop(&t); kh++)
			for (int v = 1; v <= 2; v++) {
				int S = v * (P - 1) + 1, n = L - kh;
				if (n < S - 1 || (int64_t)S * ir_local_mb(m) > PASS_MAX_PAIRS)
					continue;
				for (placement_kind pk = PL_RR; pk <= PL_V; pk++) {
					if (pk == PL_V && v != 2)
						continue;
					for (int s = 0; s < S - 1; s++) {
						bound[s] = (int)((int64_t)s * n / (S - 1));
						dev[s] = pk == PL_V && s >= P - 1 ? 2 * (P - 1) - 1 - s : s % (P - 1);
					}
					bound[S - 1] = n;
					bound[S] = L;
					dev[S - 1] = P - 1;
					balance_devices(&t, S, dev, bound);
					try_layout(&t, S, bound, dev);
				}
			}
		if (!t.have_best && P > m->nlayers) {
			/* Fewer layers than devices: one layer per stage. */
			for (int s = 0; s <= m->nlayers; s++)
				bound[s] = s;
			place(m->nlayers, P, PL_SEQ, dev);
			try_layout(&t, m->nlayers, bound, dev);
		}
	}

	/* 5. Refine the best few layouts, unless the partition was given. */
	for (int i = 0; i < t.npool && po->partition != IR_PART_GIVEN; i++)
		refine(&t, &t.pool[i]);

	/* 6. The effort left to the anytime search: from the best plan, then
	 * from the best two other layouts of the pool (they lead elsewhere:
	 * nemotron-h-8B on 8 devices, 16 micro-batches, 437.3 -> 421.6 ms),
	 * up to 8 stages a device (splits; the scan stops at 4). */
	if (po->partition != IR_PART_GIVEN) {
		t.doing = "searching further";
		int most = 8 * P > m->nlayers ? m->nlayers : 8 * P;
		cand pool[POOL];
		memcpy(pool, t.pool, sizeof pool);
		int npool = t.npool;
		uint64_t seed = 0x6f637470697065ull; /* fixed: see rnd */
		anneal(&t, &t.best, most, po->nplacement != 0, seed);
		for (int i = 0; i + 1 < npool && i < 2; i++)
			anneal(&t, &pool[i + 1], most, po->nplacement != 0, seed + (uint64_t)i + 1);
	}

	if (now() >= t.deadline)
		b->cut = true;

	/* The best of the tuned plan and the baselines' plans. */
	bool tuned_ok = t.have_best && t.best.v.fits;
	ir_module *x = NULL;
	*planned = false;
	if (fallback && (!tuned_ok || fv.makespan <= t.best.v.makespan)) {
		x = fallback, fallback = NULL;
		*planned = fv_planned;
	} else if (tuned_ok) {
		x = build(&t, &t.best);
		ir_assert(x != NULL);
	} else {
		/* Nothing fits: the plan that needs the least, by what it really
		 * needs (above the memory, not only above the reserve). */
		*tight = least;
		if (t.have_best && t.best.v.tight_dev >= 0 && t.best.v.tight_need > m->cluster.mem &&
		    (least.tight_dev < 0 || t.best.v.tight_need < least.tight_need))
			*tight = t.best.v;
	}
	ir_free(fallback);
	return x;
}

int pass_tune(ir_module *m, pass_ctx *cx)
{
	if (m->plan.schedule != IR_SCHED_TUNED)
		return 0;
	/* The pipeline runs no partition or placement before the tuner (it
	 * makes its own): their checks of the plan options are made here. */
	if (pass_check_plan(m, cx))
		return -1;
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			diag_sink_error(cx->diag, where, "tune: layer L%d has no cost; run the 'cost' pass first", l);
			return -1;
		}
	/* Search keeping 1/25 of each device's memory free for what the memory
	 * plan adds; if the plan found still does not fit once lowered and
	 * planned, search again keeping 1/12, then 1/6. */
	static const int reserve_div[] = {25, 12, 6};
	tune_budget fallback = tune_budget_start(0), *b = cx->budget ? cx->budget : &fallback;
	b->t0 = b->armed ? b->armed : now();
	b->armed = 0; /* a budget made before the plan counts for this plan only */
	if (!b->clock0)
		b->last_progress = b->t0; /* else the caller's last line */
	b->cut = b->spent = false;
	b->refused_dev = -1;
	double deadline = b->end = b->t0 + (b->seconds > 0 ? b->seconds : DEFAULT_BUDGET_S);
	uint64_t mem = m->cluster.mem, need = 0;
	verdict tight = {.tight_dev = -1};
	int over = -1;
	for (size_t i = 0; i < sizeof reserve_div / sizeof *reserve_div; i++) {
		uint64_t reserve = mem == UINT64_MAX ? 0 : mem / (uint64_t)reserve_div[i];
		bool planned;
		ir_module *x = search(m, cx, b, reserve, deadline, &tight, &planned);
		if (!x)
			break;
		need = 0;
		over = mem == UINT64_MAX || planned ? -1 : over_after_memplan_fit(m, x, &need);
		if (over >= 0 && b->refused_dev < 0) {
			/* The fastest plan found, for `plan` to say why it was not
			 * taken if a later search's is (x is lowered: its step as it
			 * would run). */
			diag_sink quiet = {0};
			sim_result *r = sim_run_to(x, &quiet);
			b->refused_us = r ? r->makespan : NAN;
			sim_free(r);
			b->refused_dev = over, b->refused_need = need;
		}
		if (over < 0) {
			b->refused_keep = i > 0 ? reserve_div[i] : 0;
			/* x was lowered to check it: m takes only the ordered plan; the
			 * pipeline lowers m itself. */
			ir_copy_plan(m, x, true);
			ir_free(x);
			return 0;
		}
		ir_free(x);
		tight = (verdict){.tight_dev = over, .tight_need = need};
		if (b->may_fail && now() >= deadline)
			break;
	}
	/* Nothing fits anywhere: name the tightest device. */
	char need_s[32], mem_s[32];
	ir_fmt_size(need_s, sizeof need_s, tight.tight_need);
	ir_fmt_size(mem_s, sizeof mem_s, mem);
	if (tight.tight_dev >= 0)
		diag_sink_error(cx->diag, ir_loc_or(m->cluster_at.mem, ir_loc_or(m->cluster_loc, where)),
		                "the model does not fit: in the best plan found, device D%d needs %s "
		                "(weights, gradients, optimizer state and activations) and has %s",
		                tight.tight_dev, need_s, mem_s);
	else
		diag_sink_error(cx->diag, where, "tune: no plan found for %d layers on %lld devices", m->nlayers,
		                (long long)m->cluster.devices);
	return -1;
}
