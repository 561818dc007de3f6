#include "core/runtime/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "core/runtime/kernels/cpu/fast_math.h"

namespace tally::cpu {

template <typename T>
void CrossEntropyForward(T* losses, T* probs, const T* logits, const int32_t* targets, int n,
                         int v) {
  for (int i = 0; i < n; ++i) {
    const T* row = logits + static_cast<long>(i) * v;
    T* p = probs + static_cast<long>(i) * v;
    T max = row[0];
    for (int j = 1; j < v; ++j) max = std::max(max, row[j]);  // subtract it: exp cannot overflow
    T sum = 0;
    for (int j = 0; j < v; ++j) {
      p[j] = FastExp(row[j] - max);
      sum += p[j];
    }
    T inv = T(1) / sum;
    for (int j = 0; j < v; ++j) p[j] *= inv;
    // log p[target] from the logits, which keeps precision where p underflows.
    losses[i] = std::log(sum) - (row[targets[i]] - max);
  }
}

template <typename T>
void CrossEntropyBackward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int n,
                          int v) {
  for (int i = 0; i < n; ++i) {
    const T* p = probs + static_cast<long>(i) * v;
    T* d = dlogits + static_cast<long>(i) * v;
    for (int j = 0; j < v; ++j) d[j] = p[j] * dloss;
    d[targets[i]] -= dloss;
  }
}

template void CrossEntropyForward(float*, float*, const float*, const int32_t*, int, int);
template void CrossEntropyForward(double*, double*, const double*, const int32_t*, int, int);
template void CrossEntropyBackward(float*, const float*, const int32_t*, float, int, int);
template void CrossEntropyBackward(double*, const double*, const int32_t*, double, int, int);

}  // namespace tally::cpu
