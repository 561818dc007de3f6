// The optimizer's CPU loops: AdamW's element-wise update (the formula:
// core/runtime/kernels/adamw.h), and the gradient norm's sum of squares.
#pragma once

#include <cstdint>

#include "core/runtime/dtype.h"
#include "core/runtime/kernels/adamw.h"

namespace tally::cpu {

// n parameters from fp32 or bf16 gradients (widened exactly), compiled for AVX-512, AVX2
// and the baseline (cpu_clones.h; IEEE square root and division: the same values in each).
// A gradient times the clipping factor, rounded to its own type: what Kernels::Scale
// leaves in the gradients' buffer, which the optimizers read instead (kernels.h).
template <typename G>
float Clipped(G g, float scale) {
  return AsFloat(StoredAs<G>(AsFloat(g) * scale));
}

void AdamW(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWArgs& a);
void AdamW(float* params, const BFloat16* grads, float* m, float* v, int64_t n,
           const AdamWArgs& a);

// x[0]² + ... + x[n-1]² in double, in a fixed order: element i goes to lane i mod 8 (each
// lane summed in order), and the eight lanes are added in order 0..7 at the end. Compiled
// for AVX-512, AVX2 and the baseline (the same values in each: one vector add per lane).
double SumOfSquares(const float* x, int64_t n);
double SumOfSquares(const BFloat16* x, int64_t n);

}  // namespace tally::cpu
