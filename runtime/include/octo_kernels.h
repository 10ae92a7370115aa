/* octo_kernels.h: the CPU layer kernels of libocto_rt.
 *
 * Each layer kind has three entry points, called per micro-batch:
 *   F  forward: input activations -> output activations, filling the
 *      activation stash the layer's B reads;
 *   B  input-gradient backward: output gradient -> input gradient, reading
 *      the activation stash and filling the W stash;
 *   W  weight-gradient backward: reads only the W stash (and the
 *      parameters) and ADDS (+=) the layer's weight gradients.
 * B then W is exactly the full backward.  B never reads what W writes and
 * W never reads the activation stash, so the stash can be freed after B.
 *
 * The caller owns every buffer: parameters, gradients (same layout as the
 * parameters), both stashes and one scratch buffer, sized by
 * rt_layer_sizes().  Kernels never allocate.  Buffers must be aligned to 16
 * bytes.  Results are bitwise reproducible: every reduction runs in a fixed
 * order, and BLAS is called with fixed shapes (run OpenBLAS with a fixed
 * thread count; the tests use one thread).  Gradients accumulated over
 * micro-batches depend on the order of the W calls, as floating-point sums
 * do; run W in micro-batch order for bitwise equal gradients across plans.
 *
 * The math of every layer, the parameter layout, the stash contents and the
 * init are specified in docs/layers.md.  Every call returns an RT_ code;
 * none calls exit(). */
#ifndef OCTO_KERNELS_H
#define OCTO_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes.  0 is success; failures are negative.  One table for the
 * codes and rt_strerror's messages: X(name, value, message). */
#define RT_CODES(X)                                                                       \
	X(RT_OK, 0, "success")                                                            \
	X(RT_EINVAL, -1, "invalid layer descriptor")                                      \
	X(RT_ENOMEM, -2, "out of memory")                                                 \
	X(RT_EARG, -3, "invalid argument (NULL or misaligned buffer, or bad index)")      \
	X(RT_ERANGE, -4, "token id outside the vocabulary")                               \
	/* the rest of libocto_rt (octo_rt.h) */                                          \
	X(RT_EMPI, -5, "MPI call failed")                                                 \
	X(RT_ETIMEOUT, -6, "timed out waiting for a peer") /* stuck or dead */            \
	X(RT_EIO, -7, "I/O error") /* a file could not be read or written */              \
	X(RT_ECKPT, -8, "bad checkpoint") /* damaged, or of another model */              \
	X(RT_ELOSS, -9, "loss is not finite")                                             \
	X(RT_ESTATE, -10, "call out of order") /* no arena, W out of micro-batch order */ \
	X(RT_ENODEV, -11, "no CUDA device") /* or no driver */                            \
	X(RT_EDEVICE, -12, "a device call failed") /* CUDA, cuBLAS, NCCL, the emulator */

enum rt_code {
#define RT_CODE_ENUM(name, value, message) name = value,
	RT_CODES(RT_CODE_ENUM)
#undef RT_CODE_ENUM
};

/* A static English message for an RT_ code. */
const char *rt_strerror(int code);

/* Layer kinds and feed-forward activations, in the order of ir.h's tables
 * (IR_LAYER_KINDS, IR_ACTS), so a generated program may pass them through. */
#define RT_KINDS(X)               \
	X(RT_EMBEDDING, "embedding") \
	X(RT_ATTENTION, "attention") \
	X(RT_MLP, "mlp")             \
	X(RT_MOE, "moe")             \
	X(RT_MAMBA, "mamba")         \
	X(RT_HEAD, "head")           \
	X(RT_PARALLEL, "parallel")
/* X(kind, the name the YAML spells and the device's entry points begin with) */
typedef enum rt_kind {
#define RT_KIND_ENUM(kind, name) kind,
	RT_KINDS(RT_KIND_ENUM)
#undef RT_KIND_ENUM
	RT_NKINDS
} rt_kind;

typedef enum rt_act { RT_SWIGLU, RT_GEGLU, RT_GELU, RT_RELU, RT_RELU2, RT_NACTS } rt_act;

/* RoPE scaling types, in the order of ir.h's IR_ROPE_SCALINGS. */
typedef enum rt_rope_type { RT_ROPE_NONE, RT_ROPE_LINEAR, RT_ROPE_LLAMA3, RT_ROPE_YARN, RT_NROPES } rt_rope_type;

/* One layer and the micro-batch shape it runs on.  Attribute fields mean
 * what the ir.h attribute of the same name means; 0 is "absent", as there,
 * except where a default is noted.  Fields that do not apply to the kind
 * are ignored. */
typedef struct rt_layer_desc {
	rt_kind kind;
	int64_t hidden;
	int64_t seq;   /* tokens per sequence */
	int64_t mbs;   /* sequences per micro-batch */
	int64_t vocab; /* embedding, head */
	/* embedding, head: 1 when the model ties them (tie_embeddings): the
	 * head's weight is then `table [V][H]`, the embedding's table, which it
	 * is initialised as (layer 0's, docs/layers.md), instead of `w [H][V]`;
	 * the embedding's kernels do not change (the runtime sums the two
	 * copies' gradients).  0 or 1. */
	int64_t tied;

	/* attention (and mamba version 2: heads, head_dim); a parallel layer's
	 * attention reads these, its Mamba-2 mixer the mamba fields with
	 * ssm_heads and ssm_head_dim for heads and head_dim */
	int64_t heads;
	int64_t kv_heads;     /* 0: heads */
	int64_t head_dim;     /* 0: hidden / heads */
	int64_t window;       /* 0: global causal attention */
	int64_t q_lora_rank;  /* MLA */
	int64_t kv_lora_rank; /* non-zero: MLA */
	int64_t qk_rope_dim;  /* MLA, required with kv_lora_rank */
	int64_t v_head_dim;   /* MLA; 0: head_dim */
	double rope_theta;    /* the RoPE base; 0: 10000 */
	int64_t qkv_bias;     /* 1: biases on q, k, v (GQA only); 0 or 1 */
	int64_t qk_norm;      /* 1: RMSNorm per head on q and k before RoPE (GQA only); 0 or 1 */
	/* RoPE scaling (docs/layers.md, "RoPE scaling"): an rt_rope_type, and
	 * its fields (ir.h's rope_scaling.<field>); a field the type does not
	 * read must be 0. */
	int64_t rope_scaling;         /* rt_rope_type; 0: none */
	double rope_factor;           /* >= 1; linear, llama3, yarn */
	double rope_low_freq_factor;  /* llama3, > 0 */
	double rope_high_freq_factor; /* llama3, > rope_low_freq_factor */
	int64_t rope_original_max;    /* llama3, yarn: original_max_position_embeddings, 1 .. 2^30 */
	double rope_beta_fast;        /* yarn; 0: 32 */
	double rope_beta_slow;        /* yarn; 0: 1; below beta_fast */
	double rope_attention_factor; /* yarn; 0: from the factor (and the mscales) */
	double rope_mscale;           /* yarn; 0: absent; needs rope_mscale_all_dim */
	double rope_mscale_all_dim;   /* yarn; 0: absent */

	/* mlp, moe */
	int64_t ffn;
	rt_act act;
	int64_t experts;
	int64_t top_k;
	int64_t expert_ffn;
	int64_t shared_experts;
	int64_t shared_gate;    /* 1: the shared experts' output times sigmoid(u . shared.gate)
	                         * (Qwen2-MoE); needs shared_experts; 0 or 1 */

	/* mamba */
	int64_t version; /* 1 or 2; 0: 2 */
	int64_t state;
	int64_t expand;  /* 0: 2 */
	int64_t conv;    /* 0: 4 */
	int64_t groups;  /* version 2; 0: 1 */
	int64_t dt_rank; /* version 1; 0: ceil(hidden / 16) */
	int64_t ssm_heads;    /* parallel: the mixer's heads, as mamba's heads */
	int64_t ssm_head_dim; /* parallel: the mixer's head_dim, as mamba's head_dim */
	/* 1: the layer is in a stage with recompute=selective (docs/cost-model.md,
	 * "Recomputation"): a mamba layer keeps its scan's chunk states in the
	 * scratch, not the activation stash, and B makes them again with F's
	 * scan before it runs; every other kind ignores it.  0 or 1. */
	int64_t selective;
} rt_layer_desc;

/* RT_OK when the descriptor describes a layer these kernels run, else
 * RT_EINVAL. */
int rt_layer_check(const rt_layer_desc *d);

/* Buffer sizes of one layer for one micro-batch. */
typedef struct rt_sizes {
	int64_t params;  /* floats in the parameter array (and the gradient array) */
	int64_t act;     /* bytes of the activation stash, F -> B */
	int64_t wstash;  /* bytes of the W stash, B -> W */
	int64_t scratch; /* bytes of scratch any of F, B, W needs */
} rt_sizes;

/* One named tensor of a layer's flat parameter array. */
typedef struct rt_tensor_info {
	const char *name; /* e.g. "attn.wq" */
	int64_t offset;   /* in floats, from the start of the layer's array */
	int ndim;
	int64_t dim[3];   /* row-major; a matrix [in][out] maps a row vector x to x.W */
	int decay;        /* 1: decoupled weight decay applies to it (docs/layers.md lists which) */
} rt_tensor_info;

/* Number of tensors of the layer (n), and tensor i (0 <= i < n). */
int rt_layer_ntensors(const rt_layer_desc *d, int *n);
int rt_layer_tensor(const rt_layer_desc *d, int i, rt_tensor_info *out);

/* FLOPs of F, B and W for one micro-batch: matrix products and the
 * attention core (its causal half), as the kernels run them. */
int rt_layer_flops(const rt_layer_desc *d, double *f, double *b, double *w);

/* The kernel API, declared once over the element type so the double build
 * used by the tests (prefix rtd_, see runtime/cpu/kernels_f64.h) has the
 * same signatures.
 *
 *   layer_sizes  buffer sizes (bytes depend on the element type)
 *   layer_init   deterministic parameters from (seed, global layer index):
 *                the same weights whatever the plan
 *   forward      F.  x [mbs*seq][hidden] (NULL for the embedding); tokens:
 *                the embedding's input ids, or the head's targets (a
 *                negative target is ignored), else NULL; y [mbs*seq][hidden]
 *                (NULL for the head; may equal x); loss: the head's
 *                {sum of per-token cross-entropy, count of targets}, else NULL
 *   backward_b   B.  dy like y (NULL for the head); dscale: the head's
 *                d(loss)/d(per-token cross-entropy), e.g. 1 / tokens in the
 *                step (ignored elsewhere); dx like x (NULL for the
 *                embedding, which only moves dy into its W stash; may equal dy)
 *   backward_w   W.  grads += weight gradients of this micro-batch */
typedef struct rt_loss {
	double sum;    /* sum of -log p(target) over counted tokens */
	int64_t count; /* tokens with a target >= 0 */
} rt_loss;

#define RT_KERNEL_API(P, real)                                                  \
	int P##_layer_sizes(const rt_layer_desc *d, rt_sizes *s);             \
	int P##_layer_init(const rt_layer_desc *d, uint64_t seed, int64_t layer,     \
	                   real *params);                                            \
	int P##_forward(const rt_layer_desc *d, const real *params, const real *x,   \
	                const int32_t *tokens, real *y, rt_loss *loss, void *act,    \
	                void *scratch);                                              \
	int P##_backward_b(const rt_layer_desc *d, const real *params,               \
	                   const real *dy, real dscale, real *dx, const void *act,   \
	                   void *wstash, void *scratch);                             \
	int P##_backward_w(const rt_layer_desc *d, const real *params, real *grads, \
	                   const void *wstash, void *scratch);

RT_KERNEL_API(rt, float)

#ifdef __cplusplus
}
#endif

#endif
