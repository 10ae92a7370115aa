/* octo_cuda.h: the CUDA path of libocto_rt (runtime/cuda/; docs/cuda.md).
 *
 * One rank's device state: the CUDA context (driver API, the primary
 * context of device rank % devices), the kernel modules loaded from the PTX
 * images embedded in the rank executable, a cuBLAS handle, a compute and a
 * communication stream ordered by events, one device arena (cudaMalloc,
 * never managed memory) and the communicator: NCCL (its unique id
 * broadcast over MPI once, before the first step; non-blocking, so a
 * failing rank can ncclCommAbort) or, with OCTO_COMM=mpi, host-staged MPI
 * transfers (several ranks may then share one GPU).
 *
 * Every CUDA, cuBLAS and NCCL call is checked; a failure returns a negative
 * RT_ code and leaves "rank R: CALL failed during OP: WHY" in
 * rt_cuda_error().  Nothing here calls exit(). */
#ifndef OCTO_CUDA_H
#define OCTO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "octo_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_ENODEV (-20) /* no CUDA device (or no driver) */
#define RT_ECUDA (-21)  /* a CUDA, cuBLAS or NCCL call failed */

typedef struct rt_cuda rt_cuda;

/* One kernel module: its name (<kind>_<hash>) and NUL-terminated PTX. */
typedef struct rt_cuda_image {
	const char *name;
	const char *ptx;
} rt_cuda_image;

/* Sets up rank `rank` of `nranks`: MPI must be initialised (the NCCL id is
 * broadcast over MPI_COMM_WORLD).  arena_bytes of device memory.  On
 * failure *out is NULL and rt_cuda_error(NULL) says why. */
int rt_cuda_init(int rank, int nranks, int nimages, const rt_cuda_image *images,
                 size_t arena_bytes, rt_cuda **out);

/* The last failure's message (of c, or of the last failed rt_cuda_init). */
const char *rt_cuda_error(const rt_cuda *c);

/* Bump allocation from the device arena (256-byte aligned); NULL when full. */
void *rt_cuda_alloc(rt_cuda *c, size_t bytes);

/* A kernel of a loaded module, by its entry name; NULL after an error. */
void *rt_cuda_kernel(rt_cuda *c, const char *module, const char *entry);

/* Point-to-point, between group_begin and group_end exactly as the
 * verified program groups them; the communication stream first waits for
 * the compute stream's work so far, and the compute stream waits for the
 * group at group_end.  With OCTO_COMM=mpi the transfers are host-staged
 * MPI calls, completed at group_end. */
int rt_cuda_group_begin(rt_cuda *c);
int rt_cuda_send(rt_cuda *c, const void *buf, size_t bytes, int peer, const char *op);
int rt_cuda_recv(rt_cuda *c, void *buf, size_t bytes, int peer, const char *op);
int rt_cuda_group_end(rt_cuda *c, const char *op);

/* Waits for both streams. */
int rt_cuda_sync(rt_cuda *c, const char *op);

/* After a failure: ncclCommAbort (so no peer hangs), then frees. */
void rt_cuda_abort(rt_cuda *c);

/* Frees everything (ncclCommFinalize and destroy, streams, arena, modules). */
int rt_cuda_fini(rt_cuda *c);

/* The main of a CUDA rank executable (codegen/target_cuda.c): --help says
 * what the rank is; otherwise MPI, the device state above, and then (the
 * step executor is not built yet) a clear error.  Returns the exit status:
 * 0, 1 on a failure ("no CUDA device: ..." when there is none), 2 for what
 * is not built. */
int rt_cuda_rank_main(int argc, char **argv, int rank, int nranks, const char *about,
                      int nimages, const char *const *names, const char *const *ptx);

#ifdef __cplusplus
}
#endif

#endif
