// The warp-range schedule of an MGG aggregation step, shared by the CPU executor
// (core/executor.h), the CUDA kernels (kernels/aggregate_kernel.cuh) and the plan check
// (ops/plan_check.cpp); its builder is core/range_schedule.h. Torch-free; host-device.
//
// A step aggregates into `rows` output rows from two parts, local and remote, each a CSR whose
// row r lists the edges into output row r. Its items, in order, are for each row: its local
// edges, its remote edges, then one end-of-row item (a merge path over rows and edges, as
// merge-path SpMM and cuSPARSE's CSR ALG2 balance work). Warp w takes a contiguous run of about
// W = ps * dist items (MGG: a warp takes dist neighbor partitions of ps edges), so a warp may
// span many short rows and a hub row spans many warps; with ps = 0 (neighbor partitioning off)
// a warp takes dist whole rows instead.
//
// Record w of `ranges` (RangeField) is where warp w starts: its first row, and the local and
// remote edges it starts at (the edges of that row before them are earlier warps'); record
// num_warps is the end, (rows, local edges, remote edges, -1, -1). Warp w sums, for each row r
// from row_w to row_{w+1}, the row's local edges in [local_w, local_{w+1}) and its remote edges
// in [remote_w, remote_{w+1}): every edge belongs to exactly one warp. The warp ends the rows
// r < row_{w+1} (it holds their end items) and writes each once, to the output; it visits row
// row_{w+1} only when it holds edges of it (tail_slot >= 0).
//
// A row cut by a warp boundary (a split row: some warp before the one that ends it holds edges
// of it) is not written by any warp. Each warp holding edges of it writes its sum of them to its
// own fp32 carry row (the warps before the last: their tail_slot; the warp that ends it: its
// head_slot), and fixup h (FixupField) sums carry rows [slot_begin, slot_end), in warp order,
// into output row `row`. Every sum happens in an order fixed by the schedule, so results are
// bit-identical from run to run.
#pragma once
#include <cstdint>

#include "limits.h"

#if defined(__CUDACC__)
#define MGG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MGG_HOST_DEVICE inline
#endif

namespace mgg {

enum RangeField : int { kRangeRow, kRangeLocal, kRangeRemote, kRangeHead, kRangeTail, kRangeFields };
inline constexpr const char* kRangeFieldNames[kRangeFields] = {"row", "local", "remote", "head_slot", "tail_slot"};

enum FixupField : int { kFixRow, kFixBegin, kFixEnd, kFixupFields };
inline constexpr const char* kFixupFieldNames[kFixupFields] = {"row", "slot_begin", "slot_end"};

// The items of a warp's range under (ps, dist): ps * dist, or 0 with ps = 0 (whole rows).
MGG_HOST_DEVICE int64_t range_items(int64_t ps, int64_t dist) { return ps * dist; }

// Edges [max(begin, lo), min(end, hi)) of a row whose part edges are [lo, hi), for a warp that
// holds edges [begin, end) of the part: the row's edges in that warp.
MGG_HOST_DEVICE int64_t clip_begin(int64_t begin, int64_t lo) { return begin > lo ? begin : lo; }
MGG_HOST_DEVICE int64_t clip_end(int64_t end, int64_t hi) { return end < hi ? end : hi; }

}  // namespace mgg
