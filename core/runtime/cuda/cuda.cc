#include "core/runtime/cuda/cuda.h"

#include "absl/strings/str_cat.h"
#include "core/runtime/cuda/cuda_status.h"

namespace tally::cuda {

bool Built() { return true; }

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();  // clear it: this error is an answer, not a broken context
    return absl::FailedPreconditionError(
        absl::StrCat("[cuda] no GPU: cudaGetDeviceCount says ", cudaGetErrorString(code), " (",
                     cudaGetErrorName(code), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("[cuda] no GPU: cudaGetDeviceCount found 0");
  return count;
}

absl::StatusOr<std::string> DeviceName(int index) {
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index));
  return absl::StrCat(prop.name, ", sm_", prop.major, prop.minor);
}

absl::Status SetDevice(int index) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return absl::OkStatus();
}

absl::StatusOr<void*> Malloc(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, bytes > 0 ? bytes : 1));
  return p;
}

void Free(void* device_pointer) { cudaFree(device_pointer); }

absl::Status CopyToDevice(void* device, const void* host, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CopyToHost(void* host, const void* device, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CopyOnDevice(void* to, const void* from, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice));
  return absl::OkStatus();
}

absl::Status Zero(void* device, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemset(device, 0, bytes));
  return absl::OkStatus();
}

absl::Status Synchronize() {
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace tally::cuda
