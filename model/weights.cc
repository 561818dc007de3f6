#include "model/weights.h"

#include <cstring>

#include "runtime/status_macros.h"

namespace tally::model {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ParameterLayout& layout,
                                                         uint64_t seed, Allocator& alloc) {
  std::unique_ptr<Replica> r(new Replica(layout));
  ASSIGN_OR_RETURN(r->params_,
                   Tensor::Empty({layout.total()}, DType::kF32, alloc, MemoryCategory::kParams));
  ASSIGN_OR_RETURN(r->grads_,
                   Tensor::Empty({layout.total()}, DType::kF32, alloc, MemoryCategory::kGrads));
  InitializeParameters(layout, seed, 0, layout.total(), r->params_.data<float>());
  r->ZeroGrad();
  return r;
}

void Replica::ZeroGrad() { std::memset(grads_.raw_data(), 0, grads_.nbytes()); }

}  // namespace tally::model
