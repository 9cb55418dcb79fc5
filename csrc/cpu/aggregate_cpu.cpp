// CPU implementations of mgg::aggregate and mgg::aggregate_peers: they execute the plan's block
// schedule (kernels/aggregate_core.h) as the CUDA kernel walks it, one thread per slice of
// feature columns, so results do not depend on the thread count.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../aggregate.h"
#include "../kernels/aggregate_core.h"

namespace mgg {
namespace {

constexpr int64_t kGrain = 16;  // feature columns per task

template <typename acc_t>
PlanPart<acc_t> plan_part(const PartArgs& p, const at::Tensor& w) {
  return {p.part_ptr.data_ptr<int64_t>(), p.part_row.data_ptr<int32_t>(), p.col.data_ptr<int32_t>(),
          w.defined() ? w.data_ptr<acc_t>() : nullptr, p.pe ? p.pe->data_ptr<int32_t>() : nullptr};
}

// Runs the schedule with the given remote source; `make_remote` builds it per scalar type.
template <typename MakeRemote>
at::Tensor execute(const at::Tensor& x, const CheckedCall& c, MakeRemote make_remote) {
  const ScheduleArgs& s = c.schedule;
  const int64_t dim = x.size(1);
  at::Tensor out = at::empty({s.num_rows, dim}, x.options());
  if (s.num_rows == 0 || dim == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto acc_type = c10::CppTypeToScalarType<acc_t>::value;
    auto weight_as = [&](const std::optional<at::Tensor>& w) {  // weights are read in the accumulation type
      return w.has_value() ? w->to(acc_type).contiguous() : at::Tensor();
    };
    at::Tensor lw = weight_as(c.local.weight), rw = weight_as(c.remote.weight);
    const PlanPart<acc_t> lp = plan_part<acc_t>(c.local, lw), rp = plan_part<acc_t>(c.remote, rw);
    const TableSource<scalar_t> lsrc{x.data_ptr<scalar_t>(), dim};
    const auto rsrc = make_remote(scalar_t{});
    scalar_t* o = out.data_ptr<scalar_t>();
    if (c.deterministic) {
      at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
        std::vector<acc_t> partial(d1 - d0);
        execute_rows<scalar_t, acc_t>(lp, c.local.part_row.numel(), lsrc, rp, c.remote.part_row.numel(), rsrc,
                                      s.num_rows, dim, o, partial.data(), d0, d1);
      });
      return;
    }
    const Schedule sch{s.blocks.data_ptr<int64_t>(), s.blocks.size(0), s.fixups.data_ptr<int64_t>(), s.fixups.size(0),
                       s.dist, s.warps_per_block, c.interleave};
    std::vector<acc_t> scratch(static_cast<size_t>(c.facts.num_slots * dim));
    at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
      std::vector<acc_t> slots(static_cast<size_t>(block_row_cap(s.warps_per_block) * (d1 - d0)));
      execute_blocks<scalar_t, acc_t>(lp, lsrc, rp, rsrc, sch, dim, o, scratch.data(), slots.data(), d0, d1);
    });
  });
  return out;
}

at::Tensor aggregate_cpu(MGG_AGGREGATE_PARAMS) {
  const CheckedCall c = check_aggregate_call(MGG_AGGREGATE_ARGS);
  return execute(x, c, [&](auto zero) { return TableSource<decltype(zero)>{x_remote.data_ptr<decltype(zero)>(), x.size(1)}; });
}

at::Tensor aggregate_peers_cpu(MGG_AGGREGATE_PEERS_PARAMS) {
  const CheckedCall c = check_aggregate_peers_call(MGG_AGGREGATE_PEERS_ARGS);
  std::vector<const void*> base;
  for (const auto& p : peers) base.push_back(p.data_ptr());
  return execute(x, c, [&](auto zero) { return PeerSource<decltype(zero)>{base.data(), x.size(1)}; });
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) {
  m.impl("aggregate", &aggregate_cpu);
  m.impl("aggregate_peers", &aggregate_peers_cpu);
}

}  // namespace mgg
