// Placement: the grid's order and the nodes decide which link each byte takes, and
// nothing else. The seed's rule (tensor parallelism inside a node, data parallelism
// across nodes) against its opposite, on 2 nodes of 2 ranks.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// Rank r's bytes sent over the run in `group`, by link.
comm::LinkBytes GroupBytes(const TrainOptions& o, const RunResult& run, int r,
                           const std::string& group) {
  return run.traffic[r].SentByLink(*o.PlacedNodes(),
                                   [&](const comm::LedgerKey& key) { return key.group == group; });
}

TEST(Placement, TheOrderMovesTensorParallelBytesAcrossNodesAndLeavesTheLossesAlone) {
  TrainOptions o = Grid{.dp = 2, .tp = 2}.On(TinyGrid(4));
  o.placement.gpus_per_node = 2;
  o.placement.order = parallel::kMegatronOrder;  // tp-dp-pp: each tp group is one node
  const RunResult megatron = RunRanks(o);
  TrainOptions flipped = o;
  flipped.placement.order = parallel::ParseOrder("dp-tp-pp").value();  // each dp group is one node
  const RunResult across = RunRanks(flipped);
  ExpectSameRun(megatron, across);
  ExpectReportRowsExact(o, megatron);
  ExpectReportRowsExact(flipped, across);
  for (int r = 0; r < o.world(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const comm::LinkBytes tp_inside = GroupBytes(o, megatron, r, "tp");
    const comm::LinkBytes dp_across = GroupBytes(o, megatron, r, "dp");
    EXPECT_GT(tp_inside.intra, 0);
    EXPECT_EQ(tp_inside.inter, 0);
    EXPECT_GT(dp_across.inter, 0);
    EXPECT_EQ(dp_across.intra, 0);
    // The opposite placement moves the same bytes over the other link.
    const comm::LinkBytes tp_across = GroupBytes(flipped, across, r, "tp");
    const comm::LinkBytes dp_inside = GroupBytes(flipped, across, r, "dp");
    EXPECT_EQ(tp_across, (comm::LinkBytes{0, tp_inside.intra}));
    EXPECT_EQ(dp_inside, (comm::LinkBytes{dp_across.inter, 0}));
  }
}

// Hierarchical data parallelism on 2 nodes of 2 ranks: the serial run's losses, and on
// every rank 2(K-1)/K·4Φ/G bytes a step across nodes (the seed's cut of cross-node
// traffic) instead of the flat ring's 2(p-1)/p·4Φ on the ranks at a node's edge.
TEST(Placement, HierarchicalDataParallelIsTheSerialRunAndCrossesNodesLess) {
  TrainOptions o = Grid{.dp = 4}.On(TinyGrid(4));
  o.placement.gpus_per_node = 2;
  o.parallel.allreduce = comm::Algorithm::kHierarchical;
  const RunResult hierarchical = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(hierarchical, RunRanks(Grid{}.On(TinyGrid(4))));
  ExpectReportRowsExact(o, hierarchical);
  TrainOptions flat = o;
  flat.parallel.allreduce = comm::Algorithm::kRing;
  const RunResult ring = RunRanks(flat);
  const int64_t phi = o.model.NumParams(), k = 2, g = 2, p = 4;
  ASSERT_EQ(phi % (k * g), 0) << "the closed forms below need whole chunks";
  auto gradient_rows = [](const comm::LedgerKey& key) {
    return key.group == "dp" && key.primitive == comm::Primitive::kAllReduce &&
           key.phase == comm::Phase::kBackward;
  };
  for (int r = 0; r < o.world(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const comm::LinkBytes two_level = hierarchical.traffic[r].SentByLink(*o.PlacedNodes(), gradient_rows);
    EXPECT_EQ(two_level.inter, o.training.steps * 2 * (k - 1) * 4 * phi / (k * g));
    EXPECT_EQ(two_level.intra, o.training.steps * 2 * (g - 1) * 4 * phi / g);
    // The flat ring: ranks 1 and 3 send everything to the other node, 0 and 2 nothing.
    const comm::LinkBytes one_ring = ring.traffic[r].SentByLink(*o.PlacedNodes(), gradient_rows);
    EXPECT_EQ(one_ring.inter, r % 2 == 1 ? o.training.steps * 2 * (p - 1) * 4 * phi / p : 0);
  }
}

// ZeRO's reduce-scatter and all-gather take the hierarchical form too.
TEST(Placement, HierarchicalZeroIsTheSerialRunWithExactBytes) {
  for (int zero : {1, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    TrainOptions o = Grid{.dp = 4, .zero = zero}.On(TinyGrid(4));
    o.placement.gpus_per_node = 2;
    o.parallel.allreduce = comm::Algorithm::kHierarchical;
    const RunResult run = RunRanks(o);
    if (kCompareWithSerial) ExpectSameRun(run, RunRanks(Grid{}.On(TinyGrid(4))));
    ExpectReportRowsExact(o, run);
    int hierarchical_rows = 0;
    for (const auto& [key, calls] : run.traffic[0].calls()) {
      hierarchical_rows += key.algorithm == comm::Algorithm::kHierarchical;
    }
    EXPECT_GE(hierarchical_rows, 2);
  }
}

}  // namespace
}  // namespace tally::train
