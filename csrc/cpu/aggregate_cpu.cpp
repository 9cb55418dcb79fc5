// CPU implementation of mgg::aggregate: executes the plan (aggregate_core.h), one thread per
// block of feature columns, so results do not depend on the thread count.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../aggregate.h"
#include "../kernels/aggregate_core.h"

namespace mgg {
namespace {

// Bounds checks over the plan's content: on the CPU they cost one pass over the indices,
// which is small next to the aggregation itself.
void check_plan_content(const char* which, const at::Tensor& ptr, const at::Tensor& row,
                        const at::Tensor& col, int64_t num_rows, int64_t num_src) {
  const int64_t* p = ptr.data_ptr<int64_t>();
  const int32_t* r = row.data_ptr<int32_t>();
  const int32_t* c = col.data_ptr<int32_t>();
  const int64_t n = row.numel(), e = col.numel();
  TORCH_CHECK(p[0] == 0 && p[n] == e, "mgg.aggregate: ", which, "_part_ptr must start at 0 and end at ",
              e, " (the edge count), got ", p[0], " and ", p[n]);
  for (int64_t k = 0; k < n; ++k) {
    TORCH_CHECK(p[k] <= p[k + 1], "mgg.aggregate: ", which, "_part_ptr decreases at partition ", k);
    TORCH_CHECK(r[k] >= 0 && r[k] < num_rows, "mgg.aggregate: ", which, "_part_row[", k, "] = ", r[k],
                " is outside [0, ", num_rows, ")");
  }
  for (int64_t i = 0; i < e; ++i) {
    TORCH_CHECK(c[i] >= 0 && c[i] < num_src, "mgg.aggregate: ", which, "_col[", i, "] = ", c[i],
                " is outside [0, ", num_src, ")");
  }
}

void check_schedule(const at::Tensor& ptr, const char* name, int64_t num_parts) {
  const int64_t* p = ptr.data_ptr<int64_t>();
  const int64_t n = ptr.numel() - 1;
  TORCH_CHECK(p[0] == 0 && p[n] == num_parts, "mgg.aggregate: ", name, " must start at 0 and end at ",
              num_parts, " (the partition count), got ", p[0], " and ", p[n]);
  for (int64_t w = 0; w < n; ++w) {
    TORCH_CHECK(p[w] <= p[w + 1], "mgg.aggregate: ", name, " decreases at warp ", w);
  }
}

}  // namespace

at::Tensor aggregate_cpu(const at::Tensor& x, const at::Tensor& x_remote,
                         const at::Tensor& local_part_ptr, const at::Tensor& local_part_row,
                         const at::Tensor& local_col, const std::optional<at::Tensor>& local_weight,
                         const at::Tensor& remote_part_ptr, const at::Tensor& remote_part_row,
                         const at::Tensor& remote_col, const std::optional<at::Tensor>& remote_weight,
                         const at::Tensor& warp_local_ptr, const at::Tensor& warp_remote_ptr,
                         int64_t num_rows, int64_t warps_per_block, bool /*deterministic*/) {
  check_aggregate_args({x, x_remote, local_part_ptr, local_part_row, local_col, local_weight,
                        remote_part_ptr, remote_part_row, remote_col, remote_weight, warp_local_ptr,
                        warp_remote_ptr, num_rows, warps_per_block});
  check_plan_content("local", local_part_ptr, local_part_row, local_col, num_rows, x.size(0));
  check_plan_content("remote", remote_part_ptr, remote_part_row, remote_col, num_rows, x_remote.size(0));
  check_schedule(warp_local_ptr, "warp_local_ptr", local_part_row.numel());
  check_schedule(warp_remote_ptr, "warp_remote_ptr", remote_part_row.numel());

  const int64_t dim = x.size(1);
  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_aggregate_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    // Edge weights are stored float32; they are read in the accumulation type.
    auto weight_as = [](const std::optional<at::Tensor>& w) -> at::Tensor {
      return w.has_value() ? w->to(c10::CppTypeToScalarType<acc_t>::value).contiguous() : at::Tensor();
    };
    at::Tensor lw = weight_as(local_weight), rw = weight_as(remote_weight);
    auto acc = at::zeros({num_rows, dim}, x.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    PlanPart<acc_t> lp{local_part_ptr.data_ptr<int64_t>(), local_part_row.data_ptr<int32_t>(),
                       local_col.data_ptr<int32_t>(), lw.defined() ? lw.data_ptr<acc_t>() : nullptr};
    PlanPart<acc_t> rp{remote_part_ptr.data_ptr<int64_t>(), remote_part_row.data_ptr<int32_t>(),
                       remote_col.data_ptr<int32_t>(), rw.defined() ? rw.data_ptr<acc_t>() : nullptr};
    const scalar_t* xl = x.data_ptr<scalar_t>();
    const scalar_t* xr = x_remote.data_ptr<scalar_t>();
    acc_t* a = acc.data_ptr<acc_t>();
    const int64_t* wl = warp_local_ptr.data_ptr<int64_t>();
    const int64_t* wr = warp_remote_ptr.data_ptr<int64_t>();
    const int64_t num_warps = warp_local_ptr.numel() - 1;
    at::parallel_for(0, dim, /*grain_size=*/16, [&](int64_t d0, int64_t d1) {
      execute_plan<scalar_t, acc_t>(lp, xl, rp, xr, wl, wr, num_warps, dim, a, d0, d1);
    });
    out = acc.to(x.scalar_type());
  });
  return out;
}

TORCH_LIBRARY_IMPL(mgg, CPU, m) { m.impl("aggregate", &aggregate_cpu); }

}  // namespace mgg
