// The row kernels (row_kernels_impl.h) without vector instructions beyond the build's baseline:
// ATen's DEFAULT capability, which every CPU runs.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MGG_ISA isa_default
#define MGG_ISA_NAME "default"
#include "row_kernels_impl.h"
