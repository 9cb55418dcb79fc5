// The CUDA runtime calls of the launchers, answered as one H100 (SXM5, compute capability 9.0)
// would: the device attributes, each kernel's attributes, the shared-memory opt-in that a
// launch of more than 48 KB of dynamic shared memory needs, and the sticky last error.
#include <map>
#include <string>

#include "simt.h"

namespace simt {
namespace {

// The device's limits are simt.h's (an H100's).
// What every emulated kernel states about itself (nvcc's numbers are not known here): the
// widest block an mgg kernel launches (its 512-thread launch bound, and one warp more for the
// proxy path's fetch warp, peers.cu's aggregate_blocks_fetchwarp_kernel), a register count that
// allows it, and the largest static shared memory an mgg kernel declares
// (aggregate_blocks_blockget: 16 x 3 int64).
constexpr int kKernelMaxThreads = 512 + 32;
constexpr int kKernelRegisters = 64;
constexpr size_t kKernelStaticShared = 16 * 3 * 8;

cudaError_t last_error = cudaSuccess;
std::map<const void*, int> optin;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize

}  // namespace

void set_last_error(cudaError_t e) { last_error = e; }

cudaError_t launch_limits(const void* kernel, dim3 grid, dim3 block, size_t smem, std::string* why) {
  const unsigned threads = block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || threads == 0 ||
      threads > kMaxThreads) {
    *why = "grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
           ") or block of " + std::to_string(threads) + " threads out of range";
    return cudaErrorInvalidConfiguration;
  }
  if (threads > static_cast<unsigned>(kKernelMaxThreads)) {
    *why = std::to_string(threads) + " threads exceed the kernel's launch bound";
    return cudaErrorInvalidValue;
  }
  const auto it = optin.find(kernel);
  const size_t allowed = it == optin.end() ? kSharedPerBlock : static_cast<size_t>(it->second);
  if (smem > allowed) {
    *why = std::to_string(smem) + " bytes of dynamic shared memory without an opt-in of as many (" +
           std::to_string(allowed) + ")";
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace simt

using simt::last_error;

extern "C" {

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = simt::kSms;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = simt::kSharedPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = simt::kSharedOptin;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = simt::kSharedPerSm;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = simt::kRegistersPerBlock;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = simt::kMaxThreads;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* /*kernel*/) {
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = simt::kKernelMaxThreads;
  attr->numRegs = simt::kKernelRegisters;
  attr->sharedSizeBytes = simt::kKernelStaticShared;
  attr->maxDynamicSharedSizeBytes = simt::kSharedPerBlock;
  attr->ptxVersion = attr->binaryVersion = 90;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) + simt::kKernelStaticShared > simt::kSharedOptin) {
    return last_error = cudaErrorInvalidValue;
  }
  simt::optin[kernel] = value;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (simt: see the emulator's report)";
    default:
      return "simt: an error of the emulated runtime";
  }
}

}  // extern "C"
