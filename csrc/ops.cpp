// Schemas of the mgg aggregation ops and the host-side argument checks shared by their
// implementations.
//
// aggregate:        remote rows come from one table (x_remote: a halo buffer, or empty).
// aggregate_peers:  remote rows come from each PE's own table (peers[pe], row remote_offset),
//                   read through `fetch`: 0 direct loads (peer pointers; in one process, any
//                   tensors), 1/2/3 NVSHMEM get at thread/warp/block scope (CUDA, symmetric
//                   tables only).
#include <torch/library.h>

#include "aggregate.h"

namespace mgg {
namespace {

void check_index(const char* op, const at::Tensor& t, const std::string& name, at::ScalarType dtype) {
  TORCH_CHECK(t.dim() == 1, op, ": ", name, " must be 1-D, got ", t.dim(), "-D");
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

void check_part(const char* op, const PartArgs& p, const at::Device& dev) {
  const std::string n = p.name;
  check_index(op, p.part_ptr, n + "_part_ptr", at::kLong);
  check_index(op, p.part_row, n + "_part_row", at::kInt);
  check_index(op, p.col, n + (p.pe ? "_offset" : "_col"), at::kInt);
  TORCH_CHECK(p.part_ptr.numel() == p.part_row.numel() + 1, op, ": ", n, "_part_ptr has ", p.part_ptr.numel(),
              " entries but ", n, "_part_row has ", p.part_row.numel(), " (expected one more)");
  if (p.pe) {
    check_index(op, *p.pe, n + "_pe", at::kInt);
    TORCH_CHECK(p.pe->numel() == p.col.numel(), op, ": ", n, "_pe must have one entry per edge (", p.col.numel(),
                "), got ", p.pe->numel());
  }
  if (p.weight.has_value()) {
    const at::Tensor& w = *p.weight;
    TORCH_CHECK(w.dim() == 1 && w.numel() == p.col.numel(), op, ": ", n, "_weight must be 1-D with one entry per edge (",
                p.col.numel(), "), got shape ", w.sizes());
    TORCH_CHECK(w.scalar_type() == at::kFloat || w.scalar_type() == at::kDouble, op, ": ", n,
                "_weight must be float32 or float64, got ", w.scalar_type());
    TORCH_CHECK(w.is_contiguous(), op, ": ", n, "_weight must be contiguous");
    TORCH_CHECK(w.device() == dev, op, ": edge weights must be on ", dev, " like x; found them on ", w.device());
  }
  for (const at::Tensor* t : {&p.part_ptr, &p.part_row, &p.col, p.pe}) {
    if (t) {
      TORCH_CHECK(t->device() == dev, op, ": every plan tensor must be on ", dev, " like x; found one on ", t->device());
    }
  }
}

void check_table(const char* op, const at::Tensor& t, const std::string& name, const at::Tensor& x) {
  TORCH_CHECK(t.dim() == 2 && t.size(1) == x.size(1), op, ": ", name, " must be 2-D with the same dim as x (",
              x.size(1), "), got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", name, " dtype ", t.scalar_type(), " differs from x dtype ",
              x.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, " must be on ", x.device(), " like x, found ", t.device());
}

}  // namespace

void check_plan_args(const char* op, const at::Tensor& x, const PartArgs& local, const PartArgs& remote,
                     const ScheduleArgs& s) {
  TORCH_CHECK(x.dim() == 2, op, ": x must be 2-D [nodes, dim], got ", x.dim(), "-D");
  const auto st = x.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16, op,
              ": x must be float32, float64, float16 or bfloat16, got ", st);
  TORCH_CHECK(x.is_contiguous(), op, ": x must be contiguous");
  TORCH_CHECK(s.num_rows >= 0, op, ": num_rows must be >= 0, got ", s.num_rows);
  TORCH_CHECK(s.warps_per_block >= 1 && s.warps_per_block <= 32, op, ": warps_per_block must be in [1, 32], got ",
              s.warps_per_block);
  TORCH_CHECK(s.dist >= 1 && s.dist <= 64, op, ": dist must be in [1, 64], got ", s.dist);
  const auto dev = x.device();
  check_part(op, local, dev);
  check_part(op, remote, dev);
  TORCH_CHECK(s.blocks.dim() == 2 && s.blocks.size(1) == 7 && s.blocks.scalar_type() == at::kLong &&
                  s.blocks.is_contiguous(),
              op, ": blocks must be a contiguous int64 tensor [num_blocks, 7], got ", s.blocks.scalar_type(), " ",
              s.blocks.sizes());
  TORCH_CHECK(s.fixups.dim() == 2 && s.fixups.size(1) == 3 && s.fixups.scalar_type() == at::kLong &&
                  s.fixups.is_contiguous(),
              op, ": fixups must be a contiguous int64 tensor [num_fixups, 3], got ", s.fixups.scalar_type(), " ",
              s.fixups.sizes());
  TORCH_CHECK(s.blocks.device() == dev && s.fixups.device() == dev, op, ": every plan tensor must be on ", dev,
              " like x; found blocks on ", s.blocks.device(), " and fixups on ", s.fixups.device());
  TORCH_CHECK(s.blocks.size(0) <= 0x7fffffff, op, ": ", s.blocks.size(0), " blocks exceed the grid limit (2^31 - 1)");
}

CheckedCall check_aggregate_call(MGG_AGGREGATE_PARAMS) {
  CheckedCall c{"mgg.aggregate",
                {"local", local_part_ptr, local_part_row, local_col, local_weight},
                {"remote", remote_part_ptr, remote_part_row, remote_col, remote_weight},
                {blocks, fixups, num_rows, dist, warps_per_block},
                interleave,
                deterministic,
                {}};
  check_plan_args(c.op, x, c.local, c.remote, c.schedule);
  check_table(c.op, x_remote, "x_remote", x);
  c.facts = check_plan_content(c.op, x.size(0), c.local, RemoteRows{x_remote.size(0)}, c.remote, c.schedule);
  return c;
}

CheckedCall check_aggregate_peers_call(MGG_AGGREGATE_PEERS_PARAMS) {
  CheckedCall c{"mgg.aggregate_peers",
                {"local", local_part_ptr, local_part_row, local_col, local_weight},
                {"remote", remote_part_ptr, remote_part_row, remote_offset, remote_weight, &remote_pe},
                {blocks, fixups, num_rows, dist, warps_per_block},
                interleave,
                deterministic,
                {}};
  TORCH_CHECK(fetch >= 0 && fetch <= 3, c.op, ": fetch must be 0 (direct), 1 (get, thread), 2 (get, warp) or ",
              "3 (get, block), got ", fetch);
  TORCH_CHECK(fetch == 0 || x.is_cuda(), c.op, ": fetch ", fetch,
              " is an NVSHMEM get, which needs CUDA tensors; on the CPU use fetch=0 (direct loads)");
  check_plan_args(c.op, x, c.local, c.remote, c.schedule);
  TORCH_CHECK(!peers.empty(), c.op, ": peers must list every PE's table, got none");
  TORCH_CHECK(my_pe >= 0 && my_pe < static_cast<int64_t>(peers.size()), c.op, ": my_pe ", my_pe,
              " is outside [0, ", peers.size(), ")");
  std::vector<int64_t> peer_rows;
  for (size_t i = 0; i < peers.size(); ++i) {
    check_table(c.op, peers[i], "peers[" + std::to_string(i) + "]", x);
    peer_rows.push_back(peers[i].size(0));
  }
  c.facts = check_plan_content(c.op, x.size(0), c.local, RemoteRows{0, &peer_rows, my_pe}, c.remote, c.schedule);
  return c;
}

}  // namespace mgg

TORCH_LIBRARY(mgg, m) {
  m.def(
      "aggregate(Tensor x, Tensor x_remote, Tensor local_part_ptr, Tensor local_part_row, Tensor local_col, "
      "Tensor? local_weight, Tensor remote_part_ptr, Tensor remote_part_row, Tensor remote_col, "
      "Tensor? remote_weight, Tensor blocks, Tensor fixups, SymInt num_rows, int dist, int warps_per_block, "
      "bool interleave, bool deterministic) -> Tensor");
  m.def(
      "aggregate_peers(Tensor x, Tensor[] peers, int my_pe, Tensor local_part_ptr, Tensor local_part_row, "
      "Tensor local_col, Tensor? local_weight, Tensor remote_part_ptr, Tensor remote_part_row, "
      "Tensor remote_offset, Tensor remote_pe, Tensor? remote_weight, Tensor blocks, Tensor fixups, "
      "SymInt num_rows, int dist, int warps_per_block, bool interleave, int fetch, bool deterministic) -> Tensor");
}
