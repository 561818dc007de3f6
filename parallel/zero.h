// ZeRO (Rajbhandari et al., 2020) over the data-parallel group of p ranks.
//
// The flat buffer is a list of units, each cut among the ranks by ChunkOf (so shards need
// not be equal). Rank r's shard is its chunk of every unit, packed in buffer order, and the
// rank keeps the optimizer state of its shard only. ZeRO-1 cuts the whole buffer as one
// unit; ZeRO-2 and ZeRO-3 cut each of the model's units (the embeddings, each layer, ln_f;
// a first pipeline stage's embeddings as two, wte and wpe) on its own, so that a unit's
// gradients can be reduced, and its parameters gathered, while the rest of the model is
// elsewhere — as PyTorch FSDP shards the flat parameter
// of each wrapped module.
//
//           parameters                 gradients                    optimizer state
//   ZeRO-1  whole (4Φ)                 whole (4Φ; shard at front)   shard (8Φ/p with AdamW)
//   ZeRO-2  whole (4Φ)                 shard + the open units       shard
//   ZeRO-3  shard + the gathered units shard + the open units       shard
//
// A step, and the bytes one rank sends with the ring when p divides every unit (the
// exact count, any p, is exact_traffic.h per call):
//   ZeRO-1  backward accumulates the whole gradients; Step reduce-scatters them once
//           (phase backward), (p-1)/p·4Φ, each piece's reduced chunk staged in comm
//           memory and moved to its packed place at the buffer's front.
//   ZeRO-2  as backward closes a unit's gradients, they are reduce-scattered and the own
//           chunk is added to the gradient shard: (p-1)/p·4Φ per micro-batch.
//   ZeRO-3  the same, and every unit's parameters are all-gathered before its forward
//           and again before its backward, then released: 2·(p-1)/p·4Φ per micro-batch
//           (a pipeline with --recompute gathers a third time, for the recomputed forward).
//   then Step: the global gradient norm (each rank's Σg² of its shard, all-reduced, label
//   grad_norm), clipping, the update of the own shard, and for ZeRO-1/2 the all-gather
//   of the parameters (phase optimizer), (p-1)/p·4Φ. Per step with one micro-batch:
//   2(p-1)/p·4Φ for ZeRO-1 and 2, as data parallelism; 3(p-1)/p·4Φ for ZeRO-3.
//
// Under expert parallelism (--ep; parallel/expert_parallel.h) the experts' tensors are
// data-parallel over the expert-data-parallel group only, so ZeRO cuts them over that
// group (as DeepSpeed-MoE and Megatron-LM's distributed optimizer do) and the rest over the
// dp group: every unit is cut into runs of the two kinds (ZeroUnits), each reduced,
// gathered and updated over its own group. The edp and ep groups tile the dp group, so
// the gradient norm still sums every rank's squares over the dp group.
//
// Under mixed precision (model/precision.h) the parameters and gradients above are bf16
// (2 bytes where the table says 4), the parameters are gathered and the gradients
// reduced as bf16 (or the gradients as --grad_comm_dtype says), and the optimizer state
// gains the fp32 master weights of the shard (4Φ/p): 2 + 2 + 12 bytes a parameter with
// AdamW, of which ZeRO-1 shards the 12, ZeRO-2 also the 2 of the gradients, ZeRO-3 all.
// The model computes on fp32 working copies of the units in use (model/weights.h).
//
//   ASSIGN_OR_RETURN(auto zero, ZeroWeights::Create(dp, /*zero_stage=*/3, layout, seed,
//                                                   make_optimizer, Algorithm::kRing));
//   ASSIGN_OR_RETURN(auto gpt, GPT::Create(config, alloc, zero.get()));
//   ... gpt->Forward / Backward ...
//   ASSIGN_OR_RETURN(double norm, zero->Step(lr, grad_clip));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/parameters.h"
#include "model/weights.h"
#include "optim/optimizer.h"
#include "parallel/tensor_parallel.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/algorithms/partition.h"

namespace tally::parallel {

// A run of the buffer that ZeRO cuts among the ranks of a group on its own.
struct ZeroUnit {
  comm::Chunk chunk;
  // Experts' tensors only, cut over the expert-data-parallel group (the ranks that hold the
  // same experts) under expert parallelism; otherwise cut over the dp group.
  bool experts = false;
};

// This rank's shard of a buffer cut into `units` (which tile it, in order).
class Sharding {
 public:
  // The ranks of a group that cuts units, and this one's place among them.
  struct Cut {
    int ranks = 1;
    int rank = 0;
  };
  struct Piece {
    comm::Chunk unit;    // the unit, in buffer coordinates
    comm::Chunk own;     // the rank's chunk of it, in buffer coordinates
    int64_t packed = 0;  // where the chunk starts in the packed shard
    bool experts = false;  // cut by the `experts` group
  };
  // Units without experts cut by `dense`, the experts' by `experts`.
  Sharding(const std::vector<ZeroUnit>& units, Cut dense, Cut experts);
  // Every unit cut by one group.
  Sharding(const std::vector<ZeroUnit>& units, int ranks, int rank)
      : Sharding(units, {ranks, rank}, {ranks, rank}) {}

  const std::vector<Piece>& pieces() const { return pieces_; }
  int64_t size() const { return size_; }  // elements of the packed shard

 private:
  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

// The units ZeRO stage `zero_stage` cuts `layout`'s buffer into. With `expert_parallel`
// each is cut further into runs of experts' tensors and runs of the others, so that the
// two kinds can be sharded over different groups.
std::vector<ZeroUnit> ZeroUnits(const model::ParameterLayout& layout, int zero_stage,
                                bool expert_parallel = false);
// The chunks of the `units` that hold experts' tensors (`experts`), or of the others.
std::vector<comm::Chunk> ChunksOf(const std::vector<ZeroUnit>& units, bool experts);

// How many times one step of ZeRO stage `zero_stage` calls `primitive` on each unit under `phase`,
// with `micro_batches` micro-batches per rank (0: never); `recompute`: a pipeline stage
// recomputes its forward in backward (ZeRO-3 gathers for it too).
int ZeroCallsPerStep(int zero_stage, int micro_batches, comm::Primitive primitive, comm::Phase phase,
                     bool recompute = false);
// The exact bytes rank `rank` of `ranks` sends in those calls in one step over `units`
// (ChunksOf(ZeroUnits(...)) of the group's kind): exact_traffic.h summed over the units,
// times the calls.
// `element`: bytes a value of the primitive's buffer (the gradients' wire type for the
// reduce-scatter, the parameters' type for the all-gather).
// `nodes`: the node of each rank, for the hierarchical algorithm.
int64_t ZeroBytesPerStep(std::span<const comm::Chunk> units, int zero_stage, int ranks, int rank,
                         int micro_batches, comm::Algorithm algorithm, comm::Primitive primitive,
                         comm::Phase phase, bool recompute = false, int64_t element = 4,
                         std::span<const int> nodes = {});

// The sharding pieces [first, second) of each model unit (ZeRO-1: every unit in all of
// them).
std::vector<std::pair<size_t, size_t>> PiecesOfUnits(const model::ParameterLayout& layout,
                                                     int zero_stage, bool expert_parallel = false);

class ZeroWeights : public model::WeightStore {
 public:
  using MakeOptimizer = std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(
      int64_t size, Allocator& alloc)>;

  // Parameters initialised from `seed` as the serial model's (ZeRO-3: the own shard only).
  // `layout` is this rank's (its tensor-parallel part of its pipeline stage); `tp` and
  // `stages` (the pipeline group) then join the gradient norm. The weights, gradients
  // and optimizer state live on `device` (the model's), charged to dp's memory ledger.
  // `experts`: under expert parallelism the edp group, which cuts the experts' units
  // (null: none; the dp group cuts every unit).
  static absl::StatusOr<std::unique_ptr<ZeroWeights>> Create(
      comm::Communicator* dp, int zero_stage, const model::ParameterLayout& layout, uint64_t seed,
      MakeOptimizer make_optimizer, comm::Algorithm algorithm, TensorParallel tp = {},
      comm::Communicator* stages = nullptr, Device device = Device::CPU(),
      const model::Precision& precision = {}, comm::Communicator* experts = nullptr);

  absl::StatusOr<float*> Params(int unit) override;
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override;
  absl::Status ReleaseParams(int unit) override;
  absl::StatusOr<float*> OpenGrads(int unit) override;
  absl::Status CloseGrads(int unit) override;
  absl::Status ZeroGrad() override;
  // ZeRO-1: wte's whole gradients (reduce-scattered in Step, after the sum). ZeRO-2/3:
  // this rank's chunk of wte's reduced gradients (wte is a unit of its own on a pipeline
  // stage, so the first and the last stage's chunks line up).
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override;

  // After the last backward of a step: the rest of the step above. Returns the global
  // gradient norm before clipping (clip 0: no clipping).
  absl::StatusOr<double> Step(float lr, float clip);

  // The whole parameters, or optimizer state, on dp rank `root` (empty / null elsewhere),
  // in memory no ledger counts: what a checkpoint holds. Collective over the group. Under
  // expert parallelism the experts' parts go to edp rank `root`, so the ranks of one ep
  // group hold all the experts between them (their other parts: dp rank `root`'s alone).
  absl::StatusOr<Tensor> GatherParams(int root);
  absl::StatusOr<std::unique_ptr<optim::Optimizer>> GatherOptimizer(int root);
  // Keeps this rank's part of whole parameters and (if not null) optimizer state.
  absl::Status Load(const float* params, optim::Optimizer* optimizer);

  int zero_stage() const { return zero_stage_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

  // Overlap (--overlap), the same calls, bytes and sums as without it:
  //   reduce    ZeRO-2/3: a unit's gradient reduce-scatter is posted when backward closes
  //             the unit (Communicator::IReduceScatter) and finished (its chunks added to
  //             the shard, in the same order) when the next unit closes, or before the
  //             shard is read; one unit in flight, its fp32 gradients and reduced chunks
  //             held until then.
  //   prefetch  ZeRO-3 (FSDP's): when the model asks for a unit, the gather of the unit
  //             it will ask for next (the next in its direction: up in forward, down in
  //             backward) is posted at once (IAllGather); at most one unit prefetched,
  //             held in params memory. For one pipeline stage (a stage's recompute asks
  //             out of order).
  void set_overlap(bool reduce, bool prefetch) {
    overlap_reduce_ = reduce && zero_stage_ >= 2;
    prefetch_ = prefetch && zero_stage_ == 3;
  }

 private:
  ZeroWeights(comm::Communicator* dp, comm::Communicator* experts, int zero_stage,
              const model::ParameterLayout& layout, MakeOptimizer make_optimizer,
              comm::Algorithm algorithm, TensorParallel tp, comm::Communicator* stages,
              Device device, const model::Precision& precision);
  // The group that cuts piece `i`.
  comm::Communicator& GroupOf(size_t i) const {
    return sharding_.pieces()[i].experts ? *experts_ : *dp_;
  }
  // Whether this rank receives whole buffers from GatherPiece(..., root) of some piece.
  bool GathersTo(int root) const {
    return dp_->rank() == root || (experts_ != nullptr && experts_->rank() == root);
  }
  // The updated fp32 master weights of the shard, rounded into the parameters' own
  // chunks (nothing without master weights).
  absl::Status PublishShard();
  // The fp32 parameters of the shard the optimizer updates: the master weights, or (fp32)
  // the parameters themselves.
  float* UpdatedParams();
  // Piece `i` of every rank's `shard` (the parameters, or a state of the optimizer)
  // into its place in `whole` on `root` (host memory; empty elsewhere).
  absl::Status GatherPiece(const Tensor& shard, size_t i, const Tensor& whole, int root);
  // Every rank's pieces of `unit` into `into` (its whole size), blocking, or posted into
  // `works` when that is not null.
  absl::Status GatherUnit(int unit, const Tensor& into,
                          std::vector<std::unique_ptr<comm::CollectiveWork>>* works);
  // Adds the reduced chunks of the unit in flight to the shard (overlap_reduce_), after
  // its reduce-scatters are done.
  absl::Status FinishReduce();
  // Posts the gather of the unit after `unit` in the model's direction (prefetch_).
  absl::Status PrefetchAfter(int unit);
  // Waits for the prefetched gather and hands its tensor over (empty when none).
  absl::StatusOr<Tensor> TakePrefetched();
  // Piece `i` of a packed shard.
  Tensor Own(const Tensor& shard, size_t i) const {
    const Sharding::Piece& p = sharding_.pieces()[i];
    return shard.Flat(p.packed, p.packed + p.own.count);
  }

  comm::Communicator* dp_;
  comm::Communicator* experts_;  // the edp group, or null
  Allocator alloc_;  // on the model's device, charged to dp's ledger
  const TensorParallel tp_;
  comm::Communicator* stages_;  // the pipeline group, or null
  const int zero_stage_;
  const model::ParameterLayout layout_;
  const Sharding sharding_;
  MakeOptimizer make_optimizer_;
  const comm::Algorithm algorithm_;  // of every collective here
  const model::Precision precision_;
  const SentAs grads_sent_as_;  // the type the gradients are reduced as
  std::unique_ptr<Kernels> kernels_;  // the device's: gradient sums, norm, clipping
  std::unique_ptr<optim::Optimizer> optimizer_;
  // The packed shard's tensor ranges (of layout_'s specs), and the optimizer's segments
  // of them.
  std::vector<model::TensorRange> ranges_;
  std::vector<optim::Segment> segments_;
  std::vector<optim::Segment> master_segments_;  // the same, over the packed master weights

  Tensor params_;      // ZeRO-1/2: the whole buffer; ZeRO-3: the packed shard
  Tensor master_;      // mixed precision: the packed shard's fp32 master weights
  Tensor grads_;       // ZeRO-1: the whole buffer
  Tensor grad_shard_;  // the reduced gradients of the own shard (ZeRO-1: grads_' front)
  Tensor reduced_;     // one reduced chunk of a unit (ZeRO-1: a step's, in comm memory;
                       // ZeRO-2/3: a micro-batch's)
  std::vector<Tensor> gathered_;    // ZeRO-3: by model unit, while in use
  std::vector<Tensor> open_grads_;  // ZeRO-2/3: by model unit, while open (fp32 gradients)
  // Mixed precision: the fp32 copies the model computes on (bf16 parameters; bf16
  // gradients, which are accumulated from them).
  std::unique_ptr<model::WorkingCopies> working_params_, working_grads_;
  // The pieces [first, second) of each model unit (ZeRO-1: all units in piece 0).
  std::vector<std::pair<size_t, size_t>> pieces_of_unit_;
  // ZeRO-2/3 overlap: the unit whose reduce-scatters are in flight, its gradients, and
  // its reduced chunks (each piece's at its packed offset in in_flight_reduced_).
  bool overlap_reduce_ = false;
  struct Reducing {
    int unit = -1;
    Tensor grads;
    std::vector<SentAs::Pending> pending;
  };
  Reducing reducing_;
  Tensor in_flight_reduced_;
  // ZeRO-3 prefetch: on or off, the unit asked for last, and the gather in flight.
  bool prefetch_ = false;
  int last_unit_ = -1;
  struct Prefetched {
    int unit = -1;
    Tensor gathered;
    std::vector<std::unique_ptr<comm::CollectiveWork>> works;
  };
  Prefetched prefetched_;
};

}  // namespace tally::parallel
