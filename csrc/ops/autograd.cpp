// Autograd of the mgg ops, registered on the ops themselves (the Autograd dispatch key), so that
// direct op calls, torch.compile and opcheck differentiate them, and one formula serves one
// process and every distributed backend.
//
// A call aggregates the rows of x (the rank's own rows) and of its remote sources (x_remote, or
// the PEs' tables) into output rows through the plan's forward step. The adjoint is the plan's
// transposed step (the second step of the plan list), whose rows are the own rows followed by
// the halo rows (the distinct remote sources, in halo order) and whose sources are the output
// rows: one aggregation of the incoming gradient gives the gradient of x and, below it, of every
// halo row. aggregate returns the halo part as x_remote's gradient; aggregate_peers scatters it
// into the tables of the PEs that own those rows (halo_pe, halo_offset). No communication is
// involved: the distributed backends add the adjoint of their exchange (mgg/distributed).
#include <torch/autograd.h>
#include <torch/library.h>

#include "step.h"

namespace mgg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor call_aggregate(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan, at::IntArrayRef params,
                          bool deterministic) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mgg::aggregate", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const PlanList&, at::IntArrayRef, bool)>();
  return op.call(x, x_remote, plan, params, deterministic);
}

at::Tensor call_aggregate_peers(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                                at::IntArrayRef params, int64_t fetch, bool deterministic) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mgg::aggregate_peers", "")
                       .typed<at::Tensor(const at::Tensor&, at::TensorList, int64_t, const PlanList&, at::IntArrayRef,
                                         int64_t, bool)>();
  return op.call(x, peers, my_pe, plan, params, fetch, deterministic);
}

// Sizes are SymInts so that torch.compile can trace the backward with dynamic shapes.
void save(AutogradContext* ctx, const PlanList& plan, at::IntArrayRef params, bool deterministic,
          const c10::SymInt& rows) {
  ctx->saved_data["plan"] = plan;
  ctx->saved_data["params"] = params.vec();
  ctx->saved_data["deterministic"] = deterministic;
  ctx->saved_data["rows"] = rows;
}

// The gradient of the own rows, then of the halo rows: the transposed step over grad.
at::Tensor adjoint(const char* op, AutogradContext* ctx, const at::Tensor& grad, const c10::SymInt& halo_rows) {
  const PlanList plan = ctx->saved_data["plan"].to<PlanList>();
  const std::vector<int64_t> params = ctx->saved_data["params"].toIntVector();
  TORCH_CHECK(plan.get(kStepFields).has_value(), op, ": the plan has no transposed step, so the call cannot be ",
              "differentiated (RankPlan.op_args(..., transposed=True))");
  PlanList plan_t;
  plan_t.reserve(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) plan_t.push_back(plan.get((i + kStepFields) % plan.size()));
  std::vector<int64_t> params_t(params.size());
  for (size_t i = 0; i < params.size(); ++i) params_t[i] = params[(i + kStepParams) % params.size()];
  const at::Tensor g = grad.contiguous();
  const at::Tensor out = call_aggregate(g, g.new_empty_symint({0, g.sym_size(1)}), plan_t, params_t,
                                        ctx->saved_data["deterministic"].toBool());
  const c10::SymInt rows = ctx->saved_data["rows"].toSymInt();
  const auto have = out.sym_size(0).maybe_as_int(), want = (rows + halo_rows).maybe_as_int();
  TORCH_CHECK(!have || !want || *have == *want, op, ": the transposed step has ", out.sym_size(0),
              " rows but x and the remote sources have ", rows, " + ", halo_rows);
  return out;
}

class Aggregate : public torch::autograd::Function<Aggregate> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan,
                            at::IntArrayRef params, bool deterministic) {
    save(ctx, plan, params, deterministic, x.sym_size(0));
    ctx->saved_data["halo_rows"] = x_remote.sym_size(0);
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_aggregate(x, x_remote, plan, params, deterministic);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::SymInt rows = ctx->saved_data["rows"].toSymInt(), halo = ctx->saved_data["halo_rows"].toSymInt();
    const at::Tensor out = adjoint("mgg.aggregate", ctx, grads[0], halo);
    return {out.narrow_symint(0, 0, rows), out.narrow_symint(0, rows, halo), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class AggregatePeers : public torch::autograd::Function<AggregatePeers> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList peers, int64_t my_pe,
                            const PlanList& plan, at::IntArrayRef params, int64_t fetch, bool deterministic) {
    save(ctx, plan, params, deterministic, x.sym_size(0));
    std::vector<c10::SymInt> peer_rows;
    c10::List<bool> needs;
    std::vector<std::string> devices;  // a table's gradient goes where the table is (uva: the host)
    for (const at::Tensor& p : peers) {
      peer_rows.push_back(p.sym_size(0));
      needs.push_back(p.requires_grad());
      devices.push_back(p.device().str());
    }
    ctx->saved_data["peer_rows"] = c10::SymIntArrayRef(peer_rows);
    ctx->saved_data["peer_needs"] = needs;
    ctx->saved_data["peer_devices"] = devices;
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_aggregate_peers(x, peers, my_pe, plan, params, fetch, deterministic);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const PlanList plan = ctx->saved_data["plan"].to<PlanList>();
    const std::optional<at::Tensor> halo_pe = plan.get(kHaloPe), halo_offset = plan.get(kHaloOffset);
    const c10::SymInt rows = ctx->saved_data["rows"].toSymInt();
    const c10::SymInt halo_rows = halo_pe ? halo_pe->sym_numel() : c10::SymInt(0);
    const at::Tensor out = adjoint("mgg.aggregate_peers", ctx, grads[0], halo_rows);
    const std::vector<c10::SymInt> peer_rows = ctx->saved_data["peer_rows"].toSymIntVector();
    const c10::List<bool> needs = ctx->saved_data["peer_needs"].toBoolList();
    const auto devices = ctx->saved_data["peer_devices"].toList();
    variable_list result{out.narrow_symint(0, 0, rows)};
    // Each halo row is one row of its owner's table. Rows of other PEs go to a spare last row,
    // which is cut off, so no shape depends on the data and torch.compile traces it.
    const at::Tensor halo = out.narrow_symint(0, rows, halo_rows);
    for (size_t pe = 0; pe < peer_rows.size(); ++pe) {
      if (!needs.get(pe)) {
        result.emplace_back();
        continue;
      }
      at::Tensor grad = out.new_zeros_symint({peer_rows[pe] + 1, out.sym_size(1)});
      if (halo_pe) {
        const at::Tensor index =
            halo_offset->to(at::kLong).masked_fill(halo_pe->ne(static_cast<int64_t>(pe)), c10::Scalar(peer_rows[pe]));
        grad.index_add_(0, index, halo);
      }
      result.push_back(grad.narrow_symint(0, 0, peer_rows[pe]).to(c10::Device(devices.get(pe).toStringRef())));
    }
    for (int i = 0; i < 5; ++i) result.emplace_back();  // my_pe, plan, params, fetch, deterministic
    return result;
  }
};

// Max/min (core/extreme.h): each output element's gradient goes to the source row its arg
// names, in [x | x_remote]; elements of rows without in-edges (arg kNoArg) go to a spare last
// row, which is cut off, so no shape depends on the data. arg is not differentiable.
class AggregateExtreme : public torch::autograd::Function<AggregateExtreme> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& x_remote,
                               const PlanList& plan, at::IntArrayRef params, c10::string_view reduce) {
    static auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mgg::aggregate_extreme", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const PlanList&,
                                                      at::IntArrayRef, c10::string_view)>();
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, arg] = op.call(x, x_remote, plan, params, reduce);
    ctx->save_for_backward({arg});
    ctx->saved_data["rows"] = x.sym_size(0);
    ctx->saved_data["halo_rows"] = x_remote.sym_size(0);
    ctx->mark_non_differentiable({arg});
    return {out, arg};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor arg = ctx->get_saved_variables()[0];
    const c10::SymInt rows = ctx->saved_data["rows"].toSymInt(), halo = ctx->saved_data["halo_rows"].toSymInt();
    const c10::SymInt sources = rows + halo;
    at::Tensor d = arg.new_zeros_symint({sources + 1, arg.sym_size(1)}, grads[0].options());
    if (grads[0].defined()) d.scatter_add_(0, arg.masked_fill(arg.lt(0), c10::Scalar(sources)), grads[0]);
    return {d.narrow_symint(0, 0, rows), d.narrow_symint(0, rows, halo), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> aggregate_extreme_autograd(const at::Tensor& x, const at::Tensor& x_remote,
                                                              const PlanList& plan, at::IntArrayRef params,
                                                              c10::string_view reduce) {
  auto outs = AggregateExtreme::apply(x, x_remote, plan, params, reduce);
  return {outs[0], outs[1]};
}

at::Tensor call_attend_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& x_remote,
                                const at::Tensor& a_dst, const at::Tensor& out, const at::Tensor& stats,
                                const PlanList& plan, at::IntArrayRef params, int64_t heads, double slope,
                                double dropout, int64_t seed, const std::optional<at::Tensor>& ids, int64_t row_offset,
                                at::Tensor* d_remote, at::Tensor* d_dst) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mgg::attend_backward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const at::Tensor&, const PlanList&, at::IntArrayRef, int64_t, double,
                           double, int64_t, const std::optional<at::Tensor>&, int64_t)>();
  auto [dx, dr, dd] =
      op.call(grad, x, x_remote, a_dst, out, stats, plan, params, heads, slope, dropout, seed, ids, row_offset);
  *d_remote = dr;
  *d_dst = dd;
  return dx;
}

// GAT's attention: the gradients of x (features and source terms), x_remote and a_dst, by the
// two passes of core/attention.h. The statistics output is not differentiable.
class Attend : public torch::autograd::Function<Attend> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& x_remote,
                               const at::Tensor& a_dst, const PlanList& plan, at::IntArrayRef params, int64_t heads,
                               double slope, double dropout, int64_t seed, const std::optional<at::Tensor>& ids,
                               int64_t row_offset) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("mgg::attend", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&, const PlanList&, at::IntArrayRef,
                             int64_t, double, double, int64_t, const std::optional<at::Tensor>&, int64_t)>();
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, stats] = op.call(x, x_remote, a_dst, plan, params, heads, slope, dropout, seed, ids, row_offset);
    ctx->save_for_backward({x, x_remote, a_dst, out, stats});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["params"] = params.vec();
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["slope"] = slope;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["row_offset"] = row_offset;
    ctx->mark_non_differentiable({stats});
    return {out, stats};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const c10::IValue& ids = ctx->saved_data["ids"];
    at::Tensor d_remote, d_dst;
    const at::Tensor dx = call_attend_backward(
        grads[0].defined() ? grads[0] : at::zeros_like(saved[3]), saved[0], saved[1], saved[2], saved[3], saved[4],
        ctx->saved_data["plan"].to<PlanList>(), ctx->saved_data["params"].toIntVector(),
        ctx->saved_data["heads"].toInt(), ctx->saved_data["slope"].toDouble(), ctx->saved_data["dropout"].toDouble(),
        ctx->saved_data["seed"].toInt(), ids.isNone() ? std::nullopt : std::optional<at::Tensor>(ids.toTensor()),
        ctx->saved_data["row_offset"].toInt(), &d_remote, &d_dst);
    return {dx,           d_remote,     d_dst,        at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> attend_autograd(const at::Tensor& x, const at::Tensor& x_remote,
                                                   const at::Tensor& a_dst, const PlanList& plan,
                                                   at::IntArrayRef params, int64_t heads, double slope, double dropout,
                                                   int64_t seed, const std::optional<at::Tensor>& ids,
                                                   int64_t row_offset) {
  auto outs = Attend::apply(x, x_remote, a_dst, plan, params, heads, slope, dropout, seed, ids, row_offset);
  return {outs[0], outs[1]};
}

// Whether a call has a gradient to record: grad mode on and an input that requires one. A call
// without runs the op below autograd, saving nothing for a backward that cannot come.
bool records(std::initializer_list<const at::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : inputs)
    if (t->requires_grad()) return true;
  return false;
}

at::Tensor aggregate_autograd(const at::Tensor& x, const at::Tensor& x_remote, const PlanList& plan,
                              at::IntArrayRef params, bool deterministic) {
  if (!records({&x, &x_remote})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_aggregate(x, x_remote, plan, params, deterministic);
  }
  return Aggregate::apply(x, x_remote, plan, params, deterministic);
}

at::Tensor aggregate_peers_autograd(const at::Tensor& x, at::TensorList peers, int64_t my_pe, const PlanList& plan,
                                    at::IntArrayRef params, int64_t fetch, bool deterministic) {
  return AggregatePeers::apply(x, peers, my_pe, plan, params, fetch, deterministic);
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, Autograd, m) {
  m.impl("aggregate", &aggregate_autograd);
  m.impl("aggregate_peers", &aggregate_peers_autograd);
  m.impl("aggregate_extreme", &aggregate_extreme_autograd);
  m.impl("attend", &attend_autograd);
}

}  // namespace mgg
