#include "core/model/weights.h"

#include <vector>

#include "core/runtime/status_macros.h"

namespace tally::model {

absl::StatusOr<float*> WorkingCopies::Widen(int unit, const Tensor& stored) {
  Tensor& copy = copies_[unit];
  if (!copy.defined()) {
    ASSIGN_OR_RETURN(copy, Tensor::Unfilled({stored.numel()}, DType::kF32, alloc_,
                                            MemoryCategory::kActivations));
    RETURN_IF_ERROR(kernels_.Convert(copy.raw_data(), DType::kF32, stored.raw_data(),
                                     stored.dtype(), stored.numel()));
  }
  return copy.data<float>();
}

absl::StatusOr<float*> WorkingCopies::Zeroed(int unit, int64_t count) {
  Tensor& copy = copies_[unit];
  if (!copy.defined()) {  // zero-filled, as every allocation is
    ASSIGN_OR_RETURN(copy,
                     Tensor::Empty({count}, DType::kF32, alloc_, MemoryCategory::kActivations));
  }
  return copy.data<float>();
}

Tensor WorkingCopies::Take(int unit) {
  Tensor copy = std::move(copies_[unit]);
  copies_[unit] = Tensor();
  return copy;
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ParameterLayout& layout,
                                                         uint64_t seed, Allocator& alloc,
                                                         const Precision& precision) {
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels, Kernels::Create(alloc.device()));
  std::unique_ptr<Replica> r(new Replica(layout, alloc, std::move(kernels)));
  const int64_t total = layout.total();
  ASSIGN_OR_RETURN(r->params_,
                   Tensor::Empty({total}, precision.params, alloc, MemoryCategory::kParams));
  ASSIGN_OR_RETURN(r->grads_,
                   Tensor::Empty({total}, precision.grads, alloc, MemoryCategory::kGrads));
  if (precision.master_weights()) {
    ASSIGN_OR_RETURN(r->master_,
                     Tensor::Empty({total}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  }
  if (alloc.device().type == DeviceType::kMeta) return r;  // no values to initialise
  std::vector<float> host(size_t(layout.total()));
  InitializeParameters(layout, seed, 0, layout.total(), host.data());
  RETURN_IF_ERROR(r->master().CopyFromHost(host.data()));
  RETURN_IF_ERROR(r->Publish());
  return r;  // the gradients start zero-filled, as every allocation does
}

absl::Status Replica::Publish() {
  if (!master_.defined()) return absl::OkStatus();
  return kernels_->Convert(params_.raw_data(), params_.dtype(), master_.raw_data(), DType::kF32,
                           master_.numel());
}

absl::StatusOr<float*> Replica::Params(int unit) {
  if (params_.dtype() == DType::kF32) return Unit(params_, unit).data<float>();
  return working_params_.Widen(unit, Unit(params_, unit));
}

absl::Status Replica::ReleaseParams(int unit) {
  working_params_.Release(unit);
  return absl::OkStatus();
}

absl::StatusOr<float*> Replica::OpenGrads(int unit) {
  if (grads_.dtype() == DType::kF32) return Unit(grads_, unit).data<float>();
  return working_grads_.Zeroed(unit, layout_.units()[unit].count());
}

absl::Status Replica::CloseGrads(int unit) {
  Tensor computed = working_grads_.Take(unit);
  if (!computed.defined()) return absl::OkStatus();  // fp32: added in place
  Tensor into = Unit(grads_, unit);
  return kernels_->Accumulate(into.raw_data(), into.dtype(), computed.raw_data(), DType::kF32,
                              computed.numel());
}

}  // namespace tally::model
