// ZeRO-1: every rank accumulates the whole gradients, as data parallelism does; once a
// step, before the update, they are reduce-scattered so that each rank holds the sum of
// its shard only, and after the update the parameters are all-gathered (zero.h's table).
//
//   bytes a step, ring, p | every unit:  (p-1)/p·Φ·g  reduce-scatter, phase backward
//                                      + (p-1)/p·Φ·w  all-gather, phase optimizer
//   (g, w: bytes of a reduced gradient and of a parameter; ZeroBytesPerStep is exact.)
#include "core/parallel/zero/stages.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::Status Zero1Weights::AllocateGrads(int64_t largest_piece) {
  // The whole buffer, whose front then holds the reduced shard (CompleteGrads): the
  // seed's 2Φ of gradients, to the byte. A piece's reduced chunk is staged in comm memory.
  const DType type = config_.precision.grads;
  ASSIGN_OR_RETURN(grads_, Tensor::Empty({layout_.total()}, type, alloc_, MemoryCategory::kGrads));
  grad_shard_ = grads_.Flat(0, sharding_.size());
  ASSIGN_OR_RETURN(staged_, Tensor::Empty({largest_piece}, type, alloc_, MemoryCategory::kComm));
  return absl::OkStatus();
}

absl::StatusOr<float*> Zero1Weights::OpenFp32Grads(int unit) {
  return grads_.data<float>() + layout_.units()[unit].begin;  // added in place
}

absl::Status Zero1Weights::CloseGrads(int unit) {
  const Tensor grads = TakeGrads(unit, Tensor());
  if (!grads.defined()) return absl::OkStatus();  // fp32: added in place
  // Mixed precision: the unit's fp32 working gradients added into the whole buffer.
  const model::ParamUnit& u = layout_.units()[unit];
  Tensor into = grads_.Flat(u.begin, u.end);
  return kernels_->Accumulate(into.raw_data(), into.dtype(), grads.raw_data(), DType::kF32,
                              u.count());
}

absl::StatusOr<Tensor> Zero1Weights::TiedEmbeddingGrads() {
  return grads_.Flat(0, layout_.specs()[0].numel);  // wte leads the buffer
}

absl::Status Zero1Weights::ZeroGrad() { return grads_.SetZero(); }

absl::Status Zero1Weights::CompleteGrads() {
  // The gradient sum belongs to backward: DDP and ZeRO alike reduce there. Each piece's
  // reduced chunk moves to its packed place at the front of the buffer, which never
  // reaches a later piece's unit (the packed offsets grow no faster than the units').
  comm::PhaseScope phase(config_.dp->ledger(), comm::Phase::kBackward);
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    Tensor unit = grads_.Flat(piece(i).unit.offset, piece(i).unit.end());
    Tensor staged = staged_.Flat(0, piece(i).own.count);
    RETURN_IF_ERROR(reducer_->ReduceScatter(GroupOf(i), unit, staged));
    RETURN_IF_ERROR(Own(grad_shard_, i).CopyFrom(staged));
  }
  return absl::OkStatus();
}

}  // namespace tally::parallel
