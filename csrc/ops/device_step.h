// The kernels' view of a checked aggregation call (kernels::Step of kernels/api.h), filled from
// the op's Step: the one place that does it, shared by the CUDA op files (ops/cuda/) and the
// emulated ops of the tests (csrc/tests/emu/torch_ops.cpp), so the emulator runs the same host
// code. Needs ATen, not ATen-CUDA; the pointers are into the call's tensors on their device.
#pragma once
#include <ATen/ATen.h>

#include "../kernels/api.h"
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

// A step's tensors as the kernels read them: edge weights as fp32 (kept alive here).
struct DeviceStep {
  kernels::Step step{};
  at::Tensor local_weight, remote_weight;
};

inline at::Tensor f32_field(const Step& s, StepField w) {
  return s.has(w) ? s[w].to(at::kFloat).contiguous() : at::Tensor();
}

inline kernels::DevicePart device_part(const Step& s, StepField rowptr, StepField col, const at::Tensor& weight,
                                       const at::Tensor& pe) {
  if (!s.has(rowptr)) return {nullptr, nullptr, nullptr, nullptr};
  return {s[rowptr].data_ptr<int64_t>(), s[col].data_ptr<int32_t>(),
          weight.defined() ? weight.data_ptr<float>() : nullptr, pe.defined() ? pe.data_ptr<int32_t>() : nullptr};
}

// The kernels::Step of a checked aggregate (peers false) or aggregate_peers (peers true) call on x.
inline DeviceStep device_step(const Call& c, const at::Tensor& x, bool peers) {
  const Step& s = c.step;
  DeviceStep d;
  d.local_weight = f32_field(s, kLocalWeight);
  d.remote_weight = f32_field(s, kRemoteWeight);
  kernels::Step& ks = d.step;
  ks.storage = storage_of(c.op, x.scalar_type());
  ks.local = device_part(s, kLocalRowptr, kLocalCol, d.local_weight, at::Tensor());
  ks.remote = device_part(s, kRemoteRowptr, kRemoteCol, d.remote_weight, peers ? s[kRemotePe] : at::Tensor());
  ks.blocks = s[kBlocks].data_ptr<int64_t>();
  ks.num_blocks = s[kBlocks].size(0);
  ks.fixups = s[kFixups].data_ptr<int64_t>();
  ks.num_fixups = s[kFixups].size(0);
  ks.num_rows = s.rows();
  ks.dim = x.size(1);
  ks.ps = s.ps;
  ks.dist = s.dist;
  ks.wpb = s.wpb;
  ks.max_remote_part = s.max_remote_part;
  ks.interleave = s.interleave;
  ks.deterministic = c.deterministic;
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

// The fp32 scratch rows of a step's non-deterministic fixups (none when deterministic).
inline at::Tensor device_scratch(const Call& c, const at::Tensor& x) {
  return at::empty({c.deterministic ? 0 : c.step.num_slots, x.size(1)}, x.options().dtype(at::kFloat));
}

}  // namespace mgg
