// Sources of an emulated case (sources.h).
#include "sources.h"

#include <include/nvshmem.h>

#include <stdexcept>
#include <string>

namespace mgg::emu {

kernels::Storage storage_of(const Case& c) {
  const std::string s = c.text("storage");
  if (s == "float16") return kernels::Storage::kFloat16;
  if (s == "bfloat16") return kernels::Storage::kBFloat16;
  if (s == "float32") return kernels::Storage::kFloat32;
  throw std::runtime_error("unknown storage " + s);
}

namespace {

// An array `table_offset` bytes in (0 when the case has none): a table whose rows start off
// the arrays' 256-byte alignment, as a tensor sliced from a larger one does.
const void* shifted(Case& c, const char* name) {
  unsigned char* p = c.array<unsigned char>(name);
  return p && c.has("table_offset") ? p + c.integer("table_offset") : p;
}

}  // namespace

CaseSources case_sources(Case& c, const char* local, const char* remote) {
  CaseSources r{};
  const std::string how = c.text("source");
  if (how == "table") {
    r.source = kernels::Source::kTable;
    r.src.local_table = shifted(c, local);
    r.src.remote_table = shifted(c, remote);
    return r;
  }
  const int n = static_cast<int>(c.integer("n_pes")), me = static_cast<int>(c.integer("my_pe"));
  std::vector<const void*> heaps(n), tables(n);  // each PE's table lies table_offset bytes into its heap
  for (int i = 0; i < n; ++i) {
    heaps[i] = c.array<void>("peer" + std::to_string(i));
    tables[i] = shifted(c, ("peer" + std::to_string(i)).c_str());
  }
  const bool proxy = c.text("completion") == "proxy";
  simt::shmem::set_world(heaps.data(), n, static_cast<size_t>(c.integer("heap_bytes")), me,
                         proxy ? simt::shmem::Completion::kProxy : simt::shmem::Completion::kLoadStore);
  r.src.local_table = tables[me];
  if (how == "direct") {
    r.source = kernels::Source::kPeerPointers;
    for (int i = 0; i < n; ++i) r.src.peers[i] = tables[i];
    return r;
  }
  r.source = how == "get-thread"  ? kernels::Source::kGetThread
             : how == "get-warp"  ? kernels::Source::kGetWarp
             : how == "get-block" ? kernels::Source::kGetBlock
                                  : throw std::runtime_error("unknown source " + how);
  r.src.symmetric = tables[me];
  r.src.p2p = !proxy;  // as the host finds it: nvshmem_ptr non-null for every PE only over loads
  if (r.src.p2p) {
    for (int i = 0; i < n; ++i) r.src.peers[i] = tables[i];  // what nvshmem_ptr gives (ops/cuda/sources.cu)
  }
  return r;
}

}  // namespace mgg::emu
