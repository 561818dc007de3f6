// The closed forms agree with DESIGN.md's table when p divides the count.
#include "runtime/comm/ledger/exact_traffic.h"

#include "gtest/gtest.h"

namespace tally::comm {
namespace {

TEST(ExactTraffic, MatchesTheDesignTableWhenTheCountDivides) {
  const int p = 4;
  const int64_t n = 1024, M = 4 * n, k = M / p;
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, p, r, -1, n, 4),
              (RankTraffic{2 * (p - 1) * k, 2 * (p - 1) * k}));
    EXPECT_EQ(ExactTraffic(Primitive::kAllGather, Algorithm::kRing, p, r, -1, n, 4),
              (RankTraffic{(p - 1) * k, (p - 1) * k}));
    EXPECT_EQ(ExactTraffic(Primitive::kReduceScatter, Algorithm::kRing, p, r, -1, n, 4),
              (RankTraffic{(p - 1) * k, (p - 1) * k}));
    EXPECT_EQ(ExactTraffic(Primitive::kAllToAll, Algorithm::kNaive, p, r, -1, n, 4),
              (RankTraffic{(p - 1) * k, (p - 1) * k}));
  }
  EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kNaive, p, 0, -1, n, 4),
            (RankTraffic{(p - 1) * M, (p - 1) * M}));
  EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kNaive, p, 2, -1, n, 4),
            (RankTraffic{M, M}));
  EXPECT_EQ(ExactTraffic(Primitive::kBroadcast, Algorithm::kNaive, p, 1, 1, n, 4),
            (RankTraffic{(p - 1) * M, 0}));
  EXPECT_EQ(ExactTraffic(Primitive::kScatter, Algorithm::kNaive, p, 0, 0, n, 4),
            (RankTraffic{(p - 1) * k, 0}));
  EXPECT_EQ(ExactTraffic(Primitive::kGather, Algorithm::kNaive, p, 3, 0, n, 4),
            (RankTraffic{k, 0}));
  EXPECT_EQ(ExactTraffic(Primitive::kReduce, Algorithm::kNaive, p, 0, 0, n, 4),
            (RankTraffic{0, (p - 1) * M}));
}

TEST(ExactTraffic, UnevenRingAllReduceStillSumsToTwoPassesOfTheBuffer) {
  // 10 elements on 4 ranks: chunks of 3, 3, 2, 2. Over all ranks, each pass moves (p-1)·M.
  int64_t sent = 0;
  for (int r = 0; r < 4; ++r) {
    sent += ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 4, r, -1, 10, 4).sent;
  }
  EXPECT_EQ(sent, 2 * 3 * 40);
  EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 4, 0, -1, 10, 4).sent,
            (40 - 12) + (40 - 12));  // all but chunk 0, then all but chunk 1
}

}  // namespace
}  // namespace tally::comm
