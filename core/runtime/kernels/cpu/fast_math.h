// exp and tanh for float that the compiler can vectorise (libm's are scalar calls).
//
// FastExp: Cody-Waite range reduction x = n·ln2 + r, |r| <= ln2/2, a degree-6 polynomial
// for e^r, and 2^n built in the exponent bits: within 1.2e-7 relative of e^x on [-87, 88]
// (one ulp; tested in fast_math_test). FastTanh = 1 - 2/(e^{2u} + 1): within 2e-7
// absolute, which is what GELU needs (its output is ½·x·(1 + tanh)).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tally::cpu {

[[gnu::always_inline]] inline float FastExp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln2): adding 1.5·2^23 pushes the fraction out of the mantissa (plain
  // SSE2 has no round instruction, and this keeps the loop vectorisable).
  const float shifter = 12582912.0f;
  float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;                        // ln2 split in two for precision
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

[[gnu::always_inline]] inline float FastTanh(float u) {
  u = u < -15.0f ? -15.0f : (u > 15.0f ? 15.0f : u);  // tanh is ±1 in float beyond 9
  return 1.0f - 2.0f / (FastExp(2.0f * u) + 1.0f);
}

// to[j] = FastExp(from[j] - shift) for j < n: a softmax's numerators, compiled for AVX-512,
// AVX2 and the baseline (cpu_clones.h; the same values in each). A row's sum is left to the
// caller, who adds them in order.
void ExpMinus(float* to, const float* from, float shift, int64_t n);

// The double versions stay exact: they serve the finite-difference tests.
inline double FastExp(double x) { return std::exp(x); }
inline double FastTanh(double u) { return std::tanh(u); }

}  // namespace tally::cpu
