// Optimizers that update a flat range of the parameter buffer.
//
// The range may be the whole buffer (one rank) or a rank's shard of it (ZeRO), so every
// optimizer takes [begin, end) in buffer coordinates, the parameters and gradients of
// exactly that range, and the segments that say which elements decay:
//
//   ASSIGN_OR_RETURN(auto adam, AdamW::Create(options, /*size=*/end - begin, alloc));
//   RETURN_IF_ERROR(adam->Step(params + begin, grads + begin, lr, segments));
//
// segments relative to begin. The state lives on the allocator's device, and the update
// runs there (core/runtime/kernels/kernels.h): params and grads must be on it too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/tensor.h"

namespace tally::optim {

// Elements [begin, end) of the optimizer's range, and whether weight decay applies. The
// gradients and state of element i sit at index i; its parameter at i + param_shift (a
// ZeRO shard packs pieces of the buffer whose parameters may stay where they are).
struct Segment {
  int64_t begin = 0, end = 0;
  bool decay = false;
  int64_t param_shift = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of the parameters of `segments` from grads[0, size), whose elements are
  // `grad_type` (fp32, or bf16: read as fp32), each clipped by `grad_scale` as it is read
  // (times it, rounded to the gradients' type: core/runtime/kernels/kernels.h; the buffer is
  // left as it is). The parameters are fp32: under mixed precision, the master weights.
  virtual absl::Status Step(float* params, const void* grads, DType grad_type, float lr,
                            const std::vector<Segment>& segments, float grad_scale) = 0;
  absl::Status Step(float* params, const void* grads, DType grad_type, float lr,
                    const std::vector<Segment>& segments) {
    return Step(params, grads, grad_type, lr, segments, 1.0f);
  }
  absl::Status Step(float* params, const float* grads, float lr,
                    const std::vector<Segment>& segments) {
    return Step(params, grads, DType::kF32, lr, segments, 1.0f);
  }
  // The state buffers over the range, by torch's names ("exp_avg", "momentum_buffer").
  virtual std::vector<std::pair<std::string, Tensor*>> State() = 0;
  virtual const char* name() const = 0;

  // Updates made so far (AdamW's t).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

 protected:
  int64_t step_ = 0;
};

// Copies the state and step of one optimizer into another of the same kind and size.
absl::Status CopyState(Optimizer& from, Optimizer& to);

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// torch.optim.AdamW, to the letter: decoupled decay p -= lr·wd·p, then
//   m = β1·m + (1-β1)·g,  v = β2·v + (1-β2)·g²
//   p -= lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + eps)     (eps outside the square root)
class AdamW : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<AdamW>> Create(const AdamWOptions& options, int64_t size,
                                                       Allocator& alloc);

  using Optimizer::Step;
  absl::Status Step(float* params, const void* grads, DType grad_type, float lr,
                    const std::vector<Segment>& segments, float grad_scale) override;
  std::vector<std::pair<std::string, Tensor*>> State() override {
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }
  const char* name() const override { return "adamw"; }
  const AdamWOptions& options() const { return options_; }

 private:
  AdamW(const AdamWOptions& options, Tensor m, Tensor v, std::unique_ptr<Kernels> kernels)
      : options_(options), m_(std::move(m)), v_(std::move(v)), kernels_(std::move(kernels)) {}

  AdamWOptions options_;
  Tensor m_, v_;  // first and second moments, charged to optimizer memory
  std::unique_ptr<Kernels> kernels_;
};

struct SGDOptions {
  float momentum = 0.9f, weight_decay = 0.0f;
};

// torch.optim.SGD with momentum (dampening 0, no Nesterov): g += wd·p; b = μ·b + g
// (b = g on the first step); p -= lr·b. Its weight decay is L2 on the decaying segments.
class SGD : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<SGD>> Create(const SGDOptions& options, int64_t size,
                                                     Allocator& alloc);
  using Optimizer::Step;
  absl::Status Step(float* params, const void* grads, DType grad_type, float lr,
                    const std::vector<Segment>& segments, float grad_scale) override;
  std::vector<std::pair<std::string, Tensor*>> State() override {
    return {{"momentum_buffer", &buf_}};
  }
  const char* name() const override { return "sgd"; }

 private:
  SGD(const SGDOptions& options, Tensor buf, std::unique_ptr<Kernels> kernels)
      : options_(options), buf_(std::move(buf)), kernels_(std::move(kernels)) {}

  SGDOptions options_;
  Tensor buf_;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace tally::optim
