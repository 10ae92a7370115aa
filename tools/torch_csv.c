/* torch_csv.c: torch.distributed.pipelining's schedule CSV, written from a
 * plan and read into one (docs/interop.md).
 *
 * The format is what torch's _dump_csv writes and _load_csv reads: one row
 * per rank of the pipeline group, in rank order, each cell one _Action as
 * its repr prints it, STAGE TYPE [MICROBATCH] with no separator ("0F1",
 * "3SEND_F0", "1REDUCE_GRAD"), an empty cell an idle step; torch's own
 * stage indices are ours (S0 is stage 0), and it infers the stage-to-rank
 * mapping from the rows.
 *
 * The mapping of work: F is F; torch's I (backward input) is our B and its
 * W our W; its B (full backward) is our B followed at once by our W.  A
 * plan whose schedule splits the backward is written with I and W; one
 * that does not (1f1b, i1f1b: the gradient leaves after W) with B.  Read
 * back, a file with any I or W is a split plan (schedule tuned: an order
 * of our own, not a baseline's), one with only B a fused one (1f1b with one
 * stage per device, else i1f1b).
 *
 * Comm actions name the stage whose rank runs them: SEND_F and SEND_B the
 * sending stage, RECV_F and RECV_B the receiving one (torch's
 * _add_send_recv).  Written from our send and recv ops; read, they are
 * checked and then left to the `comm` pass, which lowers the programs for
 * the plan's backend and which `verify` proves.
 *
 * The CSV layer is torch's dialect only (Python's csv module with its
 * defaults: commas, quotes doubled inside a quoted cell, \r\n or \n), read
 * here so that every cell keeps its line and column for the diagnostics. */
#include "torch_csv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"

/* X(enum, text, needs a micro-batch, compute) */
#define TCSV_ACTIONS(X)                                                          \
	X(F, "F", true, true) X(I, "I", true, true) X(B, "B", true, true)            \
	X(W, "W", true, true) X(SEND_F, "SEND_F", true, false)                       \
	X(RECV_F, "RECV_F", true, false) X(SEND_B, "SEND_B", true, false)            \
	X(RECV_B, "RECV_B", true, false) X(UNSHARD, "UNSHARD", false, false)         \
	X(RESHARD, "RESHARD", false, false) X(REDUCE_GRAD, "REDUCE_GRAD", false, false)

typedef enum act_kind {
#define X(e, s, mb, c) A_##e,
	TCSV_ACTIONS(X)
#undef X
	A_COUNT
} act_kind;

static const struct {
	const char *name;
	bool needs_mb, compute;
} acts[A_COUNT] = {
#define X(e, s, mb, c) {s, mb, c},
    TCSV_ACTIONS(X)
#undef X
};

/* The most stages and ranks a file may name: the cluster's device limit. */
#define TCSV_MAX_INDEX 65536

typedef struct action {
	act_kind kind;
	int stage, mb; /* mb: -1 when absent */
	ir_loc loc;
} action;

typedef struct row {
	action *a;
	int n, cap;
	ir_loc loc; /* the row's first column */
} row;

struct tcsv_sched {
	row *rows;
	int nrows, caprows;
	int nstages, nmb;
	int *rank_of;       /* per stage */
	ir_loc *stage_at;   /* per stage: its first compute action */
	bool split;         /* some I or W: the backward is split */
	const src_file *src;
};

int tcsv_ranks(const tcsv_sched *s) { return s->nrows; }
int tcsv_microbatches(const tcsv_sched *s) { return s->nmb; }

/* ---- reading ----------------------------------------------------------- */

typedef struct reader {
	arena *ar;
	const src_file *src;
	tcsv_sched *s;
} reader;

static ir_loc at(const reader *r, int line, int col)
{
	return (ir_loc){r->src, line, col};
}

/* Decimal digits at p[*i..n) into *v, at most max; false when there are
 * none or too many. */
static bool digits(const char *p, size_t n, size_t *i, long max, long *v, bool *any)
{
	*v = 0;
	*any = false;
	while (*i < n && p[*i] >= '0' && p[*i] <= '9') {
		*v = *v * 10 + (p[*i] - '0');
		if (*v > max)
			return false;
		*any = true;
		(*i)++;
	}
	return true;
}

/* One action, p[0..n) without the blanks around it, at column col:
 *   action := STAGE TYPE [MICROBATCH]      ; STAGE, MICROBATCH: decimal */
static int parse_action(reader *r, const char *p, size_t n, int line, int col, action *out)
{
	size_t i = 0;
	long v;
	bool any;
	if (!digits(p, n, &i, TCSV_MAX_INDEX - 1, &v, &any)) {
		diag_error(at(r, line, col), "stage index above %d", TCSV_MAX_INDEX - 1);
		return -1;
	}
	if (!any) {
		diag_error(at(r, line, col), "'%.*s' is not an action: torch writes STAGE TYPE [MICROBATCH], "
		           "as 0F1 or 2SEND_F0", (int)(n > 40 ? 40 : n), p);
		return -1;
	}
	out->stage = (int)v;
	int kind = -1;
	size_t len = 0;
	for (int k = 0; k < A_COUNT; k++) {
		size_t l = strlen(acts[k].name);
		if (l > len && l <= n - i && memcmp(p + i, acts[k].name, l) == 0)
			kind = k, len = l;
	}
	int tcol = col + (int)i;
	if (kind == A_B && i + 1 < n && p[i + 1] == 'W') {
		diag_error(at(r, line, tcol), "BW is older torch's full backward: torch now writes it B, and "
		           "the backward input I");
		return -1;
	}
	if (kind < 0) {
		size_t e = i;
		while (e < n && ((p[e] >= 'A' && p[e] <= 'Z') || p[e] == '_' || (p[e] >= 'a' && p[e] <= 'z')))
			e++;
		char word[48];
		snprintf(word, sizeof word, "%.*s", (int)(e - i > 40 ? 40 : e - i), p + i);
		const char *names[A_COUNT];
		for (int k = 0; k < A_COUNT; k++)
			names[k] = acts[k].name;
		const char *near = *word ? diag_nearest(word, names, A_COUNT) : NULL;
		if (!*word)
			diag_error(at(r, line, tcol), "an action type must follow the stage index %.*s (F, I, "
			           "B, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD)", (int)i, p);
		else if (near)
			diag_error(at(r, line, tcol), "unknown action type '%s'; did you mean '%s'?", word, near);
		else
			diag_error(at(r, line, tcol), "unknown action type '%s' (F, I, B, W, SEND_F, RECV_F, "
			           "SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD)", word);
		return -1;
	}
	out->kind = (act_kind)kind;
	i += len;
	size_t mcol = i;
	if (!digits(p, n, &i, PASS_MAX_PAIRS - 1, &v, &any)) {
		diag_error(at(r, line, col + (int)mcol), "micro-batch index above %d", PASS_MAX_PAIRS - 1);
		return -1;
	}
	out->mb = any ? (int)v : -1;
	if (i < n) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c >= 0x7f)
			diag_error(at(r, line, col + (int)i), "unexpected byte 0x%02x after the action %.*s", c,
			           (int)i, p);
		else
			diag_error(at(r, line, col + (int)i), "unexpected '%c' after the action %.*s", c, (int)i, p);
		return -1;
	}
	if (!any && acts[kind].needs_mb) {
		diag_error(at(r, line, col + (int)mcol), "%.*s needs a micro-batch index (as %.*s0)", (int)i, p,
		           (int)i, p);
		return -1;
	}
	out->loc = at(r, line, col);
	return 0;
}

static void push(reader *r, row *w, const action *a)
{
	*VEC_PUSH(r->ar, w->a, w->n, w->cap) = *a;
}

/* One cell, p[0..n) as the line holds it (quotes included), at column col:
 *   cell := ''  |  action  |  '(' action {';' action} ')OVERLAP_F_B'
 * An overlapped F and B run one after the other here. */
static int parse_cell(reader *r, row *w, const char *p, size_t n, int line, int col)
{
	char *buf = NULL;
	if (n && p[0] == '"') {
		/* A quoted cell: torch never needs one, the csv module may write one. */
		buf = arena_alloc(r->ar, n + 1);
		size_t k = 0, i = 1;
		for (;; i++) {
			if (i >= n) {
				diag_error(at(r, line, col), "a quoted cell without its closing quote");
				return -1;
			}
			if (p[i] == '"') {
				if (i + 1 < n && p[i + 1] == '"') {
					buf[k++] = '"', i++;
					continue;
				}
				break;
			}
			buf[k++] = p[i];
		}
		if (i + 1 != n) {
			diag_error(at(r, line, col + (int)i + 1), "text after the closing quote of a cell");
			return -1;
		}
		p = buf, n = k, col += 1;
	}
	while (n && (*p == ' ' || *p == '\t'))
		p++, n--, col++;
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (!n)
		return 0;
	action a;
	if (*p != '(') {
		if (parse_action(r, p, n, line, col, &a))
			return -1;
		push(r, w, &a);
		return 0;
	}
	const char *close = memchr(p, ')', n);
	static const char overlap[] = "OVERLAP_F_B";
	if (!close) {
		diag_error(at(r, line, col), "'(' opens sub-actions that no ')' closes");
		return -1;
	}
	size_t after = (size_t)(close - p) + 1;
	if (n - after != strlen(overlap) || memcmp(p + after, overlap, n - after) != 0) {
		diag_error(at(r, line, col + (int)after), "sub-actions in parentheses make an OVERLAP_F_B: "
		           "(0F1;1B0)OVERLAP_F_B");
		return -1;
	}
	for (size_t i = 1; i < after - 1;) {
		size_t e = i;
		while (e < after - 1 && p[e] != ';')
			e++;
		size_t b = i, t = e;
		while (b < t && p[b] == ' ')
			b++;
		while (t > b && p[t - 1] == ' ')
			t--;
		if (b == t) {
			diag_error(at(r, line, col + (int)b), "an empty sub-action");
			return -1;
		}
		if (parse_action(r, p + b, t - b, line, col + (int)b, &a))
			return -1;
		if (!acts[a.kind].compute) {
			diag_error(a.loc, "an OVERLAP_F_B overlaps compute actions, not %s", acts[a.kind].name);
			return -1;
		}
		push(r, w, &a);
		i = e + 1;
	}
	return 0;
}

static int parse_rows(reader *r)
{
	const char *t = r->src->text, *end = t + r->src->len;
	for (int line = 1; t < end; line++) {
		const char *nl = memchr(t, '\n', (size_t)(end - t));
		const char *e = nl ? nl : end;
		if (e > t && e[-1] == '\r')
			e--;
		if (r->s->nrows >= TCSV_MAX_INDEX) {
			diag_error(at(r, line, 1), "more than %d rows: a row is a rank", TCSV_MAX_INDEX);
			return -1;
		}
		row *w = VEC_PUSH(r->ar, r->s->rows, r->s->nrows, r->s->caprows);
		memset(w, 0, sizeof *w);
		w->loc = at(r, line, 1);
		const char *c = t;
		for (;;) {
			/* A cell ends at a comma outside quotes. */
			const char *q = c;
			bool quoted = false;
			while (q < e && (quoted || *q != ',')) {
				if (*q == '"')
					quoted = !quoted;
				q++;
			}
			if (parse_cell(r, w, c, (size_t)(q - c), line, 1 + (int)(c - t)))
				return -1;
			if (q >= e)
				break;
			c = q + 1;
		}
		t = nl ? nl + 1 : end;
	}
	return 0;
}

static void fmt_loc(char *buf, size_t n, ir_loc l)
{
	snprintf(buf, n, "line %d, column %d", l.line, l.col);
}

static void act_text(char *buf, size_t n, const action *a)
{
	if (a->mb >= 0)
		snprintf(buf, n, "%d%s%d", a->stage, acts[a->kind].name, a->mb);
	else
		snprintf(buf, n, "%d%s", a->stage, acts[a->kind].name);
}

/* Stages, their ranks, the micro-batch count; each (stage, micro-batch)
 * once forwarded and once backwarded (B, or I and W); comm actions on the
 * ranks of their stages. */
static int check(reader *r)
{
	tcsv_sched *s = r->s;
	int S = 0, M = 0;
	for (int k = 0; k < s->nrows; k++)
		for (int i = 0; i < s->rows[k].n; i++) {
			const action *a = &s->rows[k].a[i];
			if (acts[a->kind].compute) {
				S = a->stage + 1 > S ? a->stage + 1 : S;
				M = a->mb + 1 > M ? a->mb + 1 : M;
			}
		}
	if (!S) {
		diag_error(at(r, 1, 1), "no compute action (F, I, B, W) in the file");
		return -1;
	}
	s->rank_of = arena_calloc(r->ar, (size_t)S, sizeof *s->rank_of);
	s->stage_at = arena_calloc(r->ar, (size_t)S, sizeof *s->stage_at);
	for (int st = 0; st < S; st++)
		s->rank_of[st] = -1;
	char where[64], txt[64];
	for (int k = 0; k < s->nrows; k++)
		for (int i = 0; i < s->rows[k].n; i++) {
			const action *a = &s->rows[k].a[i];
			if (!acts[a->kind].compute)
				continue;
			if (s->rank_of[a->stage] < 0) {
				s->rank_of[a->stage] = k;
				s->stage_at[a->stage] = a->loc;
			} else if (s->rank_of[a->stage] != k) {
				fmt_loc(where, sizeof where, s->stage_at[a->stage]);
				diag_error(a->loc, "stage %d runs on rank %d (%s) and here on rank %d: torch runs a "
				           "stage on one rank", a->stage, s->rank_of[a->stage], where, k);
				return -1;
			}
		}
	for (int st = 0; st < S; st++)
		if (s->rank_of[st] < 0) {
			diag_error(s->stage_at[S - 1], "stage %d is here, but stage %d has no action: torch "
			           "numbers the stages 0..%d in pipeline order", S - 1, st, S - 1);
			return -1;
		}
	if ((long)S * M > PASS_MAX_PAIRS) {
		diag_error(at(r, 1, 1), "%d stages x %d micro-batches is more than the %d (stage, "
		           "micro-batch) pairs a plan may hold", S, M, PASS_MAX_PAIRS);
		return -1;
	}
	/* first[(stage, mb) x kind]: where the action was first seen. */
	ir_loc *first = arena_calloc(r->ar, (size_t)S * M * 4, sizeof *first);
	for (int k = 0; k < s->nrows; k++)
		for (int i = 0; i < s->rows[k].n; i++) {
			const action *a = &s->rows[k].a[i];
			act_text(txt, sizeof txt, a);
			if (!acts[a->kind].compute) {
				/* Torch's receiving stage of RECV_F is the one after the
				 * sender, of RECV_B the one before. */
				bool fwd = a->kind == A_SEND_F || a->kind == A_RECV_F;
				bool send = a->kind == A_SEND_F || a->kind == A_SEND_B;
				bool p2p = a->kind <= A_RECV_B;
				int peer = fwd == send ? a->stage + 1 : a->stage - 1;
				if (a->stage >= S) {
					diag_error(a->loc, "%s names stage %d, but the stages are 0..%d", txt, a->stage, S - 1);
					return -1;
				}
				if (p2p && (peer < 0 || peer >= S)) {
					diag_error(a->loc, "%s: stage %d %s %s stage %d, which does not exist", txt, a->stage,
					           send ? "sends to" : "receives from", fwd == send ? "the next" : "the previous",
					           peer);
					return -1;
				}
				if (p2p && a->mb >= M) {
					diag_error(a->loc, "%s names micro-batch %d, but the compute actions run 0..%d", txt,
					           a->mb, M - 1);
					return -1;
				}
				if (s->rank_of[a->stage] != k) {
					diag_error(a->loc, "%s is an action of stage %d, which runs on rank %d, not on this "
					           "rank %d", txt, a->stage, s->rank_of[a->stage], k);
					return -1;
				}
				continue;
			}
			int slot = a->kind == A_F ? 0 : a->kind == A_W ? 2 : a->kind == A_I ? 1 : 3;
			ir_loc *f = &first[((size_t)a->stage * M + a->mb) * 4];
			if (f[slot].src) {
				fmt_loc(where, sizeof where, f[slot]);
				diag_error(a->loc, "%s a second time (first at %s)", txt, where);
				return -1;
			}
			if ((slot == 1 && f[3].src) || (slot == 3 && f[1].src)) {
				fmt_loc(where, sizeof where, f[slot == 1 ? 3 : 1]);
				diag_error(a->loc, "%s: micro-batch %d of stage %d already has a %s backward (%s); it "
				           "takes a full backward B or an I and a W", txt, a->mb, a->stage,
				           slot == 1 ? "full" : "split", where);
				return -1;
			}
			f[slot] = a->loc;
			if (a->kind == A_I || a->kind == A_W)
				s->split = true;
		}
	for (int st = 0; st < S; st++)
		for (int mb = 0; mb < M; mb++) {
			const ir_loc *f = &first[((size_t)st * M + mb) * 4];
			const char *missing = !f[0].src                ? "forward F"
			                      : !f[1].src && f[2].src  ? "I before its W"
			                      : !f[1].src && !f[3].src ? "backward (B, or I and W)"
			                      : f[1].src && !f[2].src  ? "weight gradient W after its I"
			                                               : NULL;
			if (missing) {
				ir_loc l = f[2].src && !f[1].src ? f[2] : f[1].src ? f[1] : s->stage_at[st];
				diag_error(l, "stage %d has no %s of micro-batch %d (the file runs micro-batches "
				           "0..%d, the highest it names)", st, missing, mb, M - 1);
				return -1;
			}
		}
	s->nstages = S, s->nmb = M;
	return 0;
}

tcsv_sched *tcsv_read(arena *ar, const char *path)
{
	src_file *src = src_read(ar, path);
	if (!src)
		return NULL;
	tcsv_sched *s = arena_alloc(ar, sizeof *s);
	s->src = src;
	reader r = {ar, src, s};
	if (parse_rows(&r) || check(&r))
		return NULL;
	return s;
}

/* ---- building the plan ------------------------------------------------- */

/* "2,3,3": one positive layer count per stage. */
static int layers_list(ir_module *m, const char *list, int S, ir_loc where)
{
	int64_t *given = arena_calloc(m->arena, (size_t)S, sizeof *given);
	int n = 0;
	for (const char *p = list;;) {
		char *end;
		errno = 0;
		long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : 0;
		if (v < 1 || errno || v > INT32_MAX) {
			diag_error(where, "--layers-per-stage takes one positive layer count per stage, as 2,3,3");
			return -1;
		}
		if (n < S)
			given[n] = v;
		n++;
		if (!*end)
			break;
		if (*end != ',') {
			diag_error(where, "--layers-per-stage takes one positive layer count per stage, as 2,3,3");
			return -1;
		}
		p = end + 1;
	}
	if (n != S) {
		diag_error(where, "--layers-per-stage gives %d stages, the schedule has %d", n, S);
		return -1;
	}
	int64_t sum = 0;
	for (int i = 0; i < S; i++)
		sum += given[i];
	if (sum != m->nlayers) {
		diag_error(where, "--layers-per-stage gives %lld layers, the model has %d", (long long)sum,
		           m->nlayers);
		return -1;
	}
	m->plan.partition = IR_PART_GIVEN;
	m->plan.given = given;
	m->plan.ngiven = S;
	return 0;
}

/* The model's partition (or the given one) cut into S stages: the
 * partition pass, asked for S stages of one device each. */
static int cut(ir_module *m, int S, ir_loc last_stage)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (S > m->nlayers) {
		diag_error(last_stage, "stage %d: the schedule has %d stages, but the model has %d layers",
		           S - 1, S, m->nlayers);
		return -1;
	}
	if (m->plan.partition == IR_PART_GIVEN && m->plan.ngiven != S) {
		diag_error(where, "the model's given partition has %d stages, the schedule %d (give "
		           "--layers-per-stage)", m->plan.ngiven, S);
		return -1;
	}
	ir_plan_opts keep = m->plan;
	int64_t devices = m->cluster.devices;
	m->plan.schedule = IR_SCHED_GPIPE; /* any number of stages per device, chunks as given */
	m->plan.chunks = 1;
	m->plan.nplacement = 0;
	m->cluster.devices = S;
	int rc = pass_run_one(m, PASS_partition, NULL);
	m->cluster.devices = devices;
	m->plan = keep;
	return rc;
}

int tcsv_build(ir_module *m, const tcsv_sched *s, const char *layers_per_stage, ir_loc where)
{
	int S = s->nstages, P = s->nrows;
	ir_assert(m->cluster.devices == P && m->train.microbatches == s->nmb);
	if (layers_per_stage && layers_list(m, layers_per_stage, S, where))
		return -1;
	if (cut(m, S, s->stage_at[S - 1]))
		return -1;
	int64_t *placement = arena_calloc(m->arena, (size_t)S, sizeof *placement);
	int *per = arena_calloc(m->arena, (size_t)P, sizeof *per);
	int most = 1;
	for (int st = 0; st < S; st++) {
		placement[st] = s->rank_of[st];
		m->stages[st].device = s->rank_of[st];
		if (++per[s->rank_of[st]] > most)
			most = per[s->rank_of[st]];
	}
	m->plan.placement = placement;
	m->plan.nplacement = S;
	m->plan.schedule = s->split ? IR_SCHED_TUNED : most == 1 ? IR_SCHED_1F1B : IR_SCHED_I1F1B;
	m->plan.chunks = most;
	ir_alloc_devices(m);
	for (int k = 0; k < P; k++)
		for (int i = 0; i < s->rows[k].n; i++) {
			const action *a = &s->rows[k].a[i];
			switch (a->kind) {
			case A_F:
				ir_add_op(m, k, IR_OP_F, a->stage, a->mb, a->loc);
				break;
			case A_I:
				ir_add_op(m, k, IR_OP_B, a->stage, a->mb, a->loc);
				break;
			case A_W:
				ir_add_op(m, k, IR_OP_W, a->stage, a->mb, a->loc);
				break;
			case A_B: /* the full backward: B, then W at once */
				ir_add_op(m, k, IR_OP_B, a->stage, a->mb, a->loc);
				ir_add_op(m, k, IR_OP_W, a->stage, a->mb, a->loc);
				break;
			default: /* comm and FSDP actions: `comm` lowers the programs itself */
				break;
			}
		}
	return ir_verify(m) ? -1 : 0;
}

/* ---- writing ------------------------------------------------------------ */

/* Does stage s sit where torch's loop style (s mod P) or V style puts it? */
static bool torch_style_placement(const ir_module *m)
{
	int S = m->nstages, P = m->ndevices;
	bool loop = S % P == 0, v = S == 2 * P;
	for (int s = 0; s < S; s++) {
		loop = loop && m->stages[s].device == s % P;
		v = v && m->stages[s].device == (s < P ? s : 2 * P - 1 - s);
	}
	return loop || v;
}

static void cell(FILE *f, bool *first, int stage, const char *type, int mb)
{
	fprintf(f, "%s%d%s", *first ? "" : ",", stage, type);
	if (mb >= 0)
		fprintf(f, "%d", mb);
	*first = false;
}

int tcsv_export(const ir_module *m, bool comms, const char *path)
{
	if (!m->ndevices) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "--export-schedule: the plan has no device programs");
		return 1;
	}
	if (comms && !ir_lowered(m) && m->nstages > 1) {
		diag_error(ir_loc_or(m->plan_loc, m->loc), "--export-schedule torch-csv-comms: the programs "
		           "are not lowered (run the 'comm' pass)");
		return 1;
	}
	FILE *f = fopen(path, "w");
	if (!f) {
		diag_error((ir_loc){0}, "cannot write '%s': %s", path, strerror(errno));
		return 1;
	}
	bool split = ir_schedule_splits_backward[m->plan.schedule];
	int M = (int)ir_local_mb(m);
	int *wdone = calloc((size_t)m->nstages, sizeof *wdone);
	ir_assert(wdone);
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		bool first = true;
		int fused_w = -1; /* the W a B written as torch's full backward took */
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			if (op->comm == IR_COMM_SEND || op->comm == IR_COMM_RECV) {
				if (!comms)
					continue;
				bool fwd = op->kind == IR_OP_F, send = op->comm == IR_COMM_SEND;
				/* A receive is the receiving stage's: the next one for an
				 * activation, the previous one for a gradient. */
				int st = send ? op->stage : fwd ? op->stage + 1 : op->stage - 1;
				cell(f, &first, st, send ? (fwd ? "SEND_F" : "SEND_B") : (fwd ? "RECV_F" : "RECV_B"),
				     op->mb);
				continue;
			}
			if (op->comm != IR_COMM_NONE)
				continue; /* waits (torch waits before the consumer) and the DP ops */
			if (op->kind == IR_OP_F) {
				cell(f, &first, op->stage, "F", op->mb);
				continue;
			}
			if (op->kind == IR_OP_B) {
				/* Fused when the backward leaves as one piece and its W is
				 * the next compute op. */
				int j = i + 1;
				while (j < dev->nops && dev->ops[j].comm != IR_COMM_NONE)
					j++;
				bool fuse = !split && j < dev->nops && dev->ops[j].kind == IR_OP_W &&
				            dev->ops[j].stage == op->stage && dev->ops[j].mb == op->mb;
				cell(f, &first, op->stage, fuse ? "B" : "I", op->mb);
				if (fuse)
					fused_w = j; /* comm ops between the two still follow B */
				continue;
			}
			if (i != fused_w)
				cell(f, &first, op->stage, "W", op->mb);
			if (comms && ++wdone[op->stage] == M)
				cell(f, &first, op->stage, "REDUCE_GRAD", -1);
		}
		fputc('\n', f);
	}
	free(wdone);
	if (fclose(f) != 0) {
		diag_error((ir_loc){0}, "cannot write '%s': %s", path, strerror(errno));
		return 1;
	}
	ir_loc plan = {0}; /* notes about the whole file */
	if (strcmp(pass_partition_label(m), "uniform") != 0) {
		/* Torch's schedule names stages, not layers: say how to cut them. */
		char *list = arena_strdup(m->arena, "");
		for (int st = 0; st < m->nstages; st++)
			list = arena_printf(m->arena, "%s%s%d", list, st ? "," : "",
			                    m->stages[st].last - m->stages[st].first + 1);
		diag_note(plan, "%s: the file names stages, not their layers; this plan's are not the "
		          "uniform cut: import it with --layers-per-stage %s", path, list);
	}
	for (int d = 0, st = 0; d < m->ndevices; d++, st = 0) {
		while (st < m->nstages && m->stages[st].device != d)
			st++;
		if (st == m->nstages) {
			diag_note(plan, "%s: D%d runs no stage, an empty row: torch builds a rank's schedule "
			          "from its stages, so every rank of the pipeline group needs one", path, d);
			break;
		}
	}
	if (!torch_style_placement(m)) {
		char *map = arena_strdup(m->arena, "");
		for (int st = 0; st < m->nstages; st++)
			map = arena_printf(m->arena, "%s%s%d", map, st ? "," : "", m->stages[st].device);
		diag_note(plan, "%s: torch's _load_csv takes any stage-to-rank mapping from the rows, but "
		          "torchtitan builds a rank's stages in loop style (stage s on rank s mod %d, as many "
		          "on each) or V style only, and this placement is neither: build stage s on the "
		          "s-th of the ranks %s (docs/interop.md)", path, m->ndevices, map);
	}
	if (ir_dp(m) > 1)
		diag_note(plan, "%s: one pipeline's schedule (%lld micro-batches); each of the %lld "
		          "replicas runs it in its own pipeline group, and the gradients' reduction is "
		          "torch's own (docs/interop.md)", path, (long long)M, (long long)ir_dp(m));
	return 0;
}
