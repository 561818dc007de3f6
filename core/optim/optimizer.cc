#include "core/optim/optimizer.h"

#include <cmath>

#include "core/runtime/status_macros.h"

namespace tally::optim {
namespace {

// Element i of a buffer of `type`.
const void* At(const void* data, DType type, int64_t i) {
  return static_cast<const char*>(data) + i * int64_t(SizeOf(type));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::Create(const AdamWOptions& options, int64_t size,
                                                      Allocator& alloc) {
  ASSIGN_OR_RETURN(Tensor m, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  ASSIGN_OR_RETURN(Tensor v, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels, Kernels::Create(alloc.device()));
  return std::unique_ptr<AdamW>(new AdamW(options, std::move(m), std::move(v), std::move(kernels)));
}

absl::Status AdamW::Step(float* params, const void* grads, DType grad_type, float lr,
                         const std::vector<Segment>& segments, float grad_scale) {
  ++step_;
  const float b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(double(b1), double(step_));
  const double bias2 = 1.0 - std::pow(double(b2), double(step_));
  Kernels::AdamWArgs args{1.0f, float(lr / bias1), b1, b2, options_.eps, float(std::sqrt(bias2)),
                          grad_scale};
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const Segment& seg : segments) {
    // torch forms 1 - lr·wd in double and multiplies by it in float.
    args.keep = seg.decay ? float(1.0 - double(lr) * options_.weight_decay) : 1.0f;
    RETURN_IF_ERROR(kernels_->AdamW(params + seg.param_shift + seg.begin,
                                    At(grads, grad_type, seg.begin), grad_type, m + seg.begin,
                                    v + seg.begin, seg.end - seg.begin, args));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SGD>> SGD::Create(const SGDOptions& options, int64_t size,
                                                  Allocator& alloc) {
  ASSIGN_OR_RETURN(Tensor buf, Tensor::Empty({size}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels, Kernels::Create(alloc.device()));
  return std::unique_ptr<SGD>(new SGD(options, std::move(buf), std::move(kernels)));
}

absl::Status SGD::Step(float* params, const void* grads, DType grad_type, float lr,
                       const std::vector<Segment>& segments, float grad_scale) {
  ++step_;
  float* b = buf_.data<float>();
  for (const Segment& seg : segments) {
    const float wd = seg.decay ? options_.weight_decay : 0.0f;
    RETURN_IF_ERROR(kernels_->Sgd(params + seg.param_shift + seg.begin,
                                  At(grads, grad_type, seg.begin), grad_type, b + seg.begin,
                                  seg.end - seg.begin, lr, options_.momentum, wd, step_ == 1,
                                  grad_scale));
  }
  return absl::OkStatus();
}

absl::Status CopyState(Optimizer& from, Optimizer& to) {
  auto source = from.State();
  auto target = to.State();
  for (size_t i = 0; i < target.size(); ++i) {
    RETURN_IF_ERROR(target[i].second->CopyFrom(*source[i].second));
  }
  to.set_step(from.step());
  return absl::OkStatus();
}

}  // namespace tally::optim
