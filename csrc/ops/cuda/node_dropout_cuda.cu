// mgg::node_keep on the GPU: the keep mask of node-feature dropout (core/dropout.h), one thread an
// element, on the current stream (kernels/dropout.cu).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../core/dropout.h"
#include "../../kernels/api.h"
#include "../node_dropout.h"

namespace mgg {
namespace {

at::Tensor node_keep_cuda(const at::Tensor& nodes, int64_t col0, int64_t col1, int64_t seed, int64_t step,
                          int64_t layer, double p) {
  check_node_keep(nodes, col0, col1, p);
  c10::cuda::CUDAGuard guard(nodes.device());
  const at::Tensor ids = nodes.contiguous();
  at::Tensor keep = at::empty({ids.numel(), col1 - col0}, ids.options().dtype(at::kBool));
  if (keep.numel() == 0) return keep;
  C10_CUDA_CHECK(kernels::launch_node_keep(
      ids.data_ptr<int64_t>(), ids.numel(), col0, col1 - col0, dropout_stream(static_cast<uint64_t>(seed), step, layer),
      static_cast<float>(p), keep.data_ptr<bool>(), at::cuda::getCurrentCUDAStream().stream()));
  return keep;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("node_keep", &node_keep_cuda); }

}  // namespace mgg
