// 3D parallelism: dp × tp × pp (with ZeRO and sequence parallelism) composes and still
// reproduces the single-rank run; every report row that has a formula measures exactly
// it, and so does every rank's memory for the model states; whole checkpoints move
// between grids.
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lab/report/report.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

TrainOptions Model(int global_batch) { return TinyGrid(global_batch); }

constexpr parallel::PipelineSchedule kGPipe = parallel::PipelineSchedule::kGPipe;
constexpr parallel::PipelineSchedule kInterleaved = parallel::PipelineSchedule::kInterleaved;

TrainOptions On(const Grid& g, int global_batch) {
  TrainOptions o = g.On(Model(global_batch));
  o.parallel.bucket_mb = 20000.0 / (1 << 20);  // several gradient buckets
  return o;
}

class ThreeDTest : public ::testing::TestWithParam<Grid> {};

TEST_P(ThreeDTest, MatchesTheSingleRankRunAndEveryFormula) {
  const Grid& g = GetParam();
  const int global_batch = 4 * g.dp;
  ExpectGridMatchesSerial(On(g, global_batch), Model(global_batch));
}

INSTANTIATE_TEST_SUITE_P(
    Grids, ThreeDTest,
    ::testing::ValuesIn(Sweep<Grid>(
        {Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .sequence_parallel = true},  // the 8-rank
                                                                                 // example
         Grid{.dp = 2, .tp = 2, .pp = 2, .schedule = kGPipe, .recompute = true},
         Grid{.dp = 3, .pp = 2, .schedule = kGPipe, .pp_layers = {1, 3}},  // dp = 3, uneven stages
         Grid{.tp = 2, .pp = 2, .sequence_parallel = true, .pp_layers = {3, 1}},
         Grid{.dp = 3, .zero = 3}, Grid{.tp = 4, .sequence_parallel = true},
         Grid{.dp = 2, .pp = 2, .zero = 2},  // ZeRO-2/3 with stages
         Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 3, .sequence_parallel = true, .schedule = kGPipe},
         Grid{.dp = 2, .pp = 3, .zero = 3, .recompute = true},
         // Megatron's scatter/gather: 1/tp of each boundary, gathered over tp.
         Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .pp_scatter_gather = true},
         Grid{.tp = 4, .pp = 2, .schedule = kGPipe, .recompute = true, .pp_scatter_gather = true},
         // Interleaved: two chunks of one layer a stage, with every other strategy.
         Grid{.dp = 2,
              .tp = 2,
              .pp = 2,
              .zero = 1,
              .sequence_parallel = true,
              .schedule = kInterleaved,
              .virtual_stages = 2},
         Grid{.dp = 2, .pp = 2, .zero = 2, .schedule = kInterleaved, .virtual_stages = 2},
         Grid{.dp = 2,
              .pp = 2,
              .zero = 3,
              .schedule = kInterleaved,
              .virtual_stages = 2,
              .recompute = true},
         Grid{.tp = 2,
              .pp = 2,
              .schedule = kInterleaved,
              .virtual_stages = 2,
              .pp_scatter_gather = true}})),
    GridName);

// Evaluation and sampling between and after the steps leave every rank's training peaks
// to the formula (the demo's grid and model: sampling's logits once raised the
// activations' peak by 1,536 bytes), and are counted apart.
TEST(ThreeDMemory, EvaluationAndSamplingStayOutsideTheTrainingPeaks) {
  TrainOptions o = Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .sequence_parallel = true}.On(ShortRun());
  o.training.steps = 2;
  o.data.eval_every = 1;
  o.data.eval_batches = 1;
  o.sampling.sample_bytes = 4;
  o = o.Resolved();  // the formula reads the micro-batch size
  std::vector<MemoryLedger> memory(size_t(o.world()));
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  SetIntraOpThreads(o, o.world());
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, &world));
    std::ostringstream log;
    RETURN_IF_ERROR(trainer->Run(log));
    if (world.rank() == 0) {
      EXPECT_TRUE(absl::StrContains(log.str(), "val loss")) << log.str();
      EXPECT_TRUE(absl::StrContains(log.str(), "sample (")) << log.str();
    }
    memory[size_t(world.rank())] = world.memory();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  RunResult run;
  run.memory = memory;
  ExpectMemoryFormulaExact(o, run);
  for (int r = 0; r < o.world(); ++r) {
    const report::MemoryFormula f = report::PredictedMemory(o, r);
    ASSERT_GE(f.activations, 0) << "rank " << r;  // the formula has every category here
    EXPECT_GT(memory[size_t(r)].paused_peak_total(), 0) << "rank " << r << " evaluated and sampled";
  }
}

// A checkpoint of a 3D run resumes on one rank, and one rank's on a 3D grid.
TEST(ThreeDCheckpoints, ResumeAcrossGrids) {
  TrainOptions straight = Model(8);
  straight.training.steps = 6;
  RunResult reference = RunRanks(straight);
  const std::string path = ::testing::TempDir() + "/3d.safetensors";
  std::vector<float> losses;
  for (int zero : {1, 3}) {
    // ZeRO-3's checkpoint from the interleaved schedule's chunks.
    const parallel::PipelineSchedule schedule = zero == 3 ? kInterleaved : parallel::PipelineSchedule::k1F1B;
    TrainOptions first = On(Grid{.dp = 2, .tp = 2, .pp = 2, .zero = zero, .sequence_parallel = true,
                                 .schedule = schedule, .virtual_stages = zero == 3 ? 2 : 1},
                            8);
    first.training.steps = 6;
    TrainAndSave(first, 3, path);
    TrainOptions serial = Model(8);
    serial.training.steps = 6;
    serial.checkpoint.load = path;
    losses = Resume(serial);
    ASSERT_EQ(losses.size(), 3u) << "zero " << zero;
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << "zero " << zero;
    }
  }

  const std::string serial_path = ::testing::TempDir() + "/3d_serial.safetensors";
  TrainOptions one = Model(8);
  one.training.steps = 6;
  TrainAndSave(one, 3, serial_path);
  for (const Grid& g : Sweep<Grid>({Grid{.tp = 2, .pp = 2, .schedule = kGPipe},
                                    Grid{.dp = 2, .pp = 2, .zero = 2, .schedule = kGPipe},
                                    Grid{.dp = 2, .pp = 2, .zero = 1, .schedule = kInterleaved,
                                         .virtual_stages = 2}})) {
    TrainOptions grid = On(g, 8);
    grid.training.steps = 6;
    grid.checkpoint.load = serial_path;
    losses = Resume(grid);
    ASSERT_EQ(losses.size(), 3u) << "zero " << g.zero;
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << "zero " << g.zero;
    }
  }
}

TEST(ThreeDOptions, BadGridsAreClearErrors) {
  TrainOptions o = On(Grid{.tp = 3}, 8);  // 4 heads
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--n_head=4 must be divisible by --tp=3"));
  // Trainer::Create on a world that is not dp x tp x pp.
  o = On(Grid{.dp = 2, .tp = 2}, 8);
  comm::LaunchOptions launch;
  launch.world_size = 2;
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) {
    return Trainer::Create(o, &world).status();
  });
  EXPECT_TRUE(absl::StrContains(status.message(), "2 ranks cannot run --dp=2 x --tp=2 x --pp=1")) << status;
}

}  // namespace
}  // namespace tally::train
