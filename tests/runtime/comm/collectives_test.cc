// Every primitive x algorithm x group size x count: exact results from closed-form inputs,
// and ledger bytes per rank equal to the exact formula, to the byte: in all, to each peer,
// and by link class with the ranks placed G to a node for G = 1, 2, 3.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/comm/check/collective_check.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/comm/algorithms/partition.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::Options;
using test_util::RunRanks;

// Small pieces so that every count above 256 elements runs a multi-message ring.
constexpr size_t kMaxChunkBytes = 1024;
// Empty, a single element, fewer elements than ranks (7 on 8), 1000 (divided by 2, 4, 5
// and 8 but not 3) and 1003 (divided by none of 2..8); 1000 and 1003 floats span several
// 1 KiB pieces.
const int64_t kCounts[] = {0, 1, 7, 1000, 1003};

struct Observed {
  int64_t wrong = 0;  // elements that differ from the closed form
  int64_t sent = 0;
  int64_t recv = 0;
  std::vector<int64_t> sent_to;  // by peer
};

using Case = std::tuple<Primitive, Algorithm, int>;

class CollectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(CollectiveTest, ExactResultsAndExactBytes) {
  const auto [primitive, algorithm, p] = GetParam();
  std::vector<int64_t> counts(std::begin(kCounts), std::end(kCounts));
  if (primitive == Primitive::kBarrier) counts = {0};
  // observed[count index][rank]
  std::vector<std::vector<Observed>> observed(counts.size(), std::vector<Observed>(p));
  CommOptions options;
  options.max_chunk_bytes = kMaxChunkBytes;
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    for (size_t c = 0; c < counts.size(); ++c) {
      comm.ledger().Clear();
      int64_t n = counts[c];
      ASSIGN_OR_RETURN(CallBuffers buffers, MakeCallBuffers(comm, primitive, n, p / 2));
      FillInputs(comm, primitive, buffers, n, p / 2);
      RETURN_IF_ERROR(Call(comm, primitive, algorithm, buffers, n, p / 2));
      int64_t wrong = CountWrong(comm, primitive, buffers, n, p / 2);
      TransferTotals t = comm.ledger().Total();
      std::vector<int64_t> sent_to(p, 0);
      for (const auto& [key_peer, totals] : comm.ledger().transfers()) {
        sent_to[key_peer.second] += totals.bytes_sent;
      }
      observed[c][comm.rank()] = {wrong, t.bytes_sent, t.bytes_recv, sent_to};
    }
    return absl::OkStatus();
  }, options);
  ASSERT_TRUE(status.ok()) << status;

  for (size_t c = 0; c < counts.size(); ++c) {
    int64_t total_sent = 0, total_recv = 0;
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE(absl::StrCat("count ", counts[c], ", rank ", r));
      const Observed& o = observed[c][r];
      EXPECT_EQ(o.wrong, 0);
      RankTraffic exact = ExactTraffic(primitive, algorithm, p, r, p / 2, counts[c], sizeof(float));
      EXPECT_EQ(o.sent, exact.sent);
      EXPECT_EQ(o.recv, exact.recv);
      EXPECT_EQ(o.sent_to,
                ExactSentTo(primitive, algorithm, p, r, p / 2, counts[c], sizeof(float)));
      for (int g : {1, 2, 3}) {
        const std::vector<int> nodes = Nodes::Blocks(p, g)->Of(test_util::Iota(p));
        LinkBytes measured;
        for (int j = 0; j < p; ++j) measured += Nodes(nodes).Split(r, j, o.sent_to[j]);
        EXPECT_EQ(measured, ExactSentByLink(primitive, algorithm, nodes, r, p / 2, counts[c],
                                            sizeof(float)))
            << g << " ranks a node";
      }
      total_sent += o.sent;
      total_recv += o.recv;
    }
    EXPECT_EQ(total_sent, total_recv) << "count " << counts[c];
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  auto [primitive, algorithm, p] = info.param;
  return absl::StrCat(Name(primitive), "_", Name(algorithm), "_", p, "ranks");
}

INSTANTIATE_TEST_SUITE_P(
    AllPrimitives, CollectiveTest,
    ::testing::Combine(::testing::Values(Primitive::kBroadcast, Primitive::kScatter,
                                         Primitive::kGather, Primitive::kReduce,
                                         Primitive::kAllGather, Primitive::kReduceScatter,
                                         Primitive::kAllReduce, Primitive::kAllToAll,
                                         Primitive::kSendRecv, Primitive::kBarrier),
                       ::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                       ::testing::Values(1, 2, 3, 4, 5, 6, 8)),
    CaseName);

// Point-to-point: blocking and non-blocking, both directions at once, bytes exact.
TEST(SendRecv, ExchangesBothWaysAndCountsBytes) {
  for (int64_t n : kCounts) {
    std::vector<TransferTotals> totals(2);
    absl::Status status = RunRanks(2, [&](Communicator& comm) -> absl::Status {
      int peer = 1 - comm.rank();
      ASSIGN_OR_RETURN(Tensor out, Filled(comm, n, [&](int64_t i) { return float(comm.rank() * 100 + i); }));
      ASSIGN_OR_RETURN(Tensor in, Filled(comm, n, [](int64_t) { return -1.0f; }));
      auto send = comm.Isend(out, peer);
      auto recv = comm.Irecv(in, peer);
      RETURN_IF_ERROR(recv->Wait());
      RETURN_IF_ERROR(send->Wait());
      for (int64_t i = 0; i < n; ++i) {
        if (in.data<float>()[i] != float(peer * 100 + i)) {
          return absl::InternalError(absl::StrCat("element ", i, " wrong"));
        }
      }
      // And blocking, one direction.
      if (comm.rank() == 0) RETURN_IF_ERROR(comm.Send(out, 1));
      if (comm.rank() == 1) RETURN_IF_ERROR(comm.Recv(in, 0));
      totals[comm.rank()] = comm.ledger().Total();
      return absl::OkStatus();
    }, Options(Algorithm::kRing, kMaxChunkBytes));
    ASSERT_TRUE(status.ok()) << status;
    int64_t bytes = n * 4;
    EXPECT_EQ(totals[0].bytes_sent, 2 * bytes);
    EXPECT_EQ(totals[0].bytes_recv, bytes);
    EXPECT_EQ(totals[1].bytes_sent, bytes);
    EXPECT_EQ(totals[1].bytes_recv, 2 * bytes);
  }
}

}  // namespace
}  // namespace tally::comm
