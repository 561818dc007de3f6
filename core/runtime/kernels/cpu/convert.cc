#include "core/runtime/kernels/cpu/convert.h"

#include <immintrin.h>

#include <cstring>

#include "core/runtime/kernels/cpu/cpu_clones.h"
#include "core/runtime/kernels/cpu/store.h"

namespace tally::cpu {
namespace {

// Always inlined, so that each clone below compiles the loop for its own target. Through
// StoreEach (store.h): a bf16 y is summed a tile at a time, and the tile rounded by Round.
template <typename Y, typename X>
[[gnu::always_inline]] inline void Add(Y* y, const X* x, int64_t n) {
  StoreEach(y, long(n), [y, x](long i) { return AsFloat(y[i]) + AsFloat(x[i]); });
}

TALLY_CPU_CLONES void RoundEach(BFloat16* to, const float* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] = BFloat16::FromFloat(from[i]);
}

// VCVTNEPS2BF16 rounds to nearest even as FromFloat does, quiets NaNs as it does, and keeps
// infinities; it differs only in reading subnormal inputs as zero.
[[gnu::target("avx512f,avx512bw,avx512bf16")]] void RoundWithInstruction(BFloat16* to,
                                                                        const float* from,
                                                                        int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(from + i);
    const __m512i bits = _mm512_castps_si512(v);
    const __mmask16 subnormal =
        _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(bits, exponent), bits, mantissa);
    if (subnormal != 0) {
      RoundEach(to + i, from + i, 16);
    } else {
      const __m256bh rounded = _mm512_cvtneps_pbh(v);
      std::memcpy(static_cast<void*>(to + i), &rounded, sizeof(rounded));
    }
  }
  RoundEach(to + i, from + i, n - i);
}

}  // namespace

bool RoundsWithInstruction() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

void Round(BFloat16* to, const float* from, int64_t n) {
  if (RoundsWithInstruction()) return RoundWithInstruction(to, from, n);
  RoundEach(to, from, n);
}

TALLY_CPU_CLONES void Widen(float* to, const BFloat16* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] = from[i].ToFloat();
}

TALLY_CPU_CLONES void Accumulate(float* y, const float* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(float* y, const BFloat16* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(BFloat16* y, const float* x, int64_t n) { Add(y, x, n); }
TALLY_CPU_CLONES void Accumulate(BFloat16* y, const BFloat16* x, int64_t n) { Add(y, x, n); }

}  // namespace tally::cpu
