/* rt_cuda.c: the CUDA path of libocto_rt: device, modules, streams, arena,
 * communicator (octo_cuda.h; docs/cuda.md).
 *
 * The driver API (cuModuleLoadData, ...) is reached through the CUDA
 * runtime's cudaGetDriverEntryPointByVersion, not by linking libcuda: a
 * rank executable then starts on a machine without a driver and says "no
 * CUDA device: ..." instead of failing in the dynamic loader. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "octo_cuda.h"

typedef CUresult (*pfn_load)(CUmodule *, const void *);
typedef CUresult (*pfn_getfn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*pfn_unload)(CUmodule);

struct rt_cuda {
	int rank, nranks, dev;
	int nmods;
	CUmodule *mods;
	const char **names;
	pfn_getfn getfn;
	pfn_unload unload;
	cublasHandle_t blas;
	cudaStream_t compute, comm;
	cudaEvent_t ready, done;
	char *arena;
	size_t arena_size, arena_used;
	bool use_mpi; /* OCTO_COMM=mpi: host-staged transfers */
	ncclComm_t nccl;
	int nreq;     /* MPI: requests of the open group */
	MPI_Request req[64];
	void *stage[64], *dst[64];
	size_t stage_bytes[64];
	char err[512];
};

static char init_err[512];

static int fail(rt_cuda *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(rt_cuda *c, int code, const char *fmt, ...)
{
	char *e = c ? c->err : init_err;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e, sizeof init_err, fmt, ap);
	va_end(ap);
	return code;
}

/* Every call checked: the rank, the call and the op in the message. */
#define CUDA_OK(c, call, op)                                                               \
	do {                                                                                 \
		cudaError_t e_ = (call);                                                         \
		if (e_ != cudaSuccess)                                                           \
			return fail(c, RT_ECUDA, "rank %d: %s failed during %s: %s", (c)->rank, #call, \
			            op, cudaGetErrorString(e_));                                     \
	} while (0)
#define DRV_OK(c, call, op)                                                                 \
	do {                                                                                  \
		CUresult e_ = (call);                                                             \
		if (e_ != CUDA_SUCCESS)                                                           \
			return fail(c, RT_ECUDA, "rank %d: %s failed during %s: CUresult %d", (c)->rank, \
			            #call, op, (int)e_);                                              \
	} while (0)
#define BLAS_OK(c, call, op)                                                                \
	do {                                                                                  \
		cublasStatus_t e_ = (call);                                                       \
		if (e_ != CUBLAS_STATUS_SUCCESS)                                                  \
			return fail(c, RT_ECUDA, "rank %d: %s failed during %s: %s", (c)->rank, #call,  \
			            op, cublasGetStatusString(e_));                                   \
	} while (0)

/* NCCL calls on a non-blocking communicator may return ncclInProgress:
 * poll ncclCommGetAsyncError until the operation settles. */
static ncclResult_t nccl_settle(ncclComm_t comm, ncclResult_t r)
{
	while (r == ncclInProgress && comm)
		if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
			break;
	return r;
}
#define NCCL_OK(c, call, op)                                                                \
	do {                                                                                  \
		ncclResult_t e_ = nccl_settle((c)->nccl, (call));                                 \
		if (e_ != ncclSuccess)                                                            \
			return fail(c, RT_ECUDA, "rank %d: %s failed during %s: %s (%s)", (c)->rank,    \
			            #call, op, ncclGetErrorString(e_), ncclGetLastError((c)->nccl));  \
	} while (0)
#define MPI_OK(c, call, op)                                                                 \
	do {                                                                                  \
		if ((call) != MPI_SUCCESS)                                                        \
			return fail(c, RT_EMPI, "rank %d: %s failed during %s", (c)->rank, #call, op);  \
	} while (0)

static int driver_fn(rt_cuda *c, const char *sym, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	CUDA_OK(c, cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q), sym);
	if (q != cudaDriverEntryPointSuccess || !*fn)
		return fail(c, RT_ECUDA, "rank %d: the CUDA driver has no %s", c->rank, sym);
	return RT_OK;
}

static int setup(rt_cuda *c, int nimages, const rt_cuda_image *images, size_t arena_bytes)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0)
		return fail(c, RT_ENODEV, "no CUDA device: %s (rank %d)",
		            e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices", c->rank);
	c->dev = c->rank % n;
	CUDA_OK(c, cudaSetDevice(c->dev), "device setup");
	CUDA_OK(c, cudaFree(0), "context creation"); /* the primary context, current from here */

	pfn_load load;
	int rc;
	if ((rc = driver_fn(c, "cuModuleLoadData", (void **)&load)) ||
	    (rc = driver_fn(c, "cuModuleGetFunction", (void **)&c->getfn)) ||
	    (rc = driver_fn(c, "cuModuleUnload", (void **)&c->unload)))
		return rc;
	c->mods = calloc((size_t)nimages + 1, sizeof *c->mods);
	c->names = calloc((size_t)nimages + 1, sizeof *c->names);
	if (!c->mods || !c->names)
		return fail(c, RT_ENOMEM, "rank %d: out of host memory", c->rank);
	for (int i = 0; i < nimages; i++) {
		CUresult r = load(&c->mods[i], images[i].ptx);
		if (r != CUDA_SUCCESS)
			return fail(c, RT_ECUDA, "rank %d: cuModuleLoadData failed during module load of %s: CUresult %d",
			            c->rank, images[i].name, (int)r);
		c->names[i] = images[i].name;
		c->nmods = i + 1;
	}
	BLAS_OK(c, cublasCreate(&c->blas), "cuBLAS setup");
	CUDA_OK(c, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking), "stream setup");
	CUDA_OK(c, cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking), "stream setup");
	BLAS_OK(c, cublasSetStream(c->blas, c->compute), "cuBLAS setup");
	CUDA_OK(c, cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming), "event setup");
	CUDA_OK(c, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "event setup");
	if (arena_bytes) {
		CUDA_OK(c, cudaMalloc((void **)&c->arena, arena_bytes), "the device arena");
		c->arena_size = arena_bytes;
	}

	const char *mode = getenv("OCTO_COMM");
	c->use_mpi = mode && strcmp(mode, "mpi") == 0;
	if (c->use_mpi)
		return RT_OK;
	/* NCCL: rank 0's unique id to every rank, once, before the first step. */
	ncclUniqueId id;
	if (c->rank == 0)
		NCCL_OK(c, ncclGetUniqueId(&id), "NCCL bootstrap");
	MPI_OK(c, MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "NCCL bootstrap");
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0; /* so that a failing rank can ncclCommAbort */
	ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->nranks, id, c->rank, &cfg);
	NCCL_OK(c, r, "NCCL bootstrap (ncclCommInitRankConfig)");
	return RT_OK;
}

int rt_cuda_init(int rank, int nranks, int nimages, const rt_cuda_image *images,
                 size_t arena_bytes, rt_cuda **out)
{
	*out = NULL;
	rt_cuda *c = calloc(1, sizeof *c);
	if (!c)
		return fail(NULL, RT_ENOMEM, "rank %d: out of host memory", rank);
	c->rank = rank;
	c->nranks = nranks;
	int rc = setup(c, nimages, images, arena_bytes);
	if (rc) {
		memcpy(init_err, c->err, sizeof init_err);
		rt_cuda_abort(c);
		return rc;
	}
	*out = c;
	return RT_OK;
}

const char *rt_cuda_error(const rt_cuda *c) { return c ? c->err : init_err; }

void *rt_cuda_alloc(rt_cuda *c, size_t bytes)
{
	size_t at = (c->arena_used + 255) & ~(size_t)255;
	if (at + bytes > c->arena_size) {
		fail(c, RT_ENOMEM, "rank %d: the device arena (%zu bytes) is full", c->rank, c->arena_size);
		return NULL;
	}
	c->arena_used = at + bytes;
	return c->arena + at;
}

void *rt_cuda_kernel(rt_cuda *c, const char *module, const char *entry)
{
	for (int i = 0; i < c->nmods; i++)
		if (strcmp(c->names[i], module) == 0) {
			CUfunction f;
			CUresult r = c->getfn(&f, c->mods[i], entry);
			if (r == CUDA_SUCCESS)
				return (void *)f;
			fail(c, RT_ECUDA, "rank %d: cuModuleGetFunction(%s) failed in module %s: CUresult %d",
			     c->rank, entry, module, (int)r);
			return NULL;
		}
	fail(c, RT_EARG, "rank %d: no kernel module %s", c->rank, module);
	return NULL;
}

int rt_cuda_group_begin(rt_cuda *c)
{
	/* The transfers see everything the compute stream did so far. */
	CUDA_OK(c, cudaEventRecord(c->ready, c->compute), "group begin");
	CUDA_OK(c, cudaStreamWaitEvent(c->comm, c->ready, 0), "group begin");
	if (c->use_mpi) {
		CUDA_OK(c, cudaStreamSynchronize(c->comm), "group begin");
		c->nreq = 0;
		return RT_OK;
	}
	NCCL_OK(c, ncclGroupStart(), "group begin");
	return RT_OK;
}

static int mpi_slot(rt_cuda *c, size_t bytes, const char *op)
{
	if (c->nreq == (int)(sizeof c->req / sizeof *c->req))
		return fail(c, RT_EARG, "rank %d: more than 64 transfers in one group during %s", c->rank, op);
	void *h = malloc(bytes ? bytes : 1);
	if (!h)
		return fail(c, RT_ENOMEM, "rank %d: out of host memory during %s", c->rank, op);
	c->stage[c->nreq] = h;
	c->stage_bytes[c->nreq] = bytes;
	return RT_OK;
}

int rt_cuda_send(rt_cuda *c, const void *buf, size_t bytes, int peer, const char *op)
{
	if (!c->use_mpi) {
		NCCL_OK(c, ncclSend(buf, bytes, ncclUint8, peer, c->nccl, c->comm), op);
		return RT_OK;
	}
	int rc = mpi_slot(c, bytes, op);
	if (rc)
		return rc;
	CUDA_OK(c, cudaMemcpy(c->stage[c->nreq], buf, bytes, cudaMemcpyDeviceToHost), op);
	c->dst[c->nreq] = NULL;
	MPI_OK(c, MPI_Isend(c->stage[c->nreq], (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD,
	                    &c->req[c->nreq]), op);
	c->nreq++;
	return RT_OK;
}

int rt_cuda_recv(rt_cuda *c, void *buf, size_t bytes, int peer, const char *op)
{
	if (!c->use_mpi) {
		NCCL_OK(c, ncclRecv(buf, bytes, ncclUint8, peer, c->nccl, c->comm), op);
		return RT_OK;
	}
	int rc = mpi_slot(c, bytes, op);
	if (rc)
		return rc;
	c->dst[c->nreq] = buf;
	MPI_OK(c, MPI_Irecv(c->stage[c->nreq], (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD,
	                    &c->req[c->nreq]), op);
	c->nreq++;
	return RT_OK;
}

int rt_cuda_group_end(rt_cuda *c, const char *op)
{
	if (c->use_mpi) {
		MPI_OK(c, MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE), op);
		for (int i = 0; i < c->nreq; i++) {
			if (c->dst[i])
				CUDA_OK(c, cudaMemcpy(c->dst[i], c->stage[i], c->stage_bytes[i], cudaMemcpyHostToDevice), op);
			free(c->stage[i]);
		}
		c->nreq = 0;
		return RT_OK;
	}
	NCCL_OK(c, ncclGroupEnd(), op);
	/* The compute stream's next kernels see what the group received. */
	CUDA_OK(c, cudaEventRecord(c->done, c->comm), op);
	CUDA_OK(c, cudaStreamWaitEvent(c->compute, c->done, 0), op);
	return RT_OK;
}

int rt_cuda_sync(rt_cuda *c, const char *op)
{
	CUDA_OK(c, cudaStreamSynchronize(c->compute), op);
	CUDA_OK(c, cudaStreamSynchronize(c->comm), op);
	return RT_OK;
}

static void release(rt_cuda *c)
{
	for (int i = 0; i < c->nmods; i++)
		c->unload(c->mods[i]);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->ready)
		cudaEventDestroy(c->ready);
	if (c->done)
		cudaEventDestroy(c->done);
	if (c->compute)
		cudaStreamDestroy(c->compute);
	if (c->comm)
		cudaStreamDestroy(c->comm);
	if (c->arena)
		cudaFree(c->arena);
	free(c->mods);
	free(c->names);
	free(c);
}

void rt_cuda_abort(rt_cuda *c)
{
	if (!c)
		return;
	if (c->nccl)
		ncclCommAbort(c->nccl);
	c->nccl = NULL;
	release(c);
}

int rt_cuda_fini(rt_cuda *c)
{
	if (!c)
		return RT_OK;
	int rc = RT_OK;
	if (c->nccl) {
		ncclResult_t r = nccl_settle(c->nccl, ncclCommFinalize(c->nccl));
		if (r != ncclSuccess) {
			rc = fail(c, RT_ECUDA, "rank %d: ncclCommFinalize failed during shutdown: %s", c->rank,
			          ncclGetErrorString(r));
			ncclCommAbort(c->nccl);
		} else {
			ncclCommDestroy(c->nccl);
		}
		c->nccl = NULL;
	}
	release(c);
	return rc;
}

int rt_cuda_rank_main(int argc, char **argv, int rank, int nranks, const char *about,
                      int nimages, const char *const *names, const char *const *ptx)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0) {
			printf("%s\nkernels: %d PTX modules embedded", about, nimages);
			for (int k = 0; k < nimages; k++)
				printf("%s%s", k ? ", " : ": ", names[k]);
			printf("\n");
			return 0;
		}
	int provided, rc = 1;
	if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
		fprintf(stderr, "octopipe rank %d: error: MPI_Init_thread failed\n", rank);
		return 1;
	}
	int me = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (me != rank || size != nranks) {
		fprintf(stderr, "octopipe rank %d: error: this is the program of rank %d of %d, but it runs "
		                "as rank %d of %d (start the ranks with the 'launch' script next to it)\n",
		        me, rank, nranks, me, size);
		MPI_Abort(MPI_COMM_WORLD, 1);
		return 1;
	}
	rt_cuda_image *img = calloc((size_t)nimages + 1, sizeof *img);
	for (int i = 0; img && i < nimages; i++)
		img[i] = (rt_cuda_image){names[i], ptx[i]};
	rt_cuda *c = NULL;
	int e = img ? rt_cuda_init(rank, nranks, nimages, img, 0, &c) : RT_ENOMEM;
	if (e) {
		fprintf(stderr, "octopipe rank %d: error: %s\n", rank, rt_cuda_error(NULL));
	} else {
		fprintf(stderr, "octopipe rank %d: error: the CUDA step executor (layer F/B/W on the GPU) "
		                "is not built yet in this version (docs/cuda.md); the device, the %d kernel "
		                "modules and the communicator were set up\n", rank, nimages);
		rc = 2;
		rt_cuda_fini(c);
	}
	free(img);
	if (e && size > 1)
		MPI_Abort(MPI_COMM_WORLD, rc); /* no peer left waiting in the bootstrap */
	MPI_Finalize();
	return rc;
}
