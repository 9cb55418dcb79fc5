// Where the aggregation kernel reads a source row from: a compile-time policy (MGG §5.2).
//
//   TableFetch        one table in this device's memory (the rank's own rows, a halo buffer).
//   PeerPointerFetch  each PE's table through a pointer this device can load from (nvshmem_ptr
//                     of a symmetric table, or any tensors of one process): plain loads, the
//                     intra-node fast path.
//   NvshmemGetFetch   NVSHMEM non-blocking gets of the rows into the warp's shared-memory landing
//                     buffer (the MGG path; valid across nodes too), at thread scope (one lane
//                     per row) or warp scope (the warp per row). Completed with nvshmem_quiet
//                     before any lane reads them. The block-scope get is a kernel of its own
//                     (aggregate_kernel.cuh), since every thread of the block must take part.
//
// Direct policies give `row(col, pe, dim)`; landing policies give `start(...)` and `complete()`.
#pragma once
#include <cstdint>

#ifdef MGG_WITH_NVSHMEM
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

namespace mgg {

constexpr int kMaxPes = 64;

struct TableFetch {
  static constexpr bool kUsesLanding = false;
  const void* table;  // [rows, dim]
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t /*pe*/, int64_t dim) const {
    return static_cast<const scalar_t*>(table) + static_cast<int64_t>(col) * dim;
  }
};

struct PeerPointerFetch {
  static constexpr bool kUsesLanding = false;
  const void* base[kMaxPes];  // base of each PE's table, as this device addresses it
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t pe, int64_t dim) const {
    return static_cast<const scalar_t*>(base[pe]) + static_cast<int64_t>(col) * dim;
  }
};

#ifdef MGG_WITH_NVSHMEM
enum class GetScope { kThread, kWarp };

template <GetScope kScope>
struct NvshmemGetFetch {
  static constexpr bool kUsesLanding = true;
  const void* symmetric;  // the symmetric table: the same address names it on every PE
  // Starts fetching columns [d0, d0 + width) of n rows into landing[i * ld], row i of the chunk
  // being (col, pe) of lane i. Every lane of the warp calls this with the same n.
  template <typename scalar_t>
  __device__ __forceinline__ void start(scalar_t* landing, int ld, int32_t my_col, int32_t my_pe, int n,
                                        int64_t dim, int64_t d0, int width, int lane) const {
    const scalar_t* base = static_cast<const scalar_t*>(symmetric) + d0;
    const size_t bytes = static_cast<size_t>(width) * sizeof(scalar_t);
    if constexpr (kScope == GetScope::kThread) {
      if (lane < n) nvshmem_getmem_nbi(landing + lane * ld, base + static_cast<int64_t>(my_col) * dim, bytes, my_pe);
    } else {
      for (int i = 0; i < n; ++i) {
        const int32_t col = __shfl_sync(0xffffffffu, my_col, i), pe = __shfl_sync(0xffffffffu, my_pe, i);
        nvshmemx_getmem_nbi_warp(landing + i * ld, base + static_cast<int64_t>(col) * dim, bytes, pe);
      }
    }
  }
  // Completes every get this thread issued, then lets each lane read what any lane fetched.
  __device__ __forceinline__ void complete() const {
    nvshmem_quiet();
    __syncwarp();
  }
};
#endif

}  // namespace mgg
