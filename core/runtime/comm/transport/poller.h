// Waiting on something that can only be polled (MPI_Test, a CUDA event): poll without
// pause at first, then yield the core between polls (ranks may outnumber cores), and
// after a second of waiting (a pipeline bubble, a slow peer) sleep a millisecond between
// polls. The clock is read every 16th poll only: a small message's whole wait is a few
// polls, and reading the clock would cost as much as the polls themselves.
//
//   Poller poller(timeout);
//   while (!Done()) {
//     if (!poller.Next()) return absl::DeadlineExceededError(...);
//   }
#pragma once

#include <sched.h>
#include <unistd.h>

#include <cstdint>

#include "absl/time/time.h"
#include "core/runtime/clock.h"

namespace tally::comm {

class Poller {
 public:
  explicit Poller(absl::Duration timeout) : timeout_(absl::ToInt64Nanoseconds(timeout)) {}

  // Pauses before the next poll; false once the deadline has passed. The wait is timed
  // from the first reading (the 16th poll), so that a wait done sooner reads no clock.
  bool Next() {
    if ((++polls_ & 15) == 0) {
      const int64_t now = MonotonicNanos();
      if (start_ < 0) start_ = now;
      if (now - start_ >= timeout_) return false;
      pause_ = now - start_ > 1'000'000'000 ? Pause::kSleep
               : now - start_ > 50'000      ? Pause::kYield
                                            : Pause::kNone;
    }
    if (pause_ == Pause::kSleep) {
      usleep(1000);
    } else if (pause_ == Pause::kYield) {
      sched_yield();
    }
    return true;
  }

 private:
  enum class Pause { kNone, kYield, kSleep };
  int64_t timeout_;
  int64_t start_ = -1;
  int64_t polls_ = 0;
  Pause pause_ = Pause::kNone;
};

}  // namespace tally::comm
