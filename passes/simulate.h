/* simulate.h: discrete-event simulation of a scheduled module (an analysis:
 * it reads the module and writes only its result).
 *
 * Each device runs its program in order on one compute stream; a stage's
 * F/B/W time is the sum of its layers' costs.  A value crossing devices (the
 * activation of F(s,m) into F(s+1,m), the gradient of B(s,m) into B(s-1,m),
 * sent when B ends in a schedule that splits the backward and when W ends
 * in one that does not: ir_schedule_splits_backward) is a transfer on an alpha-beta link (latency + bytes / bandwidth; the
 * intra-node link when both devices share a node, else the inter-node one)
 * that starts when its producer has finished and both ends are free: a
 * device sends one transfer at a time and receives one at a time (full
 * duplex).  Events are taken in time order (ties by device, then op), so
 * the result is deterministic; O(ops log ops). */
#ifndef OCTO_SIMULATE_H
#define OCTO_SIMULATE_H

#include "ir.h"

typedef struct sim_xfer {
	int src, dst;        /* devices */
	ir_op_kind kind;     /* IR_OP_F: activation forward; IR_OP_B: gradient back */
	int stage, mb;       /* the producing op */
	uint64_t bytes;
	double start, end;   /* microseconds */
	int seq;             /* its rank among the transfers by start, ties in the order the
	                      * simulation fixed them: causal, so a transfer that depends on
	                      * another (even through ops and transfers of no duration)
	                      * comes after it */
} sim_xfer;

typedef struct sim_device {
	double *start, *end; /* per op of the device's program, microseconds */
	double busy;         /* compute time */
	double warmup;       /* idle before the first B starts */
	double cooldown;     /* idle after the last F ends (and after the first B starts) */
	double residual;     /* all other idle time */
	uint64_t resident;   /* weights, gradients, optimizer state of its stages */
	uint64_t peak_act;   /* peak of stashed activations (F..B) and W stash (B..W) */
	uint64_t peak_mem;   /* resident + peak_act */
	int peak_inflight;   /* most micro-batches between F and B at once, any stage */
} sim_device;

typedef struct sim_result {
	arena *arena;        /* owns everything below */
	double makespan;     /* microseconds, one step */
	double bubble_ratio; /* idle / (devices x makespan) */
	double tokens_per_s;
	double mfu;          /* model FLOPs / (makespan x devices x peak FLOP/s) */
	int ndev;
	sim_device *dev;
	sim_xfer *xfers;
	int nxfers;
	uint64_t boundary_bytes; /* activation bytes per micro-batch across a stage boundary */
} sim_result;

/* Simulate.  Needs costs on every layer (the `cost` pass) and a program per
 * device (the `schedule` pass).  Returns NULL after a diagnostic: missing
 * costs or programs, or programs that cannot run to the end (an op waits
 * for one that its device's order puts after it). */
sim_result *sim_run(const ir_module *m);
/* The same, its diagnostics to sink ds (NULL: the default sink): a pass's
 * own (pass_ctx.diag), or a quiet one where a failure is a verdict. */
sim_result *sim_run_to(const ir_module *m, diag_sink *ds);
/* sim_run when m has what it needs (costs on every layer, a program per
 * device); NULL otherwise, quietly, or after sim_run's diagnostic, with
 * *failed set.  What the driver and codegen print a plan's step from. */
sim_result *sim_run_ready(const ir_module *m, bool *failed);
void sim_free(sim_result *r);

/* Bytes of the activation (or its gradient) passed between two stages for
 * one micro-batch: micro-batch size x sequence x hidden x dtype size. */
uint64_t sim_boundary_bytes(const ir_module *m);

/* Link time in microseconds for `bytes` from device a to device b: the
 * intra-node link when they share a node, else the inter-node one. */
double sim_link_time(const ir_module *m, int a, int b, uint64_t bytes);

/* Time of a stage's op (sum over its layers), microseconds. */
double sim_stage_time(const ir_module *m, int stage, ir_op_kind k);

#endif
