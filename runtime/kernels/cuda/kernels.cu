// The CUDA kernels of kernels.h. Each mirrors its CPU kernel line for line where it can:
// elementwise ops one thread per element (grid-stride loops), row ops (LayerNorm,
// softmax, cross-entropy) one block per row with block-wide sums, matmuls in cuBLAS.
//
// cuBLAS is column-major and our buffers are row-major. A row-major (r, c) matrix is the
// column-major (c, r) matrix of its transpose, so each row-major product C = A·B is asked
// of cuBLAS as Cᵀ = Bᵀ·Aᵀ, with the leading dimensions of the row-major buffers.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cuda/cuda_status.h"
#include "runtime/kernels/cuda/kernels.h"
#include "runtime/status_macros.h"

namespace tally::cuda {
namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);  // grid-stride beyond
}

#define TALLY_GRID_STRIDE(i, n)                                             \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(blockDim.x) * gridDim.x)

// The sum (or maximum) of one value per thread over the block, returned to every thread.
template <bool kMax>
__device__ float BlockReduce(float value) {
  __shared__ float partial[32];
  __shared__ float result;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, value, offset);
    value = kMax ? fmaxf(value, other) : value + other;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    value = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_down_sync(0xffffffffu, value, offset);
      value = kMax ? fmaxf(value, other) : value + other;
    }
    if (lane == 0) result = value;
  }
  __syncthreads();
  const float out = result;
  __syncthreads();  // before the next call reuses the shared slots
  return out;
}

__device__ float BlockSum(float v) { return BlockReduce<false>(v); }
__device__ float BlockMax(float v) { return BlockReduce<true>(v); }

// ---------------------------------------------------------------------------- elementwise

__global__ void EmbeddingForwardKernel(float* x, const int32_t* tokens, const float* wte,
                                       const float* wpe, int t, int c, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const int64_t row = i / c;
    const int k = int(i % c);
    x[i] = wte[int64_t(tokens[row]) * c + k] + wpe[(row % t) * c + k];
  }
}

__global__ void EmbeddingBackwardKernel(float* dwte, float* dwpe, const float* dx,
                                        const int32_t* tokens, int t, int c, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const int64_t row = i / c;
    const int k = int(i % c);
    atomicAdd(&dwte[int64_t(tokens[row]) * c + k], dx[i]);
    atomicAdd(&dwpe[(row % t) * c + k], dx[i]);
  }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

__global__ void GeluForwardKernel(float* y, const float* x, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    y[i] = 0.5f * xi * (1.0f + tanhf(u));
  }
}

__global__ void GeluBackwardKernel(float* dx, const float* x, const float* dy, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * xi * xi);
    dx[i] = (0.5f * (1.0f + th) + 0.5f * xi * sech2 * du) * dy[i];
  }
}

__global__ void AddKernel(float* y, const float* a, const float* b, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, int64_t n, float keep,
                            float step_size, float beta1, float beta2, float eps,
                            float bias2_sqrt) {
  TALLY_GRID_STRIDE(i, n) {
    const float gi = g[i];
    const float w = p[i] * keep;
    m[i] = m[i] + (1.0f - beta1) * (gi - m[i]);
    v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    const float denom = sqrtf(v[i]) / bias2_sqrt + eps;
    p[i] = w - step_size * (m[i] / denom);
  }
}

// y's rows start as the bias (or zero), for a product added on top.
__global__ void FillRowsKernel(float* y, const float* b, int oc, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = b != nullptr ? b[i % oc] : 0.0f; }
}

// x (n, c): the slice's row of wte for each token in [first, first + vocab), else zeros.
__global__ void EmbeddingLookupKernel(float* x, const int32_t* tokens, const float* wte,
                                      int64_t first, int vocab, int c, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const int64_t row = tokens[i / c] - first;
    x[i] = row >= 0 && row < vocab ? wte[row * c + i % c] : 0.0f;
  }
}

__global__ void EmbeddingLookupBackwardKernel(float* dwte, const float* dx, const int32_t* tokens,
                                              int64_t first, int vocab, int c, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const int64_t row = tokens[i / c] - first;
    if (row >= 0 && row < vocab) atomicAdd(&dwte[row * c + i % c], dx[i]);
  }
}

__global__ void AddPositionsKernel(float* x, const float* wpe, int period, int offset, int c,
                                   int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] += wpe[(offset + (i / c) % period) * c + i % c]; }
}

// One thread per (position, channel) of the period, adding its rows in order: the CPU's
// sum, without atomics.
__global__ void AddPositionsBackwardKernel(float* dwpe, const float* dx, int64_t rows, int period,
                                           int offset, int c) {
  TALLY_GRID_STRIDE(i, int64_t(period) * c) {
    const int64_t p = i / c;
    const int k = int(i % c);
    float sum = 0;
    for (int64_t r = p; r < rows; r += period) sum += dx[r * c + k];
    dwpe[(offset + p) * c + k] += sum;
  }
}

__global__ void AddBiasKernel(float* y, const float* b, int c, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] += b[i % c]; }
}

__global__ void FillKernel(float* x, float value, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] = value; }
}

__global__ void ScaleKernel(float* x, float factor, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] *= factor; }
}

__global__ void SgdKernel(float* p, const float* g, float* b, int64_t n, float lr, float mu,
                          float wd, bool first) {
  TALLY_GRID_STRIDE(i, n) {
    const float gi = g[i] + wd * p[i];
    b[i] = first ? gi : mu * b[i] + gi;
    p[i] -= lr * b[i];
  }
}

// Each block's Σ x² in double into partial[block] (the host adds the blocks).
__global__ void SquaresKernel(double* partial, const float* x, int64_t n) {
  __shared__ double lanes[kThreads];
  double sum = 0;
  TALLY_GRID_STRIDE(i, n) { sum += double(x[i]) * x[i]; }
  lanes[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) lanes[threadIdx.x] += lanes[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = lanes[0];
}

// ---------------------------------------------------------------------------- rows

__global__ void LayerNormForwardKernel(float* y, float* mean, float* rstd, const float* x,
                                       const float* w, const float* b, int c) {
  const int64_t row = blockIdx.x;
  const float* xi = x + row * c;
  float* yi = y + row * c;
  float sum = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) sum += xi[j];
  const float m = BlockSum(sum) / c;
  float var = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) var += (xi[j] - m) * (xi[j] - m);
  const float s = 1.0f / sqrtf(BlockSum(var) / c + 1e-5f);
  for (int j = threadIdx.x; j < c; j += blockDim.x) yi[j] = (xi[j] - m) * s * w[j] + b[j];
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void LayerNormBackwardKernel(float* dx, float* dw, float* db, const float* dy,
                                        const float* x, const float* w, const float* mean,
                                        const float* rstd, int c) {
  const int64_t row = blockIdx.x;
  const float* dyi = dy + row * c;
  const float* xi = x + row * c;
  float* dxi = dx + row * c;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0, gx_sum = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (xi[j] - m) * s;
    const float g = dyi[j] * w[j];
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = BlockSum(g_sum) / c;
  const float gx_mean = BlockSum(gx_sum) / c;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (xi[j] - m) * s;
    atomicAdd(&db[j], dyi[j]);
    atomicAdd(&dw[j], xhat * dyi[j]);
    dxi[j] += s * (dyi[j] * w[j] - g_mean - xhat * gx_mean);
  }
}

__global__ void CrossEntropyForwardKernel(float* losses, float* probs, const float* logits,
                                          const int32_t* targets, int v) {
  const int64_t row = blockIdx.x;
  const float* l = logits + row * v;
  float* p = probs + row * v;
  float max = -INFINITY;
  for (int j = threadIdx.x; j < v; j += blockDim.x) max = fmaxf(max, l[j]);
  max = BlockMax(max);
  float sum = 0;
  for (int j = threadIdx.x; j < v; j += blockDim.x) {
    p[j] = expf(l[j] - max);
    sum += p[j];
  }
  sum = BlockSum(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < v; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) losses[row] = logf(sum) - (l[targets[row]] - max);
}

__global__ void CrossEntropyBackwardKernel(float* dlogits, const float* probs,
                                           const int32_t* targets, int64_t first, float dloss,
                                           int v, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const int64_t row = i / v;
    const int j = int(i % v);
    dlogits[i] = probs[i] * dloss - (j == targets[row] - first ? dloss : 0.0f);
  }
}

// The vocabulary-parallel softmax's passes (Kernels::LogitMax, SoftmaxExp, SoftmaxLoss),
// one block per row.
__global__ void LogitMaxKernel(float* max, const float* logits, int v, int valid) {
  const int64_t row = blockIdx.x;
  const float* l = logits + row * v;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, l[j]);
  m = BlockMax(m);
  if (threadIdx.x == 0) max[row] = m;
}

__global__ void SoftmaxExpKernel(float* probs, float* sum, float* target, const float* logits,
                                 const float* max, const int32_t* targets, int64_t first, int v,
                                 int valid) {
  const int64_t row = blockIdx.x;
  const float* l = logits + row * v;
  float* p = probs + row * v;
  const float m = max[row];
  float s = 0;
  for (int j = threadIdx.x; j < v; j += blockDim.x) {
    p[j] = j < valid ? expf(l[j] - m) : 0.0f;
    s += p[j];
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) {
    sum[row] = s;
    const int64_t column = targets[row] - first;
    target[row] = column >= 0 && column < valid ? l[column] : 0.0f;
  }
}

__global__ void SoftmaxLossKernel(float* probs, float* losses, const float* sum,
                                  const float* target, const float* max, int v, int valid) {
  const int64_t row = blockIdx.x;
  float* p = probs + row * v;
  const float inv = 1.0f / sum[row];
  for (int j = threadIdx.x; j < valid; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) losses[row] = logf(sum[row]) - (target[row] - max[row]);
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

// Launches `kernel` on `blocks` blocks of kThreads; a launch error names the kernel.
#define TALLY_LAUNCH(kernel, blocks, ...)                                                  \
  do {                                                                                     \
    kernel<<<(blocks), kThreads>>>(__VA_ARGS__);                                           \
    ::absl::Status launched = CudaStatus(cudaGetLastError(), "launching " #kernel);        \
    if (!launched.ok()) return launched;                                                   \
  } while (false)

cublasHandle_t Handle(Blas& blas) { return static_cast<cublasHandle_t>(blas.handle()); }

// Row-major C (m, n) = alpha · op(A) · op(B) + beta · C, with op(A) (m, k) and op(B) (k, n)
// and each buffer's row-major leading dimension; batched with strides when batch > 1.
absl::Status RowMajorGemm(Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch = 1) {
  // Cᵀ (n, m) = op(B)ᵀ · op(A)ᵀ in column-major terms: B first, then A.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(Handle(blas), op_b, op_a, n, m, k, &alpha, b,
                                                   ldb, stride_b, a, lda, stride_a, &beta, c, ldc,
                                                   stride_c, batch));
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------- Blas

absl::StatusOr<std::unique_ptr<Blas>> Blas::Create(bool tf32) {
  cublasHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  const cublasMath_t mode = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH;
  if (absl::Status s = CublasStatus(cublasSetMathMode(handle, mode), "cublasSetMathMode");
      !s.ok()) {
    cublasDestroy(handle);
    return s;
  }
  return std::unique_ptr<Blas>(new Blas(handle, tf32));
}

Blas::~Blas() {
  cublasDestroy(static_cast<cublasHandle_t>(handle_));
  cudaFree(ones_);
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

absl::Status LinearForward(Blas& blas, float* y, const float* x, const float* w, const float* b,
                           int n, int c, int oc) {
  const int64_t count = int64_t(n) * oc;
  TALLY_LAUNCH(FillRowsKernel, Blocks(count), y, b, oc, count);
  // y (n, oc) += x (n, c) · wᵀ
  return RowMajorGemm(blas, false, true, n, oc, c, 1.0f, x, c, 0, w, c, 0, 1.0f, y, oc, 0);
}

absl::Status LinearBackward(Blas& blas, float* dx, float* dw, float* db, const float* dy,
                            const float* x, const float* w, int n, int c, int oc,
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

absl::Status AttentionForward(Blas& blas, float* y, float* att, const float* qkv, int b, int t,
                              int c, int nh) {
  const int hs = c / nh;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int i = 0; i < b; ++i) {
    const float* q = qkv + int64_t(i) * t * 3 * c;
    const float* k = q + c;
    const float* v = q + 2 * c;
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
                               const float* qkv, const float* att, int b, int t, int c, int nh) {
  const int hs = c / nh;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int64_t tt = int64_t(t) * t;
  for (int i = 0; i < b; ++i) {
    const float* q = qkv + int64_t(i) * t * 3 * c;
    const float* k = q + c;
    const float* v = q + 2 * c;
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

absl::Status EmbeddingForward(float* x, const int32_t* tokens, const float* wte, const float* wpe,
                              int b, int t, int c) {
  const int64_t n = int64_t(b) * t * c;
  TALLY_LAUNCH(EmbeddingForwardKernel, Blocks(n), x, tokens, wte, wpe, t, c, n);
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dx, const int32_t* tokens,
                               int b, int t, int c) {
  const int64_t n = int64_t(b) * t * c;
  TALLY_LAUNCH(EmbeddingBackwardKernel, Blocks(n), dwte, dwpe, dx, tokens, t, c, n);
  return absl::OkStatus();
}

absl::Status LayerNormForward(float* y, float* mean, float* rstd, const float* x, const float* w,
                              const float* b, int n, int c) {
  TALLY_LAUNCH(LayerNormForwardKernel, n, y, mean, rstd, x, w, b, c);
  return absl::OkStatus();
}

absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, const float* mean, const float* rstd, int n, int c) {
  TALLY_LAUNCH(LayerNormBackwardKernel, n, dx, dw, db, dy, x, w, mean, rstd, c);
  return absl::OkStatus();
}

absl::Status GeluForward(float* y, const float* x, int64_t n) {
  TALLY_LAUNCH(GeluForwardKernel, Blocks(n), y, x, n);
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n) {
  TALLY_LAUNCH(GeluBackwardKernel, Blocks(n), dx, x, dy, n);
  return absl::OkStatus();
}

absl::Status CrossEntropyForward(float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int n, int v) {
  TALLY_LAUNCH(CrossEntropyForwardKernel, n, losses, probs, logits, targets, v);
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  int64_t first, float dloss, int n, int v) {
  const int64_t count = int64_t(n) * v;
  TALLY_LAUNCH(CrossEntropyBackwardKernel, Blocks(count), dlogits, probs, targets, first, dloss, v,
               count);
  return absl::OkStatus();
}

absl::Status LogitMax(float* max, const float* logits, int n, int v, int valid) {
  TALLY_LAUNCH(LogitMaxKernel, n, max, logits, v, valid);
  return absl::OkStatus();
}

absl::Status SoftmaxExp(float* probs, float* sum, float* target, const float* logits,
                        const float* max, const int32_t* targets, int64_t first, int n, int v,
                        int valid) {
  TALLY_LAUNCH(SoftmaxExpKernel, n, probs, sum, target, logits, max, targets, first, v, valid);
  return absl::OkStatus();
}

absl::Status SoftmaxLoss(float* probs, float* losses, const float* sum, const float* target,
                         const float* max, int n, int v, int valid) {
  TALLY_LAUNCH(SoftmaxLossKernel, n, probs, losses, sum, target, max, v, valid);
  return absl::OkStatus();
}

absl::Status EmbeddingLookup(float* x, const int32_t* tokens, const float* wte, int64_t first,
                             int vocab, int64_t n, int c) {
  const int64_t count = n * c;
  TALLY_LAUNCH(EmbeddingLookupKernel, Blocks(count), x, tokens, wte, first, vocab, c, count);
  return absl::OkStatus();
}

absl::Status EmbeddingLookupBackward(float* dwte, const float* dx, const int32_t* tokens,
                                     int64_t first, int vocab, int64_t n, int c) {
  const int64_t count = n * c;
  TALLY_LAUNCH(EmbeddingLookupBackwardKernel, Blocks(count), dwte, dx, tokens, first, vocab, c,
               count);
  return absl::OkStatus();
}

absl::Status AddPositions(float* x, const float* wpe, int64_t rows, int period, int offset, int c) {
  const int64_t count = rows * c;
  TALLY_LAUNCH(AddPositionsKernel, Blocks(count), x, wpe, period, offset, c, count);
  return absl::OkStatus();
}

absl::Status AddPositionsBackward(float* dwpe, const float* dx, int64_t rows, int period,
                                  int offset, int c) {
  TALLY_LAUNCH(AddPositionsBackwardKernel, Blocks(int64_t(period) * c), dwpe, dx, rows, period,
               offset, c);
  return absl::OkStatus();
}

absl::Status AddBias(float* y, const float* b, int64_t rows, int c) {
  const int64_t count = rows * c;
  TALLY_LAUNCH(AddBiasKernel, Blocks(count), y, b, c, count);
  return absl::OkStatus();
}

absl::Status Scale(float* x, int64_t n, float factor) {
  TALLY_LAUNCH(ScaleKernel, Blocks(n), x, factor, n);
  return absl::OkStatus();
}

absl::Status SgdStep(float* params, const float* grads, float* momentum, int64_t n, float lr,
                     float mu, float wd, bool first) {
  TALLY_LAUNCH(SgdKernel, Blocks(n), params, grads, momentum, n, lr, mu, wd, first);
  return absl::OkStatus();
}

absl::StatusOr<double> AddSquares(const float* x, int64_t n, double sum, double* partials) {
  if (n <= 0) return sum;
  const int blocks = std::min(kSquaresBlocks, Blocks(n));
  TALLY_LAUNCH(SquaresKernel, blocks, partials, x, n);
  std::vector<double> host(blocks);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host.data(), partials, sizeof(double) * blocks, cudaMemcpyDeviceToHost));
  for (double d : host) sum += d;
  return sum;
}

absl::Status Add(float* y, const float* a, const float* b, int64_t n) {
  TALLY_LAUNCH(AddKernel, Blocks(n), y, a, b, n);
  return absl::OkStatus();
}

absl::Status AdamWStep(float* params, const float* grads, float* m, float* v, int64_t n, float keep,
                       float step_size, float beta1, float beta2, float eps, float bias2_sqrt) {
  TALLY_LAUNCH(AdamWKernel, Blocks(n), params, grads, m, v, n, keep, step_size, beta1, beta2, eps,
               bias2_sqrt);
  return absl::OkStatus();
}

}  // namespace tally::cuda
