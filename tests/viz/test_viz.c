/* test_viz.c: Check suite for passes/viz.c (Chrome trace and SVG
 * timeline), on a hand-built module and a hand-filled simulation result,
 * so it needs no simulator.  Set VIZ_TEST_OUT=dir to keep the files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "viz.h"
#include "testutil.h"

/* ---- fixtures --------------------------------------------------------- */

/* Where the files go: VIZ_TEST_OUT, kept; else a temp dir, removed. */
static char dir[256];
static bool keep;

static void setup(void)
{
	const char *out = getenv("VIZ_TEST_OUT");
	keep = out && *out;
	if (keep) {
		snprintf(dir, sizeof dir, "%s", out);
	} else {
		snprintf(dir, sizeof dir, "/tmp/octo-viz-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(dir));
	}
}

static void teardown(void)
{
	if (keep)
		return;
	static const char *const names[] = {"t.json", "t.svg", "c.json", "c.svg"};
	char p[300];
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

static char *path_in_dir(const char *name)
{
	static char p[2][300];
	static int next;
	char *s = p[next++ & 1];
	snprintf(s, sizeof p[0], "%s/%s", dir, name);
	return s;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *buf = malloc((size_t)n + 1);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Embedding, attention, mlp | attention, mlp, head: two stages on two
 * devices, split backward, a 1F1B program for two micro-batches. */
static ir_module *sample(const char *name)
{
	ir_module *m = ir_new();
	m->model.name = name;
	m->train.microbatches = 2;
	m->cluster.devices = 2;
	m->plan.schedule = IR_SCHED_ZBH1;
	m->plan.chunks = 1;
	static const ir_layer_kind kinds[] = {IR_LAYER_EMBEDDING, IR_LAYER_ATTENTION, IR_LAYER_MLP,
	                                      IR_LAYER_ATTENTION, IR_LAYER_MLP, IR_LAYER_HEAD};
	for (int i = 0; i < 6; i++)
		ir_add_layer(m, kinds[i], (ir_loc){0});
	ir_add_stage(m, 0, 2, 0, (ir_loc){0});
	ir_add_stage(m, 3, 5, 1, (ir_loc){0});
	ir_alloc_devices(m);
	static const ir_op p0[] = {{IR_OP_F, 0, 0}, {IR_OP_F, 0, 1}, {IR_OP_B, 0, 0},
	                           {IR_OP_W, 0, 0}, {IR_OP_B, 0, 1}, {IR_OP_W, 0, 1}};
	static const ir_op p1[] = {{IR_OP_F, 1, 0}, {IR_OP_B, 1, 0}, {IR_OP_W, 1, 0},
	                           {IR_OP_F, 1, 1}, {IR_OP_B, 1, 1}, {IR_OP_W, 1, 1}};
	for (int i = 0; i < 6; i++) {
		ir_add_op(m, 0, p0[i].kind, p0[i].stage, p0[i].mb, (ir_loc){0});
		ir_add_op(m, 1, p1[i].kind, p1[i].stage, p1[i].mb, (ir_loc){0});
	}
	return m;
}

/* F 10 us, B 10, W 5, transfers 2 (only the first is recorded). */
static const double t0[][2] = {{0, 10}, {10, 20}, {34, 44}, {44, 49}, {59, 69}, {69, 74.125}};
static const double t1[][2] = {{12, 22}, {22, 32}, {32, 37}, {37, 47}, {47, 57}, {57, 62}};

static sim_result *sample_result(const ir_module *m)
{
	arena *a = arena_new();
	sim_result *r = arena_alloc(a, sizeof *r);
	r->arena = a;
	r->ndev = m->ndevices;
	r->dev = arena_alloc(a, (size_t)r->ndev * sizeof *r->dev);
	for (int d = 0; d < r->ndev; d++) {
		const double(*t)[2] = d ? t1 : t0;
		int n = m->devices[d].nops;
		r->dev[d].start = arena_alloc(a, (size_t)n * sizeof(double));
		r->dev[d].end = arena_alloc(a, (size_t)n * sizeof(double));
		for (int i = 0; i < n; i++) {
			r->dev[d].start[i] = t[i][0];
			r->dev[d].end[i] = t[i][1];
			r->dev[d].busy += t[i][1] - t[i][0];
		}
	}
	r->makespan = 74.125;
	r->bubble_ratio = 1 - (r->dev[0].busy + r->dev[1].busy) / (2 * r->makespan);
	r->nxfers = 1;
	r->xfers = arena_alloc(a, sizeof *r->xfers);
	r->xfers[0] = (sim_xfer){.src = 0, .dst = 1, .kind = IR_OP_F, .stage = 0, .mb = 0,
	                         .bytes = 16384, .start = 10, .end = 12};
	return r;
}

static void free_result(sim_result *r)
{
	arena_free(r->arena);
}

/* ---- a small JSON validator (RFC 8259 grammar, no semantics) ------------ */

typedef struct jp {
	const char *p;
	int depth;
} jp;

static bool j_value(jp *j);

static void j_ws(jp *j)
{
	while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
		j->p++;
}

static bool j_lit(jp *j, const char *s)
{
	size_t n = strlen(s);
	if (strncmp(j->p, s, n))
		return false;
	j->p += n;
	return true;
}

static bool j_string(jp *j)
{
	if (*j->p++ != '"')
		return false;
	for (;;) {
		unsigned char c = (unsigned char)*j->p++;
		if (c == '"')
			return true;
		if (c < 0x20)
			return false; /* also the end of the text */
		if (c != '\\')
			continue;
		c = (unsigned char)*j->p++;
		if (c == 'u') {
			for (int i = 0; i < 4; i++)
				if (!strchr("0123456789abcdefABCDEF", *j->p++) || !j->p[-1])
					return false;
		} else if (!c || !strchr("\"\\/bfnrt", c)) {
			return false;
		}
	}
}

static bool j_digits(jp *j)
{
	if (*j->p < '0' || *j->p > '9')
		return false;
	while (*j->p >= '0' && *j->p <= '9')
		j->p++;
	return true;
}

static bool j_number(jp *j)
{
	j_lit(j, "-");
	if (!j_lit(j, "0") && !j_digits(j))
		return false;
	if (j_lit(j, ".") && !j_digits(j))
		return false;
	if (*j->p == 'e' || *j->p == 'E') {
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		return j_digits(j);
	}
	return true;
}

/* '[' or '{', then comma-separated members, then the closer. */
static bool j_seq(jp *j, char close, bool object)
{
	j->p++;
	j_ws(j);
	if (*j->p == close)
		return j->p++, true;
	for (;;) {
		j_ws(j);
		if (object) {
			if (!j_string(j))
				return false;
			j_ws(j);
			if (*j->p++ != ':')
				return false;
		}
		if (!j_value(j))
			return false;
		j_ws(j);
		if (*j->p == close)
			return j->p++, true;
		if (*j->p++ != ',')
			return false;
	}
}

static bool j_value(jp *j)
{
	bool ok;
	j_ws(j);
	if (++j->depth > 64)
		return false;
	switch (*j->p) {
	case '{': ok = j_seq(j, '}', true); break;
	case '[': ok = j_seq(j, ']', false); break;
	case '"': ok = j_string(j); break;
	case 't': ok = j_lit(j, "true"); break;
	case 'f': ok = j_lit(j, "false"); break;
	case 'n': ok = j_lit(j, "null"); break;
	default: ok = j_number(j);
	}
	j->depth--;
	return ok;
}

static bool json_valid(const char *text)
{
	jp j = {text, 0};
	if (!j_value(&j))
		return false;
	j_ws(&j);
	return *j.p == 0;
}

/* Python's json module, when there is a python3, as a second opinion. */
static void python_agrees(const char *path, const char *code)
{
	if (system("command -v python3 >/dev/null 2>&1") != 0)
		return;
	char cmd[600];
	snprintf(cmd, sizeof cmd, "python3 -c '%s' '%s'", code, path);
	ck_assert_msg(system(cmd) == 0, "python3 rejects %s", path);
}

/* ---- trace -------------------------------------------------------------- */

START_TEST(test_json_validator)
{
	ck_assert(json_valid("{\"a\":[1,-2.5e3,true,null,\"x\\u00e9\\n\"],\"b\":{}}"));
	ck_assert(!json_valid("{\"a\":[1,]}"));
	ck_assert(!json_valid("{\"a\":nan}"));
	ck_assert(!json_valid("{\"a\":\"tab\there\"}"));
	ck_assert(!json_valid("[1] x"));
	ck_assert(!json_valid("[01]"));
}
END_TEST

/* One "X" event parsed from its line. */
typedef struct xev {
	char name[64];
	int pid, tid;
	double ts, dur;
} xev;

static bool field(const char *line, const char *key, double *v)
{
	const char *p = strstr(line, key);
	if (!p)
		return false;
	*v = strtod(p + strlen(key), NULL);
	return true;
}

static int parse_events(char *text, xev *ev, int max)
{
	int n = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strstr(line, "\"ph\":\"X\""))
			continue;
		ck_assert_int_lt(n, max);
		xev *e = &ev[n++];
		const char *p = strstr(line, "{\"name\":\"");
		ck_assert_ptr_nonnull(p);
		p += 9;
		size_t len = strcspn(p, "\"");
		ck_assert_uint_lt(len, sizeof e->name);
		memcpy(e->name, p, len);
		e->name[len] = 0;
		double pid, tid;
		ck_assert(field(line, "\"pid\":", &pid) && field(line, "\"tid\":", &tid));
		ck_assert(field(line, "\"ts\":", &e->ts) && field(line, "\"dur\":", &e->dur));
		e->pid = (int)pid, e->tid = (int)tid;
	}
	return n;
}

/* The event of that name, which must be the only one. */
static const xev *find_event(const xev *ev, int n, const char *name)
{
	const xev *hit = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ev[i].name, name)) {
			ck_assert_msg(!hit, "two events named '%s'", name);
			hit = &ev[i];
		}
	ck_assert_msg(hit != NULL, "no event named '%s'", name);
	return hit;
}

START_TEST(test_trace)
{
	ir_module *m = sample("tiny <&\"> \\ model\t\x01\xff");
	sim_result *r = sample_result(m);
	const char *path = path_in_dir("t.json");
	ck_assert_int_eq(viz_trace(m, r, path), 0);
	char *text = slurp(path);
	ck_assert_msg(json_valid(text), "invalid JSON:\n%s", text);
	python_agrees(path, "import json,sys; json.load(open(sys.argv[1], encoding=\"utf-8\"))");

	/* The name, escaped; the stray byte turned into U+FFFD. */
	ck_assert_ptr_nonnull(strstr(text, "\"model\":\"tiny <&\\\"> \\\\ model\\t\\u0001\xef\xbf\xbd\""));
	/* Processes named and ordered by device, three tracks each. */
	ck_assert_ptr_nonnull(strstr(text, "\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"D1\"}"));
	ck_assert_ptr_nonnull(strstr(text, "\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"sort_index\":1}"));
	ck_assert_ptr_nonnull(strstr(text, "\"pid\":0,\"tid\":0,\"args\":{\"name\":\"compute\"}"));
	ck_assert_ptr_nonnull(strstr(text, "\"pid\":0,\"tid\":1,\"args\":{\"name\":\"comm send\"}"));
	ck_assert_ptr_nonnull(strstr(text, "\"pid\":1,\"tid\":2,\"args\":{\"name\":\"comm recv\"}"));
	ck_assert_int_eq(count(text, "\"ph\":\"M\""), 2 * (2 + 2 * 3));
	ck_assert_ptr_nonnull(strstr(text, "\"args\":{\"stage\":1,\"mb\":0,\"layers\":\"L3..L5\"}"));

	/* One X event per op and two per transfer, at the given times. */
	ck_assert_int_eq(count(text, "\"ph\":\"X\""), 12 + 2);
	xev ev[32];
	int n = parse_events(text, ev, 32);
	ck_assert_int_eq(n, 14);
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < m->devices[d].nops; i++) {
			const ir_op *op = &m->devices[d].ops[i];
			char name[64];
			snprintf(name, sizeof name, "%s s%d m%d", ir_op_names[op->kind], op->stage, op->mb);
			const xev *e = find_event(ev, n, name);
			ck_assert_int_eq(e->pid, d);
			ck_assert_int_eq(e->tid, 0);
			ck_assert_double_eq_tol(e->ts, r->dev[d].start[i], 5e-4);
			ck_assert_double_eq_tol(e->dur, r->dev[d].end[i] - r->dev[d].start[i], 5e-4);
		}
	const xev *e = find_event(ev, n, "F s1 m0");
	ck_assert_double_eq_tol(e->ts, 12, 5e-4);
	e = find_event(ev, n, "W s0 m1");
	ck_assert_double_eq_tol(e->dur, 5.125, 5e-4);
	e = find_event(ev, n, "send F s0 m0 -> D1");
	ck_assert_int_eq(e->pid, 0);
	ck_assert_int_eq(e->tid, 1);
	ck_assert_double_eq_tol(e->ts, 10, 5e-4);
	ck_assert_double_eq_tol(e->dur, 2, 5e-4);
	e = find_event(ev, n, "recv F s0 m0 <- D0");
	ck_assert_int_eq(e->pid, 1);
	ck_assert_int_eq(e->tid, 2);
	ck_assert_double_eq_tol(e->ts, 10, 5e-4);
	free(text);
	free_result(r);
	ir_free(m);
}
END_TEST

/* Times of a second-long step keep their microseconds; NaN times (an op
 * that never ran) are left out rather than written as invalid JSON. */
START_TEST(test_trace_precision)
{
	ir_module *m = sample("p");
	sim_result *r = sample_result(m);
	r->dev[1].start[5] = 2345678.901;
	r->dev[1].end[5] = 2345679.125;
	r->dev[0].end[3] = NAN;
	r->makespan = 2345679.125;
	/* Rounded on their own, ts 57.001 + dur 1.000 would overlap the next
	 * op at 58.000 by a nanosecond. */
	r->dev[1].start[3] = 57.0006;
	r->dev[1].end[3] = r->dev[1].start[4] = 58.0004;
	const char *path = path_in_dir("t.json");
	ck_assert_int_eq(viz_trace(m, r, path), 0);
	char *text = slurp(path);
	ck_assert(json_valid(text));
	ck_assert_ptr_nonnull(strstr(text, "\"ts\":2345678.901,\"dur\":0.224"));
	ck_assert_int_eq(count(text, "\"ph\":\"X\""), 11 + 2);
	ck_assert_ptr_null(strstr(text, "W s0 m0"));
	xev ev[32];
	int n = parse_events(text, ev, 32);
	const xev *a1 = find_event(ev, n, "F s1 m1"), *b1 = find_event(ev, n, "B s1 m1");
	ck_assert_double_eq_tol(a1->ts, 57.001, 1e-9);
	ck_assert_double_le(a1->ts + a1->dur, b1->ts + 1e-9);
	free(text);
	/* Deterministic: the same inputs, the same bytes. */
	const char *svg = path_in_dir("t.svg");
	ck_assert_int_eq(viz_svg(m, r, svg), 0);
	char *a = slurp(svg);
	ck_assert_int_eq(viz_svg(m, r, svg), 0);
	char *b = slurp(svg);
	ck_assert_str_eq(a, b);
	ck_assert_ptr_nonnull(strstr(a, "time (s)"));
	free(a);
	free(b);
	free_result(r);
	ir_free(m);
}
END_TEST

/* ---- SVG ----------------------------------------------------------------- */

START_TEST(test_svg)
{
	ir_module *m = sample("tiny <&\"> model");
	sim_result *r = sample_result(m);
	const char *path = path_in_dir("t.svg");
	ck_assert_int_eq(viz_svg(m, r, path), 0);
	char *svg = slurp(path);
	python_agrees(path, "import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])");

	ck_assert_int_eq(strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39), 0);
	ck_assert_ptr_nonnull(strstr(svg, "width=\"1400\""));
	ck_assert_int_eq(strcmp(svg + strlen(svg) - 7, "</svg>\n"), 0);
	/* One box per op, classed by kind; one chunk per device here. */
	ck_assert_int_eq(count(svg, "class=\"op "), 12);
	ck_assert_int_eq(count(svg, "class=\"op F c0\""), 4);
	ck_assert_int_eq(count(svg, "class=\"op B c0\""), 4);
	ck_assert_int_eq(count(svg, "class=\"op W c0\""), 4);
	ck_assert_ptr_null(strstr(svg, " c1\""));
	/* The micro-batch number in the boxes (10 us = 17 px is wide enough). */
	ck_assert_int_eq(count(svg, "<text class=\"mb "), 12);
	/* A tooltip naming stage and layers. */
	ck_assert_ptr_nonnull(strstr(svg, "<title>F s1 m0 on D1, layers L3..L5: 12.000"));
	/* Three distinct colours, a legend naming them, the idle background. */
	ck_assert_ptr_nonnull(strstr(svg, ".op.F.c0{fill:#4e79a7}"));
	ck_assert_ptr_nonnull(strstr(svg, ".op.B.c0{fill:#f28e2b}"));
	ck_assert_ptr_nonnull(strstr(svg, ".op.W.c0{fill:#59a14f}"));
	ck_assert_ptr_nonnull(strstr(svg, "<g class=\"legend\">"));
	ck_assert_ptr_nonnull(strstr(svg, "</tspan> forward</text>"));
	ck_assert_ptr_nonnull(strstr(svg, "</tspan> input gradient</text>"));
	ck_assert_ptr_nonnull(strstr(svg, "</tspan> weight gradient</text>"));
	ck_assert_ptr_nonnull(strstr(svg, ">idle</text>"));
	ck_assert_int_eq(count(svg, "<rect class=\"row\""), 2);
	/* Device labels and the axis: 74 us makes ticks 0, 10, ..., 70 us. */
	ck_assert_ptr_nonnull(strstr(svg, ">D0</text>"));
	ck_assert_ptr_nonnull(strstr(svg, ">D1</text>"));
	ck_assert_ptr_nonnull(strstr(svg, "<g class=\"axis\">"));
	ck_assert_ptr_nonnull(strstr(svg, ">70</text>"));
	ck_assert_ptr_null(strstr(svg, ">80</text>"));
	ck_assert_ptr_nonnull(strstr(svg, "time (\xc2\xb5s)"));
	/* The title line, the model name escaped. */
	ck_assert_ptr_nonnull(strstr(svg, "tiny &lt;&amp;&quot;&gt; model \xc2\xb7 zbh1 \xc2\xb7 2 devices"
	                                  " \xc2\xb7 2 micro-batches \xc2\xb7 makespan 74.12 \xc2\xb5s"
	                                  " \xc2\xb7 bubble 32.5%</text>"));
	ck_assert_ptr_null(strstr(svg, "<&"));
	free(svg);
	free_result(r);
	ir_free(m);
}
END_TEST

/* Two chunks per device (interleaved): the second chunk is a lighter
 * class of the same kind, and the legend says so; narrow boxes lose
 * their number but keep their box. */
/* Four one-layer MLP stages on two devices, stage s on dev[s], one
 * micro-batch: the module of the chunk tests below. */
static ir_module *four_stages(const char *name, ir_schedule sched, int chunks, const int dev[4])
{
	ir_module *m = ir_new();
	m->model.name = name;
	m->train.microbatches = 1;
	m->plan.schedule = sched;
	m->plan.chunks = chunks;
	m->cluster.devices = 2;
	for (int i = 0; i < 4; i++)
		ir_add_layer(m, IR_LAYER_MLP, (ir_loc){0});
	for (int s = 0; s < 4; s++)
		ir_add_stage(m, s, s, dev[s], (ir_loc){0});
	ir_alloc_devices(m);
	return m;
}

START_TEST(test_svg_chunks)
{
	static const int dev[] = {0, 1, 0, 1};
	ir_module *m = four_stages("chunks", IR_SCHED_I1F1B, 2, dev);
	for (int s = 0; s < 4; s++)
		ir_add_op(m, s % 2, IR_OP_F, s, 0, (ir_loc){0});
	for (int s = 3; s >= 0; s--)
		ir_add_op(m, s % 2, IR_OP_B, s, 0, (ir_loc){0});
	arena *a = arena_new();
	sim_result r = {.arena = a, .ndev = 2, .makespan = 8000};
	r.dev = arena_alloc(a, 2 * sizeof *r.dev);
	for (int d = 0; d < 2; d++) {
		r.dev[d].start = arena_alloc(a, 4 * sizeof(double));
		r.dev[d].end = arena_alloc(a, 4 * sizeof(double));
		for (int i = 0; i < 4; i++) {
			r.dev[d].start[i] = 1000 * (2 * i + d);
			/* The last op of D1 lasts 2 us: under 1 px. */
			r.dev[d].end[i] = r.dev[d].start[i] + (d && i == 3 ? 2 : 1000);
		}
	}
	const char *path = path_in_dir("c.svg");
	ck_assert_int_eq(viz_svg(m, &r, path), 0);
	char *svg = slurp(path);
	ck_assert_int_eq(count(svg, "class=\"op F c0\""), 2);
	ck_assert_int_eq(count(svg, "class=\"op F c1\""), 2);
	ck_assert_int_eq(count(svg, "class=\"op B c1\""), 2);
	ck_assert_ptr_nonnull(strstr(svg, ".op.F.c1{fill:#a7bcd3}"));
	ck_assert_ptr_nonnull(strstr(svg, "later chunk of a device (2 chunks)"));
	ck_assert_ptr_nonnull(strstr(svg, "\xc3\x97 2 chunks"));
	ck_assert_ptr_nonnull(strstr(svg, "</tspan> backward</text>")); /* no W: B is all of it */
	ck_assert_ptr_null(strstr(svg, "weight gradient"));
	ck_assert_int_eq(count(svg, "<text class=\"mb "), 7);
	ck_assert_ptr_nonnull(strstr(svg, "time (ms)"));
	ck_assert_ptr_nonnull(strstr(svg, ">8</text>"));
	free(svg);
	arena_free(a);
	ir_free(m);
}
END_TEST

START_TEST(test_unwritable)
{
	ir_module *m = sample("x");
	sim_result *r = sample_result(m);
	tu_capture();
	ck_assert_int_eq(viz_trace(m, r, "/nonexistent-dir/t.json"), -1);
	ck_assert_str_eq(tu_captured(), "octopipe: error: cannot write '/nonexistent-dir/t.json': "
	                                "No such file or directory\n");
	tu_release();
	tu_capture();
	ck_assert_int_eq(viz_svg(m, r, dir), -1); /* a directory */
	ck_assert_ptr_nonnull(strstr(tu_captured(), "octopipe: error: cannot write '"));
	ck_assert_ptr_nonnull(strstr(tu_captured(), "Is a directory"));
	tu_release();
	if (access("/dev/full", W_OK) == 0) {
		tu_capture();
		ck_assert_int_eq(viz_svg(m, r, "/dev/full"), -1);
		ck_assert_str_eq(tu_captured(), "octopipe: error: cannot write '/dev/full': "
		                                "No space left on device\n");
		tu_release();
	}
	free_result(r);
	ir_free(m);
}
END_TEST

/* Devices holding different numbers of stages (a tuned plan: D0 three,
 * D1 one): the title says so, not "2 devices x 3 chunks". */
START_TEST(test_svg_uneven_chunks)
{
	static const int dev[] = {0, 1, 0, 0};
	ir_module *m = four_stages("uneven", IR_SCHED_TUNED, 1, dev);
	for (int s = 0; s < 4; s++)
		ir_add_op(m, dev[s], IR_OP_F, s, 0, (ir_loc){0});
	arena *a = arena_new();
	sim_result r = {.arena = a, .ndev = 2, .makespan = 4000};
	r.dev = arena_alloc(a, 2 * sizeof *r.dev);
	for (int d = 0; d < 2; d++) {
		r.dev[d].start = arena_alloc(a, 4 * sizeof(double));
		r.dev[d].end = arena_alloc(a, 4 * sizeof(double));
	}
	for (int s = 0, n[2] = {0, 0}; s < 4; s++) {
		int d = dev[s], i = n[d]++;
		r.dev[d].start[i] = 1000 * s, r.dev[d].end[i] = 1000 * s + 1000;
	}
	const char *path = path_in_dir("u.svg");
	ck_assert_int_eq(viz_svg(m, &r, path), 0);
	char *svg = slurp(path);
	ck_assert_ptr_null(strstr(svg, "\xc3\x97 3 chunks"));
	ck_assert_ptr_nonnull(strstr(svg, "2 devices \xc2\xb7 4 stages, 1 to 3 a device"));
	ck_assert_ptr_nonnull(strstr(svg, "later chunk of a device (up to 3 chunks)"));
	free(svg);
	arena_free(a);
	ir_free(m);
}
END_TEST

static Suite *viz_suite(void)
{
	Suite *s = suite_create("viz");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_json_validator);
	tcase_add_test(tc, test_trace);
	tcase_add_test(tc, test_trace_precision);
	tcase_add_test(tc, test_svg);
	tcase_add_test(tc, test_svg_chunks);
	tcase_add_test(tc, test_svg_uneven_chunks);
	tcase_add_test(tc, test_unwritable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(viz_suite());
}
