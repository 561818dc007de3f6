// Element-wise passes between fp32 and bf16: widening bf16 to fp32 (exact) and adding one
// buffer into another, either type into either, in fp32 and rounded once to nearest even
// where the destination is bf16. Each is compiled for AVX-512, AVX2 and the baseline
// (cpu_clones.h; the same values in each) and runs on the calling thread: the kernels cut
// the range over the intra-op threads (parallel.h); the collectives' local sums
// (comm/algorithms/reduce.cc) are Accumulate too.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace tally::cpu {

void Widen(float* to, const BFloat16* from, int64_t n);

// y[i] += x[i] for i < n.
void Accumulate(float* y, const float* x, int64_t n);
void Accumulate(float* y, const BFloat16* x, int64_t n);
void Accumulate(BFloat16* y, const float* x, int64_t n);
void Accumulate(BFloat16* y, const BFloat16* x, int64_t n);

}  // namespace tally::cpu
