// CUDA implementation of mgg::aggregate: MGG's warp-level aggregation walking the plan.
//
// Warp w owns local partitions [warp_local_ptr[w], warp_local_ptr[w+1]) and remote partitions
// [warp_remote_ptr[w], warp_remote_ptr[w+1]) and takes them as (local, remote) pairs: it starts
// the fetch of the remote partition, aggregates the local one while the fetch is in flight, then
// completes the fetch and aggregates the arrived rows (MGG §5.2, Fig. 6b). Lanes own feature
// columns; a grid.y slice covers kTile columns, so any D runs. Consecutive partitions of one row
// are summed in registers and committed once per run with a hardware float add into an fp32
// accumulator that this call zeroes on the current stream.
//
// Deterministic mode runs a row-owned kernel instead: one warp per output row walks that row's
// partitions in plan order (local, then remote) and stores the row once.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../aggregate.h"
#include "fetch.cuh"

namespace mgg {
namespace {

constexpr int kWarp = 32;
constexpr int kPerLane = 8;                 // registers of partial sum per lane
constexpr int64_t kTile = kWarp * kPerLane;  // feature columns per grid.y slice

template <typename weight_t>
struct DevicePart {
  const int64_t* __restrict__ part_ptr;
  const int32_t* __restrict__ part_row;
  const int32_t* __restrict__ col;
  const weight_t* __restrict__ weight;
  const int32_t* __restrict__ pe;  // owner PE per edge (remote part under NVSHMEM), else nullptr
};

template <typename scalar_t>
__device__ __forceinline__ void add_row(float (&acc)[kPerLane], const scalar_t* __restrict__ src,
                                        float w, int64_t d0, int64_t dim, int lane) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = d0 + lane + j * kWarp;
    if (d < dim) acc[j] += w * static_cast<float>(src[d]);
  }
}

__device__ __forceinline__ void commit(float (&acc)[kPerLane], float* __restrict__ out, int32_t row,
                                       int64_t d0, int64_t dim, int lane) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = d0 + lane + j * kWarp;
    if (d < dim) atomicAdd(out + static_cast<int64_t>(row) * dim + d, acc[j]);
    acc[j] = 0.f;
  }
}

// Aggregates one partition whose rows are read in place (local part, table or peer pointers).
template <typename scalar_t, typename Fetch>
__device__ __forceinline__ void aggregate_direct(const DevicePart<float>& p, int64_t k, const Fetch& src,
                                                 float (&acc)[kPerLane], int64_t d0, int64_t dim, int lane) {
  for (int64_t e = p.part_ptr[k]; e < p.part_ptr[k + 1]; ++e) {
    const float w = p.weight ? p.weight[e] : 1.f;
    add_row(acc, src.template row<scalar_t>(p.col[e], p.pe ? p.pe[e] : 0, dim), w, d0, dim, lane);
  }
}

template <typename scalar_t, typename Fetch>
__global__ void aggregate_pipelined_kernel(TableFetch local_src, Fetch remote_src, DevicePart<float> local,
                                           DevicePart<float> remote, const int64_t* __restrict__ warp_local_ptr,
                                           const int64_t* __restrict__ warp_remote_ptr, int64_t num_warps,
                                           int64_t dim, int64_t landing_rows, float* __restrict__ out) {
  extern __shared__ unsigned char smem_raw[];
  const int lane = threadIdx.x % kWarp;
  const int warp_in_block = threadIdx.x / kWarp;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp_in_block;
  if (w >= num_warps) return;
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t tile = dim - d0 < kTile ? dim - d0 : kTile;
  scalar_t* landing = reinterpret_cast<scalar_t*>(smem_raw) + warp_in_block * landing_rows * kTile;

  float lacc[kPerLane] = {0.f}, racc[kPerLane] = {0.f};
  int32_t lrow = -1, rrow = -1;
  int64_t l = warp_local_ptr[w], l_end = warp_local_ptr[w + 1];
  int64_t r = warp_remote_ptr[w], r_end = warp_remote_ptr[w + 1];
  while (l < l_end || r < r_end) {
    const bool has_r = r < r_end;
    if (has_r && remote.part_row[r] != rrow) {
      if (rrow >= 0) commit(racc, out, rrow, d0, dim, lane);
      rrow = remote.part_row[r];
    }
    if constexpr (Fetch::kUsesLanding) {
      // 1. start the remote fetch of this pair's partition (at most landing_rows rows)
      if (has_r) {
        const int64_t e0 = remote.part_ptr[r], n = remote.part_ptr[r + 1] - e0;
        for (int64_t i = 0; i < n; ++i) {
          remote_src.start(landing + i * kTile, remote.col[e0 + i], remote.pe[e0 + i], dim, d0, tile, lane);
        }
      }
    }
    // 2. aggregate the local partition while the fetch is in flight
    if (l < l_end) {
      if (local.part_row[l] != lrow) {
        if (lrow >= 0) commit(lacc, out, lrow, d0, dim, lane);
        lrow = local.part_row[l];
      }
      aggregate_direct<scalar_t>(local, l, local_src, lacc, d0, dim, lane);
      ++l;
    }
    // 3. complete the fetch, then aggregate the arrived rows
    if (has_r) {
      if constexpr (Fetch::kUsesLanding) {
        remote_src.complete();
        const int64_t e0 = remote.part_ptr[r], n = remote.part_ptr[r + 1] - e0;
        for (int64_t i = 0; i < n; ++i) {
          add_row(racc, landing + i * kTile - d0, remote.weight ? remote.weight[e0 + i] : 1.f, d0, d0 + tile, lane);
        }
        __syncwarp();  // every lane is done with the landing buffer before it is refilled
      } else {
        aggregate_direct<scalar_t>(remote, r, remote_src, racc, d0, dim, lane);
      }
      ++r;
    }
  }
  if (lrow >= 0) commit(lacc, out, lrow, d0, dim, lane);
  if (rrow >= 0) commit(racc, out, rrow, d0, dim, lane);
}

// First partition of `row` in a row-sorted partition list (part_row is non-decreasing).
__device__ __forceinline__ int64_t lower_bound_row(const int32_t* __restrict__ part_row, int64_t n, int32_t row) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (part_row[mid] < row) lo = mid + 1; else hi = mid;
  }
  return lo;
}

template <typename scalar_t>
__global__ void aggregate_rows_deterministic_kernel(TableFetch local_src, TableFetch remote_src,
                                                    DevicePart<float> local, int64_t num_local,
                                                    DevicePart<float> remote, int64_t num_remote,
                                                    int64_t num_rows, int64_t dim, scalar_t* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= num_rows) return;
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * kTile;
  float acc[kPerLane] = {0.f};
  for (int64_t k = lower_bound_row(local.part_row, num_local, row); k < num_local && local.part_row[k] == row; ++k) {
    aggregate_direct<scalar_t>(local, k, local_src, acc, d0, dim, lane);
  }
  for (int64_t k = lower_bound_row(remote.part_row, num_remote, row); k < num_remote && remote.part_row[k] == row; ++k) {
    aggregate_direct<scalar_t>(remote, k, remote_src, acc, d0, dim, lane);
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = d0 + lane + j * kWarp;
    if (d < dim) out[row * dim + d] = static_cast<scalar_t>(acc[j]);
  }
}

DevicePart<float> device_part(const at::Tensor& ptr, const at::Tensor& row, const at::Tensor& col,
                              const at::Tensor& weight) {
  return {ptr.data_ptr<int64_t>(), row.data_ptr<int32_t>(), col.data_ptr<int32_t>(),
          weight.defined() ? weight.data_ptr<float>() : nullptr, nullptr};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

at::Tensor aggregate_cuda(const at::Tensor& x, const at::Tensor& x_remote,
                          const at::Tensor& local_part_ptr, const at::Tensor& local_part_row,
                          const at::Tensor& local_col, const std::optional<at::Tensor>& local_weight,
                          const at::Tensor& remote_part_ptr, const at::Tensor& remote_part_row,
                          const at::Tensor& remote_col, const std::optional<at::Tensor>& remote_weight,
                          const at::Tensor& warp_local_ptr, const at::Tensor& warp_remote_ptr,
                          int64_t num_rows, int64_t warps_per_block, bool deterministic) {
  check_aggregate_args({x, x_remote, local_part_ptr, local_part_row, local_col, local_weight,
                        remote_part_ptr, remote_part_row, remote_col, remote_weight, warp_local_ptr,
                        warp_remote_ptr, num_rows, warps_per_block});
  TORCH_CHECK(x.scalar_type() != at::kDouble, "mgg.aggregate: float64 is supported on the CPU only");
  const c10::cuda::CUDAGuard guard(x.device());
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t dim = x.size(1);
  auto as_f32 = [](const std::optional<at::Tensor>& w) {
    return w.has_value() ? w->to(at::kFloat).contiguous() : at::Tensor();
  };
  at::Tensor lw = as_f32(local_weight), rw = as_f32(remote_weight);
  auto local = device_part(local_part_ptr, local_part_row, local_col, lw);
  auto remote = device_part(remote_part_ptr, remote_part_row, remote_col, rw);
  const int64_t tiles = ceil_div(dim, kTile);
  TORCH_CHECK(tiles <= 65535, "mgg.aggregate: dim ", dim, " needs more than 65535 column tiles");
  at::Tensor out = at::empty({num_rows, dim}, x.options());
  if (num_rows == 0 || dim == 0) return out.zero_();
  const int threads = static_cast<int>(warps_per_block) * kWarp;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_cuda", [&] {
    TableFetch local_src{x.data_ptr<scalar_t>()}, remote_src{x_remote.data_ptr<scalar_t>()};
    if (deterministic) {
      const dim3 grid(static_cast<unsigned>(ceil_div(num_rows, warps_per_block)), static_cast<unsigned>(tiles));
      aggregate_rows_deterministic_kernel<scalar_t><<<grid, threads, 0, stream>>>(
          local_src, remote_src, local, local_part_row.numel(), remote, remote_part_row.numel(), num_rows, dim,
          out.data_ptr<scalar_t>());
    } else {
      const int64_t num_warps = warp_local_ptr.numel() - 1;
      at::Tensor acc = at::zeros({num_rows, dim}, x.options().dtype(at::kFloat));
      if (num_warps > 0) {
        const dim3 grid(static_cast<unsigned>(ceil_div(num_warps, warps_per_block)), static_cast<unsigned>(tiles));
        aggregate_pipelined_kernel<scalar_t, TableFetch><<<grid, threads, 0, stream>>>(
            local_src, remote_src, local, remote, warp_local_ptr.data_ptr<int64_t>(),
            warp_remote_ptr.data_ptr<int64_t>(), num_warps, dim, 0, acc.data_ptr<float>());
      }
      out.copy_(acc);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("aggregate", &aggregate_cuda); }

}  // namespace mgg
