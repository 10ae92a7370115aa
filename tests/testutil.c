/* testutil.c: diagnostics capture and the suite runner (testutil.h). */
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
