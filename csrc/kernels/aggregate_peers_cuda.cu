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
  const BlockCtx<scalar_t> b(a, smem);
  const int lane = b.lane, warp = b.warp, wpb = b.wpb, width = b.width;
  const int64_t* blk = b.blk;
  const int64_t row0 = b.row0, d0 = b.d0;
  float* partial = b.partial;
  scalar_t* landing_all = b.landing_all;
  scalar_t* landing = b.landing;
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
  const LaunchShape shape = shape_launch(a, wpb, true, false, max_remote_part);
  launch_with_fixups(a, shape, false, aggregate_blocks_blockget_kernel<scalar_t>, lsrc, symmetric);
}

}  // namespace
}  // namespace cuda

namespace {

at::Tensor aggregate_peers_cuda(MGG_AGGREGATE_PEERS_PARAMS) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CheckedCall c = check_aggregate_peers_call(MGG_AGGREGATE_PEERS_ARGS);
  TORCH_CHECK(static_cast<int64_t>(peers.size()) <= kMaxPes, c.op, ": at most ", kMaxPes, " PEs, got ", peers.size());
  const Fetch how = static_cast<Fetch>(fetch);
  const void* symmetric = peers[my_pe].data_ptr();
  if (how != Fetch::kDirect) {
    TORCH_CHECK(shmem::initialized(), c.op, ": fetch ", fetch, " is an NVSHMEM get but NVSHMEM is not initialised ",
                "in this process (mgg.distributed.nvshmem.init)");
    TORCH_CHECK(shmem::n_pes() == static_cast<int>(peers.size()) && shmem::my_pe() == my_pe, c.op, ": NVSHMEM has ",
                shmem::n_pes(), " PEs and this is PE ", shmem::my_pe(), ", but the call names ", peers.size(),
                " PEs and my_pe ", my_pe);
    TORCH_CHECK(shmem::is_symmetric(reinterpret_cast<int64_t>(symmetric)), c.op,
                ": peers[my_pe] is not in NVSHMEM's symmetric heap, so peers cannot get from it");
  }
  const cuda::CallBuffers b(x, c);
  if (b.empty()) return b.out;
  cuda::dispatch_storage(c.op, x.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    const auto a = cuda::make_launch<scalar_t>(c, b);
    const TableFetch lsrc{x.data_ptr()};
    const int64_t most = c.facts.max_remote_part;
    switch (how) {
      case Fetch::kDirect: {
        PeerPointerFetch peer{};
        for (size_t i = 0; i < peers.size(); ++i) peer.base[i] = peers[i].data_ptr();
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, peer, most);
        break;
      }
      case Fetch::kGetThread:
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, NvshmemGetFetch<GetScope::kThread>{symmetric}, most);
        break;
      case Fetch::kGetWarp:
        cuda::launch_aggregate(a, warps_per_block, deterministic, lsrc, NvshmemGetFetch<GetScope::kWarp>{symmetric}, most);
        break;
      case Fetch::kGetBlock:  // deterministic mode has no block-scope variant: warp-scope gets, row-owned
        if (deterministic) {
          cuda::launch_aggregate(a, warps_per_block, true, lsrc, NvshmemGetFetch<GetScope::kWarp>{symmetric}, most);
        } else {
          cuda::launch_blockget(a, warps_per_block, lsrc, symmetric, most);
        }
        break;
    }
  });
  return b.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("aggregate_peers", &aggregate_peers_cuda); }

}  // namespace mgg
