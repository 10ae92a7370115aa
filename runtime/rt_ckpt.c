/* rt_ckpt.c: checkpoints.  A save is one generation directory,
 * DIR/gen-NNNNNN, holding one file per global layer (layer-NNNN.ckpt:
 * header, parameters, AdamW moments) and a text manifest (step, data
 * position, seed, data source, every layer's kind, shape hash and size).
 * DIR/current names the committed generation; a load reads that one.
 *
 * A save is atomic for the whole job: rank 0 makes a new generation
 * beside the committed one, every rank writes and fsyncs its layers there,
 * the ranks agree (an all-reduce) that all of them did, rank 0 writes the
 * manifest, and then the one commit: DIR/current written to a temporary
 * file, fsynced and renamed over the old one by rank 0.  Until that rename
 * the committed save is untouched, so a rank that cannot write (a full
 * disk) or a crash anywhere leaves the previous save loadable; the old
 * generations are removed only after the commit.
 *
 * Files are keyed by the global layer index, not the rank, so a checkpoint
 * loads under any partition and any number of ranks.  Every header and
 * payload carries a checksum, every field that decides the meaning of the
 * numbers is compared with the model before anything is used, and every
 * number loaded or saved must be finite (and the second moments not
 * negative): a damaged, mismatched or poisoned checkpoint is RT_ECKPT
 * naming the file, the field or the layer and tensor. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers.h" /* RT_MAX_TENSORS */
#include "rt_exec.h"
#include "rt_internal.h"

#define CKPT_MAGIC "OCTOCKPT"
#define CKPT_VERSION 1
#define MANIFEST_MAGIC "octopipe-checkpoint"
#define GEN_PREFIX "gen-"
#define GEN_DIGITS 6
/* The highest generation gen_number reads back (15 digits). */
#define GEN_MAX 999999999999999ll
/* A checkpoint directory's path, with room under the file paths (4096)
 * for a generation and a file name. */
#define DIR_MAX 3968

/* The layer file header, little-endian as written by the machine. */
typedef struct ckpt_hdr {
	char magic[8];        /* "OCTOCKPT" */
	uint32_t version;     /* CKPT_VERSION */
	uint32_t kind;        /* rt_kind */
	int64_t layer;        /* global layer index */
	uint64_t shape_hash;  /* kind and tensor table (names, offsets, dims) */
	int64_t nparams;      /* floats per array */
	int64_t step;         /* optimizer steps taken */
	int64_t data_pos;     /* sample index of the next step's micro-batch 0 */
	uint64_t seed;
	uint64_t payload_sum; /* FNV-1a of params, m, v as stored */
	uint64_t header_sum;  /* FNV-1a of every byte above */
} ckpt_hdr;

_Static_assert(sizeof(ckpt_hdr) == 80, "checkpoint header layout");

static void layer_path(char *buf, size_t len, const char *dir, int64_t layer)
{
	snprintf(buf, len, "%s/layer-%04lld.ckpt", dir, (long long)layer);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	char *b = p;
	while (n) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Writes parts to path atomically: path.tmp, fsync, rename. */
static int write_atomic(rt_ctx *ctx, const char *path, int nparts, const void *const *parts,
                        const size_t *sizes)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	/* A new file: whatever has the name (a FIFO would block the open, a
	 * link would send the bytes elsewhere) goes first. */
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return rt__fail(ctx, RT_EIO, "checkpoint %s: %s", tmp, strerror(errno));
	for (int i = 0; i < nparts; i++)
		if (write_all(fd, parts[i], sizes[i])) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return rt__fail(ctx, RT_EIO, "checkpoint %s: write: %s", tmp, strerror(e));
		}
	if (fsync(fd) || close(fd)) {
		int e = errno;
		unlink(tmp);
		return rt__fail(ctx, RT_EIO, "checkpoint %s: fsync: %s", tmp, strerror(e));
	}
	if (rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return rt__fail(ctx, RT_EIO, "checkpoint %s: rename: %s", path, strerror(e));
	}
	return RT_OK;
}

/* Makes the renames durable. */
static int sync_dir(rt_ctx *ctx, const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0 || fsync(fd)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return rt__fail(ctx, RT_EIO, "checkpoint %s: fsync: %s", dir, strerror(e));
	}
	close(fd);
	return RT_OK;
}

/* Every number of layer l (its parameters, its whole moments m and v)
 * must be finite, and the second moments not negative (their square root
 * divides the update): else RT_ECKPT naming the file, the layer, the
 * tensor, the array and the element.  Checked on what is saved and on what
 * is loaded, so a NaN enters neither a save nor a run. */
static int check_numbers(rt_ctx *ctx, const char *path, const rt_lay *l, const float *m,
                         const float *v, const char *after)
{
	static const char *const what[3] = {"the parameters", "the AdamW first moment (m)",
	                                    "the AdamW second moment (v)"};
	const float *arr[3] = {l->p, m, v};
	for (int a = 0; a < 3; a++)
		for (int64_t i = 0; i < l->sz.params; i++) {
			float x = arr[a][i];
			if (isfinite(x) && !(a == 2 && x < 0))
				continue;
			const char *name = "?";
			int64_t at = i;
			int n = 0;
			rt_layer_ntensors(&l->desc, &n);
			for (int k = 0; k < n; k++) {
				rt_tensor_info ti;
				int64_t sz = 1;
				if (rt_layer_tensor(&l->desc, k, &ti))
					continue;
				for (int d = 0; d < ti.ndim; d++)
					sz *= ti.dim[d];
				if (i >= ti.offset && i < ti.offset + sz) {
					name = ti.name;
					at = i - ti.offset;
				}
			}
			return rt__fail(ctx, RT_ECKPT,
			                "checkpoint %s: layer %lld (%s), tensor %s: element %lld of %s is %s%s",
			                path, (long long)l->index, rt__kind_name(l->desc.kind), name,
			                (long long)at, what[a],
			                isnan(x) ? "NaN" : isinf(x) ? "infinite" : "negative", after);
		}
	return RT_OK;
}

/* Layer l's file, with its whole moments m and v (rt__dp_moments). */
static int save_layer(rt_ctx *ctx, const char *dir, const rt_lay *l, const float *m,
                      const float *v)
{
	char path[4096];
	size_t pb = (size_t)l->sz.params * sizeof(float);
	ckpt_hdr h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, CKPT_MAGIC, 8);
	h.version = CKPT_VERSION;
	h.kind = (uint32_t)l->desc.kind;
	h.layer = l->index;
	h.shape_hash = l->shape_hash;
	h.nparams = l->sz.params;
	h.step = ctx->step;
	h.data_pos = ctx->data_pos;
	h.seed = ctx->train.seed;
	h.payload_sum = rt__fnv(rt__fnv(rt__fnv(RT_FNV_INIT, l->p, pb), m, pb), v, pb);
	h.header_sum = rt__fnv(RT_FNV_INIT, &h, offsetof(ckpt_hdr, header_sum));
	layer_path(path, sizeof path, dir, l->index);
	int rc = check_numbers(ctx, path, l, m, v, " (not saved)");
	if (rc)
		return rc;
	const void *parts[4] = {&h, l->p, m, v};
	size_t sizes[4] = {sizeof h, pb, pb, pb};
	return write_atomic(ctx, path, 4, parts, sizes);
}

/* The manifest's layer line: index, kind, shape hash, parameter count. */
typedef struct man_layer {
	uint64_t index, kind, shape, nparams;
} man_layer;

static int cmp_layer(const void *a, const void *b)
{
	const man_layer *x = a, *y = b;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Rank 0: gathers every rank's layers, checks that they make the whole
 * model, and writes the manifest. */
static int save_manifest(rt_ctx *ctx, const char *dir)
{
	char path[4096];
	MPI_Request req;
	/* replica 0's layers stand for every replica's */
	int rc = RT_OK, mine = ctx->train.replica == 0 ? 4 * ctx->nlay : 0, total = 0;
	int *counts = NULL, *displs = NULL;
	man_layer *all = NULL, *loc = NULL;
	char *text = NULL, ident[64];
	size_t len = 0, cap = 0;

	rt__data_ident(ctx, ident, sizeof ident);
	if (ctx->rank == 0 &&
	    (!(counts = calloc((size_t)ctx->world, sizeof *counts)) ||
	     !(displs = calloc((size_t)ctx->world, sizeof *displs)))) {
		rc = rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	if ((rc = rt__coll(ctx, MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &req),
	                   &req, "checkpoint")))
		goto out;
	if (ctx->rank == 0) {
		for (int r = 0; r < ctx->world; r++) {
			displs[r] = total;
			total += counts[r];
		}
		if (!(all = malloc((size_t)(total ? total : 1) * sizeof(uint64_t)))) {
			rc = rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
			goto out;
		}
	}
	if (!(loc = malloc((size_t)(ctx->nlay ? ctx->nlay : 1) * sizeof *loc))) {
		rc = rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	for (int i = 0; i < ctx->nlay; i++)
		loc[i] = (man_layer){(uint64_t)ctx->lay[i].index, (uint64_t)ctx->lay[i].desc.kind,
		                     ctx->lay[i].shape_hash, (uint64_t)ctx->lay[i].sz.params};
	if ((rc = rt__coll(ctx, MPI_Igatherv(loc, mine, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T,
	                                     0, MPI_COMM_WORLD, &req),
	                   &req, "checkpoint")))
		goto out;
	if (ctx->rank != 0)
		goto out;

	int n = total / 4;
	qsort(all, (size_t)n, sizeof *all, cmp_layer);
	for (int i = 0; i < n; i++)
		if (all[i].index != (uint64_t)i) {
			rc = rt__fail(ctx, RT_ECKPT,
			              "checkpoint %s: the ranks hold layer %llu %s: a checkpoint needs "
			              "every layer of the model exactly once",
			              dir, (unsigned long long)(all[i].index > (uint64_t)i ? (uint64_t)i : all[i].index),
			              all[i].index > (uint64_t)i ? "on no rank" : "twice");
			goto out;
		}
	if (n != ctx->train.nlayers) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: the ranks hold %d of the model's %lld layers",
		              dir, n, (long long)ctx->train.nlayers);
		goto out;
	}
	for (int pass = 0; pass < 2; pass++) {
		/* Pass 0 measures, pass 1 writes. */
		len = 0;
#define OUT(...)                                                                      \
	len += (size_t)snprintf(text ? text + len : NULL, text ? cap - len : 0, __VA_ARGS__)
		OUT("%s %d\n", MANIFEST_MAGIC, CKPT_VERSION);
		OUT("step %lld\n", (long long)ctx->step);
		OUT("data_pos %lld\n", (long long)ctx->data_pos);
		OUT("seed %llu\n", (unsigned long long)ctx->train.seed);
		OUT("data %s\n", ident);
		OUT("layers %d\n", n);
		for (int i = 0; i < n; i++)
			OUT("layer %llu %s 0x%016llx %llu\n", (unsigned long long)all[i].index,
			    rt__kind_name((rt_kind)all[i].kind), (unsigned long long)all[i].shape,
			    (unsigned long long)all[i].nparams);
		if (pass == 1) {
			uint64_t sum = rt__fnv(RT_FNV_INIT, text, len);
			OUT("checksum 0x%016llx\n", (unsigned long long)sum);
		} else {
			cap = len + 64;
			if (!(text = malloc(cap))) {
				rc = rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
				goto out;
			}
		}
#undef OUT
	}
	snprintf(path, sizeof path, "%s/manifest", dir);
	const void *parts[1] = {text};
	size_t sizes[1] = {len};
	if ((rc = write_atomic(ctx, path, 1, parts, sizes)))
		goto out;
	rc = sync_dir(ctx, dir);
out:
	free(text);
	free(loc);
	free(all);
	free(displs);
	free(counts);
	return rc;
}

/* ---- generations and the commit ---------------------------------------------- */

static void gen_path(char *buf, size_t len, const char *dir, long long gen)
{
	snprintf(buf, len, "%s/" GEN_PREFIX "%0*lld", dir, GEN_DIGITS, gen);
}

/* A directory path the file paths have room for. */
static int check_dir_arg(rt_ctx *ctx, const char *dir)
{
	if (strlen(dir) >= DIR_MAX - 32)
		return rt__fail(ctx, RT_EARG, "checkpoint: a directory path of %zu bytes (at most %d)",
		                strlen(dir), DIR_MAX - 33);
	return RT_OK;
}

/* The generation a directory entry names, or -1: "gen-" and digits only. */
static long long gen_number(const char *name)
{
	if (strncmp(name, GEN_PREFIX, strlen(GEN_PREFIX)))
		return -1;
	const char *d = name + strlen(GEN_PREFIX);
	long long n = 0;
	if (strlen(d) < GEN_DIGITS || strlen(d) > 15)
		return -1;
	for (; *d; d++) {
		if (*d < '0' || *d > '9')
			return -1;
		n = 10 * n + (*d - '0');
	}
	return n;
}

/* The committed generation: DIR/current holds its name and a newline, and
 * nothing else.  *gen = -1 when there is no DIR/current. */
static int read_current(rt_ctx *ctx, const char *dir, long long *gen)
{
	char path[4096], buf[64];
	*gen = -1;
	struct stat st;
	snprintf(path, sizeof path, "%s/current", dir);
	int fd = rt__open_regular(path, &st);
	if (fd == -2)
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: not a regular file (%s)", path,
		                rt__file_kind(&st));
	if (fd < 0) {
		if (errno == ENOENT && lstat(path, &st))
			return RT_OK;
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: %s%s", path, strerror(errno),
		                errno == ENOENT ? " (a symbolic link to nothing)" : "");
	}
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n > 1 && buf[n - 1] == '\n') {
		buf[n - 1] = 0;
		if (!strchr(buf, '\n') && (*gen = gen_number(buf)) >= 0)
			return RT_OK;
	}
	*gen = -1;
	return rt__fail(ctx, RT_ECKPT,
	                "checkpoint %s: damaged: expected the name of a generation (" GEN_PREFIX
	                "NNNNNN) and a newline", path);
}

/* Rank 0: the new generation's directory, numbered above every one in
 * DIR (committed or left by a failed save), so nothing existing is
 * touched.  Creates DIR if missing. */
static int make_gen(rt_ctx *ctx, const char *dir, long long *gen)
{
	char path[4096];
	long long top = 0;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return rt__fail(ctx, RT_EIO, "checkpoint %s: mkdir: %s", dir, strerror(errno));
	DIR *d = opendir(dir);
	if (!d)
		return rt__fail(ctx, RT_EIO, "checkpoint %s: %s", dir, strerror(errno));
	for (struct dirent *e; (e = readdir(d));) {
		long long g = gen_number(e->d_name);
		if (g > top)
			top = g;
	}
	closedir(d);
	if (top >= GEN_MAX)
		/* A save numbered past it would commit a `current` no load reads. */
		return rt__fail(ctx, RT_EIO,
		                "checkpoint %s: " GEN_PREFIX "%lld exists, and generations are numbered "
		                "up to %lld: remove it, or save to another directory", dir, top, GEN_MAX);
	*gen = top + 1;
	gen_path(path, sizeof path, dir, *gen);
	if (mkdir(path, 0755))
		return rt__fail(ctx, RT_EIO, "checkpoint %s: mkdir: %s", path, strerror(errno));
	return RT_OK;
}

/* A name a save writes in a generation: layer-NNNN.ckpt, the manifest,
 * and their temporaries (NAME.tmp). */
static bool own_file(const char *name)
{
	size_t n = strlen(name);
	if (n > 4 && !strcmp(name + n - 4, ".tmp"))
		n -= 4;
	if (n == 8 && !strncmp(name, "manifest", 8))
		return true;
	if (n < 11 || strncmp(name, "layer-", 6) || strncmp(name + n - 5, ".ckpt", 5))
		return false;
	for (size_t i = 6; i < n - 5; i++)
		if (name[i] < '0' || name[i] > '9')
			return false;
	return true;
}

/* Removes generation gen of DIR: the files a save writes there, then the
 * directory if that leaves it empty.  Only a real directory (a symbolic
 * link named like a generation is not followed: its target is not this
 * checkpoint's), and nothing else in it: what a save did not write is not
 * its to delete.  Best effort: whatever stays is removed by the next save,
 * and no load reads it. */
static void remove_gen(const char *dir, long long gen)
{
	char path[4096], file[4400];
	struct stat st;
	gen_path(path, sizeof path, dir, gen);
	if (lstat(path, &st) || !S_ISDIR(st.st_mode))
		return;
	DIR *gd = opendir(path);
	if (gd) {
		for (struct dirent *f; (f = readdir(gd));)
			if (own_file(f->d_name)) {
				snprintf(file, sizeof file, "%s/%s", path, f->d_name);
				if (!lstat(file, &st) && !S_ISDIR(st.st_mode))
					unlink(file);
			}
		closedir(gd);
	}
	rmdir(path);
}

/* Newest first. */
static int cmp_gen(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether generation g holds a manifest: a complete save (the manifest
 * is written after every layer, and renamed into place). */
static bool complete_gen(const char *dir, long long g)
{
	char path[DIR_MAX + 16];
	struct stat st;
	gen_path(path, sizeof path - 16, dir, g);
	strcat(path, "/manifest");
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Rank 0, after the commit: every generation but the committed one and
 * the newest keep - 1 complete ones below it goes (older saves, and what
 * failed saves left). */
static void remove_old(const char *dir, long long cur, int64_t keep)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	long long *gens = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *e; (e = readdir(d));) {
		long long g = gen_number(e->d_name);
		if (g < 0 || g == cur)
			continue;
		if (n == cap) {
			long long *ng = realloc(gens, (cap = cap ? 2 * cap : 16) * sizeof *ng);
			if (!ng)
				break; /* best effort: the next save removes what stays */
			gens = ng;
		}
		gens[n++] = g;
	}
	closedir(d);
	if (n) /* gens is NULL when there is none */
		qsort(gens, n, sizeof *gens, cmp_gen);
	int64_t kept = 1;
	for (size_t i = 0; i < n; i++) /* newest first */
		if (gens[i] < cur && kept < keep && complete_gen(dir, gens[i]))
			kept++;
		else
			remove_gen(dir, gens[i]);
	free(gens);
}

/* A save that failed on some rank (every rank returns rc, with its own
 * message): rank 0 removes its generation, so that a full disk is not
 * fuller for the next try -- unless the commit's rename happened and only
 * what came after it failed --, and no rank returns before that (the
 * first to return ends the job).  Collective. */
static int failed(rt_ctx *ctx, const char *dir, long long gen, int rc)
{
	MPI_Request req;
	char why[sizeof ctx->err];
	long long cur;
	snprintf(why, sizeof why, "%s", ctx->err);
	if (ctx->rank == 0 && !read_current(ctx, dir, &cur) && cur != gen)
		remove_gen(dir, gen);
	rt__coll(ctx, MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "checkpoint");
	snprintf(ctx->err, sizeof ctx->err, "%s", why);
	return rc;
}

/* Rank 0: the commit, DIR/current naming generation gen, atomically. */
static int commit(rt_ctx *ctx, const char *dir, long long gen)
{
	char path[4096], name[64];
	int len = snprintf(name, sizeof name, GEN_PREFIX "%0*lld\n", GEN_DIGITS, gen);
	snprintf(path, sizeof path, "%s/current", dir);
	const void *parts[1] = {name};
	size_t sizes[1] = {(size_t)len};
	int rc = write_atomic(ctx, path, 1, parts, sizes);
	return rc ? rc : sync_dir(ctx, dir);
}

/* The outcome of one phase of a save (or of the check before one) on every
 * rank (collective): RT_OK when every rank's rc is; else this rank's own rc
 * and message when it failed, or RT_ECKPT naming the lowest rank that did,
 * with that rank's message (whichever rank ends the job first, its message
 * says what went wrong). */
static int agree(rt_ctx *ctx, int rc, const char *dir, bool saving, const char *what)
{
	MPI_Request req;
	int mine = rc ? ctx->rank : ctx->world, first = ctx->world;
	char why[sizeof ctx->err];
	snprintf(why, sizeof why, "%s", ctx->err);
	int crc = rt__coll(ctx, MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req),
	                   &req, "checkpoint");
	if (!crc && first < ctx->world)
		crc = rt__coll(ctx, MPI_Ibcast(why, (int)sizeof why, MPI_CHAR, first, MPI_COMM_WORLD, &req),
		               &req, "checkpoint");
	if (rc) {
		if (ctx->rank == first)
			snprintf(ctx->err, sizeof ctx->err, "%s", why);
		return rc;
	}
	if (crc)
		return crc;
	if (first < ctx->world) {
		why[sizeof why - 1] = 0;
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: %srank %d could not %s%s: %s", dir,
		                saving ? "not saved: " : "", first, what,
		                saving ? " (the last committed save, if any, is untouched)" : "", why);
	}
	return RT_OK;
}

int rt_ckpt_check(rt_ctx *ctx, const char *dir)
{
	char path[4096];
	struct stat st;
	int rc = RT_OK;
	if (!ctx || !dir)
		return RT_EARG;
	if ((rc = check_dir_arg(ctx, dir)))
		return rc;
	if (ctx->rank == 0 && mkdir(dir, 0755) && errno != EEXIST)
		rc = rt__fail(ctx, RT_EIO, "checkpoint %s: cannot create the directory: %s", dir,
		              strerror(errno));
	if ((rc = agree(ctx, rc, dir, false, "create the directory")))
		return rc;
	/* Every rank writes a file there, as a save will. */
	snprintf(path, sizeof path, "%s/.probe-rank%d", dir, ctx->rank);
	int fd = -1;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode))
		rc = rt__fail(ctx, RT_EIO, "checkpoint %s: not a directory", dir);
	else if (unlink(path), (fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0 ||
	         write_all(fd, "", 1))
		rc = rt__fail(ctx, RT_EIO, "checkpoint %s: cannot write there: %s", dir, strerror(errno));
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	return agree(ctx, rc, dir, false, "write to the directory");
}

/* rt__dp_moments's: replica 0 writes the layer (replicas hold the same). */
static int save_cb(rt_ctx *ctx, int h, const float *m, const float *v, void *dir)
{
	if (ctx->train.replica != 0)
		return RT_OK;
	return save_layer(ctx, dir, &ctx->lay[h], m, v);
}

int rt_ckpt_save(rt_ctx *ctx, const char *dir)
{
	return rt_ckpt_save_keep(ctx, dir, 1);
}

int rt_ckpt_save_keep(rt_ctx *ctx, const char *dir, int64_t keep)
{
	MPI_Request req;
	char gdir[DIR_MAX];
	long long gen = 0;
	int rc = RT_OK;
	if (!ctx || !dir)
		return RT_EARG;
	if (keep < 1)
		return rt__fail(ctx, RT_EARG, "rt_ckpt_save: keep %lld saves: at least 1",
		                (long long)keep);
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_ckpt_save: rt_model_init has not been called");
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_ckpt_save: inside step %lld", rt__step_no(ctx));
	if ((rc = check_dir_arg(ctx, dir)))
		return rc;
	if ((rc = rt__comm_drain(ctx)) || (rc = ctx->exec->pull(ctx)))
		return rc;
	int64_t t0 = rt__now_ns();

	/* The new generation, beside the committed one. */
	if (ctx->rank == 0)
		rc = make_gen(ctx, dir, &gen);
	if ((rc = agree(ctx, rc, dir, true, "make the new save's directory")))
		return rc;
	if ((rc = rt__coll(ctx, MPI_Ibcast(&gen, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &req), &req,
	                   "checkpoint")))
		return rc;
	gen_path(gdir, sizeof gdir, dir, gen);

	/* Every rank's layers, synced; then every rank knows they all are.
	 * Replicas hold the same layers: replica 0 writes them, with the
	 * moments whole (with the distributed optimizer every replica takes
	 * part in gathering them, a bucket at a time). */
	rc = rt__dp_moments(ctx, save_cb, gdir);
	if (!rc)
		rc = sync_dir(ctx, gdir);
	if ((rc = agree(ctx, rc, dir, true, "write its layers")))
		return failed(ctx, dir, gen, rc);

	/* The manifest, then the commit: one rename on rank 0. */
	rc = save_manifest(ctx, gdir);
	if (!rc && ctx->rank == 0)
		rc = commit(ctx, dir, gen);
	if ((rc = agree(ctx, rc, dir, true, "write the manifest or commit the save")))
		return failed(ctx, dir, gen, rc);
	if (ctx->rank == 0)
		remove_old(dir, gen, keep);
	rt__trace(ctx, "ckpt", t0, -1, -1, -1, 0);
	return RT_OK;
}

/* ---- load ------------------------------------------------------------------ */

typedef struct manifest {
	long long step, data_pos;
	unsigned long long seed;
	char data[64];   /* the data's identity (rt__data_ident) */
	int64_t resume_pos; /* the data position to go on from (rt__data_resume) */
	long long nlayers;
	man_layer *layers; /* [nlayers] */
	unsigned long long sum; /* the manifest's checksum: which save */
} manifest;

/* A manifest is small: a line per layer (at most 2^24 of them). */
#define MANIFEST_MAX (64ll << 24)

/* The manifest's bytes; NULL with the reason in *why (errno's, or what the
 * file is when it is not a regular file of a manifest's size). */
static char *slurp(const char *path, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	char *buf = NULL;
	int fd = rt__open_regular(path, &st);
	if (fd < 0) {
		snprintf(why, whylen, fd == -2 ? "not a regular file (%s)" : "%s",
		         fd == -2 ? rt__file_kind(&st) : strerror(errno));
		return NULL;
	}
	if (st.st_size > MANIFEST_MAX) {
		snprintf(why, whylen, "%lld bytes: too large for a manifest (at most %lld)",
		         (long long)st.st_size, MANIFEST_MAX);
		goto out;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	if (read_all(fd, buf, (size_t)st.st_size)) {
		snprintf(why, whylen, "read: %s", errno ? strerror(errno) : "the file shrank");
		free(buf);
		buf = NULL;
		goto out;
	}
	buf[st.st_size] = 0;
	*len = (size_t)st.st_size;
out:
	close(fd);
	return buf;
}

static int bad_manifest(rt_ctx *ctx, const char *path, int line, const char *what)
{
	return rt__fail(ctx, RT_ECKPT, "checkpoint %s: line %d: %s", path, line, what);
}

static int read_manifest(rt_ctx *ctx, const char *dir, manifest *m)
{
	char path[4096];
	char why[256];
	size_t len = 0;
	int rc = RT_OK;
	snprintf(path, sizeof path, "%s/manifest", dir);
	char *text = slurp(path, &len, why, sizeof why);
	if (!text)
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: %s", path, why);
	if (strlen(text) != len) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: not a manifest (binary data)", path);
		goto out;
	}
	/* The checksum line covers every byte before it. */
	char *cs = strstr(text, "\nchecksum 0x");
	unsigned long long sum;
	char tail;
	if (!cs || sscanf(cs + 1, "checksum 0x%llx%c", &sum, &tail) != 2 || tail != '\n' ||
	    (size_t)(cs + 1 - text) + 28 != len) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: damaged or truncated (no final checksum line)",
		              path);
		goto out;
	}
	m->sum = sum;
	if (rt__fnv(RT_FNV_INIT, text, (size_t)(cs + 1 - text)) != sum) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: checksum mismatch: the file is damaged", path);
		goto out;
	}
	char *save = NULL, *line = strtok_r(text, "\n", &save);
	int ln = 1, version = 0, nread = 0;
	char kind[32];
	if (!line || sscanf(line, MANIFEST_MAGIC " %d", &version) != 1) {
		rc = bad_manifest(ctx, path, ln, "not an OctoPipe checkpoint manifest");
		goto out;
	}
	if (version != CKPT_VERSION) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: version %d, this runtime reads version %d",
		              path, version, CKPT_VERSION);
		goto out;
	}
	m->nlayers = -1;
	while ((line = strtok_r(NULL, "\n", &save))) {
		ln++;
		unsigned long long a, b, c;
		long long v;
		if (sscanf(line, "step %lld", &v) == 1)
			m->step = v;
		else if (sscanf(line, "data_pos %lld", &v) == 1)
			m->data_pos = v;
		else if (sscanf(line, "seed %llu", &a) == 1)
			m->seed = a;
		else if (strcmp(line, "data synthetic") == 0)
			snprintf(m->data, sizeof m->data, "synthetic");
		else if (sscanf(line, "data %7[a-z0-9] 0x%llx", kind, &a) == 2)
			snprintf(m->data, sizeof m->data, "%s 0x%016llx", kind, a);
		else if (sscanf(line, "layers %lld", &v) == 1 && m->nlayers < 0 && v > 0 && v < (1 << 24)) {
			m->nlayers = v;
			if (!(m->layers = calloc((size_t)v, sizeof *m->layers))) {
				rc = rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
				goto out;
			}
		} else if (sscanf(line, "layer %llu %31s 0x%llx %llu", &a, kind, &b, &c) == 4 &&
		           m->nlayers >= 0 && a == (unsigned long long)nread && nread < m->nlayers) {
			int k = 0;
			while (k < RT_NKINDS && strcmp(rt__kind_name((rt_kind)k), kind))
				k++;
			m->layers[nread++] = (man_layer){a, (uint64_t)k, b, c};
		} else if (strncmp(line, "checksum ", 9) == 0) {
			break;
		} else {
			rc = bad_manifest(ctx, path, ln, "unexpected line");
			goto out;
		}
	}
	if (m->nlayers < 0 || nread != m->nlayers) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: layer table incomplete", path);
		goto out;
	}
out:
	free(text);
	return rc;
}

static int check_manifest(rt_ctx *ctx, const char *dir, manifest *m)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest", dir);
	if (m->nlayers != ctx->train.nlayers)
		return rt__fail(ctx, RT_ECKPT,
		                "checkpoint %s: model mismatch: the checkpoint has %lld layers, the "
		                "model %lld", path, m->nlayers, (long long)ctx->train.nlayers);
	if (m->seed != ctx->train.seed)
		return rt__fail(ctx, RT_ECKPT,
		                "checkpoint %s: seed mismatch: the checkpoint was trained with seed %llu, "
		                "this run has seed %llu (the data would differ)", path, m->seed,
		                (unsigned long long)ctx->train.seed);
	if (m->step < 0 || m->data_pos < 0)
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: negative step or data position", path);
	if (m->step > RT_MAX_COUNT || m->data_pos > RT_MAX_COUNT)
		return rt__fail(ctx, RT_ECKPT,
		                "checkpoint %s: step %lld, data position %lld: beyond what this runtime "
		                "counts to (2^62)", path, m->step, m->data_pos);
	if (!m->data[0])
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: no data line", path);
	int rc = rt__data_resume(ctx, path, m->data, m->data_pos, &m->resume_pos);
	if (rc)
		return rc;
	for (int i = 0; i < ctx->nlay; i++) {
		const rt_lay *l = &ctx->lay[i];
		const man_layer *e = &m->layers[l->index];
		layer_path(path, sizeof path, dir, l->index);
		if (e->kind != (uint64_t)l->desc.kind || e->shape != l->shape_hash ||
		    e->nparams != (uint64_t)l->sz.params)
			return rt__fail(ctx, RT_ECKPT,
			                "checkpoint %s: shape mismatch: the checkpoint has a %s layer of %llu "
			                "parameters (shape 0x%016llx), the model's layer %lld is a %s layer "
			                "of %lld parameters (shape 0x%016llx)%s",
			                path, rt__kind_name((rt_kind)e->kind),
			                (unsigned long long)e->nparams, (unsigned long long)e->shape,
			                (long long)l->index, rt__kind_name(l->desc.kind), (long long)l->sz.params,
			                (unsigned long long)l->shape_hash,
			                e->kind == RT_HEAD && l->desc.kind == RT_HEAD &&
			                        e->nparams == (uint64_t)l->sz.params
			                    ? " (does tie_embeddings differ? a tied head holds the table "
			                      "[vocab][hidden], an untied one w [hidden][vocab])"
			                    : "");
	}
	return RT_OK;
}

/* Layer l from its file: the parameters, and of the whole moments the
 * part the layer holds ([mlo, mhi); the file is checked whole). */
static int load_layer(rt_ctx *ctx, const char *dir, const manifest *m, rt_lay *l)
{
	char path[4096];
	size_t pb = (size_t)l->sz.params * sizeof(float);
	ckpt_hdr h;
	struct stat st;
	int rc = RT_OK;
	bool whole = l->mlo == 0 && l->mhi == l->sz.params;
	float *fm = l->m, *fv = l->v;
	if (!whole && (!(fm = malloc(pb ? pb : 1)) || !(fv = malloc(pb ? pb : 1)))) {
		free(fm);
		return rt__fail(ctx, RT_ENOMEM, "checkpoint: layer %lld: out of memory",
		                (long long)l->index);
	}
	layer_path(path, sizeof path, dir, l->index);
	int fd = rt__open_regular(path, &st);
	if (fd == -2) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: not a regular file (%s)", path,
		              rt__file_kind(&st));
		goto out_free;
	}
	if (fd < 0) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: %s", path, strerror(errno));
		goto out_free;
	}
	if (read_all(fd, &h, sizeof h)) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: truncated: no header", path);
		goto out;
	}
	if (memcmp(h.magic, CKPT_MAGIC, 8)) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: not an OctoPipe layer checkpoint (bad magic)",
		              path);
		goto out;
	}
	if (h.header_sum != rt__fnv(RT_FNV_INIT, &h, offsetof(ckpt_hdr, header_sum))) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: header checksum mismatch: the file is damaged",
		              path);
		goto out;
	}
	if (h.version != CKPT_VERSION) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: version %u, this runtime reads version %d",
		              path, h.version, CKPT_VERSION);
		goto out;
	}
	if (h.layer != l->index) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: holds layer %lld, not %lld", path,
		              (long long)h.layer, (long long)l->index);
		goto out;
	}
	if (h.kind != (uint32_t)l->desc.kind || h.shape_hash != l->shape_hash ||
	    h.nparams != l->sz.params) {
		rc = rt__fail(ctx, RT_ECKPT,
		              "checkpoint %s: shape mismatch: the file holds a %s layer of %lld "
		              "parameters (shape 0x%016llx), the model's layer %lld is a %s layer of "
		              "%lld parameters (shape 0x%016llx)",
		              path, rt__kind_name((rt_kind)h.kind), (long long)h.nparams,
		              (unsigned long long)h.shape_hash, (long long)l->index,
		              rt__kind_name(l->desc.kind), (long long)l->sz.params,
		              (unsigned long long)l->shape_hash);
		goto out;
	}
	if (h.step != m->step || h.data_pos != m->data_pos || h.seed != m->seed) {
		rc = rt__fail(ctx, RT_ECKPT,
		              "checkpoint %s: from step %lld (data position %lld, seed %llu), but the "
		              "manifest says step %lld (%lld, %llu): files of two saves are mixed",
		              path, (long long)h.step, (long long)h.data_pos, (unsigned long long)h.seed,
		              m->step, m->data_pos, m->seed);
		goto out;
	}
	if ((uint64_t)st.st_size != sizeof h + 3 * (uint64_t)pb) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: %lld bytes, expected %llu: the file is %s",
		              path, (long long)st.st_size, (unsigned long long)(sizeof h + 3 * pb),
		              (uint64_t)st.st_size < sizeof h + 3 * pb ? "truncated" : "damaged");
		goto out;
	}
	if (read_all(fd, l->p, pb) || read_all(fd, fm, pb) || read_all(fd, fv, pb)) {
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: read: %s", path, strerror(errno));
		goto out;
	}
	if (rt__fnv(rt__fnv(rt__fnv(RT_FNV_INIT, l->p, pb), fm, pb), fv, pb) != h.payload_sum)
		rc = rt__fail(ctx, RT_ECKPT, "checkpoint %s: checksum mismatch: the file is damaged", path);
	else if (!(rc = check_numbers(ctx, path, l, fm, fv, "")) && !whole) {
		memcpy(l->m, fm + l->mlo, rt__mom_bytes(l));
		memcpy(l->v, fv + l->mlo, rt__mom_bytes(l));
	}
out:
	close(fd);
out_free:
	if (!whole) {
		free(fm);
		free(fv);
	}
	return rc;
}

/* The directory of the committed save: the generation DIR/current names.
 * A DIR without `current` but with a manifest holds a save of an earlier
 * runtime (one generation, in place). */
static int committed_dir(rt_ctx *ctx, const char *dir, char *out, size_t len)
{
	struct stat st;
	long long gen;
	int rc = read_current(ctx, dir, &gen);
	if (rc)
		return rc;
	if (gen >= 0) {
		gen_path(out, len, dir, gen);
		if (stat(out, &st) || !S_ISDIR(st.st_mode))
			return rt__fail(ctx, RT_ECKPT, "checkpoint %s/current names %s, which is missing",
			                dir, out);
		return RT_OK;
	}
	snprintf(out, len, "%s/manifest", dir);
	if (stat(out, &st) == 0) {
		snprintf(out, len, "%s", dir);
		return RT_OK;
	}
	if (stat(dir, &st))
		return rt__fail(ctx, RT_ECKPT, "checkpoint %s: %s", dir, strerror(errno));
	return rt__fail(ctx, RT_ECKPT, "checkpoint %s: no committed save there (no %s/current)", dir,
	                dir);
}

/* Every rank loaded the same save (one all-gather of the manifest's
 * checksum, step and data position): ranks that read two saves -- a
 * concurrent save's commit between their reads, directories of the same
 * name on two nodes -- would train from two steps and two data positions
 * and exit 0.  Collective: every rank that loads reaches it, or has failed
 * and ends the job. */
static int same_save(rt_ctx *ctx, const char *dir, const manifest *m)
{
	MPI_Request req;
	uint64_t mine[3] = {m->sum, (uint64_t)m->step, (uint64_t)m->data_pos};
	uint64_t *all = malloc((size_t)ctx->world * 3 * sizeof *all);
	int rc;
	if (!all)
		return rt__fail(ctx, RT_ENOMEM, "checkpoint: out of memory");
	if ((rc = rt__coll(ctx, MPI_Iallgather(mine, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T,
	                                       MPI_COMM_WORLD, &req),
	                   &req, "checkpoint: comparing the ranks' saves")))
		goto out;
	for (int r = 1; r < ctx->world; r++)
		if (memcmp(all + 3 * r, all, 3 * sizeof *all)) {
			rc = rt__fail(ctx, RT_ECKPT,
			              "checkpoint %s: rank %d and rank 0 loaded different saves (step %llu, "
			              "manifest checksum 0x%016llx on rank %d; step %llu, 0x%016llx on rank "
			              "0): a save committed while they read, or not one directory for all "
			              "ranks",
			              dir, r, (unsigned long long)all[3 * r + 1],
			              (unsigned long long)all[3 * r], r, (unsigned long long)all[1],
			              (unsigned long long)all[0]);
			goto out;
		}
out:
	free(all);
	return rc;
}

int rt_ckpt_load(rt_ctx *ctx, const char *dir_arg)
{
	manifest m;
	char dir[DIR_MAX];
	int rc;
	if (!ctx || !dir_arg)
		return RT_EARG;
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_ckpt_load: rt_model_init has not been called");
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_ckpt_load: inside step %lld", rt__step_no(ctx));
	if ((rc = check_dir_arg(ctx, dir_arg)))
		return rc;
	int64_t t0 = rt__now_ns();
	memset(&m, 0, sizeof m);
	if ((rc = committed_dir(ctx, dir_arg, dir, sizeof dir)))
		return rc;
	if ((rc = read_manifest(ctx, dir, &m)) || (rc = check_manifest(ctx, dir, &m)))
		goto out;
	for (int i = 0; i < ctx->nlay; i++)
		if ((rc = load_layer(ctx, dir, &m, &ctx->lay[i]))) {
			/* Leave no half-loaded model behind: start over from init. */
			for (int j = 0; j <= i; j++) {
				rt_lay *l = &ctx->lay[j];
				rt_layer_init(&l->desc, ctx->train.seed, l->index, l->p);
				memset(l->m, 0, rt__mom_bytes(l));
				memset(l->v, 0, rt__mom_bytes(l));
			}
			goto out;
		}
	if ((rc = same_save(ctx, dir_arg, &m)))
		goto out;
	for (int i = 0; i < ctx->nlay; i++) {
		rt_lay *l = &ctx->lay[i];
		memset(l->g, 0, (size_t)l->sz.params * sizeof(float));
		if (l->acc)
			memset(l->acc, 0, (size_t)l->sz.params * RT_EXACT_DIGITS * sizeof(int64_t));
	}
	if ((rc = ctx->exec->upload(ctx)))
		goto out;
	ctx->step = m.step;
	ctx->data_pos = m.resume_pos;
	rt__trace(ctx, "ckpt", t0, -1, -1, -1, 0);
out:
	free(m.layers);
	return rc;
}
