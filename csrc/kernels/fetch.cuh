// Remote-row fetch policies of the aggregation kernel (a compile-time choice, MGG §5.2):
//   TableFetch        remote rows already sit in a local device table (one rank, or the halo
//                     buffer of the halo backend): plain loads, no landing buffer.
//   PeerPointerFetch  remote rows are read through peer pointers from nvshmem_ptr (intra-node
//                     fast path): plain loads from the owner's symmetric buffer.
//   NvshmemGetFetch   remote rows are fetched with NVSHMEM non-blocking gets into the warp's
//                     shared-memory landing buffer (the MGG path; valid across nodes too), and
//                     completed with nvshmem_quiet before any lane reads them.
#pragma once
#include <cstdint>

#ifdef MGG_WITH_NVSHMEM
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

namespace mgg {

enum class GetScope { kThread, kWarp };

struct TableFetch {
  static constexpr bool kUsesLanding = false;
  const void* table;  // [rows, dim] scalar_t
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t /*pe*/, int64_t dim) const {
    return static_cast<const scalar_t*>(table) + static_cast<int64_t>(col) * dim;
  }
};

#ifdef MGG_WITH_NVSHMEM
struct PeerPointerFetch {
  static constexpr bool kUsesLanding = false;
  const void* const* peer_base;  // [num_pes] nvshmem_ptr of the symmetric table on each PE
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t pe, int64_t dim) const {
    return static_cast<const scalar_t*>(peer_base[pe]) + static_cast<int64_t>(col) * dim;
  }
};

template <GetScope kScope>
struct NvshmemGetFetch {
  static constexpr bool kUsesLanding = true;
  const void* symmetric;  // the symmetric table, same address on every PE
  // Starts the copy of columns [d0, d0 + n) of row `col` on `pe` into `dst` (shared memory).
  template <typename scalar_t>
  __device__ __forceinline__ void start(scalar_t* dst, int32_t col, int32_t pe, int64_t dim,
                                        int64_t d0, int64_t n, int lane) const {
    const scalar_t* src = static_cast<const scalar_t*>(symmetric) + static_cast<int64_t>(col) * dim + d0;
    if constexpr (kScope == GetScope::kWarp) {
      nvshmemx_getmem_nbi_warp(dst, src, n * sizeof(scalar_t), pe);
    } else {
      for (int64_t d = lane; d < n; d += 32) nvshmem_getmem_nbi(dst + d, src + d, sizeof(scalar_t), pe);
    }
  }
  // Completes every get this thread started; the warp then synchronises so that each lane
  // may read what any lane fetched.
  __device__ __forceinline__ void complete() const {
    nvshmem_quiet();
    __syncwarp();
  }
};
#endif

}  // namespace mgg
