/* test_cudnn_graph.c: Check suite for the attention graphs OctoPipe
 * builds for cuDNN (runtime/cuda/rt_cudnn.c), without a GPU:
 *
 *   the math   each graph's node list (cdn_attn_list) evaluated here, node
 *              by node, as the backend API defines the nodes (matmuls over
 *              the last two dimensions with the leading ones broadcast,
 *              pointwise nodes with size-1 dimensions broadcast, reductions
 *              to the output's dimensions, reshapes that read the same
 *              memory under other strides, every tensor rounded to its
 *              type), on the arrays its variant pack binds (cdn_attn_bind,
 *              the runtime's own), against attention computed here in
 *              double: O, Stats, D, dQ, dK, dV for GQA, MHA, windows and
 *              d_qk != d_v, in both forms of the index nodes;
 *   cuDNN      every tensor, operation and the operation graph of real
 *              models' cores finalized by cuDNN itself (cdn_attn_check_nodes):
 *              the attributes' types and the operands' shapes.
 *
 * What needs the GPU, and runs in the first-run kit: whether cuDNN's engines
 * take the graphs, and the results they give.  Without libcudnn the suite
 * says so and passes no judgement (exit 77, ctest's skip). */
#include <check.h>
#include <cudnn_graph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "rt_cudnn.h"
#include "testutil.h"

/* ---- the evaluator ------------------------------------------------------------ */

/* A tensor's memory: the bound array (bf16 as its bits, f32, or a host
 * scalar) or, for a virtual one, floats of its own. */
typedef struct mem {
	void *p;
	int type;
	bool bf16_bits; /* p holds uint16_t */
} mem;

static double rd(const mem *m, int64_t off)
{
	if (m->bf16_bits)
		return dev_from_bf16(((const uint16_t *)m->p)[off]);
	return ((const float *)m->p)[off];
}

/* v rounded to the tensor's type, stored. */
static void wr(mem *m, int64_t off, double v)
{
	if (m->bf16_bits) {
		((uint16_t *)m->p)[off] = dev_to_bf16((float)v);
		return;
	}
	float f = (float)v;
	if (m->type == CUDNN_DATA_BFLOAT16)
		f = dev_from_bf16(dev_to_bf16(f));
	else if (m->type == CUDNN_DATA_INT32)
		f = (float)(int32_t)v;
	else if (m->type == CUDNN_DATA_BOOLEAN)
		f = v != 0;
	((float *)m->p)[off] = f;
}

static int64_t extent(const cdn_tensor *t)
{
	int64_t e = 1;
	for (int k = 0; k < 4; k++)
		e += (t->dim[k] - 1) * t->str[k];
	return e;
}

static int64_t off_of(const cdn_tensor *t, const int64_t i[4])
{
	return i[0] * t->str[0] + i[1] * t->str[1] + i[2] * t->str[2] + i[3] * t->str[3];
}

/* The element of input t that output index i reads: a size-1 dimension
 * broadcasts, a smaller one maps a group of consecutive indices (a kv head
 * serves its query heads h / (nh / nkv)). */
static int64_t in_off(const cdn_tensor *t, const cdn_tensor *y, const int64_t i[4])
{
	int64_t j[4];
	for (int k = 0; k < 4; k++)
		j[k] = t->dim[k] == 1 ? 0 : i[k] * t->dim[k] / y->dim[k];
	return off_of(t, j);
}

#define EACH(t, i)                                                                       \
	for (i[0] = 0; i[0] < (t)->dim[0]; i[0]++)                                           \
		for (i[1] = 0; i[1] < (t)->dim[1]; i[1]++)                                       \
			for (i[2] = 0; i[2] < (t)->dim[2]; i[2]++)                                   \
				for (i[3] = 0; i[3] < (t)->dim[3]; i[3]++)

static double pointwise(int mode, double x, double b, double t, int64_t idx)
{
	switch (mode) {
	case CUDNN_POINTWISE_ADD: return x + b;
	case CUDNN_POINTWISE_SUB: return x - b;
	case CUDNN_POINTWISE_MUL: return x * b;
	case CUDNN_POINTWISE_DIV: return x / b;
	case CUDNN_POINTWISE_EXP: return exp(x);
	case CUDNN_POINTWISE_LOG: return log(x);
	case CUDNN_POINTWISE_IDENTITY: return x;
	case CUDNN_POINTWISE_CMP_GE: return x >= b;
	case CUDNN_POINTWISE_CMP_GT: return x > b;
	case CUDNN_POINTWISE_BINARY_SELECT: return t != 0 ? x : b;
	case CUDNN_POINTWISE_GEN_INDEX: return (double)idx;
	}
	ck_abort_msg("pointwise mode %d is not evaluated here", mode);
	return 0;
}

/* Runs list l on the variant pack (uid, ptr). */
static void eval(const cdn_list *l, int n, const int64_t *uid, void *const *ptr)
{
	mem m[CDN_MAX_TENSORS];
	for (int i = 0; i < l->nt; i++) {
		const cdn_tensor *t = &l->t[i];
		m[i] = (mem){.type = t->type};
		if (t->virt) {
			m[i].p = calloc((size_t)extent(t), sizeof(float));
			continue;
		}
		for (int j = 0; j < n; j++)
			if (uid[j] == t->uid)
				m[i].p = ptr[j];
		ck_assert_msg(m[i].p, "tensor uid %lld is not in the variant pack", (long long)t->uid);
		ck_assert_msg(t->type == CUDNN_DATA_BFLOAT16 || t->type == CUDNN_DATA_FLOAT,
		              "bound tensor uid %lld of type %d", (long long)t->uid, t->type);
		m[i].bf16_bits = t->type == CUDNN_DATA_BFLOAT16;
	}
	for (int e = 0; e < l->nn; e++) {
		const cdn_node *nd = &l->n[e];
		const cdn_tensor *y = &l->t[nd->y], *x = &l->t[nd->x];
		ck_assert_msg(!l->t[nd->y].by_value, "node %d writes a scalar", e);
		int64_t i[4];
		switch (nd->op) {
		case CDN_POINTWISE: {
			const cdn_tensor *b = nd->b >= 0 ? &l->t[nd->b] : NULL;
			const cdn_tensor *t = nd->t >= 0 ? &l->t[nd->t] : NULL;
			EACH(y, i) {
				double xv = rd(&m[nd->x], in_off(x, y, i));
				double bv = b ? rd(&m[nd->b], in_off(b, y, i)) : 0;
				double tv = t ? rd(&m[nd->t], in_off(t, y, i)) : 0;
				wr(&m[nd->y], off_of(y, i),
				   pointwise(nd->mode, xv, bv, tv, nd->axis >= 0 ? i[nd->axis] : 0));
			}
			break;
		}
		case CDN_MATMUL: {
			const cdn_tensor *b = &l->t[nd->b];
			ck_assert_int_eq(x->dim[3], b->dim[2]);
			ck_assert_int_eq(x->dim[2], y->dim[2]);
			ck_assert_int_eq(b->dim[3], y->dim[3]);
			EACH(y, i) {
				double s = 0;
				for (int64_t k = 0; k < x->dim[3]; k++) {
					int64_t ia[4] = {i[0], i[1], i[2], k}, ib[4] = {i[0], i[1], k, i[3]};
					int64_t ja[4] = {ia[0], ia[1] * x->dim[1] / y->dim[1], ia[2], ia[3]};
					int64_t jb[4] = {ib[0], ib[1] * b->dim[1] / y->dim[1], ib[2], ib[3]};
					s += rd(&m[nd->x], off_of(x, ja)) * rd(&m[nd->b], off_of(b, jb));
				}
				wr(&m[nd->y], off_of(y, i), s);
			}
			break;
		}
		case CDN_REDUCTION: {
			bool mx = nd->mode == CUDNN_REDUCE_TENSOR_MAX;
			double *acc = malloc((size_t)extent(y) * sizeof *acc);
			for (int64_t k = 0; k < extent(y); k++)
				acc[k] = mx ? -INFINITY : 0;
			EACH(x, i) {
				int64_t j[4];
				for (int k = 0; k < 4; k++)
					j[k] = y->dim[k] == 1 ? 0 : i[k] * y->dim[k] / x->dim[k];
				double v = rd(&m[nd->x], off_of(x, i));
				int64_t o = off_of(y, j);
				acc[o] = mx ? fmax(acc[o], v) : acc[o] + v;
			}
			EACH(y, i)
				wr(&m[nd->y], off_of(y, i), acc[off_of(y, i)]);
			free(acc);
			break;
		}
		case CDN_RESHAPE:
			ck_assert_int_eq(extent(x), extent(y));
			EACH(y, i)
				wr(&m[nd->y], off_of(y, i), rd(&m[nd->x], off_of(y, i)));
			break;
		}
	}
	for (int i = 0; i < l->nt; i++)
		if (l->t[i].virt)
			free(m[i].p);
}

/* ---- attention in double -------------------------------------------------------- */

/* Element (b, s, h, d) of a [b][s][h][d] array with H heads of D. */
#define AT(b, s, h, d, H, D) ((((b) * c->seq + (s)) * (H) + (h)) * (D) + (d))

static bool sees(const dev_attn_core *c, int64_t i, int64_t j)
{
	return j <= i && (c->win <= 0 || j > i - c->win);
}

typedef struct ref {
	double *o, *lse, *dsum, *dq, *dk, *dv;
} ref;

/* The core's F and B; B from the bf16 o it is given (the graph's input). */
static ref attention(const dev_attn_core *c, const float *q, const float *k, const float *v,
                     const float *o16, const float *dout)
{
	int64_t nb = c->mbs, S = c->seq, nh = c->nh, nkv = c->nkv, dk = c->dqk, dv = c->dv;
	int64_t g = nh / nkv;
	ref r = {calloc((size_t)(nb * S * nh * dv), 8), calloc((size_t)(nb * nh * S), 8),
	         calloc((size_t)(nb * nh * S), 8),      calloc((size_t)(nb * S * nh * dk), 8),
	         calloc((size_t)(nb * S * nkv * dk), 8), calloc((size_t)(nb * S * nkv * dv), 8)};
	double *p = malloc((size_t)S * sizeof *p);
	for (int64_t b = 0; b < nb; b++)
		for (int64_t h = 0; h < nh; h++)
			for (int64_t i = 0; i < S; i++) {
				int64_t kh = h / g, st = (b * nh + h) * S + i;
				double mx = -INFINITY, l = 0;
				for (int64_t j = 0; j < S; j++) {
					double s = 0;
					for (int64_t d = 0; d < dk; d++)
						s += (double)q[AT(b, i, h, d, nh, dk)] * k[AT(b, j, kh, d, nkv, dk)];
					p[j] = sees(c, i, j) ? s * c->scale : -INFINITY;
					mx = fmax(mx, p[j]);
				}
				for (int64_t j = 0; j < S; j++)
					l += p[j] = exp(p[j] - mx);
				r.lse[st] = mx + log(l);
				double D = 0;
				for (int64_t d = 0; d < dv; d++) {
					double s = 0;
					for (int64_t j = 0; j < S; j++)
						s += p[j] / l * v[AT(b, j, kh, d, nkv, dv)];
					r.o[AT(b, i, h, d, nh, dv)] = s;
					D += (double)dout[AT(b, i, h, d, nh, dv)] * o16[AT(b, i, h, d, nh, dv)];
				}
				r.dsum[st] = D;
				for (int64_t j = 0; j < S; j++) {
					double P = p[j] / l, dp = 0;
					for (int64_t d = 0; d < dv; d++) {
						dp += (double)dout[AT(b, i, h, d, nh, dv)] * v[AT(b, j, kh, d, nkv, dv)];
						r.dv[AT(b, j, kh, d, nkv, dv)] += P * dout[AT(b, i, h, d, nh, dv)];
					}
					double ds = P * (dp - D) * c->scale;
					for (int64_t d = 0; d < dk; d++) {
						r.dq[AT(b, i, h, d, nh, dk)] += ds * k[AT(b, j, kh, d, nkv, dk)];
						r.dk[AT(b, j, kh, d, nkv, dk)] += ds * q[AT(b, i, h, d, nh, dk)];
					}
				}
			}
	free(p);
	return r;
}

/* ---- the checks ------------------------------------------------------------------ */

static uint64_t rng = 0x63756e6eu;
static float noise(void)
{
	rng = rng * 6364136223846793005u + 1442695040888963407u;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

/* n bf16 values of noise, and the same as floats. */
static uint16_t *bf16_noise(int64_t n, float **f)
{
	uint16_t *h = malloc((size_t)n * sizeof *h);
	*f = malloc((size_t)n * sizeof **f);
	for (int64_t i = 0; i < n; i++) {
		h[i] = dev_to_bf16(noise());
		(*f)[i] = dev_from_bf16(h[i]);
	}
	return h;
}

/* The largest |got - want| over n, relative to want's largest magnitude. */
static double rel_err(const void *got, bool bits, const double *want, int64_t n)
{
	double e = 0, mag = 0;
	for (int64_t i = 0; i < n; i++) {
		double g = bits ? dev_from_bf16(((const uint16_t *)got)[i]) : ((const float *)got)[i];
		e = fmax(e, fabs(g - want[i]));
		mag = fmax(mag, fabs(want[i]));
	}
	return e / (mag > 0 ? mag : 1);
}

static void check_core(const dev_attn_core *c, int form)
{
	int64_t nb = c->mbs, S = c->seq, nq = nb * S * c->nh * c->dqk, nk = nb * S * c->nkv * c->dqk;
	int64_t nv = nb * S * c->nkv * c->dv, no = nb * S * c->nh * c->dv, nst = nb * c->nh * S;
	float *qf, *kf, *vf, *df;
	uint16_t *q = bf16_noise(nq, &qf), *k = bf16_noise(nk, &kf), *v = bf16_noise(nv, &vf);
	uint16_t *dout = bf16_noise(no, &df);
	uint16_t *o = calloc((size_t)no, 2), *dq = calloc((size_t)nq, 2), *dk = calloc((size_t)nk, 2);
	uint16_t *dv = calloc((size_t)nv, 2);
	float *lse = calloc((size_t)nst, 4), *dsum = calloc((size_t)nst, 4), sc[4];
	char err[768];
	cdn_list *l = malloc(sizeof *l);
	int64_t uid[CDN_MAX_BIND];
	void *ptr[CDN_MAX_BIND];

	ck_assert_msg(!cdn_attn_list(c, false, form, l, err, sizeof err), "%s", err);
	cdn_arrays fa = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
	eval(l, cdn_attn_bind(c, false, &fa, sc, uid, ptr), uid, ptr);
	float *o16 = malloc((size_t)no * sizeof *o16);
	for (int64_t i = 0; i < no; i++)
		o16[i] = dev_from_bf16(o[i]);
	ref r = attention(c, qf, kf, vf, o16, df);

	ck_assert_msg(!cdn_attn_list(c, true, form, l, err, sizeof err), "%s", err);
	cdn_arrays ba = {.q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse, .dsum = dsum,
	                 .dq = dq, .dk = dk, .dv = dv};
	eval(l, cdn_attn_bind(c, true, &ba, sc, uid, ptr), uid, ptr);

	/* bf16 outputs from probabilities and dS rounded to bf16 (the engines'
	 * own P and dS^T): 2e-2, dev_check's bf16 threshold; Stats and D in f32. */
	struct {
		const char *what;
		const void *got;
		bool bits;
		const double *want;
		int64_t n;
		double tol;
	} out[] = {
	    {"O", o, true, r.o, no, 2e-2},       {"Stats", lse, false, r.lse, nst, 1e-5},
	    {"D", dsum, false, r.dsum, nst, 1e-5}, {"dQ", dq, true, r.dq, nq, 2e-2},
	    {"dK", dk, true, r.dk, nk, 2e-2},    {"dV", dv, true, r.dv, nv, 2e-2},
	};
	for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
		double e = rel_err(out[i].got, out[i].bits, out[i].want, out[i].n);
		ck_assert_msg(e <= out[i].tol,
		              "core %lldx%lld heads %lld/%lld dims %lld/%lld window %lld, index form %d: "
		              "%s off by %.3g relative (threshold %g)", (long long)c->mbs,
		              (long long)c->seq, (long long)c->nh, (long long)c->nkv, (long long)c->dqk,
		              (long long)c->dv, (long long)c->win, form, out[i].what, e, out[i].tol);
	}
	free(q), free(k), free(v), free(dout), free(o), free(dq), free(dk), free(dv);
	free(qf), free(kf), free(vf), free(df), free(lse), free(dsum), free(o16), free(l);
	free(r.o), free(r.lse), free(r.dsum), free(r.dq), free(r.dk), free(r.dv);
}

/* Small cores: GQA, MHA, windows (narrower than the sequence, and one
 * wider), d_qk != d_v (MLA's kind), several sequences. */
static const dev_attn_core small[] = {
    {.mbs = 2, .seq = 13, .nh = 4, .nkv = 2, .dqk = 16, .dv = 16, .win = 0, .scale = 0.25f},
    {.mbs = 1, .seq = 21, .nh = 4, .nkv = 1, .dqk = 8, .dv = 8, .win = 5, .scale = 0.35f},
    {.mbs = 2, .seq = 9, .nh = 3, .nkv = 3, .dqk = 24, .dv = 8, .win = 0, .scale = 0.2f},
    {.mbs = 1, .seq = 11, .nh = 2, .nkv = 2, .dqk = 8, .dv = 16, .win = 40, .scale = 0.3f},
};

static bool have_cudnn(void)
{
	char err[768];
	cdn_list *l = malloc(sizeof *l);
	int rc = cdn_attn_list(&small[0], false, 0, l, err, sizeof err);
	free(l);
	if (rc == RT_ENODEV)
		fprintf(stderr, "test_cudnn_graph: skipped: %s\n", err);
	return rc != RT_ENODEV;
}

START_TEST(test_graphs_compute_attention)
{
	for (size_t i = 0; i < sizeof small / sizeof *small; i++)
		for (int form = 0; form < 2; form++)
			check_core(&small[i], form);
}
END_TEST

/* The mask is what the kernels use (j <= i, j > i - W): a core whose
 * window hides nothing gives the causal core's outputs, and one whose
 * window is 1 gives each query its own key alone (O = its V row). */
START_TEST(test_window_edges)
{
	dev_attn_core c = {.mbs = 1, .seq = 6, .nh = 1, .nkv = 1, .dqk = 8, .dv = 8, .win = 1,
	                   .scale = 0.5f};
	int64_t n = 6 * 8;
	float *qf, *kf, *vf;
	uint16_t *q = bf16_noise(n, &qf), *k = bf16_noise(n, &kf), *v = bf16_noise(n, &vf);
	uint16_t *o = calloc((size_t)n, 2);
	float lse[6], sc[4];
	char err[768];
	cdn_list *l = malloc(sizeof *l);
	int64_t uid[CDN_MAX_BIND];
	void *ptr[CDN_MAX_BIND];
	ck_assert_msg(!cdn_attn_list(&c, false, 0, l, err, sizeof err), "%s", err);
	cdn_arrays fa = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
	eval(l, cdn_attn_bind(&c, false, &fa, sc, uid, ptr), uid, ptr);
	for (int64_t i = 0; i < n; i++)
		ck_assert_uint_eq(o[i], v[i]);
	free(q), free(k), free(v), free(o), free(qf), free(kf), free(vf), free(l);
}
END_TEST

/* cuDNN's own finalize of every node and of the operation graph, at real
 * models' cores (Llama-3-8B, an MLA 192/128, Mistral's window, Gemma's
 * head dim 256, a micro-batch of 2), in both index forms. */
START_TEST(test_cudnn_finalizes_real_cores)
{
	const dev_attn_core real[] = {
	    {.mbs = 1, .seq = 4096, .nh = 32, .nkv = 8, .dqk = 128, .dv = 128, .scale = 0.0884f},
	    {.mbs = 1, .seq = 4096, .nh = 16, .nkv = 16, .dqk = 192, .dv = 128, .scale = 0.0722f},
	    {.mbs = 2, .seq = 4096, .nh = 32, .nkv = 8, .dqk = 128, .dv = 128, .win = 4096,
	     .scale = 0.0884f},
	    {.mbs = 1, .seq = 8192, .nh = 16, .nkv = 16, .dqk = 256, .dv = 256, .scale = 0.0625f},
	};
	for (size_t i = 0; i < sizeof real / sizeof *real; i++) {
		char err[768];
		int nodes = 0;
		int rc = cdn_attn_check_nodes(&real[i], &nodes, err, sizeof err);
		ck_assert_msg(!rc, "core %zu: %s", i, err);
		ck_assert_int_gt(nodes, 100);
	}
	/* and a core it must not take */
	dev_attn_core odd = real[0];
	odd.dqk = 100;
	char err[768];
	int nodes;
	ck_assert_int_eq(cdn_attn_check_nodes(&odd, &nodes, err, sizeof err), RT_EINVAL);
}
END_TEST

static Suite *cudnn_graph_suite(void)
{
	Suite *s = suite_create("cudnn_graph");
	TCase *tc = tcase_create("cudnn_graph");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_graphs_compute_attention);
	tcase_add_test(tc, test_window_edges);
	tcase_add_test(tc, test_cudnn_finalizes_real_cores);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return have_cudnn() ? tu_run(cudnn_graph_suite()) : 77;
}
