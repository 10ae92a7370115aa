/* print.h: the driver's printers (print.c): the plan, its simulated step,
 * its comparison with the baselines, and all of it as JSON. */
#ifndef OCTO_PRINT_H
#define OCTO_PRINT_H

#include "ir.h"
#include "scaleout.h"
#include "simulate.h"
#include "tune.h"

/* Every baseline planned and simulated on the plan's model, and the lower
 * bound: made once per command, and shown by the stdout table and by the
 * compiled directory's report.md alike. */
typedef struct plan_comparison {
	tune_row rows[TUNE_NBASELINES];
	double lower_bound; /* microseconds */
	bool cut, spent;    /* the budget's seconds, or its effort, ended the search */
	double seconds;     /* the budget */
	long effort;
	/* The tuner's fastest plan did not fit once memory-planned (see
	 * tune_budget.refused_*): keep 0 when it did. */
	int keep, refused_dev;
	double refused_us;
	uint64_t refused_need;
} plan_comparison;

void plan_compare(const ir_module *m, tune_budget *b, plan_comparison *c);

/* The summary, the stages and each device's first ops. */
void print_plan_table(const ir_module *m);

/* The simulated step: makespan, bubble, throughput, MFU, and per device. */
void print_sim_table(const ir_module *m, const sim_result *r);

/* The tuned plan (r) against the baselines and the lower bound. */
void print_comparison(const ir_module *m, const sim_result *r, const plan_comparison *c);

/* The plan, r's fields when r is not NULL and the data-parallel search's
 * rows when so is not NULL, as one JSON object. */
void print_plan_json(const ir_module *m, const sim_result *r, const scaleout *so);

/* The data-parallel search (--dp auto): one row per candidate. */
void print_scaleout_table(const ir_module *m, const scaleout *so);

#endif
