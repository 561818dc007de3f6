// Tensor: a shape and a dtype over a contiguous range of shared storage.
//
//   ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({B, T, C}, DType::kF32, alloc,
//                                            MemoryCategory::kActivations));
//   Tensor rows = x.Slice(2, 4);     // x[2:4], a view: no copy, same storage
//   float* p = rows.data<float>();
//
// Tensors are cheap handles: copying one shares the storage (like a torch.Tensor). Every
// tensor is contiguous, so a slice along the first dimension is again a contiguous tensor,
// which is all that buckets, shards and micro-batches need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/allocator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/status_macros.h"

namespace tally {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "(4, 8)"

class Tensor {
 public:
  Tensor() = default;  // an empty, storage-less tensor of shape (0)

  // A new zero-filled tensor charged to `category` of the allocator's ledger.
  static absl::StatusOr<Tensor> Empty(Shape shape, DType dtype, Allocator& alloc,
                                       MemoryCategory category = MemoryCategory::kOther);
  // The same, its values left as they come in host memory: for a buffer that is written
  // whole before it is read (a working copy), which the zero-fill would only touch twice.
  static absl::StatusOr<Tensor> Unfilled(Shape shape, DType dtype, Allocator& alloc,
                                         MemoryCategory category);

  // A 1-D view of `count` values (fp32 from a float*) on `device` that the tensor neither
  // owns nor counts (an activation inside a buffer the model carved up); the memory must
  // outlive the view.
  static Tensor Borrow(TypedPtr data, int64_t count, Device device = Device::CPU());

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * SizeOf(dtype_); }
  Device device() const { return storage_ ? storage_->device() : Device::CPU(); }
  bool defined() const { return storage_ != nullptr; }

  void* raw_data() const {
    return storage_ ? static_cast<char*>(storage_->data()) + offset_bytes_ : nullptr;
  }
  template <typename T>
  T* data() const {
    CHECK(DTypeOf<T>() == dtype_) << "tensor is " << Name(dtype_) << ", asked for "
                                  << Name(DTypeOf<T>());
    return static_cast<T*>(raw_data());
  }

  // The tensor's bytes from or to host memory (nbytes() of them), and zeroing them, on
  // whichever device they live (core/runtime/cuda/cuda.h for a GPU). A meta tensor has none:
  // writes to it do nothing, and it reads as zeros.
  absl::Status CopyFromHost(const void* host) const;
  absl::Status CopyToHost(void* host) const;
  absl::Status SetZero() const;
  // This tensor's bytes = `from`'s (the same nbytes(), on any devices).
  absl::Status CopyFrom(const Tensor& from) const;

  // Rows [begin, end) along the first dimension, sharing storage. Requires 0 <= begin <=
  // end <= dim(0).
  Tensor Slice(int64_t begin, int64_t end) const;
  // Elements [begin, end) of the flattened tensor as a 1-D view.
  Tensor Flat(int64_t begin, int64_t end) const;
  // The same elements under another shape with the same element count.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype);
  static absl::StatusOr<Tensor> New(Shape shape, DType dtype, Allocator& alloc,
                                    MemoryCategory category, Allocator::Fill fill);

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_{0};
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace tally
