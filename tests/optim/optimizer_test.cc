#include "optim/optimizer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "optim/schedule.h"

namespace tally::optim {
namespace {

// Two AdamW steps worked out by hand (lr 0.1, β 0.9/0.95, eps 1e-8, wd 0.1), p0 = 1:
//   step 1, g = 0.5:   p = 0.99; m = 0.05; v = 0.0125; step size 0.1/0.1 = 1;
//                      denom = sqrt(0.0125)/sqrt(0.05) + eps = 0.5;  p = 0.99 - 0.1 = 0.89
//   step 2, g = -0.25: p = 0.8811; m = 0.02; v = 0.015; step size 0.1/0.19;
//                      denom = sqrt(0.015)/sqrt(0.0975) = 0.39223227;
//                      p = 0.8811 - 0.5263158·0.02/0.39223227 = 0.85426306
TEST(AdamW, MatchesHandComputedSteps) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  AdamWOptions o;
  o.weight_decay = 0.1f;
  auto adam = AdamW::Create(o, 2, alloc).value();
  EXPECT_EQ(ledger.current(MemoryCategory::kOptimizer), 2 * 2 * 4);  // m and v
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<Segment> segments = {{0, 1, true}, {1, 2, false}};  // the second does not decay
  std::vector<float> g = {0.5f, 0.5f};
  ASSERT_TRUE(adam->Step(p.data(), g.data(), 0.1f, segments).ok());
  EXPECT_NEAR(p[0], 0.89f, 1e-6f);
  EXPECT_NEAR(p[1], 0.90f, 1e-6f);  // no decay: 1 - 0.1
  g = {-0.25f, -0.25f};
  ASSERT_TRUE(adam->Step(p.data(), g.data(), 0.1f, segments).ok());
  EXPECT_NEAR(p[0], 0.85426306f, 1e-6f);
  EXPECT_EQ(adam->step(), 2);
}

TEST(SGD, MomentumAndL2DecayAsTorch) {
  Allocator alloc(nullptr);
  SGDOptions o;
  o.momentum = 0.9f;
  o.weight_decay = 0.5f;
  auto sgd = SGD::Create(o, 1, alloc).value();
  float p = 2.0f, g = 1.0f;
  std::vector<Segment> all = {{0, 1, true}};
  // g' = 1 + 0.5·2 = 2; b = 2; p = 2 - 0.2 = 1.8
  ASSERT_TRUE(sgd->Step(&p, &g, 0.1f, all).ok());
  EXPECT_NEAR(p, 1.8f, 1e-6f);
  // g' = 1 + 0.9 = 1.9; b = 0.9·2 + 1.9 = 3.7; p = 1.8 - 0.37
  ASSERT_TRUE(sgd->Step(&p, &g, 0.1f, all).ok());
  EXPECT_NEAR(p, 1.43f, 1e-6f);
}

TEST(Schedule, WarmupThenCosineToMinAtTheLastStep) {
  // k is 1-based: step k of N = 110 with W = 10 warm-up steps.
  EXPECT_FLOAT_EQ(LearningRate(1, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(10, 10, 110, 1.0f, 0.1f), 1.0f);  // the peak, once
  EXPECT_LT(LearningRate(11, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(LearningRate(11, 10, 110, 1.0f, 0.1f),
              0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 1 / 100)), 1e-7);
  EXPECT_NEAR(LearningRate(60, 10, 110, 1.0f, 0.1f), 0.55f, 1e-6f);  // half way: the mean
  EXPECT_FLOAT_EQ(LearningRate(110, 10, 110, 1.0f, 0.1f), 0.1f);  // the last step: min_lr
  EXPECT_FLOAT_EQ(LearningRate(500, 10, 110, 1.0f, 0.1f), 0.1f);
  // No warm-up: the decay starts at step 1 and ends at min_lr on step N.
  EXPECT_NEAR(LearningRate(1, 0, 10, 1.0f, 0.0f), 0.5 * (1 + std::cos(M_PI / 10)), 1e-7);
  EXPECT_FLOAT_EQ(LearningRate(10, 0, 10, 1.0f, 0.0f), 0.0f);
  // Every step of a 20-step run: a 20-step warm-up ends on the peak.
  EXPECT_FLOAT_EQ(LearningRate(20, 20, 20, 1e-3f, 1e-4f), 1e-3f);
}

TEST(Clipping, ScalesOnlyAboveTheMaximum) {
  std::vector<float> g = {3.0f, 4.0f};
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU()).value();
  const std::vector<Segment> all = {{0, 2, false}};
  double norm = std::sqrt(SquaredNorm(*k, g.data(), all).value());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_EQ(ClipScale(norm, 10.0f), 1.0f);
  float s = ClipScale(norm, 1.0f);
  EXPECT_NEAR(s, 0.2f, 1e-6f);
  ASSERT_TRUE(k->Scale(g.data(), 2, s).ok());
  EXPECT_NEAR(std::sqrt(SquaredNorm(*k, g.data(), all).value()), 1.0, 1e-6);
}

}  // namespace
}  // namespace tally::optim
