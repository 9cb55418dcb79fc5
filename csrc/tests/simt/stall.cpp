// The stall watchdog (simt.h). A lane in a loop that makes no call into the emulator never returns
// to the scheduler: the launching thread spins in the kernel's code, out of the step budget's sight.
// A monitor thread beside the launches sees no lane resumed while that thread spends stall_seconds
// of CPU time (CPU time: a busy machine never trips it), and interrupts it with a signal. The handler,
// on the stalled lane's stack, notes the interrupted instruction and switches back to the scheduler,
// which stops the launch with a report (the lane's frames are abandoned, as fail() abandons them).
// Interrupted outside a lane (a hang in the emulator itself), it writes what it knows and ends the
// process.
#include "stall.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "fiber.h"
#include "simt.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIMT_SYMBOLIZE 1  // file:line of an address, from the sanitizer runtime's symbolizer
#else
#define SIMT_SYMBOLIZE 0
#endif

namespace simt {
namespace stall {

std::atomic<uint64_t> resumes{0};
std::atomic<bool> fired{false};

}  // namespace stall

namespace {

constexpr int kSignal = SIGUSR2;
constexpr int kOutsideExit = 70;  // the process's status when the stall is outside every lane

std::atomic<double> limit_seconds{kStallSeconds};

struct Watch {  // the launch that runs, as the monitor sees it (guarded by m)
  std::mutex m;
  bool monitoring = false;
  bool launching = false;
  pthread_t thread{};
  clockid_t clock{};
  const void* kernel = nullptr;
};

Watch& watch() {
  static Watch* w = new Watch;  // never destroyed: the monitor may outlive static destructors
  return *w;
}

// Set by the monitor before it signals; read by the handler.
std::atomic<bool> armed{false};
std::atomic<uint64_t> armed_at{0};  // stall::resumes when the stall was seen
std::atomic<uintptr_t> interrupted_pc{0};
std::atomic<double> stalled_seconds{0};
char outside_message[1024];
size_t outside_length = 0;
struct sigaction previous{};

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void on_signal(int, siginfo_t*, void* context) {
  sigaction(kSignal, &previous, nullptr);                                          // the process's disposition back
  if (!armed.exchange(false) || stall::resumes.load() != armed_at.load()) return;  // a lane ran meanwhile
  int here = 0;
  Fiber* lane = last_resumed();
  if (lane == nullptr || !lane->on_stack(&here)) {
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, outside_message, outside_length);
    _exit(kOutsideExit);
  }
  interrupted_pc.store(static_cast<uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]));
  stall::fired.store(true, std::memory_order_release);
  lane->yield();  // never resumed: the launch is abandoned
  std::abort();
}

// Signals the launching thread of `w` (the monitor holds w.m).
void interrupt(Watch& w, uint64_t at, double seconds) {
  std::snprintf(outside_message, sizeof outside_message,
                "simt: watchdog: a launch of %s ran %.1f s of CPU time with no lane resumed, outside every lane "
                "(a hang in the emulator itself); the process ends\n",
                kernel_name(w.kernel).c_str(), seconds);
  outside_length = std::strlen(outside_message);
  stalled_seconds.store(seconds);
  armed_at.store(at);
  struct sigaction sa{};
  sa.sa_sigaction = &on_signal;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;  // NODEFER: the handler never returns, so the mask must not change
  sigemptyset(&sa.sa_mask);
  sigaction(kSignal, &sa, &previous);
  armed.store(true);
  pthread_kill(w.thread, kSignal);
}

void monitor() {
  Watch& w = watch();
  uint64_t seen = ~uint64_t{0};
  double since = 0;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::lock_guard<std::mutex> lock(w.m);
    if (!w.launching || armed.load()) {
      seen = ~uint64_t{0};
      continue;
    }
    const uint64_t n = stall::resumes.load();
    const double cpu = cpu_seconds(w.clock);
    if (n != seen) {
      seen = n;
      since = cpu;
    } else if (cpu - since >= limit_seconds.load()) {
      interrupt(w, n, cpu - since);
      seen = ~uint64_t{0};
    }
  }
}

void forked_child() {  // only the forking thread lives on: no monitor, and w.m may be held by the dead one
  Watch& w = watch();
  new (&w.m) std::mutex;
  w.monitoring = w.launching = false;
}

// "FUNCTION at FILE:LINE" of a code address (FILE:LINE where a symbolizer is linked in).
std::string code_at(uintptr_t pc) {
  std::string s = kernel_name(reinterpret_cast<const void*>(pc));
#if SIMT_SYMBOLIZE
  char where[1024] = {};
  __sanitizer_symbolize_pc(reinterpret_cast<void*>(pc), "%s:%l", where, sizeof where);
  if (where[0] != '\0' && std::strncmp(where, "<null>", 6) != 0) s += std::string(" at ") + where;
#endif
  return s;
}

}  // namespace

void set_stall_seconds(double seconds) { limit_seconds.store(seconds); }

namespace stall {

void launch_begins(const void* kernel) {
  Watch& w = watch();
  const std::lock_guard<std::mutex> lock(w.m);
  if (!w.monitoring) {
    static const int registered = pthread_atfork(nullptr, nullptr, &forked_child);
    (void)registered;
    std::thread(&monitor).detach();
    w.monitoring = true;
  }
  w.launching = true;
  w.thread = pthread_self();
  pthread_getcpuclockid(w.thread, &w.clock);
  w.kernel = kernel;
  resumes.fetch_add(1);  // a new launch, on a new clock: the monitor starts counting again
}

void launch_ends() {
  Watch& w = watch();
  const std::lock_guard<std::mutex> lock(w.m);
  w.launching = false;
}

std::string report(const std::string& kernel, int warp, int lane) {
  fired.store(false);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", stalled_seconds.load());
  return "watchdog: lane " + std::to_string(lane) + " of warp " + std::to_string(warp) + " of " + kernel + " ran " +
         seconds +
         " s of CPU time without a call into the emulator (a loop with no warp or block call, memory site, copy or "
         "get that never ends), interrupted in " +
         code_at(interrupted_pc.load());
}

}  // namespace stall
}  // namespace simt
