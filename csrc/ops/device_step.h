// The kernels' view of a checked aggregation call (kernels::Step of kernels/api.h), filled from
// the op's Step by ops/kernel_step.h (the runner of the tests fills it from a case the same way):
// shared by the CUDA op files (ops/cuda/) and the emulated ops of the tests
// (csrc/tests/emu/torch_ops.cpp), so the emulator runs the same host code. Needs ATen, not
// ATen-CUDA; the pointers are into the call's tensors on their device.
#pragma once
#include <ATen/ATen.h>

#include "../kernels/api.h"
#include "kernel_step.h"
#include "step.h"

namespace mgg {

// The kernels' storage type of an ATen dtype.
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

// An op's Step as ops/kernel_step.h reads it, with its weights as fp32 (`weights`, converted once).
struct StepView {
  const Step& s;
  const at::Tensor* weights;  // [local, remote] fp32, undefined where absent

  template <typename T>
  const T* index(StepField f) const {
    return s.has(f) ? s[f].data_ptr<T>() : nullptr;
  }
  const float* weight(StepField f) const {
    const at::Tensor& w = weights[f == kLocalWeight ? 0 : 1];
    return w.defined() ? w.data_ptr<float>() : nullptr;
  }
  int64_t length(StepField f) const { return s[f].size(0); }
  int64_t rows() const { return s.rows(); }
  int64_t param(StepParam p) const {
    switch (p) {
      case kPs:
        return s.ps;
      case kDist:
        return s.dist;
      case kWpb:
        return s.wpb;
      case kInterleave:
        return s.interleave;
      case kNumSlots:
        return s.num_slots;
      default:
        return s.landing_rows;
    }
  }
};

// A step's tensors as the kernels read them: edge weights as fp32 (kept alive here).
struct DeviceStep {
  kernels::Step step{};
  at::Tensor weights[2];  // local, remote
};

inline at::Tensor f32_field(const Step& s, StepField w) {
  return s.has(w) ? s[w].to(at::kFloat).contiguous() : at::Tensor();
}

// The kernels::Step of a checked aggregate (peers false) or aggregate_peers (peers true) call on x.
inline DeviceStep device_step(const Call& c, const at::Tensor& x, bool peers) {
  DeviceStep d;
  d.weights[0] = f32_field(c.step, kLocalWeight);
  d.weights[1] = f32_field(c.step, kRemoteWeight);
  d.step = kernel_step(StepView{c.step, d.weights}, storage_of(c.op, x.scalar_type()), x.size(1), peers);
  return d;
}

// The kernels' source of a fetch policy (mgg._C.FETCH; uva reads peer pointers too).
inline kernels::Source source_of(Fetch how) {
  switch (how) {
    case Fetch::kGetThread:
      return kernels::Source::kGetThread;
    case Fetch::kGetWarp:
      return kernels::Source::kGetWarp;
    case Fetch::kGetBlock:
      return kernels::Source::kGetBlock;
    default:
      return kernels::Source::kPeerPointers;
  }
}

// Each PE's table read by direct loads from its address (tables[my_pe] is this PE's).
inline kernels::Sources direct_sources(at::TensorList tables, int64_t my_pe) {
  kernels::Sources s{};
  s.local_table = tables[my_pe].data_ptr();
  for (size_t i = 0; i < tables.size(); ++i) s.peers[i] = tables[i].data_ptr();
  return s;
}

}  // namespace mgg
