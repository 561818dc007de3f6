// The CUDA kernels of kernels.h that are matrix products: the linear layers and causal
// attention (Q·Kᵀ and P·V strided-batched over the heads, a masked softmax between), in
// cuBLAS, and the Blas handle they share.
//
// cuBLAS is column-major and our buffers are row-major. A row-major (r, c) matrix is the
// column-major (c, r) matrix of its transpose, so each row-major product C = A·B is asked
// of cuBLAS as Cᵀ = Bᵀ·Aᵀ, with the leading dimensions of the row-major buffers.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>

#include "core/runtime/cuda/cuda_status.h"
#include "core/runtime/kernels/cuda/kernels.h"
#include "core/runtime/kernels/cuda/launch.cuh"
#include "core/runtime/status_macros.h"

namespace tally::cuda {
namespace {

// y's rows start as the bias (or zero), for a product added on top.
__global__ void FillRowsKernel(float* y, const float* b, int oc, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = b != nullptr ? b[i % oc] : 0.0f; }
}

__global__ void FillKernel(float* x, float value, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] = value; }
}

// Rows of the scores S (nh·t rows of t, row r at position r % t): softmax over the
// positions up to its own, zero after (the causal mask).
__global__ void CausalSoftmaxKernel(float* s, int t) {
  const int64_t row = blockIdx.x;
  const int pos = int(row % t);
  float* r = s + row * t;
  float max = -INFINITY;
  for (int j = threadIdx.x; j <= pos; j += blockDim.x) max = fmaxf(max, r[j]);
  max = BlockMax(max);
  float sum = 0;
  for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
    r[j] = expf(r[j] - max);
    sum += r[j];
  }
  const float inv = 1.0f / BlockSum(sum);
  for (int j = threadIdx.x; j < t; j += blockDim.x) r[j] = j <= pos ? r[j] * inv : 0.0f;
}

// dS = P ⊙ (dP - rowsum(dP ⊙ P)) in place of dP, zero after each row's position.
__global__ void CausalSoftmaxBackwardKernel(float* ds, const float* p, int t) {
  const int64_t row = blockIdx.x;
  const int pos = int(row % t);
  float* d = ds + row * t;
  const float* pr = p + row * t;
  float dot = 0;
  for (int j = threadIdx.x; j <= pos; j += blockDim.x) dot += d[j] * pr[j];
  dot = BlockSum(dot);
  for (int j = threadIdx.x; j < t; j += blockDim.x) d[j] = j <= pos ? pr[j] * (d[j] - dot) : 0.0f;
}

cublasHandle_t Handle(Blas& blas) { return static_cast<cublasHandle_t>(blas.handle()); }

// Row-major C (m, n) = alpha · op(A) · op(B) + beta · C, with op(A) (m, k) and op(B) (k, n)
// and each buffer's row-major leading dimension; batched with strides when batch > 1.
// With bf16 inputs an operand that is fp32 has its span (every element the batch reads,
// and those between) rounded into a bf16 copy with the same layout (one kept in bf16 is
// read as it is), and the product runs in cuBLAS's bf16 x bf16 -> fp32 GEMM with fp32
// compute. Otherwise both operands are fp32.
absl::Status RowMajorGemm(Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          ConstTypedPtr a, int lda, int64_t stride_a, ConstTypedPtr b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch = 1) {
  // Cᵀ (n, m) = op(B)ᵀ · op(A)ᵀ in column-major terms: B first, then A.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (blas.inputs() != MatmulInputs::kBF16) {
    if (a.type != DType::kF32 || b.type != DType::kF32) {
      return absl::InvalidArgumentError("[cuda] a bf16 matmul input needs bf16 matmul inputs");
    }
    CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
        Handle(blas), op_b, op_a, n, m, k, &alpha, b.as<float>(), ldb, stride_b, a.as<float>(),
        lda, stride_a, &beta, c, ldc, stride_c, batch));
    return absl::OkStatus();
  }
  // The operand in bf16: itself, or its span rounded into scratch `slot`.
  auto as_bf16 = [&](int slot, ConstTypedPtr x, int64_t stride, int rows, int cols,
                     int ld) -> absl::StatusOr<const uint16_t*> {
    if (x.type == DType::kBF16) return static_cast<const uint16_t*>(x.data);
    const int64_t span = (batch - 1) * stride + int64_t(rows - 1) * ld + cols;
    ASSIGN_OR_RETURN(uint16_t * copy, blas.BF16Scratch(slot, span));
    RETURN_IF_ERROR(FloatToBF16(copy, x.as<float>(), span));
    return copy;
  };
  ASSIGN_OR_RETURN(const uint16_t* a16,
                   as_bf16(0, a, stride_a, trans_a ? k : m, trans_a ? m : k, lda));
  ASSIGN_OR_RETURN(const uint16_t* b16,
                   as_bf16(1, b, stride_b, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      Handle(blas), op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, stride_b, a16,
      CUDA_R_16BF, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------- Blas

absl::StatusOr<std::unique_ptr<Blas>> Blas::Create(MatmulInputs inputs) {
  cublasHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  // Pedantic: fp32 products stay fp32 (no TF32, no reduced-precision reductions); the bf16
  // GEMM runs on the tensor cores with fp32 compute either way.
  const cublasMath_t mode =
      inputs == MatmulInputs::kTF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH;
  if (absl::Status s = CublasStatus(cublasSetMathMode(handle, mode), "cublasSetMathMode");
      !s.ok()) {
    cublasDestroy(handle);
    return s;
  }
  return std::unique_ptr<Blas>(new Blas(handle, inputs));
}

Blas::~Blas() {
  cublasDestroy(static_cast<cublasHandle_t>(handle_));
  cudaFree(ones_);
  cudaFree(bf16_[0]);
  cudaFree(bf16_[1]);
}

absl::StatusOr<uint16_t*> Blas::BF16Scratch(int slot, int64_t n) {
  if (n <= bf16_count_[slot]) return bf16_[slot];
  // Freed and allocated anew: earlier products that read the old copy are queued before
  // anything that could reuse its memory (cudaFree waits for the device).
  cudaFree(bf16_[slot]);
  bf16_[slot] = nullptr;
  bf16_count_[slot] = 0;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&bf16_[slot], sizeof(uint16_t) * size_t(n)));
  bf16_count_[slot] = n;
  return bf16_[slot];
}

absl::StatusOr<const float*> Blas::Ones(int n) {
  if (n <= ones_count_) return ones_;
  cudaFree(ones_);
  ones_ = nullptr;
  ones_count_ = 0;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&ones_, sizeof(float) * size_t(n)));
  TALLY_LAUNCH(FillKernel, Blocks(n), ones_, 1.0f, int64_t(n));
  ones_count_ = n;
  return ones_;
}

// ---------------------------------------------------------------------------- layers

absl::Status LinearForward(Blas& blas, float* y, ConstTypedPtr x, ConstTypedPtr w, const float* b,
                           int n, int c, int oc) {
  const int64_t count = int64_t(n) * oc;
  TALLY_LAUNCH(FillRowsKernel, Blocks(count), y, b, oc, count);
  // y (n, oc) += x (n, c) · wᵀ
  return RowMajorGemm(blas, false, true, n, oc, c, 1.0f, x, c, 0, w, c, 0, 1.0f, y, oc, 0);
}

absl::Status LinearBackward(Blas& blas, float* dx, float* dw, float* db, const float* dy,
                            ConstTypedPtr x, ConstTypedPtr w, int n, int c, int oc,
                            bool accumulate_dx) {
  if (dx != nullptr) {  // dx (n, c) = dy (n, oc) · w (oc, c)
    RETURN_IF_ERROR(RowMajorGemm(blas, false, false, n, c, oc, 1.0f, dy, oc, 0, w, c, 0,
                                 accumulate_dx ? 1.0f : 0.0f, dx, c, 0));
  }
  if (dw != nullptr) {  // dw (oc, c) += dyᵀ (oc, n) · x (n, c)
    RETURN_IF_ERROR(
        RowMajorGemm(blas, true, false, oc, c, n, 1.0f, dy, oc, 0, x, c, 0, 1.0f, dw, c, 0));
  }
  if (db != nullptr) {  // db (oc) += dyᵀ (oc, n) · ones (n): column-major, dy is (oc, n)
    ASSIGN_OR_RETURN(const float* ones, blas.Ones(n));
    const float one = 1.0f;
    CUBLAS_RETURN_IF_ERROR(
        cublasSgemv(Handle(blas), CUBLAS_OP_N, oc, n, &one, dy, oc, ones, 1, &one, db, 1));
  }
  return absl::OkStatus();
}

absl::Status AttentionForward(Blas& blas, float* y, float* att, ConstTypedPtr qkv, int b, int t,
                              int c, int nh) {
  const int hs = c / nh;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int i = 0; i < b; ++i) {
    const ConstTypedPtr q = qkv + int64_t(i) * t * 3 * c;
    const ConstTypedPtr k = q + c;
    const ConstTypedPtr v = q + 2 * c;
    float* p = att + int64_t(i) * nh * t * t;
    // S_h (t, t) = scale · Q_h · K_hᵀ for every head h at once (heads hs columns apart).
    RETURN_IF_ERROR(RowMajorGemm(blas, false, true, t, t, hs, scale, q, 3 * c, hs, k, 3 * c, hs,
                                 0.0f, p, t, int64_t(t) * t, nh));
    TALLY_LAUNCH(CausalSoftmaxKernel, nh * t, p, t);
    // Y_h (t, hs) = P_h · V_h, into head h's columns of y.
    RETURN_IF_ERROR(RowMajorGemm(blas, false, false, t, hs, t, 1.0f, p, t, int64_t(t) * t, v, 3 * c,
                                 hs, 0.0f, y + int64_t(i) * t * c, c, hs, nh));
  }
  return absl::OkStatus();
}

absl::Status AttentionBackward(Blas& blas, float* dqkv, float* scratch, const float* dy,
                               ConstTypedPtr qkv, const float* att, int b, int t, int c, int nh) {
  const int hs = c / nh;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int64_t tt = int64_t(t) * t;
  for (int i = 0; i < b; ++i) {
    const ConstTypedPtr q = qkv + int64_t(i) * t * 3 * c;
    const ConstTypedPtr k = q + c;
    const ConstTypedPtr v = q + 2 * c;
    float* dq = dqkv + int64_t(i) * t * 3 * c;
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    const float* p = att + int64_t(i) * nh * tt;
    const float* dyi = dy + int64_t(i) * t * c;
    // dV_h = P_hᵀ · dY_h
    RETURN_IF_ERROR(RowMajorGemm(blas, true, false, t, hs, t, 1.0f, p, t, tt, dyi, c, hs, 0.0f, dv,
                                 3 * c, hs, nh));
    // dP_h = dY_h · V_hᵀ, then the softmax backward in place.
    RETURN_IF_ERROR(RowMajorGemm(blas, false, true, t, t, hs, 1.0f, dyi, c, hs, v, 3 * c, hs, 0.0f,
                                 scratch, t, tt, nh));
    TALLY_LAUNCH(CausalSoftmaxBackwardKernel, nh * t, scratch, p, t);
    // dQ_h = scale · dS_h · K_h, dK_h = scale · dS_hᵀ · Q_h
    RETURN_IF_ERROR(RowMajorGemm(blas, false, false, t, hs, t, scale, scratch, t, tt, k, 3 * c, hs,
                                 0.0f, dq, 3 * c, hs, nh));
    RETURN_IF_ERROR(RowMajorGemm(blas, true, false, t, hs, t, scale, scratch, t, tt, q, 3 * c, hs,
                                 0.0f, dk, 3 * c, hs, nh));
  }
  return absl::OkStatus();
}

}  // namespace tally::cuda
