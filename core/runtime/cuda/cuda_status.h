// Turning CUDA and cuBLAS return codes into a Status that names the call (for the .cc and
// .cu files that include the toolkit's headers).
//
//   CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
//   // -> "[cuda] cudaMalloc(&p, bytes) failed: out of memory (cudaErrorMemoryAllocation)"
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tally::cuda {

inline absl::Status CudaStatus(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("[cuda] ", call, " failed: ", cudaGetErrorString(code),
                                          " (", cudaGetErrorName(code), ")"));
}

inline absl::Status CublasStatus(cublasStatus_t code, const char* call) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("[cublas] ", call, " failed: ", cublasGetStatusName(code),
                                          " (", cublasGetStatusString(code), ")"));
}

}  // namespace tally::cuda

#define CUDA_RETURN_IF_ERROR(call)                                                     \
  do {                                                                                 \
    ::absl::Status tally_cuda_status = ::tally::cuda::CudaStatus((call), #call);       \
    if (!tally_cuda_status.ok()) return tally_cuda_status;                             \
  } while (false)

#define CUBLAS_RETURN_IF_ERROR(call)                                                   \
  do {                                                                                 \
    ::absl::Status tally_cublas_status = ::tally::cuda::CublasStatus((call), #call);   \
    if (!tally_cublas_status.ok()) return tally_cublas_status;                         \
  } while (false)
