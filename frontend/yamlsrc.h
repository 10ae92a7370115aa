/* yamlsrc.h: what the frontend's YAML readers share -- the model file
 * (frontend.c, a node tree) and profiles (profile.c, an event stream):
 * file:line:col locations from libyaml's marks, user values as messages
 * show them, and numbers as the formats write them.  Private to
 * frontend/. */
#ifndef OCTO_YAMLSRC_H
#define OCTO_YAMLSRC_H

#include <yaml.h>

#include "ir.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof *(a)))

/* A YAML file's text, indexed by line for locations. */
typedef struct ysrc {
	const src_file *src;
	size_t *line_start;        /* byte offset of each line */
	size_t nlines;
	bool ascii;                /* then character columns are byte columns */
	size_t cline, ccol, cbyte; /* last column conversion, resumed to the right */
} ysrc;

/* Index src's lines (allocated from a). */
void ysrc_init(ysrc *y, arena *a, const src_file *src);

/* The location of a libyaml mark.  libyaml counts columns in characters;
 * diagnostics (and the caret under the source line) count bytes. */
ir_loc ysrc_mark_loc(ysrc *y, yaml_mark_t mk);

/* The location of a byte offset (libyaml's reader errors give those). */
ir_loc ysrc_offset_loc(const ysrc *y, size_t off);

/* A user value as it appears in a message: cut short, control bytes
 * replaced, so a message stays one readable line. */
const char *ysrc_shown(arena *a, const char *s);

/* "a, b, c" */
const char *ysrc_joined(arena *a, const char *const *names, int n);

/* A scalar, for "expected X for 'k', got Y": 'text', the string "text",
 * or nothing. */
const char *ysrc_describe_scalar(arena *a, const char *s, yaml_scalar_style_t style);

/* A tag as the user wrote it: "!!int" for "tag:yaml.org,2002:int". */
const char *ysrc_tag_shown(arena *a, const char *tag);

/* "unknown NOUN 'S' WHERE; did you mean 'x'?" (or "; known: " and the
 * list of names); where may be NULL. */
void ysrc_unknown(arena *a, ir_loc loc, const char *noun, const char *s, const char *where,
                  const char *const *names, int n);

/* Length of a decimal number [+-]digits[.digits][e[+-]digits] at the start
 * of s (0: none). */
size_t ysrc_scan_number(const char *s);

/* The YAML spellings of infinity and not-a-number. */
bool ysrc_nonfinite(const char *s);

enum { YSRC_ANY, YSRC_POSITIVE, YSRC_NONNEG };

/* number := plain scalar in decimal or scientific notation, finite, and
 * as `sign` asks.  Returns 0 with *out set; 1 when s is no number at all
 * (the caller says what it got instead); -1 after a diagnostic at loc,
 * which names the value `what`. */
int ysrc_number(arena *a, ir_loc loc, const char *what, const char *s, bool plain, int sign,
                double *out);

#endif
