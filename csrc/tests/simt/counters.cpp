// The emulator's memory counters (simt.h): warp instructions of each load site assembled from
// the lanes' reports, their 32-byte sectors, active lanes and bytes, by site and memory region;
// of each shared-memory site, their requests and bank wavefronts, by site; per warp, the loads
// it issues before its first source-row load (the chain); the atomics, by site and space. Blocks
// run one at a time, so a block's pending instructions and its warps' chains are completed at
// its end.
#include <algorithm>
#include <climits>
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
  int position = 0;  // the warp's global loads before it (WarpChain)
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

// One warp's global loads in program order: a lane's reports come in its program order and every
// lane reports at every site (kernels/memory.cuh), so the n-th report of each lane is the same
// warp instruction, the warp's n-th global load, whichever site it is at. The chain is the
// non-row loads issued before the first source-row access (a load from a source table, or an
// NVSHMEM get, which fetches a row).
struct WarpChain {
  int reports[32] = {};     // each lane's global-load reports so far
  int first_row = INT_MAX;  // position of the first row access
  std::vector<int> others;  // positions of the issued non-row loads
};

bool on = false;
bool hooked = false;
std::vector<Named> regions;
std::map<Key, WarpSite<Instruction>> warps;                                    // this block's
std::map<std::pair<std::string, std::string>, SiteCounts> totals;              // (site, region)
std::map<std::pair<Key, SharedOp>, WarpSite<SharedInstruction>> shared_warps;  // this block's
std::map<std::pair<std::string, SharedOp>, SharedCounts> shared_totals;
std::map<std::string, GetCounts> get_totals;  // by scope
std::map<std::string, uint64_t> calls;
std::map<int, WarpChain> chains;  // this block's, by warp
ChainCounts chain_totals;
std::map<std::pair<std::string, std::string>, AtomicCounts> atomic_totals;  // (site, space)

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

// The source tables among the runner's regions (simt/emulated_ops.py names them; bench/counters.py's
// region_class reads the same names): this rank's table, the halo's, and each PE's (peer0, peer1, ...).
bool row_region(const std::string& region) {
  return region == "table" || region == "remote_table" || region.rfind("peer", 0) == 0;
}

void complete(const std::string& site, int warp, Instruction& in) {
  if (in.active == 0) return;  // every lane off: the instruction is not issued
  std::sort(in.sectors.begin(), in.sectors.end());
  const auto n = std::unique(in.sectors.begin(), in.sectors.end()) - in.sectors.begin();
  const std::string region = region_of(in.first);
  WarpChain& chain = chains[warp];
  if (row_region(region)) {
    chain.first_row = std::min(chain.first_row, in.position);
  } else {
    chain.others.push_back(in.position);
  }
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

// Adds a warp's chain to the totals: warps without a row access (a range of empty rows; a
// kernel that reads no rows) have none and are counted apart.
void complete_chain(const WarpChain& chain) {
  if (chain.first_row == INT_MAX) {
    chain_totals.without_rows += !chain.others.empty();
    return;
  }
  const auto n = static_cast<uint64_t>(
      std::count_if(chain.others.begin(), chain.others.end(), [&](int p) { return p < chain.first_row; }));
  chain_totals.warps += 1;
  chain_totals.loads += n;
  chain_totals.most = std::max(chain_totals.most, n);
}

void flush() {
  for (auto& [key, state] : warps) {
    for (auto& [k, in] : state.pending) complete(key.first, key.second, in);
  }
  warps.clear();
  for (auto& [key, state] : shared_warps) {
    for (auto& [k, in] : state.pending) complete_shared(key.first.first, key.second, in);
  }
  shared_warps.clear();
  for (const auto& [warp, chain] : chains) complete_chain(chain);
  chains.clear();
}

std::string block_end() {
  if (on) flush();
  return {};
}

}  // namespace

void global_load(const void* p, size_t bytes, bool active, const Site& site) {
  step(site);
  if (!on) return;
  const Position& pos = here();
  const int lane = pos.id % 32, warp = pos.id / 32;
  const std::string& s = where(site);
  const int position = chains[warp].reports[lane]++;
  const auto add = [&](Instruction& in) {
    if (in.lanes == 1) in.position = position;  // the first lane to report (every lane's is the same)
    if (!active) return;
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (in.active++ == 0) in.first = a;
    in.bytes += bytes;
    for (uint64_t sec = a / kSector; sec <= (a + bytes - 1) / kSector; ++sec) in.sectors.push_back(sec);
  };
  warps[{s, warp}].report(lane, add, [&](Instruction& in) { complete(s, warp, in); });
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
  step(site);
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
  // A row access of the calling warp, after the global loads its lane has reported so far.
  const Position& pos = here();
  WarpChain& chain = chains[pos.id / 32];
  chain.first_row = std::min(chain.first_row, chain.reports[pos.id % 32]);
}

void count_atomic(const void* p, size_t bytes, const Site& site) {
  if (!on) return;
  const std::string space = in_dynamic_shared(p, bytes) ? "shared" : "global";
  AtomicCounts& c = atomic_totals[{where(site), space}];
  c.site = where(site);
  c.space = space;
  c.operations += 1;
}

void count_memory(bool enable) {
  on = enable;
  warps.clear();
  shared_warps.clear();
  chains.clear();
  if (enable) {
    regions.clear();
    totals.clear();
    shared_totals.clear();
    get_totals.clear();
    calls.clear();
    chain_totals = {};
    atomic_totals.clear();
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

ChainCounts chain_counts() {
  flush();
  return chain_totals;
}

std::vector<AtomicCounts> atomic_counts() {
  std::vector<AtomicCounts> out;
  for (const auto& [key, c] : atomic_totals) out.push_back(c);
  return out;
}

}  // namespace simt
