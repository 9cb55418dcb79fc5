// The limits and layouts of mgg's plans and kernels, written once. The planner (mgg/plan.py),
// the tuner's model (mgg/runtime/model.py) and the command line read them through mgg._C
// (ops/bindings.cpp), so every layer uses the launcher's own numbers. Torch-free.
#pragma once
#include <cstdint>

namespace mgg {

// The configuration space of MGG §6: neighbor-partition size, interleave distance, warps per
// block. ps = 0 turns neighbor partitioning off (one partition per row, for the ablation).
constexpr int64_t kPsMin = 1, kPsMax = 32;
constexpr int64_t kDistMin = 1, kDistMax = 16;
constexpr int64_t kWpbMin = 1, kWpbMax = 16;

// The kernels' shape: lanes own feature columns, at most kMaxPerLane of them each, so one grid.y
// slice covers at most kMaxTile columns; the summing kernels hold kVecBytes of a row per lane (4
// fp32 or 8 fp16/bf16 columns: launch_shape.h's max_tile_columns). A warp stages kChunk edges
// (one per lane) at a time, which is also the most rows of a warp's landing buffer for NVSHMEM
// gets. Where every row a launch reads starts on a kVecBytes boundary, a lane reads its columns
// of a row in one 16-byte vector load, otherwise one column per load.
constexpr int kWarp = 32;
constexpr int kMaxPerLane = 8;
constexpr int kVecBytes = 16;
constexpr int kMaxTile = kWarp * kMaxPerLane;
constexpr int kChunk = 32;
constexpr int64_t kMaxGridY = 65535;
// The kernels walk a step with 32-bit indices (its rows, each part's edges and partitions: the
// walk's registers), so a CUDA step must have fewer rows and fewer edges in each part than this.
constexpr int64_t kMaxKernelIndex = 0x7fffffff;
constexpr int kMaxPes = 64;

// How aggregate_peers reads a remote row: direct loads through a pointer to the owner's table
// (nvshmem_ptr, or any tensor of this process), an NVSHMEM get at thread, warp or block scope
// into shared memory, or (uva) direct loads from pinned host tables through their
// device-mapped addresses: zero-copy reads over the host link, as PyTorch-Direct does.
enum class Fetch : int64_t { kDirect = 0, kGetThread = 1, kGetWarp = 2, kGetBlock = 3, kUva = 4 };
constexpr int kNumFetch = 5;
inline constexpr const char* kFetchNames[kNumFetch] = {"direct", "get-thread", "get-warp", "get-block", "uva"};

}  // namespace mgg
