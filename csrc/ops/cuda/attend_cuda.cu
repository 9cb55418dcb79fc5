// CUDA implementations of the attention ops (GAT; ops/cpu/attend_cpu.cpp lists them): the ATen
// side of kernels/attention.cu. They check the call (ops/checks.cpp), plan each launch for this
// GPU (one-line error when it cannot launch) and allocate outputs; statistics and terms are fp32.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../kernels/api.h"
#include "../attention_terms.h"
#include "../step.h"
#include "sources.h"

namespace mgg {
namespace {

kernels::DevicePart part_of(const Step& s, StepField rowptr, StepField col, bool peers) {
  if (!s.has(rowptr)) return {nullptr, nullptr, nullptr, nullptr};
  const bool remote = rowptr == kRemoteRowptr;
  return {s[rowptr].data_ptr<int64_t>(), s[col].data_ptr<int32_t>(), nullptr,
          remote && peers ? s[kRemotePe].data_ptr<int32_t>() : nullptr};
}

kernels::Attention attention_of(const AttentionCall& c, const Step& step, const NodeIds& ids, at::ScalarType st,
                                bool peers, double slope, double dropout, int64_t seed) {
  kernels::Attention a{};
  a.storage = storage_of(c.op, st);
  a.local = part_of(step, kLocalRowptr, kLocalCol, peers);
  a.remote = part_of(step, kRemoteRowptr, kRemoteCol, peers);
  a.rows = step.rows();
  a.heads = c.heads;
  a.channels = c.channels;
  a.wpb = step.wpb;
  a.slope = static_cast<float>(slope);
  a.dropout = static_cast<float>(dropout);
  a.seed = static_cast<uint64_t>(seed);
  a.ids = ids;
  return a;
}

// Plans and runs one pass; `run(launch)` launches it.
template <typename Run>
void run_pass(const char* op, const kernels::Attention& a, kernels::AttentionPass pass, kernels::Source source,
              Run&& run) {
  if (a.rows == 0) return;
  kernels::Launch l{};
  const std::string why = kernels::plan_attention_launch(a, pass, source, &l);
  TORCH_CHECK(why.empty(), op, ": ", why);
  C10_CUDA_CHECK(run(l));
}

kernels::Sources table_sources(const at::Tensor& local, const at::Tensor& remote) {
  kernels::Sources s{};
  s.local_table = local.data_ptr();
  s.remote_table = remote.data_ptr();
  return s;
}

cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

std::tuple<at::Tensor, at::Tensor> attend_cuda(const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
                                               const PlanList& plan, at::IntArrayRef params, int64_t heads,
                                               double slope, double dropout, int64_t seed,
                                               const std::optional<at::Tensor>& ids, int64_t row_offset) {
  const char* op = "mgg.attend";
  const c10::cuda::CUDAGuard guard(x.device());
  const AttentionCall c = check_attend(op, x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, false);
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), false, slope, dropout, seed);
  at::Tensor out = at::empty({a.rows, heads * c.channels}, x.options());
  at::Tensor stats = at::empty({a.rows, 2 * heads}, x.options().dtype(at::kFloat));
  const kernels::Sources src = table_sources(x, x_remote);
  run_pass(op, a, kernels::AttentionPass::kForward, kernels::Source::kTable, [&](const kernels::Launch& l) {
    return kernels::launch_attend(a, kernels::Source::kTable, src, l, a_dst.data_ptr(), out.data_ptr(),
                                  stats.data_ptr<float>(), stream());
  });
  return {out, stats};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attend_backward_cuda(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
    const at::Tensor& out, const at::Tensor& stats, const PlanList& plan, at::IntArrayRef params, int64_t heads,
    double slope, double dropout, int64_t seed, const std::optional<at::Tensor>& ids, int64_t row_offset) {
  const char* op = "mgg.attend_backward";
  const c10::cuda::CUDAGuard guard(x.device());
  const AttentionCall c = check_attend(op, x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, true);
  const at::Tensor terms = attention_terms(op, grad, out, a_dst, stats, heads, at::kFloat);
  const at::Tensor own = at::cat({x, x_remote}, 0).contiguous();
  const kernels::Attention fwd = attention_of(c, c.step, c.ids, x.scalar_type(), false, slope, dropout, seed);
  const kernels::Attention bwd = attention_of(c, c.step_t, c.ids_t, x.scalar_type(), false, slope, dropout, seed);
  at::Tensor d_dst = at::empty({fwd.rows, heads}, a_dst.options());
  at::Tensor d_all = at::empty({own.size(0), x.size(1)}, x.options());
  const kernels::Sources src = table_sources(x, x_remote), tsrc = table_sources(terms, terms);
  run_pass(op, fwd, kernels::AttentionPass::kDst, kernels::Source::kTable, [&](const kernels::Launch& l) {
    return kernels::launch_attend_dst(fwd, kernels::Source::kTable, src, l, terms.data_ptr<float>(), d_dst.data_ptr(),
                                      stream());
  });
  run_pass(op, bwd, kernels::AttentionPass::kSrc, kernels::Source::kTable, [&](const kernels::Launch& l) {
    return kernels::launch_attend_src(bwd, kernels::Source::kTable, tsrc, l, own.data_ptr(), d_all.data_ptr(),
                                      stream());
  });
  return {d_all.narrow(0, 0, x.size(0)), d_all.narrow(0, x.size(0), x_remote.size(0)), d_dst};
}

std::tuple<at::Tensor, at::Tensor> attend_peers_cuda(at::TensorList peers, int64_t my_pe, const at::Tensor& a_dst,
                                                     const PlanList& plan, at::IntArrayRef params, int64_t heads,
                                                     double slope, double dropout, int64_t seed,
                                                     at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const c10::cuda::CUDAGuard guard(x.device());
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets, fetch, 1);
  check_attention_dst(op, a_dst, x, c.step.rows(), heads);
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor out = at::empty({a.rows, heads * c.channels}, x.options());
  at::Tensor stats = at::empty({a.rows, 2 * heads}, x.options().dtype(at::kFloat));
  kernels::Source source{};
  const kernels::Sources src = peer_sources(op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  run_pass(op, a, kernels::AttentionPass::kForward, source, [&](const kernels::Launch& l) {
    return kernels::launch_attend(a, source, src, l, a_dst.data_ptr(), out.data_ptr(), stats.data_ptr<float>(),
                                  stream());
  });
  return {out, stats};
}

at::Tensor attend_peers_dst_cuda(at::TensorList peers, int64_t my_pe, const at::Tensor& terms, const PlanList& plan,
                                 at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                 at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_dst";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const c10::cuda::CUDAGuard guard(x.device());
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets, fetch, 1);
  check_attention_terms(op, terms, c.step.rows(), heads, c.channels, at::kFloat, x.device());
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor d_dst = at::empty({a.rows, heads}, x.options());
  kernels::Source source{};
  const kernels::Sources src = peer_sources(op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  run_pass(op, a, kernels::AttentionPass::kDst, source, [&](const kernels::Launch& l) {
    return kernels::launch_attend_dst(a, source, src, l, terms.data_ptr<float>(), d_dst.data_ptr(), stream());
  });
  return d_dst;
}

at::Tensor attend_peers_src_cuda(const at::Tensor& x, at::TensorList terms, int64_t my_pe, const PlanList& plan,
                                 at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                 at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_src";
  const c10::cuda::CUDAGuard guard(x.device());
  const AttentionCall c =
      check_attend_peers(op, x, terms, my_pe, plan, params, heads, dropout, offsets, fetch, kTermFields);
  TORCH_CHECK(terms[my_pe].scalar_type() == at::kFloat, op, ": the terms tables must be float32 on CUDA, got ",
              terms[my_pe].scalar_type());
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor grad = at::empty({x.size(0), x.size(1)}, x.options());
  kernels::Source source{};
  const kernels::Sources src = peer_sources(op, terms, my_pe, static_cast<Fetch>(fetch), &source);
  run_pass(op, a, kernels::AttentionPass::kSrc, source, [&](const kernels::Launch& l) {
    return kernels::launch_attend_src(a, source, src, l, x.data_ptr(), grad.data_ptr(), stream());
  });
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(mgg, CUDA, m) {
  m.impl("attend", &attend_cuda);
  m.impl("attend_backward", &attend_backward_cuda);
  m.impl("attend_peers", &attend_peers_cuda);
  m.impl("attend_peers_dst", &attend_peers_dst_cuda);
  m.impl("attend_peers_src", &attend_peers_src_cuda);
}

}  // namespace mgg
