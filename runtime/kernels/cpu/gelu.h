// GELU, tanh approximation (GPT-2's):
//   y = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
// GeluForward: x (n) -> y (n).  GeluBackward: dx (n) = gelu'(x) · dy (n), written.
#pragma once

namespace tally::cpu {

template <typename T>
void GeluForward(T* y, const T* x, long n);

template <typename T>
void GeluBackward(T* dx, const T* x, const T* dy, long n);

}  // namespace tally::cpu
