// Elementwise reduction kernels used by the collectives.
//
// A receive that reduces (ring reduce-scatter, reduce, the all-reduce's first half) calls
// ReduceInto with the sender's bytes as `src`: NCCL's recv-reduce-copy, done in one pass.
#pragma once

#include <cstdint>

#include "core/runtime/comm/types.h"
#include "core/runtime/dtype.h"

namespace tally::comm {

// dst[i] = op(dst[i], src[i]) for i in [0, count). kAvg accumulates a sum here; the
// collective divides once at the end (FinishAverage), so every rank divides the same sum.
void ReduceInto(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op);

// data[i] /= divisor: turns a sum into the average (integers divide, rounding toward zero).
void FinishAverage(void* data, int64_t count, DType dtype, int divisor);

}  // namespace tally::comm
