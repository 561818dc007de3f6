// 1-bit Adam's compressed average equals the algorithm unrolled here over every rank at
// once (the reference), call after call as the errors carry; what was sent plus what is
// kept is what there was; it books exactly OneBitAdamCalls. The optimizer is AdamW in the
// warm-up, bit for bit, and after it the update of onebit_adam.h on every rank alike.
#include "core/parallel/onebit_adam.h"

#include <cmath>
#include <vector>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/model/parameters.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/rng.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {
namespace {

// Rank w's values at call k: N(0, 1) from its own stream, some of them exactly 0 (whose
// sign is +1).
std::vector<float> Values(int64_t n, int w, int k) {
  std::vector<float> x(static_cast<size_t>(n));
  FillNormal(x.data(), n, 11, StreamOf(absl::StrCat("onebit", w, "_", k)), 0, 0, 1);
  for (int64_t i = 0; i < n; i += 7) x[size_t(i)] = 0;
  return x;
}

TEST(OneBitShape, PadsToWholeBytesOfEveryChunk) {
  EXPECT_EQ(OneBitShapeOf(37, 2).padded, 48);
  EXPECT_EQ(OneBitShapeOf(48, 2).padded, 48);
  EXPECT_EQ(OneBitShapeOf(1001, 3).padded, 1008);
  const OneBitShape s = OneBitShapeOf(1001, 4);
  EXPECT_EQ(s.padded, 1024);
  EXPECT_EQ(s.chunk, 256);
  EXPECT_EQ(s.chunk_bytes, 32);
}

// The parts a rank's buffer is averaged in: the whole buffer without tp and pp; under tp
// the tensors every tp rank holds whole apart; under a pipeline the tied embedding apart
// on the first stage and on the last (both its copies).
TEST(OneBitParts, KeepTheCopiesHeldOutsideTheDpGroupApart) {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.seq_len = 8;
  c.vocab_size = 32;
  auto names = [](const std::vector<OneBitPart>& parts) {
    std::string s;
    for (const OneBitPart& p : parts) s += absl::StrCat(p.name, " ");
    return s;
  };
  const model::ParameterLayout whole = model::ParameterLayout::ForGPT(c);
  std::vector<OneBitPart> parts = OneBitParts(whole);
  ASSERT_EQ(names(parts), "own ");
  EXPECT_EQ(parts[0].ranges.size(), 1u);  // one range: the buffer, in place
  EXPECT_EQ(parts[0].count, whole.total());

  const model::ParameterLayout split = model::ParameterLayout::ForGPT(c, /*tp=*/2, 1);
  parts = OneBitParts(split);
  ASSERT_EQ(names(parts), "own replicated ");
  int64_t replicated = 0;
  for (const model::ParamSpec& s : split.specs()) replicated += s.replicated() ? s.numel : 0;
  EXPECT_EQ(parts[1].count, replicated);
  EXPECT_EQ(parts[0].count + parts[1].count, split.total());

  for (const model::LayerRange stage : {model::LayerRange{0, 1}, model::LayerRange{1, 2}}) {
    const model::ParameterLayout layout = model::ParameterLayout::ForGPT(c, 1, 0, {stage});
    parts = OneBitParts(layout);
    ASSERT_EQ(names(parts), "own tied ") << stage.begin;
    const model::ParamSpec* wte = layout.Find("wte.weight");
    ASSERT_NE(wte, nullptr);
    ASSERT_EQ(parts[1].ranges.size(), 1u);
    EXPECT_EQ(parts[1].ranges[0].offset, wte->offset);
    EXPECT_EQ(parts[1].count, wte->numel);
    EXPECT_EQ(parts[0].count + parts[1].count, layout.total());
  }
  // Every part's calls and errors: the sum of what one part of its count would be.
  const int64_t bytes = OneBitErrorBytes(parts, 3);
  EXPECT_EQ(bytes, 4 * (OneBitShapeOf(parts[0].count, 3).padded + OneBitShapeOf(parts[0].count, 3).chunk +
                        OneBitShapeOf(parts[1].count, 3).padded + OneBitShapeOf(parts[1].count, 3).chunk));
  EXPECT_EQ(OneBitAdamCalls(parts, "dp", 3, 0).size(), 8u);
}

// The reference: every rank's worker error and server error, in onebit_adam.h's order.
struct Reference {
  int p;
  int64_t n;
  OneBitShape shape;
  std::vector<std::vector<float>> worker, server;  // [rank]

  Reference(int ranks, int64_t count)
      : p(ranks), n(count), shape(OneBitShapeOf(count, ranks)),
        worker(size_t(ranks), std::vector<float>(size_t(shape.padded), 0.0f)),
        server(size_t(ranks), std::vector<float>(size_t(shape.chunk), 0.0f)) {}

  // x's scale and signs (+1 at 0), x − scale·sign into `error`, the sums into `sums`.
  static float Compress(const std::vector<float>& x, std::vector<bool>& positive,
                        std::vector<float>& error, ErrorSums& sums) {
    double squares = 0;
    for (float v : x) squares += double(v) * v;
    const float scale = float(std::sqrt(squares / double(x.size())));
    positive.assign(x.size(), false);
    for (size_t i = 0; i < x.size(); ++i) {
      positive[i] = x[i] >= 0;
      error[i] = x[i] - (positive[i] ? scale : -scale);
      sums.residual += double(error[i]) * error[i];
    }
    sums.value += squares;
    return scale;
  }

  // The average every rank ends with, each rank's error sums, and (`sent_plus_kept`,
  // per rank) what its worker sent plus what it kept, which must be its y.
  std::vector<float> Average(const std::vector<std::vector<float>>& m,
                             std::vector<ErrorSums>& sums,
                             std::vector<std::vector<float>>& y_of,
                             std::vector<std::vector<float>>& sent_plus_kept) {
    const int64_t N = shape.padded, c = shape.chunk;
    sums.assign(size_t(p), ErrorSums());
    std::vector<std::vector<bool>> signs(static_cast<size_t>(p));
    std::vector<float> scales(static_cast<size_t>(p));
    y_of.assign(size_t(p), {});
    sent_plus_kept.assign(size_t(p), {});
    for (int w = 0; w < p; ++w) {
      std::vector<float> y(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) {
        y[size_t(i)] = (i < n ? m[size_t(w)][size_t(i)] : 0.0f) + worker[size_t(w)][size_t(i)];
      }
      scales[size_t(w)] = Compress(y, signs[size_t(w)], worker[size_t(w)], sums[size_t(w)]);
      for (int64_t i = 0; i < N; ++i) {
        const float s = scales[size_t(w)];
        sent_plus_kept[size_t(w)].push_back((signs[size_t(w)][size_t(i)] ? s : -s) +
                                            worker[size_t(w)][size_t(i)]);
      }
      y_of[size_t(w)] = y;
    }
    std::vector<float> out(static_cast<size_t>(n));
    for (int j = 0; j < p; ++j) {  // server j
      std::vector<float> z(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) {
        float sum = 0;
        for (int w = 0; w < p; ++w) {
          const float s = scales[size_t(w)];
          sum += signs[size_t(w)][size_t(j * c + i)] ? s : -s;
        }
        z[size_t(i)] = sum / float(p) + server[size_t(j)][size_t(i)];
      }
      std::vector<bool> server_signs;
      const float t = Compress(z, server_signs, server[size_t(j)], sums[size_t(j)]);
      for (int64_t i = 0; i < c && j * c + i < n; ++i) {
        out[size_t(j * c + i)] = server_signs[size_t(i)] ? t : -t;
      }
    }
    return out;
  }
};

class OneBitAverageTest : public ::testing::TestWithParam<std::pair<int, int64_t>> {};

TEST_P(OneBitAverageTest, EqualsTheUnrolledAlgorithmWithBothErrorsAndExactBytes) {
  const auto [ranks, n] = GetParam();
  constexpr int kCalls = 3;
  Reference reference(ranks, n);
  std::vector<std::vector<float>> expected;
  std::vector<std::vector<ErrorSums>> sums(kCalls);
  std::vector<std::vector<std::vector<float>>> worker_errors, server_errors;
  for (int k = 0; k < kCalls; ++k) {
    std::vector<std::vector<float>> m, y, sent_plus_kept;
    for (int w = 0; w < ranks; ++w) m.push_back(Values(n, w, k));
    expected.push_back(reference.Average(m, sums[size_t(k)], y, sent_plus_kept));
    worker_errors.push_back(reference.worker);
    server_errors.push_back(reference.server);
    for (int w = 0; w < ranks; ++w) {  // transmitted + residual = what there was
      for (size_t i = 0; i < y[size_t(w)].size(); ++i) {
        ASSERT_NEAR(sent_plus_kept[size_t(w)][i], y[size_t(w)][i],
                    1e-6 * (1 + std::abs(y[size_t(w)][i])));
      }
    }
  }
  std::vector<comm::TrafficLedger> ledgers(static_cast<size_t>(ranks));
  comm::LaunchOptions launch;
  launch.world_size = ranks;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    const int w = world.rank();
    ASSIGN_OR_RETURN(auto average, OneBitAverage::Create(&world, n, comm::Algorithm::kRing,
                                                         world.allocator()));
    ASSIGN_OR_RETURN(Tensor m, Tensor::Empty({n}, DType::kF32, world.allocator()));
    for (int k = 0; k < kCalls; ++k) {
      RETURN_IF_ERROR(m.CopyFromHost(Values(n, w, k).data()));
      RETURN_IF_ERROR(average->Run(m));
      auto same = [&](const char* what, const float* got, const std::vector<float>& want) {
        for (size_t i = 0; i < want.size(); ++i) {
          if (got[i] != want[i]) {
            return absl::InternalError(absl::StrCat("rank ", w, " call ", k, " ", what, " ", i,
                                                    ": ", got[i], " != ", want[i]));
          }
        }
        return absl::OkStatus();
      };
      RETURN_IF_ERROR(same("average", m.data<float>(), expected[size_t(k)]));
      RETURN_IF_ERROR(same("worker error", average->worker_error().data<float>(),
                           worker_errors[size_t(k)][size_t(w)]));
      RETURN_IF_ERROR(same("server error", average->server_error().data<float>(),
                           server_errors[size_t(k)][size_t(w)]));
      const ErrorSums& want = sums[size_t(k)][size_t(w)];
      const ErrorSums& got = average->error_sums();
      if (got.residual != want.residual || got.value != want.value) {
        return absl::InternalError(absl::StrCat("rank ", w, " call ", k, " error sums"));
      }
    }
    ledgers[size_t(w)] = world.ledger();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int w = 0; w < ranks; ++w) {
    int64_t expected_bytes = 0;
    for (const comm::ExpectedCall& c : OneBitAdamCalls(n, "world", ranks, w)) {
      EXPECT_EQ(c.phase, comm::Phase::kOptimizer);
      expected_bytes += comm::ExactTraffic(c.primitive, comm::Algorithm::kRing, ranks, w, -1,
                                           c.count, c.element).sent;
    }
    const OneBitShape shape = OneBitShapeOf(n, ranks);
    EXPECT_EQ(expected_bytes, 2 * (ranks - 1) * shape.chunk_bytes + 2 * (ranks - 1) * 4);
    for (const char* scope : {comm::scope::kOneBitSigns, comm::scope::kOneBitScales}) {
      int64_t sent = ledgers[size_t(w)].Sum([&](const comm::LedgerKey& k) {
        return k.label == scope;
      }).bytes_sent;
      int64_t want = 0;
      for (const comm::ExpectedCall& c : OneBitAdamCalls(n, "world", ranks, w)) {
        if (std::string_view(c.scope) == scope) {
          want += comm::ExactTraffic(c.primitive, comm::Algorithm::kRing, ranks, w, -1, c.count,
                                     c.element).sent;
        }
      }
      EXPECT_EQ(sent, kCalls * want) << scope << " rank " << w;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndCounts, OneBitAverageTest,
                         ::testing::Values(std::pair{2, int64_t{37}}, std::pair{3, int64_t{1001}},
                                           std::pair{4, int64_t{64}}, std::pair{4, int64_t{1001}}),
                         [](const auto& param_info) {
                           return absl::StrCat("p", param_info.param.first, "_n",
                                               param_info.param.second);
                         });

// The optimizer: AdamW's steps while warming up, then onebit_adam.h's update with the
// averaged momentum and the frozen variance, the same parameters on every rank.
TEST(OneBitAdam, WarmUpIsAdamWAndThenTheCompressedUpdate) {
  constexpr int kRanks = 3, kWarmup = 2, kSteps = 4;
  constexpr int64_t n = 50;
  constexpr float lr = 0.01f;
  const optim::AdamWOptions options;
  const std::vector<optim::Segment> segments = {{0, 20, true}, {20, n, false}};
  // The reference on the host: AdamW's state through the warm-up on the ranks' sum, then
  // each rank's momentum, their compressed average and the update.
  std::vector<float> params(size_t(n), 0.5f), m(size_t(n), 0), v(size_t(n), 0);
  std::vector<float> params_after_warmup;
  Reference reference(kRanks, n);
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<float>> grads;
    for (int w = 0; w < kRanks; ++w) grads.push_back(Values(n, w, 100 + step));
    std::vector<std::vector<float>> moments(size_t(kRanks), m);
    if (step <= kWarmup) {
      std::vector<float> sum(size_t(n), 0);
      for (int w = 0; w < kRanks; ++w) {
        for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += grads[size_t(w)][size_t(i)];
      }
      for (int64_t i = 0; i < n; ++i) {
        m[size_t(i)] = m[size_t(i)] + (1 - options.beta1) * (sum[size_t(i)] - m[size_t(i)]);
        v[size_t(i)] = v[size_t(i)] * options.beta2 +
                       (1 - options.beta2) * sum[size_t(i)] * sum[size_t(i)];
      }
    } else {
      for (int w = 0; w < kRanks; ++w) {
        for (int64_t i = 0; i < n; ++i) {
          float& x = moments[size_t(w)][size_t(i)];
          x = x + (1 - options.beta1) * (grads[size_t(w)][size_t(i)] - x);
        }
      }
      std::vector<ErrorSums> sums;
      std::vector<std::vector<float>> y, sent_plus_kept;
      m = reference.Average(moments, sums, y, sent_plus_kept);
    }
    const int64_t frozen = std::min(step, kWarmup);
    const double bias1 = 1.0 - std::pow(double(options.beta1), double(step));
    const double bias2 = 1.0 - std::pow(double(options.beta2), double(frozen));
    const float step_size = float(lr / bias1), bias2_sqrt = float(std::sqrt(bias2));
    for (const optim::Segment& seg : segments) {
      const float keep = seg.decay ? float(1.0 - double(lr) * options.weight_decay) : 1.0f;
      for (int64_t i = seg.begin; i < seg.end; ++i) {
        const float kept = params[size_t(i)] * keep;
        params[size_t(i)] =
            kept - step_size * (m[size_t(i)] / (std::sqrt(v[size_t(i)]) / bias2_sqrt + options.eps));
      }
    }
    if (step == kWarmup) params_after_warmup = params;
  }
  comm::LaunchOptions launch;
  launch.world_size = kRanks;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    const int w = world.rank();
    ASSIGN_OR_RETURN(std::unique_ptr<optim::AdamW> adam,
                     optim::AdamW::Create(options, n, world.allocator()));
    ASSIGN_OR_RETURN(std::unique_ptr<OneBitAdam> onebit,
                     OneBitAdam::Create(std::move(adam), &world, kWarmup, comm::Algorithm::kRing,
                                        world.allocator()));
    std::vector<float> mine(size_t(n), 0.5f);
    for (int step = 1; step <= kSteps; ++step) {
      std::vector<float> g(size_t(n), 0);
      if (onebit->Compressing()) {
        g = Values(n, w, 100 + step);
      } else {
        for (int r = 0; r < kRanks; ++r) {
          const std::vector<float> x = Values(n, r, 100 + step);
          for (int64_t i = 0; i < n; ++i) g[size_t(i)] += x[size_t(i)];
        }
      }
      RETURN_IF_ERROR(onebit->Step(mine.data(), g.data(), lr, segments));
      if (step == kWarmup && mine != params_after_warmup) {
        return absl::InternalError(absl::StrCat("rank ", w, ": the warm-up is not AdamW's"));
      }
      if ((step > kWarmup) != (onebit->error_sums().value > 0)) {
        return absl::InternalError(absl::StrCat("rank ", w, " step ", step, ": error sums"));
      }
    }
    if (onebit->step() != kSteps) return absl::InternalError("the step count");
    for (int64_t i = 0; i < n; ++i) {
      if (mine[size_t(i)] != params[size_t(i)]) {
        return absl::InternalError(absl::StrCat("rank ", w, " parameter ", i, ": ",
                                                mine[size_t(i)], " != ", params[size_t(i)]));
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

TEST(OneBitAdam, WantsAdamW) {
  comm::LaunchOptions launch;
  launch.world_size = 2;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<optim::SGD> sgd,
                     optim::SGD::Create(optim::SGDOptions(), 8, world.allocator()));
    const auto onebit = OneBitAdam::Create(std::move(sgd), &world, 1, comm::Algorithm::kRing,
                                           world.allocator());
    if (onebit.ok() || onebit.status().message() !=
                           "[flags] --grad_compression=onebit_adam needs --optimizer=adamw, got sgd") {
      return absl::InternalError(std::string(onebit.status().message()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::parallel
