// mgg::range_schedule: the warp-range schedule of a step from its row pointers (CPU op; the plan is
// built on the host and moved to the device once). Layout and builder: core/schedule.h,
// core/range_schedule.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../core/limits.h"
#include "../core/range_schedule.h"

namespace mgg {
namespace {

std::tuple<at::Tensor, at::Tensor> range_schedule_cpu(const at::Tensor& local_rowptr,
                                                      const std::optional<at::Tensor>& remote_rowptr, int64_t ps,
                                                      int64_t dist) {
  const char* op = "mgg.range_schedule";
  for (const at::Tensor* t : {&local_rowptr, remote_rowptr ? &*remote_rowptr : nullptr}) {
    if (!t) continue;
    TORCH_CHECK(t->dim() == 1 && t->numel() >= 1 && t->scalar_type() == at::kLong && t->is_contiguous() && t->is_cpu(),
                op, ": row pointers must be non-empty contiguous 1-D int64 CPU tensors");
  }
  TORCH_CHECK(!remote_rowptr || remote_rowptr->numel() == local_rowptr.numel(), op,
              ": local and remote row pointers differ in length (", local_rowptr.numel(), " vs ",
              remote_rowptr->numel(), ")");
  TORCH_CHECK(ps >= 0 && ps <= kPsMax, op, ": ps must be in [", kPsMin, ", ", kPsMax, "] or 0, got ", ps);
  TORCH_CHECK(dist >= kDistMin && dist <= kDistMax, op, ": dist must be in [", kDistMin, ", ", kDistMax, "], got ",
              dist);
  RangeSchedule s;
  try {
    s = build_range_schedule(local_rowptr.data_ptr<int64_t>(),
                             remote_rowptr ? remote_rowptr->data_ptr<int64_t>() : nullptr, local_rowptr.numel() - 1, ps,
                             dist);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "mgg.", e.what());
  }
  auto opts = at::TensorOptions().dtype(at::kLong);
  const int64_t nf = static_cast<int64_t>(s.fixups.size()) / kFixupFields;
  at::Tensor ranges = at::empty({s.num_warps + 1, kRangeFields}, opts), fixups = at::empty({nf, kFixupFields}, opts);
  std::copy(s.ranges.begin(), s.ranges.end(), ranges.data_ptr<int64_t>());
  std::copy(s.fixups.begin(), s.fixups.end(), fixups.data_ptr<int64_t>());
  return {ranges, fixups};
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) { m.impl("range_schedule", &range_schedule_cpu); }

}  // namespace mgg
