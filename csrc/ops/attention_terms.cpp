// The attention ops' terms table and shared checks (attention_terms.h); no op registrations (the
// emulated ops of the tests link this file too): those are in attention_helper_ops.cpp.
#include "attention_terms.h"

#include "../core/attention.h"

namespace mgg {

void check_attention_dst(const char* op, const at::Tensor& a_dst, const at::Tensor& x, int64_t rows, int64_t heads) {
  TORCH_CHECK(a_dst.dim() == 2 && a_dst.size(0) == rows && a_dst.size(1) == heads, op, ": a_dst must be [", rows, ", ",
              heads, "] (the output rows' destination terms), got ", a_dst.sizes());
  TORCH_CHECK(a_dst.scalar_type() == x.scalar_type() && a_dst.device() == x.device() && a_dst.is_contiguous(), op,
              ": a_dst must be a contiguous ", x.scalar_type(), " tensor on ", x.device());
}

void check_attention_terms(const char* op, const at::Tensor& terms, int64_t rows, int64_t heads, int64_t channels,
                           at::ScalarType acc_type, const at::Device& device) {
  TORCH_CHECK(terms.dim() == 2 && terms.size(0) == rows && terms.size(1) == heads * (channels + kTermFields), op,
              ": terms must be [", rows, ", ", heads * (channels + kTermFields), "] (mgg.attention_terms), got ",
              terms.sizes());
  TORCH_CHECK(terms.scalar_type() == acc_type && terms.device() == device && terms.is_contiguous(), op,
              ": terms must be a contiguous ", acc_type, " tensor on ", device);
}

at::Tensor attention_terms(const char* op, const at::Tensor& grad, const at::Tensor& out, const at::Tensor& a_dst,
                           const at::Tensor& stats, int64_t heads, at::ScalarType acc_type) {
  TORCH_CHECK(heads >= 1 && out.dim() == 2 && out.size(1) % heads == 0, op, ": out must be [rows, heads * C], got ",
              out.sizes(), " for ", heads, " heads");
  const int64_t rows = out.size(0), C = out.size(1) / heads;
  TORCH_CHECK(grad.sizes() == out.sizes(), op, ": the gradient must be shaped like out ", out.sizes(), ", got ",
              grad.sizes());
  TORCH_CHECK(a_dst.dim() == 2 && a_dst.size(0) == rows && a_dst.size(1) == heads, op, ": a_dst must be [", rows, ", ",
              heads, "], got ", a_dst.sizes());
  TORCH_CHECK(stats.dim() == 2 && stats.size(0) == rows && stats.size(1) == 2 * heads, op, ": stats must be [", rows,
              ", ", 2 * heads, "] (attend's second output), got ", stats.sizes());
  const at::Tensor g = grad.to(acc_type).view({rows, heads, C});
  const at::Tensor r = (g * out.to(acc_type).view({rows, heads, C})).sum(-1, true);
  const at::Tensor st = stats.to(acc_type);
  return at::cat({g, a_dst.to(acc_type).unsqueeze(-1), st.narrow(1, 0, heads).unsqueeze(-1),
                  st.narrow(1, heads, heads).unsqueeze(-1), r},
                 -1)
      .reshape({rows, heads * (C + kTermFields)})
      .contiguous();
}

}  // namespace mgg
