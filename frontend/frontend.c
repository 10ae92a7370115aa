/* frontend.c: the YAML model specification (docs/yaml.md) -> IR module.
 *
 * The file is read into a node tree (ydoc.c) and walked section by section:
 * model, layers (layers.c), training, cluster (cluster.c), plan; then the
 * command-line overrides apply.  Every value is checked where it is read
 * and the first mistake is reported at its node; nothing is loaded past
 * it. */
#include "frontend.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "modelfile.h"

static const ir_loc no_loc; /* "octopipe: error: ..." (command line) */

/* ---- model, training, plan ------------------------------------------------ */

/* on | off | true | false -> 1 | 0 */
static int read_switch(ydoc *d, yaml_node_t *n, const char *what, int *out)
{
	static const char *const names[] = {"off", "on", "false", "true"};
	int i = 0;
	if (ydoc_enum(d, n, what, "value", names, 4, &i) < 0)
		return -1;
	*out = i % 2;
	return 0;
}

/* model := {name, hidden, vocab, seq, dtype?, tie_embeddings?} */
static int read_model(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"name", "hidden", "vocab", "seq", "dtype", "tie_embeddings"};
	keyspec ks = {"in 'model'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_model_info *mi = &f->m->model;
	if (ydoc_walk_map(d, map, "'model'", &ks, k, v) < 0)
		return -1;
	for (int i = 0; i < 4; i++)
		if (!v[i])
			return ydoc_missing(d, map, keys[i], ks.where);
	int dtype = IR_DTYPE_BF16;
	if (ydoc_str(d, v[0], "'name'", &mi->name) < 0 ||
	    ydoc_int(d, v[1], "'hidden'", 1, 1 << 20, &mi->hidden) < 0 ||
	    ydoc_int(d, v[2], "'vocab'", 1, 1 << 24, &mi->vocab) < 0 ||
	    ydoc_int(d, v[3], "'seq'", 1, 1 << 24, &mi->seq) < 0 ||
	    (v[4] && ydoc_enum(d, v[4], "'dtype'", "dtype", ir_dtype_names, IR_NDTYPES, &dtype) < 0) ||
	    (v[5] && read_switch(d, v[5], "'tie_embeddings'", &mi->tie) < 0))
		return -1;
	if (!*mi->name) {
		diag_error(ydoc_at(d, v[0]), "'name' must not be empty");
		return -1;
	}
	mi->dtype = dtype;
	if (v[4])
		f->m->dtype_loc = ydoc_at(d, v[4]);
	return 0;
}

enum { TR_MBS, TR_MB, TR_STEPS, TR_OPT, TR_LR, TR_WD, TR_SEED, TR_DATA, TR_TEXT, TR_TOKENS,
       TR_TOKFMT, TR_WARMUP, TR_DECAY, TR_DECAY_STEPS, TR_MIN_LR, TR_CLIP };

/* Where lr and weight_decay were written (or the mapping, for defaults):
 * ir_check_train's `where`. */
typedef struct train_locs {
	ir_loc at[IR_NTRAIN_CHECKED];
} train_locs;

static ir_loc train_where(void *ctx, ir_train_field f)
{
	return ((train_locs *)ctx)->at[f];
}

/* One token file of 'token_files' (n: its node; fmt: 'token_format', or
 * IR_TOKFMT_AUTO): what the ranks will check at start that a file system
 * can tell now -- readable, regular, not empty, whole tokens of the width
 * its name or 'token_format' gives.  The absolute path into *out (the
 * ranks run elsewhere, and a token file is not copied next to them); the
 * width into *width, which the other files must share; the tokens added
 * to *ntok. */
static int token_file(fe *f, yaml_node_t *n, int fmt, const char **out, int *width,
                      int64_t *ntok)
{
	ydoc *d = f->d;
	const char *file, *shown;
	if (ydoc_str(d, n, "a token file", &file) < 0)
		return -1;
	if (!*file || strchr(file, ',')) {
		diag_error(ydoc_at(d, n), *file ? "a token file name must not contain a comma (the ranks "
		           "take the files as one comma-separated list)" : "a token file name must not be "
		           "empty");
		return -1;
	}
	const char *path = ysrc_resolve(d->a, ysrc_dir_of(d->a, d->ys.src->name), file);
	shown = ysrc_shown(d->a, path);
	char *abs = realpath(path, NULL);
	struct stat st;
	if (!abs || access(abs, R_OK) != 0 || stat(abs, &st) != 0) {
		diag_error(ydoc_at(d, n), "cannot read token file '%s': %s", shown, strerror(errno));
		free(abs);
		return -1;
	}
	*out = arena_strdup(d->a, abs);
	free(abs);
	if (!S_ISREG(st.st_mode)) {
		diag_error(ydoc_at(d, n), "token file '%s' is not a regular file (%s)", shown,
		           src_file_kind(st.st_mode));
		return -1;
	}
	size_t len = strlen(file);
	int w = fmt == IR_TOKFMT_U16 ? 2 : fmt == IR_TOKFMT_U32 ? 4 : 0;
	if (!w) {
		/* The runtime's names (docs/data.md): .bin and .u16, .u32. */
		bool u16 = (len > 4 && (!strcmp(file + len - 4, ".bin") || !strcmp(file + len - 4, ".u16")));
		w = u16 ? 2 : len > 4 && !strcmp(file + len - 4, ".u32") ? 4 : 0;
		if (!w) {
			diag_error(ydoc_at(d, n), "token file '%s': its name says no width (.bin and .u16 are "
			           "uint16, .u32 uint32): give 'token_format'", shown);
			return -1;
		}
	}
	if (*width && w != *width) {
		diag_error(ydoc_at(d, n), "token file '%s' is u%d by its name, the files before it u%d: "
		           "the files of one stream have one width ('token_format')", shown, w * 8,
		           *width * 8);
		return -1;
	}
	*width = w;
	if (st.st_size == 0 || st.st_size % w) {
		diag_error(ydoc_at(d, n), st.st_size ? "token file '%s' has %lld bytes, not a whole number "
		           "of u%d tokens" : "token file '%s' is empty", shown, (long long)st.st_size, w * 8);
		return -1;
	}
	*ntok += st.st_size / w;
	return 0;
}

/* token_files := a file name | [file name, ...]: one comma-separated list
 * of absolute paths into t->token_files. */
static int read_token_files(fe *f, yaml_node_t *v, ir_train *t)
{
	ydoc *d = f->d;
	yaml_node_item_t *it = NULL;
	int n = 1, width = 0;
	int64_t ntok = 0;
	if (v->type == YAML_SEQUENCE_NODE) {
		it = v->data.sequence.items.start;
		if ((n = (int)(v->data.sequence.items.top - it)) == 0) {
			diag_error(ydoc_at(d, v), "'token_files' lists no file");
			return -1;
		}
	}
	const char *list = NULL;
	for (int i = 0; i < n; i++) {
		const char *abs;
		if (token_file(f, it ? ydoc_node(d, it[i]) : v, t->token_format, &abs, &width, &ntok) < 0)
			return -1;
		list = list ? arena_printf(d->a, "%s,%s", list, abs) : abs;
	}
	int64_t need = f->m->model.seq + 1;
	if (ntok < need) {
		diag_error(ydoc_at(d, v), "the token files have %lld tokens, fewer than one sequence "
		           "('seq' + 1 = %lld)", (long long)ntok, (long long)need);
		return -1;
	}
	t->token_files = list;
	return 0;
}

/* training := {microbatch_size, microbatches, steps, optimizer, lr,
 *              weight_decay, seed, data, text_file, token_files,
 *              token_format, warmup, decay, decay_steps, min_lr, clip},
 *              all optional */
static int read_training(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"microbatch_size", "microbatches", "steps",
	                                   "optimizer",       "lr",           "weight_decay",
	                                   "seed",            "data",         "text_file",
	                                   "token_files",     "token_format", "warmup",
	                                   "decay",           "decay_steps",  "min_lr",
	                                   "clip"};
	keyspec ks = {"in 'training'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_train *t = &f->m->train;
	if (ydoc_walk_map(d, map, "'training'", &ks, k, v) < 0)
		return -1;
	int opt = t->optimizer, data = t->data, tokfmt = t->token_format, decay = t->decay;
	int64_t seed = (int64_t)t->seed;
	if ((v[TR_MBS] && ydoc_int(d, v[TR_MBS], "'microbatch_size'", 1, 1 << 20, &t->mbs) < 0) ||
	    (v[TR_MB] && ydoc_int(d, v[TR_MB], "'microbatches'", 1, 1 << 20, &t->microbatches) < 0) ||
	    (v[TR_STEPS] && ydoc_int(d, v[TR_STEPS], "'steps'", 1, INT32_MAX, &t->steps) < 0) ||
	    (v[TR_OPT] && ydoc_enum(d, v[TR_OPT], "'optimizer'", "optimizer", ir_optimizer_names,
	                               IR_NOPTIMIZERS, &opt) < 0) ||
	    (v[TR_LR] && ydoc_num(d, v[TR_LR], "'lr'", YSRC_POSITIVE, &t->lr) < 0) ||
	    (v[TR_WD] && ydoc_num(d, v[TR_WD], "'weight_decay'", YSRC_NONNEG, &t->weight_decay) < 0) ||
	    (v[TR_SEED] && ydoc_int(d, v[TR_SEED], "'seed'", 0, INT64_MAX, &seed) < 0) ||
	    (v[TR_DATA] &&
	     ydoc_enum(d, v[TR_DATA], "'data'", "data source", ir_data_names, IR_NDATAS, &data) < 0) ||
	    (v[TR_TOKFMT] && ydoc_enum(d, v[TR_TOKFMT], "'token_format'", "token format",
	                               ir_token_format_names, IR_NTOKEN_FORMATS, &tokfmt) < 0) ||
	    (v[TR_WARMUP] && ydoc_int(d, v[TR_WARMUP], "'warmup'", 0, INT32_MAX, &t->warmup) < 0) ||
	    (v[TR_DECAY] && ydoc_enum(d, v[TR_DECAY], "'decay'", "decay", ir_decay_names, IR_NDECAYS,
	                              &decay) < 0) ||
	    (v[TR_DECAY_STEPS] &&
	     ydoc_int(d, v[TR_DECAY_STEPS], "'decay_steps'", 1, INT32_MAX, &t->decay_steps) < 0) ||
	    (v[TR_MIN_LR] && ydoc_num(d, v[TR_MIN_LR], "'min_lr'", YSRC_NONNEG, &t->min_lr) < 0) ||
	    (v[TR_CLIP] && ydoc_num(d, v[TR_CLIP], "'clip'", YSRC_NONNEG, &t->clip) < 0))
		return -1;
	t->token_format = tokfmt;
	t->decay = decay;
	t->optimizer = opt;
	t->data = data;
	t->seed = (uint64_t)seed;
	train_locs tl = {{[IR_TRAIN_LR] = v[TR_LR] ? ydoc_at(d, v[TR_LR]) : ydoc_at(d, map),
	                  [IR_TRAIN_WD] = v[TR_WD] ? ydoc_at(d, v[TR_WD]) : ydoc_at(d, map),
	                  [IR_TRAIN_MIN_LR] = v[TR_MIN_LR] ? ydoc_at(d, v[TR_MIN_LR]) : ydoc_at(d, map),
	                  [IR_TRAIN_CLIP] = v[TR_CLIP] ? ydoc_at(d, v[TR_CLIP]) : ydoc_at(d, map)}};
	if (ir_check_train(t, train_where, &tl, ydoc_at(d, map)))
		return -1;
	if (v[TR_MB])
		f->m->microbatches_loc = ydoc_at(d, v[TR_MB]);
	if (data == IR_DATA_TEXT && !v[TR_TEXT]) {
		diag_error(ydoc_at(d, v[TR_DATA]), "'data: text' needs 'text_file'");
		return -1;
	}
	if (data != IR_DATA_TEXT && v[TR_TEXT]) {
		diag_error(ydoc_at(d, k[TR_TEXT]), "'text_file' is only read with 'data: text'");
		return -1;
	}
	if (data == IR_DATA_TOKENS && !v[TR_TOKENS]) {
		diag_error(ydoc_at(d, v[TR_DATA]), "'data: tokens' needs 'token_files'");
		return -1;
	}
	for (int i = TR_TOKENS; i <= TR_TOKFMT; i++)
		if (data != IR_DATA_TOKENS && v[i]) {
			diag_error(ydoc_at(d, k[i]), "'%s' is only read with 'data: tokens'", keys[i]);
			return -1;
		}
	if (v[TR_TOKENS] && read_token_files(f, v[TR_TOKENS], t) < 0)
		return -1;
	if (data == IR_DATA_TEXT && f->m->model.vocab < 256) {
		diag_error(ydoc_at(d, v[TR_DATA]),
		           "'data: text' feeds bytes (token ids 0..255); 'vocab' must be at least 256, "
		           "got %lld",
		           (long long)f->m->model.vocab);
		return -1;
	}
	if (v[TR_TEXT]) {
		const char *file;
		if (ydoc_str(d, v[TR_TEXT], "'text_file'", &file) < 0)
			return -1;
		if (!*file) {
			diag_error(ydoc_at(d, v[TR_TEXT]), "'text_file' must not be empty");
			return -1;
		}
		t->text_file = ysrc_resolve(d->a, ysrc_dir_of(d->a, d->ys.src->name), file);
		if (access(t->text_file, R_OK) != 0) {
			diag_error(ydoc_at(d, v[TR_TEXT]), "cannot read text file '%s': %s",
			           ysrc_shown(d->a, t->text_file), strerror(errno));
			return -1;
		}
		/* What the ranks will read at start (runtime/rt_model.c): a
		 * regular file with at least one sequence, seq + 1 bytes. */
		struct stat st;
		if (stat(t->text_file, &st) != 0) {
			diag_error(ydoc_at(d, v[TR_TEXT]), "cannot read text file '%s': %s",
			           ysrc_shown(d->a, t->text_file), strerror(errno));
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			diag_error(ydoc_at(d, v[TR_TEXT]), "text file '%s' is not a regular file (%s)",
			           ysrc_shown(d->a, t->text_file),
			           src_file_kind(st.st_mode));
			return -1;
		}
		int64_t need = f->m->model.seq + 1;
		if (st.st_size < need) {
			diag_error(ydoc_at(d, v[TR_TEXT]),
			           "text file '%s' has %lld bytes, fewer than one sequence ('seq' + 1 = %lld)",
			           ysrc_shown(d->a, t->text_file), (long long)st.st_size, (long long)need);
			return -1;
		}
	}
	return 0;
}

/* A list of integers in lo..hi into an arena array. */
static int read_int_list(ydoc *d, yaml_node_t *seq, const char *key, int64_t lo, int64_t hi,
                         int64_t **out, int *n)
{
	const char *what = ydoc_quoted(d->a, key);
	if (ydoc_want(d, seq, YAML_SEQUENCE_NODE, what) < 0)
		return -1;
	yaml_node_item_t *it0 = seq->data.sequence.items.start;
	int count = (int)(seq->data.sequence.items.top - it0);
	*out = arena_alloc(d->a, (size_t)(count ? count : 1) * sizeof **out);
	*n = count;
	const char *item = arena_printf(d->a, "a '%s' entry", key);
	for (int i = 0; i < count; i++)
		if (ydoc_int(d, ydoc_node(d, it0[i]), item, lo, hi, &(*out)[i]) < 0)
			return -1;
	return 0;
}

enum { PL_SCHEDULE, PL_CHUNKS, PL_PARTITION, PL_STAGES, PL_PLACEMENT, PL_DP, PL_RANK_ORDER,
       PL_DIST_OPT, PL_OVERLAP, PL_DETERMINISTIC, PL_BUCKET, PL_RECOMPUTE };

/* The words 'recompute' takes (YAML and --recompute): the IR's modes, and
 * auto, the search's choice (scaleout: none or full).  Into the plan. */
static const char *const recompute_words[] = {"none", "full", "selective", "auto"};
_Static_assert(IR_NRECOMPUTES == 3, "recompute_words lists the IR's modes first");

static void recompute_mode(fe *f, ir_loc loc, int i)
{
	f->recompute_given = true;
	f->recompute_at = loc;
	f->m->recompute_auto = i == IR_NRECOMPUTES; /* auto: the search tries the modes */
	f->m->plan.recompute = i == IR_NRECOMPUTES ? IR_RECOMP_NONE : (ir_recompute)i;
}

/* distributed_optimizer := on | off | true | false | auto (the driver's
 * search tries it off and on). */
static int read_dist_opt(fe *f, yaml_node_t *n)
{
	static const char *const names[] = {"off", "on", "false", "true", "auto"};
	int i = 0;
	if (ydoc_enum(f->d, n, "'distributed_optimizer'", "value", names, NELEMS(names), &i) < 0)
		return -1;
	f->m->dist_opt_auto = i == 4;
	f->dist_opt_given = i < 4;
	f->m->plan.dist_opt = i < 4 ? i % 2 : 0;
	return 0;
}

/* dp := integer in 1..65536 | auto (the driver's search chooses it). */
static int read_dp(fe *f, yaml_node_t *n)
{
	const char *s;
	f->dp_written = true;
	if (ydoc_scalar(f->d, n, "'dp'", "an integer or auto", &s) < 0)
		return -1;
	bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	if (plain && strcmp(s, "auto") == 0) {
		f->m->dp_auto = true;
		f->m->plan.dp = 0;
		return 0;
	}
	if (!plain || !(isdigit((unsigned char)s[0]) || s[0] == '+' || s[0] == '-')) {
		diag_error(ydoc_at(f->d, n), "expected an integer or auto for 'dp', got %s",
		           ydoc_describe(f->d, n));
		return -1;
	}
	f->m->dp_auto = false;
	return ydoc_int(f->d, n, "'dp'", 1, 65536, &f->m->plan.dp);
}

/* plan := {schedule, chunks, partition, stage_layers, placement, dp,
 *          rank_order, distributed_optimizer, overlap_param_gather,
 *          deterministic, bucket, recompute}, all optional */
static int read_plan(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"schedule", "chunks", "partition", "stage_layers",
	                                   "placement", "dp", "rank_order", "distributed_optimizer",
	                                   "overlap_param_gather", "deterministic", "bucket", "recompute"};
	keyspec ks = {"in 'plan'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_plan_opts *p = &f->m->plan;
	if (ydoc_walk_map(d, map, "'plan'", &ks, k, v) < 0)
		return -1;
	int sched = p->schedule, part = p->partition;
	if ((v[PL_SCHEDULE] && ydoc_enum(d, v[PL_SCHEDULE], "'schedule'", "schedule",
	                                 ir_schedule_names, IR_NSCHEDULES, &sched) < 0) ||
	    (v[PL_CHUNKS] && ydoc_int(d, v[PL_CHUNKS], "'chunks'", 1, 1024, &p->chunks) < 0) ||
	    (v[PL_PARTITION] && ydoc_enum(d, v[PL_PARTITION], "'partition'", "partition",
	                                    ir_partition_names, IR_NPARTITIONS, &part) < 0))
		return -1;
	p->schedule = sched;
	p->partition = part;
	int order = p->rank_order;
	if (v[PL_DP] && read_dp(f, v[PL_DP]) < 0)
		return -1;
	if (
	    (v[PL_RANK_ORDER] && ydoc_enum(d, v[PL_RANK_ORDER], "'rank_order'", "rank order",
	                                   ir_rank_order_names, IR_NRANK_ORDERS, &order) < 0) ||
	    (v[PL_DIST_OPT] && read_dist_opt(f, v[PL_DIST_OPT]) < 0) ||
	    (v[PL_OVERLAP] && read_switch(d, v[PL_OVERLAP], "'overlap_param_gather'",
	                                  &f->overlap) < 0) ||
	    (v[PL_DETERMINISTIC] && read_switch(d, v[PL_DETERMINISTIC], "'deterministic'",
	                                        &p->deterministic) < 0) ||
	    (v[PL_BUCKET] && ydoc_bytes(d, v[PL_BUCKET], "'bucket'", &p->bucket) < 0))
		return -1;
	p->rank_order = order;
	if (v[PL_OVERLAP])
		f->overlap_given = true, f->overlap_at = ydoc_at(d, k[PL_OVERLAP]);
	int rc = IR_RECOMP_NONE;
	if (v[PL_RECOMPUTE]) {
		if (ydoc_enum(d, v[PL_RECOMPUTE], "'recompute'", "recompute mode", recompute_words,
		              NELEMS(recompute_words), &rc) < 0)
			return -1;
		recompute_mode(f, ydoc_at(d, v[PL_RECOMPUTE]), rc);
	}
	/* Errors about the data-parallel options point at dp, or at the first
	 * of the others given without it. */
	for (int i = PL_DP; i <= PL_BUCKET; i++)
		if (v[i]) {
			f->m->dp_loc = ydoc_at(d, i == PL_DP ? v[i] : k[i]);
			break;
		}
	if (v[PL_CHUNKS])
		f->m->chunks_loc = ydoc_at(d, v[PL_CHUNKS]);
	if (part == IR_PART_GIVEN && !v[PL_STAGES]) {
		diag_error(ydoc_at(d, v[PL_PARTITION]), "'partition: given' needs 'stage_layers'");
		return -1;
	}
	if (v[PL_STAGES]) {
		if (part != IR_PART_GIVEN) {
			diag_error(ydoc_at(d, k[PL_STAGES]), "'stage_layers' needs 'partition: given'");
			return -1;
		}
		if (read_int_list(d, v[PL_STAGES], "stage_layers", 1, MAX_LAYERS, &p->given,
		                  &p->ngiven) < 0)
			return -1;
		int64_t sum = 0;
		for (int i = 0; i < p->ngiven; i++)
			sum += p->given[i];
		if (sum != f->m->nlayers) {
			diag_error(ydoc_at(d, v[PL_STAGES]),
			           "'stage_layers' adds up to %lld layers, but the model has %d", (long long)sum,
			           f->m->nlayers);
			return -1;
		}
	}
	if (v[PL_PLACEMENT]) {
		if (read_int_list(d, v[PL_PLACEMENT], "placement", 0, 65535, &p->placement,
		                  &p->nplacement) < 0)
			return -1;
		f->placement = v[PL_PLACEMENT];
	}
	return 0;
}

/* Placement against the final device count, so after --devices. */
static int check_placement(fe *f)
{
	ir_module *m = f->m;
	ir_plan_opts *p = &m->plan;
	ydoc *d = f->d;
	if (!f->placement || !p->nplacement) /* none, or dropped by --partition */
		return 0;
	int64_t devices = ir_pipe_devices(m);
	int64_t stages = p->partition == IR_PART_GIVEN ? p->ngiven : devices * ir_plan_chunks(p);
	if (stages == 0)
		return 0; /* zbv with a wrong chunk count: the partition pass says so */
	if (p->nplacement != stages) {
		if (p->partition == IR_PART_GIVEN)
			diag_error(ydoc_at(d, f->placement),
			           "'placement' has %d entries, but the plan has %lld stages (one per "
			           "'stage_layers' entry)",
			           p->nplacement, (long long)stages);
		else
			diag_error(ydoc_at(d, f->placement),
			           "'placement' has %d entries, but the plan has %lld stages (%lld devices x "
			           "%lld chunks)",
			           p->nplacement, (long long)stages, (long long)devices,
			           (long long)p->chunks);
		return -1;
	}
	for (int i = 0; i < p->nplacement; i++)
		if (p->placement[i] >= devices) {
			yaml_node_t *e = ydoc_node(d, f->placement->data.sequence.items.start[i]);
			diag_error(ydoc_at(d, e), "'placement' puts stage %d on device %lld, but the cluster has "
			                          "%lld devices (0..%lld)",
			           i, (long long)p->placement[i], (long long)devices, (long long)devices - 1);
			return -1;
		}
	return 0;
}

/* A numeric flag, when given (not 0), into *field if it is within lo..hi. */
static int override_num(const char *flag, int64_t v, int64_t lo, int64_t hi, int64_t *field,
                        ir_loc at)
{
	if (!v)
		return 0;
	if (v < lo || v > hi) {
		ydoc_range_error(at, flag, v, lo, hi);
		return -1;
	}
	*field = v;
	return 0;
}

/* A named flag, when given, into *field if it is one of names[0..n). */
static int override_enum(arena *a, const char *what, const char *v, const char *const *names,
                         int n, int *field)
{
	if (!v)
		return 0;
	int i = ir_lookup(names, n, v);
	if (i < 0) {
		ysrc_unknown(a, no_loc, what, v, NULL, names, n);
		return -1;
	}
	*field = i;
	return 0;
}

static int apply_overrides(fe *f, const fe_overrides *ov)
{
	ir_module *m = f->m;
	if (ov->cluster && fe_module_cluster(m, ov->cluster, ov->cluster_at) < 0)
		return -1;
	if (ov->cluster && ov->cluster_at.src) /* the cluster's errors name the flag */
		m->cluster_loc = ov->cluster_at;
	if (override_num("'--devices'", ov->devices, 1, 65536, &m->cluster.devices, ov->devices_at) < 0 ||
	    override_num("'--microbatches'", ov->microbatches, 1, 1 << 20, &m->train.microbatches,
	                 ov->microbatches_at) < 0)
		return -1;
	if (ov->microbatches)
		m->microbatches_loc = ov->microbatches_at;
	if (ov->devices)
		m->cluster_at.devices = ov->devices_at;
	int sched = (int)m->plan.schedule, backend = (int)m->plan.backend, dtype = (int)m->model.dtype;
	if (override_enum(m->arena, "dtype", ov->dtype, ir_dtype_names, IR_NDTYPES, &dtype) < 0)
		return -1;
	m->model.dtype = (ir_dtype)dtype;
	if (ov->dtype && ov->dtype_at.src)
		m->dtype_loc = ov->dtype_at;
	if (override_enum(m->arena, "schedule", ov->schedule, ir_schedule_names, IR_NSCHEDULES,
	                  &sched) < 0)
		return -1;
	m->plan.schedule = (ir_schedule)sched;
	if (override_num("'--chunks'", ov->chunks, 1, 1024, &m->plan.chunks, ov->chunks_at) < 0)
		return -1;
	if (ov->chunks)
		m->chunks_loc = ov->chunks_at;
	if (ov->partition) {
		int p = ir_lookup(ir_partition_names, IR_NPARTITIONS, ov->partition);
		if (p < 0 || p == IR_PART_GIVEN) {
			static const char *const flags[] = {"uniform", "balanced"};
			ysrc_unknown(m->arena, no_loc, "partition", ov->partition, NULL, flags, 2);
			return -1;
		}
		/* A given partition's own lists do not apply to another one. */
		if (m->plan.partition == IR_PART_GIVEN)
			m->plan.ngiven = 0, m->plan.nplacement = 0;
		m->plan.partition = p;
	}
	if (override_enum(m->arena, "backend", ov->backend, ir_backend_names, IR_NBACKENDS,
	                  &backend) < 0)
		return -1;
	m->plan.backend = (ir_backend)backend;
	if (override_num("'--dp'", ov->dp, 1, 65536, &m->plan.dp, ov->dp_at) < 0)
		return -1;
	if (ov->dp)
		m->dp_auto = false;
	if (ov->dp_auto) {
		m->dp_auto = true;
		m->plan.dp = 0;
	}
	if (ov->dp_at.src)
		m->dp_loc = ov->dp_at;
	int order = (int)m->plan.rank_order;
	if (override_enum(m->arena, "rank order", ov->rank_order, ir_rank_order_names,
	                  IR_NRANK_ORDERS, &order) < 0)
		return -1;
	m->plan.rank_order = (ir_rank_order)order;
	if (ov->dist_opt) {
		m->plan.dist_opt = ov->dist_opt == FE_ON;
		m->dist_opt_auto = ov->dist_opt == FE_AUTO;
		f->dist_opt_given = ov->dist_opt != FE_AUTO;
	}
	if (ov->no_overlap_gather)
		f->overlap_given = true, f->overlap = 0, f->overlap_at = ov->no_overlap_at;
	if (ov->deterministic)
		m->plan.deterministic = 1;
	if (ov->bucket)
		m->plan.bucket = ov->bucket;
	if (ov->recompute) {
		int rc = ir_lookup(recompute_words, NELEMS(recompute_words), ov->recompute);
		if (rc < 0) {
			ysrc_unknown(m->arena, ov->recompute_at, "recompute mode", ov->recompute, NULL,
			             recompute_words, NELEMS(recompute_words));
			return -1;
		}
		recompute_mode(f, ov->recompute_at, rc);
	}
	return 0;
}

/* The data-parallel options settled: one replica is no data parallelism
 * (the options that need replicas are refused, at the dp field), a plan
 * with replicas (or one whose replicas the search chooses) gets the default
 * bucket, and the distributed optimizer overlaps its all-gathers with the
 * next step unless told not to (the switch is refused, where it was
 * written, without it). */
static int settle_dp(fe *f)
{
	ir_module *m = f->m;
	ir_plan_opts *p = &m->plan;
	if (p->dp == 1)
		p->dp = 0;
	/* One replica has no optimizer state to shard: nothing to search. */
	if (!m->dp_auto && p->dp <= 1)
		m->dist_opt_auto = false;
	if ((p->dp > 1 || m->dp_auto) && !p->bucket)
		p->bucket = FE_DEFAULT_BUCKET;
	if (m->dp_auto) {
		/* The wish, for the candidates with the distributed optimizer. */
		p->overlap_gather = !f->overlap_given || f->overlap;
		return ir_check_dp(m, NULL) ? -1 : 0;
	}
	if (f->overlap_given && !(p->dp > 1 && (p->dist_opt || m->dist_opt_auto))) {
		diag_error(f->overlap_at, "overlap_param_gather applies to the distributed optimizer's "
		                          "all-gathers: it needs dp > 1 and distributed_optimizer "
		                          "(--dp D --distributed-optimizer on)");
		return -1;
	}
	/* With the optimizer's sharding searched, the wish, for the candidates
	 * that shard. */
	p->overlap_gather = p->dp > 1 && (p->dist_opt || m->dist_opt_auto) &&
	                    (!f->overlap_given || f->overlap);
	return ir_check_dp(m, NULL) ? -1 : 0;
}

/* ---- the file ---------------------------------------------------------------- */

enum { TOP_MODEL, TOP_LAYERS, TOP_TRAINING, TOP_CLUSTER, TOP_PLAN };

void fe_default_training(ir_module *m)
{
	m->train = (ir_train){.mbs = 1, .microbatches = 8, .steps = 10, .optimizer = IR_OPT_ADAMW,
	                      .lr = 3e-4, .weight_decay = 0.0, .seed = 1, .data = IR_DATA_SYNTHETIC};
	m->plan.schedule = IR_SCHED_TUNED;
	m->plan.chunks = 1;
	m->plan.partition = IR_PART_UNIFORM;
}

/* file := {model, layers, training?, cluster?, plan?}.  The model comes
 * first whatever the order in the file: layers derive from its sizes. */
static int load(ir_module *m, const src_file *src, const fe_overrides *ov)
{
	static const char *const keys[] = {"model", "layers", "training", "cluster", "plan"};
	keyspec ks = {"at the top level", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	static const fe_overrides none;
	ydoc d;
	fe f = {.m = m, .d = &d};
	if (!ov)
		ov = &none;

	m->loc = (ir_loc){src, 1, 1};
	m->model.dtype = IR_DTYPE_BF16;
	fe_default_training(m);

	if (ydoc_load(&d, m->arena, src, "model file") < 0)
		return -1;
	int rc = -1;
	yaml_node_t *root = yaml_document_get_root_node(&d.doc);
	if (root->type != YAML_MAPPING_NODE) {
		diag_error(ydoc_at(&d, root), "expected a mapping at the top level of the model file, got %s",
		           ydoc_describe(&d, root));
		goto out;
	}
	if (ydoc_walk_map(&d, root, "the top level", &ks, k, v) < 0)
		goto out;
	if (!v[TOP_MODEL]) {
		ydoc_missing(&d, root, "model", ks.where);
		goto out;
	}
	/* Section locations, for the passes' diagnostics about them. */
	ir_loc *section[] = {&m->model_loc, NULL, &m->train_loc, &m->cluster_loc, &m->plan_loc};
	for (int i = 0; i < NELEMS(keys); i++)
		if (k[i] && section[i])
			*section[i] = ydoc_at(&d, k[i]);
	if (read_model(&f, v[TOP_MODEL]) < 0)
		goto out;
	if (!v[TOP_LAYERS]) {
		ydoc_missing(&d, root, "layers", ks.where);
		goto out;
	}
	if (fe_read_layers(&f, v[TOP_LAYERS], "'layers'") < 0 || fe_check_ends(&f, v[TOP_LAYERS]) < 0)
		goto out;
	if (v[TOP_TRAINING] && read_training(&f, v[TOP_TRAINING]) < 0)
		goto out;
	if (v[TOP_CLUSTER]) {
		if (ydoc_check_tag(&d, v[TOP_CLUSTER], "'cluster'") < 0 ||
		    fe_read_cluster(m, &d, v[TOP_CLUSTER], ysrc_dir_of(m->arena, src->name)) < 0)
			goto out;
	} else if (!ov->cluster && fe_module_cluster(m, "cpu-local", no_loc) < 0) {
		goto out;
	}
	if (v[TOP_PLAN] && read_plan(&f, v[TOP_PLAN]) < 0)
		goto out;
	if (apply_overrides(&f, ov) < 0)
		goto out;
	/* dp left open: the search chooses it where the caller asks for that
	 * default, unless the plan gives stages or their devices (one P's). */
	if (ov->dp_default_auto && !f.dp_written && !ov->dp && m->plan.partition != IR_PART_GIVEN &&
	    !m->plan.nplacement)
		m->dp_auto = true;
	/* With dp searched, so is the recomputation, unless it is given. */
	if (m->dp_auto && !f.recompute_given)
		m->recompute_auto = true;
	/* And the distributed optimizer, unless on or off is given. */
	if (m->dp_auto && !f.dist_opt_given)
		m->dist_opt_auto = true;
	if (settle_dp(&f) < 0 || check_placement(&f) < 0)
		goto out;
	rc = 0;
out:
	ydoc_free(&d);
	return rc;
}

ir_module *fe_new_module(fe_loader *load_fn, const src_file *src, const char *path,
                         const fe_overrides *ov)
{
	ir_module *m = ir_new();
	if (!src)
		src = src_read(m->arena, path);
	if (!src || load_fn(m, src, ov) < 0) {
		ir_free(m);
		return NULL;
	}
	return m;
}

ir_module *fe_load_src(const src_file *src, const fe_overrides *ov)
{
	return fe_new_module(load, src, NULL, ov);
}

ir_module *fe_load(const char *path, const fe_overrides *ov)
{
	return fe_new_module(load, NULL, path, ov);
}

/* The command-line overrides on a module built some other way (the
 * published JSON profiles, profile_json.c), with fe_load's rules. */
int fe_apply_overrides(ir_module *m, const fe_overrides *ov)
{
	static const fe_overrides none;
	fe f = {.m = m};
	if (apply_overrides(&f, ov ? ov : &none) < 0)
		return -1;
	return settle_dp(&f);
}
