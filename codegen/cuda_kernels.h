/* cuda_kernels.h: the CUDA target's generated kernels (docs/cuda.md).
 *
 *   cg_cuda_source   one layer's non-GEMM kernels as CUDA C++ source, the
 *                    shapes baked in as constants (F, B and W kernels named
 *                    <kind>_F_*, <kind>_B_*, <kind>_W_*)
 *   cg_cuda_ptx      NVRTC: source -> PTX for an architecture (sm_XX)
 *   cg_cuda_emu_source  the same source for the host emulator
 *                    (runtime/dev/dev_emu.c): shim, source, entry table
 *
 * Matrix products are not in the generated source: the runtime runs them
 * through cuBLAS.  cg_cuda_ptx needs NVRTC: only built
 * with OCTO_HAVE_CUDA. */
#ifndef OCTO_CUDA_KERNELS_H
#define OCTO_CUDA_KERNELS_H

#include <stdbool.h>

#include "ir.h"
#include "octo_kernels.h"

/* Source of d's kernels (arena-allocated); NULL after a message when the
 * runtime's shape rules reject d. */
char *cg_cuda_source(const rt_layer_desc *d, bool bf16, arena *a);

/* A stable name for d's kernel module: <kind>_<hash of the source>. */
char *cg_cuda_module_name(const rt_layer_desc *d, const char *src, arena *a);

/* d's module for the host emulator (arena-allocated; NULL as
 * cg_cuda_source): the shim codegen/cuda_emu.h, cg_cuda_source's text,
 * then `extern "C" const octo_emu_entry TABLE[]` ({name, call} rows as
 * runtime/dev/dev.h's dev_emu_entry, {NULL, NULL}-terminated): first
 * octo_emu_bind, then every entry point of the module.  Compiles with
 * `c++ -std=c++17`; dev_emu_add_source loads it (TABLE: DEV_EMU_TABLE). */
char *cg_cuda_emu_source(const rt_layer_desc *d, bool bf16, const char *table, arena *a);

#ifdef OCTO_HAVE_CUDA
/* Compile src with NVRTC for arch ("sm_90", "sm_80", ...): *ptx gets the
 * PTX (arena-allocated).  Returns 0, or -1 after printing NVRTC's log as an
 * error naming the module. */
int cg_cuda_ptx(const char *name, const char *src, const char *arch, char **ptx, arena *a);

#endif

#endif
