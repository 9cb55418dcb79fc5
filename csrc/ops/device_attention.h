// The attention ops' device path (GAT; kernels/attention.cu) on the ATen side, written once: each
// op checks the call (ops/checks.cpp), fills kernels::Attention, plans each pass (one-line error
// when it cannot launch), allocates the outputs and launches. Shared by the CUDA op file
// (ops/cuda/attend_cuda.cu) and the emulated ops of the tests (csrc/tests/emu/torch_ops.cpp), so
// the emulator runs the same host code. Statistics and terms are fp32. `Dev` says what differs:
//   Dev::Guard(device)                          the device made current for the call
//   Dev::empty(sizes, options)                  an output
//   Dev::peers(op, tables, my_pe, how, &source) each PE's table as the kernels read it
//   Dev::fetch_for_checks(op, fetch)            the fetch policy the host checks see
//   Dev::launch(op, run)                        checks run(stream), a cudaError_t
#pragma once
#include <ATen/ATen.h>

#include <tuple>

#include "../kernels/api.h"
#include "attention_terms.h"
#include "device_step.h"
#include "step.h"

namespace mgg {

// The kernels::Attention of a checked call's step (its forward step or the transposed one).
inline kernels::Attention attention_of(const AttentionCall& c, const Step& step, const NodeIds& ids, at::ScalarType st,
                                       bool peers, double slope, double dropout, int64_t seed) {
  kernels::Attention a{};
  a.storage = storage_of(c.op, st);
  const StepView v{step, nullptr};  // unweighted: the edges' weights are the attention's
  a.local = kernel_part(v, kLocalRowptr, kLocalCol, kStepFields, kStepFields);
  a.remote = kernel_part(v, kRemoteRowptr, kRemoteCol, kStepFields, peers ? kRemotePe : kStepFields);
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

// Plans one pass and launches it: `run(launch, stream)` returns the launcher's error.
template <typename Dev, typename Run>
void run_attention_pass(const char* op, const kernels::Attention& a, kernels::AttentionPass pass,
                        kernels::Source source, const kernels::Sources& src, Run&& run) {
  if (a.rows == 0) return;
  kernels::Launch l{};
  const std::string why = kernels::plan_attention_launch(a, pass, source, src, &l);
  TORCH_CHECK(why.empty(), op, ": ", why);
  Dev::launch(op, [&](cudaStream_t stream) { return run(l, stream); });
}

inline kernels::Sources attention_table_sources(const at::Tensor& local, const at::Tensor& remote) {
  kernels::Sources s{};
  s.local_table = local.data_ptr();
  s.remote_table = remote.data_ptr();
  return s;
}

template <typename Dev>
std::tuple<at::Tensor, at::Tensor> attend_device(const at::Tensor& x, const at::Tensor& x_remote,
                                                 const at::Tensor& a_dst, const PlanList& plan, at::IntArrayRef params,
                                                 int64_t heads, double slope, double dropout, int64_t seed,
                                                 const std::optional<at::Tensor>& ids, int64_t row_offset) {
  const char* op = "mgg.attend";
  const typename Dev::Guard guard(x.device());
  const AttentionCall c = check_attend(op, x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, false);
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), false, slope, dropout, seed);
  at::Tensor out = Dev::empty({a.rows, heads * c.channels}, x.options());
  at::Tensor stats = Dev::empty({a.rows, 2 * heads}, x.options().dtype(at::kFloat));
  const kernels::Sources src = attention_table_sources(x, x_remote);
  run_attention_pass<Dev>(op, a, kernels::AttentionPass::kForward, kernels::Source::kTable, src,
                          [&](const kernels::Launch& l, cudaStream_t stream) {
                            return kernels::launch_attend(a, kernels::Source::kTable, src, l, a_dst.data_ptr(),
                                                          out.data_ptr(), stats.data_ptr<float>(), stream);
                          });
  return {out, stats};
}

template <typename Dev>
std::tuple<at::Tensor, at::Tensor, at::Tensor> attend_backward_device(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& x_remote, const at::Tensor& a_dst,
    const at::Tensor& out, const at::Tensor& stats, const PlanList& plan, at::IntArrayRef params, int64_t heads,
    double slope, double dropout, int64_t seed, const std::optional<at::Tensor>& ids, int64_t row_offset) {
  const char* op = "mgg.attend_backward";
  const typename Dev::Guard guard(x.device());
  const AttentionCall c = check_attend(op, x, x_remote, a_dst, plan, params, heads, dropout, ids, row_offset, true);
  const at::Tensor terms = attention_terms(op, grad, out, a_dst, stats, heads, at::kFloat);
  const at::Tensor own = at::cat({x, x_remote}, 0).contiguous();
  const kernels::Attention fwd = attention_of(c, c.step, c.ids, x.scalar_type(), false, slope, dropout, seed);
  const kernels::Attention bwd = attention_of(c, c.step_t, c.ids_t, x.scalar_type(), false, slope, dropout, seed);
  at::Tensor d_dst = Dev::empty({fwd.rows, heads}, a_dst.options());
  at::Tensor d_all = Dev::empty({own.size(0), x.size(1)}, x.options());
  const kernels::Sources src = attention_table_sources(x, x_remote), tsrc = attention_table_sources(terms, terms);
  run_attention_pass<Dev>(op, fwd, kernels::AttentionPass::kDst, kernels::Source::kTable, src,
                          [&](const kernels::Launch& l, cudaStream_t stream) {
                            return kernels::launch_attend_dst(fwd, kernels::Source::kTable, src, l,
                                                              terms.data_ptr<float>(), d_dst.data_ptr(), stream);
                          });
  run_attention_pass<Dev>(op, bwd, kernels::AttentionPass::kSrc, kernels::Source::kTable, tsrc,
                          [&](const kernels::Launch& l, cudaStream_t stream) {
                            return kernels::launch_attend_src(bwd, kernels::Source::kTable, tsrc, l, own.data_ptr(),
                                                              d_all.data_ptr(), stream);
                          });
  return {d_all.narrow(0, 0, x.size(0)), d_all.narrow(0, x.size(0), x_remote.size(0)), d_dst};
}

template <typename Dev>
std::tuple<at::Tensor, at::Tensor> attend_peers_device(at::TensorList peers, int64_t my_pe, const at::Tensor& a_dst,
                                                       const PlanList& plan, at::IntArrayRef params, int64_t heads,
                                                       double slope, double dropout, int64_t seed,
                                                       at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const typename Dev::Guard guard(x.device());
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets,
                                             Dev::fetch_for_checks(op, fetch), 1);
  check_attention_dst(op, a_dst, x, c.step.rows(), heads);
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor out = Dev::empty({a.rows, heads * c.channels}, x.options());
  at::Tensor stats = Dev::empty({a.rows, 2 * heads}, x.options().dtype(at::kFloat));
  kernels::Source source{};
  const kernels::Sources src = Dev::peers(op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  run_attention_pass<Dev>(op, a, kernels::AttentionPass::kForward, source, src,
                          [&](const kernels::Launch& l, cudaStream_t stream) {
                            return kernels::launch_attend(a, source, src, l, a_dst.data_ptr(), out.data_ptr(),
                                                          stats.data_ptr<float>(), stream);
                          });
  return {out, stats};
}

template <typename Dev>
at::Tensor attend_peers_dst_device(at::TensorList peers, int64_t my_pe, const at::Tensor& terms, const PlanList& plan,
                                   at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                   at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_dst";
  const at::Tensor& x = own_table(op, peers, my_pe);
  const typename Dev::Guard guard(x.device());
  const AttentionCall c = check_attend_peers(op, x, peers, my_pe, plan, params, heads, dropout, offsets,
                                             Dev::fetch_for_checks(op, fetch), 1);
  check_attention_terms(op, terms, c.step.rows(), heads, c.channels, at::kFloat, x.device());
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor d_dst = Dev::empty({a.rows, heads}, x.options());
  kernels::Source source{};
  const kernels::Sources src = Dev::peers(op, peers, my_pe, static_cast<Fetch>(fetch), &source);
  run_attention_pass<Dev>(
      op, a, kernels::AttentionPass::kDst, source, src, [&](const kernels::Launch& l, cudaStream_t stream) {
        return kernels::launch_attend_dst(a, source, src, l, terms.data_ptr<float>(), d_dst.data_ptr(), stream);
      });
  return d_dst;
}

template <typename Dev>
at::Tensor attend_peers_src_device(const at::Tensor& x, at::TensorList terms, int64_t my_pe, const PlanList& plan,
                                   at::IntArrayRef params, int64_t heads, double slope, double dropout, int64_t seed,
                                   at::IntArrayRef offsets, int64_t fetch) {
  const char* op = "mgg.attend_peers_src";
  const typename Dev::Guard guard(x.device());
  const AttentionCall c = check_attend_peers(op, x, terms, my_pe, plan, params, heads, dropout, offsets,
                                             Dev::fetch_for_checks(op, fetch), kTermFields);
  TORCH_CHECK(terms[my_pe].scalar_type() == at::kFloat, op, ": the terms tables must be float32 on CUDA, got ",
              terms[my_pe].scalar_type());
  const kernels::Attention a = attention_of(c, c.step, c.ids, x.scalar_type(), true, slope, dropout, seed);
  at::Tensor grad = Dev::empty({x.size(0), x.size(1)}, x.options());
  kernels::Source source{};
  const kernels::Sources src = Dev::peers(op, terms, my_pe, static_cast<Fetch>(fetch), &source);
  run_attention_pass<Dev>(op, a, kernels::AttentionPass::kSrc, source, src,
                          [&](const kernels::Launch& l, cudaStream_t stream) {
                            return kernels::launch_attend_src(a, source, src, l, x.data_ptr(), grad.data_ptr(), stream);
                          });
  return grad;
}

}  // namespace mgg
