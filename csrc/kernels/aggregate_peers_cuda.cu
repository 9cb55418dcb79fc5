// CUDA implementation of mgg::aggregate_peers: remote rows are read from each PE's own table,
// row remote_offset of PE remote_pe, through the fetch policy the caller picks:
//   0  direct loads through peer pointers (nvshmem_ptr of a symmetric table; or, in one
//      process, any tensors of this device, e.g. P ranks' slices of one table);
//   1  NVSHMEM get, thread scope (one lane per row) into shared memory;
//   2  NVSHMEM get, warp scope (the MGG path);
//   3  NVSHMEM get, block scope (every thread of the block fetches each row together).
// Gets need NVSHMEM initialised in this process and peers[my_pe] inside the symmetric heap.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../nvshmem/runtime.h"
#include "aggregate_kernel.cuh"

namespace mgg {
namespace cuda {
namespace {

// Block-scope gets: the block walks the interleave steps together. At step s it fetches, for
// every warp, the rows of that warp's s-th remote partition (each row by the whole block), the
// warps aggregate their s-th local partition meanwhile, then after nvshmem_quiet and a block
// barrier each warp aggregates its landed rows.
template <typename scalar_t>
__global__ void aggregate_blocks_blockget_kernel(const Launch<scalar_t> a, const TableFetch lsrc,
                                                 const void* symmetric) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, wpb = blockDim.x / kWarp;
  const int64_t* blk = a.blocks + static_cast<int64_t>(blockIdx.x) * kBlockFields;
  const int64_t row0 = blk[kRowBegin];
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * a.tile;
  const int width = static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile);
  float* partial = block_partials(smem, blk[kRowEnd] - row0, a.tile);
  scalar_t* landing_all = reinterpret_cast<scalar_t*>(reinterpret_cast<float*>(smem) + 2 * wpb * a.tile);
  scalar_t* landing = landing_all + static_cast<int64_t>(warp) * a.landing_rows * a.tile;
  const scalar_t* sym = static_cast<const scalar_t*>(symmetric) + d0;
  const size_t bytes = static_cast<size_t>(width) * sizeof(scalar_t);
  const NvshmemGetFetch<GetScope::kWarp> tail{symmetric};  // rows past the landing buffer (ps = 0)
  Run lrun, rrun;
  for (int64_t s = 0; s < a.dist; ++s) {  // uniform across the block
    for (int w = 0; w < wpb; ++w) {
      const int64_t rw = blk[kRemoteBegin] + w * a.dist + s;
      if (rw >= min(blk[kRemoteBegin] + (w + 1) * a.dist, blk[kRemoteEnd])) continue;
      const int64_t e0 = a.remote.part_ptr[rw], e1 = a.remote.part_ptr[rw + 1];
      const int n = static_cast<int>(e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows);
      for (int i = 0; i < n; ++i) {
        nvshmemx_getmem_nbi_block(landing_all + (static_cast<int64_t>(w) * a.landing_rows + i) * a.tile,
                                  sym + static_cast<int64_t>(a.remote.col[e0 + i]) * a.dim, bytes,
                                  a.remote.pe[e0 + i]);
      }
    }
    const int64_t l = blk[kLocalBegin] + warp * a.dist + s;
    if (l < min(blk[kLocalBegin] + (warp + 1) * a.dist, blk[kLocalEnd])) {
      lrun.enter(a.local.part_row[l], partial, row0, a.tile, width, lane);
      add_partition_direct<scalar_t>(lrun.acc, a.local, l, lsrc, a.dim, d0, width, lane);
    }
    nvshmem_quiet();
    __syncthreads();
    const int64_t r = blk[kRemoteBegin] + warp * a.dist + s;
    if (r < min(blk[kRemoteBegin] + (warp + 1) * a.dist, blk[kRemoteEnd])) {
      rrun.enter(a.remote.part_row[r], partial, row0, a.tile, width, lane);
      const int64_t e0 = a.remote.part_ptr[r], e1 = a.remote.part_ptr[r + 1];
      const int n = static_cast<int>(e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows);
      add_landed(rrun.acc, landing, a.tile, load_edge(a.remote, e0, n, lane), n, width, lane);
      add_edges_landing(rrun.acc, a.remote, e0 + n, e1, tail, landing, a, d0, width, lane);
    }
    __syncthreads();  // landing buffers are refilled at the next step
  }
  lrun.finish(partial, row0, a.tile, width, lane);
  rrun.finish(partial, row0, a.tile, width, lane);
  write_block(a, blk, partial, d0, width);
}

template <typename scalar_t>
void launch_blockget(Launch<scalar_t> a, int64_t wpb, const TableFetch& lsrc, const void* symmetric,
                     int64_t max_remote_part) {
  auto stream = at::cuda::getCurrentCUDAStream();
  const size_t limit = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
  a.landing_rows = static_cast<int>(std::clamp<int64_t>(max_remote_part, 1, kChunk));
  a.tile = choose_tile(a.dim, wpb, a.landing_rows, sizeof(scalar_t), false, limit);
  const int64_t tiles = ceil_div(a.dim, a.tile);
  TORCH_CHECK(tiles <= 65535, "mgg.aggregate_peers: dim ", a.dim, " needs more than 65535 column tiles");
  const size_t smem = smem_bytes(wpb, a.tile, a.landing_rows, sizeof(scalar_t), false);
  if (a.num_blocks > 0) {
    auto kernel = aggregate_blocks_blockget_kernel<scalar_t>;
    allow_smem(kernel, smem);
    const dim3 grid(static_cast<unsigned>(a.num_blocks), static_cast<unsigned>(tiles));
    kernel<<<grid, static_cast<int>(wpb) * kWarp, smem, stream>>>(a, lsrc, symmetric);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (a.num_fixups > 0) {
    const dim3 grid(static_cast<unsigned>(a.num_fixups), static_cast<unsigned>(ceil_div(a.dim, 256)));
    fixup_kernel<scalar_t><<<grid, 256, 0, stream>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace
}  // namespace cuda

namespace {

at::Tensor aggregate_peers_cuda(const at::Tensor& x, at::TensorList peers, int64_t my_pe,
                                const at::Tensor& local_part_ptr, const at::Tensor& local_part_row,
                                const at::Tensor& local_col, const std::optional<at::Tensor>& local_weight,
                                const at::Tensor& remote_part_ptr, const at::Tensor& remote_part_row,
                                const at::Tensor& remote_offset, const at::Tensor& remote_pe,
                                const std::optional<at::Tensor>& remote_weight, const at::Tensor& blocks,
                                const at::Tensor& fixups, int64_t num_rows, int64_t dist, int64_t warps_per_block,
                                bool interleave, int64_t fetch, bool deterministic) {
  const char* op = "mgg.aggregate_peers";
  TORCH_CHECK(fetch >= 0 && fetch <= 3, op, ": fetch must be 0 (direct), 1 (get, thread), 2 (get, warp) or ",
              "3 (get, block), got ", fetch);
  const PartArgs local{"local", local_part_ptr, local_part_row, local_col, local_weight};
  const PartArgs remote{"remote", remote_part_ptr, remote_part_row, remote_offset, remote_weight, &remote_pe};
  const ScheduleArgs s{blocks, fixups, num_rows, dist, warps_per_block};
  check_plan_args(op, x, local, remote, s);
  check_peer_args(op, x, peers, my_pe);
  TORCH_CHECK(static_cast<int64_t>(peers.size()) <= kMaxPes, op, ": at most ", kMaxPes, " PEs, got ", peers.size());
  const Fetch how = static_cast<Fetch>(fetch);
  const void* symmetric = peers[my_pe].data_ptr();
  if (how != Fetch::kDirect) {
    TORCH_CHECK(shmem::initialized(), op, ": fetch ", fetch, " is an NVSHMEM get but NVSHMEM is not initialised in ",
                "this process (mgg.distributed.nvshmem.init)");
    TORCH_CHECK(shmem::n_pes() == static_cast<int>(peers.size()) && shmem::my_pe() == my_pe, op, ": NVSHMEM has ",
                shmem::n_pes(), " PEs and this is PE ", shmem::my_pe(), ", but the call names ", peers.size(),
                " PEs and my_pe ", my_pe);
    TORCH_CHECK(shmem::is_symmetric(reinterpret_cast<int64_t>(symmetric)), op,
                ": peers[my_pe] is not in NVSHMEM's symmetric heap, so peers cannot get from it");
  }
  const c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> peer_rows;
  for (const auto& p : peers) peer_rows.push_back(p.size(0));
  const PlanFacts facts = check_plan_content(op, x.size(0), local, RemoteRows{0, &peer_rows, my_pe}, remote, s);
  const int64_t dim = x.size(1);
  at::Tensor out = at::empty({num_rows, dim}, x.options());
  if (num_rows == 0 || dim == 0) return out;
  auto f32 = [](const std::optional<at::Tensor>& w) { return w.has_value() ? w->to(at::kFloat).contiguous() : at::Tensor(); };
  const at::Tensor lw = f32(local_weight), rw = f32(remote_weight);
  const at::Tensor scratch = at::empty({facts.num_slots, dim}, x.options().dtype(at::kFloat));
  cuda::dispatch_storage(op, x.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    cuda::Launch<scalar_t> a{cuda::device_part(local, lw), cuda::device_part(remote, rw), blocks.data_ptr<int64_t>(),
                             blocks.size(0), fixups.data_ptr<int64_t>(), fixups.size(0), num_rows,
                             local_part_row.numel(), remote_part_row.numel(), dist, dim, 0, 0, interleave,
                             out.data_ptr<scalar_t>(), scratch.data_ptr<float>()};
    const TableFetch lsrc{x.data_ptr()};
    switch (how) {
      case Fetch::kDirect: {
        PeerPointerFetch peer{};
        for (size_t i = 0; i < peers.size(); ++i) peer.base[i] = peers[i].data_ptr();
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, peer, facts.max_remote_part);
        break;
      }
      case Fetch::kGetThread:
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, NvshmemGetFetch<GetScope::kThread>{symmetric},
                               facts.max_remote_part);
        break;
      case Fetch::kGetWarp:
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, NvshmemGetFetch<GetScope::kWarp>{symmetric},
                               facts.max_remote_part);
        break;
      case Fetch::kGetBlock:  // deterministic mode has no block-scope variant: warp-scope gets, row-owned
        if (deterministic) {
          cuda::launch_aggregate(a, warps_per_block, true, lsrc, NvshmemGetFetch<GetScope::kWarp>{symmetric},
                                 facts.max_remote_part);
        } else {
          cuda::launch_blockget(a, warps_per_block, lsrc, symmetric, facts.max_remote_part);
        }
        break;
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("aggregate_peers", &aggregate_peers_cuda); }

}  // namespace mgg
