/* compile.c: cg_compile, codegen's one entry: checks what every target
 * needs (a proof, for the target's backend), simulates the plan once for
 * the outputs (the ranks' predicted step, report.md, timeline.svg), and
 * hands the module to its target (target_cpu.c, target_cuda.c). */
#include "cg_impl.h"

int cg_compile(const ir_module *m, const cg_options *o)
{
#ifndef OCTO_HAVE_CUDA
	/* Refused by the driver, before planning (exit status 2). */
	if (o->target == CG_TARGET_CUDA)
		ir_bug("codegen: --target cuda in a build without the CUDA toolkit");
#endif
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	bool cuda = o->target != CG_TARGET_CPU;
	if (!m->ndevices || !m->proof.proven || (cuda && m->proof.backend != IR_BACKEND_NCCL)) {
		if (cuda)
			diag_error(where, "codegen: the programs have no deadlock-freedom proof for nccl: run "
			                  "the 'comm' and 'verify' passes with --backend nccl (compile --target "
			                  "cuda does so for a model); code is generated only for proven programs");
		else
			diag_error(where, "codegen: the programs have no deadlock-freedom proof: run the "
			                  "'comm' and 'verify' passes (the default pipeline does); code is "
			                  "generated only for proven programs");
		return -1;
	}
	if (!cuda && m->proof.backend != IR_BACKEND_MPI) {
		diag_error(where, "codegen: the programs are proven for %s, but CPU ranks talk through "
		                  "MPI: plan with --backend mpi (compile --target cpu does so for a model)",
		           ir_backend_names[m->proof.backend]);
		return -1;
	}
	bool failed;
	sim_result *r = sim_run_ready(m, &failed);
	if (failed)
		return -1;
	cg_job j = {.m = m, .o = o, .r = r};
	int rc = cuda ? cg_target_cuda(&j) : cg_target_cpu(&j);
	sim_free(r);
	return rc;
}
