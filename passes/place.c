/* place.c: the `place` pass.
 *
 * Reads the stages, plan.placement and plan.schedule; writes every stage's
 * device and drops any earlier programs.  Guarantees every stage a device
 * of the cluster.
 *
 * Given: plan.placement, one device per stage.  Otherwise sequential:
 * stage s on device s mod p (one stage per device when there are as many
 * stages as devices; round-robin chunks, as Megatron-LM interleaves, when
 * more), except for zbv, whose 2p stages go down and back up in a V: stage
 * k < p on device k, stage k >= p on device 2p-1-k, so that the first and
 * the last stage share device 0 and the turn of the V stays on device p-1. */
#include "pass.h"

int pass_place(ir_module *m)
{
	const ir_plan_opts *p = &m->plan;
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (!m->nstages) {
		diag_error(where, "place: the module has no stages; run 'partition' first");
		return -1;
	}
	if (p->nplacement && p->nplacement != m->nstages) {
		diag_error(where, "placement lists %d devices for %d stages", p->nplacement, m->nstages);
		return -1;
	}
	int64_t P = m->cluster.devices;
	bool v = p->schedule == IR_SCHED_ZBV && !p->nplacement;
	if (v && m->nstages != 2 * P) {
		diag_error(where, "place: schedule zbv puts 2 stages on each of the %lld devices (a V), but the plan has %d stages",
		           (long long)P, m->nstages);
		return -1;
	}
	ir_clear_devices(m);
	for (int s = 0; s < m->nstages; s++) {
		int64_t d = p->nplacement ? p->placement[s] : v && s >= P ? 2 * P - 1 - s : s % P;
		if (d < 0 || d >= P) {
			diag_error(where, "placement puts stage %d on device %lld; the cluster has %lld devices",
			           s, (long long)d, (long long)P);
			return -1;
		}
		m->stages[s].device = (int)d;
	}
	return 0;
}
