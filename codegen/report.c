/* report.c: DIR/report.md, what a compiled directory holds and why: the
 * target, the plan (stages, ranks, schedule, proof), its simulated step
 * against every baseline and the lower bound (the comparison the driver
 * made and printed, handed over in cg_options: nothing is planned again
 * here), and each rank's program (layers, ops, buffers).  Reads the module,
 * the simulation, the comparison and the lowered ranks; writes the one
 * file. */
#include <stdio.h>

#include "cg_impl.h"

static const char *time_of(char *buf, size_t n, double us)
{
	ir_fmt_time(buf, n, us); /* the one time formatter, as the driver's tables */
	return buf;
}

static const char *size_of(char *buf, size_t n, uint64_t b)
{
	ir_fmt_size(buf, n, b); /* the one size formatter: a unit that shows the number */
	return buf;
}

static void kinds(FILE *f, const ir_module *m, const ir_stage *st)
{
	for (int l = st->first; l <= st->last; l++)
		fprintf(f, "%s%s", l > st->first ? ", " : "", ir_layer_kind_names[m->layers[l].kind]);
}

/* What the ranks are, per target: the title's noun, the --target value
 * and how a rank runs its layers and talks to the others. */
static void target_text(const cg_options *o, const char **noun, const char **flag, const char **how,
                        char *buf, size_t n)
{
	switch (o->target) {
	case CG_TARGET_CPU:
		*noun = "CPU", *flag = "cpu", *how = "MPI";
		return;
	case CG_TARGET_CUDA:
		snprintf(buf, n, "its layers on a GPU, kernels for %s; NCCL", o->arch);
		*noun = "CUDA", *flag = "cuda", *how = buf;
		return;
	case CG_TARGET_CUDA_EMU:
		*noun = "emulated-CUDA", *flag = "cuda-emu";
		*how = "its layers on the host emulator of the CUDA path; MPI";
		return;
	}
	ir_bug("unknown target %d", (int)o->target);
}

int cg_write_report(const cg_job *j, const cg_rank *ranks, const char *path)
{
	const ir_module *m = j->m;
	const sim_result *r = j->r;
	const cg_options *o = j->o;
	FILE *f = fopen(path, "w");
	if (!f)
		return cg_fail_path("write", path);
	char t[32], u[32], hb[96];
	const char *noun, *flag, *how;
	target_text(o, &noun, &flag, &how, hb, sizeof hb);
	int N = cg_nranks(m);
	fprintf(f, "# %s on %d %s rank%s\n\n", m->model.name, N, noun, N == 1 ? "" : "s");
	fprintf(f, "Compiled by `octopipe compile --target %s`: one executable per rank (%s), run "
	           "together by `./launch` (arguments go to every rank: `./launch --steps %lld`).\n\n",
	        flag, how, (long long)m->train.steps);
	fprintf(f, "- model: %d layers, hidden %lld, vocabulary %lld, %lld tokens per sequence, %s\n",
	        m->nlayers, (long long)m->model.hidden, (long long)m->model.vocab,
	        (long long)m->model.seq, ir_dtype_names[m->model.dtype]);
	fprintf(f, "- training: %lld micro-batches of %lld sequences per step, %s, lr %g, seed %llu, "
	           "data %s\n",
	        (long long)m->train.microbatches, (long long)m->train.mbs,
	        ir_optimizer_names[m->train.optimizer], m->train.lr, (unsigned long long)m->train.seed,
	        m->train.data == IR_DATA_TEXT     ? m->train.text_file
	        : m->train.data == IR_DATA_TOKENS ? m->train.token_files
	                                          : "synthetic");
	fprintf(f, "- plan: schedule %s, %d stages on %d ranks, partition %s\n",
	        ir_schedule_names[m->plan.schedule], m->nstages, N, ir_partition_names[m->plan.partition]);
	fprintf(f, "- proof: deadlock-free under %s semantics (%lld steps of the event graph, certificate "
	           "%016llx)\n",
	        ir_backend_names[m->proof.backend], (long long)m->proof.steps,
	        (unsigned long long)m->proof.order);
	if (r)
		fprintf(f, "- predicted step time: **%s** (simulator, bubble %.1f %%, %.0f tokens/s)\n",
		        time_of(t, sizeof t, r->makespan), 100 * r->bubble_ratio, r->tokens_per_s);

	fprintf(f, "\n## Stages\n\n| stage | layers | rank | kinds | recompute |\n|---|---|---|---|---|\n");
	for (int s = 0; s < m->nstages; s++) {
		const ir_stage *st = &m->stages[s];
		fprintf(f, "| S%d | L%d..L%d | %d | ", s, st->first, st->last, st->device);
		kinds(f, m, st);
		fprintf(f, " | %s |\n", ir_recompute_names[st->recompute]);
	}

	if (r && o->baselines) {
		const tune_row *rows = o->baselines;
		double lb = o->lower_bound;
		fprintf(f, "\n## This plan against the baselines (simulated step)\n\n"
		           "| plan | step | bubble | peak memory | step / this plan's |\n|---|---|---|---|---|\n");
		for (int i = 0; i < TUNE_NBASELINES; i++) {
			const tune_row *row = &rows[i];
			if (!row->ok) {
				fprintf(f, "| %s | — | — | — | %s |\n", row->name, row->why);
				continue;
			}
			fprintf(f, "| %s | %s | %.1f %% | %s | %.2fx%s |\n", row->name, time_of(t, sizeof t, row->makespan),
			        100 * row->bubble, size_of(u, sizeof u, row->peak_mem), row->makespan / r->makespan,
			        row->fits ? "" : " (exceeds memory)");
		}
		uint64_t peak = 0;
		for (int d = 0; d < r->ndev; d++)
			peak = r->dev[d].peak_mem > peak ? r->dev[d].peak_mem : peak;
		fprintf(f, "| **this plan (%s)** | **%s** | %.1f %% | %s | 1.00x |\n",
		        ir_schedule_names[m->plan.schedule], time_of(t, sizeof t, r->makespan),
		        100 * r->bubble_ratio, size_of(u, sizeof u, peak));
		fprintf(f, "| lower bound | %s | | | %.2fx |\n", time_of(t, sizeof t, lb), lb / r->makespan);
		fprintf(f, "\nThis plan is %.1f %% above the lower bound.\n", 100 * (r->makespan / lb - 1));
	}

	fprintf(f, "\n## Rank programs\n\n"
	           "Each rank's `main` walks a constant op table (the verified order) once per step, "
	           "calling libocto_rt per op (docs/codegen.md). Buffers: one block per rank, offsets from "
	           "the memory plan (`memplan`)%s.\n\n"
	           "| rank | stages | layers | ops per step | buffers | buffer block | memplan arena |\n"
	           "|---|---|---|---|---|---|---|\n",
	        ", whose stash sizes are the runtime's: the block is the arena (a program of one stage "
	        "adds a work buffer on top)");
	for (int d = 0; d < N; d++) {
		const cg_rank *k = &ranks[d];
		fprintf(f, "| %d | ", d);
		int held = 0;
		for (int s = 0; s < m->nstages; s++)
			if (m->stages[s].device == d)
				fprintf(f, "%sS%d", held++ ? ", " : "", s);
		fprintf(f, "%s | %d | %d | %d | %s | %s |\n", held ? "" : "—", k->nlayers, k->nops, k->nbufs,
		        size_of(t, sizeof t, k->buf_bytes),
		        k->ir_arena ? size_of(u, sizeof u, k->ir_arena) : "—");
	}
	if (fclose(f) != 0)
		return cg_fail_path("write", path);
	return 0;
}
