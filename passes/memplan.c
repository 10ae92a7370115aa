/* memplan.c: the `memplan` pass: the static memory plan.
 *
 * Reads proven programs (the `verify` pass) and the layer costs; writes
 * m->memplan: per device, every buffer its program needs (ir_live_buffers:
 * stashed activations, W stashes, received, sent and handed-over values,
 * each with its live range in program order and its size) with an offset in
 * one arena, and the arena's size.  Guarantees what ir_verify checks: no
 * two buffers live at the same op share a byte, and each fits in the
 * arena.  The plan is a function of the module alone (no clock, no
 * addresses), so the IR text reproduces it exactly; the simulator reports
 * resident + arena as the device's peak memory, the number codegen
 * allocates.
 *
 * Offsets: interval allocation (dynamic storage allocation, NP-hard in
 * general), at multiples of IR_BUF_ALIGN.  A buffer goes in the smallest
 * gap that the buffers already placed and live with it leave, else on top
 * of them (best fit); the order of placement decides the layout.  Three
 * orders are tried: hottest first (by the most bytes live at any op of its
 * range, then size), largest first, and program order (which is optimal
 * when all sizes are equal: an interval graph colours greedily).  Each is
 * then refined by promotion: the buffers that reach the top of the arena
 * move to the front of the order and the layout is made again.  The
 * smallest arena wins.  The search stops at the lower bound (the most
 * bytes live at any one op, sizes rounded up to the alignment), or once a
 * fixed amount of work per device is spent; a layout that would scan more
 * than that is not made, and the program-order layout, made in one sweep
 * over a free list (place_sweep), is then the plan: O(n log n) in a
 * device's buffers.  Deterministic.  docs/memplan.md has the numbers. */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

#include "pass.h"

enum {
	ROUNDS = 32,          /* promotions per order */
	WORK = 1 << 22,       /* placed buffers scanned per device, all layouts together */
};

/* A placed buffer: its bytes (padded) and its live range. */
typedef struct span {
	uint64_t off, end;
	int first, last;
} span;

typedef struct alloc {
	ir_buf *b;
	int n;
	uint64_t *psz;        /* sizes rounded up to IR_BUF_ALIGN: what placement uses */
	uint64_t *key, *key2; /* the sort keys of the order being made */
	span *placed;         /* the buffers placed so far, by offset */
	long work;
	arena *scratch;       /* where the working arrays live */
} alloc;

static alloc *sort_ctx; /* qsort has no context argument */

/* Keys descending, then first op, then list order. */
static int by_key(const void *x, const void *y)
{
	int i = *(const int *)x, j = *(const int *)y;
	const alloc *a = sort_ctx;
	if (a->key[i] != a->key[j])
		return a->key[i] > a->key[j] ? -1 : 1;
	if (a->key2[i] != a->key2[j])
		return a->key2[i] > a->key2[j] ? -1 : 1;
	if (a->b[i].first != a->b[j].first)
		return a->b[i].first - a->b[j].first;
	return i - j;
}

/* Lay the buffers out in `order`, best fit, at multiples of IR_BUF_ALIGN;
 * returns the top of the padded sizes.  The placed buffers stay sorted by
 * offset, so the gaps that those live with a buffer leave come out of one
 * scan. */
static uint64_t place(alloc *a, const int *order)
{
	ir_buf *b = a->b;
	uint64_t top = 0;
	int np = 0;
	for (int i = 0; i < a->n; i++) {
		ir_buf *x = &b[order[i]];
		uint64_t size = a->psz[order[i]];
		x->off = 0;
		if (!size)
			continue;
		uint64_t cur = 0, at = 0, gap = UINT64_MAX;
		for (int j = 0; j < np; j++) {
			const span *y = &a->placed[j];
			if (y->first > x->last || x->first > y->last)
				continue;
			if (y->off > cur && y->off - cur >= size && y->off - cur < gap)
				at = cur, gap = y->off - cur;
			if (y->end > cur)
				cur = y->end;
		}
		a->work += np;
		x->off = gap != UINT64_MAX ? at : cur;
		top = x->off + size > top ? x->off + size : top;
		int j = np;
		while (j > 0 && a->placed[j - 1].off > x->off)
			j--;
		memmove(&a->placed[j + 1], &a->placed[j], (size_t)(np - j) * sizeof *a->placed);
		a->placed[j] = (span){x->off, x->off + size, x->first, x->last};
		np++;
	}
	return top;
}

/* ---- program order in one sweep ------------------------------------------
 *
 * In program order the buffers placed and live with x are exactly those
 * not yet dead at x.first, so the gaps they leave are the free ranges of
 * an allocator that frees each buffer after its last op: place() in that
 * order, in O(n log n).  The free ranges are a treap twice over, by offset
 * (to merge a freed range with its neighbours) and by (size, offset) (best
 * fit: the smallest that fits, the lowest of equal ones); the range above
 * every live buffer is one of them, of size UINT64_MAX - off. */

typedef struct gap {
	uint64_t off, end;
	int kid[2][2];  /* per tree: left, right */
	uint32_t pri;
} gap;

typedef struct gaps {
	gap *g;
	int n, root[2], spare; /* spare: a freed node, chained through kid[0][0] */
} gaps;

/* Tree 0 orders by offset, tree 1 by (size, offset). */
static bool gless(const gaps *G, int t, int x, uint64_t size, uint64_t off)
{
	const gap *a = &G->g[x];
	uint64_t as = a->end - a->off;
	return t ? as < size || (as == size && a->off < off) : a->off < off;
}

/* Split tree t at key (size, off): the nodes below it go to *lo, the rest
 * to *hi. */
static void gsplit(gaps *G, int t, int x, uint64_t size, uint64_t off, int *lo, int *hi)
{
	if (x < 0) {
		*lo = *hi = -1;
		return;
	}
	if (gless(G, t, x, size, off)) {
		gsplit(G, t, G->g[x].kid[t][1], size, off, &G->g[x].kid[t][1], hi);
		*lo = x;
	} else {
		gsplit(G, t, G->g[x].kid[t][0], size, off, lo, &G->g[x].kid[t][0]);
		*hi = x;
	}
}

static int gmerge(gaps *G, int t, int a, int b)
{
	if (a < 0 || b < 0)
		return a < 0 ? b : a;
	if (G->g[a].pri > G->g[b].pri) {
		G->g[a].kid[t][1] = gmerge(G, t, G->g[a].kid[t][1], b);
		return a;
	}
	G->g[b].kid[t][0] = gmerge(G, t, a, G->g[b].kid[t][0]);
	return b;
}

static uint64_t gkey_size(const gaps *G, int x)
{
	return G->g[x].end - G->g[x].off;
}

static void gput(gaps *G, uint64_t off, uint64_t end)
{
	int x = G->spare;
	G->spare = G->g[x].kid[0][0];
	uint32_t h = (uint32_t)x + 0x9e3779b9u; /* deterministic priorities: a hash of the node */
	h = (h ^ (h >> 16)) * 0x85ebca6bu;
	h = (h ^ (h >> 13)) * 0xc2b2ae35u;
	G->g[x] = (gap){off, end, {{-1, -1}, {-1, -1}}, h ^ (h >> 16)};
	for (int t = 0; t < 2; t++) {
		int lo, hi;
		gsplit(G, t, G->root[t], gkey_size(G, x), off, &lo, &hi);
		G->root[t] = gmerge(G, t, gmerge(G, t, lo, x), hi);
	}
}

static void gdrop(gaps *G, int x)
{
	uint64_t size = gkey_size(G, x), off = G->g[x].off;
	for (int t = 0; t < 2; t++) {
		int lo, mid, hi;
		gsplit(G, t, G->root[t], size, off, &lo, &mid);
		gsplit(G, t, mid, size, off + 1, &mid, &hi); /* mid: x alone (offsets are unique) */
		ir_assert(mid == x);
		G->root[t] = gmerge(G, t, lo, hi);
	}
	G->g[x].kid[0][0] = G->spare;
	G->spare = x;
}

/* The first node of tree t at or above key (size, off), or -1. */
static int gceil(const gaps *G, int t, uint64_t size, uint64_t off)
{
	int best = -1;
	for (int x = G->root[t]; x >= 0;)
		if (gless(G, t, x, size, off)) {
			x = G->g[x].kid[t][1];
		} else {
			best = x;
			x = G->g[x].kid[t][0];
		}
	return best;
}

/* The last node of tree 0 below offset off, or -1. */
static int gbelow(const gaps *G, uint64_t off)
{
	int best = -1;
	for (int x = G->root[0]; x >= 0;)
		if (G->g[x].off < off) {
			best = x;
			x = G->g[x].kid[0][1];
		} else {
			x = G->g[x].kid[0][0];
		}
	return best;
}

static alloc *sweep_ctx;

static int by_last(const void *x, const void *y)
{
	int i = *(const int *)x, j = *(const int *)y;
	const ir_buf *b = sweep_ctx->b;
	return b[i].last != b[j].last ? (b[i].last < b[j].last ? -1 : 1) : i - j;
}

/* place() for `order`, which must be program order (first op, then list
 * order), in one sweep. */
static uint64_t place_sweep(alloc *a, const int *order)
{
	ir_buf *b = a->b;
	int n = a->n, *dying = arena_calloc(a->scratch, (size_t)n, sizeof *dying), nd = 0;
	for (int i = 0; i < n; i++)
		if (a->psz[i])
			dying[nd++] = i;
		else
			b[i].off = 0;
	sweep_ctx = a;
	qsort(dying, (size_t)nd, sizeof *dying, by_last);
	gaps G = {.g = arena_calloc(a->scratch, (size_t)nd + 2, sizeof *G.g), .root = {-1, -1}, .spare = 0};
	for (int i = 0; i < nd + 2; i++)
		G.g[i].kid[0][0] = i + 1 < nd + 2 ? i + 1 : -1;
	gput(&G, 0, UINT64_MAX);
	uint64_t top = 0;
	for (int i = 0, k = 0; i < n; i++) {
		ir_buf *x = &b[order[i]];
		uint64_t size = a->psz[order[i]];
		if (!size)
			continue;
		for (; k < nd && b[dying[k]].last < x->first; k++) { /* free the dead */
			uint64_t lo = b[dying[k]].off, hi = lo + a->psz[dying[k]];
			int below = gbelow(&G, lo), above = gceil(&G, 0, 0, hi);
			if (below >= 0 && G.g[below].end == lo) {
				lo = G.g[below].off;
				gdrop(&G, below);
			}
			if (above >= 0 && G.g[above].off == hi) {
				hi = G.g[above].end;
				gdrop(&G, above);
			}
			gput(&G, lo, hi);
		}
		int g = gceil(&G, 1, size, 0); /* the range above everything always fits */
		uint64_t off = G.g[g].off, end = G.g[g].end;
		gdrop(&G, g);
		if (end - off > size)
			gput(&G, off + size, end);
		x->off = off;
		top = off + size > top ? off + size : top;
	}
	return top;
}

uint64_t memplan_assign(ir_buf *b, int n)
{
	if (n == 0)
		return 0;
	/* The layouts' working memory, freed together at the end. */
	arena *ar = arena_new();
	alloc a = {.b = b, .n = n, .scratch = ar};
	int *order = arena_calloc(ar, (size_t)n, sizeof *order);
	int *promoted = arena_calloc(ar, (size_t)n, sizeof *promoted);
	a.key = arena_calloc(ar, (size_t)n, sizeof *a.key);
	a.key2 = arena_calloc(ar, (size_t)n, sizeof *a.key2);
	a.placed = arena_calloc(ar, (size_t)n, sizeof *a.placed);
	uint64_t *best = arena_calloc(ar, (size_t)n, sizeof *best);
	a.psz = arena_calloc(ar, (size_t)n, sizeof *a.psz);
	for (int i = 0; i < n; i++)
		a.psz[i] = (b[i].size + IR_BUF_ALIGN - 1) / IR_BUF_ALIGN * IR_BUF_ALIGN;

	/* Bytes live at each op (padded): the lower bound, and the
	 * hottest-first key. */
	int ops = 0;
	for (int i = 0; i < n; i++)
		if (b[i].last + 1 > ops)
			ops = b[i].last + 1;
	uint64_t *at = arena_calloc(ar, (size_t)ops + 1, sizeof *at), lower = 0;
	for (int i = 0; i < n; i++) {
		/* Differences, summed below: modulo 2^64, so a step down may wrap. */
		at[b[i].first] += a.psz[i];
		at[b[i].last + 1] -= a.psz[i];
	}
	for (int p = 0; p < ops; p++) {
		if (p)
			at[p] += at[p - 1];
		if (at[p] > lower)
			lower = at[p];
	}
	/* A layout by place() scans up to k(k-1)/2 placed buffers (k of them
	 * not empty); it runs only when that fits in WORK, so that a device of
	 * many buffers gets the program-order layout alone, in one sweep. */
	long full = 0;
	for (int i = 0; i < n; i++)
		full += a.psz[i] != 0;
	bool general = full * (full - 1) / 2 <= WORK;
	uint64_t ptop = UINT64_MAX;
	for (int o = general ? 0 : 2; o < 3 && ptop > lower; o++) {
		/* 0: hottest, then largest; 1: largest; 2: program order. */
		for (int i = 0; i < n; i++) {
			uint64_t hot = 0;
			for (int p = b[i].first; o == 0 && p <= b[i].last; p++)
				hot = at[p] > hot ? at[p] : hot;
			order[i] = i;
			a.key[i] = o == 0 ? hot : o == 1 ? b[i].size : 0;
			a.key2[i] = o == 0 ? b[i].size : 0;
		}
		sort_ctx = &a;
		qsort(order, (size_t)n, sizeof *order, by_key);
		for (int r = 0; r <= ROUNDS && ((o == 2 && r == 0) || (general && a.work < WORK)); r++) {
			uint64_t top = o == 2 && r == 0 ? place_sweep(&a, order) : place(&a, order);
			if (top < ptop) {
				ptop = top;
				for (int i = 0; i < n; i++)
					best[i] = b[i].off;
			}
			if (ptop == lower)
				break;
			/* Promote the buffers that reach the top, keeping the order
			 * within each part. */
			int k = 0;
			for (int i = 0; i < n; i++)
				if (b[order[i]].size && b[order[i]].off + a.psz[order[i]] == top)
					promoted[k++] = order[i];
			for (int i = 0; i < n; i++)
				if (!(b[order[i]].size && b[order[i]].off + a.psz[order[i]] == top))
					promoted[k++] = order[i];
			memcpy(order, promoted, (size_t)n * sizeof *order);
		}
	}
	uint64_t size = 0;
	for (int i = 0; i < n; i++) {
		b[i].off = best[i];
		if (b[i].off + b[i].size > size)
			size = b[i].off + b[i].size;
	}
	arena_free(ar);
	return size;
}

int pass_memplan(ir_module *m, pass_ctx *cx)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (!m->ndevices) {
		diag_sink_error(cx->diag, where, "memplan: the module has no programs; run 'schedule' first");
		return -1;
	}
	if (!m->proof.proven) {
		diag_sink_error(cx->diag, where, "memplan: the programs have no deadlock-freedom proof; run 'comm' and "
		                       "'verify' first");
		return -1;
	}
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			diag_sink_error(cx->diag, where, "memplan: layer L%d has no cost; run the 'cost' pass first", l);
			return -1;
		}
	/* Every buffer is a part of the step's bytes: when they fit in 2^60,
	 * no offset + size below can wrap. */
	int over = ir_step_bytes_overflow(m);
	if (over >= 0)
		return ir_step_bytes_error(m, over, ir_loc_or(m->layer_loc ? m->layer_loc[over]
		                                                           : (ir_loc){0}, where), cx->diag);
	ir_alloc_memplan(m);
	for (int d = 0; d < m->ndevices; d++) {
		ir_buf *b;
		int n = ir_live_buffers(m, d, &b);
		m->memplan[d].arena = memplan_assign(b, n);
		for (int i = 0; i < n; i++)
			ir_add_buf(m, d, &b[i], (ir_loc){0});
		free(b);
	}
	return 0;
}
