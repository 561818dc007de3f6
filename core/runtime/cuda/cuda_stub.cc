// cuda.h for a build without the CUDA toolkit: there is no GPU to use.
#include "core/runtime/cuda/cuda.h"

namespace tally::cuda {
namespace {

absl::Status NotBuilt() {
  return absl::FailedPreconditionError(
      "[cuda] this build has no CUDA: the toolkit was not found when it was configured "
      "(install it and configure again, with -DTALLY_WITH_CUDA=ON)");
}

}  // namespace

bool Built() { return false; }
absl::StatusOr<int> DeviceCount() { return NotBuilt(); }
absl::StatusOr<std::string> DeviceName(int) { return NotBuilt(); }
absl::Status SetDevice(int) { return NotBuilt(); }
absl::StatusOr<void*> Malloc(size_t) { return NotBuilt(); }
void Free(void*) {}
absl::Status CopyToDevice(void*, const void*, size_t) { return NotBuilt(); }
absl::Status CopyToHost(void*, const void*, size_t) { return NotBuilt(); }
absl::Status CopyOnDevice(void*, const void*, size_t) { return NotBuilt(); }
absl::Status Zero(void*, size_t) { return NotBuilt(); }
absl::Status Synchronize() { return NotBuilt(); }

}  // namespace tally::cuda
