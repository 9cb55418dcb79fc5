// The launch shape of the aggregation kernels, as a host-side model the launcher, the tuner's
// resource model and the tests share (mgg._C.launch_shape). Torch-free.
//
// A block of the range kernel is wpb warps; warps are independent (no block barrier, no shared
// partial sums). Each warp holds, in dynamic shared memory, the ends of kWarp of its rows in each
// part (kRowEndBytes) and, where remote rows are fetched into shared memory, two landing chunks of
// `landing_rows` rows over the pass's columns in the storage type (one being read while the next
// arrives). A pass (grid.y) covers the widest multiple of 32 columns up to kMaxTile whose shared
// memory fits what the device leaves to dynamic shared memory.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "limits.h"
#include "schedule.h"  // MGG_HOST_DEVICE

namespace mgg {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of a warp's landing chunk: ps rows (32 with ps = 0), no more than the remote edges, at
// least 1.
inline int landing_rows_for(int64_t ps, int64_t remote_edges) {
  const int64_t rows = std::min<int64_t>(ps == 0 ? kChunk : ps, remote_edges);
  return static_cast<int>(std::clamp<int64_t>(rows, 1, kChunk));
}

// A warp's row ends: kWarp rows of each part, as 32-bit offsets.
constexpr int kRowEndBytes = 2 * kWarp * 4;

MGG_HOST_DEVICE size_t warp_smem_bytes(int tile, int landing_rows, size_t elem) {
  return kRowEndBytes + static_cast<size_t>(kLandingBuffers) * landing_rows * tile * elem;
}

inline size_t smem_bytes(int64_t wpb, int tile, int landing_rows, size_t elem) {
  return static_cast<size_t>(wpb) * warp_smem_bytes(tile, landing_rows, elem);
}

// The widest pass of an aggregation launch: kMaxPerLane columns per lane.
inline int max_tile_columns() { return kMaxTile; }

// The widest pass (a multiple of 32 columns) whose shared memory fits `limit` bytes, or 0 if even
// 32 columns do not fit.
inline int choose_tile(int64_t dim, int64_t wpb, int landing_rows, size_t elem, size_t limit) {
  int per_lane =
      static_cast<int>(std::min<int64_t>(max_tile_columns() / kWarp, ceil_div(std::max<int64_t>(dim, 1), kWarp)));
  while (per_lane > 1 && smem_bytes(wpb, per_lane * kWarp, landing_rows, elem) > limit) --per_lane;
  return smem_bytes(wpb, per_lane * kWarp, landing_rows, elem) <= limit ? per_lane * kWarp : 0;
}

}  // namespace mgg
