// The GPU as the shared op bodies (ops/device_aggregate.h, ops/device_attention.h) see it: the
// call's device made current, outputs by at::empty, peers' tables by fetch policy (sources.h),
// launches on the current stream with their error checked.
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "sources.h"

namespace mgg {

struct Cuda {
  using Guard = c10::cuda::CUDAGuard;
  static at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) { return at::empty(sizes, options); }
  static int64_t fetch_for_checks(const char* /*op*/, int64_t fetch) { return fetch; }
  static kernels::Sources peers(const char* op, at::TensorList tables, int64_t my_pe, Fetch how,
                                kernels::Source* source) {
    return peer_sources(op, tables, my_pe, how, source);
  }
  template <typename Run>
  static void launch(const char* /*op*/, Run&& run) {
    C10_CUDA_CHECK(run(at::cuda::getCurrentCUDAStream().stream()));
  }
};

}  // namespace mgg
