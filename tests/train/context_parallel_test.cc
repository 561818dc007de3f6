// Context parallelism in training: dp × cp × tp grids in every variant (p2p, allgather, a2a;
// zigzag and none) reproduce the single-rank run (losses, final parameters), every report
// row with a formula measures exactly it (the cp rows by ContextParallelCalls), and every
// rank's memory equals the formula, its activations included; ZeRO shards over dp·cp;
// evaluation and sampling under cp give the single-rank run's validation loss and sample;
// checkpoints move between cp grids and one rank; what cp does not run with yet says so.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

constexpr parallel::CpComm kP2p = parallel::CpComm::kP2p;
constexpr parallel::CpComm kAllGather = parallel::CpComm::kAllGather;
constexpr parallel::CpComm kAllToAll = parallel::CpComm::kAllToAll;
constexpr parallel::CpLoadBalance kNone = parallel::CpLoadBalance::kNone;
constexpr parallel::PipelineSchedule kGPipe = parallel::PipelineSchedule::kGPipe;
constexpr parallel::PipelineSchedule kInterleaved = parallel::PipelineSchedule::kInterleaved;

class ContextParallelTrainTest : public ::testing::TestWithParam<Grid> {};

TEST_P(ContextParallelTrainTest, MatchesTheSingleRankRunAndEveryFormula) {
  const Grid& g = GetParam();
  const int global_batch = 2 * g.dp;
  ExpectGridMatchesSerial(g.On(TinyGrid(global_batch)), TinyGrid(global_batch));
}

INSTANTIATE_TEST_SUITE_P(
    Grids, ContextParallelTrainTest,
    ::testing::ValuesIn(Sweep<Grid>(
        {Grid{.cp = 2}, Grid{.cp = 4}, Grid{.cp = 2, .cp_load_balance = kNone},
         Grid{.cp = 4, .cp_comm = kAllGather},
         Grid{.cp = 2, .cp_comm = kAllGather, .cp_load_balance = kNone},
         Grid{.cp = 2, .cp_comm = kAllToAll},
         Grid{.cp = 4, .cp_comm = kAllToAll, .cp_load_balance = kNone}, Grid{.dp = 2, .cp = 2},
         Grid{.dp = 2, .micro_batches = 2, .cp = 2, .cp_comm = kAllGather},
         Grid{.tp = 2, .sequence_parallel = true, .cp = 2},
         // ZeRO shards over the dp·cp ranks of the dp group.
         Grid{.zero = 1, .cp = 2}, Grid{.dp = 2, .zero = 2, .cp = 2},
         Grid{.zero = 3, .cp = 4, .cp_comm = kAllGather},
         Grid{.dp = 2, .tp = 2, .zero = 3, .cp = 2, .cp_comm = kAllToAll},
         Grid{.dp = 2, .tp = 2, .cp = 2, .cp_comm = kAllToAll},
         // Every pipeline schedule: the boundaries carry the rank's positions.
         Grid{.pp = 2, .schedule = kGPipe, .cp = 2},
         Grid{.dp = 2, .pp = 2, .zero = 1, .cp = 2, .cp_comm = kAllGather},
         Grid{.tp = 2, .pp = 2, .sequence_parallel = true, .cp = 2, .cp_comm = kAllToAll},
         Grid{.pp = 2,
              .schedule = kInterleaved,
              .virtual_stages = 2,
              .micro_batches = 2,
              .cp = 2,
              .cp_load_balance = kNone},
         // Full recompute: a stage's forward, or each layer's, again in backward, its
         // attention (and the cp calls) with it.
         Grid{.pp = 2, .recompute = true, .cp = 2},
         Grid{.recompute = true, .cp = 2, .cp_comm = kAllGather},
         Grid{.pp = 2, .recompute = true, .recompute_layers = true, .cp = 2, .cp_comm = kAllToAll},
         Grid{.dp = 2,
              .tp = 2,
              .pp = 2,
              .sequence_parallel = true,
              .recompute = true,
              .cp = 2,
              .cp_load_balance = kNone}})),
    GridName);

// Experts: each cp rank routes its own rows, and the router's balance statistics are summed
// over cp (one all-reduce of 2E values a layer), so that the aux loss and every router
// gradient are the serial run's; ep takes its ranks from the dp group's dp·cp (over the cp
// ranks alone when dp = 1). Capacity unlimited: a limit ranks a micro-batch's tokens.
TEST(ContextParallelTrain, ExpertsMatchTheSingleRankRunAndEveryFormula) {
  struct Case {
    Grid grid;
    int ep = 1;
  };
  for (const Case& c : Sweep<Case>(
           {Case{Grid{.cp = 2}}, Case{Grid{.cp = 2, .cp_comm = kAllGather}, 2},
            Case{Grid{.dp = 2, .zero = 1, .cp = 2, .cp_comm = kAllToAll}, 2},
            Case{Grid{.dp = 2, .zero = 3, .cp = 2, .cp_load_balance = kNone}, 4},
            Case{Grid{.pp = 2, .recompute = true, .cp = 2}, 2}, Case{Grid{.tp = 2, .cp = 2}, 2}})) {
    SCOPED_TRACE(c.grid.Name() + " ep " + std::to_string(c.ep));
    TrainOptions moe = TinyGrid(2 * c.grid.dp);
    moe.model.n_experts = 4;
    moe.model.moe_top_k = 2;
    TrainOptions o = c.grid.On(moe);
    o.parallel.ep = c.ep;
    ExpectGridMatchesSerial(o, moe);
  }
}

// --overlap: the dp·cp group's buckets (DDP) and ZeRO-2's unit reduce-scatters posted while
// backward goes on, with the ring's sends in flight beside them.
TEST(ContextParallelTrain, OverlapMatchesTheSingleRankRunAndEveryFormula) {
  for (const Grid& g :
       {Grid{.dp = 2, .cp = 2}, Grid{.dp = 2, .zero = 2, .cp = 2, .cp_comm = kAllGather}}) {
    TrainOptions o = g.On(TinyGrid(2 * g.dp));
    o.parallel.overlap = true;
    o.parallel.bucket_mb = 20000.0 / (1 << 20);  // several buckets
    ExpectGridMatchesSerial(o, TinyGrid(2 * g.dp));
  }
}

// Evaluation and sampling through the cp group: the single-rank run's validation loss and
// sample (the rank holding the window's last position picks the byte).
TEST(ContextParallelTrain, EvaluationAndSamplingMatchTheSingleRankRun) {
  for (parallel::CpComm comm : {kP2p, kAllGather, kAllToAll}) {
    const TrainOptions o = Grid{.cp = 2, .cp_comm = comm}.On(TinyGrid(2)).Resolved();
    auto evaluate = [](const TrainOptions& run) {
      std::pair<float, std::string> out;
      comm::LaunchOptions launch;
      launch.world_size = run.world();
      const absl::Status status =
          comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
            ASSIGN_OR_RETURN(auto trainer,
                             Trainer::Create(run, run.world() > 1 ? &world : nullptr));
            RETURN_IF_ERROR(trainer->TrainStep(0).status());
            ASSIGN_OR_RETURN(const float loss, trainer->Evaluate());
            ASSIGN_OR_RETURN(const std::string text, trainer->Sample(12));
            if (world.rank() == 0) out = {loss, text};
            return absl::OkStatus();
          });
      EXPECT_TRUE(status.ok()) << status;
      return out;
    };
    const auto [cp_loss, cp_text] = evaluate(o);
    const auto [loss, text] = evaluate(TinyGrid(2).Resolved());
    EXPECT_NEAR(cp_loss, loss, 1e-5 * loss) << parallel::Name(comm);
    EXPECT_EQ(cp_text, text) << parallel::Name(comm);
    EXPECT_EQ(cp_text.size(), 12u);
  }
}

// A cp grid's checkpoint (replicas, and ZeRO's shards over dp·cp) resumes on one rank,
// and one rank's on a cp grid, where the single-rank run would have gone.
TEST(ContextParallelTrain, CheckpointsResumeAcrossGrids) {
  TrainOptions straight = TinyGrid(4);
  straight.training.steps = 6;
  const RunResult reference = RunRanks(straight);
  auto expect_reference = [&](const std::vector<float>& losses, const std::string& what) {
    ASSERT_EQ(losses.size(), 3u) << what;
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << what;
    }
  };
  const std::string path = ::testing::TempDir() + "/cp.safetensors";
  for (const Grid& g :
       {Grid{.dp = 2, .cp = 2}, Grid{.dp = 2, .zero = 3, .cp = 2, .cp_comm = kAllToAll}}) {
    TrainOptions first = g.On(TinyGrid(4));
    first.training.steps = 6;
    TrainAndSave(first, 3, path);
    TrainOptions serial = TinyGrid(4);
    serial.training.steps = 6;
    serial.checkpoint.load = path;
    expect_reference(Resume(serial), "from " + g.Name());
  }
  TrainOptions one = TinyGrid(4);
  one.training.steps = 6;
  TrainAndSave(one, 3, path);
  TrainOptions grid = Grid{.dp = 2, .zero = 1, .cp = 2, .cp_load_balance = kNone}.On(TinyGrid(4));
  grid.training.steps = 6;
  grid.checkpoint.load = path;
  expect_reference(Resume(grid), "onto a cp grid");
}

TEST(ContextParallelTrain, WhatItDoesNotRunWithYetSaysSo) {
  auto message = [](TrainOptions o) { return std::string(o.Resolved().Validate().message()); };
  const TrainOptions cp2 = Grid{.cp = 2}.On(TinyGrid(2));
  EXPECT_EQ(message(Grid{.cp = 0}.On(TinyGrid(2))), "[flags] --cp must be >= 1, got 0");
  TrainOptions o = cp2;
  o.model.seq_len = 18;  // 4 zigzag chunks of 16 do not fit 18
  EXPECT_EQ(message(o),
            "[flags] --cp=2 with --cp_load_balance=zigzag cuts each sequence into 4 pieces: "
            "seq_len 18 is not divisible by 4");
  o = Grid{.cp = 4, .cp_comm = kAllToAll}.On(TinyGrid(2));
  o.model.n_head = 2;
  o.model.n_embd = 16;
  EXPECT_EQ(message(o),
            "[flags] --cp_comm=a2a splits each tp rank's 2 heads over --cp=4: n_head/tp must be "
            "divisible by cp");
  o = cp2;
  o.model.n_experts = 4;
  o.model.capacity_factor = 1.25;
  EXPECT_EQ(message(o),
            "[flags] --capacity_factor=1.25 with --cp=2: an expert's capacity ranks every token "
            "of a micro-batch, and cp splits them over ranks; use --capacity_factor=0 (no limit)");
  o.model.capacity_factor = 0;
  o.parallel.dp = 2;
  o.parallel.ep = 3;
  o.model.n_experts = 6;
  EXPECT_EQ(message(o),
            "[flags] --ep=3 must divide --dp x --cp = 4 (expert-parallel ranks are carved out of "
            "the dp group's dp·cp ranks)");
  o = Grid{.recompute_attention = true, .cp = 2}.On(TinyGrid(2));
  EXPECT_EQ(message(o),
            "[flags] --recompute_granularity=selective makes attention's probabilities again in "
            "backward, and --cp=2's attention keeps none (each query's log-sum-exp only): "
            "nothing to make again; use full recompute or none");
}

}  // namespace
}  // namespace tally::train
