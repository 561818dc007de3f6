// PowerSGD equals the algorithm unrolled here over every rank at once (the reference),
// keeps transmitted + residual = gradient on every rank and step, and books exactly its
// three all-reduces.
#include "core/parallel/powersgd.h"

#include <cmath>
#include <vector>

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

model::ParameterLayout Layout() {
  model::GPTConfig c;
  c.n_layer = 1;
  c.n_embd = 8;
  c.n_head = 2;
  c.seq_len = 8;
  return model::ParameterLayout::ForGPT(c);
}

// Rank w's gradient at step k: N(0, 1) from its own stream.
std::vector<float> Gradient(int64_t total, int w, int k) {
  std::vector<float> g(static_cast<size_t>(total));
  FillNormal(g.data(), total, 7, StreamOf(absl::StrCat("grad", w, "_", k)), 0, 0, 1);
  return g;
}

TEST(PowerSgdSplit, MatricesWhereTheyAreSmallerAndTheRestWhole) {
  const model::ParameterLayout layout = Layout();
  for (int r : {1, 2, 4, 7}) {
    const PowerSgdSplit split = SplitForPowerSgd(layout, r);
    int64_t covered = split.whole_values, p = 0, q = 0;
    for (const PowerSgdMatrix& m : split.matrices) {
      EXPECT_LT((m.rows + m.cols) * r, m.rows * m.cols);
      covered += m.rows * m.cols;
      p += m.rows * r;
      q += m.cols * r;
    }
    EXPECT_EQ(covered, layout.total()) << r;
    EXPECT_EQ(p, split.p_values);
    EXPECT_EQ(q, split.q_values);
    EXPECT_FALSE(split.matrices.empty()) << r;  // wte, 256 x 8, at least
  }
  EXPECT_TRUE(SplitForPowerSgd(layout, 8).matrices.empty());  // (256 + 8)·8 > 256·8
}

// The reference: every rank's Δ, P, Q_w and E, step by step, in double where the
// implementation sums in double, in the order of powersgd.h.
struct Reference {
  const model::ParameterLayout& layout;
  PowerSgdSplit split;
  int ranks, r;
  std::vector<std::vector<std::vector<float>>> error;  // [rank][matrix]
  std::vector<std::vector<float>> q;                   // [matrix], shared

  Reference(const model::ParameterLayout& l, int p, int rank)
      : layout(l), split(SplitForPowerSgd(l, rank)), ranks(p), r(rank) {
    error.assign(size_t(p), {});
    for (size_t i = 0; i < split.matrices.size(); ++i) {
      const PowerSgdMatrix& m = split.matrices[i];
      for (auto& e : error) e.emplace_back(size_t(m.rows * m.cols), 0.0f);
      q.emplace_back(size_t(m.cols * r));
      FillNormal(q.back().data(), m.cols * r, 42, StreamOf("powersgd"), uint64_t(i) << 32, 0, 1);
    }
  }

  // The approximate sum of the ranks' `grads`, and (`sent_plus_kept`) each rank's
  // P·Q_wᵀ + E, which must be its Δ.
  std::vector<float> Step(const std::vector<std::vector<float>>& grads,
                          std::vector<std::vector<float>>* deltas,
                          std::vector<std::vector<float>>* sent_plus_kept) {
    std::vector<float> out(grads[0].size(), 0.0f);
    for (const comm::Chunk& c : split.whole) {
      for (int64_t j = c.offset; j < c.end(); ++j) {
        double s = 0;
        for (int w = 0; w < ranks; ++w) s += grads[size_t(w)][size_t(j)];
        out[size_t(j)] = float(s);
      }
    }
    deltas->assign(size_t(ranks), {});
    sent_plus_kept->assign(size_t(ranks), {});
    for (size_t i = 0; i < split.matrices.size(); ++i) {
      const PowerSgdMatrix& m = split.matrices[i];
      const int64_t mn = m.rows * m.cols;
      std::vector<double> p(size_t(m.rows * r), 0.0);
      std::vector<std::vector<float>> delta(static_cast<size_t>(ranks));
      for (int w = 0; w < ranks; ++w) {
        delta[size_t(w)].resize(size_t(mn));
        for (int64_t j = 0; j < mn; ++j) {
          delta[size_t(w)][size_t(j)] = error[size_t(w)][i][size_t(j)] + grads[size_t(w)][size_t(m.offset + j)];
        }
        for (int64_t a = 0; a < m.rows; ++a) {
          for (int k = 0; k < r; ++k) {
            double s = 0;
            for (int64_t b = 0; b < m.cols; ++b) s += double(delta[size_t(w)][size_t(a * m.cols + b)]) * q[i][size_t(b * r + k)];
            p[size_t(a * r + k)] += s;
          }
        }
      }
      for (int j = 0; j < r; ++j) {  // Gram-Schmidt
        for (int k = 0; k < j; ++k) {
          double dot = 0;
          for (int64_t a = 0; a < m.rows; ++a) dot += p[size_t(a * r + j)] * p[size_t(a * r + k)];
          for (int64_t a = 0; a < m.rows; ++a) p[size_t(a * r + j)] -= dot * p[size_t(a * r + k)];
        }
        double norm = 0;
        for (int64_t a = 0; a < m.rows; ++a) norm += p[size_t(a * r + j)] * p[size_t(a * r + j)];
        for (int64_t a = 0; a < m.rows; ++a) p[size_t(a * r + j)] /= std::sqrt(norm) + 1e-8;
      }
      std::vector<double> q_sum(size_t(m.cols * r), 0.0);
      for (int w = 0; w < ranks; ++w) {
        std::vector<double> qw(size_t(m.cols * r), 0.0);
        for (int64_t b = 0; b < m.cols; ++b) {
          for (int k = 0; k < r; ++k) {
            for (int64_t a = 0; a < m.rows; ++a) qw[size_t(b * r + k)] += double(delta[size_t(w)][size_t(a * m.cols + b)]) * p[size_t(a * r + k)];
            q_sum[size_t(b * r + k)] += qw[size_t(b * r + k)];
          }
        }
        for (int64_t a = 0; a < m.rows; ++a) {
          for (int64_t b = 0; b < m.cols; ++b) {
            double sent = 0;
            for (int k = 0; k < r; ++k) sent += p[size_t(a * r + k)] * qw[size_t(b * r + k)];
            const float d = delta[size_t(w)][size_t(a * m.cols + b)];
            error[size_t(w)][i][size_t(a * m.cols + b)] = float(d - sent);
            (*sent_plus_kept)[size_t(w)].push_back(float(sent + error[size_t(w)][i][size_t(a * m.cols + b)]));
            (*deltas)[size_t(w)].push_back(d);
          }
        }
      }
      for (size_t j = 0; j < q[i].size(); ++j) q[i][j] = float(q_sum[j]);
      for (int64_t a = 0; a < m.rows; ++a) {
        for (int64_t b = 0; b < m.cols; ++b) {
          double s = 0;
          for (int k = 0; k < r; ++k) s += p[size_t(a * r + k)] * q[i][size_t(b * r + k)];
          out[size_t(m.offset + a * m.cols + b)] = float(s);
        }
      }
    }
    return out;
  }
};

class PowerSgdTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(PowerSgdTest, EqualsTheUnrolledAlgorithmWithErrorFeedbackAndExactBytes) {
  const auto [ranks, r] = GetParam();
  const model::ParameterLayout layout = Layout();
  const int64_t total = layout.total();
  constexpr int kSteps = 3;
  Reference reference(layout, ranks, r);
  std::vector<std::vector<float>> expected(kSteps);
  std::vector<std::vector<std::vector<std::vector<float>>>> errors;  // after each step
  // Each rank's error sums (compression_error.h): Σ E² and Σ Δ² + Σ (the whole values)².
  std::vector<std::vector<ErrorSums>> error_sums(kSteps, std::vector<ErrorSums>(size_t(ranks)));
  for (int k = 0; k < kSteps; ++k) {
    std::vector<std::vector<float>> grads;
    for (int w = 0; w < ranks; ++w) grads.push_back(Gradient(total, w, k));
    std::vector<std::vector<float>> deltas, sent_plus_kept;
    expected[size_t(k)] = reference.Step(grads, &deltas, &sent_plus_kept);
    errors.push_back(reference.error);
    for (int w = 0; w < ranks; ++w) {
      ErrorSums& sums = error_sums[size_t(k)][size_t(w)];
      for (float d : deltas[size_t(w)]) sums.value += double(d) * d;
      for (const comm::Chunk& c : reference.split.whole) {
        for (int64_t j = c.offset; j < c.end(); ++j) {
          sums.value += double(grads[size_t(w)][size_t(j)]) * grads[size_t(w)][size_t(j)];
        }
      }
      for (const auto& e : reference.error[size_t(w)]) {
        for (float x : e) sums.residual += double(x) * x;
      }
    }
    for (int w = 0; w < ranks; ++w) {  // transmitted + residual = gradient (+ the old error)
      for (size_t j = 0; j < deltas[size_t(w)].size(); ++j) {
        ASSERT_NEAR(sent_plus_kept[size_t(w)][j], deltas[size_t(w)][j], 1e-5 * (1 + std::abs(deltas[size_t(w)][j])));
      }
    }
  }
  std::vector<comm::TrafficLedger> ledgers(static_cast<size_t>(ranks));
  comm::LaunchOptions launch;
  launch.world_size = ranks;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto powersgd, PowerSgd::Create(&world, layout, r, 42, comm::Algorithm::kRing,
                                                     world.allocator()));
    ASSIGN_OR_RETURN(Tensor grads, Tensor::Empty({total}, DType::kF32, world.allocator()));
    for (int k = 0; k < kSteps; ++k) {
      RETURN_IF_ERROR(grads.CopyFromHost(Gradient(total, world.rank(), k).data()));
      RETURN_IF_ERROR(powersgd->Reduce(grads));
      const float* got = grads.data<float>();
      for (int64_t j = 0; j < total; ++j) {
        const float want = expected[size_t(k)][size_t(j)];
        if (std::abs(got[j] - want) > 1e-4 * (1 + std::abs(want))) {
          return absl::InternalError(absl::StrCat("rank ", world.rank(), " step ", k, " value ", j,
                                                  ": ", got[j], " != ", want));
        }
      }
      const ErrorSums& want_sums = error_sums[size_t(k)][size_t(world.rank())];
      const ErrorSums& got_sums = powersgd->error_sums();
      if (std::abs(got_sums.value - want_sums.value) > 1e-5 * want_sums.value ||
          std::abs(got_sums.residual - want_sums.residual) > 1e-4 * want_sums.residual + 1e-12) {
        return absl::InternalError(absl::StrCat("rank ", world.rank(), " step ", k, " error sums ",
                                                got_sums.residual, " / ", got_sums.value, " != ",
                                                want_sums.residual, " / ", want_sums.value));
      }
      for (size_t i = 0; i < powersgd->split().matrices.size(); ++i) {  // E as the reference's
        const Tensor e = powersgd->error(i);
        for (int64_t j = 0; j < e.numel(); ++j) {
          const float want = errors[size_t(k)][size_t(world.rank())][i][size_t(j)];
          if (std::abs(e.data<float>()[j] - want) > 1e-4 * (1 + std::abs(want))) {
            return absl::InternalError(absl::StrCat("rank ", world.rank(), " error of matrix ", i));
          }
        }
      }
    }
    ledgers[size_t(world.rank())] = world.ledger();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  const PowerSgdSplit split = SplitForPowerSgd(layout, r);
  for (int w = 0; w < ranks; ++w) {
    for (const comm::ExpectedCall& c : PowerSgdCalls(split, "world", ranks, w)) {
      const int64_t sent = ledgers[size_t(w)].Sum([&](const comm::LedgerKey& k) {
        return k.label == c.scope;
      }).bytes_sent;
      EXPECT_EQ(sent, kSteps * comm::ExactTraffic(c.primitive, comm::Algorithm::kRing, ranks, w,
                                                  -1, c.count, 4).sent)
          << c.scope << " rank " << w;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndRank, PowerSgdTest,
                         ::testing::Values(std::pair{2, 1}, std::pair{3, 2}, std::pair{4, 4}),
                         [](const auto& param_info) {
                           return absl::StrCat("p", param_info.param.first, "_r", param_info.param.second);
                         });

TEST(GradCompression, Names) {
  EXPECT_EQ(ParseGradCompression("powersgd").value(), GradCompression::kPowerSgd);
  EXPECT_EQ(ParseGradCompression("onebit_adam").value(), GradCompression::kOneBitAdam);
  EXPECT_EQ(ParseGradCompression("none").value(), GradCompression::kNone);
  EXPECT_EQ(ParseGradCompression("topk").status().message(),
            "[flags] --grad_compression must be none, powersgd or onebit_adam, got 'topk'");
}

}  // namespace
}  // namespace tally::parallel
