// The CPU executor of GAT's attention (formulas and layouts in core/attention.h): one output row
// at a time, its local edges then its remote edges in plan order, exactly as a CUDA warp walks
// it. Torch-free; accumulation in acc_t (float or double).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention.h"
#include "executor.h"

namespace mgg {

struct AttentionShape {
  int64_t heads, channels;  // H, C
  double slope;             // exact for float64 rows
  float dropout;
  uint64_t seed;
  int64_t width() const { return heads * (channels + 1); }                  // a source row
  int64_t terms_width() const { return heads * (channels + kTermFields); }  // a terms row
};

// Where a part's source rows are: one table, or each PE's table (row col[e] of PE pe[e]).
template <typename T>
struct SourceRows {
  const T* table;
  const T* const* peers;  // by PE, or nullptr
  const T* row(int64_t col, int32_t pe, int64_t width) const { return (peers ? peers[pe] : table) + col * width; }
};

// Calls f(source id, source row) for each edge of `row`: local part, then remote part.
template <typename T, typename acc_t, typename F>
inline void for_edges(const PlanPart<acc_t>& local, SourceRows<T> lsrc, const PlanPart<acc_t>& remote,
                      SourceRows<T> rsrc, const NodeIds& ids, int64_t width, int64_t row, F&& f) {
  for (int64_t e = local.rowptr[row]; e < local.rowptr[row + 1]; ++e) {
    f(ids.source(false, local.col[e], 0), lsrc.row(local.col[e], 0, width));
  }
  if (!remote.rowptr) return;
  for (int64_t e = remote.rowptr[row]; e < remote.rowptr[row + 1]; ++e) {
    const int32_t pe = remote.pe ? remote.pe[e] : 0;
    f(ids.source(true, remote.col[e], pe), rsrc.row(remote.col[e], pe, width));
  }
}

// Forward of one row: out_row [H*C] and stats_row [2H] = (max, sum of exp) per head; walk(f)
// calls f(source id, source row [H, C + 1]) for the row's edges in order.
template <typename scalar_t, typename acc_t, typename Walk>
void attend_row(Walk&& walk, const scalar_t* a_dst_row, const AttentionShape& s, int64_t row_id, scalar_t* out_row,
                acc_t* stats_row, std::vector<acc_t>& acc, std::vector<acc_t>& m, std::vector<acc_t>& sum) {
  const int64_t H = s.heads, C = s.channels;
  std::fill(acc.begin(), acc.end(), acc_t(0));
  std::fill(m.begin(), m.end(), -std::numeric_limits<acc_t>::infinity());
  std::fill(sum.begin(), sum.end(), acc_t(0));
  walk([&](int64_t src_id, const scalar_t* src) {
    for (int64_t h = 0; h < H; ++h) {
      const scalar_t* xh = src + h * (C + 1);
      const acc_t e = leaky(static_cast<acc_t>(xh[C]) + static_cast<acc_t>(a_dst_row[h]), s.slope);
      const acc_t m_new = std::max(m[h], e);
      const acc_t rescale = std::exp(m[h] - m_new), p = std::exp(e - m_new);  // exp(-inf) = 0 at the first edge
      sum[h] = sum[h] * rescale + p;
      const acc_t kept = p * dropout_keep(s.seed, row_id, src_id, h, s.dropout);
      for (int64_t c = 0; c < C; ++c) acc[h * C + c] = acc[h * C + c] * rescale + kept * static_cast<acc_t>(xh[c]);
      m[h] = m_new;
    }
  });
  for (int64_t h = 0; h < H; ++h) {
    const acc_t inv = sum[h] > 0 ? acc_t(1) / sum[h] : acc_t(0);  // a row without edges aggregates to 0
    for (int64_t c = 0; c < C; ++c) out_row[h * C + c] = static_cast<scalar_t>(acc[h * C + c] * inv);
    stats_row[h] = sum[h] > 0 ? m[h] : acc_t(0);
    stats_row[H + h] = sum[h];
  }
}

// Pass A of the backward for one row: d a_dst_row [H]. terms_row: the row's terms
// [H, C + 4] = (g, a_dst, m, s, r) per head; walk as for attend_row.
template <typename scalar_t, typename acc_t, typename Walk>
void attend_dst_row(Walk&& walk, const acc_t* terms_row, const AttentionShape& s, int64_t row_id, scalar_t* d_dst_row) {
  const int64_t H = s.heads, C = s.channels, T = C + kTermFields;
  std::vector<acc_t> d(H, acc_t(0));
  walk([&](int64_t src_id, const scalar_t* src) {
    for (int64_t h = 0; h < H; ++h) {
      const scalar_t* xh = src + h * (C + 1);
      const acc_t* th = terms_row + h * T;  // g (C), a_dst, m, s, r
      const acc_t raw = static_cast<acc_t>(xh[C]) + th[C];
      const acc_t alpha = std::exp(leaky(raw, s.slope) - th[C + 1]) / th[C + 2];
      acc_t dot = 0;
      for (int64_t c = 0; c < C; ++c) dot += th[c] * static_cast<acc_t>(xh[c]);
      const acc_t de = alpha * (dropout_keep(s.seed, row_id, src_id, h, s.dropout) * dot - th[C + 3]);
      d[h] += de * leaky_grad(raw, s.slope);
    }
  });
  for (int64_t h = 0; h < H; ++h) d_dst_row[h] = static_cast<scalar_t>(d[h]);
}

// Pass B of the backward for source row j (its row own_row [H, C + 1]): its gradient
// [H, C + 1] = (d x'_j, d a_src_j) per head. walk(f) calls f(id of output row i, terms row of i)
// for the edges j -> i (the transposed step's row j).
template <typename scalar_t, typename acc_t, typename Walk>
void attend_src_row(Walk&& walk, const scalar_t* own_row, const AttentionShape& s, int64_t row_id, scalar_t* grad_row) {
  const int64_t H = s.heads, C = s.channels, T = C + kTermFields;
  std::vector<acc_t> dx(H * C, acc_t(0)), da(H, acc_t(0));
  walk([&](int64_t dst_id, const acc_t* terms) {
    for (int64_t h = 0; h < H; ++h) {
      const scalar_t* xh = own_row + h * (C + 1);
      const acc_t* th = terms + h * T;
      const acc_t raw = static_cast<acc_t>(xh[C]) + th[C];
      const acc_t alpha = std::exp(leaky(raw, s.slope) - th[C + 1]) / th[C + 2];
      const acc_t keep = dropout_keep(s.seed, dst_id, row_id, h, s.dropout);
      acc_t dot = 0;
      for (int64_t c = 0; c < C; ++c) dot += th[c] * static_cast<acc_t>(xh[c]);
      const acc_t de = alpha * (keep * dot - th[C + 3]);
      da[h] += de * leaky_grad(raw, s.slope);
      for (int64_t c = 0; c < C; ++c) dx[h * C + c] += alpha * keep * th[c];
    }
  });
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t c = 0; c < C; ++c) grad_row[h * (C + 1) + c] = static_cast<scalar_t>(dx[h * C + c]);
    grad_row[h * (C + 1) + C] = static_cast<scalar_t>(da[h]);
  }
}

}  // namespace mgg
