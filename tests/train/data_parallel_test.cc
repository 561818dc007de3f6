// Data parallelism reproduces the single-rank run, and moves exactly the bytes the formula
// says, bucket by bucket, including a parameter count the group size does not divide.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/model/parameters.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/zero/sharding.h"
#include "lab/report/report.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"
#include "core/train/trainer.h"

namespace tally::train {
namespace {

// TinyDataParallel's model and batch, in 375-element buckets: uneven, and several of them.
TrainOptions Tiny(int dp) {
  TrainOptions o = TinyDataParallel(dp);
  o.parallel.bucket_mb = 1500.0 / (1 << 20);
  return o;
}

// The serial reference every parallel run is held to.
const RunResult& Serial() {
  static const RunResult* serial = new RunResult(RunRanks(Tiny(1)));
  return *serial;
}

class DataParallelTest : public ::testing::TestWithParam<Grid> {};

TEST_P(DataParallelTest, MatchesTheSingleRankRunAndTheExactBytes) {
  const Grid& g = GetParam();
  const int dp = g.dp;
  TrainOptions o = g.On(Tiny(dp));
  RunResult parallel = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(parallel, Serial());
  // Bytes: the gradient sum is booked under (dp, all_reduce, backward), exactly the
  // per-bucket formula times the steps, on every rank.
  const comm::Algorithm algorithm = g.allreduce;
  int64_t phi = o.model.NumParams();
  ASSERT_EQ(phi, 4070);
  for (int r = 0; r < dp; ++r) {
    comm::TransferTotals grads = parallel.traffic[r].Sum([](const comm::LedgerKey& k) {
      return k.group == "dp" && k.phase == comm::Phase::kBackward;
    });
    int64_t exact =
        o.training.steps * parallel::GradientSyncBytesPerStep(
                               phi, dp, r, int64_t(o.parallel.bucket_mb * (1 << 20)), algorithm);
    EXPECT_EQ(grads.bytes_sent, exact) << "rank " << r;
    if (dp > 1 && algorithm == comm::Algorithm::kRing) {
      // Close to 2(p-1)/p·4Φ per step; not equal, since the 375-element buckets do not split
      // evenly.
      EXPECT_NEAR(double(grads.bytes_sent) / o.training.steps, 2.0 * (dp - 1) / dp * 4 * phi,
                  4.0 * dp * 11);
    }
  }
}

// dp 1–4 × ring, naive; ZeRO stages 1–3 over them too (ZeroGrids).
std::vector<Grid> DataParallelGrids(const std::vector<int>& zero_stages) {
  std::vector<Grid> grids;
  for (int zero : zero_stages) {
    for (int dp : {1, 2, 3, 4}) {
      for (comm::Algorithm a : {comm::Algorithm::kRing, comm::Algorithm::kNaive}) {
        grids.push_back(Grid{.dp = dp, .zero = zero, .allreduce = a});
      }
    }
  }
  return grids;
}

INSTANTIATE_TEST_SUITE_P(DpAndAlgorithm, DataParallelTest,
                         ::testing::ValuesIn(Sweep(DataParallelGrids({0}))), GridName);

class ZeroTest : public ::testing::TestWithParam<Grid> {};

// Every ZeRO stage reproduces the serial run; every reduce-scatter and all-gather moves
// exactly the bytes of its formula, in its phase; each rank's memory peaks are the
// formula's, and show what the stage shards.
TEST_P(ZeroTest, MatchesTheSingleRankRunWithExactBytesAndShardedMemory) {
  const Grid& g = GetParam();
  const int stage = g.zero, dp = g.dp;
  const TrainOptions o = g.On(Tiny(dp));
  RunResult zero = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(zero, Serial());

  const comm::Algorithm algorithm = g.allreduce;
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(o.model);
  const int64_t phi = layout.total();
  const std::vector<comm::Chunk> units = parallel::UnitRanges(parallel::ZeroUnits(layout, stage), false);
  const int micro_batches = o.accumulation_steps();
  using comm::Phase;
  using comm::Primitive;
  const std::pair<Primitive, Phase> moves[] = {{Primitive::kReduceScatter, Phase::kBackward},
                                               {Primitive::kAllGather, Phase::kForward},
                                               {Primitive::kAllGather, Phase::kBackward},
                                               {Primitive::kAllGather, Phase::kOptimizer}};
  for (int r = 0; r < dp; ++r) {
    int64_t expected_total = 0;
    for (auto [primitive, phase] : moves) {
      int64_t exact =
          o.training.steps * parallel::ZeroBytesPerStep(units, stage, dp, r, micro_batches,
                                                        algorithm, primitive, phase);
      int64_t sent = zero.traffic[r].Sum([&](const comm::LedgerKey& k) {
        return k.group == "dp" && k.primitive == primitive && k.phase == phase;
      }).bytes_sent;
      EXPECT_EQ(sent, exact) << comm::Name(primitive) << " " << comm::Name(phase) << " rank " << r;
      expected_total += exact;
    }
    // Nothing else reduce-scatters or gathers during training.
    int64_t all = zero.traffic[r].Sum([](const comm::LedgerKey& k) {
      return k.primitive == comm::Primitive::kReduceScatter || k.primitive == comm::Primitive::kAllGather;
    }).bytes_sent;
    EXPECT_EQ(all, expected_total) << "rank " << r;
    if (algorithm == comm::Algorithm::kRing) {
      // Near the closed form: one pass of the buffer is (p-1)/p·4Φ; ZeRO-1 makes 2 a step,
      // ZeRO-2 one per micro-batch and one, ZeRO-3 three per micro-batch. Not equal: the
      // units do not split evenly (at most one element per unit and pass off).
      int passes = stage == 1 ? 2 : stage == 2 ? micro_batches + 1 : 3 * micro_batches;
      double closed = double(passes) * (dp - 1) / dp * 4 * phi;
      EXPECT_NEAR(double(all) / o.training.steps, closed, 4.0 * passes * layout.units().size());
    }

    report::MemoryFormula f = report::PredictedMemory(o, r);
    const MemoryLedger& m = zero.memory[r];
    EXPECT_EQ(m.peak(MemoryCategory::kParams), f.params) << "rank " << r;
    EXPECT_EQ(m.peak(MemoryCategory::kGrads), f.grads) << "rank " << r;
    EXPECT_EQ(m.peak(MemoryCategory::kOptimizer), f.optimizer) << "rank " << r;
    const int64_t shard = parallel::Sharding(parallel::ZeroUnits(layout, stage), dp, r).size();
    EXPECT_EQ(f.optimizer, 8 * shard);  // AdamW's m and v of the own shard only
  }
}

INSTANTIATE_TEST_SUITE_P(StageDpAndAlgorithm, ZeroTest,
                         ::testing::ValuesIn(Sweep(DataParallelGrids({1, 2, 3}))), GridName);

// With 4 layers the embeddings are no longer most of the model (they are in Tiny), and
// each stage's savings show: on 4 ranks ZeRO-1 cuts the optimizer state to a quarter,
// ZeRO-2 the gradients and ZeRO-3 the parameters to a quarter plus the units in use.
TEST(ZeroMemory, EachStageShardsWhatItShould) {
  std::vector<MemoryLedger> peaks;
  TrainOptions o = Tiny(4);
  o.model.n_layer = 4;
  o.model.n_embd = 32;
  o.training.steps = 2;
  const int64_t phi = o.model.NumParams();
  for (int stage = 0; stage <= 3; ++stage) {
    o.parallel.zero = stage;
    RunResult run = RunRanks(o);
    for (int r = 0; r < 4; ++r) {
      const MemoryLedger& m = run.memory[r];
      report::MemoryFormula f = report::PredictedMemory(o, r);
      EXPECT_EQ(m.peak(MemoryCategory::kParams), f.params) << stage;
      EXPECT_EQ(m.peak(MemoryCategory::kGrads), f.grads) << stage;
      EXPECT_EQ(m.peak(MemoryCategory::kOptimizer), f.optimizer) << stage;
    }
    peaks.push_back(run.memory[0]);
  }
  auto peak = [&](int stage, MemoryCategory c) { return double(peaks[stage].peak(c)); };
  EXPECT_EQ(peak(0, MemoryCategory::kOptimizer), 8.0 * phi);
  EXPECT_NEAR(peak(1, MemoryCategory::kOptimizer), 8.0 * phi / 4, 8.0);  // one element off at most
  // ZeRO-1 reduces into the front of its whole buffer: no gradient memory beyond DDP's.
  EXPECT_EQ(peak(1, MemoryCategory::kGrads), peak(0, MemoryCategory::kGrads));
  EXPECT_EQ(peak(1, MemoryCategory::kGrads), 4.0 * phi);
  EXPECT_LT(peak(2, MemoryCategory::kGrads), 0.75 * peak(0, MemoryCategory::kGrads));
  EXPECT_EQ(peak(2, MemoryCategory::kParams), 4.0 * phi);
  EXPECT_LT(peak(3, MemoryCategory::kParams), 0.75 * 4.0 * phi);
}

// Checkpoints are whole: saved under one (dp, zero) after 3 of 6 steps and resumed under
// another, the run continues as the uninterrupted one does.
TEST(ZeroCheckpoints, LoadUnderAnyOtherDataParallelLayout) {
  TrainOptions straight = Tiny(1);
  straight.training.steps = 6;
  RunResult reference = RunRanks(straight);
  struct Layout {
    int dp, zero;
  };
  const std::vector<std::pair<Layout, Layout>> moves = Sweep<std::pair<Layout, Layout>>(
      {{{3, 1}, {1, 0}}, {{1, 0}, {4, 1}}, {{3, 3}, {2, 2}}, {{2, 2}, {4, 3}}, {{4, 3}, {1, 0}}});
  for (auto [from, to] : moves) {
    SCOPED_TRACE(
        absl::StrCat("dp", from.dp, " zero", from.zero, " -> dp", to.dp, " zero", to.zero));
    TrainOptions first = Tiny(from.dp);
    first.parallel.zero = from.zero;
    first.training.steps = 6;  // the schedule of the whole run
    const std::string path = ::testing::TempDir() + absl::StrCat("/dp", from.dp, "zero", from.zero,
                                                                  ".safetensors");
    TrainAndSave(first, 3, path);
    TrainOptions second = Tiny(to.dp);
    second.parallel.zero = to.zero;
    second.training.steps = 6;
    second.checkpoint.load = path;
    std::vector<float> losses = Resume(second);
    ASSERT_EQ(losses.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << k;
    }
  }
}

TEST(DataParallelOptions, BadValuesAreClearErrors) {
  TrainOptions o = Tiny(0);
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--dp must be >= 1"));
  o = Tiny(5);  // 12 sequences cannot be shared by 5 ranks
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "must be a multiple of --dp x --micro_batch_size"));
  EXPECT_TRUE(absl::StrContains(ParseAllReduce("tree").status().message(), "--allreduce must be ring, naive or hierarchical"));
  o = Tiny(2);
  o.parallel.allreduce = comm::Algorithm::kNative;  // MPI's and NCCL's own: not an --allreduce
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--allreduce must be ring, naive or hierarchical, got 'native'"));
  o = Tiny(2);
  o.parallel.zero = 4;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--zero must be 0, 1, 2 or 3"));
}

// --overlap=on posts each gradient bucket's all-reduce as backward closes it and waits
// before the optimizer, ZeRO-2/3 reduce-scatter a unit while the next computes, ZeRO-3
// gathers the next unit while one computes, and a pipeline stage posts its next receives
// early: the same sums, so the same bits as --overlap=off, and the same bytes on every
// row (small buckets: several in flight at once); ZeRO holds a unit more, as its
// formulas say.
void ExpectOverlapChangesNothingButTime(TrainOptions o, int zero) {
  o.parallel.bucket_mb = 0.01;
  const RunResult off = RunRanks(o);
  o.parallel.overlap = true;
  const RunResult on = RunRanks(o);
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_EQ(on.params, off.params);
  for (int r = 0; r < o.world(); ++r) {
    for (const auto& [key_peer, t] : off.traffic[r].transfers()) {
      const comm::LedgerKey& key = key_peer.first;
      const std::string row = absl::StrCat("rank ", r, ": ", key.group, " ", comm::Name(key.primitive),
                                           " ", comm::Name(key.phase), " ", key.label, " with world rank ",
                                           key_peer.second);
      auto it = on.traffic[r].transfers().find(key_peer);
      ASSERT_NE(it, on.traffic[r].transfers().end()) << row;
      EXPECT_EQ(it->second.bytes_sent, t.bytes_sent) << row;
    }
  }
  ExpectMemoryFormulaExact(o, on);
  if (zero == 3 && o.parallel.pp == 1) {  // the prefetched unit
    EXPECT_GT(on.memory[0].peak(MemoryCategory::kParams), off.memory[0].peak(MemoryCategory::kParams));
  }
  if (zero >= 2) {  // the unit whose reduce-scatters are in flight
    EXPECT_GT(on.memory[0].peak(MemoryCategory::kGrads), off.memory[0].peak(MemoryCategory::kGrads));
  }
}

// One grid a test, so that the grids run side by side and each fits the sanitizer's time.
class OverlapTest : public ::testing::TestWithParam<Grid> {};

TEST_P(OverlapTest, BucketsReducedDuringBackwardGiveTheSameBitsAndBytes) {
  const Grid& g = GetParam();
  ExpectOverlapChangesNothingButTime(g.On(TinyGrid(4)), g.zero);
  if (g.pp > 1 || g.zero >= 2) {  // bf16 boundaries and gradient reduce-scatters
    SCOPED_TRACE("bf16");
    TrainOptions o = g.On(TinyGrid(4));
    o.precision.dtype = DType::kBF16;
    ExpectOverlapChangesNothingButTime(o, g.zero);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, OverlapTest,
    ::testing::ValuesIn(Sweep<Grid>(
        {Grid{.dp = 2}, Grid{.dp = 4}, Grid{.dp = 2, .tp = 2, .pp = 2}, Grid{.dp = 2, .zero = 1},
         Grid{.dp = 2, .zero = 2}, Grid{.dp = 2, .zero = 3}, Grid{.dp = 4, .tp = 2, .zero = 3},
         Grid{.dp = 2, .pp = 2, .zero = 2, .micro_batches = 2},
         Grid{.dp = 2, .pp = 2, .zero = 3, .micro_batches = 2},
         Grid{.pp = 4, .schedule = parallel::PipelineSchedule::kGPipe, .micro_batches = 4},
         Grid{.dp = 2, .pp = 2, .micro_batches = 2},
         Grid{.dp = 2,
              .pp = 2,
              .zero = 2,
              .schedule = parallel::PipelineSchedule::kInterleaved,
              .virtual_stages = 2,
              .micro_batches = 2},
         Grid{.pp = 2,
              .schedule = parallel::PipelineSchedule::kInterleaved,
              .virtual_stages = 2,
              .micro_batches = 4}})),
    GridName);

}  // namespace
}  // namespace tally::train
