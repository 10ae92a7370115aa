/* rt_cuda.c: the CUDA device of libocto_rt (docs/cuda.md): the dev_ops
 * backend of the layer executor (runtime/dev/dev.h) and the NCCL
 * communicator (rt_dcomm), attached to a rank by rt_device_attach_cuda.
 *
 *   device      the rank's index on its node % the node's devices, its
 *               primary context
 *   modules     the rank's PTX images, loaded through the driver API, which
 *               is reached through cudaGetDriverEntryPointByVersion rather
 *               than by linking libcuda: a rank executable then starts on a
 *               machine without a driver and says "no CUDA device: ..."
 *               instead of failing in the dynamic loader
 *   streams     one compute stream (kernels, cuBLAS, copies) and one
 *               communication stream; a group's transfers wait for the
 *               compute stream's work so far (event), and complete as a
 *               whole (event the runtime's wait polls); the compute stream
 *               does not wait for them
 *   GEMMs       cublasGemmEx (strided batches: cublasGemmStridedBatchedEx):
 *               row-major products as the column-major product of the
 *               transposes; bf16 or f32 inputs, f32 arithmetic
 *               (CUBLAS_COMPUTE_32F: no TF32), f32 or storage-type output
 *   memory      cudaMalloc (never managed memory), once at setup
 *   NCCL        rank 0's unique id broadcast over MPI once, before the
 *               first step; a non-blocking communicator (every result
 *               polled until it settles), ncclCommAbort when the rank fails.
 *               With data parallelism a second one per DP group (its
 *               replica 0's id broadcast over the DP communicator) for the
 *               buckets' ncclAllReduce / ncclReduceScatter / ncclAllGather,
 *               in place on the bucket's buffer, on the communication
 *               stream in program order with the sends and receives.
 *               OCTO_COMM=mpi: no NCCL; the runtime moves host copies over
 *               MPI, so several ranks can share one GPU.
 *
 *   kernels     each entry point declares the threads of its blocks
 *               (__launch_bounds__, codegen/cuda_lib.cu); a launch past the
 *               driver's limit for the function is refused by name, with
 *               its registers and local memory.  The local memory of the
 *               rank's kernels (the largest stack frame x the threads the
 *               device can hold) is reserved at setup, before the runtime's
 *               buffers, and its size reported, so a plan that does not
 *               leave room for it fails there, not at the first launch.
 *               OCTO_CUDA_SYNC=1 waits for the device after every launch
 *               and GEMM, so an asynchronous fault names its kernel.
 *   attention   OCTO_ATTN=cudnn (bf16): the attention cores through
 *               cuDNN's fused attention (rt_cudnn.c), planned per core at
 *               attn_lib; own (the default): the kernels
 *
 * Every call is checked; a failure leaves "CALL failed during OP: WHY
 * (rank R)" in the device's err and returns RT_EDEVICE (RT_ENODEV without
 * a device); the driver's results are named (CUDA_ERROR_...), and a module
 * the driver cannot load brings the JIT's log. */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "dev.h"
#include "rt_cudnn.h"
#include "rt_internal.h"

typedef CUresult (*pfn_load)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
typedef CUresult (*pfn_errname)(CUresult, const char **);
typedef CUresult (*pfn_attr)(int *, CUfunction_attribute, CUfunction);
typedef CUresult (*pfn_count)(unsigned *, CUmodule);
typedef CUresult (*pfn_enum)(CUfunction *, unsigned, CUmodule);
typedef CUresult (*pfn_fname)(const char **, CUfunction);
typedef CUresult (*pfn_getfn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*pfn_unload)(CUmodule);
typedef CUresult (*pfn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);

/* A kernel looked up once: (module, name) -> function, and the most
 * threads a block of it may have. */
typedef struct kfn {
	int mod;
	char name[64];
	CUfunction f;
	int max_threads;
} kfn;

typedef struct rt_cuda {
	rt_dev dev;
	rt_dcomm dcomm;
	int rank, nranks, device;
	int nmods;
	CUmodule *mods;
	char **names;
	pfn_getfn getfn;
	pfn_unload unload;
	pfn_launch launch;
	pfn_errname errname;
	pfn_attr attr;
	pfn_count count;
	pfn_enum enumerate;
	pfn_fname fname;
	kfn *fns;
	int nfns, capfns;
	cublasHandle_t blas;
	cudaStream_t compute, comm;
	cudaEvent_t ready;
	ncclComm_t nccl;
	ncclComm_t dp; /* the DP group's (NULL without data parallelism) */
	int replica;   /* this rank's in it */
	double timeout_s; /* how long an NCCL call may stay in progress */
	bool sync_each;   /* OCTO_CUDA_SYNC=1: wait after every launch and GEMM */
	size_t local_bytes; /* device memory the kernels' local memory took at setup */
	cdn_attn *cdn;      /* OCTO_ATTN=cudnn: the attention cores through cuDNN */
} rt_cuda;

static int fail(rt_cuda *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void end_comm(ncclComm_t comm);
static int fail(rt_cuda *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->dev.err, sizeof c->dev.err, fmt, ap);
	va_end(ap);
	return code;
}

#define CUDA_OK(c, call, op)                                                              \
	do {                                                                                \
		cudaError_t e_ = (call);                                                        \
		if (e_ != cudaSuccess)                                                          \
			return fail(c, RT_EDEVICE, "%s failed during %s: %s (rank %d)", #call, op,  \
			            cudaGetErrorString(e_), (c)->rank);                             \
	} while (0)
#define BLAS_OK(c, call, op)                                                              \
	do {                                                                                \
		cublasStatus_t e_ = (call);                                                     \
		if (e_ != CUBLAS_STATUS_SUCCESS)                                                \
			return fail(c, RT_EDEVICE, "%s failed during %s: %s (rank %d)", #call, op,  \
			            cublasGetStatusString(e_), (c)->rank);                          \
	} while (0)

/* NCCL calls on a non-blocking communicator may return ncclInProgress:
 * poll ncclCommGetAsyncError until the operation settles, for at most the
 * job's timeout (a peer that never joins would otherwise hold this rank
 * here for ever); still in progress past it, the caller fails and the
 * failing rank's abort tears the communicator down. */
static ncclResult_t nccl_settle(ncclComm_t comm, ncclResult_t r, double timeout_s)
{
	int64_t end = rt__now_ns() + (int64_t)(timeout_s * 1e9);
	while (r == ncclInProgress && comm) {
		if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
			break;
		if (r == ncclInProgress && rt__now_ns() > end)
			break;
	}
	return r;
}
/* The call runs before its communicator is read: ncclCommInitRankConfig
 * writes the handle it is then polled through. */
#define NCCL_OK(c, call, op)                                                              \
	do {                                                                                \
		ncclResult_t e_ = (call);                                                       \
		e_ = nccl_settle((c)->nccl, e_, (c)->timeout_s);                                \
		if (e_ != ncclSuccess)                                                          \
			return fail(c, RT_EDEVICE, "%s failed during %s: %s (%s) (rank %d)", #call,  \
			            op, e_ == ncclInProgress ? "still in progress after the timeout" \
			            : ncclGetErrorString(e_), ncclGetLastError((c)->nccl), (c)->rank); \
	} while (0)

static rt_cuda *self(rt_dev *d)
{
	return d->impl;
}

/* The driver's name of r (CUDA_ERROR_...), or its number. */
static const char *cu_name(rt_cuda *c, CUresult r, char buf[32])
{
	const char *s = NULL;
	if (c->errname && c->errname(r, &s) == CUDA_SUCCESS && s)
		return s;
	snprintf(buf, 32, "CUresult %d", (int)r);
	return buf;
}

/* With OCTO_CUDA_SYNC=1, the device's work so far, waited for: a fault is
 * then reported at the launch or GEMM that made it. */
static int sync_after(rt_cuda *c, const char *what, const char *name)
{
	if (!c->sync_each)
		return RT_OK;
	cudaError_t e = cudaStreamSynchronize(c->compute);
	if (e != cudaSuccess)
		return fail(c, RT_EDEVICE, "%s %s failed on the device: %s (rank %d)", what, name,
		            cudaGetErrorString(e), c->rank);
	return RT_OK;
}

/* ---- dev_ops ------------------------------------------------------------------ */

static int c_gemm(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *cc,
                  int64_t ldc, bool c_f32)
{
	rt_cuda *c = self(d);
	cudaDataType st = d->bf16 ? CUDA_R_16BF : CUDA_R_32F, ct = c_f32 ? CUDA_R_32F : st;
	/* cublasGemmEx takes int sizes: a plan's shapes past them are refused,
	 * not truncated. */
	if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX ||
	    ldb > INT_MAX || ldc > INT_MAX)
		return fail(c, RT_EARG, "a GEMM of %lld x %lld x %lld (leading dimensions %lld, %lld, "
		            "%lld): cuBLAS takes sizes up to %d (rank %d)", (long long)m, (long long)n,
		            (long long)k, (long long)lda, (long long)ldb, (long long)ldc, INT_MAX, c->rank);
	/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
	BLAS_OK(c, cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
	                        (int)n, (int)m, (int)k, &alpha, b, st, (int)ldb, a, st, (int)lda, &beta,
	                        cc, ct, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
	        "a GEMM");
	if (c->sync_each) {
		char what[96];
		snprintf(what, sizeof what, "%lld x %lld x %lld", (long long)m, (long long)n, (long long)k);
		return sync_after(c, "the GEMM", what);
	}
	return RT_OK;
}

/* cublasGemmStridedBatchedEx with c_gemm's conventions; f32 operands
 * (ab_f32) need an f32 result, which cuBLAS requires of them too. */
static int c_gemm_sb(rt_dev *d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                     int64_t sb, float beta, void *cc, int64_t ldc, int64_t sc, int64_t batch,
                     bool ab_f32, bool c_f32)
{
	rt_cuda *c = self(d);
	cudaDataType st = d->bf16 && !ab_f32 ? CUDA_R_16BF : CUDA_R_32F;
	cudaDataType ct = c_f32 || !d->bf16 ? CUDA_R_32F : CUDA_R_16BF;
	if (st == CUDA_R_32F && ct != CUDA_R_32F)
		return fail(c, RT_EARG, "a batched GEMM of f32 operands into bf16 (rank %d)", c->rank);
	if (m < 0 || n < 0 || k < 0 || batch < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
	    lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX || batch > INT_MAX)
		return fail(c, RT_EARG, "a batched GEMM of %lld x %lld x %lld x %lld (leading "
		            "dimensions %lld, %lld, %lld): cuBLAS takes sizes up to %d (rank %d)",
		            (long long)batch, (long long)m, (long long)n, (long long)k, (long long)lda,
		            (long long)ldb, (long long)ldc, INT_MAX, c->rank);
	if (m == 0 || n == 0 || batch == 0)
		return RT_OK;
	/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
	BLAS_OK(c, cublasGemmStridedBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
	                                      ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k,
	                                      &alpha, b, st, (int)ldb, sb, a, st, (int)lda, sa, &beta,
	                                      cc, ct, (int)ldc, sc, (int)batch, CUBLAS_COMPUTE_32F,
	                                      CUBLAS_GEMM_DEFAULT),
	        "a batched GEMM");
	if (c->sync_each) {
		char what[128];
		snprintf(what, sizeof what, "%lld x %lld x %lld x %lld", (long long)batch, (long long)m,
		         (long long)n, (long long)k);
		return sync_after(c, "the batched GEMM", what);
	}
	return RT_OK;
}

static int c_launch(rt_dev *d, int mod, const char *fn, unsigned grid, unsigned block, void **args)
{
	rt_cuda *c = self(d);
	if (mod < 0 || mod >= c->nmods)
		return fail(c, RT_EARG, "no kernel module %d (%d loaded) (rank %d)", mod, c->nmods, c->rank);
	char nb[32];
	kfn *k = NULL;
	for (int i = 0; i < c->nfns && !k; i++)
		if (c->fns[i].mod == mod && strcmp(c->fns[i].name, fn) == 0)
			k = &c->fns[i];
	if (!k) {
		CUfunction f = NULL;
		int maxt = 0;
		CUresult r = c->getfn(&f, c->mods[mod], fn);
		if (r == CUDA_SUCCESS)
			r = c->attr(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
		if (r != CUDA_SUCCESS)
			return fail(c, RT_EDEVICE, "cuModuleGetFunction(%s) failed in module %s: %s (rank %d)",
			            fn, c->names[mod], cu_name(c, r, nb), c->rank);
		if (c->nfns == c->capfns) {
			int cap = c->capfns ? 2 * c->capfns : 32;
			kfn *more = realloc(c->fns, (size_t)cap * sizeof *more);
			if (!more)
				return fail(c, RT_ENOMEM, "out of host memory (rank %d)", c->rank);
			c->fns = more;
			c->capfns = cap;
		}
		k = &c->fns[c->nfns++];
		*k = (kfn){.mod = mod, .f = f, .max_threads = maxt};
		snprintf(k->name, sizeof k->name, "%s", fn);
	}
	if ((int64_t)block > k->max_threads) {
		int regs = 0, local = 0;
		c->attr(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->f);
		c->attr(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k->f);
		return fail(c, RT_EDEVICE, "kernel %s of module %s: a block of %u threads, but it takes at "
		            "most %d (%d registers, %d bytes of local memory a thread) (rank %d)", fn,
		            c->names[mod], block, k->max_threads, regs, local, c->rank);
	}
	CUresult r = c->launch(k->f, grid, 1, 1, block, 1, 1, 0, c->compute, args, NULL);
	if (r != CUDA_SUCCESS)
		return fail(c, RT_EDEVICE, "cuLaunchKernel(%s, %u x %u) failed in module %s: %s (rank %d)",
		            fn, grid, block, c->names[mod], cu_name(c, r, nb), c->rank);
	return sync_after(c, "the kernel", fn);
}

static int c_copy(rt_dev *d, void *dst, const void *src, size_t bytes, dev_dir dir)
{
	rt_cuda *c = self(d);
	enum cudaMemcpyKind k = dir == DEV_H2D ? cudaMemcpyHostToDevice
	                        : dir == DEV_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
	CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, k, c->compute), "a copy");
	if (dir == DEV_D2H) /* the host reads it next */
		CUDA_OK(c, cudaStreamSynchronize(c->compute), "a copy to the host");
	return RT_OK;
}

static int c_zero(rt_dev *d, void *p, size_t bytes)
{
	rt_cuda *c = self(d);
	CUDA_OK(c, cudaMemsetAsync(p, 0, bytes, c->compute), "a memset");
	return RT_OK;
}

static int c_alloc(rt_dev *d, size_t bytes, void **p)
{
	rt_cuda *c = self(d);
	cudaError_t e = cudaMalloc(p, bytes);
	if (e != cudaSuccess)
		return fail(c, RT_ENOMEM, "cudaMalloc of %zu bytes failed: %s (rank %d, device %d; the "
		            "kernels' local memory holds %.1f MiB of it)", bytes, cudaGetErrorString(e),
		            c->rank, c->device, (double)c->local_bytes / (1 << 20));
	return RT_OK;
}

static void c_free(rt_dev *d, void *p)
{
	(void)d;
	if (p)
		cudaFree(p);
}

static int c_sync(rt_dev *d)
{
	rt_cuda *c = self(d);
	CUDA_OK(c, cudaStreamSynchronize(c->compute), "the device's work");
	return RT_OK;
}

static void release(rt_cuda *c)
{
	for (int i = 0; i < c->nmods; i++)
		if (c->mods[i])
			c->unload(c->mods[i]);
	cdn_attn_close(c->cdn);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->ready)
		cudaEventDestroy(c->ready);
	if (c->compute)
		cudaStreamDestroy(c->compute);
	if (c->comm)
		cudaStreamDestroy(c->comm);
	for (int i = 0; c->names && i < c->nmods; i++)
		free(c->names[i]);
	free(c->mods);
	free(c->names);
	free(c->fns);
	free(c);
}

static void c_destroy(rt_dev *d)
{
	rt_cuda *c = self(d);
	end_comm(c->dp);
	end_comm(c->nccl);
	release(c);
}

static void c_abort(rt_dev *d)
{
	rt_cuda *c = self(d);
	/* no peer is left in a transfer with this rank */
	if (c->dp)
		ncclCommAbort(c->dp);
	if (c->nccl)
		ncclCommAbort(c->nccl);
	c->nccl = c->dp = NULL;
}

/* Marks: events on the compute stream, with timing. */
static int c_mark(rt_dev *d, void **m)
{
	rt_cuda *c = self(d);
	cudaEvent_t e;
	CUDA_OK(c, cudaEventCreate(&e), "timing");
	cudaError_t r = cudaEventRecord(e, c->compute);
	if (r != cudaSuccess) {
		cudaEventDestroy(e);
		return fail(c, RT_EDEVICE, "cudaEventRecord failed during timing: %s (rank %d)",
		            cudaGetErrorString(r), c->rank);
	}
	*m = e;
	return RT_OK;
}

static int c_elapsed(rt_dev *d, void *from, void *to, double *ms)
{
	rt_cuda *c = self(d);
	float f = 0;
	CUDA_OK(c, cudaEventSynchronize((cudaEvent_t)to), "timing");
	CUDA_OK(c, cudaEventElapsedTime(&f, (cudaEvent_t)from, (cudaEvent_t)to), "timing");
	*ms = f;
	return RT_OK;
}

static void c_unmark(rt_dev *d, void *m)
{
	cudaEventDestroy((cudaEvent_t)m);
}

/* Page-locked, so that put_async's copy is the DMA engine's, not staged
 * through a pinned buffer of the driver's with the stream waited for. */
static int c_host_alloc(rt_dev *d, size_t bytes, void **p)
{
	rt_cuda *c = self(d);
	cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
	if (e != cudaSuccess)
		return fail(c, RT_ENOMEM, "cudaMallocHost of %zu bytes failed: %s (rank %d)", bytes,
		            cudaGetErrorString(e), c->rank);
	return RT_OK;
}

static void c_host_free(rt_dev *d, void *p)
{
	(void)d;
	if (p)
		cudaFreeHost(p);
}

static int c_put_async(rt_dev *d, void *dst, const void *src, size_t bytes)
{
	rt_cuda *c = self(d);
	CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->compute),
	        "an asynchronous copy to the device");
	return RT_OK;
}

/* The attention cores through cuDNN (rt_cudnn.c), with OCTO_ATTN=cudnn;
 * without it every core runs the kernels.  Each core says once on stderr
 * whether cuDNN took it. */
static int c_attn_lib(rt_dev *d, const dev_attn_core *k, bool *use)
{
	rt_cuda *c = self(d);
	*use = false;
	if (!c->cdn)
		return RT_OK;
	char why[512] = "";
	int rc = cdn_attn_prepare(c->cdn, k, use, why, sizeof why, d->err, sizeof d->err);
	if (rc || !why[0]) /* a failure, or a core seen before */
		return rc;
	fprintf(stderr, "octopipe: rank %d: attention core %lldx%lld, heads %lld/%lld, head dims "
	        "%lld/%lld, window %lld: %s%s\n", c->rank, (long long)k->mbs, (long long)k->seq,
	        (long long)k->nh, (long long)k->nkv, (long long)k->dqk, (long long)k->dv,
	        (long long)k->win, *use ? "through cuDNN, " : "OctoPipe's kernels; cuDNN declines it: ",
	        why);
	return RT_OK;
}

static int c_attn_f(rt_dev *d, const dev_attn_core *k, const void *q, const void *kk,
                    const void *v, void *o, float *lse)
{
	rt_cuda *c = self(d);
	DEV_TRY(cdn_attn_fwd(c->cdn, k, q, kk, v, o, lse, d->err, sizeof d->err));
	return sync_after(c, "cuDNN's", "attention F");
}

static int c_attn_b(rt_dev *d, const dev_attn_core *k, const void *q, const void *kk,
                    const void *v, const void *o, const void *dout, const float *lse,
                    float *dsum, void *dq, void *dk, void *dv)
{
	rt_cuda *c = self(d);
	DEV_TRY(cdn_attn_bwd(c->cdn, k, q, kk, v, o, dout, lse, dsum, dq, dk, dv, d->err,
	                     sizeof d->err));
	return sync_after(c, "cuDNN's", "attention B");
}

static const dev_ops cuda_ops = {
    .name = "cuda", .gemm = c_gemm, .gemm_sb = c_gemm_sb, .launch = c_launch, .copy = c_copy, .zero = c_zero,
    .alloc = c_alloc, .free = c_free, .sync = c_sync, .destroy = c_destroy, .abort = c_abort,
    .mark = c_mark, .elapsed = c_elapsed, .unmark = c_unmark, .host_alloc = c_host_alloc,
    .host_free = c_host_free, .put_async = c_put_async, .attn_lib = c_attn_lib,
    .attn_f = c_attn_f, .attn_b = c_attn_b,
};

/* ---- the NCCL communicator ---------------------------------------------------- */

/* Finalized when it can be within END_COMM_S seconds, else aborted; NULL
 * is nothing. */
#define END_COMM_S 30.0
static void end_comm(ncclComm_t comm)
{
	if (!comm)
		return;
	if (nccl_settle(comm, ncclCommFinalize(comm), END_COMM_S) == ncclSuccess)
		ncclCommDestroy(comm);
	else
		ncclCommAbort(comm);
}

/* The DP group's communicator: every member is in rt__dp_init, past the
 * all-gather that checked the job's settings, so the broadcast finds them. */
static int n_dp_init(void *s, MPI_Comm dpc)
{
	rt_cuda *c = s;
	ncclUniqueId id;
	int n = 0;
	ncclResult_t r;
	if (MPI_Comm_rank(dpc, &c->replica) != MPI_SUCCESS || MPI_Comm_size(dpc, &n) != MPI_SUCCESS)
		return fail(c, RT_EMPI, "MPI_Comm_rank failed during the DP group's NCCL bootstrap "
		            "(rank %d)", c->rank);
	if (c->replica == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
		return fail(c, RT_EDEVICE, "ncclGetUniqueId failed during the DP group's bootstrap: %s "
		            "(rank %d)", ncclGetErrorString(r), c->rank);
	if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, dpc) != MPI_SUCCESS)
		return fail(c, RT_EMPI, "MPI_Bcast failed during the DP group's NCCL bootstrap (rank %d)",
		            c->rank);
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0; /* so that a failing rank can ncclCommAbort */
	r = ncclCommInitRankConfig(&c->dp, n, id, c->replica, &cfg);
	if ((r = nccl_settle(c->dp, r, c->timeout_s)) != ncclSuccess)
		return fail(c, RT_EDEVICE, "ncclCommInitRankConfig failed during the DP group's "
		            "bootstrap: %s (%s) (rank %d, replica %d of %d)", ncclGetErrorString(r),
		            ncclGetLastError(c->dp), c->rank, c->replica, n);
	return RT_OK;
}

/* In NCCL's in-place forms: the reduce-scatter's result and the
 * all-gather's contribution at the replica's place, buf + replica*count. */
static int n_coll(void *s, int kind, void *buf, size_t count, bool i64)
{
	rt_cuda *c = s;
	ncclDataType_t ty = i64 ? ncclInt64 : ncclFloat32;
	char *own = (char *)buf + (size_t)c->replica * count * (i64 ? 8 : 4);
	ncclResult_t r;
	if (!c->dp)
		return fail(c, RT_EARG, "a collective before the DP group's communicator (rank %d)",
		            c->rank);
	if (kind == RT_ALL_REDUCE)
		r = ncclAllReduce(buf, buf, count, ty, ncclSum, c->dp, c->comm);
	else if (kind == RT_REDUCE_SCATTER)
		r = ncclReduceScatter(buf, own, count, ty, ncclSum, c->dp, c->comm);
	else
		r = ncclAllGather(own, buf, count, ty, c->dp, c->comm);
	if ((r = nccl_settle(c->dp, r, c->timeout_s)) != ncclSuccess)
		return fail(c, RT_EDEVICE, "%s failed: %s (%s) (rank %d)",
		            kind == RT_ALL_REDUCE ? "ncclAllReduce" : kind == RT_REDUCE_SCATTER
		            ? "ncclReduceScatter" : "ncclAllGather", ncclGetErrorString(r),
		            ncclGetLastError(c->dp), c->rank);
	return RT_OK;
}

static int n_group_begin(void *s)
{
	rt_cuda *c = s;
	/* The transfers see everything the compute stream did so far. */
	CUDA_OK(c, cudaEventRecord(c->ready, c->compute), "a group's start");
	CUDA_OK(c, cudaStreamWaitEvent(c->comm, c->ready, 0), "a group's start");
	NCCL_OK(c, ncclGroupStart(), "a group's start");
	return RT_OK;
}

static int n_send(void *s, const void *buf, size_t bytes, int peer)
{
	rt_cuda *c = s;
	NCCL_OK(c, ncclSend(buf, bytes, ncclUint8, peer, c->nccl, c->comm), "a send");
	return RT_OK;
}

static int n_recv(void *s, void *buf, size_t bytes, int peer)
{
	rt_cuda *c = s;
	NCCL_OK(c, ncclRecv(buf, bytes, ncclUint8, peer, c->nccl, c->comm), "a receive");
	return RT_OK;
}

static int n_group_end(void *s, void **done)
{
	rt_cuda *c = s;
	cudaEvent_t ev;
	/* a group that returns ncclInProgress settles on each communicator */
	ncclResult_t r = ncclGroupEnd();
	if (r == ncclInProgress && (r = nccl_settle(c->nccl, r, c->timeout_s)) == ncclSuccess && c->dp)
		r = nccl_settle(c->dp, ncclInProgress, c->timeout_s);
	if (r != ncclSuccess)
		return fail(c, RT_EDEVICE, "ncclGroupEnd failed during a group's end: %s (%s) (rank %d)",
		            r == ncclInProgress ? "still in progress after the timeout"
		            : ncclGetErrorString(r), ncclGetLastError(c->nccl), c->rank);
	CUDA_OK(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "a group's end");
	CUDA_OK(c, cudaEventRecord(ev, c->comm), "a group's end");
	/* The compute stream does not wait for the group: its kernels go on
	 * while the transfers run.  What the group received is read, and what
	 * it sent is overwritten, only by kernels launched after a wait that
	 * polled this event complete (the memory plan's rule, docs/memplan.md
	 * "Send buffers"). */
	*done = ev;
	return RT_OK;
}

static int n_test(void *s, void *done, bool *complete)
{
	rt_cuda *c = s;
	cudaError_t e = cudaEventQuery((cudaEvent_t)done);
	if (e == cudaSuccess) {
		*complete = true;
		return RT_OK;
	}
	if (e != cudaErrorNotReady)
		return fail(c, RT_EDEVICE, "a group's transfers failed: %s (rank %d)", cudaGetErrorString(e),
		            c->rank);
	ncclComm_t comms[2] = {c->nccl, c->dp};
	for (int i = 0; i < 2; i++) {
		ncclResult_t r;
		if (comms[i] && ncclCommGetAsyncError(comms[i], &r) == ncclSuccess && r != ncclSuccess &&
		    r != ncclInProgress)
			return fail(c, RT_EDEVICE, "NCCL failed during a group's transfers: %s (%s) (rank %d)",
			            ncclGetErrorString(r), ncclGetLastError(comms[i]), c->rank);
	}
	*complete = false;
	return RT_OK;
}

static void n_release(void *s, void *done)
{
	(void)s;
	cudaEventDestroy((cudaEvent_t)done);
}

static const char *n_error(void *s)
{
	return ((rt_cuda *)s)->dev.err;
}

/* ---- setup ------------------------------------------------------------------------ */

static int driver_fn(rt_cuda *c, const char *sym, unsigned version, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	CUDA_OK(c, cudaGetDriverEntryPointByVersion(sym, fn, version, cudaEnableDefault, &q), sym);
	if (q != cudaDriverEntryPointSuccess || !*fn)
		return fail(c, RT_EDEVICE, "the CUDA driver has no %s (rank %d)", sym, c->rank);
	return RT_OK;
}

/* Every entry point of every loaded module, in load order, with its
 * attributes (registers, local memory a thread, the most threads a block
 * may have, static shared memory) to fn; stops at fn's first non-zero. */
typedef int (*kernel_fn)(void *arg, const char *module, const dev_cuda_kernel *k);
static int each_kernel(rt_cuda *c, kernel_fn fn, void *arg)
{
	char nb[32];
	for (int i = 0; i < c->nmods; i++) {
		unsigned n = 0;
		CUresult r = c->count(&n, c->mods[i]);
		CUfunction *fs = r == CUDA_SUCCESS && n ? malloc(n * sizeof *fs) : NULL;
		if (r == CUDA_SUCCESS && n && !fs)
			return fail(c, RT_ENOMEM, "out of host memory (rank %d)", c->rank);
		if (r == CUDA_SUCCESS && n)
			r = c->enumerate(fs, n, c->mods[i]);
		int rc = RT_OK;
		for (unsigned j = 0; r == CUDA_SUCCESS && !rc && j < n; j++) {
			dev_cuda_kernel k = {0};
			if ((r = c->fname(&k.name, fs[j])) == CUDA_SUCCESS &&
			    (r = c->attr(&k.regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fs[j])) == CUDA_SUCCESS &&
			    (r = c->attr(&k.local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fs[j])) == CUDA_SUCCESS &&
			    (r = c->attr(&k.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fs[j])) ==
			        CUDA_SUCCESS &&
			    (r = c->attr(&k.shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fs[j])) == CUDA_SUCCESS)
				rc = fn(arg, c->names[i], &k);
		}
		free(fs);
		if (r != CUDA_SUCCESS)
			return fail(c, RT_EDEVICE, "the functions of module %s: %s (rank %d)", c->names[i],
			            cu_name(c, r, nb), c->rank);
		if (rc)
			return rc;
	}
	return RT_OK;
}

/* The largest frame, and a module that has it. */
typedef struct frame_max {
	int frame;
	const char *at;
} frame_max;
static int largest_frame(void *arg, const char *module, const dev_cuda_kernel *k)
{
	frame_max *m = arg;
	if (k->local > m->frame) {
		m->frame = k->local;
		m->at = module;
	}
	return 0;
}

int dev_cuda_kernels(rt_dev *d, int (*fn)(void *arg, const char *module, const dev_cuda_kernel *k),
                     void *arg)
{
	if (!d || d->ops != &cuda_ops || !fn)
		return RT_EARG;
	return each_kernel(self(d), fn, arg);
}

/* The local memory of the rank's kernels, reserved now: the driver would
 * otherwise grow it at the first launch that needs more than it holds
 * (the largest stack frame x every thread the device can hold: GiBs for
 * a scan kernel's frame), after the runtime's buffers took the memory. */
static int reserve_local(rt_cuda *c)
{
	frame_max m = {0, ""};
	int rc = each_kernel(c, largest_frame, &m);
	if (rc)
		return rc;
	int frame = m.frame;
	const char *at = m.at;
	size_t limit = 0, before = 0, after = 0, total = 0;
	CUDA_OK(c, cudaDeviceGetLimit(&limit, cudaLimitStackSize), "device setup");
	if ((size_t)frame <= limit)
		return RT_OK;
	CUDA_OK(c, cudaMemGetInfo(&before, &total), "device setup");
	cudaError_t e = cudaDeviceSetLimit(cudaLimitStackSize, (size_t)frame);
	if (e != cudaSuccess)
		return fail(c, RT_ENOMEM, "the local memory of module %s's kernels (%d bytes a thread) "
		            "does not fit on device %d: %s (rank %d)", at, frame, c->device,
		            cudaGetErrorString(e), c->rank);
	CUDA_OK(c, cudaMemGetInfo(&after, &total), "device setup");
	c->local_bytes = before > after ? before - after : 0;
	return RT_OK;
}

static int setup(rt_cuda *c, int nmods, const char *const *names, const char *const *ptx,
                 bool use_mpi)
{
	int n = 0, rc;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0)
		return fail(c, RT_ENODEV, "no CUDA device: %s (rank %d)",
		            e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices", c->rank);
	/* The rank's device on its node: its rank among the ranks that share
	 * the node (MPI_COMM_TYPE_SHARED), modulo the node's devices. */
	int local = c->rank, inited = 0;
	MPI_Initialized(&inited);
	if (inited) {
		MPI_Comm node;
		if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) !=
		        MPI_SUCCESS ||
		    MPI_Comm_rank(node, &local) != MPI_SUCCESS || MPI_Comm_free(&node) != MPI_SUCCESS)
			return fail(c, RT_EMPI, "MPI_Comm_split_type failed during device setup (rank %d)", c->rank);
	}
	c->device = local % n;
	CUDA_OK(c, cudaSetDevice(c->device), "device setup");
	CUDA_OK(c, cudaFree(0), "context creation"); /* the primary context, current from here */
	struct cudaDeviceProp prop;
	int l2 = 0;
	CUDA_OK(c, cudaGetDeviceProperties(&prop, c->device), "device setup");
	CUDA_OK(c, cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->device), "device setup");
	snprintf(c->dev.name, sizeof c->dev.name, "%.100s (sm_%d%d)", prop.name, prop.major, prop.minor);
	c->dev.cache_bytes = l2 > 0 ? (size_t)l2 : (size_t)40 << 20;

	pfn_load load;
	if ((rc = driver_fn(c, "cuGetErrorName", 12000, (void **)&c->errname)) ||
	    (rc = driver_fn(c, "cuModuleLoadDataEx", 12000, (void **)&load)) ||
	    (rc = driver_fn(c, "cuModuleGetFunction", 12000, (void **)&c->getfn)) ||
	    (rc = driver_fn(c, "cuModuleUnload", 12000, (void **)&c->unload)) ||
	    (rc = driver_fn(c, "cuLaunchKernel", 12000, (void **)&c->launch)) ||
	    (rc = driver_fn(c, "cuFuncGetAttribute", 12000, (void **)&c->attr)) ||
	    (rc = driver_fn(c, "cuModuleGetFunctionCount", 12040, (void **)&c->count)) ||
	    (rc = driver_fn(c, "cuModuleEnumerateFunctions", 12040, (void **)&c->enumerate)) ||
	    (rc = driver_fn(c, "cuFuncGetName", 12030, (void **)&c->fname)))
		return rc;
	c->mods = calloc((size_t)nmods + 1, sizeof *c->mods);
	c->names = calloc((size_t)nmods + 1, sizeof *c->names);
	if (!c->mods || !c->names)
		return fail(c, RT_ENOMEM, "out of host memory (rank %d)", c->rank);
	for (int i = 0; i < nmods; i++) {
		if (!(c->names[i] = strdup(names[i])))
			return fail(c, RT_ENOMEM, "out of host memory (rank %d)", c->rank);
		c->nmods = i + 1;
		char log[2048] = "", nb[32];
		CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
		void *val[2] = {log, (void *)(uintptr_t)(sizeof log - 1)};
		CUresult r = load(&c->mods[i], ptx[i], 2, opt, val);
		if (r != CUDA_SUCCESS)
			return fail(c, RT_EDEVICE, "cuModuleLoadDataEx failed during the load of module %s: "
			            "%s (rank %d)%s%.1500s", names[i], cu_name(c, r, nb), c->rank,
			            log[0] ? "; the JIT's log: " : "", log);
	}
	if ((rc = reserve_local(c)))
		return rc;
	BLAS_OK(c, cublasCreate(&c->blas), "cuBLAS setup");
	CUDA_OK(c, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking), "stream setup");
	CUDA_OK(c, cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking), "stream setup");
	BLAS_OK(c, cublasSetStream(c->blas, c->compute), "cuBLAS setup");
	BLAS_OK(c, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cuBLAS setup");
	CUDA_OK(c, cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming), "event setup");
	const char *attn = getenv("OCTO_ATTN");
	if (attn && !strcmp(attn, "cudnn")) {
		char err[600];
		if (!c->dev.bf16)
			return fail(c, RT_EARG, "OCTO_ATTN=cudnn: cuDNN's fused attention takes bf16, and "
			            "this rank computes in f32 (compile with --dtype bf16, or unset OCTO_ATTN) "
			            "(rank %d)", c->rank);
		if ((rc = cdn_attn_open(&c->cdn, c->compute, c->rank, err, sizeof err)))
			return fail(c, rc == RT_ENODEV ? RT_EDEVICE : rc, "OCTO_ATTN=cudnn: %s (rank %d)", err,
			            c->rank);
	}
	if (use_mpi)
		return RT_OK;

	/* NCCL: rank 0's unique id to every rank, once, before the first step. */
	ncclUniqueId id;
	if (c->rank == 0)
		NCCL_OK(c, ncclGetUniqueId(&id), "NCCL bootstrap");
	if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
		return fail(c, RT_EMPI, "MPI_Bcast failed during NCCL bootstrap (rank %d)", c->rank);
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0; /* so that a failing rank can ncclCommAbort */
	NCCL_OK(c, ncclCommInitRankConfig(&c->nccl, c->nranks, id, c->rank, &cfg),
	        "NCCL bootstrap (ncclCommInitRankConfig)");
	return RT_OK;
}

int dev_cuda_create(int rank, int nranks, bool bf16, int nmods, const char *const *names,
                    const char *const *ptx, bool nccl, double timeout_s, rt_dev **out, char *err,
                    size_t errlen)
{
	*out = NULL;
	rt_cuda *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "device: out of host memory (rank %d)", rank);
		return RT_ENOMEM;
	}
	c->rank = rank;
	c->nranks = nranks;
	c->timeout_s = timeout_s > 0 ? timeout_s : 600;
	const char *sync = getenv("OCTO_CUDA_SYNC"), *attn = getenv("OCTO_ATTN");
	c->sync_each = sync && strcmp(sync, "1") == 0;
	if (attn && *attn && strcmp(attn, "cudnn") != 0 && strcmp(attn, "own") != 0) {
		snprintf(err, errlen, "OCTO_ATTN=%s: the attention core runs OctoPipe's kernels (own, the "
		         "default) or cuDNN's fused attention (cudnn)", attn);
		free(c);
		return RT_EARG;
	}
	c->dev = (rt_dev){.ops = &cuda_ops, .bf16 = bf16, .row = 256, .each_block = 256,
	                  .max_grid = 8192, .rank = rank, .impl = c};
	int rc = setup(c, nmods, names, ptx, !nccl);
	if (rc) {
		snprintf(err, errlen, "%s", c->dev.err);
		if (c->nccl)
			ncclCommAbort(c->nccl);
		release(c);
		return rc;
	}
	c->dcomm = (rt_dcomm){.self = c, .group_begin = n_group_begin, .send = n_send, .recv = n_recv,
	                      .dp_init = n_dp_init, .coll = n_coll, .group_end = n_group_end, .test = n_test, .release = n_release,
	                      .error = n_error};
	*out = &c->dev;
	return RT_OK;
}

int rt_device_attach_cuda(rt_ctx *ctx, int bf16, int nmods, const char *const *names,
                          const char *const *ptx, const int32_t *layer_mod)
{
	if (!ctx || nmods < 0 || (nmods && (!names || !ptx)) || !layer_mod)
		return RT_EARG;
	const char *mode = getenv("OCTO_COMM"), *sync = getenv("OCTO_CUDA_SYNC");
	if (sync && *sync && strcmp(sync, "0") != 0 && strcmp(sync, "1") != 0)
		return rt__fail(ctx, RT_EARG, "OCTO_CUDA_SYNC=%s: 1 waits for the device after every "
		                "launch and GEMM, 0 (the default) does not", sync);
	bool use_mpi = mode && strcmp(mode, "mpi") == 0;
	if (mode && *mode && !use_mpi && strcmp(mode, "nccl") != 0)
		return rt__fail(ctx, RT_EARG, "OCTO_COMM=%s: the CUDA ranks talk through nccl (the default) "
		                "or mpi", mode);
	rt_dev *dev;
	int rc = dev_cuda_create(ctx->rank, ctx->world, bf16 != 0, nmods, names, ptx, !use_mpi,
	                         ctx->timeout_s, &dev, ctx->err, sizeof ctx->err);
	if (rc)
		return rc;
	return rt__dev_attach(ctx, dev, layer_mod, use_mpi ? NULL : &((rt_cuda *)dev->impl)->dcomm,
	                      use_mpi);
}
