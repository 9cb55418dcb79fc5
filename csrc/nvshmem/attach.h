// The extension's side of NVSHMEM, whose runtime nvshmem4py owns (mgg/distributed/nvshmem/symmetric.py):
// attaching this module's device state after nvshmem.core.init, and the host queries the ops
// make before an NVSHMEM get. No NVSHMEM headers here, so host-only files include it freely.
#pragma once
#include <string>

namespace mgg::shmem {

// Attaches (after nvshmem4py started NVSHMEM) and detaches (before nvshmem4py finalizes) this
// module's copy of NVSHMEM's device state; see attach.cu for why.
void attach();
void detach();
bool attached();
int my_pe();
int n_pes();
// The object at ptr lies in NVSHMEM's symmetric heap.
bool is_symmetric(const void* ptr);
// The first PE whose copy of the symmetric object at ptr this device cannot reach by loads
// (nvshmem_ptr null: another node, or no peer access), or -1 where every PE's is reachable.
int first_unreachable_pe(const void* ptr);
// PE pe's copy of the symmetric object at ptr as this device addresses it (nvshmem_ptr), or
// nullptr where it is not reachable by loads.
const void* peer_address(const void* ptr, int pe);
// The NVSHMEM version this module's device library was compiled from, e.g. "3.4.5".
std::string compiled_version();

}  // namespace mgg::shmem
