// The mixture-of-experts MLP: routing (top-k, ties, renormalised weights, capacity in
// priority order, the auxiliary loss) by hand, and every gradient of the layer — the
// router's, each expert's, the input's, through the renormalisation, the capacity's drops
// and the auxiliary loss — against central finite differences of an independent
// double-precision implementation of moe.h's definition.
#include "core/model/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/rng.h"

namespace tally::model {
namespace {

GPTConfig Config(int experts, int k, double capacity, double coef) {
  GPTConfig c;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_experts = experts;
  c.moe_top_k = k;
  c.capacity_factor = capacity;
  c.aux_loss_coef = coef;
  return c;
}

TEST(Route, TopKTiesWeightsCapacityAndTheAuxiliaryLoss) {
  // 4 tokens, 3 experts, top 2, capacity ⌈1.0·2·4/3⌉ = 3.
  const GPTConfig config = Config(3, 2, 1.0, 0.5);
  const float logits[] = {
      2, 1, 0,   // experts 0, 1
      0, 0, 5,   // 2, then 0 (a tie with 1: the lower index)
      3, 1, 1,   // 0, then 1
      4, 0, 3,   // 0 (its 4th first choice is dropped... no: the 3rd), 2
  };
  const MoeRouting r = Route(config, logits, 4);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 2}));
  auto p = [&](int i, int e) { return double(r.probs[size_t(i) * 3 + e]); };
  EXPECT_NEAR(r.weight[0], p(0, 0) / (p(0, 0) + p(0, 1)), 1e-7);
  // Priority: first choices 0, 2, 0, 0 (expert 0 takes tokens 0, 2, 3: full), then the
  // second choices 1, 0 (dropped: full), 1, 2.
  EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(r.routed, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(r.kept_count(), 7);
  EXPECT_EQ(r.tokens(0), 3);
  EXPECT_EQ(r.tokens(1), 2);
  EXPECT_EQ(r.tokens(2), 2);
  // Expert 0's slots in priority order: tokens 0, 2, 3 (first choices).
  EXPECT_EQ(r.slot_token[0], 0);
  EXPECT_EQ(r.slot_token[1], 2);
  EXPECT_EQ(r.slot_token[2], 3);
  double balance = 0;
  for (int e = 0; e < 3; ++e) {
    double mean = 0;
    for (int i = 0; i < 4; ++i) mean += p(i, e) / 4;
    balance += r.routed[size_t(e)] / 8.0 * mean;
  }
  EXPECT_NEAR(r.aux_loss, 0.5 * 3 * balance, 1e-9);
  // A capacity past every choice is no limit.
  EXPECT_EQ(Route(Config(3, 2, 1e300, 0.5), logits, 4).kept_count(), 8);
  EXPECT_EQ(Route(Config(3, 2, 0, 0.5), logits, 4).kept_count(), 8);
}

// moe.h's definition in double, written apart from moe.cc: the objective
// Σ dout·out + (dloss·n)·aux for parameters laid out as BlockTensors binds them.
struct Reference {
  GPTConfig config;
  int n;
  std::vector<double> dout;
  double dloss;

  double Objective(const std::vector<double>& theta, const std::vector<double>& x) const {
    const int c = config.n_embd, e_count = config.n_experts, k = config.moe_top_k, h = 4 * c;
    const size_t stride = size_t(8 * c * c + 5 * c);
    const double* router = theta.data();
    auto expert = [&](int e) { return theta.data() + size_t(e_count) * c + size_t(e) * stride; };
    std::vector<double> probs(static_cast<size_t>(n) * e_count);
    std::vector<int> choice(static_cast<size_t>(n) * k);
    std::vector<double> weight(static_cast<size_t>(n) * k);
    std::vector<double> routed(static_cast<size_t>(e_count), 0);
    for (int i = 0; i < n; ++i) {
      std::vector<double> l(static_cast<size_t>(e_count));
      for (int e = 0; e < e_count; ++e) {
        for (int q = 0; q < c; ++q) l[size_t(e)] += x[size_t(i) * c + q] * router[size_t(e) * c + q];
      }
      const double max = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (double v : l) sum += std::exp(v - max);
      std::vector<int> order;
      for (int e = 0; e < e_count; ++e) {
        probs[size_t(i) * e_count + e] = std::exp(l[size_t(e)] - max) / sum;
        order.push_back(e);
      }
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return probs[size_t(i) * e_count + a] > probs[size_t(i) * e_count + b];
      });
      double chosen = 0;
      for (int j = 0; j < k; ++j) chosen += probs[size_t(i) * e_count + order[size_t(j)]];
      for (int j = 0; j < k; ++j) {
        choice[size_t(i) * k + j] = order[size_t(j)];
        weight[size_t(i) * k + j] = probs[size_t(i) * e_count + order[size_t(j)]] / chosen;
        routed[size_t(order[size_t(j)])] += 1;
      }
    }
    const double capacity = config.capacity_factor > 0
                                ? std::ceil(config.capacity_factor * k * double(n) / e_count)
                                : 1e300;
    std::vector<double> taken(static_cast<size_t>(e_count), 0);
    double objective = 0;
    for (int j = 0; j < k; ++j) {
      for (int i = 0; i < n; ++i) {
        const int e = choice[size_t(i) * k + j];
        if (taken[size_t(e)] >= capacity) continue;
        taken[size_t(e)] += 1;
        const double* w1 = expert(e);
        const double* b1 = w1 + size_t(h) * c;
        const double* w2 = b1 + h;
        const double* b2 = w2 + size_t(c) * h;
        std::vector<double> g(static_cast<size_t>(h));
        for (int o = 0; o < h; ++o) {
          double v = b1[o];
          for (int q = 0; q < c; ++q) v += x[size_t(i) * c + q] * w1[size_t(o) * c + q];
          g[size_t(o)] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        }
        for (int o = 0; o < c; ++o) {
          double y = b2[o];
          for (int q = 0; q < h; ++q) y += g[size_t(q)] * w2[size_t(o) * h + q];
          objective += dout[size_t(i) * c + o] * weight[size_t(i) * k + j] * y;
        }
      }
    }
    double balance = 0;
    for (int e = 0; e < e_count; ++e) {
      double mean = 0;
      for (int i = 0; i < n; ++i) mean += probs[size_t(i) * e_count + e] / n;
      balance += routed[size_t(e)] / (double(n) * k) * mean;
    }
    return objective + dloss * n * config.aux_loss_coef * e_count * balance;
  }
};

class MoeGradients : public ::testing::TestWithParam<std::tuple<int, double>> {};

TEST_P(MoeGradients, EqualCentralDifferencesOfTheDoubleDefinition) {
  const auto [k, capacity] = GetParam();
  const GPTConfig config = Config(4, k, capacity, 0.3);
  const int n = 6, c = config.n_embd, e_count = 4, h = 4 * c;
  const int64_t stride = 8 * c * c + 5 * c;
  const size_t total = size_t(e_count) * c + size_t(e_count) * stride;
  std::vector<float> theta(total), x(static_cast<size_t>(n) * c), dout = x;
  for (size_t i = 0; i < total; ++i) theta[i] = 0.5f * Normal(7, 0, i);
  for (size_t i = 0; i < x.size(); ++i) x[i] = Normal(7, 1, i);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = Normal(7, 2, i);
  const float dloss = 0.7f;

  BlockTensors w{}, g{};
  std::vector<float> grads(total, 0.0f);
  auto bind = [&](float* base, BlockTensors& t) {
    t.router_w = base;
    t.fc_w = base + e_count * c;
    t.fc_b = t.fc_w + h * c;
    t.fcproj_w = t.fc_b + h;
    t.fcproj_b = t.fcproj_w + c * h;
    t.experts = e_count;
    t.expert_stride = stride;
  };
  bind(theta.data(), w);
  bind(grads.data(), g);
  const size_t rows = size_t(n) * k;
  std::vector<float> ax(rows * c), hidden(rows * h), hidden_gelu(rows * h), y(rows * c);
  std::vector<float> logits(static_cast<size_t>(n) * e_count), scratch_rows(rows * c), d_hidden(rows * h);
  MoeRouting routing;
  MoeActivations a;
  a.routing = &routing;
  a.x = a.expert_x = TypedPtr(ax.data());
  a.y = a.expert_y = y.data();
  a.hidden = hidden.data();
  a.hidden_gelu = TypedPtr(hidden_gelu.data());
  MoeScratch s;
  s.logits = logits.data();
  s.rows = scratch_rows.data();
  s.d_hidden = d_hidden.data();
  std::unique_ptr<Kernels> kernels = Kernels::Create(Device::CPU()).value();
  std::vector<float> out(static_cast<size_t>(n) * c), dx(static_cast<size_t>(n) * c);
  ASSERT_TRUE(
      MoeForward(*kernels, config, Serial::Instance(), 0, n, w, ConstTypedPtr(x.data()), nullptr,
                 nullptr, a, s, out.data())
          .ok());
  ASSERT_TRUE(MoeBackward(*kernels, config, Serial::Instance(), 0, n, w, g, ConstTypedPtr(x.data()),
                          nullptr, a, s, dloss, dout.data(), dx.data())
                  .ok());
  if (capacity > 0) {
    EXPECT_LT(routing.kept_count(), routing.assignments()) << "nothing dropped";
  }

  const Reference ref{config, n, std::vector<double>(dout.begin(), dout.end()), dloss};
  std::vector<double> t(theta.begin(), theta.end()), xd(x.begin(), x.end());
  // The forward's value first: the objective the backward differentiates.
  double forward = 0;
  for (size_t i = 0; i < out.size(); ++i) forward += double(dout[i]) * out[i];
  forward += double(dloss) * n * routing.aux_loss;
  EXPECT_NEAR(forward, ref.Objective(t, xd), 1e-4 * std::max(1.0, std::abs(forward)));
  constexpr double kStep = 1e-5;
  auto central = [&](std::vector<double>& v, size_t i) {
    const double keep = v[i];
    v[i] = keep + kStep;
    const double up = ref.Objective(t, xd);
    v[i] = keep - kStep;
    const double down = ref.Objective(t, xd);
    v[i] = keep;
    return (up - down) / (2 * kStep);
  };
  int checked = 0;
  for (size_t i = 0; i < total; ++i) {
    const double fd = central(t, i);
    ASSERT_NEAR(grads[i], fd, 2e-3 * std::max(1.0, std::abs(fd))) << "parameter " << i;
    checked += fd != 0;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = central(xd, i);
    ASSERT_NEAR(dx[i], fd, 2e-3 * std::max(1.0, std::abs(fd))) << "input " << i;
  }
  EXPECT_GT(checked, int(total) / 2);
}

INSTANTIATE_TEST_SUITE_P(TopKAndCapacity, MoeGradients,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(0.0, 0.7)));

}  // namespace
}  // namespace tally::model
