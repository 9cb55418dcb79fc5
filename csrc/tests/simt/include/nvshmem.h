// The SIMT emulator's NVSHMEM (simt/nvshmem.cpp): the device calls mgg's kernels make, over
// several PEs' heaps in one process. Included instead of NVSHMEM's nvshmem.h in emulated builds.
#pragma once
#include <cstddef>

#include "../simt.h"

namespace simt::shmem {

enum class Completion {
  kLoadStore,  // every PE reachable by loads: a get copies in the call (NVSHMEM over NVLink)
  kProxy,      // a network transport: the destination is poisoned at the call, filled at nvshmem_quiet
};

// PE pe's symmetric heap is [heaps[pe], heaps[pe] + bytes); the kernels run as PE my_pe.
void set_world(const void* const* heaps, int n_pes, size_t bytes, int my_pe, Completion mode);

}  // namespace simt::shmem

void nvshmem_getmem_nbi(void* dest, const void* source, size_t bytes, int pe,
                        const simt::Site& site = simt::Site::current());
void nvshmem_getmem(void* dest, const void* source, size_t bytes, int pe,
                    const simt::Site& site = simt::Site::current());
void nvshmem_quiet(const simt::Site& site = simt::Site::current());
void* nvshmem_ptr(const void* dest, int pe);
int nvshmem_my_pe();
int nvshmem_n_pes();
