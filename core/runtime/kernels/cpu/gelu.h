// GELU, tanh approximation (GPT-2's):
//   y = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
// GeluForward: x (n) -> y (n).  GeluBackward: dx (n) = gelu'(x) · dy (n), written (dx may
// be dy). The double versions are exact (std::tanh) and serve the gradient tests.
#pragma once

#include "core/runtime/dtype.h"

namespace tally::cpu {

void GeluForward(float* y, const float* x, long n);
// y rounded to nearest even: a bf16 matmul's input kept as it reads it.
void GeluForward(BFloat16* y, const float* x, long n);
void GeluForward(double* y, const double* x, long n);
void GeluBackward(float* dx, const float* x, const float* dy, long n);
void GeluBackward(double* dx, const double* x, const double* dy, long n);

}  // namespace tally::cpu
