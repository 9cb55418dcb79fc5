// A step's parts and sources on raw pointers (PlanPart, TableSource, PeerSource: the attention
// executor's too), and the replay of the GPU's warp-range schedule (layout in core/schedule.h) on
// the CPU: execute_ranges walks it warp range by warp range as the CUDA kernel does, carries and
// fixups included, so the native tests (csrc/tests/test_core.cpp) check that every schedule sums
// every edge once. The CPU ops do not replay it: a CPU thread owns whole rows
// (ops/cpu/row_kernels.h). Torch-free and header-only, so the native tests build it without
// libtorch.
#pragma once
#include <algorithm>
#include <cstdint>

#include "schedule.h"

namespace mgg {

// One part of a step: a CSR over the output rows. col is a source row of a table, or, with pe,
// the offset of the source row inside the table of PE pe[e].
template <typename weight_t>
struct PlanPart {
  const int64_t* rowptr;   // [rows + 1]
  const int32_t* col;      // [edges]
  const weight_t* weight;  // [edges] or nullptr (weight 1)
  const int32_t* pe;       // [edges] owner PE of each source row (peer sources), else nullptr
};

// Where a part's source rows live: one table (a rank's own rows, a halo buffer), or each PE's
// table (row col[e] of PE pe[e]).
template <typename scalar_t>
struct TableSource {
  const scalar_t* table;
  int64_t ld;
  const scalar_t* row(const int32_t* /*pe*/, const int32_t* col, int64_t e) const {
    return table + static_cast<int64_t>(col[e]) * ld;
  }
};

template <typename scalar_t>
struct PeerSource {
  const void* const* peers;  // [num_pes] base of each PE's table
  int64_t ld;
  const scalar_t* row(const int32_t* pe, const int32_t* col, int64_t e) const {
    return static_cast<const scalar_t*>(peers[pe[e]]) + static_cast<int64_t>(col[e]) * ld;
  }
};

// partial[0 : width) += sum over edges [begin, end) of w * source row, columns [d0, d0 + width).
template <typename scalar_t, typename acc_t, typename Source>
inline void accumulate_edges(const PlanPart<acc_t>& p, int64_t begin, int64_t end, const Source& src, acc_t* partial,
                             int64_t d0, int64_t width) {
  for (int64_t e = begin; e < end; ++e) {
    const scalar_t* x = src.row(p.pe, p.col, e) + d0;
    const acc_t w = p.weight ? static_cast<acc_t>(p.weight[e]) : acc_t(1);
    for (int64_t d = 0; d < width; ++d) partial[d] += w * static_cast<acc_t>(x[d]);
  }
}

struct Schedule {
  const int64_t* ranges;  // [num_warps + 1, kRangeFields]
  int64_t num_warps;
  const int64_t* fixups;  // [num_fixups, kFixupFields]
  int64_t num_fixups;
};

// Computes columns [d_begin, d_end) of out (row stride ld) warp by warp as the CUDA kernel walks
// the schedule (core/schedule.h): each row's local edges, then its remote ones, into one sum,
// written once to the output or, for a piece of a split row, to its carry row (stride ld); then
// the fixups sum each split row's carry rows in order. `sum` holds d_end - d_begin accumulators.
template <typename scalar_t, typename acc_t, typename LocalSource, typename RemoteSource, typename out_t>
void execute_ranges(const PlanPart<acc_t>& local, const LocalSource& lsrc, const PlanPart<acc_t>& remote,
                    const RemoteSource& rsrc, const Schedule& s, int64_t ld, out_t* out, acc_t* carry, acc_t* sum,
                    int64_t d_begin, int64_t d_end) {
  const int64_t width = d_end - d_begin;
  for (int64_t w = 0; w < s.num_warps; ++w) {
    const int64_t* a = s.ranges + w * kRangeFields;
    const int64_t* b = a + kRangeFields;
    const int64_t last = a[kRangeTail] >= 0 ? b[kRangeRow] : b[kRangeRow] - 1;
    int64_t l = a[kRangeLocal], q = a[kRangeRemote];
    for (int64_t r = a[kRangeRow]; r <= last; ++r) {
      const bool ends = r < b[kRangeRow];  // the warp ends row r (else: its piece of the next warp's first row)
      const int64_t l_end = ends ? local.rowptr[r + 1] : b[kRangeLocal];
      const int64_t q_end = !remote.rowptr ? 0 : ends ? remote.rowptr[r + 1] : b[kRangeRemote];
      std::fill(sum, sum + width, acc_t(0));
      accumulate_edges<scalar_t>(local, l, l_end, lsrc, sum, d_begin, width);
      if (remote.rowptr) accumulate_edges<scalar_t>(remote, q, q_end, rsrc, sum, d_begin, width);
      l = l_end;
      q = q_end;
      const int64_t slot = !ends ? a[kRangeTail] : r == a[kRangeRow] ? a[kRangeHead] : -1;
      if (slot >= 0) {
        std::copy(sum, sum + width, carry + slot * ld + d_begin);
      } else {
        out_t* o = out + r * ld + d_begin;
        for (int64_t d = 0; d < width; ++d) o[d] = static_cast<out_t>(sum[d]);
      }
    }
  }
  for (int64_t h = 0; h < s.num_fixups; ++h) {
    const int64_t* f = s.fixups + h * kFixupFields;
    out_t* o = out + f[kFixRow] * ld + d_begin;
    for (int64_t d = 0; d < width; ++d) {
      acc_t total = 0;
      for (int64_t j = f[kFixBegin]; j < f[kFixEnd]; ++j) total += carry[j * ld + d_begin + d];
      o[d] = static_cast<out_t>(total);
    }
  }
}

}  // namespace mgg
