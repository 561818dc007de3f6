// The join of a strategy's calls with a ledger row (core/runtime/comm/ledger/expected_calls.h).
#include "core/runtime/comm/ledger/expected_calls.h"

#include "gtest/gtest.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::comm {
namespace {

ExpectedCall Bucket(int64_t count) {
  return {.group = group::kDp,
          .primitive = Primitive::kAllReduce,
          .phase = Phase::kBackward,
          .count = count,
          .element = 4,
          .calls = 1,
          .ranks = 3,
          .rank = 1};
}

TEST(ExpectedCalls, ARowIsTheSumOfTheCallsThatMatchItAndNoMatchIsNoFormula) {
  // Two buckets of uneven sizes (7 and 5 values over 3 ranks) and a loss of one float.
  ExpectedCalls calls = {Bucket(7), Bucket(5)};
  calls.push_back({.group = group::kDp,
                   .primitive = Primitive::kAllReduce,
                   .phase = Phase::kOther,
                   .scope = scope::kLoss,
                   .count = 1,
                   .element = 4,
                   .calls = 2,
                   .ranks = 3,
                   .rank = 1});
  const LedgerKey buckets{group::kDp, Primitive::kAllReduce, Algorithm::kRing, Phase::kBackward,
                          ""};
  EXPECT_EQ(ExpectedSent(calls, buckets),
            ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 3, 1, -1, 7, 4).sent +
                ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 3, 1, -1, 5, 4).sent);
  // The row's algorithm decides the bytes: naive's rank 1 sends the whole buffer to the hub.
  LedgerKey naive = buckets;
  naive.algorithm = Algorithm::kNaive;
  EXPECT_EQ(ExpectedSent(calls, naive), 4 * (7 + 5));
  const LedgerKey loss{group::kDp, Primitive::kAllReduce, Algorithm::kRing, Phase::kOther,
                       scope::kLoss};
  EXPECT_EQ(ExpectedSent(calls, loss),
            2 * ExactTraffic(Primitive::kAllReduce, Algorithm::kRing, 3, 1, -1, 1, 4).sent);
  // Another phase, scope, primitive or group: no call, no formula.
  LedgerKey other = buckets;
  other.phase = Phase::kOptimizer;
  EXPECT_EQ(ExpectedSent(calls, other), -1);
  other = buckets;
  other.group = group::kEdp;
  EXPECT_EQ(ExpectedSent(calls, other), -1);
  other = buckets;
  other.primitive = Primitive::kReduceScatter;
  EXPECT_EQ(ExpectedSent(calls, other), -1);
  EXPECT_EQ(TotalSent(calls, Algorithm::kNaive), 4 * (7 + 5) + 2 * 4);
}

TEST(ExpectedCalls, AReceiveIsBookedAndSendsNothing) {
  const ExpectedCall receive{.group = group::kPp,
                             .primitive = Primitive::kSendRecv,
                             .phase = Phase::kForward,
                             .scope = "stage0->1",
                             .count = 100,
                             .element = 2,
                             .calls = 4,
                             .ranks = 2,
                             .rank = 1,
                             .receive = true};
  ExpectedCall send = receive;
  send.receive = false;
  const LedgerKey row{group::kPp, Primitive::kSendRecv, Algorithm::kRing, Phase::kForward,
                      "stage0->1"};
  EXPECT_EQ(ExpectedSent(ExpectedCalls{receive}, row), 0);
  EXPECT_EQ(ExpectedSent(ExpectedCalls{send}, row), 4 * 100 * 2);
}

}  // namespace
}  // namespace tally::comm
