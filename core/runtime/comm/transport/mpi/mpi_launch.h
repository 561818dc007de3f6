// Launching ranks as MPI processes: one rank per process, started by mpirun, over the MPI
// transport (mpi_transport.cc). The collective algorithms, the ledger and everything
// above them are the very ones the threads transport runs, so a run books the same bytes
// and adds in the same order on either.
//
//   // every process of `mpirun -np 4 prog`:
//   LaunchOptions options;
//   options.world_size = 4;  // must equal the process count
//   absl::Status s = mpi::RunMpiRank(options, [](Communicator& world) -> absl::Status {
//     ...
//   });
//
// Underneath: MPI_Isend / MPI_Irecv (each message preceded by a small header with the
// call's OpSignature, which the receiver compares with its own), MPI_Test until done or
// the deadline, one MPI communicator per group (MPI_Comm_create_group, so only the
// members of a group take part in making it). With CommOptions::native_collectives the
// collectives call MPI's own (MPI_Allreduce, ...) instead, and the ledger books the
// ring's bytes for them.
//
// Faults: a rank whose function fails, or throws, or waits past the deadline prints
// "rank N failed: ..." on stderr and calls MPI_Abort, which ends every process of the
// job; a process that dies is reported by mpirun, which then ends the others.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/runtime/comm/launch.h"

namespace tally::comm::mpi {

// Whether this build has the MPI transport.
bool Available();

// Whether this process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK).
bool LaunchedByMpirun();

// This process's rank in the job as the launcher's environment tells it (0 if none),
// known before MPI starts.
int ProcessRank();

// The processes of the job as the launcher's environment tells it (1 if none).
int ProcessCount();

// A run on threads in each of several processes mpirun started would be that many copies
// of one job, their output interleaved: refused. Rank 0 gets the message (`who` names
// the program), the others an empty error (rank 0 says it); OK when not so launched.
inline absl::Status RefuseThreadsUnderMpirun(const std::string& who) {
  if (!LaunchedByMpirun() || ProcessCount() <= 1) return absl::OkStatus();
  if (ProcessRank() != 0) return absl::InvalidArgumentError("");
  return absl::InvalidArgumentError(
      who + " mpirun started " + std::to_string(ProcessCount()) +
      " processes, and --backend=threads would run the whole job in each: give --backend=mpi "
      "(a rank a process), or run without mpirun");
}

// The processes of this job on this machine (OMPI_COMM_WORLD_LOCAL_SIZE; 1 if unknown).
int LocalProcesses();

// This process's place among the job's processes on this machine
// (OMPI_COMM_WORLD_LOCAL_RANK; 0 if unknown): its GPU under --backend=nccl.
int LocalRank();

// The largest of every process's `mine`: a max all-reduce over MPI_COMM_WORLD, a control
// message outside every group and ledger (the processes agree on the signal that stops
// a run). Every process must call it the same number of times; one that does not within
// `timeout` makes it an error.
absl::StatusOr<int> MaxOverProcesses(int mine, absl::Duration timeout);

// Runs `fn` as this process's rank of the job. Initialises MPI on first use (and
// finalises it at exit). A world size that is not the process count is an error on
// every rank; it is reported by rank 0 alone (the others return a status with an empty
// message, which RunExample does not print). A rank that fails does not return: it
// prints its error and aborts the job; one that returns kCancelled (a run stopped by a
// signal, at a step every rank agreed on) returns it, rank 0 with its message.
absl::Status RunMpiRank(const LaunchOptions& options, const RankFunction& fn);

}  // namespace tally::comm::mpi
