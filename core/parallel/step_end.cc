#include "core/parallel/step_end.h"

#include <cmath>

#include "core/optim/schedule.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::Status SumPerTokenGradients(const TensorParallel& tp, const Tensor& grads,
                                  const std::vector<model::TensorRange>& ranges) {
  if (!tp.sequence_parallel()) return absl::OkStatus();
  // Packed into one buffer of the gradients' type and device, summed, and put back.
  int64_t count = 0;
  for (const model::TensorRange& r : ranges) count += r.spec->per_token ? r.end - r.begin : 0;
  Allocator on(tp.group()->allocator().ledger(), tp.device());
  ASSIGN_OR_RETURN(Tensor packed, Tensor::Empty({count}, grads.dtype(), on, MemoryCategory::kComm));
  // Copies each per-token range between the gradients and the packed buffer.
  auto copy = [&](bool pack) -> absl::Status {
    int64_t next = 0;
    for (const model::TensorRange& r : ranges) {
      if (!r.spec->per_token) continue;
      const Tensor range = grads.Flat(r.begin, r.end);
      const Tensor slot = packed.Flat(next, next + (r.end - r.begin));
      RETURN_IF_ERROR(pack ? slot.CopyFrom(range) : range.CopyFrom(slot));
      next += r.end - r.begin;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(copy(/*pack=*/true));
  {
    comm::PhaseScope phase(tp.group()->ledger(), comm::Phase::kBackward);
    comm::LabelScope label(tp.group()->ledger(), comm::scope::kSequenceParallel);
    RETURN_IF_ERROR(tp.group()->AllReduce(packed, comm::ReduceOp::kSum));
  }
  return copy(/*pack=*/false);
}

absl::StatusOr<double> GlobalGradientNorm(Kernels& k, const Tensor& grads,
                                          const std::vector<model::TensorRange>& ranges,
                                          const GradientGroups& groups) {
  const TensorParallel& tp = *groups.tp;
  std::vector<optim::Segment> counted, expert;
  for (const model::TensorRange& r : ranges) {
    if ((r.spec->replicated() && tp.rank() != 0) || r.spec->tied_copy) continue;
    (groups.experts != nullptr && r.spec->expert ? expert : counted).push_back({r.begin, r.end});
  }
  ASSIGN_OR_RETURN(double squares,
                   optim::SquaredNorm(k, grads.raw_data(), grads.dtype(), counted));
  if (groups.experts != nullptr) {  // each rank's experts are its own: their squares over the group
    comm::Communicator& experts = *groups.experts;
    ASSIGN_OR_RETURN(double expert_squares,
                     optim::SquaredNorm(k, grads.raw_data(), grads.dtype(), expert));
    comm::PhaseScope phase(experts.ledger(), comm::Phase::kOptimizer);
    comm::LabelScope label(experts.ledger(), comm::scope::kGradNorm);
    ASSIGN_OR_RETURN(expert_squares, experts.AllReduceValue(expert_squares, DType::kF64,
                                                            comm::ReduceOp::kSum, groups.algorithm));
    squares += expert_squares;
  }
  for (comm::Communicator* group : {groups.shards, tp.group(), groups.stages}) {
    if (group == nullptr) continue;
    comm::PhaseScope phase(group->ledger(), comm::Phase::kOptimizer);
    comm::LabelScope label(group->ledger(), comm::scope::kGradNorm);
    ASSIGN_OR_RETURN(squares, group->AllReduceValue(squares, DType::kF64, comm::ReduceOp::kSum,
                                                    groups.algorithm));
  }
  return std::sqrt(squares);
}

comm::ExpectedCalls StepEndCalls(const StepEndShape& s) {
  using comm::Phase;
  comm::ExpectedCalls calls;
  // One value of `element` bytes all-reduced over `group` once a step.
  auto one = [&](const char* name, const StepEndShape::Group& group, Phase phase, const char* scope,
                 int64_t element) {
    calls.push_back({.group = name,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = phase,
                     .scope = scope,
                     .count = 1,
                     .element = element,
                     .ranks = group.ranks,
                     .rank = group.rank,
                     .nodes = group.nodes});
  };
  one(comm::group::kDp, s.dp, Phase::kOther, comm::scope::kLoss, 4);  // a float
  one(comm::group::kPp, s.pp, Phase::kOther, comm::scope::kLoss, 4);
  if (s.shards && s.shard) {
    one(comm::group::kDpShard, *s.shard, Phase::kOptimizer, comm::scope::kGradNorm, 8);
  } else if (s.shards) {
    one(comm::group::kDp, s.dp, Phase::kOptimizer, comm::scope::kGradNorm, 8);
  }
  for (auto [name, group] : {std::pair{comm::group::kTp, &s.tp}, std::pair{comm::group::kPp, &s.pp},
                             std::pair{comm::group::kEp, &s.ep}}) {
    one(name, *group, Phase::kOptimizer, comm::scope::kGradNorm, 8);  // a double
  }
  if (s.sequence_parallel) {
    calls.push_back({.group = comm::group::kTp,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = Phase::kBackward,
                     .scope = comm::scope::kSequenceParallel,
                     .count = s.per_token_elements,
                     .element = s.grad_bytes,
                     .ranks = s.tp.ranks,
                     .rank = s.tp.rank});
  }
  return calls;
}

absl::StatusOr<double> ClipAndStep(Kernels& k, optim::Optimizer& optimizer, float* params,
                                   Tensor& grads, const std::vector<model::TensorRange>& ranges,
                                   const std::vector<optim::Segment>& segments, float lr, float clip,
                                   const GradientGroups& groups) {
  RETURN_IF_ERROR(SumPerTokenGradients(*groups.tp, grads, ranges));
  ASSIGN_OR_RETURN(double norm, GlobalGradientNorm(k, grads, ranges, groups));
  // Clipped as the optimizer reads them (torch scales the gradients in place first: the
  // same values, without that pass).
  const float scale = clip > 0 ? optim::ClipScale(norm, clip) : 1.0f;
  RETURN_IF_ERROR(optimizer.Step(params, grads.raw_data(), grads.dtype(), lr, segments, scale));
  return norm;
}

}  // namespace tally::parallel
