/* support.c: arena, source files, diagnostics, internal-bug aborts. */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- arena ------------------------------------------------------------ */

typedef struct chunk {
	struct chunk *next;
	size_t size, used;
	bool mapped; /* from big_chunk: back to the cache, not to free() */
	_Alignas(16) unsigned char data[];
} chunk;

struct arena {
	chunk *head;
	size_t next; /* the size of the next chunk: doubling from 64 KiB */
};

static _Noreturn void oom(void)
{
	fputs("octopipe: out of memory\n", stderr);
	abort();
}

/* Chunks of BIG bytes and more are mapped, asked to be backed by huge pages,
 * and kept after arena_free (up to CACHE_MAX bytes in all) for the next
 * arena: a planner builds and drops modules of much the same size over and
 * over (every candidate plan is lowered, proved and memory-planned), and the
 * first touch of a fresh page, one fault each, cost more than the work
 * itself: gpt3-175b on 128 devices, one 1F1B plan, 42 626 faults and 1.35 s
 * with malloc'd chunks; docs/tuner.md, "Where the time goes". */
#define BIG (2u << 20)
#define CACHE_MAX ((size_t)1 << 30)
static chunk *cache;     /* kept big chunks */
static size_t cached;    /* their bytes */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static chunk *big_chunk(size_t sz)
{
	sz = (sz + sizeof(chunk) + BIG - 1) / BIG * BIG;
	pthread_mutex_lock(&cache_lock);
	chunk **best = NULL;
	for (chunk **c = &cache; *c; c = &(*c)->next)
		if ((*c)->size + sizeof(chunk) >= sz && (!best || (*c)->size < (*best)->size))
			best = c;
	chunk *got = NULL;
	if (best) {
		got = *best;
		*best = got->next;
		cached -= got->size + sizeof(chunk);
	}
	pthread_mutex_unlock(&cache_lock);
	if (got)
		return got;
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		oom();
#ifdef MADV_HUGEPAGE
	madvise(p, sz, MADV_HUGEPAGE); /* advice: no harm where it is not taken */
#endif
	got = p;
	got->size = sz - sizeof(chunk);
	got->mapped = true;
	return got;
}

static void drop_chunk(chunk *c)
{
	if (!c->mapped) {
		free(c);
		return;
	}
	size_t sz = c->size + sizeof(chunk);
	pthread_mutex_lock(&cache_lock);
	bool keep = cached + sz <= CACHE_MAX;
	if (keep) {
		c->next = cache;
		cache = c;
		cached += sz;
	}
	pthread_mutex_unlock(&cache_lock);
	if (!keep)
		munmap(c, sz);
}

arena *arena_new(void)
{
	arena *a = calloc(1, sizeof *a);
	if (!a)
		oom();
	return a;
}

void arena_free(arena *a)
{
	if (!a)
		return;
	for (chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		drop_chunk(c);
	}
	free(a);
}

/* n bytes, not cleared. */
static void *arena_raw(arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	chunk *c = a->head;
	if (!c || c->size - c->used < n) {
		size_t want = a->next ? a->next : 65536;
		a->next = want < BIG ? 2 * want : want;
		size_t sz = n > want ? n : want;
		if (sz >= BIG) {
			c = big_chunk(sz);
		} else {
			if (!(c = malloc(sizeof *c + sz)))
				oom();
			c->size = sz;
			c->mapped = false;
		}
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

void *arena_alloc(arena *a, size_t n)
{
	void *p = arena_raw(a, n);
	memset(p, 0, n);
	return p;
}

void *arena_calloc(arena *a, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		oom();
	return arena_alloc(a, n * size);
}

void *arena_grow(arena *a, void *old, size_t oldn, size_t newn)
{
	char *p = arena_raw(a, newn);
	size_t kept = old ? (oldn < newn ? oldn : newn) : 0;
	if (kept)
		memcpy(p, old, kept);
	memset(p + kept, 0, newn - kept);
	return p;
}

char *arena_strndup(arena *a, const char *s, size_t n)
{
	char *p = arena_alloc(a, n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *arena_strdup(arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *arena_printf(arena *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *p = arena_alloc(a, (size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return p;
}

/* ---- sources ---------------------------------------------------------- */

src_file *src_from_string(arena *a, const char *name, const char *text)
{
	src_file *s = arena_alloc(a, sizeof *s);
	s->name = arena_strdup(a, name);
	s->len = strlen(text);
	s->text = arena_strndup(a, text, s->len);
	return s;
}

const char *src_file_kind(unsigned mode)
{
	return S_ISDIR(mode) ? "a directory" : S_ISCHR(mode) ? "a character device"
	     : S_ISBLK(mode) ? "a block device" : S_ISFIFO(mode) ? "a FIFO (named pipe)"
	     : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

src_file *src_read(arena *a, const char *path)
{
	src_file *s = arena_alloc(a, sizeof *s);
	s->name = arena_strdup(a, path);
	ir_loc loc = {s, 1, 1};
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; it is
	 * refused below like every file that is not a regular one (a device
	 * such as /dev/zero never ends). */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		diag_error(loc, "cannot open file: %s", strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		diag_error(loc, "cannot read file: %s", strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		diag_error(loc, "cannot read file: it is %s, not a regular file", src_file_kind(st.st_mode));
		close(fd);
		return NULL;
	}
	if (st.st_size > SRC_MAX_BYTES) {
		diag_error(loc, "file too large: %lld bytes; the limit is %d MiB", (long long)st.st_size,
		           SRC_MAX_BYTES >> 20);
		close(fd);
		return NULL;
	}
	/* Read up to the limit and one byte more: a file that grows while it
	 * is read is caught too. */
	size_t cap = (size_t)st.st_size + 2, len = 0;
	if (cap > (size_t)SRC_MAX_BYTES + 2)
		cap = (size_t)SRC_MAX_BYTES + 2;
	char *buf = malloc(cap);
	if (!buf)
		oom();
	int err = 0;
	for (;;) {
		if (len == cap - 1) {
			if (len > (size_t)SRC_MAX_BYTES)
				break;
			size_t ncap = cap * 2 > (size_t)SRC_MAX_BYTES + 2 ? (size_t)SRC_MAX_BYTES + 2 : cap * 2;
			char *nb = realloc(buf, ncap);
			if (!nb)
				oom();
			buf = nb, cap = ncap;
		}
		ssize_t got = read(fd, buf + len, cap - 1 - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			err = errno;
			break;
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	if (err) {
		free(buf);
		diag_error(loc, "cannot read file: %s", strerror(err));
		return NULL;
	}
	if (len > (size_t)SRC_MAX_BYTES) {
		free(buf);
		diag_error(loc, "file too large: more than %d MiB (the limit)", SRC_MAX_BYTES >> 20);
		return NULL;
	}
	if (len == 0) {
		free(buf);
		diag_error(loc, "file is empty");
		return NULL;
	}
	const char *nul = memchr(buf, 0, len);
	if (nul) {
		/* Locate the NUL for the message, without echoing binary. */
		int line = 1, col = 1;
		for (const char *p = buf; p < nul; p++) {
			if (*p == '\n')
				line++, col = 1;
			else
				col++;
		}
		free(buf);
		fprintf(diag_stream, "%s:%d:%d: error: binary file (NUL byte); expected text\n",
		        path, line, col);
		diag_errors++;
		return NULL;
	}
	s->len = len;
	s->text = arena_strndup(a, buf, len);
	free(buf);
	return s;
}

/* ---- diagnostics ------------------------------------------------------ */

diag_sink diag_default;
const char *diag_program = "octopipe";

__attribute__((constructor)) static void diag_init(void)
{
	diag_default.stream = stderr;
}

/* Print the source line of loc and a caret under its column.  Tabs are
 * kept so the caret lines up in a terminal. */
static void show_line(FILE *out, ir_loc loc)
{
	if (!loc.src || !loc.src->text || loc.line < 1)
		return;
	const char *p = loc.src->text, *end = p + loc.src->len;
	for (int l = 1; l < loc.line && p < end; p++)
		if (*p == '\n')
			l++;
	if (p >= end)
		return;
	const char *e = memchr(p, '\n', (size_t)(end - p));
	if (!e)
		e = end;
	int n = (int)(e - p);
	if (n > 0 && p[n - 1] == '\r')
		n--;
	if (n > 200) /* keep long lines readable */
		n = 200;
	/* Control bytes would garble the terminal: show them as '?'. */
	for (int i = 0; i < n; i++)
		fputc((unsigned char)p[i] < 0x20 && p[i] != '\t' ? '?' : p[i], out);
	fputc('\n', out);
	int col = loc.col > 0 ? loc.col : 1;
	for (int i = 0; i < col - 1 && i < n; i++)
		fputc(p[i] == '\t' ? '\t' : ' ', out);
	fputs("^\n", out);
}

static void vreport(FILE *out, ir_loc loc, const char *what, const char *fmt, va_list ap)
{
	if (!out)
		return;
	if (loc.src)
		fprintf(out, "%s:%d:%d: %s: ", loc.src->name, loc.line, loc.col, what);
	else
		fprintf(out, "%s: %s: ", diag_program, what);
	vfprintf(out, fmt, ap);
	fputc('\n', out);
	show_line(out, loc);
}

void diag_sink_verror(diag_sink *s, ir_loc loc, const char *fmt, va_list ap)
{
	if (!s)
		s = &diag_default;
	if (!s->errors++) {
		va_list aq;
		va_copy(aq, ap);
		vsnprintf(s->first, sizeof s->first, fmt, aq);
		va_end(aq);
	}
	vreport(s->stream, loc, "error", fmt, ap);
}

void diag_sink_error(diag_sink *s, ir_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_sink_verror(s, loc, fmt, ap);
	va_end(ap);
}

void diag_sink_line(diag_sink *s, const char *fmt, ...)
{
	if (!s)
		s = &diag_default;
	if (!s->stream)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(s->stream, fmt, ap);
	va_end(ap);
	fputc('\n', s->stream);
}

void diag_verror(ir_loc loc, const char *fmt, va_list ap)
{
	diag_sink_verror(&diag_default, loc, fmt, ap);
}

void diag_error(ir_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror(loc, fmt, ap);
	va_end(ap);
}

void diag_note(ir_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(diag_default.stream, loc, "note", fmt, ap);
	va_end(ap);
}

static int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64)
		return 1000;
	int row[65];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int prev = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int cur = row[j];
			int sub = prev + (a[i - 1] != b[j - 1]);
			int del = row[j] + 1, ins = row[j - 1] + 1;
			row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
			prev = cur;
		}
	}
	return row[lb];
}

const char *diag_nearest(const char *word, const char *const *cands, int n)
{
	const char *best = NULL;
	int bestd = 1000;
	for (int i = 0; i < n; i++) {
		if (!cands[i])
			continue;
		int d = edit_distance(word, cands[i]);
		if (d < bestd)
			bestd = d, best = cands[i];
	}
	/* A plausible typo: at most a third of the word changed. */
	int len = (int)strlen(word);
	int limit = len < 3 ? 1 : (len + 2) / 3;
	return bestd <= limit ? best : NULL;
}

/* ---- internal bugs ---------------------------------------------------- */

_Noreturn void ir_die(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "octopipe: internal error at %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* ---- numbers ---------------------------------------------------------- */

void fmt_double(char *buf, size_t n, double v)
{
	if (v == 0) {
		snprintf(buf, n, "0");
		return;
	}
	int prec = 1;
	for (; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	if (!strchr(buf, 'e'))
		return;
	/* Prefer plain digits when they are about as short: 10, not 1e+01. */
	size_t len = strlen(buf);
	char alt[64];
	for (int q = prec + 1; q <= 17; q++) {
		snprintf(alt, sizeof alt, "%.*g", q, v);
		if (strchr(alt, 'e'))
			continue;
		if (strtod(alt, NULL) == v && strlen(alt) <= len + 1)
			snprintf(buf, n, "%s", alt);
		return;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double ir_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
