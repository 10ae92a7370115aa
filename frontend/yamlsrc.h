/* yamlsrc.h: what the frontend's YAML readers share -- the model and
 * cluster files (a node tree, modelfile.h) and profiles (profile.c and
 * profile_json.c, an event stream): file:line:col locations from libyaml's
 * marks, user values as messages show them, numbers as the formats write
 * them, paths relative to a file, the event reader, and a new module's
 * start.  Private to frontend/. */
#ifndef OCTO_YAMLSRC_H
#define OCTO_YAMLSRC_H

#include <yaml.h>

#include "frontend.h"
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

/* `path` relative to the directory `dir` (NULL or "": as given), and the
 * directory part of a file name ("" for a bare name); from a. */
const char *ysrc_resolve(arena *a, const char *dir, const char *path);
const char *ysrc_dir_of(arena *a, const char *file);

/* ---- modules (frontend.c, profile_json.c) ------------------------------------ */

/* Reads src into m; 0, or -1 after a diagnostic. */
typedef int fe_loader(ir_module *m, const src_file *src, const fe_overrides *ov);

/* A new module read by load_fn from src, or when src is NULL from the file
 * at path.  NULL after a diagnostic. */
ir_module *fe_new_module(fe_loader *load_fn, const src_file *src, const char *path,
                         const fe_overrides *ov);

/* The model file's defaults of `training` and `plan` (docs/yaml.md) on m
 * (frontend.c): the start of every module the frontend builds. */
void fe_default_training(ir_module *m);

/* ---- event readers (profile.c, profile_json.c) ---------------------------- */

/* What a format calls things in its messages. */
typedef struct yev_words {
	const char *mapping, *sequence; /* "a mapping", "an object" */
	const char *oom;                /* the message when libyaml runs out of memory */
	const char *alias;              /* after "alias '*NAME' " */
	const char *tag;                /* after "unsupported tag 'TAG'" */
	const char *second;             /* at a second document */
} yev_words;

/* A file read event by event with libyaml's parser. */
typedef struct yev {
	arena *a;
	ysrc ys;
	yaml_parser_t p;
	yaml_event_t ev; /* the current event */
	bool have_ev;
	const yev_words *w;
} yev;

/* Start reading src (indexed from a).  Returns 0, or -1 after a
 * diagnostic; yev_close is needed after 0 only. */
int yev_open(yev *r, arena *a, const src_file *src, const yev_words *w);
void yev_close(yev *r);

/* The current event's location, a scalar's text, and whether it is plain. */
ir_loc yev_here(yev *r);
const char *yev_text(const yev *r);
bool yev_plain(const yev *r);

/* What the current event is, for "expected X for 'k', got Y". */
const char *yev_describe(yev *r);

/* Past the stream and document starts to the first node's event, in
 * r->ev; an empty file is an error.  0, or -1 after a diagnostic. */
int yev_start(yev *r);

/* After the top-level node: the document's end, then the stream's.  0,
 * or -1 after a diagnostic. */
int yev_end(yev *r);

/* The next event into r->ev.  Aliases and tags are not part of the
 * formats; each is an error where it stands.  0, or -1 after a diagnostic. */
int yev_next(yev *r);

/* The next event, which must start a mapping (`what` names it). */
int yev_want_mapping(yev *r, const char *what);

/* The next key of a mapping into r->ev: 1, 0 at the mapping's end, -1
 * after a diagnostic. */
int yev_next_key(yev *r, const char *where);

/* The current key's index in names (`noun` names them in messages): each
 * one known and none twice, as seen[] and first[] (where each was) keep
 * count.  -1 after a diagnostic. */
int yev_key_index(yev *r, const char *noun, const char *where, const char *const *names, int n,
                  bool *seen, ir_loc *first);

#endif
