// The kernels' global-memory load sites, named for counting (issue 31): beside each load, every
// lane of the warp states the address it loads and whether it is active at that instruction,
// MGG_GLOBAL_LOAD(pointer, active). Under nvcc it is nothing, so the compiled code is unchanged;
// under the SIMT emulator (simt.h defines MGG_SIMT) it feeds simt::global_load, which assembles
// the warp's instruction and counts its requests, 32-byte sectors, active lanes and bytes
// (tests/kernels/test_emulator_counters.py, bench counters).
#pragma once

#ifdef MGG_SIMT
#define MGG_GLOBAL_LOAD(ptr, active) ::simt::global_load((ptr), sizeof(*(ptr)), (active))
#else
#define MGG_GLOBAL_LOAD(ptr, active) static_cast<void>(0)
#endif
