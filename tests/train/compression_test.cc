// PowerSGD in training: the warm-up's steps are the plain run's bit for bit, the
// compressed steps send what PowerSgdCalls says (every report row exact, the error and Q
// in the memory formula), on any grid data parallelism composes with.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// TinyGrid's 4 layers of 16 channels (SGD) on `g`, PowerSGD of rank `r` after 2 steps.
TrainOptions Compressed(const Grid& g, int r) {
  TrainOptions o = g.On(TinyGrid(4 * g.dp));
  o.parallel.grad_compression = parallel::GradCompression::kPowerSgd;
  o.parallel.powersgd_rank = r;
  o.parallel.powersgd_warmup_steps = 2;
  return o;
}

class PowerSgdRun : public ::testing::TestWithParam<Grid> {};

TEST_P(PowerSgdRun, WarmUpIsThePlainRunAndEveryRowIsExact) {
  const Grid& g = GetParam();
  for (int r : {1, 4}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const TrainOptions o = Compressed(g, r);
    TrainOptions plain_options = o;
    plain_options.parallel.grad_compression = parallel::GradCompression::kNone;
    const RunResult run = RunRanks(o);
    const RunResult plain = RunRanks(plain_options);
    ASSERT_EQ(run.losses.size(), plain.losses.size());
    for (size_t k = 0; k < run.losses.size(); ++k) {
      if (k < 2) {
        EXPECT_EQ(run.losses[k], plain.losses[k]) << "step " << k;  // the warm-up: the same bits
        EXPECT_EQ(run.compression_errors[k], 0) << "step " << k;
      } else {
        // E = Δ − P·Pᵀ·Δ, P orthonormal: a projection's residual, no larger than Δ.
        EXPECT_GT(run.compression_errors[k], 0) << "step " << k;
        EXPECT_LE(run.compression_errors[k], 1) << "step " << k;
        EXPECT_TRUE(std::isfinite(run.losses[k])) << "step " << k;
        EXPECT_NEAR(run.losses[k], plain.losses[k], 0.1 * plain.losses[k]) << "step " << k;
      }
    }
    ExpectReportRowsExact(o, run);
    ExpectMemoryFormulaExact(o, run);
    for (int w = 0; w < o.world(); ++w) {  // fewer bytes than the plain sum
      auto sum = [](const RunResult& x, int rank) {
        return x.traffic[size_t(rank)].Sum([](const comm::LedgerKey& k) {
          return k.group == "dp" && k.phase == comm::Phase::kBackward;
        }).bytes_sent;
      };
      EXPECT_LT(sum(run, w), sum(plain, w)) << "rank " << w;
      EXPECT_GT(run.traffic[size_t(w)].Sum([](const comm::LedgerKey& k) {
        return k.label == "powersgd_q";
      }).bytes_sent, 0) << "rank " << w;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, PowerSgdRun,
    ::testing::ValuesIn(Sweep<Grid>(
        {Grid{.dp = 2}, Grid{.dp = 3}, Grid{.dp = 4, .allreduce = comm::Algorithm::kNaive},
         Grid{.dp = 2, .tp = 2}, Grid{.dp = 2, .pp = 2}, Grid{.dp = 2, .cp = 2},
         Grid{.dp = 2, .tp = 2, .pp = 2, .sequence_parallel = true}})),
    GridName);

TEST(PowerSgdOptions, BadValuesAreClearErrors) {
  auto message = [](const TrainOptions& o) { return std::string(o.Validate().message()); };
  const TrainOptions good = Compressed(Grid{.dp = 2}, 1);
  ASSERT_TRUE(good.Validate().ok()) << good.Validate();
  for (auto [change, words] :
       std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>>{
           {[](TrainOptions& o) { o.parallel.powersgd_rank = 0; }, "--powersgd_rank must be at least 1, got 0"},
           {[](TrainOptions& o) { o.parallel.powersgd_rank = 64; }, "--powersgd_rank=64 compresses no tensor"},
           {[](TrainOptions& o) { o.parallel.powersgd_warmup_steps = -1; }, "--powersgd_warmup_steps must be 0 or more"},
           {[](TrainOptions& o) { o.parallel.zero = 1; }, "it needs --zero=0"},
           {[](TrainOptions& o) { o.parallel.dp = 1; }, "needs more than one dp rank"},
           {[](TrainOptions& o) { o.precision.dtype = DType::kBF16; }, "with bf16"},
           {[](TrainOptions& o) { o.checkpoint.save = "x.safetensors"; }, "with --save or --load"}}) {
    TrainOptions o = good;
    change(o);
    EXPECT_TRUE(absl::StrContains(message(o), words)) << words << " | " << message(o);
  }
  // Flags that do nothing say so (a warning; the run goes on).
  auto warned = [](const TrainOptions& o, const std::string& words) {
    for (const std::string& w : o.Warnings()) {
      if (absl::StrContains(w, words)) return true;
    }
    return false;
  };
  TrainOptions plain = good;
  plain.parallel.grad_compression = parallel::GradCompression::kNone;
  plain.parallel.powersgd_rank = 4;
  EXPECT_TRUE(warned(plain, "--powersgd_rank has no effect without --grad_compression=powersgd"));
  TrainOptions late = good;
  late.parallel.powersgd_warmup_steps = late.training.steps;
  EXPECT_TRUE(warned(late, "--powersgd_warmup_steps >= --steps"));
  EXPECT_FALSE(warned(good, "powersgd"));
}

}  // namespace
}  // namespace tally::train
