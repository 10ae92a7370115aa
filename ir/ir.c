/* ir.c: the name tables generated from the X-macros, module construction
 * and field-for-field equality. */
#include "ir.h"

#include <string.h>

const char *const ir_layer_kind_names[] = {
#define X(e, s, c) s,
	IR_LAYER_KINDS(X)
#undef X
};
const char ir_layer_kind_chars[] = {
#define X(e, s, c) c,
	IR_LAYER_KINDS(X)
#undef X
};
const char *const ir_dtype_names[] = {
#define X(e, s, n) s,
	IR_DTYPES(X)
#undef X
};
const int ir_dtype_bytes[] = {
#define X(e, s, n) n,
	IR_DTYPES(X)
#undef X
};
#define NAME(e, s) s,
const char *const ir_act_names[] = {IR_ACTS(NAME)};
const char *const ir_optimizer_names[] = {IR_OPTIMIZERS(NAME)};
const char *const ir_data_names[] = {IR_DATAS(NAME)};
const char *const ir_partition_names[] = {IR_PARTITIONS(NAME)};
#define SCHED_NAME(e, s, split) s,
#define SCHED_SPLIT(e, s, split) split,
const char *const ir_schedule_names[] = {IR_SCHEDULES(SCHED_NAME)};
const bool ir_schedule_splits_backward[] = {IR_SCHEDULES(SCHED_SPLIT)};
#undef SCHED_NAME
#undef SCHED_SPLIT
const char *const ir_op_names[] = {IR_OPS(NAME)};
const char *const ir_comm_names[] = {IR_COMMS(NAME)};
const char *const ir_value_names[] = {"act", "grad", "wgrad"};
const char *const ir_backend_names[] = {IR_BACKENDS(NAME)};
#undef NAME

const ir_attr_info ir_attr_table[] = {
#define X(e, s, k, t, lo, hi) {s, k, t, lo, hi},
	IR_ATTRS(X)
#undef X
};

int ir_lookup(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

bool ir_attr_applies(ir_attr a, ir_layer_kind k, int64_t mamba_version)
{
	if (!(ir_attr_table[a].kinds & (1u << k)))
		return false;
	if (k != IR_LAYER_MAMBA)
		return true;
	switch (a) {
	case IR_ATTR_HEADS:
	case IR_ATTR_HEAD_DIM:
	case IR_ATTR_GROUPS:
		return mamba_version != 1;
	case IR_ATTR_DT_RANK:
		return mamba_version == 1;
	default:
		return true;
	}
}

bool ir_attr_required(ir_attr a, ir_layer_kind k, int64_t mamba_version)
{
	if (!ir_attr_applies(a, k, mamba_version))
		return false;
	/* Enum attributes have a valid value 0; everything else with a
	 * range that excludes 0 must be present. */
	if (ir_attr_table[a].type != IR_AT_INT)
		return false;
	if (k == IR_LAYER_MAMBA && (a == IR_ATTR_GROUPS || a == IR_ATTR_DT_RANK))
		return true;
	return ir_attr_table[a].min > 0;
}

ir_module *ir_new(void)
{
	arena *a = arena_new();
	ir_module *m = arena_alloc(a, sizeof *m);
	m->arena = a;
	m->plan.chunks = 1;
	return m;
}

void ir_free(ir_module *m)
{
	if (m)
		arena_free(m->arena);
}

ir_layer *ir_add_layer(ir_module *m, ir_layer_kind k, ir_loc loc)
{
	int cap = m->caplayers;
	ir_layer *l = VEC_PUSH(m->arena, m->layers, m->nlayers, m->caplayers);
	if (cap != m->caplayers)
		m->layer_loc = arena_grow(m->arena, m->layer_loc,
		                          (size_t)cap * sizeof *m->layer_loc,
		                          (size_t)m->caplayers * sizeof *m->layer_loc);
	memset(l, 0, sizeof *l);
	l->kind = k;
	m->layer_loc[m->nlayers - 1] = loc;
	return l;
}

ir_stage *ir_add_stage(ir_module *m, int first, int last, int device, ir_loc loc)
{
	int cap = m->capstages;
	ir_stage *s = VEC_PUSH(m->arena, m->stages, m->nstages, m->capstages);
	if (cap != m->capstages)
		m->stage_loc = arena_grow(m->arena, m->stage_loc,
		                          (size_t)cap * sizeof *m->stage_loc,
		                          (size_t)m->capstages * sizeof *m->stage_loc);
	s->first = first;
	s->last = last;
	s->device = device;
	m->stage_loc[m->nstages - 1] = loc;
	return s;
}

void ir_clear_stages(ir_module *m)
{
	m->nstages = 0;
}

void ir_alloc_devices(ir_module *m)
{
	int n = (int)m->cluster.devices;
	m->devices = arena_alloc(m->arena, (size_t)n * sizeof *m->devices);
	m->op_loc = arena_alloc(m->arena, (size_t)n * sizeof *m->op_loc);
	m->ndevices = n;
}

void ir_clear_devices(ir_module *m)
{
	m->proof.proven = false;
	m->devices = NULL;
	m->op_loc = NULL;
	m->ndevices = 0;
}

ir_op *ir_add_op(ir_module *m, int dev, ir_op_kind k, int stage, int mb, ir_loc loc)
{
	ir_op op = {.comm = IR_COMM_NONE, .kind = k, .stage = stage, .mb = mb};
	return ir_push_op(m, dev, &op, loc);
}

bool ir_lowered(const ir_module *m)
{
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			if (m->devices[d].ops[i].comm != IR_COMM_NONE)
				return true;
	return false;
}

ir_op *ir_push_op(ir_module *m, int dev, const ir_op *src, ir_loc loc)
{
	ir_assert(dev >= 0 && dev < m->ndevices);
	ir_device *d = &m->devices[dev];
	int cap = d->capops;
	ir_op *op = VEC_PUSH(m->arena, d->ops, d->nops, d->capops);
	if (cap != d->capops)
		m->op_loc[dev] = arena_grow(m->arena, m->op_loc[dev],
		                            (size_t)cap * sizeof **m->op_loc,
		                            (size_t)d->capops * sizeof **m->op_loc);
	*op = *src;
	m->op_loc[dev][d->nops - 1] = loc;
	return op;
}

int64_t ir_plan_chunks(const ir_plan_opts *p)
{
	if (p->schedule != IR_SCHED_ZBV)
		return p->chunks;
	return p->chunks == 1 || p->chunks == 2 ? 2 : 0;
}

static bool str_eq(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Doubles compare by bit pattern's value: the text form is exact. */
static bool cost_eq(const ir_cost *a, const ir_cost *b)
{
	if (a->known != b->known)
		return false;
	if (!a->known)
		return true;
	return a->f == b->f && a->b == b->b && a->w == b->w && a->flops == b->flops &&
	       a->act == b->act && a->wstash == b->wstash && a->params == b->params &&
	       a->resident == b->resident;
}

static bool i64s_eq(const int64_t *a, int na, const int64_t *b, int nb)
{
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

bool ir_equal(const ir_module *a, const ir_module *b)
{
	const ir_model_info *ma = &a->model, *mb = &b->model;
	if (!str_eq(ma->name, mb->name) || ma->hidden != mb->hidden ||
	    ma->vocab != mb->vocab || ma->seq != mb->seq || ma->dtype != mb->dtype)
		return false;
	const ir_train *ta = &a->train, *tb = &b->train;
	if (ta->mbs != tb->mbs || ta->microbatches != tb->microbatches ||
	    ta->steps != tb->steps || ta->optimizer != tb->optimizer ||
	    ta->lr != tb->lr || ta->weight_decay != tb->weight_decay ||
	    ta->seed != tb->seed || ta->data != tb->data ||
	    !str_eq(ta->text_file, tb->text_file))
		return false;
	const ir_cluster *ca = &a->cluster, *cb = &b->cluster;
	if (!str_eq(ca->name, cb->name) || ca->devices != cb->devices ||
	    ca->per_node != cb->per_node || ca->mem != cb->mem ||
	    ca->flops != cb->flops || ca->membw != cb->membw ||
	    ca->intra.bw != cb->intra.bw || ca->intra.lat != cb->intra.lat ||
	    ca->inter.bw != cb->inter.bw || ca->inter.lat != cb->inter.lat)
		return false;
	const ir_plan_opts *pa = &a->plan, *pb = &b->plan;
	if (pa->schedule != pb->schedule || pa->chunks != pb->chunks || pa->backend != pb->backend ||
	    pa->partition != pb->partition ||
	    !i64s_eq(pa->given, pa->ngiven, pb->given, pb->ngiven) ||
	    !i64s_eq(pa->placement, pa->nplacement, pb->placement, pb->nplacement))
		return false;
	if (a->nlayers != b->nlayers || a->nstages != b->nstages ||
	    a->ndevices != b->ndevices)
		return false;
	if (a->proof.proven != b->proof.proven ||
	    (a->proof.proven && (a->proof.backend != b->proof.backend ||
	                         a->proof.steps != b->proof.steps || a->proof.order != b->proof.order)))
		return false;
	for (int i = 0; i < a->nlayers; i++) {
		const ir_layer *la = &a->layers[i], *lb = &b->layers[i];
		if (la->kind != lb->kind ||
		    memcmp(la->attr, lb->attr, sizeof la->attr) != 0 ||
		    !cost_eq(&la->cost, &lb->cost))
			return false;
	}
	for (int i = 0; i < a->nstages; i++) {
		const ir_stage *sa = &a->stages[i], *sb = &b->stages[i];
		if (sa->first != sb->first || sa->last != sb->last ||
		    sa->device != sb->device)
			return false;
	}
	for (int d = 0; d < a->ndevices; d++) {
		const ir_device *da = &a->devices[d], *db = &b->devices[d];
		if (da->nops != db->nops)
			return false;
		for (int i = 0; i < da->nops; i++) {
			const ir_op *x = &da->ops[i], *y = &db->ops[i];
			if (x->comm != y->comm || x->kind != y->kind || x->stage != y->stage ||
			    x->mb != y->mb || x->peer != y->peer || x->group != y->group ||
			    x->bytes != y->bytes)
				return false;
		}
	}
	return true;
}
