// The device side of the SIMT emulator, force-included (-include simt.h) before CUDA sources
// compiled by the host compiler: CUDA's qualifiers as host C++, the built-in variables, warp
// and block synchronisation, shuffles and votes, atomics, device math, and the launch that
// MGG_LAUNCH (kernels/device_launch.cuh) expands to. Test infrastructure only: never part of
// the shipped extension.
//
// Every thread of a launch is a fiber (fiber.h) and each call below that synchronises is a
// scheduling point (scheduler.cpp): lanes, warps and blocks run in a seeded random order between
// them, warp calls complete only when every lane of the mask has arrived at the same call with
// the same mask, and anything else stops the launch with a report naming each thread's file:line.
#pragma once
#define MGG_SIMT 1  // the kernels' source is compiled for the emulator (kernels/memory.cuh counts)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// ---- qualifiers ---------------------------------------------------------------------------
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ thread_local  // static storage, one copy for the block that runs (blocks run one at a time)
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __maxnreg__
#define __maxnreg__(...)
#undef __forceinline__
#define __forceinline__ inline

namespace simt {

// The device the emulated runtime reports: an H100 (CUDA programming guide, compute capability 9.0;
// H100 SXM5: 132 SMs), written once: runtime.cpp answers cudaDeviceGetAttribute with these, and the
// test programs (csrc/tests/emu) size the kernels' `extern __shared__` array by kSharedOptin.
// mgg/runtime/hardware.py holds the same GPU's numbers for the Python side.
constexpr int kSms = 132;
constexpr int kSharedPerBlock = 48 * 1024;  // without the opt-in
constexpr int kSharedOptin = 227 * 1024;    // cudaDevAttrMaxSharedMemoryPerBlockOptin
constexpr int kSharedPerSm = 228 * 1024;
constexpr int kRegistersPerBlock = 64 * 1024;
constexpr int kMaxThreads = 1024;

using Site = std::source_location;

enum class Op : int {
  kSyncwarp,
  kShfl,
  kShflUp,
  kShflDown,
  kShflXor,
  kBallot,
  kAll,
  kAny,
  kWarpCall,     // a warp-scope library call (NVSHMEM's *_warp)
  kSyncthreads,  // block-scope from here on
  kBlockCall,    // a block-scope library call (NVSHMEM's *_block)
};
const char* op_name(Op op);

// A collective library call: what every member passes (equal on all), and what runs once all
// have arrived, given the members' thread ids in the block.
struct GroupCall {
  const char* name;
  uint64_t args[4];
  void (*run)(const GroupCall& call, const int* members, int n);
  std::source_location site;  // of the first member to arrive (not compared)
};

// The calling thread's place in the launch.
struct Position {
  dim3 thread, block, block_dim, grid_dim;
  int id;  // linear thread id in the block
};
const Position& here();

uint64_t warp_op(Op op, unsigned mask, uint64_t value, int arg, int width, const Site& site,
                 const GroupCall* call = nullptr);
void block_op(Op op, const Site& site, const GroupCall* call = nullptr);

// Stops the launch from inside a thread with `message` (the launch returns an error).
[[noreturn]] void fail(const std::string& message, const Site& site);

// ---- the watchdog (scheduler.cpp) ----------------------------------------------------------
// Every call of a kernel into the emulator (warp and block calls, the memory sites of
// kernels/memory.cuh, asynchronous copies, NVSHMEM gets and quiet) is a step of the calling
// thread's warp. A warp that takes more than the step budget in one block is in a loop that does
// not end (a chunk loop whose edge count comes out 0, say): the launch stops with a report that
// names the kernel, the block, the warp and the site of its last step, where the GPU would hang.
// The tests' kernels take at most about 1.1 million steps per warp and block; at about 10 million
// steps a second the budget is reached in seconds.
constexpr uint64_t kStepBudget = uint64_t{1} << 26;
// The budget per warp and block of the next launches (kStepBudget until set).
void set_step_budget(uint64_t steps);
// A loop that makes no such call (a chunk loop whose edge count comes out 0 skips its loads and
// shuffles) never returns to the scheduler. The stall watchdog (stall.cpp) interrupts a lane that
// has run kStallSeconds of CPU time since it was resumed, and the launch stops with a report that
// names the kernel, the block, the warp, the lane and the function and line it was interrupted in.
// The tests' lanes run for microseconds between two calls.
constexpr double kStallSeconds = 10;
void set_stall_seconds(double seconds);  // for the launches from now on (kStallSeconds until set)
// The steps of the warp that runs now and the budget (launches run one at a time); the count is
// inline, as every lane's every load counts.
extern uint64_t* running_warp_steps;
extern uint64_t step_budget;
void out_of_steps(const Site& site);  // stops the launch (returns outside one)
inline void step(const Site& site) {
  if (++*running_warp_steps > step_budget) out_of_steps(site);
}

// ---- memory and warp-call counters (counters.cpp) -------------------------------------------
// A load site of the kernels reports every lane's load of one warp instruction, active or not
// (MGG_GLOBAL_LOAD, kernels/memory.cuh): the k-th report of each lane of a warp at one site is
// the warp's k-th instruction there. Per site and named memory region the counters hold the
// issued requests (instructions with an active lane), the distinct 32-byte sectors each touches,
// active lanes, lane slots (32 per request) and bytes requested, as Nsight Compute counts them.
void global_load(const void* p, size_t bytes, bool active, const Site& site = Site::current());
// A shared-memory site (MGG_SHARED_LOAD / _STORE / _ATOMIC) likewise: per site the requests
// and the wavefronts each needs, 32 banks of 4-byte words (bank = address / 4 % 32): the most
// words of one bank among the active lanes, distinct words for loads and stores (lanes on one
// word share it), every lane's word for atomics (lanes on one word serialise). Wavefronts per
// request is the bank-conflict degree; wavefronts - requests what Nsight Compute counts as
// l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st} (bench/counters.py's NCU_SHARED).
enum class SharedOp : int { kLoad, kStore, kAtomic };
const char* shared_op_name(SharedOp op);  // ld, st, atom
void shared_access(const void* p, size_t bytes, bool active, SharedOp op, const Site& site = Site::current());
// Called by the scheduler when a warp call completes (shuffles per edge).
void count_warp_call(Op op);
// An NVSHMEM get (nvshmem.cpp), counted per scope (thread, warp, block): calls (one per thread at
// thread scope, one per warp or block for the collective ones), the bytes they move and the
// 32-byte sectors of their sources in the peer's heap (what the link carries at sector
// granularity). How NVSHMEM splits a get into load instructions is its own and not modelled.
void count_get(const char* scope, const void* src, size_t bytes);
struct GetCounts {
  std::string scope;
  uint64_t calls = 0, bytes = 0, sectors = 0;
};
struct SiteCounts {
  std::string site, region;  // file:line of the load; the region holding the first active address
  uint64_t requests = 0, sectors = 0, active_lanes = 0, lane_slots = 0, bytes = 0;
};
struct SharedCounts {
  std::string site, op;  // file:line of the access; ld, st or atom
  uint64_t requests = 0, wavefronts = 0, active_lanes = 0;
};
// Starts counting (clearing earlier counts and regions) or stops it.
void count_memory(bool on);
// Names [base, base + bytes) for the counters (a table, the plan's arrays, shared memory).
void name_region(const std::string& name, const void* base, size_t bytes);
// The counts so far (pending instructions of lanes that exited are completed first), and the
// completed warp calls by op_name.
std::vector<SiteCounts> memory_counts();
std::vector<SharedCounts> shared_counts();
std::vector<GetCounts> get_counts();
std::vector<std::pair<std::string, uint64_t>> warp_call_counts();
// Per warp, the dependent chain before its first row: the global-load instructions it issues
// (requests, as above) before its first access to a source row (a load from a source table, the
// runner's regions table, remote_table and peerN, or an NVSHMEM get), counted in the warp's
// program order. Warps with a row access: their number, the sum and the most of their chains;
// warps that issue loads but no row access are counted apart.
struct ChainCounts {
  uint64_t warps = 0, loads = 0, most = 0, without_rows = 0;
};
ChainCounts chain_counts();
// Every atomic operation of a thread (atomicAdd, atomicMax, atomicExch below), by site and space:
// "shared" in the launch's dynamic shared memory, "global" anywhere else (static __shared__
// variables, thread_local here, included).
void count_atomic(const void* p, size_t bytes, const Site& site);
struct AtomicCounts {
  std::string site, space;
  uint64_t operations = 0;
};
std::vector<AtomicCounts> atomic_counts();

// ---- asynchronous copies (cp.async; async_copy.cpp) ----------------------------------------
// A copy of `bytes` from global to shared memory (MGG_COPY_ASYNC16, kernels/memory.cuh) that
// completes at the issuing thread's next async_wait: until then its destination is NaN (bytes
// 0xff), so the issuing thread reading it before the wait reads NaN, and so does another lane
// reading it without a barrier after that wait whenever the scheduler runs the reader first
// (the seeds vary the order). A copy never waited for when its block ends, one off a `bytes`
// boundary, one into anything but dynamic shared memory or from it fails the launch.
void async_copy(void* dst, const void* src, size_t bytes, const Site& site = Site::current());
void async_wait(const Site& site = Site::current());

// ---- launch -------------------------------------------------------------------------------
using Body = void (*)(const void* ctx);
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t smem, Body body, const void* ctx,
                   const Site& site);

// The kernel's function name with its template arguments (symbols.cpp), for reports.
std::string kernel_name(const void* kernel);

// The seed of the scheduling order of the next launches; the report of the last failed launch.
void set_seed(uint64_t seed);
const std::string& last_report();
// Dynamic shared memory declared as `extern __shared__ T name[]` resolves to a thread_local
// array of `capacity` bytes; each block sees its launched size NaN-filled (bytes 0xff) and the
// rest poisoned for AddressSanitizer. `array` returns the calling OS thread's copy: a launch asks
// for it on the thread that launches (whose copy the kernel's fibers use), never keeping the
// address of another thread's, which is freed when that thread ends. Registering again is a no-op.
void register_dynamic_shared(unsigned char* (*array)(), size_t capacity);
// Names every registered dynamic shared array (the calling OS thread's copy) `name` for the
// counters: each translation unit whose kernels sit in an anonymous namespace has its own.
void name_dynamic_shared(const std::string& name);
// Writes a line "block warp call file:line" for every completed warp call and, once per warp,
// every completed block call, to `trace` (nullptr: none).
void trace_to(std::FILE* trace);
// Checks run when a block ends (e.g. NVSHMEM gets left incomplete): a non-empty message fails it.
void on_block_end(std::string (*check)());
// [p, p + bytes) lies in the running launch's dynamic shared memory (the calling thread's copy).
bool in_dynamic_shared(const void* p, size_t bytes);

template <typename... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, const Site& site)
      : kernel_(kernel), grid_(grid), block_(block), smem_(smem), site_(site) {}
  template <typename... A>
  void operator()(A&&... args) const {  // arguments are converted and copied as a launch does
    const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    const Ctx ctx{kernel_, &params};
    launch(reinterpret_cast<const void*>(kernel_), grid_, block_, smem_, &run, &ctx, site_);
  }

 private:
  struct Ctx {
    void (*kernel)(P...);
    const std::tuple<std::decay_t<P>...>* params;
  };
  static void run(const void* c) {
    const Ctx* x = static_cast<const Ctx*>(c);
    std::apply(x->kernel, *x->params);
  }
  void (*kernel_)(P...);
  dim3 grid_, block_;
  size_t smem_;
  Site site_;
};

template <typename... P>
Launcher<P...> launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t /*stream*/,
                        const Site& site = Site::current()) {
  return Launcher<P...>(kernel, grid, block, smem, site);
}

template <typename T>
uint64_t bits_of(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp calls move at most 64 bits");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace simt

// ---- built-in variables -------------------------------------------------------------------
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (::simt::here().thread)
#define blockIdx (::simt::here().block)
#define blockDim (::simt::here().block_dim)
#define gridDim (::simt::here().grid_dim)

// ---- synchronisation, shuffles, votes -----------------------------------------------------
inline void __syncthreads(const simt::Site& s = simt::Site::current()) { simt::block_op(simt::Op::kSyncthreads, s); }
inline void __syncwarp(unsigned mask = 0xffffffffu, const simt::Site& s = simt::Site::current()) {
  simt::warp_op(simt::Op::kSyncwarp, mask, 0, 0, 32, s);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, const simt::Site& s = simt::Site::current()) {
  return simt::from_bits<T>(simt::warp_op(simt::Op::kShfl, mask, simt::bits_of(v), src, width, s));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, const simt::Site& s = simt::Site::current()) {
  return simt::from_bits<T>(simt::warp_op(simt::Op::kShflUp, mask, simt::bits_of(v), delta, width, s));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, const simt::Site& s = simt::Site::current()) {
  return simt::from_bits<T>(simt::warp_op(simt::Op::kShflDown, mask, simt::bits_of(v), delta, width, s));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, const simt::Site& s = simt::Site::current()) {
  return simt::from_bits<T>(simt::warp_op(simt::Op::kShflXor, mask, simt::bits_of(v), lane_mask, width, s));
}
inline unsigned __ballot_sync(unsigned mask, int p, const simt::Site& s = simt::Site::current()) {
  return static_cast<unsigned>(simt::warp_op(simt::Op::kBallot, mask, p != 0, 0, 32, s));
}
inline int __all_sync(unsigned mask, int p, const simt::Site& s = simt::Site::current()) {
  return static_cast<int>(simt::warp_op(simt::Op::kAll, mask, p != 0, 0, 32, s));
}
inline int __any_sync(unsigned mask, int p, const simt::Site& s = simt::Site::current()) {
  return static_cast<int>(simt::warp_op(simt::Op::kAny, mask, p != 0, 0, 32, s));
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// ---- atomics (one OS thread runs every fiber, and none switches inside these; counted) ------
template <typename T>
T atomicAdd(T* p, T v, const simt::Site& s = simt::Site::current()) {
  simt::count_atomic(p, sizeof(T), s);
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v, const simt::Site& s = simt::Site::current()) {
  simt::count_atomic(p, sizeof(T), s);
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
T atomicExch(T* p, T v, const simt::Site& s = simt::Site::current()) {
  simt::count_atomic(p, sizeof(T), s);
  const T old = *p;
  *p = v;
  return old;
}

// ---- device math --------------------------------------------------------------------------
// __expf is the device's fast exponential, 2^(x log2 e) (ex2.approx): computed the same way.
inline float __expf(float x) { return std::exp2(x * 1.4426950408889634f); }
inline float __fdividef(float a, float b) { return a / b; }
using std::fmaxf;
using std::fminf;

// ---- launch and the host runtime the launchers call ---------------------------------------
// cuda_runtime.h's templated overloads for kernels named by function pointer (runtime.cpp
// implements the runtime with the H100's attributes).
template <typename T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* kernel) {
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(kernel));
}
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
