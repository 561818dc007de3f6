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
  o.gpus_per_node = 2;
  o.order = parallel::kMegatronOrder;  // tp-dp-pp: each tp group is one node
  const RunResult megatron = RunRanks(o);
  TrainOptions flipped = o;
  flipped.order = parallel::ParseOrder("dp-tp-pp").value();  // each dp group is one node
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

}  // namespace
}  // namespace tally::train
