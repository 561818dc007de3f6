// The closed forms agree with DESIGN.md's table when p divides the count.
#include "core/runtime/comm/ledger/exact_traffic.h"

#include <vector>

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

// Recursive doubling moves whole buffers: log2(p)·M each way on a power of two; on 6
// ranks (p' = 4, two folds) the folded ranks 0 and 2 send M and get the result back, their
// partners 1 and 3 take theirs in and return the result on top of log2(4)·M, and 4 and 5
// double only. Other primitives asked of it are the ring's.
TEST(ExactTraffic, RecursiveDoublingSendsWholeBuffers) {
  const int64_t n = 10, M = 40;
  for (int p : {2, 4, 8}) {
    const int64_t rounds = p == 2 ? 1 : p == 4 ? 2 : 3;
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kRecursiveDoubling, p, r, -1, n, 4),
                (RankTraffic{rounds * M, rounds * M}));
    }
  }
  const RankTraffic folded{M, M}, partner{3 * M, 3 * M}, doubling{2 * M, 2 * M};
  const RankTraffic six[] = {folded, partner, folded, partner, doubling, doubling};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(ExactTraffic(Primitive::kAllReduce, Algorithm::kRecursiveDoubling, 6, r, -1, n, 4),
              six[r]) << r;
  }
  // Rank 1 (new number 0) exchanges with new numbers 1 and 2: old ranks 3 and 4.
  EXPECT_EQ(ExactSentTo(Primitive::kAllReduce, Algorithm::kRecursiveDoubling, 6, 1, -1, n, 4),
            (std::vector<int64_t>{M, 0, 0, M, M, 0}));
  EXPECT_EQ(ExactTraffic(Primitive::kAllGather, Algorithm::kRecursiveDoubling, 6, 1, -1, 12, 4),
            ExactTraffic(Primitive::kAllGather, Algorithm::kRing, 6, 1, -1, 12, 4));
  // The switch by size: the ring's all-reduces up to the threshold, nothing else.
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllReduce, Algorithm::kRing, {}, 64, 64),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllReduce, Algorithm::kRing, {}, 65, 64),
            Algorithm::kRing);
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllReduce, Algorithm::kNaive, {}, 4, 64),
            Algorithm::kNaive);
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllGather, Algorithm::kRing, {}, 4, 64),
            Algorithm::kRing);
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllReduce, Algorithm::kRing, {}, 4, 0),
            Algorithm::kRing);
  EXPECT_EQ(EffectiveAlgorithm(Primitive::kAllReduce, Algorithm::kRing, {}, 0, 0),
            Algorithm::kRing);  // 0: never, not even an empty buffer
}

}  // namespace
}  // namespace tally::comm
