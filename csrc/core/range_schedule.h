// Builds the warp-range schedule of an aggregation step (layout in core/schedule.h) from its two
// row pointers: warp w starts at item w * W of the merge path over rows and edges (W = ps *
// dist), or, with ps = 0, at row w * dist; then the carry slots of the rows the boundaries cut,
// numbered in warp order, and their fixups. O(rows + warps). Torch-free: the mgg::range_schedule
// op (ops/range_schedule.cpp), the plan check (ops/plan_check.cpp, which rebuilds a step's
// schedule and compares) and the native tests use it.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "schedule.h"

namespace mgg {

struct RangeSchedule {
  std::vector<int64_t> ranges;  // [(num_warps + 1) * kRangeFields]
  std::vector<int64_t> fixups;  // [num_fixups * kFixupFields]
  int64_t num_warps = 0;
  int64_t num_slots = 0;  // carry rows the fixups read
};

// local_rowptr and remote_rowptr have rows + 1 entries; a null remote_rowptr is an empty part.
inline RangeSchedule build_range_schedule(const int64_t* local_rowptr, const int64_t* remote_rowptr, int64_t rows,
                                          int64_t ps, int64_t dist) {
  if (ps < 0 || dist < 1) throw std::invalid_argument("range schedule: ps must be >= 0 and dist >= 1");
  if (rows < 0) throw std::invalid_argument("range schedule: rows must be >= 0");
  auto L = [&](int64_t r) { return local_rowptr[r]; };
  auto R = [&](int64_t r) { return remote_rowptr ? remote_rowptr[r] : int64_t{0}; };
  if (L(0) != 0 || R(0) != 0) throw std::invalid_argument("range schedule: row pointers must start at 0");
  for (int64_t r = 0; r < rows; ++r) {
    if (L(r + 1) < L(r) || R(r + 1) < R(r)) throw std::invalid_argument("range schedule: a row pointer decreases");
  }
  RangeSchedule s;
  // Warp starts as (row, local, remote); the end record is appended after.
  std::vector<int64_t> row, local, remote;
  if (ps == 0) {
    for (int64_t r = 0; r < rows; r += dist) {
      row.push_back(r);
      local.push_back(L(r));
      remote.push_back(R(r));
    }
  } else {
    const int64_t edges = L(rows) + R(rows), items = rows + edges, w_items = range_items(ps, dist);
    int64_t r = 0;  // rows whose end item lies before the warp's first item
    for (int64_t d = 0; d < items; d += w_items) {
      // Row r's end item is item (L(r+1) + R(r+1)) + r (its edges and the rows before it).
      while (r < rows && L(r + 1) + R(r + 1) + r < d) ++r;
      const int64_t taken = d - r - (L(r) + R(r));  // items of row r before d: its edges only
      const int64_t ldeg = L(r + 1) - L(r);
      row.push_back(r);
      local.push_back(L(r) + (taken < ldeg ? taken : ldeg));
      remote.push_back(R(r) + (taken > ldeg ? taken - ldeg : 0));
    }
  }
  s.num_warps = static_cast<int64_t>(row.size());
  row.push_back(rows);
  local.push_back(L(rows));
  remote.push_back(R(rows));
  // A boundary inside a row: the warp starting there holds a piece of it, and so did the warp before.
  auto inside = [&](int64_t w) { return w > 0 && w < s.num_warps && (local[w] > L(row[w]) || remote[w] > R(row[w])); };
  s.ranges.assign(static_cast<size_t>((s.num_warps + 1) * kRangeFields), -1);
  int64_t open_row = -1, open_begin = 0;  // the split row whose slots are being numbered
  for (int64_t w = 0; w <= s.num_warps; ++w) {
    int64_t* rec = &s.ranges[w * kRangeFields];
    rec[kRangeRow] = row[w];
    rec[kRangeLocal] = local[w];
    rec[kRangeRemote] = remote[w];
    if (w == s.num_warps) break;
    if (inside(w) && row[w] < row[w + 1]) {  // the warp ends a split row: its last piece
      rec[kRangeHead] = s.num_slots++;
      s.fixups.insert(s.fixups.end(), {row[w], open_begin, s.num_slots});
      open_row = -1;
    }
    if (inside(w + 1)) {  // the warp holds a piece of the row the next warp starts inside
      if (open_row != row[w + 1]) {
        open_row = row[w + 1];
        open_begin = s.num_slots;
      }
      rec[kRangeTail] = s.num_slots++;
    }
  }
  return s;
}

}  // namespace mgg
