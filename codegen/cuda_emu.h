/* cuda_emu.h: the shim that lets a kernel module (cg_cuda_source: the
 * constants, cuda_lib.cu, the entry points) compile with the host C++
 * compiler for the emulator of runtime/dev/dev_emu.c (docs/cuda.md).
 * Embedded into octopipe as text (cg_cuda_emu) and put in front of the
 * module by cg_cuda_emu_source, which appends the module's entry table.
 *
 * The emulator runs the threads of a block one after another, so:
 *   - __shared__ is a static (one block at a time sees it);
 *   - __device__ and the entry points are static, so that modules linked
 *     into one program do not clash, and each module has its own statics;
 *   - threadIdx, blockIdx, blockDim, gridDim and __syncthreads() read
 *     through a pointer to the emulator's state, set by the module's first
 *     entry, octo_emu_bind, before every launch.  No symbol is resolved
 *     across the shared object's boundary.
 * The state, the entry table and OCTO_ROW are the emulator's ABI,
 * runtime/dev/emu_abi.h: the build embeds that header's text in front of
 * this one (cuda_emu_text.h), so a module is compiled against the very
 * struct the emulator fills. */
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <utility>

#define __global__
#define __device__ static
#define __forceinline__ inline
#define __shared__ static
#define OCTO_EMU 1 /* cuda_lib.cu: the tile products without the tensor cores */
#define OCTO_KERNEL static
#define OCTO_KERNEL_THREADS(n) static

#ifndef OCTO_EMU_ABI_H /* embedded, the header's text is already in front */
#include "emu_abi.h"
#endif
#ifndef OCTO_ROW /* dev_emu_gpu_launch compiles the modules with -DOCTO_ROW=256 */
#define OCTO_ROW OCTO_EMU_ROW
#endif

static octo_emu_ctx *octo_emu;

#define threadIdx (octo_emu->thread)
#define blockIdx (octo_emu->block)
#define blockDim (octo_emu->block_dim)
#define gridDim (octo_emu->grid_dim)
#define __syncthreads() octo_emu->sync(octo_emu)

/* args[0]: the state (the pointer itself). */
static void octo_emu_bind(void **args)
{
	octo_emu = (octo_emu_ctx *)args[0];
}

/* The device intrinsics cuda_lib.cu uses; the rest (expf, logf, log1pf,
 * erff, fmaxf, sqrtf, pow, cos, sin, INFINITY) are the C library's. */
static inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}
static inline float __int_as_float(int i)
{
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}
static inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, sizeof u);
	return u;
}
static inline float rsqrtf(float v)
{
	return 1.f / sqrtf(v);
}

/* An entry (octo_emu_entry) as the emulator calls it: call(args);
 * octo_emu_thunk<f>::call unpacks the arguments for the kernel f. */
template <auto F> struct octo_emu_thunk;
template <typename... A, void (*F)(A...)> struct octo_emu_thunk<F> {
	template <size_t... I> static void unpack(void **args, std::index_sequence<I...>)
	{
		F(*(A *)args[I]...);
	}
	static void call(void **args)
	{
		unpack(args, std::index_sequence_for<A...>{});
	}
};
