// The SIMT emulator's checks, each shown to fire on a kernel with the bug it exists to catch
// (and to stay quiet on the fixed kernel): `simt_selftest CASE` exits 0 when the case behaves
// as expected. tests/kernels/test_emulator_simt.py runs every case; shared-oob is expected to end in
// an AddressSanitizer report instead. shared-banks prints the shared-memory counters of access
// patterns whose bank wavefronts are known (tests/kernels/test_emulator_counters.py checks them).
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../../kernels/device_launch.cuh"
#include "include/nvshmemx.h"
#include "simt.h"
// after simt.h, which defines MGG_SIMT
#include "../../kernels/memory.cuh"

namespace selftest {

extern __shared__ __align__(16) unsigned char smem[];
constexpr size_t kSmemCapacity = 64 * 1024;
alignas(16) thread_local unsigned char smem[kSmemCapacity];

int line_of_interest = 0;  // the line a report must name

// ---- the kernels ----------------------------------------------------------------------------

__global__ void half_warp_shuffle(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x % 32 < 16) {
    line_of_interest = __LINE__ + 1;
    v = __shfl_sync(0xffffffffu, v, 0);  // lanes 16-31 never arrive
  }
  out[threadIdx.x] = v;
}

__global__ void barrier_after_return(int* out) {
  if (threadIdx.x / 32 == 1) return;  // warp 1 leaves early
  out[threadIdx.x] = 1;
  line_of_interest = __LINE__ + 1;
  __syncthreads();
}

__global__ void divergent_calls(int* out) {
  if (threadIdx.x < 16) {
    __syncwarp();
  } else {
    line_of_interest = __LINE__ + 1;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
  }
}

// Each lane writes its slot and reads its neighbour's: correct only with the warp barrier.
__global__ void neighbour_exchange(float* out, bool syncwarp) {
  float* s = reinterpret_cast<float*>(smem);
  const int lane = static_cast<int>(threadIdx.x);
  s[lane] = static_cast<float>(lane);
  if (syncwarp) __syncwarp();
  out[lane] = s[(lane + 1) % 32];
}

__global__ void write_past_shared(float* out, int n) {
  float* s = reinterpret_cast<float*>(smem);
  line_of_interest = __LINE__ + 1;
  s[threadIdx.x + n] = 1.f;  // n = the launched size in floats: thread 0 writes one past it
  out[threadIdx.x] = 0.f;
}

// Lane i gets row i of PE 1's table into shared memory and every lane sums the rows, twice: the
// first round completes the gets before reading; the second round too (quiet_first) or not (the
// bug; it completes them after reading). The second round fetches the same rows, so only the
// proxy's poisoning of the destination can tell a read before completion from one after.
__global__ void get_rows(const float* table, float* out, bool quiet_first, bool warp_scope) {
  float* s = reinterpret_cast<float*>(smem);
  const int lane = static_cast<int>(threadIdx.x);
  for (int round = 0; round < 2; ++round) {
    const bool quiet_before = round == 0 || quiet_first;
    if (warp_scope) {
      for (int i = 0; i < 32; ++i) nvshmemx_getmem_nbi_warp(s + i, table + i, sizeof(float), 1);
    } else {
      nvshmem_getmem_nbi(s + lane, table + lane, sizeof(float), 1);
    }
    if (quiet_before) nvshmem_quiet();
    __syncwarp();
    float sum = 0.f;
    for (int i = 0; i < 32; ++i) sum += s[i];
    out[lane] = sum;
    if (!quiet_before) nvshmem_quiet();
    __syncwarp();  // every lane has read the round's rows before the next round's gets
  }
}

__global__ void get_never_quieted(const float* table, float* out) {
  float* s = reinterpret_cast<float*>(smem);
  line_of_interest = __LINE__ + 1;
  nvshmem_getmem_nbi(s + threadIdx.x, table + threadIdx.x, sizeof(float), 1);
  out[threadIdx.x] = 0.f;
}

__global__ void warp_call_with_different_args(const float* table, float* out) {
  float* s = reinterpret_cast<float*>(smem);
  nvshmemx_getmem_nbi_warp(s, table + threadIdx.x % 2, sizeof(float), 1);  // lanes disagree on the source
  out[threadIdx.x] = s[0];
}

// Lane i copies 16 bytes (floats 4i..4i+3) of `table` into shared memory asynchronously, then
// every lane sums all 128 floats, twice: the first round waits and takes a warp barrier before
// reading; the second too (wait_first), or reads first and waits after (the bug). The second
// round copies the same floats, so only the poisoned destination tells the two apart.
__global__ void copy_rows(const float* table, float* out, bool wait_first) {
  float* s = reinterpret_cast<float*>(smem);
  const int lane = static_cast<int>(threadIdx.x);
  for (int round = 0; round < 2; ++round) {
    const bool wait_before = round == 0 || wait_first;
    MGG_COPY_ASYNC16(s + 4 * lane, table + 4 * lane);
    if (wait_before) MGG_WAIT_ASYNC();
    __syncwarp();
    float sum = 0.f;
    for (int i = 0; i < 128; ++i) sum += s[i];
    out[lane] = sum;
    if (!wait_before) MGG_WAIT_ASYNC();
    __syncwarp();  // every lane has read the round's floats before the next round's copies
  }
}

__global__ void copy_never_waited(const float* table, float* out) {
  float* s = reinterpret_cast<float*>(smem);
  line_of_interest = __LINE__ + 1;
  MGG_COPY_ASYNC16(s + 4 * threadIdx.x, table + 4 * threadIdx.x);
  out[threadIdx.x] = 0.f;
}

__global__ void copy_to_global(const float* table, float* out) {
  line_of_interest = __LINE__ + 1;
  MGG_COPY_ASYNC16(out + 4 * threadIdx.x, table + 4 * threadIdx.x);  // a destination outside shared memory
  MGG_WAIT_ASYNC();
}

__global__ void copy_misaligned(const float* table) {
  float* s = reinterpret_cast<float*>(smem);
  line_of_interest = __LINE__ + 1;
  MGG_COPY_ASYNC16(s + 4 * threadIdx.x, table + 4 * threadIdx.x + 1);  // 4 bytes off the 16-byte grid
  MGG_WAIT_ASYNC();
}

// Sums `edges` values in chunks of 32, one per lane, as kernels/aggregate_kernel.cuh's chunk loops
// do; with `one_short` a chunk shorter than 32 counts one edge less, so the last chunk has 0 edges
// and the loop never advances (on the GPU, a hang).
__global__ void chunk_loop(const int* values, int edges, bool one_short, int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int sum = 0;
  for (int c = 0, n = 0; c < edges; c += n) {
    n = edges - c < 32 ? edges - c - one_short : 32;
    line_of_interest = __LINE__ + 1;
    MGG_GLOBAL_LOAD(values + c + lane, lane < n);
    if (lane < n) sum += values[c + lane];
  }
  out[threadIdx.x] = sum;
}

// chunk_loop with plain loads, as kernels/aggregate_kernel.cuh's add_direct skips its chunk's loads
// and shuffles when it has no edges: with `one_short` the loop spins without a call into the
// emulator, which the step budget cannot see.
__global__ void silent_chunk_loop(const int* values, int edges, bool one_short, int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int sum = 0;
  for (int c = 0, n = 0; c < edges; c += n) {
    line_of_interest = __LINE__ + 1;
    n = edges - c < 32 ? edges - c - one_short : 32;
    for (int i = 0; i < n; ++i) sum += i == lane ? values[c + i] : 0;
  }
  out[threadIdx.x] = sum;
}

// Each lane of each warp accesses float `lane * stride` (a 16-byte vector at `lane * stride`
// floats for op 3) of shared memory, lanes below `active` only: op 0 loads, 1 stores, 2 adds
// atomically.
__global__ void shared_pattern(int op, int stride, int active) {
  float* s = reinterpret_cast<float*>(smem);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float* p = s + lane * stride;
  const bool on = lane < active;
  if (op == 0) {
    MGG_SHARED_LOAD(p, on);
    if (on) s[1023] = *p;  // the last word of the 4 KB the launch has
  } else if (op == 1) {
    MGG_SHARED_STORE(p, on);
    if (on) *p = 1.f;
  } else if (op == 2) {
    MGG_SHARED_ATOMIC(p, on);
    if (on) atomicAdd(p, 1.f);
  } else {
    const float4* q = reinterpret_cast<const float4*>(p);
    MGG_SHARED_LOAD(q, on);
  }
}

// ---- the cases ------------------------------------------------------------------------------

bool expect_report(cudaError_t e, const std::vector<std::string>& words) {
  if (e == cudaSuccess) {
    std::printf("the launch succeeded, but the emulator should have stopped it\n");
    return false;
  }
  const std::string& r = simt::last_report();
  for (const std::string& w : words) {
    if (r.find(w) == std::string::npos) {
      std::printf("the report lacks '%s':\n%s\n", w.c_str(), r.c_str());
      return false;
    }
  }
  std::printf("reported as expected:\n%s\n", r.c_str());
  return true;
}

std::string here_line() { return "selftest.cpp:" + std::to_string(line_of_interest); }

cudaError_t launched() { return cudaGetLastError(); }

bool half_warp_shuffle_case() {
  std::vector<int> out(64);
  MGG_LAUNCH(1, 64, 0, nullptr, half_warp_shuffle)(out.data());
  return expect_report(launched(), {"exited", "__shfl_sync", here_line()});
}

bool barrier_after_return_case() {
  std::vector<int> out(96);
  MGG_LAUNCH(2, 96, 0, nullptr, barrier_after_return)(out.data());
  return expect_report(launched(), {"__syncthreads", "returned", here_line()});
}

bool divergent_calls_case() {
  std::vector<int> out(32);
  MGG_LAUNCH(1, 32, 0, nullptr, divergent_calls)(out.data());
  return expect_report(launched(), {"diverged", "__syncwarp", "__shfl_sync", here_line()});
}

// A correct launch leaves every lane's value in shared memory; then the launch under test. Only
// the NaN fill at block start keeps the second from reading the first's values.
bool run_exchange(bool syncwarp, uint64_t seed) {
  simt::set_seed(seed);
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 32 * sizeof(float), nullptr, neighbour_exchange)(out.data(), true);
  MGG_LAUNCH(1, 32, 32 * sizeof(float), nullptr, neighbour_exchange)(out.data(), syncwarp);
  if (launched() != cudaSuccess) return false;
  bool right = true;
  for (int i = 0; i < 32; ++i) right = right && out[i] == static_cast<float>((i + 1) % 32);
  return right;
}

bool missing_syncwarp_case() {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    if (!run_exchange(true, seed)) {
      std::printf("seed %lu: wrong with __syncwarp\n", static_cast<unsigned long>(seed));
      return false;
    }
    if (run_exchange(false, seed)) {
      std::printf("seed %lu: right without __syncwarp: the race went unseen\n", static_cast<unsigned long>(seed));
      return false;
    }
  }
  std::printf("the missing __syncwarp reads NaN under every seed; with it, every lane is right\n");
  return true;
}

bool shared_out_of_bounds_case() {
  std::vector<float> out(32);
  std::printf("expecting an AddressSanitizer report at %s\n", "selftest.cpp (write_past_shared)");
  std::fflush(stdout);
  MGG_LAUNCH(1, 32, 256 * sizeof(float), nullptr, write_past_shared)(out.data(), 256);
  std::printf("the write past the launched shared memory went unseen\n");
  return false;
}

// Two PEs' tables of 32 floats; PE 0 runs the kernel and gets PE 1's rows.
struct World {
  std::vector<float> pe0 = std::vector<float>(32, 0.f), pe1 = std::vector<float>(32);
  explicit World(simt::shmem::Completion mode) {
    for (int i = 0; i < 32; ++i) pe1[i] = static_cast<float>(i);
    const void* heaps[2] = {pe0.data(), pe1.data()};
    simt::shmem::set_world(heaps, 2, 32 * sizeof(float), 0, mode);
  }
};

bool gets_sum(simt::shmem::Completion mode, bool quiet_first, bool warp_scope) {
  const World w(mode);
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 32 * sizeof(float), nullptr, get_rows)(w.pe0.data(), out.data(), quiet_first, warp_scope);
  if (launched() != cudaSuccess) {
    std::printf("%s\n", simt::last_report().c_str());
    return false;
  }
  for (float v : out) {
    if (v != 496.f) return false;  // 0 + 1 + ... + 31
  }
  return true;
}

bool read_before_quiet_case() {
  using simt::shmem::Completion;
  for (const bool warp_scope : {false, true}) {
    if (!gets_sum(Completion::kProxy, true, warp_scope) || !gets_sum(Completion::kLoadStore, false, warp_scope)) {
      std::printf("a correct use of gets failed (warp scope %d)\n", warp_scope);
      return false;
    }
    if (gets_sum(Completion::kProxy, false, warp_scope)) {
      std::printf("proxy mode: the landing buffer read before nvshmem_quiet went unseen (warp scope %d)\n", warp_scope);
      return false;
    }
  }
  std::printf("proxy mode: reading before nvshmem_quiet reads NaN; after it, the rows\n");
  return true;
}

bool get_never_quieted_case() {
  const World w(simt::shmem::Completion::kProxy);
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 32 * sizeof(float), nullptr, get_never_quieted)(w.pe0.data(), out.data());
  return expect_report(launched(), {"never completed", here_line()});
}

bool warp_call_args_case() {
  const World w(simt::shmem::Completion::kLoadStore);
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 32 * sizeof(float), nullptr, warp_call_with_different_args)(w.pe0.data(), out.data());
  return expect_report(launched(), {"diverged", "nvshmemx_getmem_nbi_warp"});
}

bool copies_sum(bool wait_first) {
  alignas(16) static float table[128];
  for (int i = 0; i < 128; ++i) table[i] = static_cast<float>(i);
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 128 * sizeof(float), nullptr, copy_rows)(table, out.data(), wait_first);
  if (launched() != cudaSuccess) {
    std::printf("%s\n", simt::last_report().c_str());
    return false;
  }
  for (float v : out) {
    if (v != 8128.f) return false;  // 0 + 1 + ... + 127
  }
  return true;
}

bool read_before_wait_case() {
  if (!copies_sum(true)) {
    std::printf("a correct use of asynchronous copies failed\n");
    return false;
  }
  if (copies_sum(false)) {
    std::printf("shared memory read before the asynchronous copy's wait went unseen\n");
    return false;
  }
  std::printf("reading before the wait reads NaN; after it, the copied floats\n");
  return true;
}

// The watchdog: the chunk loop ends within a step budget, and one that never ends is stopped at
// it, the report naming the kernel and the site of the warp's last step.
bool endless_loop_case() {
  std::vector<int> values(40, 1), out(64);
  simt::set_step_budget(1 << 12);
  MGG_LAUNCH(2, 64, 0, nullptr, chunk_loop)(values.data(), 40, false, out.data());
  if (launched() != cudaSuccess) {
    std::printf("the loop that ends was stopped:\n%s\n", simt::last_report().c_str());
    return false;
  }
  MGG_LAUNCH(2, 64, 0, nullptr, chunk_loop)(values.data(), 40, true, out.data());
  return expect_report(launched(), {"watchdog: warp ", "selftest::chunk_loop did not finish", here_line()});
}

// The stall watchdog: a lane spinning without a call into the emulator is interrupted and the launch
// stopped, the report naming the kernel and the lane; the next launch runs as before.
bool stalled_lane_case() {
  std::vector<int> values(40, 1), out(64);
  simt::set_stall_seconds(0.5);
  MGG_LAUNCH(2, 64, 0, nullptr, silent_chunk_loop)(values.data(), 40, true, out.data());
  if (!expect_report(launched(), {"watchdog: lane ", "of selftest::silent_chunk_loop ran ", "selftest.cpp:"})) {
    return false;
  }
  MGG_LAUNCH(2, 64, 0, nullptr, silent_chunk_loop)(values.data(), 40, false, out.data());
  if (launched() != cudaSuccess || out[0] != 2 || out[8] != 1 || out[63] != 1) {
    std::printf("the launch after a stall failed:\n%s\n", simt::last_report().c_str());
    return false;
  }
  return true;
}

bool copy_never_waited_case() {
  alignas(16) static float table[128] = {};
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 128 * sizeof(float), nullptr, copy_never_waited)(table, out.data());
  return expect_report(launched(), {"never waited", here_line()});
}

bool copy_to_global_case() {
  alignas(16) static float table[128] = {};
  alignas(16) static float out[128] = {};
  MGG_LAUNCH(1, 32, 128 * sizeof(float), nullptr, copy_to_global)(table, out);
  return expect_report(launched(), {"into the launch's shared memory", here_line()});
}

bool copy_misaligned_case() {
  alignas(16) static float table[132] = {};
  MGG_LAUNCH(1, 32, 128 * sizeof(float), nullptr, copy_misaligned)(table);
  return expect_report(launched(), {"16-byte boundary", here_line()});
}

// `shared OP STRIDE ACTIVE requests wavefronts active_lanes` per pattern of shared_pattern, run
// by 2 warps (so 2 requests where a lane is active).
bool shared_banks_case() {
  const char* ops[] = {"ld", "st", "atom", "ld4"};
  for (int op = 0; op < 4; ++op) {
    for (const int stride : {0, 1, 2, 4, 8, 32}) {
      for (const int active : {32, 16, 0}) {
        if ((op == 3 && stride < 4) || 31 * stride + (op == 3 ? 4 : 1) > 1023) continue;
        simt::count_memory(true);
        MGG_LAUNCH(1, 64, 1024 * sizeof(float), nullptr, shared_pattern)(op, stride, active);
        if (launched() != cudaSuccess) {
          std::printf("%s\n", simt::last_report().c_str());
          return false;
        }
        uint64_t requests = 0, wavefronts = 0, lanes = 0;
        for (const simt::SharedCounts& c : simt::shared_counts()) {
          requests += c.requests;
          wavefronts += c.wavefronts;
          lanes += c.active_lanes;
        }
        simt::count_memory(false);
        std::printf("shared %s %d %d %lu %lu %lu\n", ops[op], stride, active, static_cast<unsigned long>(requests),
                    static_cast<unsigned long>(wavefronts), static_cast<unsigned long>(lanes));
      }
    }
  }
  return true;
}

bool pe_queries_case() {
  bool ok = true;
  {
    const World w(simt::shmem::Completion::kLoadStore);
    ok = ok && nvshmem_my_pe() == 0 && nvshmem_n_pes() == 2;
    ok = ok && nvshmem_ptr(w.pe0.data() + 5, 1) == w.pe1.data() + 5;  // a peer's copy, by loads
    ok = ok && nvshmem_ptr(w.pe1.data(), 1) == nullptr;               // not in this PE's heap
  }
  const World w(simt::shmem::Completion::kProxy);
  ok = ok && nvshmem_ptr(w.pe0.data(), 1) == nullptr;  // over a network: not reachable by loads
  std::printf("nvshmem_ptr, my_pe, n_pes: %s\n", ok ? "as NVSHMEM answers" : "wrong");
  return ok;
}

bool shared_opt_in_case() {
  std::vector<float> out(32);
  MGG_LAUNCH(1, 32, 60 * 1024, nullptr, neighbour_exchange)(out.data(), true);  // over 48 KB without the opt-in
  const cudaError_t e = launched();
  if (e != cudaErrorInvalidValue) {
    std::printf("a launch of 60 KB of shared memory without the opt-in gave %d\n", static_cast<int>(e));
    return false;
  }
  cudaFuncSetAttribute(neighbour_exchange, cudaFuncAttributeMaxDynamicSharedMemorySize, 60 * 1024);
  MGG_LAUNCH(1, 32, 60 * 1024, nullptr, neighbour_exchange)(out.data(), true);
  return launched() == cudaSuccess;
}

}  // namespace selftest

int main(int argc, char** argv) {
  using namespace selftest;
  simt::register_dynamic_shared([] { return smem; }, kSmemCapacity);
  const std::map<std::string, std::function<bool()>> cases = {
      {"half-warp-shuffle", half_warp_shuffle_case}, {"barrier-after-return", barrier_after_return_case},
      {"divergent-calls", divergent_calls_case},     {"missing-syncwarp", missing_syncwarp_case},
      {"shared-oob", shared_out_of_bounds_case},     {"read-before-quiet", read_before_quiet_case},
      {"get-never-quieted", get_never_quieted_case}, {"warp-call-args", warp_call_args_case},
      {"shared-opt-in", shared_opt_in_case},         {"pe-queries", pe_queries_case},
      {"shared-banks", shared_banks_case},           {"read-before-wait", read_before_wait_case},
      {"copy-never-waited", copy_never_waited_case}, {"copy-misaligned", copy_misaligned_case},
      {"copy-to-global", copy_to_global_case},       {"endless-loop", endless_loop_case},
      {"stalled-lane", stalled_lane_case},
  };
  if (argc != 2 || !cases.count(argv[1])) {
    std::printf("usage: %s CASE, CASE one of:", argv[0]);
    for (const auto& [name, _] : cases) std::printf(" %s", name.c_str());
    std::printf("\n");
    return 2;
  }
  const bool ok = cases.at(argv[1])();
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", argv[1]);
  return ok ? 0 : 1;
}
