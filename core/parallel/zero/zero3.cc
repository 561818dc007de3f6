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
// Each gather is the store's ParameterGatherer's (core/parallel/seams.h; the plain all-gather
// by default), told of every unit it gathered fresh in forward and asked for the error
// of what it carried of the shard once a step.
//
// With --overlap on one pipeline stage (ZeroConfig::prefetch) asking for a unit posts the gather of
// the next one in the model's direction (up in forward, down in backward), which the next
// Params call takes: one unit prefetched, held in params memory.
#include "core/parallel/zero/stages.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

Zero3Weights::Zero3Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
                           MakeOptimizer make_optimizer)
    : Zero2Weights(config, layout, std::move(make_optimizer)), gathered_(layout.units().size()) {}

absl::Status Zero3Weights::AllocateGrads(int64_t largest_piece) {
  // The gatherer first: its buffers are the parameters' memory.
  if (config_.make_gatherer) {
    ASSIGN_OR_RETURN(gatherer_, config_.make_gatherer(layout_, alloc_, config_.precision.params));
  } else {
    gatherer_ = std::make_unique<PlainGatherer>(config_.algorithm);
  }
  return Zero2Weights::AllocateGrads(largest_piece);
}

absl::Status Zero3Weights::GatherUnit(int unit, const Tensor& into, InFlight* in_flight) {
  const model::ParamUnit& u = layout_.units()[unit];
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const comm::Chunk& part = piece(i).unit;
    const PieceToGather gather{.unit = unit,
                             .index = i,
                             .group = &GroupOf(i),
                             .mine = Own(params_, i),
                             .whole = into.Flat(part.offset - u.begin, part.end() - u.begin)};
    RETURN_IF_ERROR(gatherer_->Gather(gather, in_flight != nullptr ? &in_flight->calls : nullptr));
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
  if (fresh && config_.dp->ledger().phase() == comm::Phase::kForward) {
    RETURN_IF_ERROR(gatherer_->Gathered(unit, gathered, pieces_of_unit_[unit].first,
                                        pieces_of_unit_[unit].second));
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
  // What the step's reduce-scatters moved, then what its gathers carried of the shard.
  error_sums_ = reducer_->TakeError();
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    error_sums_.Add(gatherer_->ErrorOf(Own(params_, i)));
  }
  return absl::OkStatus();
}

}  // namespace tally::parallel
