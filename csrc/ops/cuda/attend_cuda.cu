// CUDA implementations of the attention ops (GAT; ops/cpu/attend_cpu.cpp lists them): the op
// bodies of ops/device_attention.h on the current GPU and stream.
#include <torch/library.h>

#include "../device_attention.h"
#include "cuda_device.h"

namespace mgg {

TORCH_LIBRARY_IMPL(mgg, CUDA, m) {
  m.impl("attend", &attend_device<Cuda>);
  m.impl("attend_backward", &attend_backward_device<Cuda>);
  m.impl("attend_peers", &attend_peers_device<Cuda>);
  m.impl("attend_peers_dst", &attend_peers_dst_device<Cuda>);
  m.impl("attend_peers_src", &attend_peers_src_device<Cuda>);
}

}  // namespace mgg
