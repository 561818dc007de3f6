#include "core/runtime/kernels/cpu/embedding.h"

namespace tally::cpu {

template <typename T>
void EmbeddingForward(T* x, const int32_t* tokens, const T* wte, const T* wpe, int b, int t,
                      int c) {
  for (int i = 0; i < b; ++i) {
    for (int j = 0; j < t; ++j) {
      T* out = x + (static_cast<long>(i) * t + j) * c;
      const T* tok = wte + static_cast<long>(tokens[i * t + j]) * c;
      const T* pos = wpe + static_cast<long>(j) * c;
      for (int k = 0; k < c; ++k) out[k] = tok[k] + pos[k];
    }
  }
}

template <typename T>
void EmbeddingBackward(T* dwte, T* dwpe, const T* dx, const int32_t* tokens, int b, int t, int c) {
  for (int i = 0; i < b; ++i) {
    for (int j = 0; j < t; ++j) {
      const T* g = dx + (static_cast<long>(i) * t + j) * c;
      T* tok = dwte + static_cast<long>(tokens[i * t + j]) * c;
      T* pos = dwpe + static_cast<long>(j) * c;
      for (int k = 0; k < c; ++k) {
        tok[k] += g[k];
        pos[k] += g[k];
      }
    }
  }
}

template void EmbeddingForward(float*, const int32_t*, const float*, const float*, int, int, int);
template void EmbeddingForward(double*, const int32_t*, const double*, const double*, int, int,
                               int);
template void EmbeddingBackward(float*, float*, const float*, const int32_t*, int, int, int);
template void EmbeddingBackward(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace tally::cpu
