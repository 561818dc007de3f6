#include "core/train/stop.h"

#include <algorithm>

#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/signals.h"

namespace tally::train {

absl::StatusOr<bool> StopAgreement::StopBefore(int64_t k) {
  const int seen = StopSignal();
  if (across_processes_) {
    absl::StatusOr<int> agreed = comm::mpi::MaxOverProcesses(seen, timeout_);
    if (!agreed.ok()) return agreed.status();
    if (*agreed == 0) return false;
    NoteStopSignal(*agreed);  // perhaps another process's
    std::lock_guard<std::mutex> lock(mu_);
    signal_ = *agreed;
    return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (seen != 0 && signal_ == 0) {
    signal_ = seen;
    stop_at_ = std::max(k, furthest_begun_ + 1);
  }
  if (k >= stop_at_) return true;
  furthest_begun_ = std::max(furthest_begun_, k);
  return false;
}

int StopAgreement::signal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signal_;
}

}  // namespace tally::train
