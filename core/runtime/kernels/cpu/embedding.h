// Token + position embedding.
//
// B = batch, T = sequence, C = channels, V = vocabulary.
//   EmbeddingForward:  tokens (B, T), wte (V, C), wpe (T_max, C) -> x (B, T, C)
//                      x[b, t] = wte[tokens[b, t]] + wpe[t]
//   EmbeddingBackward: dx (B, T, C) -> dwte (V, C) +=, dwpe (T_max, C) +=
#pragma once

#include <cstdint>

namespace tally::cpu {

template <typename T>
void EmbeddingForward(T* x, const int32_t* tokens, const T* wte, const T* wpe, int b, int t, int c);

template <typename T>
void EmbeddingBackward(T* dwte, T* dwpe, const T* dx, const int32_t* tokens, int b, int t, int c);

}  // namespace tally::cpu
