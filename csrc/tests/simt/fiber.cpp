// The context switch of simt::Fiber (fiber.h).
#include "fiber.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the SIMT emulator's context switch is written for x86-64"
#endif

// simt_switch(save, load): pushes the callee-saved registers, stores the stack pointer in
// *save, loads `load` as the stack pointer, pops that context's registers and returns into it.
extern "C" void simt_switch(void** save, void* load);
asm(R"(
  .text
  .globl simt_switch
  .type simt_switch, @function
simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch, .-simt_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;  // below each stack, inaccessible: an overflow faults

void* scheduler_sp = nullptr;
void* scheduler_fake_stack = nullptr;
const void* scheduler_bottom = nullptr;
size_t scheduler_size = 0;
Fiber* running = nullptr;  // the fiber resume() switched to

}  // namespace

void fiber_main() {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &scheduler_bottom, &scheduler_size);
#endif
  running->entry_();
  std::fprintf(stderr, "simt: a fiber's entry returned\n");
  std::abort();
}

Fiber::~Fiber() {
  if (stack_) munmap(stack_ - kGuardBytes, kStackBytes + kGuardBytes);
}

void Fiber::start(void (*entry)()) {
  if (!stack_) {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED || mprotect(p, kGuardBytes, PROT_NONE) != 0) {
      std::perror("simt: a fiber stack");
      std::abort();
    }
    stack_ = static_cast<char*>(p) + kGuardBytes;
  }
#if SIMT_ASAN
  __asan_unpoison_memory_region(stack_, kStackBytes);  // frames of an abandoned run leave poison
#endif
  auto top = reinterpret_cast<uintptr_t>(stack_ + kStackBytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr;                               // return address of fiber_main: none
  *--slot = reinterpret_cast<void*>(&fiber_main);  // where simt_switch's ret goes
  for (int i = 0; i < 6; ++i) *--slot = nullptr;   // rbp rbx r12 r13 r14 r15
  sp_ = slot;
  fake_stack_ = nullptr;
  entry_ = entry;
}

void Fiber::resume() {
  running = this;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(&scheduler_fake_stack, stack_, kStackBytes);
#endif
  simt_switch(&scheduler_sp, sp_);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
}

void Fiber::yield() {
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(&fake_stack_, scheduler_bottom, scheduler_size);
#endif
  simt_switch(&sp_, scheduler_sp);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_, &scheduler_bottom, &scheduler_size);
#endif
}

bool Fiber::on_stack(const void* p) const {
  const auto* c = static_cast<const char*>(p);
  return stack_ && c >= stack_ && c < stack_ + kStackBytes;
}

Fiber* last_resumed() { return running; }

void Fiber::finish() {
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, scheduler_bottom, scheduler_size);
#endif
  simt_switch(&sp_, scheduler_sp);
  std::abort();
}

}  // namespace simt
