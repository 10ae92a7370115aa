/* driver.c: rt_driver, the runtime's test driver.  It trains one of the
 * tiny models (the layer lists of models/tiny-dense.yaml and
 * models/tiny-hybrid.yaml, built here in C) through libocto_rt: in one
 * process, or cut into one stage per MPI rank with a hand-built schedule
 * (GPipe: every F, then every B; or 1F1B), B then W per micro-batch, W in
 * micro-batch order.  It writes what the tests compare:
 *
 *   OUT/losses.txt   "STEP LOSS DECIMAL" per step, the loss as a C hex float, then
 *                    rounded (the head's rank)
 *   OUT/hash.txt     rt_model_hash of every parameter and AdamW state (rank 0)
 *
 * and has the switches the failure tests need (inject a NaN -- before a
 * step, or after the last one, before the save --, stall a rank,
 * exchange messages in an order that relies on buffering, write pids).
 *
 * Data parallelism: --dp D runs D replicas of the pipeline on D x stages
 * ranks (rank = replica*stages + pipe_rank); --microbatches is the step's
 * global count, M/D per replica.  Each stage, after its last W, reduces
 * every bucket (--bucket N layers each) over its DP group -- an all-reduce,
 * or with --distopt a reduce-scatter --, waits, rt_update, and with
 * --distopt all-gathers the parameters.  --exact is the deterministic mode
 * (with or without --dp); --bad-bucket passes a buffer 4 bytes short;
 * --declare N tells rt_model_init of buckets of N layers (default: the
 * --bucket that the step uses), which the distributed optimizer refuses
 * when they differ;
 * --diverge R nudges a weight of replica R's first stage after training,
 * which the model hash must refuse.
 * tests/runtime/run.sh drives it under mpirun. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "octo_rt.h"

#ifndef OCTO_CORPUS
#define OCTO_CORPUS "models/data/corpus.txt"
#endif

enum { MAX_LAYERS = 64, MAX_MB = 256 };

typedef struct opts {
	const char *model, *text, *schedule, *cuts, *load, *save, *out, *profile, *pid_dir,
		*exchange;
	int steps, microbatches, stall_rank, stall_step, ffn;
	bool stall_end; /* --stall-at-end: the stall rank hangs after the last collective */
	int dp, bucket;  /* --dp D (0: no collectives), --bucket N layers */
	int declare;     /* --declare N: the buckets rt_model_init is told of; 0: --bucket */
	int diverge;     /* --diverge R: replica R's weight nudged before the hash; -1 none */
	bool distopt, exact, bad_bucket;
	long long inject_nan, arena;
	unsigned long long seed;
	double lr, wd;
} opts;

static void usage(void)
{
	fprintf(stderr,
	        "usage: rt_driver [--model dense|hybrid] [--steps N] [--microbatches M] [--seed S]\n"
	        "                 [--text FILE | --synthetic] [--schedule gpipe|1f1b] [--cuts A,B,...]\n"
	        "                 [--lr X] [--wd X] [--load DIR] [--save DIR] [--out DIR]\n"
	        "                 [--profile FILE] [--inject-nan STEP] [--stall-rank R] [--stall-step S]\n"
	        "                 [--stall-at-end] [--exchange safe|unsafe] [--pid-dir DIR] [--arena BYTES] [--ffn N]\n"
	        "                 [--dp D] [--distopt] [--exact] [--bucket N] [--declare N] [--bad-bucket]\n"
	        "                 [--diverge R]\n");
}

static int parse(int argc, char **argv, opts *o)
{
	*o = (opts){.model = "dense", .schedule = "gpipe", .steps = 3, .microbatches = 8, .seed = 1,
	            .lr = 1e-3, .wd = 0.1, .inject_nan = -1, .stall_rank = -1, .stall_step = 1, .ffn = 128,
	            .bucket = 1, .diverge = -1};
	const char *e = getenv("OCTO_INJECT_NAN");
	if (e && *e)
		o->inject_nan = atoll(e);
	bool synthetic = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
		if (ARG("--model")) o->model = v;
		else if (ARG("--steps")) o->steps = atoi(v);
		else if (ARG("--microbatches")) o->microbatches = atoi(v);
		else if (ARG("--seed")) o->seed = strtoull(v, NULL, 10);
		else if (ARG("--text")) o->text = v;
		else if (!strcmp(a, "--synthetic")) synthetic = true;
		else if (ARG("--schedule")) o->schedule = v;
		else if (ARG("--cuts")) o->cuts = v;
		else if (ARG("--lr")) o->lr = atof(v);
		else if (ARG("--wd")) o->wd = atof(v);
		else if (ARG("--load")) o->load = v;
		else if (ARG("--save")) o->save = v;
		else if (ARG("--out")) o->out = v;
		else if (ARG("--profile")) o->profile = v;
		else if (ARG("--inject-nan")) o->inject_nan = atoll(v);
		else if (ARG("--stall-rank")) o->stall_rank = atoi(v);
		else if (ARG("--stall-step")) o->stall_step = atoi(v);
		else if (!strcmp(a, "--stall-at-end")) o->stall_end = true;
		else if (ARG("--exchange")) o->exchange = v;
		else if (ARG("--pid-dir")) o->pid_dir = v;
		else if (ARG("--arena")) o->arena = atoll(v);
		else if (ARG("--ffn")) o->ffn = atoi(v);
		else if (ARG("--dp")) o->dp = atoi(v);
		else if (ARG("--bucket")) o->bucket = atoi(v);
		else if (ARG("--declare")) o->declare = atoi(v);
		else if (ARG("--diverge")) o->diverge = atoi(v);
		else if (!strcmp(a, "--distopt")) o->distopt = true;
		else if (!strcmp(a, "--exact")) o->exact = true;
		else if (!strcmp(a, "--bad-bucket")) o->bad_bucket = true;
		else {
			fprintf(stderr, "rt_driver: error: bad argument '%s'\n", a);
			return -1;
		}
#undef ARG
	}
	if (strcmp(o->model, "dense") && strcmp(o->model, "hybrid")) {
		fprintf(stderr, "rt_driver: error: --model: dense or hybrid\n");
		return -1;
	}
	if (strcmp(o->schedule, "gpipe") && strcmp(o->schedule, "1f1b")) {
		fprintf(stderr, "rt_driver: error: --schedule: gpipe or 1f1b\n");
		return -1;
	}
	if (o->steps < 0 || o->microbatches < 1 || o->microbatches > MAX_MB || o->ffn < 1 || o->dp < 0 ||
	    o->bucket < 1 || o->declare < 0 || (o->dp && o->microbatches % o->dp)) {
		fprintf(stderr, "rt_driver: error: bad --steps, --microbatches, --ffn, --dp or --bucket "
		                "(--dp must divide --microbatches)\n");
		return -1;
	}
	/* tiny-hybrid trains on text, tiny-dense on synthetic tokens, as their YAML files say. */
	if (!o->text && !synthetic && !strcmp(o->model, "hybrid"))
		o->text = OCTO_CORPUS;
	if (synthetic)
		o->text = NULL;
	return 0;
}

/* ---- the models ------------------------------------------------------------ */

static rt_layer_desc base(rt_kind k)
{
	return (rt_layer_desc){.kind = k, .hidden = 64, .seq = 64, .mbs = 2, .vocab = 256};
}

static rt_layer_desc attention(void)
{
	rt_layer_desc d = base(RT_ATTENTION);
	d.heads = 4;
	d.kv_heads = 2;
	return d;
}

static rt_layer_desc mlp(int ffn)
{
	rt_layer_desc d = base(RT_MLP);
	d.ffn = ffn;
	d.act = RT_SWIGLU;
	return d;
}

/* models/tiny-dense.yaml: embedding, 4 x (attention, mlp), head.
 * models/tiny-hybrid.yaml: embedding, pattern "ME M- *E M- *-", head. */
static int build_model(const opts *o, rt_layer_desc *L)
{
	int n = 0;
	L[n++] = base(RT_EMBEDDING);
	if (!strcmp(o->model, "dense")) {
		for (int i = 0; i < 4; i++) {
			L[n++] = attention();
			L[n++] = mlp(o->ffn);
		}
	} else {
		for (const char *p = "MEM-*EM-*-"; *p; p++) {
			rt_layer_desc d;
			switch (*p) {
			case 'M':
				d = base(RT_MAMBA);
				d.version = 2;
				d.state = 16;
				d.expand = 2;
				d.conv = 4;
				d.head_dim = 16;
				d.groups = 1;
				break;
			case 'E':
				d = base(RT_MOE);
				d.experts = 4;
				d.top_k = 2;
				d.expert_ffn = 64;
				d.shared_experts = 1;
				d.act = RT_SWIGLU;
				break;
			case '*': d = attention(); break;
			default: d = mlp(o->ffn); break;
			}
			L[n++] = d;
		}
	}
	L[n++] = base(RT_HEAD);
	return n;
}

/* Stage s holds layers [cut[s], cut[s+1]). */
static int make_cuts(const opts *o, int nl, int nst, int *cut)
{
	cut[0] = 0;
	cut[nst] = nl;
	if (!o->cuts) {
		for (int s = 1; s < nst; s++)
			cut[s] = (int)((long long)s * nl / nst);
		return 0;
	}
	const char *p = o->cuts;
	for (int s = 1; s < nst; s++) {
		char *end;
		cut[s] = (int)strtol(p, &end, 10);
		if (end == p || (s < nst - 1 && *end != ',') || cut[s] <= cut[s - 1])
			return -1;
		p = end + 1;
	}
	return cut[nst - 1] < nl ? 0 : -1;
}

/* ---- the schedule ------------------------------------------------------------ */

typedef struct op {
	char phase; /* 'F' or 'B' (B then W) */
	int mb;
} op;

static int make_schedule(const char *name, int s, int nst, int M, op *ops)
{
	int n = 0, warm = !strcmp(name, "gpipe") ? M : (nst - s - 1 < M ? nst - s - 1 : M);
	int f = 0, b = 0;
	while (f < warm)
		ops[n++] = (op){'F', f++};
	while (f < M) {
		ops[n++] = (op){'F', f++};
		ops[n++] = (op){'B', b++};
	}
	while (b < M)
		ops[n++] = (op){'B', b++};
	return n;
}

/* ---- communication tests -------------------------------------------------------- */

/* Ranks 0 and 1 swap 256 bytes.  "unsafe": send, wait for the send, then
 * receive; this completes only if the send is buffered, and hangs (and
 * times out) under synchronous sends.  "safe": both in one group. */
static int exchange(rt_ctx *ctx, const char *how)
{
	int rc, r = rt_rank(ctx), peer = r ^ 1, req;
	unsigned char out[256], in[256];
	if (rt_world_size(ctx) < 2 || peer >= rt_world_size(ctx))
		return 0;
	for (int i = 0; i < 256; i++)
		out[i] = (unsigned char)(i * 7 + r);
	rt_tag mine = {r, 0, RT_MSG_OTHER}, theirs = {peer, 0, RT_MSG_OTHER};
	if (!strcmp(how, "unsafe")) {
		if ((rc = rt_send(ctx, peer, out, sizeof out, mine, &req)) || (rc = rt_wait(ctx, req)) ||
		    (rc = rt_recv(ctx, peer, in, sizeof in, theirs, &req)) || (rc = rt_wait(ctx, req)))
			return rc;
	} else {
		if ((rc = rt_group_begin(ctx)) || (rc = rt_send(ctx, peer, out, sizeof out, mine, NULL)) ||
		    (rc = rt_recv(ctx, peer, in, sizeof in, theirs, NULL)) || (rc = rt_group_end(ctx, &req)) ||
		    (rc = rt_wait(ctx, req)))
			return rc;
	}
	for (int i = 0; i < 256; i++)
		if (in[i] != (unsigned char)(i * 7 + peer)) {
			fprintf(stderr, "rt_driver rank %d: exchange: wrong byte %d\n", r, i);
			return RT_EMPI;
		}
	printf("rank %d: exchange (%s) ok\n", r, how);
	return 0;
}

/* ---- main ---------------------------------------------------------------------- */

static size_t rup(size_t n)
{
	return (n + RT_ALIGN - 1) & ~(size_t)(RT_ALIGN - 1);
}

int main(int argc, char **argv)
{
	opts o;
	rt_ctx *ctx = NULL;
	rt_layer_desc L[MAX_LAYERS];
	rt_layer_spec spec[MAX_LAYERS];
	int cut[MAX_LAYERS + 1], rc;
	static op ops[2 * MAX_MB];
	char path[4096];

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows under mpirun */
	if ((rc = rt_init(&argc, &argv, NULL, &ctx)))
		return rt_abort(NULL, rc), 1;
	if (parse(argc, argv, &o)) {
		usage();
		rt_finalize(ctx);
		return 2;
	}
	int rank = rt_rank(ctx), world = rt_world_size(ctx), dp = o.dp > 1 ? o.dp : 1;
	if (world % dp) {
		fprintf(stderr, "rt_driver: error: %d ranks are not --dp %d replicas of a pipeline\n", world, dp);
		return rt_abort(ctx, RT_EARG), 1;
	}
	/* rank = replica * stages + pipe_rank; peers in the same replica */
	int nst = world / dp, replica = rank / nst, pr = rank % nst, base = replica * nst;
	if (o.pid_dir) {
		snprintf(path, sizeof path, "%s/rank%d.pid", o.pid_dir, rank);
		FILE *f = fopen(path, "w");
		if (f) {
			fprintf(f, "%ld\n", (long)getpid());
			fclose(f);
		}
	}
	if (o.exchange) {
		if ((rc = exchange(ctx, o.exchange)))
			return rt_abort(ctx, rc), 1;
		return rt_finalize(ctx) ? 1 : 0;
	}

	int nl = build_model(&o, L);
	if (nst > nl || make_cuts(&o, nl, nst, cut)) {
		fprintf(stderr, "rt_driver: error: cannot cut %d layers into %d stages (--cuts '%s')\n", nl,
		        nst, o.cuts ? o.cuts : "");
		return rt_abort(ctx, RT_EARG), 1;
	}
	int lo = cut[pr], n = cut[pr + 1] - lo;
	int decl = o.declare ? o.declare : o.bucket; /* the buckets: --bucket layers each */
	for (int i = 0; i < n; i++)
		spec[i] = (rt_layer_spec){lo + i, L[lo + i], i % decl == 0};
	int M = o.microbatches / dp; /* this replica's */
	rt_train t = {.seed = o.seed, .nlayers = nl, .seq = 64, .mbs = 2, .vocab = 256,
	              .microbatches = M, .optimizer = RT_ADAMW, .lr = (float)o.lr,
	              .weight_decay = (float)o.wd, .text_file = o.text, .dp = o.dp,
	              .replica = replica, .pipe_rank = pr,
	              .dp_flags = (o.distopt ? RT_DP_DISTOPT : 0) | (o.exact ? RT_DP_EXACT : 0)};

	/* The arena: the model, then per micro-batch an activation and a
	 * gradient buffer and each layer's activation stash, and one W stash
	 * per layer (W follows B at once); plus room for profiling. */
	size_t model_bytes, bytes, tok = (size_t)t.mbs * t.seq * 64 * sizeof(float);
	if ((rc = rt_model_bytes(ctx, &t, n, spec, &model_bytes)))
		return rt_abort(ctx, rc), 1;
	bytes = model_bytes + 2 * (size_t)M * rup(tok);
	size_t prof = 0;
	for (int i = 0; i < n; i++) {
		rt_sizes sz;
		rt_layer_sizes(&spec[i].desc, &sz);
		bytes += (size_t)M * rup((size_t)sz.act) + rup((size_t)sz.wstash);
		size_t p = 4 * rup(tok) + rup((size_t)sz.act) + rup((size_t)sz.wstash);
		prof = p > prof ? p : prof;
	}
	if (o.profile)
		bytes += prof;
	/* one buffer serves every bucket's collectives, one at a time */
	int64_t coll_bytes = 0;
	for (int b0 = 0; o.dp && b0 < n; b0 += o.bucket) {
		int64_t np = 0;
		for (int i = b0; i < n && i < b0 + o.bucket; i++) {
			rt_sizes sz;
			rt_layer_sizes(&spec[i].desc, &sz);
			np += sz.params;
		}
		for (int k = 0; k < RT_NCOLL; k++)
			if (rt_coll_bytes(&t, k, np) > coll_bytes)
				coll_bytes = rt_coll_bytes(&t, k, np);
	}
	bytes += rup((size_t)coll_bytes);
	if (o.arena > 0)
		bytes = (size_t)o.arena;
	if ((rc = rt_arena_init(ctx, bytes)) || (rc = rt_model_init(ctx, &t, n, spec)))
		return rt_abort(ctx, rc), 1;
	if (o.load && (rc = rt_ckpt_load(ctx, o.load)))
		return rt_abort(ctx, rc), 1;
	if (o.save && (rc = rt_ckpt_check(ctx, o.save))) /* before the first step */
		return rt_abort(ctx, rc), 1;
	if (o.profile) {
		if ((rc = rt_profile(ctx, 2, 5, o.profile)))
			return rt_abort(ctx, rc), 1;
		return rt_finalize(ctx) ? 1 : 0;
	}

	float *xb[MAX_MB], *gb[MAX_MB];
	void *act[MAX_LAYERS][MAX_MB], *ws[MAX_LAYERS];
	rt_layer_info info[MAX_LAYERS];
	for (int m = 0; m < M; m++)
		if ((rc = rt_arena_alloc(ctx, tok, (void **)&xb[m])) ||
		    (rc = rt_arena_alloc(ctx, tok, (void **)&gb[m])))
			return rt_abort(ctx, rc), 1;
	for (int i = 0; i < n; i++) {
		if ((rc = rt_layer_get(ctx, i, &info[i])) ||
		    (rc = rt_arena_alloc(ctx, (size_t)info[i].sizes.wstash, &ws[i])))
			return rt_abort(ctx, rc), 1;
		for (int m = 0; m < M; m++)
			if ((rc = rt_arena_alloc(ctx, (size_t)info[i].sizes.act, &act[i][m])))
				return rt_abort(ctx, rc), 1;
	}
	void *cbuf = NULL;
	if (coll_bytes && (rc = rt_arena_alloc(ctx, (size_t)coll_bytes, &cbuf)))
		return rt_abort(ctx, rc), 1;
	int nops = make_schedule(o.schedule, pr, nst, M, ops);
	bool first = pr == 0, last = pr == nst - 1;

	FILE *losses = NULL;
	if (o.out && last && replica == 0) {
		snprintf(path, sizeof path, "%s/losses.txt", o.out);
		if (!(losses = fopen(path, "w"))) {
			fprintf(stderr, "rt_driver: error: %s: %s\n", path, strerror(errno));
			return rt_abort(ctx, RT_EIO), 1;
		}
	}
	for (int k = 0; k < o.steps; k++) {
		int64_t step = rt_step_count(ctx);
		int rx[MAX_MB], rg[MAX_MB], sends[2 * MAX_MB], ns = 0;
		if (step == o.inject_nan && last)
			info[n - 1].params[0] = NAN; /* the head's norm scale: every logit NaN */
		if (step == o.stall_step && rank == o.stall_rank)
			for (;;)
				pause(); /* a hung rank: the others must time out */
		if ((rc = rt_step_begin(ctx)))
			return rt_abort(ctx, rc), 1;
		/* Every receive of the step is posted up front; the tags tell the
		 * micro-batches apart. */
		for (int m = 0; m < M; m++) {
			if (!first && (rc = rt_recv(ctx, base + pr - 1, xb[m], tok, (rt_tag){pr - 1, m, RT_MSG_ACT},
			                            &rx[m])))
				return rt_abort(ctx, rc), 1;
			if (!last && (rc = rt_recv(ctx, base + pr + 1, gb[m], tok, (rt_tag){pr + 1, m, RT_MSG_GRAD},
			                           &rg[m])))
				return rt_abort(ctx, rc), 1;
		}
		for (int j = 0; j < nops; j++) {
			int m = ops[j].mb;
			if (ops[j].phase == 'F') {
				if (!first && (rc = rt_wait(ctx, rx[m])))
					return rt_abort(ctx, rc), 1;
				for (int i = 0; i < n; i++) {
					bool head = info[i].kind == RT_HEAD, emb = info[i].kind == RT_EMBEDDING;
					if ((rc = rt_run_f(ctx, i, m, emb ? NULL : xb[m], head ? NULL : xb[m], act[i][m])))
						return rt_abort(ctx, rc), 1;
				}
				if (!last && (rc = rt_send(ctx, base + pr + 1, xb[m], tok, (rt_tag){pr, m, RT_MSG_ACT},
				                           &sends[ns++])))
					return rt_abort(ctx, rc), 1;
			} else {
				if (!last && (rc = rt_wait(ctx, rg[m])))
					return rt_abort(ctx, rc), 1;
				for (int i = n - 1; i >= 0; i--) {
					bool head = info[i].kind == RT_HEAD, emb = info[i].kind == RT_EMBEDDING;
					if ((rc = rt_run_b(ctx, i, m, head ? NULL : gb[m], emb ? NULL : gb[m], act[i][m],
					                   ws[i])))
						return rt_abort(ctx, rc), 1;
				}
				if (!first && (rc = rt_send(ctx, base + pr - 1, gb[m], tok, (rt_tag){pr, m, RT_MSG_GRAD},
				                            &sends[ns++])))
					return rt_abort(ctx, rc), 1;
				for (int i = 0; i < n; i++)
					if ((rc = rt_run_w(ctx, i, m, ws[i])))
						return rt_abort(ctx, rc), 1;
			}
		}
		double loss;
		int have;
		if ((rc = rt_waitall(ctx, ns, sends)))
			return rt_abort(ctx, rc), 1;
		/* After the stage's last W: per bucket, reduce, update, gather. */
		for (int b0 = 0; o.dp && b0 < n; b0 += o.bucket) {
			int b1 = b0 + o.bucket - 1 < n - 1 ? b0 + o.bucket - 1 : n - 1, req;
			int64_t np = 0;
			for (int i = b0; i <= b1; i++)
				np += info[i].sizes.params;
			int red = o.distopt ? RT_REDUCE_SCATTER : RT_ALL_REDUCE;
			size_t rb = (size_t)rt_coll_bytes(&t, red, np) - (o.bad_bucket ? 4 : 0);
			if ((rc = rt_post_coll(ctx, red, b0, b1, cbuf, rb, &req)) || (rc = rt_wait(ctx, req)) ||
			    (rc = rt_update(ctx, b0, b1)))
				return rt_abort(ctx, rc), 1;
			if (o.distopt &&
			    ((rc = rt_post_coll(ctx, RT_ALL_GATHER, b0, b1, cbuf,
			                        (size_t)rt_coll_bytes(&t, RT_ALL_GATHER, np), &req)) ||
			     (rc = rt_wait(ctx, req))))
				return rt_abort(ctx, rc), 1;
		}
		if ((rc = rt_step_end(ctx, &loss, &have)))
			return rt_abort(ctx, rc), 1;
		if (have) { /* counted from 1, as the generated programs and the runtime's messages count */
			printf("step %lld loss %.6f\n", (long long)rt_step_count(ctx), loss);
			if (losses)
				fprintf(losses, "%lld %a %.6f\n", (long long)rt_step_count(ctx), loss, loss);
		}
	}
	/* --stall-step at the last step count: hung before the model hash (a collective). */
	if (rt_step_count(ctx) == o.stall_step && rank == o.stall_rank)
		for (;;)
			pause();
	/* --inject-nan at the last step count: a NaN weight the save must refuse. */
	if (rt_step_count(ctx) == o.inject_nan && last)
		info[n - 1].params[0] = NAN;
	if (losses && fclose(losses)) {
		fprintf(stderr, "rt_driver: error: losses.txt: write error\n");
		return rt_abort(ctx, RT_EIO), 1;
	}
	if (o.save && (rc = rt_ckpt_save(ctx, o.save)))
		return rt_abort(ctx, rc), 1;
	if (replica == o.diverge && pr == 0)
		info[0].params[0] = nextafterf(info[0].params[0], INFINITY);
	uint64_t h;
	if ((rc = rt_model_hash(ctx, &h)))
		return rt_abort(ctx, rc), 1;
	rt_arena_info ai;
	rt_arena_stats(ctx, &ai);
	if (rank == 0)
		printf("model hash 0x%016llx after step %lld\n", (unsigned long long)h,
		       (long long)rt_step_count(ctx));
	printf("rank %d: layers %d..%d, arena %zu bytes, high-water %zu\n", rank, lo, lo + n - 1,
	       ai.size, ai.peak);
	if (o.out && rank == 0) {
		snprintf(path, sizeof path, "%s/hash.txt", o.out);
		FILE *f = fopen(path, "w");
		if (!f || fprintf(f, "0x%016llx step %lld\n", (unsigned long long)h,
		                  (long long)rt_step_count(ctx)) < 0 || fclose(f)) {
			fprintf(stderr, "rt_driver: error: %s: write error\n", path);
			return rt_abort(ctx, RT_EIO), 1;
		}
	}
	/* --stall-at-end: hung after the last collective, before rt_finalize. */
	if (o.stall_end && rank == o.stall_rank)
		for (;;)
			pause();
	return rt_finalize(ctx) ? 1 : 0;
}
