/* scaleout.h: choosing the data-parallel degree (docs/dataparallel.md,
 * "Choosing D").
 *
 * `--dp auto` (YAML `plan: dp: auto`) asks for the fastest way to train the
 * model on the cluster's N devices: D replicas of a pipeline of P = N / D
 * devices, for every D that divides N and the step's M micro-batches and
 * leaves each of the P devices a layer, with the distributed optimizer off
 * and on (only the one the user fixed, when `--distributed-optimizer` or
 * `distributed_optimizer:` is given), and with every stage's activations
 * stashed or recomputed (`--recompute auto`, the default with dp auto; a
 * mode given fixes it).  With dp given and `--recompute auto`, the same
 * search over the recomputation alone.  Each candidate runs the whole default
 * pipeline -- the tuner or the fixed schedule, the lowering with its
 * collectives, the proof, the memory plan -- on a copy of the model, with
 * a share of the tune budget, and is judged by its simulated step.  The
 * global batch is the model's whatever D, so the fastest step is the most
 * tokens a second; the search keeps the fastest candidate whose every
 * device stays within its memory, the smaller D on a tie. */
#ifndef OCTO_SCALEOUT_H
#define OCTO_SCALEOUT_H

#include "ir.h"
#include "pass.h"

/* One candidate: a data-parallel degree and the optimizer's sharding. */
typedef struct scaleout_row {
	int64_t dp, pp;    /* replicas, pipeline devices */
	bool dist_opt;     /* the distributed optimizer */
	ir_recompute recompute; /* every stage's */
	double recompute_share; /* of the step, the average device's time running F again */
	bool ok;           /* planned and simulated (else `why` says what stopped it) */
	bool fits;         /* every device within its memory */
	bool chosen;
	double step;       /* microseconds: the simulated step */
	double bubble;     /* idle / (devices x step) */
	double exposed;    /* microseconds: the reduction the step waits for, the largest over the devices */
	double update;     /* microseconds: the optimizer step, the largest over the devices */
	double bound;      /* microseconds: no plan at this D is faster (scaleout_bound) */
	double tokens_per_s;
	uint64_t peak;     /* the largest device peak */
	char why[192];     /* not ok: what stopped it; else, unless chosen: why it lost */
} scaleout_row;

typedef struct scaleout {
	scaleout_row *rows; /* malloc'd; scaleout_free */
	int nrows;
	int chosen;         /* index of the kept row, or -1 */
	bool dp_searched;   /* what was the search's: dp, */
	bool dist_opt_searched; /* the optimizer's sharding, */
	bool recompute_searched; /* the recomputation */
	ir_module *base;    /* the model searched, when the caller hands it over
	                     * (the module kept shares its strings): scaleout_free
	                     * frees it, after the module kept is freed */
} scaleout;

/* Search m's candidates (m->dp_auto), running the passes m's pipeline
 * needs on each with po's options: its dumps are kept per candidate and
 * only the chosen one's are written (to po->dump, stdout when NULL); its
 * budget (po->budget, the default 20 s when NULL) is split over the
 * candidates, and its clock is left set so that the baselines compared
 * afterwards stop by the same deadline.  Fills *out (every candidate
 * considered, in order of D) and returns the chosen candidate's module,
 * planned, owned by the caller, sharing m's strings and arrays (m must
 * outlive it: see scaleout.base); NULL after a diagnostic at the dp field
 * when no candidate plans or fits (out still says why, row by row). */
ir_module *scaleout_search(const ir_module *m, const pass_opts *po, scaleout *out);

/* A lower bound on the step of any plan of m at its dp (microseconds):
 * the pipeline's (tune_lower_bound, with M / D micro-batches on P
 * devices) and, with replicas, after the last weight gradient the step
 * computes, the reduction and update of at least that layer's bucket: of
 * the layer with the fewest parameters, over the faster link. */
double scaleout_bound(const ir_module *m);

/* The rows and the base module. */
void scaleout_free(scaleout *s);

#endif
