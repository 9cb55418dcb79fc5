// Dropout of node features by a counter-based hash: element (node, column) of a layer's input at a
// training step is kept unless the hash of (seed, step, layer, node, column) falls below p. The
// draw depends on nothing a partition changes (a node's global id, not its row on a rank), so one
// process, any number of ranks and any grid drop the same elements, on the CPU and the GPU, and no
// mask is stored. The hash is splitmix64's finalizer (core/hash.h), as the attention's dropout.
#pragma once
#include <cstdint>

#include "hash.h"

namespace mgg {

// The stream of one layer's input at one step (the per-element draws below start from it).
MGG_HOST_DEVICE uint64_t dropout_stream(uint64_t seed, int64_t step, int64_t layer) {
  return mix64(mix64(seed * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(step)) ^
               (static_cast<uint64_t>(layer) * 0xd1b54a32d192ed03ull));
}

// Whether element (node, col) is kept (probability 1 - p): 24 uniform bits against p.
MGG_HOST_DEVICE bool node_keep(uint64_t stream, int64_t node, int64_t col, float p) {
  uint64_t z = mix64(stream ^ mix64(static_cast<uint64_t>(node) * 0x9e3779b97f4a7c15ull));
  z = mix64(z ^ (static_cast<uint64_t>(col) * 0xd1b54a32d192ed03ull));
  return static_cast<float>(z >> 40) * (1.f / 16777216.f) >= p;
}

}  // namespace mgg
