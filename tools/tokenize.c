/* tokenize.c: `octopipe tokenize` (tokenize.h).  Reads the input as a
 * stream (a pipe will do; a directory will not), writes every byte as one
 * little-endian uint16 or uint32 token, and refuses what the ranks would
 * refuse later: an empty input (a token file holds at least one token).
 * A device that is not a terminal (/dev/zero never ends) or a socket is
 * refused.  The output is written beside its final name and renamed into
 * place only when complete, so a failed run leaves no half file behind, and
 * OUT may name IN; an OUT that exists and is not a regular file (/dev/null,
 * a FIFO) is written in place, never replaced by the rename. */
#include "tokenize.h"

#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char help[] =
    "usage: octopipe tokenize [options] IN.txt -o OUT.bin\n\n"
    "a token file from text, one token per byte (the byte-level tokenizer of text\n"
    "data): training on OUT.bin gives the tokens of training on IN.txt\n"
    "(docs/data.md)\n\noptions:\n"
    "  -o FILE                    the token file to write\n"
    "  --format u16|u32           token width (default: u32 when FILE ends in .u32,\n"
    "                             else u16), little-endian\n"
    "  --help                     show this help\n";

static int tok_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int tok_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror((ir_loc){0}, fmt, ap);
	va_end(ap);
	return 1;
}

static bool ends_with(const char *s, const char *ext)
{
	size_t n = strlen(s), e = strlen(ext);
	return n > e && !strcmp(s + n - e, ext);
}

/* IN's bytes as tokens of `width` bytes into the stream out: the tokens
 * written, or -1 after a diagnostic. */
static long long convert(FILE *in, const char *inp, FILE *out, const char *outp, int width)
{
	unsigned char buf[1 << 16], tok[4 << 16];
	long long n = 0;
	size_t got;
	while ((got = fread(buf, 1, sizeof buf, in)) > 0) {
		memset(tok, 0, got * (size_t)width);
		for (size_t i = 0; i < got; i++)
			tok[i * (size_t)width] = buf[i];
		if (fwrite(tok, (size_t)width, got, out) != got) {
			tok_error("%s: write: %s", outp, strerror(errno));
			return -1;
		}
		n += (long long)got;
	}
	if (ferror(in)) {
		tok_error("%s: read: %s", inp, strerror(errno));
		return -1;
	}
	return n;
}

int tok_main(int argc, char **argv)
{
	const char *inp = NULL, *outp = NULL, *fmt = NULL;
	diag_program = "octopipe tokenize";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(help, stdout);
			return 0;
		}
		const char **dest = !strcmp(a, "-o") ? &outp : !strcmp(a, "--format") ? &fmt : NULL;
		if (dest) {
			if (i + 1 >= argc || !argv[i + 1][0])
				return tok_error("option '%s' needs a value", a);
			*dest = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			return tok_error("unknown option '%s' (options: -o, --format, --help)", a);
		} else if (inp) {
			return tok_error("one input file, got '%s' and '%s'", inp, a);
		} else {
			inp = a;
		}
	}
	if (!inp)
		return tok_error("no input file (usage: octopipe tokenize IN.txt -o OUT.bin)");
	if (!outp)
		return tok_error("no output file: give -o OUT.bin");
	if (fmt && strcmp(fmt, "u16") && strcmp(fmt, "u32"))
		return tok_error("--format is u16 or u32, not '%s'", fmt);
	int width = fmt ? (fmt[1] == '3' ? 4 : 2) : ends_with(outp, ".u32") ? 4 : 2;
	/* What the ranks take the file for by its name (--data-format auto). */
	int by_name = ends_with(outp, ".u32") ? 4 : ends_with(outp, ".bin") || ends_with(outp, ".u16") ? 2 : 0;
	if (by_name != width)
		fprintf(stderr, "octopipe tokenize: note: the ranks read %s as %s by its name: give them "
		        "--data-format u%d\n", outp, by_name == 4 ? "u32 tokens" : by_name ? "u16 tokens" : "text",
		        width * 8);

	int rc = 1;
	char *tmp = NULL;
	FILE *out = NULL, *in = strcmp(inp, "-") ? fopen(inp, "rb") : stdin;
	struct stat st;
	if (!in)
		return tok_error("%s: %s", inp, strerror(errno));
	if (fstat(fileno(in), &st) != 0) {
		tok_error("%s: %s", inp, strerror(errno));
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		tok_error("%s: a directory, not a text file", inp);
		goto out;
	}
	/* A regular file, a pipe or a terminal ends; a device such as
	 * /dev/zero or /dev/urandom does not, and would fill the disk. */
	if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !isatty(fileno(in))) {
		tok_error("%s: %s, not a text file", inp, src_file_kind(st.st_mode));
		goto out;
	}
	/* The rename would replace a device, a FIFO or what a symbolic link
	 * to one names (/dev/null, /dev/stdout) by a regular file: such an
	 * output is written in place. */
	struct stat ost;
	bool in_place = stat(outp, &ost) == 0 && !S_ISREG(ost.st_mode) && !S_ISDIR(ost.st_mode);
	if (!in_place) {
		size_t tl = strlen(outp) + 16;
		if (!(tmp = malloc(tl)))
			goto out;
		snprintf(tmp, tl, "%s.tmp", outp);
	}
	if (tmp) {
		/* OUT.tmp is a new file: whatever has the name (a FIFO left there
		 * would block the open, a link would send the bytes elsewhere)
		 * goes first. */
		unlink(tmp);
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 || !(out = fdopen(fd, "wb"))) {
			tok_error("%s: %s", tmp, strerror(errno));
			if (fd >= 0)
				close(fd);
			goto out;
		}
	} else if (!(out = fopen(outp, "wb"))) {
		tok_error("%s: %s", outp, strerror(errno));
		goto out;
	}
	long long n = convert(in, inp, out, outp, width);
	int closed = fclose(out);
	out = NULL;
	if (n < 0)
		goto out;
	if (closed) {
		tok_error("%s: write: %s", outp, strerror(errno));
		goto out;
	}
	if (n == 0) {
		tok_error("%s: empty: a token file needs at least one token", inp);
		goto out;
	}
	if (tmp && rename(tmp, outp)) {
		tok_error("%s: %s", outp, strerror(errno));
		goto out;
	}
	printf("%s: %lld tokens (u%d, a token per byte) -> %s\n", inp, n, width * 8, outp);
	rc = 0;
out:
	if (out)
		fclose(out);
	if (rc && tmp)
		remove(tmp);
	free(tmp);
	if (in && in != stdin)
		fclose(in);
	return rc;
}
