/* target_cpu.c: the CPU target: a proven module -> one executable per
 * rank (host.c, link.c) whose layers run on the CPU kernels of libocto_rt,
 * the ranks talking through MPI; and what every target writes (output.c).
 *
 * Refuses (with a diagnostic) a model whose dtype is not f32: the CPU
 * runtime trains in f32.  cg_compile has checked the proof (mpi). */
#include <stdio.h>

#include "cg_impl.h"

int cg_target_cpu(const cg_job *j)
{
	const ir_module *m = j->m;
	const cg_options *o = j->o;
	if (m->model.dtype != IR_DTYPE_F32) {
		diag_error(ir_loc_or(m->dtype_loc, ir_loc_or(m->model_loc, m->loc)),
		           "codegen: the CPU runtime trains in f32, but the model's dtype is %s",
		           ir_dtype_names[m->model.dtype]);
		return -1;
	}
	arena *a = arena_new();
	int P = m->ndevices, N = cg_nranks(m), rc = -1;
	cg_rank *pipe = arena_alloc(a, (size_t)P * sizeof *pipe);
	cg_rank *ranks = arena_alloc(a, (size_t)N * sizeof *ranks);
	for (int d = 0; d < P; d++)
		if (cg_lower_rank(m, j->r ? j->r->makespan : 0, d, false, a, &pipe[d]))
			goto out;
	cg_replicate(m, pipe, a, ranks);
	if (cg_write_outputs(j, ranks))
		goto out;

	if (cg_build_ranks(j, ranks, NULL))
		goto out;
	if (!o->quiet) {
		printf("\ncompiled %s for %d CPU rank%s (MPI) into %s/: rank0", m->model.name, N,
		       N == 1 ? "" : "s", o->dir);
		if (ir_dp(m) > 1)
			printf(" (%lld replicas of a %d-rank pipeline, rank order %s)", (long long)ir_dp(m), P,
			       ir_rank_order_names[m->plan.rank_order]);
		if (N > 1)
			printf(" .. rank%d", N - 1);
		printf(", launch, plan.opir, report.md%s%s%s\n", j->r ? ", timeline.svg" : "",
		       o->emit_llvm ? ", rankN.ll" : "", o->emit_obj ? ", rankN.o" : "");
		printf("run: %s/launch --steps %lld\n", o->dir, (long long)m->train.steps);
	}
	rc = 0;
out:
	arena_free(a);
	return rc;
}
