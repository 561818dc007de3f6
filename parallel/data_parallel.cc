#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "optim/schedule.h"
#include "runtime/comm/ledger/exact_traffic.h"

#include "runtime/status_macros.h"

namespace tally::parallel {

std::vector<comm::Chunk> GradientBuckets(int64_t total, int64_t bucket_elements) {
  const comm::Chunk whole{0, total};
  return GradientBuckets(std::span<const comm::Chunk>(&whole, 1), bucket_elements);
}

std::vector<comm::Chunk> GradientBuckets(std::span<const comm::Chunk> ranges,
                                         int64_t bucket_elements) {
  std::vector<comm::Chunk> buckets;
  int64_t size = std::max<int64_t>(1, bucket_elements);
  for (auto range = ranges.rbegin(); range != ranges.rend(); ++range) {
    for (int64_t end = range->end(); end > range->offset; end -= size) {
      int64_t begin = std::max<int64_t>(range->offset, end - size);
      buckets.push_back({begin, end - begin});
    }
  }
  return buckets;
}

std::vector<comm::Chunk> ExpertRanges(const model::ParameterLayout& layout, bool experts) {
  std::vector<comm::Chunk> ranges;
  for (const model::ParamSpec& spec : layout.specs()) {
    if (spec.expert != experts || spec.numel == 0) continue;
    if (!ranges.empty() && ranges.back().end() == spec.offset) {
      ranges.back().count += spec.numel;
    } else {
      ranges.push_back({spec.offset, spec.numel});
    }
  }
  return ranges;
}

absl::StatusOr<double> GlobalGradientNorm(Kernels& k, const Tensor& grads,
                                          const std::vector<model::TensorRange>& ranges,
                                          comm::Communicator* shards, const TensorParallel& tp,
                                          comm::Algorithm algorithm, comm::Communicator* stages,
                                          comm::Communicator* experts) {
  std::vector<optim::Segment> counted, expert;
  for (const model::TensorRange& r : ranges) {
    if ((r.spec->replicated() && tp.rank() != 0) || r.spec->tied_copy) continue;
    (experts != nullptr && r.spec->expert ? expert : counted).push_back({r.begin, r.end});
  }
  ASSIGN_OR_RETURN(double squares,
                   optim::SquaredNorm(k, grads.raw_data(), grads.dtype(), counted));
  if (experts != nullptr) {  // each rank's experts are its own: their squares over the group
    ASSIGN_OR_RETURN(double expert_squares,
                     optim::SquaredNorm(k, grads.raw_data(), grads.dtype(), expert));
    comm::PhaseScope phase(experts->ledger(), comm::Phase::kOptimizer);
    comm::LabelScope label(experts->ledger(), "grad_norm");
    ASSIGN_OR_RETURN(expert_squares, experts->AllReduceValue(expert_squares, DType::kF64,
                                                             comm::ReduceOp::kSum, algorithm));
    squares += expert_squares;
  }
  for (comm::Communicator* group : {shards, tp.group(), stages}) {
    if (group == nullptr) continue;
    comm::PhaseScope phase(group->ledger(), comm::Phase::kOptimizer);
    comm::LabelScope label(group->ledger(), "grad_norm");
    ASSIGN_OR_RETURN(squares, group->AllReduceValue(squares, DType::kF64, comm::ReduceOp::kSum, algorithm));
  }
  return std::sqrt(squares);
}

int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm, DType comm_type,
                                 std::span<const int> nodes) {
  const comm::Chunk whole{0, params};
  return GradientSyncBytesPerStep(std::span<const comm::Chunk>(&whole, 1), dp, dp_rank,
                                  bucket_bytes, algorithm, comm_type, nodes);
}

int64_t GradientSyncBytesPerStep(std::span<const comm::Chunk> ranges, int dp, int dp_rank,
                                 int64_t bucket_bytes, comm::Algorithm algorithm, DType comm_type,
                                 std::span<const int> nodes) {
  const int64_t element = int64_t(SizeOf(comm_type));
  int64_t sent = 0;
  for (const comm::Chunk& bucket : GradientBuckets(ranges, bucket_bytes / element)) {
    sent += comm::ExactTraffic(comm::Primitive::kAllReduce, algorithm, dp, dp_rank, -1,
                               bucket.count, element, nodes).sent;
  }
  return sent;
}

absl::StatusOr<double> ClipAndStep(Kernels& k, optim::Optimizer& optimizer, float* params,
                                   Tensor& grads, const std::vector<model::TensorRange>& ranges,
                                   const std::vector<optim::Segment>& segments, float lr, float clip,
                                   const GradientGroups& groups) {
  RETURN_IF_ERROR(SumPerTokenGradients(*groups.tp, grads, ranges));
  ASSIGN_OR_RETURN(double norm, GlobalGradientNorm(k, grads, ranges, groups.shards, *groups.tp,
                                                   groups.algorithm, groups.stages, groups.experts));
  // Clipped as the optimizer reads them (torch scales the gradients in place first: the
  // same values, without that pass).
  const float scale = clip > 0 ? optim::ClipScale(norm, clip) : 1.0f;
  RETURN_IF_ERROR(optimizer.Step(params, grads.raw_data(), grads.dtype(), lr, segments, scale));
  return norm;
}

GradientSync::GradientSync(comm::Communicator* dp, int64_t total, int64_t bucket_bytes,
                           comm::Algorithm algorithm, DType comm_type, bool overlap)
    : GradientSync(dp, std::vector<comm::Chunk>{{0, total}}, bucket_bytes, algorithm, comm_type,
                   overlap) {}

GradientSync::GradientSync(comm::Communicator* dp, const std::vector<comm::Chunk>& ranges,
                           int64_t bucket_bytes, comm::Algorithm algorithm, DType comm_type,
                           bool overlap)
    : dp_(dp),
      algorithm_(algorithm),
      sent_as_(comm_type),
      buckets_(GradientBuckets(ranges, bucket_bytes / int64_t(SizeOf(comm_type)))),
      overlap_(overlap) {}

absl::Status GradientSync::ReduceBucketsFrom(const Tensor& grads, int64_t ready_from) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].offset >= ready_from) {
    const comm::Chunk& bucket = buckets_[next_bucket_++];
    Tensor view = grads.Flat(bucket.offset, bucket.end());
    if (overlap_) {
      ASSIGN_OR_RETURN(SentAs::Pending pending,
                       sent_as_.IAllReduce(*dp_, view, comm::ReduceOp::kSum, algorithm_));
      in_flight_.push_back(std::move(pending));
    } else {
      RETURN_IF_ERROR(sent_as_.AllReduce(*dp_, view, comm::ReduceOp::kSum, algorithm_));
    }
  }
  return absl::OkStatus();
}

absl::Status GradientSync::Ready(const Tensor& grads, int64_t begin, int64_t /*end*/) {
  // Backward reports ranges from the end of the buffer down, so everything from `begin`
  // to the end is final now.
  return ReduceBucketsFrom(grads, begin);
}

absl::Status GradientSync::Finish(const Tensor& grads) {
  absl::Status status = ReduceBucketsFrom(grads, 0);
  for (SentAs::Pending& pending : in_flight_) status.Update(pending.Wait());
  in_flight_.clear();
  return status;
}

}  // namespace tally::parallel
