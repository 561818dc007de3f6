#include "runtime/kernels/cpu/convert.h"

#include "runtime/kernels/cpu/cpu_clones.h"

namespace tally::cpu {
namespace {

// Always inlined, so that each clone below compiles the loop for its own target.
template <typename Y, typename X>
[[gnu::always_inline]] inline void Add(Y* y, const X* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = StoredAs<Y>(AsFloat(y[i]) + AsFloat(x[i]));
}

}  // namespace

TALLY_CPU_CLONES void Widen(float* to, const BFloat16* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] = from[i].ToFloat();
}

TALLY_CPU_CLONES void Accumulate(float* y, const float* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(float* y, const BFloat16* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(BFloat16* y, const float* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(BFloat16* y, const BFloat16* x, int64_t n) { Add(y, x, n); }

}  // namespace tally::cpu
