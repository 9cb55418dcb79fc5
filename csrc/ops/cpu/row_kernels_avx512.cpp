// The row kernels (row_kernels_impl.h) with AVX-512 (F, BW, VL, DQ, as ATen's AVX512 capability)
// and FMA. GCC on x86-64 only; elsewhere there is no such copy (row_kernels_for("avx512") is null).
#include "row_kernels.h"
#if MGG_X86_GCC
#include "row_kernels_baseline.h"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// what -mavx512f would define: the headers (SLEEF's, ATen's) test these macros
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define __AVX512F__ 1
#define __AVX512BW__ 1
#define __AVX512VL__ 1
#define __AVX512DQ__ 1
#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512
#define MGG_ISA isa_avx512
#define MGG_ISA_NAME "avx512"
#include "row_kernels_impl.h"
#else
MGG_NO_ROW_KERNELS(isa_avx512)
#endif
