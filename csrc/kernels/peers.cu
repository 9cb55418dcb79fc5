// The kernels of mgg::aggregate_peers: remote rows are read from each PE's own table, row
// `offset` of PE `pe`, through the source the caller picks:
//   kPeerPointers  direct loads through peer pointers (nvshmem_ptr of a symmetric table; or, in
//                  one process, any tensors of this device, e.g. P ranks' slices of one table);
//   kGetThread     rows fetched into shared memory, one lane per row;
//   kGetWarp       the warp per row (the MGG path);
//   kGetBlock      the block per row (every thread of the block fetches each row together).
// Where every PE is reachable by loads (Sources::p2p: NVLink or PCIe peer access within a node)
// a fetch is mgg's asynchronous copy from the peer's table (PeerCopyFetch through nvshmem_ptr) by
// the threads the source names. Where some PE is not (the proxy path), rows are NVSHMEM gets,
// posted by a warp of their own (aggregate_blocks_fetchwarp_kernel; the deterministic kernel's
// warps post their own): there the proxy thread or the NIC moves the bytes, whichever threads
// post. Gets need NVSHMEM attached in this module (nvshmem/attach.cu) and the tables in its heap.
#include "fetch.cuh"
#include "launch.cuh"
#include "nvshmem_fetch.cuh"

namespace mgg::kernels {
namespace {

// Block-scope copies (PeerCopyFetch at GetScope::kBlock): the block walks the interleave steps
// together. At step s each warp publishes its s-th remote partition; the whole block copies the
// rows of every warp's partition (each row by all threads), the warps aggregate their s-th local
// partition meanwhile, then, once the copies are complete and after a block barrier, each warp
// aggregates its landed rows. Every warp has at most dist partitions of each part, so dist steps
// cover the block. With interleave off (the contiguous mapping), each warp first aggregates all
// its local partitions, so no copy overlaps local work.
template <typename scalar_t>
__global__ void __launch_bounds__(kMaxThreads, kBlocksPerSm)
    aggregate_blocks_blockget_kernel(const KernelArgs<scalar_t> a, const TableFetch lsrc,
                                     const PeerCopyFetch<GetScope::kBlock> rsrc) {
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

// The proxy path (some PE not reachable by loads), every get source: the schedule's wpb warps
// aggregate and one more warp, the block's last (the fetch warp), posts NVSHMEM's gets of their
// remote rows into their landing buffers. The block walks the interleave steps together: at step
// s each aggregating warp publishes its s-th remote partition; the fetch warp gets the rows of
// every published partition (warp scope, a row per get) and quiets while the others aggregate
// their s-th local partition; after a block barrier each warp adds its landed rows. A partition
// longer than a landing buffer (ps = 0) lands in rounds of landing_rows rows, every warp taking
// part in every round's barriers. NVSHMEM's device code (its peer copy, IBGDA and proxy paths)
// is all in the fetch warp's branch, where no aggregation state is live, and none in the
// others': the kernel needs the larger of the two roles' registers, not their sum, so it holds
// the other blocks kernels' bound (kBlockRegisters) without spilling, where the same gets
// inlined into every warp needed 96-120 registers. The roles meet at block barriers from
// different branches: split_barrier.
//
// A block barrier that the warps reach from different branches (the fetch warp's and the
// others'): PTX's barrier.sync without .aligned, which allows that (__syncthreads is bar.sync,
// the .aligned form, for which every thread of the block must execute the same instruction). It
// orders memory as __syncthreads does. The emulator's __syncthreads counts arrivals wherever
// they come from.
__device__ __forceinline__ void split_barrier() {
#ifdef MGG_SIMT
  __syncthreads();
#else
  asm volatile("barrier.sync 0;" ::: "memory");
#endif
}

__device__ __forceinline__ int fetch_rounds(const int32_t (*published)[2], int wpb, int landing_rows) {
  int most = 0;
  for (int w = 0; w < wpb; ++w) {
    const int rows = published[w][1] - published[w][0];
    most = rows > most ? rows : most;
  }
  return (most + landing_rows - 1) / landing_rows;
}

template <typename scalar_t>
__device__ __forceinline__ void post_gets(const KernelArgs<scalar_t>& a, const BlockCtx<scalar_t>& b,
                                          const NvshmemGetFetch<GetScope::kWarp>& rsrc, const int32_t (*published)[2],
                                          int round) {
  for (int w = 0; w < b.wpb; ++w) {
    const int32_t e0 = published[w][0] + round * a.landing_rows, e1 = published[w][1];
    if (e0 >= e1) continue;  // uniform across the warp
    const int n = e1 - e0 < a.landing_rows ? e1 - e0 : a.landing_rows;
    const LaneEdge mine = load_edge(a.remote, e0, n, b.lane);
    rsrc.start(b.landing_all + static_cast<int64_t>(w) * a.landing_rows * a.tile, a.tile, mine.col, mine.pe, n, a.dim,
               b.d0, b.cols.width, b.lane);
  }
  rsrc.complete();
}

template <typename scalar_t>
__global__ void __maxnreg__(kBlockRegisters)
    aggregate_blocks_fetchwarp_kernel(const KernelArgs<scalar_t> a, const TableFetch lsrc,
                                      const NvshmemGetFetch<GetScope::kWarp> rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int32_t published[kWpbMax][2];  // first and end edge of each warp's partition
  const BlockCtx<scalar_t> b(a, smem, static_cast<int>(blockDim.x / kWarp) - 1);
  if (b.warp == b.wpb) {  // the fetch warp: the same barriers, from its own branch
    for (int64_t s = 0; s < a.dist; ++s) {
      split_barrier();  // A: the partitions of step s are published
      const int rounds = fetch_rounds(published, b.wpb, a.landing_rows);
      for (int r = 0; r < rounds; ++r) {
        post_gets(a, b, rsrc, published, r);
        split_barrier();  // B: landed
        split_barrier();  // C: read
      }
      if (rounds == 0) split_barrier();  // D: published is rewritten at the next step
    }
  } else {
    const LaneCols<scalar_t>& cols = b.cols;
    KernelWalk lw = b.walk(a, false), rw = b.walk(a, true);
    Run<scalar_t> run;
    b.local_first(a, lw, run, lsrc);
    for (int64_t s = 0; s < a.dist; ++s) {
      KernelPartition q{-1, 0, 0};
      if (!rw.done()) q = rw.next(a.remote.rowptr, a.ps);
      if (b.lane == 0) {
        published[b.warp][0] = q.begin;
        published[b.warp][1] = q.end;
      }
      split_barrier();  // A
      const int rounds = fetch_rounds(published, b.wpb, a.landing_rows);
      b.local_step(a, lw, run, lsrc);  // while the fetch warp gets round 0
      for (int r = 0; r < rounds; ++r) {
        split_barrier();  // B
        const int32_t e0 = q.begin + r * a.landing_rows;
        if (q.row >= 0 && e0 < q.end) {
          const int n = q.end - e0 < a.landing_rows ? q.end - e0 : a.landing_rows;
          run.enter(q.row, b.partial, b.row0, a.tile, cols);
          add_landed(run.acc, b.landing, a.tile, load_edge(a.remote, e0, n, b.lane), n, a.remote.weight != nullptr,
                     cols);
        }
        split_barrier();  // C
      }
      if (rounds == 0) split_barrier();  // D
    }
    run.finish(b.partial, b.row0, a.tile, cols);
  }
  write_block(a, b.blk, b.partial, b.d0, b.cols.width);
}

template <typename scalar_t, typename RemoteSrc>
auto peers_kernel(bool deterministic) {
  return deterministic ? aggregate_rows_kernel<scalar_t, TableFetch, RemoteSrc>
                       : aggregate_blocks_kernel<scalar_t, TableFetch, RemoteSrc>;
}

// Whether the step runs the fetch-warp kernel: a get source on the proxy path (some PE not
// reachable by loads), outside deterministic mode (whose row-owned warps post their own gets).
bool fetch_warp(const Step& s, Source source, const Sources& src) {
  return source != Source::kPeerPointers && !src.p2p && !s.deterministic;
}

// Calls f(kernel, remote source) with the kernel and source the step runs with. Deterministic
// mode has no block-scope variant: it fetches at warp scope in the row-owned kernel.
template <typename scalar_t, typename F>
auto with_peers_kernel(const Step& s, Source source, const Sources& src, F&& f) {
  const bool det = s.deterministic;
  if (source == Source::kPeerPointers) return f(peers_kernel<scalar_t, PeerPointerFetch>(det), peer_pointers(src));
  if (fetch_warp(s, source, src)) {
    return f(aggregate_blocks_fetchwarp_kernel<scalar_t>, NvshmemGetFetch<GetScope::kWarp>{src.symmetric});
  }
  const auto copy_or_get = [&](auto scope) {
    constexpr GetScope kScope = decltype(scope)::value;
    const PeerCopyFetch<kScope> copy{peer_pointers(src), peer_rows_on_vec_grid(s, src)};
    if constexpr (kScope == GetScope::kBlock) {  // within a node (the proxy path took the fetch warp)
      return f(aggregate_blocks_blockget_kernel<scalar_t>, copy);
    } else {
      if (src.p2p) return f(peers_kernel<scalar_t, PeerCopyFetch<kScope>>(det), copy);
      return f(aggregate_rows_kernel<scalar_t, TableFetch, NvshmemGetFetch<kScope>>,  // deterministic, proxy path
               NvshmemGetFetch<kScope>{src.symmetric});
    }
  };
  using Thread = std::integral_constant<GetScope, GetScope::kThread>;
  using Warp = std::integral_constant<GetScope, GetScope::kWarp>;
  switch (source) {
    case Source::kGetThread:
      return copy_or_get(Thread{});
    case Source::kGetBlock:
      if (!det) return copy_or_get(std::integral_constant<GetScope, GetScope::kBlock>{});
      return copy_or_get(Warp{});
    default:
      return copy_or_get(Warp{});
  }
}

}  // namespace

std::string plan_peers_launch(const Step& s, Source source, const Sources& src, Launch* l) {
  const bool landing = source != Source::kPeerPointers;
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, src, [&](auto kernel, const auto&... /*remote*/) {
      return plan_kernel_launch<scalar_t>(s, kernel, landing, l, fetch_warp(s, source, src) ? 1 : 0);
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
