// mgg::node_keep's argument checks, shared by its CPU (node_dropout.cpp) and CUDA (cuda/) bodies.
#pragma once
#include <ATen/ATen.h>

namespace mgg {

void check_node_keep(const at::Tensor& nodes, int64_t col0, int64_t col1, double p);

}  // namespace mgg
