#include "parallel/zero.h"

#include <algorithm>
#include <cmath>

#include "optim/schedule.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

std::vector<optim::Segment> SegmentsInRange(const std::vector<optim::Segment>& segments,
                                            int64_t begin, int64_t end) {
  std::vector<optim::Segment> out;
  for (const optim::Segment& s : segments) {
    int64_t lo = std::max(s.begin, begin), hi = std::min(s.end, end);
    if (lo < hi) out.push_back({lo - begin, hi - begin, s.decay});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    comm::Communicator* dp, int64_t total, const std::vector<optim::Segment>& segments,
    const MakeOptimizer& make_optimizer, comm::Algorithm algorithm, Allocator& alloc) {
  comm::Chunk shard = comm::ChunkOf(total, dp->size(), dp->rank());
  std::unique_ptr<ShardedOptimizer> z(new ShardedOptimizer(
      dp, shard, SegmentsInRange(segments, shard.offset, shard.end()), algorithm));
  ASSIGN_OR_RETURN(z->optimizer_, make_optimizer(shard.count));
  ASSIGN_OR_RETURN(z->grad_shard_,
                   Tensor::Empty({shard.count}, DType::kF32, alloc, MemoryCategory::kGrads));
  return z;
}

absl::StatusOr<double> ShardedOptimizer::Step(Tensor& params, const Tensor& grads, float lr,
                                              float clip) {
  comm::TrafficLedger& ledger = dp_->ledger();
  {
    // The gradient sum belongs to backward: DDP and ZeRO alike reduce there.
    comm::PhaseScope phase(ledger, comm::Phase::kBackward);
    RETURN_IF_ERROR(dp_->ReduceScatter(grads, grad_shard_, comm::ReduceOp::kSum, algorithm_));
  }
  comm::PhaseScope phase(ledger, comm::Phase::kOptimizer);
  float* g = grad_shard_.data<float>();
  ASSIGN_OR_RETURN(Tensor squares, Tensor::Empty({1}, DType::kF64, dp_->allocator(),
                                                 MemoryCategory::kComm));
  squares.data<double>()[0] = optim::SquaredNorm(g, shard_.count);
  {
    comm::LabelScope label(ledger, "grad_norm");
    RETURN_IF_ERROR(dp_->AllReduce(squares, comm::ReduceOp::kSum, algorithm_));
  }
  double norm = std::sqrt(squares.data<double>()[0]);
  if (clip > 0) {
    float scale = optim::ClipScale(norm, clip);
    if (scale < 1.0f) optim::Scale(g, shard_.count, scale);
  }
  optimizer_->Step(params.data<float>() + shard_.offset, g, lr, segments_);
  // Every rank's updated shard to every rank: the all-gather's input is the own shard
  // inside the output buffer, so it moves only the other ranks' shards.
  Tensor own = params.Flat(shard_.offset, shard_.end());
  RETURN_IF_ERROR(dp_->AllGather(own, params, algorithm_));
  return norm;
}

}  // namespace tally::parallel
