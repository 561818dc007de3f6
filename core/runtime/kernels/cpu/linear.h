// The linear layer: y = x · Wᵀ + b, with W stored (out, in) as torch.nn.Linear stores it.
//
// N = rows (B·T), C = in features, OC = out features.
//   LinearForward:  x (N, C), W (OC, C), b (OC) or null  ->  y (N, OC)      2·N·C·OC flops
//   LinearBackward: dy (N, OC) -> dx (N, C) = dy · W       (written, or added to with
//                                                            accumulate_dx)
//                                  dW (OC, C) += dyᵀ · x,  db (OC) += Σ_rows dy
// Weight and bias gradients always accumulate (micro-batches add up); dx or dW may be
// null when nobody needs it. With MatmulInputs::kBF16 (float only) x, W and dy enter the
// products rounded to bf16 (x and W may be kept in bf16 already: X, W = BFloat16); the
// products, sums, bias and outputs are fp32.
#pragma once

#include "core/runtime/kernels/cpu/gemm.h"

namespace tally::cpu {

// X, W: T, or BFloat16 for T = float with MatmulInputs::kBF16.
template <typename T, typename X, typename W>
void LinearForward(T* y, const X* x, const W* w, const T* b, int n, int c, int oc,
                   MatmulInputs inputs = MatmulInputs::kF32);

template <typename T, typename X, typename W>
void LinearBackward(T* dx, T* dw, T* db, const T* dy, const X* x, const W* w, int n, int c, int oc,
                    bool accumulate_dx = false, MatmulInputs inputs = MatmulInputs::kF32);

}  // namespace tally::cpu
