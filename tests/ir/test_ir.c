/* test_ir.c: Check suite for ir/ (tables, text round trip, parser
 * diagnostics, verifier). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "testutil.h"

/* A small valid module, built through the API: embedding, attention, mlp,
 * moe, mamba v2, mamba v1, head; two stages on two devices with a 1F1B
 * program for two micro-batches. */
static ir_module *sample(bool with_programs)
{
	ir_module *m = ir_new();
	m->model.name = "sample \"quoted\" \\ name\twith tab";
	m->model.hidden = 64;
	m->model.vocab = 256;
	m->model.seq = 32;
	m->model.dtype = IR_DTYPE_F32;
	m->train = (ir_train){.mbs = 2, .microbatches = 2, .steps = 3, .optimizer = IR_OPT_ADAMW,
	                      .lr = 1e-3, .weight_decay = 0.1, .seed = 18446744073709551615ull,
	                      .data = IR_DATA_TEXT, .text_file = "data/a b.txt"};
	m->cluster = (ir_cluster){.name = "cpu-local", .devices = 2, .per_node = 2,
	                          .mem = 3ull << 30, .flops = 1e11, .membw = 2.5e10,
	                          .cache = 3 << 20, .send_post = 2.75, .recv_post = 0.1,
	                          .intra = {5e9, 2.5}, .inter = {1e9, 0.1}};
	m->plan.schedule = IR_SCHED_1F1B;
	m->plan.chunks = 1;
	m->plan.partition = IR_PART_GIVEN;
	static int64_t given[] = {3, 4};
	m->plan.given = given;
	m->plan.ngiven = 2;
	ir_loc none = {0};
	ir_add_layer(m, IR_LAYER_EMBEDDING, none);
	ir_layer *l = ir_add_layer(m, IR_LAYER_ATTENTION, none);
	l->attr[IR_ATTR_HEADS] = 4, l->attr[IR_ATTR_KV_HEADS] = 2, l->attr[IR_ATTR_HEAD_DIM] = 16;
	l->cost = (ir_cost){.known = true, .f = 12.5, .b = 0.1 + 0.2, .w = 1.0 / 3.0, .flops = 3e9,
	                    .act = 1 << 20, .wstash = 1536, .params = 7, .resident = 1ull << 40,
	                    .cold = true, .f_cold = 13.25, .b_cold = 0.7, .w_cold = 1.0 / 7.0};
	l = ir_add_layer(m, IR_LAYER_MLP, none);
	l->attr[IR_ATTR_FFN] = 128, l->attr[IR_ATTR_ACT] = IR_ACT_SWIGLU;
	l = ir_add_layer(m, IR_LAYER_MOE, none);
	l->attr[IR_ATTR_EXPERTS] = 4, l->attr[IR_ATTR_TOP_K] = 2, l->attr[IR_ATTR_EXPERT_FFN] = 32;
	l->attr[IR_ATTR_SHARED_EXPERTS] = 1, l->attr[IR_ATTR_ACT] = IR_ACT_GEGLU;
	l = ir_add_layer(m, IR_LAYER_MAMBA, none);
	l->attr[IR_ATTR_VERSION] = 2, l->attr[IR_ATTR_STATE] = 16, l->attr[IR_ATTR_EXPAND] = 2;
	l->attr[IR_ATTR_CONV] = 4, l->attr[IR_ATTR_HEADS] = 8, l->attr[IR_ATTR_HEAD_DIM] = 16;
	l->attr[IR_ATTR_GROUPS] = 1;
	/* selective recomputation's quantities round-trip too */
	l->cost = (ir_cost){.known = true, .f = 3, .b = 4, .w = 2, .flops = 1e6, .act = 3 << 20,
	                    .wstash = 4096, .params = 9, .resident = 1024, .sel_act = 1 << 20,
	                    .sel_f = 1.0 / 3.0};
	l = ir_add_layer(m, IR_LAYER_MAMBA, none);
	l->attr[IR_ATTR_VERSION] = 1, l->attr[IR_ATTR_STATE] = 16, l->attr[IR_ATTR_EXPAND] = 2;
	l->attr[IR_ATTR_CONV] = 4, l->attr[IR_ATTR_DT_RANK] = 4;
	ir_add_layer(m, IR_LAYER_HEAD, none);
	ir_add_stage(m, 0, 2, with_programs ? 0 : -1, none);
	ir_add_stage(m, 3, 6, with_programs ? 1 : -1, none);
	if (with_programs) {
		ir_alloc_devices(m);
		static const ir_op p0[] = {{IR_OP_F, 0, 0}, {IR_OP_F, 0, 1}, {IR_OP_B, 0, 0},
		                           {IR_OP_W, 0, 0}, {IR_OP_B, 0, 1}, {IR_OP_W, 0, 1}};
		static const ir_op p1[] = {{IR_OP_F, 1, 0}, {IR_OP_B, 1, 0}, {IR_OP_W, 1, 0},
		                           {IR_OP_F, 1, 1}, {IR_OP_B, 1, 1}, {IR_OP_W, 1, 1}};
		for (int i = 0; i < 6; i++) {
			ir_add_op(m, 0, p0[i].kind, p0[i].stage, p0[i].mb, none);
			ir_add_op(m, 1, p1[i].kind, p1[i].stage, p1[i].mb, none);
		}
	}
	return m;
}

static ir_module *parse_text(arena *a, const char *text)
{
	return ir_parse(src_from_string(a, "t.opir", text));
}

START_TEST(test_tables)
{
	for (int k = 0; k < IR_NLAYER_KINDS; k++)
		ck_assert_int_eq(ir_lookup(ir_layer_kind_names, IR_NLAYER_KINDS, ir_layer_kind_names[k]), k);
	for (int a = 0; a < IR_NATTRS; a++)
		for (int b = a + 1; b < IR_NATTRS; b++)
			ck_assert_str_ne(ir_attr_table[a].name, ir_attr_table[b].name);
	ck_assert_int_eq(ir_lookup(ir_act_names, IR_NACTS, "relu2"), IR_ACT_RELU2);
	ck_assert_int_eq(ir_lookup(ir_act_names, IR_NACTS, "nope"), -1);
	/* Mamba's attributes follow its version. */
	ck_assert(ir_attr_applies(IR_ATTR_HEADS, IR_LAYER_MAMBA, 2));
	ck_assert(!ir_attr_applies(IR_ATTR_HEADS, IR_LAYER_MAMBA, 1));
	ck_assert(ir_attr_applies(IR_ATTR_DT_RANK, IR_LAYER_MAMBA, 1));
	ck_assert(!ir_attr_applies(IR_ATTR_FFN, IR_LAYER_ATTENTION, 0));
	ck_assert(ir_attr_required(IR_ATTR_FFN, IR_LAYER_MLP, 0));
	ck_assert(!ir_attr_required(IR_ATTR_WINDOW, IR_LAYER_ATTENTION, 0));
}
END_TEST

/* Every row of the header tables fits its member, its key is unique on
 * its line, and ir_equal sees a change in it. */
START_TEST(test_header_tables)
{
	static const size_t size[] = {
	    [IR_HF_NAME] = sizeof(char *),   [IR_HF_INT] = sizeof(int64_t),
	    [IR_HF_U64] = sizeof(uint64_t),  [IR_HF_ENUM] = sizeof(int),
	    [IR_HF_F64] = sizeof(double),    [IR_HF_US] = sizeof(double),
	    [IR_HF_BYTES] = sizeof(uint64_t), [IR_HF_RATE] = sizeof(double),
	    [IR_HF_STR] = sizeof(char *),    [IR_HF_LINK] = sizeof(ir_link),
	    [IR_HF_LIST] = sizeof(int64_t *)};
	ir_module *m = sample(0);
	char *text = ir_print_string(m);
	for (int l = 0; l < IR_NHLINES; l++) {
		const ir_hline *h = &ir_hlines[l];
		for (int i = 0; i < h->nfields; i++) {
			const ir_hfield *f = &h->fields[i];
			ck_assert_msg(f->size == size[f->type], "%s %s: member of %zu bytes", h->keyword,
			              f->key, f->size);
			for (int j = i + 1; j < h->nfields; j++)
				ck_assert_str_ne(f->key, h->fields[j].key);
			arena *a = arena_new();
			ir_module *p = parse_text(a, text);
			ck_assert(p && ir_equal(m, p));
			char *v = (char *)p + h->off + f->off;
			static int64_t one = 1;
			switch (f->type) {
			case IR_HF_NAME:
			case IR_HF_STR: *(const char **)v = "other"; break;
			case IR_HF_ENUM: *(int *)v ^= 1; break;
			case IR_HF_F64:
			case IR_HF_US:
			case IR_HF_RATE: *(double *)v += 1; break;
			case IR_HF_LINK: ((ir_link *)v)->lat += 1; break;
			case IR_HF_LIST:
				*(int64_t **)v = &one;
				*(int *)((char *)p + h->off + f->count) = 1;
				break;
			default: *(int64_t *)v ^= 1; break;
			}
			ck_assert_msg(!ir_equal(m, p), "ir_equal misses %s %s", h->keyword, f->key);
			ir_free(p);
			arena_free(a);
		}
	}
	free(text);
	ir_free(m);
}
END_TEST

START_TEST(test_roundtrip_module)
{
	for (int progs = 0; progs < 2; progs++) {
		ir_module *m = sample(progs);
		ck_assert_int_eq(ir_verify(m), 0);
		char *t1 = ir_print_string(m);
		arena *a = arena_new();
		ir_module *p = parse_text(a, t1);
		ck_assert_msg(p != NULL, "printed text does not parse:\n%s", t1);
		ck_assert_msg(ir_equal(m, p), "parse(print(m)) != m:\n%s", t1);
		char *t2 = ir_print_string(p);
		ck_assert_str_eq(t1, t2);
		/* ir_equal must see a one-field difference. */
		p->layers[1].cost.b = nextafter(p->layers[1].cost.b, 1.0);
		ck_assert(!ir_equal(m, p));
		p->layers[1].cost.b = m->layers[1].cost.b;
		p->layers[1].cost.w_cold = nextafter(p->layers[1].cost.w_cold, 1.0);
		ck_assert(!ir_equal(m, p));
		p->layers[1].cost.w_cold = m->layers[1].cost.w_cold;
		p->cluster.cache++;
		ck_assert(!ir_equal(m, p));
		p->cluster.cache--;
		p->cluster.recv_post = 0.2;
		ck_assert(!ir_equal(m, p));
		free(t1);
		free(t2);
		ir_free(p);
		arena_free(a);
		ir_free(m);
	}
}
END_TEST

START_TEST(test_fmt_double_exact)
{
	srand(7);
	char buf[64];
	for (int i = 0; i < 100000; i++) {
		uint64_t bits = ((uint64_t)rand() << 62) ^ ((uint64_t)rand() << 31) ^ (uint64_t)rand();
		double v;
		memcpy(&v, &bits, sizeof v);
		if (!isfinite(v))
			continue;
		fmt_double(buf, sizeof buf, v);
		ck_assert_msg(strtod(buf, NULL) == v, "%s", buf);
	}
	fmt_double(buf, sizeof buf, 0.1);
	ck_assert_str_eq(buf, "0.1");
	fmt_double(buf, sizeof buf, 2e11);
	ck_assert_str_eq(buf, "2e+11");
	fmt_double(buf, sizeof buf, 10);
	ck_assert_str_eq(buf, "10");
	fmt_double(buf, sizeof buf, 1000);
	ck_assert_str_eq(buf, "1000");
	fmt_double(buf, sizeof buf, 1.5e-5);
	ck_assert_str_eq(buf, "1.5e-05");
}
END_TEST

START_TEST(test_fmt_bytes)
{
	char buf[32];
	ir_fmt_bytes(buf, sizeof buf, 0);
	ck_assert_str_eq(buf, "0B");
	ir_fmt_bytes(buf, sizeof buf, 1536);
	ck_assert_str_eq(buf, "1536B");
	ir_fmt_bytes(buf, sizeof buf, 3ull << 30);
	ck_assert_str_eq(buf, "3GiB");
	ir_fmt_bytes(buf, sizeof buf, 5ull << 40);
	ck_assert_str_eq(buf, "5TiB");
}
END_TEST

/* Each bad text and the first line of its diagnostic. */
static const struct {
	const char *text, *first_line;
} bad[] = {
	{"", "t.opir:1:1: error: expected 'octopipe-ir 1' header, got end of file"},
	{"octopipe-ir 2\n", "t.opir:1:13: error: unsupported IR version 2; this octopipe reads version 1"},
	{"octopipe-ir 1\nmodel x\n", "t.opir:2:7: error: expected a quoted name after 'model', got 'x'"},
	{"octopipe-ir 1\nmodel \"x\n", "t.opir:2:7: error: unterminated string"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 vocab=256 seq=8\n",
	 "t.opir:2:36: error: missing field 'dtype' in model"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 vocab=256 seq=8 dtype=f32 hiden=3\n",
	 "t.opir:2:47: error: unknown field 'hiden' in model; did you mean 'hidden'?"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 hidden=64\n", "t.opir:2:21: error: duplicate field 'hidden'"},
	{"octopipe-ir 1\nmodel \"x\" hidden=0 vocab=256 seq=8 dtype=f32\n",
	 "t.opir:2:18: error: 'hidden' must be an integer in 1..1048576, got '0'"},
	{"octopipe-ir 1\nmodel \"x\" hidden=99999999999999999999 vocab=256 seq=8 dtype=f32\n",
	 "t.opir:2:18: error: 'hidden' must be an integer in 1..1048576, got '99999999999999999999'"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 vocab=256 seq=8 dtype=f33\n",
	 "t.opir:2:43: error: unknown dtype 'f33'; did you mean 'f32'?"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 vocab=256 seq=8 dtype=f32\ntrain mbs=1\n",
	 "t.opir:3:12: error: missing field 'microbatches' in train"},
	{"octopipe-ir 1\nmodel \"x\" hidden=64 vocab=256 seq=8 dtype=f32\n"
	 "train mbs=1 microbatches=2 steps=1 optimizer=adamw lr=nan weight_decay=0 seed=1 data=synthetic\n",
	 "t.opir:3:55: error: 'lr' must be a finite number, got 'nan'"},
	{"octopipe-ir 1\nmodel \"x\\q\" hidden=64\n",
	 "t.opir:2:9: error: bad escape in string; expected \\\", \\\\ or \\xHH"},
	{"octopipe-ir 1\nmodel \"x\" hidden 64\n", "t.opir:2:18: error: expected '=' after 'hidden', got '64'"},
};

START_TEST(test_parse_errors)
{
	const char *text = bad[_i].text;
	tu_capture();
	arena *a = arena_new();
	ir_module *m = parse_text(a, text);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(diag_errors, 1);
	const char *out = tu_captured();
	size_t n = strcspn(out, "\n");
	ck_assert_msg(strlen(bad[_i].first_line) == n && strncmp(out, bad[_i].first_line, n) == 0,
	              "case %d: got\n%s\nwant\n%s", _i, out, bad[_i].first_line);
	tu_release();
	arena_free(a);
}
END_TEST

/* The shared header of the hand-written texts below. */
#define HDR                                                                    \
	"octopipe-ir 1\n"                                                          \
	"model \"m\" hidden=64 vocab=256 seq=8 dtype=f32\n"                        \
	"train mbs=1 microbatches=2 steps=1 optimizer=adamw lr=0.001 "             \
	"weight_decay=0 seed=1 data=synthetic\n"                                   \
	"cluster \"c\" devices=2 per_node=2 mem=1GiB flops=1e+11 membw=1e+10 "     \
	"intra=1e+09/1us inter=1e+09/1us\n"                                        \
	"plan schedule=1f1b chunks=1 partition=uniform backend=nccl\n"                       \
	"layer L0 embedding\n"                                                     \
	"layer L1 mlp ffn=8 activation=swiglu\n"                                   \
	"layer L2 head\n"

START_TEST(test_parse_comments_and_blank_lines)
{
	arena *a = arena_new();
	ir_module *m = parse_text(a, "; leading comment\n\n" HDR "; *** IR Dump After x ***\n"
	                              "stage S0 L0..L1 @D0   ; trailing\nstage S1 L2..L2 @D1\n");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->nstages, 2);
	ck_assert_int_eq(ir_verify(m), 0);
	ir_free(m);
	arena_free(a);
}
END_TEST

/* Texts that parse but violate an invariant, with a piece of the expected
 * message. */
static const struct {
	const char *tail, *want;
} invalid[] = {
	{"stage S0 L0..L0 @D0\nstage S1 L2..L2 @D1\n", "expected a range starting at L1"},
	{"stage S0 L0..L1 @D0\nstage S1 L1..L2 @D1\n", "expected a range starting at L2"},
	{"stage S0 L0..L1 @D0\n", "layers L2..L2 belong to no stage"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D2\n", "placed on D2, but the cluster has 2 devices"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D1\ndevice D0 {\n F S0 m0\n B S0 m0\n W S0 m0\n"
	 " F S0 m1\n W S0 m1\n B S0 m1\n}\ndevice D1 {\n F S1 m0\n B S1 m0\n W S1 m0\n F S1 m1\n"
	 " B S1 m1\n W S1 m1\n}\n",
	 "W S0 m1 comes before its B"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D1\ndevice D0 {\n F S0 m0\n B S0 m0\n W S0 m0\n"
	 " F S0 m0\n B S0 m1\n W S0 m1\n}\ndevice D1 {\n F S1 m0\n B S1 m0\n W S1 m0\n F S1 m1\n"
	 " B S1 m1\n W S1 m1\n}\n",
	 "second F S0 m0"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D1\ndevice D0 {\n F S0 m0\n B S0 m0\n W S0 m0\n"
	 " F S0 m1\n B S0 m1\n W S0 m1\n}\ndevice D1 {\n F S1 m0\n B S1 m0\n W S1 m0\n F S1 m1\n"
	 " B S1 m1\n W S0 m1\n}\n",
	 "runs on D1, but S0 is placed on D0"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D1\ndevice D0 {\n F S0 m0\n B S0 m0\n W S0 m0\n"
	 " F S0 m1\n B S0 m1\n W S0 m1\n}\ndevice D1 {\n F S1 m0\n B S1 m0\n W S1 m0\n F S1 m1\n"
	 " B S1 m1\n W S1 m2\n}\n",
	 "names micro-batch m2"},
	{"stage S0 L0..L1 @D0\nstage S1 L2..L2 @D1\ndevice D0 {\n F S0 m0\n B S0 m0\n W S0 m0\n"
	 " F S0 m1\n B S0 m1\n W S0 m1\n}\ndevice D1 {\n F S1 m0\n B S1 m0\n W S1 m0\n F S1 m1\n"
	 " B S1 m1\n}\n",
	 "no W S1 m1 in any program"},
};

START_TEST(test_verifier_rejects)
{
	arena *a = arena_new();
	char *text = arena_printf(a, "%s%s", HDR, invalid[_i].tail);
	ir_module *m = parse_text(a, text);
	ck_assert_msg(m != NULL, "case %d does not parse", _i);
	tu_capture();
	int errs = ir_verify(m);
	const char *out = tu_captured();
	ck_assert_msg(errs > 0, "case %d: verifier accepted:\n%s", _i, text);
	ck_assert_msg(strstr(out, invalid[_i].want), "case %d: got\n%s\nwant '%s'", _i, out,
	              invalid[_i].want);
	tu_release();
	ir_free(m);
	arena_free(a);
}
END_TEST

START_TEST(test_check_layer)
{
	ir_model_info mi = {"m", 64, 256, 8, IR_DTYPE_F32};
	ir_layer l = {.kind = IR_LAYER_ATTENTION};
	l.attr[IR_ATTR_HEADS] = 8, l.attr[IR_ATTR_KV_HEADS] = 3, l.attr[IR_ATTR_HEAD_DIM] = 8;
	tu_capture();
	ck_assert_int_eq(ir_check_layer(&mi, &l, 1, NULL, NULL, (ir_loc){0}), 1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "'kv_heads' (3) must divide 'heads' (8)"));
	tu_release();

	ir_layer mb = {.kind = IR_LAYER_MAMBA};
	mb.attr[IR_ATTR_VERSION] = 2, mb.attr[IR_ATTR_STATE] = 16, mb.attr[IR_ATTR_EXPAND] = 2;
	mb.attr[IR_ATTR_CONV] = 4, mb.attr[IR_ATTR_HEADS] = 8, mb.attr[IR_ATTR_HEAD_DIM] = 8;
	mb.attr[IR_ATTR_GROUPS] = 1;
	tu_capture();
	ck_assert_int_eq(ir_check_layer(&mi, &mb, 1, NULL, NULL, (ir_loc){0}), 1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "must equal expand x hidden (128)"));
	tu_release();
	mb.attr[IR_ATTR_HEAD_DIM] = 16;
	mb.attr[IR_ATTR_DT_RANK] = 4; /* a Mamba-1 attribute on Mamba-2 */
	tu_capture();
	ck_assert_int_eq(ir_check_layer(&mi, &mb, 1, NULL, NULL, (ir_loc){0}), 1);
	ck_assert_ptr_nonnull(strstr(tu_captured(), "'dt_rank' does not apply"));
	tu_release();
}
END_TEST

static Suite *ir_suite(void)
{
	Suite *s = suite_create("ir");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_tables);
	tcase_add_test(tc, test_header_tables);
	tcase_add_test(tc, test_roundtrip_module);
	tcase_add_test(tc, test_fmt_double_exact);
	tcase_add_test(tc, test_fmt_bytes);
	tcase_add_loop_test(tc, test_parse_errors, 0, (int)(sizeof bad / sizeof *bad));
	tcase_add_test(tc, test_parse_comments_and_blank_lines);
	tcase_add_loop_test(tc, test_verifier_rejects, 0, (int)(sizeof invalid / sizeof *invalid));
	tcase_add_test(tc, test_check_layer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(ir_suite());
}
