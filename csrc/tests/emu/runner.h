// The emulated-kernel runner's operations: each runs one case (case_io.h) through the real
// launchers and kernels under the SIMT emulator and writes its outputs; an empty result means
// it ran, otherwise it says why not (a launch refused, or the emulator's report).
#pragma once
#include <string>

#include "case_io.h"

namespace mgg::emu {

std::string run_aggregate(Case& c);
std::string run_aggregate_extreme(Case& c);
std::string run_attention(Case& c);
std::string run_node_keep(Case& c);

}  // namespace mgg::emu
