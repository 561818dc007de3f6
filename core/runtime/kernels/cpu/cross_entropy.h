// Softmax cross-entropy over the vocabulary.
//
// N = rows (B·T), V = vocabulary.
//   CrossEntropyForward:  logits (N, V), targets (N) -> probs (N, V), losses (N)
//                         losses[i] = -log softmax(logits[i])[targets[i]]
//   CrossEntropyBackward: dlogits (N, V) = (probs - onehot(targets)) · dloss
// `dloss` is d(total loss)/d(losses[i]), the same for every row: 1 / (tokens in the global
// batch) for a mean over it. dlogits may be the probs buffer itself.
#pragma once

#include <cstdint>

namespace tally::cpu {

template <typename T>
void CrossEntropyForward(T* losses, T* probs, const T* logits, const int32_t* targets, int n, int v);

template <typename T>
void CrossEntropyBackward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int n, int v);

}  // namespace tally::cpu
