#include "core/runtime/allocator.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/runtime/cuda/cuda.h"

namespace tally {

constexpr size_t kAlignment = 64;

Storage::Storage(void* data, size_t bytes, Device device, MemoryLedger* ledger,
                 MemoryCategory category)
    : data_(data), bytes_(bytes), device_(device), ledger_(ledger), category_(category) {
  if (ledger_ != nullptr) ledger_->Charge(category_, static_cast<int64_t>(bytes_));
}

std::shared_ptr<Storage> Storage::Borrow(void* data, size_t bytes, Device device) {
  auto storage = std::make_shared<Storage>(data, bytes, device, nullptr, MemoryCategory::kOther);
  storage->owned_ = false;
  return storage;
}

// Where every meta storage "starts": an address no mapping holds (user space ends at 2^47
// on x86-64 and arm64), so that pointer arithmetic on it is well defined and any read of
// it fails loudly. Offsets into one storage stay below 2^45 bytes.
void* const kMetaAddress = reinterpret_cast<void*>(uintptr_t(1) << 46);

Storage::~Storage() {
  if (owned_ && device_.type == DeviceType::kCUDA) cuda::Free(data_);
  if (owned_ && device_.type == DeviceType::kCPU) std::free(data_);
  if (ledger_ != nullptr) ledger_->Release(category_, static_cast<int64_t>(bytes_));
}

absl::StatusOr<std::shared_ptr<Storage>> Allocator::Allocate(size_t bytes,
                                                             MemoryCategory category, Fill fill) {
  if (device_.type == DeviceType::kMeta) {  // charged, and nothing taken
    return std::make_shared<Storage>(kMetaAddress, bytes, device_, ledger_, category);
  }
  if (device_.type == DeviceType::kCUDA) {  // zero-filled device memory (cuda.h)
    absl::Status on = cuda::SetDevice(device_.index);
    absl::StatusOr<void*> data = on.ok() ? cuda::Malloc(bytes) : absl::StatusOr<void*>(on);
    if (!data.ok()) return data.status();
    return std::make_shared<Storage>(*data, bytes, device_, ledger_, category);
  }
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a
  // distinct pointer so that empty tensors have somewhere to point.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) {
    return absl::ResourceExhaustedError("[Allocate] could not allocate " + std::to_string(bytes) +
                                        " bytes of " + std::string(Name(category)));
  }
  if (fill == Fill::kZero) std::memset(data, 0, rounded);
  return std::make_shared<Storage>(data, bytes, device_, ledger_, category);
}

}  // namespace tally
