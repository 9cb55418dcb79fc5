// Host API of the NVSHMEM runtime (runtime.cu), without NVSHMEM headers, so that host-only
// files (bindings, ops) include it freely.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace mgg::shmem {
std::vector<uint8_t> unique_id();
// Starts NVSHMEM with rank 0's unique id and initialises this module's device state.
void init(const std::vector<uint8_t>& uid_bytes, int rank, int world_size);
void finalize();
bool initialized();
int my_pe();
int n_pes();
// Symmetric allocation (collective: every PE calls it with the same size, in the same order),
// as a tensor on the current device that does not own its memory: free it with free_tensor
// (collective too).
at::Tensor empty_symmetric(at::IntArrayRef sizes, at::ScalarType dtype);
void free_tensor(const at::Tensor& t);
// PE pe's copy of a symmetric tensor, loadable from this device (nvshmem_ptr), or nullopt
// where the peer is not reachable by loads (another node).
std::optional<at::Tensor> peer_tensor(const at::Tensor& t, int pe);
bool is_symmetric(const void* ptr);
// Every PE's copy of the symmetric object at ptr is reachable by loads from this device.
bool reachable_by_loads(const void* ptr);
void barrier_all_on_stream();
}  // namespace mgg::shmem
