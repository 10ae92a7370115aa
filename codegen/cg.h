/* cg.h: code generation: a proven, lowered module -> a directory of
 * per-rank executables that train it (docs/codegen.md).  One entry:
 * cg_compile.  What it writes into the directory:
 *
 *   rank0 .. rank{N-1}  one executable per rank
 *   launch              runs them together (mpirun, or srun under Slurm)
 *   plan.opir           the plan, as IR text (with its proof)
 *   report.md           the plan against the baselines, what each rank holds
 *   timeline.svg        the simulated step (when the layers have costs)
 *   <text file>         the model's text, when it trains on one
 *
 * and, when asked, rankN.ll, rankN.o, and for the CUDA targets the kernels'
 * NAME.cu and NAME.ptx. */
#ifndef OCTO_CG_H
#define OCTO_CG_H

#include <stdbool.h>

#include "ir.h"
#include "tune.h"

/* What runs a rank's layers: the CPU, a GPU (CUDA), or the host emulator
 * of the CUDA path (the same kernels compiled for the host).  CUDA only in
 * a build with the CUDA toolkit (OCTO_HAVE_CUDA): the driver refuses it
 * otherwise, before planning. */
typedef enum cg_target { CG_TARGET_CPU, CG_TARGET_CUDA, CG_TARGET_CUDA_EMU } cg_target;

typedef struct cg_options {
	cg_target target;
	const char *arch;  /* CG_TARGET_CUDA: the GPU architecture NVRTC compiles for (sm_XX) */
	const char *dir;   /* output directory (created if missing) */
	bool emit_llvm;    /* also write DIR/rankN.ll (the optimised module) */
	bool emit_obj;     /* keep DIR/rankN.o (and the emulator's kernel objects) */
	bool emit_cu;      /* the CUDA targets: write the kernels' source, DIR/NAME.cu */
	bool emit_ptx;     /* CG_TARGET_CUDA: write their PTX, DIR/NAME.ptx */
	bool quiet;        /* no progress lines on stdout */
	/* The comparison the driver made for this plan (and printed):
	 * report.md shows the same rows.  NULL: report.md has no comparison. */
	const tune_row *baselines; /* [TUNE_NBASELINES] */
	double lower_bound;        /* tune_lower_bound, microseconds */
} cg_options;

/* Compile m into o->dir for o->target.  The module must be lowered and
 * proven deadlock-free for the target's backend (mpi for CPU ranks, nccl
 * for the CUDA targets): there is no way around the proof.  Returns 0, or
 * -1 after a diagnostic. */
int cg_compile(const ir_module *m, const cg_options *o);

#endif
