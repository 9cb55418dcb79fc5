// The aggregation ops' device path (kernels/table.cu, kernels/peers.cu) on the ATen side, written
// once: each op checks the call (ops/checks.cpp), fills kernels::Step (device_step.h), plans the
// launch (one-line error when a config cannot launch), allocates the output and the fp32 carry
// rows and launches. Shared by the CUDA op file (ops/cuda/aggregate_cuda.cu) and the emulated ops of the
// tests (csrc/tests/emu/torch_ops.cpp); `Dev` is the device, as in device_attention.h.
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "../kernels/api.h"
#include "device_step.h"
#include "step.h"

namespace mgg {

// Runs a checked call: `plan(step, &launch)` gives the launch shape or why it cannot launch,
// `launch(step, launch, out, carry, stream)` runs it.
template <typename Dev, typename Plan, typename Launch>
at::Tensor run_aggregate(const at::Tensor& x, const Call& c, bool peers, Plan plan, Launch launch) {
  at::Tensor out = Dev::empty({c.step.rows(), x.size(1)}, x.options());
  if (out.numel() == 0) return out;
  const DeviceStep d = device_step(c, x, peers);
  kernels::Launch l{};
  const std::string why = plan(d.step, &l);
  TORCH_CHECK(why.empty(), c.op, ": ", why);
  // the fp32 carry rows of the pieces of split rows, which the fixups sum
  at::Tensor carry = Dev::empty({c.step.num_slots, x.size(1)}, x.options().dtype(at::kFloat));
  Dev::launch(c.op,
              [&](cudaStream_t stream) { return launch(d.step, l, out.data_ptr(), carry.data_ptr<float>(), stream); });
  return out;
}

template <typename Dev>
at::Tensor aggregate_device(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan,
                            at::IntArrayRef params, bool /*deterministic: every run is*/) {
  const typename Dev::Guard guard(x.device());
  const Call c = check_aggregate(x, x_remote, plan, params);
  kernels::Sources src{};
  src.local_table = x.data_ptr();
  src.remote_table = x_remote.data_ptr();
  return run_aggregate<Dev>(
      x, c, false, [&](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_table_launch(s, src, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* carry, cudaStream_t stream) {
        return kernels::launch_table(s, src, l, out, carry, stream);
      });
}

template <typename Dev>
at::Tensor aggregate_peers_device(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                                  at::IntArrayRef params, int64_t fetch, bool /*deterministic: every run is*/) {
  const typename Dev::Guard guard(x.device());
  const Call c =
      check_aggregate_peers(x, peers, my_pe, plan, params, Dev::fetch_for_checks("mgg.aggregate_peers", fetch));
  kernels::Source source{};
  kernels::Sources src = Dev::peers(c.op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  src.local_table = x.data_ptr();
  return run_aggregate<Dev>(
      x, c, true,
      [&](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_peers_launch(s, source, src, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* carry, cudaStream_t stream) {
        return kernels::launch_peers(s, source, src, l, out, carry, stream);
      });
}

// Max/min (core/extreme.h): one warp per row.
template <typename Dev>
std::tuple<at::Tensor, at::Tensor> aggregate_extreme_device(const at::Tensor& x, const at::Tensor& x_remote,
                                                            const PlanList& plan, at::IntArrayRef params,
                                                            c10::string_view reduce) {
  const typename Dev::Guard guard(x.device());
  const ExtremeCall e = check_aggregate_extreme(x, x_remote, plan, params, reduce);
  at::Tensor out = Dev::empty({e.call.step.rows(), x.size(1)}, x.options());
  at::Tensor arg = at::empty({e.call.step.rows(), x.size(1)}, x.options().dtype(at::kLong));
  if (out.numel() == 0) return {out, arg};
  const DeviceStep d = device_step(e.call, x, false);
  kernels::Launch l{};
  const std::string why = kernels::plan_extreme_launch(d.step, &l);
  TORCH_CHECK(why.empty(), e.call.op, ": ", why);
  kernels::Sources src{};
  src.local_table = x.data_ptr();
  src.remote_table = x_remote.data_ptr();
  Dev::launch(e.call.op, [&](cudaStream_t stream) {
    return kernels::launch_extreme_table(d.step, src, l, e.is_max, x.size(0), out.data_ptr(), arg.data_ptr<int64_t>(),
                                         stream);
  });
  return {out, arg};
}

}  // namespace mgg
