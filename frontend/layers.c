/* layers.c: the model file's `layers` (docs/yaml.md, "Layers"): layer
 * mappings, repeat blocks and pattern blocks, each layer checked against
 * the model and completed with its derived attributes (kv_heads, head_dim,
 * the mamba heads, ...), so the module is explicit and later passes never
 * guess. */
#include "modelfile.h"

#include <stdio.h>
#include <string.h>

enum { MAX_REPEAT_DEPTH = 32 }; /* repeat blocks inside each other */

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

static int read_layer(fe *f, yaml_node_t *map, int implied, ir_layer *l);

/* parallel-layer := {kind: parallel, attention: attention-fields,
 *                    mamba: mamba-fields}
 * Each part is read (and completed, and checked) as a layer of its kind,
 * `kind:` left out; the mixer must be version 2. */
static int read_parallel(fe *f, yaml_node_t *map, ir_layer *l)
{
	static const char *const keys[] = {"kind", "attention", "mamba"};
	keyspec ks = {"in parallel layer", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	if (ydoc_walk_map(d, map, "parallel layer", &ks, k, v) < 0)
		return -1;
	memset(l, 0, sizeof *l);
	l->kind = IR_LAYER_PARALLEL;
	for (int p = 1; p <= 2; p++) {
		ir_layer_kind part = p == 1 ? IR_LAYER_ATTENTION : IR_LAYER_MAMBA;
		if (!v[p])
			return ydoc_missing(d, map, keys[p], ks.where);
		ir_layer pl;
		if (ydoc_want(d, v[p], YAML_MAPPING_NODE, ydoc_quoted(d->a, keys[p])) < 0)
			return -1;
		yaml_node_t *kn = ydoc_peek(d, v[p], "kind");
		if (kn && (kn->type != YAML_SCALAR_NODE ||
		           strcmp((const char *)kn->data.scalar.value, keys[p]) != 0)) {
			diag_error(ydoc_at(d, kn), "a 'kind' in the '%s' mapping of a parallel layer must "
			           "be '%s', or left out", keys[p], keys[p]);
			return -1;
		}
		if (read_layer(f, v[p], part, &pl) < 0)
			return -1;
		if (part == IR_LAYER_MAMBA && pl.attr[IR_ATTR_VERSION] != 2) {
			yaml_node_t *vn = ydoc_peek(d, v[p], "version");
			diag_error(ydoc_at(d, vn ? vn : v[p]),
			           "a parallel layer's mamba mixer is Mamba-2: 'version' must be 2");
			return -1;
		}
		for (int a = 0; a < IR_NATTRS; a++) {
			int pa = ir_parallel_attr(part, a);
			if (pa >= 0)
				l->attr[pa] = pl.attr[a];
			else if (pl.attr[a]) {
				/* MLA or rope_scaling, which the parallel layer does not run */
				yaml_node_t *an = ydoc_peek(d, v[p], ir_attr_table[a].name);
				diag_error(ydoc_at(d, an ? an : v[p]),
				           "'%s' does not apply to a parallel layer's %s",
				           ir_attr_table[a].name, keys[p]);
				return -1;
			}
		}
	}
	return ir_check_layer(&f->m->model, l, f->m->nlayers, NULL, NULL, ydoc_at(d, map)) ? -1 : 0;
}

/* A number attribute: > 0, at least the table's min and at most its max
 * when it has one, the default kept as absent, so that writing it changes
 * nothing in the IR. */
static int read_real(ydoc *d, yaml_node_t *n, ir_attr a, const char *what, ir_layer *l)
{
	double r;
	int64_t min = ir_attr_table[a].min, max = ir_attr_table[a].max;
	if (ydoc_num(d, n, what, YSRC_POSITIVE, &r) < 0)
		return -1;
	if (r < (double)min) {
		diag_error(ydoc_at(d, n), "%s must be at least %lld, got %s", what, (long long)min,
		           ysrc_shown(d->a, (const char *)n->data.scalar.value));
		return -1;
	}
	if (max > 0 && r > (double)max) {
		diag_error(ydoc_at(d, n), "%s must be at most %lld, got %s", what, (long long)max,
		           ysrc_shown(d->a, (const char *)n->data.scalar.value));
		return -1;
	}
	l->attr[a] = r == ir_attr_real_default(a) ? 0 : ir_real_bits(r);
	return 0;
}

/* rope_scaling := {type: linear | llama3 | yarn, field: value, ...}
 * (docs/yaml.md, "RoPE scaling"): the type first, which decides the
 * fields; each a "rope_scaling.<field>" attribute.  Hugging Face's other
 * types are named in their refusal. */
static int read_rope_scaling(ydoc *d, yaml_node_t *map, ir_layer *l, attr_locs *w)
{
	static const struct { const char *type, *why; } refused[] = {
		{"dynamic", "dynamic NTK scaling changes the frequencies with the length of the text at "
		            "inference, and training has no such length"},
		{"longrope", "LongRoPE's per-frequency factor lists are not supported"},
		{"default", "it is plain RoPE: leave 'rope_scaling' out"},
	};
	if (ydoc_want(d, map, YAML_MAPPING_NODE, "'rope_scaling'") < 0)
		return -1;
	yaml_node_t *tn = ydoc_peek(d, map, "type");
	if (!tn)
		return ydoc_missing(d, map, "type", "in rope_scaling");
	const char *type;
	if (ydoc_scalar(d, tn, "'type'", "a string", &type) < 0)
		return -1;
	for (size_t i = 0; i < NELEMS(refused); i++)
		if (!strcmp(type, refused[i].type)) {
			diag_error(ydoc_at(d, tn), "rope_scaling type '%s' is not supported: %s; the types "
			           "are linear, llama3 and yarn", type, refused[i].why);
			return -1;
		}
	int t;
	if (ydoc_enum(d, tn, "'type'", "rope_scaling type", ir_rope_scaling_names + 1,
	              IR_NROPE_SCALINGS - 1, &t) < 0)
		return -1;
	t++;

	/* The keys: `type` and the fields of this type; another type's field
	 * is named as such. */
	enum { NF = IR_ATTR_ROPE_MSCALE_ALL_DIM - IR_ATTR_ROPE_FACTOR + 1 };
	const char *keys[1 + NF], *other[NF];
	ir_attr attr_of[1 + NF];
	int nkeys = 0, nother = 0;
	keys[nkeys++] = "type";
	for (int a = IR_ATTR_ROPE_FACTOR; a <= IR_ATTR_ROPE_MSCALE_ALL_DIM; a++) {
		const char *key = ir_attr_table[a].name + strlen("rope_scaling.");
		if (ir_rope_field_use(t, a) != IR_USE_NO) {
			attr_of[nkeys] = a;
			keys[nkeys++] = key;
		} else {
			other[nother++] = key;
		}
	}
	const char *tname = ir_rope_scaling_names[t];
	keyspec ks = {"in rope_scaling", keys, nkeys, other, nother,
	              arena_printf(d->a, "does not apply to type %s (its fields: %s)", tname,
	                           ysrc_joined(d->a, keys + 1, nkeys - 1))};
	yaml_node_t *k[1 + NF], *v[1 + NF];
	if (ydoc_walk_map(d, map, "'rope_scaling'", &ks, k, v) < 0)
		return -1;
	l->attr[IR_ATTR_ROPE_SCALING] = t;
	w->at[IR_ATTR_ROPE_SCALING] = ydoc_at(d, tn);
	for (int i = 1; i < nkeys; i++) {
		ir_attr a = attr_of[i];
		if (!v[i]) {
			if (ir_rope_field_use(t, a) == IR_USE_REQUIRED)
				return ydoc_missing(d, map, keys[i], arena_printf(d->a, "in rope_scaling of "
				                    "type %s", tname));
			continue;
		}
		const char *what = ydoc_quoted(d->a, ir_attr_table[a].name);
		w->at[a] = ydoc_at(d, v[i]);
		if (ir_attr_table[a].type == IR_AT_REAL) {
			if (read_real(d, v[i], a, what, l) < 0)
				return -1;
		} else if (ydoc_int(d, v[i], what, 1, ir_attr_table[a].max, &l->attr[a]) < 0) {
			return -1;
		}
	}
	return 0;
}

/* layer := {kind: name, attribute: value, ...} (docs/yaml.md, "Layer kinds
 * and their fields").  In a pattern block the kind comes from the block's
 * key (`implied`), and `kind:` may be left out. */
static int read_layer(fe *f, yaml_node_t *map, int implied, ir_layer *l)
{
	ydoc *d = f->d;
	ir_loc loc = ydoc_at(d, map);
	yaml_node_t *kn = ydoc_peek(d, map, "kind");
	int kind = implied;
	if (kn) {
		if (ydoc_enum(d, kn, "'kind'", "layer kind", ir_layer_kind_names, IR_NLAYER_KINDS,
		              &kind) < 0)
			return -1;
		if (implied >= 0 && kind != implied) {
			diag_error(ydoc_at(d, kn), "'kind: %s' in the '%s' mapping of a pattern block",
			           ir_layer_kind_names[kind], ir_layer_kind_names[implied]);
			return -1;
		}
	} else if (implied < 0) {
		keyspec none = {"in layer", 0, 0, 0, 0, 0};
		yaml_node_t *merge = ydoc_peek_key(d, map, "<<");
		if (merge) {
			ydoc_unknown_key(d, merge, "<<", &none);
			return -1;
		}
		return ydoc_missing(d, map, "kind", "in layer");
	}
	if (kind == IR_LAYER_PARALLEL)
		return read_parallel(f, map, l);
	int64_t version = 0;
	if (kind == IR_LAYER_MAMBA) {
		yaml_node_t *vn = ydoc_peek(d, map, "version");
		version = 2;
		if (vn && ydoc_int(d, vn, "'version'", 1, 2, &version) < 0)
			return -1;
	}

	/* The valid keys: `kind` and the attributes of this kind (and version). */
	const char *keys[1 + IR_NATTRS], *other[IR_NATTRS];
	ir_attr attr_of[1 + IR_NATTRS];
	int nkeys = 0, nother = 0;
	keys[nkeys++] = "kind";
	for (int a = 0; a < IR_NATTRS; a++) {
		if (ir_attr_is_rope_field(a))
			continue; /* keys of the rope_scaling mapping */
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
	if (ydoc_walk_map(d, map, arena_printf(d->a, "%s layer", kname), &ks, k, v) < 0)
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
		const char *what = ydoc_quoted(d->a, keys[i]);
		w.at[a] = ydoc_at(d, v[i]);
		given[a] = true;
		if (ai->type == IR_AT_ACT) {
			int act;
			if (ydoc_enum(d, v[i], what, "activation", ir_act_names, IR_NACTS, &act) < 0)
				return -1;
			l->attr[a] = act;
			continue;
		}
		if (ai->type == IR_AT_BOOL) {
			static const char *const names[] = {"false", "true", "off", "on"};
			int b;
			if (ydoc_enum(d, v[i], what, "value", names, NELEMS(names), &b) < 0)
				return -1;
			l->attr[a] = b % 2;
			continue;
		}
		if (ai->type == IR_AT_REAL) {
			if (read_real(d, v[i], a, what, l) < 0)
				return -1;
			continue;
		}
		if (a == IR_ATTR_ROPE_SCALING) {
			if (read_rope_scaling(d, v[i], l, &w) < 0)
				return -1;
			continue;
		}
		/* 0 means "absent" in the IR, so a required attribute starts at 1. */
		int64_t lo = ai->min;
		if (ir_attr_required(a, kind, version) && lo < 1)
			lo = 1;
		if (ydoc_int(d, v[i], what, lo, ai->max, &l->attr[a]) < 0)
			return -1;
	}
	if (kind == IR_LAYER_MAMBA)
		l->attr[IR_ATTR_VERSION] = version;
	for (int a = 0; a < IR_NATTRS; a++)
		if (!given[a] && ir_attr_required(a, kind, version) && !derived(a, kind))
			return ydoc_missing(d, map, yaml_attr_name(a), ks.where);
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

/* repeat-block := {repeat: N, layers: layers} */
static int read_repeat(fe *f, yaml_node_t *map)
{
	static const char *const keys[] = {"repeat", "layers"};
	keyspec ks = {"in repeat block", keys, NELEMS(keys), 0, 0, 0};
	yaml_node_t *k[NELEMS(keys)], *v[NELEMS(keys)];
	ydoc *d = f->d;
	int64_t times;
	if (ydoc_walk_map(d, map, "a repeat block", &ks, k, v) < 0 ||
	    ydoc_int(d, v[0], "'repeat'", 1, MAX_LAYERS, &times) < 0)
		return -1;
	if (!v[1])
		return ydoc_missing(d, map, "layers", ks.where);
	ir_module *m = f->m;
	int first = m->nlayers;
	if (fe_read_layers(f, v[1], "'layers'") < 0)
		return -1;
	int64_t body = m->nlayers - first, total = first + body * times;
	if (total > MAX_LAYERS) {
		diag_error(ydoc_at(d, v[0]),
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
	if (ydoc_walk_map(d, map, "a pattern block", &ks, k, v) < 0)
		return -1;
	const char *pat;
	if (ydoc_scalar(d, v[0], "'pattern'", "a string", &pat) < 0)
		return -1;
	ir_layer tmpl[IR_NLAYER_KINDS];
	bool have[IR_NLAYER_KINDS] = {0};
	for (int i = 1; i < nkeys; i++) {
		if (!v[i])
			continue;
		if (ydoc_want(d, v[i], YAML_MAPPING_NODE, ydoc_quoted(d->a, keys[i])) < 0 ||
		    read_layer(f, v[i], kind_of[i], &tmpl[kind_of[i]]) < 0)
			return -1;
		have[kind_of[i]] = true;
	}

	/* Point at the character itself when the scalar's source is the value
	 * verbatim (one line, no escapes); else at the whole scalar.  The end
	 * mark is used because the start mark covers an anchor or tag. */
	const yaml_node_t *pn = v[0];
	ir_loc base = ydoc_at(d, pn);
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
		ir_loc cl = base.line ? (ir_loc){base.src, base.line, base.col + (int)i} : ydoc_at(d, pn);
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
		diag_error(ydoc_at(d, pn), "'pattern' has no layers");
		return -1;
	}
	return 0;
}

/* layers := [ (layer | repeat-block | pattern-block)... ] */
int fe_read_layers(fe *f, yaml_node_t *seq, const char *what)
{
	ydoc *d = f->d;
	if (ydoc_want(d, seq, YAML_SEQUENCE_NODE, what) < 0)
		return -1;
	if (seq->data.sequence.items.start == seq->data.sequence.items.top) {
		diag_error(ydoc_at(d, seq), "%s is empty", what);
		return -1;
	}
	if (f->nopen == 1 + MAX_REPEAT_DEPTH) {
		diag_error(ydoc_at(d, seq), "repeat blocks nested more than %d deep", MAX_REPEAT_DEPTH);
		return -1;
	}
	f->nopen++;
	int rc = 0;
	for (yaml_node_item_t *it = seq->data.sequence.items.start;
	     rc == 0 && it < seq->data.sequence.items.top; it++) {
		yaml_node_t *e = ydoc_node(d, *it);
		ir_layer l;
		if (e->type == YAML_SCALAR_NODE &&
		    ir_lookup(ir_layer_kind_names, IR_NLAYER_KINDS, (const char *)e->data.scalar.value) >= 0) {
			diag_error(ydoc_at(d, e), "expected a mapping for a layer, got '%s'; write '{kind: %s}'",
			           (const char *)e->data.scalar.value, (const char *)e->data.scalar.value);
			rc = -1;
		} else if (ydoc_want(d, e, YAML_MAPPING_NODE, "a layer") < 0)
			rc = -1;
		else if (ydoc_peek(d, e, "repeat"))
			rc = read_repeat(f, e);
		else if (ydoc_peek(d, e, "pattern"))
			rc = read_pattern(f, e);
		else
			rc = read_layer(f, e, -1, &l) < 0 ? -1 : emit(f, &l, ydoc_at(d, e));
	}
	f->nopen--;
	return rc;
}

/* One embedding, first; one head, last; something between them. */
int fe_check_ends(fe *f, yaml_node_t *layers)
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
		diag_error(ydoc_at(f->d, layers), "no layers between the embedding and the head");
		return -1;
	}
	return 0;
}
