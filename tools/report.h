/* report.h: `octopipe report DIR` (report.c, docs/report.md): a compiled
 * plan's simulated step against the traces of a run of it. */
#ifndef OCTO_REPORT_H
#define OCTO_REPORT_H

/* Prints the comparison, writes DIR/report-timeline.svg and
 * DIR/report-trace.json.  Returns 0, or 1 after an error message. */
int report_run(const char *dir);

#endif
