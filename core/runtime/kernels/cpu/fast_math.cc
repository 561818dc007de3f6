#include "core/runtime/kernels/cpu/fast_math.h"

#include "core/runtime/kernels/cpu/cpu_clones.h"

namespace tally::cpu {

TALLY_CPU_CLONES void ExpMinus(float* to, const float* from, float shift, int64_t n) {
  for (int64_t j = 0; j < n; ++j) to[j] = FastExp(from[j] - shift);
}

}  // namespace tally::cpu
