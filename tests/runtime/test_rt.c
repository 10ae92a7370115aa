/* test_rt.c: Check suite for libocto_rt outside the kernels (octo_rt.h), in
 * one process (MPI as a singleton): the arena, model setup and its errors,
 * the step's order rules, the data definitions of docs/runtime.md (token
 * files, shards and what a rank refuses in them, docs/data.md; a resume on
 * other data), AdamW's
 * first step, weight decay per tensor as docs/layers.md lists it (SGD and
 * AdamW, every layer kind), point-to-point messages to itself (tags, groups, size
 * mismatch, timeouts), a checkpoint round trip, the trace, and data
 * parallelism's single-process paths (rt_coll_bytes, refused settings,
 * bucket collectives over a group of one with exact sums).  Multi-rank
 * behaviour is tests/runtime/run.sh's. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "decay_step.h"
#include "octo_rt.h"

static char tmpdir[] = "/tmp/octo-rt-XXXXXX";

static rt_ctx *open_ctx(const rt_options *o)
{
	rt_ctx *c = NULL;
	ck_assert_int_eq(rt_init(NULL, NULL, o, &c), RT_OK);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* A three-layer model: embedding, mlp, head. */
static rt_train tiny_train(void)
{
	return (rt_train){.seed = 5, .nlayers = 3, .seq = 4, .mbs = 2, .vocab = 16, .microbatches = 2,
	                  .optimizer = RT_ADAMW, .lr = 1e-2f};
}

static void tiny_layers(rt_layer_spec *L)
{
	rt_layer_desc b = {.hidden = 8, .seq = 4, .mbs = 2, .vocab = 16};
	L[0] = (rt_layer_spec){0, b};
	L[0].desc.kind = RT_EMBEDDING;
	L[1] = (rt_layer_spec){1, b};
	L[1].desc.kind = RT_MLP;
	L[1].desc.ffn = 12;
	L[2] = (rt_layer_spec){2, b};
	L[2].desc.kind = RT_HEAD;
}

/* Buffers for one micro-batch in flight per layer. */
typedef struct bufs {
	float *x[2], *g[2];
	void *act[3][2], *ws[3];
} bufs;

/* The tiny model on a context the caller opened (rt_data_options set). */
static rt_ctx *tiny_model_on(rt_ctx *c, rt_train t, bufs *b)
{
	rt_layer_spec L[3];
	size_t bytes;
	tiny_layers(L);
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &bytes), RT_OK);
	ck_assert_int_eq(rt_arena_init(c, bytes + (1 << 20)), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_OK);
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(rt_arena_alloc(c, 8 * 8 * sizeof(float), (void **)&b->x[m]), RT_OK);
		ck_assert_int_eq(rt_arena_alloc(c, 8 * 8 * sizeof(float), (void **)&b->g[m]), RT_OK);
	}
	for (int h = 0; h < 3; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c, h, &in), RT_OK);
		ck_assert_int_eq(rt_arena_alloc(c, (size_t)in.sizes.wstash, &b->ws[h]), RT_OK);
		for (int m = 0; m < 2; m++)
			ck_assert_int_eq(rt_arena_alloc(c, (size_t)in.sizes.act, &b->act[h][m]), RT_OK);
	}
	return c;
}

static rt_ctx *tiny_model(const rt_options *o, rt_train t, bufs *b)
{
	return tiny_model_on(open_ctx(o), t, b);
}

/* One GPipe step in one process. */
static double tiny_step(rt_ctx *c, bufs *b)
{
	double loss = -1;
	int have = 0;
	ck_assert_int_eq(rt_step_begin(c), RT_OK);
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(rt_run_f(c, 0, m, NULL, b->x[m], b->act[0][m]), RT_OK);
		ck_assert_int_eq(rt_run_f(c, 1, m, b->x[m], b->x[m], b->act[1][m]), RT_OK);
		ck_assert_int_eq(rt_run_f(c, 2, m, b->x[m], NULL, b->act[2][m]), RT_OK);
	}
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(rt_run_b(c, 2, m, NULL, b->g[m], b->act[2][m], b->ws[2]), RT_OK);
		ck_assert_int_eq(rt_run_b(c, 1, m, b->g[m], b->g[m], b->act[1][m], b->ws[1]), RT_OK);
		ck_assert_int_eq(rt_run_b(c, 0, m, b->g[m], NULL, b->act[0][m], b->ws[0]), RT_OK);
		for (int h = 0; h < 3; h++)
			ck_assert_int_eq(rt_run_w(c, h, m, b->ws[h]), RT_OK);
	}
	ck_assert_int_eq(rt_step_end(c, &loss, &have), RT_OK);
	ck_assert_int_eq(have, 1);
	return loss;
}

/* ---- arena ------------------------------------------------------------------ */

START_TEST(test_arena)
{
	rt_ctx *c = open_ctx(NULL);
	void *p, *q;
	rt_arena_info ai;
	ck_assert_int_eq(rt_arena_alloc(c, 8, &p), RT_ESTATE);
	ck_assert_int_eq(rt_arena_init(c, 1000), RT_OK);
	ck_assert_int_eq(rt_arena_init(c, 1000), RT_ESTATE);
	ck_assert_int_eq(rt_arena_alloc(c, 10, &p), RT_OK);
	ck_assert_int_eq((uintptr_t)p % RT_ALIGN, 0);
	size_t mark = rt_arena_mark(c);
	ck_assert_int_eq(rt_arena_alloc(c, 500, &q), RT_OK);
	ck_assert_int_eq((uintptr_t)q % RT_ALIGN, 0);
	ck_assert_int_eq(rt_arena_alloc(c, 600, &q), RT_ENOMEM);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "arena: out of memory: 600 bytes asked"));
	ck_assert_int_eq(rt_arena_release(c, mark), RT_OK);
	ck_assert_int_eq(rt_arena_alloc(c, 600, &q), RT_OK);
	ck_assert_int_eq(rt_arena_stats(c, &ai), RT_OK);
	ck_assert_uint_eq(ai.size, 1024);
	ck_assert_uint_eq(ai.used, 64 + 640);
	ck_assert_uint_eq(ai.peak, 64 + 640);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* ---- model setup ------------------------------------------------------------------ */

START_TEST(test_model_bytes_exact)
{
	rt_layer_spec L[3];
	rt_train t = tiny_train();
	size_t bytes;
	tiny_layers(L);
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &bytes), RT_OK);

	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_arena_init(c, bytes - RT_ALIGN), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_ENOMEM);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "the model's 3 layers need"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);

	c = open_ctx(NULL);
	rt_arena_info ai;
	ck_assert_int_eq(rt_arena_init(c, bytes), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_OK);
	ck_assert_int_eq(rt_arena_stats(c, &ai), RT_OK);
	ck_assert_uint_eq(ai.used, bytes);
	/* The parameters are the kernels' init from (seed, global index). */
	rt_layer_info in;
	ck_assert_int_eq(rt_layer_get(c, 1, &in), RT_OK);
	float *ref = malloc((size_t)in.sizes.params * sizeof *ref);
	ck_assert_int_eq(rt_layer_init(&L[1].desc, 5, 1, ref), RT_OK);
	ck_assert_int_eq(memcmp(ref, in.params, (size_t)in.sizes.params * sizeof *ref), 0);
	free(ref);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

START_TEST(test_model_errors)
{
	rt_layer_spec L[3];
	rt_train t = tiny_train();
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_ESTATE); /* no arena */
	ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);

	tiny_layers(L);
	L[1].index = 0;
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "global indices must ascend"));

	tiny_layers(L);
	L[1].desc.seq = 5;
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "differ from the training shape"));

	tiny_layers(L);
	L[2].index = 1;
	L[1].index = 2;
	ck_assert_int_eq(rt_model_init(c, &t, 2, L + 1), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "the head the last layer"));

	tiny_layers(L);
	L[0].desc.kind = RT_MLP;
	L[0].desc.ffn = 4;
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "the embedding is layer 0"));

	tiny_layers(L);
	t.microbatches = 0;
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	t = tiny_train();
	t.text_file = "/nonexistent/file.txt";
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG); /* vocab 16 < 256 */
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "at least 256"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* A rank program sizes its arena with rt_model_bytes before rt_model_init:
 * a setting refused there must leave its own message in the context (the
 * one rt_abort prints), not only a code whose text is the generic
 * "invalid argument".  _i: which setting. */
START_TEST(test_model_bytes_messages)
{
	static const struct {
		const char *what;
		float lr, wd, beta1, beta2, eps;
		const char *text;
	} bad[] = {
	    {"optimizer setting lr is inf", INFINITY, 0, 0, 0, 0, NULL},
	    {"optimizer setting lr is -0", -0.0f, 0, 0, 0, 0, NULL},
	    {"optimizer setting weight_decay is -1", 1e-3f, -1, 0, 0, 0, NULL},
	    {"optimizer setting weight_decay is nan", 1e-3f, NAN, 0, 0, 0, NULL},
	    {"optimizer setting beta1 is 1", 1e-3f, 0, 1, 0, 0, NULL},
	    {"optimizer setting beta2 is -0.5", 1e-3f, 0, 0, -0.5f, 0, NULL},
	    {"optimizer setting eps is nan", 1e-3f, 0, 0, 0, NAN, NULL},
	    {"the decay factor 1 - lr x weight_decay", 1e30f, 1e30f, 0, 0, 0, NULL},
	    {"needs a vocabulary of at least 256", 1e-3f, 0, 0, 0, 0, "/nonexistent"},
	};
	ck_assert_int_lt(_i, (int)(sizeof bad / sizeof *bad));
	rt_layer_spec L[3];
	tiny_layers(L);
	rt_train t = tiny_train();
	t.lr = bad[_i].lr, t.weight_decay = bad[_i].wd, t.beta1 = bad[_i].beta1;
	t.beta2 = bad[_i].beta2, t.eps = bad[_i].eps, t.text_file = bad[_i].text;
	size_t bytes;
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_model_bytes(c, &t, 3, L, &bytes), RT_EARG);
	ck_assert_msg(strstr(rt_errmsg(c), bad[_i].what), "rt_model_bytes: '%s', not '%s'",
	              rt_errmsg(c), bad[_i].what);
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &bytes), RT_EARG); /* no context: no message */
	ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	ck_assert_msg(strstr(rt_errmsg(c), bad[_i].what), "rt_model_init: '%s', not '%s'",
	              rt_errmsg(c), bad[_i].what);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* ---- the step ------------------------------------------------------------------- */

START_TEST(test_step_order)
{
	bufs b;
	rt_ctx *c = tiny_model(NULL, tiny_train(), &b);
	ck_assert_int_eq(rt_run_f(c, 0, 0, NULL, b.x[0], b.act[0][0]), RT_ESTATE);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "outside a step"));
	ck_assert_int_eq(rt_step_begin(c), RT_OK);
	ck_assert_int_eq(rt_step_begin(c), RT_ESTATE);
	ck_assert_int_eq(rt_run_f(c, 0, 2, NULL, b.x[0], b.act[0][0]), RT_EARG);
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(rt_run_f(c, 0, m, NULL, b.x[m], b.act[0][m]), RT_OK);
		ck_assert_int_eq(rt_run_f(c, 1, m, b.x[m], b.x[m], b.act[1][m]), RT_OK);
		ck_assert_int_eq(rt_run_f(c, 2, m, b.x[m], NULL, b.act[2][m]), RT_OK);
	}
	/* B of micro-batch 1 first is fine; its W first is not. */
	ck_assert_int_eq(rt_run_b(c, 2, 1, NULL, b.g[1], b.act[2][1], b.ws[2]), RT_OK);
	ck_assert_int_eq(rt_run_w(c, 2, 1, b.ws[2]), RT_ESTATE);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "W runs in micro-batch order"));
	ck_assert_int_eq(rt_step_end(c, NULL, NULL), RT_ESTATE);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "ran W on 0 of 2 micro-batches"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

START_TEST(test_step_deterministic)
{
	bufs b1, b2;
	rt_ctx *c1 = tiny_model(NULL, tiny_train(), &b1);
	rt_ctx *c2 = tiny_model(NULL, tiny_train(), &b2);
	for (int s = 0; s < 3; s++) {
		double l1 = tiny_step(c1, &b1), l2 = tiny_step(c2, &b2);
		ck_assert(l1 == l2 && isfinite(l1) && l1 > 0);
	}
	uint64_t h1, h2;
	ck_assert_int_eq(rt_model_hash(c1, &h1), RT_OK);
	ck_assert_int_eq(rt_model_hash(c2, &h2), RT_OK);
	ck_assert(h1 == h2);
	ck_assert_int_eq(rt_step_count(c1), 3);
	ck_assert_int_eq(rt_data_position(c1), 6);
	ck_assert_int_eq(rt_finalize(c2), RT_OK);
	ck_assert_int_eq(rt_finalize(c1), RT_OK);
}
END_TEST

/* rt_run_r, F again from the same input (a recomputing stage's B), fills
 * the same stash and output bits as rt_run_f did, and B from that stash
 * gives the same loss and weights: two models, one B'ing from F's stashes,
 * the other from stashes made again into buffers of their own (F's
 * overwritten first). */
START_TEST(test_recompute_same_bits)
{
	bufs b1, b2;
	rt_ctx *c1 = tiny_model(NULL, tiny_train(), &b1);
	rt_ctx *c2 = tiny_model(NULL, tiny_train(), &b2);
	size_t act[3];
	void *r[3];
	float *ry;
	for (int h = 0; h < 3; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c2, h, &in), RT_OK);
		act[h] = (size_t)in.sizes.act;
		ck_assert_int_eq(rt_arena_alloc(c2, act[h], &r[h]), RT_OK);
	}
	ck_assert_int_eq(rt_arena_alloc(c2, 8 * 8 * sizeof(float), (void **)&ry), RT_OK);
	ck_assert_int_eq(rt_run_r(c2, 0, 0, NULL, ry, r[0]), RT_ESTATE);
	double loss[2];
	for (int k = 0; k < 2; k++) {
		rt_ctx *c = k ? c2 : c1;
		bufs *b = k ? &b2 : &b1;
		int have = 0;
		ck_assert_int_eq(rt_step_begin(c), RT_OK);
		for (int m = 0; m < 2; m++) {
			/* the fill R's buffers get: the slices' padding, which no
			 * kernel writes, compares equal */
			for (int h = 0; h < 3; h++)
				memset(b->act[h][m], 0xa5, act[h]);
			ck_assert_int_eq(rt_run_f(c, 0, m, NULL, b->x[m], b->act[0][m]), RT_OK);
			ck_assert_int_eq(rt_run_f(c, 1, m, b->x[m], b->x[m], b->act[1][m]), RT_OK);
			ck_assert_int_eq(rt_run_f(c, 2, m, b->x[m], NULL, b->act[2][m]), RT_OK);
		}
		for (int m = 0; m < 2; m++) {
			void *a[3] = {b->act[0][m], b->act[1][m], b->act[2][m]};
			if (k) {
				for (int h = 0; h < 3; h++)
					memset(r[h], 0xa5, act[h]);
				ck_assert_int_eq(rt_run_r(c, 0, m, NULL, ry, r[0]), RT_OK);
				ck_assert_int_eq(rt_run_r(c, 1, m, ry, ry, r[1]), RT_OK);
				ck_assert_int_eq(rt_run_r(c, 2, m, ry, NULL, r[2]), RT_OK);
				ck_assert(memcmp(ry, b->x[m], 8 * 8 * sizeof(float)) == 0);
				for (int h = 0; h < 3; h++) {
					ck_assert_msg(memcmp(r[h], a[h], act[h]) == 0,
					              "layer %d, micro-batch %d: the stash made again differs", h, m);
					memset(a[h], 0x5a, act[h]);
					a[h] = r[h];
				}
			}
			ck_assert_int_eq(rt_run_b(c, 2, m, NULL, b->g[m], a[2], b->ws[2]), RT_OK);
			ck_assert_int_eq(rt_run_b(c, 1, m, b->g[m], b->g[m], a[1], b->ws[1]), RT_OK);
			ck_assert_int_eq(rt_run_b(c, 0, m, b->g[m], NULL, a[0], b->ws[0]), RT_OK);
			for (int h = 0; h < 3; h++)
				ck_assert_int_eq(rt_run_w(c, h, m, b->ws[h]), RT_OK);
		}
		ck_assert_int_eq(rt_step_end(c, &loss[k], &have), RT_OK);
		ck_assert_int_eq(have, 1);
	}
	ck_assert(loss[0] == loss[1] && isfinite(loss[0]));
	uint64_t h1, h2;
	ck_assert_int_eq(rt_model_hash(c1, &h1), RT_OK);
	ck_assert_int_eq(rt_model_hash(c2, &h2), RT_OK);
	ck_assert(h1 == h2);
	ck_assert_int_eq(rt_finalize(c2), RT_OK);
	ck_assert_int_eq(rt_finalize(c1), RT_OK);
}
END_TEST

/* AdamW's first step moves every parameter with a gradient well above eps
 * by lr (m/sqrt(v) = sign g after bias correction); with weight decay,
 * matrices shrink by (1 - lr*wd) first and vectors do not. */
START_TEST(test_adamw_first_step)
{
	bufs b;
	rt_train t = tiny_train();
	t.weight_decay = 0.5f;
	rt_ctx *c = tiny_model(NULL, t, &b);
	rt_layer_info in;
	ck_assert_int_eq(rt_layer_get(c, 1, &in), RT_OK); /* mlp: norm [8] then matrices */
	int64_t n = in.sizes.params;
	float *p0 = malloc((size_t)n * sizeof *p0);
	memcpy(p0, in.params, (size_t)n * sizeof *p0);
	tiny_step(c, &b);
	int64_t full = 0;
	float keep = (float)(1.0 - 1e-2 * 0.5);
	for (int64_t i = 0; i < n; i++) {
		float base = i < 8 ? p0[i] : p0[i] * keep;
		double d = fabs((double)in.params[i] - base);
		ck_assert_msg(d <= 1e-2 * 1.0001, "element %lld moved by %g", (long long)i, d);
		full += d > 1e-2 * 0.99;
	}
	ck_assert_msg(full > n * 9 / 10, "%lld of %lld elements moved by lr", (long long)full,
	              (long long)n);
	free(p0);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* ---- weight decay per tensor ---------------------------------------------------- */

/* The host's buffers, from the arena. */
static void host_buffers(rt_ctx *c, const rt_layer_spec *L, decay_bufs *b)
{
	(void)L;
	ck_assert_int_eq(rt_arena_alloc(c, 8 * 8 * sizeof(float), (void **)&b->x), RT_OK);
	ck_assert_int_eq(rt_arena_alloc(c, 8 * 8 * sizeof(float), (void **)&b->g), RT_OK);
	for (int h = 0; h < DK_LAYERS; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c, h, &in), RT_OK);
		ck_assert_int_eq(rt_arena_alloc(c, (size_t)in.sizes.act, &b->act[h]), RT_OK);
		ck_assert_int_eq(rt_arena_alloc(c, (size_t)in.sizes.wstash, &b->ws[h]), RT_OK);
	}
}

/* decay_step.h on the host: every tensor docs/layers.md marks "no"
 * (Mamba-1's A_log among them) untouched by decay, every "yes" decayed.
 * _i: 0 AdamW, 1 SGD. */
START_TEST(test_decay_per_tensor)
{
	static const decay_target host = {NULL, host_buffers};
	decay_check(&host, _i ? RT_SGD : RT_ADAMW);
}
END_TEST

/* ---- data ------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

START_TEST(test_data_synthetic)
{
	bufs b;
	rt_ctx *c = tiny_model(NULL, tiny_train(), &b);
	int32_t tok[2 * 5];
	for (int64_t s = 0; s < 4; s++) {
		ck_assert_int_eq(rt_data_sample(c, s, tok), RT_OK);
		uint64_t hs = mix64(mix64(5 ^ 0x6f63746f64617461ull) ^ (uint64_t)s);
		for (int i = 0; i < 10; i++)
			ck_assert_int_eq(tok[i], (int32_t)(mix64(hs ^ (uint64_t)i) % 16));
	}
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

START_TEST(test_data_text)
{
	char path[64];
	snprintf(path, sizeof path, "%s/text", tmpdir);
	FILE *f = fopen(path, "wb");
	unsigned char bytes[23];
	for (int i = 0; i < 23; i++)
		bytes[i] = (unsigned char)(200 + i);
	fwrite(bytes, 1, sizeof bytes, f);
	fclose(f);

	rt_layer_spec L[3];
	tiny_layers(L);
	for (int i = 0; i < 3; i++)
		L[i].desc.vocab = 256;
	rt_train t = tiny_train();
	t.vocab = 256;
	t.text_file = path;
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_OK);
	/* W = (23 - 1) / 4 = 5 windows; sequence q = s*2 + b is window q mod 5. */
	int32_t tok[2 * 5];
	for (int64_t s = 0; s < 6; s++) {
		ck_assert_int_eq(rt_data_sample(c, s, tok), RT_OK);
		for (int bb = 0; bb < 2; bb++)
			for (int p = 0; p < 5; p++)
				ck_assert_int_eq(tok[bb * 5 + p], bytes[((s * 2 + bb) % 5) * 4 + p]);
	}
	ck_assert_int_eq(rt_finalize(c), RT_OK);

	/* Too short a file. */
	f = fopen(path, "wb");
	fwrite(bytes, 1, 4, f);
	fclose(f);
	c = open_ctx(NULL);
	ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EIO);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "4 bytes, fewer than one sequence (seq + 1 = 5"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);

	/* Not a regular file: a directory, /dev/zero (which would never end). */
	const char *special[] = {tmpdir, "/dev/zero"};
	for (int i = 0; i < 2; i++) {
		t.text_file = special[i];
		c = open_ctx(NULL);
		ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);
		ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EIO);
		ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "not a regular file"));
		ck_assert_int_eq(rt_finalize(c), RT_OK);
	}

	/* Text data on a vocabulary below 256: named, also by rt_model_bytes. */
	t.text_file = path;
	t.vocab = 100;
	size_t need;
	c = open_ctx(NULL);
	ck_assert_int_eq(rt_model_bytes(c, &t, 3, L, &need), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "needs a vocabulary of at least 256"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* ---- token files (docs/data.md) ----------------------------------------------------- */

/* Writes n bytes to tmpdir/name; the path into path. */
static void write_file(char *path, size_t len, const char *name, const void *p, size_t n)
{
	snprintf(path, len, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(p, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

/* The model on data `files` (format, rule): the context, or NULL with the
 * failure's code in *rc and its message in msg. */
static rt_ctx *data_model(const char *files, int fmt, int rule, int64_t vocab, int *rc, char *msg)
{
	rt_layer_spec L[3];
	tiny_layers(L);
	for (int i = 0; i < 3; i++)
		L[i].desc.vocab = vocab;
	rt_train t = tiny_train();
	t.vocab = vocab;
	t.text_file = files;
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_data_options(c, fmt, rule), RT_OK);
	ck_assert_int_eq(rt_arena_init(c, 1 << 22), RT_OK);
	*rc = rt_model_init(c, &t, 3, L);
	if (*rc == RT_OK)
		return c;
	snprintf(msg, 512, "%s", rt_errmsg(c));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
	return NULL;
}

/* The samples 0..n-1 of two contexts are the same tokens. */
static void same_samples(rt_ctx *a, rt_ctx *b, int n)
{
	int32_t ta[2 * 5], tb[2 * 5];
	for (int64_t s = 0; s < n; s++) {
		ck_assert_int_eq(rt_data_sample(a, s, ta), RT_OK);
		ck_assert_int_eq(rt_data_sample(b, s, tb), RT_OK);
		ck_assert_int_eq(memcmp(ta, tb, sizeof ta), 0);
	}
}

/* Text, its u16 and u32 tokens, and the u16 tokens cut into three shards
 * at uneven places are one stream: the same samples, window for window
 * (a window spans the shards' boundaries). */
START_TEST(test_data_tokens)
{
	enum { N = 37 };
	unsigned char text[N];
	uint16_t u16[N];
	uint32_t u32[N];
	for (int i = 0; i < N; i++) {
		text[i] = (unsigned char)(i * 37 + 11);
		/* little-endian on disk, whatever the host */
		unsigned char *p = (unsigned char *)&u16[i], *q = (unsigned char *)&u32[i];
		p[0] = text[i], p[1] = 0;
		q[0] = text[i], q[1] = q[2] = q[3] = 0;
	}
	char pt[64], p16[64], p32[64], s1[64], s2[64], s3[64], list[256], msg[512];
	write_file(pt, sizeof pt, "stream.txt", text, N);
	write_file(p16, sizeof p16, "stream.bin", u16, sizeof u16);
	write_file(p32, sizeof p32, "stream.u32", u32, sizeof u32);
	write_file(s1, sizeof s1, "s1.u16", u16, 2 * 3);
	write_file(s2, sizeof s2, "s2.u16", u16 + 3, 2 * 1);
	write_file(s3, sizeof s3, "s3.u16", u16 + 4, 2 * (N - 4));
	snprintf(list, sizeof list, "%s,%s,%s", s1, s2, s3);
	int rc;
	rt_ctx *ct = data_model(pt, RT_DATA_AUTO, 0, 256, &rc, msg);
	ck_assert_msg(ct, "%s", msg);
	/* (37 - 1) / 4 = 9 windows; sequence q = s*2 + b is window q mod 9. */
	int32_t tok[2 * 5];
	for (int64_t s = 0; s < 11; s++) {
		ck_assert_int_eq(rt_data_sample(ct, s, tok), RT_OK);
		for (int bb = 0; bb < 2; bb++)
			for (int p = 0; p < 5; p++)
				ck_assert_int_eq(tok[bb * 5 + p], text[((s * 2 + bb) % 9) * 4 + p]);
	}
	const char *other[] = {p16, p32, list};
	for (int i = 0; i < 3; i++) {
		rt_ctx *c = data_model(other[i], RT_DATA_AUTO, 0, 256, &rc, msg);
		ck_assert_msg(c, "%s: %s", other[i], msg);
		same_samples(ct, c, 11);
		ck_assert_int_eq(rt_finalize(c), RT_OK);
	}
	/* The format by flag, whatever the name: the .u32 file read as u16
	 * is another stream, each token followed by a 0. */
	rt_ctx *c = data_model(p32, RT_DATA_U16, 0, 256, &rc, msg);
	ck_assert_msg(c, "%s", msg);
	ck_assert_int_eq(rt_data_sample(c, 0, tok), RT_OK);
	ck_assert(tok[0] == text[0] && tok[1] == 0 && tok[2] == text[1] && tok[3] == 0);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
	ck_assert_int_eq(rt_finalize(ct), RT_OK);
}
END_TEST

/* What a rank refuses at load, naming the file: a size that is not whole
 * tokens, a token outside the vocabulary (the first, with its offset), an
 * empty file, a directory, /dev/null, a FIFO, too few tokens for one
 * sequence, shards of two formats, an empty name in the list. */
START_TEST(test_data_token_errors)
{
	uint16_t tok[12];
	for (int i = 0; i < 12; i++)
		tok[i] = (uint16_t)(i % 16);
	char odd[64], high[64], empty[64], fifo[64], shortf[64], text[64], list[256], msg[512];
	write_file(odd, sizeof odd, "odd.bin", tok, 7);
	tok[5] = 16; /* token 5: byte offset 10 */
	unsigned char hb[24];
	for (int i = 0; i < 12; i++)
		hb[2 * i] = (unsigned char)tok[i], hb[2 * i + 1] = (unsigned char)(tok[i] >> 8);
	write_file(high, sizeof high, "high.u16", hb, sizeof hb);
	write_file(empty, sizeof empty, "empty.bin", "", 0);
	write_file(shortf, sizeof shortf, "short.bin", hb, 8);
	write_file(text, sizeof text, "t.txt", "abcdefghijkl", 12);
	snprintf(fifo, sizeof fifo, "%s/fifo.bin", tmpdir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	char dir[64];
	snprintf(dir, sizeof dir, "%s/dir.bin", tmpdir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	char b1[300], b2[300], b3[300], b4[300];
	snprintf(b1, sizeof b1, "%s,%s", shortf, text);
	snprintf(b2, sizeof b2, "%s,", shortf);
	snprintf(b3, sizeof b3, "token file %s: token 16 at byte offset 10 (token 5) is not below the "
	         "model's vocabulary of 16", high);
	snprintf(b4, sizeof b4, "token file %s: 7 bytes, not a whole number of u16 tokens", odd);
	snprintf(list, sizeof list, "%s: 4 tokens, fewer than one sequence (seq + 1 = 5 tokens)", shortf);
	const struct {
		const char *files, *want;
		int rc, fmt;
	} bad[] = {
		{odd, b4, RT_EIO, RT_DATA_AUTO},
		{high, b3, RT_EIO, RT_DATA_AUTO},
		{empty, "empty.bin: empty", RT_EIO, RT_DATA_AUTO},
		{dir, "dir.bin: not a regular file (a directory)", RT_EIO, RT_DATA_AUTO},
		{"/dev/null", "token file /dev/null: not a regular file (a character device)", RT_EIO,
		 RT_DATA_U16},
		{fifo, "fifo.bin: not a regular file (a pipe)", RT_EIO, RT_DATA_AUTO},
		{shortf, list, RT_EIO, RT_DATA_AUTO},
		{b1, "is read as text", RT_EARG, RT_DATA_AUTO},
		{b2, "an empty file name in the list", RT_EARG, RT_DATA_AUTO},
		{"/nonexistent.bin", "token file /nonexistent.bin: No such file or directory", RT_EIO,
		 RT_DATA_AUTO},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc;
		ck_assert_ptr_null(data_model(bad[i].files, bad[i].fmt, 0, 16, &rc, msg));
		ck_assert_msg(rc == bad[i].rc && strstr(msg, bad[i].want), "%s: %d %s", bad[i].files, rc,
		              msg);
	}
	/* The options: values out of range, and after the model. */
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_data_options(c, 4, 0), RT_EARG);
	ck_assert_int_eq(rt_data_options(c, 0, 3), RT_EARG);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
	bufs b;
	c = tiny_model(NULL, tiny_train(), &b);
	ck_assert_int_eq(rt_data_options(c, RT_DATA_U16, 0), RT_ESTATE);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* A checkpoint trained on data A resumed on data B: refused without a
 * rule (the message names both and the rule), from sample 0 with
 * RT_DATA_RESET, from the checkpoint's position with RT_DATA_KEEP; the
 * step and the model are the checkpoint's either way. */
START_TEST(test_data_resume)
{
	uint16_t a[40], bb[40];
	for (int i = 0; i < 40; i++)
		a[i] = (uint16_t)(i % 16), bb[i] = (uint16_t)((i * 7) % 16);
	char pa[64], pb[64], dir[64], msg[512];
	write_file(pa, sizeof pa, "a.bin", a, sizeof a);
	write_file(pb, sizeof pb, "b.bin", bb, sizeof bb);
	snprintf(dir, sizeof dir, "%s/ckd", tmpdir);
	rt_train t = tiny_train();
	t.text_file = pa;
	bufs b;
	rt_ctx *c = tiny_model(NULL, t, &b);
	tiny_step(c, &b);
	ck_assert_int_eq(rt_ckpt_save(c, dir), RT_OK);
	ck_assert_int_eq(rt_finalize(c), RT_OK);

	t.text_file = pb;
	const int rules[] = {RT_DATA_SAME, RT_DATA_RESET, RT_DATA_KEEP};
	for (int i = 0; i < 3; i++) {
		c = open_ctx(NULL);
		ck_assert_int_eq(rt_data_options(c, RT_DATA_AUTO, rules[i]), RT_OK);
		c = tiny_model_on(c, t, &b);
		int rc = rt_ckpt_load(c, dir);
		snprintf(msg, sizeof msg, "%s", rt_errmsg(c));
		if (rules[i] == RT_DATA_SAME) {
			ck_assert_int_eq(rc, RT_ECKPT);
			ck_assert_msg(strstr(msg, "data mismatch: the checkpoint was trained on u16 0x") &&
			                  strstr(msg, "this run reads u16 0x") &&
			                  strstr(msg, "give --data-position reset") &&
			                  strstr(msg, "keep (from sample 2"),
			              "%s", msg);
			ck_assert_int_eq(rt_step_count(c), 0);
		} else {
			ck_assert_msg(rc == RT_OK, "%s", msg);
			ck_assert_int_eq(rt_step_count(c), 1);
			ck_assert_int_eq(rt_data_position(c), rules[i] == RT_DATA_RESET ? 0 : 2);
		}
		ck_assert_int_eq(rt_finalize(c), RT_OK);
	}
	/* On the same data, reset starts over too; without a rule the
	 * checkpoint's position stands. */
	t.text_file = pa;
	for (int i = 0; i < 2; i++) {
		c = open_ctx(NULL);
		ck_assert_int_eq(rt_data_options(c, RT_DATA_AUTO, rules[i]), RT_OK);
		c = tiny_model_on(c, t, &b);
		ck_assert_int_eq(rt_ckpt_load(c, dir), RT_OK);
		ck_assert_int_eq(rt_data_position(c), i ? 0 : 2);
		ck_assert_int_eq(rt_finalize(c), RT_OK);
	}
}
END_TEST

/* ---- communication (to itself) ---------------------------------------------------- */

START_TEST(test_comm_tags)
{
	rt_ctx *c = open_ctx(NULL);
	int a[4] = {1, 2, 3, 4}, bq[4] = {5, 6, 7, 8}, ra[4] = {0}, rb[4] = {0}, req[4];
	/* Posted in one order, sent in the other: the tags route them. */
	ck_assert_int_eq(rt_recv(c, 0, ra, sizeof ra, (rt_tag){0, 2, RT_MSG_ACT}, &req[0]), RT_OK);
	ck_assert_int_eq(rt_recv(c, 0, rb, sizeof rb, (rt_tag){0, 3, RT_MSG_ACT}, &req[1]), RT_OK);
	ck_assert_int_eq(rt_send(c, 0, bq, sizeof bq, (rt_tag){0, 3, RT_MSG_ACT}, &req[2]), RT_OK);
	ck_assert_int_eq(rt_send(c, 0, a, sizeof a, (rt_tag){0, 2, RT_MSG_ACT}, &req[3]), RT_OK);
	ck_assert_int_eq(rt_waitall(c, 4, req), RT_OK);
	ck_assert_int_eq(memcmp(ra, a, sizeof a), 0);
	ck_assert_int_eq(memcmp(rb, bq, sizeof bq), 0);
	ck_assert_int_eq(rt_wait(c, req[0]), RT_EARG); /* freed by its wait */
	/* Nothing pending: a carried wait's first step (overlap_param_gather). */
	ck_assert_int_eq(rt_wait(c, RT_NO_REQ), RT_OK);
	ck_assert_int_eq(rt_wait(c, -2), RT_EARG);

	/* A group: one handle. */
	int g;
	ck_assert_int_eq(rt_group_begin(c), RT_OK);
	ck_assert_int_eq(rt_group_begin(c), RT_ESTATE);
	ck_assert_int_eq(rt_send(c, 0, a, sizeof a, (rt_tag){1, 0, RT_MSG_GRAD}, NULL), RT_OK);
	ck_assert_int_eq(rt_recv(c, 0, rb, sizeof rb, (rt_tag){1, 0, RT_MSG_GRAD}, NULL), RT_OK);
	ck_assert_int_eq(rt_group_end(c, &g), RT_OK);
	ck_assert_int_eq(rt_wait(c, g), RT_OK);
	ck_assert_int_eq(memcmp(rb, a, sizeof a), 0);

	/* Bad tags and peers. */
	ck_assert_int_eq(rt_send(c, 0, a, 4, (rt_tag){1024, 0, RT_MSG_ACT}, &g), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "message tag out of range"));
	ck_assert_int_eq(rt_send(c, 0, a, 4, (rt_tag){0, 1 << 18, RT_MSG_ACT}, &g), RT_EARG);
	ck_assert_int_eq(rt_send(c, 1, a, 4, (rt_tag){0, 0, RT_MSG_ACT}, &g), RT_EARG);
	ck_assert_int_eq(rt_send(c, 0, a, 4, (rt_tag){0, 0, RT_MSG_ACT}, NULL), RT_EARG);

	/* A message of another size than the receive expects. */
	ck_assert_int_eq(rt_recv(c, 0, ra, 8, (rt_tag){2, 0, RT_MSG_OTHER}, &req[0]), RT_OK);
	ck_assert_int_eq(rt_send(c, 0, a, 4, (rt_tag){2, 0, RT_MSG_OTHER}, &req[1]), RT_OK);
	ck_assert_int_eq(rt_wait(c, req[1]), RT_OK);
	ck_assert_int_eq(rt_wait(c, req[0]), RT_EMPI);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "the message has 4 bytes"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

START_TEST(test_comm_timeout)
{
	static int never[4];
	rt_options o = {.comm_timeout_s = 0.2};
	rt_ctx *c = open_ctx(&o);
	int r;
	ck_assert_int_eq(rt_recv(c, 0, never, sizeof never, (rt_tag){7, 9, RT_MSG_GRAD}, &r), RT_OK);
	ck_assert_int_eq(rt_wait(c, r), RT_ETIMEOUT);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "timed out after 0.2 s waiting for: recv from rank 0 "
	                                           "(stage 7, micro-batch 9, grad, 16 bytes): rank 0 "
	                                           "waits for itself"));
	/* The receive stays posted; satisfy it so nothing is left behind. */
	int s;
	ck_assert_int_eq(rt_send(c, 0, never, sizeof never, (rt_tag){7, 9, RT_MSG_GRAD}, &s), RT_OK);
	ck_assert_int_eq(rt_wait(c, r), RT_OK);
	ck_assert_int_eq(rt_wait(c, s), RT_OK);

	/* Synchronous mode: a send to itself nobody receives never completes. */
	rt_options so = {.flags = RT_COMM_SYNC, .comm_timeout_s = 0.2};
	rt_ctx *sc = open_ctx(&so);
	ck_assert_int_eq(rt_send(sc, 0, never, sizeof never, (rt_tag){8, 0, RT_MSG_OTHER}, &s), RT_OK);
	ck_assert_int_eq(rt_wait(sc, s), RT_ETIMEOUT);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(sc), "send to rank 0 (stage 8"));
	ck_assert_int_eq(rt_recv(sc, 0, never, sizeof never, (rt_tag){8, 0, RT_MSG_OTHER}, &r), RT_OK);
	ck_assert_int_eq(rt_wait(sc, r), RT_OK);
	ck_assert_int_eq(rt_wait(sc, s), RT_OK);
	ck_assert_int_eq(rt_finalize(sc), RT_OK);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* ---- checkpoints, trace ----------------------------------------------------------- */

START_TEST(test_ckpt_roundtrip)
{
	char dir[64];
	snprintf(dir, sizeof dir, "%s/ck", tmpdir);
	bufs b1, b2;
	rt_ctx *c1 = tiny_model(NULL, tiny_train(), &b1);
	tiny_step(c1, &b1);
	ck_assert_int_eq(rt_ckpt_save(c1, dir), RT_OK);
	double l1 = tiny_step(c1, &b1);

	rt_ctx *c2 = tiny_model(NULL, tiny_train(), &b2);
	ck_assert_int_eq(rt_ckpt_load(c2, dir), RT_OK);
	ck_assert_int_eq(rt_step_count(c2), 1);
	ck_assert_int_eq(rt_data_position(c2), 2);
	double l2 = tiny_step(c2, &b2);
	ck_assert(l1 == l2);
	uint64_t h1, h2;
	ck_assert_int_eq(rt_model_hash(c1, &h1), RT_OK);
	ck_assert_int_eq(rt_model_hash(c2, &h2), RT_OK);
	ck_assert(h1 == h2);
	ck_assert_int_eq(rt_finalize(c2), RT_OK);
	ck_assert_int_eq(rt_finalize(c1), RT_OK);

	/* Another seed is refused. */
	rt_train t = tiny_train();
	t.seed = 6;
	rt_ctx *c3 = tiny_model(NULL, t, &b2);
	ck_assert_int_eq(rt_ckpt_load(c3, dir), RT_ECKPT);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c3), "seed mismatch"));
	ck_assert_int_eq(rt_finalize(c3), RT_OK);
}
END_TEST

START_TEST(test_trace)
{
	char dir[64], path[128], err[256];
	snprintf(dir, sizeof dir, "%s/tr", tmpdir);
	rt_options o = {.trace_dir = dir};
	bufs b;
	rt_ctx *c = tiny_model(&o, tiny_train(), &b);
	tiny_step(c, &b);
	ck_assert_int_eq(rt_finalize(c), RT_OK); /* writes the trace */
	snprintf(path, sizeof path, "%s/all.json", tmpdir);
	ck_assert_int_eq(rt_trace_merge(dir, 1, path, err, sizeof err), RT_OK);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char line[512];
	int F = 0, W = 0;
	while (fgets(line, sizeof line, f)) {
		F += strstr(line, "\"cat\":\"F\"") != NULL;
		W += strstr(line, "\"cat\":\"W\"") != NULL;
	}
	fclose(f);
	ck_assert_int_eq(F, 6);
	ck_assert_int_eq(W, 6);
	ck_assert_int_eq(rt_trace_merge(dir, 2, path, err, sizeof err), RT_EIO);
	ck_assert_ptr_nonnull(strstr(err, "trace-rank1.json"));
}
END_TEST

/* ---- data parallelism in one process (dp 1; run.sh dp has replicas) ---------- */

START_TEST(test_coll_bytes)
{
	rt_train t = {.dp = 4};
	ck_assert_int_eq(rt_coll_bytes(&t, RT_ALL_REDUCE, 10), 40);
	ck_assert_int_eq(rt_coll_bytes(&t, RT_REDUCE_SCATTER, 10), 48); /* shard 3, padded */
	ck_assert_int_eq(rt_coll_bytes(&t, RT_ALL_GATHER, 10), 48);
	t.dp_flags = RT_DP_EXACT;
	ck_assert_int_eq(rt_coll_bytes(&t, RT_ALL_REDUCE, 10), 10 * 8 * RT_EXACT_DIGITS);
	ck_assert_int_eq(rt_coll_bytes(&t, RT_REDUCE_SCATTER, 10), 12 * 8 * RT_EXACT_DIGITS);
	ck_assert_int_eq(rt_coll_bytes(&t, RT_ALL_GATHER, 10), 48); /* parameters: f32 */
	t.dp = 0;
	ck_assert_int_eq(rt_coll_bytes(&t, RT_REDUCE_SCATTER, 10), 10 * 8 * RT_EXACT_DIGITS);
	ck_assert_int_eq(rt_coll_bytes(&t, RT_NCOLL, 10), -1);
	ck_assert_int_eq(rt_coll_bytes(&t, RT_ALL_REDUCE, -1), -1);
}
END_TEST

START_TEST(test_dp_errors)
{
	rt_layer_spec L[3];
	size_t bytes;
	tiny_layers(L);
	rt_train t = tiny_train();
	t.replica = 1;
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &bytes), RT_EARG);
	t.replica = 0;
	t.dp_flags = 4;
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_model_bytes(c, &t, 3, L, &bytes), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "dp_flags 0x4: unknown bits"));
	t.dp_flags = 0;
	t.dp = 2; /* one rank: no second replica */
	ck_assert_int_eq(rt_model_bytes(c, &t, 3, L, &bytes), RT_OK);
	ck_assert_int_eq(rt_arena_init(c, bytes + (1 << 20)), RT_OK);
	ck_assert_int_eq(rt_model_init(c, &t, 3, L), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "the DP group of pipe_rank 0 has 1 rank(s) of the "
	                                           "job's 1, dp is 2"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

static size_t rup_align(size_t n)
{
	return (n + RT_ALIGN - 1) & ~(size_t)(RT_ALIGN - 1);
}

/* The distributed optimizer's arena (loop: 0 one bucket of the three
 * layers, 1 a bucket per layer): for D = 2 and 4 and every replica, the
 * model takes exactly the moment bytes (m and v, 4 bytes each a
 * parameter, each array rounded to RT_ALIGN) of the parameters outside
 * the replica's part of each bucket's shard less than without it, and the
 * replicas' parts cover every parameter once.  Pinned too, by hand: one
 * bucket of 128 + 296 + 136 = 560 parameters at D = 2, shard 280: replica
 * 0 holds 128 + 152 + 0 of them, so each moment array loses
 * (1216 - 640) + 576 = 1152 bytes, 2304 in all (replica 1 holds 0 + 144 +
 * 136: 512 + (1216 - 576) = 1152 too). */
START_TEST(test_model_bytes_distopt)
{
	rt_layer_spec L[3];
	int64_t np[3], total = 0;
	tiny_layers(L);
	for (int i = 0; i < 3; i++) {
		rt_sizes sz;
		ck_assert_int_eq(rt_layer_sizes(&L[i].desc, &sz), RT_OK);
		np[i] = sz.params;
		ck_assert_int_eq(np[i], i == 0 ? 128 : i == 1 ? 296 : 136);
		total += sz.params;
		L[i].bucket_start = _i;
	}
	for (int D = 2; D <= 4; D += 2) {
		int64_t covered = 0;
		for (int r = 0; r < D; r++) {
			rt_train t = tiny_train();
			size_t full, mine, gone = 0;
			t.dp = D;
			t.replica = r;
			ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &full), RT_OK);
			t.dp_flags = RT_DP_DISTOPT;
			ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &mine), RT_OK);
			/* the buckets' shards: [r*c, r*c + c) of the bucket's layers in order */
			for (int b0 = 0; b0 < 3; b0 = _i ? b0 + 1 : 3) {
				int b1 = _i ? b0 : 2;
				int64_t n = 0, off = 0;
				for (int i = b0; i <= b1; i++)
					n += np[i];
				int64_t c = (n + D - 1) / D, lo = r * c, hi = lo + c < n ? lo + c : n;
				for (int i = b0; i <= b1; off += np[i], i++) {
					int64_t a = lo > off ? lo : off, e = hi < off + np[i] ? hi : off + np[i];
					int64_t own = e > a ? e - a : 0;
					covered += own;
					gone += 2 * (rup_align(4 * (size_t)np[i]) - rup_align(4 * (size_t)own));
				}
			}
			ck_assert_uint_gt(gone, 0);
			ck_assert_uint_eq(full - mine, gone);
			if (!_i && D == 2)
				ck_assert_uint_eq(full - mine, 2304);
		}
		ck_assert_int_eq(covered, total); /* every moment held by exactly one replica */
	}
	/* Without replicas, or without the flag, nothing changes. */
	rt_train t = tiny_train();
	size_t a, b;
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &a), RT_OK);
	t.dp_flags = RT_DP_DISTOPT;
	ck_assert_int_eq(rt_model_bytes(NULL, &t, 3, L, &b), RT_OK);
	ck_assert_uint_eq(a, b);
	L[1].bucket_start = 2;
	rt_ctx *c = open_ctx(NULL);
	ck_assert_int_eq(rt_model_bytes(c, &t, 3, L, &a), RT_EARG);
	ck_assert_ptr_nonnull(strstr(rt_errmsg(c), "model: layer 1: bucket_start 2 (0 or 1)"));
	ck_assert_int_eq(rt_finalize(c), RT_OK);
}
END_TEST

/* One step with a bucket of every layer reduced over a group of one
 * (loop: 0 all-reduce, 1 reduce-scatter with the distributed optimizer),
 * exact sums: the same loss and hash as the step without collectives; and
 * the order rules. */
START_TEST(test_dp_single)
{
	bufs b1, b2;
	rt_train t = tiny_train();
	t.dp_flags = RT_DP_EXACT | (_i ? RT_DP_DISTOPT : 0);
	rt_ctx *c1 = tiny_model(NULL, t, &b1);
	t.dp = 1;
	rt_ctx *c2 = tiny_model(NULL, t, &b2);
	int64_t n = 0;
	for (int h = 0; h < 3; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c2, h, &in), RT_OK);
		n += in.sizes.params;
	}
	int kind = _i ? RT_REDUCE_SCATTER : RT_ALL_REDUCE, r;
	size_t bytes = (size_t)rt_coll_bytes(&t, kind, n);
	void *buf = malloc(bytes);
	for (int s = 0; s < 2; s++) {
		double l1 = tiny_step(c1, &b1), l2 = -1;
		int have = 0;
		ck_assert_int_eq(rt_step_begin(c2), RT_OK);
		ck_assert_int_eq(rt_post_coll(c2, kind, 0, 2, buf, bytes, &r), RT_ESTATE);
		ck_assert_ptr_nonnull(strstr(rt_errmsg(c2), "ran W on 0 of 2 micro-batches"));
		for (int m = 0; m < 2; m++) {
			ck_assert_int_eq(rt_run_f(c2, 0, m, NULL, b2.x[m], b2.act[0][m]), RT_OK);
			ck_assert_int_eq(rt_run_f(c2, 1, m, b2.x[m], b2.x[m], b2.act[1][m]), RT_OK);
			ck_assert_int_eq(rt_run_f(c2, 2, m, b2.x[m], NULL, b2.act[2][m]), RT_OK);
			ck_assert_int_eq(rt_run_b(c2, 2, m, NULL, b2.g[m], b2.act[2][m], b2.ws[2]), RT_OK);
			ck_assert_int_eq(rt_run_b(c2, 1, m, b2.g[m], b2.g[m], b2.act[1][m], b2.ws[1]), RT_OK);
			ck_assert_int_eq(rt_run_b(c2, 0, m, b2.g[m], NULL, b2.act[0][m], b2.ws[0]), RT_OK);
			for (int h = 0; h < 3; h++)
				ck_assert_int_eq(rt_run_w(c2, h, m, b2.ws[h]), RT_OK);
		}
		ck_assert_int_eq(rt_post_coll(c2, kind, 0, 2, buf, bytes - 8, &r), RT_EARG);
		ck_assert_ptr_nonnull(strstr(rt_errmsg(c2), "(rt_coll_bytes)"));
		ck_assert_int_eq(rt_post_coll(c2, kind, 0, 3, buf, bytes, &r), RT_EARG);
		ck_assert_int_eq(rt_post_coll(c2, kind, 0, 2, buf, bytes, &r), RT_OK);
		ck_assert_int_eq(rt_update(c2, 0, 2), RT_ESTATE);
		ck_assert_ptr_nonnull(strstr(rt_errmsg(c2), "not waited for"));
		ck_assert_int_eq(rt_step_end(c2, &l2, &have), RT_ESTATE);
		ck_assert_int_eq(rt_wait(c2, r), RT_OK);
		ck_assert_int_eq(rt_update(c2, 0, 1), RT_OK);
		ck_assert_int_eq(rt_update(c2, 1, 2), RT_ESTATE);
		ck_assert_ptr_nonnull(strstr(rt_errmsg(c2), "updated twice"));
		ck_assert_int_eq(rt_update(c2, 2, 2), RT_OK);
		if (_i) {
			size_t gb = (size_t)rt_coll_bytes(&t, RT_ALL_GATHER, n);
			ck_assert_int_eq(rt_post_coll(c2, RT_ALL_GATHER, 0, 2, buf, gb, &r), RT_OK);
			ck_assert_int_eq(rt_wait(c2, r), RT_OK);
		}
		ck_assert_int_eq(rt_step_end(c2, &l2, &have), RT_OK);
		ck_assert_int_eq(have, 1);
		ck_assert(l1 == l2);
	}
	uint64_t h1, h2;
	ck_assert_int_eq(rt_model_hash(c1, &h1), RT_OK);
	ck_assert_int_eq(rt_model_hash(c2, &h2), RT_OK);
	ck_assert(h1 == h2);
	ck_assert_int_eq(rt_data_position(c2), 4);
	free(buf);
	ck_assert_int_eq(rt_finalize(c2), RT_OK);
	ck_assert_int_eq(rt_finalize(c1), RT_OK);
}
END_TEST

/* ---- the schedule and clipping ------------------------------------------------- */

/* One SGD step of the tiny model under t: every layer's parameters before
 * and after (the moves are -lr * g, clipped and scheduled), and the norm. */
static double sgd_moves(rt_train t, float **before, float **after, int64_t *n)
{
	bufs b;
	rt_ctx *c = tiny_model(NULL, t, &b);
	for (int h = 0; h < 3; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c, h, &in), RT_OK);
		n[h] = in.sizes.params;
		before[h] = malloc((size_t)n[h] * sizeof(float));
		memcpy(before[h], in.params, (size_t)n[h] * sizeof(float));
	}
	tiny_step(c, &b);
	for (int h = 0; h < 3; h++) {
		rt_layer_info in;
		ck_assert_int_eq(rt_layer_get(c, h, &in), RT_OK);
		after[h] = malloc((size_t)n[h] * sizeof(float));
		memcpy(after[h], in.params, (size_t)n[h] * sizeof(float));
	}
	double norm = rt_grad_norm(c);
	ck_assert_int_eq(rt_finalize(c), RT_OK);
	return norm;
}

START_TEST(test_clip_and_schedule)
{
	rt_train t = tiny_train();
	t.optimizer = RT_SGD;
	float *p0[3], *free_[3], *big[3], *clip[3], *warm[3], *x[3];
	int64_t n[3];
	double none = sgd_moves(t, p0, free_, n);
	ck_assert(isnan(none)); /* no clipping, no norm */
	/* the norm from the moves (g = (p0 - p1) / lr), summed in double */
	double sq = 0;
	for (int h = 0; h < 3; h++)
		for (int64_t i = 0; i < n[h]; i++) {
			double g = ((double)p0[h][i] - free_[h][i]) / 1e-2;
			sq += g * g;
		}
	t.clip = 1e30f; /* above the norm: the same bits as without */
	double norm = sgd_moves(t, x, big, n);
	ck_assert_msg(fabs(norm - sqrt(sq)) <= 1e-4 * norm, "norm %g, from the moves %g", norm, sqrt(sq));
	for (int h = 0; h < 3; h++)
		ck_assert(memcmp(big[h], free_[h], (size_t)n[h] * sizeof(float)) == 0);
	/* a quarter of the norm: every move a quarter */
	t.clip = (float)(norm / 4);
	ck_assert(sgd_moves(t, x, clip, n) == norm);
	double s = (double)t.clip / norm;
	for (int h = 0; h < 3; h++)
		for (int64_t i = 0; i < n[h]; i++) {
			double d0 = (double)free_[h][i] - p0[h][i], d = (double)clip[h][i] - p0[h][i];
			/* up to the float rounding of p - lr g: a few ulp of p */
			double ulp = 4 * fabs((double)p0[h][i]) * 0x1p-24;
			ck_assert_msg(fabs(d - s * d0) <= 1e-3 * fabs(d0) + ulp, "layer %d element %lld: "
			              "moved %g, unclipped %g, scale %g", h, (long long)i, d, d0, s);
		}
	/* warm-up over 4 steps, no clipping: the first step moves by lr / 4 */
	t.clip = 0;
	t.warmup = 4;
	t.decay = RT_DECAY_COSINE;
	t.decay_steps = 10;
	sgd_moves(t, x, warm, n);
	for (int h = 0; h < 3; h++)
		for (int64_t i = 0; i < n[h]; i++) {
			double d0 = (double)free_[h][i] - p0[h][i], d = (double)warm[h][i] - p0[h][i];
			ck_assert(fabs(d - d0 / 4) <= 1e-3 * fabs(d0) + 4 * fabs((double)p0[h][i]) * 0x1p-24);
		}
	for (int h = 0; h < 3; h++) {
		free(p0[h]), free(free_[h]), free(big[h]), free(clip[h]), free(warm[h]);
	}
}
END_TEST

static Suite *rt_suite(void)
{
	Suite *s = suite_create("runtime");
	TCase *tc = tcase_create("rt");
	tcase_add_test(tc, test_arena);
	tcase_add_test(tc, test_model_bytes_exact);
	tcase_add_loop_test(tc, test_model_bytes_distopt, 0, 2);
	tcase_add_test(tc, test_model_errors);
	tcase_add_loop_test(tc, test_model_bytes_messages, 0, 9);
	tcase_add_test(tc, test_step_order);
	tcase_add_test(tc, test_step_deterministic);
	tcase_add_test(tc, test_recompute_same_bits);
	tcase_add_test(tc, test_adamw_first_step);
	tcase_add_loop_test(tc, test_decay_per_tensor, 0, 2);
	tcase_add_test(tc, test_data_synthetic);
	tcase_add_test(tc, test_data_text);
	tcase_add_test(tc, test_data_tokens);
	tcase_add_test(tc, test_data_token_errors);
	tcase_add_test(tc, test_data_resume);
	tcase_add_test(tc, test_comm_tags);
	tcase_add_test(tc, test_comm_timeout);
	tcase_add_test(tc, test_ckpt_roundtrip);
	tcase_add_test(tc, test_trace);
	tcase_add_test(tc, test_coll_bytes);
	tcase_add_test(tc, test_dp_errors);
	tcase_add_loop_test(tc, test_dp_single, 0, 2);
	tcase_add_test(tc, test_clip_and_schedule);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	int provided;
	/* One MPI for the whole suite (a singleton), so no forking. */
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	SRunner *sr = srunner_create(rt_suite());
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	if (system(cmd)) {
	}
	MPI_Finalize();
	return failed ? 1 : 0;
}
