/* kernels_f64.h: the double-precision build of the layer kernels (tests
 * only): the API of octo_kernels.h with prefix rtd_ and double buffers. */
#ifndef OCTO_KERNELS_F64_H
#define OCTO_KERNELS_F64_H

#include "octo_kernels.h"

RT_KERNEL_API(rtd, double)

#endif
