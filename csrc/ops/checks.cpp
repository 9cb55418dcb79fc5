// The per-call checks of the mgg ops: dtypes, shapes, devices and contiguity of x, the remote
// sources and the plan's tensors (cheap, no pass over the data), then the content check
// (plan_check.cpp), which runs once per set of plan tensors.
#include <string>

#include "../core/attention.h"
#include "../core/schedule.h"
#include "step.h"

namespace mgg {
namespace {

std::string field(const char* name, int index) { return index == 0 ? name : std::string(name) + " (transposed)"; }

void check_index(const char* op, const at::Tensor& t, const std::string& name, at::ScalarType dtype,
                 const at::Device& dev) {
  TORCH_CHECK(t.dim() == 1, op, ": ", name, " must be 1-D, got ", t.dim(), "-D");
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
  TORCH_CHECK(t.device() == dev, op, ": every plan tensor must be on ", dev, " like x; found ", name, " on ",
              t.device());
}

void check_part(const char* op, const Step& s, StepField rowptr, StepField col, StepField weight, int64_t rows,
                const at::Device& dev, int index) {
  const std::string n = field(kStepFieldNames[rowptr], index);
  check_index(op, s[rowptr], n, at::kLong, dev);
  TORCH_CHECK(s[rowptr].size(0) == rows + 1, op, ": ", n, " has ", s[rowptr].size(0), " entries, expected ", rows + 1,
              " (one more than local_rowptr's rows)");
  TORCH_CHECK(s.has(col), op, ": ", field(kStepFieldNames[col], index), " is missing");
  check_index(op, s[col], field(kStepFieldNames[col], index), at::kInt, dev);
  if (s.has(weight)) {
    const at::Tensor& w = s[weight];
    const std::string wn = field(kStepFieldNames[weight], index);
    TORCH_CHECK(w.dim() == 1 && w.numel() == s[col].numel(), op, ": ", wn, " must be 1-D with one entry per edge (",
                s[col].numel(), "), got shape ", w.sizes());
    TORCH_CHECK(w.scalar_type() == at::kFloat || w.scalar_type() == at::kDouble, op, ": ", wn,
                " must be float32 or float64, got ", w.scalar_type());
    TORCH_CHECK(w.is_contiguous() && w.device() == dev, op, ": ", wn, " must be contiguous and on ", dev);
  }
}

// A source table: like x, on x's device (or, host_pinned, in pinned host memory).
void check_table(const char* op, const at::Tensor& t, const std::string& name, const at::Tensor& x,
                 bool host_pinned = false) {
  TORCH_CHECK(t.dim() == 2 && t.size(1) == x.size(1), op, ": ", name, " must be 2-D with the same dim as x (",
              x.size(1), "), got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", name, " dtype ", t.scalar_type(), " differs from x dtype ",
              x.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
  if (host_pinned) {
    TORCH_CHECK(t.is_cpu() && t.is_pinned(), op, ": fetch 'uva' reads ", name,
                " from pinned host memory, but it is not a pinned CPU tensor (tensor.pin_memory())");
    return;
  }
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, " must be on ", x.device(), " like x, found ", t.device());
}

void check_x(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, op, ": x must be 2-D [nodes, dim], got ", x.dim(), "-D");
  const auto st = x.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16, op,
              ": x must be float32, float64, float16 or bfloat16, got ", st);
  TORCH_CHECK(x.is_contiguous(), op, ": x must be contiguous");
}

// Dtypes, shapes and devices of a step (not its content).
void check_step_args(const char* op, const Step& s, const at::Device& dev, bool peers) {
  TORCH_CHECK(s.ps >= 0 && s.ps <= kPsMax, op, ": ps must be in [", kPsMin, ", ", kPsMax, "] or 0, got ", s.ps);
  TORCH_CHECK(s.dist >= kDistMin && s.dist <= kDistMax, op, ": dist must be in [", kDistMin, ", ", kDistMax, "], got ",
              s.dist);
  TORCH_CHECK(s.wpb >= kWpbMin && s.wpb <= kWpbMax, op, ": warps_per_block must be in [", kWpbMin, ", ", kWpbMax,
              "], got ", s.wpb);
  TORCH_CHECK(s.num_slots >= 0, op, ": num_slots must be >= 0, got ", s.num_slots);
  TORCH_CHECK(s.landing_rows >= 1 && s.landing_rows <= kChunk, op, ": landing_rows must be in [1, ", kChunk, "], got ",
              s.landing_rows);
  check_index(op, s[kLocalRowptr], "local_rowptr", at::kLong, dev);
  const int64_t rows = s.rows();
  TORCH_CHECK(rows >= 0, op, ": local_rowptr must have at least one entry");
  check_part(op, s, kLocalRowptr, kLocalCol, kLocalWeight, rows, dev, 0);
  if (s.has_remote()) {
    check_part(op, s, kRemoteRowptr, kRemoteCol, kRemoteWeight, rows, dev, 0);
    if (peers) {
      TORCH_CHECK(s.has(kRemotePe), op, ": remote_pe is missing (aggregate_peers names each remote row's PE)");
      check_index(op, s[kRemotePe], "remote_pe", at::kInt, dev);
      TORCH_CHECK(s[kRemotePe].numel() == s[kRemoteCol].numel(), op, ": remote_pe must have one entry per remote ",
                  "edge (", s[kRemoteCol].numel(), "), got ", s[kRemotePe].numel());
    }
  }
  if (dev.is_cuda()) {  // the kernels hold rows and carry slots in 32 bits (core/limits.h)
    TORCH_CHECK(rows <= kMaxKernelIndex, op, ": the step has ", rows, " rows; the CUDA kernels take at most ",
                kMaxKernelIndex, " (use more ranks)");
    TORCH_CHECK(s.num_slots <= kMaxKernelIndex, op, ": the step has ", s.num_slots,
                " carry rows; the CUDA kernels take at most ", kMaxKernelIndex, " (raise ps * dist)");
  }
  for (StepField f : {kRanges, kFixups}) {
    TORCH_CHECK(s.has(f), op, ": ", kStepFieldNames[f], " is missing");
    const int64_t width = f == kRanges ? kRangeFields : kFixupFields;
    const at::Tensor& t = s[f];
    TORCH_CHECK(t.dim() == 2 && t.size(1) == width && t.scalar_type() == at::kLong && t.is_contiguous(), op, ": ",
                kStepFieldNames[f], " must be a contiguous int64 tensor [n, ", width, "], got ", t.scalar_type(), " ",
                t.sizes());
    TORCH_CHECK(t.device() == dev, op, ": every plan tensor must be on ", dev, " like x; found ", kStepFieldNames[f],
                " on ", t.device());
  }
}

}  // namespace

Step step_of(const char* op, const PlanList& plan, at::IntArrayRef params, int index, bool required) {
  TORCH_CHECK(plan.size() == 2 * kStepFields, op, ": plan must list ", 2 * kStepFields,
              " tensors (a step and its transposed step, fields mgg._C.STEP_FIELDS), got ", plan.size());
  TORCH_CHECK(params.size() == 2 * kStepParams, op, ": params must list ", 2 * kStepParams,
              " integers (mgg._C.STEP_PARAMS twice), got ", params.size());
  Step s;
  for (int f = 0; f < kStepFields; ++f) {
    const std::optional<at::Tensor> t = plan.get(index * kStepFields + f);
    if (t.has_value()) s.t[f] = *t;
  }
  TORCH_CHECK(!required || s.has(kLocalRowptr), op, ": the plan has no ", index == 0 ? "forward" : "transposed",
              " step (local_rowptr is None)");
  const int64_t* p = params.data() + index * kStepParams;
  s.ps = p[kPs];
  s.dist = p[kDist];
  s.wpb = p[kWpb];
  s.interleave = p[kInterleave] != 0;
  s.num_slots = p[kNumSlots];
  s.landing_rows = p[kLandingRows];
  return s;
}

Call check_aggregate(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params) {
  Call c{"mgg.aggregate", step_of("mgg.aggregate", plan, params, 0, true)};
  check_x(c.op, x);
  check_table(c.op, x_remote, "x_remote", x);
  check_step_args(c.op, c.step, x.device(), false);
  check_step_content(c.op, c.step, x.size(0), RemoteRows{x_remote.size(0)});
  return c;
}

ExtremeCall check_aggregate_extreme(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan,
                                    at::IntArrayRef params, c10::string_view reduce) {
  const char* op = "mgg.aggregate_extreme";
  TORCH_CHECK(reduce == "max" || reduce == "min", op, ": reduce must be 'max' or 'min', got '", reduce, "'");
  Call c{op, step_of(op, plan, params, 0, true)};
  check_x(op, x);
  check_table(op, x_remote, "x_remote", x);
  check_step_args(op, c.step, x.device(), false);
  TORCH_CHECK(!c.step.has(kLocalWeight) && !c.step.has(kRemoteWeight), op,
              ": the plan has edge weights, but max/min aggregation takes none (plan the graph without weights)");
  check_step_content(op, c.step, x.size(0), RemoteRows{x_remote.size(0)});
  return {c, reduce == "max"};
}

namespace {

// The heads and channels of an attention call's tables [rows, H * (C + extra)], C >= 1.
int64_t channels_of(const char* op, const at::Tensor& t, int64_t heads, int64_t extra, const char* what) {
  TORCH_CHECK(heads >= 1 && heads <= kMaxHeads, op, ": heads must be in [1, ", kMaxHeads, "], got ", heads);
  TORCH_CHECK(t.dim() == 2 && t.size(1) % heads == 0 && t.size(1) / heads > extra, op, ": ", what, " must be [rows, ",
              heads, " * (channels + ", extra, ")] (per head its features then ",
              extra == 1 ? "its source term" : "its terms", "), got ", t.sizes());
  return t.size(1) / heads - extra;
}

void check_dropout(const char* op, double dropout) {
  TORCH_CHECK(dropout >= 0.0 && dropout < 1.0, op, ": dropout must be in [0, 1), got ", dropout);
}

void check_unweighted(const char* op, const Step& s) {
  TORCH_CHECK(!s.has(kLocalWeight) && !s.has(kRemoteWeight), op,
              ": the plan has edge weights, but attention computes its own (plan the graph without weights)");
}

NodeIds positions(const int64_t* ids, int64_t base, int64_t remote_at) {
  NodeIds n{};
  n.local = {ids, base};
  n.remote = {ids ? ids + remote_at : nullptr, ids ? 0 : base + remote_at};
  return n;
}

}  // namespace

AttentionCall check_attend(const char* op, const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
                           const PlanList& plan, at::IntArrayRef params, int64_t heads, double dropout,
                           const std::optional<at::Tensor>& ids, int64_t row_offset, bool need_transposed) {
  AttentionCall c{op, step_of(op, plan, params, 0, true), step_of(op, plan, params, 1, need_transposed), heads, 0, {},
                  {}};
  check_x(op, x);
  c.channels = channels_of(op, x, heads, 1, "x");
  check_dropout(op, dropout);
  check_table(op, x_remote, "x_remote", x);
  check_step_args(op, c.step, x.device(), false);
  check_unweighted(op, c.step);
  TORCH_CHECK(a_dst.dim() == 2 && a_dst.size(0) == c.step.rows() && a_dst.size(1) == heads, op, ": a_dst must be [",
              c.step.rows(), ", ", heads, "] (the output rows' destination terms), got ", a_dst.sizes());
  TORCH_CHECK(a_dst.scalar_type() == x.scalar_type() && a_dst.device() == x.device() && a_dst.is_contiguous(), op,
              ": a_dst must be a contiguous ", x.scalar_type(), " tensor on ", x.device());
  const int64_t sources = x.size(0) + x_remote.size(0);
  const int64_t* id = nullptr;
  if (ids.has_value()) {
    check_index(op, *ids, "ids", at::kLong, x.device());
    TORCH_CHECK(ids->numel() == sources, op, ": ids must give a global id to each row of x and x_remote (", sources,
                "), got ", ids->numel());
    id = ids->data_ptr<int64_t>();
  }
  check_step_content(op, c.step, x.size(0), RemoteRows{x_remote.size(0)});
  c.ids = positions(id, 0, x.size(0));
  c.ids.rows = {nullptr, row_offset};
  if (need_transposed) {  // its rows: x's rows then x_remote's; its sources: the output rows
    check_step_args(op, c.step_t, x.device(), false);
    TORCH_CHECK(c.step_t.rows() == sources && !c.step_t.has_remote(), op, ": the transposed step must have a row per ",
                "source (", sources, ") and no remote part, got ", c.step_t.rows(), " rows");
    check_unweighted(op, c.step_t);
    check_step_content(op, c.step_t, c.step.rows(), RemoteRows{0});
    c.ids_t = positions(nullptr, row_offset, 0);
    c.ids_t.rows = {id, 0};
  }
  return c;
}

const at::Tensor& own_table(const char* op, at::TensorList tables, int64_t my_pe) {
  TORCH_CHECK(!tables.empty() && static_cast<int64_t>(tables.size()) <= kMaxPes, op, ": every PE's table must be ",
              "listed (1 to ", kMaxPes, " PEs), got ", tables.size());
  TORCH_CHECK(my_pe >= 0 && my_pe < static_cast<int64_t>(tables.size()), op, ": my_pe ", my_pe, " is outside [0, ",
              tables.size(), ")");
  return tables[my_pe];
}

bool check_fetch(const char* op, int64_t fetch, const at::Tensor& x) {
  TORCH_CHECK(fetch >= 0 && fetch < kNumFetch, op, ": fetch must be 0 (direct), 1 (get, thread), 2 (get, warp), ",
              "3 (get, block) or 4 (uva), got ", fetch);
  const bool uva = fetch == static_cast<int64_t>(Fetch::kUva);
  TORCH_CHECK(fetch == static_cast<int64_t>(Fetch::kDirect) || x.is_cuda(), op, ": fetch '", kFetchNames[fetch],
              uva ? "' reads pinned host memory from a GPU kernel" : "' is an NVSHMEM get",
              ", which needs CUDA tensors; on the CPU use fetch 'direct'");
  return uva;
}

AttentionCall check_attend_peers(const char* op, const at::Tensor& own, at::TensorList tables, int64_t my_pe,
                                 const PlanList& plan, at::IntArrayRef params, int64_t heads, double dropout,
                                 at::IntArrayRef offsets, int64_t fetch, int64_t extra_per_head) {
  AttentionCall c{op, step_of(op, plan, params, 0, true), Step{}, heads, 0, {}, {}};
  const bool uva = check_fetch(op, fetch, own);
  check_x(op, own);
  check_dropout(op, dropout);
  const at::Tensor& mine = own_table(op, tables, my_pe);
  c.channels = channels_of(op, mine, heads, extra_per_head, "tables[my_pe]");
  TORCH_CHECK(own.size(1) == heads * (c.channels + 1), op, ": the source rows must be [rows, ",
              heads * (c.channels + 1), "], got ", own.sizes());
  if (extra_per_head == 1) check_table(op, own, "x", mine);
  std::vector<int64_t> rows;
  for (size_t i = 0; i < tables.size(); ++i) {
    check_table(op, tables[i], "tables[" + std::to_string(i) + "]", mine, uva && static_cast<int64_t>(i) != my_pe);
    rows.push_back(tables[i].size(0));
  }
  TORCH_CHECK(own.device() == mine.device(), op, ": the source rows must be on ", mine.device());
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == static_cast<int64_t>(tables.size()) + 1, op,
              ": offsets must give each PE's first global id and the end (", tables.size() + 1, " entries), got ",
              offsets.size());
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    TORCH_CHECK(offsets[i + 1] - offsets[i] >= rows[i], op, ": offsets give PE ", i, " ", offsets[i + 1] - offsets[i],
                " ids but its table has ", rows[i], " rows");
  }
  check_step_args(op, c.step, own.device(), true);
  check_unweighted(op, c.step);
  TORCH_CHECK(c.step.rows() == own.size(0), op, ": the step has ", c.step.rows(), " rows but x has ", own.size(0));
  check_step_content(op, c.step, mine.size(0), RemoteRows{0, &rows, my_pe});
  c.ids.rows = {nullptr, offsets[my_pe]};
  c.ids.local = {nullptr, offsets[my_pe]};
  c.ids.by_pe = true;
  for (size_t i = 0; i < tables.size(); ++i) c.ids.pe_base[i] = offsets[i];
  return c;
}

Call check_aggregate_peers(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                           at::IntArrayRef params, int64_t fetch) {
  Call c{"mgg.aggregate_peers", step_of("mgg.aggregate_peers", plan, params, 0, true)};
  const bool uva = check_fetch(c.op, fetch, x);
  check_x(c.op, x);
  own_table(c.op, peers, my_pe);
  std::vector<int64_t> peer_rows;
  for (size_t i = 0; i < peers.size(); ++i) {
    check_table(c.op, peers[i], "peers[" + std::to_string(i) + "]", x, uva && static_cast<int64_t>(i) != my_pe);
    peer_rows.push_back(peers[i].size(0));
  }
  check_step_args(c.op, c.step, x.device(), true);
  check_step_content(c.op, c.step, x.size(0), RemoteRows{0, &peer_rows, my_pe});
  return c;
}

}  // namespace mgg
