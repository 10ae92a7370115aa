/* target_cuda.c: the CUDA target: a proven module -> a directory of rank
 * executables whose layers run on a device (docs/cuda.md).
 *
 *   DIR/rank0 .. rank{N-1}  the CPU target's rank program (host.c: the same
 *                           op table and runtime calls), which attaches the
 *                           device first and keeps its buffers there; the
 *                           kernel modules of its layers embedded as PTX
 *                           (cuda_kernels.c, NVRTC), linked with
 *                           libocto_rt_cuda, cudart, cuBLAS and NCCL
 *   DIR/launch, plan.opir, report.md, timeline.svg, the text file: what
 *                           every target writes (output.c)
 *   DIR/NAME.cu, NAME.ptx   with --emit=cuda, --emit=ptx
 *
 * With the emulator (--target cuda-emu) the same rank programs run their
 * kernels on the host: each module's source is compiled by the host C++
 * compiler (cg_cuda_emu_source; DIR/NAME.emu.cpp, NAME.emu.o, kept with
 * --emit=cuda / obj) and linked in, and the device is
 * runtime/dev/dev_emu.c.  It needs no GPU and no CUDA toolkit: it is how
 * the device path is tested without a GPU.
 *
 * The programs are proven for the nccl backend (NCCL's blocking, grouped
 * point-to-point); with OCTO_COMM=mpi (and under the emulator) the same
 * programs move the values through MPI, which a proof for NCCL covers (a
 * group completes as a whole under both).  With data parallelism the
 * buckets' collectives are the same rt_post_coll calls as on CPU ranks;
 * the runtime runs them on an NCCL communicator per DP group (and refuses
 * OCTO_COMM=mpi there). */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg_impl.h"
#include "cg_config.h"
#include "cuda_kernels.h"

extern char **environ;

typedef struct module {
	char *name, *src, *ptx, *obj;
} module;

/* Compiles the emulator's module sources in parallel, one process each:
 * DIR/NAME.emu.cpp -> DIR/NAME.emu.o. */
static int compile_emu(module *mods, int n, const char *dir, arena *a)
{
	pid_t *pid = arena_alloc(a, (size_t)(n + 1) * sizeof *pid);
	char **cpp = arena_alloc(a, (size_t)(n + 1) * sizeof *cpp);
	int rc = 0, started = 0;
	for (; started < n; started++) {
		module *md = &mods[started];
		cpp[started] = arena_printf(a, "%s/%s.emu.cpp", dir, md->name);
		md->obj = arena_printf(a, "%s/%s.emu.o", dir, md->name);
		FILE *f = fopen(cpp[started], "w");
		if (!f || fputs(md->src, f) < 0 || fclose(f) != 0) {
			rc = cg_fail_path("write", cpp[started]);
			break;
		}
		const char *argv[] = {CG_CXX, "-std=c++17", "-O2", "-fno-exceptions", "-fno-rtti", "-c",
		                      "-o", md->obj, cpp[started], NULL};
		int e = posix_spawnp(&pid[started], CG_CXX, NULL, NULL, (char *const *)argv, environ);
		if (e) {
			diag_error((ir_loc){0}, "cannot run the C++ compiler '%s': %s", CG_CXX, strerror(e));
			rc = -1;
			break;
		}
	}
	for (int i = 0; i < started; i++) {
		int st;
		while (waitpid(pid[i], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			diag_error((ir_loc){0}, "the C++ compiler failed on %s (the kernels of "
			                        "module %s for the emulator); its message is above", cpp[i], mods[i].name);
			rc = -1;
		}
	}
	return rc;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		return cg_fail_path("write", path);
	return 0;
}

int cg_target_cuda(const cg_job *job)
{
	const ir_module *m = job->m;
	const cg_options *o = job->o;
	const sim_result *r = job->r;
	cg_target dev = o->target;
	const char *arch = o->arch;
	bool emit_cu = o->emit_cu, emit_ptx = o->emit_ptx;
	if (m->model.dtype != IR_DTYPE_F32 && m->model.dtype != IR_DTYPE_BF16) {
		diag_error(ir_loc_or(m->dtype_loc, ir_loc_or(m->model_loc, m->loc)),
		           "codegen: the device stores activations and parameters as f32 or bf16, but the "
		           "model's dtype is %s (--dtype overrides it)", ir_dtype_names[m->model.dtype]);
		return -1;
	}
	arena *a = arena_new();
	int P = m->ndevices, N = cg_nranks(m), rc = -1, nmods = 0;
	bool bf16 = m->model.dtype == IR_DTYPE_BF16;
	cg_rank *pipe = arena_alloc(a, (size_t)P * sizeof *pipe);
	cg_rank *ranks = arena_alloc(a, (size_t)N * sizeof *ranks);
	module *mods = arena_alloc(a, (size_t)(m->nlayers + 1) * sizeof *mods);
	char ***pipe_objs = arena_alloc(a, (size_t)P * sizeof *pipe_objs);
	char ***rank_objs = arena_alloc(a, (size_t)N * sizeof *rank_objs);
	int **gmod = arena_alloc(a, (size_t)P * sizeof *gmod); /* device's module j -> mods[] */
	for (int d = 0; d < P; d++)
		if (cg_lower_rank(m, r ? r->makespan : 0, d, true, a, &pipe[d]))
			goto out;
	if (cg_make_dir(o->dir))
		goto out;

	/* The kernel modules: one per distinct (kind, shape), named by its
	 * source; per pipeline device (its replicas run the same programs). */
	for (int d = 0; d < P; d++) {
		cg_rank *k = &pipe[d];
		k->dev = dev;
		k->bf16 = bf16;
		k->layer_mod = arena_alloc(a, (size_t)k->nlayers * sizeof *k->layer_mod);
		k->mod_names = arena_alloc(a, (size_t)k->nlayers * sizeof *k->mod_names);
		k->mod_ptx = arena_alloc(a, (size_t)k->nlayers * sizeof *k->mod_ptx);
		pipe_objs[d] = arena_alloc(a, (size_t)(k->nlayers + 1) * sizeof **pipe_objs);
		gmod[d] = arena_alloc(a, (size_t)k->nlayers * sizeof **gmod);
		for (int h = 0; h < k->nlayers; h++) {
			const rt_layer_desc *desc = &k->layers[h].desc;
			char *src = cg_cuda_source(desc, bf16, a);
			if (!src)
				goto out;
			char *name = cg_cuda_module_name(desc, src, a);
			int g = 0;
			while (g < nmods && strcmp(mods[g].name, name) != 0)
				g++;
			if (g == nmods) {
				mods[nmods++] = (module){.name = name, .src = src};
				if (dev == CG_TARGET_CUDA_EMU &&
				    !(mods[g].src = cg_cuda_emu_source(desc, bf16, arena_printf(a, "octo_emu_%s", name), a)))
					goto out;
				if (emit_cu && write_text(arena_printf(a, "%s/%s.cu", o->dir, name), src))
					goto out;
#ifdef OCTO_HAVE_CUDA
				if (dev == CG_TARGET_CUDA) {
					if (cg_cuda_ptx(name, src, arch, &mods[g].ptx, a))
						goto out;
					if (emit_ptx && write_text(arena_printf(a, "%s/%s.ptx", o->dir, name), mods[g].ptx))
						goto out;
				}
#endif
				if (!o->quiet)
					printf("kernels: %s (L%d and its shape): %s\n", name, (int)k->layers[h].index,
					       dev == CG_TARGET_CUDA ? arena_printf(a, "NVRTC %s", arch) : "host C++ (emulator)");
			}
			int j = 0;
			while (j < k->nmods && strcmp(k->mod_names[j], name) != 0)
				j++;
			if (j == k->nmods) {
				k->mod_names[k->nmods] = name;
				k->mod_ptx[k->nmods] = mods[g].ptx;
				gmod[d][k->nmods++] = g;
			}
			k->layer_mod[h] = j;
		}
	}
#ifndef OCTO_HAVE_CUDA
	(void)emit_ptx;
#endif
	if (dev == CG_TARGET_CUDA_EMU) {
		if (compile_emu(mods, nmods, o->dir, a))
			goto out;
		for (int d = 0; d < P; d++) {
			for (int j = 0; j < pipe[d].nmods; j++)
				pipe_objs[d][j] = mods[gmod[d][j]].obj;
			pipe_objs[d][pipe[d].nmods] = NULL;
		}
	}
	cg_replicate(m, pipe, a, ranks);
	for (int k = 0; k < N; k++)
		rank_objs[k] = pipe_objs[ranks[k].train.pipe_rank];

	if (cg_write_outputs(job, ranks))
		goto out;
	for (int d = 0; d < N; d++) {
		if (dev == CG_TARGET_CUDA_EMU)
			ranks[d].prog.predicted_us = 0; /* the simulator models the GPU, not the emulator */
		ranks[d].prog.about = arena_printf(a, "%s\nits layers run on %s (%s); kernel modules: %d",
		                                   ranks[d].prog.about,
		                                   dev == CG_TARGET_CUDA ? "a GPU" : "the host emulator of the CUDA path",
		                                   dev == CG_TARGET_CUDA ? arch : "no GPU needed", ranks[d].nmods);
	}
	if (cg_build_ranks(job, ranks, rank_objs))
		goto out;
	for (int g = 0; dev == CG_TARGET_CUDA_EMU && g < nmods; g++) {
		if (!o->emit_obj)
			unlink(mods[g].obj);
		if (!emit_cu)
			unlink(arena_printf(a, "%s/%s.emu.cpp", o->dir, mods[g].name));
	}
	if (!o->quiet) {
		printf("\ncompiled %s for %d %s rank%s (%s) into %s/: rank0", m->model.name, N,
		       dev == CG_TARGET_CUDA ? "CUDA" : "emulated-CUDA", N == 1 ? "" : "s",
		       dev == CG_TARGET_CUDA ? arch : "kernels on the host", o->dir);
		if (ir_dp(m) > 1)
			printf(" (%lld replicas of a %d-rank pipeline, rank order %s)", (long long)ir_dp(m), P,
			       ir_rank_order_names[m->plan.rank_order]);
		printf("%s%s, launch, plan.opir, report.md%s\n", N > 1 ? " .. rank" : "",
		       N > 1 ? arena_printf(a, "%d", N - 1) : "", r ? ", timeline.svg" : "");
		printf("run: %s/launch --steps %lld\n", o->dir, (long long)m->train.steps);
	}
	rc = 0;
out:
	arena_free(a);
	return rc;
}
