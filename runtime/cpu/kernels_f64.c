/* kernels_f64.c: the same kernels in double (rtd_ names, cblas_dgemm), for
 * the tests' finite-difference gradient checks.  Not part of libocto_rt. */
#include "kernels_f64.h"

typedef double real;
#define RT(name) rtd_##name
#define GEMM cblas_dgemm

#include "kernels.inc"
