// Host side of GAT's attention kernels (attention_kernel.cuh): one warp per row, wpb warps per
// block, a grid.y slice per group of whole heads; the kernel and remote-row policy for each
// pass and Source (gets are mgg's asynchronous copies within a node, as the aggregation's are,
// and NVSHMEM's gets on the proxy path; block-scope gets are served at warp scope: a warp owns
// its row, so the block's warps do not walk their rows together); launch shapes checked
// against the compiled kernel and the device, in one line.
#include "attention_kernel.cuh"
#include "launch.cuh"
#include "nvshmem_fetch.cuh"

namespace mgg::kernels {
namespace {

bool lands(Source s) { return s == Source::kGetThread || s == Source::kGetWarp || s == Source::kGetBlock; }

int heads_per_tile(const Attention& a) {
  const int64_t n = kMaxTile / a.channels;
  return static_cast<int>(n < a.heads ? n : a.heads);
}

// A pass's source rows: elements per head (C + 1: x' then a_src; terms: C + kTermFields) and
// bytes per element (terms are fp32).
int64_t per_head(const Attention& a, AttentionPass pass) {
  return a.channels + (pass == AttentionPass::kSrc ? kTermFields : 1);
}
int64_t source_elem(const Attention& a, AttentionPass pass) {
  return pass == AttentionPass::kSrc ? 4 : static_cast<int64_t>(storage_bytes(a.storage));
}

// Whether every slice a warp copies starts on a kVecBytes boundary, in the peer's table and in
// the landing rows: the tables' starts, the row stride (heads per-head runs) and a tile's
// stride (heads_per_tile of them; every slice starts at a multiple of it and ends at one or at
// the row's end).
bool copies_on_vec_grid(const Attention& a, AttentionPass pass, const Sources& src) {
  const int64_t run = per_head(a, pass) * source_elem(a, pass);
  return peers_on_vec_grid(src) && a.heads * run % kVecBytes == 0 && heads_per_tile(a) * run % kVecBytes == 0;
}

// Calls f(remote policy) for a source: gets are mgg's asynchronous copies where every PE is
// reachable by loads (src.p2p), NVSHMEM's gets otherwise, at warp scope for kGetBlock.
template <typename F>
auto with_remote(const Attention& a, AttentionPass pass, Source source, const Sources& src, F&& f) {
  const auto copy_or_get = [&](auto scope) {
    constexpr GetScope kScope = decltype(scope)::value;
    if (src.p2p) return f(PeerCopyFetch<kScope>{peer_pointers(src), copies_on_vec_grid(a, pass, src)});
    return f(NvshmemGetFetch<kScope>{src.symmetric});
  };
  switch (source) {
    case Source::kTable:
      return f(TableFetch{src.remote_table});
    case Source::kGetThread:
      return copy_or_get(std::integral_constant<GetScope, GetScope::kThread>{});
    case Source::kGetWarp:
    case Source::kGetBlock:
      return copy_or_get(std::integral_constant<GetScope, GetScope::kWarp>{});
    default:
      return f(peer_pointers(src));
  }
}

template <typename scalar_t, typename Remote>
const void* kernel_of(AttentionPass pass) {
  switch (pass) {
    case AttentionPass::kDst:
      return reinterpret_cast<const void*>(attend_dst_kernel<scalar_t, Remote>);
    case AttentionPass::kSrc:
      return reinterpret_cast<const void*>(attend_src_kernel<scalar_t, Remote>);
    default:
      return reinterpret_cast<const void*>(attend_kernel<scalar_t, Remote>);
  }
}

// The launch's arguments and its shape (l: blocks, threads, smem).
AttentionArgs args_of(const Attention& a, AttentionPass pass, Source source) {
  AttentionArgs r{};
  r.local = a.local;
  r.remote = a.remote;
  r.rows = a.rows;
  r.heads = static_cast<int>(a.heads);
  r.channels = static_cast<int>(a.channels);
  r.heads_per_tile = heads_per_tile(a);
  r.landing = lands(source) ? kAttentionLanding : 0;
  r.ld = r.heads_per_tile * static_cast<int>(per_head(a, pass));
  const int64_t bytes = (kMaxTile + kMaxHeads) * 4 + static_cast<int64_t>(r.landing) * r.ld * source_elem(a, pass);
  r.warp_bytes = (bytes + 15) / 16 * 16;
  r.slope = a.slope;
  r.dropout = a.dropout;
  r.seed = a.seed;
  r.ids = a.ids;
  return r;
}

}  // namespace

std::string plan_attention_launch(const Attention& a, AttentionPass pass, Source source, const Sources& src,
                                  Launch* l) {
  if (a.channels > kMaxTile) {
    return "attention heads of " + std::to_string(a.channels) + " channels exceed the kernels' " +
           std::to_string(kMaxTile) + " columns per slice";
  }
  return with_storage(a.storage, [&](auto zero) -> std::string {
    using scalar_t = decltype(zero);
    return with_remote(a, pass, source, src, [&](auto remote) -> std::string {
      using Remote = decltype(remote);
      cudaFuncAttributes attr{};
      int optin = 0;
      const std::string limits = kernel_limits(kernel_of<scalar_t, Remote>(pass), &attr, &optin);
      if (!limits.empty()) return limits;
      const AttentionArgs args = args_of(a, pass, source);
      l->threads = static_cast<int>(a.wpb) * kWarp;
      if (l->threads > attr.maxThreadsPerBlock) {
        return "warps_per_block " + std::to_string(a.wpb) + " exceeds this kernel's " +
               std::to_string(attr.maxThreadsPerBlock) + " threads per block: lower warps_per_block";
      }
      l->smem = static_cast<size_t>(a.wpb * args.warp_bytes);
      if (l->smem + attr.sharedSizeBytes > static_cast<size_t>(optin)) {
        return "an attention block of " + std::to_string(a.wpb) + " warps needs " + std::to_string(l->smem) +
               " bytes of shared memory, over the " + std::to_string(optin) + " this GPU allows: lower warps_per_block";
      }
      const int64_t blocks = ceil_div(a.rows, a.wpb);
      if (blocks > 0x7fffffff) return std::to_string(blocks) + " thread blocks exceed the grid limit (2^31 - 1)";
      l->blocks_x = static_cast<unsigned>(blocks);
      l->blocks_y = static_cast<unsigned>(ceil_div(a.heads, args.heads_per_tile));
      l->tile = args.heads_per_tile * static_cast<int>(a.channels);
      l->landing_rows = args.landing;
      return {};
    });
  });
}

namespace {

// Launches pass `pass` with its kernel for the source, raising the shared-memory limit where needed.
template <typename Launcher>
cudaError_t run_attention(const Attention& a, AttentionPass pass, Source source, const Sources& src, const Launch& l,
                          Launcher&& launch) {
  if (l.blocks_x == 0) return cudaSuccess;
  return with_storage(a.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return with_remote(a, pass, source, src, [&](auto remote) {
      using Remote = decltype(remote);
      if (l.smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(
            kernel_of<scalar_t, Remote>(pass), cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
        if (e != cudaSuccess) return e;
      }
      launch(zero, remote, args_of(a, pass, source), dim3(l.blocks_x, l.blocks_y));
      return cudaGetLastError();
    });
  });
}

}  // namespace

cudaError_t launch_attend(const Attention& a, Source source, const Sources& src, const Launch& l, const void* a_dst,
                          void* out, float* stats, cudaStream_t stream) {
  return run_attention(a, AttentionPass::kForward, source, src, l, [&](auto zero, auto remote, auto args, dim3 grid) {
    using scalar_t = decltype(zero);
    MGG_LAUNCH(grid, l.threads, l.smem, stream, attend_kernel<scalar_t, decltype(remote)>)
    (args, TableFetch{src.local_table}, remote, static_cast<const scalar_t*>(a_dst), static_cast<scalar_t*>(out),
     stats);
  });
}

cudaError_t launch_attend_dst(const Attention& a, Source source, const Sources& src, const Launch& l,
                              const float* terms, void* d_dst, cudaStream_t stream) {
  return run_attention(a, AttentionPass::kDst, source, src, l, [&](auto zero, auto remote, auto args, dim3 grid) {
    using scalar_t = decltype(zero);
    MGG_LAUNCH(grid, l.threads, l.smem, stream, attend_dst_kernel<scalar_t, decltype(remote)>)
    (args, TableFetch{src.local_table}, remote, terms, static_cast<scalar_t*>(d_dst));
  });
}

cudaError_t launch_attend_src(const Attention& a, Source source, const Sources& src, const Launch& l, const void* own,
                              void* grad, cudaStream_t stream) {
  return run_attention(a, AttentionPass::kSrc, source, src, l, [&](auto zero, auto remote, auto args, dim3 grid) {
    using scalar_t = decltype(zero);
    MGG_LAUNCH(grid, l.threads, l.smem, stream, attend_src_kernel<scalar_t, decltype(remote)>)
    (args, TableFetch{src.local_table}, remote, static_cast<const scalar_t*>(own), static_cast<scalar_t*>(grad));
  });
}

}  // namespace mgg::kernels
