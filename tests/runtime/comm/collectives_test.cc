// Every primitive x algorithm x group size x count: exact results from closed-form inputs,
// and ledger bytes per rank equal to the exact formula, to the byte: in all, to each peer,
// and by link class with the ranks placed G to a node for G = 1, 2, 3. The all-to-all-v
// also with counts of no pattern, exchanged first.
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/algorithms/partition.h"
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
        const std::vector<int> nodes = Nodes::Blocks(p, g)->node_of();
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
                                         Primitive::kSendRecv, Primitive::kBarrier,
                                         Primitive::kAllToAllV),
                       ::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                       ::testing::Values(1, 2, 3, 4, 5, 6, 8)),
    CaseName);

// Recursive doubling on every group size to 8, powers of two and the folds between them;
// asked of another primitive it runs (and is counted as) the ring.
INSTANTIATE_TEST_SUITE_P(
    RecursiveDoubling, CollectiveTest,
    ::testing::Combine(::testing::Values(Primitive::kAllReduce, Primitive::kReduceScatter),
                       ::testing::Values(Algorithm::kRecursiveDoubling),
                       ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8)),
    CaseName);

// An all-to-all-v of counts no pattern makes (zeros, a rank that sends nothing, blocks of
// one element and blocks that span several pieces), its counts exchanged first: every
// block where it belongs, the counts' all-to-all and the blocks' bytes exact, Σsent = Σrecv.
class AllToAllVTest : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(AllToAllVTest, ExchangedCountsPlaceEveryBlockAndBookExactBytes) {
  const auto [algorithm, p] = GetParam();
  // What rank i sends rank j: zero on the diagonal of 3, nothing at all from the last rank.
  auto count = [p = p](int i, int j) -> int64_t {
    if (p > 1 && i == p - 1) return 0;
    return (i + 2 * j) % 3 == 0 ? 0 : int64_t(1 + 97 * ((i * 7 + j * 3) % 11));
  };
  // Element k of i's block for j.
  auto value = [](int i, int j, int64_t k) { return float(100000 * i + 1000 * j + k % 1000); };
  CommOptions options;
  options.max_chunk_bytes = kMaxChunkBytes;
  std::vector<RankTraffic> blocks(static_cast<size_t>(p)), counts_bytes = blocks;
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    std::vector<int64_t> send(static_cast<size_t>(p), 0);
    for (int j = 0; j < p; ++j) send[size_t(j)] = count(r, j);
    {
      LabelScope label(comm.ledger(), "counts");
      ASSIGN_OR_RETURN(std::vector<int64_t> recv, comm.ExchangeCounts(send));
      for (int j = 0; j < p; ++j) {
        if (recv[size_t(j)] != count(j, r)) return absl::InternalError("counts exchanged wrong");
      }
      counts_bytes[size_t(r)] = {comm.ledger().Total().bytes_sent, comm.ledger().Total().bytes_recv};
      comm.ledger().Clear();
      std::vector<float> input;
      for (int j = 0; j < p; ++j) {
        for (int64_t k = 0; k < send[size_t(j)]; ++k) input.push_back(value(r, j, k));
      }
      int64_t total = 0;
      for (int64_t c : recv) total += c;
      ASSIGN_OR_RETURN(Tensor in, Filled(comm, int64_t(input.size()),
                                         [&](int64_t i) { return input[size_t(i)]; }));
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({total}, DType::kF32, comm.allocator()));
      RETURN_IF_ERROR(comm.AllToAllV(in, send, out, recv, algorithm));
      int64_t at = 0;
      for (int j = 0; j < p; ++j) {
        for (int64_t k = 0; k < recv[size_t(j)]; ++k, ++at) {
          if (out.data<float>()[at] != value(j, r, k)) {
            return absl::InternalError(absl::StrCat("rank ", r, ": element ", k, " from ", j));
          }
        }
      }
      EXPECT_EQ(comm.ledger().calls().begin()->first.primitive, Primitive::kAllToAllV);
      EXPECT_EQ(AllToAllVTraffic(send, recv, r, sizeof(float)),
                (RankTraffic{comm.ledger().Total().bytes_sent, comm.ledger().Total().bytes_recv}));
      blocks[size_t(r)] = {comm.ledger().Total().bytes_sent, comm.ledger().Total().bytes_recv};
    }
    return absl::OkStatus();
  }, options);
  ASSERT_TRUE(status.ok()) << status;
  int64_t sent = 0, recv = 0;
  for (int r = 0; r < p; ++r) {
    // The counts: one int64 to every other rank.
    EXPECT_EQ(counts_bytes[size_t(r)], (RankTraffic{8 * (p - 1), 8 * (p - 1)})) << "rank " << r;
    sent += blocks[size_t(r)].sent;
    recv += blocks[size_t(r)].recv;
  }
  EXPECT_EQ(sent, recv);
  if (p > 2) {
    EXPECT_GT(sent, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, AllToAllVTest,
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                                            ::testing::Values(1, 2, 3, 5)),
                         [](const ::testing::TestParamInfo<std::tuple<Algorithm, int>>& param) {
                           return absl::StrCat(Name(std::get<0>(param.param)), "_",
                                               std::get<1>(param.param), "ranks");
                         });

TEST(AllToAllV, BadCountsAreClearErrors) {
  absl::Status status = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({3}, DType::kF32, comm.allocator()));
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({3}, DType::kF32, comm.allocator()));
    const std::vector<int64_t> wrong_size = {1, 2, 0};
    absl::Status s = comm.AllToAllV(in, wrong_size, out, wrong_size);
    EXPECT_TRUE(absl::StrContains(s.message(), "3 send and 3 receive counts for a group of 2")) << s;
    const std::vector<int64_t> negative = {4, -1};
    s = comm.AllToAllV(in, negative, out, negative);
    EXPECT_TRUE(absl::StrContains(s.message(), "a negative count for rank 1")) << s;
    const std::vector<int64_t> ones = {1, 1};
    s = comm.AllToAllV(in, ones, out, ones);
    EXPECT_TRUE(absl::StrContains(s.message(), "input has 3 elements, expected 2")) << s;
    // Two elements to itself, one received from itself.
    const std::vector<int64_t> mine_twice =
        comm.rank() == 0 ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 2};
    s = comm.AllToAllV(in, mine_twice, out, ones);
    EXPECT_TRUE(absl::StrContains(s.message(), "sends itself 2 elements but receives 1")) << s;
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

// The hierarchical algorithms on every placement of N ranks G to a node: exact results,
// and every byte to every peer as the formula says. Where the placement gives no two
// levels (G = 1, G >= N, or unequal nodes) and for the other primitives it is the ring,
// and the ledger books it as such.
using HierarchicalCase = std::tuple<Primitive, int, int>;  // primitive, N, G

class HierarchicalTest : public ::testing::TestWithParam<HierarchicalCase> {};

TEST_P(HierarchicalTest, ExactResultsAndExactBytesByLink) {
  const auto [primitive, p, g] = GetParam();
  CommOptions options = Options(Algorithm::kHierarchical, kMaxChunkBytes);
  options.nodes = std::make_shared<const Nodes>(Nodes::Blocks(p, g).value());
  const std::vector<int> nodes = options.nodes->node_of();
  const Algorithm booked = EffectiveAlgorithm(primitive, Algorithm::kHierarchical, nodes);
  const bool two_level = (primitive == Primitive::kAllReduce ||
                          primitive == Primitive::kReduceScatter ||
                          primitive == Primitive::kAllGather) &&
                         g > 1 && g < p && p % g == 0;
  EXPECT_EQ(booked, two_level ? Algorithm::kHierarchical : Algorithm::kRing);
  const int root = p / 2;
  std::vector<std::vector<Observed>> observed(std::size(kCounts), std::vector<Observed>(p));
  std::vector<std::vector<Algorithm>> algorithms(std::size(kCounts), std::vector<Algorithm>(p));
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    for (size_t c = 0; c < std::size(kCounts); ++c) {
      comm.ledger().Clear();
      const int64_t n = kCounts[c];
      ASSIGN_OR_RETURN(CallBuffers buffers, MakeCallBuffers(comm, primitive, n, root));
      FillInputs(comm, primitive, buffers, n, root);
      RETURN_IF_ERROR(Call(comm, primitive, Algorithm::kHierarchical, buffers, n, root));
      std::vector<int64_t> sent_to(p, 0);
      for (const auto& [key_peer, totals] : comm.ledger().transfers()) {
        sent_to[key_peer.second] += totals.bytes_sent;
      }
      const TransferTotals t = comm.ledger().Total();
      observed[c][comm.rank()] = {CountWrong(comm, primitive, buffers, n, root), t.bytes_sent,
                                  t.bytes_recv, sent_to};
      algorithms[c][comm.rank()] = comm.ledger().calls().begin()->first.algorithm;
    }
    return absl::OkStatus();
  }, options);
  ASSERT_TRUE(status.ok()) << status;
  for (size_t c = 0; c < std::size(kCounts); ++c) {
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE(absl::StrCat("count ", kCounts[c], ", rank ", r));
      const Observed& o = observed[c][r];
      EXPECT_EQ(o.wrong, 0);
      EXPECT_EQ(algorithms[c][r], booked);
      const RankTraffic exact = ExactTraffic(primitive, Algorithm::kHierarchical, p, r, root,
                                             kCounts[c], sizeof(float), nodes);
      EXPECT_EQ(o.sent, exact.sent);
      EXPECT_EQ(o.recv, exact.recv);
      EXPECT_EQ(o.sent_to, ExactSentTo(primitive, Algorithm::kHierarchical, p, r, root, kCounts[c],
                                       sizeof(float), nodes));
    }
  }
}

std::string HierarchicalName(const ::testing::TestParamInfo<HierarchicalCase>& info) {
  auto [primitive, p, g] = info.param;
  return absl::StrCat(Name(primitive), "_", p, "ranks_", g, "a_node");
}

INSTANTIATE_TEST_SUITE_P(
    Placements, HierarchicalTest,
    ::testing::Combine(::testing::Values(Primitive::kAllReduce, Primitive::kReduceScatter,
                                         Primitive::kAllGather, Primitive::kBroadcast),
                       ::testing::Values(2, 3, 4, 6), ::testing::Values(1, 2, 3)),
    HierarchicalName);

// The seed's figure: on K nodes of G ranks, each rank sends 2(K-1)/K·M/G across nodes in
// an all-reduce of M bytes (the flat ring: 2(p-1)/p·M on the ranks at a node's edge), and
// the sums equal the ring's to within float rounding.
TEST(Hierarchical, AllReduceSendsTheSeedsInterNodeBytesAndTheRingsSums) {
  const int p = 6, g = 3, k = 2;
  const int64_t n = 6 * 1000;  // divided by every ring: the closed forms hold exactly
  const int64_t m = n * 4;
  CommOptions options = Options(Algorithm::kRing, kMaxChunkBytes);
  options.nodes = std::make_shared<const Nodes>(Nodes::Blocks(p, g).value());
  std::vector<LinkBytes> links(p);
  std::vector<std::vector<float>> ring(p), hier(p);
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    auto value = [&](int64_t i) { return std::sin(float(i) * 0.37f + float(comm.rank())) * 1e3f; };
    ASSIGN_OR_RETURN(Tensor a, Filled(comm, n, value));
    ASSIGN_OR_RETURN(Tensor b, Filled(comm, n, value));
    RETURN_IF_ERROR(comm.AllReduce(a, ReduceOp::kSum, Algorithm::kRing));
    comm.ledger().Clear();
    RETURN_IF_ERROR(comm.AllReduce(b, ReduceOp::kSum, Algorithm::kHierarchical));
    links[comm.rank()] =
        comm.ledger().SentByLink(*comm.options().nodes, [](const LedgerKey&) { return true; });
    ring[comm.rank()].assign(a.data<float>(), a.data<float>() + n);
    hier[comm.rank()].assign(b.data<float>(), b.data<float>() + n);
    return absl::OkStatus();
  }, options);
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(links[r].inter, 2 * (k - 1) * m / (k * g)) << r;
    EXPECT_EQ(links[r].intra, 2 * (g - 1) * m / g) << r;
    EXPECT_EQ(hier[r], hier[0]) << "every rank the same bits";
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(hier[r][i], ring[r][i], 1e-6f * 6e3f) << i;
    }
  }
}

// CommOptions::small_allreduce_bytes: an all-reduce of at most that many bytes that would
// run the ring runs recursive doubling and is booked as such, a larger one the ring; every
// rank ends with the same bits (a sum and an average of values no order sums exactly),
// within float rounding of the ring's.
TEST(RecursiveDoubling, SmallAllReducesRunItAndEveryRankHasTheSameBits) {
  for (int p : {2, 5, 8}) {
    const int64_t small = 16, large = 17;  // 64 bytes: the threshold; 68 bytes
    CommOptions options = Options(Algorithm::kRing, kMaxChunkBytes);
    options.small_allreduce_bytes = small * 4;
    std::vector<std::vector<float>> doubled(p), ringed(p), averaged(p);
    std::vector<std::vector<LedgerKey>> keys(p);
    absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
      auto value = [&](int64_t i) { return std::sin(float(i) * 0.37f + float(comm.rank())) * 1e3f; };
      ASSIGN_OR_RETURN(Tensor a, Filled(comm, small, value));
      ASSIGN_OR_RETURN(Tensor b, Filled(comm, large, value));
      ASSIGN_OR_RETURN(Tensor c, Filled(comm, small, value));
      RETURN_IF_ERROR(comm.AllReduce(a, ReduceOp::kSum));
      RETURN_IF_ERROR(comm.AllReduce(b, ReduceOp::kSum));
      RETURN_IF_ERROR(comm.AllReduce(c, ReduceOp::kAvg));
      for (const auto& [key, totals] : comm.ledger().calls()) keys[comm.rank()].push_back(key);
      doubled[comm.rank()].assign(a.data<float>(), a.data<float>() + small);
      ringed[comm.rank()].assign(b.data<float>(), b.data<float>() + large);
      averaged[comm.rank()].assign(c.data<float>(), c.data<float>() + small);
      return absl::OkStatus();
    }, options);
    ASSERT_TRUE(status.ok()) << status;
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE(absl::StrCat(p, " ranks, rank ", r));
      ASSERT_EQ(keys[r].size(), 2u);  // one row each, the two sums' and the average's apart
      EXPECT_EQ(keys[r][0].algorithm, Algorithm::kRing);
      EXPECT_EQ(keys[r][1].algorithm, Algorithm::kRecursiveDoubling);
      EXPECT_EQ(doubled[r], doubled[0]);
      EXPECT_EQ(averaged[r], averaged[0]);
      for (int64_t i = 0; i < small; ++i) {
        EXPECT_NEAR(doubled[r][i], ringed[r][i], 1e-6f * 1e3f * float(p)) << i;
        EXPECT_NEAR(averaged[r][i], doubled[r][i] / float(p), 1e-6f * 1e3f) << i;
      }
    }
  }
}

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
