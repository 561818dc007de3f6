#include "optim/optimizer.h"

#include <cmath>

#include "runtime/status_macros.h"

namespace tally::optim {

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::Create(const AdamWOptions& options, int64_t size,
                                                      Allocator& alloc) {
  ASSIGN_OR_RETURN(Tensor m, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  ASSIGN_OR_RETURN(Tensor v, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  return std::unique_ptr<AdamW>(new AdamW(options, std::move(m), std::move(v)));
}

void AdamW::Step(float* params, const float* grads, float lr, const std::vector<Segment>& segments) {
  ++step_;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const double bias1 = 1.0 - std::pow(double(b1), double(step_));
  const double bias2 = 1.0 - std::pow(double(b2), double(step_));
  const float step_size = float(lr / bias1);
  const float bias2_sqrt = float(std::sqrt(bias2));
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const Segment& seg : segments) {
    // torch forms 1 - lr·wd in double and multiplies by it in float.
    const float keep = seg.decay ? float(1.0 - double(lr) * options_.weight_decay) : 1.0f;
    float* w = params + seg.param_shift;
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      float g = grads[i];
      float p = w[i] * keep;
      m[i] = m[i] + (1.0f - b1) * (g - m[i]);  // torch's lerp: m + (1-β1)(g - m)
      v[i] = v[i] * b2 + (1.0f - b2) * g * g;
      float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
      w[i] = p - step_size * (m[i] / denom);
    }
  }
}

absl::StatusOr<std::unique_ptr<SGD>> SGD::Create(const SGDOptions& options, int64_t size,
                                                  Allocator& alloc) {
  ASSIGN_OR_RETURN(Tensor buf, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  return std::unique_ptr<SGD>(new SGD(options, std::move(buf)));
}

void SGD::Step(float* params, const float* grads, float lr, const std::vector<Segment>& segments) {
  ++step_;
  float* b = buf_.data<float>();
  for (const Segment& seg : segments) {
    const float wd = seg.decay ? options_.weight_decay : 0.0f;
    float* w = params + seg.param_shift;
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      float g = grads[i] + wd * w[i];
      b[i] = step_ == 1 ? g : options_.momentum * b[i] + g;
      w[i] -= lr * b[i];
    }
  }
}

}  // namespace tally::optim
