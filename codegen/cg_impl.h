/* cg_impl.h: codegen's insides, shared by its files and by no one else
 * (the driver sees cg.h only; tests of the lowering include this).
 *
 *   cg_lower_rank   the IR program of one device -> a cg_rank: the rank's
 *                   layers as runtime descriptors, its op table in the
 *                   verified order with buffer offsets, request slots
 *                   (program.c)
 *   cg_emit_object  a cg_rank -> an LLVM module whose main drives libocto_rt
 *                   over the op table; verify, optimise (new pass manager),
 *                   emit an object (host.c)
 *   cg_link_all     objects + libocto_rt.a + MPI + BLAS -> executables (link.c)
 *   cg_build_ranks  every rank's object, linked, and DIR/launch (output.c)
 *   cg_write_outputs  plan.opir, timeline.svg, report.md, the text file
 *                   (output.c; report.md by cg_write_report, report.c)
 *   cg_target_cpu, cg_target_cuda  the two targets (target_cpu.c,
 *                   target_cuda.c), called by cg_compile (compile.c)
 *
 * Everything codegen allocates comes from one arena per compilation; the
 * LLVM objects live in one context per rank module and are disposed in
 * reverse order of creation. */
#ifndef OCTO_CG_IMPL_H
#define OCTO_CG_IMPL_H

#include <stdint.h>

#include "cg.h"
#include "octo_rt.h"
#include "simulate.h"

/* Op kinds of the table a rank program walks, in table order.  R is the
 * F that a recomputing stage's B runs first (rt_run_r), a row of its own
 * before that B. */
#define CG_OPS(X)                                                              \
	X(F, "F") X(B, "B") X(W, "W") X(R, "R") X(SEND, "send") X(RECV, "recv")    \
	X(WAIT, "wait") X(GROUP_BEGIN, "group{") X(GROUP_END, "}group")            \
	X(COLL, "coll") X(UPDATE, "update") X(TIE, "tie")
typedef enum cg_op_kind {
#define X(e, s) CG_##e,
	CG_OPS(X)
#undef X
	CG_NOPS
} cg_op_kind;
extern const char *const cg_op_names[CG_NOPS];

/* One row of a rank's op table, baked into the program as a constant
 * (host.c mirrors this struct field for field).  Offsets are bytes from
 * the rank's buffer block, -1 for "none" (a NULL pointer). */
typedef struct cg_op {
	int32_t kind;   /* cg_op_kind */
	int32_t h0, h1; /* F, B, W, R: the stage's local layers (positions in the layer table);
	                 * coll, update: the bucket's */
	int32_t mb;     /* micro-batch */
	int32_t peer;   /* send, recv: the other rank */
	int32_t tstage; /* send, recv: the tag's stage (the sending stage) */
	int32_t tkind;  /* send, recv: the tag's rt_msg; coll: its rt_coll */
	int32_t req;    /* send, recv, coll, wait, group end: request slot; -1: none (in a group) */
	int64_t bytes;  /* send, recv, coll */
	int64_t in;     /* F, R: x of the first layer; B: dy of the last; send, recv, coll: the buffer */
	int64_t out;    /* F, B, R: the chain buffer between the stage's layers */
	int64_t last;   /* F, R: y of the last layer; B: dx of the first */
	int64_t act;    /* F, B, R: the stage's activation stash */
	int64_t ws;     /* B, W: the stage's W stash */
} cg_op;

typedef struct cg_rank {
	int rank, nranks;
	int nlayers;            /* local layers, ascending global index */
	rt_layer_spec *layers;
	int64_t *act_at;        /* per local layer: its slice of the stage's act stash */
	int64_t *ws_at;         /* and of its W stash */
	cg_op *ops;
	int nops;
	int nreqs;              /* request slots */
	int nend;               /* slots 0..nend-1 are waited for at the end of each step */
	uint64_t buf_bytes;     /* the buffer block (offsets above) */
	uint64_t prof_bytes;    /* arena room rt_profile needs */
	uint64_t ir_arena;      /* the memplan pass's arena for this device: the buffer
	                         * block, less a one-stage program's work buffer */
	int nbufs;              /* buffers in the block */
	rt_train train;         /* text_file NULL: see prog.data */
	rt_prog_info prog;

	/* A device rank (the CUDA targets; CG_TARGET_CPU on CPU ranks): its
	 * kernel modules and which one each local layer uses. */
	int dev;                /* cg_target */
	bool bf16;
	int nmods;
	char **mod_names;
	char **mod_ptx;         /* CG_TARGET_CUDA: the PTX text of each module */
	int32_t *layer_mod;     /* [nlayers] */
} cg_rank;

/* What a target is handed besides the module and the options: the
 * simulated step of the plan (NULL: the layers have no costs), made once
 * by cg_compile. */
typedef struct cg_job {
	const ir_module *m;
	const cg_options *o;
	const sim_result *r;
} cg_job;

/* The ranks of the job: dp replicas of the module's pipeline devices
 * (docs/dataparallel.md). */
static inline int cg_nranks(const ir_module *m)
{
	return (int)(ir_dp(m) * m->ndevices);
}

/* The ranks of the job from the pipeline devices' lowered programs
 * (pipe[p], cg_lower_rank): rank k is device p of replica r under the
 * plan's rank order, with its peers, rank numbers and replica filled in.
 * out has cg_nranks(m) entries. */
void cg_replicate(const ir_module *m, const cg_rank *pipe, arena *a, cg_rank *out);

/* mkdir -p dir.  Returns 0, or -1 after a diagnostic. */
int cg_make_dir(const char *dir);

/* "cannot WHAT 'PATH': strerror(errno)" through the one printer; -1. */
int cg_fail_path(const char *what, const char *path);

/* Lower device d's program.  With `device`, the buffers have the device
 * executor's stash sizes and values the model's dtype (dev_layer_sizes),
 * else the CPU kernels' and f32; the offsets are the memory plan's.
 * predicted_us: the simulated step the rank reports against (0: none).
 * Returns 0, or -1 after a diagnostic (a layer the runtime cannot run, W
 * out of micro-batch order, values or measured stashes whose sizes are not
 * the runtime's, no memory plan). */
int cg_lower_rank(const ir_module *m, double predicted_us, int d, bool device, arena *a,
                  cg_rank *out);

/* Build, verify, optimise and emit rank's host program: the object file
 * obj_path and, when ll_path is not NULL, the optimised module as text.
 * Returns 0, or -1 after a diagnostic (LLVM's message, with what it was
 * doing). */
int cg_emit_object(const cg_rank *rank, const char *name, const char *obj_path,
                   const char *ll_path);

/* Link obj_paths[i] with libocto_rt.a, MPI, OpenBLAS and libm into
 * exe_paths[i], i < n, with the C compiler CMake used as the linker driver
 * (one process each, in parallel).  Returns 0 or -1. */
int cg_link_all(int n, char **obj_paths, char **exe_paths);

/* The same for device ranks: each rank's object with its kernel modules'
 * host objects (mods[i], NULL-terminated; the emulator) or with
 * libocto_rt_cuda.a, cudart, cuBLAS and NCCL (CUDA; their directory as the
 * run path). */
int cg_link_device(int n, char **obj_paths, char ***mods, char **exe_paths, cg_target target);

/* DIR/report.md: the plan, the baselines the driver compared it with, the
 * lower bound, the predicted step time and what each rank holds. */
int cg_write_report(const cg_job *j, const cg_rank *ranks, const char *path);

/* plan.opir, timeline.svg, report.md and the text file into DIR: what
 * every target writes besides the executables. */
int cg_write_outputs(const cg_job *j, const cg_rank *ranks);

/* Every rank's object (host.c), linked (with the emulator's kernel
 * objects mods[d] for a CG_TARGET_CUDA_EMU rank d, else NULL), objects
 * removed unless kept, and DIR/launch.  Returns 0 or -1. */
int cg_build_ranks(const cg_job *j, const cg_rank *ranks, char ***mods);

/* The CPU target (target_cpu.c): every rank's executable, DIR/launch, the
 * outputs.  The module is proven for the mpi backend. */
int cg_target_cpu(const cg_job *j);

/* The CUDA targets (target_cuda.c): the kernel modules of every layer
 * (NVRTC for the arch, DIR/NAME.cu, .ptx when asked; or, for the emulator,
 * compiled by the host C++ compiler), one rank executable per device whose
 * layers run on the device, and the outputs.  The module is proven for
 * nccl. */
int cg_target_cuda(const cg_job *j);

#endif
