// Launching one rank per MPI process (mpi_launch.h): MPI's start and end, what the
// launcher's environment says, and the rank's run.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/comm/transport/mpi/mpi_transport.h"
#include "core/runtime/comm/transport/poller.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::mpi {
namespace {

absl::Status Initialize() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::OkStatus();
  int provided = 0;
  // One thread per process calls MPI: the rank's (OpenBLAS's threads never do).
  RETURN_IF_ERROR(CheckMpi("MPI_Init_thread",
                           MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided)));
  // Errors come back as codes, to become a Status that names the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  return absl::OkStatus();
}

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

}  // namespace

bool Available() { return true; }

bool LaunchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

int ProcessRank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return EnvInt(name, 0);
  }
  return 0;
}

int ProcessCount() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return std::max(1, EnvInt(name, 1));
  }
  return 1;
}

int LocalProcesses() { return std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1)); }

int LocalRank() { return std::max(0, EnvInt("OMPI_COMM_WORLD_LOCAL_RANK", 0)); }

absl::StatusOr<int> MaxOverProcesses(int mine, absl::Duration timeout) {
  int in = mine, out = 0;
  MPI_Request request;
  RETURN_IF_ERROR(CheckMpi("MPI_Iallreduce", MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX,
                                                            MPI_COMM_WORLD, &request)));
  Poller poller(timeout);
  for (int done = 0;;) {
    RETURN_IF_ERROR(CheckMpi("MPI_Test", MPI_Test(&request, &done, MPI_STATUS_IGNORE)));
    if (done) return out;
    if (!poller.Next()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "[launch] deadline exceeded: another process did not reach the step boundary within ",
          absl::FormatDuration(timeout)));
    }
  }
}

// The machines the processes run on: ranks that share memory (MPI_COMM_TYPE_SHARED)
// share a node, named after its lowest world rank.
absl::StatusOr<std::shared_ptr<const Nodes>> RealNodes(int rank, int size) {
  MPI_Comm local;
  RETURN_IF_ERROR(CheckMpi("MPI_Comm_split_type",
                           MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                                               MPI_INFO_NULL, &local)));
  int lowest = rank;
  absl::Status status = CheckMpi("MPI_Allreduce", MPI_Allreduce(&rank, &lowest, 1, MPI_INT,
                                                                MPI_MIN, local));
  MPI_Comm_free(&local);
  RETURN_IF_ERROR(status);
  std::vector<int> node_of(size);
  RETURN_IF_ERROR(CheckMpi("MPI_Allgather", MPI_Allgather(&lowest, 1, MPI_INT, node_of.data(), 1,
                                                          MPI_INT, MPI_COMM_WORLD)));
  return std::make_shared<const Nodes>(std::move(node_of));
}

absl::Status RunMpiRank(const LaunchOptions& options, const RankFunction& fn) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("[launch] the wait timeout must be positive");
  }
  RETURN_IF_ERROR(Initialize());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (options.world_size != size) {
    if (rank != 0) return absl::InvalidArgumentError("");  // rank 0 says it
    return absl::InvalidArgumentError(
        absl::StrCat("[launch] ", LaunchedByMpirun() ? "mpirun started " : "without mpirun, ", size,
                     " processes; the run needs ", options.world_size,
                     " (one per rank: mpirun -np ", options.world_size, " ...)"));
  }
  CommOptions comm = options.comm;
  if (comm.nodes == nullptr) {  // the real nodes, unless the caller placed the ranks
    ASSIGN_OR_RETURN(comm.nodes, RealNodes(rank, size));
  }
  absl::Status status;
  {
    RankResources resources(rank);
    absl::StatusOr<std::unique_ptr<Transport>> transport =
        MakeWorldTransport(options, WorldTransport(options.timeout), LocalRank());
    status = transport.status();
    if (status.ok()) {
      Communicator world(*std::move(transport), &resources, comm);
      status = CallRank(fn, world);
    }
  }
  if (absl::IsCancelled(status)) return rank == 0 ? status : absl::CancelledError("");
  if (!status.ok()) {
    // The other ranks may be waiting for this one: end the whole job.
    std::fprintf(stderr, "rank %d failed: %s\n", rank, std::string(status.message()).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return absl::OkStatus();
}

}  // namespace tally::comm::mpi
