// ZeRO-2: as backward closes a unit's gradients (CloseGrads), they are reduce-scattered
// and the rank's chunk is added to its gradient shard, so that no rank holds more than the
// shard and the units still open. After the update the parameters are all-gathered, as
// ZeRO-1 does (zero.h's table).
//
//   bytes a step, ring, p | every unit:  m·(p-1)/p·Φ·g  reduce-scatter, phase backward
//                                      +   (p-1)/p·Φ·w  all-gather, phase optimizer
//   (m micro-batches a step; g, w as in zero1.cc; ZeroBytesPerStep is exact.)
//
// Each reduce-scatter is the store's GradientReducer's (core/parallel/seams.h; the plain one
// by default), which may reduce blocking only (Posts).
//
// With --overlap a unit's reduce-scatters are posted (PostReduce) and finished when the
// next unit closes, or before the shard is read (FinishReduce): one unit in flight.
#include <algorithm>

#include "core/parallel/zero/stages.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

Zero2Weights::Zero2Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
                           MakeOptimizer make_optimizer)
    : ZeroWeights(config, layout, std::move(make_optimizer)),
      open_grads_(layout.units().size()) {}

absl::Status Zero2Weights::AllocateGrads(int64_t largest_piece) {
  const model::Precision& precision = config_.precision;
  ASSIGN_OR_RETURN(grad_shard_, Tensor::Empty({sharding_.size()}, precision.grads, alloc_,
                                              MemoryCategory::kGrads));
  ASSIGN_OR_RETURN(reduced_, Tensor::Empty({largest_piece}, reducer_->ReducedType(precision.grad_comm),
                                          alloc_, MemoryCategory::kGrads));
  return absl::OkStatus();
}

absl::StatusOr<float*> Zero2Weights::OpenFp32Grads(int unit) {
  Tensor& grads = open_grads_[unit];
  if (!grads.defined()) {  // zero-filled
    ASSIGN_OR_RETURN(grads, Tensor::Empty({layout_.units()[unit].count()}, DType::kF32, alloc_,
                                          MemoryCategory::kGrads));
  }
  return grads.data<float>();
}

absl::Status Zero2Weights::CloseGrads(int unit) {
  RETURN_IF_ERROR(FinishReduce());  // the unit closed before this one
  Tensor grads = TakeGrads(unit, std::move(open_grads_[unit]));
  open_grads_[unit] = Tensor();
  const bool post = config_.overlap && reducer_->Posts();
  return post ? PostReduce(unit, grads) : Reduce(unit, grads);
}

absl::Status Zero2Weights::Reduce(int unit, const Tensor& grads) {
  const model::ParamUnit& u = layout_.units()[unit];
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const Sharding::Piece& p = piece(i);
    Tensor part = grads.Flat(p.unit.offset - u.begin, p.unit.end() - u.begin);
    Tensor reduced = reduced_.Flat(0, p.own.count);
    RETURN_IF_ERROR(reducer_->ReduceScatter(GroupOf(i), part, reduced));
    Tensor into = Own(grad_shard_, i);
    RETURN_IF_ERROR(kernels_->Accumulate(into.raw_data(), into.dtype(), reduced.raw_data(),
                                         reduced.dtype(), p.own.count));
  }
  return absl::OkStatus();
}

absl::Status Zero2Weights::PostReduce(int unit, const Tensor& grads) {
  if (!in_flight_reduced_.defined()) {  // room for the reduced chunks of any one unit
    int64_t most = 0;
    for (const auto& [first, second] : pieces_of_unit_) {
      int64_t own = 0;
      for (size_t i = first; i < second; ++i) own += piece(i).own.count;
      most = std::max(most, own);
    }
    ASSIGN_OR_RETURN(in_flight_reduced_, Tensor::Empty({most}, reduced_.dtype(), alloc_,
                                                       MemoryCategory::kGrads));
  }
  reducing_.Start(unit, grads);
  const model::ParamUnit& u = layout_.units()[unit];
  int64_t at = 0;
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const Sharding::Piece& p = piece(i);
    Tensor part = grads.Flat(p.unit.offset - u.begin, p.unit.end() - u.begin);
    ASSIGN_OR_RETURN(Posted call, reducer_->IReduceScatter(
                                      GroupOf(i), part, in_flight_reduced_.Flat(at, at + p.own.count)));
    reducing_.calls.push_back(std::move(call));
    at += p.own.count;
  }
  return absl::OkStatus();
}

absl::Status Zero2Weights::FinishReduce() {
  if (reducing_.empty()) return absl::OkStatus();
  const int unit = reducing_.unit;
  ASSIGN_OR_RETURN(const Tensor grads, reducing_.Finish());  // freed once the chunks are in
  int64_t at = 0;
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const int64_t count = piece(i).own.count;
    Tensor into = Own(grad_shard_, i);
    RETURN_IF_ERROR(kernels_->Accumulate(into.raw_data(), into.dtype(),
                                         in_flight_reduced_.Flat(at, at + count).raw_data(),
                                         in_flight_reduced_.dtype(), count));
    at += count;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Zero2Weights::TiedEmbeddingGrads() {
  RETURN_IF_ERROR(FinishReduce());
  return Own(grad_shard_, pieces_of_unit_[model::ParameterLayout::kEmbeddings].first);
}

}  // namespace tally::parallel
