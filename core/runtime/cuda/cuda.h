// The CUDA runtime as tally uses it: is there a GPU, device memory, copies. No CUDA type
// appears here, so that code which never runs on a GPU need not see the toolkit; the
// build without CUDA (cuda_stub.cc) answers every call with a clear error.
//
//   ASSIGN_OR_RETURN(int gpus, cuda::DeviceCount());   // an error says why there are none
//   ASSIGN_OR_RETURN(void* p, cuda::Malloc(bytes));    // zero-filled
//   RETURN_IF_ERROR(cuda::CopyToDevice(p, host, bytes));
//   cuda::Free(p);
//
// Every CUDA return code is checked and becomes a Status that names the call.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tally::cuda {

// Whether this build has CUDA (the toolkit was found when it was configured).
bool Built();

// The GPUs this process sees. Fails, saying why, when there are none: a build without
// CUDA, no driver, no device.
absl::StatusOr<int> DeviceCount();

// The name and compute capability of device `index` ("NVIDIA H200, sm_90").
absl::StatusOr<std::string> DeviceName(int index);

// Makes `index` the calling thread's device.
absl::Status SetDevice(int index);

// `bytes` of zero-filled memory on the current device.
absl::StatusOr<void*> Malloc(size_t bytes);
void Free(void* device_pointer);

absl::Status CopyToDevice(void* device, const void* host, size_t bytes);
absl::Status CopyToHost(void* host, const void* device, size_t bytes);
absl::Status CopyOnDevice(void* to, const void* from, size_t bytes);
absl::Status Zero(void* device, size_t bytes);

// Waits for all work queued on the current device; returns its first error.
absl::Status Synchronize();

}  // namespace tally::cuda
