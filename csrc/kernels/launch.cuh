// Host side of the kernels, torch-free: the launch shape of a step for the compiled kernel and
// the device (threads and static shared memory from cudaFuncGetAttributes, the dynamic
// shared-memory budget from the device's opt-in limit), and the launch itself on a stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <string>

#include "../core/launch_shape.h"
#include "aggregate_kernel.cuh"
#include "device_launch.cuh"

namespace mgg::kernels {

// Calls f(scalar_t{}) with the device storage type of s.
template <typename F>
auto with_storage(Storage s, F&& f) {
  switch (s) {
    case Storage::kFloat16:
      return f(__half{});
    case Storage::kBFloat16:
      return f(__nv_bfloat16{});
    default:
      return f(float{});
  }
}

inline std::string cuda_message(const char* what, cudaError_t e) {
  return std::string(what) + " failed: " + cudaGetErrorString(e);
}

template <typename scalar_t>
KernelArgs<scalar_t> kernel_args(const Step& s, const Launch& l, void* out, float* carry) {
  return {s.local,    s.remote, s.ranges, s.fixups,       s.num_warps,  s.num_fixups,
          s.num_rows, s.dim,    l.tile,   l.landing_rows, s.interleave, static_cast<scalar_t*>(out),
          carry};
}

// The range kernel of a pass of `tile` columns: 8 fp32 columns per lane (V = 2) for passes wider
// than 128 fp32 columns, else one 16-byte piece of a row per lane (V = 1); vec: every row the launch
// reads lies on the 16-byte grid (vector_rows), so lanes read 16-byte pieces, else a column per
// load. Every variant has the same parameters, so the result is one function pointer type.
template <typename scalar_t, typename LocalSrc, typename RemoteSrc, bool kNvshmemGets = false>
auto range_kernel(int tile, bool vec) {
  const auto pick = [&](auto v) {
    constexpr int V = decltype(v)::value;
    return vec ? &aggregate_ranges_kernel<scalar_t, V, true, LocalSrc, RemoteSrc, kNvshmemGets>
               : &aggregate_ranges_kernel<scalar_t, V, false, LocalSrc, RemoteSrc, kNvshmemGets>;
  };
  if constexpr (sizeof(scalar_t) == 4) {
    if (tile > kWarp * kVecBytes / 4) return pick(std::integral_constant<int, 2>{});
  }
  return pick(std::integral_constant<int, 1>{});
}

inline bool on_vec_grid(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0; }

// Every PE's table (src.peers) starts on a kVecBytes boundary.
inline bool peers_on_vec_grid(const Sources& src) {
  for (const void* p : src.peers) {
    if (!on_vec_grid(p)) return false;
  }
  return true;
}
// Every row of every PE's table starts on a kVecBytes boundary: the row stride (dim elements) is
// a multiple of kVecBytes and so is every table's start. Peer pointers read in place, and the
// copies of fetch.cuh's PeerCopyFetch, take kVecBytes at a time where it holds.
inline bool peer_rows_on_vec_grid(const Step& s, const Sources& src) {
  return s.dim * static_cast<int64_t>(storage_bytes(s.storage)) % kVecBytes == 0 && peers_on_vec_grid(src);
}

// Whether the aggregation kernels read source rows with kVecBytes loads (LaneCols): every row
// the launch reads in place starts on a kVecBytes boundary, i.e. the row stride (dim elements)
// is a multiple of kVecBytes and every table read from `source` starts on one. Rows landed in
// shared memory by gets or copies always do (buffers of whole tiles), and a column tile is a
// multiple of 32 columns, so each tile's first column is aligned wherever its row is.
inline bool vector_rows(const Step& s, Source source, const Sources& src) {
  if (s.dim * static_cast<int64_t>(storage_bytes(s.storage)) % kVecBytes != 0) return false;
  if (!on_vec_grid(src.local_table)) return false;
  if (source == Source::kTable) return on_vec_grid(src.remote_table);
  if (source == Source::kPeerPointers) return peers_on_vec_grid(src);  // the row stride: above
  return true;
}

// What a launch of `kernel` must respect on the current device: its attributes (threads, static
// shared memory) and the device's opt-in shared memory per block. Empty message: both known; a
// build without this GPU's arch says how to rebuild.
template <typename Kernel>
std::string kernel_limits(Kernel kernel, cudaFuncAttributes* attr, int* optin) {
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return cuda_message("cudaGetDevice", e);
  e = cudaFuncGetAttributes(attr, kernel);
  if (e == cudaErrorInvalidDeviceFunction || e == cudaErrorNoKernelImageForDevice) {
    cudaGetLastError();  // clears this (non-sticky) error so later CUDA calls do not report it
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    const std::string cc = std::to_string(major) + "." + std::to_string(minor);
    return "this mgg build has no kernel for this GPU (compute capability " + cc +
           "): reinstall with TORCH_CUDA_ARCH_LIST=\"" + cc + "\" (`mgg info` lists the archs this build has)";
  }
  if (e != cudaSuccess) return cuda_message("cudaFuncGetAttributes", e);
  e = cudaDeviceGetAttribute(optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return cuda_message("cudaDeviceGetAttribute", e);
  return {};
}

// Threads of wpb warps within what the compiled `kernel` allows. Empty message: they do.
template <typename Kernel>
std::string check_threads(const Step& s, Kernel kernel, int* threads) {
  cudaFuncAttributes attr{};
  int optin = 0;
  const std::string limits = kernel_limits(kernel, &attr, &optin);
  if (!limits.empty()) return limits;
  *threads = static_cast<int>(s.wpb) * kWarp;
  if (*threads > attr.maxThreadsPerBlock) {
    return "warps_per_block " + std::to_string(s.wpb) + " needs " + std::to_string(*threads) +
           " threads per block, but this kernel (" + std::to_string(attr.numRegs) +
           " registers per thread) launches at most " + std::to_string(attr.maxThreadsPerBlock) +
           ": lower warps_per_block";
  }
  return {};
}

// The launch of a range kernel for step s, `pick(tile)` giving the kernel of a pass (range_kernel):
// a pass whose landing buffers (landing: remote rows fetched into shared memory) fit beside the
// kernels' static shared memory, wpb warps per block within what the pass's kernel allows, and
// the grid. Empty message: it fits.
template <typename Pick>
std::string plan_kernel_launch(const Step& s, Pick pick, bool landing, size_t elem, Launch* l) {
  cudaFuncAttributes attr{};
  int optin = 0;
  std::string limits = kernel_limits(pick(kWarp), &attr, &optin);  // every pass's kernel: the same static smem
  if (!limits.empty()) return limits;
  l->landing_rows = landing ? static_cast<int>(s.landing_rows) : 0;
  const size_t dynamic = static_cast<size_t>(optin) > attr.sharedSizeBytes ? optin - attr.sharedSizeBytes : 0;
  l->tile = choose_tile(s.dim, s.wpb, l->landing_rows, elem, dynamic);
  if (l->tile == 0) {
    return "a block of " + std::to_string(s.wpb) + " warps needs " +
           std::to_string(smem_bytes(s.wpb, kWarp, l->landing_rows, elem)) +
           " bytes of shared memory for its landing buffers even with 32-column passes, over the " +
           std::to_string(dynamic) + " this GPU leaves beside the kernel's " + std::to_string(attr.sharedSizeBytes) +
           " static bytes: lower warps_per_block or ps";
  }
  const int64_t tiles = ceil_div(s.dim, l->tile);
  if (tiles > kMaxGridY) return "dim " + std::to_string(s.dim) + " needs more than 65535 column passes";
  const int64_t x = ceil_div(s.num_warps, s.wpb);
  if (x > 0x7fffffff) return std::to_string(x) + " thread blocks exceed the grid limit (2^31 - 1)";
  limits = check_threads(s, pick(l->tile), &l->threads);
  if (!limits.empty()) return limits;
  l->blocks_x = static_cast<unsigned>(x);
  l->blocks_y = static_cast<unsigned>(tiles);
  l->smem = smem_bytes(s.wpb, l->tile, l->landing_rows, elem);
  return {};
}

// The launch of a kernel with one warp per output row (aggregate_extreme_kernel): wpb rows to a
// block, passes of up to kMaxTile columns, no dynamic shared memory. Empty message: it fits.
template <typename Kernel>
std::string plan_extreme_kernel_launch(const Step& s, Kernel kernel, Launch* l) {
  const std::string limits = check_threads(s, kernel, &l->threads);
  if (!limits.empty()) return limits;
  l->landing_rows = 0;
  l->tile = choose_tile(s.dim, s.wpb, 0, 0, std::numeric_limits<size_t>::max());  // no shared memory to fit
  const int64_t tiles = ceil_div(s.dim, l->tile);
  if (tiles > kMaxGridY) return "dim " + std::to_string(s.dim) + " needs more than 65535 column passes";
  const int64_t x = ceil_div(s.num_rows, s.wpb);
  if (x > 0x7fffffff) return std::to_string(x) + " thread blocks exceed the grid limit (2^31 - 1)";
  l->blocks_x = static_cast<unsigned>(x);
  l->blocks_y = static_cast<unsigned>(tiles);
  l->smem = 0;
  return {};
}

// Launches `kernel` with the planned shape, raising its shared-memory limit where needed, then the
// fixups of the split rows, on `stream`.
template <typename scalar_t, typename Kernel, typename... Args>
cudaError_t run_kernel(const Step& s, const Launch& l, Kernel kernel, void* out, float* carry, cudaStream_t stream,
                       const Args&... args) {
  const KernelArgs<scalar_t> a = kernel_args<scalar_t>(s, l, out, carry);
  if (l.blocks_x > 0) {
    if (l.smem > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
      if (e != cudaSuccess) return e;
    }
    MGG_LAUNCH(dim3(l.blocks_x, l.blocks_y), l.threads, l.smem, stream, kernel)(a, args...);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (s.num_fixups > 0) {
    constexpr int kFixupWarps = 8;
    const dim3 grid(static_cast<unsigned>(ceil_div(s.num_fixups, kFixupWarps)));
    MGG_LAUNCH(grid, kFixupWarps * kWarp, 0, stream, aggregate_fixup_kernel<scalar_t>)(a);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace mgg::kernels
