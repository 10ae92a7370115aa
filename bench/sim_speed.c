/* sim_speed: how fast the simulator runs.
 *
 *   sim_speed [DEVICES [CHUNKS [MICROBATCHES]]]     (default 128 4 1024)
 *
 * Builds a model of DEVICES x CHUNKS equal stages, schedules it with
 * Megatron's interleaved 1F1B (CHUNKS stages per device; plain 1F1B when
 * CHUNKS is 1), and times sim_run on it: simulated ops per second, best of
 * three runs. */
#include <stdlib.h>
#include <time.h>

#include "pass.h"
#include "simulate.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	int p = argc > 1 ? atoi(argv[1]) : 128;
	int v = argc > 2 ? atoi(argv[2]) : 4;
	int mbs = argc > 3 ? atoi(argv[3]) : 1024;
	if (p < 1 || v < 1 || mbs < 1) {
		fprintf(stderr, "usage: sim_speed [DEVICES [CHUNKS [MICROBATCHES]]]\n");
		return 1;
	}
	ir_module *m = ir_new();
	m->model = (ir_model_info){"sim-speed", 4096, 32000, 4096, IR_DTYPE_BF16};
	m->train = (ir_train){.mbs = 1, .microbatches = mbs, .steps = 1, .lr = 1e-4, .seed = 1};
	m->cluster = (ir_cluster){.name = "bench", .devices = p, .per_node = 8, .mem = 80ull << 30,
	                          .flops = 989e12, .membw = 3.35e12, .intra = {450e9, 3},
	                          .inter = {50e9, 10}};
	m->plan.schedule = v > 1 ? IR_SCHED_I1F1B : IR_SCHED_1F1B;
	m->plan.chunks = v;
	int body = p * v;
	for (int i = 0; i < body + 2; i++) {
		ir_layer_kind k = i == 0 ? IR_LAYER_EMBEDDING : i == body + 1 ? IR_LAYER_HEAD : IR_LAYER_MLP;
		ir_layer *l = ir_add_layer(m, k, (ir_loc){0});
		if (k == IR_LAYER_MLP)
			l->attr[IR_ATTR_FFN] = 14336;
		l->cost = (ir_cost){.known = true, .f = 100 + i % 7, .b = 200 + i % 5, .w = 90,
		                    .flops = 1e12, .act = 1 << 26, .wstash = 1 << 25, .params = 1 << 27,
		                    .resident = 1ull << 31};
	}
	if (pass_run(m, pass_plan_passes.ids, pass_plan_passes.n, NULL) != 0)
		return 1;
	long ops = 0;
	for (int d = 0; d < m->ndevices; d++)
		ops += m->devices[d].nops;
	double best = 1e30, makespan = 0;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now();
		sim_result *r = sim_run(m);
		double t = now() - t0;
		if (!r)
			return 1;
		makespan = r->makespan;
		best = t < best ? t : best;
		sim_free(r);
	}
	printf("sim_speed: %d devices x %d chunks, %d micro-batches (%s): %ld ops in %.3f s, "
	       "%.2f M ops/s (simulated makespan %.3f s)\n",
	       p, v, mbs, ir_schedule_names[m->plan.schedule], ops, best, ops / best * 1e-6,
	       makespan * 1e-6);
	ir_free(m);
	return 0;
}
