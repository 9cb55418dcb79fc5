// Where the aggregation kernels read a source row from: a compile-time policy (MGG §5.2).
//
//   TableFetch        one table in this device's memory (the rank's own rows, a halo buffer).
//   PeerPointerFetch  each PE's table through a pointer this device can load from (nvshmem_ptr
//                     of a symmetric table, or any tensors of one process): plain loads, the
//                     intra-node fast path.
//   NvshmemGetFetch   NVSHMEM gets into shared memory (nvshmem_fetch.cuh; only peers.cu
//                     includes NVSHMEM's device headers).
//
// Direct policies give `row(col, pe, dim)` (kReadsPe: whether it reads pe); landing policies give `start(...)` and
// `complete()`.
#pragma once
#include <cstdint>

#include "../core/limits.h"

namespace mgg::kernels {

struct TableFetch {
  static constexpr bool kUsesLanding = false;
  static constexpr bool kReadsPe = false;  // row() ignores the PE (the kernels need not pass it)
  const void* table;                       // [rows, dim]
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t /*pe*/, int64_t dim) const {
    return static_cast<const scalar_t*>(table) + static_cast<int64_t>(col) * dim;
  }
};

struct PeerPointerFetch {
  static constexpr bool kUsesLanding = false;
  static constexpr bool kReadsPe = true;
  const void* base[kMaxPes];  // base of each PE's table, as this device addresses it
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t pe, int64_t dim) const {
    return static_cast<const scalar_t*>(base[pe]) + static_cast<int64_t>(col) * dim;
  }
};

}  // namespace mgg::kernels
