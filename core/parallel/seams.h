// The seams a strategy's variants plug in at, so that the strategy a reader studies holds
// none of them. The core makes the plain form of each; the variants (extensions/) make
// others, which the trainer hands in (core/train/extensions.h).
//
//   GradientHook       a replica's whole gradient sum, as a communication hook does in
//                      PyTorch DDP (register_comm_hook): data parallelism (data_parallel.h)
//                      takes it in place of the buckets' all-reduces.
//   GradientReducer    a ZeRO unit's gradients summed, each rank keeping its chunk
//                      (zero/zero.h): the core's is the reduce-scatter.
//   ParameterGatherer  a ZeRO-3 unit's parameters, whole, from every rank's chunk: the
//                      core's is the all-gather.
//
//   ZeroConfig config{.stage = 3, .dp = dp};
//   config.gatherer = std::make_shared<MyGatherer>(...);  // null: the all-gather
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/optim/optimizer.h"
#include "core/parallel/compression_error.h"
#include "core/runtime/allocator.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

// A replica's compressed sum. From the step it takes over, the hook has the step's
// gradients in place of the buckets' all-reduces.
class GradientHook {
 public:
  virtual ~GradientHook() = default;
  // Whether the step after `steps` optimizer steps is the hook's (past its warm-up).
  virtual bool Takes(int64_t steps) const = 0;
  // The end of such a step's backward: `grads` (fp32, the whole replica's, this rank's
  // own) become what the optimizer steps on, instead of the buckets' sum.
  virtual absl::Status Reduce(Tensor& grads) = 0;
  // The compression's error of the last step, once the optimizer has stepped
  // (compression_error.h).
  virtual ErrorSums error_sums() const = 0;
  // What a checkpoint keeps of it (core/train/checkpoints.cc), by name.
  virtual std::vector<std::pair<std::string, Tensor*>> State() = 0;
};

// Makes a replica's hook, once its optimizer is made (which the hook may wrap: an
// optimizer that compresses is one), its buffers in `alloc`.
using MakeGradientHook = std::function<absl::StatusOr<std::unique_ptr<GradientHook>>(
    const model::ParameterLayout& layout, std::unique_ptr<optim::Optimizer>& optimizer,
    Allocator& alloc)>;

// A call a seam posted, finished by calling it (a collective's Wait, and what comes
// after it).
using Posted = absl::AnyInvocable<absl::Status()>;

// A unit's gradients summed over a group, this rank keeping its chunk: ZeRO's
// reduce-scatter, one piece of a unit at a time (zero/sharding.h's words).
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // The type a reduced chunk comes in, when the gradients are sent as `wire`.
  virtual DType ReducedType(DType wire) const { return wire; }
  // Whether IReduceScatter posts (false: the store reduces blocking under --overlap too).
  virtual bool Posts() const { return true; }
  // `grads` (a piece's n values on every rank of `group`, of the gradients' type) summed
  // into `reduced`, this rank's chunk ChunkOf(n, p, rank), of ReducedType.
  virtual absl::Status ReduceScatter(comm::Communicator& group, const Tensor& grads,
                                     const Tensor& reduced) = 0;
  // The same, posted: `reduced` holds the sum once the returned call is finished.
  virtual absl::StatusOr<Posted> IReduceScatter(comm::Communicator& group, const Tensor& grads,
                                                const Tensor& reduced) = 0;
  // After the last backward of a step, every chunk in `shard` (the reduced gradient
  // shard), before the gradient norm.
  virtual absl::Status Complete(const Tensor& /*shard*/) { return absl::OkStatus(); }
  // The error of the step's reduce-scatters (compression_error.h), which it forgets.
  virtual ErrorSums TakeError() { return {}; }
};

// One piece of a ZeRO-3 unit to gather: every rank of `group` holds its chunk of it.
struct PieceToGather {
  int unit = 0;      // the model unit
  size_t index = 0;  // the piece's, in the store's sharding
  comm::Communicator* group = nullptr;
  Tensor mine;   // this rank's chunk (its place in the shard)
  Tensor whole;  // where every rank's chunks go, in order
};

// A unit's parameters, whole, from every rank's chunk.
class ParameterGatherer {
 public:
  virtual ~ParameterGatherer() = default;
  // Every rank's chunk of `piece` into its whole: blocking when `posted` is null, else
  // posted and appended to it.
  virtual absl::Status Gather(const PieceToGather& piece, std::vector<Posted>* posted) = 0;
  // A unit gathered fresh in forward (pieces [first, second) of the store's sharding),
  // before the model computes on `whole`.
  virtual absl::Status Gathered(int /*unit*/, const Tensor& /*whole*/, size_t /*first*/,
                                size_t /*second*/) {
    return absl::OkStatus();
  }
  // The error of what the step's gathers carried of the shard's piece `own`
  // (compression_error.h): asked once a step, for every piece, in order.
  virtual ErrorSums ErrorOf(const Tensor& /*own*/) const { return {}; }
};

// Makes a ZeRO-3 store's gatherer, for its `layout`, its buffers in `alloc` (the
// parameters' memory) of the parameters' type `params`.
using MakeParameterGatherer = std::function<absl::StatusOr<std::unique_ptr<ParameterGatherer>>(
    const model::ParameterLayout& layout, Allocator& alloc, DType params)>;

}  // namespace tally::parallel
