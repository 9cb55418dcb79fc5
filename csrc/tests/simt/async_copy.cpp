// The emulator's asynchronous copies (simt.h): cp.async as a copy that lands at the issuing
// thread's wait. The destination is poisoned (NaN bytes) at the copy, so the issuing thread
// reads NaN before its wait, and another lane reads NaN without a barrier after that wait
// whenever the scheduler runs it first (the seeds vary the order); a copy still pending when
// its block ends is reported.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "simt.h"

namespace simt {
namespace {

struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
  int owner;  // thread id in the block
  Site site;
};

std::vector<Copy> pending;

std::string check_block_end() {
  std::string why;
  if (!pending.empty()) {
    why = std::to_string(pending.size()) + " asynchronous copies never waited for (the first started at " +
          pending[0].site.file_name() + ":" + std::to_string(pending[0].site.line()) + ")";
  }
  pending.clear();
  return why;
}

}  // namespace

void async_copy(void* dst, const void* src, size_t bytes, const Site& site) {
  step(site);
  static const bool registered = (on_block_end(&check_block_end), true);
  static_cast<void>(registered);
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    fail("an asynchronous copy of " + std::to_string(bytes) + " bytes off a " + std::to_string(bytes) +
             "-byte boundary (cp.async requires both addresses aligned)",
         site);
  }
  if (!in_dynamic_shared(dst, bytes) || in_dynamic_shared(src, bytes)) {
    fail("an asynchronous copy must go from global memory into the launch's shared memory", site);
  }
  std::memset(dst, 0xff, bytes);
  pending.push_back({dst, src, bytes, here().id, site});
}

void async_wait(const Site& site) {
  step(site);
  const int id = here().id;
  const auto mine = [id](const Copy& c) { return c.owner == id; };
  for (const Copy& c : pending) {
    if (mine(c)) std::memcpy(c.dst, c.src, c.bytes);
  }
  pending.erase(std::remove_if(pending.begin(), pending.end(), mine), pending.end());
}

}  // namespace simt
