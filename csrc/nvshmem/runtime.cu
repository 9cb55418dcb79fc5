// NVSHMEM bootstrap and symmetric memory for one process per PE, started from torch.distributed:
// rank 0 makes a unique id, the Python layer broadcasts it over the process group, every rank
// calls init with it. Compiled into this extension (with -rdc) so that NVSHMEM's device state of
// this module is the one initialised.
#include <nvshmem.h>
#include <nvshmemx.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <vector>

#include "runtime.h"

namespace mgg::shmem {

std::vector<uint8_t> unique_id() {
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  TORCH_CHECK(nvshmemx_get_uniqueid(&uid) == 0, "mgg.nvshmem: nvshmemx_get_uniqueid failed");
  std::vector<uint8_t> bytes(sizeof(uid));
  std::memcpy(bytes.data(), &uid, sizeof(uid));
  return bytes;
}

void init(const std::vector<uint8_t>& uid_bytes, int rank, int world_size) {
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  TORCH_CHECK(uid_bytes.size() == sizeof(uid), "mgg.nvshmem: unique id has ", uid_bytes.size(),
              " bytes, expected ", sizeof(uid), " (built against a different NVSHMEM version?)");
  std::memcpy(&uid, uid_bytes.data(), sizeof(uid));
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  TORCH_CHECK(nvshmemx_set_attr_uniqueid_args(rank, world_size, &uid, &attr) == 0,
              "mgg.nvshmem: nvshmemx_set_attr_uniqueid_args failed");
  TORCH_CHECK(nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) == 0,
              "mgg.nvshmem: nvshmemx_init_attr failed (see NVSHMEM_DEBUG=INFO output)");
}

void finalize() { nvshmem_finalize(); }
int my_pe() { return nvshmem_my_pe(); }
int n_pes() { return nvshmem_n_pes(); }

int64_t malloc_symmetric(int64_t nbytes) {
  void* p = nvshmem_malloc(static_cast<size_t>(nbytes));
  TORCH_CHECK(p != nullptr || nbytes == 0, "mgg.nvshmem: nvshmem_malloc of ", nbytes,
              " bytes failed: symmetric heap too small (raise NVSHMEM_SYMMETRIC_SIZE)");
  return reinterpret_cast<int64_t>(p);
}

void free_symmetric(int64_t ptr) { nvshmem_free(reinterpret_cast<void*>(ptr)); }

int64_t peer_pointer(int64_t ptr, int pe) {
  return reinterpret_cast<int64_t>(nvshmem_ptr(reinterpret_cast<void*>(ptr), pe));
}

void barrier_all_on_stream() {
  nvshmemx_barrier_all_on_stream(at::cuda::getCurrentCUDAStream().stream());
}

}  // namespace mgg::shmem
