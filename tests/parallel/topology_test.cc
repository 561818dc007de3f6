// The grid: coordinates, groups, and the communicators split from a world.
#include "core/parallel/topology.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/launch.h"

namespace tally::parallel {
namespace {

TEST(Topology, TensorParallelVariesFastestThenDataThenPipeline) {
  const Topology grid(/*dp=*/2, /*tp=*/2, /*pp=*/2);
  EXPECT_EQ(grid.world(), 8);
  const GridCoordinates five = grid.Of(5);
  EXPECT_EQ(five.dp, 0);
  EXPECT_EQ(five.tp, 1);
  EXPECT_EQ(five.pp, 1);
  for (int r = 0; r < grid.world(); ++r) EXPECT_EQ(grid.RankAt(grid.Of(r)), r);
  EXPECT_EQ(grid.TpGroup(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(grid.DpGroup(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.PpGroup(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(Topology(3, 1, 1).DpGroup(2), (std::vector<int>{0, 1, 2}));
  const std::string text = grid.Describe();
  EXPECT_TRUE(absl::StrContains(text, "topology: world 8 = dp 2 x pp 2 x tp 2")) << text;
  EXPECT_TRUE(absl::StrContains(text, "rank 5: dp 0 pp 1 tp 1 | dp group [5 7] | tp group [4 5] | pp group [1 5]"))
      << text;
}

// Another order places the same groups elsewhere: dp fastest puts each dp group on
// neighbouring ranks and strides the tp group by dp.
// Context parallelism's ranks are the fastest part of the dp axis: tp-cp-dp-pp, as
// Megatron lays them out; the dp group holds dp·cp ranks, the cp group one replica's
// pieces.
TEST(Topology, ContextParallelRanksAreTheFastestPartOfTheDataAxis) {
  const Topology grid(/*dp=*/2, /*tp=*/2, /*pp=*/2, kMegatronOrder, /*ep=*/1, /*cp=*/2);
  EXPECT_EQ(grid.world(), 16);
  EXPECT_EQ(grid.DpGroupSize(), 4);
  const GridCoordinates c = grid.Of(7);  // 7 = tp 1 + 2·(cp 1 + 2·(dp 1 + 2·pp 0))
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(grid.DpGroupRank(c), 3);
  for (int r = 0; r < grid.world(); ++r) EXPECT_EQ(grid.RankAt(grid.Of(r)), r);
  EXPECT_EQ(grid.CpGroup(7), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.DpGroup(7), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(grid.TpGroup(7), (std::vector<int>{6, 7}));
  EXPECT_EQ(grid.PpGroup(7), (std::vector<int>{7, 15}));
  // Another order keeps cp beside dp: dp-tp-pp puts the dp axis (cp fastest) first.
  const Topology other(2, 2, 1, *ParseOrder("dp-tp-pp"), 1, 2);
  EXPECT_EQ(other.CpGroup(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(other.DpGroup(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(other.TpGroup(0), (std::vector<int>{0, 4}));
}

TEST(Topology, AnOrderIsAPermutationOfTheAxesFastestFirst) {
  ASSERT_EQ(Name(ParseOrder("dp-tp-pp").value()), "dp-tp-pp");
  const Topology grid(/*dp=*/2, /*tp=*/2, /*pp=*/2, ParseOrder("dp-tp-pp").value());
  for (int r = 0; r < grid.world(); ++r) EXPECT_EQ(grid.RankAt(grid.Of(r)), r);
  EXPECT_EQ(grid.Of(1).dp, 1);
  EXPECT_EQ(grid.Of(2).tp, 1);
  EXPECT_EQ(grid.Of(4).pp, 1);
  EXPECT_EQ(grid.DpGroup(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(grid.TpGroup(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.PpGroup(5), (std::vector<int>{1, 5}));
  const Topology pp_first(2, 2, 2, ParseOrder("pp-tp-dp").value());
  EXPECT_EQ(pp_first.PpGroup(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(pp_first.DpGroup(0), (std::vector<int>{0, 4}));
  for (const char* bad : {"tp-dp", "tp-tp-pp", "tp-dp-ep", "", "tp-dp-pp-dp"}) {
    const absl::Status s = ParseOrder(bad).status();
    EXPECT_TRUE(absl::StrContains(s.message(), "--order must name tp, dp and pp once each"))
        << bad << ": " << s;
  }
  // With nodes, --print_topology says where each rank is.
  const comm::Nodes nodes = comm::Nodes::Blocks(8, 4).value();
  const std::string text = grid.Describe(&nodes);
  EXPECT_TRUE(absl::StrContains(text, "order dp-tp-pp")) << text;
  EXPECT_TRUE(absl::StrContains(text, "nodes: 2 (node 0: ranks 0 1 2 3 | node 1: ranks 4 5 6 7)"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "rank 5: dp 1 pp 1 tp 0 node 1 | dp group [4 5]")) << text;
}

TEST(Nodes, BlocksOfRanksAndTheLinksBetweenThem) {
  const comm::Nodes nodes = comm::Nodes::Blocks(5, 2).value();  // [0 1] [2 3] [4]
  EXPECT_EQ(nodes.count(), 3);
  EXPECT_EQ(nodes.gpus_per_node(), 2);
  EXPECT_EQ(nodes.node(4), 2);
  EXPECT_EQ(nodes.LinkBetween(0, 1), comm::Link::kIntra);
  EXPECT_EQ(nodes.LinkBetween(1, 2), comm::Link::kInter);
  EXPECT_EQ(nodes.Split(3, 2, 10), (comm::LinkBytes{10, 0}));
  EXPECT_EQ(nodes.Of(std::vector<int>{4, 1, 3}), (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(comm::Nodes::One(3).count(), 1);
  EXPECT_EQ(comm::Nodes(std::vector<int>{7, 7, 3}).node(2), 1);  // renumbered
  EXPECT_FALSE(comm::Nodes::Blocks(4, 0).ok());
}

// Every rank's communicators hold exactly the members the grid names, in that order.
TEST(Topology, SplitGroupsAreTheGridsGroups) {
  const Topology grid(2, 2, 2);
  comm::LaunchOptions launch;
  launch.world_size = grid.world();
  absl::Status s = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    absl::StatusOr<Topology::Groups> groups = grid.Split(world, /*sharded=*/false);
    if (!groups.ok()) return groups.status();
    const int r = world.rank();
    auto check = [&](const comm::Communicator* group, const std::vector<int>& members) {
      EXPECT_NE(group, nullptr);
      if (group == nullptr) return;
      EXPECT_EQ(group->size(), int(members.size())) << r;
      EXPECT_EQ(members[group->rank()], r) << r;
    };
    check(groups->dp.get(), grid.DpGroup(r));
    check(groups->tp.get(), grid.TpGroup(r));
    check(groups->pp.get(), grid.PpGroup(r));
    check(groups->embedding.get(), grid.PpGroup(r));  // 2 stages: both hold the embedding
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace tally::parallel
