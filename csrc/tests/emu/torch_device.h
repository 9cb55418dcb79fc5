// The emulated device of the test extension's ops (torch_ops.cpp, torch_attention.cpp): what the
// shared op bodies (ops/device_step.h, ops/device_attention.h) ask of a device, answered on CPU
// tensors with the SIMT emulator running every launch. NVSHMEM gets read the PEs' tables as
// their symmetric heaps (simt/nvshmem.cpp, proxy completion: a get lands at nvshmem_quiet), or,
// with `loads` set (mgg_emu::set_p2p), every PE is reachable by loads, as on one node: the ops
// get Sources::p2p with each table as its peer pointer, as ops/cuda/sources.cu gives them from
// nvshmem_ptr, so the aggregation kernels copy rows (kernels/fetch.cuh's PeerCopyFetch). The
// proxy completion runs the NVSHMEM-get kernels, which the CUDA ops refuse for now (some PE not
// reachable by loads: ops/cuda/sources.cu), so that they stay tested for when they can run.
#pragma once
#include <include/nvshmem.h>
#include <simt.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

#include "../../ops/device_step.h"

namespace mgg {

struct Emulated {
  struct Guard {
    explicit Guard(const at::Device& /*device*/) {}
  };
  // Outputs start as NaN, so an element no thread writes shows (as uninitialised device memory).
  static at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return at::full(sizes, std::numeric_limits<float>::quiet_NaN(), options);
  }
  // The fetch policy the host checks (ops/checks.cpp) see: they refuse gets on CPU tensors, which
  // the emulator serves, so a get is checked as direct; uva (pinned host memory) is not emulated.
  static int64_t fetch_for_checks(const char* op, int64_t fetch) {
    TORCH_CHECK(fetch != static_cast<int64_t>(Fetch::kUva), op, ": fetch 'uva' is not emulated");
    const bool get =
        fetch >= static_cast<int64_t>(Fetch::kGetThread) && fetch <= static_cast<int64_t>(Fetch::kGetBlock);
    return get ? static_cast<int64_t>(Fetch::kDirect) : fetch;
  }
  // Peer pointers (direct), or NVSHMEM gets with each PE's symmetric heap from its table's first
  // byte to the end of the shortest allocation (the tables may be views of their rows, as
  // mgg.distributed.nvshmem passes them): the world the next launch of this thread runs in.
  static kernels::Sources peers(const char* /*op*/, at::TensorList tables, int64_t my_pe, Fetch how,
                                kernels::Source* source) {
    *source = source_of(how);
    world.gets = how != Fetch::kDirect;
    if (!world.gets) return direct_sources(tables, my_pe);
    world.pes = static_cast<int>(tables.size());
    world.me = static_cast<int>(my_pe);
    world.bytes = std::numeric_limits<size_t>::max();
    for (int i = 0; i < world.pes; ++i) {
      const at::Tensor& t = tables[i];
      world.bytes = std::min(world.bytes, t.storage().nbytes() - t.storage_offset() * t.element_size());
      world.heaps[i] = t.data_ptr();
    }
    kernels::Sources s{};
    s.local_table = s.symmetric = tables[my_pe].data_ptr();
    s.p2p = world.p2p = loads.load();
    if (s.p2p) {
      for (int i = 0; i < world.pes; ++i) s.peers[i] = tables[i].data_ptr();
    }
    return s;
  }
  // Every PE reachable by loads (mgg_emu::set_p2p), for the gets of every thread's next calls.
  static inline std::atomic<bool> loads{false};
  // One launch at a time in the process: the emulator's scheduler is not reentrant, and tests run
  // PEs as threads (tests/distributed/test_nvshmem_runtime.py). A launch never waits on another thread.
  static inline std::mutex launches;  // one for every instantiation of launch()
  template <typename Run>
  static void launch(const char* op, Run&& run) {
    const std::lock_guard<std::mutex> one_launch(launches);
    if (world.gets) {
      simt::shmem::set_world(world.heaps, world.pes, world.bytes, world.me,
                             world.p2p ? simt::shmem::Completion::kLoadStore : simt::shmem::Completion::kProxy);
    }
    const cudaError_t e = run(nullptr);
    world.gets = false;
    TORCH_CHECK(e == cudaSuccess, op, " (emulated): ", cudaGetErrorString(e), "\n", simt::last_report());
  }

 private:
  struct World {  // trivial: thread_local without an initialiser or destructor
    bool gets, p2p;
    int pes, me;
    size_t bytes;
    const void* heaps[kMaxPes];
  };
  static inline thread_local World world;  // set by peers(), used by this thread's next launch
};

}  // namespace mgg
