/* cg.h: code generation: a proven, lowered module -> per-rank executables
 * (docs/codegen.md).
 *
 *   cg_lower_rank   the IR program of one device -> a cg_rank: the rank's
 *                   layers as runtime descriptors, its op table in the
 *                   verified order with buffer offsets, request slots
 *                   (program.c)
 *   cg_host_module  a cg_rank -> an LLVM module whose main drives libocto_rt
 *                   over the op table (host.c)
 *   cg_emit_object  verify, optimise (new pass manager), emit an object
 *   cg_link_all     objects + libocto_rt.a + MPI + BLAS -> executables (link.c)
 *   cg_write_report DIR/report.md (report.c)
 *   cg_compile_cpu  all of the above for every rank, plus DIR/launch
 *
 * Everything codegen allocates comes from one arena per compilation; the
 * LLVM objects live in one context per rank module and are disposed in
 * reverse order of creation. */
#ifndef OCTO_CG_H
#define OCTO_CG_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "octo_rt.h"
#include "simulate.h"

typedef struct cg_options {
	const char *dir;   /* output directory (created if missing) */
	bool emit_llvm;    /* also write DIR/rankN.ll (the optimised module) */
	bool emit_obj;     /* keep DIR/rankN.o */
	bool quiet;        /* no progress lines on stdout */
} cg_options;

/* Op kinds of the table a rank program walks, in table order. */
#define CG_OPS(X)                                                              \
	X(F, "F") X(B, "B") X(W, "W") X(SEND, "send") X(RECV, "recv")              \
	X(WAIT, "wait") X(GROUP_BEGIN, "group{") X(GROUP_END, "}group")
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
	int32_t h0, h1; /* F, B, W: the stage's local layers (positions in the layer table) */
	int32_t mb;     /* micro-batch */
	int32_t peer;   /* send, recv: the other rank */
	int32_t tstage; /* send, recv: the tag's stage (the sending stage) */
	int32_t tkind;  /* send, recv: the tag's rt_msg */
	int32_t req;    /* send, recv, wait, group end: request slot; -1: none (in a group) */
	int64_t bytes;  /* send, recv */
	int64_t in;     /* F: x of the first layer; B: dy of the last; send, recv: the buffer */
	int64_t out;    /* F, B: the chain buffer between the stage's layers */
	int64_t last;   /* F: y of the last layer; B: dx of the first */
	int64_t act;    /* F, B: the stage's activation stash */
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

	/* A device rank (the CUDA target; CG_DEV_NONE on CPU ranks): its
	 * kernel modules and which one each local layer uses. */
	int dev;                /* cg_dev */
	bool bf16;
	int nmods;
	char **mod_names;
	char **mod_ptx;         /* CG_DEV_CUDA: the PTX text of each module */
	int32_t *layer_mod;     /* [nlayers] */
} cg_rank;

/* What runs a rank's layers: the CPU, a GPU (CUDA), or the host emulator
 * of the CUDA path (the same kernels compiled for the host). */
typedef enum cg_dev { CG_DEV_NONE, CG_DEV_CUDA, CG_DEV_EMU } cg_dev;

/* mkdir -p dir.  Returns 0, or -1 after a message. */
int cg_make_dir(const char *dir);

/* Lower device d's program.  With `device`, the buffers have the device
 * executor's stash sizes and values the model's dtype (dev_layer_sizes),
 * else the CPU kernels' and f32; the offsets are the memory plan's.
 * Returns 0, or -1 after a diagnostic (a layer the runtime cannot run, W
 * out of micro-batch order, values or measured stashes whose sizes are not
 * the runtime's, no memory plan). */
int cg_lower_rank(const ir_module *m, const sim_result *r, int d, bool device, arena *a,
                  cg_rank *out);

/* Build, verify, optimise and emit rank's host program: the object file
 * obj_path and, when ll_path is not NULL, the optimised module as text.
 * Returns 0, or -1 after a message (LLVM's, with what it was doing). */
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
int cg_link_device(int n, char **obj_paths, char ***mods, char **exe_paths, cg_dev dev);

/* DIR/launch: runs DIR/rank0 .. rank{N-1} under mpirun in MPMD form. */
int cg_write_launch(const ir_module *m, const char *dir);

/* DIR/report.md: the plan, the baselines, the lower bound, the predicted
 * step time and what each rank holds. */
int cg_write_report(const ir_module *m, const sim_result *r, const cg_rank *ranks,
                    const char *path);

/* The whole CPU target: every rank's executable, DIR/launch, the text file
 * the model trains on (copied next to them).  The module must be proven
 * for the mpi backend.  Returns 0, or -1 after a diagnostic. */
int cg_compile_cpu(const ir_module *m, const sim_result *r, const cg_options *o);

/* Every rank's object (host.c), linked (with the emulator's kernel
 * objects mods[d] for a CG_DEV_EMU rank d, else NULL), objects removed
 * unless kept, and DIR/launch.  Returns 0 or -1. */
int cg_build_ranks(const ir_module *m, const cg_rank *ranks, char ***mods, const cg_options *o);

/* plan.opir, timeline.svg, report.md and the text file into DIR: what
 * every target writes besides the executables. */
int cg_write_outputs(const ir_module *m, const sim_result *r, const cg_rank *ranks,
                     const char *dir);

/* The CUDA target (target_cuda.c): the kernel modules of every layer
 * (NVRTC for arch, DIR/NAME.cu, .ptx when asked; or, for the emulator
 * (dev CG_DEV_EMU), compiled by the host C++ compiler), one rank
 * executable per device whose layers run on the device, and what
 * cg_write_outputs writes.  The module must be proven for nccl. */
int cg_compile_device(const ir_module *m, const sim_result *r, const cg_options *o, cg_dev dev,
                      const char *arch, bool emit_cu, bool emit_ptx);

#endif
