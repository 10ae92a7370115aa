/* test_plan_runs.c: Check suite for "the memory plan that runs is the one
 * verified" (docs/cost-model.md, "Stash sizes").
 *
 * Each case plans a tiny model for one target through the default pipeline
 * (the backend compile gives it: mpi for CPU ranks, nccl for device ranks)
 * and lowers every rank as compile does.  Then, with the runtime's own
 * numbers -- rt_layer_sizes, what rt_model_init records for a CPU rank's
 * layers, and dev_layer_sizes, what the device executor sizes its buffers
 * by -- it checks that every stash buffer of the verified memory plan is
 * exactly the runtime's stash of its stage (each layer's slice RT_ALIGN'd
 * and laid where the rank program puts it), and that the rank program's op
 * table uses the plan's offsets and its buffer block is the plan's arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_impl.h" /* cg_lower_rank: the op table a rank runs */
#include "dev.h" /* dev_layer_sizes */
#include "frontend.h"
#include "pass.h"
#include "testutil.h"

static const struct {
	const char *model, *schedule, *dtype;
	int devices;
	bool device; /* device ranks (cuda, cuda-emu), else CPU ranks */
	const char *recompute;
} cases[] = {
	{"tiny-hybrid", "1f1b", NULL, 2, false},  {"tiny-hybrid", "1f1b", NULL, 2, true},
	{"tiny-hybrid", "1f1b", "bf16", 2, true}, {"tiny-hybrid", "zbv", NULL, 2, false},
	{"tiny-dense", "gpipe", NULL, 4, true},   {"tiny-dense", "i1f1b", NULL, 2, false},
	{"tiny-dense", "1f1b", NULL, 1, false},   {"tiny-hybrid", "1f1b", NULL, 1, true},
	/* full recomputation: the recomp buffers and the R rows */
	{"tiny-hybrid", "zbv", NULL, 2, false, "full"}, {"tiny-hybrid", "1f1b", "bf16", 2, true, "full"},
	{"tiny-dense", "1f1b", NULL, 1, false, "full"},
};

static uint64_t rup(int64_t n)
{
	return ((uint64_t)n + RT_ALIGN - 1) & ~(uint64_t)(RT_ALIGN - 1);
}

/* The plan's buffer of (kind, stage, mb) on device d, and for a value the
 * value kind; NULL if none. */
static const ir_buf *plan_buf(const ir_dev_plan *p, ir_buf_kind k, int value, int s, int mb)
{
	for (int i = 0; i < p->nbufs; i++) {
		const ir_buf *b = &p->bufs[i];
		if (b->kind == k && b->stage == s && b->mb == mb &&
		    (ir_buf_is_stash(k) || (int)b->value == value))
			return b;
	}
	return NULL;
}

START_TEST(test_plan_is_what_runs)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.yaml", fe_models_dir(), cases[_i].model);
	bool device = cases[_i].device;
	fe_overrides ov = {.devices = cases[_i].devices, .schedule = cases[_i].schedule,
	                   .backend = device ? "nccl" : "mpi", .dtype = cases[_i].dtype,
	                   .recompute = cases[_i].recompute};
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_int_eq(ir_verify(m), 0);
	ck_assert_ptr_nonnull(m->memplan);
	bool bf16 = m->model.dtype == IR_DTYPE_BF16;
	arena *a = arena_new();
	for (int d = 0; d < m->ndevices; d++) {
		const ir_dev_plan *p = &m->memplan[d];
		cg_rank r;
		ck_assert_int_eq(cg_lower_rank(m, 0, d, device, a, &r), 0);

		/* The runtime's stashes, stage by stage: each layer's slice where
		 * the rank program puts it, their sum the plan's buffer. */
		uint64_t *act = calloc((size_t)m->nstages, sizeof *act);
		uint64_t *ws = calloc((size_t)m->nstages, sizeof *ws);
		for (int h = 0; h < r.nlayers; h++) {
			int l = (int)r.layers[h].index, s = 0;
			while (l > m->stages[s].last)
				s++;
			rt_sizes sz;
			ck_assert_int_eq(device ? dev_layer_sizes(&r.layers[h].desc, bf16, &sz)
			                        : rt_layer_sizes(&r.layers[h].desc, &sz),
			                 RT_OK);
			ck_assert_int_eq(r.act_at[h], (int64_t)act[s]);
			ck_assert_int_eq(r.ws_at[h], (int64_t)ws[s]);
			act[s] += rup(sz.act);
			ws[s] += rup(sz.wstash);
		}
		/* A recomputing stage's act and recomp buffers: the stash and one
		 * value, the chain of its layers. */
		uint64_t vb = (uint64_t)(m->train.mbs * m->model.seq * m->model.hidden *
		                         (device && bf16 ? 2 : 4));
		int nstash = 0;
		for (int i = 0; i < p->nbufs; i++) {
			const ir_buf *b = &p->bufs[i];
			if (!ir_buf_is_stash(b->kind))
				continue;
			bool redo = m->stages[b->stage].recompute == IR_RECOMP_FULL;
			ck_assert(redo || b->kind != IR_BUF_RECOMP);
			uint64_t want = b->kind == IR_BUF_WSTASH ? ws[b->stage] : act[b->stage] + (redo ? vb : 0);
			ck_assert_msg(b->size == want,
			              "%s %s D%d: the plan's %s buffer of S%d m%d is %llu bytes, the "
			              "runtime's stash %llu", cases[_i].model, device ? "device" : "cpu", d,
			              ir_buf_names[b->kind], b->stage, b->mb, (unsigned long long)b->size,
			              (unsigned long long)want);
			nstash++;
		}
		ck_assert_int_gt(nstash, 0);

		/* The op table runs in the plan's buffers, and the block is its arena. */
		ck_assert_uint_eq(r.ir_arena, p->arena);
		ck_assert_int_eq(r.nbufs, p->nbufs);
		bool one_stage = m->nstages == 1;
		uint64_t work = rup((int64_t)(m->train.mbs * m->model.seq * m->model.hidden *
		                              (device && bf16 ? 2 : 4)));
		ck_assert_uint_eq(r.buf_bytes, rup((int64_t)p->arena) + (one_stage ? work : 0));
		int nr = 0;
		for (int i = 0; i < r.nops; i++) {
			const cg_op *c = &r.ops[i];
			int s = -1;
			if (c->kind == CG_F || c->kind == CG_B || c->kind == CG_W || c->kind == CG_R) {
				int l = (int)r.layers[c->h0].index;
				for (s = 0; l > m->stages[s].last; s++)
					;
			}
			bool redo = s >= 0 && m->stages[s].recompute == IR_RECOMP_FULL;
			if (c->kind == CG_F || (c->kind == CG_B && !redo))
				ck_assert_int_eq(c->act, (int64_t)plan_buf(p, IR_BUF_ACT, 0, s, c->mb)->off);
			/* R: F again from the kept input into the recomp buffer, right
			 * before its B, which reads that buffer. */
			if (c->kind == CG_B && redo) {
				int64_t off = (int64_t)plan_buf(p, IR_BUF_RECOMP, 0, s, c->mb)->off;
				ck_assert_int_eq(c->act, off);
				const cg_op *rr = &r.ops[i - 1];
				ck_assert_int_eq(rr->kind, CG_R);
				ck_assert_int_eq(rr->mb, c->mb);
				ck_assert_int_eq(rr->act, off);
				ck_assert_int_eq(rr->out, off + (int64_t)act[s]);
				ck_assert_int_eq(rr->last, rr->out);
				const ir_buf *in = s ? plan_buf(p, IR_BUF_RECV, IR_OP_F, s - 1, c->mb) : NULL;
				if (s && !in)
					in = plan_buf(p, IR_BUF_PASS, IR_OP_F, s - 1, c->mb);
				ck_assert_int_eq(rr->in, in ? (int64_t)in->off : -1);
			}
			nr += c->kind == CG_R;
			ck_assert(c->kind != CG_R || (i + 1 < r.nops && r.ops[i + 1].kind == CG_B));
			if (c->kind == CG_B || c->kind == CG_W)
				ck_assert_int_eq(c->ws, (int64_t)plan_buf(p, IR_BUF_WSTASH, 0, s, c->mb)->off);
			if (c->kind == CG_SEND || c->kind == CG_RECV) {
				int value = c->tkind == RT_MSG_ACT ? IR_OP_F : IR_OP_B;
				const ir_buf *b = plan_buf(p, c->kind == CG_SEND ? IR_BUF_SEND : IR_BUF_RECV,
				                           value, c->tstage, c->mb);
				ck_assert_ptr_nonnull(b);
				ck_assert_int_eq(c->in, (int64_t)b->off);
				ck_assert_int_eq(c->bytes, (int64_t)b->size);
			}
		}
		int want_r = 0;
		for (int st = 0; st < m->nstages; st++)
			if (m->stages[st].device == d && m->stages[st].recompute == IR_RECOMP_FULL)
				want_r += (int)ir_local_mb(m);
		ck_assert_int_eq(nr, want_r);
		ck_assert_int_eq(want_r > 0, cases[_i].recompute != NULL);
		free(act);
		free(ws);
	}
	arena_free(a);
	ir_free(m);
}
END_TEST

/* A profile's stash size is kept (the profile measured it); measured on
 * another executor it is not the runtime's, and compile refuses it rather
 * than run a plan that is not the one verified. */
START_TEST(test_measured_stash_of_another_executor)
{
	char path[512];
	snprintf(path, sizeof path, "%s/tiny-dense.yaml", fe_models_dir());
	fe_overrides ov = {.devices = 2, .schedule = "1f1b", .backend = "mpi"};
	ir_module *m = fe_load(path, &ov);
	ck_assert_ptr_nonnull(m);
	const char *prof = "units: us\nkinds: {mlp: {f: 1, b: 1, w: 1, act_bytes: 1000}}\n";
	ck_assert_int_eq(fe_load_profile_src(m, src_from_string(m->arena, "p.yaml", prof)), 0);
	ck_assert_int_eq(pass_run(m, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
	ck_assert_uint_eq(m->layers[2].cost.act, 1024); /* whole RT_ALIGN slices */
	arena *a = arena_new();
	cg_rank r;
	tu_capture();
	ck_assert_int_eq(cg_lower_rank(m, 0, 0, false, a, &r), -1);
	char *err = tu_release_first_line();
	ck_assert_msg(strstr(err, "layer L2 (mlp): the profile measured an act stash of 1024 bytes, "
	                          "but the CPU runtime holds ") != NULL, "%s", err);
	free(err);
	arena_free(a);
	ir_free(m);
}
END_TEST

static Suite *plan_runs_suite(void)
{
	Suite *s = suite_create("memplan_runs");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_plan_is_what_runs, 0, (int)(sizeof cases / sizeof *cases));
	tcase_add_test(tc, test_measured_stash_of_another_executor);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(plan_runs_suite());
}
