#include "model/weights.h"

#include <vector>

#include "runtime/status_macros.h"

namespace tally::model {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ParameterLayout& layout,
                                                         uint64_t seed, Allocator& alloc) {
  std::unique_ptr<Replica> r(new Replica(layout));
  ASSIGN_OR_RETURN(r->params_,
                   Tensor::Empty({layout.total()}, DType::kF32, alloc, MemoryCategory::kParams));
  ASSIGN_OR_RETURN(r->grads_,
                   Tensor::Empty({layout.total()}, DType::kF32, alloc, MemoryCategory::kGrads));
  std::vector<float> host(size_t(layout.total()));
  InitializeParameters(layout, seed, 0, layout.total(), host.data());
  RETURN_IF_ERROR(r->params_.CopyFromHost(host.data()));
  return r;  // the gradients start zero-filled, as every allocation does
}

}  // namespace tally::model
