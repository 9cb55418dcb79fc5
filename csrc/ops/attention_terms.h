// What the attention ops share on the ATen side: the output rows' terms table of the backward
// (core/attention.h: per head g, a_dst, m, s, r) and the checks of a_dst and of a terms table.
#pragma once
#include <ATen/ATen.h>

namespace mgg {

// The terms of the output rows [rows, H * (C + kTermFields)] in acc_type, from the gradient
// and the value of the output [rows, H*C], a_dst [rows, H] and the statistics [rows, 2H].
at::Tensor attention_terms(const char* op, const at::Tensor& grad, const at::Tensor& out, const at::Tensor& a_dst,
                           const at::Tensor& stats, int64_t heads, at::ScalarType acc_type);

void check_attention_dst(const char* op, const at::Tensor& a_dst, const at::Tensor& x, int64_t rows, int64_t heads);

void check_attention_terms(const char* op, const at::Tensor& terms, int64_t rows, int64_t heads, int64_t channels,
                           at::ScalarType acc_type, const at::Device& device);

}  // namespace mgg
