// Split makes named sub-groups whose collectives stay inside the group and are booked
// under the group's name.
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::RunRanks;

// 8 ranks as a 2 x 4 grid: "tp" groups are rows of 4 consecutive ranks, "dp" groups are
// columns (ranks r and r + 4), Megatron's order.
TEST(Split, GridGroupsReduceWithinThemselves) {
  std::vector<float> tp_sums(8), dp_sums(8);
  std::vector<TrafficLedger> ledgers(8);
  absl::Status status = RunRanks(8, [&](Communicator& world) -> absl::Status {
    int r = world.rank();
    ASSIGN_OR_RETURN(auto tp, world.Split(/*color=*/r / 4, /*key=*/r, "tp"));
    ASSIGN_OR_RETURN(auto dp, world.Split(/*color=*/r % 4, /*key=*/r, "dp"));
    if (tp->size() != 4 || dp->size() != 2 || tp->rank() != r % 4 || dp->rank() != r / 4) {
      return absl::InternalError("wrong group shape");
    }
    if (tp->world_rank_of(0) != (r / 4) * 4 || dp->world_rank_of(1) != r % 4 + 4) {
      return absl::InternalError("wrong members");
    }
    world.ledger().Clear();
    ASSIGN_OR_RETURN(Tensor a, Filled(*tp, 6, [&](int64_t) { return float(r); }));
    ASSIGN_OR_RETURN(Tensor b, Filled(*dp, 6, [&](int64_t) { return float(r); }));
    RETURN_IF_ERROR(tp->AllReduce(a, ReduceOp::kSum));
    RETURN_IF_ERROR(dp->AllReduce(b, ReduceOp::kSum, Algorithm::kNaive));
    tp_sums[r] = a.data<float>()[5];
    dp_sums[r] = b.data<float>()[0];
    ledgers[r] = world.ledger();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < 8; ++r) {
    float row = r < 4 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7;
    EXPECT_EQ(tp_sums[r], row);
    EXPECT_EQ(dp_sums[r], float(r % 4) + float(r % 4 + 4));
    TransferTotals tp = ledgers[r].Sum([](const LedgerKey& k) { return k.group == "tp"; });
    TransferTotals dp = ledgers[r].Sum([](const LedgerKey& k) { return k.group == "dp"; });
    EXPECT_EQ(tp.bytes_sent, ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 4, r % 4, -1, 6, 4).sent);
    EXPECT_EQ(dp.bytes_sent, ExactTraffic(Primitive::kAllReduce, Algorithm::kNaive, 2, r / 4, -1, 6, 4).sent);
  }
  // Peers are world ranks: tp traffic of rank 0 goes to rank 1 only (its ring neighbour).
  std::vector<std::vector<int64_t>> matrix = PeerMatrix(ledgers);
  EXPECT_GT(matrix[0][1], 0);
  EXPECT_EQ(matrix[0][2], 0);
  EXPECT_GT(matrix[0][4], 0);  // its dp partner
}

TEST(Split, NegativeColorJoinsNothingAndKeyOrdersRanks) {
  absl::Status status = RunRanks(4, [&](Communicator& world) -> absl::Status {
    int r = world.rank();
    // Ranks 1..3 join "odd-one-out" in reverse order; rank 0 stays out.
    ASSIGN_OR_RETURN(auto group, world.Split(r == 0 ? -1 : 7, /*key=*/-r, "rest"));
    if (r == 0) return group == nullptr ? absl::OkStatus() : absl::InternalError("joined");
    if (group->size() != 3 || group->rank() != 3 - r || group->name() != "rest") {
      return absl::InternalError("wrong order");
    }
    // Split traffic is booked as setup.
    TransferTotals setup =
        world.ledger().Sum([](const LedgerKey& k) { return k.phase == Phase::kSetup; });
    if (setup.bytes_sent == 0) return absl::InternalError("split traffic not booked as setup");
    return group->Barrier();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(Split, ConcurrentSubGroupsOf64RanksOnTwoCores) {
  // 64 ranks, eight groups of eight, all reducing at once: oversubscribed ranks sleep
  // instead of spinning, so this finishes quickly even on two cores.
  absl::Status status = RunRanks(64, [&](Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto group, world.Split(world.rank() / 8, world.rank(), "g"));
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(Tensor t, Filled(*group, 1000, [](int64_t) { return 1.0f; }));
      RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
      if (t.data<float>()[999] != 8.0f) return absl::InternalError("wrong sum");
    }
    return world.Barrier();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::comm
