// Launching ranks: N ranks as N threads of this process, over the threads transport.
//
//   LaunchOptions options;
//   options.world_size = 4;
//   absl::Status s = RunThreadRanks(options, [](Communicator& world) -> absl::Status {
//     ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({1000}, DType::kF32, world.allocator()));
//     return world.AllReduce(x, ReduceOp::kSum);
//   });
//
// A rank that returns an error or throws aborts the run: every other rank's pending wait
// fails with a message naming it, and RunThreadRanks returns the first failure. No rank
// waits past `timeout` for a peer that never answers. Ranks that all return kCancelled
// (stopped together, e.g. by a signal) end the run cleanly: rank 0's status is returned.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/runtime/comm/communicator.h"

namespace tally::comm {

// Makes a rank's world transport from its launcher's own (threads, or MPI), for a
// transport that needs one to start and to check its messages (nccl/nccl_transport.h).
// `local_rank` is the rank's place among the ranks on this machine: its GPU.
using WorldTransportFactory = std::function<absl::StatusOr<std::unique_ptr<Transport>>(
    std::unique_ptr<Transport> launcher, int local_rank, absl::Duration timeout)>;

struct LaunchOptions {
  int world_size = 1;
  absl::Duration timeout = absl::Seconds(60);  // the longest any single wait may take
  CommOptions comm;
  WorldTransportFactory world_transport;  // null: the launcher's own transport
};

using RankFunction = std::function<absl::Status(Communicator& world)>;

absl::Status RunThreadRanks(const LaunchOptions& options, const RankFunction& fn);

// fn(world), with an exception it throws turned into an error (for every launcher).
absl::Status CallRank(const RankFunction& fn, Communicator& world);

// The world transport of a rank: the launcher's own, or what options.world_transport
// makes of it.
absl::StatusOr<std::unique_ptr<Transport>> MakeWorldTransport(const LaunchOptions& options,
                                                              std::unique_ptr<Transport> launcher,
                                                              int local_rank);

}  // namespace tally::comm
