#include "core/runtime/comm/transport/threads/completion.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <utility>

namespace tally::comm::threads {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void Completion::Publish(uint32_t state) {
  uint32_t old = word_.exchange(state, std::memory_order_acq_rel);
  // Only pay for the system call when the owner has gone to sleep.
  if (old & kSleeper) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
  }
}

void Completion::Link() { Publish(kLinked); }

void Completion::Complete(absl::Status status) {
  status_ = std::move(status);
  Publish(kDone);
}

void Completion::SleepWhile(State seen, absl::Duration timeout) {
  uint32_t expected = uint32_t(seen) | kSleeper;
  uint32_t current = word_.load(std::memory_order_acquire);
  if ((current & kStateMask) != seen) return;
  if (!(current & kSleeper) &&
      !word_.compare_exchange_strong(current, expected, std::memory_order_acq_rel)) {
    return;  // the state moved on while we were getting ready to sleep
  }
  timespec ts = absl::ToTimespec(timeout);
  // Sleeps only while the word still reads `expected`: a Publish() in between makes the
  // call return at once, so no wake-up is lost.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, expected, &ts,
          nullptr, 0);
}

}  // namespace tally::comm::threads
