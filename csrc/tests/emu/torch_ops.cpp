// The mgg ops' CUDA path on CPU tensors, under the SIMT emulator: a test-only torch extension
// (tests/emulator.py builds it with torch.utils.cpp_extension.load into the emulator's cache,
// never installed) defining mgg_emu::aggregate and mgg_emu::aggregate_peers with mgg's schemas
// (the attention ops: torch_attention.cpp). Each call runs the op files' host code
// (ops/checks.cpp, ops/device_step.h, the launch planners and launchers of kernels/) and the real
// kernels, each thread a fiber; tests/emulator.py puts them in place of the mgg ops' CPU kernels
// for a test. Not built with sanitizers (the runner, csrc/tests/emu/runner.cpp, keeps ASan/UBSan
// coverage of the same kernels).
#include <torch/library.h>

#include <string>

#include "../../kernels/api.h"
#include "torch_device.h"

namespace mgg::kernels {
// The kernels' `extern __shared__ unsigned char smem[]`, as in runner.cpp.
constexpr size_t kSharedCapacity = 227 * 1024;
alignas(16) thread_local unsigned char smem[kSharedCapacity];
namespace {
const bool registered = (simt::register_dynamic_shared([] { return smem; }, kSharedCapacity), true);
}  // namespace
}  // namespace mgg::kernels

namespace mgg {
namespace {

template <typename Plan, typename Launch>
at::Tensor run(const at::Tensor& x, const Call& c, bool peers, Plan plan, Launch launch) {
  at::Tensor out = Emulated::empty({c.step.rows(), x.size(1)}, x.options());
  if (out.numel() == 0) return out;
  const DeviceStep d = device_step(c, x, peers);
  kernels::Launch l{};
  const std::string why = plan(d.step, &l);
  TORCH_CHECK(why.empty(), c.op, ": ", why);
  at::Tensor scratch = device_scratch(c, x).fill_(std::numeric_limits<float>::quiet_NaN());
  Emulated::launch(
      c.op, [&](cudaStream_t /*stream*/) { return launch(d.step, l, out.data_ptr(), scratch.data_ptr<float>()); });
  return out;
}

at::Tensor aggregate_emu(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params,
                         bool deterministic) {
  const Call c = check_aggregate(x, x_remote, plan, params, deterministic);
  kernels::Sources src{};
  src.local_table = x.data_ptr();
  src.remote_table = x_remote.data_ptr();
  return run(
      x, c, false, [](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_table_launch(s, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* scratch) {
        return kernels::launch_table(s, src, l, out, scratch, nullptr);
      });
}

at::Tensor aggregate_peers_emu(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                               at::IntArrayRef params, int64_t fetch, bool deterministic) {
  const Call c = check_aggregate_peers(x, peers, my_pe, plan, params,
                                       Emulated::fetch_for_checks("mgg.aggregate_peers", fetch), deterministic);
  kernels::Source source{};
  kernels::Sources src = Emulated::peers(c.op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  src.local_table = x.data_ptr();
  return run(
      x, c, true, [&](const kernels::Step& s, kernels::Launch* l) { return kernels::plan_peers_launch(s, source, l); },
      [&](const kernels::Step& s, const kernels::Launch& l, void* out, float* scratch) {
        return kernels::launch_peers(s, source, src, l, out, scratch, nullptr);
      });
}

void set_seed(int64_t seed) { simt::set_seed(static_cast<uint64_t>(seed)); }

}  // namespace

TORCH_LIBRARY(mgg_emu, m) {
  m.def("aggregate(Tensor x, Tensor x_remote, Tensor?[] plan, int[] params, bool deterministic) -> Tensor",
        &aggregate_emu);
  m.def(
      "aggregate_peers(Tensor x, Tensor[] peers, int my_pe, Tensor?[] plan, int[] params, int fetch, "
      "bool deterministic) -> Tensor",
      &aggregate_peers_emu);
  m.def("set_seed(int seed) -> ()", &set_seed);
}

}  // namespace mgg
