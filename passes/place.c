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

int pass_check_placement(const ir_module *m, pass_ctx *cx, int nstages)
{
	const ir_plan_opts *p = &m->plan;
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (p->nplacement && p->nplacement != nstages) {
		diag_sink_error(cx->diag, where, "placement lists %d devices for %d stages", p->nplacement, nstages);
		return -1;
	}
	int64_t P = ir_pipe_devices(m);
	if (p->schedule == IR_SCHED_ZBV && !p->nplacement && nstages != 2 * P) {
		diag_sink_error(cx->diag, where, "place: schedule zbv puts 2 stages on each of the %lld devices (a V), but the plan has %d stages",
		                (long long)P, nstages);
		return -1;
	}
	for (int s = 0; s < p->nplacement; s++)
		if (p->placement[s] < 0 || p->placement[s] >= P) {
			diag_sink_error(cx->diag, where, "placement puts stage %d on device %lld; the cluster has %lld devices",
			                s, (long long)p->placement[s], (long long)P);
			return -1;
		}
	return 0;
}

int pass_place(ir_module *m, pass_ctx *cx)
{
	const ir_plan_opts *p = &m->plan;
	if (!m->nstages) {
		diag_sink_error(cx->diag, ir_loc_or(m->plan_loc, m->loc), "place: the module has no stages; run 'partition' first");
		return -1;
	}
	if (pass_check_placement(m, cx, m->nstages))
		return -1;
	int64_t P = ir_pipe_devices(m);
	bool v = p->schedule == IR_SCHED_ZBV && !p->nplacement;
	ir_clear_devices(m);
	for (int s = 0; s < m->nstages; s++)
		m->stages[s].device = (int)(p->nplacement ? p->placement[s] : v && s >= P ? 2 * P - 1 - s : s % P);
	return 0;
}
