// NVSHMEM gets of source rows into a warp's shared-memory landing buffer (the MGG path; valid
// across nodes too), at thread scope (one lane per row) or warp scope (the warp per row). The
// block-scope get is a kernel of its own (peers.cu), since every thread of the block takes part.
//
// Completing a get. NVSHMEM requires nvshmem_quiet before the destination of a non-blocking get
// is read. Its device implementation (nvshmemi_quiet in non_abi/device/common/
// nvshmemi_common_device.cuh, NVSHMEM 3.4) does two different things: when the job has a
// network transport it waits for the proxy's outstanding operations; when every PE is reachable
// by loads and stores (job connectivity GPU_LDST) it issues only __threadfence_system. In that
// second case nvshmemi_get_nbi itself is a plain memcpy by the calling threads from the peer's
// heap (nvshmemi_memcpy_threadgroup), finished when the call returns, so the landed rows are in
// this warp's shared memory already and a system-scope fence per remote partition would only
// cost time: __syncwarp (which orders shared-memory accesses among the warp's lanes) is what
// makes every lane's copy visible to the others. `p2p` is true when the host found every PE
// reachable by loads (nvshmem_ptr non-null for all); otherwise complete() calls nvshmem_quiet.
#pragma once
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>

namespace mgg::kernels {

enum class GetScope { kThread, kWarp };

template <GetScope kScope>
struct NvshmemGetFetch {
  static constexpr bool kUsesLanding = true;
  const void* symmetric;  // the symmetric table: the same address names it on every PE
  bool p2p;               // every PE reachable by loads: a get has completed when it returns
  // Starts fetching columns [d0, d0 + width) of n rows into landing[i * ld], row i of the chunk
  // being (col, pe) of lane i. Every lane of the warp calls this with the same n.
  template <typename scalar_t>
  __device__ __forceinline__ void start(scalar_t* landing, int ld, int32_t my_col, int32_t my_pe, int n, int64_t dim,
                                        int64_t d0, int width, int lane) const {
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
  // Completes every get this warp issued (see the comment at the top), then lets each lane read
  // what any lane fetched.
  __device__ __forceinline__ void complete() const {
    if (!p2p) nvshmem_quiet();
    __syncwarp();
  }
};

}  // namespace mgg::kernels
