// CUDA implementation of mgg::aggregate: the kernels of aggregate_kernel.cuh with both parts
// read from tables in this device's memory (the rank's own rows and, for remote neighbors, the
// halo buffer; one rank has no remote part).
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aggregate_kernel.cuh"

namespace mgg {
namespace {

at::Tensor aggregate_cuda(const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& local_part_ptr,
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
  const c10::cuda::CUDAGuard guard(x.device());
  const PlanFacts facts = check_plan_content(op, x.size(0), local, RemoteRows{x_remote.size(0)}, remote, s);
  const int64_t dim = x.size(1);
  at::Tensor out = at::empty({num_rows, dim}, x.options());
  if (num_rows == 0 || dim == 0) return out;
  auto f32 = [](const std::optional<at::Tensor>& w) { return w.has_value() ? w->to(at::kFloat).contiguous() : at::Tensor(); };
  const at::Tensor lw = f32(local_weight), rw = f32(remote_weight);
  const at::Tensor scratch = at::empty({facts.num_slots, dim}, x.options().dtype(at::kFloat));
  cuda::dispatch_storage(op, x.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    cuda::Launch<scalar_t> a{cuda::device_part(local, lw), cuda::device_part(remote, rw), blocks.data_ptr<int64_t>(),
                             blocks.size(0), fixups.data_ptr<int64_t>(), fixups.size(0), num_rows,
                             local_part_row.numel(), remote_part_row.numel(), dist, dim, 0, 0, interleave,
                             out.data_ptr<scalar_t>(), scratch.data_ptr<float>()};
    cuda::launch_aggregate(a, warps_per_block, deterministic, TableFetch{x.data_ptr()},
                           TableFetch{x_remote.data_ptr()}, facts.max_remote_part);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) { m.impl("aggregate", &aggregate_cuda); }

}  // namespace mgg
