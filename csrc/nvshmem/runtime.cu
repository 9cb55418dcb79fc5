// NVSHMEM bootstrap and symmetric memory for one process per PE, started from torch.distributed:
// rank 0 makes a unique id, the Python layer broadcasts it over the process group, every rank
// calls init with it. Compiled into this extension (with -rdc), whose copy of NVSHMEM's device
// state nvshmemi_init_thread (from libnvshmem_device.a, linked here) initialises. Errors are
// TORCH_CHECKs with the cause, never NVSHMEM's exit(-1).
#include <nvshmem.h>
#include <nvshmemx.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
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
  TORCH_CHECK(uid_bytes.size() == sizeof(uid), "mgg.nvshmem: unique id has ", uid_bytes.size(), " bytes, expected ",
              sizeof(uid), " (ranks built against different NVSHMEM versions?)");
  std::memcpy(&uid, uid_bytes.data(), sizeof(uid));
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  TORCH_CHECK(nvshmemx_set_attr_uniqueid_args(rank, world_size, &uid, &attr) == 0,
              "mgg.nvshmem: nvshmemx_set_attr_uniqueid_args failed");
  // what nvshmemx_init_attr does, without its exit(-1) on failure
  nvshmemx_init_init_attr_ver_only(attr);
  nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                NVSHMEM_VENDOR_PATCH_VERSION};
  int provided = 0;
  const int status =
      nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID, &attr, version);
  TORCH_CHECK(status == 0, "mgg.nvshmem: NVSHMEM failed to start (status ", status, ") on rank ", rank, " of ",
              world_size,
              ": no peer access between the GPUs, an NVSHMEM version mismatch between ranks, or a "
              "symmetric heap larger than the GPU allows (NVSHMEM_SYMMETRIC_SIZE); NVSHMEM_DEBUG=INFO tells which. "
              "The halo backend (--backend halo) needs none of these.");
}

void finalize() {
  if (initialized()) nvshmem_finalize();
}
bool initialized() { return nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED; }
int my_pe() { return nvshmem_my_pe(); }
int n_pes() { return nvshmem_n_pes(); }

at::Tensor empty_symmetric(at::IntArrayRef sizes, at::ScalarType dtype) {
  TORCH_CHECK(initialized(), "mgg.nvshmem: NVSHMEM is not initialised (mgg.distributed.nvshmem.init)");
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * c10::elementSize(dtype);
  void* p = nvshmem_malloc(bytes);
  TORCH_CHECK(p != nullptr, "mgg.nvshmem: nvshmem_malloc of ", bytes, " bytes failed: the symmetric heap is too ",
              "small (raise NVSHMEM_SYMMETRIC_SIZE, e.g. NVSHMEM_SYMMETRIC_SIZE=8G)");
  auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA, c10::cuda::current_device());
  return at::from_blob(p, sizes, opts);
}

void free_tensor(const at::Tensor& t) { nvshmem_free(t.data_ptr()); }

std::optional<at::Tensor> peer_tensor(const at::Tensor& t, int pe) {
  TORCH_CHECK(pe >= 0 && pe < n_pes(), "mgg.nvshmem: PE ", pe, " is outside [0, ", n_pes(), ")");
  void* p = nvshmem_ptr(t.data_ptr(), pe);
  if (p == nullptr) return std::nullopt;
  return at::from_blob(p, t.sizes(), t.options());
}

bool is_symmetric(const void* ptr) { return initialized() && nvshmem_ptr(ptr, nvshmem_my_pe()) != nullptr; }

bool reachable_by_loads(const void* ptr) {
  for (int pe = 0; pe < n_pes(); ++pe) {
    if (nvshmem_ptr(ptr, pe) == nullptr) return false;
  }
  return true;
}

void barrier_all_on_stream() { nvshmemx_barrier_all_on_stream(at::cuda::getCurrentCUDAStream().stream()); }

}  // namespace mgg::shmem
