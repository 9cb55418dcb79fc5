// An emulated aggregation step (and a max/min step: run_aggregate_extreme): kernels::Step filled
// by ops/kernel_step.h from the case (as ops/device_step.h fills it from an op's Step), the launch
// planned and run by the real launchers (kernels/table.cu, kernels/peers.cu), the output and
// carry rows NaN-filled first so that an unwritten element shows.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../ops/kernel_step.h"
#include "case_step.h"
#include "runner.h"
#include "sources.h"

namespace mgg::emu {

std::string run_aggregate(Case& c) {
  const CaseSources s = case_sources(c);
  const bool peers = s.source != kernels::Source::kTable;
  const kernels::Step ks = kernel_step(CaseStep{c}, storage_of(c), c.integer("dim"), peers);
  std::vector<unsigned char> out(static_cast<size_t>(ks.num_rows * ks.dim) * kernels::storage_bytes(ks.storage), 0xff);
  if (out.empty()) return {};
  kernels::Launch l{};
  const std::string why =
      peers ? kernels::plan_peers_launch(ks, s.source, s.src, &l) : kernels::plan_table_launch(ks, s.src, &l);
  if (!why.empty()) return "plan: " + why;
  c.write("launch", &l, sizeof l);
  std::vector<float> carry(static_cast<size_t>(c.integer("num_slots") * ks.dim));
  if (!carry.empty()) std::memset(carry.data(), 0xff, carry.size() * sizeof(float));
  const cudaError_t e = peers ? kernels::launch_peers(ks, s.source, s.src, l, out.data(), carry.data(), nullptr)
                              : kernels::launch_table(ks, s.src, l, out.data(), carry.data(), nullptr);
  if (e != cudaSuccess) return std::string(cudaGetErrorString(e)) + "\n" + simt::last_report();
  c.write("out", out.data(), out.size());
  return {};
}

// Max/min (kernels/extreme_kernel.cuh) from tables: `reduce` max or min; out NaN-filled and arg
// filled with 0x7f bytes (no valid row, not kNoArg) first, so an unwritten element shows.
std::string run_aggregate_extreme(Case& c) {
  const CaseSources s = case_sources(c);
  if (s.source != kernels::Source::kTable) return "aggregate_extreme reads tables only";
  const kernels::Step ks = kernel_step(CaseStep{c}, storage_of(c), c.integer("dim"), false);
  const size_t n = static_cast<size_t>(ks.num_rows * ks.dim);
  std::vector<unsigned char> out(n * kernels::storage_bytes(ks.storage), 0xff);
  std::vector<int64_t> arg(n);
  if (n == 0) return {};
  std::memset(arg.data(), 0x7f, n * sizeof(int64_t));
  kernels::Launch l{};
  const std::string why = kernels::plan_extreme_launch(ks, &l);
  if (!why.empty()) return "plan: " + why;
  c.write("launch", &l, sizeof l);
  const cudaError_t e = kernels::launch_extreme_table(ks, s.src, l, c.text("reduce") == "max", c.integer("remote_base"),
                                                      out.data(), arg.data(), nullptr);
  if (e != cudaSuccess) return std::string(cudaGetErrorString(e)) + "\n" + simt::last_report();
  c.write("out", out.data(), out.size());
  c.write("arg", arg.data(), n * sizeof(int64_t));
  return {};
}

}  // namespace mgg::emu
