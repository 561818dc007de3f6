// One AdamW step's scalars, as every device's kernels take them (core/optim/optimizer.h works
// them out; torch's order of operations):
//   p ← p·keep;  m ← m + (1-β1)(g - m);  v ← β2·v + (1-β2)·g²;
//   p ← p - step_size · m / (√v / bias2_sqrt + eps)
#pragma once

namespace tally {

struct AdamWArgs {
  float keep, step_size, beta1, beta2, eps, bias2_sqrt;
  // The gradients' clipping factor: g = grad·grad_scale, rounded to the gradients' type
  // (core/runtime/kernels/kernels.h).
  float grad_scale = 1.0f;
};

}  // namespace tally
