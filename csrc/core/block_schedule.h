// Builds the block schedule of an aggregation step (layout in core/schedule.h) from the step's
// two CSRs: rows are taken in order and packed greedily into blocks of at most `row_cap` rows
// and at most `part_cap` local and `part_cap` remote partitions; a row with more partitions
// than that is cut evenly across the fewest blocks that hold it, each writing a scratch slot,
// and gets a fixup that sums those slots. Torch-free (the mgg::block_schedule op and the native
// tests use it).
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "schedule.h"

namespace mgg {

struct BlockSchedule {
  std::vector<int64_t> blocks;  // [num_blocks * kBlockFields]
  std::vector<int64_t> fixups;  // [num_fixups * kFixupFields]
  int64_t num_slots = 0;        // scratch rows the fixups read
};

// local_rowptr and remote_rowptr have num_rows + 1 entries; a null remote_rowptr is an empty part.
inline BlockSchedule build_block_schedule(const int64_t* local_rowptr, const int64_t* remote_rowptr, int64_t num_rows,
                                          int64_t ps, int64_t part_cap, int64_t row_cap) {
  if (part_cap < 1 || row_cap < 1) throw std::invalid_argument("block schedule: caps must be >= 1");
  if (ps < 0) throw std::invalid_argument("block schedule: ps must be >= 0");
  BlockSchedule s;
  int64_t l = 0, r = 0;              // partition cursors
  int64_t row0 = 0, l0 = 0, r0 = 0;  // the open block
  auto emit = [&](int64_t rb, int64_t re, int64_t lb, int64_t le, int64_t qb, int64_t qe, int64_t slot, int64_t lf,
                  int64_t qf) { s.blocks.insert(s.blocks.end(), {rb, re, lb, le, qb, qe, slot, lf, qf}); };
  auto flush = [&](int64_t row_end) {
    if (row_end > row0) emit(row0, row_end, l0, l, r0, r, -1, l0, r0);
    row0 = row_end;
    l0 = l;
    r0 = r;
  };
  for (int64_t row = 0; row < num_rows; ++row) {
    const int64_t ld = local_rowptr[row + 1] - local_rowptr[row];
    const int64_t rd = remote_rowptr ? remote_rowptr[row + 1] - remote_rowptr[row] : 0;
    if (ld < 0 || rd < 0) throw std::invalid_argument("block schedule: a row pointer decreases");
    const int64_t nl = num_parts(ld, ps), nr = num_parts(rd, ps);
    if (nl > part_cap || nr > part_cap) {  // a heavy row: its own blocks and a fixup
      flush(row);
      const int64_t k = std::max((nl + part_cap - 1) / part_cap, (nr + part_cap - 1) / part_cap);
      for (int64_t j = 0; j < k; ++j) {
        emit(row, row + 1, l + j * nl / k, l + (j + 1) * nl / k, r + j * nr / k, r + (j + 1) * nr / k, s.num_slots + j,
             l, r);
      }
      s.fixups.insert(s.fixups.end(), {row, s.num_slots, s.num_slots + k});
      s.num_slots += k;
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
