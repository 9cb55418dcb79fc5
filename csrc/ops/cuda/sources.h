// What the CUDA op files share: the kernels' storage type of an ATen dtype, and where the
// kernels read each PE's table from under a fetch policy.
#pragma once
#include <ATen/ATen.h>

#include "../../core/limits.h"
#include "../../kernels/api.h"

namespace mgg {

inline kernels::Storage storage_of(const char* op, at::ScalarType st) {
  switch (st) {
    case at::kFloat:
      return kernels::Storage::kFloat32;
    case at::kHalf:
      return kernels::Storage::kFloat16;
    case at::kBFloat16:
      return kernels::Storage::kBFloat16;
    default:
      TORCH_CHECK(false, op, ": CUDA storage must be float32, float16 or bfloat16, got ", st,
                  " (float64 is supported on the CPU only)");
  }
}

// Each PE's table as the kernels read it under `how` (tables[my_pe] is this PE's): peer
// pointers (direct; uva through the device-mapped addresses of pinned host tables), or the
// symmetric address for NVSHMEM gets, checked against this process's NVSHMEM. Sets *source.
kernels::Sources peer_sources(const char* op, at::TensorList tables, int64_t my_pe, Fetch how, kernels::Source* source);

}  // namespace mgg
