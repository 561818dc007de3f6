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
//   GradientSync sync(dp, layout.total(), /*bucket_bytes=*/25 << 20, Algorithm::kRing);
//   sync.BeginStep();
//   RETURN_IF_ERROR(gpt.Backward(dloss, [&](int64_t b, int64_t e) {
//     return sync.Ready(gpt.grads(), b, e);
//   }));
//   RETURN_IF_ERROR(sync.Finish(grads));
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
#include "runtime/comm/communicator.h"
#include "optim/optimizer.h"
#include "parallel/tensor_parallel.h"
#include "parallel/sent_as.h"
#include "runtime/comm/algorithms/partition.h"

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

// Bytes rank `dp_rank` of `dp` ranks sends per step to sum the gradients of `params`
// parameters in buckets of `bucket_bytes` with `algorithm` (exact_traffic.h per bucket;
// with the ring and dp dividing every bucket, 2(dp−1)/dp·4·params; 2 bytes a value when the
// gradients travel as bf16).
// `nodes`: the node of each dp rank, for the hierarchical algorithm (exact_traffic.h).
int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm, DType comm_type = DType::kF32,
                                 std::span<const int> nodes = {});
// The same for the buckets of `ranges`.
int64_t GradientSyncBytesPerStep(std::span<const comm::Chunk> ranges, int dp, int dp_rank,
                                 int64_t bucket_bytes, comm::Algorithm algorithm,
                                 DType comm_type = DType::kF32, std::span<const int> nodes = {});

// The global gradient norm, for clipping: Σ g² of this rank's `grads` over `ranges`
// (tensors every tp rank holds alike counted on tp rank 0 only, the last stage's copy of
// the tied embedding never), summed over `shards` (the dp group
// when each rank holds a ZeRO shard of the gradients; null when it holds them all) and
// over the tp group, in double; booked under phase optimizer, scope grad_norm.
// `stages`: the pipeline group, whose stages hold different layers (null: none). `k`:
// the kernels of the gradients' device.
// The groups a rank's gradients are split over, for their global norm: `shards` (the dp
// group under ZeRO, whose ranks hold shards of them; null otherwise), the tensor-parallel
// group (`tp`, not null) and the pipeline's stages (null: none); their all-reduces use
// `algorithm`.
struct GradientGroups {
  comm::Communicator* shards = nullptr;
  const TensorParallel* tp = nullptr;
  comm::Algorithm algorithm = comm::Algorithm::kRing;
  comm::Communicator* stages = nullptr;
  // Expert parallelism's group, whose ranks hold different experts (null: none).
  comm::Communicator* experts = nullptr;
};

// The end of every step, whoever holds the gradients (a replica's whole buffer, or a
// ZeRO shard): under sequence parallelism the per-token replicas' sum
// (SumPerTokenGradients), the global gradient norm (GlobalGradientNorm), clipping to
// `clip` by torch's rule (0: off; applied as the optimizer reads each gradient, which
// leaves `grads` unclipped), and the optimizer's update of `params` (fp32: the master
// weights under mixed precision) over `segments` with learning rate `lr`. The gradients
// may be fp32 or bf16. Returns the norm before clipping.
absl::StatusOr<double> ClipAndStep(Kernels& k, optim::Optimizer& optimizer, float* params,
                                   Tensor& grads, const std::vector<model::TensorRange>& ranges,
                                   const std::vector<optim::Segment>& segments, float lr, float clip,
                                   const GradientGroups& groups);

absl::StatusOr<double> GlobalGradientNorm(Kernels& k, const Tensor& grads,
                                          const std::vector<model::TensorRange>& ranges,
                                          comm::Communicator* shards, const TensorParallel& tp,
                                          comm::Algorithm algorithm,
                                          comm::Communicator* stages = nullptr,
                                          comm::Communicator* experts = nullptr);

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
  std::vector<SentAs::Pending> in_flight_;  // the buckets posted and not yet waited for
};

}  // namespace tally::parallel
