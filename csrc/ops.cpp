// Schema of the mgg ops and the host-side argument checks shared by their implementations.
#include <torch/library.h>

#include "aggregate.h"

namespace mgg {
namespace {

void check_index(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.dim() == 1, "mgg.aggregate: ", name, " must be 1-D, got ", t.dim(), "-D");
  TORCH_CHECK(t.scalar_type() == dtype, "mgg.aggregate: ", name, " must be ", dtype, ", got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "mgg.aggregate: ", name, " must be contiguous");
}

void check_part(const char* which, const at::Tensor& ptr, const at::Tensor& row,
                const at::Tensor& col, const std::optional<at::Tensor>& weight) {
  std::string p = std::string(which) + "_part_ptr", r = std::string(which) + "_part_row",
              c = std::string(which) + "_col", w = std::string(which) + "_weight";
  check_index(ptr, p.c_str(), at::kLong);
  check_index(row, r.c_str(), at::kInt);
  check_index(col, c.c_str(), at::kInt);
  TORCH_CHECK(ptr.numel() == row.numel() + 1, "mgg.aggregate: ", p, " has ", ptr.numel(),
              " entries but ", r, " has ", row.numel(), " (expected one more)");
  if (weight.has_value()) {
    TORCH_CHECK(weight->dim() == 1 && weight->numel() == col.numel(), "mgg.aggregate: ", w,
                " must be 1-D with one entry per edge (", col.numel(), "), got shape ",
                weight->sizes());
    TORCH_CHECK(weight->scalar_type() == at::kFloat || weight->scalar_type() == at::kDouble,
                "mgg.aggregate: ", w, " must be float32 or float64, got ", weight->scalar_type());
    TORCH_CHECK(weight->is_contiguous(), "mgg.aggregate: ", w, " must be contiguous");
  }
}

}  // namespace

void check_aggregate_args(const AggregateArgs& a) {
  TORCH_CHECK(a.x.dim() == 2, "mgg.aggregate: x must be 2-D [nodes, dim], got ", a.x.dim(), "-D");
  TORCH_CHECK(a.x_remote.dim() == 2 && a.x_remote.size(1) == a.x.size(1),
              "mgg.aggregate: x_remote must be 2-D with the same dim as x (", a.x.size(1),
              "), got shape ", a.x_remote.sizes());
  TORCH_CHECK(a.x_remote.scalar_type() == a.x.scalar_type(), "mgg.aggregate: x_remote dtype ",
              a.x_remote.scalar_type(), " differs from x dtype ", a.x.scalar_type());
  auto st = a.x.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16,
              "mgg.aggregate: x must be float32, float64, float16 or bfloat16, got ", st);
  TORCH_CHECK(a.x.is_contiguous() && a.x_remote.is_contiguous(),
              "mgg.aggregate: x and x_remote must be contiguous");
  TORCH_CHECK(a.num_rows >= 0, "mgg.aggregate: num_rows must be >= 0, got ", a.num_rows);
  TORCH_CHECK(a.warps_per_block >= 1 && a.warps_per_block <= 32,
              "mgg.aggregate: warps_per_block must be in [1, 32], got ", a.warps_per_block);
  check_part("local", a.local_part_ptr, a.local_part_row, a.local_col, a.local_weight);
  check_part("remote", a.remote_part_ptr, a.remote_part_row, a.remote_col, a.remote_weight);
  check_index(a.warp_local_ptr, "warp_local_ptr", at::kLong);
  check_index(a.warp_remote_ptr, "warp_remote_ptr", at::kLong);
  TORCH_CHECK(a.warp_local_ptr.numel() == a.warp_remote_ptr.numel() && a.warp_local_ptr.numel() >= 1,
              "mgg.aggregate: warp_local_ptr and warp_remote_ptr must have the same length >= 1 "
              "(num_warps + 1), got ", a.warp_local_ptr.numel(), " and ", a.warp_remote_ptr.numel());
  const auto dev = a.x.device();
  for (const at::Tensor* t : {&a.x_remote, &a.local_part_ptr, &a.local_part_row, &a.local_col,
                              &a.remote_part_ptr, &a.remote_part_row, &a.remote_col,
                              &a.warp_local_ptr, &a.warp_remote_ptr}) {
    TORCH_CHECK(t->device() == dev, "mgg.aggregate: every plan tensor must be on ", dev,
                " like x; found one on ", t->device());
  }
  for (const auto* w : {&a.local_weight, &a.remote_weight}) {
    if (w->has_value()) {
      TORCH_CHECK((*w)->device() == dev, "mgg.aggregate: edge weights must be on ", dev,
                  " like x; found them on ", (*w)->device());
    }
  }
}

}  // namespace mgg

TORCH_LIBRARY(mgg, m) {
  m.def(
      "aggregate(Tensor x, Tensor x_remote, Tensor local_part_ptr, Tensor local_part_row, "
      "Tensor local_col, Tensor? local_weight, Tensor remote_part_ptr, Tensor remote_part_row, "
      "Tensor remote_col, Tensor? remote_weight, Tensor warp_local_ptr, Tensor warp_remote_ptr, "
      "SymInt num_rows, int warps_per_block, bool deterministic) -> Tensor");
}
