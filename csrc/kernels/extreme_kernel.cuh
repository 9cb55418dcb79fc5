// The CUDA kernel of mgg::aggregate_extreme (max/min, core/extreme.h), templated on where source
// rows come from (fetch.cuh; direct policies only). One warp per output row: lanes own feature
// columns (a grid.y slice of `tile` columns; column
// lane + 32 j, one per load, so a warp's loads of a row are consecutive) and keep the best
// value and its source row per column in registers while the warp walks the row's local edges,
// then its remote ones, a chunk of edges at a time (one per lane, shuffled to the warp). The
// winner of each comparison is core/extreme.h's `beats`, so the result does not depend on the
// order the edges are visited in. Each output element and its arg are written once.
#pragma once
#include <cstdint>

#include "../core/extreme.h"
#include "aggregate_kernel.cuh"

namespace mgg::kernels {

// Lane i holds edge c + i of a chunk of n edges.
struct LaneEdge {
  int32_t col = 0, pe = 0;
};

__device__ __forceinline__ LaneEdge load_edge(const DevicePart& p, int64_t c, int n, int lane) {
  LaneEdge e;
  MGG_GLOBAL_LOAD(p.col + c + lane, lane < n);
  if (p.pe) MGG_GLOBAL_LOAD(p.pe + c + lane, lane < n);
  if (lane < n) {
    e.col = p.col[c + lane];
    if (p.pe) e.pe = p.pe[c + lane];
  }
  return e;
}

// The best value and its source row per column of a lane, over edges [e0, e1) of a part whose
// sources are rows base + col of [x | x_remote].
template <typename scalar_t, typename Src>
__device__ __forceinline__ void extreme_edges(float (&best)[kMaxPerLane], int64_t (&at)[kMaxPerLane],
                                              const DevicePart& p, int64_t e0, int64_t e1, int64_t base, const Src& src,
                                              int64_t dim, int64_t d0, int width, int lane, bool is_max) {
  for (int64_t c = e0; c < e1; c += kChunk) {
    const int n = static_cast<int>(e1 - c < kChunk ? e1 - c : kChunk);
    const LaneEdge mine = load_edge(p, c, n, lane);
    for (int i = 0; i < n; ++i) {
      const int32_t col = __shfl_sync(kFull, mine.col, i);
      const int32_t pe = Src::kReadsPe ? __shfl_sync(kFull, mine.pe, i) : 0;  // none for a table
      const scalar_t* row = src.template row<scalar_t>(col, pe, dim) + d0;
      const int64_t index = base + col;
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j) {
        const int d = lane + j * kWarp;
        if (d < width) {
          const float v = to_float(row[d]);
          if (beats(v, index, best[j], at[j], is_max)) {
            best[j] = v;
            at[j] = index;
          }
        }
      }
    }
  }
}

template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
__global__ void __launch_bounds__(kMaxThreads)
    aggregate_extreme_kernel(const KernelArgs<scalar_t> a, int64_t* __restrict__ arg, int64_t remote_base, bool is_max,
                             const LocalSrc lsrc, const RemoteSrc rsrc) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.num_rows) return;  // whole warps leave; this kernel has no block barrier
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * a.tile;
  const int width = static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile);
  float best[kMaxPerLane];
  int64_t at[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    best[j] = 0.f;
    at[j] = kNoArg;
  }
  extreme_edges<scalar_t>(best, at, a.local, a.local.rowptr[row], a.local.rowptr[row + 1], 0, lsrc, a.dim, d0, width,
                          lane, is_max);
  if (a.remote.rowptr) {
    extreme_edges<scalar_t>(best, at, a.remote, a.remote.rowptr[row], a.remote.rowptr[row + 1], remote_base, rsrc,
                            a.dim, d0, width, lane, is_max);
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarp;
    if (d < width) {
      a.out[row * a.dim + d0 + d] = from_float<scalar_t>(at[j] == kNoArg ? 0.f : best[j]);
      arg[row * a.dim + d0 + d] = at[j];
    }
  }
}

}  // namespace mgg::kernels
