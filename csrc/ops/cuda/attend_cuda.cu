// CUDA implementations of the attention ops (GAT; ops/cpu/attend_cpu.cpp lists them): the op
// bodies of ops/device_attention.h on the current GPU and stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../device_attention.h"
#include "sources.h"

namespace mgg {
namespace {

struct Cuda {
  using Guard = c10::cuda::CUDAGuard;
  static at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) { return at::empty(sizes, options); }
  static int64_t fetch_for_checks(const char* /*op*/, int64_t fetch) { return fetch; }
  static kernels::Sources peers(const char* op, at::TensorList tables, int64_t my_pe, Fetch how,
                                kernels::Source* source) {
    return peer_sources(op, tables, my_pe, how, source);
  }
  template <typename Run>
  static void launch(const char* /*op*/, Run&& run) {
    C10_CUDA_CHECK(run(at::cuda::getCurrentCUDAStream().stream()));
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) {
  m.impl("attend", &attend_device<Cuda>);
  m.impl("attend_backward", &attend_backward_device<Cuda>);
  m.impl("attend_peers", &attend_peers_device<Cuda>);
  m.impl("attend_peers_dst", &attend_peers_dst_device<Cuda>);
  m.impl("attend_peers_src", &attend_peers_src_device<Cuda>);
}

}  // namespace mgg
