// The node-feature dropout mask (kernels/dropout.cu: its launcher and kernel) on a case: nodes
// (int64 [rows]), col0, cols, drop_seed, step, layer, p -> mask (bool [rows, cols]), as mgg::node_keep's
// CUDA body computes it (core/dropout.h's stream of seed, step and layer).
#include <cstdint>
#include <vector>

#include "../../core/dropout.h"
#include "../../kernels/api.h"
#include "runner.h"

namespace mgg::emu {

std::string run_node_keep(Case& c) {
  const int64_t rows = c.integer("rows"), col0 = c.integer("col0"), cols = c.integer("cols");
  const int64_t* nodes = c.array<int64_t>("nodes");
  if (nodes == nullptr && rows > 0) return "node_keep: the case has no nodes";
  const uint64_t stream =
      dropout_stream(static_cast<uint64_t>(c.integer("drop_seed")), c.integer("step"), c.integer("layer"));
  Bytes mask(static_cast<size_t>(rows * cols));
  const cudaError_t e = kernels::launch_node_keep(nodes, rows, col0, cols, stream, static_cast<float>(c.real("p")),
                                                  reinterpret_cast<bool*>(mask.data()), nullptr);
  if (e != cudaSuccess) return "node_keep: the launch was refused";
  c.write("mask", mask.data(), mask.size());
  return "";
}

}  // namespace mgg::emu
