// Max/min aggregation (mgg::aggregate_extreme): out[v, d] is the largest (smallest) x[u, d] over
// the in-neighbors u of v, local and remote, and arg[v, d] the source row that gave it, an index
// into [x | x_remote] (remote rows follow the rank's own rows); a row without in-edges gives 0
// with arg kNoArg (PyG's and torch_scatter's convention). The backward sends each output
// element's gradient to its arg only. The rule of which value wins is written once here, for the
// CPU executor (core/executor.h) and the CUDA kernel (kernels/extreme_kernel.cuh):
//   - NaN wins over any number (as torch.amax propagates NaN);
//   - between equal values (or two NaNs) the lower source index wins, so ties are deterministic
//     and do not depend on the order the edges are visited in (torch's scatter_reduce backward
//     splits a tie's gradient evenly instead; mgg gives it all to the lowest index).
// Torch-free and header-only.
#pragma once
#include <cstdint>

#include "schedule.h"

namespace mgg {

constexpr int64_t kNoArg = -1;

// Whether value v of source row `index` beats the current best (`best` from row `at`, kNoArg:
// none yet) under max (is_max) or min.
// wins: the same where a winner exists (at != kNoArg), written without branches, so that a
// loop over a row's elements vectorizes (the CPU kernels, ops/cpu/row_kernels_impl.h).
template <typename T>
MGG_HOST_DEVICE bool wins(T v, int64_t index, T best, int64_t at, bool is_max) {
  const bool v_nan = v != v, best_nan = best != best, earlier = index < at;
  const bool better = is_max ? v > best : v < best;
  return (v_nan & (!best_nan | earlier)) | (!v_nan & !best_nan & (better | ((v == best) & earlier)));
}

template <typename T>
MGG_HOST_DEVICE bool beats(T v, int64_t index, T best, int64_t at, bool is_max) {
  return at == kNoArg || wins(v, index, best, at, is_max);
}

}  // namespace mgg
