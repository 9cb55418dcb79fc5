// What the CUDA op files share beyond ops/device_step.h: where the kernels read each PE's table
// from under a fetch policy.
#pragma once
#include <ATen/ATen.h>

#include "../../core/limits.h"
#include "../../kernels/api.h"
#include "../device_step.h"

namespace mgg {

// Each PE's table as the kernels read it under `how` (tables[my_pe] is this PE's): peer
// pointers (direct; uva through the device-mapped addresses of pinned host tables), or the
// symmetric address for NVSHMEM gets, checked against this process's NVSHMEM. Sets *source.
kernels::Sources peer_sources(const char* op, at::TensorList tables, int64_t my_pe, Fetch how, kernels::Source* source);

}  // namespace mgg
