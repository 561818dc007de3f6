#include "train/stop.h"

#include <algorithm>
#include <csignal>

#include "runtime/comm/mpi/mpi_launch.h"
#include "runtime/signals.h"

namespace tally::train {

absl::StatusOr<bool> StopAgreement::StopBefore(int64_t k) {
  const int seen = StopSignal();
  if (across_processes_) {
    absl::StatusOr<bool> any = comm::mpi::AnyProcess(seen != 0, timeout_);
    if (!any.ok()) return any.status();
    const bool stop = *any;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop && signal_ == 0) signal_ = seen != 0 ? seen : SIGTERM;  // another process's
    return stop;
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
