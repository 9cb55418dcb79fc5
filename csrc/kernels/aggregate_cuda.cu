// CUDA implementation of mgg::aggregate: the kernels of aggregate_kernel.cuh with both parts
// read from tables in this device's memory (the rank's own rows and, for remote neighbors, the
// halo buffer; one rank has no remote part).
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aggregate_kernel.cuh"

namespace mgg {
namespace {

at::Tensor aggregate_cuda(MGG_AGGREGATE_PARAMS) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CheckedCall c = check_aggregate_call(MGG_AGGREGATE_ARGS);
  const cuda::CallBuffers b(x, c);
  if (b.empty()) return b.out;
  cuda::dispatch_storage(c.op, x.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    cuda::launch_aggregate(cuda::make_launch<scalar_t>(c, b), warps_per_block, deterministic, TableFetch{x.data_ptr()},
                           TableFetch{x_remote.data_ptr()}, c.facts.max_remote_part);
  });
  return b.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("aggregate", &aggregate_cuda); }

}  // namespace mgg
