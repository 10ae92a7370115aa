/* support.h: the arena every compilation allocates from, source files and
 * user diagnostics (file:line:col: error: ...), and internal-bug aborts.
 *
 * User mistakes go through diag_error() and make the tool exit 1; broken
 * invariants inside the compiler go through ir_bug(), which aborts with the
 * source location of the check (QBE's err/die split). */
#ifndef OCTO_SUPPORT_H
#define OCTO_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- arena ---------------------------------------------------------- */

typedef struct arena arena;

arena *arena_new(void);
void arena_free(arena *a);
void *arena_alloc(arena *a, size_t n);              /* zeroed, 16-aligned */
void *arena_calloc(arena *a, size_t n, size_t size); /* n x size bytes, zeroed */
void *arena_grow(arena *a, void *old, size_t oldn, size_t newn);
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);
char *arena_printf(arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Append to a growable array kept as (ptr, len, cap) in an arena. */
#define VEC_PUSH(ar, ptr, len, cap)                                            \
	(((len) == (cap) ? ((ptr) = arena_grow((ar), (ptr),                        \
	                                       (cap) * sizeof *(ptr),              \
	                                       ((cap) ? 2 * (cap) : 8) *           \
	                                           sizeof *(ptr)),                 \
	                    (cap) = (cap) ? 2 * (cap) : 8)                         \
	                 : 0),                                                     \
	 &(ptr)[(len)++])

/* ---- sources and locations ------------------------------------------ */

typedef struct src_file {
	const char *name; /* as the user spelled it */
	const char *text; /* NUL-terminated copy of the contents */
	size_t len;
} src_file;

typedef struct ir_loc {
	const src_file *src; /* NULL: no location known */
	int line;            /* 1-based */
	int col;             /* 1-based */
} ir_loc;

/* A source made from a string in memory (tests, generated text). */
src_file *src_from_string(arena *a, const char *name, const char *text);

/* The most bytes src_read takes from one file (docs/cli.md, "Input
 * files"): far above any model, cluster, profile or plan the compiler
 * writes, and a bound on the memory a wrong file can take. */
#define SRC_MAX_BYTES (256 << 20)

/* Read a whole file: every reader of the compiler (model, cluster, profile,
 * IR text, traces) goes through here.  Reports (and returns NULL for) a
 * missing or unreadable file, one that is not a regular file (a directory,
 * a device such as /dev/zero, a FIFO, a socket: named in the message), one
 * over SRC_MAX_BYTES, an empty file and a binary file (one holding a NUL
 * byte), each as "name:1:1: error: ...". */
src_file *src_read(arena *a, const char *path);

/* What a file that is not a regular one is (st_mode), for a message:
 * "a directory", "a character device", "a FIFO (named pipe)", ... */
const char *src_file_kind(unsigned mode);

/* ---- diagnostics ----------------------------------------------------- */

/* Where diagnostics go and how many errors went there.  The process has
 * one default sink (stderr), which diag_error writes to; a caller that
 * keeps a run's diagnostics apart (the tuner judging a baseline, whose
 * failure is a row of the comparison, not an error) hands the passes a
 * sink of its own through the pass options (passes/pass.h). */
typedef struct diag_sink {
	FILE *stream;    /* NULL: print nothing */
	int errors;      /* errors written to this sink */
	char first[160]; /* the first error's message, without location ("" until one) */
} diag_sink;

extern diag_sink diag_default;
/* The default sink's stream (stderr unless a test redirects it) and count. */
#define diag_stream (diag_default.stream)
#define diag_errors (diag_default.errors)
/* What an unlocated diagnostic starts with: "octopipe", or "octopipe
 * COMMAND" once the driver knows the command (as its flag errors do). */
extern const char *diag_program;

/* "file:line:col: error: message", then the source line and a caret under
 * the column, to the default sink. */
void diag_error(ir_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void diag_verror(ir_loc loc, const char *fmt, va_list ap);
void diag_note(ir_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The same error to sink s (NULL: the default sink). */
void diag_sink_error(diag_sink *s, ir_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_sink_verror(diag_sink *s, ir_loc loc, const char *fmt, va_list ap);
/* A line that continues the last error on s (a cycle's steps, say): as
 * it is, with no prefix, printed only where s prints. */
void diag_sink_line(diag_sink *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Levenshtein distance-based suggestion: the candidate nearest to `word`,
 * or NULL when none is close enough to be a plausible typo. */
const char *diag_nearest(const char *word, const char *const *cands, int n);

/* ---- internal bugs --------------------------------------------------- */

_Noreturn void ir_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ir_bug(...) ir_die(__FILE__, __LINE__, __VA_ARGS__)
#define ir_assert(c)                                                           \
	((c) ? (void)0 : ir_die(__FILE__, __LINE__, "assertion failed: %s", #c))

/* ---- number text ----------------------------------------------------- */

/* Shortest "%g"-style text that reads back to exactly `v`. */
void fmt_double(char *buf, size_t n, double v);

/* The median of v[0..n), n > 0 (sorts v in place): the one median of the
 * compiler's tools and benchmarks (the runtime keeps its own). */
double ir_median(double *v, int n);

#endif
