// NVSHMEM gets of source rows into a warp's shared-memory landing buffer (the MGG path; valid
// across nodes too), at thread scope (one lane per row) or warp scope (the warp per row). The
// kernels run these only when some PE is not reachable by loads (the proxy path); within one node
// they run fetch.cuh's PeerCopyFetch, which copies the same rows without NVSHMEM's device code.
// The CUDA ops refuse this path for now (ops/cuda/sources.cu): over a network transport
// (NVSHMEM's proxy or IBGDA) a get's local side is written by RDMA, which reaches global memory
// in NVSHMEM's heap or registered with it (nvshmemx_buffer_register), not a block's shared
// memory, so the landing buffers have to move to global memory first. The emulator runs it
// (its proxy mode models when a get lands, at nvshmem_quiet, not where it may land).
//
// Completing a get: NVSHMEM requires nvshmem_quiet before the destination of a non-blocking
// get is read; complete() quiets, then __syncwarp lets each lane read what any lane fetched.
// (Where every PE is reachable by loads, NVSHMEM's get would itself be a copy by the calling
// threads from the peer's heap, nvshmemi_memcpy_threadgroup in NVSHMEM 3.4, and its quiet a
// __threadfence_system; the kernels copy themselves there, with cp.async, and no NVSHMEM code.)
#pragma once
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>

#include "fetch.cuh"

namespace mgg::kernels {

template <GetScope kScope>
struct NvshmemGetFetch {
  static constexpr bool kUsesLanding = true;
  static constexpr bool kReadsPe = true;
  const void* symmetric;  // the symmetric table: the same address names it on every PE
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
  // Completes every get this warp issued, then lets each lane read what any lane fetched.
  __device__ __forceinline__ void complete() const {
    nvshmem_quiet();
    __syncwarp();
  }
};

}  // namespace mgg::kernels
