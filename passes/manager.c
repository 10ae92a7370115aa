/* manager.c: the pass registry, the default pipeline and the pass manager
 * (dump banners, --verify-each). */
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

/* The default pipeline, written out in one place. */
const pass_id pass_default_pipeline[] = {
	PASS_cost,
	PASS_partition,
	PASS_place,
	PASS_schedule,
	PASS_tune,
	PASS_comm,
	PASS_verify,
	PASS_memplan,
};
const int pass_default_pipeline_len =
    (int)(sizeof pass_default_pipeline / sizeof *pass_default_pipeline);

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
		if (p->run(m) != 0)
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
