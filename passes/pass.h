/* pass.h: the pass registry and the pass manager.
 *
 * A pass is a function from a module to the same module, transformed in
 * place, given a context by the manager (where its diagnostics go, the
 * tuner's budget, scratch memory the manager frees after it); it returns
 * 0, or -1 after a diagnostic (a user mistake such as a partition that
 * cannot be built).  The registry below is the one list of passes;
 * manager.c holds the one list of what `plan` runs and of its parts. */
#ifndef OCTO_PASS_H
#define OCTO_PASS_H

#include "ir.h"

struct tune_budget;

/* What the manager hands every pass. */
typedef struct pass_ctx {
	diag_sink *diag;             /* where the pass's diagnostics go (never NULL) */
	arena *scratch;              /* the pass's own memory: freed when the pass returns */
	struct tune_budget *budget;  /* the tuner's wall-time budget (NULL: its default) */
} pass_ctx;

typedef int (*pass_fn)(ir_module *m, pass_ctx *cx);

/* The most (stage, micro-batch) pairs a plan may hold: planning takes
 * about 3 KiB of memory for each (the programs, their lowering, the memory
 * plan, the simulator's tables), so about 3 GiB at this cap.  `partition`
 * refuses a larger plan up front; `tune` skips stage counts above it
 * (docs/cli.md). */
#define PASS_MAX_PAIRS (1 << 20)

/* X(name, one-line synopsis) */
#define PASS_LIST(X)                                                           \
	X(cost, "F/B/W time, FLOPs, stashes and resident bytes of every layer")    \
	X(partition, "cut the layers into contiguous stages (uniform, balanced or given)") \
	X(place, "assign every stage to a device (sequential, a V for zbv, or given)") \
	X(schedule, "order F, B and W of every stage and micro-batch per device")  \
	X(tune, "search partition, placement and order jointly (schedule 'tuned')") \
	X(comm, "lower every cross-device dependency to send, receive and wait") \
	X(verify, "prove the lowered programs deadlock-free (or print the cycle)") \
	X(memplan, "live range and arena offset of every buffer, one arena per device")

typedef enum pass_id {
#define X(n, s) PASS_##n,
	PASS_LIST(X)
#undef X
	PASS_COUNT
} pass_id;

typedef struct pass_info {
	const char *name;
	const char *synopsis;
	pass_fn run;
} pass_info;

extern const pass_info pass_table[PASS_COUNT];
extern const char *const pass_names[PASS_COUNT];

/* The passes `plan` and `compile` run, in order (manager.c). */
extern const pass_id pass_default_pipeline[];
extern const int pass_default_pipeline_len;

/* A named part of the default pipeline. */
typedef struct pass_list {
	const pass_id *ids;
	int n;
} pass_list;

/* partition, place, schedule: a plan of a fixed schedule (the tuner's baselines). */
extern const pass_list pass_plan_passes;
/* comm, verify, memplan: lowering, its proof and the memory plan. */
extern const pass_list pass_lower_passes;

/* The most passes a pipeline the manager spells holds. */
#define PASS_MAX_PIPELINE 16

/* Pass manager options (the LLVM-style dump and verify flags, and what
 * every pass's context carries). */
typedef struct pass_opts {
	bool verify_each;
	bool print_after_all;
	bool print_before[PASS_COUNT];
	bool print_after[PASS_COUNT];
	FILE *dump;                 /* where dumps go (stdout) */
	diag_sink *diag;            /* where diagnostics go (NULL: the default sink) */
	struct tune_budget *budget; /* the tuner's budget (NULL: its default) */
} pass_opts;

/* Run passes in order.  Returns 0, or -1 after a diagnostic. */
int pass_run(ir_module *m, const pass_id *ids, int n, const pass_opts *o);
int pass_run_one(ir_module *m, pass_id id, const pass_opts *o);

/* The default pipeline as m needs it, into ids (PASS_MAX_PIPELINE):
 * under schedule 'tuned' without the plan passes, whose stages, devices
 * and programs `tune` would replace.  Returns the count. */
int pass_pipeline_for(const ir_module *m, pass_id *ids);
/* Run pass_pipeline_for(m) on m. */
int pass_run_default(ir_module *m, const pass_opts *o);

/* The passes `compile` runs on an IR file, into ids (PASS_MAX_PIPELINE):
 * those of m's pipeline it still lacks (all of them without programs, from
 * comm on without communication, from verify on otherwise), after the cost
 * pass in every case, which keeps the times the text holds and makes the
 * stash sizes the target runtime's, so that memplan lays out (or verify
 * checks) what the executables allocate.  Returns the count. */
int pass_lacking(const ir_module *m, pass_id *ids);

/* Every layer of m has its costs. */
bool pass_costed(const ir_module *m);

/* Parse "a,b,c" into ids; diagnoses an unknown name (with a suggestion) at
 * `at` (the flag that gave the list) and returns -1, else the count. */
int pass_parse_list(const char *list, pass_id *ids, int max, ir_loc at);
int pass_lookup(const char *name);

/* The passes themselves (one file each; verify's is prove.c). */
int pass_cost(ir_module *m, pass_ctx *cx);
int pass_partition(ir_module *m, pass_ctx *cx);
int pass_place(ir_module *m, pass_ctx *cx);
int pass_schedule(ir_module *m, pass_ctx *cx);
int pass_tune(ir_module *m, pass_ctx *cx);
int pass_comm(ir_module *m, pass_ctx *cx);
/* comm with its data-parallel choices fixed instead of simulated (tests):
 * rank order o (not auto), every device's reductions late (after its last
 * point-to-point op) or early (as each stage closes). */
int pass_comm_fixed(ir_module *m, pass_ctx *cx, ir_rank_order o, bool late);
int pass_verify(ir_module *m, pass_ctx *cx);
int pass_memplan(ir_module *m, pass_ctx *cx);

/* The checks `partition` and `place` make of the plan options (a given
 * partition that covers the layers, a stage count the layers allow, a
 * placement of as many devices as stages), without building anything:
 * what `tune` checks in their stead. */
int pass_check_plan(const ir_module *m, pass_ctx *cx);
/* place's part of it, for a plan of nstages stages (place.c). */
int pass_check_placement(const ir_module *m, pass_ctx *cx, int nstages);

/* What m's stages are, for the plan's printout: the plan's partition when
 * the partition pass cut them; under the tuner "uniform" when they are
 * the uniform cut, else "tuned" (its own cut; partition.c). */
const char *pass_partition_label(const ir_module *m);

#endif
