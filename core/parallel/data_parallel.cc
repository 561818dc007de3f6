#include "core/parallel/data_parallel.h"

#include <algorithm>
#include "core/runtime/comm/ledger/exact_traffic.h"

#include "core/runtime/status_macros.h"

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

int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm, DType comm_type,
                                 std::span<const int> nodes) {
  const comm::Chunk whole{0, params};
  return GradientSyncBytesPerStep(std::span<const comm::Chunk>(&whole, 1), dp, dp_rank,
                                  bucket_bytes, algorithm, comm_type, nodes);
}

comm::ExpectedCalls GradientSyncCalls(std::span<const comm::Chunk> ranges,
                                      const GradientSyncShape& s) {
  comm::ExpectedCalls calls;
  for (const comm::Chunk& bucket : GradientBuckets(ranges, s.bucket_bytes / s.element)) {
    calls.push_back({.group = s.group,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = comm::Phase::kBackward,
                     .count = bucket.count,
                     .element = s.element,
                     .ranks = s.ranks,
                     .rank = s.rank,
                     .nodes = s.nodes});
  }
  return calls;
}

int64_t GradientSyncBytesPerStep(std::span<const comm::Chunk> ranges, int dp, int dp_rank,
                                 int64_t bucket_bytes, comm::Algorithm algorithm, DType comm_type,
                                 std::span<const int> nodes) {
  return comm::TotalSent(
      GradientSyncCalls(ranges, {.ranks = dp,
                                 .rank = dp_rank,
                                 .nodes = std::vector<int>(nodes.begin(), nodes.end()),
                                 .bucket_bytes = bucket_bytes,
                                 .element = int64_t(SizeOf(comm_type))}),
      algorithm);
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
      ASSIGN_OR_RETURN(SentAs::Work pending,
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
  for (SentAs::Work& pending : in_flight_) status.Update(pending.Wait());
  in_flight_.clear();
  return status;
}

absl::StatusOr<std::unique_ptr<ReplicaWeights>> ReplicaWeights::Create(
    const ReplicaConfig& config, const model::ParameterLayout& layout, uint64_t seed,
    Allocator& alloc, MakeOptimizer make_optimizer) {
  std::unique_ptr<ReplicaWeights> w(new ReplicaWeights(config, layout));
  w->make_optimizer_ = std::move(make_optimizer);
  ASSIGN_OR_RETURN(w->replica_, model::Replica::Create(layout, seed, alloc, config.precision));
  ASSIGN_OR_RETURN(w->kernels_, Kernels::Create(alloc.device()));
  ASSIGN_OR_RETURN(w->optimizer_, w->make_optimizer_(layout.total(), alloc));
  if (config.hook != nullptr && config.dp != nullptr) {
    ASSIGN_OR_RETURN(w->hook_, config.hook(w->layout_, w->optimizer_, alloc));
  }
  w->ranges_ = model::TensorRanges(w->layout_);  // pointing into the kept layout
  w->segments_ = model::OptimizerSegments(w->ranges_);
  if (config.dp == nullptr) return w;
  auto sync = [&](comm::Communicator* group, std::vector<comm::Chunk> ranges) {
    return std::make_unique<GradientSync>(group, ranges, config.bucket_bytes, config.algorithm,
                                          config.grad_comm, config.overlap);
  };
  if (config.ep == nullptr) {
    w->sync_ = sync(config.dp, {{0, layout.total()}});
    return w;
  }
  w->sync_ = sync(config.dp, ExpertRanges(layout, /*experts=*/false));
  if (config.edp != nullptr) w->expert_sync_ = sync(config.edp, ExpertRanges(layout, true));
  return w;
}

absl::Status ReplicaWeights::ZeroGrad() {
  last_backward_ = false;
  for (GradientSync* sync : {sync_.get(), expert_sync_.get()}) {
    if (sync != nullptr) sync->BeginStep();
  }
  return replica_->ZeroGrad();
}

absl::Status ReplicaWeights::CloseGrads(int unit) {
  RETURN_IF_ERROR(replica_->CloseGrads(unit));
  closed_ = unit;
  return absl::OkStatus();
}

absl::Status ReplicaWeights::ReleaseParams(int unit) {
  RETURN_IF_ERROR(replica_->ReleaseParams(unit));
  if (unit != closed_) return absl::OkStatus();  // a forward's, or a backward's before its end
  closed_ = -1;
  if (!last_backward_ || Hooked()) return absl::OkStatus();
  // Backward finishes units from the end of the buffer down, so everything from the
  // unit's first element to the end is final now.
  const model::ParamUnit& u = layout_.units()[size_t(unit)];
  for (GradientSync* sync : {sync_.get(), expert_sync_.get()}) {
    if (sync != nullptr) RETURN_IF_ERROR(sync->Ready(grads(), u.begin, u.end));
  }
  return absl::OkStatus();
}

absl::Status ReplicaWeights::EndBackward() {
  error_sums_ = ErrorSums();
  if (Hooked()) return hook_->Reduce(grads());
  for (GradientSync* sync : {sync_.get(), expert_sync_.get()}) {
    if (sync != nullptr) RETURN_IF_ERROR(sync->Finish(grads()));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ReplicaWeights::Step(float lr, float clip) {
  const GradientGroups groups{.tp = &config_.tp, .stages = config_.stages, .experts = config_.ep};
  ASSIGN_OR_RETURN(double norm, ClipAndStep(*kernels_, *optimizer_, params().data<float>(),
                                            grads(), ranges_, segments_, lr, clip, groups));
  RETURN_IF_ERROR(replica_->Publish());  // the bf16 copy of the updated master weights
  if (hook_ != nullptr) error_sums_ = hook_->error_sums();
  return norm;
}

absl::StatusOr<TrainableWeights::Part> ReplicaWeights::GatherPart(bool with_optimizer) {
  Part part;
  if (!config_.checkpointed) return part;
  part.params = params();
  if (with_optimizer) part.optimizer = optimizer_.get();
  if (part.params.device().type == DeviceType::kCPU) return part;
  // A GPU's state, to the host.
  Allocator unaccounted(nullptr);
  ASSIGN_OR_RETURN(part.params, Tensor::Empty({part.params.numel()}, DType::kF32, unaccounted));
  RETURN_IF_ERROR(part.params.CopyFrom(params()));
  if (!with_optimizer) return part;
  ASSIGN_OR_RETURN(part.gathered, make_optimizer_(part.params.numel(), unaccounted));
  RETURN_IF_ERROR(optim::CopyState(*optimizer_, *part.gathered));
  part.optimizer = part.gathered.get();
  return part;
}

absl::Status ReplicaWeights::Load(const float* params, optim::Optimizer* optimizer) {
  RETURN_IF_ERROR(this->params().CopyFromHost(params));
  RETURN_IF_ERROR(replica_->Publish());
  return optimizer != nullptr ? optim::CopyState(*optimizer, *optimizer_) : absl::OkStatus();
}

}  // namespace tally::parallel
