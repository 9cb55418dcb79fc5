// The limits and layouts of mgg's plans and kernels, written once. The planner (mgg/plan.py),
// the tuner's model (mgg/runtime/model.py) and the command line read them through mgg._C
// (ops/bindings.cpp), so every layer uses the launcher's own numbers. Torch-free.
#pragma once
#include <cstdint>

namespace mgg {

// The configuration space of MGG §6: neighbor-partition size, interleave distance, warps per
// block. A warp's range is ps * dist items of the step (core/schedule.h: MGG's dist neighbor
// partitions of ps edges), ps is also the rows of a warp's landing chunk for remote rows fetched
// into shared memory, and a block holds wpb warps. ps = 0 turns neighbor partitioning off (a warp
// takes dist whole rows, for the ablation).
constexpr int64_t kPsMin = 1, kPsMax = 32;
constexpr int64_t kDistMin = 1, kDistMax = 1024;
constexpr int64_t kWpbMin = 1, kWpbMax = 16;

// The kernels' shape: lanes own feature columns, at most kMaxPerLane of them each, so one grid.y
// pass covers at most kMaxTile columns. Where every row a launch reads starts on a kVecBytes
// boundary a lane reads its columns of a row with kVecBytes loads (fp32: two for 8 columns;
// fp16/bf16: one), otherwise one column per load. Each lane keeps kRowsInFlight independent
// kVecBytes row loads in flight. A warp's window on a part's column ids, weights and PEs holds
// kChunk edges (one per lane) and loads the next kChunk ahead; kChunk is also the most rows of a
// landing chunk.
constexpr int kWarp = 32;
constexpr int kMaxPerLane = 8;
constexpr int kVecBytes = 16;
constexpr int kMaxTile = kWarp * kMaxPerLane;
constexpr int kRowsInFlight = 4;
constexpr int kChunk = 32;
// Landing chunks a warp holds in shared memory: the one being read and the next one, in flight.
constexpr int kLandingBuffers = 2;
constexpr int64_t kMaxGridY = 65535;
// Rows and carry slots are 32-bit in the kernels (edge positions are 64-bit), so a CUDA step has
// fewer rows than this.
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
