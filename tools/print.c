/* print.c: what the driver prints of a plan: the plan table (stages,
 * devices, first ops), the simulated step, the comparison with the
 * baselines, and the same as one JSON object (docs/cli.md). */
#include "print.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pass.h"

static void stage_kinds(const ir_module *m, const ir_stage *s, char *buf, size_t n)
{
	size_t k = 0;
	for (int l = s->first; l <= s->last && k + 4 < n; l++) {
		ir_layer_kind kind = m->layers[l].kind;
		char c = ir_layer_kind_chars[kind];
		buf[k++] = c ? c : kind == IR_LAYER_EMBEDDING ? 'e' : 'h';
	}
	if (k + 4 >= n && s->last - s->first + 1 > (int)k)
		buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
	buf[k] = 0;
}

static void print_json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* Microseconds as text in the unit that reads best. */
static const char *fmt_time(char *buf, size_t n, double us)
{
	ir_fmt_time(buf, n, us);
	return buf;
}

static void print_array(const char *name, const sim_result *r, double (*get)(const sim_device *))
{
	printf(", \"%s\": [", name);
	for (int d = 0; d < r->ndev; d++)
		printf("%s%.9g", d ? ", " : "", get(&r->dev[d]));
	printf("]");
}

static double busy_s(const sim_device *d) { return d->busy * 1e-6; }
static double warmup_s(const sim_device *d) { return d->warmup * 1e-6; }
static double cooldown_s(const sim_device *d) { return d->cooldown * 1e-6; }
static double residual_s(const sim_device *d) { return d->residual * 1e-6; }
static double peak_mem(const sim_device *d) { return (double)d->peak_mem; }
static double pipeline_s(const sim_device *d) { return d->pipeline * 1e-6; }
static double exposed_s(const sim_device *d) { return d->exposed * 1e-6; }
static double update_s(const sim_device *d) { return d->update * 1e-6; }
static double coll_s(const sim_device *d) { return d->coll * 1e-6; }

/* "2 x 4 (replicas x pipeline devices, pp-inner ranks), distributed
 * optimizer on": the data-parallel shape. */
static const char *dp_shape(char *buf, size_t n, const ir_module *m)
{
	snprintf(buf, n, "%lld x %lld (replicas x pipeline devices, %s ranks), distributed optimizer %s%s",
	         (long long)ir_dp(m),
	         (long long)ir_pipe_devices(m), ir_rank_order_names[m->plan.rank_order],
	         ir_switch_names[m->plan.dist_opt != 0],
	         m->plan.overlap_gather ? " (all-gather overlapped with the next step)" : "");
	return buf;
}

/* The simulator's fields of the JSON object (docs/cli.md). */
static void print_sim_json(const sim_result *r, bool times_only)
{
	printf(", \"makespan_s\": %.9g, \"bubble_ratio\": %.6f, \"tokens_per_s\": %.6g",
	       r->makespan * 1e-6, r->bubble_ratio, r->tokens_per_s);
	if (times_only) /* a timing profile: no FLOPs, no memory */
		printf(", \"mfu\": null, \"peak_mem_bytes\": null");
	else
		printf(", \"mfu\": %.6f", r->mfu), print_array("peak_mem_bytes", r, peak_mem);
	print_array("busy_s", r, busy_s);
	print_array("warmup_s", r, warmup_s);
	print_array("cooldown_s", r, cooldown_s);
	print_array("residual_s", r, residual_s);
	if (r->dp > 1) {
		printf(", \"collectives_s\": %.9g, \"exposed_reduction_s\": %.9g, \"update_s\": %.9g, "
		       "\"exposed_gather_s\": %.9g, \"simulated_steps\": %d",
		       r->coll * 1e-6, r->exposed * 1e-6, r->update * 1e-6, r->gather_exposed * 1e-6,
		       r->steps);
		print_array("pipeline_per_device_s", r, pipeline_s);
		print_array("exposed_reduction_per_device_s", r, exposed_s);
		print_array("update_per_device_s", r, update_s);
		print_array("collectives_per_device_s", r, coll_s);
	}
}

/* The data-parallel search's rows (docs/cli.md, "--dp auto"). */
static void print_scaleout_json(const ir_module *m, const scaleout *so)
{
	printf(", \"dp_search\": [");
	for (int i = 0; i < so->nrows; i++) {
		const scaleout_row *w = &so->rows[i];
		printf("%s{\"dp\": %lld, \"pipeline_devices\": %lld, \"dist_optimizer\": %s, "
		       "\"recompute\": \"%s\", \"planned\": %s, \"fits\": %s, \"chosen\": %s",
		       i ? ", " : "", (long long)w->dp, (long long)w->pp, w->dist_opt ? "true" : "false",
		       ir_recompute_names[w->recompute],
		       w->ok ? "true" : "false", w->fits ? "true" : "false", w->chosen ? "true" : "false");
		if (w->ok) {
			printf(", \"makespan_s\": %.9g, \"bubble_ratio\": %.6f, \"exposed_reduction_s\": %.9g, "
			       "\"update_s\": %.9g, \"recompute_share\": %.6f, \"tokens_per_s\": %.6g, "
			       "\"lower_bound_s\": %.9g",
			       w->step * 1e-6, w->bubble, w->exposed * 1e-6, w->update * 1e-6,
			       w->recompute_share, w->tokens_per_s, w->bound * 1e-6);
			if (ir_times_only(m))
				printf(", \"peak_mem_bytes\": null");
			else
				printf(", \"peak_mem_bytes\": %llu", (unsigned long long)w->peak);
		}
		if (!w->chosen) {
			printf(", \"why\": ");
			print_json_str(w->why);
		}
		printf("}");
	}
	printf("]");
}

/* The model's parameter count: every layer's, as the cost pass counts the
 * tensors the executors hold (docs/layers.md), once costs are known and
 * carry shapes.  false when they do not (no costs yet, or a published
 * timing profile, whose shapes are placeholders). */
static bool model_params(const ir_module *m, uint64_t *out)
{
	uint64_t n = 0;
	for (int l = 0; l < m->nlayers; l++) {
		if (!m->layers[l].cost.known)
			return false;
		n = ir_sat_add(n, m->layers[l].cost.params);
	}
	/* Tied, the head's table is the embedding's: one parameter, counted once. */
	uint64_t table = ir_sat_mul((uint64_t)m->model.vocab, (uint64_t)m->model.hidden);
	if (m->model.tie && n >= table)
		n -= table;
	*out = n;
	return m->nlayers > 0 && !ir_times_only(m);
}

void print_plan_json(const ir_module *m, const sim_result *r, const scaleout *so)
{
	printf("{\"model\": ");
	print_json_str(m->model.name);
	printf(", \"layers\": %d, \"devices\": %lld, \"microbatches\": %lld, \"schedule\": \"%s\", "
	       "\"partition\": \"%s\", \"chunks\": %lld, \"stages\": [",
	       m->nlayers, (long long)m->cluster.devices, (long long)m->train.microbatches,
	       ir_schedule_names[m->plan.schedule], pass_partition_label(m),
	       (long long)ir_plan_chunks(&m->plan));
	for (int s = 0; s < m->nstages; s++) {
		char kinds[256];
		stage_kinds(m, &m->stages[s], kinds, sizeof kinds);
		printf("%s{\"first\": %d, \"last\": %d, \"device\": %d, \"kinds\": \"%s\", "
		       "\"recompute\": \"%s\"}", s ? ", " : "", m->stages[s].first, m->stages[s].last,
		       m->stages[s].device, kinds, ir_recompute_names[m->stages[s].recompute]);
	}
	printf("], \"ops_per_device\": [");
	for (int d = 0; d < m->ndevices; d++)
		printf("%s%d", d ? ", " : "", m->devices[d].nops);
	printf("]");
	if (ir_dp(m) > 1)
		printf(", \"dp\": %lld, \"pipeline_devices\": %lld, \"rank_order\": \"%s\", "
		       "\"dist_optimizer\": %s, \"overlap_param_gather\": %s, \"deterministic\": %s, "
		       "\"bucket_bytes\": %llu",
		       (long long)ir_dp(m), (long long)ir_pipe_devices(m),
		       ir_rank_order_names[m->plan.rank_order], m->plan.dist_opt ? "true" : "false",
		       m->plan.overlap_gather ? "true" : "false",
		       m->plan.deterministic ? "true" : "false", (unsigned long long)m->plan.bucket);
	uint64_t params;
	if (model_params(m, &params))
		printf(", \"parameters\": %llu", (unsigned long long)params);
	else
		printf(", \"parameters\": null");
	if (r)
		print_sim_json(r, ir_times_only(m));
	if (so && so->nrows)
		print_scaleout_json(m, so);
	printf("}\n");
}

/* Bytes as text, or "n/a" where the costs carry times only. */
static const char *fmt_peak(char *buf, size_t n, const ir_module *m, uint64_t bytes)
{
	if (ir_times_only(m))
		snprintf(buf, n, "n/a");
	else
		ir_fmt_size(buf, n, bytes); /* the one size formatter: 954 KiB, not 0.93 MiB */
	return buf;
}

void print_sim_table(const ir_module *m, const sim_result *r)
{
	char t[32], u[32], v[32], w[32], x[32], mfu[32];
	bool times_only = ir_times_only(m);
	if (times_only) /* a timing profile: no FLOPs */
		snprintf(mfu, sizeof mfu, "n/a");
	else
		snprintf(mfu, sizeof mfu, "%.1f %%", 100 * r->mfu);
	printf("\nsimulated step (%s, %lld micro-batches): makespan %s, bubble %.1f %%, "
	       "%.0f tokens/s, MFU %s\n",
	       ir_schedule_names[m->plan.schedule], (long long)m->train.microbatches,
	       fmt_time(t, sizeof t, r->makespan), 100 * r->bubble_ratio, r->tokens_per_s, mfu);
	/* Measured (or hand-written) times faster than the peak allows: the
	 * number is not a utilisation, and is not printed as if it were one. */
	if (!times_only && r->mfu > 1)
		printf("note: MFU above 100 %%: the layers' times are shorter than their FLOPs take at the "
		       "cluster's peak_flops (%g FLOP/s); the peak, or the times, are not this machine's\n",
		       m->cluster.flops);
	bool dp = r->dp > 1;
	if (dp) {
		char shape[192];
		printf("data parallel %s: collectives %s, exposed reduction %s, update %s (the most of "
		       "any device)\n", dp_shape(shape, sizeof shape, m), fmt_time(t, sizeof t, r->coll),
		       fmt_time(u, sizeof u, r->exposed), fmt_time(v, sizeof v, r->update));
		if (m->plan.overlap_gather)
			printf("overlapped parameter all-gather: exposed %s before the stages' first F (of the "
			       "exposed reduction; the steady state, after %d simulated step%s)\n",
			       fmt_time(t, sizeof t, r->gather_exposed), r->steps, r->steps == 1 ? "" : "s");
	}
	printf("%-7s %12s %12s %12s %12s", "device", "busy", "warm-up", "cool-down", "residual");
	if (dp)
		printf(" %12s %12s %12s %12s", "pipeline", "exposed red", "update", "collectives");
	printf(" %12s\n", "peak memory");
	for (int d = 0; d < r->ndev; d++) {
		const sim_device *sd = &r->dev[d];
		bool over = sd->peak_mem > m->cluster.mem;
		printf("D%-6d %12s %12s %12s %12s", d, fmt_time(t, sizeof t, sd->busy),
		       fmt_time(u, sizeof u, sd->warmup), fmt_time(v, sizeof v, sd->cooldown),
		       fmt_time(w, sizeof w, sd->residual));
		if (dp)
			printf(" %12s %12s %12s %12s", fmt_time(t, sizeof t, sd->pipeline),
			       fmt_time(u, sizeof u, sd->exposed), fmt_time(v, sizeof v, sd->update),
			       fmt_time(w, sizeof w, sd->coll));
		printf(" %12s%s\n", fmt_peak(x, sizeof x, m, sd->peak_mem),
		       over ? "  exceeds the device's memory" : "");
	}
}

void plan_compare(const ir_module *m, tune_budget *b, plan_comparison *c)
{
	c->cut = b->cut;
	c->spent = b->spent;
	c->seconds = b->seconds;
	c->effort = tune_effort(b);
	c->keep = b->refused_dev >= 0 ? b->refused_keep : 0;
	c->refused_dev = b->refused_dev;
	c->refused_us = b->refused_us;
	c->refused_need = b->refused_need;
	tune_baselines(m, b, c->rows);
	c->lower_bound = tune_lower_bound(m);
}

void print_comparison(const ir_module *m, const sim_result *r, const plan_comparison *c)
{
	const tune_row *rows = c->rows;
	double lb = c->lower_bound, best = INFINITY;
	for (int i = 0; i < TUNE_NBASELINES; i++)
		if (rows[i].ok && rows[i].fits && rows[i].makespan < best)
			best = rows[i].makespan;
	char t[32], mem[32];
	printf("\n%-14s %12s %8s %12s %10s\n", "plan", "step", "bubble", "peak memory", "tuned is");
	for (int i = 0; i < TUNE_NBASELINES; i++) {
		const tune_row *row = &rows[i];
		if (!row->ok) {
			printf("%-14s %s\n", row->name, row->why);
			continue;
		}
		printf("%-14s %12s %7.1f%% %12s %9.2fx%s\n", row->name, fmt_time(t, sizeof t, row->makespan),
		       100 * row->bubble, fmt_peak(mem, sizeof mem, m, row->peak_mem),
		       row->makespan / r->makespan, row->fits ? "" : "  (exceeds memory)");
	}
	uint64_t peak = 0;
	for (int d = 0; d < r->ndev; d++)
		peak = r->dev[d].peak_mem > peak ? r->dev[d].peak_mem : peak;
	printf("%-14s %12s %7.1f%% %12s\n", "tuned", fmt_time(t, sizeof t, r->makespan),
	       100 * r->bubble_ratio, fmt_peak(mem, sizeof mem, m, peak));
	if (r->makespan <= lb * (1 + 1e-9))
		printf("%-14s %12s   (tuned reaches it: no plan is faster", "lower bound",
		       fmt_time(t, sizeof t, lb));
	else
		printf("%-14s %12s   (tuned is %.1f %% above it", "lower bound", fmt_time(t, sizeof t, lb),
		       100 * (r->makespan / lb - 1));
	if (isfinite(best))
		printf("; %.2fx faster than the best baseline that fits", best / r->makespan);
	printf(")\n");
	if (c->keep > 0) {
		char need[32], has[32];
		ir_fmt_size(need, sizeof need, c->refused_need);
		ir_fmt_size(has, sizeof has, m->cluster.mem);
		printf("the first search's plan (%s) needs %s on D%d once its memory is planned (has %s): "
		       "the plan above comes from a search keeping 1/%d of each device free\n",
		       fmt_time(t, sizeof t, c->refused_us), need, c->refused_dev, has, c->keep);
	}
	if (c->cut)
		printf("the tune budget (--tune-budget %g s) cut the search short: more time may find a "
		       "faster plan\n", c->seconds);
	else if (c->spent)
		printf("the tune effort (--tune-effort %ld plans judged) ended the search: a larger effort "
		       "may find a faster plan\n", c->effort);
}



void print_plan_table(const ir_module *m)
{
	ir_print_summary(stdout, m, pass_partition_label(m));
	uint64_t params;
	if (model_params(m, &params))
		printf("parameters: %llu (%.2fB)\n", (unsigned long long)params, params * 1e-9);
	if (ir_dp(m) > 1) {
		char shape[128], bucket[32];
		ir_fmt_size(bucket, sizeof bucket, m->plan.bucket);
		printf("data parallel: %s, deterministic %s, buckets of %s; the devices below are one "
		       "pipeline's, every replica runs them\n",
		       dp_shape(shape, sizeof shape, m), ir_switch_names[m->plan.deterministic != 0], bucket);
	}
	if (!m->nstages)
		return;
	printf("\n%-6s %-14s %-7s %s\n", "stage", "layers", "device", "kinds (e embedding, h head, "
	       "M mamba, * attention, - mlp, E moe)");
	for (int s = 0; s < m->nstages; s++) {
		const ir_stage *st = &m->stages[s];
		char range[32], dev[16], kinds[64];
		snprintf(range, sizeof range, "L%d..L%d", st->first, st->last);
		if (st->device >= 0)
			snprintf(dev, sizeof dev, "D%d", st->device);
		else
			snprintf(dev, sizeof dev, "-");
		stage_kinds(m, st, kinds, sizeof kinds);
		printf("S%-5d %-14s %-7s %s", s, range, dev, kinds);
		/* What recomputation saves per micro-batch in flight, once the
		 * costs (the stashes) are known. */
		if (st->recompute != IR_RECOMP_NONE && m->layers[st->first].cost.known) {
			char kept[32], act[32];
			ir_fmt_size(kept, sizeof kept, ir_stage_kept(m, s));
			ir_fmt_size(act, sizeof act, ir_stage_act(m, s));
			if (st->recompute == IR_RECOMP_SELECTIVE && ir_stage_kept(m, s) == ir_stage_act(m, s))
				printf("  (recompute selective: no mamba layer, F to B keeps all %s)", act);
			else
				printf("  (recompute %s: F to B keeps %s, not %s, per micro-batch; B runs %s "
				       "again)", ir_recompute_names[st->recompute], kept, act,
				       st->recompute == IR_RECOMP_FULL ? "F" : "the mamba scans' F");
		}
		putchar('\n');
	}
	if (!m->ndevices)
		return;
	printf("\n%-7s %-5s %s%s\n", "device", "ops", m->memplan ? "arena        " : "",
	       "program (first ops: F/B/W stage.mb; send, recv, wait of an act or grad, >/< the peer)");
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		printf("D%-6d %-5d", d, dev->nops);
		char ab[32];
		if (m->memplan) /* the memplan pass: what codegen allocates besides the resident bytes */
			printf(" %-12s", fmt_peak(ab, sizeof ab, m, m->memplan[d].arena));
		for (int i = 0; i < dev->nops && i < 8; i++) {
			/* A send is not its producer's F: send:act0.0>D1 is "send act S0 m0 to D1". */
			const ir_op *op = &dev->ops[i];
			if (op->comm == IR_COMM_NONE)
				printf(" %s%d.%d", ir_op_names[op->kind], op->stage, op->mb);
			else if (ir_is_tie_op(op))
				printf(" %stie%d", op->comm == IR_COMM_WAIT ? "wait:" : "", op->stage);
			else if (ir_is_dp_op(op) && op->comm == IR_COMM_WAIT)
				printf(" wait:%s%d.b%d", ir_comm_names[op->coll], op->stage, op->mb);
			else if (ir_is_dp_op(op))
				printf(" %s:%d.b%d", ir_comm_names[op->comm], op->stage, op->mb);
			else if (op->comm == IR_COMM_WAIT)
				printf(" wait:%s%d.%d", ir_value_names[op->kind], op->stage, op->mb);
			else
				printf(" %s:%s%d.%d%sD%d", ir_comm_names[op->comm], ir_value_names[op->kind],
				       op->stage, op->mb, op->comm == IR_COMM_SEND ? ">" : "<", op->peer);
		}
		printf("%s\n", dev->nops > 8 ? " ..." : "");
	}
}

void print_scaleout_table(const ir_module *m, const scaleout *so)
{
	char t[32], u[32], v[32], w[32], x[32];
	/* What was searched, as the flags that ask for it. */
	char what[128] = "";
	const char *part[3] = {so->dp_searched ? "--dp auto" : NULL,
	                       so->dist_opt_searched ? "--distributed-optimizer auto" : NULL,
	                       so->recompute_searched ? "--recompute auto" : NULL};
	for (int i = 0; i < 3; i++)
		if (part[i])
			snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", *what ? ", " : "",
			         part[i]);
	printf("%s (%s): %d candidates on %lld devices, %lld micro-batches a step in all\n",
	       so->dp_searched           ? "data parallelism"
	       : !so->dist_opt_searched ? "recomputation"
	       : !so->recompute_searched ? "the distributed optimizer"
	                                 : "the distributed optimizer and recomputation",
	       what, so->nrows, (long long)m->cluster.devices, (long long)m->train.microbatches);
	printf("%5s %5s %-9s %-13s %12s %7s %12s %12s %12s %12s %12s  %s\n", "D", "P", "dist-opt",
	       "recompute", "step", "bubble", "exposed red", "update", "peak memory", "tokens/s",
	       "lower bound", "");
	for (int i = 0; i < so->nrows; i++) {
		const scaleout_row *row = &so->rows[i];
		char rc[32];
		if (row->ok && row->recompute != IR_RECOMP_NONE)
			snprintf(rc, sizeof rc, "%s %.0f%%", ir_recompute_names[row->recompute],
			         100 * row->recompute_share);
		else
			snprintf(rc, sizeof rc, "%s", ir_recompute_names[row->recompute]);
		printf("%5lld %5lld %-9s %-13s", (long long)row->dp, (long long)row->pp,
		       row->dp == 1 ? "-" : row->dist_opt ? "on" : "off", rc);
		if (!row->ok) {
			printf(" %s\n", row->why);
			continue;
		}
		printf(" %12s %6.1f%% %12s %12s %12s %12.0f %12s  %s\n", fmt_time(t, sizeof t, row->step),
		       100 * row->bubble, row->dp > 1 ? fmt_time(u, sizeof u, row->exposed) : "-",
		       row->dp > 1 ? fmt_time(v, sizeof v, row->update) : "-",
		       fmt_peak(x, sizeof x, m, row->peak), row->tokens_per_s,
		       fmt_time(w, sizeof w, row->bound), row->chosen ? "chosen" : row->why);
	}
	if (so->chosen >= 0) {
		const scaleout_row *c = &so->rows[so->chosen];
		printf("chosen: D=%lld x P=%lld%s%s, %.1f %% above its lower bound\n", (long long)c->dp,
		       (long long)c->pp, c->dist_opt ? " with the distributed optimizer" : "",
		       c->recompute == IR_RECOMP_FULL        ? ", recomputing every stage"
		       : c->recompute == IR_RECOMP_SELECTIVE ? ", recomputing every stage's Mamba scans"
		                                             : "",
		       100 * (c->step / c->bound - 1));
	}
	printf("\n");
}
