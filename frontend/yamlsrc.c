/* yamlsrc.c: locations, message helpers, numbers and paths for the
 * frontend's YAML readers, and the event reader of the profiles
 * (yamlsrc.h). */
#include "yamlsrc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SHOW_MAX = 40 }; /* longest user value echoed in a message */

/* ---- locations ---------------------------------------------------------- */

void ysrc_init(ysrc *y, arena *a, const src_file *src)
{
	const char *t = src->text;
	size_t n = src->len, count = 1;
	*y = (ysrc){.src = src, .ascii = true, .cline = (size_t)-1};
	for (size_t i = 0; i < n; i++) {
		count += t[i] == '\n';
		if ((unsigned char)t[i] >= 0x80)
			y->ascii = false;
	}
	y->line_start = arena_alloc(a, count * sizeof *y->line_start);
	y->line_start[y->nlines++] = 0;
	for (size_t i = 0; i < n; i++)
		if (t[i] == '\n')
			y->line_start[y->nlines++] = i + 1;
}

ir_loc ysrc_mark_loc(ysrc *y, yaml_mark_t mk)
{
	size_t line = mk.line < y->nlines ? mk.line : y->nlines - 1;
	size_t ls = y->line_start[line], byte;
	size_t le = line + 1 < y->nlines ? y->line_start[line + 1] : y->src->len;
	if (y->ascii) {
		byte = ls + (mk.column < le - ls ? mk.column : le - ls);
	} else {
		const unsigned char *t = (const unsigned char *)y->src->text;
		size_t c = 0, b = ls;
		if (line == 0 && y->src->len >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0)
			b = 3; /* libyaml does not count the byte-order mark */
		if (y->cline == line && y->ccol <= mk.column)
			c = y->ccol, b = y->cbyte;
		while (c < mk.column && b < le) {
			b++;
			while (b < le && (t[b] & 0xC0) == 0x80)
				b++;
			c++;
		}
		y->cline = line, y->ccol = c, y->cbyte = b;
		byte = b;
	}
	return (ir_loc){y->src, (int)line + 1, (int)(byte - ls) + 1};
}

ir_loc ysrc_offset_loc(const ysrc *y, size_t off)
{
	size_t lo = 0, hi = y->nlines; /* last line starting at or before off */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (y->line_start[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	return (ir_loc){y->src, (int)lo + 1, (int)(off - y->line_start[lo]) + 1};
}

/* ---- messages ------------------------------------------------------------- */

const char *ysrc_shown(arena *a, const char *s)
{
	size_t n = strlen(s);
	bool cut = n > SHOW_MAX;
	if (cut)
		for (n = SHOW_MAX; n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80; n--)
			; /* not inside a UTF-8 character */
	char *p = arena_alloc(a, n + 4);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (cut)
		memcpy(p + n, "...", 3);
	return p;
}

const char *ysrc_joined(arena *a, const char *const *names, int n)
{
	size_t len = 1;
	for (int i = 0; i < n; i++)
		len += strlen(names[i]) + 2;
	char *p = arena_alloc(a, len), *q = p;
	for (int i = 0; i < n; i++)
		q += sprintf(q, "%s%s", i ? ", " : "", names[i]);
	return p;
}

const char *ysrc_describe_scalar(arena *a, const char *s, yaml_scalar_style_t style)
{
	if (style == YAML_PLAIN_SCALAR_STYLE)
		return *s ? arena_printf(a, "'%s'", ysrc_shown(a, s)) : "nothing";
	return arena_printf(a, "the string \"%s\"", ysrc_shown(a, s));
}

const char *ysrc_tag_shown(arena *a, const char *tag)
{
	static const char std[] = "tag:yaml.org,2002:";
	if (strncmp(tag, std, sizeof std - 1) == 0)
		tag = arena_printf(a, "!!%s", tag + sizeof std - 1);
	return ysrc_shown(a, tag);
}

void ysrc_unknown(arena *a, ir_loc loc, const char *noun, const char *s, const char *where,
                  const char *const *names, int n)
{
	const char *near = diag_nearest(s, names, n);
	const char *sp = where ? " " : "";
	where = where ? where : "";
	if (near)
		diag_error(loc, "unknown %s '%s'%s%s; did you mean '%s'?", noun, ysrc_shown(a, s), sp,
		           where, near);
	else
		diag_error(loc, "unknown %s '%s'%s%s; known: %s", noun, ysrc_shown(a, s), sp, where,
		           ysrc_joined(a, names, n));
}

/* ---- numbers -------------------------------------------------------------- */

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

size_t ysrc_scan_number(const char *s)
{
	size_t i = 0, digits = 0;
	if (s[i] == '+' || s[i] == '-')
		i++;
	while (is_digit(s[i]))
		i++, digits++;
	if (s[i] == '.') {
		i++;
		while (is_digit(s[i]))
			i++, digits++;
	}
	if (!digits)
		return 0;
	if (s[i] == 'e' || s[i] == 'E') {
		size_t j = i + 1;
		if (s[j] == '+' || s[j] == '-')
			j++;
		if (is_digit(s[j])) {
			while (is_digit(s[j]))
				j++;
			i = j;
		}
	}
	return i;
}

bool ysrc_nonfinite(const char *s)
{
	if (*s == '+' || *s == '-')
		s++;
	static const char *const names[] = {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"};
	for (int i = 0; i < NELEMS(names); i++)
		if (strcmp(s, names[i]) == 0)
			return true;
	return false;
}

int ysrc_number(arena *a, ir_loc loc, const char *what, const char *s, bool plain, int sign,
                double *out)
{
	if (plain && ysrc_nonfinite(s)) {
		diag_error(loc, "%s must be finite, got '%s'", what, s);
		return -1;
	}
	size_t len = ysrc_scan_number(s);
	if (!plain || !len || s[len])
		return 1;
	double v = strtod(s, NULL);
	if (!isfinite(v)) {
		diag_error(loc, "%s must be finite, got '%s'", what, ysrc_shown(a, s));
		return -1;
	}
	if ((sign == YSRC_POSITIVE && !(v > 0)) || (sign == YSRC_NONNEG && v < 0)) {
		diag_error(loc, "%s must be %s, got %s", what,
		           sign == YSRC_POSITIVE ? "greater than 0" : "at least 0", ysrc_shown(a, s));
		return -1;
	}
	*out = v;
	return 0;
}

/* ---- event readers -------------------------------------------------------- */

int yev_open(yev *r, arena *a, const src_file *src, const yev_words *w)
{
	*r = (yev){.a = a, .w = w};
	ysrc_init(&r->ys, a, src);
	if (!yaml_parser_initialize(&r->p)) {
		diag_error((ir_loc){src, 1, 1}, "%s", w->oom);
		return -1;
	}
	yaml_parser_set_input_string(&r->p, (const unsigned char *)src->text, src->len);
	return 0;
}

void yev_close(yev *r)
{
	if (r->have_ev)
		yaml_event_delete(&r->ev);
	r->have_ev = false;
	yaml_parser_delete(&r->p);
}

ir_loc yev_here(yev *r)
{
	return ysrc_mark_loc(&r->ys, r->ev.start_mark);
}

const char *yev_text(const yev *r)
{
	return (const char *)r->ev.data.scalar.value;
}

bool yev_plain(const yev *r)
{
	return r->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

const char *yev_describe(yev *r)
{
	switch (r->ev.type) {
	case YAML_MAPPING_START_EVENT:
		return r->w->mapping;
	case YAML_SEQUENCE_START_EVENT:
		return r->w->sequence;
	case YAML_SCALAR_EVENT:
		return ysrc_describe_scalar(r->a, yev_text(r), r->ev.data.scalar.style);
	default:
		return "nothing";
	}
}

static void yev_problem(yev *r)
{
	const yaml_parser_t *p = &r->p;
	if (p->error == YAML_READER_ERROR) {
		ir_loc loc = ysrc_offset_loc(&r->ys, p->problem_offset);
		if (strstr(p->problem, "UTF-8") && p->problem_value != -1)
			diag_error(loc, "%s (byte 0x%02X); the file must be UTF-8 text", p->problem,
			           (unsigned)p->problem_value);
		else
			diag_error(loc, "%s", p->problem);
	} else if (p->error == YAML_SCANNER_ERROR || p->error == YAML_PARSER_ERROR) {
		diag_error(ysrc_mark_loc(&r->ys, p->problem_mark), "%s%s%s", p->problem,
		           p->context ? " " : "", p->context ? p->context : "");
	} else {
		diag_error((ir_loc){r->ys.src, 1, 1}, "%s", r->w->oom);
	}
}

int yev_next(yev *r)
{
	if (r->have_ev)
		yaml_event_delete(&r->ev);
	r->have_ev = false;
	if (!yaml_parser_parse(&r->p, &r->ev)) {
		yev_problem(r);
		return -1;
	}
	r->have_ev = true;
	const yaml_char_t *tag = NULL;
	switch (r->ev.type) {
	case YAML_ALIAS_EVENT:
		diag_error(yev_here(r), "alias '*%s' %s",
		           ysrc_shown(r->a, (const char *)r->ev.data.alias.anchor), r->w->alias);
		return -1;
	case YAML_SCALAR_EVENT: tag = r->ev.data.scalar.tag; break;
	case YAML_MAPPING_START_EVENT: tag = r->ev.data.mapping_start.tag; break;
	case YAML_SEQUENCE_START_EVENT: tag = r->ev.data.sequence_start.tag; break;
	default: break;
	}
	if (tag && strcmp((const char *)tag, "!") != 0) {
		diag_error(yev_here(r), "unsupported tag '%s'%s",
		           ysrc_tag_shown(r->a, (const char *)tag), r->w->tag);
		return -1;
	}
	return 0;
}

int yev_start(yev *r)
{
	if (yev_next(r) < 0 || yev_next(r) < 0) /* stream start, document start */
		return -1;
	if (r->ev.type == YAML_STREAM_END_EVENT) {
		diag_error((ir_loc){r->ys.src, 1, 1}, "empty profile");
		return -1;
	}
	return yev_next(r);
}

int yev_end(yev *r)
{
	if (yev_next(r) < 0 || yev_next(r) < 0) /* document end, then the stream's end */
		return -1;
	if (r->ev.type != YAML_STREAM_END_EVENT) {
		diag_error(yev_here(r), "%s", r->w->second);
		return -1;
	}
	return 0;
}

int yev_want_mapping(yev *r, const char *what)
{
	if (yev_next(r) < 0)
		return -1;
	if (r->ev.type != YAML_MAPPING_START_EVENT) {
		diag_error(yev_here(r), "expected %s for %s, got %s", r->w->mapping, what,
		           yev_describe(r));
		return -1;
	}
	return 0;
}

int yev_next_key(yev *r, const char *where)
{
	if (yev_next(r) < 0)
		return -1;
	if (r->ev.type == YAML_MAPPING_END_EVENT)
		return 0;
	if (r->ev.type != YAML_SCALAR_EVENT) {
		diag_error(yev_here(r), "expected a key %s, got %s", where, yev_describe(r));
		return -1;
	}
	return 1;
}

int yev_key_index(yev *r, const char *noun, const char *where, const char *const *names, int n,
                  bool *seen, ir_loc *first)
{
	const char *key = yev_text(r);
	int k = ir_lookup(names, n, key);
	if (k < 0) {
		ysrc_unknown(r->a, yev_here(r), noun, key, where, names, n);
		return -1;
	}
	if (seen[k]) {
		diag_error(yev_here(r), "duplicate key '%s' %s", ysrc_shown(r->a, key), where);
		diag_note(first[k], "the first '%s' is here", ysrc_shown(r->a, key));
		return -1;
	}
	seen[k] = true;
	first[k] = yev_here(r);
	return k;
}

/* ---- paths ------------------------------------------------------------------ */

/* `path` relative to the directory `dir` (NULL or "": as given). */
const char *ysrc_resolve(arena *a, const char *dir, const char *path)
{
	if (!dir || !*dir || path[0] == '/')
		return arena_strdup(a, path);
	return arena_printf(a, "%s/%s", dir, path);
}

/* Directory part of a file name, "" for a bare name. */
const char *ysrc_dir_of(arena *a, const char *file)
{
	const char *slash = strrchr(file, '/');
	if (!slash)
		return "";
	if (slash == file)
		return "/";
	return arena_strndup(a, file, (size_t)(slash - file));
}
