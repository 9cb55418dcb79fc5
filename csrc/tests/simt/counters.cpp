// The emulator's memory counters (simt.h): warp instructions of each load site assembled from
// the lanes' reports, their 32-byte sectors, active lanes and bytes, by site and memory region;
// of each shared-memory site, their requests and bank wavefronts, by site. Blocks run one at a
// time, so a block's pending instructions are completed at its end.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "simt.h"

namespace simt {
namespace {

constexpr uint64_t kSector = 32;
constexpr uint64_t kBankWord = 4, kBanks = 32;

struct Named {
  std::string name;
  uintptr_t begin, end;
};

struct Instruction {  // one warp instruction at a site, as its lanes report it
  int lanes = 0, active = 0;
  uint64_t bytes = 0;
  uintptr_t first = 0;  // the first active lane's address (its region names the instruction's)
  std::vector<uint64_t> sectors;
};

struct SharedInstruction {  // one warp instruction at a shared-memory site
  int lanes = 0, active = 0;
  std::vector<uint64_t> words;  // the 4-byte words of the active lanes, one entry per lane's word
};

// One warp at one site: the k-th report of each lane is the warp's k-th instruction there.
template <typename In>
struct WarpSite {
  int next[32] = {};
  std::map<int, In> pending;  // by instruction index
  // Adds a lane's report to its instruction (add(in)); once all 32 lanes reported, done(in).
  template <typename Add, typename Done>
  void report(int lane, Add&& add, Done&& done) {
    const int k = next[lane]++;
    In& in = pending[k];
    in.lanes += 1;
    add(in);
    if (in.lanes == 32) {
      done(in);
      pending.erase(k);
    }
  }
};

using Key = std::pair<std::string, int>;  // site, warp

bool on = false;
bool hooked = false;
std::vector<Named> regions;
std::map<Key, WarpSite<Instruction>> warps;                                    // this block's
std::map<std::pair<std::string, std::string>, SiteCounts> totals;              // (site, region)
std::map<std::pair<Key, SharedOp>, WarpSite<SharedInstruction>> shared_warps;  // this block's
std::map<std::pair<std::string, SharedOp>, SharedCounts> shared_totals;
std::map<std::string, GetCounts> get_totals;  // by scope
std::map<std::string, uint64_t> calls;

// e.g. kernels/aggregate_kernel.cuh:77; named once per site (every lane's every load asks)
const std::string& where(const Site& s) {
  static std::map<std::pair<const char*, uint_least32_t>, std::string> names;
  auto [it, added] = names.try_emplace({s.file_name(), s.line()});
  if (added) {
    std::string f = std::filesystem::path(s.file_name()).lexically_normal().generic_string();
    const size_t csrc = f.rfind("csrc/");
    if (csrc != std::string::npos) f = f.substr(csrc + 5);
    it->second = f + ":" + std::to_string(s.line());
  }
  return it->second;
}

std::string region_of(uintptr_t a) {
  for (const Named& r : regions) {
    if (a >= r.begin && a < r.end) return r.name;
  }
  return "other";
}

void complete(const std::string& site, Instruction& in) {
  if (in.active == 0) return;  // every lane off: the instruction is not issued
  std::sort(in.sectors.begin(), in.sectors.end());
  const auto n = std::unique(in.sectors.begin(), in.sectors.end()) - in.sectors.begin();
  const std::string region = region_of(in.first);
  SiteCounts& c = totals[{site, region}];
  c.site = site;
  c.region = region;
  c.requests += 1;
  c.sectors += static_cast<uint64_t>(n);
  c.active_lanes += static_cast<uint64_t>(in.active);
  c.lane_slots += 32;
  c.bytes += in.bytes;
}

// The wavefronts of one shared-memory instruction: per bank the words its active lanes touch
// (distinct ones, or every lane's for an atomic), the most of any bank.
uint64_t wavefronts(std::vector<uint64_t>& words, bool atomic) {
  std::sort(words.begin(), words.end());
  if (!atomic) words.erase(std::unique(words.begin(), words.end()), words.end());
  uint64_t per_bank[kBanks] = {}, most = 0;
  for (const uint64_t w : words) most = std::max(most, ++per_bank[w % kBanks]);
  return most;
}

void complete_shared(const std::string& site, SharedOp op, SharedInstruction& in) {
  if (in.active == 0) return;  // not issued
  SharedCounts& c = shared_totals[{site, op}];
  c.site = site;
  c.op = shared_op_name(op);
  c.requests += 1;
  c.wavefronts += wavefronts(in.words, op == SharedOp::kAtomic);
  c.active_lanes += static_cast<uint64_t>(in.active);
}

void flush() {
  for (auto& [key, state] : warps) {
    for (auto& [k, in] : state.pending) complete(key.first, in);
  }
  warps.clear();
  for (auto& [key, state] : shared_warps) {
    for (auto& [k, in] : state.pending) complete_shared(key.first.first, key.second, in);
  }
  shared_warps.clear();
}

std::string block_end() {
  if (on) flush();
  return {};
}

}  // namespace

void global_load(const void* p, size_t bytes, bool active, const Site& site) {
  if (!on) return;
  const Position& pos = here();
  const int lane = pos.id % 32, warp = pos.id / 32;
  const std::string& s = where(site);
  const auto add = [&](Instruction& in) {
    if (!active) return;
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (in.active++ == 0) in.first = a;
    in.bytes += bytes;
    for (uint64_t sec = a / kSector; sec <= (a + bytes - 1) / kSector; ++sec) in.sectors.push_back(sec);
  };
  warps[{s, warp}].report(lane, add, [&](Instruction& in) { complete(s, in); });
}

const char* shared_op_name(SharedOp op) {
  switch (op) {
    case SharedOp::kLoad:
      return "ld";
    case SharedOp::kStore:
      return "st";
    case SharedOp::kAtomic:
      return "atom";
  }
  return "?";
}

void shared_access(const void* p, size_t bytes, bool active, SharedOp op, const Site& site) {
  if (!on) return;
  const Position& pos = here();
  const int lane = pos.id % 32, warp = pos.id / 32;
  const std::string& s = where(site);
  const auto add = [&](SharedInstruction& in) {
    if (!active) return;
    in.active += 1;
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (uint64_t w = a / kBankWord; w <= (a + bytes - 1) / kBankWord; ++w) in.words.push_back(w);
  };
  shared_warps[{{s, warp}, op}].report(lane, add, [&](SharedInstruction& in) { complete_shared(s, op, in); });
}

void count_warp_call(Op op) {
  if (on) calls[op_name(op)] += 1;
}

void count_get(const char* scope, const void* src, size_t bytes) {
  if (!on || bytes == 0) return;
  const auto a = reinterpret_cast<uintptr_t>(src);
  GetCounts& c = get_totals[scope];
  c.scope = scope;
  c.calls += 1;
  c.bytes += bytes;
  c.sectors += (a + bytes - 1) / kSector - a / kSector + 1;
}

void count_memory(bool enable) {
  on = enable;
  warps.clear();
  shared_warps.clear();
  if (enable) {
    regions.clear();
    totals.clear();
    shared_totals.clear();
    get_totals.clear();
    calls.clear();
    if (!hooked) on_block_end(&block_end);
    hooked = true;
  }
}

void name_region(const std::string& name, const void* base, size_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  regions.push_back({name, b, b + bytes});
}

std::vector<SiteCounts> memory_counts() {
  flush();
  std::vector<SiteCounts> out;
  for (const auto& [key, c] : totals) out.push_back(c);
  return out;
}

std::vector<SharedCounts> shared_counts() {
  flush();
  std::vector<SharedCounts> out;
  for (const auto& [key, c] : shared_totals) out.push_back(c);
  return out;
}

std::vector<GetCounts> get_counts() {
  std::vector<GetCounts> out;
  for (const auto& [scope, c] : get_totals) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, uint64_t>> warp_call_counts() { return {calls.begin(), calls.end()}; }

}  // namespace simt
