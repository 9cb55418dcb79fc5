// The mgg ops' view of a plan step (layout in core/step_layout.h) and the host-side checks that
// every implementation runs before anything executes. Schemas are in schema.cpp.
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <vector>

#include "../core/attention.h"
#include "../core/limits.h"
#include "../core/step_layout.h"

namespace mgg {

// The op's argument types for a plan and its parameters.
using PlanList = c10::List<std::optional<at::Tensor>>;

// One step of a plan: its tensors (absent ones undefined) and its parameters.
struct Step {
  std::array<at::Tensor, kStepFields> t;
  int64_t ps = 0, dist = 1, wpb = 1, num_slots = 0, landing_rows = 1;
  bool interleave = true;

  const at::Tensor& operator[](StepField f) const { return t[f]; }
  bool has(StepField f) const { return t[f].defined(); }
  bool has_remote() const { return has(kRemoteRowptr); }
  int64_t rows() const { return t[kLocalRowptr].size(0) - 1; }
};

// Where a step's remote rows are read: one table of `rows` rows, or each PE's table.
struct RemoteRows {
  int64_t rows = 0;
  const std::vector<int64_t>* peer_rows = nullptr;  // rows of each PE's table (aggregate_peers)
  int64_t my_pe = -1;
};

// Step `index` (0: forward, 1: transposed) of an op's plan and params lists; `required` makes an
// absent step an error, otherwise an absent step comes back with no local row pointer.
Step step_of(const char* op, const PlanList& plan, at::IntArrayRef params, int index, bool required);

// A checked call of an op: the forward step, checked against x and the remote sources (dtypes,
// shapes, devices cheaply on every call; the content, every index and the schedule, once per
// set of plan tensors). Every aggregation is deterministic (core/schedule.h); the ops keep their
// `deterministic` argument for the callers that pass it.
struct Call {
  const char* op;
  Step step;
};

// Every PE's table, listed in PE order (1 to kMaxPes of them): the table of my_pe, checked to be one.
const at::Tensor& own_table(const char* op, at::TensorList tables, int64_t my_pe);

// A fetch policy (mgg._C.FETCH) that can run on x's device; returns whether it is uva.
bool check_fetch(const char* op, int64_t fetch, const at::Tensor& x);

Call check_aggregate(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params);
// A checked call of aggregate_extreme (core/extreme.h): the aggregate checks, an unweighted plan
// and reduce "max" or "min" (is_max).
struct ExtremeCall {
  Call call;
  bool is_max;
};
ExtremeCall check_aggregate_extreme(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan,
                                    at::IntArrayRef params, c10::string_view reduce);
Call check_aggregate_peers(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                           at::IntArrayRef params, int64_t fetch);

// A checked call of an attention op (GAT; core/attention.h): its step(s), the heads and
// channels of its source rows, and the global ids its dropout is drawn with (NodeIds; pointers
// into the call's tensors on the call's device).
struct AttentionCall {
  const char* op;
  Step step, step_t;  // step_t: the table backward's transposed step (rows: [x | x_remote])
  int64_t heads, channels;
  NodeIds ids, ids_t;  // ids_t: the transposed step's (its rows are sources, its sources rows)
};

// Sources from tables: x [rows of the rank, H*(C+1)], x_remote [halo rows, same]; a_dst
// [output rows, H]; ids: optional int64 global ids of [x | x_remote]'s rows (default: their
// positions), row_offset: the global id of output row 0. need_transposed: the backward's call.
AttentionCall check_attend(const char* op, const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
                           const PlanList& plan, at::IntArrayRef params, int64_t heads, double dropout,
                           const std::optional<at::Tensor>& ids, int64_t row_offset, bool need_transposed);

// Sources named by owner PE: own [rows, width] (this PE's table, the local sources and the rows
// the call's outputs are for), tables[pe] every PE's table of the same width and dtype (pass B:
// the terms tables); offsets[pe]: the global id of PE pe's first row. extra_per_head: the
// table's columns per head after C: 1 (source rows) or kTermFields (terms).
AttentionCall check_attend_peers(const char* op, const at::Tensor& own, at::TensorList tables, int64_t my_pe,
                                 const PlanList& plan, at::IntArrayRef params, int64_t heads, double dropout,
                                 at::IntArrayRef offsets, int64_t fetch, int64_t extra_per_head);

// The content of a step (every index in bounds; the schedule is the one its row pointers, ps and
// dist give, core/range_schedule.h), with ATen ops on the step's device. Remembered by the
// tensors' identity and version counters, so a plan is checked on its first use on a device only.
void check_step_content(const char* op, const Step& s, int64_t local_rows, const RemoteRows& remote);

}  // namespace mgg
