/* target_cpu.c: the CPU target: a proven module -> a directory that trains.
 *
 *   DIR/rank0 .. rank{N-1}  one executable per rank (host.c, link.c)
 *   DIR/launch              mpirun in MPMD form
 *   DIR/plan.opir           the plan, as IR text (with its proof)
 *   DIR/report.md           the plan against the baselines (report.c)
 *   DIR/timeline.svg        the simulated step
 *   DIR/<text file>         the model's text, when it trains on one, so the
 *                           directory can move to another machine
 *
 * Refuses (with a diagnostic) a module whose programs verify has not proven
 * deadlock-free for the mpi backend: there is no way around the proof. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cg.h"
#include "viz.h"

static int fail_path(const char *what, const char *path)
{
	fprintf(stderr, "octopipe compile: error: cannot %s '%s': %s\n", what, path, strerror(errno));
	return -1;
}

/* mkdir -p */
int cg_make_dir(const char *dir)
{
	char *p = strdup(dir);
	if (!p)
		ir_bug("out of memory");
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0777) != 0 && errno != EEXIST) {
			int rc = fail_path("create the directory", p);
			free(p);
			return rc;
		}
		*s = '/';
	}
	int rc = mkdir(p, 0777) != 0 && errno != EEXIST ? fail_path("create the directory", p) : 0;
	free(p);
	return rc;
}

static int copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb");
	if (!in)
		return fail_path("read the training text", from);
	FILE *out = fopen(to, "wb");
	if (!out) {
		fclose(in);
		return fail_path("write", to);
	}
	char buf[1 << 16];
	size_t n;
	int rc = 0;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			rc = -1;
	if (ferror(in))
		rc = -1;
	fclose(in);
	if (fclose(out) != 0 || rc)
		return fail_path("copy the training text to", to);
	return 0;
}

static int write_ir(const ir_module *m, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return fail_path("write", path);
	ir_print(f, m);
	return fclose(f) != 0 ? fail_path("write", path) : 0;
}

int cg_write_outputs(const ir_module *m, const sim_result *r, const cg_rank *ranks, const char *dir)
{
	arena *a = arena_new();
	int rc = -1;
	if (cg_make_dir(dir) || write_ir(m, arena_printf(a, "%s/plan.opir", dir)) ||
	    (r && viz_svg(m, r, arena_printf(a, "%s/timeline.svg", dir))) ||
	    cg_write_report(m, r, ranks, arena_printf(a, "%s/report.md", dir)) ||
	    (m->train.data == IR_DATA_TEXT &&
	     copy_file(m->train.text_file, arena_printf(a, "%s/%s", dir, ranks[0].prog.data))))
		goto out;
	rc = 0;
out:
	arena_free(a);
	return rc;
}

/* The compile's hash, baked into every rank (rt_prog_info.compile) and
 * compared between the ranks at start (rt_cli_start): FNV-1a of the
 * printed module -- model, seed, training settings, plan, every device's
 * program -- and of the target, so a rank of another compile is refused
 * instead of training with the others or hanging. */
static uint64_t compile_hash(const ir_module *m, int dev)
{
	char *text = ir_print_string(m);
	uint64_t h = 0xcbf29ce484222325ull;
	if (!text)
		ir_bug("out of memory");
	for (const unsigned char *p = (const unsigned char *)text; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	free(text);
	return (h ^ (uint64_t)dev) * 0x100000001b3ull;
}

int cg_build_ranks(const ir_module *m, const cg_rank *ranks, char ***mods, const cg_options *o)
{
	arena *a = arena_new();
	int N = m->ndevices, rc = -1;
	uint64_t hash = compile_hash(m, ranks[0].dev);
	char **obj = arena_alloc(a, (size_t)N * sizeof *obj), **exe = arena_alloc(a, (size_t)N * sizeof *exe);
	for (int d = 0; d < N; d++) {
		char *name = arena_printf(a, "rank%d", d);
		obj[d] = arena_printf(a, "%s/%s.o", o->dir, name);
		exe[d] = arena_printf(a, "%s/%s", o->dir, name);
		char *ll = o->emit_llvm ? arena_printf(a, "%s/%s.ll", o->dir, name) : NULL;
		cg_rank rk = ranks[d];
		rk.prog.compile = hash;
		if (cg_emit_object(&rk, name, obj[d], ll))
			goto out;
	}
	if (ranks[0].dev ? cg_link_device(N, obj, mods, exe, (cg_dev)ranks[0].dev) : cg_link_all(N, obj, exe))
		goto out;
	if (!o->emit_obj)
		for (int d = 0; d < N; d++)
			unlink(obj[d]);
	rc = cg_write_launch(m, o->dir);
out:
	arena_free(a);
	return rc;
}

int cg_compile_cpu(const ir_module *m, const sim_result *r, const cg_options *o)
{
	ir_loc where = ir_loc_or(m->plan_loc, m->loc);
	if (!m->ndevices || !m->proof.proven) {
		diag_error(where, "codegen: the programs have no deadlock-freedom proof: run the 'comm' "
		                  "and 'verify' passes (the default pipeline does); code is generated only "
		                  "for proven programs");
		return -1;
	}
	if (m->proof.backend != IR_BACKEND_MPI) {
		diag_error(where, "codegen: the programs are proven for %s, but CPU ranks talk through "
		                  "MPI: plan with --backend mpi (compile --target cpu does so for a model)",
		           ir_backend_names[m->proof.backend]);
		return -1;
	}
	if (m->model.dtype != IR_DTYPE_F32) {
		diag_error(ir_loc_or(m->dtype_loc, ir_loc_or(m->model_loc, m->loc)),
		           "codegen: the CPU runtime trains in f32, but the model's dtype is %s",
		           ir_dtype_names[m->model.dtype]);
		return -1;
	}
	arena *a = arena_new();
	int N = m->ndevices, rc = -1;
	cg_rank *ranks = arena_alloc(a, (size_t)N * sizeof *ranks);
	for (int d = 0; d < N; d++)
		if (cg_lower_rank(m, r, d, false, a, &ranks[d]))
			goto out;
	if (cg_write_outputs(m, r, ranks, o->dir))
		goto out;

	if (cg_build_ranks(m, ranks, NULL, o))
		goto out;
	if (!o->quiet) {
		printf("\ncompiled %s for %d CPU rank%s (MPI) into %s/: rank0", m->model.name, N,
		       N == 1 ? "" : "s", o->dir);
		if (N > 1)
			printf(" .. rank%d", N - 1);
		printf(", launch, plan.opir, report.md%s%s%s\n", r ? ", timeline.svg" : "",
		       o->emit_llvm ? ", rankN.ll" : "", o->emit_obj ? ", rankN.o" : "");
		printf("run: %s/launch --steps %lld\n", o->dir, (long long)m->train.steps);
	}
	rc = 0;
out:
	arena_free(a);
	return rc;
}
