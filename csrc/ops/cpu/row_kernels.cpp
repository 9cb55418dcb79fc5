// Which copy of the row kernels runs (row_kernels.h), and the threads' share-out of rows.
#include "row_kernels.h"

#include <ATen/Version.h>

#include <cstring>

#include "parallel_rows.h"

namespace mgg::cpu {

const RowKernels* row_kernels_for(const char* isa) {
  const RowKernels* all[] = {&isa_default::kernels, &isa_avx2::kernels, &isa_avx512::kernels};
  const char* names[] = {"default", "avx2", "avx512"};
  for (int i = 0; i < 3; ++i)
    if (std::strcmp(isa, names[i]) == 0) return all[i]->sum ? all[i] : nullptr;
  return nullptr;
}

const RowKernels& row_kernels() {
  // at::get_cpu_capability(): what ATen's own kernels run ("DEFAULT", "AVX2", "AVX512", or another
  // architecture's name), from the CPU and ATEN_CPU_CAPABILITY
  static const RowKernels& chosen = [] {
    const std::string cap = at::get_cpu_capability();
    const RowKernels* k = cap == "AVX512" ? row_kernels_for("avx512")
                          : cap == "AVX2" ? row_kernels_for("avx2")
                                          : nullptr;
    return k ? *k : isa_default::kernels;
  }();
  return chosen;
}

void for_row_ranges(const RowsCall& call, int64_t rows, RowsFn fn) {
  parallel_rows(call.local.rowptr, call.remote.rowptr, rows, call.dim,
                [&](int64_t r0, int64_t r1) { fn(call, r0, r1); });
}

}  // namespace mgg::cpu
