#include "core/parallel/zero/zero.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/parallel/zero/stages.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::Status PlainReducer::ReduceScatter(comm::Communicator& group, const Tensor& grads,
                                         const Tensor& reduced) {
  return sent_as_.ReduceScatter(group, grads, reduced, comm::ReduceOp::kSum, algorithm_);
}

absl::StatusOr<Posted> PlainReducer::IReduceScatter(comm::Communicator& group,
                                                    const Tensor& grads, const Tensor& reduced) {
  ASSIGN_OR_RETURN(SentAs::Work work,
                   sent_as_.IReduceScatter(group, grads, reduced, comm::ReduceOp::kSum, algorithm_));
  return Posted([work = std::move(work)]() mutable { return work.Wait(); });
}

absl::Status PlainGatherer::Gather(const PieceToGather& piece, std::vector<Posted>* posted) {
  Tensor whole = piece.whole;  // the same values
  if (posted == nullptr) return piece.group->AllGather(piece.mine, whole, algorithm_);
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CollectiveWork> work,
                   piece.group->IAllGather(piece.mine, whole, algorithm_));
  posted->push_back([work = std::move(work)]() { return work->Wait(); });
  return absl::OkStatus();
}

ZeroWeights::ZeroWeights(const ZeroConfig& config, const model::ParameterLayout& layout,
                         MakeOptimizer make_optimizer)
    : config_(config),
      layout_(layout),
      sharding_(ZeroUnits(layout, config.stage, config.experts != nullptr),
                {config.dp->size(), config.dp->rank()},
                config.experts != nullptr ? Sharding::Cut{config.experts->size(), config.experts->rank()}
                                          : Sharding::Cut{config.dp->size(), config.dp->rank()}),
      pieces_of_unit_(PiecesOfUnits(layout, config.stage, config.experts != nullptr)),
      alloc_(config.dp->allocator().ledger(), config.device),
      reducer_(config.reducer != nullptr
                   ? config.reducer
                   : std::make_shared<PlainReducer>(config.precision.grad_comm, config.algorithm)),
      make_optimizer_(std::move(make_optimizer)) {}

absl::StatusOr<std::unique_ptr<ZeroWeights>> ZeroWeights::Create(
    const ZeroConfig& config, const model::ParameterLayout& layout, uint64_t seed,
    MakeOptimizer make_optimizer) {
  std::unique_ptr<ZeroWeights> z;
  switch (config.stage) {
    case 1: z.reset(new Zero1Weights(config, layout, std::move(make_optimizer))); break;
    case 2: z.reset(new Zero2Weights(config, layout, std::move(make_optimizer))); break;
    case 3: z.reset(new Zero3Weights(config, layout, std::move(make_optimizer))); break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("[zero] no ZeRO stage ", config.stage, " (1, 2 or 3)"));
  }
  RETURN_IF_ERROR(z->Init(seed));
  return z;
}

absl::Status ZeroWeights::Init(uint64_t seed) {
  const model::Precision& precision = config_.precision;
  ASSIGN_OR_RETURN(kernels_, Kernels::Create(config_.device));
  const size_t units = layout_.units().size();
  working_params_ = std::make_unique<model::WorkingCopies>(alloc_, *kernels_, units);
  working_grads_ = std::make_unique<model::WorkingCopies>(alloc_, *kernels_, units);
  const int64_t total = layout_.total(), shard = sharding_.size();
  ASSIGN_OR_RETURN(params_, Tensor::Empty({shards_params() ? shard : total}, precision.params,
                                          alloc_, MemoryCategory::kParams));
  int64_t largest = 0;
  for (const Sharding::Piece& p : sharding_.pieces()) largest = std::max(largest, p.own.count);
  RETURN_IF_ERROR(AllocateGrads(largest));
  if (precision.master_weights()) {
    ASSIGN_OR_RETURN(master_,
                     Tensor::Empty({shard}, DType::kF32, alloc_, MemoryCategory::kOptimizer));
  }
  ASSIGN_OR_RETURN(optimizer_, make_optimizer_(shard, alloc_));

  // Parameters and segments: ZeRO-3 holds and updates the packed shard; ZeRO-1/2 update
  // their chunks where they are, in the whole buffer. Initialised on the host, then
  // copied to the device (a meta device's take no values).
  const bool values = config_.device.type != DeviceType::kMeta;
  std::vector<float> init(values ? size_t(shards_params() ? shard : total) : 0);
  const std::vector<model::TensorRange> buffer_ranges = model::TensorRanges(layout_);
  for (const Sharding::Piece& p : sharding_.pieces()) {
    const int64_t param_shift = shards_params() ? 0 : p.own.offset - p.packed;
    for (model::TensorRange r : model::RangesIn(buffer_ranges, p.own.offset, p.own.end())) {
      r.begin += p.packed;
      r.end += p.packed;
      ranges_.push_back(r);
      segments_.push_back(model::OptimizerSegments({r}, param_shift).front());
      master_segments_.push_back(model::OptimizerSegments({r}, 0).front());
    }
    if (shards_params() && values) {
      model::InitializeParameters(layout_, seed, p.own.offset, p.own.end(), init.data() + p.packed);
    }
  }
  if (!values) return absl::OkStatus();
  if (!shards_params()) {
    model::InitializeParameters(layout_, seed, 0, total, init.data());
    return Load(init.data(), nullptr);
  }
  if (master_.defined()) {  // ZeRO-3's init is the packed shard
    RETURN_IF_ERROR(master_.CopyFromHost(init.data()));
    return PublishShard();
  }
  return params_.CopyFromHost(init.data());
}

absl::StatusOr<float*> ZeroWeights::Widened(int unit, const Tensor& whole) {
  if (whole.dtype() == DType::kF32) return whole.data<float>();
  return working_params_->Widen(unit, whole);
}

absl::StatusOr<float*> ZeroWeights::Params(int unit) {
  const model::ParamUnit& u = layout_.units()[unit];
  return Widened(unit, params_.Flat(u.begin, u.end));
}

absl::StatusOr<ConstTypedPtr> ZeroWeights::Stored(int unit) {
  const model::ParamUnit& u = layout_.units()[unit];
  const Tensor whole = params_.Flat(u.begin, u.end);
  return ConstTypedPtr(whole.raw_data(), whole.dtype());
}

absl::Status ZeroWeights::ReleaseParams(int unit) {
  working_params_->Release(unit);
  return absl::OkStatus();
}

absl::StatusOr<float*> ZeroWeights::OpenGrads(int unit) {
  if (config_.precision.grads == DType::kF32) return OpenFp32Grads(unit);
  return working_grads_->Zeroed(unit, layout_.units()[unit].count());
}

Tensor ZeroWeights::TakeGrads(int unit, Tensor open_grads) {
  if (config_.precision.grads != DType::kF32) return working_grads_->Take(unit);
  return open_grads;
}

absl::StatusOr<double> ZeroWeights::Step(float lr, float clip) {
  RETURN_IF_ERROR(CompleteGrads());
  RETURN_IF_ERROR(reducer_->Complete(grad_shard_));
  // Every piece's squares over the dp group: an experts' piece is cut over the edp group,
  // whose ranks together with their ep groups' are the dp group.
  ASSIGN_OR_RETURN(double norm,
                   ClipAndStep(*kernels_, *optimizer_, UpdatedParams(), grad_shard_, ranges_,
                               master_.defined() ? master_segments_ : segments_, lr, clip,
                               GradientGroups{config_.dp, &config_.tp, config_.algorithm,
                                              config_.stages}));
  RETURN_IF_ERROR(PublishShard());
  RETURN_IF_ERROR(ShareUpdate());
  return norm;
}

absl::Status ZeroWeights::AllGatherUpdated() {
  comm::PhaseScope phase(config_.dp->ledger(), comm::Phase::kOptimizer);
  // Each all-gather's input is the own chunk inside its output, so it moves only the
  // other ranks' chunks.
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    const Sharding::Piece& p = piece(i);
    Tensor unit = params_.Flat(p.unit.offset, p.unit.end());
    RETURN_IF_ERROR(GroupOf(i).AllGather(params_.Flat(p.own.offset, p.own.end()), unit,
                                         config_.algorithm));
  }
  return absl::OkStatus();
}

float* ZeroWeights::UpdatedParams() {
  return (master_.defined() ? master_ : params_).data<float>();
}

absl::Status ZeroWeights::PublishShard() {
  if (!master_.defined()) return absl::OkStatus();
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    const Sharding::Piece& p = piece(i);
    const int64_t at = shards_params() ? p.packed : p.own.offset;
    RETURN_IF_ERROR(kernels_->Convert(params_.Flat(at, at + p.own.count).raw_data(),
                                      params_.dtype(), Own(master_, i).raw_data(), DType::kF32,
                                      p.own.count));
  }
  return absl::OkStatus();
}

bool ZeroWeights::GathersTo(int root) const {
  return config_.dp->rank() == root ||
         (config_.experts != nullptr && config_.experts->rank() == root);
}

absl::Status ZeroWeights::GatherPiece(const Tensor& shard, size_t i, const Tensor& whole,
                                      int root) {
  const Sharding::Piece& p = piece(i);
  comm::Communicator& group = GroupOf(i);
  const bool is_root = group.rank() == root;
  Tensor unit = is_root ? whole.Flat(p.unit.offset, p.unit.end()) : Tensor();
  if (!is_root || shard.device() == whole.device()) {
    return group.Gather(Own(shard, i), unit, p.unit.count, root, config_.algorithm);
  }
  // A GPU's shards gather on the GPU, then go to the host.
  Allocator on_device(nullptr, shard.device());
  ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({p.unit.count}, shard.dtype(), on_device));
  RETURN_IF_ERROR(group.Gather(Own(shard, i), gathered, p.unit.count, root, config_.algorithm));
  return unit.CopyFrom(gathered);
}

absl::StatusOr<Tensor> ZeroWeights::GatherParams(int root) {
  Allocator unaccounted(nullptr);
  const bool is_root = GathersTo(root);
  Tensor whole;
  if (is_root) {
    ASSIGN_OR_RETURN(whole, Tensor::Empty({layout_.total()}, DType::kF32, unaccounted));
  }
  if (!shards_params() && !master_.defined()) {
    if (is_root) RETURN_IF_ERROR(whole.CopyFrom(params_));
    return whole;
  }
  // The fp32 packed shards: ZeRO-3's parameters, or the master weights.
  const Tensor& shard = master_.defined() ? master_ : params_;
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    RETURN_IF_ERROR(GatherPiece(shard, i, whole, root));
  }
  return whole;
}

absl::StatusOr<TrainableWeights::Part> ZeroWeights::GatherPart(bool with_optimizer) {
  Part part;
  if (!config_.gathers_checkpoint) return part;  // another rank holds the same state
  ASSIGN_OR_RETURN(part.params, GatherParams(/*root=*/0));
  if (!with_optimizer) return part;
  ASSIGN_OR_RETURN(part.gathered, GatherOptimizer(/*root=*/0));
  part.optimizer = part.gathered.get();
  return part;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> ZeroWeights::GatherOptimizer(int root) {
  Allocator unaccounted(nullptr);
  const bool is_root = GathersTo(root);
  std::unique_ptr<optim::Optimizer> whole;
  if (is_root) {
    ASSIGN_OR_RETURN(whole, make_optimizer_(layout_.total(), unaccounted));
    whole->set_step(optimizer_->step());
  }
  auto shards = optimizer_->State();
  for (size_t s = 0; s < shards.size(); ++s) {
    const Tensor into = is_root ? *whole->State()[s].second : Tensor();
    for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
      RETURN_IF_ERROR(GatherPiece(*shards[s].second, i, into, root));
    }
  }
  return whole;
}

absl::Status ZeroWeights::Load(const float* params, optim::Optimizer* optimizer) {
  // Copies this rank's chunks of a whole buffer (host memory) into a packed shard.
  auto keep = [&](const float* whole, Tensor& shard) -> absl::Status {
    for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
      RETURN_IF_ERROR(Own(shard, i).CopyFromHost(whole + piece(i).own.offset));
    }
    return absl::OkStatus();
  };
  if (master_.defined()) {
    RETURN_IF_ERROR(keep(params, master_));
    if (!shards_params()) {  // every rank's chunks of the whole bf16 buffer, rounded alike
      std::vector<BFloat16> rounded(size_t(layout_.total()));
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = BFloat16::FromFloat(params[i]);
      RETURN_IF_ERROR(params_.CopyFromHost(rounded.data()));
    }
    RETURN_IF_ERROR(PublishShard());
  } else if (shards_params()) {
    RETURN_IF_ERROR(keep(params, params_));
  } else {
    RETURN_IF_ERROR(params_.CopyFromHost(params));
  }
  if (optimizer == nullptr) return absl::OkStatus();
  if (std::string(optimizer->name()) != optimizer_->name()) {
    return absl::InvalidArgumentError(absl::StrCat("[zero] cannot load ", optimizer->name(),
                                                   " state into ", optimizer_->name()));
  }
  auto whole = optimizer->State();
  auto mine = optimizer_->State();
  for (size_t s = 0; s < mine.size(); ++s) {
    RETURN_IF_ERROR(keep(whole[s].second->data<float>(), *mine[s].second));
  }
  optimizer_->set_step(optimizer->step());
  return absl::OkStatus();
}

}  // namespace tally::parallel
