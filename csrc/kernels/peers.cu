// The kernels of mgg::aggregate_peers: remote rows are read from each PE's own table, row
// `offset` of PE `pe`, through the source the caller picks:
//   kPeerPointers  direct loads through peer pointers (nvshmem_ptr of a symmetric table; or, in
//                  one process, any tensors of this device, e.g. P ranks' slices of one table);
//   kGetThread     rows fetched into the warp's landing buffers, one lane per row;
//   kGetWarp       the warp per row (the MGG path);
//   kGetBlock      fetched at warp scope, as kGetWarp (the range kernel's warps share no barrier).
// Where every PE is reachable by loads (Sources::p2p: NVLink or PCIe peer access within a node)
// a fetch is mgg's asynchronous copy from the peer's table (PeerCopyFetch through nvshmem_ptr).
// Where some PE is not (the proxy path), rows are NVSHMEM gets posted by the warp that reads them;
// their device code needs more than 64 registers, so that kernel has launch bounds of its own
// (aggregate_kernel.cuh's kBoundThreads: at most 8 warps a block). Gets need NVSHMEM attached in
// this module (nvshmem/attach.cu) and the tables in its heap.
#include "fetch.cuh"
#include "launch.cuh"
#include "nvshmem_fetch.cuh"

namespace mgg::kernels {
namespace {

// Calls f(pick, remote source): pick(tile) is the range kernel of a pass (range_kernel) for the
// step's sources.
template <typename scalar_t, typename F>
auto with_peers_kernel(const Step& s, Source source, const Sources& src, F&& f) {
  const bool vec = vector_rows(s, source, src);
  if (source == Source::kPeerPointers) {
    return f([vec](int tile) { return range_kernel<scalar_t, TableFetch, PeerPointerFetch>(tile, vec); },
             peer_pointers(src));
  }
  const auto copy_or_get = [&](auto scope) {
    constexpr GetScope kScope = decltype(scope)::value;
    if (src.p2p) {
      return f([vec](int tile) { return range_kernel<scalar_t, TableFetch, PeerCopyFetch<kScope>>(tile, vec); },
               PeerCopyFetch<kScope>{peer_pointers(src), peer_rows_on_vec_grid(s, src)});
    }
    return f([vec](int tile) { return range_kernel<scalar_t, TableFetch, NvshmemGetFetch<kScope>, true>(tile, vec); },
             NvshmemGetFetch<kScope>{src.symmetric});
  };
  if (source == Source::kGetThread) return copy_or_get(std::integral_constant<GetScope, GetScope::kThread>{});
  return copy_or_get(std::integral_constant<GetScope, GetScope::kWarp>{});
}

}  // namespace

std::string plan_peers_launch(const Step& s, Source source, const Sources& src, Launch* l) {
  const bool landing = source != Source::kPeerPointers;
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, src, [&](auto pick, const auto& /*remote*/) {
      return plan_kernel_launch(s, pick, landing, sizeof(scalar_t), l);
    });
  });
}

cudaError_t launch_peers(const Step& s, Source source, const Sources& src, const Launch& l, void* out, float* carry,
                         cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_peers_kernel<scalar_t>(s, source, src, [&](auto pick, const auto& remote) {
      return run_kernel<scalar_t>(s, l, pick(l.tile), out, carry, stream, TableFetch{src.local_table}, remote);
    });
  });
}

}  // namespace mgg::kernels
