/* rt_cudnn.h: the attention core through cuDNN's fused attention
 * (rt_cudnn.c; docs/cuda.md, "The attention core through cuDNN").  Private
 * to libocto_rt_cuda and its tests. */
#ifndef OCTO_RT_CUDNN_H
#define OCTO_RT_CUDNN_H

#include <stdbool.h>
#include <stddef.h>

#include "dev.h"

typedef struct cdn_attn cdn_attn;

/* libcudnn opened (once a process, at run time: a rank that does not ask
 * for it needs none), a handle on `stream` (a cudaStream_t) of the current
 * device; rank names the messages.  RT_OK, or a code with err set. */
int cdn_attn_open(cdn_attn **out, void *stream, int rank, char *err, size_t errlen);
void cdn_attn_close(cdn_attn *a);

/* Whether cuDNN takes core c in bf16 (*use): the forward and the
 * deterministic backward graphs built, each with an execution plan, once a
 * core, and the workspace the plans need allocated.  A core no engine
 * takes, or whose graphs this cuDNN refuses to build, is not an error
 * (*use false).  why: for a core not seen before, the
 * workspace or the reason cuDNN declines it; for one seen before, "".
 * RT_OK, or RT_ENOMEM (the workspace) with err set. */
int cdn_attn_prepare(cdn_attn *a, const dev_attn_core *c, bool *use, char *why, size_t whylen,
                     char *err, size_t errlen);

/* A prepared core's F and B, on the handle's stream. */
int cdn_attn_fwd(cdn_attn *a, const dev_attn_core *c, const void *q, const void *k, const void *v,
                 void *o, float *lse, char *err, size_t errlen);
int cdn_attn_bwd(cdn_attn *a, const dev_attn_core *c, const void *q, const void *k, const void *v,
                 const void *o, const void *dout, const float *lse, float *dsum, void *dq, void *dk,
                 void *dv, char *err, size_t errlen);

/* Without a device: the library opened, and every node of both graphs of
 * core c, in both index forms, built and finalized (tensors, operations,
 * the operation graph; *nodes counts them), which checks the attributes'
 * types and the operands' shapes as cuDNN sees them; not the engines'
 * support, which needs the device.  RT_OK, or RT_EDEVICE with the failing
 * node and cuDNN's message in err (RT_ENODEV: no libcudnn; RT_EINVAL: a
 * core cuDNN cannot take at all, such as a head dim not a multiple of 8). */
int cdn_attn_check_nodes(const dev_attn_core *c, int *nodes, char *err, size_t errlen);

/* One of core c's graphs as built for cuDNN, as a list (for a test that
 * evaluates it, tests/cuda/test_cudnn_graph.c): its tensors (type: a
 * cudnnDataType_t) and its operations in order (mode: the pointwise mode or
 * the reduction's operator; x, b, t, y: tensor indices, -1 for none). */
typedef enum cdn_op { CDN_MATMUL, CDN_POINTWISE, CDN_REDUCTION, CDN_RESHAPE } cdn_op;
typedef struct cdn_tensor {
	int64_t uid, dim[4], str[4];
	int type;
	bool virt, by_value;
} cdn_tensor;
typedef struct cdn_node {
	cdn_op op;
	int mode;
	int x, b, t, y;
	int64_t axis;
} cdn_node;
#define CDN_MAX_TENSORS 96
#define CDN_MAX_NODES 64
typedef struct cdn_list {
	cdn_tensor t[CDN_MAX_TENSORS];
	int nt;
	cdn_node n[CDN_MAX_NODES];
	int nn;
} cdn_list;
/* The arrays of a call, by their part in it (F: q, k, v in, o, lse
 * out; B: q, k, v, o, dout, lse in, dsum, dq, dk, dv out). */
typedef struct cdn_arrays {
	const void *q, *k, *v, *o, *dout;
	const float *lse;
	float *dsum, *lse_out;
	void *o_out, *dq, *dk, *dv;
} cdn_arrays;
/* The variant pack of a call of c's F (or B with bwd): each tensor the
 * graph binds, uid[i] to ptr[i]; the by-value scalars point into sc,
 * which must live through the call.  Returns their count. */
#define CDN_MAX_BIND 16
int cdn_attn_bind(const dev_attn_core *c, bool bwd, const cdn_arrays *a, float sc[4],
                  int64_t uid[CDN_MAX_BIND], void *ptr[CDN_MAX_BIND]);

/* bwd: B's graph, else F's; idx_form: the index nodes' (0: INT32, 1: f32).
 * RT_OK, or a code with err set (RT_ENODEV: no libcudnn). */
int cdn_attn_list(const dev_attn_core *c, bool bwd, int idx_form, cdn_list *out, char *err,
                  size_t errlen);

#endif
