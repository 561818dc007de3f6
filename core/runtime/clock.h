// A monotonic clock cheap enough for the message path.
//
// absl::Now() takes a lock to read the wall clock, which shows up when two ranks time
// every message; steady_clock is a vDSO read. Use this for durations, never for dates.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace tally {

inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double SecondsSince(int64_t start_nanos) { return (MonotonicNanos() - start_nanos) * 1e-9; }

// The CPU time the calling thread has run (CLOCK_THREAD_CPUTIME_ID): with more threads
// than cores, a thread's wall time minus this is the time it waited for a core (or
// slept). Threads it started (OpenMP's workers) count on their own clocks.
inline int64_t ThreadCpuNanos() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

}  // namespace tally
