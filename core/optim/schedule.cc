#include "core/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/runtime/status_macros.h"

namespace tally::optim {

float LearningRate(int64_t k, int64_t warmup_steps, int64_t total_steps, float max_lr,
                   float min_lr) {
  if (k <= warmup_steps) return max_lr * float(k) / float(warmup_steps);
  double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  double progress = std::clamp(double(k - warmup_steps) / span, 0.0, 1.0);
  return float(min_lr + (double(max_lr) - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

absl::StatusOr<double> SquaredNorm(Kernels& k, const void* grads, DType grad_type,
                                   const std::vector<Segment>& segments) {
  double sum = 0;
  const char* bytes = static_cast<const char*>(grads);
  for (const Segment& s : segments) {
    ASSIGN_OR_RETURN(sum, k.AddSquares(bytes + s.begin * int64_t(SizeOf(grad_type)), grad_type,
                                       s.end - s.begin, sum));
  }
  return sum;
}

float ClipScale(double global_norm, float max_norm) {
  double coef = max_norm / (global_norm + 1e-6);
  return coef < 1.0 ? float(coef) : 1.0f;
}

}  // namespace tally::optim
