// PowerSGD and 1-bit Adam in training: the warm-up's steps are the plain run's bit for
// bit, the compressed steps send what PowerSgdCalls and OneBitAdamCalls say (every report
// row exact, the errors and Q in the memory formula), on any grid data parallelism
// composes with.
#include <cmath>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/parallel/onebit_adam.h"
#include "core/parallel/powersgd.h"
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

// Runs `o` (compressed after 2 warm-up steps) and the same run uncompressed (in *plain):
// the warm-up's steps are the plain run's bits with no error; each later step's error is
// in (0, most_error] and its loss finite and within `loss_share` of the plain run's; every
// report row and the memory formula are exact.
RunResult RunBesidePlain(const TrainOptions& o, double most_error, double loss_share,
                         RunResult* plain) {
  TrainOptions plain_options = o;
  plain_options.parallel.grad_compression = parallel::GradCompression::kNone;
  const RunResult run = RunRanks(o);
  *plain = RunRanks(plain_options);
  EXPECT_EQ(run.losses.size(), plain->losses.size());
  for (size_t k = 0; k < run.losses.size() && k < plain->losses.size(); ++k) {
    if (k < 2) {
      EXPECT_EQ(run.losses[k], plain->losses[k]) << "step " << k;  // the same bits
      EXPECT_EQ(run.compression_errors[k], 0) << "step " << k;
    } else {
      EXPECT_GT(run.compression_errors[k], 0) << "step " << k;
      EXPECT_LE(run.compression_errors[k], most_error) << "step " << k;
      EXPECT_TRUE(std::isfinite(run.losses[k])) << "step " << k;
      EXPECT_NEAR(run.losses[k], plain->losses[k], loss_share * plain->losses[k]) << "step " << k;
    }
  }
  ExpectReportRowsExact(o, run);
  ExpectMemoryFormulaExact(o, run);
  return run;
}

class PowerSgdRun : public ::testing::TestWithParam<Grid> {};

TEST_P(PowerSgdRun, WarmUpIsThePlainRunAndEveryRowIsExact) {
  const Grid& g = GetParam();
  for (int r : {1, 4}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const TrainOptions o = Compressed(g, r);
    RunResult plain;
    // E = Δ − P·Pᵀ·Δ, P orthonormal: a projection's residual, no larger than Δ.
    const RunResult run = RunBesidePlain(o, /*most_error=*/1, /*loss_share=*/0.1, &plain);
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

// TinyGrid's model with AdamW on `g` (`gpus_per_node` a node: with the hierarchical
// algorithm), 1-bit Adam after 2 steps.
TrainOptions OneBit(const Grid& g, int gpus_per_node = 0) {
  TrainOptions o = g.On(TinyGrid(4 * g.dp));
  o.training.optimizer = OptimizerKind::kAdamW;
  o.training.lr = 1e-3f;
  o.parallel.grad_compression = parallel::GradCompression::kOneBitAdam;
  o.parallel.onebit_warmup_steps = 2;
  o.placement.gpus_per_node = gpus_per_node;
  return o;
}

class OneBitAdamRun : public ::testing::TestWithParam<std::pair<Grid, int>> {};

TEST_P(OneBitAdamRun, WarmUpIsThePlainRunAndEveryRowIsExact) {
  const auto& [g, gpus_per_node] = GetParam();
  const TrainOptions o = OneBit(g, gpus_per_node);
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  RunResult plain;
  // One sign and the RMS scale: Σ(y − s·sign y)² = 2Σy² − 2s·Σ|y|, under 2Σy² (strictly:
  // the largest double below √2).
  const RunResult run = RunBesidePlain(o, std::nextafter(std::sqrt(2.0), 0.0),
                                       /*loss_share=*/0.05, &plain);
  for (int w = 0; w < o.world(); ++w) {
    auto dp_bytes = [](const RunResult& x, int rank) {
      return x.traffic[size_t(rank)].Sum([](const comm::LedgerKey& k) {
        return k.group == "dp" && k.label != "loss";
      }).bytes_sent;
    };
    // 3 compressed steps of 5: well under 3/5 of the plain sum's bytes.
    EXPECT_LT(5 * dp_bytes(run, w), 3 * dp_bytes(plain, w)) << "rank " << w;
    EXPECT_GT(run.traffic[size_t(w)].Sum([](const comm::LedgerKey& k) {
      return k.label == "onebit_signs" && k.phase == comm::Phase::kOptimizer;
    }).bytes_sent, 0) << "rank " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, OneBitAdamRun,
    ::testing::ValuesIn(Sweep<std::pair<Grid, int>>(
        {{Grid{.dp = 2}, 0}, {Grid{.dp = 3}, 0},
         {Grid{.dp = 4, .allreduce = comm::Algorithm::kNaive}, 0},
         {Grid{.dp = 4, .allreduce = comm::Algorithm::kHierarchical}, 2},
         {Grid{.dp = 2, .tp = 2, .sequence_parallel = true}, 0}, {Grid{.dp = 2, .pp = 2}, 0},
         {Grid{.dp = 2, .cp = 2}, 0}})),
    [](const auto& param_info) {
      const int per_node = param_info.param.second;
      return param_info.param.first.Name() + (per_node > 0 ? absl::StrCat("_node", per_node) : "");
    });

// A compressed run saved and resumed goes on as the run that did not stop, bit for bit:
// saved inside the warm-up (nothing compressed yet) and past it (the error buffers, and
// PowerSGD's Q, from the checkpoint), on grids whose ranks hold parts of different sizes.
struct Resumed {
  std::string name;
  TrainOptions options;
};

void PrintTo(const Resumed& r, std::ostream* os) { *os << r.name; }

class CompressedCheckpoint : public ::testing::TestWithParam<Resumed> {};

TEST_P(CompressedCheckpoint, ResumesBitForBit) {
  TrainOptions o = GetParam().options;
  o.training.steps = 6;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  const RunResult straight = RunRanks(o);
  ASSERT_EQ(straight.losses.size(), 6u);
  for (int64_t saved : {1, 4}) {  // the warm-up is 2 steps
    SCOPED_TRACE(absl::StrCat("saved after step ", saved));
    const std::string path = ::testing::TempDir() +
                             absl::StrCat("/compressed_", GetParam().name, "_", saved, ".safetensors");
    TrainAndSave(o, saved, path);
    TrainOptions resumed = o;
    resumed.checkpoint.load = path;
    const std::vector<float> losses = Resume(resumed);
    ASSERT_EQ(losses.size(), size_t(6 - saved));
    for (size_t k = 0; k < losses.size(); ++k) {
      EXPECT_EQ(losses[k], straight.losses[size_t(saved) + k]) << "step " << saved + int64_t(k);
    }
  }
  // Until the first compressed step the state is where it starts, so the uncompressed
  // run's checkpoint at the end of the warm-up (no compression state) resumes it too.
  TrainOptions plain = o;
  plain.parallel.grad_compression = parallel::GradCompression::kNone;
  const std::string path =
      ::testing::TempDir() + absl::StrCat("/plain_", GetParam().name, ".safetensors");
  TrainAndSave(plain, 2, path);
  TrainOptions from_plain = o;
  from_plain.checkpoint.load = path;
  EXPECT_EQ(Resume(from_plain), std::vector<float>(straight.losses.begin() + 2, straight.losses.end()));
}

INSTANTIATE_TEST_SUITE_P(
    Grids, CompressedCheckpoint,
    ::testing::ValuesIn(Sweep<Resumed>(
        {Resumed{"powersgd_dp2", Compressed(Grid{.dp = 2}, 2)},
         Resumed{"powersgd_dp2_pp2", Compressed(Grid{.dp = 2, .pp = 2}, 1)},
         Resumed{"onebit_dp3", OneBit(Grid{.dp = 3})},
         Resumed{"onebit_dp2_tp2", OneBit(Grid{.dp = 2, .tp = 2})},
         Resumed{"onebit_dp2_pp2", OneBit(Grid{.dp = 2, .pp = 2})},
         Resumed{"onebit_dp2_cp2", OneBit(Grid{.dp = 2, .cp = 2})},
         Resumed{"powersgd_dp2_tp2_pp2", Compressed(Grid{.dp = 2, .tp = 2, .pp = 2}, 1)}})),
    [](const auto& param_info) { return param_info.param.name; });

// Each change to `good` makes Validate's one line hold its words (and `flag`).
using Change = std::function<void(TrainOptions&)>;
void ExpectClearErrors(const TrainOptions& good, const std::string& flag,
                       const std::vector<std::pair<Change, std::string>>& cases) {
  ASSERT_TRUE(good.Validate().ok()) << good.Validate();
  for (const auto& [change, words] : cases) {
    TrainOptions o = good;
    change(o);
    const std::string message(o.Validate().message());
    EXPECT_TRUE(absl::StrContains(message, words)) << words << " | " << message;
    EXPECT_TRUE(absl::StrContains(message, flag)) << message;
  }
}

// Whether a warning (a flag that does nothing; the run goes on) holds `words`.
bool Warned(const TrainOptions& o, const std::string& words) {
  for (const std::string& w : o.Warnings()) {
    if (absl::StrContains(w, words)) return true;
  }
  return false;
}

TEST(OneBitAdamOptions, BadValuesAreClearErrors) {
  const TrainOptions good = OneBit(Grid{.dp = 2});
  ExpectClearErrors(good, "onebit", {
      {[](TrainOptions& o) { o.parallel.onebit_warmup_steps = 0; },
       "--onebit_warmup_steps must be at least 1"},
      {[](TrainOptions& o) { o.parallel.onebit_warmup_steps = -3; }, "got -3"},
      {[](TrainOptions& o) { o.parallel.zero = 2; }, "it needs --zero=0"},
      {[](TrainOptions& o) { o.training.optimizer = OptimizerKind::kSgd; },
       "needs --optimizer=adamw, got --optimizer=sgd"},
      {[](TrainOptions& o) { o.parallel.dp = 1; }, "needs more than one dp rank"},
      {[](TrainOptions& o) { o.precision.dtype = DType::kBF16; }, "with bf16"},
      {[](TrainOptions& o) {
         o.parallel.dp = 72;
         o.training.global_batch_size = 72;
         o.training.micro_batch_size = 1;
         o.checkpoint.save = "x.safetensors";
       }, "holds the error buffers of at most 64 ranks, and this grid has 72"}});
  TrainOptions plain = good;
  plain.parallel.grad_compression = parallel::GradCompression::kNone;
  plain.parallel.onebit_warmup_steps = 4;
  EXPECT_TRUE(Warned(plain, "--onebit_warmup_steps has no effect without --grad_compression=onebit_adam"));
  TrainOptions late = good;
  late.parallel.onebit_warmup_steps = late.training.steps;
  EXPECT_TRUE(Warned(late, "--onebit_warmup_steps >= --steps"));
  EXPECT_FALSE(Warned(good, "onebit"));
}

TEST(PowerSgdOptions, BadValuesAreClearErrors) {
  const TrainOptions good = Compressed(Grid{.dp = 2}, 1);
  ExpectClearErrors(good, "powersgd", {
      {[](TrainOptions& o) { o.parallel.powersgd_rank = 0; }, "--powersgd_rank must be at least 1, got 0"},
      {[](TrainOptions& o) { o.parallel.powersgd_rank = 64; }, "--powersgd_rank=64 compresses no tensor"},
      {[](TrainOptions& o) { o.parallel.powersgd_warmup_steps = -1; }, "--powersgd_warmup_steps must be 0 or more"},
      {[](TrainOptions& o) { o.parallel.zero = 1; }, "it needs --zero=0"},
      {[](TrainOptions& o) { o.parallel.dp = 1; }, "needs more than one dp rank"},
      {[](TrainOptions& o) { o.precision.dtype = DType::kBF16; }, "with bf16"},
      {[](TrainOptions& o) {
         o.parallel.dp = 80;
         o.training.global_batch_size = 80;
         o.training.micro_batch_size = 1;
         o.checkpoint.save = "x.safetensors";
       }, "holds the error buffers of at most 64 ranks, and this grid has 80"}});
  TrainOptions plain = good;
  plain.parallel.grad_compression = parallel::GradCompression::kNone;
  plain.parallel.powersgd_rank = 4;
  EXPECT_TRUE(Warned(plain, "--powersgd_rank has no effect without --grad_compression=powersgd"));
  TrainOptions late = good;
  late.parallel.powersgd_warmup_steps = late.training.steps;
  EXPECT_TRUE(Warned(late, "--powersgd_warmup_steps >= --steps"));
  EXPECT_FALSE(Warned(good, "powersgd"));
}

}  // namespace
}  // namespace tally::train
