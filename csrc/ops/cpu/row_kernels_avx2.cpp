// The row kernels (row_kernels_impl.h) with AVX2 and FMA: ATen's AVX2 capability. GCC on x86-64
// only; elsewhere there is no such copy (row_kernels_for("avx2") is null).
#include "row_kernels.h"
#if MGG_X86_GCC
#include "row_kernels_baseline.h"
#pragma GCC target("avx2,fma,f16c")
// what -mavx2 would define: the headers (SLEEF's, ATen's) test these macros
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#define MGG_ISA isa_avx2
#define MGG_ISA_NAME "avx2"
#include "row_kernels_impl.h"
#else
MGG_NO_ROW_KERNELS(isa_avx2)
#endif
