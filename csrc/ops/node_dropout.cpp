// mgg::node_keep's argument checks (node_dropout.h), shared by its CPU and CUDA bodies.
#include "node_dropout.h"

#include <c10/util/Exception.h>

namespace mgg {

void check_node_keep(const at::Tensor& nodes, int64_t col0, int64_t col1, double p) {
  const char* op = "mgg.node_keep";
  TORCH_CHECK(nodes.dim() == 1, op, ": nodes must be 1-D (global node ids), got ", nodes.sizes());
  TORCH_CHECK(nodes.scalar_type() == at::kLong, op, ": nodes must be int64, got ", nodes.scalar_type());
  TORCH_CHECK(0 <= col0 && col0 <= col1, op, ": columns [", col0, ", ", col1, ") are not a range");
  TORCH_CHECK(p >= 0.0 && p < 1.0, op, ": p must be in [0, 1), got ", p);
}

}  // namespace mgg
