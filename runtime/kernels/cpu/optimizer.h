// AdamW's element-wise update on the CPU (the formula: runtime/kernels/adamw.h).
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernels/adamw.h"

namespace tally::cpu {

// n parameters from fp32 or bf16 gradients (widened exactly), compiled for AVX-512, AVX2
// and the baseline (cpu_clones.h; IEEE square root and division: the same values in each).
void AdamW(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWArgs& a);
void AdamW(float* params, const BFloat16* grads, float* m, float* v, int64_t n,
           const AdamWArgs& a);

}  // namespace tally::cpu
