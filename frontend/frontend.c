/* frontend.c: the YAML model specification (docs/yaml.md) -> IR module.
 *
 * libyaml's parser turns the file into events, composed here into a node
 * tree (a yaml_document_t, with limits libyaml's own loader lacks); the
 * walk below reads the tree section by section (model, layers with their repeat and pattern
 * blocks, training, cluster, plan), then applies the command-line overrides.
 * Every value is checked where it is read and the first mistake is reported
 * at its node; nothing is loaded past it.  Derived defaults (kv_heads,
 * head_dim, the mamba heads, ...) are filled in, so the module is explicit
 * and later passes never guess. */
#include "frontend.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "yamlsrc.h"

#ifndef OCTO_MODELS_DIR
#define OCTO_MODELS_DIR "models"
#endif

enum {
	MAX_LAYERS = 100000,   /* docs/yaml.md: a model has at most this many */
	MAX_REPEAT_DEPTH = 32, /* repeat blocks inside each other */
	MAX_PRESET_DEPTH = 8,  /* cluster files naming presets naming ... */
};

static const ir_loc no_loc; /* "octopipe: error: ..." (command line) */

/* ---- documents and locations ----------------------------------------- */

/* One parsed YAML file: its text, for locations, and its node tree. */
typedef struct ydoc {
	arena *a;             /* strings that outlive the tree */
	ysrc ys;
	yaml_document_t doc;
	bool loaded;
} ydoc;

static ir_loc at(ydoc *d, const yaml_node_t *n)
{
	return ysrc_mark_loc(&d->ys, n->start_mark);
}

static yaml_node_t *node(ydoc *d, int id)
{
	return yaml_document_get_node(&d->doc, id);
}

/* ---- messages ---------------------------------------------------------- */

static const char *quoted(arena *a, const char *key)
{
	return arena_printf(a, "'%s'", key);
}

/* What a node is, for "expected X for 'k', got Y". */
static const char *describe(ydoc *d, const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a sequence";
	case YAML_SCALAR_NODE:
		return ysrc_describe_scalar(d->a, (const char *)n->data.scalar.value,
		                            n->data.scalar.style);
	default:
		return "nothing";
	}
}

static void range_error(ir_loc loc, const char *what, int64_t v, int64_t lo, int64_t hi)
{
	if (v < lo)
		diag_error(loc, "%s must be at least %lld, got %lld", what, (long long)lo, (long long)v);
	else
		diag_error(loc, "%s must be at most %lld, got %lld", what, (long long)hi, (long long)v);
}

/* ---- YAML parsing ---------------------------------------------------- */

/* "while parsing a block mapping" -> "the block mapping starts here". */
static void context_note(ydoc *d, const yaml_parser_t *p)
{
	static const char *const lead[] = {"while parsing ", "while scanning "};
	if (!p->context || (p->context_mark.line == p->problem_mark.line &&
	                    p->context_mark.column == p->problem_mark.column))
		return;
	for (int i = 0; i < NELEMS(lead); i++) {
		size_t n = strlen(lead[i]);
		if (strncmp(p->context, lead[i], n) != 0)
			continue;
		const char *what = p->context + n;
		if (strncmp(what, "a ", 2) == 0)
			what += 2;
		else if (strncmp(what, "an ", 3) == 0)
			what += 3;
		else
			return;
		diag_note(ysrc_mark_loc(&d->ys, p->context_mark), "the %s starts here", what);
		return;
	}
}

static void yaml_problem(ydoc *d, const yaml_parser_t *p)
{
	ir_loc loc;
	switch (p->error) {
	case YAML_READER_ERROR:
		loc = ysrc_offset_loc(&d->ys, p->problem_offset);
		if (strstr(p->problem, "UTF-8") && p->problem_value != -1)
			diag_error(loc, "%s (byte 0x%02X); the file must be UTF-8 text", p->problem,
			           (unsigned)p->problem_value);
		else if (p->problem_value != -1)
			diag_error(loc, "%s (U+%04X)", p->problem, (unsigned)p->problem_value);
		else
			diag_error(loc, "%s", p->problem);
		return;
	case YAML_SCANNER_ERROR:
	case YAML_PARSER_ERROR:
		loc = ysrc_mark_loc(&d->ys, p->problem_mark);
		break;
	default:
		diag_error((ir_loc){d->ys.src, 1, 1}, "out of memory while reading YAML");
		return;
	}
	size_t off = d->ys.line_start[loc.line - 1] + (size_t)loc.col - 1;
	const char *t = d->ys.src->text;
	if (off < d->ys.src->len && t[off] == '\t') {
		diag_error(loc, "tab character where YAML expects indentation or a value; indent with spaces");
	} else {
		diag_error(loc, "%s%s%s", p->problem, p->context ? " " : "",
		           p->context ? p->context : "");
		context_note(d, p);
	}
}

static void ydoc_free(ydoc *d)
{
	if (d->loaded)
		yaml_document_delete(&d->doc);
	d->loaded = false;
}

/* Anchors by name (an open-addressing table: files may hold many). */
typedef struct anchors {
	struct anchor {
		const char *name;
		int id;
		yaml_mark_t mark;
	} *slot;
	size_t cap, n;
} anchors;

static size_t hash(const char *s)
{
	size_t h = 14695981039346656037u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211u;
	return h;
}

static struct anchor *anchor_slot(anchors *t, const char *name)
{
	size_t i = hash(name) & (t->cap - 1);
	while (t->slot[i].name && strcmp(t->slot[i].name, name) != 0)
		i = (i + 1) & (t->cap - 1);
	return &t->slot[i];
}

static void anchor_grow(arena *a, anchors *t)
{
	anchors old = *t;
	t->cap = old.cap ? 2 * old.cap : 64;
	t->slot = arena_alloc(a, t->cap * sizeof *t->slot);
	for (size_t i = 0; i < old.cap; i++)
		if (old.slot[i].name)
			*anchor_slot(t, old.slot[i].name) = old.slot[i];
}

/* A collection being composed. */
typedef struct open_node {
	int id;
	int key; /* in a mapping: the key waiting for its value, or 0 */
} open_node;

enum { MAX_NESTING = 100 }; /* collections inside each other (repeats use 2 each) */

/* Give a new node its anchor; an anchor used twice is an error, since a
 * shared layer description that silently changes meaning is worse. */
static int set_anchor(ydoc *d, anchors *t, const yaml_char_t *name, int id, yaml_mark_t mark)
{
	if (!name)
		return 0;
	if (2 * (t->n + 1) > t->cap)
		anchor_grow(d->a, t);
	struct anchor *s = anchor_slot(t, (const char *)name);
	if (s->name) {
		const char *name_shown = ysrc_shown(d->a, s->name);
		diag_error(ysrc_mark_loc(&d->ys, mark), "duplicate anchor '&%s'", name_shown);
		diag_note(ysrc_mark_loc(&d->ys, s->mark), "the first '&%s' is here", name_shown);
		return -1;
	}
	*s = (struct anchor){arena_strdup(d->a, (const char *)name), id, mark};
	t->n++;
	return 0;
}

static yaml_char_t *tag_or_default(yaml_char_t *tag, const char *def)
{
	return !tag || strcmp((char *)tag, "!") == 0 ? (yaml_char_t *)def : tag;
}

/* The events of one document into d->doc; what yaml_parser_load does,
 * with two guards it lacks: a nesting limit (libyaml's scanner slows down
 * quadratically with depth, and nothing that deep means anything here) and
 * no alias to a node that contains it, so the tree has no cycles.  A
 * second document in the stream is an error. */
static int compose(ydoc *d, yaml_parser_t *p, const char *what)
{
	open_node stack[MAX_NESTING];
	int depth = 0, ndocs = 0;
	anchors anch = {0};
	yaml_event_t ev;
	for (bool done = false; !done; yaml_event_delete(&ev)) {
		if (!yaml_parser_parse(p, &ev)) {
			yaml_problem(d, p);
			return -1;
		}
		ir_loc loc = ysrc_mark_loc(&d->ys, ev.start_mark);
		int id = 0; /* a finished node, to attach to its parent */
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (ndocs++) {
				diag_error(loc, "a second YAML document; a %s holds one", what);
				goto fail;
			}
			break;
		case YAML_ALIAS_EVENT: {
			const char *name = (const char *)ev.data.alias.anchor;
			struct anchor *s = anch.cap ? anchor_slot(&anch, name) : NULL;
			if (!s || !s->name) {
				diag_error(loc, "undefined alias '*%s'", ysrc_shown(d->a, name));
				goto fail;
			}
			for (int i = 0; i < depth; i++)
				if (stack[i].id == s->id) {
					diag_error(loc, "alias '*%s' refers to a node that contains it (a cycle)",
					           ysrc_shown(d->a, name));
					goto fail;
				}
			id = s->id;
			break;
		}
		case YAML_SCALAR_EVENT:
			id = yaml_document_add_scalar(
			    &d->doc, tag_or_default(ev.data.scalar.tag, YAML_DEFAULT_SCALAR_TAG),
			    ev.data.scalar.value, (int)ev.data.scalar.length, ev.data.scalar.style);
			if (!id)
				goto nomem;
			node(d, id)->start_mark = ev.start_mark;
			node(d, id)->end_mark = ev.end_mark;
			if (set_anchor(d, &anch, ev.data.scalar.anchor, id, ev.start_mark) < 0)
				goto fail;
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT: {
			if (depth == MAX_NESTING) {
				diag_error(loc, "collections nested more than %d deep", MAX_NESTING);
				goto fail;
			}
			bool seq = ev.type == YAML_SEQUENCE_START_EVENT;
			int nid = seq ? yaml_document_add_sequence(
			                    &d->doc,
			                    tag_or_default(ev.data.sequence_start.tag, YAML_DEFAULT_SEQUENCE_TAG),
			                    ev.data.sequence_start.style)
			              : yaml_document_add_mapping(
			                    &d->doc,
			                    tag_or_default(ev.data.mapping_start.tag, YAML_DEFAULT_MAPPING_TAG),
			                    ev.data.mapping_start.style);
			if (!nid)
				goto nomem;
			node(d, nid)->start_mark = ev.start_mark;
			if (set_anchor(d, &anch, seq ? ev.data.sequence_start.anchor : ev.data.mapping_start.anchor,
			               nid, ev.start_mark) < 0)
				goto fail;
			stack[depth++] = (open_node){nid, 0};
			break;
		}
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			id = stack[--depth].id;
			node(d, id)->end_mark = ev.end_mark;
			break;
		default:
			break;
		}
		if (!id || !depth)
			continue; /* the root has no parent */
		open_node *top = &stack[depth - 1];
		yaml_node_t *parent = node(d, top->id);
		int ok = 1;
		if (parent->type == YAML_SEQUENCE_NODE)
			ok = yaml_document_append_sequence_item(&d->doc, top->id, id);
		else if (!top->key)
			top->key = id;
		else
			ok = yaml_document_append_mapping_pair(&d->doc, top->id, top->key, id), top->key = 0;
		if (!ok)
			goto nomem;
	}
	return 0;
nomem:
	diag_error((ir_loc){d->ys.src, 1, 1}, "out of memory while reading YAML");
fail:
	yaml_event_delete(&ev);
	return -1;
}

/* Parse src into d; an empty document is a mistake too.  0, or -1 after
 * a diagnostic. */
static int ydoc_load(ydoc *d, arena *a, const src_file *src, const char *what)
{
	memset(d, 0, sizeof *d);
	d->a = a;
	ysrc_init(&d->ys, a, src);
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p)) {
		diag_error((ir_loc){src, 1, 1}, "out of memory while reading YAML");
		return -1;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)src->text, src->len);
	int rc = -1;
	if (!yaml_document_initialize(&d->doc, NULL, NULL, NULL, 1, 1)) {
		diag_error((ir_loc){src, 1, 1}, "out of memory while reading YAML");
	} else {
		d->loaded = true;
		rc = compose(d, &p, what);
		if (rc == 0 && !yaml_document_get_root_node(&d->doc)) {
			diag_error((ir_loc){src, 1, 1}, "empty %s", what);
			rc = -1;
		}
	}
	yaml_parser_delete(&p);
	if (rc)
		ydoc_free(d);
	return rc;
}

/* ---- typed values ------------------------------------------------------- */

static const char *default_tag(yaml_node_type_t t)
{
	return t == YAML_MAPPING_NODE    ? YAML_DEFAULT_MAPPING_TAG
	       : t == YAML_SEQUENCE_NODE ? YAML_DEFAULT_SEQUENCE_TAG
	                                 : YAML_DEFAULT_SCALAR_TAG;
}

/* Tags (!!int, !foo) would change what a value means; none is accepted. */
static int check_tag(ydoc *d, const yaml_node_t *n, const char *what)
{
	const char *tag = (const char *)n->tag;
	if (!tag || strcmp(tag, default_tag(n->type)) == 0)
		return 0;
	diag_error(at(d, n), "unsupported tag '%s' on %s; tags are not part of the format",
	           ysrc_tag_shown(d->a, tag), what);
	return -1;
}

static const char *const type_names[] = {
	[YAML_SCALAR_NODE] = "a string",
	[YAML_SEQUENCE_NODE] = "a sequence",
	[YAML_MAPPING_NODE] = "a mapping",
};

static int want(ydoc *d, const yaml_node_t *n, yaml_node_type_t type, const char *what)
{
	if (n->type != type) {
		diag_error(at(d, n), "expected %s for %s, got %s", type_names[type], what,
		           describe(d, n));
		return -1;
	}
	return check_tag(d, n, what);
}

/* A scalar's text (valid while the document lives).  `expect` names the
 * wanted thing in the message: "an integer", "a string". */
static int scalar(ydoc *d, const yaml_node_t *n, const char *what, const char *expect,
                  const char **out)
{
	if (n->type != YAML_SCALAR_NODE) {
		diag_error(at(d, n), "expected %s for %s, got %s", expect, what, describe(d, n));
		return -1;
	}
	if (check_tag(d, n, what) < 0)
		return -1;
	const char *s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length) {
		diag_error(at(d, n), "%s contains a NUL character", what);
		return -1;
	}
	*out = s;
	return 0;
}

static int get_str(ydoc *d, const yaml_node_t *n, const char *what, const char **out)
{
	const char *s;
	if (scalar(d, n, what, "a string", &s) < 0)
		return -1;
	*out = arena_strdup(d->a, s);
	return 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* integer := plain scalar [+-]digits, within lo..hi. */
static int get_int(ydoc *d, const yaml_node_t *n, const char *what, int64_t lo, int64_t hi,
                   int64_t *out)
{
	const char *s;
	if (scalar(d, n, what, "an integer", &s) < 0)
		return -1;
	size_t i = s[0] == '+' || s[0] == '-';
	bool ok = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_digit(s[i]);
	while (ok && s[i])
		ok = is_digit(s[i++]);
	if (!ok) {
		diag_error(at(d, n), "expected an integer for %s, got %s", what, describe(d, n));
		return -1;
	}
	errno = 0;
	long long v = strtoll(s, NULL, 10);
	if (errno == ERANGE) {
		diag_error(at(d, n), "integer %s for %s is out of range", ysrc_shown(d->a, s), what);
		return -1;
	}
	if (v < lo || v > hi) {
		range_error(at(d, n), what, v, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* number := plain scalar in decimal or scientific notation, finite. */
static int get_num(ydoc *d, const yaml_node_t *n, const char *what, int sign, double *out)
{
	const char *s;
	if (scalar(d, n, what, "a number", &s) < 0)
		return -1;
	int rc = ysrc_number(d->a, at(d, n), what, s,
	                     n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE, sign, out);
	if (rc > 0)
		diag_error(at(d, n), "expected a number for %s, got %s", what, describe(d, n));
	return rc ? -1 : 0;
}

typedef struct unit {
	const char *name;
	double scale;
} unit;

/* A number followed by a unit from `units` ("" = a bare number), as
 * `scale * number`.  Shared by byte sizes and durations. */
static int get_with_unit(ydoc *d, const yaml_node_t *n, const char *what, const char *expect,
                         const char *noun, const unit *units, int nunits, double *out,
                         const char **text)
{
	const char *s;
	if (scalar(d, n, what, expect, &s) < 0)
		return -1;
	size_t len = ysrc_scan_number(s);
	if (!len) {
		diag_error(at(d, n), "expected %s for %s, got %s", expect, what, describe(d, n));
		return -1;
	}
	const char *u = s + len;
	while (*u == ' ')
		u++;
	int k = 0;
	while (k < nunits && strcmp(units[k].name, u) != 0)
		k++;
	if (k == nunits) {
		const char *names[16];
		int nn = 0;
		for (int i = 0; i < nunits && nn < NELEMS(names); i++)
			if (*units[i].name)
				names[nn++] = units[i].name;
		diag_error(at(d, n), "unknown %s '%s' in '%s' for %s; expected %s", noun,
		           ysrc_shown(d->a, u), ysrc_shown(d->a, s), what, ysrc_joined(d->a, names, nn));
		return -1;
	}
	*out = strtod(s, NULL) * units[k].scale;
	*text = s;
	return 0;
}

/* rate := number > 0 | inf (.inf, .Inf, .INF, inf, each with an optional +): bandwidths,
 * where an infinite one models a link or memory that costs nothing (the
 * `ideal` preset). */
static int get_rate(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
		const char *s = (const char *)n->data.scalar.value;
		s += *s == '+';
		if (strcmp(s, "inf") == 0 || (ysrc_nonfinite(s) && (s[1] == 'i' || s[1] == 'I'))) {
			if (check_tag(d, n, what) < 0)
				return -1;
			*out = INFINITY;
			return 0;
		}
	}
	if (get_num(d, n, what, YSRC_POSITIVE, out) < 0)
		return -1;
	if (!ir_rate_ok(*out)) {
		diag_error(at(d, n), "%s must be in %g .. %g bytes/s (or inf), got %s", what, IR_MIN_RATE,
		           IR_MAX_RATE, ysrc_shown(d->a, (const char *)n->data.scalar.value));
		return -1;
	}
	return 0;
}

/* flops := number in IR_MIN_FLOPS .. IR_MAX_FLOPS (docs/ir.md, "Ranges"). */
static int get_flops(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	if (get_num(d, n, what, YSRC_POSITIVE, out) < 0)
		return -1;
	if (!ir_range_ok(*out, IR_MIN_FLOPS, IR_MAX_FLOPS)) {
		diag_error(at(d, n), "%s must be in %g .. %g FLOP/s, got %s", what, IR_MIN_FLOPS,
		           IR_MAX_FLOPS, ysrc_shown(d->a, (const char *)n->data.scalar.value));
		return -1;
	}
	return 0;
}

/* bytes := integer | number suffix (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB) */
static int get_bytes(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out)
{
	static const unit units[] = {
		{"", 1}, {"B", 1}, {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	};
	const char *s;
	double v;
	if (get_with_unit(d, n, what, "a byte size", "size suffix", units, NELEMS(units), &v, &s) < 0)
		return -1;
	if (!isfinite(v) || v >= 0x1p63) {
		diag_error(at(d, n), "byte size %s for %s is out of range", ysrc_shown(d->a, s), what);
		return -1;
	}
	if (v < 1) {
		diag_error(at(d, n), "%s must be at least 1 byte, got '%s'", what, ysrc_shown(d->a, s));
		return -1;
	}
	*out = (uint64_t)(v + 0.5);
	return 0;
}

/* memory := bytes | unlimited (UINT64_MAX: nothing is ever out of memory). */
static int get_memory(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out)
{
	if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	    strcmp((const char *)n->data.scalar.value, "unlimited") == 0) {
		if (check_tag(d, n, what) < 0)
			return -1;
		*out = UINT64_MAX;
		return 0;
	}
	return get_bytes(d, n, what, out);
}

/* duration := number (seconds) | number unit (s, ms, us, ns); in microseconds. */
static int get_duration(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	static const unit units[] = {
		{"", 1e6}, {"s", 1e6}, {"ms", 1e3}, {"us", 1}, {"ns", 1e-3},
	};
	const char *s;
	double v;
	if (get_with_unit(d, n, what, "a duration", "time unit", units, NELEMS(units), &v, &s) < 0)
		return -1;
	if (!isfinite(v) || v < 0) {
		diag_error(at(d, n), "%s must be a finite duration of at least 0, got '%s'", what,
		           ysrc_shown(d->a, s));
		return -1;
	}
	if (v > IR_MAX_US) {
		diag_error(at(d, n), "%s must be at most %gus (11.6 days), got '%s'", what, IR_MAX_US,
		           ysrc_shown(d->a, s));
		return -1;
	}
	*out = v;
	return 0;
}

/* One of ir.h's names; `noun` says which table in messages. */
static int get_enum(ydoc *d, const yaml_node_t *n, const char *what, const char *noun,
                    const char *const *names, int count, int *out)
{
	const char *s;
	if (scalar(d, n, what, "a string", &s) < 0)
		return -1;
	int i = ir_lookup(names, count, s);
	if (i < 0) {
		ysrc_unknown(d->a, at(d, n), noun, s, NULL, names, count);
		return -1;
	}
	*out = i;
	return 0;
}

/* ---- mappings ------------------------------------------------------------ */

/* The keys a mapping may hold. */
typedef struct keyspec {
	const char *where;          /* "in 'model'", "at the top level" */
	const char *const *keys;
	int nkeys;
	const char *const *other;   /* known keys that do not fit this variant */
	int nother;
	const char *other_why;      /* "is for version 1, this layer is version 2" */
} keyspec;

static void unknown_key(ydoc *d, const yaml_node_t *k, const char *name, const keyspec *ks)
{
	ir_loc loc = at(d, k);
	const char *s = ysrc_shown(d->a, name);
	if (ir_lookup(ks->other, ks->nother, name) >= 0) {
		diag_error(loc, "unknown key '%s' %s; '%s' %s", s, ks->where, s, ks->other_why);
		return;
	}
	if (strcmp(name, "<<") == 0) {
		diag_error(loc, "merge keys ('<<') are not supported %s; alias the whole mapping instead",
		           ks->where);
		return;
	}
	const char *near = diag_nearest(name, ks->keys, ks->nkeys);
	if (near)
		diag_error(loc, "unknown key '%s' %s; did you mean '%s'?", s, ks->where, near);
	else
		diag_error(loc, "unknown key '%s' %s; valid keys: %s", s, ks->where,
		           ysrc_joined(d->a, ks->keys, ks->nkeys));
}

/* Check a mapping's keys against ks (each one known, none twice) and hand
 * back each key's key and value node (NULL where absent). */
static int walk_map(ydoc *d, yaml_node_t *map, const char *what, const keyspec *ks,
                    yaml_node_t **key, yaml_node_t **val)
{
	if (want(d, map, YAML_MAPPING_NODE, what) < 0)
		return -1;
	for (int i = 0; i < ks->nkeys; i++)
		key[i] = val[i] = NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = node(d, p->key);
		const char *name;
		if (scalar(d, k, arena_printf(d->a, "a key %s", ks->where), "a string", &name) < 0)
			return -1;
		int i = ir_lookup(ks->keys, ks->nkeys, name);
		if (i < 0) {
			unknown_key(d, k, name, ks);
			return -1;
		}
		if (key[i]) {
			diag_error(at(d, k), "duplicate key '%s' %s", name, ks->where);
			diag_note(at(d, key[i]), "the first '%s' is here", name);
			return -1;
		}
		key[i] = k;
		val[i] = node(d, p->value);
	}
	return 0;
}

/* The first `name:` in a mapping, before walk_map has checked it (the
 * kind and version decide which keys are valid): its key node, or the
 * value node with peek. */
static yaml_node_pair_t *peek_pair(ydoc *d, const yaml_node_t *map, const char *name)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = node(d, p->key);
		if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, name) == 0)
			return p;
	}
	return NULL;
}

static yaml_node_t *peek(ydoc *d, const yaml_node_t *map, const char *name)
{
	yaml_node_pair_t *p = peek_pair(d, map, name);
	return p ? node(d, p->value) : NULL;
}

static yaml_node_t *peek_key(ydoc *d, const yaml_node_t *map, const char *name)
{
	yaml_node_pair_t *p = peek_pair(d, map, name);
	return p ? node(d, p->key) : NULL;
}

static int missing(ydoc *d, const yaml_node_t *map, const char *key, const char *where)
{
	diag_error(at(d, map), "missing required key '%s' %s", key, where);
	return -1;
}

/* ---- paths ------------------------------------------------------------------ */

/* `path` relative to the directory `dir` (NULL or "": as given). */
static const char *resolve(arena *a, const char *dir, const char *path)
{
	if (!dir || !*dir || path[0] == '/')
		return arena_strdup(a, path);
	return arena_printf(a, "%s/%s", dir, path);
}

/* Directory part of a file name, "" for a bare name. */
static const char *dir_of(arena *a, const char *file)
{
	const char *slash = strrchr(file, '/');
	if (!slash)
		return "";
	if (slash == file)
		return "/";
	return arena_strndup(a, file, (size_t)(slash - file));
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

const char *fe_models_dir(void)
{
	const char *env = getenv("OCTOPIPE_MODELS");
	return env && *env ? env : OCTO_MODELS_DIR;
}

/* ---- cluster ------------------------------------------------------------------- */

typedef struct cluster_locs {
	ir_loc devices, mem;
} cluster_locs;

static int load_cluster_ref(arena *a, const char *ref, ir_loc loc, const char *dir, int depth,
                            ir_cluster *c, cluster_locs *cl);

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static void unknown_preset(arena *a, ir_loc loc, const char *name)
{
	const char *dirname = arena_printf(a, "%s/clusters", fe_models_dir());
	DIR *dir = opendir(dirname);
	const char **names = NULL;
	int n = 0, cap = 0;
	for (struct dirent *e; dir && (e = readdir(dir));)
		if (e->d_name[0] != '.' && ends_with(e->d_name, ".yaml"))
			*VEC_PUSH(a, names, n, cap) = arena_strndup(a, e->d_name, strlen(e->d_name) - 5);
	if (dir)
		closedir(dir);
	if (!n) {
		diag_error(loc, "unknown cluster preset '%s'; no presets in %s", ysrc_shown(a, name),
		           dirname);
		return;
	}
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	diag_error(loc, "unknown cluster preset '%s'; known presets: %s", ysrc_shown(a, name),
	           ysrc_joined(a, names, n));
}

/* link := {bandwidth: number, latency: duration} */
static int read_link(ydoc *d, yaml_node_t *map, const char *key, bool have_base, ir_link *l)
{
	static const char *const keys[] = {"bandwidth", "latency"};
	keyspec ks = {arena_printf(d->a, "in '%s'", key), keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	if (walk_map(d, map, quoted(d->a, key), &ks, k, v) < 0)
		return -1;
	for (int i = 0; i < NELEMS(keys) && !have_base; i++)
		if (!v[i])
			return missing(d, map, keys[i], ks.where);
	if (v[0] && get_rate(d, v[0], "'bandwidth'", &l->bw) < 0)
		return -1;
	if (v[1] && get_duration(d, v[1], "'latency'", &l->lat) < 0)
		return -1;
	return 0;
}

enum { CL_PRESET, CL_DEVICES, CL_PER_NODE, CL_MEMORY, CL_FLOPS, CL_MEMBW, CL_INTRA, CL_INTER };

/* cluster-map := {preset?: name, devices, devices_per_node, memory,
 *                 peak_flops, memory_bandwidth, intra: link, inter: link} */
static int read_cluster_map(ydoc *d, yaml_node_t *map, const char *dir, int depth, ir_cluster *c,
                            cluster_locs *cl)
{
	static const char *const keys[] = {"preset", "devices", "devices_per_node", "memory",
	                                   "peak_flops", "memory_bandwidth", "intra", "inter"};
	keyspec ks = {"in 'cluster'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	if (walk_map(d, map, "'cluster'", &ks, k, v) < 0)
		return -1;
	bool base = v[CL_PRESET] != NULL;
	if (base) {
		const char *name;
		if (get_str(d, v[CL_PRESET], "'preset'", &name) < 0 ||
		    load_cluster_ref(d->a, name, at(d, v[CL_PRESET]), dir, depth + 1, c, cl) < 0)
			return -1;
	} else {
		memset(c, 0, sizeof *c);
		c->name = "inline";
		for (int i = CL_DEVICES; i < NELEMS(keys); i++)
			if (!v[i])
				return missing(d, map, keys[i], "in 'cluster' (there is no 'preset' to take it from)");
	}
	if ((v[CL_DEVICES] && get_int(d, v[CL_DEVICES], "'devices'", 1, 65536, &c->devices) < 0) ||
	    (v[CL_PER_NODE] &&
	     get_int(d, v[CL_PER_NODE], "'devices_per_node'", 1, 65536, &c->per_node) < 0) ||
	    (v[CL_MEMORY] && get_memory(d, v[CL_MEMORY], "'memory'", &c->mem) < 0) ||
	    (v[CL_FLOPS] && get_flops(d, v[CL_FLOPS], "'peak_flops'", &c->flops) < 0) ||
	    (v[CL_MEMBW] &&
	     get_rate(d, v[CL_MEMBW], "'memory_bandwidth'", &c->membw) < 0) ||
	    (v[CL_INTRA] && read_link(d, v[CL_INTRA], "intra", base, &c->intra) < 0) ||
	    (v[CL_INTER] && read_link(d, v[CL_INTER], "inter", base, &c->inter) < 0))
		return -1;
	/* Where the values the passes may blame were written (a preset's
	 * fields first, then this mapping's). */
	if (v[CL_DEVICES])
		cl->devices = at(d, v[CL_DEVICES]);
	if (v[CL_MEMORY])
		cl->mem = at(d, v[CL_MEMORY]);
	return 0;
}

/* cluster := preset-name | file-path | cluster-map */
static int read_cluster(ydoc *d, yaml_node_t *n, const char *dir, int depth, ir_cluster *c,
                        cluster_locs *cl)
{
	if (n->type == YAML_MAPPING_NODE)
		return read_cluster_map(d, n, dir, depth, c, cl);
	if (n->type != YAML_SCALAR_NODE) {
		diag_error(at(d, n), "expected a preset name, a file or a mapping for 'cluster', got %s",
		           describe(d, n));
		return -1;
	}
	const char *ref;
	if (get_str(d, n, "'cluster'", &ref) < 0)
		return -1;
	return load_cluster_ref(d->a, ref, at(d, n), dir, depth, c, cl);
}

/* cluster-file := {cluster: cluster} */
static int load_cluster_file(arena *a, const char *path, const char *name, int depth,
                             ir_cluster *c, cluster_locs *cl)
{
	src_file *src = src_read(a, path);
	if (!src)
		return -1;
	ydoc d;
	if (ydoc_load(&d, a, src, "cluster file") < 0)
		return -1;
	static const char *const keys[] = {"cluster"};
	keyspec ks = {"at the top level of a cluster file", keys, 1, 0, 0, 0};
	yaml_node_t *root = yaml_document_get_root_node(&d.doc), *k, *v;
	int rc = -1;
	if (walk_map(&d, root, "the top level of a cluster file", &ks, &k, &v) < 0)
		goto out;
	if (!v) {
		missing(&d, root, "cluster", "in cluster file");
		goto out;
	}
	if (read_cluster(&d, v, dir_of(a, path), depth, c, cl) < 0)
		goto out;
	c->name = name;
	rc = 0;
out:
	ydoc_free(&d);
	return rc;
}

/* A preset name, or a file when it has a '/' or a .yaml/.yml suffix;
 * relative file names are relative to `dir`.  Errors about the reference
 * itself go to `loc`, errors inside the file into the file. */
static int load_cluster_ref(arena *a, const char *ref, ir_loc loc, const char *dir, int depth,
                            ir_cluster *c, cluster_locs *cl)
{
	if (depth > MAX_PRESET_DEPTH) {
		diag_error(loc, "cluster presets nested more than %d deep; do they name each other?",
		           MAX_PRESET_DEPTH);
		return -1;
	}
	if (strchr(ref, '/') || ends_with(ref, ".yaml") || ends_with(ref, ".yml")) {
		const char *path = resolve(a, dir, ref);
		if (access(path, R_OK) != 0) {
			diag_error(loc, "cannot open cluster file '%s': %s", ysrc_shown(a, path),
			           strerror(errno));
			return -1;
		}
		const char *base = strrchr(ref, '/') ? strrchr(ref, '/') + 1 : ref;
		size_t n = strlen(base);
		n -= ends_with(base, ".yaml") ? 5 : ends_with(base, ".yml") ? 4 : 0;
		return load_cluster_file(a, path, arena_strndup(a, base, n), depth, c, cl);
	}
	const char *path = arena_printf(a, "%s/clusters/%s.yaml", fe_models_dir(), ref);
	if (!*ref || access(path, R_OK) != 0) {
		unknown_preset(a, loc, ref);
		return -1;
	}
	return load_cluster_file(a, path, arena_strdup(a, ref), depth, c, cl);
}

int fe_load_cluster(arena *a, const char *name_or_path, ir_cluster *out)
{
	cluster_locs cl = {{0}};
	return load_cluster_ref(a, name_or_path, no_loc, NULL, 0, out, &cl);
}

/* The module's cluster from a preset or file named at `loc` (a flag),
 * with the locations of its fields. */
static int load_module_cluster(ir_module *m, const char *ref, ir_loc loc)
{
	cluster_locs cl = {{0}};
	if (load_cluster_ref(m->arena, ref, loc, NULL, 0, &m->cluster, &cl) < 0)
		return -1;
	m->cluster_at.devices = cl.devices;
	m->cluster_at.mem = cl.mem;
	return 0;
}

/* ---- layers ---------------------------------------------------------------- */

/* The state of one model load. */
typedef struct fe {
	ir_module *m;
	ydoc *d;
	int nopen;              /* layer lists being read (nested repeats) */
	yaml_node_t *placement; /* kept for the checks after the overrides */
} fe;

/* Where each attribute of the layer being read was written (its value),
 * or the layer itself for defaulted ones: ir_check_layer's `where`. */
typedef struct attr_locs {
	ir_loc at[IR_NATTRS];
} attr_locs;

static ir_loc attr_where(void *ctx, ir_attr a)
{
	return ((attr_locs *)ctx)->at[a];
}

static const char *yaml_attr_name(ir_attr a)
{
	return a == IR_ATTR_ACT ? "activation" : ir_attr_table[a].name;
}

/* Attributes the frontend fills in when they are left out. */
static bool derived(ir_attr a, ir_layer_kind k)
{
	switch (a) {
	case IR_ATTR_KV_HEADS:
	case IR_ATTR_HEAD_DIM:
		return true;
	case IR_ATTR_HEADS:
	case IR_ATTR_GROUPS:
	case IR_ATTR_DT_RANK:
	case IR_ATTR_VERSION:
	case IR_ATTR_EXPAND:
	case IR_ATTR_CONV:
		return k == IR_LAYER_MAMBA;
	default:
		return false;
	}
}

/* Fill the derived attributes of l (docs/yaml.md gives each default). */
static int derive(fe *f, ir_layer *l, attr_locs *w, const bool *given, ir_loc loc)
{
	int64_t *v = l->attr, hidden = f->m->model.hidden;
	switch (l->kind) {
	case IR_LAYER_ATTENTION:
		if (!v[IR_ATTR_KV_HEADS])
			v[IR_ATTR_KV_HEADS] = v[IR_ATTR_HEADS];
		if (!v[IR_ATTR_HEAD_DIM]) {
			if (hidden % v[IR_ATTR_HEADS]) {
				diag_error(w->at[IR_ATTR_HEADS],
				           "hidden size %lld is not divisible by 'heads' (%lld); give 'head_dim'",
				           (long long)hidden, (long long)v[IR_ATTR_HEADS]);
				return -1;
			}
			v[IR_ATTR_HEAD_DIM] = hidden / v[IR_ATTR_HEADS];
		}
		break;
	case IR_LAYER_MAMBA:
		if (!v[IR_ATTR_EXPAND])
			v[IR_ATTR_EXPAND] = 2;
		if (!v[IR_ATTR_CONV])
			v[IR_ATTR_CONV] = 4;
		if (v[IR_ATTR_VERSION] == 1) {
			if (!v[IR_ATTR_DT_RANK])
				v[IR_ATTR_DT_RANK] = (hidden + 15) / 16;
			break;
		}
		if (!v[IR_ATTR_HEAD_DIM])
			v[IR_ATTR_HEAD_DIM] = 64;
		if (!v[IR_ATTR_HEADS]) {
			int64_t inner = v[IR_ATTR_EXPAND] * hidden;
			if (inner % v[IR_ATTR_HEAD_DIM]) {
				diag_error(given[IR_ATTR_HEAD_DIM] ? w->at[IR_ATTR_HEAD_DIM] : loc,
				           "mamba inner size %lld (expand %lld x hidden %lld) is not divisible "
				           "by 'head_dim' (%lld)",
				           (long long)inner, (long long)v[IR_ATTR_EXPAND], (long long)hidden,
				           (long long)v[IR_ATTR_HEAD_DIM]);
				return -1;
			}
			v[IR_ATTR_HEADS] = inner / v[IR_ATTR_HEAD_DIM];
		}
		if (!v[IR_ATTR_GROUPS])
			v[IR_ATTR_GROUPS] = 1;
		break;
	default:
		break; /* activations default to swiglu, which is 0 */
	}
	return 0;
}

/* layer := {kind: name, attribute: value, ...} (docs/yaml.md, "Layer kinds
 * and their fields").  In a pattern block the kind comes from the block's
 * key (`implied`), and `kind:` may be left out. */
static int read_layer(fe *f, yaml_node_t *map, int implied, ir_layer *l)
{
	ydoc *d = f->d;
	ir_loc loc = at(d, map);
	yaml_node_t *kn = peek(d, map, "kind");
	int kind = implied;
	if (kn) {
		if (get_enum(d, kn, "'kind'", "layer kind", ir_layer_kind_names, IR_NLAYER_KINDS,
		             &kind) < 0)
			return -1;
		if (implied >= 0 && kind != implied) {
			diag_error(at(d, kn), "'kind: %s' in the '%s' mapping of a pattern block",
			           ir_layer_kind_names[kind], ir_layer_kind_names[implied]);
			return -1;
		}
	} else if (implied < 0) {
		keyspec none = {"in layer", 0, 0, 0, 0, 0};
		yaml_node_t *merge = peek_key(d, map, "<<");
		if (merge) {
			unknown_key(d, merge, "<<", &none);
			return -1;
		}
		return missing(d, map, "kind", "in layer");
	}
	int64_t version = 0;
	if (kind == IR_LAYER_MAMBA) {
		yaml_node_t *vn = peek(d, map, "version");
		version = 2;
		if (vn && get_int(d, vn, "'version'", 1, 2, &version) < 0)
			return -1;
	}

	/* The valid keys: `kind` and the attributes of this kind (and version). */
	const char *keys[1 + IR_NATTRS], *other[IR_NATTRS];
	ir_attr attr_of[1 + IR_NATTRS];
	int nkeys = 0, nother = 0;
	keys[nkeys++] = "kind";
	for (int a = 0; a < IR_NATTRS; a++) {
		if (ir_attr_applies(a, kind, version)) {
			attr_of[nkeys] = a;
			keys[nkeys++] = yaml_attr_name(a);
		} else if (kind == IR_LAYER_MAMBA && ir_attr_applies(a, kind, 3 - version)) {
			other[nother++] = yaml_attr_name(a);
		}
	}
	const char *kname = ir_layer_kind_names[kind];
	keyspec ks = {arena_printf(d->a, "in %s layer", kname), keys, nkeys, other, nother,
	              arena_printf(d->a, "is for version %d, this layer is version %d",
	                           (int)(3 - version), (int)version)};
	yaml_node_t *k[1 + IR_NATTRS], *v[1 + IR_NATTRS];
	if (walk_map(d, map, arena_printf(d->a, "%s layer", kname), &ks, k, v) < 0)
		return -1;

	memset(l, 0, sizeof *l);
	l->kind = kind;
	attr_locs w;
	bool given[IR_NATTRS] = {0};
	for (int a = 0; a < IR_NATTRS; a++)
		w.at[a] = loc;
	for (int i = 1; i < nkeys; i++) {
		if (!v[i])
			continue;
		ir_attr a = attr_of[i];
		const ir_attr_info *ai = &ir_attr_table[a];
		const char *what = quoted(d->a, keys[i]);
		w.at[a] = at(d, v[i]);
		given[a] = true;
		if (ai->type == IR_AT_ACT) {
			int act;
			if (get_enum(d, v[i], what, "activation", ir_act_names, IR_NACTS, &act) < 0)
				return -1;
			l->attr[a] = act;
			continue;
		}
		/* 0 means "absent" in the IR, so a required attribute starts at 1. */
		int64_t lo = ai->min;
		if (ir_attr_required(a, kind, version) && lo < 1)
			lo = 1;
		if (get_int(d, v[i], what, lo, ai->max, &l->attr[a]) < 0)
			return -1;
	}
	if (kind == IR_LAYER_MAMBA)
		l->attr[IR_ATTR_VERSION] = version;
	for (int a = 0; a < IR_NATTRS; a++)
		if (!given[a] && ir_attr_required(a, kind, version) && !derived(a, kind))
			return missing(d, map, yaml_attr_name(a), ks.where);
	if (derive(f, l, &w, given, loc) < 0)
		return -1;
	return ir_check_layer(&f->m->model, l, f->m->nlayers, attr_where, &w, loc) ? -1 : 0;
}

static int emit(fe *f, const ir_layer *l, ir_loc loc)
{
	if (f->m->nlayers >= MAX_LAYERS) {
		diag_error(loc, "too many layers; a model has at most %d", MAX_LAYERS);
		return -1;
	}
	ir_layer *nl = ir_add_layer(f->m, l->kind, loc);
	*nl = *l;
	return 0;
}

static int read_layers(fe *f, yaml_node_t *seq, const char *what);

/* repeat-block := {repeat: N, layers: layers} */
static int read_repeat(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"repeat", "layers"};
	keyspec ks = {"in repeat block", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	int64_t times;
	if (walk_map(d, map, "a repeat block", &ks, k, v) < 0 ||
	    get_int(d, v[0], "'repeat'", 1, MAX_LAYERS, &times) < 0)
		return -1;
	if (!v[1])
		return missing(d, map, "layers", ks.where);
	ir_module *m = f->m;
	int first = m->nlayers;
	if (read_layers(f, v[1], "'layers'") < 0)
		return -1;
	int64_t body = m->nlayers - first, total = first + body * times;
	if (total > MAX_LAYERS) {
		diag_error(at(d, v[0]),
		           "'repeat: %lld' of %lld layers would make %lld layers; a model has at most %d",
		           (long long)times, (long long)body, (long long)total, MAX_LAYERS);
		return -1;
	}
	for (int64_t r = 1; r < times; r++)
		for (int i = first; i < first + body; i++) {
			ir_layer copy = m->layers[i];
			ir_layer *nl = ir_add_layer(m, copy.kind, m->layer_loc[i]);
			*nl = copy;
		}
	return 0;
}

/* pattern-block := {pattern: "M-*E", mamba: layer, attention: layer,
 *                   mlp: layer, moe: layer}
 * One layer per character, each a copy of its kind's mapping. */
static int read_pattern(fe *f, yaml_node_t *map)
{
	ydoc *d = f->d;
	const char *keys[1 + IR_NLAYER_KINDS];
	int kind_of[1 + IR_NLAYER_KINDS], nkeys = 0;
	char expect[160] = "";
	keys[nkeys++] = "pattern";
	for (int k = 0; k < IR_NLAYER_KINDS; k++) {
		if (!ir_layer_kind_chars[k])
			continue;
		kind_of[nkeys] = k;
		keys[nkeys++] = ir_layer_kind_names[k];
		snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s'%c' (%s)",
		         *expect ? ", " : "", ir_layer_kind_chars[k], ir_layer_kind_names[k]);
	}
	keyspec ks = {"in pattern block", keys, nkeys, 0, 0, 0};
	yaml_node_t *k[1 + IR_NLAYER_KINDS], *v[1 + IR_NLAYER_KINDS];
	if (walk_map(d, map, "a pattern block", &ks, k, v) < 0)
		return -1;
	const char *pat;
	if (scalar(d, v[0], "'pattern'", "a string", &pat) < 0)
		return -1;
	ir_layer tmpl[IR_NLAYER_KINDS];
	bool have[IR_NLAYER_KINDS] = {0};
	for (int i = 1; i < nkeys; i++) {
		if (!v[i])
			continue;
		if (want(d, v[i], YAML_MAPPING_NODE, quoted(d->a, keys[i])) < 0 ||
		    read_layer(f, v[i], kind_of[i], &tmpl[kind_of[i]]) < 0)
			return -1;
		have[kind_of[i]] = true;
	}

	/* Point at the character itself when the scalar's source is the value
	 * verbatim (one line, no escapes); else at the whole scalar.  The end
	 * mark is used because the start mark covers an anchor or tag. */
	const yaml_node_t *pn = v[0];
	ir_loc base = at(d, pn);
	size_t len = strlen(pat);
	if (pn->start_mark.line == pn->end_mark.line &&
	    pn->data.scalar.style != YAML_LITERAL_SCALAR_STYLE &&
	    pn->data.scalar.style != YAML_FOLDED_SCALAR_STYLE) {
		ir_loc end = ysrc_mark_loc(&d->ys, pn->end_mark);
		size_t off = d->ys.line_start[end.line - 1] + (size_t)end.col - 1;
		off -= pn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? 0 : 1;
		if (off >= len && memcmp(d->ys.src->text + off - len, pat, len) == 0)
			base.col = end.col - (int)len - (pn->data.scalar.style != YAML_PLAIN_SCALAR_STYLE);
		else
			base.line = 0;
	} else {
		base.line = 0;
	}

	int count = 0;
	for (size_t i = 0; i < len; i++) {
		if (pat[i] == ' ')
			continue;
		ir_loc cl = base.line ? (ir_loc){base.src, base.line, base.col + (int)i} : at(d, pn);
		int kind = -1;
		for (int kk = 0; kk < IR_NLAYER_KINDS; kk++)
			if (ir_layer_kind_chars[kk] && ir_layer_kind_chars[kk] == pat[i])
				kind = kk;
		if (kind < 0) {
			size_t n = 1; /* the whole UTF-8 character */
			while (i + n < len && ((unsigned char)pat[i + n] & 0xC0) == 0x80)
				n++;
			diag_error(cl, "unknown layer character '%s' in pattern; expected %s",
			           ysrc_shown(d->a, arena_strndup(d->a, pat + i, n)), expect);
			return -1;
		}
		if (!have[kind]) {
			diag_error(cl, "pattern uses '%c' but the block has no '%s' mapping", pat[i],
			           ir_layer_kind_names[kind]);
			return -1;
		}
		if (emit(f, &tmpl[kind], cl) < 0)
			return -1;
		count++;
	}
	if (!count) {
		diag_error(at(d, pn), "'pattern' has no layers");
		return -1;
	}
	return 0;
}

/* layers := [ (layer | repeat-block | pattern-block)... ] */
static int read_layers(fe *f, yaml_node_t *seq, const char *what)
{
	ydoc *d = f->d;
	if (want(d, seq, YAML_SEQUENCE_NODE, what) < 0)
		return -1;
	if (seq->data.sequence.items.start == seq->data.sequence.items.top) {
		diag_error(at(d, seq), "%s is empty", what);
		return -1;
	}
	if (f->nopen == 1 + MAX_REPEAT_DEPTH) {
		diag_error(at(d, seq), "repeat blocks nested more than %d deep", MAX_REPEAT_DEPTH);
		return -1;
	}
	f->nopen++;
	int rc = 0;
	for (yaml_node_item_t *it = seq->data.sequence.items.start;
	     rc == 0 && it < seq->data.sequence.items.top; it++) {
		yaml_node_t *e = node(d, *it);
		ir_layer l;
		if (e->type == YAML_SCALAR_NODE &&
		    ir_lookup(ir_layer_kind_names, IR_NLAYER_KINDS, (const char *)e->data.scalar.value) >= 0) {
			diag_error(at(d, e), "expected a mapping for a layer, got '%s'; write '{kind: %s}'",
			           (const char *)e->data.scalar.value, (const char *)e->data.scalar.value);
			rc = -1;
		} else if (want(d, e, YAML_MAPPING_NODE, "a layer") < 0)
			rc = -1;
		else if (peek(d, e, "repeat"))
			rc = read_repeat(f, e);
		else if (peek(d, e, "pattern"))
			rc = read_pattern(f, e);
		else
			rc = read_layer(f, e, -1, &l) < 0 ? -1 : emit(f, &l, at(d, e));
	}
	f->nopen--;
	return rc;
}

/* One embedding, first; one head, last; something between them. */
static int check_ends(fe *f, yaml_node_t *layers)
{
	ir_module *m = f->m;
	int n = m->nlayers;
	const char *const *names = ir_layer_kind_names;
	if (m->layers[0].kind != IR_LAYER_EMBEDDING) {
		diag_error(m->layer_loc[0], "the first layer must be an 'embedding', got '%s'",
		           names[m->layers[0].kind]);
		return -1;
	}
	for (int i = 1; i < n; i++) {
		if (m->layers[i].kind == IR_LAYER_EMBEDDING) {
			diag_error(m->layer_loc[i],
			           "a second 'embedding' layer; a model has one, as its first layer");
			return -1;
		}
		if (m->layers[i].kind == IR_LAYER_HEAD && i != n - 1) {
			diag_error(m->layer_loc[i],
			           "a 'head' before the last layer; a model has one, as its last layer");
			return -1;
		}
	}
	if (m->layers[n - 1].kind != IR_LAYER_HEAD) {
		diag_error(m->layer_loc[n - 1], "the last layer must be a 'head', got '%s'",
		           names[m->layers[n - 1].kind]);
		return -1;
	}
	if (n < 3) {
		diag_error(at(f->d, layers), "no layers between the embedding and the head");
		return -1;
	}
	return 0;
}

/* ---- model, training, plan ------------------------------------------------ */

/* model := {name, hidden, vocab, seq, dtype?} */
static int read_model(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"name", "hidden", "vocab", "seq", "dtype"};
	keyspec ks = {"in 'model'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_model_info *mi = &f->m->model;
	if (walk_map(d, map, "'model'", &ks, k, v) < 0)
		return -1;
	for (int i = 0; i < 4; i++)
		if (!v[i])
			return missing(d, map, keys[i], ks.where);
	int dtype = IR_DTYPE_BF16;
	if (get_str(d, v[0], "'name'", &mi->name) < 0 ||
	    get_int(d, v[1], "'hidden'", 1, 1 << 20, &mi->hidden) < 0 ||
	    get_int(d, v[2], "'vocab'", 1, 1 << 24, &mi->vocab) < 0 ||
	    get_int(d, v[3], "'seq'", 1, 1 << 24, &mi->seq) < 0 ||
	    (v[4] && get_enum(d, v[4], "'dtype'", "dtype", ir_dtype_names, IR_NDTYPES, &dtype) < 0))
		return -1;
	if (!*mi->name) {
		diag_error(at(d, v[0]), "'name' must not be empty");
		return -1;
	}
	mi->dtype = dtype;
	if (v[4])
		f->m->dtype_loc = at(d, v[4]);
	return 0;
}

enum { TR_MBS, TR_MB, TR_STEPS, TR_OPT, TR_LR, TR_WD, TR_SEED, TR_DATA, TR_TEXT };

/* Where lr and weight_decay were written (or the mapping, for defaults):
 * ir_check_train's `where`. */
typedef struct train_locs {
	ir_loc at[2];
} train_locs;

static ir_loc train_where(void *ctx, ir_train_field f)
{
	return ((train_locs *)ctx)->at[f];
}

/* training := {microbatch_size, microbatches, steps, optimizer, lr,
 *              weight_decay, seed, data, text_file}, all optional */
static int read_training(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"microbatch_size", "microbatches", "steps",
	                                   "optimizer",       "lr",           "weight_decay",
	                                   "seed",            "data",         "text_file"};
	keyspec ks = {"in 'training'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_train *t = &f->m->train;
	if (walk_map(d, map, "'training'", &ks, k, v) < 0)
		return -1;
	int opt = t->optimizer, data = t->data;
	int64_t seed = (int64_t)t->seed;
	if ((v[TR_MBS] && get_int(d, v[TR_MBS], "'microbatch_size'", 1, 1 << 20, &t->mbs) < 0) ||
	    (v[TR_MB] && get_int(d, v[TR_MB], "'microbatches'", 1, 1 << 20, &t->microbatches) < 0) ||
	    (v[TR_STEPS] && get_int(d, v[TR_STEPS], "'steps'", 1, INT32_MAX, &t->steps) < 0) ||
	    (v[TR_OPT] && get_enum(d, v[TR_OPT], "'optimizer'", "optimizer", ir_optimizer_names,
	                           IR_NOPTIMIZERS, &opt) < 0) ||
	    (v[TR_LR] && get_num(d, v[TR_LR], "'lr'", YSRC_POSITIVE, &t->lr) < 0) ||
	    (v[TR_WD] && get_num(d, v[TR_WD], "'weight_decay'", YSRC_NONNEG, &t->weight_decay) < 0) ||
	    (v[TR_SEED] && get_int(d, v[TR_SEED], "'seed'", 0, INT64_MAX, &seed) < 0) ||
	    (v[TR_DATA] &&
	     get_enum(d, v[TR_DATA], "'data'", "data source", ir_data_names, IR_NDATAS, &data) < 0))
		return -1;
	t->optimizer = opt;
	t->data = data;
	t->seed = (uint64_t)seed;
	train_locs tl = {{[IR_TRAIN_LR] = v[TR_LR] ? at(d, v[TR_LR]) : at(d, map),
	                  [IR_TRAIN_WD] = v[TR_WD] ? at(d, v[TR_WD]) : at(d, map)}};
	if (ir_check_train(t, train_where, &tl, at(d, map)))
		return -1;
	if (v[TR_MB])
		f->m->microbatches_loc = at(d, v[TR_MB]);
	if (data == IR_DATA_TEXT && !v[TR_TEXT]) {
		diag_error(at(d, v[TR_DATA]), "'data: text' needs 'text_file'");
		return -1;
	}
	if (data != IR_DATA_TEXT && v[TR_TEXT]) {
		diag_error(at(d, k[TR_TEXT]), "'text_file' is only read with 'data: text'");
		return -1;
	}
	if (data == IR_DATA_TEXT && f->m->model.vocab < 256) {
		diag_error(at(d, v[TR_DATA]),
		           "'data: text' feeds bytes (token ids 0..255); 'vocab' must be at least 256, "
		           "got %lld",
		           (long long)f->m->model.vocab);
		return -1;
	}
	if (v[TR_TEXT]) {
		const char *file;
		if (get_str(d, v[TR_TEXT], "'text_file'", &file) < 0)
			return -1;
		if (!*file) {
			diag_error(at(d, v[TR_TEXT]), "'text_file' must not be empty");
			return -1;
		}
		t->text_file = resolve(d->a, dir_of(d->a, d->ys.src->name), file);
		if (access(t->text_file, R_OK) != 0) {
			diag_error(at(d, v[TR_TEXT]), "cannot read text file '%s': %s",
			           ysrc_shown(d->a, t->text_file), strerror(errno));
			return -1;
		}
		/* What the ranks will read at start (runtime/rt_model.c): a
		 * regular file with at least one sequence, seq + 1 bytes. */
		struct stat st;
		if (stat(t->text_file, &st) != 0) {
			diag_error(at(d, v[TR_TEXT]), "cannot read text file '%s': %s",
			           ysrc_shown(d->a, t->text_file), strerror(errno));
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			diag_error(at(d, v[TR_TEXT]), "text file '%s' is not a regular file (%s)",
			           ysrc_shown(d->a, t->text_file),
			           src_file_kind(st.st_mode));
			return -1;
		}
		int64_t need = f->m->model.seq + 1;
		if (st.st_size < need) {
			diag_error(at(d, v[TR_TEXT]),
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
	const char *what = quoted(d->a, key);
	if (want(d, seq, YAML_SEQUENCE_NODE, what) < 0)
		return -1;
	yaml_node_item_t *it0 = seq->data.sequence.items.start;
	int count = (int)(seq->data.sequence.items.top - it0);
	*out = arena_alloc(d->a, (size_t)(count ? count : 1) * sizeof **out);
	*n = count;
	const char *item = arena_printf(d->a, "a '%s' entry", key);
	for (int i = 0; i < count; i++)
		if (get_int(d, node(d, it0[i]), item, lo, hi, &(*out)[i]) < 0)
			return -1;
	return 0;
}

enum { PL_SCHEDULE, PL_CHUNKS, PL_PARTITION, PL_STAGES, PL_PLACEMENT };

/* plan := {schedule, chunks, partition, stage_layers, placement}, all optional */
static int read_plan(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"schedule", "chunks", "partition", "stage_layers",
	                                   "placement"};
	keyspec ks = {"in 'plan'", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	ir_plan_opts *p = &f->m->plan;
	if (walk_map(d, map, "'plan'", &ks, k, v) < 0)
		return -1;
	int sched = p->schedule, part = p->partition;
	if ((v[PL_SCHEDULE] && get_enum(d, v[PL_SCHEDULE], "'schedule'", "schedule",
	                                ir_schedule_names, IR_NSCHEDULES, &sched) < 0) ||
	    (v[PL_CHUNKS] && get_int(d, v[PL_CHUNKS], "'chunks'", 1, 1024, &p->chunks) < 0) ||
	    (v[PL_PARTITION] && get_enum(d, v[PL_PARTITION], "'partition'", "partition",
	                                 ir_partition_names, IR_NPARTITIONS, &part) < 0))
		return -1;
	p->schedule = sched;
	p->partition = part;
	if (v[PL_CHUNKS])
		f->m->chunks_loc = at(d, v[PL_CHUNKS]);
	if (part == IR_PART_GIVEN && !v[PL_STAGES]) {
		diag_error(at(d, v[PL_PARTITION]), "'partition: given' needs 'stage_layers'");
		return -1;
	}
	if (v[PL_STAGES]) {
		if (part != IR_PART_GIVEN) {
			diag_error(at(d, k[PL_STAGES]), "'stage_layers' needs 'partition: given'");
			return -1;
		}
		if (read_int_list(d, v[PL_STAGES], "stage_layers", 1, MAX_LAYERS, &p->given,
		                  &p->ngiven) < 0)
			return -1;
		int64_t sum = 0;
		for (int i = 0; i < p->ngiven; i++)
			sum += p->given[i];
		if (sum != f->m->nlayers) {
			diag_error(at(d, v[PL_STAGES]),
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
	int64_t devices = m->cluster.devices;
	int64_t stages = p->partition == IR_PART_GIVEN ? p->ngiven : devices * ir_plan_chunks(p);
	if (stages == 0)
		return 0; /* zbv with a wrong chunk count: the partition pass says so */
	if (p->nplacement != stages) {
		if (p->partition == IR_PART_GIVEN)
			diag_error(at(d, f->placement),
			           "'placement' has %d entries, but the plan has %lld stages (one per "
			           "'stage_layers' entry)",
			           p->nplacement, (long long)stages);
		else
			diag_error(at(d, f->placement),
			           "'placement' has %d entries, but the plan has %lld stages (%lld devices x "
			           "%lld chunks)",
			           p->nplacement, (long long)stages, (long long)devices,
			           (long long)p->chunks);
		return -1;
	}
	for (int i = 0; i < p->nplacement; i++)
		if (p->placement[i] >= devices) {
			yaml_node_t *e = node(d, f->placement->data.sequence.items.start[i]);
			diag_error(at(d, e), "'placement' puts stage %d on device %lld, but the cluster has "
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
		range_error(at, flag, v, lo, hi);
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
	if (ov->cluster && load_module_cluster(m, ov->cluster, ov->cluster_at) < 0)
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
	return 0;
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
		diag_error(at(&d, root), "expected a mapping at the top level of the model file, got %s",
		           describe(&d, root));
		goto out;
	}
	if (walk_map(&d, root, "the top level", &ks, k, v) < 0)
		goto out;
	if (!v[TOP_MODEL]) {
		missing(&d, root, "model", ks.where);
		goto out;
	}
	/* Section locations, for the passes' diagnostics about them. */
	ir_loc *section[] = {&m->model_loc, NULL, &m->train_loc, &m->cluster_loc, &m->plan_loc};
	for (int i = 0; i < NELEMS(keys); i++)
		if (k[i] && section[i])
			*section[i] = at(&d, k[i]);
	if (read_model(&f, v[TOP_MODEL]) < 0)
		goto out;
	if (!v[TOP_LAYERS]) {
		missing(&d, root, "layers", ks.where);
		goto out;
	}
	if (read_layers(&f, v[TOP_LAYERS], "'layers'") < 0 || check_ends(&f, v[TOP_LAYERS]) < 0)
		goto out;
	if (v[TOP_TRAINING] && read_training(&f, v[TOP_TRAINING]) < 0)
		goto out;
	cluster_locs cl = {{0}};
	if (v[TOP_CLUSTER]) {
		if (check_tag(&d, v[TOP_CLUSTER], "'cluster'") < 0 ||
		    read_cluster(&d, v[TOP_CLUSTER], dir_of(m->arena, src->name), 0, &m->cluster, &cl) < 0)
			goto out;
		m->cluster_at.devices = cl.devices;
		m->cluster_at.mem = cl.mem;
	} else if (!ov->cluster && load_module_cluster(m, "cpu-local", no_loc) < 0) {
		goto out;
	}
	if (v[TOP_PLAN] && read_plan(&f, v[TOP_PLAN]) < 0)
		goto out;
	if (apply_overrides(&f, ov) < 0 || check_placement(&f) < 0)
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
	return apply_overrides(&f, ov ? ov : &none);
}
