// The CUDA kernels of the mgg aggregation ops, templated on where source rows come from
// (fetch.cuh), and their host-side launcher. The schedule layout is in aggregate_core.h, whose
// CPU executor walks it the same way.
//
// aggregate_blocks_kernel (the default, MGG §5.2 / Fig. 6b): thread block b takes schedule
// block b. Its warps take (local, remote) neighbor-partition pairs at interleave distance dist:
// each starts the fetch of its remote partition, aggregates its local partition while the fetch
// is in flight, completes the fetch and aggregates the arrived rows. Lanes own feature columns
// (a grid.y slice of `tile` columns). A warp sums consecutive partitions of one row in registers
// and adds the run into the block's partial sum of that row in dynamic shared memory
// (2 * wpb rows x tile floats: MGG eq. 1, plus the warps' landing buffers for NVSHMEM gets).
// After a block barrier each row of the block is written once, to the output or, for a row cut
// across blocks, to its scratch slot; fixup_kernel then sums a row's slots in order.
// No output element is read before it is written and no global atomics are used.
//
// aggregate_blocks_blockget_kernel: the same with block-scope NVSHMEM gets (MGG's API study).
// aggregate_rows_kernel (deterministic mode): one warp per output row sums its partitions in
// plan order and writes the row; results are bit-identical from run to run.
#pragma once
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "../aggregate.h"
#include "aggregate_core.h"
#include "fetch.cuh"

namespace mgg::cuda {

constexpr int kWarp = 32;
constexpr int kMaxPerLane = 8;
constexpr int kMaxTile = kWarp * kMaxPerLane;  // feature columns of one grid.y slice, at most
constexpr int kChunk = 32;                     // edges staged per warp step: one per lane
constexpr unsigned kFull = 0xffffffffu;

struct DevicePart {
  const int64_t* __restrict__ part_ptr;
  const int32_t* __restrict__ part_row;
  const int32_t* __restrict__ col;
  const float* __restrict__ weight;  // nullptr: weight 1
  const int32_t* __restrict__ pe;    // nullptr: PE 0 (table sources)
};

template <typename scalar_t>
struct Launch {
  DevicePart local, remote;
  const int64_t* __restrict__ blocks;
  int64_t num_blocks;
  const int64_t* __restrict__ fixups;
  int64_t num_fixups;
  int64_t num_rows, num_local_parts, num_remote_parts;
  int64_t dist, dim;
  int tile;          // multiple of 32, <= kMaxTile
  int landing_rows;  // rows of a warp's landing buffer (<= kChunk)
  bool interleave;
  scalar_t* __restrict__ out;
  float* __restrict__ scratch;  // [num_slots, dim]
};

__device__ __forceinline__ void zero(float (&acc)[kMaxPerLane]) {
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.f;
}

template <typename scalar_t>
__device__ __forceinline__ void add_row(float (&acc)[kMaxPerLane], const scalar_t* __restrict__ src, float w,
                                        int width, int lane) {
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarp;
    if (d < width) acc[j] += w * static_cast<float>(src[d]);
  }
}

// Lane i holds edge c + i of a chunk of n edges.
struct LaneEdge {
  int32_t col = 0, pe = 0;
  float w = 1.f;
};

__device__ __forceinline__ LaneEdge load_edge(const DevicePart& p, int64_t c, int n, int lane) {
  LaneEdge e;
  if (lane < n) {
    e.col = p.col[c + lane];
    if (p.pe) e.pe = p.pe[c + lane];
    if (p.weight) e.w = p.weight[c + lane];
  }
  return e;
}

// acc += partition k, rows read in place.
template <typename scalar_t, typename Src>
__device__ __forceinline__ void add_partition_direct(float (&acc)[kMaxPerLane], const DevicePart& p, int64_t k,
                                                     const Src& src, int64_t dim, int64_t d0, int width, int lane) {
  const int64_t e1 = p.part_ptr[k + 1];
  for (int64_t c = p.part_ptr[k]; c < e1; c += kChunk) {
    const int n = static_cast<int>(e1 - c < kChunk ? e1 - c : kChunk);
    const LaneEdge mine = load_edge(p, c, n, lane);
#pragma unroll 4
    for (int i = 0; i < n; ++i) {
      const int32_t col = __shfl_sync(kFull, mine.col, i), pe = __shfl_sync(kFull, mine.pe, i);
      const float w = __shfl_sync(kFull, mine.w, i);
      add_row(acc, src.template row<scalar_t>(col, pe, dim) + d0, w, width, lane);
    }
  }
}

// acc += the n landed rows of a chunk whose edges `mine` holds.
template <typename scalar_t>
__device__ __forceinline__ void add_landed(float (&acc)[kMaxPerLane], const scalar_t* landing, int ld,
                                           const LaneEdge& mine, int n, int width, int lane) {
  for (int i = 0; i < n; ++i) add_row(acc, landing + i * ld, __shfl_sync(kFull, mine.w, i), width, lane);
  __syncwarp();  // every lane is done with the landing buffer before it is refilled
}

// acc += edges [c, e1) of a part, fetched chunk by chunk into the landing buffer (not overlapped).
template <typename scalar_t, typename Src>
__device__ __forceinline__ void add_edges_landing(float (&acc)[kMaxPerLane], const DevicePart& p, int64_t c, int64_t e1,
                                                  const Src& src, scalar_t* landing, const Launch<scalar_t>& a,
                                                  int64_t d0, int width, int lane) {
  for (; c < e1; c += a.landing_rows) {
    const int n = static_cast<int>(e1 - c < a.landing_rows ? e1 - c : a.landing_rows);
    const LaneEdge mine = load_edge(p, c, n, lane);
    src.start(landing, a.tile, mine.col, mine.pe, n, a.dim, d0, width, lane);
    src.complete();
    add_landed(acc, landing, a.tile, mine, n, width, lane);
  }
}

// Adds a warp's run for `row` into the block's partial sums (shared-memory float adds).
__device__ __forceinline__ void commit(float (&acc)[kMaxPerLane], float* partial, int width, int lane) {
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarp;
    if (d < width) atomicAdd(partial + d, acc[j]);
    acc[j] = 0.f;
  }
}

// Zeroes the block's partial sums; returns them.
__device__ __forceinline__ float* block_partials(unsigned char* smem, int64_t rows, int tile) {
  float* partial = reinterpret_cast<float*>(smem);
  for (int64_t i = threadIdx.x; i < rows * tile; i += blockDim.x) partial[i] = 0.f;
  __syncthreads();
  return partial;
}

// Writes each row of the block once: to the output, or to its scratch slot.
template <typename scalar_t>
__device__ __forceinline__ void write_block(const Launch<scalar_t>& a, const int64_t* blk, const float* partial,
                                            int64_t d0, int width) {
  __syncthreads();
  const int64_t row0 = blk[kRowBegin], rows = blk[kRowEnd] - row0, slot = blk[kScratch];
  for (int64_t i = threadIdx.x; i < rows * width; i += blockDim.x) {
    const int64_t r = i / width;
    const int d = static_cast<int>(i - r * width);
    const float v = partial[r * a.tile + d];
    if (slot < 0) {
      a.out[(row0 + r) * a.dim + d0 + d] = static_cast<scalar_t>(v);
    } else {
      a.scratch[slot * a.dim + d0 + d] = v;
    }
  }
}

// A warp's running sum over consecutive partitions of one row.
struct Run {
  float acc[kMaxPerLane];
  int64_t row = -1;
  __device__ __forceinline__ Run() { zero(acc); }
  // Before adding a partition of `r`: commits the run of the previous row.
  __device__ __forceinline__ void enter(int64_t r, float* partial, int64_t row0, int tile, int width, int lane) {
    if (r != row) {
      finish(partial, row0, tile, width, lane);
      row = r;
    }
  }
  __device__ __forceinline__ void finish(float* partial, int64_t row0, int tile, int width, int lane) {
    if (row >= 0) commit(acc, partial + (row - row0) * tile, width, lane);
  }
};

// What a thread of a schedule block knows of its place: lane, warp, the block's row of the
// schedule, its column tile, its zeroed partial sums and the warps' landing buffers.
template <typename scalar_t>
struct BlockCtx {
  int lane, warp, wpb;
  const int64_t* blk;
  int64_t row0, d0;
  int width;
  float* partial;
  scalar_t* landing_all;  // [wpb][landing_rows][tile]
  scalar_t* landing;      // this warp's
  __device__ __forceinline__ BlockCtx(const Launch<scalar_t>& a, unsigned char* smem)
      : lane(threadIdx.x % kWarp), warp(threadIdx.x / kWarp), wpb(blockDim.x / kWarp),
        blk(a.blocks + static_cast<int64_t>(blockIdx.x) * kBlockFields), row0(blk[kRowBegin]),
        d0(static_cast<int64_t>(blockIdx.y) * a.tile),
        width(static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile)),
        partial(block_partials(smem, blk[kRowEnd] - row0, a.tile)),
        landing_all(reinterpret_cast<scalar_t*>(reinterpret_cast<float*>(smem) + 2 * wpb * a.tile)),
        landing(landing_all + static_cast<int64_t>(warp) * a.landing_rows * a.tile) {}
};

template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
__global__ void aggregate_blocks_kernel(const Launch<scalar_t> a, const LocalSrc lsrc, const RemoteSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  const BlockCtx<scalar_t> b(a, smem);
  const int lane = b.lane, width = b.width;
  const int64_t* blk = b.blk;
  const int64_t row0 = b.row0, d0 = b.d0;
  float* partial = b.partial;
  scalar_t* landing = b.landing;

  int64_t l = blk[kLocalBegin] + b.warp * a.dist, r = blk[kRemoteBegin] + b.warp * a.dist;
  const int64_t l_end = min(l + a.dist, blk[kLocalEnd]), r_end = min(r + a.dist, blk[kRemoteEnd]);
  Run lrun, rrun;
  auto local_step = [&] {
    if (l < l_end) {
      lrun.enter(a.local.part_row[l], partial, row0, a.tile, width, lane);
      add_partition_direct<scalar_t>(lrun.acc, a.local, l, lsrc, a.dim, d0, width, lane);
      ++l;
    }
  };
  if (!a.interleave) {
    while (l < l_end) local_step();  // contiguous mapping (ablation): no overlap with the fetches
  }
  while (l < l_end || r < r_end) {
    if (r >= r_end) {
      local_step();
      continue;
    }
    rrun.enter(a.remote.part_row[r], partial, row0, a.tile, width, lane);
    if constexpr (RemoteSrc::kUsesLanding) {
      const int64_t e0 = a.remote.part_ptr[r], e1 = a.remote.part_ptr[r + 1];
      const int n = static_cast<int>(e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows);
      const LaneEdge mine = load_edge(a.remote, e0, n, lane);
      rsrc.start(landing, a.tile, mine.col, mine.pe, n, a.dim, d0, width, lane);  // 1. start the fetch
      local_step();                                                                // 2. local work meanwhile
      rsrc.complete();                                                             // 3. complete, then read
      add_landed(rrun.acc, landing, a.tile, mine, n, width, lane);
      add_edges_landing(rrun.acc, a.remote, e0 + n, e1, rsrc, landing, a, d0, width, lane);  // partitioning off
    } else {
      local_step();
      add_partition_direct<scalar_t>(rrun.acc, a.remote, r, rsrc, a.dim, d0, width, lane);
    }
    ++r;
  }
  lrun.finish(partial, row0, a.tile, width, lane);
  rrun.finish(partial, row0, a.tile, width, lane);
  write_block(a, blk, partial, d0, width);
}

// First partition of `row` in a row-sorted partition list.
__device__ __forceinline__ int64_t lower_bound_row(const int32_t* __restrict__ part_row, int64_t n, int64_t row) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (part_row[mid] < row) lo = mid + 1; else hi = mid;
  }
  return lo;
}

template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
__global__ void aggregate_rows_kernel(const Launch<scalar_t> a, const LocalSrc lsrc, const RemoteSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.num_rows) return;  // whole warps leave; this kernel has no block barrier
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * a.tile;
  const int width = static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile);
  scalar_t* landing = reinterpret_cast<scalar_t*>(smem) + static_cast<int64_t>(warp) * a.landing_rows * a.tile;
  float acc[kMaxPerLane];
  zero(acc);
  for (int64_t k = lower_bound_row(a.local.part_row, a.num_local_parts, row);
       k < a.num_local_parts && a.local.part_row[k] == row; ++k) {
    add_partition_direct<scalar_t>(acc, a.local, k, lsrc, a.dim, d0, width, lane);
  }
  for (int64_t k = lower_bound_row(a.remote.part_row, a.num_remote_parts, row);
       k < a.num_remote_parts && a.remote.part_row[k] == row; ++k) {
    if constexpr (RemoteSrc::kUsesLanding) {
      add_edges_landing(acc, a.remote, a.remote.part_ptr[k], a.remote.part_ptr[k + 1], rsrc, landing, a, d0, width, lane);
    } else {
      add_partition_direct<scalar_t>(acc, a.remote, k, rsrc, a.dim, d0, width, lane);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarp;
    if (d < width) a.out[row * a.dim + d0 + d] = static_cast<scalar_t>(acc[j]);
  }
}

// Row fixup_row[h] = sum of its scratch slots, in slot order.
template <typename scalar_t>
__global__ void fixup_kernel(const Launch<scalar_t> a) {
  const int64_t* f = a.fixups + static_cast<int64_t>(blockIdx.x) * kFixupFields;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= a.dim) return;
  float sum = 0.f;
  for (int64_t j = f[kFixBegin]; j < f[kFixEnd]; ++j) sum += a.scratch[j * a.dim + d];
  a.out[f[kFixRow] * a.dim + d] = static_cast<scalar_t>(sum);
}

// ---- host side ------------------------------------------------------------------------------

// Calls f(scalar_t{}) for the storage types the kernels take (fp32, fp16, bf16).
template <typename F>
void dispatch_storage(const char* op, at::ScalarType st, F&& f) {
  switch (st) {
    case at::kFloat: return f(float{});
    case at::kHalf: return f(at::Half{});
    case at::kBFloat16: return f(at::BFloat16{});
    default: TORCH_CHECK(false, op, ": CUDA storage must be float32, float16 or bfloat16, got ", st,
                         " (float64 is supported on the CPU only)");
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline DevicePart device_part(const PartArgs& p, const at::Tensor& weight_f32) {
  return {p.part_ptr.data_ptr<int64_t>(), p.part_row.data_ptr<int32_t>(), p.col.data_ptr<int32_t>(),
          weight_f32.defined() ? weight_f32.data_ptr<float>() : nullptr, p.pe ? p.pe->data_ptr<int32_t>() : nullptr};
}

// The output, fp32 edge weights and fixup scratch of one call.
struct CallBuffers {
  at::Tensor out, local_weight, remote_weight, scratch;
  CallBuffers(const at::Tensor& x, const CheckedCall& c)
      : out(at::empty({c.schedule.num_rows, x.size(1)}, x.options())),
        local_weight(f32(c.local.weight)),
        remote_weight(f32(c.remote.weight)),
        scratch(at::empty({c.facts.num_slots, x.size(1)}, x.options().dtype(at::kFloat))) {}
  static at::Tensor f32(const std::optional<at::Tensor>& w) {
    return w.has_value() ? w->to(at::kFloat).contiguous() : at::Tensor();
  }
  bool empty() const { return out.numel() == 0; }
};

template <typename scalar_t>
Launch<scalar_t> make_launch(const CheckedCall& c, const CallBuffers& b) {
  const ScheduleArgs& s = c.schedule;
  return {device_part(c.local, b.local_weight), device_part(c.remote, b.remote_weight), s.blocks.data_ptr<int64_t>(),
          s.blocks.size(0), s.fixups.data_ptr<int64_t>(), s.fixups.size(0), s.num_rows, c.local.part_row.numel(),
          c.remote.part_row.numel(), s.dist, b.out.size(1), 0, 0, c.interleave, b.out.data_ptr<scalar_t>(),
          b.scratch.data_ptr<float>()};
}

// Shared memory of one block for a column tile: the 2 * wpb partial rows (not in deterministic
// mode) and, for landing fetches, wpb landing buffers.
inline size_t smem_bytes(int64_t wpb, int tile, int landing_rows, size_t elem, bool deterministic) {
  const size_t partials = deterministic ? 0 : static_cast<size_t>(block_row_cap(wpb)) * tile * sizeof(float);
  return partials + static_cast<size_t>(wpb) * landing_rows * tile * elem;
}

// The widest column tile whose shared memory fits the device's per-block opt-in limit.
inline int choose_tile(int64_t dim, int64_t wpb, int landing_rows, size_t elem, bool deterministic, size_t limit) {
  int per_lane = static_cast<int>(std::min<int64_t>(kMaxPerLane, ceil_div(std::max<int64_t>(dim, 1), kWarp)));
  while (per_lane > 1 && smem_bytes(wpb, per_lane * kWarp, landing_rows, elem, deterministic) > limit) --per_lane;
  const size_t need = smem_bytes(wpb, per_lane * kWarp, landing_rows, elem, deterministic);
  TORCH_CHECK(need <= limit, "mgg.aggregate: a block needs ", need, " bytes of shared memory even with 32-column ",
              "tiles, over the device limit of ", limit, " (lower warps_per_block)");
  return per_lane * kWarp;
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

// Sets a.tile and a.landing_rows for the device and returns the launch shape: thread blocks,
// threads and shared memory, for the schedule kernels (or, deterministic, the row kernel).
struct LaunchShape {
  dim3 grid;
  int threads;
  size_t smem;
};

template <typename scalar_t>
LaunchShape shape_launch(Launch<scalar_t>& a, int64_t wpb, bool landing, bool deterministic, int64_t max_remote_part) {
  const size_t limit = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
  a.landing_rows = landing ? static_cast<int>(std::clamp<int64_t>(max_remote_part, 1, kChunk)) : 0;
  a.tile = choose_tile(a.dim, wpb, a.landing_rows, sizeof(scalar_t), deterministic, limit);
  const int64_t tiles = ceil_div(a.dim, a.tile);
  TORCH_CHECK(tiles <= 65535, "mgg.aggregate: dim ", a.dim, " needs more than 65535 column tiles");
  const int64_t x_blocks = deterministic ? ceil_div(a.num_rows, wpb) : a.num_blocks;
  return {dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(tiles)), static_cast<int>(wpb) * kWarp,
          smem_bytes(wpb, a.tile, a.landing_rows, sizeof(scalar_t), deterministic)};
}

// Launches `kernel` with the shape (raising the shared-memory limit where needed), then the
// fixups of the rows cut across blocks (not in deterministic mode), on the current stream.
template <typename scalar_t, typename Kernel, typename... Args>
void launch_with_fixups(const Launch<scalar_t>& a, const LaunchShape& shape, bool deterministic, Kernel kernel,
                        const Args&... args) {
  auto stream = at::cuda::getCurrentCUDAStream();
  if (shape.grid.x > 0) {
    allow_smem(kernel, shape.smem);
    kernel<<<shape.grid, shape.threads, shape.smem, stream>>>(a, args...);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (!deterministic && a.num_fixups > 0) {
    const dim3 grid(static_cast<unsigned>(a.num_fixups), static_cast<unsigned>(ceil_div(a.dim, 256)));
    fixup_kernel<scalar_t><<<grid, 256, 0, stream>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// The schedule kernel (or, deterministic, the row kernel) with the given sources.
template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
void launch_aggregate(Launch<scalar_t> a, int64_t wpb, bool deterministic, const LocalSrc& lsrc,
                      const RemoteSrc& rsrc, int64_t max_remote_part) {
  const LaunchShape shape = shape_launch(a, wpb, RemoteSrc::kUsesLanding, deterministic, max_remote_part);
  if (deterministic) {
    launch_with_fixups(a, shape, true, aggregate_rows_kernel<scalar_t, LocalSrc, RemoteSrc>, lsrc, rsrc);
  } else {
    launch_with_fixups(a, shape, false, aggregate_blocks_kernel<scalar_t, LocalSrc, RemoteSrc>, lsrc, rsrc);
  }
}

}  // namespace mgg::cuda
