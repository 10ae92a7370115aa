/* profile_json.c: a published per-layer-kind timing profile (JSON) as a
 * module of its own (docs/profile.md, "Published profiles").
 *
 * The profiles published with OctoPipe's simulator give a model as a
 * pattern of layer characters and, per character, the measured F, B and W
 * times of one micro-batch in milliseconds:
 *
 *   {"pattern": "EM-M*-L", "forward_ms": {"E": 2.3, ...},
 *    "backward_ms": {...}, "weight_ms": {...}}
 *
 * JSON is a subset of YAML's flow style, so libyaml reads it.  As in
 * profile.c the file is read event by event (the shape is fixed and two
 * levels deep), and the first event that does not fit stops the load.
 * Nothing is built until the whole file has been read, because a JSON
 * object does not order its keys: the pattern may follow the tables.  A
 * pattern without the embedding 'E' or the head 'L' at its ends (some are
 * a Hugging Face config's hybrid_override_pattern, verbatim) gets them
 * added when the tables time them.
 *
 * Every layer then gets a cost whose every field is measured (the mask
 * says so): the measured times and nothing else -- no FLOPs, stashes,
 * parameters or resident bytes -- so it is known and the cost pass has
 * nothing to make; and placeholder shapes: the smallest attributes
 * ir_check_layer accepts with hidden = 1, which no pass reads.  The module thus
 * models time only; docs/profile.md says what that means for a plan. */
#include "frontend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "yamlsrc.h"

enum { MAX_LAYERS = 100000 }; /* as a model file's (docs/yaml.md) */

/* The pattern's characters.  T, a whole dense transformer layer (attention
 * and MLP), becomes one attention layer that carries the whole layer's
 * times. */
enum { C_EMB, C_HEAD, C_MAMBA, C_ATTN, C_MLP, C_MOE, C_DENSE, C_N };
static const char *const char_names[C_N] = {"E", "L", "M", "*", "-", "#", "T"};
static const ir_layer_kind char_kind[C_N] = {
	IR_LAYER_EMBEDDING, IR_LAYER_HEAD, IR_LAYER_MAMBA, IR_LAYER_ATTENTION,
	IR_LAYER_MLP,       IR_LAYER_MOE,  IR_LAYER_ATTENTION,
};
static const char *const char_what[C_N] = {
	"the embedding", "the head",    "a mamba layer",       "an attention layer",
	"an MLP layer",  "a MoE layer", "a transformer layer",
};

enum { K_PATTERN, K_F, K_B, K_W, K_N };
static const char *const top_keys[K_N] = {"pattern", "forward_ms", "backward_ms", "weight_ms"};

/* One of the three tables: milliseconds per pattern character. */
typedef struct table {
	bool has[C_N];
	double ms[C_N];
	ir_loc at[C_N]; /* each value */
} table;

typedef struct pj {
	arena *a;
	yev r;
	ir_loc top;            /* the top-level mapping */
	bool seen[K_N];
	ir_loc first[K_N];     /* each top-level key */
	char *pattern;
	size_t npattern;       /* bytes */
	ir_loc pattern_loc;    /* the scalar */
	size_t pattern_off;    /* source offset of its first byte; SIZE_MAX: escaped */
	int lead;              /* 1 when the embedding was added before the pattern */
	table t[3];            /* forward, backward, weight */
} pj;

/* The event reader is profile.c's (yamlsrc.h), in JSON's words. */
static const yev_words words = {
	"an object", "an array", "out of memory while reading the profile",
	"in a JSON profile; write the value out", " in a JSON profile",
	"a second document; a profile holds one object",
};

/* ---- the file ------------------------------------------------------------------ */

/* Names one character apart are no hint of a typo: list them all. */
static void unknown_char(pj *j, ir_loc loc, const char *s, const char *where)
{
	diag_error(loc, "unknown pattern character '%s' in %s; known: E (embedding), L (head), "
	                "M (mamba), * (attention), - (MLP), # (MoE), T (transformer layer)",
	           s, where);
}

/* table := {CHAR: milliseconds, ...}; a character the pattern does not use
 * is allowed and ignored. */
static int read_table(pj *j, int k)
{
	table *t = &j->t[k - K_F];
	const char *name = arena_printf(j->a, "'%s'", top_keys[k]);
	const char *where = arena_printf(j->a, "in %s", name);
	ir_loc first[C_N];
	int rc;
	if (yev_want_mapping(&j->r, name) < 0)
		return -1;
	while ((rc = yev_next_key(&j->r, where)) > 0) {
		if (ir_lookup(char_names, C_N, yev_text(&j->r)) < 0) {
			unknown_char(j, yev_here(&j->r), ysrc_shown(j->a, yev_text(&j->r)), name);
			return -1;
		}
		int c = yev_key_index(&j->r, "pattern character", where, char_names, C_N, t->has,
		                      first);
		if (c < 0 || yev_next(&j->r) < 0)
			return -1;
		t->at[c] = yev_here(&j->r);
		bool scalar = j->r.ev.type == YAML_SCALAR_EVENT;
		const char *what = arena_printf(j->a, "'%s' in %s", char_names[c], name);
		int r = ysrc_number(j->a, t->at[c], what, scalar ? yev_text(&j->r) : "",
		                    scalar && yev_plain(&j->r), YSRC_NONNEG, &t->ms[c]);
		if (r > 0)
			diag_error(t->at[c], "expected a number (milliseconds) for %s, got %s", what,
			           yev_describe(&j->r));
		if (r)
			return -1;
	}
	return rc;
}

/* pattern := string of pattern characters.  Kept with the source offset
 * of its first character when the text stands in the file as it is (no
 * escapes), so each character can be pointed at. */
static int read_pattern(pj *j)
{
	if (yev_next(&j->r) < 0)
		return -1;
	j->pattern_loc = yev_here(&j->r);
	if (j->r.ev.type != YAML_SCALAR_EVENT) {
		diag_error(j->pattern_loc, "expected a string for 'pattern', got %s",
		           yev_describe(&j->r));
		return -1;
	}
	j->npattern = j->r.ev.data.scalar.length;
	j->pattern = arena_strndup(j->a, yev_text(&j->r), j->npattern);
	const ysrc *y = &j->r.ys;
	size_t off = y->line_start[j->pattern_loc.line - 1] + (size_t)j->pattern_loc.col - 1;
	off += !yev_plain(&j->r); /* past the opening quote */
	j->pattern_off = off + j->npattern <= y->src->len &&
	                         memcmp(y->src->text + off, j->pattern, j->npattern) == 0
	                     ? off
	                     : SIZE_MAX;
	return 0;
}

/* profile := {pattern, forward_ms, backward_ms, weight_ms}, in any order */
static int read_file(pj *j)
{
	if (yev_start(&j->r) < 0)
		return -1;
	j->top = yev_here(&j->r);
	if (j->r.ev.type != YAML_MAPPING_START_EVENT) {
		diag_error(j->top, "expected an object at the top level of the profile, got %s",
		           yev_describe(&j->r));
		return -1;
	}
	static const char where[] = "at the top level of the profile";
	int rc;
	while ((rc = yev_next_key(&j->r, where)) > 0) {
		int k = yev_key_index(&j->r, "key", where, top_keys, K_N, j->seen, j->first);
		if (k < 0 || (k == K_PATTERN ? read_pattern(j) : read_table(j, k)) < 0)
			return -1;
	}
	if (rc < 0)
		return -1;
	for (int k = 0; k < K_N; k++)
		if (!j->seen[k]) {
			diag_error(j->top, "missing required key '%s' %s", top_keys[k], where);
			return -1;
		}
	return yev_end(&j->r);
}

/* ---- checks --------------------------------------------------------------------- */

static ir_loc char_loc(const pj *j, size_t i)
{
	return j->pattern_off == SIZE_MAX ? j->pattern_loc
	                                  : ysrc_offset_loc(&j->r.ys, j->pattern_off + i);
}

/* The pattern character at byte i as a message shows it; *len: its bytes. */
static const char *char_shown(pj *j, size_t i, size_t *len)
{
	const unsigned char *s = (const unsigned char *)j->pattern + i;
	size_t n = 1;
	if (*s >= 0xC0)
		while (i + n < j->npattern && (s[n] & 0xC0) == 0x80)
			n++;
	*len = n;
	if (*s < 0x20 || *s == 0x7f)
		return arena_printf(j->a, "\\x%02X", *s);
	return arena_strndup(j->a, (const char *)s, n);
}

/* Layer i's character, or the whole pattern for an added end. */
static ir_loc layer_loc(const pj *j, int i)
{
	size_t b = (size_t)(i - j->lead);
	return i >= j->lead && b < j->npattern ? char_loc(j, b) : j->pattern_loc;
}

/* The table (K_F..K_W) without a time for character c, or -1. */
static int untimed(const pj *j, int c)
{
	for (int k = K_F; k <= K_W; k++)
		if (!j->t[k - K_F].has[c])
			return k;
	return -1;
}

/* An end the pattern leaves out (the embedding before it, the head after
 * it) is added when every table times it: some published patterns are the
 * Hugging Face config's hybrid_override_pattern, which has neither.
 * Returns 1 when added, 0 when the pattern has it, -1 after a diagnostic. */
static int end(pj *j, size_t at, int want, const char *where)
{
	size_t len;
	const char *s = char_shown(j, at, &len);
	if (len == 1 && s[0] == char_names[want][0])
		return 0;
	int k = untimed(j, want);
	if (k < 0)
		return 1;
	diag_error(char_loc(j, at), "the pattern does not %s %s '%s' (got '%s'), and '%s' has no time "
	                            "for '%s' to add one",
	           where, char_what[want], char_names[want], s, top_keys[k], char_names[want]);
	return -1;
}

/* Each character known; E only first and L only last, each added when
 * left out; a time for every character used in every table, none beyond
 * any time.  Fills kinds[] (a pattern character per layer) and returns the
 * layer count, or -1 after a diagnostic. */
static int check(pj *j, int *kinds)
{
	size_t n = j->npattern;
	if (n == 0) {
		diag_error(j->pattern_loc, "'pattern' is empty; a model needs the embedding 'E', at "
		                           "least one layer and the head 'L'");
		return -1;
	}
	for (size_t i = 0, len; i < n; i += len) {
		const char *s = char_shown(j, i, &len);
		int c = len == 1 ? ir_lookup(char_names, C_N, s) : -1;
		if (c < 0) {
			unknown_char(j, char_loc(j, i), s, "'pattern'");
			return -1;
		}
		if ((c == C_EMB && i > 0) || (c == C_HEAD && i + 1 < n)) {
			diag_error(char_loc(j, i), "'%s' as character %zu of the pattern: only its %s "
			                           "character may be %s",
			           s, i + 1, c == C_EMB ? "first" : "last", char_what[c]);
			return -1;
		}
	}
	/* Every character is one byte now. */
	int lead = end(j, 0, C_EMB, "start with");
	int tail = lead < 0 ? -1 : end(j, n - 1, C_HEAD, "end with");
	if (tail < 0)
		return -1;
	j->lead = lead;
	if (n + (size_t)lead + (size_t)tail > MAX_LAYERS) {
		diag_error(j->pattern_loc, "the pattern has more than %d layers", MAX_LAYERS);
		return -1;
	}
	int count = 0;
	if (lead)
		kinds[count++] = C_EMB;
	for (size_t i = 0; i < n; i++)
		kinds[count++] = ir_lookup(char_names, C_N, (char[]){j->pattern[i], 0});
	if (tail)
		kinds[count++] = C_HEAD;
	if (count < 3) {
		diag_error(j->pattern_loc, "'pattern' has %d layers; a model needs the embedding 'E', "
		                           "at least one layer and the head 'L'", count);
		return -1;
	}
	bool used[C_N] = {0};
	for (int i = 0; i < count; i++) {
		int c = kinds[i];
		if (used[c])
			continue;
		used[c] = true;
		int k = untimed(j, c);
		if (k >= 0) {
			diag_error(layer_loc(j, i), "pattern character '%s' (%s) has no time in '%s'",
			           char_names[c], char_what[c], top_keys[k]);
			diag_note(j->first[k], "'%s' is here", top_keys[k]);
			return -1;
		}
		for (k = K_F; k <= K_W; k++) {
			const table *t = &j->t[k - K_F];
			if (!(ir_round_us(t->ms[c] * 1e3) <= IR_MAX_US)) {
				diag_error(t->at[c], "'%s' in '%s' is too large: %g ms is beyond %gus (11.6 "
				           "days; docs/profile.md)", char_names[c], top_keys[k], t->ms[c], IR_MAX_US);
				return -1;
			}
		}
	}
	return count;
}

/* ---- the module ------------------------------------------------------------------ */

/* The smallest shape ir_check_layer accepts with hidden = 1.  The times
 * are measured, and so is every other field, so no pass reads a size (a
 * cost that is all measured is left alone by the cost pass). */
static void placeholder(ir_layer *l)
{
	int64_t *v = l->attr;
	switch (l->kind) {
	case IR_LAYER_ATTENTION:
		v[IR_ATTR_HEADS] = v[IR_ATTR_KV_HEADS] = v[IR_ATTR_HEAD_DIM] = 1;
		break;
	case IR_LAYER_MLP:
		v[IR_ATTR_FFN] = 1; /* activation 0: swiglu */
		break;
	case IR_LAYER_MOE:
		v[IR_ATTR_EXPERTS] = v[IR_ATTR_TOP_K] = v[IR_ATTR_EXPERT_FFN] = 1;
		break;
	case IR_LAYER_MAMBA:
		v[IR_ATTR_VERSION] = 2; /* heads x head_dim = expand x hidden = 1 */
		v[IR_ATTR_HEADS] = v[IR_ATTR_HEAD_DIM] = v[IR_ATTR_STATE] = 1;
		v[IR_ATTR_EXPAND] = v[IR_ATTR_CONV] = v[IR_ATTR_GROUPS] = 1;
		break;
	default:
		break;
	}
}

/* "nemotron-h-8B" from ".../nemotron-h-8B.json". */
static const char *model_name(arena *a, const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	size_t n = strlen(b);
	if (n > 5 && strcmp(b + n - 5, ".json") == 0)
		n -= 5;
	return n ? arena_strndup(a, b, n) : "profile";
}

static int build(pj *j, ir_module *m, const int *kinds, int n, const fe_overrides *ov)
{
	const src_file *src = j->r.ys.src;
	m->loc = (ir_loc){src, 1, 1};
	m->model_loc = j->first[K_PATTERN];
	/* seq: the measured micro-batch, one sequence of 4096 tokens. */
	m->model = (ir_model_info){model_name(m->arena, src->name), 1, 1, 4096, IR_DTYPE_BF16};
	fe_default_training(m); /* the model file's defaults */
	for (int i = 0; i < n; i++) {
		int c = kinds[i];
		ir_layer *l = ir_add_layer(m, char_kind[c], layer_loc(j, i));
		placeholder(l);
		const table *t = j->t;
		l->cost = (ir_cost){.known = true, .measured = IR_CF_ALL & ~IR_CF_BIT(COLD),
		                    .f = ir_round_us(t[0].ms[c] * 1e3),
		                    .b = ir_round_us(t[1].ms[c] * 1e3),
		                    .w = ir_round_us(t[2].ms[c] * 1e3)};
	}
	if (!(ov && ov->cluster) && fe_load_cluster(m->arena, "ideal", &m->cluster) < 0)
		return -1;
	return fe_apply_overrides(m, ov);
}

static int load(ir_module *m, const src_file *src, const fe_overrides *ov)
{
	pj j = {.a = m->arena, .pattern_off = SIZE_MAX};
	if (yev_open(&j.r, j.a, src, &words) < 0)
		return -1;
	int rc = read_file(&j);
	yev_close(&j.r);
	if (rc < 0)
		return -1;
	size_t cap = j.npattern < MAX_LAYERS ? j.npattern : MAX_LAYERS;
	int *kinds = arena_alloc(j.a, (cap + 2) * sizeof *kinds);
	int n = check(&j, kinds);
	return n < 0 ? -1 : build(&j, m, kinds, n, ov);
}

ir_module *fe_load_profile_model_src(const src_file *src, const fe_overrides *ov)
{
	return fe_new_module(load, src, NULL, ov);
}

ir_module *fe_load_profile_model(const char *path, const fe_overrides *ov)
{
	return fe_new_module(load, NULL, path, ov);
}
