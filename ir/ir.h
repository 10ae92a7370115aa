/* ir.h: the pipeline IR.
 *
 * One module owns flat arrays (layers, stages, per-device op lists); ops
 * name stages and micro-batches by integer index, never by pointer.  Every
 * enum that has a text spelling comes from one X-macro table below, which
 * the printer, the parser, the frontend and the docs all read.  The text
 * form is specified in docs/ir.md. */
#ifndef OCTO_IR_H
#define OCTO_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "support.h"

#define IR_VERSION 1

/* ---- enum tables ------------------------------------------------------ */

/* X(enum suffix, text, pattern char or 0) */
#define IR_LAYER_KINDS(X)                                                      \
	X(EMBEDDING, "embedding", 0)                                               \
	X(ATTENTION, "attention", '*')                                             \
	X(MLP, "mlp", '-')                                                         \
	X(MOE, "moe", 'E')                                                         \
	X(MAMBA, "mamba", 'M')                                                     \
	X(HEAD, "head", 0)                                                         \
	X(PARALLEL, "parallel", 'P')

typedef enum ir_layer_kind {
#define X(e, s, c) IR_LAYER_##e,
	IR_LAYER_KINDS(X)
#undef X
	IR_NLAYER_KINDS
} ir_layer_kind;

#define IR_DTYPES(X) X(F32, "f32", 4) X(BF16, "bf16", 2) X(F16, "f16", 2)
typedef enum ir_dtype {
#define X(e, s, n) IR_DTYPE_##e,
	IR_DTYPES(X)
#undef X
	IR_NDTYPES
} ir_dtype;

/* Feed-forward activations.  The gated ones (swiglu, geglu) have three
 * weight matrices (gate, up, down); the others two. */
#define IR_ACTS(X)                                                             \
	X(SWIGLU, "swiglu") X(GEGLU, "geglu") X(GELU, "gelu") X(RELU, "relu")      \
	X(RELU2, "relu2")
typedef enum ir_act {
#define X(e, s) IR_ACT_##e,
	IR_ACTS(X)
#undef X
	IR_NACTS
} ir_act;

#define IR_OPTIMIZERS(X) X(ADAMW, "adamw") X(SGD, "sgd")
typedef enum ir_optimizer {
#define X(e, s) IR_OPT_##e,
	IR_OPTIMIZERS(X)
#undef X
	IR_NOPTIMIZERS
} ir_optimizer;

/* The learning rate after the warm-up (docs/yaml.md, "training"). */
#define IR_DECAYS(X) X(CONSTANT, "constant") X(COSINE, "cosine") X(LINEAR, "linear")
typedef enum ir_decay {
#define X(e, s) IR_DECAY_##e,
	IR_DECAYS(X)
#undef X
	IR_NDECAYS
} ir_decay;

#define IR_DATAS(X) X(SYNTHETIC, "synthetic") X(TEXT, "text") X(TOKENS, "tokens")
typedef enum ir_data {
#define X(e, s) IR_DATA_##e,
	IR_DATAS(X)
#undef X
	IR_NDATAS
} ir_data;

/* How token files are read (docs/data.md): by their names, or one width;
 * the order is the runtime's rt_data_format less text. */
#define IR_TOKEN_FORMATS(X) X(AUTO, "auto") X(U16, "u16") X(U32, "u32")
typedef enum ir_token_format {
#define X(e, s) IR_TOKFMT_##e,
	IR_TOKEN_FORMATS(X)
#undef X
	IR_NTOKEN_FORMATS
} ir_token_format;

/* Partition strategies of the `partition` pass. */
#define IR_PARTITIONS(X) X(UNIFORM, "uniform") X(BALANCED, "balanced") X(GIVEN, "given")
typedef enum ir_partition {
#define X(e, s) IR_PART_##e,
	IR_PARTITIONS(X)
#undef X
	IR_NPARTITIONS
} ir_partition;

/* Schedules of the `schedule` pass.  X(enum, text, split): a split
 * schedule sends a stage's input gradient as soon as its B ends (the
 * zero-bubble family, and gpipe, whose W's wait for the stage's last B so
 * that they run in micro-batch order); the others run the backward as one piece, B then W,
 * and the gradient leaves when W ends. */
#define IR_SCHEDULES(X)                                                        \
	X(1F1B, "1f1b", false) X(GPIPE, "gpipe", true) X(I1F1B, "i1f1b", false)    \
	X(ZBH1, "zbh1", true) X(ZBH2, "zbh2", true) X(ZBV, "zbv", true)            \
	X(TUNED, "tuned", true)
typedef enum ir_schedule {
#define X(e, s, split) IR_SCHED_##e,
	IR_SCHEDULES(X)
#undef X
	IR_NSCHEDULES
} ir_schedule;

/* Work items of a device program.  F: forward; B: input-gradient backward;
 * W: weight-gradient backward. */
#define IR_OPS(X) X(F, "F") X(B, "B") X(W, "W")
typedef enum ir_op_kind {
#define X(e, s) IR_OP_##e,
	IR_OPS(X)
#undef X
	IR_NOPS
} ir_op_kind;

/* Communication ops, inserted by the `comm` pass.  X(enum, text).  NONE is
 * a compute op (F, B or W).  A send or a receive moves the value an op
 * produced: the activation of F(stage, mb) ("act") or the input gradient of
 * B(stage, mb) ("grad"); a wait blocks until this device's receive of that
 * value has completed.
 *
 * With data parallelism (plan dp > 1; docs/dataparallel.md) the ops of a
 * stage's gradient buckets: a bucket is a run of the stage's layers
 * (ir_op.first..last); all-reduce, reduce-scatter and all-gather post a
 * collective over the DP group of the device (its replicas in every
 * pipeline), a wait with ir_op.coll set completes one, and update is the
 * optimizer step of the bucket (of its shard with the distributed
 * optimizer).  For these ops ir_op.mb is the bucket's index in its stage.
 *
 * With tied embeddings (model tie_embeddings=on) placed on two devices,
 * tie posts the sum of the tied table's gradient (ir_op.first = last: the
 * embedding or the head, on this device; mb 0) with its copy on the other
 * device (ir_op.peer), and a wait with coll TIE completes it
 * (docs/ir.md, "Tied embeddings"). */
#define IR_COMMS(X)                                                            \
	X(NONE, "") X(SEND, "send") X(RECV, "recv") X(WAIT, "wait")                \
	X(ALLREDUCE, "all-reduce") X(REDUCESCATTER, "reduce-scatter")              \
	X(ALLGATHER, "all-gather") X(UPDATE, "update") X(TIE, "tie")
typedef enum ir_comm {
#define X(e, s) IR_COMM_##e,
	IR_COMMS(X)
#undef X
	IR_NCOMMS
} ir_comm;

/* Buffers of the memory plan (the `memplan` pass; docs/memplan.md).
 * X(enum, text).  act: the stash of F(stage, mb), live from F to its B
 * (with full recomputation F's alone, and one value more: the chain of
 * its layers); recomp: with full recomputation, the stash B(stage, mb)
 * makes again from the stage's input and reads, live during that B (the
 * same bytes as act);
 * wstash: what B(stage, mb) keeps for W, from B to W; recv, send, pass: a
 * value (an activation or a gradient, named as comm ops name it) received
 * from another device, sent to one, or handed to a stage on the same
 * device; bucket: a collective's buffer (docs/dataparallel.md), named by
 * the collective (ir_buf.coll), its stage and bucket (mb), live from the
 * post to its wait. */
#define IR_BUFS(X)                                                             \
	X(ACT, "act") X(WSTASH, "wstash") X(RECV, "recv") X(SEND, "send")          \
	X(PASS, "pass") X(BUCKET, "bucket") X(RECOMP, "recomp")
typedef enum ir_buf_kind {
#define X(e, s) IR_BUF_##e,
	IR_BUFS(X)
#undef X
	IR_NBUFS
} ir_buf_kind;

/* Rank layouts of a data-parallel plan (docs/dataparallel.md): pp-inner,
 * rank = replica x P + pipeline device (a pipeline's devices are
 * neighbours, on one node where they fit); dp-inner, rank = pipeline
 * device x D + replica (a DP group's members are neighbours); auto, the
 * default: `comm` takes the one whose lowered step simulates faster (until
 * then links are priced as pp-inner's). */
#define IR_RANK_ORDERS(X) X(AUTO, "auto") X(PP_INNER, "pp-inner") X(DP_INNER, "dp-inner")
typedef enum ir_rank_order {
#define X(e, s) IR_RANKS_##e,
	IR_RANK_ORDERS(X)
#undef X
	IR_NRANK_ORDERS
} ir_rank_order;

/* Activation recomputation of a stage (docs/ir.md, docs/cost-model.md,
 * "Recomputation").  none: F stashes its activations until B; full: F keeps
 * only the stage's input (its value buffer, or nothing for the first
 * stage, whose input is the data) and B runs the stage's F again from it,
 * with the same kernels in the same order, before its own work; selective:
 * F stashes all but its mamba layers' scan chunk states (ir_cost.sel_act),
 * which each such layer's B makes again with the scan's F (sel_f) before
 * its own work. */
#define IR_RECOMPUTES(X) X(NONE, "none") X(FULL, "full") X(SELECTIVE, "selective")
typedef enum ir_recompute {
#define X(e, s) IR_RECOMP_##e,
	IR_RECOMPUTES(X)
#undef X
	IR_NRECOMPUTES
} ir_recompute;

/* An option that is off or on, in the text. */
extern const char *const ir_switch_names[2];

/* Transport semantics the program is lowered and proven for. */
#define IR_BACKENDS(X) X(NCCL, "nccl") X(MPI, "mpi")
typedef enum ir_backend {
#define X(e, s) IR_BACKEND_##e,
	IR_BACKENDS(X)
#undef X
	IR_NBACKENDS
} ir_backend;

/* RoPE scaling of an attention layer (docs/yaml.md, "RoPE scaling"; the
 * math in docs/layers.md), in the order of the runtime's rt_rope_type.
 * none is rope_scaling absent; its fields are the attributes named
 * "rope_scaling.<field>" (IR_ATTR_ROPE_FACTOR .. IR_ATTR_ROPE_MSCALE_ALL_DIM),
 * each type using some of them (ir_rope_field_use). */
#define IR_ROPE_SCALINGS(X) X(NONE, "none") X(LINEAR, "linear") X(LLAMA3, "llama3") X(YARN, "yarn")
typedef enum ir_rope_scaling {
#define X(e, s) IR_ROPE_##e,
	IR_ROPE_SCALINGS(X)
#undef X
	IR_NROPE_SCALINGS
} ir_rope_scaling;

/* Layer attributes.  X(enum suffix, text, kinds mask, type, min, max).
 * A value of 0 means "absent" and is not printed; every attribute whose
 * range excludes 0 is required for the kinds it applies to (see
 * ir_attr_required).  Attributes that derive from others (kv_heads,
 * head_dim, ...) are filled in by the frontend, so the IR is explicit. */
#define K_(k) (1u << IR_LAYER_##k)
#define K_ATT (K_(ATTENTION) | K_(PARALLEL)) /* a parallel layer's attention */
#define K_SSM (K_(MAMBA) | K_(PARALLEL))     /* and its Mamba-2 mixer */
#define IR_ATTRS(X)                                                            \
	X(VERSION, "version", K_SSM, IR_AT_INT, 1, 2)                              \
	X(HEADS, "heads", K_ATT | K_(MAMBA), IR_AT_INT, 1, 1 << 16)                \
	X(KV_HEADS, "kv_heads", K_ATT, IR_AT_INT, 1, 1 << 16)                      \
	X(HEAD_DIM, "head_dim", K_ATT | K_(MAMBA), IR_AT_INT, 1, 1 << 16)          \
	X(WINDOW, "window", K_ATT, IR_AT_INT, 0, 1 << 30)                          \
	X(Q_LORA_RANK, "q_lora_rank", K_(ATTENTION), IR_AT_INT, 0, 1 << 20)        \
	X(KV_LORA_RANK, "kv_lora_rank", K_(ATTENTION), IR_AT_INT, 0, 1 << 20)      \
	X(QK_ROPE_DIM, "qk_rope_dim", K_(ATTENTION), IR_AT_INT, 0, 1 << 16)        \
	X(V_HEAD_DIM, "v_head_dim", K_(ATTENTION), IR_AT_INT, 0, 1 << 16)          \
	X(ROPE_THETA, "rope_theta", K_ATT, IR_AT_REAL, 0, 0)                       \
	X(QKV_BIAS, "qkv_bias", K_ATT, IR_AT_BOOL, 0, 1)                           \
	X(QK_NORM, "qk_norm", K_ATT, IR_AT_BOOL, 0, 1)                             \
	X(ROPE_SCALING, "rope_scaling", K_(ATTENTION), IR_AT_ENUM, 0, IR_NROPE_SCALINGS - 1) \
	X(ROPE_FACTOR, "rope_scaling.factor", K_(ATTENTION), IR_AT_REAL, 1, 1024)  \
	X(ROPE_LOW_FREQ, "rope_scaling.low_freq_factor", K_(ATTENTION), IR_AT_REAL, 0, 0) \
	X(ROPE_HIGH_FREQ, "rope_scaling.high_freq_factor", K_(ATTENTION), IR_AT_REAL, 0, 0) \
	X(ROPE_ORIG_MAX, "rope_scaling.original_max_position_embeddings", K_(ATTENTION), \
	  IR_AT_INT, 0, 1 << 30)                                                   \
	X(ROPE_BETA_FAST, "rope_scaling.beta_fast", K_(ATTENTION), IR_AT_REAL, 0, 0) \
	X(ROPE_BETA_SLOW, "rope_scaling.beta_slow", K_(ATTENTION), IR_AT_REAL, 0, 0) \
	X(ROPE_ATTN_FACTOR, "rope_scaling.attention_factor", K_(ATTENTION), IR_AT_REAL, 0, 100) \
	X(ROPE_MSCALE, "rope_scaling.mscale", K_(ATTENTION), IR_AT_REAL, 0, 100)   \
	X(ROPE_MSCALE_ALL_DIM, "rope_scaling.mscale_all_dim", K_(ATTENTION), IR_AT_REAL, 0, 100) \
	X(FFN, "ffn", K_(MLP), IR_AT_INT, 1, 1 << 24)                              \
	X(ACT, "activation", K_(MLP) | K_(MOE), IR_AT_ACT, 0, IR_NACTS - 1)               \
	X(EXPERTS, "experts", K_(MOE), IR_AT_INT, 1, 1 << 16)                      \
	X(TOP_K, "top_k", K_(MOE), IR_AT_INT, 1, 1 << 16)                          \
	X(EXPERT_FFN, "expert_ffn", K_(MOE), IR_AT_INT, 1, 1 << 24)                \
	X(SHARED_EXPERTS, "shared_experts", K_(MOE), IR_AT_INT, 0, 1 << 16)        \
	X(SHARED_GATE, "shared_gate", K_(MOE), IR_AT_BOOL, 0, 1)                   \
	X(STATE, "state", K_SSM, IR_AT_INT, 1, 1 << 16)                            \
	X(SSM_HEADS, "ssm_heads", K_(PARALLEL), IR_AT_INT, 1, 1 << 16)             \
	X(SSM_HEAD_DIM, "ssm_head_dim", K_(PARALLEL), IR_AT_INT, 1, 1 << 16)       \
	X(EXPAND, "expand", K_SSM, IR_AT_INT, 1, 64)                               \
	X(CONV, "conv", K_SSM, IR_AT_INT, 1, 1024)                                 \
	X(GROUPS, "groups", K_SSM, IR_AT_INT, 0, 1 << 16)                          \
	X(DT_RANK, "dt_rank", K_(MAMBA), IR_AT_INT, 0, 1 << 20)

/* INT: an integer in min..max.  ACT: an index of ir_act_names.  BOOL: 0
 * or 1, printed "on" when 1.  REAL: a finite double > 0 (and >= min when
 * min > 0, <= max when max > 0: the scale factors of rope_scaling, bounded
 * so that the attention's scores stay far from float's range) kept bit for bit in the int64 slot (ir_attr_real), absent (0)
 * meaning the attribute's default (ir_attr_real_default: rope_theta's is
 * IR_ROPE_THETA), which the frontend keeps as absent.  ENUM: an index of
 * the attribute's name table (ir_attr_enum_names), 0 the absent one, not
 * printed. */
typedef enum ir_attr_type { IR_AT_INT, IR_AT_ACT, IR_AT_BOOL, IR_AT_REAL, IR_AT_ENUM } ir_attr_type;

#define IR_ROPE_THETA 10000.0 /* rope_theta when absent (docs/yaml.md) */

typedef enum ir_attr {
#define X(e, s, k, t, lo, hi) IR_ATTR_##e,
	IR_ATTRS(X)
#undef X
	IR_NATTRS
} ir_attr;

typedef struct ir_attr_info {
	const char *name;
	uint32_t kinds; /* mask of ir_layer_kind the attribute applies to */
	ir_attr_type type;
	int64_t min, max;
} ir_attr_info;

extern const ir_attr_info ir_attr_table[IR_NATTRS];
extern const char *const ir_layer_kind_names[IR_NLAYER_KINDS];
extern const char ir_layer_kind_chars[IR_NLAYER_KINDS];
extern const char *const ir_dtype_names[IR_NDTYPES];
extern const int ir_dtype_bytes[IR_NDTYPES];
extern const char *const ir_act_names[IR_NACTS];
extern const char *const ir_rope_scaling_names[IR_NROPE_SCALINGS];
extern const char *const ir_optimizer_names[IR_NOPTIMIZERS];
extern const char *const ir_decay_names[IR_NDECAYS];
extern const char *const ir_data_names[IR_NDATAS];
extern const char *const ir_token_format_names[IR_NTOKEN_FORMATS];
extern const char *const ir_partition_names[IR_NPARTITIONS];
extern const char *const ir_schedule_names[IR_NSCHEDULES];
extern const bool ir_schedule_splits_backward[IR_NSCHEDULES];
extern const char *const ir_op_names[IR_NOPS];
extern const char *const ir_comm_names[IR_NCOMMS];
/* The value a comm op moves, by the producing op's kind: "act" (F),
 * "grad" (B); W produces nothing that moves. */
extern const char *const ir_value_names[IR_NOPS];
extern const char *const ir_backend_names[IR_NBACKENDS];
extern const char *const ir_rank_order_names[IR_NRANK_ORDERS];
extern const char *const ir_buf_names[IR_NBUFS];
extern const char *const ir_recompute_names[IR_NRECOMPUTES];

/* Index of `s` in a name table of n entries, or -1. */
int ir_lookup(const char *const *names, int n, const char *s);

/* Is attribute a applicable to kind k, and must it be non-zero there?
 * (Mamba's heads/head_dim/groups belong to version 2, dt_rank to version
 * 1; ir_attr_applies takes the version into account.) */
bool ir_attr_applies(ir_attr a, ir_layer_kind k, int64_t mamba_version);
bool ir_attr_required(ir_attr a, ir_layer_kind k, int64_t mamba_version);

/* The names of an IR_AT_ENUM attribute's values (*n of them). */
const char *const *ir_attr_enum_names(ir_attr a, int *n);

/* The value an absent IR_AT_REAL attribute stands for (0: none). */
double ir_attr_real_default(ir_attr a);

/* The fields of rope_scaling: the attributes "rope_scaling.<field>". */
static inline bool ir_attr_is_rope_field(ir_attr a)
{
	return a >= IR_ATTR_ROPE_FACTOR && a <= IR_ATTR_ROPE_MSCALE_ALL_DIM;
}

/* Whether RoPE scaling type t reads field a (ir_attr_is_rope_field). */
typedef enum ir_use { IR_USE_NO, IR_USE_OPTIONAL, IR_USE_REQUIRED } ir_use;
ir_use ir_rope_field_use(ir_rope_scaling t, ir_attr a);

/* ---- module ----------------------------------------------------------- */

/* The fields of a layer's cost, named as in the IR text; COLD stands for
 * f_cold, b_cold and w_cold together.  A profile records the ones it
 * measured in ir_cost.measured (one bit per field) and the cost pass
 * derives the rest. */
#define IR_COST_FIELDS(X)                                                      \
	X(F, "f") X(B, "b") X(W, "w") X(COLD, "cold") X(FLOPS, "flops")            \
	X(ACT, "act") X(WSTASH, "wstash") X(PARAMS, "params") X(RESIDENT, "resident")

typedef enum ir_cost_field {
#define X(e, s) IR_CF_##e,
	IR_COST_FIELDS(X)
#undef X
	IR_NCOST_FIELDS
} ir_cost_field;

#define IR_CF_BIT(e) (1u << IR_CF_##e)
#define IR_CF_ALL ((1u << IR_NCOST_FIELDS) - 1)
#define IR_CF_TIMES (IR_CF_BIT(F) | IR_CF_BIT(B) | IR_CF_BIT(W))

extern const char *const ir_cost_field_names[IR_NCOST_FIELDS];

/* A mask that leaves nothing to derive (the cold times are optional). */
static inline bool ir_cost_complete(unsigned measured)
{
	return (measured | IR_CF_BIT(COLD)) == IR_CF_ALL;
}

typedef struct ir_cost {
	bool known;        /* every field is set: by the cost pass (or parsed) */
	unsigned measured; /* IR_CF_BIT mask: the fields a profile measured, which
	                    * the cost pass keeps; when !known, only they are set */
	double f, b, w;    /* microseconds per micro-batch (data in the cache, when
	                    * the cold times are known too) */
	double flops;      /* FLOPs of F + B + W per micro-batch */
	uint64_t act;      /* bytes stashed from F until B */
	uint64_t wstash;   /* bytes still held after B until W */
	uint64_t params;   /* parameter count */
	uint64_t resident; /* bytes held all step: weights, gradients, optimizer state */
	bool cold;         /* measured cold too: f_cold, b_cold, w_cold are set */
	double f_cold, b_cold, w_cold; /* the same with the layer's data out of the
	                    * cache (docs/simulator.md, the cache model); 0 when
	                    * !cold, and the hot times apply */
	/* Selective recomputation (docs/cost-model.md, "Recomputation"): derived
	 * by the cost pass, never measured; 0 for every kind but mamba. */
	uint64_t sel_act;  /* bytes of act a selective stage does not keep (the
	                    * scan's chunk states; at most act) */
	double sel_f;      /* microseconds its B spends making them again (the
	                    * scan's F) */
} ir_cost;

/* Times are kept to the nanosecond, so IR text stays short (a profile's
 * 2.3 ms is 2300us, not 2299.9999999999995us). */
static inline double ir_round_us(double us)
{
	return round(us * 1e3) / 1e3;
}

typedef struct ir_layer {
	ir_layer_kind kind;
	int64_t attr[IR_NATTRS]; /* 0 = absent; see IR_ATTRS */
	ir_cost cost;
} ir_layer;

/* The value of an IR_AT_REAL attribute (0 when absent), and the slot's
 * bits for a value. */
static inline double ir_attr_real(const ir_layer *l, ir_attr a)
{
	double v;
	memcpy(&v, &l->attr[a], sizeof v);
	return v;
}

static inline int64_t ir_real_bits(double v)
{
	int64_t b;
	memcpy(&b, &v, sizeof b);
	return b;
}

/* rope_theta with its default filled in. */
static inline double ir_rope_theta(const ir_layer *l)
{
	double v = ir_attr_real(l, IR_ATTR_ROPE_THETA);
	return v != 0 ? v : IR_ROPE_THETA;
}

/* A parallel layer (docs/layers.md, "parallel") is an attention layer and a
 * Mamba-2 layer side by side on one norm: its attributes are the
 * attention's (heads, kv_heads, head_dim, window, rope_theta, qkv_bias,
 * qk_norm) and the mixer's (version, state, expand, conv, groups, with
 * ssm_heads and ssm_head_dim for the mixer's heads and head_dim).
 * ir_parallel_attr: the parallel layer's attribute that holds attribute a
 * of its part (IR_LAYER_ATTENTION or IR_LAYER_MAMBA), or -1 when that part
 * has none.  ir_parallel_part: that part as a layer of its own kind (no
 * cost), which the checks, the cost model and the frontend reuse. */
int ir_parallel_attr(ir_layer_kind part, ir_attr a);
void ir_parallel_part(const ir_layer *l, ir_layer_kind part, ir_layer *out);

/* An IR_AT_REAL attribute with its default filled in. */
static inline double ir_attr_real_or_default(const ir_layer *l, ir_attr a)
{
	double v = ir_attr_real(l, a);
	return v != 0 ? v : ir_attr_real_default(a);
}

typedef struct ir_model_info {
	const char *name;
	int64_t hidden;
	int64_t vocab;
	int64_t seq;     /* tokens per sequence */
	ir_dtype dtype;
	int tie;         /* 1: the head's weight is the embedding's table (one
	                  * parameter, a copy on each device that holds either;
	                  * the copies' gradients summed: docs/ir.md, "Tied
	                  * embeddings") */
} ir_model_info;

typedef struct ir_train {
	int64_t mbs;          /* sequences per micro-batch */
	int64_t microbatches; /* micro-batches per step */
	int64_t steps;
	ir_optimizer optimizer;
	double lr;
	double weight_decay;
	uint64_t seed;
	ir_data data;
	const char *text_file; /* data == IR_DATA_TEXT */
	const char *token_files; /* data == IR_DATA_TOKENS: absolute paths, comma-separated */
	ir_token_format token_format; /* data == IR_DATA_TOKENS */
	int64_t warmup;       /* steps of linear learning-rate warm-up */
	ir_decay decay;       /* then down to min_lr ... */
	int64_t decay_steps;  /* ... at this step (warm-up included); 0: steps */
	double min_lr;
	double clip;          /* the largest global gradient norm; 0: no clipping */
} ir_train;

typedef struct ir_link {
	double bw;  /* bytes per second */
	double lat; /* microseconds */
} ir_link;

typedef struct ir_cluster {
	const char *name;   /* preset name or "inline" */
	int64_t devices;
	int64_t per_node;   /* devices per node */
	uint64_t mem;       /* bytes per device */
	double flops;       /* peak FLOP/s per device */
	double membw;       /* bytes per second per device */
	uint64_t cache;     /* bytes of cache per device the simulator's cache model
	                     * uses; 0: no cache model (docs/simulator.md) */
	double send_post, recv_post; /* microseconds of the host's time to post a
	                     * send and a receive (mpi backend); 0: free */
	ir_link intra, inter;
} ir_cluster;

typedef struct ir_plan_opts {
	ir_schedule schedule;
	int64_t chunks;       /* stages per device; the partition makes devices*chunks stages */
	ir_partition partition;
	int64_t *given;       /* partition == given: layers per stage */
	int ngiven;
	int64_t *placement;   /* optional: device of each stage */
	int nplacement;
	ir_backend backend;   /* what `comm` lowers for and `verify` proves */
	/* Data parallelism (docs/dataparallel.md): the cluster's devices are
	 * dp replicas of a pipeline of devices / dp devices; the step's
	 * micro-batches are split evenly over the replicas.  0 or 1: one
	 * pipeline (and the other fields below are 0). */
	int64_t dp;
	ir_rank_order rank_order;
	int dist_opt;         /* 1: the distributed optimizer (reduce-scatter, the
	                       * update of a shard, all-gather) */
	int overlap_gather;   /* 1 (with dist_opt): each all-gather's wait is
	                       * carried into the next step, before its stage's
	                       * first F (docs/dataparallel.md) */
	int deterministic;    /* 1: exact gradient sums, the same bits for every dp */
	uint64_t bucket;      /* bytes of f32 gradient per bucket (at least one layer) */
	ir_recompute recompute; /* what every stage the passes make gets */
} ir_plan_opts;

typedef struct ir_stage {
	int first, last; /* layer range, inclusive */
	int device;
	ir_recompute recompute; /* ir_add_stage: the plan's */
} ir_stage;

typedef struct ir_op {
	ir_op_kind kind;  /* compute: F, B, W; comm: F = activation, B = gradient */
	int stage;        /* compute: its stage; comm: the producing stage */
	int mb;
	ir_comm comm;     /* IR_COMM_NONE: compute */
	int peer;         /* send, recv: the other device */
	int group;        /* send, recv: posted together with the same group (> 0) */
	uint64_t bytes;   /* send, recv, collectives */
	ir_comm coll;     /* wait: the collective it completes; NONE: a receive */
	bool carried;     /* wait of an all-gather: completes the one the
	                   * previous step posted (later in the program) */
	int first, last;  /* collectives, update: the bucket's layers */
} ir_op;

typedef struct ir_device {
	ir_op *ops;
	int nops, capops;
} ir_device;

/* The deadlock-freedom proof of the lowered programs (the `verify` pass):
 * the number of steps of the event graph and a hash of its topological
 * order, which `verify` recomputes and must find again. */
typedef struct ir_proof {
	bool proven;
	ir_backend backend;
	int64_t steps;
	uint64_t order;  /* FNV-1a hash of the certificate (the global order) */
} ir_proof;

/* Every offset of a memory plan is a multiple of this (a GPU allocation's
 * alignment, and of the CPU runtime's RT_ALIGN). */
#define IR_BUF_ALIGN 256

/* One buffer of a device's memory plan. */
typedef struct ir_buf {
	ir_buf_kind kind;
	ir_op_kind value; /* recv, send, pass: IR_OP_F an activation, IR_OP_B a gradient */
	int stage, mb;    /* act, wstash: its op's; recv, send, pass: the producing op's */
	int first, last;  /* live from op `first` through op `last` of the program */
	uint64_t off;     /* bytes from the start of the device's arena; IR_BUF_ALIGN'd */
	uint64_t size;    /* bytes */
	ir_comm coll;     /* bucket: its collective (mb: the bucket) */
} ir_buf;

/* The memory plan of one device (the `memplan` pass): its arena and the
 * buffers in it, in the order ir_live_buffers derives them. */
typedef struct ir_dev_plan {
	uint64_t arena;   /* bytes; every off + size fits */
	ir_buf *bufs;
	int nbufs, capbufs;
	ir_loc *buf_loc;  /* where each buffer was read; not part of the value */
} ir_dev_plan;

typedef struct ir_module {
	arena *arena;       /* owns everything below */
	ir_model_info model;
	ir_train train;
	ir_cluster cluster;
	ir_plan_opts plan;
	ir_layer *layers;
	int nlayers, caplayers;
	ir_stage *stages;
	int nstages, capstages;
	ir_device *devices; /* once scheduled: one program per cluster device */
	int ndevices;
	ir_proof proof;
	ir_dev_plan *memplan; /* NULL, or one per device: the memory plan */

	/* Where each element came from (YAML node or IR line); not part of the
	 * module's value, so ir_equal ignores them. */
	ir_loc loc;
	ir_loc model_loc, train_loc, cluster_loc, plan_loc; /* their sections */
	ir_loc microbatches_loc; /* the field or flag that set it, when known */
	ir_loc chunks_loc;       /* the same for plan.chunks */
	ir_loc dtype_loc;        /* the same for model.dtype */
	ir_loc dp_loc;           /* the same for plan.dp */
	/* The model asked the driver to choose dp (`--dp auto`, `dp: auto`):
	 * a request, not a plan, so not part of the text form either; the
	 * plan the search keeps carries its dp (passes/scaleout.h). */
	bool dp_auto;
	/* The same for the recomputation (`--recompute auto`, and with dp
	 * auto unless a mode is given): the search tries none and full. */
	bool recompute_auto;
	/* The same for the distributed optimizer (`--distributed-optimizer
	 * auto`, and with dp auto unless on or off is given): the search tries
	 * it off and on. */
	bool dist_opt_auto;
	struct {
		ir_loc devices, mem;   /* the cluster field (a preset's too) or flag */
	} cluster_at;
	ir_loc *layer_loc;
	ir_loc *stage_loc;
	ir_loc **op_loc;    /* op_loc[d][i], NULL when unknown */
} ir_module;

/* ---- header lines (docs/ir.md) ----------------------------------------
 * The model, train, cluster and plan lines, one table each: the printer,
 * the parser and ir_equal all walk these, so a new field is one row here
 * and its struct member above.  X(key, member, type, group, at):
 *   key     the field's name in the text;
 *   member  the struct member that holds it;
 *   type    NAME (the quoted name after the keyword), INT(lo, hi),
 *           U64, ENUM(names), F64 (a finite number), US (the same in
 *           microseconds, "12.5us"), BYTES ("2GiB"), RATE (a finite number
 *           or "inf"), STR (a quoted string, NULL when absent),
 *           LINK ("BANDWIDTH/LATENCYus"), LIST(count member, lo, hi)
 *           (comma-separated integers);
 *   group   0: required; otherwise optional, and the fields of one group
 *           come together or not at all: printed when any of them is not
 *           0, read when any of them is written;
 *   at      0, or IR_HF_AT(m) when the parser keeps where the key was
 *           written in the module member m (the passes' errors point
 *           there).
 * The fields are printed, read and compared in this order. */
#define IR_MODEL_FIELDS(X)                                                     \
	X("name", name, NAME, 0, 0)                                                \
	X("hidden", hidden, INT(1, 1 << 20), 0, 0)                                 \
	X("vocab", vocab, INT(1, 1 << 24), 0, 0)                                   \
	X("seq", seq, INT(1, 1 << 24), 0, 0)                                       \
	X("dtype", dtype, ENUM(ir_dtype_names), 0, IR_HF_AT(dtype_loc))         \
	X("tie_embeddings", tie, ENUM(ir_switch_names), 1, 0)

#define IR_TRAIN_FIELDS(X)                                                     \
	X("mbs", mbs, INT(1, 1 << 20), 0, 0)                                       \
	X("microbatches", microbatches, INT(1, 1 << 20), 0, IR_HF_AT(microbatches_loc)) \
	X("steps", steps, INT(1, INT32_MAX), 0, 0)                                 \
	X("optimizer", optimizer, ENUM(ir_optimizer_names), 0, 0)                  \
	X("lr", lr, F64, 0, 0)                                                     \
	X("weight_decay", weight_decay, F64, 0, 0)                                 \
	X("seed", seed, U64, 0, 0)                                                 \
	X("data", data, ENUM(ir_data_names), 0, 0)                                 \
	X("text", text_file, STR, 1, 0)                                            \
	X("tokens", token_files, STR, 2, 0)                                        \
	X("token_format", token_format, ENUM(ir_token_format_names), 2, 0)         \
	X("warmup", warmup, INT(0, INT32_MAX), 3, 0)                               \
	X("decay", decay, ENUM(ir_decay_names), 3, 0)                              \
	X("decay_steps", decay_steps, INT(0, INT32_MAX), 3, 0)                     \
	X("min_lr", min_lr, F64, 3, 0)                                             \
	X("clip", clip, F64, 4, 0)

#define IR_CLUSTER_FIELDS(X)                                                   \
	X("name", name, NAME, 0, 0)                                                \
	X("devices", devices, INT(1, 65536), 0, IR_HF_AT(cluster_at.devices))      \
	X("per_node", per_node, INT(1, 65536), 0, 0)                               \
	X("mem", mem, BYTES, 0, IR_HF_AT(cluster_at.mem))                          \
	X("flops", flops, F64, 0, 0)                                               \
	X("membw", membw, RATE, 0, 0)                                              \
	X("cache", cache, BYTES, 1, 0)                                             \
	X("send_post", send_post, US, 2, 0)                                        \
	X("recv_post", recv_post, US, 2, 0)                                        \
	X("intra", intra, LINK, 0, 0)                                              \
	X("inter", inter, LINK, 0, 0)

#define IR_PLAN_FIELDS(X)                                                      \
	X("schedule", schedule, ENUM(ir_schedule_names), 0, 0)                     \
	X("chunks", chunks, INT(1, 1024), 0, IR_HF_AT(chunks_loc))                 \
	X("partition", partition, ENUM(ir_partition_names), 0, 0)                  \
	X("given", given, LIST(ngiven, 0, INT32_MAX), 1, 0)                        \
	X("placement", placement, LIST(nplacement, 0, INT32_MAX), 2, 0)            \
	X("backend", backend, ENUM(ir_backend_names), 0, 0)                        \
	X("dp", dp, INT(0, 65536), 3, IR_HF_AT(dp_loc))                            \
	X("rank_order", rank_order, ENUM(ir_rank_order_names), 3, 0)               \
	X("dist_optimizer", dist_opt, ENUM(ir_switch_names), 3, 0)                 \
	X("overlap_param_gather", overlap_gather, ENUM(ir_switch_names), 4, 0)     \
	X("deterministic", deterministic, ENUM(ir_switch_names), 3, 0)             \
	X("bucket", bucket, BYTES, 3, 0)                                           \
	X("recompute", recompute, ENUM(ir_recompute_names), 5, 0)

/* X(enum suffix, keyword, module member): the line's struct is the
 * member, its table IR_<suffix>_FIELDS and its location member##_loc. */
#define IR_HLINES(X)                                                           \
	X(MODEL, "model", model) X(TRAIN, "train", train)                          \
	X(CLUSTER, "cluster", cluster) X(PLAN, "plan", plan)

typedef enum ir_hf_type {
	IR_HF_NAME, IR_HF_INT, IR_HF_U64, IR_HF_ENUM, IR_HF_F64, IR_HF_US, IR_HF_BYTES,
	IR_HF_RATE, IR_HF_STR, IR_HF_LINK, IR_HF_LIST
} ir_hf_type;

/* One row of a header line's table, as ir.c lays it out. */
typedef struct ir_hfield {
	const char *key;
	ir_hf_type type;
	size_t off;               /* of the member in the line's struct */
	size_t size;              /* of the member (checked against the type) */
	int64_t lo, hi;           /* INT, and each element of a LIST */
	const char *const *names; /* ENUM: its names, nnames of them */
	int nnames;
	size_t count;             /* LIST: offset of the int that counts it */
	int group;                /* 0: required; see above */
	size_t at;                /* offset in ir_module of an ir_loc, or 0 */
} ir_hfield;

typedef struct ir_hline {
	const char *keyword;
	size_t off, loc;          /* offsets in ir_module of the struct and its line's ir_loc */
	const ir_hfield *fields;
	int nfields;
} ir_hline;

typedef enum ir_hline_kind {
#define X(e, kw, member) IR_HLINE_##e,
	IR_HLINES(X)
#undef X
	IR_NHLINES
} ir_hline_kind;

extern const ir_hline ir_hlines[IR_NHLINES];

/* Is field f the same in the line structs at a and b? */
bool ir_hfield_eq(const ir_hfield *f, const void *a, const void *b);

/* l when it is known, else fallback. */
static inline ir_loc ir_loc_or(ir_loc l, ir_loc fallback)
{
	return l.src ? l : fallback;
}

ir_module *ir_new(void);
void ir_free(ir_module *m);
ir_layer *ir_add_layer(ir_module *m, ir_layer_kind k, ir_loc loc);
ir_stage *ir_add_stage(ir_module *m, int first, int last, int device, ir_loc loc);
void ir_clear_stages(ir_module *m);
void ir_alloc_devices(ir_module *m);  /* one empty program per cluster device */
void ir_clear_devices(ir_module *m);
ir_op *ir_add_op(ir_module *m, int dev, ir_op_kind k, int stage, int mb, ir_loc loc);
/* Append a copy of op (any kind) to device dev's program. */
ir_op *ir_push_op(ir_module *m, int dev, const ir_op *op, ir_loc loc);
/* Pair the sends of device a to b with the receives on b from a as the
 * module's backend matches them: nccl first in, first out (NCCL has no
 * tags); mpi by value, the runtime's tag (stage, micro-batch, kind), and
 * first in, first out among equal tags (MPI's non-overtaking rule).
 * pair(ctx, i, j) for each send op i on a and its receive op j on b, in the
 * sends' order, until it returns non-zero.  Returns that
 * value, or 0 when every op found its partner, IR_CHANNEL_SEND_LEFT when a
 * send has no receive, IR_CHANNEL_RECV_LEFT when a receive has no send. */
enum { IR_CHANNEL_SEND_LEFT = -1, IR_CHANNEL_RECV_LEFT = -2 };
/* ix: the module's channels, indexed once (ir_channels_index) for a caller
 * that pairs many channels: each pairing then reads its own channel's
 * ops, not every op of both devices; NULL: scan. */
typedef struct ir_channels ir_channels;
int ir_channel_pairs(const ir_module *m, const ir_channels *ix, int a, int b,
                     int (*pair)(void *ctx, int i, int j), void *ctx);
/* Every device's sends and receives, grouped by peer in program order
 * (malloc'd; ir_channels_free).  Valid while the programs do not change. */
ir_channels *ir_channels_index(const ir_module *m);
void ir_channels_free(ir_channels *ix);

/* The compute op that makes a stage's value (IR_OP_F: the activation F
 * sends on; IR_OP_B: the input gradient B sends back): F for an
 * activation; for a gradient B when the schedule splits the backward, and
 * W, which ends the whole backward, when it does not. */
ir_op_kind ir_value_maker(const ir_module *m, ir_op_kind value);

/* Data parallelism (docs/dataparallel.md): the replicas (1 without), the
 * devices of one pipeline (the programs), and the micro-batches each
 * replica runs per step (the programs' micro-batches). */
static inline int64_t ir_dp(const ir_module *m)
{
	return m->plan.dp > 1 ? m->plan.dp : 1;
}
static inline int64_t ir_pipe_devices(const ir_module *m)
{
	return m->cluster.devices / ir_dp(m);
}
static inline int64_t ir_local_mb(const ir_module *m)
{
	return m->train.microbatches / ir_dp(m);
}
/* The cluster rank of device p of replica r under the plan's rank order. */
int64_t ir_rank_of(const ir_module *m, int64_t replica, int64_t p);
/* Pairs the collectives of a device program with their waits: of[i] for
 * the wait at op i is the index of the collective it completes (the
 * latest one before it of its kind, stage and bucket that no wait has
 * taken; for a carried wait, the first one after it that no wait has
 * taken: the previous step's post), -1 for every other op.  of has
 * dev->nops entries. */
void ir_coll_waits(const ir_device *dev, int *of);
/* Bytes a value of a deterministic reduction takes: the exact sum's nine
 * int64 digits (the runtime's RT_EXACT_DIGITS; docs/dataparallel.md). */
#define IR_EXACT_VALUE_BYTES 72
/* Bytes of collective c's buffer over a bucket of n parameters
 * (docs/dataparallel.md): a reduction moves n f32 gradients (or exact
 * sums, deterministic), zero-padded to dp equal shards for reduce-scatter;
 * an all-gather the padded f32 parameters.  Saturating.  The runtime's
 * rt_coll_bytes is the same formula, and codegen checks the two agree. */
uint64_t ir_coll_bytes(const ir_module *m, ir_comm c, uint64_t n);
/* Tied embeddings (docs/ir.md, "Tied embeddings"): the bytes a tie op
 * sums (the table's f32 gradient, or its exact sums with
 * deterministic=on); the device of the embedding (which 0) or the head
 * (1), -1 while unplaced; and whether the model ties them and the plan
 * puts them on two devices (then the programs sum them with tie ops). */
uint64_t ir_tie_bytes(const ir_module *m);
int ir_tie_device(const ir_module *m, int which);
bool ir_tie_apart(const ir_module *m);
/* Is the op a collective (all-reduce, reduce-scatter, all-gather)? */
static inline bool ir_is_coll(const ir_op *op)
{
	return op->comm == IR_COMM_ALLREDUCE || op->comm == IR_COMM_REDUCESCATTER ||
	       op->comm == IR_COMM_ALLGATHER;
}
/* Is the op one of data parallelism's (a collective, its wait, update)? */
static inline bool ir_is_dp_op(const ir_op *op)
{
	return (op->comm >= IR_COMM_ALLREDUCE && op->comm != IR_COMM_TIE) ||
	       (op->comm == IR_COMM_WAIT && op->coll != IR_COMM_NONE && op->coll != IR_COMM_TIE);
}
/* Is the op the tied embeddings' sum or its wait? */
static inline bool ir_is_tie_op(const ir_op *op)
{
	return op->comm == IR_COMM_TIE || (op->comm == IR_COMM_WAIT && op->coll == IR_COMM_TIE);
}

/* Does the module carry communication ops (has `comm` run)? */
bool ir_lowered(const ir_module *m);

/* Is a buffer of kind k a compute op's stash (act, recomp, wstash), named
 * by its op, rather than a value or a bucket? */
static inline bool ir_buf_is_stash(ir_buf_kind k)
{
	return k == IR_BUF_ACT || k == IR_BUF_RECOMP || k == IR_BUF_WSTASH;
}

/* Recomputation (docs/cost-model.md, "Recomputation"): the one formula of
 * each quantity, which the simulator, the tuner, the memory plan and
 * codegen all use.
 *   ir_stage_act     the act stash bytes of stage s's layers (their sum);
 *   ir_stage_kept    bytes stage s holds per micro-batch from F until B:
 *                    its act stash without recomputation; with full, its
 *                    input, ir_boundary_bytes (0 for the first stage, whose
 *                    input is the data, read again); with selective, its
 *                    act stash less its layers' sel_act;
 *   ir_stage_redo    bytes stage s needs besides while its F runs and while
 *                    its B runs, in the arena: 0 without recomputation and
 *                    with selective (whose chunk states are in the runtime's
 *                    scratch, as all scratch outside the arena); with full,
 *                    its act stash plus one value (the chain through its
 *                    layers). */
uint64_t ir_stage_act(const ir_module *m, int s);
uint64_t ir_stage_kept(const ir_module *m, int s);
uint64_t ir_stage_redo(const ir_module *m, int s);

/* Start the memory plan: one empty plan per device (m->memplan). */
void ir_alloc_memplan(ir_module *m);
ir_buf *ir_add_buf(ir_module *m, int dev, const ir_buf *b, ir_loc loc);

/* The buffers device d's program needs, with their kinds, sizes and live
 * ranges (offsets 0), in program order of their first op; docs/memplan.md
 * ("Liveness") gives the rules.  Needs costs and programs that pass
 * ir_verify.  Returns the count; *out is malloc'd (the caller frees it). */
int ir_live_buffers(const ir_module *m, int d, ir_buf **out);

/* Stages per device the plan options ask for: chunks, except that zbv
 * always runs two (a V; 0 when zbv is given any other chunk count) and
 * i1f1b at least two (one chunk, the default, means two: interleaving one
 * would be 1f1b). */
int64_t ir_plan_chunks(const ir_plan_opts *p);

/* Field-for-field equality of two modules (locations ignored). */
bool ir_equal(const ir_module *a, const ir_module *b);

/* ---- text form (docs/ir.md) ------------------------------------------- */

/* Byte count with the largest exact binary suffix: 3GiB, 1536KiB, 7B. */
void ir_fmt_bytes(char *buf, size_t n, uint64_t v);
/* Bytes for people, in the unit that shows the number with three
 * significant digits ("512 B", "1.50 KiB", "6.23 MiB", "80.0 GiB"); the
 * one formatter of sizes in messages. */
void ir_fmt_size(char *buf, size_t n, uint64_t v);
/* Microseconds for people, in the unit that reads best ("850.0 us",
 * "14.509 ms", "1.204 s"); the one formatter of times in tables and
 * reports. */
void ir_fmt_time(char *buf, size_t n, double us);

void ir_print(FILE *out, const ir_module *m);
char *ir_print_string(const ir_module *m); /* malloc'd */
/* Parse IR text.  NULL after a diagnostic on a syntax or value error. */
ir_module *ir_parse(const src_file *src);
/* A byte count as the text writes one: an integer with B, KiB, MiB, GiB or
 * TiB ("32MiB", "65536B"), or "unlimited" (UINT64_MAX).  False when it is
 * not one or does not fit in 64 bits. */
bool ir_parse_bytes(const char *s, uint64_t *out);

/* ---- verifier --------------------------------------------------------- */

/* Structural checks of docs/ir.md ("Invariants").  Reports each violation
 * through diag_error (at the element's location when known, else at the
 * module's) and returns the number found. */
int ir_verify(const ir_module *m);

/* The plan's data-parallel fields against the cluster and the training
 * shape (dp divides the devices and the micro-batches, ...); reports to
 * ds (NULL: the default sink) at the dp field and returns the count. */
int ir_check_dp(const ir_module *m, diag_sink *ds);

/* Checks of one layer's attributes against the model (ranges, required
 * attributes, divisibility).  Used by the verifier and by the frontend,
 * which passes the YAML location of the offending field through
 * `where(attr)`.  Returns the number of errors reported. */
typedef ir_loc (*ir_attr_loc_fn)(void *ctx, ir_attr a);
int ir_check_layer(const ir_model_info *model, const ir_layer *l, int index,
                   ir_attr_loc_fn where, void *ctx, ir_loc fallback);

/* Checks of the training hyper-parameters that reach the runtime as float32
 * (docs/yaml.md's ranges): lr > 0 and weight_decay, min_lr, clip >= 0, each
 * finite in float32 and not rounding to 0 there unless it is 0, min_lr at
 * most lr, and the decay factor 1 - lr * weight_decay finite in float32.  Used by the verifier and by the
 * frontend, which passes the YAML location of each field through
 * `where(field)`.  Returns the number of errors reported. */
typedef enum ir_train_field { IR_TRAIN_LR, IR_TRAIN_WD, IR_TRAIN_MIN_LR, IR_TRAIN_CLIP, IR_NTRAIN_CHECKED } ir_train_field;
typedef ir_loc (*ir_train_loc_fn)(void *ctx, ir_train_field f);
int ir_check_train(const ir_train *t, ir_train_loc_fn where, void *ctx, ir_loc fallback);

/* ---- ranges (docs/ir.md, "Ranges") ----------------------------------
 * What every reader (the model and cluster YAML, profiles, IR text)
 * accepts, so that every time the passes add up stays finite and every
 * byte sum fits in 64 bits: a wrong value is refused where it is written,
 * not found as an inf, a NaN or a wrapped sum later. */
#define IR_MAX_US 1e12        /* a time (op, latency, post): 0 .. 1e12 us (11.6 days) */
#define IR_MIN_RATE 1.0       /* a bandwidth: 1 .. 1e18 bytes/s, or infinite (free) */
#define IR_MAX_RATE 1e18
#define IR_MIN_FLOPS 1e3      /* peak FLOP/s of a device: 1e3 .. 1e21 */
#define IR_MAX_FLOPS 1e21
#define IR_MAX_LAYER_FLOPS 1e24 /* FLOPs of one layer's F + B + W */
/* The bytes of one step: every layer's resident bytes plus micro-batches
 * x (activation stash + W stash + twice ir_boundary_bytes: the activation
 * it passes on and its gradient), at most 2^60 (1 EiB).  Every memory sum
 * of the passes (a device's stages, its stashes in flight, its arena) is a
 * part of it plus boundary buffers, so it fits in 64 bits with room. */
#define IR_MAX_STEP_BYTES (1ull << 60)

static inline bool ir_range_ok(double v, double lo, double hi)
{
	return v >= lo && v <= hi;
}

/* A bandwidth in range: IR_MIN_RATE .. IR_MAX_RATE, or +inf. */
static inline bool ir_rate_ok(double bw)
{
	return ir_range_ok(bw, IR_MIN_RATE, IR_MAX_RATE) || bw == INFINITY;
}

/* Saturating sums and products of byte counts: UINT64_MAX stands for "too
 * many", which no limit accepts. */
static inline uint64_t ir_sat_add(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t ir_sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Every layer's cost is known and every time in it is 0: a step that
 * takes no time, whose plans cannot be compared (the ratios would be 0/0). */
bool ir_no_time(const ir_module *m);

/* Bytes of the activation (or its gradient) one micro-batch passes across a
 * stage boundary: micro-batch size x sequence x hidden x dtype size,
 * saturating (UINT64_MAX: beyond 64 bits). */
uint64_t ir_boundary_bytes(const ir_module *m);

/* The first layer at which the known costs' step bytes (above) pass
 * IR_MAX_STEP_BYTES, or -1 when they fit. */
int ir_step_bytes_overflow(const ir_module *m);

/* The error for it, at loc, to sink ds (NULL: the default sink): names the
 * layer and the limit.  Returns -1. */
int ir_step_bytes_error(const ir_module *m, int layer, ir_loc loc, diag_sink *ds);

/* The model, cluster, training and plan lines of a summary; partition:
 * what the stages are (pass_partition_label). */
void ir_print_summary(FILE *out, const ir_module *m, const char *partition);

/* Every layer's cost is known and holds times only (no FLOPs, stashes or
 * resident bytes): a published timing profile, whose shapes are
 * placeholders (docs/profile.md). */
bool ir_times_only(const ir_module *m);

#endif
