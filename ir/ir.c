/* ir.c: the name tables generated from the X-macros, module construction,
 * the buffers a program needs (the liveness the memory plan and the
 * verifier share) and field-for-field equality. */
#include "ir.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
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
const char *const ir_rope_scaling_names[] = {IR_ROPE_SCALINGS(NAME)};
const char *const ir_optimizer_names[] = {IR_OPTIMIZERS(NAME)};
const char *const ir_decay_names[] = {IR_DECAYS(NAME)};
const char *const ir_data_names[] = {IR_DATAS(NAME)};
const char *const ir_token_format_names[] = {IR_TOKEN_FORMATS(NAME)};
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
const char *const ir_rank_order_names[] = {IR_RANK_ORDERS(NAME)};
const char *const ir_switch_names[2] = {"off", "on"};
const char *const ir_buf_names[] = {IR_BUFS(NAME)};
const char *const ir_recompute_names[] = {IR_RECOMPUTES(NAME)};
const char *const ir_cost_field_names[] = {IR_COST_FIELDS(NAME)};
#undef NAME

const ir_attr_info ir_attr_table[] = {
#define X(e, s, k, t, lo, hi) {s, k, t, lo, hi},
	IR_ATTRS(X)
#undef X
};

/* The header lines' tables (ir.h) laid out as data.  A row's type names
 * the HF_ macro that fills in what the type needs; HF_STRUCT is the line's
 * struct while its rows expand (a new line: a block below and its row in
 * IR_HLINES). */
#define HF_NAME .type = IR_HF_NAME
#define HF_INT(l, h) .type = IR_HF_INT, .lo = (l), .hi = (h)
#define HF_U64 .type = IR_HF_U64
#define HF_ENUM(n) .type = IR_HF_ENUM, .names = (n), .nnames = (int)(sizeof(n) / sizeof *(n))
#define HF_F64 .type = IR_HF_F64
#define HF_US .type = IR_HF_US
#define HF_BYTES .type = IR_HF_BYTES
#define HF_RATE .type = IR_HF_RATE
#define HF_STR .type = IR_HF_STR
#define HF_LINK .type = IR_HF_LINK
#define HF_LIST(n, l, h) .type = IR_HF_LIST, .count = offsetof(HF_STRUCT, n), .lo = (l), .hi = (h)
/* 0 in the `at` column is "not kept": offset 0 is the module's arena. */
#define IR_HF_AT(m) offsetof(ir_module, m)
_Static_assert(offsetof(ir_module, arena) == 0, "IR_HF_AT's 0 must name no ir_loc");
#define HF_ROW(k, m, t, g, a)                                                  \
	{.key = k, .off = offsetof(HF_STRUCT, m), .size = sizeof(((HF_STRUCT *)0)->m), HF_##t,  \
	 .group = g, .at = a},

#define HF_STRUCT ir_model_info
static const ir_hfield model_fields[] = {IR_MODEL_FIELDS(HF_ROW)};
#undef HF_STRUCT
#define HF_STRUCT ir_train
static const ir_hfield train_fields[] = {IR_TRAIN_FIELDS(HF_ROW)};
#undef HF_STRUCT
#define HF_STRUCT ir_cluster
static const ir_hfield cluster_fields[] = {IR_CLUSTER_FIELDS(HF_ROW)};
#undef HF_STRUCT
#define HF_STRUCT ir_plan_opts
static const ir_hfield plan_fields[] = {IR_PLAN_FIELDS(HF_ROW)};
#undef HF_STRUCT

const ir_hline ir_hlines[] = {
#define X(e, kw, m)                                                            \
	{kw, offsetof(ir_module, m), offsetof(ir_module, m##_loc), m##_fields,     \
	 (int)(sizeof m##_fields / sizeof *m##_fields)},
	IR_HLINES(X)
#undef X
};

int64_t ir_rank_of(const ir_module *m, int64_t replica, int64_t p)
{
	int64_t D = ir_dp(m), P = ir_pipe_devices(m);
	return m->plan.rank_order == IR_RANKS_DP_INNER ? p * D + replica : replica * P + p;
}

static void *xmalloc(size_t n);

void ir_coll_waits(const ir_device *dev, int *of)
{
	int *open = xmalloc(((size_t)dev->nops + 1) * sizeof *open), nopen = 0;
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		of[i] = -1;
		if (ir_is_coll(op) || op->comm == IR_COMM_TIE)
			open[nopen++] = i;
		else if (op->comm == IR_COMM_WAIT && op->coll != IR_COMM_NONE && !op->carried)
			for (int j = nopen - 1; j >= 0; j--) {
				const ir_op *c = &dev->ops[open[j]];
				if (c->comm == op->coll && c->stage == op->stage && c->mb == op->mb) {
					of[i] = open[j];
					open[j] = open[--nopen];
					break;
				}
			}
	}
	/* A carried wait takes the first post after it that is still open:
	 * the previous step's post of the same collective. */
	for (int i = 0; i < dev->nops; i++) {
		const ir_op *op = &dev->ops[i];
		if (op->comm != IR_COMM_WAIT || !op->carried)
			continue;
		int best = -1;
		for (int j = 0; j < nopen; j++) {
			const ir_op *c = &dev->ops[open[j]];
			if (open[j] > i && c->comm == op->coll && c->stage == op->stage && c->mb == op->mb &&
			    (best < 0 || open[j] < open[best]))
				best = j;
		}
		if (best >= 0) {
			of[i] = open[best];
			open[best] = open[--nopen];
		}
	}
	free(open);
}

uint64_t ir_tie_bytes(const ir_module *m)
{
	uint64_t esz = m->plan.deterministic ? IR_EXACT_VALUE_BYTES : 4;
	return ir_sat_mul(ir_sat_mul((uint64_t)m->model.vocab, (uint64_t)m->model.hidden), esz);
}

int ir_tie_device(const ir_module *m, int which)
{
	int l = which ? m->nlayers - 1 : 0;
	for (int s = 0; s < m->nstages; s++)
		if (m->stages[s].first <= l && l <= m->stages[s].last)
			return m->stages[s].device;
	return -1;
}

bool ir_tie_apart(const ir_module *m)
{
	int a = ir_tie_device(m, 0), b = ir_tie_device(m, 1);
	return m->model.tie && a >= 0 && b >= 0 && a != b;
}

uint64_t ir_coll_bytes(const ir_module *m, ir_comm c, uint64_t n)
{
	uint64_t D = (uint64_t)ir_dp(m), esz = m->plan.deterministic ? IR_EXACT_VALUE_BYTES : 4;
	uint64_t padded = ir_sat_mul((n + D - 1) / D, D);
	switch (c) {
	case IR_COMM_ALLREDUCE: return ir_sat_mul(n, esz);
	case IR_COMM_REDUCESCATTER: return ir_sat_mul(padded, esz);
	case IR_COMM_ALLGATHER: return ir_sat_mul(padded, 4);
	default: ir_bug("ir_coll_bytes: %s is not a collective", ir_comm_names[c]);
	}
}

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
		return true; /* a parallel layer's mixer is version 2: its own names */
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
	if (k == IR_LAYER_PARALLEL && a == IR_ATTR_GROUPS)
		return true;
	return ir_attr_table[a].min > 0;
}

int ir_parallel_attr(ir_layer_kind part, ir_attr a)
{
	if (part == IR_LAYER_MAMBA) {
		if (a == IR_ATTR_HEADS)
			return IR_ATTR_SSM_HEADS;
		if (a == IR_ATTR_HEAD_DIM)
			return IR_ATTR_SSM_HEAD_DIM;
		if (a == IR_ATTR_DT_RANK)
			return -1;
	}
	if (a == IR_ATTR_HEADS || a == IR_ATTR_HEAD_DIM)
		return part == IR_LAYER_ATTENTION ? (int)a : -1;
	return ir_attr_applies(a, part, 2) && ir_attr_applies(a, IR_LAYER_PARALLEL, 2) ? (int)a : -1;
}

void ir_parallel_part(const ir_layer *l, ir_layer_kind part, ir_layer *out)
{
	ir_assert(l->kind == IR_LAYER_PARALLEL);
	memset(out, 0, sizeof *out);
	out->kind = part;
	for (int a = 0; a < IR_NATTRS; a++) {
		int pa = ir_parallel_attr(part, a);
		if (pa >= 0)
			out->attr[a] = l->attr[pa];
	}
}

const char *const *ir_attr_enum_names(ir_attr a, int *n)
{
	switch (a) {
	case IR_ATTR_ROPE_SCALING:
		*n = IR_NROPE_SCALINGS;
		return ir_rope_scaling_names;
	default:
		ir_bug("attribute %s is not an enum", ir_attr_table[a].name);
	}
}

double ir_attr_real_default(ir_attr a)
{
	switch (a) {
	case IR_ATTR_ROPE_THETA: return IR_ROPE_THETA;
	case IR_ATTR_ROPE_BETA_FAST: return 32; /* YaRN's defaults (docs/layers.md) */
	case IR_ATTR_ROPE_BETA_SLOW: return 1;
	default: return 0;
	}
}

ir_use ir_rope_field_use(ir_rope_scaling t, ir_attr a)
{
	enum { N = IR_USE_NO, O = IR_USE_OPTIONAL, R = IR_USE_REQUIRED };
	/* One row per type, one column per field in the attributes' order:
	 * factor, low_freq_factor, high_freq_factor,
	 * original_max_position_embeddings, beta_fast, beta_slow,
	 * attention_factor, mscale, mscale_all_dim. */
	static const unsigned char use[IR_NROPE_SCALINGS][9] = {
		[IR_ROPE_NONE] = {N, N, N, N, N, N, N, N, N},
		[IR_ROPE_LINEAR] = {R, N, N, N, N, N, N, N, N},
		[IR_ROPE_LLAMA3] = {R, R, R, R, N, N, N, N, N},
		[IR_ROPE_YARN] = {R, N, N, R, O, O, O, O, O},
	};
	_Static_assert(IR_ATTR_ROPE_MSCALE_ALL_DIM - IR_ATTR_ROPE_FACTOR + 1 == 9,
	               "one column per rope_scaling field");
	ir_assert(ir_attr_is_rope_field(a) && (unsigned)t < IR_NROPE_SCALINGS);
	return (ir_use)use[t][a - IR_ATTR_ROPE_FACTOR];
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
	s->recompute = m->plan.recompute;
	m->stage_loc[m->nstages - 1] = loc;
	return s;
}

void ir_clear_stages(ir_module *m)
{
	m->nstages = 0;
}

void ir_alloc_devices(ir_module *m)
{
	int n = (int)ir_pipe_devices(m);
	m->devices = arena_alloc(m->arena, (size_t)n * sizeof *m->devices);
	m->op_loc = arena_alloc(m->arena, (size_t)n * sizeof *m->op_loc);
	m->ndevices = n;
	m->memplan = NULL; /* it was a plan of the old programs */
}

void ir_clear_devices(ir_module *m)
{
	m->proof.proven = false;
	m->memplan = NULL;
	m->devices = NULL;
	m->op_loc = NULL;
	m->ndevices = 0;
}

ir_op *ir_add_op(ir_module *m, int dev, ir_op_kind k, int stage, int mb, ir_loc loc)
{
	ir_op op = {.comm = IR_COMM_NONE, .kind = k, .stage = stage, .mb = mb};
	return ir_push_op(m, dev, &op, loc);
}

/* A transfer as the tag matching sorts it: the value (the runtime's tag),
 * then program order. */
typedef struct xfer_key {
	int stage, mb, kind, pos;
} xfer_key;

static int cmp_tag(const xfer_key *a, const xfer_key *b)
{
	if (a->stage != b->stage)
		return a->stage < b->stage ? -1 : 1;
	if (a->mb != b->mb)
		return a->mb < b->mb ? -1 : 1;
	return (a->kind > b->kind) - (a->kind < b->kind);
}

static int by_tag(const void *x, const void *y)
{
	const xfer_key *a = x, *b = y;
	int c = cmp_tag(a, b);
	return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

static int by_send(const void *x, const void *y)
{
	const int *a = x, *b = y;
	return (a[0] > b[0]) - (a[0] < b[0]);
}

/* ---- channels ---------------------------------------------------------------- */

/* Per device, the positions of its sends (0) and receives (1) grouped by
 * peer: group p of kind k is pos[d][k][start[d][k][p] .. start[d][k][p + 1]),
 * in program order. */
struct ir_channels {
	int P;
	int **start[2], **pos[2]; /* [kind][device] */
};

void ir_channels_free(ir_channels *ix)
{
	if (!ix)
		return;
	for (int k = 0; k < 2; k++) {
		for (int d = 0; d < ix->P && ix->start[k]; d++) {
			free(ix->start[k][d]);
			free(ix->pos[k][d]);
		}
		free(ix->start[k]);
		free(ix->pos[k]);
	}
	free(ix);
}

ir_channels *ir_channels_index(const ir_module *m)
{
	int P = m->ndevices;
	ir_channels *ix = calloc(1, sizeof *ix);
	if (!ix)
		ir_bug("out of memory");
	ix->P = P;
	for (int k = 0; k < 2; k++) {
		ix->start[k] = calloc((size_t)P + 1, sizeof *ix->start[k]);
		ix->pos[k] = calloc((size_t)P + 1, sizeof *ix->pos[k]);
		if (!ix->start[k] || !ix->pos[k])
			ir_bug("out of memory");
	}
	for (int d = 0; d < P; d++) {
		const ir_device *dv = &m->devices[d];
		for (int k = 0; k < 2; k++) {
			ir_comm c = k ? IR_COMM_RECV : IR_COMM_SEND;
			int *st = calloc((size_t)P + 2, sizeof *st), n = 0;
			if (!st)
				ir_bug("out of memory");
			for (int i = 0; i < dv->nops; i++)
				if (dv->ops[i].comm == c && dv->ops[i].peer >= 0 && dv->ops[i].peer < P)
					st[dv->ops[i].peer + 2]++, n++;
			for (int p = 0; p < P; p++)
				st[p + 2] += st[p + 1];
			int *pos = malloc(((size_t)n + 1) * sizeof *pos);
			if (!pos)
				ir_bug("out of memory");
			for (int i = 0; i < dv->nops; i++)
				if (dv->ops[i].comm == c && dv->ops[i].peer >= 0 && dv->ops[i].peer < P)
					pos[st[dv->ops[i].peer + 1]++] = i;
			ix->start[k][d] = st; /* st[p] .. st[p + 1]: peer p's, after the fill */
			ix->pos[k][d] = pos;
		}
	}
	return ix;
}

/* The positions of device d's ops with comm c (send or receive) and peer
 * p, in program order: *n of them, from the index or by a scan into *own
 * (malloc'd, or NULL). */
static const int *channel_ops(const ir_module *m, const ir_channels *ix, int d, ir_comm c, int p,
                              int *n, int **own)
{
	*own = NULL;
	int k = c == IR_COMM_RECV;
	if (ix) {
		const int *st = ix->start[k][d];
		*n = st[p + 1] - st[p];
		return ix->pos[k][d] + st[p];
	}
	const ir_device *dv = &m->devices[d];
	int *pos = malloc(((size_t)dv->nops + 1) * sizeof *pos);
	if (!pos)
		ir_bug("out of memory");
	*n = 0;
	for (int i = 0; i < dv->nops; i++)
		if (dv->ops[i].comm == c && dv->ops[i].peer == p)
			pos[(*n)++] = i;
	*own = pos;
	return pos;
}

/* The transfers of device d with comm c and peer p, sorted by tag. */
static int tagged(const ir_module *m, const ir_channels *ix, int d, ir_comm c, int p,
                  xfer_key **out)
{
	int n, *own;
	const int *pos = channel_ops(m, ix, d, c, p, &n, &own);
	xfer_key *k = malloc(((size_t)n + 1) * sizeof *k);
	if (!k)
		ir_bug("out of memory");
	const ir_device *dv = &m->devices[d];
	for (int i = 0; i < n; i++) {
		const ir_op *o = &dv->ops[pos[i]];
		k[i] = (xfer_key){o->stage, o->mb, (int)o->kind, pos[i]};
	}
	free(own);
	qsort(k, (size_t)n, sizeof *k, by_tag);
	*out = k;
	return n;
}

/* mpi: the runtime tags a message with its value (rt_comm.c), and MPI
 * matches a receive with the oldest message of its sender and tag. */
static int tag_pairs(const ir_module *m, const ir_channels *ix, int a, int b,
                     int (*pair)(void *ctx, int i, int j), void *ctx)
{
	xfer_key *s, *r;
	int ns = tagged(m, ix, a, IR_COMM_SEND, b, &s);
	int nr = tagged(m, ix, b, IR_COMM_RECV, a, &r);
	int (*pairs)[2] = malloc(((size_t)(ns < nr ? ns : nr) + 1) * sizeof *pairs), np = 0;
	if (!pairs)
		ir_bug("out of memory");
	int i = 0, j = 0;
	bool send_left = false, recv_left = false;
	while (i < ns || j < nr) {
		int c = i == ns ? 1 : j == nr ? -1 : cmp_tag(&s[i], &r[j]);
		if (c < 0)
			send_left = true, i++;
		else if (c > 0)
			recv_left = true, j++;
		else
			pairs[np][0] = s[i++].pos, pairs[np++][1] = r[j++].pos;
	}
	/* In the sends' program order, as the first-in-first-out pairing calls. */
	qsort(pairs, (size_t)np, sizeof *pairs, by_send);
	int rc = 0;
	for (int k = 0; k < np && !rc; k++)
		rc = pair(ctx, pairs[k][0], pairs[k][1]);
	free(s);
	free(r);
	free(pairs);
	if (rc)
		return rc;
	return send_left ? IR_CHANNEL_SEND_LEFT : recv_left ? IR_CHANNEL_RECV_LEFT : 0;
}

int ir_channel_pairs(const ir_module *m, const ir_channels *ix, int a, int b,
                     int (*pair)(void *ctx, int i, int j), void *ctx)
{
	if (m->plan.backend == IR_BACKEND_MPI)
		return tag_pairs(m, ix, a, b, pair, ctx);
	/* nccl: no tags; the k-th send meets the k-th receive. */
	int ns, nr, *own_s, *own_r;
	const int *s = channel_ops(m, ix, a, IR_COMM_SEND, b, &ns, &own_s);
	const int *r = channel_ops(m, ix, b, IR_COMM_RECV, a, &nr, &own_r);
	int rc = 0, k = 0;
	for (; k < ns && k < nr && !rc; k++)
		rc = pair(ctx, s[k], r[k]);
	free(own_s);
	free(own_r);
	if (rc)
		return rc;
	return ns > nr ? IR_CHANNEL_SEND_LEFT : nr > ns ? IR_CHANNEL_RECV_LEFT : 0;
}

ir_op_kind ir_value_maker(const ir_module *m, ir_op_kind value)
{
	if (value == IR_OP_B && !ir_schedule_splits_backward[m->plan.schedule])
		return IR_OP_W;
	return value;
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

void ir_alloc_memplan(ir_module *m)
{
	m->memplan = arena_alloc(m->arena, (size_t)m->ndevices * sizeof *m->memplan);
}

ir_buf *ir_add_buf(ir_module *m, int dev, const ir_buf *src, ir_loc loc)
{
	ir_assert(m->memplan && dev >= 0 && dev < m->ndevices);
	ir_dev_plan *p = &m->memplan[dev];
	int cap = p->capbufs;
	ir_buf *b = VEC_PUSH(m->arena, p->bufs, p->nbufs, p->capbufs);
	if (cap != p->capbufs)
		p->buf_loc = arena_grow(m->arena, p->buf_loc, (size_t)cap * sizeof *p->buf_loc,
		                        (size_t)p->capbufs * sizeof *p->buf_loc);
	*b = *src;
	p->buf_loc[p->nbufs - 1] = loc;
	return b;
}

/* ---- liveness (docs/memplan.md) ----------------------------------------- */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		ir_bug("out of memory");
	return p;
}

static uint64_t stage_bytes(const ir_module *m, int stage, bool wstash)
{
	uint64_t sum = 0;
	for (int l = m->stages[stage].first; l <= m->stages[stage].last; l++)
		sum = ir_sat_add(sum, wstash ? m->layers[l].cost.wstash : m->layers[l].cost.act);
	return sum;
}

uint64_t ir_stage_act(const ir_module *m, int s)
{
	return stage_bytes(m, s, false);
}

uint64_t ir_stage_kept(const ir_module *m, int s)
{
	switch (m->stages[s].recompute) {
	case IR_RECOMP_FULL: return s > 0 ? ir_boundary_bytes(m) : 0;
	case IR_RECOMP_SELECTIVE: {
		/* sel_act <= act per layer (ir_verify): the difference of the sums */
		uint64_t drop = 0;
		for (int l = m->stages[s].first; l <= m->stages[s].last; l++)
			drop = ir_sat_add(drop, m->layers[l].cost.sel_act);
		uint64_t act = stage_bytes(m, s, false);
		return act > drop ? act - drop : 0;
	}
	default: return stage_bytes(m, s, false);
	}
}

uint64_t ir_stage_redo(const ir_module *m, int s)
{
	if (m->stages[s].recompute != IR_RECOMP_FULL)
		return 0;
	return ir_sat_add(stage_bytes(m, s, false), ir_boundary_bytes(m));
}

/* When a send's buffer may be reused: at the first wait after it that
 * proves it complete, else at the end of the step.  Only NCCL gives such a
 * wait: its communication stream runs in order and a group completes as
 * one step, so the wait of a receive in the send's group or posted after
 * it returns after the send has completed.  An MPI send completes unseen
 * (each post is a step of its own).  This is the event graph of
 * passes/prove.c; codegen completes every send by the end of the step. */
static int wait_recv(const ir_module *m, const ir_op *w, const int *rcv)
{
	if (w->coll != IR_COMM_NONE) /* a collective's wait: no receive */
		return -1;
	return rcv[((size_t)w->stage * (size_t)ir_local_mb(m) + (size_t)w->mb) * 2 + w->kind];
}

/* after[j]: the first wait whose receive was posted after op j (one whose
 * receive comes after j comes after j itself), INT_MAX if none; from one
 * sweep down the program. */
static int *waits_after(const ir_module *m, const ir_device *dev, const int *rcv)
{
	int n = dev->nops, *after = xmalloc(((size_t)n + 1) * sizeof *after);
	int *by_recv = xmalloc(((size_t)n + 1) * sizeof *by_recv); /* per receive: its first wait */
	for (int i = 0; i <= n; i++)
		by_recv[i] = INT_MAX;
	for (int i = 0; i < n; i++) {
		int r = dev->ops[i].comm == IR_COMM_WAIT ? wait_recv(m, &dev->ops[i], rcv) : -1;
		if (r >= 0 && i < by_recv[r])
			by_recv[r] = i;
	}
	for (int j = n - 1, best = INT_MAX; j >= 0; j--) {
		after[j] = best; /* the waits of receives at j + 1 and later */
		best = by_recv[j] < best ? by_recv[j] : best;
	}
	free(by_recv);
	return after;
}

static int send_release(const ir_module *m, const ir_device *dev, int j, const int *rcv,
                        const int *after)
{
	if (m->plan.backend != IR_BACKEND_NCCL)
		return dev->nops - 1;
	int g = dev->ops[j].group, best = after[j];
	for (int i = j + 1; g && i < dev->nops && i < best; i++) { /* hand-written groups */
		const ir_op *w = &dev->ops[i];
		int r = w->comm == IR_COMM_WAIT ? wait_recv(m, w, rcv) : -1;
		if (r >= 0 && dev->ops[r].group == g)
			best = i;
	}
	return best < dev->nops ? best : dev->nops - 1;
}

int ir_live_buffers(const ir_module *m, int d, ir_buf **out)
{
	const ir_device *dev = &m->devices[d];
	int S = m->nstages, M = (int)ir_local_mb(m), n = dev->nops;
	size_t nval = (size_t)S * M * 2, nop = (size_t)S * M * IR_NOPS;
	/* Positions on this device: compute ops by (stage, mb, kind); sends and
	 * receives by the value they move (kind F or B, stage, mb). */
	int *pos = xmalloc(nop * sizeof *pos), *snd = xmalloc(nval * sizeof *snd),
	    *rcv = xmalloc(nval * sizeof *rcv);
	for (size_t i = 0; i < nop; i++)
		pos[i] = -1;
	for (size_t i = 0; i < nval; i++)
		snd[i] = rcv[i] = -1;
#define POS(s, mb, k) pos[((size_t)(s) * M + (mb)) * IR_NOPS + (k)]
#define VAL(s, mb, k) (((size_t)(s) * M + (mb)) * 2 + (k))
/* The last op that reads a value op kind k of stage s makes for stage cs:
 * its consumer, or for a fully recomputing stage's input its B, which runs
 * F again from it. */
#define USE(cs, mb, k)                                                             \
	POS(cs, mb, (k) == IR_OP_F && m->stages[cs].recompute == IR_RECOMP_FULL ? IR_OP_B : (k))
	for (int i = 0; i < n; i++) {
		const ir_op *op = &dev->ops[i];
		if (op->comm == IR_COMM_NONE)
			POS(op->stage, op->mb, op->kind) = i;
		else if (op->comm == IR_COMM_SEND)
			snd[VAL(op->stage, op->mb, op->kind)] = i;
		else if (op->comm == IR_COMM_RECV)
			rcv[VAL(op->stage, op->mb, op->kind)] = i;
	}
	uint64_t value_bytes = (uint64_t)m->train.mbs * (uint64_t)m->model.seq *
	                       (uint64_t)m->model.hidden * (uint64_t)ir_dtype_bytes[m->model.dtype];
	int *after = waits_after(m, dev, rcv);
	/* coll_wait[i]: the wait of the collective at op i. */
	int *of = xmalloc(((size_t)n + 1) * sizeof *of), *coll_wait = xmalloc(((size_t)n + 1) * sizeof *coll_wait);
	ir_coll_waits(dev, of);
	for (int i = 0; i < n; i++)
		coll_wait[i] = -1;
	for (int i = 0; i < n; i++)
		if (of[i] >= 0)
			coll_wait[of[i]] = i;
	free(of);
	uint64_t *sbytes = xmalloc(((size_t)S + 1) * 2 * sizeof *sbytes); /* per stage: kept, wstash */
	for (int s = 0; s < S; s++)
		sbytes[2 * s] = ir_stage_kept(m, s), sbytes[2 * s + 1] = stage_bytes(m, s, true);
	int nb = 0, cap = 3 * n + 1;
	ir_buf *b = xmalloc((size_t)cap * sizeof *b);
	for (int i = 0; i < n; i++) {
		const ir_op *op = &dev->ops[i];
		int s = op->stage, mb = op->mb;
		if (op->comm == IR_COMM_RECV) {
			/* Written from the post, read by its consumer. */
			int cs = op->kind == IR_OP_F ? s + 1 : s - 1;
			b[nb++] = (ir_buf){IR_BUF_RECV, op->kind, s, mb, i, USE(cs, mb, op->kind), 0, op->bytes};
			continue;
		}
		if (ir_is_coll(op)) {
			/* A collective's bucket: from its post to its wait (the programs
			 * verify: there is one). */
			ir_assert(coll_wait[i] >= 0);
			/* A carried wait (before its post) completes it in the next
			 * step: the buffer is live from the post through the end of
			 * the program and from its start through the wait; the plan
			 * keeps it for the whole program. */
			bool carried = coll_wait[i] < i;
			b[nb++] = (ir_buf){IR_BUF_BUCKET, IR_OP_W, s, mb, carried ? 0 : i,
			                   carried ? n - 1 : coll_wait[i], 0, op->bytes, op->comm};
			continue;
		}
		if (op->comm != IR_COMM_NONE || op->kind == IR_OP_W)
			continue;
		/* F stashes until B; B keeps the W stash until W.  With full
		 * recomputation F's stash (and chain) lives during F alone, and B
		 * makes it again (recomp) from the input F kept (USE).  With
		 * selective the stash F keeps is smaller (ir_stage_kept): what it
		 * leaves out is in the runtime's scratch. */
		bool f = op->kind == IR_OP_F, redo = m->stages[s].recompute == IR_RECOMP_FULL;
		if (redo && f)
			b[nb++] = (ir_buf){IR_BUF_ACT, IR_OP_F, s, mb, i, i, 0, ir_stage_redo(m, s)};
		else if (f)
			b[nb++] = (ir_buf){IR_BUF_ACT, IR_OP_F, s, mb, i, POS(s, mb, IR_OP_B), 0, sbytes[2 * s]};
		if (redo && !f)
			b[nb++] = (ir_buf){IR_BUF_RECOMP, IR_OP_F, s, mb, i, i, 0, ir_stage_redo(m, s)};
		if (!f)
			b[nb++] = (ir_buf){IR_BUF_WSTASH, IR_OP_F, s, mb, i, POS(s, mb, IR_OP_W), 0,
			                   sbytes[2 * s + 1]};
		/* The value it makes for the next stage (F) or the previous one (B):
		 * the last stage's F feeds its own B through the stash, and the
		 * first stage's B makes no input gradient. */
		int cs = f ? s + 1 : s - 1;
		if (cs < 0 || cs >= S)
			continue;
		if (m->stages[cs].device == d) {
			b[nb++] = (ir_buf){IR_BUF_PASS, op->kind, s, mb, i, USE(cs, mb, op->kind), 0, value_bytes};
		} else {
			int j = snd[VAL(s, mb, op->kind)];
			ir_assert(j >= 0); /* the programs verify */
			b[nb++] = (ir_buf){IR_BUF_SEND, op->kind, s, mb, i, send_release(m, dev, j, rcv, after), 0,
			                   dev->ops[j].bytes};
		}
	}
#undef USE
#undef POS
#undef VAL
	free(pos);
	free(snd);
	free(rcv);
	free(after);
	free(coll_wait);
	free(sbytes);
	*out = b;
	return nb;
}

bool ir_times_only(const ir_module *m)
{
	for (int l = 0; l < m->nlayers; l++) {
		const ir_cost *c = &m->layers[l].cost;
		if (!c->known || c->flops != 0 || c->act || c->wstash || c->resident)
			return false;
	}
	return m->nlayers > 0;
}

int64_t ir_plan_chunks(const ir_plan_opts *p)
{
	if (p->schedule == IR_SCHED_I1F1B)
		return p->chunks == 1 ? 2 : p->chunks;
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
	if (a->known != b->known || a->measured != b->measured)
		return false;
	if (!a->known) /* the measured fields alone are set */
		return (!(a->measured & IR_CF_BIT(F)) || a->f == b->f) &&
		       (!(a->measured & IR_CF_BIT(B)) || a->b == b->b) &&
		       (!(a->measured & IR_CF_BIT(W)) || a->w == b->w) &&
		       (!(a->measured & IR_CF_BIT(COLD)) ||
		        (a->f_cold == b->f_cold && a->b_cold == b->b_cold && a->w_cold == b->w_cold)) &&
		       (!(a->measured & IR_CF_BIT(FLOPS)) || a->flops == b->flops) &&
		       (!(a->measured & IR_CF_BIT(ACT)) || a->act == b->act) &&
		       (!(a->measured & IR_CF_BIT(WSTASH)) || a->wstash == b->wstash) &&
		       (!(a->measured & IR_CF_BIT(PARAMS)) || a->params == b->params) &&
		       (!(a->measured & IR_CF_BIT(RESIDENT)) || a->resident == b->resident);
	return a->f == b->f && a->b == b->b && a->w == b->w && a->flops == b->flops &&
	       a->act == b->act && a->wstash == b->wstash && a->params == b->params &&
	       a->resident == b->resident && a->cold == b->cold && a->f_cold == b->f_cold &&
	       a->b_cold == b->b_cold && a->w_cold == b->w_cold && a->sel_act == b->sel_act &&
	       a->sel_f == b->sel_f;
}

static bool i64s_eq(const int64_t *a, int na, const int64_t *b, int nb)
{
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

bool ir_hfield_eq(const ir_hfield *f, const void *a, const void *b)
{
	const char *x = a, *y = b;
	const void *p = x + f->off, *q = y + f->off;
	switch (f->type) {
	case IR_HF_NAME:
	case IR_HF_STR:
		return str_eq(*(const char *const *)p, *(const char *const *)q);
	case IR_HF_INT:
		return *(const int64_t *)p == *(const int64_t *)q;
	case IR_HF_U64:
	case IR_HF_BYTES:
		return *(const uint64_t *)p == *(const uint64_t *)q;
	case IR_HF_ENUM:
		return *(const int *)p == *(const int *)q;
	case IR_HF_F64:
	case IR_HF_US:
	case IR_HF_RATE:
		return *(const double *)p == *(const double *)q;
	case IR_HF_LINK: {
		const ir_link *l = p, *k = q;
		return l->bw == k->bw && l->lat == k->lat;
	}
	case IR_HF_LIST:
		return i64s_eq(*(int64_t *const *)p, *(const int *)(x + f->count),
		               *(int64_t *const *)q, *(const int *)(y + f->count));
	}
	ir_bug("header field '%s' of unknown type %d", f->key, (int)f->type);
}

static bool memplan_eq(const ir_module *a, const ir_module *b)
{
	if (!a->memplan || !b->memplan)
		return !a->memplan == !b->memplan;
	if (a->ndevices != b->ndevices)
		return false;
	for (int d = 0; d < a->ndevices; d++) {
		const ir_dev_plan *x = &a->memplan[d], *y = &b->memplan[d];
		if (x->arena != y->arena || x->nbufs != y->nbufs)
			return false;
		for (int i = 0; i < x->nbufs; i++) {
			const ir_buf *p = &x->bufs[i], *q = &y->bufs[i];
			if (p->kind != q->kind || p->coll != q->coll || p->value != q->value || p->stage != q->stage ||
			    p->mb != q->mb || p->first != q->first || p->last != q->last ||
			    p->off != q->off || p->size != q->size)
				return false;
		}
	}
	return true;
}

bool ir_equal(const ir_module *a, const ir_module *b)
{
	for (int i = 0; i < IR_NHLINES; i++) {
		const ir_hline *h = &ir_hlines[i];
		for (int j = 0; j < h->nfields; j++)
			if (!ir_hfield_eq(&h->fields[j], (const char *)a + h->off, (const char *)b + h->off))
				return false;
	}
	if (!memplan_eq(a, b))
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
		    sa->device != sb->device || sa->recompute != sb->recompute)
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
			    x->bytes != y->bytes || x->coll != y->coll || x->first != y->first ||
			    x->last != y->last || x->carried != y->carried)
				return false;
		}
	}
	return true;
}
