// Data parallelism reproduces the single-rank run, and moves exactly the bytes the formula
// says, bucket by bucket, including a parameter count the group size does not divide.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/data_parallel.h"
#include "runtime/comm/launch.h"
#include "train/report.h"
#include "train/trainer.h"

namespace tally::train {
namespace {

// Φ = C·(V + T + 12C + 15) = 10·(256 + 16 + 120 + 15) = 4070: divisible by neither 3 nor 4.
TrainOptions Tiny(int dp, const std::string& allreduce) {
  TrainOptions o;
  o.model.n_layer = 1;
  o.model.n_head = 2;
  o.model.n_embd = 10;
  o.model.seq_len = 16;
  o.global_batch_size = 12;
  o.micro_batch_size = 1;  // 12 / dp micro-batches per rank: accumulation everywhere
  o.steps = 5;
  o.lr = 1e-2f;
  o.warmup_steps = 1;
  o.eval_every = 0;
  o.sample_bytes = 0;
  o.threads = 1;
  o.dp = dp;
  o.allreduce = allreduce;
  o.bucket_mb = 1500.0 / (1 << 20);  // 375-element buckets: uneven, and several of them
  return o;
}

struct RunResult {
  std::vector<float> losses;
  std::vector<float> params;
  std::vector<comm::TrafficLedger> traffic;
};

RunResult RunRanks(const TrainOptions& o) {
  RunResult result;
  result.traffic.resize(o.dp);
  comm::LaunchOptions launch;
  launch.world_size = o.dp;
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, o.dp > 1 ? &world : nullptr));
    world.ledger().Clear();  // count the steps only
    for (int64_t k = 0; k < o.steps; ++k) {
      ASSIGN_OR_RETURN(StepStats s, trainer->TrainStep(k));
      if (world.rank() == 0) result.losses.push_back(s.loss);
    }
    if (world.rank() == 0) {
      const float* p = trainer->model().params().data<float>();
      result.params.assign(p, p + trainer->model().params().numel());
    }
    result.traffic[world.rank()] = world.ledger();
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return result;
}

class DataParallelTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DataParallelTest, MatchesTheSingleRankRunAndTheExactBytes) {
  auto [dp, allreduce] = GetParam();
  RunResult serial = RunRanks(Tiny(1, "ring"));
  TrainOptions o = Tiny(dp, allreduce);
  RunResult parallel = RunRanks(o);
  ASSERT_EQ(parallel.losses.size(), serial.losses.size());
  for (size_t k = 0; k < serial.losses.size(); ++k) {
    EXPECT_NEAR(parallel.losses[k], serial.losses[k], 1e-5 * std::abs(serial.losses[k])) << "step " << k;
  }
  ASSERT_EQ(parallel.params.size(), serial.params.size());
  for (size_t i = 0; i < serial.params.size(); ++i) {
    ASSERT_NEAR(parallel.params[i], serial.params[i], 1e-5 * std::max(1.0f, std::abs(serial.params[i])))
        << "parameter " << i;
  }
  // Bytes: the gradient sum is booked under (dp, all_reduce, backward), exactly the
  // per-bucket formula times the steps, on every rank.
  comm::Algorithm algorithm = allreduce == "ring" ? comm::Algorithm::kRing : comm::Algorithm::kNaive;
  int64_t phi = o.model.NumParams();
  ASSERT_EQ(phi, 4070);
  for (int r = 0; r < dp; ++r) {
    comm::TransferTotals grads = parallel.traffic[r].Sum([](const comm::LedgerKey& k) {
      return k.group == "dp" && k.phase == comm::Phase::kBackward;
    });
    int64_t exact = o.steps * GradientSyncBytesPerStep(phi, dp, r, int64_t(o.bucket_mb * (1 << 20)), algorithm);
    EXPECT_EQ(grads.bytes_sent, exact) << "rank " << r;
    if (dp > 1 && algorithm == comm::Algorithm::kRing) {
      // Close to 2(p-1)/p·4Φ per step; not equal, since the 375-element buckets do not split
      // evenly.
      EXPECT_NEAR(double(grads.bytes_sent) / o.steps, 2.0 * (dp - 1) / dp * 4 * phi, 4.0 * dp * 11);
    }
  }
}

std::string Name(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) {
  return absl::StrCat("dp", std::get<0>(info.param), "_", std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(DpAndAlgorithm, DataParallelTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values("ring", "naive")),
                         Name);

TEST(GradientBuckets, CutFromTheEndAndCoverTheBuffer) {
  std::vector<comm::Chunk> b = parallel::GradientBuckets(10, 4);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].offset, 6);
  EXPECT_EQ(b[0].count, 4);
  EXPECT_EQ(b[2].offset, 0);
  EXPECT_EQ(b[2].count, 2);
}

TEST(DataParallelOptions, BadValuesAreClearErrors) {
  TrainOptions o = Tiny(0, "ring");
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--dp must be >= 1"));
  o = Tiny(5, "ring");  // 12 sequences cannot be shared by 5 ranks
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "must be a multiple of --dp x --micro_batch_size"));
  o = Tiny(2, "tree");
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--allreduce must be ring or naive"));
}

}  // namespace
}  // namespace tally::train
