// The block schedule of an MGG aggregation step and the walk over it, shared by the CPU
// executor (core/executor.h) and the CUDA kernels (kernels/aggregate_kernel.cuh). Torch-free;
// the walk is host-device.
//
// A step aggregates into `rows` output rows from two parts, local and remote, each a CSR whose
// row r lists the edges into output row r. A part's row of degree d is cut into
// num_parts(d, ps) neighbor partitions of at most ps edges (MGG's LNPs and RNPs); partitions
// are numbered in row order, so they are implied by the CSR and ps and never stored.
//
// Block b of the schedule (one row of `blocks`, fields BlockField) owns output rows
// [row_begin, row_end) (at most 2 * wpb: the partial sums of MGG eq. 1), local partitions
// [local_begin, local_end) and remote partitions [remote_begin, remote_end) (at most wpb * dist
// of each). local_first and remote_first are the numbers of the first partition of row_begin
// in each part. Warp w of the block takes partitions [begin + w * dist, begin + (w + 1) * dist)
// of each part and works through them as (local, remote) pairs (MGG's interleaved mapping),
// adding each partition into the block's partial sum of its row; the block then writes each of
// its rows once. A row with more partitions than a block holds is cut across several blocks,
// each with that one row and a scratch slot (scratch >= 0); fixup h then sums the scratch slots
// [slot_begin, slot_end) in order into row `row`, written once. Blocks with scratch < 0 write
// their rows to the output directly.
#pragma once
#include <cstdint>

#include "limits.h"

#if defined(__CUDACC__)
#define MGG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MGG_HOST_DEVICE inline
#endif

namespace mgg {

enum BlockField : int {
  kRowBegin,
  kRowEnd,
  kLocalBegin,
  kLocalEnd,
  kRemoteBegin,
  kRemoteEnd,
  kScratch,
  kLocalFirst,
  kRemoteFirst,
  kBlockFields
};
inline constexpr const char* kBlockFieldNames[kBlockFields] = {"row_begin", "row_end",      "local_begin",
                                                               "local_end", "remote_begin", "remote_end",
                                                               "scratch",   "local_first",  "remote_first"};

enum FixupField : int { kFixRow, kFixBegin, kFixEnd, kFixupFields };
inline constexpr const char* kFixupFieldNames[kFixupFields] = {"row", "slot_begin", "slot_end"};

// Partitions of a row of `deg` edges at partition size ps (ps = 0: the whole row is one).
MGG_HOST_DEVICE int64_t num_parts(int64_t deg, int64_t ps) { return ps == 0 ? (deg > 0 ? 1 : 0) : (deg + ps - 1) / ps; }

// Output rows of one block: the 2 * wpb partial sums of MGG eq. 1.
MGG_HOST_DEVICE int64_t block_row_cap(int64_t wpb) { return 2 * wpb; }

// Neighbor partition: edges [begin, end) of a part, all into output row `row`. Index is int64_t
// on the host (the executor); the kernels walk with int32_t (kMaxKernelIndex: fewer registers).
template <typename Index>
struct BasicPartition {
  Index row, begin, end;
};

// Walks partitions [k, k_end) of one part in order, starting from a row whose first
// partition is number `row_first`. Rows without partitions are passed over.
template <typename Index>
class BasicPartWalk {
 public:
  MGG_HOST_DEVICE BasicPartWalk(const int64_t* rowptr, int64_t ps, int64_t row, int64_t row_first, int64_t k,
                                int64_t k_end)
      : rowptr_(rowptr),
        ps_(static_cast<Index>(ps)),
        row_(static_cast<Index>(row)),
        first_(static_cast<Index>(row_first)),
        k_(static_cast<Index>(k)),
        k_end_(static_cast<Index>(k_end)) {
    if (k_ < k_end_) load_row();
  }
  MGG_HOST_DEVICE bool done() const { return k_ >= k_end_; }
  // The next partition; call only while !done().
  MGG_HOST_DEVICE BasicPartition<Index> next() {
    while (k_ >= first_ + parts_) {
      first_ += parts_;
      ++row_;
      load_row();
    }
    const Index j = k_++ - first_;
    if (ps_ == 0) return {row_, begin_, end_};
    const Index b = begin_ + j * ps_;
    return {row_, b, b + ps_ < end_ ? b + ps_ : end_};
  }

 private:
  MGG_HOST_DEVICE void load_row() {
    begin_ = static_cast<Index>(rowptr_[row_]);
    end_ = static_cast<Index>(rowptr_[row_ + 1]);
    parts_ = static_cast<Index>(num_parts(end_ - begin_, ps_));
  }
  const int64_t* rowptr_;
  Index ps_, row_, first_, k_, k_end_;
  Index begin_ = 0, end_ = 0, parts_ = 0;
};

using Partition = BasicPartition<int64_t>;
using PartWalk = BasicPartWalk<int64_t>;

// Warp w's partitions of one part of block `blk` (a row of the schedule).
template <typename Index = int64_t>
MGG_HOST_DEVICE BasicPartWalk<Index> warp_walk(const int64_t* blk, bool remote, const int64_t* rowptr, int64_t ps,
                                               int64_t dist, int64_t w) {
  const int64_t begin = blk[remote ? kRemoteBegin : kLocalBegin] + w * dist;
  const int64_t end = blk[remote ? kRemoteEnd : kLocalEnd];
  return BasicPartWalk<Index>(rowptr, ps, blk[kRowBegin], blk[remote ? kRemoteFirst : kLocalFirst], begin,
                              begin + dist < end ? begin + dist : end);
}

}  // namespace mgg
