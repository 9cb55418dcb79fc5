// The kernels' memory access sites, named for counting (issue 31): beside each access, every
// lane of the warp states the address it accesses and whether it is active at that instruction.
// Under nvcc they are nothing, so the compiled code is unchanged; under the SIMT emulator
// (simt.h defines MGG_SIMT) they feed its counters (csrc/tests/simt/counters.cpp), which
// assemble the warp's instruction at a site from the k-th report of each lane:
// - MGG_GLOBAL_LOAD(pointer, active): a global load; its requests, 32-byte sectors, active
//   lanes and bytes are counted (tests/kernels/test_emulator_counters.py, bench counters).
// - MGG_SHARED_LOAD / MGG_SHARED_STORE / MGG_SHARED_ATOMIC(pointer, active): a shared-memory
//   access; its requests and the wavefronts it needs (32 banks of 4-byte words: per bank the
//   distinct words the active lanes touch, the most of any bank; for an atomic, lanes on one
//   word serialise too, so every lane's word counts) are counted, so wavefronts per request is
//   the access's bank-conflict degree (1: none).
#pragma once

#ifdef MGG_SIMT
#define MGG_GLOBAL_LOAD(ptr, active) ::simt::global_load((ptr), sizeof(*(ptr)), (active))
#define MGG_SHARED_LOAD(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kLoad)
#define MGG_SHARED_STORE(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kStore)
#define MGG_SHARED_ATOMIC(ptr, active) ::simt::shared_access((ptr), sizeof(*(ptr)), (active), ::simt::SharedOp::kAtomic)
#else
#define MGG_GLOBAL_LOAD(ptr, active) static_cast<void>(0)
#define MGG_SHARED_LOAD(ptr, active) static_cast<void>(0)
#define MGG_SHARED_STORE(ptr, active) static_cast<void>(0)
#define MGG_SHARED_ATOMIC(ptr, active) static_cast<void>(0)
#endif
