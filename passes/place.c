/* place.c: the `place` pass.
 *
 * Reads the stages and plan.placement; writes every stage's device and
 * drops any earlier programs.  Sequential by default: stage s on device
 * s mod devices (one stage per device when there are as many stages as
 * devices; round-robin chunks, as Megatron-LM interleaves, when more).
 * Guarantees every stage a device of the cluster. */
#include "pass.h"

int pass_place(ir_module *m)
{
	const ir_plan_opts *p = &m->plan;
	if (!m->nstages) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "place: the module has no stages; run 'partition' first");
		return -1;
	}
	if (p->nplacement && p->nplacement != m->nstages) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "placement lists %d devices for %d stages", p->nplacement,
		           m->nstages);
		return -1;
	}
	ir_clear_devices(m);
	for (int s = 0; s < m->nstages; s++) {
		int64_t d = p->nplacement ? p->placement[s] : s % m->cluster.devices;
		if (d < 0 || d >= m->cluster.devices) {
			diag_error(ir_loc_or(m->plan_loc, m->loc), "placement puts stage %d on device %lld; the cluster has %lld devices",
			           s, (long long)d, (long long)m->cluster.devices);
			return -1;
		}
		m->stages[s].device = (int)d;
	}
	return 0;
}
