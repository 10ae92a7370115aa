/* testutil.c: diagnostics capture, the program executor, the IR round trip
 * and the suite runner (testutil.h). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static char *buf;
static size_t len;
static FILE *saved;

void tu_capture(void)
{
	saved = diag_stream;
	diag_stream = open_memstream(&buf, &len);
	diag_errors = 0;
}

const char *tu_captured(void)
{
	fflush(diag_stream);
	return buf ? buf : "";
}

void tu_release(void)
{
	fclose(diag_stream);
	diag_stream = saved;
	free(buf);
	buf = NULL;
}

char *tu_release_first_line(void)
{
	const char *all = tu_captured();
	char *first = strndup(all, strcspn(all, "\n"));
	tu_release();
	return first;
}

int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

bool tu_ir_round_trips(const ir_module *m)
{
	char *text = ir_print_string(m);
	arena *a = arena_new();
	ir_module *back = ir_parse(src_from_string(a, "t.opir", text));
	ck_assert_msg(back != NULL, "the printed IR does not parse:\n%s", text);
	bool same = ir_equal(m, back);
	ir_free(back);
	arena_free(a);
	free(text);
	return same;
}

void tu_execute(const ir_module *m, int *peak_stage, int *peak_dev)
{
	int S = m->nstages, M = (int)m->train.microbatches, P = m->ndevices;
	char *done = calloc((size_t)S * M * 3, 1);
	int *pc = calloc((size_t)P, sizeof *pc);
	int *cur_s = calloc((size_t)S, sizeof *cur_s), *cur_d = calloc((size_t)P, sizeof *cur_d);
	ck_assert(done && pc && cur_s && cur_d);
	if (peak_stage)
		memset(peak_stage, 0, (size_t)S * sizeof *peak_stage);
	if (peak_dev)
		memset(peak_dev, 0, (size_t)P * sizeof *peak_dev);
	int total = 0, finished = 0;
	for (int d = 0; d < P; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			total += m->devices[d].ops[i].comm == IR_COMM_NONE;
	for (bool progress = true; progress;) {
		progress = false;
		for (int d = 0; d < P; d++) {
			while (pc[d] < m->devices[d].nops) {
				const ir_op *op = &m->devices[d].ops[pc[d]];
				if (op->comm != IR_COMM_NONE) {
					pc[d]++;
					continue;
				}
				int s = op->stage, mb = op->mb;
#define DONE(st, k) done[((size_t)(st) * M + mb) * 3 + (k)]
				bool ready = op->kind == IR_OP_F ? (s == 0 || DONE(s - 1, IR_OP_F))
				             : op->kind == IR_OP_B ? (s == S - 1 ? DONE(s, IR_OP_F) : DONE(s + 1, IR_OP_B))
				                                   : DONE(s, IR_OP_B);
				if (!ready)
					break;
				DONE(s, op->kind) = 1;
#undef DONE
				int delta = op->kind == IR_OP_F ? 1 : op->kind == IR_OP_B ? -1 : 0;
				cur_s[s] += delta, cur_d[d] += delta;
				if (peak_stage && cur_s[s] > peak_stage[s])
					peak_stage[s] = cur_s[s];
				if (peak_dev && cur_d[d] > peak_dev[d])
					peak_dev[d] = cur_d[d];
				pc[d]++, finished++, progress = true;
			}
		}
	}
	ck_assert_msg(finished == total, "%s: programs stall after %d of %d ops",
	              ir_schedule_names[m->plan.schedule], finished, total);
	free(done);
	free(pc);
	free(cur_s);
	free(cur_d);
}
