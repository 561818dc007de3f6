// The planner's predicted step (PredictStep, analytic) against the replay of the same
// grid's dry run on the same cluster (the run's own timeline: its matmuls' FLOPs, its
// calls and their bytes): within 3% on two dozen grids of every axis, on nodes of 8 A100s.
// The two share the cluster's figures and the kernels' work formulas (work.h): the
// planner counts its stages' kernels from the grid, the replay plays every rank's counted
// calls forward.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/parallel/topology.h"
#include "lab/plan/plan.h"
#include "lab/report/replay.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {
namespace {

constexpr parallel::PipelineSchedule kInterleaved = parallel::PipelineSchedule::kInterleaved;

struct Case {
  train::Grid grid;
  int micro_batches = 1;  // per dp rank; micro-batches of 2 sequences
  bool overlap = false;
};

// An 8-layer GPT of hidden size 1024 at s = 1024 with a 32000-token vocabulary, in bf16.
PlanInput Planned(const Case& c, const train::ClusterPreset& a100) {
  model::GPTConfig config;
  config.n_layer = 8;
  config.n_head = 16;
  config.n_embd = 1024;
  config.seq_len = 1024;
  config.vocab_size = 32000;
  PlanInput in{GptShape(config)};
  in.seq_len = config.seq_len;
  in.dp = c.grid.dp;
  in.tp = c.grid.tp;
  in.pp = c.grid.pp;
  in.zero = c.grid.zero;
  in.micro_batches = c.micro_batches;
  in.batch = 2 * c.micro_batches;
  in.virtual_stages = c.grid.virtual_stages;
  in.sequence_parallel = c.grid.sequence_parallel;
  in.recompute = c.grid.recompute;
  in.recompute_layers = c.grid.recompute_layers;
  in.recompute_attention = c.grid.recompute_attention;
  in.pp_scatter_gather = c.grid.pp_scatter_gather;
  in.cp = c.grid.cp;
  in.cp_comm = c.grid.cp_comm;
  in.cp_load_balance = c.grid.cp_load_balance;
  in.overlap = c.overlap;
  in.precision = DType::kBF16;
  in.bytes_per_value = 2;
  in.gpus_per_node = a100.gpus_per_node;
  in.cluster = a100.links;
  in.gpu = a100.gpu;
  return in;
}

class PlanAgainstReplay : public ::testing::TestWithParam<Case> {};

TEST_P(PlanAgainstReplay, PredictedStepIsTheReplayedOneWithinThreePercent) {
  const train::ClusterPreset a100 = train::LoadCluster("a100").value();
  const PlanInput in = Planned(GetParam(), a100);
  train::TrainOptions o = PlanAsTrainOptions(in);
  o.dry_run = true;
  o.training.steps = 1;
  o.cluster.gpu = a100.gpu;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o = o.Resolved();
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  // The run's last step's timelines (train::Trainer::Run records them), replayed on the cluster.
  const std::vector<Timeline> timelines = LastStepTimelines(o);
  std::vector<const Timeline*> all;
  for (const Timeline& t : timelines) all.push_back(&t);
  // The planner's work is what the kernels counted: each rank's matmuls are its stage's,
  // call for call, and its memory-bound bytes within 1% (the optimizer's shard is the
  // planner's even share of the units).
  const std::vector<ComputeWork> stages = StageWork(in);
  const parallel::Topology grid = o.topology();
  for (size_t r = 0; r < timelines.size(); ++r) {
    ComputeWork counted;
    for (const TimelineEntry& e : timelines[r].entries()) counted += e.compute;
    const ComputeWork& stage = stages[size_t(grid.Of(int(r)).pp)];
    EXPECT_DOUBLE_EQ(stage.flops, counted.flops) << "rank " << r;
    ASSERT_EQ(stage.matmuls.size(), counted.matmuls.size()) << "rank " << r;
    for (size_t i = 0; i < stage.matmuls.size(); ++i) {
      EXPECT_EQ(stage.matmuls[i].flops, counted.matmuls[i].flops) << "rank " << r;
      EXPECT_EQ(stage.matmuls[i].bytes, counted.matmuls[i].bytes) << "rank " << r;
      EXPECT_EQ(stage.matmuls[i].calls, counted.matmuls[i].calls) << "rank " << r;
    }
    EXPECT_NEAR(stage.memory_bytes / counted.memory_bytes, 1.0, 0.01) << "rank " << r;
  }
  const absl::StatusOr<std::vector<report::ReplayedRank>> replayed =
      report::Replay(all, *o.PlacedNodes(), o.cluster.links, o.cluster.gpu);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  double step = 0;
  for (const report::ReplayedRank& rank : *replayed) step = std::max(step, rank.seconds);
  const StepTime planned = PredictStep(in);
  std::printf("  replayed %.4f ms, planned %.4f ms, ratio %.4f\n", step * 1e3, planned.step_s * 1e3,
              planned.step_s / step);
  EXPECT_NEAR(planned.step_s / step, 1.0, 0.03);
}

INSTANTIATE_TEST_SUITE_P(
    Grids, PlanAgainstReplay,
    ::testing::ValuesIn(Sweep<Case>(
        {Case{train::Grid{.dp = 8}}, Case{train::Grid{.dp = 8, .zero = 1}},
         Case{train::Grid{.dp = 8, .zero = 3}}, Case{train::Grid{.tp = 8}},
         Case{train::Grid{.tp = 4, .sequence_parallel = true}}, Case{train::Grid{.pp = 4}, 8},
         Case{train::Grid{.pp = 2, .recompute = true}, 8},
         Case{train::Grid{.dp = 2, .tp = 2, .pp = 2}, 4},
         Case{train::Grid{.dp = 4, .tp = 2, .zero = 2}},
         Case{train::Grid{.dp = 2, .pp = 4, .zero = 1}, 8},
         Case{train::Grid{.tp = 2, .pp = 2, .pp_scatter_gather = true}, 8},
         Case{train::Grid{.pp = 2, .schedule = kInterleaved, .virtual_stages = 2}, 8},
         Case{train::Grid{.dp = 16, .tp = 2}}, Case{train::Grid{.dp = 2, .tp = 8, .pp = 2}, 4},
         Case{train::Grid{.dp = 2, .tp = 2, .pp = 2, .recompute = true, .recompute_layers = true},
              4},
         Case{train::Grid{.dp = 4, .tp = 2, .recompute_attention = true}},
         // --overlap: DDP's buckets, ZeRO-2's and ZeRO-3's reduce-scatters and prefetches.
         Case{train::Grid{.dp = 8}, 1, true}, Case{train::Grid{.dp = 8, .zero = 2}, 2, true},
         Case{train::Grid{.dp = 8, .zero = 3}, 2, true},
         Case{train::Grid{.dp = 16, .tp = 2, .zero = 3}, 1, true},
         Case{train::Grid{.dp = 4, .tp = 2, .zero = 2, .recompute = true}, 2, true},
         // Context parallelism (zigzag: every cp rank the same blocks): the ring's K, V
         // sends behind its blocks, the collectives' passes whole.
         Case{train::Grid{.cp = 4}}, Case{train::Grid{.cp = 8}},
         Case{train::Grid{.cp = 4, .cp_comm = parallel::CpComm::kAllGather}},
         Case{train::Grid{.cp = 4, .cp_comm = parallel::CpComm::kAllToAll}},
         Case{train::Grid{.dp = 2, .tp = 2, .cp = 2}},
         // The ring across nodes (tp fills them): its sends outlast the blocks they hide behind.
         Case{train::Grid{.tp = 8, .sequence_parallel = true, .cp = 2}},
         Case{train::Grid{.tp = 4, .cp = 4, .cp_load_balance = parallel::CpLoadBalance::kZigzag}},
         Case{train::Grid{.pp = 2, .cp = 4}, 4}})),
    [](const ::testing::TestParamInfo<Case>& param) {
      return absl::StrCat(param.param.grid.Name(), "_m", param.param.micro_batches,
                          param.param.overlap ? "_overlap" : "");
    });

}  // namespace
}  // namespace tally::plan
