// The CPU executor of an MGG aggregation plan, on raw pointers (no torch): the CPU path of
// mgg::aggregate and the reference the CUDA kernels are tested against. Header-only so that
// the native tests (CMakeLists.txt) build it without libtorch.
//
// A plan part (local or remote) is a CSR cut into neighbor partitions: partition k aggregates
// edges [part_ptr[k], part_ptr[k+1]) into output row part_row[k]. Warp w of the schedule owns
// local partitions [warp_local_ptr[w], warp_local_ptr[w+1]) and remote partitions
// [warp_remote_ptr[w], warp_remote_ptr[w+1]); it takes them as (local, remote) pairs, the
// order the CUDA kernel uses. Columns [d_begin, d_end) of the output are computed, so callers
// can split work across threads by feature column without any two writers sharing a cell.
#pragma once
#include <cstdint>

namespace mgg {

template <typename weight_t>
struct PlanPart {
  const int64_t* part_ptr;  // [num_parts + 1] edge offsets
  const int32_t* part_row;  // [num_parts] output row of each partition
  const int32_t* col;       // [num_edges] source row in this part's feature table
  const weight_t* weight;   // [num_edges] or nullptr (weight 1)
};

template <typename scalar_t, typename acc_t>
inline void accumulate_partition(const PlanPart<acc_t>& p, int64_t k, const scalar_t* src, int64_t ld,
                                 acc_t* acc, int64_t d_begin, int64_t d_end) {
  acc_t* out = acc + static_cast<int64_t>(p.part_row[k]) * ld;
  for (int64_t e = p.part_ptr[k]; e < p.part_ptr[k + 1]; ++e) {
    const scalar_t* x = src + static_cast<int64_t>(p.col[e]) * ld;
    const acc_t w = p.weight ? static_cast<acc_t>(p.weight[e]) : acc_t(1);
    for (int64_t d = d_begin; d < d_end; ++d) out[d] += w * static_cast<acc_t>(x[d]);
  }
}

// acc must be zeroed by the caller over [d_begin, d_end) of every row.
template <typename scalar_t, typename acc_t>
void execute_plan(const PlanPart<acc_t>& local, const scalar_t* x_local, const PlanPart<acc_t>& remote,
                  const scalar_t* x_remote, const int64_t* warp_local_ptr,
                  const int64_t* warp_remote_ptr, int64_t num_warps, int64_t ld, acc_t* acc,
                  int64_t d_begin, int64_t d_end) {
  for (int64_t w = 0; w < num_warps; ++w) {
    int64_t l = warp_local_ptr[w], l_end = warp_local_ptr[w + 1];
    int64_t r = warp_remote_ptr[w], r_end = warp_remote_ptr[w + 1];
    while (l < l_end || r < r_end) {
      if (l < l_end) accumulate_partition(local, l++, x_local, ld, acc, d_begin, d_end);
      if (r < r_end) accumulate_partition(remote, r++, x_remote, ld, acc, d_begin, d_end);
    }
  }
}

}  // namespace mgg
