// device_memory.h on CUDA: one thread per element (grid-stride), on the default stream,
// then a synchronisation, so that the bytes are in place when the call's next message
// or the caller reads them (a transfer completes only when its bytes have landed).
#include <cuda_runtime.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/transport/device_memory.h"
#include "core/runtime/cuda/cuda_status.h"
#include "core/runtime/kernels/cuda/launch.cuh"
#include "core/runtime/status_macros.h"

namespace tally::comm {
namespace {

template <typename T>
__global__ void ReduceKernel(T* dst, const T* src, int64_t n, ReduceOp op) {
  TALLY_GRID_STRIDE(i, n) {
    const T a = dst[i], b = src[i];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: dst[i] = a + b; break;
      case ReduceOp::kProd: dst[i] = a * b; break;
      case ReduceOp::kMax: dst[i] = a > b ? a : b; break;
      case ReduceOp::kMin: dst[i] = a < b ? a : b; break;
    }
  }
}

template <typename T>
__global__ void DivideKernel(T* data, int64_t n, int divisor) {
  TALLY_GRID_STRIDE(i, n) { data[i] = data[i] / T(divisor); }
}

// Calls launch((T*)nullptr) with the element type T of `dtype`; false for a dtype the
// GPU kernels do not take (bf16).
template <typename Launch>
bool ForDType(DType dtype, Launch launch) {
  switch (dtype) {
    case DType::kF32:
      launch(static_cast<float*>(nullptr));
      return true;
    case DType::kF64:
      launch(static_cast<double*>(nullptr));
      return true;
    case DType::kI32:
      launch(static_cast<int32_t*>(nullptr));
      return true;
    case DType::kI64:
      launch(static_cast<int64_t*>(nullptr));
      return true;
    default:
      return false;
  }
}

// Waits for the kernel just launched; its launch error or its execution error. The
// default stream, not the whole device: an NCCL send that another stream holds open
// until its peer receives must not hold up this rank's reduction.
absl::Status Finish(const char* kernel) {
  RETURN_IF_ERROR(cuda::CudaStatus(cudaGetLastError(), kernel));
  return cuda::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), kernel);
}

absl::Status NotOnDevice(DType dtype, const char* what) {
  return absl::UnimplementedError(
      absl::StrCat("[comm] ", what, " of ", Name(dtype), " on a GPU is not built"));
}

}  // namespace

absl::Status DeviceCopy(void* dst, const void* src, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  return absl::OkStatus();
}

absl::Status DeviceReduceInto(void* dst, const void* src, int64_t count, DType dtype,
                              ReduceOp op) {
  if (count <= 0) return absl::OkStatus();
  const bool known = ForDType(dtype, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    ReduceKernel<<<cuda::Blocks(count), cuda::kThreads>>>(static_cast<T*>(dst),
                                                          static_cast<const T*>(src), count, op);
  });
  return known ? Finish("ReduceKernel") : NotOnDevice(dtype, "a reduction");
}

absl::Status DeviceFinishAverage(void* data, int64_t count, DType dtype, int divisor) {
  if (count <= 0) return absl::OkStatus();
  const bool known = ForDType(dtype, [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    DivideKernel<<<cuda::Blocks(count), cuda::kThreads>>>(static_cast<T*>(data), count, divisor);
  });
  return known ? Finish("DivideKernel") : NotOnDevice(dtype, "an average");
}

}  // namespace tally::comm
