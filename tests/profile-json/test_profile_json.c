/* test_profile_json.c: Check suite "profile_json" -- the published JSON
 * timing profiles as modules (frontend/profile_json.c, docs/profile.md
 * "Published profiles").  The JSON texts are written here, so the suite
 * needs nothing outside the repository; the `ideal` and `h100-sxm` presets
 * come from the models directory (OCTOPIPE_MODELS, set by CTest). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend.h"
#include "pass.h"
#include "simulate.h"
#include "testutil.h"
#include "tune.h"

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

/* Every pattern character, each timed: the times tell the kinds apart. */
#define ALL_KINDS                                                                                  \
	"{\n"                                                                                          \
	"  \"pattern\": \"EM*-#TL\",\n"                                                                \
	"  \"forward_ms\": {\"E\": 2.3148, \"M\": 1.1057, \"*\": 0.9945, \"-\": 0.9658, \"#\": 2.8529,"  \
	" \"T\": 1.7372, \"L\": 9.5306},\n"                                                            \
	"  \"backward_ms\": {\"E\": 1.6364, \"M\": 2.1519, \"*\": 0.9133, \"-\": 0.899, \"#\": 0.6675,"  \
	" \"T\": 1.9665, \"L\": 7.3188},\n"                                                            \
	"  \"weight_ms\": {\"E\": 0.0001, \"M\": 0.5065, \"*\": 0.1971, \"-\": 0.868, \"#\": 2.3108,"    \
	" \"T\": 1.0829, \"L\": 0.0001}\n"                                                             \
	"}\n"

/* Four layers of equal times: F 1 ms, B 2 ms, W 1 ms. */
#define EVEN(pattern)                                                                              \
	"{\"pattern\": \"" pattern "\",\n"                                                             \
	" \"forward_ms\": {\"E\": 1, \"-\": 1, \"L\": 1},\n"                                           \
	" \"backward_ms\": {\"E\": 2, \"-\": 2, \"L\": 2},\n"                                          \
	" \"weight_ms\": {\"E\": 1, \"-\": 1, \"L\": 1}}\n"

static ir_module *load_ov(const char *name, const char *text, const fe_overrides *ov)
{
	return fe_load_profile_model_src(src_from_string(A, name, text), ov);
}

static ir_module *load(const char *text, const fe_overrides *ov)
{
	ir_module *m = load_ov("t.json", text, ov);
	ck_assert_msg(m != NULL, "load failed for:\n%s", text);
	return m;
}

/* The first diagnostic line of a load that must fail. */
static const char *load_fail(const char *text, const fe_overrides *ov)
{
	tu_capture();
	ir_module *m = load_ov("t.json", text, ov);
	char *first = tu_release_first_line();
	ck_assert_msg(m == NULL, "load succeeded for:\n%s", text);
	ck_assert_int_gt(diag_errors, 0);
	const char *line = arena_strdup(A, first);
	free(first);
	return line;
}

static void assert_cost(const ir_layer *l, double f, double b, double w)
{
	ck_assert(l->cost.known);
	ck_assert_double_eq_tol(l->cost.f, f, 1e-9);
	ck_assert_double_eq_tol(l->cost.b, b, 1e-9);
	ck_assert_double_eq_tol(l->cost.w, w, 1e-9);
	ck_assert_double_eq(l->cost.flops, 0);
	ck_assert_uint_eq(l->cost.act, 0);
	ck_assert_uint_eq(l->cost.wstash, 0);
	ck_assert_uint_eq(l->cost.params, 0);
	ck_assert_uint_eq(l->cost.resident, 0);
}

/* ---- what a profile loads into ---------------------------------------------- */

START_TEST(test_kinds_and_costs)
{
	ir_module *m = load_ov("profiles/nemotron-h-8B.json", ALL_KINDS, NULL);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->model.name, "nemotron-h-8B");
	static const ir_layer_kind want[] = {IR_LAYER_EMBEDDING, IR_LAYER_MAMBA, IR_LAYER_ATTENTION,
	                                     IR_LAYER_MLP,       IR_LAYER_MOE,   IR_LAYER_ATTENTION,
	                                     IR_LAYER_HEAD};
	ck_assert_int_eq(m->nlayers, 7);
	for (int i = 0; i < 7; i++)
		ck_assert_int_eq(m->layers[i].kind, want[i]);
	/* ms -> us, to the nanosecond; 0.0001 ("negligible") kept as given. */
	assert_cost(&m->layers[0], 2314.8, 1636.4, 0.1);
	assert_cost(&m->layers[1], 1105.7, 2151.9, 506.5);
	assert_cost(&m->layers[2], 994.5, 913.3, 197.1);
	assert_cost(&m->layers[3], 965.8, 899, 868);
	assert_cost(&m->layers[4], 2852.9, 667.5, 2310.8);
	assert_cost(&m->layers[5], 1737.2, 1966.5, 1082.9); /* T: the whole layer */
	assert_cost(&m->layers[6], 9530.6, 7318.8, 0.1);
	/* Placeholder shapes, valid with hidden 1. */
	ck_assert_int_eq(m->layers[1].attr[IR_ATTR_VERSION], 2);
	ck_assert_int_eq(m->layers[1].attr[IR_ATTR_HEADS], 1);
	ck_assert_int_eq(m->layers[2].attr[IR_ATTR_KV_HEADS], 1);
	ck_assert_int_eq(m->layers[3].attr[IR_ATTR_FFN], 1);
	ck_assert_int_eq(m->layers[4].attr[IR_ATTR_EXPERTS], 1);
	/* Each layer at its pattern character. */
	ck_assert_int_eq(m->layer_loc[4].line, 2);
	ck_assert_int_eq(m->layer_loc[4].col, 19);
	/* The header: time only, on the ideal cluster, the model file's defaults. */
	ck_assert_int_eq(m->model.hidden, 1);
	ck_assert_int_eq(m->model.vocab, 1);
	ck_assert_int_eq(m->model.seq, 4096);
	ck_assert_int_eq(m->model.dtype, IR_DTYPE_BF16);
	ck_assert_str_eq(m->cluster.name, "ideal");
	ck_assert_uint_eq(m->cluster.mem, UINT64_MAX);
	ck_assert_int_eq(m->train.mbs, 1);
	ck_assert_int_eq(m->train.microbatches, 8);
	ck_assert_int_eq(m->plan.schedule, IR_SCHED_TUNED);
	ck_assert_int_eq(m->plan.chunks, 1);
	ck_assert_int_eq(m->plan.partition, IR_PART_UNIFORM);
	ck_assert_int_eq(ir_verify(m), 0);
	ir_free(m);
}
END_TEST

/* A JSON object does not order its keys; a timed character the pattern
 * does not use is allowed. */
START_TEST(test_key_order_and_spare_entries)
{
	ir_module *m = load("{\"weight_ms\": {\"E\": 0, \"M\": 1, \"L\": 0, \"#\": 9},\n"
	                    " \"backward_ms\": {\"L\": 3, \"M\": 2, \"E\": 0},\n"
	                    " \"forward_ms\": {\"M\": 1, \"E\": 1, \"L\": 2},\n"
	                    " \"pattern\": \"EMML\"}",
	                    NULL);
	ck_assert_str_eq(m->model.name, "t");
	ck_assert_int_eq(m->nlayers, 4);
	assert_cost(&m->layers[2], 1000, 2000, 1000);
	assert_cost(&m->layers[3], 2000, 3000, 0);
	ir_free(m);
}
END_TEST

/* A pattern without its ends (a Hugging Face hybrid_override_pattern)
 * gets the embedding and the head the tables time. */
START_TEST(test_implied_ends)
{
	ir_module *m = load(EVEN("---"), NULL);
	ck_assert_int_eq(m->nlayers, 5);
	ck_assert_int_eq(m->layers[0].kind, IR_LAYER_EMBEDDING);
	ck_assert_int_eq(m->layers[1].kind, IR_LAYER_MLP);
	ck_assert_int_eq(m->layers[4].kind, IR_LAYER_HEAD);
	/* The added layers stand at the pattern, the others at their character. */
	ck_assert_int_eq(m->layer_loc[0].col, 13);
	ck_assert_int_eq(m->layer_loc[1].col, 14);
	ck_assert_int_eq(m->layer_loc[3].col, 16);
	ck_assert_int_eq(m->layer_loc[4].col, 13);
	ck_assert_int_eq(ir_verify(m), 0);
	ir_free(m);

	m = load(EVEN("E-"), NULL); /* only the head left out */
	ck_assert_int_eq(m->nlayers, 3);
	ck_assert_int_eq(m->layers[2].kind, IR_LAYER_HEAD);
	ir_free(m);
}
END_TEST

/* The default pipeline plans it, the simulator runs it, and a baseline
 * gives its closed form: 1f1b on P equal stages with the backward in one
 * piece takes (M + P - 1) x (F + B + W) of a stage when links cost nothing. */
START_TEST(test_pipeline_and_simulation)
{
	fe_overrides ov = {.devices = 2, .microbatches = 4};
	ir_module *m = load(ALL_KINDS, &ov);
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	sim_result *r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	ck_assert_double_ge(r->makespan, 0.999999 * tune_lower_bound(m));
	sim_free(r);
	ir_free(m);

	fe_overrides base = {.devices = 2, .microbatches = 4, .schedule = "1f1b"};
	m = load(EVEN("E--L"), &base);
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_int_eq(m->nstages, 2);
	r = sim_run(m);
	ck_assert_ptr_nonnull(r);
	ck_assert_double_eq_tol(r->makespan, (4 + 2 - 1) * (2000.0 + 4000 + 2000), 1e-6);
	sim_free(r);
	ir_free(m);
}
END_TEST

START_TEST(test_overrides)
{
	fe_overrides ov = {.devices = 4, .microbatches = 16, .cluster = "h100-sxm",
	                   .schedule = "i1f1b", .chunks = 2, .partition = "balanced"};
	ir_module *m = load(ALL_KINDS, &ov);
	ck_assert_str_eq(m->cluster.name, "h100-sxm");
	ck_assert_int_eq(m->cluster.devices, 4);
	ck_assert_int_eq(m->train.microbatches, 16);
	ck_assert_int_eq(m->plan.schedule, IR_SCHED_I1F1B);
	ck_assert_int_eq(m->plan.chunks, 2);
	ck_assert_int_eq(m->plan.partition, IR_PART_BALANCED);
	ir_free(m);

	fe_overrides bad = {.schedule = "zzz"};
	ck_assert_str_eq(load_fail(ALL_KINDS, &bad),
	                 "octopipe: error: unknown schedule 'zzz'; known: 1f1b, gpipe, i1f1b, zbh1, "
	                 "zbh2, zbv, tuned");
}
END_TEST

/* The module prints as IR and reads back the same. */
START_TEST(test_ir_round_trip)
{
	ir_module *m = load(ALL_KINDS, NULL);
	ck_assert(tu_ir_round_trips(m));
	ir_free(m);
}
END_TEST

/* A missing, an empty and a binary file. */
START_TEST(test_file_errors)
{
	char dir[] = "/tmp/octo-pj-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	const char *empty = arena_printf(A, "%s/empty.json", dir);
	const char *binary = arena_printf(A, "%s/binary.json", dir);
	FILE *f = fopen(empty, "w");
	fclose(f);
	f = fopen(binary, "w");
	fwrite("{\"pattern\":\n \"E\0L\"}", 1, 19, f);
	fclose(f);
	static const char *const want[] = {
		"%s/missing.json:1:1: error: cannot open file: No such file or directory",
		"%s/empty.json:1:1: error: file is empty",
		"%s/binary.json:2:4: error: binary file (NUL byte); expected text",
	};
	const char *paths[] = {arena_printf(A, "%s/missing.json", dir), empty, binary};
	for (int i = 0; i < 3; i++) {
		tu_capture();
		ck_assert_ptr_null(fe_load_profile_model(paths[i], NULL));
		char *first = tu_release_first_line();
		ck_assert_str_eq(first, arena_printf(A, want[i], dir));
		free(first);
	}
	unlink(empty);
	unlink(binary);
	rmdir(dir);
}
END_TEST

/* ---- one diagnostic per bad input ------------------------------------------- */

#define F_ "\"forward_ms\": {\"E\": 1, \"M\": 1, \"L\": 1}"
#define B_ "\"backward_ms\": {\"E\": 1, \"M\": 1, \"L\": 1}"
#define W_ "\"weight_ms\": {\"E\": 1, \"M\": 1, \"L\": 1}"

static const struct bad {
	const char *text, *error;
} bad[] = {
	{"", "t.json:1:1: error: empty profile"},
	{"[1, 2]", "t.json:1:1: error: expected an object at the top level of the profile, got an "
	           "array"},
	{"{\"patern\": \"EML\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:2: error: unknown key 'patern' at the top level of the profile; did you mean "
	 "'pattern'?"},
	{"{\"pattern\": \"EML\", " F_ ", " B_ "}",
	 "t.json:1:1: error: missing required key 'weight_ms' at the top level of the profile"},
	{"{\"pattern\": \"EML\", \"pattern\": \"EML\"}",
	 "t.json:1:20: error: duplicate key 'pattern' at the top level of the profile"},
	{"{\"pattern\": \"EMQL\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:16: error: unknown pattern character 'Q' in 'pattern'; known: E (embedding), L "
	 "(head), M (mamba), * (attention), - (MLP), # (MoE), T (transformer layer)"},
	{"{\"pattern\": \"EM*L\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:16: error: pattern character '*' (an attention layer) has no time in "
	 "'forward_ms'"},
	{"{\"pattern\": \"EML\", " F_ ", \"backward_ms\": {\"E\": 1, \"L\": 1}, " W_ "}",
	 "t.json:1:15: error: pattern character 'M' (a mamba layer) has no time in 'backward_ms'"},
	{"{\"pattern\": \"EMEL\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:16: error: 'E' as character 3 of the pattern: only its first character may be "
	 "the embedding"},
	{"{\"pattern\": \"ELML\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:15: error: 'L' as character 2 of the pattern: only its last character may be the "
	 "head"},
	{"{\"pattern\": \"MM\", \"forward_ms\": {\"M\": 1}, " B_ ", " W_ "}",
	 "t.json:1:14: error: the pattern does not start with the embedding 'E' (got 'M'), and "
	 "'forward_ms' has no time for 'E' to add one"},
	{"{\"pattern\": \"EL\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:13: error: 'pattern' has 2 layers; a model needs the embedding 'E', at least one "
	 "layer and the head 'L'"},
	{"{\"pattern\": \"\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:13: error: 'pattern' is empty; a model needs the embedding 'E', at least one layer "
	 "and the head 'L'"},
	{"{\"pattern\": [\"E\", \"M\", \"L\"]}",
	 "t.json:1:13: error: expected a string for 'pattern', got an array"},
	{"{\"pattern\": \"EML\", \"forward_ms\": {\"E\": 1, \"M\": -0.5, \"L\": 1}}",
	 "t.json:1:48: error: 'M' in 'forward_ms' must be at least 0, got -0.5"},
	{"{\"pattern\": \"EML\", \"forward_ms\": {\"E\": 1, \"M\": 1e999, \"L\": 1}}",
	 "t.json:1:48: error: 'M' in 'forward_ms' must be finite, got '1e999'"},
	{"{\"pattern\": \"EML\", \"forward_ms\": {\"E\": 1, \"M\": .nan}}",
	 "t.json:1:48: error: 'M' in 'forward_ms' must be finite, got '.nan'"},
	{"{\"pattern\": \"EML\", \"forward_ms\": {\"E\": 1, \"M\": \"1.5\"}}",
	 "t.json:1:48: error: expected a number (milliseconds) for 'M' in 'forward_ms', got the "
	 "string \"1.5\""},
	{"{\"pattern\": \"EML\", \"forward_ms\": {\"E\": 1, \"M\": 1e306, \"L\": 1}, " B_ ", " W_ "}",
	 "t.json:1:48: error: 'M' in 'forward_ms' is too large: 1e+306 ms is beyond 1e+12us (11.6 days; docs/profile.md)"},
	{"{\"pattern\": \"EML\", \"weight_ms\": {\"X\": 1}}",
	 "t.json:1:34: error: unknown pattern character 'X' in 'weight_ms'; known: E (embedding), L "
	 "(head), M (mamba), * (attention), - (MLP), # (MoE), T (transformer layer)"},
	{"{\"pattern\": \"EML\", \"weight_ms\": [1, 2]}",
	 "t.json:1:33: error: expected an object for 'weight_ms', got an array"},
	{"{\"pattern\": \"EML\",\n \"forward_ms\": {\"E\": 1,}\n",
	 "t.json:3:1: error: did not find expected ',' or '}' while parsing a flow mapping"},
	{"{\"pattern\": \"E\\u004dL\", " F_ ", \"backward_ms\": {\"E\": 1, \"L\": 1}, " W_ "}",
	 "t.json:1:13: error: pattern character 'M' (a mamba layer) has no time in 'backward_ms'"},
	{"{\"pattern\": \"EM\xc3\xa9L\", " F_ ", " B_ ", " W_ "}",
	 "t.json:1:16: error: unknown pattern character '\xc3\xa9' in 'pattern'; known: E "
	 "(embedding), L (head), M (mamba), * (attention), - (MLP), # (MoE), T (transformer layer)"},
	{"{\"pattern\": !!str EML}", "t.json:1:13: error: unsupported tag '!!str' in a JSON profile"},
	{"{\"pattern\": \"EML\", " F_ ", " B_ ", " W_ "}\n--- {}\n",
	 "t.json:2:1: error: a second document; a profile holds one object"},
};

START_TEST(test_bad)
{
	ck_assert_str_eq(load_fail(bad[_i].text, NULL), bad[_i].error);
}
END_TEST

static Suite *profile_json_suite(void)
{
	Suite *s = suite_create("profile_json");
	TCase *tc = tcase_create("load");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_kinds_and_costs);
	tcase_add_test(tc, test_key_order_and_spare_entries);
	tcase_add_test(tc, test_implied_ends);
	tcase_add_test(tc, test_pipeline_and_simulation);
	tcase_add_test(tc, test_overrides);
	tcase_add_test(tc, test_ir_round_trip);
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
	return tu_run(profile_json_suite());
}
