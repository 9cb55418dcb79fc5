// An emulated attention pass: kernels::Attention filled as ops/device_attention.h fills it (its
// parts by ops/kernel_step.h), the launch planned and run by the real launchers
// (kernels/attention.cu); outputs NaN-filled first.
//   pass fwd: sources `table`/`remote_table` (or the PEs' tables), a_dst -> out, stats
//   pass dst: the same sources, terms -> d_dst
//   pass src: sources are terms tables (`terms`/`terms` or the PEs'), own -> grad
#include <cstring>
#include <string>
#include <vector>

#include "../../ops/kernel_step.h"
#include "case_step.h"
#include "runner.h"
#include "sources.h"

namespace mgg::emu {
namespace {

NodeIds ids_of(Case& c) {
  NodeIds ids{};
  ids.rows = {nullptr, c.integer("ids_rows")};
  ids.local = {nullptr, c.integer("ids_local")};
  ids.remote = {nullptr, c.integer("ids_remote")};
  ids.by_pe = c.integer("by_pe") != 0;
  if (ids.by_pe) {
    const int64_t* base = c.array<int64_t>("pe_base");
    for (int i = 0; i < c.integer("n_pes"); ++i) ids.pe_base[i] = base[i];
  }
  return ids;
}

std::vector<unsigned char> nan_filled(size_t bytes) { return std::vector<unsigned char>(bytes, 0xff); }

}  // namespace

std::string run_attention(Case& c) {
  const std::string pass = c.text("pass");
  const bool terms_sources = pass == "src";
  const CaseSources s = terms_sources ? case_sources(c, "terms", "terms") : case_sources(c);
  const bool peers = s.source != kernels::Source::kTable;
  kernels::Attention a{};
  a.storage = storage_of(c);
  const CaseStep v{c};
  a.local = kernel_part(v, kLocalRowptr, kLocalCol, kStepFields, kStepFields);
  a.remote = kernel_part(v, kRemoteRowptr, kRemoteCol, kStepFields, peers ? kRemotePe : kStepFields);
  a.rows = c.integer("rows");
  a.heads = c.integer("heads");
  a.channels = c.integer("channels");
  a.wpb = c.integer("wpb");
  a.slope = static_cast<float>(c.real("slope"));
  a.dropout = static_cast<float>(c.real("dropout"));
  a.seed = static_cast<uint64_t>(c.integer("drop_seed"));
  a.ids = ids_of(c);
  if (a.rows == 0) return {};
  const kernels::AttentionPass kind = pass == "fwd"   ? kernels::AttentionPass::kForward
                                      : pass == "dst" ? kernels::AttentionPass::kDst
                                                      : kernels::AttentionPass::kSrc;
  kernels::Launch l{};
  const std::string why = kernels::plan_attention_launch(a, kind, s.source, s.src, &l);
  if (!why.empty()) return "plan: " + why;
  c.write("launch", &l, sizeof l);
  const size_t elem = kernels::storage_bytes(a.storage), H = a.heads, C = a.channels, R = a.rows;
  cudaError_t e = cudaSuccess;
  if (kind == kernels::AttentionPass::kForward) {
    std::vector<unsigned char> out = nan_filled(R * H * C * elem), stats = nan_filled(R * 2 * H * sizeof(float));
    e = kernels::launch_attend(a, s.source, s.src, l, c.array<void>("a_dst"), out.data(),
                               reinterpret_cast<float*>(stats.data()), nullptr);
    c.write("out", out.data(), out.size());
    c.write("stats", stats.data(), stats.size());
  } else if (kind == kernels::AttentionPass::kDst) {
    std::vector<unsigned char> d_dst = nan_filled(R * H * elem);
    e = kernels::launch_attend_dst(a, s.source, s.src, l, c.array<float>("terms"), d_dst.data(), nullptr);
    c.write("d_dst", d_dst.data(), d_dst.size());
  } else {
    std::vector<unsigned char> grad = nan_filled(R * H * (C + 1) * elem);
    e = kernels::launch_attend_src(a, s.source, s.src, l, c.array<void>("own"), grad.data(), nullptr);
    c.write("grad", grad.data(), grad.size());
  }
  if (e != cudaSuccess) return std::string(cudaGetErrorString(e)) + "\n" + simt::last_report();
  return {};
}

}  // namespace mgg::emu
