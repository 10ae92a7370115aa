/* copy.c: copies of a module's parts (copy.h). */
#include "copy.h"

ir_module *ir_copy_header(const ir_module *m)
{
	ir_module *c = ir_new();
	c->model = m->model;
	c->train = m->train;
	c->cluster = m->cluster;
	c->plan = m->plan;
	c->loc = m->loc;
	c->model_loc = m->model_loc;
	c->train_loc = m->train_loc;
	c->cluster_loc = m->cluster_loc;
	c->plan_loc = m->plan_loc;
	c->microbatches_loc = m->microbatches_loc;
	c->chunks_loc = m->chunks_loc;
	c->dtype_loc = m->dtype_loc;
	c->dp_loc = m->dp_loc;
	c->cluster_at = m->cluster_at;
	c->dp_auto = m->dp_auto;
	c->recompute_auto = m->recompute_auto;
	c->dist_opt_auto = m->dist_opt_auto;
	for (int l = 0; l < m->nlayers; l++)
		*ir_add_layer(c, m->layers[l].kind, m->layer_loc ? m->layer_loc[l] : (ir_loc){0}) =
		    m->layers[l];
	return c;
}

void ir_copy_plan(ir_module *dst, const ir_module *src, bool compute_only)
{
	ir_assert(dst->nlayers == src->nlayers && dst->cluster.devices == src->cluster.devices);
	ir_clear_stages(dst);
	for (int s = 0; s < src->nstages; s++)
		ir_add_stage(dst, src->stages[s].first, src->stages[s].last, src->stages[s].device,
		             (ir_loc){0})->recompute = src->stages[s].recompute;
	ir_clear_devices(dst);
	if (!src->ndevices)
		return;
	ir_alloc_devices(dst);
	for (int d = 0; d < src->ndevices; d++)
		for (int i = 0; i < src->devices[d].nops; i++) {
			const ir_op *op = &src->devices[d].ops[i];
			if (!compute_only || op->comm == IR_COMM_NONE)
				ir_push_op(dst, d, op, (ir_loc){0});
		}
}
