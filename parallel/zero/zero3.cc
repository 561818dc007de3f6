// ZeRO-3: ZeRO-2's gradients, and the parameters kept as the shard only. When the model
// asks for a unit (Params) its pieces are all-gathered from every rank, and when it
// releases the unit they are freed, so that a rank holds the shard and the units in use;
// after the update nothing is gathered (zero.h's table).
//
//   bytes a step, ring, p | every unit:  m·(p-1)/p·Φ·g      reduce-scatter, backward
//                                      + m·(p-1)/p·Φ·w      all-gather, forward
//                                      + m·(p-1)/p·Φ·w·k    all-gather, backward
//   (k = 1, or 2 when a pipeline stage recomputes its forward; ZeroBytesPerStep is exact.)
//
// With reshard_after_forward false (--zero3_reshard_after_forward=false) a unit released
// in phase forward stays gathered, and its backward gathers nothing (m·(p-1)/p·Φ·w less).
//
// With hpZ (ZeroConfig::hpz) a forward's gather also keeps the rank's secondary chunks,
// and a backward's gathers them over the node's group (zero.h).
//
// With qwZ (ZeroConfig::quantized_weights_block) every gather over the dp group carries
// int8 values and their blocks' scales (quantize.h), the own chunk dequantised like the
// others; hpZ's gathers inside the node carry the secondary copy as it is.
//
// With qgZ (ZeroConfig::quantized_grads_block) the reduce-scatters are quantised
// all-to-alls (qgz.h), inside the node and then across it when the dp group spans nodes.
//
// With --overlap on one pipeline stage (ZeroConfig::prefetch) asking for a unit posts the gather of
// the next one in the model's direction (up in forward, down in backward), which the next
// Params call takes: one unit prefetched, held in params memory.
#include "parallel/zero/stages.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

Zero3Weights::Zero3Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
                           MakeOptimizer make_optimizer)
    : Zero2Weights(config, layout, std::move(make_optimizer)), gathered_(layout.units().size()) {
  if (config.hpz != nullptr) {
    secondary_.emplace(ZeroUnits(layout, 3), config.hpz->size(), config.hpz->rank());
  }
}

absl::Status Zero3Weights::KeepSecondary(int unit, const Tensor& whole) {
  if (!secondary_params_.defined()) {
    ASSIGN_OR_RETURN(secondary_params_, Tensor::Empty({secondary_->size()}, params_.dtype(), alloc_,
                                                      MemoryCategory::kParams));
  }
  const model::ParamUnit& u = layout_.units()[unit];
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const comm::Chunk& own = secondary_->pieces()[i].own;
    RETURN_IF_ERROR(SecondaryOwn(i).CopyFrom(whole.Flat(own.offset - u.begin, own.end() - u.begin)));
  }
  return absl::OkStatus();
}

absl::Status Zero3Weights::GatherUnit(int unit, const Tensor& into, InFlight* in_flight) {
  const model::ParamUnit& u = layout_.units()[unit];
  // hpZ: backward gathers the secondary copy inside the node.
  const bool in_node =
      secondary_.has_value() && config_.dp->ledger().phase() == comm::Phase::kBackward;
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const comm::Chunk& part = piece(i).unit;
    Tensor whole = into.Flat(part.offset - u.begin, part.end() - u.begin);
    comm::Communicator& group = in_node ? *config_.hpz : GroupOf(i);
    const Tensor mine = in_node ? SecondaryOwn(i) : Own(params_, i);
    if (config_.quantized_weights_block > 0 && !in_node) {  // qwZ
      QuantizedGather gather(group, config_.quantized_weights_block, config_.algorithm);
      RETURN_IF_ERROR(gather.Post(mine, whole, /*blocking=*/in_flight == nullptr));
      if (in_flight != nullptr) in_flight->quantized.push_back(std::move(gather));
    } else if (in_flight == nullptr) {
      RETURN_IF_ERROR(group.AllGather(mine, whole, config_.algorithm));
    } else {
      ASSIGN_OR_RETURN(auto work, group.IAllGather(mine, whole, config_.algorithm));
      in_flight->gathers.push_back(std::move(work));
    }
  }
  return absl::OkStatus();
}

absl::Status Zero3Weights::PrefetchAfter(int unit) {
  const int direction = last_unit_ < 0 || unit >= last_unit_ ? 1 : -1;
  last_unit_ = unit;
  const int next = unit + direction;
  if (next < 0 || next >= int(gathered_.size()) || gathered_[size_t(next)].defined() ||
      !prefetched_.empty()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor into, Tensor::Empty({layout_.units()[size_t(next)].count()},
                                              params_.dtype(), alloc_, MemoryCategory::kParams));
  prefetched_.Start(next, into);
  return GatherUnit(next, into, &prefetched_);
}

absl::StatusOr<float*> Zero3Weights::Params(int unit) {
  Tensor& gathered = gathered_[unit];
  const bool fresh = !gathered.defined();
  if (!gathered.defined() && prefetched_.unit == unit) {
    ASSIGN_OR_RETURN(gathered, prefetched_.Finish());
  } else if (!gathered.defined()) {
    ASSIGN_OR_RETURN(gathered, Tensor::Empty({layout_.units()[unit].count()}, params_.dtype(),
                                             alloc_, MemoryCategory::kParams));
    RETURN_IF_ERROR(GatherUnit(unit, gathered, nullptr));
  }
  if (fresh && secondary_.has_value() && config_.dp->ledger().phase() == comm::Phase::kForward) {
    RETURN_IF_ERROR(KeepSecondary(unit, gathered));
  }
  const Tensor whole = gathered;
  if (config_.prefetch) RETURN_IF_ERROR(PrefetchAfter(unit));
  return Widened(unit, whole);
}

absl::StatusOr<ConstTypedPtr> Zero3Weights::Stored(int unit) {
  const Tensor& whole = gathered_[unit];
  if (!whole.defined()) {
    return absl::FailedPreconditionError(
        absl::StrCat("[zero] unit ", unit, "'s parameters are not gathered"));
  }
  return ConstTypedPtr(whole.raw_data(), whole.dtype());
}

absl::Status Zero3Weights::ReleaseParams(int unit) {
  // Without resharding, what forward releases stays gathered for the unit's backward.
  const bool keep =
      !config_.reshard_after_forward && config_.dp->ledger().phase() == comm::Phase::kForward;
  if (!keep) gathered_[unit] = Tensor();
  return ZeroWeights::ReleaseParams(unit);
}

absl::Status Zero3Weights::CompleteGrads() {
  RETURN_IF_ERROR(Zero2Weights::CompleteGrads());
  if (!prefetched_.empty()) RETURN_IF_ERROR(prefetched_.Finish().status());
  for (Tensor& kept : gathered_) kept = Tensor();  // nothing gathered outlives the update
  last_unit_ = -1;
  // qgZ: what the step's reduce-scatters moved; qwZ: what quantising the shard moved, as
  // this step's forward gathers carried it.
  error_sums_ = std::exchange(grads_error_, ErrorSums());
  const int64_t block = config_.quantized_weights_block;
  if (block > 0 && params_.device().type == DeviceType::kCPU) {
    for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
      const Tensor own = Own(params_, i);
      error_sums_.Add(QuantizationError(ConstTypedPtr(own.raw_data(), own.dtype()), own.numel(), block));
    }
  }
  return absl::OkStatus();
}

}  // namespace tally::parallel
