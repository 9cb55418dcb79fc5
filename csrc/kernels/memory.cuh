// The kernels' memory access sites, named for counting (issue 31): beside each access, every
// lane of the warp states the address it accesses and whether it is active at that instruction.
// Under nvcc they are nothing, so the compiled code is unchanged; under the SIMT emulator
// (simt.h defines MGG_SIMT) they feed its counters (csrc/tests/simt/counters.cpp), which
// assemble the warp's instruction at a site from the k-th report of each lane:
// - MGG_GLOBAL_LOAD(pointer, active): a global load; its requests, 32-byte sectors, active
//   lanes and bytes are counted (tests/kernels/test_emulator_counters.py, bench counters).
// - MGG_SHARED_LOAD / MGG_SHARED_STORE / MGG_SHARED_ATOMIC(pointer, active): a shared-memory
//   access; its requests and the wavefronts it needs (32 banks of 4-byte words: per bank the
//   distinct words the active lanes touch, the most of any bank; for an atomic, lanes on one
//   word serialise too, so every lane's word counts) are counted, so wavefronts per request is
//   the access's bank-conflict degree (1: none).
//
// And the asynchronous copies from global to shared memory (cp.async, sm_80 on; the fetch of
// peer rows into a landing buffer, fetch.cuh's PeerCopyFetch): the data goes to shared memory
// without passing through registers, and the thread runs on until it waits.
// - MGG_COPY_ASYNC16(dst, src): starts a copy of 16 bytes, both addresses on a 16-byte boundary
//   (cp.async.cg: cached in L2 only; a plain copy below sm_80).
// - MGG_WAIT_ASYNC(): waits for every copy the calling thread started; another lane's copies are
//   its own, so readers of a landing buffer need the copying lanes' waits and then a barrier.
// In the emulator (csrc/tests/simt/async_copy.cpp) a copy's destination is NaN until its thread
// waits, and a copy never waited for is reported when its block ends.
//
// And the cache hints of the aggregation's accesses (plain accesses in the emulator):
// - load_row(p): a 16-byte piece of a source row, which the kernel never writes and other warps
//   read again: through the read-only path (ld.global.nc), kept in L1 and L2;
// - load_stream(p): the plan's streams (column ids, weights, PEs, row pointers, ranges), read
//   once: evict-first (ld.global.cs), so they do not push source rows out of L2;
// - store_stream(p, v): an output or carry row, written once: evict-first (st.global.cs).
#pragma once
#include <cstdint>

#ifdef MGG_SIMT
#define MGG_GLOBAL_LOAD(ptr, active) ::simt::global_load((ptr), sizeof(*(ptr)), (active))
#define MGG_SHARED_LOAD(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kLoad)
#define MGG_SHARED_STORE(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kStore)
#define MGG_SHARED_ATOMIC(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kAtomic)
#define MGG_COPY_ASYNC16(dst, src) ::simt::async_copy((dst), (src), 16)
#define MGG_WAIT_ASYNC() ::simt::async_wait()

namespace mgg::kernels {
template <typename T>
inline T load_row(const T* p) {
  return *p;
}
template <typename T>
inline T load_stream(const T* p) {
  return *p;
}
template <typename T>
inline void store_stream(T* p, const T& v) {
  *p = v;
}
}  // namespace mgg::kernels
#else
#define MGG_GLOBAL_LOAD(ptr, active) static_cast<void>(0)
#define MGG_SHARED_LOAD(ptr, active) static_cast<void>(0)
#define MGG_SHARED_STORE(ptr, active) static_cast<void>(0)
#define MGG_SHARED_ATOMIC(ptr, active) static_cast<void>(0)
#define MGG_COPY_ASYNC16(dst, src) ::mgg::kernels::copy_async16((dst), (src))
#define MGG_WAIT_ASYNC() ::mgg::kernels::wait_async()

namespace mgg::kernels {

__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}

__device__ __forceinline__ void wait_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

template <typename T>
__device__ __forceinline__ T load_row(const T* p) {
  return __ldg(p);
}
// int64_t is long here; the intrinsics take long long.
__device__ __forceinline__ int64_t load_stream(const int64_t* p) {
  return static_cast<int64_t>(__ldcs(reinterpret_cast<const long long*>(p)));
}
template <typename T>
__device__ __forceinline__ T load_stream(const T* p) {
  return __ldcs(p);
}
template <typename T>
__device__ __forceinline__ void store_stream(T* p, const T& v) {
  __stcs(p, v);
}

}  // namespace mgg::kernels
#endif
