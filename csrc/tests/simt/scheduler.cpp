// The SIMT emulator's execution of a launch (simt.h): blocks one at a time in a seeded random
// order, each thread of a block a fiber, runnable threads picked at random at every
// synchronisation point; warp calls and block barriers complete when their members have all
// arrived at the same call, and a call that cannot complete stops the launch with a report.
//
// Exited threads are accounted for as the hardware does: a warp call whose mask names a lane
// that has exited never completes (undefined on the device; reported), and a block barrier
// reached after some threads of the block returned is reported (undefined by the programming
// guide, though some GPUs let it pass). A block whose threads all returned is simply done.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "fiber.h"
#include "simt.h"
#include "stall.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SIMT_POISON(p, n) __asan_poison_memory_region(p, n)
#define SIMT_UNPOISON(p, n) __asan_unpoison_memory_region(p, n)
#else
#define SIMT_POISON(p, n) ((void)(p), (void)(n))
#define SIMT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace simt {

cudaError_t launch_limits(const void* kernel, dim3 grid, dim3 block, size_t smem, std::string* why);  // runtime.cpp
void set_last_error(cudaError_t e);                                                                   // runtime.cpp

namespace {

enum class State { kRunnable, kWaiting, kExited };

struct Thread {
  Fiber fiber;
  Position pos;
  int lane = 0, warp = 0;
  State state = State::kRunnable;
  Op op = Op::kSyncwarp;
  unsigned mask = 0;
  int arg = 0, width = 32;
  uint64_t value = 0, result = 0;
  Site site;
  const GroupCall* call = nullptr;
};

struct Shared {  // a registered dynamic shared array
  unsigned char* (*array)();
  size_t capacity;
};

struct Region {  // its copy on the launching thread
  unsigned char* base;
  size_t capacity;
};

struct Run {
  const void* kernel = nullptr;
  Body body = nullptr;
  const void* ctx = nullptr;
  int threads = 0;
  std::vector<uint64_t> warp_steps;  // of the running block (the watchdog)
  std::mt19937_64 rng;
  std::vector<int> runnable;
  bool failed = false;
  std::string report;
};

std::vector<std::unique_ptr<Thread>> pool;  // fibers and their stacks, reused by every launch
Thread* current = nullptr;
Run* run = nullptr;
uint64_t seed = 0, launches = 0;
uint64_t no_warp_steps = 0;  // steps counted outside a launch (device code called from the host)
std::string last;
std::vector<Shared> shared_arrays;
std::vector<Region> launch_shared;  // shared_arrays resolved on the thread of the launch that runs
std::vector<std::string (*)()> block_checks;
std::FILE* trace = nullptr;

bool is_block_op(Op op) { return op >= Op::kSyncthreads; }

void log_call(const Thread& t) {
  const Position& p = t.pos;
  const unsigned block = (p.block.z * p.grid_dim.y + p.block.y) * p.grid_dim.x + p.block.x;
  std::fprintf(trace, "%u %d %s %s:%u\n", block, t.warp, t.call ? t.call->name : op_name(t.op), t.site.file_name(),
               static_cast<unsigned>(t.site.line()));
}

std::string where(const Site& s) { return std::string(s.file_name()) + ":" + std::to_string(s.line()); }

std::string hex(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

std::string describe_call(const Thread& t) {
  std::string s = op_name(t.op);
  if (t.call) s += std::string(" (") + t.call->name + ")";
  if (!is_block_op(t.op)) s += " mask " + hex(t.mask);
  return s + " at " + where(t.site);
}

// Every thread of the block that is not runnable: lanes of a warp with the same call in ranges.
std::string describe_threads(const char* heading) {
  std::ostringstream o;
  o << heading;
  for (int w = 0; w * 32 < run->threads; ++w) {
    const int n = std::min(32, run->threads - w * 32);
    for (int l = 0; l < n;) {
      const Thread& t = *pool[w * 32 + l];
      std::string what = t.state == State::kExited ? std::string("exited") : describe_call(t);
      if (t.state == State::kRunnable) what = "running";
      int e = l + 1;
      while (e < n) {
        const Thread& u = *pool[w * 32 + e];
        std::string v = u.state == State::kExited ? std::string("exited") : describe_call(u);
        if (u.state == State::kRunnable) v = "running";
        if (v != what) break;
        ++e;
      }
      o << "\n    warp " << w << " lane" << (e - l > 1 ? "s " : " ") << l;
      if (e - l > 1) o << "-" << e - 1;
      o << ": " << what;
      l = e;
    }
  }
  return o.str();
}

void stop(const std::string& message) {
  if (run->failed) return;
  run->failed = true;
  const Position& p = current ? current->pos : pool[0]->pos;
  std::ostringstream o;
  o << "simt: block (" << p.block.x << "," << p.block.y << "," << p.block.z << "): " << message;
  run->report = o.str();
}

void release(Thread& t) {
  t.state = State::kRunnable;
  run->runnable.push_back(t.pos.id);
}

uint64_t shuffle_result(const Thread& t, Thread* const* lanes) {
  const int w = t.width, seg = t.lane & ~(w - 1);
  int src = t.lane;
  switch (t.op) {
    case Op::kShfl:
      src = seg + (t.arg & (w - 1));
      break;
    case Op::kShflUp:
      src = t.lane - t.arg >= seg ? t.lane - t.arg : t.lane;
      break;
    case Op::kShflDown:
      src = t.lane + t.arg < seg + w ? t.lane + t.arg : t.lane;
      break;
    default:  // xor
      src = (t.lane ^ t.arg) < seg + w && (t.lane ^ t.arg) >= seg ? t.lane ^ t.arg : t.lane;
  }
  if (!(t.mask >> src & 1u)) {
    stop(std::string(op_name(t.op)) + " at " + where(t.site) + ": lane " + std::to_string(t.lane) + " reads lane " +
         std::to_string(src) + ", which mask " + hex(t.mask) + " does not name (undefined value)");
    return 0;
  }
  return lanes[src]->value;
}

// Thread t arrived at a warp call: completes it if every lane of its mask is there.
void try_warp(Thread& t) {
  const int base = t.warp * 32, n = std::min(32, run->threads - base);
  if (!(t.mask >> t.lane & 1u)) {
    return stop(std::string(op_name(t.op)) + " at " + where(t.site) + ": mask " + hex(t.mask) +
                " does not name the calling lane " + std::to_string(t.lane));
  }
  if (t.width < 1 || t.width > 32 || (t.width & (t.width - 1))) {
    return stop(std::string(op_name(t.op)) + " at " + where(t.site) + ": width " + std::to_string(t.width) +
                " is not a power of two in [1, 32]");
  }
  Thread* lanes[32] = {};
  for (int l = 0; l < 32; ++l) {
    if (!(t.mask >> l & 1u)) continue;
    if (l >= n) return stop(describe_call(t) + " names lane " + std::to_string(l) + ", which this block lacks");
    Thread& u = *pool[base + l];
    if (u.state == State::kExited) {
      return stop(describe_call(t) + " waits for lane " + std::to_string(l) + ", which has exited" +
                  describe_threads("\n  threads:"));
    }
    if (u.state != State::kWaiting || is_block_op(u.op)) return;  // not all there yet
    lanes[l] = &u;
  }
  for (int l = 0; l < 32; ++l) {
    const Thread* u = lanes[l];
    if (!u) continue;
    bool same =
        u->op == t.op && u->mask == t.mask && u->width == t.width && (u->call == nullptr) == (t.call == nullptr);
    if (same && t.call) same = std::equal(t.call->args, t.call->args + 4, u->call->args);
    if (!same) {
      return stop("warp " + std::to_string(t.warp) + " diverged: the lanes of mask " + hex(t.mask) +
                  " are at different warp calls (or one call with different arguments)" +
                  describe_threads("\n  threads:"));
    }
  }
  uint64_t vote = 0;
  for (int l = 0; l < 32; ++l) {
    if (lanes[l] && lanes[l]->value) vote |= uint64_t{1} << l;
  }
  if (trace) log_call(t);
  count_warp_call(t.op);
  if (t.call) {
    int members[32], k = 0;
    for (int l = 0; l < 32; ++l) {
      if (lanes[l]) members[k++] = base + l;
    }
    t.call->run(*t.call, members, k);
  }
  for (int l = 0; l < 32; ++l) {
    Thread* u = lanes[l];
    if (!u) continue;
    switch (t.op) {
      case Op::kBallot:
        u->result = vote;
        break;
      case Op::kAll:
        u->result = vote == (t.mask & 0xffffffffu);
        break;
      case Op::kAny:
        u->result = vote != 0;
        break;
      case Op::kShfl:
      case Op::kShflUp:
      case Op::kShflDown:
      case Op::kShflXor:
        u->result = shuffle_result(*u, lanes);
        break;
      default:
        u->result = 0;
    }
  }
  for (int l = 0; l < 32; ++l) {
    if (lanes[l]) release(*lanes[l]);
  }
}

// Completes a block barrier (or block call) once every thread of the block is at one.
void try_block() {
  int waiting = 0, exited = 0;
  const Thread* first = nullptr;
  for (int i = 0; i < run->threads; ++i) {
    const Thread& u = *pool[i];
    if (u.state == State::kExited) {
      ++exited;
    } else if (u.state == State::kWaiting && is_block_op(u.op)) {
      ++waiting;
      if (!first) first = &u;
    } else {
      return;  // someone is running or at a warp call
    }
  }
  if (waiting == 0) return;
  if (exited > 0) {
    return stop(describe_call(*first) + " is reached by " + std::to_string(waiting) + " threads after " +
                std::to_string(exited) + " of the block returned (a block barrier after an early exit)" +
                describe_threads("\n  threads:"));
  }
  for (int i = 0; i < run->threads; ++i) {
    const Thread& u = *pool[i];
    bool same = u.op == first->op && (u.call == nullptr) == (first->call == nullptr);
    if (same && u.call) same = std::equal(u.call->args, u.call->args + 4, first->call->args);
    if (!same) return stop("the block's threads are at different block calls" + describe_threads("\n  threads:"));
  }
  for (int w = 0; trace && w * 32 < run->threads; ++w) log_call(*pool[w * 32]);
  if (first->call) {
    std::vector<int> members(run->threads);
    for (int i = 0; i < run->threads; ++i) members[i] = i;
    first->call->run(*first->call, members.data(), run->threads);
  }
  for (int i = 0; i < run->threads; ++i) release(*pool[i]);
}

// Thread t returned: warp-mates waiting for it can never complete.
void exited(Thread& t) {
  const int base = t.warp * 32, n = std::min(32, run->threads - base);
  for (int l = 0; l < n; ++l) {
    const Thread& u = *pool[base + l];
    if (u.state == State::kWaiting && !is_block_op(u.op) && (u.mask >> t.lane & 1u)) {
      return stop("lane " + std::to_string(t.lane) + " of warp " + std::to_string(t.warp) + " exited while lane " +
                  std::to_string(l) + " waits for it in " + describe_call(u) + describe_threads("\n  threads:"));
    }
  }
  try_block();
}

void thread_main() {
  run->body(run->ctx);
  current->state = State::kExited;
  current->fiber.finish();
}

// Runs one block to its end; false if it failed (run->report says why).
bool run_block(const Position& proto, size_t smem) {
  for (const Region& s : launch_shared) {
    SIMT_UNPOISON(s.base, s.capacity);
    std::memset(s.base, 0xff, smem);  // NaN in fp32, fp16 and bf16
    SIMT_POISON(s.base + smem, s.capacity - smem);
  }
  run->runnable.clear();
  std::fill(run->warp_steps.begin(), run->warp_steps.end(), 0);
  for (int i = 0; i < run->threads; ++i) {
    Thread& t = *pool[i];
    t.pos = proto;
    t.pos.id = i;
    t.pos.thread = dim3(i % proto.block_dim.x, i / proto.block_dim.x % proto.block_dim.y,
                        i / (proto.block_dim.x * proto.block_dim.y));
    t.lane = i % 32;
    t.warp = i / 32;
    t.state = State::kRunnable;
    t.call = nullptr;
    t.fiber.start(&thread_main);
    run->runnable.push_back(i);
  }
  while (!run->runnable.empty() && !run->failed) {
    const size_t k = run->rng() % run->runnable.size();
    Thread& t = *pool[run->runnable[k]];
    run->runnable[k] = run->runnable.back();
    run->runnable.pop_back();
    current = &t;
    running_warp_steps = &run->warp_steps[t.warp];
    stall::resuming();
    t.fiber.resume();
    if (stall::fired.load(std::memory_order_acquire)) stop(stall::report(kernel_name(run->kernel), t.warp, t.lane));
    if (run->failed) break;
    if (t.state == State::kExited) {
      exited(t);
    } else if (is_block_op(t.op)) {
      try_block();
    } else {
      try_warp(t);
    }
  }
  current = nullptr;
  running_warp_steps = &no_warp_steps;
  for (int i = 0; i < run->threads && !run->failed; ++i) {
    if (pool[i]->state != State::kExited) stop("deadlock: no thread can run" + describe_threads("\n  threads:"));
  }
  for (auto check : block_checks) {  // each also resets its state for the next block
    const std::string why = check();
    if (!why.empty()) stop(why);
  }
  return !run->failed;
}

}  // namespace

const char* op_name(Op op) {
  static const char* const names[] = {"__syncwarp",      "__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync",
                                      "__shfl_xor_sync", "__ballot_sync", "__all_sync",     "__any_sync",
                                      "warp call",       "__syncthreads", "block call"};
  return names[static_cast<int>(op)];
}

const Position& here() {
  if (!current) {
    std::fprintf(stderr, "simt: a device built-in was read outside a kernel\n");
    std::abort();
  }
  return current->pos;
}

uint64_t warp_op(Op op, unsigned mask, uint64_t value, int arg, int width, const Site& site, const GroupCall* call) {
  step(site);
  Thread& t = *current;
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = width;
  t.site = site;
  t.call = call;
  t.state = State::kWaiting;
  t.fiber.yield();
  t.call = nullptr;
  return t.result;
}

void block_op(Op op, const Site& site, const GroupCall* call) { warp_op(op, 0, 0, 0, 32, site, call); }

void fail(const std::string& message, const Site& site) {
  stop(message + " (at " + where(site) + ")");
  current->fiber.yield();  // never resumed: the launch is abandoned
  std::abort();
}

uint64_t* running_warp_steps = &no_warp_steps;
uint64_t step_budget = kStepBudget;

void out_of_steps(const Site& site) {
  if (!current) {
    no_warp_steps = 0;
    return;
  }
  const Thread& t = *current;
  fail("watchdog: warp " + std::to_string(t.warp) + " of " + kernel_name(run->kernel) +
           " did not finish: " + std::to_string(step_budget) +
           " steps (warp calls, memory sites, copies, gets) in this block, the last by lane " + std::to_string(t.lane),
       site);
}

void set_step_budget(uint64_t steps) { step_budget = steps; }

void set_seed(uint64_t s) {
  seed = s;
  launches = 0;
}

const std::string& last_report() { return last; }

void register_dynamic_shared(unsigned char* (*array)(), size_t capacity) {
  for (const Shared& s : shared_arrays) {
    if (s.array == array) return;
  }
  shared_arrays.push_back({array, capacity});
}

void name_dynamic_shared(const std::string& name) {
  for (const Shared& s : shared_arrays) name_region(name, s.array(), s.capacity);
}

void on_block_end(std::string (*check)()) { block_checks.push_back(check); }

bool in_dynamic_shared(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (const Region& s : launch_shared) {
    if (b >= s.base && b + bytes <= s.base + s.capacity) return true;
  }
  return false;
}

void trace_to(std::FILE* f) { trace = f; }

cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t smem, Body body, const void* ctx,
                   const Site& site) {
  std::string why;
  cudaError_t e = launch_limits(kernel, grid, block, smem, &why);
  launch_shared.clear();
  for (const Shared& s : shared_arrays) {
    launch_shared.push_back({s.array(), s.capacity});
    if (e == cudaSuccess && smem > s.capacity) {
      e = cudaErrorInvalidValue;
      why = "dynamic shared memory over the emulator's array";
    }
  }
  if (e != cudaSuccess) {
    last = "simt: launch at " + where(site) + " refused: " + why;
    set_last_error(e);
    return e;
  }
  Run r;
  r.kernel = kernel;
  r.body = body;
  r.ctx = ctx;
  r.threads = static_cast<int>(block.x * block.y * block.z);
  r.warp_steps.resize((r.threads + 31) / 32);
  r.rng.seed(seed * 0x9e3779b97f4a7c15ull + ++launches);
  while (static_cast<int>(pool.size()) < r.threads) pool.push_back(std::make_unique<Thread>());
  run = &r;
  stall::launch_begins(kernel);
  std::vector<dim3> order;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) order.emplace_back(x, y, z);
    }
  }
  std::shuffle(order.begin(), order.end(), r.rng);
  Position proto{};
  proto.block_dim = block;
  proto.grid_dim = grid;
  bool ok = true;
  for (const dim3& b : order) {
    proto.block = b;
    if (!(ok = run_block(proto, smem))) break;
  }
  stall::launch_ends();
  for (const Region& s : launch_shared) SIMT_UNPOISON(s.base, s.capacity);
  launch_shared.clear();
  run = nullptr;
  if (!ok) {
    last = r.report + "\n  (" + kernel_name(kernel) + " launched at " + where(site) + ")";
    set_last_error(cudaErrorLaunchFailure);
    return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

}  // namespace simt
