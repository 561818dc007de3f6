// The MPI transport under mpirun (ctest label mpi, with 2, 3 and 4 processes): every
// collective gives the closed-form result, and every rank's ledger books, peer by peer,
// the bytes the same call books on the threads transport — the algorithms are the same
// code. MPI's own collectives (native) give the same results and book the ring's bytes.
//
// Each process runs every test; rank 0 prints. The fault tests end in a failed call, after
// which the transport fails every later wait on purpose (mpi_launch.h), so ctest runs
// them in a job of their own (--gtest_filter=MpiFaults.*).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/status_macros.h"
#include "tests/runtime/comm/transport_checks.h"

namespace tally::comm {
namespace {

using test_util::BytesByPeer;
using test_util::CheckedCall;
using test_util::LedgerOnThreads;
using test_util::Rooted;

LaunchOptions World() {
  LaunchOptions launch;
  launch.world_size = mpi::ProcessCount();
  launch.timeout = absl::Seconds(60);
  launch.comm.max_chunk_bytes = 4096;  // several messages per transfer
  return launch;
}

// Every primitive and algorithm on every count: the closed-form result, and the bytes the
// threads transport books for the same call. Returns how many calls were checked.
int CheckAgainstTheThreadsTransport(const LaunchOptions& launch, std::vector<int64_t> counts) {
  const int n = launch.world_size;
  int checked = 0;
  absl::Status status = mpi::RunMpiRank(launch, [&](Communicator& world) -> absl::Status {
    for (Primitive p : kAllPrimitives) {
      for (Algorithm a :
           {Algorithm::kRing, Algorithm::kNaive, Algorithm::kRecursiveDoubling}) {
        for (int64_t count : counts) {
          for (int root : Rooted(p) ? std::vector<int>{0, n - 1} : std::vector<int>{-1}) {
            const std::string what = absl::StrCat(Name(p), " ", Name(a), " count ", count,
                                                  " root ", root, " rank ", world.rank());
            world.ledger().Clear();
            ASSIGN_OR_RETURN(int64_t wrong, CheckedCall(world, p, a, count, root));
            EXPECT_EQ(wrong, 0) << what;
            ASSIGN_OR_RETURN(TrafficLedger threads,
                             LedgerOnThreads(n, world.rank(), p, a, count, root, launch.comm));
            EXPECT_EQ(BytesByPeer(world.ledger()), BytesByPeer(threads)) << what;
            ++checked;
          }
        }
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return checked;
}

TEST(MpiCollectives, ResultsAndBytesAreTheThreadsTransports) {
  EXPECT_GT(CheckAgainstTheThreadsTransport(World(), {0, 1, 7, 5000}), 80);
}

// With the default largest message, transfers of a few KiB (header, inline bytes and a
// rest) and of over 32 KiB (a bare header and the data in one message) both occur.
TEST(MpiCollectives, LargeMessagesGiveTheSameResultsAndBytes) {
  LaunchOptions launch = World();
  launch.comm.max_chunk_bytes = CommOptions().max_chunk_bytes;
  EXPECT_GT(CheckAgainstTheThreadsTransport(launch, {3000, 70000}), 40);
}

TEST(MpiCollectives, NativeCollectivesGiveTheResultsAndBookTheRingsBytes) {
  const LaunchOptions launch = World();
  const int n = launch.world_size;
  absl::Status status = mpi::RunMpiRank(launch, [&](Communicator& world) -> absl::Status {
    for (Primitive p : kAllPrimitives) {
      if (p == Primitive::kSendRecv) continue;  // point-to-point has no native form
      for (int64_t count : {0, 1, 7, 5000}) {
        const int root = Rooted(p) ? n - 1 : -1;
        const std::string what = absl::StrCat(Name(p), " count ", count, " rank ", world.rank());
        world.ledger().Clear();
        ASSIGN_OR_RETURN(int64_t wrong, CheckedCall(world, p, Algorithm::kNative, count, root));
        EXPECT_EQ(wrong, 0) << what;
        const RankTraffic ring = ExactTraffic(p, Algorithm::kRing, n, world.rank(), root, count, 4);
        const TransferTotals booked = world.ledger().Total();
        EXPECT_EQ(booked.bytes_sent, ring.sent) << what;
        EXPECT_EQ(booked.bytes_recv, ring.recv) << what;
        // An all-to-all-v has no native form: it runs the ring, and is booked as it.
        const Algorithm ran = p == Primitive::kAllToAllV ? Algorithm::kRing : Algorithm::kNative;
        for (const auto& [key, calls] : world.ledger().calls()) {
          EXPECT_EQ(key.algorithm, ran) << what;
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

TEST(MpiCollectives, SplitGroupsAreMpiCommunicators) {
  const LaunchOptions launch = World();
  const int n = launch.world_size;
  absl::Status status = mpi::RunMpiRank(launch, [&](Communicator& world) -> absl::Status {
    // Even and odd ranks, each group ordered by descending world rank.
    ASSIGN_OR_RETURN(auto group, world.Split(world.rank() % 2, -world.rank(), "parity"));
    const int members = (n + 1 - world.rank() % 2) / 2;
    EXPECT_EQ(group->size(), members);
    EXPECT_EQ(group->name(), "parity");
    ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({3}, DType::kF32, world.allocator()));
    for (int i = 0; i < 3; ++i) x.data<float>()[i] = float(world.rank());
    RETURN_IF_ERROR(group->AllReduce(x, ReduceOp::kSum));
    float expected = 0;
    for (int r = world.rank() % 2; r < n; r += 2) expected += float(r);
    EXPECT_EQ(x.data<float>()[2], expected);
    // Group rank 0 is the highest world rank of the group.
    EXPECT_EQ(group->world_rank_of(0), (n - 1) - ((n - 1) % 2 != world.rank() % 2 ? 1 : 0));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

// Rank 0 sums where the others take the maximum: rank 0 and rank 1 learn it from the
// first header they receive (ctest runs this on 2 processes).
TEST(MpiFaults, MismatchedCallsFailWithAMessageNamingBothSides) {
  LaunchOptions launch = World();
  launch.timeout = absl::Seconds(5);  // more ranks: the others wait for rank 1 in vain
  absl::Status status = mpi::RunMpiRank(launch, [&](Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({64}, DType::kF32, world.allocator()));
    absl::Status s = world.rank() == 0 ? world.AllReduce(x, ReduceOp::kSum)
                                       : world.AllReduce(x, ReduceOp::kMax);
    if (world.size() > 1 && world.rank() <= 1) {
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(absl::StrContains(s.message(), "reduce op")) << s;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::comm

// The other processes print their failures only, marked with their rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }

 private:
  int rank_;
};

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Every process runs the tests; rank 0 prints as usual. A failure anywhere fails the job.
  const int rank = tally::comm::mpi::ProcessRank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
