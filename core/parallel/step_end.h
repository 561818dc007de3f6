// The end of every step, whoever holds the gradients, and the one interface the trainer
// steps them through.
//
// After the step's last backward, every strategy does the same four things, in order:
//   1. under sequence parallelism, the per-token replicas' gradients (LayerNorms, the
//      position table), which each tp rank computed from its own tokens, are summed over
//      the tp group: one all-reduce of their packed values (label sequence_parallel,
//      phase backward);
//   2. the global gradient norm: each rank's Σg² in double over the tensors it counts
//      (a tensor every tp rank holds alike on tp rank 0 only; the last pipeline stage's
//      copy of the tied embedding never), all-reduced over every group whose ranks hold
//      different gradients (ZeRO's shards, the tp group, the pipeline's stages, the ep
//      group for the experts' squares); one 8-byte value each (label grad_norm, phase
//      optimizer); the norm is its square root;
//   3. clipping by torch's rule: scale = clip / (norm + 1e-6) when norm > clip (0: off),
//      applied as the optimizer reads each gradient (the gradients stay unclipped);
//   4. the optimizer's update of the fp32 parameters (the master weights under mixed
//      precision), which the store then rounds into the parameters the model reads.
//
//   ASSIGN_OR_RETURN(auto store, ReplicaWeights::Create(config, layout, seed, optimizer));
//   ASSIGN_OR_RETURN(auto gpt, model::GPT::Create(model_config, alloc, store.get()));
//   RETURN_IF_ERROR(gpt->ZeroGrad());
//   ... forwards and backwards; before the last backward: store->BeginLastBackward() ...
//   RETURN_IF_ERROR(store->EndBackward());
//   ASSIGN_OR_RETURN(double norm, store->Step(lr, grad_clip));
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/model/weights.h"
#include "core/optim/optimizer.h"
#include "core/parallel/compression_error.h"
#include "core/parallel/tensor_parallel.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

// The groups a rank's gradients are split over, for their global norm: `shards` (the dp
// group under ZeRO, whose ranks hold shards of them; null otherwise), the tensor-parallel
// group (`tp`, not null), the pipeline's stages and expert parallelism's group, whose
// ranks hold different layers and experts (null: none). Their all-reduces use `algorithm`.
struct GradientGroups {
  comm::Communicator* shards = nullptr;
  const TensorParallel* tp = nullptr;
  comm::Algorithm algorithm = comm::Algorithm::kRing;
  comm::Communicator* stages = nullptr;
  comm::Communicator* experts = nullptr;
};

// Step 1: under sequence parallelism, sums the gradients of the per-token replicas (the
// ranges whose spec is per_token) over the tp group, in place. Otherwise nothing.
absl::Status SumPerTokenGradients(const TensorParallel& tp, const Tensor& grads,
                                  const std::vector<model::TensorRange>& ranges);

// Step 2: the global norm of this rank's `grads` (fp32 or bf16) over `ranges`, its
// squares summed over `groups` as above. `k`: the kernels of the gradients' device.
absl::StatusOr<double> GlobalGradientNorm(Kernels& k, const Tensor& grads,
                                          const std::vector<model::TensorRange>& ranges,
                                          const GradientGroups& groups);

// Steps 1 to 3 and the update of `params` over `segments` with learning rate `lr`.
// Returns the norm before clipping.
absl::StatusOr<double> ClipAndStep(Kernels& k, optim::Optimizer& optimizer, float* params,
                                   Tensor& grads, const std::vector<model::TensorRange>& ranges,
                                   const std::vector<optim::Segment>& segments, float lr, float clip,
                                   const GradientGroups& groups);

// Steps 1 and 2 as data (core/runtime/comm/ledger/expected_calls.h), with the trainer's sum of
// the step's loss (one float over the dp group and over the pipeline's stages, label
// loss, phase other): the calls of a rank's step end over each group (a group of one
// rank sends nothing). Under ZeRO (`shards`) the norm's squares are summed over the group
// that cuts the shards too: the dp group, or under HSDP the dp_shard group (`shard`).
struct StepEndShape {
  struct Group {
    int ranks = 1, rank = 0;
    // The node of each rank, for the hierarchical algorithm (empty: unknown).
    std::vector<int> nodes = {};
  };
  Group dp, tp, pp, ep;
  bool shards = false;
  std::optional<Group> shard = std::nullopt;  // HSDP's dp_shard group (zero/zero.h)
  bool sequence_parallel = false;
  int64_t per_token_elements = 0;  // the per-token replicas' values this rank's optimizer sees
  int64_t grad_bytes = 4;          // a gradient's bytes (bf16: 2)
};
comm::ExpectedCalls StepEndCalls(const StepEndShape& shape);

// A rank's weights as training holds them: the store the model reads and adds into
// (core/model/weights.h), and what it does with the gradients at the end of a step. Data
// parallelism's replicas (data_parallel.h) and ZeRO's stages (zero/zero.h) are the two.
class TrainableWeights : public model::WeightStore {
 public:
  // Makes the optimizer of `size` elements in `alloc` (the run's AdamW or SGD).
  using MakeOptimizer = std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(
      int64_t size, Allocator& alloc)>;

  // The next backward is the step's last (the earlier ones only accumulate, as under
  // DDP's no_sync): a store that reduces gradients as backward finishes them may start.
  // Under a pipeline nobody calls it: every gradient waits for EndBackward.
  virtual void BeginLastBackward() {}
  // Every backward of the step has run (and, under a pipeline, the tied embedding's
  // sum): whatever reduction of the gradients is still to do before Step's.
  virtual absl::Status EndBackward() { return absl::OkStatus(); }
  // The rest of the step (the four steps above, over what this rank holds). Returns the
  // norm before clipping.
  virtual absl::StatusOr<double> Step(float lr, float clip) = 0;
  virtual optim::Optimizer& optimizer() = 0;
  // With compression (ZeRO++'s qwZ, PowerSGD): this rank's error sums of the step just
  // stepped (compression_error.h; zeros on a step that sent everything as it was).
  virtual ErrorSums CompressionError() const { return {}; }
  // The state the compression keeps on this rank across steps (PowerSGD's E and Q,
  // 1-bit Adam's errors), by name, for checkpoints; empty without one.
  virtual std::vector<std::pair<std::string, Tensor*>> CompressionState() { return {}; }

  // For checkpoints, collective over the store's group: this rank's part of the whole
  // parameters (and optimizer state), in host memory no ledger counts, on the ranks whose
  // part a checkpoint takes (dp rank 0, and under expert parallelism the other experts of
  // dp ranks < ep); empty elsewhere.
  struct Part {
    Tensor params;                          // fp32, this rank's layout
    optim::Optimizer* optimizer = nullptr;  // the live one, or `gathered`
    std::unique_ptr<optim::Optimizer> gathered;
  };
  virtual absl::StatusOr<Part> GatherPart(bool with_optimizer) = 0;
  // Keeps this rank's part of whole parameters and (if not null) optimizer state.
  virtual absl::Status Load(const float* params, optim::Optimizer* optimizer) = 0;
};

}  // namespace tally::parallel
