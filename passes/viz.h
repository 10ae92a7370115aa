/* viz.h: pictures of a simulated step (an output stage: reads the module
 * and a sim_result, writes a file, changes neither).
 *
 * Two views of the same timeline: a Chrome trace to zoom through in
 * Perfetto or chrome://tracing, and an SVG figure in the style of the
 * pipeline-parallelism papers.  Both stream with fprintf in one pass over
 * ops and transfers (a million ops stay fast), and are deterministic: the
 * same inputs give the same bytes. */
#ifndef OCTO_VIZ_H
#define OCTO_VIZ_H

#include "ir.h"
#include "simulate.h"

/* Chrome trace (Trace Event Format, JSON object form).  One process per
 * device, named "D<d>" and sorted by device; thread 0 "compute" holds one
 * complete event ("ph":"X", ts/dur in microseconds, %.3f) per op, named
 * "F s3 m7" with args {stage, mb, layers "L4..L7"}.  Each transfer is a
 * slice "send F s3 m7 -> D2" on its source's "comm send" thread (1) and a
 * slice "recv F s3 m7 <- D0" on its destination's "comm recv" thread (2):
 * links are full duplex, so sends and receives of one device may overlap
 * and need tracks of their own to stay properly nested.  With data
 * parallelism a fourth thread, "collectives" (3), holds each collective
 * ("all-reduce s1 b0", args stage, bucket, bytes), and the compute thread
 * the updates and the waits that held it ("wait all-reduce s1 b0").  Ops
 * or transfers with non-finite times are left out.  Returns 0, or -1 after a diagnostic
 * ("octopipe: error: cannot write 'x': reason"). */
int viz_trace(const ir_module *m, const sim_result *r, const char *path);

/* SVG timeline, about 1400 px wide: a title line (model, schedule, devices,
 * micro-batches, makespan, bubble), a legend, one row per device with one
 * box per op (class="op F|B|W cN", coloured by kind, a lighter shade for a
 * device's later chunks, the micro-batch number centred when it fits, a
 * <title> tooltip with stage, layers and times), idle time as the row's
 * grey background, each device's utilisation at the right, and a time axis
 * with 1-2-5 ticks in us, ms or s.  Returns 0, or -1 after a diagnostic. */
int viz_svg(const ir_module *m, const sim_result *r, const char *path);

/* Two timelines of the same module one above the other on one time axis
 * (octopipe report: predicted above, measured below), each panel as
 * viz_svg draws it with its caption leading the title line.  Returns 0,
 * or -1 after a diagnostic. */
int viz_svg_compare(const ir_module *m, const sim_result *top, const char *top_caption,
                    const sim_result *bottom, const char *bottom_caption, const char *path);

#endif
