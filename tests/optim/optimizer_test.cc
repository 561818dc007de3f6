#include "core/optim/optimizer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "core/optim/schedule.h"

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
  double norm = std::sqrt(SquaredNorm(*k, g.data(), DType::kF32, all).value());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_EQ(ClipScale(norm, 10.0f), 1.0f);
  float s = ClipScale(norm, 1.0f);
  EXPECT_NEAR(s, 0.2f, 1e-6f);
  ASSERT_TRUE(k->Scale(g.data(), 2, s).ok());
  EXPECT_NEAR(std::sqrt(SquaredNorm(*k, g.data(), DType::kF32, all).value()), 1.0, 1e-6);
}

// bf16 gradients are read as the fp32 values they hold: an update from them equals the
// update from fp32 gradients of the same values, bit for bit, and so do the norm and the
// clipping (which rounds back to bf16).
TEST(MixedPrecision, Bf16GradientsUpdateAsTheirFp32Values) {
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU()).value();
  const int n = 5;
  std::vector<float> wide = {0.5f, -1.25f, 3.0e-3f, 7.0f, -2.0e-5f};
  std::vector<BFloat16> narrow(n);
  for (int i = 0; i < n; ++i) {
    narrow[i] = BFloat16::FromFloat(wide[i] * 1.01f);
    wide[i] = narrow[i].ToFloat();
  }
  const std::vector<Segment> all = {{0, n, true}};
  Allocator alloc(nullptr);
  auto a = AdamW::Create({}, n, alloc).value();
  auto b = AdamW::Create({}, n, alloc).value();
  std::vector<float> pa = {1, 2, 3, 4, 5}, pb = pa;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(a->Step(pa.data(), wide.data(), 0.1f, all).ok());
    ASSERT_TRUE(b->Step(pb.data(), narrow.data(), DType::kBF16, 0.1f, all).ok());
  }
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(SquaredNorm(*k, wide.data(), DType::kF32, all).value(),
            SquaredNorm(*k, narrow.data(), DType::kBF16, all).value());
  ASSERT_TRUE(k->Scale(narrow.data(), DType::kBF16, n, 0.5f).ok());
  for (int i = 0; i < n; ++i) EXPECT_EQ(narrow[i].ToFloat(), wide[i] * 0.5f);
}

// The optimizers clip the gradients as they read them: the same update, bit for bit, as
// scaling the gradients' buffer first (rounded back to bf16 for bf16 gradients), with the
// buffer left as it was.
TEST(Clipping, InsideTheStepEqualsScalingTheGradientsFirst) {
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU()).value();
  const int n = 1000;
  std::vector<float> wide(n);
  std::vector<BFloat16> narrow(n);
  for (int i = 0; i < n; ++i) {
    wide[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 7));
    narrow[i] = BFloat16::FromFloat(wide[i]);
  }
  const float scale = 0.3137f;  // no power of two: the products round
  const std::vector<Segment> all = {{0, n, true}};
  Allocator alloc(nullptr);
  for (const bool bf16 : {false, true}) {
    const DType type = bf16 ? DType::kBF16 : DType::kF32;
    std::vector<float> g32 = wide, scaled32 = wide;
    std::vector<BFloat16> g16 = narrow, scaled16 = narrow;
    void* grads = bf16 ? static_cast<void*>(g16.data()) : g32.data();
    void* scaled = bf16 ? static_cast<void*>(scaled16.data()) : scaled32.data();
    ASSERT_TRUE(k->Scale(scaled, type, n, scale).ok());
    auto inside = AdamW::Create({}, n, alloc).value();
    auto first = AdamW::Create({}, n, alloc).value();
    auto sgd_inside = SGD::Create({}, n, alloc).value();
    auto sgd_first = SGD::Create({}, n, alloc).value();
    std::vector<float> p_inside(n, 0.5f), p_first(n, 0.5f), q_inside(n, 0.5f), q_first(n, 0.5f);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(inside->Step(p_inside.data(), grads, type, 0.1f, all, scale).ok());
      ASSERT_TRUE(first->Step(p_first.data(), scaled, type, 0.1f, all).ok());
      ASSERT_TRUE(sgd_inside->Step(q_inside.data(), grads, type, 0.1f, all, scale).ok());
      ASSERT_TRUE(sgd_first->Step(q_first.data(), scaled, type, 0.1f, all).ok());
    }
    EXPECT_EQ(p_inside, p_first) << Name(type);
    EXPECT_EQ(q_inside, q_first) << Name(type);
    EXPECT_NE(p_inside, std::vector<float>(n, 0.5f));
    EXPECT_EQ(g32, wide);  // the gradients themselves are not scaled
    for (int i = 0; i < n; ++i) ASSERT_EQ(g16[i].bits, narrow[i].bits) << i;
  }
}

TEST(MixedPrecision, AccumulateRoundsOnceAndConvertRoundsToNearestEven) {
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU()).value();
  // 1 + 2^-8 is halfway between two bf16 values: nearest even is 1.
  std::vector<float> x = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f};
  std::vector<BFloat16> y(2);
  ASSERT_TRUE(k->Convert(y.data(), DType::kBF16, x.data(), DType::kF32, 2).ok());
  EXPECT_EQ(y[0].ToFloat(), 1.0f);
  EXPECT_EQ(y[1].ToFloat(), 1.0f + 0x1.0p-7f);
  // Adding 2^-9 twice one at a time in bf16 loses both; adding their fp32 sum once keeps it.
  std::vector<BFloat16> acc = {BFloat16::FromFloat(1.0f)};
  std::vector<float> tiny = {0x1.0p-9f}, both = {0x1.0p-8f + 0x1.0p-20f};
  ASSERT_TRUE(k->Accumulate(acc.data(), DType::kBF16, tiny.data(), DType::kF32, 1).ok());
  ASSERT_TRUE(k->Accumulate(acc.data(), DType::kBF16, tiny.data(), DType::kF32, 1).ok());
  EXPECT_EQ(acc[0].ToFloat(), 1.0f);
  ASSERT_TRUE(k->Accumulate(acc.data(), DType::kBF16, both.data(), DType::kF32, 1).ok());
  EXPECT_EQ(acc[0].ToFloat(), 1.0f + 0x1.0p-7f);
  std::vector<float> back(2);
  ASSERT_TRUE(k->Convert(back.data(), DType::kF32, y.data(), DType::kBF16, 2).ok());
  EXPECT_EQ(back[1], 1.0f + 0x1.0p-7f);
  EXPECT_FALSE(k->Convert(back.data(), DType::kF32, y.data(), DType::kI32, 2).ok());
}

}  // namespace
}  // namespace tally::optim
