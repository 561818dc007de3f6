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
// waits past `timeout` for a peer that never answers.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"

namespace tally::comm {

struct LaunchOptions {
  int world_size = 1;
  absl::Duration timeout = absl::Seconds(60);  // the longest any single wait may take
  CommOptions comm;
};

using RankFunction = std::function<absl::Status(Communicator& world)>;

absl::Status RunThreadRanks(const LaunchOptions& options, const RankFunction& fn);

// fn(world), with an exception it throws turned into an error (for every launcher).
absl::Status CallRank(const RankFunction& fn, Communicator& world);

}  // namespace tally::comm
