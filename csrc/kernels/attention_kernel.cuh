// The CUDA kernels of GAT's attention (formulas, layouts and the dropout draw in
// core/attention.h). One warp owns an output row and walks its edges in plan order (local part,
// then remote part: the row-owned traversal, as the CPU executor core/attention_executor.h
// does), so every row is written once and results are bit-identical from run to run. A grid.y
// slice covers a group of whole heads (at most kMaxTile feature columns); lanes own feature
// columns. Remote rows come through the fetch policies of the aggregation (fetch.cuh): one
// table, peer pointers, or fetches into the warp's landing rows (mgg's asynchronous copies
// within a node, NVSHMEM gets on the proxy path), the first chunk's fetch started before the
// local edges are walked (MGG's interleaving). Per-head work (the softmax's coefficients, the
// dropout draw, the backward's per-head terms) is done once per head by the head's lane and
// shared through the warp's shared memory. Device code only: no ATen.
//
//   attend_kernel       forward with an online, max-subtracted softmax per head; writes the row
//                       and its statistics (max, sum of exp) per head.
//   attend_dst_kernel   backward pass A over the forward step: d a_dst of each row.
//   attend_src_kernel   backward pass B over a step whose rows are sources and whose sources are
//                       the output rows' terms: the gradient of each source row.
// Per-head dot products of the backward go through the warp's shared-memory row and are summed
// by one lane per head in column order (deterministic).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../core/attention.h"
#include "aggregate_kernel.cuh"
#include "fetch.cuh"
#include "registers.cuh"

namespace mgg::kernels {

constexpr int kAttentionLanding = 4;  // landing rows per warp for NVSHMEM gets

struct AttentionArgs {
  DevicePart local, remote;
  int64_t rows;
  int heads, channels, heads_per_tile;
  int landing, ld;     // a warp's landing rows and their stride (elements of the source tables)
  int64_t warp_bytes;  // a warp's shared memory: part [kMaxTile] and kept [kMaxHeads] floats, landing
  float slope, dropout;
  uint64_t seed;
  NodeIds ids;
};

// The slice of heads [h0, h0 + n) a block's grid.y index covers.
struct HeadSlice {
  int h0, n, C;
  __device__ HeadSlice(const AttentionArgs& a)
      : h0(static_cast<int>(blockIdx.y) * a.heads_per_tile),
        n(a.heads - h0 < a.heads_per_tile ? a.heads - h0 : a.heads_per_tile),
        C(a.channels) {}
  __device__ int features() const { return n * C; }  // feature columns; lane column c is head c / C
  // Where column c (of head t = c / C) sits in a source row's slice of per-head runs: x' then
  // a_src (C + 1 elements a head), or a terms row (C + kTermFields: g, then the head's terms).
  // c + t * extra is t * (C + extra) + c % C without a remainder, so a lane holds only t.
  __device__ static int in_row(int c, int t) { return c + t; }
  __device__ static int in_terms(int c, int t) { return c + t * kTermFields; }
  __device__ int a_src(int t) const { return t * (C + 1) + C; }  // head t's a_src in a row
};

// Head t = c / C of each of a lane's columns c = lane + 32 k, a byte each, four to a register,
// read back through opaque() (aggregate_kernel.cuh) at each use: ptxas can then neither hold
// the eight heads nor the addresses derived from them across the edge loop (on sm_80 that
// spilled), and a read is one bit-field extract.
struct LaneHeads {
  static_assert(kMaxTile <= 256, "a head index fits a byte");
  int packed[kMaxPerLane / 4];
  __device__ LaneHeads(int lane, int C) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane / 4; ++i) packed[i] = 0;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) packed[k / 4] |= ((lane + k * kWarp) / C) << (8 * (k % 4));
  }
  __device__ __forceinline__ int operator[](int k) const { return (opaque(packed[k / 4]) >> (8 * (k % 4))) & 0xff; }
};

struct WarpSmem {
  float* part;  // [kMaxTile] per-column products (forward: per-head rescales of the current edge)
  float* kept;  // [kMaxHeads] per-head coefficients of the current edge
  unsigned char* landing;
  __device__ WarpSmem(unsigned char* smem, int warp, int64_t warp_bytes) {
    unsigned char* base = smem + warp * warp_bytes;
    part = reinterpret_cast<float*>(base);
    kept = part + kMaxTile;
    landing = reinterpret_cast<unsigned char*>(kept + kMaxHeads);
  }
};

// Calls f(source id, source row's slice from head h0) for each edge of `row`: local part, then
// remote part. Rows are `per_head` elements per head, the slice `slice` elements from d0. One
// loop with one call of f for both parts (every branch is uniform across the warp), so f's
// body is compiled once: twice inlined, it held more registers than the kernels can keep.
template <typename T, typename Remote, typename F>
__device__ __forceinline__ void walk_sources(const AttentionArgs& a, int64_t row, const TableFetch& lsrc,
                                             const Remote& rsrc, int64_t width, int64_t d0, int slice, T* landing,
                                             int lane, F&& f) {
  int64_t le = a.local.rowptr[row];
  const int64_t l_end = a.local.rowptr[row + 1];
  int64_t e = a.remote.rowptr ? a.remote.rowptr[row] : 0;
  const int64_t end = a.remote.rowptr ? a.remote.rowptr[row + 1] : 0;
  int n = 0, i = 0;    // landing: the chunk's rows, and the next one to read
  bool ready = false;  // landing: the chunk has been completed
  int32_t my_col = 0, my_pe = 0;
  bool refill = Remote::kUsesLanding;  // landing: start the next chunk (the first: in flight while
                                       // the local edges are walked)
  for (;;) {
    if constexpr (Remote::kUsesLanding) {
      if (refill) {  // one call site of the fetch's start
        refill = false;
        n = static_cast<int>(end - e < a.landing ? end - e : a.landing);
        if (lane < n) {
          my_col = a.remote.col[e + lane];
          my_pe = a.remote.pe ? a.remote.pe[e + lane] : 0;
        }
        if (n > 0) rsrc.template start<T>(landing, a.ld, my_col, my_pe, n, width, d0, slice, lane);
      }
    }
    int64_t id;
    const T* src;
    const bool local = le < l_end;
    if (local) {
      const int32_t col = a.local.col[le++];
      id = a.ids.source(false, col, 0);
      src = lsrc.template row<T>(col, 0, width) + d0;
    } else if constexpr (Remote::kUsesLanding) {
      if (n == 0) break;
      if (!ready) {
        rsrc.complete();
        ready = true;
      }
      const int32_t col = __shfl_sync(kFull, my_col, i), pe = __shfl_sync(kFull, my_pe, i);
      id = a.ids.source(true, col, pe);
      src = landing + i * a.ld;
    } else {
      if (e == end) break;
      const int32_t col = a.remote.col[e], pe = a.remote.pe ? a.remote.pe[e] : 0;
      ++e;
      id = a.ids.source(true, col, pe);
      src = rsrc.template row<T>(col, pe, width) + d0;
    }
    f(id, src);
    if constexpr (Remote::kUsesLanding) {
      if (!local && ++i == n) {
        __syncwarp();  // every lane is done with the landing rows before they are refilled
        e += n;
        i = 0;
        ready = false;
        refill = true;
      }
    }
  }
}

// Per-head sums of a warp's column products: lanes have written part[c]; after a warp barrier,
// lane t adds head t's columns in column order. sum[q]: head lane + 32q of the slice.
__device__ __forceinline__ void head_sums(const float* part, const HeadSlice& h, int lane, float (&sum)[2]) {
  __syncwarp();
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    float v = 0.f;
    if (t < h.n) {
      for (int c = t * h.C; c < (t + 1) * h.C; ++c) v += part[c];
    }
    sum[q] = v;
  }
  __syncwarp();
}

template <typename scalar_t, typename Remote>
__global__ void __launch_bounds__(kMaxThreads)
    attend_kernel(const AttentionArgs a, const TableFetch lsrc, const Remote rsrc, const scalar_t* __restrict__ a_dst,
                  scalar_t* __restrict__ out, float* __restrict__ stats) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.rows) return;  // whole warps leave; no block barrier in this kernel
  const HeadSlice h(a);
  const int C = h.C, H = a.heads, width = h.features();
  const int64_t W = static_cast<int64_t>(H) * (C + 1), row_id = a.ids.rows(row);
  const WarpSmem sm(smem, warp, a.warp_bytes);
  // Per head t = lane + 32 q (its lane): the softmax's running max and sum of exp, and a_dst;
  // per column: the weighted sum of x'. At each edge the head's lane computes its coefficients
  // once (the rescale of the sums so far into part[t], the edge's weight into kept[t]) and every
  // column of the head applies them.
  float acc[kMaxPerLane], m[2], s[2], ad[2];
  const LaneHeads head(lane, C);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) acc[k] = 0.f;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    m[q] = -INFINITY;
    s[q] = 0.f;
    ad[q] = t < h.n ? to_float(a_dst[row * H + h.h0 + t]) : 0.f;
  }
  walk_sources<scalar_t>(a, row, lsrc, rsrc, W, static_cast<int64_t>(h.h0) * (C + 1), h.n * (C + 1),
                         reinterpret_cast<scalar_t*>(sm.landing), lane, [&](int64_t src_id, const scalar_t* src) {
#pragma unroll
                           for (int q = 0; q < 2; ++q) {
                             const int t = lane + q * kWarp;
                             if (t >= h.n) continue;
                             const float e = leaky(to_float(src[h.a_src(t)]) + ad[q], a.slope);
                             const float m_new = fmaxf(m[q], e);
                             const float rescale = __expf(m[q] - m_new), p = __expf(e - m_new);  // 0 at the first edge
                             s[q] = s[q] * rescale + p;
                             m[q] = m_new;
                             sm.part[t] = rescale;
                             sm.kept[t] = p * dropout_keep(a.seed, row_id, src_id, h.h0 + t, a.dropout);
                           }
                           __syncwarp();
#pragma unroll
                           for (int k = 0; k < kMaxPerLane; ++k) {
                             const int c = opaque(lane) + k * kWarp;
                             if (c >= width) continue;
                             const int t = head[k];
                             acc[k] = acc[k] * sm.part[t] + sm.kept[t] * to_float(src[HeadSlice::in_row(c, t)]);
                           }
                           __syncwarp();  // part and kept are rewritten at the next edge
                         });
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    if (t >= h.n) continue;
    stats[row * 2 * H + h.h0 + t] = s[q] > 0.f ? m[q] : 0.f;
    stats[row * 2 * H + H + h.h0 + t] = s[q];
    sm.kept[t] = s[q];
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int c = lane + k * kWarp;
    if (c >= width) continue;
    const float sum = sm.kept[head[k]];
    out[row * H * C + static_cast<int64_t>(h.h0) * C + c] = from_float<scalar_t>(sum > 0.f ? acc[k] / sum : 0.f);
  }
}

// terms: the output rows' terms [rows, H * (C + kTermFields)] in fp32 (g, a_dst, m, s, r per head).
template <typename scalar_t, typename Remote>
__global__ void __launch_bounds__(kMaxThreads)
    attend_dst_kernel(const AttentionArgs a, const TableFetch lsrc, const Remote rsrc, const float* __restrict__ terms,
                      scalar_t* __restrict__ d_dst) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.rows) return;
  const HeadSlice h(a);
  const int C = h.C, H = a.heads, T = C + kTermFields, width = h.features();
  const int64_t W = static_cast<int64_t>(H) * (C + 1), row_id = a.ids.rows(row);
  const float* th = terms + row * H * T + static_cast<int64_t>(h.h0) * T;  // this row's terms from head h0
  const WarpSmem sm(smem, warp, a.warp_bytes);
  float gk[kMaxPerLane], d[2] = {0.f, 0.f};
  const LaneHeads head(lane, C);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int c = lane + k * kWarp;
    gk[k] = c < width ? th[HeadSlice::in_terms(c, head[k])] : 0.f;
  }
  walk_sources<scalar_t>(a, row, lsrc, rsrc, W, static_cast<int64_t>(h.h0) * (C + 1), h.n * (C + 1),
                         reinterpret_cast<scalar_t*>(sm.landing), lane, [&](int64_t src_id, const scalar_t* src) {
#pragma unroll
                           for (int k = 0; k < kMaxPerLane; ++k) {
                             const int c = opaque(lane) + k * kWarp;
                             if (c < width) sm.part[c] = gk[k] * to_float(src[HeadSlice::in_row(c, head[k])]);
                           }
                           float dot[2];
                           head_sums(sm.part, h, lane, dot);
#pragma unroll
                           for (int q = 0; q < 2; ++q) {
                             const int t = lane + q * kWarp;
                             if (t >= h.n) continue;
                             const float* tt = th + t * T;  // g (C), a_dst, m, s, r
                             const float raw = to_float(src[h.a_src(t)]) + tt[C];
                             const float alpha = __expf(leaky(raw, a.slope) - tt[C + 1]) / tt[C + 2];
                             const float keep = dropout_keep(a.seed, row_id, src_id, h.h0 + t, a.dropout);
                             d[q] += alpha * (keep * dot[q] - tt[C + 3]) * leaky_grad(raw, a.slope);
                           }
                         });
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    if (t < h.n) d_dst[row * H + h.h0 + t] = from_float<scalar_t>(d[q]);
  }
}

// The step's rows are source rows j (own[j]: per head x'_j then a_src_j); its sources are output
// rows i, read as their terms through lsrc (this rank's terms table) and rsrc (peers' tables).
template <typename scalar_t, typename Remote>
__global__ void __launch_bounds__(kMaxThreads)
    attend_src_kernel(const AttentionArgs a, const TableFetch lsrc, const Remote rsrc, const scalar_t* __restrict__ own,
                      scalar_t* __restrict__ grad) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.rows) return;
  const HeadSlice h(a);
  const int C = h.C, H = a.heads, T = C + kTermFields, width = h.features();
  const int64_t W = static_cast<int64_t>(H) * (C + 1), row_id = a.ids.rows(row);
  const scalar_t* xr = own + row * W + static_cast<int64_t>(h.h0) * (C + 1);
  const WarpSmem sm(smem, warp, a.warp_bytes);
  // x'_j is read from the row at each edge (cached) rather than held: eight registers fewer.
  float dx[kMaxPerLane], a_src[2], da[2] = {0.f, 0.f};
  const LaneHeads head(lane, C);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) dx[k] = 0.f;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    a_src[q] = t < h.n ? to_float(xr[h.a_src(t)]) : 0.f;
  }
  walk_sources<float>(a, row, lsrc, rsrc, static_cast<int64_t>(H) * T, static_cast<int64_t>(h.h0) * T, h.n * T,
                      reinterpret_cast<float*>(sm.landing), lane, [&](int64_t dst_id, const float* th) {
#pragma unroll
                        for (int k = 0; k < kMaxPerLane; ++k) {
                          const int c = opaque(lane) + k * kWarp;
                          if (c < width)
                            sm.part[c] =
                                th[HeadSlice::in_terms(c, head[k])] * to_float(xr[HeadSlice::in_row(c, head[k])]);
                        }
                        float dot[2];
                        head_sums(sm.part, h, lane, dot);
#pragma unroll
                        for (int q = 0; q < 2; ++q) {
                          const int t = lane + q * kWarp;
                          if (t >= h.n) continue;
                          const float* tt = th + t * T;
                          const float raw = a_src[q] + tt[C];
                          const float alpha = __expf(leaky(raw, a.slope) - tt[C + 1]) / tt[C + 2];
                          const float keep = dropout_keep(a.seed, dst_id, row_id, h.h0 + t, a.dropout);
                          da[q] += alpha * (keep * dot[q] - tt[C + 3]) * leaky_grad(raw, a.slope);
                          sm.kept[t] = alpha * keep;
                        }
                        __syncwarp();
#pragma unroll
                        for (int k = 0; k < kMaxPerLane; ++k) {
                          const int c = opaque(lane) + k * kWarp;
                          if (c < width) dx[k] += sm.kept[head[k]] * th[HeadSlice::in_terms(c, head[k])];
                        }
                        __syncwarp();  // part and kept are rewritten at the next edge
                      });
  scalar_t* gr = grad + row * W + static_cast<int64_t>(h.h0) * (C + 1);
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int c = lane + k * kWarp;
    if (c < width) gr[HeadSlice::in_row(c, head[k])] = from_float<scalar_t>(dx[k]);
  }
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int t = lane + q * kWarp;
    if (t < h.n) gr[h.a_src(t)] = from_float<scalar_t>(da[q]);
  }
}

}  // namespace mgg::kernels
