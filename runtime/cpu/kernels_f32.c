/* kernels_f32.c: the runtime's kernels, f32 (rt_ names, cblas_sgemm). */
#include "octo_kernels.h"

typedef float real;
#define RT(name) rt_##name
#define GEMM cblas_sgemm

#include "kernels.inc"
