// Where the aggregation kernels read a source row from: a compile-time policy (MGG §5.2).
//
//   TableFetch        one table in this device's memory (the rank's own rows, a halo buffer).
//   PeerPointerFetch  each PE's table through a pointer this device can load from (nvshmem_ptr
//                     of a symmetric table, or any tensors of one process): plain loads, the
//                     intra-node fast path.
//   PeerCopyFetch     the same pointers, rows copied into a landing buffer in shared memory with
//                     asynchronous copies: the NVSHMEM-get sources within one node (below).
//   NvshmemGetFetch   NVSHMEM gets into shared memory (nvshmem_fetch.cuh; only the kernels'
//                     .cu files include NVSHMEM's device headers): the proxy path, where some
//                     PE is not reachable by loads (across nodes).
//
// Direct policies give `row(col, pe, dim)` (kReadsPe: whether it reads pe); landing policies give
// `start(...)` and `complete()`.
#pragma once
#include <cstdint>

#include "../core/limits.h"
#include "api.h"
#include "memory.cuh"

namespace mgg::kernels {

// Which threads fetch a row into a landing buffer: one lane per row, or the warp per row. (The
// get-block policy fetches at warp scope: the range kernel's warps are independent, with no block
// barrier to share a fetch at.)
enum class GetScope { kThread, kWarp };

// The offset of row col of a table of `dim` columns: both below 2^31 (the op checks the columns'
// range and x's shape), so one 32 x 32 -> 64-bit multiply.
__device__ __forceinline__ uint64_t row_offset(int32_t col, int64_t dim) {
  return static_cast<uint64_t>(static_cast<uint32_t>(col)) * static_cast<uint32_t>(dim);
}

struct TableFetch {
  static constexpr bool kUsesLanding = false;
  static constexpr bool kReadsPe = false;  // row() ignores the PE (the kernels need not pass it)
  const void* table;                       // [rows, dim]
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t /*pe*/, int64_t dim) const {
    return static_cast<const scalar_t*>(table) + row_offset(col, dim);
  }
};

struct PeerPointerFetch {
  static constexpr bool kUsesLanding = false;
  static constexpr bool kReadsPe = true;
  const void* base[kMaxPes];  // base of each PE's table, as this device addresses it
  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t pe, int64_t dim) const {
    return static_cast<const scalar_t*>(base[pe]) + row_offset(col, dim);
  }
};

// Each PE's table through src.peers (host side).
inline PeerPointerFetch peer_pointers(const Sources& src) {
  PeerPointerFetch peer{};
  for (int i = 0; i < kMaxPes; ++i) peer.base[i] = src.peers[i];
  return peer;
}

// The NVSHMEM-get sources when every PE is reachable by loads (Sources::p2p: NVLink or PCIe
// peer access within a node; peers.cu picks it then). A get there is a copy by the calling
// threads from the peer's memory anyway (nvshmem_fetch.cuh); this one is mgg's own: each lane
// starts 16-byte asynchronous copies (MGG_COPY_ASYNC16: cp.async) of the peer row's columns
// straight into the landing buffer, so the data holds no registers while it is in flight and
// the warp aggregates its local partition meanwhile (MGG's overlap); complete() waits. The
// kernels then need no more registers than with a direct source. Rows off the 16-byte grid
// (`aligned` false: a base or the row stride not a multiple of 16 bytes) are copied an element
// at a time with plain loads and stores, finished when start() returns.
template <GetScope kScope>
struct PeerCopyFetch {
  static constexpr bool kUsesLanding = true;
  static constexpr bool kReadsPe = true;
  PeerPointerFetch peers;  // where each PE's rows are read from
  bool aligned;            // every base and the row stride on a kVecBytes boundary

  template <typename scalar_t>
  __device__ __forceinline__ const scalar_t* row(int32_t col, int32_t pe, int64_t dim) const {
    return peers.row<scalar_t>(col, pe, dim);
  }
  // Elements of a copy: kVecBytes of them when aligned, else one.
  template <typename scalar_t>
  __device__ __forceinline__ int unit() const {
    return aligned ? kVecBytes / static_cast<int>(sizeof(scalar_t)) : 1;
  }
  // One copy of unit() elements from src to dst (shared memory); `active` false: none (the lane
  // still reports at the counted sites, kernels/memory.cuh).
  template <typename scalar_t>
  __device__ __forceinline__ void copy(scalar_t* dst, const scalar_t* src, bool active) const {
    if (aligned) {
      MGG_GLOBAL_LOAD(reinterpret_cast<const uint4*>(src), active);
      if (active) MGG_COPY_ASYNC16(dst, src);
    } else {
      MGG_GLOBAL_LOAD(src, active);
      if (active) *dst = *src;
    }
  }

  // Starts copying columns [d0, d0 + width) of n rows into landing[i * ld], row i of the chunk
  // being (col, pe) of lane i. Every lane of the warp calls this with the same n.
  template <typename scalar_t>
  __device__ __forceinline__ void start(scalar_t* landing, int ld, int32_t my_col, int32_t my_pe, int n, int64_t dim,
                                        int64_t d0, int width, int lane) const {
    const int u = unit<scalar_t>(), per_row = (width + u - 1) / u;  // aligned: width is a multiple of u
    if constexpr (kScope == GetScope::kThread) {                    // lane i copies row i
      const scalar_t* src = row<scalar_t>(my_col, my_pe, dim) + d0;
      for (int k = 0; k < per_row; ++k) copy(landing + lane * ld + k * u, src + k * u, lane < n);
    } else {  // lane groups of g lanes (per_row rounded up to a power of two, at most 32) copy a row each
      int shift = 0;
      while ((1 << shift) < per_row && shift < 5) ++shift;
      const int g = 1 << shift, sub = lane >> shift, slot = lane & (g - 1);
      for (int i0 = 0; i0 < n; i0 += 32 >> shift) {  // uniform across the warp
        const int i = i0 + sub < n ? i0 + sub : n - 1;
        const int32_t col = __shfl_sync(0xffffffffu, my_col, i), pe = __shfl_sync(0xffffffffu, my_pe, i);
        const scalar_t* src = row<scalar_t>(col, pe, dim) + d0;
        for (int k0 = 0; k0 < per_row; k0 += g) {  // uniform
          const int k = k0 + slot;
          copy(landing + i * ld + k * u, src + k * u, i0 + sub < n && k < per_row);
        }
      }
    }
  }
  // Waits for this lane's copies, then lets each lane read what any lane copied.
  __device__ __forceinline__ void complete() const {
    MGG_WAIT_ASYNC();
    __syncwarp();
  }
};

}  // namespace mgg::kernels
