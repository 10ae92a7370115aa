/* print.c: the IR text printer.  The grammar is in docs/ir.md; parse.c
 * reads exactly what this file writes, and every number is written so that
 * it reads back to the same value (integers in full, doubles in their
 * shortest exact form, byte counts with the largest exact binary suffix;
 * an infinite bandwidth is "inf" and UINT64_MAX bytes "unlimited"). */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ir_fmt_bytes(char *buf, size_t n, uint64_t v)
{
	static const char *const sfx[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	if (v == UINT64_MAX) { /* the `memory: unlimited` of the ideal preset */
		snprintf(buf, n, "unlimited");
		return;
	}
	int i = 0;
	while (i < 4 && v != 0 && v % 1024 == 0)
		v /= 1024, i++;
	snprintf(buf, n, "%llu%s", (unsigned long long)v, sfx[i]);
}

void ir_fmt_size(char *buf, size_t n, uint64_t v)
{
	static const char *const sfx[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (v == UINT64_MAX) {
		snprintf(buf, n, "unlimited");
		return;
	}
	if (v < 1024) {
		snprintf(buf, n, "%llu B", (unsigned long long)v);
		return;
	}
	double x = (double)v / 1024;
	int i = 0;
	while (i < 5 && x >= 1000) /* 1000 KiB .. 1023 KiB: 0.98 MiB */
		x /= 1024, i++;
	/* Three significant digits: 1.50 KiB, 12.3 MiB, 456 GiB. */
	snprintf(buf, n, x < 10 ? "%.2f %s" : x < 100 ? "%.1f %s" : "%.0f %s", x, sfx[i]);
}

void ir_fmt_time(char *buf, size_t n, double us)
{
	double a = fabs(us); /* a difference of two times may be negative */
	if (a >= 1e6)
		snprintf(buf, n, "%.3f s", us * 1e-6);
	else if (a >= 1e3)
		snprintf(buf, n, "%.3f ms", us * 1e-3);
	else
		snprintf(buf, n, "%.1f us", us);
}

static void print_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			fprintf(out, "\\x%02x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

/* Rates (memory bandwidth, link bandwidth) may be infinite: "inf". */
static void fmt_rate(char *buf, size_t n, double v)
{
	if (isinf(v) && v > 0)
		snprintf(buf, n, "inf");
	else
		fmt_double(buf, n, v);
}

static void print_double(FILE *out, const char *key, double v, const char *unit)
{
	char buf[64];
	fmt_double(buf, sizeof buf, v);
	fprintf(out, " %s=%s%s", key, buf, unit);
}

static void print_bytes(FILE *out, const char *key, uint64_t v)
{
	char buf[64];
	ir_fmt_bytes(buf, sizeof buf, v);
	fprintf(out, " %s=%s", key, buf);
}

static void print_list(FILE *out, const char *key, const int64_t *v, int n)
{
	if (!n)
		return;
	fprintf(out, " %s=", key);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%lld", i ? "," : "", (long long)v[i]);
}

static void print_link(FILE *out, const char *key, ir_link l)
{
	char bw[64], lat[64];
	fmt_rate(bw, sizeof bw, l.bw);
	fmt_double(lat, sizeof lat, l.lat);
	fprintf(out, " %s=%s/%sus", key, bw, lat);
}

static void print_layer(FILE *out, const ir_module *m, int i)
{
	const ir_layer *l = &m->layers[i];
	int64_t ver = l->attr[IR_ATTR_VERSION];
	fprintf(out, "layer L%d %s", i, ir_layer_kind_names[l->kind]);
	for (int a = 0; a < IR_NATTRS; a++) {
		if (!ir_attr_applies(a, l->kind, ver))
			continue;
		const ir_attr_info *ai = &ir_attr_table[a];
		if (ai->type == IR_AT_ACT) {
			int64_t v = l->attr[a];
			if (v >= 0 && v < IR_NACTS)
				fprintf(out, " %s=%s", ai->name, ir_act_names[v]);
			else
				fprintf(out, " %s=%lld", ai->name, (long long)v);
		} else if (ai->type == IR_AT_REAL && l->attr[a] != 0) {
			print_double(out, ai->name, ir_attr_real(l, a), "");
		} else if (ai->type == IR_AT_BOOL && l->attr[a] == 1) {
			fprintf(out, " %s=%s", ai->name, ir_switch_names[1]);
		} else if (ai->type == IR_AT_ENUM && l->attr[a] != 0) {
			int n;
			const char *const *names = ir_attr_enum_names(a, &n);
			if (l->attr[a] > 0 && l->attr[a] < n)
				fprintf(out, " %s=%s", ai->name, names[l->attr[a]]);
			else
				fprintf(out, " %s=%lld", ai->name, (long long)l->attr[a]);
		} else if (l->attr[a] != 0) {
			fprintf(out, " %s=%lld", ai->name, (long long)l->attr[a]);
		}
	}
	/* A known cost prints every field; one that is not yet (a profile's,
	 * before the cost pass) only what was measured. */
	const ir_cost *c = &l->cost;
	unsigned has = c->known ? IR_CF_ALL & ~(c->cold ? 0 : IR_CF_BIT(COLD)) : c->measured;
	if (has & IR_CF_BIT(F))
		print_double(out, "f", c->f, "us");
	if (has & IR_CF_BIT(B))
		print_double(out, "b", c->b, "us");
	if (has & IR_CF_BIT(W))
		print_double(out, "w", c->w, "us");
	if (has & IR_CF_BIT(COLD)) {
		print_double(out, "f_cold", c->f_cold, "us");
		print_double(out, "b_cold", c->b_cold, "us");
		print_double(out, "w_cold", c->w_cold, "us");
	}
	if (has & IR_CF_BIT(FLOPS))
		print_double(out, "flops", c->flops, "");
	if (has & IR_CF_BIT(ACT))
		print_bytes(out, "act", c->act);
	if (has & IR_CF_BIT(WSTASH))
		print_bytes(out, "wstash", c->wstash);
	if (has & IR_CF_BIT(PARAMS))
		fprintf(out, " params=%llu", (unsigned long long)c->params);
	if (has & IR_CF_BIT(RESIDENT))
		print_bytes(out, "resident", c->resident);
	/* Selective recomputation's, where there is something to drop. */
	if (c->known && c->sel_f != 0)
		print_double(out, "sel_f", c->sel_f, "us");
	if (c->known && c->sel_act != 0)
		print_bytes(out, "sel_act", c->sel_act);
	if (c->measured) {
		const char *sep = " measured=";
		for (int k = 0; k < IR_NCOST_FIELDS; k++)
			if (c->measured & (1u << k)) {
				fprintf(out, "%s%s", sep, ir_cost_field_names[k]);
				sep = ",";
			}
	}
	fputc('\n', out);
}

/* An optional group is printed when any of its fields is set (not 0,
 * NULL or empty). */
static bool group_set(const ir_hline *h, int group, const char *base)
{
	static const ir_module zero;
	for (int i = 0; i < h->nfields; i++)
		if (h->fields[i].group == group &&
		    !ir_hfield_eq(&h->fields[i], base, (const char *)&zero + h->off))
			return true;
	return false;
}

static void print_hfield(FILE *out, const ir_hfield *f, const char *base)
{
	const void *p = base + f->off;
	char buf[64];
	switch (f->type) {
	case IR_HF_NAME: {
		const char *name = *(const char *const *)p;
		fputc(' ', out);
		print_str(out, name ? name : "");
		return;
	}
	case IR_HF_INT:
		fprintf(out, " %s=%lld", f->key, (long long)*(const int64_t *)p);
		return;
	case IR_HF_U64:
		fprintf(out, " %s=%llu", f->key, (unsigned long long)*(const uint64_t *)p);
		return;
	case IR_HF_ENUM:
		fprintf(out, " %s=%s", f->key, f->names[*(const int *)p]);
		return;
	case IR_HF_F64:
		print_double(out, f->key, *(const double *)p, "");
		return;
	case IR_HF_US:
		print_double(out, f->key, *(const double *)p, "us");
		return;
	case IR_HF_BYTES:
		print_bytes(out, f->key, *(const uint64_t *)p);
		return;
	case IR_HF_RATE:
		fmt_rate(buf, sizeof buf, *(const double *)p);
		fprintf(out, " %s=%s", f->key, buf);
		return;
	case IR_HF_STR:
		fprintf(out, " %s=", f->key);
		print_str(out, *(const char *const *)p);
		return;
	case IR_HF_LINK:
		print_link(out, f->key, *(const ir_link *)p);
		return;
	case IR_HF_LIST:
		print_list(out, f->key, *(int64_t *const *)p, *(const int *)(base + f->count));
		return;
	}
	ir_bug("header field '%s' of unknown type %d", f->key, (int)f->type);
}

/* keyword [STRING] key=value... (ir.h's table of the line) */
static void print_hline(FILE *out, const ir_module *m, const ir_hline *h)
{
	const char *base = (const char *)m + h->off;
	fputs(h->keyword, out);
	for (int i = 0; i < h->nfields; i++) {
		const ir_hfield *f = &h->fields[i];
		if (!f->group || group_set(h, f->group, base))
			print_hfield(out, f, base);
	}
	fputc('\n', out);
}

/* all-reduce S1 b0 L3..L5 2MiB | wait all-reduce S1 b0 | update S1 b0 L3..L5
 * | wait all-gather S1 b0 carried */
static void print_dp_op(FILE *out, const char *ind, const ir_op *op)
{
	if (ir_is_tie_op(op)) { /* tie S7 L31 D0 16MiB | wait tie S7 */
		char b[32];
		ir_fmt_bytes(b, sizeof b, op->bytes);
		if (op->comm == IR_COMM_WAIT)
			fprintf(out, "%swait tie S%d\n", ind, op->stage);
		else
			fprintf(out, "%stie S%d L%d D%d %s\n", ind, op->stage, op->first, op->peer, b);
		return;
	}
	if (op->comm == IR_COMM_WAIT) {
		fprintf(out, "%swait %s S%d b%d%s\n", ind, ir_comm_names[op->coll], op->stage, op->mb,
		        op->carried ? " carried" : "");
		return;
	}
	fprintf(out, "%s%s S%d b%d L%d..L%d", ind, ir_comm_names[op->comm], op->stage, op->mb,
	        op->first, op->last);
	if (op->comm != IR_COMM_UPDATE) {
		char b[32];
		ir_fmt_bytes(b, sizeof b, op->bytes);
		fprintf(out, " %s", b);
	}
	fputc('\n', out);
}

void ir_print(FILE *out, const ir_module *m)
{
	fprintf(out, "octopipe-ir %d\n", IR_VERSION);

	for (int i = 0; i < IR_NHLINES; i++)
		print_hline(out, m, &ir_hlines[i]);

	for (int i = 0; i < m->nlayers; i++)
		print_layer(out, m, i);
	for (int i = 0; i < m->nstages; i++) {
		const ir_stage *s = &m->stages[i];
		fprintf(out, "stage S%d L%d..L%d", i, s->first, s->last);
		if (s->device >= 0)
			fprintf(out, " @D%d", s->device);
		if (s->recompute != IR_RECOMP_NONE)
			fprintf(out, " recompute=%s", ir_recompute_names[s->recompute]);
		fputc('\n', out);
	}
	for (int d = 0; d < m->ndevices; d++) {
		const ir_device *dev = &m->devices[d];
		fprintf(out, "device D%d {\n", d);
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			bool opens = op->group && (i == 0 || dev->ops[i - 1].group != op->group);
			bool closes = op->group && (i + 1 == dev->nops || dev->ops[i + 1].group != op->group);
			const char *ind = op->group ? "    " : "  ";
			if (opens)
				fputs("  group {\n", out);
			if (op->comm == IR_COMM_NONE) {
				fprintf(out, "%s%s S%d m%d\n", ind, ir_op_names[op->kind], op->stage, op->mb);
			} else if (ir_is_dp_op(op) || ir_is_tie_op(op)) {
				print_dp_op(out, ind, op);
			} else {
				fprintf(out, "%s%s %s S%d m%d", ind, ir_comm_names[op->comm],
				        ir_value_names[op->kind], op->stage, op->mb);
				if (op->comm != IR_COMM_WAIT) {
					char b[32];
					ir_fmt_bytes(b, sizeof b, op->bytes);
					fprintf(out, " D%d %s", op->peer, b);
				}
				fputc('\n', out);
			}
			if (closes)
				fputs("  }\n", out);
		}
		fputs("}\n", out);
	}
	if (m->proof.proven)
		fprintf(out, "proof %s steps=%lld order=%016llx\n", ir_backend_names[m->proof.backend],
		        (long long)m->proof.steps, (unsigned long long)m->proof.order);
	for (int d = 0; m->memplan && d < m->ndevices; d++) {
		const ir_dev_plan *dp = &m->memplan[d];
		char a[32], o[32], z[32];
		ir_fmt_bytes(a, sizeof a, dp->arena);
		fprintf(out, "memplan D%d arena=%s {\n", d, a);
		for (int i = 0; i < dp->nbufs; i++) {
			const ir_buf *b = &dp->bufs[i];
			ir_fmt_bytes(o, sizeof o, b->off);
			ir_fmt_bytes(z, sizeof z, b->size);
			fprintf(out, "  %s", ir_buf_names[b->kind]);
			if (b->kind == IR_BUF_BUCKET)
				fprintf(out, " %s S%d b%d off=%s size=%s live=%d..%d\n", ir_comm_names[b->coll],
				        b->stage, b->mb, o, z, b->first, b->last);
			if (b->kind == IR_BUF_BUCKET)
				continue;
			if (!ir_buf_is_stash(b->kind))
				fprintf(out, " %s", ir_value_names[b->value]);
			fprintf(out, " S%d m%d off=%s size=%s live=%d..%d\n", b->stage, b->mb, o, z, b->first,
			        b->last);
		}
		fputs("}\n", out);
	}
}

char *ir_print_string(const ir_module *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		ir_bug("open_memstream failed");
	ir_print(f, m);
	fclose(f);
	return buf;
}
