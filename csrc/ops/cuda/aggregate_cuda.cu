// CUDA implementations of mgg::aggregate and mgg::aggregate_peers: the ATen side of the kernels.
// They check the call (ops/checks.cpp), plan the launch for this GPU (one-line error when a
// config cannot launch), allocate the output and scratch, and call the torch-free launchers of
// kernels/api.h on the current stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../kernels/api.h"
#include "../device_step.h"
#include "sources.h"

namespace mgg {
namespace {

// Runs a checked call: `plan(step, &launch)` gives the launch shape or why it cannot launch,
// `launch(step, launch, out, scratch, stream)` runs it.
template <typename Plan, typename Run>
at::Tensor run(const at::Tensor& x, const Call& c, bool peers, Plan plan, Run launch) {
  const Step& s = c.step;
  at::Tensor out = at::empty({s.rows(), x.size(1)}, x.options());
  if (out.numel() == 0) return out;
  const DeviceStep d = device_step(c, x, peers);
  const kernels::Step& ks = d.step;
  kernels::Launch l{};
  const std::string why = plan(ks, &l);
  TORCH_CHECK(why.empty(), c.op, ": ", why);
  at::Tensor scratch = device_scratch(c, x);
  C10_CUDA_CHECK(launch(ks, l, out.data_ptr(), scratch.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream()));
  return out;
}

at::Tensor aggregate_cuda(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params,
                          bool deterministic) {
  const c10::cuda::CUDAGuard guard(x.device());
  const Call c = check_aggregate(x, x_remote, plan, params, deterministic);
  kernels::Sources src{};
  src.local_table = x.data_ptr();
  src.remote_table = x_remote.data_ptr();
  return run(
      x, c, false, [](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_table_launch(s, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* scratch, cudaStream_t stream) {
        return kernels::launch_table(s, src, l, out, scratch, stream);
      });
}

at::Tensor aggregate_peers_cuda(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                                at::IntArrayRef params, int64_t fetch, bool deterministic) {
  const c10::cuda::CUDAGuard guard(x.device());
  const Call c = check_aggregate_peers(x, peers, my_pe, plan, params, fetch, deterministic);
  kernels::Source source{};
  kernels::Sources src = peer_sources(c.op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  src.local_table = x.data_ptr();
  return run(
      x, c, true, [&](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_peers_launch(s, source, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* scratch, cudaStream_t stream) {
        return kernels::launch_peers(s, source, src, l, out, scratch, stream);
      });
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) {
  m.impl("aggregate", &aggregate_cuda);
  m.impl("aggregate_peers", &aggregate_peers_cuda);
}

}  // namespace mgg
