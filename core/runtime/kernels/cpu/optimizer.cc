#include "core/runtime/kernels/cpu/optimizer.h"

#include <cmath>

#include "core/runtime/kernels/cpu/cpu_clones.h"

namespace tally::cpu {
namespace {

// Always inlined, so that each clone below compiles the loop for its own target.
template <typename G>
[[gnu::always_inline]] inline void Update(float* params, const G* grads, float* m, float* v,
                                          int64_t n, const AdamWArgs& a) {
  const float keep = a.keep, step_size = a.step_size, beta1 = a.beta1, beta2 = a.beta2,
              eps = a.eps, bias2_sqrt = a.bias2_sqrt, grad_scale = a.grad_scale;
  for (int64_t i = 0; i < n; ++i) {
    float g = Clipped(grads[i], grad_scale);
    float p = params[i] * keep;
    m[i] = m[i] + (1.0f - beta1) * (g - m[i]);  // torch's lerp: m + (1-β1)(g - m)
    v[i] = v[i] * beta2 + (1.0f - beta2) * g * g;
    float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    params[i] = p - step_size * (m[i] / denom);
  }
}

template <typename G>
[[gnu::always_inline]] inline double Squares(const G* x, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = AsFloat(x[i + j]);
      lane[j] += v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = AsFloat(x[i]);
    lane[j] += v * v;
  }
  double sum = 0;
  for (double l : lane) sum += l;
  return sum;
}

}  // namespace

TALLY_CPU_CLONES double SumOfSquares(const float* x, int64_t n) { return Squares(x, n); }
TALLY_CPU_CLONES double SumOfSquares(const BFloat16* x, int64_t n) { return Squares(x, n); }

TALLY_CPU_CLONES void AdamW(float* params, const float* grads, float* m, float* v, int64_t n,
                            const AdamWArgs& a) {
  Update(params, grads, m, v, n, a);
}
TALLY_CPU_CLONES void AdamW(float* params, const BFloat16* grads, float* m, float* v, int64_t n,
                            const AdamWArgs& a) {
  Update(params, grads, m, v, n, a);
}

}  // namespace tally::cpu
