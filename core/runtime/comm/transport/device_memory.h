// A collective's local work on CUDA device memory: copies between buffers (of one rank,
// or of two ranks of the threads transport, which share the process's address space),
// the reduction a receive does, and the division that finishes an average. A call's
// buffers are on a GPU when OpSignature::device >= 0. Built from device_memory.cu with
// CUDA; without it each says that the build has no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "core/runtime/comm/types.h"
#include "core/runtime/dtype.h"

namespace tally::comm {

// cudaMemcpy with the direction inferred from the pointers (host or device, any GPU).
absl::Status DeviceCopy(void* dst, const void* src, size_t bytes);

// dst[i] = op(dst[i], src[i]) on the GPU that holds dst (src on the same GPU), as
// ReduceInto; fp32, fp64, int32 and int64.
absl::Status DeviceReduceInto(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op);

// data[i] /= divisor, as FinishAverage.
absl::Status DeviceFinishAverage(void* data, int64_t count, DType dtype, int divisor);

}  // namespace tally::comm
