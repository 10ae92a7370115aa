/* rt_profile.c: profiling mode.  Every rank times F, B and W of each of its
 * layers on one micro-batch of the training shape (inputs: the data's
 * sample 0 for the embedding and the head, a fixed pseudo-random
 * activation and gradient elsewhere), `warmup` untimed runs then
 * `repeats` timed ones in five sweeps over the layers, and takes the
 * median of each phase: once hot (F, B and W back to back, the layer's
 * data in the cache) and once cold (before each phase, writing a buffer of
 * eight times the per-core cache evicts it; the simulator's cache model
 * interpolates between the two, docs/simulator.md).  Ranks 0 and 1 time
 * the link and the host's time to post a send and a receive.  Rank 0
 * gathers the numbers and writes the profile file the cost pass reads
 * (docs/profile.md): `units: ms`, `cache_bytes`, the link, and one entry
 * per global layer index with the six times and the two stash sizes.  The
 * parameters are only read; the gradients W adds are cleared afterwards,
 * so training can follow.
 *
 * Every run goes through the rank's executor (rt_exec.h) on buffers of the
 * memory the programs' buffers are in: on a device rank (rt_device.c)
 * device buffers, each phase timed from a synchronised device to a
 * synchronised device, the cold runs evicting the device's last-level
 * cache (a memset of eight times it).  The link is timed through the
 * runtime's own sends and receives on such buffers (MPI, or the device's
 * NCCL), and each layer's achieved TFLOP/s (rt_layer_flops over the hot
 * time) is written beside it as a comment.  Device ranks time their layers
 * one rank after another, so that ranks sharing a device do not time each
 * other's kernels. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_exec.h"
#include "rt_internal.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The message in ctx->err, after "WHAT: ". */
static int prefixed(rt_ctx *ctx, int rc, const char *what)
{
	char why[sizeof ctx->err];
	snprintf(why, sizeof why, "%s", ctx->err);
	return rt__fail(ctx, rc, "%s: %s", what, why);
}

/* Uniform values in [-scale, scale) from a counter. */
static void fill(float *x, int64_t n, uint64_t key, float scale)
{
	for (int64_t i = 0; i < n; i++) {
		uint64_t z = key + (uint64_t)i * 0x9e3779b97f4a7c15ull;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		x[i] = scale * (float)((double)(z >> 11) * 0x1.0p-53 * 2 - 1);
	}
}

/* The buffers one layer's profile runs on, in the memory the programs'
 * buffers are in (the executor's), x and dy filled. */
typedef struct pbufs {
	void *x, *y, *dy, *dx, *act, *ws;
} pbufs;

static int bufs_get(rt_ctx *ctx, int h, pbufs *b)
{
	const rt_exec *ex = ctx->exec;
	const rt_lay *l = &ctx->lay[h];
	const rt_train *t = &ctx->train;
	rt_exec_info in;
	ex->info(ctx, &in);
	int64_t n = t->mbs * t->seq * l->desc.hidden;
	size_t vb = (size_t)n * in.value_bytes;
	rt_sizes sz;
	int rc = ex->sizes(ctx, h, &sz);
	size_t bytes[6] = {vb, vb, vb, vb, (size_t)sz.act + 1, (size_t)sz.wstash + 1};
	void **p[6] = {&b->x, &b->y, &b->dy, &b->dx, &b->act, &b->ws};
	*b = (pbufs){0};
	for (int i = 0; i < 6 && !rc; i++)
		rc = ex->alloc(ctx, bytes[i], p[i]);
	if (rc)
		return rc;
	float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	if (!v)
		return rt__fail(ctx, RT_ENOMEM, "out of host memory");
	fill(v, n, 0x1234 + (uint64_t)l->index, 1.0f);
	rc = ex->put(ctx, b->x, v, n);
	fill(v, n, 0x5678 + (uint64_t)l->index, 1e-3f);
	if (!rc)
		rc = ex->put(ctx, b->dy, v, n);
	free(v);
	return rc;
}

static void bufs_free(rt_ctx *ctx, pbufs *b)
{
	void *p[6] = {b->x, b->y, b->dy, b->dx, b->act, b->ws};
	for (int i = 0; i < 6; i++)
		ctx->exec->release(ctx, p[i]);
}

/* Phase p (0 F, 1 B, 2 W) of layer h on b, through the executor, then
 * waited for.  A failure leaves its message in ctx->err. */
static int phase(rt_ctx *ctx, int h, int p, const pbufs *b)
{
	const rt_exec *ex = ctx->exec;
	rt_kind k = ctx->lay[h].desc.kind;
	const rt_train *t = &ctx->train;
	float dscale = (float)(1.0 / ((double)t->microbatches * (double)t->mbs * (double)t->seq));
	const void *x = k == RT_EMBEDDING ? NULL : b->x, *dy = k == RT_HEAD ? NULL : b->dy;
	void *y = k == RT_HEAD ? NULL : b->y, *dx = k == RT_EMBEDDING ? NULL : b->dx;
	int rc = p == 0 ? ex->f(ctx, h, 0, x, y, b->act)
	       : p == 1 ? ex->b(ctx, h, dy, dscale, dx, b->act, b->ws)
	                : ex->w(ctx, h, b->ws);
	return rc ? rc : ex->sync(ctx);
}

/* Times layer h: `warmup` untimed runs then `repeats` timed ones, hot,
 * then the same cold (`flush`, flush_n bytes -- device memory on a device
 * rank -- written before each phase); the times of phase p (f, b, w hot,
 * then cold) in ms go to times[p * stride + i], i < repeats.  On a device
 * each phase is timed from a synchronised device to a synchronised one. */
static int profile_layer(rt_ctx *ctx, int h, int warmup, int repeats, double *times, int stride,
                         void *flush, size_t flush_n)
{
	const rt_exec *ex = ctx->exec;
	rt_lay *l = &ctx->lay[h];
	pbufs b;
	int rc = bufs_get(ctx, h, &b);
	/* Hot runs, then cold ones; each (warm-up + repeats). */
	int runs = warmup + repeats;
	for (int r = 0; !rc && r < 2 * runs; r++) {
		bool cold = r >= runs;
		int64_t ns[3];
		for (int p = 0; p < 3 && !rc; p++) {
			if ((cold && (rc = ex->evict(ctx, flush, flush_n))) || (rc = ex->sync(ctx)))
				break;
			int64_t t0 = rt__now_ns();
			rc = phase(ctx, h, p, &b);
			ns[p] = rt__now_ns() - t0;
		}
		if (!rc && r % runs >= warmup)
			for (int p = 0; p < 3; p++)
				times[(3 * cold + p) * stride + r % runs - warmup] = (double)ns[p] * 1e-6;
	}
	bufs_free(ctx, &b);
	/* The gradients W added. */
	if (!rc)
		rc = ex->zero_grad(ctx, h);
	if (rc) {
		char why[sizeof ctx->err];
		snprintf(why, sizeof why, "%s", ctx->err);
		return rt__fail(ctx, rc, "profile: layer %lld (%s)%s: %s", (long long)l->index,
		                rt__kind_name(l->desc.kind), ex->on, why);
	}
	return RT_OK;
}

/* The point-to-point link between ranks 0 and 1: ping-pong of `bytes`
 * on a buffer of the programs' memory through the runtime's own sends and
 * receives (what the programs call: MPI, or the device's communicator),
 * each leg waited for; `warmup` untimed round trips then `repeats` timed
 * ones; *half_rtt_us is the median of half a round trip.  Other ranks
 * return at once. */
static int ping_pong(rt_ctx *ctx, size_t bytes, int warmup, int repeats, double *times,
                     double *half_rtt_us)
{
	int rc = RT_OK, me = ctx->rank, peer = 1 - me, h;
	void *buf = NULL;
	*half_rtt_us = 0;
	if (me > 1)
		return RT_OK;
	if ((rc = ctx->exec->alloc(ctx, bytes, &buf)))
		return prefixed(ctx, rc, "rt_profile");
	for (int r = 0; !rc && r < warmup + repeats; r++) {
		rt_tag tag = {0, r, RT_MSG_OTHER};
		int64_t t0 = rt__now_ns();
		for (int leg = 0; !rc && leg < 2; leg++) {
			bool send = (leg == 0) == (me == 0);
			rc = send ? rt_send(ctx, peer, buf, bytes, tag, &h) : rt_recv(ctx, peer, buf, bytes, tag, &h);
			if (!rc)
				rc = rt_wait(ctx, h);
		}
		if (r >= warmup)
			times[r - warmup] = (double)(rt__now_ns() - t0) * 1e-3 / 2;
	}
	if (!rc)
		*half_rtt_us = median(times, repeats);
	ctx->exec->release(ctx, buf);
	return rc;
}

/* The host's time to post a send (rank 0) and a receive (rank 1) of
 * `bytes` through the runtime's own calls (rt_send, rt_recv: what the
 * programs call), `warmup` untimed then `repeats` timed, each completed
 * (rt_wait) before the next; the medians, in microseconds, end up on rank
 * 0 (post[0] send, post[1] receive).  Other ranks return at once. */
static int post_costs(rt_ctx *ctx, size_t bytes, int warmup, int repeats, double *times,
                      double post[2])
{
	int rc = RT_OK, me = ctx->rank, h;
	MPI_Request req;
	post[0] = post[1] = 0;
	if (me > 1)
		return RT_OK;
	void *buf = NULL;
	if ((rc = ctx->exec->alloc(ctx, bytes, &buf)))
		return prefixed(ctx, rc, "rt_profile");
	for (int r = 0; !rc && r < warmup + repeats; r++) {
		rt_tag tag = {0, r, RT_MSG_OTHER};
		int64_t t0 = rt__now_ns();
		rc = me == 0 ? rt_send(ctx, 1, buf, bytes, tag, &h) : rt_recv(ctx, 0, buf, bytes, tag, &h);
		int64_t t1 = rt__now_ns();
		if (!rc)
			rc = rt_wait(ctx, h);
		if (r >= warmup)
			times[r - warmup] = (double)(t1 - t0) * 1e-3;
	}
	double mine = rc ? 0 : median(times, repeats);
	/* Rank 1's median to rank 0. */
	if (!rc)
		rc = me == 1 ? rt__coll(ctx, MPI_Isend(&mine, 1, MPI_DOUBLE, 0, 0x7ff1, MPI_COMM_WORLD, &req),
		                        &req, "rt_profile: posting times")
		             : rt__coll(ctx, MPI_Irecv(&post[1], 1, MPI_DOUBLE, 1, 0x7ff1, MPI_COMM_WORLD, &req),
		                        &req, "rt_profile: posting times");
	if (me == 0)
		post[0] = mine;
	ctx->exec->release(ctx, buf);
	return rc;
}

/* What the profile was measured on: the host name and the CPU model
 * (the first "model name" of /proc/cpuinfo), with quotes dropped so that
 * both stay plain YAML strings. */
static void machine(char *host, size_t hn, char *cpu, size_t cn)
{
	snprintf(cpu, cn, "unknown");
	if (gethostname(host, hn) != 0)
		snprintf(host, hn, "unknown");
	host[hn - 1] = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		char *c = strchr(line, ':');
		if (strncmp(line, "model name", 10) != 0 || !c)
			continue;
		c += 1 + strspn(c + 1, " \t");
		c[strcspn(c, "\n")] = 0;
		snprintf(cpu, cn, "%s", c);
		break;
	}
	if (f)
		fclose(f);
	for (char *s = host; *s; s++)
		if (*s == '"' || *s == '\\')
			*s = '_';
	for (char *s = cpu; *s; s++)
		if (*s == '"' || *s == '\\')
			*s = '_';
}

static int cmp_row(const void *a, const void *b)
{
	return cmp_double(a, b); /* the row's first field: the layer index */
}

#define ROW 12 /* index, f, b, w, f_cold, b_cold, w_cold, act bytes, wstash bytes, FLOPs f, b, w */
#define ROUNDS 5

int rt_profile(rt_ctx *ctx, int warmup, int repeats, const char *path)
{
	MPI_Request req;
	int rc = RT_OK, mine, total = 0;
	double *times = NULL, *rows = NULL, *all = NULL;
	void *flush = NULL; /* in the programs' memory: device memory on a device rank */
	int *counts = NULL, *displs = NULL;
	if (!ctx || !path)
		return RT_EARG;
	if (!ctx->have_model)
		return rt__fail(ctx, RT_ESTATE, "rt_profile: rt_model_init has not been called");
	if (ctx->in_step)
		return rt__fail(ctx, RT_ESTATE, "rt_profile: inside step %lld", rt__step_no(ctx));
	if (warmup < 0 || repeats < 1 || repeats > 1000000)
		return rt__fail(ctx, RT_EARG, "rt_profile: %d warm-up runs, %d repeats", warmup, repeats);
	const rt_exec *ex = ctx->exec;
	rt_exec_info in;
	ex->info(ctx, &in);
	mine = ROW * ctx->nlay;
	size_t cache = in.cache_bytes, flush_n = 8 * cache;
	/* The timed runs come in ROUNDS sweeps over the layers, so that each
	 * layer's samples spread over the whole measurement and a slow spell
	 * of the machine weighs on every layer alike. */
	int per = (repeats + ROUNDS - 1) / ROUNDS, n = per * ROUNDS;
	size_t per_layer = 6 * (size_t)n;
	if ((rc = ex->alloc(ctx, flush_n, &flush))) {
		rc = prefixed(ctx, rc, "rt_profile");
		goto out;
	}
	if (!(times = malloc((size_t)(ctx->nlay ? ctx->nlay : 1) * per_layer * sizeof *times)) ||
	    !(rows = malloc((size_t)(mine ? mine : 1) * sizeof *rows))) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_profile: out of memory");
		goto out;
	}
	int64_t t0 = rt__now_ns();
	/* Device ranks take turns: ranks that share a device (a profile of
	 * several ranks on one GPU) would otherwise time each other's kernels
	 * with their own; on distinct devices the turns only cost time. */
	bool turns = in.device && ctx->world > 1;
	for (int turn = 0; turn < (turns ? ctx->world : 1); turn++) {
		for (int round = 0; (!turns || turn == ctx->rank) && round < ROUNDS; round++)
			for (int i = 0; i < ctx->nlay; i++)
				if ((rc = profile_layer(ctx, i, warmup, per,
				                        times + (size_t)i * per_layer + (size_t)round * per, n,
				                        flush, flush_n)))
					goto out;
		if (turns && (rc = rt__coll(ctx, MPI_Ibarrier(MPI_COMM_WORLD, &req), &req,
		                            "rt_profile: the ranks' turns on the device")))
			goto out;
	}
	for (int i = 0; i < ctx->nlay; i++) {
		double *r = rows + ROW * i;
		r[0] = (double)ctx->lay[i].index;
		for (int p = 0; p < 6; p++)
			r[1 + p] = median(times + (size_t)i * per_layer + (size_t)p * n, n);
		rt_sizes sz;
		if ((rc = ex->sizes(ctx, i, &sz)))
			goto out;
		r[7] = (double)sz.act;
		r[8] = (double)sz.wstash;
		if ((rc = rt_layer_flops(&ctx->lay[i].desc, &r[9], &r[10], &r[11])))
			goto out;
	}
	rt__trace(ctx, "profile", t0, -1, -1, -1, 0);

	/* The link: latency from a tiny message, bandwidth from one of the
	 * size a stage boundary carries (micro-batch x seq x hidden floats),
	 * which is what the simulator's alpha-beta model is used for. */
	double lat = 0, big = 0, *pp = NULL, post[2] = {0, 0};
	size_t bbytes = (size_t)(ctx->train.mbs * ctx->train.seq * (ctx->nlay ? ctx->lay[0].desc.hidden : 1)) *
	                sizeof(float);
	int pprep = 200;
	if (ctx->world >= 2) {
		if (!(pp = malloc((size_t)pprep * sizeof *pp))) {
			rc = rt__fail(ctx, RT_ENOMEM, "rt_profile: out of memory");
			goto out;
		}
		bbytes = bbytes / sizeof(float) * in.value_bytes;
		rc = ping_pong(ctx, 8, 20, pprep, pp, &lat);
		if (!rc)
			rc = ping_pong(ctx, bbytes, 20, pprep, pp, &big);
		if (!rc)
			rc = post_costs(ctx, bbytes, 20, pprep, pp, post);
		free(pp);
		if (rc)
			goto out;
	}

	if (ctx->rank == 0 && (!(counts = calloc((size_t)ctx->world, sizeof *counts)) ||
	                       !(displs = calloc((size_t)ctx->world, sizeof *displs)))) {
		rc = rt__fail(ctx, RT_ENOMEM, "rt_profile: out of memory");
		goto out;
	}
	/* Replicas hold the same layers: replica 0's rows stand for them. */
	if (ctx->train.replica > 0)
		mine = 0;
	if ((rc = rt__coll(ctx, MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &req),
	                   &req, "rt_profile")))
		goto out;
	if (ctx->rank == 0) {
		for (int r = 0; r < ctx->world; r++) {
			displs[r] = total;
			total += counts[r];
		}
		if (!(all = malloc((size_t)total * sizeof *all))) {
			rc = rt__fail(ctx, RT_ENOMEM, "rt_profile: out of memory");
			goto out;
		}
	}
	if ((rc = rt__coll(ctx, MPI_Igatherv(rows, mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0,
	                                     MPI_COMM_WORLD, &req),
	                   &req, "rt_profile")))
		goto out;
	if (ctx->rank == 0) {
		qsort(all, (size_t)total / ROW, ROW * sizeof *all, cmp_row);
		FILE *f = rt__create_out(path);
		if (!f) {
			rc = rt__fail(ctx, RT_EIO, "profile %s: %s", path,
			              errno == ENXIO ? "a pipe that nobody reads" : strerror(errno));
			goto out;
		}
		char host[256], cpu[256], dname[160] = "";
		machine(host, sizeof host, cpu, sizeof cpu);
		if (in.device) {
			char nm[128];
			snprintf(nm, sizeof nm, "%s", in.device);
			for (char *q = nm; *q; q++) /* the name stays a plain YAML string */
				if (*q == '"' || *q == '\\')
					*q = '\'';
			snprintf(dname, sizeof dname, "device: \"%s\", ", nm);
		}
		if (in.device)
			fprintf(f, "# Measured by libocto_rt's device executor on %s (%s), each phase between two\n"
			           "# synchronisations of the device; cold: after a memset of 8x its cache.\n",
			        in.device, in.bf16 ? "bf16" : "f32");
		fprintf(f,
		        "# Measured by libocto_rt (%s) on %d rank(s): seq %lld, mbs %lld;\n"
		        "# times of one micro-batch, median of %d runs (%d sweeps over the layers, %d warm-up\n"
		        "# runs each); f, b, w with the layer's data in the cache, f_cold, b_cold, w_cold\n"
		        "# after writing %zu bytes to evict a cache of cache_bytes (docs/simulator.md).\n"
		        "units: ms\n"
		        "cache_bytes: %zu\n"
		        "measured_on: {host: \"%s\", cpu: \"%s\", %sdtype: %s, seq: %lld, mbs: %lld, "
		        "hidden: %lld, ranks: %d}\n",
		        ex->name, ctx->world,
		        (long long)ctx->train.seq, (long long)ctx->train.mbs, n, ROUNDS, warmup,
		        flush_n, cache, host, cpu, dname, in.bf16 ? "bf16" : "f32",
		        (long long)ctx->train.seq, (long long)ctx->train.mbs,
		        (long long)(ctx->nlay ? ctx->lay[0].desc.hidden : 0), ctx->world);
		if (ctx->world >= 2) {
			/* Half a round trip of 8 bytes is the latency; the rest of a
			 * boundary-sized message's is its bytes over the bandwidth. */
			double bw = big > lat ? (double)bbytes / ((big - lat) * 1e-6) : 1e12;
			fprintf(f, "# ranks 0 and 1: half a round trip of 8 bytes %.3f us, of %zu bytes %.3f us; "
			           "the host's time\n# to post a send and a receive of %zu bytes (median of %d)\n"
			           "link: {latency_us: %.3f, bandwidth: %.6g, send_us: %.3f, recv_us: %.3f}\n",
			        lat, bbytes, big, bbytes, pprep, lat, bw, post[0], post[1]);
		}
		fputs("# achieved TFLOP/s (the layer's FLOPs, rt_layer_flops, over its hot time):\n", f);
		for (int i = 0; i < total / ROW; i++) {
			const double *r = all + ROW * i;
			fprintf(f, "#   L%lld: F %.3f, B %.3f, W %.3f\n", (long long)r[0],
			        r[1] > 0 ? r[9] / (r[1] * 1e-3) * 1e-12 : 0, r[2] > 0 ? r[10] / (r[2] * 1e-3) * 1e-12 : 0,
			        r[3] > 0 ? r[11] / (r[3] * 1e-3) * 1e-12 : 0);
		}
		fputs("layers:\n", f);
		for (int i = 0; i < total / ROW; i++) {
			const double *r = all + ROW * i;
			fprintf(f, "  %lld: {f: %.6f, b: %.6f, w: %.6f, f_cold: %.6f, b_cold: %.6f, w_cold: %.6f, "
			           "act_bytes: %lld, wstash_bytes: %lld}\n",
			        (long long)r[0], r[1], r[2], r[3], r[4], r[5], r[6], (long long)r[7],
			        (long long)r[8]);
		}
		if (ferror(f) | fclose(f)) {
			rc = rt__fail(ctx, RT_EIO, "profile %s: write error", path);
			goto out;
		}
	}
	rc = RT_OK;
out:
	free(all);
	free(displs);
	free(counts);
	free(rows);
	free(times);
	ex->release(ctx, flush);
	return rc;
}
