#include "core/runtime/rng.h"

#include <cmath>

namespace tally {
namespace {

// Philox4x32 round constants (multipliers and Weyl key increments) from the paper.
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t product = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(product >> 32);
  *lo = uint32_t(product);
}

}  // namespace

std::array<uint32_t, 4> Philox(uint64_t seed, uint64_t stream, uint64_t index) {
  std::array<uint32_t, 4> c = {uint32_t(index), uint32_t(index >> 32), uint32_t(stream),
                               uint32_t(stream >> 32)};
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, c[0], &hi0, &lo0);
    MulHiLo(kMul1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
  for (unsigned char ch : bytes) {
    hash ^= ch;
    hash *= 0x100000001b3ull;  // FNV prime
  }
  return hash;
}

float Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(Philox(seed, stream, index)[0] >> 8) * 0x1.0p-24f;
}

float Normal(uint64_t seed, uint64_t stream, uint64_t index) {
  std::array<uint32_t, 4> bits = Philox(seed, stream, index);
  // u1 in (0, 1] keeps the logarithm finite; u2 in [0, 1).
  double u1 = (double(bits[0]) + 1.0) * 0x1.0p-32;
  double u2 = double(bits[1]) * 0x1.0p-32;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void FillNormal(float* out, int64_t count, uint64_t seed, uint64_t stream, uint64_t first_index,
                float mean, float std) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = mean + std * Normal(seed, stream, first_index + uint64_t(i));
  }
}

void FillUniform(float* out, int64_t count, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float low, float high) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = low + (high - low) * Uniform(seed, stream, first_index + uint64_t(i));
  }
}

}  // namespace tally
