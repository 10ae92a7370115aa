/* rt_data.c: the tokens a rank trains on.  The data are one token stream:
 * the files of rt_train.text_file (a comma-separated list of shards,
 * concatenated in order), each mapped read-only, text (a token per byte)
 * or flat little-endian uint16 / uint32 tokens (docs/data.md); without
 * files, tokens hashed from (seed, sample).  Sample q of the data is mbs
 * sequences of seq + 1 tokens, windows of the stream; micro-batch mb of
 * the step takes sample data position + mb, so the data do not depend on
 * the plan, nor on how the stream is cut into files or encoded.
 *
 * At load every token is checked against the vocabulary once (the first
 * one out of range is named with its file and offset) and the stream's
 * bytes are hashed: the hash is the data's identity, which the ranks
 * compare and a checkpoint records (rt__data_ident, rt__data_resume).
 * Both executors take their ids from rt__fill_ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

/* One file of the stream. */
typedef struct rt_shard {
	char *path;
	const unsigned char *map; /* bytes mapped read-only */
	size_t bytes;
	uint64_t start, ntok; /* its first token in the stream, and its tokens */
} rt_shard;

/* rt_data_format: names (docs/data.md, --data-format) and token widths. */
static const char *const fmt_name[] = {"auto", "text", "u16", "u32"};
static const int fmt_width[] = {0, 1, 2, 4};
static const char *const fmt_file[] = {"", "text file", "token file", "token file"};

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The format a file's name implies: .bin (nanoGPT's train.bin) and .u16
 * are uint16 tokens, .u32 uint32, everything else text. */
static int format_by_name(const char *path, size_t len)
{
	static const struct {
		const char *ext;
		int fmt;
	} ext[] = {{".bin", RT_DATA_U16}, {".u16", RT_DATA_U16}, {".u32", RT_DATA_U32}};
	for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		size_t n = strlen(ext[i].ext);
		if (len > n && !memcmp(path + len - n, ext[i].ext, n) && path[len - n - 1] != '/')
			return ext[i].fmt;
	}
	return RT_DATA_TEXT;
}

int rt__data_format_of(const rt_ctx *ctx, const char *path)
{
	if (ctx && ctx->data_format != RT_DATA_AUTO)
		return ctx->data_format;
	return format_by_name(path, strcspn(path, ","));
}

int rt_data_options(rt_ctx *ctx, int format, int position)
{
	if (!ctx)
		return RT_EARG;
	if (format < RT_DATA_AUTO || format > RT_DATA_U32)
		return rt__fail(ctx, RT_EARG, "rt_data_options: format %d: not an rt_data_format", format);
	if (position < RT_DATA_SAME || position > RT_DATA_KEEP)
		return rt__fail(ctx, RT_EARG, "rt_data_options: position %d: not an rt_data_rule",
		                position);
	if (ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_data_options: after rt_model_init");
	ctx->data_format = format;
	ctx->data_position = position;
	return RT_OK;
}

/* Token i of a shard's bytes, little-endian whatever the host. */
static uint32_t token_at(const unsigned char *p, int width, uint64_t i)
{
	p += i * (uint64_t)width;
	switch (width) {
	case 1: return p[0];
	case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
	default:
		return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	}
}

/* Maps one shard (fmt: its format) into sh: a regular, non-empty file of
 * whole tokens, every one below the vocabulary.  The file is opened
 * without blocking and refused unless regular: a FIFO would wait for a
 * writer, and /dev/zero or a directory has no size to map. */
static int map_shard(rt_ctx *ctx, rt_shard *sh, int fmt)
{
	struct stat st;
	const char *what = fmt_file[fmt], *path = sh->path;
	int w = fmt_width[fmt], rc = RT_OK;
	int fd = rt__open_regular(path, &st);
	if (fd == -2)
		return rt__fail(ctx, RT_EIO, "%s %s: not a regular file (%s)", what, path,
		                rt__file_kind(&st));
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "%s %s: %s", what, path, strerror(errno));
	if (st.st_size == 0) {
		rc = rt__fail(ctx, RT_EIO, "%s %s: empty", what, path);
		goto out;
	}
	if (st.st_size % w) {
		rc = rt__fail(ctx, RT_EIO,
		              "%s %s: %lld bytes, not a whole number of %s tokens (%d bytes each): "
		              "not a %s file (--data-format, docs/data.md)",
		              what, path, (long long)st.st_size, fmt_name[fmt], w, fmt_name[fmt]);
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX / 2) {
		rc = rt__fail(ctx, RT_ENOMEM, "%s %s: %lld bytes: too large to map", what, path,
		              (long long)st.st_size);
		goto out;
	}
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		rc = rt__fail(ctx, RT_EIO, "%s %s: mmap: %s", what, path, strerror(errno));
		goto out;
	}
	sh->map = map;
	sh->bytes = (size_t)st.st_size;
	sh->ntok = sh->bytes / (uint64_t)w;
	/* One pass, sequential: the vocabulary check (text too: a byte is a
	 * token) and the identity. */
	madvise(map, sh->bytes, MADV_SEQUENTIAL);
	uint64_t vocab = (uint64_t)ctx->train.vocab;
	for (uint64_t i = 0; i < sh->ntok; i++) {
		uint32_t t = token_at(sh->map, w, i);
		if (t >= vocab) {
			rc = rt__fail(ctx, RT_EIO,
			              "%s %s: token %lu at byte offset %llu (token %llu) is not below the "
			              "model's vocabulary of %lld",
			              what, path, (unsigned long)t, (unsigned long long)(i * (uint64_t)w),
			              (unsigned long long)i, (long long)vocab);
			goto out;
		}
	}
	ctx->data_sum = rt__fnv(ctx->data_sum, sh->map, sh->bytes);
out:
	close(fd);
	return rc;
}

/* The shards of list (comma-separated paths), mapped in order. */
static int map_all(rt_ctx *ctx, const char *list)
{
	int n = 1, rc;
	for (const char *p = list; *p; p++)
		n += *p == ',';
	if (!(ctx->shards = calloc((size_t)n, sizeof *ctx->shards)))
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	int fmt0 = 0;
	const char *p = list;
	for (int i = 0; i < n; i++) {
		size_t len = strcspn(p, ",");
		rt_shard *sh = &ctx->shards[i];
		if (len == 0)
			return rt__fail(ctx, RT_EARG, "data %s: an empty file name in the list (the files "
			                "are separated by single commas)", list);
		if (!(sh->path = strndup(p, len)))
			return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
		ctx->nshards = i + 1;
		int fmt = rt__data_format_of(ctx, sh->path);
		if (i == 0)
			fmt0 = fmt;
		else if (fmt != fmt0)
			return rt__fail(ctx, RT_EARG,
			                "data %s: file %s is read as %s, %s as %s: the files of one stream "
			                "have one format (name them alike, or give --data-format)",
			                list, sh->path, fmt_name[fmt], ctx->shards[0].path, fmt_name[fmt0]);
		sh->start = ctx->ntok;
		ctx->tok_width = fmt_width[fmt];
		if ((rc = map_shard(ctx, sh, fmt)))
			return rc;
		ctx->ntok += sh->ntok;
		p += len + (p[len] == ',');
	}
	if (ctx->ntok < (uint64_t)ctx->train.seq + 1) {
		int w = ctx->tok_width;
		if (n == 1 && w == 1)
			return rt__fail(ctx, RT_EIO, "text file %s: %llu bytes, fewer than one sequence (seq "
			                "+ 1 = %lld bytes)", list, (unsigned long long)ctx->ntok,
			                (long long)ctx->train.seq + 1);
		return rt__fail(ctx, RT_EIO, "%s %s: %llu tokens, fewer than one sequence (seq + 1 = "
		                "%lld tokens)", n > 1 ? "data" : fmt_file[fmt0], list,
		                (unsigned long long)ctx->ntok, (long long)ctx->train.seq + 1);
	}
	return RT_OK;
}

/* What a rank's data is, as the ranks compare it. */
static void describe(char *buf, size_t len, uint64_t fmt, uint64_t sum)
{
	if (fmt == 0)
		snprintf(buf, len, "synthetic tokens");
	else if (fmt == RT_DATA_TEXT)
		snprintf(buf, len, "a text file of hash 0x%016llx", (unsigned long long)sum);
	else
		snprintf(buf, len, "%s tokens of hash 0x%016llx", fmt_name[fmt < 4 ? fmt : 0],
		         (unsigned long long)sum);
}

/* The stream's format (0: synthetic). */
static int stream_format(const rt_ctx *ctx)
{
	return !ctx->nshards ? 0 : ctx->tok_width == 1 ? RT_DATA_TEXT
	                     : ctx->tok_width == 2     ? RT_DATA_U16
	                                               : RT_DATA_U32;
}

/* Every rank's data and resume rule, compared once (an all-gather): a
 * rank given another --data would otherwise train the others on inputs
 * and targets of two sources, and exit 0; one given another
 * --data-position would resume at another sample. */
static int same_data(rt_ctx *ctx)
{
	enum { N = 3 };
	MPI_Request req;
	uint64_t mine[N] = {(uint64_t)stream_format(ctx), ctx->nshards ? ctx->data_sum : 0,
	                    (uint64_t)ctx->data_position};
	uint64_t *all = malloc((size_t)ctx->world * N * sizeof *all);
	int rc;
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "model: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(mine, N, MPI_UINT64_T, all, N, MPI_UINT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "model: comparing the ranks' data")))
		goto out;
	for (int r = 1; r < ctx->world; r++) {
		const uint64_t *o = all + r * N;
		if (o[0] != all[0] || o[1] != all[1]) {
			char a[80], b[80];
			describe(a, sizeof a, o[0], o[1]);
			describe(b, sizeof b, all[0], all[1]);
			rc = rt__fail(ctx, RT_EARG,
			              "model: rank %d and rank 0 train on different data (%s on rank %d, %s "
			              "on rank 0): every rank needs the same data files",
			              r, a, r, b);
			goto out;
		}
		if (o[2] != all[2]) {
			static const char *const rule[] = {"not given", "reset", "keep"};
			rc = rt__fail(ctx, RT_EARG,
			              "model: rank %d and rank 0 resume by different rules (--data-position "
			              "%s on rank %d, %s on rank 0): give every rank the same options",
			              r, rule[o[2] % 3], r, rule[all[2] % 3]);
			goto out;
		}
	}
out:
	free(all);
	return rc;
}

int rt__data_load(rt_ctx *ctx, const char *path)
{
	int rc;
	ctx->data_sum = RT_FNV_INIT;
	if (path && (rc = map_all(ctx, path)))
		goto out;
	if ((rc = same_data(ctx)))
		goto out;
	return RT_OK;
out:
	rt__data_free(ctx);
	return rc;
}

void rt__data_free(rt_ctx *ctx)
{
	for (int i = 0; i < ctx->nshards; i++) {
		rt_shard *sh = &ctx->shards[i];
		if (sh->map)
			munmap((void *)sh->map, sh->bytes);
		free(sh->path);
	}
	free(ctx->shards);
	ctx->shards = NULL;
	ctx->nshards = 0;
	ctx->ntok = 0;
	ctx->tok_width = 0;
	ctx->data_sum = 0;
	ctx->train.text_file = NULL;
}

void rt__data_swap(rt_ctx *ctx, rt_stream *s)
{
	rt_stream mine = {ctx->shards, ctx->nshards, ctx->tok_width, ctx->ntok, ctx->data_sum};
	ctx->shards = s->shards, ctx->nshards = s->nshards, ctx->tok_width = s->tok_width;
	ctx->ntok = s->ntok, ctx->data_sum = s->data_sum;
	*s = mine;
}

void rt__data_ident(const rt_ctx *ctx, char *buf, size_t len)
{
	if (!ctx->nshards)
		snprintf(buf, len, "synthetic");
	else
		snprintf(buf, len, "%s 0x%016llx", fmt_name[stream_format(ctx)],
		         (unsigned long long)ctx->data_sum);
}

int rt__data_resume(rt_ctx *ctx, const char *path, const char *ident, int64_t saved, int64_t *pos)
{
	char mine[64];
	rt__data_ident(ctx, mine, sizeof mine);
	*pos = ctx->data_position == RT_DATA_RESET ? 0 : saved;
	if (!strcmp(mine, ident) || ctx->data_position != RT_DATA_SAME)
		return RT_OK;
	return rt__fail(ctx, RT_ECKPT,
	                "checkpoint %s: data mismatch: the checkpoint was trained on %s, this run "
	                "reads %s: to continue on other data, give --data-position reset (from its "
	                "first sample) or keep (from sample %lld, the checkpoint's position)",
	                path, ident, mine, (long long)saved);
}

/* Copies n tokens of the stream from token `at` on into dst, across the
 * shards' boundaries. */
static void copy_tokens(const rt_ctx *ctx, uint64_t at, int64_t n, int32_t *dst)
{
	int lo = 0, hi = ctx->nshards - 1;
	while (lo < hi) { /* the last shard that starts at or before `at` */
		int mid = (lo + hi + 1) / 2;
		if (ctx->shards[mid].start <= at)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (int s = lo; n > 0; s++) {
		const rt_shard *sh = &ctx->shards[s];
		uint64_t i = at - sh->start, end = sh->ntok;
		for (; i < end && n > 0; i++, n--, at++)
			*dst++ = (int32_t)token_at(sh->map, ctx->tok_width, i);
	}
}

int rt_data_sample(const rt_ctx *ctx, int64_t sample, int32_t *tokens)
{
	if (!ctx || !ctx->have_model || !tokens || sample < 0)
		return RT_EARG;
	const rt_train *t = &ctx->train;
	int64_t w = t->seq + 1;
	for (int64_t b = 0; b < t->mbs; b++) {
		int32_t *row = tokens + b * w;
		if (ctx->nshards) {
			/* Sequence q of the data is window q mod nwin of the stream:
			 * seq + 1 tokens from q * seq (windows overlap by one token,
			 * the last input's target). */
			uint64_t nwin = (ctx->ntok - 1) / (uint64_t)t->seq;
			uint64_t q = (uint64_t)sample * (uint64_t)t->mbs + (uint64_t)b;
			copy_tokens(ctx, (q % nwin) * (uint64_t)t->seq, w, row);
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
