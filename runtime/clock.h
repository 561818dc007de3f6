// A monotonic clock cheap enough for the message path.
//
// absl::Now() takes a lock to read the wall clock, which shows up when two ranks time
// every message; steady_clock is a vDSO read. Use this for durations, never for dates.
#pragma once

#include <chrono>
#include <cstdint>

namespace tally {

inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double SecondsSince(int64_t start_nanos) { return (MonotonicNanos() - start_nanos) * 1e-9; }

}  // namespace tally
