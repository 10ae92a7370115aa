/* dev.h: the device side of libocto_rt (docs/cuda.md).  Private.
 *
 * Two parts:
 *
 *   a backend (dev_ops): device memory, row-major GEMMs, launches of the
 *   generated kernels (codegen/cuda_lib.cu and the entry points of
 *   codegen/cuda_kernels.c).  Two backends implement it: CUDA (cuBLAS and
 *   the driver API, cuda/rt_cuda.c) and the host emulator (dev_emu.c: the
 *   same kernel source compiled by the host C++ compiler, every thread of a
 *   block run in turn as a fiber, __syncthreads a switch, GEMMs by BLAS),
 *   which lets the whole device path run, and be tested, without a GPU;
 *
 *   the layer executor (dev_layers.c, dev_<kind>.c): a layer's F, B and W
 *   on device buffers, as the sequence of GEMMs and kernel launches that
 *   computes what the CPU kernels (runtime/cpu/kernels.inc) compute, the
 *   math of docs/layers.md.
 *
 * Storage is `real`: f32, or bf16 kept as its 16 bits (dev->bf16); the
 * element size is dev_esz().  Parameters on the device are `real`, in the
 * CPU layout (rt_layer_tensor offsets, in elements); weight gradients are
 * f32 in the same layout and W adds (+=) to them.  Every call returns RT_OK
 * or a negative RT_ code with the message in dev->err. */
#ifndef OCTO_RT_DEV_H
#define OCTO_RT_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "emu_abi.h"
#include "layers.h"

typedef struct rt_dev rt_dev;

typedef enum dev_dir { DEV_H2D, DEV_D2H, DEV_D2D } dev_dir;

/* A layer's attention core as a library takes it (dev_attn.c): q
 * [mbs seq][nh dqk], k [mbs seq][nkv dqk], v [mbs seq][nkv dv], o
 * [mbs seq][nh dv] in the storage type, lse [mbs][nh][seq] f32 (the scaled
 * scores' log-sum-exp, natural log); query i sees key j iff j <= i and,
 * with win > 0, j > i - win; query head h reads kv head h / (nh / nkv);
 * the scores are scaled by `scale`. */
typedef struct dev_attn_core {
	int64_t mbs, seq, nh, nkv, dqk, dv, win;
	float scale;
} dev_attn_core;

typedef struct dev_ops {
	const char *name; /* "cuda", "emu" */
	/* Row-major C = alpha op(A) op(B) + beta C, kernels.inc's mm(): A, B in
	 * the storage type; C in it, or f32 when c_f32; arithmetic f32.  With
	 * beta 0, C is not read. */
	int (*gemm)(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
	            const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
	            int64_t ldc, bool c_f32);
	/* `batch` GEMMs as gemm's, the i-th on a + i sa, b + i sb, c + i sc
	 * (strides in elements of each operand's type; outputs must not
	 * overlap), in any order (each is its own product: the results do not
	 * depend on it).  ab_f32: A and B in f32 whatever the storage type
	 * (intermediates), which needs c_f32 too. */
	int (*gemm_sb)(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
	               const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
	               int64_t sb, float beta, void *c, int64_t ldc, int64_t sc, int64_t batch,
	               bool ab_f32, bool c_f32);
	/* Entry point `fn` of module `mod` on `grid` blocks of `block` threads;
	 * args as cuLaunchKernel's kernelParams (a pointer to each argument). */
	int (*launch)(rt_dev *d, int mod, const char *fn, unsigned grid, unsigned block, void **args);
	int (*copy)(rt_dev *d, void *dst, const void *src, size_t bytes, dev_dir dir);
	int (*zero)(rt_dev *d, void *p, size_t bytes);
	int (*alloc)(rt_dev *d, size_t bytes, void **p); /* 256-byte aligned */
	void (*free)(rt_dev *d, void *p);
	int (*sync)(rt_dev *d); /* the device has finished all work given so far */
	void (*destroy)(rt_dev *d);
	void (*abort)(rt_dev *d); /* the rank is failing: let no peer wait for it (may be NULL) */
	/* Timing, for tools (dev_check --time): a mark recorded in the order of
	 * the device's work (CUDA: an event on the compute stream), the
	 * milliseconds between two marks once the later one is reached, and a
	 * mark freed. */
	int (*mark)(rt_dev *d, void **m);
	int (*elapsed)(rt_dev *d, void *from, void *to, double *ms);
	void (*unmark)(rt_dev *d, void *m);
	/* Page-locked host memory (CUDA: cudaMallocHost), which put_async
	 * copies from; host_free of NULL is nothing. */
	int (*host_alloc)(rt_dev *d, size_t bytes, void **p);
	void (*host_free)(rt_dev *d, void *p);
	/* bytes of host_alloc's memory to the device, in the compute stream's
	 * order, returning before the copy is done (copy's DEV_H2D, from
	 * pageable memory, waits for the stream first): src is not written
	 * until the device is waited for (sync, or a DEV_D2H copy).  The
	 * emulator copies at once and checks at the wait that src was not
	 * written meanwhile. */
	int (*put_async)(rt_dev *d, void *dst, const void *src, size_t bytes);
	/* The attention core through a library (CUDA with OCTO_ATTN=cudnn:
	 * cuDNN's fused attention, cuda/rt_cudnn.c); NULL where none is used.
	 * attn_lib, once per layer before its first step: *use is whether the
	 * library takes this core (its plans for F and B made, and the device
	 * memory they need, now); when it does, attn_f makes o and lse from q,
	 * k, v, and attn_b dq, dk, dv from q, k, v, o, dout and lse (dsum
	 * [mbs][nh][seq] f32 its scratch), else the layer runs its kernels, in
	 * F and B alike. */
	int (*attn_lib)(rt_dev *d, const dev_attn_core *c, bool *use);
	int (*attn_f)(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
	              const void *v, void *o, float *lse);
	int (*attn_b)(rt_dev *d, const dev_attn_core *c, const void *q, const void *k,
	              const void *v, const void *o, const void *dout, const float *lse,
	              float *dsum, void *dq, void *dk, void *dv);
} dev_ops;

struct rt_dev {
	const dev_ops *ops;
	bool bf16;           /* storage type: bf16 or f32 */
	unsigned row;        /* threads per block of the row kernels (the modules' OCTO_ROW) */
	unsigned each_block; /* threads per block of the "each" kernels */
	unsigned max_grid;   /* blocks at most for the "each" kernels */
	int rank;
	size_t cache_bytes;  /* the device's last-level cache (the profile's cold runs) */
	char name[128];      /* what runs the kernels, for the profile: "NVIDIA H200", ... */
	char err[768];
	float *colp; /* the column partials of the layer whose W runs: its scratch's
	              * tail (dev_backward_w; dev_col_add) */
	void *impl;  /* the backend's state */
};

static inline size_t dev_esz(const rt_dev *d)
{
	return d->bf16 ? 2 : 4;
}

/* p advanced by i elements of the storage type. */
static inline void *dev_at(const rt_dev *d, const void *p, int64_t i)
{
	return (char *)p + (size_t)i * dev_esz(d);
}

/* bf16 <-> f32: rounded to nearest even, a NaN kept a quiet NaN, as the
 * kernels' st() (codegen/cuda_lib.cu). */
static inline uint16_t dev_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float dev_from_bf16(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Records a failure in d->err and returns code. */
int dev_fail(rt_dev *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the host emulator (dev_emu.c) ----------------------------------------- */

/* The emulator's ABI with the modules (emu_abi.h, compiled into them
 * too): one entry point of a module compiled for the host, and the row
 * kernels' threads per block there. */
typedef octo_emu_entry dev_emu_entry;
#define DEV_EMU_ROW OCTO_EMU_ROW

int dev_emu_create(int rank, bool bf16, rt_dev **out);
/* The GPU's launch configuration (rt_cuda.c's): row and "each" blocks of
 * 256 threads, up to 8192 blocks; the modules dev_emu_add_source compiles
 * from here on get OCTO_ROW 256.  Before the first module is added. */
void dev_emu_gpu_launch(rt_dev *d);
/* The emulator's stand-in for NCCL (dev_emu_comm.c): a device
 * communicator (rt_internal.h) over MPI, freed by its destroy.  RT_OK, or
 * a code with the message in err. */
struct rt_dcomm;
int dev_emu_comm_create(struct rt_dcomm **out, char *err, size_t errlen);
/* Adds a module whose entry table ({NULL, NULL}-terminated) is linked into
 * the program; modules are numbered in the order they are added. */
int dev_emu_add_table(rt_dev *d, const char *name, const dev_emu_entry *table);
/* Adds a module from its source (cg_cuda_emu_source, its table named
 * DEV_EMU_TABLE): compiled with the host C++ compiler `cxx` into a shared
 * object under `workdir` (created if missing; NAME.cpp, NAME.log, and
 * NAME-HASH.so), loaded with dlopen; an object of the same source already
 * there is loaded without compiling (HASH covers the source and OCTO_ROW,
 * not the compiler).  A compile error's message holds the compiler's first
 * error lines.  For tests and tools. */
int dev_emu_add_source(rt_dev *d, const char *name, const char *src, const char *cxx,
                       const char *workdir);
#define DEV_EMU_TABLE OCTO_EMU_TABLE

/* ---- the CUDA backend (runtime/cuda/rt_cuda.c, libocto_rt_cuda) ------------- */

/* The device of rank `rank` (its index on its node % the node's devices;
 * a collective when MPI is initialised), its modules loaded from PTX,
 * streams, cuBLAS, and with `nccl` the NCCL communicator of nranks ranks
 * (its id broadcast over MPI_COMM_WORLD: MPI must be initialised), whose
 * calls may stay in progress timeout_s seconds at most (0: 600).  On
 * failure *out is NULL and err says why (RT_ENODEV without a device). */
int dev_cuda_create(int rank, int nranks, bool bf16, int nmods, const char *const *names,
                    const char *const *ptx, bool nccl, double timeout_s, rt_dev **out, char *err,
                    size_t errlen);
/* One entry point of a loaded module, as the driver reports it. */
typedef struct dev_cuda_kernel {
	const char *name; /* the driver's; valid while the device lives */
	int regs;         /* registers a thread */
	int local;        /* bytes of local memory a thread (stack frame and spills) */
	int max_threads;  /* the most threads a block of it may have (its launch bound) */
	int shared;       /* bytes of static shared memory a block */
} dev_cuda_kernel;
/* Every entry point of every module of a CUDA device (dev_cuda_create's),
 * in load order, to fn (module: its name) until fn returns non-zero, which
 * is returned; RT_EARG for a device of another backend.  For tools
 * (tests/gpu/kernel_info.c); the backend reserves local memory from the
 * same walk. */
int dev_cuda_kernels(rt_dev *d, int (*fn)(void *arg, const char *module, const dev_cuda_kernel *k),
                     void *arg);

/* ---- the layer executor ---------------------------------------------------- */

/* One layer on the device. */
typedef struct dev_layer {
	rt_layer_desc desc;
	rt_shape s;
	rt_tensor t[RT_MAX_TENSORS];
	int nt;
	int64_t nparams;
	const char *kind; /* the entry points' prefix: "attention", "mlp", ... */
	int mod;          /* its kernel module */
	void *p;          /* parameters, storage type, nparams elements */
	float *g;         /* gradients, f32, nparams */
	bool lib_attn;    /* its attention core runs in the device's library
	                   * (dev_ops.attn_lib; dev_layer_prepare sets it) */
} dev_layer;

/* Fills L's shape and tensor table from d (p, g, mod are the caller's). */
int dev_layer_setup(dev_layer *L, const rt_layer_desc *d);
/* What L needs of the device before its first step, once: whether its
 * attention core runs in the device's library (lib_attn).  RT_OK, or a
 * failure with the message in d->err. */
int dev_layer_prepare(rt_dev *d, dev_layer *L);
/* L's attention core (an attention or a parallel layer's). */
dev_attn_core dev_attn_core_of(const rt_shape *s);

/* The buffers of one call, all on the device. */
typedef struct dev_io {
	const void *x; /* F: input [T][H] (NULL for the embedding) */
	void *y;       /* F: output [T][H] (NULL for the head); may equal x */
	const void *dy; /* B: output gradient (NULL for the head) */
	void *dx;       /* B: input gradient (NULL for the embedding); may equal dy */
	const int32_t *tok; /* F of the embedding: token ids [T]; F of the head: targets [T] */
	double *loss;       /* F of the head: {sum of cross-entropies, count} */
	int *err;           /* F of the embedding: set to 1 for a token outside the vocabulary */
	float dscale;       /* B of the head: d loss / d cross-entropy */
	void *act;          /* F writes, B reads */
	void *ws;           /* B writes, W reads */
	void *scratch;
} dev_io;

/* Device bytes of the activation stash, the W stash and the scratch of one
 * micro-batch (params: elements, as rt_layer_sizes). */
int dev_layer_sizes(const rt_layer_desc *d, bool bf16, rt_sizes *sz);
int dev_forward(rt_dev *d, const dev_layer *L, const dev_io *io);
int dev_backward_b(rt_dev *d, const dev_layer *L, const dev_io *io);
int dev_backward_w(rt_dev *d, const dev_layer *L, const dev_io *io);

/* Per kind (dev_<kind>.c): sizes in bytes for element size esz, and F, B, W. */
#define DEV_KIND(k)                                                                   \
	int dev_##k##_sizes(const rt_shape *s, size_t esz, rt_sizes *sz);                 \
	int dev_##k##_f(rt_dev *d, const dev_layer *L, const dev_io *io);                 \
	int dev_##k##_b(rt_dev *d, const dev_layer *L, const dev_io *io);                 \
	int dev_##k##_w(rt_dev *d, const dev_layer *L, const dev_io *io);
DEV_KIND(emb)
DEV_KIND(head)
DEV_KIND(attn)
DEV_KIND(mlp)
DEV_KIND(moe)
DEV_KIND(mamba)
DEV_KIND(par)
#undef DEV_KIND

/* ---- what the kinds share (dev_common.c) ----------------------------------- */

/* A bump allocator over a device buffer, as kernels_common.inc's carve: with base
 * NULL it only counts (the sizes functions walk the same layout). */
typedef struct dev_carve {
	char *base;
	size_t off;
} dev_carve;
void *dev_take(dev_carve *c, size_t bytes); /* 256-byte steps */

/* Tensor i's parameters (storage type) and gradients (f32). */
void *dev_param(const rt_dev *d, const dev_layer *L, int i);
float *dev_grad(const dev_layer *L, int i);

/* Launches L's entry point `fn` ("%s" in fn is replaced by L->kind, e.g.
 * "%s_F_norm"); args as dev_ops.launch.  Errors name the layer and fn. */
int dev_run(rt_dev *d, const dev_layer *L, const char *fn, unsigned grid, unsigned block,
            void **args);
/* Blocks for an "each" kernel over n items. */
unsigned dev_each_grid(const rt_dev *d, int64_t n);
/* dev_run of an "each" kernel over n items. */
int dev_each(rt_dev *d, const dev_layer *L, const char *fn, int64_t n, void **args);
/* dev_run of a row kernel over `rows` rows (one block of d->row per row). */
int dev_rows(rt_dev *d, const dev_layer *L, const char *fn, int64_t rows, void **args);

/* C (m x n) = beta C + op(A) . op(B), row-major, op(X) = X^T when t;
 * C in f32 when c_f32, else in the storage type. */
int dev_mm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
           int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc, bool c_f32);

/* GEMMs over two batch indices, all operands f32 (dev_ops.gemm_sb with
 * ab_f32, c_f32): product (i, j), i < o.n, j < in.n, on a + i o.sa + j in.sa,
 * and likewise b and c (strides in floats).  Run as strided-batched calls
 * over the larger index, one call per value of the smaller. */
typedef struct dev_bdim {
	int64_t n, sa, sb, sc;
} dev_bdim;
int dev_bmm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
            dev_bdim o, dev_bdim in);

/* The projections of kernels_common.inc, on the device:
 * y (n x out) = beta y + x (n x in) . w (in x out);
 * dx (n x in) = beta dx + dy (n x out) . w^T;
 * dw (in x out, f32) += x^T . dy. */
int dev_proj(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *x, int64_t ldx,
             const void *w, float beta, void *y, int64_t ldy);
int dev_proj_dx(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *dy, int64_t lddy,
                const void *w, float beta, void *dx, int64_t lddx);
int dev_proj_dw(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *x, int64_t ldx,
                const void *dy, int64_t lddy, float *dw);

/* dev_proj_dx into f32: a term of a sum that is rounded once. */
int dev_proj_dx_f32(rt_dev *d, int64_t n, int64_t in, int64_t out, const void *dy, int64_t lddy,
                    const void *w, float beta, float *dx, int64_t lddx);

/* A sum of GEMMs into an array of the storage type (a B's du: the input
 * projections' dx of a mixer or a block, beta 1 for every term after the
 * first) is accumulated in f32 and rounded once, not once a term:
 *   acc = dev_acc_begin(d, dst, acc32, beta, &b0);
 *   dev_proj_dx_f32(..., b0, acc, ...); dev_proj_dx_f32(..., 1, acc, ...); ...
 *   dev_acc_end(d, L, acc, dst, n, beta);
 * The accumulator is dst itself when the storage is f32 (b0 = beta: no
 * copy, the same bits as GEMMs into dst), else acc32, an f32 array of the
 * caller's scratch (b0 = 0), which dev_acc_end rounds into dst (added to
 * it with beta 1: acc_store, in every module). */
float *dev_acc_begin(const rt_dev *d, void *dst, float *acc32, float beta, float *b0);
int dev_acc_end(rt_dev *d, const dev_layer *L, const float *acc, void *dst, int64_t n, float beta);

/* W's column sums over rows in two stages, in one order whatever the
 * launch (cuda_lib.cu's colpart_prod, conv_w, col_sums): a kernel writes
 * the sums of each chunk of RT_COL_CHUNK rows into d->colp, the column
 * partials [chunks][w] at the end of the layer's scratch (dev_layer_sizes
 * counts them), then dev_col_add adds a column's partials, chunks
 * ascending, to dst:
 *   dev_each(d, L, "mamba_W_gnorm", dev_col_chunks(T) * di, {..., &d->colp});
 *   dev_col_add(d, L, d->colp, T, di, dg); */
int64_t dev_col_chunks(int64_t rows);
int dev_col_add(rt_dev *d, const dev_layer *L, const float *part, int64_t rows, int64_t w,
                float *dst);

/* The pre-norm every kind but the embedding starts with (entry points
 * <kind>_F_norm, _B_norm, _W_scale, _W_norm; tensor 0 is the scale g):
 *   F: u = xhat g, xhat and r (1/rms per row, f32) stashed;
 *   B: dx = dres + r (du g - xhat mean(du g xhat)) (dres may be NULL);
 *   W: u = xhat g again (for the weight GEMMs), dg += sum_t du xhat. */
int dev_norm_f(rt_dev *d, const dev_layer *L, const void *x, void *u, void *xhat, float *r);
int dev_norm_b(rt_dev *d, const dev_layer *L, const void *du, const void *xhat, const float *r,
               const void *dres, void *dx);
int dev_norm_scale(rt_dev *d, const dev_layer *L, const void *xhat, void *u);
int dev_norm_w(rt_dev *d, const dev_layer *L, const void *du, const void *xhat);

/* That norm as a mixer layer's (attention, mamba, and once for both mixers
 * of a parallel layer: dev_mix.h), around its mixers:
 *   F: u, xhat, r as dev_norm_f, then y = x, the residual the mixers add
 *      to (x is not read again, so y may be x);
 *   B, first: dy and xhat kept in the W stash (wdy, wxhat; dy first, since
 *      dx may be dy); the mixers then make du, and dev_norm_b the dx;
 *   W: u made again and dg, as dev_norm_scale and dev_norm_w. */
int dev_prenorm_f(rt_dev *d, const dev_layer *L, const void *x, void *y, void *u, void *xhat,
                  float *r);
int dev_prenorm_keep(rt_dev *d, const dev_layer *L, const void *dy, void *wdy, const void *xhat,
                     void *wxhat);
int dev_prenorm_w(rt_dev *d, const dev_layer *L, const void *wxhat, const void *du, void *u);

/* n elements of the storage type, device to device (nothing when dst is src). */
int dev_copy(rt_dev *d, void *dst, const void *src, int64_t n);

/* Returns from the calling function what `call` returns, unless RT_OK. */
#define DEV_TRY(call)                                                                    \
	do {                                                                                 \
		int rc_ = (call);                                                                \
		if (rc_)                                                                         \
			return rc_;                                                                  \
	} while (0)

#endif
