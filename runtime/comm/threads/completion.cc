#include "runtime/comm/threads/completion.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <utility>

namespace tally::comm::threads {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

bool Completion::Claim() {
  uint32_t s = state_.load(std::memory_order_acquire);
  while ((s & kStateMask) == kPending) {
    if (state_.compare_exchange_weak(s, (s & kSleeper) | kClaimed, std::memory_order_acq_rel)) {
      return true;
    }
  }
  return false;
}

bool Completion::TryCancel() {
  uint32_t s = state_.load(std::memory_order_acquire);
  while ((s & kStateMask) == kPending) {
    if (state_.compare_exchange_weak(s, (s & kSleeper) | kCancelled, std::memory_order_acq_rel)) {
      return true;
    }
  }
  return false;
}

void Completion::Complete(absl::Status status) {
  status_ = std::move(status);
  uint32_t old = state_.exchange(kDone, std::memory_order_acq_rel);
  // Only pay for the system call when the waiter has gone to sleep.
  if (old & kSleeper) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
  }
}

bool Completion::done() const {
  return (state_.load(std::memory_order_acquire) & kStateMask) == kDone;
}

void Completion::Sleep(uint32_t observed, absl::Duration slice) {
  timespec timeout = absl::ToTimespec(slice);
  // Sleeps only while the word still reads `observed`; a Complete() in between makes the
  // call return at once, so a wake-up cannot be lost.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, observed,
          &timeout, nullptr, 0);
}

absl::Status Completion::Wait(const WaitPolicy& policy,
                              absl::FunctionRef<absl::Status()> give_up) {
  if (policy.spin > absl::ZeroDuration()) {
    absl::Time spin_end = absl::Now() + policy.spin;
    for (int i = 0;; ++i) {
      if (done()) return status_;
      CpuRelax();
      if ((i & 63) == 63 && absl::Now() > spin_end) break;
    }
  }
  bool transfer_under_way = false;  // once claimed, only completion ends the wait
  while (true) {
    uint32_t s = state_.load(std::memory_order_acquire);
    if ((s & kStateMask) == kDone) return status_;
    if (!(s & kSleeper)) {
      if (!state_.compare_exchange_weak(s, s | kSleeper, std::memory_order_acq_rel)) continue;
      s |= kSleeper;
    }
    Sleep(s, policy.slice);
    if (done() || transfer_under_way) continue;
    absl::Status stop = give_up();
    if (!stop.ok()) {
      if (TryCancel()) return stop;
      transfer_under_way = true;
    }
  }
}

void Completion::CancelOrFinish() {
  if (TryCancel()) return;
  while (!done()) {
    uint32_t s = state_.load(std::memory_order_acquire);
    if ((s & kStateMask) == kDone) break;
    if (!(s & kSleeper) &&
        !state_.compare_exchange_weak(s, s | kSleeper, std::memory_order_acq_rel)) {
      continue;
    }
    Sleep(s | kSleeper, absl::Milliseconds(20));
  }
}

}  // namespace tally::comm::threads
