// The grid: coordinates, groups, and the communicators split from a world.
#include "parallel/topology.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/comm/launch.h"

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

// Every rank's communicators hold exactly the members the grid names, in that order.
TEST(Topology, SplitGroupsAreTheGridsGroups) {
  const Topology grid(2, 2, 2);
  comm::LaunchOptions launch;
  launch.world_size = grid.world();
  absl::Status s = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    absl::StatusOr<Topology::Groups> groups = grid.Split(world, /*dp_group=*/true);
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
