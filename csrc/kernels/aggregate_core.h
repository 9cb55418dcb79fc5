// The block-schedule executor of an MGG aggregation plan, on raw pointers (no torch): the CPU
// path of the mgg ops and the reference the CUDA kernels are tested against. It walks the plan
// exactly as the CUDA kernel does, block by block and warp by warp, so the host-built schedule
// that the kernel trusts is exercised on every CPU run. Header-only so that the native tests
// (CMakeLists.txt) build it without libtorch.
//
// A plan part (local or remote) is a CSR cut into neighbor partitions: partition k aggregates
// edges [part_ptr[k], part_ptr[k+1]) into output row part_row[k] (row-sorted).
//
// Block b of the schedule (one row of `blocks`, fields below) owns output rows
// [row_begin, row_end) (at most 2*wpb of them: the 2*wpb*D partial sums of MGG eq. 1), local
// partitions [local_begin, local_end) and remote partitions [remote_begin, remote_end) (at most
// wpb*dist of each). Warp w of the block takes local and remote partitions
// [begin + w*dist, begin + (w+1)*dist) as (local, remote) pairs, and adds each partition's sum
// into the block's partial of its row; the block then writes each of its rows once. A row with
// more partitions than one block holds is cut across several blocks, each with one row and a
// scratch slot (scratch >= 0); fixup h then sums scratch slots [begin, end) in order into row
// `row`, written once. Blocks with scratch < 0 write their rows to the output directly.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mgg {

enum BlockField : int { kRowBegin, kRowEnd, kLocalBegin, kLocalEnd, kRemoteBegin, kRemoteEnd, kScratch, kBlockFields };
enum FixupField : int { kFixRow, kFixBegin, kFixEnd, kFixupFields };

template <typename weight_t>
struct PlanPart {
  const int64_t* part_ptr;  // [num_parts + 1] edge offsets
  const int32_t* part_row;  // [num_parts] output row of each partition
  const int32_t* col;       // [num_edges] source row (in the table, or offset in the owner's range)
  const weight_t* weight;   // [num_edges] or nullptr (weight 1)
  const int32_t* pe;        // [num_edges] owner PE of each source row (peer sources), else nullptr
};

// Where a part's source rows live. TableSource: one table (a rank's own rows, a halo buffer).
// PeerSource: each PE's table, row `col` of PE pe[e].
template <typename scalar_t>
struct TableSource {
  const scalar_t* table;
  int64_t ld;
  const scalar_t* row(const int32_t* /*pe*/, const int32_t* col, int64_t e) const {
    return table + static_cast<int64_t>(col[e]) * ld;
  }
};

template <typename scalar_t>
struct PeerSource {
  const void* const* peers;  // [num_pes] base of each PE's table
  int64_t ld;
  const scalar_t* row(const int32_t* pe, const int32_t* col, int64_t e) const {
    return static_cast<const scalar_t*>(peers[pe[e]]) + static_cast<int64_t>(col[e]) * ld;
  }
};

// partial[0 : width) += sum over partition k's edges of w * src row, columns [d0, d0 + width).
template <typename scalar_t, typename acc_t, typename Source>
inline void accumulate_partition(const PlanPart<acc_t>& p, int64_t k, const Source& src, acc_t* partial,
                                 int64_t d0, int64_t width) {
  for (int64_t e = p.part_ptr[k]; e < p.part_ptr[k + 1]; ++e) {
    const scalar_t* x = src.row(p.pe, p.col, e) + d0;
    const acc_t w = p.weight ? static_cast<acc_t>(p.weight[e]) : acc_t(1);
    for (int64_t d = 0; d < width; ++d) partial[d] += w * static_cast<acc_t>(x[d]);
  }
}

struct Schedule {
  const int64_t* blocks;  // [num_blocks, kBlockFields]
  int64_t num_blocks;
  const int64_t* fixups;  // [num_fixups, kFixupFields]
  int64_t num_fixups;
  int64_t dist;
  int64_t wpb;
  bool interleave;  // false: each warp takes all its local partitions, then its remote ones
};

// Computes columns [d_begin, d_end) of out (row stride ld), writing each row once.
// `slots` holds 2*wpb*(d_end - d_begin) accumulators; `scratch` one row (stride ld) per slot.
template <typename scalar_t, typename acc_t, typename LocalSource, typename RemoteSource, typename out_t>
void execute_blocks(const PlanPart<acc_t>& local, const LocalSource& lsrc, const PlanPart<acc_t>& remote,
                    const RemoteSource& rsrc, const Schedule& s, int64_t ld, out_t* out, acc_t* scratch,
                    acc_t* slots, int64_t d_begin, int64_t d_end) {
  const int64_t width = d_end - d_begin;
  for (int64_t b = 0; b < s.num_blocks; ++b) {
    const int64_t* blk = s.blocks + b * kBlockFields;
    const int64_t rows = blk[kRowEnd] - blk[kRowBegin];
    std::fill(slots, slots + rows * width, acc_t(0));
    auto add = [&](const PlanPart<acc_t>& p, int64_t k, auto& src) {
      accumulate_partition<scalar_t>(p, k, src, slots + (p.part_row[k] - blk[kRowBegin]) * width, d_begin, width);
    };
    for (int64_t w = 0; w < s.wpb; ++w) {
      int64_t l = blk[kLocalBegin] + w * s.dist, r = blk[kRemoteBegin] + w * s.dist;
      const int64_t l_end = std::min(l + s.dist, blk[kLocalEnd]), r_end = std::min(r + s.dist, blk[kRemoteEnd]);
      if (s.interleave) {
        while (l < l_end || r < r_end) {
          if (l < l_end) add(local, l++, lsrc);
          if (r < r_end) add(remote, r++, rsrc);
        }
      } else {
        for (; l < l_end; ++l) add(local, l, lsrc);
        for (; r < r_end; ++r) add(remote, r, rsrc);
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      if (blk[kScratch] < 0) {
        out_t* o = out + (blk[kRowBegin] + i) * ld + d_begin;
        for (int64_t d = 0; d < width; ++d) o[d] = static_cast<out_t>(slots[i * width + d]);
      } else {
        acc_t* o = scratch + blk[kScratch] * ld + d_begin;
        for (int64_t d = 0; d < width; ++d) o[d] = slots[i * width + d];
      }
    }
  }
  for (int64_t h = 0; h < s.num_fixups; ++h) {
    const int64_t* f = s.fixups + h * kFixupFields;
    out_t* o = out + f[kFixRow] * ld + d_begin;
    for (int64_t d = 0; d < width; ++d) {
      acc_t sum = 0;
      for (int64_t j = f[kFixBegin]; j < f[kFixEnd]; ++j) sum += scratch[j * ld + d_begin + d];
      o[d] = static_cast<out_t>(sum);
    }
  }
}

// Deterministic mode's order: each output row sums its local partitions, then its remote ones,
// in plan order (what the CUDA row-owned kernel does). part_row must be row-sorted.
template <typename scalar_t, typename acc_t, typename LocalSource, typename RemoteSource, typename out_t>
void execute_rows(const PlanPart<acc_t>& local, int64_t num_local, const LocalSource& lsrc,
                  const PlanPart<acc_t>& remote, int64_t num_remote, const RemoteSource& rsrc, int64_t num_rows,
                  int64_t ld, out_t* out, acc_t* partial, int64_t d_begin, int64_t d_end) {
  const int64_t width = d_end - d_begin;
  int64_t l = 0, r = 0;
  for (int64_t row = 0; row < num_rows; ++row) {
    std::fill(partial, partial + width, acc_t(0));
    for (; l < num_local && local.part_row[l] == row; ++l)
      accumulate_partition<scalar_t>(local, l, lsrc, partial, d_begin, width);
    for (; r < num_remote && remote.part_row[r] == row; ++r)
      accumulate_partition<scalar_t>(remote, r, rsrc, partial, d_begin, width);
    out_t* o = out + row * ld + d_begin;
    for (int64_t d = 0; d < width; ++d) o[d] = static_cast<out_t>(partial[d]);
  }
}

}  // namespace mgg
