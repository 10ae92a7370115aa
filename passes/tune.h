/* tune.h: the joint tuner's interface beyond its pass (docs/tuner.md).
 *
 * The `tune` pass (schedule 'tuned') searches the number of stages, the
 * partition, the placement and the per-device order of F, B and W
 * together, judging every candidate with the simulator and keeping only
 * those within each device's memory.  The baselines are among its starting
 * points, so what it keeps is never slower than the best baseline that
 * fits. */
#ifndef OCTO_TUNE_H
#define OCTO_TUNE_H

#include "ir.h"

/* One planner's result on a model, for the comparison table. */
typedef struct tune_row {
	char name[32];        /* "1f1b", "i1f1b v=2", "tuned", ... */
	bool ok;              /* planned (else `why` says what stopped it) */
	bool fits;            /* every device within its memory */
	double makespan;      /* microseconds */
	double bubble;        /* idle / (devices x makespan) */
	uint64_t peak_mem;    /* the largest device peak */
	char why[96];
} tune_row;

#define TUNE_NBASELINES 7 /* gpipe 1f1b i1f1b(v=2) zbh1 zbh2 zbv, + balanced zbh1 */

/* The tuner's wall-time budget for one plan (docs/tuner.md): the search,
 * and tune_baselines after it, end by its deadline.  The caller owns it
 * and hands it to the pass (pass_opts.budget) and to tune_baselines; the
 * pass writes the plan's clock and deadline into it. */
typedef struct tune_budget {
	double seconds;       /* the plan's wall time */
	double armed;         /* when its clock started, for the next plan (0: at the tune pass) */
	double t0, end;       /* the last plan's start and deadline (set by the tune pass) */
	double last_progress; /* when the last progress line was written */
	long effort;          /* plans the search judges at most (0: the default, 20000) */
	bool cut;             /* the last plan's search reached its deadline (set by the tune pass):
	                       * more time might have found a faster plan */
	bool spent;           /* the same for its effort */
	/* A plan among several (a --dp auto candidate): the progress lines
	 * count from the command's start (0: the plan's) and name the plan. */
	double clock0;
	char what[96];
	/* Past the deadline, stop even when no plan fits yet (the caller
	 * already has one that does: a --dp auto search that found a fit). */
	bool may_fail;
	/* Set by the tune pass when the fastest plan its search found did not
	 * fit once lowered and memory-planned and a search keeping more
	 * memory free gave the plan: refused_keep (1/refused_keep of each
	 * device kept free by that search; 0: the first search's plan was
	 * taken), the refused plan's step (us), its device furthest over and
	 * what that one needs (refused_dev -1: none refused). */
	int refused_keep;
	double refused_us;
	int refused_dev;
	uint64_t refused_need;
} tune_budget;

/* A budget of `seconds` counted from now, for the next plan; 0: the
 * default, 20 s counted from the start of the tune pass. */
tune_budget tune_budget_start(double seconds);

/* b's effort, or the default (plans judged). */
long tune_effort(const tune_budget *b);

/* Plan and simulate every baseline on a copy of m (its model, cluster and
 * costs; its own plan is not touched).  Fills rows[0..TUNE_NBASELINES); a
 * row whose turn comes after the deadline of b's last plan is not judged
 * (ok false, `why` says so).  b NULL: no deadline and no progress lines. */
void tune_baselines(const ir_module *m, tune_budget *b, tune_row *rows);

/* A lower bound on the step of any partition, placement and order of m
 * (docs/tuner.md, "Lower bound"), the largest of three terms.  With the
 * plan's recomputation (every stage's; docs/cost-model.md) B runs F again:
 * b counts f + b (full), or sel_f + b, the scan's F (selective).
 * Microseconds. */
double tune_lower_bound(const ir_module *m);

/* Its three terms, microseconds:
 * - work: the devices' work with their idle starts.  Each device holding
 *   layers waits, before its first op, for micro-batch 0's forward through
 *   the layers before its lowest one (the lowest layers of k devices are k
 *   distinct indices), then runs its work; and after its last B, the
 *   backward through the layers below (and layer 0's W) still follows.  So
 *   for some k <= min(P, L) devices, k x LB >= M x sum(f + b + w) + the k
 *   least forward prefixes, and k x LB >= M x sum(f + b) + the k least
 *   (forward + backward prefix + w0); with every prefix 0 the first is
 *   total work / P.  And layers are whole: a device runs all M
 *   micro-batches of each of its layers, and any kP + 1 layers put k + 1
 *   on one of P devices, so LB >= the k + 1 least of the kP + 1 largest
 *   M x (f + b + w), for every k (with 92 equal layers on 8 devices, 12
 *   layers' work where the average is 11.5).
 * - path: for every layer l, micro-batch 0's forward up to l, the M
 *   micro-batches' f + b of l on its one device, then the last one's
 *   backward below l and layer 0's W (with M = 1, one micro-batch's
 *   critical path); it ends with a weight gradient of layer 0.
 * - layer: for every layer l, the forward up to l and then M x its
 *   f + b + w on its device (layer *heaviest is the largest); it ends with
 *   a weight gradient of that layer. */
void tune_bound_terms(const ir_module *m, double *work, double *path, double *layer, int *heaviest);

#endif
