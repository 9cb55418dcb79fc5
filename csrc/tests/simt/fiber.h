// User-space fibers for the SIMT emulator: one stack per emulated CUDA thread and a context
// switch of the callee-saved registers (x86-64 System V), annotated for AddressSanitizer so
// that it follows each stack. The fibers of a launch run on the OS thread that launched it.
#pragma once
#include <cstddef>

namespace simt {

void fiber_main();

class Fiber {
 public:
  Fiber() = default;
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  ~Fiber();
  // Prepares the fiber to run entry() on its own stack at the next resume().
  void start(void (*entry)());
  // From the scheduler: runs the fiber until it yields or finishes.
  void resume();
  // From inside the fiber: back to the scheduler; returns at the next resume().
  void yield();
  // From inside the fiber, as its last act: back to the scheduler for good.
  [[noreturn]] void finish();
  // Whether `p` lies on this fiber's stack (the stall watchdog: is the interrupted code a lane's?).
  bool on_stack(const void* p) const;

 private:
  void* sp_ = nullptr;
  char* stack_ = nullptr;
  void* fake_stack_ = nullptr;  // AddressSanitizer's state of this fiber while switched out
  void (*entry_)() = nullptr;
  friend void fiber_main();
};

// The fiber resume() last switched to: the one running unless the scheduler runs.
Fiber* last_resumed();

}  // namespace simt
