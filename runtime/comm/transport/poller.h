// Waiting on something that can only be polled (MPI_Test, a CUDA event): poll without
// pause at first, then yield the core between polls (ranks may outnumber cores), and
// after a second of waiting (a pipeline bubble, a slow peer) sleep a millisecond between
// polls.
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
#include "runtime/clock.h"

namespace tally::comm {

class Poller {
 public:
  explicit Poller(absl::Duration timeout)
      : start_(MonotonicNanos()), deadline_(start_ + absl::ToInt64Nanoseconds(timeout)) {}

  // Pauses before the next poll; false once the deadline has passed.
  bool Next() {
    const int64_t now = MonotonicNanos();
    if (now - start_ > 1'000'000'000) {
      usleep(1000);
    } else if (now - start_ > 50'000) {
      sched_yield();
    }
    return now < deadline_;
  }

 private:
  int64_t start_, deadline_;
};

}  // namespace tally::comm
