// The counter-based hash mgg's dropout draws come from (core/attention.h's attention dropout,
// core/dropout.h's node-feature dropout): splitmix64's finalizer.
#pragma once
#include <cstdint>

#include "schedule.h"  // MGG_HOST_DEVICE

namespace mgg {

MGG_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mgg
