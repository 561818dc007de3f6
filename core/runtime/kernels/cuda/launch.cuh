// What the CUDA kernel files share (kernels.cu, matmul.cu, comm/device_memory.cu): the
// block size and grid,
// grid-stride loops, block-wide sums, and a launch that turns a launch error into a
// Status naming the kernel. For .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/runtime/cuda/cuda_status.h"

namespace tally::cuda {

inline constexpr int kThreads = 256;  // per block, a multiple of the warp

inline int Blocks(int64_t n) {
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

__device__ inline float BlockSum(float v) { return BlockReduce<false>(v); }
__device__ inline float BlockMax(float v) { return BlockReduce<true>(v); }

}  // namespace tally::cuda

// Launches `kernel` on `blocks` blocks of kThreads; a launch error names the kernel.
#define TALLY_LAUNCH(kernel, blocks, ...)                                    \
  do {                                                                       \
    kernel<<<(blocks), ::tally::cuda::kThreads>>>(__VA_ARGS__);              \
    ::absl::Status tally_launched =                                          \
        ::tally::cuda::CudaStatus(cudaGetLastError(), "launching " #kernel); \
    if (!tally_launched.ok()) return tally_launched;                         \
  } while (false)
