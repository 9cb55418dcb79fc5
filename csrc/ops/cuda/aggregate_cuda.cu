// CUDA implementations of mgg::aggregate, mgg::aggregate_peers and mgg::aggregate_extreme: the op bodies of
// ops/device_aggregate.h on the current GPU and stream, through the torch-free launchers of
// kernels/api.h.
#include <torch/library.h>

#include "../device_aggregate.h"
#include "cuda_device.h"

namespace mgg {

TORCH_LIBRARY_IMPL(mgg, CUDA, m) {
  m.impl("aggregate", &aggregate_device<Cuda>);
  m.impl("aggregate_peers", &aggregate_peers_device<Cuda>);
  m.impl("aggregate_extreme", &aggregate_extreme_device<Cuda>);
}

}  // namespace mgg
