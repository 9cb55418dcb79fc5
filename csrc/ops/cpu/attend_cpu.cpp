// CPU implementations of the attention ops (GAT; formulas and layouts in core/attention.h): each
// output row is computed by one thread, its edges in plan order, so results do not depend on the
// thread count; threads own nnz-balanced ranges of rows (parallel_rows.h).
//   attend, attend_backward                 sources from tables (the rank's rows and a halo)
//   attend_peers, _peers_dst, _peers_src    sources named by owner PE (each PE's own table)
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../../core/attention_executor.h"
#include "../attention_terms.h"
#include "../step.h"
#include "parallel_rows.h"

namespace mgg {
namespace {

template <typename acc_t>
PlanPart<acc_t> part_of(const Step& s, StepField rowptr, StepField col, bool peers) {
  if (!s.has(rowptr)) return {nullptr, nullptr, nullptr, nullptr};
  const bool remote = rowptr == kRemoteRowptr;
  return {s[rowptr].data_ptr<int64_t>(), s[col].data_ptr<int32_t>(), nullptr,
          remote && peers ? s[kRemotePe].data_ptr<int32_t>() : nullptr};
}

AttentionShape shape_of(const AttentionCall& c, double slope, double dropout, int64_t seed) {
  return {c.heads, c.channels, slope, static_cast<float>(dropout), static_cast<uint64_t>(seed)};
}

template <typename T>
std::vector<const T*> pointers(at::TensorList tables) {
  std::vector<const T*> p;
  for (const at::Tensor& t : tables) p.push_back(t.data_ptr<T>());
  return p;
}

// Forward rows [0, rows) over (local, lsrc) then (remote, rsrc).
template <typename scalar_t, typename acc_t>
void forward_rows(const AttentionCall& c, const AttentionShape& s, int64_t rows, SourceRows<scalar_t> lsrc,
                  SourceRows<scalar_t> rsrc, bool peers, const scalar_t* a_dst, scalar_t* out, acc_t* stats) {
  const PlanPart<acc_t> local = part_of<acc_t>(c.step, kLocalRowptr, kLocalCol, peers);
  const PlanPart<acc_t> remote = part_of<acc_t>(c.step, kRemoteRowptr, kRemoteCol, peers);
  const int64_t H = s.heads, HC = H * s.channels, W = s.width();
  cpu::parallel_rows(local.rowptr, remote.rowptr, rows, W, [&](int64_t r0, int64_t r1) {
    std::vector<acc_t> acc(HC), m(H), sum(H);
    for (int64_t r = r0; r < r1; ++r) {
      auto walk = [&](auto&& f) { for_edges(local, lsrc, remote, rsrc, c.ids, W, r, f); };
      attend_row<scalar_t, acc_t>(walk, a_dst + r * H, s, c.ids.rows(r), out + r * HC, stats + r * 2 * H, acc, m, sum);
    }
  });
}

template <typename scalar_t, typename acc_t>
void dst_rows(const AttentionCall& c, const AttentionShape& s, int64_t rows, SourceRows<scalar_t> lsrc,
              SourceRows<scalar_t> rsrc, bool peers, const acc_t* terms, scalar_t* d_dst) {
  const PlanPart<acc_t> local = part_of<acc_t>(c.step, kLocalRowptr, kLocalCol, peers);
  const PlanPart<acc_t> remote = part_of<acc_t>(c.step, kRemoteRowptr, kRemoteCol, peers);
  const int64_t H = s.heads, W = s.width(), T = s.terms_width();
  cpu::parallel_rows(local.rowptr, remote.rowptr, rows, W, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      auto walk = [&](auto&& f) { for_edges(local, lsrc, remote, rsrc, c.ids, W, r, f); };
      attend_dst_row<scalar_t, acc_t>(walk, terms + r * T, s, c.ids.rows(r), d_dst + r * H);
    }
  });
}

// Pass B over `step` (rows: the sources j, whose rows are own[j]; its sources: output rows' terms).
template <typename scalar_t, typename acc_t>
void src_rows(const Step& step, const NodeIds& ids, const AttentionShape& s, int64_t rows, const scalar_t* own,
              SourceRows<acc_t> lterms, SourceRows<acc_t> rterms, bool peers, scalar_t* grad) {
  const PlanPart<acc_t> local = part_of<acc_t>(step, kLocalRowptr, kLocalCol, peers);
  const PlanPart<acc_t> remote = part_of<acc_t>(step, kRemoteRowptr, kRemoteCol, peers);
  const int64_t W = s.width(), T = s.terms_width();
  cpu::parallel_rows(local.rowptr, remote.rowptr, rows, T, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      auto walk = [&](auto&& f) { for_edges(local, lterms, remote, rterms, ids, T, r, f); };
      attend_src_row<scalar_t, acc_t>(walk, own + r * W, s, ids.rows(r), grad + r * W);
    }
  });
}

std::tuple<at::Tensor, at::Tensor> attend_cpu(const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
                                              const PlanList& plan, at::IntArrayRef params, int64_t heads, double slope,
                                              double dropout, int64_t seed, const std::optional<at::Tensor>& ids,
                                              int64_t row_offset) {
  const AttentionCall c =
      check_attend("mgg.attend", x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, false);
  const AttentionShape s = shape_of(c, slope, dropout, seed);
  const int64_t rows = c.step.rows();
  at::Tensor out = at::empty({rows, heads * c.channels}, x.options());
  at::Tensor stats = at::empty({rows, 2 * heads}, x.options().dtype(at::toOpMathType(x.scalar_type())));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_attend_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    forward_rows<scalar_t, acc_t>(c, s, rows, {x.data_ptr<scalar_t>(), nullptr},
                                  {x_remote.data_ptr<scalar_t>(), nullptr}, false, a_dst.data_ptr<scalar_t>(),
                                  out.data_ptr<scalar_t>(), stats.data_ptr<acc_t>());
  });
  return {out, stats};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attend_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
    const at::Tensor& out, const at::Tensor& stats, const PlanList& plan, at::IntArrayRef params, int64_t heads,
    double slope, double dropout, int64_t seed, const std::optional<at::Tensor>& ids, int64_t row_offset) {
  const char* op = "mgg.attend_backward";
  const AttentionCall c = check_attend(op, x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, true);
  const AttentionShape s = shape_of(c, slope, dropout, seed);
  const int64_t rows = c.step.rows();
  const at::Tensor terms = attention_terms(op, grad, out, a_dst, stats, heads, at::toOpMathType(x.scalar_type()));
  const at::Tensor own = at::cat({x, x_remote}, 0).contiguous();
  at::Tensor d_dst = at::empty({rows, heads}, a_dst.options());
  at::Tensor d_all = at::empty({own.size(0), s.width()}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_attend_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t* tp = terms.data_ptr<acc_t>();
    dst_rows<scalar_t, acc_t>(c, s, rows, {x.data_ptr<scalar_t>(), nullptr}, {x_remote.data_ptr<scalar_t>(), nullptr},
                              false, tp, d_dst.data_ptr<scalar_t>());
    src_rows<scalar_t, acc_t>(c.step_t, c.ids_t, s, own.size(0), own.data_ptr<scalar_t>(), {tp, nullptr}, {tp, nullptr},
                              false, d_all.data_ptr<scalar_t>());
  });
  return {d_all.narrow(0, 0, x.size(0)), d_all.narrow(0, x.size(0), x_remote.size(0)), d_dst};
}

std::tuple<at::Tensor, at::Tensor> attend_peers_cpu(at::TensorList peers, int64_t my_pe, const at::Tensor& a_dst,
                                                    const PlanList& plan, at::IntArrayRef params, int64_t heads,
                                                    double slope, double dropout, int64_t seed, at::IntArrayRef offsets,
                                                    int64_t fetch) {
  const char* op = "mgg.attend_peers";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets, fetch, 1);
  check_attention_dst(op, a_dst, x, c.step.rows(), heads);
  const AttentionShape s = shape_of(c, slope, dropout, seed);
  const int64_t rows = c.step.rows();
  at::Tensor out = at::empty({rows, heads * c.channels}, x.options());
  at::Tensor stats = at::empty({rows, 2 * heads}, x.options().dtype(at::toOpMathType(x.scalar_type())));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_attend_peers_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const std::vector<const scalar_t*> p = pointers<scalar_t>(peers);
    forward_rows<scalar_t, acc_t>(c, s, rows, {x.data_ptr<scalar_t>(), nullptr}, {nullptr, p.data()}, true,
                                  a_dst.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), stats.data_ptr<acc_t>());
  });
  return {out, stats};
}

at::Tensor attend_peers_dst_cpu(at::TensorList peers, int64_t my_pe, const at::Tensor& terms, const PlanList& plan,
                                at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_dst";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets, fetch, 1);
  const auto acc_type = at::toOpMathType(x.scalar_type());
  check_attention_terms(op, terms, c.step.rows(), heads, c.channels, acc_type, x.device());
  const AttentionShape s = shape_of(c, slope, dropout, seed);
  at::Tensor d_dst = at::empty({c.step.rows(), heads}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_attend_peers_dst_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const std::vector<const scalar_t*> p = pointers<scalar_t>(peers);
    dst_rows<scalar_t, acc_t>(c, s, c.step.rows(), {x.data_ptr<scalar_t>(), nullptr}, {nullptr, p.data()}, true,
                              terms.data_ptr<acc_t>(), d_dst.data_ptr<scalar_t>());
  });
  return d_dst;
}

at::Tensor attend_peers_src_cpu(const at::Tensor& x, at::TensorList terms, int64_t my_pe, const PlanList& plan,
                                at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_src";
  const AttentionCall c =
      check_attend_peers(op, x, terms, my_pe, plan, params, heads, dropout, offsets, fetch, kTermFields);
  TORCH_CHECK(terms[my_pe].scalar_type() == at::toOpMathType(x.scalar_type()), op, ": the terms tables must be ",
              at::toOpMathType(x.scalar_type()), " for ", x.scalar_type(), " rows, got ", terms[my_pe].scalar_type());
  const AttentionShape s = shape_of(c, slope, dropout, seed);
  at::Tensor grad = at::empty({x.size(0), s.width()}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "mgg_attend_peers_src_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const std::vector<const acc_t*> p = pointers<acc_t>(terms);
    src_rows<scalar_t, acc_t>(c.step, c.ids, s, x.size(0), x.data_ptr<scalar_t>(), {p[my_pe], nullptr},
                              {nullptr, p.data()}, true, grad.data_ptr<scalar_t>());
  });
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CPU, m) {
  m.impl("attend", &attend_cpu);
  m.impl("attend_backward", &attend_backward_cpu);
  m.impl("attend_peers", &attend_peers_cpu);
  m.impl("attend_peers_dst", &attend_peers_dst_cpu);
  m.impl("attend_peers_src", &attend_peers_src_cpu);
}

}  // namespace mgg
