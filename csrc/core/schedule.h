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

// Walks partitions [k, k_end) of one part in order, starting from a row whose first partition
// is number `row_first`. Rows without partitions are passed over. The part's rowptr and ps are
// passed to each call rather than kept (in the kernels they are launch arguments, and the walk
// state is registers): five indices.
template <typename Index>
class BasicPartWalk {
 public:
  MGG_HOST_DEVICE BasicPartWalk(const int64_t* rowptr, int64_t ps, int64_t row, int64_t row_first, int64_t k,
                                int64_t k_end)
      : row_(static_cast<Index>(row)), remaining_(static_cast<Index>(k < k_end ? k_end - k : 0)) {
    if (remaining_ == 0) return;
    Index skip = static_cast<Index>(k - row_first);  // partitions before k, from the start of row
    load_row(rowptr, ps);
    while (skip >= left_) {
      skip -= left_;
      ++row_;
      load_row(rowptr, ps);
    }
    left_ -= skip;
    next_begin_ += skip * static_cast<Index>(ps);  // ps = 0: a row is one partition, skip is 0
  }
  MGG_HOST_DEVICE bool done() const { return remaining_ == 0; }
  // The next partition; call only while !done(), with the rowptr and ps it was made with.
  MGG_HOST_DEVICE BasicPartition<Index> next(const int64_t* rowptr, int64_t ps) {
    while (left_ == 0) {
      ++row_;
      load_row(rowptr, ps);
    }
    const Index b = next_begin_, p = static_cast<Index>(ps);
    const Index e = p == 0 || end_ - b <= p ? end_ : b + p;
    next_begin_ = e;
    --left_;
    --remaining_;
    return {row_, b, e};
  }

 private:
  MGG_HOST_DEVICE void load_row(const int64_t* rowptr, int64_t ps) {
    next_begin_ = static_cast<Index>(rowptr[row_]);
    end_ = static_cast<Index>(rowptr[row_ + 1]);
    left_ = static_cast<Index>(num_parts(end_ - next_begin_, ps));
  }
  Index row_, remaining_;           // the row of the next partition; partitions still to walk
  Index left_ = 0;                  // partitions of row_ not yet walked
  Index next_begin_ = 0, end_ = 0;  // the next partition's first edge; row_'s end
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
