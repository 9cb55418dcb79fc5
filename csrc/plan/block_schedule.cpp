// mgg::block_schedule: the block schedule of a plan from its per-row partition counts (CPU op;
// the plan is built on the host and moved to the device once).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "block_schedule.h"

namespace mgg {
namespace {

std::tuple<at::Tensor, at::Tensor> block_schedule_cpu(const at::Tensor& local_parts, const at::Tensor& remote_parts,
                                                      int64_t part_cap, int64_t row_cap) {
  for (const at::Tensor* t : {&local_parts, &remote_parts}) {
    TORCH_CHECK(t->dim() == 1 && t->scalar_type() == at::kLong && t->is_contiguous() && t->is_cpu(),
                "mgg.block_schedule: partition counts must be contiguous 1-D int64 CPU tensors");
  }
  TORCH_CHECK(local_parts.numel() == remote_parts.numel(), "mgg.block_schedule: local and remote counts differ in length (",
              local_parts.numel(), " vs ", remote_parts.numel(), ")");
  TORCH_CHECK(part_cap >= 1 && row_cap >= 1, "mgg.block_schedule: part_cap and row_cap must be >= 1, got ", part_cap,
              " and ", row_cap);
  BlockSchedule s;
  try {
    s = build_block_schedule(local_parts.data_ptr<int64_t>(), remote_parts.data_ptr<int64_t>(), local_parts.numel(),
                             part_cap, row_cap);
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

TORCH_LIBRARY_FRAGMENT(mgg, m) {
  m.def("block_schedule(Tensor local_parts, Tensor remote_parts, int part_cap, int row_cap) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(mgg, CPU, m) { m.impl("block_schedule", &block_schedule_cpu); }

}  // namespace mgg
