// Where the CUDA ops' kernels read each PE's table from (sources.h).
#include <c10/cuda/CUDAException.h>

#include "../../nvshmem/attach.h"
#include "sources.h"

namespace mgg {

kernels::Sources peer_sources(const char* op, at::TensorList tables, int64_t my_pe, Fetch how,
                              kernels::Source* source) {
  *source = source_of(how);
  if (how == Fetch::kDirect) return direct_sources(tables, my_pe);
  kernels::Sources s{};
  s.local_table = tables[my_pe].data_ptr();
  if (how == Fetch::kUva) {
    for (size_t i = 0; i < tables.size(); ++i) {
      if (static_cast<int64_t>(i) == my_pe) {
        s.peers[i] = tables[i].data_ptr();
        continue;
      }
      void* mapped = nullptr;
      C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, tables[i].data_ptr(), 0));
      s.peers[i] = mapped;
    }
  } else {
    const void* symmetric = tables[my_pe].data_ptr();
    TORCH_CHECK(shmem::attached(), op, ": fetch '", kFetchNames[static_cast<int>(how)], "' is an NVSHMEM get but ",
                "NVSHMEM is not initialised in this process (mgg.distributed.nvshmem.init)");
    TORCH_CHECK(shmem::n_pes() == static_cast<int>(tables.size()) && shmem::my_pe() == my_pe, op, ": NVSHMEM has ",
                shmem::n_pes(), " PEs and this is PE ", shmem::my_pe(), ", but the call names ", tables.size(),
                " PEs and my_pe ", my_pe);
    TORCH_CHECK(shmem::is_symmetric(symmetric), op,
                ": the table of my_pe is not in NVSHMEM's symmetric heap, so peers cannot get from it");
    // Across nodes (or without peer access) NVSHMEM's transports write a get's local side by
    // RDMA, into global memory in or registered with NVSHMEM's heap: the kernels' landing
    // buffers are shared memory, so that path is refused until they move (kernels/nvshmem_fetch.cuh).
    const int unreachable = shmem::first_unreachable_pe(symmetric);
    TORCH_CHECK(unreachable < 0, op, ": fetch '", kFetchNames[static_cast<int>(how)],
                "' needs every PE reachable by loads (one node with NVLink or PCIe peer access), but PE ", unreachable,
                " is not; NVSHMEM gets across nodes are not supported yet (use the halo or allgather backend)");
    s.symmetric = symmetric;
    s.p2p = true;
    for (size_t i = 0; i < tables.size(); ++i) s.peers[i] = shmem::peer_address(symmetric, static_cast<int>(i));
  }
  return s;
}

}  // namespace mgg
