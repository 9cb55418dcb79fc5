// The attention ops' CUDA path on CPU tensors, under the SIMT emulator: mgg_emu::attend,
// attend_backward and attend_peers(_dst, _src), the op bodies of ops/device_attention.h (the CUDA
// op file's) on the emulated device (torch_device.h) with the real launchers and kernels. Their
// schemas are inferred from the op bodies (positional arguments, as simt/emulator.py passes them).
#include <torch/library.h>

#include "../../ops/device_attention.h"
#include "torch_device.h"

namespace mgg {

TORCH_LIBRARY_FRAGMENT(mgg_emu, m) {
  m.def("attend", &attend_device<Emulated>);
  m.def("attend_backward", &attend_backward_device<Emulated>);
  m.def("attend_peers", &attend_peers_device<Emulated>);
  m.def("attend_peers_dst", &attend_peers_dst_device<Emulated>);
  m.def("attend_peers_src", &attend_peers_src_device<Emulated>);
}

}  // namespace mgg
