/* test_frontend.c: Check suite "frontend" -- YAML text in, module (or one
 * diagnostic) out.  Models are loaded from strings; presets come from the
 * models directory (OCTOPIPE_MODELS, set by CTest, or the compiled-in one). */
#include "frontend.h"
#include "ir.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static arena *A;

static void setup(void)
{
	A = arena_new();
}

static void teardown(void)
{
	arena_free(A);
	A = NULL;
}

#define HEAD "model: {name: t, hidden: 64, vocab: 256, seq: 64}\n"
#define LAYERS3 "layers: [{kind: embedding}, {kind: mlp, ffn: 128}, {kind: head}]\n"

static ir_module *load_ov(const char *text, const fe_overrides *ov)
{
	return fe_load_src(src_from_string(A, "t.yaml", text), ov);
}

static ir_module *load(const char *text)
{
	ir_module *m = load_ov(text, NULL);
	ck_assert_msg(m != NULL, "load failed for:\n%s", text);
	return m;
}

/* Load text that must fail; returns the first line of the diagnostics
 * (arena string) after checking that exactly the failure was counted. */
static const char *load_fail_ov(const char *text, const fe_overrides *ov)
{
	tu_capture();
	ir_module *m = load_ov(text, ov);
	char *first = tu_release_first_line();
	ck_assert_msg(m == NULL, "load succeeded for:\n%s", text);
	ck_assert_int_gt(diag_errors, 0);
	const char *line = arena_strdup(A, first);
	free(first);
	return line;
}

static const char *load_fail(const char *text)
{
	return load_fail_ov(text, NULL);
}

static const int64_t *attrs(const ir_module *m, int i)
{
	ck_assert_int_lt(i, m->nlayers);
	return m->layers[i].attr;
}

/* ---- what a file loads into ------------------------------------------------ */

START_TEST(test_minimal_defaults)
{
	ir_module *m = load(HEAD LAYERS3);
	ck_assert_str_eq(m->model.name, "t");
	ck_assert_int_eq(m->model.hidden, 64);
	ck_assert_int_eq(m->model.vocab, 256);
	ck_assert_int_eq(m->model.seq, 64);
	ck_assert_int_eq(m->model.dtype, IR_DTYPE_BF16);
	ck_assert_int_eq(m->nlayers, 3);
	ck_assert_int_eq(m->layers[0].kind, IR_LAYER_EMBEDDING);
	ck_assert_int_eq(m->layers[1].kind, IR_LAYER_MLP);
	ck_assert_int_eq(m->layers[2].kind, IR_LAYER_HEAD);
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_FFN], 128);
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_ACT], IR_ACT_SWIGLU);

	const ir_train *t = &m->train;
	ck_assert_int_eq(t->mbs, 1);
	ck_assert_int_eq(t->microbatches, 8);
	ck_assert_int_eq(t->steps, 10);
	ck_assert_int_eq(t->optimizer, IR_OPT_ADAMW);
	ck_assert_double_eq(t->lr, 3e-4);
	ck_assert_double_eq(t->weight_decay, 0.0);
	ck_assert_uint_eq(t->seed, 1);
	ck_assert_int_eq(t->data, IR_DATA_SYNTHETIC);
	ck_assert_ptr_null(t->text_file);

	/* the default cluster is the cpu-local preset */
	ck_assert_str_eq(m->cluster.name, "cpu-local");
	ck_assert_int_ge(m->cluster.devices, 1);

	ck_assert_int_eq(m->plan.schedule, IR_SCHED_TUNED);
	ck_assert_int_eq(m->plan.chunks, 1);
	ck_assert_int_eq(m->plan.partition, IR_PART_UNIFORM);
	ck_assert_int_eq(m->plan.ngiven, 0);
	ck_assert_int_eq(m->plan.nplacement, 0);

	ck_assert_ptr_nonnull(m->loc.src);
	ck_assert_int_eq(m->loc.line, 1);
	ck_assert_int_eq(m->loc.col, 1);
	ir_free(m);
}
END_TEST

START_TEST(test_attention_defaults)
{
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - {kind: attention, heads: 8}\n"
	                         "  - {kind: attention, heads: 8, kv_heads: 2, head_dim: 32}\n"
	                         "  - {kind: attention, heads: 4, head_dim: 16, kv_lora_rank: 32,"
	                         " qk_rope_dim: 8}\n"
	                         "  - kind: head\n");
	const int64_t *a = attrs(m, 1);
	ck_assert_int_eq(a[IR_ATTR_HEADS], 8);
	ck_assert_int_eq(a[IR_ATTR_KV_HEADS], 8);  /* = heads */
	ck_assert_int_eq(a[IR_ATTR_HEAD_DIM], 8);  /* = hidden / heads */
	ck_assert_int_eq(a[IR_ATTR_WINDOW], 0);
	a = attrs(m, 2);
	ck_assert_int_eq(a[IR_ATTR_KV_HEADS], 2);
	ck_assert_int_eq(a[IR_ATTR_HEAD_DIM], 32);
	a = attrs(m, 3);
	ck_assert_int_eq(a[IR_ATTR_KV_LORA_RANK], 32);
	ck_assert_int_eq(a[IR_ATTR_QK_ROPE_DIM], 8);
	ck_assert_int_eq(a[IR_ATTR_V_HEAD_DIM], 0);
	ir_free(m);
}
END_TEST

START_TEST(test_mamba_defaults)
{
	ir_module *m = load("model: {name: t, hidden: 100, vocab: 256, seq: 64}\n"
	                    "layers:\n"
	                    "  - kind: embedding\n"
	                    "  - {kind: mamba, state: 16, head_dim: 25}\n"
	                    "  - {kind: mamba, version: 1, state: 16}\n"
	                    "  - {kind: mamba, state: 8, expand: 1, conv: 2, heads: 4, head_dim: 25,"
	                    " groups: 2}\n"
	                    "  - kind: head\n");
	const int64_t *a = attrs(m, 1);
	ck_assert_int_eq(a[IR_ATTR_VERSION], 2);
	ck_assert_int_eq(a[IR_ATTR_EXPAND], 2);
	ck_assert_int_eq(a[IR_ATTR_CONV], 4);
	ck_assert_int_eq(a[IR_ATTR_HEAD_DIM], 25);
	ck_assert_int_eq(a[IR_ATTR_HEADS], 8); /* 2 * 100 / 25 */
	ck_assert_int_eq(a[IR_ATTR_GROUPS], 1);
	ck_assert_int_eq(a[IR_ATTR_DT_RANK], 0);
	a = attrs(m, 2);
	ck_assert_int_eq(a[IR_ATTR_VERSION], 1);
	ck_assert_int_eq(a[IR_ATTR_DT_RANK], 7); /* ceil(100 / 16) */
	ck_assert_int_eq(a[IR_ATTR_HEADS], 0);
	ck_assert_int_eq(a[IR_ATTR_HEAD_DIM], 0);
	ck_assert_int_eq(a[IR_ATTR_GROUPS], 0);
	a = attrs(m, 3);
	ck_assert_int_eq(a[IR_ATTR_HEADS], 4);
	ck_assert_int_eq(a[IR_ATTR_GROUPS], 2);
	ck_assert_int_eq(a[IR_ATTR_CONV], 2);
	ir_free(m);

	/* head_dim 64 by default */
	m = load(HEAD "layers: [{kind: embedding}, {kind: mamba, state: 4}, {kind: head}]\n");
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_HEAD_DIM], 64);
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_HEADS], 2);
	ir_free(m);
}
END_TEST

START_TEST(test_activations)
{
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - {kind: mlp, ffn: 128, activation: relu2}\n"
	                         "  - {kind: moe, experts: 4, top_k: 1, expert_ffn: 8}\n"
	                         "  - {kind: moe, experts: 4, top_k: 4, expert_ffn: 8, activation: gelu,"
	                         " shared_experts: 2}\n"
	                         "  - kind: head\n");
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_ACT], IR_ACT_RELU2);
	ck_assert_int_eq(attrs(m, 2)[IR_ATTR_ACT], IR_ACT_SWIGLU);
	ck_assert_int_eq(attrs(m, 3)[IR_ATTR_ACT], IR_ACT_GELU);
	ck_assert_int_eq(attrs(m, 3)[IR_ATTR_SHARED_EXPERTS], 2);
	ir_free(m);
}
END_TEST

START_TEST(test_repeat)
{
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - repeat: 3\n"
	                         "    layers:\n"
	                         "      - {kind: attention, heads: 4}\n"
	                         "      - repeat: 2\n"
	                         "        layers: [{kind: mlp, ffn: 32}]\n"
	                         "  - kind: head\n");
	ck_assert_int_eq(m->nlayers, 2 + 3 * 3);
	for (int r = 0; r < 3; r++) {
		ck_assert_int_eq(m->layers[1 + 3 * r].kind, IR_LAYER_ATTENTION);
		ck_assert_int_eq(m->layers[2 + 3 * r].kind, IR_LAYER_MLP);
		ck_assert_int_eq(m->layers[3 + 3 * r].kind, IR_LAYER_MLP);
		/* copies point at the entry they came from */
		ck_assert_int_eq(m->layer_loc[1 + 3 * r].line, 6);
		ck_assert_int_eq(m->layer_loc[2 + 3 * r].line, 8);
	}
	ck_assert_int_eq(m->layers[10].kind, IR_LAYER_HEAD);
	ir_free(m);
}
END_TEST

START_TEST(test_layer_limit)
{
	/* exactly 100000 layers load; one more does not */
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - repeat: 49999\n"
	                         "    layers: [{kind: mlp, ffn: 8}, {kind: mlp, ffn: 8}]\n"
	                         "  - kind: head\n");
	ck_assert_int_eq(m->nlayers, 100000);
	ir_free(m);
	ck_assert_str_eq(load_fail(HEAD "layers:\n"
	                                "  - kind: embedding\n"
	                                "  - repeat: 50000\n"
	                                "    layers: [{kind: mlp, ffn: 8}, {kind: mlp, ffn: 8}]\n"
	                                "  - kind: head\n"),
	                 "t.yaml:4:13: error: 'repeat: 50000' of 2 layers would make 100001 layers; "
	                 "a model has at most 100000");
	ck_assert_str_eq(load_fail(HEAD "layers:\n"
	                                "  - kind: embedding\n"
	                                "  - repeat: 49999\n"
	                                "    layers: [{kind: mlp, ffn: 8}, {kind: mlp, ffn: 8}]\n"
	                                "  - {kind: mlp, ffn: 8}\n"
	                                "  - kind: head\n"),
	                 "t.yaml:7:5: error: too many layers; a model has at most 100000");
}
END_TEST

START_TEST(test_pattern)
{
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - pattern: \"M- *E\"\n"
	                         "    mamba: {state: 16, head_dim: 32}\n"
	                         "    attention: {kind: attention, heads: 4}\n"
	                         "    mlp: {ffn: 16}\n"
	                         "    moe: {experts: 2, top_k: 1, expert_ffn: 8}\n"
	                         "  - kind: head\n");
	static const ir_layer_kind want[] = {IR_LAYER_EMBEDDING, IR_LAYER_MAMBA, IR_LAYER_MLP,
	                                     IR_LAYER_ATTENTION, IR_LAYER_MOE, IR_LAYER_HEAD};
	ck_assert_int_eq(m->nlayers, 6);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(m->layers[i].kind, want[i]);
	ck_assert_int_eq(attrs(m, 1)[IR_ATTR_HEADS], 4);
	ck_assert_int_eq(attrs(m, 3)[IR_ATTR_HEAD_DIM], 16);
	/* each layer points at its character */
	ck_assert_int_eq(m->layer_loc[1].line, 4);
	ck_assert_int_eq(m->layer_loc[1].col, 15);
	ck_assert_int_eq(m->layer_loc[4].col, 19);
	ir_free(m);
}
END_TEST

START_TEST(test_anchors)
{
	ir_module *m = load(HEAD "layers:\n"
	                         "  - kind: embedding\n"
	                         "  - &blk\n"
	                         "    repeat: 2\n"
	                         "    layers:\n"
	                         "      - &a {kind: attention, heads: 16, kv_heads: 4}\n"
	                         "      - &f {kind: mlp, ffn: 256, activation: geglu}\n"
	                         "  - *a\n"
	                         "  - *blk\n"
	                         "  - pattern: '*-'\n"
	                         "    attention: *a\n"
	                         "    mlp: *f\n"
	                         "  - kind: head\n");
	ck_assert_int_eq(m->nlayers, 1 + 4 + 1 + 4 + 2 + 1);
	for (int i = 1; i < m->nlayers - 1; i++) {
		const int64_t *a = attrs(m, i);
		if (m->layers[i].kind == IR_LAYER_ATTENTION) {
			ck_assert_int_eq(a[IR_ATTR_HEADS], 16);
			ck_assert_int_eq(a[IR_ATTR_KV_HEADS], 4);
			ck_assert_int_eq(a[IR_ATTR_HEAD_DIM], 4);
		} else {
			ck_assert_int_eq(m->layers[i].kind, IR_LAYER_MLP);
			ck_assert_int_eq(a[IR_ATTR_ACT], IR_ACT_GEGLU);
		}
	}
	ck_assert_int_eq(m->layers[5].kind, IR_LAYER_ATTENTION);
	ir_free(m);
}
END_TEST

START_TEST(test_training)
{
	ir_module *m = load(HEAD LAYERS3 "training:\n"
	                                 "  microbatch_size: 4\n"
	                                 "  microbatches: 32\n"
	                                 "  steps: 1000\n"
	                                 "  optimizer: sgd\n"
	                                 "  lr: 1.5e-3\n"
	                                 "  weight_decay: 0.1\n"
	                                 "  seed: 9223372036854775807\n");
	ck_assert_int_eq(m->train.mbs, 4);
	ck_assert_int_eq(m->train.microbatches, 32);
	ck_assert_int_eq(m->train.steps, 1000);
	ck_assert_int_eq(m->train.optimizer, IR_OPT_SGD);
	ck_assert_double_eq(m->train.lr, 1.5e-3);
	ck_assert_double_eq(m->train.weight_decay, 0.1);
	ck_assert_uint_eq(m->train.seed, 9223372036854775807ull);
	/* section locations, for the passes' messages */
	ck_assert_int_eq(m->model_loc.line, 1);
	ck_assert_int_eq(m->train_loc.line, 3);
	ck_assert_int_eq(m->train_loc.col, 1);
	ck_assert_ptr_null(m->plan_loc.src);
	ir_free(m);
}
END_TEST

START_TEST(test_text_file)
{
	/* relative to the YAML file's directory */
	const char *dir = fe_models_dir();
	const char *name = arena_printf(A, "%s/some-model.yaml", dir);
	src_file *src = src_from_string(A, name,
	                                HEAD LAYERS3 "training: {data: text, text_file: data/corpus.txt}\n");
	ir_module *m = fe_load_src(src, NULL);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->train.data, IR_DATA_TEXT);
	ck_assert_str_eq(m->train.text_file, arena_printf(A, "%s/data/corpus.txt", dir));
	ir_free(m);
}
END_TEST

START_TEST(test_cluster_preset_override)
{
	ir_module *m = load(HEAD LAYERS3 "cluster:\n"
	                                 "  preset: h100-sxm\n"
	                                 "  devices: 4\n"
	                                 "  memory: 40GiB\n"
	                                 "  intra: {latency: 1.5us}\n");
	ir_cluster ref;
	ck_assert_int_eq(fe_load_cluster(A, "h100-sxm", &ref), 0);
	ck_assert_str_eq(m->cluster.name, "h100-sxm");
	ck_assert_int_eq(m->cluster.devices, 4);
	ck_assert_uint_eq(m->cluster.mem, 40ull << 30);
	ck_assert_int_eq(m->cluster.per_node, ref.per_node);
	ck_assert_double_eq(m->cluster.flops, ref.flops);
	ck_assert_double_eq(m->cluster.membw, ref.membw);
	ck_assert_double_eq(m->cluster.intra.bw, ref.intra.bw); /* kept */
	ck_assert_double_eq(m->cluster.intra.lat, 1.5);         /* overridden */
	ck_assert_double_eq(m->cluster.inter.bw, ref.inter.bw);
	ck_assert_double_eq(m->cluster.inter.lat, ref.inter.lat);
	ir_free(m);

	m = load(HEAD LAYERS3 "cluster: a100\n");
	ck_assert_str_eq(m->cluster.name, "a100");
	ir_free(m);
}
END_TEST

START_TEST(test_cluster_inline_units)
{
	ir_module *m = load(HEAD LAYERS3 "cluster:\n"
	                                 "  devices: 3\n"
	                                 "  devices_per_node: 1\n"
	                                 "  memory: 1.5KiB\n"
	                                 "  peak_flops: 2.5e12\n"
	                                 "  memory_bandwidth: 1e9\n"
	                                 "  intra: {bandwidth: 4e9, latency: 300ns}\n"
	                                 "  inter: {bandwidth: 1e9, latency: 0.002}\n");
	const ir_cluster *c = &m->cluster;
	ck_assert_str_eq(c->name, "inline");
	ck_assert_int_eq(c->devices, 3);
	ck_assert_int_eq(c->per_node, 1);
	ck_assert_uint_eq(c->mem, 1536);
	ck_assert_double_eq(c->flops, 2.5e12);
	ck_assert_double_eq(c->membw, 1e9);
	ck_assert_double_eq(c->intra.bw, 4e9);
	ck_assert_double_eq_tol(c->intra.lat, 0.3, 1e-12);
	ck_assert_double_eq_tol(c->inter.lat, 2000, 1e-9); /* seconds -> microseconds */
	ir_free(m);

	static const struct {
		const char *text;
		uint64_t bytes;
		double us;
	} units[] = {
		{"memory: 80GiB\n  intra: {latency: 5us}", 80ull << 30, 5},
		{"memory: 141GB\n  intra: {latency: 1.5ms}", 141000000000ull, 1500},
		{"memory: 1024B\n  intra: {latency: 2s}", 1024, 2e6},
		{"memory: 512MiB\n  intra: {latency: 0}", 512ull << 20, 0},
		{"memory: 64KB\n  intra: {latency: 3 us}", 64000, 3},
		{"memory: 12345\n  intra: {latency: 1e-6}", 12345, 1},
	};
	for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
		m = load(arena_printf(A, HEAD LAYERS3 "cluster:\n  preset: cpu-local\n  %s\n",
		                      units[i].text));
		ck_assert_uint_eq(m->cluster.mem, units[i].bytes);
		ck_assert_double_eq_tol(m->cluster.intra.lat, units[i].us, 1e-9);
		ir_free(m);
	}
}
END_TEST

START_TEST(test_cluster_file)
{
	char dir[] = "/tmp/octo-fe-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char *path = arena_printf(A, "%s/mine.yaml", dir);
	FILE *f = fopen(path, "w");
	fputs("cluster:\n  preset: cpu-local\n  devices: 7\n", f);
	fclose(f);
	ir_cluster c;
	ck_assert_int_eq(fe_load_cluster(A, path, &c), 0);
	ck_assert_str_eq(c.name, "mine");
	ck_assert_int_eq(c.devices, 7);

	/* from a model file, a relative path is relative to that file */
	src_file *src = src_from_string(A, arena_printf(A, "%s/m.yaml", dir),
	                                HEAD LAYERS3 "cluster: mine.yaml\n");
	ir_module *m = fe_load_src(src, NULL);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->cluster.devices, 7);
	ir_free(m);

	/* an error inside a cluster file points into that file */
	char *broken = arena_printf(A, "%s/broken.yaml", dir);
	f = fopen(broken, "w");
	fputs("cluster: {preset: cpu-local, devices: x}\n", f);
	fclose(f);
	ck_assert_str_eq(load_fail_ov(HEAD LAYERS3, &(fe_overrides){.cluster = broken}),
	                 arena_printf(A, "%s:1:39: error: expected an integer for 'devices', got 'x'",
	                              broken));

	/* a file that names itself as its preset */
	char *loop = arena_printf(A, "%s/loop.yaml", dir);
	f = fopen(loop, "w");
	fputs("cluster:\n  preset: loop.yaml\n", f);
	fclose(f);
	ck_assert_str_eq(load_fail_ov(HEAD LAYERS3, &(fe_overrides){.cluster = loop}),
	                 arena_printf(A, "%s:2:11: error: cluster presets nested more than 8 deep; "
	                                 "do they name each other?",
	                              loop));
	unlink(loop);
	unlink(broken);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_unknown_preset_lists_presets)
{
	char dir[] = "/tmp/octo-fe-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char *cdir = arena_printf(A, "%s/clusters", dir);
	ck_assert_int_eq(mkdir(cdir, 0755), 0);
	static const char *const names[] = {"zeta", "alpha", "mid"};
	for (int i = 0; i < 3; i++) {
		FILE *f = fopen(arena_printf(A, "%s/%s.yaml", cdir, names[i]), "w");
		fputs("cluster: {devices: 1, devices_per_node: 1, memory: 1GiB, peak_flops: 1e9, "
		      "memory_bandwidth: 1e9, intra: {bandwidth: 1e9, latency: 1us}, "
		      "inter: {bandwidth: 1e9, latency: 1us}}\n", f);
		fclose(f);
	}
	const char *saved = getenv("OCTOPIPE_MODELS");
	char *saved_copy = saved ? strdup(saved) : NULL;
	setenv("OCTOPIPE_MODELS", dir, 1);
	ck_assert_str_eq(fe_models_dir(), dir);
	ck_assert_str_eq(load_fail(HEAD LAYERS3 "cluster: alpah\n"),
	                 "t.yaml:3:10: error: unknown cluster preset 'alpah'; known presets: alpha, "
	                 "mid, zeta");
	ir_cluster c;
	ck_assert_int_eq(fe_load_cluster(A, "mid", &c), 0);
	ck_assert_str_eq(c.name, "mid");
	if (saved_copy)
		setenv("OCTOPIPE_MODELS", saved_copy, 1);
	else
		unsetenv("OCTOPIPE_MODELS");
	free(saved_copy);
	for (int i = 0; i < 3; i++)
		unlink(arena_printf(A, "%s/%s.yaml", cdir, names[i]));
	rmdir(cdir);
	rmdir(dir);
}
END_TEST

START_TEST(test_overrides)
{
	fe_overrides ov = {.devices = 6, .microbatches = 12, .cluster = "h200", .schedule = "1f1b"};
	ir_module *m = load_ov(HEAD LAYERS3 "cluster: {preset: a100, devices: 2}\n"
	                                    "training: {microbatches: 3}\n",
	                       &ov);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->cluster.name, "h200"); /* replaced, YAML devices gone */
	ck_assert_int_eq(m->cluster.devices, 6);   /* then --devices */
	ck_assert_int_eq(m->train.microbatches, 12);
	ck_assert_int_eq(m->plan.schedule, IR_SCHED_1F1B);
	ir_free(m);

	fe_overrides bad = {.schedule = "zzz"};
	ck_assert_str_eq(load_fail_ov(HEAD LAYERS3, &bad),
	                 "octopipe: error: unknown schedule 'zzz'; known: 1f1b, gpipe, i1f1b, zbh1, zbh2, zbv, tuned");
	fe_overrides neg = {.devices = -1};
	ck_assert_str_eq(load_fail_ov(HEAD LAYERS3, &neg),
	                 "octopipe: error: '--devices' must be at least 1, got -1");
	fe_overrides nocl = {.cluster = "nope"};
	ck_assert_ptr_nonnull(strstr(load_fail_ov(HEAD LAYERS3, &nocl),
	                             "octopipe: error: unknown cluster preset 'nope'; known presets: "));
}
END_TEST

START_TEST(test_plan)
{
	ir_module *m = load(HEAD "layers: [{kind: embedding}, {kind: mlp, ffn: 8}, {kind: mlp, ffn: 8},"
	                         " {kind: head}]\n"
	                         "cluster: {preset: cpu-local, devices: 2}\n"
	                         "plan:\n"
	                         "  schedule: 1f1b\n"
	                         "  partition: given\n"
	                         "  stage_layers: [1, 2, 1]\n"
	                         "  placement: [1, 0, 1]\n");
	ck_assert_int_eq(m->plan.partition, IR_PART_GIVEN);
	ck_assert_int_eq(m->plan.ngiven, 3);
	ck_assert_int_eq(m->plan.given[0], 1);
	ck_assert_int_eq(m->plan.given[1], 2);
	ck_assert_int_eq(m->plan.given[2], 1);
	ck_assert_int_eq(m->plan.nplacement, 3);
	ck_assert_int_eq(m->plan.placement[0], 1);
	ck_assert_int_eq(m->plan.placement[1], 0);
	ir_free(m);
}
END_TEST

START_TEST(test_placement_after_overrides)
{
	const char *text = HEAD LAYERS3 "cluster: {preset: cpu-local, devices: 2}\n"
	                                "plan: {chunks: 2, placement: [0, 1, 2, 3, 0, 1, 2, 3]}\n";
	ck_assert_str_eq(load_fail(text),
	                 "t.yaml:4:30: error: 'placement' has 8 entries, but the plan has 4 stages "
	                 "(2 devices x 2 chunks)");
	fe_overrides ov = {.devices = 4};
	ir_module *m = load_ov(text, &ov);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->cluster.devices, 4);
	ir_free(m);
	fe_overrides two = {.devices = 2};
	ck_assert_str_eq(load_fail_ov(HEAD LAYERS3 "cluster: {preset: cpu-local, devices: 4}\n"
	                                           "plan: {placement: [0, 3]}\n",
	                              &two),
	                 "t.yaml:4:23: error: 'placement' puts stage 1 on device 3, but the "
	                 "cluster has 2 devices (0..1)");
}
END_TEST

START_TEST(test_file_errors)
{
	tu_capture();
	ir_module *m = fe_load("/nonexistent/dir/model.yaml", NULL);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(diag_errors, 1);
	ck_assert_ptr_nonnull(
	    strstr(tu_captured(), "/nonexistent/dir/model.yaml:1:1: error: cannot open file"));
	tu_release();

	ck_assert_str_eq(load_fail(""), "t.yaml:1:1: error: empty model file");
	ck_assert_str_eq(load_fail("# nothing\n\n# at all\n"), "t.yaml:1:1: error: empty model file");
}
END_TEST

/* ---- one diagnostic per bad input ------------------------------------------- */

static const struct bad {
	const char *text, *error;
} bad[] = {
	{HEAD "layers:\n  - kind: embedding\n  - kind: attention\n    kv_head: 2\n    heads: 4\n"
	      "  - kind: head\n",
	 "t.yaml:5:5: error: unknown key 'kv_head' in attention layer; did you mean 'kv_heads'?"},
	{"modle: {}\n", "t.yaml:1:1: error: unknown key 'modle' at the top level; did you mean 'model'?"},
	{HEAD LAYERS3 "extra: 1\n",
	 "t.yaml:3:1: error: unknown key 'extra' at the top level; valid keys: model, layers, training, "
	 "cluster, plan"},
	{HEAD "layers: [{kind: embedding}, {kind: mlpp}, {kind: head}]\n",
	 "t.yaml:2:36: error: unknown layer kind 'mlpp'; did you mean 'mlp'?"},
	{"model: {name: t, hidden: abc, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: expected an integer for 'hidden', got 'abc'"},
	{"model: {name: t, hidden: 1e3, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: expected an integer for 'hidden', got '1e3'"},
	{"model: {name: t, hidden: 1_000, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: expected an integer for 'hidden', got '1_000'"},
	{"model: {name: t, hidden: 0x40, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: expected an integer for 'hidden', got '0x40'"},
	{"model: {name: t, hidden: , vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: expected an integer for 'hidden', got nothing"},
	{"model: {name: t, hidden: 99999999999999999999, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: integer 99999999999999999999 for 'hidden' is out of range"},
	{"model: {name: t, hidden: -99999999999999999999, vocab: 1, seq: 1}\n",
	 "t.yaml:1:26: error: integer -99999999999999999999 for 'hidden' is out of range"},
	{"model: [1]\n", "t.yaml:1:8: error: expected a mapping for 'model', got a sequence"},
	{"model: x\n", "t.yaml:1:8: error: expected a mapping for 'model', got 'x'"},
	{"- 1\n", "t.yaml:1:1: error: expected a mapping at the top level of the model file, got a "
	          "sequence"},
	{HEAD "layers: {kind: mlp}\n",
	 "t.yaml:2:9: error: expected a sequence for 'layers', got a mapping"},
	{LAYERS3, "t.yaml:1:1: error: missing required key 'model' at the top level"},
	{HEAD, "t.yaml:1:1: error: missing required key 'layers' at the top level"},
	{"model: {hidden: 1, vocab: 1, seq: 1}\n" LAYERS3,
	 "t.yaml:1:8: error: missing required key 'name' in 'model'"},
	{HEAD "layers: [{kind: embedding}, {kind: mlp}, {kind: head}]\n",
	 "t.yaml:2:29: error: missing required key 'ffn' in mlp layer"},
	{HEAD "layers: [{kind: embedding}, {kind: attention}, {kind: head}]\n",
	 "t.yaml:2:29: error: missing required key 'heads' in attention layer"},
	{HEAD "layers: [{kind: embedding}, {kind: moe, top_k: 1, expert_ffn: 8}, {kind: head}]\n",
	 "t.yaml:2:29: error: missing required key 'experts' in moe layer"},
	{HEAD "layers: [{kind: embedding}, {kind: mamba}, {kind: head}]\n",
	 "t.yaml:2:29: error: missing required key 'state' in mamba layer"},
	{HEAD "layers: [{kind: embedding}, {kind: attention, heads: 0}, {kind: head}]\n",
	 "t.yaml:2:54: error: 'heads' must be at least 1, got 0"},
	{HEAD "layers: [{kind: embedding}, {kind: attention, heads: 70000}, {kind: head}]\n",
	 "t.yaml:2:54: error: 'heads' must be at most 65536, got 70000"},
	{HEAD "layers: [{kind: embedding}, {kind: mamba, state: 4, groups: 0}, {kind: head}]\n",
	 "t.yaml:2:61: error: 'groups' must be at least 1, got 0"},
	{HEAD "layers: [{kind: embedding}, {kind: moe, experts: 2, top_k: 3, expert_ffn: 8}, "
	      "{kind: head}]\n",
	 "t.yaml:2:60: error: 'top_k' (3) exceeds 'experts' (2)"},
	{HEAD "layers: [{kind: embedding}, {kind: attention, heads: 8, kv_heads: 3}, {kind: head}]\n",
	 "t.yaml:2:67: error: 'kv_heads' (3) must divide 'heads' (8)"},
	{HEAD "layers: [{kind: embedding}, {kind: attention, heads: 6}, {kind: head}]\n",
	 "t.yaml:2:54: error: hidden size 64 is not divisible by 'heads' (6); give 'head_dim'"},
	{HEAD "layers: [{kind: embedding}, {kind: mamba, state: 4, head_dim: 48}, {kind: head}]\n",
	 "t.yaml:2:63: error: mamba inner size 128 (expand 2 x hidden 64) is not divisible by "
	 "'head_dim' (48)"},
	{HEAD "layers: [{kind: embedding}, {kind: mamba, state: 4, dt_rank: 4}, {kind: head}]\n",
	 "t.yaml:2:53: error: unknown key 'dt_rank' in mamba layer; 'dt_rank' is for version 1, this "
	 "layer is version 2"},
	{HEAD "layers: [{kind: embedding}, {kind: mlp, ffn: 8, activation: silu}, {kind: head}]\n",
	 "t.yaml:2:61: error: unknown activation 'silu'; did you mean 'swiglu'?"},
	{HEAD "layers: [{kind: embedding}, {kind: mlp, ffn: 8, activation: tanh}, {kind: head}]\n",
	 "t.yaml:2:61: error: unknown activation 'tanh'; known: swiglu, geglu, gelu, relu, relu2"},
	{HEAD "layers: [{kind: embedding}, {kind: mlp, ffn: 8}, {kind: head}, {kind: head}]\n",
	 "t.yaml:2:50: error: a 'head' before the last layer; a model has one, as its last layer"},
	{HEAD "layers: [{kind: mlp, ffn: 8}, {kind: embedding}, {kind: head}]\n",
	 "t.yaml:2:10: error: the first layer must be an 'embedding', got 'mlp'"},
	{HEAD "layers: [{kind: embedding}, {kind: mlp, ffn: 8}]\n",
	 "t.yaml:2:29: error: the last layer must be a 'head', got 'mlp'"},
	{HEAD "layers: [{kind: embedding}, {kind: head}]\n",
	 "t.yaml:2:9: error: no layers between the embedding and the head"},
	{HEAD "layers: [{kind: embedding}, {pattern: 'M-Q', mamba: {state: 4}, mlp: {ffn: 8}}, "
	      "{kind: head}]\n",
	 "t.yaml:2:42: error: unknown layer character 'Q' in pattern; expected '*' (attention), "
	 "'-' (mlp), 'E' (moe), 'M' (mamba), 'P' (parallel)"},
	{HEAD "layers: [{kind: embedding}, {pattern: '-M', mlp: {ffn: 8}}, {kind: head}]\n",
	 "t.yaml:2:41: error: pattern uses 'M' but the block has no 'mamba' mapping"},
	{HEAD "layers: &l [{kind: embedding}, {repeat: 2, layers: *l}, {kind: head}]\n",
	 "t.yaml:2:52: error: alias '*l' refers to a node that contains it (a cycle)"},
	{HEAD "layers: [{kind: embedding}, *nope, {kind: head}]\n",
	 "t.yaml:2:29: error: undefined alias '*nope'"},
	{HEAD LAYERS3 "model: {name: u}\n",
	 "t.yaml:3:1: error: duplicate key 'model' at the top level"},
	{HEAD LAYERS3 "training: {lr: .inf}\n", "t.yaml:3:16: error: 'lr' must be finite, got '.inf'"},
	{HEAD LAYERS3 "training: {lr: nan}\n", "t.yaml:3:16: error: expected a number for 'lr', got 'nan'"},
	{HEAD LAYERS3 "training: {lr: -1}\n",
	 "t.yaml:3:16: error: 'lr' must be greater than 0, got -1"},
	{HEAD LAYERS3 "training: {data: text}\n",
	 "t.yaml:3:18: error: 'data: text' needs 'text_file'"},
	{HEAD LAYERS3 "cluster: h100\n",
	 "t.yaml:3:10: error: unknown cluster preset 'h100'; known presets: a100, cpu-local, h100-sxm, "
	 "h200, ideal"},
	{HEAD LAYERS3 "cluster: {preset: cpu-local, memory: 8XiB}\n",
	 "t.yaml:3:38: error: unknown size suffix 'XiB' in '8XiB' for 'memory'; expected B, KiB, MiB, "
	 "GiB, TiB, KB, MB, GB, TB"},
	{HEAD LAYERS3 "cluster: {preset: cpu-local, intra: {latency: 3h}}\n",
	 "t.yaml:3:47: error: unknown time unit 'h' in '3h' for 'latency'; expected s, ms, us, ns"},
	{HEAD LAYERS3 "cluster: {preset: cpu-local, memory: GiB}\n",
	 "t.yaml:3:38: error: expected a byte size for 'memory', got 'GiB'"},
	{HEAD LAYERS3 "plan: {partition: given, stage_layers: [1, 1]}\n",
	 "t.yaml:3:40: error: 'stage_layers' adds up to 2 layers, but the model has 3"},
	{HEAD LAYERS3 "plan: {partition: given, stage_layers: [3, 0]}\n",
	 "t.yaml:3:44: error: a 'stage_layers' entry must be at least 1, got 0"},
	{HEAD LAYERS3 "plan: {stage_layers: [3]}\n",
	 "t.yaml:3:8: error: 'stage_layers' needs 'partition: given'"},
	{HEAD LAYERS3 "plan: {schedule: zzz}\n",
	 "t.yaml:3:18: error: unknown schedule 'zzz'; known: 1f1b, gpipe, i1f1b, zbh1, zbh2, zbv, tuned"},
	{HEAD "layers:\n\t- kind: embedding\n",
	 "t.yaml:3:1: error: tab character where YAML expects indentation or a value; indent with "
	 "spaces"},
	{"model: {name: \"t}\n",
	 "t.yaml:2:1: error: found unexpected end of stream while scanning a quoted scalar"},
	{HEAD "layers: [!!str x]\n",
	 "t.yaml:2:10: error: expected a mapping for a layer, got 'x'"},
	{HEAD "layers: [{kind: embedding}, {kind: attention, heads: !!int 4}, {kind: head}]\n",
	 "t.yaml:2:54: error: unsupported tag '!!int' on 'heads'; tags are not part of the format"},
	{HEAD LAYERS3 "---\nmodel: {}\n",
	 "t.yaml:3:1: error: a second YAML document; a model file holds one"},
	{"model: {name: t, hidden: 64, vocab: 256, seq: 64, dtype: fp8}\n" LAYERS3,
	 "t.yaml:1:58: error: unknown dtype 'fp8'; known: f32, bf16, f16"},
	{"model: {name: \"caf\xc3\xa9\", hidden: x, vocab: 1, seq: 1}\n",
	 "t.yaml:1:32: error: expected an integer for 'hidden', got 'x'"},
	{"model: {name: t\xff}\n",
	 "t.yaml:1:16: error: invalid leading UTF-8 octet (byte 0xFF); the file must be UTF-8 text"},
};

START_TEST(test_bad)
{
	ck_assert_str_eq(load_fail(bad[_i].text), bad[_i].error);
}
END_TEST

static Suite *frontend_suite(void)
{
	Suite *s = suite_create("frontend");
	TCase *tc = tcase_create("load");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_minimal_defaults);
	tcase_add_test(tc, test_attention_defaults);
	tcase_add_test(tc, test_mamba_defaults);
	tcase_add_test(tc, test_activations);
	tcase_add_test(tc, test_repeat);
	tcase_add_test(tc, test_layer_limit);
	tcase_add_test(tc, test_pattern);
	tcase_add_test(tc, test_anchors);
	tcase_add_test(tc, test_training);
	tcase_add_test(tc, test_text_file);
	tcase_add_test(tc, test_cluster_preset_override);
	tcase_add_test(tc, test_cluster_inline_units);
	tcase_add_test(tc, test_cluster_file);
	tcase_add_test(tc, test_unknown_preset_lists_presets);
	tcase_add_test(tc, test_overrides);
	tcase_add_test(tc, test_plan);
	tcase_add_test(tc, test_placement_after_overrides);
	tcase_add_test(tc, test_file_errors);
	suite_add_tcase(s, tc);

	TCase *tb = tcase_create("bad");
	tcase_add_checked_fixture(tb, setup, teardown);
	tcase_add_loop_test(tb, test_bad, 0, (int)(sizeof bad / sizeof *bad));
	suite_add_tcase(s, tb);
	return s;
}

int main(void)
{
	return tu_run(frontend_suite());
}
