// An MPI group as the transport sees it (mpi_transport.cc): its communicator, its ranks,
// and what error messages name; and MPI's own collectives over it (collectives.cc).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/runtime/comm/transport/transport.h"

namespace tally::comm::mpi {

// "MPI_Send failed: <MPI's words>"; Check makes it a Status (OK for MPI_SUCCESS).
std::string MpiError(const char* call, int code);
absl::Status Check(const char* call, int code);

// A group: its MPI communicator and what error messages name.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;
  int rank = 0;
  std::vector<int> world_ranks;  // by group rank
  absl::Duration timeout;

  ~Group() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_WORLD && comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }
  int size() const { return int(world_ranks.size()); }
  std::string Where(const OpSignature& signature) const {
    return absl::StrCat("[", Title(signature.primitive), " on '", name, "'] rank ", rank);
  }
};

// The collective `signature` names, by MPI's own routine on the group's communicator
// (MPI_Allreduce, MPI_Reduce_scatter, MPI_Allgatherv, ...): chunks as ChunkOf cuts
// them, an average as a sum divided afterwards (as the ring does).
absl::Status NativeCollective(const Group& group, const OpSignature& signature, const void* input,
                              void* output);

}  // namespace tally::comm::mpi
