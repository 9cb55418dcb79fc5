// The emulated device of the test extension's ops (torch_ops.cpp, torch_attention.cpp): what the
// shared op bodies (ops/device_step.h, ops/device_attention.h) ask of a device, answered on CPU
// tensors with the SIMT emulator running every launch.
#pragma once
#include <simt.h>

#include <limits>
#include <mutex>

#include "../../ops/device_step.h"

namespace mgg {

struct Emulated {
  struct Guard {
    explicit Guard(const at::Device& /*device*/) {}
  };
  // Outputs start as NaN, so an element no thread writes shows (as uninitialised device memory).
  static at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return at::full(sizes, std::numeric_limits<float>::quiet_NaN(), options);
  }
  // Peer pointers (direct): check_fetch refuses the other fetch policies on CPU tensors.
  static kernels::Sources peers(const char* /*op*/, at::TensorList tables, int64_t my_pe, Fetch how,
                                kernels::Source* source) {
    *source = source_of(how);
    return direct_sources(tables, my_pe);
  }
  // One launch at a time in the process: the emulator's scheduler is not reentrant, and tests run
  // PEs as threads (tests/test_nvshmem_runtime.py). A launch never waits on another thread.
  static inline std::mutex launches;  // one for every instantiation of launch()
  template <typename Run>
  static void launch(const char* op, Run&& run) {
    const std::lock_guard<std::mutex> one_launch(launches);
    const cudaError_t e = run(nullptr);
    TORCH_CHECK(e == cudaSuccess, op, " (emulated): ", cudaGetErrorString(e), "\n", simt::last_report());
  }
};

}  // namespace mgg
