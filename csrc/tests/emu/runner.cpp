// simt_runner CASE_DIR...: runs each case (op aggregate, aggregate_extreme or attention) under the
// SIMT emulator with the scheduling seed it names, and writes status.txt ("ok" or why not) beside
// it (and, for a case with `trace 1`, the emulator's trace of warp and block calls as trace.txt).
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "../../kernels/api.h"
#include "runner.h"

namespace mgg::kernels {
// The kernels' `extern __shared__ unsigned char smem[]`: one array as large as the H100's
// opt-in limit, which each block sees NaN-filled up to its launched size and poisoned beyond.
constexpr size_t kSharedCapacity = 227 * 1024;
alignas(16) thread_local unsigned char smem[kSharedCapacity];
}  // namespace mgg::kernels

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
      const std::string op = c.text("op");
      status = op == "aggregate"           ? mgg::emu::run_aggregate(c)
               : op == "aggregate_extreme" ? mgg::emu::run_aggregate_extreme(c)
                                           : mgg::emu::run_attention(c);
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
