// Where a run stopped by SIGINT or SIGTERM (core/runtime/signals.h) stops: before a step every
// rank agrees on, so that no rank waits for a peer that has already stopped.
//
//   StopAgreement stop(/*across_processes=*/false, timeout);  // one per process, for its ranks
//   for (int64_t k = first; k < steps; ++k) {
//     ASSIGN_OR_RETURN(bool stop_here, stop.StopBefore(k));   // every rank, every step
//     if (stop_here) break;
//     ...
//   }
//
// Ranks that are threads of one process decide under a lock: the first rank to see the
// signal sets the stop step to one past the furthest step any rank has begun, so every
// step begun is finished by every rank and none is begun after it. Ranks that are
// processes (MPI) agree by a max all-reduce of the signal seen before every step
// (comm::mpi::MaxOverProcesses), which keeps them in step.
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tally::train {

class StopAgreement {
 public:
  // `timeout`: the longest the processes' agreement may wait for the slowest.
  StopAgreement(bool across_processes, absl::Duration timeout)
      : across_processes_(across_processes), timeout_(timeout) {}

  // Whether this rank stops before 0-based step k. Thread-safe.
  absl::StatusOr<bool> StopBefore(int64_t k);
  // The signal that stopped the run (0: none).
  int signal() const;

 private:
  const bool across_processes_;
  const absl::Duration timeout_;
  mutable std::mutex mu_;
  int64_t furthest_begun_ = -1;
  int64_t stop_at_ = std::numeric_limits<int64_t>::max();
  int signal_ = 0;
};

}  // namespace tally::train
