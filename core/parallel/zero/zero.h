// ZeRO (Rajbhandari et al., 2020) over the data-parallel group of p ranks.
//
// The flat buffer is cut into units (sharding.h), each cut among the ranks, and a rank
// keeps the optimizer state of its shard only. ZeRO-1 cuts the whole buffer as one unit;
// ZeRO-2 and ZeRO-3 cut each of the model's units on its own, so that a unit's gradients
// can be reduced, and its parameters gathered, while the rest of the model is elsewhere —
// as PyTorch FSDP shards the flat parameter of each wrapped module.
//
//           parameters                 gradients                    optimizer state
//   ZeRO-1  whole (4Φ)                 whole (4Φ; shard at front)   shard (8Φ/p with AdamW)
//   ZeRO-2  whole (4Φ)                 shard + the open units       shard
//   ZeRO-3  shard + the gathered units shard + the open units       shard
//
// A step, and the bytes one rank sends with the ring when p divides every unit (the
// exact count, any p, is exact_traffic.h per call; ZeroBytesPerStep sums it):
//   ZeRO-1  backward accumulates the whole gradients; Step reduce-scatters them once
//           (phase backward), (p-1)/p·4Φ, each piece's reduced chunk staged in comm
//           memory and moved to its packed place at the buffer's front.      zero1.cc
//   ZeRO-2  as backward closes a unit's gradients, they are reduce-scattered and the own
//           chunk is added to the gradient shard: (p-1)/p·4Φ per micro-batch. zero2.cc
//   ZeRO-3  the same, and every unit's parameters are all-gathered before its forward
//           and again before its backward, then released: 2·(p-1)/p·4Φ per micro-batch
//           (a pipeline with --recompute gathers a third time, for the recomputed
//           forward).                                                          zero3.cc
//   then Step (zero.cc): the global gradient norm (each rank's Σg² of its shard,
//   all-reduced, label grad_norm), clipping, the update of the own shard, and for ZeRO-1/2
//   the all-gather of the parameters (phase optimizer), (p-1)/p·4Φ. Per step with one
//   micro-batch: 2(p-1)/p·4Φ for ZeRO-1 and 2, as data parallelism; 3(p-1)/p·4Φ for ZeRO-3.
//
// ZeRO-3 with reshard_after_forward false (--zero3_reshard_after_forward=false; FSDP's
// SHARD_GRAD_OP): a unit the model releases in forward stays gathered until its backward
// releases it, so the backward gathers nothing: (p-1)/p·4Φ a micro-batch less, at the
// cost of every unit's whole parameters at the end of forward.
//
// The reduce-scatters and the gathers go through two seams (core/parallel/seams.h): a
// GradientReducer and a ParameterGatherer, the config's or, when it has none, the plain
// calls above (PlainReducer, PlainGatherer). The variants of ZeRO plug in there
// (extensions/): what they send, and their bytes, are theirs.
//
// Under expert parallelism (--ep; core/parallel/expert_parallel.h) the experts' tensors are
// data-parallel over the expert-data-parallel group only, so ZeRO cuts them over that
// group (as DeepSpeed-MoE and Megatron-LM's distributed optimizer do) and the rest over the
// dp group: every unit is cut into runs of the two kinds (ZeroUnits), each reduced,
// gathered and updated over its own group. The edp and ep groups tile the dp group, so
// the gradient norm still sums every rank's squares over the dp group.
//
// Under mixed precision (core/model/precision.h) the parameters and gradients above are bf16
// (2 bytes where the table says 4), the parameters are gathered and the gradients
// reduced as bf16 (or the gradients as --grad_comm_dtype says), and the optimizer state
// gains the fp32 master weights of the shard (4Φ/p): 2 + 2 + 12 bytes a parameter with
// AdamW, of which ZeRO-1 shards the 12, ZeRO-2 also the 2 of the gradients, ZeRO-3 all.
// The model computes on fp32 working copies of the units in use (core/model/weights.h).
//
// Overlap (--overlap; the same calls, bytes and sums as without it), one unit's calls in
// flight at a time (in_flight.h):
//   reduce    ZeRO-2/3: a unit's gradient reduce-scatter is posted when backward closes
//             the unit (Communicator::IReduceScatter) and finished (its chunks added to
//             the shard, in the same order) when the next unit closes, or before the
//             shard is read; its fp32 gradients and reduced chunks held until then.
//   prefetch  ZeRO-3 (FSDP's): when the model asks for a unit, the gather of the unit
//             it will ask for next (the next in its direction: up in forward, down in
//             backward) is posted at once (IAllGather); at most one unit prefetched,
//             held in params memory. For one pipeline stage (a stage's recompute asks
//             out of order).
//
//   ZeroConfig config{.stage = 3, .dp = dp, .algorithm = Algorithm::kRing};
//   ASSIGN_OR_RETURN(auto zero, ZeroWeights::Create(config, layout, seed, make_optimizer));
//   ASSIGN_OR_RETURN(auto gpt, GPT::Create(model_config, alloc, zero.get()));
//   ... gpt->Forward / Backward ...
//   ASSIGN_OR_RETURN(double norm, zero->Step(lr, grad_clip));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/model/precision.h"
#include "core/model/weights.h"
#include "core/optim/optimizer.h"
#include "core/parallel/seams.h"
#include "core/parallel/sent_as.h"
#include "core/parallel/step_end.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero/sharding.h"
#include "core/runtime/comm/communicator.h"

namespace tally::parallel {

// The core's seams: a piece's gradients reduce-scattered as `wire` (SentAs), and a
// unit's parameters all-gathered as they are, with `algorithm`.
class PlainReducer : public GradientReducer {
 public:
  PlainReducer(DType wire, comm::Algorithm algorithm) : sent_as_(wire), algorithm_(algorithm) {}
  absl::Status ReduceScatter(comm::Communicator& group, const Tensor& grads,
                             const Tensor& reduced) override;
  absl::StatusOr<Posted> IReduceScatter(comm::Communicator& group, const Tensor& grads,
                                        const Tensor& reduced) override;

 private:
  SentAs sent_as_;
  comm::Algorithm algorithm_;
};
class PlainGatherer : public ParameterGatherer {
 public:
  explicit PlainGatherer(comm::Algorithm algorithm) : algorithm_(algorithm) {}
  absl::Status Gather(const PieceToGather& piece, std::vector<Posted>* posted) override;

 private:
  comm::Algorithm algorithm_;
};

// Who ZeRO works with, and how.
struct ZeroConfig {
  int stage = 1;                          // 1, 2 or 3
  comm::Communicator* dp = nullptr;       // the group that cuts the units (not null)
  comm::Communicator* experts = nullptr;  // under expert parallelism the edp group, which
                                          // cuts the experts' units (null: dp cuts all)
  TensorParallel tp;                      // joins the gradient norm
  comm::Communicator* stages = nullptr;   // the pipeline group, which joins it too (or null)
  comm::Algorithm algorithm = comm::Algorithm::kRing;  // of every collective here
  Device device = Device::CPU();          // the model's: weights, gradients, optimizer state
  model::Precision precision;
  bool overlap = false;   // ZeRO-2/3: a closed unit's reduce-scatter in flight
  bool prefetch = false;  // ZeRO-3: the next unit's gather in flight
  // ZeRO-3: false keeps a unit gathered in forward until its backward (FSDP's SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  // Whether this rank's GatherPart gathers a checkpoint (false: another rank holds the
  // same state and gathers it).
  bool gathers_checkpoint = true;
  // The seams (core/parallel/seams.h); null: PlainReducer, PlainGatherer.
  std::shared_ptr<GradientReducer> reducer;
  MakeParameterGatherer make_gatherer;
};

// The model's weights, sharded: the part every stage shares (the shard's optimizer and
// master weights, the update, checkpoints). Each stage is a subclass (stages.h) that owns
// its gradients, and ZeRO-3 its parameters too.
class ZeroWeights : public TrainableWeights {
 public:
  // Parameters initialised from `seed` as the serial model's (ZeRO-3: the own shard only).
  // `layout` is this rank's (its tensor-parallel part of its pipeline stage). Everything
  // here lives on the config's device, charged to dp's memory ledger.
  static absl::StatusOr<std::unique_ptr<ZeroWeights>> Create(const ZeroConfig& config,
                                                             const model::ParameterLayout& layout,
                                                             uint64_t seed,
                                                             MakeOptimizer make_optimizer);

  // ZeRO-1/2: the unit of the whole buffer (ZeRO-3 gathers it).
  absl::StatusOr<float*> Params(int unit) override;
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override;
  absl::Status ReleaseParams(int unit) override;
  // Mixed precision: a zeroed fp32 working copy; fp32: the stage's buffer (OpenFp32Grads).
  absl::StatusOr<float*> OpenGrads(int unit) final;

  // After the last backward of a step: the shard's gradients completed (the stage's),
  // the global gradient norm (step_end.h; the shards' squares over dp), clipping, the
  // update of the shard, and the updated parameters shared (the stage's). Returns the
  // norm before clipping (clip 0: none).
  absl::StatusOr<double> Step(float lr, float clip) final;
  optim::Optimizer& optimizer() final { return *optimizer_; }
  // GatherParams and GatherOptimizer to dp rank 0.
  absl::StatusOr<Part> GatherPart(bool with_optimizer) final;

  // The whole parameters, or optimizer state, on dp rank `root` (empty / null elsewhere),
  // in memory no ledger counts: what a checkpoint holds. Collective over the group. Under
  // expert parallelism the experts' parts go to edp rank `root`, so the ranks of one ep
  // group hold all the experts between them (their other parts: dp rank `root`'s alone).
  absl::StatusOr<Tensor> GatherParams(int root);
  absl::StatusOr<std::unique_ptr<optim::Optimizer>> GatherOptimizer(int root);
  absl::Status Load(const float* params, optim::Optimizer* optimizer) final;

  int zero_stage() const { return config_.stage; }

 protected:
  ZeroWeights(const ZeroConfig& config, const model::ParameterLayout& layout,
              MakeOptimizer make_optimizer);

  // The stage's gradient buffers (Create calls it between the parameters and the master
  // weights, so every stage's memory is charged in one order).
  virtual absl::Status AllocateGrads(int64_t largest_piece) = 0;
  // The fp32 gradients of `unit` that backward adds to.
  virtual absl::StatusOr<float*> OpenFp32Grads(int unit) = 0;
  // Before the norm: every gradient of the step in grad_shard_.
  virtual absl::Status CompleteGrads() = 0;
  // After the update: the parameters every rank needs from the others.
  virtual absl::Status ShareUpdate() = 0;

  // Whether the parameters are the packed shard (ZeRO-3), not the whole buffer.
  bool shards_params() const { return config_.stage == 3; }
  // The group that cuts piece `i`.
  comm::Communicator& GroupOf(size_t i) const {
    return sharding_.pieces()[i].experts ? *config_.experts : *config_.dp;
  }
  const Sharding::Piece& piece(size_t i) const { return sharding_.pieces()[i]; }
  // Piece `i` of a packed shard.
  Tensor Own(const Tensor& shard, size_t i) const {
    const Sharding::Piece& p = piece(i);
    return shard.Flat(p.packed, p.packed + p.own.count);
  }
  // `whole` (a unit's stored parameters) as fp32: itself, or its working copy.
  absl::StatusOr<float*> Widened(int unit, const Tensor& whole);
  // The fp32 gradients backward left for `unit` (open_grads, or the working copy under
  // mixed precision; undefined when fp32 gradients were added in place).
  Tensor TakeGrads(int unit, Tensor open_grads);
  // Every rank's updated chunks into every rank's whole buffer (ZeRO-1/2; phase optimizer).
  absl::Status AllGatherUpdated();

  const ZeroConfig config_;
  const model::ParameterLayout layout_;
  const Sharding sharding_;
  // The pieces [first, second) of each model unit (ZeRO-1: all units in piece 0).
  const std::vector<std::pair<size_t, size_t>> pieces_of_unit_;
  Allocator alloc_;              // on the model's device, charged to dp's ledger
  std::shared_ptr<GradientReducer> reducer_;  // the config's, or PlainReducer
  std::unique_ptr<Kernels> kernels_;  // the device's: gradient sums, norm, clipping

  Tensor params_;      // ZeRO-1/2: the whole buffer; ZeRO-3: the packed shard
  Tensor grad_shard_;  // the reduced gradients of the own shard
  // Mixed precision: the fp32 copies the model computes on (bf16 parameters; bf16
  // gradients, which are accumulated from them).
  std::unique_ptr<model::WorkingCopies> working_params_, working_grads_;

 private:
  // Allocates and initialises everything (after the constructor, which cannot fail).
  absl::Status Init(uint64_t seed);
  // The updated fp32 master weights of the shard, rounded into the parameters' own
  // chunks (nothing without master weights).
  absl::Status PublishShard();
  // The fp32 parameters of the shard the optimizer updates: the master weights, or (fp32)
  // the parameters themselves.
  float* UpdatedParams();
  // Whether this rank receives whole buffers from GatherPiece(..., root) of some piece.
  bool GathersTo(int root) const;
  // Piece `i` of every rank's `shard` (the parameters, or a state of the optimizer)
  // into its place in `whole` on `root` (host memory; empty elsewhere).
  absl::Status GatherPiece(const Tensor& shard, size_t i, const Tensor& whole, int root);

  MakeOptimizer make_optimizer_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  Tensor master_;  // mixed precision: the packed shard's fp32 master weights
  // The packed shard's tensor ranges (of layout_'s specs), and the optimizer's segments
  // of them.
  std::vector<model::TensorRange> ranges_;
  std::vector<optim::Segment> segments_;
  std::vector<optim::Segment> master_segments_;  // the same, over the packed master weights
};

}  // namespace tally::parallel
