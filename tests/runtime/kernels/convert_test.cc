// Round (convert.h) against BFloat16::FromFloat, bit for bit: on a CPU with AVX512-BF16 it
// takes the conversion instruction, elsewhere the loop; either way the same bits.
#include "core/runtime/kernels/cpu/convert.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tally::cpu {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Round(from[first..first+n)) against FromFloat, element by element.
void ExpectRoundIsFromFloat(const std::vector<float>& from, size_t first, size_t n) {
  std::vector<BFloat16> to(n);
  Round(to.data(), from.data() + first, int64_t(n));
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &from[first + i], sizeof(bits));
    ASSERT_EQ(to[i].bits, BFloat16::FromFloat(from[first + i]).bits)
        << "input bits 0x" << std::hex << bits;
  }
}

TEST(Convert, RoundIsFromFloatOverTheBitPatterns) {
  // Every 997th pattern of the 2^32 (signs, subnormals, normals, infinities, NaNs), each
  // group of 16 mixed across the whole range.
  std::vector<float> from;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 997) {
    from.push_back(FromBits(uint32_t(bits)));
  }
  ExpectRoundIsFromFloat(from, 0, from.size());
  // Unaligned starts and lengths that leave a tail.
  ExpectRoundIsFromFloat(from, 3, 1000);
  ExpectRoundIsFromFloat(from, 17, 15);
  RecordProperty("with_instruction", RoundsWithInstruction() ? "yes" : "no");
}

TEST(Convert, RoundKeepsASubnormalAmongNormals) {
  // One subnormal in a group of 16 normal values: the group goes the long way; the groups
  // around it do not.
  std::vector<float> from(48);
  for (size_t i = 0; i < from.size(); ++i) from[i] = 1.0f + float(i) / 64.0f;
  from[21] = std::numeric_limits<float>::denorm_min() * 3;
  from[22] = -0x1.8p-130f;
  ExpectRoundIsFromFloat(from, 0, from.size());
  std::vector<BFloat16> to(from.size());
  Round(to.data(), from.data(), int64_t(from.size()));
  EXPECT_EQ(to[22].bits, BFloat16::FromFloat(-0x1.8p-130f).bits);
  EXPECT_NE(to[22].bits & 0x7fff, 0) << "a subnormal bf16, not zero";
}

}  // namespace
}  // namespace tally::cpu
