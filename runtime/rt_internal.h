/* rt_internal.h: the context of one rank, shared by the runtime's files,
 * and the functions they share, each under the file that defines it
 * (docs/runtime.md, "Files").  Bottom to top: rt_util.c (failure, clock,
 * hashing, names, files), rt_arena.c, rt_trace.c, rt_comm.c, rt_optim.c
 * (AdamW), rt_exact.c (exact sums), rt_data.c (the tokens), the executors
 * (rt_exec.h: rt_exec_cpu.c, rt_device.c), rt_dp.c (data parallelism:
 * the DP group, bucket collectives, the sharded update), rt_model.c
 * (layers and the step),
 * rt_ckpt.c, rt_profile.c, rt_cli.c, and rt_life.c (init, finalize) on
 * top.  Private. */
#ifndef OCTO_RT_INTERNAL_H
#define OCTO_RT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <mpi.h>

#include "layers.h"
#include "octo_rt.h"

/* One layer of this rank. */
typedef struct rt_lay {
	int64_t index; /* global */
	rt_layer_desc desc;
	rt_sizes sz;
	uint64_t shape_hash; /* of the tensor table: the checkpoint's shape check */
	float *p, *g;   /* parameters, gradients: sz.params floats each */
	float *m, *v;   /* AdamW moments of parameters [mlo, mhi): mhi - mlo floats each */
	int64_t mlo, mhi; /* RT_DP_DISTOPT with dp > 1: its part of its bucket's shard (maybe
	                     empty); else 0, sz.params */
	int b0, b1;     /* its bucket: local layers b0..b1 (rt_layer_spec.bucket_start) */
	int64_t *acc;   /* RT_DP_EXACT: RT_EXACT_DIGITS per parameter (rt_exact.c); else NULL */
	int64_t next_w; /* the micro-batch whose W comes next this step */
	int red;        /* this step's reduction: RT_RED_... */
	bool updated;   /* rt_update has run on it this step */
	bool pending;   /* with clipping: rt_update left its update [ua, ub) to rt__clip */
	int64_t ua, ub;
} rt_lay;

/* The bytes of each of a layer's moment arrays. */
static inline size_t rt__mom_bytes(const rt_lay *l)
{
	return (size_t)(l->mhi - l->mlo) * sizeof(float);
}

/* rt_lay.red */
enum { RT_RED_NONE, RT_RED_POSTED, RT_RED_ALL, RT_RED_SHARD };

/* One pending communication handle: a send or receive, or a group. */
typedef struct rt_op {
	int peer; /* -1: a collective of the DP group */
	rt_tag tag;
	size_t bytes;
	bool send;
	bool done; /* completed and checked (a failed wait may leave others pending) */
	bool dcomm; /* the device's communicator moves it (its MPI request is null) */
	void *stage; /* a device rank over MPI: the host copy the message moves through */
	void *dst;   /* and, for a receive, where it goes on the device */
	/* a collective (rt_dp.c): its rt_coll kind (-1: a message), the
	 * bucket, its buffer, and what completes it at the wait */
	int coll, h0, h1;
	void *cbuf;
	int (*finish)(rt_ctx *ctx, const struct rt_op *op);
} rt_op;

typedef struct rt_req {
	bool used;
	int n;            /* MPI requests (1, or a group's) */
	MPI_Request *mr;  /* [n] */
	rt_op *ops;       /* [n]: what each is, for messages */
	int cap;
	void *done;       /* the device communicator's group: its completion */
} rt_req;

/* A device's own communicator (NCCL; runtime/cuda/rt_cuda.c): point-to-point
 * on device buffers, in groups; a group's completion is a handle that
 * test() polls.  With data parallelism it also holds a communicator of the
 * rank's DP group (dp_init, once), whose collectives join a group as its
 * sends and receives do, with NCCL's semantics: in place on buf, count
 * elements per rank, f32 or (i64) int64, summed; the all-reduce's result
 * in all of buf, the reduce-scatter's shard of replica r at its own place
 * (elements r*count ..), the all-gather's contribution of replica r read
 * from there.  Every call returns RT_OK or an RT_ code with the message
 * in error(). */
typedef struct rt_dcomm {
	void *self;
	int (*group_begin)(void *self);
	int (*send)(void *self, const void *buf, size_t bytes, int peer);
	int (*recv)(void *self, void *buf, size_t bytes, int peer);
	int (*dp_init)(void *self, MPI_Comm dpc); /* dpc: the DP group, ranked by replica */
	int (*coll)(void *self, int kind, void *buf, size_t count, bool i64); /* kind: rt_coll */
	int (*group_end)(void *self, void **done);
	int (*test)(void *self, void *done, bool *complete);
	void (*release)(void *self, void *done);
	const char *(*error)(void *self);
	void (*destroy)(void *self); /* NULL: it ends with its device */
} rt_dcomm;

typedef struct rt_event {
	int64_t t0, t1; /* ns since the context's origin */
	void *m0, *m1;  /* the executor's marks around it, until rt__trace_settle reads them */
	bool marked;    /* t0, t1 are its marks' (the executor's work), not the host's call */
	int64_t layer, mb, step, peer, bytes;
	char name[16]; /* F B W send recv wait step ckpt all-reduce ... */
} rt_event;

/* What a rank is doing, as it tells a rank that asks (rt_comm.c: the
 * wait-for chain a timeout follows to the rank that is stuck). */
enum { RT_WS_RUNNING, RT_WS_SEND, RT_WS_RECV, RT_WS_COLL };
typedef struct rt_waitstate {
	int64_t state; /* RT_WS_... */
	int64_t peer, stage, mb, kind, bytes; /* RT_WS_SEND, RT_WS_RECV: the operation */
} rt_waitstate;

#define RT_NTELL 8 /* answers in flight at once */

/* A token stream as rt_data.c holds it in the context (rt__data_swap). */
typedef struct rt_stream {
	struct rt_shard *shards;
	int nshards, tok_width;
	uint64_t ntok, data_sum;
} rt_stream;

struct rt_ctx {
	int rank, world;
	bool mpi_owned; /* rt_init initialised MPI */
	unsigned flags;
	double timeout_s;
	char err[768];
	int64_t origin_ns; /* CLOCK_MONOTONIC at init, after a barrier */

	/* arena */
	unsigned char *arena;
	size_t arena_size, arena_top, arena_peak;

	/* communication */
	rt_req *reqs;
	int nreqs;
	int group; /* the open group's handle, or -1 */

	/* the wait-for chain: a communicator of its own, a question always
	 * posted, and what this rank is waiting for */
	MPI_Comm ctl;          /* MPI_COMM_NULL until set up */
	MPI_Request ask;       /* the posted receive of a question */
	int ask_buf;
	rt_waitstate waiting;
	struct {
		rt_waitstate ws;
		MPI_Request req;
	} tell[RT_NTELL];
	int next_tell;

	/* model */
	bool have_model;
	rt_train train;
	/* the data (rt_data.c): its files mapped read-only, one token stream;
	 * nshards 0: synthetic tokens */
	int data_format, data_position; /* rt_data_options */
	struct rt_shard *shards;        /* [nshards] */
	int nshards;
	int tok_width;     /* bytes per token: 1 (text), 2, 4 */
	uint64_t ntok;     /* tokens of the stream */
	uint64_t data_sum; /* FNV-1a of every shard's bytes in order */
	int nlay;
	rt_lay *lay; /* [nlay] (arena) */
	void *scratch;
	int head; /* the local head layer, or -1 */
	int32_t *tokbuf; /* [mbs][seq+1] */
	int32_t *idbuf;  /* [mbs*seq] */
	double *mb_loss; /* [microbatches] */
	int64_t *mb_count;
	int64_t step, data_pos;
	bool in_step;
	/* the running step's optimizer settings: train with the schedule's lr
	 * (rt_sched.c), what every executor's update reads */
	rt_train opt;
	bool clipped;     /* this step's norm is taken and its updates done */
	double grad_norm; /* of the last step clipped; NaN: none */
	/* evaluation (rt_eval.c): the held-out text, and while a pass runs the
	 * training's data position and text, put aside */
	bool evaluating, have_eval;
	rt_stream eval; /* the held-out data; the training's while a pass runs */
	int64_t saved_pos;
	/* data parallelism (rt_dp.c): train.dp >= 1 once set up; the DP group
	 * (MPI_COMM_SELF when dp is 1) */
	MPI_Comm dpc;
	/* tied embeddings (rt_tie.c): the local tied embedding and head (-1:
	 * none), the communicator with the other copy's rank (MPI_COMM_NULL:
	 * none, or both copies here) and that rank, this step's sum */
	int tie_h[2];
	MPI_Comm tiec;
	int tie_peer;
	int tie_state; /* RT_TIE_... */

	/* the executor (rt_exec.h): the table chosen once, and its own state
	 * (rt_device.c's; NULL on a CPU rank), opaque to every other file */
	const struct rt_exec *exec;
	struct rt_exec_state *xs;
	/* how the messages move on a device rank (set when it is attached):
	 * the device's communicator (NULL: MPI), and whether MPI moves host
	 * copies (device memory the host cannot read) */
	const rt_dcomm *dcomm;
	bool comm_stage;

	/* trace */
	char *trace_dir;
	rt_event *ev;
	size_t nev, evcap;
	size_t settled;     /* ev[0..settled) hold no marks */
	void *mark0;        /* the executor's mark at mark0_ns (ns since origin), its work idle */
	int64_t mark0_ns;
};

/* ---- rt_util.c: the leaf ---- */

/* Records a failure: formats the message into ctx->err (unless ctx is NULL)
 * and returns code. */
int rt__fail(rt_ctx *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* MPI's error string for rc. */
const char *rt__mpierr(int rc, char *buf);

int64_t rt__now_ns(void);

/* 64-bit FNV-1a, continued from h (start with RT_FNV_INIT). */
#define RT_FNV_INIT 0xcbf29ce484222325ull
uint64_t rt__fnv(uint64_t h, const void *p, size_t n);

/* Opens an input file for reading without blocking on it (a FIFO with no
 * writer would block open() and read() forever): the descriptor, with *st
 * filled, or -1 with errno set.  -2 (st filled): not a regular file --
 * rt__file_kind(st) says what it is (a directory, a pipe, a character
 * device ...); a reader refuses it, since it has no size to read to. */
struct stat;
int rt__open_regular(const char *path, struct stat *st);
const char *rt__file_kind(const struct stat *st);
/* fopen(path, "w") that cannot block: a FIFO without a reader fails
 * (ENXIO) instead of waiting for one. */
FILE *rt__create_out(const char *path);
/* Before the first step: the profile file can be written, so that it is
 * not found unwritable only after the run.  RT_EIO with a message, or
 * RT_OK. */
int rt__out_check(rt_ctx *ctx, const char *what, const char *path);

/* The kind's name (rt__kind_name) is runtime/cpu/layers.h's. */

/* The most steps, and samples of data, a context counts to: a checkpoint
 * beyond it is refused at load, and a step that would pass it at
 * rt_step_begin, so that neither counter can overflow (a loaded step of
 * 2^63 - 2 trained on at step -2^63 and exited 0). */
#define RT_MAX_COUNT (INT64_C(1) << 62)

/* The number of the step a message names: the one running, or the one
 * rt_step_end is ending, counted from 1 as the progress lines count
 * (rt_step_count after that step). */
static inline long long rt__step_no(const rt_ctx *ctx)
{
	return (long long)ctx->step + 1;
}

/* ---- rt_trace.c ---- */

/* Adds a trace event (when tracing) from t0 to now. */
void rt__trace(rt_ctx *ctx, const char *name, int64_t t0, int64_t layer, int64_t mb, int64_t peer,
               int64_t bytes);
/* F, B and W on an executor with marks (a device, whose work runs after
 * the call returns): rt__trace_mark before and after the call, then
 * rt__trace_marked instead of rt__trace.  The event keeps the host's times
 * until rt__trace_settle, after the executor's work is done (rt_step_end,
 * rt_finalize), gives it the marks' times: those of the work itself, on
 * the host's clock through a mark taken while the executor was idle.  No
 * marks (NULL) when not tracing or on the host.  A trace is a diagnostic:
 * a mark that fails leaves the host's times. */
void rt__trace_mark(rt_ctx *ctx, void **m);
void rt__trace_marked(rt_ctx *ctx, const char *name, int64_t t0, void *m0, void *m1,
                      int64_t layer, int64_t mb);
void rt__trace_settle(rt_ctx *ctx);
/* The marks freed (before the executor is). */
void rt__trace_drop(rt_ctx *ctx);
/* Before the first step: the trace directory (rt_init's) can take this
 * rank's trace.  RT_EIO with a message, or RT_OK. */
int rt__trace_check(rt_ctx *ctx);

/* ---- rt_comm.c ---- */

int rt__comm_free_all(rt_ctx *ctx);
/* The wait-for chain's communicator and its posted question (rt_init),
 * and their end (rt_finalize). */
int rt__ctl_init(rt_ctx *ctx);
void rt__ctl_free(rt_ctx *ctx);
/* Completes a non-blocking collective (posted: the MPI code of posting it)
 * against the context's deadline, so a stuck rank cannot hang the others
 * in a collective either.  RT_OK, or RT_EMPI / RT_ETIMEOUT with "WHAT: ...". */
int rt__coll(rt_ctx *ctx, int posted, MPI_Request *r, const char *what);
/* Lets MPI progress the pending operations (cheap; called around kernels). */
void rt__progress(rt_ctx *ctx);
/* A collective's handle (rt_dp.c): *op joins a new handle *req, and *mr is
 * the MPI request to post it into; after a failed post, rt__coll_drop. */
int rt__coll_req(rt_ctx *ctx, const rt_op *op, int *req, MPI_Request **mr);
void rt__coll_drop(rt_ctx *ctx, int req);
/* A collective of the DP group through the device's communicator
 * (ctx->dcomm->coll, count elements per rank of buf): a group of its own
 * under a new handle *req, whose wait completes the group and then calls
 * op->finish. */
int rt__coll_dcomm(rt_ctx *ctx, const rt_op *op, void *buf, size_t count, bool i64, int *req);

/* Completes every collective still pending (a carried all-gather of the
 * last step, overlap_param_gather) before anything outside the program
 * reads the parameters; the handles stay for the program's waits. */
int rt__comm_drain(rt_ctx *ctx);

/* ---- rt_optim.c: the optimizer's math, the same on every executor ---- */

/* The settings 0 stands for (docs/runtime.md). */
rt_train rt__optim_defaults(const rt_train *t);
/* The optimizer's constants for one tensor at step `step` (1-based): the
 * host's AdamW and the device's (codegen/cuda_lib.cu's adamw) use the same. */
typedef struct rt_adamw_k {
	float lr, step_size, b1, b2, c1, c2, eps, bc2_sqrt, keep;
	int sgd;
} rt_adamw_k;
void rt__adamw_consts(const rt_train *t, int64_t step, bool decay, rt_adamw_k *k);
/* The optimizer step of one tensor of n values on the host. */
void rt__adamw(const rt_adamw_k *k, float *p, const float *g, float *m, float *v, int64_t n);
/* The tensors of a layer (offset and length in its parameters) and which
 * of them decay: *n of at most RT_MAX_TENSORS. */
int rt__decays(const rt_layer_desc *d, int64_t *off, int64_t *len, bool *dec, int *n);
/* The optimizer step `step` of elements [lo, hi) of a layer's parameters,
 * each with its own tensor's constants (a range may span tensors); m and v
 * hold the moments of the elements from mo on (m[0] is element mo's). */
int rt__optim_range(const rt_train *t, int64_t step, const rt_layer_desc *d, float *p,
                    const float *g, float *m, float *v, int64_t lo, int64_t hi, int64_t mo);

/* ---- rt_exact.c: exact sums (RT_DP_EXACT) ---- */

/* Adds x[0..n) into the accumulators acc[n][RT_EXACT_DIGITS]: -1, or the
 * index of a value that is not finite (nothing added from it on). */
int64_t rt__exact_add(int64_t *acc, const float *x, int64_t n);
/* The accumulators rounded once to the nearest f32 (ties to even): -1, or
 * the index of one that overflows (out from it on is unset). */
int64_t rt__exact_round(const int64_t *acc, float *out, int64_t n);
/* Adds the squares of x[0..n) (each x*x rounded to f32) into the one
 * accumulator acc[RT_EXACT_DIGITS], normalised on return (so accumulators
 * of up to 2^31 ranks add digit by digit): -1, or the index of a value
 * whose square is not finite (nothing added from it on). */
int64_t rt__exact_sumsq(int64_t *acc, const float *x, int64_t n);
/* The value of an accumulator as a double: the same digits, the same bits. */
double rt__exact_value(const int64_t *acc);

/* ---- rt_sched.c: the learning-rate schedule, gradient clipping ---- */

/* The schedule's and clipping's settings (rt_model_bytes, rt_model_init):
 * RT_EARG naming the setting, or RT_OK.  ctx may be NULL. */
int rt__sched_check(rt_ctx *ctx, const rt_train *t);
/* At rt_step_begin: ctx->opt for this step. */
void rt__sched_begin(rt_ctx *ctx);
/* With clipping (train.clip > 0), once a step, after every local layer's
 * gradient is final (every rt_update of the step, or at rt_step_end):
 * the global norm (a collective of every rank of the job), the gradients
 * scaled by min(1, clip / norm), then the updates rt_update left pending.
 * Called by rt_post_coll before the step's first all-gather and by
 * rt_step_end, so every rank calls it at the same point of its step. */
int rt__clip(rt_ctx *ctx);

/* ---- rt_eval.c: forward-only passes over held-out data ---- */

/* The held-out data (collective: every rank the same files, each read by
 * its name: .bin, .u16 uint16, .u32 uint32 tokens, else text); once. */
int rt__eval_load(rt_ctx *ctx, const char *path);
void rt__eval_free(rt_ctx *ctx);

/* ---- rt_data.c: the tokens ---- */

/* Maps the data files (path: rt_train.text_file, a comma-separated list;
 * NULL: synthetic tokens), checks every token against the vocabulary, and
 * checks that every rank trains on the same data with the same resume
 * rule (one all-gather).  Needs ctx->train. */
int rt__data_load(rt_ctx *ctx, const char *path);
void rt__data_free(rt_ctx *ctx);
/* Exchanges the context's token stream with *s (an empty one: nothing
 * mapped). */
void rt__data_swap(rt_ctx *ctx, rt_stream *s);
/* The format the first file of path is read as (rt_data_format, never
 * AUTO): rt_model_bytes' check of text against the vocabulary. */
int rt__data_format_of(const rt_ctx *ctx, const char *path);
/* The data's identity as a checkpoint's manifest writes it after "data ":
 * "synthetic", or "FORMAT 0xHASH" (text, u16, u32). */
void rt__data_ident(const rt_ctx *ctx, char *buf, size_t len);
/* At a resume (rt_ckpt_load): the checkpoint's data identity (as
 * rt__data_ident writes it) and data position; *pos gets the position to
 * train on from, by the resume rule (rt_data_options), or RT_ECKPT naming
 * the manifest (path) when the data differ and no rule was given. */
int rt__data_resume(rt_ctx *ctx, const char *path, const char *ident, int64_t saved, int64_t *pos);
/* The inputs (targets: false) or targets of micro-batch mb of the current
 * step into ctx->idbuf. */
void rt__fill_ids(rt_ctx *ctx, int64_t mb, bool targets);

/* ---- rt_dp.c: data parallelism (above the executors, below rt_model.c) ---- */

/* After the layers are set up (rt_model_init; collective): the fields
 * checked against every rank's, the DP communicator made. */
int rt__dp_init(rt_ctx *ctx);
/* rt_tie.c: tied embeddings.  The communicator (after rt__dp_init;
 * collective), freed by rt__tie_free.  rt__tie_ready: before fn reads the
 * gradients of local layer h, the tied sum taken (both copies here) or
 * checked done (RT_ESTATE otherwise); nothing for an untied layer.
 * rt__tie_counts: a tied head's table, elements [off, off + n), which the
 * gradient norm counts once (the embedding's copy). */
int rt__tie_init(rt_ctx *ctx);
void rt__tie_free(rt_ctx *ctx);
bool rt__tied(const rt_ctx *ctx, int h);
int rt__tie_ready(rt_ctx *ctx, int h, const char *fn);
bool rt__tie_counts(const rt_ctx *ctx, int h, int64_t *off, int64_t *n);
enum { RT_TIE_NONE, RT_TIE_POSTED, RT_TIE_DONE };
/* rt_op.coll of the tied gradient's all-reduce (after rt_coll's kinds) */
#define RT_TIE_COLL RT_NCOLL
void rt__dp_free(rt_ctx *ctx);
/* Layer h's gradients of the step into l->g from the exact accumulators
 * (RT_DP_EXACT, no reduction), which are cleared; an overflow names the
 * layer. */
int rt__dp_round(rt_ctx *ctx, int h);
/* rt_step_end with dp > 1: every layer reduced and updated. */
int rt__dp_check_updated(rt_ctx *ctx);
/* The head of each replica: its micro-batches' losses to replica 0's head,
 * which gets the step's loss in global micro-batch order (*have 1 there). */
int rt__dp_loss(rt_ctx *ctx, double *loss, int64_t *count, int *have);
/* Whether the moments are sharded (RT_DP_DISTOPT with dp > 1), and the
 * shard [*lo, *hi) of replica t->replica of a bucket of n parameters: c =
 * ceil(n / dp) (returned), elements [replica*c, replica*c + c) cut to n.
 * rt_model.c's layout and rt_dp.c's collectives use the same. */
bool rt__dp_sharded(const rt_train *t);
int64_t rt__dp_shard(const rt_train *t, int64_t n, int64_t *lo, int64_t *hi);
/* Calls fn(ctx, h, m, v, arg) for every layer h in order with its whole
 * AdamW moments (a save, the hash): its own arrays, or when sharded the
 * bucket's shards gathered from the DP group into temporary buffers, freed
 * after the bucket.  After a failure of fn it calls fn no more but goes on
 * gathering, so that the other replicas are not left waiting, and returns
 * that failure.  Collective over the DP groups when sharded. */
typedef int rt_moments_fn(rt_ctx *ctx, int h, const float *m, const float *v, void *arg);
int rt__dp_moments(rt_ctx *ctx, rt_moments_fn *fn, void *arg);

/* ---- rt_device.c ---- */
struct rt_dev;
/* Makes the device ctx's executor (before rt_model_init, once; on failure
 * the device is destroyed): its layers run module layer_mod[i], its
 * messages move through dcomm (NULL: MPI, through host copies when stage). */
int rt__dev_attach(rt_ctx *ctx, struct rt_dev *dev, const int32_t *layer_mod, const rt_dcomm *dcomm,
                   bool stage);

/* ---- rt_metrics.c: the metrics file (rank 0) ---- */

typedef struct rt_metrics_row {
	int64_t step;
	double loss, lr, grad_norm, tokens_per_s, mfu, step_time_s, predicted_step_time_s, eta_s;
} rt_metrics_row; /* NaN: null */
/* The file, truncated (appended to when `append`), without blocking on a
 * FIFO; RT_EIO with a message. */
int rt__metrics_open(rt_ctx *ctx, const char *path, bool append, FILE **out);
int rt__metrics_write(rt_ctx *ctx, FILE *f, const char *path, const rt_metrics_row *r);
/* An evaluation's line: {"step", "eval_loss", "eval_batches"}. */
int rt__metrics_eval(rt_ctx *ctx, FILE *f, const char *path, int64_t step, double loss,
                     int64_t batches);

/* ---- rt_loop.c: the generated programs' training loop ---- */

rt_loop *rt__loop_new(void);
void rt__loop_free(rt_loop *L);
/* The option named by flag[0..len): its index, or -1 when it is not one
 * of the loop's; rt__loop_set parses its value (NULL, or what it needs). */
int rt__loop_option(const char *flag, size_t len);
const char *rt__loop_set(rt_loop *L, int k, const char *value);
const char *rt__loop_name(int k);
void rt__loop_usage(FILE *f);
/* The options every rank must share, as one number (never 0). */
uint64_t rt__loop_key(const rt_loop *L);
/* rt_cli_start's part: the options' checks, the signal handlers, the
 * metrics file. */
int rt__loop_start(rt_cli *cli, rt_ctx *ctx);
/* rt_cli_step_end's part, dt the step's seconds (collective). */
int rt__loop_step(rt_cli *cli, rt_ctx *ctx, double loss, int have_loss, double dt);

#endif
