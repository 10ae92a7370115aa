/* test_codegen.c: codegen through its one entry, cg_compile: the
 * refusals come through the one diagnostic printer (captured here), before
 * anything is built.  What a compiled directory holds and runs is
 * tests/e2e's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "frontend.h"
#include "pass.h"
#include "testutil.h"

/* tiny-dense on 2 devices under 1f1b, through the default pipeline for
 * the backend (NULL: loaded, not planned). */
static ir_module *planned(const char *backend, const char *dtype)
{
	char path[512];
	snprintf(path, sizeof path, "%s/tiny-dense.yaml", fe_models_dir());
	fe_overrides ov = {.devices = 2, .schedule = "1f1b", .backend = backend ? backend : "mpi",
	                   .dtype = dtype};
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	if (backend)
		ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	return m;
}

/* cg_compile's result and its first diagnostic line (malloc'd). */
static char *refusal(const ir_module *m, cg_target target, const char *dir)
{
	cg_options o = {.target = target, .arch = "sm_90", .dir = dir, .quiet = true};
	tu_capture();
	int rc = cg_compile(m, &o);
	int errors = diag_errors;
	char *line = tu_release_first_line();
	ck_assert_int_eq(rc, -1);
	ck_assert_int_eq(errors, 1);
	return line;
}

static void expect(const ir_module *m, cg_target target, const char *dir, const char *want)
{
	char *line = refusal(m, target, dir);
	ck_assert_msg(strstr(line, want), "expected '%s' in '%s'", want, line);
	free(line);
}

START_TEST(test_no_proof)
{
	ir_module *m = planned(NULL, NULL);
	expect(m, CG_TARGET_CPU, "/nonexistent/never", "no deadlock-freedom proof");
	expect(m, CG_TARGET_CUDA_EMU, "/nonexistent/never", "no deadlock-freedom proof for nccl");
	ir_free(m);
}
END_TEST

START_TEST(test_wrong_backend)
{
	ir_module *m = planned("nccl", NULL);
	expect(m, CG_TARGET_CPU, "/nonexistent/never", "proven for nccl, but CPU ranks talk through MPI");
	ir_free(m);
	m = planned("mpi", NULL);
	expect(m, CG_TARGET_CUDA_EMU, "/nonexistent/never", "no deadlock-freedom proof for nccl");
	ir_free(m);
}
END_TEST

START_TEST(test_cpu_dtype)
{
	ir_module *m = planned("mpi", "bf16");
	char *line = refusal(m, CG_TARGET_CPU, "/nonexistent/never");
	/* Located at the dtype: the model file's line. */
	ck_assert_msg(strstr(line, "tiny-dense.yaml:") && strstr(line, "the CPU runtime trains in f32"),
	              "%s", line);
	free(line);
	ir_free(m);
}
END_TEST

/* An output directory that cannot be made: unlocated, with the tool's
 * prefix (diag_program), through the printer and not stderr. */
START_TEST(test_bad_directory)
{
	ir_module *m = planned("mpi", NULL);
	diag_program = "octopipe compile";
	char *line = refusal(m, CG_TARGET_CPU, "/dev/null/out");
	ck_assert_str_eq(line, "octopipe compile: error: cannot create the directory '/dev/null/out': "
	                       "Not a directory");
	free(line);
	diag_program = "octopipe";
	ir_free(m);
}
END_TEST

static Suite *codegen_suite(void)
{
	Suite *s = suite_create("codegen");
	TCase *tc = tcase_create("refusals");
	tcase_add_test(tc, test_no_proof);
	tcase_add_test(tc, test_wrong_backend);
	tcase_add_test(tc, test_cpu_dtype);
	tcase_add_test(tc, test_bad_directory);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(codegen_suite());
}
