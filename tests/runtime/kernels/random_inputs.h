// Random inputs for the kernel tests: normal floats and tokens, reproducible by seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tally {

inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// n tokens in [0, vocab).
inline std::vector<int32_t> Tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = int32_t(gen() % uint32_t(vocab));
  return v;
}

}  // namespace tally
