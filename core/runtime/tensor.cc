#include "core/runtime/tensor.h"

#include <cstring>
#include <utility>

#include "core/runtime/cuda/cuda.h"

namespace tally {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      offset_bytes_(offset_bytes),
      shape_(std::move(shape)),
      numel_(NumElements(shape_)),
      dtype_(dtype) {}

absl::Status Tensor::CopyFromHost(const void* host) const {
  if (device().type == DeviceType::kMeta) return absl::OkStatus();
  if (device().type == DeviceType::kCUDA) return cuda::CopyToDevice(raw_data(), host, nbytes());
  if (nbytes() > 0) std::memcpy(raw_data(), host, nbytes());
  return absl::OkStatus();
}

absl::Status Tensor::CopyToHost(void* host) const {
  if (device().type == DeviceType::kMeta) {  // no values: zeros
    if (nbytes() > 0) std::memset(host, 0, nbytes());
    return absl::OkStatus();
  }
  if (device().type == DeviceType::kCUDA) return cuda::CopyToHost(host, raw_data(), nbytes());
  if (nbytes() > 0) std::memcpy(host, raw_data(), nbytes());
  return absl::OkStatus();
}

absl::Status Tensor::SetZero() const {
  if (device().type == DeviceType::kMeta) return absl::OkStatus();
  if (device().type == DeviceType::kCUDA) return cuda::Zero(raw_data(), nbytes());
  if (nbytes() > 0) std::memset(raw_data(), 0, nbytes());
  return absl::OkStatus();
}

absl::Status Tensor::CopyFrom(const Tensor& from) const {
  if (from.nbytes() != nbytes()) {
    return absl::InvalidArgumentError("[Tensor::CopyFrom] " + std::to_string(from.nbytes()) +
                                      " bytes into " + std::to_string(nbytes()));
  }
  if (device().type == DeviceType::kMeta) return absl::OkStatus();
  if (from.device().type == DeviceType::kMeta) return SetZero();
  if (from.device().type == DeviceType::kCPU) return CopyFromHost(from.raw_data());
  if (device().type == DeviceType::kCPU) return from.CopyToHost(raw_data());
  return cuda::CopyOnDevice(raw_data(), from.raw_data(), nbytes());
}

Tensor Tensor::Borrow(TypedPtr data, int64_t count, Device device) {
  return Tensor(Storage::Borrow(data.data, SizeOf(data.type) * size_t(count), device), 0, {count},
                data.type);
}

absl::StatusOr<Tensor> Tensor::New(Shape shape, DType dtype, Allocator& alloc,
                                   MemoryCategory category, Allocator::Fill fill) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError("[Tensor::Empty] negative dimension in shape " +
                                        ShapeToString(shape));
    }
  }
  size_t bytes = static_cast<size_t>(NumElements(shape)) * SizeOf(dtype);
  ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, alloc.Allocate(bytes, category, fill));
  return Tensor(std::move(storage), 0, std::move(shape), dtype);
}

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Allocator& alloc,
                                     MemoryCategory category) {
  return New(std::move(shape), dtype, alloc, category, Allocator::Fill::kZero);
}

absl::StatusOr<Tensor> Tensor::Unfilled(Shape shape, DType dtype, Allocator& alloc,
                                        MemoryCategory category) {
  return New(std::move(shape), dtype, alloc, category, Allocator::Fill::kNone);
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0))
      << "Slice(" << begin << ", " << end << ") of shape " << ShapeToString(shape_);
  Shape shape = shape_;
  shape[0] = end - begin;
  int64_t row = dim(0) == 0 ? 0 : numel_ / dim(0);
  return Tensor(storage_, offset_bytes_ + static_cast<size_t>(begin * row) * SizeOf(dtype_),
                std::move(shape), dtype_);
}

Tensor Tensor::Flat(int64_t begin, int64_t end) const {
  CHECK(0 <= begin && begin <= end && end <= numel_)
      << "Flat(" << begin << ", " << end << ") of " << numel_ << " elements";
  return Tensor(storage_, offset_bytes_ + static_cast<size_t>(begin) * SizeOf(dtype_),
                Shape{end - begin}, dtype_);
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (NumElements(shape) != numel_) {
    return absl::InvalidArgumentError("[Reshape] cannot view " + ShapeToString(shape_) + " as " +
                                      ShapeToString(shape));
  }
  return Tensor(storage_, offset_bytes_, std::move(shape), dtype_);
}

}  // namespace tally
