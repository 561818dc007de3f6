// Data parallelism: every rank holds the whole model, trains on its share of the global
// batch, and the gradients are summed over the data-parallel group before the update.
//
// Each token's loss is weighted 1 / (tokens of the global batch) on every rank (the
// trainer does that), so the SUM of the ranks' gradients is the gradient of the global
// mean loss, the same as one rank computing the whole batch.
//
// Gradients are summed bucket by bucket, in the order backward finishes them (the end of
// the flat buffer first: ln_f, the last layer, ..., the embeddings), as PyTorch DDP
// does: a bucket is all-reduced as soon as every gradient in it is final. The bytes do
// not depend on the bucket size; the number of calls does.
//
// ReplicaWeights is the rank's store of its whole replica (core/model/weights.h) with the sync
// inside: a unit's gradients are final when backward has closed them and released the
// unit's parameters (ReleaseParams), and that is when its buckets go.
//
//   ReplicaConfig config;
//   config.dp = dp;                  // the rest: ring, 25 MiB buckets, fp32, blocking
//   ASSIGN_OR_RETURN(auto store, ReplicaWeights::Create(config, layout, seed, make_optimizer));
//   ASSIGN_OR_RETURN(auto gpt, model::GPT::Create(model_config, alloc, store.get()));
//   store->BeginLastBackward();      // the step's last micro-batch
//   RETURN_IF_ERROR(gpt->Backward(dloss));
//   RETURN_IF_ERROR(store->EndBackward());
//   ASSIGN_OR_RETURN(double norm, store->Step(lr, grad_clip));   // step_end.h
//
// Bytes per rank per step, Φ parameters, p ranks, ring: Σ over buckets of 2(p-1)/p of the
// bucket's bytes (exactly: exact_traffic.h per bucket), i.e. 2(p-1)/p·4Φ when p divides
// every bucket; naive (reduce to the root, then broadcast): the root sends (p-1)·4Φ,
// every other rank 4Φ.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/model/parameters.h"
#include "core/model/precision.h"
#include "core/model/weights.h"
#include "core/optim/optimizer.h"
#include "core/parallel/seams.h"
#include "core/parallel/sent_as.h"
#include "core/parallel/step_end.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"

namespace tally::parallel {

// The buckets of a flat buffer of `total` elements: ranges of at most `bucket_elements`,
// cut from the end of the buffer toward its start, in that order.
std::vector<comm::Chunk> GradientBuckets(int64_t total, int64_t bucket_elements);
// The same for several ranges of a buffer, each cut on its own, the last range's first.
std::vector<comm::Chunk> GradientBuckets(std::span<const comm::Chunk> ranges,
                                         int64_t bucket_elements);
// The runs of a layout's buffer that hold experts' tensors (`experts`), or the others:
// under expert parallelism the first are summed over the expert-data-parallel group,
// the second over the data-parallel group.
std::vector<comm::Chunk> ExpertRanges(const model::ParameterLayout& layout, bool experts);

// One step's gradient sums as data (core/runtime/comm/ledger/expected_calls.h): an
// all-reduce of each bucket of `ranges` (phase backward, no scope) over `group` (dp, or
// edp for the experts' ranges), `element` bytes a value (2 when the gradients travel as
// bf16). `nodes`: the node of each rank, for the hierarchical algorithm.
struct GradientSyncShape {
  const char* group = "";
  int ranks = 1, rank = 0;
  std::vector<int> nodes = {};
  int64_t bucket_bytes = 0;
  int64_t element = 4;
};
comm::ExpectedCalls GradientSyncCalls(std::span<const comm::Chunk> ranges,
                                      const GradientSyncShape& shape);

// Their bytes: what rank `dp_rank` of `dp` ranks sends per step to sum the gradients of
// `params` parameters in buckets of `bucket_bytes` with `algorithm` (exact_traffic.h per
// bucket; with the ring and dp dividing every bucket, 2(dp−1)/dp·4·params).
int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm, DType comm_type = DType::kF32,
                                 std::span<const int> nodes = {});
// The same for the buckets of `ranges`.
int64_t GradientSyncBytesPerStep(std::span<const comm::Chunk> ranges, int dp, int dp_rank,
                                 int64_t bucket_bytes, comm::Algorithm algorithm,
                                 DType comm_type = DType::kF32, std::span<const int> nodes = {});

class GradientSync {
 public:
  // Buckets of bucket_bytes of `comm_type` values (the type the all-reduces move: the
  // gradients', or another, converted into a bucket-sized buffer and back).
  // With `overlap`, a bucket's all-reduce is posted as soon as it is complete and runs
  // while backward goes on (Communicator::IAllReduce; PyTorch DDP's overlap); Finish
  // waits for them all. The sums are the blocking call's, bit for bit.
  GradientSync(comm::Communicator* dp, int64_t total, int64_t bucket_bytes,
               comm::Algorithm algorithm, DType comm_type = DType::kF32, bool overlap = false);
  // Only `ranges` of the buffer (each cut into buckets on its own; expert parallelism's
  // two syncs, ExpertRanges).
  GradientSync(comm::Communicator* dp, const std::vector<comm::Chunk>& ranges,
               int64_t bucket_bytes, comm::Algorithm algorithm, DType comm_type = DType::kF32,
               bool overlap = false);

  // Call before the backward of the last micro-batch of a step (the earlier micro-batches
  // only accumulate, like DDP's no_sync()).
  void BeginStep() { next_bucket_ = 0; }
  // Gradients [begin, end) are final; all-reduces every bucket that is now complete.
  absl::Status Ready(const Tensor& grads, int64_t begin, int64_t end);
  // All-reduces whatever is left (everything, when Ready was never called).
  absl::Status Finish(const Tensor& grads);

  const std::vector<comm::Chunk>& buckets() const { return buckets_; }

 private:
  absl::Status ReduceBucketsFrom(const Tensor& grads, int64_t ready_from);

  comm::Communicator* dp_;
  comm::Algorithm algorithm_;
  SentAs sent_as_;  // the type the buckets travel as
  std::vector<comm::Chunk> buckets_;
  size_t next_bucket_ = 0;
  bool overlap_;
  std::vector<SentAs::Work> in_flight_;  // the buckets posted and not yet waited for
};

// Who a replica's gradients are summed with, and how.
struct ReplicaConfig {
  comm::Communicator* dp = nullptr;  // the data-parallel group (null: one replica, no sync)
  // Expert parallelism (null: none): its group, whose ranks hold different experts (their
  // gradients are then summed over `edp`, the ranks holding the same experts, and the
  // rest over dp; ExpertRanges), and the expert-data-parallel group (null when each rank
  // holds its own experts).
  comm::Communicator* ep = nullptr;
  comm::Communicator* edp = nullptr;
  TensorParallel tp;                     // joins the gradient norm
  comm::Communicator* stages = nullptr;  // the pipeline group, which joins it too (or null)
  int64_t bucket_bytes = 25 << 20;
  comm::Algorithm algorithm = comm::Algorithm::kRing;  // of the buckets' all-reduces
  DType grad_comm = DType::kF32;                       // the type they travel as
  bool overlap = false;                                // buckets in flight during backward
  model::Precision precision;
  // Whether a checkpoint takes this rank's part: dp rank 0's, and under expert
  // parallelism the other experts of dp ranks < ep.
  bool checkpointed = true;
  // What takes the sum's place once past its warm-up (seams.h; null: nothing,
  // the buckets always): a compressed sum. Made once the optimizer is.
  MakeGradientHook hook;
};

class ReplicaWeights final : public TrainableWeights {
 public:
  // The whole parameters of `layout` initialised from `seed` (core/model/parameters.h) in
  // `alloc` (the model's device), its gradients, and the optimizer over them.
  static absl::StatusOr<std::unique_ptr<ReplicaWeights>> Create(const ReplicaConfig& config,
                                                                const model::ParameterLayout& layout,
                                                                uint64_t seed, Allocator& alloc,
                                                                MakeOptimizer make_optimizer);

  absl::StatusOr<float*> Params(int unit) override { return replica_->Params(unit); }
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override { return replica_->Stored(unit); }
  // Also, after the step's last backward closed the unit's gradients: its buckets' sums.
  absl::Status ReleaseParams(int unit) override;
  absl::StatusOr<float*> OpenGrads(int unit) override { return replica_->OpenGrads(unit); }
  absl::Status CloseGrads(int unit) override;
  absl::Status ZeroGrad() override;
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override { return replica_->TiedEmbeddingGrads(); }

  void BeginLastBackward() override { last_backward_ = true; }
  // The buckets not summed yet (all of them under a pipeline).
  absl::Status EndBackward() override;
  // The norm over tp, the stages and ep (ring), clipping, the update of the master
  // weights, and their rounding into the parameters (mixed precision).
  absl::StatusOr<double> Step(float lr, float clip) override;
  optim::Optimizer& optimizer() override { return *optimizer_; }
  ErrorSums CompressionError() const override { return error_sums_; }
  std::vector<std::pair<std::string, Tensor*>> CompressionState() override {
    return hook_ != nullptr ? hook_->State() : std::vector<std::pair<std::string, Tensor*>>{};
  }
  absl::StatusOr<Part> GatherPart(bool with_optimizer) override;
  absl::Status Load(const float* params, optim::Optimizer* optimizer) override;

  // The whole buffers: the fp32 parameters (the master weights under mixed precision)
  // and the gradients.
  Tensor& params() { return replica_->master(); }
  Tensor& grads() { return replica_->grads(); }

 private:
  ReplicaWeights(const ReplicaConfig& config, const model::ParameterLayout& layout)
      : config_(config), layout_(layout) {}

  const ReplicaConfig config_;
  const model::ParameterLayout layout_;
  MakeOptimizer make_optimizer_;
  std::unique_ptr<model::Replica> replica_;
  std::unique_ptr<Kernels> kernels_;  // the device's: the norm
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<model::TensorRange> ranges_;
  std::vector<optim::Segment> segments_;
  // The sums over dp (under expert parallelism of the other tensors only) and over edp
  // (the experts'); null where there is no such group.
  std::unique_ptr<GradientSync> sync_, expert_sync_;
  std::unique_ptr<GradientHook> hook_;  // null: none
  ErrorSums error_sums_;                // the hook's, of the step
  // Whether this step's sum is the hook's (past its warm-up), not the buckets'.
  bool Hooked() const { return hook_ != nullptr && hook_->Takes(optimizer_->step()); }
  bool last_backward_ = false;  // the step's last backward is running
  int closed_ = -1;             // the unit whose gradients it closed last, until released
};

}  // namespace tally::parallel
