/* partition.c: the `partition` pass.
 *
 * Reads the layers and plan options (partition, given, chunks) and the
 * device count; writes the stage list (contiguous, in order, unplaced) and
 * drops any earlier placement or programs.  Guarantees: every layer in
 * exactly one stage, stages in layer order, none empty.
 *
 * uniform: devices x chunks stages of equal layer counts, counting only
 * the layers between the embedding and the head; the embedding joins the
 * first stage and the head the last, as Megatron-LM does.  When the count
 * does not divide, the stages after the first take one extra layer each
 * (the first already carries the embedding).  With fewer body layers than
 * stages, every layer counts, embedding and head included.
 * given: the layer counts of plan.given, in order. */
#include "pass.h"

int pass_partition(ir_module *m)
{
	const ir_plan_opts *p = &m->plan;
	ir_clear_devices(m);
	ir_clear_stages(m);
	if (p->partition == IR_PART_GIVEN) {
		int first = 0;
		for (int s = 0; s < p->ngiven; s++) {
			int last = first + (int)p->given[s] - 1;
			if (p->given[s] < 1 || last >= m->nlayers) {
				diag_error(ir_loc_or(m->plan_loc, m->loc), "given partition: stage %d (%lld layers) runs past the %d layers of the model",
				           s, (long long)p->given[s], m->nlayers);
				return -1;
			}
			ir_add_stage(m, first, last, -1, (ir_loc){0});
			first = last + 1;
		}
		if (first != m->nlayers) {
			diag_error(ir_loc_or(m->plan_loc, m->loc), "given partition covers %d of the %d layers", first, m->nlayers);
			return -1;
		}
		return 0;
	}

	int64_t nstages = m->cluster.devices * p->chunks;
	if (nstages > m->nlayers) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "cannot cut %d layers into %lld stages (%lld devices x %lld chunks)",
		           m->nlayers, (long long)nstages, (long long)m->cluster.devices,
		           (long long)p->chunks);
		return -1;
	}
	int S = (int)nstages;
	int body = m->nlayers - 2, skip = 1;
	if (body < S) /* too few: count every layer */
		body = m->nlayers, skip = 0;
	int base = body / S, extra = body % S, first = 0;
	for (int s = 0; s < S; s++) {
		int n = base + (s >= 1 && s <= extra);
		if (S == 1)
			n = body;
		if (skip && s == 0)
			n += 1; /* the embedding */
		if (skip && s == S - 1)
			n += 1; /* the head */
		ir_add_stage(m, first, first + n - 1, -1, (ir_loc){0});
		first += n;
	}
	ir_assert(first == m->nlayers);
	return 0;
}
