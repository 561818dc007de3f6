// The MPI transport's stand-in for a build without MPI: every entry point says so.
#include "core/runtime/comm/transport/mpi/mpi_launch.h"

namespace tally::comm::mpi {

bool Available() { return false; }

bool LaunchedByMpirun() { return false; }

int ProcessRank() { return 0; }

int ProcessCount() { return 1; }

int LocalProcesses() { return 1; }

int LocalRank() { return 0; }

absl::StatusOr<int> MaxOverProcesses(int mine, absl::Duration) { return mine; }

absl::Status RunMpiRank(const LaunchOptions&, const RankFunction&) {
  return absl::UnimplementedError(
      "[launch] this build has no MPI transport: install libopenmpi-dev and openmpi-bin "
      "(scripts/setup.sh does) and build again");
}

}  // namespace tally::comm::mpi
