// kernels/peers.cu for the emulator. Its block-scope-get kernel sits in an anonymous namespace,
// so the kernel's `extern __shared__` array names an entity of that namespace: it is defined
// here, before the file is included, and registered with the emulator like runner.cpp's.
#include <cstddef>

namespace mgg::kernels {
namespace {
alignas(16) thread_local unsigned char smem[simt::kSharedOptin];
const bool registered = (simt::register_dynamic_shared([] { return smem; }, sizeof smem), true);
}  // namespace
}  // namespace mgg::kernels

#include "../../kernels/peers.cu"
