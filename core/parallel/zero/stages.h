// The three ZeRO stages (zero.h's table), each owning only what it shards differently.
// ZeroWeights::Create makes them; nothing else names them.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/parallel/seams.h"
#include "core/parallel/zero/in_flight.h"
#include "core/parallel/zero/zero.h"

namespace tally::parallel {

// ZeRO-1 (zero1.cc): whole gradients, reduce-scattered once a step.
class Zero1Weights : public ZeroWeights {
 public:
  Zero1Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
               MakeOptimizer make_optimizer)
      : ZeroWeights(config, layout, std::move(make_optimizer)) {}
  absl::Status CloseGrads(int unit) override;
  absl::Status ZeroGrad() override;
  // wte's whole gradients (reduce-scattered in Step, after the sum).
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override;

 protected:
  absl::Status AllocateGrads(int64_t largest_piece) override;
  absl::StatusOr<float*> OpenFp32Grads(int unit) override;
  absl::Status CompleteGrads() override;
  absl::Status ShareUpdate() override { return AllGatherUpdated(); }

 private:
  Tensor grads_;   // the whole buffer; its front holds the reduced shard (grad_shard_)
  Tensor staged_;  // one piece's reduced chunk, in comm memory, on its way to the front
};

// ZeRO-2 (zero2.cc): each unit's gradients reduce-scattered as backward closes it.
class Zero2Weights : public ZeroWeights {
 public:
  Zero2Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
               MakeOptimizer make_optimizer);
  absl::Status CloseGrads(int unit) override;
  absl::Status ZeroGrad() override { return grad_shard_.SetZero(); }
  // This rank's chunk of wte's reduced gradients (wte is a unit of its own on a pipeline
  // stage, so the first and the last stage's chunks line up).
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override;

 protected:
  absl::Status AllocateGrads(int64_t largest_piece) override;
  absl::StatusOr<float*> OpenFp32Grads(int unit) override;
  absl::Status CompleteGrads() override { return FinishReduce(); }
  absl::Status ShareUpdate() override { return AllGatherUpdated(); }

 private:
  // Reduce-scatters `grads` (the unit's fp32 gradients), blocking, into the shard.
  absl::Status Reduce(int unit, const Tensor& grads);
  // Posts them (config_.overlap); FinishReduce adds the chunks to the shard.
  absl::Status PostReduce(int unit, const Tensor& grads);
  absl::Status FinishReduce();

  std::vector<Tensor> open_grads_;  // by model unit, while open (fp32 gradients)
  Tensor reduced_;  // one piece's reduced chunk, of the gradients' wire type
  InFlight reducing_;         // the unit posted last (held: its gradients)
  Tensor in_flight_reduced_;  // its reduced chunks, each piece's at its packed offset
};

// ZeRO-3 (zero3.cc): ZeRO-2's gradients, and parameters kept as the shard, each unit
// all-gathered when the model asks for it and freed when it is released.
class Zero3Weights : public Zero2Weights {
 public:
  Zero3Weights(const ZeroConfig& config, const model::ParameterLayout& layout,
               MakeOptimizer make_optimizer);
  absl::StatusOr<float*> Params(int unit) override;
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override;
  absl::Status ReleaseParams(int unit) override;
  // The error of the gradients the step's reduce-scatters carried and of the shard its
  // gathers carried (the seams'; zeros for the plain calls).
  ErrorSums CompressionError() const override { return error_sums_; }

 protected:
  // Also makes the gatherer (the config's, or PlainGatherer).
  absl::Status AllocateGrads(int64_t largest_piece) override;
  // Also waits for a prefetch nobody asked for, which would hold the shard from before
  // the update.
  absl::Status CompleteGrads() override;
  absl::Status ShareUpdate() override { return absl::OkStatus(); }  // nothing is whole

 private:
  // Every rank's pieces of `unit` into `into` (its whole size), blocking, or posted into
  // `in_flight` when that is not null.
  absl::Status GatherUnit(int unit, const Tensor& into, InFlight* in_flight);
  // Posts the gather of the unit after `unit` in the model's direction (config_.prefetch).
  absl::Status PrefetchAfter(int unit);

  std::unique_ptr<ParameterGatherer> gatherer_;  // the config's, or PlainGatherer
  std::vector<Tensor> gathered_;  // by model unit, while in use
  int last_unit_ = -1;            // the unit asked for last
  InFlight prefetched_;           // held: the next unit's gathered parameters
  ErrorSums error_sums_;          // the seams', of the step
};

}  // namespace tally::parallel
