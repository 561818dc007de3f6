// Non-blocking collectives (Communicator::IAllReduce, IReduceScatter, IAllGather): several
// in flight at once, on one group and on two, with every algorithm: the results of the
// closed forms, and the bytes the blocking calls book, row by row and peer by peer; and a
// mismatch still reaches every rank.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/check/collective_check.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::RunRanks;

// The non-blocking form of `primitive` on `buffers`.
absl::StatusOr<std::unique_ptr<CollectiveWork>> Post(Communicator& comm, Primitive primitive,
                                                     Algorithm algorithm, CallBuffers& b) {
  switch (primitive) {
    case Primitive::kAllReduce: return comm.IAllReduce(b.output, ReduceOp::kSum, algorithm);
    case Primitive::kReduceScatter:
      return comm.IReduceScatter(b.input, b.output, ReduceOp::kSum, algorithm);
    default: return comm.IAllGather(b.input, b.output, algorithm);
  }
}

using Transfers = std::map<std::pair<LedgerKey, int>, int64_t>;  // bytes sent, by row and peer

Transfers SentOf(const TrafficLedger& ledger) {
  Transfers sent;
  for (const auto& [key_peer, t] : ledger.transfers()) sent[key_peer] = t.bytes_sent;
  return sent;
}

class NonBlockingTest : public ::testing::TestWithParam<std::tuple<Primitive, Algorithm>> {};

// On 4 ranks as 2 nodes of 2: three calls in flight on the world (counts 1000, 7 and 1003)
// and one on a group of two, posted before any is waited for; then the same calls
// blocking, on a fresh ledger.
TEST_P(NonBlockingTest, ManyInFlightGiveTheBlockingResultsAndBytes) {
  const auto [primitive, algorithm] = GetParam();
  const int p = 4;
  const std::vector<int64_t> counts = {1000, 7, 1003};
  CommOptions options = test_util::Options(Algorithm::kRing, 1024);
  options.nodes = std::make_shared<const Nodes>(Nodes::Blocks(p, 2).value());
  std::vector<Transfers> posted(p), blocking(p);
  std::vector<int64_t> wrong(p, 0);
  absl::Status status = RunRanks(p, [&](Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto pair, world.Split(world.rank() % 2, world.rank(), "pair"));
    for (bool nonblocking : {true, false}) {
      world.ledger().Clear();
      std::vector<CallBuffers> buffers;
      for (int64_t n : counts) {
        ASSIGN_OR_RETURN(CallBuffers b, MakeCallBuffers(world, primitive, n, -1));
        FillInputs(world, primitive, b, n, -1);
        buffers.push_back(b);
      }
      ASSIGN_OR_RETURN(CallBuffers on_pair, MakeCallBuffers(*pair, primitive, 500, -1));
      FillInputs(*pair, primitive, on_pair, 500, -1);
      if (nonblocking) {
        std::vector<std::unique_ptr<CollectiveWork>> works;
        for (CallBuffers& b : buffers) {
          ASSIGN_OR_RETURN(auto w, Post(world, primitive, algorithm, b));
          works.push_back(std::move(w));
        }
        ASSIGN_OR_RETURN(auto w, Post(*pair, primitive, algorithm, on_pair));
        works.push_back(std::move(w));
        // Waited for out of order: each is its own.
        for (int i = int(works.size()) - 1; i >= 0; --i) RETURN_IF_ERROR(works[size_t(i)]->Wait());
      } else {
        for (size_t i = 0; i < buffers.size(); ++i) {
          RETURN_IF_ERROR(Call(world, primitive, algorithm, buffers[i], counts[i], -1));
        }
        RETURN_IF_ERROR(Call(*pair, primitive, algorithm, on_pair, 500, -1));
      }
      for (size_t i = 0; i < buffers.size(); ++i) {
        wrong[world.rank()] += CountWrong(world, primitive, buffers[i], counts[i], -1);
      }
      wrong[world.rank()] += CountWrong(*pair, primitive, on_pair, 500, -1);
      (nonblocking ? posted : blocking)[world.rank()] = SentOf(world.ledger());
    }
    return absl::OkStatus();
  }, options);
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
    EXPECT_FALSE(posted[r].empty());
    EXPECT_EQ(posted[r], blocking[r]) << "rank " << r;
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<Primitive, Algorithm>>& info) {
  return absl::StrCat(Name(std::get<0>(info.param)), "_", Name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, NonBlockingTest,
    ::testing::Combine(::testing::Values(Primitive::kAllReduce, Primitive::kReduceScatter,
                                         Primitive::kAllGather),
                       ::testing::Values(Algorithm::kRing, Algorithm::kNaive,
                                         Algorithm::kHierarchical)),
    CaseName);

// A blocking call after non-blocking ones on the same group runs after them, and the call
// rows book the time from post to end, of which the wait held the caller up.
TEST(NonBlocking, ABlockingCallWaitsForThoseBeforeItAndTheRowsBookTheWait) {
  absl::Status status = RunRanks(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor a, Filled(comm, 4096, [&](int64_t i) { return float(i + comm.rank()); }));
    ASSIGN_OR_RETURN(Tensor b, Filled(comm, 16, [&](int64_t) { return 1.0f; }));
    ASSIGN_OR_RETURN(auto work, comm.IAllReduce(a, ReduceOp::kSum));
    RETURN_IF_ERROR(comm.AllReduce(b, ReduceOp::kSum));
    RETURN_IF_ERROR(work->Wait());
    for (int64_t i = 0; i < 4096; ++i) {
      if (a.data<float>()[i] != float(2 * i + 1)) return absl::InternalError("wrong sum");
    }
    if (b.data<float>()[0] != 2.0f) return absl::InternalError("wrong blocking sum");
    int64_t calls = 0;
    for (const auto& [key, c] : comm.ledger().calls()) {
      calls += c.calls;
      if (c.blocked_seconds > c.seconds + 1e-9) return absl::InternalError("blocked > seconds");
    }
    if (calls != 2) return absl::InternalError(absl::StrCat(calls, " calls booked"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Ranks that post different calls fail on every rank, naming both sides, as blocking ones do.
TEST(NonBlocking, AMismatchReachesEveryRank) {
  std::vector<absl::Status> ranks(3);
  absl::Status run = RunRanks(3, [&](Communicator& comm) -> absl::Status {
    absl::Status s = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(Tensor t, Filled(comm, comm.rank() == 2 ? 96 : 128, [](int64_t) { return 1.0f; }));
      ASSIGN_OR_RETURN(auto work, comm.IAllReduce(t, ReduceOp::kSum));
      return work->Wait();
    }();
    ranks[comm.rank()] = s;
    return s;
  });
  EXPECT_FALSE(run.ok());
  for (const absl::Status& s : ranks) {
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), "passed 96")) << s;
  }
}

}  // namespace
}  // namespace tally::comm
