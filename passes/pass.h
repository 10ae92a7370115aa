/* pass.h: the pass registry and the pass manager.
 *
 * A pass is a function from a module to the same module, transformed in
 * place; it returns 0, or -1 after a diagnostic (a user mistake such as a
 * partition that cannot be built).  The registry below is the one list of
 * passes; pass_default_pipeline is the one list of what `plan` runs. */
#ifndef OCTO_PASS_H
#define OCTO_PASS_H

#include "ir.h"

typedef int (*pass_fn)(ir_module *m);

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

/* The passes `plan` and `compile` run, in order. */
extern const pass_id pass_default_pipeline[];
extern const int pass_default_pipeline_len;

/* Pass manager options (the LLVM-style dump and verify flags). */
typedef struct pass_opts {
	bool verify_each;
	bool print_after_all;
	bool print_before[PASS_COUNT];
	bool print_after[PASS_COUNT];
	FILE *dump; /* where dumps go (stdout) */
} pass_opts;

/* Run passes in order.  Returns 0, or -1 after a diagnostic. */
int pass_run(ir_module *m, const pass_id *ids, int n, const pass_opts *o);

/* Parse "a,b,c" into ids; diagnoses an unknown name (with a suggestion) at
 * `at` (the flag that gave the list) and returns -1, else the count. */
int pass_parse_list(const char *list, pass_id *ids, int max, ir_loc at);
int pass_lookup(const char *name);

/* The passes themselves (one file each). */
int pass_cost(ir_module *m);
int pass_partition(ir_module *m);
int pass_place(ir_module *m);
int pass_schedule(ir_module *m);
int pass_tune(ir_module *m);
int pass_comm(ir_module *m);
int pass_verify(ir_module *m);
int pass_memplan(ir_module *m);

/* What m's stages are, for the plan's printout: the plan's partition when
 * the partition pass cut them; under the tuner "uniform" when they are
 * the uniform cut, else "tuned" (its own cut; partition.c). */
const char *pass_partition_label(const ir_module *m);

#endif
