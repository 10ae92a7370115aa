/* ydoc.c: the YAML document layer of the model and cluster files
 * (modelfile.h).
 *
 * libyaml's parser turns a file into events, composed here into a node
 * tree (a yaml_document_t, with limits libyaml's own loader lacks: nesting,
 * anchors, aliases, tags); the typed getters read one node each and the map
 * walk checks a mapping's keys.  Every mistake is one diagnostic at its
 * node; the callers stop at the first. */
#include "modelfile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- nodes and locations --------------------------------------------- */

ir_loc ydoc_at(ydoc *d, const yaml_node_t *n)
{
	return ysrc_mark_loc(&d->ys, n->start_mark);
}

yaml_node_t *ydoc_node(ydoc *d, int id)
{
	return yaml_document_get_node(&d->doc, id);
}

/* ---- messages ---------------------------------------------------------- */

const char *ydoc_quoted(arena *a, const char *key)
{
	return arena_printf(a, "'%s'", key);
}

/* What a node is, for "expected X for 'k', got Y". */
const char *ydoc_describe(ydoc *d, const yaml_node_t *n)
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

void ydoc_range_error(ir_loc loc, const char *what, int64_t v, int64_t lo, int64_t hi)
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

void ydoc_free(ydoc *d)
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
			ydoc_node(d, id)->start_mark = ev.start_mark;
			ydoc_node(d, id)->end_mark = ev.end_mark;
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
			ydoc_node(d, nid)->start_mark = ev.start_mark;
			if (set_anchor(d, &anch, seq ? ev.data.sequence_start.anchor : ev.data.mapping_start.anchor,
			               nid, ev.start_mark) < 0)
				goto fail;
			stack[depth++] = (open_node){nid, 0};
			break;
		}
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			id = stack[--depth].id;
			ydoc_node(d, id)->end_mark = ev.end_mark;
			break;
		default:
			break;
		}
		if (!id || !depth)
			continue; /* the root has no parent */
		open_node *top = &stack[depth - 1];
		yaml_node_t *parent = ydoc_node(d, top->id);
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
int ydoc_load(ydoc *d, arena *a, const src_file *src, const char *what)
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
int ydoc_check_tag(ydoc *d, const yaml_node_t *n, const char *what)
{
	const char *tag = (const char *)n->tag;
	if (!tag || strcmp(tag, default_tag(n->type)) == 0)
		return 0;
	diag_error(ydoc_at(d, n), "unsupported tag '%s' on %s; tags are not part of the format",
	           ysrc_tag_shown(d->a, tag), what);
	return -1;
}

static const char *const type_names[] = {
	[YAML_SCALAR_NODE] = "a string",
	[YAML_SEQUENCE_NODE] = "a sequence",
	[YAML_MAPPING_NODE] = "a mapping",
};

int ydoc_want(ydoc *d, const yaml_node_t *n, yaml_node_type_t type, const char *what)
{
	if (n->type != type) {
		diag_error(ydoc_at(d, n), "expected %s for %s, got %s", type_names[type], what,
		           ydoc_describe(d, n));
		return -1;
	}
	return ydoc_check_tag(d, n, what);
}

/* A scalar's text (valid while the document lives).  `expect` names the
 * wanted thing in the message: "an integer", "a string". */
int ydoc_scalar(ydoc *d, const yaml_node_t *n, const char *what, const char *expect,
                const char **out)
{
	if (n->type != YAML_SCALAR_NODE) {
		diag_error(ydoc_at(d, n), "expected %s for %s, got %s", expect, what, ydoc_describe(d, n));
		return -1;
	}
	if (ydoc_check_tag(d, n, what) < 0)
		return -1;
	const char *s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length) {
		diag_error(ydoc_at(d, n), "%s contains a NUL character", what);
		return -1;
	}
	*out = s;
	return 0;
}

int ydoc_str(ydoc *d, const yaml_node_t *n, const char *what, const char **out)
{
	const char *s;
	if (ydoc_scalar(d, n, what, "a string", &s) < 0)
		return -1;
	*out = arena_strdup(d->a, s);
	return 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* integer := plain scalar [+-]digits, within lo..hi. */
int ydoc_int(ydoc *d, const yaml_node_t *n, const char *what, int64_t lo, int64_t hi,
             int64_t *out)
{
	const char *s;
	if (ydoc_scalar(d, n, what, "an integer", &s) < 0)
		return -1;
	size_t i = s[0] == '+' || s[0] == '-';
	bool ok = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_digit(s[i]);
	while (ok && s[i])
		ok = is_digit(s[i++]);
	if (!ok) {
		diag_error(ydoc_at(d, n), "expected an integer for %s, got %s", what, ydoc_describe(d, n));
		return -1;
	}
	errno = 0;
	long long v = strtoll(s, NULL, 10);
	if (errno == ERANGE) {
		diag_error(ydoc_at(d, n), "integer %s for %s is out of range", ysrc_shown(d->a, s), what);
		return -1;
	}
	if (v < lo || v > hi) {
		ydoc_range_error(ydoc_at(d, n), what, v, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* number := plain scalar in decimal or scientific notation, finite. */
int ydoc_num(ydoc *d, const yaml_node_t *n, const char *what, int sign, double *out)
{
	const char *s;
	if (ydoc_scalar(d, n, what, "a number", &s) < 0)
		return -1;
	int rc = ysrc_number(d->a, ydoc_at(d, n), what, s,
	                     n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE, sign, out);
	if (rc > 0)
		diag_error(ydoc_at(d, n), "expected a number for %s, got %s", what, ydoc_describe(d, n));
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
	if (ydoc_scalar(d, n, what, expect, &s) < 0)
		return -1;
	size_t len = ysrc_scan_number(s);
	if (!len) {
		diag_error(ydoc_at(d, n), "expected %s for %s, got %s", expect, what, ydoc_describe(d, n));
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
		diag_error(ydoc_at(d, n), "unknown %s '%s' in '%s' for %s; expected %s", noun,
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
int ydoc_rate(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
		const char *s = (const char *)n->data.scalar.value;
		s += *s == '+';
		if (strcmp(s, "inf") == 0 || (ysrc_nonfinite(s) && (s[1] == 'i' || s[1] == 'I'))) {
			if (ydoc_check_tag(d, n, what) < 0)
				return -1;
			*out = INFINITY;
			return 0;
		}
	}
	if (ydoc_num(d, n, what, YSRC_POSITIVE, out) < 0)
		return -1;
	if (!ir_rate_ok(*out)) {
		diag_error(ydoc_at(d, n), "%s must be in %g .. %g bytes/s (or inf), got %s", what, IR_MIN_RATE,
		           IR_MAX_RATE, ysrc_shown(d->a, (const char *)n->data.scalar.value));
		return -1;
	}
	return 0;
}

/* flops := number in IR_MIN_FLOPS .. IR_MAX_FLOPS (docs/ir.md, "Ranges"). */
int ydoc_flops(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	if (ydoc_num(d, n, what, YSRC_POSITIVE, out) < 0)
		return -1;
	if (!ir_range_ok(*out, IR_MIN_FLOPS, IR_MAX_FLOPS)) {
		diag_error(ydoc_at(d, n), "%s must be in %g .. %g FLOP/s, got %s", what, IR_MIN_FLOPS,
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
		diag_error(ydoc_at(d, n), "byte size %s for %s is out of range", ysrc_shown(d->a, s), what);
		return -1;
	}
	if (v < 1) {
		diag_error(ydoc_at(d, n), "%s must be at least 1 byte, got '%s'", what, ysrc_shown(d->a, s));
		return -1;
	}
	*out = (uint64_t)(v + 0.5);
	return 0;
}

/* bytes := number [B|KiB|MiB|GiB|TiB] */
int ydoc_bytes(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out)
{
	return get_bytes(d, n, what, out);
}

/* memory := bytes | unlimited (UINT64_MAX: nothing is ever out of memory). */
int ydoc_memory(ydoc *d, const yaml_node_t *n, const char *what, uint64_t *out)
{
	if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	    strcmp((const char *)n->data.scalar.value, "unlimited") == 0) {
		if (ydoc_check_tag(d, n, what) < 0)
			return -1;
		*out = UINT64_MAX;
		return 0;
	}
	return get_bytes(d, n, what, out);
}

/* duration := number (seconds) | number unit (s, ms, us, ns); in microseconds. */
int ydoc_duration(ydoc *d, const yaml_node_t *n, const char *what, double *out)
{
	static const unit units[] = {
		{"", 1e6}, {"s", 1e6}, {"ms", 1e3}, {"us", 1}, {"ns", 1e-3},
	};
	const char *s;
	double v;
	if (get_with_unit(d, n, what, "a duration", "time unit", units, NELEMS(units), &v, &s) < 0)
		return -1;
	if (!isfinite(v) || v < 0) {
		diag_error(ydoc_at(d, n), "%s must be a finite duration of at least 0, got '%s'", what,
		           ysrc_shown(d->a, s));
		return -1;
	}
	if (v > IR_MAX_US) {
		diag_error(ydoc_at(d, n), "%s must be at most %gus (11.6 days), got '%s'", what, IR_MAX_US,
		           ysrc_shown(d->a, s));
		return -1;
	}
	*out = v;
	return 0;
}

/* One of ir.h's names; `noun` says which table in messages. */
int ydoc_enum(ydoc *d, const yaml_node_t *n, const char *what, const char *noun,
              const char *const *names, int count, int *out)
{
	const char *s;
	if (ydoc_scalar(d, n, what, "a string", &s) < 0)
		return -1;
	int i = ir_lookup(names, count, s);
	if (i < 0) {
		ysrc_unknown(d->a, ydoc_at(d, n), noun, s, NULL, names, count);
		return -1;
	}
	*out = i;
	return 0;
}

/* ---- mappings ------------------------------------------------------------ */

void ydoc_unknown_key(ydoc *d, const yaml_node_t *k, const char *name, const keyspec *ks)
{
	ir_loc loc = ydoc_at(d, k);
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
int ydoc_walk_map(ydoc *d, yaml_node_t *map, const char *what, const keyspec *ks,
                  yaml_node_t **key, yaml_node_t **val)
{
	if (ydoc_want(d, map, YAML_MAPPING_NODE, what) < 0)
		return -1;
	for (int i = 0; i < ks->nkeys; i++)
		key[i] = val[i] = NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = ydoc_node(d, p->key);
		const char *name;
		if (ydoc_scalar(d, k, arena_printf(d->a, "a key %s", ks->where), "a string", &name) < 0)
			return -1;
		int i = ir_lookup(ks->keys, ks->nkeys, name);
		if (i < 0) {
			ydoc_unknown_key(d, k, name, ks);
			return -1;
		}
		if (key[i]) {
			diag_error(ydoc_at(d, k), "duplicate key '%s' %s", name, ks->where);
			diag_note(ydoc_at(d, key[i]), "the first '%s' is here", name);
			return -1;
		}
		key[i] = k;
		val[i] = ydoc_node(d, p->value);
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
		yaml_node_t *k = ydoc_node(d, p->key);
		if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, name) == 0)
			return p;
	}
	return NULL;
}

yaml_node_t *ydoc_peek(ydoc *d, const yaml_node_t *map, const char *name)
{
	yaml_node_pair_t *p = peek_pair(d, map, name);
	return p ? ydoc_node(d, p->value) : NULL;
}

yaml_node_t *ydoc_peek_key(ydoc *d, const yaml_node_t *map, const char *name)
{
	yaml_node_pair_t *p = peek_pair(d, map, name);
	return p ? ydoc_node(d, p->key) : NULL;
}

int ydoc_missing(ydoc *d, const yaml_node_t *map, const char *key, const char *where)
{
	diag_error(ydoc_at(d, map), "missing required key '%s' %s", key, where);
	return -1;
}
