// Optimizers that update a flat range of the parameter buffer.
//
// The range may be the whole buffer (one rank) or a rank's shard of it (ZeRO), so every
// optimizer takes [begin, end) in buffer coordinates, the parameters and gradients of
// exactly that range, and the segments that say which elements decay:
//
//   AdamW adam(options, /*size=*/end - begin, alloc);   // m and v for the range only
//   adam.Step(params + begin, grads + begin, lr, DecaySegments(layout, begin, end));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/tensor.h"

namespace tally::optim {

// Elements [begin, end) of the optimizer's range, and whether weight decay applies.
struct Segment {
  int64_t begin = 0, end = 0;
  bool decay = false;
};

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// torch.optim.AdamW, to the letter: decoupled decay p -= lr·wd·p, then
//   m = β1·m + (1-β1)·g,  v = β2·v + (1-β2)·g²
//   p -= lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + eps)     (eps outside the square root)
class AdamW {
 public:
  static absl::StatusOr<AdamW> Create(const AdamWOptions& options, int64_t size, Allocator& alloc);

  // One step (t = step() + 1 afterwards) over params[0, size), grads[0, size).
  void Step(float* params, const float* grads, float lr, const std::vector<Segment>& segments);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  const AdamWOptions& options() const { return options_; }

 private:
  AdamW(const AdamWOptions& options, Tensor m, Tensor v)
      : options_(options), m_(std::move(m)), v_(std::move(v)) {}

  AdamWOptions options_;
  Tensor m_, v_;  // first and second moments, charged to optimizer memory
  int64_t step_ = 0;
};

struct SGDOptions {
  float momentum = 0.9f, weight_decay = 0.0f;
};

// torch.optim.SGD with momentum (dampening 0, no Nesterov): g += wd·p; b = μ·b + g
// (b = g on the first step); p -= lr·b. Its weight decay is L2 on the decaying segments.
class SGD {
 public:
  static absl::StatusOr<SGD> Create(const SGDOptions& options, int64_t size, Allocator& alloc);
  void Step(float* params, const float* grads, float lr, const std::vector<Segment>& segments);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  Tensor& momentum() { return buf_; }

 private:
  SGD(const SGDOptions& options, Tensor buf) : options_(options), buf_(std::move(buf)) {}

  SGDOptions options_;
  Tensor buf_;
  int64_t step_ = 0;
};

}  // namespace tally::optim
