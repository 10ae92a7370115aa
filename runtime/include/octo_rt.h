/* octo_rt.h: the C ABI of libocto_rt that the generated per-rank programs
 * call (the layer kernels themselves are octo_kernels.h).
 *
 * One context per rank, owned by the caller through an opaque handle:
 *
 *   rt_init          MPI (MPI_Init_thread), rank and world size from the launcher
 *   rt_arena_init    the rank's one arena, sized by the caller
 *   rt_model_init    this rank's layers (global index + descriptor): parameters
 *                    from (seed, global layer index), gradients, AdamW state
 *   rt_ckpt_load     optionally, resume
 *   per step:  rt_step_begin, rt_run_f / rt_run_b / rt_run_w per layer and
 *              micro-batch, rt_send / rt_recv / rt_wait between ranks,
 *              with replicas (rt_train.dp) rt_post_coll / rt_wait / rt_update per
 *              gradient bucket, rt_step_end (loss on the rank that holds the head,
 *              replica 0's with replicas; AdamW)
 *   rt_ckpt_save, rt_trace_write, rt_profile as wanted
 *   rt_finalize
 *
 * Every call returns RT_OK (0) or a negative RT_E... code (octo_kernels.h);
 * rt_errmsg() gives the message of the last failure, naming what failed.
 * The runtime never exits the process: on an error the caller calls
 * rt_abort(), which prints "octopipe rank R: error: MESSAGE" and takes the
 * whole job down with MPI_Abort, so no rank is left waiting for a dead one.
 *
 * The contract of every call, the data and tag definitions, the loss and
 * optimizer formulas and the checkpoint format are in docs/runtime.md. */
#ifndef OCTO_RT_H
#define OCTO_RT_H

#include <stddef.h>
#include <stdint.h>

#include "octo_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_ctx rt_ctx;

/* ---- init, errors --------------------------------------------------------- */

enum {
	RT_COMM_SYNC = 1u << 0, /* every send is synchronous (MPI_Issend); also OCTO_COMM_SYNC=1 */
	RT_NO_BLAS_PIN = 1u << 1, /* leave OpenBLAS's thread count alone */
};

typedef struct rt_options {
	unsigned flags;        /* RT_COMM_SYNC, ... */
	double comm_timeout_s; /* a wait fails after this long; 0: OCTO_COMM_TIMEOUT, else 60 */
	const char *trace_dir; /* record a trace, written by rt_finalize; NULL: OCTO_TRACE_DIR, else none */
} rt_options;

/* Initialises MPI (unless the program already did; then the runtime leaves
 * finalising to it), pins OpenBLAS to one thread, and returns a new context
 * in *out.  opt may be NULL.  On failure *out is NULL, the message went to
 * stderr and MPI stays initialised: call rt_abort(NULL, code). */
int rt_init(int *argc, char ***argv, const rt_options *opt, rt_ctx **out);

/* Frees everything the context owns, writes the trace if one was asked for,
 * and finalises MPI if rt_init initialised it.  Collective. */
int rt_finalize(rt_ctx *ctx);

int rt_rank(const rt_ctx *ctx);
int rt_world_size(const rt_ctx *ctx);

/* The message of the last failed call on this context ("" if none). */
const char *rt_errmsg(const rt_ctx *ctx);

/* Prints "octopipe rank R: error: MSG" (MSG: rt_errmsg, or rt_strerror(code)
 * when there is none) to stderr, then MPI_Abort(MPI_COMM_WORLD, -code):
 * the job ends with a non-zero status on every rank.  Returns (code) only
 * if MPI_Abort does.  ctx may be NULL after a failed rt_init, which has
 * printed its message already: then it only aborts. */
int rt_abort(rt_ctx *ctx, int code);

/* ---- the arena ------------------------------------------------------------ */

typedef struct rt_arena_info {
	size_t size; /* bytes asked for at rt_arena_init */
	size_t used; /* bytes allocated now */
	size_t peak; /* high-water mark of used */
} rt_arena_info;

#define RT_ALIGN 64 /* every arena allocation starts at a multiple of this */

/* Allocates the rank's one arena (once per context). */
int rt_arena_init(rt_ctx *ctx, size_t bytes);
/* bytes from the arena, RT_ALIGN-aligned; RT_ENOMEM when it does not fit. */
int rt_arena_alloc(rt_ctx *ctx, size_t bytes, void **out);
/* The current top, and a return to it: allocations after the mark are freed
 * together (the arena is a stack). */
size_t rt_arena_mark(const rt_ctx *ctx);
int rt_arena_release(rt_ctx *ctx, size_t mark);
int rt_arena_stats(const rt_ctx *ctx, rt_arena_info *out);

/* ---- the model on this rank ---------------------------------------------- */

typedef enum rt_optimizer { RT_ADAMW, RT_SGD } rt_optimizer;
/* What the learning rate does after the warm-up (rt_train.decay). */
typedef enum rt_decay { RT_DECAY_CONSTANT, RT_DECAY_COSINE, RT_DECAY_LINEAR } rt_decay;

typedef struct rt_train {
	uint64_t seed;        /* parameter init and synthetic data */
	int64_t nlayers;      /* layers of the whole model, embedding and head included */
	int64_t seq, mbs;     /* tokens per sequence, sequences per micro-batch */
	int64_t vocab;        /* of the data: 256 for text */
	int64_t microbatches; /* per step */
	rt_optimizer optimizer;
	float lr;
	float weight_decay;   /* decoupled, on the tensors with rt_tensor_info.decay */
	float beta1, beta2, eps; /* AdamW; 0: 0.9, 0.999, 1e-8 */
	const char *text_file;   /* the data file(s), rt_data_options; NULL: synthetic tokens */
	/* Data parallelism (docs/runtime.md, "Data parallelism"); all 0: one
	 * replica, as before.  The job is dp replicas of a pipeline; a rank is
	 * (replica, pipe_rank), and sends and receives still name ranks of
	 * MPI_COMM_WORLD. */
	int64_t dp;        /* replicas of the pipeline; 0 or 1: one */
	int64_t replica;   /* this rank's replica, 0 <= replica < dp */
	int64_t pipe_rank; /* this rank's device in its pipeline; the DP group of a rank = the ranks
	                      with its pipe_rank, ordered by replica */
	unsigned dp_flags; /* RT_DP_DISTOPT | RT_DP_EXACT */
	/* The learning-rate schedule and gradient clipping (docs/runtime.md,
	 * "The schedule and clipping"); all 0: lr constant, no clipping. */
	int64_t warmup;      /* steps of linear warm-up to lr */
	rt_decay decay;      /* after the warm-up, down to min_lr ... */
	int64_t decay_steps; /* ... reached at this step (warm-up included) */
	float min_lr;        /* 0 <= min_lr <= lr */
	float clip;          /* the largest global gradient norm; 0: none */
} rt_train;

/* rt_train.dp_flags. */
#define RT_DP_DISTOPT (1u << 0) /* distributed optimizer: each replica updates its shard of a bucket */
#define RT_DP_EXACT (1u << 1)   /* deterministic gradient sums: exact, the same bits for any dp */
/* The int64 digits of one parameter's exact accumulator (RT_DP_EXACT). */
#define RT_EXACT_DIGITS 9

/* One layer of this rank: its index in the whole model and its descriptor
 * (whose seq, mbs must be the rt_train's, and vocab too for the embedding
 * and the head), and whether it starts a gradient bucket (rt_post_coll):
 * a bucket runs from a layer with bucket_start 1 (or the first layer) to
 * the layer before the next one.  With the distributed optimizer
 * (RT_DP_DISTOPT, dp > 1) a layer keeps AdamW moments only for its part
 * of its bucket's shard, and the collectives and updates take exactly the
 * buckets declared here. */
typedef struct rt_layer_spec {
	int64_t index;
	rt_layer_desc desc;
	int32_t bucket_start; /* 1: a bucket starts at this layer; 0: it continues the one before */
} rt_layer_spec;

/* Arena bytes rt_model_init will take for these layers (with RT_DP_DISTOPT
 * and dp > 1: the moments of this replica's shards only); it checks them as
 * rt_model_init does.  ctx, which may be NULL, receives the message of a
 * failure (rt_errmsg, rt_abort), as with every other call. */
int rt_model_bytes(rt_ctx *ctx, const rt_train *t, int n, const rt_layer_spec *layers,
                   size_t *bytes);

/* Sets up this rank's n layers (ascending global index, any subset of the
 * model): parameters initialised from (seed, global index), zero gradients,
 * zero AdamW moments, step 0, data position 0.  Takes rt_model_bytes() from
 * the arena.  Reads the text file when there is one.  Collective: checks
 * that every rank agrees on dp and dp_flags and that each DP group holds
 * replicas 0..dp-1 once each, and makes the DP communicator (dp > 1:
 * MPI_Comm_split(WORLD, pipe_rank, replica), freed by rt_finalize).  A
 * device rank refuses dp > 1 and RT_DP_EXACT. */
int rt_model_init(rt_ctx *ctx, const rt_train *t, int n, const rt_layer_spec *layers);

/* Layers are named by their position h (0 <= h < n) in rt_model_init's list. */
typedef struct rt_layer_info {
	int64_t index;  /* global layer index */
	rt_kind kind;
	rt_sizes sizes; /* of one micro-batch (rt_layer_sizes) */
	float *params;  /* nparams = sizes.params floats; the caller may read them */
} rt_layer_info;

int rt_layer_get(rt_ctx *ctx, int h, rt_layer_info *out);

/* The learning rate of optimizer step `step` (0: the first) under t's
 * schedule: a pure function of the step, so a resumed run continues it. */
float rt_lr_at(const rt_train *t, int64_t step);
/* An evaluation pass (docs/runtime.md, "Evaluation"): between steps, the
 * program's F ops and the activations' sends and receives in the plan's
 * order, on the held-out text loaded by rt_cli_eval_passes: pass p's
 * micro-batch i (global) is held-out sample p x dp x microbatches + i,
 * whatever the plan.  rt_eval_end gives the pass's mean loss on the
 * head's rank of replica 0 (*have 1 there), updates nothing and leaves
 * the step count and the training data where they were. */
int rt_eval_begin(rt_ctx *ctx, int64_t pass);
int rt_eval_end(rt_ctx *ctx, double *loss, int *have_loss);

/* The global gradient norm of the last step ended (over every parameter of
 * the job, exact and the same on every rank and for every plan), or NaN
 * when the step did not compute it (no clipping). */
double rt_grad_norm(const rt_ctx *ctx);

/* Optimizer steps taken, and the data position: the sample index of
 * micro-batch 0 of the next step. */
int64_t rt_step_count(const rt_ctx *ctx);
int64_t rt_data_position(const rt_ctx *ctx);

/* A hash of the parameters and optimizer state of every layer of the model,
 * in global layer order, the same on every rank and for every partition of
 * the layers over ranks.  Replicas hold the same layers: each layer counts
 * once, and replicas whose copies differ are RT_ESTATE naming the layer and
 * the replicas (with RT_DP_DISTOPT the moment shards are gathered, a
 * bucket at a time into a temporary buffer).
 * Collective. */
int rt_model_hash(rt_ctx *ctx, uint64_t *out);

/* ---- a training step ------------------------------------------------------ */

/* Starts a step: clears the per-micro-batch loss and W bookkeeping. */
int rt_step_begin(rt_ctx *ctx);

/* F, B, W of layer h on micro-batch mb (0 <= mb < microbatches) of the
 * current step: the kernels of octo_kernels.h plus what the runtime adds.
 * The embedding reads the tokens of sample data_position + mb itself (x is
 * NULL); the head reads its targets and records the micro-batch's loss
 * (y is NULL) and its B uses dscale = 1 / (tokens of the step) (dy is NULL).
 * act and wstash are the caller's buffers of rt_sizes act and wstash bytes;
 * x and y (dy and dx) may be one buffer of seq*mbs*hidden floats.  W must
 * run in micro-batch order per layer (it adds the gradients, and a float
 * sum depends on its order): anything else is RT_ESTATE. */
int rt_run_f(rt_ctx *ctx, int h, int64_t mb, const float *x, float *y, void *act);
int rt_run_b(rt_ctx *ctx, int h, int64_t mb, const float *dy, float *dx, const void *act,
             void *wstash);
int rt_run_w(rt_ctx *ctx, int h, int64_t mb, const void *wstash);
/* F of layer h again, inside the B of a stage that recomputes its
 * activations (docs/cost-model.md, "Recomputation"): rt_run_f itself, the
 * same kernels on the same input, so the stash it fills holds the same
 * bits; the head records the same loss again.  Traced as "R" (the trace's
 * report counts it in the B it precedes). */
int rt_run_r(rt_ctx *ctx, int h, int64_t mb, const float *x, float *y, void *act);

/* ---- data parallelism: collectives on gradient buckets ------------------- */

/* With dp replicas, `microbatches` is still what the program's ops run
 * over: local micro-batch j of replica r is global micro-batch
 * r*microbatches + j (sample data_position + r*microbatches + j); a step
 * is dp*microbatches micro-batches, the head's dscale 1/(dp*microbatches*
 * mbs*seq), and the data position advances by dp*microbatches.
 *
 * A bucket is the local layers h0..h1 (inclusive, rt_model_init's
 * positions; consecutive layers of one stage).  Its collectives run over
 * the rank's DP group (MPI_Comm_split of the world by pipe_rank, ordered by
 * replica) and are MPI's own non-blocking ones. */
typedef enum rt_coll { RT_ALL_REDUCE, RT_REDUCE_SCATTER, RT_ALL_GATHER, RT_NCOLL } rt_coll;

/* Bytes of the buffer a collective over a bucket of nparams parameters
 * needs (the compiler calls the same formula):
 *   esz = RT_DP_EXACT ? 8*RT_EXACT_DIGITS : 4;  c = ceil(nparams / dp) (the shard);
 *   RT_ALL_REDUCE: nparams*esz;  RT_REDUCE_SCATTER: c*dp*esz;  RT_ALL_GATHER: c*dp*4.
 * -1 for a bad kind or a negative count. */
int64_t rt_coll_bytes(const rt_train *t, int kind, int64_t nparams);

/* Posts a collective over this rank's DP group on the bucket h0..h1; buf is
 * `bytes` bytes (exactly rt_coll_bytes(t, kind, the bucket's parameters),
 * else RT_EARG), untouched by the caller until the wait.
 *   RT_ALL_REDUCE, RT_REDUCE_SCATTER: packs the layers' gradients (layer
 *     order, each layer's parameter order; in exact mode the accumulators'
 *     digits), zero-padded, and posts MPI_Iallreduce (in place) /
 *     MPI_Ireduce_scatter_block (MPI_SUM; MPI_FLOAT, or MPI_INT64_T digits
 *     in exact mode).  Every layer must have run W on every local
 *     micro-batch (RT_ESTATE otherwise).
 *   RT_ALL_GATHER: packs this replica's shard of the parameters (elements
 *     [replica*c, replica*c + c) of the bucket's concatenation) and posts
 *     MPI_Iallgather in place.
 * *req is a handle for rt_wait / rt_waitall, like a send's (the deadline,
 * the wait-for chain and the trace treat it alike; not inside a group).
 * At the wait, a reduction's result goes into the layers' gradients (all
 * of them after an all-reduce, the replica's shard after a reduce-scatter;
 * exact digits rounded once to f32, an overflow RT_ELOSS naming the layer),
 * an all-gather's into the layers' parameters.  With RT_DP_DISTOPT and
 * dp > 1, h0..h1 must be a bucket rt_model_init was given
 * (rt_layer_spec.bucket_start), else RT_EARG.  CPU ranks only. */
int rt_post_coll(rt_ctx *ctx, int kind, int h0, int h1, void *buf, size_t bytes, int *req);

/* Tied embeddings (rt_layer_desc.tied on the embedding and the head;
 * docs/runtime.md, "Tied embeddings"): the step's gradient of the tied
 * table is the sum of the two copies' (the embedding's and the head's).
 * When both are on this rank the runtime sums them itself before the
 * first reduction, update or rt_step_end that reads them.  When the other
 * copy is on another rank (of the same replica), each of the two posts
 * the sum with rt_tie_post on its tied layer h, after its last W of the
 * step and before anything reads the layer's gradient: an in-place
 * MPI all-reduce of the table's gradient (the exact sums' digits in exact
 * mode) between the two, completed by rt_wait / rt_waitall on *req (the
 * deadline, the wait-for chain and the trace as for a collective).  Not
 * inside a group. */
int rt_tie_post(rt_ctx *ctx, int h, int *req);

/* The optimizer step (rt_step_end's AdamW or SGD, the same per-tensor
 * constants and decay flags) of the bucket h0..h1 once its reduction has
 * completed (with dp <= 1 no reduction is needed): with RT_DP_DISTOPT only
 * this replica's shard of the bucket, whose moments are the only ones it
 * holds (h0..h1 must be a declared bucket, as for rt_post_coll), else
 * every element.  Clears the layers' gradients and marks
 * them updated for this step. */
int rt_update(rt_ctx *ctx, int h0, int h1);

/* Ends the step: checks that every local layer ran W on every micro-batch,
 * computes the loss on the rank that holds the head (mean over every token
 * of every micro-batch of the step; *have_loss = 1 there, 0 elsewhere) and
 * fails with RT_ELOSS if it is NaN or infinite, then updates the
 * parameters (AdamW) of the layers rt_update has not, zeroes the gradients
 * and advances the step and the data position.  With dp > 1 every local
 * layer must have been reduced and updated (rt_post_coll, rt_update) during
 * the step, else RT_ESTATE naming the layer; the heads' per-micro-batch
 * losses are gathered to replica 0's head, which alone has the loss (summed
 * in global micro-batch order: the same bits as dp = 1 when the weights
 * are).  loss and have_loss may be NULL. */
int rt_step_end(rt_ctx *ctx, double *loss, int *have_loss);

/* The tokens of one sample (micro-batch): [mbs][seq + 1] int32; sequence b's
 * inputs are its first seq tokens, its targets the last seq. */
int rt_data_sample(const rt_ctx *ctx, int64_t sample, int32_t *tokens);

/* How rt_train.text_file is read (docs/data.md): a comma-separated list of
 * files (shards), concatenated in order into one token stream, each text
 * (a token per byte) or flat little-endian uint16 / uint32 tokens, mapped
 * read-only.  RT_DATA_AUTO: by each file's name: .bin and .u16 are
 * uint16, .u32 uint32, anything else text. */
typedef enum rt_data_format { RT_DATA_AUTO, RT_DATA_TEXT, RT_DATA_U16, RT_DATA_U32 } rt_data_format;
/* What rt_ckpt_load does with a checkpoint trained on other data than
 * this run's: RT_DATA_SAME refuses it (RT_ECKPT, "data mismatch");
 * RT_DATA_RESET starts the new data at sample 0 and RT_DATA_KEEP at the
 * checkpoint's data position, with the model and optimizer state loaded
 * either way (on the same data too). */
typedef enum rt_data_rule { RT_DATA_SAME, RT_DATA_RESET, RT_DATA_KEEP } rt_data_rule;

/* Before rt_model_init: the data's format and the resume rule (both 0 by
 * default).  RT_EARG for a value out of range. */
int rt_data_options(rt_ctx *ctx, int format, int position);

/* ---- communication -------------------------------------------------------- */

/* What a message carries; with the stage and micro-batch it makes the MPI
 * tag, so no two messages in flight between two ranks are confused. */
typedef enum rt_msg { RT_MSG_ACT, RT_MSG_GRAD, RT_MSG_OTHER, RT_NMSG } rt_msg;

typedef struct rt_tag {
	int32_t stage; /* the stage that sends (0 <= stage < 2^10) */
	int32_t mb;    /* micro-batch (0 <= mb < 2^18) */
	rt_msg kind;
} rt_tag;

/* Non-blocking send and receive of exactly `bytes` bytes; *req is a handle
 * for rt_wait.  The buffer must stay untouched until the wait.  A receive
 * that finds a message of another size fails at the wait.  Between
 * rt_group_begin and rt_group_end, req may be NULL: the operations join the
 * group, and rt_group_end gives one handle that completes when all do. */
int rt_send(rt_ctx *ctx, int peer, const void *buf, size_t bytes, rt_tag tag, int *req);
int rt_recv(rt_ctx *ctx, int peer, void *buf, size_t bytes, rt_tag tag, int *req);
int rt_group_begin(rt_ctx *ctx);
int rt_group_end(rt_ctx *ctx, int *req);

/* Waits for a handle (and frees it), polling with a deadline: after the
 * context's timeout, RT_ETIMEOUT naming every operation still pending.
 * RT_NO_REQ is nothing to wait for: the carried wait of an all-gather
 * (docs/dataparallel.md, overlap_param_gather) in the first step, before
 * any was posted.  A collective's handle may outlive the step that posted
 * it: rt_ckpt_save, rt_model_hash and rt_finalize complete every pending
 * collective first (the parameters are whole again), and its handle stays
 * for its wait, which then only frees it. */
#define RT_NO_REQ (-1)
int rt_wait(rt_ctx *ctx, int req);
int rt_waitall(rt_ctx *ctx, int n, const int *reqs);

/* ---- checkpoints ---------------------------------------------------------- */

/* Saves the model and optimizer state as a new generation DIR/gen-NNNNNN
 * (DIR/layer-NNNN.ckpt for every layer, from the rank that holds it, and
 * DIR/manifest from rank 0) and commits it once every rank has written and
 * synced its files: rank 0 renames DIR/current over the old one.  Before
 * the commit the previous save is untouched: a rank that cannot write fails
 * the save on every rank (the others' message names it) and the previous
 * save still loads.  Older generations are removed after the commit.
 * Refuses (RT_ECKPT, naming the layer and tensor) to save a number that is
 * not finite.  Collective. */
int rt_ckpt_save(rt_ctx *ctx, const char *dir);
/* rt_ckpt_save keeping the newest `keep` (>= 1) complete saves in dir: the
 * committed one and keep - 1 before it; the older go only after the new
 * save is committed.  rt_ckpt_save is keep = 1.  Collective. */
int rt_ckpt_save_keep(rt_ctx *ctx, const char *dir, int64_t keep);

/* Before training: that rt_ckpt_save(ctx, dir) can write there.  Rank 0
 * creates DIR if it is missing; every rank writes and removes a file in it.
 * RT_EIO (this rank) or RT_ECKPT (naming the rank that failed).  Collective. */
int rt_ckpt_check(rt_ctx *ctx, const char *dir);

/* Reads the committed save of DIR (the generation DIR/current names): the
 * manifest and this rank's layer files: parameters, AdamW state, step and
 * data position.  Any damage or mismatch with the model, and any number
 * that is not finite, is RT_ECKPT with a message naming the file and what
 * is wrong.  The files are
 * per global layer, so any partition and any number of ranks can load them.
 * Collective: the ranks compare which save they loaded (one all-gather),
 * and ranks that read different saves are RT_ECKPT. */
int rt_ckpt_load(rt_ctx *ctx, const char *dir);

/* ---- trace and profile ---------------------------------------------------- */

/* Writes DIR/trace-rank<R>.json (Chrome trace format: one complete event per
 * F, B, W, send, receive, wait, optimizer step, checkpoint). */
int rt_trace_write(rt_ctx *ctx, const char *dir);

/* Joins DIR/trace-rank0.json ... trace-rank<n-1>.json into one trace file.
 * Needs no context and no MPI (tool: octo-trace-merge). */
int rt_trace_merge(const char *dir, int nranks, const char *out_path, char *err, size_t errlen);

/* Profiling mode: runs F, B, W of every local layer on one micro-batch
 * `warmup` times, then `repeats` times timed, and writes the median times
 * to `path` in the profile format (docs/profile.md), from rank 0.  Leaves
 * the parameters, gradients and step as they were.  Takes its buffers from
 * the arena (and gives them back).  Collective. */
int rt_profile(rt_ctx *ctx, int warmup, int repeats, const char *path);

/* ---- the device (the CUDA target; docs/cuda.md) ------------------------------ */

/* After rt_init and before rt_model_init: this rank's layers run on a
 * device.  Its kernel modules: nmods names and images (the CUDA target's
 * PTX text, or the host emulator's entry tables, linked into the program);
 * layer_mod: per local layer (rt_model_init's order), the index of its
 * module.  bf16: the device stores activations and parameters as bf16
 * (else f32).  The host keeps f32 master parameters and the optimizer
 * state; the device runs F, B and W (rt_device.c).  rt_device_attach_cuda
 * is in libocto_rt_cuda. */
int rt_device_attach_emu(rt_ctx *ctx, int bf16, int nmods, const char *const *names,
                         const void *const *tables, const int32_t *layer_mod);
int rt_device_attach_cuda(rt_ctx *ctx, int bf16, int nmods, const char *const *names,
                          const char *const *ptx, const int32_t *layer_mod);

/* The program's buffer block (activations, stashes, messages) in device
 * memory, once, after rt_device_attach_*. */
int rt_device_buffers(rt_ctx *ctx, size_t bytes, void **base);

/* ---- generated programs (rt_cli.c) ----------------------------------------- */

/* What `octopipe compile` bakes into a rank program for its command line
 * and its report (docs/codegen.md). */
typedef struct rt_prog_info {
	const char *about;   /* --help's description: model, rank, stages, schedule */
	const char *data;    /* the model's data file(s), relative to the executable's
	                        directory unless absolute; NULL: synthetic tokens */
	int32_t data_format; /* how they are read (rt_data_format) unless --data is given */
	int64_t steps;       /* --steps when not given */
	int64_t tokens;      /* tokens per step (microbatches x mbs x seq) */
	double predicted_us; /* the simulator's step time; 0: none */
	int32_t rank;        /* the rank this program must run as */
	int32_t nranks;      /* and the job's size */
	uint64_t compile;    /* the compile's hash (plan, model, seed): the same in
	                        every rank of one compile */
	double peak_flops;   /* the cluster's FLOP/s per device (the metrics' MFU); 0: none */
} rt_prog_info;

/* The training loop's options and state (rt_loop.c), private. */
typedef struct rt_loop rt_loop;

/* The parsed command line, and the step clock of the report. */
typedef struct rt_cli {
	const rt_prog_info *prog;
	int64_t steps;          /* --steps N: steps to train (more, after --resume) */
	const char *data;       /* --data FILE, else prog->data resolved; NULL: synthetic */
	const char *checkpoint; /* --checkpoint DIR: save there after training */
	const char *resume;     /* --resume DIR: load before training */
	const char *trace;      /* --trace DIR: per-rank traces (rt_options.trace_dir) */
	const char *profile;    /* --profile FILE: profiling mode instead of training */
	int32_t data_format;    /* --data-format: rt_data_format (0: by the file names) */
	int32_t data_position;  /* --data-position: rt_data_rule (0: the same data only) */
	int64_t done;           /* steps timed so far */
	double t0;              /* start of the current step, seconds */
	double first_s;         /* the first step's time */
	double rest_s;          /* the sum of the others */
	double last_loss;
	rt_loop *loop;          /* the schedule, clipping, saves, metrics, signals */
	char path[4096];        /* storage for the resolved data path */
} rt_cli;

/* Parses a rank program's arguments (before rt_init: --help needs no MPI).
 * Returns RT_OK; 1 after printing --help (exit 0); RT_EARG after printing
 * "PROGRAM: error: ..." and the usage (exit 2). */
int rt_cli_parse(int argc, char **argv, const rt_prog_info *prog, rt_cli *cli);

/* After rt_init: checks that the job is the one the program was compiled
 * for: rank and size, and every rank's compile hash the same (one
 * all-gather; a mismatch names both ranks and both hashes); passes the
 * data options on (rt_data_options); and, with
 * --checkpoint, that the directory can be written (rt_ckpt_check), before
 * any step runs.  Else an RT_ code with a message for rt_abort.
 * Collective. */
int rt_cli_start(rt_cli *cli, rt_ctx *ctx);

/* The command line's learning-rate schedule and clipping (--warmup,
 * --decay, --decay-steps, --min-lr, --clip) over the compiled settings in
 * t, before rt_model_bytes. */
void rt_cli_train(rt_cli *cli, rt_train *t);

/* Around each training step (rt_step_begin .. rt_step_end): the rank that
 * holds the head prints "step S loss L (HEX) lr X [grad norm N] T tokens/s
 * D ms eta H:MM:SS", rank 0 writes the metrics line, the periodic save
 * runs.  rt_cli_step_end is collective (every rank learns whether any got
 * SIGTERM or SIGINT): RT_OK, 1 when the job stops after this step (then
 * rt_cli_save), or an RT_ code with a message for rt_abort. */
void rt_cli_step_begin(rt_cli *cli);
int rt_cli_step_end(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss);

/* After a step (rt_cli_step_end RT_OK): the evaluation passes to run now
 * (--eval-every N: after every N-th step; 0: none), the held-out text
 * loaded at the first (collective); each pass is rt_eval_begin, the eval
 * walk, rt_eval_end, then rt_cli_eval_end with its loss (after the last
 * pass, collective: rank 0 prints the mean and writes it to the metrics). */
int rt_cli_eval_passes(rt_cli *cli, rt_ctx *ctx);
int rt_cli_eval_end(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss, int pass);

/* After training (or a stop): the --checkpoint save, unless the periodic
 * save has saved this step, keeping --keep saves; after a stop rank 0 says
 * why and what was saved.  Collective. */
int rt_cli_save(rt_cli *cli, rt_ctx *ctx);

/* After training: the summary (the head's rank: mean step time after the
 * first, tokens/s, the prediction) and the model hash (rank 0).
 * Collective (rt_model_hash). */
int rt_cli_finish(rt_cli *cli, rt_ctx *ctx);

/* rt_send and rt_recv with the tag's fields as scalars: generated code
 * calls these, since how a struct passes by value differs between ABIs. */
int rt_post_send(rt_ctx *ctx, int peer, const void *buf, size_t bytes, int stage, int mb,
                 int kind, int *req);
int rt_post_recv(rt_ctx *ctx, int peer, void *buf, size_t bytes, int stage, int mb, int kind,
                 int *req);

#ifdef __cplusplus
}
#endif

#endif
