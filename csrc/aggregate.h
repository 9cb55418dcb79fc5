// Shared declarations of the mgg::aggregate op: its host-side argument checks, used by every
// device implementation before anything is launched.
#pragma once
#include <ATen/ATen.h>
#include <optional>

namespace mgg {

struct AggregateArgs {
  const at::Tensor& x;
  const at::Tensor& x_remote;
  const at::Tensor& local_part_ptr;
  const at::Tensor& local_part_row;
  const at::Tensor& local_col;
  const std::optional<at::Tensor>& local_weight;
  const at::Tensor& remote_part_ptr;
  const at::Tensor& remote_part_row;
  const at::Tensor& remote_col;
  const std::optional<at::Tensor>& remote_weight;
  const at::Tensor& warp_local_ptr;
  const at::Tensor& warp_remote_ptr;
  int64_t num_rows;
  int64_t warps_per_block;
};

// Checks dtypes, shapes, devices and contiguity of every argument; throws a one-line
// c10::Error naming the offending argument. Cheap: no pass over the data.
void check_aggregate_args(const AggregateArgs& a);

at::Tensor aggregate_cpu(const at::Tensor& x, const at::Tensor& x_remote,
                         const at::Tensor& local_part_ptr, const at::Tensor& local_part_row,
                         const at::Tensor& local_col, const std::optional<at::Tensor>& local_weight,
                         const at::Tensor& remote_part_ptr, const at::Tensor& remote_part_row,
                         const at::Tensor& remote_col, const std::optional<at::Tensor>& remote_weight,
                         const at::Tensor& warp_local_ptr, const at::Tensor& warp_remote_ptr,
                         int64_t num_rows, int64_t warps_per_block, bool deterministic);

}  // namespace mgg
