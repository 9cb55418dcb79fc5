// The stall watchdog's hooks in the scheduler (stall.cpp; simt.h says what it catches).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace simt::stall {

// Lanes resumed (and launches begun) so far: the watchdog's sign of progress.
extern std::atomic<uint64_t> resumes;
// Set when the watchdog interrupted the running lane and switched back to the scheduler.
extern std::atomic<bool> fired;

// The launch of `kernel` begins (its lanes run on the calling thread) and ends.
void launch_begins(const void* kernel);
void launch_ends();
inline void resuming() { resumes.fetch_add(1, std::memory_order_relaxed); }

// After `fired`: what the interrupted lane (warp, lane of `kernel`) was doing, for the launch's report;
// clears `fired`.
std::string report(const std::string& kernel, int warp, int lane);

}  // namespace simt::stall
