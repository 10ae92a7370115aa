/* hf_import.c: a Hugging Face config.json as an OctoPipe model file
 * (docs/import.md).
 *
 * Reads: the JSON text, through the model file's document layer (ydoc.c):
 * JSON is YAML's flow style, so libyaml parses it and every node keeps
 * its file:line:col.  What YAML accepts and JSON does not (a block
 * mapping, a plain word, a single-quoted string, an alias, a key given
 * twice) is refused first, over the whole tree, so that the rest reads
 * JSON's values only: double-quoted strings, numbers, true, false, null.
 * Writes: the model file's text (docs/yaml.md): `model:` and `layers:`,
 * each layer's fields from the config's keys, in repeat or pattern blocks.
 * Guarantees: every key of the file is either read (and what it says is in
 * the model, or refused where the format cannot say it), listed as one
 * that does not shape training (docs/import.md), or named by --ignore;
 * anything else is an error at the key.  The text is not yet checked by
 * the frontend: the caller loads it (fe_load_src) before writing it.
 *
 * A family (model_type) is a function that reads its keys into a `model`:
 * one set of layer fields per kind and the layer string, one character per
 * sub-layer: '*' attention, 's' sliding-window attention, '-' MLP, 'E'
 * MoE, 'M' mamba (the characters of the pattern block, plus 's'), 'P'
 * parallel (the attention's fields and the mamba's). */
#include "hf_import.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelfile.h"

/* ---- the document ----------------------------------------------------- */

typedef struct hf {
	arena *a;
	ydoc d;
	const src_file *src;
	yaml_node_t *root;
	int n;                  /* top-level keys */
	const char **name;
	yaml_node_t **key, **val;
	bool *read;             /* a family read it (or listed it as ignored) */
	const char *const *ignore;
	int nignore;
	const char *type;       /* model_type */
	const char **asked;     /* every key the family looked for, there or not */
	int nasked, capasked;
} hf;

static bool is_plain(const yaml_node_t *n, const char *s)
{
	return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       strcmp((const char *)n->data.scalar.value, s) == 0;
}

/* number := -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?  (JSON's) */
static bool json_number(const char *s)
{
	size_t i = s[0] == '-';
	if (s[i] == '0')
		i++;
	else if (s[i] >= '1' && s[i] <= '9')
		while (s[i] >= '0' && s[i] <= '9')
			i++;
	else
		return false;
	if (s[i] == '.') {
		if (!(s[++i] >= '0' && s[i] <= '9'))
			return false;
		while (s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (s[i] == 'e' || s[i] == 'E') {
		i += s[i + 1] == '+' || s[i + 1] == '-';
		if (!(s[++i] >= '0' && s[i] <= '9'))
			return false;
		while (s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return s[i] == 0;
}

typedef struct keyref {
	const char *name;
	int index;
	yaml_node_t *node;
} keyref;

static int keyref_cmp(const void *x, const void *y)
{
	const keyref *a = x, *b = y;
	int c = strcmp(a->name, b->name);
	return c ? c : a->index - b->index;
}

/* A string in single quotes (or a YAML block scalar). */
static void not_double_quoted(hf *c, const yaml_node_t *n)
{
	diag_error(ydoc_at(&c->d, n), "a string in %s is YAML, not JSON: write \"%s\" in double "
	           "quotes", n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ? "single quotes"
	                                                                       : "a block",
	           ysrc_shown(c->a, (const char *)n->data.scalar.value));
}

/* The tree is JSON: objects and arrays in flow style, keys strings, each
 * key once per object, scalars JSON's; no tag, no alias (a node reached
 * twice).  0, or -1 after a diagnostic. */
static int json_check(hf *c, yaml_node_t *n, unsigned char *seen)
{
	int id = (int)(n - c->d.doc.nodes.start);
	if (seen[id]) {
		diag_error(ydoc_at(&c->d, n), "an alias (*NAME) is YAML, not JSON; write the value out");
		return -1;
	}
	seen[id] = 1;
	if (ydoc_check_tag(&c->d, n, "a JSON value") < 0)
		return -1;
	if (n->type == YAML_SCALAR_NODE) {
		const char *s = (const char *)n->data.scalar.value;
		yaml_scalar_style_t st = n->data.scalar.style;
		if (st == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
			return 0;
		/* Python's json module writes (and reads) Infinity and NaN: a
		 * number read from them is refused where it is read, as not finite. */
		if (st == YAML_PLAIN_SCALAR_STYLE &&
		    (json_number(s) || !strcmp(s, "true") || !strcmp(s, "false") || !strcmp(s, "null") ||
		     !strcmp(s, "Infinity") || !strcmp(s, "-Infinity") || !strcmp(s, "NaN")))
			return 0;
		if (st == YAML_PLAIN_SCALAR_STYLE)
			diag_error(ydoc_at(&c->d, n), "'%s' is not a JSON value: a string is written in "
			           "double quotes; numbers, true, false and null bare", ysrc_shown(c->a, s));
		else
			not_double_quoted(c, n);
		return -1;
	}
	bool map = n->type == YAML_MAPPING_NODE;
	if (map ? n->data.mapping.style != YAML_FLOW_MAPPING_STYLE
	        : n->data.sequence.style != YAML_FLOW_SEQUENCE_STYLE) {
		diag_error(ydoc_at(&c->d, n), "a YAML block %s is not JSON; a config.json holds one "
		           "JSON object", map ? "mapping" : "sequence");
		return -1;
	}
	if (!map) {
		for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++)
			if (json_check(c, ydoc_node(&c->d, *i), seen) < 0)
				return -1;
		return 0;
	}
	int np = (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	keyref *k = arena_alloc(c->a, (size_t)(np ? np : 1) * sizeof *k);
	for (int i = 0; i < np; i++) {
		yaml_node_pair_t *p = &n->data.mapping.pairs.start[i];
		yaml_node_t *kn = ydoc_node(&c->d, p->key);
		if (kn->type == YAML_SCALAR_NODE && (kn->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		                                     kn->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
		                                     kn->data.scalar.style == YAML_FOLDED_SCALAR_STYLE)) {
			not_double_quoted(c, kn);
			return -1;
		}
		if (kn->type != YAML_SCALAR_NODE || kn->data.scalar.style != YAML_DOUBLE_QUOTED_SCALAR_STYLE) {
			diag_error(ydoc_at(&c->d, kn), "a key of a JSON object is a string in double quotes, "
			           "got %s", ydoc_describe(&c->d, kn));
			return -1;
		}
		const char *name = (const char *)kn->data.scalar.value;
		if (strlen(name) != kn->data.scalar.length) {
			diag_error(ydoc_at(&c->d, kn), "a key holds a NUL character");
			return -1;
		}
		k[i] = (keyref){name, i, kn};
		if (json_check(c, ydoc_node(&c->d, p->value), seen) < 0)
			return -1;
	}
	qsort(k, (size_t)np, sizeof *k, keyref_cmp);
	for (int i = 1; i < np; i++)
		if (!strcmp(k[i].name, k[i - 1].name)) {
			/* JSON leaves a repeated key to the reader; Python keeps the last. */
			const char *s = ysrc_shown(c->a, k[i].name);
			diag_error(ydoc_at(&c->d, k[i].node), "duplicate key \"%s\"", s);
			diag_note(ydoc_at(&c->d, k[i - 1].node), "the first \"%s\" is here", s);
			return -1;
		}
	return 0;
}

static int load(hf *c)
{
	if (ydoc_load(&c->d, c->a, c->src, "config.json") < 0)
		return -1;
	c->root = yaml_document_get_root_node(&c->d.doc);
	size_t nn = (size_t)(c->d.doc.nodes.top - c->d.doc.nodes.start);
	unsigned char *seen = arena_alloc(c->a, nn + 1);
	if (json_check(c, c->root, seen) < 0)
		return -1;
	if (c->root->type != YAML_MAPPING_NODE) {
		diag_error(ydoc_at(&c->d, c->root), "expected a JSON object at the top level of a "
		           "config.json, got %s", ydoc_describe(&c->d, c->root));
		return -1;
	}
	yaml_node_t *r = c->root;
	c->n = (int)(r->data.mapping.pairs.top - r->data.mapping.pairs.start);
	size_t cap = (size_t)(c->n ? c->n : 1);
	c->name = arena_alloc(c->a, cap * sizeof *c->name);
	c->key = arena_alloc(c->a, cap * sizeof *c->key);
	c->val = arena_alloc(c->a, cap * sizeof *c->val);
	c->read = arena_alloc(c->a, cap * sizeof *c->read);
	for (int i = 0; i < c->n; i++) {
		yaml_node_pair_t *p = &r->data.mapping.pairs.start[i];
		c->key[i] = ydoc_node(&c->d, p->key);
		c->val[i] = ydoc_node(&c->d, p->value);
		c->name[i] = (const char *)c->key[i]->data.scalar.value;
	}
	return 0;
}

/* ---- keys ---------------------------------------------------------------- */

static int find(const hf *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->name[i], name))
			return i;
	return -1;
}

static bool ignored(const hf *c, const char *name)
{
	for (int i = 0; i < c->nignore; i++)
		if (!strcmp(c->ignore[i], name))
			return true;
	return false;
}

static void ask(hf *c, const char *name)
{
	if (c->nasked == c->capasked) {
		int cap = c->capasked ? 2 * c->capasked : 64;
		const char **v = arena_alloc(c->a, (size_t)cap * sizeof *v);
		if (c->nasked)
			memcpy(v, c->asked, (size_t)c->nasked * sizeof *v);
		c->asked = v, c->capasked = cap;
	}
	c->asked[c->nasked++] = name;
}

/* A key's value: NULL when the key is absent, null, or ignored (--ignore
 * reads a key the format can say as absent). */
static yaml_node_t *get(hf *c, const char *name)
{
	ask(c, name);
	int i = find(c, name);
	if (i < 0)
		return NULL;
	c->read[i] = true;
	if (ignored(c, name) || is_plain(c->val[i], "null"))
		return NULL;
	return c->val[i];
}

/* The value of a key whose refusal --ignore lifts (refuse): kept when
 * ignored. */
static yaml_node_t *get_kept(hf *c, const char *name)
{
	ask(c, name);
	int i = find(c, name);
	if (i < 0)
		return NULL;
	c->read[i] = true;
	return is_plain(c->val[i], "null") ? NULL : c->val[i];
}

static ir_loc key_loc(hf *c, const char *name)
{
	int i = find(c, name);
	return i < 0 ? ydoc_at(&c->d, c->root) : ydoc_at(&c->d, c->val[i]);
}

/* What `name` says that the format cannot (why): an error at its value,
 * unless --ignore names the key; then a note, the header lists it, and
 * the import goes on without that part.  0 to go on, -1 after the error. */
static int refuse(hf *c, const char *name, const char *why)
{
	ir_loc at = key_loc(c, name);
	if (ignored(c, name)) {
		diag_note(at, "'%s' left out (--ignore): %s", name, why);
		return 0;
	}
	diag_error(at, "'%s' cannot be imported: %s; docs/import.md lists what each family maps, or "
	           "--ignore %s to import the model without it", name, why, name);
	return -1;
}

static const char *what(hf *c, const char *name)
{
	return arena_printf(c->a, "'%s'", name);
}

/* integer := JSON integer in lo..hi; def when absent. */
static int get_int(hf *c, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
	yaml_node_t *v = get(c, name);
	*out = def;
	return v ? ydoc_int(&c->d, v, what(c, name), lo, hi, out) : 0;
}

/* A required integer. */
static int need_int(hf *c, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
	if (!get(c, name)) {
		diag_error(ydoc_at(&c->d, c->root), "missing key '%s' in a %s config%s", name, c->type,
		           ignored(c, name) ? " (it is --ignore'd, but nothing can stand for it)" : "");
		return -1;
	}
	return get_int(c, name, lo, hi, 0, out);
}

/* number := JSON number, finite (Python's Infinity and NaN are refused
 * here, by name). */
static int read_num(hf *c, yaml_node_t *v, const char *name, double *out)
{
	if (is_plain(v, "Infinity") || is_plain(v, "-Infinity") || is_plain(v, "NaN")) {
		diag_error(ydoc_at(&c->d, v), "'%s' must be a finite number, got %s", name,
		           (const char *)v->data.scalar.value);
		return -1;
	}
	return ydoc_num(&c->d, v, what(c, name), YSRC_ANY, out);
}

static int get_num(hf *c, const char *name, double def, double *out)
{
	yaml_node_t *v = get(c, name);
	*out = def;
	return v ? read_num(c, v, name, out) : 0;
}

static int get_bool(hf *c, const char *name, bool def, bool *out)
{
	yaml_node_t *v = get(c, name);
	*out = def;
	if (!v)
		return 0;
	if (is_plain(v, "true") || is_plain(v, "false")) {
		*out = is_plain(v, "true");
		return 0;
	}
	diag_error(ydoc_at(&c->d, v), "expected true or false for '%s', got %s", name,
	           ydoc_describe(&c->d, v));
	return -1;
}

/* A string; kept: read even when ignored (a value refuse() judges). */
static int read_str(hf *c, const char *name, bool kept, const char *def, const char **out)
{
	yaml_node_t *v = kept ? get_kept(c, name) : get(c, name);
	*out = def;
	if (!v)
		return 0;
	if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_DOUBLE_QUOTED_SCALAR_STYLE) {
		diag_error(ydoc_at(&c->d, v), "expected a string for '%s', got %s", name,
		           ydoc_describe(&c->d, v));
		return -1;
	}
	return ydoc_str(&c->d, v, what(c, name), out);
}

static int get_str(hf *c, const char *name, const char *def, const char **out)
{
	return read_str(c, name, false, def, out);
}

/* A key that does not shape training unless it is not `zero` (a dropout,
 * a noise): 0 is fine, anything else refused. */
static int want_zero(hf *c, const char *name, const char *why)
{
	yaml_node_t *n = get_kept(c, name);
	double v = 0;
	if (n && read_num(c, n, name, &v) < 0)
		return -1;
	return v == 0 ? 0 : refuse(c, name, why);
}

/* A flag whose other value the format cannot say. */
static int want_bool(hf *c, const char *name, bool want, const char *why)
{
	yaml_node_t *n = get_kept(c, name);
	if (!n)
		return 0;
	if (!is_plain(n, "true") && !is_plain(n, "false")) {
		diag_error(ydoc_at(&c->d, n), "expected true or false for '%s', got %s", name,
		           ydoc_describe(&c->d, n));
		return -1;
	}
	return is_plain(n, want ? "true" : "false") ? 0 : refuse(c, name, why);
}

/* ---- the model ------------------------------------------------------------ */

typedef struct model {
	int64_t hidden, vocab, seq, maxpos, layers;
	bool tie;
	/* attention */
	int64_t heads, kv_heads, head_dim, window, q_lora, kv_lora, rope_dim, v_head_dim;
	double rope_theta;
	bool qkv_bias, qk_norm, mla;
	/* rope_scaling: the type (ir_rope_scaling) and the fields as
	 * ir_layer.attr holds them (IR_ATTR_ROPE_FACTOR ..), 0 absent */
	int rope_type;
	int64_t rope[IR_NATTRS];
	/* mlp and moe */
	int64_t ffn, experts, top_k, expert_ffn, shared;
	bool shared_gate; /* the shared experts behind a sigmoid gate (Qwen2-MoE) */
	const char *act;
	/* mamba */
	int64_t version, state, expand, conv, m_heads, m_head_dim, groups, dt_rank;
	char *str; /* one character per sub-layer */
	int len;
} model;

static void alloc_layers(hf *c, model *m, int64_t per_layer)
{
	m->str = arena_alloc(c->a, (size_t)(m->layers * per_layer + 1));
	m->len = 0;
}

/* hidden_act of a gated MLP (gate, up, down): silu -> swiglu, GELU -> geglu.
 * The tanh approximations of GELU are imported as the exact GELU
 * (docs/import.md). */
static int gated_act(hf *c, const char *key, const char *def, model *m)
{
	const char *s;
	if (get_str(c, key, def, &s) < 0)
		return -1;
	if (!strcmp(s, "silu") || !strcmp(s, "swish"))
		m->act = "swiglu";
	else if (!strcmp(s, "gelu") || !strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new") ||
	         !strcmp(s, "gelu_fast"))
		m->act = "geglu";
	else
		return refuse(c, key, arena_printf(c->a, "the gated MLP's activation '%s' is not one of "
		                                   "silu (swiglu) or gelu (geglu)", ysrc_shown(c->a, s)));
	return 0;
}

/* rope_scaling := {"rope_type" (or "type"): TYPE, FIELD: value, ...}:
 * types linear, llama3 and yarn as the attention layers' rope_scaling
 * (docs/import.md), "default" as none; another type refused at the key.
 * A null field, and beta_fast, beta_slow, mscale or mscale_all_dim at 0,
 * are absent, as Hugging Face reads them; yarn's
 * original_max_position_embeddings defaults to max_position_embeddings.
 * Hugging Face's attention layers scale the scores by mscale_all_dim in
 * DeepSeek's alone: elsewhere the two mscales become the attention factor
 * they give. */
static int read_rope_scaling(hf *c, model *m)
{
	yaml_node_t *rs = get_kept(c, "rope_scaling");
	if (!rs)
		return 0;
	if (rs->type != YAML_MAPPING_NODE) {
		diag_error(ydoc_at(&c->d, rs), "expected a JSON object for 'rope_scaling', got %s",
		           ydoc_describe(&c->d, rs));
		return -1;
	}
	yaml_node_t *tn = ydoc_peek(&c->d, rs, "rope_type");
	if (!tn)
		tn = ydoc_peek(&c->d, rs, "type");
	const char *type;
	if (!tn) {
		diag_error(ydoc_at(&c->d, rs), "'rope_scaling' has no \"rope_type\" (or \"type\")");
		return -1;
	}
	if (ydoc_scalar(&c->d, tn, "'rope_type'", "a string", &type) < 0)
		return -1;
	int t = ir_lookup(ir_rope_scaling_names + 1, IR_NROPE_SCALINGS - 1, type) + 1;
	if (strcmp(type, "default") != 0 && !t)
		return refuse(c, "rope_scaling", arena_printf(c->a, "RoPE scaling of type '%s': the "
		              "attention layer's rope_scaling is linear, llama3 or yarn",
		              ysrc_shown(c->a, type)));
	if (ignored(c, "rope_scaling")) /* one the format can say: read as absent */
		return 0;
	const char *tname = t ? ir_rope_scaling_names[t] : "default";
	int64_t *v = m->rope;
	yaml_node_t *at[IR_NATTRS] = {0};
	for (yaml_node_pair_t *p = rs->data.mapping.pairs.start; p < rs->data.mapping.pairs.top; p++) {
		yaml_node_t *kn = ydoc_node(&c->d, p->key), *vn = ydoc_node(&c->d, p->value);
		const char *key = (const char *)kn->data.scalar.value;
		if (!strcmp(key, "rope_type") || !strcmp(key, "type") || is_plain(vn, "null"))
			continue;
		if (!strcmp(key, "truncate")) { /* the yarn ramp's bounds rounded, as ours */
			if (is_plain(vn, "true"))
				continue;
			return refuse(c, "rope_scaling", "yarn's ramp with unrounded bounds (\"truncate\": "
			              "false): the attention layer's rounds them");
		}
		int a = IR_ATTR_ROPE_FACTOR;
		while (a <= IR_ATTR_ROPE_MSCALE_ALL_DIM &&
		       strcmp(ir_attr_table[a].name + strlen("rope_scaling."), key) != 0)
			a++;
		if (a > IR_ATTR_ROPE_MSCALE_ALL_DIM || ir_rope_field_use(t, a) == IR_USE_NO) {
			diag_error(ydoc_at(&c->d, kn), "'%s' in 'rope_scaling' is not a field of its type "
			           "%s, which the import reads (docs/import.md); --ignore rope_scaling to "
			           "import the model without the scaling", ysrc_shown(c->a, key), tname);
			return -1;
		}
		const char *what = arena_printf(c->a, "'%s' in 'rope_scaling'", key);
		if (ir_attr_table[a].type == IR_AT_INT) {
			if (ydoc_int(&c->d, vn, what, 1, ir_attr_table[a].max, &v[a]) < 0)
				return -1;
			continue;
		}
		double x;
		if (read_num(c, vn, key, &x) < 0)
			return -1;
		bool zero_absent = a == IR_ATTR_ROPE_BETA_FAST || a == IR_ATTR_ROPE_BETA_SLOW ||
		                   a == IR_ATTR_ROPE_MSCALE || a == IR_ATTR_ROPE_MSCALE_ALL_DIM;
		if (x == 0 && zero_absent)
			continue;
		double lo = (double)ir_attr_table[a].min;
		if (!(x > 0) || x < lo) {
			diag_error(ydoc_at(&c->d, vn), "%s must be %s, got %s", what,
			           lo > 0 ? "at least 1" : "greater than 0",
			           ysrc_shown(c->a, (const char *)vn->data.scalar.value));
			return -1;
		}
		v[a] = ir_real_bits(x);
		at[a] = vn;
	}
	m->rope_type = t;
	if (t == IR_ROPE_YARN && !v[IR_ATTR_ROPE_ORIG_MAX])
		v[IR_ATTR_ROPE_ORIG_MAX] = m->maxpos < (1 << 30) ? m->maxpos : 1 << 30;
	for (int a = IR_ATTR_ROPE_FACTOR; a <= IR_ATTR_ROPE_MSCALE_ALL_DIM; a++)
		if (!v[a] && ir_rope_field_use(t, a) == IR_USE_REQUIRED) {
			diag_error(ydoc_at(&c->d, rs), "missing key '%s' in 'rope_scaling' of type %s",
			           ir_attr_table[a].name + strlen("rope_scaling."), tname);
			return -1;
		}
	if (t == IR_ROPE_YARN && v[IR_ATTR_ROPE_MSCALE] && !v[IR_ATTR_ROPE_MSCALE_ALL_DIM])
		v[IR_ATTR_ROPE_MSCALE] = 0; /* Hugging Face reads it only with mscale_all_dim */
	/* The ranges that tie two values, at the second (docs/yaml.md). */
	ir_layer l = {.kind = IR_LAYER_ATTENTION};
	memcpy(l.attr, v, sizeof l.attr);
	double lo = ir_attr_real(&l, IR_ATTR_ROPE_LOW_FREQ), hi = ir_attr_real(&l, IR_ATTR_ROPE_HIGH_FREQ);
	double fast = ir_attr_real_or_default(&l, IR_ATTR_ROPE_BETA_FAST);
	double slow = ir_attr_real_or_default(&l, IR_ATTR_ROPE_BETA_SLOW);
	if (t == IR_ROPE_LLAMA3 && !(hi > lo)) {
		diag_error(ydoc_at(&c->d, at[IR_ATTR_ROPE_HIGH_FREQ]), "'high_freq_factor' in "
		           "'rope_scaling' (%g) must be greater than its 'low_freq_factor' (%g)", hi, lo);
		return -1;
	}
	if (t == IR_ROPE_YARN && !(fast > slow)) {
		int a = at[IR_ATTR_ROPE_BETA_SLOW] ? IR_ATTR_ROPE_BETA_SLOW : IR_ATTR_ROPE_BETA_FAST;
		diag_error(ydoc_at(&c->d, at[a]), "'beta_slow' in 'rope_scaling' (%g) must be less than "
		           "its 'beta_fast' (%g)", slow, fast);
		return -1;
	}
	if (t == IR_ROPE_YARN && !(m->rope_theta > 1)) {
		diag_error(key_loc(c, "rope_theta"), "'rope_theta' must be greater than 1 with yarn's "
		           "'rope_scaling' (its ramp divides by log(rope_theta))");
		return -1;
	}
	return 0;
}

/* yarn's mscales outside DeepSeek: the attention factor they give (their
 * ratio, or 0.1 ln(factor) + 1 without mscale), no scale of the scores. */
static void rope_mscales_as_factor(model *m)
{
	int64_t *v = m->rope;
	if (m->rope_type != IR_ROPE_YARN || !v[IR_ATTR_ROPE_MSCALE_ALL_DIM])
		return;
	if (v[IR_ATTR_ROPE_MSCALE] && !v[IR_ATTR_ROPE_ATTN_FACTOR]) {
		double f, ms, all;
		memcpy(&f, &v[IR_ATTR_ROPE_FACTOR], sizeof f);
		memcpy(&ms, &v[IR_ATTR_ROPE_MSCALE], sizeof ms);
		memcpy(&all, &v[IR_ATTR_ROPE_MSCALE_ALL_DIM], sizeof all);
		double a = f <= 1 ? 1 : (0.1 * ms * log(f) + 1) / (0.1 * all * log(f) + 1);
		v[IR_ATTR_ROPE_ATTN_FACTOR] = ir_real_bits(a);
	}
	v[IR_ATTR_ROPE_MSCALE] = v[IR_ATTR_ROPE_MSCALE_ALL_DIM] = 0;
}

/* The layer text of rope_scaling, "" without. */
static const char *rope_text(arena *a, const model *m)
{
	if (!m->rope_type)
		return "";
	const char *k = arena_printf(a, ", rope_scaling: {type: %s", ir_rope_scaling_names[m->rope_type]);
	for (int f = IR_ATTR_ROPE_FACTOR; f <= IR_ATTR_ROPE_MSCALE_ALL_DIM; f++) {
		int64_t x = m->rope[f];
		const char *key = ir_attr_table[f].name + strlen("rope_scaling.");
		if (!x)
			continue;
		if (ir_attr_table[f].type == IR_AT_INT) {
			k = arena_printf(a, "%s, %s: %lld", k, key, (long long)x);
			continue;
		}
		double d;
		char buf[64];
		memcpy(&d, &x, sizeof d);
		if (d == ir_attr_real_default((ir_attr)f))
			continue; /* beta_fast 32, beta_slow 1 */
		fmt_double(buf, sizeof buf, d);
		k = arena_printf(a, "%s, %s: %s", k, key, buf);
	}
	return arena_printf(a, "%s}", k);
}

/* The keys every decoder family shares: sizes, attention heads, RoPE. */
static int read_common(hf *c, model *m, int64_t default_seq)
{
	int64_t maxpos;
	if (need_int(c, "hidden_size", 1, 1 << 20, &m->hidden) < 0 ||
	    need_int(c, "vocab_size", 1, 1 << 24, &m->vocab) < 0 ||
	    need_int(c, "num_hidden_layers", 1, 50000, &m->layers) < 0 ||
	    get_int(c, "max_position_embeddings", 1, INT64_MAX, default_seq, &maxpos) < 0)
		return -1;
	/* The trained sequence is a training choice, not the config's limit:
	 * up to 4096 tokens (docs/import.md). */
	m->seq = maxpos < 4096 ? maxpos : 4096;
	m->maxpos = maxpos;
	if (get_num(c, "rope_theta", 10000, &m->rope_theta) < 0)
		return -1;
	if (!(m->rope_theta > 0)) {
		diag_error(key_loc(c, "rope_theta"), "'rope_theta' must be greater than 0");
		return -1;
	}
	if (read_rope_scaling(c, m) < 0)
		return -1;
	return want_zero(c, "attention_dropout", "attention dropout: the attention layer has none");
}

/* heads, kv heads and the head size of a GQA attention layer. */
static int read_heads(hf *c, model *m, const char *head_dim_key)
{
	if (need_int(c, "num_attention_heads", 1, 65536, &m->heads) < 0 ||
	    get_int(c, "num_key_value_heads", 1, 65536, m->heads, &m->kv_heads) < 0 ||
	    get_int(c, head_dim_key, 1, 65536, 0, &m->head_dim) < 0)
		return -1;
	if (m->heads % m->kv_heads) {
		diag_error(key_loc(c, "num_key_value_heads"), "'num_key_value_heads' (%lld) does not "
		           "divide 'num_attention_heads' (%lld)", (long long)m->kv_heads, (long long)m->heads);
		return -1;
	}
	if (!m->head_dim) {
		if (m->hidden % m->heads) {
			diag_error(key_loc(c, "num_attention_heads"), "'hidden_size' (%lld) is not divisible "
			           "by 'num_attention_heads' (%lld), and there is no '%s'",
			           (long long)m->hidden, (long long)m->heads, head_dim_key);
			return -1;
		}
		m->head_dim = m->hidden / m->heads;
	}
	return 0;
}

static int read_tie(hf *c, model *m, bool def)
{
	return get_bool(c, "tie_word_embeddings", def, &m->tie);
}

/* ---- families --------------------------------------------------------------- */

static void push(model *m, char ch)
{
	m->str[m->len++] = ch;
	m->str[m->len] = 0;
}

/* Llama 2, 3, 3.1 and Mistral: attention (window: Mistral's sliding
 * window) and a gated MLP per layer. */
static int read_llama(hf *c, model *m)
{
	bool mistral = !strcmp(c->type, "mistral");
	if (read_common(c, m, mistral ? 131072 : 2048) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 || gated_act(c, "hidden_act", "silu", m) < 0 ||
	    read_tie(c, m, false) < 0 || get_int(c, "sliding_window", 0, 1 << 30, 0, &m->window) < 0 ||
	    want_bool(c, "attention_bias", false, "biases on q, k, v and o: the attention layer "
	              "has q, k, v biases at most (qkv_bias)") < 0 ||
	    want_bool(c, "mlp_bias", false, "biases in the MLP: the mlp layer has none") < 0)
		return -1;
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++)
		push(m, m->window ? 's' : '*'), push(m, '-');
	return 0;
}

/* Mixtral: Mistral's attention and a MoE of gated experts per layer. */
static int read_mixtral(hf *c, model *m)
{
	if (read_common(c, m, 131072) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->expert_ffn) < 0 ||
	    need_int(c, "num_local_experts", 1, 65536, &m->experts) < 0 ||
	    need_int(c, "num_experts_per_tok", 1, m->experts, &m->top_k) < 0 ||
	    gated_act(c, "hidden_act", "silu", m) < 0 || read_tie(c, m, false) < 0 ||
	    get_int(c, "sliding_window", 0, 1 << 30, 0, &m->window) < 0 ||
	    want_zero(c, "router_jitter_noise", "router input noise: the moe layer's router has none") < 0 ||
	    want_bool(c, "output_router_logits", false, "the router's auxiliary load-balancing loss: "
	              "the moe layer has none") < 0)
		return -1;
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++)
		push(m, m->window ? 's' : '*'), push(m, 'E');
	return 0;
}

/* Qwen2, Qwen2-MoE, Qwen3 and Qwen3-MoE: attention with q, k, v biases
 * (Qwen3: with q and k norms instead); a gated MLP, or a MoE on every
 * decoder_sparse_step-th layer not in mlp_only_layers (Qwen2-MoE: with
 * shared experts behind a sigmoid gate, shared_gate). */
static int read_qwen2(hf *c, model *m)
{
	bool moe = !strcmp(c->type, "qwen2_moe") || !strcmp(c->type, "qwen3_moe");
	bool three = !strncmp(c->type, "qwen3", 5);
	bool sliding;
	if (read_common(c, m, 32768) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 ||
	    gated_act(c, "hidden_act", "silu", m) < 0 || read_tie(c, m, false) < 0 ||
	    get_bool(c, "use_sliding_window", false, &sliding) < 0)
		return -1;
	/* Qwen2 always has q, k, v biases; Qwen3 none (attention_bias, off,
	 * would add o's too) and an RMSNorm on every q and k head instead. */
	m->qkv_bias = !three;
	m->qk_norm = three;
	if (three && want_bool(c, "attention_bias", false, "biases on q, k, v and o: the attention "
	                       "layer has q, k, v biases at most (qkv_bias)") < 0)
		return -1;
	/* Without use_sliding_window these two say nothing. */
	int64_t sw, mwl;
	if (get_int(c, "sliding_window", 0, 1 << 30, 0, &sw) < 0 ||
	    get_int(c, "max_window_layers", 0, INT64_MAX, 0, &mwl) < 0)
		return -1;
	if (sliding && refuse(c, "use_sliding_window", "a sliding window on the layers from "
	                      "max_window_layers on: the import gives every attention layer one window") < 0)
		return -1;
	int64_t step = 1, shared_ffn = 0;
	bool *dense = arena_alloc(c->a, (size_t)m->layers);
	if (moe) {
		bool norm;
		if (need_int(c, "num_experts", 1, 65536, &m->experts) < 0 ||
		    need_int(c, "num_experts_per_tok", 1, m->experts, &m->top_k) < 0 ||
		    need_int(c, "moe_intermediate_size", 1, 1 << 24, &m->expert_ffn) < 0 ||
		    get_int(c, "decoder_sparse_step", 1, 1 << 20, 1, &step) < 0 ||
		    get_bool(c, "norm_topk_prob", false, &norm) < 0)
			return -1;
		if (!norm && refuse(c, "norm_topk_prob", "top-k weights that are not renormalised: the "
		                    "moe layer renormalises them to sum to 1") < 0)
			return -1;
		if (want_bool(c, "output_router_logits", false, "the router's auxiliary load-balancing "
		              "loss: the moe layer has none") < 0)
			return -1;
		yaml_node_t *sv = get(c, "shared_expert_intermediate_size");
		if (sv && ydoc_int(&c->d, sv, "'shared_expert_intermediate_size'", 0, 1 << 24, &shared_ffn) < 0)
			return -1;
		if (shared_ffn % m->expert_ffn) {
			diag_error(ydoc_at(&c->d, sv), "'shared_expert_intermediate_size' (%lld) is not a "
			           "multiple of 'moe_intermediate_size' (%lld): the moe layer's shared experts "
			           "are each expert_ffn wide", (long long)shared_ffn, (long long)m->expert_ffn);
			return -1;
		}
		m->shared = shared_ffn / m->expert_ffn;
		/* Qwen2-MoE's shared experts sit behind shared_expert_gate. */
		m->shared_gate = m->shared > 0;
		yaml_node_t *only = get(c, "mlp_only_layers");
		if (only) {
			if (ydoc_want(&c->d, only, YAML_SEQUENCE_NODE, "'mlp_only_layers'") < 0)
				return -1;
			for (yaml_node_item_t *it = only->data.sequence.items.start;
			     it < only->data.sequence.items.top; it++) {
				int64_t i;
				if (ydoc_int(&c->d, ydoc_node(&c->d, *it), "a layer of 'mlp_only_layers'", 0,
				             m->layers - 1, &i) < 0)
					return -1;
				dense[i] = true;
			}
		}
	}
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++)
		push(m, '*'), push(m, moe && !dense[i] && (i + 1) % step == 0 ? 'E' : '-');
	return 0;
}

/* Gemma and Gemma-2: head_dim given, GeGLU, tied embeddings; Gemma-2's
 * even layers have a sliding window. */
static int read_gemma(hf *c, model *m)
{
	bool two = !strcmp(c->type, "gemma2");
	if (read_common(c, m, 8192) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 || read_tie(c, m, true) < 0 ||
	    want_bool(c, "attention_bias", false, "biases on q, k, v and o: the attention layer "
	              "has q, k, v biases at most (qkv_bias)") < 0)
		return -1;
	/* hidden_activation, when given, is the one Gemma uses. */
	const char *key = find(c, "hidden_activation") >= 0 && get(c, "hidden_activation")
	                      ? "hidden_activation" : "hidden_act";
	(void)get(c, "hidden_act");
	if (gated_act(c, key, "gelu_pytorch_tanh", m) < 0)
		return -1;
	if (two) {
		double scalar, cap;
		if (get_int(c, "sliding_window", 0, 1 << 30, 4096, &m->window) < 0 ||
		    get_num(c, "query_pre_attn_scalar", (double)m->head_dim, &scalar) < 0)
			return -1;
		(void)get(c, "sliding_window_size"); /* the same, under an older name */
		if (scalar != (double)m->head_dim &&
		    refuse(c, "query_pre_attn_scalar", "scores scaled by a size other than head_dim: "
		           "the attention layer divides them by sqrt(head_dim)") < 0)
			return -1;
		static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
		for (int i = 0; i < 2; i++) {
			if (get_num(c, caps[i], 0, &cap) < 0)
				return -1;
			if (cap != 0 && refuse(c, caps[i], "soft-capped logits (cap * tanh(x / cap)): "
			                       "the layers have no cap") < 0)
				return -1;
		}
	}
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++)
		push(m, two && i % 2 == 0 && m->window ? 's' : '*'), push(m, '-');
	return 0;
}

/* DeepSeek-V2 and V3: MLA attention; a gated MLP on the first
 * first_k_dense_replace layers (and those off moe_layer_freq), a MoE with
 * shared experts on the others. */
static int read_deepseek(hf *c, model *m)
{
	int64_t nope, first_dense, freq;
	if (read_common(c, m, 163840) < 0 ||
	    need_int(c, "num_attention_heads", 1, 65536, &m->heads) < 0 ||
	    get_int(c, "q_lora_rank", 0, 1 << 20, 0, &m->q_lora) < 0 ||
	    need_int(c, "kv_lora_rank", 1, 1 << 20, &m->kv_lora) < 0 ||
	    need_int(c, "qk_rope_head_dim", 1, 65536, &m->rope_dim) < 0 ||
	    need_int(c, "qk_nope_head_dim", 1, 65536, &nope) < 0 ||
	    need_int(c, "v_head_dim", 1, 65536, &m->v_head_dim) < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 ||
	    gated_act(c, "hidden_act", "silu", m) < 0 || read_tie(c, m, false) < 0 ||
	    get_int(c, "first_k_dense_replace", 0, INT64_MAX, 0, &first_dense) < 0 ||
	    get_int(c, "moe_layer_freq", 1, 1 << 20, 1, &freq) < 0 ||
	    want_bool(c, "attention_bias", false, "biases on the attention projections: the MLA "
	              "layer has none") < 0)
		return -1;
	m->mla = true;
	m->head_dim = nope;
	(void)get(c, "num_key_value_heads"); /* MLA's keys and values are per head */
	yaml_node_t *routed = get(c, "n_routed_experts");
	if (routed) {
		const char *scoring, *method;
		bool norm;
		double scale;
		if (ydoc_int(&c->d, routed, "'n_routed_experts'", 1, 65536, &m->experts) < 0 ||
		    need_int(c, "num_experts_per_tok", 1, m->experts, &m->top_k) < 0 ||
		    need_int(c, "moe_intermediate_size", 1, 1 << 24, &m->expert_ffn) < 0 ||
		    get_int(c, "n_shared_experts", 0, 65536, 0, &m->shared) < 0 ||
		    read_str(c, "scoring_func", true, "softmax", &scoring) < 0 ||
		    read_str(c, "topk_method", true, "greedy", &method) < 0 ||
		    get_bool(c, "norm_topk_prob", false, &norm) < 0)
			return -1;
		yaml_node_t *sf = get_kept(c, "routed_scaling_factor");
		scale = 1;
		if (sf && read_num(c, sf, "routed_scaling_factor", &scale) < 0)
			return -1;
		if (strcmp(scoring, "softmax") != 0 &&
		    refuse(c, "scoring_func", arena_printf(c->a, "router scores by '%s': the moe layer's "
		           "router is a softmax", ysrc_shown(c->a, scoring))) < 0)
			return -1;
		/* Group-limited choices: n_group and topk_group say which groups. */
		int64_t groups, topk_groups;
		if (get_int(c, "n_group", 1, 65536, 1, &groups) < 0 ||
		    get_int(c, "topk_group", 1, 65536, 1, &topk_groups) < 0)
			return -1;
		if (strcmp(method, "greedy") != 0 &&
		    refuse(c, "topk_method", arena_printf(c->a, "top-k selection '%s' (by expert groups, "
		           "n_group and topk_group): the moe layer picks the top k of all experts",
		           ysrc_shown(c->a, method))) < 0)
			return -1;
		if (m->top_k > 1 && !norm &&
		    refuse(c, "norm_topk_prob", "top-k weights that are not renormalised: the moe "
		           "layer renormalises them to sum to 1") < 0)
			return -1;
		if (scale != 1 && refuse(c, "routed_scaling_factor", "routed experts' outputs scaled by "
		                         "a factor: the moe layer adds them as they are") < 0)
			return -1;
		if (want_zero(c, "aux_loss_alpha", "the router's auxiliary load-balancing loss: the "
		              "moe layer has none") < 0)
			return -1;
		(void)get(c, "seq_aux"); /* how that loss is summed */
	}
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++)
		push(m, '*'), push(m, routed && i >= first_dense && i % freq == 0 ? 'E' : '-');
	return 0;
}

/* Jamba: Mamba-1 mixers with an attention layer every attn_layer_period
 * (at attn_layer_offset), and a MoE every expert_layer_period (at
 * expert_layer_offset), a gated MLP elsewhere. */
static int read_jamba(hf *c, model *m)
{
	int64_t ap, ao, ep, eo;
	if (read_common(c, m, 262144) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 ||
	    gated_act(c, "hidden_act", "silu", m) < 0 || read_tie(c, m, false) < 0 ||
	    get_int(c, "sliding_window", 0, 1 << 30, 0, &m->window) < 0 ||
	    get_int(c, "attn_layer_period", 1, 1 << 20, 8, &ap) < 0 ||
	    get_int(c, "attn_layer_offset", 0, ap - 1, 4, &ao) < 0 ||
	    get_int(c, "expert_layer_period", 1, 1 << 20, 2, &ep) < 0 ||
	    get_int(c, "expert_layer_offset", 0, ep - 1, 1, &eo) < 0 ||
	    get_int(c, "num_experts", 1, 65536, 16, &m->experts) < 0 ||
	    get_int(c, "num_experts_per_tok", 1, m->experts, 2, &m->top_k) < 0 ||
	    get_int(c, "mamba_d_state", 1, 65536, 16, &m->state) < 0 ||
	    get_int(c, "mamba_d_conv", 1, 1024, 4, &m->conv) < 0 ||
	    get_int(c, "mamba_expand", 1, 64, 2, &m->expand) < 0 ||
	    want_bool(c, "mamba_conv_bias", true, "a convolution without bias: the mamba layer's "
	              "has one") < 0 ||
	    want_bool(c, "mamba_proj_bias", false, "biases on the mamba projections: the mamba "
	              "layer has none") < 0 ||
	    want_bool(c, "output_router_logits", false, "the router's auxiliary load-balancing loss: "
	              "the moe layer has none") < 0)
		return -1;
	m->version = 1;
	m->expert_ffn = m->ffn;
	yaml_node_t *r = get(c, "mamba_dt_rank");
	m->dt_rank = (m->hidden + 15) / 16;
	if (r && !is_plain(r, "auto") &&
	    !(r->type == YAML_SCALAR_NODE && r->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE &&
	      !strcmp((const char *)r->data.scalar.value, "auto")) &&
	    ydoc_int(&c->d, r, "'mamba_dt_rank'", 1, 1 << 20, &m->dt_rank) < 0)
		return -1;
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++) {
		push(m, i % ap == ao ? (m->window ? 's' : '*') : 'M');
		push(m, m->experts > 1 && i % ep == eo ? 'E' : '-');
	}
	return 0;
}

/* Nemotron-H: hybrid_override_pattern, one character per layer: 'M'
 * Mamba-2, '*' attention, '-' a plain (up, down) MLP. */
static int read_nemotron_h(hf *c, model *m)
{
	const char *pat, *mact, *act;
	if (read_common(c, m, 8192) < 0 || read_heads(c, m, "attention_head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 || read_tie(c, m, false) < 0 ||
	    need_int(c, "mamba_num_heads", 1, 65536, &m->m_heads) < 0 ||
	    get_int(c, "mamba_head_dim", 1, 65536, 64, &m->m_head_dim) < 0 ||
	    need_int(c, "ssm_state_size", 1, 65536, &m->state) < 0 ||
	    get_int(c, "n_groups", 1, 65536, 1, &m->groups) < 0 ||
	    get_int(c, "conv_kernel", 1, 1024, 4, &m->conv) < 0 ||
	    get_int(c, "expand", 1, 64, 2, &m->expand) < 0 ||
	    get_str(c, "mlp_hidden_act", "relu2", &act) < 0 ||
	    get_str(c, "mamba_hidden_act", "silu", &mact) < 0 ||
	    want_bool(c, "attention_bias", false, "biases on the attention projections: the "
	              "attention layer has q, k, v biases at most (qkv_bias)") < 0 ||
	    want_bool(c, "mlp_bias", false, "biases in the MLP: the mlp layer has none") < 0 ||
	    want_bool(c, "use_bias", false, "biases on the mamba projections: the mamba layer has "
	              "none") < 0 ||
	    want_bool(c, "mamba_proj_bias", false, "biases on the mamba projections: the mamba "
	              "layer has none") < 0 ||
	    want_bool(c, "use_conv_bias", true, "a convolution without bias: the mamba layer's "
	              "has one") < 0 ||
	    want_zero(c, "hidden_dropout", "dropout: the layers have none") < 0 ||
	    get_int(c, "sliding_window", 0, 1 << 30, 0, &m->window) < 0)
		return -1;
	m->version = 2;
	if (!strcmp(act, "relu2") || !strcmp(act, "relu") || !strcmp(act, "gelu"))
		m->act = act;
	else if (refuse(c, "mlp_hidden_act", arena_printf(c->a, "the MLP activation '%s' is not one "
	                "of relu2, relu or gelu", ysrc_shown(c->a, act))) < 0)
		return -1;
	else
		m->act = "relu2";
	if (strcmp(mact, "silu") != 0 &&
	    refuse(c, "mamba_hidden_act", "a gate other than silu: the mamba layer gates by "
	           "silu(z)") < 0)
		return -1;
	if (m->m_heads * m->m_head_dim != m->expand * m->hidden) {
		diag_error(key_loc(c, "mamba_num_heads"), "'mamba_num_heads' x 'mamba_head_dim' (%lld x "
		           "%lld) is not 'expand' x 'hidden_size' (%lld x %lld): the mamba layer's inner "
		           "size is expand x hidden", (long long)m->m_heads, (long long)m->m_head_dim,
		           (long long)m->expand, (long long)m->hidden);
		return -1;
	}
	if (m->m_heads % m->groups) {
		diag_error(key_loc(c, "n_groups"), "'n_groups' (%lld) does not divide 'mamba_num_heads' "
		           "(%lld)", (long long)m->groups, (long long)m->m_heads);
		return -1;
	}
	yaml_node_t *pv = get(c, "hybrid_override_pattern");
	if (!pv) {
		diag_error(ydoc_at(&c->d, c->root), "missing key 'hybrid_override_pattern' in a "
		           "nemotron_h config");
		return -1;
	}
	if (get_str(c, "hybrid_override_pattern", NULL, &pat) < 0)
		return -1;
	size_t n = strlen(pat);
	if ((int64_t)n != m->layers) {
		diag_error(ydoc_at(&c->d, pv), "'hybrid_override_pattern' has %zu characters, but "
		           "'num_hidden_layers' is %lld: one character per layer", n, (long long)m->layers);
		return -1;
	}
	alloc_layers(c, m, 1);
	for (size_t i = 0; i < n; i++) {
		if (pat[i] == 'M' || pat[i] == '*' || pat[i] == '-') {
			push(m, pat[i] == '*' && m->window ? 's' : pat[i]);
			continue;
		}
		/* At the character when the string stands in the file as it is
		 * (no escapes before it), else at the string. */
		ir_loc at = ydoc_at(&c->d, pv);
		const ysrc *y = &c->d.ys;
		size_t off = y->line_start[at.line - 1] + (size_t)at.col;
		if (off + i < y->src->len && !memcmp(y->src->text + off, pat, i + 1))
			at = ysrc_offset_loc(y, off + i);
		if (pat[i] == 'E')
			diag_error(at, "'E' (a MoE layer) in 'hybrid_override_pattern': the import does not "
			           "read Nemotron-H's MoE keys");
		else
			diag_error(at, "unknown layer character '%c' in 'hybrid_override_pattern'; expected "
			           "M (mamba), * (attention) or - (MLP)", pat[i]);
		return -1;
	}
	return 0;
}

/* A muP multiplier (Falcon-H1): a number, or a list of numbers, all 1 when
 * it changes nothing. */
static int want_ones(hf *c, const char *name, const char *why)
{
	yaml_node_t *n = get_kept(c, name);
	if (!n || is_plain(n, "null"))
		return 0;
	bool one = true;
	if (n->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
		     it++) {
			double v;
			if (read_num(c, ydoc_node(&c->d, *it), name, &v) < 0)
				return -1;
			one &= v == 1;
		}
	} else {
		double v;
		if (read_num(c, n, name, &v) < 0)
			return -1;
		one = v == 1;
	}
	return one ? 0 : refuse(c, name, why);
}

/* Falcon-H1: every layer a parallel block (attention and a Mamba-2 mixer
 * on one norm) and a gated MLP. */
static int read_falcon_h1(hf *c, model *m)
{
	static const struct { const char *key, *why; } mup[] = {
	    {"embedding_multiplier", "the embeddings scaled by a constant"},
	    {"lm_head_multiplier", "the logits scaled by a constant"},
	    {"attention_in_multiplier", "the attention's input scaled by a constant"},
	    {"attention_out_multiplier", "the attention's output scaled by a constant"},
	    {"key_multiplier", "the keys scaled by a constant"},
	    {"ssm_in_multiplier", "the mixer's input scaled by a constant"},
	    {"ssm_out_multiplier", "the mixer's output scaled by a constant"},
	    {"ssm_multipliers", "the mixer's in_proj outputs (z, x, B, C, dt) scaled by constants"},
	    {"mlp_multipliers", "the MLP's gate and output scaled by constants"},
	};
	int64_t dssm = 0;
	const char *mact = NULL;
	if (read_common(c, m, 8192) < 0 || read_heads(c, m, "head_dim") < 0 ||
	    need_int(c, "intermediate_size", 1, 1 << 24, &m->ffn) < 0 ||
	    gated_act(c, "hidden_act", "silu", m) < 0 || read_tie(c, m, false) < 0 ||
	    need_int(c, "mamba_n_heads", 1, 65536, &m->m_heads) < 0 ||
	    get_int(c, "mamba_n_groups", 1, 65536, 1, &m->groups) < 0 ||
	    get_int(c, "mamba_d_state", 1, 65536, 256, &m->state) < 0 ||
	    get_int(c, "mamba_d_conv", 1, 1024, 4, &m->conv) < 0 ||
	    get_int(c, "mamba_expand", 1, 64, 2, &m->expand) < 0 ||
	    get_str(c, "mamba_hidden_act", "silu", &mact) < 0 ||
	    want_bool(c, "attention_bias", false, "biases on the attention projections: the "
	              "attention layer has q, k, v biases at most (qkv_bias)") < 0 ||
	    want_bool(c, "mlp_bias", false, "biases in the MLP: the mlp layer has none") < 0 ||
	    want_bool(c, "projectors_bias", false, "biases on the attention and MLP projections: "
	              "the layers have none") < 0 ||
	    want_bool(c, "mamba_proj_bias", false, "biases on the mamba projections: the mamba "
	              "layer has none") < 0 ||
	    want_bool(c, "mamba_conv_bias", true, "a convolution without bias: the mamba layer's "
	              "has one") < 0 ||
	    want_zero(c, "hidden_dropout", "dropout: the layers have none") < 0)
		return -1;
	/* The mixer's gate: a gated RMSNorm (mamba_rms_norm, false when absent)
	 * whose order (mamba_norm_before_gate, true when absent) is the mamba
	 * layer's, norm after gate. */
	yaml_node_t *rn = get_kept(c, "mamba_rms_norm");
	if (rn && !is_plain(rn, "true") && !is_plain(rn, "false")) {
		diag_error(ydoc_at(&c->d, rn), "expected true or false for 'mamba_rms_norm', got %s",
		           ydoc_describe(&c->d, rn));
		return -1;
	}
	if (!(rn && is_plain(rn, "true"))) {
		if (refuse(c, "mamba_rms_norm", "the mixer's output gated without a norm (false, Hugging "
		           "Face's default): the mamba layer's gate is Mamba-2's gated RMSNorm") < 0)
			return -1;
		get(c, "mamba_norm_before_gate");
	} else {
		yaml_node_t *nb = get_kept(c, "mamba_norm_before_gate");
		if ((!nb || is_plain(nb, "true")) &&
		    refuse(c, "mamba_norm_before_gate", "the norm before the gate (true, Hugging Face's "
		           "default), RMSNorm(y) silu(z): the mamba layer's is RMSNorm(y silu(z))") < 0)
			return -1;
		if (nb && !is_plain(nb, "true") && !is_plain(nb, "false")) {
			diag_error(ydoc_at(&c->d, nb), "expected true or false for "
			           "'mamba_norm_before_gate', got %s", ydoc_describe(&c->d, nb));
			return -1;
		}
	}
	for (size_t i = 0; i < NELEMS(mup); i++)
		if (want_ones(c, mup[i].key, arena_printf(c->a, "a muP multiplier other than 1: %s, "
		              "which the layers do not do", mup[i].why)) < 0)
			return -1;
	if (strcmp(mact, "silu") != 0 &&
	    refuse(c, "mamba_hidden_act", "a gate other than silu: the mamba layer gates by "
	           "silu(z)") < 0)
		return -1;
	if (get_kept(c, "attn_layer_indices") &&
	    refuse(c, "attn_layer_indices", "attention on some layers only: a falcon_h1 layer is "
	           "attention and the mixer side by side on every layer") < 0)
		return -1;
	/* The mixer's inner size: mamba_d_ssm when given (Hugging Face then
	 * reads no mamba_expand), else mamba_expand x hidden. */
	yaml_node_t *ds = get(c, "mamba_d_ssm");
	if (ds && !is_plain(ds, "null")) {
		if (ydoc_int(&c->d, ds, "'mamba_d_ssm'", 1, 1 << 24, &dssm) < 0)
			return -1;
		if (dssm % m->hidden) {
			diag_error(ydoc_at(&c->d, ds), "'mamba_d_ssm' (%lld) is not a multiple of "
			           "'hidden_size' (%lld): the mamba layer's inner size is expand x hidden, "
			           "expand a whole number", (long long)dssm, (long long)m->hidden);
			return -1;
		}
		m->expand = dssm / m->hidden;
	}
	int64_t di = m->expand * m->hidden;
	yaml_node_t *dh = get(c, "mamba_d_head");
	m->m_head_dim = di / m->m_heads;
	if (dh && !(dh->type == YAML_SCALAR_NODE && !strcmp((const char *)dh->data.scalar.value, "auto")) &&
	    ydoc_int(&c->d, dh, "'mamba_d_head'", 1, 65536, &m->m_head_dim) < 0)
		return -1;
	if (m->m_heads * m->m_head_dim != di) {
		diag_error(key_loc(c, "mamba_n_heads"), "'mamba_n_heads' x the head size (%lld x %lld) "
		           "is not the mixer's inner size %lld", (long long)m->m_heads,
		           (long long)m->m_head_dim, (long long)di);
		return -1;
	}
	if (m->m_heads % m->groups) {
		diag_error(key_loc(c, "mamba_n_groups"), "'mamba_n_groups' (%lld) does not divide "
		           "'mamba_n_heads' (%lld)", (long long)m->groups, (long long)m->m_heads);
		return -1;
	}
	if (find(c, "rope_theta") < 0)
		m->rope_theta = 1e5; /* FalconH1Config's default */
	m->version = 2;
	alloc_layers(c, m, 2);
	for (int64_t i = 0; i < m->layers; i++) {
		push(m, 'P');
		push(m, '-');
	}
	return 0;
}

/* layer_types (newer configs write it for every family with attention on
 * every layer): per layer "full_attention" or "sliding_attention", which
 * decides each attention layer's window over the family's own rule. */
static int read_layer_types(hf *c, model *m)
{
	yaml_node_t *lt = get(c, "layer_types");
	if (!lt)
		return 0;
	if (ydoc_want(&c->d, lt, YAML_SEQUENCE_NODE, "'layer_types'") < 0)
		return -1;
	int64_t n = lt->data.sequence.items.top - lt->data.sequence.items.start;
	if (n != m->layers) {
		diag_error(ydoc_at(&c->d, lt), "'layer_types' has %lld entries, but 'num_hidden_layers' "
		           "is %lld", (long long)n, (long long)m->layers);
		return -1;
	}
	int k = 0;
	for (yaml_node_item_t *it = lt->data.sequence.items.start; it < lt->data.sequence.items.top; it++) {
		yaml_node_t *e = ydoc_node(&c->d, *it);
		const char *s;
		if (ydoc_scalar(&c->d, e, "an entry of 'layer_types'", "a string", &s) < 0)
			return -1;
		bool sliding = !strcmp(s, "sliding_attention");
		if (!sliding && strcmp(s, "full_attention") != 0) {
			diag_error(ydoc_at(&c->d, e), "unknown layer type '%s' in 'layer_types'; expected "
			           "full_attention or sliding_attention", ysrc_shown(c->a, s));
			return -1;
		}
		if (sliding && !m->window) {
			diag_error(ydoc_at(&c->d, e), "'sliding_attention' in 'layer_types', but the config "
			           "gives no 'sliding_window'");
			return -1;
		}
		while (k < m->len && m->str[k] != '*' && m->str[k] != 's')
			k++;
		m->str[k++] = sliding ? 's' : '*';
	}
	return 0;
}

/* ---- the family table ---------------------------------------------------------- */

typedef struct family {
	const char *type;
	int (*read)(hf *c, model *m);
	const char *const *quiet; /* keys that do not shape training */
} family;

/* Keys of every family that do not shape training: names, token ids,
 * versions, the stored dtype, inference switches, init, norm epsilons
 * (the norms' epsilon is the kernels' own; docs/layers.md). */
static const char *const common_quiet[] = {
	"_name_or_path", "architectures", "auto_map", "model_type", "bos_token_id", "eos_token_id",
	"pad_token_id", "torch_dtype", "dtype", "transformers_version", "use_cache",
	"initializer_range", "rms_norm_eps", "layer_norm_epsilon", "pretraining_tp",
	"quantization_config", "return_dict", "output_attentions", "output_hidden_states",
	"tokenizer_class", "use_return_dict", "torchscript", "num_logits_to_keep", "_attn_implementation",
	"attn_implementation", NULL,
};
static const char *const llama_quiet[] = {NULL};
static const char *const mixtral_quiet[] = {"router_aux_loss_coef", NULL};
static const char *const qwen2_quiet[] = {"use_mrope", "router_aux_loss_coef", NULL};
static const char *const gemma_quiet[] = {"cache_implementation", NULL};
static const char *const deepseek_quiet[] = {"ep_size", "num_nextn_predict_layers", "seq_aux", NULL};
static const char *const jamba_quiet[] = {"use_mamba_kernels", "router_aux_loss_coef",
                                          "layers_block_type", "layers_num_experts", NULL};
static const char *const falcon_h1_quiet[] = {"mamba_chunk_size", NULL};
static const char *const nemotron_quiet[] = {"chunk_size", "time_step_rank", "time_step_min",
                                             "time_step_max", "time_step_floor", "time_step_limit",
                                             "residual_in_fp32", "rescale_prenorm_residual",
                                             "mamba_chunk_size", "n_routed_experts", "hidden_act",
                                             "use_mamba_kernels", NULL};

static const family families[] = {
	{"llama", read_llama, llama_quiet},
	{"mistral", read_llama, llama_quiet},
	{"mixtral", read_mixtral, mixtral_quiet},
	{"qwen2", read_qwen2, qwen2_quiet},
	{"qwen2_moe", read_qwen2, qwen2_quiet},
	{"qwen3", read_qwen2, qwen2_quiet},
	{"qwen3_moe", read_qwen2, qwen2_quiet},
	{"gemma", read_gemma, gemma_quiet},
	{"gemma2", read_gemma, gemma_quiet},
	{"deepseek_v2", read_deepseek, deepseek_quiet},
	{"deepseek_v3", read_deepseek, deepseek_quiet},
	{"jamba", read_jamba, jamba_quiet},
	{"nemotron_h", read_nemotron_h, nemotron_quiet},
	{"falcon_h1", read_falcon_h1, falcon_h1_quiet},
};
#define NFAMILIES NELEMS(families)

static void mark_quiet(hf *c, const char *const *list)
{
	for (; *list; list++) {
		int i = find(c, *list);
		if (i >= 0 && !c->read[i])
			c->read[i] = true;
	}
}

/* ---- writing the model file ------------------------------------------------------ */

typedef struct out {
	arena *a;
	char *s;
	size_t n, cap;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *t = NULL;
	int k = vasprintf(&t, fmt, ap);
	va_end(ap);
	if (k < 0)
		ir_bug("out of memory");
	if (o->n + (size_t)k + 1 > o->cap) {
		size_t cap = 2 * (o->n + (size_t)k + 1);
		char *s = arena_alloc(o->a, cap);
		if (o->n)
			memcpy(s, o->s, o->n);
		o->s = s, o->cap = cap;
	}
	memcpy(o->s + o->n, t, (size_t)k + 1);
	o->n += (size_t)k;
	free(t);
}

/* A layer's fields as a flow mapping, with `kind:` unless in a pattern
 * block; rope_theta, qkv_bias, qk_norm and rope_scaling (and its fields)
 * only where they differ from the format's defaults. */
static const char *layer_text(arena *a, const model *m, char ch, bool with_kind)
{
	const char *k = "";
	switch (ch) {
	case '*':
	case 's':
		if (with_kind)
			k = "kind: attention, ";
		k = arena_printf(a, "%sheads: %lld", k, (long long)m->heads);
		if (m->mla)
			k = arena_printf(a, "%s, head_dim: %lld, q_lora_rank: %lld, kv_lora_rank: %lld, "
			                 "qk_rope_dim: %lld, v_head_dim: %lld", k, (long long)m->head_dim,
			                 (long long)m->q_lora, (long long)m->kv_lora, (long long)m->rope_dim,
			                 (long long)m->v_head_dim);
		else
			k = arena_printf(a, "%s, kv_heads: %lld, head_dim: %lld", k, (long long)m->kv_heads,
			                 (long long)m->head_dim);
		if (ch == 's')
			k = arena_printf(a, "%s, window: %lld", k, (long long)m->window);
		if (m->rope_theta != 10000)
			k = arena_printf(a, "%s, rope_theta: %.17g", k, m->rope_theta);
		if (m->qkv_bias)
			k = arena_printf(a, "%s, qkv_bias: true", k);
		if (m->qk_norm)
			k = arena_printf(a, "%s, qk_norm: true", k);
		k = arena_printf(a, "%s%s", k, rope_text(a, m));
		break;
	case '-':
		k = arena_printf(a, "%sffn: %lld, activation: %s", with_kind ? "kind: mlp, " : "",
		                 (long long)m->ffn, m->act);
		break;
	case 'E':
		k = arena_printf(a, "%sexperts: %lld, top_k: %lld, expert_ffn: %lld", with_kind ? "kind: moe, " : "",
		                 (long long)m->experts, (long long)m->top_k, (long long)m->expert_ffn);
		if (m->shared)
			k = arena_printf(a, "%s, shared_experts: %lld", k, (long long)m->shared);
		if (m->shared_gate)
			k = arena_printf(a, "%s, shared_gate: true", k);
		k = arena_printf(a, "%s, activation: %s", k, m->act);
		break;
	case 'M':
		k = arena_printf(a, "%sversion: %lld, state: %lld, expand: %lld, conv: %lld",
		                 with_kind ? "kind: mamba, " : "", (long long)m->version,
		                 (long long)m->state, (long long)m->expand, (long long)m->conv);
		if (m->version == 1)
			k = arena_printf(a, "%s, dt_rank: %lld", k, (long long)m->dt_rank);
		else
			k = arena_printf(a, "%s, heads: %lld, head_dim: %lld, groups: %lld", k,
			                 (long long)m->m_heads, (long long)m->m_head_dim, (long long)m->groups);
		break;
	case 'P':
		k = arena_printf(a, "%sattention: %s, mamba: %s", with_kind ? "kind: parallel, " : "",
		                 layer_text(a, m, '*', false), layer_text(a, m, 'M', false));
		break;
	default:
		ir_bug("layer character '%c'", ch);
	}
	return arena_printf(a, "{%s}", k);
}

/* How often s[i..i+p) repeats from i on. */
static int reps(const char *s, int len, int i, int p)
{
	int r = 1;
	while (i + (r + 1) * p <= len && !memcmp(s + i, s + i + r * p, (size_t)p))
		r++;
	return r;
}

enum { MAX_UNIT = 8 }; /* sub-layers of a repeat block written out one by one */

/* Runs of a repeated unit of up to MAX_UNIT sub-layers as repeat blocks,
 * the rest layer by layer. */
static void write_runs(out *o, const model *m)
{
	for (int i = 0; i < m->len;) {
		int best_p = 0, best_r = 1;
		for (int p = 1; p <= MAX_UNIT && i + 2 * p <= m->len; p++) {
			int r = reps(m->str, m->len, i, p);
			if (r > 1 && p * r > best_p * best_r)
				best_p = p, best_r = r;
		}
		if (!best_p) {
			put(o, "  - %s\n", layer_text(o->a, m, m->str[i], true));
			i++;
			continue;
		}
		put(o, "  - repeat: %d\n    layers:\n", best_r);
		for (int k = 0; k < best_p; k++)
			put(o, "      - %s\n", layer_text(o->a, m, m->str[i + k], true));
		i += best_p * best_r;
	}
}

/* A hybrid with one attention variant: the layer string as a pattern
 * block ('s' written as '*': every attention layer has the window), in a
 * repeat block when it is a whole number of one shorter unit. */
static void write_pattern(out *o, const model *m)
{
	int p = m->len;
	for (int q = 1; q < m->len; q++)
		if (m->len % q == 0 && reps(m->str, m->len, 0, q) == m->len / q) {
			p = q;
			break;
		}
	const char *ind = p < m->len ? "        " : "    ";
	if (p < m->len)
		put(o, "  - repeat: %d\n    layers:\n      - pattern: \"", m->len / p);
	else
		put(o, "  - pattern: \"");
	for (int i = 0; i < p; i++)
		put(o, "%c", m->str[i] == 's' ? '*' : m->str[i]);
	put(o, "\"\n");
	static const struct { char ch; const char *name; } kinds[] = {
		{'M', "mamba"}, {'*', "attention"}, {'s', "attention"}, {'-', "mlp"}, {'E', "moe"},
	};
	bool done[5] = {0};
	for (int k = 0; k < 5; k++) {
		if (!memchr(m->str, kinds[k].ch, (size_t)p) || done[k])
			continue;
		done[k] = true;
		if (k == 1 || k == 2)
			done[1] = done[2] = true;
		put(o, "%s%s: %s\n", ind, kinds[k].name, layer_text(o->a, m, kinds[k].ch, false));
	}
}

static const char *model_name(arena *a, const char *path)
{
	const char *b = strrchr(path, '/');
	const char *base = b ? b + 1 : path;
	size_t n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".json"))
		n -= 5;
	/* ".../Llama-2-7b-hf/config.json": the directory names the model. */
	if (n == 6 && !strncmp(base, "config", 6) && b && b > path) {
		const char *d = b;
		while (d > path && d[-1] != '/')
			d--;
		if (d < b)
			base = d, n = (size_t)(b - d);
	}
	if (!n)
		return "imported";
	/* A YAML-safe name: letters, digits, '.', '-', '_'. */
	char *s = arena_strndup(a, base, n);
	for (char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '-' || *p == '_'))
			*p = '_';
	return s;
}

static const char *write_model(hf *c, const model *m)
{
	out o = {c->a};
	put(&o, "# %s (model_type %s), imported by octopipe import (docs/import.md).\n",
	    c->src->name, c->type);
	for (int i = 0; i < c->nignore; i++)
		put(&o, "%s%s%s", i ? ", " : "# Read without (--ignore): ", c->ignore[i],
		    i + 1 < c->nignore ? "" : ".\n");
	put(&o, "model:\n  name: \"%s\"\n  hidden: %lld\n  vocab: %lld\n", model_name(c->a, c->src->name),
	    (long long)m->hidden, (long long)m->vocab);
	put(&o, "  seq: %lld    # max_position_embeddings is %lld; the trained length is a training "
	    "choice\n", (long long)m->seq, (long long)m->maxpos);
	put(&o, "  dtype: bf16\n");
	if (m->tie)
		put(&o, "  tie_embeddings: true\n");
	put(&o, "layers:\n  - kind: embedding\n");
	bool sliding = memchr(m->str, 's', (size_t)m->len), global = memchr(m->str, '*', (size_t)m->len);
	if (memchr(m->str, 'M', (size_t)m->len) && !(sliding && global))
		write_pattern(&o, m);
	else
		write_runs(&o, m);
	put(&o, "  - kind: head\n");
	return o.s;
}

/* ---- the import ----------------------------------------------------------------- */

bool fe_looks_like_hf(const src_file *src)
{
	return strstr(src->text, "\"model_type\"") != NULL;
}

const char *fe_import_hf(arena *a, const src_file *src, const char *const *ignore, int n,
                         ir_loc ignore_at)
{
	hf c = {.a = a, .src = src, .ignore = ignore, .nignore = n};
	const char *text = NULL;
	if (load(&c) < 0)
		goto out;
	int mt = find(&c, "model_type");
	if (mt < 0) {
		diag_error(ydoc_at(&c.d, c.root), "missing key 'model_type': a config.json names its "
		           "model's family");
		goto out;
	}
	c.read[mt] = true;
	if (ydoc_want(&c.d, c.val[mt], YAML_SCALAR_NODE, "'model_type'") < 0 ||
	    c.val[mt]->data.scalar.style != YAML_DOUBLE_QUOTED_SCALAR_STYLE) {
		if (c.val[mt]->type == YAML_SCALAR_NODE)
			diag_error(ydoc_at(&c.d, c.val[mt]), "expected a string for 'model_type', got %s",
			           ydoc_describe(&c.d, c.val[mt]));
		goto out;
	}
	c.type = (const char *)c.val[mt]->data.scalar.value;
	const family *f = NULL;
	const char *names[NFAMILIES];
	for (int i = 0; i < NFAMILIES; i++) {
		names[i] = families[i].type;
		if (!strcmp(families[i].type, c.type))
			f = &families[i];
	}
	if (!f) {
		ysrc_unknown(a, ydoc_at(&c.d, c.val[mt]), "model_type", c.type, "(docs/import.md)",
		             names, NFAMILIES);
		goto out;
	}
	model m = {0};
	if (f->read(&c, &m) < 0)
		goto out;
	if (f->read != read_deepseek)
		rope_mscales_as_factor(&m);
	/* Every family but the hybrids has one attention layer per layer. */
	if (f->read != read_jamba && f->read != read_nemotron_h && f->read != read_falcon_h1 &&
	    read_layer_types(&c, &m) < 0)
		goto out;
	/* An ignored key is one of the file's, or one whose absence the family
	 * refused (its default is what the format cannot say). */
	for (int i = 0; i < n; i++) {
		bool asked = false;
		for (int k = 0; k < c.nasked && !asked; k++)
			asked = !strcmp(c.asked[k], ignore[i]);
		if (find(&c, ignore[i]) < 0 && !asked) {
			diag_error(ignore_at, "--ignore names '%s', which %s does not have",
			           ysrc_shown(a, ignore[i]), src->name);
			goto out;
		}
	}
	mark_quiet(&c, common_quiet);
	mark_quiet(&c, f->quiet);
	for (int i = 0; i < c.n; i++)
		if (!c.read[i] && !ignored(&c, c.name[i])) {
			const char *near = diag_nearest(c.name[i], c.asked, c.nasked);
			const char *s = ysrc_shown(a, c.name[i]);
			if (near)
				diag_error(ydoc_at(&c.d, c.key[i]), "unknown key '%s' in a %s config; did you "
				           "mean '%s'?", s, c.type, near);
			else
				diag_error(ydoc_at(&c.d, c.key[i]), "unknown key '%s' in a %s config: what it "
				           "does to the model is not known; --ignore %s if it does not change "
				           "the architecture (docs/import.md)", s, c.type, s);
			goto out;
		}
	text = write_model(&c, &m);
out:
	ydoc_free(&c.d);
	return text;
}
