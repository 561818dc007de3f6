// The seam a replica's compressed sum plugs in at, as a communication hook does in PyTorch
// DDP (register_comm_hook): from the step it takes over, the hook has the step's gradients
// in place of the buckets' all-reduces (data_parallel.h). PowerSGD (powersgd.h:
// PowerSgdHook) and 1-bit Adam (onebit_adam.h: OneBitAdamHook) are hooks; the replica
// knows neither.
//
//   ReplicaConfig config;
//   config.dp = dp;
//   config.hook = [&](const model::ParameterLayout& layout,
//                     std::unique_ptr<optim::Optimizer>& optimizer, Allocator& alloc)
//       -> absl::StatusOr<std::unique_ptr<GradientHook>> { ... };
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/parameters.h"
#include "optim/optimizer.h"
#include "parallel/compression_error.h"
#include "runtime/allocator.h"
#include "runtime/tensor.h"

namespace tally::parallel {

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
  // What a checkpoint keeps of it (train/checkpoints.cc), by name.
  virtual std::vector<std::pair<std::string, Tensor*>> State() = 0;
};

// Makes a replica's hook, once its optimizer is made (which the hook may wrap: 1-bit
// Adam is an optimizer), its buffers in `alloc`.
using MakeGradientHook = std::function<absl::StatusOr<std::unique_ptr<GradientHook>>(
    const model::ParameterLayout& layout, std::unique_ptr<optim::Optimizer>& optimizer,
    Allocator& alloc)>;

}  // namespace tally::parallel
