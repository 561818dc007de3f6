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
#include "runtime/comm/exact_traffic.h"
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
  std::vector<MemoryLedger> memory;
};

RunResult RunRanks(const TrainOptions& o) {
  RunResult result;
  result.traffic.resize(o.dp);
  result.memory.resize(o.dp);
  comm::LaunchOptions launch;
  launch.world_size = o.dp;
  SetIntraOpThreads(o);
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
    result.memory[world.rank()] = world.memory();
    if (!o.save.empty()) RETURN_IF_ERROR(trainer->Save(o.save, o.steps));
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

void ExpectSameRun(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t k = 0; k < a.losses.size(); ++k) {
    EXPECT_NEAR(a.losses[k], b.losses[k], 1e-5 * std::abs(b.losses[k])) << "step " << k;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_NEAR(a.params[i], b.params[i], 1e-5 * std::max(1.0f, std::abs(b.params[i]))) << i;
  }
}

class ZeroOneTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// ZeRO-1: same losses and parameters as one rank; reduce-scatter and all-gather each move
// (p-1)/p of the buffer, exactly; the optimizer state is the own shard's only.
TEST_P(ZeroOneTest, MatchesTheSingleRankRunWithShardedOptimizerState) {
  auto [dp, allreduce] = GetParam();
  RunResult serial = RunRanks(Tiny(1, "ring"));
  TrainOptions o = Tiny(dp, allreduce);
  o.zero = 1;
  RunResult zero = RunRanks(o);
  ExpectSameRun(zero, serial);
  comm::Algorithm algorithm = allreduce == "ring" ? comm::Algorithm::kRing : comm::Algorithm::kNaive;
  const int64_t phi = o.model.NumParams();
  for (int r = 0; r < dp; ++r) {
    auto sent = [&](comm::Primitive p) {
      return zero.traffic[r].Sum([&](const comm::LedgerKey& k) {
        return k.group == "dp" && k.primitive == p;
      }).bytes_sent;
    };
    EXPECT_EQ(sent(comm::Primitive::kReduceScatter),
              o.steps * comm::ExactTraffic(comm::Primitive::kReduceScatter, algorithm, dp, r, -1, phi, 4).sent);
    EXPECT_EQ(sent(comm::Primitive::kAllGather),
              o.steps * comm::ExactTraffic(comm::Primitive::kAllGather, algorithm, dp, r, -1, phi, 4).sent);
    // AdamW's m and v for the own shard only: 8·|shard| bytes.
    EXPECT_EQ(zero.memory[r].peak(MemoryCategory::kOptimizer), 8 * comm::ChunkOf(phi, dp, r).count);
  }
}

INSTANTIATE_TEST_SUITE_P(DpAndAlgorithm, ZeroOneTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values("ring", "naive")),
                         Name);

// Checkpoints are whole: saved under ZeRO-1 on 3 ranks, resumed on 1 rank (and the other
// way), the run continues as the uninterrupted one does.
TEST(ZeroCheckpoints, LoadUnderAnyOtherDataParallelLayout) {
  TrainOptions straight = Tiny(1, "ring");
  straight.steps = 6;
  RunResult reference = RunRanks(straight);

  TrainOptions first = Tiny(3, "ring");
  first.zero = 1;
  first.steps = 6;  // the schedule of the whole run
  first.save = ::testing::TempDir() + "/zero3ranks.safetensors";
  // Train 3 of the 6 steps on 3 ZeRO-1 ranks, saving at step 3.
  {
    comm::LaunchOptions launch;
    launch.world_size = 3;
    ASSERT_TRUE(comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
      ASSIGN_OR_RETURN(auto trainer, Trainer::Create(first, &world));
      for (int64_t k = 0; k < 3; ++k) RETURN_IF_ERROR(trainer->TrainStep(k).status());
      return trainer->Save(first.save, 3);
    }).ok());
  }
  TrainOptions resumed = Tiny(1, "ring");
  resumed.steps = 6;
  resumed.load = first.save;
  auto trainer = Trainer::Create(resumed).value();
  ASSERT_EQ(trainer->start_step(), 3);
  for (int64_t k = 3; k < 6; ++k) {
    float loss = trainer->TrainStep(k).value().loss;
    EXPECT_NEAR(loss, reference.losses[k], 1e-5 * reference.losses[k]) << k;
  }
  // And back: the single rank's checkpoint of step 3 into 4 ZeRO-1 ranks.
  std::string serial_path = ::testing::TempDir() + "/serial.safetensors";
  {
    TrainOptions o = Tiny(1, "ring");
    o.steps = 6;
    auto t = Trainer::Create(o).value();
    for (int64_t k = 0; k < 3; ++k) ASSERT_TRUE(t->TrainStep(k).ok());
    ASSERT_TRUE(t->Save(serial_path, 3).ok());
  }
  TrainOptions four = Tiny(4, "ring");
  four.zero = 1;
  four.steps = 6;
  four.load = serial_path;
  comm::LaunchOptions launch;
  launch.world_size = 4;
  std::vector<float> losses;
  ASSERT_TRUE(comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto t, Trainer::Create(four, &world));
    for (int64_t k = t->start_step(); k < 6; ++k) {
      ASSIGN_OR_RETURN(StepStats s, t->TrainStep(k));
      if (world.rank() == 0) losses.push_back(s.loss);
    }
    return absl::OkStatus();
  }).ok());
  ASSERT_EQ(losses.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]);
}

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
  o = Tiny(2, "ring");
  o.zero = 4;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--zero must be 0, 1, 2 or 3"));
}

}  // namespace
}  // namespace tally::train
