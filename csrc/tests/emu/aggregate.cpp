// An emulated aggregation step: kernels::Step filled as ops/device_step.h fills it (this runner is
// torch-free, so it repeats those lines; torch_ops.cpp runs device_step.h itself), the
// launch planned and run by the real launchers (kernels/table.cu, kernels/peers.cu), the output
// and scratch NaN-filled first so that an unwritten element shows.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner.h"
#include "sources.h"

namespace mgg::emu {
namespace {

kernels::DevicePart part(Case& c, const char* name, bool peers) {
  const std::string p(name);
  if (!c.array<int64_t>(p + "_rowptr")) return {nullptr, nullptr, nullptr, nullptr};
  return {c.array<int64_t>(p + "_rowptr"), c.array<int32_t>(p + "_col"), c.array<float>(p + "_weight"),
          peers ? c.array<int32_t>(p + "_pe") : nullptr};
}

}  // namespace

std::string run_aggregate(Case& c) {
  const CaseSources s = case_sources(c);
  const bool peers = s.source != kernels::Source::kTable;
  kernels::Step ks{};
  ks.storage = storage_of(c);
  ks.local = part(c, "local", false);
  ks.remote = part(c, "remote", peers);
  ks.blocks = c.array<int64_t>("blocks");
  ks.num_blocks = c.integer("num_blocks");
  ks.fixups = c.array<int64_t>("fixups");
  ks.num_fixups = c.integer("num_fixups");
  ks.num_rows = c.integer("rows");
  ks.dim = c.integer("dim");
  ks.ps = c.integer("ps");
  ks.dist = c.integer("dist");
  ks.wpb = c.integer("wpb");
  ks.max_remote_part = c.integer("max_remote_part");
  ks.interleave = c.integer("interleave") != 0;
  ks.deterministic = c.integer("deterministic") != 0;
  std::vector<unsigned char> out(static_cast<size_t>(ks.num_rows * ks.dim) * kernels::storage_bytes(ks.storage), 0xff);
  if (out.empty()) return {};
  kernels::Launch l{};
  const std::string why = peers ? kernels::plan_peers_launch(ks, s.source, &l) : kernels::plan_table_launch(ks, &l);
  if (!why.empty()) return "plan: " + why;
  c.write("launch", &l, sizeof l);
  std::vector<float> scratch(static_cast<size_t>((ks.deterministic ? 0 : c.integer("num_slots")) * ks.dim));
  if (!scratch.empty()) std::memset(scratch.data(), 0xff, scratch.size() * sizeof(float));
  const cudaError_t e = peers ? kernels::launch_peers(ks, s.source, s.src, l, out.data(), scratch.data(), nullptr)
                              : kernels::launch_table(ks, s.src, l, out.data(), scratch.data(), nullptr);
  if (e != cudaSuccess) return std::string(cudaGetErrorString(e)) + "\n" + simt::last_report();
  c.write("out", out.data(), out.size());
  return {};
}

}  // namespace mgg::emu
