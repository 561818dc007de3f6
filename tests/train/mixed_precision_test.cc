// Mixed precision (core/model/precision.h): bf16 on every layout reproduces the bf16 serial run
// within a tolerance derived below; every traffic row with a formula measures exactly it
// at 2 bytes a value, and the model states' memory peaks equal the formula rows, which
// are the seed's 2 + 2 + 12 bytes a parameter; gradient compression halves the
// data-parallel bytes of an fp32 run; checkpoints move between the precisions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lab/report/report.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

constexpr parallel::PipelineSchedule kGPipe = parallel::PipelineSchedule::kGPipe;

// The 3D suite's tiny model and short run, in bf16.
TrainOptions Model(int global_batch, DType precision = DType::kBF16) {
  TrainOptions o = TinyGrid(global_batch);
  o.precision.dtype = precision;
  return o;
}

// The tolerance. A layout changes only where values are rounded to bf16 (unit roundoff
// u = 2^-8 relative to the value, with round-to-nearest half of it): a data-parallel sum
// rounds each rank's gradients before adding them and once per ring hop; tensor and
// sequence parallelism round the activations and their gradients at every collective,
// two per layer each way; a pipeline rounds them at each boundary. Where the serial run
// rounds a value once, a layout rounds it at most a few times more, so a gradient or an
// activation differs by a few u relative to its size.
//  - The loss of a step: the logits move by a few u relative (the LayerNorms keep the
//    residual stream's scale, so the rounding errors of the L layers add, not multiply):
//    |Δloss| <= 2·L·u·|loss|, 3% for L = 4.
//  - The fp32 master weights after the run: SGD with momentum moves a parameter by
//    lr·Σ_k Σ_{j<=k} g_j over the steps (momentum 0.9 <= 1), and the gradients are
//    clipped to a global norm of 1, so each |g| <= 1 and each Δg <= 2·L·u; over 5
//    steps |Δp| <= lr·15·2·L·u = 1e-2·15·8·2^-8 ≈ 4.7e-3.
constexpr double kUnitRoundoff = 1.0 / 256;

void ExpectWithinBf16Tolerance(const TrainOptions& o, const RunResult& run, const RunResult& serial) {
  const double layers = o.model.n_layer;
  ASSERT_EQ(run.losses.size(), serial.losses.size());
  double worst_loss = 0, worst_param = 0;
  for (size_t k = 0; k < run.losses.size(); ++k) {
    const double diff = std::abs(double(run.losses[k]) - serial.losses[k]);
    worst_loss = std::max(worst_loss, diff / std::abs(serial.losses[k]));
    EXPECT_LE(diff, 2 * layers * kUnitRoundoff * std::abs(serial.losses[k])) << "step " << k;
  }
  ASSERT_EQ(run.params.size(), serial.params.size());
  const double steps = double(o.training.steps);
  const double param_bound = o.training.lr * steps * (steps + 1) / 2 * 2 * layers * kUnitRoundoff;
  for (size_t i = 0; i < run.params.size(); ++i) {
    const double diff = std::abs(double(run.params[i]) - serial.params[i]);
    worst_param = std::max(worst_param, diff);
    ASSERT_LE(diff, param_bound) << "parameter " << i;
  }
  std::printf("  worst relative loss difference %.2e, worst parameter difference %.2e (bound %.2e)\n",
              worst_loss, worst_param, param_bound);
}

class MixedPrecisionTest : public ::testing::TestWithParam<Grid> {};

TEST_P(MixedPrecisionTest, MatchesTheBf16SerialRunAndEveryFormulaAtTwoBytes) {
  const Grid& g = GetParam();
  const int global_batch = 4 * g.dp;
  TrainOptions o = g.On(Model(global_batch));
  o.parallel.bucket_mb = 20000.0 / (1 << 20);  // several gradient buckets
  const RunResult run = RunRanks(o);
  if (kCompareWithSerial) ExpectWithinBf16Tolerance(o, run, RunRanks(Model(global_batch)));
  ExpectReportRowsExact(o, run);
  ExpectMemoryFormulaExact(o, run);
}

INSTANTIATE_TEST_SUITE_P(Grids, MixedPrecisionTest,
                         ::testing::ValuesIn(Sweep<Grid>(
                             {Grid{.dp = 2}, Grid{.dp = 2, .zero = 1}, Grid{.dp = 3, .zero = 2},
                              Grid{.dp = 2, .zero = 3}, Grid{.tp = 2},
                              Grid{.tp = 2, .sequence_parallel = true},
                              Grid{.pp = 2, .schedule = kGPipe}, Grid{.pp = 2},
                              Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .sequence_parallel = true},
                              Grid{.dp = 2, .pp = 2, .zero = 3, .recompute = true},
                              Grid{.dp = 2,
                                   .pp = 2,
                                   .zero = 1,
                                   .schedule = parallel::PipelineSchedule::kInterleaved,
                                   .virtual_stages = 2},
                              // Context parallelism: K, V, the dK, dV accumulators and Ulysses'
                              // tensors travel in bf16.
                              Grid{.cp = 2}, Grid{.cp = 4, .cp_comm = parallel::CpComm::kAllGather},
                              Grid{.cp = 2, .cp_comm = parallel::CpComm::kAllToAll},
                              Grid{.dp = 2, .tp = 2, .zero = 1, .sequence_parallel = true, .cp = 2},
                              Grid{.pp = 2,
                                   .recompute = true,
                                   .cp = 2,
                                   .cp_load_balance = parallel::CpLoadBalance::kNone}})),
                         GridName);

// The seed's Q6 model states, to the byte: with --precision=bf16 the peaks are 2Φ of
// parameters, 2Φ of gradients and 12Φ of optimizer state (fp32 master weights and
// AdamW's two moments) on one rank; ZeRO-3 over dp ranks holds Φ/dp of each (plus the
// units in use and one reduced chunk, which the formula rows add).
TEST(MixedPrecisionMemory, Bf16ModelStatesAreTwoTwoAndTwelveBytesAParameter) {
  TrainOptions o = Model(4);
  o.training.optimizer = OptimizerKind::kAdamW;
  const int64_t phi = o.model.NumParams();
  // One rank's peaks after a step: its own ledger (trainer.h).
  auto peaks = [](const TrainOptions& options) {
    std::unique_ptr<Trainer> t = Trainer::Create(options).value();
    EXPECT_TRUE(t->TrainStep(0).ok());
    return t->memory();
  };
  const MemoryLedger bf16 = peaks(o);
  EXPECT_EQ(bf16.peak(MemoryCategory::kParams), 2 * phi);
  EXPECT_EQ(bf16.peak(MemoryCategory::kGrads), 2 * phi);
  EXPECT_EQ(bf16.peak(MemoryCategory::kOptimizer), 12 * phi);
  o.precision.fp32_grad_accum = true;  // Megatron's main_grad: 2 + 4 + 12
  const MemoryLedger accum = peaks(o);
  EXPECT_EQ(accum.peak(MemoryCategory::kParams), 2 * phi);
  EXPECT_EQ(accum.peak(MemoryCategory::kGrads), 4 * phi);
  EXPECT_EQ(accum.peak(MemoryCategory::kOptimizer), 12 * phi);
  o.precision.dtype = DType::kF32;  // 4 + 4 + 8
  o.precision.fp32_grad_accum = false;
  const MemoryLedger fp32 = peaks(o);
  EXPECT_EQ(fp32.peak(MemoryCategory::kParams), 4 * phi);
  EXPECT_EQ(fp32.peak(MemoryCategory::kGrads), 4 * phi);
  EXPECT_EQ(fp32.peak(MemoryCategory::kOptimizer), 8 * phi);
}

// ZeRO-1 in bf16 over dp ranks: the seed's Q6 per GPU, 2Φ + 2Φ + 12Φ/dp, on every rank
// (the optimizer state to the element: each rank's shard is its chunks of the buffer).
TEST(MixedPrecisionMemory, ZeroOneHoldsTheSeedsModelStatesPerRank) {
  TrainOptions o = Model(4);
  o.training.optimizer = OptimizerKind::kAdamW;
  o.parallel.dp = 2;
  o.parallel.zero = 1;
  o.training.steps = 2;
  const int64_t phi = o.model.NumParams();
  const RunResult run = RunRanks(o);
  for (int r = 0; r < o.parallel.dp; ++r) {
    const MemoryLedger& m = run.memory[r];
    EXPECT_EQ(m.peak(MemoryCategory::kParams), 2 * phi) << r;
    EXPECT_EQ(m.peak(MemoryCategory::kGrads), 2 * phi) << r;
    EXPECT_EQ(m.peak(MemoryCategory::kOptimizer), 12 * comm::ChunkOf(phi, o.parallel.dp, r).count)
        << r;
  }
}

// The bytes of the data-parallel gradient all-reduce in one run.
int64_t GradientBytes(const RunResult& run) {
  int64_t bytes = 0;
  for (const auto& [key_peer, t] : run.traffic[0].transfers()) {
    const comm::LedgerKey& key = key_peer.first;
    if (key.group == "dp" && key.primitive == comm::Primitive::kAllReduce &&
        key.phase == comm::Phase::kBackward) {
      bytes += t.bytes_sent;
    }
  }
  return bytes;
}

// DDP's bf16 compression hook: an fp32 run whose gradients travel as bf16 sends exactly
// half the data-parallel bytes, and trains as the fp32 run does within the tolerance of
// one extra rounding of each gradient.
TEST(GradientCompression, Bf16GradientsHalveTheDataParallelBytes) {
  TrainOptions o = Grid{.dp = 2}.On(Model(8, DType::kF32));
  const RunResult fp32 = RunRanks(o);
  o.precision.grad_comm_dtype = DType::kBF16;
  const RunResult compressed = RunRanks(o);
  ASSERT_GT(GradientBytes(fp32), 0);
  EXPECT_EQ(2 * GradientBytes(compressed), GradientBytes(fp32));
  ExpectReportRowsExact(o, compressed);
  ExpectWithinBf16Tolerance(o, compressed, fp32);
}

// A bf16 run saves its fp32 master weights under the usual names; an fp32 run resumes
// from them, and a bf16 run from an fp32 checkpoint.
TEST(MixedPrecisionCheckpoints, ResumeAcrossPrecisions) {
  const std::string path = ::testing::TempDir() + "/mixed_precision.safetensors";
  for (DType from : {DType::kBF16, DType::kF32}) {
    const DType to = from == DType::kBF16 ? DType::kF32 : DType::kBF16;
    TrainOptions saving = Model(4, from);
    TrainAndSave(saving, 2, path);
    TrainOptions resuming = Grid{.dp = 2, .zero = 3}.On(Model(4, to));
    resuming.checkpoint.load = path;
    const std::vector<float> losses = Resume(resuming);
    ASSERT_EQ(losses.size(), size_t(resuming.training.steps - 2));
    // Continuing in the other precision from the same weights: the third step's loss is
    // the uninterrupted run's within the tolerance.
    const RunResult whole = RunRanks(Model(4, from));
    EXPECT_NEAR(losses[0], whole.losses[2], 2 * 4 * kUnitRoundoff * whole.losses[2]);
  }
}

}  // namespace
}  // namespace tally::train
