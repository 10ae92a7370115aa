/* cost.h: the cost model (docs/cost-model.md) behind the `cost` pass: the
 * analytic times and bytes of a layer, and the stash sizes the runtime's
 * executors allocate for it. */
#ifndef OCTO_COST_H
#define OCTO_COST_H

#include "ir.h"
#include "octo_kernels.h"

/* The analytic cost of layer `layer` of m: F/B/W time on m's cluster,
 * FLOPs, stashes, parameters and resident bytes, with known = true and
 * nothing measured.  Returns 0, or -1 after a diagnostic at the layer when
 * a number does not fit (bytes beyond 2^64, times that are not finite). */
int cost_layer(const ir_module *m, int layer, ir_cost *out);

/* The same, with the FLOPs of F, B and W apart (out->flops is their sum);
 * flops may be NULL. */
int cost_layer_split(const ir_module *m, int layer, ir_cost *out, double flops[IR_NOPS]);

/* Layer l of m as the runtime describes it. */
rt_layer_desc cost_rt_desc(const ir_module *m, const ir_layer *l);

/* Does m's layers run on device ranks (the device executor, in the model's
 * dtype) rather than CPU ranks (the CPU kernels, in f32)?  Device ranks talk
 * through NCCL; CPU ranks through MPI and train in f32 only, so an MPI plan
 * of another dtype is sized for the device executor too. */
bool cost_device_ranks(const ir_module *m);

/* The act and W stash bytes of layer `layer` as the executor of m's ranks
 * allocates them: its own size function's, each rounded up to RT_ALIGN (a
 * layer's slice of its stage's stash).  Returns 0, or -1 when the runtime
 * does not run the layer (the analytic sizes stand then). */
int cost_runtime_stashes(const ir_module *m, int layer, uint64_t *act, uint64_t *wstash);

/* Bytes rounded up to RT_ALIGN, saturating. */
uint64_t cost_stash_round(uint64_t bytes);

#endif
