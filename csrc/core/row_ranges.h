// The CPU's share-out of a step's output rows between threads: contiguous ranges of whole rows
// with about equal work, a row's work being its edges (local and remote) and one for writing it.
// A row is never split between threads and each is summed by one thread in edge order, so the
// result does not depend on the number of ranges (ops/cpu/row_kernels.h). Torch-free.
#pragma once
#include <cstdint>

namespace mgg {

// The work of rows [0, r): their edges and r.
inline int64_t work_before(const int64_t* local_rowptr, const int64_t* remote_rowptr, int64_t r) {
  return local_rowptr[r] - local_rowptr[0] + (remote_rowptr ? remote_rowptr[r] - remote_rowptr[0] : 0) + r;
}

// bounds[0 .. parts]: range k is rows [bounds[k], bounds[k + 1]); bounds[0] = 0, bounds[parts] =
// rows, non-decreasing; range k starts at the first row whose work before it reaches k / parts of
// the total, so no range holds more than total / parts plus its heaviest row.
inline void balanced_row_bounds(const int64_t* local_rowptr, const int64_t* remote_rowptr, int64_t rows, int64_t parts,
                                int64_t* bounds) {
  const int64_t total = work_before(local_rowptr, remote_rowptr, rows);
  bounds[0] = 0;
  for (int64_t k = 1; k < parts; ++k) {
    // total * k / parts without overflow for any int64 total and parts
    const int64_t target = total / parts * k + total % parts * k / parts;
    int64_t lo = bounds[k - 1], hi = rows;  // the first row r in [lo, hi] with work_before(r) >= target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (work_before(local_rowptr, remote_rowptr, mid) < target)
        lo = mid + 1;
      else
        hi = mid;
    }
    bounds[k] = lo;
  }
  bounds[parts] = rows;
}

}  // namespace mgg
