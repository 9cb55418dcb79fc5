// The launch shape of the aggregation kernels, as a host-side model the launcher, the tuner's
// resource model and the tests share (mgg._C.launch_shape). Torch-free.
//
// A thread block of the schedule kernel holds, in dynamic shared memory, the partial sums of
// its 2 * wpb rows over a column tile (MGG eq. 1: fp32) and, for NVSHMEM gets, one landing
// buffer of `landing_rows` rows per warp in the storage type. The deterministic row kernel has
// no partial sums. The tile is the widest multiple of 32 columns (at most max_tile_columns: a
// lane holds at most kVecBytes of a row) whose shared memory fits what the device leaves to
// dynamic shared memory.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "limits.h"
#include "schedule.h"

namespace mgg {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of a warp's landing buffer for NVSHMEM gets: the largest remote partition, at most kChunk.
inline int landing_rows_for(int64_t max_remote_part) {
  return static_cast<int>(std::clamp<int64_t>(max_remote_part, 1, kChunk));
}

inline size_t smem_bytes(int64_t wpb, int tile, int landing_rows, size_t elem, bool deterministic) {
  const size_t partials = deterministic ? 0 : static_cast<size_t>(block_row_cap(wpb)) * tile * sizeof(float);
  return partials + static_cast<size_t>(wpb) * landing_rows * tile * elem;
}

// The widest slice of an aggregation launch: kVecBytes of a row per lane (128 fp32 columns, 256
// fp16/bf16), so a lane's sums are one vector load's columns (kernels/aggregate_kernel.cuh).
inline int max_tile_columns(size_t elem) {
  return kWarp * std::max(1, std::min(kMaxPerLane, kVecBytes / static_cast<int>(elem)));
}

// The widest tile whose shared memory fits `limit` bytes, or 0 if even 32 columns do not fit.
inline int choose_tile(int64_t dim, int64_t wpb, int landing_rows, size_t elem, bool deterministic, size_t limit) {
  int per_lane =
      static_cast<int>(std::min<int64_t>(max_tile_columns(elem) / kWarp, ceil_div(std::max<int64_t>(dim, 1), kWarp)));
  while (per_lane > 1 && smem_bytes(wpb, per_lane * kWarp, landing_rows, elem, deterministic) > limit) --per_lane;
  return smem_bytes(wpb, per_lane * kWarp, landing_rows, elem, deterministic) <= limit ? per_lane * kWarp : 0;
}

}  // namespace mgg
