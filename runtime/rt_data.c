/* rt_data.c: the tokens a rank trains on.  Sample q of the data is
 * mbs sequences of seq + 1 tokens: windows of the text file (one token per
 * byte) or, without one, tokens hashed from (seed, q); micro-batch mb of
 * the step takes sample data position + mb, so the data do not depend on
 * the plan.  Both executors take their ids from rt__fill_ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The text file's bytes: a regular file of at least seq + 1 bytes, read
 * to its size (a device, a pipe or a directory has no size to read to, and
 * /dev/zero would never end). */
static int read_text(rt_ctx *ctx, const char *path)
{
	struct stat st;
	unsigned char *buf = NULL;
	int rc = RT_OK;
	int fd = rt__open_regular(path, &st);
	if (fd == -2)
		return rt__fail(ctx, RT_EIO, "text file %s: not a regular file (%s)", path,
		                rt__file_kind(&st));
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "text file %s: %s", path, strerror(errno));
	size_t len = (size_t)st.st_size;
	if (st.st_size < ctx->train.seq + 1) {
		rc = rt__fail(ctx, RT_EIO, "text file %s: %lld bytes, fewer than one sequence (seq + 1 = "
		              "%lld bytes)", path, (long long)st.st_size, (long long)ctx->train.seq + 1);
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX / 2 || !(buf = malloc(len))) {
		rc = rt__fail(ctx, RT_ENOMEM, "text file %s: %lld bytes: out of memory", path,
		              (long long)st.st_size);
		goto out;
	}
	for (size_t got = 0; got < len;) {
		ssize_t r = read(fd, buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = rt__fail(ctx, RT_EIO, "text file %s: read: %s", path,
			              r < 0 ? strerror(errno) : "the file shrank while it was read");
			goto out;
		}
		got += (size_t)r;
	}
	ctx->text = buf;
	ctx->text_len = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

/* Every rank's data, compared once (an all-gather of a hash of the text,
 * 0 for synthetic tokens): a rank given another --data would otherwise
 * train the others on inputs and targets of two sources, and exit 0. */
static int same_data(rt_ctx *ctx)
{
	MPI_Request req;
	uint64_t mine = ctx->text ? rt__fnv(RT_FNV_INIT, ctx->text, ctx->text_len) : 0;
	uint64_t *all = malloc((size_t)ctx->world * sizeof *all);
	int rc;
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "model: comparing the ranks' data")))
		goto out;
	for (int r = 1; r < ctx->world; r++)
		if (all[r] != all[0]) {
			char a[64], b[64];
			snprintf(a, sizeof a, all[r] ? "a text file of hash 0x%016llx" : "synthetic tokens",
			         (unsigned long long)all[r]);
			snprintf(b, sizeof b, all[0] ? "a text file of hash 0x%016llx" : "synthetic tokens",
			         (unsigned long long)all[0]);
			rc = rt__fail(ctx, RT_EARG,
			              "model: rank %d and rank 0 train on different data (%s on rank %d, %s "
			              "on rank 0): every rank needs the same text file",
			              r, a, r, b);
			goto out;
		}
out:
	free(all);
	return rc;
}

int rt__data_load(rt_ctx *ctx, const char *path)
{
	int rc;
	if (path) {
		/* The context keeps its own copy of the path (the caller's may go). */
		if (!(ctx->text_path = strdup(path))) {
			rc = rt__fail(ctx, RT_ENOMEM, "model: out of memory");
			goto out;
		}
		if ((rc = read_text(ctx, path)))
			goto out;
		ctx->train.text_file = ctx->text_path;
	}
	if ((rc = same_data(ctx)))
		goto out;
	return RT_OK;
out:
	rt__data_free(ctx);
	return rc;
}

void rt__data_free(rt_ctx *ctx)
{
	free(ctx->text);
	free(ctx->text_path);
	ctx->text = NULL;
	ctx->text_path = NULL;
	ctx->text_len = 0;
	ctx->train.text_file = NULL;
}

int rt_data_sample(const rt_ctx *ctx, int64_t sample, int32_t *tokens)
{
	if (!ctx || !ctx->have_model || !tokens || sample < 0)
		return RT_EARG;
	const rt_train *t = &ctx->train;
	int64_t w = t->seq + 1;
	for (int64_t b = 0; b < t->mbs; b++) {
		int32_t *row = tokens + b * w;
		if (ctx->text) {
			/* Sequence q of the data is window q mod nwin of the file:
			 * seq + 1 bytes from q * seq (windows overlap by one byte, the
			 * last input's target). */
			uint64_t nwin = (ctx->text_len - 1) / (uint64_t)t->seq;
			uint64_t q = (uint64_t)sample * (uint64_t)t->mbs + (uint64_t)b;
			const unsigned char *src = ctx->text + (q % nwin) * (uint64_t)t->seq;
			for (int64_t p = 0; p < w; p++)
				row[p] = src[p];
		} else {
			uint64_t hs = mix64(mix64(t->seed ^ 0x6f63746f64617461ull) ^ (uint64_t)sample);
			for (int64_t p = 0; p < w; p++)
				row[p] = (int32_t)(mix64(hs ^ (uint64_t)(b * w + p)) % (uint64_t)t->vocab);
		}
	}
	return RT_OK;
}

/* Inputs (first seq tokens of each sequence) or targets (last seq) of the
 * current step's micro-batch mb into ctx->idbuf. */
void rt__fill_ids(rt_ctx *ctx, int64_t mb, bool targets)
{
	const rt_train *t = &ctx->train;
	/* local micro-batch mb of replica r is global micro-batch r*M + mb */
	rt_data_sample(ctx, ctx->data_pos + t->replica * t->microbatches + mb, ctx->tokbuf);
	for (int64_t b = 0; b < t->mbs; b++)
		memcpy(ctx->idbuf + b * t->seq, ctx->tokbuf + b * (t->seq + 1) + (targets ? 1 : 0),
		       (size_t)t->seq * sizeof(int32_t));
}
