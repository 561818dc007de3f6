// Layer normalisation over the last dimension, with a learned scale and shift.
//
// N = rows (B·T), C = channels.
//   LayerNormForward:  x (N, C), w (C), b (C) -> y (N, C), mean (N), rstd (N)
//                      y = (x - mean) · rstd · w + b,  rstd = 1 / sqrt(var + 1e-5)
//   LayerNormBackward: dy (N, C) -> dx (N, C) += ..., dw (C) += ..., db (C) += ...
// dx accumulates because in a pre-LN block it is the residual stream's gradient.
#pragma once

namespace tally::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// Y: T, or BFloat16 (y rounded to nearest even: a bf16 matmul's input kept as it reads it).
template <typename T, typename Y>
void LayerNormForward(Y* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int n, int c);

template <typename T>
void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                       const T* rstd, int n, int c);

}  // namespace tally::cpu
