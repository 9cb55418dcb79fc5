// The SIMT emulator's NVSHMEM (include/nvshmem.h): gets from a PE's symmetric heap into any
// memory of the caller, at thread, warp or block scope, completed as the world's mode says.
// In proxy mode a get poisons its destination (NaN bytes) and copies only at an nvshmem_quiet
// of a thread that took part in it, so reading a landing buffer before completing the get reads
// NaN; a get still pending when its block ends is reported.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "include/nvshmemx.h"

namespace simt::shmem {
namespace {

enum class Scope { kThread, kWarp, kBlock };

struct Get {
  void* dest;
  const void* src;
  size_t bytes;
  Scope scope;
  int owner;  // thread id (kThread) or warp (kWarp) in the block
  Site site;
};

std::vector<const char*> heaps;
size_t heap_bytes = 0;
int me = 0;
Completion mode = Completion::kLoadStore;
std::vector<Get> pending;

// The source on PE pe of a get whose source is `source` in this PE's heap.
const void* translate(const void* source, size_t bytes, int pe, const Site& site) {
  if (heaps.empty()) fail("an NVSHMEM call without an emulated world (simt::shmem::set_world)", site);
  if (pe < 0 || pe >= static_cast<int>(heaps.size())) {
    fail("NVSHMEM get from PE " + std::to_string(pe) + " of " + std::to_string(heaps.size()), site);
  }
  const char* s = static_cast<const char*>(source);
  if (s < heaps[me] || s + bytes > heaps[me] + heap_bytes) {
    fail("NVSHMEM get of " + std::to_string(bytes) + " bytes at offset " + std::to_string(s - heaps[me]) +
             " outside the symmetric heap of " + std::to_string(heap_bytes) + " bytes",
         site);
  }
  return heaps[pe] + (s - heaps[me]);
}

void issue(void* dest, const void* src, size_t bytes, Scope scope, int owner, const Site& site) {
  if (mode == Completion::kLoadStore) {
    std::memcpy(dest, src, bytes);
    return;
  }
  std::memset(dest, 0xff, bytes);
  pending.push_back({dest, src, bytes, scope, owner, site});
}

template <Scope kScope>
void run_group(const GroupCall& c, const int* members, int /*n*/) {
  count_get(kScope == Scope::kWarp ? "warp" : "block", reinterpret_cast<const void*>(c.args[1]), c.args[2]);
  issue(reinterpret_cast<void*>(c.args[0]), reinterpret_cast<const void*>(c.args[1]), c.args[2], kScope,
        members[0] / 32, c.site);
}

void group(const char* name, Op op, void* dest, const void* source, size_t bytes, int pe, const Site& site) {
  const void* src = translate(source, bytes, pe, site);
  const GroupCall call{
      name,
      {reinterpret_cast<uint64_t>(dest), reinterpret_cast<uint64_t>(src), bytes, static_cast<uint64_t>(pe)},
      op == Op::kWarpCall ? &run_group<Scope::kWarp> : &run_group<Scope::kBlock>,
      site};
  if (op == Op::kWarpCall) {
    warp_op(op, 0xffffffffu, 0, 0, 32, site, &call);
  } else {
    block_op(op, site, &call);
  }
}

std::string check_block_end() {
  std::string why;
  if (!pending.empty()) {
    why = std::to_string(pending.size()) + " NVSHMEM gets never completed by nvshmem_quiet (the first issued at " +
          pending[0].site.file_name() + ":" + std::to_string(pending[0].site.line()) + ")";
  }
  pending.clear();
  return why;
}

}  // namespace

void set_world(const void* const* h, int n_pes, size_t bytes, int my_pe, Completion m) {
  static bool registered = false;
  if (!registered) on_block_end(&check_block_end);
  registered = true;
  heaps.assign(reinterpret_cast<const char* const*>(h), reinterpret_cast<const char* const*>(h) + n_pes);
  heap_bytes = bytes;
  me = my_pe;
  mode = m;
  pending.clear();
}

}  // namespace simt::shmem

using namespace simt::shmem;  // NOLINT: the definitions of the global NVSHMEM calls below

void nvshmem_getmem_nbi(void* dest, const void* source, size_t bytes, int pe, const simt::Site& site) {
  simt::step(site);
  const void* src = translate(source, bytes, pe, site);
  simt::count_get("thread", src, bytes);
  issue(dest, src, bytes, Scope::kThread, simt::here().id, site);
}

void nvshmem_getmem(void* dest, const void* source, size_t bytes, int pe, const simt::Site& site) {
  simt::step(site);
  const void* src = translate(source, bytes, pe, site);
  simt::count_get("thread", src, bytes);
  std::memcpy(dest, src, bytes);  // blocking: complete on return
}

void nvshmemx_getmem_nbi_warp(void* dest, const void* source, size_t bytes, int pe, const simt::Site& site) {
  group("nvshmemx_getmem_nbi_warp", simt::Op::kWarpCall, dest, source, bytes, pe, site);
}

void nvshmemx_getmem_nbi_block(void* dest, const void* source, size_t bytes, int pe, const simt::Site& site) {
  group("nvshmemx_getmem_nbi_block", simt::Op::kBlockCall, dest, source, bytes, pe, site);
}

void nvshmem_quiet(const simt::Site& site) {
  simt::step(site);
  const int id = simt::here().id;
  auto mine = [id](const Get& g) {
    return g.scope == Scope::kBlock || (g.scope == Scope::kWarp && g.owner == id / 32) ||
           (g.scope == Scope::kThread && g.owner == id);
  };
  for (const Get& g : pending) {
    if (mine(g)) std::memcpy(g.dest, g.src, g.bytes);
  }
  pending.erase(std::remove_if(pending.begin(), pending.end(), mine), pending.end());
}

void* nvshmem_ptr(const void* dest, int pe) {
  if (mode != Completion::kLoadStore || pe < 0 || pe >= static_cast<int>(heaps.size())) return nullptr;
  const char* d = static_cast<const char*>(dest);
  if (d < heaps[me] || d >= heaps[me] + heap_bytes) return nullptr;
  return const_cast<char*>(heaps[pe] + (d - heaps[me]));
}

int nvshmem_my_pe() { return me; }
int nvshmem_n_pes() { return static_cast<int>(heaps.size()); }
