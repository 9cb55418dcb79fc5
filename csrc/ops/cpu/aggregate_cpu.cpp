// CPU implementations of mgg::aggregate and mgg::aggregate_peers: they execute the step's warp
// ranges (core/executor.h) as the CUDA kernel walks them, one thread per slice of feature
// columns, so results do not depend on the thread count.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../../core/executor.h"
#include "../step.h"

namespace mgg {
namespace {

constexpr int64_t kGrain = 16;  // feature columns per task

// A part of the step (absent: all null); `pe` is undefined for table sources.
template <typename acc_t>
PlanPart<acc_t> plan_part(const Step& s, StepField rowptr, StepField col, const at::Tensor& weight,
                          const at::Tensor& pe) {
  if (!s.has(rowptr)) return {nullptr, nullptr, nullptr, nullptr};
  return {s[rowptr].data_ptr<int64_t>(), s[col].data_ptr<int32_t>(),
          weight.defined() ? weight.data_ptr<acc_t>() : nullptr, pe.defined() ? pe.data_ptr<int32_t>() : nullptr};
}

// Runs the step with the remote source that `make_remote` builds per scalar type.
template <typename MakeRemote>
at::Tensor execute(const at::Tensor& x, const Call& c, MakeRemote make_remote) {
  const Step& s = c.step;
  const int64_t dim = x.size(1), rows = s.rows();
  at::Tensor out = at::empty({rows, dim}, x.options());
  if (rows == 0 || dim == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    auto weight_as = [&](StepField w) {  // weights are read in the accumulation type
      return s.has(w) ? s[w].to(c10::CppTypeToScalarType<acc_t>::value).contiguous() : at::Tensor();
    };
    const at::Tensor lw = weight_as(kLocalWeight), rw = weight_as(kRemoteWeight);
    const PlanPart<acc_t> local = plan_part<acc_t>(s, kLocalRowptr, kLocalCol, lw, at::Tensor());
    const PlanPart<acc_t> remote = plan_part<acc_t>(s, kRemoteRowptr, kRemoteCol, rw, s[kRemotePe]);
    const TableSource<scalar_t> lsrc{x.data_ptr<scalar_t>(), dim};
    const auto rsrc = make_remote(scalar_t{});
    scalar_t* o = out.data_ptr<scalar_t>();
    const Schedule sch{s[kRanges].data_ptr<int64_t>(), s[kRanges].size(0) - 1, s[kFixups].data_ptr<int64_t>(),
                       s[kFixups].size(0)};
    std::vector<acc_t> carry(static_cast<size_t>(s.num_slots * dim));
    at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
      std::vector<acc_t> sum(static_cast<size_t>(d1 - d0));
      execute_ranges<scalar_t, acc_t>(local, lsrc, remote, rsrc, sch, dim, o, carry.data(), sum.data(), d0, d1);
    });
  });
  return out;
}

at::Tensor aggregate_cpu(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params,
                         bool /*deterministic: every run is*/) {
  const Call c = check_aggregate(x, x_remote, plan, params);
  return execute(x, c, [&](auto zero) {
    using scalar_t = decltype(zero);
    return TableSource<scalar_t>{x_remote.data_ptr<scalar_t>(), x.size(1)};
  });
}

at::Tensor aggregate_peers_cpu(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                               at::IntArrayRef params, int64_t fetch, bool /*deterministic: every run is*/) {
  const Call c = check_aggregate_peers(x, peers, my_pe, plan, params, fetch);
  std::vector<const void*> base;
  for (const auto& p : peers) base.push_back(p.data_ptr());
  return execute(x, c, [&](auto zero) { return PeerSource<decltype(zero)>{base.data(), x.size(1)}; });
}

// Max/min (core/extreme.h): row by row, one task per slice of feature columns.
std::tuple<at::Tensor, at::Tensor> aggregate_extreme_cpu(const at::Tensor& x, const at::Tensor& x_remote,
                                                         const PlanList& plan, at::IntArrayRef params,
                                                         c10::string_view reduce) {
  const ExtremeCall e = check_aggregate_extreme(x, x_remote, plan, params, reduce);
  const Step& s = e.call.step;
  const int64_t dim = x.size(1), rows = s.rows();
  at::Tensor out = at::empty({rows, dim}, x.options());
  at::Tensor arg = at::empty({rows, dim}, x.options().dtype(at::kLong));
  if (rows == 0 || dim == 0) return {out, arg};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_extreme_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const PlanPart<acc_t> local = plan_part<acc_t>(s, kLocalRowptr, kLocalCol, at::Tensor(), at::Tensor());
    const PlanPart<acc_t> remote = plan_part<acc_t>(s, kRemoteRowptr, kRemoteCol, at::Tensor(), at::Tensor());
    const TableSource<scalar_t> lsrc{x.data_ptr<scalar_t>(), dim};
    const TableSource<scalar_t> rsrc{x_remote.data_ptr<scalar_t>(), dim};
    at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
      std::vector<acc_t> best(d1 - d0);
      execute_extreme_rows<scalar_t, acc_t>(local, lsrc, remote, rsrc, x.size(0), e.is_max, rows, dim,
                                            out.data_ptr<scalar_t>(), arg.data_ptr<int64_t>(), best.data(), d0, d1);
    });
  });
  return {out, arg};
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) {
  m.impl("aggregate_extreme", &aggregate_extreme_cpu);
  m.impl("aggregate", &aggregate_cpu);
  m.impl("aggregate_peers", &aggregate_peers_cpu);
}

}  // namespace mgg
