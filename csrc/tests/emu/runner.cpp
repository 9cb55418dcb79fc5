// simt_runner CASE_DIR...: runs each case (op aggregate, aggregate_extreme, attention or node_keep) under the
// SIMT emulator with the scheduling seed it names, and writes status.txt ("ok" or why not) beside
// it (and, for a case with `trace 1`, the emulator's trace of warp and block calls as trace.txt;
// for a case with `counters 1`, the memory counters by load site and region, the case's arrays
// and shared memory named, and the shared-memory sites' requests and bank wavefronts, as
// counters.txt).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "../../kernels/api.h"
#include "runner.h"

namespace mgg::kernels {
// The kernels' `extern __shared__ unsigned char smem[]`: one array as large as the H100's
// opt-in limit, which each block sees NaN-filled up to its launched size and poisoned beyond.
constexpr size_t kSharedCapacity = simt::kSharedOptin;
alignas(16) thread_local unsigned char smem[kSharedCapacity];
}  // namespace mgg::kernels

namespace {

void start_counters(const mgg::emu::Case& c) {
  simt::count_memory(true);
  c.for_each_array(
      [](const std::string& name, const void* data, size_t bytes) { simt::name_region(name, data, bytes); });
  simt::name_dynamic_shared("shared");  // runner.cpp's array and peers_kernels.cpp's
}

// counters.txt: `load SITE REGION requests sectors active_lanes lane_slots bytes`,
// `shared SITE OP requests wavefronts active_lanes` (OP ld, st or atom), `get SCOPE calls bytes
// sectors` (NVSHMEM gets at thread, warp or block scope), `atomic SITE SPACE operations` (SPACE
// shared or global), `warp_call NAME count` lines, and one `chain warps loads most without_rows`
// line (simt.h's ChainCounts).
void write_counters(const mgg::emu::Case& c) {
  std::ofstream out(c.dir() + "/counters.txt");
  for (const simt::SiteCounts& k : simt::memory_counts()) {
    out << "load " << k.site << " " << k.region << " " << k.requests << " " << k.sectors << " " << k.active_lanes << " "
        << k.lane_slots << " " << k.bytes << "\n";
  }
  for (const simt::SharedCounts& k : simt::shared_counts()) {
    out << "shared " << k.site << " " << k.op << " " << k.requests << " " << k.wavefronts << " " << k.active_lanes
        << "\n";
  }
  for (const simt::GetCounts& k : simt::get_counts()) {
    out << "get " << k.scope << " " << k.calls << " " << k.bytes << " " << k.sectors << "\n";
  }
  for (const simt::AtomicCounts& k : simt::atomic_counts()) {
    out << "atomic " << k.site << " " << k.space << " " << k.operations << "\n";
  }
  const simt::ChainCounts chain = simt::chain_counts();
  out << "chain " << chain.warps << " " << chain.loads << " " << chain.most << " " << chain.without_rows << "\n";
  for (auto [name, n] : simt::warp_call_counts()) {
    std::replace(name.begin(), name.end(), ' ', '_');
    out << "warp_call " << name << " " << n << "\n";
  }
  simt::count_memory(false);
}

}  // namespace

int main(int argc, char** argv) {
  simt::register_dynamic_shared([] { return mgg::kernels::smem; }, mgg::kernels::kSharedCapacity);
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string status;
    try {
      mgg::emu::Case c(argv[i]);
      simt::set_seed(static_cast<uint64_t>(c.integer("seed")));
      std::FILE* trace = c.has("trace") ? std::fopen((c.dir() + "/trace.txt").c_str(), "w") : nullptr;
      simt::trace_to(trace);
      const bool counting = c.has("counters");
      if (counting) start_counters(c);
      const std::string op = c.text("op");
      status = op == "aggregate"           ? mgg::emu::run_aggregate(c)
               : op == "aggregate_extreme" ? mgg::emu::run_aggregate_extreme(c)
               : op == "node_keep"         ? mgg::emu::run_node_keep(c)
                                           : mgg::emu::run_attention(c);
      if (counting) write_counters(c);
      simt::trace_to(nullptr);
      if (trace) std::fclose(trace);
    } catch (const std::exception& e) {
      status = std::string("runner: ") + e.what();
    }
    failed += !status.empty();
    std::ofstream(std::string(argv[i]) + "/status.txt") << (status.empty() ? "ok" : status) << "\n";
  }
  return failed ? 1 : 0;
}
