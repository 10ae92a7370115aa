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
 * fixed amount of work per device is spent: it is deterministic, and one
 * layout is at worst quadratic in a device's buffers.  docs/memplan.md
 * has the numbers. */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

#include "pass.h"

enum {
	ROUNDS = 32,          /* promotions per order */
	WORK = 1 << 24,       /* placed buffers scanned per device, all layouts together */
};

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		ir_bug("out of memory");
	return p;
}

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

uint64_t memplan_assign(ir_buf *b, int n)
{
	if (n == 0)
		return 0;
	alloc a = {.b = b, .n = n};
	int *order = xmalloc((size_t)n * sizeof *order), *promoted = xmalloc((size_t)n * sizeof *promoted);
	a.key = xmalloc((size_t)n * sizeof *a.key);
	a.key2 = xmalloc((size_t)n * sizeof *a.key2);
	a.placed = xmalloc((size_t)n * sizeof *a.placed);
	uint64_t *best = xmalloc((size_t)n * sizeof *best);
	a.psz = xmalloc((size_t)n * sizeof *a.psz);
	for (int i = 0; i < n; i++)
		a.psz[i] = (b[i].size + IR_BUF_ALIGN - 1) / IR_BUF_ALIGN * IR_BUF_ALIGN;

	/* Bytes live at each op (padded): the lower bound, and the
	 * hottest-first key. */
	int ops = 0;
	for (int i = 0; i < n; i++)
		if (b[i].last + 1 > ops)
			ops = b[i].last + 1;
	uint64_t *at = xmalloc(((size_t)ops + 1) * sizeof *at), lower = 0;
	memset(at, 0, ((size_t)ops + 1) * sizeof *at);
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
	uint64_t ptop = UINT64_MAX;
	for (int o = 0; o < 3 && ptop > lower; o++) {
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
		for (int r = 0; r <= ROUNDS && a.work < WORK; r++) {
			uint64_t top = place(&a, order);
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
	free(a.psz);
	free(order);
	free(promoted);
	free(a.key);
	free(a.key2);
	free(a.placed);
	free(best);
	free(at);
	return size;
}

int pass_memplan(ir_module *m)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (!m->ndevices) {
		diag_error(where, "memplan: the module has no programs; run 'schedule' first");
		return -1;
	}
	if (!m->proof.proven) {
		diag_error(where, "memplan: the programs have no deadlock-freedom proof; run 'comm' and "
		                  "'verify' first");
		return -1;
	}
	for (int l = 0; l < m->nlayers; l++)
		if (!m->layers[l].cost.known) {
			diag_error(where, "memplan: layer L%d has no cost; run the 'cost' pass first", l);
			return -1;
		}
	/* Every buffer is a part of the step's bytes: when they fit in 2^60,
	 * no offset + size below can wrap. */
	int over = ir_step_bytes_overflow(m);
	if (over >= 0)
		return ir_step_bytes_error(m, over, ir_loc_or(m->layer_loc ? m->layer_loc[over]
		                                                           : (ir_loc){0}, where));
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
