// Keeping the kernels' registers down: a value ptxas cannot reason about, so it can neither
// hoist what is computed from it out of a loop (and hold it for the loop's whole run: per-column
// indices, addresses) nor merge it with an earlier computation of the same. Used where the
// recomputation (an integer operation or two) is cheaper than the registers; the spills it
// removed are in bench/README.md's resource table (issue 31).
#pragma once

namespace mgg::kernels {

// x, as a value the compiler knows nothing of: an empty asm statement it may neither move nor
// merge, so what is computed from the result is computed at this point (no instruction under
// nvcc; the identity in the emulator).
__device__ __forceinline__ int opaque(int x) {
#ifndef MGG_SIMT
  asm volatile("" : "+r"(x));
#endif
  return x;
}

}  // namespace mgg::kernels
