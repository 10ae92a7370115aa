/* rt_util.c: the leaf of the runtime that every other file calls: failure
 * messages (rt__fail: the message in the context, the code returned), the
 * clock, FNV-1a hashing, the file helpers that never
 * block (a FIFO cannot hang an open), and the context's read-only
 * accessors.  It calls no other file of the runtime. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

int rt__fail(rt_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
	va_end(ap);
	return code;
}

const char *rt__mpierr(int rc, char *buf)
{
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
		snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
	return buf;
}

int64_t rt__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t rt__fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int rt__open_regular(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, st)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -2;
	}
	/* Regular files ignore O_NONBLOCK; cleared all the same. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

FILE *rt__create_out(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return NULL;
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return f;
}

int rt__out_check(rt_ctx *ctx, const char *what, const char *path)
{
	struct stat st;
	bool existed = stat(path, &st) == 0;
	/* No O_TRUNC: an existing file keeps its bytes until the real write. */
	int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "%s %s: cannot be written: %s", what, path,
		                errno == ENXIO ? "a pipe that nobody reads" : strerror(errno));
	close(fd);
	if (!existed)
		unlink(path);
	return RT_OK;
}

const char *rt__file_kind(const struct stat *st)
{
	return S_ISDIR(st->st_mode)    ? "a directory"
	       : S_ISCHR(st->st_mode)  ? "a character device"
	       : S_ISBLK(st->st_mode)  ? "a block device"
	       : S_ISFIFO(st->st_mode) ? "a pipe"
	       : S_ISSOCK(st->st_mode) ? "a socket"
	                               : "a special file";
}

int rt_rank(const rt_ctx *ctx)
{
	return ctx ? ctx->rank : -1;
}

int rt_world_size(const rt_ctx *ctx)
{
	return ctx ? ctx->world : 0;
}

const char *rt_errmsg(const rt_ctx *ctx)
{
	return ctx ? ctx->err : "";
}
