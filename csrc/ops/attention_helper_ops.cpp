// The ops mgg::attention_terms, through which the nvshmem backend builds the table it publishes
// (attention_terms.h), and mgg::attention_keep, the dropout factors of the attention ops.
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../core/attention.h"
#include "attention_terms.h"

namespace mgg {

namespace {

at::Tensor attention_terms_op(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& a_dst,
                              const at::Tensor& stats, int64_t heads) {
  return attention_terms("mgg.attention_terms", grad, out, a_dst, stats, heads, at::toOpMathType(out.scalar_type()));
}

// The dropout factors the attention ops draw for edges src -> dst (global ids) and each head:
// [edges, heads] float32 (for return_attention_weights; computed on the host).
at::Tensor attention_keep_op(const at::Tensor& dst, const at::Tensor& src, int64_t heads, int64_t seed, double p) {
  const char* op = "mgg.attention_keep";
  TORCH_CHECK(dst.dim() == 1 && src.sizes() == dst.sizes(), op, ": dst and src must be 1-D of one length, got ",
              dst.sizes(), " and ", src.sizes());
  TORCH_CHECK(heads >= 1 && heads <= kMaxHeads, op, ": heads must be in [1, ", kMaxHeads, "], got ", heads);
  TORCH_CHECK(p >= 0.0 && p < 1.0, op, ": p must be in [0, 1), got ", p);
  const at::Tensor d = dst.to(at::kCPU, at::kLong).contiguous(), s = src.to(at::kCPU, at::kLong).contiguous();
  at::Tensor keep = at::empty({d.numel(), heads}, d.options().dtype(at::kFloat));
  const int64_t *dp = d.data_ptr<int64_t>(), *sp = s.data_ptr<int64_t>();
  float* kp = keep.data_ptr<float>();
  for (int64_t e = 0; e < d.numel(); ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      kp[e * heads + h] = dropout_keep(static_cast<uint64_t>(seed), dp[e], sp[e], h, static_cast<float>(p));
    }
  }
  return keep.to(dst.device());
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CompositeExplicitAutograd, m) {
  m.impl("attention_terms", &attention_terms_op);
  m.impl("attention_keep", &attention_keep_op);
}

}  // namespace mgg
