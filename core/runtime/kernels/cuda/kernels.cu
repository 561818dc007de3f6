// The CUDA kernels of kernels.h that are not matrix products (those are in matmul.cu).
// Each mirrors its CPU kernel line for line where it can: elementwise ops one thread per
// element (grid-stride loops), row ops (LayerNorm, the softmax passes) one block per row
// with block-wide sums.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/runtime/cuda/cuda_status.h"
#include "core/runtime/kernels/cuda/kernels.h"
#include "core/runtime/kernels/cuda/launch.cuh"
#include "core/runtime/status_macros.h"

namespace tally::cuda {
namespace {

// ---------------------------------------------------------------------------- elementwise

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;


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

// The bit operations of BFloat16 (core/runtime/dtype.h), so that both devices round alike.
__device__ uint16_t ToBF16Bits(float value) {
  uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ float FromBF16Bits(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

__global__ void FloatToBF16Kernel(uint16_t* y, const float* x, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = ToBF16Bits(x[i]); }
}
__global__ void BF16ToFloatKernel(float* y, const uint16_t* x, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = FromBF16Bits(x[i]); }
}
__device__ float Widen(float x) { return x; }
__device__ float Widen(uint16_t x) { return FromBF16Bits(x); }
__device__ void Store(float* y, float value) { *y = value; }
__device__ void Store(uint16_t* y, float value) { *y = ToBF16Bits(value); }

// Y: float, or uint16_t holding bf16 bits (a bf16 matmul's input kept as it reads it).
template <typename Y>
__global__ void GeluForwardKernel(Y* y, const float* x, int64_t n) {
  TALLY_GRID_STRIDE(i, n) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    Store(y + i, 0.5f * xi * (1.0f + tanhf(u)));
  }
}

template <typename Y, typename X>
__global__ void AccumulateKernel(Y* y, const X* x, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { Store(y + i, Widen(y[i]) + Widen(x[i])); }
}

__global__ void AddKernel(float* y, const float* a, const float* b, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

// A gradient as fp32, from fp32 or bf16 storage.
__device__ float Grad(const float* g, int64_t i) { return g[i]; }
__device__ float Grad(const uint16_t* g, int64_t i) { return FromBF16Bits(g[i]); }
// The same times the clipping factor, rounded to the gradients' type: what ScaleKernel or
// ScaleBF16Kernel would leave in the buffer (__fmul_rn is never fused into a later add).
__device__ float Clipped(const float* g, int64_t i, float scale) {
  return __fmul_rn(g[i], scale);
}
__device__ float Clipped(const uint16_t* g, int64_t i, float scale) {
  return FromBF16Bits(ToBF16Bits(__fmul_rn(FromBF16Bits(g[i]), scale)));
}

template <typename G>
__global__ void AdamWKernel(float* p, const G* g, float* m, float* v, int64_t n, float keep,
                            float step_size, float beta1, float beta2, float eps,
                            float bias2_sqrt, float grad_scale) {
  TALLY_GRID_STRIDE(i, n) {
    const float gi = Clipped(g, i, grad_scale);
    const float w = p[i] * keep;
    m[i] = m[i] + (1.0f - beta1) * (gi - m[i]);
    v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    const float denom = sqrtf(v[i]) / bias2_sqrt + eps;
    p[i] = w - step_size * (m[i] / denom);
  }
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

__global__ void ScaleKernel(float* x, float factor, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] *= factor; }
}

__global__ void ScaleBF16Kernel(uint16_t* x, float factor, int64_t n) {
  TALLY_GRID_STRIDE(i, n) { x[i] = ToBF16Bits(FromBF16Bits(x[i]) * factor); }
}

template <typename G>
__global__ void SgdKernel(float* p, const G* g, float* b, int64_t n, float lr, float mu,
                          float wd, bool first, float grad_scale) {
  TALLY_GRID_STRIDE(i, n) {
    const float gi = Clipped(g, i, grad_scale) + wd * p[i];
    b[i] = first ? gi : mu * b[i] + gi;
    p[i] -= lr * b[i];
  }
}

// Each block's Σ x² in double into partial[block] (the host adds the blocks).
template <typename G>
__global__ void SquaresKernel(double* partial, const G* x, int64_t n) {
  __shared__ double lanes[kThreads];
  double sum = 0;
  TALLY_GRID_STRIDE(i, n) {
    const double xi = Grad(x, i);
    sum += xi * xi;
  }
  lanes[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) lanes[threadIdx.x] += lanes[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = lanes[0];
}

// ---------------------------------------------------------------------------- rows

template <typename Y>
__global__ void LayerNormForwardKernel(Y* y, float* mean, float* rstd, const float* x,
                                       const float* w, const float* b, int c) {
  const int64_t row = blockIdx.x;
  const float* xi = x + row * c;
  Y* yi = y + row * c;
  float sum = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) sum += xi[j];
  const float m = BlockSum(sum) / c;
  float var = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) var += (xi[j] - m) * (xi[j] - m);
  const float s = 1.0f / sqrtf(BlockSum(var) / c + 1e-5f);
  for (int j = threadIdx.x; j < c; j += blockDim.x) Store(yi + j, (xi[j] - m) * s * w[j] + b[j]);
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

}  // namespace

absl::Status LayerNormForward(TypedPtr y, float* mean, float* rstd, const float* x, const float* w,
                              const float* b, int n, int c) {
  if (y.type == DType::kBF16) {
    auto* kernel = LayerNormForwardKernel<uint16_t>;
    TALLY_LAUNCH(kernel, n, static_cast<uint16_t*>(y.data), mean, rstd, x, w, b, c);
    return absl::OkStatus();
  }
  auto* kernel = LayerNormForwardKernel<float>;
  TALLY_LAUNCH(kernel, n, y.as<float>(), mean, rstd, x, w, b, c);
  return absl::OkStatus();
}

absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, const float* mean, const float* rstd, int n, int c) {
  TALLY_LAUNCH(LayerNormBackwardKernel, n, dx, dw, db, dy, x, w, mean, rstd, c);
  return absl::OkStatus();
}

absl::Status GeluForward(TypedPtr y, const float* x, int64_t n) {
  if (y.type == DType::kBF16) {
    auto* kernel = GeluForwardKernel<uint16_t>;
    TALLY_LAUNCH(kernel, Blocks(n), static_cast<uint16_t*>(y.data), x, n);
    return absl::OkStatus();
  }
  auto* kernel = GeluForwardKernel<float>;
  TALLY_LAUNCH(kernel, Blocks(n), y.as<float>(), x, n);
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n) {
  TALLY_LAUNCH(GeluBackwardKernel, Blocks(n), dx, x, dy, n);
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

absl::Status ScaleBF16(uint16_t* x, int64_t n, float factor) {
  TALLY_LAUNCH(ScaleBF16Kernel, Blocks(n), x, factor, n);
  return absl::OkStatus();
}

template <typename G>
absl::Status SgdStep(float* params, const G* grads, float* momentum, int64_t n, float lr,
                     float mu, float wd, bool first, float grad_scale) {
  TALLY_LAUNCH(SgdKernel<G>, Blocks(n), params, grads, momentum, n, lr, mu, wd, first,
               grad_scale);
  return absl::OkStatus();
}
template absl::Status SgdStep(float*, const float*, float*, int64_t, float, float, float, bool,
                              float);
template absl::Status SgdStep(float*, const uint16_t*, float*, int64_t, float, float, float, bool,
                              float);

template <typename G>
absl::StatusOr<double> AddSquares(const G* x, int64_t n, double sum, double* partials) {
  if (n <= 0) return sum;
  const int blocks = std::min(kSquaresBlocks, Blocks(n));
  TALLY_LAUNCH(SquaresKernel<G>, blocks, partials, x, n);
  std::vector<double> host(blocks);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host.data(), partials, sizeof(double) * blocks, cudaMemcpyDeviceToHost));
  for (double d : host) sum += d;
  return sum;
}
template absl::StatusOr<double> AddSquares(const float*, int64_t, double, double*);
template absl::StatusOr<double> AddSquares(const uint16_t*, int64_t, double, double*);

absl::Status Add(float* y, const float* a, const float* b, int64_t n) {
  TALLY_LAUNCH(AddKernel, Blocks(n), y, a, b, n);
  return absl::OkStatus();
}

template <typename G>
absl::Status AdamWStep(float* params, const G* grads, float* m, float* v, int64_t n, float keep,
                       float step_size, float beta1, float beta2, float eps, float bias2_sqrt,
                       float grad_scale) {
  TALLY_LAUNCH(AdamWKernel<G>, Blocks(n), params, grads, m, v, n, keep, step_size, beta1, beta2,
               eps, bias2_sqrt, grad_scale);
  return absl::OkStatus();
}
template absl::Status AdamWStep(float*, const float*, float*, float*, int64_t, float, float, float,
                                float, float, float, float);
template absl::Status AdamWStep(float*, const uint16_t*, float*, float*, int64_t, float, float,
                                float, float, float, float, float);

absl::Status FloatToBF16(uint16_t* y, const float* x, int64_t n) {
  TALLY_LAUNCH(FloatToBF16Kernel, Blocks(n), y, x, n);
  return absl::OkStatus();
}

absl::Status BF16ToFloat(float* y, const uint16_t* x, int64_t n) {
  TALLY_LAUNCH(BF16ToFloatKernel, Blocks(n), y, x, n);
  return absl::OkStatus();
}

template <typename Y, typename X>
absl::Status AccumulateTyped(void* y, const void* x, int64_t n) {
  auto* kernel = AccumulateKernel<Y, X>;
  TALLY_LAUNCH(kernel, Blocks(n), static_cast<Y*>(y), static_cast<const X*>(x), n);
  return absl::OkStatus();
}

absl::Status Accumulate(void* y, bool y_bf16, const void* x, bool x_bf16, int64_t n) {
  if (y_bf16) {
    return x_bf16 ? AccumulateTyped<uint16_t, uint16_t>(y, x, n)
                  : AccumulateTyped<uint16_t, float>(y, x, n);
  }
  return x_bf16 ? AccumulateTyped<float, uint16_t>(y, x, n) : AccumulateTyped<float, float>(y, x, n);
}

}  // namespace tally::cuda
