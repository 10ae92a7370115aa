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
 * the result is deterministic; O(ops log ops).
 *
 * Data parallelism (plan dp = D > 1; docs/simulator.md, "Data
 * parallelism"): the programs are one pipeline's P devices, and every
 * replica runs them at the same times (SPMD), so a collective starts on
 * every member of its DP group at once, when this device's may start: on
 * nccl at its place on the communication stream (in program order with
 * the sends and receives), on mpi once posted (a device's collectives one
 * after another, beside its transfers).  It takes sim_coll_time; a wait
 * holds the compute stream until its collective ends (the exposed
 * reduction); an update runs on the compute stream (sim_update_time).
 * Links are chosen by cluster rank (ir_rank_of): the slowest link any
 * replica's pair of devices, or the DP group, spans.
 *
 * Carried waits (overlap_param_gather): the all-gathers a step posts at its
 * end run on into the next step, whose carried waits hold each stage's
 * first F until they end.  The result is the steady state: the first step
 * (nothing pending) is simulated, then steps whose carried waits, and
 * communication streams, are released when the step before's all-gathers
 * end (measured from the end of that step, its makespan), until the step
 * repeats itself (or SIM_MAX_STEPS); the makespan is that step's period. */
#ifndef OCTO_SIMULATE_H
#define OCTO_SIMULATE_H

#include "ir.h"

/* Steps sim_run simulates at most to reach a step loop's steady state. */
#define SIM_MAX_STEPS 16

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
	double busy;         /* compute time: F, B and W */
	double warmup;       /* idle before the first B starts */
	double cooldown;     /* idle after the last F ends (and after the first B starts),
	                      * less exposed and update */
	double residual;     /* all other idle time; busy + warmup + cooldown + residual
	                      * + exposed + update is the makespan */
	double pipeline;     /* end of its last F, B or W */
	double exposed;      /* compute stream held by waits for collectives */
	double gather_exposed; /* of exposed: by carried waits (the previous
	                      * step's all-gathers, overlap_param_gather) */
	double update;       /* the optimizer steps (update ops) */
	double coll;         /* its collectives' time on the communication stream */
	uint64_t resident;   /* weights, gradients, optimizer state of its stages
	                      * (cost_resident: sharded by the distributed optimizer) */
	uint64_t scratch;    /* the runtime's scratch (cost_device_scratch) */
	uint64_t peak_act;   /* peak of stashed activations (F..B) and W stash (B..W) */
	uint64_t peak_mem;   /* resident + scratch + peak_act */
	int peak_inflight;   /* most micro-batches between F and B at once, any stage */
} sim_device;

typedef struct sim_result {
	arena *arena;        /* owns everything below */
	double makespan;     /* microseconds, one step */
	double bubble_ratio; /* idle / (devices x makespan): warm-up, cool-down, residual */
	double tokens_per_s; /* the step's tokens, every replica's: microbatches x mbs x seq */
	double mfu;          /* model FLOPs / (makespan x cluster devices x peak FLOP/s) */
	int64_t dp;          /* replicas (1: none); dev[] is one pipeline's devices */
	double exposed, update, coll; /* the largest over the devices of each */
	double gather_exposed; /* the same for sim_device.gather_exposed */
	int steps;           /* steps simulated to reach the steady state (1 without
	                      * carried waits) */
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

/* Link time in microseconds for `bytes` from pipeline device a to b: the
 * intra-node link when they share a node in every replica (their cluster
 * ranks, ir_rank_of, divided by per_node, are equal), else the inter-node
 * one. */
double sim_link_time(const ir_module *m, int a, int b, uint64_t bytes);

/* Does the DP group of pipeline device p (its D replicas' ranks) sit on one
 * node? */
bool sim_group_intra(const ir_module *m, int p);

/* Microseconds of collective c (all-reduce, reduce-scatter or all-gather)
 * of a `bytes` buffer over the DP group of pipeline device p, on the
 * slowest link the group spans (bw, lat): the less of a ring,
 *     all-reduce 2(D-1)/D x bytes / bw + 2(D-1) x lat,
 * and a tree, 2 ceil(log2 D) x (lat + bytes / bw); a reduce-scatter or an
 * all-gather half of that (bytes: the whole buffer). */
double sim_coll_time(const ir_module *m, ir_comm c, int p, uint64_t bytes);

/* Microseconds of an update op: the optimizer step over its bucket's
 * parameters, ceil(params / D) of them with the distributed optimizer
 * (cost_update_us). */
double sim_update_time(const ir_module *m, const ir_op *op);

/* What a recomputing B (mode rc) runs again of a layer before its own work,
 * microseconds, hot or as cold as the B (the cache model): full
 * recomputation the layer's F, selective its sel_f (the scan's F; its share
 * of F's cold time), none nothing. */
double sim_redo_time(ir_recompute rc, const ir_cost *c, bool cold);

/* Time of a stage's op (sum over its layers), microseconds. */
double sim_stage_time(const ir_module *m, int stage, ir_op_kind k);

#endif
