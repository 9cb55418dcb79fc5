// The kernels of mgg::aggregate_peers: remote rows are read from each PE's own table, row
// `offset` of PE `pe`, through the source the caller picks:
//   kPeerPointers  direct loads through peer pointers (nvshmem_ptr of a symmetric table; or, in
//                  one process, any tensors of this device, e.g. P ranks' slices of one table);
//   kGetThread     rows fetched into shared memory, one lane per row;
//   kGetWarp       the warp per row (the MGG path);
//   kGetBlock      the block per row (every thread of the block fetches each row together).
// A fetch into shared memory is an NVSHMEM get where some PE is not reachable by loads
// (NvshmemGetFetch: the proxy path), and mgg's asynchronous copy from the peer's table where
// every PE is (Sources::p2p: PeerCopyFetch through nvshmem_ptr, at a direct source's registers).
// Gets need NVSHMEM attached in this module (nvshmem/attach.cu) and the tables in its heap.
#include "fetch.cuh"
#include "launch.cuh"
#include "nvshmem_fetch.cuh"

namespace mgg::kernels {
namespace {

// Block-scope fetches (BlockSrc: NvshmemGetFetch or PeerCopyFetch at GetScope::kBlock): the
// block walks the interleave steps together. At step s each warp publishes its s-th remote
// partition; the whole block fetches the rows of every warp's partition (each row by all
// threads), the warps aggregate their s-th local partition meanwhile, then, once the fetches
// are complete and after a block barrier, each warp aggregates its landed rows. Every warp has
// at most dist partitions of each part, so dist steps cover the block. With interleave off (the
// contiguous mapping), each warp first aggregates all its local partitions, so no fetch
// overlaps local work.
template <typename scalar_t, typename BlockSrc>
__global__ void __launch_bounds__(kMaxThreads, BlockSrc::kCallsNvshmem ? 1 : kBlocksPerSm)
    aggregate_blocks_blockget_kernel(const KernelArgs<scalar_t> a, const TableFetch lsrc, const BlockSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int32_t published[kWpbMax][2];  // first and end edge of each warp's partition
  const BlockCtx<scalar_t> b(a, smem);
  const LaneCols<scalar_t>& cols = b.cols;
  const int lane = b.lane, warp = b.warp;
  const int64_t row0 = b.row0, d0 = b.d0;
  float* partial = b.partial;
  KernelWalk lw = b.walk(a, false), rw = b.walk(a, true);
  Run<scalar_t> run;
  b.local_first(a, lw, run, lsrc);
  for (int64_t s = 0; s < a.dist; ++s) {  // uniform across the block
    KernelPartition q{-1, 0, 0};
    if (!rw.done()) q = rw.next(a.remote.rowptr, a.ps);  // every lane of the warp advances its walk
    if (lane == 0) {
      published[warp][0] = q.begin;
      published[warp][1] = q.end;
    }
    __syncthreads();
    for (int w = 0; w < b.wpb; ++w) {
      const int32_t e0 = published[w][0], e1 = published[w][1];
      const int n = e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows;
      rsrc.start_block(b.landing_all + static_cast<int64_t>(w) * a.landing_rows * a.tile, a.tile, a.remote, e0, n,
                       a.dim, d0, cols.width);
    }
    b.local_step(a, lw, run, lsrc);
    rsrc.complete_block();
    __syncthreads();
    if (q.row >= 0) {
      run.enter(q.row, partial, row0, a.tile, cols);
      const int n = q.end - q.begin < a.landing_rows ? q.end - q.begin : a.landing_rows;
      add_landed(run.acc, b.landing, a.tile, load_edge(a.remote, q.begin, n, lane), n, a.remote.weight != nullptr,
                 cols);
      add_edges_landing(run.acc, a.remote, q.begin + n, q.end, rsrc.tail(), b.landing, a, d0, cols);
    }
    __syncthreads();  // landing buffers are refilled at the next step
  }
  run.finish(partial, row0, a.tile, cols);
  write_block(a, b.blk, partial, d0, cols.width);
}

template <typename scalar_t, typename RemoteSrc>
auto peers_kernel(bool deterministic) {
  return deterministic ? aggregate_rows_kernel<scalar_t, TableFetch, RemoteSrc>
                       : aggregate_blocks_kernel<scalar_t, TableFetch, RemoteSrc>;
}

// The fetch at scope kScope: mgg's asynchronous copies where every PE is reachable by loads
// (src.p2p: src.peers holds nvshmem_ptr of the symmetric table for every PE), NVSHMEM's get
// otherwise.
template <GetScope kScope, typename F>
auto with_fetch(const Step& s, const Sources& src, F&& f) {
  if (src.p2p) return f(PeerCopyFetch<kScope>{peer_pointers(src), peer_rows_on_vec_grid(s, src)});
  return f(NvshmemGetFetch<kScope>{src.symmetric});
}

// Calls f(kernel, remote source) with the kernel and source the step runs with. Deterministic
// mode has no block-scope variant: it fetches at warp scope in the row-owned kernel.
template <typename scalar_t, typename F>
auto with_peers_kernel(const Step& s, Source source, const Sources& src, F&& f) {
  const bool det = s.deterministic;
  const auto rows_or_blocks = [&](const auto& fetch) {
    using Fetch = std::decay_t<decltype(fetch)>;
    return f(peers_kernel<scalar_t, Fetch>(det), fetch);
  };
  switch (source) {
    case Source::kGetThread:
      return with_fetch<GetScope::kThread>(s, src, rows_or_blocks);
    case Source::kGetWarp:
      return with_fetch<GetScope::kWarp>(s, src, rows_or_blocks);
    case Source::kGetBlock:
      if (det) return with_fetch<GetScope::kWarp>(s, src, rows_or_blocks);
      return with_fetch<GetScope::kBlock>(s, src, [&](const auto& fetch) {
        using Fetch = std::decay_t<decltype(fetch)>;
        return f(aggregate_blocks_blockget_kernel<scalar_t, Fetch>, fetch);
      });
    default:
      return f(peers_kernel<scalar_t, PeerPointerFetch>(det), peer_pointers(src));
  }
}

}  // namespace

std::string plan_peers_launch(const Step& s, Source source, const Sources& src, Launch* l) {
  const bool landing = source != Source::kPeerPointers;
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, src, [&](auto kernel, const auto&... /*remote*/) {
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
