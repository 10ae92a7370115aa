/* testutil.h: what every Check suite here shares -- capturing the
 * diagnostics a test provokes, an in-order executor of programs, the IR
 * round trip, and a main() that runs one suite.  The fixtures stay with
 * their suites. */
#ifndef OCTO_TESTUTIL_H
#define OCTO_TESTUTIL_H

#include <check.h>
#include <stdbool.h>

#include "ir.h"

/* Send diagnostics to memory from now on and zero diag_errors. */
void tu_capture(void);

/* All that was reported since tu_capture() (never NULL; valid until
 * tu_release). */
const char *tu_captured(void);

/* Stop capturing: diagnostics go where they went before tu_capture. */
void tu_release(void);

/* tu_release, handing back the first line of what was captured (without
 * its newline, "" if nothing was), malloc'd: the caller frees it. */
char *tu_release_first_line(void);

/* Runs m's programs with an in-order executor, as devices that wait for
 * their inputs would: F(s,m) needs F(s-1,m), B(s,m) needs B(s+1,m) (F(s,m)
 * on the last stage), W(s,m) needs B(s,m); communication ops pass.  Every
 * compute op must complete (else the running test fails).  The most
 * micro-batches between F and B at once go, when not NULL, per stage to
 * peak_stage[] and per device to peak_dev[]. */
void tu_execute(const ir_module *m, int *peak_stage, int *peak_dev);

/* Does m print as IR text that parses back into a module equal to m
 * (ir_equal)?  A text that does not parse fails the running test with
 * the text. */
bool tu_ir_round_trips(const ir_module *m);

/* Run s (CK_NORMAL output); EXIT_SUCCESS when no test failed, else
 * EXIT_FAILURE.  main() is `return tu_run(x_suite());`. */
int tu_run(Suite *s);

#endif
