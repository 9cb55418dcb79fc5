// Reuse distances of a trace of cache units (LRU stack distances), for the order-aware L2 model
// (mgg/runtime/locality.py): for access t to unit u whose previous access was at p, the distinct
// other units accessed in (p, t) and the accesses between them, t - p - 1; -1 and -1 for a unit's
// first access. An LRU cache of C units holds u at t exactly when distinct < C (no other traffic).
// Fenwick tree over the positions that are currently the latest access of their unit: O(n log n)
// time, n + units words of memory. Torch-free.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mgg {

inline void reuse_distances(const int64_t* unit, int64_t n, int64_t num_units, int64_t* distinct, int64_t* gap) {
  std::vector<int64_t> last(static_cast<size_t>(num_units), -1);
  std::vector<int32_t> tree(static_cast<size_t>(n) + 1, 0);  // Fenwick tree, 1-based over positions
  auto add = [&](int64_t pos, int32_t v) {
    for (int64_t i = pos + 1; i <= n; i += i & -i) tree[static_cast<size_t>(i)] += v;
  };
  auto prefix = [&](int64_t pos) {  // marks at positions [0, pos]
    int64_t s = 0;
    for (int64_t i = pos + 1; i > 0; i -= i & -i) s += tree[static_cast<size_t>(i)];
    return s;
  };
  for (int64_t t = 0; t < n; ++t) {
    const int64_t u = unit[t];
    if (u < 0 || u >= num_units)
      throw std::invalid_argument("reuse_distances: unit " + std::to_string(u) + " at access " + std::to_string(t) +
                                  " outside [0, " + std::to_string(num_units) + ")");
    const int64_t p = last[static_cast<size_t>(u)];
    if (p < 0) {
      distinct[t] = gap[t] = -1;
    } else {
      distinct[t] = prefix(t - 1) - prefix(p);  // latest accesses of other units strictly between
      gap[t] = t - p - 1;
      add(p, -1);
    }
    add(t, 1);
    last[static_cast<size_t>(u)] = t;
  }
}

}  // namespace mgg
