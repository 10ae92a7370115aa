/* schedule.c: the `schedule` pass.
 *
 * Reads the placed stages, the micro-batch count and plan.schedule; writes
 * one program per device: the order of F, B and W of every (stage,
 * micro-batch) that device runs.  Guarantees what ir_verify checks (one F,
 * B, W each, in that order, on the stage's device) and that the order
 * respects the pipeline's data flow, so that the programs can run.
 *
 * 1f1b (PipeDream-flush, Megatron-LM's default): the stage at pipeline
 * position s of S runs min(S-1-s, M) warm-up forwards, then alternates one
 * forward with one backward, then drains the remaining backwards; W
 * follows its B at once (the backward is not split).  It needs one stage
 * per device. */
#include "pass.h"

static void emit_fbw(ir_module *m, int dev, ir_op_kind k, int s, int mb)
{
	ir_add_op(m, dev, k, s, mb, (ir_loc){0});
	if (k == IR_OP_B)
		ir_add_op(m, dev, IR_OP_W, s, mb, (ir_loc){0});
}

static int schedule_1f1b(ir_module *m)
{
	int S = m->nstages, M = (int)m->train.microbatches;
	int *owner = arena_alloc(m->arena, (size_t)m->cluster.devices * sizeof *owner);
	for (int d = 0; d < m->cluster.devices; d++)
		owner[d] = -1;
	for (int s = 0; s < S; s++) {
		int d = m->stages[s].device;
		if (owner[d] >= 0) {
			diag_error(ir_loc_or(m->plan_loc, m->loc), "schedule 1f1b runs one stage per device, but D%d holds S%d and S%d",
			           d, owner[d], s);
			return -1;
		}
		owner[d] = s;
	}
	ir_alloc_devices(m);
	for (int s = 0; s < S; s++) {
		int d = m->stages[s].device;
		int warm = S - 1 - s < M ? S - 1 - s : M;
		for (int i = 0; i < warm; i++)
			emit_fbw(m, d, IR_OP_F, s, i);
		for (int i = 0; i < M - warm; i++) {
			emit_fbw(m, d, IR_OP_F, s, warm + i);
			emit_fbw(m, d, IR_OP_B, s, i);
		}
		for (int i = M - warm; i < M; i++)
			emit_fbw(m, d, IR_OP_B, s, i);
	}
	return 0;
}

int pass_schedule(ir_module *m)
{
	if (!m->nstages) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "schedule: the module has no stages; run 'partition' and 'place' first");
		return -1;
	}
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].device < 0) {
			diag_error(ir_loc_or(m->plan_loc, m->loc), "schedule: stage S%d has no device; run 'place' first", s);
			return -1;
		}
	ir_clear_devices(m);
	switch (m->plan.schedule) {
	case IR_SCHED_1F1B:
		return schedule_1f1b(m);
	default:
		break;
	}
	if ((unsigned)m->plan.schedule >= IR_NSCHEDULES)
		ir_bug("unknown schedule %d", (int)m->plan.schedule);
	diag_error(ir_loc_or(m->plan_loc, m->loc), "schedule '%s' is not built yet",
	           ir_schedule_names[m->plan.schedule]);
	return -1;
}
