// ZeRO (Rajbhandari et al., 2020) over the data-parallel group: each of the p ranks owns
// one shard of the flat parameter buffer, ChunkOf(Φ, p, rank) (shards need not be equal),
// and keeps the optimizer state of that shard only.
//
// Stage 1, one step:
//   1. backward as usual: every rank accumulates the full gradient of its micro-batches;
//   2. reduce-scatter the gradients: rank r receives the sum of everyone's shard r;
//   3. the global gradient norm from the shards: each rank's Σg² of its shard, all-reduced;
//   4. clip and update the own shard of the parameters with the own optimizer state;
//   5. all-gather the parameters, so every rank holds the whole updated model again.
// Bytes per rank per step (ring; naive goes through rank 0, see naive.h): reduce-scatter (p-1)/p·4Φ + all-gather (p-1)/p·4Φ, the
// same 2(p-1)/p·4Φ as data parallelism, with the optimizer memory cut from 8Φ to 8Φ/p.
//
//   ASSIGN_OR_RETURN(auto zero, ShardedOptimizer::Create(dp, total, segments, make_optimizer,
//                                                         Algorithm::kRing, alloc));
//   ASSIGN_OR_RETURN(double norm, zero->Step(params, grads, lr, grad_clip));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "optim/optimizer.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/partition.h"

namespace tally::parallel {

// The parts of `segments` (buffer coordinates) inside [begin, end), shifted to start at 0.
std::vector<optim::Segment> SegmentsInRange(const std::vector<optim::Segment>& segments,
                                            int64_t begin, int64_t end);

class ShardedOptimizer {
 public:
  using MakeOptimizer =
      std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(int64_t size)>;

  // `segments` cover the whole buffer of `total` elements (which decay).
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      comm::Communicator* dp, int64_t total, const std::vector<optim::Segment>& segments,
      const MakeOptimizer& make_optimizer, comm::Algorithm algorithm, Allocator& alloc);

  // Steps 2-5 above on the full `params` and `grads` (Φ each). Returns the global gradient
  // norm before clipping (clip 0: no clipping).
  absl::StatusOr<double> Step(Tensor& params, const Tensor& grads, float lr, float clip);

  const comm::Chunk& shard() const { return shard_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  ShardedOptimizer(comm::Communicator* dp, comm::Chunk shard, std::vector<optim::Segment> segments,
                   comm::Algorithm algorithm)
      : dp_(dp), shard_(shard), segments_(std::move(segments)), algorithm_(algorithm) {}

  comm::Communicator* dp_;
  comm::Chunk shard_;
  std::vector<optim::Segment> segments_;  // of the shard, from 0
  comm::Algorithm algorithm_;              // of every collective here
  std::unique_ptr<optim::Optimizer> optimizer_;
  Tensor grad_shard_;  // the reduced gradients of the own shard
};

}  // namespace tally::parallel
