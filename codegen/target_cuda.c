/* target_cuda.c: the CUDA target: a proven module -> a directory of CUDA
 * rank executables (docs/cuda.md).
 *
 *   DIR/rank0 .. rank{N-1}  one executable per rank, the PTX of its layers'
 *                           kernel modules embedded (cuda_kernels.c, NVRTC),
 *                           linked with libocto_rt_cuda, cudart, cuBLAS, NCCL
 *   DIR/launch, plan.opir, report.md as for the CPU target
 *   DIR/NAME.cu, NAME.ptx   with --emit=cuda, --emit=ptx
 *
 * The programs are proven for the nccl backend (NCCL's blocking, grouped
 * point-to-point); the same binaries run host-staged over MPI with
 * OCTO_COMM=mpi, which a proof for NCCL covers (a group completes as a
 * whole under both). */
#ifdef OCTO_HAVE_CUDA
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cg.h"
#include "cuda_kernels.h"

int cg_compile_cuda(const ir_module *m, const sim_result *r, const cg_options *o, const char *arch,
                    bool emit_cu, bool emit_ptx)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (!m->ndevices || !m->proof.proven || m->proof.backend != IR_BACKEND_NCCL) {
		diag_error(where, "codegen: the programs have no deadlock-freedom proof for nccl: run the "
		                  "'comm' and 'verify' passes with --backend nccl (compile --target cuda "
		                  "does so for a model); code is generated only for proven programs");
		return -1;
	}
	if (cg_cuda_emit(m, o->dir, arch, emit_cu, emit_ptx, o->quiet))
		return -1;
	arena *a = arena_new();
	int N = m->ndevices, rc = -1;
	bool bf16 = m->model.dtype == IR_DTYPE_BF16;
	char **obj = arena_alloc(a, (size_t)N * sizeof *obj), **exe = arena_alloc(a, (size_t)N * sizeof *exe);
	for (int d = 0; d < N; d++) {
		/* This rank's layers: those of the stages placed on device d. */
		cg_cuda_rank c = {.rank = d, .nranks = N};
		c.names = arena_alloc(a, (size_t)(m->nlayers + 1) * sizeof *c.names);
		c.ptx = arena_alloc(a, (size_t)(m->nlayers + 1) * sizeof *c.ptx);
		char *held = arena_printf(a, "%s", "");
		for (int s = 0; s < m->nstages; s++) {
			if (m->stages[s].device != d)
				continue;
			held = arena_printf(a, "%s%sS%d = L%d..L%d", held, *held ? "; " : "", s,
			                    m->stages[s].first, m->stages[s].last);
			for (int l = m->stages[s].first; l <= m->stages[s].last; l++) {
				rt_layer_desc desc = cg_layer_desc(m, &m->layers[l]);
				char *src = cg_cuda_source(&desc, bf16, a);
				if (!src)
					goto out;
				char *name = cg_cuda_module_name(&desc, src, a);
				bool dup = false;
				for (int i = 0; i < c.nimages && !dup; i++)
					dup = strcmp(c.names[i], name) == 0;
				if (dup)
					continue;
				if (cg_cuda_ptx(name, src, arch, &c.ptx[c.nimages], a))
					goto out;
				c.names[c.nimages++] = name;
			}
		}
		c.about = arena_printf(a, "rank%d: rank %d of %d of a pipeline-parallel training program for %s, "
		                          "compiled by octopipe for CUDA ranks (%s, %s; NCCL, or MPI with "
		                          "OCTO_COMM=mpi)\nthis rank holds: %s",
		                       d, d, N, m->model.name, arch, ir_dtype_names[m->model.dtype], held);
		char *name = arena_printf(a, "rank%d", d);
		obj[d] = arena_printf(a, "%s/%s.o", o->dir, name);
		exe[d] = arena_printf(a, "%s/%s", o->dir, name);
		if (cg_emit_cuda_object(&c, name, obj[d], o->emit_llvm ? arena_printf(a, "%s/%s.ll", o->dir, name) : NULL))
			goto out;
	}
	if (cg_link_cuda(N, obj, exe))
		goto out;
	if (!o->emit_obj)
		for (int d = 0; d < N; d++)
			unlink(obj[d]);
	if (cg_write_launch(m, o->dir))
		goto out;
	FILE *f = fopen(arena_printf(a, "%s/plan.opir", o->dir), "w");
	if (f) {
		ir_print(f, m);
		fclose(f);
	}
	if (!o->quiet)
		printf("\ncompiled %s for %d CUDA rank%s (%s) into %s/: rank0%s%s, launch, plan.opir\n",
		       m->model.name, N, N == 1 ? "" : "s", arch, o->dir, N > 1 ? " .. rank" : "",
		       N > 1 ? arena_printf(a, "%d", N - 1) : "");
	rc = 0;
out:
	arena_free(a);
	return rc;
}
#endif
