// The MPI transport behind mpi_launch.h: a Transport over MPI_COMM_WORLD for this
// process's rank (its groups are MPI communicators made by Split). MPI must have been
// started (mpi_launch.cc does).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/runtime/comm/transport/transport.h"

namespace tally::comm::mpi {

// This process's rank of MPI_COMM_WORLD; every wait gives up after `timeout`.
std::unique_ptr<Transport> WorldTransport(absl::Duration timeout);

// An MPI return code as a Status naming the call ("MPI_Init_thread failed: ...").
absl::Status CheckMpi(const char* call, int code);

}  // namespace tally::comm::mpi
