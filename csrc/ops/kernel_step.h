// The kernels' view of a plan step (kernels::Step, kernels::DevicePart of kernels/api.h) filled
// from the step's fields and parameters, written once and torch-free: ops/device_step.h fills it
// from an op's Step (ATen tensors) for the CUDA op files and the emulated ops of the tests, and
// the emulator's runner (csrc/tests/emu) from a case's arrays, named as core/step_layout.h names
// them. `S`, whatever holds the step, answers:
//   s.template index<T>(f)  the data of index field f (int64 row pointers, int32 columns), or nullptr
//   s.weight(f)             the fp32 data of weight field f, or nullptr (weight 1)
//   s.length(f)             the first dimension of field f (ranges, fixups)
//   s.param(p)              parameter p
//   s.rows()                the step's output rows
#pragma once
#include <cstdint>

#include "../core/step_layout.h"
#include "../kernels/api.h"

namespace mgg {

// One part of the step: its rows, columns, weights (kStepFields: none) and owner PEs (kStepFields:
// none); empty when the part is absent.
template <typename S>
kernels::DevicePart kernel_part(const S& s, StepField rowptr, StepField col, StepField weight, StepField pe) {
  const int64_t* r = s.template index<int64_t>(rowptr);
  if (!r) return {nullptr, nullptr, nullptr, nullptr};
  return {r, s.template index<int32_t>(col), weight == kStepFields ? nullptr : s.weight(weight),
          pe == kStepFields ? nullptr : s.template index<int32_t>(pe)};
}

// The aggregation step of rows of `dim` columns in `storage`; peers: remote rows are read from
// their owner PEs (remote_pe), else from one remote table.
template <typename S>
kernels::Step kernel_step(const S& s, kernels::Storage storage, int64_t dim, bool peers) {
  kernels::Step ks{};
  ks.storage = storage;
  ks.local = kernel_part(s, kLocalRowptr, kLocalCol, kLocalWeight, kStepFields);
  ks.remote = kernel_part(s, kRemoteRowptr, kRemoteCol, kRemoteWeight, peers ? kRemotePe : kStepFields);
  ks.ranges = s.template index<int64_t>(kRanges);
  ks.num_warps = s.length(kRanges) - 1;
  ks.fixups = s.template index<int64_t>(kFixups);
  ks.num_fixups = s.length(kFixups);
  ks.num_rows = s.rows();
  ks.dim = dim;
  ks.ps = s.param(kPs);
  ks.dist = s.param(kDist);
  ks.wpb = s.param(kWpb);
  ks.landing_rows = s.param(kLandingRows);
  ks.interleave = s.param(kInterleave) != 0;
  return ks;
}

}  // namespace mgg
