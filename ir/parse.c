/* parse.c: the IR text parser, the inverse of print.c (grammar in
 * docs/ir.md).  Line-oriented: each line is a keyword, then positional
 * operands, then key=value fields.  Any deviation is one diagnostic at its
 * line:col and a NULL module; nothing is guessed. */
#include "ir.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- lexer ------------------------------------------------------------ */

typedef enum { T_EOL, T_EOF, T_WORD, T_STR, T_EQ, T_LBRACE, T_RBRACE } tok_kind;

typedef struct tok {
	tok_kind kind;
	const char *s; /* T_WORD: start in the source; T_STR: unescaped copy */
	int n;
	ir_loc loc;
} tok;

typedef struct parser {
	const src_file *src;
	ir_module *m;
	const char *p, *end;
	int line, col;
	tok t;    /* current token */
	bool err; /* a diagnostic was reported */
} parser;

static void perr(parser *ps, ir_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void perr(parser *ps, ir_loc loc, const char *fmt, ...)
{
	if (ps->err)
		return; /* the first error is the one that matters */
	ps->err = true;
	va_list ap;
	va_start(ap, fmt);
	diag_verror(loc, fmt, ap);
	va_end(ap);
}

static ir_loc here(parser *ps)
{
	return (ir_loc){ps->src, ps->line, ps->col};
}

static void adv(parser *ps)
{
	ps->p++;
	ps->col++;
}

static bool is_word_char(char c)
{
	return c && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '=' &&
	       c != '{' && c != '}' && c != ';' && c != '"';
}

static void next(parser *ps)
{
	tok *t = &ps->t;
	for (;;) {
		while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r'))
			adv(ps);
		if (ps->p < ps->end && *ps->p == ';') /* comment to end of line */
			while (ps->p < ps->end && *ps->p != '\n')
				adv(ps);
		break;
	}
	t->loc = here(ps);
	t->s = ps->p;
	t->n = 0;
	if (ps->p >= ps->end) {
		t->kind = T_EOF;
		return;
	}
	char c = *ps->p;
	if (c == '\n') {
		t->kind = T_EOL;
		ps->p++;
		ps->line++;
		ps->col = 1;
		return;
	}
	if (c == '=' || c == '{' || c == '}') {
		t->kind = c == '=' ? T_EQ : c == '{' ? T_LBRACE : T_RBRACE;
		t->n = 1;
		adv(ps);
		return;
	}
	if (c == '"') {
		adv(ps);
		char *buf = arena_alloc(ps->m->arena, (size_t)(ps->end - ps->p) + 1);
		int n = 0;
		for (;;) {
			if (ps->p >= ps->end || *ps->p == '\n') {
				perr(ps, t->loc, "unterminated string");
				t->kind = T_EOF;
				return;
			}
			char ch = *ps->p;
			if (ch == '"') {
				adv(ps);
				break;
			}
			if (ch == '\\') {
				ir_loc eloc = here(ps);
				adv(ps);
				char e = ps->p < ps->end ? *ps->p : 0;
				if (e == '"' || e == '\\') {
					buf[n++] = e;
					adv(ps);
				} else if (e == 'x' && ps->end - ps->p >= 3 &&
				           strchr("0123456789abcdef", ps->p[1]) && ps->p[1] &&
				           strchr("0123456789abcdef", ps->p[2]) && ps->p[2]) {
					char hex[3] = {ps->p[1], ps->p[2], 0};
					int v = (int)strtol(hex, NULL, 16);
					if (v == 0) {
						perr(ps, eloc, "NUL byte in string");
						t->kind = T_EOF;
						return;
					}
					buf[n++] = (char)v;
					adv(ps), adv(ps), adv(ps);
				} else {
					perr(ps, eloc, "bad escape in string; expected \\\", \\\\ or \\xHH");
					t->kind = T_EOF;
					return;
				}
				continue;
			}
			buf[n++] = ch;
			adv(ps);
		}
		buf[n] = 0;
		t->kind = T_STR;
		t->s = buf;
		t->n = n;
		return;
	}
	while (ps->p < ps->end && is_word_char(*ps->p))
		adv(ps);
	t->kind = T_WORD;
	t->n = (int)(ps->p - t->s);
}

static bool word_is(const tok *t, const char *w)
{
	return t->kind == T_WORD && (int)strlen(w) == t->n && memcmp(t->s, w, (size_t)t->n) == 0;
}

static const char *tok_desc(parser *ps, const tok *t)
{
	switch (t->kind) {
	case T_EOL: return "end of line";
	case T_EOF: return "end of file";
	case T_STR: return "a string";
	case T_EQ: return "'='";
	case T_LBRACE: return "'{'";
	case T_RBRACE: return "'}'";
	case T_WORD: break;
	}
	return arena_printf(ps->m->arena, "'%.*s'", t->n > 40 ? 40 : t->n, t->s);
}

static void skip_blank_lines(parser *ps)
{
	while (ps->t.kind == T_EOL)
		next(ps);
}

static void expect_eol(parser *ps)
{
	if (ps->t.kind != T_EOL && ps->t.kind != T_EOF)
		perr(ps, ps->t.loc, "expected end of line, got %s", tok_desc(ps, &ps->t));
	else
		next(ps);
}

/* ---- numbers ---------------------------------------------------------- */

/* The text of a token as a NUL-terminated arena string. */
static char *tok_str(parser *ps, const tok *t)
{
	return arena_strndup(ps->m->arena, t->s, (size_t)t->n);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	if (!*s || (*s != '-' && (*s < '0' || *s > '9')))
		return false;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (*end || errno || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	if (!*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno)
		return false;
	*out = v;
	return true;
}

static bool parse_f64(const char *s, const char *unit, double *out)
{
	size_t n = strlen(s), u = strlen(unit);
	if (n <= u || strcmp(s + n - u, unit) != 0)
		return false;
	char buf[128];
	if (n - u >= sizeof buf)
		return false;
	memcpy(buf, s, n - u);
	buf[n - u] = 0;
	if (!strchr("0123456789-.", buf[0]))
		return false;
	errno = 0;
	char *end;
	double v = strtod(buf, &end);
	if (*end || errno == ERANGE || !isfinite(v))
		return false;
	*out = v;
	return true;
}

/* A bandwidth: a positive finite number, or "inf" (the ideal preset). */
static bool parse_rate(const char *s, double *out)
{
	if (strcmp(s, "inf") == 0) {
		*out = INFINITY;
		return true;
	}
	return parse_f64(s, "", out);
}

bool ir_parse_bytes(const char *s, uint64_t *out)
{
	static const struct { const char *sfx; int shift; } sf[] = {
	    {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}};
	if (strcmp(s, "unlimited") == 0) { /* UINT64_MAX, as ir_fmt_bytes writes it */
		*out = UINT64_MAX;
		return true;
	}
	size_t n = strlen(s);
	for (size_t i = 0; i < sizeof sf / sizeof *sf; i++) {
		size_t k = strlen(sf[i].sfx);
		if (n > k && strcmp(s + n - k, sf[i].sfx) == 0) {
			char buf[32];
			if (n - k >= sizeof buf)
				return false;
			memcpy(buf, s, n - k);
			buf[n - k] = 0;
			uint64_t v;
			if (!parse_u64(buf, &v) || v > (UINT64_MAX >> sf[i].shift))
				return false;
			*out = v << sf[i].shift;
			return true;
		}
	}
	return false;
}

/* ---- key=value fields ------------------------------------------------- */

typedef struct field {
	const char *key;
	char *val;     /* text of the value (string fields: unescaped) */
	bool is_str;
	ir_loc kloc, vloc;
	bool used;
} field;

typedef struct fields {
	field f[64];
	int n;
	ir_loc end; /* where the line ended, for "missing field" errors */
} fields;

/* Read key=value pairs to the end of the line. */
static void read_fields(parser *ps, fields *fs)
{
	fs->n = 0;
	while (!ps->err && ps->t.kind == T_WORD) {
		if (fs->n == (int)(sizeof fs->f / sizeof *fs->f)) {
			perr(ps, ps->t.loc, "too many fields on one line");
			return;
		}
		field *f = &fs->f[fs->n];
		f->key = tok_str(ps, &ps->t);
		f->kloc = ps->t.loc;
		f->used = false;
		for (int i = 0; i < fs->n; i++)
			if (strcmp(fs->f[i].key, f->key) == 0) {
				perr(ps, f->kloc, "duplicate field '%s'", f->key);
				return;
			}
		next(ps);
		if (ps->t.kind != T_EQ) {
			perr(ps, ps->t.loc, "expected '=' after '%s', got %s", f->key,
			     tok_desc(ps, &ps->t));
			return;
		}
		next(ps);
		if (ps->t.kind != T_WORD && ps->t.kind != T_STR) {
			perr(ps, ps->t.loc, "expected a value for '%s', got %s", f->key,
			     tok_desc(ps, &ps->t));
			return;
		}
		f->is_str = ps->t.kind == T_STR;
		f->val = f->is_str ? (char *)ps->t.s : tok_str(ps, &ps->t);
		f->vloc = ps->t.loc;
		fs->n++;
		next(ps);
	}
	fs->end = ps->t.loc;
	if (!ps->err && ps->t.kind != T_EOL && ps->t.kind != T_EOF)
		perr(ps, ps->t.loc, "expected 'key=value', got %s", tok_desc(ps, &ps->t));
}

/* The field `key`, marked used; a string value is an error unless
 * str_ok. */
static field *find(parser *ps, fields *fs, const char *key, bool required, const char *what,
                   bool str_ok)
{
	for (int i = 0; i < fs->n; i++)
		if (strcmp(fs->f[i].key, key) == 0) {
			fs->f[i].used = true;
			if (fs->f[i].is_str && !str_ok) {
				perr(ps, fs->f[i].vloc, "'%s' takes a number or a name, not a string", key);
				return NULL;
			}
			return &fs->f[i];
		}
	if (required)
		perr(ps, fs->end, "missing field '%s' in %s", key, what);
	return NULL;
}

static field *get(parser *ps, fields *fs, const char *key, bool required, const char *what)
{
	return find(ps, fs, key, required, what, false);
}

/* Report the first field nobody asked for, with a suggestion. */
static void check_unused(parser *ps, fields *fs, const char *what,
                         const char *const *known, int nknown)
{
	for (int i = 0; i < fs->n && !ps->err; i++) {
		if (fs->f[i].used)
			continue;
		const char *near = diag_nearest(fs->f[i].key, known, nknown);
		if (near)
			perr(ps, fs->f[i].kloc, "unknown field '%s' in %s; did you mean '%s'?",
			     fs->f[i].key, what, near);
		else
			perr(ps, fs->f[i].kloc, "unknown field '%s' in %s", fs->f[i].key, what);
	}
}

static void get_i64(parser *ps, fields *fs, const char *key, int64_t lo,
                    int64_t hi, int64_t *out, const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (f && !parse_i64(f->val, lo, hi, out))
		perr(ps, f->vloc, "'%s' must be an integer in %lld..%lld, got '%s'", key,
		     (long long)lo, (long long)hi, f->val);
}

static void get_f64(parser *ps, fields *fs, const char *key, const char *unit,
                    double *out, const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (f && !parse_f64(f->val, unit, out))
		perr(ps, f->vloc, "'%s' must be a finite number%s%s, got '%s'", key,
		     *unit ? " with unit " : "", unit, f->val);
}

static void get_bytes(parser *ps, fields *fs, const char *key, uint64_t *out,
                      const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (f && !ir_parse_bytes(f->val, out))
		perr(ps, f->vloc, "'%s' must be a byte count such as 512B, 4KiB or 2GiB, got '%s'",
		     key, f->val);
}

static int get_enum(parser *ps, fields *fs, const char *key,
                    const char *const *names, int n, const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (!f)
		return 0;
	int v = ir_lookup(names, n, f->val);
	if (v < 0) {
		const char *near = diag_nearest(f->val, names, n);
		if (near)
			perr(ps, f->vloc, "unknown %s '%s'; did you mean '%s'?", key, f->val, near);
		else
			perr(ps, f->vloc, "unknown %s '%s'", key, f->val);
		return 0;
	}
	return v;
}

static void get_link(parser *ps, fields *fs, const char *key, ir_link *out, const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (!f)
		return;
	char *slash = strchr(f->val, '/');
	if (slash) {
		*slash = 0;
		bool ok = parse_rate(f->val, &out->bw) && parse_f64(slash + 1, "us", &out->lat);
		*slash = '/';
		if (ok)
			return;
	}
	perr(ps, f->vloc, "'%s' must be BANDWIDTH/LATENCYus (bytes/s and microseconds), got '%s'",
	     key, f->val);
}

static void get_list(parser *ps, fields *fs, const char *key, int64_t lo, int64_t hi,
                     int64_t **out, int *n, const char *what)
{
	field *f = get(ps, fs, key, true, what);
	if (!f)
		return;
	int cap = 0;
	for (char *s = f->val;;) {
		char *comma = strchr(s, ',');
		if (comma)
			*comma = 0;
		int64_t v;
		if (!parse_i64(s, lo, hi, &v)) {
			perr(ps, f->vloc, "'%s' must be a comma-separated list of integers, got '%s'",
			     key, s);
			return;
		}
		*VEC_PUSH(ps->m->arena, *out, *n, cap) = v;
		if (!comma)
			break;
		s = comma + 1;
	}
}

/* ---- lines ------------------------------------------------------------ */

#define N(a) (int)(sizeof a / sizeof *a)

/* keyword [STRING] fields EOL; the keyword is the current token. */
static bool begin_line(parser *ps, const char *kw, const char **name, fields *fs)
{
	skip_blank_lines(ps);
	if (ps->err)
		return false;
	if (!word_is(&ps->t, kw)) {
		perr(ps, ps->t.loc, "expected '%s' line, got %s", kw, tok_desc(ps, &ps->t));
		return false;
	}
	next(ps);
	if (name) {
		if (ps->t.kind != T_STR) {
			perr(ps, ps->t.loc, "expected a quoted name after '%s', got %s", kw,
			     tok_desc(ps, &ps->t));
			return false;
		}
		*name = ps->t.s;
		next(ps);
	}
	read_fields(ps, fs);
	return !ps->err;
}

static void parse_header(parser *ps)
{
	skip_blank_lines(ps);
	if (!word_is(&ps->t, "octopipe-ir")) {
		perr(ps, ps->t.loc, "expected 'octopipe-ir %d' header, got %s", IR_VERSION,
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	char *v = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : "";
	int64_t ver;
	if (!parse_i64(v, 0, INT32_MAX, &ver) || ver != IR_VERSION) {
		perr(ps, ps->t.loc, "unsupported IR version %s; this octopipe reads version %d",
		     *v ? v : tok_desc(ps, &ps->t), IR_VERSION);
		return;
	}
	next(ps);
	expect_eol(ps);
}

/* Read field f of a header line into its struct at base. */
static void parse_hfield(parser *ps, fields *fs, const ir_hfield *f, char *base, const char *what)
{
	void *p = base + f->off;
	field *x;
	switch (f->type) {
	case IR_HF_NAME:
		return; /* begin_line read it */
	case IR_HF_INT:
		get_i64(ps, fs, f->key, f->lo, f->hi, p, what);
		return;
	case IR_HF_U64:
		x = get(ps, fs, f->key, true, what);
		if (x && !parse_u64(x->val, p))
			perr(ps, x->vloc, "'%s' must be an unsigned integer, got '%s'", f->key, x->val);
		return;
	case IR_HF_ENUM:
		*(int *)p = get_enum(ps, fs, f->key, f->names, f->nnames, what);
		return;
	case IR_HF_F64:
		get_f64(ps, fs, f->key, "", p, what);
		return;
	case IR_HF_US:
		get_f64(ps, fs, f->key, "us", p, what);
		return;
	case IR_HF_BYTES:
		get_bytes(ps, fs, f->key, p, what);
		return;
	case IR_HF_RATE:
		x = get(ps, fs, f->key, true, what);
		if (x && !parse_rate(x->val, p))
			perr(ps, x->vloc, "'%s' must be a finite number or inf, got '%s'", f->key, x->val);
		return;
	case IR_HF_STR:
		x = find(ps, fs, f->key, true, what, true);
		if (x) {
			if (!x->is_str)
				perr(ps, x->vloc, "'%s' must be a quoted path", f->key);
			*(const char **)p = x->val;
		}
		return;
	case IR_HF_LINK:
		get_link(ps, fs, f->key, p, what);
		return;
	case IR_HF_LIST:
		get_list(ps, fs, f->key, f->lo, f->hi, p, (int *)(base + f->count), what);
		return;
	}
	ir_bug("header field '%s' of unknown type %d", f->key, (int)f->type);
}

/* Is any field of an optional group written?  (Asked in the table's
 * order, up to the first that is.) */
static bool group_given(parser *ps, fields *fs, const ir_hline *h, int group)
{
	for (int i = 0; i < h->nfields; i++) {
		const ir_hfield *f = &h->fields[i];
		if (f->group == group && find(ps, fs, f->key, false, h->keyword, f->type == IR_HF_STR))
			return true;
	}
	return false;
}

/* keyword [STRING] key=value... EOL, as ir.h's table of the line says. */
static void parse_hline(parser *ps, const ir_hline *h)
{
	fields fs;
	ir_module *m = ps->m;
	char *base = (char *)m + h->off;
	const char **name = NULL;
	const char *known[32];
	int nknown = 0;
	*(ir_loc *)((char *)m + h->loc) = ps->t.loc;
	for (int i = 0; i < h->nfields; i++)
		if (h->fields[i].type == IR_HF_NAME)
			name = (const char **)(base + h->fields[i].off);
		else if (nknown < N(known))
			known[nknown++] = h->fields[i].key;
	if (!begin_line(ps, h->keyword, name, &fs))
		return;
	for (int i = 0; i < h->nfields; i++) {
		const ir_hfield *f = &h->fields[i];
		if (f->group && !group_given(ps, &fs, h, f->group))
			continue;
		parse_hfield(ps, &fs, f, base, h->keyword);
		field *at = f->at ? find(ps, &fs, f->key, false, h->keyword, true) : NULL;
		if (at) /* errors about the value point here */
			*(ir_loc *)((char *)m + f->at) = at->kloc;
	}
	check_unused(ps, &fs, h->keyword, known, nknown);
	expect_eol(ps);
}

/* An "X<digits>" reference such as L3, S0, D1, m7; expect_idx is the
 * index the text must carry (sequential definitions), or -1. */
static bool ref(parser *ps, const tok *t, char prefix, int *out, const char *what)
{
	int64_t v;
	if (t->kind != T_WORD || t->n < 2 || t->s[0] != prefix) {
		perr(ps, t->loc, "expected %s ('%c' and a number), got %s", what, prefix,
		     tok_desc(ps, t));
		return false;
	}
	char *s = tok_str(ps, t);
	if (s[1] == '-' || s[1] == '+' || (s[1] == '0' && s[2]) ||
	    !parse_i64(s + 1, 0, INT32_MAX - 1, &v)) {
		perr(ps, t->loc, "expected %s ('%c' and a number), got '%s'", what, prefix, s);
		return false;
	}
	*out = (int)v;
	return true;
}

static void parse_layer(parser *ps)
{
	ir_module *m = ps->m;
	ir_loc loc = ps->t.loc;
	next(ps);
	int idx;
	if (!ref(ps, &ps->t, 'L', &idx, "a layer name"))
		return;
	if (idx != m->nlayers) {
		perr(ps, ps->t.loc, "layer L%d out of order; expected L%d", idx, m->nlayers);
		return;
	}
	next(ps);
	char *kind = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	int k = kind ? ir_lookup(ir_layer_kind_names, IR_NLAYER_KINDS, kind) : -1;
	if (k < 0) {
		const char *near = kind ? diag_nearest(kind, ir_layer_kind_names, IR_NLAYER_KINDS) : NULL;
		if (near)
			perr(ps, ps->t.loc, "unknown layer kind '%s'; did you mean '%s'?", kind, near);
		else
			perr(ps, ps->t.loc, "expected a layer kind, got %s", tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	fields fs;
	read_fields(ps, &fs);
	if (ps->err)
		return;
	ir_layer *l = ir_add_layer(m, (ir_layer_kind)k, loc);
	const char *what = arena_printf(m->arena, "%s layer", ir_layer_kind_names[k]);

	/* The version decides which Mamba attributes exist: read it first. */
	field *vf = k == IR_LAYER_MAMBA || k == IR_LAYER_PARALLEL ? get(ps, &fs, "version", false, what) : NULL;
	if (vf && !parse_i64(vf->val, 1, 2, &l->attr[IR_ATTR_VERSION]))
		perr(ps, vf->vloc, "'version' must be 1 or 2, got '%s'", vf->val);
	const char *known[IR_NATTRS + 16];
	int nknown = 0;
	for (int a = 0; a < IR_NATTRS && !ps->err; a++) {
		if (!ir_attr_applies(a, l->kind, l->attr[IR_ATTR_VERSION]))
			continue;
		const ir_attr_info *ai = &ir_attr_table[a];
		known[nknown++] = ai->name;
		if (a == IR_ATTR_VERSION)
			continue;
		field *f = get(ps, &fs, ai->name, false, what);
		if (!f)
			continue;
		if (ai->type == IR_AT_ACT) {
			int v = ir_lookup(ir_act_names, IR_NACTS, f->val);
			if (v < 0)
				perr(ps, f->vloc, "unknown activation '%s'", f->val);
			l->attr[a] = v;
		} else if (ai->type == IR_AT_BOOL) {
			int v = ir_lookup(ir_switch_names, 2, f->val);
			if (v < 0)
				perr(ps, f->vloc, "'%s' must be on or off, got '%s'", ai->name, f->val);
			l->attr[a] = v;
		} else if (ai->type == IR_AT_REAL) {
			double v;
			if (!parse_f64(f->val, "", &v) || !(v > 0) || v < (double)ai->min ||
			    (ai->max > 0 && v > (double)ai->max)) {
				if (ai->max > 0 && ai->min > 0)
					perr(ps, f->vloc, "'%s' must be a finite number in %lld..%lld, got '%s'",
					     ai->name, (long long)ai->min, (long long)ai->max, f->val);
				else if (ai->max > 0)
					perr(ps, f->vloc, "'%s' must be a finite number > 0 and <= %lld, got '%s'",
					     ai->name, (long long)ai->max, f->val);
				else if (ai->min > 0)
					perr(ps, f->vloc, "'%s' must be a finite number >= %lld, got '%s'",
					     ai->name, (long long)ai->min, f->val);
				else
					perr(ps, f->vloc, "'%s' must be a finite number > 0, got '%s'",
					     ai->name, f->val);
			} else {
				l->attr[a] = ir_real_bits(v);
			}
		} else if (ai->type == IR_AT_ENUM) {
			int n;
			const char *const *names = ir_attr_enum_names(a, &n);
			/* The absent value (names[0]) is not written. */
			int v = ir_lookup(names + 1, n - 1, f->val);
			const char *near = v < 0 ? diag_nearest(f->val, names + 1, n - 1) : NULL;
			if (near)
				perr(ps, f->vloc, "unknown %s '%s'; did you mean '%s'?", ai->name, f->val, near);
			else if (v < 0)
				perr(ps, f->vloc, "unknown %s '%s'", ai->name, f->val);
			l->attr[a] = v + 1;
		} else if (!parse_i64(f->val, 0, INT64_MAX, &l->attr[a])) {
			perr(ps, f->vloc, "'%s' must be a non-negative integer, got '%s'",
			     ai->name, f->val);
		}
	}
	static const char *const cost_keys[] = {"f", "b", "w", "f_cold", "b_cold", "w_cold",
	                                        "flops", "act", "wstash", "params", "resident"};
	/* The field of each key (the three cold times are one). */
	static const ir_cost_field cost_key_field[] = {IR_CF_F, IR_CF_B, IR_CF_W, IR_CF_COLD,
	                                               IR_CF_COLD, IR_CF_COLD, IR_CF_FLOPS,
	                                               IR_CF_ACT, IR_CF_WSTASH, IR_CF_PARAMS,
	                                               IR_CF_RESIDENT};
	for (int i = 0; i < N(cost_keys); i++)
		known[nknown++] = cost_keys[i];
	known[nknown++] = "measured";
	known[nknown++] = "sel_f";
	known[nknown++] = "sel_act";
	/* measured=f,b,w,...: the fields a profile measured (ir_cost.measured). */
	field *mf = get(ps, &fs, "measured", false, what);
	bool has_measured = mf != NULL;
	for (const char *p = mf ? mf->val : ""; *p && !ps->err;) {
		size_t n = strcspn(p, ",");
		int fi = 0;
		while (fi < IR_NCOST_FIELDS && (strlen(ir_cost_field_names[fi]) != n ||
		                                strncmp(ir_cost_field_names[fi], p, n) != 0))
			fi++;
		if (fi == IR_NCOST_FIELDS || (l->cost.measured & (1u << fi)))
			perr(ps, mf->vloc, "'measured' lists the cost fields a profile measured, once each "
			                   "(f, b, w, cold, flops, act, wstash, params, resident), got '%s'",
			     mf->val);
		else
			l->cost.measured |= 1u << fi;
		p += n + (p[n] == ',');
	}
	/* Which fields the line holds: all of them (a known cost), or, where it
	 * says what was measured, those alone (a cost the cost pass is still to
	 * complete). */
	bool any_cost = false, outside = false;
	for (int i = 0; i < fs.n; i++)
		for (int j = 0; j < N(cost_keys); j++)
			if (strcmp(fs.f[i].key, cost_keys[j]) == 0) {
				any_cost = true;
				outside |= !(l->cost.measured & (1u << cost_key_field[j]));
			}
	if (has_measured && !ps->err && !outside && !ir_cost_complete(l->cost.measured)) {
		unsigned mk = l->cost.measured;
		if (mk & IR_CF_BIT(F))
			get_f64(ps, &fs, "f", "us", &l->cost.f, what);
		if (mk & IR_CF_BIT(B))
			get_f64(ps, &fs, "b", "us", &l->cost.b, what);
		if (mk & IR_CF_BIT(W))
			get_f64(ps, &fs, "w", "us", &l->cost.w, what);
		if (mk & IR_CF_BIT(COLD)) {
			l->cost.cold = true;
			get_f64(ps, &fs, "f_cold", "us", &l->cost.f_cold, what);
			get_f64(ps, &fs, "b_cold", "us", &l->cost.b_cold, what);
			get_f64(ps, &fs, "w_cold", "us", &l->cost.w_cold, what);
		}
		if (mk & IR_CF_BIT(FLOPS))
			get_f64(ps, &fs, "flops", "", &l->cost.flops, what);
		if (mk & IR_CF_BIT(ACT))
			get_bytes(ps, &fs, "act", &l->cost.act, what);
		if (mk & IR_CF_BIT(WSTASH))
			get_bytes(ps, &fs, "wstash", &l->cost.wstash, what);
		field *pf = mk & IR_CF_BIT(PARAMS) ? get(ps, &fs, "params", true, what) : NULL;
		if (pf && !parse_u64(pf->val, &l->cost.params))
			perr(ps, pf->vloc, "'params' must be an unsigned integer, got '%s'", pf->val);
		if (mk & IR_CF_BIT(RESIDENT))
			get_bytes(ps, &fs, "resident", &l->cost.resident, what);
	} else if ((any_cost || has_measured) && !ps->err) {
		l->cost.known = true;
		get_f64(ps, &fs, "f", "us", &l->cost.f, what);
		get_f64(ps, &fs, "b", "us", &l->cost.b, what);
		get_f64(ps, &fs, "w", "us", &l->cost.w, what);
		/* The cold times come as a set of three, or not at all. */
		l->cost.cold = get(ps, &fs, "f_cold", false, what) || get(ps, &fs, "b_cold", false, what) ||
		               get(ps, &fs, "w_cold", false, what);
		if (l->cost.cold) {
			get_f64(ps, &fs, "f_cold", "us", &l->cost.f_cold, what);
			get_f64(ps, &fs, "b_cold", "us", &l->cost.b_cold, what);
			get_f64(ps, &fs, "w_cold", "us", &l->cost.w_cold, what);
		}
		if ((l->cost.measured & IR_CF_BIT(COLD)) && !l->cost.cold)
			perr(ps, mf->vloc, "'measured' says the cold times were measured, but the layer has "
			                   "no f_cold, b_cold and w_cold");
		get_f64(ps, &fs, "flops", "", &l->cost.flops, what);
		get_bytes(ps, &fs, "act", &l->cost.act, what);
		get_bytes(ps, &fs, "wstash", &l->cost.wstash, what);
		field *pf = get(ps, &fs, "params", true, what);
		if (pf && !parse_u64(pf->val, &l->cost.params))
			perr(ps, pf->vloc, "'params' must be an unsigned integer, got '%s'", pf->val);
		get_bytes(ps, &fs, "resident", &l->cost.resident, what);
		/* Selective recomputation's: absent is 0. */
		if (get(ps, &fs, "sel_f", false, what))
			get_f64(ps, &fs, "sel_f", "us", &l->cost.sel_f, what);
		if (get(ps, &fs, "sel_act", false, what))
			get_bytes(ps, &fs, "sel_act", &l->cost.sel_act, what);
	}
	check_unused(ps, &fs, what, known, nknown);
	expect_eol(ps);
}

/* 'L'FIRST'..L'LAST, one word; false after a diagnostic. */
static bool layer_range(parser *ps, int *first, int *last)
{
	tok range = ps->t;
	char *s = range.kind == T_WORD ? tok_str(ps, &range) : NULL;
	char *dots = s ? strstr(s, "..") : NULL;
	if (!dots) {
		perr(ps, range.loc, "expected a layer range 'Lfirst..Llast', got %s",
		     tok_desc(ps, &range));
		return false;
	}
	tok a = range, b = range;
	a.n = (int)(dots - s);
	b.s = range.s + a.n + 2;
	b.n = range.n - a.n - 2;
	b.loc.col += a.n + 2;
	if (!ref(ps, &a, 'L', first, "a layer") || !ref(ps, &b, 'L', last, "a layer"))
		return false;
	next(ps);
	return true;
}

static void parse_stage(parser *ps)
{
	ir_module *m = ps->m;
	ir_loc loc = ps->t.loc;
	next(ps);
	int idx, first, last, dev;
	if (!ref(ps, &ps->t, 'S', &idx, "a stage name"))
		return;
	if (idx != m->nstages) {
		perr(ps, ps->t.loc, "stage S%d out of order; expected S%d", idx, m->nstages);
		return;
	}
	next(ps);
	if (!layer_range(ps, &first, &last))
		return;
	dev = -1; /* not placed yet */
	if (ps->t.kind == T_WORD && ps->t.s[0] == '@') {
		tok d = ps->t;
		d.s++, d.n--, d.loc.col++;
		if (!ref(ps, &d, 'D', &dev, "a device"))
			return;
		next(ps);
	}
	/* ['recompute='MODE]: absent is none, whatever the plan's default */
	static const char *const known[] = {"recompute"};
	fields fs;
	read_fields(ps, &fs);
	if (ps->err)
		return;
	int rc = IR_RECOMP_NONE;
	if (get(ps, &fs, "recompute", false, "a stage"))
		rc = get_enum(ps, &fs, "recompute", ir_recompute_names, IR_NRECOMPUTES, "a stage");
	check_unused(ps, &fs, "a stage", known, 1);
	if (ps->err)
		return;
	ir_add_stage(m, first, last, dev, loc)->recompute = (ir_recompute)rc;
	expect_eol(ps);
}

/* value := act | grad, after the word `after`; false after a diagnostic. */
static bool parse_value(parser *ps, const char *after, ir_op_kind *out)
{
	char *v = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	int vk = v ? ir_lookup(ir_value_names, IR_OP_W, v) : -1;
	if (vk < 0) {
		perr(ps, ps->t.loc, "expected 'act' or 'grad' after '%s', got %s", after,
		     tok_desc(ps, &ps->t));
		return false;
	}
	*out = (ir_op_kind)vk;
	next(ps);
	return true;
}

/* 'S'STAGE 'm'MB: the op a value or an op names. */
static bool stage_mb(parser *ps, int *stage, int *mb)
{
	if (!ref(ps, &ps->t, 'S', stage, "a stage"))
		return false;
	next(ps);
	if (!ref(ps, &ps->t, 'm', mb, "a micro-batch"))
		return false;
	next(ps);
	return true;
}

/* A collective's name after `wait`: its comm kind, or NONE (then the
 * wait is a receive's).  Reads nothing when it is not one. */
static ir_comm coll_word(parser *ps)
{
	char *v = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	int c = v ? ir_lookup(ir_comm_names, IR_NCOMMS, v) : -1;
	if (c < IR_COMM_ALLREDUCE || c == IR_COMM_UPDATE)
		return IR_COMM_NONE;
	next(ps);
	return (ir_comm)c;
}

/* The rest of a data-parallel op (docs/dataparallel.md), after its word:
 *   (all-reduce|reduce-scatter|all-gather) S b L..L BYTES
 *   update S b L..L
 *   wait (all-reduce|reduce-scatter|all-gather) S b ['carried']
 * and the tied embeddings' (docs/ir.md, "Tied embeddings"):
 *   tie S L D BYTES
 *   wait tie S */
static bool parse_dp_op(parser *ps, ir_op *op)
{
	if (!ref(ps, &ps->t, 'S', &op->stage, "a stage"))
		return false;
	next(ps);
	if (ir_is_tie_op(op)) {
		/* tie S L BYTES | wait tie S */
		if (op->comm == IR_COMM_WAIT)
			return true;
		if (!ref(ps, &ps->t, 'L', &op->first, "the tied layer"))
			return false;
		op->last = op->first;
		next(ps);
		if (!ref(ps, &ps->t, 'D', &op->peer, "the device of the other copy"))
			return false;
		next(ps);
		goto bytes;
	}
	if (!ref(ps, &ps->t, 'b', &op->mb, "a bucket"))
		return false;
	next(ps);
	if (op->comm == IR_COMM_WAIT) {
		if (word_is(&ps->t, "carried")) {
			op->carried = true;
			next(ps);
		}
		return true;
	}
	if (!layer_range(ps, &op->first, &op->last))
		return false;
	if (op->comm == IR_COMM_UPDATE)
		return true;
bytes:;
	char *b = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : "";
	if (!ir_parse_bytes(b, &op->bytes)) {
		perr(ps, ps->t.loc, "expected a byte count such as 32KiB, got %s", tok_desc(ps, &ps->t));
		return false;
	}
	next(ps);
	return true;
}

/* op := (F|B|W) S m
 *     | (send|recv) (act|grad) S m D BYTES
 *     | wait (act|grad) S m
 *     | a data-parallel op (parse_dp_op) */
static void parse_op(parser *ps, int dev, int group)
{
	ir_loc loc = ps->t.loc;
	char *w = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	ir_op op = {0};
	int k = w ? ir_lookup(ir_op_names, IR_NOPS, w) : -1;
	int c = w && k < 0 ? ir_lookup(ir_comm_names + 1, IR_NCOMMS - 1, w) + 1 : 0;
	if (k < 0 && c <= 0) {
		perr(ps, loc, "expected an op (F, B, W, send, recv, wait, all-reduce, reduce-scatter, "
		              "all-gather, update, tie, group) or '}', got %s",
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	op.comm = (ir_comm)c;
	op.kind = (ir_op_kind)k;
	if (c == IR_COMM_WAIT)
		op.coll = coll_word(ps);
	if (c >= IR_COMM_ALLREDUCE || op.coll != IR_COMM_NONE) {
		op.kind = IR_OP_W;
		if (group) {
			perr(ps, loc, "a group holds only sends and receives");
			return;
		}
		if (!parse_dp_op(ps, &op))
			return;
		ir_push_op(ps->m, dev, &op, loc);
		expect_eol(ps);
		return;
	}
	if (c && !parse_value(ps, w, &op.kind))
		return;
	if (group && op.comm != IR_COMM_SEND && op.comm != IR_COMM_RECV) {
		perr(ps, loc, "a group holds only sends and receives");
		return;
	}
	if (!stage_mb(ps, &op.stage, &op.mb))
		return;
	if (op.comm == IR_COMM_SEND || op.comm == IR_COMM_RECV) {
		if (!ref(ps, &ps->t, 'D', &op.peer, "the peer device"))
			return;
		next(ps);
		char *b = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : "";
		if (!ir_parse_bytes(b, &op.bytes)) {
			perr(ps, ps->t.loc, "expected a byte count such as 32KiB, got %s", tok_desc(ps, &ps->t));
			return;
		}
		next(ps);
		op.group = group;
	}
	ir_push_op(ps->m, dev, &op, loc);
	expect_eol(ps);
}

/* proof BACKEND steps=N order=HEX */
static void parse_proof(parser *ps)
{
	ir_proof *pr = &ps->m->proof;
	next(ps);
	char *b = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	int be = b ? ir_lookup(ir_backend_names, IR_NBACKENDS, b) : -1;
	if (be < 0) {
		perr(ps, ps->t.loc, "expected a backend (nccl, mpi) after 'proof', got %s",
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	fields fs;
	read_fields(ps, &fs);
	if (ps->err)
		return;
	get_i64(ps, &fs, "steps", 0, INT64_MAX, &pr->steps, "proof");
	field *f = get(ps, &fs, "order", true, "proof");
	if (f) {
		char *end;
		errno = 0;
		pr->order = strtoull(f->val, &end, 16);
		if (*end || errno || strlen(f->val) != 16)
			perr(ps, f->vloc, "'order' must be 16 hex digits, got '%s'", f->val);
	}
	static const char *const keys[] = {"steps", "order"};
	check_unused(ps, &fs, "proof", keys, N(keys));
	pr->backend = (ir_backend)be;
	pr->proven = true;
	expect_eol(ps);
}

/* live=FIRST..LAST: op positions. */
static bool parse_live(const char *v, int *first, int *last)
{
	const char *dots = strstr(v, "..");
	if (!dots || dots == v)
		return false;
	char buf[32];
	size_t n = (size_t)(dots - v);
	if (n >= sizeof buf)
		return false;
	memcpy(buf, v, n);
	buf[n] = 0;
	int64_t a, b;
	if (!parse_i64(buf, 0, INT32_MAX, &a) || !parse_i64(dots + 2, 0, INT32_MAX, &b))
		return false;
	*first = (int)a, *last = (int)b;
	return true;
}

/* buf := (act | recomp | wstash) S m FIELDS | (recv | send | pass) (act | grad) S m FIELDS
 * FIELDS := off=BYTES size=BYTES live=FIRST..LAST */
static void parse_buf(parser *ps, int dev)
{
	ir_loc loc = ps->t.loc;
	char *w = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : NULL;
	int k = w ? ir_lookup(ir_buf_names, IR_NBUFS, w) : -1;
	if (k < 0) {
		perr(ps, loc, "expected a buffer (act, recomp, wstash, recv, send, pass, bucket) or '}', got %s",
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	ir_buf b = {.kind = (ir_buf_kind)k, .value = IR_OP_F};
	if (k == IR_BUF_BUCKET) {
		b.value = IR_OP_W;
		b.coll = coll_word(ps);
		if (b.coll == IR_COMM_NONE) {
			perr(ps, ps->t.loc, "expected a collective (all-reduce, reduce-scatter, all-gather) "
			                    "after 'bucket', got %s", tok_desc(ps, &ps->t));
			return;
		}
		if (!ref(ps, &ps->t, 'S', &b.stage, "a stage"))
			return;
		next(ps);
		if (!ref(ps, &ps->t, 'b', &b.mb, "a bucket"))
			return;
		next(ps);
	} else if (!ir_buf_is_stash(k) && !parse_value(ps, w, &b.value)) {
		return;
	} else if (!stage_mb(ps, &b.stage, &b.mb)) {
		return;
	}
	fields fs;
	read_fields(ps, &fs);
	if (ps->err)
		return;
	const char *what = "memplan buffer";
	get_bytes(ps, &fs, "off", &b.off, what);
	get_bytes(ps, &fs, "size", &b.size, what);
	field *f = get(ps, &fs, "live", true, what);
	if (f && !parse_live(f->val, &b.first, &b.last))
		perr(ps, f->vloc, "'live' must be FIRST..LAST (op positions in the program), got '%s'",
		     f->val);
	static const char *const keys[] = {"off", "size", "live"};
	check_unused(ps, &fs, what, keys, N(keys));
	if (ps->err)
		return;
	ir_add_buf(ps->m, dev, &b, loc);
	expect_eol(ps);
}

/* '{' EOL, which opens a block after `after` (named in the error). */
static bool open_block(parser *ps, const char *after)
{
	if (ps->t.kind != T_LBRACE) {
		perr(ps, ps->t.loc, "expected '{' after %s, got %s", after, tok_desc(ps, &ps->t));
		return false;
	}
	next(ps);
	expect_eol(ps);
	return !ps->err;
}

/* memplan := 'memplan' D 'arena='BYTES '{' EOL buf* '}' */
static void parse_memplan(parser *ps, int expect)
{
	ir_module *m = ps->m;
	next(ps);
	int idx;
	if (!ref(ps, &ps->t, 'D', &idx, "a device name"))
		return;
	if (idx != expect || idx >= m->ndevices) {
		perr(ps, ps->t.loc, idx >= m->ndevices ? "memplan D%d: the module has %d devices"
		                                       : "memplan D%d out of order; expected D%d",
		     idx, idx >= m->ndevices ? m->ndevices : expect);
		return;
	}
	next(ps);
	if (!word_is(&ps->t, "arena")) {
		perr(ps, ps->t.loc, "expected 'arena=BYTES' after memplan D%d, got %s", idx,
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	if (ps->t.kind != T_EQ) {
		perr(ps, ps->t.loc, "expected '=' after 'arena', got %s", tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	char *v = ps->t.kind == T_WORD ? tok_str(ps, &ps->t) : "";
	if (!ir_parse_bytes(v, &m->memplan[idx].arena)) {
		perr(ps, ps->t.loc, "'arena' must be a byte count such as 512B, 4KiB or 2GiB, got %s",
		     tok_desc(ps, &ps->t));
		return;
	}
	next(ps);
	if (!open_block(ps, "the arena size"))
		return;
	for (;;) {
		skip_blank_lines(ps);
		if (ps->err)
			return;
		if (ps->t.kind == T_RBRACE) {
			next(ps);
			expect_eol(ps);
			return;
		}
		if (ps->t.kind == T_EOF) {
			perr(ps, ps->t.loc, "expected '}' to close memplan D%d", idx);
			return;
		}
		parse_buf(ps, idx);
	}
}

static void parse_device(parser *ps, int expect)
{
	ir_module *m = ps->m;
	next(ps);
	int idx;
	if (!ref(ps, &ps->t, 'D', &idx, "a device name"))
		return;
	if (idx != expect) {
		perr(ps, ps->t.loc, "device D%d out of order; expected D%d", idx, expect);
		return;
	}
	if (idx >= m->ndevices) {
		perr(ps, ps->t.loc, "device D%d does not exist: the cluster has %d device%s",
		     idx, m->ndevices, m->ndevices == 1 ? "" : "s");
		return;
	}
	next(ps);
	if (!open_block(ps, "device name"))
		return;
	int group = 0, ngroups = 0;
	ir_loc group_loc = {0};
	for (;;) {
		skip_blank_lines(ps);
		if (ps->err)
			return;
		if (ps->t.kind == T_RBRACE) {
			if (group && m->devices[idx].nops && m->devices[idx].ops[m->devices[idx].nops - 1].group != group) {
				perr(ps, group_loc, "empty group");
				return;
			}
			next(ps);
			expect_eol(ps);
			if (group) {
				group = 0;
				continue;
			}
			return;
		}
		if (ps->t.kind == T_EOF) {
			perr(ps, group ? group_loc : ps->t.loc, group ? "expected '}' to close the group"
			                                         : "expected '}' to close device D%d", idx);
			return;
		}
		if (word_is(&ps->t, "group")) {
			if (group) {
				perr(ps, ps->t.loc, "groups do not nest");
				return;
			}
			group_loc = ps->t.loc;
			next(ps);
			if (!open_block(ps, "'group'"))
				return;
			group = ++ngroups;
			continue;
		}
		parse_op(ps, idx, group);
	}
}

ir_module *ir_parse(const src_file *src)
{
	parser ps = {.src = src, .p = src->text, .end = src->text + src->len,
	             .line = 1, .col = 1};
	ps.m = ir_new();
	ps.m->loc = (ir_loc){src, 1, 1};
	next(&ps);
	parse_header(&ps);
	for (int i = 0; i < IR_NHLINES; i++)
		parse_hline(&ps, &ir_hlines[i]);
	int ndev = 0, nplan = 0;
	for (;;) {
		skip_blank_lines(&ps);
		if (ps.err || ps.t.kind == T_EOF)
			break;
		if (word_is(&ps.t, "layer")) {
			if (ps.m->nstages || ndev) {
				perr(&ps, ps.t.loc, "'layer' lines must come before stages and devices");
				break;
			}
			parse_layer(&ps);
		} else if (word_is(&ps.t, "stage")) {
			if (ndev) {
				perr(&ps, ps.t.loc, "'stage' lines must come before devices");
				break;
			}
			parse_stage(&ps);
		} else if (word_is(&ps.t, "device")) {
			if (ps.m->proof.proven) {
				perr(&ps, ps.t.loc, "'device' blocks must come before the proof");
				break;
			}
			if (!ndev)
				ir_alloc_devices(ps.m);
			parse_device(&ps, ndev++);
		} else if (word_is(&ps.t, "proof")) {
			if (!ndev || ps.m->proof.proven) {
				perr(&ps, ps.t.loc, ndev ? "a second proof" : "a proof needs device programs");
				break;
			}
			parse_proof(&ps);
		} else if (word_is(&ps.t, "memplan")) {
			if (!ps.m->proof.proven) {
				perr(&ps, ps.t.loc, "a memory plan needs the device programs and their proof before it");
				break;
			}
			if (!nplan)
				ir_alloc_memplan(ps.m);
			parse_memplan(&ps, nplan++);
		} else {
			perr(&ps, ps.t.loc, "expected 'layer', 'stage', 'device', 'proof' or 'memplan', got %s",
			     tok_desc(&ps, &ps.t));
		}
	}
	if (!ps.err && ndev && ndev != ps.m->ndevices)
		perr(&ps, ps.t.loc, "expected a program for each of the %d devices, got %d",
		     ps.m->ndevices, ndev);
	if (!ps.err && nplan && nplan != ps.m->ndevices)
		perr(&ps, ps.t.loc, "expected a memory plan for each of the %d devices, got %d",
		     ps.m->ndevices, nplan);
	if (ps.err) {
		ir_free(ps.m);
		return NULL;
	}
	return ps.m;
}
