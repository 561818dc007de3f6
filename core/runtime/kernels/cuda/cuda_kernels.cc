// Kernels on a CUDA device: the kernels of kernels.cu and cuBLAS, one handle per rank.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/runtime/allocator.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/kernels/cuda/kernels.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/kernels/work.h"
#include "core/runtime/status_macros.h"

namespace tally {
namespace {

absl::Status NotAGradientType(DType type) {
  return absl::InvalidArgumentError(absl::StrCat("[kernels] gradients of type ", Name(type)));
}

class CudaKernels final : public Kernels {
 public:
  CudaKernels(int index, std::unique_ptr<cuda::Blas> blas, std::shared_ptr<Storage> partials)
      : index_(index), blas_(std::move(blas)), partials_(std::move(partials)) {}

  Device device() const override { return Device{DeviceType::kCUDA, index_}; }

  absl::Status Copy(void* to, const void* from, size_t bytes) override {
    return to == from ? absl::OkStatus() : cuda::CopyOnDevice(to, from, bytes);
  }
  absl::Status FromHost(void* to, const void* host, size_t bytes) override {
    return cuda::CopyToDevice(to, host, bytes);
  }
  absl::Status ToHost(void* host, const void* from, size_t bytes) override {
    return cuda::CopyToHost(host, from, bytes);
  }
  absl::Status Zero(void* to, size_t bytes) override { return cuda::Zero(to, bytes); }

  MatmulInputs matmul_inputs() const override { return blas_->inputs(); }

  absl::Status LinearForward(float* y, ConstTypedPtr x, ConstTypedPtr w, const float* b, int n,
                             int c, int oc) override {
    CountLinearForward(n, c, oc);
    return cuda::LinearForward(*blas_, y, x, w, b, n, c, oc);
  }
  absl::Status LinearBackward(float* dx, float* dw, float* db, const float* dy, ConstTypedPtr x,
                              ConstTypedPtr w, int n, int c, int oc) override {
    CountLinearBackward(n, c, oc);
    return cuda::LinearBackward(*blas_, dx, dw, db, dy, x, w, n, c, oc);
  }
  absl::Status AttentionForward(float* y, float* att, ConstTypedPtr qkv, int b, int t, int c,
                                int nh) override {
    CountAttentionForward(b, t, c, nh);
    return cuda::AttentionForward(*blas_, y, att, qkv, b, t, c, nh);
  }
  int64_t AttentionScratch(int t, int nh) const override { return int64_t(nh) * t * t; }
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dy, ConstTypedPtr qkv,
                                 const float* att, int b, int t, int c, int nh) override {
    CountAttentionBackward(b, t, c, nh);
    return cuda::AttentionBackward(*blas_, dqkv, scratch, dy, qkv, att, b, t, c, nh);
  }
  absl::Status LayerNormForward(TypedPtr y, float* mean, float* rstd, const float* x,
                                const float* w, const float* b, int n, int c) override {
    CountLayerNormForward(n, c);
    return cuda::LayerNormForward(y, mean, rstd, x, w, b, n, c);
  }
  absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                                 const float* w, const float* mean, const float* rstd, int n,
                                 int c) override {
    CountLayerNormBackward(n, c);
    return cuda::LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd, n, c);
  }
  absl::Status GeluForward(TypedPtr y, const float* x, int64_t n) override {
    CountGeluForward(n);
    return cuda::GeluForward(y, x, n);
  }
  absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n) override {
    CountGeluBackward(n);
    return cuda::GeluBackward(dx, x, dy, n);
  }
  absl::Status AddInPlace(float* y, const float* x, int64_t n) override {
    CountResidual(n);
    return cuda::Add(y, y, x, n);
  }
  absl::Status AddBias(float* y, const float* b, int64_t rows, int c) override {
    return cuda::AddBias(y, b, rows, c);
  }

  absl::Status EmbeddingLookup(float* x, const int32_t* tokens, const float* wte, int64_t first,
                               int vocab, int64_t n, int c) override {
    return cuda::EmbeddingLookup(x, tokens, wte, first, vocab, n, c);
  }
  absl::Status EmbeddingLookupBackward(float* dwte, const float* dx, const int32_t* tokens,
                                       int64_t first, int vocab, int64_t n, int c) override {
    return cuda::EmbeddingLookupBackward(dwte, dx, tokens, first, vocab, n, c);
  }
  absl::Status AddPositions(float* x, const float* wpe, int64_t rows, int period, int offset,
                            int c) override {
    return cuda::AddPositions(x, wpe, rows, period, offset, c);
  }
  absl::Status AddPositionsBackward(float* dwpe, const float* dx, int64_t rows, int period,
                                    int offset, int c) override {
    return cuda::AddPositionsBackward(dwpe, dx, rows, period, offset, c);
  }

  absl::Status LogitMax(float* max, const float* logits, int n, int vocab, int valid) override {
    CountLogitsPass(n, vocab, 1);
    return cuda::LogitMax(max, logits, n, vocab, valid);
  }
  absl::Status SoftmaxExp(float* probs, float* sum, float* target, const float* logits,
                          const float* max, const int32_t* targets, int64_t first, int n, int vocab,
                          int valid) override {
    CountLogitsPass(n, vocab, 2);
    return cuda::SoftmaxExp(probs, sum, target, logits, max, targets, first, n, vocab, valid);
  }
  absl::Status SoftmaxLoss(float* probs, float* losses, const float* sum, const float* target,
                           const float* max, int n, int vocab, int valid) override {
    CountLogitsPass(n, vocab, 2);
    return cuda::SoftmaxLoss(probs, losses, sum, target, max, n, vocab, valid);
  }
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    int64_t first, float dloss, int n, int vocab) override {
    CountLogitsPass(n, vocab, 2);
    return cuda::CrossEntropyBackward(dlogits, probs, targets, first, dloss, n, vocab);
  }

  absl::Status Convert(void* to, DType to_type, const void* from, DType from_type,
                       int64_t n) override {
    if (to_type == from_type) return Copy(to, from, size_t(n) * SizeOf(to_type));
    if (to_type == DType::kBF16 && from_type == DType::kF32) {
      return cuda::FloatToBF16(static_cast<uint16_t*>(to), static_cast<const float*>(from), n);
    }
    if (to_type == DType::kF32 && from_type == DType::kBF16) {
      return cuda::BF16ToFloat(static_cast<float*>(to), static_cast<const uint16_t*>(from), n);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("[kernels] no conversion from ", Name(from_type), " to ", Name(to_type)));
  }
  absl::Status Accumulate(void* to, DType to_type, const void* from, DType from_type,
                          int64_t n) override {
    const bool to_ok = to_type == DType::kF32 || to_type == DType::kBF16;
    const bool from_ok = from_type == DType::kF32 || from_type == DType::kBF16;
    if (!to_ok || !from_ok) return NotAGradientType(to_ok ? from_type : to_type);
    return cuda::Accumulate(to, to_type == DType::kBF16, from, from_type == DType::kBF16, n);
  }

  absl::StatusOr<double> AddSquares(const void* x, DType type, int64_t n, double sum) override {
    double* partials = static_cast<double*>(partials_->data());
    if (type == DType::kF32) return cuda::AddSquares(static_cast<const float*>(x), n, sum, partials);
    if (type == DType::kBF16) {
      return cuda::AddSquares(static_cast<const uint16_t*>(x), n, sum, partials);
    }
    return NotAGradientType(type);
  }
  absl::Status Scale(void* x, DType type, int64_t n, float factor) override {
    if (type == DType::kF32) return cuda::Scale(static_cast<float*>(x), n, factor);
    if (type == DType::kBF16) return cuda::ScaleBF16(static_cast<uint16_t*>(x), n, factor);
    return NotAGradientType(type);
  }
  absl::Status AdamW(float* params, const void* grads, DType grad_type, float* m, float* v,
                     int64_t n, const AdamWArgs& a) override {
    CountAdamW(n);
    if (grad_type == DType::kF32) {
      return cuda::AdamWStep(params, static_cast<const float*>(grads), m, v, n, a.keep,
                             a.step_size, a.beta1, a.beta2, a.eps, a.bias2_sqrt, a.grad_scale);
    }
    if (grad_type == DType::kBF16) {
      return cuda::AdamWStep(params, static_cast<const uint16_t*>(grads), m, v, n, a.keep,
                             a.step_size, a.beta1, a.beta2, a.eps, a.bias2_sqrt, a.grad_scale);
    }
    return NotAGradientType(grad_type);
  }
  absl::Status Sgd(float* params, const void* grads, DType grad_type, float* momentum, int64_t n,
                   float lr, float mu, float wd, bool first, float grad_scale) override {
    if (grad_type == DType::kF32) {
      return cuda::SgdStep(params, static_cast<const float*>(grads), momentum, n, lr, mu, wd, first,
                           grad_scale);
    }
    if (grad_type == DType::kBF16) {
      return cuda::SgdStep(params, static_cast<const uint16_t*>(grads), momentum, n, lr, mu, wd,
                           first, grad_scale);
    }
    return NotAGradientType(grad_type);
  }

 private:
  int index_;
  std::unique_ptr<cuda::Blas> blas_;
  std::shared_ptr<Storage> partials_;  // AddSquares' per-block sums (not in any ledger)
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernels>> CreateCudaKernels(int device_index, MatmulInputs inputs) {
  ASSIGN_OR_RETURN(int count, cuda::DeviceCount());
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError("[cuda] no device cuda:" + std::to_string(device_index) +
                                      " (this machine has " + std::to_string(count) + ")");
  }
  RETURN_IF_ERROR(cuda::SetDevice(device_index));
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::Blas> blas, cuda::Blas::Create(inputs));
  Allocator unaccounted(nullptr, {DeviceType::kCUDA, device_index});
  ASSIGN_OR_RETURN(
      std::shared_ptr<Storage> partials,
      unaccounted.Allocate(sizeof(double) * cuda::kSquaresBlocks, MemoryCategory::kOther));
  return std::unique_ptr<Kernels>(
      new CudaKernels(device_index, std::move(blas), std::move(partials)));
}

}  // namespace tally
