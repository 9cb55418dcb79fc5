// mgg::node_keep on the CPU: the keep mask of node-feature dropout (core/dropout.h), rows shared
// between threads.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "../../core/dropout.h"
#include "../node_dropout.h"

namespace mgg {
namespace {

at::Tensor node_keep_cpu(const at::Tensor& nodes, int64_t col0, int64_t col1, int64_t seed, int64_t step, int64_t layer,
                         double p) {
  check_node_keep(nodes, col0, col1, p);
  const at::Tensor ids = nodes.contiguous();
  const int64_t n = ids.numel(), cols = col1 - col0;
  at::Tensor keep = at::empty({n, cols}, ids.options().dtype(at::kBool));
  const int64_t* id = ids.data_ptr<int64_t>();
  bool* out = keep.data_ptr<bool>();
  const uint64_t stream = dropout_stream(static_cast<uint64_t>(seed), step, layer);
  const float pf = static_cast<float>(p);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(cols, 1));
  at::parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = node_keep(stream, id[i], col0 + c, pf);
    }
  });
  return keep;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) { m.impl("node_keep", &node_keep_cpu); }

}  // namespace mgg
