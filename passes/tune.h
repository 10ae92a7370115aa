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
	bool cut;             /* the last plan's search reached its deadline (set by the tune pass):
	                       * more time might have found a faster plan */
} tune_budget;

/* A budget of `seconds` counted from now, for the next plan; 0: the
 * default, 20 s counted from the start of the tune pass. */
tune_budget tune_budget_start(double seconds);

/* Plan and simulate every baseline on a copy of m (its model, cluster and
 * costs; its own plan is not touched).  Fills rows[0..TUNE_NBASELINES); a
 * row whose turn comes after the deadline of b's last plan is not judged
 * (ok false, `why` says so).  b NULL: no deadline and no progress lines. */
void tune_baselines(const ir_module *m, tune_budget *b, tune_row *rows);

/* LB = max(total work / devices, one micro-batch's critical path, the
 * heaviest layer's work): the work is M x sum over layers of (f + b + w);
 * the critical path is sum of (f + b) over all layers plus the W of layer
 * 0, which must follow the last B of the first stage; and a layer runs on
 * one device, so M x its f + b + w is a bound too.  With the plan's
 * recomputation (every stage's; docs/cost-model.md) each f counts twice,
 * as B runs F again (full), or f + sel_f, as B runs the scan's F again
 * (selective).  Microseconds. */
double tune_lower_bound(const ir_module *m);

/* Its three terms, microseconds: the work per device, the critical path
 * (which ends with a weight gradient of layer 0) and the heaviest layer's
 * work (layer *heaviest, whose last op is a weight gradient too). */
void tune_bound_terms(const ir_module *m, double *work, double *path, double *layer, int *heaviest);

#endif
