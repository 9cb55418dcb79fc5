// The mgg ops' CUDA path on CPU tensors, under the SIMT emulator: a test-only torch extension
// (simt/emulator.py builds it with torch.utils.cpp_extension.load into the emulator's cache,
// never installed) defining mgg_emu::aggregate, mgg_emu::aggregate_peers and mgg_emu::aggregate_extreme (the attention
// ops: torch_attention.cpp), their schemas inferred from the op bodies. Each call runs the op files' host code
// (ops/device_aggregate.h: ops/checks.cpp, ops/device_step.h, the launch planners and launchers of kernels/) on the
// emulated device (torch_device.h) and the real kernels, each thread a fiber; simt/emulator.py puts them in place of
// the mgg ops' CPU kernels for a test. Not built with sanitizers (the runner, csrc/tests/emu/runner.cpp, keeps
// ASan/UBSan coverage of the same kernels).
#include <torch/library.h>

#include "../../ops/device_aggregate.h"
#include "torch_device.h"

namespace mgg::kernels {
// The kernels' `extern __shared__ unsigned char smem[]`, as in runner.cpp.
constexpr size_t kSharedCapacity = simt::kSharedOptin;
alignas(16) thread_local unsigned char smem[kSharedCapacity];
namespace {
const bool registered = (simt::register_dynamic_shared([] { return smem; }, kSharedCapacity), true);
}  // namespace
}  // namespace mgg::kernels

namespace mgg {
namespace {

void set_seed(int64_t seed) { simt::set_seed(static_cast<uint64_t>(seed)); }
void set_p2p(bool p2p) { Emulated::loads = p2p; }

}  // namespace

TORCH_LIBRARY(mgg_emu, m) {
  m.def("aggregate", &aggregate_device<Emulated>);
  m.def("aggregate_peers", &aggregate_peers_device<Emulated>);
  m.def("aggregate_extreme", &aggregate_extreme_device<Emulated>);
  m.def("set_seed(int seed) -> ()", &set_seed);
  m.def("set_p2p(bool p2p) -> ()", &set_p2p);
}

}  // namespace mgg
