/* emu_abi.h: the host emulator's ABI with the kernel modules compiled for
 * it, the one description that both sides read.  The emulator
 * (dev_emu.c, through dev.h) includes it as C; the modules get it as
 * text in front of codegen/cuda_emu.h (the build embeds the two as one,
 * cuda_emu_text.h) and compile it as C++.  Plain C, nothing else: a
 * module is compiled standalone, and no symbol is resolved across the
 * shared object's boundary -- the module reads the state through the
 * pointer its first entry, octo_emu_bind, receives before every launch. */
#ifndef OCTO_EMU_ABI_H
#define OCTO_EMU_ABI_H

/* Threads per block of the row kernels in the emulator (the modules'
 * OCTO_ROW; 256 on CUDA). */
#define OCTO_EMU_ROW 32

/* The name of a module's entry table when it is a shared object
 * (dev_emu_add_source) rather than linked into the program. */
#define OCTO_EMU_TABLE "octo_emu_table"

/* What a module reads threadIdx, blockIdx, blockDim, gridDim and
 * __syncthreads() from. */
typedef struct octo_emu_dim3 {
	unsigned x, y, z;
} octo_emu_dim3;

typedef struct octo_emu_ctx {
	octo_emu_dim3 thread, block, block_dim, grid_dim;
	void (*sync)(struct octo_emu_ctx *ctx);
} octo_emu_ctx;

/* One entry point of a module: call(args) runs the kernel body for the
 * current thread, args as cuLaunchKernel's kernelParams (a pointer to
 * each argument).  A module's table is {NULL, NULL}-terminated, and its
 * first entry is octo_emu_bind: args[0] is the octo_emu_ctx itself. */
typedef struct octo_emu_entry {
	const char *name;
	void (*call)(void **args);
} octo_emu_entry;

#endif
