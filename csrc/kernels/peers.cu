// The kernels of mgg::aggregate_peers: remote rows are read from each PE's own table, row
// `offset` of PE `pe`, through the source the caller picks:
//   kPeerPointers  direct loads through peer pointers (nvshmem_ptr of a symmetric table; or, in
//                  one process, any tensors of this device, e.g. P ranks' slices of one table);
//   kGetThread     NVSHMEM get, thread scope (one lane per row) into shared memory;
//   kGetWarp       NVSHMEM get, warp scope (the MGG path);
//   kGetBlock      NVSHMEM get, block scope (every thread of the block fetches each row together).
// Gets need NVSHMEM attached in this module (nvshmem/attach.cu) and the tables in its heap.
#include "fetch.cuh"
#include "launch.cuh"
#include "nvshmem_fetch.cuh"

namespace mgg::kernels {
namespace {

// Block-scope gets: the block walks the interleave steps together. At step s each warp
// publishes its s-th remote partition; the whole block fetches the rows of every warp's
// partition (each row by all threads), the warps aggregate their s-th local partition meanwhile,
// then, once the gets are complete and after a block barrier, each warp aggregates its landed
// rows. Every warp has at most dist partitions of each part, so dist steps cover the block.
// With interleave off (the contiguous mapping), each warp first aggregates all its local
// partitions, so no get overlaps local work.
template <typename scalar_t>
__global__ void __launch_bounds__(kMaxThreads)
    aggregate_blocks_blockget_kernel(const KernelArgs<scalar_t> a, const TableFetch lsrc, const void* symmetric,
                                     bool p2p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int64_t published[kWpbMax][3];  // row, first edge, end edge of each warp's partition
  const BlockCtx<scalar_t> b(a, smem);
  const LaneCols<scalar_t>& cols = b.cols;
  const int lane = b.lane, warp = b.warp, width = cols.width;
  const int64_t row0 = b.row0, d0 = b.d0;
  float* partial = b.partial;
  const scalar_t* sym = static_cast<const scalar_t*>(symmetric) + d0;
  const size_t bytes = static_cast<size_t>(width) * sizeof(scalar_t);
  const NvshmemGetFetch<GetScope::kWarp> tail{symmetric, p2p};  // rows past the landing buffer (ps = 0)
  KernelWalk lw = b.walk(a, false), rw = b.walk(a, true);
  Run<scalar_t> run;
  b.local_first(a, lw, run, lsrc);
  for (int64_t s = 0; s < a.dist; ++s) {  // uniform across the block
    KernelPartition q{-1, 0, 0};
    if (!rw.done()) q = rw.next(a.remote.rowptr, a.ps);  // every lane of the warp advances its walk
    if (lane == 0) {
      published[warp][0] = q.row;
      published[warp][1] = q.begin;
      published[warp][2] = q.end;
    }
    __syncthreads();
    for (int w = 0; w < b.wpb; ++w) {
      const int64_t e0 = published[w][1], e1 = published[w][2];
      const int n = static_cast<int>(e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows);
      for (int i = 0; i < n; ++i) {
        nvshmemx_getmem_nbi_block(b.landing_all + (static_cast<int64_t>(w) * a.landing_rows + i) * a.tile,
                                  sym + static_cast<int64_t>(a.remote.col[e0 + i]) * a.dim, bytes, a.remote.pe[e0 + i]);
      }
    }
    b.local_step(a, lw, run, lsrc);
    if (!p2p) nvshmem_quiet();
    __syncthreads();
    if (q.row >= 0) {
      run.enter(q.row, partial, row0, a.tile, cols);
      const int n = static_cast<int>(q.end - q.begin < a.landing_rows ? q.end - q.begin : a.landing_rows);
      add_landed(run.acc, b.landing, a.tile, load_edge(a.remote, q.begin, n, lane), n, a.remote.weight != nullptr,
                 cols);
      add_edges_landing(run.acc, a.remote, q.begin + n, q.end, tail, b.landing, a, d0, cols);
    }
    __syncthreads();  // landing buffers are refilled at the next step
  }
  run.finish(partial, row0, a.tile, cols);
  write_block(a, b.blk, partial, d0, width);
}

template <typename scalar_t, typename RemoteSrc>
auto peers_kernel(bool deterministic) {
  return deterministic ? aggregate_rows_kernel<scalar_t, TableFetch, RemoteSrc>
                       : aggregate_blocks_kernel<scalar_t, TableFetch, RemoteSrc>;
}

using GetThread = NvshmemGetFetch<GetScope::kThread>;
using GetWarp = NvshmemGetFetch<GetScope::kWarp>;

// Calls f(kernel, remote source) with the kernel and source the step runs with. Deterministic
// mode has no block-scope variant: it reads with warp-scope gets in the row-owned kernel.
template <typename scalar_t, typename F>
auto with_peers_kernel(const Step& s, Source source, const Sources& src, F&& f) {
  const bool det = s.deterministic;
  switch (source) {
    case Source::kGetThread:
      return f(peers_kernel<scalar_t, GetThread>(det), GetThread{src.symmetric, src.p2p});
    case Source::kGetWarp:
      return f(peers_kernel<scalar_t, GetWarp>(det), GetWarp{src.symmetric, src.p2p});
    case Source::kGetBlock:
      if (det) return f(peers_kernel<scalar_t, GetWarp>(true), GetWarp{src.symmetric, src.p2p});
      return f(aggregate_blocks_blockget_kernel<scalar_t>, src.symmetric, src.p2p);
    default: {
      PeerPointerFetch peer{};
      for (int i = 0; i < kMaxPes; ++i) peer.base[i] = src.peers[i];
      return f(peers_kernel<scalar_t, PeerPointerFetch>(det), peer);
    }
  }
}

}  // namespace

std::string plan_peers_launch(const Step& s, Source source, Launch* l) {
  const bool landing = source != Source::kPeerPointers;
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, Sources{}, [&](auto kernel, const auto&... /*remote*/) {
      return plan_kernel_launch<scalar_t>(s, kernel, landing, l);
    });
  });
}

cudaError_t launch_peers(const Step& s, Source source, const Sources& src, const Launch& l, void* out, float* scratch,
                         cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, src, [&](auto kernel, const auto&... remote) {
      return run_kernel<scalar_t>(s, l, vector_rows(s, source, src), kernel, out, scratch, stream,
                                  TableFetch{src.local_table}, remote...);
    });
  });
}

}  // namespace mgg::kernels
