/* torch_csv.h: schedule interop with torch.distributed.pipelining
 * (docs/interop.md): a plan's per-rank order written as torch's schedule
 * CSV, and such a CSV read back into a plan.
 *
 * The CSV has one row per rank, in rank order; each cell is one of torch's
 * _Action strings, STAGE TYPE [MICROBATCH] ("0F1", "1I0", "2SEND_F0",
 * "0REDUCE_GRAD"), or empty (an idle step). */
#ifndef OCTO_TORCH_CSV_H
#define OCTO_TORCH_CSV_H

#include "ir.h"

/* Write m's programs (scheduled, and lowered for `comms`) to path:
 * compute actions only (torch's "compute_only" format), or with SEND_F,
 * RECV_F, SEND_B, RECV_B and REDUCE_GRAD ("compute_comms").  Notes on
 * stderr what torch does not carry (a placement torchtitan cannot build,
 * data parallelism, recomputation).  Returns 0, or 1 after a diagnostic. */
int tcsv_export(const ir_module *m, bool comms, const char *path);

/* A schedule read from a torch CSV. */
typedef struct tcsv_sched tcsv_sched;

/* Read and check path: syntax, stage and micro-batch ranges, every stage
 * on one rank, every (stage, micro-batch) forwarded and backwarded once,
 * comm actions on the ranks of their stages.  Returns NULL after a
 * located diagnostic (FILE:LINE:COL). */
tcsv_sched *tcsv_read(arena *ar, const char *path);

int tcsv_ranks(const tcsv_sched *s);
int tcsv_microbatches(const tcsv_sched *s);

/* Make m's stages, placement and programs from s.  m is a costed model
 * with tcsv_ranks devices and tcsv_microbatches micro-batches; its layers
 * are cut as `layers_per_stage` says ("2,3,3", located at `at`), or else
 * by the model's partition.  Returns 0, or -1 after a diagnostic. */
int tcsv_build(ir_module *m, const tcsv_sched *s, const char *layers_per_stage, ir_loc at);

#endif
