// A mixture-of-experts GPT trains as the dense one does; with data parallelism, ZeRO and
// pipelines (each rank running whole experts on its own tokens) and with expert
// parallelism (experts over ranks, tokens by all-to-all) it equals its serial run, every
// report row and memory formula exact, the all-to-alls' bytes those of the routing
// counts; checkpoints name the router and each expert's tensors and resume across grids;
// the step reports the auxiliary loss, the drops and the experts' load.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "core/model/checkpoint.h"
#include "core/parallel/expert_parallel.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/safetensors.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// TinyGrid's model with 4 experts, top 2, a capacity that drops some choices.
TrainOptions Moe(int global_batch) {
  TrainOptions o = TinyGrid(global_batch);
  o.model.n_experts = 4;
  o.model.moe_top_k = 2;
  o.model.capacity_factor = 1.0;
  return o;
}

TEST(Moe, TheSerialRunTrainsAsTheDenseOneDoes) {
  TrainOptions moe = Moe(8), dense = TinyGrid(8);
  moe.training.steps = dense.training.steps = 30;
  moe.training.optimizer = dense.training.optimizer = OptimizerKind::kAdamW;
  const RunResult m = RunRanks(moe), d = RunRanks(dense);
  ASSERT_EQ(m.losses.size(), 30u);
  // Both fall well below the start (ln 256 = 5.55), and end within a tenth of each other.
  EXPECT_LT(m.losses.back(), m.losses.front() - 1.5);
  EXPECT_LT(d.losses.back(), d.losses.front() - 1.5);
  EXPECT_NEAR(m.losses.back(), d.losses.back(), 0.1 * d.losses.back());
}

class MoeGridTest : public ::testing::TestWithParam<Grid> {};

TEST_P(MoeGridTest, MatchesTheSerialMoeRunAndEveryFormula) {
  const Grid& g = GetParam();
  const int global_batch = 4 * g.dp;
  TrainOptions o = g.On(Moe(global_batch));
  o.parallel.bucket_mb = 20000.0 / (1 << 20);  // several gradient buckets
  ExpectGridMatchesSerial(o, Moe(global_batch));
}

INSTANTIATE_TEST_SUITE_P(Grids, MoeGridTest,
                         ::testing::ValuesIn(Sweep<Grid>(
                             {Grid{.dp = 2}, Grid{.dp = 2, .zero = 1}, Grid{.dp = 2, .zero = 3},
                              Grid{.pp = 2}, Grid{.dp = 2, .pp = 2, .zero = 2}, Grid{.tp = 2},
                              Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1},
                              Grid{.pp = 2,
                                   .schedule = parallel::PipelineSchedule::kInterleaved,
                                   .virtual_stages = 2,
                                   .recompute = true}})),
                         GridName);

// Expert parallelism: ep of the dp ranks share each layer's experts; ZeRO shards the
// experts over the edp group and the rest over the dp group.
struct EpGrid {
  int dp, ep, pp;
  bool recompute = false;
  int tp = 1;
  int zero = 0;
};

class ExpertParallelTest : public ::testing::TestWithParam<EpGrid> {};

TEST_P(ExpertParallelTest, MatchesTheSerialMoeRunWithTheRoutingCountsBytes) {
  const EpGrid g = GetParam();
  const int global_batch = 4 * g.dp;
  TrainOptions o =
      Grid{.dp = g.dp, .tp = g.tp, .pp = g.pp, .zero = g.zero, .recompute = g.recompute}.On(
          Moe(global_batch));
  o.parallel.ep = g.ep;
  o.model.n_experts = 4;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  ExpectGridMatchesSerial(o, Moe(global_batch));
  // Each rank's all-to-alls sent what its routing counts say, to the byte.
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  std::vector<int64_t> sent(size_t(o.world())), recv(size_t(o.world()));
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, &world));
    world.ledger().Clear();
    for (int64_t k = 0; k < o.training.steps; ++k) RETURN_IF_ERROR(trainer->TrainStep(k).status());
    auto ep = [&](comm::Primitive p, comm::Phase phase) {
      return world.ledger().Sum([&](const comm::LedgerKey& key) {
        return key.group == "ep" && key.primitive == p && key.phase == phase;
      });
    };
    // What the routing counts said each all-to-all-v sends (the ledger keeps the sizes
    // each call was given), and the counts' own all-to-alls by their list
    // (core/parallel/expert_parallel.h's RoutingCountCalls).
    auto expected = [&](comm::Phase phase) {
      int64_t bytes = 0;
      for (const auto& [key, b] : world.ledger().expected()) {
        if (key.group == "ep" && key.primitive == comm::Primitive::kAllToAllV &&
            key.phase == phase) {
          bytes += b;
        }
      }
      return bytes;
    };
    std::vector<int> layers;
    for (const model::LayerRange& range : trainer->model().layout().model_chunks()) {
      for (int l = range.begin; l < range.end; ++l) layers.push_back(l);
    }
    comm::ExpectedCalls counts =
        parallel::RoutingCountCalls({.ranks = g.ep,
                                     .rank = o.topology().Of(world.rank()).dp % g.ep,
                                     .layers = layers,
                                     .n_experts = o.model.n_experts,
                                     .micro_batches = o.accumulation_steps()});
    const int64_t counts_sent = o.training.steps * comm::TotalSent(counts, comm::Algorithm::kRing);
    EXPECT_EQ(ep(comm::Primitive::kAllToAll, comm::Phase::kForward).bytes_sent, counts_sent);
    EXPECT_EQ(ep(comm::Primitive::kAllToAllV, comm::Phase::kForward).bytes_sent,
              expected(comm::Phase::kForward));
    // A pipeline's recomputed forward routes and sends again, in the backward phase.
    EXPECT_EQ(ep(comm::Primitive::kAllToAllV, comm::Phase::kBackward).bytes_sent,
              expected(comm::Phase::kBackward));
    EXPECT_EQ(ep(comm::Primitive::kAllToAll, comm::Phase::kBackward).bytes_sent,
              g.recompute ? counts_sent : 0);
    EXPECT_GT(expected(comm::Phase::kForward), 0);
    // Backward sends both ways in fp32, forward the rows in the operand type.
    EXPECT_GE(expected(comm::Phase::kBackward), expected(comm::Phase::kForward));
    if (g.zero > 0 && g.dp > g.ep) {  // the experts' shards are reduced over the edp group
      EXPECT_GT(world.ledger().Sum([](const comm::LedgerKey& key) {
        return key.group == "edp" && key.primitive == comm::Primitive::kReduceScatter;
      }).bytes_sent, 0);
    }
    const comm::TransferTotals all = world.ledger().Sum([](const comm::LedgerKey& key) {
      return key.group == "ep" && key.primitive == comm::Primitive::kAllToAllV;
    });
    sent[size_t(world.rank())] = all.bytes_sent;
    recv[size_t(world.rank())] = all.bytes_recv;
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  int64_t sent_all = 0, recv_all = 0;
  for (int r = 0; r < o.world(); ++r) sent_all += sent[size_t(r)], recv_all += recv[size_t(r)];
  EXPECT_EQ(sent_all, recv_all);
}

INSTANTIATE_TEST_SUITE_P(
    Grids, ExpertParallelTest,
    ::testing::ValuesIn(Sweep<EpGrid>(
        {EpGrid{2, 2, 1}, EpGrid{4, 2, 1}, EpGrid{4, 4, 1}, EpGrid{2, 2, 2}, EpGrid{2, 2, 2, true},
         EpGrid{2, 2, 1, false, 2}, EpGrid{4, 2, 1, false, 1, 1}, EpGrid{2, 2, 1, false, 1, 1},
         EpGrid{4, 2, 1, false, 1, 2}, EpGrid{4, 2, 1, false, 1, 3}, EpGrid{2, 2, 2, false, 1, 2},
         EpGrid{4, 2, 1, false, 2, 3}})),
    [](const ::testing::TestParamInfo<EpGrid>& grid) {
      return "dp" + std::to_string(grid.param.dp) + "_ep" + std::to_string(grid.param.ep) + "_pp" +
             std::to_string(grid.param.pp) + "_tp" + std::to_string(grid.param.tp) +
             (grid.param.zero > 0 ? "_zero" + std::to_string(grid.param.zero) : "") +
             (grid.param.recompute ? "_recompute" : "");
    });

// Steps 4..6 resumed from a step-3 checkpoint: the uninterrupted run's.
void ExpectResumedSteps(const std::vector<float>& resumed, const std::vector<float>& reference) {
  ASSERT_EQ(resumed.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(resumed[k], reference[3 + k], 1e-5 * reference[3 + k]);
}

TEST(MoeCheckpoints, NameEveryExpertAndResumeAcrossGrids) {
  TrainOptions straight = Moe(8);
  straight.training.steps = 6;
  const RunResult reference = RunRanks(straight);
  const std::string path = ::testing::TempDir() + "/moe.safetensors";
  TrainOptions first = Grid{.dp = 2, .zero = 3}.On(Moe(8));
  first.training.steps = 6;
  TrainAndSave(first, 3, path);
  SafetensorsFile file = ReadSafetensors(path, int64_t(1) << 30).value();
  for (const char* name : {"h.0.mlp.router.weight", "h.3.mlp.experts.0.c_fc.weight",
                           "h.3.mlp.experts.3.c_proj.bias",
                           "optimizer.momentum_buffer.h.1.mlp.experts.2.c_fc.bias"}) {
    EXPECT_TRUE(file.tensors.count(name)) << name;
  }
  EXPECT_FALSE(file.tensors.count("h.0.mlp.c_fc.weight"));
  EXPECT_EQ(file.metadata["n_experts"], "4");
  TrainOptions serial = Moe(8);
  serial.training.steps = 6;
  serial.checkpoint.load = path;
  ExpectResumedSteps(Resume(serial), reference.losses);
  // Saved by expert-parallel ranks, each holding half the experts, resumed on one; and
  // the serial run's checkpoint resumed with the experts split.
  TrainOptions split = Grid{.dp = 2}.On(Moe(8));
  split.parallel.ep = 2;
  split.training.steps = 6;
  TrainAndSave(split, 3, path);
  ExpectResumedSteps(Resume(serial), reference.losses);
  // ZeRO-3 with the experts sharded over the edp groups, resumed on one rank.
  TrainOptions sharded = Grid{.dp = 4, .zero = 3}.On(Moe(8));
  sharded.parallel.ep = 2;
  sharded.training.steps = 6;
  TrainAndSave(sharded, 3, path);
  ExpectResumedSteps(Resume(serial), reference.losses);
  TrainAndSave(straight, 3, path);
  sharded.checkpoint.load = path;
  ExpectResumedSteps(Resume(sharded), reference.losses);
  split.checkpoint.load = path;
  ExpectResumedSteps(Resume(split), reference.losses);
  // Neither a dense model's flags nor another top-k load it.
  TrainOptions dense = TinyGrid(8);
  dense.training.steps = 6;
  dense.checkpoint.load = path;
  EXPECT_TRUE(absl::StrContains(Trainer::Create(dense).status().message(), "[checkpoint]"))
      << Trainer::Create(dense).status();
  serial.model.moe_top_k = 1;
  EXPECT_TRUE(absl::StrContains(Trainer::Create(serial).status().message(),
                                "was saved with moe_top_k=2; the flags ask for --moe_top_k=1"))
      << Trainer::Create(serial).status();
}

TEST(MoeStep, ReportsTheAuxiliaryLossDropsAndLoad) {
  TrainOptions o = Moe(8);
  std::unique_ptr<Trainer> t = Trainer::Create(o).value();
  const StepStats s = t->TrainStep(0).value();
  // Four layers near balance: each about coef·E·(1/E) = coef.
  EXPECT_GT(s.aux_loss, 0.5 * 4 * o.model.aux_loss_coef);
  EXPECT_LT(s.aux_loss, 2.0 * 4 * o.model.aux_loss_coef);
  EXPECT_GT(s.dropped, 0.0);
  EXPECT_LT(s.dropped, 0.5);
  // 8 sequences of 16 tokens, 2 choices each, through 4 layers: the kept ones.
  const double choices = 8.0 * 16 * 2 * 4;
  EXPECT_NEAR(s.expert_tokens_mean * 4, choices * (1 - s.dropped), 1e-6);
  EXPECT_LE(s.expert_tokens_min, s.expert_tokens_mean);
  EXPECT_GE(s.expert_tokens_max, s.expert_tokens_mean);
  o.parallel.tp = 2;
  o.parallel.sequence_parallel = true;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--n_experts with --sequence_parallel"));
  o = Moe(8);
  o.model.moe_top_k = 5;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "moe_top_k must be in [1, n_experts = 4]"));
}

// The report's routing table: each layer's tokens per expert are the serial run's (the
// same routing on every grid), add up to the kept choices, and under --ep the layer's
// dispatch column is the ledger's per rank.
TEST(MoeReport, RoutingTableShowsEachLayersLoadAndItsDispatchBytes) {
  const TrainOptions serial = Moe(8);
  std::unique_ptr<Trainer> one = Trainer::Create(serial).value();
  double kept = 0;
  for (int64_t k = 0; k < serial.training.steps; ++k) {
    const StepStats s = one->TrainStep(k).value();
    kept += (1 - s.dropped) * 8 * 16 * 2 * serial.model.n_layer;
  }
  const std::vector<double> want = one->expert_tokens();
  ASSERT_EQ(want.size(), size_t(serial.model.n_layer * 4));
  double sum = 0;
  for (double t : want) sum += t;
  EXPECT_NEAR(sum, kept, 1e-6 * kept);

  TrainOptions o = Grid{.dp = 4, .pp = 2}.On(Moe(8));
  o.parallel.ep = 2;
  std::vector<double> tokens;
  const RankLedgers run = RunSteps(o, [&](int rank, Trainer& trainer) {
    if (rank == 0) tokens = trainer.expert_tokens();
  });
  const std::vector<comm::TrafficLedger>& traffic = run.traffic;
  EXPECT_EQ(tokens, want);
  report::ReportInputs in{o, o.training.steps, run.traffic, run.memory};
  in.expert_tokens = tokens;
  const std::string table = RoutingTable(in);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), size_t(2 + o.model.n_layer)) << table;
  for (int l = 0; l < o.model.n_layer; ++l) {
    const std::vector<std::string> cells =
        absl::StrSplit(lines[size_t(2 + l)], ' ', absl::SkipEmpty());
    ASSERT_EQ(cells.size(), 7u) << lines[size_t(2 + l)];
    const auto first = want.begin() + l * 4;
    EXPECT_EQ(cells[1],
              absl::StrFormat("%.1f", *std::min_element(first, first + 4) / o.training.steps));
    EXPECT_EQ(cells[3],
              absl::StrFormat("%.1f", *std::max_element(first, first + 4) / o.training.steps));
    int64_t lo = -1, hi = 0;
    for (const comm::TrafficLedger& ledger : traffic) {
      const comm::TransferTotals t = ledger.Sum([&](const comm::LedgerKey& k) {
        return k.group == "ep" && k.phase == comm::Phase::kForward &&
               k.label == absl::StrCat("layer", l, ".dispatch");
      });
      if (t.messages_sent == 0) continue;
      hi = std::max(hi, t.bytes_sent / o.training.steps);
      lo = lo < 0 ? t.bytes_sent / o.training.steps : std::min(lo, t.bytes_sent / o.training.steps);
    }
    EXPECT_GT(hi, 0);
    EXPECT_EQ(cells[6], lo == hi ? absl::StrCat(hi) : absl::StrCat(lo, "..", hi)) << l;
  }
}

}  // namespace
}  // namespace tally::train
