// Every primitive x algorithm x group size x count: exact results from closed-form inputs,
// and ledger bytes per rank equal to the exact formula, to the byte.
#include <cmath>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/comm/exact_traffic.h"
#include "runtime/comm/partition.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::RunRanks;

// Small pieces so that every count above 256 elements runs a multi-message ring.
constexpr size_t kMaxChunkBytes = 1024;
// 0, 1, a prime, one that every group size here divides... almost (1000), and one that
// none of 2..8 divides (1003); 1000 and 1003 floats span several 1 KiB pieces.
const int64_t kCounts[] = {0, 1, 7, 1000, 1003};

// Rank r's input element i for the reducing primitives; sums stay exact in fp32.
float Contribution(int r, int64_t i) { return float(10 * (r + 1) + i % 5); }
// The global vector the gathering primitives assemble.
float Global(int64_t i) { return float(i + 1); }

struct Observed {
  int64_t wrong = 0;  // elements that differ from the closed form
  int64_t sent = 0;
  int64_t recv = 0;
};

// Runs one call of `primitive` on this rank and returns how many output elements are wrong.
absl::StatusOr<int64_t> RunOne(Communicator& comm, Primitive primitive, Algorithm algorithm,
                               int64_t n) {
  int p = comm.size(), r = comm.rank(), root = p / 2;
  Chunk own = ChunkOf(n, p, r);
  int64_t wrong = 0;
  auto expect = [&](const Tensor& t, const std::function<float(int64_t)>& want) {
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) wrong += v[i] != want(i);
  };
  auto sum_over_ranks = [&](int64_t i) {
    float s = 0;
    for (int q = 0; q < p; ++q) s += Contribution(q, i);
    return s;
  };
  auto contribution = [&](int64_t i) { return Contribution(r, i); };
  switch (primitive) {
    case Primitive::kBroadcast: {
      ASSIGN_OR_RETURN(Tensor data, Filled(comm, n, [&](int64_t i) {
                         return r == root ? Global(i) : -1.0f;
                       }));
      RETURN_IF_ERROR(comm.Broadcast(data, root, algorithm));
      expect(data, Global);
      break;
    }
    case Primitive::kReduce: {
      ASSIGN_OR_RETURN(Tensor input, Filled(comm, n, contribution));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, r == root ? n : 0, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.Reduce(input, output, ReduceOp::kSum, root, algorithm));
      if (r == root) expect(output, sum_over_ranks);
      expect(input, contribution);  // inputs are never modified
      break;
    }
    case Primitive::kAllReduce: {
      ASSIGN_OR_RETURN(Tensor data, Filled(comm, n, contribution));
      RETURN_IF_ERROR(comm.AllReduce(data, ReduceOp::kSum, algorithm));
      expect(data, sum_over_ranks);
      break;
    }
    case Primitive::kReduceScatter: {
      ASSIGN_OR_RETURN(Tensor input, Filled(comm, n, contribution));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, own.count, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.ReduceScatter(input, output, ReduceOp::kSum, algorithm));
      expect(output, [&](int64_t i) { return sum_over_ranks(own.offset + i); });
      expect(input, contribution);
      break;
    }
    case Primitive::kAllGather: {
      ASSIGN_OR_RETURN(Tensor input,
                       Filled(comm, own.count, [&](int64_t i) { return Global(own.offset + i); }));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, n, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.AllGather(input, output, algorithm));
      expect(output, Global);
      break;
    }
    case Primitive::kScatter: {
      ASSIGN_OR_RETURN(Tensor input, Filled(comm, r == root ? n : 0, Global));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, own.count, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.Scatter(input, output, n, root, algorithm));
      expect(output, [&](int64_t i) { return Global(own.offset + i); });
      break;
    }
    case Primitive::kGather: {
      ASSIGN_OR_RETURN(Tensor input,
                       Filled(comm, own.count, [&](int64_t i) { return Global(own.offset + i); }));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, r == root ? n : 0, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.Gather(input, output, n, root, algorithm));
      if (r == root) expect(output, Global);
      break;
    }
    case Primitive::kAllToAll: {
      // Rank q's element i is 10000·q + i, so every output element names its source.
      ASSIGN_OR_RETURN(Tensor input, Filled(comm, n, [&](int64_t i) { return float(10000 * r + i); }));
      ASSIGN_OR_RETURN(Tensor output, Filled(comm, p * own.count, [](int64_t) { return -1.0f; }));
      RETURN_IF_ERROR(comm.AllToAll(input, output, algorithm));
      expect(output, [&](int64_t i) {
        int64_t from = own.count == 0 ? 0 : i / own.count;
        return float(10000 * from + own.offset + i % std::max<int64_t>(own.count, 1));
      });
      break;
    }
    case Primitive::kBarrier:
      RETURN_IF_ERROR(comm.Barrier(algorithm));
      break;
    case Primitive::kSendRecv:
      return absl::InvalidArgumentError("not a collective");
  }
  return wrong;
}

using Case = std::tuple<Primitive, Algorithm, int>;

class CollectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(CollectiveTest, ExactResultsAndExactBytes) {
  auto [primitive, algorithm, p] = GetParam();
  std::vector<int64_t> counts(std::begin(kCounts), std::end(kCounts));
  if (primitive == Primitive::kBarrier) counts = {0};
  // observed[count index][rank]
  std::vector<std::vector<Observed>> observed(counts.size(), std::vector<Observed>(p));
  CommOptions options;
  options.max_chunk_bytes = kMaxChunkBytes;
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    for (size_t c = 0; c < counts.size(); ++c) {
      comm.ledger().Clear();
      ASSIGN_OR_RETURN(int64_t wrong, RunOne(comm, primitive, algorithm, counts[c]));
      TransferTotals t = comm.ledger().Total();
      observed[c][comm.rank()] = {wrong, t.bytes_sent, t.bytes_recv};
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
                                         Primitive::kBarrier),
                       ::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                       ::testing::Values(1, 2, 3, 4, 5, 8)),
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
    }, CommOptions{Algorithm::kRing, kMaxChunkBytes});
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
