// Why the extension attaches to NVSHMEM after nvshmem4py has started it.
//
// nvshmem4py (mgg/distributed/nvshmem/symmetric.py) owns NVSHMEM's runtime: nvshmem.core.init bootstraps
// it through libnvshmem_host.so, the one host library that torch, nvshmem4py and this extension
// all load (they share it by soname). But this extension links NVSHMEM's device library
// statically (libnvshmem_device.a, device-linked with -rdc), and that archive defines
// `__constant__ nvshmemi_device_host_state_t nvshmemi_device_state_d` (src/device/init/
// init_device.cu in NVSHMEM 3.4.5): every device-side NVSHMEM call in this module's kernels reads
// this module's own instance of it (heap base, peer heap bases, PE, job connectivity). The host
// library fills only the device states registered with it; nvshmem.core.init registers none
// (nvshmemx_hostlib_init_attr passes no callback, src/host/init/init.cu). Without the attach,
// this module's state stays zero: the kernels' gets would index a null peer_heap_base_p2p, an
// illegal memory access (a sticky CUDA error that ends the process's use of the GPU), and
// device-side nvshmem_my_pe() would answer 0.
//
// The attach is NVSHMEM's nested init: nvshmemi_init_thread, compiled into this module from the
// archive, calls the host library with a callback that returns the address of this module's
// nvshmemi_device_state_d; on an already initialised NVSHMEM the host library registers it,
// copies the host state into it, and increments its init counter (nvshmemi_update_device_state),
// with no communication between PEs. It is what nvshmem_init() does, without its exit(-1) on
// failure. detach() is the matching nvshmem_finalize(): it unregisters this module's state and
// decrements the counter, so nvshmem4py's finalize afterwards does the collective teardown.
// NVSHMEM checks the device library's version against the host library's only loosely (major,
// and device minor not newer), so mgg/distributed/nvshmem/symmetric.py demands the exact version first.
#include <nvshmem.h>
#include <nvshmemx.h>

#include <c10/util/Exception.h>

#include "attach.h"

namespace mgg::shmem {
namespace {
bool g_attached = false;
}

void attach() {
  if (g_attached) return;
  TORCH_CHECK(nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED,
              "mgg.nvshmem: NVSHMEM is not started (nvshmem.core.init first: mgg.distributed.nvshmem.init)");
  nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                NVSHMEM_VENDOR_PATCH_VERSION};
  int provided = 0;
  const int status = nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, 0, nullptr, version);
  TORCH_CHECK(status == 0, "mgg.nvshmem: attaching the extension's device state to NVSHMEM failed (status ", status,
              "): the NVSHMEM host library and the device library mgg was built with (", compiled_version(),
              ") do not match; NVSHMEM_DEBUG=INFO tells more");
  g_attached = true;
}

void detach() {
  if (!g_attached) return;  // a finalize without a matching attach would make NVSHMEM exit the process
  g_attached = false;
  nvshmem_finalize();
}

bool attached() { return g_attached; }
int my_pe() { return nvshmem_my_pe(); }
int n_pes() { return nvshmem_n_pes(); }

bool is_symmetric(const void* ptr) { return g_attached && nvshmem_ptr(ptr, nvshmem_my_pe()) != nullptr; }

const void* peer_address(const void* ptr, int pe) { return nvshmem_ptr(ptr, pe); }

int first_unreachable_pe(const void* ptr) {
  for (int pe = 0; pe < n_pes(); ++pe) {
    if (peer_address(ptr, pe) == nullptr) return pe;
  }
  return -1;
}

std::string compiled_version() {
  return std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." + std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) + "." +
         std::to_string(NVSHMEM_VENDOR_PATCH_VERSION);
}

}  // namespace mgg::shmem
