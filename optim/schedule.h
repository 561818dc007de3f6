// Learning-rate schedule and gradient clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "optim/optimizer.h"

namespace tally::optim {

// Linear warm-up to `max_lr` over `warmup_steps`, then cosine decay to `min_lr` at
// `total_steps` (nanoGPT's schedule). `step` counts from 0:
//   step < warmup:  max_lr · (step + 1) / warmup
//   otherwise:      min_lr + ½·(1 + cos(π·progress))·(max_lr - min_lr),
//                   progress = (step - warmup) / (total - warmup), clamped to [0, 1]
float LearningRate(int64_t step, int64_t warmup_steps, int64_t total_steps, float max_lr,
                   float min_lr);

// Σ g² over `segments` of grads, in double, skipping the segments marked replica unless
// `count_replicas` (tensor-parallel copies count on one rank only), with the kernels of
// the gradients' device.
absl::StatusOr<double> SquaredNorm(Kernels& k, const float* grads,
                                   const std::vector<Segment>& segments, bool count_replicas);

// torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6) when that is below 1,
// else 1. Returns the factor to multiply every gradient by.
float ClipScale(double global_norm, float max_norm);

}  // namespace tally::optim
