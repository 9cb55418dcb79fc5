// CPU implementations of mgg::aggregate, mgg::aggregate_peers and mgg::aggregate_extreme: the row
// kernels (row_kernels.h) over a step's row pointers and columns. The warp ranges and fixups of
// the step are the GPU's schedule and are not read here: a CPU thread owns whole rows.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../step.h"
#include "row_kernels.h"

namespace mgg {
namespace {

// The accumulation type of x's dtype: what the row kernels read weights in.
at::ScalarType accumulation_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// A part of the step (absent: no row pointer); weights converted to the accumulation type and kept
// alive in `keep`.
cpu::RowPart part_of(const Step& s, StepField rowptr, StepField col, StepField weight, at::ScalarType acc,
                     at::Tensor& keep) {
  cpu::RowPart p;
  if (!s.has(rowptr)) return p;
  p.rowptr = s[rowptr].data_ptr<int64_t>();
  p.col = s[col].data_ptr<int32_t>();
  if (s.has(weight)) {
    keep = s[weight].to(acc).contiguous();
    p.weight = keep.data_ptr();
  }
  return p;
}

// Whether a table's rows are worth prefetching (row_kernels.h).
bool worth_prefetching(const at::Tensor& table) { return cpu::prefetch_pays(table.numel() * table.element_size()); }

struct Prepared {
  cpu::RowsCall call;
  at::Tensor local_weight, remote_weight;  // the converted weights the call points into
};

Prepared prepare(const Call& c, const at::Tensor& x, const at::Tensor& out) {
  const Step& s = c.step;
  Prepared p;
  const at::ScalarType acc = accumulation_type(x);
  p.call.dtype = x.scalar_type();
  p.call.dim = x.size(1);
  p.call.local = part_of(s, kLocalRowptr, kLocalCol, kLocalWeight, acc, p.local_weight);
  p.call.local.table = x.data_ptr();
  p.call.local.prefetch = worth_prefetching(x);
  p.call.remote = part_of(s, kRemoteRowptr, kRemoteCol, kRemoteWeight, acc, p.remote_weight);
  p.call.out = out.data_ptr();
  return p;
}

at::Tensor aggregate_cpu(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params,
                         bool /*deterministic: every run is*/) {
  const Call c = check_aggregate(x, x_remote, plan, params);
  const int64_t rows = c.step.rows();
  at::Tensor out = at::empty({rows, x.size(1)}, x.options());
  if (rows == 0 || x.size(1) == 0) return out;
  Prepared p = prepare(c, x, out);
  p.call.remote.table = x_remote.data_ptr();
  p.call.remote.prefetch = worth_prefetching(x_remote);
  cpu::for_row_ranges(p.call, rows, cpu::row_kernels().sum);
  return out;
}

at::Tensor aggregate_peers_cpu(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                               at::IntArrayRef params, int64_t fetch, bool /*deterministic: every run is*/) {
  const Call c = check_aggregate_peers(x, peers, my_pe, plan, params, fetch);
  const int64_t rows = c.step.rows();
  at::Tensor out = at::empty({rows, x.size(1)}, x.options());
  if (rows == 0 || x.size(1) == 0) return out;
  std::vector<const void*> base;
  for (const auto& t : peers) base.push_back(t.data_ptr());
  Prepared p = prepare(c, x, out);
  if (c.step.has_remote()) {
    p.call.remote.pe = c.step[kRemotePe].data_ptr<int32_t>();
    p.call.remote.peers = base.data();
  }
  cpu::for_row_ranges(p.call, rows, cpu::row_kernels().sum);
  return out;
}

// Max/min (core/extreme.h).
std::tuple<at::Tensor, at::Tensor> aggregate_extreme_cpu(const at::Tensor& x, const at::Tensor& x_remote,
                                                         const PlanList& plan, at::IntArrayRef params,
                                                         c10::string_view reduce) {
  const ExtremeCall e = check_aggregate_extreme(x, x_remote, plan, params, reduce);
  const int64_t rows = e.call.step.rows();
  at::Tensor out = at::empty({rows, x.size(1)}, x.options());
  at::Tensor arg = at::empty({rows, x.size(1)}, x.options().dtype(at::kLong));
  if (rows == 0 || x.size(1) == 0) return {out, arg};
  Prepared p = prepare(e.call, x, out);
  p.call.remote.table = x_remote.data_ptr();
  p.call.arg = arg.data_ptr<int64_t>();
  p.call.is_max = e.is_max;
  p.call.remote_base = x.size(0);
  cpu::for_row_ranges(p.call, rows, cpu::row_kernels().extreme);
  return {out, arg};
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) {
  m.impl("aggregate_extreme", &aggregate_extreme_cpu);
  m.impl("aggregate", &aggregate_cpu);
  m.impl("aggregate_peers", &aggregate_peers_cpu);
}

}  // namespace mgg
