// HSDP (--zero_shard=node), ZeRO++'s hpZ (--zero_hpz) and ZeRO-3 without resharding after
// forward: the same training as the serial run, every row's bytes and every model-state
// peak as their formulas say, and only what each keeps across nodes crossing them.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/parallel/zero/sharding.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// TinyDataParallel's model on one rank (a grid sets dp).
TrainOptions Tiny() { return TinyDataParallel(1); }

struct HsdpGrid {
  int nodes = 1, per_node = 2, zero = 1;
  int tp = 1, pp = 1;  // tp divides the 2 heads; pp: a layer a stage
  bool bf16 = false, overlap = false, reshard = true;
  bool hpz = false;  // ZeRO-3 over the whole dp group with hpZ, instead of HSDP
  comm::Algorithm allreduce = comm::Algorithm::kRing;

  TrainOptions On(TrainOptions o) const {
    o.parallel.dp = nodes * per_node;
    o.parallel.tp = tp;
    o.parallel.pp = pp;
    o.parallel.zero = zero;
    o.parallel.zero_shard = hpz ? parallel::ZeroShard::kDp : parallel::ZeroShard::kNode;
    o.parallel.zero_hpz = hpz;
    o.parallel.zero3_reshard_after_forward = reshard;
    o.parallel.overlap = overlap;
    o.parallel.allreduce = allreduce;
    if (pp > 1) o.model.n_layer = pp;
    if (bf16) o.precision.dtype = DType::kBF16;
    // pp is the slowest axis: a node holds per_node dp ranks of each of its tp ranks.
    o.placement.gpus_per_node = per_node * tp;
    return o;
  }
};

std::string Name(const ::testing::TestParamInfo<HsdpGrid>& info) {
  const HsdpGrid& g = info.param;
  return absl::StrCat("zero", g.zero, "_nodes", g.nodes, "x", g.per_node, g.tp > 1 ? "_tp2" : "",
                      g.pp > 1 ? "_pp2" : "", g.bf16 ? "_bf16" : "", g.overlap ? "_overlap" : "",
                      g.reshard ? "" : "_keep", g.hpz ? "_hpz" : "",
                      g.allreduce == comm::Algorithm::kHierarchical ? "_hier" : "");
}

class HsdpTest : public ::testing::TestWithParam<HsdpGrid> {};

TEST_P(HsdpTest, MatchesTheSerialRunAndOnlyTheReplicasCrossNodes) {
  const HsdpGrid& g = GetParam();
  const TrainOptions o = g.On(Tiny());
  TrainOptions serial = Tiny();
  serial.model = o.model;
  serial.precision = o.precision;
  const RunResult run = RunRanks(o);
  if (kCompareWithSerial && g.bf16) {
    // bf16 rounds each node's sum before the replicas add them: the loss within
    // mixed_precision_test.cc's 2·L·u of the serial run's (u = 2^-8).
    const RunResult alone = RunRanks(serial);
    ASSERT_EQ(run.losses.size(), alone.losses.size());
    for (size_t k = 0; k < run.losses.size(); ++k) {
      EXPECT_NEAR(run.losses[k], alone.losses[k],
                  2.0 * o.model.n_layer / 256 * std::abs(alone.losses[k]))
          << "step " << k;
    }
  } else if (kCompareWithSerial) {
    ExpectSameRun(run, RunRanks(serial));
  }
  ExpectReportRowsExact(o, run);
  ExpectMemoryFormulaExact(o, run);

  // Across nodes: the replicas' all-reduce of the shard, and nothing else of ZeRO's.
  const comm::Nodes nodes = *o.PlacedNodes();
  const model::ParameterLayout layout = o.RankLayout(0);
  const int64_t element = g.bf16 ? 2 : 4;
  for (int r = 0; r < o.world(); ++r) {
    const comm::LinkBytes shard = run.traffic[r].SentByLink(nodes, [](const comm::LedgerKey& k) {
      return k.group == comm::group::kDpShard;
    });
    EXPECT_EQ(shard.inter, 0) << "rank " << r;
    EXPECT_GT(shard.intra, 0) << "rank " << r;
    if (g.hpz) {  // backward's gathers are the node's; nothing is gathered across in backward
      EXPECT_EQ(run.traffic[r].Sum([](const comm::LedgerKey& k) {
        return k.group == comm::group::kDp && k.primitive == comm::Primitive::kAllGather &&
               k.phase == comm::Phase::kBackward;
      }).bytes_sent, 0) << "rank " << r;
      continue;
    }
    const comm::LinkBytes replicas = run.traffic[r].SentByLink(
        nodes, [](const comm::LedgerKey& k) { return k.group == comm::group::kDpReplicate; });
    EXPECT_EQ(replicas.intra, 0) << "rank " << r;
    if (g.nodes == 1 || g.tp > 1 || g.pp > 1 || g.allreduce != comm::Algorithm::kRing) continue;
    // The ring's 2(r-1)/r of the shard a step, where r nodes' shards of Φ/s add up to Φ.
    const int64_t shard_values =
        parallel::Sharding(parallel::ZeroUnits(layout, g.zero), g.per_node, r % g.per_node).size();
    EXPECT_EQ(replicas.inter,
              o.training.steps *
                  comm::ExactTraffic(comm::Primitive::kAllReduce, comm::Algorithm::kRing, g.nodes,
                                     r / g.per_node, 0, shard_values, size_t(element))
                      .sent)
        << "rank " << r;
    EXPECT_NEAR(double(replicas.inter) / double(o.training.steps),
                2.0 * (g.nodes - 1) / g.nodes * double(layout.total()) / g.per_node * element,
                2.0 * element * g.nodes);
  }
}

std::vector<HsdpGrid> HsdpGrids() {
  std::vector<HsdpGrid> grids;
  // Nodes 1-4 of 2-4 ranks, every stage, where dp divides the 12 sequences.
  for (int zero : {1, 2, 3}) {
    for (auto [nodes, per_node] : {std::pair{1, 2}, {2, 2}, {2, 3}, {3, 2}, {1, 4}, {3, 4}, {4, 3}}) {
      grids.push_back({.nodes = nodes, .per_node = per_node, .zero = zero});
    }
  }
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .reshard = false});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 2, .bf16 = true});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .overlap = true});
  grids.push_back(
      {.nodes = 2, .per_node = 2, .zero = 2, .allreduce = comm::Algorithm::kHierarchical});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 1, .tp = 2});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .pp = 2});
  for (auto [nodes, per_node] : {std::pair{2, 2}, {3, 2}, {2, 3}, {4, 3}}) {
    grids.push_back({.nodes = nodes, .per_node = per_node, .zero = 3, .hpz = true});
  }
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .overlap = true, .hpz = true});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .pp = 2, .hpz = true});
  grids.push_back({.nodes = 2, .per_node = 2, .zero = 3, .bf16 = true, .hpz = true});
  grids.push_back({.nodes = 2, .per_node = 3, .zero = 3, .bf16 = true, .overlap = true,
                   .reshard = false});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(NodesAndStages, HsdpTest, ::testing::ValuesIn(Sweep(HsdpGrids())), Name);

// Without resharding after forward, ZeRO-3's backward gathers nothing: the forward's
// gathers once a micro-batch are all, and every unit is held when forward ends.
TEST(ZeroReshard, KeepingTheUnitsSavesTheBackwardsGathers) {
  TrainOptions o = Tiny();
  o.parallel.dp = 3;
  o.parallel.zero = 3;  // 4 micro-batches a rank
  const RunResult resharded = RunRanks(o);
  o.parallel.zero3_reshard_after_forward = false;
  const RunResult kept = RunRanks(o);
  EXPECT_EQ(kept.losses, resharded.losses);
  EXPECT_EQ(kept.params, resharded.params);
  ExpectReportRowsExact(o, kept);
  ExpectMemoryFormulaExact(o, kept);
  const model::ParameterLayout layout = o.RankLayout(0);
  for (int r = 0; r < 3; ++r) {
    auto gathered = [&](const RunResult& run, comm::Phase phase) {
      return run.traffic[r].Sum([&](const comm::LedgerKey& k) {
        return k.primitive == comm::Primitive::kAllGather && k.phase == phase;
      }).bytes_sent;
    };
    EXPECT_EQ(gathered(kept, comm::Phase::kBackward), 0) << "rank " << r;
    EXPECT_GT(gathered(resharded, comm::Phase::kBackward), 0) << "rank " << r;
    EXPECT_EQ(gathered(kept, comm::Phase::kForward), gathered(resharded, comm::Phase::kForward));
    const int64_t shard = parallel::Sharding(parallel::ZeroUnits(layout, 3), 3, r).size();
    EXPECT_EQ(kept.memory[r].peak(MemoryCategory::kParams), 4 * (shard + layout.total()));
  }
}

// A checkpoint is whole: saved from HSDP (ZeRO-3 on 2 nodes of 2) and resumed under plain
// ZeRO-1 on 3 ranks, or the reverse, the run goes on as the uninterrupted one.
TEST(HsdpCheckpoints, LoadUnderAnotherLayout) {
  TrainOptions straight = Tiny();
  straight.training.steps = 6;
  const RunResult reference = RunRanks(straight);
  TrainOptions hsdp = HsdpGrid{.nodes = 2, .per_node = 2, .zero = 3}.On(straight);
  TrainOptions plain = straight;
  plain.parallel.dp = 3;
  plain.parallel.zero = 1;
  for (auto [from, to] : {std::pair{hsdp, plain}, std::pair{plain, hsdp}}) {
    SCOPED_TRACE(absl::StrCat("from dp ", from.parallel.dp, " to dp ", to.parallel.dp));
    const std::string path =
        ::testing::TempDir() + absl::StrCat("/hsdp_from_dp", from.parallel.dp, ".safetensors");
    TrainAndSave(from, 3, path);
    to.checkpoint.load = path;
    const std::vector<float> losses = Resume(to);
    ASSERT_EQ(losses.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << k;
    }
  }
}

TEST(HsdpOptions, BadValuesAreClearErrors) {
  auto message = [](const TrainOptions& o) { return std::string(o.Validate().message()); };
  TrainOptions o = HsdpGrid{.nodes = 2, .per_node = 2}.On(Tiny());
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  TrainOptions bad = o;
  bad.parallel.zero = 0;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_shard=node shards ZeRO's state")) << message(bad);
  bad = o;
  bad.placement.gpus_per_node = 0;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_shard=node needs --gpus_per_node"));
  bad = o;
  bad.placement.gpus_per_node = 3;  // 3 of dp 4 on node 0, 1 on node 1
  EXPECT_TRUE(absl::StrContains(message(bad), "has 3 on node 0 but 1 on node 1")) << message(bad);
  bad = o;
  bad.model.n_experts = 4;
  bad.parallel.ep = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "with --ep=2 is not supported")) << message(bad);
  bad = Tiny();
  bad.parallel.dp = 2;
  bad.parallel.zero = 2;
  bad.parallel.zero3_reshard_after_forward = false;
  EXPECT_TRUE(absl::StrContains(message(bad), "needs --zero=3, got --zero=2")) << message(bad);
  bad.parallel.zero = 3;
  bad.parallel.pp = 2;
  bad.model.n_layer = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "runs with --pp=1 only")) << message(bad);
  bad = HsdpGrid{.nodes = 2, .per_node = 2, .zero = 3, .hpz = true}.On(Tiny());
  ASSERT_TRUE(bad.Validate().ok()) << bad.Validate();
  bad.parallel.zero = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_hpz keeps ZeRO-3's secondary copy")) << message(bad);
  bad.parallel.zero = 3;
  bad.placement.gpus_per_node = 0;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_hpz needs --gpus_per_node")) << message(bad);
  bad.placement.gpus_per_node = 2;
  bad.parallel.zero_shard = parallel::ZeroShard::kNode;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_hpz with --zero_shard=node")) << message(bad);
  const TrainOptions one_node = HsdpGrid{.nodes = 1, .per_node = 4}.On(Tiny());  // plain ZeRO
  ASSERT_FALSE(one_node.Warnings().empty());
  EXPECT_TRUE(absl::StrContains(one_node.Warnings().back(), "--zero_shard=node has no effect"));
  const TrainOptions two_nodes = HsdpGrid{.nodes = 2, .per_node = 2}.On(Tiny());
  EXPECT_TRUE(two_nodes.Warnings().empty());
  EXPECT_TRUE(absl::StrContains(parallel::ParseZeroShard("rack").status().message(),
                                "--zero_shard must be dp or node, got 'rack'"));
}

}  // namespace
}  // namespace tally::train
