#include "core/runtime/rng.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors):
// counter (c0, c1, c2, c3) and key (k0, k1) map to the four output words.
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox(0, 0, 0), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  // counter {243f6a88, 85a308d3, 13198a2e, 03707344}, key {a4093822, 299f31d0}
  EXPECT_EQ(Philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, AShardGeneratesExactlyItsSliceOfTheSerialTensor) {
  const uint64_t seed = 1337, stream = StreamOf("h.0.mlp.c_fc.weight");
  std::vector<float> serial(1000), shard(250);
  FillNormal(serial.data(), 1000, seed, stream, 0, 0.0f, 0.02f);
  FillNormal(shard.data(), 250, seed, stream, 500, 0.0f, 0.02f);
  for (int i = 0; i < 250; ++i) EXPECT_EQ(shard[i], serial[500 + i]);
}

TEST(Rng, StreamsAndSeedsDiffer) {
  EXPECT_NE(StreamOf("wte.weight"), StreamOf("wpe.weight"));
  EXPECT_NE(Normal(1, 2, 3), Normal(1, 3, 3));
  EXPECT_NE(Normal(1, 2, 3), Normal(2, 2, 3));
  EXPECT_EQ(Normal(1, 2, 3), Normal(1, 2, 3));
}

TEST(Rng, MomentsOfNormalAndUniform) {
  const int n = 200000;
  double sum = 0, sum_sq = 0, usum = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    double x = Normal(7, 11, uint64_t(i));
    sum += x;
    sum_sq += x * x;
    float u = Uniform(7, 11, uint64_t(i));
    usum += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  // Standard errors: mean 1/sqrt(n) ~ 0.0022, variance sqrt(2/n) ~ 0.0032; bounds at ~5 sigma.
  EXPECT_NEAR(sum / n, 0.0, 0.012);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.016);
  EXPECT_NEAR(usum / n, 0.5, 0.004);
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
}

}  // namespace
}  // namespace tally
