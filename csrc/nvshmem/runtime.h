// Host API of the NVSHMEM runtime (runtime.cu); plain types so bindings need no NVSHMEM header.
#pragma once
#include <cstdint>
#include <vector>

namespace mgg::shmem {
std::vector<uint8_t> unique_id();
void init(const std::vector<uint8_t>& uid_bytes, int rank, int world_size);
void finalize();
int my_pe();
int n_pes();
int64_t malloc_symmetric(int64_t nbytes);
void free_symmetric(int64_t ptr);
int64_t peer_pointer(int64_t ptr, int pe);
void barrier_all_on_stream();
}  // namespace mgg::shmem
