// A step's output rows on ATen's threads: nnz-balanced ranges of whole rows (core/row_ranges.h),
// one per thread, for every CPU op that computes a row from its edges (the row kernels, the
// attention ops). A range runs on the calling thread where the work is too small for more.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../../core/row_ranges.h"

namespace mgg::cpu {

// Elements (edges and rows, times the row width) below which a range is not worth a thread:
// waking a thread costs about what summing this many elements from cache does.
constexpr int64_t kElementsPerRange = 1 << 15;

// fn(row_begin, row_end) over rows [0, rows) of a step whose parts have these row pointers
// (remote_rowptr may be null); width: the elements a row's edge touches.
template <typename Fn>
void parallel_rows(const int64_t* local_rowptr, const int64_t* remote_rowptr, int64_t rows, int64_t width,
                   const Fn& fn) {
  if (rows == 0) return;
  const int64_t elements = work_before(local_rowptr, remote_rowptr, rows) * std::max<int64_t>(width, 1);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), elements / kElementsPerRange));
  if (parts == 1) return fn(int64_t{0}, rows);
  std::vector<int64_t> bounds(parts + 1);
  balanced_row_bounds(local_rowptr, remote_rowptr, rows, parts, bounds.data());
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      if (bounds[p] < bounds[p + 1]) fn(bounds[p], bounds[p + 1]);
  });
}

}  // namespace mgg::cpu
