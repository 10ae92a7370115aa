/* rt_cudnn.c: the attention core through cuDNN's fused attention
 * (OCTO_ATTN=cudnn; docs/cuda.md, "The attention core through cuDNN").
 *
 *   library   libcudnn.so.9 opened at run time, the first time a rank asks
 *             for it: a rank that runs its own kernels needs no cuDNN
 *   graphs    per core (dev_attn_core), two operation graphs of the
 *             backend API (cudnn_graph.h): F = softmax(mask(s Q K^T)) V with
 *             the scores' log-sum-exp (Stats), B = dQ, dK, dV from Q, K, V,
 *             O, dO and Stats, as the pattern of matmul, pointwise and
 *             reduction nodes that cuDNN's fused flash-attention engines
 *             take (cuDNN 9.19 has no single masked SDPA operation).  The
 *             tensors are the layer's own arrays: Q, K, V, O, dO, dQ, dK, dV
 *             [b][s][h][d] rows (BSHD), Stats and D = rowsum(dO o O) f32
 *             [b][h][s] (the layer's lse and Dsum);
 *   mask      the causal one (key j visible to query i iff j <= i) from two
 *             index nodes, a comparison and a select of -inf; a window W
 *             adds a second one, j + W > i
 *   B         deterministic: dQ is written by the dS K product itself
 *             (FlashAttention's f32 dQ accumulator, summed in any order, is
 *             not in the graph), and an engine whose numerical notes say
 *             NONDETERMINISTIC is passed over, so a core gives the same
 *             bits every run and on every rank that runs it
 *   plans     heuristics (mode A, then the fallback mode), the first engine
 *             configuration that finalizes; made once per core at attn_lib (before the first
 *             step) with the workspace the largest plan needs, allocated
 *             then; a core no engine takes runs the kernels (not an error)
 *
 * The graphs are built and every node finalized without a device
 * (cdn_attn_check_nodes); the engines' support and the results need one. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include "rt_cudnn.h"

/* ---- the library ------------------------------------------------------------- */

typedef cudnnBackendDescriptor_t desc;

typedef struct cdn_lib {
	void *so;
	size_t (*version)(void);
	cudnnStatus_t (*create)(cudnnHandle_t *);
	cudnnStatus_t (*destroy)(cudnnHandle_t);
	cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
	const char *(*status)(cudnnStatus_t);
	void (*last)(char *, size_t);
	cudnnStatus_t (*bcreate)(cudnnBackendDescriptorType_t, desc *);
	cudnnStatus_t (*bdestroy)(desc);
	cudnnStatus_t (*bset)(desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
	                      const void *);
	cudnnStatus_t (*bget)(const desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
	                      int64_t, int64_t *, void *);
	cudnnStatus_t (*bfinal)(desc);
	cudnnStatus_t (*bexec)(cudnnHandle_t, desc, desc);
} cdn_lib;

static cdn_lib lib;

/* The library's entry points, once a process; RT_ENODEV with why in err
 * when it cannot be opened. */
static int lib_open(char *err, size_t errlen)
{
	if (lib.so)
		return RT_OK;
	void *so = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
	if (!so) {
		snprintf(err, errlen, "cuDNN (libcudnn.so.9) cannot be opened: %s", dlerror());
		return RT_ENODEV;
	}
	cdn_lib l = {.so = so};
	struct {
		const char *name;
		void **fn;
	} sym[] = {
	    {"cudnnGetVersion", (void **)&l.version},
	    {"cudnnCreate", (void **)&l.create},
	    {"cudnnDestroy", (void **)&l.destroy},
	    {"cudnnSetStream", (void **)&l.set_stream},
	    {"cudnnGetErrorString", (void **)&l.status},
	    {"cudnnGetLastErrorString", (void **)&l.last},
	    {"cudnnBackendCreateDescriptor", (void **)&l.bcreate},
	    {"cudnnBackendDestroyDescriptor", (void **)&l.bdestroy},
	    {"cudnnBackendSetAttribute", (void **)&l.bset},
	    {"cudnnBackendGetAttribute", (void **)&l.bget},
	    {"cudnnBackendFinalize", (void **)&l.bfinal},
	    {"cudnnBackendExecute", (void **)&l.bexec},
	};
	for (size_t i = 0; i < sizeof sym / sizeof *sym; i++)
		if (!(*sym[i].fn = dlsym(so, sym[i].name))) {
			snprintf(err, errlen, "cuDNN (libcudnn.so.9) has no %s: a cuDNN 9 is needed",
			         sym[i].name);
			dlclose(so);
			return RT_ENODEV;
		}
	size_t v = l.version();
	if (v < 91000 || v >= 100000) {
		snprintf(err, errlen, "cuDNN %zu.%zu.%zu found; the fused attention graphs need 9.10 or a "
		         "later 9", v / 10000, v / 100 % 100, v % 100);
		dlclose(so);
		return RT_ENODEV;
	}
	lib = l;
	return RT_OK;
}

/* ---- a graph under construction ------------------------------------------------- */

#define MAX_DESC 256
#define MAX_OPS 64

/* Every descriptor it creates (destroyed with it), its operations in
 * order, and its first failure: after one, every call does nothing, so a
 * graph is written as a straight list of nodes and checked once. */
typedef struct graph {
	desc own[MAX_DESC];
	int nown;
	desc ops[MAX_OPS];
	int nops;
	desc tdesc[CDN_MAX_TENSORS]; /* the list's tensors' descriptors */
	cdn_list list;               /* the graph as written (cdn_attn_list) */
	int64_t next_uid; /* the next virtual tensor's */
	int nodes;        /* descriptors finalized */
	int rc;
	char err[512];
} graph;

static void g_fail(graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void g_fail(graph *g, const char *fmt, ...)
{
	if (g->rc)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->err, sizeof g->err, fmt, ap);
	va_end(ap);
	g->rc = RT_EDEVICE;
}

/* A failed cuDNN call's message: the call, the node, the status, and
 * cuDNN's own last message. */
static void g_status(graph *g, cudnnStatus_t s, const char *call, const char *what)
{
	char last[256] = "";
	lib.last(last, sizeof last);
	g_fail(g, "cuDNN %s failed for %s: %s%s%s", call, what, lib.status(s), last[0] ? ": " : "",
	       last);
}

static desc g_new(graph *g, cudnnBackendDescriptorType_t t, const char *what)
{
	if (g->rc)
		return NULL;
	if (g->nown == MAX_DESC) {
		g_fail(g, "cuDNN graph for %s: more than %d descriptors", what, MAX_DESC);
		return NULL;
	}
	desc d = NULL;
	cudnnStatus_t s = lib.bcreate(t, &d);
	if (s != CUDNN_STATUS_SUCCESS) {
		g_status(g, s, "cudnnBackendCreateDescriptor", what);
		return NULL;
	}
	return g->own[g->nown++] = d;
}

static void g_set(graph *g, desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                  int64_t n, const void *v, const char *what)
{
	if (g->rc)
		return;
	cudnnStatus_t s = lib.bset(d, a, t, n, v);
	if (s != CUDNN_STATUS_SUCCESS) {
		char call[64];
		snprintf(call, sizeof call, "cudnnBackendSetAttribute (attribute %d)", (int)a);
		g_status(g, s, call, what);
	}
}

static desc g_fin(graph *g, desc d, const char *what)
{
	if (g->rc)
		return NULL;
	cudnnStatus_t s = lib.bfinal(d);
	if (s != CUDNN_STATUS_SUCCESS) {
		g_status(g, s, "cudnnBackendFinalize", what);
		return NULL;
	}
	g->nodes++;
	return d;
}

static void g_free(graph *g)
{
	for (int i = g->nown - 1; i >= 0; i--)
		lib.bdestroy(g->own[i]);
	g->nown = g->nops = 0;
}

/* The graph's tensors: four dimensions and their strides (elements). */
typedef struct shp {
	int64_t d[4], s[4];
} shp;

enum { T_VIRTUAL = 1, T_BY_VALUE = 2 };

/* The arrays the variant packs bind (Q, K, ..., by unique id), the
 * by-value scalars after them; virtual tensors are numbered from U_VIRT. */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_DSUM,
       U_SCALE, U_NEG, U_WIN, U_ONE, U_VIRT = 100 };

static desc g_tensor(graph *g, int64_t uid, cudnnDataType_t t, shp sh, int flags, const char *what)
{
	desc d = g_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
	int64_t align = 16;
	bool yes = true;
	g_set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, what);
	g_set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, sh.d, what);
	g_set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, sh.s, what);
	g_set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
	g_set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
	if (flags & T_VIRTUAL)
		g_set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
	if (flags & T_BY_VALUE)
		g_set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
	if (!g_fin(g, d, what))
		return NULL;
	cdn_list *l = &g->list;
	if (l->nt == CDN_MAX_TENSORS) {
		g_fail(g, "cuDNN graph: more than %d tensors at %s", CDN_MAX_TENSORS, what);
		return NULL;
	}
	cdn_tensor *ct = &l->t[l->nt];
	*ct = (cdn_tensor){.uid = uid, .type = (int)t, .virt = flags & T_VIRTUAL,
	                   .by_value = flags & T_BY_VALUE};
	memcpy(ct->dim, sh.d, sizeof ct->dim);
	memcpy(ct->str, sh.s, sizeof ct->str);
	g->tdesc[l->nt++] = d;
	return d;
}

/* The list's index of tensor d (-1 for none). */
static int g_idx(const graph *g, desc d)
{
	for (int i = 0; d && i < g->list.nt; i++)
		if (g->tdesc[i] == d)
			return i;
	return -1;
}

/* Operation op of the list: what it is and its tensors. */
static void g_note(graph *g, cdn_op op, int mode, desc x, desc b, desc t, desc y, int64_t axis)
{
	if (g->rc || g->list.nn == CDN_MAX_NODES)
		return;
	g->list.n[g->list.nn++] = (cdn_node){.op = op, .mode = mode, .x = g_idx(g, x),
	                                     .b = g_idx(g, b), .t = g_idx(g, t), .y = g_idx(g, y),
	                                     .axis = axis};
}

/* An intermediate: virtual, its own id. */
static desc g_virt(graph *g, cudnnDataType_t t, shp sh, const char *what)
{
	return g_tensor(g, g->next_uid++, t, sh, T_VIRTUAL, what);
}

/* A by-value f32 scalar (its value is the variant pack's host pointer). */
static desc g_scalar(graph *g, int64_t uid, const char *what)
{
	shp one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
	return g_tensor(g, uid, CUDNN_DATA_FLOAT, one, T_BY_VALUE, what);
}

static void g_op(graph *g, desc op, const char *what)
{
	if (!g_fin(g, op, what))
		return;
	if (g->nops == MAX_OPS)
		g_fail(g, "cuDNN graph: more than %d operations at %s", MAX_OPS, what);
	else
		g->ops[g->nops++] = op;
}

/* y = mode(x, b, t): b for two-operand modes, t for BINARY_SELECT (y = t ?
 * x : b); prec the arithmetic's type; axis for GEN_INDEX (else < 0). */
static void g_pw(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, desc x, desc b, desc t,
                 desc y, int64_t axis, const char *what)
{
	desc pw = g_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
	g_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
	g_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
	if (axis >= 0)
		g_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
	g_fin(g, pw, what);
	desc op = g_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
	      what);
	g_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
	if (b)
		g_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
		      what);
	if (t)
		g_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
		      what);
	g_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
	g_note(g, CDN_POINTWISE, (int)mode, x, b, t, y, axis);
	g_op(g, op, what);
}

/* c = a b over the last two dimensions (the leading ones broadcast: a kv
 * head serves its group of query heads), f32 arithmetic. */
static void g_mm(graph *g, desc a, desc b, desc c, const char *what)
{
	cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
	double pad = 0;
	desc mm = g_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
	g_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
	g_set(g, mm, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &pad, what);
	g_fin(g, mm, what);
	desc op = g_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what);
	g_note(g, CDN_MATMUL, 0, a, b, NULL, c, -1);
	g_op(g, op, what);
}

/* y = the max or sum of x over the dimensions where y has 1 (or fewer:
 * the query heads of a kv head's group), f32. */
static void g_red(graph *g, cudnnReduceTensorOp_t how, desc x, desc y, const char *what)
{
	cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
	bool det = false;
	desc r = g_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
	g_set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
	g_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, what);
	if (lib.version() >= 91100) /* the attribute's first release */
		g_set(g, r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det, what);
	g_fin(g, r, what);
	desc op = g_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
	g_note(g, CDN_REDUCTION, (int)how, x, NULL, NULL, y, -1);
	g_op(g, op, what);
}

/* y: x's elements under other dimensions and strides (a transpose). */
static void g_reshape(graph *g, desc x, desc y, const char *what)
{
	desc op = g_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
	g_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
	g_note(g, CDN_RESHAPE, 0, x, NULL, NULL, y, -1);
	g_op(g, op, what);
}

/* ---- the attention graphs ---------------------------------------------------- */

/* A [b][s][h][d] array (the layer's rows) as dimensions [b, h, s, d]. */
static shp bshd(const dev_attn_core *c, int64_t h, int64_t d)
{
	return (shp){{c->mbs, h, c->seq, d}, {c->seq * h * d, d, h * d, 1}};
}

/* Dimensions 2 and 3 swapped: the same memory read transposed. */
static shp swap23(shp x)
{
	return (shp){{x.d[0], x.d[1], x.d[3], x.d[2]}, {x.s[0], x.s[1], x.s[3], x.s[2]}};
}

/* Packed [b][h][r][c]. */
static shp packed(int64_t b, int64_t h, int64_t r, int64_t c)
{
	return (shp){{b, h, r, c}, {h * r * c, r * c, c, 1}};
}

/* The index nodes' form: the index as INT32 (the form cuDNN's own
 * front end writes today), or as f32 (an older one); prepare tries the
 * first, then the second, so a library that matches only one still runs. */
typedef struct form {
	bool idx_f32;
} form;

/* s masked: -inf where key j is hidden from query i (j > i, or with a
 * window j <= i - W).  neg, win: the by-value scalars. */
static desc g_mask(graph *g, const dev_attn_core *c, form f, desc s, desc neg, desc win)
{
	shp ss = packed(c->mbs, c->nh, c->seq, c->seq);
	cudnnDataType_t f32 = CUDNN_DATA_FLOAT, boo = CUDNN_DATA_BOOLEAN;
	cudnnDataType_t it = f.idx_f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_INT32;
	desc row = g_virt(g, it, ss, "the causal mask's row index");
	desc col = g_virt(g, it, ss, "the causal mask's column index");
	desc keep = g_virt(g, boo, ss, "the causal mask");
	desc out = g_virt(g, f32, ss, "the causally masked scores");
	g_pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, row, 2, "the causal mask's row index");
	g_pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, col, 3, "the causal mask's column index");
	g_pw(g, CUDNN_POINTWISE_CMP_GE, boo, row, col, NULL, keep, -1, "the causal mask (i >= j)");
	g_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg, keep, out, -1, "the causal mask's select");
	if (c->win <= 0)
		return out;
	desc s2 = out;
	row = g_virt(g, it, ss, "the window's row index");
	col = g_virt(g, it, ss, "the window's column index");
	desc colw = g_virt(g, f32, ss, "the window's column + W");
	keep = g_virt(g, boo, ss, "the window");
	out = g_virt(g, f32, ss, "the window's masked scores");
	g_pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, s2, NULL, NULL, row, 2, "the window's row index");
	g_pw(g, CUDNN_POINTWISE_GEN_INDEX, f32, s2, NULL, NULL, col, 3, "the window's column index");
	g_pw(g, CUDNN_POINTWISE_ADD, f32, col, win, NULL, colw, -1, "the window's column + W");
	g_pw(g, CUDNN_POINTWISE_CMP_GT, boo, colw, row, NULL, keep, -1, "the window (j + W > i)");
	g_pw(g, CUDNN_POINTWISE_BINARY_SELECT, f32, s2, neg, keep, out, -1, "the window's select");
	return out;
}

/* F: O = softmax(mask(scale Q K^T)) V, Stats = the masked scores' log-sum-exp. */
static void fwd_graph(graph *g, const dev_attn_core *c, form f)
{
	cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
	shp ss = packed(c->mbs, c->nh, c->seq, c->seq), rs = packed(c->mbs, c->nh, c->seq, 1);
	g->next_uid = U_VIRT;
	desc q = g_tensor(g, U_Q, bf, bshd(c, c->nh, c->dqk), 0, "Q");
	desc kt = g_tensor(g, U_K, bf, swap23(bshd(c, c->nkv, c->dqk)), 0, "K^T");
	desc v = g_tensor(g, U_V, bf, bshd(c, c->nkv, c->dv), 0, "V");
	desc o = g_tensor(g, U_O, bf, bshd(c, c->nh, c->dv), 0, "O");
	desc st = g_tensor(g, U_STATS, f32, rs, 0, "Stats");
	desc scale = g_scalar(g, U_SCALE, "the scale");
	desc neg = g_scalar(g, U_NEG, "-inf");
	desc win = c->win > 0 ? g_scalar(g, U_WIN, "the window") : NULL;

	desc s0 = g_virt(g, f32, ss, "Q K^T");
	g_mm(g, q, kt, s0, "Q K^T");
	desc s1 = g_virt(g, f32, ss, "the scaled scores");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, s0, scale, NULL, s1, -1, "the scaled scores");
	desc s = g_mask(g, c, f, s1, neg, win);
	desc m = g_virt(g, f32, rs, "the rows' max");
	desc z = g_virt(g, f32, ss, "the scores less the max");
	desc e = g_virt(g, f32, ss, "the exponentials");
	desc l = g_virt(g, f32, rs, "the rows' sums");
	desc ll = g_virt(g, f32, rs, "the sums' log");
	desc p = g_virt(g, bf, ss, "the probabilities");
	g_red(g, CUDNN_REDUCE_TENSOR_MAX, s, m, "the rows' max");
	g_pw(g, CUDNN_POINTWISE_SUB, f32, s, m, NULL, z, -1, "the scores less the max");
	g_pw(g, CUDNN_POINTWISE_EXP, f32, z, NULL, NULL, e, -1, "the exponentials");
	g_red(g, CUDNN_REDUCE_TENSOR_ADD, e, l, "the rows' sums");
	g_pw(g, CUDNN_POINTWISE_LOG, f32, l, NULL, NULL, ll, -1, "the sums' log");
	g_pw(g, CUDNN_POINTWISE_ADD, f32, m, ll, NULL, st, -1, "Stats");
	g_pw(g, CUDNN_POINTWISE_DIV, f32, e, l, NULL, p, -1, "the probabilities");
	g_mm(g, p, v, o, "P V");
}

/* A gradient of K or V: the product c = a b per query head, summed over
 * each kv head's group of query heads when there are fewer kv heads. */
static void g_kv_grad(graph *g, const dev_attn_core *c, desc a, desc b, desc out, int64_t d,
                      const char *what)
{
	if (c->nh == c->nkv) {
		g_mm(g, a, b, out, what);
		return;
	}
	desc per = g_virt(g, CUDNN_DATA_BFLOAT16, packed(c->mbs, c->nh, c->seq, d), what);
	g_mm(g, a, b, per, what);
	g_red(g, CUDNN_REDUCE_TENSOR_ADD, per, out, what);
}

/* B: dQ, dK, dV (FlashAttention-2's backward); D = rowsum(dO o O) into
 * the layer's Dsum. */
static void bwd_graph(graph *g, const dev_attn_core *c, form f)
{
	cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
	shp ss = packed(c->mbs, c->nh, c->seq, c->seq), rs = packed(c->mbs, c->nh, c->seq, 1);
	shp tr = swap23(ss); /* [b, h, key, query] over the scores' memory */
	g->next_uid = U_VIRT;
	shp ks = bshd(c, c->nkv, c->dqk);
	desc q = g_tensor(g, U_Q, bf, bshd(c, c->nh, c->dqk), 0, "Q");
	desc kt = g_tensor(g, U_K, bf, swap23(ks), 0, "K^T");
	desc vt = g_tensor(g, U_V, bf, swap23(bshd(c, c->nkv, c->dv)), 0, "V^T");
	desc o = g_tensor(g, U_O, bf, bshd(c, c->nh, c->dv), 0, "O");
	desc dout = g_tensor(g, U_DO, bf, bshd(c, c->nh, c->dv), 0, "dO");
	desc st = g_tensor(g, U_STATS, f32, rs, 0, "Stats");
	desc dq = g_tensor(g, U_DQ, bf, bshd(c, c->nh, c->dqk), 0, "dQ");
	desc dk = g_tensor(g, U_DK, bf, ks, 0, "dK");
	desc dv = g_tensor(g, U_DV, bf, bshd(c, c->nkv, c->dv), 0, "dV");
	desc dsum = g_tensor(g, U_DSUM, f32, rs, 0, "D = rowsum(dO o O)");
	desc scale = g_scalar(g, U_SCALE, "the scale");
	desc neg = g_scalar(g, U_NEG, "-inf");
	desc one = g_scalar(g, U_ONE, "one");
	desc win = c->win > 0 ? g_scalar(g, U_WIN, "the window") : NULL;

	desc t0 = g_virt(g, f32, packed(c->mbs, c->nh, c->seq, c->dv), "dO o O");
	desc t1 = g_virt(g, f32, rs, "rowsum(dO o O)");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, t0, -1, "dO o O");
	g_red(g, CUDNN_REDUCE_TENSOR_ADD, t0, t1, "rowsum(dO o O)");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, t1, one, NULL, dsum, -1, "D");

	desc s0 = g_virt(g, f32, ss, "Q K^T");
	desc s1 = g_virt(g, f32, ss, "the scaled scores");
	desc s2 = g_virt(g, f32, ss, "the scores less Stats");
	g_mm(g, q, kt, s0, "Q K^T");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, s0, scale, NULL, s1, -1, "the scaled scores");
	g_pw(g, CUDNN_POINTWISE_SUB, f32, s1, st, NULL, s2, -1, "the scores less Stats");
	desc s3 = g_mask(g, c, f, s2, neg, win);
	desc p = g_virt(g, f32, ss, "P");
	desc pt = g_virt(g, bf, tr, "P^T");
	g_pw(g, CUDNN_POINTWISE_EXP, f32, s3, NULL, NULL, p, -1, "P");
	g_reshape(g, p, pt, "P^T");
	g_kv_grad(g, c, pt, dout, dv, c->dv, "dV = P^T dO");

	desc dp = g_virt(g, f32, ss, "dP = dO V^T");
	desc u = g_virt(g, f32, ss, "dP - D");
	desc u2 = g_virt(g, f32, ss, "P o (dP - D)");
	desc ds = g_virt(g, f32, ss, "dS");
	desc dst = g_virt(g, bf, tr, "dS^T");
	g_mm(g, dout, vt, dp, "dP = dO V^T");
	g_pw(g, CUDNN_POINTWISE_SUB, f32, dp, dsum, NULL, u, -1, "dP - D");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, u, p, NULL, u2, -1, "P o (dP - D)");
	g_pw(g, CUDNN_POINTWISE_MUL, f32, u2, scale, NULL, ds, -1, "dS");
	g_reshape(g, ds, dst, "dS^T");
	g_kv_grad(g, c, dst, q, dk, c->dqk, "dK = dS^T Q");

	desc kr = g_virt(g, f32, ks, "K");
	g_reshape(g, kt, kr, "K");
	g_mm(g, ds, kr, dq, "dQ = dS K");
}

/* ---- plans -------------------------------------------------------------------- */

/* Whether engine configuration cfg's engine says it is nondeterministic. */
static bool nondeterministic(graph *g, desc cfg)
{
	desc eng = g_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "an engine");
	if (g->rc)
		return true;
	int64_t n = 0;
	if (lib.bget(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) !=
	        CUDNN_STATUS_SUCCESS ||
	    n != 1)
		return true;
	cudnnBackendNumericalNote_t note[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	if (lib.bget(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
	             CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, note) != CUDNN_STATUS_SUCCESS)
		return true;
	for (int64_t i = 0; i < n; i++)
		if (note[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
			return true;
	return false;
}

/* The first configuration of heuristics mode `mode`'s list for operation
 * graph og that finalizes into a plan (passing over nondeterministic
 * engines when det), with its workspace bytes; NULL when none does, with
 * the counts in *got, *skipped, *refused and the last refusal's message in
 * last. */
static desc first_plan(graph *g, desc og, cudnnBackendHeurMode_t mode, bool det, int64_t *ws,
                       int *got, int *skipped, int *refused, char last[256])
{
	desc heur = g_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics");
	g_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
	      "the heuristics");
	g_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristics");
	if (g->rc)
		return NULL;
	if (lib.bfinal(heur) != CUDNN_STATUS_SUCCESS) { /* a mode with nothing for this graph */
		lib.last(last, 256);
		return NULL;
	}
	int64_t n = 0;
	if (lib.bget(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL) !=
	    CUDNN_STATUS_SUCCESS)
		return NULL;
	desc cfg[32];
	n = n < 32 ? n : 32;
	for (int64_t i = 0; i < n; i++)
		cfg[i] = g_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine configuration");
	int64_t m = 0;
	if (g->rc || !n ||
	    lib.bget(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &m, cfg) !=
	        CUDNN_STATUS_SUCCESS)
		return NULL;
	*got += (int)m;
	for (int64_t i = 0; i < m; i++) {
		if (det && nondeterministic(g, cfg[i])) {
			(*skipped)++;
			continue;
		}
		desc pl = g_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "an execution plan");
		g_set(g, pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		      &cfg[i], "an execution plan");
		if (g->rc)
			return NULL;
		if (lib.bfinal(pl) != CUDNN_STATUS_SUCCESS) {
			(*refused)++;
			lib.last(last, 256);
			continue;
		}
		int64_t k = 0;
		if (lib.bget(pl, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, ws) !=
		    CUDNN_STATUS_SUCCESS) {
			g_fail(g, "cuDNN's plan gave no workspace size");
			return NULL;
		}
		return pl;
	}
	return NULL;
}

/* The operation graph of g's operations (without a handle, that is all:
 * no device), then the first plan of heuristics mode A, else of the
 * fallback mode, and its workspace bytes.  *plan NULL: no engine takes the
 * graph (why in g->err, g->rc still RT_OK). */
static void g_plan(graph *g, cudnnHandle_t h, bool det, desc *plan, int64_t *ws)
{
	*ws = 0;
	*plan = NULL;
	desc og = g_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
	g_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
	      "the operation graph");
	g_fin(g, og, "the operation graph");
	if (!h || g->rc)
		return;
	static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
	int got = 0, skipped = 0, refused = 0;
	char last[256] = "";
	for (int i = 0; i < 2 && !*plan && !g->rc; i++)
		*plan = first_plan(g, og, modes[i], det, ws, &got, &skipped, &refused, last);
	if (!*plan && !g->rc)
		snprintf(g->err, sizeof g->err, "no cuDNN engine takes it (%d configurations: %d "
		         "nondeterministic, %d refused%s%s)", got, skipped, refused,
		         last[0] ? "; cuDNN's last message: " : "", last);
}

/* ---- the cores ---------------------------------------------------------------- */

typedef struct core {
	dev_attn_core c;
	bool use;
	graph f, b; /* their descriptors, plans included, live with the core */
	desc pf, pb;
	int64_t ws; /* the workspace bytes the larger of the two plans needs */
} core;

struct cdn_attn {
	cudnnHandle_t h;
	int rank;
	core *cores;
	int ncores;
	void *ws; /* the plans' workspace, the largest one's bytes */
	int64_t wsb;
};

static bool same_core(const dev_attn_core *a, const dev_attn_core *b)
{
	return a->mbs == b->mbs && a->seq == b->seq && a->nh == b->nh && a->nkv == b->nkv &&
	       a->dqk == b->dqk && a->dv == b->dv && a->win == b->win && a->scale == b->scale;
}

int cdn_attn_open(cdn_attn **out, void *stream, int rank, char *err, size_t errlen)
{
	*out = NULL;
	int rc = lib_open(err, errlen);
	if (rc)
		return rc;
	cdn_attn *a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, errlen, "out of host memory");
		return RT_ENOMEM;
	}
	a->rank = rank;
	cudnnStatus_t s = lib.create(&a->h);
	if (s == CUDNN_STATUS_SUCCESS)
		s = lib.set_stream(a->h, (cudaStream_t)stream);
	if (s != CUDNN_STATUS_SUCCESS) {
		char last[256] = "";
		lib.last(last, sizeof last);
		snprintf(err, errlen, "cuDNN setup failed: %s%s%s", lib.status(s), last[0] ? ": " : "",
		         last);
		cdn_attn_close(a);
		return RT_EDEVICE;
	}
	*out = a;
	return RT_OK;
}

void cdn_attn_close(cdn_attn *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->ncores; i++) {
		g_free(&a->cores[i].f);
		g_free(&a->cores[i].b);
	}
	free(a->cores);
	if (a->ws)
		cudaFree(a->ws);
	if (a->h)
		lib.destroy(a->h);
	free(a);
}

/* Why cuDNN cannot take c at all, before any graph: NULL if it may. */
static const char *unfit(const dev_attn_core *c)
{
	if (c->dqk % 8 || c->dv % 8)
		return "its head dims are not multiples of 8";
	if (c->dqk > 256 || c->dv > 256)
		return "a head dim is over 256";
	if (c->nh % c->nkv)
		return "its query heads are not a multiple of its kv heads";
	if (c->seq < 2)
		return "its sequence is shorter than 2";
	return NULL;
}

/* Both graphs of c in form f, with plans when h is given (see g_plan). */
static void build(cudnnHandle_t h, core *k, form f)
{
	g_free(&k->f);
	g_free(&k->b);
	memset(&k->f, 0, sizeof k->f);
	memset(&k->b, 0, sizeof k->b);
	int64_t wf = 0, wb = 0;
	fwd_graph(&k->f, &k->c, f);
	g_plan(&k->f, h, false, &k->pf, &wf);
	if (k->f.rc || (h && !k->pf))
		return;
	bwd_graph(&k->b, &k->c, f);
	g_plan(&k->b, h, true, &k->pb, &wb);
	k->ws = wf > wb ? wf : wb;
}

int cdn_attn_prepare(cdn_attn *a, const dev_attn_core *c, bool *use, char *why, size_t whylen,
                     char *err, size_t errlen)
{
	*use = false;
	why[0] = 0;
	for (int i = 0; i < a->ncores; i++)
		if (same_core(&a->cores[i].c, c)) {
			*use = a->cores[i].use;
			return RT_OK;
		}
	core *nc = realloc(a->cores, (size_t)(a->ncores + 1) * sizeof *nc);
	if (!nc) {
		snprintf(err, errlen, "out of host memory (rank %d)", a->rank);
		return RT_ENOMEM;
	}
	a->cores = nc;
	core *k = &a->cores[a->ncores++];
	*k = (core){.c = *c};
	const char *no = unfit(c);
	if (no) {
		snprintf(why, whylen, "%s", no);
		return RT_OK;
	}
	static const form forms[2] = {{false}, {true}};
	char first[512] = "";
	/* A graph this library will not build (a call refused: another cuDNN
	 * 9 than the one written for) is declined as one no engine takes. */
	for (int i = 0; i < 2 && !k->pb; i++) {
		build(a->h, k, forms[i]);
		graph *g = k->f.rc || !k->pf ? &k->f : &k->b;
		if (!k->pb && !first[0])
			snprintf(first, sizeof first, "%s: %.480s", g == &k->f ? "F" : "B", g->err);
	}
	if (!k->pb) {
		snprintf(why, whylen, "%s", first);
		g_free(&k->f);
		g_free(&k->b);
		return RT_OK;
	}
	int64_t need = k->ws;
	if (need > a->wsb) {
		if (a->ws)
			cudaFree(a->ws);
		a->ws = NULL;
		a->wsb = 0;
		cudaError_t e = cudaMalloc(&a->ws, (size_t)need);
		if (e != cudaSuccess) {
			snprintf(err, errlen, "cudaMalloc of cuDNN attention's workspace (%lld bytes) failed: "
			         "%s (rank %d)", (long long)need, cudaGetErrorString(e), a->rank);
			return RT_ENOMEM;
		}
		a->wsb = need;
	}
	k->use = *use = true;
	snprintf(why, whylen, "workspace %.1f MiB", (double)need / (1 << 20));
	return RT_OK;
}

static core *find(cdn_attn *a, const dev_attn_core *c)
{
	for (int i = 0; i < a->ncores; i++)
		if (a->cores[i].use && same_core(&a->cores[i].c, c))
			return &a->cores[i];
	return NULL;
}

/* plan on the arrays uid[i] -> ptr[i]: a variant pack made, run and
 * freed (its pointers are the call's). */
static int run(cdn_attn *a, desc plan, int n, const int64_t *uid, void *const *ptr, const char *what,
               char *err, size_t errlen)
{
	desc vp = NULL;
	const char *call = NULL;
	cudnnStatus_t s, ok = CUDNN_STATUS_SUCCESS;
	if ((s = lib.bcreate(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) != ok)
		call = "cudnnBackendCreateDescriptor";
	else if ((s = lib.bset(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid)) != ok ||
	         (s = lib.bset(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
	                       ptr)) != ok ||
	         (s = lib.bset(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
	                       &a->ws)) != ok)
		call = "cudnnBackendSetAttribute";
	else if ((s = lib.bfinal(vp)) != ok)
		call = "cudnnBackendFinalize";
	else if ((s = lib.bexec(a->h, plan, vp)) != ok)
		call = "cudnnBackendExecute";
	if (call) {
		char last[256] = "";
		lib.last(last, sizeof last);
		snprintf(err, errlen, "cuDNN %s failed for %s: %s%s%s (rank %d)", call, what,
		         lib.status(s), last[0] ? ": " : "", last, a->rank);
	}
	if (vp)
		lib.bdestroy(vp);
	return call ? RT_EDEVICE : RT_OK;
}

int cdn_attn_bind(const dev_attn_core *c, bool bwd, const cdn_arrays *a, float sc[4],
                  int64_t uid[CDN_MAX_BIND], void *ptr[CDN_MAX_BIND])
{
	sc[0] = c->scale, sc[1] = -INFINITY, sc[2] = 1, sc[3] = (float)c->win;
	int n = 0;
#define B(u, p) (uid[n] = (u), ptr[n++] = (void *)(p))
	B(U_Q, a->q), B(U_K, a->k), B(U_V, a->v);
	if (bwd) {
		B(U_O, a->o), B(U_DO, a->dout), B(U_STATS, a->lse), B(U_DQ, a->dq), B(U_DK, a->dk);
		B(U_DV, a->dv), B(U_DSUM, a->dsum), B(U_ONE, &sc[2]);
	} else {
		B(U_O, a->o_out), B(U_STATS, a->lse_out);
	}
	B(U_SCALE, &sc[0]), B(U_NEG, &sc[1]);
	if (c->win > 0)
		B(U_WIN, &sc[3]);
#undef B
	return n;
}

/* core c's F or B on the arrays a. */
static int call(cdn_attn *a, const dev_attn_core *c, bool bwd, const cdn_arrays *arr, char *err,
                size_t errlen)
{
	core *kc = find(a, c);
	if (!kc) {
		snprintf(err, errlen, "cuDNN attention: a core that was not prepared (rank %d)", a->rank);
		return RT_ESTATE;
	}
	float sc[4];
	int64_t uid[CDN_MAX_BIND];
	void *ptr[CDN_MAX_BIND];
	int n = cdn_attn_bind(c, bwd, arr, sc, uid, ptr);
	return run(a, bwd ? kc->pb : kc->pf, n, uid, ptr,
	           bwd ? "the attention core's B" : "the attention core's F", err, errlen);
}

int cdn_attn_fwd(cdn_attn *a, const dev_attn_core *c, const void *q, const void *k, const void *v,
                 void *o, float *lse, char *err, size_t errlen)
{
	cdn_arrays arr = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
	return call(a, c, false, &arr, err, errlen);
}

int cdn_attn_bwd(cdn_attn *a, const dev_attn_core *c, const void *q, const void *k, const void *v,
                 const void *o, const void *dout, const float *lse, float *dsum, void *dq, void *dk,
                 void *dv, char *err, size_t errlen)
{
	cdn_arrays arr = {.q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse, .dsum = dsum,
	                  .dq = dq, .dk = dk, .dv = dv};
	return call(a, c, true, &arr, err, errlen);
}

int cdn_attn_check_nodes(const dev_attn_core *c, int *nodes, char *err, size_t errlen)
{
	*nodes = 0;
	int rc = lib_open(err, errlen);
	if (rc)
		return rc;
	const char *no = unfit(c);
	if (no) {
		snprintf(err, errlen, "cuDNN does not take this core: %s", no);
		return RT_EINVAL;
	}
	static const form forms[2] = {{false}, {true}};
	for (int i = 0; i < 2; i++) {
		core k = {.c = *c};
		build(NULL, &k, forms[i]);
		rc = k.f.rc ? k.f.rc : k.b.rc;
		if (rc)
			snprintf(err, errlen, "%s graph, index form %d: %s", k.f.rc ? "F" : "B", i,
			         k.f.rc ? k.f.err : k.b.err);
		*nodes += k.f.nodes + k.b.nodes;
		g_free(&k.f);
		g_free(&k.b);
		if (rc)
			return rc;
	}
	return RT_OK;
}

int cdn_attn_list(const dev_attn_core *c, bool bwd, int idx_form, cdn_list *out, char *err,
                  size_t errlen)
{
	int rc = lib_open(err, errlen);
	if (rc)
		return rc;
	graph *g = calloc(1, sizeof *g);
	if (!g) {
		snprintf(err, errlen, "out of host memory");
		return RT_ENOMEM;
	}
	form f = {idx_form != 0};
	if (bwd)
		bwd_graph(g, c, f);
	else
		fwd_graph(g, c, f);
	if (g->list.nn != g->nops && !g->rc)
		g_fail(g, "cuDNN graph: more than %d operations", CDN_MAX_NODES);
	rc = g->rc;
	if (rc)
		snprintf(err, errlen, "%s", g->err);
	else
		*out = g->list;
	g_free(g);
	free(g);
	return rc;
}
