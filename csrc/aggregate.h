// Shared declarations of the mgg aggregation ops (schemas in ops.cpp): the plan's tensors as
// the implementations receive them, and the host-side checks every implementation runs before
// anything is launched.
#pragma once
#include <ATen/ATen.h>
#include <optional>
#include <vector>

namespace mgg {

// One part of a plan (local or remote): neighbor partitions over a CSR.
struct PartArgs {
  const char* name;  // "local" or "remote"
  const at::Tensor& part_ptr;                 // int64 [parts + 1]
  const at::Tensor& part_row;                 // int32 [parts], row-sorted
  const at::Tensor& col;                      // int32 [edges]: table row, or offset in the owner's range
  const std::optional<at::Tensor>& weight;    // float [edges]
  const at::Tensor* pe = nullptr;             // int32 [edges]: owner PE (peer sources only)
};

// The block schedule (kernels/aggregate_core.h) and its launch parameters.
struct ScheduleArgs {
  const at::Tensor& blocks;  // int64 [num_blocks, 7]
  const at::Tensor& fixups;  // int64 [num_fixups, 3]
  int64_t num_rows;
  int64_t dist;
  int64_t warps_per_block;
};

// Where remote rows are read: one table of `rows` rows, or each PE's table (peer_rows[pe] rows).
struct RemoteRows {
  int64_t rows = 0;
  const std::vector<int64_t>* peer_rows = nullptr;
  int64_t my_pe = -1;
};

// Dtypes, shapes, devices, contiguity of x and the plan: cheap, no pass over the data.
void check_plan_args(const char* op, const at::Tensor& x, const PartArgs& local, const PartArgs& remote,
                     const ScheduleArgs& s);

// What the launcher needs to know of a checked plan.
struct PlanFacts {
  int64_t num_slots = 0;        // scratch rows of the heavy rows' fixups
  int64_t max_remote_part = 0;  // edges of the largest remote partition
};

// The plan's content (every index in bounds, the schedule covers every row exactly once within
// the kernel's limits), with ATen ops on the plan's device. Runs once per set of plan tensors
// (remembered by identity and version), so a plan is checked on its first use only.
PlanFacts check_plan_content(const char* op, int64_t local_src_rows, const PartArgs& local, const RemoteRows& remote_rows,
                        const PartArgs& remote, const ScheduleArgs& s);

// The row cap of a block: the 2 * wpb partial sums of MGG eq. 1.
inline int64_t block_row_cap(int64_t warps_per_block) { return 2 * warps_per_block; }

// fetch argument of aggregate_peers
enum class Fetch : int64_t { kDirect = 0, kGetThread = 1, kGetWarp = 2, kGetBlock = 3 };

// The parameters of the two ops (schemas in ops.cpp), written once for all implementations.
#define MGG_AGGREGATE_PARAMS                                                                                   \
  const at::Tensor &x, const at::Tensor &x_remote, const at::Tensor &local_part_ptr,                          \
      const at::Tensor &local_part_row, const at::Tensor &local_col, const std::optional<at::Tensor>&local_weight, \
      const at::Tensor &remote_part_ptr, const at::Tensor &remote_part_row, const at::Tensor &remote_col,      \
      const std::optional<at::Tensor>&remote_weight, const at::Tensor &blocks, const at::Tensor &fixups,       \
      int64_t num_rows, int64_t dist, int64_t warps_per_block, bool interleave, bool deterministic
#define MGG_AGGREGATE_ARGS                                                                                    \
  x, x_remote, local_part_ptr, local_part_row, local_col, local_weight, remote_part_ptr, remote_part_row,      \
      remote_col, remote_weight, blocks, fixups, num_rows, dist, warps_per_block, interleave, deterministic
#define MGG_AGGREGATE_PEERS_PARAMS                                                                            \
  const at::Tensor &x, at::TensorList peers, int64_t my_pe, const at::Tensor &local_part_ptr,                 \
      const at::Tensor &local_part_row, const at::Tensor &local_col, const std::optional<at::Tensor>&local_weight, \
      const at::Tensor &remote_part_ptr, const at::Tensor &remote_part_row, const at::Tensor &remote_offset,   \
      const at::Tensor &remote_pe, const std::optional<at::Tensor>&remote_weight, const at::Tensor &blocks,    \
      const at::Tensor &fixups, int64_t num_rows, int64_t dist, int64_t warps_per_block, bool interleave,      \
      int64_t fetch, bool deterministic
#define MGG_AGGREGATE_PEERS_ARGS                                                                              \
  x, peers, my_pe, local_part_ptr, local_part_row, local_col, local_weight, remote_part_ptr, remote_part_row,  \
      remote_offset, remote_pe, remote_weight, blocks, fixups, num_rows, dist, warps_per_block, interleave,    \
      fetch, deterministic

// One call of an op, with every check done (arguments, then the plan's content).
struct CheckedCall {
  const char* op;
  PartArgs local, remote;
  ScheduleArgs schedule;
  bool interleave;
  bool deterministic;
  PlanFacts facts;
};

CheckedCall check_aggregate_call(MGG_AGGREGATE_PARAMS);
CheckedCall check_aggregate_peers_call(MGG_AGGREGATE_PEERS_PARAMS);

}  // namespace mgg
