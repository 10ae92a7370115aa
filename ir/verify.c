/* verify.c: the IR verifier (invariants listed in docs/ir.md) and the
 * per-layer attribute checks it shares with the frontend.
 *
 * Reads a module; writes nothing; reports every violation it finds through
 * diag_error and returns their count.  It runs after every pass under
 * --verify-each and in all tests, so it is kept linear in the module's
 * size. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lcheck {
	ir_attr_loc_fn where;
	void *ctx;
	ir_loc fallback;
	int errors;
	const char *kind;
	int index;
} lcheck;

static ir_loc at(lcheck *c, ir_attr a)
{
	return c->where ? c->where(c->ctx, a) : c->fallback;
}

static void lerr(lcheck *c, ir_attr a, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void lerr(lcheck *c, ir_attr a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror(at(c, a), fmt, ap);
	va_end(ap);
	c->errors++;
}

/* Where a part of a parallel layer has attribute a: where the parallel
 * layer has the attribute that holds it. */
typedef struct part_where {
	ir_attr_loc_fn where;
	void *ctx;
	ir_layer_kind part;
} part_where;

static ir_loc part_at(void *ctx, ir_attr a)
{
	part_where *pw = ctx;
	int pa = ir_parallel_attr(pw->part, a);
	return pw->where(pw->ctx, pa >= 0 ? (ir_attr)pa : a);
}

/* rope_scaling's fields: those of its type, the required ones given, and
 * the ranges that tie two values (docs/yaml.md, "RoPE scaling"). */
static void check_rope_scaling(lcheck *c, const ir_layer *l)
{
	const int64_t *v = l->attr;
	ir_rope_scaling t = (ir_rope_scaling)v[IR_ATTR_ROPE_SCALING];
	const char *tn = ir_rope_scaling_names[t];
	int errors = c->errors;
	for (int a = IR_ATTR_ROPE_FACTOR; a <= IR_ATTR_ROPE_MSCALE_ALL_DIM; a++) {
		ir_use u = ir_rope_field_use(t, a);
		const char *name = ir_attr_table[a].name;
		if (v[a] && u == IR_USE_NO && t == IR_ROPE_NONE)
			lerr(c, a, "'%s' needs 'rope_scaling'", name);
		else if (v[a] && u == IR_USE_NO)
			lerr(c, a, "'%s' does not apply to rope_scaling %s", name, tn);
		else if (!v[a] && u == IR_USE_REQUIRED)
			lerr(c, IR_ATTR_ROPE_SCALING, "rope_scaling %s needs '%s'", tn, name);
	}
	if (c->errors > errors)
		return;
	if (t == IR_ROPE_LLAMA3) {
		double lo = ir_attr_real(l, IR_ATTR_ROPE_LOW_FREQ);
		double hi = ir_attr_real(l, IR_ATTR_ROPE_HIGH_FREQ);
		if (!(hi > lo)) /* the ramp divides by hi - lo */
			lerr(c, IR_ATTR_ROPE_HIGH_FREQ, "'rope_scaling.high_freq_factor' (%g) must be "
			     "greater than 'rope_scaling.low_freq_factor' (%g)", hi, lo);
	} else if (t == IR_ROPE_YARN) {
		double fast = ir_attr_real_or_default(l, IR_ATTR_ROPE_BETA_FAST);
		double slow = ir_attr_real_or_default(l, IR_ATTR_ROPE_BETA_SLOW);
		if (!(fast > slow))
			lerr(c, v[IR_ATTR_ROPE_BETA_SLOW] ? IR_ATTR_ROPE_BETA_SLOW : IR_ATTR_ROPE_BETA_FAST,
			     "'rope_scaling.beta_slow' (%g) must be less than 'rope_scaling.beta_fast' (%g)",
			     slow, fast);
		if (v[IR_ATTR_ROPE_MSCALE] && !v[IR_ATTR_ROPE_MSCALE_ALL_DIM])
			lerr(c, IR_ATTR_ROPE_MSCALE, "'rope_scaling.mscale' needs "
			     "'rope_scaling.mscale_all_dim' (the attention factor is their ratio)");
		/* The correction range divides by log(rope_theta). */
		if (!(ir_rope_theta(l) > 1))
			lerr(c, v[IR_ATTR_ROPE_THETA] ? IR_ATTR_ROPE_THETA : IR_ATTR_ROPE_SCALING,
			     "rope_scaling yarn needs 'rope_theta' > 1, got %g", ir_rope_theta(l));
	}
}

int ir_check_layer(const ir_model_info *model, const ir_layer *l, int index,
                   ir_attr_loc_fn where, void *ctx, ir_loc fallback)
{
	lcheck c = {where, ctx, fallback, 0, "", index};
	if ((unsigned)l->kind >= IR_NLAYER_KINDS) {
		diag_error(fallback, "layer %d has an invalid kind", index);
		return 1;
	}
	c.kind = ir_layer_kind_names[l->kind];
	const int64_t *v = l->attr;
	int64_t ver = v[IR_ATTR_VERSION];

	for (int a = 0; a < IR_NATTRS; a++) {
		const ir_attr_info *ai = &ir_attr_table[a];
		if (!ir_attr_applies(a, l->kind, ver)) {
			if (v[a] != 0)
				lerr(&c, a, "'%s' does not apply to a %s layer", ai->name, c.kind);
			continue;
		}
		if (ai->type == IR_AT_REAL) {
			double r = ir_attr_real(l, a);
			if (v[a] == 0 || (r > 0 && isfinite(r) && r >= (double)ai->min &&
			                  (ai->max <= 0 || r <= (double)ai->max)))
				continue;
			if (ai->max > 0 && ai->min > 0)
				lerr(&c, a, "'%s' must be a finite number in %lld..%lld, got %g", ai->name,
				     (long long)ai->min, (long long)ai->max, r);
			else if (ai->max > 0)
				lerr(&c, a, "'%s' must be a finite number > 0 and <= %lld, got %g", ai->name,
				     (long long)ai->max, r);
			else if (ai->min > 0)
				lerr(&c, a, "'%s' must be a finite number >= %lld, got %g", ai->name,
				     (long long)ai->min, r);
			else
				lerr(&c, a, "'%s' must be a finite number > 0, got %g", ai->name, r);
			continue;
		}
		if (ai->type == IR_AT_INT && v[a] == 0) {
			if (ir_attr_required(a, l->kind, ver))
				lerr(&c, a, "missing '%s' in %s layer", ai->name, c.kind);
			continue;
		}
		if (v[a] < ai->min || v[a] > ai->max)
			lerr(&c, a, "'%s' must be in %lld..%lld, got %lld", ai->name,
			     (long long)ai->min, (long long)ai->max, (long long)v[a]);
	}
	if (c.errors)
		return c.errors;

	switch (l->kind) {
	case IR_LAYER_ATTENTION:
		check_rope_scaling(&c, l);
		if (v[IR_ATTR_HEADS] % v[IR_ATTR_KV_HEADS] != 0)
			lerr(&c, IR_ATTR_KV_HEADS, "'kv_heads' (%lld) must divide 'heads' (%lld)",
			     (long long)v[IR_ATTR_KV_HEADS], (long long)v[IR_ATTR_HEADS]);
		if (v[IR_ATTR_KV_LORA_RANK] == 0) {
			static const ir_attr mla[] = {IR_ATTR_Q_LORA_RANK, IR_ATTR_QK_ROPE_DIM,
			                              IR_ATTR_V_HEAD_DIM};
			for (size_t i = 0; i < sizeof mla / sizeof *mla; i++)
				if (v[mla[i]])
					lerr(&c, mla[i], "'%s' needs 'kv_lora_rank' (MLA attention)",
					     ir_attr_table[mla[i]].name);
		} else if (v[IR_ATTR_QK_ROPE_DIM] == 0) {
			lerr(&c, IR_ATTR_KV_LORA_RANK,
			     "MLA attention ('kv_lora_rank') needs 'qk_rope_dim'");
		} else {
			/* MLA's keys share one rotary part and come out of a latent:
			 * the Qwen-style biases and per-head norms are not defined there
			 * (docs/layers.md). */
			static const ir_attr gqa[] = {IR_ATTR_QKV_BIAS, IR_ATTR_QK_NORM};
			for (size_t i = 0; i < sizeof gqa / sizeof *gqa; i++)
				if (v[gqa[i]])
					lerr(&c, gqa[i], "'%s' does not apply to MLA attention ('kv_lora_rank')",
					     ir_attr_table[gqa[i]].name);
		}
		break;
	case IR_LAYER_MOE:
		if (v[IR_ATTR_TOP_K] > v[IR_ATTR_EXPERTS])
			lerr(&c, IR_ATTR_TOP_K, "'top_k' (%lld) exceeds 'experts' (%lld)",
			     (long long)v[IR_ATTR_TOP_K], (long long)v[IR_ATTR_EXPERTS]);
		if (v[IR_ATTR_SHARED_GATE] && !v[IR_ATTR_SHARED_EXPERTS])
			lerr(&c, IR_ATTR_SHARED_GATE, "'shared_gate' needs 'shared_experts' (it gates "
			     "their output)");
		break;
	case IR_LAYER_MAMBA:
		if (ver == 2) {
			int64_t inner = v[IR_ATTR_EXPAND] * model->hidden;
			if (v[IR_ATTR_HEADS] * v[IR_ATTR_HEAD_DIM] != inner)
				lerr(&c, IR_ATTR_HEADS,
				     "'heads' x 'head_dim' (%lld x %lld) must equal expand x hidden (%lld)",
				     (long long)v[IR_ATTR_HEADS], (long long)v[IR_ATTR_HEAD_DIM],
				     (long long)inner);
			else if (v[IR_ATTR_HEADS] % v[IR_ATTR_GROUPS] != 0)
				lerr(&c, IR_ATTR_GROUPS, "'groups' (%lld) must divide 'heads' (%lld)",
				     (long long)v[IR_ATTR_GROUPS], (long long)v[IR_ATTR_HEADS]);
		}
		break;
	case IR_LAYER_PARALLEL:
		/* Its two parts, each checked as a layer of its kind. */
		if (ver != 2) {
			lerr(&c, IR_ATTR_VERSION, "a parallel layer's mamba mixer is Mamba-2: 'version' "
			     "must be 2, got %lld", (long long)ver);
			break;
		}
		for (int p = 0; p < 2 && !c.errors; p++) {
			ir_layer_kind part = p ? IR_LAYER_MAMBA : IR_LAYER_ATTENTION;
			ir_layer pl;
			ir_parallel_part(l, part, &pl);
			part_where pw = {where, ctx, part};
			c.errors += ir_check_layer(model, &pl, index, where ? part_at : NULL,
			                           where ? &pw : NULL, fallback);
		}
		break;
	default:
		break;
	}
	return c.errors;
}

static ir_loc loc_or(const ir_loc *locs, int i, ir_loc fallback)
{
	return locs && locs[i].src ? locs[i] : fallback;
}

/* Where op i of device d was read, else fallback. */
static ir_loc op_loc_or(const ir_module *m, int d, int i, ir_loc fallback)
{
	return m->op_loc && d >= 0 && d < m->ndevices && m->op_loc[d] && i >= 0 && i < m->devices[d].nops
	           ? loc_or(m->op_loc[d], i, fallback)
	           : fallback;
}

static int verify_layers(const ir_module *m)
{
	int errs = 0;
	if (m->nlayers < 3) {
		diag_error(m->nlayers ? loc_or(m->layer_loc, m->nlayers - 1, ir_loc_or(m->model_loc, m->loc))
		                      : ir_loc_or(m->model_loc, m->loc), "a model needs an embedding, at least one layer and a head; got %d layer%s",
		           m->nlayers, m->nlayers == 1 ? "" : "s");
		return 1;
	}
	for (int i = 0; i < m->nlayers; i++) {
		const ir_layer *l = &m->layers[i];
		ir_loc loc = loc_or(m->layer_loc, i, m->loc);
		errs += ir_check_layer(&m->model, l, i, NULL, NULL, loc);
		bool first = i == 0, last = i == m->nlayers - 1;
		if (first != (l->kind == IR_LAYER_EMBEDDING)) {
			diag_error(loc, first ? "layer L%d must be the embedding"
			                      : "embedding at L%d: only the first layer may be an embedding", i);
			errs++;
		}
		if (last != (l->kind == IR_LAYER_HEAD)) {
			diag_error(loc, last ? "layer L%d (the last) must be the head"
			                     : "head at L%d: only the last layer may be a head", i);
			errs++;
		}
		const ir_cost *c = &l->cost;
		if (c->known && !(isfinite(c->f) && c->f >= 0 && isfinite(c->b) && c->b >= 0 &&
		                  isfinite(c->w) && c->w >= 0 && isfinite(c->flops) && c->flops >= 0 &&
		                  isfinite(c->f_cold) && c->f_cold >= 0 && isfinite(c->b_cold) &&
		                  c->b_cold >= 0 && isfinite(c->w_cold) && c->w_cold >= 0 &&
		                  isfinite(c->sel_f) && c->sel_f >= 0)) {
			diag_error(loc, "layer L%d: costs must be finite and non-negative", i);
			errs++;
		} else if (c->known) {
			const double t[] = {c->f, c->b, c->w, c->f_cold, c->b_cold, c->w_cold, c->sel_f};
			static const char *const tn[] = {"f", "b", "w", "f_cold", "b_cold", "w_cold", "sel_f"};
			for (int k = 0; k < 7; k++)
				if (t[k] > IR_MAX_US) {
					diag_error(loc, "layer L%d: %s=%gus is out of range (at most %gus)", i,
					           tn[k], t[k], IR_MAX_US);
					errs++;
					break;
				}
			/* What selective leaves out of the stash is a part of it. */
			if (c->sel_act > c->act) {
				diag_error(loc, "layer L%d: sel_act=%llu bytes is more than its act=%llu bytes", i,
				           (unsigned long long)c->sel_act, (unsigned long long)c->act);
				errs++;
			}
			if (c->flops > IR_MAX_LAYER_FLOPS) {
				diag_error(loc, "layer L%d: flops=%g is out of range (at most %g)", i, c->flops,
				           IR_MAX_LAYER_FLOPS);
				errs++;
			}
		}
	}
	if (!errs && ir_no_time(m)) {
		diag_error(loc_or(m->layer_loc, 0, m->loc), "every layer's F, B and W take 0 us: the step would take no time, "
		                   "and no plan can be compared with another");
		errs++;
	}
	int over = errs ? -1 : ir_step_bytes_overflow(m);
	if (over >= 0)
		errs++, ir_step_bytes_error(m, over, loc_or(m->layer_loc, over, m->loc), NULL);
	return errs;
}

/* A double that rounds to float32's infinity: at least FLT_MAX plus half
 * its last place (the halfway case rounds to the even neighbour, 2^128). */
static bool f32_overflows(double v)
{
	return !(fabs(v) < 0x1.ffffffp+127);
}

/* One float32 value of the training: NULL when the runtime can take it,
 * else what is wrong with it. */
static const char *f32_problem(double v, bool positive)
{
	if (!isfinite(v))
		return "must be finite";
	if (positive ? !(v > 0) : !(v >= 0))
		return positive ? "must be greater than 0" : "must be at least 0";
	if (f32_overflows(v))
		return "does not fit in float32 (at most 3.4028235e+38)";
	if (v != 0 && (float)v == 0)
		return "rounds to 0 in float32 (the smallest is 1.4e-45)";
	return NULL;
}

int ir_check_train(const ir_train *t, ir_train_loc_fn where, void *ctx, ir_loc fallback)
{
	static const char *const names[] = {[IR_TRAIN_LR] = "lr", [IR_TRAIN_WD] = "weight_decay",
	                                    [IR_TRAIN_MIN_LR] = "min_lr", [IR_TRAIN_CLIP] = "clip"};
	const double v[] = {[IR_TRAIN_LR] = t->lr, [IR_TRAIN_WD] = t->weight_decay,
	                    [IR_TRAIN_MIN_LR] = t->min_lr, [IR_TRAIN_CLIP] = t->clip};
	int errs = 0;
	char buf[40];
	for (int f = 0; f < IR_NTRAIN_CHECKED; f++) {
		const char *why = f32_problem(v[f], f == IR_TRAIN_LR);
		if (!why)
			continue;
		fmt_double(buf, sizeof buf, v[f]);
		diag_error(where ? where(ctx, f) : fallback, "'%s' %s, got %s", names[f], why, buf);
		errs++;
	}
	/* The runtime's optimizer forms 1 - lr * weight_decay in double and
	 * takes it as float32. */
	if (!errs && t->min_lr > t->lr) {
		fmt_double(buf, sizeof buf, t->min_lr);
		diag_error(where ? where(ctx, IR_TRAIN_MIN_LR) : fallback,
		           "'min_lr' must be at most 'lr' (%g), the rate the decay starts from, got %s", t->lr, buf);
		errs++;
	}
	if (!errs && f32_overflows(1.0 - t->lr * t->weight_decay)) {
		diag_error(where ? where(ctx, IR_TRAIN_WD) : fallback,
		           "'lr' x 'weight_decay' is %.3g: the decay factor 1 - lr x weight_decay does "
		           "not fit in float32", t->lr * t->weight_decay);
		errs++;
	}
	return errs;
}

bool ir_no_time(const ir_module *m)
{
	for (int i = 0; i < m->nlayers; i++) {
		const ir_cost *c = &m->layers[i].cost;
		if (!c->known || c->f > 0 || c->b > 0 || c->w > 0 || c->f_cold > 0 || c->b_cold > 0 ||
		    c->w_cold > 0)
			return false;
	}
	return m->nlayers > 0;
}

uint64_t ir_boundary_bytes(const ir_module *m)
{
	uint64_t dims[] = {(uint64_t)(m->train.mbs > 0 ? m->train.mbs : 0),
	                   (uint64_t)(m->model.seq > 0 ? m->model.seq : 0),
	                   (uint64_t)(m->model.hidden > 0 ? m->model.hidden : 0),
	                   (uint64_t)ir_dtype_bytes[m->model.dtype]};
	uint64_t b = 1;
	for (int i = 0; i < 4; i++)
		b = ir_sat_mul(b, dims[i]);
	return b;
}

int ir_step_bytes_overflow(const ir_module *m)
{
	uint64_t total = 0, mb = m->train.microbatches > 0 ? (uint64_t)m->train.microbatches : 1;
	/* The activation a layer passes on and its gradient: what a stage
	 * boundary sends, receives and holds. */
	uint64_t passed = ir_sat_mul(2, ir_boundary_bytes(m));
	for (int i = 0; i < m->nlayers; i++) {
		const ir_cost *c = &m->layers[i].cost;
		if (!c->known)
			continue;
		total = ir_sat_add(total, c->resident);
		total = ir_sat_add(total, ir_sat_mul(mb, ir_sat_add(ir_sat_add(c->act, c->wstash), passed)));
		if (total > IR_MAX_STEP_BYTES)
			return i;
	}
	return -1;
}

int ir_step_bytes_error(const ir_module *m, int layer, ir_loc loc, diag_sink *ds)
{
	diag_sink_error(ds, loc, "layer L%d: the step's bytes pass 2^60 (1 EiB) here (every layer's "
	           "resident bytes plus %lld micro-batches x its activation and W stashes and the "
	           "activation and gradient it passes on): a size this large cannot be planned",
	           layer, (long long)m->train.microbatches);
	return -1;
}

/* The cluster's numbers within docs/ir.md's ranges: every time finite. */
static int verify_cluster(const ir_module *m)
{
	const ir_cluster *c = &m->cluster;
	ir_loc loc = ir_loc_or(m->cluster_loc, m->loc);
	const char *name = c->name ? c->name : "";
	const struct {
		const char *what;
		double v;
		int kind; /* 0 a rate, 1 a time, 2 FLOP/s */
	} f[] = {
		{"memory bandwidth", c->membw, 0}, {"intra-node bandwidth", c->intra.bw, 0},
		{"inter-node bandwidth", c->inter.bw, 0}, {"intra-node latency", c->intra.lat, 1},
		{"inter-node latency", c->inter.lat, 1}, {"send post time", c->send_post, 1},
		{"receive post time", c->recv_post, 1}, {"peak FLOP/s", c->flops, 2},
	};
	for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
		bool ok = f[i].kind == 0 ? ir_rate_ok(f[i].v)
		        : f[i].kind == 1 ? ir_range_ok(f[i].v, 0, IR_MAX_US)
		                         : ir_range_ok(f[i].v, IR_MIN_FLOPS, IR_MAX_FLOPS);
		if (!ok) {
			diag_error(loc, "cluster '%s': %s %g is out of range (%s)", name, f[i].what, f[i].v,
			           f[i].kind == 0 ? "1 .. 1e18 bytes/s, or inf"
			           : f[i].kind == 1 ? "0 .. 1e12 us" : "1e3 .. 1e21");
			return 1;
		}
	}
	return 0;
}

/* The data-parallel fields of the plan (docs/dataparallel.md): dp divides
 * the devices and the micro-batches; the other fields only with dp > 1. */
int ir_check_dp(const ir_module *m, diag_sink *ds)
{
	const ir_plan_opts *p = &m->plan;
	ir_loc loc = ir_loc_or(m->dp_loc, ir_loc_or(m->plan_loc, m->loc));
	int64_t D = p->dp;
	if (D <= 1 && m->dp_auto)
		return 0; /* the options apply to the replicas the search tries */
	if (D <= 1) {
		if (p->dist_opt || p->overlap_gather || p->bucket || p->rank_order != IR_RANKS_AUTO) {
			diag_sink_error(ds, loc, "the data-parallel options (rank order, distributed optimizer, "
			                         "bucket) need dp > 1");
			return 1;
		}
		return 0;
	}
	if (m->cluster.devices % D != 0) {
		diag_sink_error(ds, loc, "dp=%lld does not divide the cluster's %lld devices: the devices "
		                         "are dp replicas of one pipeline", (long long)D,
		                (long long)m->cluster.devices);
		return 1;
	}
	if (m->train.microbatches % D != 0) {
		diag_sink_error(ds, loc, "dp=%lld does not divide the step's %lld micro-batches: each "
		                         "replica runs microbatches / dp of them", (long long)D,
		                (long long)m->train.microbatches);
		return 1;
	}
	if (!p->bucket) {
		diag_sink_error(ds, loc, "dp=%lld needs a bucket size (bytes of gradient per collective)",
		                (long long)D);
		return 1;
	}
	if (p->overlap_gather && !p->dist_opt && !m->dist_opt_auto) {
		diag_sink_error(ds, loc, "overlap_param_gather=on needs the distributed optimizer "
		                         "(dist_optimizer=on): without it there is no all-gather to overlap");
		return 1;
	}
	return 0;
}

static int verify_header(const ir_module *m)
{
	int errs = 0;
	const ir_train *t = &m->train;
	const ir_cluster *c = &m->cluster;
	if (!m->model.name || !*m->model.name)
		errs++, diag_error(ir_loc_or(m->model_loc, m->loc), "the model has no name");
	errs += ir_check_train(t, NULL, NULL, ir_loc_or(m->train_loc, m->loc));
	if ((t->data == IR_DATA_TEXT) != (t->text_file != NULL))
		errs++, diag_error(ir_loc_or(m->train_loc, m->loc), t->text_file ? "a text file is given but data is not 'text'"
		                                       : "data 'text' needs a text file");
	if ((t->data == IR_DATA_TOKENS) != (t->token_files != NULL))
		errs++, diag_error(ir_loc_or(m->train_loc, m->loc), t->token_files ? "token files are given but data is not 'tokens'"
		                                       : "data 'tokens' needs token files");
	if (c->devices < 1 || c->per_node < 1 || c->mem == 0 || !(c->flops > 0) ||
	    !(c->membw > 0) || !(c->intra.bw > 0) || !(c->inter.bw > 0) ||
	    !(c->intra.lat >= 0) || !(c->inter.lat >= 0) || !(c->send_post >= 0) ||
	    !isfinite(c->send_post) || !(c->recv_post >= 0) || !isfinite(c->recv_post))
		errs++, diag_error(ir_loc_or(m->cluster_loc, m->loc), "cluster '%s': every size, rate and bandwidth must be positive",
		                   c->name ? c->name : "");
	const ir_plan_opts *p = &m->plan;
	if (p->chunks < 1)
		errs++, diag_error(ir_loc_or(m->plan_loc, m->loc), "plan: chunks must be at least 1");
	if ((p->partition == IR_PART_GIVEN) != (p->ngiven > 0))
		errs++, diag_error(ir_loc_or(m->plan_loc, m->loc), p->ngiven ? "plan: 'given' needs partition=given"
		                                    : "plan: partition=given needs 'given'");
	int64_t sum = 0;
	for (int i = 0; i < p->ngiven; i++) {
		if (p->given[i] < 1)
			errs++, diag_error(ir_loc_or(m->plan_loc, m->loc), "plan: stage %d of 'given' has %lld layers; each needs at least 1",
			                   i, (long long)p->given[i]);
		sum += p->given[i];
	}
	if (p->ngiven && sum != m->nlayers)
		errs++, diag_error(ir_loc_or(m->plan_loc, m->loc), "plan: 'given' covers %lld layers, the model has %d",
		                   (long long)sum, m->nlayers);
	for (int i = 0; i < p->nplacement; i++)
		if (p->placement[i] < 0 || p->placement[i] >= c->devices)
			errs++, diag_error(ir_loc_or(m->plan_loc, m->loc), "plan: placement puts stage %d on device %lld, but the cluster has %lld devices",
			                   i, (long long)p->placement[i], (long long)c->devices);
	return errs;
}

static int verify_stages(const ir_module *m)
{
	int errs = 0, next = 0;
	for (int i = 0; i < m->nstages; i++) {
		const ir_stage *s = &m->stages[i];
		ir_loc loc = loc_or(m->stage_loc, i, m->loc);
		if (s->first != next || s->last < s->first || s->last >= m->nlayers) {
			diag_error(loc, "stage S%d covers L%d..L%d; expected a range starting at L%d within the %d layers",
			           i, s->first, s->last, next, m->nlayers);
			return errs + 1; /* later ranges would only echo this one */
		}
		next = s->last + 1;
		if (s->device == -1 && !m->ndevices)
			continue; /* partitioned, not placed yet */
		if (s->device < 0 || s->device >= ir_pipe_devices(m)) {
			if (s->device < 0)
				diag_error(loc, "stage S%d has a program but no device", i);
			else
				diag_error(loc, "stage S%d is placed on D%d, but the cluster has %lld devices",
				           i, s->device, (long long)ir_pipe_devices(m));
			errs++;
		}
	}
	if (m->nstages && next != m->nlayers) {
		diag_error(loc_or(m->stage_loc, m->nstages - 1, m->loc), "stages end at L%d; layers L%d..L%d belong to no stage", next - 1,
		           next, m->nlayers - 1);
		errs++;
	}
	return errs;
}

static int verify_programs(const ir_module *m)
{
	if (!m->ndevices)
		return 0;
	if (m->ndevices != ir_pipe_devices(m)) {
		diag_error(ir_loc_or(m->cluster_at.devices, ir_loc_or(m->cluster_loc, m->loc)),
		           "%d device programs for a cluster of %lld devices", m->ndevices,
		           (long long)ir_pipe_devices(m));
		return 1;
	}
	if (!m->nstages) {
		diag_error(op_loc_or(m, 0, 0, m->loc), "device programs without stages");
		return 1;
	}
	int64_t mbs = ir_local_mb(m);
	int64_t want = (int64_t)m->nstages * mbs * IR_NOPS, have = 0;
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			have += m->devices[d].ops[i].comm == IR_COMM_NONE;
	if (have != want) {
		diag_error(ir_loc_or(m->microbatches_loc, ir_loc_or(m->train_loc, m->loc)),
		           "the programs hold %lld ops; %d stages x %lld micro-batches need %lld (one F, B and W each)",
		           (long long)have, m->nstages, (long long)mbs, (long long)want);
		/* Go on only if the table below stays small enough. */
		if (want > 4 * have + 1024)
			return 1;
	}
	/* pos[(stage * mbs + mb) * 3 + kind]: index of the op in its program. */
	int *pos = malloc((size_t)want * sizeof *pos);
	if (!pos && want)
		ir_bug("out of memory");
	for (int64_t i = 0; i < want; i++)
		pos[i] = -1;
	int errs = have != want;
	for (int d = 0; d < m->ndevices && errs < 20; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops && errs < 20; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm != IR_COMM_NONE)
				continue; /* verify_comm's */
			ir_loc loc = m->op_loc && m->op_loc[d] ? loc_or(m->op_loc[d], i, m->loc) : m->loc;
			const char *name = ir_op_names[op->kind];
			if (op->stage < 0 || op->stage >= m->nstages) {
				diag_error(loc, "D%d: %s names stage S%d; the plan has %d stages", d, name,
				           op->stage, m->nstages);
				errs++;
				continue;
			}
			if (op->mb < 0 || op->mb >= mbs) {
				diag_error(loc, "D%d: %s S%d names micro-batch m%d; a step has %lld", d, name,
				           op->stage, op->mb, (long long)mbs);
				errs++;
				continue;
			}
			if (m->stages[op->stage].device != d) {
				diag_error(loc, "D%d: %s S%d m%d runs on D%d, but S%d is placed on D%d", d, name,
				           op->stage, op->mb, d, op->stage, m->stages[op->stage].device);
				errs++;
				continue;
			}
			int *slot = &pos[((int64_t)op->stage * mbs + op->mb) * IR_NOPS + op->kind];
			if (*slot >= 0) {
				diag_error(loc, "D%d: second %s S%d m%d (the first is op %d)", d, name,
				           op->stage, op->mb, *slot);
				errs++;
				continue;
			}
			*slot = i;
			/* F before B before W: check against the kinds before this one. */
			for (int k = 0; k < (int)op->kind; k++) {
				int p = pos[((int64_t)op->stage * mbs + op->mb) * IR_NOPS + k];
				if (p < 0) {
					diag_error(loc, "D%d: %s S%d m%d comes before its %s", d, name,
					           op->stage, op->mb, ir_op_names[k]);
					errs++;
					break;
				}
			}
		}
	}
	/* An op's input made on its own device by another stage: the op that
	 * makes it must come first (the same stage's F before B before W is
	 * checked above). */
	for (int d = 0; d < m->ndevices && !errs; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops && errs < 20; i++) {
			const ir_op *op = &dev->ops[i];
			ir_op_kind value = op->kind; /* F reads an activation, B a gradient */
			int from = op->kind == IR_OP_F ? op->stage - 1 : op->stage + 1;
			if (op->comm != IR_COMM_NONE || op->kind == IR_OP_W || from < 0 ||
			    from >= m->nstages || m->stages[from].device != d)
				continue;
			ir_op_kind maker = ir_value_maker(m, value);
			int p = pos[((int64_t)from * mbs + op->mb) * IR_NOPS + maker];
			if (p > i) {
				ir_loc loc = m->op_loc && m->op_loc[d] ? loc_or(m->op_loc[d], i, m->loc) : m->loc;
				diag_error(loc, "D%d: %s S%d m%d comes before %s S%d m%d, which makes its %s "
				                "(S%d and S%d are both on D%d)",
				           d, ir_op_names[op->kind], op->stage, op->mb, ir_op_names[maker], from,
				           op->mb, value == IR_OP_F ? "activation" : "gradient",
				           from < op->stage ? from : op->stage, from < op->stage ? op->stage : from, d);
				errs++;
			}
		}
	}
	for (int64_t i = 0; i < want && errs < 20; i++)
		if (pos[i] < 0) {
			int64_t k = i % IR_NOPS, mb = (i / IR_NOPS) % mbs, s = i / IR_NOPS / mbs;
			diag_error(loc_or(m->stage_loc, (int)s, m->loc), "no %s S%lld m%lld in any program", ir_op_names[k],
			           (long long)s, (long long)mb);
			errs++;
		}
	free(pos);
	return errs;
}

/* A stage's W's run in micro-batch order: the runtime adds weight
 * gradients in that order, which is what makes every plan give the same
 * weights (DESIGN.md, plan independence).  Run after verify_programs found
 * every op in place, so that one counter per stage suffices. */
static int verify_w_order(const ir_module *m)
{
	int *next = calloc((size_t)m->nstages, sizeof *next), errs = 0;
	if (!next)
		ir_bug("out of memory");
	for (int d = 0; d < m->ndevices && errs < 20; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops && errs < 20; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm != IR_COMM_NONE || op->kind != IR_OP_W)
				continue;
			if (op->mb != next[op->stage]) {
				ir_loc loc = m->op_loc && m->op_loc[d] ? loc_or(m->op_loc[d], i, m->loc) : m->loc;
				diag_error(loc, "D%d: W S%d m%d runs before W S%d m%d: a stage's W's run in "
				                "micro-batch order (weight gradients add up in that order, so "
				                "that every plan gives the same weights)",
				           d, op->stage, op->mb, op->stage, next[op->stage]);
				errs++;
				break; /* the first per device: the rest follows from it */
			}
			next[op->stage]++;
		}
	}
	free(next);
	return errs;
}

/* The device that consumes value (kind, stage): F's activation goes to the
 * next stage, B's gradient to the previous one; -1 when none does. */
static int consumer_stage(const ir_module *m, ir_op_kind k, int stage)
{
	if (k == IR_OP_F)
		return stage + 1 < m->nstages ? stage + 1 : -1;
	if (k == IR_OP_B)
		return stage > 0 ? stage - 1 : -1;
	return -1;
}

typedef struct channel_ctx {
	const ir_module *m;
	int a, b;
} channel_ctx;

/* A matched send (op i on a) and receive (op j on b) must move the same
 * value, the same size.  (Under mpi the pairing is by value already.) */
static int channel_pair(void *ctx, int i, int j)
{
	const channel_ctx *c = ctx;
	const ir_module *m = c->m;
	const ir_op *x = &m->devices[c->a].ops[i], *y = &m->devices[c->b].ops[j];
	bool same = x->kind == y->kind && x->stage == y->stage && x->mb == y->mb;
	if (same && x->bytes == y->bytes)
		return 0;
	ir_loc loc = m->op_loc && m->op_loc[c->b] ? loc_or(m->op_loc[c->b], j, m->loc) : m->loc;
	if (same)
		diag_error(loc, "channel D%d -> D%d: %s S%d m%d is sent as %llu bytes but received as %llu",
		           c->a, c->b, ir_value_names[x->kind], x->stage, x->mb,
		           (unsigned long long)x->bytes, (unsigned long long)y->bytes);
	else
		diag_error(loc, "channel D%d -> D%d: D%d sends %s S%d m%d where D%d receives %s S%d m%d; "
		                "a channel is first in, first out",
		           c->a, c->b, c->a, ir_value_names[x->kind], x->stage, x->mb, c->b,
		           ir_value_names[y->kind], y->stage, y->mb);
	return 1;
}

/* Communication (docs/ir.md, "Invariants" 5): every value that crosses
 * devices has one send on its producer's device after the op that makes
 * it, one receive on its consumer's device, matched as the backend matches
 * (ir_channel_pairs: nccl first in, first out per (sender, receiver)
 * channel; mpi by tag) with the same size, and one wait on the consumer's
 * device after the receive and before the op that uses it. */
static int verify_comm(const ir_module *m)
{
	int S = m->nstages, M = (int)ir_local_mb(m), P = m->ndevices, errs = 0;
	size_t nv = (size_t)S * M * 2;
	/* Per value (kind in F/B, stage, mb): positions of its ops. */
	int *snd = malloc(nv * sizeof *snd), *rcv = malloc(nv * sizeof *rcv), *wt = malloc(nv * sizeof *wt);
	/* Per device and compute op: position, to order against. */
	int *cpos = malloc((size_t)S * M * IR_NOPS * sizeof *cpos);
	if (!snd || !rcv || !wt || !cpos)
		ir_bug("out of memory");
	for (size_t i = 0; i < nv; i++)
		snd[i] = rcv[i] = wt[i] = -1;
	for (size_t i = 0; i < (size_t)S * M * IR_NOPS; i++)
		cpos[i] = -1;
#define VAL(k, s, mb) (((size_t)(s) * M + (mb)) * 2 + (k))
#define CPOS(k, s, mb) cpos[((size_t)(s) * M + (mb)) * IR_NOPS + (k)]
	for (int d = 0; d < P; d++)
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			if (op->comm == IR_COMM_NONE)
				CPOS(op->kind, op->stage, op->mb) = i;
		}
	for (int d = 0; d < P && errs < 20; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops && errs < 20; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm == IR_COMM_NONE || ir_is_dp_op(op) || ir_is_tie_op(op))
				continue;
			ir_loc loc = m->op_loc && m->op_loc[d] ? loc_or(m->op_loc[d], i, m->loc) : m->loc;
			const char *cn = ir_comm_names[op->comm];
			int cs = op->stage >= 0 && op->stage < S ? consumer_stage(m, op->kind, op->stage) : -1;
			if (op->kind == IR_OP_W || cs < 0 || op->mb < 0 || op->mb >= M) {
				diag_error(loc, "D%d: %s %s S%d m%d: no such value crosses stages", d, cn,
				           ir_value_names[op->kind], op->stage, op->mb);
				errs++;
				continue;
			}
			int src = m->stages[op->stage].device, dst = m->stages[cs].device;
			size_t v = VAL(op->kind, op->stage, op->mb);
			int want_dev = op->comm == IR_COMM_SEND ? src : dst;
			int want_peer = op->comm == IR_COMM_SEND ? dst : src;
			if (src == dst) {
				diag_error(loc, "D%d: %s of a value that stays on D%d (S%d and S%d share it)", d, cn,
				           src, op->stage, cs);
				errs++;
			} else if (d != want_dev) {
				diag_error(loc, "D%d: %s %s S%d m%d belongs on D%d", d, cn, ir_value_names[op->kind],
				           op->stage, op->mb, want_dev);
				errs++;
			} else if (op->comm != IR_COMM_WAIT && op->peer != want_peer) {
				diag_error(loc, "D%d: %s %s S%d m%d names peer D%d; the value goes D%d -> D%d", d, cn,
				           ir_value_names[op->kind], op->stage, op->mb, op->peer, src, dst);
				errs++;
			} else {
				int *slot = op->comm == IR_COMM_SEND ? &snd[v] : op->comm == IR_COMM_RECV ? &rcv[v] : &wt[v];
				if (*slot >= 0) {
					diag_error(loc, "D%d: second %s %s S%d m%d", d, cn, ir_value_names[op->kind],
					           op->stage, op->mb);
					errs++;
				}
				*slot = i;
			}
		}
	}
	/* Every crossing value: send after its producer, receive, wait after
	 * the receive and before the consumer. */
	for (int s = 0; s < S && !errs; s++)
		for (int k = IR_OP_F; k <= IR_OP_B && !errs; k++) {
			int cs = consumer_stage(m, (ir_op_kind)k, s);
			if (cs < 0 || m->stages[s].device == m->stages[cs].device)
				continue;
			int src = m->stages[s].device, dst = m->stages[cs].device;
			for (int mb = 0; mb < M && errs < 20; mb++) {
				size_t v = VAL(k, s, mb);
				const char *vn = ir_value_names[k];
				int made = CPOS(ir_value_maker(m, (ir_op_kind)k), s, mb);
				int used = CPOS(k == IR_OP_F ? IR_OP_F : IR_OP_B, cs, mb);
				if (snd[v] < 0 || rcv[v] < 0 || wt[v] < 0) {
					/* Point at an op of the value that is there, if any. */
					ir_loc at = m->loc;
					if (snd[v] >= 0 && m->op_loc && m->op_loc[src])
						at = loc_or(m->op_loc[src], snd[v], m->loc);
					else if ((rcv[v] >= 0 || wt[v] >= 0) && m->op_loc && m->op_loc[dst])
						at = loc_or(m->op_loc[dst], rcv[v] >= 0 ? rcv[v] : wt[v], m->loc);
					diag_error(at, "%s S%d m%d goes D%d -> D%d but has no %s", vn, s, mb, src, dst,
					           snd[v] < 0 ? "send" : rcv[v] < 0 ? "receive" : "wait");
					errs++;
				} else if (snd[v] < made) {
					diag_error(op_loc_or(m, src, snd[v], m->loc), "D%d: send %s S%d m%d comes before the op that makes it", src, vn, s, mb);
					errs++;
				} else if (wt[v] < rcv[v] || wt[v] > used) {
					diag_error(op_loc_or(m, dst, wt[v], m->loc), "D%d: wait %s S%d m%d must follow its receive and come before %s S%d m%d",
					           dst, vn, s, mb, ir_op_names[k == IR_OP_F ? IR_OP_F : IR_OP_B], cs, mb);
					errs++;
				}
			}
		}
	/* The backend's matching per channel (nccl: the k-th send from a to b
	 * meets the k-th receive on b from a; mpi: the send and the receive of
	 * one value meet), same value and size. */
	ir_channels *ix = errs ? NULL : ir_channels_index(m);
	for (int a = 0; a < P && !errs; a++)
		for (int b = 0; b < P && !errs; b++) {
			if (a == b)
				continue;
			channel_ctx c = {m, a, b};
			int rc = ir_channel_pairs(m, ix, a, b, channel_pair, &c);
			if (rc == IR_CHANNEL_SEND_LEFT || rc == IR_CHANNEL_RECV_LEFT)
				diag_error(m->loc, "channel D%d -> D%d: %s", a, b,
				           rc == IR_CHANNEL_SEND_LEFT ? "a send has no receive" : "a receive has no send");
			errs += rc != 0;
		}
	ir_channels_free(ix);
#undef VAL
#undef CPOS
	free(snd);
	free(rcv);
	free(wt);
	free(cpos);
	return errs;
}

/* Where a bucket's ops are in its stage's program: -1 when absent. */
typedef struct dp_slot {
	int red, red_wait, upd, ag, ag_wait;
} dp_slot;

static bool o_carried(const ir_op *op)
{
	return op->comm == IR_COMM_WAIT && op->carried;
}

/* "all-reduce S1 b0", as the text names a data-parallel op. */
static const char *dp_name(char *s, size_t n, const ir_op *op)
{
	if (op->comm == IR_COMM_WAIT)
		snprintf(s, n, "wait %s S%d b%d%s", ir_comm_names[op->coll], op->stage, op->mb,
		         op->carried ? " carried" : "");
	else
		snprintf(s, n, "%s S%d b%d", ir_comm_names[op->comm], op->stage, op->mb);
	return s;
}

/* Data-parallel ops (docs/ir.md, "Data-parallel ops"): only with dp > 1; on
 * their stage's device; per stage, buckets b0..bk that cover its layers in
 * order, each with one reduction (all-reduce, or reduce-scatter with the
 * distributed optimizer) after the stage's last W, one wait after it, one
 * update after the wait and, with the distributed optimizer, one
 * all-gather after the update and one wait after that (or, with
 * overlap_param_gather, one carried wait before the stage's first F: the
 * next step's, which completes this post); the collectives' bytes those
 * of their layers' parameters when the costs are known. */
static int verify_dp(const ir_module *m)
{
	int errs = 0, L = m->nlayers, P = m->ndevices;
	bool dist = m->plan.dist_opt, overlap = dist && m->plan.overlap_gather;
	ir_comm red = dist ? IR_COMM_REDUCESCATTER : IR_COMM_ALLREDUCE;
	char x[64], y[64];
	/* One slot per (stage, bucket): stage s's buckets at layers[first + b]. */
	dp_slot *slot = malloc(((size_t)L + 1) * sizeof *slot);
	int *last_w = malloc(((size_t)m->nstages + 1) * sizeof *last_w);
	int *first_f = malloc(((size_t)m->nstages + 1) * sizeof *first_f);
	if (!slot || !last_w || !first_f)
		ir_bug("out of memory");
	for (int l = 0; l < L; l++)
		slot[l] = (dp_slot){-1, -1, -1, -1, -1};
	for (int s = 0; s < m->nstages; s++)
		last_w[s] = first_f[s] = -1;
	for (int d = 0; d < P; d++)
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			if (op->comm == IR_COMM_NONE && op->kind == IR_OP_W)
				last_w[op->stage] = i;
			if (op->comm == IR_COMM_NONE && op->kind == IR_OP_F && first_f[op->stage] < 0)
				first_f[op->stage] = i;
		}
	for (int d = 0; d < P && errs < 20; d++) {
		const ir_device *dev = &m->devices[d];
		for (int i = 0; i < dev->nops && errs < 20; i++) {
			const ir_op *op = &dev->ops[i];
			if (!ir_is_dp_op(op))
				continue;
			ir_loc loc = op_loc_or(m, d, i, m->loc);
			dp_name(x, sizeof x, op);
			if (ir_dp(m) <= 1) {
				diag_error(loc, "D%d: %s: data-parallel ops need a plan with dp > 1", d, x);
				errs++;
				break;
			}
			int s = op->stage;
			if (s < 0 || s >= m->nstages) {
				diag_error(loc, "D%d: %s names stage S%d; the plan has %d stages", d, x, s, m->nstages);
				errs++;
				continue;
			}
			const ir_stage *st = &m->stages[s];
			int nl = st->last - st->first + 1;
			if (st->device != d) {
				diag_error(loc, "D%d: %s belongs on D%d, where S%d is placed", d, x, st->device, s);
				errs++;
				continue;
			}
			if (op->mb < 0 || op->mb >= nl) {
				diag_error(loc, "D%d: %s: S%d's %d layer%s make at most %d buckets", d, x, s, nl,
				           nl == 1 ? "" : "s", nl);
				errs++;
				continue;
			}
			ir_comm c = op->comm == IR_COMM_WAIT ? op->coll : op->comm;
			if ((c == IR_COMM_ALLREDUCE || c == IR_COMM_REDUCESCATTER) && c != red) {
				diag_error(loc, "D%d: %s: %s the distributed optimizer a bucket's reduction is %s",
				           d, x, dist ? "with" : "without", dist ? "a reduce-scatter" : "an all-reduce");
				errs++;
				continue;
			}
			if (c == IR_COMM_ALLGATHER && !dist) {
				diag_error(loc, "D%d: %s: an all-gather needs the distributed optimizer "
				                "(dist_optimizer=on)", d, x);
				errs++;
				continue;
			}
			if (op->comm == IR_COMM_WAIT && op->carried != (c == IR_COMM_ALLGATHER && overlap)) {
				diag_error(loc, "D%d: %s: %s", d, x,
				           c != IR_COMM_ALLGATHER ? "only an all-gather's wait is carried into the next step"
				           : overlap ? "with overlap_param_gather=on an all-gather's wait is carried "
				                       "into the next step (wait all-gather S b carried, before the "
				                       "stage's first F)"
				                     : "a carried wait needs overlap_param_gather=on");
				errs++;
				continue;
			}
			if (op->comm != IR_COMM_WAIT && (op->first < st->first || op->last > st->last ||
			                                 op->first > op->last)) {
				diag_error(loc, "D%d: %s covers L%d..L%d, not within S%d's L%d..L%d", d, x,
				           op->first, op->last, s, st->first, st->last);
				errs++;
				continue;
			}
			dp_slot *b = &slot[st->first + op->mb];
			int *at = op->comm == IR_COMM_UPDATE ? &b->upd
			        : op->comm == IR_COMM_ALLGATHER ? &b->ag
			        : op->comm != IR_COMM_WAIT ? &b->red
			        : c == IR_COMM_ALLGATHER ? &b->ag_wait : &b->red_wait;
			if (*at >= 0) {
				diag_error(loc, "D%d: second %s%s (the first is op %d)", d, x,
				           op->comm == IR_COMM_WAIT || op->comm == IR_COMM_UPDATE ? "" : ": one per bucket",
				           *at);
				errs++;
				continue;
			}
			*at = i;
		}
	}
	if (errs || ir_dp(m) <= 1) {
		free(slot);
		free(last_w);
		free(first_f);
		return errs;
	}
	/* Per stage: its buckets in order, then each bucket's ops in order. */
	for (int s = 0; s < m->nstages && errs < 20; s++) {
		const ir_stage *st = &m->stages[s];
		int d = st->device, nl = st->last - st->first + 1, b = 0;
		const ir_op *ops = m->devices[d].ops;
		ir_loc sloc = loc_or(m->stage_loc, s, m->loc);
		for (int next = st->first; next <= st->last && errs < 20; b++) {
			const dp_slot *k = &slot[st->first + b];
			if (k->red < 0) {
				/* At the bucket's first op that is there, else the stage. */
				int any = k->red_wait >= 0 ? k->red_wait : k->upd >= 0 ? k->upd : k->ag >= 0 ? k->ag : k->ag_wait;
				diag_error(any >= 0 ? op_loc_or(m, d, any, sloc) : sloc,
				           "S%d: layers L%d..L%d are in no bucket: b%d has no %s", s, next, st->last,
				           b, ir_comm_names[red]);
				errs++;
				break;
			}
			const ir_op *r = &ops[k->red];
			ir_loc rloc = op_loc_or(m, d, k->red, m->loc);
			dp_name(x, sizeof x, r);
			if (r->first != next) {
				diag_error(rloc, "D%d: %s covers L%d..L%d; S%d's buckets cover its layers in order, "
				                 "so b%d starts at L%d", d, x, r->first, r->last, s, b, next);
				errs++;
				break;
			}
			next = r->last + 1;
			if (k->red < last_w[s]) {
				diag_error(rloc, "D%d: %s comes before W S%d m%lld, the stage's last W: a bucket is "
				                 "reduced once the step's gradients are all in", d, x, s,
				           (long long)ir_local_mb(m) - 1);
				errs++;
				continue;
			}
			/* Each op after the one before it in the bucket's chain. */
			const struct {
				int at;
				ir_comm comm, coll;
				int after;
				const char *after_what;
			} chain[] = {
				{k->red_wait, IR_COMM_WAIT, red, k->red, dist ? "its reduce-scatter" : "its all-reduce"},
				{k->upd, IR_COMM_UPDATE, IR_COMM_NONE, k->red_wait, "the wait of its reduction"},
				{k->ag, IR_COMM_ALLGATHER, IR_COMM_NONE, k->upd, "its update"},
				{k->ag_wait, IR_COMM_WAIT, IR_COMM_ALLGATHER, k->ag, "its all-gather"},
			};
			int nchain = dist ? 4 : 2;
			for (int j = 0; j < nchain && errs < 20; j++) {
				ir_op want = {.kind = IR_OP_W, .stage = s, .mb = b, .comm = chain[j].comm,
				              .coll = chain[j].coll,
				              .carried = overlap && chain[j].coll == IR_COMM_ALLGATHER};
				dp_name(y, sizeof y, &want);
				if (chain[j].at < 0) {
					char z[64];
					diag_error(op_loc_or(m, d, chain[j].after, m->loc), "D%d: no %s %s %s", d, y,
					           want.carried ? "(before the stage's first F) for" : "after",
					           dp_name(z, sizeof z, &ops[chain[j].after]));
					errs++;
					break;
				}
				if (o_carried(&ops[chain[j].at])) {
					/* The previous step's post completes here, before
					 * anything of the stage reads its parameters. */
					if (first_f[s] >= 0 && chain[j].at > first_f[s]) {
						diag_error(op_loc_or(m, d, chain[j].at, m->loc),
						           "D%d: %s comes after F S%d m%d, the stage's first F: a "
						           "carried wait holds the stage's first F until the previous "
						           "step's all-gather is in", d, y, s, ops[first_f[s]].mb);
						errs++;
						break;
					}
					continue;
				}
				if (chain[j].at < chain[j].after) {
					diag_error(op_loc_or(m, d, chain[j].at, m->loc), "D%d: %s comes before %s", d, y,
					           chain[j].after_what);
					errs++;
					break;
				}
				const ir_op *o = &ops[chain[j].at];
				if (o->comm != IR_COMM_WAIT && (o->first != r->first || o->last != r->last)) {
					diag_error(op_loc_or(m, d, chain[j].at, m->loc),
					           "D%d: %s covers L%d..L%d; its bucket is L%d..L%d", d, y, o->first,
					           o->last, r->first, r->last);
					errs++;
					break;
				}
			}
			/* Bytes, when the bucket's costs are known. */
			bool known = true;
			uint64_t n = 0;
			for (int l = r->first; l <= r->last; l++)
				known &= m->layers[l].cost.known, n = ir_sat_add(n, m->layers[l].cost.params);
			int colls[] = {k->red, dist ? k->ag : -1};
			for (int j = 0; j < 2 && known && errs < 20; j++) {
				if (colls[j] < 0)
					continue;
				const ir_op *o = &ops[colls[j]];
				uint64_t want = ir_coll_bytes(m, o->comm, n);
				if (o->bytes != want) {
					char have[32], need[32];
					ir_fmt_bytes(have, sizeof have, o->bytes);
					ir_fmt_bytes(need, sizeof need, want);
					diag_error(op_loc_or(m, d, colls[j], m->loc),
					           "D%d: %s is %s; the %llu parameters of L%d..L%d need %s (dp=%lld, "
					           "deterministic=%s)", d, dp_name(y, sizeof y, o), have,
					           (unsigned long long)n, o->first, o->last, need, (long long)ir_dp(m),
					           ir_switch_names[m->plan.deterministic != 0]);
					errs++;
				}
			}
		}
		/* Nothing past the last bucket. */
		for (int j = b; j < nl && errs < 20; j++) {
			const dp_slot *k = &slot[st->first + j];
			int any = k->red >= 0 ? k->red : k->red_wait >= 0 ? k->red_wait : k->upd >= 0 ? k->upd
			        : k->ag >= 0 ? k->ag : k->ag_wait;
			if (any >= 0) {
				diag_error(op_loc_or(m, d, any, m->loc), "D%d: %s: S%d's layers end in b%d",
				           d, dp_name(x, sizeof x, &ops[any]), s, b - 1);
				errs++;
			}
		}
	}
	free(slot);
	free(last_w);
	free(first_f);
	return errs;
}

/* "act S1 m3 off=0B size=512KiB live=12..40", as the text form writes it. */
static const char *buf_desc(char *s, size_t n, const ir_buf *b)
{
	char o[32], z[32];
	ir_fmt_bytes(o, sizeof o, b->off);
	ir_fmt_bytes(z, sizeof z, b->size);
	bool value = !ir_buf_is_stash(b->kind);
	snprintf(s, n, "%s%s%s S%d m%d off=%s size=%s live=%d..%d", ir_buf_names[b->kind],
	         value ? " " : "", value ? ir_value_names[b->value] : "", b->stage, b->mb, o, z,
	         b->first, b->last);
	return s;
}

/* The memory plan (docs/ir.md, "Invariants" 6): it belongs to proven
 * programs with costs; each device's buffers are exactly the ones its
 * program needs (ir_live_buffers: kinds, values, live ranges and sizes, in
 * that order); each sits at an aligned offset and fits in its arena; and
 * no two live at the same op share a byte. */
static const ir_buf *by_last_bufs; /* qsort has no context argument */

static int by_last(const void *x, const void *y)
{
	int i = *(const int *)x, j = *(const int *)y;
	int a = by_last_bufs[i].last, b = by_last_bufs[j].last;
	return a != b ? (a < b ? -1 : 1) : i - j;
}

/* The live buffers of the memory plan's sweep: a set of positions in the
 * order of the buffers by offset (then index), a bit each, with a second
 * level that marks the words holding any; the neighbours of a position
 * are found by scanning words, so that inserting, removing and finding
 * take O(n / 4096) at worst, where a sorted array of the live buffers
 * would move O(live) of them per buffer (quadratic under GPipe, where a
 * step's activations are all live at once). */
typedef struct posset {
	uint64_t *w, *top; /* bit p of w: position p is in; bit k of top: word k is not 0 */
	int nw;
} posset;

static void ps_put(posset *s, int p, bool on)
{
	uint64_t b = 1ull << (p & 63);
	int k = p >> 6;
	s->w[k] = on ? s->w[k] | b : s->w[k] & ~b;
	uint64_t t = 1ull << (k & 63);
	s->top[k >> 6] = s->w[k] ? s->top[k >> 6] | t : s->top[k >> 6] & ~t;
}

/* The last position below p in the set (-1 if none). */
static int ps_below(const posset *s, int p)
{
	int k = p >> 6;
	uint64_t m = s->w[k] & ((1ull << (p & 63)) - 1);
	if (m)
		return (k << 6) + 63 - __builtin_clzll(m);
	for (int t = k >> 6; t >= 0; t--) { /* words below k that hold any */
		uint64_t tm = s->top[t];
		if (t == k >> 6)
			tm &= (1ull << (k & 63)) - 1;
		if (tm) {
			int j = (t << 6) + 63 - __builtin_clzll(tm);
			return (j << 6) + 63 - __builtin_clzll(s->w[j]);
		}
	}
	return -1;
}

/* The first position above p in the set (-1 if none). */
static int ps_above(const posset *s, int p)
{
	int k = p >> 6;
	uint64_t m = (p & 63) == 63 ? 0 : s->w[k] & ~((2ull << (p & 63)) - 1);
	if (m)
		return (k << 6) + __builtin_ctzll(m);
	for (int t = k >> 6; t <= (s->nw - 1) >> 6; t++) { /* words above k that hold any */
		uint64_t tm = s->top[t];
		if (t == k >> 6)
			tm &= (k & 63) == 63 ? 0 : ~((2ull << (k & 63)) - 1);
		if (tm) {
			int j = (t << 6) + __builtin_ctzll(tm);
			return (j << 6) + __builtin_ctzll(s->w[j]);
		}
	}
	return -1;
}

static const ir_buf *by_off_bufs; /* qsort has no context argument */
static int by_off(const void *x, const void *y)
{
	int i = *(const int *)x, j = *(const int *)y;
	uint64_t a = by_off_bufs[i].off, b = by_off_bufs[j].off;
	return a != b ? (a < b ? -1 : 1) : i - j;
}

static int verify_memplan(const ir_module *m)
{
	if (!m->proof.proven) {
		diag_error(m->loc, "a memory plan needs proven programs (the 'verify' pass)");
		return 1;
	}
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			diag_error(m->loc, "a memory plan needs the cost of every layer; L%d has none", l);
			return 1;
		}
	for (int s = 0; s + 1 < m->nstages && !ir_lowered(m); s++)
		if (m->stages[s].device != m->stages[s + 1].device) {
			diag_error(m->loc, "a memory plan needs lowered programs (the 'comm' pass): S%d and S%d "
			                   "are on different devices", s, s + 1);
			return 1;
		}
	int errs = 0;
	char x[160], y[160];
	for (int d = 0; d < m->ndevices && errs < 20; d++) {
		const ir_dev_plan *p = &m->memplan[d];
		ir_buf *want;
		int n = ir_live_buffers(m, d, &want), i;
		for (i = 0; i < n && i < p->nbufs; i++) {
			const ir_buf *a = &p->bufs[i], *b = &want[i];
			if (a->kind != b->kind || a->value != b->value || a->stage != b->stage ||
			    a->mb != b->mb || a->first != b->first || a->last != b->last || a->size != b->size)
				break;
		}
		if (i < n || i < p->nbufs) {
			/* A buffer that is missing: at the last one the plan has. */
			ir_loc loc = i < p->nbufs ? loc_or(p->buf_loc, i, m->loc)
			             : p->nbufs ? loc_or(p->buf_loc, p->nbufs - 1, m->loc) : m->loc;
			if (i < n && i < p->nbufs) {
				ir_buf w = want[i];
				w.off = p->bufs[i].off;
				diag_error(loc, "D%d: memplan buffer %d is %s; the program needs %s", d, i,
				           buf_desc(x, sizeof x, &p->bufs[i]), buf_desc(y, sizeof y, &w));
			} else if (i < n) {
				diag_error(loc, "D%d: the memory plan has %d buffers; the program needs %d (next: %s)",
				           d, p->nbufs, n, buf_desc(y, sizeof y, &want[i]));
			} else {
				diag_error(loc, "D%d: the memory plan has %d buffers; the program needs %d", d,
				           p->nbufs, n);
			}
			free(want);
			errs++;
			continue;
		}
		free(want);
		/* The buffers now come in order of their first op: sweep, keeping
		 * the set of those still live by offset.  They do not overlap one
		 * another (or that was reported), so a new buffer overlaps one of
		 * them iff it overlaps its neighbour below or above.  They leave
		 * in order of their last op. */
		int nb = p->nbufs, nw = (nb + 63) / 64 + 1;
		int *order = malloc(((size_t)nb + 1) * sizeof *order);
		int *pos = malloc(((size_t)nb + 1) * sizeof *pos);
		int *dying = malloc(((size_t)nb + 1) * sizeof *dying), k = 0;
		bool *in = calloc((size_t)nb + 1, sizeof *in);
		posset live = {calloc((size_t)nw, sizeof(uint64_t)),
		               calloc((size_t)(nw + 63) / 64, sizeof(uint64_t)), nw};
		if (!order || !pos || !dying || !in || !live.w || !live.top)
			ir_bug("out of memory");
		for (i = 0; i < nb; i++)
			dying[i] = order[i] = i;
		by_last_bufs = p->bufs;
		qsort(dying, (size_t)nb, sizeof *dying, by_last);
		by_off_bufs = p->bufs;
		qsort(order, (size_t)nb, sizeof *order, by_off);
		for (i = 0; i < nb; i++)
			pos[order[i]] = i;
		for (i = 0; i < nb && errs < 20; i++) {
			const ir_buf *b = &p->bufs[i];
			ir_loc loc = loc_or(p->buf_loc, i, m->loc);
			if (b->off % IR_BUF_ALIGN) {
				diag_error(loc, "D%d: buffer %s: an offset must be a multiple of %d bytes", d,
				           buf_desc(x, sizeof x, b), IR_BUF_ALIGN);
				errs++;
				continue;
			}
			if (b->size > p->arena || b->off > p->arena - b->size) {
				char a[32];
				ir_fmt_bytes(a, sizeof a, p->arena);
				diag_error(loc, "D%d: buffer %s does not fit in the arena of %s", d,
				           buf_desc(x, sizeof x, b), a);
				errs++;
				continue;
			}
			for (; k < nb && p->bufs[dying[k]].last < b->first; k++)
				if (in[dying[k]])
					ps_put(&live, pos[dying[k]], false);
			if (!b->size)
				continue;
			int nbr[2] = {ps_below(&live, pos[i]), ps_above(&live, pos[i])};
			for (int j = 0; j < 2 && errs < 20; j++) {
				if (nbr[j] < 0)
					continue;
				const ir_buf *a = &p->bufs[order[nbr[j]]];
				uint64_t lo = a->off > b->off ? a->off : b->off;
				uint64_t hi = a->off + a->size < b->off + b->size ? a->off + a->size : b->off + b->size;
				if (lo < hi) {
					diag_error(loc, "D%d: buffers %s and %s are both live at op %d and overlap in "
					                "bytes %llu..%llu of the arena",
					           d, buf_desc(x, sizeof x, a), buf_desc(y, sizeof y, b), b->first,
					           (unsigned long long)lo, (unsigned long long)hi - 1);
					errs++;
				}
			}
			ps_put(&live, pos[i], true);
			in[i] = true;
		}
		free(order);
		free(pos);
		free(dying);
		free(in);
		free(live.w);
		free(live.top);
	}
	return errs;
}

/* Tied embeddings (docs/ir.md, "Tied embeddings"): with the embedding and
 * the head on two devices, each of the two holds one `tie` of its tied
 * layer (in the layer's stage, naming the other device, with
 * ir_tie_bytes), after its stage's last W, and one `wait tie` of it after
 * that, before the reduction of the layer's bucket; on one device, or
 * untied, none.  With dp > 1 and both on one device, the reductions of
 * their buckets come after both stages' last W (the runtime sums the two
 * copies at the first of them). */
static int verify_tie(const ir_module *m)
{
	int errs = 0, P = m->ndevices, L = m->nlayers;
	bool apart = ir_tie_apart(m);
	int tdev[2] = {ir_tie_device(m, 0), ir_tie_device(m, 1)};
	int stage_of[2] = {0, m->nstages - 1};
	for (int k = 0; k < 2; k++) /* the stages of layers 0 and L-1 */
		for (int s = 0; s < m->nstages; s++)
			if (m->stages[s].first <= (k ? L - 1 : 0) && (k ? L - 1 : 0) <= m->stages[s].last)
				stage_of[k] = s;
	for (int d = 0; d < P && errs < 20; d++) {
		const ir_device *prog = &m->devices[d];
		int post = -1, wait = -1, last_w[2] = {-1, -1};
		for (int i = 0; i < prog->nops; i++) {
			const ir_op *op = &prog->ops[i];
			for (int j = 0; j < 2; j++)
				if (op->comm == IR_COMM_NONE && op->kind == IR_OP_W && op->stage == stage_of[j])
					last_w[j] = i;
		}
		for (int i = 0; i < prog->nops && errs < 20; i++) {
			const ir_op *op = &prog->ops[i];
			ir_loc loc = op_loc_or(m, d, i, m->loc);
			if ((op->comm == IR_COMM_ALLREDUCE || op->comm == IR_COMM_REDUCESCATTER) && m->model.tie)
				for (int j = 0; j < 2; j++) {
					int l = j ? L - 1 : 0;
					bool holds = op->first <= l && l <= op->last;
					bool early = apart ? holds && (post < 0 || wait < 0)
					           : holds && (last_w[0] > i || last_w[1] > i);
					if (early) {
						diag_error(loc, "D%d: %s S%d b%d holds the tied L%d, whose gradient is "
						           "not summed with its copy's %s", d, ir_comm_names[op->comm],
						           op->stage, op->mb, l,
						           apart ? "yet (no `wait tie` before it)"
						                 : "yet (the other copy's W runs after it)");
						errs++;
					}
				}
			if (!ir_is_tie_op(op))
				continue;
			if (!apart) {
				diag_error(loc, "D%d: a tie op, but %s", d,
				           !m->model.tie ? "the model does not tie its embeddings "
				                           "(tie_embeddings=on)"
				                         : "the tied embedding and head are on one device: the "
				                           "runtime sums their gradients there");
				errs++;
				break;
			}
			int j = op->stage == stage_of[0] ? 0 : op->stage == stage_of[1] ? 1 : -1;
			if (j < 0 || tdev[j] != d) {
				diag_error(loc, "D%d: tie S%d: the tied layers are L0 (S%d, on D%d) and L%d (S%d, "
				           "on D%d)", d, op->stage, stage_of[0], tdev[0], L - 1, stage_of[1], tdev[1]);
				errs++;
				continue;
			}
			if (op->comm == IR_COMM_WAIT) {
				if (post < 0 || wait >= 0) {
					diag_error(loc, "D%d: wait tie S%d %s", d, op->stage,
					           post < 0 ? "before its tie" : "twice");
					errs++;
				}
				wait = i;
				continue;
			}
			int l = j ? L - 1 : 0;
			uint64_t want = ir_tie_bytes(m);
			char b[32], w[32];
			ir_fmt_bytes(b, sizeof b, op->bytes);
			ir_fmt_bytes(w, sizeof w, want);
			if (post >= 0) {
				diag_error(loc, "D%d: a second tie", d);
				errs++;
			} else if (op->first != l || op->last != l) {
				diag_error(loc, "D%d: tie S%d L%d: the tied layer of S%d is L%d", d, op->stage,
				           op->first, op->stage, l);
				errs++;
			} else if (op->peer != tdev[1 - j]) {
				diag_error(loc, "D%d: tie S%d names D%d; the other copy (L%d) is on D%d", d,
				           op->stage, op->peer, j ? 0 : L - 1, tdev[1 - j]);
				errs++;
			} else if (op->bytes != want) {
				diag_error(loc, "D%d: tie S%d sums %s; the tied table's gradient is %s (vocab x "
				           "hidden x %d bytes)", d, op->stage, b, w,
				           m->plan.deterministic ? IR_EXACT_VALUE_BYTES : 4);
				errs++;
			} else if (last_w[j] > i) {
				diag_error(loc, "D%d: tie S%d before the stage's last W (op %d): the gradient is "
				           "not complete", d, op->stage, last_w[j]);
				errs++;
			}
			post = i;
		}
		if (!errs && apart && (d == tdev[0] || d == tdev[1]) && (post < 0 || wait < 0)) {
			int j = d == tdev[0] ? 0 : 1;
			diag_error(op_loc_or(m, d, 0, m->loc),
			           "D%d: the tied L%d's copy is on D%d: the program needs `tie S%d L%d D%d` "
			           "after S%d's last W and its `wait tie S%d`", d, j ? L - 1 : 0, tdev[1 - j],
			           stage_of[j], j ? L - 1 : 0, tdev[1 - j], stage_of[j], stage_of[j]);
			errs++;
		}
	}
	return errs;
}

int ir_verify(const ir_module *m)
{
	int errs = verify_header(m);
	if (!errs)
		errs = verify_cluster(m);
	if (!errs)
		errs = ir_check_dp(m, NULL);
	errs += verify_layers(m);
	if (errs)
		return errs;
	errs = verify_stages(m);
	if (errs)
		return errs;
	errs = verify_programs(m);
	if (!errs)
		errs = verify_w_order(m);
	if (!errs && ir_lowered(m))
		errs = verify_comm(m);
	if (!errs && ir_lowered(m) && ir_dp(m) > 1 && m->plan.rank_order == IR_RANKS_AUTO) {
		diag_error(ir_loc_or(m->dp_loc, ir_loc_or(m->plan_loc, m->loc)),
		           "lowered programs with dp > 1 need a rank order (pp-inner or dp-inner): `comm` "
		           "chooses one for rank_order=auto");
		errs++;
	}
	if (!errs && ir_lowered(m))
		errs = verify_dp(m);
	if (!errs && ir_lowered(m))
		errs = verify_tie(m);
	if (!errs && m->memplan)
		errs = verify_memplan(m);
	return errs;
}

void ir_print_summary(FILE *out, const ir_module *m, const char *partition)
{
	int count[IR_NLAYER_KINDS] = {0};
	for (int i = 0; i < m->nlayers; i++)
		count[m->layers[i].kind]++;
	fprintf(out, "model %s: %d layers (", m->model.name, m->nlayers);
	bool sep = false;
	for (int k = 0; k < IR_NLAYER_KINDS; k++)
		if (count[k]) {
			fprintf(out, "%s%d %s", sep ? ", " : "", count[k], ir_layer_kind_names[k]);
			sep = true;
		}
	if (ir_times_only(m)) /* a published timing profile: its shapes are placeholders */
		fprintf(out, "), times only (hidden, vocab and memory not known), seq %lld, %s\n",
		        (long long)m->model.seq, ir_dtype_names[m->model.dtype]);
	else
		fprintf(out, "), hidden %lld, vocab %lld, seq %lld, %s\n", (long long)m->model.hidden,
		        (long long)m->model.vocab, (long long)m->model.seq, ir_dtype_names[m->model.dtype]);
	char mem[32];
	ir_fmt_bytes(mem, sizeof mem, m->cluster.mem);
	fprintf(out, "cluster %s: %lld devices, %lld per node, %s each\n", m->cluster.name,
	        (long long)m->cluster.devices, (long long)m->cluster.per_node, mem);
	fprintf(out, "training: %lld micro-batches of %lld x %lld tokens per step, %lld steps, %s\n",
	        (long long)m->train.microbatches, (long long)m->train.mbs, (long long)m->model.seq,
	        (long long)m->train.steps, ir_optimizer_names[m->train.optimizer]);
	if (m->nstages)
		fprintf(out, "plan: %d stages on %lld devices, partition %s, schedule %s\n", m->nstages,
		        (long long)m->cluster.devices, partition, ir_schedule_names[m->plan.schedule]);
}
