/* manager.c: the pass registry, the default pipeline and its parts (the
 * one place a pass order is written), and the pass manager (each pass's
 * context and scratch arena, dump banners, --verify-each). */
#include "pass.h"

#include <string.h>

const pass_info pass_table[PASS_COUNT] = {
#define X(n, s) {#n, s, pass_##n},
	PASS_LIST(X)
#undef X
};

const char *const pass_names[PASS_COUNT] = {
#define X(n, s) #n,
	PASS_LIST(X)
#undef X
};

/* The default pipeline, written out in one place, and its named parts:
 * what a plan of a fixed schedule runs, and what lowers it. */
#define PLAN_PASSES PASS_partition, PASS_place, PASS_schedule
#define LOWER_PASSES PASS_comm, PASS_verify, PASS_memplan

const pass_id pass_default_pipeline[] = {
	PASS_cost,
	PLAN_PASSES,
	PASS_tune,
	LOWER_PASSES,
};
const int pass_default_pipeline_len =
    (int)(sizeof pass_default_pipeline / sizeof *pass_default_pipeline);
/* pass_lacking may put cost in front of all of it. */
_Static_assert(sizeof pass_default_pipeline / sizeof *pass_default_pipeline < PASS_MAX_PIPELINE,
               "PASS_MAX_PIPELINE holds the default pipeline and one more");

static const pass_id plan_passes[] = {PLAN_PASSES};
static const pass_id lower_passes[] = {LOWER_PASSES};
const pass_list pass_plan_passes = {plan_passes, (int)(sizeof plan_passes / sizeof *plan_passes)};
const pass_list pass_lower_passes = {lower_passes, (int)(sizeof lower_passes / sizeof *lower_passes)};

static bool in_plan_passes(pass_id id)
{
	for (int i = 0; i < pass_plan_passes.n; i++)
		if (pass_plan_passes.ids[i] == id)
			return true;
	return false;
}

int pass_pipeline_for(const ir_module *m, pass_id *ids)
{
	/* `tune` makes the stages, devices and programs from the plan
	 * options (checking them as partition and place would), so the
	 * uniform plan the plan passes would build first is skipped. */
	bool tuned = m->plan.schedule == IR_SCHED_TUNED;
	int n = 0;
	for (int i = 0; i < pass_default_pipeline_len; i++)
		if (!(tuned && in_plan_passes(pass_default_pipeline[i])))
			ids[n++] = pass_default_pipeline[i];
	return n;
}

int pass_run_default(ir_module *m, const pass_opts *o)
{
	pass_id ids[PASS_MAX_PIPELINE];
	int n = pass_pipeline_for(m, ids);
	return pass_run(m, ids, n, o);
}

bool pass_costed(const ir_module *m)
{
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known)
			return false;
	return true;
}

int pass_lacking(const ir_module *m, pass_id *ids)
{
	pass_id all[PASS_MAX_PIPELINE];
	int nall = pass_pipeline_for(m, all), k = 0, n = 0;
	if (m->ndevices) {
		pass_id from = !ir_lowered(m) ? PASS_comm : PASS_verify;
		while (k < nall && all[k] != from)
			k++;
		ids[n++] = PASS_cost; /* always: the target's stash sizes (docs/cost-model.md) */
	}
	for (; k < nall; k++)
		ids[n++] = all[k];
	return n;
}

int pass_lookup(const char *name)
{
	return ir_lookup(pass_names, PASS_COUNT, name);
}

int pass_parse_list(const char *list, pass_id *ids, int max, ir_loc at)
{
	int n = 0;
	const char *p = list;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char name[64];
		if (len == 0 || len >= sizeof name) {
			diag_error(at, "bad pass list '%s': expected names separated by commas", list);
			return -1;
		}
		memcpy(name, p, len);
		name[len] = 0;
		int id = pass_lookup(name);
		if (id < 0) {
			const char *near = diag_nearest(name, pass_names, PASS_COUNT);
			if (near)
				diag_error(at, "unknown pass '%s'; did you mean '%s'?", name, near);
			else
				diag_error(at, "unknown pass '%s' (see --print-pipeline for the passes)", name);
			return -1;
		}
		if (n == max) {
			diag_error(at, "too many passes in '%s'", list);
			return -1;
		}
		ids[n++] = (pass_id)id;
		if (!comma)
			return n;
		p = comma + 1;
	}
}

static void dump(const pass_opts *o, const char *when, const char *name, const ir_module *m)
{
	FILE *out = o->dump ? o->dump : stdout;
	fprintf(out, "; *** IR Dump %s %s ***\n", when, name);
	ir_print(out, m);
}

int pass_run(ir_module *m, const pass_id *ids, int n, const pass_opts *o)
{
	static const pass_opts none;
	if (!o)
		o = &none;
	for (int i = 0; i < n; i++) {
		const pass_info *p = &pass_table[ids[i]];
		if (o->print_before[ids[i]])
			dump(o, "Before", p->name, m);
		/* The pass's scratch memory lives as long as the pass. */
		pass_ctx cx = {o->diag ? o->diag : &diag_default, arena_new(), o->budget};
		int rc = p->run(m, &cx);
		arena_free(cx.scratch);
		if (rc != 0)
			return -1;
		if (o->print_after_all || o->print_after[ids[i]])
			dump(o, "After", p->name, m);
		if (o->verify_each && ir_verify(m) != 0) {
			/* A pass that leaves invalid IR is a bug in the pass. */
			fprintf(stderr, "octopipe: internal error: the IR after pass '%s' does not verify\n",
			        p->name);
			return -1;
		}
	}
	return 0;
}

int pass_run_one(ir_module *m, pass_id id, const pass_opts *o)
{
	return pass_run(m, &id, 1, o);
}
