// What the tests of the MPI and NCCL transports compare with: one collective call with
// closed-form data (collective_check.h), and the bytes the same call books on the
// threads transport, peer by peer (the algorithms are the same code, so a transport
// that books other bytes moved other messages).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "absl/status/statusor.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::test_util {

inline bool Rooted(Primitive p) {
  return p == Primitive::kBroadcast || p == Primitive::kReduce || p == Primitive::kGather ||
         p == Primitive::kScatter;
}

// (sent, received) bytes by peer world rank.
inline std::map<int, std::pair<int64_t, int64_t>> BytesByPeer(const TrafficLedger& ledger) {
  std::map<int, std::pair<int64_t, int64_t>> bytes;
  for (const auto& [key_peer, t] : ledger.transfers()) {
    bytes[key_peer.second].first += t.bytes_sent;
    bytes[key_peer.second].second += t.bytes_recv;
  }
  return bytes;
}

// One call with closed-form data in host memory on `comm`; the count of wrong output
// elements.
inline absl::StatusOr<int64_t> CheckedCall(Communicator& comm, Primitive p, Algorithm a,
                                           int64_t count, int root) {
  ASSIGN_OR_RETURN(CallBuffers b, MakeCallBuffers(comm, p, count, root));
  FillInputs(comm, p, b, count, root);
  RETURN_IF_ERROR(Call(comm, p, a, b, count, root));
  return CountWrong(comm, p, b, count, root);
}

// Rank `rank`'s ledger after the same call on `n` ranks of the threads transport.
inline absl::StatusOr<TrafficLedger> LedgerOnThreads(int n, int rank, Primitive p, Algorithm a,
                                                     int64_t count, int root,
                                                     const CommOptions& comm_options) {
  TrafficLedger ledger;
  LaunchOptions launch;
  launch.world_size = n;
  launch.comm = comm_options;
  RETURN_IF_ERROR(RunThreadRanks(launch, [&](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(int64_t wrong, CheckedCall(comm, p, a, count, root));
    if (wrong != 0) return absl::InternalError("the threads transport got a wrong result");
    if (comm.rank() == rank) ledger = comm.ledger();
    return absl::OkStatus();
  }));
  return ledger;
}

}  // namespace tally::comm::test_util
