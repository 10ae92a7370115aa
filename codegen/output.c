/* output.c: what every target writes into DIR besides its kernels:
 *
 *   DIR/rank0 .. rank{N-1}  the rank objects (host.c), linked (link.c)
 *   DIR/launch              the ranks as one job: mpirun, or srun under Slurm
 *   DIR/plan.opir           the plan, as IR text (with its proof)
 *   DIR/report.md           the plan against the baselines (report.c)
 *   DIR/timeline.svg        the simulated step
 *   DIR/<text file>         the model's text, when it trains on one, so the
 *                           directory can move to another machine
 *
 * Both targets call it; it calls neither. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cg_impl.h"
#include "launch_text.h"
#include "viz.h"

int cg_fail_path(const char *what, const char *path)
{
	diag_error((ir_loc){0}, "cannot %s '%s': %s", what, path, strerror(errno));
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
			int rc = cg_fail_path("create the directory", p);
			free(p);
			return rc;
		}
		*s = '/';
	}
	int rc = mkdir(p, 0777) != 0 && errno != EEXIST ? cg_fail_path("create the directory", p) : 0;
	free(p);
	return rc;
}

static int copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb");
	if (!in)
		return cg_fail_path("read the training text", from);
	FILE *out = fopen(to, "wb");
	if (!out) {
		fclose(in);
		return cg_fail_path("write", to);
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
		return cg_fail_path("copy the training text to", to);
	return 0;
}

static int write_ir(const ir_module *m, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return cg_fail_path("write", path);
	ir_print(f, m);
	return fclose(f) != 0 ? cg_fail_path("write", path) : 0;
}

int cg_write_outputs(const cg_job *j, const cg_rank *ranks)
{
	const ir_module *m = j->m;
	const char *dir = j->o->dir;
	arena *a = arena_new();
	int rc = -1;
	if (cg_make_dir(dir) || write_ir(m, arena_printf(a, "%s/plan.opir", dir)) ||
	    (j->r && viz_svg(m, j->r, arena_printf(a, "%s/timeline.svg", dir))) ||
	    cg_write_report(j, ranks, arena_printf(a, "%s/report.md", dir)) ||
	    (m->train.data == IR_DATA_TEXT &&
	     copy_file(m->train.text_file, arena_printf(a, "%s/%s", dir, ranks[0].prog.data))))
		goto out;
	rc = 0;
out:
	arena_free(a);
	return rc;
}

/* DIR/launch: the rank programs as one MPI job, under mpirun (one node,
 * or the nodes of a hostfile) or srun (inside a Slurm allocation).  The
 * script's fixed text is codegen/launch.sh.in (embedded by CMakeLists.txt
 * as cg_launch_text): its usage comment, the rules for the user's flags,
 * and the code, which reads what this compile made from three variables
 * written in place of its "# @PLAN@" line -- the program of each rank, in
 * rank order, and the plan's Open MPI parameters.
 *
 * The parameters: without CMA (which ptrace limits in containers often
 * break) a message above the eager limit moves in fragments that each need
 * the sender inside MPI, i.e. between two of its kernels, which the
 * simulator (and the schedule) do not expect; the eager limit is raised to
 * the plan's largest message (up to 4 MiB), so a send completes on its
 * own -- in shared memory, and between nodes over TCP where the plan's
 * largest message is above TCP's own eager limit (64 KiB: there, a limit
 * lowered to the plan's would turn eager sends into fragmented ones). */
static int write_launch(const ir_module *m, const char *dir)
{
	char path[4096];
	uint64_t big = 0;
	for (int d = 0; d < m->ndevices; d++)
		for (int i = 0; i < m->devices[d].nops; i++)
			if (m->devices[d].ops[i].comm == IR_COMM_SEND && m->devices[d].ops[i].bytes > big)
				big = m->devices[d].ops[i].bytes;
	unsigned long long eager = (big + 4096 + 4095) / 4096 * 4096;
	const char *mark = "# @PLAN@\n", *rest = strstr(cg_launch_text, mark);
	ir_assert(rest);
	snprintf(path, sizeof path, "%s/launch", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return cg_fail_path("write", path);
	fprintf(f, "#!/bin/sh\n# launch: the %d rank programs of %s (schedule %s, %d stages) as one MPI job.\n",
	        cg_nranks(m), m->model.name, ir_schedule_names[m->plan.schedule], m->nstages);
	fwrite(cg_launch_text, 1, (size_t)(rest - cg_launch_text), f);
	fputs("# What this compile made (octopipe compile writes these lines):\n"
	      "# the program of each MPI rank, in rank order, and the Open MPI\n"
	      "# parameters of the plan, in shared memory and between nodes.\n"
	      "RANKS='", f);
	for (int d = 0; d < cg_nranks(m); d++)
		fprintf(f, "%srank%d", d ? " " : "", d);
	fputs("'\n", f);
	int raise = big && eager <= (4u << 20);
	fputs("PLAN_MCA='", f);
	if (raise)
		fprintf(f, "btl_vader_eager_limit %llu btl_vader_max_send_size %llu", eager, eager);
	fputs("'\nPLAN_MCA_NET='", f);
	if (raise && eager > (64u << 10))
		fprintf(f, "btl_tcp_eager_limit %llu btl_tcp_max_send_size %llu", eager, eager);
	fputs("'\n", f);
	fputs(rest + strlen(mark), f);
	int failed = ferror(f);
	if (fclose(f) != 0 || failed || chmod(path, 0755) != 0)
		return cg_fail_path("write", path);
	return 0;
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

int cg_build_ranks(const cg_job *j, const cg_rank *ranks, char ***mods)
{
	const ir_module *m = j->m;
	const cg_options *o = j->o;
	arena *a = arena_new();
	int N = cg_nranks(m), rc = -1;
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
	if (ranks[0].dev ? cg_link_device(N, obj, mods, exe, (cg_target)ranks[0].dev) : cg_link_all(N, obj, exe))
		goto out;
	if (!o->emit_obj)
		for (int d = 0; d < N; d++)
			unlink(obj[d]);
	rc = write_launch(m, o->dir);
out:
	arena_free(a);
	return rc;
}
