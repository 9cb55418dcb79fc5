// Builds the block schedule of an MGG plan (the layout is described in
// kernels/aggregate_core.h): rows are taken in order and packed greedily into blocks of at most
// `row_cap` rows and at most `part_cap` local and `part_cap` remote partitions; a row with more
// partitions than that is cut evenly across the fewest blocks that hold it, each writing a
// scratch slot, and gets a fixup that sums those slots. Torch-free (used by the op in
// block_schedule.cpp and by the native tests).
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "../kernels/aggregate_core.h"

namespace mgg {

struct BlockSchedule {
  std::vector<int64_t> blocks;  // [num_blocks * kBlockFields]
  std::vector<int64_t> fixups;  // [num_fixups * kFixupFields]
};

inline BlockSchedule build_block_schedule(const int64_t* local_parts, const int64_t* remote_parts,
                                          int64_t num_rows, int64_t part_cap, int64_t row_cap) {
  if (part_cap < 1 || row_cap < 1) throw std::invalid_argument("block schedule: caps must be >= 1");
  BlockSchedule s;
  int64_t l = 0, r = 0, scratch = 0;       // partition cursors, next scratch slot
  int64_t row0 = 0, l0 = 0, r0 = 0;        // the open block
  auto emit = [&](int64_t rb, int64_t re, int64_t lb, int64_t le, int64_t rb2, int64_t re2, int64_t slot) {
    s.blocks.insert(s.blocks.end(), {rb, re, lb, le, rb2, re2, slot});
  };
  auto flush = [&](int64_t row_end) {
    if (row_end > row0) emit(row0, row_end, l0, l, r0, r, -1);
    row0 = row_end;
    l0 = l;
    r0 = r;
  };
  for (int64_t row = 0; row < num_rows; ++row) {
    const int64_t nl = local_parts[row], nr = remote_parts[row];
    if (nl < 0 || nr < 0) throw std::invalid_argument("block schedule: negative partition count");
    if (nl > part_cap || nr > part_cap) {  // a heavy row: its own blocks and a fixup
      flush(row);
      const int64_t k = std::max((nl + part_cap - 1) / part_cap, (nr + part_cap - 1) / part_cap);
      for (int64_t j = 0; j < k; ++j) {
        emit(row, row + 1, l + j * nl / k, l + (j + 1) * nl / k, r + j * nr / k, r + (j + 1) * nr / k, scratch + j);
      }
      s.fixups.insert(s.fixups.end(), {row, scratch, scratch + k});
      scratch += k;
      l += nl;
      r += nr;
      row0 = row + 1;
      l0 = l;
      r0 = r;
      continue;
    }
    if (row - row0 + 1 > row_cap || l - l0 + nl > part_cap || r - r0 + nr > part_cap) flush(row);
    l += nl;
    r += nr;
  }
  flush(num_rows);
  return s;
}

}  // namespace mgg
