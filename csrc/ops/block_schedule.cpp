// mgg::block_schedule: the block schedule of a step from its row pointers (CPU op; the plan is
// built on the host and moved to the device once). Layout and builder: core/block_schedule.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../core/block_schedule.h"
#include "../core/limits.h"

namespace mgg {
namespace {

std::tuple<at::Tensor, at::Tensor> block_schedule_cpu(const at::Tensor& local_rowptr,
                                                      const std::optional<at::Tensor>& remote_rowptr, int64_t ps,
                                                      int64_t dist, int64_t wpb) {
  const char* op = "mgg.block_schedule";
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
  TORCH_CHECK(wpb >= kWpbMin && wpb <= kWpbMax, op, ": wpb must be in [", kWpbMin, ", ", kWpbMax, "], got ", wpb);
  BlockSchedule s;
  try {
    s = build_block_schedule(local_rowptr.data_ptr<int64_t>(),
                             remote_rowptr ? remote_rowptr->data_ptr<int64_t>() : nullptr, local_rowptr.numel() - 1, ps,
                             wpb * dist, block_row_cap(wpb));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "mgg.", e.what());
  }
  auto opts = at::TensorOptions().dtype(at::kLong);
  const int64_t nb = static_cast<int64_t>(s.blocks.size()) / kBlockFields;
  const int64_t nf = static_cast<int64_t>(s.fixups.size()) / kFixupFields;
  at::Tensor blocks = at::empty({nb, kBlockFields}, opts), fixups = at::empty({nf, kFixupFields}, opts);
  std::copy(s.blocks.begin(), s.blocks.end(), blocks.data_ptr<int64_t>());
  std::copy(s.fixups.begin(), s.fixups.end(), fixups.data_ptr<int64_t>());
  return {blocks, fixups};
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) { m.impl("block_schedule", &block_schedule_cpu); }

}  // namespace mgg
