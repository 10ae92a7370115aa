/* cost.h: the cost model (docs/cost-model.md) behind the `cost` pass: the
 * analytic times and bytes of a layer, and the stash sizes the runtime's
 * executors allocate for it.  Recomputation is a stage's, not a layer's:
 * its quantities are ir_stage_kept and ir_stage_redo (ir.h) and
 * sim_stage_time (simulate.h), from these layer costs (with selective,
 * their sel_act and sel_f). */
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

/* Layer `layer`'s resident bytes on each device that holds it under m's
 * plan (docs/cost-model.md, "Data parallelism"): its cost's resident bytes,
 * except that with the distributed optimizer (plan dp > 1, dist_optimizer
 * on) the optimizer's own state -- the AdamW moments and the f32 master
 * weights of a dtype other than f32, cost_optimizer_bytes per parameter --
 * is held for ceil(params / dp) parameters instead of all of them (the
 * weights and their gradients stay whole); and with deterministic sums
 * (plan deterministic on, any dp) IR_EXACT_VALUE_BYTES more per parameter,
 * the runtime's exact accumulator. */
uint64_t cost_resident(const ir_module *m, int layer);

/* The runtime's scratch on device d: one buffer per rank, the most any of
 * its layers needs (the executor's own size functions, each layer run as
 * its stage recomputes: selective puts the Mamba scans' chunk states
 * there).  Allocated with the model, beside the resident bytes, for the
 * whole run; 0 for layers whose shape is not known (a timing profile). */
uint64_t cost_device_scratch(const ir_module *m, int d);

/* Bytes per parameter of the optimizer's own state: 8 for AdamW's two f32
 * moments (0 for SGD), plus 4 for the f32 master weights when the dtype is
 * not f32.  What the distributed optimizer shards. */
uint64_t cost_optimizer_bytes(const ir_module *m);

/* Microseconds of the optimizer step over n parameters (an `update` op):
 * memory-bound, n x cost_update_bytes / memory bandwidth, plus one op's
 * launch overhead. */
double cost_update_us(const ir_module *m, uint64_t n);

/* Bytes the optimizer step moves per parameter: AdamW reads the f32
 * weights (the master copy when the dtype is not f32), gradient and both
 * moments and writes weights and moments back, 7 x 4 = 28 bytes; SGD reads
 * weights and gradient and writes the weights, 12; a dtype other than f32
 * adds the write of the weights in that dtype. */
uint64_t cost_update_bytes(const ir_module *m);

/* The host's work around a bucket's reduction (docs/cost-model.md, "Data
 * parallelism"), memory-bound, for n parameters: packing its gradients
 * into the collective's buffer at the post (read and write 4 bytes each, or
 * the exact sums' 72) and unpacking the result at the wait (the exact
 * sums' 72 read, 4 written; 8 plainly).  Deterministic sums also cost
 * every W an exact add per parameter (cost_exact_add_us: the gradient
 * cleared and read, 8 bytes, and the accumulator's cache line or two that
 * its mantissa lands in read and written, 128). */
double cost_pack_us(const ir_module *m, uint64_t n);
double cost_unpack_us(const ir_module *m, uint64_t n);
double cost_exact_add_us(const ir_module *m, uint64_t n);

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

/* The act bytes layer `layer` leaves out of its stash in a stage with
 * recompute=selective (rt_layer_desc.selective: mamba's chunk states; 0
 * for every other kind), as the executor of m's ranks lays the stash out:
 * its act less its selective act, each rounded up to RT_ALIGN.  Returns 0,
 * or -1 when the runtime does not run the layer. */
int cost_runtime_selective(const ir_module *m, int layer, uint64_t *drop);

/* Bytes rounded up to RT_ALIGN, saturating. */
uint64_t cost_stash_round(uint64_t bytes);

#endif
