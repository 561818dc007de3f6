#include "core/runtime/kernels/cpu/fast_math.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tally::cpu {
namespace {

TEST(FastMath, ExpWithinOneUlp) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    double want = std::exp(double(x));
    EXPECT_NEAR(FastExp(x), want, 1.2e-7 * want) << x;
  }
  EXPECT_EQ(FastExp(0.0f), 1.0f);
}

TEST(FastMath, TanhWithinTwoTenMillionths) {
  for (float u = -20.0f; u <= 20.0f; u += 0.001f) {
    EXPECT_NEAR(FastTanh(u), std::tanh(double(u)), 2e-7) << u;
  }
}

}  // namespace
}  // namespace tally::cpu
