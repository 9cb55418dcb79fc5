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
at::Tensor execute(const at::Tensor& x, const PartArgs& local, const PartArgs& remote, const ScheduleArgs& s,
                   const PlanFacts& facts, bool interleave, bool deterministic, MakeRemote make_remote) {
  const int64_t dim = x.size(1);
  at::Tensor out = at::empty({s.num_rows, dim}, x.options());
  if (s.num_rows == 0 || dim == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto acc_type = c10::CppTypeToScalarType<acc_t>::value;
    auto weight_as = [&](const std::optional<at::Tensor>& w) {  // weights are read in the accumulation type
      return w.has_value() ? w->to(acc_type).contiguous() : at::Tensor();
    };
    at::Tensor lw = weight_as(local.weight), rw = weight_as(remote.weight);
    const PlanPart<acc_t> lp = plan_part<acc_t>(local, lw), rp = plan_part<acc_t>(remote, rw);
    const TableSource<scalar_t> lsrc{x.data_ptr<scalar_t>(), dim};
    const auto rsrc = make_remote(scalar_t{});
    scalar_t* o = out.data_ptr<scalar_t>();
    if (deterministic) {
      at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
        std::vector<acc_t> partial(d1 - d0);
        execute_rows<scalar_t, acc_t>(lp, local.part_row.numel(), lsrc, rp, remote.part_row.numel(), rsrc, s.num_rows,
                                      dim, o, partial.data(), d0, d1);
      });
      return;
    }
    const Schedule sch{s.blocks.data_ptr<int64_t>(), s.blocks.size(0), s.fixups.data_ptr<int64_t>(), s.fixups.size(0),
                       s.dist, s.warps_per_block, interleave};
    std::vector<acc_t> scratch(static_cast<size_t>(facts.num_slots * dim));
    at::parallel_for(0, dim, kGrain, [&](int64_t d0, int64_t d1) {
      std::vector<acc_t> slots(static_cast<size_t>(block_row_cap(s.warps_per_block) * (d1 - d0)));
      execute_blocks<scalar_t, acc_t>(lp, lsrc, rp, rsrc, sch, dim, o, scratch.data(), slots.data(), d0, d1);
    });
  });
  return out;
}

at::Tensor aggregate_cpu(const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& local_part_ptr,
                         const at::Tensor& local_part_row, const at::Tensor& local_col,
                         const std::optional<at::Tensor>& local_weight, const at::Tensor& remote_part_ptr,
                         const at::Tensor& remote_part_row, const at::Tensor& remote_col,
                         const std::optional<at::Tensor>& remote_weight, const at::Tensor& blocks,
                         const at::Tensor& fixups, int64_t num_rows, int64_t dist, int64_t warps_per_block,
                         bool interleave, bool deterministic) {
  const char* op = "mgg.aggregate";
  const PartArgs local{"local", local_part_ptr, local_part_row, local_col, local_weight};
  const PartArgs remote{"remote", remote_part_ptr, remote_part_row, remote_col, remote_weight};
  const ScheduleArgs s{blocks, fixups, num_rows, dist, warps_per_block};
  check_plan_args(op, x, local, remote, s);
  check_table_args(op, x, x_remote);
  const PlanFacts facts = check_plan_content(op, x.size(0), local, RemoteRows{x_remote.size(0)}, remote, s);
  return execute(x, local, remote, s, facts, interleave, deterministic, [&](auto zero) {
    using scalar_t = decltype(zero);
    return TableSource<scalar_t>{x_remote.data_ptr<scalar_t>(), x.size(1)};
  });
}

at::Tensor aggregate_peers_cpu(const at::Tensor& x, at::TensorList peers, int64_t my_pe,
                               const at::Tensor& local_part_ptr, const at::Tensor& local_part_row,
                               const at::Tensor& local_col, const std::optional<at::Tensor>& local_weight,
                               const at::Tensor& remote_part_ptr, const at::Tensor& remote_part_row,
                               const at::Tensor& remote_offset, const at::Tensor& remote_pe,
                               const std::optional<at::Tensor>& remote_weight, const at::Tensor& blocks,
                               const at::Tensor& fixups, int64_t num_rows, int64_t dist, int64_t warps_per_block,
                               bool interleave, int64_t fetch, bool deterministic) {
  const char* op = "mgg.aggregate_peers";
  TORCH_CHECK(fetch == static_cast<int64_t>(Fetch::kDirect), op, ": fetch ", fetch,
              " is an NVSHMEM get, which needs CUDA tensors; on the CPU use fetch=0 (direct loads)");
  const PartArgs local{"local", local_part_ptr, local_part_row, local_col, local_weight};
  const PartArgs remote{"remote", remote_part_ptr, remote_part_row, remote_offset, remote_weight, &remote_pe};
  const ScheduleArgs s{blocks, fixups, num_rows, dist, warps_per_block};
  check_plan_args(op, x, local, remote, s);
  check_peer_args(op, x, peers, my_pe);
  std::vector<int64_t> peer_rows;
  for (const auto& p : peers) peer_rows.push_back(p.size(0));
  const PlanFacts facts = check_plan_content(op, x.size(0), local, RemoteRows{0, &peer_rows, my_pe}, remote, s);
  std::vector<const void*> base;
  for (const auto& p : peers) base.push_back(p.data_ptr());
  return execute(x, local, remote, s, facts, interleave, deterministic, [&](auto zero) {
    return PeerSource<decltype(zero)>{base.data(), x.size(1)};
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) {
  m.impl("aggregate", &aggregate_cpu);
  m.impl("aggregate_peers", &aggregate_peers_cpu);
}

}  // namespace mgg
