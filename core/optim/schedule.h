// Learning-rate schedule and gradient clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "core/optim/optimizer.h"

namespace tally::optim {

// The learning rate of 1-based step k of N (the k-th optimizer step), with W warm-up
// steps: a linear warm-up to `max_lr`, then a cosine decay that reaches `min_lr` exactly
// at the last step:
//   k <= W:  max_lr · k / W
//   k >  W:  min_lr + (max_lr - min_lr) · ½·(1 + cos(π·(k - W) / (N - W)))
// (the warm-up in float, as written; the decay in double, rounded to float once, with
// (k - W)/(N - W) clamped to [0, 1]).
float LearningRate(int64_t k, int64_t warmup_steps, int64_t total_steps, float max_lr,
                   float min_lr);

// Σ g² over `segments` of grads (fp32 or bf16, `grad_type`), in double, segment after
// segment, with the kernels of the gradients' device.
absl::StatusOr<double> SquaredNorm(Kernels& k, const void* grads, DType grad_type,
                                   const std::vector<Segment>& segments);

// torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6) when that is below 1,
// else 1. Returns the factor to multiply every gradient by.
float ClipScale(double global_norm, float max_norm);

}  // namespace tally::optim
