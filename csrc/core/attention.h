// GAT's attention over a plan step (Veličković et al.; PyG's GATConv), torch-free and shared by
// the CPU executor (core/attention_executor.h) and the CUDA kernels (kernels/attention_kernel.cuh).
//
// Tables. A source row holds, for each of the H heads, its C features x'_j then its source term
// a_src_j: [H, C + 1] flattened, so one fetch of a group of whole heads brings both (the source
// term travels with the row). Output row i has its destination terms a_dst_i [H].
//
// Forward, per output row i and head h, over the row's edges (local part, then remote part, in
// plan order: the row-owned traversal, so every row is written once and runs are deterministic):
//   e_ij   = leaky_relu(a_src_j + a_dst_i, slope)
//   m_i    = max_j e_ij,  s_i = sum_j exp(e_ij - m_i)           (max-subtracted softmax)
//   alpha  = exp(e_ij - m_i) / s_i,  kept = alpha * keep_ij     (dropout on the coefficients)
//   out_i  = sum_j kept_ij x'_j
// computed in one pass with an online softmax (running max and sum, rescaled accumulators);
// (m_i, s_i) are kept as the row's statistics for the backward pass.
//
// Backward, with g_i the gradient of out_i and r_i = <g_i, out_i> per head:
//   dot_ij = <g_i, x'_j>,  de_ij = alpha_ij (keep_ij dot_ij - r_i),  dz_ij = de_ij * leaky'(a_src_j + a_dst_i)
//   d a_dst_i = sum_j dz_ij                       (pass A: the forward step, row i)
//   d a_src_j = sum_i dz_ij,  d x'_j = sum_i kept_ij g_i   (pass B: the transposed step, row j)
// Both passes read the output rows' terms: per head [g_i (C) | a_dst_i | m_i | s_i | r_i], a
// table of [H, C + 4] per row in the accumulation type, which pass B fetches like any source
// table (for the nvshmem backend, from its owner's symmetric memory).
//
// Dropout: keep_ij is 0 with probability p, else 1/(1-p), drawn from a counter-based hash of
// (seed, global id of i, global id of j, h): the same draw on the CPU and the GPU, in the forward
// and backward passes, and on any number of ranks, without storing a mask. Each op maps its row
// and source indices to global node ids (NodeIds).
#pragma once
#include <cstdint>

#include "hash.h"
#include "limits.h"
#include "schedule.h"

namespace mgg {

constexpr int kMaxHeads = 64;   // heads per attention call (registers and shared memory per warp)
constexpr int kTermFields = 4;  // a_dst, m, s, r: the terms table's columns per head after g

template <typename T, typename S>
MGG_HOST_DEVICE T leaky(T v, S slope) {
  return v >= T(0) ? v : v * static_cast<T>(slope);
}
template <typename T, typename S>
MGG_HOST_DEVICE T leaky_grad(T v, S slope) {  // at v = 0 the slope, as torch's leaky_relu_backward
  return v > T(0) ? T(1) : static_cast<T>(slope);
}

// The dropout factor of edge src -> dst (global node ids) and head: 0, or 1 / (1 - p).
MGG_HOST_DEVICE float dropout_keep(uint64_t seed, int64_t dst, int64_t src, int64_t head, float p) {
  if (p <= 0.f) return 1.f;
  uint64_t z = mix64(seed ^ mix64(static_cast<uint64_t>(dst) * 0x9e3779b97f4a7c15ull));
  z = mix64(z ^ (static_cast<uint64_t>(src) * 0xd1b54a32d192ed03ull) ^ static_cast<uint64_t>(head));
  const float u = static_cast<float>(z >> 40) * (1.f / 16777216.f);  // 24 uniform bits in [0, 1)
  return u < p ? 0.f : 1.f / (1.f - p);
}

// Index -> global node id: ids[k] where an id table is given, else base + k.
struct IdMap {
  const int64_t* ids;
  int64_t base;
  MGG_HOST_DEVICE int64_t operator()(int64_t k) const { return ids ? ids[k] : base + k; }
};

// The global ids an attention call draws its dropout with: the rows it writes, and its sources
// (local ones by their table row; remote ones by their row in one remote table, or, where the
// sources are named by owner PE, by the PE's first id plus the row in its table).
struct NodeIds {
  IdMap rows, local, remote;
  bool by_pe;
  int64_t pe_base[kMaxPes];
  MGG_HOST_DEVICE int64_t source(bool is_remote, int64_t col, int32_t pe) const {
    if (!is_remote) return local(col);
    return by_pe ? pe_base[pe] + col : remote(col);
  }
};

}  // namespace mgg
