// The CPU kernels of the aggregation ops: a thread owns a range of whole output rows (nnz
// balanced, core/row_ranges.h) and sums each row's edges in edge order, its local edges then its
// remote ones, with the row held in vector registers (ATen's Vectorized) and the source rows of
// the next edges prefetched. The result of a row depends on nothing but its edges, so every
// thread count gives the same bits and the deterministic mode costs nothing.
//
// The kernels are compiled once per instruction set (row_kernels_{default,avx2,avx512}.cpp over
// row_kernels_impl.h) and chosen at run time as ATen chooses its own (at::get_cpu_capability():
// what the CPU has, capped by ATEN_CPU_CAPABILITY).
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace mgg::cpu {

// One part of a step as the kernels read it: a CSR over the output rows whose sources are rows of
// one table (`table`) or, where `pe` is set, row col[e] of PE pe[e]'s table (`peers[pe]`).
struct RowPart {
  const int64_t* rowptr = nullptr;  // [rows + 1]; null: the step has no such part
  const int32_t* col = nullptr;
  const void* weight = nullptr;  // [edges] in the accumulation type (float; double for double), or null
  const int32_t* pe = nullptr;
  const void* table = nullptr;
  const void* const* peers = nullptr;
  bool prefetch = true;  // prefetch the source rows of later edges (prefetch_pays)
};

// Tables at or below this many bytes stay in a core's L2 (512 KB to 2 MB on current x86), where
// prefetching the next rows costs more instructions than it saves (Cora at D = 16: about 20%).
constexpr int64_t kPrefetchTableBytes = 1 << 20;
inline bool prefetch_pays(int64_t table_bytes) { return table_bytes > kPrefetchTableBytes; }

// A call of a row kernel over x's dtype and width. The max/min kernel also writes arg (int64, the
// row of [x | x_remote] each element came from; remote rows are numbered from remote_base).
struct RowsCall {
  c10::ScalarType dtype;
  int64_t dim;
  RowPart local, remote;
  void* out;
  int64_t* arg = nullptr;
  bool is_max = false;
  int64_t remote_base = 0;
};

using RowsFn = void (*)(const RowsCall&, int64_t row_begin, int64_t row_end);

// One instruction set's kernels.
struct RowKernels {
  const char* isa;  // "default", "avx2", "avx512"
  RowsFn sum;       // out[r] = sum of w * source row over r's edges
  RowsFn extreme;   // max/min with core/extreme.h's rule
};

// The kernels for this CPU (and ATEN_CPU_CAPABILITY); `isa` names another set ("default" is always
// there; one this CPU or build lacks: null).
const RowKernels& row_kernels();
const RowKernels* row_kernels_for(const char* isa);

// Runs fn over rows [0, rows) of a call in nnz-balanced ranges on ATen's threads.
void for_row_ranges(const RowsCall& call, int64_t rows, RowsFn fn);

// Each instruction set's copy (row_kernels_<isa>.cpp); one that is not built has null kernels.
namespace isa_default {
extern const RowKernels kernels;
}
namespace isa_avx2 {
extern const RowKernels kernels;
}
namespace isa_avx512 {
extern const RowKernels kernels;
}

// Where the AVX2 and AVX-512 copies are compiled: GCC's target pragma on x86-64.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MGG_X86_GCC 1
#else
#define MGG_X86_GCC 0
#endif
#define MGG_NO_ROW_KERNELS(ISA)                            \
  namespace mgg::cpu::ISA {                                \
  extern const RowKernels kernels{#ISA, nullptr, nullptr}; \
  }

}  // namespace mgg::cpu
