/* bench/kernels.c: GFLOP/s of the CPU layer kernels (F, B, W per layer) on
 * the tiny models' shapes and on Llama-3-8B-shaped layers at a short
 * sequence, next to cblas_sgemm measured in the same run on the layer's
 * main projection (in -> out, over T tokens) as that phase runs it:
 * F  Y = X W      (NN, T x out x in)
 * B  dX = dY W^T  (NT, T x in x out)
 * W  dW = X^T dY  (TN, in x out x T)
 *
 *   bench_kernels [--threads N] [--tiny | --full]
 *
 * --threads sets OpenBLAS's thread count (default: its own); --tiny runs
 * the tiny shapes only; --full adds the 8B LM head (vocab 128256: about
 * 540 GFLOP per F+B+W, a minute on two cores).  FLOPs are
 * rt_layer_flops(): matrix products and the causal half of attention. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "octo_kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xalloc(size_t bytes)
{
	void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	if (!p) {
		fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	memset(p, 0, bytes);
	return p;
}

/* Best times of fn[0] and fn[1] (fn[1] may be NULL), run alternately so
 * that both see the same machine: a warm-up each, then timed pairs until
 * `budget` seconds have passed, at least three. */
typedef int (*phase_fn)(void *ctx);

static void best_times(phase_fn fn[2], void *ctx[2], double budget, double best[2])
{
	double start = now();
	best[0] = best[1] = 1e30;
	for (int i = 0; i < 1000; i++) {
		for (int k = 0; k < 2; k++) {
			if (!fn[k])
				continue;
			double t0 = now();
			if (fn[k](ctx[k])) {
				fprintf(stderr, "bench_kernels: kernel failed\n");
				exit(1);
			}
			double t = now() - t0;
			if (i > 0 && t < best[k])
				best[k] = t;
		}
		if (i >= 3 && now() - start > budget)
			break;
	}
}

typedef struct gemm_ctx {
	bool ta, tb;
	int m, n, k;
	float *a, *b, *c;
} gemm_ctx;

static int run_gemm(void *p)
{
	gemm_ctx *g = p;
	cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
	            g->m, g->n, g->k, 1, g->a, g->ta ? g->m : g->k, g->b, g->tb ? g->k : g->n, 0, g->c,
	            g->n);
	return 0;
}

static gemm_ctx gemm_new(bool ta, bool tb, int m, int n, int k)
{
	gemm_ctx g = {ta, tb, m, n, k, xalloc((size_t)m * k * 4), xalloc((size_t)k * n * 4),
	              xalloc((size_t)m * n * 4)};
	for (size_t i = 0; i < (size_t)m * k; i++)
		g.a[i] = (float)(i % 7) * 0.1f;
	for (size_t i = 0; i < (size_t)k * n; i++)
		g.b[i] = (float)(i % 5) * 0.1f;
	return g;
}

typedef struct layer_ctx {
	const rt_layer_desc *d;
	float *p, *g, *x, *y, *dy, *dx;
	int32_t *tok;
	void *act, *ws, *scr;
	rt_loss loss;
} layer_ctx;

static int run_f(void *p)
{
	layer_ctx *c = p;
	bool emb = c->d->kind == RT_EMBEDDING, head = c->d->kind == RT_HEAD;
	return rt_forward(c->d, c->p, emb ? NULL : c->x, emb || head ? c->tok : NULL, head ? NULL : c->y,
	                  head ? &c->loss : NULL, c->act, c->scr);
}

static int run_b(void *p)
{
	layer_ctx *c = p;
	bool emb = c->d->kind == RT_EMBEDDING, head = c->d->kind == RT_HEAD;
	return rt_backward_b(c->d, c->p, head ? NULL : c->dy, 1e-3f, emb ? NULL : c->dx, c->act, c->ws,
	                     c->scr);
}

static int run_w(void *p)
{
	layer_ctx *c = p;
	return rt_backward_w(c->d, c->p, c->g, c->ws, c->scr);
}

typedef struct entry {
	const char *model, *name;
	rt_layer_desc d;
	int in, out; /* the main projection, for the sgemm reference (0: none) */
} entry;

static void bench(const entry *e, double budget)
{
	const rt_layer_desc *d = &e->d;
	rt_sizes sz;
	double fl[3];
	if (rt_layer_sizes(d, &sz) || rt_layer_flops(d, &fl[0], &fl[1], &fl[2])) {
		fprintf(stderr, "bench_kernels: bad layer %s\n", e->name);
		exit(1);
	}
	size_t T = (size_t)(d->seq * d->mbs), nx = T * (size_t)d->hidden;
	layer_ctx c = {d, xalloc((size_t)sz.params * 4), xalloc((size_t)sz.params * 4),
	               xalloc(nx * 4), xalloc(nx * 4), xalloc(nx * 4), xalloc(nx * 4),
	               xalloc(T * 4), xalloc((size_t)sz.act), xalloc((size_t)sz.wstash),
	               xalloc((size_t)sz.scratch), {0, 0}};
	rt_layer_init(d, 1, 1, c.p);
	for (size_t i = 0; i < nx; i++) {
		c.x[i] = (float)((i * 37) % 101) / 50.0f - 1;
		c.dy[i] = (float)((i * 53) % 97) / 48.0f - 1;
	}
	for (size_t t = 0; t < T; t++)
		c.tok[t] = (int32_t)((t * 31) % (size_t)(d->vocab ? d->vocab : 1));
	int T_ = (int)T;
	phase_fn fns[3] = {run_f, run_b, run_w};
	const char *names[3] = {"F", "B", "W"};
	bool ta[3] = {false, false, true}, tb[3] = {false, true, false};
	int gm[3] = {T_, T_, e->in}, gn[3] = {e->out, e->in, e->out}, gk[3] = {e->in, e->out, T_};
	for (int i = 0; i < 3; i++) {
		if (i == 1)
			run_f(&c); /* B needs F's stash; W needs B's */
		if (i == 2)
			run_b(&c);
		if (fl[i] == 0)
			continue;
		gemm_ctx g = {0};
		if (e->in)
			g = gemm_new(ta[i], tb[i], gm[i], gn[i], gk[i]);
		phase_fn fn[2] = {fns[i], e->in ? run_gemm : NULL};
		void *ctx[2] = {&c, &g};
		double best[2];
		best_times(fn, ctx, budget, best);
		double rate = fl[i] / best[0] * 1e-9, t = best[0];
		char refs[64] = "", pct[16] = "";
		if (e->in) {
			double ref = 2.0 * gm[i] * gn[i] * gk[i] / best[1] * 1e-9;
			snprintf(refs, sizeof refs, "%8.1f  %s %dx%dx%d", ref, i == 0 ? "NN" : i == 1 ? "NT" : "TN",
			         gm[i], gn[i], gk[i]);
			snprintf(pct, sizeof pct, "%5.0f%%", 100 * rate / ref);
			free(g.a), free(g.b), free(g.c);
		}
		printf("%-10s %-14s %s %10.3f %9.3f %9.1f %6s %s\n", e->model, e->name, names[i], t * 1e3,
		       fl[i] * 1e-9, rate, pct, refs);
		fflush(stdout);
	}
	free(c.p), free(c.g), free(c.x), free(c.y), free(c.dy), free(c.dx), free(c.tok);
	free(c.act), free(c.ws), free(c.scr);
}

#define TINY(k) .kind = k, .hidden = 64, .seq = 64, .mbs = 2
#define L8B(k) .kind = k, .hidden = 4096, .seq = 128, .mbs = 1

int main(int argc, char **argv)
{
	bool full = false, tiny_only = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			openblas_set_num_threads(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--full"))
			full = true;
		else if (!strcmp(argv[i], "--tiny"))
			tiny_only = true;
		else {
			fprintf(stderr, "usage: bench_kernels [--threads N] [--tiny | --full]\n");
			return 1;
		}
	}
	static const entry tiny[] = {
		{"tiny", "embedding", {TINY(RT_EMBEDDING), .vocab = 256}, 0, 0},
		{"tiny", "attention", {TINY(RT_ATTENTION), .heads = 4, .kv_heads = 2}, 64, 64},
		{"tiny", "mlp swiglu", {TINY(RT_MLP), .ffn = 128}, 64, 128},
		{"tiny", "moe 4x64 top2", {TINY(RT_MOE), .experts = 4, .top_k = 2, .expert_ffn = 64,
		                           .shared_experts = 1}, 64, 64},
		{"tiny", "mamba2", {TINY(RT_MAMBA), .version = 2, .state = 16, .expand = 2, .conv = 4,
		                    .head_dim = 16, .groups = 1}, 64, 296},
		{"tiny", "head", {TINY(RT_HEAD), .vocab = 256}, 64, 256},
	};
	static const entry big[] = {
		{"llama3-8b", "attention", {L8B(RT_ATTENTION), .heads = 32, .kv_heads = 8}, 4096, 4096},
		{"llama3-8b", "mlp swiglu", {L8B(RT_MLP), .ffn = 14336}, 4096, 14336},
		{"llama3-8b", "head", {L8B(RT_HEAD), .vocab = 128256}, 4096, 128256},
	};
	printf("OpenBLAS threads: %d; best of repeated runs, kernel and sgemm alternating\n", openblas_get_num_threads());
	printf("%-10s %-14s %s %10s %9s %9s %6s %8s  %s\n", "model", "layer", "P", "ms", "GFLOP",
	       "GFLOP/s", "%sgemm", "sgemm", "sgemm shape MxNxK");
	for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++)
		bench(&tiny[i], 0.3);
	for (size_t i = 0; !tiny_only && i < sizeof big / sizeof *big - (full ? 0 : 1); i++)
		bench(&big[i], 2.0);
	return 0;
}
